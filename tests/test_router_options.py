"""A router's settings are checked where they come in, in one line: `--router-option` before anything is written
(redkit/api.py: check_router_options builds the config), a module's config.json when it is loaded (load_module).
A temperature must be above 0 (0 divides by zero, a negative one turns the routing around), a scatter factor's rank
below φ's width, the Gaussian's shrinkage in [0, 1]."""

import json
from pathlib import Path

import pytest
from conftest import run_cli

from redkit.api import check_router_options
from redkit.errors import RedkitError
from redkit.fitting.replay_free import TUNED_ROUTER_OPTIONS
from redkit.modules.layers import Router, RouterConfig
from redkit.modules.store import CONFIG, ModuleMeta, load_module, save_module


@pytest.mark.parametrize(
    "router, options, says",
    [
        ("dense", {"temperature": 0}, "temperature must be above 0, not 0"),
        ("labels", {"temperature": -1.0}, "temperature must be above 0, not -1.0"),
        ("dense_labels", {"temperature": float("nan")}, "field 'temperature' = nan is not a float"),
        ("dense", {"temperature": "warm"}, "field 'temperature' = 'warm' is not a float"),
        (
            "gaussian",
            {"scatter_rank": -1},
            "scatter_rank must be 0 (the scatter whole) or below φ's width 2048, not -1",
        ),
        ("gaussian", {"width": 512, "scatter_rank": 512}, "below φ's width 512, not 512"),
        ("gaussian", {"shrinkage": 1.5}, "shrinkage must lie in [0, 1], not 1.5"),
        ("gaussian", {"routes_by": "ridge", "ridge": 0.0}, "routes_by ridge needs the ridge's class weights"),
    ],
)
def test_a_router_setting_out_of_its_type_or_range_is_refused_in_one_line(router, options, says):
    with pytest.raises(RedkitError) as err:
        check_router_options(router, options)
    assert says in str(err.value) and "--router-option" in str(err.value) and "\n" not in str(err.value)


def test_the_settings_in_range_pass():
    check_router_options("gaussian", {"scatter_rank": 384, "width": 2048, "shrinkage": 0.2})
    check_router_options("gaussian", {"routes_by": "ridge"})  # the ridge at from_run's ρ, as the run builds it
    check_router_options("gaussian", TUNED_ROUTER_OPTIONS)  # fit --owner-experts tuned's own options
    check_router_options("dense", {"temperature": 0.5, "hidden": 1024})
    check_router_options("labels", {"source": "classifier", "temperature": 2})


def test_federate_refuses_a_scatter_rank_beyond_the_width_before_writing(tmp_path, capsys):
    flags = ["--router-option", "width=512", "--router-option", "scatter_rank=600"]
    code, _, err = run_cli(["federate", "--data", tmp_path, "--out", tmp_path / "fed", *flags], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "scatter_rank must be 0" in err
    assert not (tmp_path / "fed").exists()


def test_a_router_whose_config_json_has_a_temperature_of_zero_is_refused_naming_the_file(tmp_path):
    router = Router(RouterConfig(dim=4, num_experts=2))
    save_module(tmp_path / "router", router, ModuleMeta("router", vars(router.config), "f" * 16))
    load_module(tmp_path / "router")  # as saved: loads
    path = Path(tmp_path / "router" / CONFIG)
    written = json.loads(path.read_text())
    written["config"]["temperature"] = 0.0
    path.write_text(json.dumps(written))
    with pytest.raises(
        RedkitError, match=r"config\.json: field 'config' does not describe a router \(temperature must"
    ):
        load_module(tmp_path / "router")

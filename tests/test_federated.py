"""Owners who never share their data (redkit/federated): each owner's contribution from its own data alone, the
server's checks (another backbone, a wrong sha256, a name that is a path, too large: refused in one line, nothing
written, the others assembled), and the whole app in Flower's simulation runtime: the model assembled over Flower
has the same module files (sha256) as the one-machine recipe, and is a fit run eval, export and predict read."""

import json
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from redkit.errors import RedkitError  # noqa: E402
from redkit.federated.assemble import accepted_in, assemble, check  # noqa: E402
from redkit.federated.owner import MANIFEST, package, train_contribution  # noqa: E402
from redkit.federated.plan import FederationPlan  # noqa: E402
from redkit.fitting.topics import write_topics  # noqa: E402

pytestmark = pytest.mark.slow  # loads the backbone, trains owners' modules


@pytest.fixture(scope="module")
def owners(tmp_path_factory) -> dict:
    """Three owners of one topics domain each, their contributions trained, and the plan."""
    from redkit.federated.federate import split_owners

    root = tmp_path_factory.mktemp("federated")
    data = write_topics(root / "topics", train=180, val=0, test=60, domains=3, labels_per_domain=3)
    directories, test, labels = split_owners(data, root / "fed", 0)
    plan = FederationPlan.of()
    work = {d.name: root / "work" / d.name for d in directories}
    manifests = {d.name: train_contribution(plan, d, work[d.name], print_fn=lambda *_: None) for d in directories}
    return {
        "root": root,
        "data": data,
        "dirs": directories,
        "test": test,
        "plan": plan,
        "work": work,
        "manifests": manifests,
    }


def _received(owners, name) -> dict[str, bytes]:
    return package(owners["work"][name], owners["manifests"][name])


def test_a_contribution_carries_module_files_and_no_example(owners):
    name = owners["dirs"][0].name
    received = _received(owners, name)
    assert all(rel == MANIFEST or rel.startswith("modules/") for rel in received)
    assert {Path(rel).parts[1] for rel in received if rel != MANIFEST} == {"experts", "label_rows", "statistics"}
    texts = [json.loads(line)["text"] for line in (owners["dirs"][0] / "train.jsonl").read_text().splitlines()]
    blob = b"".join(received.values())
    assert not any(t.encode() in blob for t in texts)  # no training text travels


def test_the_same_data_gives_the_same_contribution(owners, tmp_path):
    d = owners["dirs"][1]
    again = train_contribution(owners["plan"], d, tmp_path / "again", print_fn=lambda *_: None)
    weights = {
        rel: e["sha256"] for rel, e in owners["manifests"][d.name]["files"].items() if rel.endswith("safetensors")
    }
    assert len(weights) == 3 and all(again["files"][rel]["sha256"] == sha for rel, sha in weights.items())


def _tampered(owners, name, how):
    received = dict(_received(owners, name))
    manifest = json.loads(received[MANIFEST])
    if how == "backbone":
        manifest["fingerprint"] = "0" * 16
    elif how == "sha256":
        weights = next(rel for rel in received if rel.endswith("model.safetensors"))
        received[weights] = received[weights][:-1] + bytes([received[weights][-1] ^ 1])
    elif how == "path":
        rel = next(rel for rel in received if rel.endswith("config.json"))
        received["../../escape/config.json"] = received.pop(rel)
        manifest["files"]["../../escape/config.json"] = manifest["files"].pop(rel)
    received[MANIFEST] = json.dumps(manifest).encode()
    return received


@pytest.mark.parametrize(
    ("how", "says"),
    [("backbone", "trained on backbone 0000"), ("sha256", "does not have the sha256"), ("path", "leaves")],
)
def test_a_bad_contribution_is_refused_in_one_line_and_nothing_is_written(owners, tmp_path, how, says):
    name = owners["dirs"][0].name
    with pytest.raises(RedkitError) as err:
        check(_tampered(owners, name, how), owners["plan"], name, tmp_path)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == [] and not (tmp_path.parent / "escape").exists()


def test_a_contribution_over_the_limit_is_refused_and_the_others_assembled(owners, tmp_path):
    names = [d.name for d in owners["dirs"]]
    with pytest.raises(RedkitError, match="over the limit"):
        check(_received(owners, names[0]), owners["plan"], names[0], tmp_path / "accepted", limit=1000)
    (tmp_path / "accepted").mkdir(exist_ok=True)
    for name in names[1:]:
        check(_received(owners, name), owners["plan"], name, tmp_path / "accepted")
    run = assemble(owners["plan"], accepted_in(tmp_path / "accepted"), tmp_path / "model", print_fn=lambda *_: None)
    assert run.space.domains == tuple(sorted(names[1:]))


def test_over_flower_the_same_modules_as_on_one_machine_and_a_run_the_cli_reads(owners, capsys):
    from redkit.cli import main

    out = owners["root"] / "run"
    assert (
        main(["federate", "--data", str(owners["data"]), "--out", str(out), "--rounds", "1", "--joint-epochs", "1"])
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    assert results["same_modules"] is True and results["modules_compared"] == 13
    assert abs(results["red"]["accuracy"] - results["one_machine"]["accuracy"]) <= 1e-4
    assert results["red"]["accuracy"] >= 0.9 and not results["red"]["missing"] and not results["red"]["refused"]
    assert set(results) >= {"red", "one_machine", "same_modules", "fedavg", "joint_central"}
    round_ = results["fedavg"][0]
    assert round_["round"] == 1 and round_["bytes_up"] > 0 and round_["bytes_down"] > 0 and 0 <= round_["accuracy"] <= 1
    assert results["red"]["bytes_up"] > 0 and results["red"]["bytes_down"] > 0
    capsys.readouterr()
    assert main(["eval", "--run", str(out / "model"), "--data", str(owners["test"]), "--composition", "red"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("red "))
    assert abs(float(line.split()[1]) - results["red"]["accuracy"]) < 1e-9
    assert main(["predict", "--bundle", str(out / "bundle"), "how do I cancel my flight"]) == 0
    assert "cancel" in capsys.readouterr().out

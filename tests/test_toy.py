import json

import pytest
import torch
from torch import nn

from redkit.errors import RedkitError
from redkit_experiments.toy import ToyConfig, format_tables, reproduce_toy
from redkit_experiments.toy.data import COLUMNS, INTERVALS, accuracy_by_column, column_masks, full_grid
from redkit_experiments.toy.models import MLP, BasePlusResiduals, OutputAverage, Scaled, average_parameters, seeded
from redkit_experiments.toy.train import fit

SHORT = ToyConfig(seed=0, mlp_steps=150)  # linear models keep their full L-BFGS budget: it is cheap


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("toy")
    return out, reproduce_toy(out, SHORT, progress=False)


def test_grid_and_columns_partition_the_pairs():
    grid = full_grid()
    masks = column_masks(grid)
    assert len(grid.a) == 10_000 and list(masks) == list(COLUMNS)
    assert all(int(masks[f"{lo}-{hi}"].sum()) == (hi - lo + 1) ** 2 for lo, hi in INTERVALS)
    in_domains = sum(int(masks[f"{lo}-{hi}"].sum()) for lo, hi in INTERVALS)
    assert in_domains + int(masks["off-diagonal"].sum()) == 10_000


def test_accuracy_is_exact_answer_after_rounding():
    grid = full_grid()
    exact = grid.y  # (N, 1)
    assert accuracy_by_column(exact + 0.4 / 200, grid)["all"] == 1.0  # rounds back to a + b
    assert accuracy_by_column(exact + 1.0 / 200, grid)["all"] == 0.0  # one unit off everywhere


def test_linear_experts_find_the_shared_optimum(run):
    _, results = run
    for name, info in results["experiments"]["A"]["modules"].items():
        assert info["weight"] == pytest.approx([0.5, 0.5], abs=1e-3), name
        assert info["bias"] == pytest.approx(0.0, abs=1e-3), name
    accuracy = results["experiments"]["A"]["accuracy"]
    assert accuracy["parameter average"] == {c: 1.0 for c in COLUMNS}
    assert accuracy["output average"] == {c: 1.0 for c in COLUMNS}


def test_residual_base_is_linear_optimum(run):
    _, results = run
    c = results["experiments"]["C"]
    assert c["modules"]["base"]["weight"] == pytest.approx([0.5, 0.5], abs=1e-3)
    assert c["accuracy"]["base only"]["all"] == 1.0


def test_outputs_have_every_setting_and_column(run):
    out, results = run
    on_disk = json.loads((out / "toy_results.json").read_text())
    assert on_disk["seed"] == 0 and on_disk["config"]["mlp_steps"] == 150
    expected_rows = {
        "A": [f"expert {i} alone" for i in range(1, 6)] + ["parameter average", "output average"],
        "B": [f"expert {i} alone" for i in range(1, 6)] + ["parameter average", "output average"],
        "C": ["base only"]
        + [f"base + r{i}" for i in range(1, 6)]
        + ["base + mix (1/K each)", "base + parameter-averaged r"],
    }
    for key, rows in expected_rows.items():
        accuracy = on_disk["experiments"][key]["accuracy"]
        assert list(accuracy) == rows
        for row in rows:
            assert list(accuracy[row]) == list(COLUMNS)
            assert all(0.0 <= v <= 1.0 for v in accuracy[row].values())
    report = (out / "toy_report.md").read_text()
    assert report == format_tables(on_disk)
    for key, rows in expected_rows.items():
        assert f"## Experiment {key}" in report
        assert all(f"| {row} |" in report for row in rows)
    assert (out / "toy_true_vs_pred.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_same_seed_same_numbers(run, tmp_path):
    _, first = run
    second = reproduce_toy(tmp_path, SHORT, progress=False)
    assert second["experiments"] == first["experiments"]


@pytest.mark.slow
def test_residual_training_leaves_base_frozen():
    grid = full_grid()
    domain = grid.select(grid.in_interval(INTERVALS[0]))
    base = nn.Linear(2, 1)
    before = [p.clone() for p in base.parameters()]
    residual = seeded(0, lambda: Scaled(MLP(8), 0.1))
    fit(BasePlusResiduals(base, [residual], [1.0]), domain.x, domain.y, "adam", 20, 1e-2)
    assert all(torch.equal(b, p) for b, p in zip(before, base.parameters()))
    assert not all(
        torch.equal(p, q) for p, q in zip(residual.parameters(), seeded(0, lambda: Scaled(MLP(8), 0.1)).parameters())
    )


def test_parameter_and_output_averages():
    experts = [seeded(i, lambda: nn.Linear(2, 1)) for i in range(3)]
    merged = average_parameters(experts)
    mean_weight = torch.stack([e.weight for e in experts]).mean(dim=0)
    assert torch.allclose(merged.weight, mean_weight)
    x = torch.rand(4, 2)
    with torch.no_grad():  # for linear maps both averages coincide
        assert torch.allclose(OutputAverage(experts)(x), merged(x), atol=1e-6)
    assert merged is not experts[0] and not torch.equal(experts[0].weight, merged.weight)


@pytest.mark.parametrize("field, value", [("mlp_optimizer", "sgd"), ("base_data", "diagonal"), ("mlp_steps", 0)])
def test_bad_config_is_a_user_error(field, value):
    with pytest.raises(RedkitError, match=field):
        ToyConfig(**{field: value})

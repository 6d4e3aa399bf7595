"""The 5-domain digits benchmark end to end through the real CLI, on tiny epoch caps: what
results.json, splits.json and the module directories hold, `--run red`, reruns, MNIST IDX input."""

import json

import numpy as np
import pytest
from test_idx import write_idx

from redkit.cli import main
from redkit.compositions import COMPOSITIONS
from redkit.metrics import classification_metrics
from redkit_experiments.digits import RUN_MODES

DOMAINS = ("d01", "d23", "d45", "d67", "d89")
QUICK = ("--max_epochs", "2")


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("digits") / "run"
    argv = ["reproduce", "digits", "--out", str(out), *QUICK]
    assert main(argv) == 0
    return out, argv


def _read(path):
    return json.loads(path.read_text())


def test_results_hold_every_composition_overall_and_per_domain(digits_run):
    out, _ = digits_run
    results, splits = _read(out / "results.json"), _read(out / "splits.json")
    test = results["splits"]["test"]
    assert set(test) == set(COMPOSITIONS.names())
    for metrics in test.values():
        overall = metrics["overall"]
        for key in ("accuracy", "macro_precision", "macro_recall", "macro_f1", "weighted_f1"):
            assert 0.0 <= overall[key] <= 1.0
        assert set(overall["per_class"]) == {str(d) for d in range(10)}
        assert set(overall["per_class"]["7"]) == {"precision", "recall", "f1", "support"}
        matrix = np.array(overall["confusion_matrix"])
        assert matrix.shape == (10, 10) and matrix.sum() == overall["n"] == splits["splits"]["test"]["count"]
        assert set(metrics["per_domain"]) == set(DOMAINS)
        assert sum(d["n"] for d in metrics["per_domain"].values()) == overall["n"]
        assert set(metrics["per_domain"]["d45"]["per_class"]) == {"4", "5"}
    assert set(results["router"]) == set(results["gate"]) == {"train", "val", "test"}
    assert results["seed"] == 0 and results["config"]["backbone"]["hidden"] == 128
    assert results["provenance"]["versions"]["torch"]
    assert {"data", "base", "experts", "heads", "router", "gate", "evaluate"} <= set(results["wall_seconds_per_stage"])
    report = (out / "report.md").read_text()
    assert "| red |" in report and "d89" in report and "RED router" in (out / "digits.log").read_text()


def test_splits_add_up(digits_run):
    out, _ = digits_run
    summary = _read(out / "splits.json")
    s, sizes = summary["splits"], summary["source"]["sizes"]
    assert summary["source"]["name"] == "sklearn-digits" and sum(sizes.values()) == 1797
    assert s["train"]["count"] + s["val"]["count"] == sizes["train"] and s["test"]["count"] == sizes["test"]
    train, val, base = (set(s[name]["indices"]) for name in ("train", "val", "base"))
    assert not train & val and base <= train
    for split in s.values():
        assert (
            len(split["indices"])
            == split["count"]
            == sum(split["per_domain"].values())
            == sum(split["per_class"].values())
        )
    assert abs(s["base"]["count"] - 0.1 * s["train"]["count"]) <= 10  # stratified rounding per digit


def test_modules_are_safetensors_directories(digits_run):
    out, _ = digits_run
    modules = out / "modules"
    expected = ["backbone", "classifier", "router", "gate", "heads/global_full"]
    expected += [f"experts/{kind}/{d}" for kind in ("residual", "logit") for d in DOMAINS] + [
        f"heads/{d}" for d in DOMAINS
    ]
    for name in expected:
        assert (modules / name / "config.json").is_file() and (modules / name / "model.safetensors").is_file(), name
    assert not list(modules.rglob("checkpoint.*"))
    backbone, expert = (
        _read(modules / "backbone" / "config.json"),
        _read(modules / "experts" / "residual" / "d23" / "config.json"),
    )
    assert backbone["config"] == {"input_dim": 64, "hidden": 128, "depth": 2, "activation": "gelu"}
    assert expert["backbone_fingerprint"] == backbone["backbone_fingerprint"] and expert["domain"] == 1


def test_rerun_trains_nothing(digits_run):
    out, argv = digits_run
    epochs = (out / "log.jsonl").read_text().count('"epoch"')
    before = _read(out / "results.json")["splits"]["test"]["red"]["overall"]["accuracy"]
    assert main(argv) == 0
    assert (out / "log.jsonl").read_text().count('"epoch"') == epochs
    assert _read(out / "results.json")["splits"]["test"]["red"]["overall"]["accuracy"] == before


@pytest.mark.slow
def test_run_red_trains_no_heads_or_gate(tmp_path):
    out = tmp_path / "red"
    assert main(["reproduce", "digits", "--run", "red", "--out", str(out), *QUICK]) == 0
    assert not (out / "modules" / "heads").exists() and not (out / "modules" / "gate").exists()
    results = _read(out / "results.json")
    assert tuple(results["splits"]["test"]) == RUN_MODES["red"].compositions
    assert set(RUN_MODES["red"].compositions) == {
        "base_classifier",
        "red",
        "red_oracle",
        "red_uniform",
        "red_logit_experts",
    }
    assert "gate" not in results and set(results["router"]) == {"train", "val", "test"}


@pytest.mark.slow
def test_mnist_idx_files_through_data_dir(tmp_path):
    rng = np.random.default_rng(0)
    data = tmp_path / "mnist"
    data.mkdir()
    for prefix, n in (("train", 200), ("t10k", 60)):
        write_idx(data / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), gz=True)
        write_idx(data / f"{prefix}-labels-idx1-ubyte", np.arange(n, dtype=np.uint8) % 10)
    out = tmp_path / "run"
    assert (
        main(
            [
                "reproduce",
                "digits",
                "--data_dir",
                str(data),
                "--out",
                str(out),
                "--run",
                "red",
                "--hidden",
                "16",
                *QUICK,
            ]
        )
        == 0
    )
    summary, results = _read(out / "splits.json"), _read(out / "results.json")
    assert summary["source"]["name"] == "mnist" and summary["source"]["sizes"] == {"train": 200, "test": 60}
    assert summary["splits"]["val"]["count"] == 20 and summary["splits"]["base"]["count"] == 20
    assert results["splits"]["test"]["red"]["overall"]["n"] == 60
    assert _read(out / "modules" / "backbone" / "config.json")["config"]["input_dim"] == 784


def test_bad_settings_are_one_line_errors(tmp_path, capsys):
    assert main(["reproduce", "digits", "--data_dir", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r")]) == 2
    assert "MNIST directory not found" in capsys.readouterr().err
    assert main(["reproduce", "digits", "--val_ratio", "1.5", "--out", str(tmp_path / "r")]) == 2
    assert "val_ratio" in capsys.readouterr().err


def test_classification_metrics_by_hand():
    true = np.array([0, 0, 1, 1, 2, 3])
    pred = np.array([0, 1, 1, 1, 3, 3])
    m = classification_metrics(pred, true, domain_of_class=("a", "a", "b", "b"))
    assert m["overall"]["accuracy"] == pytest.approx(4 / 6)
    assert m["overall"]["confusion_matrix"] == [[1, 1, 0, 0], [0, 2, 0, 0], [0, 0, 0, 1], [0, 0, 0, 1]]
    assert m["overall"]["per_class"]["1"] == {
        "precision": pytest.approx(2 / 3),
        "recall": 1.0,
        "f1": pytest.approx(0.8),
        "support": 2,
    }
    assert m["per_domain"]["a"]["accuracy"] == 0.75 and m["per_domain"]["a"]["domain_accuracy"] == 1.0
    assert m["per_domain"]["b"]["accuracy"] == 0.5 and set(m["per_domain"]["b"]["per_class"]) == {"2", "3"}
    assert m["overall"]["domain_accuracy"] == 1.0


def test_reproduce_toy_is_wired(tmp_path, monkeypatch, capsys):
    import redkit_experiments.toy

    seen = {}
    monkeypatch.setattr(
        redkit_experiments.toy, "reproduce_toy", lambda out, config: seen.update(out=out, seed=config.seed) or {}
    )
    monkeypatch.setattr(redkit_experiments.toy, "format_tables", lambda results: "TOY TABLES")
    assert main(["reproduce", "toy", "--out", str(tmp_path), "--seed", "3"]) == 0
    assert seen == {"out": tmp_path, "seed": 3} and "TOY TABLES" in capsys.readouterr().out

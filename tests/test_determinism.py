"""Same seed, same machine, same thread count: a tiny pipeline run twice from nothing gives every
metric exactly and every module's weights to the byte; results.json records what would tell two
runs on other machines or settings apart (README, "Same seed, same numbers")."""

import json

from conftest import TINY_RUN_ARGS

from redkit.cli import main

TIMING_KEYS = ("provenance", "wall_seconds_per_stage", "wall_seconds_this_call")


def test_a_tiny_pipeline_twice_gives_identical_metrics_and_modules(tiny_run, tmp_path):
    again = tmp_path / "again"
    assert main(["reproduce", "task1", *TINY_RUN_ARGS, "--out", str(again)]) == 0
    first, second = (json.loads((run / "results.json").read_text()) for run in (tiny_run, again))
    assert {k: v for k, v in first.items() if k not in TIMING_KEYS} == {
        k: v for k, v in second.items() if k not in TIMING_KEYS
    }
    assert first["splits"]["test"]["red"]["accuracy"] == second["splits"]["test"]["red"]["accuracy"]  # not vacuous
    weights = {
        run: {str(p.relative_to(run)): p.read_bytes() for p in sorted((run / "modules").rglob("model.safetensors"))}
        for run in (tiny_run, again)
    }
    assert len(weights[again]) >= 19 and weights[tiny_run] == weights[again]


def test_results_record_what_changes_the_bits(tiny_run):
    provenance = json.loads((tiny_run / "results.json").read_text())["provenance"]
    machine, numerics = provenance["machine"], provenance["numerics"]
    assert machine["torch_threads"] >= 1 and machine["cpu_capability"] and machine["cpu"]["model"]
    assert numerics["torch"] and numerics["blas"] and numerics["deterministic_algorithms"] in (True, False)
    assert "interop_threads" in numerics and "cudnn" in numerics and isinstance(numerics["env"], dict)

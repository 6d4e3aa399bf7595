"""Decomposed execution: operation domains, program execution plumbing, and a tiny end-to-end run."""

import json

import pytest

from redkit.cli import main
from redkit.data.records import Example
from redkit.errors import RedkitError
from redkit.programs import exact
from redkit.steps import StepsConfig, StepsRun
from redkit.steps.benchmark import MODES, program_set
from redkit.steps.execute import execution_metrics


def test_exact_execution_of_gold_programs_is_perfect():
    programs, answers = program_set(StepsConfig(), n=500)
    metrics = execution_metrics(programs, answers, lambda calls: [exact(*c) for c in calls])
    assert metrics["all"]["accuracy"] == 1.0 and metrics["all"]["n"] == len(programs)
    assert {"2-step", "3-step", "4-step"} <= set(metrics)


def test_a_wrong_step_function_is_caught():
    programs, answers = program_set(StepsConfig(), n=500)
    metrics = execution_metrics(programs, answers, lambda calls: [exact(*c) + 1 for c in calls])
    assert metrics["all"]["accuracy"] == 0.0


def test_domains_are_operations(tmp_path):
    run = StepsRun(tmp_path / "run", StepsConfig())
    assert run.space.domains == ("add", "sub")
    sub = Example(id=0, question="What is 9 minus 4?", answer=5, label=0, operation="sub")
    assert run.domain_label(sub) == 1
    with pytest.raises(RedkitError, match="'mul' has no expert"):
        run.domain_label(Example(id=1, question="What is 3 times 4?", answer=12, label=0, operation="mul"))


def test_tiny_steps_run_reports_every_mode(tmp_path):
    out = tmp_path / "steps"
    assert main(["reproduce", "steps", "--n", "300", "--programs", "300", "--max-epochs", "1", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    gold = results["execution"]["gold"]
    assert set(gold) == set(MODES)
    for metrics in gold.values():
        assert 0.0 <= metrics["all"]["accuracy"] <= 1.0 and metrics["all"]["n"] == 30
    assert json.loads((out / "data" / "splits.json").read_text())["operations"] == ["add", "sub"]
    assert (out / "modules" / "experts" / "residual" / "sub" / "model.safetensors").is_file()

"""Decomposed execution: operation domains, program execution plumbing, and a tiny end-to-end run."""

import json
import re
import shutil

import pytest

from redkit.cli import main
from redkit.errors import RedkitError
from redkit_experiments.arithmetic.programs import exact, parse_program
from redkit_experiments.arithmetic.records import Example, read_jsonl
from redkit_experiments.decomposer import DecomposerConfig, decomposer_data, train_decomposer
from redkit_experiments.steps import StepsConfig, StepsRun
from redkit_experiments.steps.benchmark import MODES, SOURCES
from redkit_experiments.steps.execute import execution_metrics
from redkit_experiments.steps.questions import evaluate_questions


def _gold(n: int) -> tuple[list, list[int]]:
    test = decomposer_data(DecomposerConfig(n=n))["test"]
    return [parse_program(ex.program) for ex in test], [ex.answer for ex in test]


def test_exact_execution_of_gold_programs_is_perfect():
    programs, answers = _gold(500)
    metrics = execution_metrics(programs, answers, lambda calls: [exact(*c) for c in calls])
    assert metrics["all"]["accuracy"] == 1.0 and metrics["all"]["n"] == len(programs)
    assert {"2-step", "3-step", "4-step"} <= set(metrics)


def test_a_wrong_step_function_is_caught():
    programs, answers = _gold(500)
    metrics = execution_metrics(programs, answers, lambda calls: [exact(*c) + 1 for c in calls])
    assert metrics["all"]["accuracy"] == 0.0


def test_domains_are_operations(tmp_path):
    run = StepsRun(tmp_path / "run", StepsConfig())
    assert run.space.domains == ("add", "sub")
    sub = Example(id=0, question="What is 9 minus 4?", answer=5, label=0, operation="sub")
    assert run.domain_label(sub) == 1
    with pytest.raises(RedkitError, match="'mul' has no expert"):
        run.domain_label(Example(id=1, question="What is 3 times 4?", answer=12, label=0, operation="mul"))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("steps") / "steps"
    assert main(["reproduce", "steps", "--n", "300", "--programs", "300", "--max-epochs", "1", "--out", str(out)]) == 0
    return out


def test_tiny_steps_run_reports_every_mode(tiny_run):
    out = tiny_run
    results = json.loads((out / "results.json").read_text())
    assert set(results["execution"]) == set(SOURCES)
    for by_mode in results["execution"].values():
        assert set(by_mode) == set(MODES)
        for metrics in by_mode.values():
            assert 0.0 <= metrics["all"]["accuracy"] <= 1.0 and metrics["all"]["n"] == 30
    assert set(results["decomposer"]["splits"]) == {"test", "test_heldout_templates"}
    assert (out / "decomposer" / "module" / "model.safetensors").is_file()
    assert json.loads((out / "data" / "splits.json").read_text())["operations"] == ["add", "sub"]
    assert (out / "modules" / "experts" / "residual" / "sub" / "model.safetensors").is_file()


def test_predict_on_a_steps_run_prints_the_program_and_every_step(tiny_run, capsys):
    assert main(["predict", "--run", str(tiny_run), "If you subtract 5 from 12 and add 9, what do you get?"]) == 0
    out = capsys.readouterr().out
    assert "program:" in out and "Answer: x2" in out
    steps = re.findall(
        r"step (\d): '(What is [^']+)'  expert weights: add ([\d.]+)  sub ([\d.]+)  -> x\d = (-?\d+)", out
    )
    assert [k for k, *_ in steps] == ["1", "2"]
    assert all(abs(float(a) + float(b) - 1) < 2e-3 for _, _, a, b, _ in steps)  # router weights sum to 1
    assert steps[1][1].startswith(f"What is {steps[0][4]} ")  # step 2 is asked with step 1's value
    assert re.search(r"^answer: -?\d+", out, re.M)


def test_eval_on_a_steps_run_decomposes_and_executes_a_file(tiny_run, tmp_path, capsys):
    rows = [
        {
            "question": "What is 12 minus 5 plus 9?",
            "answer": 16,
            "program": "Step 1: 12 - 5 = x1\nStep 2: x1 + 9 = x2\nAnswer: x2",
        },
        {
            "question": "Compute 40 plus 3, then subtract 20.",
            "answer": 23,
            "program": "Step 1: 40 + 3 = x1\nStep 2: x1 - 20 = x2\nAnswer: x2",
        },
        {"question": "What is 30 minus 7?", "answer": 23, "program": "Step 1: 30 - 7 = x1\nAnswer: x1"},
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["eval", "--run", str(tiny_run), "--data", str(path), "--composition", "red"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"3 questions, decomposed and executed; program exact-match (0|1)\.\d{4}", out)
    assert "1-step acc" in out and "2-step acc" in out and "n: all 3, 1-step 1, 2-step 2" in out


def test_eval_decomposes_records_that_have_no_program(tiny_run, tmp_path, capsys):
    """The original authors' add/sub format (question and answer only), any integer answer, and a
    file mixing records with and without programs: every record is decomposed and executed."""
    plain = [
        {"question": "What is 3 plus 16?", "answer": 19},
        {"question": "What is 5 minus 30 plus 40?", "answer": 15},
        {"question": "What is 2 minus 50 minus 50 minus 50?", "answer": -148},
    ]
    path = tmp_path / "plain.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in plain))
    assert main(["eval", "--run", str(tiny_run), "--data", str(path), "--composition", "red"]) == 0
    out = capsys.readouterr().out
    assert "3 questions, decomposed and executed; program exact-match n/a (no record has a program)" in out
    assert re.search(r"n: all 3, 1-step 1, 2-step 1, 3-step 1", out)
    mixed = plain + [
        {"question": "What is 12 minus 5 plus 9?", "answer": 16, "program": ""},
        {"question": "What is 30 minus 7?", "answer": 23, "program": "Step 1: 30 - 7 = x1\nAnswer: x1"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in mixed))
    result = evaluate_questions(StepsRun(tiny_run), read_jsonl(path, answers=None), ["red", "red_oracle"])
    assert result["n"] == 5 and result["with_program"] == 1 and result["program_exact_match"] in (0.0, 1.0)
    assert set(result["compositions"]) == {"red", "red_oracle"} and result["compositions"]["red"]["all"]["n"] == 5


def test_stage_base_validates_on_a_fixed_balanced_sample_of_val(tiny_run, tmp_path):
    shutil.copytree(tiny_run / "data", tmp_path / "run" / "data")
    (tmp_path / "run" / "data" / "base_val_subset.json").unlink(missing_ok=True)
    run = StepsRun(tmp_path / "run", StepsConfig(base_val_examples=20))
    sample = run.base_val_subset()
    val = run.splits["val"]
    assert len(sample) == 20 and len(val) > 20
    assert sorted(run.domain_label(val[i]) for i in sample) == [0] * 10 + [1] * 10
    (tmp_path / "run" / "data" / "base_val_subset.json").unlink()
    assert run.base_val_subset() == sample  # drawn again from the seed: the same sample
    run.config.base_val_examples = None
    assert run.base_val_subset() == list(range(len(val)))


def test_the_steps_run_answers_every_value_a_chain_reaches(tiny_run):
    run = StepsRun(tiny_run)
    assert run.space.value_range == (-148, 200)
    classifier = json.loads((tiny_run / "modules" / "classifier" / "config.json").read_text())
    assert classifier["config"]["num_classes"] == 349
    results = json.loads((tiny_run / "results.json").read_text())
    assert results["task2"]["n"] == 30 and set(results["task2"]["compositions"]) == set(MODES.values())


def test_eval_names_a_question_it_cannot_decompose(tiny_run, tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "What is 7?", "answer": 7}) + "\n")
    assert main(["eval", "--run", str(tiny_run), "--data", str(path)]) == 2
    assert "'What is 7?'" in capsys.readouterr().err


def test_a_multiplication_expert_plugs_in_without_retraining_anything_else(tiny_run, tmp_path):
    out = tmp_path / "steps-mul"
    parent_files = {p: p.read_bytes() for p in tiny_run.rglob("*") if p.is_file() and "cache" not in p.parts}
    assert main(["add-expert", "--run", str(tiny_run), "--operation", "mul", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["frozen_modules_unchanged"] is True
    assert "experts/residual/add" in results["frozen_modules"] and "backbone_top" in results["frozen_modules"]
    for name in ("add", "sub"):  # the copies are the parent's weights, byte for byte
        weights = ("modules", "experts", "residual", name, "model.safetensors")
        assert (out.joinpath(*weights)).read_bytes() == tiny_run.joinpath(*weights).read_bytes()
    assert (out / "modules" / "experts" / "residual" / "mul" / "model.safetensors").is_file()
    assert json.loads((out / "modules" / "router" / "config.json").read_text())["config"]["num_experts"] == 3
    assert set(results["before"]) == set(results["after"]) == set(SOURCES)
    assert {p: p.read_bytes() for p in parent_files} == parent_files  # the parent run is only read
    assert main(["add-expert", "--run", str(tiny_run), "--operation", "add", "--out", str(tmp_path / "again")]) == 2


def test_a_training_free_router_plugs_a_new_expert_in_with_no_router_training(tiny_run, tmp_path):
    out = tmp_path / "steps-mul-prototype"
    argv = ["add-expert", "--run", str(tiny_run), "--operation", "mul", "--router", "prototype", "--out", str(out)]
    assert main(argv) == 0
    router = json.loads((out / "modules" / "router" / "config.json").read_text())
    assert router["kind"] == "router_prototype" and router["metrics"]["epochs"] == 0


def test_a_decomposer_trained_on_other_data_is_not_reused(tiny_run):
    """Its test split could hold questions it was trained on."""
    with pytest.raises(RedkitError, match="trained on other data"):
        train_decomposer(tiny_run / "decomposer", DecomposerConfig(n=400), print_fn=lambda _: None)


def test_a_steps_bundle_decomposes_and_executes_as_its_run(tiny_run, tmp_path):
    """The bundle carries the decomposer; with no data, its executor encodes every step itself
    (the run reads the steps of its splits from its feature cache) and gets the same answers."""
    from redkit.bundle.export import export_bundle
    from redkit.run import open_run

    bundle = tmp_path / "bundle"
    export_bundle(tiny_run, bundle)
    assert (bundle / "decomposer" / "module" / "model.safetensors").is_file() and not (bundle / "data").exists()
    rows = [
        {"question": "What is 12 minus 5 plus 9?", "answer": 16},
        {"question": "What is 30 minus 7?", "answer": 23},
        {"question": "What is 2 minus 50 minus 50 minus 50?", "answer": -148},
    ]
    path = tmp_path / "plain.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples = read_jsonl(path, answers=None)
    from_run = evaluate_questions(StepsRun(tiny_run), examples, ["red", "red_uniform"])
    assert evaluate_questions(open_run(bundle), examples, ["red", "red_uniform"]) == from_run

"""`redkit fit` on a generated non-arithmetic set (short requests in 4 topics x 3 intents), through
the CLI and the Python API: one tiny fitted run per module (one epoch per stage), shared."""

import contextlib
import hashlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import run_cli

from redkit.fitting.topics import topic_records, write_topics

README = Path(__file__).resolve().parent.parent / "README.md"
FIT_ARGS = ("--max-epochs", "1")


def _readme_snippet() -> str:
    text = README.read_text()
    start = text.index("The same from Python")
    return re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)


def _digest(directory: Path, pattern: str = "*") -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob(pattern))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> tuple[Path, Path, str]:
    """(data dir, run dir, what fit printed): the README's data, fitted with the CLI."""
    from redkit.cli import main

    root = tmp_path_factory.mktemp("fit")
    data = write_topics(root / "data" / "topics", train=240, val=0, test=80, domains=4, labels_per_domain=3)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["fit", "--data", str(data), "--out", str(root / "run"), *FIT_ARGS])
    assert code == 0
    return data, root / "run", out.getvalue()


def test_fit_records_classes_domains_and_writes_the_report(fitted):
    data, run, printed = fitted
    config = json.loads((run / "config.json").read_text())
    labels = sorted({r["label"] for r in map(json.loads, (data / "train.jsonl").read_text().splitlines())})
    assert config["labels"] == labels and config["domains"] == ["banking", "cooking", "health", "travel"]
    assert (run / "config.yaml").is_file() and "labels:" in (run / "config.yaml").read_text()
    assert printed.count("no val file") == 1 and printed.count("no test") == 0
    splits = json.loads((run / "data" / "splits.json").read_text())["splits"]
    assert splits["train"]["count"] + splits["val"]["count"] == 240 and splits["test"]["count"] == 80
    assert all(n >= 1 for n in splits["val"]["per_domain"].values())  # stratified by domain
    report = (run / "report.md").read_text()
    assert (
        "Domain accuracy" in report and "Accuracy by domain (test)" in report and "range" not in report.split("##")[1]
    )
    results = json.loads((run / "results.json").read_text())
    red = results["splits"]["test"]["red"]
    assert set(red["by_domain"]) == set(config["domains"]) and 0 <= red["domain_accuracy"] <= 1


def test_readme_snippet_through_the_api_gives_the_cli_numbers(fitted, tmp_path, monkeypatch, capsys):
    """The README's Python block runs as written, and the API run (same data, seed and settings)
    gives exactly the CLI run's numbers."""
    _, cli_run, _ = fitted
    monkeypatch.chdir(tmp_path)
    exec(compile(_readme_snippet(), "README.md", "exec"), {})
    api_results = json.loads((tmp_path / "runs" / "topics" / "results.json").read_text())
    cli_results = json.loads((cli_run / "results.json").read_text())
    assert api_results["splits"] == cli_results["splits"]


def test_api_predict_and_load(fitted):
    import redkit

    _, run_dir, _ = fitted
    run = redkit.load(run_dir)
    predictions = run.predict(["refund the fee on my card", "give me a recipe for soup"])
    assert len(predictions) == 2
    for p in predictions:
        assert p.label in run.labels and 0 < p.probability <= 1
        assert list(p.weights) == list(run.domains) and abs(sum(p.weights.values()) - 1) < 1e-5


def test_readme_red_module_block_on_the_run_predicts_what_the_api_predicts(fitted, tmp_path, monkeypatch, capsys):
    """The README's second block under "RED in your own training loop" runs as written on the fitted
    run: the RED model saved, loaded with from_pretrained and put around the run's backbone gives
    the API's labels, probabilities and expert weights on raw text."""
    import torch
    from test_red import readme_block

    import redkit

    _, run_dir, _ = fitted
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "topics").symlink_to(run_dir)
    names: dict = {}
    exec(compile(readme_block("## RED in your own training loop", 1), "README.md", "exec"), names)
    saved = tmp_path / "runs" / "topics-red"
    assert sorted(p.name for p in saved.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    card = (saved / "README.md").read_text()
    red_accuracy = json.loads((run_dir / "results.json").read_text())["splits"]["test"]["red"]["accuracy"]
    assert f"| test | red | 80 | {red_accuracy:.4f} |" in card and names["red"].card["backbone_fingerprint"] in card
    texts = ["hi, refund the fee on my card please", "which gate does my flight leave from?"]
    expected = redkit.load(run_dir).predict(texts)
    out, red = names["out"], names["red"]
    for prediction, probs, alpha in zip(expected, out.logits.softmax(-1), out.alpha):
        assert red.config.labels[int(probs.argmax())] == prediction.label
        assert abs(float(probs.max()) - prediction.probability) < 1e-5
        assert torch.allclose(alpha, torch.tensor(list(prediction.weights.values())), atol=1e-5)
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_a_bundle_of_a_fit_run_predicts_and_evaluates_as_the_run(fitted, tmp_path, capsys):
    import redkit

    data, run_dir, _ = fitted
    code, _, err = run_cli(["export", "--run", run_dir, "--out", tmp_path / "bundle", "--heads"], capsys)
    assert code == 0, err
    run, bundle = redkit.load(run_dir), redkit.load(tmp_path / "bundle")
    texts = ["refund the fee on my card", "give me a recipe for soup"]
    assert run.predict(texts) == bundle.predict(texts)
    from_run, from_bundle = run.evaluate(data / "test.jsonl"), bundle.evaluate(data / "test.jsonl")
    # A bundle carries RED's modules, not the non-modular references (joint, linear_probe) trained beside them.
    assert {name: m for name, m in from_run.items() if name not in ("joint", "linear_probe")} == from_bundle
    assert not (tmp_path / "bundle" / "cache").exists()  # nothing written into the bundle


def test_a_bundle_carries_the_runs_oos_thresholds_and_says_out_of_scope_as_the_run(fitted, tmp_path):
    """oos.json (`fit --oos`) travels in the bundle, listed in its manifest (verified on open), with the
    thresholds a bundle can apply; one whose score compares with the training features (knn) is left
    out, and export says so."""
    import redkit
    from redkit.bundle.export import describe, export_bundle
    from redkit.bundle.manifest import MANIFEST

    data, run_dir, _ = fitted
    run = shutil.copytree(run_dir, tmp_path / "run")
    texts = [json.loads(line)["text"] for line in (data / "test.jsonl").read_text().splitlines()[:6]]
    confidence = sorted(p.probability for p in redkit.load(run).predict(texts))
    chosen = {"red": {"score": "msp", "threshold": (confidence[1] + confidence[2]) / 2}}
    (run / "oos.json").write_text(json.dumps(chosen | {"moe": {"score": "knn", "threshold": 0.5}}))
    from_run = [p.out_of_scope for p in redkit.load(run).predict(texts)]
    assert from_run.count(True) == 2
    manifest = export_bundle(run, tmp_path / "bundle")
    bundle = tmp_path / "bundle"
    assert "oos.json" in manifest["files"] and json.loads((bundle / "oos.json").read_text()) == chosen
    assert manifest["oos_left_out"] == {"moe": "knn"}
    assert "no OOS threshold for moe (knn): its score needs the run's training features" in describe(bundle, manifest)
    assert [p.out_of_scope for p in redkit.load(bundle).predict(texts)] == from_run
    assert json.loads((bundle / MANIFEST).read_text())["files"]["oos.json"]["sha256"]  # verified on every open


def test_eval_counts_an_unseen_label_as_wrong(fitted, tmp_path, capsys):
    import redkit

    data, run_dir, _ = fitted
    rows = (data / "test.jsonl").read_text().splitlines()[:30]
    unseen = [
        json.dumps({"text": "what is the weather on mars", "label": "weather", "domain": "travel"}),
        json.dumps({"text": "how do I tie a tie", "label": "howto"}),
    ]  # no domain: the oracles are left out
    (tmp_path / "seen.jsonl").write_text("\n".join(rows) + "\n")
    (tmp_path / "mixed.jsonl").write_text("\n".join(rows + unseen) + "\n")
    seen = redkit.load(run_dir).evaluate(tmp_path / "seen.jsonl")
    mixed = redkit.load(run_dir).evaluate(tmp_path / "mixed.jsonl")
    assert "oracle" in seen and "oracle" not in mixed
    for name, m in mixed.items():
        assert m["unseen_labels"] == 2 and seen[name]["unseen_labels"] == 0 and m["n"] == 32
        assert round(m["accuracy"] * 32) == round(seen[name]["accuracy"] * 30)  # the two counted wrong
    code, out, err = run_cli(["eval", "--run", run_dir, "--data", tmp_path / "mixed.jsonl"], capsys)
    assert code == 0 and "2 of 32 examples have a label never seen in training" in out and "domain acc" in out


def test_eval_of_the_runs_own_test_file_reads_its_cached_features(fitted, tmp_path, monkeypatch, capsys):
    """The run's test split is data/.../test.jsonl: evaluating that file encodes nothing (RED's features,
    joint's and the linear probe's frozen ones are all in the run's cache) and says so; another file is
    encoded, once per backbone, and gives the same metrics on the texts they share."""
    import redkit.features

    data, run_dir, _ = fitted
    run = Path(shutil.copytree(run_dir, tmp_path / "run"))
    calls = []
    for name in ("encode", "encode_from_prefix"):
        real = getattr(redkit.features, name)
        monkeypatch.setattr(
            redkit.features, name, lambda *a, real=real, name=name, **k: calls.append(name) or real(*a, **k)
        )
    code, out, err = run_cli(["eval", "--run", run, "--data", data / "test.jsonl"], capsys)
    assert code == 0, err
    assert calls == [], "evaluating the run's own test split encoded its texts again"
    reused = [line for line in err.splitlines() if line.endswith("nothing encoded")]
    assert len(reused) == 3 and "(saved for 'test')" in reused[0]  # RED's features, joint's, linear_probe's
    results = json.loads((run / "results.json").read_text())["splits"]["test"]
    table = dict(line.split()[:2] for line in out.splitlines() if line.split()[:1] in (["red"], ["joint"]))
    assert float(table["red"]) == pytest.approx(results["red"]["accuracy"], abs=1e-4)
    assert float(table["joint"]) == pytest.approx(results["joint"]["accuracy"], abs=1e-4)
    (tmp_path / "other.jsonl").write_text("\n".join((data / "test.jsonl").read_text().splitlines()[:20]) + "\n")
    code, out, err = run_cli(["eval", "--run", run, "--data", tmp_path / "other.jsonl"], capsys)
    assert code == 0 and len(calls) == 2  # the tuned backbone (RED and joint share it here) and the frozen one


def test_predict_cli(fitted, capsys):
    _, run_dir, _ = fitted
    code, out, _ = run_cli(["predict", "--run", run_dir, "my laptop is very slow"], capsys)
    assert code == 0
    import redkit

    run = redkit.load(run_dir)
    title, head, row = out.splitlines()
    assert title.startswith("composition red") and head.split() == ["text", "label", "p", *run.domains]
    label, p = row.removeprefix("my laptop is very slow").split()[:2]
    assert label in run.labels and 0 < float(p) <= 1


def test_train_one_expert_alone_gives_the_same_module(fitted, tmp_path, capsys):
    _, run_dir, _ = fitted
    copy = Path(shutil.copytree(run_dir, tmp_path / "run"))
    expert = Path("modules/experts/residual/cooking/model.safetensors")
    before = _digest(copy / "modules", "*.safetensors")
    shutil.rmtree(copy / expert.parent)
    code, _, _ = run_cli(["train", "experts", "--run", copy, "--domain", "cooking", "--kind", "residual"], capsys)
    assert (
        code == 0 and _digest(copy / "modules", "*.safetensors") == before
    )  # same seed, same weights; nothing else touched


def _new_domain(directory: Path, label: str | None = None) -> Path:
    """A new domain: banking requests from the mobile app, with the run's banking labels."""
    directory.mkdir(parents=True)
    rows = [
        {"text": "in the app: " + r["text"], "label": label or r["label"], "domain": "bank_app"}
        for r in topic_records(40, 1, 3, seed=7)
    ]
    (directory / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return directory


def test_add_domain_trains_only_the_new_expert_and_the_router(fitted, tmp_path, capsys):
    _, run_dir, _ = fitted
    parent_before = _digest(run_dir)
    out = tmp_path / "run2"
    code, printed, _ = run_cli(
        ["add-domain", "--run", run_dir, "--data", _new_domain(tmp_path / "new"), "--out", out], capsys
    )
    assert code == 0
    assert "byte-identical to their source's (sha256 of their weights): True" in printed
    assert _digest(run_dir) == parent_before  # the parent is only read
    config = json.loads((out / "config.json").read_text())
    assert config["domains"] == ["banking", "cooking", "health", "travel", "bank_app"]
    results = json.loads((out / "results.json").read_text())
    assert results["lifecycle"]["frozen_modules_unchanged"] is True
    for kind in ("residual", "logit"):
        assert (out / "modules" / "experts" / kind / "bank_app" / "model.safetensors").is_file()
    for module in ("classifier", "backbone_top", "experts/residual/banking", "heads/travel"):
        assert _digest(out / "modules" / module) == _digest(run_dir / "modules" / module)
    assert _digest(out / "modules" / "router") != _digest(run_dir / "modules" / "router")  # over 5 domains now
    assert "bank_app" in results["splits"]["val"]["red"]["by_domain"]


def test_add_domain_accepts_a_label_the_run_has_never_seen(fitted, tmp_path, capsys):
    _, run_dir, _ = fitted
    new = _new_domain(tmp_path / "new", label="weather")
    code, printed, _ = run_cli(["add-domain", "--run", run_dir, "--data", new, "--out", tmp_path / "run2"], capsys)
    assert code == 0 and "byte-identical to their source's (sha256 of their weights): True" in printed
    config = json.loads((tmp_path / "run2" / "config.json").read_text())
    assert config["labels"][-1] == "weather" and config["label_rows"] == {"bank_app": ["weather"]}


# ---- bad input: one line naming file, line and field; exit 2; nothing a rerun would trust ----------


def _write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text)
    return directory


def _good_rows(n: int = 8) -> list[str]:
    return [json.dumps(r) for r in topic_records(n, 2, 2, seed=1)]


BAD_INPUTS = {
    "missing text": (
        "train.jsonl",
        lambda: "\n".join(_good_rows()[:2] + ['{"label": "refund", "domain": "banking"}']),
        "train.jsonl:3: missing text field 'text'",
    ),
    "missing label": (
        "train.jsonl",
        lambda: "\n".join(_good_rows()[:2] + ['{"text": "hi", "domain": "banking"}']),
        "train.jsonl:3: missing label field 'label'",
    ),
    "missing domain": (
        "train.jsonl",
        lambda: "\n".join(_good_rows()[:3] + ['{"text": "hi", "label": "refund"}']),
        "train.jsonl:4: missing domain field 'domain'",
    ),
    "csv without header": (
        "train.csv",
        lambda: "refund the fee,refund,banking\nbook a flight,book,travel\n",
        "train.csv:1: no header row naming the fields",
    ),
    "empty train": ("train.jsonl", lambda: "\n", "train.jsonl: the file holds no records"),
    "one-example domain": (
        "train.jsonl",
        lambda: "\n".join(_good_rows() + ['{"text": "hi", "label": "refund", "domain": "solo"}']),
        "train.jsonl:9: field 'domain' = 'solo' has 1 training example",
    ),
    "1 and '1'": (
        "train.jsonl",
        lambda: '{"text": "a", "label": 1, "domain": "x"}\n{"text": "b", "label": "1", "domain": "x"}\n',
        "train.jsonl:2: field 'label' = '1' but",
    ),
    "'1' and '01' in a csv": (
        "train.csv",
        lambda: "text,label,domain\na,1,x\nb,2,x\nc,01,x\n",
        "train.csv:4: field 'label' = '01' but",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_writes_no_run(tmp_path, capsys, case):
    name, text, message = BAD_INPUTS[case]
    data = _write(tmp_path / "data", name, text())
    out = tmp_path / "run"
    code, _, err = run_cli(["fit", "--data", data, "--out", out], capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and message in err and str(data) in err
    assert not (out / "config.json").exists()


def test_config_file_for_fit_and_flags_override_it(tmp_path, capsys):
    data = _write(
        tmp_path / "data", "train.jsonl", "\n".join(_good_rows()[:2] + ['{"text": "hi", "intent": "refund"}'])
    )
    config = _write(tmp_path, "fit.yaml", "label_field: intent\ndomain-field: topic\n") / "fit.yaml"
    code, _, err = run_cli(["fit", "--config", config, "--data", data, "--out", tmp_path / "run"], capsys)
    assert code == 2 and "train.jsonl:1: missing label field 'intent'" in err  # the file's field names
    code, _, err = run_cli(
        [
            "fit",
            "--config",
            config,
            "--label-field",
            "label",
            "--domain-field",
            "domain",
            "--data",
            data,
            "--out",
            tmp_path / "run",
        ],
        capsys,
    )
    assert code == 2 and "train.jsonl:3: missing label field 'label'" in err  # the flags win
    _write(tmp_path, "fit.yaml", "lable-field: intent\n")
    code, _, err = run_cli(["fit", "--config", config, "--data", data, "--out", tmp_path / "run"], capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{config}: unknown key 'lable-field'; did you mean 'label-field'?" in err
    assert not (tmp_path / "run").exists()


def test_labels_order_and_csv_with_own_field_names(tmp_path):
    from redkit.fitting.data import load_fit_data
    from redkit.fitting.records import Fields

    data = _write(
        tmp_path / "data",
        "train.csv",
        "body,y,src\n"
        + "".join(f"text {i},{y},{d}\n" for i, (y, d) in enumerate([(10, "a"), (2, "a"), (10, "b"), (9, "b")] * 2)),
    )
    loaded = load_fit_data(data, Fields("body", "y", "src"), seed=0, val_fraction=0.1)
    assert loaded.labels == ("2", "9", "10") and loaded.numeric_labels and loaded.domains == ("a", "b")
    assert [len(loaded.splits[s]) for s in ("train", "val")] == [6, 2] and "test" not in loaded.splits
    again = load_fit_data(data, Fields("body", "y", "src"), seed=0, val_fraction=0.1)
    assert [r.id for r in again.splits["val"]] == [r.id for r in loaded.splits["val"]]  # same seed, same carving

"""`redkit reproduce spectra` at toy scale: the three-domain corpus reader, one tiny experiment end
to end (variants, seeds, replacement, E-sweep, tables, verdicts, figures, report.html), a rerun that
reads the stored seeds, and bad flags as one line with exit code 2."""

import json

import pytest
import torch
from conftest import run_cli

from redkit.errors import RedkitError
from redkit_experiments.spectra.corpus import DOMAINS, CorpusConfig, build_corpus, heldout_batches, train_batch
from redkit_experiments.spectra.experiment import ExperimentConfig, run_experiment
from redkit_experiments.spectra.model import ModelConfig
from redkit_experiments.spectra.train import TrainConfig


@pytest.fixture
def corpus_config(tmp_path) -> CorpusConfig:
    code = tmp_path / "lib"
    code.mkdir()
    for i in range(10):
        (code / f"mod{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n" * 20)
    clinc = tmp_path / "clinc.json"
    clinc.write_text(
        json.dumps(
            {
                "train": [[f"what is the weather in city {i}", "weather"] for i in range(200)],
                "test": [[f"play song number {i}", "play_music"] for i in range(60)],
            }
        )
    )
    return CorpusConfig(
        train_bytes=3000,
        heldout_bytes=600,
        math_examples=200,
        clinc_path=str(clinc),
        code_dir=str(code),
        code_file_bytes=400,
    )


def test_corpus_reader(corpus_config):
    corpus = build_corpus(corpus_config)
    summary = corpus.summary()
    assert summary["train_bytes"] == {d: 3000 for d in DOMAINS} and summary["heldout_bytes"] == {
        d: 600 for d in DOMAINS
    }
    code = summary["sources"]["code"]
    assert not set(code["train_files"]) & set(code["heldout_files"]) and len(code["heldout_files"]) == 2
    assert "play song" in bytes(corpus.heldout["prose"].tolist()).decode()
    assert "weather" not in bytes(corpus.heldout["prose"].tolist()).decode()  # train and test queries apart
    assert bytes(corpus.train["math"][:3].tolist()) == b"Q: "
    a, domains = train_batch(corpus, 6, 16, torch.Generator().manual_seed(0))
    b, _ = train_batch(corpus, 6, 16, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == (6, 16) and domains.tolist() == [0, 1, 2, 0, 1, 2] and int(a.max()) < 256
    windows = heldout_batches(corpus, 16, 4)
    assert [d for _, d in windows] == [0, 1, 2] and all(ids.shape == (4, 16) for ids, _ in windows)


def test_corpus_bad_sources(corpus_config, tmp_path):
    with pytest.raises(RedkitError, match="data_full.json not found"):
        build_corpus(CorpusConfig(clinc_path=str(tmp_path / "missing.json"), code_dir=corpus_config.code_dir))
    (tmp_path / "bad.json").write_text('{"train": 5}')
    with pytest.raises(RedkitError, match="not CLINC150"):
        build_corpus(
            CorpusConfig(clinc_path=str(tmp_path / "bad.json"), code_dir=corpus_config.code_dir, math_examples=200)
        )
    (tmp_path / "empty").mkdir()
    with pytest.raises(RedkitError, match="fewer than 5 Python files"):
        build_corpus(CorpusConfig(clinc_path=corpus_config.clinc_path, code_dir=str(tmp_path / "empty")))


def test_tiny_experiment_end_to_end(corpus_config, tmp_path):
    config = ExperimentConfig(
        corpus=corpus_config,
        model=ModelConfig(hidden=16, intermediate=16, layers=2, heads=2, kv_heads=1, experts=4, length=16),
        train=TrainConfig(steps=3, batch=3, measure_every=1, probe_sequences=1),
        variants=("stock (dense top-2)", "switch top-2", "expert choice", "spectra", "spectra -gru"),
        seeds=(0, 1),
        sweep=(2,),
        replacement_steps=2,
        eval_sequences=2,
        overhead_repeats=1,
    )
    out = tmp_path / "run"
    results = run_experiment(out, config, print_fn=lambda *a: None)
    t = results["tables"]
    assert set(t["6.1"]) == set(config.variants) and t["6.1"]["spectra"]["loss"]["n"] == 2
    assert set(t["replacement"]) == {"continue stock", "swap in spectra", "swap in expert choice"}
    assert set(t["11"]) == {"2"} and set(t["11"]["2"]) == {"switch top-2", "spectra"}
    assert {"H1", "H2", "H3", "H4", "H5", "R"} <= set(t["hypotheses"])
    assert all(h["verdict"] in ("holds", "does not hold", "cannot tell") for h in t["hypotheses"].values())
    layer = results["per_seed"][0]["variants"]["spectra"]["measure"]["layers"][0]
    assert len(layer["affinity"]) == 3 and len(layer["affinity"][0]) == 4 and 0 <= layer["gram_ortho"] <= 1
    assert set(results["overhead"]["components"]) >= {
        "GRU forward",
        "expression projection",
        "expert execution",
        "total",
    }
    report = (out / "report.md").read_text()
    for heading in ("6.1", "6.2", "Table 7", "Table 9", "Table 11", "Table 12", "Router replacement", "Hypotheses"):
        assert heading in report
    assert (out / "report.html").stat().st_size > 10_000 and "data:image/png;base64" in (
        out / "report.html"
    ).read_text()
    for png in ("dynamics", "usage", "loss", "affinity"):
        assert (out / "figures" / f"{png}.png").stat().st_size > 1000
    said = []
    again = run_experiment(out, config, print_fn=said.append)  # every seed is on disk: read, not retrained
    assert sum("read" in line for line in said) == 2
    assert again["tables"]["6.1"]["spectra"]["loss"]["mean"] == t["6.1"]["spectra"]["loss"]["mean"]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--experts", "1"], "--experts 1"),
        (["--variants", "spectra,sparkle"], "unknown variant 'sparkle'"),
        (["--sweep", "4,1"], "--sweep 1"),
        (["--sweep", "four"], "--sweep 'four'"),
        (["--seeds", "0"], "--seeds 0"),
        (["--steps", "0"], "--steps 0"),
        (["--variants", "spectra"], "keep 'stock (dense top-2)'"),
    ],
)
def test_bad_flags_are_one_line(argv, message, capsys, tmp_path):
    code, out, err = run_cli(["reproduce", "spectra", "--out", tmp_path / "x"] + argv, capsys)
    assert code == 2 and len(err.splitlines()) == 1 and message in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()  # nothing written before the flags are checked

"""scripts/incremental_merge.py: two study directories of one stream joined, and everything else refused."""

import functools
import json
from pathlib import Path

import pytest
from conftest import load_script


def _script():
    return load_script("incremental_merge")


def _study(
    path: Path, methods: dict[str, float], hyper: dict, seed: int = 0, source: str = "abc", stream: str = "s"
) -> Path:
    config = {
        "data_dir": "/data/clinc150", "protocol": "domains", "order": 0, "classes_per_task": 10, "seed": seed,
        "trainable_layers": 2, "max_length": 64, "methods": list(methods), "hyperparameters": hyper,
        "shrinkage": 0.2,
    }  # fmt: skip
    results = {
        "protocol": "domains", "order": 0, "steps": ["a", "b"], "classes": 4, "config": config, "stream": stream,
        "prepare_seconds": 1.0, "provenance": {},
        "methods": {
            name: {"final_accuracy": acc, "code": {"source": source, "commit": "c"}} for name, acc in methods.items()
        },
    }  # fmt: skip
    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps(results))
    return path


def test_merge_joins_one_stream_and_refuses_the_rest(tmp_path):
    merge = _script().merge
    before, tuned = {"step": {"lr": 2e-4}}, {"step": {"lr": 2e-4}, "ewc": {"lr": 1e-4}}
    free = _study(tmp_path / "free", {"red": 0.95, "klda_e": 0.951}, before)
    strategies = _study(tmp_path / "ft", {"ewc": 0.80, "er_1000": 0.90}, tuned)
    merge = functools.partial(merge, source_of=lambda name: "abc")  # as if this checkout's code made "abc"
    merged = merge([free, strategies])
    assert list(merged["methods"]) == ["red", "klda_e", "ewc", "er_1000"]
    assert merged["config"]["hyperparameters"] == tuned  # the strategies' own
    assert merged["merged_from"]["ewc"] == str(strategies) and merged["merged_from"]["red"] == str(free)

    with pytest.raises(SystemExit, match="in both"):  # a method from two directories
        merge([free, _study(tmp_path / "again", {"red": 0.9}, before)])
    with pytest.raises(SystemExit, match="seed"):  # another seed is another study
        merge([free, _study(tmp_path / "s1", {"ewc": 0.8}, tuned, seed=1)])
    with pytest.raises(SystemExit, match="data"):  # other texts under the same names
        merge([free, _study(tmp_path / "data", {"ewc": 0.8}, tuned, stream="t")])
    with pytest.raises(SystemExit, match="other code than this checkout"):
        merge([free, _study(tmp_path / "code", {"ewc": 0.8}, tuned, source="def")])
    with pytest.raises(SystemExit, match="other hyperparameters"):  # two strategies under different choices
        merge([strategies, _study(tmp_path / "lwf", {"lwf": 0.8}, before)])
    assert _script().reads_hyperparameters("derpp_1000") and not _script().reads_hyperparameters("red_replay")
    on_gpu = _study(tmp_path / "gpu", {"lwf": 0.8}, tuned)
    config = json.loads((on_gpu / "results.json").read_text())
    config["config"] |= {"device": "cuda", "data_dir": "/elsewhere/clinc150"}  # the same stream, read elsewhere
    (on_gpu / "results.json").write_text(json.dumps(config))
    assert merge([free, on_gpu])["devices"] == {"red": "cpu", "klda_e": "cpu", "lwf": "cuda"}

"""Slim bundles: what export writes, that a bundle answers exactly as its run, that it stays
untouched, and that a damaged, newer or incomplete bundle is one clear line (exit code 2)."""

import contextlib
import json
import os
import shutil

import pytest
from conftest import run_cli

from redkit.bundle import encoder_cache
from redkit.bundle.export import export_bundle
from redkit.bundle.manifest import FORMAT, MANIFEST, file_digest

QUESTION = "What is 12 plus 27?"


@pytest.fixture(scope="module")
def bundles(tiny_run, tmp_path_factory):
    """The tiny run's bundle without heads and with them (read-only for the tests). The tests read the second's
    module files through torch, never its serving graph: it is exported without one (an ONNX export is seconds)."""
    root = tmp_path_factory.mktemp("bundles")
    with encoder_cache_at(root / "cache"):  # a cache of its own: the slim bundle's encoder is traced, not read
        export_bundle(tiny_run, root / "slim")
    export_bundle(tiny_run, root / "heads", heads=True, serving=False)
    return {"slim": root / "slim", "heads": root / "heads", "cache": root / "cache"}


@contextlib.contextmanager
def encoder_cache_at(path):
    before = os.environ.get(encoder_cache.ENV)
    os.environ[encoder_cache.ENV] = str(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(encoder_cache.ENV)
        else:
            os.environ[encoder_cache.ENV] = before


def test_a_second_export_reads_the_encoder_back_and_writes_the_same_graph(tiny_run, bundles, tmp_path):
    """The slim bundle's graph was traced whole; exported again, its encoder is read from the cache that export
    filled (redkit/bundle/encoder_cache.py) and the graph written is the same, byte for byte."""
    from redkit.bundle.graph import export_serving
    from redkit.run import open_run

    slim = json.loads((bundles["slim"] / "serving" / "serving.json").read_text())
    with encoder_cache_at(bundles["cache"]):
        again = export_serving(open_run(tiny_run), tmp_path / "serving", print_fn=lambda *_: None)
    assert (slim["encoder_reused"], again["encoder_reused"]) == (False, True)
    assert file_digest(bundles["slim"] / "serving" / "model.onnx") == file_digest(tmp_path / "serving" / "model.onnx")
    assert len(list((bundles["cache"] / encoder_cache.FOLDER).glob("*.onnx"))) == 1  # read, not written again


def _files(directory):
    return {str(p.relative_to(directory)): file_digest(p) for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_bundle_holds_only_module_files_its_serving_graph_config_and_manifest(tiny_run, bundles):
    files = _files(bundles["slim"])
    assert all(f.endswith((".safetensors", ".json")) or f == "serving/model.onnx" for f in files)
    assert {"serving/model.onnx", "serving/tokenizer.json", "serving/serving.json"} <= set(files)
    assert not any(
        f.startswith(("cache/", "data/", "heads/", "modules/heads/")) or f in ("log.jsonl", "timings.json")
        for f in files
    )
    for module in ("backbone_top", "classifier", "router", "gate", "experts/residual/R3", "experts/logit/R1"):
        assert f"modules/{module}/model.safetensors" in files
    assert "modules/heads/R1/model.safetensors" in _files(bundles["heads"])
    manifest = json.loads((bundles["slim"] / MANIFEST).read_text())
    assert set(manifest["files"]) == set(files) - {MANIFEST}
    for name, entry in manifest["files"].items():
        assert entry["sha256"] == files[name] and entry["size"] == (bundles["slim"] / name).stat().st_size
    results = json.loads((tiny_run / "results.json").read_text())
    assert manifest["test_metrics"]["red"]["accuracy"] == results["splits"]["test"]["red"]["accuracy"]
    assert manifest["format"] == FORMAT and manifest["redkit_version"] and manifest["heads"] is False
    assert (
        manifest["backbone"]["fingerprint"]
        == json.loads((tiny_run / "modules/classifier/config.json").read_text())["backbone_fingerprint"]
    )
    assert manifest["source"]["run"] == str(tiny_run.resolve())


def test_a_bundle_evaluates_exactly_as_its_run_and_is_not_written_to(tiny_run, bundles):
    from redkit.compositions import COMPOSITIONS, ModuleSet
    from redkit.evaluate import evaluate_file
    from redkit.run import open_run

    data = tiny_run / "data" / "test.jsonl"
    before = _files(bundles["heads"])
    names = COMPOSITIONS.names()
    run, bundle = open_run(tiny_run), open_run(bundles["heads"])
    assert bundle.bundle is not None and run.bundle is None
    assert evaluate_file(bundle, ModuleSet(bundle), data, names) == evaluate_file(run, ModuleSet(run), data, names)
    assert _files(bundles["heads"]) == before  # no cache, no log, no timings inside it


def test_eval_and_predict_accept_a_bundle(tiny_run, bundles, capsys):
    data = tiny_run / "data" / "test.jsonl"
    code, from_run, _ = run_cli(["eval", "--run", tiny_run, "--data", data, "--composition", "red"], capsys)
    assert code == 0
    code, from_bundle, err = run_cli(["eval", "--run", bundles["slim"], "--data", data, "--composition", "red"], capsys)
    assert code == 0 and from_bundle == from_run and err == ""
    assert (
        run_cli(["predict", "--run", tiny_run, QUESTION], capsys)[1]
        == run_cli(["predict", "--run", bundles["slim"], QUESTION], capsys)[1]
    )


def test_eval_of_a_bundle_without_heads_skips_what_it_lacks_and_says_so(tiny_run, bundles, capsys):
    code, out, err = run_cli(["eval", "--run", bundles["slim"], "--data", tiny_run / "data" / "test.jsonl"], capsys)
    assert code == 0 and err == ""
    assert "red_logit_experts" in out and "\nmoe " not in out
    assert "not in this bundle: global_head, oracle, uniform, moe (export with --heads)" in out


def _copy(bundle, tmp_path):
    return shutil.copytree(bundle, tmp_path / "bundle")


def _one_line_error(argv, capsys):
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("damage", ["alter", "truncate", "delete"])
def test_a_damaged_bundle_is_refused_naming_the_file(bundles, tmp_path, capsys, damage):
    bundle = _copy(bundles["slim"], tmp_path)
    weights = bundle / "modules" / "router" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    if damage == "alter":
        data[-1] ^= 1
        weights.write_bytes(bytes(data))
    elif damage == "truncate":
        weights.write_bytes(bytes(data[: len(data) // 2]))
    else:
        weights.unlink()
    err = _one_line_error(["predict", "--run", bundle, QUESTION], capsys)
    assert str(weights) in err and "re-export the bundle" in err
    assert ("missing" if damage == "delete" else "mismatch (altered or truncated)") in err


def test_a_file_the_manifest_does_not_list_is_ignored(bundles, tmp_path, capsys):
    bundle = _copy(bundles["slim"], tmp_path)
    (bundle / "notes.txt").write_text("shipped by hand")
    assert run_cli(["predict", "--run", bundle, QUESTION], capsys)[0] == 0


def test_a_bundle_from_a_newer_redkit_is_refused(bundles, tmp_path, capsys):
    bundle = _copy(bundles["slim"], tmp_path)
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest |= {"format": FORMAT + 1, "redkit_version": "9.0.0"}
    (bundle / MANIFEST).write_text(json.dumps(manifest))
    err = _one_line_error(["eval", "--run", bundle, "--data", "x.jsonl"], capsys)
    assert (
        f"written by redkit 9.0.0 with bundle format {FORMAT + 1}" in err
        and f"reads up to {FORMAT}; upgrade redkit" in err
    )


@pytest.mark.parametrize("composition", ["moe", "oracle", "global_head"])
def test_a_composition_whose_module_the_bundle_lacks_is_one_line(bundles, composition, capsys):
    err = _one_line_error(["predict", "--run", bundles["slim"], QUESTION, "--composition", composition], capsys)
    assert f"{composition} needs modules/heads/" in err and "export with --heads" in err


def test_nothing_trains_into_a_bundle(bundles, tmp_path, capsys):
    bundle = _copy(bundles["slim"], tmp_path)
    before = _files(bundle)
    err = _one_line_error(["train", "router", "--run", bundle], capsys)
    assert "read-only bundle" in err
    assert _files(bundle) == before


def test_export_refuses_an_existing_out_and_a_bundle_as_source(tiny_run, bundles, tmp_path):
    from redkit.errors import RedkitError

    with pytest.raises(RedkitError, match="already exists"):
        export_bundle(tiny_run, bundles["slim"])
    with pytest.raises(RedkitError, match="already a bundle"):
        export_bundle(bundles["slim"], tmp_path / "again")
    assert not (tmp_path / "again").exists() and not list(tmp_path.glob(".again*"))

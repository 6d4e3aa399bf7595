"""`redkit export`: the part of a trained run that inference needs, as a self-checking bundle.

A bundle is a subset of the run directory, laid out as the run is (so `open_run` opens it as its
own kind of run, read-only):

    config.json                      the run's config (a steps run's decomposer_dir pointed inside)
    modules/<module>/{config.json, model.safetensors}
                                     tuned top layers, classifier, experts, router, gate;
                                     heads/ only with `heads=True` (the moe, oracle, uniform and
                                     global_head compositions need them)
    decomposer/module/...            a steps run's step decomposer
    oos.json                         the out-of-scope thresholds, where the run has them
    manifest.json                    redkit/bundle/manifest.py

Never data/, cache/, logs, checkpoints, studies or reports: only module files (safetensors + their
JSON config) and JSON. Built in a temporary directory beside `out` and renamed into place, so
`out` is either absent or a complete bundle.
"""

import shutil
import tempfile
from pathlib import Path

from redkit.atomic import write_json
from redkit.bundle.manifest import (
    FORMAT,
    GRAPH,
    MANIFEST,
    SERVING,
    SETTINGS,
    TOKENIZER,
    file_entry,
    is_bundle,
    redkit_version,
)
from redkit.errors import RedkitError
from redkit.jsonfile import read_json
from redkit.modules.store import CONFIG, WEIGHTS, module_exists, parse_meta

HEADS = "heads"  # modules/heads/: exported only when asked for
STATISTICS = ("statistics", "statistics_sum")  # redkit/routers/gaussian.py's (not imported: it needs torch)
OOS = "oos.json"  # redkit/oos/evaluate.py OOS_FILE (not imported: it needs torch)


def _modules(run: Path, heads: bool) -> list[Path]:
    """Every module directory under <run>/modules, relative to the run (heads/ only if asked), but the
    replay-free router's statistics (and a secure federation's summed scatter): what it routes with is in the
    router; they serve the run's next change."""
    found = sorted(cfg.parent.relative_to(run) for cfg in (run / "modules").rglob(CONFIG) if module_exists(cfg.parent))
    return [m for m in found if (heads or m.parts[1] != HEADS) and m.parts[1] not in STATISTICS]


def _decomposer_module(run: Path, config: dict) -> Path | None:
    """A steps run's trained decomposer module directory (its decomposer_dir, or <run>/decomposer)."""
    if config.get("task") != "steps":
        return None
    where = Path(config["decomposer_dir"]) if config.get("decomposer_dir") else run / "decomposer"
    for path in (where / "module", where):
        if module_exists(path):
            return path
    raise RedkitError(f"{where}: this steps run has no trained decomposer to export")


def _scalars(metrics: dict) -> dict:
    """Per composition, its top-level numbers (n, accuracy, ...), without the per-domain and per-group breakdowns."""
    return {
        name: {k: v for k, v in m.items() if isinstance(v, (int, float)) or v is None}
        for name, m in metrics.items()
        if isinstance(m, dict)
    }


def _test_metrics(results: dict) -> dict:
    """The run's test-split numbers as results.json has them (a steps run: single steps, executed
    programs, Task 2 by decomposition)."""
    if "single_step" in results:
        return {
            "single_step": _scalars(results["single_step"].get("splits", {}).get("test", {})),
            "execution": results.get("execution"),
            "task2": {name: m.get("all") for name, m in results.get("task2", {}).get("compositions", {}).items()},
        }
    return _scalars(results.get("splits", {}).get("test", {}))


def _backbone(run: Path, config: dict) -> dict:
    """The fingerprints a bundle's modules were trained against: the source backbone's and the
    tuned one's (the features' fingerprint every module checks on load)."""
    top = run / "modules" / "backbone_top" / CONFIG
    classifier = run / "modules" / "classifier" / CONFIG
    return {
        "path": (config.get("backbone") or {}).get("path"),
        "source_fingerprint": parse_meta(top).config.get("source_fingerprint") if top.is_file() else None,
        "fingerprint": parse_meta(classifier).backbone_fingerprint if classifier.is_file() else None,
    }


def _oos_thresholds(run: Path, tmp: Path) -> dict[str, str]:
    """The run's OOS thresholds (oos.json) that a bundle can apply, written into it, so that a bundle of
    a run that says out of scope says it too; returns {composition: score} of those left out."""
    if not (run / OOS).is_file():
        return {}
    chosen = read_json(run / OOS, "an OOS threshold file")
    if not isinstance(chosen, dict):
        raise RedkitError(f"{run / OOS}: not an OOS threshold file (expected a JSON object)")
    from redkit.oos.scores import MODULE_SCORES  # those of the run's modules alone

    kept = {n: c for n, c in chosen.items() if isinstance(c, dict) and c.get("score") in MODULE_SCORES}
    if kept:
        write_json(tmp / OOS, kept)
    return {n: c.get("score") if isinstance(c, dict) else None for n, c in chosen.items() if n not in kept}


def _serving_graph(
    run: Path, tmp: Path, wanted: bool, with_oos: bool = True, composition: str = "red"
) -> tuple[dict, str | None]:
    """serving/: the run's `red` as one ONNX graph with its tokenizer (redkit/bundle/graph.py), where
    the run's kind answers texts that way; returns (its serving.json, or {}; why there is none)."""
    if not wanted:
        return {}, "not asked for (--no-serving-graph)"
    from redkit.run import open_run

    opened = open_run(run)
    if not getattr(opened, "servable", False):
        return {}, f"a {type(opened).__name__} does not answer through one composition"
    try:
        import onnxscript  # noqa: F401  (torch.onnx's exporter needs it)

        from redkit.bundle.graph import export_serving
    except ImportError as err:
        return {}, f"{err.name} is not installed (pip install 'redkit[serve]')"
    chosen = read_json(run / OOS, "an OOS threshold file") if (run / OOS).is_file() else {}
    oos = chosen.get(composition) if with_oos else None
    return export_serving(opened, tmp / SERVING, composition, oos=oos, print_fn=lambda *a: None), None


def export_bundle(
    run: str | Path, out: str | Path, heads: bool = False, serving: bool = True, serving_oos: bool = True
) -> dict:
    """Write the bundle of `run` to `out` (which must not exist); returns its manifest. `serving`: with
    the serving graph (ONNX) where the run's kind has one; `serving_oos`: with the run's OOS score in
    it (a nearest-neighbour score brings the training features and the pretrained backbone: about
    twice the compute per query)."""
    run, out = Path(run), Path(out)
    if is_bundle(run):
        raise RedkitError(f"{run}: already a bundle; export from the run it was made from")
    if not (run / "config.json").is_file():
        raise RedkitError(f"{run}: not a redkit run (no config.json)")
    if out.exists():
        raise RedkitError(f"{out}: already exists; choose another --out or delete it")
    config = read_json(run / "config.json", "a redkit run config")
    results = read_json(run / "results.json", "a results file") if (run / "results.json").is_file() else {}
    if not isinstance(config, dict) or not isinstance(results, dict):
        raise RedkitError(f"{run}: config.json and results.json must hold JSON objects")
    modules = _modules(run, heads)
    if not modules:
        raise RedkitError(f"{run}: no trained modules to export (has the run finished?)")
    decomposer = _decomposer_module(run, config)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        copies = {m / name: run / m / name for m in modules for name in (CONFIG, WEIGHTS)}
        if decomposer is not None:
            copies |= {Path("decomposer", "module", name): decomposer / name for name in (CONFIG, WEIGHTS)}
            config = config | {"decomposer_dir": None}  # the bundle's own decomposer/, wherever the run kept it
        for relative, source in copies.items():
            (tmp / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, tmp / relative)
        write_json(tmp / "config.json", config)
        oos_left_out = _oos_thresholds(run, tmp)
        served, no_graph = _serving_graph(run, tmp, serving, serving_oos)
        graph = [Path(SERVING, name) for name in (GRAPH, TOKENIZER, SETTINGS)] if served else []
        if served.get("oos"):  # the serving graph carries its composition's OOS score, whatever it needs
            oos_left_out.pop(served["composition"], None)
        written = [Path("config.json"), *([Path(OOS)] if (tmp / OOS).is_file() else []), *graph]
        files = {str(rel): file_entry(tmp / rel) for rel in sorted([*written, *copies])}
        manifest = {
            "format": FORMAT,
            "redkit_version": redkit_version(),
            "kind": config.get("task", "digits"),
            "heads": heads,
            "files": files,
            "backbone": _backbone(run, config),
            "test_metrics": _test_metrics(results),
            "source": {"run": str(run.resolve()), "git_commit": (results.get("provenance") or {}).get("git_commit")},
            **({"oos_left_out": oos_left_out} if oos_left_out else {}),
            **({"no_serving_graph": no_graph} if no_graph else {}),
            **({"serving": {"composition": served["composition"], "oos": served["oos"]}} if graph else {}),
        }
        write_json(tmp / MANIFEST, manifest)  # last: a directory with a manifest is a complete bundle
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def describe(out: Path, manifest: dict) -> str:
    """One line on what `export_bundle` wrote: files, bytes and what the bundle can compose."""
    size = sum(entry["size"] for entry in manifest["files"].values())
    heads = (
        "with heads (every composition)"
        if manifest["heads"]
        else "without heads (moe, oracle, uniform, global_head: export with --heads)"
    )
    left_out = manifest.get("oos_left_out", {})
    oos = (
        f"; no OOS threshold for {', '.join(f'{n} ({s})' for n, s in left_out.items())}: its score needs the "
        "run's training features"
        if left_out
        else ""
    )
    serving = manifest.get("serving")
    graph = (
        f"; no serving graph: {manifest['no_serving_graph']}"
        if manifest.get("no_serving_graph")
        else f"; serving graph: {serving['composition']}"
        + (f", out of scope by {serving['oos']['score']}" if serving and serving.get("oos") else ", no OOS threshold")
        if serving
        else ""
    )
    return f"wrote {out}: {len(manifest['files'])} files, {size / 1e6:.1f} MB, {heads}{oos}{graph}"

"""`redkit train-expert`: a new domain's expert trained elsewhere, from a bundle and its own data.

    redkit export --run RUN --out BUNDLE                       (on the machine that has the run)
    redkit train-expert --bundle BUNDLE --data NEWDIR --out EXPERT      (anywhere, any time)
    redkit add-domain --run RUN --expert EXPERT                (back where the run is)

The bundle gives what an expert is trained *through*: the tuned backbone top (for the features)
and the classifier C (and earlier domains' label rows). EXPERT is a fit-run directory holding only
the new domain's data and modules, and `expert.json`, which describes it. With `--modules-only` its
data is removed once the modules are trained, so nothing of the owner's examples leaves its machine:
such an expert joins a run whose router is replay-free (`--router gaussian`: the domain's statistics
module travels instead), and its accuracy is measured where its data is.

    {"format": 1, "domains": ["bank_app"], "label_rows": {"bank_app": ["mortgage", ...]},
     "host": {"fingerprint": <tuned backbone's>, "source_fingerprint": ..., "labels": [...],
              "domains": [...], "modules": {"classifier": <sha256>, ...}, "bundle": "/abs/BUNDLE"},
     "files": {"modules/experts/residual/bank_app/model.safetensors": {"size": ..., "sha256": ...}, ...}}

add-domain refuses, with one line, an expert whose host is not the run: another backbone (the
fingerprint), another classifier C, other labels or domains. The host's modules are copied into
EXPERT only to train through them and removed afterwards, with the feature cache.
"""

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from redkit.atomic import write_json
from redkit.bundle.manifest import file_digest, file_entry, verify_files
from redkit.errors import RedkitError
from redkit.fitting.data import FitData, load_fit_data
from redkit.fitting.replay_free import HOST_PARTS, is_replay_free
from redkit.fitting.run import FitRun
from redkit.jsonfile import read_json
from redkit.lifecycle.derive import domain_parts
from redkit.lifecycle.grow import grown_config, train_new_domains
from redkit.modules.layers import ROUTERS
from redkit.modules.store import copy_modules
from redkit.names import check_name
from redkit.run import open_run

EXPERT = "expert.json"
FORMAT = 1


def host_parts(run: FitRun) -> list[tuple[str, ...]]:
    """The modules an expert is trained through: tuned top, C and earlier added domains' label rows (in a run of the
    replay-free recipe, the pretrained top and C over no label: a domain trains alone, through nobody's rows)."""
    if is_replay_free(run.config):
        return list(HOST_PARTS)
    return [("backbone_top",), ("classifier",), *(("label_rows", d) for d in run.config.label_rows)]


def host_digests(run: FitRun) -> dict[str, str]:
    return {"/".join(p): file_digest(run.module_dir(*p) / "model.safetensors") for p in host_parts(run)[1:]}


def train_expert(bundle_dir: Path, data_dir: Path, out: Path, modules_only: bool = False, print_fn=print) -> dict:
    """Train the new domain(s) of `data_dir` through the bundle's modules into `out`; returns expert.json's
    content. `modules_only`: keep no data in `out` (the bundle's router must be replay-free)."""
    wall = time.perf_counter()
    out = Path(out)
    if out.exists() and (out / EXPERT).is_file():
        raise RedkitError(f"{out}: already an expert directory; choose another --out or delete it")
    bundle = open_run(Path(bundle_dir))
    if bundle.bundle is None or not isinstance(bundle, FitRun):
        raise RedkitError(
            f"{bundle_dir}: not a bundle of a fit run; make one with redkit export --run RUN --out BUNDLE"
        )
    data_dir = Path(data_dir).resolve()
    new = load_fit_data(
        data_dir,
        bundle.fields,
        bundle.config.seed,
        bundle.config.val_fraction,
        domains=bundle.space.domains,
        labels=bundle.space.labels,
        numeric_labels=bundle.config.numeric_labels,
    )
    config = grown_config(bundle.config, new, data_dir)
    if modules_only and not ROUTERS[config.router].replay_free:
        raise RedkitError(
            f"{bundle_dir}: its router ({config.router}) is trained on every domain's data, so an expert without "
            "its data could not join it; --modules-only needs a run fitted with --router gaussian"
        )
    run = FitRun(out, config)
    run.prepare_data(FitData(new.splits, config.labels, config.numeric_labels, config.domains, new.notes))
    copy_modules(bundle, run, host_parts(bundle))
    host = {
        "fingerprint": run.fingerprint,
        "source_fingerprint": bundle.backbone.source_fingerprint,
        "labels": list(bundle.space.labels),
        "domains": list(bundle.space.domains),
        "modules": host_digests(bundle),
        "bundle": str(Path(bundle_dir).resolve()),
    }
    train_new_domains(run, new.domains, print_fn)
    own = [p for d in new.domains for p in domain_parts(run, d)]
    files = {
        str(Path("modules", *p, name)): file_entry(run.module_dir(*p) / name)
        for p in own
        for name in ("config.json", "model.safetensors")
    }
    examples = {name: len(records) for name, records in run.splits.items()}
    if modules_only:  # the examples stay with their owner: the directory keeps an empty list of splits
        for f in (out / "data").glob("*.json*"):
            f.unlink()
        write_json(out / "data" / "splits.json", {"splits": {}, "oos": {}, "notes": ["modules only: no data"]})
    files |= {str(Path("data", f.name)): file_entry(f) for f in sorted((out / "data").glob("*.json*"))}
    description = {
        "format": FORMAT,
        "domains": list(new.domains),
        "label_rows": {d: list(config.label_rows[d]) for d in new.domains if d in config.label_rows},
        "host": host,
        "files": files,
        "examples": examples,  # trained on (counted; with modules_only, not in the directory)
        "modules_only": modules_only,
        "seconds": time.perf_counter() - wall,
    }
    for p in host_parts(bundle):  # only trained through: the run it is plugged into has them
        shutil.rmtree(run.module_dir(*p))
    shutil.rmtree(run.cache_dir, ignore_errors=True)
    write_json(out / EXPERT, description)  # last: a directory with expert.json is complete
    print_fn(
        f"wrote expert {out}: domain(s) {', '.join(new.domains)}, {len(files)} files"
        + (" (modules only, no data)" if modules_only else "")
        + f", trained through {bundle_dir} "
        f"(backbone {host['fingerprint'][:12]}) in {description['seconds']:.1f} s"
    )
    return description


@dataclass
class Expert:
    run: FitRun  # the expert directory, opened as the fit run it is (the new domain's data and modules)
    data: FitData  # its data, as add-domain merges it
    config: object  # its FitConfig (the host's grown by the new domain)
    description: dict  # expert.json


def read_expert(directory: Path, parent: FitRun) -> Expert:
    """The expert at `directory`, checked file by file and against the run it is plugged into."""
    path = directory / EXPERT
    if not path.is_file():
        raise RedkitError(f"{directory}: not an expert directory (no {EXPERT}); make one with redkit train-expert")
    description = read_json(path, "an expert description")
    if (
        not isinstance(description, dict)
        or not isinstance(description.get("host"), dict)
        or not isinstance(description.get("files"), dict)
    ):
        raise RedkitError(f"{path}: not an expert description (expected an object with 'host' and 'files')")
    if description.get("format") != FORMAT:
        raise RedkitError(
            f"{path}: field 'format' = {description.get('format')!r}; this redkit reads expert format {FORMAT}"
        )
    domains, rows = description.get("domains"), description.get("label_rows", {})
    if not isinstance(domains, list) or not domains or not isinstance(rows, dict):
        raise RedkitError(f"{path}: field 'domains' must list the new domains and 'label_rows' map domains to labels")
    for field, names in (("domains", domains), ("label_rows", rows)):  # module folders of the run it joins
        for name in names:
            check_name(name, "domain", f"{path}: field '{field}'")
    verify_files(directory, description["files"], path, "train the expert again")  # paths inside `directory`
    host = description["host"]
    if host.get("fingerprint") != parent.fingerprint:
        raise RedkitError(
            f"{directory}: trained on backbone {host.get('fingerprint')}, but {parent.dir} has backbone "
            f"{parent.fingerprint}; train it from a bundle of this run (redkit export)"
        )
    if host.get("labels") != list(parent.space.labels) or host.get("domains") != list(parent.space.domains):
        raise RedkitError(
            f"{directory}: trained for a run with domains {host.get('domains')} and other labels; "
            f"{parent.dir} has domains {list(parent.space.domains)}"
        )
    if host.get("modules") != host_digests(parent):
        raise RedkitError(
            f"{directory}: trained through another classifier C than {parent.dir}'s (sha256 differs); "
            "train it from a bundle of this run (redkit export)"
        )
    run = FitRun(directory)
    splits = dict(run.splits)
    data = FitData(
        splits,
        tuple(run.config.labels),
        run.config.numeric_labels,
        tuple(description["domains"]),
        [f"expert trained elsewhere: {directory}"],
    )
    return Expert(run, data, run.config, description)

"""The modular life cycle at serving time: a domain added or removed while the server answers.

    POST /v1/domains {"expert": NAME}   EXPERTS_DIR/NAME, written by `redkit train-expert`
    DELETE /v1/domains/NAME

Each change is the library's own life-cycle step on the run behind the served model
(redkit.lifecycle: add-domain retrains only the router and gate over every domain, remove-domain
masks the domain's labels and retrains them too; the fingerprint of an expert from another
backbone is refused in one line), then the new run's bundle and serving graph, then a new
predictor: built beside the old one, in WORK/vN/, and swapped in whole by the caller
(redkit/serve/state.py). The old one keeps answering until then. This path imports torch; serving
does not.
"""

import tempfile
from dataclasses import dataclass
from pathlib import Path

from redkit.errors import RedkitError
from redkit.serve.predictor import BundlePredictor


def _needs_run(current: BundlePredictor) -> Path:
    if current.source_run is None:
        raise RedkitError(
            f"{current.directory}: a bundle has no training data, and a domain changes the router, which "
            "trains over every domain; serve the run instead (`redkit serve --run RUN`) to add or remove domains"
        )
    return current.source_run


def _next(current: BundlePredictor, work: Path, change) -> BundlePredictor:
    """Apply `change(parent_run, out_run)`, export the new run, open it as version + 1."""
    from redkit.bundle.export import export_bundle

    parent = _needs_run(current)
    work.mkdir(parents=True, exist_ok=True)
    version = current.version + 1
    # A fresh folder per attempt: one that failed half-way is never mistaken for a finished one.
    out = Path(tempfile.mkdtemp(prefix=f"v{version}-", dir=work))
    change(parent, out / "run")
    export_bundle(out / "run", out / "bundle")
    return BundlePredictor.open(out / "bundle", source_run=out / "run", version=version)


def with_expert(current: BundlePredictor, experts_dir: Path, name: str, work: Path, print_fn=print) -> BundlePredictor:
    """A new predictor with the domain of EXPERTS_DIR/name added."""
    from redkit.lifecycle.add import add_domain
    from redkit.names import check_name

    expert = Path(experts_dir) / check_name(name, "expert", "POST /v1/domains")
    if not expert.is_dir():
        raise RedkitError(f"no expert directory {name!r} in the server's experts directory")
    return _next(current, work, lambda parent, out: add_domain(parent, expert_dir=expert, out=out, print_fn=print_fn))


def without_domain(current: BundlePredictor, name: str, work: Path, print_fn=print) -> BundlePredictor:
    """A new predictor without domain `name`."""
    from redkit.lifecycle.remove import remove_domain

    if name not in current.domains:
        raise KeyError(name)
    return _next(current, work, lambda parent, out: remove_domain(parent, name, out=out, print_fn=print_fn))


@dataclass(frozen=True)
class DomainChanges:
    """What the admin routes call (redkit/serve/admin.py): each returns the new predictor."""

    experts_dir: Path | None  # where experts are found by name; None: adding is off
    work: Path  # where new versions go
    print_fn: object = print

    def add(self, current: BundlePredictor, name: str) -> BundlePredictor:
        if self.experts_dir is None:
            raise RedkitError("adding domains is off: start the server with --experts-dir DIR")
        return with_expert(current, self.experts_dir, name, self.work, self.print_fn)

    def remove(self, current: BundlePredictor, name: str) -> BundlePredictor:
        return without_domain(current, name, self.work, self.print_fn)

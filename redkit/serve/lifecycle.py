"""The modular life cycle at serving time: a domain added or removed while the server answers.

    POST /v1/domains {"expert": NAME}   EXPERTS_DIR/NAME, written by `redkit train-expert`
    POST /v1/domains?owner=NAME         a data owner's contribution, uploaded as a tar (redkit/federated/upload.py)
    DELETE /v1/domains/NAME

Each change is the library's own step on the run behind the served model, then the new run's bundle and
serving graph, then a new predictor: built beside the old one, in WORK/vN/, and swapped in whole by the caller
(redkit/serve/state.py). The old one keeps answering until then. This path imports torch; serving does not.

- a run fit on pooled data (redkit.lifecycle): add-domain retrains only the router and gate over every domain,
  remove-domain masks the domain's labels and retrains them too; the fingerprint of an expert from another
  backbone is refused in one line;
- a run assembled from owners' contributions (redkit federate): an upload is checked as the federation's server
  checks one (redkit/federated/assemble.py: sizes, sha256, names, backbone, routing) and the run assembled again
  with it (an owner's earlier contribution replaced whole); a domain removed is its owner opting out: the run
  assembled again without it. Nothing is trained either way: the router is the owners' statistics summed.
"""

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from redkit.errors import RedkitError
from redkit.federated.upload import SIZE_LIMIT
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


def with_contribution(
    current: BundlePredictor, owner: str, files: dict[str, bytes], work: Path, limit: int, print_fn=print
) -> BundlePredictor:
    """A new predictor with owner `owner`'s uploaded contribution (checked first: refused, nothing is written
    but an empty WORK/received)."""
    from redkit.federated.assemble import assemble, check, contributions_of, refuse_secure

    plan, accepted = contributions_of(_needs_run(current))
    refuse_secure(plan, f"owner {owner!r} cannot join by upload")
    received = Path(work) / "received"
    received.mkdir(parents=True, exist_ok=True)
    staged = check(files, plan, owner, received, limit, others=accepted)
    owners = [a for a in accepted if a.owner != owner] + [staged]
    try:
        return _next(current, work, lambda parent, out: assemble(plan, owners, out, print_fn))
    finally:
        shutil.rmtree(staged.directory, ignore_errors=True)  # assembled in the new run: no second copy kept


def without_domain(current: BundlePredictor, name: str, work: Path, print_fn=print) -> BundlePredictor:
    """A new predictor without domain `name`."""
    from redkit.fitting.run import FitRun

    if name not in current.domains:
        raise KeyError(name)
    if FitRun(_needs_run(current)).assembled:  # its owner opts out: assembled again without it
        from redkit.federated.assemble import assemble, contributions_of, refuse_secure, without

        plan, accepted = contributions_of(current.source_run)
        refuse_secure(plan, f"domain {name!r} cannot be removed")
        return _next(current, work, lambda parent, out: assemble(plan, without(accepted, name), out, print_fn))
    from redkit.lifecycle.remove import remove_domain

    return _next(current, work, lambda parent, out: remove_domain(parent, name, out=out, print_fn=print_fn))


@dataclass(frozen=True)
class DomainChanges:
    """What the admin routes call (redkit/serve/admin.py): each returns the new predictor."""

    experts_dir: Path | None  # where experts are found by name; None: adding is off
    work: Path  # where new versions go
    print_fn: object = print
    upload_limit: int = SIZE_LIMIT  # bytes of an owner's uploaded contribution (ServeConfig.max_upload_bytes)

    def add(self, current: BundlePredictor, name: str) -> BundlePredictor:
        if self.experts_dir is None:
            raise RedkitError("adding domains is off: start the server with --experts-dir DIR")
        return with_expert(current, self.experts_dir, name, self.work, self.print_fn)

    def remove(self, current: BundlePredictor, name: str) -> BundlePredictor:
        return without_domain(current, name, self.work, self.print_fn)

    def contribute(self, current: BundlePredictor, owner: str, files: dict[str, bytes]) -> BundlePredictor:
        return with_contribution(current, owner, files, self.work, self.upload_limit, self.print_fn)

"""The server's side: each owner's contribution checked, then the accepted ones assembled into one fit run.

check(received, plan, owner)   received = {relative path: bytes} as it came over the wire
    size       the whole contribution within the limit (before anything is read), as sent and as its manifest
               gives its files: only then is each expanded from its compact form (compact.py), within its size
    manifest   contribution.json: JSON, format, its domains and labels plain names
    names      every file a module file of one of its domains: modules/<part>/<domain>/{config.json,
               model.safetensors}, no other path, nothing left over (a name is never a path unchecked)
    sha256     every file of the size and sha256 its manifest gives
    backbone   the manifest's fingerprint and width the plan's, and every module's own (validate.py: load_part)
    routing    the statistics of the plan's φ (width, seed): shares of other random features cannot be summed
─► an accepted contribution is staged under WORK/<owner>/, written only once every check passed

assemble(plan, accepted, OUT)  a fit run of every accepted domain (in the order of their names: the same
    owners, the same run, whatever order they arrived in): the host (plan.py), each domain's modules copied
    byte for byte, and router and gate built from the statistics modules (redkit/routers/gaussian.py) --
    nothing trained, no example read. `redkit eval`, `predict`, `export` and `serve` read it as any fit run.
    With secure aggregation, the owners' scatters come as one sum (secure_sum.py), saved beside them
    (modules/statistics_sum, checked as one scatter: `summed_module`).
"""

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from redkit.atomic import write_json
from redkit.bundle.manifest import _inside, file_digest
from redkit.errors import RedkitError
from redkit.federated.compact import expand
from redkit.federated.owner import FORMAT, MANIFEST
from redkit.federated.plan import FederationPlan, write_host
from redkit.federated.upload import SIZE_LIMIT
from redkit.federated.validate import check_scatter, load_part, manifest_label_rows, validate
from redkit.fitting.config import FitConfig
from redkit.fitting.data import FitData
from redkit.fitting.replay_free import RESIDUAL
from redkit.fitting.run import FEDERATION, FitRun
from redkit.jsonfile import read_json
from redkit.modules.layers import ROUTERS
from redkit.modules.store import ModuleMeta, install_module, save_module
from redkit.names import check_name
from redkit.routers.gaussian import STATISTICS_SUM, SummedScatter, SummedScatterConfig, input_width

FILES = ("config.json", "model.safetensors")


@dataclass(frozen=True)
class Accepted:
    owner: str
    directory: Path  # WORK/<owner>/: the contribution as received, checked
    manifest: dict


def check(
    received: dict[str, bytes],
    plan: FederationPlan,
    owner: str,
    work: Path,
    limit: int = SIZE_LIMIT,
    others: list[Accepted] = (),
) -> Accepted:
    """The contribution `received` from `owner`, checked and staged in work/<owner> (replacing that owner's
    earlier one, and only it); one line naming what is wrong otherwise, and nothing written. `others`: the
    contributions accepted so far; one that gives a domain or a label of another owner's is refused here,
    before it is staged, so the accepted ones always assemble."""
    where = f"owner {owner!r}"
    check_name(owner, "owner", "contribution")
    size = sum(len(b) for b in received.values())
    if size > limit:
        raise RedkitError(f"{where}: contribution of {size:,} bytes, over the limit of {limit:,}")
    if MANIFEST not in received:
        raise RedkitError(f"{where}: no {MANIFEST} in its contribution")
    try:
        manifest = json.loads(received[MANIFEST])
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RedkitError(f"{where}: {MANIFEST} is not JSON ({err})") from None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("files"), dict)
    ):
        raise RedkitError(f"{where}: {MANIFEST} is not a contribution manifest of format {FORMAT}")
    domains = manifest.get("domains")
    if not isinstance(domains, list) or not domains:
        raise RedkitError(f"{where}: {MANIFEST} field 'domains' must list its domains")
    for domain in domains:
        check_name(domain, "domain", f"{where}: {MANIFEST} field 'domains'")
    rows = manifest.get("label_rows")
    if not isinstance(rows, dict) or set(rows) != set(domains):
        raise RedkitError(f"{where}: {MANIFEST} field 'label_rows' must give each of its domains' labels")
    rows = manifest_label_rows(manifest, where)  # plain names, one row each: before others' are compared
    refuse_conflicts(owner, manifest, others)
    if manifest.get("fingerprint") != plan.fingerprint:
        raise RedkitError(
            f"{where}: trained on backbone {manifest.get('fingerprint')}, the federation's is {plan.fingerprint}"
        )
    if (experts := manifest.get("owner_experts", RESIDUAL)) != plan.owner_experts:  # manifests before it: residual
        raise RedkitError(f"{where}: its owners' experts are {experts!r}, the federation's {plan.owner_experts!r}")
    if manifest.get("router_options") != plan.router_options:
        raise RedkitError(
            f"{where}: routing statistics of φ {manifest.get('router_options')}, not the plan's {plan.router_options}"
        )
    expected = {str(Path("modules", *part, d, name)) for d in domains for part in plan.parts() for name in FILES}
    listed = set(manifest["files"])
    for relative in sorted(listed | set(received) - {MANIFEST}):
        _inside(Path(work), relative, Path(MANIFEST))  # a path, absolute or with '..', is refused here
        if relative not in expected:
            raise RedkitError(f"{where}: file {relative!r} is not a module file of its domains {domains}")
        if relative not in received or relative not in listed:
            missing = "received but not listed in" if relative in received else "listed in but not received with"
            raise RedkitError(f"{where}: file {relative!r} {missing} {MANIFEST}")
    if absent := sorted(expected - listed):  # every domain brings every part: validate reads each of them
        raise RedkitError(f"{where}: no file {absent[0]!r} in its contribution ({len(absent)} of its modules' files)")
    sizes = {rel: entry.get("size") if isinstance(entry, dict) else None for rel, entry in manifest["files"].items()}
    if bad := sorted(rel for rel, size in sizes.items() if type(size) is not int or size < 0):
        raise RedkitError(f"{where}: {MANIFEST} gives file {bad[0]!r} no size in bytes")
    if (declared := sum(sizes.values())) > limit:  # before anything is expanded (compact.py)
        raise RedkitError(f"{where}: its manifest gives files of {declared:,} bytes, over the limit of {limit:,}")
    # every file but the manifest is listed (above): each back to its bytes, never more than the size listed
    received = {
        rel: expand(b, sizes[rel], f"{where}: file {rel!r}") if rel in sizes else b for rel, b in received.items()
    }
    for relative, size in sizes.items():
        if size != len(received[relative]):
            raise RedkitError(f"{where}: file {relative!r} is not of the size its manifest gives")
    staging = Path(tempfile.mkdtemp(prefix=f".{owner}.", dir=Path(work)))
    try:
        for relative, data in received.items():  # the module files, expanded
            (staging / relative).parent.mkdir(parents=True, exist_ok=True)
            (staging / relative).write_bytes(data)
        for relative, entry in manifest["files"].items():
            if file_digest(staging / relative) != entry.get("sha256"):
                raise RedkitError(f"{where}: file {relative!r} does not have the sha256 its manifest gives")
        loaded = {}  # {"modules/<part>/<domain>": (module, meta)}: each loaded once, for validate too
        for module, part in ((str(Path("modules", *part, d)), part) for d in domains for part in plan.parts()):
            try:  # its own fingerprint, loadable, of the manifest's width
                loaded[module] = load_part(staging / module, part, plan, manifest.get("dim"))
            except RedkitError as err:  # said of the owner's file, not of the server's staging folder
                raise RedkitError(f"{where}: {str(err).replace(f'{staging}/', '')}") from None
        validate(loaded, rows, plan, where)  # what the files hold: label rows, statistics (validate.py)
        target = Path(work) / owner
        install_module(staging, target)  # one rename: an owner's earlier contribution is replaced whole
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Accepted(owner, target, manifest)


def refuse_conflicts(owner: str, manifest: dict, others: list[Accepted]) -> None:
    """A domain or a label of `manifest` that another owner's accepted contribution already has: refused in one
    line (the owner's own earlier contribution is the one this replaces, so it is no conflict)."""
    domain_owner, label_owner = {}, {}
    for a in others:
        if a.owner != owner:
            for domain in a.manifest["domains"]:
                domain_owner[domain] = a.owner
                label_owner.update({label: (a.owner, domain) for label in a.manifest["label_rows"][domain]})
    for domain in manifest["domains"]:
        if domain in domain_owner:
            raise RedkitError(f"owner {owner!r}: domain {domain!r} is owner {domain_owner[domain]!r}'s; one owner each")
        for label in manifest["label_rows"][domain]:
            if label in label_owner:
                holder, theirs = label_owner[label]
                raise RedkitError(
                    f"owner {owner!r}: label {label!r} of domain {domain!r} is in owner {holder!r}'s domain "
                    f"{theirs!r}; a label belongs to one domain"
                )


def accepted_in(directory: Path) -> list[Accepted]:
    """The contributions accepted so far (work/<owner>/ with its manifest), by owner name."""
    return [
        Accepted(path.name, path, json.loads((path / MANIFEST).read_text()))
        for path in sorted(Path(directory).iterdir())
        if not path.name.startswith(".") and (path / MANIFEST).is_file()
    ]


def summed_module(plan: FederationPlan, accepted: list[Accepted], scatter: torch.Tensor) -> SummedScatter:
    """The accepted owners' scatters' sum as a module naming their domains; one line if it is not a scatter (a
    forged share shows only here, in the sum: no owner can be told from another)."""
    check_scatter(scatter, "the owners' securely summed scatter: field", owners=len(accepted))
    dim = input_width(plan.router_options, accepted[0].manifest["dim"])
    domains = tuple(sorted(d for a in accepted for d in a.manifest["domains"]))
    module = SummedScatter(SummedScatterConfig(dim, plan.router_options["width"], plan.router_options["seed"], domains))
    module.scatter.copy_(scatter)
    return module


def refuse_secure(plan: FederationPlan, change: str) -> None:
    """One line if the run's scatters were summed securely: its sum cannot gain or lose an owner's share without
    the owners (a new `redkit federate --secure-aggregation` round)."""
    if plan.secure_aggregation:
        raise RedkitError(
            f"{change}: this run's owners' scatters were summed securely, and the sum cannot gain or lose one owner's "
            "without the others: run the federation's secure round again (redkit federate --secure-aggregation)"
        )


def assemble(
    plan: FederationPlan, accepted: list[Accepted], out: Path, print_fn=print, summed: SummedScatter | None = None
) -> FitRun:
    """The fit run of every accepted owner's domains, at `out` (written to a temporary folder, then renamed);
    `summed`: their withheld scatters' sum (secure aggregation)."""
    out = Path(out)
    if out.exists():
        raise RedkitError(f"{out}: already exists; choose another --out or delete it")
    owner_of = {}
    for a in accepted:
        for domain in a.manifest["domains"]:
            if domain in owner_of:
                raise RedkitError(f"domain {domain!r} sent by owners {owner_of[domain]!r} and {a.owner!r}: one each")
            owner_of[domain] = a
    domains = tuple(sorted(owner_of))
    label_rows = {d: tuple(owner_of[d].manifest["label_rows"][d]) for d in domains}
    labels = tuple(label for d in domains for label in label_rows[d])
    if len(set(labels)) != len(labels):
        shared = next(x for x in labels if labels.count(x) > 1)
        raise RedkitError(f"label {shared!r} is in two owners' domains; a label belongs to one domain's rows")
    config = FitConfig(
        **plan.config_fields(),
        labels=labels,
        domains=domains,
        label_domains=tuple(d for d in domains for _ in label_rows[d]),
        label_rows=label_rows,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        run = FitRun(tmp, config)
        note = f"assembled over {len(accepted)} owners' contributions: no example of theirs"
        run.write_data(FitData({}, labels, False, domains, [note]))  # no split: nobody's example is here
        write_host(run, plan)
        for domain in domains:
            source = owner_of[domain].directory
            for part in plan.parts():
                module = Path("modules", *part, domain)
                shutil.copytree(source / module, tmp / module)
        if summed is not None:
            meta = ModuleMeta(STATISTICS_SUM, vars(summed.config), plan.fingerprint, "", plan.seed)
            save_module(run.module_dir(STATISTICS_SUM), summed, meta)
        router = ROUTERS[config.router]
        for role in ("router", "gate"):  # from the statistics modules alone (role does not change it)
            built = router.from_run(run, role, **config.router_options)
            metrics = {"epochs": 0, "training_free": True, "from": "statistics"}
            save_module(
                run.module_dir(role),
                built,
                ModuleMeta(built.kind, vars(built.config), plan.fingerprint, "", plan.seed, metrics=metrics),
            )
        owners = {a.owner: list(a.manifest["domains"]) for a in accepted}
        write_json(tmp / FEDERATION, {"owners": owners, "plan": json.loads(plan.to_json())})
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_fn(f"assembled {out}: {len(domains)} domains from {len(accepted)} owners, {len(labels)} labels")
    return FitRun(out)


def contributions_of(run_dir: Path) -> tuple[FederationPlan, list[Accepted]]:
    """An assembled run's plan and its owners' contributions as the run holds them (each domain's modules are
    its owner's files, copied byte for byte): what a running server assembles again when an owner joins or
    leaves (redkit/serve/lifecycle.py), with no other copy of them."""
    run = FitRun(run_dir)
    if not run.assembled:
        raise RedkitError(
            f"{run_dir}: not assembled from owners' contributions (redkit federate); an owner's upload joins such "
            'a run: add a domain to this one with {"expert": NAME}'
        )
    record = read_json(run.dir / FEDERATION, "the run's federation record")
    plan = FederationPlan.from_json(json.dumps(record["plan"]))
    rows = run.config.label_rows
    return plan, [
        Accepted(owner, run.dir, {"domains": list(domains), "label_rows": {d: list(rows[d]) for d in domains}})
        for owner, domains in record["owners"].items()
    ]


def without(accepted: list[Accepted], domain: str) -> list[Accepted]:
    """`accepted` less `domain` (an owner opting out of one of its domains; an owner left with none is gone)."""
    kept = []
    for a in accepted:
        domains = [d for d in a.manifest["domains"] if d != domain]
        if domains:
            rows = {d: a.manifest["label_rows"][d] for d in domains}
            kept.append(Accepted(a.owner, a.directory, a.manifest | {"domains": domains, "label_rows": rows}))
    return kept

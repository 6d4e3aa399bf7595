"""What a contribution's files say, checked before its statistics are summed into everyone's router.

assemble.check has checked the files themselves (names, sizes, sha256, fingerprints, each module loadable:
store.py's read_weights refuses NaN and infinite weights) and the manifest's label rows
(`manifest_label_rows`, before anything is staged) when it calls `validate` with the modules it loaded, which
reads what they hold:

    label_rows   the manifest's {domain: labels}: each a non-empty list of plain names (check_name), no label twice
    loaded       each module of the plan's backbone (fingerprint) and of the manifest's width (load_part); a tuned
                 owner's top layers (experts/tuned/<d>) those of the plan's backbone: names, shapes, split
    kinds        modules/<part>/<d> a module of that part's kind (a residual expert or tuned top, label rows, ...)
    label rows   modules/label_rows/<d>: its rows are those labels, in that order
    statistics   modules/statistics/<d> (redkit/routers/gaussian.py DomainStatistics, as train_domain saves it):
                 of the plan's φ (width, seed); a row "<d>/<label>" per label; counts whole, 1 to MAX_COUNT;
                 means within MAX_MEAN; scatter symmetric, positive semi-definite, small enough to sum exactly
                 (withheld where the plan sums them securely, and only there: the sum is checked as one, below)
    density      modules/density/<d> (redkit/oos/owner_density.py): a class per label, in order; a positive sd

Each refusal is one line naming the owner, the domain and the field. Why these: the router is the owners'
statistics merged, so one owner's share reaches every query. A statistics row named after another domain
would route its class there; a count of zero or below, a scatter that is not a scatter (asymmetric,
indefinite, entries too large for redkit/incremental/statistics.py's exact sums), or a mean of 1e200 (its
Σ⁻¹μ overflows the router's float32 weights into inf, and 0 · inf is NaN for every query) make the merged
Gaussians meaningless or NaN for every owner's queries, not only this one's. A density, by contrast, scores only
the queries routed to its own domain: a forged one can hide its own domain's out-of-scope queries, no one else's.

MAX_COUNT bounds one class's prior: π_c is its count over all counts, so an owner claiming 1e15 examples of a
class would win every query near it whatever its likelihood. 10,000,000 examples per class is 100,000 times
CLINC150's 100 and above any intent data set we know of, while log(1e7) = 16 keeps what a prior can add to a
class's score of the order of its log-likelihood's spread, not astronomically beyond it. It stops absurd claims,
not an owner who inflates its counts within it: the router trusts owners' counts as it trusts their data.
MAX_MEAN: φ(h) = ReLU(hP) of a pooled feature; CLINC150's largest class mean is 18 (runs/clinc-rf), 10,000
leaves room for other backbones and keeps Σ⁻¹μ and μᵀΣ⁻¹μ far inside float32.
"""

import json
from functools import cache
from pathlib import Path

import torch

from redkit.backbone import Backbone, BackboneConfig
from redkit.errors import RedkitError
from redkit.federated.upload import MANIFEST
from redkit.fitting.tuned_encoder import check_top
from redkit.fitting.tuned_owners import TUNED_PARTS, TUNED_TOP
from redkit.incremental.projection import WIDTH
from redkit.incremental.statistics import GRID, on_grid
from redkit.modules.store import load_module, load_state
from redkit.names import check_name
from redkit.oos.owner_density import DENSITY
from redkit.routers.gaussian import STATISTICS, input_width

MAX_COUNT = 10_000_000  # examples of one class (see above)
MAX_MEAN = 1e4  # |an entry of a class mean of φ| (see above)


def validate(loaded: dict[str, tuple], rows: dict[str, tuple[str, ...]], plan, where: str) -> None:
    """The contribution's modules as check loaded them ({"modules/<part>/<domain>": (module, meta)}), of label
    rows `rows` (manifest_label_rows), for `plan`; one line naming `where` (the owner), the domain and the field
    otherwise."""
    for domain, labels in rows.items():
        at = f"{where}: domain {domain!r}"
        modules = {part[-1]: of_kind(loaded, part, domain, at) for part in plan.parts()}
        if tuple(modules["label_rows"].config.labels) != labels:
            raise RedkitError(f"{at}: label_rows field 'labels' must be its {MANIFEST} label_rows, in order")
        check_statistics(modules[STATISTICS], tuple(f"{domain}/{label}" for label in labels), plan, at)
        check_density(modules[DENSITY], labels, at)


def load_part(path: Path, part: tuple[str, ...], plan, dim) -> tuple:
    """(module, meta) of a contribution's module of `part` at `path`, of the plan's backbone (fingerprint) and of
    width `dim` (its manifest's; the statistics' φ reads input_width of it); a tuned owner's top layers as their
    state dict, checked against the plan's backbone (check_top). One line otherwise."""
    if part == TUNED_PARTS[0]:
        state, meta = load_state(path, plan.fingerprint)
        if meta.kind != TUNED_TOP:  # before its tensors are read as top layers
            raise RedkitError(f"{path}: field 'kind' is {meta.kind!r}, not {TUNED_TOP!r}")
        check_top(path, state, meta, backbone_of(plan.to_json()))
        return state, meta
    module, meta = load_module(path, plan.fingerprint)
    width = input_width(plan.router_options, dim) if part == (STATISTICS,) else dim
    if meta.config.get("dim") != width:
        raise RedkitError(f"{path}: of width {meta.config.get('dim')}, its manifest's dim says {width}")
    return module, meta


@cache
def backbone_of(plan_json: str) -> Backbone:
    """The plan's pretrained backbone (loaded once per plan: every tuned top of a round is checked against it)."""
    return Backbone(BackboneConfig(**json.loads(plan_json)["backbone"]))


def of_kind(loaded: dict[str, tuple], part: tuple[str, ...], domain: str, at: str):
    """The module of `part` (("experts", "residual"), ...) of `domain`, of that part's kind (its last name; a tuned
    top's load_part checked)."""
    module, meta = loaded[str(Path("modules", *part, domain))]
    if meta.kind != part[-1] and part != TUNED_PARTS[0]:
        raise RedkitError(f"{at}: {'/'.join(part)} field 'kind' is {meta.kind!r}, not {part[-1]!r}")
    return module


def manifest_label_rows(manifest: dict, where: str) -> dict[str, tuple[str, ...]]:
    """The manifest's label_rows (its keys its domains: check's), each a non-empty list of plain names, no
    label in two rows (a label belongs to one domain's rows)."""
    rows, seen = {}, {}
    for domain, labels in manifest["label_rows"].items():
        field = f"{where}: {MANIFEST} field 'label_rows' of domain {domain!r}"
        if not isinstance(labels, list) or not labels:
            raise RedkitError(f"{field} must list its labels")
        for label in labels:
            check_name(label, "label", field, reserved=False)  # a label is no folder: 'router' may be one
            if label in seen:
                raise RedkitError(f"{field}: label {label!r} is given twice (also in domain {seen[label]!r})")
            seen[label] = domain
        rows[domain] = tuple(labels)
    return rows


def check_statistics(module, labels: tuple[str, ...], plan, at: str) -> None:
    """A DomainStatistics module (its tensors' shapes are its config's: load_module loaded them into it)."""
    config, field = module.config, f"{at}: statistics field"
    width, seed = plan.router_options.get("width", WIDTH), plan.router_options.get("seed", 0)
    if (config.width, config.seed) != (width, seed):
        raise RedkitError(f"{field} 'config': φ of width {config.width} seed {config.seed}, the plan's {width} {seed}")
    if tuple(config.labels) != labels:
        raise RedkitError(f"{field} 'labels' must be its label rows as '<domain>/<label>', in order")
    counts, means = module.counts, module.means
    if not bool(((counts >= 1) & (counts <= MAX_COUNT) & (counts == counts.round())).all()):
        raise RedkitError(f"{field} 'counts' must be whole numbers of examples from 1 to {MAX_COUNT:,}")
    if bool((means.abs() > MAX_MEAN).any()):
        raise RedkitError(f"{field} 'means' has entries beyond ±{MAX_MEAN:g}")
    if config.withheld != plan.secure_aggregation:
        sent, summed = ("withheld", "in the clear") if config.withheld else ("sent in the clear", "securely")
        raise RedkitError(f"{field} 'withheld': its scatter is {sent}, and this federation sums the scatters {summed}")
    if not config.withheld and config.rank != (rank := plan.router_options.get("scatter_rank", 0)):
        raise RedkitError(f"{field} 'rank': its scatter is kept at rank {config.rank}, the plan's is {rank}")
    if not config.withheld:
        check_scatter(module.full_scatter(f"{field} 'factor'"), field)


def check_density(module, labels: tuple[str, ...], at: str) -> None:
    """An OwnerDensity module: a class per label row, in order, and a calibration that divides by a positive sd."""
    if tuple(module.config.labels) != labels:
        raise RedkitError(f"{at}: density field 'labels' must be its label rows, in order")
    if not float(module.calibration[1]) > 0:
        raise RedkitError(f"{at}: density field 'calibration' must end with a positive standard deviation")


def check_scatter(scatter: torch.Tensor, field: str, owners: int = 1) -> None:
    """Σ (φ - μ)(φ - μ)ᵀ: symmetric, positive semi-definite, and within the range owners' scatters sum exactly;
    `owners`: how many owners' scatters it sums (each may be a grid step off symmetric)."""
    try:
        on_grid(scatter)  # refuses entries too large to sum exactly over 64 owners
    except RedkitError as err:
        raise RedkitError(f"{field} 'scatter': {err}") from None
    # train_domain's is symmetric bit for bit here (XᵀX); one grid step allowed for another BLAS's summing order
    if float((scatter - scatter.T).abs().max()) > owners * GRID:
        raise RedkitError(f"{field} 'scatter' is not symmetric")
    # Positive semi-definite up to rounding: Cholesky of S + εI, ε above the grid's rounding of M entries (a
    # sum of squares over fewer examples than φ is wide is singular, and rounding leaves it a hair below zero).
    size = scatter.shape[0]
    jitter = size * GRID + 1e-9 * float(torch.trace(scatter).abs())
    _, info = torch.linalg.cholesky_ex(scatter + jitter * torch.eye(size, dtype=scatter.dtype))
    if int(info) != 0:
        raise RedkitError(f"{field} 'scatter' is not positive semi-definite (not a sum of squares)")

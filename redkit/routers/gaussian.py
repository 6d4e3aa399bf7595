"""A router built from what each domain's owner computed on its own data alone, never retrained: the
replay-free routing of redkit/incremental in a fit run (`--router gaussian`).

    owner of domain k   its classes' counts, means and within-class scatter of φ(h)       modules/statistics/<k>
                        (redkit/incremental/statistics.py; φ the frozen random features of projection.py)
    router              the owners' statistics merged (exact sums: any order, the same bits), one Gaussian per
                        class with a shared covariance (gaussian.py), α_k(h) = softmax_k log Σ_{c in k} p(φ(h)|c) π_c;
                        beside it, from the same sums, the ridge's class weights (ridge.py), which do not route
                        but say how far a query is from every class (the out-of-scope score of
                        redkit/oos/owner_density.py)

A new domain needs only its owner's statistics module: add-domain (and `redkit serve`'s POST /v1/domains)
rebuild router and gate from the statistics modules, reading no domain's data, so an expert sent with
its modules alone can join (`redkit train-expert --modules-only`). A domain whose statistics module is
missing has it computed from that domain's own training examples, once, and saved (the run's own domains
at `fit`, a new domain at add-domain --data, every domain when an existing run switches to this router).
The same router serves as the MoE gate: the domain posterior does not depend on which experts it weighs.

With tuned owners (`redkit fit --recipe replay-free --owner-experts tuned`, redkit/incremental/tuned.py) the
statistics are of φ(r), r = [h, the frozen layers' mean state] (input "pooled+lower", 2d wide: the first 2d
columns of such a run's features), at M = 4,096, and the router routes by the ridge (`routes_by` "ridge"): each
query to the owner of the ridge's best class, as the study's `red_tuned`.

Sizes: a statistics module holds a (M, M) float64 scatter (M = 2,048: 33.6 MB), kept in the run for the
next change and never exported (the router holds the merged discriminant and the ridge: 2 × C × M floats).
With the router option `scatter_rank` r > 0 each owner keeps (and sends) its scatter as its top r eigen-directions
in int16 and one floor for the rest (redkit/incremental/scatter_factor.py: M × r × 2 bytes, 2.1 MB at r = 512),
rebuilt with the same bits wherever it is read; the router is built from the rebuilt scatters.

Securely summed scatters (`redkit federate --secure-aggregation`, redkit/federated/secure_sum.py): an owner's
statistics module then says its scatter is withheld (`withheld`: its counts and means only), and the server holds
the sum of the withheld scatters alone, one module (modules/statistics_sum, SummedScatter) naming the domains it
sums. The merge adds it to the scatters in the clear (a domain added later sends its own): the same exact sum, so
the same router. A sum cannot lose or gain a withheld domain without its owners: a run whose withheld domains are
not the sum's is refused in one line.
"""

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from redkit.errors import RedkitError
from redkit.incremental.gaussian import SHRINKAGE, discriminant, domain_scores
from redkit.incremental.projection import WIDTH, ProjectionConfig, RandomProjection
from redkit.incremental.ridge import RIDGE, ridge_weights
from redkit.incremental.scatter_factor import ScatterFactor, factor
from redkit.incremental.statistics import ClassStatistics, merge
from redkit.modules.layers import MODULES
from redkit.modules.store import ModuleMeta, load_module, module_exists, save_module
from redkit.routers.base import RouterBase, RouterOutput, register_router

STATISTICS = "statistics"  # modules/statistics/<domain>: one owner's share of the routing
STATISTICS_SUM = "statistics_sum"  # modules/statistics_sum: the withheld scatters' sum (SummedScatter)


def check_rank(rank: int, width: int, name: str) -> None:
    """A scatter factor's rank: 0 (the scatter whole) or below φ's width (0: any, the width is the features')."""
    if isinstance(rank, int) and not (0 <= rank and (not width or rank < width)):
        below = f"below φ's width {width}" if width else "positive"
        raise ValueError(f"{name} must be 0 (the scatter whole) or {below}, not {rank}")


@dataclass
class DomainStatisticsConfig:
    dim: int  # d, the backbone's width (what the module is checked against when loaded)
    width: int  # M, φ's width (0: φ(h) = h)
    seed: int  # φ's seed
    labels: tuple[str, ...] = ()  # the domain's classes ("domain/class index"), in row order
    withheld: bool = False  # its scatter not here: summed securely with other owners' (SummedScatter)
    rank: int = 0  # r > 0: the scatter kept as its top r eigen-directions and a floor (scatter_factor.py)

    def __post_init__(self):
        self.labels = tuple(self.labels)
        check_rank(self.rank, self.width or self.dim, "rank")


@MODULES.register(STATISTICS)
class DomainStatistics(torch.nn.Module):
    """One domain's ClassStatistics as a module (safetensors + JSON config, like every trained part)."""

    Config = DomainStatisticsConfig

    def __init__(self, config: DomainStatisticsConfig):
        super().__init__()
        self.config = config
        out = config.width or config.dim
        n = len(config.labels)
        self.register_buffer("counts", torch.zeros(n, dtype=torch.float64))  # (C_k,)
        self.register_buffer("means", torch.zeros(n, out, dtype=torch.float64))  # (C_k, M)
        side = 0 if config.withheld or config.rank else out
        self.register_buffer("scatter", torch.zeros(side, side, dtype=torch.float64))  # (M, M), (0, 0) withheld
        if config.rank and not config.withheld:  # the scatter as F Fᵀ 2^-2e + σ² I (scatter_factor.py)
            self.register_buffer("factor", torch.zeros(out, config.rank, dtype=torch.int16))  # (M, r) F
            self.register_buffer("exponent", torch.zeros(1, dtype=torch.int64))  # (1,) e
            self.register_buffer("floor", torch.zeros(1, dtype=torch.float64))  # (1,) σ²

    def full_scatter(self, where: str = "statistics") -> torch.Tensor:
        """(M, M) float64 on the grid: kept whole, or rebuilt from its factor (the same bits anywhere); a withheld
        scatter counts as zero (the sum brings it: GaussianRouter.from_run)."""
        if self.config.withheld:
            return torch.zeros(self.means.shape[1], self.means.shape[1], dtype=torch.float64)
        if self.config.rank:
            return ScatterFactor(self.factor, int(self.exponent), float(self.floor)).scatter(where)
        return self.scatter.double()

    def statistics(self) -> ClassStatistics:
        return ClassStatistics(self.config.labels, self.counts, self.means, self.full_scatter())

    def withholding(self) -> "DomainStatistics":
        """The same counts and means, the scatter withheld (what an owner sends when its scatter is summed)."""
        module = DomainStatistics(DomainStatisticsConfig(**(vars(self.config) | {"withheld": True, "rank": 0})))
        module.counts.copy_(self.counts)
        module.means.copy_(self.means)
        return module

    @classmethod
    def of(cls, stats: ClassStatistics, projection: RandomProjection, dim: int, rank: int = 0) -> "DomainStatistics":
        """`stats` (of φ = `projection` of d-wide features) as a module, its rows named as `stats.labels`; `rank`
        > 0: its scatter kept as that many eigen-directions and a floor (scatter_factor.py)."""
        config = DomainStatisticsConfig(dim, projection.config.width, projection.config.seed, stats.labels, rank=rank)
        module = cls(config)
        module.counts.copy_(stats.counts)
        module.means.copy_(stats.means)
        if not rank:
            module.scatter.copy_(stats.scatter)
            return module
        kept = factor(stats.scatter, rank)
        module.factor.copy_(kept.factor)
        module.exponent.fill_(kept.exponent)
        module.floor.fill_(kept.floor)
        return module


@dataclass
class SummedScatterConfig:
    dim: int  # d, as DomainStatisticsConfig's
    width: int  # M
    seed: int  # φ's seed
    domains: tuple[str, ...] = ()  # whose withheld scatters it sums, by name

    def __post_init__(self):
        self.domains = tuple(self.domains)


@MODULES.register(STATISTICS_SUM)
class SummedScatter(torch.nn.Module):
    """Σ of the withheld scatters of `domains` (M, M) float64: what a secure aggregation gives the server."""

    Config = SummedScatterConfig

    def __init__(self, config: SummedScatterConfig):
        super().__init__()
        self.config = config
        out = config.width or config.dim
        self.register_buffer("scatter", torch.zeros(out, out, dtype=torch.float64))  # (M, M)


POOLED, POOLED_LOWER = "pooled", "pooled+lower"  # what φ reads: h (d), or r = [h, lower] (2d: tuned owners)
ROUTES_BY = ("gaussian", "ridge")


def routing_dim(run) -> int:
    """The width of what the run's router reads: d, or 2d for input "pooled+lower"."""
    return input_width(run.config.router_options, run.feature_dim)


def input_width(router_options: dict, feature_dim: int) -> int:
    """What φ reads under `router_options`, for features of width `feature_dim` (d, or 2d: [h, lower])."""
    return feature_dim * (2 if router_options.get("input", POOLED) == POOLED_LOWER else 1)


def statistics_rank(run) -> int:
    """r of the run's router options: each owner's statistics module keeps its scatter as that many
    eigen-directions and a floor (0: whole)."""
    return int(run.config.router_options.get("scatter_rank", 0))


def routing_projection(run) -> RandomProjection:
    """φ of the run's router options (input, width, seed): what every domain's statistics module is of."""
    options = run.config.router_options
    return RandomProjection(ProjectionConfig(routing_dim(run), options.get("width", WIDTH), options.get("seed", 0)))


@dataclass
class GaussianRouterConfig:
    dim: int
    num_experts: int  # K
    num_classes: int = 0  # C, every domain's classes
    width: int = WIDTH  # M (redkit/incremental/projection.py, chosen on CLINC150's val)
    seed: int = 0  # φ's seed
    shrinkage: float = SHRINKAGE  # λ (redkit/incremental/gaussian.py)
    ridge: float = 0.0  # ρ of the ridge's class weights (redkit/incremental/ridge.py); 0: none (a router built
    # before they were)
    input: str = POOLED  # what φ reads: the first `dim` columns of the features (POOLED_LOWER: a tuned run's r)
    routes_by: str = "gaussian"  # α: the Gaussians' domain posterior, or one-hot on the ridge's best class's domain
    scatter_rank: int = 0  # r of the owners' statistics modules (0: each scatter whole; scatter_factor.py)

    def __post_init__(self):
        if self.input not in (POOLED, POOLED_LOWER) or self.routes_by not in ROUTES_BY:
            raise ValueError(
                f"input {self.input!r}, routes_by {self.routes_by!r}: expected {POOLED}|{POOLED_LOWER}, "
                f"{'|'.join(ROUTES_BY)}"
            )
        if self.routes_by == "ridge" and not self.ridge:
            raise ValueError("routes_by ridge needs the ridge's class weights (ridge > 0)")
        if not 0 <= self.shrinkage <= 1:
            raise ValueError(f"shrinkage must lie in [0, 1], not {self.shrinkage!r}")
        check_rank(self.scatter_rank, self.width, "scatter_rank")


@register_router("gaussian")
class GaussianRouter(RouterBase):
    Config = GaussianRouterConfig
    training_free = True
    replay_free = True

    def __init__(self, config: GaussianRouterConfig):
        super().__init__()
        self.config = config
        self.projection = RandomProjection(ProjectionConfig(config.dim, config.width, config.seed))
        out = self.projection.out_dim
        self.register_buffer("weight", torch.zeros(config.num_classes, out))  # (C, M) Σ⁻¹ μ_c
        self.register_buffer("bias", torch.zeros(config.num_classes))  # (C,)
        self.register_buffer("class_domains", torch.zeros(config.num_classes, dtype=torch.long))  # (C,)
        if config.ridge:
            self.register_buffer("ridge_weight", torch.zeros(config.num_classes, out))  # (C, M)

    def phi(self, h: torch.Tensor) -> torch.Tensor:  # (N, ≥ dim) -> (N, M) φ of the columns the router reads
        return self.projection(h[:, : self.config.dim])

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """(N, ≥ dim) -> (N, K): log Σ_{c in k} p(φ(h)|c) π_c, or (routes_by ridge) each domain's best ridge score."""
        if self.config.routes_by == "ridge":
            outside = F.one_hot(self.class_domains, self.config.num_experts).T == 0  # (K, C)
            return self.ridge_scores(h).unsqueeze(1).masked_fill(outside, float("-inf")).amax(dim=-1)
        class_scores = self.phi(h) @ self.weight.T + self.bias  # (N, C)
        return domain_scores(class_scores, self.class_domains, self.config.num_experts)

    def ridge_scores(self, h: torch.Tensor) -> torch.Tensor:  # (N, ≥ dim) -> (N, C) φ(h) W_ridge
        if not self.config.ridge:
            raise RedkitError("this Gaussian router was built without the ridge's class weights: rebuild it")
        return self.phi(h) @ self.ridge_weight.T

    def route(self, h: torch.Tensor) -> RouterOutput:
        """Soft, as the replay-free model weighs its owners: α = the domain posterior; or, routed by the ridge, hard:
        α = one-hot on the domain of the ridge's best class."""
        logits = self(h)
        if self.config.routes_by == "ridge":
            probs = F.one_hot(logits.argmax(dim=-1), self.config.num_experts).to(logits.dtype)
        else:
            probs = F.softmax(logits, dim=-1)
        return RouterOutput(probs, probs.argmax(dim=-1, keepdim=True), probs, logits, logits.new_zeros(()))

    @classmethod
    def owner_part(cls, run, domain: str) -> dict:
        """What the owner of `domain` computes for this router from its own data: its statistics module."""
        path = run.module_dir(STATISTICS, domain)
        if module_exists(path):
            return {"skipped": str(path)}
        if run.config.router_options.get("input", POOLED) != POOLED:
            raise RedkitError(f"{path}: missing; only its domain's owner computes it (redkit fit --recipe replay-free)")
        projection = routing_projection(run)
        h, y, d = run.split_tensors("train")
        own = d == run.space.domains.index(domain)  # (N,) this domain's examples, nobody else's
        if not own.any():
            raise RedkitError(
                f"{path}: missing, and the run holds no training example of domain {domain!r} to compute it from"
            )
        classes, y = torch.unique(y[own], return_inverse=True)  # the domain's own classes, in label order
        # "domain/class index": unique across domains (two may share a label), for any run's label space
        labels = tuple(f"{domain}/{c}" for c in classes.tolist())
        with torch.no_grad():
            stats = ClassStatistics.of(projection(h[own].double()), y, labels)
        module = DomainStatistics.of(stats, projection, run.feature_dim, statistics_rank(run))
        meta = ModuleMeta(
            STATISTICS,
            vars(module.config),
            run.fingerprint,
            run.data_hash,
            run.config.seed,
            run.space.domains.index(domain),
            metrics={"examples": int(own.sum())},
        )
        save_module(path, module, meta)
        return {"module": str(path), "examples": int(own.sum())}

    @classmethod
    def from_run(
        cls,
        run,
        role: str,
        width: int = WIDTH,
        seed: int = 0,
        shrinkage: float = SHRINKAGE,
        ridge: float = RIDGE,
        input: str = POOLED,
        routes_by: str = "gaussian",
        scatter_rank: int = 0,
    ) -> "GaussianRouter":
        """Merged from every domain's statistics module (each computed first where missing) and the withheld
        scatters' sum; `role` (router or gate) does not matter: the domain posterior is the same."""
        shares, withheld = {}, []
        for domain in run.space.domains:
            cls.owner_part(run, domain)
            module, _ = load_module(run.module_dir(STATISTICS, domain), run.fingerprint, routing_dim(run))
            if (module.config.width, module.config.seed) != (width, seed):
                raise RedkitError(
                    f"{run.module_dir(STATISTICS, domain)}: statistics of φ width {module.config.width} seed "
                    f"{module.config.seed}, but the router's are width {width} seed {seed}"
                )
            shares[domain] = module.statistics()
            withheld += [domain] if module.config.withheld else []
        stats = merge(shares)  # domains in the order of their names, classes within each in row order
        if withheld:  # exact: every scatter is on one grid (redkit/incremental/statistics.py)
            stats.scatter = stats.scatter + summed_scatter(run, withheld, width, seed)
        order = {domain: k for k, domain in enumerate(run.space.domains)}
        class_domains = torch.tensor([order[label.split("/", 1)[0]] for label in stats.labels])
        weight, bias = discriminant(stats, shrinkage)
        router = cls(
            GaussianRouterConfig(
                routing_dim(run),
                run.space.num_domains,
                len(stats.labels),
                width,
                seed,
                shrinkage,
                ridge,
                input,
                routes_by,
                scatter_rank,
            )
        )
        if ridge:
            router.ridge_weight.copy_(ridge_weights(stats, ridge).float())
        router.weight.copy_(weight.float())
        router.bias.copy_(bias.float())
        router.class_domains.copy_(class_domains)
        return router.eval()


def summed_scatter(run, withheld: list[str], width: int, seed: int) -> torch.Tensor:
    """The (M, M) sum of the withheld scatters of `withheld` (modules/statistics_sum); one line if the run has none,
    or the sum's domains are not those."""
    path = run.module_dir(STATISTICS_SUM)
    if not module_exists(path):
        raise RedkitError(f"{path}: missing, and the scatters of domains {withheld} were withheld (summed securely)")
    module, _ = load_module(path, run.fingerprint, routing_dim(run))
    if sorted(module.config.domains) != sorted(withheld):
        raise RedkitError(
            f"{path}: sums the scatters of domains {sorted(module.config.domains)}, the run's withheld ones are "
            f"{sorted(withheld)}: a securely summed scatter cannot gain or lose a domain without its owners' new "
            "secure round (redkit federate --secure-aggregation)"
        )
    if (module.config.width, module.config.seed) != (width, seed):
        raise RedkitError(f"{path}: of φ width {module.config.width} seed {module.config.seed}, not {width} {seed}")
    return module.scatter

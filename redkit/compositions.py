"""Compositions: how trained modules are recombined into one predictor, chosen by name.

Each takes the module set, features h (N, d) and the true domain labels (N,) (used only by the
oracle variants) and returns `Composed(probs (N, C), weights (N, K) or None)`.

    base_classifier        softmax(C(h))                                stage base's classifier C alone
    global_head            softmax(G(h))                                a head trained on all of train
    oracle                 softmax(E_true(h))                           per-domain heads, true domain given
    uniform                (1/K) Σ softmax(E_i(h))                      parameter-free ensemble of the heads
    moe                    Σ α_i softmax(E_i(h)), α = gate(h)           classical softmax MoE
    red                    softmax(C(h + Σ α_i Δh_i(h))), α = router    Residual Expert Decomposition
    red_oracle             RED with α = one-hot(true domain)
    red_uniform            RED with α = 1/K ("AllFix")
    red_logit_experts      softmax(C(h) + Σ α_i W_i h)                  the original code's logit-space experts
    red_per_domain         Σ_i α_i softmax_{y∈D_i}(C(h + Δh_i(h)))      where each label belongs to one domain
                           D_i: p(y) = α_{d(y)} · p_{d(y)}(y), each expert predicting its own domain's labels
    red_per_domain_oracle  the same with α = one-hot(true domain)

A run of tuned owners (redkit/fitting/tuned_owners.py) reads a query as [r, z_1, …, z_K], z_i the pooled output of
owner i's own top layers (redkit/fitting/tuned_encoder.py), and has two compositions of its own (TUNED_COMPOSITIONS),
under the names every command asks for:

    red                    Σ_i α_i softmax_{y∈D_i}(R(z_i)), α = router    α one-hot on the ridge's domain: the routed
                           owner's rows on its own top layers' output
    red_oracle             the same with α = one-hot(true domain)
    red_mixture            Σ_i α_i softmax(C(h + Δh_i(h)))              RED mixing its experts' predictions
                           instead of their updates (a soft mixture where the router is unsure)
    domain_oracle          softmax over the true domain's labels of C(h)  no expert: what knowing the domain
                           is worth by itself (where each label belongs to one domain), beside red_oracle

Each multi-expert composition is a `Mixture` (what the K experts output, how α combines it) and
a source of α: a trained router (`ROUTED`: red, moe, red_logit_experts, red_per_domain, red_mixture:
the ones routing noise acts on), the true domain (oracles) or 1/K (uniform). The names before
redkit 0.2 (global_10pct, global_full, red_within, red_logits) are still read (`OLD_NAMES`).
"""

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from redkit.errors import RedkitError
from redkit.modules.labels import joined_classifier, widened
from redkit.modules.store import load_module, module_exists
from redkit.oos.owner_density import DENSITY
from redkit.red import REDModel
from redkit.red.layer import weighted
from redkit.registry import Registry
from redkit.routers.gaussian import routing_dim
from redkit.train.stage_run import StageRun


class Composed(NamedTuple):
    probs: torch.Tensor  # (N, C)
    weights: torch.Tensor | None  # (N, K) expert weights, where the composition has any


class MissingModule(RedkitError):
    """A module a composition needs is absent from a bundle (heads are exported only on request), from a
    run assembled from owners' contributions (no global head: redkit/federated) or from a run of the replay-free
    recipe (no head: redkit/fitting/replay_free.py);
    `compose` adds the composition's name to the line."""

    def __init__(self, module: str, composition: str | None = None):
        self.module, self.composition = module, composition
        hint = (
            "export with --heads"
            if module.startswith("modules/heads/")
            else "the run it was exported from has none either"
        )
        super().__init__(
            f"{composition + ' needs ' if composition else ''}{module} which this bundle does not have; {hint}"
        )


class ModuleSet:
    """Every trained module of a run, loaded lazily (a composition loads only what it uses) and
    checked against the run's backbone fingerprint and width."""

    def __init__(self, run: StageRun):
        self.run = run
        self._loaded: dict[str, nn.Module] = {}
        self._red: dict[str, REDModel] = {}
        self._joined: nn.Module | None = None

    def _load(self, *parts: str) -> nn.Module:
        key = "/".join(parts)
        if key not in self._loaded:
            run = self.run
            partial = (
                getattr(run, "bundle", None) is not None
                or getattr(run, "assembled", False)
                or getattr(run.config, "recipe", "pooled") == "replay-free"  # no head: they pool the data
            )
            if partial and not module_exists(run.module_dir(*parts)):
                raise MissingModule(f"modules/{key}")
            # a router reads its own width (2d: a tuned run's r, redkit/routers/gaussian.py); every other module h's
            dim = routing_dim(run) if parts[0] in ("router", "gate") else run.feature_dim
            self._loaded[key] = load_module(run.module_dir(*parts), run.fingerprint, dim)[0].to(run.device)
        return self._loaded[key]

    def loaded(self) -> dict[str, nn.Module]:
        """The modules loaded so far, by path under modules/ (what the compositions called have used)."""
        return dict(self._loaded)

    def classifier(self) -> nn.Module:
        """C, joined with the label rows of domains added with new labels (redkit/modules/labels.py)."""
        if self._joined is None:  # not in _loaded: it holds modules loaded there already
            self._joined = joined_classifier(self.run, self._load)
        return self._joined

    def base_classifier(self) -> nn.Module:
        """C alone, as stage base trained it: labels added later are impossible to it (-inf). C over no label (a run
        of the replay-free recipe, or assembled from owners) predicts nothing: the composition is not available."""
        classifier = self._load("classifier")
        if classifier.config.num_classes == 0:
            raise MissingModule("modules/classifier over a label")
        return widened(self.run, classifier, float("-inf"))

    def experts(self, kind: str) -> list[nn.Module]:
        fill = 0.0  # a logit expert trained before later labels existed does not correct them
        return [
            self._load("experts", kind, name)
            if kind == "residual"
            else widened(self.run, self._load("experts", kind, name), fill)
            for name in self.run.space.domains
        ]

    def heads(self) -> list[nn.Module]:
        return [widened(self.run, self._load("heads", name), float("-inf")) for name in self.run.space.domains]

    def global_head(self) -> nn.Module:
        return widened(self.run, self._load("heads", "global_full"), float("-inf"))

    def red(self, kind: str) -> REDModel:
        """The run's RED model over its `kind` experts (residual, or logit: red_logit_experts), without the
        router: a composition gives it α (the router's, the true domain, 1/K)."""
        if kind not in self._red:
            self._red[kind] = REDModel.from_parts(self.classifier(), self.experts(kind), tuple(self.run.space.domains))
        return self._red[kind]

    def owner_views(self, h: torch.Tensor) -> torch.Tensor:
        """(N, K, d) each owner's own view of queries with features h: h + Δh_k(h) through its residual expert, or in
        a run of tuned owners the pooled output of its own top layers (the features' blocks after r)."""
        from redkit.fitting.replay_free import has_tuned_owners

        if not has_tuned_owners(self.run.config):
            return self.red("residual").expert_hidden(h)
        d = self.run.feature_dim
        return h[:, 2 * d :].unflatten(1, (-1, d))  # no batch size named: the served graph keeps it dynamic

    def router(self) -> nn.Module:
        return self._load("router")

    def gate(self) -> nn.Module:
        return self._load("gate")

    def density(self, domain: str) -> nn.Module:
        """`domain`'s owner's Gaussians of its adapted features (redkit/oos/owner_density.py)."""
        return self._load(DENSITY, domain)


# Names before redkit 0.2, still read from a run's results.json or asked for by --composition.
OLD_NAMES = {
    "global_10pct": "base_classifier",
    "global_full": "global_head",
    "red_within": "red_per_domain",
    "red_within_oracle": "red_per_domain_oracle",
    "red_logits": "red_logit_experts",
}
COMPOSITIONS: Registry[Callable[[ModuleSet, torch.Tensor, torch.Tensor], Composed]] = Registry("composition", OLD_NAMES)


def current_names(table: dict) -> dict:
    """A table keyed by composition names (a results.json split, say) with old names made current."""
    return {OLD_NAMES.get(name, name): value for name, value in table.items()}


# ---- mixtures: K experts' outputs, combined by weights α -------------------------------------------


class Mixture(NamedTuple):
    """What K experts contribute and how weights α combine it, apart from where α comes from (the
    split of transformers' Mixtral block: routing first, then expert computation given the weights).
    `outputs` runs the experts once; `mix` is cheap, so a study can re-mix under many α."""

    outputs: Callable[[ModuleSet, torch.Tensor], torch.Tensor]  # h (N, d) -> (N, K, ·)
    mix: Callable[
        [ModuleSet, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor
    ]  # (h, outputs, α (N, K)) -> probs (N, C)


def _head_probs(modules: ModuleSet, h: torch.Tensor) -> torch.Tensor:
    return torch.stack([F.softmax(head(h), dim=-1) for head in modules.heads()], dim=1)  # (N, K, C)


def _red_mixture(kind: str) -> Mixture:
    """RED's mixture, run by the one REDModel: its experts' updates (N, K, ·), then softmax of its mix."""
    return Mixture(
        lambda m, h: m.red(kind).expert_updates(h),
        lambda m, h, updates, alpha: F.softmax(m.red(kind).mix(h, updates, alpha), dim=-1),
    )


def _expert_logits(modules: ModuleSet, h: torch.Tensor) -> torch.Tensor:
    """(N, K, C): C(h + Δh_i(h)), what the shared classifier says with expert i alone (REDModel's
    per-expert hidden states through its classifier)."""
    red = modules.red("residual")
    return red.classifier(red.expert_hidden(h))


def _within_domains(modules: ModuleSet, h: torch.Tensor, logits: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Σ_i α_i softmax over domain i's labels of expert i's logits (N, K, C) -> probs (N, C): each
    label's probability comes from its own domain's expert only, weighted by that domain's α."""
    mask = modules.run.space.domain_mask().to(logits.device)  # (K, C)
    within = F.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)  # (N, K, C), 0 outside domain i
    return weighted(within, alpha)


def _tuned_logits(modules: ModuleSet, h: torch.Tensor) -> torch.Tensor:
    """(N, K, C): every domain's rows on owner i's tuned view z_i (a run of tuned owners only: `compose`)."""
    return modules.classifier()(modules.owner_views(h))


MIXTURES: dict[str, Mixture] = {
    # Σ_i α_i softmax(E_i(h)): the baselines' full heads
    "heads": Mixture(_head_probs, lambda m, h, probs, alpha: weighted(probs, alpha)),
    # softmax(C(h + Σ_i α_i Δh_i(h))): RED
    "residual": _red_mixture("residual"),
    # softmax(C(h) + Σ_i α_i W_i h): the original code's logit-space residual
    "logit": _red_mixture("logit"),
    # Σ_i α_i softmax_{y∈D_i}(C(h + Δh_i(h))): RED with the label structure (each label in one domain)
    "within": Mixture(_expert_logits, _within_domains),
    # Σ_i α_i softmax(C(h + Δh_i(h))): RED's experts' own predictions, mixed
    "residual_outputs": Mixture(
        lambda m, h: F.softmax(_expert_logits(m, h), dim=-1), lambda m, h, probs, alpha: weighted(probs, alpha)
    ),
}


# ---- where α comes from --------------------------------------------------------------------------


class Routed(NamedTuple):
    """A composition whose α is softmax of a trained router's logits: the ones routing noise acts on."""

    mixture: str  # a MIXTURES key
    router: str  # "router" (RED's, domain-supervised) or "gate" (MoE's, trained on the task loss)


ROUTED: Registry[Routed] = Registry("routed composition", OLD_NAMES)


def router_logits(modules: ModuleSet, router: str, h: torch.Tensor) -> torch.Tensor:
    """(N, K) logits of the run's router or gate."""
    return getattr(modules, router)()(h)


def router_alpha(modules: ModuleSet, router: str, h: torch.Tensor) -> torch.Tensor:
    """(N, K) α of the run's router or gate: the weights it routes with (the dense router's softmax;
    sparse for top-k, capacity and expert-choice routers)."""
    return getattr(modules, router)().route(h).weights


def one_hot_alpha(labels: torch.Tensor, k: int) -> torch.Tensor:
    """α = one-hot(true domain) (N, K): the oracle's routing."""
    return F.one_hot(labels, k).float()


def uniform_alpha(n: int, k: int, device: torch.device) -> torch.Tensor:
    """α = 1/K (N, K): no routing at all."""
    return torch.full((n, k), 1.0 / k, device=device)


AlphaNoise = Callable[
    [torch.Tensor, torch.Tensor], torch.Tensor
]  # (router logits (N, K), true domains (N,)) -> α (N, K)


def _register_routed(name: str, mixture: str, router: str) -> None:
    ROUTED.register(name)(Routed(mixture, router))

    def composition(
        modules: ModuleSet, h: torch.Tensor, labels: torch.Tensor, alpha_noise: AlphaNoise | None = None
    ) -> Composed:
        alpha = (
            alpha_noise(router_logits(modules, router, h), labels) if alpha_noise else router_alpha(modules, router, h)
        )
        return Composed(MIXTURES[mixture].mix(modules, h, MIXTURES[mixture].outputs(modules, h), alpha), alpha)

    COMPOSITIONS.register(name)(composition)


def _register_fixed(
    name: str, mixture: str, alpha_of: Callable[[ModuleSet, torch.Tensor, torch.Tensor], torch.Tensor]
) -> None:
    def composition(modules: ModuleSet, h: torch.Tensor, labels: torch.Tensor) -> Composed:
        alpha = alpha_of(modules, h, labels)
        return Composed(MIXTURES[mixture].mix(modules, h, MIXTURES[mixture].outputs(modules, h), alpha), alpha)

    COMPOSITIONS.register(name)(composition)


COMPOSITIONS.register("base_classifier")(lambda m, h, y: Composed(F.softmax(m.base_classifier()(h), dim=-1), None))
COMPOSITIONS.register("global_head")(lambda m, h, y: Composed(F.softmax(m.global_head()(h), dim=-1), None))
_register_fixed("oracle", "heads", lambda m, h, y: one_hot_alpha(y, m.run.space.num_domains))
_register_fixed("uniform", "heads", lambda m, h, y: uniform_alpha(len(h), m.run.space.num_domains, h.device))
_register_routed("moe", "heads", "gate")
_register_routed("red", "residual", "router")
_register_fixed("red_oracle", "residual", lambda m, h, y: one_hot_alpha(y, m.run.space.num_domains))
_register_fixed("red_uniform", "residual", lambda m, h, y: uniform_alpha(len(h), m.run.space.num_domains, h.device))
_register_routed("red_logit_experts", "logit", "router")
_register_routed("red_per_domain", "within", "router")
_register_routed("red_mixture", "residual_outputs", "router")
_register_fixed("red_per_domain_oracle", "within", lambda m, h, y: one_hot_alpha(y, m.run.space.num_domains))


def _domain_oracle(modules: ModuleSet, h: torch.Tensor, labels: torch.Tensor) -> Composed:
    mask = modules.run.space.domain_mask().to(h.device)[labels]  # (N, C): the labels of each example's true domain
    return Composed(F.softmax(modules.classifier()(h).masked_fill(~mask, float("-inf")), dim=-1), None)


COMPOSITIONS.register("domain_oracle")(_domain_oracle)


def _tuned(alpha_of: Callable[[ModuleSet, torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable:
    def composition(modules: ModuleSet, h: torch.Tensor, labels: torch.Tensor) -> Composed:
        alpha = alpha_of(modules, h, labels)
        return Composed(_within_domains(modules, h, _tuned_logits(modules, h), alpha), alpha)

    return composition


# A run of tuned owners' compositions, under the names of their counterparts (its features are not h: no other
# composition applies to it, and these to no other run).
TUNED_COMPOSITIONS: dict[str, Callable[[ModuleSet, torch.Tensor, torch.Tensor], Composed]] = {
    "red": _tuned(lambda m, h, y: router_alpha(m, "router", h)),
    "red_oracle": _tuned(lambda m, h, y: one_hot_alpha(y, m.run.space.num_domains)),
}
NEEDS_DOMAIN = (
    "oracle",
    "red_oracle",
    "red_per_domain_oracle",
    "domain_oracle",
)  # the compositions given each example's true domain
NEEDS_LABEL_DOMAINS = (
    "red_per_domain",
    "red_per_domain_oracle",
    "domain_oracle",
)  # every label in one domain (LabelSpace.class_domains)


def default_compositions(space) -> list[str]:
    """Every composition a run with this LabelSpace can score: those that split the labels among
    the domains only where each label belongs to one."""
    return [name for name in COMPOSITIONS.names() if space.class_domains or name not in NEEDS_LABEL_DOMAINS]


@torch.no_grad()
def compose(
    name: str, modules: ModuleSet, h: torch.Tensor, labels: torch.Tensor, alpha_noise: AlphaNoise | None = None
) -> Composed:
    """Composition `name` on features h (N, d). `alpha_noise` replaces softmax(router logits) of a
    routed composition (a routing-noise study); a composition without a router refuses it. A run of tuned owners
    has only TUNED_COMPOSITIONS (red, red_oracle over its owners' own top layers)."""
    from redkit.fitting.replay_free import has_tuned_owners

    try:
        if has_tuned_owners(modules.run.config):
            COMPOSITIONS[name]  # an unknown name is still one line with its suggestions
            if name not in TUNED_COMPOSITIONS or alpha_noise is not None:
                raise MissingModule("modules/experts/residual")
            return TUNED_COMPOSITIONS[name](modules, h, labels)
        if alpha_noise is None:
            return COMPOSITIONS[name](modules, h, labels)
        ROUTED[name]  # a composition without a router has no α to perturb
        return COMPOSITIONS[name](modules, h, labels, alpha_noise)
    except MissingModule as err:
        raise MissingModule(err.module, name) from None


def query_dim(run) -> int:
    """The width of the features a run's compositions read: d, or a run of tuned owners' 2d + K d."""
    encoder = getattr(run, "encoder", None)
    return run.feature_dim if encoder is None else encoder.hidden_size


def available_compositions(modules: ModuleSet, names: list[str]) -> tuple[list[str], list[str]]:
    """(those of `names` whose modules the run has, the others): a bundle without heads can still
    evaluate red, but not moe. Found by composing one zero feature vector, so that it cannot drift
    from what each composition really loads; any other error (a damaged module) is raised."""
    h = torch.zeros(1, query_dim(modules.run), device=modules.run.device)
    labels = torch.zeros(1, dtype=torch.long, device=h.device)
    usable, missing = [], []
    for name in names:
        try:
            compose(name, modules, h, labels)
            usable.append(name)
        except MissingModule:
            missing.append(name)
    return usable, missing

"""What each owner of `red_tuned` can say about a query from its own data alone: the evidence the routing and
out-of-scope scripts (scripts/incremental_expert_routing.py, scripts/incremental_oos_scores.py) measure.

Owner k, on its own data before it leaves (replay-free: nothing of another owner's), fits

    A_k   Gaussians of its training queries' pooled features through its own tuned top layers, z_k(x) (d,):
          its class means and its covariance, shrunk as the Gaussian router's (0.2)
    P_k   the same of its frozen pretrained features h(x) (d,)
    L_k   the same of the mean of the frozen layers' last states l(x) (d,) (the tuned layers' input; what
          red_tuned's router reads beside h)

and measures both on its own val (mean and sd: a calibration only it can make). For a query x and owner k:

    density                          ll_k(x)  = max_c log A_k,c(z_k(x))                 k's tuned view
    density, calibrated              (ll_k(x) - mean of ll_k on k's val) / its sd
    pretrained density               ll0_k(x) = max_c log P_k,c(h(x))                   the frozen view
    pretrained density, calibrated   the same, standardised on k's val
    lower density, calibrated        max_c log L_k,c(l(x)), standardised on k's val             the frozen layers'
    likelihood ratio (calibrated)    ll_k(x) - ll0_k(x): how much k's tuning concentrates the query, as TPL's
                                     task-id score against the pretrained background (calibrated on k's val)
    confidence                       max_c p_k(c | x), k's expert's softmax
    energy                           log Σ_c exp f_k,c(x), k's expert's logits f (Liu et al., NeurIPS 2020)

Evaluation only: no method's figures depend on this module (the study does not import it).
"""

import torch
import torch.nn.functional as F

from redkit.incremental.statistics import ClassStatistics
from redkit.oos.owner_density import shrunk_covariance
from redkit_experiments.incremental.methods import METHODS


@torch.no_grad()
def adapted(tuned, name: str, examples) -> torch.Tensor:
    """(N, d) float64: `examples` through owner `name`'s tuned top layers, pooled."""
    return tuned.experts[name].pooled(tuned.backbone, examples.prefix, tuned.setting.device).double()


def gaussians(z: torch.Tensor, local: torch.Tensor, labels: tuple) -> torch.distributions.MultivariateNormal:
    """An owner's class Gaussians of its own features z (N, d): its class means, its covariance shrunk."""
    stats = ClassStatistics.of(z, local, labels)
    return torch.distributions.MultivariateNormal(stats.means, shrunk_covariance(stats))


def nearest(density: torch.distributions.MultivariateNormal, z: torch.Tensor) -> torch.Tensor:
    """(N,) each row of z (N, d)'s log-likelihood under its nearest class."""
    return torch.cat([density.log_prob(block[:, None, :]).amax(-1) for block in z.split(2048)])


def lower_states(examples) -> torch.Tensor:
    """(N, d) float64: the mean over each query's tokens of the frozen layers' last states."""
    mask = examples.prefix.attention_mask.double()  # (N, T)
    return torch.einsum("ntd,nt->nd", examples.prefix.states.double(), mask) / mask.sum(1, keepdim=True)


def standardised(values: torch.Tensor) -> tuple[float, float]:
    """(mean, sd) of an owner's own val scores: what its calibration subtracts and divides by."""
    return float(values.mean()), float(values.std())


class Owner:
    """What owner k keeps of its own data for its evidence: its two densities and its val's calibration of them."""

    def __init__(self, tuned, step, class_names):
        labels = tuple(class_names[c] for c in step.classes)
        local = step.local(step.train.classes)
        self.tuned_view = gaussians(adapted(tuned, step.name, step.train), local, labels)
        self.pretrained_view = gaussians(step.train.features.double(), local, labels)
        self.lower_view = gaussians(lower_states(step.train), local, labels)
        val_ll = nearest(self.tuned_view, adapted(tuned, step.name, step.val))
        val_ll0 = nearest(self.pretrained_view, step.val.features.double())
        self.ll_mean, self.ll_sd = standardised(val_ll)
        self.ll0_mean, self.ll0_sd = standardised(val_ll0)
        self.lower_mean, self.lower_sd = standardised(nearest(self.lower_view, lower_states(step.val)))
        self.ratio_mean, self.ratio_sd = standardised(val_ll - val_ll0)


@torch.no_grad()
def evidence(tuned, owners: dict[str, Owner], queries) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Each kind of evidence, (N, K) over the owners (in `owners`' order, red_tuned's), with "ridge" the best class
    score of each owner's classes under red_tuned's ridge; and each owner's answer (N, K) (stream classes)."""
    ridge = tuned.ridge_scores(queries)  # (N, C_seen), classes owner after owner
    by_kind = {"ridge": torch.stack([ridge[:, tuned.class_owner == k].amax(-1) for k in range(len(owners))], 1)}
    columns: dict[str, list] = {}
    answers = []
    for name, owner in owners.items():
        z = adapted(tuned, name, queries)  # (N, d)
        ll, ll0 = nearest(owner.tuned_view, z), nearest(owner.pretrained_view, queries.features.double())
        expert = tuned.experts[name]
        logits = expert.rows(z.float())  # (N, C_k)
        log_p = F.log_softmax(logits, dim=-1)
        lower = nearest(owner.lower_view, lower_states(queries))
        for kind, value in {
            "density": ll,
            "density, calibrated": (ll - owner.ll_mean) / owner.ll_sd,
            "pretrained density": ll0,
            "pretrained density, calibrated": (ll0 - owner.ll0_mean) / owner.ll0_sd,
            "likelihood ratio, calibrated": (ll - ll0 - owner.ratio_mean) / owner.ratio_sd,
            "lower density, calibrated": (lower - owner.lower_mean) / owner.lower_sd,
            "confidence": log_p.amax(-1).exp(),
            "energy": torch.logsumexp(logits, dim=-1),
        }.items():
            columns.setdefault(kind, []).append(value)
        answers.append(tuned.classes[name][log_p.argmax(-1)])
    return by_kind | {kind: torch.stack(c, 1).double() for kind, c in columns.items()}, torch.stack(answers, 1)


def owners_through_the_stream(context) -> tuple:
    """red_tuned trained through every step of `context`'s stream as the study does, and each owner's evidence
    (by name, in red_tuned's order of owners)."""
    tuned = METHODS["red_tuned"](context.setting)
    owners = {}
    for t in range(len(context.stream.steps)):
        step = context.step_data(t)
        tuned.learn(step)
        owners[step.name] = Owner(tuned, step, context.setting.class_names)
    return tuned, {name: owners[name] for name in tuned.owners}

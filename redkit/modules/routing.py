"""What every router is: the one interface the spine routes through, for the dense router and the
router zoo alike. A leaf (torch only), so that the dense router (redkit.modules.layers) and the zoo
(redkit.routers) both build on it without an import circle.

A router only routes: like transformers' Mixtral block, routing (weights, selected experts,
auxiliary loss) is computed apart from the experts, and the mixture code combines whatever
experts it has with `weights`. Its forward gives (N, K) logits; `route` gives:

    weights   (N, K)  combination weights, 0 outside the selection (what the mixture uses)
    selected  (N, k)  the chosen experts, best first (what the load metrics count)
    probs     (N, K)  the full routing distribution (what entropy and margin read)
    logits    (N, K)  pre-softmax scores (z-loss; RED's router is supervised on them)
    aux_loss  ()      the router's auxiliary loss, already weighted (0 where it has none)
"""

from typing import ClassVar, NamedTuple

import torch
from torch import nn


class RouterOutput(NamedTuple):
    weights: torch.Tensor  # (N, K)
    selected: torch.Tensor  # (N, k)
    probs: torch.Tensor  # (N, K)
    logits: torch.Tensor  # (N, K)
    aux_loss: torch.Tensor  # ()


class RouterBase(nn.Module):
    """The base class of every router. A subclass gives `forward(h) -> (N, K) logits` and
    `route(h) -> RouterOutput`, and declares what it is:

        name           its ROUTERS name (`--router NAME`)
        kind           its MODULES kind: how a saved one is rebuilt
        training_free  True: built from the run's data or experts (`from_run(run, role)`), never trained
        replay_free    True: built from what each domain's owner computed on its own data alone
                       (`owner_part(run, domain)`, a module per domain), so a domain is added with no
                       other domain's data (redkit/routers/gaussian.py)
    """

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    training_free: ClassVar[bool] = False
    replay_free: ClassVar[bool] = False

    def route(self, h: torch.Tensor) -> RouterOutput:  # (N, d) -> RouterOutput
        raise NotImplementedError(f"{type(self).__name__} must define route(h)")

    @classmethod
    def build(cls, run, role: str, **options) -> "RouterBase":
        """A fresh router to train for `run` (role "router" or "gate"): from its config alone, unless
        the router reads something of the run (a head it copies)."""
        return cls(cls.Config(dim=run.feature_dim, num_experts=run.space.num_domains, **options))

    @classmethod
    def owner_part(cls, run, domain: str) -> dict | None:
        """What the owner of `domain` computes for this router from its own data (a replay-free router's
        module of that domain); None where the router is trained over every domain instead."""
        return None

    def log_weights(self, out: RouterOutput) -> torch.Tensor:
        """(N, K) log of the weights the mixture uses (an MoE gate's training loss mixes expert
        log-probabilities with them); a selected-out expert gets about -28."""
        return torch.log(out.weights.clamp(min=1e-12))

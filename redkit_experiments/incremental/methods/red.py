"""RED in the stream, on the frozen pretrained backbone (the shared part nobody trains: no one holds all the
data, and a backbone tuned on the first domain would make the model depend on which domain came first).

    red          replay-free: step t's owner trains its expert and label rows on its own data alone and
                 computes its classes' statistics; the router is the Gaussian one built from every owner's
                 statistics (redkit/incremental). Kept from earlier steps: their modules and the statistics
                 (class means, counts, one summed scatter). Seeded by the owner's name, and the statistics sum
                 exactly, so the final model is the same whatever the order the owners came in.
    red_replay   RED as the life cycle runs it today: the same experts and label rows, and the dense router
                 retrained after every step on every step's stored training features (a replay method with a
                 buffer of 100 % of the features).
"""

import zlib

import torch
from torch.nn import functional as F

from redkit.incremental.model import ReplayFreeRED
from redkit.incremental.owner import OWNER_TRAINING, OwnerShare, train_owner_share
from redkit.incremental.statistics import ClassStatistics, merge
from redkit.modules.layers import Router
from redkit.red import router_loss
from redkit.threads import one_thread
from redkit.train.loop import TrainConfig, fit
from redkit_experiments.incremental.methods.base import Kept, Method, register_method, tensor_bytes


def owner_seed(seed: int, name: str) -> int:
    """An owner's seed from its name alone (not from when it arrived)."""
    return seed * 1_000_003 + zlib.crc32(name.encode()) % 1_000_003


@register_method("red")
class ReplayFreeREDMethod(Method):
    keeps = "modules + class means + summed scatter (random features)"

    def __init__(self, context):
        super().__init__(context)
        self.shares: dict[str, OwnerShare] = {}
        self.statistics: ClassStatistics | None = None
        self.columns: dict[str, torch.Tensor] = {}  # owner -> (C_t,) its classes' indices in the stream

    def share(self, t: int) -> OwnerShare:
        """Step t's owner's share, from step t's train and val features alone."""
        stream, features = self.context.stream, self.context.features
        step = stream.steps[t]
        classes = torch.tensor(step.classes)
        data = []
        for split in ("train", "val"):
            rows = stream.rows(split, [t])
            data.append((features[split][rows], torch.searchsorted(classes, stream.class_of[split][rows])))
        share = train_owner_share(
            step.name,
            tuple(stream.classes[c] for c in step.classes),
            data[0],
            data[1],
            seed=owner_seed(self.context.config.seed, step.name),
            projection=self.context.projection,
        )
        self.columns[step.name] = classes
        return share

    def learn(self, t: int) -> None:
        share = self.share(t)
        new, share.statistics = share.statistics, None  # merged into the one running sum, not kept apart
        self.statistics = new if self.statistics is None else merge({"earlier": self.statistics, "new": new})
        self.shares[share.name] = share
        self.model = ReplayFreeRED(self.shares, self.context.projection, self.statistics, self.context.config.shrinkage)

    @torch.no_grad()
    def scores(self, split: str, rows: torch.Tensor) -> torch.Tensor:
        log_p, _ = self.model(self.context.features[split][rows])
        return self.spread(log_p)

    def spread(self, log_p: torch.Tensor) -> torch.Tensor:
        """(N, C_seen) in the model's class order -> (N, C) in the stream's, -inf for classes not yet seen."""
        out = log_p.new_full((len(log_p), len(self.context.stream.classes)), float("-inf"))
        out[:, torch.cat([self.columns[name] for name in self.model.domains])] = log_p
        return out

    def kept(self) -> Kept:
        return Kept(statistics_bytes=self.statistics.nbytes() if self.statistics is not None else 0)


@register_method("red_replay")
class StoredFeaturesREDMethod(ReplayFreeREDMethod):
    keeps = "every step's training features (router retrained on them)"

    def learn(self, t: int) -> None:
        share = self.share(t)
        share.statistics = None
        self.shares[share.name] = share
        self.domains = tuple(sorted(self.shares))
        stream, features = self.context.stream, self.context.features
        step_of = stream.step_of_class()
        data = []
        for split in ("train", "val"):
            rows = stream.rows(split, range(t + 1))  # every seen step's stored features
            owner = torch.tensor(
                [self.domains.index(stream.steps[s].name) for s in step_of[stream.class_of[split][rows]].tolist()]
            )
            data.append((features[split][rows], owner))
        self.stored = len(data[0][0]) + len(data[1][0])
        torch.manual_seed(owner_seed(self.context.config.seed, "router"))
        router = Router(Router.Config(dim=self.context.dim, num_experts=len(self.domains)))
        (h, d), (vh, vd) = data
        with one_thread():
            fit(
                router,
                lambda idx: router_loss(router, h[idx], d[idx]),
                len(h),
                lambda: router_loss(router, vh, vd).item(),
                TrainConfig(**(vars(OWNER_TRAINING))),
                seed=self.context.config.seed + 300,
                desc="router (stored features)",
            )
        self.router = router.eval()
        self.within = [self.shares[name] for name in self.domains]

    @torch.no_grad()
    def scores(self, split: str, rows: torch.Tensor) -> torch.Tensor:
        h = self.context.features[split][rows]
        log_alpha = F.log_softmax(self.router(h), dim=-1)  # (N, K)
        parts = [share.log_probs(h) + log_alpha[:, k, None] for k, share in enumerate(self.within)]
        out = h.new_full((len(h), len(self.context.stream.classes)), float("-inf"))
        out[:, torch.cat([self.columns[name] for name in self.domains])] = torch.cat(parts, dim=1)
        return out

    def kept(self) -> Kept:
        return Kept(features=self.stored, feature_bytes=self.stored * tensor_bytes(self.context.features["train"][0]))

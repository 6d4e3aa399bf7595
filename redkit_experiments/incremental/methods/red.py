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

import torch
from torch.nn import functional as F

from redkit.incremental.model import ReplayFreeRED
from redkit.incremental.owner import OWNER_TRAINING, OwnerShare, owner_seed, train_owner_share
from redkit.incremental.statistics import ClassStatistics, merge
from redkit.modules.layers import Router
from redkit.red import router_loss
from redkit.threads import one_thread
from redkit.train.loop import TrainConfig, fit
from redkit_experiments.incremental.data import Examples, StepData
from redkit_experiments.incremental.methods.base import Kept, Method, register_method, tensor_bytes


@register_method("red")
class ReplayFreeREDMethod(Method):
    keeps = "modules + class means + summed scatter (random features)"

    def __init__(self, setting):
        super().__init__(setting)
        self.shares: dict[str, OwnerShare] = {}
        self.statistics: ClassStatistics | None = None
        self.columns: dict[str, torch.Tensor] = {}  # owner -> (C_t,) its classes' indices in the stream

    def share(self, step: StepData) -> OwnerShare:
        """Step t's owner's share, from step t's train and val features alone."""
        share = train_owner_share(
            step.name,
            tuple(self.setting.class_names[c] for c in step.classes),
            (step.train.features, step.local(step.train.classes)),
            (step.val.features, step.local(step.val.classes)),
            seed=owner_seed(self.setting.config.seed, step.name),
            projection=self.setting.projection,
        )
        self.columns[step.name] = torch.tensor(step.classes)
        return share

    def learn(self, step: StepData) -> None:
        share = self.share(step)
        new, share.statistics = share.statistics, None  # merged into the one running sum, not kept apart
        self.statistics = new if self.statistics is None else merge({"earlier": self.statistics, "new": new})
        self.shares[share.name] = share
        self.model = ReplayFreeRED(self.shares, self.setting.projection, self.statistics, self.setting.config.shrinkage)

    @torch.no_grad()
    def scores(self, queries: Examples) -> torch.Tensor:
        log_p, _ = self.model(queries.features)
        return self.spread(log_p, self.model.domains)

    def spread(self, log_p: torch.Tensor, owners: tuple[str, ...]) -> torch.Tensor:
        """(N, C_seen) in the owners' class order -> (N, C) in the stream's, -inf for classes not yet seen."""
        out = log_p.new_full((len(log_p), self.setting.num_classes), float("-inf"))
        out[:, torch.cat([self.columns[name] for name in owners])] = log_p
        return out

    def kept(self) -> Kept:
        return Kept(statistics_bytes=self.statistics.nbytes() if self.statistics is not None else 0)


@register_method("red_replay")
class StoredFeaturesREDMethod(ReplayFreeREDMethod):
    keeps = "every step's training features (router retrained on them)"

    def __init__(self, setting):
        super().__init__(setting)
        self.stored = {"train": [], "val": []}  # split -> [(features (N_t, d), owner name)]: every step's

    def learn(self, step: StepData) -> None:
        share = self.share(step)
        share.statistics = None
        self.shares[share.name] = share
        for split in self.stored:
            self.stored[split].append((step[split].features, step.name))
        self.domains = tuple(sorted(self.shares))
        (h, d), (vh, vd) = (
            (
                torch.cat([x for x, _ in self.stored[split]]),
                torch.cat([torch.full((len(x),), self.domains.index(owner)) for x, owner in self.stored[split]]),
            )
            for split in ("train", "val")
        )
        torch.manual_seed(owner_seed(self.setting.config.seed, "router"))
        router = Router(Router.Config(dim=self.setting.dim, num_experts=len(self.domains)))
        with one_thread():
            fit(
                router,
                lambda idx: router_loss(router, h[idx], d[idx]),
                len(h),
                lambda: router_loss(router, vh, vd).item(),
                TrainConfig(**(vars(OWNER_TRAINING))),
                seed=self.setting.config.seed + 300,
                desc="router (stored features)",
            )
        self.router = router.eval()
        self.within = [self.shares[name] for name in self.domains]

    @torch.no_grad()
    def scores(self, queries: Examples) -> torch.Tensor:
        h = queries.features
        log_alpha = F.log_softmax(self.router(h), dim=-1)  # (N, K)
        parts = [share.log_probs(h) + log_alpha[:, k, None] for k, share in enumerate(self.within)]
        return self.spread(torch.cat(parts, dim=1), self.domains)

    def kept(self) -> Kept:
        stored = [x for split in self.stored.values() for x, _ in split]
        return Kept(features=sum(len(x) for x in stored), feature_bytes=tensor_bytes(*stored))

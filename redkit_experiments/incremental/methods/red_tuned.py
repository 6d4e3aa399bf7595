"""RED whose owners tune the backbone's top layers (replay-free): each owner's expert is its own copy of the
pretrained backbone's top layers (the study's `trainable_layers`, 2) and a classifier over its own classes,
trained on its data alone with `redkit fit`'s recipe (joint's: the same rate, epochs and early stopping, on the
owner's own val accuracy); the router is RanPAC's ridge regression, computed from the owners' summed class
statistics of random features of what the frozen encoder gives everyone (redkit/incremental/ridge.py); each
query goes to the one owner the ridge points at, and that owner's expert alone answers it.

    r(x)      = [h, mean_T(prefix(x)) · |h| / |mean_T(prefix(x))|]   (2d,) the pooled features and the frozen
                layers' last states pooled, scaled to h's length: both public, the same for every owner
    φ(x)      = ReLU(r(x) P)         P (2d, M) from the study's seed, M = 4,096: what the statistics are of
    route(x)  = owner of argmax_c φ(x) W_c      W (C, M) from every owner's counts, means and scatter of φ
    p(y|x)    = softmax_{y' in k} classifier_k(top_k(prefix(x)))_y   for the routed owner k, 0 outside k

Kept from earlier steps: their modules (the model that answers) and the statistics (one running sum). Each
owner is seeded by its name, starts from the pretrained top layers, and the statistics sum exactly, so the
final model is the same whatever the order the owners came in.

Why not red's pieces (redkit/incremental: a residual expert on the frozen features, the Gaussian router):
scripts/incremental_red_ablation.py measures each piece with the other held fixed (docs/results/incremental.md).
"""

import torch
from torch.nn import functional as F

from redkit.incremental.owner import owner_seed
from redkit.incremental.projection import ProjectionConfig, RandomProjection
from redkit.incremental.ridge import RIDGE, ridge_weights
from redkit.incremental.statistics import ClassStatistics, merge
from redkit.incremental.tuned import ROUTER_WIDTH, TunedExpert, router_input, scores_by_length, train_tuned_expert
from redkit_experiments.incremental.data import Examples, StepData
from redkit_experiments.incremental.methods.base import Kept, Method, register_method, tensor_bytes

WIDTH = ROUTER_WIDTH  # M, chosen on CLINC150's val (scripts/incremental_red_ablation.py)
BATCH = 2048  # queries routed at once (an (N, M) float64 block)


def router_features(examples: Examples) -> torch.Tensor:
    """(N, 2d) float64 r(x) of `examples` (redkit/incremental/tuned.py router_input)."""
    return router_input(examples.features, examples.prefix.states, examples.prefix.attention_mask)


@register_method("red_tuned")
class TunedREDMethod(Method):
    keeps = "modules + class means + summed scatter (random features)"

    def __init__(self, setting):
        super().__init__(setting)
        self.backbone = setting.pretrained_backbone()  # one working copy: each owner's top layers swapped in
        self.pretrained_top = {k: v.detach().clone() for k, v in self.backbone.top_state_dict().items()}
        self.projection = RandomProjection(ProjectionConfig(2 * setting.dim, WIDTH, seed=setting.config.seed))
        self.experts: dict[str, TunedExpert] = {}
        self.classes: dict[str, torch.Tensor] = {}  # owner -> (C_k,) its classes, indices into the stream's
        self.statistics: ClassStatistics | None = None

    # ---- an owner, on its own data ----------------------------------------------------------------

    def train_expert(self, step: StepData) -> TunedExpert:
        """The owner's top layers and rows, from the pretrained ones, on step t's train and val alone."""
        self.classes[step.name] = torch.tensor(step.classes)
        return train_tuned_expert(
            self.backbone,
            self.pretrained_top,
            tuple(self.setting.class_names[c] for c in step.classes),
            (step.train.prefix, step.local(step.train.classes)),  # classes within the owner's
            (step.val.prefix, step.local(step.val.classes)),
            seed=owner_seed(self.setting.config.seed, step.name),
            config=self.setting.config.joint_training(),
            device=self.setting.device,
            desc=f"owner {step.name}",
        )

    def owner_statistics(self, step: StepData) -> ClassStatistics:
        labels = tuple(self.setting.class_names[c] for c in step.classes)
        return ClassStatistics.of(self.projection(router_features(step.train)), step.local(step.train.classes), labels)

    def learn(self, step: StepData) -> None:
        self.experts[step.name] = self.train_expert(step)
        new = self.owner_statistics(step)
        self.statistics = new if self.statistics is None else merge({"earlier": self.statistics, "new": new})
        # the ridge over every class so far, owners (and their classes) in the order of their names
        self.owners = tuple(sorted(self.experts))
        order = tuple(self.setting.class_names[c] for name in self.owners for c in self.classes[name])
        self.router_weight = ridge_weights(self.statistics.in_order(order))  # (C_seen, M)
        self.class_owner = torch.tensor(
            [k for k, name in enumerate(self.owners) for _ in self.classes[name]]
        )  # (C_seen,)

    # ---- the server's model: route, then one owner's expert -----------------------------------------

    @torch.no_grad()
    def ridge_scores(self, queries: Examples) -> torch.Tensor:
        """(N, C_seen) the ridge's class scores, classes owner after owner (by name)."""
        blocks = torch.arange(len(queries)).split(BATCH)
        return torch.cat([self.projection(router_features(queries.subset(b))) @ self.router_weight.T for b in blocks])

    def route(self, queries: Examples) -> torch.Tensor:
        """(N,) the index into `self.owners` of the owner each query goes to."""
        return self.class_owner[self.ridge_scores(queries).argmax(-1)]

    @torch.no_grad()
    def expert_log_probs(self, name: str, queries: Examples) -> torch.Tensor:
        """(N, C_k) log p over owner `name`'s classes, by its expert."""
        expert = self.experts[name]
        self.backbone.load_top_state_dict(expert.top)
        self.backbone.eval()
        prefix, device = queries.prefix, self.setting.device
        logits = scores_by_length(
            lambda rows: expert.rows(self.backbone(*prefix.batch(rows, device))),
            prefix.lengths(),
            len(self.classes[name]),
        )
        return F.log_softmax(logits, dim=-1)

    @torch.no_grad()
    def scores(self, queries: Examples) -> torch.Tensor:
        """(N, C): the routed owner's log-probabilities over its classes, -inf elsewhere."""
        routed = self.route(queries)
        out = torch.full((len(queries), self.setting.num_classes), float("-inf"))
        for k, name in enumerate(self.owners):
            rows = (routed == k).nonzero(as_tuple=True)[0]
            if len(rows):
                out[rows[:, None], self.classes[name]] = self.expert_log_probs(name, queries.subset(rows))
        return out

    def kept(self) -> Kept:
        return Kept(statistics_bytes=self.statistics.nbytes() if self.statistics is not None else 0)

    def details(self) -> dict:
        experts = self.experts.values()
        return {
            "width": WIDTH,
            "ridge": RIDGE,
            "module_bytes": sum(tensor_bytes(*e.top.values(), *e.rows.state_dict().values()) for e in experts),
            "owners": {
                name: {"epochs": e.result.best_epoch, "val_accuracy": e.result.best_val_accuracy}
                for name, e in sorted(self.experts.items())
            },
        }

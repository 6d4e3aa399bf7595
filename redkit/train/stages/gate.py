"""Stage gate: the classical mixture of experts' gate, trained on the task loss of Σ α_i softmax(E_i(h)) with the
per-domain heads frozen (or built without training, as a training-free router)."""

import torch
from torch.nn import functional as F

from redkit.modules.routing import RouterBase
from redkit.red import router_loss
from redkit.train.stage_run import StageRun
from redkit.train.stages.experts import load_heads
from redkit.train.stages.registry import STAGES, timed
from redkit.train.stages.router import fit_router, make_router


@STAGES.register("gate")
def stage_gate(run: StageRun, retrain: bool = False) -> dict:
    """Classical MoE: a gate trained on the task loss of Σ α_i softmax(E_i(h)), experts frozen (`retrain`:
    as stage experts')."""

    def work() -> dict:
        vh, vy, vd = run.split_tensors("val")
        torch.manual_seed(run.config.seed * 1000 + 400)
        gate = make_router(run, "gate")
        if gate.training_free:  # built, not trained, and the same whatever it weighs: scored on the domain, as a router
            return fit_router(run, "gate", gate, router_loss, lambda: (), (vh, vd), 400, retrain)
        heads = [head.requires_grad_(False) for head in load_heads(run)]

        @torch.no_grad()
        def target_log_probs(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            """(N, d), (N,) -> (N, K) log softmax(E_i(x))_t: the heads are frozen, so each example's
            term is computed once, not every epoch; only the target's column enters the loss."""
            x, t = x.to(run.device), t.to(run.device)
            chunks = [
                torch.stack(
                    [
                        F.log_softmax(head(x[i : i + 4096]), dim=-1).gather(1, t[i : i + 4096, None]).squeeze(1)
                        for head in heads
                    ],
                    dim=1,
                )
                for i in range(0, len(x), 4096)
            ]
            return torch.cat(chunks) if chunks else x.new_zeros(0, len(heads))

        def mixture_nll(g: RouterBase, x: torch.Tensor, log_p_t: torch.Tensor) -> torch.Tensor:
            """-log Σ_i w_i softmax(E_i(x))_t, plus the gate's auxiliary loss (0 for dense). A head
            that cannot output t (a later domain's label, a masked one) has log p = -inf there: the
            log-sum-exp over the K heads stays finite, as its gradient, while one head can."""
            out = g.route(x)
            log_w = g.log_weights(out)  # (B, K): dense log_softmax; a sparse router's unselected ~ -28
            return -torch.logsumexp(log_w + log_p_t, dim=1).mean() + out.aux_loss

        def train() -> tuple:
            h, y, _ = run.split_tensors("train")
            return h, target_log_probs(h, y)

        return fit_router(run, "gate", gate, mixture_nll, train, (vh, target_log_probs(vh, vy)), 400, retrain)

    return timed(run, "gate", work)

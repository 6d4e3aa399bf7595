"""Watching a router or gate while it trains: every `every` optimizer steps, route a fixed sample of
validation features (in evaluation mode, without gradients) and log the routing metrics to the
run's log.jsonl as {"stage", "event": "routing", "step", ...}.

    monitor = TrainingMonitor(run, every=50)
    run.monitor = monitor          # the stages call run.monitor(stage, step, module) after each step
    STAGES["router"](run)
    monitor.rows                   # what was logged, also in log.jsonl

Evaluating leaves training exactly as it was: the module goes back to its mode, and routing in
evaluation mode draws no random numbers and updates no state (a loss-free bias moves only in training).
"""

import torch

from redkit_experiments.routing.metrics import routing_metrics
from redkit_experiments.routing.specialisation import specialisation_metrics

LOGGED = ("entropy", "cv", "max_vio", "gini", "unused_rate", "top1_weight", "margin", "z_loss")
ROUTING_STAGES = ("router", "gate")


class TrainingMonitor:
    def __init__(self, run, every: int = 50, sample: int = 2048, split: str = "val"):
        h, _, domains = run.split_tensors(split)
        self.run, self.every = run, every
        self.h, self.domains = h[:sample].to(run.device), domains[:sample]
        self.num_experts = run.space.num_domains
        self.rows: list[dict] = []

    @torch.no_grad()
    def measure(self, module: torch.nn.Module) -> dict:
        training = module.training
        module.eval()
        try:
            out = module.route(self.h)
        finally:
            module.train(training)
        m = routing_metrics(out.probs, selected=out.selected.cpu(), logits=out.logits)
        s = specialisation_metrics(out.selected.cpu(), self.domains, self.num_experts, self.num_experts)
        return {key: m[key] for key in LOGGED} | {"routed_accuracy": s["routed_accuracy"], "nmi": s["nmi"]}

    def __call__(self, stage: str, step: int, module: torch.nn.Module) -> None:
        if stage not in ROUTING_STAGES or step % self.every:
            return
        row = {"stage": stage, "event": "routing", "step": step} | self.measure(module)
        self.rows.append(row)
        self.run.log(row)

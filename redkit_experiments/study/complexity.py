"""`redkit study complexity` (paper §4.10, measured instead of argued): for the backbone and for
every composition the run can form, on this machine:

    parameters   of every module; of a composition, the modules it actually loads (beyond the backbone)
    FLOPs        per example, counted by torch.utils.flop_counter on a batch of the test split
    latency      per call at batch 1 and batch 256: median and 95th percentile over `repeats` calls
    memory       peak bytes allocated during one batch-256 call: torch.cuda's counter on a GPU, the
                 profiler's allocation events on a CPU (tensors only, not the interpreter)

A composition's cost is also given as a fraction of the backbone's, beside the paper's claim that
the router costs < 0.5% of the backbone's FLOPs.
"""

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
from safetensors import safe_open
from torch.utils.flop_counter import FlopCounterMode

from redkit.compositions import COMPOSITIONS, ModuleSet, compose
from redkit.errors import RedkitError
from redkit.modules.store import WEIGHTS, module_exists
from redkit_experiments.digits.run import DigitsRun


@dataclass
class ComplexityConfig:
    repeats: int = 50  # timed calls per (component, batch size), after 3 warm-up calls
    batch_sizes: tuple[int, ...] = (1, 256)
    split: str = "test"

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise RedkitError(f"--repeats must be at least 1, not {self.repeats}")


def count_parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def module_parameters(run) -> dict[str, int]:
    """Parameters of every module the run has saved, by its path under modules/."""
    root = run.dir / "modules"
    out = {}
    for weights in sorted(root.rglob(WEIGHTS)):
        with safe_open(str(weights), framework="pt") as f:
            out[str(weights.parent.relative_to(root))] = sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys())
    return out


def flops_per_call(fn: Callable[[], object]) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def latency_ms(fn: Callable[[], object], repeats: int, device: torch.device) -> dict:
    """Median and 95th percentile of one call's wall time (ms), after 3 warm-up calls."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1000)
    return {"median": float(np.median(times)), "p95": float(np.percentile(times, 95)), "repeats": repeats}


def peak_memory_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes of tensors allocated during one call, above what was allocated before it."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() - before)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # Each event's self_cpu_memory_usage is the bytes it allocated minus those it freed itself;
    # frees outside any op are "[memory]" events. Their running sum in time order is what is
    # allocated at each moment.
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    running = np.cumsum([e.self_cpu_memory_usage for e in events]) if events else np.zeros(1)
    return int(max(running.max(), 0))


def backbone_call(run, rows: int) -> Callable[[], torch.Tensor]:
    """The backbone's forward on the first `rows` test inputs (tokenised text, or images)."""
    backbone = run.backbone
    if isinstance(run, DigitsRun):
        x = run.splits["test"][0][:rows].to(run.device)
        return lambda: backbone(x)
    texts = [ex.question for ex in run.splits["test"][:rows]]
    texts = (texts * (rows // max(len(texts), 1) + 1))[:rows]  # a small test split is cycled
    enc = backbone.tokenize(texts)
    ids, mask = enc["input_ids"].to(run.device), enc["attention_mask"].to(run.device)
    return lambda: backbone(ids, mask)


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """The first n rows of t, cycled when t has fewer."""
    return t[torch.arange(n) % len(t)]


def available_compositions(run) -> list[str]:
    """Every registered composition whose modules this run has (tried on one example)."""
    names = []
    h, _, labels = run.split_tensors("test")
    for name in COMPOSITIONS:
        try:
            compose(name, ModuleSet(run), h[:1].to(run.device), labels[:1].to(run.device))
        except RedkitError:
            continue
        names.append(name)
    return names


@torch.no_grad()
def complexity_study(run, config: ComplexityConfig) -> dict:
    start = time.perf_counter()
    device = run.device
    backbone = run.backbone
    h_all, _, labels_all = run.split_tensors(config.split)
    components: dict[str, dict] = {}

    def measure(name: str, params: int, call_of: Callable[[int], Callable[[], object]]) -> None:
        row = {"parameters": params, "latency_ms": {}, "flops_per_example": None, "peak_memory_bytes": None}
        for batch in config.batch_sizes:
            call = call_of(batch)
            row["latency_ms"][str(batch)] = latency_ms(call, config.repeats, device)
            if batch == max(config.batch_sizes):
                row["flops_per_example"] = flops_per_call(call) / batch
                row["peak_memory_bytes"] = peak_memory_bytes(call, device)
        components[name] = row

    measure("backbone", count_parameters(backbone), lambda b: backbone_call(run, b))
    router_kinds = [kind for kind in ("router", "gate") if module_exists(run.module_dir(kind))]
    modules = ModuleSet(run)
    for kind in router_kinds:
        router = getattr(modules, kind)()
        measure(kind, count_parameters(router), lambda b, r=router: lambda x=_rows(h_all, b).to(device): r(x))
    for name in available_compositions(run):
        used = ModuleSet(run)  # loads lazily: after one call it holds exactly what the composition uses
        compose(name, used, h_all[:1].to(device), labels_all[:1].to(device))
        params = sum(count_parameters(m) for m in used.loaded().values())
        measure(
            name,
            params,
            lambda b, n=name: (
                lambda h=_rows(h_all, b).to(device), y=_rows(labels_all, b).to(device): compose(n, used, h, y)
            ),
        )
    base = components["backbone"]
    for row in components.values():
        row["parameters_vs_backbone"] = row["parameters"] / base["parameters"]
        row["flops_vs_backbone"] = (
            row["flops_per_example"] / base["flops_per_example"] if base["flops_per_example"] else None
        )
    saved = module_parameters(run)
    # The K experts of each kind, side by side: the paper's "RED's experts are far smaller than MoE's heads".
    expert_sets = {
        kind: sum(saved.get(f"{kind}/{d}", 0) for d in run.space.domains)
        for kind in ("experts/residual", "experts/logit", "heads")
    }
    return {
        "study": "complexity",
        "config": asdict(config),
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "components": components,
        "module_parameters": saved,
        "expert_sets": expert_sets,
        "classes": run.space.num_classes,
        "seconds": time.perf_counter() - start,
    }

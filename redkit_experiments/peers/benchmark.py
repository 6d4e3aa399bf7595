"""`redkit reproduce peers`: RED's pooled compositions beside LoRA experts composed inside the
backbone (RED's router, peft's Arrow, peft's merges), on one finished run: same data, splits,
backbone (its tuned top) and seed. Writes `<run>/peers/` (experts under `peers/lora/<domain>/`,
results.json, report.md) and never touches the run's own modules.

Every row is scored by the same function on the same split, from the same frozen-prefix states:

    accuracy, range accuracy   `score_composed` (the pipeline's metrics)
    routing accuracy           top expert = true domain (RED's router, the MoE gate, Arrow's mean coefficients)
    parameters per expert      what one expert adds (residual expert, head, or one LoRA adapter)
    training seconds / expert  the expert's own fit (from its saved metrics)
    latency ms / example       wall time of the composition over the split's distinct texts, from the
                               cached prefix (top-N layers + composition), batch `batch_size`, divided by their number
"""

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from redkit.atomic import write_json, write_text
from redkit.compositions import Composed, ModuleSet, compose
from redkit.errors import RedkitError
from redkit.evaluate import routing_accuracy, score_composed
from redkit.features import PrefixStates, _unique
from redkit.modules.store import module_exists, read_meta
from redkit.provenance import provenance
from redkit.threads import torch_threads
from redkit_experiments.peers import require_peft
from redkit_experiments.peers.arrow import ArrowSettings, try_create_arrow_model
from redkit_experiments.peers.compositions import LORA_COMPOSITIONS, LoraExperts, MergeSettings, lora_compose
from redkit_experiments.peers.lora import LoraBackbone, LoraExpertConfig, adapter_shape, lora_expert_exists
from redkit_experiments.peers.report import render_peers_report
from redkit_experiments.peers.train import train_lora_expert
from redkit_experiments.peers.xlora import XLoraSettings, failure, train_xlora, try_as_is, xlora_backbone
from redkit_experiments.study.complexity import module_parameters

POOLED = ("red", "moe", "global_head", "oracle")
POOLED_EXPERTS = {"red": "experts/residual", "moe": "heads", "oracle": "heads"}  # global_head: one head, no experts
POOLED_ROUTERS = {"red": "router", "moe": "gate"}


@dataclass
class PeersConfig:
    lora: LoraExpertConfig = field(default_factory=LoraExpertConfig)
    arrow: ArrowSettings = field(default_factory=ArrowSettings)
    merge: MergeSettings = field(default_factory=MergeSettings)
    split: str = "test"
    batch_size: int = 256
    xlora: bool = True  # load X-LoRA on the backbone (as is, and wrapped), train its classifier, score it
    xlora_settings: XLoraSettings = field(default_factory=XLoraSettings)
    # CPU threads for all of it (0: torch's default). On 2 cores shared with another job, training a
    # LoRA expert took 11 ms per example on 1 thread and 55 ms on 2 (measured): spinning threads
    # that wait for a busy core cost far more than a second core gains.
    threads: int = 1


def check_compatible(space, directories: list[Path]) -> None:
    """Arrow and the merges need one rank and one set of target modules: one clear line otherwise."""
    first = adapter_shape(directories[0])
    for name, directory in zip(space.domains[1:], directories[1:]):
        shape = adapter_shape(directory)
        if shape[0] != first[0]:
            raise RedkitError(
                f"LoRA expert {name} has rank {shape[0]} but {space.domains[0]} rank {first[0]}: "
                f"lora_arrow and lora_merge_* need experts of one rank; retrain {directory} with --lora-rank {first[0]}"
            )
        if shape[1] != first[1]:
            raise RedkitError(
                f"LoRA expert {name} adapts other modules than {space.domains[0]} "
                f"({len(shape[1])} vs {len(first[1])} target modules): lora_arrow and lora_merge_* need one set; "
                f"retrain {directory} with the same --lora-targets"
            )


def _experts(
    run, out: Path, modules: ModuleSet, config: LoraExpertConfig, print_fn
) -> tuple[LoraBackbone, list[Path], dict]:
    """Load the experts already in `out/lora`, train the missing ones (each alone), in domain order."""
    lb = LoraBackbone(run)
    root = out / "lora"
    directories, metas = [], {}
    for domain, name in enumerate(run.space.domains):
        directory = root / name
        if lora_expert_exists(directory):
            meta = lb.load(directory, name)
            print_fn(f"[peers] {name}: reusing {directory}")
        else:
            meta = train_lora_expert(run, lb, modules.classifier(), domain, root, config)
            print_fn(
                f"[peers] {name}: trained on {meta.metrics['examples']} examples, {meta.metrics['epochs']} epochs, "
                f"{meta.metrics['seconds']:.1f} s, best val loss {meta.metrics['best_val_loss']:.4f}"
            )
        directories.append(directory)
        metas[name] = asdict(meta) | {"rank": adapter_shape(directory)[0]}
    return lb, directories, metas


class SplitStates:
    """The split's distinct texts (each scored once, in length order), their prefix states, pooled
    features, classes and domains; `expand` maps per-distinct-text rows back to the split's examples."""

    def __init__(self, run, lb: LoraBackbone, split: str):
        examples = run.splits[split]
        h, classes, labels = run.split_tensors(split)
        texts, self.rows = _unique([ex.question for ex in examples])  # rows: (N,) example -> distinct text
        first = torch.empty(len(texts), dtype=torch.long)
        first[self.rows] = torch.arange(len(examples))  # an example of each text (equal texts, equal answers)
        self.h, self.classes, self.labels = h[first], classes[first], labels[first]
        self.example_classes, self.example_labels = classes, labels
        self.states = PrefixStates.build(run.cache_dir, lb.backbone, texts, f"peers-{split}")
        self.order = torch.argsort(self.states.attention_mask.sum(dim=1), stable=True)
        self.count = len(texts)

    def batches(self, size: int):
        for first in range(0, self.count, size):
            yield self.order[first : first + size]

    def expand(self, composed: Composed) -> Composed:
        return Composed(composed.probs[self.rows], None if composed.weights is None else composed.weights[self.rows])


def _timed(fn) -> tuple[object, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def _run_lora(name: str, experts: LoraExperts, data: SplitStates, run, batch_size: int) -> tuple[Composed, float]:
    """One LoRA composition over every distinct text -> (Composed per distinct text, seconds)."""
    probs = torch.empty(data.count, run.space.num_classes)
    weights = None
    start = time.perf_counter()
    for idx in data.batches(batch_size):
        composed = lora_compose(
            name,
            experts,
            data.states.batch(idx, run.device),
            data.h[idx].to(run.device),
            data.labels[idx].to(run.device),
        )
        probs[idx] = composed.probs.cpu()
        if composed.weights is not None:
            weights = torch.empty(data.count, composed.weights.shape[1]) if weights is None else weights
            weights[idx] = composed.weights.float().cpu()
    return Composed(probs, weights), time.perf_counter() - start


@torch.no_grad()
def _base_pass(data: SplitStates, run, batch_size: int) -> tuple[float, float]:
    """(seconds of the run's own top layers over the distinct texts, max |h - cached pooled h|): the
    cost a pooled composition pays before its head, and a check that the prefix path gives its features."""
    diff = 0.0
    start = time.perf_counter()
    for idx in data.batches(batch_size):
        h = run.backbone(*data.states.batch(idx, run.device)).cpu()
        diff = max(diff, float((h - data.h[idx]).abs().max()))
    return time.perf_counter() - start, diff


def _pooled_rows(run, modules: ModuleSet, data: SplitStates, base_seconds: float) -> dict:
    params = module_parameters(run)
    rows = {}
    h, labels = data.h.to(run.device), data.labels.to(run.device)
    for name in POOLED:
        composed, seconds = _timed(lambda: compose(name, modules, h, labels))
        row = score_composed(
            data.expand(Composed(composed.probs.cpu(), None if composed.weights is None else composed.weights.cpu())),
            data.example_classes,
            data.example_labels,
            run.space,
            metrics=run.metrics,
        )
        kind = POOLED_EXPERTS.get(name)
        paths = [f"{kind}/{d}" for d in run.space.domains] if kind else ["heads/global_full"]
        row |= {
            "family": "pooled",
            "parameters_per_expert": int(np.mean([params[p] for p in paths])),
            "train_seconds_per_expert": float(
                np.mean([read_meta(run.module_dir(*p.split("/"))).metrics.get("seconds", 0.0) for p in paths])
            ),
            "latency_ms_per_example": 1000 * (base_seconds + seconds) / data.count,
            "routing_accuracy": (
                routing_accuracy(
                    getattr(modules, POOLED_ROUTERS[name])(), h[data.rows.to(h.device)], data.example_labels
                )["accuracy"]
                if name in POOLED_ROUTERS
                else None
            ),
            "routing": "given" if name == "oracle" else ("trained" if name in POOLED_ROUTERS else None),
        }
        rows[name] = row
    return rows


def _lora_rows(
    run, experts: LoraExperts, data: SplitStates, metas: dict, base_seconds: float, batch_size: int, print_fn
) -> dict:
    rows = {}
    params = float(np.mean([m["metrics"]["trainable_parameters"] for m in metas.values()]))
    seconds = float(np.mean([m["metrics"]["seconds"] for m in metas.values()]))
    for name in LORA_COMPOSITIONS.names():
        entry = LORA_COMPOSITIONS[name]
        if name == "lora_xlora" and experts.xlora is None:
            continue  # not loaded (or not asked for): the X-LoRA note says why
        prepare_seconds = _timed(lambda: entry.prepare(experts))[1] if entry.prepare else 0.0  # outside the latency
        composed, elapsed = _run_lora(name, experts, data, run, batch_size)
        expanded = data.expand(composed)
        row = score_composed(expanded, data.example_classes, data.example_labels, run.space, metrics=run.metrics)
        routing = None
        if entry.routed:
            routing = float((expanded.weights.argmax(dim=-1) == data.example_labels).float().mean())
        row |= {
            "family": "lora",
            "parameters_per_expert": int(params),
            "train_seconds_per_expert": seconds,
            "latency_ms_per_example": 1000 * (elapsed + (base_seconds if entry.uses_router else 0.0)) / data.count,
            "routing_accuracy": routing,
            "prepare_seconds": prepare_seconds,
            "routing": "given"
            if name == "lora_oracle"
            else ("trained" if entry.uses_router else "training-free" if entry.routed else None),
        }
        rows[name] = row
        print_fn(f"[peers] {name}: accuracy {row['accuracy']:.4f} ({elapsed:.1f} s)")
    return rows


def _load_xlora(
    run, experts: LoraExperts, directories: list[Path], out: Path, data: SplitStates, config: PeersConfig, print_fn
) -> dict:
    """X-LoRA as is (recorded) and wrapped (trained and set on `experts`, or recorded why not)."""
    outcome = {"as_is": try_as_is(run, directories, data.states.batch(data.order[:4], run.device))}
    try:
        experts.xlora = xlora_backbone(run, directories)
        meta = train_xlora(run, experts.xlora, experts.modules.classifier(), out / "xlora", config.xlora_settings)
        outcome["wrapped"] = {"loads": True, "classifier": meta.metrics}
        print_fn(
            f"[peers] X-LoRA classifier: {meta.metrics['examples']} examples, {meta.metrics['epochs']} epochs, "
            f"{meta.metrics['seconds']:.1f} s"
        )
    except RedkitError:
        raise
    except Exception as err:  # noqa: BLE001 -- a peft failure is a finding, recorded in the results
        experts.xlora = None
        outcome["wrapped"] = failure(err)
    return outcome


def finished_run(out: Path, task: str, make_config: Callable[[], object]):
    """The finished text run in `out`, made first (`reproduce task1|task2` with `make_config()`) if it
    has no results.json yet."""
    from redkit_experiments.arithmetic.run import TaskRun, reproduce

    if not (out / "results.json").is_file():
        reproduce(out, make_config())
    run = TaskRun(out)
    if run.config.task != task:
        raise RedkitError(f"{out} is a {run.config.task} run, not {task}")
    return run


def reproduce_peers(run, config: PeersConfig, print_fn=print) -> dict:
    """Train (or reuse) the LoRA experts of a finished run and score every composition; returns results.json's dict."""
    with torch_threads(config.threads if run.device.type == "cpu" else None):
        return _reproduce_peers(run, config, print_fn)


def _reproduce_peers(run, config: PeersConfig, print_fn) -> dict:
    require_peft()
    wall = time.perf_counter()
    if config.split not in run.splits:
        raise RedkitError(f"--eval-split {config.split}: this run has no such split (known: {', '.join(run.splits)})")
    for part in ("classifier", "router", "gate", "heads/global_full"):
        if not module_exists(run.module_dir(*part.split("/"))):
            raise RedkitError(
                f"{run.module_dir(*part.split('/'))}: missing; the run is not finished (rerun reproduce {run.config.task})"
            )
    out = run.dir / "peers"
    modules = ModuleSet(run)
    lb, directories, metas = _experts(run, out, modules, config.lora, print_fn)
    check_compatible(run.space, directories)
    data = SplitStates(run, lb, config.split)
    base_seconds, path_diff = _base_pass(data, run, config.batch_size)
    experts = LoraExperts(run, lb, directories, modules, config.arrow, config.merge)
    rows = _pooled_rows(run, modules, data, base_seconds)
    xlora = _load_xlora(run, experts, directories, out, data, config, print_fn) if config.xlora else None
    rows |= _lora_rows(run, experts, data, metas, base_seconds, config.batch_size, print_fn)
    arrow_as_is = try_create_arrow_model(run, directories, config.arrow, data.states.batch(data.order[:4], run.device))
    arrow_as_is["expert_layers"] = sum(
        1 for m in experts.main.peft.modules() if hasattr(m, "lora_A") and experts.names[0] in m.lora_A
    )
    results = {
        "task": run.config.task,
        "split": config.split,
        "n": int(len(data.example_labels)),
        "distinct_texts": data.count,
        "seed": run.config.seed,
        "run": str(run.dir),
        "config": asdict(config),
        "experts": metas,
        "rows": rows,
        "xlora": xlora,
        "arrow_as_is": arrow_as_is,
        "torch_threads": torch.get_num_threads(),
        "prefix_path_max_abs_diff": path_diff,
        "provenance": provenance(),
        "wall_seconds": time.perf_counter() - wall,
    }
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", results)
    report = render_peers_report(results)
    write_text(out / "report.md", report)
    print_fn(report)
    return results

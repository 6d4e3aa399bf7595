"""Training and evaluating the step decomposer (paper §4.2.7, §4.5.4; docs/guides/design.md, decisions 7, 9, 10).

    <out>/module/         config.json + model.safetensors (kind "decomposer"), loadable on its own
    <out>/metrics.json    exact-match on test and test_heldout_templates, by steps and by phrasing
    <out>/log.jsonl       one line per epoch
    <out>/cache/          number features / frozen-prefix states (safe to delete)

Targets. For every number of the text, in text order: its position in the executed chain (its
*slot*: 0 and 1 are step 1's operands, k is step k's right operand) and the operator that applies
it. A phrasing may say the numbers in another order than they are executed ("If you subtract 5
from 12 ..." says 5 first), so the slots come from the phrasing itself: the question is recognised
as a known style of phrasing.py and re-rendered with distinct marker numbers, which tells where each
operand went. Texts of an unknown phrasing (other people's files) fall back to matching values,
ties broken by the fewest inversions of text order.

Two ways to use the backbone: frozen (default; the whole backbone runs once per text and the head
trains on cached number features in seconds), or `tune_top` (the frozen prefix is cached with
PrefixStates and the top layers are fine-tuned with the head, ~3 ms per example per epoch).
"""

import json
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm.auto import tqdm

from redkit.atomic import atomic_path, write_json
from redkit.backbone import Backbone, BackboneConfig
from redkit.errors import RedkitError
from redkit.features import PrefixStates, text_hash
from redkit.modules.store import module_exists, read_meta
from redkit.provenance import provenance
from redkit.train.loop import Checkpoint, TrainConfig, fit
from redkit_experiments.arithmetic import phrasing
from redkit_experiments.arithmetic.generate import HELDOUT, DataConfig, generate
from redkit_experiments.arithmetic.programs import Program, Step, execute, parse_program, render_program
from redkit_experiments.arithmetic.records import Example
from redkit_experiments.arithmetic.tasks import TASKS
from redkit_experiments.decomposer.model import (
    DecomposerHead,
    HeadConfig,
    HeadOutput,
    Positions,
    StepDecomposer,
    decode,
    extract_numbers,
    gather_features,
    number_positions,
)

MODULE, METRICS, LOG = "module", "metrics.json", "log.jsonl"
EVAL_SPLITS = ("test", HELDOUT)


def _default_train() -> TrainConfig:
    return TrainConfig(lr=1e-3, batch_size=64, virtual_batch_size=64, max_epochs=40, patience=3)


@dataclass
class DecomposerConfig:
    task: str = "decomposer"  # or "decomposer_times" (with * steps)
    n: int = 80_000  # train + val + test, as the paper's 80k
    seed: int = 0
    split: str = "structure"
    max_train: int | None = None  # train on the first max_train training examples (None: all 64k)
    max_val: int | None = None
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    tune_top: bool = False  # fine-tune the backbone's top layers (backbone.trainable_layers) with the head
    top_lr: float = 3e-5  # their learning rate; the head uses train.lr
    hidden: int = 256
    width: int = 128
    dropout: float = 0.1
    train: TrainConfig = field(default_factory=_default_train)
    encode_batch_size: int = 128
    device: str = "cpu"

    @classmethod
    def from_dict(cls, raw: dict) -> "DecomposerConfig":
        raw = dict(raw)
        raw["backbone"] = BackboneConfig(**raw.get("backbone", {}))
        raw["train"] = TrainConfig(**raw.get("train", {}))
        return cls(**raw)


# ---- targets -------------------------------------------------------------------------------------


def chain_of(program: Program) -> tuple[list[int], list[str]]:
    """A left-associative chain program -> (operands in execution order, operators)."""
    first = program.steps[0]
    if (
        not (isinstance(first.left, int) and isinstance(first.right, int))
        or any(
            step.left != f"x{k}" or not isinstance(step.right, int) for k, step in enumerate(program.steps[1:], start=1)
        )
        or program.answer_var != f"x{program.num_steps}"
    ):
        raise RedkitError(f"not a left-associative chain program: {render_program(program)!r}")
    return [first.left] + [step.right for step in program.steps], [step.op for step in program.steps]


def alignment(question: str, program: str | Program, operators: Sequence[str]) -> list[tuple[int, int]]:
    """For each number of the question, in text order: (slot, operator index), operator -100 for slot 0."""
    program = parse_program(program) if isinstance(program, str) else program
    operands, ops = chain_of(program)
    if unknown := set(ops) - set(operators):
        raise RedkitError(
            f"program uses operators {sorted(unknown)} that the decomposer does not predict "
            f"({' '.join(operators)}): {question!r}"
        )
    values = extract_numbers(question)
    if sorted(values) != sorted(operands):
        raise RedkitError(f"the numbers of {question!r} ({values}) are not the program's operands ({operands})")
    slots = _slots_from_style(question, operands, ops) or _slots_by_value(values, operands)
    return [(k, operators.index(ops[k - 1]) if k else -100) for k in slots]


def _slots_from_style(question: str, operands: list[int], ops: list[str]) -> list[int] | None:
    for style in phrasing.STYLES.values():
        if style(operands, ops) == question:
            markers = [10_000 + k for k in range(len(operands))]
            return [value - 10_000 for value in extract_numbers(style(markers, ops))]
    return None


def _slots_by_value(values: list[int], operands: list[int]) -> list[int]:
    """The value-consistent assignment closest to text order (fewest inversions)."""
    slots: list[int] = []
    taken: set[int] = set()
    for value in values:  # equal values take their slots in increasing order: no inversion among them
        k = next(k for k, x in enumerate(operands) if x == value and k not in taken)
        taken.add(k)
        slots.append(k)
    return slots


def target_tensors(examples: Sequence[Example], operators: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, M) slots and operator indices, -100 where a text has fewer numbers."""
    aligned = [alignment(ex.question, ex.program, operators) for ex in examples]
    M = max(len(a) for a in aligned)
    slots = torch.full((len(aligned), M), -100, dtype=torch.long)
    ops = torch.full((len(aligned), M), -100, dtype=torch.long)
    for i, a in enumerate(aligned):
        slots[i, : len(a)] = torch.tensor([s for s, _ in a])
        ops[i, : len(a)] = torch.tensor([o for _, o in a])
    return slots, ops


# ---- features ------------------------------------------------------------------------------------


@torch.inference_mode()
def number_features(
    model: StepDecomposer, texts: list[str], batch_size: int = 128, desc: str = "encode"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, M, 4d) fp16 number features and (N, M) mask, through the whole backbone, batched by length."""
    backbone = model.backbone
    positions = number_positions(backbone, texts)
    M = max(len(p) for p in positions)
    feats = torch.zeros(len(texts), M, 4 * backbone.hidden_size, dtype=torch.float16)
    mask = torch.zeros(len(texts), M, dtype=torch.bool)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    device = next(model.head.parameters()).device
    for first in tqdm(range(0, len(order), batch_size), desc=desc, unit="batch", leave=False, dynamic_ncols=True):
        chunk = order[first : first + batch_size]
        enc = backbone.tokenize([texts[i] for i in chunk])
        states = model.token_states(enc["input_ids"].to(device), enc["attention_mask"].to(device))
        f, m = gather_features(states, enc["attention_mask"].to(device), [positions[i] for i in chunk])
        feats[chunk, : f.shape[1]] = f.half().cpu()
        mask[chunk, : m.shape[1]] = m.cpu()
    return feats, mask


def cached_number_features(
    cache_dir: Path, model: StepDecomposer, texts: list[str], name: str, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    path = cache_dir / f"numbers-{name}-{model.backbone.fingerprint()}-{text_hash(texts)}.safetensors"
    if path.is_file():
        t = load_file(str(path))
        return t["features"], t["mask"]
    feats, mask = number_features(model, texts, batch_size, desc=f"encode {name}")
    with atomic_path(path) as tmp:
        save_file({"features": feats.contiguous(), "mask": mask.contiguous()}, str(tmp))
    return feats, mask


class Split:
    """One split's examples, targets and a way to compute the head's outputs for any rows of it."""

    def __init__(self, examples: list[Example], operators: Sequence[str], name: str):
        self.examples, self.name = examples, name
        self.texts = [ex.question for ex in examples]
        self.slots, self.ops = target_tensors(examples, operators)
        self.features: tuple[torch.Tensor, torch.Tensor] | None = None  # frozen: cached number features
        self.prefix: PrefixStates | None = None  # tune_top: cached prefix states
        self.positions: Positions = []

    def __len__(self) -> int:
        return len(self.examples)

    def outputs(self, model: StepDecomposer, idx: torch.Tensor, device: torch.device) -> HeadOutput:
        if self.features is not None:
            feats, mask = self.features
            mask = mask[idx]
            M = int(mask.sum(dim=1).max())
            return model.head(feats[idx, :M].to(device).float(), mask[:, :M].to(device))
        ids, attention, prefix = self.prefix.batch(idx, device)
        return model(ids, attention, [self.positions[i] for i in idx.tolist()], prefix=prefix)

    def loss(self, model: StepDecomposer, idx: torch.Tensor, device: torch.device) -> torch.Tensor:
        out = self.outputs(model, idx, device)
        M = out.mask.shape[1]
        return model.head.loss(out, self.slots[idx, :M].to(device), self.ops[idx, :M].to(device))[0]


# ---- evaluation ----------------------------------------------------------------------------------


def _canonical(program: Program) -> str:
    """The program with step 1's operands sorted when its operator commutes: the same computation."""
    first = program.steps[0]
    if (
        first.op in ("+", "*")
        and isinstance(first.left, int)
        and isinstance(first.right, int)
        and first.left > first.right
    ):
        program = Program(
            (Step(first.right, first.op, first.left, first.target),) + program.steps[1:], program.answer_var
        )
    return render_program(program)


def score_programs(
    examples: Sequence[Example], predicted: Sequence[Program], styles: dict[str, str] | None = None, failures: int = 3
) -> dict:
    """Exact match of the rendered program (the target), overall, by number of steps and by phrasing;
    also `equivalent` (equal up to swapping step 1's operands of a + or *) and answer accuracy."""
    styles = styles or {}
    rows = []
    for ex, program in zip(examples, predicted):
        gold = parse_program(ex.program)
        try:
            answer_ok = execute(program, value_range=None).answer == ex.answer
        except RedkitError:
            answer_ok = False
        rows.append(
            {
                "exact": render_program(program) == render_program(gold),
                "equivalent": _canonical(program) == _canonical(gold),
                "answer": answer_ok,
                "steps": str(gold.num_steps),
                "phrasing": styles.get(ex.template, ex.template or "unknown"),
                "question": ex.question,
                "predicted": render_program(program).replace("\n", "; "),
            }
        )

    def summary(group: list[dict]) -> dict:
        n = len(group)
        return {
            "count": n,
            "exact_match": sum(r["exact"] for r in group) / n,
            "equivalent": sum(r["equivalent"] for r in group) / n,
            "answer_accuracy": sum(r["answer"] for r in group) / n,
        }

    result = summary(rows) if rows else {"count": 0}
    for key, name in (("steps", "by_num_steps"), ("phrasing", "by_phrasing")):
        groups: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            groups[r[key]].append(r)
        result[name] = {k: summary(v) for k, v in sorted(groups.items())}
    wrong: dict[str, list] = defaultdict(list)
    for r in rows:
        if not r["exact"] and len(wrong[r["phrasing"]]) < failures:
            wrong[r["phrasing"]].append({"question": r["question"], "predicted": r["predicted"]})
    result["failures"] = dict(wrong)
    return result


def template_styles(task: str) -> dict[str, str]:
    """Example.template ('train/2', 'heldout/0') -> the phrasing style's name."""
    cls = TASKS[task]
    return {
        f"{kind}/{i}": name
        for kind, names in (("train", cls.train_templates), ("heldout", cls.heldout_templates))
        for i, name in enumerate(names)
    }


def predict_split(model: StepDecomposer, split: Split, device: torch.device, batch_size: int = 512) -> list[Program]:
    """Programs for a split, from its cached features (frozen) or a full pass (tuned top)."""
    if split.features is None:
        return model.predict(split.texts, batch_size=min(batch_size, 128))
    model.eval()
    programs = []
    with torch.no_grad():
        for first in range(0, len(split), batch_size):
            idx = torch.arange(first, min(first + batch_size, len(split)))
            out = split.outputs(model, idx, device)
            order, op_logits = out.order.cpu().tolist(), out.op_logits.cpu().tolist()
            programs += [
                decode(extract_numbers(split.texts[i]), order[b], op_logits[b], model.operators)
                for b, i in enumerate(idx.tolist())
            ]
    return programs


def cached_programs(cache_dir: Path, model: StepDecomposer, split: Split, batch_size: int = 128) -> list[Program]:
    """Programs for a split, from number features cached under `cache_dir` (computed once per
    backbone and texts, so executing the decomposer's own test splits after its evaluation does
    not encode them again); a tuned-top decomposer runs in full."""
    if not model.tuned_top:
        split.features = cached_number_features(cache_dir, model, split.texts, split.name, batch_size)
    return predict_split(model, split, next(model.head.parameters()).device)


class TextSplit(Split):
    """A split to predict on, without training targets (computing them aligns every question)."""

    def __init__(self, texts: list[str], name: str):
        self.texts, self.name = list(texts), name
        self.features, self.prefix, self.positions = None, None, []

    def __len__(self) -> int:
        return len(self.texts)


# ---- training --------------------------------------------------------------------------------------


def _operators(task: str) -> tuple[str, ...]:
    config = getattr(TASKS[task], "config", None)
    if config is None or not hasattr(config, "operators"):
        raise RedkitError(f"task {task!r} has no chain programs to decompose (use decomposer or decomposer_times)")
    return tuple(config.operators)


def decomposer_data(config: DecomposerConfig) -> dict[str, list[Example]]:
    """The dataset a config trains on and is evaluated on (also the programs `reproduce steps` executes)."""
    return generate(DataConfig(task=config.task, n=config.n, seed=config.seed, split=config.split))


def train_decomposer(
    out_dir: str | Path,
    config: DecomposerConfig | None = None,
    print_fn: Callable[[str], None] = print,
    data: dict[str, list[Example]] | None = None,
) -> dict:
    """Generate the data (unless the caller already has `decomposer_data(config)`), train (or reuse
    the finished module in <out>/module), evaluate on test and the held-out phrasings, write
    <out>/metrics.json and return it."""
    config = config or DecomposerConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    module_dir, cache_dir = out / MODULE, out / "cache"
    device = torch.device(config.device)
    timings: dict[str, float] = {}
    wall = time.perf_counter()

    start = time.perf_counter()
    operators = _operators(config.task)
    data = data or decomposer_data(config)
    train_examples = data["train"][: config.max_train] if config.max_train else data["train"]
    val_examples = data["val"][: config.max_val] if config.max_val else data["val"]
    splits = {"train": Split(train_examples, operators, "train"), "val": Split(val_examples, operators, "val")}
    splits |= {name: Split(data[name], operators, name) for name in EVAL_SPLITS}
    timings["data"] = time.perf_counter() - start
    print_fn(
        f"[data] {config.task}: train {len(splits['train'])}, val {len(splits['val'])}, "
        f"test {len(splits['test'])}, held-out phrasings {len(splits[HELDOUT])}"
    )

    backbone = Backbone(config.backbone)
    fingerprint = backbone.fingerprint()  # of the backbone as loaded: what the module must be used with
    data_hash = text_hash([ex.question + "\0" + ex.program for ex in train_examples])
    fit_info: dict = {}
    if module_exists(module_dir):
        if (trained_on := read_meta(module_dir).data_hash) != data_hash:  # its test split could overlap its training
            raise RedkitError(
                f"{module_dir}: this decomposer was trained on other data (hash {trained_on}, "
                f"this config's is {data_hash}); use another directory"
            )
        model = StepDecomposer.load(module_dir, backbone).to(device)
        if model.operators != operators:
            raise RedkitError(
                f"{module_dir}: decomposer for operators {' '.join(model.operators)}, but task "
                f"{config.task!r} has {' '.join(operators)}; use another --out"
            )
        print_fn(f"[train] reusing {module_dir}")
    else:
        torch.manual_seed(config.seed)
        head = DecomposerHead(
            HeadConfig(
                dim=backbone.hidden_size,
                operators=operators,
                hidden=config.hidden,
                width=config.width,
                dropout=config.dropout,
            )
        )
        model = StepDecomposer(backbone, head, tuned_top=config.tune_top).to(device)
        backbone.requires_grad_(False)
        start = time.perf_counter()
        for name in ("train", "val"):
            split = splits[name]
            if config.tune_top:
                split.prefix = PrefixStates.build(
                    cache_dir, backbone, split.texts, f"decomposer-{name}", config.encode_batch_size
                )
                split.positions = number_positions(backbone, split.texts)
            else:
                split.features = cached_number_features(cache_dir, model, split.texts, name, config.encode_batch_size)
        timings["encode"] = time.perf_counter() - start
        if config.tune_top:
            backbone.top_layers.requires_grad_(True)
            trainable: nn.Module = nn.ModuleDict({"head": head, "top": backbone.top_layers})
            train_config = TrainConfig(**(asdict(config.train) | {"lr": config.top_lr, "head_lr": config.train.lr}))
        else:
            trainable, train_config = head, config.train

        def val_loss() -> float:
            total, val = 0.0, splits["val"]
            for first in range(0, len(val), 512):
                idx = torch.arange(first, min(first + 512, len(val)))
                total += val.loss(model, idx, device).item() * len(idx)
            return total / len(val)

        log_path = out / LOG

        def log(row: dict) -> None:
            with open(log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")

        result = fit(
            trainable,
            lambda idx: splits["train"].loss(model, idx, device),
            len(splits["train"]),
            val_loss,
            train_config,
            seed=config.seed,
            checkpoint_dir=module_dir,
            desc="decomposer",
            log=log,
            head=head if config.tune_top else None,
        )
        backbone.requires_grad_(False)
        model.eval()
        timings["train"] = result.seconds
        fit_info = {
            "epochs": result.epochs,
            "best_epoch": result.best_epoch,
            "best_val_loss": result.best_val_loss,
            "train_seconds": result.seconds,
        }
        print_fn(
            f"[train] {result.epochs} epochs (best {result.best_epoch}), val loss {result.best_val_loss:.5f}, "
            f"{result.seconds:.0f}s"
        )
        model.save(module_dir, fingerprint, metrics=fit_info, seed=config.seed, data_hash=data_hash)
        Checkpoint(module_dir).remove()

    start = time.perf_counter()
    styles = template_styles(config.task)
    evaluation = {}
    for name in EVAL_SPLITS:
        programs = cached_programs(cache_dir, model, splits[name], config.encode_batch_size)
        evaluation[name] = score_programs(splits[name].examples, programs, styles)
    timings["evaluate"] = time.perf_counter() - start
    timings["total"] = time.perf_counter() - wall
    metrics = {
        "task": config.task,
        "config": asdict(config),
        "module": str(module_dir),
        "backbone_fingerprint": fingerprint,
        "fit": fit_info,
        "splits": evaluation,
        "wall_seconds": timings,
        "provenance": provenance(),
    }
    write_json(out / METRICS, metrics)
    print_fn(format_metrics(metrics))
    return metrics


def format_metrics(metrics: dict) -> str:
    """Markdown tables: exact match (and equivalence, answer accuracy) by split, steps and phrasing."""
    lines = [
        f"# step decomposer ({metrics['task']}, {metrics['config']['split']} split, seed {metrics['config']['seed']})",
        "",
        "| split | group | n | exact match | equivalent | answer acc |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for split, result in metrics["splits"].items():
        groups = (
            [("all", result)]
            + [(f"{k} steps", v) for k, v in result["by_num_steps"].items()]
            + [(k, v) for k, v in result["by_phrasing"].items()]
        )
        for group, r in groups:
            lines.append(
                f"| {split} | {group} | {r['count']} | {r['exact_match']:.4f} | {r['equivalent']:.4f} | "
                f"{r['answer_accuracy']:.4f} |"
            )
    seconds = metrics["wall_seconds"]
    lines += ["", "wall seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items())]
    return "\n".join(lines)


def reproduce_decomposer(
    out: str | Path = "runs/decomposer", config: DecomposerConfig | None = None, print_fn: Callable[[str], None] = print
) -> dict:
    """The entry point for `redkit reproduce steps` (or its own subcommand): train the step
    decomposer at the paper's scale unless <out>/module is complete, evaluate, print the tables."""
    return train_decomposer(out, config, print_fn)


def load_decomposer(path: str | Path, backbone: Backbone | None = None) -> StepDecomposer:
    """A trained decomposer from its module directory (or from the run directory that holds it)."""
    path = Path(path)
    if not module_exists(path) and module_exists(path / MODULE):
        path = path / MODULE
    return StepDecomposer.load(path, backbone)

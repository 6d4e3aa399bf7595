"""Scoring the decomposer: its programs for a split, exact match by number of steps and by phrasing, and the
tables `reproduce steps` prints."""

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import torch

from redkit.errors import RedkitError
from redkit_experiments.arithmetic.programs import Program, Step, execute, parse_program, render_program
from redkit_experiments.arithmetic.records import Example
from redkit_experiments.arithmetic.tasks import TASKS
from redkit_experiments.decomposer.model import StepDecomposer, decode, extract_numbers
from redkit_experiments.decomposer.splits import Split, cached_number_features


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

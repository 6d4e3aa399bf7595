"""Plugging a new operation expert into a trained steps run: the modular claim.

    <parent run>  backbone_top, classifier, experts add/sub, heads add/sub   ──copied, never retrained──┐
                                                                                                        ▼
    <new run>     + expert mul and head mul, each trained alone on "What is 6 times 7?" data
                  + router and gate over add/sub/mul (the only modules that see every operation)
                  + a decomposer whose data includes `times` (decomposer_times), trained beside the
                    parent's, which is left as it was

Mixed programs (the decomposer_times test split: +, - and * steps) are executed before the plug-in
(the parent run: a * step goes to the add or sub expert) and after it, with gold programs and with
the times-aware decomposer's programs. The parent run directory is only read.
"""

import time
from dataclasses import replace
from pathlib import Path

from redkit.atomic import write_text
from redkit.errors import RedkitError
from redkit.modules.layers import ROUTERS
from redkit.modules.store import copy_modules, module_exists, modules_unchanged
from redkit.report import markdown_table, run_footer
from redkit.train.stages import STAGES
from redkit_experiments.arithmetic.expression import OPERATION_NAMES
from redkit_experiments.decomposer.train import decomposer_data, train_decomposer
from redkit_experiments.steps.benchmark import decomposer_summary, execute_sources
from redkit_experiments.steps.run import StepsRun, operations_space

TIMES_TASK = "decomposer_times"  # the decomposer data with * steps


def frozen_parts(run: StepsRun) -> list[tuple[str, ...]]:
    """The modules the plug-in copies and must leave bit-identical."""
    return [
        ("backbone_top",),
        ("classifier",),
        ("heads", "global_full"),
        *(("experts", "residual", op) for op in run.config.operations),
        *(("heads", op) for op in run.config.operations),
    ]


def plug_in(
    parent_dir: Path,
    out: Path,
    operation: str,
    decomposer_dir: Path | None = None,
    print_fn=print,
    router: str | None = None,
) -> dict:
    """`router`: the router kind of the new run's router and gate (a ROUTERS name; default the
    parent's). A training-free one (prototype, arrow) is built from the data and experts: then
    nothing that sees every operation is trained at all."""
    wall = time.perf_counter()
    if router is not None:
        ROUTERS[router]  # an unknown name fails (did you mean) before anything is written
    parent = StepsRun(parent_dir)
    if operation not in OPERATION_NAMES.values():
        raise RedkitError(f"unknown operation {operation!r} (expected one of {', '.join(OPERATION_NAMES.values())})")
    if operation in parent.config.operations:
        raise RedkitError(f"{parent_dir} already has an expert for {operation!r}")
    for parts in frozen_parts(parent):  # before anything is written
        if not module_exists(parent.module_dir(*parts)):
            raise RedkitError(
                f"{parent.module_dir(*parts)}: missing; finish the parent run first (redkit reproduce steps)"
            )
    config = replace(
        parent.config,
        operations=(*parent.config.operations, operation),
        router=router or parent.config.router,
        decomposer=replace(parent.config.decomposer, task=TIMES_TASK),
        decomposer_dir=str(decomposer_dir.resolve()) if decomposer_dir else None,
    )
    (low, high), (parent_low, parent_high) = operations_space(config.operations).value_range, parent.space.value_range
    if (low, high) != (parent_low, parent_high):  # the copied classifier answers the parent's values only
        raise RedkitError(
            f"with a {operation} expert the answers span {low}..{high}, beyond the parent's classes "
            f"{parent_low}..{parent_high}: its copied classifier cannot answer them"
        )
    run = StepsRun(out, config)
    before_digests = copy_modules(parent, run, frozen_parts(parent))
    run.prepare_data()  # the parent's operations' data (same generator and seed) plus the new one's

    start = time.perf_counter()
    data = decomposer_data(config.decomposer)  # its test splits are the programs executed below
    decomposer = train_decomposer(run.decomposer_dir, config.decomposer, print_fn, data)
    run.add_time("decomposer", time.perf_counter() - start)
    new = [run.space.domains.index(operation)]
    STAGES["experts"](run, domains=new, kinds=("residual",))
    STAGES["heads"](run, domains=new)
    STAGES["router"](run)
    STAGES["gate"](run)
    unchanged = modules_unchanged(run, before_digests)

    start = time.perf_counter()
    results = {
        "task": "plug-in",
        "operation": operation,
        "parent": str(parent_dir),
        "seed": config.seed,
        "router": config.router,
        "frozen_modules_unchanged": unchanged,
        "frozen_modules": sorted(before_digests),
        "decomposer": decomposer_summary(run.decomposer_dir, decomposer),
        "before": execute_sources(parent, data, decomposer_dir=run.decomposer_dir),
        "after": execute_sources(run, data),
    }
    run.add_time("execute", time.perf_counter() - start)
    results = run.record(results, wall)
    text = render(results)
    write_text(run.dir / "report.md", text)
    print_fn(text)
    return results


def render(results: dict) -> str:
    out = [
        f"# plug-in: a {results['operation']} expert added to {results['parent']} (router: {results.get('router', 'dense')})",
        "",
        f"Copied modules unchanged after the plug-in (sha256 of their weights): {results['frozen_modules_unchanged']} "
        f"({', '.join(results['frozen_modules'])})",
        "",
        "Times-aware decomposer, program exact-match: "
        + ", ".join(f"{s} {m['exact_match']:.4f}" for s, m in results["decomposer"]["splits"].items()),
        "",
    ]
    for source in results["after"]:
        rows = []
        for when in ("before", "after"):
            for mode, m in results[when][source].items():
                rows.append([when, mode, *(f"{v['accuracy']:.4f}" for v in m.values())])
        keys = list(next(iter(results["after"][source].values())))
        out += [
            f"## Mixed programs (+, -, *), {source} programs: exact accuracy",
            "",
            markdown_table(["", "Routing", *keys], rows),
            "",
        ]
    return "\n".join(out + run_footer(results))

"""`redkit reproduce steps` (paper §4.8): train the operation experts, router and gate on the
shared pipeline and the step decomposer beside them, then execute the decomposer dataset's test
programs step by step with each routing mode, and report accuracy and macro-F1 by number of steps:
once with the gold programs, once with the decomposer's programs of the same questions, and once
with its programs of the same chains said in held-out phrasings. Then Task 2 answered whole by
decomposition: every question of Task 2's structure-split test set (the data `reproduce task2`
trains and tests on, same seed) goes through the decomposer and the experts, and so does every
record of each `--eval` file (other people's questions; any integer answer)."""

import time
from dataclasses import asdict
from pathlib import Path

from redkit.atomic import write_text
from redkit.compositions import ModuleSet
from redkit.evaluate import evaluate_run
from redkit.pipeline import train_stages
from redkit.report import markdown_table, run_footer
from redkit.train.distributed import check_nproc
from redkit_experiments.arithmetic.generate import HELDOUT, DataConfig, generate
from redkit_experiments.arithmetic.programs import Program, parse_program
from redkit_experiments.arithmetic.records import Example, read_jsonl
from redkit_experiments.decomposer.evaluate import cached_programs
from redkit_experiments.decomposer.splits import TextSplit
from redkit_experiments.decomposer.train import decomposer_data, load_decomposer, train_decomposer
from redkit_experiments.steps.execute import NeuralExecutor, execution_metrics
from redkit_experiments.steps.questions import evaluate_questions
from redkit_experiments.steps.run import MODES, StepsConfig, StepsRun

# Routing modes of §4.8, by the composition that implements each.
# Which programs are executed: (the decomposer data's split, whose programs).
SOURCES = {
    "gold": ("test", "gold"),
    "decomposer": ("test", "decomposer"),
    "decomposer, held-out phrasings": (HELDOUT, "decomposer"),
}


def decomposer_summary(directory: Path, metrics: dict) -> dict:
    """What a report keeps of train_decomposer's metrics: where it is, its config, exact-match per split."""
    return {
        "dir": str(directory),
        "config": metrics["config"],
        "splits": {split: {k: m[k] for k in ("count", "exact_match")} for split, m in metrics["splits"].items()},
    }


def execute_modes(
    run: StepsRun, modules: ModuleSet, cache: dict, programs: list[Program], answers: list[int]
) -> dict[str, dict]:
    return {
        mode: execution_metrics(programs, answers, NeuralExecutor(run, modules, name, cache))
        for mode, name in MODES.items()
    }


def execute_sources(
    run: StepsRun, data: dict[str, list[Example]], decomposer_dir: Path | None = None, cache: dict | None = None
) -> dict[str, dict]:
    """{source: {mode: metrics}} for every program source of SOURCES (step features cached across
    all, in `cache` when given, else starting from the run's step_features); the programs come
    from the run's decomposer unless `decomposer_dir` names another."""
    decomposer_dir = Path(decomposer_dir or run.decomposer_dir)
    decomposer = load_decomposer(decomposer_dir)
    modules, cache = ModuleSet(run), (run.step_features() if cache is None else cache)
    out = {}
    for source, (split, author) in SOURCES.items():
        examples = data[split]
        programs = (
            [parse_program(ex.program) for ex in examples]
            if author == "gold"
            else cached_programs(
                decomposer_dir / "cache", decomposer, TextSplit([ex.question for ex in examples], split)
            )
        )
        out[source] = execute_modes(run, modules, cache, programs, [ex.answer for ex in examples])
    return out


def task2_test(seed: int, n: int) -> list[Example]:
    """Task 2's structure-split test set, as `redkit reproduce task2 --seed SEED --n N` makes it."""
    return generate(DataConfig(task="task2", n=n, seed=seed, split="structure"))["test"]


def _accuracy_table(by_mode: dict[str, dict]) -> str:
    """Rows: routing modes; columns: accuracy overall and per number of steps (n in the header)."""
    groups = next(iter(by_mode.values()))
    return markdown_table(
        ["Routing", *(f"{k} (n = {m['n']})" for k, m in groups.items())],
        [[mode, *(f"{m[k]['accuracy']:.4f}" for k in groups)] for mode, m in by_mode.items()],
    )


def _questions_section(title: str, result: dict) -> list[str]:
    match = result["program_exact_match"]
    by_mode = {mode: result["compositions"][name] for mode, name in MODES.items()}
    return [
        f"## {title}",
        "",
        f"{result['n']} questions, each decomposed by the decomposer and executed by the experts"
        + (
            f"; program exact-match {match:.4f} on the {result['with_program']} with a program."
            if match is not None
            else "."
        ),
        "",
        _accuracy_table(by_mode),
        "",
    ]


def render(results: dict) -> str:
    decomposer = results["decomposer"]
    out = [
        f"# steps: decomposed execution (programs: {decomposer['config']['split']} split; operation data: "
        f"{results['config']['data']['split']} split; seed {results['seed']})",
        "",
    ]
    single = results["single_step"]["splits"]["test"]
    out += [
        "## Operation experts on single steps (test)",
        "",
        markdown_table(
            ["Composition", "Accuracy", "Macro-F1"],
            [[n, f"{m['accuracy']:.4f}", f"{m['macro_f1']:.4f}"] for n, m in single.items()],
        ),
        "",
        "Router accuracy (operation): "
        + ", ".join(f"{s} {r['accuracy']:.4f}" for s, r in results["single_step"]["router"].items()),
        "",
    ]
    out += [
        "## Step decomposer",
        "",
        "Program exact-match: "
        + ", ".join(f"{split} {m['exact_match']:.4f} (n = {m['count']})" for split, m in decomposer["splits"].items()),
        "",
    ]
    for source, by_mode in results["execution"].items():
        keys = list(next(iter(by_mode.values())))
        out += [
            f"## Execution with {source} programs (cf. §4.8.3–4.8.5)",
            "",
            markdown_table(
                ["Routing", *(f"{k} acc" for k in keys), *(f"{k} F1" for k in keys)],
                [
                    [mode, *(f"{m[k]['accuracy']:.4f}" for k in keys), *(f"{m[k]['macro_f1']:.4f}" for k in keys)]
                    for mode, m in by_mode.items()
                ],
            ),
            "",
        ]
    out += _questions_section(
        "Task 2 answered by decomposition (structure-split test set, all questions)", results["task2"]
    )
    for name, result in results["external"].items():
        out += _questions_section(f"Decomposition on {name} (evaluation only)", result)
    out += run_footer(results)
    return "\n".join(out)


def reproduce_steps(
    out: Path, config: StepsConfig, eval_files: tuple[Path, ...] = (), print_fn=print, nproc: int = 1
) -> dict:
    wall = time.perf_counter()
    check_nproc(nproc, 10**9, config.train_config("base").batch_size)  # the base subset's size is checked once drawn
    run = StepsRun(out, config)
    summary = run.prepare_data()
    start = time.perf_counter()
    programs = decomposer_data(config.decomposer)  # its test splits are the programs executed below
    metrics = train_decomposer(run.decomposer_dir, config.decomposer, print_fn, programs)  # reused when already trained
    run.add_time("decomposer", time.perf_counter() - start)
    train_stages(run, nproc, print_fn)
    results = {
        "task": "steps",
        "seed": config.seed,
        "config": asdict(run.config),
        "data": summary,
        "single_step": evaluate_run(run),
        "decomposer": decomposer_summary(run.decomposer_dir, metrics),
    }
    start = time.perf_counter()
    cache, modes = (
        run.step_features(),
        list(MODES.values()),
    )  # step question -> features, shared by every execution below
    results["execution"] = execute_sources(run, programs, cache=cache)
    results["task2"] = evaluate_questions(
        run, task2_test(config.seed, config.decomposer.n), modes, cache
    )  # 80k, as the paper's
    results["external"] = {
        Path(path).name: evaluate_questions(run, read_jsonl(path, answers=None), modes, cache) for path in eval_files
    }
    run.add_time("execute", time.perf_counter() - start)
    results = run.record(results, wall)
    text = render(results)
    write_text(run.dir / "report.md", text)
    print_fn(text)
    return results

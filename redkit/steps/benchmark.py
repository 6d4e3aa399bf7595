"""`redkit reproduce steps` (paper §4.8): train the operation experts, router and gate on the
shared pipeline, then execute the decomposer dataset's programs step by step with each routing
mode, and report accuracy and macro-F1 by number of steps."""

import time
from dataclasses import asdict, replace
from pathlib import Path

from redkit.atomic import write_json, write_text
from redkit.compositions import ModuleSet
from redkit.data.generate import generate
from redkit.pipeline import evaluate_run
from redkit.programs import parse_program
from redkit.provenance import provenance
from redkit.report import markdown_table
from redkit.steps.execute import NeuralExecutor, execution_metrics
from redkit.steps.run import StepsConfig, StepsRun
from redkit.train.stages import PIPELINE, STAGES

# Routing modes of §4.8, by the composition that implements each.
MODES = {"RED": "red", "MoE": "moe", "AllFix": "red_uniform", "RED, oracle α": "red_oracle",
         "Global head (10%)": "global_10pct"}


def program_set(config: StepsConfig, n: int) -> tuple[list, list[int]]:
    """The decomposer dataset's test programs (gold) and answers, generated as `redkit data decomposer`."""
    test = generate(replace(config.data, task="decomposer", n=n))["test"]
    return [parse_program(ex.program) for ex in test], [ex.answer for ex in test]


def execute_modes(run: StepsRun, programs: list, answers: list[int]) -> dict[str, dict]:
    modules, cache = ModuleSet(run), {}
    return {mode: execution_metrics(programs, answers, NeuralExecutor(run, modules, name, cache))
            for mode, name in MODES.items()}


def render(results: dict) -> str:
    out = [f"# steps: decomposed execution ({results['config']['data']['split']} split, seed {results['seed']})", ""]
    single = results["single_step"]["splits"]["test"]
    out += ["## Operation experts on single steps (test)", "",
            markdown_table(["Composition", "Accuracy", "Macro-F1"], [[n, f"{m['accuracy']:.4f}", f"{m['macro_f1']:.4f}"] for n, m in single.items()]),
            "", "Router accuracy (operation): " + ", ".join(f"{s} {r['accuracy']:.4f}" for s, r in results["single_step"]["router"].items()), ""]
    for source, by_mode in results["execution"].items():
        keys = list(next(iter(by_mode.values())))
        out += [f"## Execution with {source} programs (cf. §4.8.3–4.8.5)", "",
                markdown_table(["Routing", *(f"{k} acc" for k in keys), *(f"{k} F1" for k in keys)],
                               [[mode, *(f"{m[k]['accuracy']:.4f}" for k in keys), *(f"{m[k]['macro_f1']:.4f}" for k in keys)]
                                for mode, m in by_mode.items()]), ""]
    out += ["Wall time per stage (s): " + ", ".join(f"{k} {v:.1f}" for k, v in results["wall_seconds_per_stage"].items()), ""]
    return "\n".join(out)


def reproduce_steps(out: Path, config: StepsConfig, programs_n: int = 80_000, print_fn=print) -> dict:
    wall = time.perf_counter()
    run = StepsRun(out, config)
    summary = run.prepare_data()
    for stage in PIPELINE:
        STAGES[stage](run)
        print_fn(f"[{stage}] done")
    results = {"task": "steps", "seed": config.seed, "config": asdict(run.config), "data": summary,
               "single_step": evaluate_run(run), "execution": {}}
    start = time.perf_counter()
    programs, answers = program_set(config, programs_n)
    results["execution"]["gold"] = execute_modes(run, programs, answers)
    run.add_time("execute", time.perf_counter() - start)
    results |= {"provenance": provenance(), "wall_seconds_per_stage": dict(run.timings),
                "wall_seconds_this_call": time.perf_counter() - wall}
    write_json(run.dir / "results.json", results)
    text = render(results)
    write_text(run.dir / "report.md", text)
    print_fn(text)
    return results

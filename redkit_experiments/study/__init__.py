"""Studies: what turns a trained run into evidence about the paper's claims.

    noise        accuracy of every routed composition under four routing-noise models
    ablation     rank, where the correction lives, number of experts, base data (§4.9)
    seeds        full replicates over seeds: intervals, McNemar and paired t-tests of the paper's orderings
    complexity   parameters, FLOPs, latency and memory of the backbone and of every composition
    levers       what moves RED on real data: base recipe, routing, experts (chosen on val)

Each reads a finished run (its modules and cached features), never changes it, and writes under
`<run>/studies/<name>/`: results.json (with provenance), report.md and figures/*.png.
"""

from pathlib import Path

from redkit.run import open_run
from redkit_experiments.study.ablation import AblationConfig, ablation_study
from redkit_experiments.study.complexity import ComplexityConfig, complexity_study
from redkit_experiments.study.noise import NoiseStudyConfig, noise_study
from redkit_experiments.study.report import (
    ablation_report,
    complexity_report,
    noise_report,
    seeds_report,
    study_dir,
    write_study,
)
from redkit_experiments.study.seeds import SeedsConfig, seeds_study


def run_noise_study(run_dir: Path, config: NoiseStudyConfig, print_fn=print) -> dict:
    result = noise_study(open_run(run_dir), config)
    directory = write_study(run_dir, "noise", result, noise_report)
    print_fn((directory / "report.md").read_text())
    return result


def run_complexity_study(run_dir: Path, config: ComplexityConfig, print_fn=print) -> dict:
    result = complexity_study(open_run(run_dir), config)
    directory = write_study(run_dir, "complexity", result, complexity_report)
    print_fn((directory / "report.md").read_text())
    return result


def run_ablation_study(run_dir: Path, config: AblationConfig, print_fn=print) -> dict:
    result = ablation_study(open_run(run_dir), config, study_dir(run_dir, "ablation"))
    directory = write_study(run_dir, "ablation", result, ablation_report)
    print_fn((directory / "report.md").read_text())
    return result


def run_seeds_study(out: Path, config: SeedsConfig, print_fn=print) -> dict:
    result = seeds_study(out, config, print_fn)
    directory = write_study(out, "seeds", result, seeds_report)
    print_fn((directory / "report.md").read_text())
    return result


def run_levers_study(run_dirs: list[Path], config, print_fn=print, replicates: list[Path] = ()) -> dict:
    from redkit_experiments.study.levers import levers_report, levers_study

    result = levers_study([open_run(d) for d in run_dirs], config, [open_run(d) for d in replicates])
    directory = write_study(run_dirs[0], "levers", result, levers_report)
    print_fn((directory / "report.md").read_text())
    return result


def run_tuning_study(out: Path, config, print_fn=print) -> dict:
    from redkit_experiments.study.tuning import tuning_report, tuning_study

    result = tuning_study(out, config, print_fn)
    directory = write_study(out, "tuning", result, tuning_report)
    print_fn((directory / "report.md").read_text())
    return result

"""`redkit study STUDY --run RUN [its flags]`: test a claim of the paper on a trained run."""

import argparse
from pathlib import Path

from redkit.cli.command import group, sub_command

STUDIES = group(
    "study",
    "study",
    help="test a claim of the paper on a trained run (results under <run>/studies/)",
    description="`redkit study STUDY --help` lists a study's flags.",
)


def _noise_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path, help="a trained run (task1, task2, steps or digits)")
    p.add_argument(
        "--composition", action="append", default=None, help="a routed composition (default: every one the run has)"
    )
    p.add_argument(
        "--model", action="append", default=None, help="logit | misroute | neighbour | flatten (default: all)"
    )
    p.add_argument(
        "--level", action="append", type=float, default=None, help="levels of the one --model (default: its grid)"
    )
    p.add_argument("--draws", type=int, default=20, help="noise draws per level (default 20)")
    p.add_argument("--split", default="test")
    p.add_argument("--seed", type=int, default=0)


@sub_command(STUDIES, "noise", _noise_options)
def noise(args) -> None:
    from redkit_experiments.study import run_noise_study
    from redkit_experiments.study.noise import NoiseStudyConfig
    from redkit_experiments.study.noise_models import NOISE_MODELS

    config = NoiseStudyConfig(
        compositions=tuple(args.composition or ()),
        models=tuple(args.model or NOISE_MODELS),
        levels=tuple(args.level or ()),
        draws=args.draws,
        split=args.split,
        seed=args.seed,
    )
    run_noise_study(args.run, config)


def _complexity_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path, help="a trained run (task1, task2, steps or digits)")
    p.add_argument("--repeats", type=int, default=50, help="timed calls per component and batch size (default 50)")


@sub_command(STUDIES, "complexity", _complexity_options)
def complexity(args) -> None:
    from redkit_experiments.study import run_complexity_study
    from redkit_experiments.study.complexity import ComplexityConfig

    run_complexity_study(args.run, ComplexityConfig(repeats=args.repeats))


def _ablation_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path, help="a trained run (task1, task2, steps or digits)")
    p.add_argument("--part", action="append", default=None, help="rank | correction | experts (default: all three)")
    p.add_argument("--experts", type=int, action="append", default=None, help="values of K (default 2 5 10 20)")
    p.add_argument(
        "--with-base", action="store_true", help="also retrain stage base on 5%%, 10%%, 25%%, 100%% of train"
    )


@sub_command(STUDIES, "ablation", _ablation_options)
def ablation(args) -> None:
    from redkit_experiments.study import run_ablation_study
    from redkit_experiments.study.ablation import AblationConfig

    parts = tuple(args.part or AblationConfig.parts) + (("base",) if args.with_base else ())
    config = AblationConfig(parts=parts, **({"experts": tuple(args.experts)} if args.experts else {}))
    run_ablation_study(args.run, config)


def _seeds_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--task",
        default="task1",
        help="task1 | task2 | digits | clinc150 | fit (the last two at redkit fit's defaults)",
    )
    p.add_argument(
        "--data",
        type=Path,
        default=None,
        help="clinc150: its data_full.json + domains.json (default data/clinc150); fit: the data directory",
    )
    p.add_argument("--seeds", type=int, default=5, help="replicates, seeds 0..N-1 (default 5)")
    p.add_argument("--out", type=Path, default=None, help="default runs/seeds-<task>")
    p.add_argument("--n", type=int, default=None, help="examples of a text task (default: the task's)")
    p.add_argument("--max-epochs", type=int, default=None, help="cap every stage's epochs (quick runs)")


@sub_command(STUDIES, "seeds", _seeds_options)
def seeds(args) -> None:
    from redkit_experiments.study import run_seeds_study
    from redkit_experiments.study.seeds import SeedsConfig

    config = SeedsConfig(
        task=args.task,
        seeds=args.seeds,
        n=args.n,
        max_epochs=args.max_epochs,
        data_dir=str(args.data.resolve()) if args.data else None,
    )
    run_seeds_study(args.out or Path("runs") / f"seeds-{args.task}", config)


def _levers_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--run",
        required=True,
        type=Path,
        action="append",
        help="a trained fit / clinc150 run (repeat: one per stage-base recipe; routing and expert levers use the first)",
    )
    p.add_argument(
        "--replicate",
        type=Path,
        action="append",
        default=[],
        help="the first run's recipe at another seed (repeat): every lever is measured on it too, with paired tests",
    )


@sub_command(STUDIES, "levers", _levers_options)
def levers(args) -> None:
    from redkit_experiments.study import run_levers_study
    from redkit_experiments.study.levers import LeverConfig

    run_levers_study(args.run, LeverConfig(), replicates=args.replicate)


def _lifecycle_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path, help="a finished fit run (e.g. redkit reproduce clinc150)")
    p.add_argument(
        "--domain", action="append", default=None, help="a domain to remove and add back (default: every one)"
    )
    p.add_argument("--split", default="test")
    p.add_argument(
        "--joint-retrains", type=int, default=1, help="9-domain joint retrains, for the first N domains (default 1)"
    )
    p.add_argument(
        "--joint-all-retrains",
        type=int,
        default=1,
        help="joint retrained on all domains, for the first N adds: what an add's seconds are compared with (default 1)",
    )
    p.add_argument(
        "--fresh-parents",
        type=int,
        default=0,
        help="for the first N domains, also fit RED on the others from scratch (own stage base) and add the domain to it",
    )


@sub_command(STUDIES, "lifecycle", _lifecycle_options)
def lifecycle(args) -> None:
    from redkit_experiments.study.lifecycle import LifecycleStudyConfig, run_lifecycle_study

    run_lifecycle_study(
        args.run,
        LifecycleStudyConfig(
            domains=tuple(args.domain or ()),
            split=args.split,
            joint_retrains=args.joint_retrains,
            joint_all_retrains=args.joint_all_retrains,
            fresh_parents=args.fresh_parents,
        ),
    )


def _tuning_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, default=None, help="a fit data directory (default: CLINC150 at data/clinc150)")
    p.add_argument(
        "--data-format", choices=("files", "clinc150"), default=None, help="default: clinc150 without --data"
    )
    p.add_argument("--layers", nargs="+", default=["all"], help="trainable layers to try: N or all (default all)")
    p.add_argument("--lr", dest="lrs", nargs="+", type=float, default=[5e-5, 1e-4, 2e-4], help="learning rates to try")
    p.add_argument("--max-epochs", type=int, default=None, help="default: the recipe's, settled from the data")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs/tuning"))


@sub_command(STUDIES, "tuning", _tuning_options)
def tuning(args) -> None:
    from redkit.data.clinc150 import DEFAULT_DIR as DEFAULT_DATA
    from redkit_experiments.study import run_tuning_study
    from redkit_experiments.study.tuning import TuningConfig

    data_format = args.data_format or ("files" if args.data else "clinc150")
    config = TuningConfig(
        data_dir=str((args.data or DEFAULT_DATA).resolve()),
        data_format=data_format,
        layers=tuple(args.layers),
        lrs=tuple(args.lrs),
        max_epochs=args.max_epochs,
        seed=args.seed,
    )
    run_tuning_study(args.out, config)


def _incremental_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data",
        type=Path,
        default=None,
        help="CLINC150 (data_full.json) or a fit data directory (default data/clinc150)",
    )
    p.add_argument(
        "--protocol",
        choices=("domains", "classes"),
        default="domains",
        help="a step per domain, or per group of classes",
    )
    p.add_argument("--order", type=int, default=0, help="the steps' order, shuffled with this seed (default 0)")
    p.add_argument("--classes-per-task", type=int, default=10, help="classes protocol: classes per step (default 10)")
    p.add_argument("--method", action="append", default=None, help="a method to run (repeatable; default every one)")
    p.add_argument(
        "--epochs-per-step",
        type=int,
        default=None,
        help="every fine-tuning strategy's epochs per step (default: the tuned ones, hyperparameters.py)",
    )
    p.add_argument(
        "--joint-steps", default="last", help="when joint is retrained: last (default), all, or steps such as 1,5,10"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--out", type=Path, required=True, help="the study's directory (results.json, report.md, cache)")


@sub_command(STUDIES, "incremental", _incremental_options)
def incremental(args) -> None:
    from redkit.data.clinc150 import DEFAULT_DIR as DEFAULT_DATA
    from redkit_experiments.incremental.study import IncrementalConfig, run_incremental_study

    config = IncrementalConfig(
        data_dir=str((args.data or DEFAULT_DATA).resolve()),
        protocol=args.protocol,
        order=args.order,
        classes_per_task=args.classes_per_task,
        methods=tuple(args.method or ()),
        seed=args.seed,
        epochs_per_step=args.epochs_per_step,
        joint_steps=args.joint_steps,
        device=args.device,
    )
    run_incremental_study(config, args.out)


def _incremental_tune_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, default=None, help="CLINC150 (default data/clinc150) or any study data")
    p.add_argument("--protocol", choices=("domains", "classes"), default="domains")
    p.add_argument("--order", type=int, default=3, help="the tuning stream's order: one no result reports (default 3)")
    p.add_argument("--steps", type=int, default=3, help="its first N steps (default 3)")
    p.add_argument("--classes-per-task", type=int, default=10)
    p.add_argument("--method", action="append", default=None, help="a strategy to tune (repeatable; default all)")
    p.add_argument("--lr", action="append", type=float, default=None, help="the rates to try (default 1e-4 2e-4 5e-4)")
    p.add_argument("--epochs", type=int, default=None, help="the most epochs per step (default 10, early-stopped)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--save", action="store_true", help="also write redkit_experiments/incremental/tuned.json")
    p.add_argument("--out", type=Path, required=True, help="the search's directory (tuned.json, cache)")


@sub_command(STUDIES, "incremental-tune", _incremental_tune_options)
def incremental_tune(args) -> None:
    from redkit.data.clinc150 import DEFAULT_DIR as DEFAULT_DATA
    from redkit_experiments.incremental.tuning import (
        EPOCHS,
        LRS,
        STRATEGIES,
        IncrementalTuningConfig,
        run_incremental_tuning,
    )

    config = IncrementalTuningConfig(
        data_dir=str((args.data or DEFAULT_DATA).resolve()),
        protocol=args.protocol,
        order=args.order,
        steps=args.steps,
        classes_per_task=args.classes_per_task,
        strategies=tuple(args.method or STRATEGIES),
        lrs=tuple(args.lr or LRS),
        epochs=args.epochs or EPOCHS,
        seed=args.seed,
        device=args.device,
    )
    run_incremental_tuning(config, args.out, save=args.save)

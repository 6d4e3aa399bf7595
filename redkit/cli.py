"""`redkit` command line. Errors a user can cause print one line and exit with code 2.

    redkit data task1 --out DIR [--n 80000] [--seed S] [--split structure|random]
    redkit reproduce task1|task2 [--split ...] [--backbone PATH] [--out runs/task1] [--eval FILE ...]
    redkit reproduce digits [--run red|moe|all] [--data_dir MNIST_DIR] [--save_dir runs/digits] [...]
    redkit reproduce toy [--out runs/toy] [--seed S]
    redkit reproduce steps [--out runs/steps] [--decomposer DIR] [--op-split random|structure] [--eval FILE ...] [...]
    redkit reproduce decomposer [--out runs/decomposer] [--task decomposer_times] [--tune-top] [...]
    redkit reproduce peers --task task1|task2 [--out RUN] [--lora-rank 8] [--examples-per-expert 4000] [...]
    redkit train STAGE --run DIR [--domain R3] [--kind residual]     (one stage, e.g. one expert)
    redkit add-expert --run runs/steps --operation mul [--out DIR] [--decomposer DIR]
    redkit eval --run DIR --data FILE.jsonl [--composition NAME]
    redkit predict --run DIR "What is 12 plus 27?"
    redkit study noise --run DIR [--composition red ...] [--model logit ...] [--level 0.5 ...] [--draws 20]
    redkit study ablation --run DIR [--part rank ...] [--experts K ...] [--with-base]
    redkit study seeds --task task1 [--seeds 5] [--out runs/seeds-task1]
    redkit study complexity --run DIR [--repeats 50]
    redkit analyze routing --run DIR [--router NAME ...] [--part metrics ...] [--seeds 3] [--experts K ...]
    redkit report --run DIR                                          (report.html: the run and its studies)
"""

import argparse
import os
import sys
from pathlib import Path

from redkit.errors import RedkitError
from redkit.registry import Registry

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split", choices=("structure", "random"), default="structure")
    p.add_argument("--n", type=int, default=None, help="examples in train+val+test (default: the task's, 80000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backbone", default=None, help="a Hugging Face model directory (default: embedded all-MiniLM-L6-v2)")
    p.add_argument("--pooling", choices=("mean", "last", "cls"), default="mean")
    p.add_argument("--trainable-layers", type=int, default=2)
    p.add_argument("--rank", type=int, default=0, help="residual expert rank (default d/4)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--max-epochs", type=int, default=None, help="cap every stage's epochs (quick runs)")
    _nproc_option(p)


def _nproc_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc", type=int, default=1, help="processes for stage base (data parallel: gloo on CPU, "
                                                       "NCCL on GPU); the other stages run in one")


def _router_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--router", default="dense", help="router and gate kind, from the zoo: dense (default), switch, top2, "
                                                    "expert_choice, loss_free, spectra, prototype, arrow")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="redkit", description="Residual Expert Decomposition and its baselines")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("data", help="write a task's train/val/test JSONL files")
    p.add_argument("task")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", choices=("structure", "random"), default="structure")

    p = sub.add_parser("reproduce", help="run a benchmark end to end and print its tables",
                       description="Run a benchmark end to end. `redkit reproduce BENCHMARK --help` lists its flags.")
    p.add_argument("benchmark", help=" | ".join(BENCHMARKS))
    p.add_argument("options", nargs=argparse.REMAINDER, help="the benchmark's own flags")

    p = sub.add_parser("train", help="run one stage of an existing run (e.g. one expert, in its own process)")
    p.add_argument("stage", help="base | experts | heads | router | gate")
    p.add_argument("--run", required=True, type=Path)
    p.add_argument("--domain", action="append", default=None, help="range (R1..R5) for experts/heads; repeatable")
    p.add_argument("--kind", action="append", default=None, help="expert kind for stage experts: residual, logit")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="stage experts: train in fp32 or under bf16 autocast (recorded in each module's metrics)")
    _nproc_option(p)

    p = sub.add_parser("add-expert", help="plug a new operation expert into a trained steps run (nothing else retrained)")
    p.add_argument("--run", required=True, type=Path, help="the trained steps run (only read)")
    p.add_argument("--operation", default="mul", help="the new expert's operation (default mul)")
    p.add_argument("--out", type=Path, default=None, help="the new run (default <run>-<operation>)")
    p.add_argument("--decomposer", type=Path, default=None,
                   help="a decomposer trained on decomposer_times data to reuse (default: trained in <out>/decomposer)")
    p.add_argument("--router", default=None, help="the new run's router kind (default the parent's); a training-free "
                                                  "one (prototype, arrow) plugs the expert in with no router training")

    p = sub.add_parser("eval", help="evaluate a trained run on any JSONL file (a steps run decomposes and executes it)")
    p.add_argument("--run", required=True, type=Path)
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--composition", action="append", default=None)

    p = sub.add_parser("predict", help="answer one question, with the router's weight for every expert "
                                          "(a steps run prints the program and every step)")
    p.add_argument("--run", required=True, type=Path)
    p.add_argument("question")
    p.add_argument("--composition", default="red")

    p = sub.add_parser("report", help="rebuild <run>/report.html: the run's tables and every study, figures inlined")
    p.add_argument("--run", required=True, type=Path)

    p = sub.add_parser("analyze", help="analyse a trained run (results under <run>/analysis/)",
                       description="`redkit analyze ANALYSIS --help` lists an analysis's flags.")
    p.add_argument("analysis", help=" | ".join(ANALYSES))
    p.add_argument("options", nargs=argparse.REMAINDER, help="the analysis's own flags")

    p = sub.add_parser("study", help="test a claim of the paper on a trained run (results under <run>/studies/)",
                       description="`redkit study STUDY --help` lists a study's flags.")
    p.add_argument("study", help=" | ".join(STUDIES))
    p.add_argument("options", nargs=argparse.REMAINDER, help="the study's own flags")
    return parser


def _run_config(args: argparse.Namespace, task: str, data_task: str | None = None, config_class=None):
    """A text run's config from the flags; `data_task` names the generator when it differs from the
    benchmark (steps: per-operation data)."""
    from redkit.backbone import BackboneConfig
    from redkit.modules.layers import ROUTERS
    from redkit.data.generate import DataConfig
    from redkit.data.tasks import TASKS
    from redkit.run import RunConfig

    data_task = data_task or task
    n = args.n if args.n is not None else TASKS[data_task].default_n
    config = (config_class or RunConfig)(task=task, seed=args.seed, data=DataConfig(task=data_task, n=n, seed=args.seed, split=args.split),
                       backbone=BackboneConfig(path=str(Path(args.backbone).resolve()) if args.backbone else None,
                                               pooling=args.pooling, trainable_layers=args.trainable_layers,
                                               precision=args.precision),
                       expert_rank=args.rank, device=args.device, router=args.router)
    ROUTERS[config.router]  # an unknown router fails (did you mean) before anything is written
    if args.max_epochs is not None:
        for stage in ("base", "experts", "heads", "router", "gate"):
            config.stage_overrides.setdefault(stage, {})["max_epochs"] = args.max_epochs
    return config


def cmd_data(args) -> None:
    from redkit.data.generate import DataConfig, generate, write_dataset
    from redkit.data.tasks import TASKS

    n = args.n if args.n is not None else TASKS[args.task].default_n
    config = DataConfig(task=args.task, n=n, seed=args.seed, split=args.split)
    summary = write_dataset(args.out, generate(config), config)
    for split, info in summary["splits"].items():
        print(f"{split:24s} {info['count']:6d} examples, {info['distinct_structures']:6d} structures, per range {list(info['per_domain'].values())}")
    print(f"wrote {args.out}")


# ---- reproduce: one entry per benchmark, each with its own flags ------------------------------------

def _eval_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--eval", dest="eval_files", action="append", type=Path, default=[],
                   help="also evaluate on this JSONL file (repeatable; never trained on)")


def _text_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=None, help="run directory (default runs/<task>[-random])")
    p.add_argument("--experts", type=int, default=None,
                   help="K experts, each a contiguous equal-width part of the answers (default: one per range R1..R5)")
    _eval_option(p)
    _add_run_options(p)
    _router_option(p)


def _text_benchmark(task: str) -> tuple:
    """Task 1 and Task 2 share one pipeline: data -> base -> experts -> heads -> router -> gate."""
    def run(args) -> None:
        from redkit.backbone.locate import check_model_dir
        from redkit.pipeline import reproduce

        out = args.out or Path("runs") / (task + ("" if args.split == "structure" else f"-{args.split}"))
        config = _run_config(args, task)
        if args.experts is not None:
            from redkit.space import ANSWER_RANGES

            ANSWER_RANGES.in_equal_parts(args.experts)  # a bad K fails before anything is written
            config.experts = args.experts
        if config.backbone.path:  # refuse a bad path before anything is written
            check_model_dir(Path(config.backbone.path))
        reproduce(out, config, tuple(args.eval_files), nproc=args.nproc)

    return _text_options, run


def _flag(p: argparse.ArgumentParser, name: str, **kwargs) -> None:
    """`--name_with_underscores` as the original code spells it, and `--name-with-dashes` as redkit does."""
    dashed = name.replace("_", "-")
    p.add_argument(f"--{name}", *([f"--{dashed}"] if dashed != name else []), **kwargs)


def _digits_options(p: argparse.ArgumentParser) -> None:
    from redkit.digits import RUN_MODES
    from redkit.digits.config import STAGE_NAMES

    _flag(p, "run", choices=tuple(RUN_MODES), default="all",
          help="red: base, experts, router; moe: base, heads, gate; all: every stage and composition")
    _flag(p, "data_dir", type=Path, default=None, help="the four MNIST IDX files, raw or .gz (default: scikit-learn's 8x8 digits)")
    _flag(p, "save_dir", type=Path, default=Path("runs/digits"))
    _flag(p, "device", default="cpu", help="cpu, cuda, cuda:1, ...")
    _flag(p, "seed", type=int, default=0)
    _flag(p, "val_ratio", type=float, default=0.1, help="of the training images, for early stopping")
    _flag(p, "base_ratio", type=float, default=0.1, help="of the training split, for stage base")
    _flag(p, "hidden", type=int, default=128, help="the MLP backbone's width d")
    _flag(p, "rank", type=int, default=0, help="residual expert rank (default d/4)")
    _flag(p, "batch_size", type=int, default=None, help="micro-batch of every stage (default: per stage)")
    _flag(p, "virtual_batch_size", type=int, default=None, help="gradient-accumulation batch of every stage")
    _flag(p, "patience", type=int, default=None, help="epochs without a better val loss before stopping (default 10)")
    _flag(p, "max_epochs", type=int, default=None, help="cap every stage's epochs")
    for stage in STAGE_NAMES:
        _flag(p, f"max_epochs_{stage}", type=int, default=None, help=f"cap stage {stage}'s epochs")


def _digits_config(args):
    from redkit.digits import DigitsConfig
    from redkit.digits.backbone import MLPBackboneConfig
    from redkit.digits.config import STAGE_NAMES

    config = DigitsConfig(seed=args.seed, device=args.device, expert_rank=args.rank,
                          data_dir=str(args.data_dir.resolve()) if args.data_dir else None,
                          val_ratio=args.val_ratio, base_ratio=args.base_ratio, backbone=MLPBackboneConfig(hidden=args.hidden))
    for flag in ("batch_size", "virtual_batch_size", "max_epochs"):
        if getattr(args, flag) is not None:
            config.set_for_stages(**{flag: getattr(args, flag)})
    for stage in STAGE_NAMES:
        if getattr(args, f"max_epochs_{stage}") is not None:
            config.set_for_stages((stage,), max_epochs=getattr(args, f"max_epochs_{stage}"))
    if args.patience is not None:
        config.train.patience = args.patience
    return config


def cmd_reproduce_digits(args) -> None:
    from redkit.digits import reproduce_digits

    config = _digits_config(args)
    if args.data_dir is not None and not args.data_dir.is_dir():  # refuse a bad path before anything is written
        raise RedkitError(f"MNIST directory not found: {args.data_dir}")
    reproduce_digits(args.save_dir, config, args.run)


def _toy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("runs/toy"), help="where toy_results.json, toy_report.md and the figure go")
    p.add_argument("--seed", type=int, default=0)


def cmd_reproduce_toy(args) -> None:
    from redkit.toy import ToyConfig, format_tables, reproduce_toy

    print(format_tables(reproduce_toy(args.out, ToyConfig(seed=args.seed))))


def _steps_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("runs/steps"))
    p.add_argument("--programs", type=int, default=80_000,
                   help="size of the decomposer dataset and of Task 2's, whose test programs and questions are executed")
    p.add_argument("--op-split", choices=("random", "structure"), default="random",
                   help="split of the operation data (--split is the programs')")
    p.add_argument("--decomposer", type=Path, default=None,
                   help="train (or reuse, when trained on the same data) the decomposer here (default <out>/decomposer)")
    _eval_option(p)  # its questions are answered by decomposition
    _add_run_options(p)
    _router_option(p)


def cmd_reproduce_steps(args) -> None:
    from redkit.steps import StepsConfig
    from redkit.steps.benchmark import reproduce_steps

    config = _run_config(args, "steps", data_task="op_add", config_class=StepsConfig)
    config.data.split = args.op_split
    config.decomposer = _decomposer_config(args, n=args.programs)
    config.decomposer_dir = str(args.decomposer.resolve()) if args.decomposer else None
    reproduce_steps(args.out, config, tuple(args.eval_files), nproc=args.nproc)


def _decomposer_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("runs/decomposer"))
    p.add_argument("--task", choices=("decomposer", "decomposer_times"), default="decomposer",
                   help="decomposer_times: programs with * steps too")
    p.add_argument("--tune-top", action="store_true", help="fine-tune the backbone's top layers with the head")
    _add_run_options(p)


def _decomposer_config(args, n: int | None = None, task: str = "decomposer", tune_top: bool = False):
    from redkit.backbone import BackboneConfig
    from redkit.decomposer import DecomposerConfig

    config = DecomposerConfig(task=task, n=n or 80_000, seed=args.seed, split=args.split, tune_top=tune_top, device=args.device,
                              backbone=BackboneConfig(path=str(Path(args.backbone).resolve()) if args.backbone else None,
                                                      trainable_layers=args.trainable_layers, precision=args.precision))
    if args.max_epochs is not None:
        config.train.max_epochs = args.max_epochs
    return config


def cmd_reproduce_decomposer(args) -> None:
    from redkit.decomposer import reproduce_decomposer

    reproduce_decomposer(args.out, _decomposer_config(args, n=args.n, task=args.task, tune_top=args.tune_top))


def _peers_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", choices=("task1", "task2"), default="task1")
    p.add_argument("--out", type=Path, default=None,
                   help="the run to build on (default runs/<task>[-random]); made first if it has no results.json")
    p.add_argument("--lora-rank", type=int, default=8, help="rank r of each LoRA expert (default 8)")
    p.add_argument("--lora-alpha", type=int, default=16, help="LoRA alpha (default 16: updates scaled by 2)")
    p.add_argument("--lora-targets", default="", help="comma-separated name suffixes of the top layers' Linear "
                                                      "modules to adapt, e.g. query,value (default: all)")
    p.add_argument("--examples-per-expert", type=int, default=4000, help="training examples per LoRA expert (0 = all; default 4000)")
    p.add_argument("--val-per-expert", type=int, default=500, help="validation examples per LoRA expert (0 = all; default 500)")
    p.add_argument("--lora-epochs", type=int, default=8, help="epoch cap of each LoRA expert (default 8, patience 2)")
    p.add_argument("--arrow-top-k", type=int, default=3, help="experts per token in Arrow (peft's default 3)")
    p.add_argument("--eval-split", default="test", help="the split every composition is scored on (default test)")
    p.add_argument("--no-xlora", action="store_true", help="skip X-LoRA (loading it, training its classifier, its row)")
    p.add_argument("--xlora-examples", type=int, default=1000,
                   help="training examples of X-LoRA's classifier, balanced over the domains (default 1000)")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads (default 1: on a shared 2-core machine far faster than 2; 0 = torch's default)")
    _add_run_options(p)  # used only when the run has to be made
    _router_option(p)


def cmd_reproduce_peers(args) -> None:
    from redkit.peers import require_peft

    require_peft()  # before anything is trained
    from redkit.peers.arrow import ArrowSettings
    from redkit.peers.benchmark import PeersConfig, finished_run, reproduce_peers
    from redkit.peers.lora import LoraExpertConfig

    lora = LoraExpertConfig(rank=args.lora_rank, alpha=args.lora_alpha, examples=args.examples_per_expert,
                            val_examples=args.val_per_expert,
                            targets=tuple(t.strip() for t in args.lora_targets.split(",") if t.strip()))
    lora.train.max_epochs = args.lora_epochs
    config = PeersConfig(lora=lora, arrow=ArrowSettings(top_k=args.arrow_top_k), split=args.eval_split, xlora=not args.no_xlora,
                         threads=args.threads)
    config.xlora_settings.examples = args.xlora_examples
    config.xlora_settings.train.max_epochs = min(config.xlora_settings.train.max_epochs, args.lora_epochs)
    out = args.out or Path("runs") / (args.task + ("" if args.split == "structure" else f"-{args.split}"))
    reproduce_peers(finished_run(out, args.task, lambda: _run_config(args, args.task)), config)


BENCHMARKS: Registry[tuple] = Registry("benchmark")  # name -> (add its flags to a parser, run it)
BENCHMARKS.register("task1")(_text_benchmark("task1"))
BENCHMARKS.register("task2")(_text_benchmark("task2"))
BENCHMARKS.register("steps")((_steps_options, cmd_reproduce_steps))
BENCHMARKS.register("decomposer")((_decomposer_options, cmd_reproduce_decomposer))
BENCHMARKS.register("digits")((_digits_options, cmd_reproduce_digits))
BENCHMARKS.register("toy")((_toy_options, cmd_reproduce_toy))
BENCHMARKS.register("peers")((_peers_options, cmd_reproduce_peers))


def _run_sub_command(registry: Registry, name: str, options: list[str], prog: str) -> None:
    add_options, run = registry[name]
    parser = argparse.ArgumentParser(prog=prog)
    add_options(parser)
    run(parser.parse_args(options))


def cmd_reproduce(args) -> None:
    _run_sub_command(BENCHMARKS, args.benchmark, args.options, f"redkit reproduce {args.benchmark}")


def _noise_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path, help="a trained run (task1, task2, steps or digits)")
    p.add_argument("--composition", action="append", default=None, help="a routed composition (default: every one the run has)")
    p.add_argument("--model", action="append", default=None, help="logit | misroute | neighbour | flatten (default: all)")
    p.add_argument("--level", action="append", type=float, default=None, help="levels of the one --model (default: its grid)")
    p.add_argument("--draws", type=int, default=20, help="noise draws per level (default 20)")
    p.add_argument("--split", default="test")
    p.add_argument("--seed", type=int, default=0)


def cmd_study_noise(args) -> None:
    from redkit.study import run_noise_study
    from redkit.study.noise import NoiseStudyConfig
    from redkit.study.noise_models import NOISE_MODELS

    config = NoiseStudyConfig(compositions=tuple(args.composition or ()), models=tuple(args.model or NOISE_MODELS),
                              levels=tuple(args.level or ()), draws=args.draws, split=args.split, seed=args.seed)
    run_noise_study(args.run, config)


def _complexity_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path, help="a trained run (task1, task2, steps or digits)")
    p.add_argument("--repeats", type=int, default=50, help="timed calls per component and batch size (default 50)")


def cmd_study_complexity(args) -> None:
    from redkit.study import run_complexity_study
    from redkit.study.complexity import ComplexityConfig

    run_complexity_study(args.run, ComplexityConfig(repeats=args.repeats))


def _ablation_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=Path, help="a trained run (task1, task2, steps or digits)")
    p.add_argument("--part", action="append", default=None, help="rank | correction | experts (default: all three)")
    p.add_argument("--experts", type=int, action="append", default=None, help="values of K (default 2 5 10 20)")
    p.add_argument("--with-base", action="store_true", help="also retrain stage base on 5%%, 10%%, 25%%, 100%% of train")


def cmd_study_ablation(args) -> None:
    from redkit.study import run_ablation_study
    from redkit.study.ablation import AblationConfig

    parts = tuple(args.part or AblationConfig.parts) + (("base",) if args.with_base else ())
    config = AblationConfig(parts=parts, **({"experts": tuple(args.experts)} if args.experts else {}))
    run_ablation_study(args.run, config)


def _seeds_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", default="task1", help="task1 | task2 | digits")
    p.add_argument("--seeds", type=int, default=5, help="replicates, seeds 0..N-1 (default 5)")
    p.add_argument("--out", type=Path, default=None, help="default runs/seeds-<task>")
    p.add_argument("--n", type=int, default=None, help="examples of a text task (default: the task's)")
    p.add_argument("--max-epochs", type=int, default=None, help="cap every stage's epochs (quick runs)")


def cmd_study_seeds(args) -> None:
    from redkit.study import run_seeds_study
    from redkit.study.seeds import SeedsConfig

    config = SeedsConfig(task=args.task, seeds=args.seeds, n=args.n, max_epochs=args.max_epochs)
    run_seeds_study(args.out or Path("runs") / f"seeds-{args.task}", config)


STUDIES: Registry[tuple] = Registry("study")  # name -> (add its flags to a parser, run it)
STUDIES.register("noise")((_noise_options, cmd_study_noise))
STUDIES.register("ablation")((_ablation_options, cmd_study_ablation))
STUDIES.register("seeds")((_seeds_options, cmd_study_seeds))
STUDIES.register("complexity")((_complexity_options, cmd_study_complexity))


def _routing_options(p: argparse.ArgumentParser) -> None:
    from redkit.routing.analyze import PARTS, RoutingAnalysisConfig

    p.add_argument("--run", required=True, type=Path, help="a trained run with a router (task1, task2, steps or digits)")
    p.add_argument("--router", action="append", default=None, help="a router of the zoo (repeatable; default: all)")
    p.add_argument("--part", action="append", default=None, help=f"{' | '.join(PARTS)} (default: all)")
    p.add_argument("--seeds", type=int, default=RoutingAnalysisConfig.seeds, help="seeds of the router stage for stability (default 3)")
    p.add_argument("--experts", type=int, action="append", default=None, help="values of K for the scaling (default 4 8 16 32)")
    p.add_argument("--split", default="test")
    p.add_argument("--max-epochs", type=int, default=RoutingAnalysisConfig.max_epochs,
                   help="cap the epochs of every stage the analysis trains (default 5; 0: the stages' own caps)")
    p.add_argument("--train-examples", type=int, default=RoutingAnalysisConfig.train_examples,
                   help="train every router, gate and scaling expert on this fixed random subset of train (default 8000; 0: all)")
    p.add_argument("--monitor-every", type=int, default=RoutingAnalysisConfig.monitor_every,
                   help="optimizer steps between logged routing metrics while a router trains (default 50)")
    p.add_argument("--repeats", type=int, default=RoutingAnalysisConfig.repeats, help="timed calls per overhead component")


def cmd_analyze_routing(args) -> None:
    from redkit.routing.analyze import PARTS, RoutingAnalysisConfig, run_routing_analysis

    config = RoutingAnalysisConfig(routers=tuple(args.router or ()), parts=tuple(args.part or PARTS), seeds=args.seeds,
                                   experts=tuple(args.experts or RoutingAnalysisConfig.experts), split=args.split,
                                   max_epochs=args.max_epochs, train_examples=args.train_examples,
                                   monitor_every=args.monitor_every, repeats=args.repeats)
    run_routing_analysis(args.run, config)


ANALYSES: Registry[tuple] = Registry("analysis")  # name -> (add its flags to a parser, run it)
ANALYSES.register("routing")((_routing_options, cmd_analyze_routing))


def cmd_analyze(args) -> None:
    _run_sub_command(ANALYSES, args.analysis, args.options, f"redkit analyze {args.analysis}")


def cmd_report(args) -> None:
    from redkit.study.html import write_html_report

    if not (args.run / "report.md").is_file() and not (args.run / "studies").is_dir() and not (args.run / "analysis").is_dir():
        raise RedkitError(f"{args.run}: no report.md and no studies/ to build a report from")
    print(write_html_report(args.run))


def cmd_study(args) -> None:
    _run_sub_command(STUDIES, args.study, args.options, f"redkit study {args.study}")


def _domains(names: list[str] | None) -> list[int] | None:
    from redkit.data.vocabulary import parse_domain

    return None if names is None else [parse_domain(name) for name in names]


def cmd_train(args) -> None:
    from redkit.run import Run
    from redkit.train.stages import EXPERT_KINDS, STAGES

    run = Run(args.run)
    stage = STAGES[args.stage]
    if args.stage == "base":
        from redkit.train.distributed import check_run_nproc

        check_run_nproc(run.dir, run.config, args.nproc)  # before anything is written
    elif args.nproc != 1:
        raise RedkitError(f"--nproc {args.nproc}: only stage base runs in several processes, not stage {args.stage}")
    run.prepare_data()
    if args.stage == "experts":
        kinds = tuple(args.kind or EXPERT_KINDS)
        for kind in kinds:
            if kind not in EXPERT_KINDS:
                raise RedkitError(f"unknown expert kind {kind!r} (expected one of {', '.join(EXPERT_KINDS)})")
        print(stage(run, domains=_domains(args.domain), kinds=kinds, precision=args.precision))
    elif args.stage == "heads":
        print(stage(run, domains=_domains(args.domain)))
    elif args.stage == "base" and args.nproc != 1:
        from redkit.train.distributed import launch_base

        print(launch_base(run, args.nproc))
    else:
        print(stage(run))


def cmd_add_expert(args) -> None:
    from redkit.steps.plugin import plug_in

    plug_in(args.run, args.out or args.run.with_name(f"{args.run.name}-{args.operation}"), args.operation, args.decomposer,
            router=args.router)


def _open_text_run(path: Path):
    """A run that answers questions (text or steps): eval and predict take text."""
    from redkit.digits.run import DigitsRun
    from redkit.open_run import open_run

    run = open_run(path)
    if isinstance(run, DigitsRun):
        raise RedkitError(f"{path} is a digits run: its images are evaluated by `redkit reproduce digits`, not from text")
    return run


def _compositions(names: list[str] | None, default: list[str]) -> list[str]:
    from redkit.compositions import COMPOSITIONS

    names = names or default
    for name in names:
        COMPOSITIONS[name]  # unknown names fail before any work
    return names


def cmd_eval(args) -> None:
    from redkit.compositions import COMPOSITIONS, ModuleSet
    from redkit.data.records import read_jsonl
    from redkit.pipeline import evaluate_file
    from redkit.steps import StepsRun

    run = _open_text_run(args.run)
    if isinstance(run, StepsRun):
        from redkit.steps.questions import evaluate_questions

        from redkit.steps.benchmark import MODES

        # Any integer answer: a question answered by decomposition is not bound to 2..100.
        result = evaluate_questions(run, read_jsonl(args.data, answers=None), _compositions(args.composition, list(MODES.values())))
        match = result["program_exact_match"]
        print(f"{args.data}: {result['n']} questions, decomposed and executed; program exact-match "
              + (f"{match:.4f} (the {result['with_program']} records with a program)" if match is not None
                 else "n/a (no record has a program)"))
        groups = list(next(iter(result["compositions"].values())))
        print(f"{'composition':14s} " + " ".join(f"{g + ' acc':>11s}" for g in groups))
        for name, m in result["compositions"].items():
            print(f"{name:14s} " + " ".join(f"{m[g]['accuracy']:11.4f}" for g in groups))
        print("n: " + ", ".join(f"{g} {m['n']}" for g, m in next(iter(result["compositions"].values())).items()))
        return
    names = _compositions(args.composition, COMPOSITIONS.names())
    results = evaluate_file(run, ModuleSet(run), args.data, names)
    print(f"{args.data}: {next(iter(results.values()))['n']} examples")
    print(f"{'composition':14s} {'accuracy':>9s} {'range acc':>9s} {'macro-F1':>9s}")
    for name, m in results.items():
        print(f"{name:14s} {m['accuracy']:9.4f} {m['range_accuracy']:9.4f} {m['macro_f1']:9.4f}")


def cmd_predict(args) -> None:
    import torch

    from redkit.compositions import COMPOSITIONS, ModuleSet, compose
    from redkit.data.vocabulary import SHORT_NAMES, domain_of
    from redkit.features import encode
    from redkit.steps import StepsRun

    COMPOSITIONS[args.composition]  # an unknown name fails before any work
    run = _open_text_run(args.run)
    if isinstance(run, StepsRun):
        from redkit.programs import render_program
        from redkit.steps.questions import explain

        program, trace = explain(run, args.question, args.composition)
        print("program:\n  " + render_program(program).replace("\n", "\n  "))
        for k, step in enumerate(trace, start=1):
            weights = ("  ".join(f"{name} {w:.3f}" for name, w in zip(run.space.domains, step.weights))
                       if step.weights is not None else "none")
            print(f"step {k}: {step.question!r}  expert weights: {weights}  -> x{k} = {step.value}")
        print(f"answer: {trace[int(program.answer_var[1:]) - 1].value}  (composition {args.composition})")
        return
    modules = ModuleSet(run)
    h = encode(run.backbone, [args.question]).to(run.device)
    with torch.no_grad():
        alpha_router = torch.softmax(modules.router()(h), dim=-1)[0]
    composed = compose(args.composition, modules, h, alpha_router.argmax().unsqueeze(0))
    answer = run.space.value_of(int(composed.probs[0].argmax()))
    print(f"answer: {answer}  (range {SHORT_NAMES[domain_of(answer)]}, p = {composed.probs[0].max():.3f}, composition {args.composition})")
    weights = composed.weights[0] if composed.weights is not None else alpha_router
    print("expert weights: " + "  ".join(f"{name} {w:.3f}" for name, w in zip(run.space.domains, weights.tolist())))


COMMANDS = {"data": cmd_data, "reproduce": cmd_reproduce, "train": cmd_train, "add-expert": cmd_add_expert,
            "eval": cmd_eval, "predict": cmd_predict, "study": cmd_study, "analyze": cmd_analyze,
            "report": cmd_report}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except RedkitError as err:
        print(f"redkit: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("redkit: interrupted; rerun the same command to resume from the last checkpoint", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

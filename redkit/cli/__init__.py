"""`redkit` command line: one module per command group, each parsing its flags and calling the
API; this module is the one error boundary (a RedkitError prints one line and exits with code 2).

    redkit data task1 --out DIR [--n 80000] [--seed S] [--split structure|random]
    redkit reproduce task1|task2 [--split ...] [--backbone PATH] [--out runs/task1] [--eval FILE ...]
    redkit reproduce digits [--run red|moe|all] [--data_dir MNIST_DIR] [--out runs/digits] [...]
    redkit reproduce toy [--out runs/toy] [--seed S]
    redkit reproduce steps [--out runs/steps] [--decomposer DIR] [--op-split random|structure] [--eval FILE ...] [...]
    redkit reproduce decomposer [--out runs/decomposer] [--task decomposer_times] [--tune-top] [...]
    redkit reproduce peers --task task1|task2 [--out RUN] [--lora-rank 8] [--examples-per-expert 4000] [...]
    redkit fit --data DIR --out RUN [--text-field text] [--label-field label] [--domain-field domain] [...]
    redkit train STAGE --run DIR [--domain R3] [--kind residual] [--retrain]   (one stage, e.g. one expert)
    redkit add-expert --run runs/steps --operation mul [--out DIR] [--decomposer DIR]
    redkit add-domain --run RUN --data NEWDIR | --expert EXPERT      (a fit run: one more domain, new labels welcome)
    redkit remove-domain --run RUN --domain NAME [--out RUN2]        (a fit run: one domain taken out)
    redkit train-expert --bundle BUNDLE --data NEWDIR --out EXPERT   (a new domain's expert, trained from a bundle)
    redkit eval --run DIR --data FILE.jsonl [--composition NAME]
    redkit predict --run DIR "What is 12 plus 27?"
    redkit export --run DIR --out BUNDLE [--heads]                   (what inference needs + manifest.json)
    redkit serve --bundle BUNDLE | --run RUN [--port 8000] [--workers N]   (HTTP: /v1/predict, /health, /metrics)
    redkit study noise|ablation|seeds|complexity ...
    redkit analyze routing --run DIR [...]
    redkit report --run DIR                                          (report.html: the run and its studies)

Every command (and every sub-command of reproduce, study and analyze) takes `--config FILE.yaml`.
"""

import argparse
import os
import sys

from redkit.errors import RedkitError
from redkit.kernels import reproducible

# The command line is a process of its own, so it makes the process-wide choices a library must not
# make on import: torch's CPU kernels (before torch picks them at its first operation; workers inherit
# them), no downloads, and no transformers chatter.
reproducible()
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # its errors still show
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' "Loading weights" bar on every command

# Registration order is the order `redkit --help` lists the commands in: the library's, then the plug-ins'.
from redkit.cli import (  # noqa: E402,F401
    add,
    evaluate,
    export,
    federate,
    fit,
    lifecycle,
    predict,
    report,
    reproduce,
    reproduce_clinc150,
    serve,
    train,
)
from redkit.cli.command import COMMANDS  # noqa: E402
from redkit.cli.options import add_config_option, apply_config  # noqa: E402
from redkit.plugins import load_commands, load_plugins  # noqa: E402


def build_parser(plugin_commands: bool = True) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and each command's own parser, by name (the plug-ins' commands too, unless
    the command line names one of the library's own: `predict` and `serve` then start without them)."""
    if plugin_commands:
        load_commands()
    parser = argparse.ArgumentParser(prog="redkit", description="Residual Expert Decomposition and its baselines")
    sub = parser.add_subparsers(dest="command", required=True)
    parsers = {}
    for name in COMMANDS.names():
        cmd = COMMANDS[name]
        p = sub.add_parser(name, help=cmd.help, description=cmd.description)
        cmd.options(p)
        if not cmd.group:  # a group's sub-commands take --config themselves
            add_config_option(p)
        parsers[name] = p
    return parser, parsers


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        own = bool(argv) and argv[0] in COMMANDS and not COMMANDS[argv[0]].group  # a group's sub-commands are plug-ins'
        parser, parsers = build_parser(plugin_commands=not own)
        if argv and argv[0] in parsers and not COMMANDS[argv[0]].group:
            apply_config(parsers[argv[0]], argv[1:])
        args = parser.parse_args(argv)
        if COMMANDS[args.command].plugins:
            load_plugins()  # the run kinds, routers, references ... a command may need
        COMMANDS[args.command].run(args)
    except RedkitError as err:
        print(f"redkit: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("redkit: interrupted; rerun the same command to resume from the last checkpoint", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

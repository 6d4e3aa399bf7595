"""The command registry: each module of redkit.cli registers its command (or its group's
sub-commands) with the decorators below; redkit.cli.main parses and dispatches.

    @command("eval", options=_options, help="...")
    def run(args): ...

A *group* (reproduce, study, analyze) takes a name and hands the rest of the command line to
that sub-command's own parser, registered in the group's Registry with `sub_command`.
"""

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from redkit.cli.options import parse_args
from redkit.registry import Registry

Options = Callable[[argparse.ArgumentParser], None]
Action = Callable[[argparse.Namespace], None]


@dataclass(frozen=True)
class Command:
    options: Options  # adds the command's flags to its parser
    run: Action  # parses nothing, calls the API
    help: str
    description: str | None = None
    group: bool = False  # its sub-commands parse their own flags (and their own --config)
    plugins: bool = (
        True  # load the plug-ins before running (predict and serve on a bundle need none: they load them when they do)
    )


COMMANDS: Registry[Command] = Registry("command")


def command(
    name: str, options: Options, help: str, description: str | None = None, group: bool = False, plugins: bool = True
):
    def register(run: Action) -> Action:
        COMMANDS.register(name)(Command(options, run, help, description, group, plugins))
        return run

    return register


def sub_command(registry: Registry, name: str, options: Options):
    """Register `run` as `name` of a group (a benchmark of reproduce, a study, an analysis)."""

    def register(run: Action) -> Action:
        registry.register(name)((options, run))
        return run

    return register


def group(name: str, what: str, help: str, description: str) -> Registry:
    """Register command `name` whose first argument (`what`) names a sub-command with its own flags
    (reproduce BENCHMARK, study STUDY, analyze ANALYSIS); returns the sub-commands' registry."""
    registry: Registry[tuple] = Registry(what)  # name -> (add its flags to a parser, run it)

    def options(p: argparse.ArgumentParser) -> None:
        p.add_argument(what, help=" | ".join(registry))
        p.add_argument("options", nargs=argparse.REMAINDER, help=f"the {what}'s own flags")

    def run(args: argparse.Namespace) -> None:
        chosen = getattr(args, what)
        run_sub_command(registry, chosen, args.options, f"redkit {name} {chosen}")

    COMMANDS.register(name)(Command(options, run, help, description, group=True))
    return registry


def run_sub_command(registry: Registry, name: str, argv: list[str], prog: str) -> None:
    """Parse `argv` with sub-command `name`'s own parser (its --config included) and run it."""
    add_options, run = registry[name]
    parser = argparse.ArgumentParser(prog=prog)
    add_options(parser)
    run(parse_args(parser, argv))

"""Options several commands share, and `--config FILE`: a YAML file of a command's options.

A config's keys are the command's long option names (dashes or underscores), its values become
the parser's defaults, so a flag on the command line overrides the file (a repeatable flag given
on the command line replaces the file's list rather than adding to it). An unknown key is an
error naming the file and the closest option.
"""

import argparse
import difflib
from pathlib import Path

from redkit.errors import RedkitError


def model_options(p: argparse.ArgumentParser) -> None:
    """The backbone, expert and training flags every text run has (a fit run too)."""
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--backbone", default=None, help="a Hugging Face model directory (default: embedded all-MiniLM-L6-v2)"
    )
    p.add_argument("--pooling", choices=("mean", "last", "cls"), default="mean")
    p.add_argument(
        "--trainable-layers",
        type=layers_arg,
        default=2,
        help="backbone layers fine-tuned in stage base: N or all (default 2, the paper's; "
        "redkit fit's default, auto, settles it from the data)",
    )
    p.add_argument("--rank", type=int, default=0, help="residual expert rank (default d/4)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--max-epochs", type=int, default=None, help="cap every stage's epochs (quick runs)")


def layers_arg(value: str) -> int | str:
    """`--trainable-layers`: a number, `all` or `auto` (a fit run settles it from its data)."""
    if value in ("all", "auto"):
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of layers, 'all' or 'auto', got {value!r}") from None


def nproc_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nproc",
        type=int,
        default=1,
        help="processes for stage base (data parallel: gloo on CPU, NCCL on GPU); the other stages run in one",
    )


def router_settings(p: argparse.ArgumentParser, examples: str) -> None:
    """--router-option KEY=VALUE (repeatable): read by parse_router_options."""
    p.add_argument(
        "--router-option",
        dest="router_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"a setting of the router (repeatable): {examples}",
    )


def parse_router_options(pairs: list[str]) -> dict:
    """--router-option's KEY=VALUE pairs -> {key: value}, each value read as YAML (1024 an int, 0.5 a float)."""
    import yaml

    from redkit.errors import RedkitError

    options = {}
    for pair in pairs:
        key, sep, value = str(pair).partition("=")
        if not sep or not key.strip():
            raise RedkitError(f"--router-option {pair!r}: expected KEY=VALUE, e.g. hidden=1024")
        options[key.strip()] = yaml.safe_load(value)
    return options


def router_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--router",
        default="dense",
        help="router and gate kind, from the zoo: dense (default), switch, top2, "
        "expert_choice, loss_free, spectra, prototype, arrow, labels, dense_labels, gaussian (replay-free: built from "
        "each domain's class statistics, so add-domain reads no other domain's data)",
    )
    p.add_argument(
        "--router-loss",
        choices=("domain", "label", "label+domain"),
        default="domain",
        help="what RED's router is trained on, experts and C frozen: the domain label (default, the paper's), "
        "the label loss of the composition, or both",
    )


def eval_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--eval",
        dest="eval_files",
        action="append",
        type=Path,
        default=[],
        help="also evaluate on this JSONL file (repeatable; never trained on)",
    )


def flag(p: argparse.ArgumentParser, name: str, **kwargs) -> None:
    """`--name_with_underscores` as the original code spells it, and `--name-with-dashes` as redkit does."""
    dashed = name.replace("_", "-")
    p.add_argument(f"--{name}", *([f"--{dashed}"] if dashed != name else []), **kwargs)


def backbone_config(args: argparse.Namespace):
    from redkit.backbone import BackboneConfig
    from redkit.backbone.locate import check_model_dir, default_backbone_path, num_layers

    layers = args.trainable_layers
    if layers == "auto":
        raise RedkitError("--trainable-layers auto: only a fit run settles it from its data; give N or all")
    if layers == "all":
        path = Path(args.backbone) if args.backbone else default_backbone_path()
        check_model_dir(path)
        layers = num_layers(path)
    return BackboneConfig(
        path=str(Path(args.backbone).resolve()) if args.backbone else None,
        pooling=args.pooling,
        trainable_layers=layers,
        precision=args.precision,
    )


def staged_settings(config, args: argparse.Namespace):
    """Apply the router and the epoch cap of the flags to a StagedConfig (an unknown router fails,
    with did-you-mean, before anything is written)."""
    from redkit.modules.layers import ROUTERS

    ROUTERS[config.router]
    config.cap_epochs(args.max_epochs)
    return config


# ---- --config FILE ----------------------------------------------------------------------------


class _FromConfig(list):
    """A repeatable option's list from a config file: copied as empty when argparse appends the
    first command-line value to it, so the command line replaces the file's list."""

    def __copy__(self):
        return []


def add_config_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="YAML file of this command's options, keys as the long flags (flags given here override it)",
    )


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`parser.parse_args(argv)`, its defaults first taken from the `--config` file in argv."""
    if not any(a.dest == "config" for a in parser._actions):
        add_config_option(parser)
    apply_config(parser, argv)
    return parser.parse_args(argv)


def apply_config(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Set `parser`'s defaults from the `--config FILE` named in `argv`, if any."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", type=Path, default=None)
    path = pre.parse_known_args(argv)[0].config
    if path is None:
        return
    options = {}
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--") and action.dest not in ("help", "config"):
                options[option[2:].replace("_", "-")] = action
    for key, value in read_config(path).items():
        name = str(key).replace("_", "-")
        if name not in options:
            close = difflib.get_close_matches(name, options, n=1)
            raise RedkitError(
                f"{path}: unknown key {key!r}"
                + (f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(sorted(options))})")
            )
        action = options[name]
        if value is None and action.required:  # an empty value would reach the command as None
            raise RedkitError(f"{path}: key {key!r} is a required option and needs a value, not null")
        parser.set_defaults(**{action.dest: _convert(path, key, action, value)})
        action.required = False  # given by the file


def read_config(path: Path) -> dict:
    import yaml

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RedkitError(f"{path}: config file not found") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise RedkitError(f"{path}: not a YAML file ({' '.join(str(err).split())})") from None
    except RecursionError:  # PyYAML recurses once per nesting level: "[[[[..." a few thousand deep
        raise RedkitError(f"{path}: not a YAML file (nested too deeply)") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RedkitError(f"{path}: a config is a mapping of option names to values, not a {type(raw).__name__}")
    return raw


def _convert(path: Path, key: str, action: argparse.Action, value):
    """The value argparse would have stored had the flag been given on the command line."""
    where = f"{path}: key {key!r}"
    if action.nargs == 0:  # store_true / store_false / store_const
        if not isinstance(value, bool):
            raise RedkitError(f"{where}: expected true or false, got {value!r}")
        return action.const if value else action.default
    if isinstance(action, argparse._AppendAction) or action.nargs in ("*", "+"):
        if value is None and action.default is None:  # a list whose default is "not given" (e.g. fit's --references)
            return None
        values = value if isinstance(value, list) else [value]
        converted = [_one(where, action, v) for v in values]
        return _FromConfig(converted) if isinstance(action, argparse._AppendAction) else converted
    return None if value is None else _one(where, action, value)


def _one(where: str, action: argparse.Action, value):
    if isinstance(value, (dict, list)):
        raise RedkitError(f"{where}: expected one value, got {value!r}")
    try:
        value = action.type(str(value) if action.type in (Path, str) else value) if action.type else value
        if action.type is int and isinstance(value, float):
            raise ValueError
    except (TypeError, ValueError):
        raise RedkitError(f"{where}: {value!r} is not a valid {getattr(action.type, '__name__', 'value')}") from None
    if action.choices is not None and value not in action.choices:
        raise RedkitError(f"{where}: {value!r} is not one of {', '.join(map(str, action.choices))}")
    return value

"""Check a config dataclass rebuilt from JSON against its annotations, field by field.

Dataclasses do not check types, and a run's config.json can be edited by hand: `"trainable_layers":
"2"` would otherwise surface as a TypeError in the backbone, far from the file. Checked: int (not
bool), float (finite; an int up to 2^53), str, bool, None, dict, tuple (a JSON list accepted, and its items for
`tuple[X, ...]`), nested config dataclasses recursively, and unions of these; other annotations pass.
"""

import math
import types
import typing
from dataclasses import fields, is_dataclass

from redkit.errors import RedkitError


def _fits(value: object, annotation: object) -> bool:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if annotation is type(None) or annotation is None:
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:  # a number a float holds exactly: 10**40 (an int torch cannot take), NaN, Infinity fail
        return isinstance(value, (int, float)) and not isinstance(value, bool) and _exact_float(value)
    if origin is tuple or annotation is tuple:
        if not isinstance(value, (tuple, list)):
            return False
        return not (len(args) == 2 and args[1] is Ellipsis) or all(_fits(item, args[0]) for item in value)
    if is_dataclass(annotation):
        return isinstance(value, annotation)
    if isinstance(origin or annotation, type):
        return isinstance(value, origin or annotation)
    return True


def check_config_types(config: object, where: str, prefix: str = "") -> None:
    """Raise one line naming `where` and the first field whose value does not fit its annotation."""
    hints = typing.get_type_hints(type(config))
    for f in fields(config):
        value = getattr(config, f.name)
        if not _fits(value, hints[f.name]):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            raise RedkitError(f"{where}: field '{prefix}{f.name}' = {shown} is not a {_name(hints[f.name])}")
        if is_dataclass(value):
            check_config_types(value, where, f"{prefix}{f.name}.")


def require_positive(config: object, *names: str) -> None:
    """ValueError naming the first of `names` whose number is not above 0, for a config's __post_init__:
    load_module and --router-option (redkit/api.py) turn it into one line naming the file or the option (a
    temperature of 0 divides by zero; a negative one turns the routing around). A value that is no number a float
    holds (a string, NaN, 10**40) is left to check_config_types, whose line names its type."""
    for name in names:
        value = getattr(config, name)
        if _fits(value, float) and not value > 0:
            raise ValueError(f"{name} must be above 0, not {value!r}")


def _exact_float(value: int | float) -> bool:
    return abs(value) <= 2**53 if isinstance(value, int) else math.isfinite(value)


def _name(annotation: object) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")

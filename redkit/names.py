"""Names that someone else's files give and that become path components, checked before any is used.

A domain is a module folder (modules/experts/<kind>/<domain>, modules/heads/<domain>,
modules/label_rows/<domain>) and a split a data file (data/<split>.jsonl); a training file, a
CLINC150 domains.json, an expert's expert.json or a bundle's manifest.json gives them. A name that
is a path ('../../escape'), holds a control character, or is the folder of another module
('global_full': the global head beside the domains' heads) would write or load modules outside the
run, or another module in its place. `check_name` is the one check, everywhere a name arrives.
"""

import unicodedata

from redkit.errors import RedkitError

MAX_LENGTH = 128  # far above any real domain or split name; a file name must stay under 255 bytes

# The folders under <run>/modules/ (redkit/train/stages, redkit/references, redkit/lifecycle), the
# global head's folder beside the domains' heads (modules/heads/global_full), and the compositions
# named after them, current and before redkit 0.2 (redkit/compositions.py OLD_NAMES): a domain named
# so would overwrite or load another module, or read as that composition.
RESERVED = frozenset(
    {
        "backbone_top",
        "classifier",
        "experts",
        "heads",
        "label_rows",
        "router",
        "gate",
        "joint",
        "linear_probe",
        "global_head",
        "base_classifier",
        # OLD_NAMES: global_full is also the global head's folder
        "global_full",
        "global_10pct",
        "red_within",
        "red_within_oracle",
        "red_logits",
    }
)


def _problem(name: str, reserved: bool) -> str | None:
    if not name:
        return "is empty"
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in name):  # NUL, newline, zero-width, bidi marks
        return "contains a control character"
    if "/" in name or "\\" in name:
        return "contains a path separator"
    if name in (".", ".."):
        return "is a directory reference, not a name"
    if name != name.strip():
        return "has leading or trailing whitespace"
    if len(name) > MAX_LENGTH:
        return f"is {len(name)} characters long; at most {MAX_LENGTH}"
    if reserved and name in RESERVED:
        return "is reserved (the name of a module folder or composition); rename it"
    return None


def check_name(name: str, what: str, where: str = "", *, reserved: bool = True) -> str:
    """`name` unchanged when it can be one path component of a run; otherwise one line
    f"{where}: {what} {name!r} {reason}". `reserved=False` allows the module folders' own names
    (`Run.module_dir` checks every component of a path, "heads" and "global_full" included)."""
    problem = "must be a string" if not isinstance(name, str) else _problem(name, reserved)
    if problem is None:
        return name
    shown = repr(name[:60]) + "..." if isinstance(name, str) and len(name) > MAX_LENGTH else repr(name)
    raise RedkitError(f"{where + ': ' if where else ''}{what} {shown} {problem}")

"""Reading a JSON file a user may have edited, damaged or replaced: its content, or one line.

json.loads raises more than JSONDecodeError on hostile input: ValueError for a number of more
than 4,300 digits, RecursionError for arrays nested some thousand levels deep; and the file may
be unreadable or not UTF-8. Every reader of a run's, module's or bundle's JSON goes through here.
"""

import json
from pathlib import Path
from typing import Any

from redkit.errors import RedkitError


def read_json(path: str | Path, what: str) -> Any:
    """The decoded content of `path`; anything else is `RedkitError("PATH: not WHAT (why)")`."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        why = f"{err.msg} at line {err.lineno} column {err.colno}"
    except UnicodeDecodeError:
        why = "not UTF-8 text"
    except ValueError:
        why = "a number with far too many digits"
    except RecursionError:
        why = "JSON nested too deeply"
    except OSError as err:
        why = err.strerror or type(err).__name__
    raise RedkitError(f"{path}: not {what} ({why})")

"""Reading a JSON file a user may have edited, damaged or replaced: its content, or one line.

json.loads raises more than JSONDecodeError on hostile input: ValueError for a number of more
than 4,300 digits, RecursionError for arrays nested some thousand levels deep; and the file may
be unreadable or not UTF-8. Every reader of a run's, module's or bundle's JSON goes through here,
and every reader of a JSONL data file (`jsonl_objects`).
"""

import json
import sys
from collections.abc import Iterator
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


def jsonl_objects(path: str | Path, appended: bool = False) -> Iterator[tuple[str, Any]]:
    """('file:line', decoded JSON value) of every non-blank line of a JSONL file; a missing file, a
    line that is not UTF-8 or not JSON is an error naming it. `appended`: a log written a row at a
    time (<run>/log.jsonl), whose last line a kill may have cut short: that line, unreadable and
    without its newline, is skipped with one warning line on stderr instead."""
    path = Path(path)
    if not path.is_file():
        raise RedkitError(f"{path}: no such data file")
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            where = f"{path}:{line_no}"
            try:
                line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
                if not line.strip():
                    continue
                obj = _json_line(line, where)
            except (UnicodeDecodeError, RedkitError) as err:
                if appended and not raw.endswith(b"\n"):  # the last line: only it lacks the newline
                    print(
                        f"redkit: warning: {where}: last line cut short (a write interrupted); skipped", file=sys.stderr
                    )
                    return
                if isinstance(err, RedkitError):
                    raise
                raise RedkitError(f"{where}: not UTF-8 text") from None
            yield where, obj


def _json_line(line: str, where: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as err:
        raise RedkitError(f"{where}: malformed JSON ({err.msg} at column {err.colno})") from None
    except ValueError:  # a number literal of more than 4,300 digits
        raise RedkitError(f"{where}: a number with far too many digits") from None
    except RecursionError:
        raise RedkitError(f"{where}: JSON nested too deeply") from None

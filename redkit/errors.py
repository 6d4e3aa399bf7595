"""The one exception type a user can cause.

Anything a user can get wrong (a bad file, a bad config, a missing or mismatched module, an
unknown name) raises `RedkitError` with a one-line message that names the file, line or field.
The CLI prints that line and exits with code 2; anything else is a bug and keeps its traceback.
"""


class RedkitError(Exception):
    """A user-facing error: `str(err)` is one line that says what is wrong and where."""

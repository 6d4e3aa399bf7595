"""A dict-plus-decorator registry with a "did you mean" error, shared by tasks, compositions,
modules, routers, stages, run kinds and commands (the lm-evaluation-harness pattern).

    COMPOSITIONS = Registry("composition")

    @COMPOSITIONS.register("red")
    def red(...): ...

    COMPOSITIONS["red"]     # -> the function
    COMPOSITIONS["rde"]     # RedkitError: unknown composition 'rde'; did you mean 'red'? (known: ...)

A registry never imports anything: each entry is registered by the package that owns it when that
package is imported, and the top (the CLI, the API) imports the packages (redkit/plugins.py).
`aliases` maps an old name to its new one: a run written before a rename still reads.
"""

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from redkit.errors import RedkitError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, aliases: dict[str, str] | None = None):
        self.kind = kind  # what an entry is called in error messages, e.g. "composition"
        self._entries: dict[str, T] = {}
        self.aliases = dict(aliases or {})  # old name -> current name

    def register(self, name: str) -> Callable[[T], T]:
        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            return obj

        return add

    def canonical(self, name: str) -> str:
        """The current name of `name` (itself, unless it is an old name)."""
        return self.aliases.get(name, name)

    def __getitem__(self, name: str) -> T:
        name = self.canonical(name)
        if name not in self._entries:
            close = difflib.get_close_matches(name, self._entries, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise RedkitError(f"unknown {self.kind} {name!r}{hint} (known: {', '.join(self._entries)})")
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.canonical(name) in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return list(self._entries)

"""A dict-plus-decorator registry with a "did you mean" error, shared by tasks, compositions,
modules and routers (the lm-evaluation-harness pattern).

    COMPOSITIONS = Registry("composition")

    @COMPOSITIONS.register("red")
    def red(...): ...

    COMPOSITIONS["red"]     # -> the function
    COMPOSITIONS["rde"]     # RedkitError: unknown composition 'rde'; did you mean 'red'? (known: ...)
"""

import difflib
import importlib
from typing import Callable, Generic, Iterator, TypeVar

from redkit.errors import RedkitError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, plugins: tuple[str, ...] = ()):
        """`plugins`: modules that register more entries, imported (by name, in order, until a
        missing name turns up; all of them when the entries are listed): how the spine finds a
        subpackage's entries (the router zoo of redkit.routing, the kinds of run) without
        importing it."""
        self.kind = kind  # what an entry is called in error messages, e.g. "composition"
        self._entries: dict[str, T] = {}
        self._plugins = list(plugins)

    def _load_plugins(self, until: str | None = None) -> None:
        while self._plugins and (until is None or until not in self._entries):
            importlib.import_module(self._plugins.pop(0))

    def register(self, name: str) -> Callable[[T], T]:
        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            return obj

        return add

    def __getitem__(self, name: str) -> T:
        if name not in self._entries:
            self._load_plugins(until=name)
        if name not in self._entries:
            self._load_plugins()
            close = difflib.get_close_matches(name, self._entries, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise RedkitError(f"unknown {self.kind} {name!r}{hint} (known: {', '.join(self._entries)})")
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        if name not in self._entries:
            self._load_plugins(until=name)
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def names(self) -> list[str]:
        self._load_plugins()
        return list(self._entries)

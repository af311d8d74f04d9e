"""Name → object registries: one per kind (robots, tasks, DR appliers ...), no if/elif factories."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from embodied_ws.core.errors import UnknownNameError


class Registry[T]:
    """A named collection of entries of one kind.

    :param kind: what the entries are, used in error messages (e.g. ``"task"``)
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that registers ``obj`` under ``name``."""

        def wrap(obj: T) -> T:
            self.add(name, obj)
            return obj

        return wrap

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` under ``name``; a name may be registered once."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj

    def get(self, name: str, where: str | None = None) -> T:
        """The entry called ``name``, or a one-line error listing the known names."""
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "none"
            raise UnknownNameError(f"unknown {self.kind} {name!r} (known: {known})", where) from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

"""Name → object registries: one per kind (robots, tasks, DR appliers ...), no if/elif factories.

A registry may also take entries from outside this repository, without a fork:

- ``module:attr`` paths (``paths=True``): ``my_pkg.tasks:Lift`` is imported with :mod:`importlib` (never
  evaluated), from the installed packages, ``PYTHONPATH`` or the current folder;
- an entry-point group (``group="embodied_ws.tasks"``): packages declare
  ``[project.entry-points."embodied_ws.tasks"] lift = "my_pkg.tasks:Lift"`` in their ``pyproject.toml``.
  Entry points are read lazily, only when a name is not built in, so a broken plugin never breaks a
  built-in entry; loading one that fails gives one line naming the entry point and the error.

Either way the object goes through the registry's ``adapt`` hook, which checks it (raising a one-line
:class:`UserError` that names what is missing) and may wrap it.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint, entry_points

from embodied_ws.core.errors import UnknownNameError, UserError

#: ``package.module:Attr`` (dotted identifiers both sides; no relative modules)
_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def error_line(exc: BaseException) -> str:
    """``Type: message`` of an exception (a user's code raised it), its whitespace folded into one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def import_path(ref: str, where: str | None = None) -> object:
    """The object a ``module:attr`` path names, imported with :mod:`importlib`.

    The current folder is searched after the installed packages (as ``python -m`` does), so a user's
    ``my_tasks.py`` next to the run works too.

    :param ref: ``package.module:Attr`` (``Attr`` may be dotted: ``Outer.Inner``)
    :param where: the config key or file the path came from (error messages)
    :raises UserError: one line: malformed path, module that cannot be imported, missing attribute
    """
    if not _PATH.fullmatch(ref):
        raise UserError(f"{ref!r} is not a module:attr path (e.g. my_pkg.tasks:Lift)", where)
    module_name, _, attr = ref.partition(":")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)
    try:
        obj: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name) and module_name[len(exc.name) :][:1] in ("", "."):
            raise UserError(
                f"cannot import {module_name!r} for {ref!r}: no module named {exc.name!r} (install its package, "
                "or run from its folder / add it to PYTHONPATH)",
                where,
            ) from None
        raise UserError(f"importing {module_name!r} for {ref!r} failed: {error_line(exc)}", where) from None
    except Exception as exc:  # the user's module: whatever it raises is reported in one line
        raise UserError(f"importing {module_name!r} for {ref!r} failed: {error_line(exc)}", where) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UserError(f"{ref!r}: {getattr(obj, '__name__', module_name)!r} has no attribute {part!r}", where)
        obj = getattr(obj, part)
    return obj


class Registry[T]:
    """A named collection of entries of one kind.

    :param kind: what the entries are, used in error messages (e.g. ``"task"``)
    :param group: entry-point group whose entries are registered names too (looked up only for a name that
        is not built in)
    :param paths: :meth:`get` also accepts ``module:attr`` paths
    :param adapt: ``adapt(obj, ref, where) -> T`` checks an entry from outside (entry point or path) and
        returns what the registry hands out; raises a one-line :class:`UserError` naming what is missing
    """

    def __init__(
        self,
        kind: str,
        group: str | None = None,
        paths: bool = False,
        adapt: Callable[[object, str, str | None], T] | None = None,
    ) -> None:
        self.kind = kind
        self.group = group
        self.paths = paths
        self._adapt = adapt
        self._entries: dict[str, T] = {}
        self._plugins: dict[str, T] = {}

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
        """The entry called ``name`` (built in, else a ``module:attr`` path, else an entry point), or a one-line
        error listing the known names."""
        if name in self._entries:
            return self._entries[name]
        if name in self._plugins:  # loaded and checked once per process
            return self._plugins[name]
        if self.paths and ":" in name:
            self._plugins[name] = self._checked(import_path(name, where), name, where)
            return self._plugins[name]
        ep = self._entry_point(name, where)
        if ep is not None:
            self._plugins[name] = self._load(ep, where)
            return self._plugins[name]
        known = ", ".join(self.names() + self.plugin_names()) or "none"
        hint = " or a module:attr path" if self.paths else ""
        raise UnknownNameError(f"unknown {self.kind} {name!r} (known: {known}{hint})", where)

    def is_builtin(self, name: str) -> bool:
        """Whether ``name`` is registered in this repository (not a path or a plugin)."""
        return name in self._entries

    def reference(self, name: str) -> str:
        """How to name entry ``name`` again in another process or later: a plugin's ``module:attr`` (so a
        run's config finds the same class even if a built-in of that name appears later), else ``name``."""
        if name in self._entries or ":" in name or not self.group:
            return name
        ep = self._entry_point(name, None)
        return ep.value if ep is not None and ep.attr else name

    def names(self) -> list[str]:
        """Built-in names, sorted."""
        return sorted(self._entries)

    def plugin_names(self) -> list[str]:
        """Names the installed packages declare in the entry-point group (not loaded), sorted; built-in names
        are left out (the built-in entry wins)."""
        if not self.group:
            return []
        return sorted({ep.name for ep in entry_points(group=self.group)} - set(self._entries))

    def _entry_point(self, name: str, where: str | None) -> EntryPoint | None:
        if not self.group:
            return None
        found = list(entry_points(group=self.group, name=name))
        if len(found) > 1:
            who = "; ".join(f"{_dist(ep)}: {ep.value}" for ep in found)
            raise UserError(f"{self.kind} {name!r} is declared by several packages ({who})", where)
        return found[0] if found else None

    def _load(self, ep: EntryPoint, where: str | None) -> T:
        label = f"{self.kind} plugin {ep.name!r} (entry point {ep.name} = {ep.value} in {self.group}, {_dist(ep)})"
        if not ep.attr:
            raise UserError(f"{label}: the entry point must name a class as module:attr", where)
        try:
            obj = ep.load()
        except Exception as exc:  # a plugin's error is reported in one line
            raise UserError(f"{label} does not load: {error_line(exc)}", where) from None
        return self._checked(obj, ep.value, where)

    def _checked(self, obj: object, ref: str, where: str | None) -> T:
        return obj if self._adapt is None else self._adapt(obj, ref, where)  # type: ignore[return-value]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def _dist(ep: EntryPoint) -> str:
    """``package version`` that declares ``ep`` (``unknown package`` when it does not say)."""
    dist = getattr(ep, "dist", None)
    return f"package {dist.name} {dist.version}" if dist is not None else "unknown package"

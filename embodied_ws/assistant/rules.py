"""Triage rules as data (YAML in ``assistant/rules/``): patterns, cause, fix steps, verify commands, links.

A rule fires when one of its ``patterns`` matches a log line (a taxonomy id with ``patterns: []`` is
known to the second, similarity stage only, e.g. the ``benign.*`` ids of harmless warnings); ``context``
patterns found anywhere in the same log raise its confidence (e.g. a Noetic path next to a missing
ament_cmake), or lower it with a negative ``boost`` (counter-evidence: the same message in a build log
means another class). Patterns are written in the common subset of RE2 and Python ``re`` syntax (a test
compiles every one with both) and describe a failure class (the exception type, the tool's message
template with its variable parts as classes), not one project's string. Each starts with a literal
character: Python's ``re``, which locates the lines RE2 detected, scans a literal prefix ~10x faster
than a leading group or character class on a big chunk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from embodied_ws.core.errors import ConfigError


@dataclass(frozen=True)
class ContextPattern:
    """A pattern that, found anywhere in the log, adds ``boost`` to its rule's confidence (negative: against it)."""

    regex: str
    boost: float = 0.05


@dataclass(frozen=True)
class Rule:
    """One known failure with its root-cause id from the taxonomy."""

    id: str
    title: str
    cause: str
    fix: tuple[str, ...]
    verify: tuple[str, ...]
    patterns: tuple[str, ...]
    confidence: float = 0.8
    context: tuple[ContextPattern, ...] = ()
    links: tuple[str, ...] = ()
    source: str = ""

    @property
    def category(self) -> str:
        """Taxonomy category (the part of the id before the dot)."""
        return self.id.split(".", 1)[0]


@dataclass
class RuleSet:
    """All loaded rules; ids are unique."""

    rules: list[Rule] = field(default_factory=list)

    def by_id(self, rule_id: str) -> Rule:
        """The rule with ``rule_id``."""
        return next(r for r in self.rules if r.id == rule_id)

    def ids(self) -> list[str]:
        """Every rule id."""
        return [r.id for r in self.rules]


def _as_tuple(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ConfigError("expected a string or a list of strings", where)


def parse_rules(data: Any, source: str) -> list[Rule]:
    """Validate one rules file's content (a list of rule mappings)."""
    if not isinstance(data, list):
        raise ConfigError("a rules file holds a list of rules", source)
    out = []
    required = {"id", "title", "cause", "fix", "patterns"}
    allowed = required | {"verify", "confidence", "context", "links"}
    for i, entry in enumerate(data):
        where = f"{source}:rule[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError("each rule is a mapping", where)
        missing = required - set(entry)
        if missing:
            raise ConfigError(f"missing key {sorted(missing)[0]!r}", where)
        extra = set(entry) - allowed
        if extra:
            raise ConfigError(f"unknown key {sorted(extra)[0]!r}", where)
        patterns = _as_tuple(entry["patterns"], f"{where}.patterns")
        for p in patterns:
            try:
                re.compile(p)
            except re.error as exc:
                raise ConfigError(f"bad pattern {p!r}: {exc}", f"{where}.patterns") from None
        context = tuple(
            ContextPattern(c["regex"], float(c.get("boost", 0.05))) if isinstance(c, dict) else ContextPattern(c)
            for c in entry.get("context") or []
        )
        conf = entry.get("confidence", 0.8)
        if not isinstance(conf, (int, float)) or not 0 < conf <= 1:
            raise ConfigError(f"confidence must be in (0, 1], got {conf!r}", f"{where}.confidence")
        out.append(
            Rule(
                id=str(entry["id"]),
                title=str(entry["title"]),
                cause=str(entry["cause"]).strip(),
                fix=_as_tuple(entry["fix"], f"{where}.fix"),
                verify=_as_tuple(entry.get("verify"), f"{where}.verify"),
                patterns=patterns,
                confidence=float(conf),
                context=context,
                links=_as_tuple(entry.get("links"), f"{where}.links"),
                source=source,
            )
        )
    return out


def load_rules(extra: list[Path] | None = None) -> RuleSet:
    """The built-in rules plus any extra YAML files (a user's own rules)."""
    rules: list[Rule] = []
    for res in sorted(resources.files("embodied_ws.assistant").joinpath("rules").iterdir(), key=lambda r: r.name):
        if res.name.endswith(".yaml"):
            rules += parse_rules(yaml.safe_load(res.read_text()), f"rules/{res.name}")
    for path in extra or []:
        if not path.is_file():
            raise ConfigError("rules file not found", str(path))
        rules += parse_rules(yaml.safe_load(path.read_text()), str(path))
    seen: set[str] = set()
    for r in rules:
        if r.id in seen:
            raise ConfigError(f"duplicate rule id {r.id!r}", r.source)
        seen.add(r.id)
    return RuleSet(rules)


@lru_cache(maxsize=1)
def builtin_rules() -> RuleSet:
    """The built-in rule set (cached)."""
    return load_rules()

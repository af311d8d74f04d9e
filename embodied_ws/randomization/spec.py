"""Domain-randomization spec: one YAML schema for every backend (ARCHITECTURE §5).

Each entry names a registered parameter (see :mod:`embodied_ws.randomization.appliers`) and says
how to draw it::

    body_mass: {dist: uniform, range: [0.8, 1.2], mode: scale, when: reset, targets: ["*arm*"]}

- ``dist``: ``uniform`` on [lo, hi]; ``loguniform`` (uniform in log space, lo > 0); ``normal`` with
  mean (lo+hi)/2 and std (hi-lo)/4, clipped to [lo, hi] (so the range holds ±2 std).
- ``mode``: ``set`` (value replaces the nominal), ``scale`` (nominal × value), ``offset`` (nominal + value).
- ``when``: ``reset`` (once per episode) or ``interval`` (every ``interval`` control steps as well).
- ``targets``: name globs of the bodies/geoms/joints/actuators/lights/cameras it touches (all when empty).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from embodied_ws.core.errors import ConfigError

DISTRIBUTIONS = ("uniform", "loguniform", "normal")
MODES = ("set", "scale", "offset")
WHENS = ("reset", "interval")


@dataclass(frozen=True)
class DRParam:
    """One randomized parameter."""

    name: str
    low: float
    high: float
    dist: str = "uniform"
    mode: str = "scale"
    when: str = "reset"
    interval: int = 0
    targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class DRSpec:
    """A full DR configuration: the parameters and whether DR is on at all."""

    params: tuple[DRParam, ...] = ()
    enabled: bool = True

    def get(self, name: str) -> DRParam | None:
        """The parameter called ``name``, if configured."""
        return next((p for p in self.params if p.name == name), None)

    def active(self) -> tuple[DRParam, ...]:
        """Parameters in effect (none when DR is disabled)."""
        return self.params if self.enabled else ()


@dataclass
class _Where:
    source: str
    lines: dict[str, int] = field(default_factory=dict)

    def at(self, key: str) -> str:
        line = self.lines.get(key)
        return f"{self.source}:{line}" if line else f"{self.source}:{key}"


def parse_dr(data: Any, source: str = "dr", lines: dict[str, int] | None = None) -> DRSpec:
    """Validate a DR mapping (as loaded from YAML) into a :class:`DRSpec`.

    :param data: ``{"enabled": bool, "params": {name: {...}}}``
    :param source: file name or config key used in error messages
    :param lines: optional ``dotted.key -> line`` map for ``file:line`` errors
    """
    from embodied_ws.randomization.appliers import APPLIERS

    where = _Where(source, lines or {})
    if data is None:
        return DRSpec(enabled=False)
    if not isinstance(data, dict):
        raise ConfigError("domain randomization must be a mapping with 'params'", where.at(""))
    unknown = set(data) - {"enabled", "params"}
    if unknown:
        raise ConfigError(
            f"unknown key {sorted(unknown)[0]!r} (expected 'enabled', 'params')", where.at(sorted(unknown)[0])
        )
    enabled = data.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"'enabled' must be true or false, got {enabled!r}", where.at("enabled"))
    raw = data.get("params") or {}
    if not isinstance(raw, dict):
        raise ConfigError("'params' must map parameter names to settings", where.at("params"))
    params = []
    for name, entry in raw.items():
        key = f"params.{name}"
        APPLIERS.get(name, where.at(key))
        params.append(_parse_param(name, entry, where, key))
    return DRSpec(tuple(params), enabled)


def _parse_param(name: str, entry: Any, where: _Where, key: str) -> DRParam:
    if not isinstance(entry, dict):
        raise ConfigError("expected a mapping with dist/range/mode", where.at(key))
    allowed = {"dist", "range", "mode", "when", "interval", "targets"}
    extra = set(entry) - allowed
    if extra:
        bad = sorted(extra)[0]
        raise ConfigError(f"unknown key {bad!r} (expected one of {sorted(allowed)})", where.at(f"{key}.{bad}"))
    rng = entry.get("range")
    if not (
        isinstance(rng, list)
        and len(rng) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rng)
    ):
        raise ConfigError(f"'range' must be [low, high] numbers, got {rng!r}", where.at(f"{key}.range"))
    low, high = float(rng[0]), float(rng[1])
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ConfigError(f"'range' must be finite numbers, got {rng!r}", where.at(f"{key}.range"))
    if low > high:
        raise ConfigError(f"range low {low} is above high {high}", where.at(f"{key}.range"))
    choices = {"dist": DISTRIBUTIONS, "mode": MODES, "when": WHENS}
    values = {
        "dist": entry.get("dist", "uniform"),
        "mode": entry.get("mode", "scale"),
        "when": entry.get("when", "reset"),
    }
    for k, allowed_values in choices.items():
        if values[k] not in allowed_values:
            raise ConfigError(
                f"{k} must be one of {', '.join(allowed_values)}, got {values[k]!r}", where.at(f"{key}.{k}")
            )
    if values["dist"] == "loguniform" and low <= 0:
        raise ConfigError("loguniform needs a range above 0", where.at(f"{key}.range"))
    interval = entry.get("interval", 0)
    if not isinstance(interval, int) or interval < 0 or (values["when"] == "interval" and interval == 0):
        raise ConfigError(
            f"'interval' must be a positive step count for when=interval, got {interval!r}", where.at(f"{key}.interval")
        )
    targets = entry.get("targets", [])
    if isinstance(targets, str):
        targets = [targets]
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise ConfigError("'targets' must be a list of name globs", where.at(f"{key}.targets"))
    return DRParam(name, low, high, values["dist"], values["mode"], values["when"], interval, tuple(targets))

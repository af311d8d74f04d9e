"""YAML loading into the typed config with one-line errors (``file:line: what``) and ``--set`` overrides."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from embodied_ws.config.schema import RunConfig, declared_range
from embodied_ws.core.errors import ConfigError
from embodied_ws.core.paths import config_dir
from embodied_ws.core.yamlfile import read_yaml
from embodied_ws.randomization.spec import DRSpec, parse_dr

#: a decimal number in exponent form that YAML 1.1 (PyYAML) leaves a string: ``1e-5``, ``3E4``, ``-2e+3``
YAML11_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _type_ok(value: Any, tp: Any) -> tuple[bool, Any]:
    """Check ``value`` against a simple annotation; ints are accepted (and converted) for floats."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return True, value
    if origin is Literal:  # a string choice: the annotation is the one list of allowed values
        return value in typing.get_args(tp), value
    if origin in (Union, types.UnionType):
        for arm in typing.get_args(tp):
            ok, conv = _type_ok(value, arm)
            if ok:
                return True, conv
        return False, value
    if tp is type(None):
        return value is None, value
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            return False, value
        conv = []
        for v in value:
            ok, c = _type_ok(v, item)
            if not ok:
                return False, value
            conv.append(c)
        return True, conv
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True, float(value)
        if isinstance(value, str) and YAML11_FLOAT.fullmatch(value.strip()):
            return True, float(value)  # YAML 1.1 reads 1e-5 and 3e-4 (no dot) as strings: they mean numbers
        return False, value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    return isinstance(value, tp), value


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(tp)))
    return str(tp).replace("typing.", "").replace("<class '", "").replace("'>", "")


def _fill(obj: Any, data: Any, prefix: str, where: typing.Callable[[str], str]) -> None:
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping, got {type(data).__name__}", where(prefix))
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            raise ConfigError(f"unknown key {key!r} (expected one of: {', '.join(sorted(names))})", where(dotted))
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            _fill(current, value, dotted, where)
            continue
        ok, conv = _type_ok(value, hints[key])
        if not ok:
            raise ConfigError(f"{key} must be {_type_name(hints[key])}, got {value!r}", where(dotted))
        setattr(obj, key, conv)


def parse_override(item: str) -> tuple[str, Any]:
    """Split ``key.path=value``; the value is parsed as a YAML scalar/list (``4096``, ``true``, ``[64, 64]``)."""
    if "=" not in item:
        raise ConfigError(f"expected key=value, got {item!r}", "--set")
    key, raw = item.split("=", 1)
    if not key.strip():
        raise ConfigError(f"missing key in {item!r}", "--set")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        raise ConfigError(f"cannot parse value {raw!r}", f"--set {key}") from None
    return key.strip(), value


def _nest(key: str, value: Any) -> dict[str, Any]:
    out: Any = value
    for part in reversed(key.split(".")):
        out = {part: out}
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Build a validated :class:`RunConfig` from a YAML file (or defaults) plus ``--set`` overrides.

    :param path: YAML file, or a preset name under ``config/train`` (``reach``), or None for defaults
    :param overrides: ``key.path=value`` strings applied after the file
    """
    cfg = RunConfig()
    if path is not None:
        _fill_file(cfg, resolve_preset(path, "train"), ())
    for item in overrides or []:
        key, value = parse_override(item)
        _fill(cfg, _nest(key, value), "", lambda k, key=key: f"--set {k}")
    validate(cfg)
    return cfg


def _fill_file(cfg: RunConfig, file: Path, chain: tuple[Path, ...]) -> None:
    """Fill ``cfg`` from ``file``, after the file its ``extends:`` names (a preset name or a path beside it).

    The base fills first and the file's own keys then override it key by key (a list replaces a list), as
    Hydra's defaults list composes configs; errors name the file and line that set the value.
    """
    data, lines = read_yaml(file)
    data = data or {}
    base = data.pop("extends", None) if isinstance(data, dict) else None
    if base is not None:
        where = f"{file}:{lines['extends']}" if "extends" in lines else f"{file}:extends"
        if not isinstance(base, str) or not base.strip():
            raise ConfigError(f"extends must name a train preset or a .yaml path, got {base!r}", where)
        beside = file.parent / base
        parent = resolve_preset(beside if beside.suffix in (".yaml", ".yml") else base, "train").resolve()
        chain = (*chain, file.resolve())
        if parent in chain:
            raise ConfigError(f"extends loops back: {' -> '.join(map(str, (*chain, parent)))}", where)
        _fill_file(cfg, parent, chain)
    _fill(cfg, data, "", lambda k: f"{file}:{lines[k]}" if k in lines else f"{file}:{k}")


def resolve_preset(name: str | Path, kind: str) -> Path:
    """A YAML path as given, or ``config/<kind>/<name>.yaml`` for a bare preset name."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    preset = config_dir() / kind / f"{name}.yaml"
    if preset.is_file():
        return preset
    known = ", ".join(sorted(q.stem for q in (config_dir() / kind).glob("*.yaml")))
    raise ConfigError(f"no {kind} preset {str(name)!r} (known: {known}, or give a .yaml path)", str(name))


def load_dr(dr: Any) -> DRSpec:
    """Resolve the ``dr`` entry: a preset name, a YAML path, an inline mapping, or ``none``/null."""
    if dr is None or dr in ("none", "off", False):
        return DRSpec(enabled=False)
    if isinstance(dr, dict):
        return parse_dr(dr, "dr")
    if not isinstance(dr, str):
        raise ConfigError(f"dr must be a preset name, a path or a mapping, got {dr!r}", "dr")
    file = resolve_preset(dr, "dr")
    data, lines = read_yaml(file)
    return parse_dr(data, str(file), lines)


def check_ranges(obj: Any, prefix: str = "") -> None:
    """Every number of ``obj`` (a config dataclass) inside the range its field declares in the schema.

    NaN and the infinities are inside no range. Raises a one-line :class:`ConfigError` naming the key.

    :param obj: a config dataclass (:class:`RunConfig` or one of its sections)
    :param prefix: dotted key of ``obj`` (empty for the whole config)
    """
    for f in dataclasses.fields(obj):
        key = f"{prefix}.{f.name}" if prefix else f.name
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            check_ranges(value, key)
            continue
        declared = declared_range(f)
        if declared is None or value is None:
            continue
        items = value if isinstance(value, list) else [value]
        if not all(declared.contains(v) for v in items):
            what = "every item must" if isinstance(value, list) else "must"
            raise ConfigError(f"{what} be {declared.describe()}, got {value}", key)


def validate(cfg: RunConfig) -> None:
    """Range checks: each number against the range its field declares in the schema (:func:`check_ranges`),
    then what involves several fields; raises a one-line :class:`ConfigError`.

    String choices are checked from their ``Literal`` annotations while filling (:func:`_type_ok`); what a
    backend allows (e.g. ``ros``: one env) is checked by the backend registry when the envs are built.
    """
    check_ranges(cfg)
    _validate_vla(cfg)
    for key in ("image_size", "render_size"):
        size = getattr(cfg.env, key)
        if len(size) != 2 or min(size) <= 0:
            raise ConfigError(f"must be [height, width], got {size}", f"env.{key}")
    validate_deploy(cfg)


def validate_deploy(cfg: RunConfig) -> None:
    """Range checks of the ``deploy`` section (rates, limits, timeouts)."""
    check_ranges(cfg.deploy, "deploy")
    d = cfg.deploy
    if d.on_state_timeout not in ("hold", "safe_pose"):
        raise ConfigError(f"must be hold or safe_pose, got {d.on_state_timeout!r}", "deploy.on_state_timeout")


def _validate_vla(cfg: RunConfig) -> None:
    v = cfg.vla
    if v.policy not in ("smolvla", "pi0", "act"):
        raise ConfigError(f"must be smolvla, pi0 or act, got {v.policy!r}", "vla.policy")
    if v.n_action_steps > v.chunk_size:
        raise ConfigError(f"must be <= vla.chunk_size ({v.chunk_size}), got {v.n_action_steps}", "vla.n_action_steps")
    if len(v.image_size) != 2 or min(v.image_size) <= 0:
        raise ConfigError(f"must be [height, width], got {v.image_size}", "vla.image_size")
    if v.rename_map is not None and not (
        isinstance(v.rename_map, dict) and all(isinstance(x, str) for kv in v.rename_map.items() for x in kv)
    ):
        raise ConfigError(f"must map dataset keys to policy keys, got {v.rename_map!r}", "vla.rename_map")
    if v.policy == "act" and v.lora and not v.pretrained:
        raise ConfigError("ACT is a baseline trained from scratch: set vla.lora=false", "vla.lora")


def to_dict(cfg: RunConfig) -> dict[str, Any]:
    """Plain-dict form (for ``config.yaml`` in the run folder)."""
    return dataclasses.asdict(cfg)

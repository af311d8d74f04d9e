"""ROS parameters declared from the config dataclasses (``env.robot``, ``train.total_timesteps`` ...)."""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any

from rclpy.node import Node

from embodied_ws.config.loader import load_config
from embodied_ws.config.schema import RunConfig
from embodied_ws.core.errors import UserError


def flat_fields(cfg: RunConfig) -> dict[str, Any]:
    """``section.field -> value`` for every simple field (str, int, float, bool, list of int); nested sections
    (``train.ray``) give ``train.ray.address``. Fields a ROS parameter cannot hold (a mapping such as
    ``vla.rename_map``, or an untyped ``None``) are left out: set them in the config file."""
    out: dict[str, Any] = {}
    for section in dataclasses.fields(cfg):
        value = getattr(cfg, section.name)
        if not dataclasses.is_dataclass(value):
            out[section.name] = "" if value is None else str(value)
            continue
        _flatten(value, section.name, out)
    return out


def _flatten(obj: Any, prefix: str, out: dict[str, Any]) -> None:
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            _flatten(v, f"{prefix}.{f.name}", out)
            continue
        if hints[f.name] == float | None:
            v = math.nan if v is None else float(v)
        if v is None or isinstance(v, dict):
            continue  # no ROS parameter type for it (rclpy would warn and leave it untyped)
        out[f"{prefix}.{f.name}"] = v


def declare_config(node: Node, cfg: RunConfig) -> None:
    """Declare every config field as a ROS parameter with the config's value as default."""
    for name, value in flat_fields(cfg).items():
        node.declare_parameter(name, value)


def config_overrides(node: Node, cfg: RunConfig) -> list[str]:
    """``key=value`` overrides for the parameters the user changed from the config's values."""
    out = []
    for name, default in flat_fields(cfg).items():
        value = node.get_parameter(name).value
        if isinstance(value, float) and math.isnan(value):
            value = None
        if value != default and not (value is None and isinstance(default, float) and math.isnan(default)):
            out.append(f"{name}={value if not isinstance(value, list) else list(value)}")
    return out


def declare_node_parameters(node: Node, own: dict[str, Any]) -> list[str]:
    """Declare the node's ``own`` parameters (one of them ``config``) and every field of that config.

    Returns the ``key=value`` overrides the user set through ROS parameters.
    """
    for name, default in own.items():
        node.declare_parameter(name, default)
    base = load_config(node.get_parameter("config").value)
    declare_config(node, base)
    return config_overrides(node, base)


def choice(node: Node, name: str, allowed: tuple[str, ...]) -> str:
    """The value of string parameter ``name``, which must be one of ``allowed`` (else a one-line UserError)."""
    value = node.get_parameter(name).value
    if value not in allowed:
        raise UserError(f"{name} must be {' or '.join(allowed)}, got {value!r}", name)
    return value

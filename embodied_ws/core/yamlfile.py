"""YAML files with line numbers, for one-line errors (``file:line: what``) wherever a YAML file enters.

Below every domain: run configs (:mod:`embodied_ws.config.loader`), DR and plant files
(:mod:`embodied_ws.randomization`), deploy limits, bag maps and search spaces all read through it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from embodied_ws.core.errors import ConfigError


def read_yaml(path: Path) -> tuple[Any, dict[str, int]]:
    """Parse a YAML file; returns ``(data, {dotted.key: line})``. Errors name the file and line."""
    if not path.is_file():
        raise ConfigError("file not found", str(path))
    text = path.read_text()
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"invalid YAML: {getattr(exc, 'problem', None) or exc}", where) from None
    lines: dict[str, int] = {}
    _collect_lines(node, "", lines)
    return data, lines


def _collect_lines(node: Any, prefix: str, out: dict[str, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            out[key] = key_node.start_mark.line + 1
            _collect_lines(value_node, key, out)

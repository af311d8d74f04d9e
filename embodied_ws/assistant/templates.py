"""Per-tool message templates (YAML in ``assistant/templates/``): what each tool prints per failure class.

A template is the fixed text a tool's *source code* prints for one failure class (MuJoCo's ``XML Error``,
CUDA's ``cudaError`` strings, pip's resolver messages, apt's ``Unable to locate package``), written as a
pattern with the variable parts as classes, tagged with the taxonomy id it means and the repository and
path it was read from. Templates are matched in the same RE2 pass as the rules and before the similarity
stage; a log whose error line matches a template is never answered with another family's id first
(``Triage.findings``). Each template carries an ``example``: one synthetic message built from the tool's
source string, which ``tests/test_assistant_templates.py`` classifies per tool.

File layout (one file per tool)::

    tool: mujoco
    project: https://github.com/google-deepmind/mujoco
    licence: Apache-2.0
    templates:
      - id: mujoco.xml-parse
        pattern: 'XML Error: '
        source: google-deepmind/mujoco src/xml/xml_util.cc
        example: "XML Error: Schema violation: unrecognized attribute: 'foo'"
        confidence: 0.9   # optional
        symptom: false    # optional

A ``symptom: true`` template is a tool's *normal* output that shows a failure class without an error line
(``ros2 topic list`` printing only the two topics every node creates; RViz's ``Showing [0] points from [0]
messages``): it proposes its id like any template but does not decide the answer's family, so a real error
line elsewhere in the log (another family's template or rule) still comes first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from embodied_ws.core.errors import ConfigError

DEFAULT_CONFIDENCE = 0.88


@dataclass(frozen=True)
class Template:
    """One tool message template mapped to a taxonomy id."""

    tool: str
    id: str
    pattern: str
    source: str
    example: str
    confidence: float = DEFAULT_CONFIDENCE
    symptom: bool = False

    @property
    def family(self) -> str:
        """Taxonomy family of the id (``mujoco`` of ``mujoco.xml-parse``)."""
        return self.id.split(".", 1)[0]


def parse_templates(data: Any, where: str) -> list[Template]:
    """Validate one templates file's content."""
    if not isinstance(data, dict) or not isinstance(data.get("tool"), str):
        raise ConfigError("a templates file is a mapping with 'tool' and 'templates'", where)
    entries = data.get("templates")
    if not isinstance(entries, list):
        raise ConfigError("'templates' must be a list", where)
    out = []
    for i, e in enumerate(entries):
        at = f"{where}:templates[{i}]"
        if not isinstance(e, dict):
            raise ConfigError("each template is a mapping", at)
        missing = {"id", "pattern", "source", "example"} - set(e)
        if missing:
            raise ConfigError(f"missing key {sorted(missing)[0]!r}", at)
        try:
            re.compile(e["pattern"])
        except re.error as exc:
            raise ConfigError(f"bad pattern {e['pattern']!r}: {exc}", at) from None
        conf = e.get("confidence", DEFAULT_CONFIDENCE)
        if not isinstance(conf, (int, float)) or not 0 < conf < 1:
            raise ConfigError(f"confidence must be in (0, 1), got {conf!r}", at)
        symptom = e.get("symptom", False)
        if not isinstance(symptom, bool):
            raise ConfigError(f"symptom must be true or false, got {symptom!r}", at)
        out.append(Template(data["tool"], str(e["id"]), str(e["pattern"]), str(e["source"]), str(e["example"]),
                            float(conf), symptom))  # fmt: skip
    return out


@lru_cache(maxsize=1)
def builtin_templates() -> tuple[Template, ...]:
    """Every shipped template, files in name order."""
    out: list[Template] = []
    folder = resources.files("embodied_ws.assistant").joinpath("templates")
    if not folder.is_dir():
        return ()
    for res in sorted(folder.iterdir(), key=lambda r: r.name):
        if res.name.endswith(".yaml"):
            out += parse_templates(yaml.safe_load(res.read_text()), f"templates/{res.name}")
    return tuple(out)


def tools() -> list[str]:
    """The tools that have templates."""
    return sorted({t.tool for t in builtin_templates()})

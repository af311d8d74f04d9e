"""Per-tool message templates (issue 22): each tool's templates classify one synthetic message per failure
class, built from the string in the tool's source; a template match is never answered with another family."""

from __future__ import annotations

import io
import re

import pytest
import re2
import yaml

from embodied_ws.assistant.rules import builtin_rules
from embodied_ws.assistant.sources import _chunks_of
from embodied_ws.assistant.templates import builtin_templates, parse_templates, tools
from embodied_ws.assistant.triage import triage_chunks
from embodied_ws.core.errors import ConfigError

CLAIMED = {"mujoco", "rcl", "ros2-launch", "colcon", "cmake", "pip", "apt", "cuda", "nccl", "pytorch", "gazebo",
           "llama.cpp", "huggingface", "lerobot", "numpy", "rosdep", "dds"}  # fmt: skip


def _triage(text: str):
    return triage_chunks(_chunks_of(io.BytesIO(text.encode()), "t"))


def test_every_tool_we_claim_to_read_has_templates_with_a_source() -> None:
    assert set(tools()) == CLAIMED
    known = set(builtin_rules().ids())
    for t in builtin_templates():
        assert t.id in known, t
        assert "/" in t.source and len(t.source.split()) >= 2, f"{t.id}: source must name repo and path"
        re2.compile(t.pattern)  # the RE2 set and Python's re both accept it
        re.compile(t.pattern)


@pytest.mark.parametrize("tool", sorted(CLAIMED))
def test_each_template_classifies_its_tools_message(tool: str) -> None:
    templates = [t for t in builtin_templates() if t.tool == tool]
    assert templates
    for t in templates:
        f = _triage(t.example + "\n").findings()
        assert f, t.example
        assert f[0].rule.id == t.id, (tool, t.pattern, [x.rule.id for x in f])
        assert f[0].stage in ("rule", "template")


# A tool message inside text that the similarity stage (or another family's rule) would pull elsewhere.
CROSS = [
    # MuJoCo rejects an old model; the rest of the log talks about tokens and context
    ("mujoco.xml-parse", "loading prompt tokens into the context window for the agent\n"
     "ValueError: XML Error: Schema violation: unrecognized attribute: 'solreflimit'\nElement 'default', line 9\n"),
    # CUDA forward compatibility in a container: also mentions memory
    ("cuda.driver-too-old", "torch.cuda.is_available() False, out of memory? no:\n"
     "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Error 804: forward "
     "compatibility was attempted on non supported HW\n"),
    ("build.setup-py", "Starting >>> my_pkg\nERROR:colcon.colcon_core.entry_point:Exception loading extension "
     "'colcon_core.package_identification.python': No module named 'setuptools.config'\n"),
    ("gazebo.install", "ros2 run fails: executable not found?\nE: Unable to locate package ros-humble-gz-sim-vendor\n"),
    ("llm.model-format", "CUDA driver 535, cuda 12.2\nsafetensors_rust.SafetensorError: Error while deserializing "
     "header: HeaderTooLarge\n"),
    ("cuda.cpu-only-torch", "after pip install -U torch, rclpy node starts:\n"
     "  File \"/ws/src/policy/policy/node.py\", line 40, in __init__\n"
     "AssertionError: Torch not compiled with CUDA enabled\n"),
    ("mujoco.file-missing", "Error opening file '/ws/models/scene.xml': No such file or directory\n"
     "ValueError: XML Error: Error=XML_ERROR_FILE_NOT_FOUND ErrorID=3 (0x3) Line number=0\n"),
]  # fmt: skip


@pytest.mark.parametrize(("want", "text"), CROSS, ids=[w for w, _ in CROSS])
def test_a_template_match_is_never_answered_with_another_family(want: str, text: str) -> None:
    f = _triage(text).findings()
    assert f[0].rule.id == want, [x.rule.id for x in f]
    family = want.split(".", 1)[0]
    rules_and_templates = [x for x in f if x.stage != "similarity"]
    first_other = next((i for i, x in enumerate(f) if x.rule.category != family), len(f))
    assert all(x.rule.category == family for x in f[:first_other]) and first_other >= 1
    assert rules_and_templates[0].rule.category == family


def test_a_rule_of_another_family_ranks_after_the_template_family() -> None:
    # the gazebo.install rule (a shell's "command not found", no tool template) fires too; the MuJoCo
    # template decides the family
    text = "bash: gz: command not found\nValueError: XML Error: Schema violation: unrecognized element\n"
    f = _triage(text).findings()
    ids = [x.rule.id for x in f]
    assert ids[0] == "mujoco.xml-parse" and "gazebo.install" in ids
    assert f[ids.index("gazebo.install")].stage == "rule"


def test_a_broken_templates_file_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="bad pattern"):
        parse_templates(
            yaml.safe_load("tool: x\ntemplates:\n  - {id: a.b, pattern: '(', source: s p, example: e}"), "t"
        )
    with pytest.raises(ConfigError, match="missing key 'source'"):
        parse_templates({"tool": "x", "templates": [{"id": "a.b", "pattern": "x", "example": "x"}]}, "t")

"""Line parsers for the log formats a robotics workstation produces.

Each parser recognises one format and pulls out the severity and where the line comes from (node,
package, file:line, function). The TUI colours lines with it, and excerpts for the LLM are chosen
around the lines it marks as errors. The rules (``rules/*.yaml``) do the root-cause work; parsers only
structure lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

SEVERITIES = ("debug", "info", "warn", "error", "fatal")


@dataclass(frozen=True)
class LogLine:
    """One parsed line: ``kind`` is the format, ``source`` a node, package, file:line or function."""

    kind: str
    severity: str
    source: str
    message: str


_LEVEL = {
    "DEBUG": "debug", "INFO": "info", "WARN": "warn", "WARNING": "warn", "ERROR": "error", "FATAL": "fatal",
    "Dbg": "debug", "Msg": "info", "Wrn": "warn", "Err": "error", "Error": "error", "Warning": "warn",
}  # fmt: skip
_ERRORISH = re.compile(r"(?i)\b(error|failed|failure|fatal|invalid|cannot|not found)\b")

_RCL = re.compile(r"^(?:\[(?P<proc>[\w.\-]+)\] )?\[(?P<level>DEBUG|INFO|WARN|ERROR|FATAL)\] \[(?P<stamp>[\d.]+)\] "
                  r"\[(?P<node>[^\]]+)\]: (?P<msg>.*)")  # fmt: skip
_LAUNCH = re.compile(r"^\[(?P<level>DEBUG|INFO|WARNING|ERROR)\] \[(?P<proc>[^\]]+)\]: (?P<msg>.*)")
_COLCON = re.compile(r"^(?P<what>Starting >>>|Finished <<<|Failed\s+<<<|Aborted\s+<<<|--- stderr:) (?P<pkg>[\w\-]+)")
_CMAKE = re.compile(r"^CMake (?P<level>Error|Warning)(?: \(dev\))? at (?P<file>[^:]+):(?P<line>\d+)")
_TB_HEAD = re.compile(r"^(?:\[[\w.\-]+\] )?Traceback \(most recent call last\):")
_TB_FRAME = re.compile(r'^(?:\[[\w.\-]+\] )?\s+File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>\S+))?')
_PY_EXC = re.compile(
    r"^(?:\[[\w.\-]+\] )?(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))(?::\s*(?P<msg>.*))?$"
)
_CUDA = re.compile(
    r"(?P<what>CUDA error|cudaError\w+|CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+|NCCL (?:WARN|error)|nccl\w+Error)"
)
_MUJOCO = re.compile(r"^WARNING: (?P<msg>.*?)(?: Time = (?P<t>[\d.]+)\.)?$")
_GZ = re.compile(r"^(?:\[[\w.\-]+\] )?\[(?P<level>Err|Wrn|Msg|Dbg)\] \[(?P<file>[\w.]+):(?P<line>\d+)\] (?P<msg>.*)")
_LLAMA = re.compile(r"^(?P<func>llama_\w+|gguf_\w+|ggml_\w+|llm_load_\w+|llama_model_\w+): (?P<msg>.*)")


def _rcl(m: re.Match[str]) -> LogLine:
    return LogLine("rcl", _LEVEL[m["level"]], m["node"], m["msg"])


def _launch(m: re.Match[str]) -> LogLine:
    return LogLine("launch", _LEVEL[m["level"]], m["proc"], m["msg"])


def _colcon(m: re.Match[str]) -> LogLine:
    bad = m["what"].startswith(("Failed", "Aborted"))
    return LogLine("colcon", "error" if bad else "info", m["pkg"], m.string)


def _cmake(m: re.Match[str]) -> LogLine:
    return LogLine("cmake", _LEVEL[m["level"]], f"{m['file']}:{m['line']}", m.string)


def _tb_head(m: re.Match[str]) -> LogLine:
    return LogLine("python", "error", "", m.string)


def _tb_frame(m: re.Match[str]) -> LogLine:
    return LogLine("python", "info", f"{m['file']}:{m['line']}", m["func"] or "")


def _py_exc(m: re.Match[str]) -> LogLine:
    return LogLine("python", "warn" if m["exc"].endswith("Warning") else "error", m["exc"], m["msg"] or "")


def _cuda(m: re.Match[str]) -> LogLine:
    return LogLine("cuda", "error", m["what"], m.string)


def _mujoco(m: re.Match[str]) -> LogLine:
    return LogLine("mujoco", "warn", f"t={m['t']}" if m["t"] else "", m["msg"])


def _gz(m: re.Match[str]) -> LogLine:
    return LogLine("gazebo", _LEVEL[m["level"]], f"{m['file']}:{m['line']}", m["msg"])


def _llama(m: re.Match[str]) -> LogLine:
    return LogLine("llama.cpp", "error" if _ERRORISH.search(m["msg"]) else "info", m["func"], m["msg"])


#: tried in order; the first format that matches wins (the CUDA pattern searches anywhere in the line)
PARSERS: list[tuple[re.Pattern[str], Callable[[re.Match[str]], LogLine], bool]] = [
    (_RCL, _rcl, False), (_LAUNCH, _launch, False), (_COLCON, _colcon, False), (_CMAKE, _cmake, False),
    (_GZ, _gz, False), (_TB_HEAD, _tb_head, False), (_TB_FRAME, _tb_frame, False), (_LLAMA, _llama, False),
    (_MUJOCO, _mujoco, False), (_CUDA, _cuda, True), (_PY_EXC, _py_exc, False),
]  # fmt: skip


def parse_line(text: str) -> LogLine:
    """Parse one line (unknown formats become ``text`` lines with a keyword-based severity)."""
    for pattern, build, anywhere in PARSERS:
        m = pattern.search(text) if anywhere else pattern.match(text)
        if m:
            return build(m)
    return LogLine("text", "error" if _ERRORISH.search(text) else "info", "", text)


def is_error(text: str) -> bool:
    """True for error and fatal lines."""
    return parse_line(text).severity in ("error", "fatal")

"""The error lines of a log, with where they come from: the input of the second (similarity) stage.

A line counts when it carries an error-ish keyword (``error``, ``failed``, ``cannot``, ``not found``, an
exception name ...); warnings are kept apart, so a log with warnings only can still be recognised as
harmless noise and a log with neither says so. Each kept line is tagged with its structure — the tool
that printed it (``parsers.parse_line``: rcl, launch, colcon, cmake, python, cuda, gazebo, llama.cpp),
whether it sits in a colcon ``--- stderr:`` block, the exception type, the ``[node-N]`` process — because
the class of a failure shows in that structure more than in a project's own names.

Bounded work on huge logs: keyword positions come from one RE2 pass per chunk (a DFA: Python's ``re``
tries every keyword at every byte and takes ~1 s per 10 MB; RE2 ~7 ms), and only the first ``HEAD`` and the
last ``TAIL`` lines of each kind are kept.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

import re2

from embodied_ws.assistant.parsers import parse_line

HEAD = 40
TAIL = 160
_BLOCK_LOOKBACK = 1 << 18

_ERROR = re2.compile(
    rb"(?i)error|fail|fatal|exception|traceback|cannot|can't|could not|couldn't|unable to|not found|no such|"
    rb"undefined|segmentation|core dumped|abort|killed|denied|refused|timed out|invalid|unsupported|"
    rb"incompatible|not installed|no module|missing|mismatch|out of memory|exceed|insufficient|too many|too old|"
    rb"unrecognized|no kernel image|\bE: "
)
_WARN = re2.compile(rb"(?i)warn|deprecat|\[Wrn\]")
_NOT_AN_ERROR = re2.compile(r"(?i)\b0 (?:errors?|failed)\b|error[_ ]?(?:count|rate)\s*[=:]\s*0\b|-Werror|-Wno-error")
_EXC = re.compile(r"\b([A-Z][A-Za-z]*(?:Error|Exception|Exit|Warning))\b")
_PROC = re.compile(r"^\[([A-Za-z_][\w.\-]*?)(?:-\d+)?\] ")
_WORDS = re.compile(r"[A-Za-z_][A-Za-z0-9_.+\-]*")


@dataclass(frozen=True)
class TaggedLine:
    """One kept line: its number, text, ``error`` or ``warn``, and structure tags (``tool:cmake``, ``exc:X``)."""

    line: int
    text: str
    severity: str
    tags: tuple[str, ...]


def tags_of(text: str, in_stderr_block: bool) -> tuple[str, ...]:
    """Structure tags of one line: printing tool, colcon stderr block, exception type, launch process."""
    parsed = parse_line(text)
    tags = [f"tool:{parsed.kind}"]
    if in_stderr_block:
        tags.append("block:colcon-stderr")
    tags += [f"exc:{e}" for e in _EXC.findall(text)[:2]]
    proc = _PROC.match(text)
    if proc:
        tags.append("from:launch-process")
    return tuple(tags)


class ErrorLineCollector:
    """Keeps the first and last error (and warning) lines of a stream of chunks."""

    def __init__(self) -> None:
        self.head: list[TaggedLine] = []
        self.tail: deque[TaggedLine] = deque(maxlen=TAIL)
        self.warn_head: list[TaggedLine] = []
        self.warn_tail: deque[TaggedLine] = deque(maxlen=TAIL // 4)
        self.n_error = 0
        self.n_warn = 0
        self._stderr_block = False

    def feed(self, data: bytes, first_line: int) -> None:
        """Scan a run of whole lines starting at line ``first_line``."""
        last_start = -1
        line_no, counted_to = first_line, 0
        for m in _ERROR.finditer(data) if self._wants_all() else self._sampled(data):
            start = data.rfind(b"\n", 0, m.start()) + 1
            if start == last_start:
                continue
            last_start = start
            end = data.find(b"\n", start)
            end = len(data) if end < 0 else end
            line_no += data.count(b"\n", counted_to, start)
            counted_to = start
            text = data[start:end].decode("utf-8", "replace").rstrip("\r")
            self._keep(line_no, text, self._in_stderr_block(data, start))
        self._stderr_block = self._in_stderr_block(data, len(data))
        if self.n_error == 0:  # warnings only matter when there is no error line at all
            for m in _WARN.finditer(data[: 1 << 20]):
                start = data.rfind(b"\n", 0, m.start()) + 1
                end = data.find(b"\n", start)
                text = data[start : len(data) if end < 0 else end].decode("utf-8", "replace").rstrip("\r")
                line = first_line + data.count(b"\n", 0, start)
                item = TaggedLine(line, text, "warn", tags_of(text, False))
                if not self.warn_tail or self.warn_tail[-1].line != line:
                    self.n_warn += 1
                    (self.warn_head.append if len(self.warn_head) < HEAD // 4 else self.warn_tail.append)(item)

    def _in_stderr_block(self, data: bytes, pos: int) -> bool:
        """Whether ``pos`` lies inside a colcon ``--- stderr: PKG`` block (looked up near ``pos`` only)."""
        lo = max(0, pos - _BLOCK_LOOKBACK)
        opened = data.rfind(b"--- stderr: ", lo, pos)
        closed = max(
            data.rfind(b"\n---\n", lo, pos), data.rfind(b"Finished <<<", lo, pos), data.rfind(b"Failed ", lo, pos)
        )
        if opened < 0 and closed < 0:
            return self._stderr_block  # no marker nearby: as the previous chunk ended
        return opened > closed

    def _wants_all(self) -> bool:
        return len(self.head) < HEAD

    def _sampled(self, data: bytes):
        """Past the head, only the last part of a chunk can still reach the kept tail."""
        window = 1 << 19
        cut = data.rfind(b"\n", 0, max(0, len(data) - window)) + 1 if len(data) > window else 0
        return _ERROR.finditer(data, cut)

    def _keep(self, line_no: int, text: str, in_block: bool) -> None:
        if _NOT_AN_ERROR.search(text) or len(text) > 2000:
            return
        item = TaggedLine(line_no, text, "error", tags_of(text, in_block))
        self.n_error += 1
        if len(self.head) < HEAD:
            self.head.append(item)
        else:
            self.tail.append(item)

    def lines(self) -> list[TaggedLine]:
        """The kept error lines in log order; the warning lines when the log has no error line."""
        if self.head:
            return self.head + list(self.tail)
        return self.warn_head + list(self.warn_tail)

    @property
    def has_errors(self) -> bool:
        """Whether any error line was seen."""
        return bool(self.head)


def document(lines: list[TaggedLine]) -> str:
    """The text the similarity model reads: words of the lines (numbers, paths and hex dropped) plus tags."""
    words: list[str] = []
    for ln in lines:
        words += [w for w in _WORDS.findall(ln.text) if not w.startswith(("0x", "_home", "home"))]
        words += [t.replace(":", "_") for t in ln.tags]
    return " ".join(words)

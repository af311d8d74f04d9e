"""Progress of long work: a rich bar on a terminal, plain lines everywhere else (logs, docker, CI).

The rich bar renders only on a TTY, so ``make train > log``, ``docker compose logs`` and CI would see
nothing for a whole run. :class:`ProgressReporter` prints one plain line every ``interval`` seconds
when stdout is not a terminal (and, when given, appends the same lines to a log file in both cases)::

    train: 1,245,184/8,000,000 steps (15.6%) | 5.3k/s | succ 82% | eval 79% | 3m55s elapsed | ETA 21m14s

``EMBODIED_WS_PROGRESS_INTERVAL`` (seconds) overrides the default interval of 30 s.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: seconds between plain progress lines when stdout is not a terminal
DEFAULT_INTERVAL_S = 30.0


def _interval_from_env(default: float) -> float:
    raw = os.environ.get("EMBODIED_WS_PROGRESS_INTERVAL")
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        return default
    return value if value >= 0 and value == value and value != float("inf") else default


def format_duration(seconds: float) -> str:
    """``3h02m``, ``12m05s`` or ``42s``."""
    s = int(max(0.0, seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def _rate(value: float) -> str:
    return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.1f}"


class ProgressReporter:
    """One long job's progress: a rich bar on a TTY, a plain line per ``interval`` otherwise.

    :param name: what is progressing (``train``, ``tune`` ...), the line's first word
    :param total: how many units make the whole job
    :param unit: the unit's name in the plain line (``steps``, ``trials``, ``episodes``)
    :param enabled: False prints nothing on screen (``--json`` output); the log file still gets its lines
    :param interval: seconds between plain lines (``EMBODIED_WS_PROGRESS_INTERVAL`` overrides)
    :param log_file: also append every plain line to this file (terminal or not)
    :param tty: force the terminal decision (default: ``sys.stdout.isatty()``)
    """

    def __init__(
        self,
        name: str,
        total: int,
        unit: str = "steps",
        enabled: bool = True,
        interval: float = DEFAULT_INTERVAL_S,
        log_file: Path | None = None,
        tty: bool | None = None,
    ) -> None:
        self.name, self.total, self.unit, self.enabled = name, int(total), unit, enabled
        self.interval = _interval_from_env(interval)
        self.log_file = log_file
        self.tty = sys.stdout.isatty() if tty is None else tty
        self._bar: Any = None
        self._task: Any = None
        self._t0 = 0.0
        self._start_completed = 0
        self._last_line = -float("inf")
        self.completed = 0
        self.stats = ""

    def start(self, completed: int = 0) -> None:
        """Begin (``completed`` units may already be done: a resumed run)."""
        self._t0 = time.monotonic()
        self.completed = self._start_completed = int(completed)
        if self.enabled and self.tty:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn(f"[bold]{self.name}"),
                BarColumn(),
                TextColumn(f"{{task.completed:,}}/{{task.total:,}} {self.unit}"),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
            )
            self._bar.start()
            self._task = self._bar.add_task(self.name, total=self.total, completed=self.completed, stats="")
        self._emit(force=True)

    def update(self, completed: int, stats: str = "") -> None:
        """Record progress; a plain line is printed when ``interval`` has passed since the last one."""
        self.completed, self.stats = int(completed), stats
        if self._bar is not None:
            self._bar.update(self._task, completed=self.completed, stats=stats)
        self._emit(force=False)

    def close(self) -> None:
        """Final line and bar stop (idempotent)."""
        if self._bar is not None:
            self._bar.update(self._task, completed=self.completed)
            self._bar.stop()
            self._bar = None
        if self._t0:
            self._emit(force=True)
            self._t0 = 0.0

    def line(self) -> str:
        """The plain progress line for the current state."""
        elapsed = time.monotonic() - self._t0
        done = self.completed - self._start_completed
        rate = done / elapsed if elapsed > 0 else 0.0
        pct = 100.0 * self.completed / self.total if self.total else 0.0
        parts = [f"{self.name}: {self.completed:,}/{self.total:,} {self.unit} ({pct:.1f}%)", f"{_rate(rate)}/s"]
        if self.stats:
            parts.append(self.stats)
        parts.append(f"{format_duration(elapsed)} elapsed")
        if rate > 0 and self.completed < self.total:
            parts.append(f"ETA {format_duration((self.total - self.completed) / rate)}")
        return " | ".join(parts)

    def _emit(self, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last_line < self.interval:
            return
        if not (self.enabled and not self.tty) and self.log_file is None:
            return
        self._last_line = now
        text = self.line()
        if self.enabled and not self.tty:
            print(text, flush=True)
        if self.log_file is not None:
            with open(self.log_file, "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")


def track(n: int, name: str, unit: str = "items", enabled: bool = True) -> Iterator[int]:
    """``range(n)`` reported through a :class:`ProgressReporter` (bar on a TTY, plain lines otherwise)."""
    reporter = ProgressReporter(name, n, unit, enabled=enabled)
    reporter.start()
    try:
        for i in range(n):
            yield i
            reporter.update(i + 1)
    finally:
        reporter.close()

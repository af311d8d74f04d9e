"""Log view: lines with errors highlighted, jump to next/previous error."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog

from embodied_ws.assistant.parsers import parse_line

MAX_LINES = 50_000
STYLES = {"fatal": "bold red", "error": "bold red", "warn": "yellow", "debug": "dim"}


class LogView(RichLog):
    """A bounded log view that remembers where the error lines are."""

    def __init__(self, **kwargs) -> None:
        super().__init__(max_lines=MAX_LINES, wrap=False, highlight=False, markup=False, **kwargs)
        self.error_rows: list[int] = []
        self.rows = 0
        self.current_error = -1
        self.raw_lines: list[str] = []

    def add_lines(self, lines: list[str]) -> None:
        """Append lines coloured by parsed severity; error lines are indexed for jumping."""
        for line in lines:
            severity = parse_line(line).severity
            if severity in ("error", "fatal"):
                self.error_rows.append(self.rows)
            self.write(Text(line, style=STYLES.get(severity, "")))
            self.rows += 1
        self.raw_lines.extend(lines)
        del self.raw_lines[:-MAX_LINES]

    def jump(self, step: int) -> int | None:
        """Scroll to the next (+1) or previous (-1) error line; returns its row."""
        if not self.error_rows:
            return None
        self.current_error = (self.current_error + step) % len(self.error_rows)
        row = self.error_rows[self.current_error]
        self.scroll_to(y=max(0, row - 3), animate=False)
        return row

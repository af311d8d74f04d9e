"""Chat panel: the local model's streamed answer, with R1's reasoning collapsed apart from it."""

from __future__ import annotations

from typing import override

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Collapsible, Static

from embodied_ws.assistant.llm import split_think


class ChatTurn(VerticalScroll):
    """One question and its streaming answer."""

    def __init__(self, question: str, **kwargs) -> None:
        super().__init__(classes="turn", **kwargs)
        self.question = question
        self.text = ""
        self.tokens = 0
        # created up front so streamed pieces can land before the turn is mounted
        self._think = Static("", classes="think-text", markup=False)
        self._answer = Static("…", classes="answer", markup=False)

    @override
    def compose(self) -> ComposeResult:
        yield Static(f"[b]you:[/b] {self.question}", classes="question")
        with Collapsible(title="reasoning", collapsed=True, classes="think"):
            yield self._think
        yield self._answer

    def add(self, piece: str) -> None:
        """Append a streamed piece and re-split reasoning from answer."""
        self.text += piece
        self.tokens += 1
        parts = split_think(self.text)
        self._think.update(parts.think)
        self._answer.update(parts.answer or "…")

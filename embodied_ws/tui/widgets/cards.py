"""Triage cards: one per finding, with cause, fix steps, verify commands and a copy button."""

from __future__ import annotations

from typing import override

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Button, Static

from embodied_ws.assistant.triage import Finding


class FindingCard(Vertical):
    """A finding rendered as a card; second-stage (similarity) findings get the ``similar`` class and a label."""

    def __init__(self, finding: Finding, **kwargs) -> None:
        classes = "card similar" if finding.stage == "similarity" else "card"
        super().__init__(classes=classes, **kwargs)
        self.finding = finding

    @override
    def compose(self) -> ComposeResult:
        f, r = self.finding, self.finding.rule
        if f.stage in ("rule", "template"):
            meta = f"{r.id} · {f.tool + ' message' if f.tool else 'rule'} · {f.confidence:.0%} · {f.count}×"
        else:
            meta = f"{r.id} · similar to known cases, unconfirmed · {f.confidence:.0%}"
        yield Static(f"[b]{r.title}[/b]  [dim]{meta}[/dim]", classes="card-title")
        yield Static(r.cause, classes="card-cause")
        ev = "\n".join(f"line {e.line}: {e.text.strip()[:160]}" for e in f.evidence[:3])
        yield Static(ev, classes="card-evidence", markup=False)
        yield Static("\n".join(f"• {x}" for x in r.fix), classes="card-fix", markup=False)
        if r.verify:
            yield Static("\n".join(f"$ {x}" for x in r.verify), classes="card-verify", markup=False)
        yield Button("copy fix", id=f"copy-{r.id.replace('.', '-')}", classes="copy")

    def fix_text(self) -> str:
        """The fix steps and verify commands, for the clipboard."""
        r = self.finding.rule
        return "\n".join([*r.fix, *r.verify])

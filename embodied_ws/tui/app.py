"""``embodied-ws assistant``: log view, triage cards, hypothesis checklist and local-LLM chat.

Long work runs in thread workers (file loading, following a command, token streaming). Workers never touch
shared state: they post messages (:class:`LogChunk`, :class:`LogLines`) and the UI thread alone owns the
:class:`Triage` (toolong's scanner pattern). Starting a new source cancels the previous one, and the loops
check for cancellation; a worker that fails becomes a notification, not a crash. Commands typed in the
input bar: ``/open PATH``, ``/follow CMD ...``, ``/paste TEXT``, ``/save PATH``; anything else is a
question for the local model. Nothing the model says is ever executed.
"""

from __future__ import annotations

import shlex
import threading
from pathlib import Path
from typing import ClassVar, override

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Button, Footer, Header, Input, SelectionList, Static
from textual.worker import Worker, WorkerState, get_current_worker

from embodied_ws.assistant.doctor import is_error_line
from embodied_ws.assistant.redact import redact
from embodied_ws.assistant.sources import Chunk, follow_command, lines_of, read_chunks
from embodied_ws.assistant.triage import Triage
from embodied_ws.core.errors import UserError
from embodied_ws.tui.widgets.cards import FindingCard
from embodied_ws.tui.widgets.chat import ChatTurn
from embodied_ws.tui.widgets.logview import LogView

#: answer length of a chat turn (short replies keep the chat responsive)
CHAT_TOKENS = 256


class LogChunk(Message):
    """A worker read a chunk of a log (triaged and shown by the UI thread)."""

    def __init__(self, chunk: Chunk, lines: list[str]) -> None:
        super().__init__()
        self.chunk = chunk
        self.lines = lines


class LogLines(Message):
    """A worker read lines of a followed command's output."""

    def __init__(self, lines: list[str], source: str) -> None:
        super().__init__()
        self.lines = lines
        self.source = source


class SourceDone(Message):
    """A source finished (or failed with a one-line user error)."""

    def __init__(self, error: str = "") -> None:
        super().__init__()
        self.error = error


class AssistantApp(App[int]):
    """The terminal debug assistant.

    :param log: a log file or folder to open at start (optional)
    :param model: GGUF model; without it (or when missing) the app runs rules-only
    :param follow: a command to run and follow at start
    """

    CSS_PATH = "app.tcss"
    TITLE = "embodied_ws assistant"
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("n", "next_error", "next error"),
        Binding("N", "prev_error", "previous error"),
        Binding("t", "triage", "re-triage"),
        Binding("ctrl+q", "quit", "quit"),
    ]

    def __init__(self, log: str | None = None, model: Path | None = None, follow: list[str] | None = None) -> None:
        super().__init__()
        self.log_source = log
        self.model_path = model
        self.follow = follow
        self.triage = Triage()
        self.llm = None
        self.checked: set[str] = set()
        self.turns: list[ChatTurn] = []
        self._llm_lock = threading.Lock()
        self._closing = False

    # ------------------------------------------------------------------ layout
    @override
    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="banner")
        with Horizontal(id="main"):
            yield LogView(id="log")
            with Vertical(id="side"):
                yield VerticalScroll(id="cards")
                yield Static("[b]Hypotheses[/b] (tick what you checked)", id="checklist-title")
                yield SelectionList[str](id="checklist")
        yield VerticalScroll(id="chat")
        yield Input(placeholder="ask the model, or /open PATH · /follow CMD · /paste TEXT · /save PATH", id="ask")
        yield Footer()

    def on_mount(self) -> None:
        """Load the local model (else the banner says rules only), then start the ``--log`` and ``--follow`` workers."""
        self._load_model()
        if self.log_source:
            self.load_source(self.log_source)
        if self.follow:
            self.follow_cmd(self.follow)

    # ------------------------------------------------------------------ model
    def _load_model(self) -> None:
        from embodied_ws.assistant.download import default_model_path

        banner = self.query_one("#banner", Static)
        path = self.model_path or default_model_path()
        if not path.is_file():
            banner.update(f"rules only: no model at {path} (fetch one with `embodied-ws assistant download`)")
            banner.add_class("warn")
            return
        try:
            from embodied_ws.assistant.llm import load_llm

            self.llm = load_llm(path)
            name = self.llm.shape.name if self.llm.shape else path.name
            banner.update(f"model: {name} · {self.llm.describe()}")
        except UserError as exc:
            banner.update(f"rules only: {exc.line()}")
            banner.add_class("warn")

    # ------------------------------------------------------------------ sources (workers post messages)
    @work(thread=True, exclusive=True, group="source", exit_on_error=False)
    def load_source(self, source: str) -> None:
        """Read a file/folder in chunks and post them to the UI thread."""
        worker = get_current_worker()
        try:
            for chunk in read_chunks(source):
                if worker.is_cancelled:
                    return
                self.post_message(LogChunk(chunk, [text for _, text in lines_of(chunk)]))
        except UserError as exc:
            self.post_message(SourceDone(exc.line()))
            return
        self.post_message(SourceDone())

    @work(thread=True, exclusive=True, group="source", exit_on_error=False)
    def follow_cmd(self, argv: list[str]) -> None:
        """Run a user-given command and post its output live, in batches."""
        worker = get_current_worker()
        batch: list[str] = []
        try:
            for line in follow_command(argv):
                if worker.is_cancelled:
                    return  # closing the generator kills the command
                batch.append(line)
                if len(batch) >= 20:
                    self.post_message(LogLines(batch, "<command>"))
                    batch = []
        except UserError as exc:
            self.post_message(SourceDone(exc.line()))
            return
        if batch:
            self.post_message(LogLines(batch, "<command>"))
        self.post_message(SourceDone())

    def on_log_chunk(self, message: LogChunk) -> None:
        """UI thread: triage a chunk and show its lines."""
        self.triage.feed(message.chunk)
        self._show_lines(message.lines)

    def on_log_lines(self, message: LogLines) -> None:
        """UI thread: triage followed lines and show them."""
        self.triage.feed_text("\n".join(message.lines), message.source)
        self._show_lines(message.lines)
        self.refresh_findings()

    def on_source_done(self, message: SourceDone) -> None:
        """UI thread: a source ended; report its error, if any, and refresh the cards."""
        if message.error:
            self.notify(message.error, severity="error")
        self.refresh_findings()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A worker that raised becomes a notification (the app keeps running)."""
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.notify(f"{event.worker.name} failed: {type(error).__name__}: {error}", severity="error")

    def _show_lines(self, lines: list[str]) -> None:
        self.query_one(LogView).add_lines(lines)

    # ------------------------------------------------------------------ findings and checklist
    def refresh_findings(self) -> None:
        """Rebuild the cards and the hypothesis checklist from the current triage."""
        cards = self.query_one("#cards", VerticalScroll)
        cards.remove_children()
        findings = self.triage.findings()
        if not findings:
            cards.mount(Static("No known failure pattern yet. Ask the model below.", classes="empty"))
        elif self.triage.is_unsure(findings):  # no id presented as the cause: the error lines, the closest ids
            lines = "\n".join(ln.text.strip()[:160] for ln in self.triage.errors.lines()[-5:])
            closest = "; ".join(f"{f.rule.id} ({f.confidence:.0%})" for f in findings[:3])
            text = f"unsure: no known cause fits with enough confidence.\nthe error lines are:\n{lines}\n"
            cards.mount(Static(text + f"closest known causes: {closest}", id="unsure", classes="empty", markup=False))
        cards.mount_all([FindingCard(f) for f in findings[:8]])
        checklist = self.query_one("#checklist", SelectionList)
        checklist.clear_options()
        for f in findings[:8]:
            for cmd in f.rule.verify:
                checklist.add_option(
                    (f"{f.rule.id}: {cmd}", f"{f.rule.id}|{cmd}", f"{f.rule.id}|{cmd}" in self.checked)
                )

    @on(SelectionList.SelectedChanged, "#checklist")
    def _ticked(self, event: SelectionList.SelectedChanged) -> None:
        self.checked = set(event.selection_list.selected)

    @on(Button.Pressed, ".copy")
    def _copy(self, event: Button.Pressed) -> None:
        card = event.button.parent
        if isinstance(card, FindingCard):
            self.copy_to_clipboard(card.fix_text())
            self.notify("fix copied to the clipboard")

    # ------------------------------------------------------------------ input bar
    @on(Input.Submitted, "#ask")
    def _submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        event.input.value = ""
        if not text:
            return
        cmd, _, rest = text.partition(" ")
        if cmd == "/open":
            self.load_source(rest.strip())
        elif cmd == "/follow":
            self.follow_cmd(shlex.split(rest))
        elif cmd == "/paste":
            self.triage.feed_text(rest, "<paste>")
            self._show_lines(rest.splitlines())
            self.refresh_findings()
        elif cmd == "/save":
            self.save_session(Path(rest.strip() or "assistant-session.md"))
        else:
            self.ask(text)

    def ask(self, question: str) -> None:
        """Ask the local model about the log (rules-only mode says so)."""
        turn = ChatTurn(question)
        self.turns.append(turn)
        self.query_one("#chat", VerticalScroll).mount(turn)
        if self.llm is None:
            turn.add("No local model loaded (rules only). Download one with `embodied-ws assistant download`.")
            return
        self.stream_answer(turn, question)

    def stream_answer(self, turn: ChatTurn, question: str) -> None:
        """Snapshot the findings and log lines on the UI thread, then stream the answer in a worker."""
        lines = list(self.query_one(LogView).raw_lines)
        self._stream(turn, question, self.triage.findings(), lines)

    @work(thread=True, exclusive=True, group="llm", exit_on_error=False)
    def _stream(self, turn: ChatTurn, question: str, findings: list, lines: list[str]) -> None:
        from embodied_ws.assistant.prompt import error_excerpts, pack_context

        worker = get_current_worker()
        excerpts = error_excerpts(lines, is_error_line) or ["\n".join(lines[-15:])]
        packed = pack_context(
            question, findings, excerpts, budget=self.llm.prompt_budget(CHAT_TOKENS), count=self.llm.count_tokens
        )
        pieces = self.llm.stream(packed.system, packed.user, max_tokens=CHAT_TOKENS)
        try:
            while True:
                with self._llm_lock:  # the model is closed on unmount only between tokens
                    if worker.is_cancelled or self._closing:
                        return
                    piece = next(pieces, None)
                if piece is None:
                    return
                self.call_from_thread(turn.add, piece)
        finally:
            with self._llm_lock:
                pieces.close()

    def save_session(self, path: Path) -> None:
        """Write findings, ticked checks and the chat as Markdown, with secrets redacted."""
        out = ["# embodied_ws assistant session", ""]
        for f in self.triage.findings():
            out.append(f"- **{f.rule.id}** ({f.confidence:.0%}): {f.rule.cause}")
        out += ["", "## Checked", *[f"- [x] {c.replace('|', ': ')}" for c in sorted(self.checked)], "", "## Chat"]
        for t in self.turns:
            out += [f"**you:** {t.question}", "", t.text, ""]
        path.write_text(redact("\n".join(out)))
        self.notify(f"session saved to {path}")

    # ------------------------------------------------------------------ actions
    def action_next_error(self) -> None:
        """Key ``n``: scroll the log to the next error line."""
        self.query_one(LogView).jump(+1)

    def action_prev_error(self) -> None:
        """Key ``N``: scroll the log to the previous error line."""
        self.query_one(LogView).jump(-1)

    def action_triage(self) -> None:
        """Key ``t``: triage the log again and redraw the finding cards."""
        self.refresh_findings()

    def on_unmount(self) -> None:
        """Stop streaming, then free the model (never while a worker is inside it)."""
        self._closing = True
        if self.llm is not None:
            with self._llm_lock:
                self.llm.close()


def run_app(log: str | None, model: Path | None, follow: list[str] | None) -> int:
    """Start the TUI (blocks until the user quits)."""
    AssistantApp(log, model, follow).run()
    return 0

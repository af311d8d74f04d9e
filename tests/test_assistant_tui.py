"""The Textual assistant driven by Pilot: rules-only mode, triage cards, error jumps, checklist, LLM streaming."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tiny_gguf import build_tiny_gguf

from embodied_ws.tui.app import AssistantApp
from embodied_ws.tui.widgets.cards import FindingCard
from embodied_ws.tui.widgets.logview import LogView

LOGS = Path(__file__).parent / "fixtures" / "logs"


async def _settle(pilot, until, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.05)):
        await pilot.pause(0.05)
        if until():
            return
    raise AssertionError("condition not reached in time")


def test_rules_only_mode_cards_and_error_jumps(tmp_path: Path) -> None:
    async def run() -> None:
        app = AssistantApp(str(LOGS / "ros.parameter-type.log"), model=tmp_path / "missing.gguf")
        async with app.run_test(size=(160, 50)) as pilot:
            await _settle(pilot, lambda: len(app.query(FindingCard)) > 0)
            banner = str(app.query_one("#banner").render())
            assert "rules only" in banner
            cards = list(app.query(FindingCard))
            assert cards[0].finding.rule.id == "ros.parameter-type"
            log = app.query_one(LogView)
            assert log.error_rows, "error lines are indexed"
            await pilot.press("n")
            first = log.error_rows[log.current_error]
            await pilot.press("n")
            assert log.error_rows[log.current_error] != first or len(log.error_rows) == 1
            # tick a hypothesis
            checklist = app.query_one("#checklist")
            checklist.select_all()
            await pilot.pause(0.1)
            assert any(c.startswith("ros.parameter-type|") for c in app.checked)
            # asking without a model says so instead of failing
            await pilot.click("#ask")
            await pilot.press(*"why", "enter")
            await _settle(pilot, lambda: bool(app.turns) and "rules only" in app.turns[0].text)

    asyncio.run(run())


def test_paste_and_save_session_redacts(tmp_path: Path) -> None:
    async def run() -> None:
        app = AssistantApp(None, model=tmp_path / "missing.gguf")
        async with app.run_test(size=(160, 50)) as pilot:
            app.query_one("#ask").focus()
            app.query_one(
                "#ask"
            ).value = "/paste RuntimeError: CUDA out of memory. token=hf_abcdefghijklmnopqrstuvwxyz123"
            await pilot.press("enter")
            await _settle(pilot, lambda: any(c.finding.rule.id == "cuda.oom" for c in app.query(FindingCard)))
            out = tmp_path / "session.md"
            app.query_one("#ask").value = f"/save {out}"
            await pilot.press("enter")
            await _settle(pilot, out.is_file)
            assert "cuda.oom" in out.read_text() and "hf_abcdef" not in out.read_text()

    asyncio.run(run())


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def test_tiny_gguf_streams_tokens_into_the_chat(tiny_model: Path) -> None:
    async def run() -> None:
        app = AssistantApp(str(LOGS / "cuda.driver-too-old.log"), model=tiny_model)
        async with app.run_test(size=(160, 50)) as pilot:
            assert app.llm is not None
            assert "model: tiny-test-llama" in str(app.query_one("#banner").render())
            await _settle(pilot, lambda: len(app.query(FindingCard)) > 0)
            app.query_one("#ask").focus()
            app.query_one("#ask").value = "what should I check?"
            await pilot.press("enter")
            await _settle(pilot, lambda: bool(app.turns) and app.turns[0].tokens >= 5, timeout=60)
            assert app.turns[0].text

    asyncio.run(run())

"""The Textual assistant driven by Pilot: rules-only mode, triage cards, error jumps, checklist, LLM streaming."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.widgets import Static
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


def test_second_stage_cards_look_different_and_say_so(tmp_path: Path) -> None:
    async def run() -> None:
        app = AssistantApp(None, model=tmp_path / "missing.gguf")
        async with app.run_test(size=(160, 50)) as pilot:
            app.query_one("#ask").focus()
            app.query_one(
                "#ask"
            ).value = "/paste [ERROR] [1.0] [x]: camera device /dev/video3 is busy, process has died"
            await pilot.press("enter")
            await _settle(pilot, lambda: len(app.query(FindingCard)) > 0)
            card = app.query(FindingCard).first()
            assert card.finding.stage == "similarity" and card.has_class("similar")
            assert "similar to known cases" in str(card.query(".card-title").first().render())
            # a guess below the calibrated threshold is not presented as the cause
            banner = str(app.query_one("#unsure", Static).render())
            assert banner.startswith("unsure:") and "camera device /dev/video3 is busy" in banner
            assert card.finding.rule.id in banner  # among the closest known causes

    asyncio.run(run())


def test_a_rule_answer_has_no_unsure_banner(tmp_path: Path) -> None:
    async def run() -> None:
        app = AssistantApp(None, model=tmp_path / "missing.gguf")
        async with app.run_test(size=(160, 50)) as pilot:
            app.query_one("#ask").focus()
            app.query_one("#ask").value = "/paste RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
            await pilot.press("enter")
            await _settle(pilot, lambda: len(app.query(FindingCard)) > 0)
            assert app.query(FindingCard).first().finding.rule.id == "cuda.oom"
            assert not app.query("#unsure")

    asyncio.run(run())


def test_following_a_command_while_pasting_keeps_both(tmp_path: Path) -> None:
    script = tmp_path / "emit.sh"
    script.write_text(
        'for i in $(seq 1 60); do echo "[INFO] [1.$i] [n]: line $i"; sleep 0.01; done\n'
        'echo "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"\n'
    )

    async def run() -> None:
        app = AssistantApp(None, model=tmp_path / "missing.gguf", follow=["bash", str(script)])
        async with app.run_test(size=(160, 50)) as pilot:
            app.query_one("#ask").focus()
            app.query_one("#ask").value = "/paste AttributeError: _ARRAY_API not found"
            await pilot.press("enter")
            ids = lambda: {c.finding.rule.id for c in app.query(FindingCard)}  # noqa: E731
            await _settle(pilot, lambda: {"cuda.oom", "python.numpy-version"} <= ids(), timeout=60)
            assert len(app.query_one(LogView).raw_lines) >= 62

    asyncio.run(run())


def test_a_failing_worker_becomes_a_notification_and_the_app_keeps_running(tmp_path: Path) -> None:
    async def run() -> None:
        app = AssistantApp(None, model=tmp_path / "missing.gguf")
        async with app.run_test(size=(160, 50)) as pilot:
            app.follow_cmd([])  # nothing to run: Popen raises IndexError inside the worker
            await _settle(pilot, lambda: any("IndexError" in n.message for n in app._notifications))
            app.load_source(str(tmp_path / "missing.log"))  # a one-line user error
            await _settle(pilot, lambda: len(app._notifications) >= 2)
            app.query_one("#ask").focus()
            app.query_one("#ask").value = "/paste RuntimeError: CUDA out of memory."
            await pilot.press("enter")
            await _settle(pilot, lambda: len(app.query(FindingCard)) > 0)  # still alive and working
            assert any("log file not found" in n.message for n in app._notifications)

    asyncio.run(run())


def test_a_new_source_cancels_the_followed_command(tmp_path: Path) -> None:
    async def run() -> None:
        app = AssistantApp(None, model=tmp_path / "missing.gguf", follow=["sleep", "30"])
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause(0.5)
            first = [w for w in app.workers if w.group == "source"]
            app.load_source(str(LOGS / "cuda.oom.log"))
            await _settle(pilot, lambda: len(app.query(FindingCard)) > 0)
            await _settle(pilot, lambda: all(w.is_finished for w in first), timeout=10)

    asyncio.run(run())

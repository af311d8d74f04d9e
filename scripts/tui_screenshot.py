"""Render the assistant TUI on a sample log and save an SVG screenshot (docs/assistant.svg)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from embodied_ws.tui.app import AssistantApp

ROOT = Path(__file__).resolve().parents[1]


async def main(out: Path) -> None:
    log = ROOT / "tests" / "fixtures" / "logs" / "ros.parameter-type.log"
    app = AssistantApp(str(log), model=Path("/nonexistent/model.gguf"))
    async with app.run_test(size=(150, 46)) as pilot:
        for _ in range(100):
            await pilot.pause(0.05)
            if app.query("FindingCard"):
                break
        await pilot.press("n")
        app.query_one("#checklist").select_all()
        app.query_one("#ask").focus()
        app.query_one("#ask").value = "why did the sim node die?"
        await pilot.press("enter")
        await pilot.pause(0.3)
        app.save_screenshot(str(out.name), str(out.parent))


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "assistant.svg"
    asyncio.run(main(target))
    print(target)

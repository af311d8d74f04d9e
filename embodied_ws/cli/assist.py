"""Verbs ``doctor`` and ``assistant`` (the debug assistant)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from embodied_ws.cli.argtypes import positive_int
from embodied_ws.core.errors import UserError

if TYPE_CHECKING:
    from embodied_ws.cli import AddVerb


def _cmd_doctor(args: argparse.Namespace) -> int:
    if args.env:
        from embodied_ws.assistant.env_doctor import gpu_report, run_checks

        checks = run_checks()
        if args.json:
            print(json.dumps({"checks": [c.to_dict() for c in checks], "gpu": gpu_report()}))
        else:
            _print_gpu_table(gpu_report())
            for c in checks:
                print(
                    f"[{c.status:4}] {c.name}: {c.detail}"
                    + (f"\n       fix: {c.fix}" if c.fix and c.status != "ok" else "")
                )
        return 0
    if not args.log:
        raise UserError("give a log file, a folder, '-' for stdin, or --env", "doctor")
    from embodied_ws.assistant.doctor import run

    rules = [Path(r) for r in args.rules or []]
    model = Path(args.model) if args.model else None
    return run(args.log, args.json, args.llm, model, rules, max_tokens=args.max_tokens)


def _print_gpu_table(report: dict[str, object]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="GPU stack", show_header=False)
    for key, value in report.items():
        table.add_row(key, "-" if value is None else str(value))
    Console().print(table)


def _cmd_assistant(args: argparse.Namespace) -> int:
    if args.log == "download":
        from embodied_ws.assistant.download import default_manifest, download

        m = default_manifest()
        dest = Path(args.dest).expanduser() if args.dest else Path.home() / ".cache" / "embodied_ws" / "models"

        def started(size: int | None) -> None:  # printed once the hub answered: a failure stays one line
            gb = f", {size / 1e9:.1f} GB" if size else ""
            print(f"downloading {m.name} ({m.repo_id}/{m.filename}{gb}) to {dest}", file=sys.stderr)

        print(download(m, dest, on_start=started))
        return 0
    from embodied_ws.tui.app import run_app

    return run_app(args.log, Path(args.model) if args.model else None, args.follow or None)


def register(add_verb: AddVerb) -> None:
    """Add ``doctor`` and ``assistant``."""
    d = add_verb(
        "doctor",
        _cmd_doctor,
        "Triage a log offline (rules, optionally the local LLM), or check the environment.",
        "examples: colcon build 2>&1 | embodied-ws doctor -\n          embodied-ws doctor ~/.ros/log --json\n"
        "          embodied-ws doctor --env",
    )
    d.add_argument("log", nargs="?", help="log file, folder of logs (~/.ros/log, colcon log/), or - for stdin")
    d.add_argument("--env", action="store_true", help="check Python/ROS/torch/CUDA/MuJoCo GL/ffmpeg/llama.cpp")
    d.add_argument("--llm", action="store_true", help="add the local model's explanation")
    d.add_argument("--model", help="GGUF file (default: the downloaded default model)")
    d.add_argument(
        "--max-tokens", type=positive_int(32768), metavar="N",
        help="longest answer of the local model, its reasoning included (default: 768)",
    )  # fmt: skip
    d.add_argument("--rules", action="append", metavar="YAML", help="extra rules file; repeatable")

    a = add_verb(
        "assistant",
        _cmd_assistant,
        "Terminal assistant (Textual): log view, triage cards, local LLM chat.",
        "examples: embodied-ws assistant build.log\n          embodied-ws assistant --follow colcon build\n"
        "          embodied-ws assistant download",
    )
    a.add_argument("log", nargs="?", help="log file to open, or 'download' to fetch the default model")
    a.add_argument("--model", help="GGUF file (default: the downloaded default model; rules-only if missing)")
    a.add_argument("--follow", nargs=argparse.REMAINDER, help="run a command and follow its output")
    a.add_argument("--dest", help="download folder (default ~/.cache/embodied_ws/models)")

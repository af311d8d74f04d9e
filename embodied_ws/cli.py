"""``embodied-ws <verb>``: the command-line entry point.

Bad input prints one line ``error: <file|key>: <what is wrong>`` and exits with code 2.
Heavy libraries are imported inside the verbs so ``embodied-ws --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from embodied_ws.core.errors import EXIT_ENV_LOST, EXIT_USER_ERROR, EnvLost, UserError

EXAMPLES = {
    "train": "example: embodied-ws train --config reach --name reach1 --set train.total_timesteps=200000",
    "eval": "example: embodied-ws eval reach1 --episodes 20",
    "robots": "example: embodied-ws robots --json",
    "doctor": "examples: colcon build 2>&1 | embodied-ws doctor -\n          embodied-ws doctor ~/.ros/log --json\n"
    "          embodied-ws doctor --env",
    "assistant": "examples: embodied-ws assistant build.log\n          embodied-ws assistant --follow colcon build\n"
    "          embodied-ws assistant download",
}


def _cmd_train(args: argparse.Namespace) -> int:
    from embodied_ws.config.loader import load_config
    from embodied_ws.rl.train import train

    overrides = list(args.set or [])
    if args.robot:
        overrides.append(f"env.robot={args.robot}")
    if args.task:
        overrides.append(f"env.task={args.task}")
    run_dir = Path(args.runs) / args.name
    if args.resume:
        saved = run_dir / "config.yaml"
        if not saved.is_file():
            raise UserError("no such run to resume (config.yaml missing)", str(run_dir))
        cfg = load_config(saved, overrides)
    else:
        cfg = load_config(args.config, overrides)
    _check_setup(cfg)
    summary = train(cfg, args.name, Path(args.runs), resume=args.resume, progress=not args.json)
    brief = {k: summary[k] for k in ("name", "steps", "final_success", "physics_resets", "interrupted")}
    brief["env_steps_per_s"] = round(summary["time"]["env_steps_per_s"], 1)
    brief["report"] = str(run_dir / "report.md")
    brief["policy"] = str(run_dir / "policy")
    print(json.dumps(brief) if args.json else "\n".join(f"{k}: {v}" for k, v in brief.items()))
    return 0


def _check_setup(cfg: object) -> None:
    """Build the robot, task and DR once so bad names/models fail before any training starts."""
    from embodied_ws.config.loader import load_dr
    from embodied_ws.sim.core import EnvCore

    EnvCore(cfg, load_dr(cfg.dr), 1, 0)  # type: ignore[arg-type]


def _cmd_eval(args: argparse.Namespace) -> int:
    from embodied_ws.rl.evaluate import evaluate_run

    run = Path(args.run)
    run_dir = run if run.is_dir() else Path(args.runs) / args.run
    metrics = evaluate_run(run_dir, args.episodes, video=not args.no_video, progress=not args.json)
    print(json.dumps(metrics) if args.json else "\n".join(f"{k}: {v}" for k, v in metrics.items()))
    return 0


def _cmd_robots(args: argparse.Namespace) -> int:
    from embodied_ws.sim.robot import available_robots
    from embodied_ws.sim.tasks import TASKS

    info = {"robots": available_robots(), "tasks": TASKS.names()}
    print(json.dumps(info) if args.json else f"robots: {', '.join(info['robots'])}\ntasks: {', '.join(info['tasks'])}")
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    if args.env:
        from embodied_ws.assistant.env_doctor import run_checks

        checks = run_checks()
        if args.json:
            print(json.dumps({"checks": [c.to_dict() for c in checks]}))
        else:
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
    return run(args.log, args.json, args.llm, Path(args.model) if args.model else None, rules)


def _cmd_assistant(args: argparse.Namespace) -> int:
    if args.log == "download":
        from embodied_ws.assistant.download import default_manifest, download

        m = default_manifest()
        dest = Path(args.dest).expanduser() if args.dest else Path.home() / ".cache" / "embodied_ws" / "models"
        print(f"downloading {m.name} ({m.repo_id}/{m.filename}) to {dest}", file=sys.stderr)
        print(download(m, dest))
        return 0
    from embodied_ws.tui.app import run_app

    return run_app(args.log, Path(args.model) if args.model else None, args.follow or None)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-command per verb."""
    parser = argparse.ArgumentParser(prog="embodied-ws", description="Robot-learning workstation toolkit.")
    sub = parser.add_subparsers(dest="verb", required=True)

    def verb(name: str, fn: Callable[[argparse.Namespace], int], help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=EXAMPLES[name],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(fn=fn)
        p.add_argument("--json", action="store_true", help="print machine-readable JSON")
        return p

    t = verb("train", _cmd_train, "Train a PPO policy (MuJoCo in-process by default).")
    t.add_argument("--config", default="reach", help="preset under config/train or a YAML path (default: reach)")
    t.add_argument("--robot", help="robot name or MJCF path (shortcut for --set env.robot=...)")
    t.add_argument("--task", help="task name (shortcut for --set env.task=...)")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value; repeatable")
    t.add_argument("--name", default="default", help="run name: folder under --runs (default: default)")
    t.add_argument("--runs", default="runs", help="runs folder (default: runs)")
    t.add_argument("--resume", action="store_true", help="continue the run from its latest checkpoint")

    e = verb("eval", _cmd_eval, "Evaluate a run's exported policy; writes eval/metrics.json and eval/rollout.mp4.")
    e.add_argument("run", help="run name under --runs, or a run folder")
    e.add_argument("--runs", default="runs")
    e.add_argument("--episodes", type=int, default=20)
    e.add_argument("--no-video", action="store_true", help="skip the mp4")

    verb("robots", _cmd_robots, "List the registered robots and tasks.")

    d = verb("doctor", _cmd_doctor, "Triage a log offline (rules, optionally the local LLM), or check the environment.")
    d.add_argument("log", nargs="?", help="log file, folder of logs (~/.ros/log, colcon log/), or - for stdin")
    d.add_argument("--env", action="store_true", help="check Python/ROS/torch/CUDA/MuJoCo GL/ffmpeg/llama.cpp")
    d.add_argument("--llm", action="store_true", help="add the local model's explanation")
    d.add_argument("--model", help="GGUF file (default: the downloaded default model)")
    d.add_argument("--rules", action="append", metavar="YAML", help="extra rules file; repeatable")

    a = verb("assistant", _cmd_assistant, "Terminal assistant (Textual): log view, triage cards, local LLM chat.")
    a.add_argument("log", nargs="?", help="log file to open, or 'download' to fetch the default model")
    a.add_argument("--model", help="GGUF file (default: the downloaded default model; rules-only if missing)")
    a.add_argument("--follow", nargs=argparse.REMAINDER, help="run a command and follow its output")
    a.add_argument("--dest", help="download folder (default ~/.cache/embodied_ws/models)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except UserError as exc:
        print(exc.line(), file=sys.stderr)
        return EXIT_USER_ERROR
    except EnvLost as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ENV_LOST


if __name__ == "__main__":
    sys.exit(main())

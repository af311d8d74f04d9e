"""Verb ``task check ROBOT TASK``: will this task learn? One line per finding with its fix, exit 2 on a blocking one."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from embodied_ws.cli.argtypes import int_range, seed_int
from embodied_ws.cli.robot import add_robot_options

if TYPE_CHECKING:
    from embodied_ws.cli import AddVerb

#: most episodes per actor a check runs (each is a full episode of the preset)
MAX_EPISODES = 1000


def _cmd_task(args: argparse.Namespace) -> int:
    from pathlib import Path

    from embodied_ws.core.errors import EXIT_USER_ERROR
    from embodied_ws.data.task_check import task_check

    result = task_check(
        args.robot,
        args.task,
        args.config,
        args.set or [],
        episodes=args.episodes,
        seed=args.seed,
        dr=args.dr,
        robot_args=args.robot_arg,
        package_paths=[str(Path(p).expanduser().resolve()) for p in args.package_path],
    )
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        for finding in result.findings:
            print(finding.line())
        levels = [f.level for f in result.findings]
        print(
            f"task check {result.robot} {result.task}: {levels.count('block')} blocking, "
            f"{levels.count('warn')} warnings, {levels.count('skip')} skipped"
        )
    return EXIT_USER_ERROR if result.blocking else 0


def register(add_verb: AddVerb) -> None:
    """Add ``task check``."""
    p = add_verb(
        "task",
        _cmd_task,
        "Check a task before training: reward terms fire, the scripted expert succeeds, the reward's best point "
        "is success, observations are finite, the gripper holds the object, the episode is long enough.",
        "example: embodied-ws task check arm3 reach --episodes 4",
    )
    p.add_argument("action", choices=["check"], help="what to do (check)")
    p.add_argument("robot", help="robot name or model path (.xml, .urdf, .urdf.xacro)")
    p.add_argument("task", help="task name, a module:attr path or an embodied_ws.tasks entry point")
    add_robot_options(p)
    p.add_argument(
        "--config", default="reach", help="run preset or YAML the checks build the env from (default: reach)"
    )
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value; repeatable")
    p.add_argument(
        "--episodes", type=int_range(1, MAX_EPISODES), default=8, help="episodes per actor (random, expert; default: 8)"
    )
    p.add_argument("--seed", type=seed_int(), default=0, help="seed of the first episode (default: 0)")
    p.add_argument("--dr", default="none", help="DR preset for the rollouts (default: none, the nominal model)")

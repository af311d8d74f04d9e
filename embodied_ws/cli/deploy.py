"""Verb ``deploy``: run an exported policy on a robot through the topic contract (policy_node in this process)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from embodied_ws.cli.argtypes import nonneg_float, positive_float
from embodied_ws.core.errors import UserError

if TYPE_CHECKING:
    from embodied_ws.cli import AddVerb


def _cmd_deploy(args: argparse.Namespace) -> int:
    from embodied_ws.deploy.artifact import resolve_target
    from embodied_ws.deploy.control import ControlCore
    from embodied_ws.deploy.gripper_command import GripperLoop, gripper_output

    if args.duration < 0:
        raise UserError(f"must be >= 0, got {args.duration:g}", "--duration")
    overrides = list(args.set or [])
    if args.dry_run:
        overrides.append("deploy.dry_run=true")
    # everything the user can get wrong is checked before ROS starts: one line, exit 2
    path = Path(args.path).expanduser()
    if not path.exists() and (Path(args.runs) / args.path).exists():
        path = Path(args.runs) / args.path  # a run name under --runs, like eval and gap
    core = ControlCore(resolve_target(path, overrides))
    gripper = GripperLoop.of(core)
    grip_to = gripper_output(core.cfg.deploy, gripper.command.limits, core.cfg.env) if gripper else None
    if args.check:
        out = {"robot": core.robot.name, "rate_hz": core.rate_hz, "state_joints": core.state_joints,
               "lower": core.limits.lower.tolist(), "upper": core.limits.upper.tolist(),
               "max_step": core.limits.max_step.tolist()}  # fmt: skip
        if gripper is not None and grip_to is not None:  # the arm's entries above include the gripper's (unsent)
            lim = gripper.command.limits
            out.update(gripper_joints=list(lim.joints), gripper_interface=grip_to.interface, gripper_name=grip_to.name,
                       gripper_lower=lim.lower.tolist(), gripper_upper=lim.upper.tolist(),
                       gripper_max_step=lim.max_step.tolist(), arm_joints=gripper.arm_joints)  # fmt: skip
        print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
        return 0
    try:
        from embodied_ws.ros.gripper_out import require_interface
        from embodied_ws.ros.nodes.policy_node import run_deploy
        from embodied_ws.ros.wait import require_joint_states
    except ImportError as exc:
        raise UserError(f"ROS 2 is not available ({exc}); source ROS 2 Jazzy or `make setup`", "deploy") from None
    if grip_to is not None and not core.cfg.deploy.dry_run:
        require_interface(grip_to)  # the action interface needs control_msgs: one line before ROS starts
    if not args.dry_run:  # no robot: say so (exit 2) instead of running disarmed
        require_joint_states(args.wait)
    summary = run_deploy(core, args.duration)
    print(json.dumps(summary) if args.json else "\n".join(f"{k}: {v}" for k, v in summary.items()))
    return 0


def register(add_verb: AddVerb) -> None:
    """Add ``deploy``."""
    d = add_verb(
        "deploy",
        _cmd_deploy,
        "Run a trained policy on a robot (or mujoco_sim_node) inside the safety envelope: limits, max change "
        "per tick, velocity limit, NaN/inf rejection, latched e-stop on /embodied/estop, soft start, state and "
        "inference watchdogs. Runs policy_node in this process (no `ros2` CLI needed).",
        "example: embodied-ws deploy runs/reach1 --dry-run --duration 5\n"
        "more:    embodied-ws deploy runs/reach1/policy --set deploy.max_velocity=1.0 --set deploy.soft_start_s=3\n"
        "         embodied-ws deploy runs/reach1 --check --json     # validate policy, robot and limits only",
    )
    d.add_argument(
        "path", metavar="RUN_OR_POLICY_DIR", help="run name under --runs, a run folder or its policy/ folder"
    )
    d.add_argument("--runs", default="runs", help="runs folder for a run name (default: runs)")
    d.add_argument("--dry-run", action="store_true", help="compute and log commands, publish nothing")
    d.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value (deploy.*); repeatable")
    d.add_argument(
        "--duration", type=nonneg_float(), default=0.0, help="stop after this many seconds (default: until Ctrl-C)"
    )
    d.add_argument("--check", action="store_true", help="validate the policy against the robot and print the limits")
    d.add_argument(
        "--wait", type=positive_float(3600.0), default=10.0,
        help="seconds to wait for the robot's first /joint_states before giving up (default 10)",
    )  # fmt: skip

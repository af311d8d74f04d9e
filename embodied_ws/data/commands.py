"""What a demonstration dataset's ``action`` vector means on a robot, and the conversions to and from the sim.

One entry per actuator, in actuator order: an arm servo's entry is its joint position command (rad or m, the
value ``/<controller>/commands`` carries); a gripper driven by the policy (``task.gripper: action``) is one
entry named ``gripper`` (``gripper_<leader joint>`` when there are several), its **leader joint's set-point**
(m or rad, between the gripper's closed and open ends), whatever the actuator's own control units (the
Menagerie Panda's tendon actuator takes 0..255). So every entry is a joint position in the joint's units and
stays inside the joint's limits, as LeRobot's datasets of real arms store a gripper.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _grippers(robot: Any) -> list[tuple[int, Any]]:
    """``(actuator index, Gripper)`` of each gripper the policy drives."""
    return list(zip(robot.gripper_actuators, robot.grippers, strict=False))


def action_names(robot: Any) -> list[str]:
    """Name of each action entry: the actuator's, ``gripper`` for a driven gripper (several: by leader joint)."""
    names = list(robot.actuator_names)
    grippers = _grippers(robot)
    for k, g in grippers:
        names[k] = "gripper" if len(grippers) == 1 else f"gripper_{g.leader}"
    return names


def gripper_meta(robot: Any) -> dict[str, dict[str, Any]]:
    """Action name → what its gripper entry means (for the dataset's sidecar)."""
    names = action_names(robot)
    return {
        names[k]: {"leader": g.leader, "actuator": g.actuator, "closed": g.closed, "open": g.open, "kind": g.kind}
        for k, g in _grippers(robot)
    }


def command_from_ctrl(robot: Any, ctrl: np.ndarray) -> np.ndarray:
    """The dataset action for the actuator controls ``ctrl`` (``(nu,)``): a gripper's control becomes its
    leader's set-point."""
    out = np.asarray(ctrl, dtype=np.float64).copy()
    for k, g in _grippers(robot):
        a = (out[k] - g.ctrl_mid) / g.ctrl_half if g.ctrl_half else 0.0
        out[k] = g.set_point(a)
    return out


def ctrl_from_command(robot: Any, commands: np.ndarray) -> np.ndarray:
    """Actuator controls for dataset actions ``(..., nu)`` (the inverse of :func:`command_from_ctrl`)."""
    out = np.array(commands, dtype=np.float64, copy=True)
    for k, g in _grippers(robot):
        out[..., k] = g.ctrl(g.action(out[..., k]))
    return out


def env_action(core: Any, command: np.ndarray) -> np.ndarray:
    """The env's absolute action in [-1, 1] for one dataset action (``env.action_mode=absolute``): servos
    map their command onto the control range, a gripper its set-point onto -1 closed .. +1 open."""
    command = np.asarray(command, dtype=np.float64)
    out = (command - core.ctrl_mid) / core.ctrl_half
    for k, g in _grippers(core.robot):
        out[k] = g.action(command[k])
    return out

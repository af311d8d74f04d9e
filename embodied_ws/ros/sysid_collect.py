"""``embodied-ws sysid collect``: excite a robot through the topic contract and record it (thin ROS part)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import rclpy

from embodied_ws.core.errors import UserError
from embodied_ws.data.bag import BagWriter, contract_topics
from embodied_ws.ros.recorder import ExcitationNode, RecorderNode, spin_for
from embodied_ws.sim.robot import Robot
from embodied_ws.sysid.excitation import Excitation, limit_setpoints


def setpoint_limiter(robot: Robot, max_step: float) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Keeps set-points inside the joint and control limits, at most ``max_step`` apart per command.

    The joint limits and the per-tick step of the safety envelope; the collector does its own soft
    start (:class:`embodied_ws.sysid.excitation.Excitation`), and a non-finite set-point cannot
    arise from the signal.
    """
    low = np.maximum(robot.joint_low, robot.ctrl_low)
    high = np.minimum(robot.joint_high, robot.ctrl_high)
    return lambda target, previous: limit_setpoints(target, previous, low, high, max_step)


def collect(
    robot: Robot,
    duration: float,
    out: Path,
    controller: str = "joint_group_position_controller",
    seed: int = 0,
    max_step: float = 0.5,
    wait_s: float = 10.0,
) -> dict:
    """Drive ``robot`` with the excitation for ``duration`` s and record the contract topics to ``out``.

    :param max_step: largest set-point change per command (rad or m)
    :param wait_s: how long to wait for the first /joint_states
    """
    low = np.maximum(robot.joint_low, robot.ctrl_low)
    high = np.minimum(robot.joint_high, robot.ctrl_high)
    signal = Excitation(low, high, duration, seed)
    custom = {"embodied_ws.robot": robot.name, "embodied_ws.recording": "sysid", "embodied_ws.seed": str(seed)}
    writer = BagWriter(out, custom_data=custom)
    rclpy.init()
    ok = False
    try:
        recorder = RecorderNode(writer, contract_topics(controller))
        exciter = ExcitationNode(
            list(robot.joint_names), signal, setpoint_limiter(robot, max_step), controller, duration
        )
        nodes = [recorder, exciter]
        spin_for(nodes, wait_s, done=lambda: exciter.t0 is not None or exciter.error is not None)
        if exciter.error:
            raise UserError(exciter.error, "--robot")
        if exciter.t0 is None:
            raise UserError(
                f"no /joint_states within {wait_s:g} s: start the robot (or mujoco_sim_node) first", "/joint_states"
            )
        t0 = time.monotonic()
        stopped = spin_for(nodes, duration + 1.0, done=lambda: exciter.finished)
        if exciter.error:
            raise UserError(exciter.error, "--robot")
        spin_for(nodes, 0.3)  # the answers to the last commands
        result = {
            "bag": str(out),
            "robot": robot.name,
            "seconds": round(time.monotonic() - t0, 2),
            "commands": exciter.sent,
            "messages": dict(recorder.counts),
            "interrupted": stopped,
        }
        for n in nodes:
            n.destroy_node()
        ok = True
    finally:
        writer.close()
        rclpy.try_shutdown()
        if not ok:
            shutil.rmtree(out, ignore_errors=True)
    return result

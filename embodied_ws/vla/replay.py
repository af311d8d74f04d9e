"""Replay recorded joint commands in the sim (nominal model, no DR) and measure how well the joints track."""

from __future__ import annotations

from typing import Any

import numpy as np

from embodied_ws.config.schema import RunConfig
from embodied_ws.sim.replay import replay_rmse


def replay_episode(cfg: RunConfig, robot: Any, states: np.ndarray, actions: np.ndarray) -> float:
    """RMS error (rad) between the recorded joint positions and those reached by replaying the actions.

    Starts at the first recorded state; action ``k`` (joint position commands) is applied for one
    control period and the joints are compared with recorded state ``k + 1`` (the one replay,
    :func:`embodied_ws.sim.replay.replay_rmse`).

    :param cfg: run config of the robot (``env.frame_skip`` sets the control period)
    :param robot: the loaded robot
    :param states: recorded joint positions ``(T, nj)``
    :param actions: recorded joint position commands ``(T, nu)`` (a gripper: its leader's set-point, turned
        into the actuator's control here)
    """
    from embodied_ws.data.commands import ctrl_from_command

    control_dt = cfg.env.frame_skip * robot.control_dt
    return replay_rmse(robot, states, ctrl_from_command(robot, actions), control_dt)

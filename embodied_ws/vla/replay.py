"""Replay recorded joint commands in the sim (nominal model, no DR) and measure how well the joints track."""

from __future__ import annotations

import copy
from typing import Any

import mujoco
import numpy as np

from embodied_ws.config.schema import RunConfig


def replay_episode(cfg: RunConfig, robot: Any, states: np.ndarray, actions: np.ndarray) -> float:
    """RMS error (rad) between the recorded joint positions and those reached by replaying the actions.

    Starts at the first recorded state; action ``k`` (joint position commands) is applied for one
    control period and the joints are compared with recorded state ``k + 1``.

    :param cfg: run config of the robot (``env.frame_skip`` sets the control period)
    :param robot: the loaded robot
    :param states: recorded joint positions ``(T, nj)``
    :param actions: recorded joint position commands ``(T, nu)``
    """
    from embodied_ws.randomization.spec import DRSpec
    from embodied_ws.sim.env import RobotEnv

    cfg = copy.deepcopy(cfg)
    cfg.env.action_mode = "absolute"
    cfg.env.camera_obs = False
    cfg.env.episode_steps = max(len(actions), 1)
    env = RobotEnv(cfg, DRSpec(enabled=False), robot=robot, seed=0)
    env.reset(seed=0)
    env.data.qpos[robot.qpos_idx] = states[0]
    env.data.qvel[:] = 0.0
    env.data.ctrl[: robot.nu] = actions[0]
    mujoco.mj_forward(env.model, env.data)
    core = env.core
    reached = []
    for a in actions[:-1]:
        env.step((np.asarray(a) - core.ctrl_mid) / core.ctrl_half)
        reached.append(env.data.qpos[robot.qpos_idx].copy())
    env.close()
    if not reached:
        return 0.0
    diff = np.asarray(reached) - states[1:]
    return float(np.sqrt(np.mean(diff * diff)))

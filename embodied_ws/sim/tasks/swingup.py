"""Swing-up: swing a passive pole up from hanging and balance it (cart-pole style robots)."""

from __future__ import annotations

from typing import override

import numpy as np

from embodied_ws.config.schema import TaskConfig
from embodied_ws.core.errors import ModelError
from embodied_ws.sim.robot import Robot
from embodied_ws.sim.tasks.base import TASKS, Task


@TASKS.register("swingup")
class SwingUpTask(Task):
    """The first actuated slide joint is the cart, the first unactuated hinge the pole (0 rad = upright).

    Observation: cart position, cos/sin of the pole angle, cart and pole velocity.
    Reward (dm_control's smooth swing-up shaping): upright · centred · small control · small velocity,
    each factor in [0, 1]. Success: pole within ~18° of upright with the cart inside ±0.8 m.
    """

    obs_dim = 5
    goal_dim = 0

    def __init__(self, robot: Robot, cfg: TaskConfig) -> None:
        super().__init__(robot, cfg)
        m = robot.model
        hinges = [j for j in range(m.njnt) if m.jnt_type[j] == 3 and m.jnt_qposadr[j] not in robot.qpos_idx]
        if robot.qpos_idx.size < 1 or not hinges:
            raise ModelError("swingup needs an actuated cart joint and an unactuated pole hinge", str(robot.path))
        self._cx, self._cv = int(robot.qpos_idx[0]), int(robot.qvel_idx[0])
        self._px, self._pv = int(m.jnt_qposadr[hinges[0]]), int(m.jnt_dofadr[hinges[0]])

    @override
    def sample_goal(self, rng: np.random.Generator) -> np.ndarray:
        return np.zeros(0)

    @override
    def initial_qpos(self, rng: np.random.Generator) -> np.ndarray:
        q = self.robot.home_qpos.copy()
        q[self._cx] += rng.uniform(-self.cfg.init_noise, self.cfg.init_noise)
        q[self._px] = np.pi + rng.uniform(-self.cfg.init_noise, self.cfg.init_noise)
        return q

    @override
    def observe(self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray) -> np.ndarray:
        th = qpos[:, self._px]
        return np.stack([qpos[:, self._cx], np.cos(th), np.sin(th), qvel[:, self._cv], qvel[:, self._pv]], axis=1)

    @override
    def evaluate(
        self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        cos = np.cos(qpos[:, self._px])
        x = qpos[:, self._cx]
        terms = {
            "upright": (cos + 1.0) / 2.0,
            "centered": (1.0 + np.exp(-np.square(x))) / 2.0,
            "small_control": (4.0 + (1.0 - np.square(action).mean(axis=1))) / 5.0,
            "small_velocity": (1.0 + np.exp(-0.1 * np.square(qvel[:, self._pv]))) / 2.0,
        }
        reward = terms["upright"] * terms["centered"] * terms["small_control"] * terms["small_velocity"]
        success = (cos > 0.95) & (np.abs(x) < 0.8)
        return reward, success, terms

    @override
    def obs_names(self) -> list[str]:
        return ["cart/x", "pole/cos", "pole/sin", "cart/xd", "pole/thetad"]

"""The in-process stand-in robot: RobotEnv with a plant's fixed physics and command-side latency.

It behaves as ``mujoco_sim_node plant:=FILE`` does: the plant's values are written into the model
at every reset (always the same), and ``action_latency`` delays the *actuator commands* by whole
control periods — after the policy's delta set-points are integrated, where a real robot's bus or
controller delays them — not the policy's actions inside the env's observation bookkeeping.
"""

from __future__ import annotations

from typing import Any, override

import numpy as np

from embodied_ws.config.schema import RunConfig
from embodied_ws.randomization.latency import DelayLine
from embodied_ws.randomization.plant import Plant
from embodied_ws.sim.env import RobotEnv


class StandInEnv(RobotEnv):
    """A :class:`RobotEnv` on a plant (a robot whose parameters the policy was not told).

    :param cfg: run configuration (robot, task, control period)
    :param plant: the stand-in's fixed parameters (:func:`embodied_ws.randomization.plant.load_plant`)
    :param seed: seed for goals and noise
    :param render_mode: ``"rgb_array"`` or None
    """

    def __init__(self, cfg: RunConfig, plant: Plant, seed: int | None = None, render_mode: str | None = None) -> None:
        super().__init__(cfg, plant.env_spec(), render_mode=render_mode, seed=seed)
        self.plant = plant
        self._latency = plant.action_latency
        self._cmd_delay = DelayLine(1, self.core.robot.nu, self._latency)
        self._noise = plant.action_noise
        self._rng = np.random.default_rng(seed)
        # the core maps actions to commands; the stand-in's bus delays those commands
        self._to_ctrl = self.core.action_to_ctrl
        self.core.action_to_ctrl = self._delayed_ctrl  # type: ignore[method-assign]

    @override
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """:meth:`RobotEnv.reset`, then reseed the command noise (when ``seed`` is given) and empty the bus delay."""
        obs, info = super().reset(seed=seed, options=options)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._cmd_delay.reset(0, self.data.ctrl.copy(), self._latency)
        return obs, info

    def _delayed_ctrl(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ctrl, bad = self._to_ctrl(actions)
        if self._latency:
            ctrl = self._cmd_delay.push(ctrl)
        if self._noise:
            core = self.core
            ctrl = ctrl + self._rng.standard_normal(ctrl.shape) * self._noise * core.ctrl_half
            ctrl = np.clip(ctrl, core.robot.ctrl_low, core.robot.ctrl_high)
        return ctrl, bad

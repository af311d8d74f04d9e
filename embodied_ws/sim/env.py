"""RobotEnv: a gymnasium env over the in-process MuJoCo backend with DR, latency and noise."""

from __future__ import annotations

import math
from typing import Any, ClassVar, override

import gymnasium as gym
import mujoco
import numpy as np

from embodied_ws.config.schema import RunConfig
from embodied_ws.core.errors import ConfigError
from embodied_ws.randomization.spec import DRSpec
from embodied_ws.sim.core import EnvCore
from embodied_ws.sim.hooks import CoreHooks
from embodied_ws.sim.robot import Robot

_BADQACC = int(mujoco.mjtWarning.mjWARN_BADQACC)


def observation_space(core: EnvCore) -> gym.spaces.Box:
    """Unbounded float32 box of the task's observation size."""
    return gym.spaces.Box(-np.inf, np.inf, (core.obs_dim,), np.float32)


def action_space(core: EnvCore) -> gym.spaces.Box:
    """Normalised actions in [-1, 1]: one per actuator (mapped to each control range), or in ``ee_delta`` mode
    the end-effector step then one per gripper."""
    return gym.spaces.Box(-1.0, 1.0, (core.action_dim,), np.float32)


class RobotEnv(CoreHooks, gym.Env):
    """A registered robot/task (or any MJCF with the reach task) as a gymnasium env.

    ``info`` carries ``is_success``, ``reward_terms`` and the sampled DR values ``dr``.
    A physics blow-up ends the episode (``truncated``), sets ``info['physics_reset']`` and is counted.

    :param cfg: run configuration (defaults: arm3 reach)
    :param dr: domain randomization (default: none)
    :param render_mode: ``"rgb_array"`` or None
    :param seed: seed for DR, goals and noise (``reset(seed=...)`` reseeds)
    :param robot: an already loaded robot, to share between envs
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 25}

    def __init__(
        self,
        cfg: RunConfig | None = None,
        dr: DRSpec | None = None,
        render_mode: str | None = None,
        seed: int | None = None,
        robot: Robot | None = None,
    ) -> None:
        self.cfg = cfg or RunConfig()
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        visual = render_mode is not None or self.cfg.env.camera_obs
        self.core = EnvCore(self.cfg, dr or DRSpec(enabled=False), 1, seed, visual=visual, robot=robot)
        self.model = self.core.models[0]
        self.data = mujoco.MjData(self.model)
        self.metadata = {**self.metadata, "render_fps": round(1.0 / self.core.control_dt)}
        state_space = observation_space(self.core)
        self.action_space = action_space(self.core)
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        h, w = self.cfg.env.image_size
        self._camera = self._camera_id()
        if self.cfg.env.camera_obs:
            image = gym.spaces.Box(0, 255, (h, w, 3), np.uint8)
            self.observation_space = gym.spaces.Dict({"state": state_space, "image": image})
        else:
            self.observation_space = state_space
        self._ones = np.ones(1, dtype=bool)
        self._fresh_sensors = self.core.robot.ee_sensor_idx.size > 0

    # ------------------------------------------------------------------ gymnasium API
    @override
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self.core.seed(seed)
        qpos = self.core.begin_episode(0)
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = qpos
        self.data.ctrl[:] = self.core.ctrl_mid + self.core.ctrl_half * self.core.hold_action(qpos)
        mujoco.mj_forward(self.model, self.data)
        self._show_goal()
        obs = self.core.first_obs(0, self.data.qpos, self.data.qvel, self.data.sensordata)
        info = {"is_success": False, "dr": dict(self.core.dr_values[0])}
        return self._wrap(obs), info

    @override
    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        actions = np.asarray(action, dtype=np.float64).reshape(1, -1)
        ctrl, bad = self.core.action_to_ctrl(actions)
        data = self.data
        data.ctrl[:] = ctrl[0]
        warnings = data.warning[_BADQACC].number
        mujoco.mj_step(self.model, data, nstep=self.core.frame_skip)
        if self._fresh_sensors:
            # mj_step leaves position sensors as computed before its last integration; observe the
            # state we are in (as a robot's forward kinematics from measured joints would)
            mujoco.mj_kinematics(self.model, data)
            mujoco.mj_sensorPos(self.model, data)
        unstable = bad
        # MuJoCo resets the data itself on a bad acceleration and counts a warning; NaN/inf can still
        # slip through from bad model values, so check the state too (one sum is the cheap test).
        if data.warning[_BADQACC].number != warnings or not math.isfinite(data.qpos.sum() + data.qvel.sum()):
            unstable = self._ones
        obs, reward, success, terminated, truncated, terms = self.core.finish_step(
            data.qpos[None], data.qvel[None], data.sensordata[None], actions, unstable
        )
        info = self.core.infos(success, terms, unstable)[0]
        return self._wrap(obs), float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    def render(self) -> np.ndarray | None:
        """An rgb frame from the configured camera (``render_mode='rgb_array'``)."""
        if self.render_mode is None:
            return None
        return self._render_frame(self.cfg.env.render_size)

    @override
    def close(self) -> None:
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()

    # ------------------------------------------------------------------ helpers
    def _wrap(self, obs: np.ndarray) -> Any:
        state = obs[0].astype(np.float32) if obs.ndim == 2 else obs.astype(np.float32)
        if not self.cfg.env.camera_obs:
            return state
        return {"state": state, "image": self._render_frame(self.cfg.env.image_size)}

    def _render_frame(self, size: list[int]) -> np.ndarray:
        h, w = size
        renderer = self._renderers.get((h, w))
        if renderer is None:
            renderer = self._renderers[(h, w)] = mujoco.Renderer(self.model, h, w)
        renderer.update_scene(self.data, camera=self._camera)
        return renderer.render()

    def _camera_id(self) -> int:
        name = self.cfg.env.camera
        if name:
            cid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, name)
            if cid < 0:
                raise ConfigError(f"no camera {name!r} in the model", "env.camera")
            return cid
        return 0 if self.model.ncam else -1

    def _mocap_id(self, body: str) -> int:
        bid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, body)
        return int(self.model.body_mocapid[bid]) if bid >= 0 else -1

    def _show_goal(self) -> None:
        for body, pos in self.core.task.goal_markers(self.core.goal[0]).items():
            mocap = self._mocap_id(body)
            if mocap >= 0:
                self.data.mocap_pos[mocap] = pos

"""MujocoVecEnv: an SB3 VecEnv stepping N MuJoCo envs with one batched ``mujoco.rollout`` call.

Per control step the whole batch is advanced by ``frame_skip`` physics steps inside MuJoCo's C++
thread pool (no Python per env or per physics step); observations and rewards come from the
returned states and sensordata, computed batched in numpy by the shared :class:`EnvCore`.
Each env has its own MjModel copy, so per-env domain randomization costs nothing extra per step;
for free-space tasks the copies carry no geoms or meshes (see :mod:`embodied_ws.sim.robot_defaults`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, override

import mujoco
import numpy as np
from mujoco import rollout
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvStepReturn

from embodied_ws.config.schema import RunConfig
from embodied_ws.randomization.spec import DRSpec
from embodied_ws.sim.core import EnvCore
from embodied_ws.sim.env import action_space, observation_space
from embodied_ws.sim.hooks import EnvState, check_env_state

_STATE = mujoco.mjtState.mjSTATE_FULLPHYSICS


class _EnvView:
    """What ``env_method`` reaches for env ``i`` (same hooks as :class:`RobotEnv`)."""

    def __init__(self, core: EnvCore, i: int) -> None:
        self.core, self.i = core, i

    def set_dr_scale(self, scale: float) -> None:
        self.core.set_dr_scale(scale, [self.i])


class UnwrappedVecEnv(VecEnv):
    """An SB3 VecEnv whose envs are not gym envs (a MuJoCo batch, Ray actors): none is wrapped, none renders."""

    @override
    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]

    @override
    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None] * self.num_envs


class MujocoVecEnv(UnwrappedVecEnv):
    """N envs of one robot/task stepped together by MuJoCo's rollout thread pool.

    :param cfg: run configuration
    :param dr: domain-randomization spec
    :param n_envs: batch size
    :param seed: master seed
    :param nthread: rollout threads (default: CPU count)
    """

    def __init__(
        self, cfg: RunConfig, dr: DRSpec, n_envs: int, seed: int | None = 0, nthread: int | None = None
    ) -> None:
        self.core = EnvCore(cfg, dr, n_envs, seed)
        self.cfg = cfg
        model = self.core.base_model  # what the per-env copies are made of (lean when nothing renders)
        self.nthread = max(1, min(nthread or os.cpu_count() or 1, n_envs))
        self._datas = [mujoco.MjData(model) for _ in range(self.nthread)]
        self._scratch = mujoco.MjData(model)
        self._rollout = rollout.Rollout(nthread=self.nthread)
        self.nq, self.nv = model.nq, model.nv
        self.nstate = mujoco.mj_stateSize(model, _STATE)
        fs = cfg.env.frame_skip
        self.state = np.zeros((n_envs, self.nstate))
        self._state_out = np.zeros((n_envs, fs, self.nstate))
        self._sens_out = np.zeros((n_envs, fs, model.nsensordata))
        self._ctrl = np.zeros((n_envs, fs, model.nu))  # held for the whole control period
        self.sensordata = np.zeros((n_envs, model.nsensordata))
        self._actions = np.zeros((n_envs, model.nu))
        self._views = [_EnvView(self.core, i) for i in range(n_envs)]
        self._ee = self.core.robot.ee_sensor_idx
        # a MuJoCo auto-reset inside the period leaves the clock short of t0 + period
        self._period = self.core.control_dt * (1.0 - 1e-9)
        self.render_mode = None
        self.closed = False
        super().__init__(n_envs, observation_space(self.core), action_space(self.core))

    # ------------------------------------------------------------------ VecEnv API
    @override
    def reset(self) -> np.ndarray:
        if self._seeds[0] is not None:
            self.core.seed(self._seeds[0])
            self._reset_seeds()
        obs = np.stack([self._begin(i) for i in range(self.num_envs)])
        return obs.astype(np.float32)

    @override
    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, dtype=np.float64).reshape(self.num_envs, -1)

    @override
    def step_wait(self) -> VecEnvStepReturn:
        core = self.core
        ctrl, bad = core.action_to_ctrl(self._actions)
        self._ctrl[:] = ctrl[:, None, :]
        t0 = self.state[:, 0].copy()
        self._rollout.rollout(
            core.models,
            self._datas,
            self.state,
            self._ctrl,
            nstep=core.frame_skip,
            state=self._state_out,
            sensordata=self._sens_out,
            skip_checks=True,
        )
        self.state = self._state_out[:, -1].copy()
        self.sensordata = self._sens_out[:, -1]
        qpos = self.state[:, 1 : 1 + self.nq]
        if self._ee.size:
            self._refresh_ee(qpos)
        qvel = self.state[:, 1 + self.nq : 1 + self.nq + self.nv]
        # MuJoCo resets an env's data on a bad acceleration (its clock goes back) or may yield NaN/inf.
        unstable = bad | (self.state[:, 0] < t0 + self._period) | ~np.isfinite(self.state).all(axis=1)
        obs, reward, success, terminated, truncated, terms = core.finish_step(
            qpos, qvel, self.sensordata, self._actions, unstable
        )
        infos = core.infos(success, terms, unstable)
        done = terminated | truncated
        obs = obs.astype(np.float32)
        if done.any():
            for i in np.flatnonzero(done):
                infos[i]["terminal_observation"] = obs[i].copy()
                infos[i]["TimeLimit.truncated"] = bool(truncated[i])  # SB3 bootstraps only a truncated episode
                obs[i] = self._begin(int(i))
        return obs, reward.astype(np.float32), done.copy(), infos

    def close(self) -> None:
        """Stop MuJoCo's rollout threads (idempotent)."""
        if not self.closed:
            self._rollout.close()
            self.closed = True

    @override
    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return [getattr(self, attr_name) for _ in self._get_indices(indices)]

    @override
    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        setattr(self, attr_name, value)

    @override
    def env_method(self, method_name: str, *args: Any, indices: VecEnvIndices = None, **kwargs: Any) -> list[Any]:
        return [getattr(self._views[i], method_name)(*args, **kwargs) for i in self._get_indices(indices)]

    def stagger_episodes(self, offsets: np.ndarray) -> None:
        """Start each env's current episode ``offsets[i]`` control steps in: it ends that much sooner (then the
        envs' episodes are no longer in step; :class:`~embodied_ws.rl.callbacks.StaggerEpisodes`)."""
        self.core.steps[:] = np.asarray(offsets, dtype=np.int64)

    # ------------------------------------------------------------------ EnvHooks (embodied_ws.sim.hooks)
    def set_dr_scale(self, scale: float) -> None:
        """Curriculum knob for every env: 0 = nominal model, 1 = full DR ranges.

        :param scale: the DR scale in [0, 1]
        """
        self.core.set_dr_scale(scale)

    def get_env_state(self) -> EnvState:
        """RNG and DR/curriculum state of all envs (layout ``batched``)."""
        return {"layout": "batched", "n_envs": self.num_envs, "streams": self.core.state_dict()}

    def set_env_state(self, state: EnvState, where: str) -> None:
        """Restore :meth:`get_env_state` (same layout and env count, else a one-line UserError).

        :param state: a saved env state
        :param where: where it came from (for the error line)
        """
        check_env_state(state, "batched", self.num_envs, where)
        self.core.load_state_dict(state["streams"])
        self._reset_seeds()  # the restored streams win over a seed still pending for the next reset

    def env_core(self) -> EnvCore:
        """The batched core that steps these envs."""
        return self.core

    # ------------------------------------------------------------------ helpers
    def _begin(self, i: int) -> np.ndarray:
        """Start env ``i``'s episode: new DR/goal, physics state written into the batch."""
        model, data = self.core.models[i], self._scratch
        qpos = self.core.begin_episode(i)
        mujoco.mj_resetData(model, data)
        data.qpos[:] = qpos
        mujoco.mj_forward(model, data)
        mujoco.mj_getState(model, data, self.state[i], _STATE)
        self.sensordata[i] = data.sensordata
        return self.core.first_obs(i, data.qpos, data.qvel, data.sensordata).astype(np.float32)

    def _refresh_ee(self, qpos: np.ndarray) -> None:
        """Rollouts record sensors as computed before each step's integration; recompute the
        end-effector position at the current state (same as RobotEnv and a robot's FK)."""
        data, ee = self._scratch, self._ee
        for i, model in enumerate(self.core.models):
            data.qpos[:] = qpos[i]
            mujoco.mj_kinematics(model, data)
            mujoco.mj_sensorPos(model, data)
            self.sensordata[i, ee] = data.sensordata[ee]

    def _get_indices(self, indices: VecEnvIndices) -> Iterable[int]:
        if indices is None:
            return range(self.num_envs)
        if isinstance(indices, int):
            return [indices]
        return indices

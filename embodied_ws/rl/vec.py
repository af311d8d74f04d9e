"""Vectorized envs for training and evaluation: our batched MuJoCo env, or SB3's Subproc/Dummy over RobotEnv."""

from __future__ import annotations

import importlib
import time
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvStepReturn

from embodied_ws.config.schema import RunConfig
from embodied_ws.randomization.spec import DRSpec


class VecTimer(VecEnvWrapper):
    """Accumulates the wall time spent stepping the envs (the learner's wait for data)."""

    def __init__(self, venv: VecEnv) -> None:
        super().__init__(venv)
        self.step_seconds = 0.0

    def reset(self) -> Any:
        return self.venv.reset()

    def step_wait(self) -> VecEnvStepReturn:
        t = time.perf_counter()
        out = self.venv.step_wait()
        self.step_seconds += time.perf_counter() - t
        return out


#: backends living in packages with heavy or optional imports (rclpy), loaded by name when used
EXTERNAL_BACKENDS = {"ros": "embodied_ws.ros.topic_env:make_ros_vec_env"}


def _robot_env_factory(cfg: RunConfig, dr: DRSpec, seed: int) -> Any:
    def make() -> Any:
        from embodied_ws.sim.env import RobotEnv

        return RobotEnv(cfg, dr, seed=seed)

    return make


def make_vec_env(cfg: RunConfig, dr: DRSpec, n_envs: int, seed: int, kind: str | None = None) -> VecEnv:
    """Build ``n_envs`` envs of the configured robot/task.

    :param kind: ``mujoco`` (batched rollout), ``subproc`` or ``dummy``; defaults to ``cfg.train.vec_env``
    """
    kind = kind or cfg.train.vec_env
    if kind in EXTERNAL_BACKENDS:
        module, func = EXTERNAL_BACKENDS[kind].split(":")
        return getattr(importlib.import_module(module), func)(cfg, dr, n_envs, seed)
    if kind == "mujoco":
        from embodied_ws.sim.vec_env import MujocoVecEnv

        return MujocoVecEnv(cfg, dr, n_envs, seed)
    fns = [_robot_env_factory(cfg, dr, seed + i) for i in range(n_envs)]
    venv = SubprocVecEnv(fns) if kind == "subproc" else DummyVecEnv(fns)
    venv.seed(seed)
    return venv


def core_state(venv: VecEnv) -> Any:
    """Env RNG/DR state of the innermost env(s), whatever the vec env kind."""
    inner = venv.unwrapped
    if hasattr(inner, "get_core_state"):
        return {"kind": "batched", "state": inner.get_core_state()}
    return {"kind": "per_env", "state": inner.env_method("get_core_state")}


def load_core_state(venv: VecEnv, saved: Any) -> None:
    """Restore :func:`core_state` into a vec env of the same kind and size."""
    inner = venv.unwrapped
    if saved["kind"] == "batched" and hasattr(inner, "set_core_state"):
        inner.set_core_state(saved["state"])
    elif saved["kind"] == "per_env" and not hasattr(inner, "set_core_state"):
        for i, s in enumerate(saved["state"]):
            inner.env_method("set_core_state", s, indices=[i])


def episode_success(venv: VecEnv, n_episodes: int, act: Any) -> tuple[float, float, int]:
    """Run ``n_episodes`` (one per env, in parallel) with ``act(obs) -> actions``.

    Returns ``(success rate at episode end, mean return, episodes)``.
    """
    obs = venv.reset()
    n = venv.num_envs
    returns = np.zeros(n)
    done_mask = np.zeros(n, dtype=bool)
    success = np.zeros(n, dtype=bool)
    final_return = np.zeros(n)
    while not done_mask.all():
        obs, rew, dones, infos = venv.step(act(obs))
        returns += np.where(done_mask, 0.0, rew)
        for i in np.flatnonzero(dones & ~done_mask):
            success[i] = bool(infos[i].get("is_success", False))
            final_return[i] = returns[i]
            done_mask[i] = True
    k = min(n, n_episodes)
    return float(success[:k].mean()), float(final_return[:k].mean()), k

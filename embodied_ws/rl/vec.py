"""SB3 vec envs for the ``dummy`` and ``subproc`` backends (RobotEnv per env), a step timer, episode success and
the interval of a success rate."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any, override

import numpy as np
from scipy.stats import binomtest
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvStepReturn

from embodied_ws.config.schema import RunConfig
from embodied_ws.randomization.spec import DRSpec
from embodied_ws.sim.hooks import PerEnvHooks


class VecTimer(VecEnvWrapper):
    """Accumulates the wall time spent stepping the envs (the learner's wait for data)."""

    def __init__(self, venv: VecEnv) -> None:
        super().__init__(venv)
        self.step_seconds = 0.0

    @override
    def reset(self) -> Any:
        return self.venv.reset()

    @override
    def step_wait(self) -> VecEnvStepReturn:
        t = time.perf_counter()
        out = self.venv.step_wait()
        self.step_seconds += time.perf_counter() - t
        return out


class _Hooked(PerEnvHooks):
    """The constructor and backend factory shared by the SB3 vec envs below."""

    def __init__(self, env_fns: list[Callable[[], Any]], cfg: RunConfig, dr: DRSpec) -> None:
        super().__init__(env_fns)  # type: ignore[call-arg]  # the SB3 vec env after this mixin in the MRO
        self.bind(cfg, dr)

    @classmethod
    def of_robot_envs(cls, cfg: RunConfig, dr: DRSpec, n_envs: int, seed: int) -> VecEnv:
        """The backend's factory: ``n_envs`` RobotEnvs in this vec env.

        :param cfg: run configuration
        :param dr: DR spec
        :param n_envs: number of envs
        :param seed: master seed (env ``i`` gets ``seed + i``)
        """
        from embodied_ws.sim.env import RobotEnv

        venv = cls([partial(RobotEnv, cfg, dr, seed=seed + i) for i in range(n_envs)], cfg, dr)
        venv.seed(seed)
        return venv


class HookedDummyVecEnv(_Hooked, DummyVecEnv):
    """SB3's DummyVecEnv over gym envs with :class:`CoreHooks`, implementing :class:`EnvHooks`.

    :param env_fns: env constructors
    :param cfg: the envs' run configuration
    :param dr: their DR spec
    """


class HookedSubprocVecEnv(_Hooked, SubprocVecEnv):
    """SB3's SubprocVecEnv (one process per env) over gym envs with :class:`CoreHooks`, implementing :class:`EnvHooks`.

    :param env_fns: env constructors
    :param cfg: the envs' run configuration
    :param dr: their DR spec
    """


#: the ``dummy`` backend: RobotEnvs stepped one after another in this process
make_dummy = HookedDummyVecEnv.of_robot_envs
#: the ``subproc`` backend: one RobotEnv per process
make_subproc = HookedSubprocVecEnv.of_robot_envs


def success_interval(successes: int, episodes: int) -> list[float]:
    """``[low, high]``: the 95 % Wilson interval of a success rate of ``successes`` in ``episodes`` (230 of 256
    episodes, 89.8 %, span 85.5–93.0 %: two evaluations of one policy on different episodes differ that much);
    ``[0, 1]`` for no episode."""
    if episodes == 0:
        return [0.0, 1.0]
    ci = binomtest(successes, episodes).proportion_ci(0.95, method="wilson")
    return [float(ci.low), float(ci.high)]


def episode_success(
    venv: VecEnv, n_episodes: int, act: Any, finals: list[dict[str, Any]] | None = None
) -> tuple[float, float, int]:
    """Run ``n_episodes`` (one per env, in parallel) with ``act(obs) -> actions``.

    Returns ``(success rate at episode end, mean return, episodes)``; ``finals``, when given, gets each counted
    episode's last ``{"success", "reward_terms"}`` (what :mod:`embodied_ws.rl.diagnosis` reads).
    """
    obs = venv.reset()
    n = venv.num_envs
    returns = np.zeros(n)
    done_mask = np.zeros(n, dtype=bool)
    success = np.zeros(n, dtype=bool)
    final_return = np.zeros(n)
    last: list[dict[str, Any]] = [{} for _ in range(n)]
    while not done_mask.all():
        obs, rew, dones, infos = venv.step(act(obs))
        returns += np.where(done_mask, 0.0, rew)
        for i in np.flatnonzero(dones & ~done_mask):
            success[i] = bool(infos[i].get("is_success", False))
            final_return[i] = returns[i]
            last[i] = {"success": bool(success[i]), "reward_terms": dict(infos[i].get("reward_terms") or {})}
            done_mask[i] = True
    k = min(n, n_episodes)
    if finals is not None:
        finals.extend(last[:k])
    return float(success[:k].mean()), float(final_return[:k].mean()), k

"""The policy package: one protocol for every policy, one rollout loop for every caller."""

from __future__ import annotations

import numpy as np

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.data.expert import ReachExpert
from embodied_ws.policy.protocol import Policy
from embodied_ws.policy.rollout import Step, rollout
from embodied_ws.sim.env import RobotEnv
from embodied_ws.vla.runner import VLARunner


def expert_env(render: bool = False) -> RobotEnv:
    cfg = load_config("reach", ["env.action_mode=absolute"])
    return RobotEnv(cfg, load_dr("none"), render_mode="rgb_array" if render else None, seed=0)


class Counting:
    """A policy that holds still and counts its resets and calls."""

    def __init__(self, nu: int) -> None:
        self.nu, self.resets, self.calls = nu, 0, 0

    def reset(self) -> None:
        self.resets += 1

    def act(self, obs: np.ndarray) -> np.ndarray:
        self.calls += 1
        return np.zeros(self.nu)


def test_every_policy_kind_implements_the_protocol() -> None:
    from embodied_ws.policy.exported import ExportedPolicy

    env = expert_env()
    assert isinstance(ReachExpert(env), Policy)
    for cls in (ExportedPolicy, VLARunner):
        assert callable(cls.reset) and callable(cls.act)


def test_rollout_runs_to_the_env_end_and_resets_the_policy() -> None:
    env = expert_env()
    policy = Counting(env.action_space.shape[0])
    episode = rollout(env, policy, seed=3)
    assert policy.resets == 1
    assert episode.steps == policy.calls == env.core.episode_steps  # truncated at the episode length
    assert episode.seed == 3 and "is_success" in episode.info
    assert episode.frames == []


def test_the_scripted_expert_succeeds_and_stop_ends_the_episode_early() -> None:
    env = expert_env()
    expert = ReachExpert(env)
    full = rollout(env, expert, seed=1)
    assert full.success
    seen: list[Step] = []
    early = rollout(env, expert, seed=1, on_step=seen.append, stop=lambda s: bool(s.info.get("is_success")))
    assert early.success and early.steps < full.steps
    assert [s.index for s in seen] == list(range(early.steps))
    assert np.isclose(early.total_return, sum(s.reward for s in seen))


def test_hooks_shape_what_the_policy_sees_and_sends() -> None:
    env = expert_env(render=True)
    sent: list[np.ndarray] = []
    policy = Counting(env.action_space.shape[0])

    def observe(env: RobotEnv, obs: np.ndarray) -> dict:
        return {"state": env.data.qpos.copy(), "vector": obs}

    def to_env(action: np.ndarray) -> np.ndarray:
        sent.append(action + 0.5)
        return action + 0.5

    episode = rollout(env, policy, seed=0, observe=observe, to_env=to_env, render=True, max_steps=4)
    assert episode.steps == 4 and len(sent) == 4 and len(episode.frames) == 4
    assert episode.frames[0].ndim == 3
    np.testing.assert_allclose(env.data.ctrl, env.core.ctrl_mid + 0.5 * env.core.ctrl_half)

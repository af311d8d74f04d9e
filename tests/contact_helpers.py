"""Episodes of a contact task through the one rollout loop: returns, successes and how strongly each term fired."""

from __future__ import annotations

from typing import Any

import numpy as np

from embodied_ws.policy.rollout import Step, rollout


class RandomPolicy:
    """Uniform random actions from the env's action space (the baseline a task's reward must separate)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def reset(self) -> None:
        """Stateless."""

    def act(self, obs: Any = None) -> np.ndarray:
        """A random action."""
        return self.env.action_space.sample()


def run_episodes(
    env: Any, seeds: range, policy: Any | None, terms: set[str]
) -> tuple[list[float], list[bool], dict[str, float]]:
    """One episode per seed with ``policy`` (random when None): returns, successes, the largest |value| per term."""
    fired = dict.fromkeys(terms, 0.0)

    def track(step: Step) -> None:
        for k, v in step.info["reward_terms"].items():
            fired[k] = max(fired[k], abs(v))

    returns, successes = [], []
    for seed in seeds:
        episode = rollout(env, policy or RandomPolicy(env), seed, on_step=track)
        returns.append(episode.total_return)
        successes.append(episode.success)
    return returns, successes, fired

"""The one rollout loop: a policy drives an env for an episode (eval, VLA eval, gap report, demo recording).

Like LeRobot's ``lerobot_eval.rollout`` and SB3's ``evaluate_policy``, every caller runs the same loop and
differs only in what it hands the policy and what it keeps:

- ``observe(env, obs)``: what the policy sees (default: the env's observation vector; a VLA gets the
  camera image, the joint state and the instruction);
- ``to_env(action)``: the policy's action in the env's terms (default: as it is; a VLA's joint position
  command is mapped onto the env's [-1, 1] absolute actions);
- ``on_step(step)``: called after every env step with what happened (the gap report keeps joint and
  command traces, the demo recorder keeps frames);
- ``stop(step)``: end the episode early (the demo recorder stops once success has been held).

An episode ends when the env terminates or truncates, ``stop`` says so, or after ``max_steps``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Step:
    """One control period: what the policy saw and did, and what the env answered."""

    index: int
    observation: Any  # what the policy was given (before the step)
    action: Any  # what the policy returned
    reward: float
    info: dict[str, Any]
    frame: np.ndarray | None = None  # the env's render after the step (``render=True``)


@dataclass
class Episode:
    """One episode's outcome."""

    seed: int
    steps: int = 0
    total_return: float = 0.0
    success: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # the last step's info
    frames: list[np.ndarray] = field(default_factory=list)


def _identity(x: Any) -> Any:
    return x


def rollout(
    env: Any,
    policy: Any,
    seed: int,
    *,
    observe: Callable[[Any, Any], Any] | None = None,
    to_env: Callable[[Any], Any] = _identity,
    on_step: Callable[[Step], None] | None = None,
    stop: Callable[[Step], bool] | None = None,
    render: bool = False,
    max_steps: int | None = None,
) -> Episode:
    """Run ``policy`` in ``env`` for one episode seeded ``seed`` (hooks in the module docstring).

    :param env: a Gymnasium env (``reset(seed=)``, ``step``, ``render``)
    :param policy: a :class:`~embodied_ws.policy.protocol.Policy` (``reset`` is called after ``env.reset``)
    :param render: keep ``env.render()`` after every step in ``Episode.frames`` (and ``Step.frame``)
    :param max_steps: at most this many steps (None: until the env ends the episode)
    """
    obs, _ = env.reset(seed=seed)
    if hasattr(policy, "reset"):
        policy.reset()
    episode = Episode(seed=seed)
    done = False
    while not done and (max_steps is None or episode.steps < max_steps):
        seen = observe(env, obs) if observe is not None else obs
        action = policy.act(seen)
        obs, reward, term, trunc, info = env.step(to_env(action))
        frame = env.render() if render else None
        if frame is not None:
            episode.frames.append(frame)
        step = Step(episode.steps, seen, action, float(reward), info, frame)
        episode.steps += 1
        episode.total_return += float(reward)
        episode.info = info
        episode.success = bool(info.get("is_success", False))
        if on_step is not None:
            on_step(step)
        done = bool(term or trunc) or (stop is not None and stop(step))
    return episode

"""Reach-colour: several coloured balls, the episode's instruction names one; touch that one.

A language-conditioned variant of ``reach`` for vision-language-action policies: the camera sees
every ball, the instruction ("touch the red ball") says which one counts. For state-based RL
(``embodied-ws train --task reach_color``) the observation carries every ball's position and a
one-hot of the named colour, so PPO can learn it without vision.
"""

from __future__ import annotations

from typing import override

import numpy as np

from embodied_ws.config.schema import TaskConfig
from embodied_ws.sim.robot import Robot
from embodied_ws.sim.tasks.base import TASKS
from embodied_ws.sim.tasks.reach import PointReach

#: ball colours, in goal order; a scene shows them with mocap bodies ``target_<colour>``
COLORS: tuple[str, ...] = ("red", "green", "blue")
#: smallest distance between two balls (metres), so "the red one" is never ambiguous
MIN_SEPARATION = 0.15
HIDDEN = np.array([0.0, 0.0, -1.0])  # where unused markers go (below the floor)


def instruction_for(color: str) -> str:
    """The language instruction of an episode whose named ball is ``color``."""
    return f"touch the {color} ball"


@TASKS.register("reach_color")
class ReachColorTask(PointReach):
    """Observation: joint positions, joint velocities, end-effector position, every ball's position
    (``len(COLORS)`` × 3), one-hot of the named colour, named ball − ee.

    Goal vector: ball positions (flattened) followed by the one-hot of the named colour.
    Reward: as ``reach`` towards the named ball; success when the end effector is within
    ``success_threshold`` of the named ball (touching another ball does not count).
    """

    def __init__(self, robot: Robot, cfg: TaskConfig) -> None:
        super().__init__(robot, cfg)
        self.nc = len(COLORS)
        self.goal_dim = 4 * self.nc
        self.obs_dim = 2 * self.nj + 3 + 3 * self.nc + self.nc + 3

    # ----------------------------------------------------------------- goal helpers
    def split_goal(self, goal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ball positions (…, nc, 3), one-hot (…, nc))`` of a goal (batch) vector."""
        pos = goal[..., : 3 * self.nc].reshape(*goal.shape[:-1], self.nc, 3)
        return pos, goal[..., 3 * self.nc :]

    def named_target(self, goal: np.ndarray) -> np.ndarray:
        """Position of the named ball, ``(…, 3)``."""
        pos, onehot = self.split_goal(goal)
        return np.einsum("...c,...cx->...x", onehot, pos)

    def color_of(self, goal: np.ndarray) -> str:
        """Colour named by one goal vector."""
        return COLORS[int(np.argmax(self.split_goal(goal)[1]))]

    def instruction(self, goal: np.ndarray) -> str:
        """The language instruction for one goal vector."""
        return instruction_for(self.color_of(goal))

    # ----------------------------------------------------------------- Task API
    @override
    def sample_goal(self, rng: np.random.Generator) -> np.ndarray:
        chosen: list[np.ndarray] = []
        while len(chosen) < self.nc:  # rejection sampling; the workspace is large against MIN_SEPARATION
            p = self.targets[rng.integers(len(self.targets))]
            if all(np.linalg.norm(p - c) >= MIN_SEPARATION for c in chosen):
                chosen.append(p.copy())
        onehot = np.zeros(self.nc)
        onehot[rng.integers(self.nc)] = 1.0
        return np.concatenate([np.concatenate(chosen), onehot])

    @override
    def observe(self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray) -> np.ndarray:
        ee = sensordata[:, self._ei]
        named = self.named_target(goal)
        return np.concatenate([qpos[:, self._qi], qvel[:, self._vi], ee, goal, named - ee], axis=1)

    @override
    def evaluate(
        self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        return self.reach_reward(qvel, sensordata, self.named_target(goal))

    @override
    def obs_names(self) -> list[str]:
        j = self.robot.joint_names
        xyz = ("x", "y", "z")
        balls = [f"ball_{c}/{a}" for c in COLORS for a in xyz]
        return (
            [f"q/{n}" for n in j]
            + [f"qd/{n}" for n in j]
            + [f"ee/{a}" for a in xyz]
            + balls
            + [f"named/{c}" for c in COLORS]
            + [f"named_minus_ee/{a}" for a in xyz]
        )

    @override
    def goal_markers(self, goal: np.ndarray) -> dict[str, np.ndarray]:
        pos, _ = self.split_goal(goal)
        out = {f"target_{c}": pos[i] for i, c in enumerate(COLORS)}
        out["target"] = HIDDEN  # the plain reach marker is not part of this task
        return out

"""Task interface: batched numpy functions of the physics arrays, shared by every env flavour.

All methods take batches (first axis = env) so the single env (batch of 1), the vectorized env
(batch of N) and the ROS-topic env run the very same task code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from embodied_ws.config.schema import TaskConfig
from embodied_ws.core.registry import Registry
from embodied_ws.sim.robot import Robot


class Task(ABC):
    """A task over a :class:`Robot`.

    :param robot: the loaded robot
    :param cfg: task parameters
    """

    #: whether the robot must be loaded with an end-effector position sensor
    needs_ee: bool = False
    #: the task needs no contacts: envs that do not render simulate a copy without geoms (less memory)
    free_space: bool = False
    obs_dim: int = 0
    goal_dim: int = 0

    def __init__(self, robot: Robot, cfg: TaskConfig) -> None:
        self.robot = robot
        self.cfg = cfg

    @abstractmethod
    def sample_goal(self, rng: np.random.Generator) -> np.ndarray:
        """Goal of a new episode, shape ``(goal_dim,)``."""

    @abstractmethod
    def initial_qpos(self, rng: np.random.Generator) -> np.ndarray:
        """Initial joint positions of a new episode, shape ``(nq,)`` (velocities start at 0)."""

    @abstractmethod
    def observe(self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """Observation batch ``(n, obs_dim)``."""

    @abstractmethod
    def evaluate(
        self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """``(reward (n,), success (n,) bool, reward terms {name: (n,)})``."""

    def min_episode_seconds(self, joint_speed: np.ndarray | None = None) -> float:
        """The shortest episode (s) in which the task can be done (0: no lower bound).

        :param joint_speed: ``(nu,)`` the fastest set-point speed of each actuated joint (None: unbounded)
        """
        return 0.0

    def obs_names(self) -> list[str]:
        """Name of each observation entry (for the exported policy's layout)."""
        return [f"obs_{i}" for i in range(self.obs_dim)]

    def goal_site_pos(self, goal: np.ndarray) -> np.ndarray | None:
        """Where to draw the goal marker (a mocap body named ``target``), if the task has one."""
        return None

    def goal_markers(self, goal: np.ndarray) -> dict[str, np.ndarray]:
        """Mocap body name → position for every goal marker (default: ``target`` at :meth:`goal_site_pos`)."""
        pos = self.goal_site_pos(goal)
        return {} if pos is None else {"target": pos}


TASKS: Registry[type[Task]] = Registry("task")


def as_index(idx: np.ndarray) -> slice | np.ndarray:
    """A slice when ``idx`` is a contiguous ascending run (a view, cheaper than fancy indexing)."""
    if idx.size and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):
        return slice(int(idx[0]), int(idx[0]) + idx.size)
    return idx

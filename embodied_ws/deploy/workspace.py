"""Is a task within the robot's reach? (no ROS): a goal the robot cannot reach is refused like no goal at all.

Tasks that sample their targets from the robot's reachable workspace (``reach``, ``reach_color``:
``task.targets``, end-effector positions of random joint configurations within the limits, the very
points the policy was trained on) give the workspace; a goal's markers (``Task.goal_markers``: the
target, every ball) must each lie within ``tolerance`` of one of those points. The tolerance is the
largest gap between neighbouring samples (or the task's success threshold, whichever is larger), so
every point inside the sampled workspace passes and one outside it by more than a sample gap does not.
Tasks without such a sample (``swingup``) have no workspace check.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Workspace:
    """The reachable points of a task's robot and how far a goal may lie from them.

    :param points: ``(m, 3)`` reachable end-effector positions
    :param tolerance: largest distance (m) of an accepted goal marker from the nearest point
    """

    def __init__(self, points: np.ndarray, tolerance: float) -> None:
        from scipy.spatial import cKDTree

        self.points = np.asarray(points, dtype=np.float64)
        self.tree = cKDTree(self.points)
        self.tolerance = float(tolerance)
        self.task: Any = None

    @classmethod
    def of(cls, task: Any) -> Workspace | None:
        """The workspace of ``task`` (None when the task has no sampled reachable targets).

        :param task: a :class:`~embodied_ws.sim.tasks.base.Task`
        """
        points = getattr(task, "targets", None)
        if points is None or len(points) < 2:
            return None
        from scipy.spatial import cKDTree

        gaps, _ = cKDTree(points).query(points, k=2)
        threshold = float(getattr(getattr(task, "cfg", None), "success_threshold", 0.0) or 0.0)
        ws = cls(points, max(float(gaps[:, 1].max()), threshold))
        ws.task = task
        return ws

    def problem(self, goal: np.ndarray) -> str:
        """Why ``goal`` is out of reach (empty when every marker of it is within reach)."""
        from embodied_ws.sim.tasks.reach_color import HIDDEN  # where a task parks the markers it does not use

        markers = self.task.goal_markers(goal) if self.task is not None else {"target": goal}
        for name, pos in markers.items():
            pos = np.asarray(pos, dtype=np.float64).ravel()[:3]
            if np.array_equal(pos, HIDDEN):
                continue
            dist, _ = self.tree.query(pos)
            if dist > self.tolerance:
                where = ", ".join(f"{v:.3f}" for v in pos)
                return (f"the task's {name} ({where}) is {dist:.3f} m outside the robot's workspace "
                        f"(tolerance {self.tolerance:.3f} m): refused")  # fmt: skip
        return ""

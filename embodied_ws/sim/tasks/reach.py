"""Reach: bring the end effector to a random reachable target (works on any MJCF with joint actuators)."""

from __future__ import annotations

from typing import override

import mujoco
import numpy as np

from embodied_ws.config.schema import TaskConfig
from embodied_ws.sim.robot import Robot
from embodied_ws.sim.tasks.base import TASKS, Task, as_index

WORKSPACE_SAMPLES = 4096


def workspace_sample(
    robot: Robot, min_z: float | None, margin: float = 0.0, n: int = WORKSPACE_SAMPLES, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Random joint configurations within the limits and their end-effector positions: reachable by construction.

    :param robot: robot with an end-effector sensor
    :param min_z: drop targets below this height (None: keep all)
    :param margin: fraction of each joint range left out at both ends
    :param n: number of configurations to sample
    :param seed: seed of the (fixed) workspace sample
    :returns: ``(configurations (m, nu), targets (m, 3))``, ``m <= n`` after the height filter
    """
    model = robot.model
    data = mujoco.MjData(model)
    rng = np.random.default_rng(seed)
    span = robot.joint_high - robot.joint_low
    qs = rng.uniform(robot.joint_low + margin * span, robot.joint_high - margin * span, (n, robot.qpos_idx.size))
    out = np.empty((n, 3))
    for i, q in enumerate(qs):
        data.qpos[:] = model.qpos0
        data.qpos[robot.qpos_idx] = q
        mujoco.mj_forward(model, data)
        out[i] = data.sensordata[robot.ee_sensor_idx]
    if min_z is not None:
        keep = out[:, 2] >= min_z
        qs, out = qs[keep], out[keep]
    if len(out) == 0:
        raise ValueError("no reachable target satisfies task.target_min_z")
    return qs, out


def joint_travel(robot: Robot, configs: np.ndarray) -> np.ndarray:
    """``(m, nu)``: how far each joint must move from the home pose to each configuration. A joint whose range
    spans more than a turn may take the equivalent angle a turn away when that one is inside its range."""
    home = robot.home_qpos[robot.qpos_idx]
    travel = np.abs(configs - home)
    for turn in (-2 * np.pi, 2 * np.pi):
        alt = configs + turn
        inside = (alt >= robot.joint_low) & (alt <= robot.joint_high)
        travel = np.where(inside, np.minimum(travel, np.abs(alt - home)), travel)
    return travel


# The slowest joint may spend at most this share of an episode at full set-point speed on the median target's
# travel: the rest is for accelerating, slowing down and settling on the target (see PointReach).
JOINT_TRAVEL_SHARE = 0.5
#: an arm that cannot follow its set-points (its measured joint speeds bound them: a heavily damped or
#: force-limited arm) is sized on this percentile of the targets' slowest-joint travel, not the median: the
#: far targets are what its failed episodes were still moving towards when they ended (the median rule gave a
#: damped Panda 8.4-s episodes, 98 % of its failures still moving). In :data:`JOINT_TRAVEL_SHARE` of the episode,
#: which leaves the same travel room for an arm up to twice as slow (the default DR's damping scale reaches 2,
#: and on such an arm the speed is the force limit over the damping), plus the probe's settling time.
#: (The discount stays the preset's: raised to 0.9905 so that its horizon covered the damped Panda's 4.2-s median
#: travel, the evaluation reached 33 % at 7.5 min against 64 % with 0.97, and 0.570 against 0.676 at 14 min.)
LAGGING_TRAVEL_PERCENTILE = 90
#: a joint whose axis passes closer than this (m) to the end effector at home does not move it
MIN_LEVER_M = 1e-3


class PointReach(Task):
    """What reaching tasks share: the reachable targets, a noisy home pose, and the reward towards a point.

    Not registered itself: :class:`ReachTask` and ``reach_color`` build on it.

    :param robot: robot with an end-effector sensor
    :param cfg: task parameters
    """

    needs_ee = True

    def __init__(self, robot: Robot, cfg: TaskConfig) -> None:
        super().__init__(robot, cfg)
        self.nj = robot.qpos_idx.size
        self.target_configs, self.targets = workspace_sample(robot, cfg.target_min_z, cfg.target_joint_margin)
        self._qi, self._vi, self._ei = (as_index(i) for i in (robot.qpos_idx, robot.qvel_idx, robot.ee_sensor_idx))

    def target_distances(self) -> np.ndarray:
        """Distance (m) from the end effector in the home pose to each workspace target."""
        data = mujoco.MjData(self.robot.model)
        data.qpos[:] = self.robot.home_qpos
        mujoco.mj_forward(self.robot.model, data)
        return np.linalg.norm(self.targets - data.sensordata[self.robot.ee_sensor_idx], axis=1)

    def travel_seconds(self, joint_speed: np.ndarray) -> np.ndarray:
        """``(m,)``: per workspace target, its slowest joint's travel from the home pose at ``joint_speed``
        (``(nu,)`` rad/s or m/s; ``inf``: no bound, 0 s)."""
        return np.max(joint_travel(self.robot, self.target_configs) / joint_speed, axis=1)

    def lagging_joints(self, joint_speed: np.ndarray) -> np.ndarray:
        """``(nu,)`` bool: the joints whose measured speed (the dynamics probe's) bounds their set-points at
        ``joint_speed`` and that move the end effector (a roll whose axis runs through it, e.g. a flange joint,
        does not delay a reach: lever at home under :data:`MIN_LEVER_M`); none when no joint's set-point speed
        is bounded (the probe is not run then)."""
        if not np.isfinite(joint_speed).any():
            return np.zeros(np.shape(joint_speed), dtype=bool)
        lag = self.robot.dynamics().lagging(joint_speed)
        lever = self.robot.ee_lever
        if lever is not None and lever.shape == lag.shape:
            lag &= lever >= MIN_LEVER_M
        return lag

    @override
    def min_episode_seconds(self, joint_speed: np.ndarray | None = None) -> float:
        """Long enough for the median target twice over: its distance from the home pose at
        ``task.approach_speed`` (mean end-effector speed), and its slowest joint's travel at ``joint_speed`` in
        :data:`JOINT_TRAVEL_SHARE` of the episode (an arm with slow joints, e.g. a Kinova Jaco2 at 0.63 rad/s,
        needs 4 s for the median target's travel alone). An arm that cannot follow its set-points (the probe's
        measured speeds are what bound them, :meth:`~embodied_ws.sim.dynamics_probe.DynamicsProbe.lags`) gets
        :data:`LAGGING_TRAVEL_PERCENTILE` of the targets in that share, plus its measured settling time. 0 when
        ``task.approach_speed`` is unset.

        :param joint_speed: ``(nu,)`` the fastest set-point speed of each actuated joint (rad/s or m/s); None or
            ``inf``: no joint-speed bound
        """
        if self.cfg.approach_speed <= 0:
            return 0.0
        seconds = float(np.median(self.target_distances())) / self.cfg.approach_speed
        if joint_speed is not None:
            slowest = self.travel_seconds(joint_speed)
            seconds = max(seconds, float(np.median(slowest)) / JOINT_TRAVEL_SHARE)
            lag = self.lagging_joints(joint_speed)
            if lag.any():
                slow = self.travel_seconds(np.where(lag, joint_speed, np.inf))  # the lagging joints' travel
                far = float(np.percentile(slow, LAGGING_TRAVEL_PERCENTILE)) / JOINT_TRAVEL_SHARE
                seconds = max(seconds, far + self.robot.dynamics().settle_time(lag))
        return seconds

    @override
    def initial_qpos(self, rng: np.random.Generator) -> np.ndarray:
        q = self.robot.home_qpos.copy()
        noise = rng.uniform(-self.cfg.init_noise, self.cfg.init_noise, self.nj)
        q[self._qi] = np.clip(q[self._qi] + noise, self.robot.joint_low, self.robot.joint_high)
        return q

    def reach_reward(
        self, qvel: np.ndarray, sensordata: np.ndarray, target: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """``(reward, success, terms)`` of bringing the end effector to ``target`` (the :class:`ReachTask` reward).

        :param qvel: joint velocities ``(n, nv)``
        :param sensordata: sensor readings ``(n, nsensordata)``
        :param target: the point to reach ``(n, 3)``
        """
        diff = sensordata[:, self._ei] - target
        dist = np.sqrt(np.add.reduce(diff * diff, axis=1))
        qd = qvel[:, self._vi]
        success = dist < self.cfg.success_threshold
        terms = {
            "distance": -self.cfg.distance_weight * dist,
            "velocity": -self.cfg.velocity_weight * np.add.reduce(qd * qd, axis=1),
            "success": self.cfg.success_bonus * success,
        }
        reward = terms["distance"] + terms["velocity"] + terms["success"]
        if self.cfg.precision_weight:
            terms["precision"] = self.cfg.precision_weight * np.exp(-((dist / self.cfg.success_threshold) ** 2))
            reward = reward + terms["precision"]
        return reward, success, terms


@TASKS.register("reach")
class ReachTask(PointReach):
    """Observation: joint positions, joint velocities, end-effector position, target, target − ee.

    Reward: ``-distance_weight · |ee − target| − velocity_weight · |q̇|² + success_bonus · [success]``
    (+ ``precision_weight · exp(-(d / threshold)²)`` when set);
    success when the end effector is within ``success_threshold`` metres of the target.
    """

    free_space = True
    goal_dim = 3

    def __init__(self, robot: Robot, cfg: TaskConfig) -> None:
        super().__init__(robot, cfg)
        self.obs_dim = 2 * self.nj + 9

    @override
    def sample_goal(self, rng: np.random.Generator) -> np.ndarray:
        return self.targets[rng.integers(len(self.targets))].copy()

    @override
    def observe(self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray) -> np.ndarray:
        ee = sensordata[:, self._ei]
        return np.concatenate([qpos[:, self._qi], qvel[:, self._vi], ee, goal, goal - ee], axis=1)

    @override
    def evaluate(
        self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        return self.reach_reward(qvel, sensordata, goal)

    @override
    def obs_names(self) -> list[str]:
        j = self.robot.joint_names
        xyz = ("x", "y", "z")
        return (
            [f"q/{n}" for n in j]
            + [f"qd/{n}" for n in j]
            + [f"ee/{a}" for a in xyz]
            + [f"target/{a}" for a in xyz]
            + [f"target_minus_ee/{a}" for a in xyz]
        )

    @override
    def goal_site_pos(self, goal: np.ndarray) -> np.ndarray | None:
        return goal

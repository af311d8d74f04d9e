"""Push: slide a cube across a table to a goal (a contact task; no gripper needed, any arm).

The table, the cube and the goal marker are added to the robot's scene from its own workspace
(:mod:`embodied_ws.sim.scene`); start and goal spots are points the end effector reaches at pushing height.
"""

from __future__ import annotations

from typing import override

import mujoco
import numpy as np

from embodied_ws.config.schema import TaskConfig
from embodied_ws.sim.robot import Robot
from embodied_ws.sim.scene import GOAL, GOAL_COLOR, OBJECT_COLOR, add_scene, cube_half_size
from embodied_ws.sim.tasks.base import TASKS, Task, as_index

_XYZ = ("x", "y", "z")
#: a cube is pushed at this share of ``task.approach_speed`` (the episode length rule): 5 cm/s at the push
#: preset's 0.15 m/s, the speed of the straight scripted push that succeeded in every direction. Pushed at the
#: approach speed it slides off a narrow tool: with the push time at the full speed, the Panda's push episodes
#: (139 steps) left its scripted pusher 4 of 16 successes without DR, against 12 of 16 in 250 steps. At half the
#: speed (181 steps) a third of a 90 % Panda policy's failures were pushes still under way at the end; the same
#: policy, its episodes run on, succeeded in 91.4 % at 208 steps and 94.1 % at 235 (256 DR episodes)
PUSH_SPEED_SHARE = 1 / 3

#: m/s: the cube speed at which the ``still`` term pays ``1 − tanh(1)`` ≈ a quarter
STILL_SPEED = 0.2
#: m/s: the cube speed towards the goal at which the ``progress`` term pays its full weight (faster pays no more)
PROGRESS_SPEED = 0.1
#: m: the ``ee_delta`` floor's clearance above the tool touching the table (see :attr:`PushTask.ee_floor`)
FLOOR_CLEARANCE = 0.002


def still(cfg: TaskConfig, at_goal: np.ndarray, qvel: np.ndarray, lin: slice) -> np.ndarray:
    """``(n,)`` the ``still`` term: ``still_weight`` while ``at_goal`` with the cube at rest, less as it moves."""
    speed = np.linalg.norm(qvel[:, lin], axis=1)
    return cfg.still_weight * at_goal * (1.0 - np.tanh(speed / STILL_SPEED))


def progress(
    cfg: TaskConfig, gate: np.ndarray, to_goal: np.ndarray, distance: np.ndarray, velocity: np.ndarray
) -> np.ndarray:
    """``(n,)`` the ``progress`` term: ``progress_weight · clip(v · u / PROGRESS_SPEED, −1, 1)`` while ``gate``
    holds, ``v`` the cube's velocity and ``u`` the unit vector along ``to_goal`` (cube → goal in the table plane,
    ``distance`` long): the time derivative of the ``push`` term's distance, paying for a faster push and
    charging for pushing the cube away."""
    u = to_goal / np.maximum(distance, 1e-6)[:, None]
    toward = np.einsum("ij,ij->i", velocity[:, :2], u) / PROGRESS_SPEED
    return cfg.progress_weight * gate * np.clip(toward, -1.0, 1.0)


def rot6d(quat: np.ndarray) -> np.ndarray:
    """``(n, 6)``: the first two columns of the rotation matrix of unit quaternions ``(n, 4)`` (w, x, y, z),
    a continuous orientation code (a quaternion's sign flips are not)."""
    w, x, y, z = quat[:, 0], quat[:, 1], quat[:, 2], quat[:, 3]
    return np.stack(
        [
            1 - 2 * (y * y + z * z),
            2 * (x * y + w * z),
            2 * (x * z - w * y),
            2 * (x * y - w * z),
            1 - 2 * (x * x + z * z),
            2 * (y * z + w * x),
        ],
        axis=1,
    )


@TASKS.register("push")
class PushTask(Task):
    """Observation: joint positions and velocities, end effector, cube position, orientation (6-D), linear and
    angular velocity, goal, ee → cube, cube → goal and ee → push pose (the ``reach`` term's target: behind
    the cube on the line goal → cube, a normalisation of ``goal − cube`` the policy would otherwise learn).

    Reward (named terms, staged reach → push → goal):

    - ``reach``: ``reach_weight · (1 − tanh(k · |ee − push pose|))``, the push pose being behind the cube on
      the line goal → cube, at pushing height, for the closed tool (a driven gripper's opening counts in the
      distance: :meth:`tool_distance`); on the goal disc it keeps the tool's side (:meth:`push_pose`);
    - ``push``: ``push_weight · (1 − tanh(k · |cube − goal|))`` while the end effector is within
      ``push_gate`` of the push pose;
    - ``progress``: ``progress_weight · clip(v · u / PROGRESS_SPEED, −1, 1)`` under the same gate, outside the
      goal disc: the cube's speed towards the goal (``u``: unit cube → goal). The ``push`` term alone left the
      Panda pushing at 3-5 cm/s, a third of its episodes timed out 5-8 cm short;
    - ``goal``: ``goal_weight · exp(−(|cube − goal| / success_threshold)²)``;
    - ``success_bonus``: ``success_bonus · [success]``, the success test itself: the cube (on the table)
      within ``success_threshold`` of the goal in the table plane;
    - ``still``: ``still_weight · [success] · (1 − tanh(|cube velocity| / STILL_SPEED))``: leave the cube at
      rest on the goal (a 12-minute Panda policy got the cube onto the goal in 7 of 24 episodes and pushed it
      on through in 5: the push pose flips to the far side once the cube passes the goal);
    - ``action``: ``−action_weight · |a|²`` over the arm's motion entries (:attr:`motion_actions`);
    - ``off_table``: ``off_table_penalty`` once the cube has left the table (no push/goal/success pay then;
      :meth:`terminated` says when).
    """

    needs_ee = True
    free_space = False
    #: entries :meth:`observe` adds after :meth:`scene_observation` (the push pose relative to the end effector)
    extra_obs_dim = 3
    goal_dim = 3
    #: rare-event terms (``task check`` does not ask them to fire under random or scripted actions)
    event_terms = ("off_table",)
    #: the language instruction of every episode (``{cube}``, ``{goal}``: the scene's colour names)
    instruction_text = "push the {cube} cube onto the {goal} pad"
    #: ``ee_delta``: the hand keeps its home orientation (fingers down over the table)
    ee_hold_orientation = True
    #: ``(action_dim,)`` bool: the action entries the ``action`` cost charges, the arm's motion (the env core sets
    #: it from its action layout; None: all). A gripper's absolute command is a state: charged, it paid a Panda
    #: pusher 0.01 a step for half-open fingers, exactly the cube's width apart, over closed ones
    motion_actions: np.ndarray | None = None
    #: ``ee_delta``: the lowest end-effector height (m) a step leads to, the tool :data:`FLOOR_CLEARANCE` above the
    #: table (:mod:`embodied_ws.sim.ik`). Without it a 20-minute Panda pusher pressed its fingertips 2-25 mm into
    #: the soft table contact in all 24 diagnosed DR episodes, and in 21 they wedged under the cube's edge and
    #: ended inside its footprint
    ee_floor: float | None = None

    def __init__(self, robot: Robot, cfg: TaskConfig) -> None:
        super().__init__(robot, cfg)
        half = cube_half_size(robot, cfg.object_size)
        self.scene = add_scene(robot, half, cfg.object_mass, cfg.success_threshold, cfg.target_joint_margin)
        self.nj = robot.qpos_idx.size
        self.obs_dim = 2 * self.nj + 27 + self.extra_obs_dim
        self._qi, self._vi, self._ei = (as_index(i) for i in (robot.qpos_idx, robot.qvel_idx, robot.ee_sensor_idx))
        a, v = self.scene.object_qpos, self.scene.object_qvel
        self._pos, self._quat, self._lin, self._ang = (
            slice(a, a + 3),
            slice(a + 3, a + 7),
            slice(v, v + 3),
            slice(v + 3, v + 6),
        )
        self._start = self.scene.spots[0]
        if self.scene.tool_floor is not None:
            self.ee_floor = self.scene.tool_floor + FLOOR_CLEARANCE
        #: the driven gripper's leader joint (qpos index; None without one) and its gap map (see :meth:`gap`)
        self._grip_q: int | None = None
        self._gap = (0.0, 1.0, 0.0, 0.0)
        if robot.gripper_actuators:
            g, k = robot.grippers[0], robot.gripper_actuators[0]
            self._grip_q = int(robot.qpos_idx[k])
            span = g.open - g.closed
            known = g.gap_closed is not None and g.gap_open is not None
            gaps = (g.gap_closed, g.gap_open) if known else (0.0, 0.0)
            self._gap = (g.closed, span if span else 1.0, gaps[0], gaps[1] - gaps[0])

    # ----------------------------------------------------------------- episodes
    @override
    def sample_goal(self, rng: np.random.Generator) -> np.ndarray:
        """A goal spot ``goal_min_distance``–``goal_max_distance`` from a start spot (the start is kept for
        :meth:`initial_qpos`, which the env calls next)."""
        jitter = self.scene.spot_jitter
        spots = self.scene.spots + rng.uniform(-jitter, jitter, self.scene.spots.shape)
        start = spots[rng.integers(len(spots))]
        dist = np.linalg.norm(spots - start, axis=1)
        ok = np.flatnonzero((dist >= self.cfg.goal_min_distance) & (dist <= self.cfg.goal_max_distance))
        j = (
            ok[rng.integers(len(ok))]
            if ok.size
            else int(np.argmax(np.where(dist <= self.cfg.goal_max_distance, dist, -1)))
        )
        self._start = start
        return np.array([*spots[j], self.scene.table_top + self.scene.cube_half])

    @override
    def initial_qpos(self, rng: np.random.Generator) -> np.ndarray:
        q = self.robot.home_qpos.copy()
        noise = rng.uniform(-self.cfg.init_noise, self.cfg.init_noise, self.nj)
        q[self._qi] = np.clip(q[self._qi] + noise, self.robot.joint_low, self.robot.joint_high)
        yaw = rng.uniform(-self.cfg.object_yaw_noise, self.cfg.object_yaw_noise)
        q[self._pos] = [*self._start, self.scene.table_top + self.scene.cube_half]
        q[self._quat] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
        return q

    @override
    def min_episode_seconds(self, joint_speed: np.ndarray | None = None) -> float:
        """Time to bring the end effector from home to the table at ``task.approach_speed`` (0 when unset), then
        push over the longest goal distance at :data:`PUSH_SPEED_SHARE` of it."""
        to_table = self.seconds_to_table()
        return to_table + self.cfg.goal_max_distance / (PUSH_SPEED_SHARE * self.cfg.approach_speed) if to_table else 0.0

    def seconds_to_table(self) -> float:
        """Seconds from home to the median start spot at pushing height at ``task.approach_speed`` (0 when unset)."""
        if self.cfg.approach_speed <= 0:
            return 0.0
        data = mujoco.MjData(self.robot.model)
        data.qpos[:] = self.robot.home_qpos
        mujoco.mj_forward(self.robot.model, data)
        ee = data.sensordata[self.robot.ee_sensor_idx]
        spots = np.column_stack([self.scene.spots, np.full(len(self.scene.spots), self.scene.push_height)])
        return float(np.median(np.linalg.norm(spots - ee, axis=1))) / self.cfg.approach_speed

    # ----------------------------------------------------------------- observation and reward
    def cube(self, qpos: np.ndarray) -> np.ndarray:
        """``(n, 3)`` cube centre positions."""
        return qpos[:, self._pos]

    def push_pose(self, cube: np.ndarray, goal: np.ndarray, ee: np.ndarray | None = None) -> np.ndarray:
        """``(n, 3)``: where the end effector must be to push ``cube`` towards ``goal`` (behind it, touching).

        With ``ee`` (the policy's observation and reward), a cube on the goal disc (within
        ``success_threshold``) keeps the side the end effector stands on: the push pose is the touching point on
        the line ``ee → cube``. The line ``goal → cube`` flips as the cube crosses the goal's centre, and a pose
        on the far side draws the tool through the cube, pushing it on through the disc (40 % of a 91 % Panda
        policy's failures). Without ``ee`` (the scripted pusher) the pose is always behind the cube on that line.
        """
        d = goal[:, :2] - cube[:, :2]
        norm = np.linalg.norm(d, axis=1, keepdims=True)
        u = np.where(norm > 1e-6, d / np.maximum(norm, 1e-6), self.scene.table_axes[0])
        if ee is not None:
            side = cube[:, :2] - ee[:, :2]
            side_norm = np.linalg.norm(side, axis=1, keepdims=True)
            on_goal = (norm < self.cfg.success_threshold) & (side_norm > 1e-6)
            u = np.where(on_goal, side / np.maximum(side_norm, 1e-6), u)
        xy = cube[:, :2] - u * (self.scene.cube_half + self.scene.push_radius)
        return np.column_stack([xy, np.full(len(xy), self.scene.push_height)])

    def gap(self, qpos: np.ndarray) -> np.ndarray:
        """``(n,)`` fingertip gap (m) from the driven gripper's leader joint (0 without one)."""
        closed, span, gap0, gap_span = self._gap
        if self._grip_q is None:
            return np.zeros(len(qpos))
        return gap0 + (qpos[:, self._grip_q] - closed) / span * gap_span

    def tool_distance(self, ee: np.ndarray, qpos: np.ndarray, target: np.ndarray) -> np.ndarray:
        """``(n,)`` distance of the tool from the push pose ``target``: the end effector's, and with a driven
        gripper how far its fingertips stand open (the push pose is the closed tool's; half-open Panda fingers
        stood the cube's width apart, and in a third of the push directions the cube sat between them unmoved)."""
        opened = self.gap(qpos) - self._gap[2]
        return np.sqrt(np.add.reduce((ee - target) ** 2, axis=1) + opened * opened)

    def effort(self, action: np.ndarray) -> np.ndarray:
        """``(n,)`` ``|a|²`` over the :attr:`motion_actions` entries (the ``action`` cost's)."""
        a = action if self.motion_actions is None else action[:, self.motion_actions]
        return np.add.reduce(a * a, axis=1)

    @override
    def observe(self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """:meth:`scene_observation`, then ``push pose − ee``."""
        ee, cube = sensordata[:, self._ei], qpos[:, self._pos]
        rel = self.push_pose(cube, goal, ee) - ee
        return np.concatenate([self.scene_observation(qpos, qvel, sensordata, goal), rel], axis=1)

    def scene_observation(
        self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray
    ) -> np.ndarray:
        """``(n, 2 · joints + 27)``: the arm, the cube and the goal (shared by the table-top tasks)."""
        ee, cube = sensordata[:, self._ei], qpos[:, self._pos]
        return np.concatenate(
            [
                qpos[:, self._qi],
                qvel[:, self._vi],
                ee,
                cube,
                rot6d(qpos[:, self._quat]),
                qvel[:, self._lin],
                qvel[:, self._ang],
                goal,
                cube - ee,
                goal - cube,
            ],
            axis=1,
        )

    def terminated(self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """``(n,)`` bool: the cube has left the table (the episode cannot be won any more)."""
        return ~self.scene.on_table(qpos[:, self._pos])

    @override
    def evaluate(
        self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        c, k = self.cfg, self.cfg.reward_sharpness
        ee, cube = sensordata[:, self._ei], qpos[:, self._pos]
        on_table = self.scene.on_table(cube)
        d_pp = self.tool_distance(ee, qpos, self.push_pose(cube, goal, ee))
        to_goal = goal[:, :2] - cube[:, :2]
        d_goal = np.linalg.norm(to_goal, axis=1)
        success = on_table & (d_goal < c.success_threshold)
        gate = on_table & (d_pp < c.push_gate)
        terms = {
            "reach": c.reach_weight * (1.0 - np.tanh(k * d_pp)),
            "push": c.push_weight * gate * (1.0 - np.tanh(k * d_goal)),
            "progress": progress(c, gate & ~success, to_goal, d_goal, qvel[:, self._lin]),
            "goal": c.goal_weight * on_table * np.exp(-((d_goal / c.success_threshold) ** 2)),
            "success_bonus": c.success_bonus * success,
            "still": still(c, success, qvel, self._lin),
            "action": -c.action_weight * self.effort(action),
            "off_table": c.off_table_penalty * ~on_table,
        }
        reward = sum(terms.values())
        return np.asarray(reward, dtype=float), success, terms

    @override
    def obs_names(self) -> list[str]:
        return [*self.scene_obs_names(), *(f"push_pose_minus_ee/{a}" for a in _XYZ)]

    def scene_obs_names(self) -> list[str]:
        """Names of :meth:`scene_observation`'s entries."""
        j = self.robot.joint_names
        return (
            [f"q/{n}" for n in j]
            + [f"qd/{n}" for n in j]
            + [f"ee/{a}" for a in _XYZ]
            + [f"cube/{a}" for a in _XYZ]
            + [f"cube_rot6d/{i}" for i in range(6)]
            + [f"cube_vel/{a}" for a in _XYZ]
            + [f"cube_angvel/{a}" for a in _XYZ]
            + [f"goal/{a}" for a in _XYZ]
            + [f"cube_minus_ee/{a}" for a in _XYZ]
            + [f"goal_minus_cube/{a}" for a in _XYZ]
        )

    @override
    def goal_markers(self, goal: np.ndarray) -> dict[str, np.ndarray]:
        return {GOAL: np.array([goal[0], goal[1], self.scene.table_top + 0.001])}

    def instruction(self, goal: np.ndarray) -> str:
        """The episode's language instruction (``record-demos`` stores it, ``vla eval`` gives it to the policy)."""
        return self.instruction_text.format(cube=OBJECT_COLOR, goal=GOAL_COLOR)

"""Lift: grasp the cube on the table and hold it ``task.lift_height`` up (needs ``task.gripper: action``).

Same scene and observation as :mod:`.push` (the gripper's opening is one of the joint positions), plus the
cube relative to the grasp point between the fingertips (``cube_minus_grasp``: the end-effector frame can sit
10+ cm from the fingertips, so ``cube_minus_ee`` alone leaves the policy to learn that offset through the hand's
rotation); the goal is the point ``lift_height`` above the cube's start.
"""

from __future__ import annotations

from typing import override

import numpy as np

from embodied_ws.config.schema import TaskConfig
from embodied_ws.core.errors import UserError
from embodied_ws.sim.gripper import binary_command
from embodied_ws.sim.robot import Robot
from embodied_ws.sim.tasks.base import TASKS
from embodied_ws.sim.tasks.push import PushTask, still


@TASKS.register("lift")
class LiftTask(PushTask):
    """Reward (named terms, staged reach → grasp → lift):

    - ``reach``: ``reach_weight · (1 − tanh(k · |grasp point − cube|))``, the grasp point lying between the
      fingers;
    - ``grasp``: ``grasp_weight`` while the cube is held: the grasp point within a cube edge of its
      centre and the fingers stopped on it (their gap 0.8-1.3 × the cube's nominal edge: not open, not
      closed on nothing, whatever the edge DR draws) while commanded closer (squeezing, :meth:`held`);
    - ``lift``: ``lift_weight · [held] · clip(height gained / lift_height, 0, 1)``;
    - ``goal``: ``goal_weight · [held] · exp(−(|cube − goal| / success_threshold)²)`` (gated like ``lift``: a
      cube resting on the table is already ``lift_height`` from the goal, and an ungated term paid e^−1 a step
      for leaving it there, a third of the reward an untouched cube earned);
    - ``success_bonus``: ``success_bonus · [success]``, the success test itself: held and at least
      ``lift_height`` above its resting height, without a break for the last ``task.hold_seconds`` (the env
      core counts the hold: :attr:`success_hold_s`; ``evaluate`` alone gives the momentary test);
    - ``still``: ``still_weight · [success] · (1 − tanh(|cube velocity| / STILL_SPEED))`` (the momentary success
      test: hold the lifted cube still; a policy paid the same for any height above the goal swung the cube up
      at full speed, and it slid out of the fingers);
    - ``action``: ``−action_weight · |a|²`` over the arm's motion entries; ``off_table``: ``off_table_penalty``
      once the cube left the table.
    """

    instruction_text = "pick up the {cube} cube"
    #: entries :meth:`observe` adds after :meth:`scene_observation` (the cube relative to the grasp point)
    extra_obs_dim = 3

    def __init__(self, robot: Robot, cfg: TaskConfig) -> None:
        if not robot.gripper_actuators:
            found = ", ".join(g.leader or g.joints[0] for g in robot.grippers if g.joints) or "none"
            raise UserError(
                f"lift needs a gripper driven by the policy: set task.gripper=action (grippers found: {found})",
                "task.gripper",
            )
        super().__init__(robot, cfg)
        #: the gripper's entry in a policy action (the env core sets it from its action layout: the actuator's
        #: index in the joint modes, after ``[dx, dy, dz(, dyaw)]`` in ``ee_delta``)
        self.gripper_action = robot.gripper_actuators[0]
        self._grasp = slice(self.scene.grasp_sensor, self.scene.grasp_sensor + 3)
        self._rest = self.scene.table_top + self.scene.cube_half
        #: success (and its bonus) counts once the momentary test has held this long (s), see EnvCore
        self.success_hold_s = cfg.hold_seconds

    @override
    def sample_goal(self, rng: np.random.Generator) -> np.ndarray:
        """The point ``lift_height`` above a start spot (kept for :meth:`initial_qpos`)."""
        jitter = self.scene.spot_jitter
        self._start = self.scene.spots[rng.integers(len(self.scene.spots))] + rng.uniform(-jitter, jitter, 2)
        return np.array([*self._start, self._rest + self.cfg.lift_height])

    @override
    def min_episode_seconds(self, joint_speed: np.ndarray | None = None) -> float:
        """Reach the table, grasp and lift at ``task.approach_speed`` (0 when unset), plus a second to close and
        ``task.hold_seconds`` of hold."""
        to_table = self.seconds_to_table()
        if not to_table:
            return 0.0
        return to_table + 1.0 + 2 * self.cfg.lift_height / self.cfg.approach_speed + self.cfg.hold_seconds

    def commanded_gap(self, action: np.ndarray) -> np.ndarray:
        """``(n,)`` fingertip gap (m) the gripper's action asks for (absolute: -1 closed, +1 open; with
        ``task.gripper_command: binary`` fully closed below 0, else fully open)."""
        _, _, gap0, gap_span = self._gap
        a = action[:, self.gripper_action]
        a = binary_command(a) if self.cfg.gripper_command == "binary" else np.clip(a, -1.0, 1.0)
        return gap0 + (a + 1.0) / 2.0 * gap_span

    def held(self, qpos: np.ndarray, sensordata: np.ndarray, action: np.ndarray | None = None) -> np.ndarray:
        """``(n,)`` bool: the cube is between the fingers and they have stopped on it, squeezing: with ``action``,
        the gripper must be commanded at least a fifth of the cube's edge closer than where the fingers stand (a
        half-open gripper merely around a cube its own width is not a grasp: that posture earned the grasp
        term without ever closing, and the policy never lifted)."""
        cube = qpos[:, self._pos]
        # the cube's centre within one edge of the grasp point: a held cube slides slowly down the finger pads
        # (2 cm over 4 s on the Panda, both fingers still on it, 18 cm up), and half an edge called that a drop
        near = np.linalg.norm(sensordata[:, self._grasp] - cube, axis=1) < 2 * self.scene.cube_half
        gap = self.gap(qpos)
        ratio = gap / (2 * self.scene.cube_half)  # 0.8-1.3: stopped on a cube of ±10 % (DR) edge
        held = near & (ratio > 0.8) & (ratio < 1.3)
        if action is not None:
            held &= self.commanded_gap(action) < gap - 0.4 * self.scene.cube_half
        return held

    @override
    def observe(self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """The scene's observation (:meth:`PushTask.scene_observation`), then ``cube − grasp point``."""
        rel = qpos[:, self._pos] - sensordata[:, self._grasp]
        return np.concatenate([self.scene_observation(qpos, qvel, sensordata, goal), rel], axis=1)

    @override
    def obs_names(self) -> list[str]:
        return [*self.scene_obs_names(), *(f"cube_minus_grasp/{a}" for a in "xyz")]

    @override
    def evaluate(
        self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        c, k = self.cfg, self.cfg.reward_sharpness
        cube = qpos[:, self._pos]
        on_table = self.scene.on_table(cube)
        held = self.held(qpos, sensordata, action) & on_table
        gained = np.clip((cube[:, 2] - self._rest) / c.lift_height, 0.0, 1.0)
        success = held & self.at_goal(cube, goal)
        terms = {
            "reach": c.reach_weight * (1.0 - np.tanh(k * np.linalg.norm(sensordata[:, self._grasp] - cube, axis=1))),
            "grasp": c.grasp_weight * held,
            "lift": c.lift_weight * held * gained,
            "goal": c.goal_weight * held * np.exp(-((np.linalg.norm(goal - cube, axis=1) / c.success_threshold) ** 2)),
            "success_bonus": c.success_bonus * success,
            "still": still(c, success, qvel, self._lin),
            "action": -c.action_weight * self.effort(action),
            "off_table": c.off_table_penalty * ~on_table,
            **self.carry_terms(held, cube, goal),
        }
        return np.asarray(sum(terms.values()), dtype=float), success, terms

    def at_goal(self, cube: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """``(n,)`` bool: the cube's place passes the success test once held (here: ``lift_height`` up)."""
        return cube[:, 2] >= self._rest + self.cfg.lift_height

    def carry_terms(self, held: np.ndarray, cube: np.ndarray, goal: np.ndarray) -> dict[str, np.ndarray]:
        """Named terms a subclass adds for moving the held cube (none for lift)."""
        return {}

    @override
    def goal_markers(self, goal: np.ndarray) -> dict[str, np.ndarray]:
        return {"scene_goal": np.asarray(goal, dtype=float).copy()}


@TASKS.register("pick_place")
class PickPlaceTask(LiftTask):
    """Pick the cube and carry it to a goal in the air: ``lift_height`` above a table spot
    ``goal_min_distance``–``goal_max_distance`` from the start.

    Reward: :class:`LiftTask`'s terms, plus ``carry``: ``push_weight · [held] · (1 − tanh(k · |cube − goal|))``;
    ``goal`` pays on the 3-D distance; success (and ``success_bonus``, ``still``): held with the cube within
    ``success_threshold`` of the goal, for the last ``task.hold_seconds``.
    """

    instruction_text = "put the {cube} cube on the {goal} pad"

    @override
    def sample_goal(self, rng: np.random.Generator) -> np.ndarray:
        goal = PushTask.sample_goal(self, rng)
        goal[2] += self.cfg.lift_height
        return goal

    @override
    def min_episode_seconds(self, joint_speed: np.ndarray | None = None) -> float:
        """:class:`LiftTask`'s time plus the carry over ``goal_max_distance`` at ``task.approach_speed``."""
        lift = super().min_episode_seconds(joint_speed)
        return lift + self.cfg.goal_max_distance / self.cfg.approach_speed if lift else 0.0

    @override
    def at_goal(self, cube: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """``(n,)`` bool: the cube within ``success_threshold`` of the goal in the air."""
        return np.linalg.norm(goal - cube, axis=1) < self.cfg.success_threshold

    @override
    def carry_terms(self, held: np.ndarray, cube: np.ndarray, goal: np.ndarray) -> dict[str, np.ndarray]:
        """``carry``: ``push_weight · [held] · (1 − tanh(k · |cube − goal|))``."""
        d_goal = np.linalg.norm(goal - cube, axis=1)
        return {"carry": self.cfg.push_weight * held * (1.0 - np.tanh(self.cfg.reward_sharpness * d_goal))}

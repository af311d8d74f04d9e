"""The env core: everything an env does around the physics step, for a batch of envs.

The in-process env (batch of 1), the vectorized MuJoCo env (batch of N) and the ROS-topic env all
use this one class, so DR, latency, noise, observations, rewards and the physics-fault policy are
the same code whatever steps the physics.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from embodied_ws.config.schema import RunConfig
from embodied_ws.randomization.latency import DelayLine, NoiseSource, add_noise
from embodied_ws.randomization.sampler import DRSampler
from embodied_ws.randomization.spec import DRSpec
from embodied_ws.sim.mapping import (  # noqa: F401 - build_robot, ee_speed: importable from here too
    PolicyIO,
    build_robot,
    clip_unit,
    ee_speed,
    episode_length,
    joint_delta_scale,
)
from embodied_ws.sim.robot import Robot
from embodied_ws.sim.tasks import make_task

_SUM = np.add.reduce


class EnvCore:
    """DR, latency, noise, task observation/reward and episode bookkeeping for ``n`` envs.

    :param cfg: run configuration (env and task sections are used)
    :param dr: domain-randomization spec
    :param n: number of envs in the batch
    :param seed: master seed; env ``i`` gets its own child streams
    :param visual: also randomize visual parameters (the envs render)
    :param robot: an already loaded robot (loaded from ``cfg`` when None)
    """

    def __init__(
        self, cfg: RunConfig, dr: DRSpec, n: int, seed: int | None, visual: bool = False, robot: Robot | None = None
    ) -> None:
        self.cfg = cfg
        self.robot = robot or build_robot(cfg)
        self.task = make_task(cfg.env.task, self.robot, cfg.task)
        self.n = n
        self.dr_spec = dr
        # envs that do not render simulate the lean copy (no geoms/meshes) when the task allows it
        lean = self.robot.physics_model
        self.base_model = self.robot.model if visual or lean is None else lean
        self.models = [copy.copy(self.base_model) for _ in range(n)]
        self.visual = visual
        self.frame_skip = cfg.env.frame_skip
        #: the observation/action mapping (shared with the deploy loop)
        self.io = io = PolicyIO(cfg, self.robot, self.task)
        if hasattr(self.task, "gripper_action") and self.robot.gripper_actuators:
            # a task that reads its gripper's command (lift: a grasp squeezes) learns where it is in an action
            self.task.gripper_action = io.action_index(self.robot.gripper_actuators[0])
        if hasattr(self.task, "motion_actions"):
            # a task whose action cost is an effort leaves the grippers' absolute commands out of it
            self.task.motion_actions = io.motion_entries()
        nu = self.robot.nu
        self.control_dt, self.ctrl_mid, self.ctrl_half = io.control_dt, io.ctrl_mid, io.ctrl_half
        self.delta_scale, self.episode_steps = io.delta_scale, io.episode_steps
        self._delta = io.delta
        self.setpoint = np.zeros((n, nu))
        self.obs_dim = io.obs_dim
        #: the policy's action size (``nu``, or the end-effector mode's)
        self.action_dim = io.action_dim
        #: ee_delta, or a set-point lead bound: the measured joint positions each env's next action is converted at
        self._qpos = np.zeros((n, self.base_model.nq)) if io.ee is not None or io.lead is not None else None
        self.seed(seed)
        self.act_delay = DelayLine(n, io.action_dim, self.dr[0].max_latency("action_latency"))
        self.obs_delay = DelayLine(n, self.obs_dim, self.dr[0].max_latency("obs_latency"))
        self.act_noise = np.zeros(n)
        self.obs_noise = np.zeros(n)
        self.goal = np.zeros((n, self.task.goal_dim))
        self.steps = np.zeros(n, dtype=np.int64)
        # values are tuples/scalars, so a shallow dict copy per info shares nothing mutable
        self.dr_values: list[dict[str, Any]] = [{} for _ in range(n)]
        self._interval = any(p.when == "interval" for p in dr.active())
        self.physics_resets = 0
        self.bad_actions = 0
        self._no_env = np.zeros(n, dtype=bool)
        #: a task that can end an episode early (it can no longer be won) says so with ``terminated``
        self._terminated = getattr(self.task, "terminated", None)
        #: a task whose success must hold a while (lift: 1 s): control steps it must hold, the current streaks
        hold_s = float(getattr(self.task, "success_hold_s", 0.0) or 0.0)
        self._hold_steps = math.ceil(hold_s / self.control_dt - 1e-9) if hold_s > 0 else 0
        self._streak = np.zeros(n, dtype=np.int64)
        self._act_noise_on = self._obs_noise_on = False

    @property
    def delta_actuators(self) -> np.ndarray:
        """Bool per actuator: its actions move a set-point (delta mode servos) rather than set it."""
        return self._delta

    # ----------------------------------------------------------------- seeding and state
    def seed(self, seed: int | None) -> None:
        """(Re)create every random stream from ``seed``: env ``i`` gets child streams of it."""
        children = np.random.SeedSequence(seed).spawn(self.n + 1)
        self.task_rng = [np.random.default_rng(c.spawn(1)[0]) for c in children[:-1]]
        old_scale = self.dr[0].scale if getattr(self, "dr", None) else 1.0
        self.dr = [
            DRSampler(self.dr_spec, self.base_model, int(children[i].generate_state(1)[0]), self.visual)
            for i in range(self.n)
        ]
        for d in self.dr:
            d.scale = old_scale
        self.noise_rng = np.random.default_rng(children[-1])
        self._act_noise_src = NoiseSource(self.noise_rng, (self.n, self.io.action_dim))
        self._obs_noise_src = NoiseSource(self.noise_rng, (self.n, self.obs_dim))

    def state_dict(self) -> dict[str, Any]:
        """RNG and curriculum state of every stream (for checkpoints)."""
        return {
            "task_rng": [r.bit_generator.state for r in self.task_rng],
            "dr": [d.state() for d in self.dr],
            "noise_rng": self.noise_rng.bit_generator.state,
            "physics_resets": self.physics_resets,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (the batch size must match)."""
        for r, s in zip(self.task_rng, state["task_rng"], strict=True):
            r.bit_generator.state = s
        for d, s in zip(self.dr, state["dr"], strict=True):
            d.load_state(s)
        self.noise_rng.bit_generator.state = state["noise_rng"]
        self.physics_resets = int(state.get("physics_resets", 0))

    def set_dr_scale(self, scale: float, indices: list[int] | None = None) -> None:
        """Curriculum: 0 = nominal model, 1 = full DR ranges (takes effect at each env's next reset)."""
        for i in range(self.n) if indices is None else indices:
            self.dr[i].scale = float(np.clip(scale, 0.0, 1.0))

    # ----------------------------------------------------------------- episodes
    def begin_episode(self, i: int) -> np.ndarray:
        """Start env ``i``'s episode: redraw DR into its model, new goal; returns initial qpos."""
        self.dr_values[i] = self.dr[i].sample_reset(self.models[i])
        rng = self.task_rng[i]
        self.goal[i] = self.task.sample_goal(rng)
        self.steps[i] = 0
        self._streak[i] = 0
        self.act_noise[i] = self.dr_values[i].get("action_noise", 0.0)
        self.obs_noise[i] = self.dr_values[i].get("obs_noise", 0.0)
        self._act_noise_on = bool(self.act_noise.any())
        self._obs_noise_on = bool(self.obs_noise.any())
        return self.task.initial_qpos(rng)

    def first_obs(self, i: int, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray) -> np.ndarray:
        """Observation at the start of env ``i``'s episode; primes both delay lines."""
        self.setpoint[i] = self.hold_action(qpos)
        if self._qpos is not None:
            self._qpos[i] = qpos
        self.act_delay.reset(i, self.io.idle_action(qpos), int(self.dr_values[i].get("action_latency", 0)))
        true = self._observe(qpos[None], qvel[None], sensordata[None], self.goal[i : i + 1], self.setpoint[i : i + 1])[
            0
        ]
        self.obs_delay.reset(i, true, int(self.dr_values[i].get("obs_latency", 0)))
        return add_noise(true[None], self.obs_noise[i : i + 1], self.noise_rng)[0]

    def hold_action(self, qpos: np.ndarray) -> np.ndarray:
        """The action that keeps servos where they are (0 for torque actuators)."""
        return self.io.hold_action(qpos)

    # ----------------------------------------------------------------- stepping
    def action_to_ctrl(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Actions in [-1, 1] → actuator controls, after action noise and latency.

        Returns ``(ctrl (n, nu), bad (n,))``; non-finite actions are zeroed and flagged ``bad``.
        """
        bad = self._no_env
        a = clip_unit(actions)  # NaN survives clipping, so one sum tells whether any value is bad
        if not math.isfinite(_SUM(a, axis=None)):
            bad = ~np.isfinite(a).all(axis=1)
            a = np.where(bad[:, None], 0.0, a)
            self.bad_actions += int(bad.sum())
        if self._act_noise_on:
            a = clip_unit(self._act_noise_src.add(a, self.act_noise[:, None]))
        self.setpoint, ctrl = self.io.integrate(self.setpoint, self.act_delay.push(a), self._qpos)
        return ctrl, bad

    def finish_step(
        self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, actions: np.ndarray, unstable: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Observation, reward, success, termination and truncation after the physics step.

        An env terminates when its task says the episode can no longer be won (a task's optional
        ``terminated``: the cube left the table); it is truncated at the episode length. ``unstable`` envs
        (NaN/inf state, MuJoCo instability reset, bad action) end their episode (truncated), get reward 0 and are
        counted in :attr:`physics_resets`. Returns ``(obs, reward, success, terminated, truncated, terms)``.
        """
        self.steps += 1
        if self._qpos is not None:
            self._qpos[:] = qpos
        true = self._observe(qpos, qvel, sensordata, self.goal, self.setpoint)
        reward, success, terms = self.task.evaluate(qpos, qvel, sensordata, self.goal, actions)
        if self._hold_steps:
            reward, success = self._held(reward, success, terms)
        terminated = (
            np.asarray(self._terminated(qpos, qvel, sensordata, self.goal), dtype=bool) & ~success
            if self._terminated is not None
            else self._no_env
        )
        truncated = (self.steps >= self.episode_steps) & ~terminated
        if _SUM(unstable):
            self.physics_resets += int(unstable.sum())
            true = np.where(unstable[:, None], 0.0, np.nan_to_num(true, posinf=0.0, neginf=0.0))
            reward = np.where(unstable, 0.0, reward)
            success = success & ~unstable
            terminated = terminated & ~unstable
            truncated = truncated | unstable
        obs = self.obs_delay.push(true)
        if self._obs_noise_on:
            obs = self._obs_noise_src.add(obs, self.obs_noise[:, None])
        if self._interval:
            for i in range(self.n):
                self.dr[i].sample_interval(self.models[i], int(self.steps[i]), self.dr_values[i])
        return obs, reward, success, terminated, truncated, terms

    def _held(
        self, reward: np.ndarray, success: np.ndarray, terms: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Success only once the task's success test has held :attr:`Task.success_hold_s`; the
        ``success_bonus`` term (updated in ``terms``) is paid on exactly those steps."""
        self._streak = np.where(success, self._streak + 1, 0)
        held = self._streak >= self._hold_steps
        bonus = terms.get("success_bonus")
        if bonus is not None:
            terms["success_bonus"] = np.where(held, bonus, 0.0)
            reward = reward - np.where(held, 0.0, bonus)
        return reward, np.asarray(success, dtype=bool) & held

    def _observe(
        self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray, setpoint: np.ndarray
    ) -> np.ndarray:
        return self.io.observe(qpos, qvel, sensordata, goal, setpoint)

    def obs_names(self) -> list[str]:
        """Name of each observation entry (task entries, then servo set-points in delta mode)."""
        return self.io.obs_names()

    def infos(self, success: np.ndarray, terms: dict[str, np.ndarray], unstable: np.ndarray) -> list[dict[str, Any]]:
        """Per-env ``info`` dicts: ``is_success``, reward terms, sampled DR values, physics-reset flag."""
        names = list(terms)
        cols = [terms[k].tolist() for k in names]
        succ = success.tolist()
        out = []
        for i in range(self.n):
            info = {
                "is_success": succ[i],
                "reward_terms": {k: c[i] for k, c in zip(names, cols, strict=True)},
                "dr": dict(self.dr_values[i]),
            }
            if unstable[i]:
                info["physics_reset"] = True
            out.append(info)
        return out

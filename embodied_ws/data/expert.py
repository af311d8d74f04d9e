"""Scripted experts for demonstrations: privileged controllers that read the simulator's true state.

``reach`` and ``reach_color`` share one IK expert: damped-least-squares inverse kinematics to the
(named) target on a scratch copy of the episode's model, a gravity feed-forward so the position
servos land where IK says despite their load, an integral term on the remaining end-effector error,
and a rate limit so demonstrations are smooth. It commands absolute joint positions, so the env
runs with ``env.action_mode=absolute``.
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np

from embodied_ws.core.errors import UserError
from embodied_ws.core.registry import Registry
from embodied_ws.data.contact_experts import LiftExpert, PushExpert

EXPERTS: Registry[type[Any]] = Registry("scripted expert")


@EXPERTS.register("reach")
@EXPERTS.register("reach_color")
class ReachExpert:
    """IK expert for reach-like tasks over a :class:`~embodied_ws.sim.env.RobotEnv` (absolute action mode).

    :param env: the env it drives (read for the true state, the goal and the episode's model)
    :param max_step: largest change of a joint command per control step (rad)
    """

    #: the run preset ``record-demos`` builds the env from when no ``--config`` is given
    preset = "vla"

    def __init__(self, env: Any, max_step: float = 0.12) -> None:
        if env.cfg.env.action_mode != "absolute":
            raise UserError("the scripted expert commands joint positions: set env.action_mode=absolute", "env")
        self.env = env
        self.max_step = max_step
        robot = env.core.robot
        m = robot.model
        sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, "embodied_ee_pos")
        self._site = int(m.sensor_objid[sid])
        self._body = int(m.site_bodyid[self._site])
        self._qi, self._vi = robot.qpos_idx, robot.qvel_idx
        self._scratch = mujoco.MjData(env.model)
        self.reset()

    def target(self) -> np.ndarray:
        """The point the end effector must reach this episode (the named ball for ``reach_color``)."""
        task, goal = self.env.core.task, self.env.core.goal[0]
        return task.named_target(goal) if hasattr(task, "named_target") else goal[:3]

    def reset(self) -> None:
        """Call after ``env.reset()``: solve IK for the new target and start from the current pose."""
        data = self.env.data
        self.command = data.qpos[self._qi].copy()
        self.solution = self._solve_ik(self.target(), data.qpos)

    def _jacobian(self, data: mujoco.MjData) -> np.ndarray:
        jacp = np.zeros((3, self.env.model.nv))
        mujoco.mj_jacSite(self.env.model, data, jacp, None, self._site)
        return jacp[:, self._vi]

    def _solve_ik(self, target: np.ndarray, qpos: np.ndarray, restarts: int = 16) -> np.ndarray:
        """Damped least squares from the current pose, then from seeded random poses until one converges
        (DLS alone stalls in local minima at joint limits); the converged solution nearest the current pose."""
        robot = self.env.core.robot
        rng = np.random.default_rng(0)
        q_now = qpos[self._qi].copy()
        best, best_cost = q_now, np.inf
        starts = [q_now, *rng.uniform(robot.joint_low, robot.joint_high, (restarts, q_now.size))]
        for q0 in starts:
            q, err = self._dls(target, qpos, q0)
            cost = err * 1e3 + np.abs(q - q_now).sum() if err > 1e-3 else np.abs(q - q_now).sum()
            if cost < best_cost:
                best, best_cost = q, cost
            if err < 1e-3 and q0 is q_now:
                break
        return best

    def _dls(
        self, target: np.ndarray, qpos: np.ndarray, q: np.ndarray, iters: int = 100, damping: float = 0.05
    ) -> tuple[np.ndarray, float]:
        robot, d = self.env.core.robot, self._scratch
        d.qpos[:] = qpos
        q = q.copy()
        err = np.full(3, np.inf)
        for _ in range(iters):
            d.qpos[self._qi] = q
            mujoco.mj_kinematics(self.env.model, d)
            err = target - d.site_xpos[self._site]
            if np.linalg.norm(err) < 1e-4:
                break
            mujoco.mj_comPos(self.env.model, d)
            jac = self._jacobian(d)
            dq = jac.T @ np.linalg.solve(jac @ jac.T + damping**2 * np.eye(3), err)
            q = np.clip(q + dq, robot.joint_low, robot.joint_high)
        return q, float(np.linalg.norm(err))

    def act(self, obs: Any = None) -> np.ndarray:
        """Normalised absolute action in [-1, 1] for the env's current state (``obs`` is not needed)."""
        env, data = self.env, self.env.data
        core = env.core
        # position servos hold q where kp (q_cmd - q) balances gravity: feed that offset forward
        kp = env.model.actuator_gainprm[: core.robot.nu, 0]
        gravity = data.qfrc_bias[self._vi] / np.maximum(kp, 1e-6)
        goal = np.clip(self.solution + gravity, core.robot.joint_low, core.robot.joint_high)
        self.command = self.command + np.clip(goal - self.command, -self.max_step, self.max_step)
        return np.clip((self.command - core.ctrl_mid) / core.ctrl_half, -1.0, 1.0)


EXPERTS.add("push", PushExpert)
EXPERTS.add("lift", LiftExpert)
EXPERTS.add("pick_place", LiftExpert)  # the same grasp, then up and over to the goal in the air

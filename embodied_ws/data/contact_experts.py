"""Scripted experts of the contact tasks (``push``, ``lift``): privileged controllers reading the true state.

Both move a point of the tool with damped-least-squares steps of the arm's Jacobian (position only for an arm
of fewer than six joints; position and the home pose's hand orientation, turned to the cube's faces, for six
or more), with the gravity feed-forward of :mod:`embodied_ws.data.expert` so position servos land where the
step says. They command absolute joint positions (``env.action_mode=absolute``); a driven gripper gets
``+1`` (open) or ``-1`` (closed). Registered in :data:`embodied_ws.data.expert.EXPERTS` as ``push`` and ``lift``.
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np

from embodied_ws.core.errors import UserError
from embodied_ws.sim.robot import EE_SENSOR
from embodied_ws.sim.scene import GRASP


class _DLSExpert:
    """Shared machinery: a site driven by damped least squares on the arm joints (grippers excluded)."""

    #: the run preset ``record-demos`` builds the env from when no ``--config`` is given (the contact scene's)
    preset = "push"

    def __init__(self, env: Any, site: int, step: float, max_dq: float, damping: float = 0.05) -> None:
        if env.cfg.env.action_mode != "absolute":
            raise UserError("the scripted expert commands joint positions: set env.action_mode=absolute", "env")
        self.env, self.site, self.step, self.max_dq, self.damping = env, site, step, max_dq, damping
        self.body = int(env.model.site_bodyid[site])
        robot = env.core.robot
        self.arm = [i for i in range(robot.nu) if i not in robot.gripper_actuators]
        self.yaw = 0.0
        self.home = np.eye(3)

    def reset(self) -> None:
        """Call after ``env.reset()``: remember the hand's orientation to keep."""
        self.home = self.env.data.xmat[self.body].reshape(3, 3).copy()
        self.yaw = 0.0

    def cube_yaw(self) -> float:
        """The cube's yaw folded to the nearest quarter turn (a square looks the same every 90 degrees)."""
        scene, d = self.env.core.task.scene, self.env.data
        q = d.qpos[scene.object_qpos + 3 : scene.object_qpos + 7]
        return float((2 * np.arctan2(q[3], q[0]) + np.pi / 4) % (np.pi / 2) - np.pi / 4)

    def command(self, target: np.ndarray, grip: float, step: float | None = None) -> np.ndarray:
        """The normalised action moving the site ``step`` metres towards ``target`` (gripper: ``grip``)."""
        core, d, m = self.env.core, self.env.data, self.env.model
        robot, arm = core.robot, self.arm
        err = target - d.site_xpos[self.site]
        limit = self.step if step is None else step
        if np.linalg.norm(err) > limit:
            err = err * limit / np.linalg.norm(err)
        jp, jr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        mujoco.mj_jacSite(m, d, jp, jr, self.site)
        vi, qi = robot.qvel_idx[arm], robot.qpos_idx[arm]
        jac, e = jp[:, vi], err
        if len(arm) >= 6:  # enough joints to hold the hand's orientation too
            c, s = np.cos(self.yaw), np.sin(self.yaw)
            want = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]) @ self.home
            rot = d.xmat[self.body].reshape(3, 3)
            jac = np.vstack([jac, jr[:, vi]])
            e = np.concatenate([err, 0.5 * sum(np.cross(rot[:, i], want[:, i]) for i in range(3))])
        damping = self.damping**2 * np.eye(len(e))
        dq = np.clip(jac.T @ np.linalg.solve(jac @ jac.T + damping, e), -self.max_dq, self.max_dq)
        gravity = d.qfrc_bias[vi] / np.maximum(m.actuator_gainprm[arm, 0], 1e-6)
        cmd = np.clip(d.qpos[qi] + dq + gravity, robot.joint_low[arm], robot.joint_high[arm])
        action = np.zeros(robot.nu)
        action[arm] = (cmd - core.ctrl_mid[arm]) / core.ctrl_half[arm]
        action[robot.gripper_actuators] = grip
        return np.clip(action, -1.0, 1.0)


class PushExpert(_DLSExpert):
    """Push: the end effector above the point behind the cube (on the line goal → cube), down to pushing
    height, then through the cube to the push pose that leaves it on the goal (slowly); it goes round again
    when it loses the cube and holds still once the cube is there. A driven gripper stays closed."""

    def __init__(self, env: Any, step: float = 0.03, push_step: float = 0.01, max_dq: float = 0.15) -> None:
        m = env.model
        site = int(m.sensor_objid[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, EE_SENSOR)])
        super().__init__(env, site, step, max_dq)
        self.push_step = push_step
        self.pushing = False

    def reset(self) -> None:
        """Call after ``env.reset()``."""
        super().reset()
        self.pushing = False

    def act(self, obs: Any = None) -> np.ndarray:
        """Normalised absolute action for the env's current state (``obs`` is not needed)."""
        core, d = self.env.core, self.env.data
        task, goal, sc = core.task, core.goal[0], core.task.scene
        cube = task.cube(d.qpos[None])[0]
        ee = d.site_xpos[self.site].copy()
        if np.linalg.norm(cube[:2] - goal[:2]) < 0.4 * core.cfg.task.success_threshold:
            return self.command(ee, -1.0)  # there: hold still
        pp = task.push_pose(cube[None], goal[None])[0]
        u = (goal[:2] - cube[:2]) / max(float(np.linalg.norm(goal[:2] - cube[:2])), 1e-6)
        behind = pp.copy()
        behind[:2] -= u * 0.03
        if not self.pushing:
            high = sc.push_height + 2.5 * sc.cube_half  # the fingertips above the cube's top
            if np.linalg.norm(ee[:2] - behind[:2]) > 0.02:
                near = np.linalg.norm(ee[:2] - cube[:2]) < sc.push_radius + 3 * sc.cube_half
                if near and ee[2] < high - 0.01:  # going round from beside the cube: up first, not through it
                    return self.command(np.array([*ee[:2], high]), -1.0)
                return self.command(np.array([*behind[:2], high]), -1.0)
            if abs(ee[2] - sc.push_height) > 0.01:
                return self.command(behind, -1.0)
            self.pushing = True
        if np.linalg.norm(ee[:2] - pp[:2]) > 0.05:  # lost the cube: go round again
            self.pushing = False
        end = pp.copy()
        end[:2] = goal[:2] - u * (sc.cube_half + sc.push_radius) + u * 0.01
        return self.command(end, -1.0, self.push_step)


class LiftExpert(_DLSExpert):
    """Lift: the grasp point (between the fingers) 8 cm above the cube with the hand turned to its faces, down
    onto it, close for half a second, then up until the cube is at the goal; over again when it drops it."""

    def __init__(self, env: Any, step: float = 0.04, max_dq: float = 0.2) -> None:
        super().__init__(env, mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_SITE, GRASP), step, max_dq, 0.03)
        self.phase, self.t = 0, 0

    def reset(self) -> None:
        """Call after ``env.reset()``."""
        super().reset()
        self.phase, self.t = 0, 0

    def act(self, obs: Any = None) -> np.ndarray:
        """Normalised absolute action for the env's current state (``obs`` is not needed)."""
        core, d = self.env.core, self.env.data
        cube, goal = core.task.cube(d.qpos[None])[0], core.goal[0]
        g = d.site_xpos[self.site].copy()
        if self.phase < 2:
            self.yaw = self.cube_yaw()
        if self.phase == 0:
            target = cube + np.array([0.0, 0.0, 0.08])
            self.phase = 1 if np.linalg.norm(g - target) < 0.01 else 0
            return self.command(target, 1.0)
        if self.phase == 1:
            if np.linalg.norm(g - cube) < 0.008:
                self.phase, self.t = 2, 0
            return self.command(cube, 1.0)
        if self.phase == 2:
            self.t += 1
            self.phase = 3 if self.t > 12 else 2
            return self.command(cube, -1.0)
        if np.linalg.norm(g - cube) > 2 * core.task.scene.cube_half:  # dropped it: start again
            self.phase = 0
        return self.command(g + (goal + np.array([0.0, 0.0, 0.015]) - cube), -1.0)

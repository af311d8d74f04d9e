"""End-effector delta actions (``env.action_mode: ee_delta``) through damped-least-squares differential IK.

A policy in this mode commands a Cartesian step of the end effector, ``[dx, dy, dz]`` (and ``dyaw`` about the
world z axis with ``env.ee_yaw``) in [-1, 1], then one absolute action per driven gripper. Each control step:

1. the step in metres (radians) is the action times :attr:`EEDelta.step`: the largest step along any axis
   (about z) the joint-delta bounds allow at the home pose — an action of 1 is followed there — capped by
   :func:`~embodied_ws.sim.mapping.ee_speed` and ``env.ee_speed_limit`` × the control period;
2. the arm's joint step is ``dq = Jᵀ (J Jᵀ + λ² I)⁻¹ dx``, ``J`` the end-effector site's Jacobian columns of the
   arm joints at the **measured** joint positions (MuJoCo's ``mj_jacSite``; the yaw row is its angular z row);
   joints whose set-point is already at a limit and would be pushed further are dropped and the step solved
   again, so the other joints make up for them;
   with ``env.ee_orientation: hold`` (the contact tasks' default) on an arm of six or more joints, the hand is held:
   the site's angular Jacobian rows join the solve (weighted :data:`HOLD_WEIGHT` metres per radian) with a
   target that turns the hand half way back to its home orientation each step (at most :data:`HOLD_MAX_STEP`;
   the heading is left to ``dyaw`` when the policy has it) — the position-only solve let the hand tilt freely,
   70-160 degrees within one episode of random actions on the Panda, so fingers meant to close over a cube
   pointed sideways; every Cartesian controller of the field holds the orientation it does not command;
3. ``dq`` is scaled down as a whole (direction kept) until no joint moves faster than its joint-delta bound
   (``delta_scale``, the measured joint speeds included: :func:`~embodied_ws.sim.mapping.joint_delta_scale`),
   and integrated into the servo set-points, clipped to the control ranges — the joint-delta mode's limits.

The env core and the deploy control core both call :meth:`EEDelta.integrate` (through
:class:`~embodied_ws.sim.mapping.PolicyIO`), so the conversion on the robot is the training code.

No IK library: this is one small (3 or 4 × n) damped solve per env and step, done batched in numpy on MuJoCo's
own Jacobians; an IK package would add a dependency, a second kinematic model and a per-call setup costing more
than the solve.
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np

from embodied_ws.core.errors import ConfigError


def ee_speed(step: Any, ctrl_half: np.ndarray, lever: np.ndarray, control_dt: float) -> float:
    """End-effector speed (m/s) at home when every joint moves its full delta step ``step · ctrl_half``."""
    return float(np.sum(step * ctrl_half * lever)) / control_dt


#: DLS damping λ (metres): the step's gain along a direction of singular value σ is σ / (σ² + λ²); arm Jacobians'
#: singular values are 0.1-1 m away from singularities (≤ 4 % short at 0.1 m), and near one the joint step stays
#: below 1 / (2λ) = 25 rad per metre commanded
DAMPING = 0.02
#: orientation hold: metres of end-effector travel one radian of hand rotation weighs as in the stacked solve
HOLD_WEIGHT = 0.2
#: orientation hold: the fraction of the orientation error corrected per control step, and its cap (rad)
HOLD_GAIN, HOLD_MAX_STEP = 0.5, 0.05


def clip_unit(x: np.ndarray) -> np.ndarray:
    """Clip to [-1, 1]."""
    return np.minimum(np.maximum(x, -1.0), 1.0)


class DiffIK:
    """Damped-least-squares differential IK of one site over some dofs, batched over envs.

    :param model: the robot's model (only its kinematics are used)
    :param site: the end-effector site id
    :param dofs: the arm's dof indices (qvel addresses), one per Jacobian column
    :param yaw: add the angular z row (rotation about the world vertical)
    :param damping: λ in ``Jᵀ (J Jᵀ + λ² I)⁻¹``
    :param hold: the site orientation ``(3, 3)`` to hold (world frame; its heading follows the hand's with
        ``yaw``), or None: orientation free
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        site: int,
        dofs: np.ndarray,
        yaw: bool,
        damping: float = DAMPING,
        hold: np.ndarray | None = None,
    ):
        self.model, self.site, self.dofs, self.yaw = model, site, np.asarray(dofs, dtype=np.int64), yaw
        self.damping = float(damping)
        self.rows = 4 if yaw else 3
        #: the held orientation as a quaternion (``policy.json`` records it), or None
        self.hold_quat: np.ndarray | None = None
        self._hold = np.eye(3) if hold is None else np.asarray(hold, dtype=float).reshape(3, 3)
        if hold is not None:
            self.hold_quat = np.zeros(4)
            mujoco.mju_mat2Quat(self.hold_quat, self._hold.reshape(9))
        #: world angular axes held (x, y; and z without a yaw action)
        self.hold_axes = [] if hold is None else ([0, 1] if yaw else [0, 1, 2])
        self._data = mujoco.MjData(model)
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))
        #: ``(n, 3)`` the site's positions at the rows of the last :meth:`jacobians` / :meth:`stacked_batch`
        self.site_pos = np.zeros((0, 3))

    def _kinematics(self, qpos: np.ndarray) -> None:
        d = self._data
        d.qpos[:] = qpos
        mujoco.mj_kinematics(self.model, d)
        mujoco.mj_comPos(self.model, d)  # mj_jac reads cdof and subtree_com
        mujoco.mj_jacSite(self.model, d, self._jacp, self._jacr, self.site)

    def jacobian(self, qpos: np.ndarray) -> np.ndarray:
        """``(rows, len(dofs))`` Jacobian of the site at ``qpos`` (position rows, then yaw)."""
        self._kinematics(qpos)
        jac = self._jacp[:, self.dofs]
        return np.vstack([jac, self._jacr[2:3, self.dofs]]) if self.yaw else jac

    def hold_errors(self, rot: np.ndarray) -> np.ndarray:
        """``(n, 3)`` world-frame rotations (axis × angle) from site orientations ``rot (n, 3, 3)`` to the held
        one, whose heading is turned to each site's own with ``yaw``."""
        ref = np.broadcast_to(self._hold, rot.shape)
        if self.yaw:  # dyaw owns the heading: turn the held orientation about world z to the hand's
            turn = _heading(rot) - _heading(self._hold[None])
            c, s = np.cos(turn), np.sin(turn)
            zrot = np.zeros_like(rot)
            zrot[:, 0, 0], zrot[:, 0, 1], zrot[:, 1, 0], zrot[:, 1, 1], zrot[:, 2, 2] = c, -s, s, c, 1.0
            ref = zrot @ ref
        # the rotation's log by hand, batched: mju_mat2Quat/mju_quat2Vel per env cost 2.1 ms per 32-env step here
        err = ref @ rot.transpose(0, 2, 1)  # the world-frame rotation taking the site to the held orientation
        vee = 0.5 * np.stack([err[:, 2, 1] - err[:, 1, 2], err[:, 0, 2] - err[:, 2, 0], err[:, 1, 0] - err[:, 0, 1]], 1)
        sin = np.linalg.norm(vee, axis=1, keepdims=True)
        angle = np.arctan2(sin, 0.5 * (np.trace(err, axis1=1, axis2=2)[:, None] - 1.0))
        return vee * np.where(sin > 1e-9, angle / np.maximum(sin, 1e-9), 1.0)

    def stacked(self, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`stacked_batch` for one ``qpos``: ``(rows + held, dofs)`` and ``(held,)``."""
        jac, err = self.stacked_batch(np.asarray(qpos)[None])
        return jac[0], err[0]

    def site_pose(self, qpos: np.ndarray) -> tuple[np.ndarray, float]:
        """Site position and yaw (heading of its x axis about world z) at ``qpos``."""
        d = self._data
        d.qpos[:] = qpos
        mujoco.mj_kinematics(self.model, d)
        rot = d.site_xmat[self.site].reshape(3, 3)
        return d.site_xpos[self.site].copy(), float(np.arctan2(rot[1, 0], rot[0, 0]))

    def jacobians(self, qpos: np.ndarray) -> np.ndarray:
        """``(n, rows, len(dofs))`` Jacobians for a batch of ``qpos`` rows."""
        jac = np.empty((len(qpos), self.rows, self.dofs.size))
        self.site_pos = np.empty((len(qpos), 3))
        for i, q in enumerate(qpos):
            jac[i] = self.jacobian(q)
            self.site_pos[i] = self._data.site_xpos[self.site]
        return jac

    def stacked_batch(self, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The solve's rows at each ``qpos`` row: ``(n, rows + held, dofs)`` Jacobians (the held angular rows
        weighted :data:`HOLD_WEIGHT`) and ``(n, held)`` targets of the held rows: the step turning the hand back
        towards the held orientation (:data:`HOLD_GAIN` of the error, at most :data:`HOLD_MAX_STEP`)."""
        if not self.hold_axes:
            return self.jacobians(qpos), np.zeros((len(qpos), 0))
        n, axes = len(qpos), self.hold_axes
        jac = np.empty((n, self.rows + len(axes), self.dofs.size))
        rot = np.empty((n, 3, 3))
        self.site_pos = np.empty((n, 3))
        for i, q in enumerate(qpos):
            jac[i, : self.rows] = self.jacobian(q)
            jac[i, self.rows :] = HOLD_WEIGHT * self._jacr[axes][:, self.dofs]
            rot[i] = self._data.site_xmat[self.site].reshape(3, 3)
            self.site_pos[i] = self._data.site_xpos[self.site]
        err = HOLD_GAIN * self.hold_errors(rot)[:, axes]
        err /= np.maximum(1.0, np.linalg.norm(err, axis=1, keepdims=True) / HOLD_MAX_STEP)
        return jac, HOLD_WEIGHT * err

    def solve(self, jac: np.ndarray, dx: np.ndarray) -> np.ndarray:
        """DLS joint steps ``(n, dofs)`` for Cartesian steps ``dx (n, rows)`` through Jacobians ``jac``."""
        jjt = jac @ jac.transpose(0, 2, 1)
        jjt += (self.damping**2) * np.eye(jac.shape[1])
        y = np.linalg.solve(jjt, dx[..., None])
        return (jac.transpose(0, 2, 1) @ y)[..., 0]


def _heading(rot: np.ndarray) -> np.ndarray:
    """``(n,)`` heading about world z of each frame's x axis (its y axis where x is near vertical)."""
    x = np.where((np.hypot(rot[:, 0, 0], rot[:, 1, 0]) > 0.3)[:, None], rot[:, :, 0], rot[:, :, 1])
    return np.arctan2(x[:, 1], x[:, 0])


def bounded(step: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Scale each row of ``step`` down as a whole (direction kept) until ``|step| ≤ bound`` everywhere."""
    step = np.where(np.isfinite(step), step, 0.0)  # a NaN state (physics reset pending) moves nothing
    over = np.max(np.abs(step) / bound, axis=1, keepdims=True)
    return step / np.maximum(over, 1.0)


class EEDelta:
    """The ``ee_delta`` action mode of one robot: Cartesian (+yaw) steps of the end effector → servo set-points.

    Built by :meth:`of`; :attr:`action_dim` actions: ``dx, dy, dz[, dyaw]`` then one per gripper (absolute).

    :param ik: the differential IK of the end-effector site over the arm's dofs
    :param arm: actuator indices of the arm servos (moved by IK)
    :param grippers: actuator indices of the driven grippers (absolute actions)
    :param bound: per arm actuator, the largest set-point step per control step in [-1, 1] units
    :param ctrl_half: per arm actuator, the control range's half width (rad or m per set-point unit)
    :param step: Cartesian step per unit action: metres for dx, dy, dz (and radians for dyaw)
    :param floor: the lowest end-effector height (m, world z) a step leads to (a table-top task's tool floor):
        a downward step stops there, and an end effector below it is stepped back up; None: no floor
    """

    def __init__(
        self,
        ik: DiffIK,
        arm: np.ndarray,
        grippers: np.ndarray,
        bound: np.ndarray,
        ctrl_half: np.ndarray,
        step: np.ndarray,
        floor: float | None = None,
    ) -> None:
        self.ik, self.arm, self.grippers = ik, arm, grippers
        self.bound, self.ctrl_half, self.step = bound, ctrl_half, step
        self.floor = floor
        self.k = ik.rows
        self.action_dim = self.k + grippers.size

    @classmethod
    def of(
        cls,
        robot: Any,
        io: Any,
        yaw: bool,
        ee_speed_limit: float,
        task: str,
        hold_orientation: bool = True,
        floor: float | None = None,
    ) -> EEDelta:
        """The mode for ``robot`` as mapped by ``io`` (a :class:`~embodied_ws.sim.mapping.PolicyIO` being built);
        a robot without an end effector or with an arm actuator that is not a position servo: one line.
        ``hold_orientation`` holds the hand at its home orientation on an arm of six or more joints (fewer
        cannot: their joints go to the position); ``floor``: the task's lowest end-effector height."""
        model = robot.model
        unfit = ee_delta_unfit(robot, io, task)
        if unfit:
            raise ConfigError(unfit, "env.action_mode")
        arm = np.flatnonzero(~io.gripper)
        site = int(model.sensor_objid[_ee_sensor(model)])
        home = robot.home_qpos if robot.home_qpos is not None else model.qpos0
        hold = None
        if hold_orientation and arm.size >= 6:
            d = mujoco.MjData(model)
            d.qpos[:] = home
            mujoco.mj_kinematics(model, d)
            hold = d.site_xmat[site].reshape(3, 3).copy()
        ik = DiffIK(model, site, robot.qvel_idx[arm], yaw, hold=hold)
        half = io.ctrl_half[arm]
        bound = np.broadcast_to(io.delta_scale, io.ctrl_half.shape)[arm].astype(float)
        dt = io.control_dt
        # the step along each axis the joint bounds allow at home, the smallest over ±x, ±y, ±z: an action of 1
        # along any axis is followed at home. ee_speed (all joints' levers summed) is only an upper bound, 6-9x
        # this on arm3 and the Panda: actions above ~0.15 would all saturate. Capped by it and env.ee_speed_limit.
        jac = ik.stacked(home)[0][None]  # at home the hand is at the held orientation: those rows ask nothing
        held = jac.shape[1] - ik.rows
        axes = np.vstack([np.eye(ik.rows), -np.eye(ik.rows)])
        with np.errstate(divide="ignore"):  # an axis no joint moves along: inf, left to the other axes / the cap
            feasible = np.array(
                [1.0 / np.max(np.abs(ik.solve(jac, np.r_[u, np.zeros(held)][None])[0] / half) / bound) for u in axes]
            )
        cap = ee_speed(bound, half, robot.ee_lever[arm], dt) * dt
        if ee_speed_limit > 0:
            cap = min(cap, ee_speed_limit * dt)
        pos = min(float(np.min(feasible[[0, 1, 2, ik.rows, ik.rows + 1, ik.rows + 2]])), cap)
        steps = [pos] * 3 + ([float(min(feasible[3], feasible[-1]))] if yaw else [])
        if not np.isfinite(steps[-1]):
            raise ConfigError(f"no arm joint of {robot.name!r} turns the end effector about the vertical at home "
                              "(set env.ee_yaw=false)", "env.ee_yaw")  # fmt: skip
        grippers = np.array(robot.gripper_actuators, dtype=np.int64)  # the order of robot.grippers
        return cls(ik, arm, grippers, bound, half, np.array(steps), floor)

    @property
    def holds_orientation(self) -> bool:
        """Whether the hand is held at its home orientation (``env.ee_orientation`` resolved on this arm)."""
        return self.ik.hold_quat is not None

    def names(self) -> list[str]:
        """Name of each action entry (``ee/dx`` ... then ``gripper/<actuator index>``)."""
        return ["ee/dx", "ee/dy", "ee/dz", "ee/dyaw"][: self.k] + [f"gripper/{g}" for g in self.grippers]

    def setpoint_step(self, qpos: np.ndarray, ee_actions: np.ndarray, arm_setpoint: np.ndarray) -> np.ndarray:
        """Set-point steps ``(n, arm)`` in [-1, 1] units for Cartesian actions ``(n, k)`` at measured ``qpos (n, nq)``.

        Joints whose set-point sits at a limit and would be pushed past it are left out of the solve (the
        others make up for them); the step is then bounded by the joint-delta bounds as a whole.
        """
        jac, hold = self.ik.stacked_batch(qpos)
        move = ee_actions * self.step
        if self.floor is not None:  # down to the floor at most; below it, back up
            move[:, 2] = np.maximum(move[:, 2], self.floor - self.ik.site_pos[:, 2])
        dx = np.concatenate([move, hold], axis=1)
        dq = self.ik.solve(jac, dx) / self.ctrl_half
        stuck = ((arm_setpoint >= 1.0) & (dq > 0)) | ((arm_setpoint <= -1.0) & (dq < 0))
        if stuck.any():
            rows = stuck.any(axis=1)
            free = jac[rows] * ~stuck[rows][:, None, :]
            dq[rows] = self.ik.solve(free, dx[rows]) / self.ctrl_half
        return bounded(dq, self.bound)

    def integrate(self, setpoint: np.ndarray, actions: np.ndarray, qpos: np.ndarray) -> np.ndarray:
        """New set-points ``(n, nu)`` in [-1, 1] units for actions ``(n, action_dim)`` already in [-1, 1]."""
        out = setpoint.copy()
        arm = setpoint[:, self.arm]
        out[:, self.arm] = clip_unit(arm + self.setpoint_step(qpos, actions[:, : self.k], arm))
        out[:, self.grippers] = actions[:, self.k :]
        return out

    def idle(self, hold: np.ndarray) -> np.ndarray:
        """The action that keeps everything where it is, given the joint hold action ``hold (nu,)``."""
        return np.concatenate([np.zeros(self.k), hold[self.grippers]])

    def describe(self) -> dict[str, Any]:
        """``policy.json``'s record of the mode (what a controller needs to reproduce it)."""
        return {
            "names": self.names(),
            "site": mujoco.mj_id2name(self.ik.model, mujoco.mjtObj.mjOBJ_SITE, self.ik.site),
            "arm_actuators": self.arm.tolist(),
            "gripper_actuators": self.grippers.tolist(),
            "step": self.step.tolist(),
            "floor": self.floor,
            "damping": self.ik.damping,
            "hold_orientation": None
            if self.ik.hold_quat is None
            else {
                "quat": self.ik.hold_quat.tolist(),
                "axes": self.ik.hold_axes,
                "weight": HOLD_WEIGHT,
                "gain": HOLD_GAIN,
                "max_step": HOLD_MAX_STEP,
            },
            "mapping": (
                "dx = a[:k] * step; with a floor, dz = max(dz, floor - site z); "
                "dq = J^T (J J^T + damping^2 I)^-1 dx (J: site Jacobian of the arm joints at the measured joints; "
                "yaw row = angular z; with hold_orientation, J gains the angular rows of its "
                "axes x weight and dx the rotation to the held orientation x gain x weight, capped at max_step); "
                "joints at a limit pushed outward dropped and solved again; "
                "s_arm = clip(s_arm + bounded(dq / half, delta_scale), -1, 1); grippers: s = a[k:]"
            ),
        }


def _ee_sensor(model: mujoco.MjModel) -> int:
    from embodied_ws.sim.robot import EE_SENSOR

    return mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, EE_SENSOR)


def ee_delta_unfit(robot: Any, io: Any, task: str = "") -> str | None:
    """Why ``ee_delta`` cannot drive ``robot`` as mapped by ``io`` (one line naming the fix), or None when it can:
    it needs an end effector and an arm of position servos (the grippers aside)."""
    if _ee_sensor(robot.model) < 0 or robot.ee_lever is None:
        return (f"ee_delta needs an end effector, and task {task!r} loads {robot.name!r} without one "
                "(use joint delta: env.action_mode=delta)")  # fmt: skip
    arm = np.flatnonzero(~io.gripper)
    odd = [robot.actuator_names[a] for a in arm if not io.servo[a]]
    if odd:
        names = ", ".join(odd)
        return f"ee_delta moves position servos only; {names} on {robot.name!r} is not one (use env.action_mode=delta)"
    if arm.size == 0:
        return f"ee_delta needs arm joints; {robot.name!r} has none"
    return None

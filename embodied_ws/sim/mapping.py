"""The observation/action mapping between a policy and a robot running a task — one module for the env and
the deploy loop, so what a policy sees and what its actions do are the same code in training and on the robot.

- **actions → controls**: actions in [-1, 1]; a position servo in ``delta`` mode integrates its action into a
  set-point (at most ``delta_scale`` of its half range per control period, never faster than the joint can
  follow, and on an arm that cannot follow its set-points never further ahead of the measured joint than it
  covers in two control periods: :func:`setpoint_lead`), ``absolute`` actuators map linearly onto their control
  range, a gripper's action is absolute
  (-1 closed, +1 open; :mod:`embodied_ws.sim.gripper`);
- **end-effector delta** (``ee_delta``): a Cartesian (+yaw) step of the end effector moves the arm servos'
  set-points through damped-least-squares IK from the measured joints, inside the same bounds
  (:mod:`embodied_ws.sim.ik`); the gripper actions follow, absolute;
- **observation**: the task's observation, then the servo set-points in delta mode;
- **hold**: the action that keeps the servos where the robot is (an episode's first set-points, deploy's hold).

The env core adds DR, latency, noise and episode bookkeeping around it; the deploy control core adds the
safety envelope. Neither builds the other.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from embodied_ws.config.schema import RunConfig
from embodied_ws.sim import robot_defaults as rd
from embodied_ws.sim.gripper import binary_command
from embodied_ws.sim.ik import EEDelta, ee_delta_unfit, ee_speed
from embodied_ws.sim.robot import Robot, load_robot
from embodied_ws.sim.tasks import TASKS


def clip_unit(x: np.ndarray) -> np.ndarray:
    """Clip to [-1, 1] with two ufunc calls (np.clip's Python wrapper costs more than the work here)."""
    return np.minimum(np.maximum(x, -1.0), 1.0)


def build_robot(cfg: RunConfig) -> Robot:
    """Load the configured robot with what its task needs (end-effector sensor for reach), stepping at
    ``env.physics_dt`` when set; with ``env.servo_damping: auto``, underdamped servos get joint damping
    (:func:`~embodied_ws.sim.dynamics_probe.damp_underdamped`)."""
    task_cls = TASKS.get(cfg.env.task, "env.task")
    robot = load_robot(
        cfg.env.robot,
        cfg.task.ee_body or None,
        need_ee=task_cls.needs_ee,
        robot_args=cfg.env.robot_args,
        package_paths=cfg.env.package_paths,
        free_space=task_cls.free_space,
        gripper=cfg.task.gripper,
        timestep=cfg.env.physics_dt,
    )
    if cfg.env.servo_damping == "auto":
        from embodied_ws.sim.dynamics_probe import damp_underdamped

        robot.added_damping = damp_underdamped(robot)
    return robot


def joint_delta_scale(
    robot: Robot,
    delta_scale: float,
    control_dt: float,
    ctrl_half: np.ndarray,
    ee_speed_limit: float = 0.0,
    measured: np.ndarray | None = None,
) -> Any:
    """Delta mode: the largest set-point move per control step, per actuator, as a fraction of its
    half range (rules in :mod:`embodied_ws.sim.robot_defaults`): ``delta_scale``, or less where the
    joint's velocity limit ``v`` allows only ``v · control_dt`` per step; for a model with no velocity
    limit, ``delta_scale`` shrunk by one common factor so that the joints together command at most
    ``ee_speed_limit`` m/s at the end effector in the home pose. A scalar when no bound applies.

    ``measured``: the joint speeds the arm actually reaches (:mod:`embodied_ws.sim.dynamics_probe`); a
    set-point never moves faster than its joint can follow, whatever the model declares (a heavily damped
    joint reaching 0.6 rad/s does not get set-points moving at a declared 2 rad/s).
    """
    scale = _declared_delta_scale(robot, delta_scale, control_dt, ctrl_half, ee_speed_limit)
    if measured is None or measured.shape != ctrl_half.shape or not np.isfinite(measured).any():
        return scale
    follow = np.where(np.isfinite(measured), measured * control_dt / np.maximum(ctrl_half, 1e-9), np.inf)
    if np.all(np.broadcast_to(scale, ctrl_half.shape) <= follow):
        return scale  # the arm follows every set-point the declared rules allow: unchanged
    return np.minimum(scale, follow)


def _declared_delta_scale(
    robot: Robot, delta_scale: float, control_dt: float, ctrl_half: np.ndarray, ee_speed_limit: float
) -> Any:
    v = robot.velocity_limit
    if v is not None and np.isfinite(v).any():
        cap = np.where(np.isfinite(v), v * control_dt / np.maximum(ctrl_half, 1e-9), np.inf)
        return np.minimum(delta_scale, cap)
    lever = robot.ee_lever
    if not ee_speed_limit or lever is None or lever.shape != ctrl_half.shape:
        return delta_scale
    speed = ee_speed(delta_scale, ctrl_half, lever, control_dt)
    if speed <= ee_speed_limit:
        return delta_scale
    return np.full(ctrl_half.shape, delta_scale * ee_speed_limit / speed)


def episode_length(configured: int, min_seconds: float, control_dt: float) -> int:
    """Control steps per episode: ``env.episode_steps``, or more when the task needs ``min_seconds``."""
    return max(configured, math.ceil(min_seconds / control_dt - 1e-9))


#: a set-point of a joint that cannot follow it leads the joint by at most what the joint covers at its measured
#: speed in this many control periods (:func:`setpoint_lead`)
LEAD_PERIODS = 2.0
#: ... and never by less than this multiple of the servo's error at its force limit (``force / kp``), so a servo
#: that holds a load (gravity) with a large error still holds it
LEAD_HOLD_MARGIN = 2.0


def lagging_joints(robot: Robot, task: Any, delta: np.ndarray, setpoint_speed: np.ndarray) -> np.ndarray | None:
    """``(nu,)`` bool, the delta servos that cannot follow set-points moving at ``setpoint_speed`` (their measured
    speed, :mod:`embodied_ws.sim.dynamics_probe`, is slower), or None when the arm follows: none lags, or the task
    does not count those that do (a reach task counts only the joints that move the end effector)."""
    speed = np.where(delta, setpoint_speed, np.inf)
    lag = robot.dynamics().lagging(speed) & delta
    arm_lags = getattr(task, "lagging_joints", None)
    if not lag.any() or (arm_lags is not None and not arm_lags(speed).any()):
        return None
    return lag


def setpoint_lead(
    robot: Robot, task: Any, delta: np.ndarray, setpoint_speed: np.ndarray, control_dt: float, ctrl_half: np.ndarray
) -> np.ndarray | None:
    """``(nu,)`` the most (action units) each delta set-point may lead its measured joint, or None when no joint
    lags (then nothing changes).

    A joint that cannot follow its set-points (its measured speed, :mod:`embodied_ws.sim.dynamics_probe`, is
    what bounds them: a heavily damped or force-limited servo, and slower still under DR) would otherwise let
    its set-point run ahead of it, seconds ahead on a long move: the policy's command then acts long after it
    was given and the joint cannot stop where the policy stops. Its set-point is kept within the distance the
    joint covers at its measured speed in :data:`LEAD_PERIODS` control periods (at least :data:`LEAD_HOLD_MARGIN`
    × its error at the force limit), so the command and the arm agree. Joints that follow are unbounded, and so
    is every joint of an arm the task does not count as lagging (a reach task counts only the joints that move
    the end effector: an arm whose flange roll alone lags, e.g. the xArm7 URDF, is unchanged).

    A task with contacts (not ``free_space``: push, lift, a user's task) bounds every delta set-point the same
    way, lagging or not: a hand pressed on the table or on a held cube does not follow its set-point, which
    otherwise wound up unseen (a lift policy's commanded grasp point sat 12 cm under the table and 9 cm aside
    of its hand after 1.5 M steps: lifting meant first unwinding that, five full steps before the hand moved,
    and the policy never found it).

    :param task: the task (its ``lagging_joints``, when it has one, says whether the arm lags; ``free_space``
        whether it has contacts)
    :param delta: ``(nu,)`` bool, the delta-mode servos
    :param setpoint_speed: ``(nu,)`` how fast each set-point may move (``inf``: not a delta servo)
    """
    if not delta.any():
        return None
    speed = np.where(delta, setpoint_speed, np.inf)
    if getattr(task, "free_space", False):
        lag = lagging_joints(robot, task, delta, setpoint_speed)
        if lag is None:
            return None
    else:
        lag = delta.copy()
    model = robot.model
    kp = np.abs(model.actuator_gainprm[:, 0])
    force = np.where(model.actuator_forcelimited > 0, np.abs(model.actuator_forcerange).max(axis=1), np.inf)
    hold = np.where(kp > 0, force / np.maximum(kp, 1e-12), np.inf)
    hold = np.where(np.isfinite(hold), hold * LEAD_HOLD_MARGIN, 0.0)
    # what the joint covers in LEAD_PERIODS: at its measured speed, or its set-point's where that is slower
    reach = np.minimum(robot.dynamics().measured_speeds(), speed) * LEAD_PERIODS * control_dt
    lead = np.maximum(reach, hold) / np.maximum(ctrl_half, 1e-9)
    return np.where(lag & np.isfinite(lead), lead, np.inf)


class PolicyIO:
    """What a policy's observation and actions mean on ``robot`` running ``task`` (rules in the module docstring).

    :param cfg: the run configuration (``env.action_mode``, ``env.delta_scale``, ``env.ee_speed_limit``,
        ``env.frame_skip``, ``env.episode_steps``)
    :param robot: the loaded robot
    :param task: the task built on it
    """

    def __init__(self, cfg: RunConfig, robot: Robot, task: Any) -> None:
        self.robot, self.task = robot, task
        nu = robot.nu
        self.control_dt = robot.control_dt * cfg.env.frame_skip
        self.ctrl_mid = (robot.ctrl_high + robot.ctrl_low) / 2.0
        self.ctrl_half = (robot.ctrl_high - robot.ctrl_low) / 2.0
        self.servo = rd.position_servos(robot.model)
        self.gripper = np.zeros(nu, dtype=bool)
        for k, g in zip(robot.gripper_actuators, robot.grippers, strict=False):
            self.ctrl_mid[k], self.ctrl_half[k], self.gripper[k] = g.ctrl_mid, g.ctrl_half, True
        #: ``task.gripper_command: binary``: a gripper's action closes it fully or opens it fully
        self.binary_gripper = cfg.task.gripper_command == "binary" and bool(self.gripper.any())
        #: the action mode; ``auto`` resolved below (what ``policy.json`` records and deploy rebuilds)
        self.mode = cfg.env.action_mode
        #: actuators whose actions move a set-point (delta-mode servos) rather than set it
        self.delta = self.servo & (self.mode in ("delta", "ee_delta", "auto")) & ~self.gripper
        self.any_delta, self.all_delta = bool(self.delta.any()), bool(self.delta.all())
        measured = robot.dynamics().measured_speeds() if self.any_delta else None
        self.delta_scale = joint_delta_scale(
            robot, cfg.env.delta_scale, self.control_dt, self.ctrl_half, cfg.env.ee_speed_limit, measured
        )
        # set-points of delta-mode joints move at most this fast; absolute-mode set-points jump (no bound)
        joint_speed = np.where(self.delta, np.broadcast_to(self.delta_scale, (nu,)) * self.ctrl_half, np.inf)
        self.episode_steps = episode_length(
            cfg.env.episode_steps, task.min_episode_seconds(joint_speed / self.control_dt), self.control_dt
        )
        #: ``(nu,)`` the most a delta set-point may lead its measured joint (action units; ``inf``: unbounded), or
        #: None when every joint follows its set-points (:func:`setpoint_lead`)
        self.lead = setpoint_lead(
            robot, task, self.delta, joint_speed / self.control_dt, self.control_dt, self.ctrl_half
        )
        if self.mode == "auto":
            self.mode = self.auto_mode()
        self.obs_dim = task.obs_dim + (nu if self.any_delta else 0)
        #: ``ee_delta``: the end-effector mode (:mod:`embodied_ws.sim.ik`); None in the joint modes
        self.ee = None
        if self.mode == "ee_delta":
            self.ee = EEDelta.of(
                robot,
                self,
                cfg.env.ee_yaw,
                cfg.env.ee_speed_limit,
                cfg.env.task,
                self.holds_orientation(cfg, task),
                getattr(task, "ee_floor", None),
            )
        #: the policy's action size: one per actuator, or ``[dx, dy, dz(, dyaw)]`` + one per gripper
        self.action_dim = nu if self.ee is None else self.ee.action_dim

    def auto_mode(self) -> str:
        """``env.action_mode: auto``: ``ee_delta`` for an arm of position servos with an end effector
        (:func:`~embodied_ws.sim.ik.ee_delta_unfit`), else ``delta``.

        Reach learns several times faster from Cartesian steps solved again at the measured joints every period
        than from joint deltas, where the policy has to learn the arm's inverse kinematics itself (and, on an arm
        that cannot follow its set-points, through their lag). Default preset, one run each (docs/benchmarks.md):
        Menagerie Panda 0.969 after 1.7 min in ``ee_delta`` vs 0.941 after 10.8 in joint deltas, Kinova Jaco2
        0.945 after 5.9 min vs 0.863 after 14, the heavily damped Panda 0.977 after 4.4 vs 0.820 after 14."""
        return "delta" if ee_delta_unfit(self.robot, self) else "ee_delta"

    @staticmethod
    def holds_orientation(cfg: RunConfig, task: Any) -> bool:
        """``env.ee_orientation`` resolved: ``auto`` is the task's ``ee_hold_orientation`` (default: free)."""
        if cfg.env.ee_orientation == "auto":
            return bool(getattr(task, "ee_hold_orientation", False))
        return cfg.env.ee_orientation == "hold"

    def action_index(self, actuator: int) -> int:
        """Where actuator ``actuator``'s entry is in a policy action: its own index in the joint modes; a
        gripper's entry after ``[dx, dy, dz(, dyaw)]`` in ``ee_delta``."""
        if self.ee is None:
            return actuator
        where = np.flatnonzero(self.ee.grippers == actuator)
        if not where.size:
            raise ValueError(f"actuator {actuator} has no action entry of its own in ee_delta (not a gripper)")
        return int(self.ee.k + where[0])

    def motion_entries(self) -> np.ndarray:
        """``(action_dim,)`` bool: the policy action's entries that move the arm (False: a gripper's absolute
        command, a state rather than an effort)."""
        if self.ee is None:
            return ~self.gripper
        return np.arange(self.action_dim) < self.ee.k

    def hold_action(self, qpos: np.ndarray) -> np.ndarray:
        """The action that keeps servos where they are (0 for torque actuators)."""
        robot = self.robot
        a = np.zeros(robot.nu)
        q = qpos[robot.qpos_idx]
        a[self.servo] = ((q - self.ctrl_mid) / self.ctrl_half)[self.servo]
        for k, g in zip(robot.gripper_actuators, robot.grippers, strict=False):
            a[k] = g.action(q[k])
        return np.clip(a, -1.0, 1.0)

    def idle_action(self, qpos: np.ndarray) -> np.ndarray:
        """The action (``action_dim``) that keeps everything where it is: 0 for what integrates, else the hold."""
        hold = self.hold_action(qpos)
        return np.where(self.delta, 0.0, hold) if self.ee is None else self.ee.idle(hold)

    def integrate(
        self, setpoint: np.ndarray, actions: np.ndarray, qpos: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(new set-points, controls)`` for a batch of actions already in [-1, 1] (delta servos integrate).

        :param qpos: the measured joint positions ``(n, nq)`` the actions were chosen at (``ee_delta`` needs them)
        """
        a = actions
        if self.ee is not None:
            if qpos is None:
                raise ValueError("ee_delta converts actions at the measured joint positions: pass qpos")
            a = setpoint = self.ee.integrate(setpoint, actions, qpos)
            if self.lead is not None:
                q = (qpos[:, self.robot.qpos_idx] - self.ctrl_mid) / self.ctrl_half
                bounded = clip_unit(np.minimum(np.maximum(setpoint, q - self.lead), q + self.lead))
                a = setpoint = np.where(self.delta, bounded, a)
        elif self.lead is not None:
            if qpos is None:
                raise ValueError("a set-point lead bound needs the measured joint positions: pass qpos")
            q = (qpos[:, self.robot.qpos_idx] - self.ctrl_mid) / self.ctrl_half
            moved = clip_unit(np.minimum(np.maximum(setpoint + self.delta_scale * a, q - self.lead), q + self.lead))
            a = setpoint = np.where(self.delta, moved, a)
        elif self.all_delta:
            a = setpoint = clip_unit(setpoint + self.delta_scale * a)
        elif self.any_delta:
            moved = clip_unit(setpoint + self.delta_scale * a)
            a = setpoint = np.where(self.delta, moved, a)
        if self.binary_gripper:
            tracked = setpoint is a  # the set-points the observation shows carry the command as applied
            a = a.copy()
            a[:, self.gripper] = binary_command(a[:, self.gripper])
            setpoint = a if tracked else setpoint
        return setpoint, self.ctrl_mid + self.ctrl_half * a

    def gripper_actions(self, actions: np.ndarray) -> np.ndarray:
        """The grippers' entries of a policy action as they set the grippers (``binary``: -1 or +1)."""
        return binary_command(actions) if self.binary_gripper else np.asarray(actions, dtype=np.float64)

    def observe(
        self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray, setpoint: np.ndarray
    ) -> np.ndarray:
        """The policy's observation for a batch: the task's, then the set-points in delta mode."""
        obs = self.task.observe(qpos, qvel, sensordata, goal)
        if self.obs_dim == obs.shape[1]:
            return obs
        return np.concatenate([obs, setpoint], axis=1)

    def obs_names(self) -> list[str]:
        """Name of each observation entry (task entries, then servo set-points in delta mode)."""
        extra = [f"setpoint/{n}" for n in self.robot.actuator_names] if self.any_delta else []
        return self.task.obs_names() + extra

"""The control-loop core of a deployed policy (no ROS): measured state + task → observation → policy → safe command.

The observation is built by the training code itself (:class:`~embodied_ws.sim.core.EnvCore` and the
task registry, DR off): the measured joints go into a local MuJoCo copy of the robot, forward
kinematics gives the end effector, delta-mode set-points are integrated (``ee_delta`` actions converted by the
same IK from the measured joints) by :class:`~embodied_ws.sim.mapping.PolicyIO`, as ``EnvCore.action_to_ctrl`` does.
Every command then passes the :class:`~embodied_ws.deploy.safety.SafetyEnvelope`; what it let
through is written back as the set-point the policy sees next tick, so policy and robot agree.

The ROS node (``embodied_ws.ros.nodes.policy_node``) only moves messages in and out::

    core = ControlCore(resolve_target("runs/reach1"))
    core.set_goal(task_values)                  # /embodied/task (refused: hold at the measured pose)
    core.set_state(q, qd, stamp, now, seq)      # /joint_states, in core.state_joints order
    cmd = core.tick(now)                        # None: publish nothing

**No goal, no motion**: until a valid task arrived (finite, the right size and, for tasks with a
workspace, within reach of the robot: :mod:`embodied_ws.deploy.workspace`), and whenever one is
refused, the loop holds at the measured pose (:attr:`ControlCore.goal_problem` says why).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import mujoco
import numpy as np

from embodied_ws.core.errors import ConfigError, UserError
from embodied_ws.deploy.artifact import DeployTarget
from embodied_ws.deploy.limits import command_limits
from embodied_ws.deploy.safety import SafetyEnvelope
from embodied_ws.deploy.workspace import Workspace
from embodied_ws.policy.compat import check_actuators, check_layout
from embodied_ws.policy.exported import ExportedPolicy
from embodied_ws.sim.mapping import PolicyIO, build_robot
from embodied_ws.sim.robot import load_robot, published_joints
from embodied_ws.sim.tasks import make_task


class ControlCore:
    """Observation, policy and safety envelope of one robot, ticked by whoever owns the clock.

    :param target: the resolved policy and configuration (:func:`~embodied_ws.deploy.artifact.resolve_target`)
    :param clock: seconds for compute-time measurement (``time.perf_counter``)
    """

    def __init__(self, target: DeployTarget, clock: Callable[[], float] = time.perf_counter) -> None:
        cfg = target.config
        self.target, self.cfg, self.clock = target, cfg, clock
        self.policy = ExportedPolicy(target.policy_dir)
        try:
            robot = build_robot(cfg)  # as trained: grippers held, end effector sensor
        except (UserError, ValueError):  # the task does not build on it: another robot? say which field differs
            bare = load_robot(
                cfg.env.robot, need_ee=False, robot_args=cfg.env.robot_args, package_paths=cfg.env.package_paths
            )
            check_actuators(target.meta, bare.actuator_names, bare.name, target.meta_path)
            raise
        check_actuators(target.meta, robot.actuator_names, robot.name, target.meta_path)
        try:
            self.task = make_task(cfg.env.task, robot, cfg.task)
        except ValueError as exc:  # e.g. no reachable target on this robot
            raise UserError(str(exc), cfg.env.robot) from None
        self.robot = robot
        #: what the policy's observation and actions mean here: the same mapping as in training (no env is built)
        self.io = PolicyIO(cfg, robot, self.task)
        check_layout(target.meta, self.io, cfg, target.meta_path)
        if self.policy.layers[0][0].shape[1] != self.io.obs_dim:
            raise UserError(f"network input is {self.policy.layers[0][0].shape[1]}, observation {self.io.obs_dim}",
                            target.meta_path)  # fmt: skip
        n_out = self.policy.layers[-1][0].shape[0]
        if n_out != self.io.action_dim:
            raise UserError(f"network output is {n_out}, actions {self.io.action_dim} "
                            f"(env.action_mode {cfg.env.action_mode})", target.meta_path)  # fmt: skip
        d = cfg.deploy
        self.rate_hz = float(d.rate_hz or target.meta.get("control_rate_hz") or 1.0 / self.io.control_dt)
        if d.state_timeout_s < 2.0 / self.rate_hz:
            raise ConfigError(f"must be at least two control periods ({2.0 / self.rate_hz:.3f} s at "
                              f"{self.rate_hz:g} Hz), got {d.state_timeout_s}", "deploy.state_timeout_s")  # fmt: skip
        self.limits = command_limits(robot, target.meta, d, self.rate_hz)
        self.envelope = SafetyEnvelope(self.limits)
        # the physics copy training simulated when nothing rendered (kinematics and sensors are the same)
        self.model = robot.physics_model if robot.physics_model is not None else robot.model
        self.data = mujoco.MjData(self.model)
        joints = published_joints(self.model)  # what /joint_states carries: the topic contract's joints
        #: joint names ``set_state`` expects, in order
        self.state_joints = [mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in joints]
        #: where each of :attr:`state_joints` sits in MuJoCo's qpos / qvel
        self.qpos_adr = np.array([self.model.jnt_qposadr[j] for j in joints], dtype=np.int64)
        self.qvel_adr = np.array([self.model.jnt_dofadr[j] for j in joints], dtype=np.int64)
        #: for each actuator, the index of its joint in :attr:`state_joints`
        self.actuated = np.array([self.state_joints.index(n) for n in robot.joint_names], dtype=np.int64)
        self._delta, self._any_delta = self.io.delta, self.io.any_delta
        self._mid, self._half = self.io.ctrl_mid, self.io.ctrl_half
        self.goal_dim = self.task.goal_dim
        self.goal = np.zeros((1, self.goal_dim))
        #: the servo set-points in [-1, 1] the policy has commanded (delta mode integrates into them)
        self.setpoint = np.zeros((1, robot.nu))
        self.workspace = Workspace.of(self.task)
        self.has_state = False
        self.has_goal = self.goal_dim == 0
        #: why there is no valid goal (empty: there is one); the loop holds at the measured pose meanwhile
        self.goal_problem = "" if self.has_goal else "no task on /embodied/task yet"
        self._scratch = self.data.qpos.copy()
        self._action = np.zeros((1, self.io.action_dim))  # ee_delta: [dx, dy, dz(, dyaw)] + grippers
        # views the observation code reads (batch of one)
        self._qpos, self._qvel, self._sens = self.data.qpos[None], self.data.qvel[None], self.data.sensordata[None]
        self.ticks = 0
        self.published = 0
        self.bad_states = 0
        self.compute_s = 0.0
        self.compute_max_s = 0.0
        self.last_obs: np.ndarray | None = None
        self.last_success = False

    # ----------------------------------------------------------------- inputs
    def set_goal(self, values: np.ndarray) -> bool:
        """The task message (target position for reach); False when it is refused.

        A refused task (wrong size, NaN/inf, out of the robot's reach) replaces the goal by *no goal*:
        the loop holds at the measured pose until a valid one comes (:attr:`goal_problem` says why).
        """
        v = np.asarray(values, dtype=np.float64).ravel()
        if v.size != self.goal_dim:
            problem = f"the task has {v.size} values, the policy needs {self.goal_dim}"
        elif not np.isfinite(v).all():
            problem = "the task is not finite (NaN/inf): no valid task"
        else:
            problem = self.workspace.problem(v) if self.workspace else ""
        if problem:
            self.has_goal, self.goal_problem = False, problem
            return False
        self.goal[0] = v
        if not self.has_goal and self.envelope.holding:
            self.envelope.disarm()  # a goal after a hold: soft start again from the measured pose
        self.has_goal, self.goal_problem = True, ""
        return True

    def set_state(
        self, q: np.ndarray, qd: np.ndarray, stamp: float, now: float, seq: int | None = None, source: object = None
    ) -> bool:
        """A measured joint state in :attr:`state_joints` order; False when it is not used.

        Non-finite values, duplicate and out-of-order stamps are dropped (the state watchdog then
        trips if nothing fresh follows). A state showing that the source started over (stamps back,
        a new publisher, a jump the velocity limit cannot explain) disarms: the next tick holds at the
        measured pose and soft-starts from it.

        :param seq: the publisher's sequence number of the message (a new publisher starts again at 1)
        :param source: the publisher's identity (GID), where the middleware gives it
        """
        if not (np.isfinite(q).all() and np.isfinite(qd).all()):
            self.bad_states += 1
            return False
        self._scratch[self.qpos_adr] = q
        measured = self._mid + self._half * self.io.hold_action(self._scratch)
        if not self.envelope.state_received(stamp, now, measured, seq, source):
            return False
        d = self.data
        d.qpos[self.qpos_adr] = q
        d.qvel[self.qvel_adr] = qd
        mujoco.mj_kinematics(self.model, d)
        mujoco.mj_sensorPos(self.model, d)
        self.has_state = True
        return True

    def new_episode(self) -> None:
        """A simulator started a new episode (state stamps start over, the pose jumped): soft start from
        the next measured pose, as training starts an episode from its initial pose. The e-stop latch stays."""
        self.envelope.restart_stream()
        self.has_state = False
        self._scratch[:] = self.data.qpos

    def estop(self) -> None:
        """Latch the e-stop (nothing is published until :meth:`reset`)."""
        self.envelope.estop()

    def reset(self) -> None:
        """A new activation: disarm (soft start again from the next measured pose) and clear the e-stop latch."""
        self.envelope.reset()
        self.has_state = False

    # ----------------------------------------------------------------- the tick
    @property
    def policy_action(self) -> np.ndarray:
        """The policy's raw action of the last tick that ran it (NaN/inf kept: the gripper holds on them)."""
        return self._action[0]

    def measured_command(self) -> np.ndarray:
        """The command that holds the robot where it is (servo set-point = measured joint position)."""
        return self._mid + self._half * self.io.hold_action(self.data.qpos)

    def tick(self, now: float) -> np.ndarray | None:
        """One control period at ``now``: the command to publish, or None (not ready, e-stopped).

        :param now: the caller's monotonic time (the same clock as ``set_state``'s ``now``)
        """
        self.ticks += 1
        io, envelope = self.io, self.envelope
        if envelope.estopped or not self.has_state:
            return None  # nothing measured: nothing to hold either
        if not self.has_goal:  # no goal, no motion: hold at the measured pose
            if not envelope.armed and not envelope.arm(self.measured_command(), now):
                return None
            out = envelope.filter(None, now, hold=self.goal_problem)
            self.published += out is not None
            return out
        if not envelope.armed:
            # start where the robot is: set-points = measured pose (as at an episode start)
            self.setpoint[0] = io.hold_action(self.data.qpos)
            if not envelope.arm(self.measured_command(), now):
                return None
        t0 = self.clock()
        obs = io.observe(self._qpos, self._qvel, self._sens, self.goal, self.setpoint)
        _, success, _ = self.task.evaluate(self._qpos, self._qvel, self._sens, self.goal, self._action)
        self._action[0] = self.policy.act(obs[0])
        action = np.clip(self._action, -1.0, 1.0)
        if not np.isfinite(action).all():  # as training treats a bad action: zero (delta servos hold)
            action = np.zeros_like(action)
        self.setpoint, ctrl = io.integrate(self.setpoint, action, self._qpos)  # ee_delta: IK at the measured joints
        compute = self.clock() - t0
        out = envelope.filter(ctrl[0], now, compute)
        if out is not None and self._any_delta:
            # the policy sees the set-point the robot was really given (limits, soft start, holds)
            self.setpoint[0, self._delta] = ((out - self._mid) / self._half)[self._delta]
        self.compute_s = compute
        self.compute_max_s = max(self.compute_max_s, compute)
        self.last_obs, self.last_success = obs[0], bool(success[0])
        if out is not None:
            self.published += 1
        return out

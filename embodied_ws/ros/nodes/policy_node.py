"""policy_node: an exported policy driving a robot through the topic contract, inside the safety envelope.

A lifecycle node (``lifecycle_msgs`` services ``~/change_state``, ``~/get_state``):

* **configure** loads the policy and its run config (``policy:=RUN_OR_POLICY_DIR``), checks the
  observation layout against the robot and subscribes ``/joint_states``, ``/embodied/task`` and
  ``/embodied/estop`` (std_msgs/Bool, latched);
* **activate** starts the fixed-rate loop (``deploy.rate_hz``, default the policy's control rate):
  it soft-starts from the first measured pose and publishes std_msgs/Float64MultiArray on
  ``/<controller>/commands``; an asserted e-stop refuses activation, and nothing is published before
  the e-stop's latched state is known (:class:`~embodied_ws.deploy.estop.EstopGate`);
* **deactivate** stops the loop (nothing is published); the next activate re-arms a latched e-stop;
* **cleanup** drops the policy and the subscriptions.

E-stop true latches at once (no command after it). ``dry_run:=true`` computes and logs commands but
publishes none. Without a valid task the loop holds at the measured pose; a state source that starts
over (stamps back, a new publisher: its message sequence numbers start again) re-arms it through soft
start from the measured pose; both say so on ``/diagnostics`` (WARN) and in one log line.
``/diagnostics`` carries achieved rate, jitter, inference time and the envelope's
limit/watchdog events, once per ``deploy.diagnostics_hz`` and at once when an event happens.
All logic is in :mod:`embodied_ws.deploy`; this node only moves messages.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
import typing
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.exceptions import ParameterUninitializedException
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray

from embodied_ws.config.schema import DeployConfig
from embodied_ws.core.errors import UserError
from embodied_ws.deploy.artifact import DeployTarget, resolve_target
from embodied_ws.deploy.control import ControlCore
from embodied_ws.deploy.estop import EstopGate
from embodied_ws.deploy.gripper_command import GripperLoop, gripper_output
from embodied_ws.deploy.rate import RateMeter, request_realtime
from embodied_ws.deploy.status import clipping_line, loop_status
from embodied_ws.ros import cdr, qos
from embodied_ws.ros import conversions as conv
from embodied_ws.ros.gripper_out import GripperSender
from embodied_ws.ros.spin import run_node

#: node-level parameters; every ``deploy.*`` config field is a parameter too (set ones override the run's config)
PARAMETERS = {"policy": "", "dry_run": False, "autostart": False}
_TYPES = {str: Parameter.Type.STRING, bool: Parameter.Type.BOOL, float: Parameter.Type.DOUBLE,
          int: Parameter.Type.INTEGER, list[float]: Parameter.Type.DOUBLE_ARRAY}  # fmt: skip
_LEVEL = {"OK": DiagnosticStatus.OK, "WARN": DiagnosticStatus.WARN, "ERROR": DiagnosticStatus.ERROR}
ESTOP = "/embodied/estop"
OK, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE


class PolicyNode(LifecycleNode):
    """The deployment node.

    :param core: an already built control core (``embodied-ws deploy`` validates before starting ROS)
    """

    def __init__(self, core: ControlCore | None = None) -> None:
        super().__init__("policy_node")
        for name, default in PARAMETERS.items():
            self.declare_parameter(name, default)
        hints = typing.get_type_hints(DeployConfig)
        for f in dataclasses.fields(DeployConfig):  # declared without a value: only what the user sets counts
            kind = str if typing.get_origin(hints[f.name]) is typing.Literal else hints[f.name]
            self.declare_parameter(f"deploy.{f.name}", _TYPES[kind])
        self.core = core
        self._given_core = core
        self._subs: list[Any] = []
        self._timers: list[Any] = []
        self.pub_cmd = self.pub_diag = None
        self.gripper: GripperLoop | None = None  # a policy driving grippers: their command, split off the arm's
        self.grip_out: GripperSender | None = None
        self.estop_asserted = False
        self.gate = EstopGate()
        self.meter: RateMeter | None = None
        self._said: tuple[str, str, int] = ("", "", 0)  # (mode, reason, restarts) last logged
        self._clip_said = False
        self._t_report = -math.inf
        self._mode_seen = ""
        self._events_seen = 0
        self._joint_error = ""
        self._episode: int | None = None
        if self.get_parameter("autostart").value:
            self.trigger_configure()
            self.trigger_activate()

    # ------------------------------------------------------------------ lifecycle
    def _overrides(self) -> list[str]:
        out = []
        for f in dataclasses.fields(DeployConfig):
            try:
                p = self.get_parameter(f"deploy.{f.name}")
            except ParameterUninitializedException:
                continue  # not set: the run's config decides
            if p.type_ != Parameter.Type.NOT_SET:
                value = list(p.value) if f.name == "safe_pose" else p.value
                out.append(f"deploy.{f.name}={value}")
        if self.get_parameter("dry_run").value:
            out.append("deploy.dry_run=true")
        return out

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Load the policy and check it against the robot; subscribe."""
        try:
            if self._given_core is None:
                policy = self.get_parameter("policy").value
                if not policy:
                    raise UserError("set policy:=RUN_OR_POLICY_DIR", "policy")
                self.core = ControlCore(resolve_target(policy, self._overrides()))
            else:
                self.core = self._given_core
                self._given_core = None  # a cleanup/configure cycle reloads from the parameters
            self.gripper = GripperLoop.of(self.core)
            cfg = self.core.cfg
            grip_to = gripper_output(cfg.deploy, self.gripper.command.limits, cfg.env) if self.gripper else None
            if grip_to is not None and not self.core.cfg.deploy.dry_run:
                self.grip_out = GripperSender(self, grip_to, self.gripper.command.limits)
        except UserError as exc:
            self.get_logger().error(exc.line())
            return FAILURE
        core = self.core
        d = core.cfg.deploy
        self.dry_run = d.dry_run
        self.command_topic = d.command_topic or f"/{d.controller}/commands"
        if not self.dry_run:  # a dry run does not even advertise the command topic
            self.pub_cmd = self.create_publisher(Float64MultiArray, self.command_topic, qos.COMMAND)
        self.pub_diag = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._decoder = cdr.JointStateDecoder(core.state_joints)
        self._encoder = cdr.FloatArrayEncoder(core.robot.nu if self.gripper is None else self.gripper.arm.size)
        self._subs = [
            self.create_subscription(JointState, "/joint_states", self._on_state, qos.STATE, raw=True),
            self.create_subscription(Float64MultiArray, "/embodied/task", self._on_task, qos.LATCHED),
            self.create_subscription(Bool, ESTOP, self._on_estop, qos.LATCHED),
        ]
        if self.gate.value is None:
            self.gate = EstopGate()  # its clock starts at the first tick or wait
        self.get_logger().info(
            f"configured: {_describe(core.target)} at {core.rate_hz:g} Hz, commands on {self.command_topic}"
            + (f", gripper {grip_to.interface} {grip_to.name} (from {grip_to.source})" if grip_to else "")
            + (" (dry run: nothing is published)" if self.dry_run else "")
        )
        return OK

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Arm (soft start from the next measured pose) and start the loop; refused while the e-stop is asserted."""
        if self.estop_asserted:
            self.get_logger().error(f"e-stop asserted on {ESTOP}: release it (publish false) first")
            return FAILURE
        core = self.core
        core.reset()
        self._restart_gripper()
        st = core.envelope.status
        self._said, self._clip_said = (st.mode, st.reason, st.events["state_restart"]), False
        self.meter = RateMeter(core.rate_hz)
        self._timers = [
            self.create_timer(1.0 / core.rate_hz, self._tick),
            self.create_timer(1.0 / core.cfg.deploy.diagnostics_hz, self._report),
        ]
        how = request_realtime(core.cfg.deploy.realtime_priority)  # this thread runs the loop's callbacks
        if "refused" in how:
            self.get_logger().warn(f"deploy.realtime_priority: {how}")
        self.get_logger().info(f"active ({how}): soft start from the measured pose")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop the loop: nothing more is published."""
        self._stop_timers()
        request_realtime(0)
        self._report()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Drop the policy, subscriptions and publishers."""
        self._teardown()
        return OK

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop everything."""
        self._teardown()
        return OK

    def _stop_timers(self) -> None:
        for t in self._timers:
            self.destroy_timer(t)
        self._timers = []

    def _teardown(self) -> None:
        self._stop_timers()
        for s in self._subs:
            self.destroy_subscription(s)
        self._subs = []
        for p in (self.pub_cmd, self.pub_diag):
            if p is not None:
                self.destroy_publisher(p)
        if self.grip_out is not None:
            self.grip_out.close()
        self.pub_cmd = self.pub_diag = self.grip_out = self.gripper = None
        self.core = None

    def _restart_gripper(self) -> None:
        """An activation or a simulator's new episode: the gripper's next command starts from its measured position."""
        if self.gripper is not None:
            self.gripper.command.restart()
        if self.grip_out is not None:
            self.grip_out.restart()

    # ------------------------------------------------------------------ callbacks
    def estop_state(self) -> str:
        """The e-stop gate's answer now (``waiting``, ``asserted``, ``released``, ``unlatched``, ``absent``);
        logs the warning of an unlatched or absent e-stop once."""
        before = self.gate.state
        state = self.gate.update(time.monotonic(), self.count_publishers(ESTOP))
        if state != before and state in ("unlatched", "absent"):
            self.get_logger().warn(self.gate.describe())
        return state

    def _on_state(self, raw: bytes, info: dict[str, Any]) -> None:
        core = self.core
        if core is None:
            return
        try:
            q, qd = self._decoder.read(raw)
        except KeyError as exc:
            if not self._joint_error:
                self._joint_error = f"/joint_states: {exc.args[0]} (robot {core.robot.name})"
                self.get_logger().error(self._joint_error)
            return
        except cdr.CdrError as exc:
            self.get_logger().warn(f"/joint_states ignored: {exc}", throttle_duration_sec=5.0)
            return
        # message info (rclpy passes it to a two-argument callback): a new publisher's sequence numbers start at 1
        seq, source = info.get("publication_sequence_number"), info.get("publisher_gid")
        core.set_state(q, qd, self._decoder.stamp(raw), time.monotonic(), seq or None, source)

    def _on_task(self, msg: Float64MultiArray) -> None:
        if self.core is None:
            return
        episode = int(msg.layout.data_offset)  # a simulator's episode id (0 from other publishers)
        if episode and episode != self._episode:
            self.core.new_episode()  # sim reset: stamps start over and the pose jumped
            self._restart_gripper()
            self._episode = episode
        self.core.set_goal(conv.array_of(msg))  # a refused task holds at the measured pose (logged by the loop)

    def _on_estop(self, msg: Bool) -> None:
        self.estop_asserted = bool(msg.data)
        self.gate.received(self.estop_asserted)
        if self.estop_asserted and self.core is not None:
            self.core.estop()
            self.get_logger().error("E-STOP latched: no more commands until deactivate/activate")
            self._report()

    def _tick(self) -> None:
        core = self.core
        if core is None:
            return
        now = time.monotonic()
        self.meter.tick(now)
        if not self.gate.go and self.estop_state() not in ("released", "unlatched", "absent"):
            self._report_throttled(now)  # the e-stop state is not known yet (or asserted): nothing moves
            return
        cmd = core.tick(now)
        grip = None
        if self.gripper is not None:  # the gripper's command goes to its own controller, the arm's without it
            grip = self.gripper.tick(cmd)
            cmd = None if cmd is None else self.gripper.arm_command(cmd)
        if cmd is not None:
            if self.pub_cmd is not None:
                self.pub_cmd.publish(self._encoder.encode(cmd))
            else:
                self.get_logger().info(f"dry run: command {cmd.round(4).tolist()} gripper {grip}",
                                       throttle_duration_sec=1.0)  # fmt: skip
        if grip is not None and self.grip_out is not None:
            self.grip_out.send(grip)
        self._log_changes()
        ev = core.envelope.status.events  # per-tick clipping is counted, and reported once it is most ticks
        events = sum(v for k, v in ev.items() if k not in ("position_limit", "rate_limit", "track_limit"))
        mode = core.envelope.status.mode
        # watchdog, restart, hold and e-stop events, and every change of mode (hold -> soft start -> running),
        # are reported at once: a soft start shorter than the diagnostics period is seen too
        if events != self._events_seen or mode != self._mode_seen:
            self._events_seen, self._mode_seen = events, mode
            self._report()

    def _log_changes(self) -> None:
        """One log line when the loop begins to hold, re-arms after a restarted source, or clips on most ticks."""
        st = self.core.envelope.status
        now = (st.mode, st.reason, st.events["state_restart"])
        if now != self._said:
            if now[2] > self._said[2]:  # the reason is the hold's when one began since: keep the restart's
                self.get_logger().warn(f"the state source started over ({st.restart_reason}): "
                                       "holding at the measured pose, then soft start")  # fmt: skip
            if st.mode == "hold" and (self._said[0] != "hold" or self._said[1] != st.reason):
                self.get_logger().warn(f"holding at the measured pose: {st.reason}")
            self._said = now
        clip = clipping_line(self.core)
        if bool(clip) != self._clip_said:
            self._clip_said = bool(clip)
            if clip:
                self.get_logger().warn(clip)
            self._report()

    def _report_throttled(self, now: float) -> None:
        if now - self._t_report >= 1.0 / self.core.cfg.deploy.diagnostics_hz:
            self._t_report = now
            self._report()

    # ------------------------------------------------------------------ diagnostics
    def diagnostics(self) -> DiagnosticStatus:
        """The control loop's status as one DiagnosticStatus."""
        core = self.core
        st = core.envelope.status
        mode = st.mode
        estop = "" if self.gate.go else self.gate.describe()
        level, message = loop_status(core, estop, self._joint_error)
        clipped, window = core.envelope.clipping()
        values = {
            "mode": mode,
            "dry_run": self.dry_run,
            "target_hz": core.rate_hz,
            "achieved_hz": round(self.meter.achieved_hz(), 2) if self.meter else 0.0,
            "jitter_p99_ms": round(self.meter.jitter_ms(), 3) if self.meter else 0.0,
            "inference_ms": round(core.compute_s * 1e3, 4),
            "inference_max_ms": round(core.compute_max_s * 1e3, 4),
            "state_age_s": round(st.state_age_s, 3),
            "commands": core.published,
            "last_event": st.last_event,
            "reason": st.reason,
            "restart_reason": st.restart_reason,
            "estop": self.gate.state,
            "clipped_in_window": f"{clipped}/{window}",
            **{f"events.{k}": v for k, v in sorted(st.events.items())},
        }
        if self.gripper is not None:
            values.update(self.gripper.status(self.grip_out.sent if self.grip_out else 0))
        return DiagnosticStatus(
            level=_LEVEL[level],
            name="policy_node: control loop",
            message=message,
            hardware_id=core.robot.name,
            values=[KeyValue(key=k, value=str(v)) for k, v in values.items()],
        )

    def _report(self) -> None:
        if self.core is None or self.pub_diag is None:
            return
        arr = DiagnosticArray(status=[self.diagnostics()])
        arr.header.stamp = self.get_clock().now().to_msg()
        self.pub_diag.publish(arr)


def _describe(target: DeployTarget) -> str:
    m = target.meta
    return f"{m.get('robot')}/{m.get('task')} policy from {target.policy_dir}"


def summary(node: PolicyNode) -> dict[str, Any]:
    """The loop's counters as plain data (printed by ``embodied-ws deploy``)."""
    core = node.core
    st = core.envelope.status
    return {
        "robot": core.robot.name,
        "mode": st.mode,
        "dry_run": node.dry_run,
        "target_hz": core.rate_hz,
        "achieved_hz": round(node.meter.achieved_hz(), 2) if node.meter else 0.0,
        "jitter_p99_ms": round(node.meter.jitter_ms(), 3) if node.meter else 0.0,
        "ticks": core.ticks,
        "commands": core.published,
        "published": core.published if node.pub_cmd is not None else 0,
        "gripper_sent": node.grip_out.sent if node.grip_out is not None else 0,
        "inference_max_ms": round(core.compute_max_s * 1e3, 4),
        "events": dict(st.events),
    }


def run_deploy(core: ControlCore, duration_s: float = 0.0) -> dict[str, Any]:
    """Run a policy node in this process on an already built ``core`` (configure, activate, spin).

    Spins until Ctrl-C or, when ``duration_s`` > 0, for that long; then deactivates and returns :func:`summary`.
    """
    import rclpy
    from rclpy._rclpy_pybind11 import RCLError
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    rclpy.init()
    node = PolicyNode(core)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    active = False
    try:
        if node.trigger_configure() != OK:
            raise UserError("policy_node did not configure (see the log above)", "policy_node")
        while node.estop_state() == "waiting":  # the latched e-stop state comes before the first command
            executor.spin_once(timeout_sec=0.05)
        if node.gate.state == "asserted":
            raise UserError("e-stop asserted: refusing to activate; release it (publish false) first", ESTOP)
        active = node.trigger_activate() == OK
        if not active:
            raise UserError("policy_node did not activate (see the log above)", "policy_node")
        end = time.monotonic() + duration_s
        while duration_s <= 0 or time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RCLError:
        if rclpy.ok():
            raise  # a shutdown racing the executor's wait is a normal stop; anything else is not
    finally:
        out = summary(node) if node.core is not None else {}
        if active and node.core is not None:
            node.trigger_deactivate()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return out


def main(args: list[str] | None = None) -> int:
    """Entry point (``ros2 run embodied_ws policy_node --ros-args -p policy:=runs/reach1``)."""
    return run_node(PolicyNode, args)


if __name__ == "__main__":
    sys.exit(main())

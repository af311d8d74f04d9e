"""The gripper's side of a deployed policy (no ROS): the policy's gripper action → the robot's gripper command.

A policy trained with ``task.gripper: action`` has one action per gripper in [-1, 1] (-1 closed, +1 open,
absolute: :mod:`embodied_ws.sim.gripper`). On the robot the gripper has its own controller, so its command
leaves the arm's command array and goes out on its own (``policy_node`` publishes it):

* **the command**: the leader joint's position in its own units (m or rad) over its stroke; mimic
  followers are the robot's business (its gripper controller or its mechanics);
* **its envelope** (:class:`GripperCommand`): limits = the stroke (tightened by a limits file entry for the
  leader joint), a rate limit (a full stroke takes at least ``deploy.gripper_stroke_s``; a limits-file
  ``max_velocity`` can only tighten it), a non-finite action is dropped (hold);
* **holds**: whenever the arm's loop is not running the policy (no valid task, state watchdog, inference
  watchdog, a not-finite action) the gripper **keeps its last command**: it never opens (or lets go of
  what it holds) by itself, unlike the arm, which holds at its measured pose. On e-stop nothing is sent.
  Before its first command the gripper is not commanded at all; the first command starts from the
  measured leader position (its soft start) and moves towards the policy's at the rate limit;
* **the interface** (:func:`gripper_output`): ``topic`` (std_msgs/Float64MultiArray on
  ``/<deploy.gripper_controller>/commands``: a forward position controller) or ``action``
  (control_msgs/action/GripperCommand on ``/<deploy.gripper_controller>/gripper_cmd``: a
  GripperActionController; position plus ``max_effort`` = the detected force); ``auto`` reads it from a
  ros2_control controllers YAML (:func:`controller_interface`): ``deploy.controllers_file``, else the one a
  URDF/xacro description names in a plugin's ``<parameters>`` (gz_ros2_control), else ``topic``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.dom import minidom

import numpy as np

from embodied_ws.config.schema import DeployConfig, EnvConfig
from embodied_ws.core.errors import ConfigError
from embodied_ws.core.yamlfile import read_yaml
from embodied_ws.deploy.limits import read_limits_file
from embodied_ws.sim.robot import Robot
from embodied_ws.sim.urdf import expand, is_description, parse_args

#: a ROS topic or action name: ``/a/b`` or ``a/b`` (letters, digits, underscores; no empty part)
_ROS_NAME = re.compile(r"/?[A-Za-z_~][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*")
#: ros2_controllers types that take a gripper position on ``/<name>/commands`` (forward command controllers)
TOPIC_TYPES = (
    "forward_command_controller/ForwardCommandController",
    "position_controllers/JointGroupPositionController",
)
#: ros2_controllers types serving ``control_msgs/action/GripperCommand`` on ``/<name>/gripper_cmd``
ACTION_SUFFIX = "/GripperActionController"
#: the modes of the arm's envelope in which this tick's policy action is the gripper's to follow
_FOLLOW = ("running", "soft_start")


@dataclass(frozen=True)
class GripperOutput:
    """Where and how the gripper command goes.

    :param interface: ``topic`` or ``action``
    :param name: the topic (``topic``) or the action name (``action``)
    :param source: what decided it (``deploy.gripper_interface`` or the controllers file and controller)
    """

    interface: str
    name: str
    source: str


@dataclass(frozen=True)
class GripperLimits:
    """The grippers' command space: one entry per gripper, in its leader joint's units.

    :param joints: leader joint of each gripper (command order)
    :param closed: leader position at the closed end
    :param open: leader position at the open end
    :param lower: lowest command (the stroke, tightened by a limits file)
    :param upper: highest command
    :param max_step: largest change of the command between two ticks
    :param force: the detected force limit (N or N·m; 0: unknown), sent as ``max_effort`` on the action
    """

    joints: tuple[str, ...]
    closed: np.ndarray
    open: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    max_step: np.ndarray
    force: np.ndarray

    def position(self, action: np.ndarray) -> np.ndarray:
        """Leader position for ``action`` (-1 closed, +1 open; clipped to [-1, 1])."""
        a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        return self.closed + (a + 1.0) / 2.0 * (self.open - self.closed)


def gripper_limits(robot: Robot, d: DeployConfig, rate_hz: float) -> GripperLimits | None:
    """The command limits of ``robot``'s driven grippers (None: the policy drives none).

    :param robot: the robot as trained (``task.gripper: action`` keeps the grippers' actuators)
    :param d: deploy settings (``gripper_stroke_s``, ``limits_file``)
    :param rate_hz: the control loop's rate
    """
    if not robot.gripper_actuators:
        return None
    gs = robot.grippers[: len(robot.gripper_actuators)]
    closed = np.array([g.closed for g in gs], dtype=np.float64)
    opened = np.array([g.open for g in gs], dtype=np.float64)
    lower, upper = np.minimum(closed, opened), np.maximum(closed, opened)
    velocity = (upper - lower) / d.gripper_stroke_s
    if d.limits_file:
        entries = read_limits_file(d.limits_file, robot.joint_names)
        for i, g in enumerate(gs):
            e = entries.get(g.leader, {})
            lower[i], upper[i] = max(lower[i], e.get("lower", -np.inf)), min(upper[i], e.get("upper", np.inf))
            velocity[i] = min(velocity[i], e.get("max_velocity", np.inf))
            if lower[i] > upper[i]:
                raise ConfigError(f"empty command range for the gripper joint {g.leader!r}", d.limits_file)
            if velocity[i] <= 0:
                raise ConfigError(f"max_velocity of the gripper joint {g.leader!r} must be > 0", d.limits_file)
    force = np.array([g.force or 0.0 for g in gs], dtype=np.float64)
    step = np.maximum(velocity / rate_hz, 1e-12)
    return GripperLimits(tuple(g.leader for g in gs), closed, opened, lower, upper, step, force)


class GripperCommand:
    """The gripper command stream: limits, rate limit, NaN rejection, holds that keep the last command.

    :param limits: the grippers' :class:`GripperLimits`
    """

    def __init__(self, limits: GripperLimits) -> None:
        self.limits = limits
        self._last: np.ndarray | None = None
        #: ``nonfinite`` (dropped actions), ``position_limit``, ``rate_limit`` (clipped ticks), ``hold`` (held ticks)
        self.events: Counter = Counter()

    @property
    def last(self) -> np.ndarray | None:
        """The last command (a copy), None before the first."""
        return None if self._last is None else self._last.copy()

    def restart(self) -> None:
        """Forget the last command: the next one starts from the measured position (an activation, a
        simulator's new episode); until then holds send nothing."""
        self._last = None

    def hold(self) -> np.ndarray | None:
        """Keep the last command (None: never commanded, send nothing)."""
        self.events["hold"] += 1
        return self.last

    def step(self, action: np.ndarray, measured: np.ndarray) -> np.ndarray | None:
        """The command for the policy's gripper ``action`` (one per gripper), or None (send nothing).

        :param action: the policy's raw gripper actions (any values: NaN/inf hold, the rest is clipped to [-1, 1])
        :param measured: the leader joints' measured positions (the first command starts there)
        """
        lim = self.limits
        a = np.asarray(action, dtype=np.float64)
        if a.shape != lim.lower.shape or not np.isfinite(a).all():
            self.events["nonfinite"] += 1
            return self.hold()
        if self._last is None:
            m = np.asarray(measured, dtype=np.float64)
            if m.shape != lim.lower.shape or not np.isfinite(m).all():
                return None  # nowhere to start from
            self._last = np.clip(m, lim.lower, lim.upper)
        target = lim.position(a)
        if (target < lim.lower).any() or (target > lim.upper).any():
            self.events["position_limit"] += 1
            target = np.clip(target, lim.lower, lim.upper)
        step = target - self._last
        if (np.abs(step) > lim.max_step).any():
            self.events["rate_limit"] += 1
            step = np.clip(step, -lim.max_step, lim.max_step)
        self._last = np.clip(self._last + step, lim.lower, lim.upper)
        return self._last.copy()


class GripperLoop:
    """The gripper beside a :class:`~embodied_ws.deploy.control.ControlCore`: after each ``core.tick`` it
    gives the gripper command, and splits the arm's command array from the gripper's entries.

    :param core: the control core (a policy with ``task.gripper: action``)
    :param limits: its grippers' limits (:func:`gripper_limits`)
    """

    def __init__(self, core: Any, limits: GripperLimits) -> None:
        self.core = core
        self.command = GripperCommand(limits)
        robot, io = core.robot, core.io
        grip = list(robot.gripper_actuators)
        #: actuator indices of the arm's command (everything but the grippers), in order
        self.arm = np.array([k for k in range(robot.nu) if k not in grip], dtype=np.int64)
        #: the arm's joint names in command order
        self.arm_joints = [robot.joint_names[k] for k in self.arm]
        #: where each gripper's action sits in the policy's action (joint modes: its actuator; ee_delta: the tail)
        dim = int(getattr(io, "action_dim", robot.nu))
        joint_mode = getattr(io, "ee", None) is None and dim == robot.nu
        self.slots = np.array(grip if joint_mode else range(dim - len(grip), dim), dtype=np.int64)
        #: each leader joint's address in the core's measured qpos
        self.qadr = np.array([robot.qpos_idx[k] for k in grip], dtype=np.int64)

    @classmethod
    def of(cls, core: Any) -> GripperLoop | None:
        """The loop for ``core``'s grippers, None when its policy drives none."""
        limits = gripper_limits(core.robot, core.cfg.deploy, core.rate_hz)
        return None if limits is None else cls(core, limits)

    def measured(self) -> np.ndarray:
        """The leader joints' positions last measured by the core."""
        return self.core.data.qpos[self.qadr].copy()

    def arm_command(self, out: np.ndarray) -> np.ndarray:
        """The arm's part of the core's command (what the arm's controller takes)."""
        return out[self.arm]

    def status(self, sent: int) -> dict[str, Any]:
        """``/diagnostics`` values: the last command, how many were sent, the command's events."""
        last = self.command.last
        out: dict[str, Any] = {"gripper_command": "none" if last is None else str(last.round(5).tolist()),
                               "gripper_sent": sent}  # fmt: skip
        out.update({f"gripper_events.{k}": v for k, v in sorted(self.command.events.items())})
        return out

    def tick(self, out: np.ndarray | None) -> np.ndarray | None:
        """The gripper command after ``core.tick`` returned ``out`` (None: send nothing).

        Follows the policy's action only on a tick that ran the policy and whose arm command passed (the
        envelope running or soft-starting, inference in time); otherwise keeps the last command.
        """
        core = self.core
        if out is None:  # e-stopped or nothing measured: nothing goes out
            return None
        timeout = core.limits.inference_timeout_s
        if core.envelope.status.mode in _FOLLOW and not (timeout > 0 and core.compute_s > timeout):
            action = core.io.gripper_actions(core.policy_action[self.slots])  # task.gripper_command, as trained
            return self.command.step(action, self.measured())
        return self.command.hold()


# ----------------------------------------------------------------------------- the interface
def check_name(value: str, key: str) -> str:
    """``value`` when it is a valid ROS topic/action name, else a one-line :class:`ConfigError` naming ``key``."""
    if not _ROS_NAME.fullmatch(value):
        raise ConfigError(f"not a valid ROS name: {value!r} (letters, digits, _ and /; no empty part)", key)
    return value


def controller_interface(
    controllers: dict[str, Any], leader: str, arm_controller: str = "", where: str = "controllers"
) -> tuple[str, str]:
    """``(interface, name)`` for the gripper whose leader joint is ``leader``, from a ros2_control
    controllers YAML's content (pure): the controller whose ``joint``/``joints`` hold ``leader`` and its
    ``type`` from ``controller_manager.ros__parameters``: a GripperActionController → ``action`` on
    ``/<name>/gripper_cmd``; a forward position controller → ``topic`` on ``/<name>/commands``.

    :param controllers: the parsed YAML
    :param leader: the gripper's leader joint
    :param arm_controller: the arm's controller (a gripper in the arm's own controller is refused)
    :param where: the file, for error lines
    :raises ConfigError: one line: no controller drives it, or one the toolkit cannot command
    """
    if not isinstance(controllers, dict):
        raise ConfigError("expected a ros2_control controllers mapping", where)
    manager = _params(controllers.get("controller_manager"))
    declared = {k: v.get("type") for k, v in manager.items() if isinstance(v, dict) and "type" in v}
    if not declared:
        raise ConfigError("no controller declared under controller_manager.ros__parameters", where)
    for name, ctype in declared.items():
        p = _params(controllers.get(name))
        joints = p.get("joints", [p["joint"]] if "joint" in p else p.get("joint_names", []))
        if not isinstance(joints, list) or leader not in joints:
            continue
        ctype = str(ctype)
        if name == arm_controller or (len(joints) > 1 and not ctype.endswith(ACTION_SUFFIX)):
            raise ConfigError(f"controller {name} drives the gripper joint {leader} together with other joints; "
                              "give the gripper its own controller", where)  # fmt: skip
        if ctype.endswith(ACTION_SUFFIX):
            return "action", f"/{name}/gripper_cmd"
        if ctype in TOPIC_TYPES and p.get("interface_name", "position") == "position":
            return "topic", f"/{name}/commands"
        raise ConfigError(f"controller {name} ({ctype}) drives the gripper joint {leader}: the toolkit sends a "
                          "position (forward position controller) or a GripperCommand action "
                          "(GripperActionController)", where)  # fmt: skip
    listed = ", ".join(declared)
    raise ConfigError(f"no controller drives the gripper joint {leader} (controllers: {listed})", where)


def _params(node: Any) -> dict[str, Any]:
    """A controller's ``ros__parameters`` mapping (empty when absent)."""
    if isinstance(node, dict) and isinstance(node.get("ros__parameters"), dict):
        return node["ros__parameters"]
    return {}


def described_controllers(env: EnvConfig) -> Path | None:
    """The controllers YAML a URDF/xacro robot description names (a ``<plugin>``'s ``<parameters>``, as
    gz_ros2_control's), None for an MJCF robot or a description that names none that exists."""
    if not is_description(env.robot):
        return None
    desc = expand(Path(env.robot).expanduser(), parse_args(env.robot_args), env.package_paths)
    for plugin in minidom.parseString(desc.urdf).getElementsByTagName("plugin"):
        for node in plugin.getElementsByTagName("parameters"):
            text = "".join(c.data for c in node.childNodes if c.nodeType == c.TEXT_NODE).strip()
            if text.endswith((".yaml", ".yml")) and Path(text).expanduser().is_file():
                return Path(text).expanduser()
    return None


def gripper_output(d: DeployConfig, limits: GripperLimits, env: EnvConfig | None = None) -> GripperOutput:
    """Where the gripper command goes, from ``deploy.*`` (rules in the module docstring).

    :param d: the deploy settings
    :param limits: the grippers' limits (their leader joints)
    :param env: the robot's settings: with ``gripper_interface: auto`` and no ``controllers_file``, a URDF/xacro
        description's own controllers YAML decides (:func:`described_controllers`)
    :raises ConfigError: a bad name, a controllers file that does not say, grippers on different controllers
    """
    interface, source = d.gripper_interface, "deploy.gripper_interface"
    name = ""
    path = None
    if interface == "auto":
        path = Path(d.controllers_file).expanduser() if d.controllers_file else None
        if path is None and env is not None:
            path = described_controllers(env)
    if path is not None:
        data, _ = read_yaml(path)
        found = {controller_interface(data, j, d.controller, str(path)) for j in limits.joints}
        if len(found) > 1:
            raise ConfigError("the grippers are on different controllers; one gripper controller is supported",
                              str(path))  # fmt: skip
        (interface, name), source = found.pop(), str(path)
    elif interface == "auto":
        interface = "topic"
    if interface == "action" and len(limits.joints) > 1:
        raise ConfigError(f"one GripperCommand action drives one gripper, the policy drives {len(limits.joints)}",
                          "deploy.gripper_interface")  # fmt: skip
    check_name(d.gripper_controller, "deploy.gripper_controller")
    if d.gripper_topic:
        name = check_name(d.gripper_topic, "deploy.gripper_topic")
    elif not name:
        name = f"/{d.gripper_controller}/" + ("commands" if interface == "topic" else "gripper_cmd")
    return GripperOutput(interface, name, source)


#: the smallest change (fraction of the stroke) worth a new GripperCommand goal
GOAL_DEADBAND = 0.005


def new_goal(last_sent: np.ndarray | None, command: np.ndarray, limits: GripperLimits) -> bool:
    """Whether ``command`` is worth a new action goal: the first, or moved by more than :data:`GOAL_DEADBAND`
    of the stroke since the last goal sent (a goal per tick at the loop's rate would flood the action server;
    holds repeat the last command and send nothing)."""
    if last_sent is None:
        return True
    stroke = np.maximum(np.abs(limits.open - limits.closed), 1e-12)
    return bool((np.abs(command - last_sent) > GOAL_DEADBAND * stroke).any())

"""The ``ros:`` and ``deploy:`` sections of a run's config: ROS 2 topics and the real-robot deployment node.

Re-exported by :mod:`embodied_ws.config.schema`; see there for how the loader validates a field."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from embodied_ws.config.fields import num, within


@dataclass
class RosConfig:
    """The ROS-topic env (``train.vec_env: ros``): how it talks to a simulator or robot on the topic contract.

    :param mode: ``lockstep`` (one control period per command, wait for the new state) or ``realtime``
    :param sim_node: node serving ``~/reset`` (empty: no reset service, e.g. a real robot)
    :param controller: ros2_control controller name; commands go to ``/<controller>/commands``
    :param command_topic: override of the command topic (e.g. through a relay)
    :param timeout_s: how long to wait for a state before re-sending the command (lockstep)
    :param retries: re-sends before the simulator counts as lost
    :param on_lost: ``stop`` (checkpoint and stop training) or ``wait`` (wait for it to come back)
    :param lost_wait_s: how long ``wait`` waits
    :param stale_s: realtime: a state older than this is stale (counted; lost after ``timeout_s``)
    """

    mode: Literal["lockstep", "realtime"] = "lockstep"
    sim_node: str = "/mujoco_sim_node"
    controller: str = "joint_group_position_controller"
    command_topic: str = ""
    timeout_s: float = num(1.0, 0.0, 3600.0, low_open=True)
    retries: int = num(3, 0, 1000)
    on_lost: Literal["stop", "wait"] = "stop"
    lost_wait_s: float = num(30.0, 0.0, 1e6)
    stale_s: float = num(0.2, 0.0, 3600.0, low_open=True)


@dataclass
class DeployConfig:
    """Running an exported policy on a robot (``embodied-ws deploy``, ``policy_node``): rate, topics, safety envelope.

    Commands are in the actuators' units (rad for the usual joint position servos).

    :param robot: robot driven (name or MJCF path); empty: the policy's own robot. Its observation
        layout must match the policy's
    :param rate_hz: control-loop rate; 0: the policy's control rate
    :param controller: ros2_control controller name; commands go to ``/<controller>/commands``
    :param command_topic: override of the command topic
    :param dry_run: compute and log commands but publish none
    :param limits_file: YAML with per-joint ``lower``/``upper`` (and optional ``max_velocity``) tighter
        than the model's (empty: the policy's joint limits and the model's control ranges)
    :param limit_margin: fraction of each joint range kept free at both ends
    :param max_step: largest change of a command between two ticks, and (position servos) largest distance
        of a command from the joint's measured position
    :param max_velocity: largest command velocity (units per second); the tighter of this and
        ``max_step`` per tick applies
    :param soft_start_s: after activation, ramp from the measured pose to the policy over this many seconds
    :param state_timeout_s: no new ``/joint_states`` for this long trips the state watchdog
        (at least two control periods)
    :param on_state_timeout: ``hold`` (repeat the last safe command) or ``safe_pose``
    :param safe_pose: command to move to on a state timeout in ``safe_pose`` mode (empty: the model's home pose)
    :param inference_timeout_s: observation + policy time above this drops the command and holds (0: off)
    :param diagnostics_hz: rate of ``/diagnostics`` reports (events are also reported at once)
    :param realtime_priority: 1-99: run the control loop's thread under ``SCHED_FIFO`` at this priority
        (needs root or ``CAP_SYS_NICE``/an rtprio limit; refused → a warning, the loop runs as before); 0: off
    :param gripper_interface: a policy with ``task.gripper: action``: how its gripper command reaches the robot
        (:mod:`embodied_ws.deploy.gripper_command`): ``topic`` (std_msgs/Float64MultiArray, the leader joint's
        position, on ``/<gripper_controller>/commands``), ``action`` (control_msgs/action/GripperCommand on
        ``/<gripper_controller>/gripper_cmd``) or ``auto`` (what ``controllers_file`` declares, else ``topic``)
    :param gripper_controller: the gripper's ros2_control controller name
    :param gripper_topic: override of the gripper's topic (or action name)
    :param controllers_file: a ros2_control controllers YAML; with ``gripper_interface: auto`` the controller
        whose joints hold the gripper's leader joint decides the interface and the name
    :param gripper_stroke_s: the gripper command's rate limit: a full stroke takes at least this long
    """

    robot: str = ""
    rate_hz: float = num(0.0, 0.0, 10_000.0)
    controller: str = "joint_group_position_controller"
    command_topic: str = ""
    dry_run: bool = False
    limits_file: str = ""
    limit_margin: float = num(0.02, 0.0, 0.5, high_open=True)
    max_step: float = num(0.1, 0.0, 10.0, low_open=True)
    max_velocity: float = num(2.0, 0.0, 1000.0, low_open=True)
    soft_start_s: float = num(2.0, 0.0, 3600.0)
    state_timeout_s: float = num(0.25, 0.0, 3600.0, low_open=True)
    on_state_timeout: str = "hold"
    safe_pose: list[float] = field(default_factory=list, metadata=within(-1000.0, 1000.0))
    inference_timeout_s: float = num(0.02, 0.0, 60.0)
    diagnostics_hz: float = num(1.0, 0.0, 1000.0, low_open=True)
    realtime_priority: int = num(0, 0, 99, text="0 (off) or 1-99")
    gripper_interface: Literal["auto", "topic", "action"] = "auto"
    gripper_controller: str = "gripper_controller"
    gripper_topic: str = ""
    controllers_file: str = ""
    gripper_stroke_s: float = num(0.5, 0.0, 3600.0, low_open=True)

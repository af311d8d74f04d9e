"""The gripper command onto ROS: std_msgs/Float64MultiArray on a topic, or control_msgs/action/GripperCommand goals.

What is sent and when is decided in :mod:`embodied_ws.deploy.gripper_command`; this only moves it.
``control_msgs`` is imported only for the ``action`` interface (it is a ROS 2 apt package, not on PyPI):
without it the interface is refused with one line (:func:`require_interface`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from std_msgs.msg import Float64MultiArray

from embodied_ws.core.errors import ConfigError
from embodied_ws.deploy.gripper_command import GripperLimits, GripperOutput, new_goal
from embodied_ws.ros import conversions as conv
from embodied_ws.ros import qos

#: the one line when the action interface cannot be used here
NEEDS_CONTROL_MSGS = "gripper_interface: action needs control_msgs: apt install ros-jazzy-control-msgs"


def require_interface(output: GripperOutput) -> Any:
    """The GripperCommand action type for ``output.interface == "action"`` (None for ``topic``).

    :raises ConfigError: control_msgs is not installed (one line naming the package to install)
    """
    if output.interface != "action":
        return None
    try:
        from control_msgs.action import GripperCommand
    except ImportError:
        raise ConfigError(NEEDS_CONTROL_MSGS, "deploy.gripper_interface") from None
    return GripperCommand


class GripperSender:
    """Sends gripper commands for ``node`` as ``output`` says.

    :param node: the rclpy node that owns the publisher or action client
    :param output: interface and name (:func:`~embodied_ws.deploy.gripper_command.gripper_output`)
    :param limits: the grippers' limits (``max_effort`` of an action goal is the detected force)
    """

    def __init__(self, node: Any, output: GripperOutput, limits: GripperLimits) -> None:
        self.node, self.output, self.limits = node, output, limits
        self.sent = 0  #: commands published (topic) or goals sent (action)
        self._last_goal: np.ndarray | None = None
        self._pub = self._client = None
        action_type = require_interface(output)
        if action_type is None:
            self._pub = node.create_publisher(Float64MultiArray, output.name, qos.COMMAND)
        else:
            from rclpy.action import ActionClient

            self._type = action_type
            self._client = ActionClient(node, action_type, output.name)

    def send(self, command: np.ndarray) -> None:
        """Send one command (leader positions, one per gripper)."""
        if self._pub is not None:
            self._pub.publish(conv.float_array(command, "gripper"))
            self.sent += 1
            return
        if not new_goal(self._last_goal, command, self.limits) or not self._client.server_is_ready():
            return  # a hold repeats the last command: the action server already has it
        goal = self._type.Goal()
        goal.command.position = float(command[0])
        goal.command.max_effort = float(self.limits.force[0])
        self._client.send_goal_async(goal)
        self._last_goal = np.array(command, dtype=np.float64)
        self.sent += 1

    def restart(self) -> None:
        """A new activation: the next command is sent as a goal whatever the last one was."""
        self._last_goal = None

    def close(self) -> None:
        """Drop the publisher or the action client."""
        if self._pub is not None:
            self.node.destroy_publisher(self._pub)
        if self._client is not None:
            self._client.destroy()
        self._pub = self._client = None

"""Wait for a robot before driving it: the first ``/joint_states`` within a deadline, or one clear line."""

from __future__ import annotations

import rclpy
from rclpy.wait_for_message import wait_for_message
from sensor_msgs.msg import JointState

from embodied_ws.core.errors import UserError
from embodied_ws.ros import qos


def require_joint_states(wait_s: float, topic: str = "/joint_states") -> None:
    """Return once a message arrives on ``topic``; raise a one-line :class:`UserError` after ``wait_s`` s.

    Runs its own short-lived ROS context (initialised and shut down here), so call it before the node
    that will use the robot starts.

    :param wait_s: seconds to wait (> 0)
    :param topic: the joint-state topic
    """
    rclpy.init()
    try:
        node = rclpy.create_node("embodied_ws_wait_for_robot")
        try:
            ok, _ = wait_for_message(JointState, node, topic, qos_profile=qos.STATE, time_to_wait=wait_s)
        except KeyboardInterrupt:
            raise UserError("interrupted while waiting for the robot's first state", topic) from None
        finally:
            node.destroy_node()
    finally:
        rclpy.try_shutdown()
    if not ok:
        raise UserError(
            f"no robot: nothing published within {wait_s:g} s; start the robot driver (or mujoco_sim_node) "
            "first, or wait longer with --wait",
            topic,
        )

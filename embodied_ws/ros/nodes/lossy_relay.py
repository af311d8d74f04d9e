"""lossy_relay: forwards Float64MultiArray commands and drops a share of them (fault injection).

Use it to check that a controller or the ROS-topic env survives a lossy link:
``ros2 run embodied_ws lossy_relay --ros-args -p input:=/relay/commands -p drop:=0.1``.
"""

from __future__ import annotations

import sys

import numpy as np
from rclpy.node import Node
from std_msgs.msg import Float64MultiArray

from embodied_ws.ros import qos
from embodied_ws.ros.spin import run_node

PARAMETERS = {
    "input": "/relay/commands",
    "output": "/joint_group_position_controller/commands",
    "drop": 0.1,
    "seed": 0,
}


class LossyRelay(Node):
    """Relays ``input`` to ``output``, dropping each message with probability ``drop`` (seeded)."""

    def __init__(self) -> None:
        super().__init__("lossy_relay")
        for name, default in PARAMETERS.items():
            self.declare_parameter(name, default)
        self.drop = float(self.get_parameter("drop").value)
        self.rng = np.random.default_rng(int(self.get_parameter("seed").value))
        self.forwarded = self.dropped = 0
        self.pub = self.create_publisher(Float64MultiArray, self.get_parameter("output").value, qos.COMMAND)
        self.create_subscription(Float64MultiArray, self.get_parameter("input").value, self._on_msg, qos.COMMAND)

    def _on_msg(self, msg: Float64MultiArray) -> None:
        if self.rng.random() < self.drop:
            self.dropped += 1
            return
        self.forwarded += 1
        self.pub.publish(msg)


def main(args: list[str] | None = None) -> int:
    """Entry point."""

    def report(node: LossyRelay) -> None:
        node.get_logger().info(f"forwarded {node.forwarded}, dropped {node.dropped}")

    return run_node(LossyRelay, args, report)


if __name__ == "__main__":
    sys.exit(main())

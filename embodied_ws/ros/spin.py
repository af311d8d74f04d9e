"""Node start-up and shutdown shared by the nodes' ``main`` functions."""

from __future__ import annotations

import sys
from collections.abc import Callable

import rclpy
from rclpy._rclpy_pybind11 import RCLError
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node

from embodied_ws.core.errors import EXIT_USER_ERROR, UserError


def create_node[N: Node](make: Callable[[], N], args: list[str] | None) -> N | None:
    """``rclpy.init`` and build the node; bad parameters print one line and give None."""
    rclpy.init(args=args)
    try:
        return make()
    except UserError as exc:
        print(exc.line(), file=sys.stderr)
        rclpy.try_shutdown()
        return None


def run_node(make: Callable[[], Node], args: list[str] | None, on_exit: Callable[[Node], None] | None = None) -> int:
    """Create and spin a node until Ctrl-C or shutdown; returns the process exit code."""
    node = create_node(make, args)
    if node is None:
        return EXIT_USER_ERROR
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RCLError:
        if rclpy.ok():
            raise
        # SIGTERM shut the context down while the executor was building its wait set: a normal stop
    finally:
        if on_exit is not None:
            on_exit(node)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0

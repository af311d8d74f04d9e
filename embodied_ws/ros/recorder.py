"""Record contract topics to a rosbag2 MCAP bag (``embodied-ws record``), and the sysid excitation node.

Both are thin: bag writing is :class:`embodied_ws.data.bag.BagWriter` (serialized messages as the
subscription delivers them, no deserialization), the excitation signal is
:class:`embodied_ws.sysid.excitation.Excitation`.
"""

from __future__ import annotations

import importlib
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from embodied_ws.core.errors import UserError
from embodied_ws.data.bag import COMMAND_TYPE, CONTRACT_TYPES, BagWriter
from embodied_ws.ros import cdr, qos
from embodied_ws.ros import conversions as conv


def _msg_class(msgtype: str) -> type:
    pkg, _, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{pkg}.msg"), name)


def _qos_for(topic: str) -> object:
    if topic == "/embodied/task":
        return qos.LATCHED  # its publisher is latched: get the current task on joining
    if topic.startswith("/camera/"):
        return qos.SENSOR
    return qos.STATE


class RecorderNode(Node):
    """Subscribes to ``topics`` (raw) and appends every message to a :class:`BagWriter`.

    :param writer: the open bag writer
    :param topics: ``{topic: type}``; a topic given with an empty type is looked up in the ROS graph
    """

    def __init__(self, writer: BagWriter, topics: dict[str, str]) -> None:
        super().__init__("embodied_recorder")
        self.writer = writer
        self.counts: dict[str, int] = {}
        unknown = [t for t, ty in topics.items() if not ty]
        if unknown:
            topics = {**topics, **self._discover(unknown)}
        for topic, msgtype in topics.items():
            writer.add_topic(topic, msgtype)
            self.counts[topic] = 0
            self.create_subscription(_msg_class(msgtype), topic, self._callback(topic), _qos_for(topic), raw=True)

    def _discover(self, topics: list[str], wait_s: float = 2.0) -> dict[str, str]:
        found: dict[str, str] = {}
        end = time.monotonic() + wait_s
        while time.monotonic() < end and len(found) < len(topics):
            graph = dict(self.get_topic_names_and_types())
            found = {t: graph[t][0] for t in topics if graph.get(t)}
            time.sleep(0.1)
        missing = [t for t in topics if t not in found]
        if missing:
            raise UserError(f"topic {missing[0]} is not in the ROS graph (nothing publishes it?)", "--topics")
        return found

    def _callback(self, topic: str) -> Callable[[bytes], None]:
        def on_message(raw: bytes) -> None:
            self.writer.write(topic, time.time_ns(), raw)
            self.counts[topic] += 1

        return on_message


def topic_types(topics: list[str], controller: str) -> dict[str, str]:
    """Types of the requested topics: contract topics are known, others are looked up in the graph ('')."""
    out = {}
    for t in topics:
        t = t if t.startswith("/") else f"/{t}"
        out[t] = CONTRACT_TYPES.get(t, COMMAND_TYPE if t.endswith("/commands") else "")
    return out


def spin_for(nodes: list[Node], duration: float | None, done: Callable[[], bool] | None = None) -> bool:
    """Spin ``nodes`` until ``duration`` seconds pass, ``done()`` is true, or SIGINT/SIGTERM; True if stopped early."""
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    old = signal.signal(signal.SIGTERM, on_signal)
    executor = SingleThreadedExecutor()
    for n in nodes:
        executor.add_node(n)
    end = None if duration is None else time.monotonic() + duration
    try:
        while not stop["now"] and (end is None or time.monotonic() < end) and not (done and done()):
            executor.spin_once(timeout_sec=0.05)
    except KeyboardInterrupt:
        stop["now"] = True
    finally:
        signal.signal(signal.SIGTERM, old)
        for n in nodes:
            executor.remove_node(n)
    return stop["now"]


def record(
    out: Path, topics: dict[str, str], duration: float | None, custom_data: dict[str, str] | None = None
) -> dict:
    """``embodied-ws record``: record ``topics`` into a new bag ``out`` for ``duration`` s (None: until Ctrl-C).

    The bag folder is created here (it must not exist), so a recording that cannot start (a topic not in
    the graph) or that got no message at all removes it again and says so (:class:`UserError`).
    """
    writer = BagWriter(out, custom_data=custom_data)
    started = False
    t0 = time.monotonic()
    rclpy.init()
    try:
        node = RecorderNode(writer, topics)
        started = True
        spin_for([node], duration)
        counts = dict(node.counts)
        node.destroy_node()
    finally:
        writer.close()
        rclpy.try_shutdown()
        if not started:
            shutil.rmtree(out, ignore_errors=True)  # the folder this call created, holding no message
    if not any(counts.values()):
        shutil.rmtree(out, ignore_errors=True)
        raise UserError(
            f"nothing was published on {', '.join(counts)} in {time.monotonic() - t0:.1f} s (no bag written): "
            "is the robot (or mujoco_sim_node) running, on this ROS_DOMAIN_ID?",
            "record",
        )
    silent = [t for t, n in counts.items() if not n]
    if silent:
        print(f"warning: no message on {', '.join(silent)}", file=sys.stderr)
    return {"bag": str(out), "messages": counts}


class ExcitationNode(Node):
    """Drives the robot with an excitation signal through the contract, one command per joint state.

    Commanding in answer to each state (as a policy node does) keeps commands and the robot's control
    periods in a fixed phase, so a replay can tell which period each command was applied in.

    :param joint_names: the robot's actuated joints (order of the commands)
    :param make_setpoint: ``(t since start, measured start pose) -> set-points``
    :param limit: ``(target, previous) -> set-points`` inside the safety limits
    :param controller: commands go to ``/<controller>/commands``
    :param duration: seconds of excitation
    """

    def __init__(
        self,
        joint_names: list[str],
        make_setpoint: Callable[[float, np.ndarray], np.ndarray],
        limit: Callable[[np.ndarray, np.ndarray], np.ndarray],
        controller: str,
        duration: float,
    ) -> None:
        super().__init__("embodied_sysid_excitation")
        self.decoder = cdr.JointStateDecoder(joint_names)
        self.make_setpoint, self.limit, self.duration = make_setpoint, limit, duration
        self.pub = self.create_publisher(Float64MultiArray, f"/{controller}/commands", qos.COMMAND)
        self.create_subscription(JointState, "/joint_states", self._on_state, qos.STATE, raw=True)
        self.t0: float | None = None
        self.start: np.ndarray | None = None
        self.previous: np.ndarray | None = None
        self.sent = 0
        self.error: str | None = None

    @property
    def finished(self) -> bool:
        """True once the excitation has run for its duration (or failed)."""
        return self.error is not None or (self.t0 is not None and time.monotonic() - self.t0 >= self.duration)

    def _on_state(self, raw: bytes) -> None:
        try:
            q, _ = self.decoder.read(raw)
        except KeyError as exc:
            self.error = f"/joint_states {exc.args[0]}: is this the robot given with --robot?"
            return
        except cdr.CdrError as exc:
            self.get_logger().warn(str(exc))
            return
        now = time.monotonic()
        if self.t0 is None:
            self.t0, self.start, self.previous = now, q.copy(), q.copy()
        if self.finished:
            return
        target = self.make_setpoint(now - self.t0, self.start)
        self.previous = self.limit(target, self.previous)
        self.pub.publish(conv.float_array(self.previous))
        self.sent += 1

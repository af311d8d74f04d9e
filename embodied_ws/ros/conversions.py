"""Message <-> numpy conversions for the topic contract (standard message types only)."""

from __future__ import annotations

from array import array

import numpy as np
from builtin_interfaces.msg import Time
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension


def to_time(seconds: float) -> Time:
    """Seconds → builtin_interfaces/Time."""
    sec = int(seconds)
    return Time(sec=sec, nanosec=round((seconds - sec) * 1e9))


def from_time(stamp: Time) -> float:
    """builtin_interfaces/Time → seconds."""
    return stamp.sec + stamp.nanosec * 1e-9


class JointStateWriter:
    """Reuses one JointState (names set once; arrays through array.array, rclpy's fast path)."""

    def __init__(self, names: list[str]) -> None:
        self.msg = JointState()
        self.msg.name = list(names)

    def fill(self, position: np.ndarray, velocity: np.ndarray, effort: np.ndarray, t: float) -> JointState:
        """The message with new values and stamp."""
        m = self.msg
        m.header.stamp = to_time(t)
        m.position = array("d", position.tobytes())
        m.velocity = array("d", velocity.tobytes())
        m.effort = array("d", effort.tobytes())
        return m


class JointReader:
    """Picks ``names`` out of JointState messages; the name → index map is rebuilt only when the order changes."""

    def __init__(self, names: list[str]) -> None:
        self.names = list(names)
        self._order: list[str] | None = None
        self._idx: np.ndarray = np.zeros(0, dtype=np.int64)

    def read(self, msg: JointState) -> tuple[np.ndarray, np.ndarray]:
        """Positions and velocities in our joint order."""
        if msg.name != self._order:
            index = {n: i for i, n in enumerate(msg.name)}
            missing = [n for n in self.names if n not in index]
            if missing:
                raise KeyError(f"joint_states lacks joints {missing}")
            self._order = list(msg.name)
            self._idx = np.array([index[n] for n in self.names], dtype=np.int64)
        pos = np.frombuffer(msg.position, dtype=np.float64)[self._idx]
        vel = (
            np.frombuffer(msg.velocity, dtype=np.float64)[self._idx] if len(msg.velocity) else np.zeros(self._idx.size)
        )
        return pos, vel


def float_array(values: np.ndarray, label: str = "", offset: int = 0) -> Float64MultiArray:
    """A Float64MultiArray; ``offset`` (layout.data_offset) carries a counter such as the episode id."""
    msg = Float64MultiArray()
    msg.data = np.asarray(values, dtype=np.float64).ravel().tolist()
    msg.layout.dim = [MultiArrayDimension(label=label, size=len(msg.data), stride=len(msg.data))]
    msg.layout.data_offset = int(offset)
    return msg


def array_of(msg: Float64MultiArray) -> np.ndarray:
    """The data of a Float64MultiArray as float64."""
    return np.frombuffer(msg.data, dtype=np.float64).copy() if isinstance(msg.data, array) else np.asarray(msg.data)


def set_array(msg: Float64MultiArray, values: np.ndarray) -> Float64MultiArray:
    """Refill a Float64MultiArray in place (array.array: no per-element checks)."""
    msg.data = array("d", np.ascontiguousarray(values, dtype=np.float64).tobytes())
    return msg

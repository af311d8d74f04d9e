"""Message <-> numpy conversions for the topic contract (standard message types only)."""

from __future__ import annotations

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


def joint_state(
    names: list[str], position: np.ndarray, velocity: np.ndarray, effort: np.ndarray, t: float
) -> JointState:
    """A JointState stamped with (sim) time ``t``."""
    msg = JointState()
    msg.header.stamp = to_time(t)
    msg.name = list(names)
    msg.position = position.tolist()
    msg.velocity = velocity.tolist()
    msg.effort = effort.tolist()
    return msg


def joint_arrays(msg: JointState, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Positions and velocities of ``names`` (in that order); a missing joint raises KeyError naming it."""
    index = {n: i for i, n in enumerate(msg.name)}
    missing = [n for n in names if n not in index]
    if missing:
        raise KeyError(f"joint_states lacks joints {missing}")
    idx = [index[n] for n in names]
    pos = np.asarray(msg.position, dtype=np.float64)[idx]
    vel = np.asarray(msg.velocity, dtype=np.float64)[idx] if len(msg.velocity) else np.zeros(len(idx))
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
    return np.asarray(msg.data, dtype=np.float64)

"""Message <-> numpy conversions for the topic contract (standard message types only).

The lockstep hot loop (JointState out, commands in) uses the serialized forms in :mod:`embodied_ws.ros.cdr`.
"""

from __future__ import annotations

from array import array

import numpy as np
from builtin_interfaces.msg import Time
from std_msgs.msg import Float64MultiArray, MultiArrayDimension


def split_time(seconds: float) -> tuple[int, int]:
    """Seconds → ``(sec, nanosec)`` as builtin_interfaces/Time holds them."""
    sec = int(seconds)
    return sec, round((seconds - sec) * 1e9)


def to_time(seconds: float) -> Time:
    """Seconds → builtin_interfaces/Time."""
    sec, nanosec = split_time(seconds)
    return Time(sec=sec, nanosec=nanosec)


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

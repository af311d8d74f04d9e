"""Serialized (CDR) fast paths for the two messages of the lockstep hot loop: JointState and Float64MultiArray.

Publishing a message object makes rclpy convert every field from Python to C, and taking one
builds a Python object per field (header, stamp, each name string, three arrays). In lockstep
training that happens twice per env step, so the hot loop publishes pre-serialized bytes and
subscribes with ``raw=True`` instead.

* Encoders patch a template that rclpy's own serializer wrote once (stamp and array bytes only),
  so the wire format is rclpy's by construction.
* Decoders walk the classic CDR layout (XCDR1, what rmw_fastrtps, rmw_cyclonedds and rmw_zenoh
  write for ROS 2 types) with ``struct``/``numpy`` views: a hand-written reader because rclpy has
  no way to take only the arrays, and rosbags' generic deserializer builds the same Python objects
  we are avoiding. Any other encapsulation falls back to rclpy's deserializer.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from embodied_ws.ros.conversions import split_time

_CDR_BE, _CDR_LE = 0x0000, 0x0001  # encapsulation ids (first two bytes, big-endian)
_HEAD = 4  # CDR alignment is counted from the end of the 4-byte encapsulation header


class CdrError(ValueError):
    """The bytes are not a well-formed serialized message of the expected type."""


def _find_marker(buf: bytes, values: np.ndarray) -> int:
    """Offset of the little-endian bytes of ``values`` in ``buf`` (exactly one occurrence)."""
    pattern = np.ascontiguousarray(values, dtype="<f8").tobytes()
    at = buf.find(pattern)
    if at < 0 or buf.find(pattern, at + 1) >= 0:
        raise CdrError("template marker not found exactly once")
    return at


def _markers(n: int, k: int) -> np.ndarray:
    """``n`` distinct doubles that mark where array ``k`` lands in a template (overwritten on every encode)."""
    return 1000.0 * (k + 1) + 0.123456789 + np.arange(n, dtype=np.float64)


class _Reader:
    """Cursor over one CDR buffer (alignment relative to the encapsulation header)."""

    __slots__ = ("buf", "end", "o")

    def __init__(self, buf: bytes) -> None:
        self.buf, self.o = buf, _HEAD
        self.end = "<" if buf[1] == _CDR_LE else ">"

    def u32(self) -> int:
        self.o += -(self.o - _HEAD) % 4
        (v,) = struct.unpack_from(self.end + "I", self.buf, self.o)
        self.o += 4
        return v

    def string(self) -> bytes:
        n = self.u32()  # length includes the terminating NUL
        s = self.buf[self.o : self.o + max(n - 1, 0)]
        self.o += n
        return s

    def doubles(self) -> np.ndarray:
        n = self.u32()
        if n:
            self.o += -(self.o - _HEAD) % 8
        if self.o + 8 * n > len(self.buf):
            raise CdrError("sequence runs past the end of the message")
        out = np.frombuffer(self.buf, dtype=self.end + "f8", count=n, offset=self.o)
        self.o += 8 * n
        return out


def _classic_cdr(buf: bytes) -> bool:
    return len(buf) >= 8 and buf[0] == 0 and buf[1] in (_CDR_BE, _CDR_LE)


class JointStateEncoder:
    """JointState bytes for a fixed joint list: one rclpy-serialized template, patched per message.

    :param names: joint names, in the order of the arrays given to :meth:`encode`
    :param frame_id: ``header.frame_id``
    """

    def __init__(self, names: list[str], frame_id: str = "") -> None:
        n = len(names)
        msg = JointState(name=list(names), position=_markers(n, 0).tolist(), velocity=_markers(n, 1).tolist(),
                         effort=_markers(n, 2).tolist())  # fmt: skip
        msg.header.frame_id = frame_id
        self._buf = bytearray(serialize_message(msg))
        if self._buf[:2] != b"\x00\x01":
            raise CdrError("rclpy did not write little-endian CDR")
        self._view = np.frombuffer(self._buf, dtype=np.uint8)
        self._slices = [
            slice(o, o + 8 * n) for o in (_find_marker(self._buf, _markers(n, k)) for k in range(3))
        ] if n else []  # fmt: skip

    def encode(self, position: np.ndarray, velocity: np.ndarray, effort: np.ndarray, t: float) -> bytes:
        """Serialized JointState with these values, stamped ``t`` seconds."""
        struct.pack_into("<iI", self._buf, _HEAD, *split_time(t))
        for s, values in zip(self._slices, (position, velocity, effort), strict=False):
            self._view[s] = np.ascontiguousarray(values, dtype="<f8").view(np.uint8)
        return bytes(self._buf)


class _Layout(NamedTuple):
    """Where the arrays sat in the last decoded JointState, and the bytes around them."""

    size: int
    head: bytes
    pos: int
    before_pos: bytes
    n_pos: int
    pos_end: int
    vel: int
    before_vel: bytes
    n_vel: int


class JointStateDecoder:
    """Stamp, positions and velocities of ``names`` from serialized JointState messages.

    The name → index map is rebuilt only when the names section of the message changes.

    :param names: the joints wanted, in the order the arrays are returned
    """

    def __init__(self, names: list[str]) -> None:
        self.names = list(names)
        self._idx = np.zeros(0, dtype=np.int64)
        self._key: bytes | None = None  # names section that ``_idx`` was built for
        # fast path: same layout bytes as the last message → same array offsets (one publisher)
        self._layout: _Layout | None = None

    @staticmethod
    def stamp(buf: bytes) -> float:
        """``header.stamp`` in seconds."""
        if not _classic_cdr(buf):
            msg = deserialize_message(buf, JointState)
            return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        sec, nsec = struct.unpack_from("<iI" if buf[1] == _CDR_LE else ">iI", buf, _HEAD)
        return sec + nsec * 1e-9

    def read(self, buf: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Positions and velocities in our joint order (velocity zeros when the message has none).

        :raises KeyError: the message lacks some of our joints
        :raises CdrError: malformed bytes
        """
        lay = self._layout
        if (  # same layout bytes as last time: the arrays sit where they did
            lay is not None
            and len(buf) == lay.size
            and buf[:4] == lay.head
            and buf[12 : lay.pos] == lay.before_pos
            and buf[lay.pos_end : lay.vel] == lay.before_vel
        ):
            position = np.frombuffer(buf, "<f8", lay.n_pos, lay.pos)
            velocity = np.frombuffer(buf, "<f8", lay.n_vel, lay.vel)
            return self._take(position, velocity)
        if not _classic_cdr(buf):
            msg = deserialize_message(buf, JointState)
            self._layout, self._key = None, None
            self._index(list(msg.name))
            return self._take(np.asarray(msg.position), np.asarray(msg.velocity))
        try:
            r = _Reader(buf)
            r.o = _HEAD + 8
            r.string()  # frame_id
            start = r.o
            names = [r.string().decode() for _ in range(r.u32())]
            key = buf[start : r.o]
            position = r.doubles()
            pos_end = r.o
            velocity = r.doubles()
        except (struct.error, IndexError, UnicodeDecodeError) as exc:
            raise CdrError(f"malformed JointState ({len(buf)} bytes)") from exc
        if key != self._key:
            self._index(names)
            self._key = key
        self._layout = None  # the fast path must only ever see the index built for its own names
        if buf[1] == _CDR_LE and len(position) and len(velocity):
            pos, vel = pos_end - 8 * len(position), r.o - 8 * len(velocity)
            self._layout = _Layout(
                len(buf), buf[:4], pos, buf[12:pos], len(position), pos_end, vel, buf[pos_end:vel], len(velocity)
            )
        return self._take(position, velocity)

    def _index(self, names: list[str]) -> None:
        index = {n: i for i, n in enumerate(names)}
        missing = [n for n in self.names if n not in index]
        if missing:
            raise KeyError(f"lacks joints {missing}")
        self._idx = np.array([index[n] for n in self.names], dtype=np.int64)

    def _take(self, position: np.ndarray, velocity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pos = position[self._idx].astype(np.float64, copy=False)
        vel = velocity[self._idx].astype(np.float64, copy=False) if len(velocity) else np.zeros(self._idx.size)
        return pos, vel


_OFFSET_MARK = 0x9E3779B9  # marks layout.data_offset in the template


class FloatArrayEncoder:
    """Float64MultiArray bytes (no layout dims) for ``n`` values: a patched rclpy-serialized template.

    ``layout.data_offset`` carries a counter (the lockstep command sequence number, 0 = none).
    """

    def __init__(self, n: int) -> None:
        msg = Float64MultiArray(data=_markers(n, 0).tolist())
        msg.layout.data_offset = _OFFSET_MARK
        self._buf = bytearray(serialize_message(msg))
        self._view = np.frombuffer(self._buf, dtype=np.uint8)
        at = _find_marker(self._buf, _markers(n, 0)) if n else len(self._buf)
        self._slice = slice(at, at + 8 * n)
        self._offset_at = self._buf.find(struct.pack("<I", _OFFSET_MARK))

    def encode(self, values: np.ndarray, offset: int = 0) -> bytes:
        """Serialized Float64MultiArray holding ``values`` (exactly ``n`` of them) and ``layout.data_offset``."""
        self._view[self._slice] = np.ascontiguousarray(values, dtype="<f8").view(np.uint8)
        struct.pack_into("<I", self._buf, self._offset_at, offset & 0xFFFFFFFF)
        return bytes(self._buf)


def float_array_data(buf: bytes) -> tuple[np.ndarray, int]:
    """The data (float64) and ``layout.data_offset`` of a serialized Float64MultiArray (dims skipped).

    :raises CdrError: malformed bytes
    """
    if not _classic_cdr(buf):
        msg = deserialize_message(buf, Float64MultiArray)
        return np.asarray(msg.data, dtype=np.float64), int(msg.layout.data_offset)
    try:
        r = _Reader(buf)
        for _ in range(r.u32()):  # layout.dim: label, size, stride
            r.string()
            r.u32()
            r.u32()
        offset = r.u32()
        return r.doubles().astype(np.float64), offset
    except (struct.error, IndexError) as exc:
        raise CdrError(f"malformed Float64MultiArray ({len(buf)} bytes)") from exc

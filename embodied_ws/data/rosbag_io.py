"""Contract messages ↔ numpy for dataset conversion, over :mod:`embodied_ws.data.bag` (the bag IO).

Reads every message of some topics as numpy (joint states, float arrays, rgb images, strings, each
with its sample time in integer nanoseconds: ``header.stamp`` when the message has one, else the
bag's receive time) and builds the same kinds of messages for :class:`embodied_ws.data.bag.BagWriter`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.core.errors import UserError
from embodied_ws.data import bag as bagio

JOINT_STATE = "sensor_msgs/msg/JointState"
FLOAT_ARRAY = "std_msgs/msg/Float64MultiArray"
IMAGE = "sensor_msgs/msg/Image"
STRING = "std_msgs/msg/String"


@dataclass
class TopicData:
    """Every message of one topic: ``stamps`` (ns, int64) and the decoded values, in bag order."""

    msgtype: str
    stamps: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # joint names (JointState)


def _stamp(msg: Any, fallback: int) -> int:
    header = getattr(msg, "header", None)
    if header is None:
        return fallback
    ns = int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)
    return ns or fallback


def _decode(msg: Any, msgtype: str, td: TopicData) -> Any:
    if msgtype == JOINT_STATE:
        td.names = list(msg.name)
        return np.asarray(msg.position, dtype=np.float64)
    if msgtype == FLOAT_ARRAY:
        return np.asarray(msg.data, dtype=np.float64)
    if msgtype == IMAGE:
        if msg.encoding not in ("rgb8", "bgr8"):
            raise UserError(f"image encoding {msg.encoding!r} not supported (rgb8 or bgr8)", "camera")
        img = np.asarray(msg.data, dtype=np.uint8).reshape(msg.height, msg.step)[:, : msg.width * 3]
        img = img.reshape(msg.height, msg.width, 3)
        return img[..., ::-1].copy() if msg.encoding == "bgr8" else img
    if msgtype == STRING:
        return str(msg.data)
    raise UserError(f"message type {msgtype} is not supported for conversion", "map")


def read_topics(bag: Path, topics: list[str]) -> dict[str, TopicData]:
    """Decode every message of ``topics`` from the rosbag2 folder ``bag``.

    A folder that is not a bag, or a bag missing one of ``topics``, gives a one-line :class:`UserError`.
    """
    info = bagio.bag_info(bag)
    missing = [t for t in topics if t not in info.topics]
    if missing:
        known = ", ".join(sorted(info.topics)) or "none"
        raise UserError(f"topic {missing[0]} not in the bag (topics: {known}); fix the --map file", str(bag))
    out = {t: TopicData(info.topics[t][0]) for t in topics}
    for topic, t_ns, msg in bagio.read_messages(bag, topics):
        td = out[topic]
        td.values.append(_decode(msg, td.msgtype, td))
        td.stamps.append(_stamp(msg, int(t_ns)))
    return out


class ContractWriter:
    """Write contract messages built from numpy into a new rosbag2 (through :class:`bag.BagWriter`).

    :param path: bag folder to create (must not exist)
    """

    def __init__(self, path: Path) -> None:
        self.writer = bagio.BagWriter(path, flush_s=5.0)
        self.store = bagio.typestore()
        t = self.store.types
        self._Header, self._Time = t["std_msgs/msg/Header"], t["builtin_interfaces/msg/Time"]

    def _header(self, t_ns: int, frame_id: str = "") -> Any:
        return self._Header(
            stamp=self._Time(sec=t_ns // 1_000_000_000, nanosec=t_ns % 1_000_000_000), frame_id=frame_id
        )

    def _write(self, topic: str, msgtype: str, t_ns: int, msg: Any) -> None:
        if topic not in self.writer.channels:
            self.writer.add_topic(topic, msgtype)
        self.writer.write(topic, t_ns, bytes(self.store.serialize_cdr(msg, msgtype)))

    def joint_state(self, topic: str, t_ns: int, names: list[str], position: np.ndarray) -> None:
        """A ``sensor_msgs/JointState`` with positions only."""
        empty = np.zeros(0, dtype=np.float64)
        msg = self.store.types[JOINT_STATE](
            header=self._header(t_ns),
            name=list(names),
            position=np.asarray(position, dtype=np.float64),
            velocity=empty,
            effort=empty,
        )
        self._write(topic, JOINT_STATE, t_ns, msg)

    def float_array(self, topic: str, t_ns: int, data: np.ndarray) -> None:
        """A ``std_msgs/Float64MultiArray`` (the ros2_control command convention)."""
        t = self.store.types
        layout = t["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0)
        msg = t[FLOAT_ARRAY](layout=layout, data=np.asarray(data, dtype=np.float64))
        self._write(topic, FLOAT_ARRAY, t_ns, msg)

    def image(self, topic: str, t_ns: int, rgb: np.ndarray, frame_id: str = "camera") -> None:
        """An rgb8 ``sensor_msgs/Image``."""
        h, w, _ = rgb.shape
        msg = self.store.types[IMAGE](
            header=self._header(t_ns, frame_id),
            height=h,
            width=w,
            encoding="rgb8",
            is_bigendian=0,
            step=w * 3,
            data=np.ascontiguousarray(rgb, dtype=np.uint8).reshape(-1),
        )
        self._write(topic, IMAGE, t_ns, msg)

    def string(self, topic: str, t_ns: int, text: str) -> None:
        """A ``std_msgs/String``."""
        self._write(topic, STRING, t_ns, self.store.types[STRING](data=text))

    def close(self) -> None:
        """Finish the bag (writes ``metadata.yaml``)."""
        self.writer.close()

    def __enter__(self) -> ContractWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

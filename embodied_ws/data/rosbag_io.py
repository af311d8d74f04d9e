"""Contract messages ↔ numpy for dataset conversion, over :mod:`embodied_ws.data.bag` (the bag IO).

Reads every message of some topics as numpy (joint states, float arrays, rgb images, strings, each
with its sample time in integer nanoseconds) and builds the same kinds of messages for
:class:`embodied_ws.data.bag.BagWriter`.

Sample times: a topic's ``header.stamp`` when every message has one on the bag's clock (within
:data:`CLOCK_TOLERANCE_NS` of the receive times), else the bag's receive times. Commands and strings
have no header, so a topic stamped in another clock (sim time from 0, a replayed bag's old stamps)
would not line up with them; such a topic is read on the receive clock too.
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


#: header stamps farther than this (median) from the receive times are on another clock
CLOCK_TOLERANCE_NS = 1_000_000_000


@dataclass
class TopicData:
    """Every message of one topic in bag order: the decoded ``values`` and their sample times.

    :param stamps: sample times (ns, int64): header stamps or receive times (see ``clock``)
    :param clock: ``"header.stamp"`` or ``"receive time"``
    :param names: joint names (JointState)
    """

    msgtype: str
    stamps: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    clock: str = "receive time"


def _header_ns(msg: Any) -> int:
    """``header.stamp`` in ns (0 when the message has no header or an unset stamp)."""
    header = getattr(msg, "header", None)
    if header is None:
        return 0
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


def _choose_clock(td: TopicData, header: list[int], received: list[int]) -> None:
    """Header stamps when all are set and on the receive clock, else the receive times."""
    h, r = np.asarray(header, dtype=np.int64), np.asarray(received, dtype=np.int64)
    if len(h) and np.all(h > 0) and np.median(np.abs(h - r)) <= CLOCK_TOLERANCE_NS:
        td.stamps, td.clock = h.tolist(), "header.stamp"
    else:
        td.stamps, td.clock = r.tolist(), "receive time"


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


def read_topics(
    bag: Path, topics: list[str], optional: list[str] | None = None, info: bagio.BagInfo | None = None
) -> dict[str, TopicData]:
    """Decode every message of ``topics`` (and of those of ``optional`` the bag has) from the rosbag2 ``bag``.

    A folder that is not a bag, or a bag missing one of ``topics``, gives a one-line :class:`UserError`.
    """
    info = info or bagio.bag_info(bag)
    missing = [t for t in topics if t not in info.topics]
    if missing:
        known = ", ".join(sorted(info.topics)) or "none"
        raise UserError(f"topic {missing[0]} not in the bag (topics: {known}); fix the --map file", str(bag))
    wanted = list(dict.fromkeys([*topics, *(t for t in optional or [] if t in info.topics)]))
    out = {t: TopicData(info.topics[t][0]) for t in wanted}
    header: dict[str, list[int]] = {t: [] for t in wanted}
    received: dict[str, list[int]] = {t: [] for t in wanted}
    for topic, t_ns, msg in bagio.read_messages(bag, wanted):
        td = out[topic]
        td.values.append(_decode(msg, td.msgtype, td))
        header[topic].append(_header_ns(msg))
        received[topic].append(int(t_ns))
    for topic, td in out.items():
        _choose_clock(td, header[topic], received[topic])
    return out


class ContractWriter:
    """Write contract messages built from numpy into a new rosbag2 (through :class:`bag.BagWriter`).

    :param path: bag folder to create (must not exist)
    :param custom_data: strings for ``metadata.yaml``'s ``custom_data``
    """

    def __init__(self, path: Path, custom_data: dict[str, str] | None = None) -> None:
        self.writer = bagio.BagWriter(path, custom_data=custom_data, flush_s=5.0)
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

    def joint_state(
        self, topic: str, t_ns: int, names: list[str], position: np.ndarray, stamp_ns: int | None = None
    ) -> None:
        """A ``sensor_msgs/JointState`` (positions only) logged at ``t_ns``, stamped ``stamp_ns`` (default ``t_ns``)."""
        empty = np.zeros(0, dtype=np.float64)
        msg = self.store.types[JOINT_STATE](
            header=self._header(t_ns if stamp_ns is None else stamp_ns),
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

    def image(
        self, topic: str, t_ns: int, rgb: np.ndarray, frame_id: str = "camera", stamp_ns: int | None = None
    ) -> None:
        """An rgb8 ``sensor_msgs/Image`` logged at ``t_ns`` (header stamp ``stamp_ns``, default ``t_ns``)."""
        h, w, _ = rgb.shape
        msg = self.store.types[IMAGE](
            header=self._header(t_ns if stamp_ns is None else stamp_ns, frame_id),
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

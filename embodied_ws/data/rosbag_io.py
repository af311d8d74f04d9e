"""Contract messages ↔ numpy over :mod:`embodied_ws.data.bag` (the bag IO): the one reader of bag contents.

:func:`read_topics` decodes every message of some topics (joint states, float arrays, rgb images,
strings, each with its sample time in integer nanoseconds); dataset conversion uses it, and
:func:`read_joint_states` / :func:`read_float_arrays` (system identification, the gap report) are
array views of the same decoding. :class:`ContractWriter` builds the same kinds of messages for
:class:`embodied_ws.data.bag.BagWriter`.

Joint states: the joint order is the first message's; a later message in another order is reordered
to it, one of another joint set (a second publisher) is skipped, and a velocity/effort field that was
not sent is NaN.

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
NS = 1_000_000_000


#: header stamps farther than this (median) from the receive times are on another clock
CLOCK_TOLERANCE_NS = 1_000_000_000


@dataclass
class TopicData:
    """Every message of one topic in bag order: the decoded ``values`` and their sample times.

    :param stamps: sample times (ns, int64): header stamps or receive times (see ``clock``)
    :param clock: ``"header.stamp"`` or ``"receive time"``
    :param names: joint names (JointState: the first message's order)
    :param received: receive (log) times, ns
    :param header: ``header.stamp`` of each message, ns (0 without a header)
    :param velocity: JointState velocities in ``names`` order (NaN where not sent)
    :param effort: JointState efforts in ``names`` order (NaN where not sent)
    :param offset: Float64MultiArray ``layout.data_offset`` (sequence number or episode id)
    """

    msgtype: str
    stamps: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    clock: str = "receive time"
    received: list[int] = field(default_factory=list)
    header: list[int] = field(default_factory=list)
    velocity: list[np.ndarray] = field(default_factory=list)
    effort: list[np.ndarray] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)


def _header_ns(msg: Any) -> int:
    """``header.stamp`` in ns (0 when the message has no header or an unset stamp)."""
    header = getattr(msg, "header", None)
    if header is None:
        return 0
    return int(header.stamp.sec) * NS + int(header.stamp.nanosec)


def _choose_clock(td: TopicData) -> None:
    """Header stamps when all are set and on the receive clock, else the receive times."""
    h, r = np.asarray(td.header, dtype=np.int64), np.asarray(td.received, dtype=np.int64)
    if len(h) and np.all(h > 0) and np.median(np.abs(h - r)) <= CLOCK_TOLERANCE_NS:
        td.stamps, td.clock = h.tolist(), "header.stamp"
    else:
        td.stamps, td.clock = r.tolist(), "receive time"


def _column(values: Any, n_sent: int, order: list[int] | None, width: int) -> np.ndarray:
    """One JointState array in our joint order (NaN when the message did not fill it)."""
    a = np.asarray(values, dtype=np.float64)
    if a.size != n_sent:
        return np.full(width, np.nan)
    return a[order] if order is not None else a


def _add(msg: Any, td: TopicData) -> bool:
    """Decode ``msg`` into ``td``; False when it is skipped (a JointState of another joint set)."""
    if td.msgtype == JOINT_STATE:
        names = list(msg.name)
        if not td.values:
            td.names = names
        order = None
        if names != td.names:
            if not set(td.names) <= set(names):
                return False  # a message of another joint set (a second publisher): not this series
            order = [names.index(n) for n in td.names]
        n = len(td.names)
        td.values.append(_column(msg.position, len(names), order, n))
        td.velocity.append(_column(msg.velocity, len(names), order, n))
        td.effort.append(_column(msg.effort, len(names), order, n))
    elif td.msgtype == FLOAT_ARRAY:
        td.values.append(np.asarray(msg.data, dtype=np.float64))
        td.offset.append(int(msg.layout.data_offset))
    elif td.msgtype == IMAGE:
        if msg.encoding not in ("rgb8", "bgr8"):
            raise UserError(f"image encoding {msg.encoding!r} not supported (rgb8 or bgr8)", "camera")
        img = np.asarray(msg.data, dtype=np.uint8).reshape(msg.height, msg.step)[:, : msg.width * 3]
        img = img.reshape(msg.height, msg.width, 3)
        td.values.append(img[..., ::-1].copy() if msg.encoding == "bgr8" else img)
    elif td.msgtype == STRING:
        td.values.append(str(msg.data))
    else:
        raise UserError(f"message type {td.msgtype} is not supported for conversion", "map")
    return True


def _read(bag: Path, topics: list[str], types: dict[str, str] | None = None) -> dict[str, TopicData]:
    """Decode every message of ``topics`` (those the bag has; ``types`` names topics kept even without
    messages) in one pass over the bag."""
    store = bagio.typestore()
    out = {t: TopicData(ty) for t, ty in (types or {}).items()}
    for topic, msgtype, t_ns, raw in bagio.read_raw(bag, topics):
        td = out.setdefault(topic, TopicData(msgtype))
        msg = store.deserialize_cdr(raw, msgtype)
        if _add(msg, td):
            td.header.append(_header_ns(msg))
            td.received.append(int(t_ns))
    for td in out.values():
        _choose_clock(td)
    return out


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
    return _read(bag, wanted, {t: info.topics[t][0] for t in wanted})


@dataclass
class JointStates:
    """A JointState series as arrays (``n`` messages, ``j`` joints).

    :param log_t: receive times (s, bag clock)
    :param stamp: header stamps (s, the robot's sample times)
    :param names: joint names (of the first message; later messages are reordered to match)
    :param position: ``(n, j)``
    :param velocity: ``(n, j)`` (NaN where not sent)
    :param effort: ``(n, j)`` (NaN where not sent)
    """

    log_t: np.ndarray
    stamp: np.ndarray
    names: list[str]
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray


def read_joint_states(path: str | Path, topic: str = "/joint_states") -> JointStates:
    """All messages of a JointState topic as arrays (:func:`read_topics`' decoding); a bag without
    them is a one-line error."""
    td = _read(Path(path), [topic]).get(topic)
    if td is None or not td.values:
        raise UserError(f"no {topic} messages in the bag", str(path))
    h = np.asarray(td.header, dtype=np.int64)
    return JointStates(
        np.asarray(td.received, dtype=np.int64) / 1e9,
        h // NS + (h % NS) / 1e9,
        td.names,
        np.array(td.values),
        np.array(td.velocity),
        np.array(td.effort),
    )


@dataclass
class FloatArrays:
    """A Float64MultiArray series (commands, task) as arrays.

    :param log_t: receive times (s, bag clock)
    :param data: ``(n, k)`` values (messages of another length than the first are dropped)
    :param offset: ``layout.data_offset`` of each message (sequence number or episode id)
    """

    log_t: np.ndarray
    data: np.ndarray
    offset: np.ndarray


def read_float_arrays(path: str | Path, topic: str) -> FloatArrays:
    """All messages of a Float64MultiArray topic as arrays (empty arrays when there are none)."""
    td = _read(Path(path), [topic]).get(topic) or TopicData(FLOAT_ARRAY)
    width = td.values[0].size if td.values else 0
    keep = [i for i, v in enumerate(td.values) if v.size == width]
    return FloatArrays(
        np.array([td.received[i] / 1e9 for i in keep]),
        np.array([td.values[i] for i in keep]).reshape(len(keep), width),
        np.array([td.offset[i] for i in keep]),
    )


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

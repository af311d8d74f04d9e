"""rosbag2 (MCAP) writing and reading without a ROS install: ``mcap`` writes, ``rosbags`` reads.

Writing (:class:`BagWriter`) takes CDR-serialized messages, as a raw ROS subscription delivers them
(or as :func:`serialize` makes them from ``rosbags`` message objects), and makes a rosbag2 folder
``BAG/metadata.yaml`` + ``BAG/BAG_0.mcap`` that ``rosbags`` and ``ros2 bag`` read.

Crash safety: every :meth:`BagWriter.flush` (every ``flush_s`` seconds of writes) closes the MCAP
chunk in progress and writes it *together with* an end-of-data record and a footer in one
``pwrite`` at the end of the committed data; the next flush overwrites that provisional footer.
A process killed at any moment (SIGKILL included) therefore leaves a complete, unindexed MCAP file
of everything up to its last flush, plus a ``metadata.yaml`` (rewritten atomically at each flush)
naming its topics; readers scan such a file instead of using its index. :meth:`BagWriter.close`
writes the regular summary and index.

Reading: :func:`bag_info`, :func:`read_raw` (CDR bytes) and :func:`read_messages` (deserialized
``rosbags`` message objects); decoding the contract topics into arrays is
:mod:`embodied_ws.data.rosbag_io`'s (the one reader: conversion, sysid and the gap report use it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from embodied_ws.core.atomic import write_bytes_atomic
from embodied_ws.core.errors import UserError

#: message type of each topic of the ROS 2 contract (ARCHITECTURE §4); commands: see :func:`contract_topics`
CONTRACT_TYPES: dict[str, str] = {
    "/joint_states": "sensor_msgs/msg/JointState",
    "/embodied/task": "std_msgs/msg/Float64MultiArray",
    "/embodied/estop": "std_msgs/msg/Bool",
    "/diagnostics": "diagnostic_msgs/msg/DiagnosticArray",
    "/clock": "rosgraph_msgs/msg/Clock",
    "/camera/image_raw": "sensor_msgs/msg/Image",
    "/camera/camera_info": "sensor_msgs/msg/CameraInfo",
}
COMMAND_TYPE = "std_msgs/msg/Float64MultiArray"
#: topics recorded by default (cameras and /clock only when asked for)
DEFAULT_TOPICS = ("/joint_states", "/embodied/task", "/embodied/estop", "/diagnostics")


def contract_topics(controller: str = "joint_group_position_controller") -> dict[str, str]:
    """The contract's default recorded topics and their types, commands of ``controller`` included."""
    out = {t: CONTRACT_TYPES[t] for t in DEFAULT_TOPICS}
    out[f"/{controller}/commands"] = COMMAND_TYPE
    return out


def typestore() -> Any:
    """The ``rosbags`` type store of ROS 2 Jazzy (message classes, CDR (de)serialization)."""
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_JAZZY)


def serialize(msg: Any, msgtype: str) -> bytes:
    """CDR bytes of a ``rosbags`` message object (``typestore().types[msgtype](...)``)."""
    return bytes(typestore().serialize_cdr(msg, msgtype))


# ---------------------------------------------------------------------------------------- writing
class _CommittedFile:
    """A write stream for ``mcap.Writer`` that reaches the file only on :meth:`commit`.

    Not a ``RawIOBase`` on purpose: ``mcap.Writer`` would wrap one in a ``BufferedWriter``.
    """

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self.pos = 0
        self.buf = bytearray()

    def write(self, data: bytes) -> int:
        self.buf += data
        return len(data)

    def tell(self) -> int:
        return self.pos + len(self.buf)

    def flush(self) -> None:
        """Nothing: data reaches the file in :meth:`commit` (with the provisional footer)."""

    def commit(self, trailer: bytes) -> None:
        """Write the buffered bytes and ``trailer`` in one ``pwrite``; the trailer is overwritten next time."""
        data = bytes(self.buf) + trailer
        written = os.pwrite(self.fd, data, self.pos)
        if written != len(data):  # regular files do not write short unless the disk is full
            raise OSError(f"short write ({written} of {len(data)} bytes)")
        self.pos += len(self.buf)
        self.buf.clear()
        if not trailer:
            os.ftruncate(self.fd, self.pos)

    def close(self) -> None:
        os.close(self.fd)


def _provisional_end() -> bytes:
    """DataEnd + Footer (no summary: readers scan) + magic, as ``mcap`` writes them."""
    from mcap.data_stream import RecordBuilder
    from mcap.records import DataEnd, Footer

    b = RecordBuilder()
    DataEnd(data_section_crc=0).write(b)
    Footer(summary_start=0, summary_offset_start=0, summary_crc=0).write(b)
    return b.end() + b"\x89MCAP0\r\n"


class BagWriter:
    """Write a rosbag2 MCAP bag that stays readable up to its last flush if the process dies.

    :param path: bag folder to create (must not exist)
    :param topics: ``{topic: message type}`` known at the start (more with :meth:`add_topic`)
    :param custom_data: strings stored in ``metadata.yaml``'s ``custom_data``
    :param flush_s: at most this many seconds of writes between flushes
    """

    def __init__(
        self,
        path: str | Path,
        topics: dict[str, str] | None = None,
        custom_data: dict[str, str] | None = None,
        flush_s: float = 0.5,
    ) -> None:
        from mcap.writer import CompressionType, Writer

        self.path = Path(path)
        if self.path.exists():
            raise UserError("bag already exists (choose another --out)", str(self.path))
        self.path.mkdir(parents=True)
        self.file_name = f"{self.path.name}_0.mcap"
        self._file = _CommittedFile(self.path / self.file_name)
        self._writer = Writer(self._file, compression=CompressionType.NONE)
        self._writer.start(profile="ros2", library="embodied_ws")
        self._store = typestore()
        self._trailer = _provisional_end()
        self.custom_data = dict(custom_data or {})
        self.flush_s = flush_s
        self.channels: dict[str, tuple[int, str]] = {}
        self.counts: dict[str, int] = {}
        self._committed: dict[str, int] = {}
        self._t0: int | None = None
        self._t1 = 0
        self._last_flush = time.monotonic()
        self.closed = False
        for topic, msgtype in (topics or {}).items():
            self.add_topic(topic, msgtype, flush=False)
        self.flush()

    def add_topic(self, topic: str, msgtype: str, flush: bool = True) -> None:
        """Register ``topic`` with its message type (a ``pkg/msg/Name`` the Jazzy type store knows)."""
        if topic in self.channels:
            return
        if msgtype not in self._store.types:
            raise UserError(f"unknown message type {msgtype!r}", topic)
        msgdef, _ = self._store.generate_msgdef(msgtype, ros_version=2)
        schema = self._writer.register_schema(msgtype, "ros2msg", msgdef.encode())
        cid = self._writer.register_channel(topic, "cdr", schema, {"offered_qos_profiles": ""})
        self.channels[topic] = (cid, msgtype)
        self.counts[topic] = 0
        if flush:
            self.flush()

    def write(self, topic: str, t_ns: int, data: bytes | memoryview) -> None:
        """Append one CDR-serialized message received at ``t_ns`` (nanoseconds; kept non-decreasing)."""
        cid, _ = self.channels[topic]
        t_ns = max(int(t_ns), self._t1)  # unindexed readers need log times in order
        self._writer.add_message(cid, t_ns, bytes(data), t_ns)
        self.counts[topic] += 1
        self._t0 = t_ns if self._t0 is None else self._t0
        self._t1 = t_ns
        if time.monotonic() - self._last_flush >= self.flush_s:
            self.flush()

    def write_message(self, topic: str, t_ns: int, msg: Any) -> None:
        """Serialize a ``rosbags`` message object and append it."""
        self.write(topic, t_ns, self._store.serialize_cdr(msg, self.channels[topic][1]))

    def flush(self) -> None:
        """Make everything written so far readable even if the process is killed next."""
        self._writer.flush()
        self._file.commit(self._trailer)
        self._committed = dict(self.counts)
        self._write_metadata()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        """Write the MCAP summary and index, and the final ``metadata.yaml``."""
        if self.closed:
            return
        self._writer.finish()
        self._file.commit(b"")
        self._file.close()
        self._committed = dict(self.counts)
        self._write_metadata()
        self.closed = True

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_metadata(self) -> None:
        # rosbag2 metadata version 9 (the format ros2 bag of Jazzy writes)
        count = sum(self._committed.values())
        start = self._t0 or 0
        duration = max(0, self._t1 - start) if count else 0
        info = {
            "version": 9,
            "storage_identifier": "mcap",
            "relative_file_paths": [self.file_name],
            "duration": {"nanoseconds": duration},
            "starting_time": {"nanoseconds_since_epoch": start},
            "message_count": count,
            "topics_with_message_count": [
                {
                    "topic_metadata": {
                        "name": topic,
                        "type": msgtype,
                        "serialization_format": "cdr",
                        "offered_qos_profiles": [],
                        "type_description_hash": self._store.hash_rihs01(msgtype),
                    },
                    "message_count": self._committed.get(topic, 0),
                }
                for topic, (_, msgtype) in self.channels.items()
            ],
            "compression_format": "",
            "compression_mode": "",
            "files": [
                {
                    "path": self.file_name,
                    "starting_time": {"nanoseconds_since_epoch": start},
                    "duration": {"nanoseconds": duration},
                    "message_count": count,
                }
            ],
            "custom_data": self.custom_data or None,
            "ros_distro": "jazzy",
        }
        text = yaml.safe_dump({"rosbag2_bagfile_information": info}, sort_keys=False)
        write_bytes_atomic(self.path / "metadata.yaml", text.encode())


# ---------------------------------------------------------------------------------------- reading
@dataclass
class BagInfo:
    """What a bag holds.

    :param path: the bag folder
    :param topics: ``{topic: (message type, message count)}``
    :param start_ns: first log time
    :param duration_s: last minus first log time
    :param custom_data: ``metadata.yaml``'s ``custom_data`` (e.g. ``embodied_ws.robot``)
    """

    path: Path
    topics: dict[str, tuple[str, int]]
    start_ns: int
    duration_s: float
    custom_data: dict[str, str] = field(default_factory=dict)


def _check_bag(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise UserError("bag not found", str(p))
    if not (p / "metadata.yaml").is_file():
        raise UserError("not a rosbag2 folder (no metadata.yaml)", str(p))
    return p


def _open(path: Path) -> Any:
    from rosbags.rosbag2 import Reader

    reader = Reader(path)
    try:
        reader.open()
    except Exception as exc:  # rosbags raises ReaderError and friends with a readable message
        raise UserError(f"cannot read bag: {str(exc).strip().splitlines()[0]}", str(path)) from None
    return reader


def bag_info(path: str | Path) -> BagInfo:
    """Topics, counts, time span and custom data of the bag at ``path`` (messages actually in the file)."""
    p = _check_bag(path)
    reader = _open(p)
    try:
        counts: dict[str, int] = {c.topic: 0 for c in reader.connections}
        t0 = t1 = None
        for conn, t, _ in reader.messages():
            counts[conn.topic] += 1
            t0 = t if t0 is None else t0
            t1 = t
        topics = {c.topic: (c.msgtype, counts[c.topic]) for c in reader.connections}
    finally:
        reader.close()
    meta = yaml.safe_load((p / "metadata.yaml").read_text()) or {}
    custom = (meta.get("rosbag2_bagfile_information") or {}).get("custom_data") or {}
    return BagInfo(p, topics, t0 or 0, ((t1 or 0) - (t0 or 0)) / 1e9, dict(custom))


def read_raw(path: str | Path, topics: list[str] | None = None) -> Iterator[tuple[str, str, int, bytes]]:
    """Yield ``(topic, msgtype, log time ns, CDR bytes)`` in log-time order (all topics when None)."""
    p = _check_bag(path)
    reader = _open(p)
    try:
        conns = [c for c in reader.connections if topics is None or c.topic in topics]
        if conns:
            for conn, t, raw in reader.messages(connections=conns):
                yield conn.topic, conn.msgtype, t, raw
    finally:
        reader.close()


def read_messages(path: str | Path, topics: list[str] | None = None) -> Iterator[tuple[str, int, Any]]:
    """Yield ``(topic, log time ns, message object)`` in log-time order (``rosbags`` message classes)."""
    store = typestore()
    for topic, msgtype, t, raw in read_raw(path, topics):
        yield topic, t, store.deserialize_cdr(raw, msgtype)


def command_topic(info: BagInfo) -> str:
    """The bag's command topic (``/<controller>/commands``); one-line error when there is none or several."""
    found = [t for t, (ty, _) in info.topics.items() if t.endswith("/commands") and ty == COMMAND_TYPE]
    if len(found) != 1:
        what = "no /<controller>/commands topic" if not found else f"several command topics {found}"
        raise UserError(f"{what} in the bag", str(info.path))
    return found[0]

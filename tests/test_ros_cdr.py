"""Serialized fast paths (embodied_ws.ros.cdr) against rclpy's own serializer."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from conftest import NO_RCLPY

pytest.importorskip("rclpy", reason=NO_RCLPY)
pytestmark = pytest.mark.ros

from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray, MultiArrayDimension  # noqa: E402

from embodied_ws.ros import cdr  # noqa: E402

NAMES = ["shoulder_yaw", "a", "elbow_pitch_long"]  # lengths that need padding between strings


def test_encoded_joint_state_is_what_rclpy_reads() -> None:
    enc = cdr.JointStateEncoder(NAMES, frame_id="base_link")
    rng = np.random.default_rng(0)
    for t in (0.0, 1.25, 1234.000001):
        q, qd, tau = rng.normal(size=(3, 3))
        msg = deserialize_message(enc.encode(q, qd, tau, t), JointState)
        assert list(msg.name) == NAMES and msg.header.frame_id == "base_link"
        assert np.array_equal(msg.position, q) and np.array_equal(msg.velocity, qd)
        assert np.array_equal(msg.effort, tau)
        assert msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9 == pytest.approx(t, abs=1e-9)


def test_decoder_picks_our_joints_from_any_publisher() -> None:
    dec = cdr.JointStateDecoder(["elbow_pitch_long", "shoulder_yaw"])
    enc = cdr.JointStateEncoder(NAMES)
    rng = np.random.default_rng(1)
    for _ in range(4):  # alternate our layout and a foreign one: the cached layout must never leak across
        q, qd, tau = rng.normal(size=(3, 3))
        pos, vel = dec.read(enc.encode(q, qd, tau, 0.5))
        assert np.array_equal(pos, q[[2, 0]]) and np.array_equal(vel, qd[[2, 0]])
        foreign = JointState(name=["elbow_pitch_long", "gripper", "shoulder_yaw"], position=q.tolist())
        raw = serialize_message(foreign)
        pos, vel = dec.read(raw)
        assert np.array_equal(pos, q[[0, 2]]) and np.array_equal(vel, np.zeros(2))  # no velocities published
    foreign.header.stamp.sec, foreign.header.stamp.nanosec = 7, 500_000_000
    assert dec.stamp(serialize_message(foreign)) == 7.5


def test_decoder_names_missing_joints_and_rejects_truncated_bytes() -> None:
    dec = cdr.JointStateDecoder(["elbow", "wrist"])
    with pytest.raises(KeyError, match=r"lacks joints.*wrist"):
        dec.read(serialize_message(JointState(name=["elbow"], position=[0.1], velocity=[0.0])))
    raw = cdr.JointStateEncoder(["elbow", "wrist"]).encode(np.zeros(2), np.zeros(2), np.zeros(2), 0.0)
    with pytest.raises(cdr.CdrError):
        cdr.JointStateDecoder(["elbow", "wrist"]).read(raw[:-30])


def _big_endian_joint_state(names: list[str], position: list[float], velocity: list[float]) -> bytes:
    """A JointState in big-endian classic CDR, written field by field (alignment from the payload start)."""
    out = bytearray(b"\x00\x00\x00\x00")

    def align(n: int) -> None:
        out.extend(b"\x00" * (-(len(out) - 4) % n))

    def u32(v: int) -> None:
        align(4)
        out.extend(struct.pack(">I", v))

    def string(s: str) -> None:
        u32(len(s) + 1)
        out.extend(s.encode() + b"\x00")

    def doubles(vs: list[float]) -> None:
        u32(len(vs))
        if vs:
            align(8)
        out.extend(struct.pack(f">{len(vs)}d", *vs))

    out.extend(struct.pack(">iI", 3, 250_000_000))
    string("")
    u32(len(names))
    for n in names:
        string(n)
    doubles(position)
    doubles(velocity)
    doubles([])
    return bytes(out)


def test_decoder_reads_big_endian_cdr() -> None:
    raw = _big_endian_joint_state(["j1", "joint_2"], [0.5, -1.5], [2.0, 3.0])
    dec = cdr.JointStateDecoder(["joint_2", "j1"])
    pos, vel = dec.read(raw)
    assert pos.tolist() == [-1.5, 0.5] and vel.tolist() == [3.0, 2.0]
    assert dec.stamp(raw) == 3.25


def test_float_array_round_trip_and_layouts() -> None:
    enc = cdr.FloatArrayEncoder(3)
    values = np.array([0.25, -1.0, 3.5])
    raw = enc.encode(values, offset=41)
    msg = deserialize_message(raw, Float64MultiArray)
    assert list(msg.data) == values.tolist() and msg.layout.data_offset == 41
    data, offset = cdr.float_array_data(raw)
    assert data.tolist() == values.tolist() and offset == 41
    assert cdr.float_array_data(enc.encode(values))[1] == 0
    labelled = Float64MultiArray(data=[1.0, 2.0])  # dims must be skipped, whatever their length
    labelled.layout.dim = [MultiArrayDimension(label="goal_xyz", size=2, stride=2)]
    labelled.layout.data_offset = 9
    data, offset = cdr.float_array_data(serialize_message(labelled))
    assert data.tolist() == [1.0, 2.0] and offset == 9
    with pytest.raises(cdr.CdrError):
        cdr.float_array_data(raw[:-8])

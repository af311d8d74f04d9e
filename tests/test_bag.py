"""rosbag2 MCAP bags: written by embodied_ws.data.bag, read back by rosbags; readable after SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from embodied_ws.core.errors import UserError
from embodied_ws.data.bag import BagWriter, bag_info, typestore
from embodied_ws.data.rosbag_io import read_float_arrays, read_joint_states

JS = "sensor_msgs/msg/JointState"
FA = "std_msgs/msg/Float64MultiArray"


def joint_state(store, t: float, q: np.ndarray) -> object:
    """A rosbags JointState message."""
    ts = store.types
    stamp = ts["builtin_interfaces/msg/Time"](sec=int(t), nanosec=int((t % 1) * 1e9))
    header = ts["std_msgs/msg/Header"](stamp=stamp, frame_id="")
    return ts[JS](
        header=header,
        name=["a", "b"],
        position=np.asarray(q, dtype=np.float64),
        velocity=np.zeros(2),
        effort=np.array([0.5, -0.5]),
    )


def float_array(store, values: np.ndarray, offset: int = 0) -> object:
    """A rosbags Float64MultiArray message."""
    ts = store.types
    layout = ts["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=offset)
    return ts[FA](layout=layout, data=np.asarray(values, dtype=np.float64))


def test_written_bag_reads_back_with_rosbags(tmp_path: Path) -> None:
    from rosbags.rosbag2 import Reader

    store = typestore()
    bag = tmp_path / "bag1"
    with BagWriter(bag, {"/joint_states": JS, "/c/commands": FA}, {"embodied_ws.robot": "two"}) as w:
        for i in range(50):
            w.write_message("/joint_states", 1_000_000_000 + i * 40_000_000, joint_state(store, i * 0.04, [i, -i]))
            w.write_message("/c/commands", 1_000_000_001 + i * 40_000_000, float_array(store, [i, 2 * i], i))
    with Reader(bag) as reader:  # rosbags' own reader, no help from us
        counts = {c.topic: c.msgcount for c in reader.connections}
        assert counts == {"/joint_states": 50, "/c/commands": 50}
        msgs = [(c.topic, t) for c, t, _ in reader.messages()]
        assert len(msgs) == 100
    js = read_joint_states(bag)
    assert js.names == ["a", "b"]
    np.testing.assert_allclose(js.position[:, 0], np.arange(50))
    np.testing.assert_allclose(js.stamp, np.arange(50) * 0.04, atol=1e-6)
    cmd = read_float_arrays(bag, "/c/commands")
    np.testing.assert_allclose(cmd.data[:, 1], 2 * np.arange(50))
    assert cmd.offset.tolist() == list(range(50))
    info = bag_info(bag)
    assert info.custom_data == {"embodied_ws.robot": "two"}
    assert abs(info.duration_s - 49 * 0.04) < 1e-6


def test_one_reader_for_conversion_and_sysid(tmp_path: Path) -> None:
    """The conversion's read_topics and sysid's read_joint_states/read_float_arrays are one decoding: joints in
    the first message's order (a reordered message is put back in it, another publisher's joint set skipped,
    a field not sent is NaN), commands of another width dropped from the array view, a missing topic empty."""
    from embodied_ws.data.rosbag_io import read_topics

    store = typestore()
    ts = store.types
    bag = tmp_path / "mixed"

    def js(t_ns: int, names: list[str], pos: list[float], vel: list[float]) -> object:
        stamp = ts["builtin_interfaces/msg/Time"](sec=t_ns // 10**9, nanosec=t_ns % 10**9)
        return ts[JS](
            header=ts["std_msgs/msg/Header"](stamp=stamp, frame_id=""),
            name=names,
            position=np.asarray(pos, dtype=np.float64),
            velocity=np.asarray(vel, dtype=np.float64),
            effort=np.zeros(0),
        )

    with BagWriter(bag, {"/joint_states": JS, "/c/commands": FA}) as w:
        t0 = 5 * 10**9
        w.write_message("/joint_states", t0, js(t0, ["a", "b"], [1.0, 2.0], [0.1, 0.2]))
        w.write_message("/joint_states", t0 + 10, js(t0 + 10, ["b", "a", "g"], [20.0, 10.0, 9.0], []))
        w.write_message("/joint_states", t0 + 20, js(t0 + 20, ["gripper"], [0.5], [0.0]))  # another publisher
        w.write_message("/c/commands", t0 + 5, float_array(store, [1.0, 2.0], 7))
        w.write_message("/c/commands", t0 + 15, float_array(store, [1.0, 2.0, 3.0], 8))  # another width
        w.write_message("/c/commands", t0 + 25, float_array(store, [3.0, 4.0], 9))
    states = read_joint_states(bag)
    assert states.names == ["a", "b"]
    np.testing.assert_array_equal(states.position, [[1.0, 2.0], [10.0, 20.0]])
    np.testing.assert_array_equal(states.velocity[0], [0.1, 0.2])
    assert np.isnan(states.velocity[1]).all() and np.isnan(states.effort).all()
    np.testing.assert_allclose(states.log_t, [5.0, 5.0 + 1e-8])
    np.testing.assert_allclose(states.stamp, states.log_t)
    cmd = read_float_arrays(bag, "/c/commands")
    np.testing.assert_array_equal(cmd.data, [[1.0, 2.0], [3.0, 4.0]])
    assert cmd.offset.tolist() == [7, 9]
    data = read_topics(bag, ["/joint_states", "/c/commands"])
    td = data["/joint_states"]
    assert td.names == states.names and td.clock == "header.stamp"
    np.testing.assert_array_equal(np.stack(td.values), states.position)
    assert td.stamps == [t0, t0 + 10] and len(data["/c/commands"].values) == 3
    empty = read_float_arrays(bag, "/embodied/task")
    assert empty.data.shape == (0, 0) and empty.log_t.size == 0
    with pytest.raises(UserError, match="no /other/joint_states messages in the bag"):
        read_joint_states(bag, "/other/joint_states")


WRITER = """
import sys, time
import numpy as np
sys.path.insert(0, sys.argv[2])
from test_bag import joint_state
from embodied_ws.data.bag import BagWriter, typestore
store = typestore()
w = BagWriter(sys.argv[1], {"/joint_states": "sensor_msgs/msg/JointState"}, flush_s=3600)
i = 0
while True:
    w.write_message("/joint_states", 10**9 + i, joint_state(store, i * 0.001, [float(i), 0.0]))
    i += 1
    if i % 200 == 0:
        w.flush()
        print(i, flush=True)
"""


def test_sigkill_leaves_everything_up_to_the_last_flush_readable(tmp_path: Path) -> None:
    from rosbags.rosbag2 import Reader

    bag = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(bag), str(ROOT / "tests")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    flushed = 0
    while flushed < 1000:
        flushed = int(proc.stdout.readline())
    time.sleep(0.05)  # let it write past the flush, so the file has an unflushed tail
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    with Reader(bag) as reader:
        positions = [typestore().deserialize_cdr(raw, c.msgtype).position[0] for c, _, raw in reader.messages()]
    assert len(positions) >= flushed
    assert positions == list(range(len(positions)))  # in order, nothing torn


def test_missing_bag_and_wrong_robot_are_one_line_errors(cli, tmp_path: Path) -> None:
    from test_cli_errors import _assert_one_line_error

    _assert_one_line_error(
        cli("sysid", "fit", str(tmp_path / "nope"), "--robot", "arm3", "--out", str(tmp_path / "o")),
        "nope",
        "bag not found",
    )
    store = typestore()
    bag = tmp_path / "two_joints"
    with BagWriter(bag, {"/joint_states": JS, "/x/commands": FA}) as w:
        for i in range(30):
            w.write_message("/joint_states", 10**9 + i * 40_000_000, joint_state(store, i * 0.04, [0.0, 0.0]))
            w.write_message("/x/commands", 10**9 + i * 40_000_000 + 1, float_array(store, [0.0, 0.0]))
    _assert_one_line_error(
        cli("sysid", "fit", str(bag), "--robot", "arm3", "--out", str(tmp_path / "o")),
        "two_joints",
        "a bag of another robot",
    )

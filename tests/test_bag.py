"""rosbag2 MCAP bags: written by embodied_ws.data.bag, read back by rosbags; readable after SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from conftest import ROOT

from embodied_ws.data.bag import BagWriter, bag_info, read_float_arrays, read_joint_states, typestore

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

"""lerobot2bag / bag2lerobot keep what they carry: one bag per episode, the fps of the source, each episode's
instruction, frame times and values exactly; a bag recorded at a control rate without any fps gets the measured rate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_cli_errors import _assert_one_line_error

from embodied_ws.data.bag import bag_info, read_raw
from embodied_ws.data.convert import bag_to_dataset, dataset_to_bag
from embodied_ws.data.dataset import create_dataset, features_for, open_dataset, read_sidecar
from embodied_ws.data.frames import frame_time_ns, sample_frames
from embodied_ws.data.rosbag_io import ContractWriter

JOINTS = ["base_yaw", "shoulder", "elbow"]
CMD = "/joint_group_position_controller/commands"
FPS = 15  # neither LeRobot's usual 30 nor our sim's 25
LENGTHS = [7, 12, 9]
TASKS = ["touch the red ball", "touch the blue ball", "touch the red ball"]
H, W = 6, 8


def _make_dataset(root: Path) -> Path:
    """Three episodes of different lengths, two instructions, random float32 values and noise images,
    written with LeRobot's own writer (so nothing is smooth enough to survive an off-by-one)."""
    rng = np.random.default_rng(7)
    with create_dataset(root, FPS, features_for(JOINTS, JOINTS, {"overview": (H, W)}), "arm3") as ds:
        for n, task in zip(LENGTHS, TASKS, strict=True):
            for _ in range(n):
                ds.add_frame(
                    {
                        "observation.state": rng.uniform(-3, 3, 3).astype(np.float32),
                        "action": rng.uniform(-3, 3, 3).astype(np.float32),
                        "observation.images.overview": rng.integers(0, 256, (H, W, 3), dtype=np.uint8),
                        "task": task,
                    }
                )
            ds.save_episode()
    return root


def _columns(root: Path) -> dict[str, np.ndarray]:
    """Every column of the dataset as numpy, images decoded to uint8 (LeRobot's reader)."""
    table = open_dataset(root).hf_dataset.with_format(None)
    cols = {c: np.asarray(table[c]) for c in table.column_names if c != "observation.images.overview"}
    cols["images"] = np.stack([np.asarray(im.convert("RGB")) for im in table["observation.images.overview"]])
    return cols


@pytest.fixture(scope="module")
def trip(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """dataset → bags → dataset → bags."""
    tmp = tmp_path_factory.mktemp("trip")
    paths = {"ds": _make_dataset(tmp / "ds"), "bags": tmp / "bags", "ds2": tmp / "ds2", "bags2": tmp / "bags2"}
    dataset_to_bag(paths["ds"], paths["bags"], progress=False)
    paths["summary"] = bag_to_dataset(paths["bags"], paths["ds2"], progress=False)  # type: ignore[assignment]
    dataset_to_bag(paths["ds2"], paths["bags2"], progress=False)
    return paths


def test_lerobot2bag_writes_one_bag_per_episode_with_its_fps_and_instruction(trip: dict) -> None:
    bags = sorted(p for p in trip["bags"].iterdir() if p.is_dir())
    assert [b.name for b in bags] == ["episode_000000", "episode_000001", "episode_000002"]
    for ep, bag in enumerate(bags):
        info = bag_info(bag)  # rosbags reads each one
        assert info.custom_data["embodied_ws.fps"] == str(FPS)
        assert info.custom_data["embodied_ws.episode_index"] == str(ep)
        assert info.topics["/joint_states"][1] == info.topics[CMD][1] == LENGTHS[ep]
        assert info.topics["/camera/image_raw"][1] == LENGTHS[ep]
        instr = [raw for _, _, _, raw in read_raw(bag, ["/embodied/instruction"])]
        assert len(instr) == 1 and TASKS[ep].encode() in instr[0]
        assert abs(info.duration_s - (LENGTHS[ep] - 1) / FPS) < 1e-9


def test_dataset_to_bags_to_dataset_is_exact(trip: dict) -> None:
    """Episodes, tasks, frame times and values compared exactly (no tolerance)."""
    a, b = open_dataset(trip["ds"]), open_dataset(trip["ds2"])
    assert b.fps == a.fps == FPS and b.num_episodes == 3 and b.num_frames == sum(LENGTHS)
    assert trip["summary"]["fps"] == FPS and "metadata" in trip["summary"]["fps_source"]
    ca, cb = _columns(trip["ds"]), _columns(trip["ds2"])
    for col in ("episode_index", "frame_index", "index", "timestamp", "observation.state", "action", "images"):
        assert ca[col].dtype == cb[col].dtype, col
        assert np.array_equal(ca[col], cb[col]), col
    tasks_a = [a.meta.tasks.index[a.meta.tasks["task_index"] == t][0] for t in ca["task_index"]]
    tasks_b = [b.meta.tasks.index[b.meta.tasks["task_index"] == t][0] for t in cb["task_index"]]
    assert tasks_a == tasks_b == [t for n, t in zip(LENGTHS, TASKS, strict=True) for _ in range(n)]
    starts = [0.0, 7 / FPS + 1, 19 / FPS + 2]  # lerobot2bag's timeline: one period and 1 s between episodes
    assert read_sidecar(trip["ds2"])["episode_start_s"] == pytest.approx(starts, abs=1e-9)


def test_bags_to_dataset_to_bags_gives_the_same_messages(trip: dict) -> None:
    """The second bags carry the same stamps and bytes as the first (only the source path differs)."""
    for ep in range(3):
        name = f"episode_{ep:06d}"
        one, two = list(read_raw(trip["bags"] / name)), list(read_raw(trip["bags2"] / name))
        assert [(m[0], m[2]) for m in one] == [(m[0], m[2]) for m in two]
        assert all(x[3] == y[3] for x, y in zip(one, two, strict=True))


@pytest.mark.parametrize("fps", [3, 7, 15, 25, 30, 333])
def test_frame_grid_is_exact_at_any_rate(fps: int) -> None:
    """Stamps written at k / fps give back exactly those frames (no frame lost to nanosecond rounding)."""
    t = frame_time_ns(1_700_000_000 * 10**9, np.arange(50), fps)
    fr = sample_frames(fps, t, t, {"cam": t}, "bag")
    assert np.array_equal(fr.times, t)
    assert fr.state.tolist() == fr.action.tolist() == fr.cameras["cam"].tolist() == list(range(50))


def _control_rate_bag(path: Path, hz: float, n: int, seed: int) -> dict[str, np.ndarray]:
    """A bag as `embodied-ws record` writes it from a robot at ``hz``: joint states and images stamped in sim
    time (from 0: another clock), commands answering each state 3-12 ms later, receive times with jitter;
    no fps anywhere; the instruction is not recorded."""
    rng = np.random.default_rng(seed)
    t0 = 1_765_000_000 * 10**9
    rx = t0 + np.round(np.arange(n) * 1e9 / hz).astype(np.int64) + rng.integers(-2_000_000, 2_000_000, n)
    q = rng.uniform(-1, 1, (n, 3)).astype(np.float32).astype(np.float64)
    cmd = rng.uniform(-1, 1, (n, 3)).astype(np.float32).astype(np.float64)
    cmd_rx = rx + rng.integers(3_000_000, 12_000_000, n)
    with ContractWriter(path) as w:
        for k in range(n):
            sim_t = round(k * 1e9 / hz)
            w.joint_state("/joint_states", int(rx[k]), JOINTS, q[k], stamp_ns=sim_t)
            w.image("/camera/image_raw", int(rx[k]) + 500_000, np.full((H, W, 3), k % 256, np.uint8), stamp_ns=sim_t)
            w.float_array(CMD, int(cmd_rx[k]), cmd[k])
    return {"q": q, "cmd": cmd}


def _map(folder: Path) -> str:
    """The default mapping with a fallback instruction (the bags here do not record one)."""
    mp = yaml.safe_load((Path(__file__).parents[1] / "config" / "data" / "bag_map.yaml").read_text())
    (folder / "map.yaml").write_text(yaml.safe_dump({**mp, "instruction": "wave"}))
    return str(folder / "map.yaml")


def test_control_rate_bag_without_fps_gets_the_measured_rate(cli, tmp_path: Path) -> None:
    ref = _control_rate_bag(tmp_path / "bag", 40.0, 80, seed=1)
    map_file = _map(tmp_path)
    proc = cli("bag2lerobot", str(tmp_path / "bag"), "--out", str(tmp_path / "ds"), "--map", map_file,
               "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["fps"] == 40
    assert f"measured from the {CMD} stamps" in summary["fps_source"]
    cols = _columns(tmp_path / "ds")
    side = read_sidecar(tmp_path / "ds")
    assert side["fps_source"] == summary["fps_source"] and abs(side["control_rate_hz"] - 40) < 0.5
    # each command appears once, in order, beside the state it answered
    n = len(cols["action"])
    assert n >= 78
    first = int(np.flatnonzero((ref["cmd"].astype(np.float32) == cols["action"][0]).all(axis=1))[0])
    assert np.array_equal(cols["action"], ref["cmd"][first : first + n].astype(np.float32))
    assert np.array_equal(cols["observation.state"], ref["q"][first : first + n].astype(np.float32))
    assert np.array_equal(cols["timestamp"], (np.arange(n) / 40).astype(np.float32))
    assert np.array_equal(cols["images"][:, 0, 0, 0], (first + np.arange(n)) % 256)  # the image of the same tick
    # the joint states' and images' sim-time stamps are another clock than the commands': receive times are used
    assert side["stamps"] == {"/joint_states": "receive time", CMD: "receive time", "/camera/image_raw": "receive time"}


def test_bags_that_disagree_on_fps_are_one_line(cli, tmp_path: Path) -> None:
    _control_rate_bag(tmp_path / "bags" / "a", 40.0, 20, seed=2)
    _control_rate_bag(tmp_path / "bags" / "b", 25.0, 20, seed=3)
    proc = cli("bag2lerobot", str(tmp_path / "bags"), "--out", str(tmp_path / "ds"), "--map", _map(tmp_path))
    _assert_one_line_error(proc, "25 fps here but 40 fps", "bags/b", "set fps in the --map file")
    assert not (tmp_path / "ds").exists()


def test_bag_without_an_instruction_is_one_line(cli, tmp_path: Path) -> None:
    _control_rate_bag(tmp_path / "bag", 40.0, 20, seed=4)
    proc = cli("bag2lerobot", str(tmp_path / "bag"), "--out", str(tmp_path / "ds"))
    _assert_one_line_error(proc, "no instruction", "/embodied/instruction", "set `instruction` in the --map file")


@pytest.mark.ros
@pytest.mark.slow
def test_bag_recorded_from_the_sim_at_its_control_rate(cli, tmp_path: Path) -> None:
    """Real nodes: the sim (camera on) driven by `sysid collect` one command per state, recorded by
    `embodied-ws record`; no fps anywhere: bag2lerobot measures the rate the loop really ran at from the
    command stamps (25 Hz on a free machine; less when software rendering is slow, so only the agreement
    with the recording is asserted), and every action is a command that was sent, in order."""
    from ros_helpers import start_node, stop
    from test_sysid_ros import _cli

    from embodied_ws.data.rosbag_io import read_float_arrays, read_joint_states

    bag = tmp_path / "bag"
    sim = start_node("mujoco_sim_node", "mode:=realtime", "publish_camera:=true", "env.image_size:=[24, 32]")
    try:
        topics = ["/joint_states", CMD, "/camera/image_raw"]
        rec = _cli("record", "--out", str(bag), "--topics", *topics, "--duration", "12")
        drive = _cli("sysid", "collect", "--robot", "arm3", "--duration", "8", "--out", str(tmp_path / "drive"))
        _, err = drive.communicate(timeout=120)
        assert drive.returncode == 0, err
        _, err = rec.communicate(timeout=120)
        assert rec.returncode == 0, err
    finally:
        stop(sim)
    proc = cli("bag2lerobot", str(bag), "--out", str(tmp_path / "ds"), "--map", _map(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert f"measured from the {CMD} stamps" in summary["fps_source"], summary
    side = read_sidecar(tmp_path / "ds")
    assert summary["fps"] == round(side["control_rate_hz"])
    commands = read_float_arrays(bag, CMD)
    span_rate = (len(commands.log_t) - 1) / (commands.log_t[-1] - commands.log_t[0])
    assert abs(side["control_rate_hz"] / span_rate - 1) < 0.15, (side["control_rate_hz"], span_rate)
    cols = _columns(tmp_path / "ds")
    sent = commands.data.astype(np.float32)
    assert len(cols["action"]) >= 0.5 * len(sent)
    idx = np.array([np.flatnonzero((sent == a).all(axis=1))[0] for a in cols["action"]])  # each one was sent ...
    assert np.all(np.diff(idx) >= 0), idx  # ... in this order
    states = read_joint_states(bag).position.astype(np.float32)
    assert all((states == q).all(axis=1).any() for q in cols["observation.state"])
    assert side["stamps"]["/joint_states"] == "receive time"  # its header stamps are sim time: another clock

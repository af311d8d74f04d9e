"""Demonstration datasets: record-demos → LeRobotDataset v3 (LeRobot's reader + torch DataLoader), bag ↔ dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_cli_errors import _assert_one_line_error

from embodied_ws.data.convert import bag_to_dataset, dataset_to_bag
from embodied_ws.data.record import record_demos
from embodied_ws.data.rosbag_io import ContractWriter, read_topics

JOINTS = ["base_yaw", "shoulder", "elbow"]
CMD = "/joint_group_position_controller/commands"


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three expert episodes of reach_color with DR, 32×32 images."""
    out = tmp_path_factory.mktemp("demos") / "reach_color"
    summary = record_demos("arm3", "reach_color", 3, out, seed=0, image_size=[32, 32], progress=False)
    assert summary["episodes"] == 3 and summary["success_rate"] >= 0.95
    return out


@pytest.mark.slow
def test_recorded_dataset_loads_with_lerobot_and_a_dataloader(demos: Path) -> None:
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/reach_color", root=demos)
    assert ds.num_episodes == 3 and ds.fps == 25
    assert ds.meta.features["observation.state"]["names"] == JOINTS
    assert {"observation.state", "action"} <= set(ds.meta.stats)
    loader = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True)
    n = 0
    for batch in loader:
        assert batch["observation.images.overview"].shape[1:] == (3, 32, 32)
        assert batch["observation.state"].shape[1:] == (3,) and batch["action"].shape[1:] == (3,)
        assert all(t.startswith("touch the ") and t.endswith(" ball") for t in batch["task"])
        n += len(batch["action"])
    assert n == ds.num_frames
    # episodes end soon after success: no long idle tail
    assert ds.num_frames < 3 * 50


def _synthetic_bag(path: Path, topics: tuple[str, ...] = ("/joint_states", CMD, "/camera/image_raw")) -> dict:
    """A 2 s bag: joint states at 200 Hz (extra joint, other order), camera at 30 Hz with jitter, commands at 30 Hz."""
    rng = np.random.default_rng(0)
    t0 = 1_700_000_000 * 10**9
    names = ["elbow", "gripper", "base_yaw", "shoulder"]
    js_t = t0 + np.arange(400) * 5_000_000 + rng.integers(-300_000, 300_000, 400)
    js_q = rng.uniform(-1, 1, (400, 4)).astype(np.float32).astype(np.float64)  # float32-exact values
    cam_t = (
        t0 + 3_000_000 + np.round(np.arange(58) * 1e9 / 30).astype(np.int64) + rng.integers(-2_000_000, 2_000_000, 58)
    )
    cmd_t = cam_t - 1_000_000
    cmds = rng.uniform(-1, 1, (58, 3))
    events = [(int(t0), 0, "instr", None)]
    if "/joint_states" in topics:
        events += [(int(t), 1, "js", q) for t, q in zip(js_t, js_q, strict=True)]
    for k, t in enumerate(cam_t):
        if CMD in topics:
            events.append((int(cmd_t[k]), 2, "cmd", cmds[k]))
        if "/camera/image_raw" in topics:
            img = np.full((24, 32, 3), k * 4, dtype=np.uint8)
            img[0, 0] = (255, 0, k)
            events.append((int(t), 3, "img", img))
    with ContractWriter(path) as w:  # in time order, as a recorder writes them
        for t, _, kind, value in sorted(events, key=lambda e: (e[0], e[1])):
            if kind == "instr":
                w.string("/embodied/instruction", t, "touch the green ball")
            elif kind == "js":
                w.joint_state("/joint_states", t, names, value)
            elif kind == "cmd":
                w.float_array(CMD, t, value)
            else:
                w.image("/camera/image_raw", t, value)
    return {"js_t": js_t, "js_q": js_q, "names": names, "cam_t": cam_t}


@pytest.mark.slow
def test_bag_to_dataset_to_bag_round_trip(tmp_path: Path) -> None:
    ref = _synthetic_bag(tmp_path / "bag")
    summary = bag_to_dataset(tmp_path / "bag", tmp_path / "ds", progress=False)
    assert summary["fps"] == 30 and summary["instructions"] == ["touch the green ball"]
    dataset_to_bag(tmp_path / "ds", tmp_path / "bag2", progress=False)
    back = read_topics(
        tmp_path / "bag2" / "episode_000000", ["/joint_states", CMD, "/camera/image_raw", "/embodied/instruction"]
    )
    js = back["/joint_states"]
    assert js.names == JOINTS
    stamps = np.asarray(js.stamps)
    half = 0.5e9 / 30
    # every frame sits within half a frame period of a camera image of the original bag
    nearest_cam = np.abs(stamps[:, None] - ref["cam_t"][None]).min(axis=1)
    assert nearest_cam.max() <= half
    # joint values are recorded ones (the original sample nearest each frame, in the map's joint order)
    order = [ref["names"].index(j) for j in JOINTS]
    for t, q in zip(stamps, js.values, strict=True):
        k = int(np.argmin(np.abs(ref["js_t"] - t)))
        assert np.array_equal(q, ref["js_q"][k, order])
    assert back["/embodied/instruction"].values == ["touch the green ball"]
    assert len(back["/camera/image_raw"].values) == len(stamps) == summary["frames"]


def test_bag_without_mapped_topic_is_one_line(cli, tmp_path: Path) -> None:
    _synthetic_bag(tmp_path / "bag", topics=(CMD, "/camera/image_raw"))
    proc = cli("bag2lerobot", str(tmp_path / "bag"), "--out", str(tmp_path / "ds"))
    _assert_one_line_error(proc, "topic /joint_states not in the bag", "--map")


def test_not_a_dataset_is_one_line(cli, tmp_path: Path) -> None:
    (tmp_path / "junk").mkdir()
    _assert_one_line_error(cli("vla", "check", str(tmp_path / "junk")), "junk", "not a LeRobotDataset")
    _assert_one_line_error(
        cli("lerobot2bag", str(tmp_path / "junk"), "--out", str(tmp_path / "b")), "not a LeRobotDataset"
    )


@pytest.mark.slow
def test_dataset_of_another_robot_is_one_line(cli, demos: Path) -> None:
    proc = cli("vla", "check", str(demos), "--robot", "cartpole", "--task", "swingup")
    _assert_one_line_error(proc, "not cartpole's", "another robot")

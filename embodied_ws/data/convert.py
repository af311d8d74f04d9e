"""``bag2lerobot`` / ``lerobot2bag``: rosbag2 (MCAP) of contract topics ↔ LeRobotDataset v3.

Bag → dataset: one bag is one episode. Frames sit on a fixed grid ``t0 + k / fps`` (LeRobot requires
timestamps at its fps); each frame takes the camera image and joint state with the nearest stamp and
the last command sent at or before the frame time (a command holds until the next one). The episode's
absolute start ``t0`` is kept in the dataset's ``meta/embodied_ws.json`` so ``lerobot2bag`` restores
the original clock: round trip stamps land within half a frame period of the camera's, joint values
are the recorded ones (as float32, LeRobot's state dtype).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.config.loader import read_yaml
from embodied_ws.core.errors import ConfigError, UserError
from embodied_ws.core.paths import config_dir
from embodied_ws.data.dataset import (
    ACTION,
    IMAGE_PREFIX,
    STATE,
    create_dataset,
    features_for,
    open_dataset,
    progress_iter,
    read_sidecar,
    write_sidecar,
)
from embodied_ws.data.rosbag_io import ContractWriter, TopicData, read_topics


@dataclass
class BagMap:
    """Topic → feature mapping (``config/data/bag_map.yaml`` documents every key)."""

    robot: str = "arm3"
    fps: int | None = 30
    instruction: str = ""
    instruction_topic: str = ""
    state_topic: str = "/joint_states"
    joints: list[str] = field(default_factory=list)
    action_topic: str = "/joint_group_position_controller/commands"
    action_names: list[str] = field(default_factory=list)
    cameras: dict[str, str] = field(default_factory=dict)

    def to_yaml(self) -> dict[str, Any]:
        """The mapping in its YAML form (stored with the dataset)."""
        return {
            "robot": self.robot,
            "fps": self.fps,
            "instruction": self.instruction,
            "instruction_topic": self.instruction_topic,
            "state": {"topic": self.state_topic, "joints": self.joints},
            "action": {"topic": self.action_topic, "names": self.action_names},
            "cameras": dict(self.cameras),
        }


def parse_map(data: Any, where: str) -> BagMap:
    """A :class:`BagMap` from the YAML mapping; wrong keys give one line naming the key."""
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping", where)
    m = BagMap()
    try:
        m.robot = str(data.get("robot", m.robot))
        m.fps = None if data.get("fps", m.fps) is None else int(data.get("fps", m.fps))
        m.instruction = str(data.get("instruction", ""))
        m.instruction_topic = str(data.get("instruction_topic", "") or "")
        state, action = data["state"], data["action"]
        m.state_topic, m.joints = str(state["topic"]), [str(j) for j in state["joints"]]
        m.action_topic = str(action["topic"])
        m.action_names = [str(n) for n in action.get("names", m.joints)]
        m.cameras = {str(k): str(v) for k, v in (data.get("cameras") or {}).items()}
    except KeyError as exc:
        raise ConfigError(f"missing key {exc.args[0]!r}", where) from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"bad mapping: {exc}", where) from None
    if not m.cameras:
        raise ConfigError("at least one camera topic is needed (frames follow the camera)", f"{where}: cameras")
    return m


def load_map(path: Path | None) -> BagMap:
    """The mapping file (default ``config/data/bag_map.yaml``)."""
    path = path or config_dir() / "data" / "bag_map.yaml"
    data, _ = read_yaml(Path(path))
    return parse_map(data, str(path))


def _nearest(stamps: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the stamp nearest to each ``t`` (``stamps`` sorted)."""
    i = np.clip(np.searchsorted(stamps, t), 1, len(stamps) - 1)
    return np.where(np.abs(stamps[i - 1] - t) <= np.abs(stamps[i] - t), i - 1, i)


def _held(stamps: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the last stamp at or before each ``t`` (the first one before any)."""
    return np.maximum(np.searchsorted(stamps, t, side="right") - 1, 0)


def _joint_columns(td: TopicData, joints: list[str], bag: Path) -> np.ndarray:
    missing = [j for j in joints if j not in td.names]
    if missing:
        raise UserError(
            f"joint states lack {', '.join(missing)} (bag joints: {', '.join(td.names) or 'none'}): "
            "a bag of another robot, or fix state.joints in the --map file",
            str(bag),
        )
    cols = [td.names.index(j) for j in joints]
    return np.stack(td.values)[:, cols]


def bag_to_dataset(bag: Path, out: Path, map_path: Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Convert one rosbag2 (one episode) into a LeRobotDataset v3 at ``out``; returns a summary."""
    m = load_map(map_path)
    topics = [m.state_topic, m.action_topic, *m.cameras.values()]
    data = read_topics(bag, topics)
    instr = m.instruction
    if m.instruction_topic:
        try:
            strings = read_topics(bag, [m.instruction_topic])[m.instruction_topic].values
            instr = strings[0] if strings else instr
        except UserError:
            pass  # the topic is optional: fall back to the mapping's instruction
    if not instr:
        raise ConfigError("no instruction: set `instruction` or record instruction_topic", str(map_path or "map"))
    state = data[m.state_topic]
    q = _joint_columns(state, m.joints, bag)
    q_t = np.asarray(state.stamps, dtype=np.int64)
    act = data[m.action_topic]
    a = np.stack(act.values)
    if a.shape[1] != len(m.action_names):
        raise UserError(f"commands have {a.shape[1]} values, the map names {len(m.action_names)}", str(bag))
    a_t = np.asarray(act.stamps, dtype=np.int64)
    cams = {name: data[topic] for name, topic in m.cameras.items()}
    ref = next(iter(cams.values()))
    ref_t = np.asarray(ref.stamps, dtype=np.int64)
    if len(ref_t) < 2:
        raise UserError("fewer than 2 camera images in the bag", str(bag))
    fps = m.fps or round(1e9 / float(np.median(np.diff(ref_t))))
    t0 = int(max(ref_t[0], q_t[0]))
    t_end = int(min(ref_t[-1], q_t[-1]))
    n = int((t_end - t0) * fps // 1_000_000_000) + 1
    grid = t0 + np.round(np.arange(n) * 1e9 / fps).astype(np.int64)
    qi, ai = _nearest(q_t, grid), _held(a_t, grid)
    img_idx = {name: _nearest(np.asarray(td.stamps, dtype=np.int64), grid) for name, td in cams.items()}
    sizes = {name: td.values[0].shape[:2] for name, td in cams.items()}
    feats = features_for(m.joints, m.action_names, sizes)
    with create_dataset(out, fps, feats, m.robot) as ds:
        for k in progress_iter(n, "bag2lerobot", progress):
            frame = {STATE: q[qi[k]].astype(np.float32), ACTION: a[ai[k]].astype(np.float32), "task": instr}
            for name, td in cams.items():
                frame[IMAGE_PREFIX + name] = td.values[img_idx[name][k]]
            ds.add_frame(frame)
        ds.save_episode()
    write_sidecar(
        out,
        {
            "robot": m.robot,
            "source": str(bag),
            "control_rate_hz": None,
            "joints": {"names": m.joints},
            "action": {"meaning": "joint position command", "names": m.action_names},
            "cameras": {k: list(v) for k, v in sizes.items()},
            "episode_start_s": [t0 / 1e9],
            "bag_map": m.to_yaml(),
        },
    )
    return {"dataset": str(out), "episodes": 1, "frames": n, "fps": fps, "instruction": instr, "robot": m.robot}


def dataset_to_bag(root: Path, out: Path, map_path: Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Write every episode of a LeRobotDataset v3 to a new rosbag2 (MCAP) at ``out``; returns a summary."""
    ds = open_dataset(root)
    side = read_sidecar(root)
    m = load_map(map_path) if map_path else parse_map(side.get("bag_map") or _default_map(ds, side), str(root))
    names = list(ds.meta.features[STATE]["names"] or m.joints)
    starts = list(side.get("episode_start_s") or [])
    cams = [k for k in ds.meta.features if k.startswith(IMAGE_PREFIX)]
    period_ns = 1e9 / ds.fps
    ep_index = np.asarray(ds.hf_dataset.with_format(None)["episode_index"])
    next_start = 0
    with ContractWriter(out) as w:
        for ep in progress_iter(ds.num_episodes, "lerobot2bag", progress):
            idx = np.flatnonzero(ep_index == ep)
            t0 = round(starts[ep] * 1e9) if ep < len(starts) else next_start
            for j, i in enumerate(idx):
                item = ds[int(i)]
                t = t0 + round(j * period_ns)
                if j == 0:
                    w.string(m.instruction_topic or "/embodied/instruction", t, str(item["task"]))
                w.joint_state(m.state_topic, t, names, item[STATE].numpy())
                w.float_array(m.action_topic, t, item[ACTION].numpy())
                for key in cams:
                    cam = key[len(IMAGE_PREFIX) :]
                    rgb = (item[key].permute(1, 2, 0).numpy() * 255.0).round().astype(np.uint8)
                    w.image(m.cameras.get(cam, f"/{cam}/image_raw"), t, rgb, frame_id=cam)
            next_start = t0 + round((len(idx) + 1) * period_ns) + 1_000_000_000
    return {"bag": str(out), "episodes": ds.num_episodes, "frames": ds.num_frames, "fps": ds.fps}


def _default_map(ds: Any, side: dict[str, Any]) -> dict[str, Any]:
    """A mapping for a dataset not made from a bag: the contract topics, cameras under ``/<name>/image_raw``."""
    cams = [k[len(IMAGE_PREFIX) :] for k in ds.meta.features if k.startswith(IMAGE_PREFIX)]
    joints = list(ds.meta.features[STATE]["names"])
    return {
        "robot": side.get("robot", ds.meta.robot_type),
        "fps": ds.fps,
        "instruction_topic": "/embodied/instruction",
        "state": {"topic": "/joint_states", "joints": joints},
        "action": {"topic": "/joint_group_position_controller/commands", "names": ds.meta.features[ACTION]["names"]},
        "cameras": {c: "/camera/image_raw" if len(cams) == 1 else f"/{c}/image_raw" for c in cams},
    }

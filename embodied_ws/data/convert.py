"""``bag2lerobot`` / ``lerobot2bag``: rosbag2 (MCAP) bags of contract topics ↔ LeRobotDataset v3.

One bag is one episode, the rosbag2 convention (one recording, one folder):

- ``lerobot2bag DATASET --out DIR`` writes ``DIR/episode_000000/`` ... (``metadata.yaml`` +
  ``episode_000000_0.mcap``), one bag per episode. ``metadata.yaml``'s ``custom_data`` holds
  ``embodied_ws.fps`` (the dataset's), ``embodied_ws.episode_index``, ``embodied_ws.robot``,
  ``embodied_ws.dataset`` (and ``embodied_ws.control_rate_hz`` when the dataset knows it). The topics are
  the contract's (joint states, commands, camera images) plus the instruction as ``std_msgs/String`` on
  ``/embodied/instruction``, sent at the first frame and again whenever it changes. Every message of
  frame ``k`` is stamped (``header.stamp`` and log time) ``t0 + k / fps`` (:func:`frames.frame_time_ns`),
  ``t0`` the episode's original start when the dataset came from bags.
- ``bag2lerobot BAG... --out DS`` takes bag folders and folders of bags (each bag one episode, in name
  order). Frame rate: the map's ``fps`` when set, else the bags' ``embodied_ws.fps``, else measured from
  the command stamps (the robot's control rate); the summary says which. Frames: see
  :mod:`embodied_ws.data.frames`. Each frame's instruction is the last one sent at or before it (the
  map's ``instruction`` when the bag has none). Values are kept exactly (float32, LeRobot's dtype).

The dataset keeps each episode's start in ``meta/embodied_ws.json``, so dataset → bags → dataset and
bags → dataset → bags give back the same episodes, tasks, frame times and values.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.config.loader import read_yaml
from embodied_ws.core.errors import ConfigError, UserError
from embodied_ws.core.paths import config_dir
from embodied_ws.data import bag as bagio
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
from embodied_ws.data.frames import NS, Rate, frame_time_ns, measured_rate, sample_frames
from embodied_ws.data.rosbag_io import ContractWriter, TopicData, read_topics

INSTRUCTION_TOPIC = "/embodied/instruction"
#: pause between episodes on the made-up timeline of a dataset that did not come from bags
EPISODE_GAP_NS = NS


@dataclass
class BagMap:
    """Topic → feature mapping (``config/data/bag_map.yaml`` documents every key)."""

    robot: str = "arm3"
    fps: int | None = None
    instruction: str = ""
    instruction_topic: str = INSTRUCTION_TOPIC
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
        fps = data.get("fps")
        if fps is not None and (isinstance(fps, bool) or not isinstance(fps, int) or fps < 1):
            raise ConfigError(f"must be a whole number of frames per second ≥ 1 or null, got {fps!r}", f"{where}: fps")
        m.robot, m.fps = str(data.get("robot", m.robot)), fps
        m.instruction = str(data.get("instruction", "") or "")
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
        raise ConfigError("at least one camera topic is needed (a VLA dataset needs images)", f"{where}: cameras")
    return m


def load_map(path: Path | None) -> BagMap:
    """The mapping file (default ``config/data/bag_map.yaml``)."""
    path = path or config_dir() / "data" / "bag_map.yaml"
    data, _ = read_yaml(Path(path))
    return parse_map(data, str(path))


# ------------------------------------------------------------------------------------ bags → dataset
def find_bags(paths: list[Path]) -> list[Path]:
    """The bag folders named by ``paths``: a bag folder, or a folder of bag folders (in name order)."""
    bags: list[Path] = []
    for p in map(Path, paths):
        if (p / "metadata.yaml").is_file():
            bags.append(p)
            continue
        if not p.exists():
            raise UserError("bag not found", str(p))
        inner = sorted(c for c in p.iterdir() if (c / "metadata.yaml").is_file()) if p.is_dir() else []
        if not inner:
            raise UserError("not a rosbag2 folder, nor a folder of them (no metadata.yaml)", str(p))
        bags += inner
    return bags


def _given_fps(info: bagio.BagInfo) -> int | None:
    value = info.custom_data.get("embodied_ws.fps")
    if value is None:
        return None
    try:
        fps = int(str(value))
    except ValueError:
        fps = 0
    if fps < 1:
        raise UserError(f"custom_data embodied_ws.fps is {value!r}, not a whole number ≥ 1", str(info.path))
    return fps


def decide_rate(m: BagMap, infos: list[bagio.BagInfo]) -> Rate:
    """The dataset's fps: the map's, else the bags' metadata, else measured from the command stamps.

    Every bag must agree (one dataset has one fps); a disagreement names both bags.
    """
    if m.fps:
        return Rate(m.fps, "the --map file's fps")
    rates = []
    for info in infos:
        fps = _given_fps(info)
        if fps is not None:
            rates.append(Rate(fps, "the bags' metadata (embodied_ws.fps, the rate of the dataset they came from)"))
            continue
        stamps = read_topics(info.path, [m.action_topic], info=info)[m.action_topic].stamps
        rates.append(measured_rate(np.asarray(stamps, dtype=np.int64), m.action_topic, str(info.path)))
    for info, rate in zip(infos, rates, strict=True):
        if rate.fps != rates[0].fps:
            raise UserError(
                f"{rate.fps} fps here but {rates[0].fps} fps in {infos[0].path} (one dataset has one rate); "
                "convert them separately or set fps in the --map file",
                str(info.path),
            )
    measured = [r.measured_hz for r in rates if r.measured_hz is not None]
    hz = float(np.mean(measured)) if len(measured) == len(rates) else None
    return Rate(rates[0].fps, rates[0].source, hz)


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


@dataclass
class Episode:
    """One bag sampled into frames: per-frame state, action, images and instruction."""

    bag: Path
    start_ns: int
    state: np.ndarray
    action: np.ndarray
    images: dict[str, list[np.ndarray]]
    tasks: list[str]
    clocks: dict[str, str]


def read_episode(info: bagio.BagInfo, m: BagMap, fps: int) -> Episode:
    """The frames of one bag at ``fps`` (see :mod:`embodied_ws.data.frames`)."""
    bag = info.path
    optional = [m.instruction_topic] if m.instruction_topic else []
    data = read_topics(bag, [m.state_topic, m.action_topic, *m.cameras.values()], optional, info=info)
    state = data[m.state_topic]
    q = _joint_columns(state, m.joints, bag)
    act = data[m.action_topic]
    a = np.stack(act.values)
    if a.shape[1] != len(m.action_names):
        raise UserError(f"commands have {a.shape[1]} values, the map names {len(m.action_names)}", str(bag))
    cams = {name: data[topic] for name, topic in m.cameras.items()}
    cam_t = {n: np.array(td.stamps) for n, td in cams.items()}
    fr = sample_frames(fps, np.array(state.stamps), np.array(act.stamps), cam_t, str(bag))
    instr = data.get(m.instruction_topic)
    if instr is not None and instr.values:
        k = np.maximum(np.searchsorted(np.asarray(instr.stamps, dtype=np.int64), fr.times, side="right") - 1, 0)
        tasks = [instr.values[i] for i in k]
    elif m.instruction:
        tasks = [m.instruction] * len(fr.times)
    else:
        raise ConfigError(
            f"no instruction: the bag has no {m.instruction_topic or 'instruction topic'} messages; "
            "set `instruction` in the --map file",
            str(bag),
        )
    return Episode(
        bag=bag,
        start_ns=int(fr.times[0]),
        state=q[fr.state].astype(np.float32),
        action=a[fr.action].astype(np.float32),
        images={name: [cams[name].values[i] for i in idx] for name, idx in fr.cameras.items()},
        tasks=tasks,
        clocks={topic: td.clock for topic, td in data.items()},
    )


def bag_to_dataset(
    bags: Path | list[Path],
    out: Path,
    map_path: Path | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Convert rosbag2 bags (one episode each) into one LeRobotDataset v3 at ``out``; returns a summary.

    ``bags``: bag folders and/or folders of bag folders. ``out`` must be new, empty, or an earlier
    ``bag2lerobot`` output with ``overwrite``.
    """
    m = load_map(map_path)
    paths = find_bags(list(bags) if isinstance(bags, list | tuple) else [Path(bags)])
    infos = [bagio.bag_info(p) for p in paths]
    rate = decide_rate(m, infos)
    first = read_episode(infos[0], m, rate.fps)
    sizes = {name: imgs[0].shape[:2] for name, imgs in first.images.items()}
    feats = features_for(m.joints, m.action_names, sizes)
    starts, frames, tasks = [], [], []
    with create_dataset(out, rate.fps, feats, m.robot, verb="bag2lerobot", overwrite=overwrite) as ds:
        for e in progress_iter(len(paths), "bag2lerobot", progress):
            ep = first if e == 0 else read_episode(infos[e], m, rate.fps)
            for name, imgs in ep.images.items():
                if imgs[0].shape[:2] != sizes[name]:
                    raise UserError(
                        f"camera {name} is {imgs[0].shape[1]}×{imgs[0].shape[0]} here, "
                        f"{sizes[name][1]}×{sizes[name][0]} in {paths[0]} (one dataset, one image size)",
                        str(ep.bag),
                    )
            for k in range(len(ep.tasks)):
                frame = {STATE: ep.state[k], ACTION: ep.action[k], "task": ep.tasks[k]}
                for name, imgs in ep.images.items():
                    frame[IMAGE_PREFIX + name] = imgs[k]
                ds.add_frame(frame)
            ds.save_episode()
            starts.append(ep.start_ns / 1e9)
            frames.append(len(ep.tasks))
            tasks += [t for t in dict.fromkeys(ep.tasks) if t not in tasks]
    write_sidecar(
        out,
        {
            "robot": m.robot,
            "source": [str(p) for p in paths],
            "control_rate_hz": rate.measured_hz or rate.fps,
            "fps_source": rate.source,
            "joints": {"names": m.joints},
            "action": {"meaning": "joint position command", "names": m.action_names},
            "cameras": {k: list(v) for k, v in sizes.items()},
            "episode_start_s": starts,
            "stamps": first.clocks,
            "bag_map": m.to_yaml(),
        },
    )
    return {
        "dataset": str(out),
        "episodes": len(paths),
        "frames": sum(frames),
        "fps": rate.fps,
        "fps_source": rate.source,
        "instructions": tasks,
        "robot": m.robot,
    }


# ------------------------------------------------------------------------------------ dataset → bags
def _task_names(ds: Any) -> dict[int, str]:
    """``task_index`` → instruction, from LeRobot's task table."""
    tasks = ds.meta.tasks
    return {int(row["task_index"]): str(name) for name, row in tasks.iterrows()}


def _image(sub: Any, ds: Any, key: str, j: int, i: int) -> np.ndarray:
    """Frame ``j`` of the episode's image column ``key`` as rgb uint8 (stored images as they are; videos decoded)."""
    if ds.meta.features[key]["dtype"] == "video":
        return (ds[i][key].permute(1, 2, 0).numpy() * 255.0).round().astype(np.uint8)
    return np.asarray(sub[j][key].convert("RGB"), dtype=np.uint8)


def _publish(staged: Path, out: Path, overwrite: bool) -> None:
    """Move the finished bag folder into place under the output-folder rule (:mod:`embodied_ws.core.outputs`)."""
    from embodied_ws.core.outputs import claim, replace_folder, write_marker

    write_marker(staged, "lerobot2bag")
    claim(out, "lerobot2bag", overwrite)  # still ours: nothing appeared there while we wrote
    replace_folder(staged, out)


def dataset_to_bag(
    root: Path, out: Path, map_path: Path | None = None, progress: bool = True, overwrite: bool = False
) -> dict[str, Any]:
    """Write each episode of a LeRobotDataset v3 to its own rosbag2 (MCAP) in the folder ``out``; returns a summary.

    ``out`` must be new, empty, or an earlier ``lerobot2bag`` output with ``overwrite``; it appears only complete.
    """
    from embodied_ws.core.outputs import claim

    ds = open_dataset(root)
    side = read_sidecar(root)
    m = load_map(map_path) if map_path else parse_map(side.get("bag_map") or _default_map(ds, side), str(root))
    names = list(ds.meta.features[STATE]["names"] or m.joints)
    starts = list(side.get("episode_start_s") or [])
    cams = [k for k in ds.meta.features if k.startswith(IMAGE_PREFIX)]
    instr_topic = m.instruction_topic or INSTRUCTION_TOPIC
    task_names = _task_names(ds)
    table = ds.hf_dataset.with_format(None)
    ep_index = np.asarray(table["episode_index"])
    episodes = [int(e) for e in np.unique(ep_index)]
    custom = {"embodied_ws.robot": str(side.get("robot") or ds.meta.robot_type), "embodied_ws.fps": str(ds.fps),
              "embodied_ws.dataset": str(root)}  # fmt: skip
    if side.get("control_rate_hz"):
        custom["embodied_ws.control_rate_hz"] = str(side["control_rate_hz"])
    claim(out, "lerobot2bag", overwrite)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    next_start, frames = 0, 0
    try:
        for n in progress_iter(len(episodes), "lerobot2bag", progress):
            ep = episodes[n]
            idx = np.flatnonzero(ep_index == ep)
            sub = table.select(idx.tolist())
            t0 = round(starts[ep] * NS) if ep < len(starts) else next_start
            times = frame_time_ns(t0, np.asarray(sub["frame_index"]), ds.fps)
            state, action = np.asarray(sub[STATE], np.float64), np.asarray(sub[ACTION], np.float64)
            tasks = [task_names[int(t)] for t in sub["task_index"]]
            name = f"episode_{ep:06d}"
            with ContractWriter(staged / name, {**custom, "embodied_ws.episode_index": str(ep)}) as w:
                for j, i in enumerate(idx):
                    t = int(times[j])
                    if j == 0 or tasks[j] != tasks[j - 1]:
                        w.string(instr_topic, t, tasks[j])
                    w.joint_state(m.state_topic, t, names, state[j])
                    w.float_array(m.action_topic, t, action[j])
                    for key in cams:
                        cam = key[len(IMAGE_PREFIX) :]
                        w.image(m.cameras.get(cam, f"/{cam}/image_raw"), t, _image(sub, ds, key, j, int(i)), cam)
            frames += len(idx)
            next_start = int(times[-1]) + round(NS / ds.fps) + EPISODE_GAP_NS
        _publish(staged, out, overwrite)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return {
        "bags": str(out),
        "layout": f"one rosbag2 per episode: {os.path.join(str(out), 'episode_000000')} ...",
        "episodes": len(episodes),
        "frames": frames,
        "fps": ds.fps,
    }


def _default_map(ds: Any, side: dict[str, Any]) -> dict[str, Any]:
    """A mapping for a dataset not made from a bag: the contract topics, cameras under ``/<name>/image_raw``."""
    cams = [k[len(IMAGE_PREFIX) :] for k in ds.meta.features if k.startswith(IMAGE_PREFIX)]
    joints = list(ds.meta.features[STATE]["names"])
    return {
        "robot": side.get("robot", ds.meta.robot_type),
        "fps": ds.fps,
        "instruction_topic": INSTRUCTION_TOPIC,
        "state": {"topic": "/joint_states", "joints": joints},
        "action": {"topic": "/joint_group_position_controller/commands", "names": ds.meta.features[ACTION]["names"]},
        "cameras": {c: "/camera/image_raw" if len(cams) == 1 else f"/{c}/image_raw" for c in cams},
    }

"""Helpers for the VLA tests: a tiny local SmolVLM backbone and small LeRobot datasets built on the spot (no hub)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from embodied_ws.config.loader import load_config
from embodied_ws.config.schema import RunConfig
from embodied_ws.data.dataset import create_dataset, features_for, write_sidecar
from embodied_ws.vla.tiny import build_tiny_backbone

JOINTS = ["base_yaw", "shoulder", "elbow"]
IMAGE = 32


def tiny_backbone(folder: Path) -> Path:
    """A SmolVLM small enough for CPU tests (the bench uses the ≥ 10 M-parameter default)."""
    return build_tiny_backbone(
        folder, image_size=IMAGE, text_hidden=128, text_layers=2, vision_hidden=64, vision_layers=1
    )


def tiny_config(vlm: Path, **vla: object) -> RunConfig:
    """The ``vla`` preset with the tiny backbone, small chunks and batches."""
    sets = [
        f"vla.vlm_model_name={vlm}",
        "vla.load_vlm_weights=false",
        f"vla.image_size=[{IMAGE}, {IMAGE}]",
        "vla.chunk_size=8",
        "vla.n_action_steps=4",
        "vla.batch_size=4",
        "vla.lora_rank=4",
        "vla.lora_alpha=8",
        "vla.lora_dropout=0.0",
        "vla.learning_rate=0.001",
        "vla.eval_episodes=0",
        "vla.checkpoint_every=0",
    ]
    sets += [f"vla.{k}={v}" for k, v in vla.items()]
    return load_config("vla", sets)


def make_dataset(
    root: Path,
    episodes: int = 2,
    length: int = 30,
    fps: int = 25,
    joints: list[str] | None = None,
    states: Callable[[int, int], np.ndarray] | None = None,
    actions: Callable[[int, int, np.ndarray], np.ndarray] | None = None,
    robot: str = "arm3",
    image: int = IMAGE,
    video: bool = False,
) -> Path:
    """A LeRobotDataset v3 written with LeRobot's writer: smooth joint paths, action = next state, images
    whose colour follows the state (so the data is learnable). ``states``/``actions`` override per frame;
    ``video``: images stored as mp4."""
    joints = joints or JOINTS
    feats = features_for(joints, joints, {"overview": (image, image)}, video=video)
    with create_dataset(root, fps, feats, robot, video=video) as ds:
        for ep in range(episodes):
            for k in range(length):
                q = states(ep, k) if states else 0.3 * np.sin(0.1 * k + ep + np.arange(len(joints)))
                a = actions(ep, k, q) if actions else 0.3 * np.sin(0.1 * (k + 1) + ep + np.arange(len(joints)))
                img = np.zeros((image, image, 3), dtype=np.uint8)
                img[..., 0] = int(127 + 100 * q[0])
                img[: image // 2, :, 1] = 50 * ep
                ds.add_frame(
                    {
                        "observation.state": np.asarray(q, dtype=np.float32),
                        "action": np.asarray(a, dtype=np.float32),
                        "observation.images.overview": img,
                        "task": f"touch the {('red', 'green', 'blue')[ep % 3]} ball",
                    }
                )
            ds.save_episode()
    write_sidecar(root, {"robot": robot, "joints": {"names": joints}})
    return root


def set_values(path: Path, column: str, rows: list[int], entry: int, value: float) -> None:
    """Write ``value`` into entry ``entry`` of the list column ``column`` at ``rows`` of a LeRobot parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    a = np.stack(table.column(column).to_numpy(zero_copy_only=False)).astype(np.float32)
    a[rows, entry] = value
    arr = pa.FixedSizeListArray.from_arrays(pa.array(a.reshape(-1)), a.shape[1])
    table = table.set_column(table.schema.get_field_index(column), table.schema.field(column), arr)
    pq.write_table(table, path)


def row_of(path: Path, episode: int, frame: int) -> int:
    """Row of ``(episode, frame)`` in a LeRobot parquet file."""
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["episode_index", "frame_index"])
    ep, fr = t.column("episode_index").to_numpy(), t.column("frame_index").to_numpy()
    return int(np.flatnonzero((ep == episode) & (fr == frame))[0])

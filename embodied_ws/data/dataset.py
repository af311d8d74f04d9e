"""LeRobotDataset v3 glue: feature layout, atomic creation, opening with one-line errors, our sidecar metadata.

Datasets are written and read with LeRobot's own classes (``LeRobotDataset.create`` / ``add_frame`` /
``save_episode`` / ``finalize``); this module only decides the layout and adds ``meta/embodied_ws.json``
(robot, joint names and limits, control rate, what the action means, episode start stamps) so checks,
fine-tuning and ``lerobot2bag`` know where the data came from. LeRobot ignores the extra file.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from embodied_ws.core.atomic import write_json_atomic
from embodied_ws.core.errors import UserError
from embodied_ws.core.outputs import claim, replace_folder, write_marker

SIDECAR = Path("meta") / "embodied_ws.json"
STATE = "observation.state"
ACTION = "action"
IMAGE_PREFIX = "observation.images."


def features_for(
    joint_names: list[str], action_names: list[str], cameras: dict[str, tuple[int, int]], video: bool = False
) -> dict[str, dict[str, Any]]:
    """LeRobot feature spec: joint-position state, joint-command action, one rgb image per camera.

    :param joint_names: names of the state entries (joint positions, rad or m)
    :param action_names: names of the action entries (position commands per actuator)
    :param cameras: camera name → (height, width)
    :param video: store images as mp4 (``video``) instead of per-frame images
    """
    feats: dict[str, dict[str, Any]] = {
        STATE: {"dtype": "float32", "shape": (len(joint_names),), "names": list(joint_names)},
        ACTION: {"dtype": "float32", "shape": (len(action_names),), "names": list(action_names)},
    }
    for cam, (h, w) in cameras.items():
        feats[IMAGE_PREFIX + cam] = {
            "dtype": "video" if video else "image",
            "shape": (h, w, 3),
            "names": ["height", "width", "channels"],
        }
    return feats


def _quiet() -> None:
    """Silence the ``datasets`` library's per-call "Map" bars (our own rich bar shows progress)."""
    import datasets

    datasets.disable_progress_bars()


@contextmanager
def create_dataset(
    out: Path,
    fps: int,
    features: dict[str, dict[str, Any]],
    robot_type: str,
    video: bool = False,
    verb: str = "record-demos",
    overwrite: bool = False,
) -> Iterator[Any]:
    """Create a LeRobotDataset that appears at ``out`` only once complete (written beside it, then renamed).

    Yields the writable ``LeRobotDataset``; on success it is finalized, marked as ``verb``'s and moved to
    ``out``; on error the partial folder is removed. ``out`` must be new, empty, or an earlier output of
    ``verb`` with ``overwrite`` (:func:`embodied_ws.core.outputs.claim`): a folder that is not ours is
    refused before anything is written and never deleted.
    """
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    _quiet()
    out = Path(out)
    claim(out, verb, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    parent = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    root = parent / "dataset"
    try:
        ds = LeRobotDataset.create(
            repo_id=f"local/{out.name}", fps=fps, features=features, root=root, robot_type=robot_type, use_videos=video
        )
        yield ds
        ds.finalize()
        write_marker(root, verb)
        claim(out, verb, overwrite)  # still ours: nothing appeared there while we wrote
        replace_folder(root, out)
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def write_sidecar(root: Path, meta: dict[str, Any]) -> None:
    """Write our metadata next to LeRobot's (``meta/embodied_ws.json``)."""
    write_json_atomic(Path(root) / SIDECAR, meta)


#: config sections a dataset recorded in sim keeps (``finetune``/``vla check`` rebuild the env from them)
RECORDED_SECTIONS = ("env", "task")


def recorded_config(cfg: Any) -> dict[str, Any]:
    """The ``env`` and ``task`` sections of the run config the demos were recorded with (plain dicts); a
    robot given as a file path is stored absolute, so the dataset works from any folder."""
    from embodied_ws.config.loader import to_dict

    out = {k: v for k, v in to_dict(cfg).items() if k in RECORDED_SECTIONS}
    robot = Path(str(out["env"]["robot"]))
    if robot.suffix and robot.is_file():
        out["env"]["robot"] = str(robot.resolve())
    return out


def recorded_sets(root: Path) -> list[str]:
    """``key=value`` overrides that rebuild the env a dataset was recorded in (from its sidecar's ``config``;
    none for a dataset recorded elsewhere), to go before the user's own ``--set``."""
    config = read_sidecar(root).get("config")
    if not isinstance(config, dict):
        return []
    sets = []
    for section in RECORDED_SECTIONS:
        for key, value in (config.get(section) or {}).items():
            sets.append(f"{section}.{key}={json.dumps(value)}")
    return sets


def read_sidecar(root: Path) -> dict[str, Any]:
    """Our metadata of a dataset, or ``{}`` for a dataset written by someone else."""
    p = Path(root) / SIDECAR
    return json.loads(p.read_text()) if p.is_file() else {}


def check_is_dataset(root: Path) -> Path:
    """``root`` if it holds a LeRobotDataset v3, else a one-line :class:`UserError`."""
    root = Path(root)
    info = root / "meta" / "info.json"
    if not root.is_dir():
        raise UserError("dataset folder not found", str(root))
    if not info.is_file():
        raise UserError(
            "not a LeRobotDataset (no meta/info.json); record one with `embodied-ws record-demos`", str(root)
        )
    try:
        version = json.loads(info.read_text()).get("codebase_version", "")
    except json.JSONDecodeError as exc:
        raise UserError(f"invalid JSON: {exc}", str(info)) from None
    if not str(version).startswith("v3"):
        raise UserError(
            f"dataset format {version or 'unknown'} is not LeRobotDataset v3 (convert it with LeRobot)", str(info)
        )
    return root


def open_dataset(root: Path, **kwargs: Any) -> Any:
    """Open a local LeRobotDataset v3 with LeRobot's class (no hub access); bad folders give one line."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = check_is_dataset(root)
    _quiet()
    try:
        return LeRobotDataset(repo_id=f"local/{root.name}", root=root, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"cannot read dataset: {str(exc).splitlines()[0]}", str(root)) from None


def episode_frames(ds: Any, episode: int, columns: list[str]) -> dict[str, Any]:
    """Columns of one episode as numpy arrays (from the parquet table, images not decoded)."""
    import numpy as np

    table = ds.hf_dataset.with_format(None)
    ep = np.asarray(table["episode_index"])
    idx = np.flatnonzero(ep == episode)
    sub = table.select(idx.tolist())
    return {c: np.asarray(sub[c]) for c in columns}


def progress_iter(n: int, description: str, enabled: bool) -> Iterable[int]:
    """``range(n)`` over episodes with progress (a bar on a terminal, plain lines otherwise; none when disabled)."""
    from embodied_ws.core.progress import track

    return track(n, description, "episodes", enabled=enabled)

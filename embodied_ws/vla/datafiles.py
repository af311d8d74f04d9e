"""The files of a local LeRobotDataset, checked before LeRobot opens them; LeRobot kept off the hub.

LeRobot takes a missing file of a local dataset for "not downloaded yet" and asks the Hugging Face hub
for it (a network call, then a traceback). Here every file the episodes point at is checked first: the
``meta/`` files, each episode's parquet file (present, a readable parquet, the rows ``meta/episodes``
promises) and each episode's video (present, opens, long enough for the episode). Each problem is one
:class:`~embodied_ws.vla.checks.Finding` naming the file. :func:`open_local` then opens the dataset with
the hub switched off (``HF_HUB_OFFLINE``), so nothing LeRobot does can reach the network.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from embodied_ws.core.errors import UserError
from embodied_ws.data.dataset import check_is_dataset, open_dataset
from embodied_ws.vla.checks import Finding

EPISODES_GLOB = "meta/episodes/*/*.parquet"
RERECORD = "re-copy the dataset (or re-record it); `embodied-ws vla check` again"


@contextmanager
def hub_offline() -> Iterator[None]:
    """Inside: every request to the Hugging Face hub fails at once (``HF_HUB_OFFLINE=1``), restored after."""
    from huggingface_hub import constants

    old_env, old_flag = os.environ.get("HF_HUB_OFFLINE"), constants.HF_HUB_OFFLINE
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True  # huggingface_hub reads the variable once, at import
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = old_flag
        if old_env is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old_env


def _finding(path: Path, what: str, fix: str = RERECORD) -> Finding:
    return Finding("files", str(path), what, fix)


def _episodes(root: Path) -> tuple[list[dict[str, Any]], list[Finding]]:
    """Rows of ``meta/episodes`` (one dict per episode), or the findings that prevent reading them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(root.glob(EPISODES_GLOB))
    if not files:
        return [], [_finding(root / "meta" / "episodes", "missing (no episode index)")]
    rows: list[dict[str, Any]] = []
    for f in files:
        try:
            rows += pq.read_table(f).to_pylist()
        except (pa.ArrowException, OSError) as exc:
            return [], [_finding(f, f"not a readable parquet file ({str(exc).splitlines()[0]})")]
    return sorted(rows, key=lambda r: int(r["episode_index"])), []


def _episode_list(eps: list[int]) -> str:
    return f"episode {eps[0]}" if len(eps) == 1 else f"episodes {eps[0]}-{eps[-1]}"


def _check_parquet(path: Path, eps: list[dict[str, Any]]) -> Finding | None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [int(e["episode_index"]) for e in eps]
    if not path.is_file():
        return _finding(path, f"missing ({_episode_list(names)} are stored there)")
    try:
        rows = pq.read_metadata(path).num_rows
    except (pa.ArrowException, OSError) as exc:
        return _finding(path, f"not a readable parquet file, truncated? ({str(exc).splitlines()[0]})")
    want = sum(int(e["length"]) for e in eps)
    if rows < want:
        return _finding(path, f"holds {rows} frames, meta/episodes puts {want} there ({_episode_list(names)})")
    return None


def video_end_s(path: Path) -> float:
    """Seconds of intact video in ``path``: the end of its last packet before the first corrupt one (demuxed,
    not decoded; a file cut short ends early or in a corrupt packet).

    :raises UserError: the file does not open as a video
    """
    import av
    import av.logging

    try:
        with av.logging.Capture(), av.open(str(path)) as container:  # libav's own messages are not ours to print
            if not container.streams.video:
                raise UserError("no video stream", str(path))
            stream = container.streams.video[0]
            end = 0.0
            for packet in container.demux(stream):
                if packet.is_corrupt:
                    break
                if packet.pts is not None and packet.time_base is not None:
                    end = max(end, float((packet.pts + (packet.duration or 0)) * packet.time_base))
            return end
    except av.FFmpegError as exc:
        raise UserError(f"cannot read video ({str(exc).splitlines()[0]})", str(path)) from None


def _check_video(path: Path, eps: list[dict[str, Any]], key: str, fps: float) -> Finding | None:
    names = [int(e["episode_index"]) for e in eps]
    if not path.is_file():
        return _finding(path, f"missing ({key}, {_episode_list(names)})")
    try:
        end = video_end_s(path)
    except UserError as exc:
        return _finding(path, f"{exc.what}, truncated?")
    need = max(float(e[f"videos/{key}/to_timestamp"]) for e in eps)
    if end < need - 0.5 / fps:
        last = max(eps, key=lambda e: float(e[f"videos/{key}/to_timestamp"]))
        return _finding(
            path,
            f"video ends at {end:.2f} s, episode {int(last['episode_index'])} needs it up to {need:.2f} s "
            "(truncated file?)",
        )
    return None


def verify_files(root: Path) -> list[Finding]:
    """Every file the dataset's episodes need: present and readable (one finding per bad file).

    :raises UserError: ``root`` is not a LeRobotDataset v3 folder
    """
    root = check_is_dataset(Path(root))
    info = json.loads((root / "meta" / "info.json").read_text())
    out: list[Finding] = []
    if int(info.get("total_tasks", 0)) > 0 and not (root / "meta" / "tasks.parquet").is_file():
        out.append(_finding(root / "meta" / "tasks.parquet", "missing (the task of each frame)"))
    eps, bad = _episodes(root)
    if bad or not eps:
        return out + bad
    groups: dict[Path, list[dict[str, Any]]] = {}
    for e in eps:
        rel = info["data_path"].format(chunk_index=e["data/chunk_index"], file_index=e["data/file_index"])
        groups.setdefault(root / rel, []).append(e)
    out += [f for path, g in groups.items() if (f := _check_parquet(path, g))]
    for key, feat in info.get("features", {}).items():
        if feat.get("dtype") != "video":
            continue
        videos: dict[Path, list[dict[str, Any]]] = {}
        for e in eps:
            rel = info["video_path"].format(
                video_key=key, chunk_index=e[f"videos/{key}/chunk_index"], file_index=e[f"videos/{key}/file_index"]
            )
            videos.setdefault(root / rel, []).append(e)
        out += [f for path, g in videos.items() if (f := _check_video(path, g, key, float(info["fps"])))]
    return out


def raise_first(findings: list[Finding]) -> None:
    """Print all but the last finding on stderr, raise the last as a :class:`UserError` (none: return)."""
    import sys

    if not findings:
        return
    for f in findings[:-1]:
        print(f.line(), file=sys.stderr)
    raise UserError(f"{findings[-1].what}; fix: {findings[-1].fix}", findings[-1].where)


def open_local(root: Path, **kwargs: Any) -> Any:
    """Open a local LeRobotDataset whose files were verified, with the hub switched off.

    :raises UserError: a missing or broken file (see :func:`verify_files`), or LeRobot cannot read it
    """
    raise_first(verify_files(root))
    with hub_offline():
        return open_dataset(root, **kwargs)

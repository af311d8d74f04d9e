"""What an evaluation leaves in a run folder: ``eval/metrics.json`` and ``eval/rollout.mp4``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.core.atomic import write_json_atomic
from embodied_ws.core.outputs import make_folder


def write_eval(run_dir: Path, metrics: dict[str, Any], frames: list[np.ndarray], fps: float) -> None:
    """Write ``run_dir/eval/``: ``metrics.json`` and, when there are frames, ``rollout.mp4`` (named in ``metrics``).

    :param run_dir: the run folder
    :param metrics: the evaluation's metrics (gets ``video`` when there are frames)
    :param frames: rgb frames of the recorded episodes (none: no video)
    :param fps: the video's frame rate
    """
    out = run_dir / "eval"
    make_folder(out, "eval")  # marked as ours: `eval` replaces it only with --overwrite
    if frames:
        import imageio.v3 as iio

        tmp = out / ".rollout.mp4"
        iio.imwrite(tmp, np.stack(frames), fps=fps, codec="libx264")
        tmp.replace(out / "rollout.mp4")
        metrics["video"] = str(out / "rollout.mp4")
    write_json_atomic(out / "metrics.json", metrics)

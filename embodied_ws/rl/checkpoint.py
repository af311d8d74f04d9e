"""Checkpoints with full training state, written atomically; resume from the latest complete one.

Layout: ``runs/<name>/checkpoints/step_<N>/`` holding ``model.zip`` (SB3: weights + optimizer),
``vecnormalize.pkl`` (observation statistics), ``rng.pt`` (torch/numpy global RNG) and
``state.json`` (step count, env RNG + DR/curriculum state). ``checkpoints/latest`` is a relative symlink
to the newest complete folder (so ``checkpoints/latest/model.zip`` works), replaced atomically after the
folder is in place. Runs written before it was a symlink hold a text file naming the folder; both are read.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.core.atomic import write_dir_atomic
from embodied_ws.core.errors import UserError

FILES = ("model.zip", "state.json", "rng.pt")


def save_checkpoint(ckpt_root: Path, model: Any, venv: Any, extra: dict[str, Any], keep: int = 3) -> Path:
    """Save ``model`` (SB3 algorithm), the VecNormalize wrapper (if any) and ``extra`` state atomically.

    :param ckpt_root: the run's ``checkpoints/`` folder
    :param keep: how many of the newest checkpoints to keep (0: all)
    """
    import torch
    from stable_baselines3.common.vec_env import VecNormalize

    step = int(model.num_timesteps)
    name = f"step_{step:010d}"

    def fill(tmp: Path) -> None:
        model.save(tmp / "model.zip")
        if isinstance(venv, VecNormalize):
            venv.save(str(tmp / "vecnormalize.pkl"))
        rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
        torch.save(rng, tmp / "rng.pt")
        (tmp / "state.json").write_text(json.dumps({"num_timesteps": step, **extra}))

    path = ckpt_root / name
    write_dir_atomic(path, fill)
    point_latest(ckpt_root, name)
    if keep:
        for old in sorted(p for p in ckpt_root.glob("step_*") if p.is_dir())[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return path


def point_latest(ckpt_root: Path, name: str) -> None:
    """Make ``ckpt_root/latest`` a symlink to ``name`` atomically (a new link renamed over the old one)."""
    tmp = ckpt_root / f".latest.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    os.symlink(name, tmp, target_is_directory=True)
    os.replace(tmp, ckpt_root / "latest")


def latest_checkpoint(ckpt_root: Path) -> Path | None:
    """The newest complete checkpoint folder, or None when there is none."""
    pointer = ckpt_root / "latest"
    candidates = []
    if pointer.is_symlink():
        candidates.append(ckpt_root / os.readlink(pointer))
    elif pointer.is_file():  # a run from before ``latest`` was a symlink
        candidates.append(ckpt_root / pointer.read_text().strip())
    candidates += sorted((p for p in ckpt_root.glob("step_*") if p.is_dir()), reverse=True)
    for cand in candidates:
        if all((cand / f).is_file() for f in FILES):
            return cand
    return None


def read_state(ckpt: Path) -> dict[str, Any]:
    """The ``state.json`` of a checkpoint."""
    try:
        return json.loads((ckpt / "state.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read checkpoint state: {exc}", str(ckpt / "state.json")) from None


def restore_rng(ckpt: Path) -> None:
    """Restore the global torch/numpy/python RNG states saved with a checkpoint."""
    import torch

    rng = torch.load(ckpt / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])


def load_vecnormalize(ckpt: Path, venv: Any) -> Any:
    """Wrap ``venv`` with the checkpoint's VecNormalize statistics (or return it unchanged)."""
    from stable_baselines3.common.vec_env import VecNormalize

    path = ckpt / "vecnormalize.pkl"
    if not path.is_file():
        return venv
    try:
        return VecNormalize.load(str(path), venv)
    except (pickle.UnpicklingError, EOFError) as exc:
        raise UserError(f"corrupt normalization statistics: {exc}", str(path)) from None

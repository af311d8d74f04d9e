"""What makes a resumed ``finetune`` the run it continues: the data order, the RNG states, the checkpoints.

The data order is a function of ``(seed, batch number)`` alone (:class:`EpochBatches`): epoch ``e`` is a
permutation drawn from ``seed`` and ``e``, and step ``k`` takes batch ``k``. A checkpoint records the step,
the sampler (seed, dataset size, batch size) and every RNG state (torch CPU and CUDA, numpy, Python), so a
run resumed from step ``k`` draws the batches and the noise the uninterrupted run would have.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.core.atomic import write_bytes_atomic, write_dir_atomic
from embodied_ws.core.errors import UserError


class EpochBatches:
    """Batch sampler: batch ``k`` of the run holds the same samples whichever step the run started at.

    :param num_samples: dataset length
    :param batch_size: samples per batch
    :param drop_last: leave out each epoch's last, smaller batch
    :param seed: seed of the per-epoch permutations
    :param start: the global batch number the next iteration starts at (the step to resume from)
    """

    def __init__(self, num_samples: int, batch_size: int, drop_last: bool, seed: int, start: int = 0) -> None:
        self.num_samples, self.batch_size, self.drop_last, self.seed = num_samples, batch_size, drop_last, seed
        self.start = start

    @property
    def per_epoch(self) -> int:
        """Batches in one epoch."""
        full, rest = divmod(self.num_samples, self.batch_size)
        return full if self.drop_last or not rest else full + 1

    def batch(self, k: int) -> list[int]:
        """Dataset indices of global batch ``k``."""
        epoch, pos = divmod(k, self.per_epoch)
        order = np.random.default_rng([self.seed, epoch]).permutation(self.num_samples)
        return order[pos * self.batch_size : (pos + 1) * self.batch_size].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        """Batches from ``start`` on, without end (the training loop stops after its last step)."""
        k = self.start
        while True:
            yield self.batch(k)
            k += 1

    def __len__(self) -> int:
        return self.per_epoch

    def state(self) -> dict[str, Any]:
        """What a checkpoint records to continue the same order."""
        return {"seed": self.seed, "num_samples": self.num_samples, "batch_size": self.batch_size}


def rng_state() -> dict[str, Any]:
    """Every RNG a training step may draw from: torch (CPU, each CUDA device), numpy, Python."""
    import torch

    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state` (checkpoints of older runs hold the torch CPU state alone)."""
    import torch

    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        np.random.set_state(state["numpy"])
    if "python" in state:
        random.setstate(state["python"])


def save_checkpoint(ckpt_root: Path, step: int, model: Any, optim: Any, sampler: EpochBatches) -> Path:
    """``ckpt_root/step_N``: trainable weights, optimizer, RNG states, step and sampler state; atomic."""
    import torch
    from safetensors.torch import save_file

    trainable = {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}

    def fill(tmp: Path) -> None:
        save_file(trainable, str(tmp / "trainable.safetensors"))
        torch.save({"optimizer": optim.state_dict(), "rng": rng_state()}, tmp / "optimizer.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, "sampler": sampler.state()}))

    path = ckpt_root / f"step_{step}"
    write_dir_atomic(path, fill)
    write_bytes_atomic(ckpt_root / "latest", path.name.encode())
    return path


def load_checkpoint(ckpt_root: Path, model: Any, optim: Any, sampler: EpochBatches) -> int:
    """Restore the latest checkpoint into ``model``/``optim``/the RNGs; returns its step (``sampler`` starts there).

    :raises UserError: no checkpoint, another model, or another dataset or batch size than the run's
    """
    import torch
    from safetensors.torch import load_file

    latest = ckpt_root / "latest"
    if not latest.is_file():
        raise UserError("no checkpoint to resume from", str(ckpt_root))
    path = ckpt_root / latest.read_text().strip()
    weights = load_file(str(path / "trainable.safetensors"))
    missing = set(weights) - {n for n, _ in model.named_parameters()}
    if missing:
        raise UserError(f"checkpoint does not match the model ({sorted(missing)[0]})", str(path))
    info = json.loads((path / "state.json").read_text())
    saved = info.get("sampler")
    if saved and (saved["num_samples"], saved["batch_size"]) != (sampler.num_samples, sampler.batch_size):
        raise UserError(
            f"the run was trained on {saved['num_samples']} samples in batches of {saved['batch_size']}, "
            f"now {sampler.num_samples} in batches of {sampler.batch_size}: the data order cannot continue "
            "(resume with the run's dataset and vla.batch_size, or start another --name)",
            str(path),
        )
    model.load_state_dict(weights, strict=False)
    state = torch.load(path / "optimizer.pt", weights_only=False)
    optim.load_state_dict(state["optimizer"])
    set_rng_state(state["rng"] if isinstance(state["rng"], dict) else {"torch": state["rng"]})
    if saved:
        sampler.seed = int(saved["seed"])
    sampler.start = int(info["step"])
    return sampler.start


def keep_metrics_until(path: Path, step: int) -> None:
    """Drop the lines of steps after ``step`` from ``metrics.jsonl`` (a killed run logged past its checkpoint;
    those steps are trained again). A last line cut off by the kill is dropped too."""
    if not path.is_file():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            if int(json.loads(line)["step"]) <= step:
                keep.append(line + "\n")
        except (ValueError, KeyError, TypeError):  # a line cut off by a kill
            continue
    write_bytes_atomic(path, "".join(keep).encode())

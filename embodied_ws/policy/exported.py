"""Run an exported policy (safetensors + JSON) with numpy only: no pickle, no SB3, no torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.core.errors import UserError

_ACT = {"tanh": np.tanh, "relu": lambda x: np.maximum(x, 0.0), "elu": lambda x: np.where(x > 0, x, np.expm1(x))}


class ExportedPolicy:
    """A deterministic MLP policy loaded from ``policy/``.

    :param folder: folder with ``policy.safetensors`` and ``policy.json``
    """

    def __init__(self, folder: str | Path) -> None:
        from safetensors.numpy import load_file

        folder = Path(folder)
        meta_path, weights_path = folder / "policy.json", folder / "policy.safetensors"
        for p in (meta_path, weights_path):
            if not p.is_file():
                raise UserError("policy file missing (export a run with `embodied-ws train`)", str(p))
        try:
            self.meta: dict[str, Any] = json.loads(meta_path.read_text())
        except json.JSONDecodeError as exc:
            raise UserError(f"invalid JSON: {exc}", str(meta_path)) from None
        t = load_file(str(weights_path))
        net = self.meta["network"]
        self.layers = [(t[f"layers.{i}.weight"], t[f"layers.{i}.bias"]) for i in range(net["n_layers"])]
        self.obs_mean, self.obs_std = t["obs_mean"], np.sqrt(t["obs_var"] + net["epsilon"])
        self.normalize = bool(net["normalize_obs"])
        self.clip_obs = float(net["clip_obs"])
        self.activation = _ACT[net["activation"]]

    def reset(self) -> None:
        """Nothing to forget: the MLP is stateless (part of the :class:`~embodied_ws.policy.protocol.Policy`
        protocol)."""

    @property
    def obs_size(self) -> int:
        """Expected observation length."""
        return int(self.meta["observation"]["size"])

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic actions in [-1, 1] for a batch ``(n, obs)`` or a single observation."""
        x = np.asarray(obs, dtype=np.float32)
        if self.normalize:
            x = np.clip((x - self.obs_mean) / self.obs_std, -self.clip_obs, self.clip_obs)
        for i, (w, b) in enumerate(self.layers):
            x = x @ w.T + b
            if i < len(self.layers) - 1:
                x = self.activation(x)
        return np.clip(x, -1.0, 1.0)

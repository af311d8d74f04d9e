"""PNG figures of the gap report (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=90)
    _plt().close(fig)
    tmp.replace(path)


def plot_joints(path: Path, sim: Any, real: Any, joints: list[str], episodes: int = 3) -> None:
    """Joint positions of the first ``episodes`` episodes, sim vs real, one row per joint."""
    plt = _plt()
    n = len(joints)
    fig, axes = plt.subplots(n, 1, figsize=(10, 2.2 * n), sharex=True, squeeze=False)
    offset = 0
    for e in range(min(episodes, len(sim.q), len(real.q))):
        a, b = sim.q[e], real.q[e]
        for j in range(n):
            ax = axes[j, 0]
            ax.plot(offset + np.arange(len(a)), a[:, j], color="tab:blue", lw=1.2, label=sim.name if e == 0 else None)
            ax.plot(offset + np.arange(len(b)), b[:, j], color="tab:red", lw=1.2, label=real.name if e == 0 else None)
            ax.axvline(offset, color="0.7", lw=0.8)
        offset += max(len(a), len(b))
    for j, name in enumerate(joints):
        axes[j, 0].set_ylabel(f"{name} [rad]")
        axes[j, 0].grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[0, 0].set_title("joint trajectories, same episodes (grey lines: episode starts)")
    axes[-1, 0].set_xlabel("control step")
    fig.tight_layout()
    _save(fig, path)


def plot_metrics(path: Path, result: dict[str, Any]) -> None:
    """Success rate and tracking error, sim vs real, as bars."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    for ax, key, label in (
        (axes[0], "success_rate", "success rate"),
        (axes[1], "tracking_error_rad", "tracking error [rad]"),
    ):
        values = [result["sim"].get(key, np.nan), result["real"].get(key, np.nan)]
        ax.bar(["sim", "real"], values, color=["tab:blue", "tab:red"])
        ax.set_title(label)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    _save(fig, path)

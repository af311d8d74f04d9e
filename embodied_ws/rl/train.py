"""The training pipeline behind ``embodied-ws train``: envs → SB3 PPO → checkpoints, eval, export, report.

The run itself (envs, model, state, learn/save/load) is :class:`embodied_ws.rl.run.TrainingRun`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embodied_ws.config.schema import RunConfig
from embodied_ws.rl.run import TrainingRun


def train(
    cfg: RunConfig,
    name: str,
    runs_root: Path = Path("runs"),
    resume: bool = False,
    progress: bool = True,
    extra_callbacks: list[Any] | None = None,
) -> dict[str, Any]:
    """Train PPO as configured; returns the run summary (also in ``runs/<name>/summary.json``).

    :param cfg: resolved run configuration
    :param name: run name (folder under ``runs_root``)
    :param runs_root: folder of runs
    :param resume: continue from the run's latest checkpoint
    :param progress: show a rich progress bar
    :param extra_callbacks: more SB3 callbacks (the trainer node's progress and service hooks)
    """
    with TrainingRun(cfg, name, runs_root, resume=resume, progress=progress) as run:
        interrupted = run.learn(extra_callbacks)
        return run.finish(interrupted)

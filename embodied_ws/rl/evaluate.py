"""``embodied-ws eval RUN``: run the exported policy in sim (DR as trained), write metrics.json and an mp4."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.errors import UserError
from embodied_ws.policy.evaluation import write_eval
from embodied_ws.policy.exported import ExportedPolicy
from embodied_ws.policy.rollout import rollout
from embodied_ws.rl.vec import success_interval


def evaluate_run(
    run_dir: Path, episodes: int = 20, video: bool = True, seed: int = 1234, progress: bool = True
) -> dict[str, Any]:
    """Evaluate ``run_dir/policy`` for ``episodes`` episodes; returns the metrics (also in ``eval/metrics.json``).

    :param video: record the first episodes (up to 3) as ``eval/rollout.mp4``
    :param seed: episode ``i`` is reset with ``seed + i`` (its start, goal and DR draw): another seed, other
        episodes
    """
    from embodied_ws.core.progress import track
    from embodied_ws.sim.env import RobotEnv

    cfg_path = run_dir / "config.yaml"
    if not cfg_path.is_file():
        raise UserError("not a run folder (no config.yaml)", str(run_dir))
    cfg = load_config(cfg_path)
    policy = ExportedPolicy(run_dir / "policy")
    env = RobotEnv(cfg, load_dr(cfg.dr), render_mode="rgb_array" if video else None, seed=seed)
    if policy.obs_size != env.observation_space.shape[0]:
        raise UserError(
            f"policy expects {policy.obs_size} observations, env gives {env.observation_space.shape[0]}",
            str(run_dir / "policy" / "policy.json"),
        )
    frames: list[np.ndarray] = []
    returns, successes, final_dist = [], [], []
    for ep in track(episodes, "eval", "episodes", enabled=progress):
        episode = rollout(env, policy, seed + ep, render=video and ep < 3)
        frames += episode.frames
        returns.append(episode.total_return)
        successes.append(episode.success)
        if "distance" in episode.info.get("reward_terms", {}):
            final_dist.append(-episode.info["reward_terms"]["distance"] / max(cfg.task.distance_weight, 1e-9))
    metrics = {
        "episodes": episodes,
        "seed": seed,
        "success_rate": float(np.mean(successes)),
        "success_ci95": success_interval(int(np.sum(successes)), episodes),
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "dr": cfg.dr,
    }
    if final_dist:
        metrics["mean_final_distance_m"] = float(np.mean(final_dist))
    write_eval(run_dir, metrics, frames, env.metadata["render_fps"])
    env.close()
    return metrics

"""``embodied-ws eval RUN``: run the exported policy in sim (DR as trained), write metrics.json and an mp4."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.atomic import write_json_atomic
from embodied_ws.core.errors import UserError
from embodied_ws.core.outputs import make_folder
from embodied_ws.deploy.policy import ExportedPolicy


def evaluate_run(
    run_dir: Path, episodes: int = 20, video: bool = True, seed: int = 1234, progress: bool = True
) -> dict[str, Any]:
    """Evaluate ``run_dir/policy`` for ``episodes`` episodes; returns the metrics (also in ``eval/metrics.json``).

    :param video: record the first episodes (up to 3) as ``eval/rollout.mp4``
    """
    from rich.progress import track

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
    iterator = track(range(episodes), description="eval") if progress else range(episodes)
    for ep in iterator:
        obs, _ = env.reset(seed=seed + ep)
        total, done, info = 0.0, False, {}
        while not done:
            obs, r, term, trunc, info = env.step(policy.act(obs))
            total += r
            done = term or trunc
            if video and ep < 3:
                frames.append(env.render())
        returns.append(total)
        successes.append(bool(info.get("is_success", False)))
        if "distance" in info.get("reward_terms", {}):
            final_dist.append(-info["reward_terms"]["distance"] / max(cfg.task.distance_weight, 1e-9))
    metrics = {
        "episodes": episodes,
        "success_rate": float(np.mean(successes)),
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "dr": cfg.dr,
    }
    if final_dist:
        metrics["mean_final_distance_m"] = float(np.mean(final_dist))
    write_eval(run_dir, metrics, frames, env.metadata["render_fps"])
    env.close()
    return metrics


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

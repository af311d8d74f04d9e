"""Training throughput: the ``embodied-ws train`` pipeline vs a plain SB3 PPO script (one JSON object).

Both train PPO on the same env (MujocoVecEnv + VecMonitor + VecNormalize, default reach config with
DR) with the same hyperparameters and torch threads, for the same step budget, measured alternately.
The pipeline runs with its checkpoints, curriculum, time breakdown, progress bar and TensorBoard;
periodic evaluation is extra simulation work, so it is off for the ratio and reported separately.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import torch

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.rl.ppo import make_training_env, ppo_kwargs
from embodied_ws.rl.train import train


def plain_sb3(cfg) -> float:
    """fps of a bare ``PPO(...).learn()`` on the same env."""
    from stable_baselines3 import PPO

    venv, _ = make_training_env(cfg, load_dr(cfg.dr))
    model = PPO("MlpPolicy", venv, **ppo_kwargs(cfg))
    t = time.perf_counter()
    model.learn(cfg.train.total_timesteps)
    fps = model.num_timesteps / (time.perf_counter() - t)
    venv.close()
    return fps


def pipeline(cfg, root: Path, name: str) -> float:
    """fps of our pipeline's learning loop (callbacks included)."""
    summary = train(cfg, name, root, progress=True)
    return summary["time"]["env_steps_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)  # as the pipeline does on CPU
    base = [
        f"train.total_timesteps={args.steps}",
        "train.target_success=null",
        f"train.checkpoint_every={args.steps // 4}",
    ]
    cfg = load_config("reach", [*base, "train.eval_every=0"])
    cfg_eval = load_config("reach", [*base, f"train.eval_every={args.steps // 4}"])
    ours, plain, with_eval = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            plain.append(plain_sb3(cfg))
            ours.append(pipeline(cfg, Path(tmp), f"bench{i}"))
        with_eval.append(pipeline(cfg_eval, Path(tmp), "bench_eval"))
    out = {
        "steps": args.steps,
        "n_envs": cfg.train.n_envs,
        "pipeline_fps": round(max(ours), 1),
        "plain_sb3_fps": round(max(plain), 1),
        "ratio": round(max(ours) / max(plain), 3),
        "pipeline_fps_with_eval": round(max(with_eval), 1),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()

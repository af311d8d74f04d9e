"""Training throughput: the ``embodied-ws train`` pipeline vs a plain SB3 PPO script (one JSON object).

Both train PPO on the same env (MujocoVecEnv + VecMonitor + VecNormalize, default reach config with
DR) with the same hyperparameters and torch threads, for the same step budget, measured alternately.
The pipeline runs with its checkpoints, curriculum, time breakdown, progress bar and TensorBoard;
periodic evaluation is extra simulation work, so it is off for the ratio and reported separately.

``--device cuda`` measures an image policy instead (camera observation, SB3 ``MultiInputPolicy`` with its
CNN encoder): PPO updates on the GPU vs the same run on the CPU (``cuda_vs_cpu``). It runs only where torch
sees a GPU and prints ``{"skipped": "<reason>"}`` elsewhere.
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
    model = PPO(env=venv, **ppo_kwargs(cfg))
    t = time.perf_counter()
    model.learn(cfg.train.total_timesteps)
    fps = model.num_timesteps / (time.perf_counter() - t)
    venv.close()
    return fps


def pipeline(cfg, root: Path, name: str) -> float:
    """fps of our pipeline's learning loop (callbacks included)."""
    summary = train(cfg, name, root, progress=True)
    return summary["time"]["env_steps_per_s"]


def image_policy_fps(device: str, steps: int) -> dict[str, float]:
    """fps of PPO with a CNN (``MultiInputPolicy``) on the camera-observation env, and the peak GPU memory."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from embodied_ws.sim.env import RobotEnv

    cfg = load_config("reach", ["env.camera_obs=true", "env.image_size=[84,84]", "dr=none"])
    venv = DummyVecEnv([lambda: RobotEnv(cfg, seed=0)])
    model = PPO("MultiInputPolicy", venv, n_steps=256, batch_size=64, n_epochs=4, device=device, seed=0, verbose=0)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    model.learn(steps)
    fps = model.num_timesteps / (time.perf_counter() - t)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else 0.0
    venv.close()
    return {"fps": fps, "peak_mb": peak}


def image_policy_bench(device: str, steps: int) -> dict[str, object]:
    """The ``--device cuda`` measurement: the image policy on ``device`` vs on the CPU."""
    if not torch.cuda.is_available():
        return {"skipped": f"--device {device}: torch sees no CUDA GPU (torch {torch.__version__})"}
    gpu = image_policy_fps(device, steps)
    cpu = image_policy_fps("cpu", steps)
    return {
        "policy": "MultiInputPolicy (CNN, 84x84 camera)",
        "steps": steps,
        "device": device,
        "gpu_name": torch.cuda.get_device_name(0),
        "cuda_fps": round(gpu["fps"], 1),
        "cpu_fps": round(cpu["fps"], 1),
        "cuda_vs_cpu": round(gpu["fps"] / cpu["fps"], 3),
        "cuda_peak_mb": round(gpu["peak_mb"], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu (default: the pipeline bench) or cuda (image policy)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.device != "cpu":
        print(json.dumps(image_policy_bench(args.device, min(args.steps, 4096))))
        return
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

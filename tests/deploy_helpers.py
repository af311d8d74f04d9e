"""Helpers for the deployment tests: a run folder whose policy went through the real export path (untrained PPO)."""

from __future__ import annotations

from pathlib import Path


def untrained_run(run_dir: Path, *overrides: str) -> Path:
    """Write ``run_dir/config.yaml`` and ``run_dir/policy/`` from a freshly initialised PPO (arm3 reach, DR off).

    The weights are random but the files, shapes and normalization are exactly what ``embodied-ws train`` exports.
    """
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from embodied_ws.config.loader import load_config, load_dr
    from embodied_ws.rl.export import export_policy
    from embodied_ws.rl.ppo import ppo_kwargs
    from embodied_ws.rl.run import save_run_config
    from embodied_ws.sim.env import RobotEnv

    cfg = load_config("reach", ["dr=none", *overrides])
    env = RobotEnv(cfg, load_dr(cfg.dr), seed=0)
    venv = VecNormalize(DummyVecEnv([lambda: env]), norm_obs=True, norm_reward=False)
    venv.reset()
    for _ in range(64):  # non-trivial normalization statistics
        venv.step([venv.action_space.sample()])
    kw = ppo_kwargs(cfg)
    kw.update(device="cpu", batch_size=64)
    model = PPO("MlpPolicy", venv, **kw)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_run_config(run_dir, cfg)
    export_policy(run_dir / "policy", model, venv, env.core)
    return run_dir

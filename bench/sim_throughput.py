"""Simulation throughput on the default reach robot, measured in one run (prints one JSON object).

- raw physics: ``mj_step(nstep=frame_skip)`` in a Python loop with the same controls, no env;
- our single env (RobotEnv) with the full default DR, latency and noise, resets included;
- our vectorized env (MujocoVecEnv, 64 envs, batched ``mujoco.rollout``), aggregate steps/s;
- the peer: Gymnasium's ``Reacher-v5``, with its own raw physics for its own ratio.
Each figure is the best of ``--repeats`` interleaved measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import gymnasium as gym
import mujoco
import numpy as np

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.sim.env import RobotEnv
from embodied_ws.sim.vec_env import MujocoVecEnv


def raw_physics(model: mujoco.MjModel, frame_skip: int, ctrls: np.ndarray, qpos0: np.ndarray | None = None) -> float:
    """Control steps/s of bare MuJoCo stepping (``frame_skip`` physics steps per control step), from ``qpos0``
    (default: the model's)."""
    data = mujoco.MjData(model)
    if qpos0 is not None:
        data.qpos[:] = qpos0
    t = time.perf_counter()
    for c in ctrls:
        data.ctrl[:] = c
        mujoco.mj_step(model, data, nstep=frame_skip)
    return len(ctrls) / (time.perf_counter() - t)


def single_env(env: gym.Env, actions: np.ndarray) -> float:
    """Steps/s of a gymnasium env, resets included."""
    env.reset(seed=0)
    t = time.perf_counter()
    for a in actions:
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            env.reset()
    return len(actions) / (time.perf_counter() - t)


def vec_env(venv: MujocoVecEnv, actions: np.ndarray) -> float:
    """Aggregate env-steps/s of a vectorized env."""
    venv.reset()
    t = time.perf_counter()
    for a in actions:
        venv.step(a)
    return actions.shape[0] * actions.shape[1] / (time.perf_counter() - t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20000, help="control steps per single-env measurement")
    parser.add_argument("--n-envs", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    cfg = load_config("reach")
    dr = load_dr("default")
    env = RobotEnv(cfg, dr, seed=0)
    nu, fs = env.action_space.shape[0], cfg.env.frame_skip
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (args.steps, nu))
    core = env.core
    ctrls = core.ctrl_mid + core.ctrl_half * actions
    vec_steps = max(1, args.steps // args.n_envs) * 4
    vec_actions = rng.uniform(-1, 1, (vec_steps, args.n_envs, nu))
    venv = MujocoVecEnv(cfg, dr, args.n_envs, seed=0)

    peer = gym.make("Reacher-v5")
    peer_actions = rng.uniform(-1, 1, (args.steps, peer.action_space.shape[0])).astype(np.float32)
    peer_model = peer.unwrapped.model
    peer_fs = peer.unwrapped.frame_skip

    best: dict[str, float] = {}
    for _ in range(args.repeats):
        for key, fn in (
            ("raw_physics_steps_per_s", lambda: raw_physics(core.robot.model, fs, ctrls)),
            ("env_steps_per_s", lambda: single_env(env, actions)),
            ("vec_env_steps_per_s", lambda: vec_env(venv, vec_actions)),
            ("gymnasium_reacher_steps_per_s", lambda: single_env(peer, peer_actions)),
            ("gymnasium_reacher_raw_physics_steps_per_s", lambda: raw_physics(peer_model, peer_fs, peer_actions)),
        ):
            best[key] = max(best.get(key, 0.0), fn())
    venv.close()
    out = {
        "robot": "arm3",
        "frame_skip": fs,
        "n_envs": args.n_envs,
        "cpu_count": os.cpu_count(),
        "rollout_threads": venv.nthread,
        **{k: round(v, 1) for k, v in best.items()},
        "env_vs_raw": round(best["env_steps_per_s"] / best["raw_physics_steps_per_s"], 3),
        "vec_vs_raw": round(best["vec_env_steps_per_s"] / best["raw_physics_steps_per_s"], 3),
        "gymnasium_reacher_vs_its_raw": round(
            best["gymnasium_reacher_steps_per_s"] / best["gymnasium_reacher_raw_physics_steps_per_s"], 3
        ),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()

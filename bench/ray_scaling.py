"""Ray backend scaling and overhead, measured in one run (prints one JSON object).

- **scaling**: aggregate env-steps/s of the Ray backend with 1 and then 2 sampler actors (1 CPU each,
  ``--envs-per-actor`` envs each) on an expensive env: the default arm3 reach with
  ``frame_skip=--heavy-frame-skip`` (one env step costs ``env_step_ms``, measured here, ≥ 1 ms);
  ``scaling`` = two / one (target ≥ 1.6 on a machine with 2 free cores).
- **ray_vs_local_overhead**: on the cheap default task, the time per step of the Ray backend (1 actor,
  ``--cheap-envs`` envs) over our local batched env (same envs, one thread, in-process): 1.0 = no overhead.

Each figure is the best of ``--repeats`` interleaved measurements (other processes on a shared machine
only ever slow a measurement down). The backends are built through the backend registry
(``train.vec_env=ray``) on a local Ray cluster (no dashboard, small object store), started and shut down
here. It declares 4 logical CPUs so that the four benched backends' actors (1 + 2 + 1, one CPU each) exist
at once; only one backend steps at a time, so the actors stepping share the machine's cores
(``cpu_count``, ``load_avg_1min`` in the output: on a busy machine the scaling is capped by the free cores).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.rl.backends import make_vec_env
from embodied_ws.rl.ray_vec import connect
from embodied_ws.sim.vec_env import MujocoVecEnv


def steps_per_s(venv: Any, seconds: float, seed: int = 0) -> float:
    """Aggregate env-steps/s of a vec env over ``seconds`` of wall time (after a warm-up).

    :param venv: an SB3 vec env
    :param seconds: how long to step it
    :param seed: seed of the random actions
    """
    rng = np.random.default_rng(seed)
    n, nu = venv.num_envs, venv.action_space.shape[0]
    actions = rng.uniform(-1, 1, (32, n, nu)).astype(np.float32)
    venv.reset()
    for a in actions[:3]:
        venv.step(a)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        venv.step(actions[steps % len(actions)])
        steps += 1
    return steps * n / (time.perf_counter() - t0)


def env_step_ms(cfg: Any, dr: Any) -> float:
    """Wall milliseconds of one control step of one env (batch of 1, one thread).

    :param cfg: run configuration
    :param dr: DR spec
    """
    env = MujocoVecEnv(cfg, dr, 1, 0, nthread=1)
    try:
        return 1000.0 / steps_per_s(env, 1.0)
    finally:
        env.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heavy-frame-skip", type=int, default=200)
    ap.add_argument("--envs-per-actor", type=int, default=4)
    ap.add_argument("--cheap-envs", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import ray

    connect(None, num_cpus=4, object_store_mb=100)
    try:
        skip = args.heavy_frame_skip
        heavy_sets = [f"env.frame_skip={skip}", "train.vec_env=ray", "train.ray.cpus_per_actor=1"]
        heavy = load_config("reach", heavy_sets)
        cheap = load_config("reach", ["train.vec_env=ray", "train.ray.actors=1", "train.ray.cpus_per_actor=1"])
        dr = load_dr(heavy.dr)
        step_ms = env_step_ms(heavy, dr)
        if step_ms < 1.2:  # a fast (quiet) machine: more physics per step, so one env step costs >= 1 ms
            skip = int(skip * 1.2 / step_ms) + 1
            heavy_sets[0] = f"env.frame_skip={skip}"
            heavy = load_config("reach", heavy_sets)
            step_ms = env_step_ms(heavy, dr)
        k = args.envs_per_actor
        one = make_vec_env(load_config("reach", [*heavy_sets, "train.ray.actors=1"]), dr, k, 0)
        two = make_vec_env(load_config("reach", [*heavy_sets, "train.ray.actors=2"]), dr, 2 * k, 0)
        local = MujocoVecEnv(cheap, dr, args.cheap_envs, 0, nthread=1)
        ray1 = make_vec_env(cheap, dr, args.cheap_envs, 0)
        r_one, r_two, r_local, r_ray = [], [], [], []
        for _ in range(args.repeats):
            r_one.append(steps_per_s(one, args.seconds))
            r_two.append(steps_per_s(two, args.seconds))
            r_local.append(steps_per_s(local, args.seconds))
            r_ray.append(steps_per_s(ray1, args.seconds))
        for env in (one, two, local, ray1):
            env.close()
    finally:
        ray.shutdown()
    best = {k: max(v) for k, v in {"one": r_one, "two": r_two, "local": r_local, "ray": r_ray}.items()}
    print(
        json.dumps(
            {
                "one_worker_steps_per_s": round(best["one"], 1),
                "two_workers_steps_per_s": round(best["two"], 1),
                "scaling": round(best["two"] / best["one"], 3),
                "ray_vs_local_overhead": round(best["local"] / best["ray"], 3),
                "heavy_env_step_ms": round(step_ms, 3),
                "heavy_frame_skip": skip,
                "envs_per_actor": k,
                "cheap_local_steps_per_s": round(best["local"], 1),
                "cheap_ray_steps_per_s": round(best["ray"], 1),
                "cheap_envs": args.cheap_envs,
                "cpu_count": os.cpu_count(),
                "load_avg_1min": round(os.getloadavg()[0], 2),
                "repeats": args.repeats,
                "runs": {"one": r_one, "two": r_two, "local": r_local, "ray": r_ray},
            }
        )
    )


if __name__ == "__main__":
    main()

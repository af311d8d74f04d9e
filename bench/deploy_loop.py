"""The deployment control-loop core at a fixed rate (default 500 Hz for 10 s) with the exported MLP (one JSON object).

Each tick: a measured joint state goes in (a perfect servo: last command = new position, fresh stamp),
then observation (training task code, FK) → exported policy → action mapping → safety envelope.
``tick_compute_ms`` is that work per tick (mean; p99 beside it); the peer measured in the same run is
the bare policy forward pass (``policy_ms``), so ``overhead_ratio`` = tick / policy. ``rate_ratio`` is
achieved / target rate of the fixed-rate loop (absolute deadlines), ``jitter_p99_ms`` the p99 of
``|period − target|``.

Uses ``RUN_OR_POLICY_DIR`` when given, else exports an untrained arm3 reach PPO (same network, 64×64 tanh).
Normal priority by default; ``--realtime-priority N`` runs the loop under SCHED_FIFO (``deploy.realtime_priority``),
as a robot's control loop would. ``load_avg_1min`` tells how busy the machine was.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _export_untrained(run_dir: Path) -> Path:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from embodied_ws.config.loader import load_config, load_dr
    from embodied_ws.rl.export import export_policy
    from embodied_ws.rl.ppo import ppo_kwargs
    from embodied_ws.rl.run import save_run_config
    from embodied_ws.sim.env import RobotEnv

    cfg = load_config("reach", ["dr=none", "ppo.device=cpu"])
    env = RobotEnv(cfg, load_dr(cfg.dr), seed=0)
    venv = VecNormalize(DummyVecEnv([lambda: env]), norm_obs=True, norm_reward=False)
    model = PPO(env=venv, **ppo_kwargs(cfg))
    run_dir.mkdir(parents=True)
    save_run_config(run_dir, cfg)
    export_policy(run_dir / "policy", model, venv, env.core)
    return run_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policy", nargs="?", help="run or policy folder (default: an untrained export)")
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument(
        "--realtime-priority", type=int, default=0, help="run the loop under SCHED_FIFO (deploy.realtime_priority)"
    )
    args = parser.parse_args()

    from embodied_ws.deploy.artifact import resolve_target
    from embodied_ws.deploy.control import ControlCore
    from embodied_ws.deploy.rate import request_realtime, run_fixed_rate

    with tempfile.TemporaryDirectory() as tmp:
        path = args.policy or _export_untrained(Path(tmp) / "run")
        core = ControlCore(resolve_target(path, [f"deploy.rate_hz={args.rate}", "deploy.soft_start_s=0.5"]))
    core.set_goal(core.env.task.sample_goal(np.random.default_rng(0)) if core.goal_dim else np.zeros(0))
    q = core.data.qpos[core.qpos_adr].copy()
    servo = core.actuated
    qd = np.zeros_like(q)
    compute = []
    stamp = [0.0]
    clock = time.perf_counter

    def tick(now: float) -> None:
        t0 = clock()
        stamp[0] += 1.0
        core.set_state(q, qd, stamp[0], now)
        cmd = core.tick(now)
        compute.append(clock() - t0)
        if cmd is not None:
            q[servo] = cmd  # a perfect position servo

    scheduling = request_realtime(args.realtime_priority)  # only the loop: export and set-up ran before
    run_fixed_rate(tick, args.rate, 0.5)  # warm-up
    compute.clear()
    times = run_fixed_rate(tick, args.rate, args.duration)
    request_realtime(0)
    load = os.getloadavg()[0]
    obs = core.last_obs.astype(np.float32)
    t0 = clock()
    for _ in range(2000):
        core.policy.act(obs)
    policy_ms = (clock() - t0) / 2000 * 1e3
    period = np.diff(times)
    achieved = (len(times) - 1) / (times[-1] - times[0])
    c = np.array(compute) * 1e3
    out = {
        "target_hz": args.rate,
        "achieved_hz": round(float(achieved), 2),
        "rate_ratio": round(float(achieved / args.rate), 4),
        "jitter_p99_ms": round(float(np.percentile(np.abs(period - 1.0 / args.rate), 99) * 1e3), 4),
        "tick_compute_ms": round(float(c.mean()), 4),
        "tick_compute_p99_ms": round(float(np.percentile(c, 99)), 4),
        "policy_ms": round(policy_ms, 4),
        "overhead_ratio": round(float(c.mean() / policy_ms), 2),
        "ticks": len(times),
        "commands": core.published,
        "envelope_events": dict(core.envelope.status.events),
        "mode": core.envelope.status.mode,
        "scheduling": scheduling,
        "load_avg_1min": round(load, 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()

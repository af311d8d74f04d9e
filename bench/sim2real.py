"""Sim-to-real transfer on a stand-in robot (one JSON object).

1. starts ``mujoco_sim_node plant:=FILE`` (realtime): a robot whose parameters the toolkit does not know;
2. ``sysid collect`` through the ROS contract (excitation, recorded to MCAP), then ``sysid fit``;
3. trains PPO twice with the same budget (``--steps``; the reach preset stops early after two
   evaluations in a row at 95 %): with the default DR re-centred on the fit (``dr.yaml``) and, as
   the peer, without DR at the nominal parameters (600 k steps left the DR run at ~80 % of its own
   evaluations, 0.68 on the stand-in; it converges around 0.8-1 M);
4. evaluates both policies on the stand-in (in-process, same episodes).

Keys: ``success_fit_dr``, ``success_nominal``, ``rmse_before``, ``rmse_after``, ``latency_true``,
``latency_fit`` (plus the fitted scales and timings). Target: ``success_fit_dr`` ≥ 0.8.
DDS stays on this machine (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, its own ROS_DOMAIN_ID).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cli(*args: str, timeout: float) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "embodied_ws.cli", *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args[:2])} failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plant", default=str(ROOT / "tests" / "fixtures" / "plants" / "hidden.yaml"))
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of sysid excitation")
    ap.add_argument(
        "--steps", type=int, default=1_500_000, help="PPO env-step budget per training (stops early at 95 %% success)"
    )
    ap.add_argument("--episodes", type=int, default=100, help="evaluation episodes on the stand-in")
    ap.add_argument("--work", help="folder for bags and runs (default: a temporary one)")
    args = ap.parse_args()

    from embodied_ws.randomization.plant import load_plant
    from embodied_ws.sysid.gap import evaluate_on_plant

    plant = load_plant(args.plant)
    work = Path(args.work or tempfile.mkdtemp(prefix="sim2real_"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_DOMAIN_ID=str(150 + os.getpid() % 80))
    os.environ.update(env)
    times: dict[str, float] = {}

    t = time.perf_counter()
    sim = subprocess.Popen(
        [sys.executable, "-m", "embodied_ws.ros.nodes.mujoco_sim_node", "--ros-args",
         "-p", "mode:=realtime", "-p", f"plant:={args.plant}"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        bag = work / "sysid_bag"
        collected = _cli(
            "sysid", "collect", "--robot", "arm3", "--duration", str(args.duration), "--out", str(bag),
            timeout=args.duration + 120,
        )  # fmt: skip
    finally:
        sim.terminate()
        sim.wait(timeout=20)
    times["collect_s"] = time.perf_counter() - t

    t = time.perf_counter()
    fit = _cli("sysid", "fit", str(bag), "--robot", "arm3", "--out", str(work / "fit"), timeout=1800)
    times["fit_s"] = time.perf_counter() - t

    runs = work / "runs"
    common = ["--config", "reach", "--runs", str(runs), "--set", f"train.total_timesteps={args.steps}"]
    success = {}
    for name, dr in (("fit_dr", str(work / "fit" / "dr.yaml")), ("nominal", "none")):
        t = time.perf_counter()
        _cli("train", "--name", name, *common, "--set", f"dr={dr}", timeout=7200)
        times[f"train_{name}_s"] = time.perf_counter() - t
        success[name] = evaluate_on_plant(runs / name, plant, args.episodes)["success_rate"]

    print(
        json.dumps(
            {
                "success_fit_dr": success["fit_dr"],
                "success_nominal": success["nominal"],
                "rmse_before": fit["rmse_before"],
                "rmse_after": fit["rmse_after"],
                "latency_true": plant.action_latency,
                "latency_fit": fit["action_latency"],
                "params_true": {p.name: p.low for p in plant.spec.params if p.name != "action_latency"},
                "params_fit": fit["params"],
                "weakly_identifiable": fit["weakly_identifiable"],
                "commands_sent": collected["commands"],
                "train_steps": args.steps,
                "eval_episodes": args.episodes,
                "times_s": {k: round(v, 1) for k, v in times.items()},
                "work": str(work),
            }
        )
    )


if __name__ == "__main__":
    main()

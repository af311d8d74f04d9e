"""Manipulation: contact tasks learned with the default push preset, and the contact env's speed (one JSON).

Cases (each one command):

- ``--case panda-lift``: the Menagerie Panda (``tests/fixtures/robots/menagerie/panda.xml``) with its fingers
  driven (``task.gripper=action``) learns ``lift`` (grasp the cube, hold it ``task.lift_height`` = 5 cm up for
  the task's hold time) under the push preset (``--config push``: push DR, 64 envs, PPO as there), budget
  30 minutes or 8 M steps;
- ``--case panda-push``: the same arm and gripper, ``push`` (20 minutes);
- ``--case arm3-push``: arm3 (no gripper) ``push``, i.e. plain ``embodied-ws train --config push`` (20 minutes);
- ``--case speed``: the Panda lift env with the full push DR against raw ``mj_step`` of the same model with the
  same controls: one env (target ≥ 0.5 ×) and a 64-env batch (aggregate, target ≥ 1.2 × single-thread raw).

Training goes through the real ``embodied-ws train`` CLI in its own process, nothing tuned per robot; learning
ends at the budget (``train.max_minutes``, so the linear learning-rate schedule anneals over it) or at the
preset's confirmed early stop; the trainer then evaluates 256 DR episodes. Printed: ``final_success``,
``steps``, ``minutes``, ``peak_rss_mb``, ``env_steps_per_s``, where the learning time went (``time_s``:
sampling, update, eval, checkpoint seconds), the evaluation curve (``curve``: step, success, mean return), the
early stop's confirmations (``confirmations``: step, success, episodes) and ``load_before``/``load_after``
(1-minute load average: the figures depend on what else ran). The trainer's own progress lines go to the
terminal (stderr).

    python bench/manipulation.py --case panda-lift|panda-push|arm3-push|speed [--minutes M] [--runs DIR]
                                 [--seeds 0,1,3] [--set KEY=VALUE ...] [--steps N] [--repeats R]

``--seeds`` trains the case once per seed, one after another, and prints every run with the mean, the lowest
and ``seeds_at_target`` (Panda push: ``--seeds 0,1,3``, one hour).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from sim_throughput import raw_physics, single_env, vec_env  # bench/ is on sys.path: the same peers, one copy

ROOT = Path(__file__).resolve().parents[1]
PANDA = ROOT / "tests" / "fixtures" / "robots" / "menagerie" / "panda.xml"
#: case → (robot, task, extra --set, default budget in minutes)
CASES: dict[str, tuple[str, str, list[str], float]] = {
    "panda-lift": (str(PANDA), "lift", ["task.gripper=action"], 30.0),
    "panda-push": (str(PANDA), "push", ["task.gripper=action"], 20.0),
    "arm3-push": ("arm3", "push", [], 20.0),
}
#: where a run's learning time went (the summary's ``time``): the rest is the trainer's own bookkeeping
TIME_PARTS = ("sampling_s", "update_s", "eval_s", "checkpoint_s")
LIFT_SETS = [f"env.robot={PANDA}", "env.task=lift", "task.gripper=action"]


def load() -> float:
    """The 1-minute load average (what else used the cores)."""
    return round(os.getloadavg()[0], 2)


def train(case: str, minutes: float, runs: Path, sets: list[str], name: str = "") -> dict:
    """Train ``case`` through ``embodied-ws train --config push`` (run folder ``runs/name``, default the case's
    name); returns the bench fields."""
    robot, task, extra, _ = CASES[case]
    name = name or case
    sets = [*extra, f"train.max_minutes={minutes:g}", *sets]
    cmd = [sys.executable, "-m", "embodied_ws.cli", "train", "--config", "push", "--robot", robot, "--task", task]
    cmd += ["--name", name, "--runs", str(runs), "--json"]
    cmd += [a for s in sets for a in ("--set", s)]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    before, t0 = load(), time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)  # progress: stderr, inherited
    try:  # backstop only: the trainer's own budget ends learning first, then it evaluates 256 episodes
        out, _ = proc.communicate(timeout=minutes * 60 * 1.5 + 600)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # ends learning; the trainer still evaluates and reports
        out, _ = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"error: training {case} failed (exit {proc.returncode})")
    summary = json.loads((runs / name / "summary.json").read_text())
    t = summary["time"]
    return {
        "case": case,
        "robot": summary["robot"],
        "task": summary["task"],
        "final_success": summary["final_success"],
        "final_episodes": (summary.get("final_eval") or {}).get("episodes"),
        "target_success": {"panda-lift": 0.8}.get(case, 0.9),
        "steps": summary["steps"],
        "budget_minutes": minutes,
        "minutes": round(t["total_s"] / 60.0, 2),
        "wall_minutes": round((time.perf_counter() - t0) / 60.0, 2),
        "stopped": summary["stopped"],
        "peak_rss_mb": summary["hardware"]["peak_rss_mb"],
        "env_steps_per_s": round(t["env_steps_per_s"], 1),
        "time_s": {k.removesuffix("_s"): round(float(t[k]), 1) for k in TIME_PARTS},
        "physics_resets": summary["physics_resets"],
        "curve": [
            [int(e["step"]), round(float(e["success_rate"]), 3), round(float(e["mean_return"]), 1)]
            for e in summary["evals"]
        ],
        "confirmations": [
            [int(c["step"]), round(float(c["success_rate"]), 4), int(c["episodes"])] for c in summary["confirmations"]
        ],
        "sets": sets,
        "load_before": before,
        "load_after": load(),
        "cpu_count": os.cpu_count(),
    }


def speed(steps: int, n_envs: int, repeats: int) -> dict:
    """The lift env (full push DR) vs raw physics of the same model, best of ``repeats`` interleaved runs."""
    from embodied_ws.config.loader import load_config, load_dr
    from embodied_ws.sim.env import RobotEnv
    from embodied_ws.sim.vec_env import MujocoVecEnv

    warnings.simplefilter("ignore")
    before = load()
    cfg, dr = load_config("push", LIFT_SETS), load_dr("push")
    env = RobotEnv(cfg, dr, seed=0)
    core, fs = env.core, cfg.env.frame_skip
    env.reset(seed=0)
    qpos0 = env.data.qpos.copy()  # the arm at home, the cube on the table
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (steps, env.action_space.shape[0]))
    ctrls = core.ctrl_mid + core.ctrl_half * actions  # in the range the env's servos use
    venv = MujocoVecEnv(cfg, dr, n_envs, seed=0)
    vec_actions = rng.uniform(-1, 1, (max(1, steps // n_envs) * 4, n_envs, env.action_space.shape[0]))
    best: dict[str, float] = {}
    for r in range(repeats):
        for key, fn in (
            ("raw_physics_steps_per_s", lambda: raw_physics(core.base_model, fs, ctrls, qpos0)),
            ("env_steps_per_s", lambda: single_env(env, actions)),
            ("vec_env_steps_per_s", lambda: vec_env(venv, vec_actions)),
        ):
            best[key] = max(best.get(key, 0.0), fn())
        print(
            f"speed: repeat {r + 1}/{repeats}: {json.dumps({k: round(v) for k, v in best.items()})}",
            file=sys.stderr,
            flush=True,
        )
    venv.close()
    return {
        "case": "speed",
        "robot": core.robot.name,
        "task": "lift",
        "dr": "push",
        "frame_skip": fs,
        "episode_steps": int(core.episode_steps),
        "n_envs": n_envs,
        "cpu_count": os.cpu_count(),
        "rollout_threads": venv.nthread,
        **{k: round(v, 1) for k, v in best.items()},
        "env_vs_raw": round(best["env_steps_per_s"] / best["raw_physics_steps_per_s"], 3),
        "vec_vs_raw": round(best["vec_env_steps_per_s"] / best["raw_physics_steps_per_s"], 3),
        "targets": {"env_vs_raw": 0.5, "vec_vs_raw": 1.2},
        "load_before": before,
        "load_after": load(),
    }


def seed_list(text: str) -> list[int]:
    """``--seeds 0,1,3`` → ``[0, 1, 3]`` (distinct non-negative integers)."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"expected distinct non-negative seeds, got {text!r}")
    return seeds


def over_seeds(case: str, minutes: float, runs: Path, sets: list[str], seeds: list[int]) -> dict:
    """Train ``case`` once per seed, one after another (run ``CASE-seedN``): every run's fields, and the mean,
    the lowest and how many met the target (a seed's spread is as wide as a change's effect)."""
    results = []
    for seed in seeds:
        results.append(train(case, minutes, runs, [*sets, f"train.seed={seed}"], name=f"{case}-seed{seed}"))
        if results[-1]["final_success"] is None:
            sys.exit(f"error: {case} seed {seed}: no final evaluation (train.final_eval_episodes is 0)")
        print(f"seed {seed}: final_success {results[-1]['final_success']:.3f}", file=sys.stderr, flush=True)
    rates = [r["final_success"] for r in results]
    target = results[0]["target_success"]
    return {
        "case": case,
        "seeds": seeds,
        "final_success": dict(zip(map(str, seeds), rates, strict=True)),
        "mean_success": round(float(np.mean(rates)), 4),
        "min_success": min(rates),
        "target_success": target,
        "seeds_at_target": sum(r >= target for r in rates),
        "runs": results,
    }


def main() -> None:
    """Parse arguments, run the case, print one JSON object."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", required=True, choices=[*CASES, "speed"])
    ap.add_argument("--minutes", type=float, help="training budget (default: the case's, 30 lift / 20 push)")
    ap.add_argument("--set", action="append", default=[], help="extra --set for the training (smoke runs)")
    ap.add_argument("--runs", help="keep the run folder here (default: a temporary folder, removed)")
    ap.add_argument("--seeds", type=seed_list, help="train.seed values run one after another, e.g. 0,1,3")
    ap.add_argument("--steps", type=int, default=10000, help="speed: control steps per single-env measurement")
    ap.add_argument("--n-envs", type=int, default=64, help="speed: batch size")
    ap.add_argument("--repeats", type=int, default=3, help="speed: interleaved measurements (best kept)")
    args = ap.parse_args()
    if args.case == "speed":
        print(json.dumps(speed(args.steps, args.n_envs, args.repeats)))
        return
    minutes = args.minutes if args.minutes is not None else CASES[args.case][3]
    with tempfile.TemporaryDirectory(prefix="manipulation_") as tmp:
        runs = Path(args.runs or tmp)
        runs.mkdir(parents=True, exist_ok=True)
        if args.seeds:
            print(json.dumps(over_seeds(args.case, minutes, runs, args.set, args.seeds)))
        else:
            print(json.dumps(train(args.case, minutes, runs, args.set)))


if __name__ == "__main__":
    main()

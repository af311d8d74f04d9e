"""``bench/manipulation.py --seeds``: one command trains a case once per seed and reports the spread."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "manipulation.py"
#: a few seconds per seed: one rollout, no evaluation before the final one (4 episodes)
TINY = ["train.total_timesteps=1024", "train.n_envs=8", "train.eval_every=100000", "train.checkpoint_every=0"]


def test_seeds_train_once_each_and_report_mean_and_lowest(tmp_path: Path) -> None:
    args = [sys.executable, str(BENCH), "--case", "arm3-push", "--seeds", "3,1", "--runs", str(tmp_path)]
    args += [a for s in [*TINY, "train.final_eval_episodes=4"] for a in ("--set", s)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["seeds"] == [3, 1] and [r["sets"][-1] for r in out["runs"]] == ["train.seed=3", "train.seed=1"]
    rates = [r["final_success"] for r in out["runs"]]
    assert out["final_success"] == {"3": rates[0], "1": rates[1]} and out["min_success"] == min(rates)
    assert abs(out["mean_success"] - sum(rates) / 2) < 1e-4
    assert out["seeds_at_target"] == sum(r >= 0.9 for r in rates)
    for run in out["runs"]:  # where the time went, from the run's own summary
        assert set(run["time_s"]) == {"sampling", "update", "eval", "checkpoint"}
        assert run["time_s"]["sampling"] > 0 and run["time_s"]["update"] > 0 and run["confirmations"] == []
    for seed in (3, 1):  # each seed its own run folder, its own recorded seed
        cfg = (tmp_path / f"arm3-push-seed{seed}" / "config.yaml").read_text()
        assert f"seed: {seed}" in cfg


def test_bad_seeds_are_refused_before_training(tmp_path: Path) -> None:
    for bad in ("0,x", "1,1", "-2"):
        proc = subprocess.run(
            [sys.executable, str(BENCH), "--case", "arm3-push", f"--seeds={bad}", "--runs", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2 and "--seeds" in proc.stderr and bad in proc.stderr, proc.stderr
    assert not list(tmp_path.iterdir())  # nothing trained

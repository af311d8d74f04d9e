"""A run that ends below its target says what bound it: episodes too short for the arm, or still learning."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT, train_cmd

from embodied_ws.rl.diagnosis import bound_lines, failure_motion, still_rising

TASK = SimpleNamespace(velocity_weight=0.01, distance_weight=1.0)


def final(success: bool, speed: float, distance: float) -> dict:
    """An episode's last info as the evaluation keeps it (reward terms in reward units)."""
    return {"success": success, "reward_terms": {"velocity": -0.01 * speed**2, "distance": -distance}}


def summary(final_success: float, evals: list[float], failures: dict | None) -> dict:
    return {
        "final_success": final_success,
        "target_success": 0.9,
        "evals": [{"step": 1000 * i, "success_rate": r} for i, r in enumerate(evals)],
        "failures": failures,
    }


def test_failure_motion_reads_speed_and_distance_back_from_the_reward_terms() -> None:
    finals = [final(True, 0.0, 0.01)] * 6 + [final(False, 0.8, 0.2), final(False, 0.6, 0.1), final(False, 0.02, 0.3)]
    out = failure_motion(finals, TASK)
    assert out == {
        "failed": 3,
        "episodes": 9,
        "still_moving_share": pytest.approx(2 / 3, abs=1e-3),
        "median_joint_speed_rad_s": pytest.approx(0.6),
        "median_distance_m": pytest.approx(0.2),
    }
    assert failure_motion([final(True, 0.0, 0.0)], TASK) is None  # nothing failed
    assert failure_motion(finals, SimpleNamespace(velocity_weight=0.0, distance_weight=1.0)) is None


def test_still_rising_looks_at_the_last_evaluations() -> None:
    assert still_rising([{"success_rate": r} for r in (0.2, 0.5, 0.6, 0.7)])
    assert not still_rising([{"success_rate": r} for r in (0.7, 0.71, 0.7)])
    assert not still_rising([{"success_rate": r} for r in (0.5, 0.8, 0.7)])  # fell back at the end
    assert not still_rising([{"success_rate": 0.5}])


def test_the_report_names_the_bound_and_the_setting_to_change() -> None:
    moving = failure_motion([final(False, 0.9, 0.2)] * 3 + [final(True, 0.0, 0.0)], TASK)
    short = "\n".join(bound_lines(summary(0.25, [0.2, 0.21, 0.2], moving)))
    assert "episodes are too short" in short and "env.episode_steps" in short and "still improving" not in short
    rising = "\n".join(bound_lines(summary(0.6, [0.3, 0.45, 0.6], None)))
    assert "still improving" in rising and "train.max_minutes" in rising and "too short" not in rising
    still = failure_motion([final(False, 0.01, 0.2)] * 3 + [final(True, 0.0, 0.0)], TASK)
    plateau = "\n".join(bound_lines(summary(0.25, [0.25, 0.26, 0.25], still)))
    assert "plateau" in plateau and "robot show" in plateau
    assert bound_lines(summary(0.95, [0.9, 0.95], moving)) == []  # target reached: nothing to explain


@pytest.mark.slow
def test_a_run_below_target_reports_its_failed_episodes(tmp_path: Path) -> None:
    sets = [
        "train.total_timesteps=8192",
        "train.n_envs=8",
        "train.eval_every=2048",
        "train.eval_episodes=16",
        "train.final_eval_episodes=32",
        "train.target_success=0.99",
        "train.checkpoint_every=0",
    ]
    proc = subprocess.run(train_cmd(tmp_path, "short", sets), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    summary_json = json.loads((tmp_path / "short" / "summary.json").read_text())
    assert summary_json["final_success"] < 0.99
    failures = summary_json["failures"]
    failed = round((1 - summary_json["final_success"]) * summary_json["final_eval"]["episodes"])
    assert failures["failed"] == failed and failures["episodes"] == 32
    report = (tmp_path / "short" / "report.md").read_text()
    assert "## What bound this run" in report and f"failed episodes: {failed} of 32" in report

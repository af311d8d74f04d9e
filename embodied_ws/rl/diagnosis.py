"""Why a run ended below its target: what ``report.md`` says bound it, and which setting to change.

Two causes are told apart from what the run measured, no guessing from the robot's name:

- **the episodes were too short for the arm**: on the failed episodes of the final evaluation the arm was
  still moving when the episode ended (its joint speed, read back from the reward's velocity term, above
  :data:`MOVING_RAD_S`) — it was on its way and ran out of time;
- **learning was still improving**: the evaluation success was still rising over the last evaluations
  (by more than :data:`RISING` from the first of the last :data:`RISING_WINDOW` to the last) — it ran out of
  clock or steps.

When neither holds, the failures are a plateau: more time will not fix them (unreachable targets, servos
that do not settle, reward weights).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: a failed episode whose joints still move faster than this (rad/s, root of the mean square) at its end
#: was cut short
MOVING_RAD_S = 0.1
#: success gained over the last evaluations that counts as still rising
RISING = 0.02
RISING_WINDOW = 3
#: share of failed episodes still moving above which the episode length is named as the bound
MOVING_SHARE = 0.5


def failure_motion(finals: list[dict[str, Any]], task_cfg: Any) -> dict[str, Any] | None:
    """How the failed episodes ended: their share still moving, median joint speed and distance to the goal.

    :param finals: each episode's last ``{"success", "reward_terms"}`` (from the final evaluation)
    :param task_cfg: the task config (``velocity_weight``, ``distance_weight`` turn terms back into units)
    :returns: None when there is nothing to say (no failed episode, or a task without those terms)
    """
    failed = [f for f in finals if f and not f.get("success", False)]
    v_w = float(getattr(task_cfg, "velocity_weight", 0.0) or 0.0)
    d_w = float(getattr(task_cfg, "distance_weight", 0.0) or 0.0)
    if not failed or v_w <= 0:
        return None
    terms = [f.get("reward_terms", {}) for f in failed]
    if not all("velocity" in t for t in terms):
        return None
    # |q̇|² = -term / weight; divided by the joint count it would be per joint, here the whole arm's speed
    speeds = np.sqrt(np.maximum([-float(t["velocity"]) / v_w for t in terms], 0.0))
    out: dict[str, Any] = {
        "failed": len(failed),
        "episodes": len(finals),
        "still_moving_share": round(float(np.mean(speeds > MOVING_RAD_S)), 3),
        "median_joint_speed_rad_s": round(float(np.median(speeds)), 3),
    }
    if d_w > 0 and all("distance" in t for t in terms):
        out["median_distance_m"] = round(float(np.median([-float(t["distance"]) / d_w for t in terms])), 4)
    return out


def still_rising(evals: list[dict[str, Any]]) -> bool:
    """The evaluation success was still going up over the last :data:`RISING_WINDOW` evaluations."""
    rates = [float(e["success_rate"]) for e in evals[-RISING_WINDOW:]]
    return len(rates) >= 2 and rates[-1] - rates[0] > RISING and rates[-1] >= max(rates) - 1e-9


def bound_lines(summary: dict[str, Any]) -> list[str]:
    """The report's "What bound this run" section (empty when the run reached its target or has no final eval)."""
    final, target = summary.get("final_success"), summary.get("target_success")
    if final is None or target is None or final >= target or math.isnan(final):
        return []
    lines = ["## What bound this run", ""]
    lines.append(f"The final evaluation reached {final:.0%}, below the {target:.0%} target.")
    lines.append("")
    moving = summary.get("failures")
    cut_short = bool(moving and moving["still_moving_share"] >= MOVING_SHARE)
    rising = still_rising(summary.get("evals") or [])
    if moving:
        where = ""
        if "median_distance_m" in moving:
            where = f", median {moving['median_distance_m'] * 100:.1f} cm from the goal"
        speed = moving["median_joint_speed_rad_s"]
        lines.append(
            f"- failed episodes: {moving['failed']} of {moving['episodes']}; {moving['still_moving_share']:.0%} "
            f"of them ended with the arm still moving (median joint speed {speed:.2f} rad/s{where})."
        )
    if cut_short:
        lines.append(
            "- **the episodes are too short for this arm**: it was on its way when they ended. Lengthen them "
            "(`--set env.episode_steps=N`, or a lower `task.approach_speed`); `embodied-ws robot show` prints the "
            "measured joint speeds the length is computed from."
        )
    if rising:
        rates = ", ".join(f"{e['success_rate']:.0%}" for e in summary["evals"][-RISING_WINDOW:])
        lines.append(
            f"- **learning was still improving** (last evaluations {rates}): give it more time "
            "(`--set train.max_minutes=M` or `train.total_timesteps`), or resume the run with `--resume`."
        )
    if not cut_short and not rising:
        lines.append(
            "- **a plateau**: the arm had stopped and the curve was flat, so more time alone will not help. Check "
            "`embodied-ws robot show` (targets out of reach, underdamped servos: `env.servo_damping: auto`) and the "
            "reward weights (`embodied-ws tune`)."
        )
    lines.append("")
    return lines

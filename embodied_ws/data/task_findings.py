"""The checks of ``embodied-ws task check`` (:mod:`embodied_ws.data.task_check`), each a function of the recorded
rollouts returning :class:`Finding` lines: reward terms, success, reward vs success, observations, episode length."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: levels of a finding, mildest first; ``block`` makes ``task check`` exit with code 2
LEVELS = ("ok", "note", "skip", "warn", "block")
#: an observation entry whose magnitude exceeds this is warned about (unnormalised inputs slow PPO down)
OBS_WARN = 1e3
#: a term whose magnitude never exceeds this counts as never firing
FIRE_EPS = 1e-9
#: a grasp whose friction margin is below this is warned about (DR of mass and friction may make it slip)
MARGIN_WARN = 1.5
#: below this expert success rate the success check warns (0 is blocking)
EXPERT_RATE_WARN = 0.5


@dataclass
class Finding:
    """One result of a check: ``level`` (:data:`LEVELS`), what was found and how to fix it."""

    check: str
    level: str
    message: str
    fix: str = ""

    def line(self) -> str:
        """``block: reward terms: ... ; fix: ...`` (one line)."""
        return f"{self.level}: {self.check}: {self.message}" + (f"; fix: {self.fix}" if self.fix else "")


@dataclass
class Rollouts:
    """Per-step records of a set of episodes of one actor."""

    returns: list[float] = field(default_factory=list)
    success: list[bool] = field(default_factory=list)  # at the episode's end (what evaluation counts)
    first_success: list[int | None] = field(default_factory=list)  # step index of the first success
    travel: list[np.ndarray] = field(default_factory=list)  # joint travel until the first success (or the end)
    rewards: list[float] = field(default_factory=list)
    step_success: list[bool] = field(default_factory=list)
    terms: dict[str, list[float]] = field(default_factory=dict)
    obs: list[np.ndarray] = field(default_factory=list)

    @property
    def steps(self) -> int:
        """Steps recorded over all episodes."""
        return len(self.rewards)


def check_terms(random: Rollouts, expert: Rollouts | None, event_terms: tuple[str, ...] = ()) -> list[Finding]:
    """Every reward term fires somewhere. A term that neither random actions nor the expert make fire blocks;
    without an expert it is a warning (a sparse term and a dead one look alike); a term the task names in
    ``event_terms`` (a penalty for a rare event: the object leaving the table) may stay 0 (a note)."""
    check = "reward terms"
    names = list(dict.fromkeys([*random.terms, *(expert.terms if expert else {})]))
    found: list[Finding] = []
    quiet = []
    for name in names:
        r = np.abs(np.asarray(random.terms.get(name, [0.0])))
        e = np.abs(np.asarray(expert.terms.get(name, [0.0]))) if expert else np.zeros(1)
        in_random, in_expert = bool((r > FIRE_EPS).any()), bool((e > FIRE_EPS).any())
        where = f"{random.steps} random" + (f" and {expert.steps} expert" if expert else "") + " steps"
        if in_random:
            continue
        quiet.append(name)
        if in_expert:
            found.append(Finding(check, "note", f"term {name!r} fires only under the expert (sparse: random "
                                 "exploration never sees it)"))  # fmt: skip
        elif name in event_terms:
            found.append(Finding(check, "note", f"event term {name!r} stayed 0 over {where}"))
        elif expert is None:
            fix = "register an expert (embodied_ws.data.expert.EXPERTS), make it denser, or list it in event_terms"
            found.append(Finding(check, "warn", f"term {name!r} is 0 at every one of {where} and there is no "
                                 "scripted expert to show it can fire", fix))  # fmt: skip
        else:
            found.append(Finding(check, "block", f"term {name!r} is 0 at every one of {where}", "it shapes "
                                 "nothing: fix its condition or weight (task.*), drop it, or list a rare-event "
                                 "penalty in the task's event_terms"))  # fmt: skip
    fire = [n for n in names if n not in quiet]
    if fire:
        found.insert(0, Finding(check, "ok", f"{', '.join(fire)} fire under random actions"))
    return found


def check_success(random: Rollouts, expert: Rollouts | None, name: str) -> list[Finding]:
    """The scripted expert meets the success test."""
    rand = f"random actions {sum(random.success)}/{len(random.success)}"
    if expert is None:
        return [
            Finding(
                "success",
                "skip",
                f"no scripted expert for task {name!r} ({rand}): reachability not checked",
                "register one in embodied_ws.data.expert.EXPERTS (or subclass a task that has one)",
            )
        ]
    n, k = len(expert.success), sum(expert.success)
    if k == 0:
        ever = sum(s is not None for s in expert.first_success)
        return [
            Finding(
                "success",
                "block",
                f"the scripted expert succeeds in 0/{n} episodes (meets the test at any step in {ever}/{n}; {rand})",
                "loosen the success test (e.g. task.success_threshold) or check it against the expert's end state",
            )
        ]
    level = "warn" if k / n < EXPERT_RATE_WARN else "ok"
    fix = "the expert fails often: check the success test and the episode length" if level == "warn" else ""
    return [Finding("success", level, f"scripted expert {k}/{n} episodes ({rand})", fix)]


def check_reward_vs_success(random: Rollouts, expert: Rollouts | None) -> list[Finding]:
    """The reward's best point coincides with success: the reward is finite, the expert out-scores random
    actions, successful episodes out-score failed ones, success steps out-score failing steps."""
    check = "reward vs success"
    runs = [random] + ([expert] if expert else [])
    rew = np.concatenate([np.asarray(x.rewards, dtype=float) for x in runs])
    if not np.isfinite(rew).all():
        bad = int((~np.isfinite(rew)).sum())
        fix = "guard the computation in evaluate(): a NaN reward ends learning"
        return [Finding(check, "block", f"the reward is NaN/inf in {bad}/{len(rew)} steps", fix)]
    blocks: list[Finding] = []
    passed: list[str] = []

    def compare(good: float, bad: float, what: str, fix: str) -> None:
        if good <= bad:
            blocks.append(Finding(check, "block", what.format(good=good, bad=bad, op="<="), fix))
        else:
            passed.append(what.format(good=good, bad=bad, op=">"))

    if expert is not None:
        compare(float(np.mean(expert.returns)), float(np.mean(random.returns)),
                "expert return {good:.3g} {op} random return {bad:.3g}",
                "the reward prefers what the expert avoids: check each term's sign and weight")  # fmt: skip
    ret = np.concatenate([np.asarray(x.returns) for x in runs])
    ok = np.concatenate([np.asarray(x.success, dtype=bool) for x in runs])
    if ok.any() and (~ok).any():
        compare(float(ret[ok].mean()), float(ret[~ok].mean()),
                "successful episodes score {good:.3g} {op} failed ones {bad:.3g}",
                "the return must be highest when the task succeeds: raise the success bonus "
                "(task.success_bonus), check the shaping terms")  # fmt: skip
    hit = np.concatenate([np.asarray(x.step_success, dtype=bool) for x in runs])
    if hit.any() and (~hit).any():
        compare(float(rew[hit].mean()), float(rew[~hit].mean()),
                "reward at success steps {good:.3g} {op} at failing steps {bad:.3g}",
                "the reward's best point must be the success state: check the terms' signs")  # fmt: skip
    found = blocks or ([Finding(check, "ok", "; ".join(passed))] if passed else [])
    if not hit.any():
        found.append(Finding(check, "skip", "no step met the success test: success vs failure not compared"))
    elif not blocks and (~hit).any() and float(rew[~hit].max()) > float(rew[hit].max()):
        found.append(Finding(check, "warn", f"the highest reward ({rew[~hit].max():.3g}) is at a failing step "
                             f"(best success step {rew[hit].max():.3g})",
                             "penalty terms outweigh success there: raise the success bonus"))  # fmt: skip
    return found


def check_observations(runs: list[Rollouts], names: list[str]) -> tuple[list[Finding], dict[str, list[float]]]:
    """Observations are finite and bounded; returns the findings and each entry's ``[min, max]``."""
    obs = np.stack([o for r in runs for o in r.obs])
    names = names if len(names) == obs.shape[1] else [f"obs_{i}" for i in range(obs.shape[1])]
    bad = ~np.isfinite(obs)
    found: list[Finding] = []
    for i in np.flatnonzero(bad.any(axis=0)):
        found.append(
            Finding(
                "observations",
                "block",
                f"obs[{i}] {names[i]!r} is NaN/inf in {int(bad[:, i].sum())}/{len(obs)} steps",
                "guard the computation in observe() (divisions, norms, arccos): a NaN input trains a NaN policy",
            )
        )
    clean = np.where(bad, np.nan, obs)
    lo, hi = np.nanmin(clean, axis=0, initial=np.inf), np.nanmax(clean, axis=0, initial=-np.inf)
    ranges = {n: [round(float(a), 4), round(float(b), 4)] for n, a, b in zip(names, lo, hi, strict=True)}
    big = [i for i in range(len(names)) if max(abs(lo[i]), abs(hi[i])) > OBS_WARN and np.isfinite(lo[i] + hi[i])]
    for i in big:
        found.append(
            Finding(
                "observations",
                "warn",
                f"obs[{i}] {names[i]!r} spans [{lo[i]:.3g}, {hi[i]:.3g}]",
                "scale it to about [-10, 10] in observe() (relative or normalised quantities)",
            )
        )
    if not found:
        widest = int(np.argmax(np.maximum(np.abs(lo), np.abs(hi))))
        found.append(
            Finding(
                "observations",
                "ok",
                f"{len(names)} entries finite over {len(obs)} steps, widest "
                f"{names[widest]!r} in [{lo[widest]:.3g}, {hi[widest]:.3g}]",
            )
        )
    return found, ranges


def check_episode_length(
    expert: Rollouts | None, episode_steps: int, control_dt: float, speeds: np.ndarray
) -> tuple[list[Finding], dict[str, Any]]:
    """The expert's steps to success, and the time its joint travel takes at ``speeds`` (per joint: the measured
    speed, or the delta set-point speed where slower), fit in the episode."""
    if expert is None:
        return [Finding("episode length", "skip", "no scripted expert: the steps a task needs are not measured")], {}
    steps = [s + 1 for s in expert.first_success if s is not None]
    ok_speed = np.isfinite(speeds) & (speeds > 0)
    if expert.travel and expert.travel[0].shape != speeds.shape:
        ok_speed = np.zeros(expert.travel[0].shape, dtype=bool)  # joints and actuators do not pair up
    travel_s = [float(np.max(t[ok_speed] / speeds[ok_speed])) if ok_speed.any() else 0.0 for t in expert.travel]
    need = max(math.ceil(max(travel_s, default=0.0) / control_dt), max(steps, default=0))
    measured = {
        "episode_steps": episode_steps,
        "control_dt": control_dt,
        "expert_steps_to_success": steps,
        "joint_speeds": [None if not np.isfinite(v) else round(float(v), 3) for v in speeds],
        "travel_seconds": [round(t, 3) for t in travel_s],
    }
    reached = f"expert succeeds after {max(steps)} steps at most" if steps else "expert never succeeds"
    text = (
        f"episode {episode_steps} steps ({episode_steps * control_dt:.2f} s); {reached}, its joint travel takes "
        f"{max(travel_s, default=0):.2f} s at the joints' measured (or set-point) speeds"
    )
    missed = len(expert.first_success) - len(steps)
    if need > episode_steps or missed:
        why = f"{missed} expert episode(s) never met the test; " if missed else ""
        return [
            Finding(
                "episode length",
                "warn",
                why + text,
                "lengthen env.episode_steps (or set task.approach_speed) so the slowest joints get there",
            )
        ], measured
    return [Finding("episode length", "ok", text)], measured

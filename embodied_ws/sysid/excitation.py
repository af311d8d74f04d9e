"""Excitation signals for system identification: ramped random steps plus a 0.2–3 Hz chirp, all joints.

Why this shape: with small, slow motions a position servo's response depends on damping, armature,
gain and mass only through their ratios (scale all four alike and the motion is the same), so the
fit cannot tell them apart. Steps large enough to saturate the servo's force limit now and then
(|set-point error| > force limit ÷ kp) break that symmetry: while saturated, the motion is set by
force ÷ inertia and damping, not by the gain. The chirp adds frequency content from 0.2 to 3 Hz,
which separates damping (phase lag) from armature/mass (high-frequency roll-off).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ExcitationConfig:
    """Shape of the excitation.

    :param margin: fraction of each joint's range kept free at both ends
    :param step_max: largest random step, as a fraction of the usable range (capped at ``step_cap`` rad)
    :param step_cap: largest random step in rad (or m)
    :param hold: ``(min, max)`` seconds a step level is held
    :param ramp: ``(min, max)`` seconds a step takes to ramp to its new level
    :param chirp_amp: chirp amplitude as a fraction of the usable range (capped at ``chirp_cap``)
    :param chirp_cap: largest chirp amplitude in rad (or m)
    :param f0: chirp start frequency (Hz)
    :param f1: chirp end frequency (Hz)
    :param sweep_s: seconds of one logarithmic sweep f0 → f1 (repeated)
    :param soft_start_s: seconds to blend from the measured pose into the signal
    """

    margin: float = 0.1
    step_max: float = 0.45
    step_cap: float = 1.2
    hold: tuple[float, float] = (0.5, 1.5)
    ramp: tuple[float, float] = (0.04, 0.3)
    chirp_amp: float = 0.12
    chirp_cap: float = 0.3
    f0: float = 0.2
    f1: float = 3.0
    sweep_s: float = 15.0
    soft_start_s: float = 1.0


class Excitation:
    """Set-points over time for every joint, inside ``[low, high]`` shrunk by the margin.

    :param low: lower joint (set-point) limits
    :param high: upper joint (set-point) limits
    :param duration: seconds of signal to prepare (later times repeat the last level)
    :param seed: random seed (same seed → same signal)
    :param cfg: signal shape
    """

    def __init__(
        self, low: np.ndarray, high: np.ndarray, duration: float, seed: int = 0, cfg: ExcitationConfig | None = None
    ) -> None:
        self.cfg = cfg = cfg or ExcitationConfig()
        rng = np.random.default_rng(seed)
        span = np.asarray(high, dtype=float) - np.asarray(low, dtype=float)
        self.low = np.asarray(low, dtype=float) + cfg.margin * span
        self.high = np.asarray(high, dtype=float) - cfg.margin * span
        usable = self.high - self.low
        n = usable.size
        step = np.minimum(cfg.step_max * usable, cfg.step_cap)
        # per joint: times at which a new level starts, the level, and the ramp duration
        self.t_steps: list[np.ndarray] = []
        self.levels: list[np.ndarray] = []
        self.ramps: list[np.ndarray] = []
        for j in range(n):
            t, level = cfg.soft_start_s, (self.low[j] + self.high[j]) / 2.0
            ts, ls, rs = [0.0], [level], [0.0]
            while t < duration:
                level = float(np.clip(level + rng.uniform(-step[j], step[j]), self.low[j], self.high[j]))
                ts.append(t)
                ls.append(level)
                rs.append(rng.uniform(*cfg.ramp))
                t += rng.uniform(*cfg.hold)
            self.t_steps.append(np.array(ts))
            self.levels.append(np.array(ls))
            self.ramps.append(np.array(rs))
        self.amp = np.minimum(cfg.chirp_amp * usable, cfg.chirp_cap)
        self.phase0 = rng.uniform(0.0, 2.0 * np.pi, n)

    def steps(self, t: float) -> np.ndarray:
        """The ramped random-step part at time ``t``."""
        out = np.empty(len(self.levels))
        for j, (ts, ls, rs) in enumerate(zip(self.t_steps, self.levels, self.ramps, strict=True)):
            i = max(int(np.searchsorted(ts, t, side="right")) - 1, 0)
            if i == 0:
                out[j] = ls[0]
                continue
            frac = 1.0 if rs[i] <= 0 else min((t - ts[i]) / rs[i], 1.0)
            out[j] = ls[i - 1] + frac * (ls[i] - ls[i - 1])
        return out

    def chirp(self, t: float) -> np.ndarray:
        """The logarithmic chirp part at time ``t`` (repeats every ``sweep_s``)."""
        c = self.cfg
        tau = t % c.sweep_s
        k = np.log(c.f1 / c.f0) / c.sweep_s
        phase = 2.0 * np.pi * c.f0 * (np.exp(k * tau) - 1.0) / k
        return self.amp * np.sin(phase + self.phase0)

    def __call__(self, t: float, start: np.ndarray | None = None) -> np.ndarray:
        """Set-points at time ``t`` (s since the start); blends in from ``start`` over ``soft_start_s``."""
        target = np.clip(self.steps(t) + self.chirp(t), self.low, self.high)
        if start is None or t >= self.cfg.soft_start_s:
            return target
        w = t / self.cfg.soft_start_s
        w = w * w * (3.0 - 2.0 * w)  # smoothstep: no velocity jump at either end
        return np.asarray(start, dtype=float) + w * (target - np.asarray(start, dtype=float))


def limit_setpoints(target: np.ndarray, previous: np.ndarray, low: np.ndarray, high: np.ndarray, max_step: float):
    """Clamp set-points to ``[low, high]`` and to at most ``max_step`` change from ``previous`` per tick.

    Used by ``sysid collect`` when no safety envelope (``embodied_ws.deploy.safety``) is available.
    """
    moved = np.clip(target, previous - max_step, previous + max_step)
    return np.clip(moved, low, high)

"""Fit simulator parameters so a replay of the recorded commands follows the recorded joints.

For every latency candidate (whole control periods), ``scipy.optimize.least_squares`` fits global
log-scales of the DR parameters (damping, armature, friction loss, servo gain, masses) to the joint
position (and, lightly weighted, velocity) errors of the segment-wise replay
(:class:`embodied_ws.sysid.replay.Replayer`); the latency with the lowest cost wins.
Log-scales keep the scales positive and make a ×2 and a ÷2 error equally large.

Identifiability is judged from the Jacobian ``J`` of the residuals at the solution (what
``least_squares`` returns), not from how large the fit's remaining error is:

* the relative standard error of each scale, ``sqrt(diag(s² τ (JᵀJ)⁻¹))`` on the log-scale (``s²`` the
  residual variance, ``τ`` the residuals' correlation length: neighbouring samples are not independent);
  it grows when the data hardly move with the parameter *or* when another parameter moves them the same
  way (collinear columns);
* the column sensitivity: the joint motion a 20 % error in the parameter alone causes, relative to the
  most influential parameter's (a parameter the recording does not excite has a near-zero column);
* the variance inflation ``(JᵀJ)⁻¹ᵢᵢ (JᵀJ)ᵢᵢ``: how much the other parameters' doing the same to the
  motion inflates its variance (slow motion, for one, shows only damping/gain and mass/gain ratios).

A parameter is *weak* when its relative standard error is above :data:`WEAK_STD`, its relative
sensitivity below :data:`WEAK_SENSITIVITY`, its variance inflation above :data:`WEAK_INFLATION`, or it
ends on a bound. The remaining error of the fit
(noise, unmodelled dynamics) does not flag anything by itself: it widens the DR range
(:func:`embodied_ws.sysid.outputs.dr_yaml`) through ``bias_log``, the error in the parameter that
motion as large as the fit's unexplained error could hide (its part that is not white noise: white
measurement noise averages out and biases nothing).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embodied_ws.sim.robot import Robot
from embodied_ws.sysid.replay import Recording, Replayer, scaled_model

#: DR parameters the fit scales (global scales; the DR schema holds one entry per parameter)
FIT_PARAMS = ("joint_damping", "joint_armature", "joint_frictionloss", "actuator_gain", "body_mass")
#: bounds of each scale
SCALE_BOUNDS = (0.2, 5.0)
#: weight of velocity errors (rad/s) against position errors (rad) in the cost
VELOCITY_WEIGHT = 0.05
#: a parameter is weakly identifiable above this relative standard error (std of its log-scale) ...
WEAK_STD = 0.1
#: ... or when a 20 % error in it alone moves the joints by less than this fraction of what a 20 % error in
#: the most influential parameter does (the recording hardly excites it)
WEAK_SENSITIVITY = 0.02
#: ... or when collinearity with the others inflates its variance more than this (only a combination is known)
WEAK_INFLATION = 100.0
#: a column whose 20 % effect is below this (rad RMS) is no motion at all, whatever the others do
NO_EFFECT = 1e-6


@dataclass
class FitResult:
    """Outcome of a fit.

    :param scales: DR parameter → fitted scale (the value a plant file's ``range: [v, v]`` would hold)
    :param latency: fitted command latency (control periods)
    :param rmse_before: joint-position RMSE of the nominal model at latency 0
    :param rmse_after: joint-position RMSE of the fitted model at the fitted latency
    :param latency_rmse: latency candidate → RMSE after fitting the scales at that latency
    :param identifiability: parameter → ``std_log`` (relative standard error), ``rmse_from_20pct_error``,
        ``sensitivity`` (relative to the most influential parameter), ``inflation`` (variance inflation),
        ``bias_log``, ``weak``, ``why``
    :param saturated_fraction: fraction of periods with a servo at its force limit
    :param seconds: wall time of the fit
    """

    scales: dict[str, float]
    latency: int
    rmse_before: float
    rmse_after: float
    latency_rmse: dict[int, float]
    identifiability: dict[str, dict[str, Any]]
    saturated_fraction: float
    seconds: float
    evaluations: int = 0
    notes: list[str] = field(default_factory=list)
    condition: float = 0.0  #: condition number of the column-normalised ``JᵀJ`` (collinearity of the parameters)
    rmse_systematic: float = 0.0  #: RMS of the remaining position error that is not white noise (rad)

    @property
    def weak(self) -> list[str]:
        """Parameters the data does not pin down."""
        return [k for k, v in self.identifiability.items() if v["weak"]]


def saturated_fraction(robot: Robot, rec: Recording) -> float:
    """Fraction of periods in which some servo pushed at its force limit (from recorded effort,
    or from the set-point error against ``force limit ÷ kp`` when no effort was recorded)."""
    m = robot.model
    limit = np.where(m.actuator_forcelimited.astype(bool), np.abs(m.actuator_forcerange).max(axis=1), np.inf)
    if np.isfinite(rec.effort).all() and np.isfinite(limit).any():
        return float((np.abs(rec.effort) >= 0.98 * limit[None, :]).any(axis=1).mean())
    kp = np.maximum(np.abs(m.actuator_gainprm[:, 0]), 1e-9)
    u = rec.commands[np.maximum(rec.cmd_index, 0)]
    return float((np.abs(u - rec.q) > limit / kp).any(axis=1).mean())


def _correlation_length(r: np.ndarray, max_lag: int = 50) -> float:
    """Samples per independent sample in a residual series (1 + 2 Σ autocorrelation, to where it fades)."""
    r = r - r.mean()
    var = float(np.dot(r, r))
    if var <= 0:
        return 1.0
    total = 1.0
    for lag in range(1, min(max_lag, len(r) // 4)):
        rho = float(np.dot(r[:-lag], r[lag:])) / var
        if rho < 0.05:
            break
        total += 2.0 * rho
    return total


def _systematic_rms(r: np.ndarray) -> float:
    """RMS of the part of a residual series that is not white noise: ``mean(r²) − mean(Δr²) / 2``.

    White measurement noise of std σ has ``mean(Δr²) = 2σ²``; motion the model does not explain is smooth
    from one sample to the next and stays. Only that part can hide a parameter error (white noise averages out).
    """
    if r.size < 3:
        return 0.0
    return float(np.sqrt(max(float(np.mean(r**2)) - 0.5 * float(np.mean(np.diff(r) ** 2)), 0.0)))


class Fitter:
    """Least-squares fit of log-scales per latency candidate.

    :param robot: the robot (nominal model)
    :param rec: the recording
    :param params: DR parameters to fit (global scales)
    :param segment_s: replay segment length (s)
    """

    def __init__(
        self, robot: Robot, rec: Recording, params: tuple[str, ...] = FIT_PARAMS, segment_s: float = 4.0
    ) -> None:
        self.robot, self.rec, self.params = robot, rec, tuple(params)
        self.replayer = Replayer(robot, rec, segment_s)
        self.evaluations = 0
        self.rmse_before = 0.0
        # rows scored: every state except segment starts (those equal the recording by construction)
        rows = np.ones(rec.n, dtype=bool)
        rows[self.replayer.starts] = False
        rows[: rec.first_commanded] = False  # no command known yet: not replayed
        self.rows = rows

    def scales_of(self, x: np.ndarray) -> dict[str, float]:
        """Log-scales → ``{parameter: scale}``."""
        return {p: float(np.exp(v)) for p, v in zip(self.params, x, strict=True)}

    def residuals(self, x: np.ndarray, latency: int) -> np.ndarray:
        """Position errors then weighted velocity errors, time-major per joint, for log-scales ``x``."""
        self.evaluations += 1
        q, v = self.replayer.simulate(scaled_model(self.robot, self.scales_of(x)), latency)
        rec = self.rec
        dq = (q - rec.q)[self.rows].T.ravel()
        dv = VELOCITY_WEIGHT * (v - rec.v)[self.rows].T.ravel()
        return np.concatenate([dq, dv])

    def rmse(self, x: np.ndarray, latency: int) -> float:
        """Joint-position RMSE over all recorded states for log-scales ``x``."""
        q, _ = self.replayer.simulate(scaled_model(self.robot, self.scales_of(x)), latency)
        return float(np.sqrt(np.mean((q - self.rec.q) ** 2)))

    def fit_latency(self, latency: int, x0: np.ndarray | None = None, max_nfev: int = 60) -> Any:
        """``least_squares`` result for one latency candidate."""
        from scipy.optimize import least_squares

        lo, hi = np.log(SCALE_BOUNDS[0]), np.log(SCALE_BOUNDS[1])
        x0 = np.zeros(len(self.params)) if x0 is None else np.clip(x0, lo + 1e-6, hi - 1e-6)
        return least_squares(
            self.residuals,
            x0,
            args=(latency,),
            bounds=(np.full(len(self.params), lo), np.full(len(self.params), hi)),
            diff_step=1e-3,
            x_scale=1.0,
            xtol=1e-6,
            ftol=1e-8,
            max_nfev=max_nfev,
        )

    def identifiability(self, res: Any) -> tuple[dict[str, dict[str, Any]], float, float]:
        """Per parameter: relative standard error and column sensitivity from the solution's Jacobian, and
        whether the data pin it down; plus the condition number of the column-normalised ``JᵀJ`` and the RMS
        of the residuals' systematic (not white) part."""
        jac, r = np.asarray(res.jac), np.asarray(res.fun)
        m, p = jac.shape
        n_pos = int(self.rows.sum()) * self.rec.q.shape[1]
        corr = _correlation_length(r[:n_pos])
        systematic = _systematic_rms(r[:n_pos])
        s2 = float(r @ r) / max(m - p, 1)
        info = jac.T @ jac
        cov = np.linalg.pinv(info) * s2 * corr
        std = np.sqrt(np.clip(np.diag(cov), 0.0, None))
        norms = np.sqrt(np.diag(info))
        if (norms > 0).all():
            condition = float(np.linalg.cond(info / np.outer(norms, norms)))
        else:
            condition = math.inf
        inflation = np.diag(np.linalg.pinv(info)) * np.diag(info)
        scale = np.where(std > 0, std, 1.0)
        correlation = cov / np.outer(scale, scale)
        np.fill_diagonal(correlation, 0.0)
        # the joint motion (position RMS) a 20 % error in one parameter alone causes
        effect = np.sqrt(np.mean((jac[:n_pos] * np.log(1.2)) ** 2, axis=0))
        top = float(effect.max()) if effect.size else 0.0
        lo, hi = np.log(SCALE_BOUNDS[0]), np.log(SCALE_BOUNDS[1])
        out: dict[str, dict[str, Any]] = {}
        for i, name in enumerate(self.params):
            sensitivity = float(effect[i] / top) if top > NO_EFFECT else 0.0
            at_bound = min(abs(res.x[i] - lo), abs(res.x[i] - hi)) < 1e-3
            why = [
                reason
                for reason, hit in (
                    (f"relative std error {std[i]:.3g} > {WEAK_STD:g}", std[i] > WEAK_STD),
                    (f"sensitivity {sensitivity:.3g} < {WEAK_SENSITIVITY:g}", sensitivity < WEAK_SENSITIVITY),
                    (
                        f"variance inflation {inflation[i]:.3g} > {WEAK_INFLATION:g} "
                        f"(moves the joints as {self.params[int(np.argmax(np.abs(correlation[i])))]} does)",
                        inflation[i] > WEAK_INFLATION,
                    ),
                    ("at a bound of the scale", at_bound),
                )
                if hit
            ]
            # a parameter error whose motion is as large as the fit's unexplained (non-white) error cannot be ruled out
            bias = float(np.log(1.2) * systematic / effect[i]) if effect[i] > NO_EFFECT else math.inf
            out[name] = {
                "std_log": round(float(std[i]), 4),
                "rmse_from_20pct_error": round(float(effect[i]), 5),
                "sensitivity": round(sensitivity, 4),
                "inflation": round(float(inflation[i]), 1),
                "bias_log": round(bias, 4) if math.isfinite(bias) else None,
                "weak": bool(why),
                "why": "; ".join(why),
            }
        return out, condition, systematic


def fit(
    robot: Robot,
    rec: Recording,
    latencies: range = range(5),
    params: tuple[str, ...] = FIT_PARAMS,
    segment_s: float = 4.0,
    on_step: Callable[[str], None] | None = None,
    screen_nfev: int = 6,
    max_nfev: int = 60,
) -> FitResult:
    """Fit scales and latency to a recording.

    :param robot: the robot the recording is of
    :param rec: the recording (:func:`embodied_ws.sysid.replay.load_recording`)
    :param latencies: latency candidates (control periods)
    :param params: DR parameters to fit
    :param segment_s: replay segment length (s)
    :param on_step: progress callback, called after each latency candidate
    :param screen_nfev: least-squares iterations per latency candidate while screening
    :param max_nfev: iterations for the chosen latency
    """
    t0 = time.perf_counter()
    f = Fitter(robot, rec, params, segment_s)
    zero = np.zeros(len(params))
    rmse_before = f.rmse_before = f.rmse(zero, 0)
    results: dict[int, Any] = {}
    latency_rmse: dict[int, float] = {}
    for k in latencies:  # screening: a few Gauss-Newton steps per candidate tell the latencies apart
        results[k] = f.fit_latency(k, None, max_nfev=screen_nfev)
        latency_rmse[k] = f.rmse(results[k].x, k)
        if on_step:
            on_step(f"latency {k}: rmse {latency_rmse[k]:.4f}")
    best = min(latency_rmse, key=lambda k: latency_rmse[k])
    res = f.fit_latency(best, results[best].x, max_nfev=max_nfev)  # converge the winner
    rmse_after = latency_rmse[best] = f.rmse(res.x, best)
    notes = []
    ident, condition, systematic = f.identifiability(res)
    sat = saturated_fraction(robot, rec)
    if sat < 0.03:
        notes.append(
            f"servos saturated in only {sat:.1%} of periods: damping, gain and mass are hard to tell apart; "
            "record with larger steps (sysid collect)"
        )
    ranked = sorted(latency_rmse.values())
    if len(ranked) > 1 and ranked[1] < 1.1 * ranked[0]:
        notes.append("two latency candidates fit almost equally well: the latency is uncertain")
    return FitResult(
        scales={k: round(v, 4) for k, v in f.scales_of(res.x).items()},
        latency=int(best),
        rmse_before=rmse_before,
        rmse_after=rmse_after,
        latency_rmse={k: round(v, 6) for k, v in latency_rmse.items()},
        identifiability=ident,
        saturated_fraction=sat,
        seconds=time.perf_counter() - t0,
        evaluations=f.evaluations,
        notes=notes,
        condition=round(condition, 1) if math.isfinite(condition) else condition,
        rmse_systematic=systematic,
    )

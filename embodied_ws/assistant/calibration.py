"""Calibrated confidence: the displayed confidence of a finding is the measured chance that it is right.

Each stage produces a raw score (a rule's configured confidence plus boosts, a template's confidence, the
similarity stage's ``0.2 + 0.5 × cosine``); these are ordered but are not probabilities. The map from raw
score to probability is fitted (scikit-learn) on ``(raw score, was right)`` pairs
from the leave-repositories-out cross-validation (``bench/triage_accuracy.py --write-calibration``) —
isotonic where there are many pairs, Platt scaling where few — one map per stage for the first finding
and one for the alternatives, capped at ``CAP`` (0.97), stored as breakpoints in
``calibration.json`` and applied with linear interpolation (no scikit-learn needed at triage time).

Below ``threshold`` the first finding is not presented as the cause: the answer is "unsure" with the
error lines and the closest known causes (``doctor`` and the TUI).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

CALIBRATION_FILE = "calibration.json"
DEFAULT_THRESHOLD = 0.9
ISOTONIC_MIN = 60
FLOOR, CAP = 0.02, 0.97
RAW_IS_PROBABILITY = ("rule", "template")  # stages whose raw score is an author's probability (the prior)
PRIOR_WEIGHT = 0.5


@dataclass(frozen=True)
class Curve:
    """A monotone piecewise-linear map from raw score to probability (breakpoints ``x`` → ``y``)."""

    x: tuple[float, ...]
    y: tuple[float, ...]

    def __call__(self, raw: float) -> float:
        """The probability at ``raw`` (clipped to the end points)."""
        if not self.x:
            return raw
        if raw < self.x[0]:  # below every fitted score: no evidence there, so scale down rather than clip
            return self.y[0] * max(raw, 0.0) / self.x[0]
        if raw >= self.x[-1]:
            return self.y[-1]
        i = bisect_right(self.x, raw)
        x0, x1, y0, y1 = self.x[i - 1], self.x[i], self.y[i - 1], self.y[i]
        return y0 + (y1 - y0) * (raw - x0) / (x1 - x0) if x1 > x0 else y1


@dataclass(frozen=True)
class Calibration:
    """Per-key curves (``rule``, ``template``, ``similarity`` for the first finding; ``alternative``)."""

    curves: dict[str, Curve] = field(default_factory=dict)
    threshold: float = DEFAULT_THRESHOLD

    def key(self, stage: str, rank: int) -> str:
        """Which curve a finding at ``rank`` (0 = first) from ``stage`` uses."""
        return stage if rank == 0 else "alternative"

    def apply(self, raw: float, stage: str, rank: int) -> float:
        """Calibrated confidence (the raw score where no curve was fitted)."""
        curve = self.curves.get(self.key(stage, rank)) or self.curves.get("any")
        return round(min(max(curve(raw) if curve else raw, 0.0), 0.99), 4)

    def to_json(self) -> dict[str, Any]:
        """The ``calibration.json`` form."""
        return {
            "version": 1,
            "threshold": self.threshold,
            "curves": {k: {"x": list(c.x), "y": list(c.y)} for k, c in sorted(self.curves.items())},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        """Read the ``calibration.json`` form."""
        curves = {k: Curve(tuple(map(float, v["x"])), tuple(map(float, v["y"]))) for k, v in data["curves"].items()}
        return cls(curves, float(data.get("threshold", DEFAULT_THRESHOLD)))


IDENTITY = Calibration()


def fit_curve(raw: list[float], correct: list[bool], prior: float = 0.0) -> Curve:
    """Map raw scores to the chance of being right, as breakpoints.

    ``prior`` > 0 adds pseudo-observations saying "the raw score is already a probability" (the rules'
    and templates' configured confidences are), ``prior`` of weight at each of 19 scores 0.05..0.95: where
    the logs say little (a score lowered by counter-evidence) the curve stays near the author's number,
    where they say much they decide. Many pairs (``ISOTONIC_MIN``) or a prior: isotonic regression; fewer: Platt
    scaling (a regularised logistic regression on the raw score: two parameters, so a dozen pairs do not
    overfit); one outcome only and no prior: the Laplace-smoothed rate ``(right + 1) / (n + 2)``.
    Probabilities are kept within ``[FLOOR, CAP]``: a few hundred logs cannot justify certainty.
    """
    import numpy as np

    x = list(raw)
    y = [float(c) for c in correct]
    w = [1.0] * len(x)
    if prior > 0:
        for g in np.linspace(0.05, 0.95, 19):
            x += [float(g), float(g)]
            y += [1.0, 0.0]
            w += [prior * float(g), prior * (1 - float(g))]
    hits, n = sum(correct), len(raw)
    if prior <= 0 and hits in (0, n):
        p = (hits + 1) / (n + 2)
        return Curve((round(min(raw), 4),), (round(min(max(p, FLOOR), CAP), 4),))
    if n >= ISOTONIC_MIN or prior > 0:  # with the prior's pseudo-observations there is data at every score
        from sklearn.isotonic import IsotonicRegression

        iso = IsotonicRegression(y_min=FLOOR, y_max=CAP, increasing=True, out_of_bounds="clip")
        iso.fit(x, y, sample_weight=w)
        xs, ys = iso.X_thresholds_, iso.y_thresholds_
    else:
        from sklearn.linear_model import LogisticRegression

        lr = LogisticRegression(C=1.0).fit(np.array(x).reshape(-1, 1), np.array(y, dtype=int), sample_weight=w)
        xs = np.linspace(0.0, 1.0, 21)
        ys = np.clip(lr.predict_proba(xs.reshape(-1, 1))[:, 1], FLOOR, CAP)
    return Curve(tuple(round(float(v), 4) for v in xs), tuple(round(float(v), 4) for v in ys))


def fit(pairs: list[tuple[str, float, bool]], threshold: float = DEFAULT_THRESHOLD) -> Calibration:
    """Fit one curve per key from ``(key, raw score, was right)`` triples; ``any`` (the smoothed rate of all
    first findings) serves a stage that had no pairs."""
    curves: dict[str, Curve] = {}
    by_key: dict[str, list[tuple[float, bool]]] = {}
    for key, raw, ok in pairs:
        by_key.setdefault(key, []).append((raw, ok))
    firsts = [p for k, ps in by_key.items() if k != "alternative" for p in ps]
    if firsts:  # for a stage with no pairs at all: every first finding's rate, smoothed (Platt, not isotonic)
        hits = sum(c for _, c in firsts)
        p = (hits + 1) / (len(firsts) + 2)
        curves["any"] = Curve((0.0,), (round(min(max(p, FLOOR), CAP), 4),))
    for key, ps in by_key.items():
        prior = PRIOR_WEIGHT if key in RAW_IS_PROBABILITY else 0.0
        curves[key] = fit_curve([r for r, _ in ps], [c for _, c in ps], prior)
    return Calibration(curves, threshold)


@lru_cache(maxsize=1)
def default_calibration() -> Calibration:
    """The shipped calibration (identity when the package has none)."""
    res = resources.files("embodied_ws.assistant").joinpath(CALIBRATION_FILE)
    if not res.is_file():
        return IDENTITY
    return Calibration.from_json(json.loads(res.read_text()))


def reliability(conf: list[float], correct: list[bool], bins: int = 10) -> tuple[float, list[dict[str, Any]]]:
    """Expected calibration error and the reliability diagram (per bin: n, mean confidence, accuracy)."""
    rows: list[dict[str, Any]] = []
    ece = 0.0
    n = len(conf)
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        idx = [i for i, c in enumerate(conf) if lo <= c < hi or (b == bins - 1 and c == 1.0)]
        if not idx:
            continue
        mc = sum(conf[i] for i in idx) / len(idx)
        acc = sum(correct[i] for i in idx) / len(idx)
        ece += len(idx) / n * abs(mc - acc)
        rows.append({"bin": f"{lo:.1f}-{hi:.1f}", "n": len(idx), "confidence": round(mc, 3), "accuracy": round(acc, 3)})
    return round(ece, 4), rows

"""Seeded DR sampling and application to one env's MjModel copy.

A :class:`DRSampler` belongs to one env. It draws every active parameter from its own
``numpy.random.Generator`` (same seed → same samples), writes physics/visual values into the env's
model, and hands env-side values (latency, noise) back to the env core. ``scale`` in [0, 1] is the
curriculum knob: 0 gives the nominal model, 1 the full configured ranges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np

from embodied_ws.randomization.appliers import APPLIERS, EnvApplier, FieldApplier, select_rows
from embodied_ws.randomization.spec import DRParam, DRSpec


@dataclass
class _Bound:
    param: DRParam
    applier: FieldApplier
    rows: np.ndarray
    nominal: np.ndarray


def draw(param: DRParam, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Raw samples of ``param``'s distribution (before mode and curriculum scale)."""
    lo, hi = param.low, param.high
    if param.dist == "uniform":
        return rng.uniform(lo, hi, shape)
    if param.dist == "loguniform":
        return np.exp(rng.uniform(np.log(lo), np.log(hi), shape))
    # normal: mean at the centre, ±2 std spans the range, clipped to it
    return np.clip(rng.normal((lo + hi) / 2.0, (hi - lo) / 4.0, shape), lo, hi)


def combine(mode: str, nominal: np.ndarray, sample: np.ndarray, scale: float) -> np.ndarray:
    """Value written to the model: the sample moved towards the nominal by the curriculum ``scale``."""
    if mode == "scale":
        return nominal * (1.0 + scale * (sample - 1.0))
    if mode == "offset":
        return nominal + scale * sample
    return nominal + scale * (sample - nominal)


class DRSampler:
    """Draws and applies the DR parameters of one env.

    :param spec: the DR spec (disabled spec → nominal model, no env-side effects)
    :param model: the nominal model (the values DR starts from); samples are written into the
        env's own copy passed to :meth:`sample_reset`
    :param seed: seed of this env's DR stream
    :param visual: also randomize visual parameters (the env renders)
    """

    def __init__(self, spec: DRSpec, model: mujoco.MjModel, seed: int | None, visual: bool = False) -> None:
        self.spec = spec
        self.rng = np.random.default_rng(seed)
        self.scale = 1.0
        self._fields: list[_Bound] = []
        self._env: list[DRParam] = []
        for p in spec.active():
            applier = APPLIERS.get(p.name)
            if isinstance(applier, EnvApplier):
                self._env.append(p)
            elif applier.group == "physics" or visual:
                rows = select_rows(model, applier, p.targets)
                if rows.size:
                    self._fields.append(_Bound(p, applier, rows, applier.view(model)[rows].copy()))

    def sample_reset(self, model: mujoco.MjModel) -> dict[str, Any]:
        """Draw every parameter, write model ones into ``model``; returns the values (for ``info['dr']``)."""
        values: dict[str, Any] = {}
        for b in self._fields:
            values[b.param.name] = self._apply_field(model, b)
        for p in self._env:
            values[p.name] = self.env_value(p)
        return values

    def sample_interval(self, model: mujoco.MjModel, step: int, values: dict[str, Any]) -> None:
        """Redraw the ``when: interval`` parameters due at control ``step`` (updates ``values``)."""
        for b in self._fields:
            if b.param.when == "interval" and step % b.param.interval == 0:
                values[b.param.name] = self._apply_field(model, b)
        for p in self._env:
            if p.when == "interval" and step % p.interval == 0:
                values[p.name] = self.env_value(p)

    def env_value(self, p: DRParam) -> float | int:
        """Draw an env-side parameter (latency in steps as an int, noise std as a float)."""
        if APPLIERS.get(p.name).integer:  # type: ignore[union-attr]
            return round(self.scale * int(self.rng.integers(int(p.low), int(p.high) + 1)))
        # env-side parameters have a nominal of 0 (no latency, no noise): the draw is the value
        return float(self.scale * draw(p, self.rng, ()))

    def _apply_field(self, model: mujoco.MjModel, b: _Bound) -> tuple[float, ...]:
        value = combine(b.param.mode, b.nominal, draw(b.param, self.rng, b.nominal.shape), self.scale)
        view = b.applier.view(model)
        prev = view[b.rows].copy() if b.applier.tied is not None else None
        view[b.rows] = value
        if b.applier.tied is not None:
            b.applier.tied(model, b.rows, value, prev)
        return tuple(value.ravel().tolist())

    def max_latency(self, name: str) -> int:
        """Largest delay (control steps) the spec can ask for, to size the delay line."""
        p = next((q for q in self._env if q.name == name), None)
        return int(p.high) if p is not None else 0

    def state(self) -> dict[str, Any]:
        """Serializable state (RNG and curriculum scale) for checkpoints."""
        return {"rng": self.rng.bit_generator.state, "scale": self.scale}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state`."""
        self.rng.bit_generator.state = state["rng"]
        self.scale = float(state["scale"])

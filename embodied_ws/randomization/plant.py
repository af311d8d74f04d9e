"""Plant files: a robot whose physical parameters the toolkit does not know (a stand-in real robot).

A plant file is a DR file (:mod:`embodied_ws.randomization.spec`) whose entries are fixed values,
``range: [v, v]``::

    params:
      joint_damping: {range: [2.3, 2.3], mode: scale}
      action_latency: {range: [2, 2], mode: set}     # whole control steps, applied to commands

The values are applied once and kept for every episode. ``action_latency`` is applied to the
commands where they arrive (``mujoco_sim_node`` or :class:`embodied_ws.sysid.standin.StandInEnv`),
``action_noise`` is Gaussian noise on commands (fraction of the control half-range) and
``obs_noise`` noise on the measured joint positions and velocities. ``sysid fit`` writes its result
in this format too (``fit.yaml``), so a fit can be used as a plant.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import mujoco

from embodied_ws.core.errors import ConfigError
from embodied_ws.core.yamlfile import read_yaml
from embodied_ws.randomization.appliers import APPLIERS, EnvApplier
from embodied_ws.randomization.sampler import DRSampler
from embodied_ws.randomization.spec import DRSpec, parse_dr

#: env-side entries a plant applies to commands/measurements itself (not through the env core)
COMMAND_SIDE = ("action_latency", "action_noise")


@dataclass(frozen=True)
class Plant:
    """Fixed physical parameters and command latency of a stand-in robot.

    :param spec: the plant's entries as a DR spec whose ranges are single values
    :param source: file the plant came from (for messages)
    """

    spec: DRSpec
    source: str = "plant"

    def value(self, name: str, default: float = 0.0) -> float:
        """The fixed value of entry ``name`` (``default`` when the plant does not set it)."""
        p = self.spec.get(name)
        return default if p is None or not self.spec.enabled else float(p.low)

    @property
    def action_latency(self) -> int:
        """Command latency in control steps."""
        return round(self.value("action_latency"))

    @property
    def action_noise(self) -> float:
        """Std of the Gaussian noise on commands, as a fraction of each control half-range."""
        return self.value("action_noise")

    @property
    def obs_noise(self) -> float:
        """Std of the Gaussian noise on measured joint positions (rad or m) and velocities."""
        return self.value("obs_noise")

    def model_spec(self) -> DRSpec:
        """The entries written into the MjModel (everything but the command/measurement-side ones)."""
        keep = tuple(p for p in self.spec.active() if not isinstance(APPLIERS.get(p.name), EnvApplier))
        return replace(self.spec, params=keep)

    def env_spec(self) -> DRSpec:
        """The spec an in-process env uses: model entries plus ``obs_noise`` (command latency and
        noise are applied to commands by the stand-in itself)."""
        keep = tuple(p for p in self.spec.active() if p.name not in COMMAND_SIDE)
        return replace(self.spec, params=keep)

    def apply(self, model: mujoco.MjModel) -> dict[str, object]:
        """Write the plant's model parameters into ``model`` (relative to its current values)."""
        return DRSampler(self.model_spec(), model, 0).sample_reset(model)


def parse_plant(data: object, source: str = "plant", lines: dict[str, int] | None = None) -> Plant:
    """Validate a plant mapping (as loaded from YAML): the DR schema with fixed values.

    :param data: ``{"params": {name: {range: [v, v], mode: ...}}}``
    :param source: file name used in error messages
    :param lines: ``dotted.key -> line`` for ``file:line`` errors
    """
    lines = lines or {}
    spec = parse_dr(data, source, lines)
    if not spec.params:  # an empty file would silently be the nominal robot
        raise ConfigError("a plant sets at least one parameter: params: {NAME: {range: [v, v], mode: ...}}", source)
    if not spec.enabled:
        where = f"{source}:{lines['enabled']}" if "enabled" in lines else source
        raise ConfigError("a plant is always applied: remove enabled: false", where)
    for p in spec.params:
        key = f"params.{p.name}.range"
        where = f"{source}:{lines[key]}" if key in lines else f"{source}:{key}"
        if p.low != p.high:
            raise ConfigError(
                f"a plant has fixed values: use range: [v, v] (got [{p.low:g}, {p.high:g}] for {p.name})", where
            )
        if p.mode == "scale" and p.low <= 0 and not isinstance(APPLIERS.get(p.name), EnvApplier):
            raise ConfigError(f"a scale must be > 0 (1: nominal), got {p.low:g} for {p.name}", where)
        if p.when != "reset":
            raise ConfigError(f"a plant value is fixed: when must be reset, got {p.when!r}", where)
        if p.name == "obs_latency":
            raise ConfigError("obs_latency is not supported in a plant (use action_latency)", where)
        if p.name == "action_latency" and (p.low < 0 or p.low != int(p.low)):
            raise ConfigError(f"{p.name} is a whole number of control steps >= 0, got {p.low:g}", where)
        if p.name.endswith("_noise") and p.low < 0:
            raise ConfigError(f"{p.name} is a standard deviation >= 0, got {p.low:g}", where)
    return Plant(spec, source)


def load_plant(path: str | Path) -> Plant:
    """Read and validate a plant YAML file; errors are one line naming the file and line."""
    file = Path(path)
    data, lines = read_yaml(file)
    return parse_plant(data, str(file), lines)

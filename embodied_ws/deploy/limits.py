"""Command limits of a robot for the safety envelope: policy.json, the MJCF and an optional limits YAML.

For a position servo the command is a joint set-point, so its bounds are the intersection of the
actuator's control range, the joint range recorded in ``policy.json`` at training time and the
joint range of the model being driven, shrunk by ``deploy.limit_margin``; a limits YAML can only
tighten them::

    joints:
      shoulder: {lower: -1.0, upper: 1.0, max_velocity: 1.5}
      elbow: {upper: 2.0}

Other actuators (torque, velocity) keep their control range.

A position servo's command also stays within ``deploy.max_step`` of the joint's *measured* position
(:attr:`~embodied_ws.deploy.safety.SafetyLimits.max_offset`), so no set-point is ever a jump away
from where the robot is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.config.loader import read_yaml
from embodied_ws.config.schema import DeployConfig
from embodied_ws.core.errors import ConfigError
from embodied_ws.deploy.safety import SafetyLimits
from embodied_ws.sim.robot import Robot
from embodied_ws.sim.robot_defaults import position_servos

_JOINT_KEYS = ("lower", "upper", "max_velocity")


def read_limits_file(path: str, joint_names: list[str]) -> dict[str, dict[str, float]]:
    """Parse a limits YAML into ``{joint: {lower|upper|max_velocity: value}}``; errors name the file and line."""
    data, lines = read_yaml(Path(path))

    def where(key: str) -> str:
        return f"{path}:{lines[key]}" if key in lines else path

    if not isinstance(data, dict) or set(data) != {"joints"} or not isinstance(data["joints"], dict):
        raise ConfigError("expected a mapping with one key 'joints'", path)
    out: dict[str, dict[str, float]] = {}
    for name, entry in data["joints"].items():
        key = f"joints.{name}"
        if name not in joint_names:
            raise ConfigError(f"unknown joint {name!r} (robot joints: {', '.join(joint_names)})", where(key))
        if not isinstance(entry, dict):
            raise ConfigError("expected a mapping of lower/upper/max_velocity", where(key))
        for k, v in entry.items():
            if k not in _JOINT_KEYS:
                raise ConfigError(f"unknown key {k!r} (expected one of: {', '.join(_JOINT_KEYS)})", where(f"{key}.{k}"))
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
                raise ConfigError(f"{k} must be a number, got {v!r}", where(f"{key}.{k}"))
        out[name] = {k: float(v) for k, v in entry.items()}
    return out


def command_limits(robot: Robot, meta: dict[str, Any], d: DeployConfig, rate_hz: float) -> SafetyLimits:
    """The :class:`SafetyLimits` for driving ``robot`` with the policy described by ``meta``.

    :param robot: the robot being driven (actuator ``i`` drives joint ``robot.joint_names[i]``)
    :param meta: the policy's ``policy.json``
    :param d: deploy settings (margin, steps, velocity, watchdogs, limits file)
    :param rate_hz: control-loop rate
    """
    lower, upper = robot.ctrl_low.astype(np.float64), robot.ctrl_high.astype(np.float64)
    servo = position_servos(robot.model)
    jlo, jhi = robot.joint_low.copy(), robot.joint_high.copy()
    joints = meta.get("joints", {})
    trained = dict(zip(joints.get("names", []), zip(joints.get("lower", []), joints.get("upper", []), strict=False),
                       strict=False))  # fmt: skip
    for i, name in enumerate(robot.joint_names):
        if name in trained:
            jlo[i], jhi[i] = max(jlo[i], trained[name][0]), min(jhi[i], trained[name][1])
    margin = d.limit_margin * (jhi - jlo)
    jlo, jhi = jlo + margin, jhi - margin
    lower = np.where(servo, np.maximum(lower, jlo), lower)
    upper = np.where(servo, np.minimum(upper, jhi), upper)
    velocity = np.full(robot.nu, d.max_velocity)
    if d.limits_file:
        for name, entry in read_limits_file(d.limits_file, robot.joint_names).items():
            for i in [i for i, n in enumerate(robot.joint_names) if n == name]:
                lower[i] = max(lower[i], entry.get("lower", -np.inf))
                upper[i] = min(upper[i], entry.get("upper", np.inf))
                velocity[i] = min(velocity[i], entry.get("max_velocity", np.inf))
    if (lower > upper).any():
        bad = robot.joint_names[int(np.argmax(lower > upper))]
        raise ConfigError(f"empty command range for joint {bad!r} after limits and margin", d.limits_file or "deploy")
    safe = None
    if d.on_state_timeout == "safe_pose":
        # default: the model's home pose (servos); torque actuators go to the middle of their range
        home = robot.home_qpos[robot.qpos_idx] if robot.home_qpos is not None else (lower + upper) / 2
        safe = np.asarray(d.safe_pose, dtype=np.float64) if d.safe_pose else np.where(servo, home, (lower + upper) / 2)
        if safe.shape != (robot.nu,):
            raise ConfigError(f"needs {robot.nu} values (one per actuator), got {len(d.safe_pose)}", "deploy.safe_pose")
    # a gripper driven by the policy has its own command and envelope (embodied_ws.deploy.gripper_command): its
    # entry here is never sent, so it is left unbounded (no margin, rate or offset clipping reported for it)
    grip = np.zeros(robot.nu, dtype=bool)
    grip[robot.gripper_actuators] = True
    lower = np.where(grip, robot.ctrl_low, lower)
    upper = np.where(grip, robot.ctrl_high, upper)
    velocity[grip] = np.inf
    if safe is not None:
        safe = np.where(grip, (lower + upper) / 2, safe)
    return SafetyLimits.build(
        lower,
        upper,
        rate_hz,
        np.where(grip, np.maximum(upper - lower, d.max_step), d.max_step),
        velocity,
        soft_start_s=d.soft_start_s,
        state_timeout_s=d.state_timeout_s,
        inference_timeout_s=d.inference_timeout_s,
        on_state_timeout=d.on_state_timeout,
        safe_pose=safe,
        # a servo's command is a position: never more than max_step from where the joint is measured
        max_offset=np.where(servo & ~grip, d.max_step, np.inf),
    )

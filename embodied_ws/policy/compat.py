"""Does this policy fit this robot and task? The exported policy's declared actuators, action mode and
observation layout checked against an env, field by field (used by deploy, the gap report and eval paths)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from embodied_ws.core.errors import UserError

if TYPE_CHECKING:
    from embodied_ws.config.schema import RunConfig
    from embodied_ws.sim.mapping import PolicyIO


def _first_difference(ours: list[str], theirs: list[str]) -> int:
    for i, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            return i
    return min(len(ours), len(theirs))


def _mismatch(kind: str, ours: list[str], theirs: list[str], robot: str, where: str) -> None:
    if ours == theirs:
        return
    i = _first_difference(ours, theirs)
    mine = repr(ours[i]) if i < len(ours) else "absent"
    other = repr(theirs[i]) if i < len(theirs) else "absent"
    raise UserError(f"{kind} field {i} is {mine} in the policy but {other} on {robot}: a policy for another robot?",
                    where)  # fmt: skip


def check_actuators(meta: dict[str, Any], actuators: list[str], robot: str, where: str) -> None:
    """The policy's actuators must be the robot's (checked before the task is built); else one line naming the field."""
    _mismatch("action", list(meta.get("action", {}).get("actuators", [])), actuators, f"robot {robot!r}", where)


def check_layout(meta: dict[str, Any], env: PolicyIO, cfg: RunConfig, where: str) -> None:
    """The policy's observation layout must be what this robot and task produce; else one line naming the field.

    :param meta: the policy's ``policy.json``
    :param env: the observation/action mapping of the robot being driven (an env core's ``io``, or deploy's)
    :param cfg: the configuration it was built from
    :param where: ``policy.json`` path for the error line
    """
    robot = f"robot {env.robot.name!r} (task {cfg.env.task})"
    mode = meta.get("action", {}).get("mode")
    if mode is not None and mode != env.mode:
        wanted = cfg.env.action_mode if cfg.env.action_mode == env.mode else f"{cfg.env.action_mode} ({env.mode})"
        raise UserError(f"action mode is {mode!r} in the policy but env.action_mode is {wanted!r}", where)
    yaw = meta.get("action", {}).get("ee_yaw")
    if mode == "ee_delta" and yaw is not None and bool(yaw) != cfg.env.ee_yaw:
        raise UserError(f"ee_yaw is {bool(yaw)} in the policy but env.ee_yaw is {cfg.env.ee_yaw}", where)
    held = bool(meta.get("action", {}).get("ee_hold_orientation", False))  # exported before the hold: free
    holds = bool(env.ee is not None and env.ee.holds_orientation)
    if mode == "ee_delta" and held != holds:
        raise UserError(
            f"the policy {'holds' if held else 'does not hold'} the hand's orientation but env.ee_orientation="
            f"{cfg.env.ee_orientation} {'holds' if holds else 'does not hold'} it on {env.robot.name!r}",
            where,
        )
    _mismatch("observation", list(meta.get("observation", {}).get("names", [])), env.obs_names(), robot, where)

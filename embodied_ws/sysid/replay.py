"""A recorded trajectory (joint states + commands from a bag) for the fit, replayed by :mod:`embodied_ws.sim.replay`.

Time base: the bag's receive times, one clock for states and commands alike. A state message
marks the end of one control period of the robot; the command the robot applied in that period
is the latest one received before that state was published, shifted by the robot's latency (whole
periods). Indexing commands by the periods they arrived in — their recorded
times — rather than by message count keeps the replay right when commands and states are not
one-to-one (dropped or extra commands, timing jitter).

The replay splits the recording into segments of ``segment_s`` seconds, each started from the
recorded joint positions and velocities (multiple shooting): errors do not accumulate over the
whole recording, and the fit is well conditioned.
"""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np

from embodied_ws.core.errors import UserError
from embodied_ws.data.bag import bag_info, command_topic
from embodied_ws.data.rosbag_io import read_float_arrays, read_joint_states
from embodied_ws.sim.replay import Recording, Replayer
from embodied_ws.sim.robot import Robot

__all__ = ["Recording", "Replayer", "load_recording", "scaled_model"]


def load_recording(bag: str | Path, robot: Robot, guard_s: float = 0.001) -> Recording:
    """Read a bag's /joint_states and commands for ``robot``; a bag of another robot is a one-line error.

    :param guard_s: a command received less than this before a state counts for the next period
        (the robot sampled its command just before publishing that state)
    """
    info = bag_info(bag)
    if "/joint_states" not in info.topics or info.topics["/joint_states"][1] == 0:
        raise UserError("no /joint_states messages in the bag", str(bag))
    states = read_joint_states(bag)
    missing = [j for j in robot.joint_names if j not in states.names]
    if missing:
        raise UserError(
            f"bag joints {states.names} are not robot {robot.name!r}'s (missing {missing}): a bag of another robot?",
            str(bag),
        )
    cols = [states.names.index(j) for j in robot.joint_names]
    topic = command_topic(info)
    cmds = read_float_arrays(bag, topic)
    if cmds.data.shape[0] == 0:
        raise UserError(f"no messages on {topic} in the bag", str(bag))
    if cmds.data.shape[1] != robot.nu:
        raise UserError(
            f"commands have {cmds.data.shape[1]} values, robot {robot.name!r} has {robot.nu} actuators: "
            "a bag of another robot?",
            str(bag),
        )
    t = states.log_t
    keep = np.isfinite(states.position[:, cols]).all(axis=1)
    t, q = t[keep], states.position[keep][:, cols]
    v = np.nan_to_num(states.velocity[keep][:, cols])
    eff = states.effort[keep][:, cols]
    if len(t) < 20:
        raise UserError(f"only {len(t)} joint states in the bag; record at least a few seconds", str(bag))
    cmd_index = np.searchsorted(cmds.log_t, t - guard_s, side="left") - 1
    commanded = int(np.sum(cmd_index >= 0))
    if commanded < 20:
        raise UserError(
            f"only {commanded} joint states after the first recorded command on {topic}; "
            "start the recorder before the robot moves, or record longer",
            str(bag),
        )
    stamps = states.stamp[keep]
    dt = float(np.median(np.diff(stamps))) if np.ptp(stamps) > 0 else float(np.median(np.diff(t)))
    return Recording(
        list(robot.joint_names), t - t[0], q, v, eff, cmd_index, cmds.data, dt, str(bag), float(t[0]), stamps
    )


def scaled_model(robot: Robot, scales: dict[str, float]) -> mujoco.MjModel:
    """A copy of the robot's nominal model with the DR parameters in ``scales`` multiplied in (mode scale)."""
    from embodied_ws.randomization.appliers import APPLIERS, FieldApplier, select_rows

    model = _copy(robot.model)
    for name, s in scales.items():
        applier = APPLIERS.get(name)
        if not isinstance(applier, FieldApplier):
            continue
        rows = select_rows(robot.model, applier, ())
        value = applier.view(robot.model)[rows] * s
        applier.view(model)[rows] = value
        if applier.tied is not None:
            applier.tied(model, rows, value)
    return model


def _copy(model: mujoco.MjModel) -> mujoco.MjModel:
    import copy

    return copy.copy(model)

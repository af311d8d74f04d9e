"""A recorded trajectory (joint states + commands from a bag) and its replay in MuJoCo.

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

from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

from embodied_ws.core.errors import UserError
from embodied_ws.data.bag import bag_info, command_topic
from embodied_ws.data.rosbag_io import read_float_arrays, read_joint_states
from embodied_ws.sim.robot import Robot


@dataclass
class Recording:
    """Joint states and commands of one recording, on the robot's actuated joints.

    :param joint_names: robot joint names (the order of ``q``/``v``, = actuator order)
    :param t: state times (s since the first state, receive clock)
    :param q: recorded joint positions ``(n, nu)``
    :param v: recorded joint velocities ``(n, nu)``
    :param effort: recorded joint efforts ``(n, nu)`` (NaN when not sent)
    :param cmd_index: ``(n,)`` index into ``commands`` of the latest command received (``guard_s``)
        before state i (-1: none yet)
    :param commands: ``(m, nu)`` commands in actuator order
    :param control_dt: the robot's control period (median state interval, s)
    :param source: where it came from (for messages)
    :param t0: receive time of the first state (s, bag clock; ``t`` is relative to it)
    :param stamp: the states' own stamps (robot or sim clock; a simulator reset starts them over)
    """

    joint_names: list[str]
    t: np.ndarray
    q: np.ndarray
    v: np.ndarray
    effort: np.ndarray
    cmd_index: np.ndarray
    commands: np.ndarray
    control_dt: float
    source: str = ""
    t0: float = 0.0
    stamp: np.ndarray | None = None

    @property
    def n(self) -> int:
        """Number of state samples."""
        return len(self.t)

    @property
    def first_commanded(self) -> int:
        """Index of the first state with a command received before it (``n``: none)."""
        known = np.flatnonzero(self.cmd_index >= 0)
        return int(known[0]) if known.size else self.n

    def applied(self, latency: int, hold: np.ndarray) -> np.ndarray:
        """``(n, nu)``: the command the robot applied in the period ending at state i, for ``latency`` periods.

        The robot samples its latest command at the start of each period and publishes the state at
        its end, so period i (ending at state i) uses the latest command received before state
        ``i - latency`` was published (latency 0: the command answering state ``i - 1``, as in the
        in-process env); ``hold`` fills the periods before the first command.
        """
        idx = np.full(self.n, -1)
        idx[latency:] = self.cmd_index[: self.n - latency]
        out = np.where((idx >= 0)[:, None], self.commands[np.maximum(idx, 0)], hold[None, :])
        return out


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


class Replayer:
    """Replays a recording's commands in MuJoCo from recorded states, segment by segment.

    :param robot: the robot (nominal model)
    :param rec: the recording
    :param segment_s: seconds per segment (each restarts from the recorded state)
    """

    def __init__(self, robot: Robot, rec: Recording, segment_s: float = 4.0) -> None:
        self.robot, self.rec = robot, rec
        self.frame_skip = max(1, round(rec.control_dt / robot.model.opt.timestep))
        seg = max(2, round(segment_s / rec.control_dt))
        self.starts = self.segment_starts(rec, segment_s)
        self.ends = np.minimum(self.starts + seg, rec.n - 1)
        self.qpos_idx, self.qvel_idx = robot.qpos_idx, robot.qvel_idx
        self.hold = rec.q[min(rec.first_commanded, rec.n - 1)].copy()  # where the replayed part begins

    @staticmethod
    def segment_starts(rec: Recording, segment_s: float) -> np.ndarray:
        """Indices of the states each replay segment starts from.

        Segments begin at the first state with a recorded command: before it (a recorder that joined
        late) the commands are unknown, and replaying a hold there would bias the fit.
        """
        seg = max(2, round(segment_s / rec.control_dt))
        return np.arange(rec.first_commanded, rec.n - 1, seg)

    def simulate(self, model: mujoco.MjModel, latency: int) -> tuple[np.ndarray, np.ndarray]:
        """Simulated ``(q, v)`` at every recorded state time (segment starts equal the recording)."""
        rec, data = self.rec, mujoco.MjData(model)
        u = self.rec_commands(latency)
        q_out, v_out = rec.q.copy(), rec.v.copy()
        fs = self.frame_skip
        for s, e in zip(self.starts, self.ends, strict=True):
            mujoco.mj_resetData(model, data)
            data.qpos[self.qpos_idx] = rec.q[s]
            data.qvel[self.qvel_idx] = rec.v[s]
            for i in range(s + 1, e + 1):
                data.ctrl[:] = u[i]
                mujoco.mj_step(model, data, nstep=fs)
                q_out[i] = data.qpos[self.qpos_idx]
                v_out[i] = data.qvel[self.qvel_idx]
            if not np.isfinite(q_out[s : e + 1]).all():
                q_out[s : e + 1] = 1e3  # a blown-up model: a large, finite residual
        return q_out, v_out

    def rec_commands(self, latency: int) -> np.ndarray:
        """Commands applied per period (clamped to the control range as the robot does)."""
        u = self.rec.applied(latency, self.hold)
        return np.clip(u, self.robot.ctrl_low, self.robot.ctrl_high)

    def rmse(self, model: mujoco.MjModel, latency: int) -> float:
        """Joint-position RMSE (rad or m) of the replay against the recording."""
        q, _ = self.simulate(model, latency)
        return float(np.sqrt(np.mean((q - self.rec.q) ** 2)))

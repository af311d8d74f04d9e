"""Replaying recorded joint commands in MuJoCo from recorded states: the one replay.

:class:`Recording` holds joint states and the commands the robot received; :class:`Replayer` steps a
model through them segment by segment (each segment restarts from the recorded state — multiple
shooting — so errors do not accumulate and a fit is well conditioned). System identification fits
models with it (``sysid.fit``, from a bag: ``sysid.replay.load_recording``); the VLA dataset check
replays a demonstration's actions with it (:func:`replay_rmse`).

Time base: the recording's receive times, one clock for states and commands alike. A state marks
the end of one control period; the command the robot applied in that period is the latest one
received before that state was published, shifted by the robot's latency (whole periods).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

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

    @classmethod
    def from_arrays(cls, joint_names: list[str], q: np.ndarray, commands: np.ndarray, control_dt: float,
                    source: str = "") -> Recording:  # fmt: skip
        """A recording sampled once per control period: command ``k`` answers state ``k`` (as a dataset's
        ``action`` row does its ``observation.state`` row); joint velocities unknown (zero)."""
        q = np.asarray(q, dtype=np.float64)
        n = len(q)
        t = np.arange(n) * control_dt
        return cls(list(joint_names), t, q, np.zeros_like(q), np.full_like(q, np.nan), np.arange(n),
                   np.asarray(commands, dtype=np.float64), control_dt, source)  # fmt: skip


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


def replay_rmse(robot: Robot, q: np.ndarray, commands: np.ndarray, control_dt: float) -> float:
    """RMS error between recorded joint positions and those reached by replaying ``commands`` open loop from
    the first state, one command per control period (command ``k`` applied in the period after state ``k``).

    :param q: recorded joint positions ``(T, nu)``
    :param commands: the joint position commands ``(T, nu)``
    """
    if len(q) < 2:
        return 0.0
    rec = Recording.from_arrays(list(robot.joint_names), q, commands, control_dt)
    sim_q, _ = Replayer(robot, rec, segment_s=len(q) * control_dt).simulate(robot.model, latency=1)
    diff = sim_q[1:] - rec.q[1:]  # state 0 is where the replay starts
    return float(np.sqrt(np.mean(diff * diff)))

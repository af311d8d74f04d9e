"""The safety envelope: the last thing every command passes before it reaches a robot (no ROS, no torch).

One :class:`SafetyEnvelope` per controlled robot, in command space (what ``/<controller>/commands``
carries: joint set-points for position servos, the actuator's own units otherwise). Every tick::

    env.state_received(stamp, now, measured)    # on each /joint_states; False for duplicate/out-of-order/stale
    out = env.filter(command, now, compute_s)   # None: publish nothing (e-stop latched, not armed yet)
    out = env.filter(None, now, hold="why")      # no valid task: hold at the measured pose, say why

``state_received`` also notices **a state source that starts over** (:mod:`embodied_ws.deploy.stream`:
a new publisher, stamps going back, states coming back after the watchdog tripped, a position jump
the velocity limit cannot explain): the envelope disarms, and the caller re-arms from the measured
pose (soft start), so the next command holds the robot where it is.

``filter`` applies, in this order:

1. **e-stop latch** (:meth:`SafetyEnvelope.estop`): from that call on, ``filter`` returns ``None``
   until :meth:`SafetyEnvelope.reset` (a deactivate/activate cycle of the node).
2. **arming**: nothing is published before :meth:`SafetyEnvelope.arm` gave the measured pose.
3. **state watchdog**: the last fresh state older than ``state_timeout_s`` → hold the last safe command,
   or move (rate limited) to ``safe_pose`` when ``on_state_timeout == "safe_pose"``; reported.
4. **inference watchdog**: ``compute_s`` above ``inference_timeout_s`` → the command is dropped, hold.
5. **NaN/inf rejection**: a non-finite command is dropped, hold.
6. **soft start**: for ``soft_start_s`` after arming, the target is blended from the measured start pose
   (``start + α (command − start)``, α rising 0 → 1).
7. **position limits**: clip into ``[lower, upper]``.
8. **max change per tick**: the step from the last published command is clipped to ``max_step``
   (already the tighter of the per-tick limit and ``max_velocity × period``).
9. **measured envelope**: the command is clamped to within ``max_offset`` of the last *measured*
   pose, so no code path (a stale set-point, a restarted robot, a hold) commands a jump.

So whatever comes in (NaN, inf, 1e300, a stale, reordered or restarted state stream), every command
that comes out is finite, at most ``max_offset`` from the measured pose, inside the limits (when the
robot is measured inside them) and at most ``max_step`` from the previous one (except where the
measured envelope pulls it back towards a robot that is somewhere else).
The hot path uses preallocated numpy buffers (this runs at up to 1 kHz next to the policy).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embodied_ws.deploy.stream import StateStream

#: what the state watchdog does when /joint_states goes quiet
ON_STATE_TIMEOUT = ("hold", "safe_pose")


@dataclass
class SafetyLimits:
    """Limits of one robot in command space (one entry per actuator).

    :param lower: lowest allowed command per actuator
    :param upper: highest allowed command per actuator
    :param max_step: largest change of a command between two ticks (the tighter of the configured
        per-tick step and ``max_velocity / rate``; see :meth:`build`)
    :param period: nominal tick period in seconds
    :param soft_start_s: ramp from the measured pose to the policy's commands over this many seconds
    :param state_timeout_s: a state older than this trips the state watchdog
    :param inference_timeout_s: observation + policy time above this drops the command (0: off)
    :param on_state_timeout: ``hold`` (repeat the last safe command) or ``safe_pose`` (move there, rate limited)
    :param safe_pose: command to go to on a state timeout (``safe_pose`` mode), clipped into the limits
    :param max_offset: largest distance of a command from the measured pose per actuator (``inf``: none, e.g. a
        torque actuator whose command is not a position); None: ``max_step``
    :param stamp_tolerance_s: a state stamp going back by more than this is a restarted source (None:
        ``state_timeout_s``); by less, a duplicate or reordered state that is ignored
    :param clip_window_s: the window over which :meth:`SafetyEnvelope.clipping` counts clipped ticks
    """

    lower: np.ndarray
    upper: np.ndarray
    max_step: np.ndarray
    period: float
    soft_start_s: float = 2.0
    state_timeout_s: float = 0.25
    inference_timeout_s: float = 0.02
    on_state_timeout: str = "hold"
    safe_pose: np.ndarray | None = None
    max_offset: np.ndarray | None = None
    stamp_tolerance_s: float | None = None
    clip_window_s: float = 2.0

    @classmethod
    def build(
        cls,
        lower: np.ndarray,
        upper: np.ndarray,
        rate_hz: float,
        max_step: float | np.ndarray,
        max_velocity: float | np.ndarray,
        **kw: Any,
    ) -> SafetyLimits:
        """Limits from position bounds, a per-tick step and a velocity (units/s) at ``rate_hz``.

        :param lower: lowest command per actuator
        :param upper: highest command per actuator
        :param rate_hz: tick rate of the control loop
        :param max_step: largest change per tick (scalar or per actuator)
        :param max_velocity: largest command velocity in units per second (scalar or per actuator)
        :param kw: the other :class:`SafetyLimits` fields (``max_offset`` may be a scalar)
        """
        lower, upper = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
        period = 1.0 / float(rate_hz)
        step = np.minimum(np.broadcast_to(max_step, lower.shape), np.broadcast_to(max_velocity, lower.shape) * period)
        if kw.get("max_offset") is not None:
            kw["max_offset"] = np.array(np.broadcast_to(kw["max_offset"], lower.shape), dtype=np.float64)
        return cls(lower.copy(), upper.copy(), np.asarray(step, dtype=np.float64).copy(), period, **kw)

    def __post_init__(self) -> None:
        n = self.lower.shape
        if self.upper.shape != n or self.max_step.shape != n:
            raise ValueError("lower, upper and max_step must have one entry per actuator")
        if not (np.isfinite(self.lower).all() and np.isfinite(self.upper).all() and (self.lower <= self.upper).all()):
            raise ValueError("limits must be finite with lower <= upper")
        if not (np.isfinite(self.max_step).all() and (self.max_step > 0).all()):
            raise ValueError("max_step must be finite and > 0")
        if self.on_state_timeout not in ON_STATE_TIMEOUT:
            raise ValueError(f"on_state_timeout must be one of {ON_STATE_TIMEOUT}")
        if self.safe_pose is not None:
            self.safe_pose = np.clip(np.asarray(self.safe_pose, dtype=np.float64), self.lower, self.upper)
            if self.safe_pose.shape != n:
                raise ValueError("safe_pose must have one entry per actuator")
        offset = self.max_step.copy() if self.max_offset is None else np.asarray(self.max_offset, dtype=np.float64)
        if offset.shape != n or np.isnan(offset).any() or (offset <= 0).any():
            raise ValueError("max_offset must have one entry per actuator, each > 0 (inf: unbounded)")
        self.max_offset = offset
        if self.stamp_tolerance_s is None:
            self.stamp_tolerance_s = self.state_timeout_s


@dataclass
class EnvelopeStatus:
    """What the envelope is doing (for /diagnostics and logs).

    :param mode: ``disarmed``, ``soft_start``, ``running``, ``hold`` (no valid task: at the measured pose),
        ``state_timeout``, ``estop``
    :param events: counts: ``state_timeout`` (watchdog trips), ``inference_timeout``, ``nonfinite``,
        ``position_limit`` (ticks with a clipped command), ``rate_limit`` (ticks with a clipped step),
        ``track_limit`` (ticks whose command was pulled to within ``max_offset`` of the measured pose),
        ``stale_state`` (duplicate, out-of-order or non-finite stamps ignored), ``state_restart``
        (a state source that started over), ``hold`` (holds begun), ``estop``
    :param state_age_s: age of the last fresh state at the last tick
    :param last_event: the most recent event name (empty when none)
    :param reason: why the loop holds (mode ``hold``) or why it last re-armed (a restarted state source)
    :param rearmed: the soft start under way follows a restarted state source (``reason`` says which)
    :param restart_reason: why the state source was last taken to have started over
    """

    mode: str = "disarmed"
    events: Counter = field(default_factory=Counter)
    state_age_s: float = math.inf
    last_event: str = ""
    reason: str = ""
    rearmed: bool = False
    restart_reason: str = ""


class SafetyEnvelope:
    """Limits, rate limits, the measured envelope, watchdogs and the e-stop latch over a stream of commands.

    :param limits: the robot's :class:`SafetyLimits`

    Times (``now``, ``stamp``) are seconds on any monotonic clock the caller owns, so tests drive it
    with a fake clock and nothing sleeps. ``state_received`` stamps are the message stamps (robot or
    sim time) and only need to increase within one stream; the watchdog compares ``now`` with the
    ``now`` at which the last fresh state arrived.
    """

    def __init__(self, limits: SafetyLimits) -> None:
        self.limits = limits
        n = limits.lower.shape[0]
        self._last = np.zeros(n)  # last published command
        self._start = np.zeros(n)  # soft-start pose
        self._hold = np.zeros(n)  # pose held without a valid task
        self._target = np.zeros(n)
        self._step = np.zeros(n)
        self._lo, self._hi = np.zeros(n), np.zeros(n)  # the measured envelope of this tick
        self._neg_step = -limits.max_step
        self._round_lo = np.zeros(n)
        self._round_hi = np.zeros(n)
        self.stream = StateStream(n, limits.stamp_tolerance_s, limits.max_step / limits.period, limits.max_offset)
        self._clipped = np.zeros(max(1, round(limits.clip_window_s / limits.period)), dtype=bool)
        self._ticks = 0
        self.arms = 0  #: how often :meth:`arm` started a soft start (each one starts from the measured pose)
        self.status = EnvelopeStatus()
        self.reset()

    # ----------------------------------------------------------------- lifecycle
    def reset(self) -> None:
        """Disarm and clear the e-stop latch (a deactivate/activate cycle); counters are kept."""
        self.armed = False
        self.estopped = False
        self._t_start = 0.0
        self._stale = False
        self.stream.forget()
        self._clipped[:] = False
        self._ticks = 0
        self.status.mode = "disarmed"
        self.status.reason, self.status.rearmed = "", False

    def restart_stream(self, reason: str = "") -> None:
        """The robot's state stream restarted (a simulator reset: stamps start over, the pose jumped).

        Disarms (soft start again from the next measured pose) and forgets the last stamp; the
        e-stop latch stays. ``reason`` (when given) is reported like a detected restart.
        """
        self.armed = False
        self.stream.forget()
        self._stale = False
        if reason:
            self._event("state_restart")
            self.status.reason, self.status.rearmed, self.status.restart_reason = reason, True, reason
        if not self.estopped:
            self.status.mode = "disarmed"

    def disarm(self) -> None:
        """Stop publishing until the next :meth:`arm` (which soft-starts from the measured pose again)."""
        self.armed = False
        if not self.estopped:
            self.status.mode = "disarmed"

    def arm(self, measured_command: np.ndarray, now: float) -> bool:
        """Start (or start again) from the measured pose (in command space); soft start runs from ``now``.

        Returns False (stays disarmed) when the pose is not finite or the e-stop is latched.
        """
        pose = np.asarray(measured_command, dtype=np.float64)
        if self.estopped or pose.shape != self._last.shape or not np.isfinite(pose).all():
            return False
        np.clip(pose, self.limits.lower, self.limits.upper, out=self._start)
        self._last[:] = self._start
        self._t_start = now
        self.armed = True
        self.arms += 1
        self.status.mode = "soft_start" if self.limits.soft_start_s > 0 else "running"
        if self.status.mode == "running":
            self.status.rearmed = False
        return True

    def estop(self) -> None:
        """Latch the e-stop: :meth:`filter` returns None until :meth:`reset`."""
        if not self.estopped:
            self.status.events["estop"] += 1
            self.status.last_event = "estop"
        self.estopped = True
        self.status.mode = "estop"

    # ----------------------------------------------------------------- inputs
    def state_received(
        self,
        stamp: float,
        now: float,
        measured: np.ndarray | None = None,
        seq: int | None = None,
        source: object = None,
    ) -> bool:
        """A joint state stamped ``stamp`` arrived at ``now``; returns whether it is fresh.

        Duplicate, out-of-order and non-finite stamps are not fresh: they do not feed the
        watchdog and the caller should not use their values. A state that shows the source
        started over (:class:`~embodied_ws.deploy.stream.StateStream`) is fresh, disarms the
        envelope and is reported (``state_restart``): the caller re-arms from the measured pose.

        :param stamp: the message stamp (s)
        :param now: arrival time on the caller's clock (s)
        :param measured: the measured pose in command space (feeds the measured envelope)
        :param seq: the publisher's sequence number of the message, where known
        :param source: the publisher's identity (GID), where known
        """
        verdict = self.stream.check(stamp, now, measured, seq, source, self.armed, self._stale)
        if not verdict.fresh:
            self.status.events["stale_state"] += 1
            return False
        if verdict.restart:
            self.restart_stream(verdict.restart)
            self.stream.check(stamp, now, measured, seq, source)  # the first state of the new stream
        return True

    @property
    def last_command(self) -> np.ndarray | None:
        """The last command :meth:`filter` let through (a copy), or None before arming."""
        return self._last.copy() if self.armed else None

    @property
    def measured(self) -> np.ndarray | None:
        """The last fresh measured pose in command space (a copy), or None before one arrived."""
        return self.stream.measured.copy() if self.stream.has_measured else None

    @property
    def holding(self) -> bool:
        """Whether the loop holds at the measured pose for want of a valid task."""
        return self.armed and self.status.mode == "hold"

    def state_timed_out(self, now: float) -> bool:
        """Whether the last fresh state is older than ``state_timeout_s`` at ``now``."""
        return now - self.stream.last_time > self.limits.state_timeout_s

    def clipping(self) -> tuple[int, int]:
        """``(ticks whose command hit a position limit, ticks)`` over the last ``clip_window_s``."""
        n = min(self._ticks, self._clipped.size)
        return int(self._clipped.sum()), n

    # ----------------------------------------------------------------- the filter
    def filter(
        self, command: np.ndarray | None, now: float, compute_s: float = 0.0, hold: str = ""
    ) -> np.ndarray | None:
        """The safe command to publish at ``now`` for ``command``, or None to publish nothing.

        :param command: the policy's command in command space (any values, NaN included; ignored when holding)
        :param now: current time on the caller's clock
        :param compute_s: seconds spent computing ``command`` (inference watchdog)
        :param hold: why there is nothing to pursue (no valid task): hold at the pose measured when the
            hold began instead of following ``command``
        :return: a new array (safe to keep), or None when e-stopped or not armed
        """
        if self.estopped or not self.armed:
            return None
        lim, st, target = self.limits, self.status, self._target
        st.state_age_s = now - self.stream.last_time
        keep = False  # the target is a pose being kept (a hold): the limits do not pull it elsewhere
        if st.state_age_s > lim.state_timeout_s:
            if not self._stale:
                self._event("state_timeout")
                self._stale = True
            st.mode = "state_timeout"
            if lim.on_state_timeout == "safe_pose" and lim.safe_pose is not None:
                target[:] = lim.safe_pose
            else:
                target[:] = self._last
                keep = True
        elif hold:
            self._stale = False
            if st.mode != "hold" or st.reason != hold:
                self._event("hold")
                self._hold[:] = self.stream.measured if self.stream.has_measured else self._last
                self._last[:] = self._hold  # commanding where the robot is never moves it
                st.mode, st.reason, st.rearmed = "hold", hold, False
            target[:] = self._hold
            keep = True
        else:
            self._stale = False
            if st.mode == "hold":  # a goal again: soft start from the measured pose (ControlCore re-arms first)
                self.arm(self.stream.measured if self.stream.has_measured else self._last, now)
            command = np.asarray(command, dtype=np.float64)
            if lim.inference_timeout_s > 0 and compute_s > lim.inference_timeout_s:
                self._event("inference_timeout")
                target[:] = self._last
            elif command.shape != target.shape or not np.isfinite(command).all():
                self._event("nonfinite")
                target[:] = self._last
            else:
                ramp = (now - self._t_start) / lim.soft_start_s if lim.soft_start_s > 0 else 1.0
                if ramp < 1.0:
                    # soft start: blend from the measured start pose (clip first: 1e300 · α stays finite)
                    np.clip(command, lim.lower, lim.upper, out=target)
                    target -= self._start
                    target *= max(ramp, 0.0)
                    target += self._start
                    st.mode = "soft_start"
                else:
                    target[:] = command
                    st.mode, st.rearmed = "running", False
        lower, upper = lim.lower, lim.upper
        if keep:  # no goal, no motion: the limits never pull a held robot away from where it is (or was) measured
            lower, upper = np.minimum(lower, target), np.maximum(upper, target)
            if self.stream.has_measured:
                lower, upper = np.minimum(lower, self.stream.measured), np.maximum(upper, self.stream.measured)
        return self._bound(target, lower, upper)

    def _bound(self, target: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
        """Position limits, max change per tick, then the measured envelope; ``target`` becomes the command."""
        lim, st = self.limits, self.status
        clipped = bool((target < lower).any() or (target > upper).any())
        if clipped:
            st.events["position_limit"] += 1
            np.clip(target, lower, upper, out=target)
        self._clipped[self._ticks % self._clipped.size] = clipped
        self._ticks += 1
        step = np.subtract(target, self._last, out=self._step)
        if (step > lim.max_step).any() or (step < self._neg_step).any():
            st.events["rate_limit"] += 1
            np.clip(step, self._neg_step, lim.max_step, out=step)
        self._last += step
        if self.stream.has_measured:  # never further than max_offset from where the robot is
            np.subtract(self.stream.measured, lim.max_offset, out=self._lo)
            np.add(self.stream.measured, lim.max_offset, out=self._hi)
            if (self._last < self._lo).any() or (self._last > self._hi).any():
                st.events["track_limit"] += 1
                np.clip(self._last, self._lo, self._hi, out=self._last)
            # rounding never leaves the limits, except where the robot itself is measured outside them
            np.minimum(lower, self._hi, out=self._round_lo)
            np.maximum(upper, self._lo, out=self._round_hi)
            np.clip(self._last, self._round_lo, self._round_hi, out=self._last)
        else:
            np.clip(self._last, lower, upper, out=self._last)
        return self._last.copy()

    def _event(self, name: str) -> None:
        self.status.events[name] += 1
        self.status.last_event = name

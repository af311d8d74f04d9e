"""Is this joint state the next one of the same stream, a stale one, or the first of a source that started over?

A robot driver restart, a clock jump backwards, a bag replay and a simulator reset are one class:
**a state source that starts over**. After one, the last command may be far from where the robot
now is, so the envelope holds at the *measured* pose and soft-starts again (see
:mod:`embodied_ws.deploy.safety`). :class:`StateStream` tells the cases apart, in this order:

1. a different publisher (its GID, where the middleware gives one) → restart;
2. the publisher's sequence number went back (a new publisher: its numbers start at 1 again) → restart;
3. the stamp went back by more than ``stamp_tolerance_s`` → restart; by less (a duplicate or a
   reordered message) → stale, ignored, unless its measured position is further from the last one
   than the velocity limit allows over the stamps between them (plus twice ``max_offset``): a duplicate
   or a reordered state is where the robot was, so this is a reset that came soon after the last
   (a simulator reset whose clock had not yet run past ``stamp_tolerance_s``) → restart. A stale state
   that is the same publisher's newer message (a higher sequence number) still moves the measured pose
   the envelope bounds commands around: it is where the robot is now;
4. while the loop is armed, states that come back after the state watchdog tripped → restart (the
   robot may have been moved meanwhile);
5. while armed, a measured position that moved further than the velocity limit allows over the
   elapsed time (plus twice ``max_offset`` for servo lag) → restart.

No ROS, no clock of its own: the caller passes stamps (robot or sim time) and ``now`` (its monotonic clock).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class Verdict:
    """What :meth:`StateStream.check` decided about one state.

    :param fresh: use the state (also true for the first state of a restarted source)
    :param restart: why the source is taken to have started over (empty: it did not)
    """

    fresh: bool
    restart: str = ""


class StateStream:
    """The identity and continuity of one ``/joint_states`` stream.

    :param n: actuators (length of the measured pose in command space)
    :param stamp_tolerance_s: a stamp that goes back by more than this starts a new stream
    :param velocity: per actuator, the fastest the robot is commanded to move (units/s)
    :param max_offset: per actuator, how far a command may lead the measured pose (``inf``: no
        jump check for that actuator)
    """

    def __init__(self, n: int, stamp_tolerance_s: float, velocity: np.ndarray, max_offset: np.ndarray) -> None:
        self.tolerance = float(stamp_tolerance_s)
        self.velocity = np.asarray(velocity, dtype=np.float64)
        self.max_offset = np.asarray(max_offset, dtype=np.float64)
        self.measured = np.zeros(n)
        self.has_measured = False
        self.forget()

    def forget(self) -> None:
        """Start over: the next state is taken as the first of a stream (nothing to compare with)."""
        self.last_stamp = -math.inf
        self.last_time = -math.inf
        self.last_seq: int | None = None
        self.source: object = None

    def check(
        self,
        stamp: float,
        now: float,
        measured: np.ndarray | None = None,
        seq: int | None = None,
        source: object = None,
        armed: bool = False,
        stalled: bool = False,
    ) -> Verdict:
        """Classify the state stamped ``stamp`` that arrived at ``now``; a fresh one becomes the stream's last.

        :param stamp: the state's stamp (s)
        :param now: arrival time on the caller's monotonic clock (s)
        :param measured: the measured pose in command space (None: no jump check)
        :param seq: the publisher's sequence number of this message, where known
        :param source: an identity of the publisher (its GID), where known
        :param armed: whether commands are being published (the jump and resume checks apply only then)
        :param stalled: whether the state watchdog tripped since the last fresh state
        """
        if not math.isfinite(stamp):
            return Verdict(False)
        reason = "" if self.last_stamp == -math.inf else self._new_source(stamp, seq, source)
        if not reason:
            if stamp <= self.last_stamp:
                reason = self._teleported(self.last_stamp - stamp, measured)
                if not reason:
                    if measured is not None and seq is not None and self.last_seq is not None and seq > self.last_seq:
                        # the same publisher's newer message (its clock stepped back a little): not fresh, but
                        # the latest measurement of the robot, so the measured envelope follows it
                        self.measured[:] = measured
                        self.last_seq = seq
                    return Verdict(False)  # a duplicate or a reordered state: where the robot was
            elif armed:
                reason = self._discontinuity(stamp, now, measured, stalled)
        self.last_stamp, self.last_time = stamp, now
        if seq is not None:
            self.last_seq = seq
        if source is not None:
            self.source = source
        if measured is not None:
            self.measured[:] = measured
            self.has_measured = True
        return Verdict(True, reason)

    def _new_source(self, stamp: float, seq: int | None, source: object) -> str:
        if source is not None and self.source is not None and source != self.source:
            return "a new publisher on /joint_states"
        if seq is not None and self.last_seq is not None and seq < self.last_seq:
            return f"the publisher's sequence number went back from {self.last_seq} to {seq} (a new publisher)"
        if stamp < self.last_stamp - self.tolerance:
            return f"the state stamp went back {self.last_stamp - stamp:.3f} s"
        return ""

    def _teleported(self, back_s: float, measured: np.ndarray | None) -> str:
        """Why a state stamped ``back_s`` before the last one cannot be an old state of this stream ('' if it can)."""
        if measured is None or not self.has_measured:
            return ""
        allowed = 2.0 * self.velocity * back_s + 2.0 * self.max_offset
        jump = np.abs(np.asarray(measured, dtype=np.float64) - self.measured)
        if not (jump > allowed).any():
            return ""
        i = int(np.argmax(jump - allowed))
        return (f"the state stamp went back {back_s:.3f} s with actuator {i} {jump[i]:.3f} away from its last "
                f"measured position (a reset)")  # fmt: skip

    def _discontinuity(self, stamp: float, now: float, measured: np.ndarray | None, stalled: bool) -> str:
        if stalled:
            return f"states came back after {now - self.last_time:.2f} s without any"
        if measured is not None and self.has_measured:
            dt = min(stamp - self.last_stamp, max(now - self.last_time, 0.0) + self.tolerance)
            allowed = 2.0 * self.velocity * dt + 2.0 * self.max_offset
            jump = np.abs(np.asarray(measured, dtype=np.float64) - self.measured)
            if (jump > allowed).any():
                i = int(np.argmax(jump - allowed))
                return (f"the measured position of actuator {i} jumped {jump[i]:.3f} in {dt:.3f} s "
                        f"(at most {allowed[i]:.3f} at the velocity limit)")  # fmt: skip
        return ""

"""Fixed-rate loops and their statistics (achieved rate, jitter) for the control loop and ``/diagnostics``."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np


class RateMeter:
    """Tick times in a ring buffer: achieved rate and period jitter over the last ``window`` ticks.

    :param rate_hz: the target rate
    :param window: how many recent ticks the statistics cover
    """

    def __init__(self, rate_hz: float, window: int = 1024) -> None:
        self.period = 1.0 / rate_hz
        self._t = np.zeros(window)
        self._n = 0

    def tick(self, now: float) -> None:
        """Record a tick at ``now`` (seconds)."""
        self._t[self._n % self._t.size] = now
        self._n += 1

    def _times(self) -> np.ndarray:
        n = min(self._n, self._t.size)
        return np.roll(self._t, -(self._n % self._t.size))[-n:] if self._n > self._t.size else self._t[:n]

    def achieved_hz(self) -> float:
        """Ticks per second over the window (0 before two ticks)."""
        t = self._times()
        return float((t.size - 1) / (t[-1] - t[0])) if t.size > 1 and t[-1] > t[0] else 0.0

    def jitter_ms(self, q: float = 99.0) -> float:
        """Percentile ``q`` of ``|period − target|`` in milliseconds."""
        t = self._times()
        if t.size < 2:
            return 0.0
        return float(np.percentile(np.abs(np.diff(t) - self.period), q) * 1e3)


def request_realtime(priority: int) -> str:
    """Put the calling thread under ``SCHED_FIFO`` at ``priority`` (1-99), as robot control loops run.

    A busy machine preempts a normal-priority loop for whole scheduler slices (missed periods);
    a real-time thread is not. Returns what happened, for the log: refused (no permission, not
    Linux) is not an error, the loop then runs at normal priority.

    :param priority: SCHED_FIFO priority; 0 returns the thread to normal scheduling
    """
    import os

    if priority <= 0:
        try:
            if os.sched_getscheduler(0) != os.SCHED_OTHER:
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        except (AttributeError, OSError):
            pass
        return "normal priority"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (AttributeError, OSError) as exc:
        return f"normal priority (SCHED_FIFO {priority} refused: {exc})"
    return f"SCHED_FIFO priority {priority}"


def run_fixed_rate(
    step: Callable[[float], object],
    rate_hz: float,
    duration_s: float,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> np.ndarray:
    """Call ``step(now)`` at ``rate_hz`` for ``duration_s`` on absolute deadlines (no drift); returns the tick times.

    Sleeps until ~0.3 ms before each deadline, then spins (OS sleeps overshoot by up to a scheduler
    tick). A late tick runs at once on the original grid; deadlines missed by more than a period
    are dropped, not bunched.

    :param step: the work of one tick, given the tick's time
    :param rate_hz: target rate
    :param duration_s: how long to run
    :param clock: monotonic seconds
    :param sleep: how to wait
    """
    period = 1.0 / rate_hz
    start = clock()
    end = start + duration_s
    times = []
    k = 0
    while True:
        deadline = start + k * period
        if deadline >= end:
            break
        left = deadline - clock()
        if left > 3e-4:
            sleep(left - 3e-4)
        while clock() < deadline:
            pass
        now = clock()
        times.append(now)
        step(now)
        k += 1
        behind = clock() - (start + k * period)
        if behind > period:  # a whole period behind: drop the missed deadlines instead of bunching them
            k += int(behind / period)
    return np.asarray(times)

"""Frame times of a dataset episode and which recorded message each frame takes (pure numpy, no ROS, no LeRobot).

A LeRobot episode at ``fps`` has frame ``k`` at ``t0 + k / fps``; :func:`frame_time_ns` is the one place
that turns that into integer nanoseconds, so ``lerobot2bag`` stamps and ``bag2lerobot`` grids agree to the
nanosecond. Each frame takes the sample of a continuous signal (joint states, camera) nearest its time and
the command *answering* it. A policy sends its command a little after the state it answers (its latency),
so commands are matched to frames by phase: :func:`command_phase` measures the commands' typical delay
after the frame times, and frame ``k`` takes the last command sent before ``t_k + delay + period / 2``
(a command holds until the next one; a lost command leaves the previous one in force).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embodied_ws.core.errors import UserError

NS = 1_000_000_000


@dataclass
class Rate:
    """A dataset frame rate and where it came from.

    :param fps: frames per second (LeRobot wants an integer)
    :param source: where it came from, in words (printed by the verbs, stored in the sidecar)
    :param measured_hz: the rate measured from message stamps (None when it was given)
    """

    fps: int
    source: str
    measured_hz: float | None = None


def frame_time_ns(t0: int, k: np.ndarray | int, fps: int) -> np.ndarray:
    """Stamp (ns) of frame ``k`` of an episode starting at ``t0``: ``t0 + k / fps`` rounded to the nanosecond."""
    k = np.asarray(k, dtype=np.int64)
    return t0 + (k * NS + fps // 2) // fps


def measured_rate(stamps_ns: np.ndarray, topic: str, where: str) -> Rate:
    """The rate of a topic from its stamps, rounded to whole frames per second.

    The median gap is a first guess; each gap then counts as a whole number of such periods (a lost
    message makes a gap of two), and the period is the whole span over that count, so receive-time
    jitter averages out over the recording.
    """
    d = np.diff(np.asarray(stamps_ns, dtype=np.int64))
    d = d[d > 0]
    if len(d) < 2:
        raise UserError(f"too few {topic} messages to measure their rate; set fps in the --map file", where)
    guess = float(np.median(d))
    period = float(d.sum()) / max(int(np.round(d / guess).sum()), 1)
    hz = NS / period
    if round(hz) < 1:
        raise UserError(f"{topic} comes at {hz:.3g} Hz, below one frame per second; set fps in the --map file", where)
    return Rate(round(hz), f"measured from the {topic} stamps ({hz:.2f} Hz)", hz)


def nearest(stamps: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the stamp nearest to each ``t`` (``stamps`` sorted; ties take the earlier one)."""
    if len(stamps) == 1:
        return np.zeros(len(t), dtype=np.int64)
    i = np.clip(np.searchsorted(stamps, t), 1, len(stamps) - 1)
    return np.where(np.abs(stamps[i - 1] - t) <= np.abs(stamps[i] - t), i - 1, i)


def held(stamps: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the last stamp at or before each ``t`` (-1 where there is none)."""
    return np.searchsorted(stamps, t, side="right") - 1


def command_phase(action_t: np.ndarray, t0: int, fps: int) -> int:
    """The commands' typical delay (ns) after the frame times ``t0 + k / fps``, in (-period/4, 3·period/4].

    The circular mean of the commands' phases in the frame period (robust to a phase near 0 wrapping
    to the period); commands up to a quarter period early still answer the frame after them (clock offsets).
    """
    period = NS / fps
    angles = 2 * np.pi * (np.asarray(action_t - t0, dtype=np.float64) % period) / period
    phi = float(np.angle(np.mean(np.exp(1j * angles)))) * period / (2 * np.pi)
    return round(phi + period if phi <= -period / 4 else phi)


@dataclass
class Frames:
    """Which message each frame takes.

    :param times: frame stamps (ns)
    :param state: index into the state samples
    :param action: index into the commands
    :param cameras: camera name → index into its images
    """

    times: np.ndarray
    state: np.ndarray
    action: np.ndarray
    cameras: dict[str, np.ndarray]


def sample_frames(
    fps: int, state_t: np.ndarray, action_t: np.ndarray, camera_t: dict[str, np.ndarray], where: str
) -> Frames:
    """Frames at ``fps`` over the span where state, every camera and commands are all present.

    The grid starts at the latest first sample of the state and the cameras and ends at the earliest
    last one; leading and trailing frames without a command in their window (before the policy started,
    after it stopped) are dropped, so every frame's action was really sent for it.
    """
    signals = [np.asarray(state_t, dtype=np.int64), *(np.asarray(c, dtype=np.int64) for c in camera_t.values())]
    action_t = np.asarray(action_t, dtype=np.int64)
    if any(len(s) == 0 for s in signals) or len(action_t) == 0:
        raise UserError("the state, a camera or the command topic has no messages", where)
    t0 = max(int(s[0]) for s in signals)
    t_end = min(int(s[-1]) for s in signals)
    if t_end < t0:
        raise UserError("the state and camera topics do not overlap in time", where)
    grid = frame_time_ns(t0, np.arange((t_end - t0) * fps // NS + 2), fps)
    times = grid[grid <= t_end]
    phase, half = command_phase(action_t, t0, fps), NS // (2 * fps)
    act = held(action_t, times + phase + half)  # the last command of the frame's window: the one answering it
    fresh = act >= 0
    fresh[fresh] &= action_t[act[fresh]] > times[fresh] + phase - half  # sent in this frame's window
    if not fresh.any():
        raise UserError("no command was sent while the state and camera were recorded", where)
    first, last = int(np.argmax(fresh)), len(fresh) - 1 - int(np.argmax(fresh[::-1]))
    keep = slice(first, last + 1)
    times, act = times[keep], act[keep]
    return Frames(
        times=times,
        state=nearest(signals[0], times),
        action=act,
        cameras={name: nearest(np.asarray(c, dtype=np.int64), times) for name, c in camera_t.items()},
    )

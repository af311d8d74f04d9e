"""Safety envelope properties (hypothesis, 10,000 generated cases each), driven with a fake clock: nothing sleeps.

Whatever the inputs (NaN, inf, 1e300 commands; duplicate, reordered and stale states; e-stop at any
moment), every command let through is inside the limits, within max change of the previous one,
none follows an e-stop, and the state watchdog trips within 2 × its timeout.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embodied_ws.deploy.safety import SafetyEnvelope, SafetyLimits

pytestmark = pytest.mark.slow  # 3 × 10,000 cases: ~30 s of CPU each
CASES = settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck), database=None)
N = 3
SPECIAL = np.array([math.nan, math.inf, -math.inf, 1e300, -1e300, 1e-300, 0.0])


def wild(rng: np.random.Generator, shape: tuple[int, ...], bad: float) -> np.ndarray:
    """Values around the limits, with a fraction ``bad`` replaced by NaN, ±inf, ±1e300, subnormals or zeros."""
    x = rng.normal(0.0, 3.0, shape)
    mask = rng.random(shape) < bad
    x[mask] = rng.choice(SPECIAL, int(mask.sum()))
    return x


#: hypothesis draws the limits, the mix of bad values, the event count and a seed for the event stream
#: (a numpy stream of events keeps 10,000 cases per property within seconds)
STREAM = st.tuples(st.integers(0, 2**32 - 1), st.floats(0.0, 1.0), st.integers(1, 60))


def _limits(seed: int, rate: float, soft: float, timeout: float, mode: str, zero_span: bool) -> SafetyLimits:
    rng = np.random.default_rng(seed)
    lo = rng.uniform(-3.0, 0.0, N)
    span = np.zeros(N) if zero_span else rng.uniform(0.0, 3.0, N)
    return SafetyLimits.build(
        lo,
        lo + span,
        rate,
        max_step=float(rng.uniform(1e-3, 0.5)),
        max_velocity=float(rng.uniform(0.01, 10.0)),
        soft_start_s=soft,
        state_timeout_s=timeout,
        inference_timeout_s=0.01,
        on_state_timeout=mode,
        safe_pose=rng.uniform(-4.0, 4.0, N),
    )


#: limits: random bounds/steps from a seed, the discrete settings drawn by hypothesis itself
LIMITS = st.builds(
    _limits,
    st.integers(0, 2**32 - 1),
    st.sampled_from([25.0, 100.0, 500.0]),
    st.sampled_from([0.0, 0.05, 1.0]),
    st.sampled_from([0.05, 0.1, 0.25]),
    st.sampled_from(["hold", "safe_pose"]),
    st.booleans(),
)


def _ok_step(a: np.ndarray, b: np.ndarray, lim: SafetyLimits) -> bool:
    return bool((np.abs(b - a) <= lim.max_step * (1 + 1e-9) + 1e-12).all())


@CASES
@given(lim=LIMITS, stream=STREAM)
def test_every_published_command_is_inside_the_limits_and_the_max_change(lim, stream) -> None:
    """Commands: NaN/inf/huge; states: new, duplicate, out-of-order and restarted stamps; gaps that trip the
    watchdog (states after one restart the stream); e-stop."""
    seed, bad, n = stream
    rng = np.random.default_rng(seed)
    kinds = rng.integers(0, 7, n)  # 0-3 command tick (3: inference overrun), 4-5 state, 6 e-stop (rare)
    kinds[(kinds == 6) & (rng.random(n) < 0.8)] = 0
    dts, values, dstamps = rng.exponential(0.03, n), wild(rng, (n, N), bad), rng.integers(-2, 3, n)
    env = SafetyEnvelope(lim)
    now, stamp, newest = 0.0, 0.0, 0.0
    env.state_received(stamp, now)
    start = wild(rng, (N,), bad)
    armed = env.arm(start, now)
    assert armed == bool(np.isfinite(start).all())
    prev = env.last_command
    estopped = False
    for kind, dt, v, dstamp in zip(kinds, dts, values, dstamps, strict=True):
        now += dt
        if kind == 6:
            env.estop()
            estopped = True
        elif kind >= 4:
            stamp += dstamp * 0.01
            before = env.status.events["state_restart"]
            fresh = env.state_received(stamp, now)
            restarted = env.status.events["state_restart"] > before  # stamps back, or states after a stall
            assert fresh == (stamp > newest or restarted)
            assert restarted or stamp >= newest - lim.stamp_tolerance_s  # back past the tolerance: a restart
            newest = stamp if restarted else max(newest, stamp)
            if restarted and armed and not estopped:
                assert not env.armed and env.filter(v, now) is None  # disarmed until the caller re-arms
                assert env.arm(prev, now)  # (ControlCore: from the measured pose; here the last command)
        else:
            out = env.filter(v, now, compute_s=0.02 if kind == 3 else 0.0)
            if estopped or not armed:
                assert out is None
                continue
            assert out is not None and np.isfinite(out).all()
            assert (out >= lim.lower).all() and (out <= lim.upper).all(), (out, lim.lower, lim.upper)
            assert _ok_step(prev, out, lim), (prev, out, lim.max_step)
            prev = out


@CASES
@given(lim=LIMITS, stream=STREAM, at=st.integers(0, 60))
def test_nothing_is_published_after_an_estop_until_reset(lim, stream, at) -> None:
    seed, bad, n = stream
    rng = np.random.default_rng(seed)
    env = SafetyEnvelope(lim)
    env.state_received(0.0, 0.0)
    assert env.arm((lim.lower + lim.upper) / 2, 0.0)
    now, stamp = 0.0, 0.0
    for i in range(n):
        if i == at:
            env.estop()
        now += rng.exponential(0.03)
        v = wild(rng, (N,), bad)
        if rng.random() < 0.3:
            stamp += 0.01
            env.state_received(stamp, now)
            env.arm(v, now)  # re-arming attempts must not clear the latch
        if rng.random() < 0.1:
            env.restart_stream()  # nor a simulator reset
        out = env.filter(v, now)
        if i >= at:
            assert out is None
    env.reset()
    assert env.filter(np.zeros(N), now + 1.0) is None  # reset disarms: a new measured pose is needed
    assert env.status.events["estop"] == (1 if at < n else 0)


@CASES
@given(lim=LIMITS, seed=st.integers(0, 2**32 - 1), n_states=st.integers(1, 15), n_ticks=st.integers(1, 60))
def test_state_watchdog_trips_within_twice_its_timeout_and_holds(lim, seed, n_states, n_ticks) -> None:
    """States arrive at random times, then stop; ticks come at least once per timeout (the loop's contract)."""
    rng = np.random.default_rng(seed)
    timeout = lim.state_timeout_s
    env = SafetyEnvelope(lim)
    state_times = np.cumsum(rng.uniform(0.0, 0.3, n_states))
    ticks = np.cumsum(np.minimum(rng.exponential(timeout / 2, n_ticks) + 1e-4, timeout))
    si, last_state, prev = 0, -math.inf, None
    for now in ticks:
        while si < len(state_times) and state_times[si] <= now:
            if env.state_received(float(si), float(state_times[si])):
                last_state = state_times[si]
            si += 1
        if prev is None and last_state > -math.inf:
            env.arm(np.clip(np.zeros(N), lim.lower, lim.upper), float(now))
        before = env.status.events["state_timeout"]
        out = env.filter(np.full(N, 0.5), float(now))
        if not env.armed:
            continue
        age = now - last_state
        tripped = env.status.mode == "state_timeout"
        assert tripped == (age > timeout), (age, timeout, env.status.mode)
        if env.status.events["state_timeout"] > before:
            assert age <= 2 * timeout + 1e-9  # detected at the first tick past the timeout
        if tripped and prev is not None:
            if lim.on_state_timeout == "hold":
                assert np.array_equal(out, prev)
            else:  # heading for the safe pose, rate limited
                assert np.all(np.abs(out - lim.safe_pose) <= np.abs(prev - lim.safe_pose) + 1e-12)
        prev = out


def test_soft_start_ramps_from_the_measured_pose() -> None:
    lim = SafetyLimits.build(np.full(N, -2.0), np.full(N, 2.0), 100.0, 1.0, 100.0, soft_start_s=1.0)
    env = SafetyEnvelope(lim)
    env.state_received(0.0, 0.0)
    env.arm(np.zeros(N), 0.0)
    outs = []
    for k in range(1, 150):
        env.state_received(k * 0.01, k * 0.01)
        outs.append(env.filter(np.ones(N), k * 0.01)[0])
    assert outs[0] == pytest.approx(0.01) and outs[49] == pytest.approx(0.5) and outs[-1] == 1.0
    assert env.status.mode == "running"


def test_inference_overrun_and_nonfinite_commands_hold_and_are_counted() -> None:
    lim = SafetyLimits.build(np.full(N, -1.0), np.full(N, 1.0), 100.0, 0.1, 100.0, soft_start_s=0.0)
    env = SafetyEnvelope(lim)
    env.state_received(0.0, 0.0)
    env.arm(np.zeros(N), 0.0)
    first = env.filter(np.full(N, 0.05), 0.001)
    assert np.array_equal(env.filter(np.full(N, 0.5), 0.002, compute_s=0.5), first)
    assert np.array_equal(env.filter(np.array([0.5, math.nan, 0.5]), 0.003), first)
    assert np.array_equal(env.filter(np.array([math.inf, -math.inf, 0.0]), 0.004), first)
    ev = env.status.events
    assert ev["inference_timeout"] == 1 and ev["nonfinite"] == 2
    assert np.allclose(env.filter(np.full(N, 5.0), 0.005), first + 0.1)  # limit and rate limit
    assert ev["position_limit"] == 1 and ev["rate_limit"] == 1


# ------------------------------------------------------------------ a state source that starts over
def _armed(soft: float = 0.0, rate: float = 25.0) -> SafetyEnvelope:
    lim = SafetyLimits.build(np.full(N, -2.0), np.full(N, 2.0), rate, 0.1, 2.0, soft_start_s=soft, state_timeout_s=0.25)
    env = SafetyEnvelope(lim)
    assert env.state_received(10.0, 0.0, np.zeros(N), seq=100)
    assert env.arm(np.zeros(N), 0.0)
    return env


@pytest.mark.parametrize(
    ("stamp", "now", "measured", "seq", "source", "why"),
    [
        (5.0, 0.04, np.zeros(N), 101, None, "stamp went back 5.000 s"),
        (10.04, 0.04, np.zeros(N), 1, None, "sequence number went back from 100 to 1"),
        (10.04, 0.04, np.zeros(N), None, b"other", "a new publisher"),
        (10.04, 0.04, np.array([0.0, 0.9, 0.0]), 101, None, "actuator 1 jumped 0.900"),
        (10.5, 0.5, np.zeros(N), 101, None, "came back after 0.50 s"),
        # a reset soon after the last one: back less than the tolerance, but nowhere the robot was
        (9.9, 0.04, np.array([0.0, 0.9, 0.0]), 101, None, "went back 0.100 s with actuator 1 0.900 away"),
        (10.0, 0.04, np.array([0.0, 0.0, -0.5]), 101, None, "actuator 2 0.500 away from its last measured"),
    ],
)
def test_a_state_source_that_starts_over_disarms_and_says_why(stamp, now, measured, seq, source, why) -> None:
    env = _armed(soft=1.0)
    env.stream.source = b"first" if source is not None else None
    if now >= 0.5:  # the watchdog tripped before the states came back
        assert env.filter(np.zeros(N), 0.3) is not None and env.status.mode == "state_timeout"
    assert env.state_received(stamp, now, measured, seq=seq, source=source)  # fresh: the new stream's first
    assert not env.armed and env.filter(np.ones(N), now) is None
    assert env.status.events["state_restart"] == 1 and why in env.status.reason and env.status.rearmed
    assert env.arm(measured, now)  # the caller re-arms from the measured pose: the first command holds there
    assert np.array_equal(env.filter(np.ones(N), now), measured)


def test_small_reorders_and_duplicates_are_stale_not_restarts() -> None:
    env = _armed()
    assert env.state_received(10.04, 0.04, np.zeros(N), seq=101)
    assert not env.state_received(10.04, 0.05, np.zeros(N), seq=102)  # duplicate stamp
    assert not env.state_received(9.9, 0.06, np.zeros(N), seq=103)  # back 0.14 s < tolerance (state_timeout_s)
    assert env.state_received(10.08, 0.08, np.full(N, 0.05), seq=104)  # moved within the velocity limit
    assert env.armed and env.status.events["state_restart"] == 0 and env.status.events["stale_state"] == 2


def test_a_stale_state_that_is_the_publishers_newest_still_moves_the_measured_envelope() -> None:
    env = _armed()
    assert env.state_received(10.04, 0.04, np.zeros(N), seq=101)
    # the clock stepped back a little (less than the tolerance) and the robot is 0.06 away: stale, not a restart
    assert not env.state_received(9.95, 0.05, np.array([0.06, 0.0, 0.0]), seq=102)
    assert env.armed and env.status.events["state_restart"] == 0
    assert np.allclose(env.measured, [0.06, 0.0, 0.0])  # where the robot is now bounds the next command
    out = env.filter(np.array([-1.0, 0.0, 0.0]), 0.06)
    assert abs(out[0] - 0.06) <= 0.1 + 1e-9


@CASES
@given(lim=LIMITS, stream=STREAM)
def test_no_command_is_ever_further_than_max_offset_from_the_measured_pose(lim, stream) -> None:
    """Measured poses that wander, jump and restart (stamps back, new sequence numbers); commands anywhere;
    the caller re-arms from the measured pose whenever the envelope disarms (as ControlCore does)."""
    seed, bad, n = stream
    rng = np.random.default_rng(seed)
    env = SafetyEnvelope(lim)
    now, stamp, seq = 0.0, 0.0, 1
    pose = np.clip(rng.normal(0.0, 1.0, N), lim.lower, lim.upper)
    env.state_received(stamp, now, pose, seq=seq)
    for kind, dt, v in zip(rng.integers(0, 6, n), rng.exponential(0.03, n), wild(rng, (n, N), bad), strict=True):
        now += dt
        if kind == 4:  # a state: drift, a jump, or a source that starts over
            how = rng.integers(0, 4)
            pose = pose + (rng.normal(0.0, 0.02, N) if how < 2 else rng.normal(0.0, 2.0, N))
            stamp, seq = (0.0, 1) if how == 3 else (stamp + dt, seq + 1)
            env.state_received(stamp, now, pose, seq=seq)
        elif kind == 5:  # a hold keeps the pose where it began (even outside the limits): only the offset applies
            out = env.filter(None, now, hold="no task")
            if out is not None:
                assert (np.abs(out - env.measured) <= lim.max_offset * (1 + 1e-9) + 1e-12).all()
        else:
            if not env.armed:
                assert env.arm(pose, now)
            out = env.filter(v, now)
            if out is None:
                continue
            measured = env.measured
            assert np.isfinite(out).all()
            assert (np.abs(out - measured) <= lim.max_offset * (1 + 1e-9) + 1e-12).all(), (out, measured)
            inside = (measured >= lim.lower).all() and (measured <= lim.upper).all()
            kept = env.status.mode == "state_timeout"  # the watchdog keeps the last command (perhaps a hold's)
            assert kept or not inside or ((out >= lim.lower).all() and (out <= lim.upper).all())


def test_hold_stays_at_the_pose_measured_when_it_began_and_counts_clipping() -> None:
    env = _armed()
    out = env.filter(None, 0.04, hold="no task")
    assert np.array_equal(out, np.zeros(N)) and env.status.mode == "hold" and env.status.reason == "no task"
    env.state_received(10.04, 0.04, np.full(N, 0.03))  # a servo sagging under gravity: the hold does not follow
    assert np.array_equal(env.filter(None, 0.08, hold="no task"), np.zeros(N))
    assert env.status.events["hold"] == 1
    env.arm(np.full(N, 0.03), 0.1)  # a goal: soft start from the measured pose
    for k in range(60):  # a target past the upper limit: clipped on every tick
        env.state_received(10.1 + 0.04 * k, 0.1 + 0.04 * k, np.minimum(0.03 + 0.08 * k, 1.95) * np.ones(N))
        env.filter(np.full(N, 5.0), 0.1 + 0.04 * k)
    clipped, ticks = env.clipping()
    assert ticks == 50 and clipped == 50  # the 2 s window at 25 Hz

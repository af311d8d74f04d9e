"""The ROS-free control-loop core: same observation and commands as training, layout checks, limits, properties."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from deploy_helpers import deploy_parity, untrained_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embodied_ws.config.loader import load_dr
from embodied_ws.core.errors import UserError
from embodied_ws.deploy.artifact import resolve_target
from embodied_ws.deploy.control import ControlCore
from embodied_ws.sim.env import RobotEnv

OPEN = ["deploy.limit_margin=0", "deploy.max_step=10", "deploy.max_velocity=1000", "deploy.soft_start_s=0"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return untrained_run(tmp_path_factory.mktemp("deploy") / "run")


def test_observation_and_commands_are_the_training_envs(run: Path) -> None:
    """Envelope wide open: the core sees exactly what the training env sees and commands what it would."""
    target = resolve_target(run, OPEN)
    core = ControlCore(target)
    env = RobotEnv(target.config, load_dr(target.config.dr), seed=3)
    obs, _ = env.reset()
    core.set_goal(env.core.goal[0])
    worst_obs, worst_cmd = deploy_parity(core, env, obs)
    assert worst_obs <= 1e-6 and worst_cmd <= 1e-9, (worst_obs, worst_cmd)
    assert core.envelope.status.mode == "running"


def test_a_policy_for_another_robot_is_one_line_naming_the_field(run: Path) -> None:
    with pytest.raises(UserError, match=r"policy\.json: action field 0 is 'base_yaw' in the policy but 'slider'") as e:
        ControlCore(resolve_target(run, ["deploy.robot=cartpole"]))
    assert "\n" not in e.value.line()


def test_an_observation_layout_mismatch_names_the_field(run: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy"
    policy.mkdir()
    meta = json.loads((run / "policy" / "policy.json").read_text())
    names = meta["observation"]["names"]
    names[3], names[4] = names[4], names[3]
    (policy / "policy.json").write_text(json.dumps(meta))
    (policy / "policy.safetensors").write_bytes((run / "policy" / "policy.safetensors").read_bytes())
    with pytest.raises(UserError, match=r"observation field 3 is 'qd/shoulder' in the policy but 'qd/base_yaw'"):
        ControlCore(resolve_target(policy))  # a bare policy folder: config rebuilt from policy.json


def test_missing_folder_and_bad_deploy_keys_are_one_line(run: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such run or policy folder"):
        resolve_target(tmp_path / "ghost")
    with pytest.raises(UserError, match="not a run or policy folder"):
        resolve_target(tmp_path)
    with pytest.raises(UserError, match=r"--set deploy.max_speed: unknown key 'max_speed'"):
        resolve_target(run, ["deploy.max_speed=1"])
    with pytest.raises(UserError, match=r"deploy.on_state_timeout: must be hold or safe_pose"):
        resolve_target(run, ["deploy.on_state_timeout=panic"])
    with pytest.raises(UserError, match=r"deploy.state_timeout_s: must be at least two control periods"):
        ControlCore(resolve_target(run, ["deploy.state_timeout_s=0.01"]))


def test_limits_come_from_policy_model_and_limits_file(run: Path, tmp_path: Path) -> None:
    sets = ["deploy.limit_margin=0.1", "deploy.max_step=0.05", "deploy.max_velocity=1"]
    core = ControlCore(resolve_target(run, sets))
    meta = json.loads((run / "policy" / "policy.json").read_text())
    lo, hi = np.array(meta["joints"]["lower"]), np.array(meta["joints"]["upper"])
    assert np.allclose(core.limits.lower, lo + 0.1 * (hi - lo)) and np.allclose(core.limits.upper, hi - 0.1 * (hi - lo))
    assert np.allclose(core.limits.max_step, 1.0 / 25)  # velocity 1 rad/s at 25 Hz is tighter than 0.05
    limits = tmp_path / "limits.yaml"
    limits.write_text("joints:\n  elbow: {lower: -0.5, upper: 0.7, max_velocity: 0.25}\n")
    core = ControlCore(resolve_target(run, [f"deploy.limits_file={limits}"]))
    assert core.limits.lower[2] == -0.5 and core.limits.upper[2] == 0.7 and core.limits.max_step[2] == 0.01
    limits.write_text("joints:\n  elbow: {lower: -0.5}\n  wrist: {upper: 1}\n")
    with pytest.raises(UserError, match=r"limits.yaml:3: unknown joint 'wrist'"):
        ControlCore(resolve_target(run, [f"deploy.limits_file={limits}"]))


def test_state_watchdog_holds_then_resumes_with_fresh_states(run: Path) -> None:
    core = ControlCore(resolve_target(run, ["deploy.soft_start_s=0"]))
    env = RobotEnv(core.cfg, load_dr(core.cfg.dr), seed=1)
    env.reset()
    core.set_goal(env.core.goal[0])
    q, qd = env.data.qpos[core.qpos_adr].copy(), env.data.qvel[core.qvel_adr].copy()
    assert core.tick(0.0) is None  # no state yet: nothing
    core.set_state(q, qd, 1.0, 0.0)
    cmds = [core.tick(t) for t in np.arange(0.04, 0.6, 0.04)]  # no new state after t=0
    held = [c for c, t in zip(cmds, np.arange(0.04, 0.6, 0.04), strict=True) if t > 0.25]
    assert all(np.array_equal(c, held[0]) for c in held) and core.envelope.status.mode == "state_timeout"
    assert core.envelope.status.events["state_timeout"] == 1
    assert not core.set_state(q, qd, 1.0, 0.6)  # a duplicate does not revive it
    assert core.set_state(q, qd, 2.0, 0.6)
    core.tick(0.64)
    assert core.envelope.status.mode == "running"


WILD = st.one_of(st.floats(), st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -1e300]), st.floats(-3, 3))
VEC3 = st.lists(WILD, min_size=3, max_size=3)
#: (kind, dt, values, values, stamp step): 0-2 tick, 3 state, 4 goal, 5 e-stop
EVENT = st.tuples(st.integers(0, 5), st.floats(0.0, 0.1), VEC3, VEC3, st.integers(-1, 1))


def _within(out: np.ndarray, prev: np.ndarray, measured: np.ndarray, lim) -> None:
    """Never further than ``max_offset`` from the measured pose; and every joint at most ``max_step`` from the last
    command unless the change brought it closer to where the robot is measured (a hold, a robot that moved)."""
    off = np.abs(out - measured)
    assert (off <= lim.max_offset * (1 + 1e-9) + 1e-12).all(), (out, measured)
    step_ok = np.abs(out - prev) <= lim.max_step * (1 + 1e-9) + 1e-12
    closer = off <= np.abs(prev - measured) + 1e-12
    assert (step_ok | closer).all(), (out, prev, measured)


@settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(events=st.lists(EVENT, max_size=12))
def test_core_never_publishes_outside_the_envelope(core_for_properties: ControlCore, events) -> None:
    """NaN/inf/huge joint states, velocities and goals; reordered/duplicate/backwards stamps; e-stop at any time.

    Every command is finite, inside the limits when the robot is measured inside them (a hold, and the state
    watchdog holding the last command, may keep a pose measured outside them), within ``max_offset`` of the
    measured pose, and within ``max_step`` of the previous command unless the loop re-armed from the measured
    pose (a restarted state source, a goal after a hold) or the change brought it closer to the measured pose.
    """
    core = core_for_properties
    core.reset()
    lim = core.limits
    core.set_goal(np.array([0.3, 0.0, 0.3]))
    core.set_state(np.array([0.0, 0.35, 0.9]), np.zeros(3), 0.0, 0.0)
    now, stamp, prev, stopped, arms = 0.0, 0.0, None, False, core.envelope.arms
    for kind, dt, a, b, dstamp in events:
        now += dt
        if kind == 3:
            stamp += dstamp
            core.set_state(np.array(a), np.array(b), stamp, now)
        elif kind == 4:
            core.set_goal(np.array(a))
        elif kind == 5:
            core.estop()
            stopped = True
        else:
            out = core.tick(now)
            if stopped:
                assert out is None
            elif out is not None:
                measured = core.envelope.measured
                inside = (measured >= lim.lower).all() and (measured <= lim.upper).all()
                held = core.envelope.status.mode in ("hold", "state_timeout")  # a kept pose
                assert np.isfinite(out).all()
                assert held or not inside or ((out >= lim.lower).all() and (out <= lim.upper).all())
                if prev is not None and core.envelope.arms == arms:
                    _within(out, prev, measured, lim)
                prev, arms = out, core.envelope.arms


@pytest.fixture(scope="module")
def core_for_properties(run: Path) -> ControlCore:
    return ControlCore(resolve_target(run, ["deploy.soft_start_s=0.2"]))


def test_realtime_priority_is_requested_validated_and_given_back(run: Path) -> None:
    import os

    from embodied_ws.deploy.rate import request_realtime

    how = request_realtime(5)
    try:  # root or CAP_SYS_NICE: granted; else a note, never an exception
        assert how == "SCHED_FIFO priority 5" or how.startswith("normal priority (SCHED_FIFO 5 refused")
    finally:
        assert request_realtime(0) == "normal priority"
    assert os.sched_getscheduler(0) == os.SCHED_OTHER
    with pytest.raises(UserError, match=r"deploy.realtime_priority: must be 0 \(off\) or 1-99, got 120"):
        resolve_target(run, ["deploy.realtime_priority=120"])


# ------------------------------------------------------------------ no goal, no motion; restarts; the e-stop gate
def _same(a: np.ndarray | None, b: np.ndarray) -> bool:
    return a is not None and bool(np.allclose(a, b, rtol=0.0, atol=1e-12))


def _core_at_home(run: Path, *sets: str) -> tuple[ControlCore, np.ndarray]:
    core = ControlCore(resolve_target(run, ["deploy.soft_start_s=0.5", *sets]))
    q = core.robot.home_qpos[core.qpos_adr].copy()
    assert core.set_state(q, np.zeros(3), 1.0, 0.0, seq=1)
    return core, q


def test_without_a_valid_task_the_core_holds_at_the_measured_pose_and_says_why(run: Path) -> None:
    from embodied_ws.deploy.status import loop_status

    core, q = _core_at_home(run)
    assert _same(core.tick(0.0), q) and core.envelope.status.mode == "hold"  # never got a task
    assert loop_status(core) == ("WARN", "holding at the measured pose: no task on /embodied/task yet")
    assert not core.set_goal(np.zeros(3))  # the sim's placeholder: the robot's base, out of reach
    assert _same(core.tick(0.04), q)
    level, line = loop_status(core)
    assert level == "WARN" and "outside the robot's workspace" in line and "refused" in line, line
    assert not core.set_goal(np.array([5.0, 5.0, 5.0])) and not core.set_goal(np.array([0.3, np.nan, 0.3]))
    assert _same(core.tick(0.08), q) and "not finite" in loop_status(core)[1]
    target = core.task.targets[7]
    assert core.set_goal(target)  # a reachable task: soft start from the measured pose
    assert _same(core.tick(0.12), q) and core.envelope.status.mode == "soft_start"
    assert loop_status(core) == ("OK", "soft start")
    assert core.envelope.status.events["hold"] == 3 and core.published == 4


def test_a_restarted_state_source_holds_then_soft_starts_from_the_new_measured_pose(run: Path) -> None:
    from embodied_ws.deploy.status import loop_status

    core, q = _core_at_home(run)
    core.set_goal(core.task.targets[3])
    for k in range(40):  # 1.6 s at 25 Hz: past the soft start
        core.set_state(q, np.zeros(3), 1.0 + 0.04 * (k + 1), 0.04 * (k + 1), seq=k + 2)
        core.tick(0.04 * (k + 1))
    assert core.envelope.status.mode == "running"
    moved = q + np.array([0.5, -0.3, 0.4])  # a driver restart: stamps from 0 again, the arm elsewhere
    assert core.set_state(moved, np.zeros(3), 0.0, 1.7, seq=42)  # same publisher, its clock back to 0
    out = core.tick(1.7)
    assert np.allclose(out, moved) and core.envelope.status.mode == "soft_start"
    level, line = loop_status(core)
    assert level == "WARN" and "started over" in line and "stamp went back" in line, line
    assert core.envelope.status.events["state_restart"] == 1


def test_position_clipping_on_most_ticks_is_a_warning_with_a_count(tmp_path: Path) -> None:
    from embodied_ws.deploy.status import loop_status

    limits = tmp_path / "limits.yaml"
    limits.write_text(
        "joints:\n  base_yaw: {lower: -0.02, upper: 0.02}\n  shoulder: {lower: 0.33, upper: 0.37}\n"
        "  elbow: {lower: 0.88, upper: 0.92}\n"
    )
    pushing = untrained_run(tmp_path / "run", action_bias=1.0)  # every actuator pushed up, whatever it sees
    core, q = _core_at_home(pushing, f"deploy.limits_file={limits}", "deploy.soft_start_s=0")
    core.set_goal(core.task.targets[int(np.argmax(core.task.targets[:, 2]))])
    for k in range(60):
        out = core.tick(0.04 * (k + 1))
        core.set_state(out, np.zeros(3), 1.0 + 0.04 * (k + 1), 0.04 * (k + 1), seq=k + 2)  # a perfect servo
    clipped, ticks = core.envelope.clipping()
    level, line = loop_status(core)
    assert clipped > ticks / 2, (clipped, ticks)
    assert level == "WARN" and f"on {clipped} of the last {ticks} ticks" in line, line


def test_the_estop_gate_waits_for_the_latched_state() -> None:
    from embodied_ws.deploy.estop import EstopGate

    gate = EstopGate(discovery_s=3.0, latched_wait_s=2.0)
    assert gate.update(0.0, 0) == "waiting" and not gate.go
    assert gate.update(1.0, 1) == "waiting"  # a publisher: wait for its latched value
    gate.received(True)
    assert gate.update(1.1, 1) == "asserted" and not gate.go and "release it" in gate.describe()
    gate.received(False)
    assert gate.update(1.2, 1) == "released" and gate.go
    quiet = EstopGate(discovery_s=3.0, latched_wait_s=2.0)
    assert quiet.update(0.0, 0) == "waiting" and quiet.update(2.9, 0) == "waiting"
    assert quiet.update(3.0, 0) == "absent" and quiet.go and "no e-stop publisher" in quiet.describe()
    mute = EstopGate(discovery_s=3.0, latched_wait_s=2.0)
    assert mute.update(0.0, 1) == "waiting" and mute.update(1.9, 1) == "waiting"
    assert mute.update(2.0, 1) == "unlatched" and mute.go

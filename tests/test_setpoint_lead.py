"""The set-point lead bound (``sim/mapping.py::setpoint_lead``): an arm that cannot follow its set-points keeps
them within reach of its joints, in training and deploy alike; arms that follow are unchanged."""

from __future__ import annotations

import copy
import json
import sysconfig
from pathlib import Path

import mujoco
import numpy as np
import pytest
from deploy_helpers import deploy_parity, untrained_run

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.errors import ConfigError
from embodied_ws.deploy.artifact import resolve_target
from embodied_ws.deploy.control import ControlCore
from embodied_ws.rl.backends import env_hooks, make_vec_env
from embodied_ws.rl.callbacks import EVAL_STEP_SHARE, StaggerEpisodes, eval_interval
from embodied_ws.sim.core import EnvCore
from embodied_ws.sim.env import RobotEnv
from embodied_ws.sim.mapping import LEAD_PERIODS, PolicyIO

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "robots"
DAMPED = FIXTURES / "damped" / "panda_damped.xml"
ERD = Path(sysconfig.get_paths()["purelib"]) / "cmeel.prefix" / "share" / "example-robot-data" / "robots"
OPEN = ["deploy.limit_margin=0", "deploy.max_step=10", "deploy.max_velocity=1000", "deploy.soft_start_s=0"]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def reach_core(robot: Path | str, mode: str = "delta") -> EnvCore:
    """The reach preset's env core for ``robot`` (no DR), in joint deltas unless ``mode`` says otherwise (the
    preset's ``auto`` drives the damped Panda in ``ee_delta``)."""
    cfg = load_config("reach", [f"env.robot={robot}", "task.ee_body=", f"env.action_mode={mode}"])
    return EnvCore(cfg, load_dr("none"), 1, 0)


@pytest.mark.parametrize(
    "robot",
    [
        "arm3",
        str(FIXTURES / "menagerie" / "panda.xml"),
        str(FIXTURES / "menagerie" / "iiwa14.xml"),
        str(ERD / "kinova_description" / "robots" / "kinova.urdf"),  # slow joints, but it follows its set-points
        str(ERD / "xarm_description" / "urdf" / "xarm7.urdf"),  # lags only on the flange roll (no lever)
    ],
)
def test_arms_that_follow_their_set_points_get_no_lead_bound(robot: str) -> None:
    """No bound, and the env does not even keep the measured joints for it: the actions integrate as before; the
    preset's ``env.action_mode: auto`` drives these arms of position servos in end-effector steps, unbounded too."""
    core = reach_core(robot)
    assert core.io.lead is None
    assert core._qpos is None
    auto = reach_core(robot, "auto").io
    assert auto.mode == "ee_delta" and auto.ee is not None and auto.lead is None


def test_auto_drives_the_damped_panda_in_end_effector_steps() -> None:
    """``auto`` resolves to ``ee_delta`` on the arm that cannot follow its set-points too: a Cartesian step per
    period solved at the measured joints, inside the same lead bound."""
    core = reach_core(DAMPED, "auto")
    assert core.io.mode == "ee_delta" and core.io.ee is not None and core.io.action_dim == 3
    assert core.io.lead is not None
    np.testing.assert_allclose(core.io.lead, reach_core(DAMPED).io.lead)


def drive(io: PolicyIO, model: mujoco.MjModel, push_steps: int, rest_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Every joint pushed at full action for ``push_steps`` control periods, then the action 0 (hold the
    set-point) for ``rest_steps``: ``(largest set-point lead per joint (rad), joint travel after the push (rad))``."""
    lead, q_stop, q_end = pushed(io, model, push_steps, rest_steps)
    return lead, np.abs(q_end - q_stop)


def pushed(
    io: PolicyIO, model: mujoco.MjModel, push_steps: int, rest_steps: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`drive`'s run from home: ``(largest set-point lead, joints when the push ends, joints at the end)``."""
    robot = io.robot
    data = mujoco.MjData(model)
    data.qpos[:] = robot.home_qpos
    mujoco.mj_forward(model, data)
    frame_skip = round(io.control_dt / model.opt.timestep)
    setpoint = io.hold_action(data.qpos)[None]
    lead = np.zeros(robot.nu)
    q_stop = None
    for k in range(push_steps + rest_steps):
        if k == push_steps:
            q_stop = data.qpos[robot.qpos_idx].copy()
        action = np.full((1, robot.nu), 1.0 if k < push_steps else 0.0)
        setpoint, ctrl = io.integrate(setpoint, action, data.qpos[None])
        lead = np.maximum(lead, np.abs(ctrl[0] - data.qpos[robot.qpos_idx]))
        data.ctrl[:] = ctrl[0]
        mujoco.mj_step(model, data, nstep=frame_skip)
    q_end = data.qpos[robot.qpos_idx].copy()
    return lead, (q_end if q_stop is None else q_stop), q_end


def test_damped_panda_set_points_stay_within_reach_of_its_joints_and_it_stops_where_told() -> None:
    """The damped fixture at twice its damping (the default DR's top): unbounded, a 1.2-s push leaves the
    set-points ~0.36 rad ahead of the joints, which keep moving for ~0.6 s after the policy says stop; bounded,
    a set-point never leads by more than the joint covers at its measured speed in LEAD_PERIODS control periods,
    and the joints stop within that."""
    core = reach_core(DAMPED)
    io = core.io
    v = core.robot.dynamics().measured_speeds()
    assert io.lead is not None and np.isfinite(io.lead).all()
    np.testing.assert_allclose(io.lead * io.ctrl_half, v * LEAD_PERIODS * io.control_dt, rtol=1e-9)
    assert core._qpos is not None  # the env keeps the measured joints the bound is applied at
    slow = copy.copy(core.robot.model)
    slow.dof_damping[:] *= 2.0
    lead, coast = drive(io, slow, 30, 25)
    bound = io.lead * io.ctrl_half
    assert (lead <= bound * (1 + 1e-9)).all(), (lead, bound)
    assert (coast <= 1.5 * bound).all(), (coast, bound)
    unbounded = copy.copy(io)
    unbounded.lead = None
    lead_free, coast_free = drive(unbounded, slow, 30, 25)
    arm = slice(0, 4)  # the 12-N·m joints whose speed the damping bounds alone
    assert (lead_free[arm] > 5 * bound[arm]).all(), (lead_free, bound)
    assert (coast_free[arm] > 5 * bound[arm]).all(), (coast_free, bound)


def travel(io: PolicyIO, model: mujoco.MjModel, steps: int) -> np.ndarray:
    """How far each joint moves from home under a full push on every joint for ``steps`` control periods."""
    _, q, _ = pushed(io, model, steps, 0)
    return np.abs(q - io.robot.home_qpos[io.robot.qpos_idx])


def test_the_bound_does_not_slow_the_damped_panda() -> None:
    """At its nominal damping the bounded arm moves as far under a 1-s full push as the unbounded one."""
    core = reach_core(DAMPED)
    unbounded = copy.copy(core.io)
    unbounded.lead = None
    free = travel(unbounded, core.robot.model, 25)
    bounded = travel(core.io, core.robot.model, 25)
    assert (bounded >= 0.95 * free).all(), (bounded, free)
    assert (free > 0.5 * core.robot.dynamics().measured_speeds()).all()  # it did move: ~1 s at its speed


def test_deploy_applies_the_same_bound(tmp_path: Path) -> None:
    """The deploy core commands exactly what the training env does on the damped arm, with a policy that pushes
    every action entry the same way (so the bound is what shapes the set-points); the preset's ``auto`` mode is
    exported resolved (``ee_delta``) and deploy rebuilds it."""
    run = untrained_run(
        tmp_path / "run", f"env.robot={DAMPED}", "task.ee_body=", "env.action_mode=auto", action_bias=1.0
    )
    target = resolve_target(run, OPEN)
    assert json.loads((run / "policy" / "policy.json").read_text())["action"]["mode"] == "ee_delta"
    core = ControlCore(target)
    assert core.io.lead is not None and core.io.mode == "ee_delta"
    env = RobotEnv(target.config, load_dr(target.config.dr), seed=3)
    obs, _ = env.reset()
    core.set_goal(env.core.goal[0])
    worst_obs, worst_cmd = deploy_parity(core, env, obs)
    assert worst_obs <= 1e-6 and worst_cmd <= 1e-9, (worst_obs, worst_cmd)
    q = env.data.qpos[env.core.robot.qpos_idx]
    lead = np.abs(env.data.ctrl[: env.core.robot.nu] - q)
    assert (lead <= core.io.lead * core.io.ctrl_half * (1 + 1e-9)).all()


def test_evaluation_spacing_keeps_arms_that_follow_and_spaces_the_damped_panda() -> None:
    """With the reach preset (25,000 steps, 64 episodes), arms up to 195-step episodes keep their spacing; the
    damped Panda's 282-step episodes are evaluated every 36,096 steps: an evaluation is at most half of that."""
    cfg = load_config("reach")
    every, episodes = cfg.train.eval_every, cfg.train.eval_episodes
    for robot in ("arm3", FIXTURES / "menagerie" / "panda.xml", FIXTURES / "menagerie" / "iiwa14.xml"):
        assert eval_interval(every, episodes, reach_core(robot).episode_steps) == every
    steps = reach_core(DAMPED).episode_steps
    spaced = eval_interval(every, episodes, steps)
    assert spaced > every and episodes * steps <= EVAL_STEP_SHARE * spaced < episodes * steps + 1
    assert eval_interval(0, episodes, steps) == 0  # no evaluation stays none


def first_episode_ends(robot: Path | str, n: int = 8) -> tuple[StaggerEpisodes, list[int]]:
    """The step at which each of ``n`` training envs (MuJoCo batch, no DR) ends its first episode after
    :class:`StaggerEpisodes` ran at the start of training."""
    cfg = load_config("reach", [f"env.robot={robot}", "task.ee_body="])
    venv = make_vec_env(cfg, load_dr("none"), n, 0, "mujoco")
    try:
        venv.reset()
        stagger = StaggerEpisodes(venv, 0)
        stagger._on_training_start()
        steps = env_hooks(venv).env_core().episode_steps
        ends: list[int] = []
        for t in range(steps):
            _, _, done, _ = venv.step(np.zeros((n, venv.action_space.shape[0])))
            ends += [t + 1] * int(done.sum())
        return stagger, sorted(ends)
    finally:
        venv.close()


def test_the_damped_panda_trains_on_episodes_out_of_step() -> None:
    """Its envs' first episodes end at spread-out steps (each then runs full episodes), so a rollout of 64 steps
    holds every phase of its 282-step episodes; arm3 (follows its set-points) keeps its envs in step."""
    stagger, ends = first_episode_ends(DAMPED)
    assert stagger.offsets is not None and len(ends) == 8
    steps = reach_core(DAMPED).episode_steps
    assert ends == sorted(steps - int(o) for o in stagger.offsets)
    assert len(set(ends)) >= 6 and ends[-1] - ends[0] > steps // 2
    stagger, ends = first_episode_ends("arm3")
    assert stagger.offsets is None
    assert ends == [reach_core("arm3").episode_steps] * 8


PANDA = FIXTURES / "menagerie" / "panda.xml"


def pressed_hand(bound: bool) -> tuple[float, int]:
    """The Panda's lift env (``ee_delta``, no DR): the hand driven down at full action for 2.4 s (onto the table
    and the cube), then up. ``(commanded-vs-measured hand distance when the push ends (m), control periods until
    the hand has risen 1 cm)``; ``bound=False`` drops the lead bound."""
    cfg = load_config(
        "push", [f"env.robot={PANDA}", "env.task=lift", "task.gripper=action", "env.action_mode=ee_delta"]
    )
    env = RobotEnv(cfg, load_dr("none"), seed=0)
    io, robot = env.core.io, env.core.robot
    if not bound:
        io.lead = None
    io.ee.floor = None  # the lead bound alone (the tool floor stops a downward wind-up by itself)
    env.reset(seed=0)
    site = io.ee.ik.site
    action = np.zeros(io.action_dim)
    action[2] = -1.0
    for _ in range(60):
        env.step(action)
    commanded = mujoco.MjData(robot.model)
    commanded.qpos[:] = env.data.qpos
    commanded.qpos[robot.qpos_idx] = io.ctrl_mid + io.ctrl_half * env.core.setpoint[0]
    mujoco.mj_kinematics(robot.model, commanded)
    windup = float(np.linalg.norm(commanded.site_xpos[site] - env.data.site_xpos[site]))
    z0 = env.data.site_xpos[site][2]
    action[2] = 1.0
    for k in range(1, 61):
        env.step(action)
        if env.data.site_xpos[site][2] > z0 + 0.01:
            return windup, k
    return windup, 61


def test_contact_tasks_bound_the_set_points_of_a_hand_pressed_down() -> None:
    """A contact task bounds every delta set-point (the Panda's joints follow theirs in free space): a hand
    pressed onto the table keeps its commanded point within ~2 set-point steps of itself, and rises within a few
    periods of being told to; unbounded, the command winds up tens of cm below the table and a lift first spends
    ~25 periods unwinding it (a lift policy never learned to lift through that)."""
    windup, rise = pressed_hand(bound=True)
    windup_free, rise_free = pressed_hand(bound=False)
    assert windup < 0.10 and rise <= 10, (windup, rise)
    assert windup_free > 3 * windup and rise_free > 2 * rise, (windup_free, rise_free)


def test_auto_keeps_joint_actions_where_end_effector_steps_cannot_drive() -> None:
    """A cart-pole (a motor, no position servo, no end effector) stays in ``delta`` under ``auto`` (its motor then
    takes absolute torques); asked for ``ee_delta`` it is refused with the reason."""
    core = EnvCore(load_config("cartpole", ["env.action_mode=auto"]), load_dr("none"), 1, 0)
    assert core.io.mode == "delta" and core.io.ee is None
    with pytest.raises(ConfigError, match="ee_delta needs an end effector"):
        EnvCore(load_config("cartpole", ["env.action_mode=ee_delta"]), load_dr("none"), 1, 0)

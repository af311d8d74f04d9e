"""The end-effector delta action mode (env.action_mode=ee_delta): DLS IK tracking on arm3 and the Menagerie Panda,
the joint-delta limits and speed bounds kept, env checkers with and without a gripper action, deploy parity with
the training env, the exported policy.json round trip and bad configuration values."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import mujoco
import numpy as np
import pytest
from deploy_helpers import deploy_parity, untrained_run
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.errors import ConfigError, UserError
from embodied_ws.deploy.artifact import resolve_target
from embodied_ws.deploy.control import ControlCore
from embodied_ws.sim.env import RobotEnv
from embodied_ws.sim.vec_env import MujocoVecEnv

PANDA = Path(__file__).parent / "fixtures" / "robots" / "menagerie" / "panda.xml"
EE = ["env.action_mode=ee_delta"]
OPEN = ["deploy.limit_margin=0", "deploy.max_step=10", "deploy.max_velocity=1000", "deploy.soft_start_s=0"]


def _env(*sets: str, preset: str = "reach") -> RobotEnv:
    return RobotEnv(load_config(preset, [*EE, "env.episode_steps=1000", *sets]), load_dr("none"), seed=0)


class _Commanded:
    """Forward kinematics of the servo set-points: where the arm is commanded to put its end effector."""

    def __init__(self, env: RobotEnv) -> None:
        self.env, self.robot, self.io = env, env.core.robot, env.core.io
        self.data = mujoco.MjData(self.robot.model)

    def pose(self) -> tuple[np.ndarray, float]:
        d, io = self.data, self.io
        d.qpos[:] = self.env.data.qpos
        d.qpos[self.robot.qpos_idx] = io.ctrl_mid + io.ctrl_half * self.env.core.setpoint[0]
        mujoco.mj_kinematics(self.robot.model, d)
        rot = d.site_xmat[io.ee.ik.site].reshape(3, 3)
        return d.site_xpos[io.ee.ik.site].copy(), float(np.arctan2(rot[1, 0], rot[0, 0]))


def _track(env: RobotEnv, shape: str, speed: float) -> dict[str, float]:
    """Follow a 6 cm Cartesian line or circle (vertical plane) at ``speed`` m/s; each action is the step from the
    commanded end effector to the path's next point. Errors in mm: the IK's (commanded end effector vs path) and
    the measured end effector's (the servos' lag and gravity droop on top)."""
    env.reset(seed=0)
    for _ in range(25):  # settle at the home pose
        env.step(np.zeros(env.action_space.shape))
    cmd, ee, io = _Commanded(env), env.core.robot.ee_sensor_idx, env.core.io
    start = cmd.pose()[0]
    droop = float(np.linalg.norm(env.data.sensordata[ee] - start))
    radius, dt = 0.06, io.control_dt
    if shape == "circle":
        n = int(2 * np.pi * radius / speed / dt)

        def path(k: int) -> np.ndarray:
            t = 2 * np.pi * min(k, n) / n
            return start + radius * np.array([np.cos(t) - 1.0, 0.0, np.sin(t)])
    else:
        n = int(0.1 / speed / dt)

        def path(k: int) -> np.ndarray:
            return start + min(k, n) / n * np.array([-0.06, 0.05, 0.06])

    ik_err, meas_err = [], []
    for k in range(1, n + 26):  # the path, then 1 s holding its end
        a = np.zeros(env.action_space.shape)
        a[:3] = np.clip((path(k) - cmd.pose()[0]) / io.ee.step[:3], -1.0, 1.0)
        env.step(a)
        ik_err.append(np.linalg.norm(cmd.pose()[0] - path(k)))
        meas_err.append(np.linalg.norm(env.data.sensordata[ee] - path(k)))
    return {"ik_max": 1e3 * max(ik_err), "ik_final": 1e3 * ik_err[-1], "max": 1e3 * max(meas_err),
            "final": 1e3 * meas_err[-1], "droop": 1e3 * droop}  # fmt: skip


@pytest.mark.parametrize("robot", ["arm3", str(PANDA)], ids=["arm3", "panda"])
@pytest.mark.parametrize("shape", ["line", "circle"])
def test_ik_tracks_a_cartesian_line_and_circle(robot: str, shape: str) -> None:
    """Bounds: a step is at most 0.1 m/s x 0.04 s = 4 mm; the linearisation error of one step is about
    step² / lever (16 mm² / 0.3 m ≈ 0.05 mm) and the Jacobian, taken at the measured joints that lag the
    set-points by up to ~20 mm, turns the step by lag / lever (≈ 7 %: 0.3 mm): the commanded end effector stays
    within 2 mm of the path and ends within 0.1 mm. The measured end effector adds the servos' static droop under
    gravity (measured at rest before the path: kp = 60 on arm3 gives ~16 mm) and their lag: within droop + 10 mm,
    ending within droop + 5 mm."""
    err = _track(_env(f"env.robot={robot}"), shape, 0.1)
    assert err["ik_max"] < 2.0 and err["ik_final"] < 0.1, err
    assert err["max"] < err["droop"] + 10.0 and err["final"] < err["droop"] + 5.0, err


def test_yaw_action_turns_the_hand_and_keeps_its_position() -> None:
    env = _env(f"env.robot={PANDA}", "env.ee_yaw=true")
    env.reset(seed=0)
    assert env.action_space.shape == (4,)
    cmd, io = _Commanded(env), env.core.io
    p0, yaw0 = cmd.pose()
    goal = yaw0 + 0.5
    for _ in range(40):
        p, yaw = cmd.pose()
        a = np.concatenate([(p0 - p) / io.ee.step[:3], [(goal - yaw) / io.ee.step[3]]])
        env.step(np.clip(a, -1.0, 1.0))
    p, yaw = cmd.pose()
    assert abs(yaw - goal) < 1e-3 and np.linalg.norm(p - p0) < 1e-3, (yaw - goal, p - p0)


def _hand_turn(env: RobotEnv, steps: int, rng: np.random.Generator) -> tuple[float, float]:
    """Smooth random end-effector actions from a reset: the largest angle (degrees) the hand turned away from its
    home orientation, and the same for its pointing (z) axis alone."""
    io = env.core.io
    home = mujoco.MjData(env.model)
    home.qpos[:] = env.core.robot.home_qpos
    mujoco.mj_kinematics(env.model, home)
    ref = home.site_xmat[io.ee.ik.site].reshape(3, 3).copy()
    env.reset(seed=0)
    a, turn, tilt = np.zeros(env.action_space.shape), 0.0, 0.0
    for _ in range(steps):
        a = np.clip(0.8 * a + 0.6 * rng.uniform(-1, 1, a.shape), -1.0, 1.0)
        env.step(a)
        rot = env.data.site_xmat[io.ee.ik.site].reshape(3, 3)
        turn = max(turn, float(np.degrees(np.arccos(np.clip((np.trace(ref.T @ rot) - 1) / 2, -1, 1)))))
        tilt = max(tilt, float(np.degrees(np.arccos(np.clip(ref[:, 2] @ rot[:, 2], -1, 1)))))
    return turn, tilt


def test_the_contact_tasks_hold_the_hand_orientation_reach_and_short_arms_leave_it_free() -> None:
    """``env.ee_orientation: auto``: the Panda's hand stays near its home orientation through an episode of
    random actions in lift (it turned 70-160 degrees with the position-only solve, ``free``); reach leaves it
    free (its targets need the hand turned) and so does an arm of fewer than six joints."""
    sets = [*EE, f"env.robot={PANDA}", "env.task=lift", "task.gripper=action", "env.episode_steps=1000"]
    held = RobotEnv(load_config("push", sets), load_dr("none"), seed=0)
    free = RobotEnv(load_config("push", [*sets, "env.ee_orientation=free"]), load_dr("none"), seed=0)
    assert held.core.io.ee.ik.hold_axes == [0, 1, 2] and free.core.io.ee.ik.hold_quat is None
    turn_held, _ = _hand_turn(held, 150, np.random.default_rng(0))
    turn_free, _ = _hand_turn(free, 150, np.random.default_rng(0))
    assert turn_held < 20.0 and turn_free > 45.0, (turn_held, turn_free)
    assert _env(f"env.robot={PANDA}").core.io.ee.ik.hold_quat is None  # reach: free
    arm3 = RobotEnv(load_config("push", EE), load_dr("none"))  # 3 joints: position only
    assert arm3.core.io.ee.ik.hold_quat is None


def test_a_held_hand_still_turns_with_the_yaw_action_and_keeps_pointing_down() -> None:
    sets = [*EE, f"env.robot={PANDA}", "env.task=lift", "task.gripper=action", "env.ee_yaw=true"]
    env = RobotEnv(load_config("push", [*sets, "env.episode_steps=1000"]), load_dr("none"), seed=0)
    assert env.core.io.ee.ik.hold_axes == [0, 1]  # the heading is the policy's
    turn, tilt = _hand_turn(env, 150, np.random.default_rng(1))
    assert turn > 30.0 and tilt < 15.0, (turn, tilt)


@pytest.mark.parametrize("robot", ["arm3", str(PANDA)], ids=["arm3", "panda"])
def test_a_cartesian_p_controller_solves_reach_within_the_episode(robot: str) -> None:
    """The action scale is enough: stepping the commanded end effector halfway to the target each step reaches it
    within the task's own episode length under the default DR (random actions essentially never do)."""
    cfg = load_config("reach", [*EE, f"env.robot={robot}"])
    env = RobotEnv(cfg, load_dr(cfg.dr), seed=0)
    cmd, step, ok = _Commanded(env), env.core.io.ee.step, []
    for ep in range(32):
        env.reset(seed=ep)
        done, info = False, {}
        while not done:
            a = np.clip(0.5 * (env.core.goal[0][:3] - cmd.pose()[0]) / step, -1.0, 1.0)
            _, _, terminated, truncated, info = env.step(a)
            done = terminated or truncated
        ok.append(info["is_success"])
    assert np.mean(ok) >= 0.9, ok


@pytest.mark.parametrize("robot", ["arm3", str(PANDA)], ids=["arm3", "panda"])
def test_set_points_stay_inside_the_joint_delta_bounds_and_limits(robot: str) -> None:
    """Random and full-scale actions: no arm set-point moves more than its joint-delta bound (measured speeds
    included) per step, set-points stay in the control ranges, and full-scale actions do reach the bound."""
    env = _env(f"env.robot={robot}")
    core = env.core
    joint = RobotEnv(load_config("reach", ["env.episode_steps=1000", f"env.robot={robot}"]), load_dr("none"))
    bound = np.broadcast_to(joint.core.delta_scale, (core.robot.nu,))  # the joint-delta mode's own bounds
    np.testing.assert_allclose(np.broadcast_to(core.delta_scale, bound.shape), bound)
    env.reset(seed=0)
    env.action_space.seed(0)
    rng = np.random.default_rng(0)
    worst, at_bound, at_limit = 0.0, 0, 0
    for k in range(300):
        a = env.action_space.sample() if k % 2 else np.sign(rng.uniform(-1, 1, env.action_space.shape))
        before = core.setpoint.copy()
        env.step(a)
        step = np.abs(core.setpoint - before)[0] / bound
        worst = max(worst, float(step.max()))
        at_bound += bool(np.isclose(step.max(), 1.0))
        at_limit += int((np.abs(core.setpoint) >= 1.0).sum())
        assert np.all(np.abs(core.setpoint) <= 1.0)
        low, high = core.robot.ctrl_low - 1e-12, core.robot.ctrl_high + 1e-12
        assert np.all(env.data.ctrl >= low) and np.all(env.data.ctrl <= high)
    assert worst <= 1.0 + 1e-9 and at_bound > 10 and at_limit > 0, (worst, at_bound, at_limit)


@pytest.mark.parametrize("robot", ["arm3", str(PANDA)], ids=["arm3", "panda"])
def test_a_full_action_along_any_axis_is_followed_at_home_and_reaches_a_joint_bound(robot: str) -> None:
    """The action scale: the largest step along every axis the joint bounds allow at home (not more: a full
    action is not scaled down there; not less: along the tightest axis a joint moves at its bound)."""
    env = _env(f"env.robot={robot}")
    ee, io = env.core.io.ee, env.core.io
    home = env.core.robot.home_qpos[None]
    sp = env.core.io.hold_action(home[0])[None, ee.arm]
    tight = []
    for axis in range(3):
        for sign in (1.0, -1.0):
            a = np.zeros((1, 3))
            a[0, axis] = sign
            step = ee.setpoint_step(home, a, sp)[0]
            dx = ee.ik.jacobian(home[0]) @ (step * io.ctrl_half[ee.arm])
            # DLS follows a step along singular value σ by σ² / (σ² + λ²): ≥ 0.97 at home (σ ≥ 0.11 m)
            np.testing.assert_allclose(dx, a[0] * ee.step[:3], atol=0.04 * ee.step[0])
            tight.append(np.max(np.abs(step) / ee.bound))
    assert max(tight) == pytest.approx(1.0) and min(tight) < 1.0, tight


def test_a_joint_at_its_limit_is_left_out_and_the_others_make_up_for_it() -> None:
    env = _env(f"env.robot={PANDA}")
    env.reset(seed=0)
    ee, io = env.core.io.ee, env.core.io
    qpos = env.data.qpos[None].copy()
    sp = env.core.setpoint[:, ee.arm].copy()
    dx = np.array([[0.02, 0.0, 0.0]])
    free = ee.setpoint_step(qpos, dx, sp)
    j = int(np.argmax(np.abs(free[0])))  # the joint doing most of the work, now at its limit
    sp[0, j] = np.sign(free[0, j])
    step = ee.setpoint_step(qpos, dx, sp)
    assert step[0, j] == 0.0 and np.abs(step[0]).max() > 0
    jac = ee.ik.jacobian(qpos[0])
    moved = jac @ (step[0] * io.ctrl_half[ee.arm])
    want = dx[0] * ee.step[:3]
    assert np.linalg.norm(moved - want) < 0.05 * np.linalg.norm(want), (moved, want)


@pytest.mark.parametrize(
    "sets,preset,shape",
    [
        ([], "reach", (3,)),
        ([f"env.robot={PANDA}", "env.ee_yaw=true"], "reach", (4,)),
        (["env.task=lift", f"env.robot={PANDA}", "task.gripper=action"], "push", (4,)),
        (["env.task=push", f"env.robot={PANDA}", "task.gripper=action", "env.ee_yaw=true"], "push", (5,)),
    ],
    ids=["arm3-reach", "panda-reach-yaw", "panda-lift-gripper", "panda-push-gripper-yaw"],
)
def test_env_checkers_pass_in_ee_delta_mode(sets: list[str], preset: str, shape: tuple[int, ...]) -> None:
    cfg = load_config(preset, [*EE, *sets])
    env = RobotEnv(cfg, load_dr(cfg.dr))  # the preset's DR (push: contact DR and action noise)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gym_check_env(env, skip_render_check=True)
        sb3_check_env(env)
    assert env.action_space.shape == shape
    assert env.observation_space.shape == (env.core.io.obs_dim,)
    if "task.gripper=action" in sets:  # the gripper action is absolute: -1 closes it, +1 opens it
        env = RobotEnv(cfg, load_dr("none"))  # no action noise
        env.reset(seed=0)
        a = np.zeros(shape)
        k = env.core.robot.gripper_actuators[0]
        for target in (-1.0, 1.0):
            a[-1] = target
            env.step(a)
            assert env.core.setpoint[0, k] == target


def test_the_batched_env_converts_each_env_at_its_own_measured_joints() -> None:
    cfg = load_config("reach", [*EE, f"env.robot={PANDA}", "env.ee_yaw=true", "env.episode_steps=1000"])
    batch = MujocoVecEnv(cfg, load_dr("none"), 3, seed=0)
    try:
        batch.reset()
        rng = np.random.default_rng(1)
        for _ in range(10):
            batch.step(rng.uniform(-1, 1, (3, 4)))
        qpos = batch.state[:, 1 : 1 + batch.nq]
        np.testing.assert_array_equal(batch.core._qpos, qpos)  # converted where each env is now
        io, sp, a = batch.core.io, batch.core.setpoint, rng.uniform(-1, 1, (3, 4))
        together = io.integrate(sp, a, qpos)[1]
        alone = np.vstack([io.integrate(sp[i : i + 1], a[i : i + 1], qpos[i : i + 1])[1] for i in range(3)])
        np.testing.assert_allclose(together, alone, rtol=0, atol=1e-12)
        assert not np.allclose(together[0], together[1])
    finally:
        batch.close()


@pytest.fixture(scope="module")
def ee_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return untrained_run(tmp_path_factory.mktemp("ee") / "run", *EE, f"env.robot={PANDA}", "env.ee_yaw=true")


def test_deploy_commands_are_the_training_envs(ee_run: Path) -> None:
    """Envelope wide open: for the same measured state and policy, the deploy core converts the end-effector
    actions into the joint commands the training env gives its servos."""
    target = resolve_target(ee_run, OPEN)
    core = ControlCore(target)
    env = RobotEnv(target.config, load_dr(target.config.dr), seed=3)
    obs, _ = env.reset()
    core.set_goal(env.core.goal[0])
    start = env.data.qpos.copy()
    worst_obs, worst_cmd = deploy_parity(core, env, obs)
    moved = float(np.abs(env.data.qpos - start).max())
    assert worst_obs <= 1e-6 and worst_cmd <= 1e-9 and moved > 1e-3, (worst_obs, worst_cmd, moved)


def test_policy_json_records_the_mode_and_a_bare_policy_folder_rebuilds_it(ee_run: Path, tmp_path: Path) -> None:
    meta = json.loads((ee_run / "policy" / "policy.json").read_text())
    act = meta["action"]
    assert act["mode"] == "ee_delta" and act["ee_yaw"] is True and act["size"] == 4
    assert act["ee"]["names"] == ["ee/dx", "ee/dy", "ee/dz", "ee/dyaw"] and len(act["ee"]["step"]) == 4
    assert act["mapping"] == act["ee"]["mapping"] and "J^T (J J^T + damping^2 I)^-1" in act["mapping"]
    assert act["ee_hold_orientation"] is False and act["ee"]["hold_orientation"] is None  # reach: free
    bare = tmp_path / "policy"
    bare.mkdir()
    for name in ("policy.json", "policy.safetensors"):  # no config.yaml: rebuilt from policy.json alone
        shutil.copy(ee_run / "policy" / name, bare / name)
    target = resolve_target(bare, [f"env.robot={PANDA}"])
    assert target.config.env.action_mode == "ee_delta" and target.config.env.ee_yaw is True
    assert ControlCore(target).io.action_dim == 4
    with pytest.raises(UserError, match=r"policy\.json: ee_yaw is True in the policy but env\.ee_yaw is False"):
        ControlCore(resolve_target(ee_run, ["env.ee_yaw=false"]))
    with pytest.raises(UserError, match=r"action mode is 'ee_delta' in the policy but env\.action_mode is 'delta'"):
        ControlCore(resolve_target(ee_run, ["env.action_mode=delta"]))
    with pytest.raises(UserError, match=r"does not hold the hand's orientation but env\.ee_orientation=hold holds"):
        ControlCore(resolve_target(ee_run, ["env.ee_orientation=hold"]))


def test_joint_delta_policies_are_unchanged(tmp_path: Path) -> None:
    run = untrained_run(tmp_path / "run")
    act = json.loads((run / "policy" / "policy.json").read_text())["action"]
    assert act["mode"] == "delta" and act["ee_yaw"] is False and "ee" not in act and act["size"] == 3


def test_bad_values_are_one_line_naming_the_key(cli) -> None:
    with pytest.raises(ConfigError, match=r"env\.action_mode") as err:
        load_config("reach", ["env.action_mode=ee"])
    assert "\n" not in err.value.line()
    with pytest.raises(ConfigError, match=r"env\.ee_yaw"):
        load_config("reach", ["env.ee_yaw=sideways"])
    with pytest.raises(ConfigError, match=r"env\.action_mode: ee_delta needs an end effector") as err:
        RobotEnv(load_config("cartpole", EE))
    assert "\n" not in err.value.line()
    proc = cli("train", "--set", "env.action_mode=cartesian")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "env.action_mode" in lines[0], proc.stderr


PLANAR = """<mujoco model="planar2">
  <worldbody>
    <body name="l1" pos="0 0 0.1">
      <joint name="j1" type="hinge" axis="0 1 0" range="-1.5 1.5" damping="1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="1"/>
      <body name="l2" pos="0.3 0 0">
        <joint name="j2" type="hinge" axis="0 1 0" range="-2 2" damping="1"/>
        <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.02" mass="0.5"/>
        <site name="tip" pos="0.25 0 0"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position joint="j1" kp="50" ctrlrange="-1.5 1.5"/>
    <position joint="j2" kp="50" ctrlrange="-2 2"/>
  </actuator>
</mujoco>
"""


def test_a_planar_arm_moves_in_its_plane_and_refuses_yaw_in_one_line(tmp_path: Path) -> None:
    xml = tmp_path / "planar2.xml"
    xml.write_text(PLANAR)
    env = RobotEnv(load_config("reach", [*EE, f"env.robot={xml}", "task.ee_body=tip", "task.target_min_z=null"]))
    assert env.action_space.shape == (3,) and np.isfinite(env.core.io.ee.step).all()
    env.reset(seed=0)
    y0 = env.data.sensordata[env.core.robot.ee_sensor_idx][1]
    for _ in range(10):
        env.step(np.array([0.5, 0.5, 0.5]))  # y is out of reach of both joints: the IK ignores it
    assert abs(env.data.sensordata[env.core.robot.ee_sensor_idx][1] - y0) < 1e-9
    with pytest.raises(ConfigError, match=r"env\.ee_yaw: no arm joint of 'planar2' turns the end effector") as err:
        RobotEnv(load_config("reach", [*EE, f"env.robot={xml}", "task.ee_body=tip", "env.ee_yaw=true"]))
    assert "\n" not in err.value.line()

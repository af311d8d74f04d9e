"""URDF/xacro robots: conversion through xacrodoc + MuJoCo's URDF compiler, defaults read from the model,
lean physics copies, ``robot show`` and one-line errors. The test robot is our own package under
tests/fixtures/robots/tiny_arm_description (STL collision and COLLADA visual meshes made with trimesh)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.deploy.artifact import resolve_target
from embodied_ws.deploy.control import ControlCore
from embodied_ws.sim import robot_defaults as rd
from embodied_ws.sim import urdf
from embodied_ws.sim.core import EnvCore
from embodied_ws.sim.env import RobotEnv
from embodied_ws.sim.robot import load_robot

FIX = Path(__file__).resolve().parent / "fixtures" / "robots"
PKG = FIX / "tiny_arm_description"
URDF = PKG / "urdf" / "tiny_arm.urdf"
XACRO = PKG / "urdf" / "tiny_arm.urdf.xacro"
BROKEN = FIX / "broken"


@pytest.fixture(autouse=True)
def _mesh_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBODIED_WS_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    for var in ("AMENT_PREFIX_PATH", "ROS_PACKAGE_PATH"):
        monkeypatch.delenv(var, raising=False)


def _cfg(robot: Path, args: tuple[str, ...] = (), paths: tuple[str, ...] = (str(FIX),)):
    cfg = load_config("reach", ["train.n_envs=2"])
    cfg.env.robot, cfg.env.robot_args, cfg.env.package_paths = str(robot), list(args), list(paths)
    return cfg


@pytest.mark.parametrize(
    ("robot", "args"),
    [(URDF, ()), (XACRO, ("dof:=7", "gripper:=fixed")), (XACRO, ("gripper:=mimic", "prefix:=r1_"))],
    ids=["urdf-package-meshes", "xacro-args-find-fixed-gripper", "xacro-mimic-prefix"],
)
def test_description_env_passes_gymnasium_and_sb3_checkers(robot: Path, args: tuple[str, ...]) -> None:
    env = RobotEnv(_cfg(robot, args), load_dr("default"), seed=0)
    gym_check_env(env, skip_render_check=True)
    sb3_check_env(env)
    obs, info = env.reset(seed=1)
    for _ in range(20):
        obs, reward, term, trunc, info = env.step(env.action_space.sample())
    assert np.isfinite(obs).all() and not info.get("physics_reset")


def test_meshes_collision_stl_kept_dae_visuals_converted_once(tmp_path: Path) -> None:
    urdf._generate.cache_clear()
    xml, notes = urdf.generate_mjcf(URDF, {}, [str(FIX)])
    spec = mujoco.MjSpec.from_string(xml)
    files = {Path(m.file).name: Path(m.file) for m in spec.meshes}
    assert {"base.stl", "link.stl", "hand.stl"} <= set(files)  # collision meshes straight from the package
    assert files["base.stl"].parent == PKG / "meshes" / "collision"
    converted = [p for p in files.values() if p.parent.name == "meshes" and p.parent.parent.name == "cache"]
    assert len(converted) == 3 and all(p.is_file() for p in converted)
    assert any("converted link.dae" in n for n in notes)
    model = spec.compile()
    collide = (model.geom_contype > 0) & (model.geom_type == mujoco.mjtGeom.mjGEOM_MESH)
    assert collide.sum() >= 7  # every link's collision mesh is in the model
    mtimes = [p.stat().st_mtime_ns for p in converted]
    urdf._generate.cache_clear()
    urdf.generate_mjcf(URDF, {}, [str(FIX)])
    assert [p.stat().st_mtime_ns for p in converted] == mtimes  # the cache is reused, not rewritten


def test_packages_resolve_through_ament_prefix_and_ros_package_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = tmp_path / "install" / "share" / "tiny_arm_description"
    shutil.copytree(PKG, installed)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path / "install"))
    assert str(installed / "meshes") in urdf.expand(XACRO).urdf  # $(find) and package:// both went there
    monkeypatch.delenv("AMENT_PREFIX_PATH")
    src = tmp_path / "ws" / "src" / "arms" / "tiny_arm_description"
    shutil.copytree(PKG, src)
    monkeypatch.setenv("ROS_PACKAGE_PATH", str(tmp_path / "ws" / "src"))
    assert str(src / "meshes") in urdf.expand(XACRO, {"dof": "7"}).urdf


def test_fixed_world_anchor_servos_from_description_and_ros2_control_choice(tmp_path: Path) -> None:
    xml, _ = urdf.generate_mjcf(XACRO, {"dof": "7", "gripper": "fixed"}, [str(FIX)])
    model = mujoco.MjModel.from_xml_string(xml)
    assert model.nq == model.nv == 7  # no free joint: the base is anchored to the world
    names = [model.actuator(a).name for a in range(model.nu)]
    assert names == ["joint1", "joint2", "joint3", "joint4", "joint5", "joint5b", "joint6"]
    j = model.joint("joint3").id
    assert model.actuator_forcerange[2].tolist() == [-20.0, 20.0]  # URDF effort limit
    assert model.actuator_ctrlrange[2].tolist() == model.jnt_range[j].tolist()
    home = model.key("home").qpos
    kp, kv = rd.servo_gains(model, [model.joint(n).id for n in names], home)
    assert np.allclose(model.actuator_gainprm[:, 0], kp) and np.allclose(-model.actuator_biasprm[:, 2], kv)
    assert (model.body_gravcomp[1:] == 1).all()
    # a ros2_control block that commands fewer joints leaves the others passive
    text = URDF.read_text().replace(
        '<joint name="joint6">\n      <command_interface name="position"/>', '<joint name="joint6">'
    )
    partial = tmp_path / "partial.urdf"
    partial.write_text(text)
    xml, notes = urdf.generate_mjcf(partial, {}, [str(FIX)])
    names = [a.name for a in mujoco.MjSpec.from_string(xml).actuators]
    assert "joint6" not in names and "joint5" in names and any("joint6" in n for n in notes)


def test_mimic_follower_follows_leader_and_gripper_is_held() -> None:
    robot = load_robot(str(XACRO), package_paths=[str(FIX)], free_space=True)
    assert robot.ee_body == "tool0"  # the tool frame, not a finger
    assert robot.joint_names == [f"joint{i}" for i in range(1, 7)]
    assert robot.held_joints == ["finger_left_joint", "finger_right_joint"]
    env = RobotEnv(_cfg(XACRO), load_dr("default"), seed=3)
    env.reset(seed=3)
    left, right = (env.model.joint(n).qposadr[0] for n in ("finger_left_joint", "finger_right_joint"))
    for _ in range(40):
        env.step(env.action_space.sample())
    assert abs(env.data.qpos[left] - env.data.qpos[right]) < 2e-3
    assert abs(env.data.qpos[left] - robot.home_qpos[left]) < 5e-3


def test_lean_physics_copies_have_the_same_dynamics_and_no_meshes() -> None:
    robot = load_robot(str(URDF), package_paths=[str(FIX)], free_space=True)
    lean = robot.physics_model
    assert lean is not None and lean.ngeom == 0 and lean.nmesh == 0
    assert lean.nbuffer < robot.model.nbuffer
    finals = []
    for model in (robot.model, lean):
        data = mujoco.MjData(model)
        data.qpos[:] = robot.home_qpos
        data.ctrl[:] = robot.home_qpos[robot.qpos_idx] + 0.4
        mujoco.mj_step(model, data, 300)
        finals.append(data.qpos.copy())
    assert np.allclose(finals[0], finals[1], atol=1e-9)
    core = EnvCore(_cfg(URDF), load_dr("default"), 4, 0)
    assert all(m.nmesh == 0 for m in core.models)
    render_core = EnvCore(_cfg(URDF), load_dr("default"), 1, 0, visual=True)
    assert render_core.models[0].nmesh > 0  # envs that render keep the meshes


def test_home_pose_without_keyframe_is_away_from_limits(tmp_path: Path) -> None:
    xml, _ = urdf.generate_mjcf(XACRO, {"dof": "7", "gripper": "fixed"}, [str(FIX)])
    spec = mujoco.MjSpec.from_string(xml)
    spec.delete(spec.key("home"))
    mjcf = tmp_path / "nokey.xml"
    mjcf.write_text(spec.to_xml())
    robot = load_robot(str(mjcf))
    q = robot.home_qpos[robot.qpos_idx]
    margin = np.minimum(q - robot.joint_low, robot.joint_high - q) / (robot.joint_high - robot.joint_low)
    assert margin.min() >= 0.15
    assert not np.allclose(q, 0.0)


def test_action_scale_per_joint_from_velocity_limit_and_control_rate() -> None:
    core = EnvCore(_cfg(XACRO), load_dr("none"), 1, 0)
    half = (core.robot.ctrl_high - core.robot.ctrl_low) / 2
    expected = np.minimum(0.1, 2.0 * core.control_dt / half)  # the fixture's joints allow 2 rad/s
    assert np.allclose(core.delta_scale, expected)
    arm3 = EnvCore(load_config("reach"), load_dr("none"), 1, 0)
    assert arm3.delta_scale == 0.1 and arm3.robot.ee_body == "ee"  # hand-written MJCF under the bound: unchanged


LONG_ARM = """<mujoco><compiler angle="radian"/><worldbody><body name="l1">
  <joint name="j1" axis="0 0 1" range="-3 3"/><geom type="capsule" fromto="0 0 0 0 0 0.5" size="0.03"/>
  <body name="l2" pos="0 0 0.5"><joint name="j2" axis="0 1 0" range="-2.5 2.5"/>
    <geom type="capsule" fromto="0 0 0 0.9 0 0" size="0.03"/>
    <body name="l3" pos="0.9 0 0"><joint name="j3" axis="0 1 0" range="-2.5 2.5"/>
      <geom type="capsule" fromto="0 0 0 0.8 0 0" size="0.03"/><site name="tool0" pos="0.8 0 0"/>
</body></body></body></worldbody><actuator>
  <position joint="j1" kp="500" ctrlrange="-3 3"/><position joint="j2" kp="500" ctrlrange="-2.5 2.5"/>
  <position joint="j3" kp="300" ctrlrange="-2.5 2.5"/></actuator></mujoco>"""


def test_mjcf_without_velocity_limits_bounds_the_commanded_end_effector_speed(tmp_path: Path) -> None:
    """A long MJCF arm with wide ranges: one common factor brings Σ lever·step down to ee_speed_limit·dt."""
    path = tmp_path / "long_arm.xml"
    path.write_text(LONG_ARM)
    cfg = load_config("reach", [f"env.robot={path}", "train.n_envs=1"])
    core = EnvCore(cfg, load_dr("none"), 1, 0)
    robot, half = core.robot, core.ctrl_half
    # the lever arms are the end effector's displacement per radian (finite differences at home)
    model, data = robot.model, mujoco.MjData(robot.model)
    for k, (qi, lever) in enumerate(zip(robot.qpos_idx, robot.ee_lever, strict=True)):
        ends = []
        for dq in (-1e-6, 1e-6):
            data.qpos[:] = robot.home_qpos
            data.qpos[qi] += dq
            mujoco.mj_forward(model, data)
            ends.append(data.sensordata[robot.ee_sensor_idx].copy())
        assert abs(np.linalg.norm(ends[1] - ends[0]) / 2e-6 - lever) < 1e-4, k
    speed = float(np.sum(core.delta_scale * half * robot.ee_lever)) / core.control_dt
    assert abs(speed - cfg.env.ee_speed_limit) < 1e-9
    assert np.allclose(core.delta_scale, core.delta_scale[0]) and core.delta_scale[0] < 0.1  # one common factor
    unbounded = EnvCore(load_config("reach", [f"env.robot={path}", "env.ee_speed_limit=0"]), load_dr("none"), 1, 0)
    assert unbounded.delta_scale == 0.1


def _one_line(proc, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


@pytest.mark.parametrize(
    ("file", "what"),
    [
        ("missing_package.urdf", "package 'no_such_description' not found"),
        ("missing_find.urdf.xacro", "package 'no_such_description' not found"),
        ("missing_mesh.urdf", "mesh file not found"),
        ("bad.urdf.xacro", "xacro: unknown macro name"),
        ("no_movable_joint.urdf", "no movable joint"),
    ],
)
def test_bad_descriptions_give_one_line_naming_the_file(cli, file: str, what: str) -> None:
    _one_line(cli("robot", "show", str(BROKEN / file), "--package-path", str(FIX), "--no-image"), file, what)


def test_train_with_a_broken_description_fails_before_training(cli, tmp_path: Path) -> None:
    proc = cli(
        "train", "--robot", str(BROKEN / "missing_mesh.urdf"), "--package-path", str(FIX), "--runs", str(tmp_path)
    )
    _one_line(proc, "missing_mesh.urdf", "mesh file not found")


def test_robot_show_prints_the_robot_and_renders_its_home_pose(cli, tmp_path: Path) -> None:
    proc = cli("robot", "show", str(XACRO), "--robot-arg", "dof:=7", "--package-path", str(FIX), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for fragment in (
        "7 commanded joints",
        "joint5b: [-2.0, 2.0], 2.0/s",
        "kp=",
        "end effector: tool0",
        "held (not learned)",
        "-step episodes (",
    ):
        assert fragment in out, out
    assert "mimic: finger_right_joint follows finger_left_joint" in out
    import imageio.v3 as iio

    image = iio.imread(tmp_path / "tiny_arm_home.png")
    assert image.shape == (480, 640, 3) and image.std() > 5  # something was drawn
    generated = mujoco.MjModel.from_xml_path(str(tmp_path / "tiny_arm.xml"))
    assert generated.nkey == 1 and generated.neq == 1


@pytest.mark.slow
def test_training_saves_the_generated_mjcf_in_the_run_folder(cli, tmp_path: Path) -> None:
    sets = ["train.total_timesteps=512", "train.n_envs=4", "train.eval_every=256", "train.eval_episodes=4"]
    sets += ["train.final_eval_episodes=4", "train.checkpoint_every=0"]
    args = [a for s in sets for a in ("--set", s)]
    proc = cli(
        "train", "--robot", str(XACRO), "--robot-arg", "dof:=7", "--package-path", str(FIX),
        "--runs", str(tmp_path), "--name", "tiny", "--json", *args,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    model = mujoco.MjModel.from_xml_path(str(tmp_path / "tiny" / "robot.xml"))
    assert model.nu == 8 and "Generated by embodied_ws" in (tmp_path / "tiny" / "robot.xml").read_text()
    assert "peak_rss_mb" in (tmp_path / "tiny" / "report.md").read_text()
    # the policy folder alone (copied elsewhere, no run folder) rebuilds the xacro robot for deployment
    alone = tmp_path / "elsewhere" / "policy"
    shutil.copytree(tmp_path / "tiny" / "policy", alone)
    core = ControlCore(resolve_target(alone))
    meta = json.loads((alone / "policy.json").read_text())
    assert core.robot.actuator_names == meta["action"]["actuators"] and len(meta["joints"]["names"]) == 7


def test_servo_without_ctrlrange_is_commanded_over_its_joint_range(tmp_path: Path) -> None:
    """Menagerie-style MJCF (Kinova Gen3): position servos with no ctrlrange on limited and continuous joints."""
    xml = LONG_ARM.replace(' ctrlrange="-3 3"', "").replace(
        ' ctrlrange="-2.5 2.5"/>\n  <position joint="j3"', '/>\n  <position joint="j3"'
    )
    xml = xml.replace('joint name="j1" axis="0 0 1" range="-3 3"', 'joint name="j1" axis="0 0 1"')
    xml = xml.replace("</actuator>", '<motor joint="j3" gear="1"/></actuator>')
    path = tmp_path / "no_ctrlrange.xml"
    path.write_text(xml)
    robot = load_robot(str(path), need_ee=False)
    # a continuous joint: two turns, so the shorter way to any angle is never blocked by the range
    assert np.allclose(robot.ctrl_low[:2], [-2 * np.pi, -2.5]) and np.allclose(robot.ctrl_high[:2], [2 * np.pi, 2.5])
    assert robot.ctrl_low[3] == -1.0 and robot.ctrl_high[3] == 1.0  # a torque motor keeps [-1, 1]

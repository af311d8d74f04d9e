"""Launch files (checked statically: launch/launch_ros are not wheels), Gazebo assets (real libsdformat)."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from embodied_ws.config.loader import load_config
from embodied_ws.core.errors import UnknownNameError
from embodied_ws.ros.launch_plan import (
    DEPLOY_ARGS,
    SIM_ARGS,
    TRAIN_ARGS,
    IncludeSpec,
    NodeSpec,
    deploy_plan,
    gazebo_plan,
    sim_plan,
    train_plan,
)
from embodied_ws.sim.gazebo import write_assets
from embodied_ws.sim.robot import load_robot

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ROOT / "launch"
EXTERNAL = {"ros_gz_sim", "ros_gz_bridge", "robot_state_publisher", "controller_manager"}


def _console_scripts() -> set[str]:
    text = (ROOT / "setup.py").read_text()
    return set(re.findall(r'"(\w+) = embodied_ws', text))


def _declared(executable: str) -> set[str]:
    from embodied_ws.ros.params import flat_fields

    module = importlib.import_module(f"embodied_ws.ros.nodes.{executable}")
    return set(module.PARAMETERS) | set(flat_fields(load_config())) | {"use_sim_time"}


@pytest.mark.ros
@pytest.mark.parametrize(
    "plan,args",
    [
        (sim_plan, SIM_ARGS),
        (train_plan, TRAIN_ARGS),
        (train_plan, {**TRAIN_ARGS, "backend": "ros"}),
        (deploy_plan, {**DEPLOY_ARGS, "policy": "runs/reach1", "controller": "arm_ctrl", "rate_hz": "50"}),
    ],
)
def test_plans_name_existing_executables_and_declared_parameters(plan, args) -> None:
    specs = plan(**args)
    assert specs
    scripts = _console_scripts()
    for s in specs:
        assert s.package == "embodied_ws" and s.executable in scripts, s
        assert set(s.parameters) <= _declared(s.executable), set(s.parameters) - _declared(s.executable)


def test_train_plan_ros_backend_runs_the_sim_in_lockstep() -> None:
    specs = train_plan(backend="ros")
    assert [s.executable for s in specs] == ["mujoco_sim_node", "trainer_node"]
    assert specs[0].parameters["mode"] == "lockstep"
    with pytest.raises(UnknownNameError, match="unknown backend 'carla'"):
        train_plan(backend="carla")


def test_deploy_plan_starts_policy_node_with_the_given_settings_only() -> None:
    (spec,) = deploy_plan(policy="runs/reach1")
    assert spec.executable == "policy_node"
    assert spec.parameters == {"policy": "runs/reach1", "dry_run": False, "autostart": True, "use_sim_time": False}
    (spec,) = deploy_plan(policy="runs/reach1", dry_run="true", autostart="false", controller="c", rate_hz="50")
    assert spec.parameters["dry_run"] is True and spec.parameters["autostart"] is False
    assert spec.parameters["deploy.controller"] == "c" and spec.parameters["deploy.rate_hz"] == 50.0
    with pytest.raises(ValueError, match="policy:=RUN_OR_POLICY_DIR is required"):
        deploy_plan(policy=" ")


def test_gazebo_plan(tmp_path: Path) -> None:
    specs = gazebo_plan("arm3", out_dir=tmp_path)
    includes = [s for s in specs if isinstance(s, IncludeSpec)]
    nodes = [s for s in specs if isinstance(s, NodeSpec)]
    assert includes[0].package == "ros_gz_sim" and str(tmp_path / "world.sdf") in includes[0].arguments["gz_args"]
    assert {n.package for n in nodes} <= EXTERNAL
    assert any("joint_group_position_controller" in n.arguments for n in nodes)


@pytest.mark.parametrize("name", ["sim.launch.py", "train.launch.py", "gazebo.launch.py", "deploy.launch.py"])
def test_launch_files_are_thin_over_the_plans(name: str) -> None:
    tree = ast.parse((LAUNCH / name).read_text())
    imported = {
        a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module and n.module.endswith("launch_plan")
        for a in n.names
    }
    plan = {
        "sim.launch.py": ("sim_plan", "SIM_ARGS"),
        "train.launch.py": ("train_plan", "TRAIN_ARGS"),
        "gazebo.launch.py": ("gazebo_plan", "GAZEBO_ARGS"),
        "deploy.launch.py": ("deploy_plan", "DEPLOY_ARGS"),
    }[name]
    assert set(plan) <= imported
    funcs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert "generate_launch_description" in funcs
    assert len((LAUNCH / name).read_text().splitlines()) < 60


def test_train_launch_arguments_match_the_issue() -> None:
    assert {"backend", "robot", "task", "config", "use_sim_time"} <= set(TRAIN_ARGS)


@pytest.mark.parametrize("robot", ["arm3", "cartpole"])
def test_generated_sdf_is_valid_for_libsdformat(robot: str, tmp_path: Path) -> None:
    ign = shutil.which("ign") or shutil.which("gz")
    if ign is None:
        pytest.skip("libsdformat tools not installed (make setup installs ignition-tools and libsdformat-dev)")
    r = load_robot(robot, need_ee=False)
    assets = write_assets(r, tmp_path)
    proc = subprocess.run([ign, "sdf", "-k", str(assets.world)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "Valid" in proc.stdout, proc.stdout + proc.stderr
    world = ET.parse(assets.world).getroot().find("world")
    model = next(m for m in world.findall("model") if m.get("name") == r.name)
    joints = {j.get("name"): j.get("type") for j in model.findall("joint")}
    for name in r.joint_names:
        assert joints[name] in ("revolute", "prismatic")
    plugins = {p.get("filename") for p in model.findall("plugin")} | {
        p.get("filename") for p in world.findall("plugin")
    }
    assert {"gz_ros2_control-system", "gz-sim-physics-system", "gz-sim-scene-broadcaster-system"} <= plugins
    urdf = ET.parse(assets.urdf).getroot()
    assert [j.get("name") for j in urdf.find("ros2_control").findall("joint")] == r.joint_names
    ctrl = yaml.safe_load(assets.controllers.read_text())
    assert ctrl["joint_group_position_controller"]["ros__parameters"]["joints"] == r.joint_names
    bridge = yaml.safe_load(assets.bridge.read_text())
    assert any(b["ros_topic_name"] == "/clock" and b["ros_type_name"] == "rosgraph_msgs/msg/Clock" for b in bridge)


def test_libsdformat_rejects_a_broken_sdf(tmp_path: Path) -> None:
    ign = shutil.which("ign") or shutil.which("gz")
    if ign is None:
        pytest.skip("libsdformat tools not installed")
    bad = tmp_path / "bad.sdf"
    bad.write_text(
        '<sdf version="1.9"><world name="w"><model name="m"><link name="a"/>'
        '<joint name="j" type="revolute"><parent>a</parent><child>nope</child></joint></model></world></sdf>'
    )
    assert subprocess.run([ign, "sdf", "-k", str(bad)], capture_output=True, timeout=60).returncode != 0

"""The deploy side of grippers, without ROS: the gripper command (stroke, rate limit, NaN, holds that keep the last
command), beside the real control core, the interface read from a ros2_control controllers YAML, and the
one-line refusals of bad ``deploy.*`` gripper keys through the CLI."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from deploy_helpers import untrained_run

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.errors import ConfigError
from embodied_ws.deploy.artifact import resolve_target
from embodied_ws.deploy.control import ControlCore
from embodied_ws.deploy.gripper_command import (
    GripperCommand,
    GripperLoop,
    controller_interface,
    gripper_limits,
    gripper_output,
    new_goal,
)
from embodied_ws.sim.env import RobotEnv
from embodied_ws.sim.mapping import build_robot

FIX = Path(__file__).parent / "fixtures" / "robots"
JAW = FIX / "grippers" / "single_jaw.xml"  # an SO-101-like single jaw: leader "jaw", -0.2 (closed) .. 1.6 rad
PANDA = FIX / "menagerie" / "panda.xml"  # a tendon actuator commanded 0..255; its leader moves 0..0.04 m
GRIP = [f"env.robot={JAW}", "task.gripper=action"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained single-jaw reach policy whose every action is pushed to +1 (the jaw opens)."""
    return untrained_run(tmp_path_factory.mktemp("grip") / "run", *GRIP, action_bias=3.0)


def _jaw_limits(rate_hz: float = 25.0, *sets: str):
    cfg = load_config("reach", [*GRIP, "dr=none", *sets])
    return gripper_limits(build_robot(cfg), cfg.deploy, rate_hz)


# ----------------------------------------------------------------------------- the command alone
def test_the_command_starts_measured_moves_at_the_rate_limit_inside_the_stroke_and_holds_its_last() -> None:
    lim = _jaw_limits(25.0, "deploy.gripper_stroke_s=0.5")
    assert lim.joints == ("jaw",) and (lim.closed[0], lim.open[0]) == pytest.approx((-0.2, 1.6))
    assert lim.max_step[0] == pytest.approx(1.8 / 0.5 / 25.0)  # a full stroke in 0.5 s at 25 Hz
    cmd = GripperCommand(lim)
    assert cmd.hold() is None  # never commanded: a hold sends nothing
    first = cmd.step(np.array([1.0]), np.array([0.1]))
    assert first[0] == pytest.approx(0.1 + lim.max_step[0])  # from the measured position, one step
    out = [first[0]]
    for _ in range(30):
        out.append(cmd.step(np.array([1.0]), np.array([0.0]))[0])  # the measured value no longer matters
    steps = np.diff(out)
    assert (steps >= 0).all() and steps.max() <= lim.max_step[0] + 1e-12
    assert out[-1] == pytest.approx(1.6) and max(out) <= 1.6 and cmd.events["rate_limit"] > 0
    for bad in (np.nan, np.inf, -np.inf):  # dropped: the last command is kept
        assert cmd.step(np.array([bad]), np.array([0.0]))[0] == out[-1]
    assert cmd.events["nonfinite"] == 3
    assert cmd.step(np.array([1.0, 1.0]), np.array([0.0]))[0] == out[-1]  # the wrong size too
    held = cmd.step(np.array([-1e300]), np.array([1.6]))  # clipped to the closed end, approached at the rate
    assert held[0] == pytest.approx(1.6 - lim.max_step[0])
    assert cmd.hold()[0] == held[0] and cmd.last[0] == held[0]
    cmd.restart()  # a new activation: from the measured position again (clipped into the stroke)
    assert cmd.step(np.array([-1.0]), np.array([5.0]))[0] == pytest.approx(1.6 - lim.max_step[0])
    cmd.restart()
    assert cmd.step(np.array([-1.0]), np.array([math.nan])) is None  # nowhere to start from


def test_panda_commands_its_leader_in_metres_and_a_limits_file_tightens_it(tmp_path: Path) -> None:
    limits = tmp_path / "limits.yaml"
    limits.write_text("joints:\n  finger_joint2: {upper: 0.03, max_velocity: 0.01}\n")
    cfg = load_config("reach", [f"env.robot={PANDA}", "task.gripper=action", "dr=none"])
    robot = build_robot(cfg)
    lim = gripper_limits(robot, cfg.deploy, 50.0)
    k = robot.gripper_actuators[0]
    assert robot.ctrl_high[k] == 255.0  # the actuator's units are not the command's
    assert lim.joints == ("finger_joint2",) and (lim.lower[0], lim.upper[0]) == pytest.approx((0.0, 0.04))
    assert lim.position(np.array([-1.0, 0.0, 1.0])) == pytest.approx([0.0, 0.02, 0.04])
    assert lim.force[0] == pytest.approx(100.0)
    cfg.deploy.limits_file = str(limits)
    tight = gripper_limits(robot, cfg.deploy, 50.0)
    assert tight.upper[0] == pytest.approx(0.03) and tight.max_step[0] == pytest.approx(0.01 / 50.0)
    cmd = GripperCommand(tight)
    out = [cmd.step(np.array([1.0]), np.array([0.029]))[0] for _ in range(10)]
    assert out[0] == pytest.approx(0.0292) and out[-1] == pytest.approx(0.03) and max(out) <= 0.03
    limits.write_text("joints:\n  finger_joint2: {lower: 0.035, upper: 0.03}\n")
    with pytest.raises(ConfigError, match=r"limits.yaml: empty command range for the gripper joint 'finger_joint2'"):
        gripper_limits(robot, cfg.deploy, 50.0)
    assert gripper_limits(build_robot(load_config("reach", [f"env.robot={PANDA}"])), cfg.deploy, 50.0) is None


def test_an_action_goal_is_sent_only_when_the_command_moves() -> None:
    lim = _jaw_limits()
    assert new_goal(None, np.array([0.3]), lim)
    assert not new_goal(np.array([0.3]), np.array([0.3 + 0.004 * 1.8]), lim)
    assert new_goal(np.array([0.3]), np.array([0.3 + 0.006 * 1.8]), lim)


# ----------------------------------------------------------------------------- beside the control core
def test_beside_the_core_the_gripper_follows_the_policy_and_keeps_its_last_command_in_every_hold(run: Path) -> None:
    target = resolve_target(run, ["deploy.soft_start_s=0.2"])
    core = ControlCore(target)
    grip = GripperLoop.of(core)
    assert grip is not None and grip.arm_joints == ["shoulder_pan", "shoulder_lift", "wrist_flex"]
    lim = grip.command.limits
    k = core.robot.gripper_actuators[0]
    # the arm's envelope leaves the gripper's (unsent) entry alone: no margin, rate or offset clipping for it
    assert core.limits.max_offset[k] == math.inf and core.limits.lower[k] == core.robot.ctrl_low[k]
    env = RobotEnv(target.config, load_dr("none"), seed=1)
    env.reset(seed=1)
    qadr, vadr = core.qpos_adr, core.qvel_adr
    core.set_goal(env.core.goal[0])
    now, dt = 0.0, 1.0 / core.rate_hz
    sent = []
    for i in range(40):
        assert core.set_state(env.data.qpos[qadr], env.data.qvel[vadr], i * dt, now)
        out = core.tick(now)
        g = grip.tick(out)
        assert out is not None and g is not None and grip.arm_command(out).shape == (3,)
        sent.append(g[0])
        env.step(core.policy_action)  # the simulated robot does what the policy said (the jaw opens)
        now += dt
    steps = np.abs(np.diff(sent))
    assert steps.max() <= lim.max_step[0] + 1e-12 and min(sent) >= lim.lower[0] and max(sent) <= lim.upper[0]
    assert sent[-1] == pytest.approx(1.6) and sent[0] < 0.5  # ramped from the measured jaw to open
    last = grip.command.last
    # no valid task: the arm holds at its measured pose, the gripper at its last command, even with the jaw
    # measured elsewhere (a held object): it never opens or lets go by itself
    assert not core.set_goal(np.array([10.0, 10.0, 10.0]))
    q = env.data.qpos[qadr].copy()
    q[core.state_joints.index("jaw")] = 0.3
    for _ in range(5):
        i, now = i + 1, now + dt
        assert core.set_state(q, np.zeros_like(q), i * dt, now)
        out = core.tick(now)
        assert core.envelope.status.mode == "hold" and grip.tick(out)[0] == last[0]
    # the state watchdog: a valid task again but no fresh state
    assert core.set_goal(env.core.goal[0])
    now += 1.0
    out = core.tick(now)
    assert core.envelope.status.mode == "state_timeout" and grip.tick(out)[0] == last[0]
    assert grip.command.events["hold"] == 6
    core.estop()  # nothing goes out
    assert core.tick(now) is None and grip.tick(None) is None


# ----------------------------------------------------------------------------- the interface


def _controllers(**ctrls: tuple[str, dict]) -> dict:
    out = {"controller_manager": {"ros__parameters": {"update_rate": 100}}}
    for name, (ctype, params) in ctrls.items():
        out["controller_manager"]["ros__parameters"][name] = {"type": ctype}
        out[name] = {"ros__parameters": params}
    return out


ARM = ("joint_trajectory_controller/JointTrajectoryController", {"joints": ["j1", "j2"]})


@pytest.mark.parametrize(
    ("ctype", "params", "expected"),
    [
        ("position_controllers/GripperActionController", {"joint": "jaw"}, ("action", "/hand/gripper_cmd")),
        ("parallel_gripper_action_controller/GripperActionController", {"joint": "jaw"},
         ("action", "/hand/gripper_cmd")),
        ("forward_command_controller/ForwardCommandController", {"joints": ["jaw"], "interface_name": "position"},
         ("topic", "/hand/commands")),
        ("position_controllers/JointGroupPositionController", {"joints": ["jaw"]}, ("topic", "/hand/commands")),
    ],
)  # fmt: skip
def test_the_declared_controller_type_picks_the_interface(ctype: str, params: dict, expected: tuple) -> None:
    assert controller_interface(_controllers(arm=ARM, hand=(ctype, params)), "jaw", "arm") == expected


@pytest.mark.parametrize(
    ("ctrls", "message"),
    [
        ({"arm": ARM}, "no controller drives the gripper joint jaw (controllers: arm)"),
        ({"hand": ("joint_trajectory_controller/JointTrajectoryController", {"joints": ["jaw"]})},
         "controller hand (joint_trajectory_controller/JointTrajectoryController) drives the gripper joint jaw"),
        ({"hand": ("forward_command_controller/ForwardCommandController",
                   {"joints": ["jaw"], "interface_name": "effort"})}, "drives the gripper joint jaw: the toolkit"),
        ({"arm": ("position_controllers/JointGroupPositionController", {"joints": ["j1", "jaw"]})},
         "controller arm drives the gripper joint jaw together with other joints"),
        ({}, "no controller declared"),
    ],
)  # fmt: skip
def test_a_controller_the_toolkit_cannot_command_is_one_line(ctrls: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        controller_interface(_controllers(**ctrls), "jaw", "arm", "ctl.yaml")
    line = err.value.line()
    assert "\n" not in line and line.startswith("error: ctl.yaml: ") and message in line, line


def test_gripper_output_from_the_keys_and_from_a_controllers_file(tmp_path: Path) -> None:
    lim = _jaw_limits()
    d = load_config("reach", GRIP).deploy
    assert (gripper_output(d, lim).interface, gripper_output(d, lim).name) == ("topic", "/gripper_controller/commands")
    d.gripper_interface, d.gripper_controller = "action", "hand"
    assert gripper_output(d, lim).name == "/hand/gripper_cmd"
    d.gripper_topic = "/my/gripper"
    assert gripper_output(d, lim).name == "/my/gripper"
    path = tmp_path / "controllers.yaml"
    import yaml

    ctype = "position_controllers/GripperActionController"
    path.write_text(yaml.safe_dump(_controllers(arm=ARM, robotiq=(ctype, {"joint": "jaw"}))))
    d = load_config("reach", [*GRIP, f"deploy.controllers_file={path}"]).deploy
    out = gripper_output(d, lim)
    assert (out.interface, out.name, out.source) == ("action", "/robotiq/gripper_cmd", str(path))
    d.gripper_interface = "topic"  # an explicit interface wins over the file
    assert gripper_output(d, lim).interface == "topic"
    for key, value in (("gripper_topic", "/a//b"), ("gripper_controller", "hand/"), ("gripper_topic", "a b")):
        d = load_config("reach", GRIP).deploy
        setattr(d, key, value)
        with pytest.raises(ConfigError, match=rf"deploy\.{key}: not a valid ROS name"):
            gripper_output(d, lim)
    d = load_config("reach", [*GRIP, f"deploy.controllers_file={tmp_path / 'none.yaml'}"]).deploy
    with pytest.raises(ConfigError, match=r"none\.yaml: file not found"):
        gripper_output(d, lim)


def test_a_description_s_own_controllers_yaml_picks_the_interface(tmp_path: Path) -> None:
    """A URDF whose gz_ros2_control plugin names its controllers YAML: ``auto`` reads the gripper's controller."""
    import yaml

    controllers = tmp_path / "controllers.yaml"
    ctype = "position_controllers/GripperActionController"
    arm = ("position_controllers/JointGroupPositionController", {"joints": ["joint1", "joint2"]})
    controllers.write_text(yaml.safe_dump(_controllers(arm=arm, robotiq_gripper=(ctype, {"joint": "finger_joint"}))))
    plugin = ('<gazebo><plugin filename="gz_ros2_control-system" name="gz_ros2_control::GazeboSimROS2ControlPlugin">'
              f"<parameters>{controllers}</parameters></plugin></gazebo>\n</robot>")  # fmt: skip
    urdf = tmp_path / "robotiq_arm.urdf"
    urdf.write_text((FIX / "grippers" / "robotiq_arm.urdf").read_text().replace("</robot>", plugin))
    cfg = load_config("reach", [f"env.robot={urdf}", "task.gripper=action", "deploy.controller=arm"])
    lim = gripper_limits(build_robot(cfg), cfg.deploy, 25.0)
    out = gripper_output(cfg.deploy, lim, cfg.env)
    assert (out.interface, out.name, out.source) == ("action", "/robotiq_gripper/gripper_cmd", str(controllers))
    bare = load_config("reach", [f"env.robot={FIX / 'grippers' / 'robotiq_arm.urdf'}", "task.gripper=action"])
    assert gripper_output(bare.deploy, lim, bare.env).interface == "topic"  # names no YAML: topic
    controllers.unlink()  # a YAML named but absent: not guessed at
    assert gripper_output(cfg.deploy, lim, cfg.env).interface == "topic"


def _one_error(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (proc.returncode, proc.stderr)
    return lines[0]


def test_deploy_check_shows_the_gripper_and_bad_gripper_keys_are_one_line(cli, run: Path) -> None:
    proc = cli("deploy", str(run), "--check", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["gripper_joints"] == ["jaw"] and out["gripper_interface"] == "topic"
    assert out["gripper_name"] == "/gripper_controller/commands" and out["gripper_upper"] == pytest.approx([1.6])
    assert out["arm_joints"] == ["shoulder_pan", "shoulder_lift", "wrist_flex"]
    for setting, key in (("deploy.gripper_interface=grab", "deploy.gripper_interface"),
                         ("deploy.gripper_stroke_s=0", "deploy.gripper_stroke_s"),
                         ("deploy.gripper_topic=/a//b", "deploy.gripper_topic")):  # fmt: skip
        assert key in _one_error(cli("deploy", str(run), "--check", "--set", setting))


@pytest.mark.skipif(importlib.util.find_spec("control_msgs") is not None, reason="control_msgs is installed here")
def test_the_action_interface_without_control_msgs_is_refused_before_ros_starts(cli, run: Path) -> None:
    pytest.importorskip("rclpy")
    line = _one_error(cli("deploy", str(run), "--set", "deploy.gripper_interface=action", "--duration", "1"))
    assert "gripper_interface: action needs control_msgs: apt install ros-jazzy-control-msgs" in line


def test_an_ee_delta_policy_s_gripper_action_is_the_tail_of_its_action(tmp_path: Path) -> None:
    """``ee_delta``: ``[dx, dy, dz]`` then the gripper; the Panda's gripper actuator is its 8th (index 7)."""
    run = untrained_run(tmp_path / "run", f"env.robot={PANDA}", "task.gripper=action", "env.action_mode=ee_delta",
                        action_bias=3.0)  # fmt: skip
    core = ControlCore(resolve_target(run, ["deploy.soft_start_s=0"]))
    grip = GripperLoop.of(core)
    assert core.io.action_dim == 4 and core.robot.gripper_actuators == [7]
    assert grip.slots.tolist() == [3] and grip.arm.tolist() == list(range(7))
    env = RobotEnv(core.cfg, load_dr("none"), seed=2)
    env.reset(seed=2)
    core.set_goal(env.core.goal[0])
    sent = []
    for i in range(20):
        q = env.data.qpos[core.qpos_adr]
        assert core.set_state(q, np.zeros_like(q), i * 0.04, i * 0.04)
        sent.append(grip.tick(core.tick(i * 0.04))[0])
    assert sent[-1] == pytest.approx(0.04) and np.diff(sent).max() <= grip.command.limits.max_step[0] + 1e-12

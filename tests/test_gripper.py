"""Grippers (issue 20, item 1): detection from the model's structure on every robot in the fixtures and the
example-robot-data arms, the normalised open/close mapping, ``task.gripper: action`` in the env, and the
one-line refusal of a gripper the toolkit cannot drive."""

from __future__ import annotations

import json
import sysconfig
import xml.etree.ElementTree as ET
from pathlib import Path

import mujoco
import numpy as np
import pytest

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.errors import ModelError
from embodied_ws.sim.env import RobotEnv
from embodied_ws.sim.robot import load_robot

FIX = Path(__file__).resolve().parent / "fixtures" / "robots"
MENAGERIE = FIX / "menagerie"
SYNTH = FIX / "grippers"
XACRO = FIX / "tiny_arm_description" / "urdf" / "tiny_arm.urdf.xacro"
ERD = Path(sysconfig.get_paths()["purelib"]) / "cmeel.prefix" / "share" / "example-robot-data" / "robots"
PANDA_URDF = ERD / "panda_description" / "urdf" / "panda.urdf"


def _urdf_effort(path: Path, joint: str) -> float:
    """The effort limit the URDF states for ``joint`` (what the gripper's force must report)."""
    for j in ET.parse(path).getroot().iter("joint"):
        if j.get("name") == joint:
            return float(j.find("limit").get("effort"))
    raise KeyError(joint)


def _urdf_range(path: Path, joint: str) -> tuple[float, float]:
    for j in ET.parse(path).getroot().iter("joint"):
        if j.get("name") == joint:
            lim = j.find("limit")
            return float(lim.get("lower")), float(lim.get("upper"))
    raise KeyError(joint)


def _need(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"{path} not installed")
    return path


# ----------------------------------------------------------------------------- robots without a gripper
@pytest.mark.parametrize(
    "robot",
    [
        *(str(MENAGERIE / f"{n}.xml") for n in ("gen3", "iiwa14", "lite6", "sawyer", "ur5e")),
        "arm3",
        f"{XACRO}|gripper:=fixed",
        f"{XACRO}|gripper:=none",
        str(ERD / "ur_description" / "urdf" / "ur5_robot.urdf"),
        str(ERD / "xarm_description" / "urdf" / "xarm7.urdf"),
        str(ERD / "kinova_description" / "robots" / "kinova.urdf"),  # fingers are fixed joints
    ],
)
def test_no_gripper_found(robot: str) -> None:
    path, *args = robot.split("|")
    if "/" in path:
        _need(Path(path))
    r = load_robot(path, robot_args=args)
    assert r.grippers == []
    with pytest.raises(ModelError, match="no gripper joint was found"):
        load_robot(path, robot_args=args, gripper="action")


# ----------------------------------------------------------------------------- parallel grippers
@pytest.mark.parametrize("path", [MENAGERIE / "panda.xml", FIX / "damped" / "panda_damped.xml"])
def test_menagerie_panda_tendon_gripper(path: Path) -> None:
    """A tendon actuator (0..255) over two equality-coupled sliding fingers; held by default as before."""
    r = load_robot(str(path))
    (g,) = r.grippers
    assert g.drivable and g.actuator == "actuator8"
    assert {g.leader, *g.followers} == {"finger_joint1", "finger_joint2"} and len(g.followers) == 1
    assert g.leader == "finger_joint2"  # the model's equality makes finger_joint1 follow finger_joint2
    assert (g.closed, g.open) == pytest.approx((0.0, 0.04))
    assert (g.ctrl_closed, g.ctrl_open) == pytest.approx((0.0, 255.0), abs=1e-3)
    assert g.force == pytest.approx(100.0) and g.kind == "slide"
    # two fingers sliding 0.04 m each: the fingertip gap opens by twice the leader's stroke
    assert g.gap_open - g.gap_closed == pytest.approx(2 * g.stroke, rel=1e-6)
    # held by default: the policy commands the 7 arm joints, as reach always did
    assert r.nu == 7 and r.gripper_actuators == []
    assert sorted(r.held_joints) == ["finger_joint1", "finger_joint2"]


def test_menagerie_xarm7_linkage_gripper() -> None:
    """xArm7's gripper: one tendon actuator, a coupled driver pair and four-bar joints closed by connect equalities."""
    r = load_robot(str(MENAGERIE / "xarm7.xml"))
    (g,) = r.grippers
    assert g.drivable and len(g.joints) == 6
    assert len(g.followers) == 1 and len(g.linkage) == 4
    assert set(g.joints) == {g.leader, *g.followers, *g.linkage}
    lo, hi = r.model.jnt_range[mujoco.mj_name2id(r.model, mujoco.mjtObj.mjOBJ_JOINT, g.leader)]
    # 0 opens; the actuator's control range (0..255 through its gain) reaches 0.849 of the 0.85 range
    assert (g.open, g.closed) == pytest.approx((lo, hi), abs=0.01)
    assert g.gap_open > g.gap_closed
    assert g.ctrl_open < g.ctrl_closed  # its actuator closes as the control grows: the action is flipped


def test_tiny_arm_xacro_mimic_ros2_control() -> None:
    """xacro, a <mimic> finger, and a ros2_control block whose gripper joint has a command interface."""
    r = load_robot(str(XACRO))
    (g,) = r.grippers
    assert g.leader == "finger_left_joint" and g.followers == ("finger_right_joint",)
    assert g.actuator == "finger_left_joint" and g.drivable
    urdf = XACRO.with_name("tiny_arm_macro.xacro")
    assert (g.closed, g.open) == pytest.approx((0.0, 0.03))
    assert g.force == pytest.approx(20.0)  # the finger's URDF effort (in the macro: effort="20")
    assert 'effort="20"' in urdf.read_text()
    assert g.gap_open - g.gap_closed == pytest.approx(2 * g.stroke, rel=1e-6)
    assert r.held_joints == ["finger_left_joint", "finger_right_joint"]


def test_panda_urdf_from_example_robot_data() -> None:
    path = _need(PANDA_URDF)
    (g,) = load_robot(str(path)).grippers
    assert g.leader == "panda_finger_joint1" and g.followers == ("panda_finger_joint2",)
    assert g.force == pytest.approx(_urdf_effort(path, "panda_finger_joint1"))
    assert (g.closed, g.open) == pytest.approx(_urdf_range(path, "panda_finger_joint1"))
    assert g.gap_open - g.gap_closed == pytest.approx(2 * g.stroke, rel=1e-6)


def test_robotiq_style_mimic_chain() -> None:
    """Five joints follow one (one of them through another follower); the knuckle closes as it grows."""
    path = SYNTH / "robotiq_arm.urdf"
    r = load_robot(str(path))
    (g,) = r.grippers
    assert g.leader == "finger_joint" and g.drivable
    assert set(g.followers) == {
        "left_inner_finger_joint",
        "left_inner_knuckle_joint",
        "right_outer_knuckle_joint",
        "right_inner_finger_joint",
        "right_inner_knuckle_joint",
    }
    lo, hi = _urdf_range(path, "finger_joint")
    assert (g.open, g.closed) == pytest.approx((lo, hi))  # the fingertips part at 0: open is the low end
    assert g.force == pytest.approx(_urdf_effort(path, "finger_joint"))
    assert g.gap_open > g.gap_closed > 0


# ----------------------------------------------------------------------------- single jaw
def test_single_jaw_synthetic() -> None:
    r = load_robot(str(SYNTH / "single_jaw.xml"))
    (g,) = r.grippers
    assert g.leader == "jaw" and g.followers == () and g.kind == "hinge"
    assert (g.closed, g.open) == pytest.approx((-0.2, 1.6))  # the jaw swings away from the fixed jaw at +1.6
    assert g.force == pytest.approx(3.0) and g.gap_open > g.gap_closed


@pytest.mark.parametrize(
    ("rel", "jaw"),
    [
        ("so_arm_description/urdf/so100.urdf", "gripper"),
        ("so_arm_description/urdf/so101.urdf", "gripper"),
        ("z1_description/urdf/z1.urdf", "jointGripper"),
    ],
)
def test_urdf_single_jaw(rel: str, jaw: str) -> None:
    """SO-100/SO-101 (LeRobot arms) and Unitree Z1: one moving jaw, no mimic."""
    path = _need(ERD / rel)
    (g,) = load_robot(str(path)).grippers
    assert g.leader == jaw and g.followers == () and g.drivable and g.gap_open > g.gap_closed
    assert sorted([g.closed, g.open]) == pytest.approx(_urdf_range(path, jaw))
    assert g.force == pytest.approx(_urdf_effort(path, jaw))


# ----------------------------------------------------------------------------- the mapping
def test_action_mapping_is_linear_and_inverts() -> None:
    r = load_robot(str(SYNTH / "robotiq_arm.urdf"))
    (g,) = r.grippers
    a = np.linspace(-1.0, 1.0, 9)
    assert g.set_point(-1.0) == pytest.approx(g.closed) and g.set_point(1.0) == pytest.approx(g.open)
    np.testing.assert_allclose(g.action(g.set_point(a)), a, atol=1e-12)
    assert g.set_point(5.0) == pytest.approx(g.open)  # clipped
    np.testing.assert_allclose(np.diff(g.ctrl(a)), np.diff(g.ctrl(a))[0])


# ----------------------------------------------------------------------------- names do not matter; refusals
_HAND = """<mujoco>
  <worldbody>
    <body name="b0"><joint name="q0" axis="0 0 1" range="-2 2"/><geom size="0.03" mass="1"/>
      <body name="b1" pos="0 0 0.1"><joint name="q1" axis="0 1 0" range="-1.5 1.5"/>
        <geom type="capsule" fromto="0 0 0 0 0 0.2" size="0.02" mass="0.5"/>
        <body name="palm" pos="0 0 0.2"><geom type="box" size="0.02 0.04 0.01" mass="0.2"/>
          <site name="tcp" pos="0 0 0.08"/>
          <body name="part_a" pos="0 0 0.02"><joint name="slider_a" type="slide" axis="0 1 0" range="0 0.05"/>
            <geom type="box" pos="0 0.005 0.03" size="0.005 0.005 0.03" mass="0.02"/></body>
          <body name="part_b" pos="0 0 0.02"><joint name="slider_b" type="slide" axis="0 -1 0" range="0 0.05"/>
            <geom type="box" pos="0 -0.005 0.03" size="0.005 0.005 0.03" mass="0.02"/></body>
        </body>
      </body>
    </body>
  </worldbody>
  TENDON
  EQUALITY
  <actuator>
    <position joint="q0" kp="50"/><position joint="q1" kp="50"/>
    ACTUATORS
  </actuator>
</mujoco>"""
_EQ = '<equality><joint joint1="slider_b" joint2="slider_a"/></equality>'
_TENDON = (
    '<tendon><fixed name="pull"><joint joint="slider_a" coef="0.5"/>'
    '<joint joint="slider_b" coef="0.5"/></fixed></tendon>'
)


def _hand(tmp_path: Path, actuators: str, eq: str = _EQ, tendon: str = "") -> str:
    path = tmp_path / "hand.xml"
    path.write_text(_HAND.replace("ACTUATORS", actuators).replace("EQUALITY", eq).replace("TENDON", tendon))
    return str(path)


def test_neutral_names_detected_by_structure(tmp_path: Path) -> None:
    """Fingers named slider_a/slider_b (nothing gripper-like): found from the tree, equality and actuator."""
    path = _hand(tmp_path, '<position name="squeeze" joint="slider_a" kp="200" forcerange="-40 40"/>')
    (g,) = load_robot(path).grippers
    assert (g.leader, g.followers, g.actuator) == ("slider_a", ("slider_b",), "squeeze")
    assert (g.closed, g.open, g.force) == pytest.approx((0.0, 0.05, 40.0))


@pytest.mark.parametrize(
    ("actuators", "eq", "tendon", "problem"),
    [
        ("", "", "", "no actuator drives them"),
        ('<position joint="slider_a" kp="200"/>', "", "", "slider_b have no actuator and follow no actuated joint"),
        ('<position joint="slider_a" kp="200"/><position joint="slider_b" kp="200"/>', "", "", "2 actuators"),
        ('<position tendon="pull" kp="200"/>', "", _TENDON, "underactuated: tendon actuator"),
        ('<motor joint="slider_a" gear="1"/>', _EQ, "", "not a position actuator"),
    ],
)
def test_undrivable_refused_only_when_asked(tmp_path: Path, actuators: str, eq: str, tendon: str, problem: str) -> None:
    path = _hand(tmp_path, actuators, eq, tendon)
    held = load_robot(path)  # held: nothing changes, the gripper is listed with its problem
    (g,) = held.grippers
    assert not g.drivable and problem in g.problem
    assert set(g.joints) == {"slider_a", "slider_b"} and held.nu == 2
    with pytest.raises(ModelError) as err:
        load_robot(path, gripper="action")
    line = err.value.line()
    assert "\n" not in line and "slider_a, slider_b" in line and problem in line


def test_ros2_control_without_gripper_interface_refused(cli, tmp_path: Path) -> None:
    """A ros2_control block that does not command the knuckle: no actuator, refused with one line, exit 2."""
    text = (SYNTH / "robotiq_arm.urdf").read_text()
    cut = '<joint name="finger_joint"><command_interface name="position"/><state_interface name="position"/></joint>'
    assert cut in text
    path = tmp_path / "robotiq_passive.urdf"
    path.write_text(text.replace(cut, ""))
    (g,) = load_robot(str(path)).grippers
    assert not g.drivable and "no actuator" in g.problem
    proc = cli("train", "--robot", str(path), "--set", "task.gripper=action", "--runs", str(tmp_path / "runs"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "finger_joint" in lines[0], proc.stderr


# ----------------------------------------------------------------------------- the env drives it
@pytest.mark.parametrize(
    "robot",
    [
        str(MENAGERIE / "panda.xml"),
        str(MENAGERIE / "xarm7.xml"),
        str(SYNTH / "robotiq_arm.urdf"),
        str(SYNTH / "single_jaw.xml"),
    ],
)
def test_env_gripper_action_opens_and_closes(robot: str) -> None:
    cfg = load_config("reach", [f"env.robot={robot}", "task.gripper=action", "env.action_mode=delta"])
    env = RobotEnv(cfg, load_dr("none"), seed=0)
    r = env.core.robot
    (g,) = r.grippers
    (k,) = r.gripper_actuators
    assert env.action_space.shape == (r.nu,) and r.joint_names[k] == g.leader
    assert not set(g.joints) & set(r.held_joints)
    m = r.model

    def q(name: str) -> float:
        return float(env.data.qpos[m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)]])

    env.reset(seed=0)
    tol = 0.03 * g.stroke
    for target, expected in ((-1.0, g.closed), (1.0, g.open), (-1.0, g.closed)):
        a = np.zeros(r.nu)
        a[k] = target
        for _ in range(150):  # 6 s: the xArm7's own tendon servo creeps over the last few per cent
            env.step(a)
        assert q(g.leader) == pytest.approx(expected, abs=tol), (target, q(g.leader))
    # followers follow (mimic: follower = offset + multiplier x leader, checked at the closed end)
    for e in range(m.neq):
        if m.eq_type[e] == mujoco.mjtEq.mjEQ_JOINT and m.eq_obj2id[e] >= 0:
            f, lead = (mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, m.eq_obj1id[e]), m.eq_obj2id[e])
            lead = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, lead)
            if f in g.joints:
                c0, c1 = m.eq_data[e][:2]
                assert q(f) == pytest.approx(c0 + c1 * q(lead), abs=tol)
    env.close()


def test_reach_keeps_gripper_held() -> None:
    cfg = load_config("reach", [f"env.robot={MENAGERIE / 'panda.xml'}"])
    assert cfg.task.gripper == "held"
    env = RobotEnv(cfg, load_dr("none"), seed=0)
    # the preset's auto mode: end-effector steps, and no gripper entry among the actions
    assert env.action_space.shape == (3,) and env.core.io.mode == "ee_delta" and env.core.robot.gripper_actuators == []
    env.close()


# ----------------------------------------------------------------------------- robot show
def test_robot_show_lists_gripper(cli, tmp_path: Path) -> None:
    proc = cli("robot", "show", str(MENAGERIE / "panda.xml"), "--no-image", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("gripper:"))
    assert "finger_joint2 (+ finger_joint1 following)" in line and "actuator8" in line
    assert "stroke 0.04 m" in line and "force 100 N" in line and "held" in line
    assert any(ln.startswith("reach preset: ee_delta actions, ") for ln in proc.stdout.splitlines()), proc.stdout
    proc = cli("robot", "show", str(SYNTH / "robotiq_arm.urdf"), "--no-image", "--json", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (g,) = json.loads(proc.stdout)["grippers"]
    assert g["leader"] == "finger_joint" and len(g["followers"]) == 5 and g["drivable"]
    assert g["stroke"] == pytest.approx(0.8) and g["force"] == pytest.approx(60.0)


# ----------------------------------------------------------------------------- every fixture robot
def _fixture_robots() -> list[Path]:
    files = [p for p in FIX.rglob("*") if p.suffix in (".xml", ".urdf") or p.name.endswith(".urdf.xacro")]
    return sorted(p for p in files if "broken" not in p.parts and p.name != "package.xml")


@pytest.mark.parametrize("path", _fixture_robots(), ids=lambda p: str(p.relative_to(FIX)))
def test_every_fixture_robot_held_or_driven(path: Path) -> None:
    """Each robot file under tests/fixtures/robots: a gripper found is drivable (one more action, its joints no
    longer held) or names its problem and is refused with one line; held, the arm is what it always was."""
    held = load_robot(str(path))
    for g in held.grippers:
        assert g.joints and set(g.joints) <= set(held.held_joints)
        if g.drivable:
            assert g.leader in g.joints and g.stroke > 0 and g.ctrl_open != g.ctrl_closed
    if held.grippers and all(g.drivable for g in held.grippers):
        driven = load_robot(str(path), gripper="action")
        assert driven.nu == held.nu + len(held.grippers)
        assert set(driven.held_joints) == set(held.held_joints) - {j for g in held.grippers for j in g.joints}
    else:
        with pytest.raises(ModelError):
            load_robot(str(path), gripper="action")


def test_linkage_closed_kinematically_as_in_simulation() -> None:
    """xArm7's four-bar fingers: the linkage joints solved from the connect equalities (used for the fingertip
    gap) are where MuJoCo's constraint solver puts them with the gripper driven to its closed end."""
    from embodied_ws.sim.gripper_geometry import close_loops

    r = load_robot(str(MENAGERIE / "xarm7.xml"), gripper="action")
    (g,) = r.grippers
    (k,) = r.gripper_actuators
    m = r.model
    data = mujoco.MjData(m)
    data.qpos[:] = r.home_qpos
    data.ctrl[:] = r.home_qpos[r.qpos_idx]  # arm servos hold home
    data.ctrl[k] = g.ctrl(-1.0)
    for _ in range(3000):
        mujoco.mj_step(m, data)
    ids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n) for n in g.linkage]
    adr = m.jnt_qposadr[ids]
    solved = mujoco.MjData(m)
    solved.qpos[:] = data.qpos
    solved.qpos[adr] = m.qpos0[adr]  # forget the simulated linkage, keep leader and followers
    assert close_loops(m, solved, ids) < 1e-6
    np.testing.assert_allclose(solved.qpos[adr], data.qpos[adr], atol=0.02)
    assert abs(data.qpos[m.jnt_qposadr[g.leader_id]] - g.closed) < 0.05 * g.stroke


@pytest.mark.parametrize("robot", [str(MENAGERIE / "panda.xml"), str(SYNTH / "robotiq_arm.urdf")])
def test_place_sets_followers_consistently(robot: str) -> None:
    """``place``: the leader at the action's set-point and every joint equality satisfied (no constraint pull)."""
    from embodied_ws.sim.gripper import place

    r = load_robot(robot, gripper="action")
    (g,) = r.grippers
    m = r.model
    for action in (-1.0, 0.3, 1.0):
        q = place(m, r.home_qpos, g, action)
        assert q[m.jnt_qposadr[g.leader_id]] == pytest.approx(g.set_point(action))
        data = mujoco.MjData(m)
        data.qpos[:] = q
        mujoco.mj_forward(m, data)
        rows = [i for i in range(data.nefc) if data.efc_type[i] == mujoco.mjtConstraint.mjCNSTR_EQUALITY]
        assert rows and np.abs(data.efc_pos[rows]).max() < 1e-9

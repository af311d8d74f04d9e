"""``embodied-ws task check``: reach on arm3 passes; broken tasks (loaded by ``module:attr`` from a temporary module)
each get their one-line finding and exit code 2; the gripper-hold check holds a cube and drops a slippery one."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import mujoco
import numpy as np
import pytest

from embodied_ws.cli import main
from embodied_ws.sim.grip_hold import SLIP_LIMIT, free_bodies, grip_hold

MENAGERIE_DIR = Path(__file__).parent / "fixtures" / "robots" / "menagerie"

#: broken variants of reach, each wrong in one way (the module is written to a folder on sys.path)
BROKEN = """
import numpy as np
from embodied_ws.sim.tasks.reach import ReachTask
from embodied_ws.sim.tasks.swingup import SwingUpTask


class NeverFires(ReachTask):
    def evaluate(self, qpos, qvel, sensordata, goal, action):
        reward, success, terms = super().evaluate(qpos, qvel, sensordata, goal, action)
        return reward, success, {**terms, "grasp": np.zeros(len(reward))}


class RareEvent(NeverFires):
    event_terms = ("grasp",)  # a rare-event term may stay 0 in the check's few episodes


class QuietSwing(SwingUpTask):
    def evaluate(self, qpos, qvel, sensordata, goal, action):
        reward, success, terms = super().evaluate(qpos, qvel, sensordata, goal, action)
        return reward, success, {**terms, "never": np.zeros(len(reward))}


class Crashes(ReachTask):
    def evaluate(self, qpos, qvel, sensordata, goal, action):
        if np.abs(qvel).sum() > 1e-3:  # fine at the plugin smoke check, raises once the arm moves
            raise ZeroDivisionError("division by zero")
        return super().evaluate(qpos, qvel, sensordata, goal, action)


class Unreachable(ReachTask):
    def evaluate(self, qpos, qvel, sensordata, goal, action):
        reward, success, terms = super().evaluate(qpos, qvel, sensordata, goal, action)
        return reward, np.zeros_like(success), terms


class NanObservation(ReachTask):
    def observe(self, qpos, qvel, sensordata, goal):
        obs = super().observe(qpos, qvel, sensordata, goal)
        moving = np.abs(qvel).sum(axis=1) > 1e-3  # finite at the start (the plugin smoke check), NaN once it moves
        obs[:, 0] = np.where(moving, np.nan, obs[:, 0])
        return obs


class PrefersFailure(ReachTask):
    def evaluate(self, qpos, qvel, sensordata, goal, action):
        reward, success, terms = super().evaluate(qpos, qvel, sensordata, goal, action)
        return -reward, success, terms
"""

#: an arm with a two-pad parallel gripper (one actuator, the other pad following by a joint equality) and a cube
GRIP_ARM = """
<mujoco model="grip_arm">
  <compiler angle="radian"/>
  <option timestep="0.002" integrator="implicitfast"{cone}/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="base" pos="0 0 0.02">
      <geom type="box" size="0.04 0.04 0.02" mass="1"/>
      <body name="shoulder" pos="0 0 0.02">
        <joint name="pan" axis="0 0 1" range="-2 2" damping="0.5"/>
        <geom type="capsule" fromto="0 0 0 0 0 0.1" size="0.02" mass="0.3"/>
        <body name="upper" pos="0 0 0.1">
          <joint name="lift" axis="0 1 0" range="-1.5 1.5" damping="0.5"/>
          <geom type="capsule" fromto="0 0 0 0 0 0.15" size="0.018" mass="0.2"/>
          <body name="wrist" pos="0 0 0.15">
            <joint name="flex" axis="0 1 0" range="-1.5 1.5" damping="0.3"/>
            <geom type="box" pos="0 0 0.005" size="0.015 0.05 0.005" mass="0.05"/>
            <site name="tcp" pos="0 0 0.05"/>
            <body name="left" pos="0 0.04 0.04">
              <joint name="left" type="slide" axis="0 -1 0" range="0 0.04" damping="1"/>
              <geom name="left_pad" type="box" size="0.01 0.004 0.03" mass="0.02" friction="{mu}"/>
            </body>
            <body name="right" pos="0 -0.04 0.04">
              <joint name="right" type="slide" axis="0 1 0" range="0 0.04" damping="1"/>
              <geom name="right_pad" type="box" size="0.01 0.004 0.03" mass="0.02" friction="{mu}"/>
            </body>
          </body>
        </body>
      </body>
    </body>
    <body name="cube" pos="0.3 0 0.02">
      <freejoint/>
      <geom type="box" size="0.015 0.015 0.015" mass="0.05" friction="{mu}"/>
    </body>
  </worldbody>
  <equality>
    <joint joint1="right" joint2="left" polycoef="0 1 0 0 0"/>
  </equality>
  <actuator>
    <position name="pan" joint="pan" kp="30" kv="1" ctrlrange="-2 2" forcerange="-5 5"/>
    <position name="lift" joint="lift" kp="30" kv="1" ctrlrange="-1.5 1.5" forcerange="-8 8"/>
    <position name="flex" joint="flex" kp="10" kv="0.5" ctrlrange="-1.5 1.5" forcerange="-3 3"/>
    <position name="grip" joint="left" kp="200" kv="5" ctrlrange="0 0.04" forcerange="-{force} {force}"/>
  </actuator>
</mujoco>
"""


@pytest.fixture(scope="module")
def broken_module(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Name of an importable module holding the :data:`BROKEN` tasks."""
    import sys

    folder = tmp_path_factory.mktemp("broken_tasks")
    name = "task_check_broken"
    (folder / f"{name}.py").write_text(textwrap.dedent(BROKEN))
    sys.path.insert(0, str(folder))
    yield name
    sys.path.remove(str(folder))
    sys.modules.pop(name, None)


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], dict]:
    """Run ``task check`` twice (text, then --json): ``(exit code, text lines, JSON)``; both agree on the code."""
    argv = ["task", "check", *args, "--episodes", "2"]
    code = main(argv)
    lines = capsys.readouterr().out.splitlines()
    assert main([*argv, "--json"]) == code
    return code, lines, json.loads(capsys.readouterr().out)


def _blocks(report: dict, check: str) -> list[str]:
    return [f["line"] for f in report["findings"] if f["level"] == "block" and f["check"] == check]


def test_reach_on_arm3_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, report = _check(capsys, "arm3", "reach")
    assert code == 0 and not report["blocking"], lines
    # in the preset's ee_delta, 2 random episodes never come within the precision term's reach of the target
    assert lines[0] == "ok: reward terms: distance, velocity fire under random actions"
    assert (
        "note: reward terms: term 'precision' fires only under the expert (sparse: random exploration never sees it)"
        in lines
    )
    assert (
        "note: reward terms: term 'success' fires only under the expert (sparse: random exploration never sees it)"
        in lines
    )
    levels = {f["check"]: f["level"] for f in report["findings"]}
    assert levels["success"] == levels["reward vs success"] == levels["observations"] == "ok", lines
    assert levels["episode length"] == "ok" and levels["grip"] == "skip", lines
    assert "skip: grip: no object/gripper: the robot has no gripper" in lines
    assert report["measured"]["expert"]["success_rate"] == 1.0
    assert report["measured"]["random"]["success_rate"] == 0.0
    assert set(report["measured"]["observation_ranges"]) >= {"ee/x", "target_minus_ee/z"}
    assert lines[-1] == "task check arm3 reach: 0 blocking, 0 warnings, 1 skipped"


def test_a_reward_term_that_never_fires_blocks(capsys: pytest.CaptureFixture[str], broken_module: str) -> None:
    code, lines, report = _check(capsys, "arm3", f"{broken_module}:NeverFires")
    assert code == 2 and report["blocking"]
    (line,) = _blocks(report, "reward terms")
    assert line.startswith("block: reward terms: term 'grasp' is 0 at every one of 100 random and 100 expert steps")
    assert "; fix: " in line and line in lines
    assert _blocks(report, "success") == [] and _blocks(report, "reward vs success") == []


def test_a_quiet_term_is_a_note_when_listed_and_a_warning_without_an_expert(
    capsys: pytest.CaptureFixture[str], broken_module: str
) -> None:
    code, lines, report = _check(capsys, "arm3", f"{broken_module}:RareEvent")
    assert code == 0 and "note: reward terms: event term 'grasp' stayed 0 over 100 random and 100 expert steps" in lines
    code, lines, report = _check(capsys, "cartpole", f"{broken_module}:QuietSwing", "--config", "cartpole")
    (warn,) = [f["line"] for f in report["findings"] if f["level"] == "warn"]
    assert warn.startswith("warn: reward terms: term 'never' is 0 at every one of 500 random steps and there is no")
    assert code == 0 and warn in lines  # without an expert a sparse term and a dead one look alike: not blocking


def test_a_success_the_expert_cannot_reach_blocks(capsys: pytest.CaptureFixture[str], broken_module: str) -> None:
    code, lines, report = _check(capsys, "arm3", f"{broken_module}:Unreachable")
    assert code == 2
    (line,) = _blocks(report, "success")  # the reach expert drives the subclass
    assert line.startswith("block: success: the scripted expert succeeds in 0/2 episodes")
    assert "task.success_threshold" in line and line in lines
    assert report["measured"]["expert"]["success_rate"] == 0.0


def test_a_nan_observation_blocks(capsys: pytest.CaptureFixture[str], broken_module: str) -> None:
    code, lines, report = _check(capsys, "arm3", f"{broken_module}:NanObservation")
    assert code == 2
    (line,) = _blocks(report, "observations")
    assert line.startswith("block: observations: obs[0] 'q/base_yaw' is NaN/inf in ")
    assert line in lines and all("\n" not in x for x in lines)


def test_a_reward_that_prefers_failure_blocks(capsys: pytest.CaptureFixture[str], broken_module: str) -> None:
    code, lines, report = _check(capsys, "arm3", f"{broken_module}:PrefersFailure")
    assert code == 2
    found = _blocks(report, "reward vs success")
    assert any(x.startswith("block: reward vs success: expert return -") and " <= random return " in x for x in found)
    assert any("successful episodes score" in x for x in found)
    assert any("reward at success steps" in x for x in found)
    assert _blocks(report, "reward terms") == [] and _blocks(report, "success") == []


def test_an_episode_too_short_for_the_expert_is_warned(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("arm3", "reach", "--set", "env.episode_steps=4", "--set", "task.approach_speed=0")
    code, lines, report = _check(capsys, *args)
    (length,) = [f for f in report["findings"] if f["check"] == "episode length"]
    assert length["level"] == "warn" and "2 expert episode(s) never met the test; episode 4 steps" in length["line"]
    assert code == 2 and _blocks(report, "success")  # the expert cannot succeed in 4 steps


def test_task_without_expert_skips_what_needs_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, report = _check(capsys, "cartpole", "swingup", "--config", "cartpole")
    assert code == 0
    assert any(x.startswith("skip: success: no scripted expert for task 'swingup'") for x in lines)
    assert any(x.startswith("skip: episode length: no scripted expert") for x in lines)
    assert report["measured"]["expert"] is None


def test_bad_task_name_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["task", "check", "arm3", "no_such_task"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown task 'no_such_task'" in err[0]


def test_a_task_raising_mid_episode_is_one_line(capsys: pytest.CaptureFixture[str], broken_module: str) -> None:
    assert main(["task", "check", "arm3", f"{broken_module}:Crashes", "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: env.task: task '{broken_module}:Crashes' failed under random actions: "
        "ZeroDivisionError: division by zero"
    ]


def _grip_arm(tmp_path: Path, mu: float, force: float, elliptic: bool = False) -> Path:
    path = tmp_path / f"grip_arm_{mu}_{force}_{elliptic}.xml"
    cone = ' cone="elliptic" impratio="10"' if elliptic else ""
    path.write_text(GRIP_ARM.format(mu=mu, force=force, cone=cone))
    return path


def test_gripper_holds_the_cube_through_the_cli(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = str(_grip_arm(tmp_path, mu=1.0, force=10))
    code, lines, report = _check(capsys, path, "reach", "--set", "task.gripper=action")
    (grip,) = [f for f in report["findings"] if f["check"] == "grip"]
    assert grip["level"] == "ok" and grip["line"].startswith("ok: grip: held: 'cube': slip "), grip
    measured = report["measured"]["grip"]
    assert measured["held"] and measured["margin"] > 1.5 and measured["slip_m"] < SLIP_LIMIT
    assert measured["friction"] == 1.0 and measured["weight_n"] == pytest.approx(0.05 * 9.81, rel=1e-3)
    assert code == 0
    # the same arm with its gripper held (the default): the check is skipped, with the reason
    code, lines, _ = _check(capsys, path, "reach")
    assert "skip: grip: no object/gripper: the gripper is held (task.gripper: held)" in lines


def test_a_slippery_cube_is_dropped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = str(_grip_arm(tmp_path, mu=0.02, force=2))
    code, lines, report = _check(capsys, path, "reach", "--set", "task.gripper=action")
    (line,) = _blocks(report, "grip")
    assert line.startswith("block: grip: the gripper drops 'cube': slip ") and "; fix: raise fingertip" in line
    assert code == 2 and not report["measured"]["grip"]["held"]


def test_pyramidal_cone_drops_what_elliptic_holds(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Friction 0.3: the default pyramidal cone lets the cube slide out (with the option named in the fix), the
    elliptic cone with impratio 10 holds it, at the same friction margin."""
    levels = {}
    for elliptic in (False, True):
        path = str(_grip_arm(tmp_path, mu=0.3, force=10, elliptic=elliptic))
        _, _, report = _check(capsys, path, "reach", "--set", "task.gripper=action")
        (grip,) = [f for f in report["findings"] if f["check"] == "grip"]
        levels[elliptic] = (grip["level"], report["measured"]["grip"]["margin"], grip["fix"])
    assert levels[False][0] == "block" and levels[True][0] == "ok", levels
    assert '<option cone="elliptic" impratio="10"/>' in levels[False][2]
    assert levels[False][1] == pytest.approx(levels[True][1], rel=0.2) and levels[True][1] > 2


def test_grip_hold_margin_follows_friction(tmp_path: Path) -> None:
    """On the bare model: more friction, more margin (the margin is mu * sum N / weight, measured)."""
    margins = []
    for mu in (0.5, 1.0):
        model = mujoco.MjModel.from_xml_path(str(_grip_arm(tmp_path, mu=mu, force=10)))
        assert free_bodies(model) == ["cube"]
        fingers = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) for n in ("left", "right")]
        res = grip_hold(model, model.qpos0, np.zeros(4), np.array([0, 0, 0, 0.04]), fingers, "cube")
        assert res.held and res.friction == mu
        assert res.margin == pytest.approx(mu * res.normal_force_n / res.weight_n)
        margins.append(res.margin)
    assert margins[1] > 1.5 * margins[0]
    with pytest.raises(ValueError, match="not a body with a free joint"):
        grip_hold(model, model.qpos0, np.zeros(4), np.zeros(4), fingers, "base")


def test_a_dr_range_too_heavy_for_the_grip_is_warned(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The Panda holds its lift cube at the push preset's hardest draw (2x heavier, 0.9x smaller, the least
    friction); a DR that may draw a 3x heavier cube is warned about: those episodes cannot succeed."""
    panda = str(MENAGERIE_DIR / "panda.xml")
    code, lines, report = _check(capsys, panda, "lift", "--config", "push", "--set", "task.gripper=action")
    hardest = "object_mass x2, object_size x0.9, object_friction x0.5, fingertip_friction x0.7"
    assert any(ln.startswith(f"ok: grip: held at DR's hardest draw ({hardest}): ") for ln in lines), lines
    assert code == 0 and report["measured"]["grip"]["dr_worst"]["held"]
    heavy = tmp_path / "heavy.yaml"
    heavy.write_text(
        "params:\n  object_mass: {dist: loguniform, range: [0.5, 3.0], mode: scale}\n"
        "  object_friction: {dist: loguniform, range: [0.5, 1.5], mode: scale}\n"
        "  fingertip_friction: {dist: loguniform, range: [0.7, 1.5], mode: scale}\n"
    )
    sets = ["--set", "task.gripper=action", "--set", f"dr={heavy}"]
    code, lines, report = _check(capsys, panda, "lift", "--config", "push", *sets)
    (warn,) = [ln for ln in lines if ln.startswith("warn: grip: ")]
    assert warn.startswith(
        "warn: grip: DR's hardest draw (object_mass x3, object_friction x0.5, fingertip_friction x0.7) makes "
        "the gripper drop"
    )
    assert "; fix: narrow those DR ranges (dr.params)" in warn
    measured = report["measured"]["grip"]
    assert measured["held"] and not measured["dr_worst"]["held"] and measured["dr_worst"]["weight_n"] > 1.1
    assert code == 0  # a warning: the nominal cube is held

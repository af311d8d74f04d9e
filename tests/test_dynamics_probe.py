"""The dynamics probe: joint speeds, settling and overshoot measured in simulation, and what the reach preset
makes of them (delta steps the arm can follow, episodes long enough for it)."""

from __future__ import annotations

import json
import math
import subprocess
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import ROOT, train_cmd

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.sim.core import EnvCore, build_robot
from embodied_ws.sim.dynamics_probe import cache_dir, cached_probe, probe_dynamics
from embodied_ws.sim.robot import load_robot
from embodied_ws.sim.tasks.reach import JOINT_TRAVEL_SHARE, LAGGING_TRAVEL_PERCENTILE

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "robots"
MENAGERIE = FIXTURES / "menagerie"
ERD = Path(sysconfig.get_paths()["purelib"]) / "cmeel.prefix" / "share" / "example-robot-data" / "robots"
FORCE = 6.0  # N·m at every servo of the synthetic arm


def synthetic_arm(tmp_path: Path, damping: float, kv: float, name: str = "arm") -> Path:
    """A 3-joint arm (yaw, pitch, pitch) with light links, force-limited position servos (``kp`` 200, ``kv``
    as given) and joint ``damping``, gravity compensated: a joint's top speed is ``FORCE / damping``."""
    link = '<inertial pos="0 0 {h}" mass="0.5" diaginertia="0.004 0.004 0.001"/>'
    xml = f"""<mujoco model="{name}">
  <compiler angle="radian"/>
  <option timestep="0.002" integrator="implicitfast"/>
  <default><joint damping="{damping}" armature="0.01"/>
    <position kp="200" kv="{kv}" forcerange="-{FORCE} {FORCE}"/></default>
  <worldbody>
    <body name="base" pos="0 0 0.1" gravcomp="1">{link.format(h=0.05)}
      <joint name="yaw" axis="0 0 1" range="-2.5 2.5"/>
      <geom type="capsule" fromto="0 0 0 0 0 0.1" size="0.03"/>
      <body name="upper" pos="0 0 0.1" gravcomp="1">{link.format(h=0.15)}
        <joint name="shoulder" axis="0 1 0" range="-1.4 1.4"/>
        <geom type="capsule" fromto="0 0 0 0 0 0.3" size="0.025"/>
        <body name="fore" pos="0 0 0.3" gravcomp="1">{link.format(h=0.15)}
          <joint name="elbow" axis="0 1 0" range="-2.2 2.2"/>
          <geom type="capsule" fromto="0 0 0 0 0 0.3" size="0.02"/>
          <site name="ee" pos="0 0 0.3"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position name="yaw" joint="yaw" ctrlrange="-2.5 2.5"/>
    <position name="shoulder" joint="shoulder" ctrlrange="-1.4 1.4"/>
    <position name="elbow" joint="elbow" ctrlrange="-2.2 2.2"/>
  </actuator>
  <keyframe><key name="home" qpos="0 0.3 0.9" ctrl="0 0.3 0.9"/></keyframe>
</mujoco>"""
    path = tmp_path / f"{name}.xml"
    path.write_text(xml)
    return path


def reach_core(robot_path: Path | str, *sets: str) -> EnvCore:
    """The reach preset's env core for ``robot_path`` (no DR)."""
    cfg = load_config("reach", [f"env.robot={robot_path}", "task.ee_body=", *sets])
    return EnvCore(cfg, load_dr("none"), 1, 0)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_damping_slows_joints_to_force_over_damping_and_lengthens_episodes(tmp_path: Path) -> None:
    critical = 2 * np.sqrt(200 * 0.05)  # kv for roughly critical damping of these light links
    fast = synthetic_arm(tmp_path, damping=2.0, kv=critical, name="fast")
    slow = synthetic_arm(tmp_path, damping=12.0, kv=critical, name="slow")  # 6x the damping, same declarations
    v_fast = probe_dynamics(load_robot(str(fast), None, need_ee=True)).measured_speeds()
    v_slow = probe_dynamics(load_robot(str(slow), None, need_ee=True)).measured_speeds()
    np.testing.assert_allclose(v_slow, FORCE / 12.0, rtol=0.10)  # 0.5 rad/s: the force limit over the damping
    np.testing.assert_allclose(v_fast / v_slow, 6.0, rtol=0.10)
    core_fast, core_slow = reach_core(fast), reach_core(slow)
    follow = np.broadcast_to(core_slow.delta_scale, (3,)) * core_slow.ctrl_half / core_slow.control_dt
    assert np.all(follow <= v_slow * (1 + 1e-9))  # set-points never outrun the joints
    assert core_slow.episode_steps > core_fast.episode_steps


def test_overshoot_fires_on_a_servo_without_derivative_gain_and_not_on_a_damped_one(tmp_path: Path) -> None:
    ringing = probe_dynamics(load_robot(str(synthetic_arm(tmp_path, damping=0.01, kv=0.0, name="ring")), None))
    assert ringing.underdamped() == ["yaw", "shoulder", "elbow"]
    assert all(j.overshoot > 0.5 for j in ringing.joints)
    damped = probe_dynamics(load_robot(str(synthetic_arm(tmp_path, damping=0.01, kv=8.0, name="calm")), None))
    assert damped.underdamped() == []
    assert all(j.overshoot < 0.05 and j.settle_s < 0.5 for j in damped.joints)


@pytest.mark.parametrize("name", ["iiwa14", "lite6", "panda", "sawyer", "ur5e", "xarm7"])
def test_menagerie_servos_are_not_flagged(name: str) -> None:
    probe = probe_dynamics(load_robot(str(MENAGERIE / f"{name}.xml"), None, need_ee=True, free_space=True))
    assert probe.underdamped() == []
    assert np.all(probe.measured_speeds() > 1.0)


def test_gen3_wrist_that_spins_at_rest_is_reported() -> None:
    """Menagerie's Gen3 wrist (``joint_7``: kp 500, kv 50 on a 0.0007 kg·m² link) does not come to rest
    in MuJoCo at the model's 2-ms step: the probe says so; the other six joints settle."""
    probe = probe_dynamics(load_robot(str(MENAGERIE / "gen3.xml"), None, need_ee=True, free_space=True))
    assert probe.underdamped() == ["joint_7"]
    assert np.isinf(probe.joints[-1].settle_s)


def test_probe_is_cached_per_model(tmp_path: Path) -> None:
    robot = load_robot(str(synthetic_arm(tmp_path, damping=2.0, kv=4.0)), None)
    first = cached_probe(robot)
    files = list(cache_dir().glob("*.json"))
    assert len(files) == 1 and files[0].stem == first.model_hash
    entry = json.loads(files[0].read_text())
    assert [j["joint"] for j in entry["joints"]] == ["yaw", "shoulder", "elbow"]
    again = cached_probe(load_robot(str(synthetic_arm(tmp_path, damping=2.0, kv=4.0)), None))
    np.testing.assert_array_equal(again.measured_speeds(), first.measured_speeds())
    files[0].write_text("{broken")  # an unreadable entry is measured again
    np.testing.assert_allclose(cached_probe(robot).measured_speeds(), first.measured_speeds())


def test_servo_damping_auto_damps_only_underdamped_servos(tmp_path: Path) -> None:
    path = synthetic_arm(tmp_path, damping=0.01, kv=0.0, name="ring")
    off = build_robot(load_config("reach", [f"env.robot={path}", "task.ee_body="]))
    assert off.added_damping == {} and off.dynamics().underdamped() == ["yaw", "shoulder", "elbow"]
    auto = build_robot(load_config("reach", [f"env.robot={path}", "task.ee_body=", "env.servo_damping=auto"]))
    assert set(auto.added_damping) == {"yaw", "shoulder", "elbow"}
    assert auto.dynamics().underdamped() == []
    assert np.all(auto.model.dof_damping > off.model.dof_damping)
    calm = synthetic_arm(tmp_path, damping=0.01, kv=8.0, name="calm")
    unchanged = build_robot(load_config("reach", [f"env.robot={calm}", "task.ee_body=", "env.servo_damping=auto"]))
    assert unchanged.added_damping == {}


def test_arms_that_follow_their_set_points_keep_their_delta_steps() -> None:
    """Every Menagerie arm reaches more than the reach preset commands: the probe changes nothing for them."""
    for name in ("panda", "ur5e"):
        core = reach_core(MENAGERIE / f"{name}.xml")
        from embodied_ws.sim.core import joint_delta_scale

        declared = joint_delta_scale(
            core.robot, core.cfg.env.delta_scale, core.control_dt, core.ctrl_half, core.cfg.env.ee_speed_limit
        )
        np.testing.assert_array_equal(np.broadcast_to(core.delta_scale, (core.robot.nu,)), declared)


def test_heavily_damped_panda_gets_its_measured_speeds() -> None:
    core = reach_core(FIXTURES / "damped" / "panda_damped.xml")
    v = core.robot.dynamics().measured_speeds()
    np.testing.assert_allclose(v, [0.6] * 4 + [0.4] * 3, rtol=0.05)
    assert core.episode_steps * core.control_dt > 6.0  # the joint-travel rule at 0.4-0.6 rad/s


def setpoint_speed(core: EnvCore) -> np.ndarray:
    """The fastest each actuated joint's set-point moves in the policy's action mode (rad/s)."""
    io = core.io
    step = np.broadcast_to(io.delta_scale, io.delta.shape) * io.ctrl_half
    return np.where(io.delta, step, np.inf) / io.control_dt


def median_rule_steps(core: EnvCore) -> int:
    """The episode length the median target alone gives (the rule every arm had before the lagging rule)."""
    task, cfg = core.task, core.cfg
    seconds = max(
        float(np.median(task.target_distances())) / cfg.task.approach_speed,
        float(np.median(task.travel_seconds(setpoint_speed(core)))) / JOINT_TRAVEL_SHARE,
    )
    return max(cfg.env.episode_steps, math.ceil(seconds / core.control_dt - 1e-9))


def test_an_arm_slowed_by_damping_gets_episodes_for_its_far_targets(tmp_path: Path) -> None:
    """6x the damping: the set-points move at the joints' measured speed, so the joints lag; the episode then
    holds the 90th-percentile target's travel in half of it plus the settling time. The same arm with light
    damping keeps the median rule."""
    critical = 2 * np.sqrt(200 * 0.05)
    fast = reach_core(synthetic_arm(tmp_path, damping=0.5, kv=critical, name="fast"))  # ~10 rad/s: follows
    slow = reach_core(synthetic_arm(tmp_path, damping=3.0, kv=critical, name="slow"))  # 2 rad/s: lags
    assert not fast.task.lagging_joints(setpoint_speed(fast)).any()
    assert fast.episode_steps == median_rule_steps(fast)
    speed = setpoint_speed(slow)
    assert slow.task.lagging_joints(speed).all()
    travel = slow.task.travel_seconds(speed)
    needed = np.percentile(travel, LAGGING_TRAVEL_PERCENTILE) / JOINT_TRAVEL_SHARE
    needed += slow.robot.dynamics().settle_time()
    assert needed <= slow.episode_steps * slow.control_dt < needed + slow.control_dt + 1e-9
    assert slow.episode_steps > median_rule_steps(slow)


def test_heavily_damped_panda_episodes_fit_its_far_targets_at_half_its_measured_speed() -> None:
    """The damped fixture (0.6/0.4 rad/s): joints 1-6 lag (joint 7 rolls the hand about the end effector and does
    not move it); at half their measured speed (the default DR scales damping up to 2x) the lagging joints'
    travel to at least 90 % of the targets fits the episode less the settling time."""
    core = reach_core(FIXTURES / "damped" / "panda_damped.xml")
    speed = setpoint_speed(core)
    lag = core.task.lagging_joints(speed)
    assert lag.tolist() == [True] * 6 + [False]
    travel = core.task.travel_seconds(np.where(lag, speed / 2, np.inf))
    room = core.episode_steps * core.control_dt - core.robot.dynamics().settle_time(lag)
    assert np.mean(travel <= room) >= 0.90
    assert core.episode_steps > median_rule_steps(core)  # 8.4 s before: 98 % of its failures still moving


@pytest.mark.parametrize(
    "robot",
    [
        "arm3",
        *(str(MENAGERIE / f"{n}.xml") for n in ("gen3", "iiwa14", "lite6", "panda", "sawyer", "ur5e", "xarm7")),
        str(ERD / "kinova_description" / "robots" / "kinova.urdf"),  # slow joints, but it follows its set-points
        str(ERD / "xarm_description" / "urdf" / "xarm7.urdf"),  # lags only on the flange roll (no lever)
    ],
)
def test_arms_that_follow_their_set_points_keep_their_episode_length(robot: str) -> None:
    core = reach_core(robot)
    assert not core.task.lagging_joints(setpoint_speed(core)).any()
    assert core.episode_steps == median_rule_steps(core)


@pytest.mark.slow
def test_training_records_the_lagging_arms_episode_length(tmp_path: Path) -> None:
    """``embodied-ws train`` on the damped Panda: the run's config.yaml holds the longer episodes (evaluation and
    resumes read them from there), and stderr says so."""
    robot = FIXTURES / "damped" / "panda_damped.xml"
    sets = [f"env.robot={robot}", "task.ee_body=", "train.total_timesteps=256", "train.n_envs=2"]
    sets += ["ppo.n_steps=128", "ppo.batch_size=128", "ppo.n_epochs=1", "train.eval_every=0"]
    sets += ["train.final_eval_episodes=0", "train.checkpoint_every=0", "dr=none"]
    proc = subprocess.run(train_cmd(tmp_path, "damped", sets), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    saved = yaml.safe_load((tmp_path / "damped" / "config.yaml").read_text())
    core = reach_core(robot)
    assert saved["env"]["episode_steps"] == core.episode_steps
    assert core.episode_steps > median_rule_steps(core)
    assert f"episodes: {core.episode_steps} steps" in proc.stderr

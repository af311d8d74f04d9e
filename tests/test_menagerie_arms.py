"""Public arm MJCFs (MuJoCo Menagerie, meshes removed; tests/fixtures/robots/menagerie) load with the defaults a new
robot gets: the right end effector, grippers held, servos commanded over their joint ranges, the end-effector speed
bound, a home pose the servos hold, and an env that passes gymnasium's and SB3's checkers."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.config.schema import RunConfig
from embodied_ws.core.errors import ConfigError
from embodied_ws.sim.core import EnvCore
from embodied_ws.sim.env import RobotEnv

ARMS = Path(__file__).resolve().parent / "fixtures" / "robots" / "menagerie"
# file → (arm joints, end effector): read off each model by hand (the tool frame at the wrist, never a finger)
EXPECTED = {
    "panda": (7, "hand"),
    "iiwa14": (7, "attachment_site"),
    "gen3": (7, "pinch_site"),
    "xarm7": (7, "link_tcp"),
    "ur5e": (6, "attachment_site"),
    "sawyer": (7, "attachment_site"),
    "lite6": (6, "attachment_site"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_public_arm_gets_sensible_reach_defaults(name: str) -> None:
    dof, ee = EXPECTED[name]
    cfg = load_config("reach", [f"env.robot={ARMS / name}.xml", "task.init_noise=0"])
    env = RobotEnv(cfg, load_dr("none"), seed=0)
    robot, core = env.core.robot, env.core
    assert robot.nu == dof and robot.ee_body == ee
    assert not any("finger" in j or "driver" in j for j in robot.joint_names)  # grippers are held, not learned
    q = robot.home_qpos[robot.qpos_idx]
    assert np.all(q >= robot.joint_low - 1e-6) and np.all(q <= robot.joint_high + 1e-6)
    assert np.all(q >= robot.ctrl_low - 1e-6) and np.all(q <= robot.ctrl_high + 1e-6)  # servos can hold home
    step = np.broadcast_to(core.delta_scale, (dof,)) * core.ctrl_half  # rad per control step
    assert float(np.sum(step * robot.ee_lever)) / core.control_dt <= cfg.env.ee_speed_limit + 1e-9
    env.reset(seed=0)
    ee0 = env.data.sensordata[robot.ee_sensor_idx].copy()
    for _ in range(core.episode_steps):  # zero actions: the servos hold the home pose
        env.step(np.zeros(env.action_space.shape, dtype=np.float32))
    assert np.linalg.norm(env.data.sensordata[robot.ee_sensor_idx] - ee0) < 0.03
    assert len(core.task.targets) > 1000  # reachable targets from the arm's own forward kinematics
    # Panda and Sawyer ask for the implicit integrator: they step with implicitfast (half the cost, same stability)
    assert robot.model.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST


@pytest.mark.parametrize("name", ["panda", "gen3"])
def test_public_arm_env_passes_gymnasium_and_sb3_checkers(name: str) -> None:
    env = RobotEnv(load_config("reach", [f"env.robot={ARMS / name}.xml"]), load_dr("default"), seed=0)
    gym_check_env(env, skip_render_check=True)
    sb3_check_env(env)


def _episode_core(robot: str, *sets: str) -> tuple[EnvCore, RunConfig]:
    cfg = load_config("reach", [f"env.robot={robot}", "task.ee_body=", "task.init_noise=0", *sets])
    return EnvCore(cfg, load_dr("none"), 1, 0), cfg


def test_bigger_arms_get_episodes_long_enough_to_reach_their_targets() -> None:
    seconds = {}
    for robot in ["arm3", *(str(ARMS / f"{n}.xml") for n in ("lite6", "panda", "iiwa14"))]:
        core, cfg = _episode_core(robot)
        env = RobotEnv(cfg, load_dr("none"), seed=0)
        env.reset(seed=0)
        ee = env.data.sensordata[core.robot.ee_sensor_idx]  # the end effector at home, as an episode starts
        far = np.median(np.linalg.norm(core.task.targets - ee, axis=1))
        steps_needed = far / cfg.task.approach_speed / core.control_dt
        assert steps_needed <= core.episode_steps < max(steps_needed + 1, cfg.env.episode_steps + 1), robot
        seconds[Path(robot).stem] = core.episode_steps * core.control_dt
    assert seconds["arm3"] == seconds["lite6"] == 2.0  # small arms keep the preset's 2 s
    assert 2.0 < seconds["panda"] < seconds["iiwa14"]  # the iiwa's targets lie farther from its home pose
    core, _ = _episode_core(str(ARMS / "iiwa14.xml"), "task.approach_speed=0")
    assert core.episode_steps == 50  # 0: episodes as configured


def test_arms_with_slow_joints_get_episodes_long_enough_for_the_joint_travel() -> None:
    """The median target's slowest-joint travel at full set-point speed takes at most half an episode (a Jaco2 at
    0.63 rad/s needs 4 s for it); a joint with more than a turn of range takes the nearer equivalent angle."""
    from embodied_ws.sim.tasks.reach import JOINT_TRAVEL_SHARE, joint_travel

    fast, _ = _episode_core(str(ARMS / "panda.xml"))
    slow, cfg = _episode_core(str(ARMS / "panda.xml"), "env.delta_scale=0.004")  # joints ~6x slower
    step = np.broadcast_to(slow.delta_scale, (slow.robot.nu,)) * slow.ctrl_half  # rad per control step
    travel = joint_travel(slow.robot, slow.task.target_configs)
    steps_needed = np.median(np.max(np.ceil(travel / step), axis=1))
    assert steps_needed <= JOINT_TRAVEL_SHARE * slow.episode_steps + 1
    assert slow.episode_steps > fast.episode_steps  # the distance rule alone would give the fast arm's length
    ur5e, _ = _episode_core(str(ARMS / "ur5e.xml"))
    wide = (ur5e.robot.joint_high - ur5e.robot.joint_low) > 2 * np.pi + 1e-6
    assert wide.sum() >= 4  # ±2π joints
    travel = joint_travel(ur5e.robot, ur5e.task.target_configs)
    assert np.all(travel[:, wide] <= np.pi + 1e-9)


def test_negative_approach_speed_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="must be >= 0") as err:
        load_config("reach", ["task.approach_speed=-1"])
    assert err.value.where == "task.approach_speed"

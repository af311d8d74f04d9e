"""The lift task on the Menagerie Panda fixture (its fingers driven: task.gripper=action): env checkers, a
scripted grasp-and-lift that succeeds and out-scores random actions, every staged term firing, refusals."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from contact_helpers import run_episodes
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.errors import UserError
from embodied_ws.data.expert import EXPERTS, LiftExpert
from embodied_ws.policy.rollout import Step, rollout
from embodied_ws.sim.env import RobotEnv

PANDA = Path(__file__).parent / "fixtures" / "robots" / "menagerie" / "panda.xml"
LIFT = ["env.task=lift", f"env.robot={PANDA}", "task.gripper=action"]
TERMS = {"reach", "grasp", "lift", "goal", "success_bonus", "still", "action", "off_table"}


def closed_on_cube() -> tuple[RobotEnv, np.ndarray, np.ndarray, np.ndarray]:
    """The scripted lifter (absolute actions, no DR) run until its fingers have closed on the cube: the env, its
    ``(1, nq)`` qpos and ``(1, nsensordata)`` sensors then, and the action holding the arm with the gripper closed."""
    env = RobotEnv(load_config("push", [*LIFT, "env.action_mode=absolute"]), load_dr("none"), seed=0)
    expert = LiftExpert(env)
    env.reset(seed=0)
    expert.reset()
    for _ in range(env.core.episode_steps):
        env.step(expert.act())
        if expert.phase == 3:
            break
    assert expert.phase == 3  # closed on the cube, about to lift
    squeeze = env.core.io.hold_action(env.data.qpos)[None]
    squeeze[0, env.core.robot.gripper_actuators[0]] = -1.0
    return env, env.data.qpos[None].copy(), env.data.sensordata[None].copy(), squeeze


def test_lift_env_passes_gymnasium_and_sb3_checkers() -> None:
    env = RobotEnv(load_config("push", LIFT), load_dr("push"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gym_check_env(env, skip_render_check=True)
        sb3_check_env(env)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(env.action_space.sample())
    assert set(info["reward_terms"]) == TERMS and np.isclose(sum(info["reward_terms"].values()), reward)
    assert env.action_space.shape == (4,)  # the preset's ee_delta: x, y, z of the end effector + the gripper


def test_scripted_lift_succeeds_and_outscores_random() -> None:
    assert EXPERTS.get("lift") is LiftExpert
    cfg = load_config("push", [*LIFT, "env.action_mode=absolute", "env.episode_steps=200"])
    env = RobotEnv(cfg, load_dr("none"), seed=0)
    expert, ok, fired = run_episodes(env, range(6), LiftExpert(env), TERMS)
    random_env = RobotEnv(load_config("push", [*LIFT, "env.episode_steps=200"]), load_dr("none"), seed=0)
    random_env.action_space.seed(0)
    rand, rand_ok, fired_random = run_episodes(random_env, range(6), None, TERMS)
    assert sum(ok) >= 5, ok
    assert not any(rand_ok) and np.mean(expert) > np.mean(rand) + 200
    assert all(fired[k] > 1e-3 for k in ("reach", "grasp", "lift", "goal", "success_bonus", "still", "action")), fired
    assert all(fired_random[k] > 0 for k in ("reach", "action")), fired_random


def test_lift_without_a_driven_gripper_is_refused_in_one_line() -> None:
    with pytest.raises(UserError, match=r"set task\.gripper=action") as err:
        RobotEnv(load_config("push", ["env.task=lift", f"env.robot={PANDA}"]))
    assert "\n" not in err.value.line() and "finger_joint" in err.value.line()


def test_actuator_gain_dr_keeps_each_servo_ratio_so_the_gripper_still_closes() -> None:
    """A gripper servo maps ctrl 0..255 to 0..4 cm (bias = -255 x gain): gain DR scales both, keeping the ratio."""
    from embodied_ws.randomization.spec import parse_dr

    dr = parse_dr({"params": {"actuator_gain": {"range": [0.5, 1.5]}}})
    env = RobotEnv(load_config("push", LIFT), dr, seed=0)
    nominal = env.core.robot.model
    ratio = nominal.actuator_biasprm[:, 1] / nominal.actuator_gainprm[:, 0]
    for seed in (1, 2):
        env.reset(seed=seed)
        assert not np.allclose(env.model.actuator_gainprm[:, 0], nominal.actuator_gainprm[:, 0])
        np.testing.assert_allclose(env.model.actuator_biasprm[:, 1] / env.model.actuator_gainprm[:, 0], ratio)


def test_success_counts_once_held_for_hold_seconds_and_the_bonus_is_the_success_test() -> None:
    """The scripted lifter on one seed: with ``task.hold_seconds`` 1 s success (and its bonus) starts exactly
    1 s of control steps after the momentary test (hold 0) first holds; the bonus is paid on exactly the
    success steps."""
    firsts = {}
    for hold in (0.0, 1.0):
        sets = [*LIFT, "env.action_mode=absolute", "env.episode_steps=200", f"task.hold_seconds={hold}"]
        env = RobotEnv(load_config("push", sets), load_dr("none"), seed=0)
        steps: list[tuple[bool, float]] = []

        def keep(s: Step, steps: list[tuple[bool, float]] = steps) -> None:
            steps.append((s.info["is_success"], s.info["reward_terms"]["success_bonus"]))

        episode = rollout(env, LiftExpert(env), 0, on_step=keep)
        assert episode.success, hold
        assert all((bonus > 0) == ok for ok, bonus in steps)
        firsts[hold] = next(i for i, (ok, _) in enumerate(steps) if ok)
        hold_steps = round(hold / env.core.control_dt)
    assert hold_steps == 25 and firsts[1.0] == firsts[0.0] + hold_steps - 1, firsts


def test_lift_observes_the_cube_relative_to_the_grasp_point() -> None:
    env = RobotEnv(load_config("push", LIFT), load_dr("none"), seed=0)
    obs, _ = env.reset(seed=0)
    names = env.core.obs_names()
    task = env.core.task
    assert names[task.obs_dim - 3 : task.obs_dim] == [f"cube_minus_grasp/{a}" for a in "xyz"]
    sens = env.data.sensordata[task._grasp]
    np.testing.assert_allclose(obs[task.obs_dim - 3 : task.obs_dim], env.data.qpos[task._pos] - sens, atol=1e-9)


def test_a_grasp_squeezes_fingers_merely_around_the_cube_are_not_held() -> None:
    """The scripted lifter closed on the cube: held while its gripper is commanded closed; the same state with the
    gripper commanded where its fingers already stand (a half-open hand around a cube its own width) is not."""
    env, qpos, sensors, squeeze = closed_on_cube()
    task, k = env.core.task, env.core.robot.gripper_actuators[0]
    around = squeeze.copy()
    around[0, k] = env.core.robot.grippers[0].action(env.data.qpos[env.core.robot.qpos_idx[k]])
    assert task.held(qpos, sensors, squeeze)[0] and task.held(qpos, sensors)[0]
    assert not task.held(qpos, sensors, around)[0]
    # in ee_delta the gripper's entry follows [dx, dy, dz]: the env core tells the task where it is
    ee = RobotEnv(load_config("push", LIFT), load_dr("none"), seed=0)
    assert ee.core.io.mode == "ee_delta" and ee.core.task.gripper_action == 3 == ee.action_space.shape[0] - 1


def test_still_pays_only_at_the_goal_and_falls_with_the_cube_speed() -> None:
    """The scripted lifter holding the cube up: ``still`` pays ``still_weight`` for a cube at rest there, less as
    it moves (a quarter at 0.2 m/s), and nothing once the same state is not held (gripper commanded open)."""
    env = RobotEnv(load_config("push", [*LIFT, "env.action_mode=absolute", "env.episode_steps=200"]), load_dr("none"))
    task = env.core.task
    held_up = []

    def keep(s: Step) -> None:
        if s.info["reward_terms"]["lift"] >= env.core.cfg.task.lift_weight - 1e-9 and not held_up:
            held_up.append((env.data.qpos[None].copy(), env.data.sensordata[None].copy(), np.asarray(s.action)[None]))

    rollout(env, LiftExpert(env), 0, on_step=keep)
    qpos, sensors, action = held_up[0]
    qvel = np.zeros((1, env.model.nv))
    speeds = [0.0, 0.2, 1.0]
    paid = []
    for v in speeds:
        qvel[0, task._lin] = [v, 0.0, 0.0]
        paid.append(task.evaluate(qpos, qvel, sensors, env.core.goal, action)[2]["still"][0])
    assert paid[0] == pytest.approx(env.core.cfg.task.still_weight) and paid[0] > paid[1] > paid[2] > 0
    assert paid[1] == pytest.approx(env.core.cfg.task.still_weight * (1 - np.tanh(1.0)))
    opened = action.copy()
    opened[0, task.gripper_action] = 1.0
    assert task.evaluate(qpos, qvel, sensors, env.core.goal, opened)[2]["still"][0] == 0.0


def test_a_cube_slid_down_the_finger_pads_is_still_held() -> None:
    """A held cube slides slowly down the pads (on the Panda 2 cm over 4 s, both fingers still on it): with its
    centre 1.5 half-edges under the grasp point it is held; two edges under, the fingers could not be on it."""
    env, qpos, sensors, squeeze = closed_on_cube()
    task = env.core.task
    half = task.scene.cube_half
    held = []
    for below in (1.5 * half, 4 * half):
        slid = qpos.copy()
        slid[0, task._pos] = sensors[0, task._grasp] - [0.0, 0.0, below]
        held.append(bool(task.held(slid, sensors, squeeze)[0]))
    assert held == [True, False]

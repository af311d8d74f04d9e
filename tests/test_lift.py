"""The lift task on the Menagerie Panda fixture (its fingers driven: task.gripper=action): env checkers, a
scripted grasp-and-lift that succeeds and out-scores random actions, every staged term firing, refusals."""

from __future__ import annotations

import warnings
from pathlib import Path

import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.errors import UserError
from embodied_ws.sim.env import RobotEnv
from embodied_ws.sim.scene import GRASP

PANDA = Path(__file__).parent / "fixtures" / "robots" / "menagerie" / "panda.xml"
LIFT = ["env.task=lift", f"env.robot={PANDA}", "task.gripper=action"]
TERMS = {"reach", "grasp", "lift", "goal", "success_bonus", "action", "off_table"}


class Lifter:
    """Scripted grasp-and-lift (privileged state, absolute action mode): 6-D damped least squares on the arm
    joints moves the grasp point (between the fingers) above the cube with the hand turned to the cube's
    faces, down onto it, closes the gripper, then lifts until the cube is at the goal; starts over when the
    cube is dropped."""

    def __init__(self, env: RobotEnv, step: float = 0.04, max_dq: float = 0.2) -> None:
        self.env, self.step, self.max_dq = env, step, max_dq
        self.site = mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_SITE, GRASP)
        self.body = int(env.model.site_bodyid[self.site])
        self.reset()

    def reset(self) -> None:
        self.phase, self.t, self.yaw = 0, 0, 0.0
        self.home = self.env.data.xmat[self.body].reshape(3, 3).copy()

    def _target(self, g: np.ndarray, cube: np.ndarray, goal: np.ndarray) -> tuple[np.ndarray, float]:
        if self.phase == 0:
            target = cube + np.array([0.0, 0.0, 0.08])
            self.phase = 1 if np.linalg.norm(g - target) < 0.01 else 0
            return target, 1.0
        if self.phase == 1:
            if np.linalg.norm(g - cube) < 0.008:
                self.phase, self.t = 2, 0
            return cube, 1.0
        if self.phase == 2:
            self.t += 1
            self.phase = 3 if self.t > 12 else 2
            return cube, -1.0
        if np.linalg.norm(g - cube) > 2 * self.env.core.task.scene.cube_half:  # dropped it: start again
            self.phase = 0
        return g + (goal + np.array([0.0, 0.0, 0.015]) - cube), -1.0

    def act(self) -> np.ndarray:
        core, d, m = self.env.core, self.env.data, self.env.model
        task, robot = core.task, core.robot
        cube = task.cube(d.qpos[None])[0]
        g = d.site_xpos[self.site].copy()
        target, grip = self._target(g, cube, core.goal[0])
        err = target - g
        if np.linalg.norm(err) > self.step:
            err *= self.step / np.linalg.norm(err)
        if self.phase < 2:  # turn the hand to the cube's faces (a square: the nearest quarter turn)
            q = d.qpos[task.scene.object_qpos + 3 : task.scene.object_qpos + 7]
            self.yaw = (2 * np.arctan2(q[3], q[0]) + np.pi / 4) % (np.pi / 2) - np.pi / 4
        c, s = np.cos(self.yaw), np.sin(self.yaw)
        want = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]) @ self.home
        rot = d.xmat[self.body].reshape(3, 3)
        rot_err = 0.5 * sum(np.cross(rot[:, i], want[:, i]) for i in range(3))
        jp, jr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        mujoco.mj_jacSite(m, d, jp, jr, self.site)
        arm = [i for i in range(robot.nu) if i not in robot.gripper_actuators]
        vi, qi = robot.qvel_idx[arm], robot.qpos_idx[arm]
        jac = np.vstack([jp[:, vi], jr[:, vi]])
        e = np.concatenate([err, rot_err])
        dq = np.clip(jac.T @ np.linalg.solve(jac @ jac.T + 0.03**2 * np.eye(6), e), -self.max_dq, self.max_dq)
        gravity = d.qfrc_bias[vi] / np.maximum(m.actuator_gainprm[arm, 0], 1e-6)
        cmd = np.clip(d.qpos[qi] + dq + gravity, robot.joint_low[arm], robot.joint_high[arm])
        action = np.zeros(robot.nu)
        action[arm] = (cmd - core.ctrl_mid[arm]) / core.ctrl_half[arm]
        action[robot.gripper_actuators] = grip
        return np.clip(action, -1.0, 1.0)


def _run(env: RobotEnv, seeds: range, lifter: Lifter | None) -> tuple[list[float], list[bool], dict[str, float]]:
    returns, successes, fired = [], [], dict.fromkeys(TERMS, 0.0)
    for seed in seeds:
        env.reset(seed=seed)
        if lifter is not None:
            lifter.reset()
        total, info = 0.0, {}
        for _ in range(env.core.episode_steps):
            _, reward, _, _, info = env.step(env.action_space.sample() if lifter is None else lifter.act())
            total += reward
            for k, v in info["reward_terms"].items():
                fired[k] = max(fired[k], abs(v))
        returns.append(total)
        successes.append(bool(info["is_success"]))
    return returns, successes, fired


def test_lift_env_passes_gymnasium_and_sb3_checkers() -> None:
    env = RobotEnv(load_config("push", LIFT), load_dr("push"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gym_check_env(env, skip_render_check=True)
        sb3_check_env(env)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(env.action_space.sample())
    assert set(info["reward_terms"]) == TERMS and np.isclose(sum(info["reward_terms"].values()), reward)
    assert env.action_space.shape == (8,)  # 7 arm joints + the gripper


def test_scripted_lift_succeeds_and_outscores_random() -> None:
    cfg = load_config("push", [*LIFT, "env.action_mode=absolute", "env.episode_steps=200"])
    env = RobotEnv(cfg, load_dr("none"), seed=0)
    expert, ok, fired = _run(env, range(6), Lifter(env))
    random_env = RobotEnv(load_config("push", [*LIFT, "env.episode_steps=200"]), load_dr("none"), seed=0)
    random_env.action_space.seed(0)
    rand, rand_ok, fired_random = _run(random_env, range(6), None)
    assert sum(ok) >= 5, ok
    assert not any(rand_ok) and np.mean(expert) > np.mean(rand) + 200
    assert all(fired[k] > 1e-3 for k in ("reach", "grasp", "lift", "goal", "success_bonus", "action")), fired
    assert all(fired_random[k] > 0 for k in ("reach", "goal", "action")), fired_random


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

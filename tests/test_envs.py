"""RobotEnv on every robot/task (and a foreign MJCF) passes Gymnasium's and SB3's env checkers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.sim.env import RobotEnv

CASES = [("reach", []), ("cartpole", []), ("reach", ["env.robot=__reacher__"])]


def _cfg(preset: str, overrides: list[str], reacher_xml: str):
    return load_config(
        preset,
        [o.replace("__reacher__", reacher_xml) for o in overrides]
        + (["task.ee_body=", "task.target_min_z=null"] if overrides else []),
    )


@pytest.mark.parametrize("preset,overrides", CASES, ids=["arm3-reach", "cartpole-swingup", "gym-reacher-reach"])
@pytest.mark.parametrize("dr", ["none", "default"])
def test_env_checkers(preset: str, overrides: list[str], dr: str, reacher_xml: str) -> None:
    env = RobotEnv(_cfg(preset, overrides, reacher_xml), load_dr(dr), render_mode="rgb_array")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gym_check_env(env)
        sb3_check_env(env)
    obs, info = env.reset(seed=3)
    assert "dr" in info
    obs, r, term, trunc, info = env.step(env.action_space.sample())
    assert set(info) >= {"is_success", "reward_terms", "dr"}
    assert np.isclose(sum(info["reward_terms"].values()), r) or preset == "cartpole"
    frame = env.render()
    assert frame.shape == (240, 320, 3) and frame.std() > 0


def test_foreign_model_ee_autodetected(reacher_xml: str) -> None:
    env = RobotEnv(_cfg("reach", ["env.robot=__reacher__"], reacher_xml))
    assert env.core.robot.ee_body == "fingertip"
    assert env.core.robot.joint_names == ["joint0", "joint1"]


def test_truncation_at_episode_steps() -> None:
    env = RobotEnv(load_config("reach", ["env.episode_steps=7", "task.approach_speed=0"]))
    env.reset(seed=0)
    flags = [env.step(env.action_space.sample())[3] for _ in range(7)]
    assert flags == [False] * 6 + [True]


def test_camera_observation() -> None:
    cfg = load_config("reach", ["env.camera_obs=true", "env.image_size=[48, 64]"])
    env = RobotEnv(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gym_check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    assert obs["image"].shape == (48, 64, 3) and obs["image"].dtype == np.uint8
    assert obs["image"].std() > 0


def test_reach_success_flag_matches_distance() -> None:
    env = RobotEnv(load_config("reach"))
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.zeros(3))
    dist = -info["reward_terms"]["distance"]
    assert info["is_success"] == (dist < env.cfg.task.success_threshold)

"""MujocoVecEnv (batched mujoco.rollout) steps exactly like RobotEnv and isolates physics faults per env."""

from __future__ import annotations

import warnings

import mujoco
import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.sim.env import RobotEnv
from embodied_ws.sim.vec_env import MujocoVecEnv


def test_batch_of_one_matches_in_process_env() -> None:
    cfg = load_config("reach")
    dr = load_dr("default")
    vec = MujocoVecEnv(cfg, dr, 1, seed=11)
    env = RobotEnv(cfg, dr, seed=11)
    obs_v = vec.reset()
    obs_e, _ = env.reset()
    np.testing.assert_allclose(obs_v[0], obs_e, atol=1e-6)
    actions = np.random.default_rng(0).uniform(-1, 1, (120, 3))
    for a in actions:  # crosses two episode boundaries (50 steps each)
        obs_v, r_v, d_v, info_v = vec.step(a[None])
        obs_e, r_e, _, trunc, info_e = env.step(a)
        if trunc:
            np.testing.assert_allclose(info_v[0]["terminal_observation"], obs_e, atol=1e-5)
            assert info_v[0]["dr"] == info_e["dr"]
            obs_e, _ = env.reset()
        np.testing.assert_allclose(obs_v[0], obs_e, atol=1e-5)
        assert np.isclose(r_v[0], r_e, atol=1e-5) and bool(d_v[0]) == trunc
    vec.close()


def test_vec_env_matches_sb3_dummy_vec_env_interface() -> None:
    cfg = load_config("cartpole")
    vec = MujocoVecEnv(cfg, load_dr("none"), 4, seed=0)
    dummy = DummyVecEnv([lambda: RobotEnv(cfg)] * 2)
    assert vec.observation_space == dummy.observation_space
    assert vec.action_space == dummy.action_space
    obs = vec.reset()
    assert obs.shape == (4, 5) and obs.dtype == np.float32
    assert vec.env_method("set_dr_scale", 0.5) == [None] * 4
    vec.close()


def test_physics_fault_resets_only_that_env() -> None:
    cfg = load_config("reach")
    vec = MujocoVecEnv(cfg, load_dr("none"), 3, seed=0)
    vec.reset()
    for _ in range(3):
        vec.step(np.zeros((3, 3)))
    bad = np.zeros((3, 3))
    bad[1, 0] = np.nan
    obs, rew, done, infos = vec.step(bad)
    assert done.tolist() == [False, True, False]
    assert infos[1].get("physics_reset") and not infos[0].get("physics_reset")
    assert np.isfinite(obs).all() and np.isfinite(infos[1]["terminal_observation"]).all()
    assert vec.core.physics_resets == 1
    obs, rew, done, infos = vec.step(np.zeros((3, 3)))  # training goes on
    assert np.isfinite(obs).all() and not done.any()
    vec.close()


def test_unstable_model_is_detected_and_reset() -> None:
    cfg = load_config("reach")
    env = RobotEnv(cfg, load_dr("none"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env.reset(seed=0)
        # servo gains of 1e12 without force limits blow explicit Euler up (MuJoCo: bad QACC, auto-reset)
        env.model.actuator_gainprm[:, 0] = 1e12
        env.model.actuator_biasprm[:, 1] = -1e12
        env.model.actuator_forcelimited[:] = 0
        env.model.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
        for _ in range(5):
            obs, r, term, trunc, info = env.step(np.ones(3))
            if info.get("physics_reset"):
                break
    assert info.get("physics_reset") and trunc
    assert np.isfinite(obs).all()
    assert env.core.physics_resets >= 1


def test_vec_env_detects_mujoco_auto_reset() -> None:
    cfg = load_config("reach")
    vec = MujocoVecEnv(cfg, load_dr("none"), 2, seed=0)
    vec.reset()
    m = vec.core.models[0]
    m.actuator_gainprm[:, 0] = 1e12
    m.actuator_biasprm[:, 1] = -1e12
    m.actuator_forcelimited[:] = 0
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    _, _, done, infos = vec.step(np.ones((2, 3)))
    assert done.tolist() == [True, False] and infos[0]["physics_reset"]
    vec.close()

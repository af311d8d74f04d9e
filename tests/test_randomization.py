"""Domain randomization: seeded, reproducible, and every parameter really changes the model or observations."""

from __future__ import annotations

import numpy as np
import pytest

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.randomization.appliers import APPLIERS, FieldApplier, select_rows
from embodied_ws.randomization.latency import DelayLine
from embodied_ws.randomization.spec import parse_dr
from embodied_ws.sim.env import RobotEnv


def _dr_samples(seed: int, n: int = 3) -> list[dict]:
    env = RobotEnv(load_config("reach"), load_dr("default"), render_mode="rgb_array")
    out = [env.reset(seed=seed)[1]["dr"]]
    out += [env.reset()[1]["dr"] for _ in range(n - 1)]
    return out


def test_same_seed_same_samples_other_seed_other_samples() -> None:
    a, b, c = _dr_samples(7), _dr_samples(7), _dr_samples(8)
    assert a == b
    assert a != c
    assert a[0] != a[1]  # resampled every episode


def _only(name: str, spec: dict) -> RobotEnv:
    cfg = load_config("reach")
    return RobotEnv(cfg, parse_dr({"params": {name: spec}}), render_mode="rgb_array", seed=0)


MODEL_PARAMS = {
    "body_mass": {"range": [0.5, 1.5]},
    "body_com": {"range": [-0.02, 0.02], "mode": "offset"},
    "geom_friction": {"range": [0.5, 1.5]},
    "joint_damping": {"range": [0.5, 2.0], "dist": "loguniform"},
    "joint_armature": {"range": [0.5, 1.5]},
    "joint_frictionloss": {"range": [0.5, 2.0]},
    "actuator_gain": {"range": [0.5, 1.5]},
    "actuator_forcerange": {"range": [0.5, 1.5]},
    "gravity": {"range": [-1.0, 1.0], "mode": "offset", "dist": "normal"},
    "light_pos": {"range": [-0.3, 0.3], "mode": "offset"},
    "light_diffuse": {"range": [0.5, 1.5]},
    "geom_rgb": {"range": [0.0, 1.0], "mode": "set"},
    "camera_pos": {"range": [-0.05, 0.05], "mode": "offset"},
}


#: contact terms, tested on the push task's scene (tests/test_push.py: CONTACT)
CONTACT_PARAMS = {
    "object_mass",
    "object_size",
    "object_friction",
    "table_friction",
    "fingertip_friction",
    "contact_solref",
    "contact_solimp",
}


def test_every_registered_parameter_is_tested() -> None:
    env_params = {"action_latency", "obs_latency", "action_noise", "obs_noise"}
    assert set(APPLIERS.names()) == set(MODEL_PARAMS) | env_params | CONTACT_PARAMS


@pytest.mark.parametrize("name", sorted(MODEL_PARAMS))
def test_model_parameter_changes_model(name: str) -> None:
    env = _only(name, MODEL_PARAMS[name])
    applier = APPLIERS.get(name)
    assert isinstance(applier, FieldApplier)
    nominal = env.core.robot.model
    rows = select_rows(nominal, applier, ())
    env.reset(seed=1)
    first = applier.view(env.model)[rows].copy()
    assert not np.allclose(first, applier.view(nominal)[rows])
    env.reset()
    assert not np.allclose(first, applier.view(env.model)[rows])


def test_actuator_gain_keeps_position_servo_consistent() -> None:
    env = _only("actuator_gain", MODEL_PARAMS["actuator_gain"])
    env.reset(seed=0)
    np.testing.assert_allclose(env.model.actuator_biasprm[:, 1], -env.model.actuator_gainprm[:, 0])


def test_physics_dr_changes_trajectory() -> None:
    def rollout(dr: dict | None) -> np.ndarray:
        cfg = load_config("reach")
        env = RobotEnv(cfg, parse_dr(dr) if dr else load_dr("none"))
        env.reset(seed=0)
        return np.array([env.step(np.full(3, 0.7))[0] for _ in range(15)])

    base = rollout(None)
    assert not np.allclose(base, rollout({"params": {"actuator_gain": {"range": [0.3, 0.4]}}}))


@pytest.mark.parametrize("name", ["obs_noise", "action_noise"])
def test_noise_changes_observations(name: str) -> None:
    def rollout(std: float) -> np.ndarray:
        env = _only(name, {"range": [std, std], "mode": "set"})
        env.reset(seed=0)
        return np.array([env.step(np.full(3, 0.3))[0] for _ in range(10)])

    assert np.allclose(rollout(0.0), rollout(0.0))
    assert not np.allclose(rollout(0.0), rollout(0.05))


def test_delay_line_delays_exactly_k() -> None:
    for k in range(4):
        line = DelayLine(2, 1, max_delay=3)
        line.reset(0, np.array([-1.0]), k)
        line.reset(1, np.array([-1.0]), 0)
        out = [line.push(np.array([[t], [t]], dtype=float)) for t in range(8)]
        got = [o[0, 0] for o in out]
        assert got == [-1.0] * k + list(range(8 - k))
        assert [o[1, 0] for o in out] == list(range(8))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_action_latency_wrapper_delays_commands_by_k_steps(k: int) -> None:
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (12, 3))

    def ctrls(latency: int, seq: np.ndarray) -> np.ndarray:
        env = _only("action_latency", {"range": [latency, latency], "mode": "set"})
        env.reset(seed=5)
        out = []
        for a in seq:
            env.step(a)
            out.append(env.data.ctrl.copy())
        return np.array(out)

    delayed = ctrls(k, actions)
    shifted = ctrls(0, np.vstack([np.zeros((k, 3)), actions[:-k]]))
    np.testing.assert_allclose(delayed, shifted)


@pytest.mark.parametrize("k", [1, 2])
def test_observation_latency_delays_by_k_steps(k: int) -> None:
    actions = np.random.default_rng(1).uniform(-1, 1, (10, 3))

    def obs(latency: int) -> np.ndarray:
        env = _only("obs_latency", {"range": [latency, latency], "mode": "set"})
        out = [env.reset(seed=2)[0]]
        out += [env.step(a)[0] for a in actions]
        return np.array(out)

    np.testing.assert_allclose(obs(k)[k:], obs(0)[:-k])


def test_curriculum_scale_zero_is_nominal() -> None:
    env = _only("body_mass", MODEL_PARAMS["body_mass"])
    env.set_dr_scale(0.0)
    env.reset(seed=0)
    np.testing.assert_allclose(env.model.body_mass, env.core.robot.model.body_mass)
    env.set_dr_scale(1.0)
    env.reset()
    assert not np.allclose(env.model.body_mass, env.core.robot.model.body_mass)

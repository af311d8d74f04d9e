"""policy.json describes the action mapping of the mode the policy was trained in, and the clip to [-1, 1].

A controller written from policy.json alone (no embodied_ws) must turn actions into the same controls as the
env the policy was trained in: the test implements the mapping from the file's fields and compares it with
``EnvCore.action_to_ctrl`` over actions inside and far outside [-1, 1].
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from deploy_helpers import untrained_run

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.rl.export import ABSOLUTE_MAPPING, DELTA_MAPPING
from embodied_ws.sim.env import RobotEnv


def _controls_from_policy_json(action: dict, q0: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """What a controller that reads only ``policy.json``'s ``action`` entry commands for ``actions``."""
    low, high = np.array(action["ctrl_low"]), np.array(action["ctrl_high"])
    mid, half = (low + high) / 2, (high - low) / 2
    lo, hi = action["clip"]
    delta = np.array([k == "delta" for k in action["mapping_per_actuator"]])
    scale = np.broadcast_to(np.asarray(action["delta_scale"], dtype=float), mid.shape)
    s = np.clip((q0 - mid) / half, -1, 1)  # the set-point starts at the measured pose
    out = []
    for a in actions:
        a = np.clip(a, lo, hi)
        if delta.any():
            s_lo, s_hi = action["setpoint_clip"]
            s = np.where(delta, np.clip(s + scale * a, s_lo, s_hi), a)
        else:
            s = a
        out.append(mid + half * s)
    return np.array(out)


@pytest.mark.parametrize("mode", ["delta", "absolute"])
def test_policy_json_mapping_reproduces_the_training_env(tmp_path: Path, mode: str) -> None:
    run = untrained_run(tmp_path / "run", f"env.action_mode={mode}")
    action = json.loads((run / "policy" / "policy.json").read_text())["action"]
    assert action["mode"] == mode and action["clip"] == [-1.0, 1.0]
    if mode == "delta":
        assert action["mapping"] == DELTA_MAPPING and action["setpoint_clip"] == [-1.0, 1.0]
        assert action["mapping_per_actuator"] == ["delta"] * action["size"]
    else:
        assert action["mapping"] == ABSOLUTE_MAPPING and "setpoint_clip" not in action
        assert action["mapping_per_actuator"] == ["absolute"] * action["size"]
    # the env the policy was trained in (DR off: no action noise or latency), from the run's own config
    cfg = load_config(run / "config.yaml")
    env = RobotEnv(cfg, load_dr("none"), seed=4)
    env.reset(seed=4)
    q0 = env.data.qpos[env.core.robot.qpos_idx].copy()
    actions = np.random.default_rng(0).uniform(-3.0, 3.0, (60, action["size"]))  # far outside [-1, 1] too
    expected = np.array([env.core.action_to_ctrl(a[None])[0][0] for a in actions])
    got = _controls_from_policy_json(action, q0, actions)
    np.testing.assert_allclose(got, expected, atol=1e-9)

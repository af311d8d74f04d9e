"""Deployable policy export: safetensors weights + JSON metadata, loadable without pickle or SB3.

``policy/policy.safetensors`` holds the actor MLP (``layers.<i>.weight/bias``) and the observation
normalization (``obs_mean``, ``obs_var``); ``policy/policy.json`` holds everything a controller needs
to use it: observation layout, action layout and mapping, joint names and limits, control rate;
``policy/config.yaml`` is the run configuration (robot path, xacro arguments, package paths as absolute
paths), so ``embodied-ws deploy`` can rebuild the env from the policy folder alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.core.atomic import write_dir_atomic
from embodied_ws.sim.core import EnvCore

FORMAT = "embodied_ws.policy/1"


def actor_tensors(
    model: Any, obs_rms: Any | None, clip_obs: float, epsilon: float
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Extract the deterministic actor of an SB3 ``MlpPolicy`` as numpy arrays plus network metadata."""
    import torch

    policy = model.policy
    linears = [m for m in policy.mlp_extractor.policy_net if isinstance(m, torch.nn.Linear)]
    linears.append(policy.action_net)
    acts = {torch.nn.Tanh: "tanh", torch.nn.ReLU: "relu", torch.nn.ELU: "elu"}
    activation = acts.get(policy.activation_fn)
    if activation is None:
        raise ValueError(f"unsupported activation {policy.activation_fn}")
    tensors = {}
    for i, lin in enumerate(linears):
        tensors[f"layers.{i}.weight"] = lin.weight.detach().cpu().numpy().astype(np.float32)
        tensors[f"layers.{i}.bias"] = lin.bias.detach().cpu().numpy().astype(np.float32)
    n_obs = linears[0].weight.shape[1]
    tensors["obs_mean"] = (obs_rms.mean if obs_rms is not None else np.zeros(n_obs)).astype(np.float32)
    tensors["obs_var"] = (obs_rms.var if obs_rms is not None else np.ones(n_obs)).astype(np.float32)
    meta = {
        "activation": activation,
        "n_layers": len(linears),
        "clip_obs": clip_obs,
        "epsilon": epsilon,
        "normalize_obs": obs_rms is not None,
    }
    return tensors, meta


#: how an action becomes a control in absolute mode (and for torque actuators in delta mode)
ABSOLUTE_MAPPING = "ctrl = (ctrl_low + ctrl_high) / 2 + (ctrl_high - ctrl_low) / 2 * clip(a, -1, 1)"
#: how an action moves a delta-mode servo's set-point ``s`` (kept in [-1, 1]), and ``s`` becomes a control
DELTA_MAPPING = (
    "s = clip(s + delta_scale * clip(a, -1, 1), -1, 1); ctrl = (ctrl_low + ctrl_high) / 2 + (ctrl_high - ctrl_low) "
    "/ 2 * s; s starts at the measured pose, s = (q - (ctrl_low + ctrl_high) / 2) / ((ctrl_high - ctrl_low) / 2)"
)


def action_mapping(delta: np.ndarray) -> dict[str, Any]:
    """``policy.json``'s description of how actions become controls, for the mapping actually used.

    :param delta: per actuator, whether its actions move a set-point (delta mode servos)
    :returns: ``mapping`` (the formula; with both kinds, each one prefixed by the actuators it applies to),
        ``mapping_per_actuator`` (``delta`` or ``absolute``), ``clip`` (the range actions are clipped to first)
        and, with delta actuators, ``setpoint_clip``
    """
    kinds = ["delta" if d else "absolute" for d in np.asarray(delta, dtype=bool)]
    if all(k == "delta" for k in kinds) and kinds:
        mapping = DELTA_MAPPING
    elif "delta" in kinds:
        mapping = f"delta actuators: {DELTA_MAPPING}. Other actuators: {ABSOLUTE_MAPPING}"
    else:
        mapping = ABSOLUTE_MAPPING
    out: dict[str, Any] = {"mapping": mapping, "mapping_per_actuator": kinds, "clip": [-1.0, 1.0]}
    if "delta" in kinds:
        out["setpoint_clip"] = [-1.0, 1.0]
    return out


def portable_config(cfg: Any) -> dict[str, Any]:
    """The run configuration as a dict with the robot file and package folders made absolute.

    :param cfg: run configuration
    """
    from embodied_ws.config.loader import to_dict

    data = to_dict(cfg)
    env = data["env"]
    if Path(env["robot"]).expanduser().is_file():
        env["robot"] = str(Path(env["robot"]).expanduser().resolve())
    env["package_paths"] = [str(Path(p).expanduser().resolve()) for p in env.get("package_paths") or []]
    return data


def export_policy(out_dir: Path, model: Any, venv: Any, core: EnvCore) -> Path:
    """Write ``policy.safetensors``, ``policy.json`` and ``config.yaml`` atomically into ``out_dir``."""
    import json

    import yaml
    from safetensors.numpy import save_file
    from stable_baselines3.common.vec_env import VecNormalize

    norm = venv if isinstance(venv, VecNormalize) else None
    tensors, net = actor_tensors(
        model,
        norm.obs_rms if norm and norm.norm_obs else None,
        float(norm.clip_obs) if norm else 10.0,
        float(norm.epsilon) if norm else 1e-8,
    )
    r = core.robot
    meta = {
        "format": FORMAT,
        "robot": r.name,
        "task": core.cfg.env.task,
        "network": net,
        "observation": {"size": core.obs_dim, "names": core.obs_names()},
        "action": {
            "size": core.io.action_dim,
            "actuators": r.actuator_names,
            "mode": core.io.mode,
            "ee_yaw": core.cfg.env.ee_yaw,
            "ee_hold_orientation": bool(core.io.ee and core.io.ee.holds_orientation),
            "delta_actuators": core.delta_actuators.tolist(),
            "delta_scale": np.asarray(core.delta_scale).tolist(),  # a float, or one per actuator
            "ctrl_low": r.ctrl_low.tolist(),
            "ctrl_high": r.ctrl_high.tolist(),
            **action_mapping(core.delta_actuators),
            # ee_delta: the actions are an end-effector step (then grippers), converted by sim/ik.py's IK
            **({"ee": core.io.ee.describe(), "mapping": core.io.ee.describe()["mapping"]} if core.io.ee else {}),
        },
        "joints": {"names": r.joint_names, "lower": r.joint_low.tolist(), "upper": r.joint_high.tolist()},
        "control_rate_hz": 1.0 / core.control_dt,
        "ee_body": r.ee_body,
    }

    def fill(tmp: Path) -> None:
        save_file(tensors, str(tmp / "policy.safetensors"))
        (tmp / "policy.json").write_text(json.dumps(meta, indent=2) + "\n")
        (tmp / "config.yaml").write_text(yaml.safe_dump(portable_config(core.cfg), sort_keys=False))

    write_dir_atomic(out_dir, fill)
    return out_dir

"""What a deployment needs from ``RUN_OR_POLICY_DIR``: the exported policy, the run's config, the deploy settings."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_ws.config.loader import load_config
from embodied_ws.config.schema import RunConfig
from embodied_ws.core.errors import UserError


@dataclass
class DeployTarget:
    """A policy to deploy and the configuration it runs under.

    :param policy_dir: folder with ``policy.safetensors`` and ``policy.json``
    :param meta: the parsed ``policy.json``
    :param config: the run's configuration (its ``config.yaml`` when there is one) with overrides applied
    :param run_dir: the run folder, when the policy came from one
    """

    policy_dir: Path
    meta: dict[str, Any]
    config: RunConfig
    run_dir: Path | None = None

    @property
    def meta_path(self) -> str:
        """Where ``policy.json`` is (for error lines)."""
        return str(self.policy_dir / "policy.json")


def _policy_config(meta: dict[str, Any], where: str) -> list[str]:
    """Overrides that rebuild a policy's env settings from ``policy.json`` alone (no run folder)."""
    try:
        sets = [f"env.robot={meta['robot']}", f"env.task={meta['task']}", f"env.action_mode={meta['action']['mode']}"]
        if "ee_yaw" in meta["action"]:
            sets.append(f"env.ee_yaw={str(bool(meta['action']['ee_yaw'])).lower()}")
        if meta["action"].get("mode") == "ee_delta":  # policies exported before the orientation hold: free
            sets.append(f"env.ee_orientation={'hold' if meta['action'].get('ee_hold_orientation') else 'free'}")
        if isinstance(meta["action"].get("delta_scale"), int | float):  # per-joint lists come from the robot
            sets.append(f"env.delta_scale={meta['action']['delta_scale']}")
        if meta.get("ee_body"):
            sets.append(f"task.ee_body={meta['ee_body']}")
    except (KeyError, TypeError) as exc:
        raise UserError(f"policy metadata lacks {exc}", where) from None
    return sets


def resolve_target(path: str | Path, overrides: list[str] | None = None) -> DeployTarget:
    """Resolve a run folder (``runs/NAME``) or a policy folder (``runs/NAME/policy``) into a :class:`DeployTarget`.

    :param path: run folder or policy folder
    :param overrides: ``key=value`` config overrides (``deploy.max_velocity=1.0``)
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError("no such run or policy folder", str(p))
    if (p / "policy" / "policy.json").is_file():
        policy_dir, run_dir = p / "policy", p
    elif (p / "policy.json").is_file():
        policy_dir = p
        run_dir = p.parent if (p.parent / "config.yaml").is_file() else None
    else:
        raise UserError("not a run or policy folder (no policy/policy.json; train and export first)", str(p))
    meta_path = policy_dir / "policy.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"invalid JSON: {exc}", str(meta_path)) from None
    if not isinstance(meta, dict) or not str(meta.get("format", "")).startswith("embodied_ws.policy/"):
        raise UserError("not an embodied_ws policy (format key missing)", str(meta_path))
    overrides = list(overrides or [])
    if run_dir is not None:
        cfg = load_config(run_dir / "config.yaml", overrides)
    elif (policy_dir / "config.yaml").is_file():  # exported with the policy (robot paths absolute)
        cfg = load_config(policy_dir / "config.yaml", overrides)
    else:
        cfg = load_config(None, _policy_config(meta, str(meta_path)) + overrides)
    if cfg.deploy.robot:
        cfg.env.robot = cfg.deploy.robot
    return DeployTarget(policy_dir, meta, cfg, run_dir)

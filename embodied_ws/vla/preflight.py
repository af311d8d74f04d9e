"""Build the pre-flight context (dataset, robot, the policy's features) and run the checks of :mod:`checks`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embodied_ws.config.schema import RunConfig
from embodied_ws.vla.checks import CheckContext, Finding, load_columns, run_checks
from embodied_ws.vla.datafiles import open_local, raise_first, verify_files


def policy_features(cfg: RunConfig, ds_meta: Any) -> dict[str, dict[str, Any]]:
    """Features the policy will use, each with its type, shape and normalization mode.

    A ``--pretrained`` policy brings its own input features (camera names and sizes it was trained
    with); a fresh one takes the dataset's, as LeRobot's ``make_policy`` does.
    """
    import lerobot.policies  # noqa: F401  (registers the policy config types from_pretrained looks up)
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.utils.feature_utils import dataset_to_policy_features

    from embodied_ws.vla.policies import POLICIES

    if cfg.vla.pretrained:
        pcfg = PreTrainedConfig.from_pretrained(cfg.vla.pretrained)
        feats = {**(pcfg.input_features or {}), **(pcfg.output_features or {})}
        back = {v: k for k, v in (cfg.vla.rename_map or {}).items()}  # policy key → dataset key
        feats = {back.get(k, k): f for k, f in feats.items()}
    else:
        pcfg = POLICIES.get(cfg.vla.policy, "vla.policy")(cfg.vla, "cpu")
        feats = dataset_to_policy_features(ds_meta.features)
    out = {}
    for key, f in feats.items():
        kind = f.type.name if hasattr(f.type, "name") else str(f.type)
        mode = pcfg.normalization_mapping.get(kind)
        out[key] = {"type": kind, "shape": tuple(f.shape), "norm": mode.name if mode is not None else "IDENTITY"}
    return out


def build_context(dataset: Path, cfg: RunConfig) -> CheckContext:
    """Open the dataset (files verified, no hub) and the configured robot; one-line errors for a folder that is
    not a dataset or a missing/broken file."""
    from embodied_ws.sim.core import build_robot

    ds = open_local(dataset)
    robot = build_robot(cfg)
    return CheckContext(
        root=Path(dataset),
        ds=ds,
        cfg=cfg,
        robot=robot,
        policy_features=policy_features(cfg, ds.meta),
        columns=load_columns(ds),
        max_idle_ratio=cfg.vla.max_idle_ratio,
        max_tracking_error=cfg.vla.max_tracking_error,
    )


def collect(dataset: Path, cfg: RunConfig, only: list[str] | None = None) -> tuple[list[str], list[Finding]]:
    """``(passed, findings)``: the dataset's files first (a missing or broken file stops there), then the checks.

    :raises UserError: not a dataset, or a dataset of another robot
    """
    files = verify_files(dataset)
    if files:
        return [], files
    rest = [n for n in only or [] if n != "files"]
    if only and not rest:
        return ["files"], []
    passed, findings = run_checks(build_context(dataset, cfg), rest or None)
    return ["files", *passed], findings


def preflight(
    dataset: Path, cfg: RunConfig, only: list[str] | None = None, quiet: bool = False
) -> tuple[list[str], list[Finding]]:
    """Run the checks; print each failure as one line on stderr and raise when any failed.

    :raises UserError: a dataset of another robot, or (after printing the others) the last failure
    """
    passed, findings = collect(dataset, cfg, only)
    raise_first(findings)
    if not quiet:
        for name in passed:
            print(f"ok  {name}")
    return passed, findings

"""Pre-flight checks of a demonstration dataset against a policy and a robot (``embodied-ws vla check``).

Fine-tuning runs fail most often on data mismatches found hours in: normalization statistics missing
for a feature the policy normalizes, other camera names or sizes, a control rate that is not the
robot's, long idle stretches, actions outside the joint limits, broken episodes, or actions that are
not what the robot executes. Each check here returns failures, one line each, naming the key or the
episode and the fix. A dataset of another robot is fatal (:class:`UserError`) since nothing else
can be compared then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.config.schema import RunConfig
from embodied_ws.core.errors import UserError
from embodied_ws.core.registry import Registry
from embodied_ws.data.dataset import ACTION, IMAGE_PREFIX, STATE, read_sidecar


@dataclass
class Finding:
    """One failed check: ``where`` (a feature key or ``episode N``), what is wrong, and the fix."""

    check: str
    where: str
    what: str
    fix: str

    def line(self) -> str:
        """The one line shown to the user."""
        return f"error: {self.where}: {self.what}; fix: {self.fix}"


@dataclass
class CheckContext:
    """What the checks look at: the dataset, its columns as numpy, the robot, the policy's features."""

    root: Path
    ds: Any
    cfg: RunConfig
    robot: Any
    policy_features: dict[str, Any]  # key → {"type": "STATE"|"ACTION"|"VISUAL", "shape": tuple, "norm": mode}
    columns: dict[str, np.ndarray]
    max_idle_ratio: float = 0.3
    max_tracking_error: float = 0.1

    def episodes(self) -> list[tuple[int, np.ndarray]]:
        """``(episode index, row indices)`` per episode, in order."""
        ep = self.columns["episode_index"]
        return [(int(e), np.flatnonzero(ep == e)) for e in np.unique(ep)]


CHECKS: Registry[Callable[[CheckContext], list[Finding]]] = Registry("pre-flight check")


def load_columns(ds: Any) -> dict[str, np.ndarray]:
    """Non-image columns of the whole dataset as numpy arrays (images are not decoded)."""
    cols = ["episode_index", "frame_index", "timestamp", STATE, ACTION]
    table = ds.hf_dataset.with_format(None).select_columns([c for c in cols if c in ds.hf_dataset.column_names])
    return {
        c: np.asarray(table[c], dtype=np.float64 if c in (STATE, ACTION, "timestamp") else np.int64)
        for c in table.column_names
    }


def check_robot(ctx: CheckContext) -> None:
    """Fatal: the dataset's state names must be the robot's joints (a dataset of another robot stops here)."""
    names = list(ctx.ds.meta.features.get(STATE, {}).get("names") or [])
    joints = list(ctx.robot.joint_names)
    if names != joints:
        raise UserError(
            f"dataset joints [{', '.join(names)}] are not {ctx.robot.name}'s [{', '.join(joints)}]: "
            "a dataset of another robot (pass --robot, or record with this robot)",
            str(ctx.root),
        )


@CHECKS.register("stats")
def check_stats(ctx: CheckContext) -> list[Finding]:
    """Normalization statistics exist for every feature the policy normalizes, with the right keys and sizes."""
    out = []
    stats = ctx.ds.meta.stats or {}
    need = {"MEAN_STD": ("mean", "std"), "MIN_MAX": ("min", "max"), "QUANTILES": ("q01", "q99")}
    for key, f in ctx.policy_features.items():
        keys = need.get(f["norm"], ())
        missing = [k for k in keys if k not in stats.get(key, {})]
        if missing:
            out.append(
                Finding(
                    "stats",
                    key,
                    f"{f['norm']} normalization needs stats {'/'.join(missing)}, meta/stats.json has none",
                    "re-record the dataset (LeRobot writes stats on save_episode) or recompute meta/stats.json",
                )
            )
        elif keys and np.asarray(stats[key][keys[0]]).size != int(np.prod(f["shape"])):
            out.append(
                Finding(
                    "stats",
                    key,
                    f"the dataset has {np.asarray(stats[key][keys[0]]).size} values, the policy "
                    f"{int(np.prod(f['shape']))}",
                    "record the policy's joints, or fine-tune a fresh policy on this robot (no --pretrained)",
                )
            )
    return out


@CHECKS.register("cameras")
def check_cameras(ctx: CheckContext) -> list[Finding]:
    """The policy's cameras exist under the same names; each episode's images have the declared size."""
    out = []
    feats = ctx.ds.meta.features
    have = [k for k in feats if k.startswith(IMAGE_PREFIX)]
    want = [k for k, f in ctx.policy_features.items() if f["type"] == "VISUAL"]
    if not have:
        out.append(Finding("cameras", "observation.images", "no camera images", "record with a camera"))
    for key in want:
        if key not in have:
            out.append(
                Finding(
                    "cameras",
                    key,
                    f"the policy expects this camera; the dataset has {', '.join(have) or 'none'}",
                    "rename the dataset's camera or set vla.rename_map",
                )
            )
    for key in have:
        declared = tuple(feats[key]["shape"])
        for ep, rows in ctx.episodes():
            img = ctx.ds[int(rows[0])][key]  # (C, H, W) float
            got = (int(img.shape[1]), int(img.shape[2]), int(img.shape[0]))
            if got != declared:
                out.append(
                    Finding(
                        "cameras",
                        f"{key} episode {ep}",
                        f"images are {got[0]}x{got[1]}, info.json declares {declared[0]}x{declared[1]}",
                        "record every episode at one image size",
                    )
                )
                break
    return out


@CHECKS.register("fps")
def check_fps(ctx: CheckContext) -> list[Finding]:
    """The dataset's frame rate is the robot's control rate (a policy acts once per frame)."""
    rate = 1.0 / (ctx.robot.control_dt * ctx.cfg.env.frame_skip)
    if abs(ctx.ds.fps - rate) > 0.01 * rate:
        return [
            Finding(
                "fps",
                "fps",
                f"dataset at {ctx.ds.fps} Hz, the robot is controlled at {rate:g} Hz",
                f"record or resample at {rate:g} Hz, or set env.frame_skip to match",
            )
        ]
    return []


@CHECKS.register("idle")
def check_idle(ctx: CheckContext) -> list[Finding]:
    """Episodes are not mostly idle frames (state and action unchanged from the previous frame)."""
    out = []
    s, a = ctx.columns[STATE], ctx.columns[ACTION]
    for ep, rows in ctx.episodes():
        if len(rows) < 2:
            continue
        ds_ = np.abs(np.diff(s[rows], axis=0)).max(axis=1)
        da = np.abs(np.diff(a[rows], axis=0)).max(axis=1)
        ratio = float(np.mean((ds_ < 1e-3) & (da < 1e-3)))
        if ratio > ctx.max_idle_ratio:
            out.append(
                Finding(
                    "idle",
                    f"episode {ep}",
                    f"{ratio:.0%} idle frames (limit {ctx.max_idle_ratio:.0%})",
                    "trim the idle start/end of the episode (or raise vla.max_idle_ratio)",
                )
            )
    return out


@CHECKS.register("action_range")
def check_action_range(ctx: CheckContext) -> list[Finding]:
    """Actions (joint position commands) stay within the robot's joint limits."""
    out = []
    a = ctx.columns[ACTION]
    names = ctx.ds.meta.features[ACTION].get("names") or [str(i) for i in range(a.shape[1])]
    low, high = ctx.robot.joint_low, ctx.robot.joint_high
    if a.shape[1] != low.size:
        return [
            Finding(
                "action_range",
                ACTION,
                f"{a.shape[1]} action entries, the robot has {low.size} joints",
                "record one command per actuated joint",
            )
        ]
    margin = 0.02 * (high - low)
    bad = (a < low - margin) | (a > high + margin)
    for j in np.flatnonzero(bad.any(axis=0)):
        ep = int(ctx.columns["episode_index"][np.flatnonzero(bad[:, j])[0]])
        out.append(
            Finding(
                "action_range",
                f"{ACTION}[{names[j]}]",
                f"values {a[:, j].min():.3g}..{a[:, j].max():.3g} leave "
                f"the joint limits [{low[j]:.3g}, {high[j]:.3g}] (first in episode {ep})",
                "actions must be joint position commands in rad: check units and offsets",
            )
        )
    return out


def _nonfinite(column: Any) -> tuple[np.ndarray, np.ndarray]:
    """Rows and entry positions of the NaN, inf or missing values of a float (or list-of-float) arrow column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    listy = pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type)
    base = arr.type.value_type if listy else arr.type
    if not pa.types.is_floating(base):
        return np.empty(0, np.int64), np.empty(0, np.int64)  # integers and strings cannot be NaN
    none = np.empty(0, np.int64)
    if listy:
        values = pc.list_flatten(arr).to_numpy(zero_copy_only=False)
        rows = pc.list_parent_indices(arr).to_numpy()
        entry = np.arange(len(rows)) - np.searchsorted(rows, rows, side="left")
        null = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False)) if arr.null_count else none
    else:  # a missing scalar reads as NaN
        values, rows, null = arr.to_numpy(zero_copy_only=False), np.arange(len(arr)), none
        entry = np.zeros(len(arr), np.int64)
    bad = ~np.isfinite(values.astype(np.float64))
    return np.concatenate([rows[bad], null]), np.concatenate([entry[bad], np.zeros(len(null), np.int64)])


@CHECKS.register("finite")
def check_finite(ctx: CheckContext) -> list[Finding]:
    """Every numeric column of every data file, and the normalization statistics, are finite (no NaN/inf)."""
    import pyarrow.parquet as pq

    out = []
    feats = ctx.ds.meta.features
    for path in sorted((ctx.root / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        for name in table.column_names:
            rows, entry = _nonfinite(table.column(name))
            if not len(rows):
                continue
            first = int(np.argmin(rows))
            row = int(rows[first])
            labels = (feats.get(name) or {}).get("names") or []
            idx = int(entry[first])
            label = f"[{labels[idx]}]" if isinstance(labels, list) and idx < len(labels) else f"[{idx}]"
            value = table.column(name)[row].as_py()
            value = value[idx] if isinstance(value, list) else value
            ep, fr = (int(table.column(c)[row].as_py()) for c in ("episode_index", "frame_index"))
            out.append(
                Finding(
                    "finite",
                    f"{path} {name}{label}",
                    f"{len(rows)} non-finite value(s), the first ({value}) at episode {ep} frame {fr}",
                    "drop or re-record the episode (or fix what wrote the value); training on it gives a NaN loss",
                )
            )
    for key, stats in (ctx.ds.meta.stats or {}).items():
        for stat, value in stats.items():
            v = np.asarray(value)
            if v.dtype.kind in "fc" and not np.isfinite(v).all():
                out.append(
                    Finding(
                        "finite",
                        f"{ctx.root / 'meta' / 'stats.json'} {key}.{stat}",
                        "non-finite normalization statistics",
                        "fix the data, then recompute meta/stats.json",
                    )
                )
    return out


@CHECKS.register("integrity")
def check_integrity(ctx: CheckContext) -> list[Finding]:
    """Per episode: frame indices 0..n-1, timestamps strictly increasing without gaps (1/fps apart)."""
    out = []
    period = 1.0 / ctx.ds.fps
    for ep, rows in ctx.episodes():
        t = ctx.columns["timestamp"][rows]
        fi = ctx.columns["frame_index"][rows]
        dt = np.diff(t)
        if not np.array_equal(fi, np.arange(len(rows))):
            what = "frame_index is not 0..n-1"
        elif (dt <= 0).any():
            what = f"timestamps not increasing at frame {int(np.flatnonzero(dt <= 0)[0]) + 1}"
        elif (np.abs(dt - period) > 0.25 * period).any():
            k = int(np.flatnonzero(np.abs(dt - period) > 0.25 * period)[0])
            what = f"gap of {dt[k]:.3f} s after frame {k} (frame period {period:.3f} s)"
        else:
            continue
        out.append(Finding("integrity", f"episode {ep}", what, "drop or re-record the episode"))
    return out


@CHECKS.register("replay")
def check_replay(ctx: CheckContext) -> list[Finding]:
    """Replay the first episode's actions open loop in the sim; the joints must track the recorded states."""
    from embodied_ws.vla.replay import replay_episode

    ep, rows = ctx.episodes()[0]
    if not (np.isfinite(ctx.columns[STATE][rows]).all() and np.isfinite(ctx.columns[ACTION][rows]).all()):
        return []  # the finite check names the values; the simulator cannot replay them
    err = replay_episode(ctx.cfg, ctx.robot, ctx.columns[STATE][rows], ctx.columns[ACTION][rows])
    if not np.isfinite(err) or err > ctx.max_tracking_error:
        return [
            Finding(
                "replay",
                f"episode {ep}",
                f"replayed actions track the recorded joints with RMS error {err:.3f} "
                f"rad (limit {ctx.max_tracking_error:g})",
                "actions must be this robot's joint position commands at the dataset's rate",
            )
        ]
    return []


def run_checks(ctx: CheckContext, only: list[str] | None = None) -> tuple[list[str], list[Finding]]:
    """Run the robot check, then every registered check (or ``only``); returns ``(passed, findings)``."""
    check_robot(ctx)
    passed, findings = [], []
    for name in only or CHECKS.names():
        with np.errstate(invalid="ignore"):  # NaN/inf in the data: the finite check reports them, once
            got = CHECKS.get(name, "--only")(ctx)
        findings.extend(got)
        if not got:
            passed.append(name)
    return passed, findings


def sidecar_robot(root: Path, default: str) -> str:
    """The robot a dataset says it was recorded on (our sidecar or LeRobot's robot_type), else ``default``."""
    return str(read_sidecar(root).get("robot") or default)

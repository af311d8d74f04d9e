"""What ``sysid fit`` writes: ``fit.yaml`` (a plant file), ``dr.yaml`` (DR centred on the fit), ``fit.json``, PNGs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from embodied_ws.core.atomic import write_bytes_atomic, write_json_atomic
from embodied_ws.sim.robot import Robot
from embodied_ws.sysid.fit import FitResult
from embodied_ws.sysid.replay import Recording, Replayer, scaled_model

#: ±half-width (log-scale) kept around a confidently fitted value: real units still differ a little
MIN_HALF_WIDTH = 0.05


def summary(result: FitResult, robot: str, bag: str) -> dict[str, Any]:
    """The JSON ``sysid fit`` prints (keys ``params``, ``action_latency``, ``rmse_before``, ``rmse_after`` ...)."""
    cut = 1.0 - result.rmse_after / result.rmse_before if result.rmse_before > 0 else 0.0
    return {
        "robot": robot,
        "bag": bag,
        "params": {**result.scales, "action_latency": result.latency},
        "action_latency": result.latency,
        "rmse_before": round(result.rmse_before, 6),
        "rmse_after": round(result.rmse_after, 6),
        "rmse_cut": round(cut, 4),
        "rmse_systematic": round(result.rmse_systematic, 6),
        "latency_rmse": result.latency_rmse,
        "weakly_identifiable": result.weak,
        "identifiability": result.identifiability,
        "jacobian_condition": result.condition if math.isfinite(result.condition) else None,
        "saturated_fraction": round(result.saturated_fraction, 4),
        "notes": result.notes,
        "seconds": round(result.seconds, 1),
    }


def plant_yaml(result: FitResult, robot: str, bag: str) -> str:
    """``fit.yaml``: the fit as a plant file (fixed values), usable as ``plant:=`` or ``--plant``."""
    lines = [
        f"# sysid fit of {robot} to {bag}: joint RMSE {result.rmse_before:.4f} -> {result.rmse_after:.4f} rad.",
        "# Scales of the nominal model; a plant file (embodied_ws/randomization/plant.py).",
    ]
    if result.weak:
        lines.append(f"# Weakly identifiable (the data hardly constrains them): {', '.join(result.weak)}.")
    params: dict[str, Any] = {name: {"range": [value, value], "mode": "scale"} for name, value in result.scales.items()}
    params["action_latency"] = {"range": [result.latency, result.latency], "mode": "set"}
    return "\n".join(lines) + "\n" + yaml.safe_dump({"params": params}, sort_keys=False, default_flow_style=None)


def dr_yaml(result: FitResult, base: dict[str, Any]) -> str:
    """``dr.yaml``: the ``base`` DR (config/dr/default.yaml) re-centred on the fit.

    A confidently fitted scale gets ``fit × exp(±max(3 std, bias, 0.05))`` (never wider than the base;
    ``bias`` is the parameter error that motion as large as the fit's remaining RMSE could hide); a weakly
    identifiable one keeps the base's width, multiplied by the fit; the latency becomes the fitted value.
    """
    out = {"enabled": True, "params": {k: dict(v) for k, v in (base.get("params") or {}).items()}}
    params = out["params"]
    for name, scale in result.scales.items():
        entry = dict(params.get(name) or {"dist": "loguniform", "range": [1.0, 1.0], "mode": "scale"})
        lo, hi = (float(v) for v in entry["range"])
        info = result.identifiability.get(name, {"weak": True, "std_log": math.inf})
        if info["weak"] or entry.get("mode", "scale") != "scale":
            new = [scale * lo, scale * hi]
        else:
            base_half = 0.5 * (math.log(max(hi, 1e-9)) - math.log(max(lo, 1e-9))) if lo > 0 else math.inf
            bias = info.get("bias_log")
            bias = math.inf if bias is None else float(bias)
            half = min(max(3.0 * float(info["std_log"]), bias, MIN_HALF_WIDTH), base_half)
            new = [scale * math.exp(-half), scale * math.exp(half)]
            entry["dist"] = "loguniform"
        entry["range"] = [round(new[0], 4), round(new[1], 4)]
        entry["mode"] = "scale"
        params[name] = entry
    params["action_latency"] = {"range": [result.latency, result.latency], "mode": "set"}
    head = (
        f"# Default DR re-centred on a sysid fit (latency {result.latency}); narrow where the fit is confident.\n"
        + (f"# Weakly identifiable, kept wide: {', '.join(result.weak)}.\n" if result.weak else "")
    )
    return head + yaml.safe_dump(out, sort_keys=False, default_flow_style=None)


def overlay_span(rec: Recording, segment_s: float) -> dict[str, Any]:
    """Which part of the recording the overlays show and the fit replayed (times in s from the first state)."""
    rep_from = min(rec.first_commanded, rec.n - 1)
    return {
        "from_s": round(float(rec.t[0]), 3),
        "to_s": round(float(rec.t[-1]), 3),
        "replayed_from_s": round(float(rec.t[rep_from]), 3),
        "segment_s": segment_s,
        "states": int(rec.n),
    }


def plot_overlays(path: Path, rec: Recording, sims: dict[str, np.ndarray], title: str, segment_s: float) -> None:
    """One PNG: recorded vs simulated joint positions over the whole recording, one row per joint.

    The part before the first recorded command (not replayed: the commands are unknown) is shaded and
    the simulated lines start where the replay does; dotted lines mark the replay's segment starts,
    where the simulation restarts from the recorded state.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    span = overlay_span(rec, segment_s)
    first = min(rec.first_commanded, rec.n - 1)
    late = span["replayed_from_s"] - span["from_s"] > 2.0 * rec.control_dt  # more than the usual first state
    starts = Replayer.segment_starts(rec, segment_s)
    n = rec.q.shape[1]
    width = float(np.clip((span["to_s"] - span["from_s"]) / 4.0, 10.0, 40.0))  # long recordings get room
    fig, axes = plt.subplots(n, 1, figsize=(width, 2.2 * n), sharex=True, squeeze=False)
    for j in range(n):
        ax = axes[j, 0]
        if late:
            ax.axvspan(rec.t[0], rec.t[first], color="0.9", label="not replayed (no command recorded yet)")
        for s in starts[1:]:
            ax.axvline(rec.t[s], color="0.75", lw=0.6, ls=":")
        ax.plot(rec.t, rec.q[:, j], color="k", lw=1.6, label="recorded")
        for (label, q), color in zip(sims.items(), ("tab:red", "tab:blue", "tab:green"), strict=False):
            ax.plot(rec.t[first:], q[first:, j], color=color, lw=1.0, label=label)
        ax.set_ylabel(f"{rec.joint_names[j]} [rad]")
        ax.set_xlim(rec.t[0], rec.t[-1])
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    part = f"whole recording, {span['from_s']:g}-{span['to_s']:.1f} s"
    if late:
        part += f" (replayed from {span['replayed_from_s']:.1f} s, the first recorded command)"
    axes[0, 0].set_title(f"{title}\n{part}; dotted lines: replay segment starts ({segment_s:g} s)", fontsize=10)
    axes[-1, 0].set_xlabel("time [s]")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(path)


def overlays(robot: Robot, rec: Recording, result: FitResult, segment_s: float) -> dict[str, np.ndarray]:
    """Replayed joint positions before (nominal, latency 0) and after the fit, for the overlay plots."""
    rep = Replayer(robot, rec, segment_s)
    return {
        "before": rep.simulate(robot.model, 0)[0],
        "after": rep.simulate(scaled_model(robot, result.scales), result.latency)[0],
    }


def write_outputs(
    out: Path,
    result: FitResult,
    rec: Recording,
    robot: str,
    bag: str,
    base_dr: dict[str, Any],
    sims: dict,
    segment_s: float = 4.0,
) -> dict[str, Any]:
    """Write fit.yaml, dr.yaml, fit.json and the overlay PNGs into ``out``; returns the summary."""
    out.mkdir(parents=True, exist_ok=True)
    info = summary(result, robot, bag)
    write_bytes_atomic(out / "fit.yaml", plant_yaml(result, robot, bag).encode())
    write_bytes_atomic(out / "dr.yaml", dr_yaml(result, base_dr).encode())
    plot_overlays(out / "overlay_before.png", rec, {"nominal model": sims["before"]}, "before the fit", segment_s)
    plot_overlays(
        out / "overlay_after.png",
        rec,
        {"fitted model": sims["after"]},
        f"after the fit (latency {result.latency}, RMSE {result.rmse_after:.4f} rad)",
        segment_s,
    )
    info["overlays"] = overlay_span(rec, segment_s)
    info["files"] = {k: str(out / k) for k in ("fit.yaml", "dr.yaml", "overlay_before.png", "overlay_after.png")}
    write_json_atomic(out / "fit.json", info)
    json.dumps(info)  # fail here, not in the CLI, if something is not JSON-serialisable
    return info

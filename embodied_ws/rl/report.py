"""End-of-run report: ``report.md`` with PNG learning curves, the time breakdown and hardware needs."""

from __future__ import annotations

import json
import os
import resource
from pathlib import Path
from typing import Any


def hardware_summary(device: str, n_params: int, nthread: int) -> dict[str, Any]:
    """What this job used: CPU threads, peak RAM, accelerator and policy size."""
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    out: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "sim_threads": nthread,
        "peak_rss_mb": round(peak_mb, 1),
        "device": device,
        "policy_parameters": n_params,
    }
    if device.startswith("cuda"):
        import torch

        out["gpu_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _plot(path: Path, xs: list[float], ys: list[float], xlabel: str, ylabel: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot(xs, ys, marker="o" if len(xs) < 40 else None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _stopped_line(summary: dict[str, Any]) -> str:
    """Why learning ended, with the last three early-stop confirmations (``train.confirm_success``: the low end
    of the interval counts)."""
    confirmations = summary.get("confirmations") or []
    line = f"- learning stopped by: {summary.get('stopped') or 'step budget'}"
    for c in confirmations[-3:]:
        line += f"; confirmation at step {c['step']:,}: {_pct(c['success_rate'])} of {c['episodes']} fresh episodes"
        if "success_ci95" in c:  # runs before the interval rule have none
            line += f" (95 % interval from {_pct(c['success_ci95'][0])})"
    if len(confirmations) > 3:
        line += f" ({len(confirmations)} confirmations in all)"
    if summary.get("evals_skipped"):
        line += (
            f"; {summary['evals_skipped']} periodic evaluations skipped while the training episodes' success was "
            "far under the target"
        )
    return line


def _ray_lines(ray: dict[str, Any] | None) -> list[str]:
    """Report lines of the Ray backend's samplers (none for other backends)."""
    if not ray:
        return []
    return [
        f"- Ray samplers: {ray['actors']} actors × {ray['cpus_per_actor']:g} CPU, envs per actor "
        f"{', '.join(map(str, ray['envs_per_actor']))}",
        f"- sampler actors replaced: {ray['actor_restarts']} (an actor died: its envs restarted their episodes "
        "on a new one and training went on)",
    ]


def _data_wait_lines(wait: dict[str, Any] | None) -> list[str]:
    """Report lines of the data-wait rule (:mod:`embodied_ws.rl.datawait`)."""
    if not wait:
        return []
    return [f"**{wait['message']}**", "", *[f"- {s}" for s in wait["suggestions"]], ""]


def write_report(
    run_dir: Path, summary: dict[str, Any], evals: list[dict[str, float]], episodes: list[tuple[int, float]]
) -> Path:
    """Write ``report.md`` (and ``summary.json``, PNG curves) into ``run_dir``.

    :param summary: time breakdown, hardware, physics events, final metrics
    :param evals: evaluation rows ``{step, success_rate, mean_return}``
    :param episodes: ``(step, episode return)`` of training episodes
    """
    from embodied_ws.core.atomic import write_bytes_atomic, write_json_atomic
    from embodied_ws.rl.diagnosis import bound_lines

    pngs = []
    if evals:
        _plot(
            run_dir / "eval_success.png",
            [e["step"] for e in evals],
            [e["success_rate"] for e in evals],
            "env steps",
            "success rate",
            "Evaluation success (DR on)",
        )
        pngs.append("eval_success.png")
    if episodes:
        k = max(1, len(episodes) // 200)
        xs = [episodes[i][0] for i in range(0, len(episodes), k)]
        ys = [sum(r for _, r in episodes[i : i + k]) / len(episodes[i : i + k]) for i in range(0, len(episodes), k)]
        _plot(run_dir / "train_return.png", xs, ys, "env steps", "episode return", "Training return")
        pngs.append("train_return.png")
    t = summary["time"]
    total = max(t["total_s"], 1e-9)
    rows = [
        ("sampling (env stepping + policy inference)", t["sampling_s"]),
        ("  env stepping (learner waiting for data)", t["env_step_s"]),
        ("  policy inference", t["policy_inference_s"]),
        ("PPO update", t["update_s"]),
        ("evaluation", t.get("eval_s", 0.0)),
        ("checkpoints", t.get("checkpoint_s", 0.0)),
    ]
    lines = [
        f"# Run report: {summary['name']}",
        "",
        f"- robot / task: `{summary['robot']}` / `{summary['task']}`",
        f"- domain randomization: {'on' if summary['dr'] else 'off'}",
        f"- env steps: {summary['steps']:,} in {total / 60:.1f} min ({t['env_steps_per_s']:,.0f} env-steps/s)",
        f"- final evaluation success: {_pct(summary.get('final_success'))}"
        f" over {(summary.get('final_eval') or {}).get('episodes', 0)} episodes with full DR"
        f" (training stops early after two evaluations in a row at {_pct(summary.get('target_success'))})",
        _stopped_line(summary),
        f"- physics resets (NaN/instability, env reset and training went on): {summary['physics_resets']}",
        *_ray_lines(summary.get("ray")),
        "",
        *bound_lines(summary),
        "## Where time went",
        "",
        "| phase | seconds | share |",
        "|---|---:|---:|",
        *[f"| {name} | {sec:.1f} | {sec / total:.0%} |" for name, sec in rows],
        "",
        *_data_wait_lines(summary.get("data_wait")),
        "## Hardware this job needs",
        "",
        *[f"- {k}: {v}" for k, v in summary["hardware"].items()],
        "",
        "## Curves",
        "",
        *[f"![{p}]({p})" for p in pngs],
        "",
        "Evaluation history:",
        "",
        "| step | success | mean return |",
        "|---:|---:|---:|",
        *[f"| {e['step']:,} | {e['success_rate']:.0%} | {e['mean_return']:.2f} |" for e in evals],
        "",
    ]
    write_json_atomic(run_dir / "summary.json", summary)
    write_bytes_atomic(run_dir / "report.md", "\n".join(lines).encode())
    return run_dir / "report.md"


def load_summary(run_dir: Path) -> dict[str, Any]:
    """The ``summary.json`` of a finished run."""
    return json.loads((run_dir / "summary.json").read_text())

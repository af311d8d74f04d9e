"""Verbs ``plan`` (hardware a job needs) and ``tune`` (Optuna search over PPO and reward weights)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embodied_ws.cli.argtypes import param_count, positive_float, positive_int
from embodied_ws.core.errors import UserError

if TYPE_CHECKING:
    from embodied_ws.cli import AddVerb


def _config(args: argparse.Namespace) -> Any:
    from embodied_ws.config.loader import load_config

    overrides = list(args.set or [])
    if getattr(args, "robot", None):
        overrides.append(f"env.robot={args.robot}")
    if getattr(args, "task", None):
        overrides.append(f"env.task={args.task}")
    return load_config(args.config, overrides), overrides


def _cmd_plan(args: argparse.Namespace) -> int:
    from embodied_ws.config.loader import load_dr
    from embodied_ws.rl.hwplan import make_plan, plan_lines

    cfg, _ = _config(args)
    plan = make_plan(
        cfg,
        load_dr(cfg.dr),
        args.steps_per_s,
        vla_params=args.vla_params,
        learner_steps_per_s=args.learner_steps_per_s,
        llm_ctx=args.llm_ctx,
        probe_seconds=args.probe_seconds,
    )
    print(json.dumps(plan) if args.json else "\n".join(plan_lines(plan)))
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from embodied_ws.rl.tune import TuneJob, load_space, tune

    cfg, overrides = _config(args)
    if args.eval_every > args.steps:
        raise UserError(f"must be <= --steps ({args.steps}), got {args.eval_every}", "--eval-every")
    if args.ray_token_file:  # Ray token auth for this process and the Ray processes it starts
        from embodied_ws.rl.ray_cluster import use_token

        use_token(args.ray_token_file)
    params = load_space(args.space, cfg.env.task)
    out = Path(args.runs) / args.name
    job = TuneJob(
        base_config=args.config,
        overrides=overrides,
        params=params,
        steps=args.steps,
        eval_every=args.eval_every,
        eval_episodes=args.eval_episodes,
        storage=str((out / "study.journal").resolve()),
        study=args.name,
        seed=cfg.train.seed,
    )
    from embodied_ws.core.outputs import output_folder

    # one tune per study folder at a time; a folder that is not ours is refused; a study of ours resumes
    with output_folder(out, "tune", adds=True, flag="--name"):
        result = tune(job, out, args.trials, args.jobs, args.ray, args.ray_address, progress=not args.json)
    if args.json:
        print(json.dumps(result))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"study {args.name}: {len(result['trials'])} trials, {result['pruned']} pruned")
    keys = [p.key for p in params]
    for col in ("#", "state", "success", *keys):
        table.add_column(col, justify="right")
    ranked = sorted(result["trials"], key=lambda r: (r["value"] is None, -(r["value"] or 0.0)))
    for r in ranked:
        value = "" if r["value"] is None else f"{r['value']:.0%}"
        cells = [_fmt(r["params"].get(k)) for k in keys]
        style = "bold green" if r["number"] == result["best_trial"] else None
        table.add_row(str(r["number"]), r["state"].lower(), value, *cells, style=style)
    console = Console()
    console.print(table)
    console.print(f"best config: {result['config']}  (embodied-ws train --config {result['config']})")
    console.print(f"importance plot: {result['importance_png']}")
    return 0


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="reach", help="preset under config/train or a YAML path (default: reach)")
    p.add_argument("--robot", help="robot name or MJCF path (shortcut for --set env.robot=...)")
    p.add_argument("--task", help="task name (shortcut for --set env.task=...)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value; repeatable")


def register(add_verb: AddVerb) -> None:
    """Add ``plan`` and ``tune``."""
    p = add_verb(
        "plan",
        _cmd_plan,
        "Plan the hardware of a job: probe per-core env throughput here, then sampler cores, envs per core, "
        "GPU memory (PPO policy, VLA LoRA/full, LLM assistant) and the data-wait risk.",
        "example: embodied-ws plan --robot arm3 --task reach --steps-per-s 50000 --learner-steps-per-s 20000 --json",
    )
    _common(p)
    p.add_argument(
        "--steps-per-s", type=positive_float(1e9), required=True, help="target aggregate env-steps/s of sampling"
    )
    p.add_argument(
        "--learner-steps-per-s", type=positive_float(1e9), help="env-steps/s the learner consumes with free data"
    )
    p.add_argument(
        "--vla-params",
        type=param_count(),
        default="450M",
        help="VLA parameter count, e.g. 450M (SmolVLA) or 3.3B (pi0)",
    )
    p.add_argument(
        "--llm-ctx", type=positive_int(10_000_000), default=8192, help="assistant context length for its KV cache"
    )
    p.add_argument("--probe-seconds", type=positive_float(60.0), default=0.5, help="CPU seconds per probed batch size")

    t = add_verb(
        "tune",
        _cmd_tune,
        "Search PPO hyperparameters and reward-term weights with Optuna (pruning on evaluations); "
        "writes best.yaml for `embodied-ws train --config`, importance.png and results.json.",
        "example: embodied-ws tune --config reach --name tune1 --trials 20 --steps 100000 --jobs 2\n"
        "         embodied-ws tune --space my_space.yaml --ray --ray-address auto --jobs 8",
    )
    _common(t)
    t.add_argument("--space", help="search-space YAML (default: PPO settings + the task's reward weights)")
    t.add_argument("--name", default="tune", help="study name: folder under --runs (default: tune)")
    t.add_argument("--runs", default="runs", help="runs folder (default: runs)")
    t.add_argument("--trials", type=positive_int(), default=20, help="trials in all (default: 20)")
    t.add_argument("--steps", type=positive_int(10**12), default=100_000, help="env steps per trial (default: 100000)")
    t.add_argument(
        "--eval-every", type=positive_int(10**12), default=25_000, help="env steps between evaluations (pruning points)"
    )
    t.add_argument("--eval-episodes", type=positive_int(), default=32, help="episodes per evaluation (default: 32)")
    t.add_argument(
        "--jobs", type=positive_int(4096), default=1, help="parallel trials (processes, or Ray tasks with --ray)"
    )
    t.add_argument("--ray", action="store_true", help="run the parallel trials as Ray tasks")
    t.add_argument("--ray-address", help="Ray cluster to join (default: start a local one)")
    t.add_argument("--ray-token-file", help="file holding the Ray cluster's token (default: $RAY_AUTH_TOKEN_PATH)")

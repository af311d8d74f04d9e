"""Verbs ``train``, ``eval`` and ``robots``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from embodied_ws.cli.argtypes import positive_int, seed_int
from embodied_ws.cli.robot import add_robot_options
from embodied_ws.core.errors import UserError

if TYPE_CHECKING:
    from embodied_ws.cli import AddVerb
    from embodied_ws.config.schema import RunConfig
    from embodied_ws.sim.core import EnvCore


def _cmd_train(args: argparse.Namespace) -> int:
    from embodied_ws.config.loader import load_config
    from embodied_ws.rl.train import train

    overrides = list(args.set or [])
    if args.robot:
        overrides.append(f"env.robot={args.robot}")
        # a preset names its own robot's end effector; another robot gets its own, auto-detected (reported below)
        if not args.resume and not any(s.partition("=")[0].strip() == "task.ee_body" for s in overrides):
            overrides.append("task.ee_body=")
    if args.task:
        overrides.append(f"env.task={args.task}")
    if args.ray_address:
        overrides.append(f"train.ray.address={args.ray_address}")
    if args.ray_token_file:  # Ray token auth for this process and the Ray processes it starts
        from embodied_ws.rl.ray_cluster import use_token

        use_token(args.ray_token_file)
    run_dir = Path(args.runs) / args.name
    if args.resume:
        saved = run_dir / "config.yaml"
        if not saved.is_file():
            raise UserError("no such run to resume (config.yaml missing)", str(run_dir))
        cfg = load_config(saved, overrides)
    else:
        cfg = load_config(args.config, overrides)
    cfg.env.robot_args += args.robot_arg
    cfg.env.package_paths += [str(Path(p).expanduser().resolve()) for p in args.package_path]
    core = check_setup(cfg)
    from embodied_ws.sim.tasks import TASKS

    # a plugin's entry-point name is recorded as its module:attr: eval, resume, deploy and workers find the same class
    cfg.env.task = TASKS.reference(cfg.env.task)
    if not cfg.task.ee_body and core.robot.ee_body:
        cfg.task.ee_body = core.robot.ee_body  # the run's config.yaml records the choice
        print(
            f"end effector: {core.robot.ee_body} (auto-detected in {core.robot.name}; "
            "choose another with --set task.ee_body=NAME)",
            file=sys.stderr,
        )
    if core.episode_steps > cfg.env.episode_steps:
        cfg.env.episode_steps = core.episode_steps  # recorded too: evaluation and resumes use the same length
        print(
            f"episodes: {core.episode_steps} steps ({core.episode_steps * core.control_dt:.1f} s), time to reach "
            f"the targets at task.approach_speed {cfg.task.approach_speed} m/s and the joints' speeds "
            "(`embodied-ws robot show` prints them)",
            file=sys.stderr,
        )
    from embodied_ws.rl.callbacks import eval_interval

    every = eval_interval(cfg.train.eval_every, cfg.train.eval_episodes, cfg.env.episode_steps)
    if every > cfg.train.eval_every:
        cfg.train.eval_every = every  # recorded too: a resume keeps the same spacing
        print(
            f"evaluation: every {every:,} env steps ({cfg.train.eval_episodes} episodes of {cfg.env.episode_steps} "
            "steps each stay at most half of the training steps between two evaluations)",
            file=sys.stderr,
        )
    summary = train(cfg, args.name, Path(args.runs), resume=args.resume, progress=not args.json)
    brief = {k: summary[k] for k in ("name", "steps", "final_success", "physics_resets", "interrupted")}
    brief["env_steps_per_s"] = round(summary["time"]["env_steps_per_s"], 1)
    if summary.get("data_wait"):
        brief["data_wait_share"] = round(summary["data_wait"]["share"], 3)
    if "ray" in summary:
        brief["actor_restarts"] = summary["ray"]["actor_restarts"]
    brief["report"] = str(run_dir / "report.md")
    brief["policy"] = str(run_dir / "policy")
    print(json.dumps(brief) if args.json else "\n".join(f"{k}: {v}" for k, v in brief.items()))
    return 0


def check_setup(cfg: RunConfig) -> EnvCore:
    """Build the robot, task and DR once so bad names/models fail before any training starts.

    :param cfg: the run configuration
    :returns: the env core built (its robot tells the end effector chosen)
    """
    from embodied_ws.config.loader import load_dr
    from embodied_ws.sim.core import EnvCore

    return EnvCore(cfg, load_dr(cfg.dr), 1, 0)


def _cmd_eval(args: argparse.Namespace) -> int:
    from embodied_ws.rl.evaluate import evaluate_run

    run = Path(args.run)
    run_dir = run if run.is_dir() else Path(args.runs) / args.run
    if args.plant:  # on an in-process stand-in robot (sysid)
        from embodied_ws.randomization.plant import load_plant
        from embodied_ws.sysid.gap import evaluate_on_plant

        metrics = evaluate_on_plant(run_dir, load_plant(args.plant), args.episodes)
        print(json.dumps(metrics) if args.json else "\n".join(f"{k}: {v}" for k, v in metrics.items()))
        return 0
    from embodied_ws.core.outputs import output_folder

    if not (run_dir / "config.yaml").is_file():
        raise UserError("not a run folder (no config.yaml)", str(run_dir))
    with output_folder(run_dir / "eval", "eval", args.overwrite, flag="run"):  # one evaluation writes it at a time
        metrics = evaluate_run(run_dir, args.episodes, video=not args.no_video, seed=args.seed, progress=not args.json)
    print(json.dumps(metrics) if args.json else "\n".join(f"{k}: {v}" for k, v in metrics.items()))
    return 0


def _cmd_robots(args: argparse.Namespace) -> int:
    from embodied_ws.sim.robot import available_robots
    from embodied_ws.sim.tasks import TASKS

    info = {"robots": available_robots(), "tasks": TASKS.names(), "task_plugins": TASKS.plugin_names()}
    if args.json:
        print(json.dumps(info))
        return 0
    plugins = "".join(f", {name} (plugin)" for name in info["task_plugins"])
    print(f"robots: {', '.join(info['robots'])}\ntasks: {', '.join(info['tasks'])}{plugins}")
    return 0


def register(add_verb: AddVerb) -> None:
    """Add ``train``, ``eval`` and ``robots``."""
    t = add_verb(
        "train",
        _cmd_train,
        "Train a PPO policy (MuJoCo in-process by default).",
        "example: embodied-ws train --config reach --name reach1 --set train.total_timesteps=200000",
    )
    t.add_argument("--config", default="reach", help="preset under config/train or a YAML path (default: reach)")
    t.add_argument(
        "--robot",
        help="robot name, or an MJCF/URDF/xacro path (shortcut for --set env.robot=...); its end effector is "
        "auto-detected unless --set task.ee_body=NAME is given",
    )
    add_robot_options(t)
    t.add_argument(
        "--task",
        help="task name, a plugin's entry-point name (group embodied_ws.tasks) or a module:attr path such as "
        "my_pkg.tasks:Lift (shortcut for --set env.task=...)",
    )
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value; repeatable")
    t.add_argument("--name", default="default", help="run name: folder under --runs (default: default)")
    t.add_argument("--runs", default="runs", help="runs folder (default: runs)")
    t.add_argument("--resume", action="store_true", help="continue the run from its latest checkpoint")
    t.add_argument("--ray-address", help="Ray cluster for train.vec_env=ray (default: start a local one)")
    t.add_argument("--ray-token-file", help="file holding the Ray cluster's token (default: $RAY_AUTH_TOKEN_PATH)")

    e = add_verb(
        "eval",
        _cmd_eval,
        "Evaluate a run's exported policy; writes eval/metrics.json and eval/rollout.mp4.",
        "example: embodied-ws eval reach1 --episodes 20\n"
        "         embodied-ws eval reach1 --plant tests/fixtures/plants/hidden.yaml",
    )
    e.add_argument("run", help="run name under --runs, or a run folder")
    e.add_argument("--runs", default="runs")
    e.add_argument("--episodes", type=positive_int(), default=20)
    e.add_argument("--seed", type=seed_int(), default=1234, help="episode i starts from seed + i (default: 1234)")
    e.add_argument("--no-video", action="store_true", help="skip the mp4")
    e.add_argument("--plant", help="evaluate on a stand-in robot with this plant YAML (no video)")
    e.add_argument("--overwrite", action="store_true", help="replace the run's earlier eval/ results")

    add_verb(
        "robots",
        _cmd_robots,
        "List the registered robots and tasks (task plugins too).",
        "example: embodied-ws robots --json",
    )

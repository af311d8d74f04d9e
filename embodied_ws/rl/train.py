"""The training pipeline behind ``embodied-ws train``: envs → SB3 PPO → checkpoints, eval, export, report."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import yaml

from embodied_ws.config.loader import load_dr, to_dict
from embodied_ws.config.schema import RunConfig
from embodied_ws.core.atomic import write_bytes_atomic
from embodied_ws.core.errors import EnvLost, UserError
from embodied_ws.core.gpu import choose_torch_device
from embodied_ws.rl import callbacks as cb
from embodied_ws.rl.checkpoint import latest_checkpoint, load_vecnormalize, read_state, restore_rng
from embodied_ws.rl.vec import VecTimer, load_core_state, make_vec_env
from embodied_ws.sim.urdf import save_generated_model


def resolve_device(device: str, image_policy: bool = False) -> str:
    """``ppo.device`` → a torch device (see :func:`embodied_ws.core.gpu.choose_torch_device`: ``auto`` keeps
    MLP policies on the CPU and puts image policies on CUDA when there is a GPU)."""
    return choose_torch_device(device, image_policy)


def ppo_kwargs(cfg: RunConfig) -> dict[str, Any]:
    """PPO constructor arguments from the ``ppo`` section (shared with ``bench/train_throughput.py``)."""
    p = cfg.ppo
    lr: Any = p.learning_rate
    if p.lr_schedule == "linear":
        from stable_baselines3.common.utils import LinearSchedule

        lr = LinearSchedule(p.learning_rate, 0.0, 1.0)  # SB3 passes the remaining progress 1 → 0
    return {
        "learning_rate": lr,
        "n_steps": p.n_steps,
        "batch_size": p.batch_size,
        "n_epochs": p.n_epochs,
        "gamma": p.gamma,
        "gae_lambda": p.gae_lambda,
        "clip_range": p.clip_range,
        "ent_coef": p.ent_coef,
        "vf_coef": p.vf_coef,
        "max_grad_norm": p.max_grad_norm,
        "policy_kwargs": {"net_arch": list(p.net_arch), "log_std_init": p.log_std_init},
        "device": resolve_device(p.device, cfg.env.camera_obs),
        "seed": cfg.train.seed,
        "verbose": 0,
    }


def make_training_env(cfg: RunConfig, dr: Any) -> tuple[Any, VecTimer]:
    """Training vec env: batched/subproc envs → timer → VecMonitor → VecNormalize (obs only)."""
    from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

    timer = VecTimer(make_vec_env(cfg, dr, cfg.train.n_envs, cfg.train.seed))
    venv: Any = VecMonitor(timer)
    if cfg.train.normalize_obs:
        venv = VecNormalize(venv, norm_obs=True, norm_reward=False)
    return venv, timer


def save_run_config(run_dir: Path, cfg: RunConfig) -> None:
    """Write the resolved ``config.yaml`` (atomically)."""
    write_bytes_atomic(run_dir / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False).encode())


def train(
    cfg: RunConfig,
    name: str,
    runs_root: Path = Path("runs"),
    resume: bool = False,
    progress: bool = True,
    extra_callbacks: list[Any] | None = None,
) -> dict[str, Any]:
    """Train PPO as configured; returns the run summary (also in ``runs/<name>/summary.json``).

    :param cfg: resolved run configuration
    :param name: run name (folder under ``runs_root``)
    :param resume: continue from the run's latest checkpoint
    :param progress: show a rich progress bar
    :param extra_callbacks: more SB3 callbacks (the trainer node's progress and service hooks)
    """
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import configure

    run_dir = runs_root / name
    ckpt_root = run_dir / "checkpoints"
    ckpt = latest_checkpoint(ckpt_root) if resume else None
    if resume and ckpt is None:
        raise UserError("no complete checkpoint to resume from", str(ckpt_root))
    if not resume and latest_checkpoint(ckpt_root) is not None:
        raise UserError("run already exists; pass --resume to continue it or choose another --name", str(run_dir))
    run_dir.mkdir(parents=True, exist_ok=True)
    save_run_config(run_dir, cfg)
    save_generated_model(run_dir, cfg)
    dr = load_dr(cfg.dr)
    if resolve_device(cfg.ppo.device, cfg.env.camera_obs) == "cpu":
        torch.set_num_threads(1)  # the sim threads own the cores; a 64×64 MLP gains nothing from more

    venv, timer = make_training_env(cfg, dr)
    # evaluation runs in-process (the ROS simulator serves the training env only)
    eval_kind = "dummy" if cfg.train.vec_env in ("subproc", "dummy") else "mujoco"
    eval_env = (
        make_vec_env(cfg, dr, cfg.train.eval_episodes, cfg.train.seed + 10_000, eval_kind)
        if cfg.train.eval_every
        else None
    )
    state: dict[str, Any] = {}
    if ckpt is not None:
        state = read_state(ckpt)
        print(f"resuming from step {state['num_timesteps']} ({ckpt.name})", file=sys.stderr)
        venv = load_vecnormalize(ckpt, venv.venv if hasattr(venv, "obs_rms") else venv)
        model = PPO.load(ckpt / "model.zip", env=venv, device=resolve_device(cfg.ppo.device, cfg.env.camera_obs))
        load_core_state(venv, state["env"])
        restore_rng(ckpt)
    else:
        model = PPO("MlpPolicy", venv, **ppo_kwargs(cfg))
    model.set_logger(configure(str(run_dir / "tb"), ["tensorboard"]))

    evals = (
        cb.EvalSuccess(eval_env, cfg.train.eval_every, cfg.train.target_success, cfg.train.eval_episodes)
        if eval_env
        else None
    )
    bar = cb.RichProgress(cfg.train.total_timesteps, evals, enabled=progress)
    if evals:
        evals.history = list(state.get("evals", []))
    bar.episodes = [tuple(e) for e in state.get("episodes", [])]
    bar.physics_resets = int(state.get("physics_resets", 0))
    envs_for_curriculum = [venv] + ([eval_env] if eval_env else [])
    curriculum = cb.Curriculum(cfg.train.curriculum_steps, envs_for_curriculum)

    def extra() -> dict[str, Any]:
        return {
            "evals": evals.history if evals else [],
            "episodes": bar.episodes,
            "physics_resets": bar.physics_resets,
            "curriculum_scale": curriculum.scale,
        }

    checkpoints = cb.CheckpointEvery(ckpt_root, cfg.train.checkpoint_every, cfg.train.keep_checkpoints, extra)
    times = cb.TimeBreakdown(timer)
    callbacks = [times, curriculum, checkpoints, bar] + ([evals] if evals else [])
    for extra_cb in extra_callbacks or []:
        if hasattr(extra_cb, "attach"):
            extra_cb.attach(checkpoints)
    remaining = cfg.train.total_timesteps - int(model.num_timesteps)
    interrupted: str | bool = False
    try:
        if remaining > 0:
            model.learn(remaining, callback=[*callbacks, *(extra_callbacks or [])], reset_num_timesteps=False)
    except KeyboardInterrupt:
        interrupted = "keyboard interrupt"
    except EnvLost as exc:
        bar.close()
        path = checkpoints.save()
        venv.close()
        if eval_env:
            eval_env.close()
        raise EnvLost(
            f"{exc.what}; checkpoint saved at {path} (step {model.num_timesteps}); "
            "resume with --resume once the simulator is back",
            exc.topic,
        ) from None
    finally:
        bar.close()
    timing = times.summary(
        int(model.num_timesteps) - (cfg.train.total_timesteps - remaining),
        {"eval": evals.seconds if evals else 0.0, "checkpoint": checkpoints.seconds},
    )
    final = None
    if evals and cfg.train.final_eval_episodes:
        final_env = make_vec_env(cfg, dr, cfg.train.final_eval_episodes, cfg.train.seed + 20_000, eval_kind)
        final_env.env_method("set_dr_scale", 1.0)
        final = evals.evaluate(final_env, cfg.train.final_eval_episodes, record=False)
        final_env.close()
    checkpoints.save()
    from embodied_ws.rl.export import export_policy
    from embodied_ws.rl.report import hardware_summary, write_report

    core = venv.unwrapped.core if hasattr(venv.unwrapped, "core") else _single_core(cfg, dr)
    export_policy(run_dir / "policy", model, venv, core)
    summary = {
        "name": name,
        "robot": core.robot.name,
        "task": cfg.env.task,
        "dr": bool(dr.enabled and dr.params),
        "steps": int(model.num_timesteps),
        "interrupted": interrupted,
        "final_success": final["success_rate"] if final else None,
        "final_eval": final,
        "target_success": cfg.train.target_success,
        "physics_resets": bar.physics_resets,
        "time": timing,
        "hardware": hardware_summary(
            str(model.device),
            sum(p.numel() for p in model.policy.parameters()),
            getattr(venv.unwrapped, "nthread", os.cpu_count() or 1),
        ),
        "evals": evals.history if evals else [],
        "config": to_dict(cfg),
    }
    write_report(run_dir, summary, summary["evals"], bar.episodes)
    venv.close()
    if eval_env:
        eval_env.close()
    return summary


def _single_core(cfg: RunConfig, dr: Any) -> Any:
    from embodied_ws.sim.core import EnvCore

    return EnvCore(cfg, dr, 1, 0)

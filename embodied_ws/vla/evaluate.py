"""Evaluate a fine-tuned VLA in sim through the same task code: success rate and an mp4 of the first episodes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.errors import UserError
from embodied_ws.data.dataset import IMAGE_PREFIX
from embodied_ws.policy.evaluation import write_eval


def policy_folder(run_dir: Path) -> Path:
    """The run's servable policy: ``adapter/`` for LoRA runs, ``policy/`` for full fine-tunes."""
    for name in ("adapter", "policy"):
        if (run_dir / name / "config.json").is_file():
            return run_dir / name
    raise UserError("no fine-tuned policy in the run (adapter/ or policy/ missing)", str(run_dir))


def evaluate_vla(
    run_dir: Path, episodes: int = 10, video: bool = True, seed: int = 4321, progress: bool = True, device: str = "cpu"
) -> dict[str, Any]:
    """Roll out the run's policy for ``episodes`` episodes (DR as in the run's config); writes ``eval/``.

    The camera image is rendered from ``env.camera`` (a ``record-demos`` dataset's config names the one it
    filmed with), at the size the dataset recorded; the instruction comes from the task (``Task.instruction``);
    an episode succeeds by the task's own success test (the env's ``is_success`` at its last step). Actions
    are the dataset's joint position commands (a gripper: its leader's set-point, :mod:`embodied_ws.data.commands`).
    """
    from embodied_ws.core.progress import track
    from embodied_ws.data.commands import env_action
    from embodied_ws.data.record import instruction_of
    from embodied_ws.policy.rollout import Step, rollout
    from embodied_ws.sim.env import RobotEnv
    from embodied_ws.vla.runner import VLARunner

    cfg = load_config(run_dir / "config.yaml")
    runner = VLARunner(policy_folder(run_dir), device=device)
    cam_key = next(iter(runner.config.image_features))
    c, h, w = runner.config.image_features[cam_key].shape
    camera = cam_key[len(IMAGE_PREFIX) :]
    cfg = copy.deepcopy(cfg)
    cfg.env.action_mode = "absolute"
    cfg.env.render_size = [int(h), int(w)]
    env = RobotEnv(cfg, load_dr(cfg.dr), render_mode="rgb_array", seed=seed)
    core, robot = env.core, env.core.robot
    frames: list[np.ndarray] = []
    successes = []

    def observe(env: Any, _obs: Any) -> dict[str, Any]:
        return {
            "state": env.data.qpos[robot.qpos_idx],
            "images": {camera: env.render()},
            "instruction": instruction_of(env),
        }

    def to_env(command: np.ndarray) -> np.ndarray:
        return env_action(core, command)

    for ep in track(episodes, "eval", "episodes", enabled=progress):
        filmed = video and ep < 3

        def film(step: Step, filmed: bool = filmed) -> None:
            if filmed:
                frames.append(step.observation["images"][camera])  # what the policy saw

        episode = rollout(
            env, runner, seed + ep, observe=observe, to_env=to_env, on_step=film, max_steps=core.episode_steps
        )
        successes.append(episode.success)
    metrics: dict[str, Any] = {
        "episodes": episodes,
        "success_rate": float(np.mean(successes)) if successes else 0.0,
        "task": cfg.env.task,
        "instruction": instruction_of(env),
    }
    write_eval(run_dir, metrics, frames, env.metadata["render_fps"])
    env.close()
    return metrics

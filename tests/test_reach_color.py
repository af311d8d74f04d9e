"""reach_color: a language-conditioned task (the instruction names the ball), and its scripted IK expert."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import train_cmd

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.data.expert import ReachExpert
from embodied_ws.sim.env import RobotEnv
from embodied_ws.sim.tasks import TASKS
from embodied_ws.sim.tasks.reach_color import COLORS, MIN_SEPARATION


def _env(dr: str = "default", **sets: str) -> RobotEnv:
    cfg = load_config("vla", [f"dr={dr}", *(f"{k}={v}" for k, v in sets.items())])
    return RobotEnv(cfg, load_dr(cfg.dr), seed=0)


def test_registered_and_goal_names_one_separated_ball() -> None:
    assert "reach_color" in TASKS
    env = _env()
    task = env.core.task
    seen = set()
    for seed in range(30):
        obs, _ = env.reset(seed=seed)
        goal = env.core.goal[0]
        pos, onehot = task.split_goal(goal)
        assert onehot.sum() == 1.0
        d = np.linalg.norm(pos[:, None] - pos[None], axis=-1) + np.eye(len(COLORS))
        assert d.min() >= MIN_SEPARATION
        color = task.color_of(goal)
        seen.add(color)
        assert task.instruction(goal) == f"touch the {color} ball"
        assert obs.shape == (task.obs_dim,)
        named = obs[task.nj * 2 + 3 + 9 : task.nj * 2 + 3 + 12]
        assert np.allclose(named, onehot, atol=0.05)  # obs noise (DR) is small
        # every ball is drawn where the goal says (the camera sees all of them)
        for i, c in enumerate(COLORS):
            bid = env.model.body(f"target_{c}").mocapid[0]
            assert np.allclose(env.data.mocap_pos[bid], pos[i])
    assert seen == set(COLORS)


def test_success_only_at_the_named_ball() -> None:
    env = _env(dr="none")
    env.reset(seed=3)
    task, goal = env.core.task, env.core.goal[0]
    pos, onehot = task.split_goal(goal)
    other = int(np.flatnonzero(onehot == 0)[0])
    q, v = env.data.qpos[None], env.data.qvel[None]
    sensor = env.data.sensordata[None].copy()
    a = np.zeros((1, env.core.robot.nu))
    sensor[0, env.core.robot.ee_sensor_idx] = task.named_target(goal)
    assert task.evaluate(q, v, sensor, goal[None], a)[1][0]
    sensor[0, env.core.robot.ee_sensor_idx] = pos[other]
    assert not task.evaluate(q, v, sensor, goal[None], a)[1][0]


def test_scripted_expert_succeeds_95_percent_with_dr() -> None:
    env = _env(dr="default")
    expert = ReachExpert(env)
    n, wins = 60, 0
    for ep in range(n):
        obs, _ = env.reset(seed=1000 + ep)
        expert.reset()
        info = {}
        for _ in range(env.cfg.env.episode_steps):
            obs, _, term, trunc, info = env.step(expert.act(obs))
            if term or trunc:
                break
        wins += bool(info["is_success"])
    assert wins / n >= 0.95, wins / n


@pytest.mark.slow
def test_train_cli_runs_reach_color(tmp_path: Path) -> None:
    import json
    import subprocess

    sets = [
        "env.task=reach_color",
        "train.total_timesteps=512",
        "train.n_envs=2",
        "ppo.n_steps=128",
        "ppo.batch_size=64",
        "train.eval_every=0",
        "train.checkpoint_every=0",
        "train.final_eval_episodes=2",
    ]
    proc = subprocess.run(train_cmd(tmp_path, "rc", sets), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["steps"] >= 512
    meta = json.loads((tmp_path / "rc" / "policy" / "policy.json").read_text())
    assert meta["task"] == "reach_color" and "named/red" in meta["observation"]["names"]

"""The training pipeline end to end: learning, checkpoints, export, kill -9 + resume, eval."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import train_cmd

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.policy.exported import ExportedPolicy
from embodied_ws.rl.checkpoint import latest_checkpoint, read_state
from embodied_ws.rl.train import train

pytestmark = pytest.mark.slow  # real PPO runs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One short PPO run on the default reach task, shared by the tests below."""
    runs = tmp_path_factory.mktemp("runs")
    cfg = load_config(
        "reach",
        [
            "dr=none",
            "train.total_timesteps=160000",
            "train.eval_every=20000",
            "train.eval_episodes=64",
            "train.checkpoint_every=40000",
            "train.target_success=null",
            "train.curriculum_steps=0",
        ],
    )
    summary = train(cfg, "short", runs, progress=False)
    return runs / "short", summary


def test_short_ppo_run_improves_reach_success(short_run: tuple[Path, dict]) -> None:
    _, summary = short_run
    evals = summary["evals"]
    first, last = evals[0], evals[-1]
    print(
        f"reach success {first['success_rate']:.2f} at {first['step']} -> {last['success_rate']:.2f} at {last['step']}"
    )
    assert last["success_rate"] >= first["success_rate"] + 0.15
    assert last["mean_return"] > first["mean_return"]


def test_run_folder_has_report_curves_tensorboard_and_policy(short_run: tuple[Path, dict]) -> None:
    run, summary = short_run
    for f in (
        "config.yaml",
        "report.md",
        "summary.json",
        "eval_success.png",
        "train_return.png",
        "policy/policy.safetensors",
        "policy/policy.json",
    ):
        assert (run / f).is_file(), f
    assert list((run / "tb").rglob("events.out.tfevents*"))
    report = (run / "report.md").read_text()
    assert "PPO update" in report and "env-steps/s" in report
    t = summary["time"]
    assert t["env_steps_per_s"] > 0 and 0 < t["sampling_s"] < t["total_s"]


def test_checkpoint_round_trip_restores_policy_and_step(short_run: tuple[Path, dict]) -> None:
    from stable_baselines3 import PPO

    run, summary = short_run
    ckpt = latest_checkpoint(run / "checkpoints")
    assert ckpt is not None and read_state(ckpt)["num_timesteps"] == summary["steps"]
    model = PPO.load(ckpt / "model.zip", device="cpu")
    assert model.num_timesteps == summary["steps"]
    again = PPO.load(ckpt / "model.zip", device="cpu")
    obs = np.random.default_rng(0).normal(size=(16, model.observation_space.shape[0])).astype(np.float32)
    np.testing.assert_array_equal(model.predict(obs, deterministic=True)[0], again.predict(obs, deterministic=True)[0])
    # the optimizer state came back too
    assert model.policy.optimizer.state_dict()["state"]


def test_exported_policy_matches_sb3_without_pickle(short_run: tuple[Path, dict]) -> None:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    from embodied_ws.sim.vec_env import MujocoVecEnv

    run, _ = short_run
    ckpt = latest_checkpoint(run / "checkpoints")
    model = PPO.load(ckpt / "model.zip", device="cpu")
    cfg = load_config(run / "config.yaml")
    norm = VecNormalize.load(str(ckpt / "vecnormalize.pkl"), MujocoVecEnv(cfg, load_dr("none"), 2, 0))
    policy = ExportedPolicy(run / "policy")
    obs = np.random.default_rng(1).normal(size=(32, policy.obs_size)).astype(np.float32)
    expected = model.predict(norm.normalize_obs(obs), deterministic=True)[0]
    np.testing.assert_allclose(policy.act(obs), expected, atol=1e-5)
    meta = json.loads((run / "policy" / "policy.json").read_text())
    assert meta["joints"]["names"] == ["base_yaw", "shoulder", "elbow"]
    assert meta["control_rate_hz"] == pytest.approx(25.0)
    assert len(meta["observation"]["names"]) == policy.obs_size


def test_eval_writes_metrics_and_video(short_run: tuple[Path, dict], cli) -> None:
    run, _ = short_run
    proc = cli("eval", str(run), "--episodes", "4", "--json")
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads(proc.stdout)
    assert 0.0 <= metrics["success_rate"] <= 1.0 and metrics["episodes"] == 4
    saved = json.loads((run / "eval" / "metrics.json").read_text())
    assert saved["mean_return"] == metrics["mean_return"]
    video = run / "eval" / "rollout.mp4"
    assert video.stat().st_size > 10_000
    import imageio.v3 as iio

    frames = iio.imread(video)
    assert frames.shape[0] == 3 * 50 and frames.shape[-1] == 3


CRASH_SETS = ["train.total_timesteps=40960", "train.checkpoint_every=4096", "train.eval_every=0", "train.n_envs=8"]


def _train_cmd(runs: Path, *extra: str) -> list[str]:
    return train_cmd(runs, "crash", CRASH_SETS, *extra)


def test_kill_9_then_resume_continues_from_last_checkpoint(tmp_path: Path) -> None:
    proc = subprocess.Popen(_train_cmd(tmp_path), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ckpts = tmp_path / "crash" / "checkpoints"
    deadline = time.time() + 120
    while time.time() < deadline:
        ck = latest_checkpoint(ckpts)
        if ck is not None and read_state(ck)["num_timesteps"] >= 8192:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    # every checkpoint left behind is complete and loadable: no corrupt file
    from stable_baselines3 import PPO

    remaining = sorted(p for p in ckpts.glob("step_*") if p.is_dir())
    assert remaining
    for ck in remaining:
        assert PPO.load(ck / "model.zip", device="cpu").num_timesteps == read_state(ck)["num_timesteps"]
    last = read_state(latest_checkpoint(ckpts))["num_timesteps"]
    assert last < 40960
    resumed = subprocess.run(_train_cmd(tmp_path, "--resume"), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming from step {last}" in resumed.stderr
    out = json.loads(resumed.stdout)
    assert out["steps"] >= 40960


def test_foreign_mjcf_trains_by_path(cli, reacher_xml: str, tmp_path: Path) -> None:
    sets = [
        "task.ee_body=",
        "task.target_min_z=null",
        "train.total_timesteps=4096",
        "train.n_envs=8",
        "train.eval_every=2048",
    ]
    args = [a for s in sets for a in ("--set", s)]
    proc = cli(
        "train",
        "--robot",
        reacher_xml,
        "--task",
        "reach",
        "--name",
        "reacher",
        "--runs",
        str(tmp_path),
        "--json",
        *args,
    )
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((tmp_path / "reacher" / "policy" / "policy.json").read_text())
    assert meta["ee_body"] == "fingertip" and meta["joints"]["names"] == ["joint0", "joint1"]


def test_time_budget_ends_learning_annealed_and_resume_counts_the_time_spent(tmp_path: Path) -> None:
    """``train.max_minutes``: learning ends on the clock (not the step budget), the learning rate has decayed to
    0 with the time spent, the time spent is saved, and a resumed run does not get the budget again."""
    from embodied_ws.rl.run import TrainingRun

    sets = ["dr=none", "train.total_timesteps=10000000", "train.max_minutes=0.05", "train.eval_every=0"]
    sets += ["train.checkpoint_every=0", "train.final_eval_episodes=0"]
    cfg = load_config("reach", sets)
    summary = train(cfg, "timed", tmp_path, progress=False)
    assert summary["stopped"] == "time budget (0.05 min)" and 0 < summary["steps"] < 10_000_000
    assert 3.0 <= summary["time"]["total_s"] < 30.0
    state = read_state(latest_checkpoint(tmp_path / "timed" / "checkpoints"))
    assert state["learn_seconds"] >= 3.0
    with TrainingRun(cfg, "timed", tmp_path, resume=True, progress=False) as run:
        schedule = run.model.learning_rate
        assert schedule.time_fraction == 1.0 and schedule(1.0) == 0.0  # annealed by the clock, saved with the model
        steps = run.model.num_timesteps
        run.learn()
        assert run.stopped.startswith("time budget") and run.model.num_timesteps - steps <= cfg.train.n_envs


def test_reward_normalization_scales_the_learner_rewards_only_when_asked() -> None:
    """``train.normalize_reward`` divides the rewards PPO learns from by the running std of the discounted
    return at ``ppo.gamma``; without it the learner sees the task's raw rewards."""
    from embodied_ws.rl.ppo import make_training_env

    def rollout(flag: str) -> tuple[object, np.ndarray, np.ndarray]:
        cfg = load_config("reach", ["dr=none", "train.n_envs=4", "ppo.gamma=0.9", f"train.normalize_reward={flag}"])
        venv, _ = make_training_env(cfg, load_dr(cfg.dr))
        venv.seed(0)
        venv.reset()
        rng = np.random.default_rng(0)
        seen, raw = [], []
        for _ in range(200):
            _, reward, _, _ = venv.step(rng.uniform(-1, 1, (4, *venv.action_space.shape)).astype(np.float32))
            seen.append(reward)
            raw.append(venv.get_original_reward())
        venv.close()
        return venv, np.concatenate(seen), np.concatenate(raw)

    venv, seen, raw = rollout("true")
    assert venv.norm_reward and venv.gamma == 0.9 and venv.ret_rms.count > 1
    scale = np.sqrt(venv.ret_rms.var + venv.epsilon)
    assert abs(scale - 1.0) > 0.05  # the test means something only if the return's std is not already 1
    assert not np.allclose(seen, raw)
    venv, seen, raw = rollout("false")
    assert not venv.norm_reward
    np.testing.assert_array_equal(seen, raw)

"""The Ray backend on a local 2-CPU cluster: batched actors, training, a killed actor, checkpoint/resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.errors import UserError

pytestmark = pytest.mark.slow

SETS = [
    "dr=default",
    "train.vec_env=ray",
    "train.n_envs=4",
    "train.ray.actors=2",
    "ppo.n_steps=32",
    "ppo.batch_size=64",
    "ppo.n_epochs=2",
    "train.eval_every=0",
    "train.final_eval_episodes=0",
    "train.checkpoint_every=256",
    "train.curriculum_steps=0",
]


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster with 2 CPUs for this module, shut down afterwards."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def _cfg(*extra: str):
    return load_config("reach", [*SETS, *extra])


def test_actors_step_batches_and_implement_env_hooks(ray_cluster) -> None:
    from embodied_ws.sim.hooks import EnvHooks

    from embodied_ws.rl.ray_vec import RayVecEnv

    cfg = _cfg("train.n_envs=5")
    venv = RayVecEnv(cfg, load_dr(cfg.dr), 5, seed=3)
    try:
        assert isinstance(venv, EnvHooks)
        assert venv.sizes == [3, 2]
        obs = venv.reset()
        assert obs.shape == (5, venv.observation_space.shape[0])
        trips = venv.round_trips
        for _ in range(60):  # past the 50-step episode end: auto-reset inside the actors
            obs, rew, done, infos = venv.step(np.zeros((5, venv.action_space.shape[0])))
        assert venv.round_trips - trips == 60, "one round trip per control step, whatever the env count"
        assert obs.shape == (5, venv.observation_space.shape[0]) and rew.shape == (5,) and len(infos) == 5
        assert venv.env_method("set_dr_scale", 0.5, indices=[0, 4]) == [None, None]
        assert venv.env_core().obs_dim == obs.shape[1]
    finally:
        venv.close()


def test_env_state_restores_into_fresh_actors(ray_cluster) -> None:
    """The saved RNG/DR state of every actor decides the next episodes' goals and DR draws."""
    from embodied_ws.rl.ray_vec import RayVecEnv

    cfg = _cfg()
    dr = load_dr(cfg.dr)
    a = RayVecEnv(cfg, dr, 4, seed=0)
    b = RayVecEnv(cfg, dr, 4, seed=99)
    try:
        a.reset()
        for _ in range(10):
            a.step(np.zeros((4, a.action_space.shape[0])))
        state = json.loads(json.dumps(a.get_env_state()))  # as checkpoints store it
        expected = a.reset()
        assert not np.allclose(b.reset(), expected), "different seeds draw different episodes"
        b.set_env_state(state, "test")
        np.testing.assert_allclose(b.reset(), expected)
        with pytest.raises(UserError, match=r"train\.ray\.actors"):
            state["streams"]["sizes"] = [1, 3]
            b.set_env_state(state, "ckpt")
    finally:
        a.close()
        b.close()


def test_training_survives_a_killed_actor_and_the_report_counts_it(ray_cluster, tmp_path: Path) -> None:
    from stable_baselines3.common.callbacks import BaseCallback

    from embodied_ws.rl.train import train

    class KillOne(BaseCallback):
        """Kill sampler actor 0 once, mid-run."""

        killed = False

        def _on_step(self) -> bool:
            if not self.killed and self.num_timesteps >= 300:
                ray_cluster.kill(self.model.get_env().unwrapped.actors[0], no_restart=True)
                self.killed = True
            return True

    cfg = _cfg("train.total_timesteps=768")
    killer = KillOne()
    summary = train(cfg, "ray-kill", tmp_path, progress=False, extra_callbacks=[killer])
    assert killer.killed
    assert summary["steps"] >= 768
    assert summary["ray"]["actor_restarts"] == 1
    report = (tmp_path / "ray-kill" / "report.md").read_text()
    assert "sampler actors replaced: 1" in report
    assert "data wait" in report


def test_resume_restores_every_actors_env_state(ray_cluster, tmp_path: Path) -> None:
    from stable_baselines3.common.callbacks import BaseCallback

    from embodied_ws.rl.checkpoint import latest_checkpoint, read_state
    from embodied_ws.rl.train import train

    train(_cfg("train.total_timesteps=256"), "ray-resume", tmp_path, progress=False)
    saved = read_state(latest_checkpoint(tmp_path / "ray-resume" / "checkpoints"))["env"]
    assert saved["layout"] == "ray" and len(saved["streams"]["actors"]) == 2

    class Probe(BaseCallback):
        """Read the actors' env state as training resumes (before any new episode)."""

        state = None

        def _on_training_start(self) -> None:
            self.state = self.model.get_env().unwrapped.get_env_state()

        def _on_step(self) -> bool:
            return True

    probe = Probe()
    summary = train(_cfg("train.total_timesteps=512"), "ray-resume", tmp_path, resume=True, progress=False,
                    extra_callbacks=[probe])  # fmt: skip
    assert summary["steps"] >= 512
    # resuming restores the saved streams, then SB3 resets the envs once: replay that on fresh actors
    from embodied_ws.rl.ray_vec import RayVecEnv

    cfg = _cfg()
    replay = RayVecEnv(cfg, load_dr(cfg.dr), 4, seed=12345)
    try:
        replay.set_env_state(saved, "checkpoint")
        replay.reset()
        expected = replay.get_env_state()["streams"]["actors"]
    finally:
        replay.close()
    assert json.loads(json.dumps(probe.state["streams"]["actors"])) == json.loads(json.dumps(expected))

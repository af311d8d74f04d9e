"""``embodied-ws plan`` (probe and memory arithmetic) and ``embodied-ws tune`` (Optuna, end to end)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import run_cli

GIB = 2**30


def _fresh_per_core(cfg_name: str, n_envs: int, seconds: float = 1.0) -> float:
    """Steps per CPU-second of our batched env on one thread, measured here independently of ``plan``."""
    from embodied_ws.config.loader import load_config, load_dr
    from embodied_ws.sim.vec_env import MujocoVecEnv

    cfg = load_config(cfg_name)
    env = MujocoVecEnv(cfg, load_dr(cfg.dr), n_envs, 123, nthread=1)
    env.reset()
    rng = np.random.default_rng(1)
    for _ in range(5):
        env.step(rng.uniform(-1, 1, (n_envs, env.action_space.shape[0])))
    steps, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        env.step(rng.uniform(-1, 1, (n_envs, env.action_space.shape[0])))
        steps += n_envs
    rate = steps / (time.process_time() - t0)
    env.close()
    return rate


@pytest.mark.slow
def test_plan_json_matches_a_fresh_measurement_and_hand_computed_memory() -> None:
    out = run_cli("plan", "--config", "reach", "--steps-per-s", "50000", "--learner-steps-per-s", "20000", "--json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    best_batch = max(plan["probe_steps_per_s_by_batch"], key=lambda k: plan["probe_steps_per_s_by_batch"][k])
    # the best of three 1-s measurements, as timeit takes its best: one alone read 6.2 k steps/s against plan's 9.8 k
    # while the other xdist worker loaded the cores (2026-12-08)
    fresh = max(_fresh_per_core("reach", int(best_batch)) for _ in range(3))
    assert plan["per_core_steps_per_s"] == pytest.approx(fresh, rel=0.25), (plan, fresh)
    assert plan["sampler_cores"] == -(-50000 // plan["per_core_steps_per_s"])

    g = plan["gpu_memory_gib"]
    # LLM assistant: DeepSeek-R1-Distill-Qwen-32B Q4_K_M (4.85 bits/weight) × 1.2 + f16 KV cache of 8192 tokens
    weights = 32.8e9 * 4.85 / 8 * 1.2
    kv = 2 * 64 * 8 * 128 * 8192 * 2
    assert g["llm_assistant"] == pytest.approx((weights + kv) / GIB, rel=1e-6)
    assert 23.0 < g["llm_assistant"] < 25.0
    # a 450 M-parameter VLA: full fine-tune 16 B/param; LoRA frozen bf16 + 1 % trainable at 16 B/param; × 1.2
    assert g["vla_full"] == pytest.approx(450e6 * 16 * 1.2 / GIB, rel=1e-6)
    assert g["vla_lora"] == pytest.approx((450e6 * 2 + 0.01 * 450e6 * 16) * 1.2 / GIB, rel=1e-6)
    # the default policy: SB3 MlpPolicy, separate [64, 64] policy and value nets, 3 actions for arm3
    from embodied_ws.config.loader import load_config, load_dr
    from embodied_ws.sim.env import RobotEnv

    env = RobotEnv(load_config("reach"), load_dr("none"), seed=0)
    obs, act = env.observation_space.shape[0], env.action_space.shape[0]
    mlp = obs * 64 + 64 + 64 * 64 + 64
    params = 2 * mlp + (64 * act + act) + (64 + 1) + act
    assert plan["ppo_policy_parameters"] == params
    minibatch = 4 * 256 * (obs + act + 4 + 2 * (64 + 64))
    assert g["ppo_policy"] == pytest.approx((16 * params + minibatch) * 1.2 / GIB, rel=1e-9)

    dw = plan["data_wait"]
    sampler = plan["sampler_cores"] * plan["per_core_steps_per_s"]
    assert dw["predicted_share"] == pytest.approx(20000 / (sampler + 20000), rel=1e-3)
    assert dw["risk"] == ("high" if dw["predicted_share"] > 0.2 else "low")


@pytest.mark.slow
def test_plan_text_and_bad_flags() -> None:
    out = run_cli(
        "plan", "--config", "reach", "--steps-per-s", "1000", "--probe-seconds", "0.1", "--vla-params", "3.3B"
    )
    assert out.returncode == 0, out.stderr
    assert "sampler core" in out.stdout and "VLA (3,300 M)" in out.stdout
    bad = run_cli("plan", "--steps-per-s", "1000", "--vla-params", "lots")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("error: --vla-params: expected a positive parameter count")


SPACE = {
    "ppo.learning_rate": {"low": "1e-4", "high": 3e-3, "log": True},
    "task.success_bonus": {"low": 0.0, "high": 1.0},
    "ppo.n_epochs": {"low": 2, "high": 4, "int": True},
}


@pytest.mark.slow
def test_tune_end_to_end_writes_a_config_train_accepts(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    sets = ["train.n_envs=4", "dr=none", "ppo.n_steps=64", "ppo.batch_size=128"]
    args = [a for s in sets for a in ("--set", s)]
    out = run_cli(
        "tune", "--config", "reach", *args, "--space", str(space), "--name", "t1", "--runs", str(tmp_path),
        "--trials", "3", "--steps", "512", "--eval-every", "256", "--eval-episodes", "4", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout)
    assert len(res["trials"]) == 3 and {t["state"] for t in res["trials"]} <= {"COMPLETE", "PRUNED"}
    assert all(t["last_step"] for t in res["trials"]), "every trial reports intermediate evaluations"
    assert Path(res["importance_png"]).stat().st_size > 1000
    best = yaml.safe_load(Path(res["config"]).read_text())
    assert best["ppo"]["learning_rate"] == pytest.approx(res["best_params"]["ppo.learning_rate"])
    assert best["task"]["success_bonus"] == pytest.approx(res["best_params"]["task.success_bonus"])
    assert best["train"]["n_envs"] == 4
    train = run_cli(
        "train", "--config", res["config"], "--name", "from-tune", "--runs", str(tmp_path), "--json",
        "--set", "train.total_timesteps=256", "--set", "train.eval_every=0", "--set", "train.final_eval_episodes=0",
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-2000:]
    assert json.loads(train.stdout)["steps"] >= 256


@pytest.mark.parametrize(
    "space,message",
    [
        ({"ppo.learning_rate": {"low": 1e-3, "high": 1e-4}}, "low must be < high"),
        ({"ppo.nope": {"low": 0.0, "high": 1.0}}, "unknown key 'nope'"),
        ({"ppo.learning_rate": {"low": 0.0, "high": 1.0, "log": True}}, "a log range needs low > 0"),
        ({"ppo.n_steps": {"choices": []}}, "choices must be a non-empty list"),
        ({"ppo.gamma": {"lo": 0.9, "high": 0.99}}, "unknown field(s) ['lo']"),
        ({"ppo.n_steps": {"low": -8, "high": 64, "int": True}}, "out of range"),
        ([1, 2], "a search space is a non-empty mapping"),
    ],
)
def test_bad_search_space_is_one_line_exit_2(tmp_path: Path, space: object, message: str) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    out = run_cli("tune", "--space", str(path), "--name", "bad", "--runs", str(tmp_path), "--trials", "1")
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith(f"error: {path}"), out.stderr
    assert message in out.stderr


def test_exponent_floats_that_yaml_reads_as_text_are_numbers() -> None:
    """PyYAML (YAML 1.1) reads ``3e-4`` as a string: a float field takes it as the number it means."""
    from embodied_ws.config.loader import load_config
    from embodied_ws.rl.tune import load_space

    cfg = load_config("reach", ["ppo.learning_rate=3e-4", "ppo.ent_coef=1E-5"])
    assert (cfg.ppo.learning_rate, cfg.ppo.ent_coef) == (3e-4, 1e-5)
    assert {p.key for p in load_space(None, "reach")} >= {"ppo.learning_rate", "ppo.ent_coef"}

"""``embodied-ws plan``: what hardware a job needs, from a short probe on this machine plus memory arithmetic.

- **Sampler**: per-core env throughput of this robot/task, measured by stepping our batched MuJoCo env
  on one thread for a fraction of a second per batch size (steps per CPU-second, so other processes on a
  busy machine do not skew it); the best batch size is the envs per core, and the target rate divided by
  the per-core rate is the sampler cores.
- **GPU memory** (GiB = 2^30 bytes), by :mod:`embodied_ws.core.memory` (its constants and formulas, each
  figure × 1.2 runtime overhead): PPO policy trained with Adam plus one minibatch; a VLA fully fine-tuned or
  with LoRA; the LLM assistant (weights plus the KV cache). Activations of a VLA depend on batch and image
  count and come on top.
- **Data wait**: the share of learner time waiting for samples at a learner speed, by the data-wait rule.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from embodied_ws.core.errors import UserError
from embodied_ws.core.memory import (
    CUDA_CONTEXT_BYTES,
    GIB,
    OVERHEAD,
    R1_QWEN_32B_Q4,
    llm_memory_bytes,
    ppo_memory_bytes,
    vla_memory_bytes,
)
from embodied_ws.rl.datawait import THRESHOLD, data_wait_rule, predicted_share

if TYPE_CHECKING:
    from embodied_ws.config.schema import RunConfig
    from embodied_ws.randomization.spec import DRSpec

#: batch sizes tried by the probe (envs stepped together on one core)
PROBE_BATCHES = (1, 8, 32)
#: a batch within this share of the best throughput counts as saturating the core
SATURATION = 0.9


def probe_batch(cfg: RunConfig, dr: DRSpec, n_envs: int, seconds: float, seed: int = 0) -> float:
    """Env steps per CPU-second of a batch of ``n_envs`` stepped on one thread (random actions).

    :param seconds: CPU time to measure for (after a short warm-up)
    """
    from embodied_ws.sim.vec_env import MujocoVecEnv

    env = MujocoVecEnv(cfg, dr, n_envs, seed, nthread=1)
    rng = np.random.default_rng(seed)
    env.reset()
    actions = rng.uniform(-1.0, 1.0, (64, n_envs, env.action_space.shape[0])).astype(np.float32)
    for a in actions[:4]:
        env.step_async(a)
        env.step_wait()
    steps, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        env.step_async(actions[steps % len(actions)])
        env.step_wait()
        steps += 1
    cpu = time.process_time() - t0
    env.close()
    return steps * n_envs / cpu


def probe_throughput(cfg: RunConfig, dr: DRSpec, seconds: float = 0.5) -> dict[str, Any]:
    """Per-core throughput for each probe batch; the best one and the envs per core that reach it.

    :param seconds: CPU time per batch size
    """
    rates = {n: probe_batch(cfg, dr, n, seconds) for n in PROBE_BATCHES}
    best = max(rates.values())
    envs_per_core = min(n for n, r in rates.items() if r >= SATURATION * best)
    return {"by_batch": rates, "per_core_steps_per_s": best, "envs_per_core": envs_per_core}


def policy_parameters(cfg: RunConfig, core: Any) -> int:
    """Parameters of the configured PPO policy (SB3's own ``MlpPolicy`` built for these spaces)."""
    from stable_baselines3.common.policies import ActorCriticPolicy

    from embodied_ws.sim.env import action_space, observation_space

    policy = ActorCriticPolicy(
        observation_space(core),
        action_space(core),
        lambda _: 0.0,
        net_arch=list(cfg.ppo.net_arch),
        log_std_init=cfg.ppo.log_std_init,
    )
    return int(sum(p.numel() for p in policy.parameters()))


def make_plan(
    cfg: RunConfig,
    dr: DRSpec,
    steps_per_s: float,
    vla_params: float = 450e6,
    learner_steps_per_s: float | None = None,
    llm_ctx: int = 8192,
    probe_seconds: float = 0.5,
) -> dict[str, Any]:
    """The whole plan as a JSON-ready dict.

    :param steps_per_s: target aggregate sampling throughput
    :param vla_params: VLA parameter count
    :param learner_steps_per_s: env steps/s the learner would consume with free data (None: no risk estimate)
    :param llm_ctx: context length for the assistant's KV cache
    :param probe_seconds: CPU seconds per probed batch size
    """
    from embodied_ws.sim.core import EnvCore

    if steps_per_s <= 0:
        raise UserError(f"must be > 0, got {steps_per_s}", "--steps-per-s")
    core = EnvCore(cfg, dr, 1, 0)
    probe = probe_throughput(cfg, dr, probe_seconds)
    per_core = probe["per_core_steps_per_s"]
    cores = max(1, math.ceil(steps_per_s / per_core))
    n_params = policy_parameters(cfg, core)
    act_dim = core.action_dim
    ppo = ppo_memory_bytes(n_params, cfg.ppo.batch_size, core.obs_dim, act_dim, list(cfg.ppo.net_arch))
    vla = vla_memory_bytes(vla_params)
    llm = R1_QWEN_32B_Q4
    out: dict[str, Any] = {
        "robot": core.robot.name,
        "task": cfg.env.task,
        "frame_skip": cfg.env.frame_skip,
        "per_core_steps_per_s": round(per_core, 1),
        "probe_steps_per_s_by_batch": {str(k): round(v, 1) for k, v in probe["by_batch"].items()},
        "envs_per_core": probe["envs_per_core"],
        "target_steps_per_s": steps_per_s,
        "sampler_cores": cores,
        "n_envs": cores * probe["envs_per_core"],
        "gpu_memory_gib": {
            "ppo_policy": ppo / GIB,
            "vla_lora": vla["lora"] / GIB,
            "vla_full": vla["full"] / GIB,
            "llm_assistant": llm_memory_bytes(llm, llm_ctx) / GIB,
        },
        "ppo_policy_parameters": n_params,
        "vla_parameters": vla_params,
        "llm": {
            "model": llm.name,
            "weights_gib": llm.weights_bytes / GIB,
            "kv_cache_gib": llm.kv_bytes(llm_ctx) / GIB,
            "n_ctx": llm_ctx,
        },
    }
    if learner_steps_per_s:
        sampler = cores * per_core
        share = predicted_share(sampler, learner_steps_per_s)
        total = 1.0 / sampler + 1.0 / learner_steps_per_s  # seconds per env step of a synchronous learner
        verdict = data_wait_rule(
            share * total, total, n_envs=out["n_envs"], sampler_cores=cores, n_steps=cfg.ppo.n_steps
        )
        low_wait_cores = math.ceil((1.0 - THRESHOLD) / THRESHOLD * learner_steps_per_s / per_core)
        out["data_wait"] = {
            "learner_steps_per_s": learner_steps_per_s,
            "predicted_share": share,
            "risk": "high" if verdict.bottleneck == "sampler" else "low",
            "cores_for_low_wait": low_wait_cores,
            "message": verdict.message,
        }
    return out


def plan_lines(plan: dict[str, Any]) -> list[str]:
    """Human-readable lines of :func:`make_plan`'s result."""
    g = plan["gpu_memory_gib"]
    by = ", ".join(f"{k} envs: {v:,.0f}" for k, v in plan["probe_steps_per_s_by_batch"].items())
    lines = [
        f"robot / task: {plan['robot']} / {plan['task']} (frame_skip {plan['frame_skip']})",
        f"per-core throughput: {plan['per_core_steps_per_s']:,.0f} env-steps/s ({by})",
        f"for {plan['target_steps_per_s']:,.0f} env-steps/s: {plan['sampler_cores']} sampler core(s), "
        f"{plan['envs_per_core']} envs per core ({plan['n_envs']} envs; train.ray.actors={plan['sampler_cores']}, "
        f"train.n_envs={plan['n_envs']})",
        f"GPU memory: PPO policy {g['ppo_policy']:.3f} GiB ({plan['ppo_policy_parameters']:,} parameters); "
        f"VLA ({plan['vla_parameters'] / 1e6:,.0f} M) LoRA {g['vla_lora']:.1f} GiB, full {g['vla_full']:.1f} GiB "
        "(+ activations); "
        f"LLM assistant {g['llm_assistant']:.1f} GiB ({plan['llm']['model']}, n_ctx {plan['llm']['n_ctx']})",
        f"(each figure × {OVERHEAD:g} runtime overhead; "
        f"add ~{CUDA_CONTEXT_BYTES / GIB:g} GiB CUDA context per process)",
    ]
    dw = plan.get("data_wait")
    if dw:
        lines.append(
            f"data-wait risk at a learner of {dw['learner_steps_per_s']:,.0f} steps/s: {dw['risk']} "
            f"({dw['predicted_share']:.0%}); ≤ 20 % needs {dw['cores_for_low_wait']} sampler core(s)"
        )
    else:
        lines.append("data-wait risk: give --learner-steps-per-s to estimate it")
    return lines

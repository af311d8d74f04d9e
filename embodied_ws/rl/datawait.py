"""The data-wait rule: how much of the learner's time goes to waiting for samples, and what to do about it.

A learner that waits for samples more than :data:`THRESHOLD` (20 %) of its time is sampler-bound: more
envs per actor, more sampler cores or a longer rollout pay off. Below that, the learner itself (PPO
update, policy inference) is the limit and more samplers will not help. The same rule serves a finished
run (measured seconds) and ``embodied-ws plan`` (predicted from throughputs).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

#: share of learner time spent waiting for samples above which the sampler is the bottleneck
THRESHOLD = 0.20


@dataclass(frozen=True)
class DataWait:
    """The verdict of the data-wait rule.

    :param share: fraction of learner time spent waiting for samples (0..1)
    :param bottleneck: ``sampler`` (share > threshold) or ``learner``
    :param speedup_needed: factor by which sampling must get faster to bring the share down to the
        threshold (1.0 when it already is)
    :param message: one line for the console and the report
    :param suggestions: concrete fixes with numbers (empty when the learner is the limit)
    """

    share: float
    bottleneck: str
    speedup_needed: float
    message: str
    suggestions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for ``summary.json`` and ``--json``)."""
        return asdict(self)


def data_wait_rule(
    wait_s: float,
    total_s: float,
    *,
    n_envs: int,
    sampler_cores: int,
    n_steps: int,
    envs_per_actor: int | None = None,
    threshold: float = THRESHOLD,
) -> DataWait:
    """Apply the data-wait rule to a run's (or a plan's) time split.

    :param wait_s: learner time blocked waiting for env steps
    :param total_s: learner wall time over the same span
    :param n_envs: envs sampled in parallel
    :param sampler_cores: cores stepping them (sim threads, or Ray actors × CPUs each)
    :param n_steps: rollout length per env (PPO ``n_steps``)
    :param envs_per_actor: envs per Ray actor (None: a local sampler)
    :param threshold: share above which the sampler counts as the bottleneck
    """
    share = min(max(wait_s / total_s, 0.0), 1.0) if total_s > 0 else 0.0
    # learner's own time L stays; waiting W must shrink to W' with W'/(L+W') = threshold
    own = max(total_s - wait_s, 1e-12)
    target_wait = threshold / (1.0 - threshold) * own
    speedup = max(1.0, wait_s / target_wait) if wait_s > 0 else 1.0
    pct = f"{share:.0%}"
    if share <= threshold:
        return DataWait(
            share,
            "learner",
            1.0,
            f"data wait {pct} of learner time (≤ {threshold:.0%}): the samplers keep up; "
            "more samplers will not help, the learner (PPO update, inference) is the limit",
        )
    k = math.ceil(speedup * 10) / 10
    cores = math.ceil(sampler_cores * speedup)
    per = envs_per_actor if envs_per_actor is not None else n_envs
    more_per = math.ceil(per * speedup)
    unit = "envs per actor" if envs_per_actor is not None else "envs"
    suggestions = [
        f"more sampler cores: {sampler_cores} → {cores} (sampling must get {k:.1f}× faster)",
        f"more {unit}: {per} → {more_per} (batched stepping amortizes the per-step round trip)",
        f"a longer rollout: ppo.n_steps {n_steps} → {n_steps * 2} (fewer rollout/update switches; "
        "pair it with more envs so the update stays the same size)",
    ]
    return DataWait(
        share,
        "sampler",
        speedup,
        f"data wait {pct} of learner time (> {threshold:.0%}): the sampler is the bottleneck; " + suggestions[0],
        suggestions,
    )


def predicted_share(sampler_steps_per_s: float, learner_steps_per_s: float) -> float:
    """Data-wait share of a synchronous learner (PPO: sample, then update) for given throughputs.

    Per env step the learner waits ``1/S`` for the sample and spends ``1/L`` on it, so the share is
    ``L / (S + L)``.

    :param sampler_steps_per_s: aggregate sampling throughput S
    :param learner_steps_per_s: steps per second the learner would consume with free data L
    """
    if sampler_steps_per_s <= 0:
        return 1.0
    return learner_steps_per_s / (sampler_steps_per_s + learner_steps_per_s)


def for_run(timing: dict[str, float], cfg: Any, inner: Any) -> DataWait:
    """The rule applied to a finished run's time breakdown.

    :param timing: the run's ``time`` summary (``waiting_for_data_s``, ``total_s``)
    :param cfg: the run configuration (``train.n_envs``, ``ppo.n_steps``)
    :param inner: the innermost training vec env (Ray: its actors are the sampler cores)
    """
    if hasattr(inner, "stats"):  # Ray backend: actors × CPUs each
        stats = inner.stats()
        cores = max(1, math.ceil(stats["actors"] * stats["cpus_per_actor"]))
        per_actor: int | None = max(stats["envs_per_actor"])
    else:
        cores, per_actor = int(getattr(inner, "nthread", 1)), None
    return data_wait_rule(
        timing["waiting_for_data_s"],
        timing["total_s"],
        n_envs=cfg.train.n_envs,
        sampler_cores=cores,
        n_steps=cfg.ppo.n_steps,
        envs_per_actor=per_actor,
    )

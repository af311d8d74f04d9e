"""Evaluation cost: periodic evaluations gated by the training episodes' success, confirmations in rounds that
stop once they cannot pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from embodied_ws.config.loader import load_config
from embodied_ws.rl import callbacks as cb
from embodied_ws.rl.run import TrainingRun
from embodied_ws.rl.vec import success_interval

SETS = [
    "dr=none",
    "train.n_envs=4",
    "ppo.n_steps=32",
    "ppo.batch_size=64",
    "ppo.n_epochs=1",
    "train.eval_every=128",
    "train.eval_episodes=4",
    "train.checkpoint_every=0",
    "train.final_eval_episodes=0",
    "train.total_timesteps=1024",
]


@pytest.mark.parametrize(("rate", "episodes"), [(0.9, 1024), (0.9, 256), (0.6, 6), (0.5, 20)])
def test_needed_successes_is_the_fewest_whose_interval_starts_at_the_rate(rate: float, episodes: int) -> None:
    need = cb.needed_successes(rate, episodes)
    assert success_interval(need, episodes)[0] >= rate > success_interval(need - 1, episodes)[0]


def test_needed_successes_of_a_rate_no_count_reaches() -> None:
    assert cb.needed_successes(0.9, 6) == 7  # 6 of 6: the interval starts at 0.61


def test_a_confirmation_is_hopeless_only_when_the_rest_cannot_make_up_for_it() -> None:
    need = cb.needed_successes(0.9, 1024)  # about 91.9 % of 1,024
    assert cb.confirmation_hopeless(228, 256, 1024, need)  # 89.1 % of the first 256
    assert not cb.confirmation_hopeless(238, 256, 1024, need)  # 93.0 %
    assert not cb.confirmation_hopeless(240, 256, 256, need)  # all done: decided by the interval, not here
    assert not cb.confirmation_hopeless(0, 0, 1024, need)  # nothing run yet
    assert cb.confirmation_hopeless(0, 0, 6, cb.needed_successes(0.9, 6))  # no count of 6 confirms 0.9


def _scheduled(total: int, every: int, rollout: int) -> list[int]:
    """Steps of the rollout ends at which :class:`_EveryNSteps` runs (each multiple of ``every``)."""
    return [s for s in range(rollout, total + 1, rollout) if s % every == 0]


def test_evaluations_are_skipped_while_the_training_success_is_far_under_the_target(tmp_path: Path) -> None:
    """An untrained reach policy (training success 0, target 0.9): after the first finished training episode
    only every fourth evaluation runs; with no target (nothing can stop early) every one runs."""
    gated = load_config("reach", [*SETS, "train.target_success=0.9"])
    with TrainingRun(gated, "gated", tmp_path, progress=False) as run:
        run.learn()
        steps = [e["step"] for e in run.state.evals]
        assert run.state.recent_success and sum(run.state.recent_success) == 0
        every = 128 * cb.EVAL_GATE_STRIDE
        assert steps and all(s % every == 0 for s in steps if s > 256)
        assert run._evals.skipped == len(_scheduled(1024, 128, 128)) - len(steps) > 0

    free = load_config("reach", [*SETS, "train.target_success=null"])
    with TrainingRun(free, "free", tmp_path, progress=False) as run:
        run.learn()
        assert [e["step"] for e in run.state.evals] == _scheduled(1024, 128, 128)
        assert run._evals.skipped == 0


def test_a_confirmation_runs_in_rounds_and_stops_once_it_cannot_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rounds of 4 fresh episodes out of 12: an untrained policy (0 of 4) fails after its first round; with a
    100-m success radius every episode succeeds and all three rounds run (12 of 12 confirms 0.7)."""
    assert cb.needed_successes(0.7, 12) == 12
    monkeypatch.setattr(cb, "CONFIRM_ROUND", 4)
    sets = [*SETS, "train.target_success=0.0", "train.confirm_episodes=12"]
    with TrainingRun(
        load_config("reach", [*sets, "train.confirm_success=0.7"]), "fail", tmp_path, progress=False
    ) as run:
        run.learn()
        confirmations = run.state.confirmations
        assert confirmations and all(c["episodes"] == 4 and c["success_rate"] == 0.0 for c in confirmations)
        assert run.stopped == "step budget"
    sure = [*sets, "train.confirm_success=0.7", "task.success_threshold=100"]
    with TrainingRun(load_config("reach", sure), "pass", tmp_path, progress=False) as run:
        run.learn()
        assert [(c["episodes"], c["success_rate"]) for c in run.state.confirmations] == [(12, 1.0)]
        assert run.stopped == "target success"

"""Evaluation cost: how many successes a confirmation needs and when it can no longer pass (the gate and the
rounds in a training run: tests/test_run_state.py)."""

from __future__ import annotations

import pytest

from embodied_ws.rl import callbacks as cb
from embodied_ws.rl.vec import success_interval


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

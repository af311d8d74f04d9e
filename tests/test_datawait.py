"""The data-wait rule on both sides of 20 %, and the predicted share of a synchronous learner."""

from __future__ import annotations

import math

import pytest

from embodied_ws.rl.datawait import THRESHOLD, data_wait_rule, predicted_share


def test_above_threshold_names_the_sampler_and_the_fix_with_numbers() -> None:
    v = data_wait_rule(3.0, 10.0, n_envs=8, sampler_cores=2, n_steps=64, envs_per_actor=4)
    assert v.share == pytest.approx(0.3)
    assert v.bottleneck == "sampler"
    assert "sampler is the bottleneck" in v.message and "30%" in v.message
    # the speedup brings the share exactly to the threshold: 3/s / (7 + 3/s) = 0.2
    assert (3.0 / v.speedup_needed) / (7.0 + 3.0 / v.speedup_needed) == pytest.approx(THRESHOLD)
    cores = math.ceil(2 * v.speedup_needed)
    assert any(f"2 → {cores}" in s for s in v.suggestions), v.suggestions
    assert any("envs per actor: 4 → " in s for s in v.suggestions)
    assert any("ppo.n_steps 64 → 128" in s for s in v.suggestions)


def test_below_threshold_says_more_samplers_will_not_help() -> None:
    v = data_wait_rule(1.9, 10.0, n_envs=32, sampler_cores=2, n_steps=64)
    assert v.share == pytest.approx(0.19)
    assert v.bottleneck == "learner" and v.speedup_needed == 1.0 and not v.suggestions
    assert "more samplers will not help" in v.message


def test_just_over_the_line_flips_the_verdict() -> None:
    below = data_wait_rule(2.0, 10.0, n_envs=4, sampler_cores=1, n_steps=64)
    above = data_wait_rule(2.01, 10.0, n_envs=4, sampler_cores=1, n_steps=64)
    assert below.bottleneck == "learner" and above.bottleneck == "sampler"


def test_predicted_share_of_a_synchronous_learner() -> None:
    # sampling at 4× the learner's speed waits 1/(4+1) of the time: right at the threshold
    assert predicted_share(40_000, 10_000) == pytest.approx(0.2)
    assert predicted_share(10_000, 10_000) == pytest.approx(0.5)
    assert predicted_share(0, 1) == 1.0

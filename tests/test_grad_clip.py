"""``ppo.grad_clip``: SB3's one global gradient clip, or the policy's and the value function's clipped apart."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.rl.ppo import VALUE_PREFIXES, SplitClipPolicy, make_training_env, ppo_kwargs


@pytest.fixture
def per_net_model():
    """An untrained PPO on arm3 reach with ``ppo.grad_clip=per_net`` (4 envs)."""
    from stable_baselines3 import PPO

    cfg = load_config("reach", ["dr=none", "train.n_envs=4", "ppo.grad_clip=per_net", "ppo.max_grad_norm=0.5"])
    venv, _ = make_training_env(cfg, load_dr(cfg.dr))
    yield PPO(env=venv, **{**ppo_kwargs(cfg), "device": "cpu"})
    venv.close()


def _set_grads(policy: torch.nn.Module, policy_norm: float, value_norm: float) -> None:
    """Give the policy's parameters gradients of total norm ``policy_norm`` and the value's ``value_norm``."""
    named = list(policy.named_parameters())
    for wanted, is_value in ((policy_norm, False), (value_norm, True)):
        ps = [p for n, p in named if n.startswith(VALUE_PREFIXES) == is_value]
        grads = [torch.ones_like(p) for p in ps]
        total = torch.sqrt(sum((g**2).sum() for g in grads))
        for p, g in zip(ps, grads, strict=True):
            p.grad = g * (wanted / total)


def _norm(params: list[torch.nn.Parameter]) -> float:
    return float(torch.sqrt(sum((p.grad**2).sum() for p in params)))


def test_groups_split_the_policy_from_the_value_function(per_net_model) -> None:
    policy = per_net_model.policy
    assert isinstance(policy, SplitClipPolicy) and per_net_model.max_grad_norm == float("inf")
    groups = policy.optimizer.param_groups
    names = {id(p): n for n, p in policy.named_parameters()}
    grouped = [{names[id(p)] for p in g["params"]} for g in groups]
    assert len(groups) == 2 and grouped[0] | grouped[1] == set(names.values()) and not grouped[0] & grouped[1]
    assert "log_std" in grouped[0] and "action_net.weight" in grouped[0]
    assert "value_net.weight" in grouped[1] and all(n.startswith(VALUE_PREFIXES) for n in grouped[1])
    assert [g["max_grad_norm"] for g in groups] == [0.5, 0.5]


def test_a_large_value_gradient_leaves_the_policy_step_alone(per_net_model) -> None:
    """The case the per-net clip exists for: a value gradient of norm 100 would have shrunk a policy gradient of
    norm 0.2 by 200× under one global clip at 0.5; apart, the policy's is kept and the value's clipped to 0.5."""
    policy = per_net_model.policy
    pi, vf = (g["params"] for g in policy.optimizer.param_groups)
    _set_grads(policy, policy_norm=0.2, value_norm=100.0)
    before = [p.detach().clone() for p in pi]
    policy.optimizer.step()
    assert _norm(pi) == pytest.approx(0.2, rel=1e-4)
    assert _norm(vf) == pytest.approx(0.5, rel=1e-4)
    assert any(not torch.equal(b, p) for b, p in zip(before, pi, strict=True))  # Adam took its step
    _set_grads(policy, policy_norm=3.0, value_norm=0.1)
    policy.optimizer.step()
    assert _norm(pi) == pytest.approx(0.5, rel=1e-4) and _norm(vf) == pytest.approx(0.1, rel=1e-4)


def test_per_net_clip_survives_save_and_load(per_net_model, tmp_path: Path) -> None:
    from stable_baselines3 import PPO

    per_net_model.learn(per_net_model.n_steps * per_net_model.n_envs)
    per_net_model.save(tmp_path / "model.zip")
    loaded = PPO.load(tmp_path / "model.zip", device="cpu")
    assert isinstance(loaded.policy, SplitClipPolicy) and loaded.max_grad_norm == float("inf")
    assert [g["max_grad_norm"] for g in loaded.policy.optimizer.param_groups] == [0.5, 0.5]
    state, saved = loaded.policy.optimizer.state_dict(), per_net_model.policy.optimizer.state_dict()
    assert state["state"].keys() == saved["state"].keys()  # Adam's moments came back, group by group


def test_global_clip_is_sb3s_own() -> None:
    cfg = load_config("reach", ["ppo.max_grad_norm=0.7"])
    kw = ppo_kwargs(cfg)
    assert kw["policy"] == "MlpPolicy" and kw["max_grad_norm"] == 0.7 and "max_grad_norm" not in kw["policy_kwargs"]

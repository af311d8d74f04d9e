"""PEFT LoRA on a tiny SmolVLA (the real LeRobot class, a local random backbone): frozen base, small share,
learning, adapter save/reload, merge."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from vla_helpers import make_dataset, tiny_backbone, tiny_config

from embodied_ws.vla.finetune import prepare, train_steps
from embodied_ws.vla.policies import load_adapter, trainable_share

pytestmark = pytest.mark.slow


def _fixed_inputs(parts: dict[str, Any], seed: int = 0) -> tuple[dict[str, Any], torch.Tensor, torch.Tensor]:
    """One preprocessed batch with fixed flow-matching noise and time, so losses are comparable."""
    torch.manual_seed(seed)
    batch = parts["pre"](next(iter(parts["loader"])))
    cfg = parts["policy"].config
    n = batch["action"].shape[0]
    noise = torch.randn(n, cfg.chunk_size, cfg.max_action_dim)
    time = torch.full((n,), 0.5)
    return batch, noise, time


def _loss(model: Any, inputs: tuple[dict[str, Any], torch.Tensor, torch.Tensor]) -> torch.Tensor:
    batch, noise, time = inputs
    model.eval()
    with torch.no_grad():
        loss, _ = model.forward(dict(batch), noise=noise, time=time)
    return loss


def _chunk(model: Any, inputs: tuple[dict[str, Any], torch.Tensor, torch.Tensor]) -> torch.Tensor:
    batch, noise, _ = inputs
    model.eval()
    with torch.no_grad():
        return model.predict_action_chunk(dict(batch), noise=noise)


STEPS = 120  # 40 steps were too few: the loss on a fixed draw fell 0.57-1.36x across seeds (rose on some)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("lora")
    torch.manual_seed(0)  # backbone, policy and LoRA initialisation: the same model on every run
    cfg = tiny_config(tiny_backbone(tmp / "vlm"))
    parts = prepare(make_dataset(tmp / "ds"), cfg, tmp / "run", "cpu")
    model = parts["model"]
    base_before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    # learning is judged on eight fixed draws (frames, flow-matching noise and time); the per-step training losses
    # each draw their own noise and time, so comparing a few of them is a coin toss
    held_out = [_fixed_inputs(parts, seed) for seed in range(8)]
    held_before = [_loss(model, x) for x in held_out]
    optim = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.vla.learning_rate)
    torch.manual_seed(1)
    losses = train_steps(model, parts["pre"], parts["loader"], optim, STEPS)
    model.save_pretrained(tmp / "adapter")
    parts["policy"].config.save_pretrained(tmp / "adapter")
    return {
        **parts,
        "tmp": tmp,
        "base_before": base_before,
        "inputs": held_out[0],
        "held_out": held_out,
        "held_before": held_before,
        "losses": losses,
    }


def test_only_adapters_train_and_they_are_a_small_share(trained: dict[str, Any]) -> None:
    model = trained["model"]
    n_train, n_all = trainable_share(model)
    assert 0 < n_train <= 0.02 * n_all, (n_train, n_all)
    assert all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)


def test_base_weights_stay_bit_identical(trained: dict[str, Any]) -> None:
    after = dict(trained["model"].named_parameters())
    assert trained["base_before"]
    for name, before in trained["base_before"].items():
        assert torch.equal(before, after[name].detach()), name


def test_loss_falls(trained: dict[str, Any]) -> None:
    """Across 20 initialisations, 120 steps took the summed fixed-draw loss to 0.29-0.49 of its start, and no
    single draw above 0.68 of its own start."""
    before = trained["held_before"]
    after = [_loss(trained["model"], x) for x in trained["held_out"]]
    assert sum(after) < 0.7 * sum(before), (before, after)
    assert all(a < b for a, b in zip(after, before, strict=True)), (before, after)
    assert len(trained["losses"]) == STEPS and all(math.isfinite(loss) for loss in trained["losses"])


def test_saved_adapter_reloads_to_identical_outputs(trained: dict[str, Any]) -> None:
    reloaded = load_adapter(trained["tmp"] / "adapter", "cpu")
    inputs = trained["inputs"]
    assert torch.equal(_loss(reloaded, inputs), _loss(trained["model"], inputs))
    assert torch.equal(_chunk(reloaded, inputs), _chunk(trained["model"], inputs))


def test_merged_and_unmerged_agree(trained: dict[str, Any]) -> None:
    merged = load_adapter(trained["tmp"] / "adapter", "cpu", merge=True)
    assert not any("lora_" in n for n, _ in merged.named_parameters())
    inputs = trained["inputs"]
    a, b = _chunk(merged, inputs), _chunk(trained["model"], inputs)
    assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()
    # the adapters did change the policy (else merged == unmerged would hold trivially)
    base = type(trained["policy"]).from_pretrained(trained["tmp"] / "run" / "base")
    assert not torch.allclose(_chunk(base, inputs), b, atol=1e-4)

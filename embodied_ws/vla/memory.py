"""Memory estimate of a fine-tune, compared with free GPU or host memory before any training starts.

Estimate = weights (all parameters, in their dtype) + gradients and AdamW moments (trainable
parameters only, fp32) + activations kept for backward (tokens = image tokens + language tokens +
action chunk), with the constants and formulas of :mod:`embodied_ws.core.memory`; this module only
reads the model's sizes. It is deliberately simple: its job is to stop a run that cannot fit, and to
name the knob to turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from embodied_ws.core.errors import UserError
from embodied_ws.core.memory import MIB, activation_bytes, free_memory, optimizer_bytes


@dataclass
class MemoryEstimate:
    """Bytes per part of a fine-tune and the free memory of the device it runs on."""

    weights: int
    optimizer: int
    activations: int
    free: int
    device: str

    @property
    def total(self) -> int:
        """Estimated peak, bytes."""
        return self.weights + self.optimizer + self.activations

    def summary(self) -> dict[str, float | str]:
        """MB per part, for printing and JSON."""
        return {
            "weights_mb": round(self.weights / MIB, 1),
            "grads_and_adam_mb": round(self.optimizer / MIB, 1),
            "activations_mb": round(self.activations / MIB, 1),
            "estimate_mb": round(self.total / MIB, 1),
            "free_mb": round(self.free / MIB, 1),
            "device": self.device,
        }


def _width_and_layers(model: Any) -> tuple[int, int]:
    """Largest hidden width and number of transformer-like blocks (by counting ``layers`` lists)."""
    import torch

    width, layers = 0, 0
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            width = max(width, m.in_features)
        if isinstance(m, torch.nn.ModuleList):
            layers += len(m)
    return width, max(layers, 1)


def estimate(model: Any, batch_size: int, tokens: int, device: str) -> MemoryEstimate:
    """Estimate the fine-tune's peak memory for ``model`` as it is (after LoRA wrapping, if any).

    :param model: the (possibly PEFT-wrapped) policy
    :param batch_size: samples per optimizer step
    :param tokens: sequence length the backbone sees per sample
    :param device: where training runs
    """
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    width, layers = _width_and_layers(model)
    activations = activation_bytes(batch_size, tokens, width, layers)
    return MemoryEstimate(weights, optimizer_bytes(trainable), activations, free_memory(device), device)


def refuse_if_too_big(est: MemoryEstimate, margin: float, lora: bool) -> None:
    """One-line refusal when the estimate exceeds ``margin`` × free memory, naming the knob to turn."""
    if est.total <= margin * est.free:
        return
    if est.activations >= est.optimizer:
        knob = "lower vla.batch_size (or vla.image_size / vla.chunk_size)"
    elif not lora:
        knob = "set vla.lora=true (only adapters train)"
    else:
        knob = "set vla.load_in_4bit=true (CUDA + bitsandbytes) or lower vla.lora_rank"
    raise UserError(
        f"fine-tune needs about {est.total / MIB:,.0f} MB, only {est.free / MIB:,.0f} MB free on {est.device}: {knob}",
        "vla",
    )

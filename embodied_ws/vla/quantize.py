"""Optional 4-bit frozen base for LoRA (``vla.load_in_4bit``): bitsandbytes NF4 linear layers on CUDA.

LeRobot policies are plain ``nn.Module`` trees, not Hugging Face ``from_pretrained`` models, so the
``BitsAndBytesConfig`` route does not apply; instead every ``nn.Linear`` of the frozen backbone is
swapped for a ``bitsandbytes.nn.Linear4bit`` holding the same weights (quantized when moved to the GPU),
before PEFT wraps the model (PEFT's LoRA supports ``Linear4bit`` bases). The action expert and the
projections LoRA targets stay in full precision.
"""

from __future__ import annotations

from typing import Any

from embodied_ws.core.errors import UserError


def require_4bit(device: str) -> Any:
    """The ``bitsandbytes`` module, or a one-line error saying what is missing."""
    if not device.startswith("cuda"):
        raise UserError("4-bit needs a CUDA device (set vla.device=cuda or vla.load_in_4bit=false)", "vla.load_in_4bit")
    try:
        import bitsandbytes
    except ImportError:
        raise UserError("4-bit needs bitsandbytes: pip install bitsandbytes", "vla.load_in_4bit") from None
    return bitsandbytes


def quantize_backbone(policy: Any, device: str) -> int:
    """Swap the backbone's ``nn.Linear`` layers (SmolVLA: ``model.vlm_with_expert.vlm``) for NF4 4-bit
    layers; returns how many were swapped. Call before LoRA wrapping."""
    import torch

    bnb = require_4bit(device)
    backbone = getattr(getattr(policy.model, "vlm_with_expert", None), "vlm", None)
    if backbone is None:
        raise UserError(f"4-bit is supported for SmolVLA's backbone, not {policy.name}", "vla.load_in_4bit")
    swapped = 0
    for parent in list(backbone.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear):
                continue
            q = bnb.nn.Linear4bit(
                child.in_features,
                child.out_features,
                bias=child.bias is not None,
                compute_dtype=torch.bfloat16,
                quant_type="nf4",
            )
            q.weight = bnb.nn.Params4bit(child.weight.data.cpu(), requires_grad=False, quant_type="nf4")
            if child.bias is not None:
                q.bias = torch.nn.Parameter(child.bias.data.clone(), requires_grad=False)
            setattr(parent, name, q)
            swapped += 1
    backbone.to(device)  # quantizes the Params4bit weights
    return swapped

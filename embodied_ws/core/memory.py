"""Memory arithmetic of every planner in one place: PPO training, VLA fine-tuning, the local LLM.

The constants and formulas live here; their users only call them: ``embodied-ws plan``
(:mod:`embodied_ws.rl.hwplan`), the fine-tune's memory check (:mod:`embodied_ws.vla.memory`) and the
assistant's llama.cpp offload (:func:`plan_llm`). No heavy imports at module level (torch and psutil
are imported by the functions that ask the device).

- **Training state** (Adam, fp32): weights 4 + gradients 4 + two moments 8 = 16 bytes per trainable
  parameter; frozen weights cost their dtype (bf16: 2 bytes).
- **Activations** of a transformer kept for the backward pass: ``batch × tokens × width × layers × 34``
  bytes (the usual rule of thumb).
- **Planned figures** (``plan``, the LLM offload) carry the field's 1.2 runtime-overhead factor
  (CUDA buffers, fragmentation); the fine-tune's check compares its raw estimate against a margin of
  the free memory instead.
- **LLM**: weights ``parameters × bits/weight ÷ 8 × 1.2``; KV cache
  ``2 (K and V) × layers × KV heads × head dim × context × bytes/element``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from embodied_ws.core.gpu import gpu_info

#: bytes in a GiB (2^30) and a MiB (2^20)
GIB = 1024**3
MIB = 1024**2
#: runtime overhead on planned figures (CUDA context buffers, allocator fragmentation)
OVERHEAD = 1.2
#: one fp32 value
FP32_BYTES = 4
#: AdamW state per trainable parameter besides its weight: gradient + first and second moments, fp32
ADAM_STATE_BYTES_PER_PARAM = 3 * FP32_BYTES
#: training one fp32 parameter with Adam: weight + gradient + two moments
ADAM_BYTES_PER_PARAM = FP32_BYTES + ADAM_STATE_BYTES_PER_PARAM
#: frozen VLA weights for LoRA fine-tuning, in bf16
FROZEN_BYTES_PER_PARAM = 2
#: trainable share of a VLA's parameters under LoRA (rank 16-32 on attention and MLP projections: ~1 %)
LORA_TRAINABLE_FRACTION = 0.01
#: activation bytes kept for backward per (sample × token × width × layer) of a transformer
ACTIVATION_BYTES = 34
#: bits per weight of common llama.cpp quantizations (averages over a whole model)
BITS_PER_WEIGHT = {"F16": 16.0, "Q8_0": 8.5, "Q6_K": 6.56, "Q5_K_M": 5.69, "Q4_K_M": 4.85, "Q4_0": 4.55, "Q3_K_M": 3.91}
#: KV cache element size (llama.cpp's default f16 cache)
KV_BYTES_PER_ELEMENT = 2.0
#: GPU memory a process's CUDA context takes (on top of every planned figure)
CUDA_CONTEXT_BYTES = 0.5 * GIB
#: GPU memory the LLM plan leaves free (the CUDA context, scratch buffers)
LLM_RESERVE_BYTES = CUDA_CONTEXT_BYTES
#: the LLM plan shrinks the context down to this before it gives up GPU layers
LLM_MIN_CTX = 2048
#: the assistant's context length (its KV cache), unless the model's own is shorter
LLM_DEFAULT_CTX = 8192


# ---------------------------------------------------------------------------------------- training
def ppo_memory_bytes(n_params: int, batch_size: int, obs_dim: int, act_dim: int, net_arch: list[int]) -> float:
    """GPU bytes to train a PPO policy: Adam state plus one minibatch, × :data:`OVERHEAD`.

    The minibatch holds inputs (observation, action, advantage, return, old log-prob and value) and the
    activations of the policy and value networks, kept for the backward pass, in fp32.
    """
    per_sample = obs_dim + act_dim + 4 + 2 * sum(net_arch)
    return (ADAM_BYTES_PER_PARAM * n_params + FP32_BYTES * batch_size * per_sample) * OVERHEAD


def vla_memory_bytes(n_params: float) -> dict[str, float]:
    """GPU bytes of a VLA's weights and optimizer state (activations not included), × :data:`OVERHEAD`.

    ``lora``: frozen bf16 weights plus Adam on the adapters (:data:`LORA_TRAINABLE_FRACTION` of the
    parameters); ``full``: Adam on every parameter.
    """
    lora = FROZEN_BYTES_PER_PARAM * n_params + ADAM_BYTES_PER_PARAM * LORA_TRAINABLE_FRACTION * n_params
    return {"lora": lora * OVERHEAD, "full": ADAM_BYTES_PER_PARAM * n_params * OVERHEAD}


def optimizer_bytes(trainable_params: int) -> int:
    """Gradients and AdamW moments of ``trainable_params`` parameters (the weights themselves not included)."""
    return trainable_params * ADAM_STATE_BYTES_PER_PARAM


def activation_bytes(batch_size: int, tokens: int, width: int, layers: int) -> int:
    """Transformer activations kept for the backward pass (:data:`ACTIVATION_BYTES` per element)."""
    return ACTIVATION_BYTES * batch_size * tokens * width * layers


# ---------------------------------------------------------------------------------------- the local LLM
@dataclass(frozen=True)
class ModelShape:
    """What the LLM plan needs to know about a model."""

    n_params: float
    n_layers: int
    n_kv_heads: int
    head_dim: int
    context_length: int
    bits_per_weight: float
    name: str = ""

    @property
    def weights_bytes(self) -> float:
        """Weights in memory, with the 1.2 runtime overhead."""
        return self.n_params * self.bits_per_weight / 8.0 * OVERHEAD

    def kv_bytes(self, n_ctx: int, bytes_per_element: float = KV_BYTES_PER_ELEMENT) -> float:
        """KV cache for ``n_ctx`` tokens (f16 cache by default)."""
        return 2.0 * self.n_layers * self.n_kv_heads * self.head_dim * n_ctx * bytes_per_element


#: DeepSeek-R1-Distill-Qwen-32B (Qwen2.5-32B shape) at Q4_K_M: the assistant's default model
R1_QWEN_32B_Q4 = ModelShape(
    32.8e9, 64, 8, 128, 131072, BITS_PER_WEIGHT["Q4_K_M"], "DeepSeek-R1-Distill-Qwen-32B Q4_K_M"
)


@dataclass(frozen=True)
class LLMPlan:
    """The chosen llama.cpp settings and the memory arithmetic behind them."""

    n_gpu_layers: int
    n_ctx: int
    weights_gib: float
    kv_gib: float
    free_vram_gib: float
    device: str

    def message(self, shape: ModelShape) -> str:
        """One line telling the user what fits."""
        if self.device == "cpu":
            return (
                f"no usable GPU memory: running {shape.name or 'the model'} on the CPU "
                f"({self.weights_gib:.1f} GiB weights + {self.kv_gib:.1f} GiB KV cache in RAM, n_ctx={self.n_ctx})"
            )
        where = "all" if self.n_gpu_layers >= shape.n_layers else f"{self.n_gpu_layers}/{shape.n_layers}"
        return (
            f"{where} layers on the GPU, n_ctx={self.n_ctx}: {self.weights_gib:.1f} GiB weights + "
            f"{self.kv_gib:.1f} GiB KV cache vs {self.free_vram_gib:.1f} GiB free"
        )


def llm_memory_bytes(shape: ModelShape, n_ctx: int) -> float:
    """Weights (× overhead) plus the KV cache of ``n_ctx`` tokens."""
    return shape.weights_bytes + shape.kv_bytes(n_ctx)


def plan_llm(
    shape: ModelShape,
    free_vram_bytes: float,
    n_ctx: int = LLM_DEFAULT_CTX,
    reserve_bytes: float = LLM_RESERVE_BYTES,
) -> LLMPlan:
    """Choose llama.cpp's ``n_gpu_layers`` and ``n_ctx`` for ``free_vram_bytes`` of free GPU memory.

    Full offload is preferred, shrinking the context (down to :data:`LLM_MIN_CTX`) before giving up
    layers; when the model does not fit, as many layers as fit go to the GPU with the requested context
    (their share of weights + KV cache); the rest runs on the CPU.
    """
    n_ctx = min(n_ctx, shape.context_length)
    budget = free_vram_bytes - reserve_bytes
    ctx = n_ctx
    while ctx >= min(LLM_MIN_CTX, n_ctx):
        if llm_memory_bytes(shape, ctx) <= budget:
            return LLMPlan(
                shape.n_layers, ctx, shape.weights_bytes / GIB, shape.kv_bytes(ctx) / GIB, free_vram_bytes / GIB, "gpu"
            )
        ctx //= 2
    per_layer = llm_memory_bytes(shape, n_ctx) / shape.n_layers
    layers = max(0, min(shape.n_layers, math.floor(budget / per_layer))) if budget > 0 else 0
    return LLMPlan(
        layers,
        n_ctx,
        shape.weights_bytes / GIB,
        shape.kv_bytes(n_ctx) / GIB,
        free_vram_bytes / GIB,
        "gpu" if layers else "cpu",
    )


# ---------------------------------------------------------------------------------------- free memory
def free_vram_bytes() -> float:
    """Free memory of the first GPU as the driver reports it (NVML, else nvidia-smi), else torch's
    view, or 0 without a GPU."""
    info = gpu_info()
    if info is not None:
        return info.memory_free_mb * MIB
    try:
        import torch

        if torch.cuda.is_available():
            return float(torch.cuda.mem_get_info()[0])
    except ImportError:
        pass
    return 0.0


def free_memory(device: str) -> int:
    """Free bytes on the torch ``device``: CUDA's own count for GPUs, available host RAM otherwise."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)

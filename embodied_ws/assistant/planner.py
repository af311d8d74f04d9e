"""VRAM planner for local GGUF models: what fits, with how many layers on the GPU and which context.

Weights take ``parameters × bytes/parameter × 1.2`` (the field's rule of thumb: 20 % for runtime
buffers); the KV cache takes ``2 (K and V) × layers × KV heads × head dim × context × bytes/element``.
Layers are offloaded while their share of weights + KV cache fits the free VRAM (llama.cpp's
``n_gpu_layers``); the rest runs on the CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from embodied_ws.core.errors import UserError
from embodied_ws.core.gpu import gpu_info

OVERHEAD = 1.2
GIB = 1024**3
#: bits per weight of common llama.cpp quantizations (averages over a whole model)
BITS_PER_WEIGHT = {"F16": 16.0, "Q8_0": 8.5, "Q6_K": 6.56, "Q5_K_M": 5.69, "Q4_K_M": 4.85, "Q4_0": 4.55, "Q3_K_M": 3.91}


@dataclass(frozen=True)
class ModelShape:
    """What the planner needs to know about a model."""

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

    def kv_bytes(self, n_ctx: int, bytes_per_element: float = 2.0) -> float:
        """KV cache for ``n_ctx`` tokens (f16 cache by default)."""
        return 2.0 * self.n_layers * self.n_kv_heads * self.head_dim * n_ctx * bytes_per_element


#: DeepSeek-R1-Distill-Qwen-32B (Qwen2.5-32B shape) at Q4_K_M: the assistant's default model
R1_QWEN_32B_Q4 = ModelShape(
    32.8e9, 64, 8, 128, 131072, BITS_PER_WEIGHT["Q4_K_M"], "DeepSeek-R1-Distill-Qwen-32B Q4_K_M"
)


@dataclass(frozen=True)
class Plan:
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


def plan(shape: ModelShape, free_vram_bytes: float, n_ctx: int = 8192, reserve_bytes: float = 0.5 * GIB) -> Plan:
    """Choose ``n_gpu_layers`` and ``n_ctx`` for ``free_vram_bytes`` of free GPU memory.

    Full offload is preferred, shrinking the context (down to 2048) before giving up layers; when
    the model does not fit, as many layers as fit go to the GPU with the requested context.
    """
    n_ctx = min(n_ctx, shape.context_length)
    budget = free_vram_bytes - reserve_bytes
    ctx = n_ctx
    while ctx >= min(2048, n_ctx):
        if shape.weights_bytes + shape.kv_bytes(ctx) <= budget:
            return Plan(
                shape.n_layers, ctx, shape.weights_bytes / GIB, shape.kv_bytes(ctx) / GIB, free_vram_bytes / GIB, "gpu"
            )
        ctx //= 2
    per_layer = (shape.weights_bytes + shape.kv_bytes(n_ctx)) / shape.n_layers
    layers = max(0, min(shape.n_layers, math.floor(budget / per_layer))) if budget > 0 else 0
    return Plan(
        layers,
        n_ctx,
        shape.weights_bytes / GIB,
        shape.kv_bytes(n_ctx) / GIB,
        free_vram_bytes / GIB,
        "gpu" if layers else "cpu",
    )


def shape_from_gguf(path: Path) -> ModelShape:
    """Read a GGUF file's shape from its metadata (layers, KV heads, head dim, context, parameters)."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, OSError) as exc:
        raise UserError(f"not a readable GGUF file: {exc}", str(path)) from None

    def field(key: str, default: object = None) -> object:
        f = reader.fields.get(key)
        if f is None:
            return default
        value = f.parts[f.data[0]]
        return bytes(value).decode() if f.types and f.types[0] == gguf.GGUFValueType.STRING else value[0]

    arch = field("general.architecture")
    if arch is None:
        raise UserError("GGUF has no general.architecture", str(path))
    n_head = int(field(f"{arch}.attention.head_count"))
    n_embd = int(field(f"{arch}.embedding_length"))
    n_params = float(sum(int(t.n_elements) for t in reader.tensors))
    head_dim = int(field(f"{arch}.attention.key_length", n_embd // n_head))
    return ModelShape(
        n_params=n_params,
        n_layers=int(field(f"{arch}.block_count")),
        n_kv_heads=int(field(f"{arch}.attention.head_count_kv", n_head)),
        head_dim=head_dim,
        context_length=int(field(f"{arch}.context_length", 4096)),
        bits_per_weight=8.0 * path.stat().st_size / n_params,
        name=str(field("general.name", path.stem)),
    )


def free_vram_bytes() -> float:
    """Free memory of the first GPU as the driver reports it (NVML, else nvidia-smi), else torch's
    view, or 0 without a GPU."""
    info = gpu_info()
    if info is not None:
        return info.memory_free_mb * 2**20
    try:
        import torch

        if torch.cuda.is_available():
            return float(torch.cuda.mem_get_info()[0])
    except ImportError:
        pass
    return 0.0

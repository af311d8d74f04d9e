"""A GGUF model's shape from its metadata, for the LLM memory plan (:func:`embodied_ws.core.memory.plan_llm`).

The arithmetic (weights × 1.2 + KV cache, layers offloaded while they fit) lives in
:mod:`embodied_ws.core.memory`; this module only reads what it needs from the file.
"""

from __future__ import annotations

from pathlib import Path

from embodied_ws.core.errors import UserError
from embodied_ws.core.memory import ModelShape


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

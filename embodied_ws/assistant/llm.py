"""Local LLM backend over llama-cpp-python: load with a VRAM plan, stream tokens, split R1's <think>.

:func:`load_llm` is the one set-up of the model (doctor ``--llm``, the assistant TUI and
``bench/llm_decode.py`` use it): the GGUF's shape from its metadata, the memory plan of
:func:`embodied_ws.core.memory.plan_llm` (layers on the GPU, context), and :func:`open_llama`, the
only place that builds a ``llama_cpp.Llama``, with one set of defaults.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_ws.core.errors import UserError
from embodied_ws.core.memory import LLM_DEFAULT_CTX, LLMPlan, ModelShape, free_vram_bytes, plan_llm
from embodied_ws.core.optional import require

THINK = re.compile(r"<think>(.*?)(</think>|$)", re.S)


@dataclass
class Answer:
    """A model reply split into its reasoning (R1's ``<think>``) and the answer shown to the user."""

    think: str
    answer: str


def split_think(text: str) -> Answer:
    """Split ``<think>…</think>`` (possibly still open while streaming) from the rest."""
    m = THINK.search(text)
    if not m:
        return Answer("", text.strip())
    return Answer(m.group(1).strip(), (text[: m.start()] + text[m.end() :]).strip())


#: tokens of the context kept free besides the prompt and the answer (chat template, stop tokens)
CONTEXT_MARGIN = 256
#: smallest prompt budget, however short the context
MIN_PROMPT_TOKENS = 256


def _check_model_file(model_path: Path) -> None:
    if not model_path.is_file():
        raise UserError("model file not found; fetch it with `embodied-ws assistant download`", str(model_path))


def open_llama(model_path: Path, n_ctx: int, n_gpu_layers: int, seed: int = 0) -> Any:
    """The ``llama_cpp.Llama`` of ``model_path`` (the only place one is built); errors are one line.

    :param n_ctx: context length
    :param n_gpu_layers: layers to offload (0: CPU only)
    """
    _check_model_file(model_path)
    llama_cpp = require("llama_cpp", "pip install llama-cpp-python")
    try:
        return llama_cpp.Llama(str(model_path), n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, seed=seed, verbose=False)
    except ValueError as exc:
        raise UserError(f"llama.cpp cannot load the model: {exc}", str(model_path)) from None


class LocalLLM:
    """A GGUF model loaded in-process with llama.cpp (build it with :func:`load_llm`).

    :param model_path: the ``.gguf`` file
    :param n_ctx: context length
    :param n_gpu_layers: layers to offload (0: CPU only)
    """

    def __init__(self, model_path: Path, n_ctx: int = LLM_DEFAULT_CTX, n_gpu_layers: int = 0, seed: int = 0) -> None:
        self.llm = open_llama(model_path, n_ctx, n_gpu_layers, seed)
        self.path = model_path
        self.n_ctx = n_ctx
        self.n_gpu_layers = n_gpu_layers
        self.has_chat_template = "tokenizer.chat_template" in (self.llm.metadata or {})
        self.shape: ModelShape | None = None
        self.plan: LLMPlan | None = None

    def prompt_budget(self, max_tokens: int) -> int:
        """Tokens the prompt may take so that an answer of ``max_tokens`` still fits the context."""
        return max(MIN_PROMPT_TOKENS, self.n_ctx - max_tokens - CONTEXT_MARGIN)

    def describe(self) -> str:
        """One line: the model and where it runs (the plan's message)."""
        if self.shape is None or self.plan is None:
            return f"{self.path.name}: n_ctx={self.n_ctx}, {self.n_gpu_layers} layers on the GPU"
        return self.plan.message(self.shape)

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` with the model's own tokenizer."""
        return len(self.llm.tokenize(text.encode("utf-8", "replace"), add_bos=False))

    def stream(self, system: str, user: str, max_tokens: int = 512, temperature: float = 0.6) -> Iterator[str]:
        """Yield the reply's text pieces as llama.cpp produces them."""
        if self.has_chat_template:
            messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            for part in self.llm.create_chat_completion(
                messages, max_tokens=max_tokens, temperature=temperature, stream=True
            ):
                delta = part["choices"][0].get("delta", {}).get("content")
                if delta:
                    yield delta
        else:
            prompt = f"{system}\n\n{user}\n\nAnswer:"
            for part in self.llm.create_completion(prompt, max_tokens=max_tokens, temperature=temperature, stream=True):
                text = part["choices"][0]["text"]
                if text:
                    yield text

    def close(self) -> None:
        """Free the model."""
        self.llm.close()


def load_llm(
    model_path: Path,
    n_ctx: int = LLM_DEFAULT_CTX,
    n_gpu_layers: int | None = None,
    free_vram: float | None = None,
    seed: int = 0,
) -> LocalLLM:
    """Load the GGUF at ``model_path`` as the memory plan says: the one set-up of the local model.

    :param n_ctx: wanted context (the model's own maximum, and the free GPU memory, may shorten it)
    :param n_gpu_layers: layers on the GPU (None: as many as the plan fits)
    :param free_vram: free GPU bytes (None: asked from the driver)
    """
    _check_model_file(model_path)
    shape = shape_from_gguf(model_path)
    plan = plan_llm(
        shape, free_vram_bytes() if free_vram is None else free_vram, n_ctx=min(n_ctx, shape.context_length)
    )
    layers = plan.n_gpu_layers if n_gpu_layers is None else n_gpu_layers
    llm = LocalLLM(model_path, n_ctx=plan.n_ctx, n_gpu_layers=layers, seed=seed)
    llm.shape, llm.plan = shape, plan
    return llm


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

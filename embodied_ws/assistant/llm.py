"""Local LLM backend over llama-cpp-python: load with a VRAM plan, stream tokens, split R1's <think>."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from embodied_ws.core.errors import UserError
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


class LocalLLM:
    """A GGUF model loaded in-process with llama.cpp.

    :param model_path: the ``.gguf`` file
    :param n_ctx: context length
    :param n_gpu_layers: layers to offload (0: CPU only; from :func:`planner.plan`)
    """

    def __init__(self, model_path: Path, n_ctx: int = 4096, n_gpu_layers: int = 0, seed: int = 0) -> None:
        if not model_path.is_file():
            raise UserError("model file not found; fetch it with `embodied-ws assistant download`", str(model_path))
        llama_cpp = require("llama_cpp", "pip install llama-cpp-python")
        try:
            self.llm = llama_cpp.Llama(
                str(model_path), n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, seed=seed, verbose=False
            )
        except ValueError as exc:
            raise UserError(f"llama.cpp cannot load the model: {exc}", str(model_path)) from None
        self.path = model_path
        self.n_ctx = n_ctx
        self.has_chat_template = "tokenizer.chat_template" in (self.llm.metadata or {})

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

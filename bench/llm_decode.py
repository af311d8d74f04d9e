"""LLM decode speed on the GPU vs the card's memory-bandwidth bound (one JSON object).

Decoding one token reads every weight once, so ``bandwidth ÷ model bytes`` bounds tokens/s; the ratio
says how close llama.cpp gets on this card. Layers are offloaded as the assistant's VRAM planner
chooses (``--n-gpu-layers`` overrides). Runs only where a CUDA GPU and a CUDA build of
llama-cpp-python exist; elsewhere it prints ``{"skipped": "<reason>"}`` and exits 0
(``--allow-cpu`` measures on the CPU anyway, e.g. to check the script with a tiny model).

    python bench/llm_decode.py                       # the downloaded default model (embodied-ws assistant download)
    python bench/llm_decode.py --model any.gguf --decode 128
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from embodied_ws.assistant.download import default_model_path
from embodied_ws.assistant.llm import load_llm
from embodied_ws.core.gpu import gpu_info

PROMPT = (
    "colcon build failed with: CMake Error at CMakeLists.txt:5 (find_package): By not providing "
    "Findament_cmake.cmake in CMAKE_MODULE_PATH this project has asked CMake to find a package "
    "configuration file provided by ament_cmake, but CMake did not find one. Explain the cause and the fix."
)


def skip_reason(allow_cpu: bool) -> str | None:
    """Why this machine cannot run the GPU measurement, or None when it can."""
    if allow_cpu:
        return None
    try:
        import llama_cpp
    except ImportError:
        return "llama-cpp-python is not installed"
    if gpu_info() is None:
        return "no NVIDIA GPU (NVML/nvidia-smi found none)"
    if not llama_cpp.llama_supports_gpu_offload():
        return "llama-cpp-python is a CPU build (make setup CUDA=1)"
    return None


def measure(model: Path, n_gpu_layers: int | None, n_ctx: int, decode: int) -> dict[str, float]:
    """Prompt and decode tokens/s (greedy, fixed token count) and the GPU memory the model took.

    The model is set up as the assistant sets it up (:func:`load_llm`); ``n_gpu_layers`` None: the plan's.
    """
    before = gpu_info()
    local = load_llm(model, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers)
    llm = local.llm
    after = gpu_info()
    tokens = llm.tokenize(PROMPT.encode())
    t0 = time.perf_counter()
    llm.eval(tokens)
    t1 = time.perf_counter()
    for _ in range(decode):
        token = llm.sample(temp=0.0)
        llm.eval([token])
    t2 = time.perf_counter()
    used = (before.memory_free_mb - after.memory_free_mb) if before and after else 0.0
    return {
        "prompt_tokens": len(tokens),
        "prompt_tok_per_s": len(tokens) / (t1 - t0),
        "decode_tokens": decode,
        "decode_tok_per_s": decode / (t2 - t1),
        "vram_used_mb": max(0.0, used),
        "n_gpu_layers": local.n_gpu_layers,
        "n_layers": local.shape.n_layers if local.shape else 0,
    }


def main(argv: list[str] | None = None) -> int:
    """Print one JSON object: tokens/s, the bandwidth bound and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="GGUF (default: the downloaded default model)")
    parser.add_argument("--decode", type=int, default=128, help="tokens to decode")
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--n-gpu-layers", type=int, default=None, help="default: the VRAM planner's choice")
    parser.add_argument("--allow-cpu", action="store_true", help="measure even without a GPU")
    args = parser.parse_args(argv)
    reason = skip_reason(args.allow_cpu)
    model = args.model or default_model_path()
    if reason is None and not model.is_file():
        reason = f"no model at {model} (embodied-ws assistant download, or --model FILE)"
    if reason:
        print(json.dumps({"skipped": reason}))
        return 0
    result = measure(model, args.n_gpu_layers, args.n_ctx, args.decode)
    layers, n_layers = int(result["n_gpu_layers"]), int(result["n_layers"])
    info = gpu_info()
    bandwidth = info.bandwidth_gb_s if info else None
    model_bytes = model.stat().st_size
    bound = bandwidth * 1e9 / model_bytes if bandwidth and layers >= n_layers else None
    out = {
        "model": model.name,
        "gpu": info.name if info else None,
        "bandwidth_gb_s": bandwidth,
        "model_mb": round(model_bytes / 2**20, 1),
        "n_gpu_layers": layers,
        "n_layers": n_layers,
        "prompt_tok_per_s": round(result["prompt_tok_per_s"], 1),
        "decode_tok_per_s": round(result["decode_tok_per_s"], 2),
        "bound_tok_per_s": round(bound, 2) if bound else None,
        "ratio": round(result["decode_tok_per_s"] / bound, 3) if bound else None,
        "vram_used_mb": round(result["vram_used_mb"]),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

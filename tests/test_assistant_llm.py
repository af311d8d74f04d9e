"""Local LLM pieces: tiny GGUF through llama.cpp, VRAM planner math, redaction, context packing, download check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_gguf import build_tiny_gguf

from embodied_ws.assistant.download import default_manifest, sha256_file, verify_sha256
from embodied_ws.assistant.llm import LocalLLM, load_llm, shape_from_gguf, split_think
from embodied_ws.assistant.prompt import pack_context
from embodied_ws.assistant.redact import redact
from embodied_ws.assistant.triage import Triage
from embodied_ws.core.errors import UserError
from embodied_ws.core.memory import GIB, R1_QWEN_32B_Q4, ModelShape, plan_llm


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_gguf(tmp_path_factory.mktemp("m") / "tiny.gguf", n_layer=3, n_head_kv=2, n_ctx=512)


def test_planner_matches_hand_computed_32b_values() -> None:
    s = R1_QWEN_32B_Q4
    # weights: 32.8e9 params × 4.85 bit / 8 × 1.2 = 23.862e9 bytes
    assert s.weights_bytes == pytest.approx(32.8e9 * 4.85 / 8 * 1.2)
    assert s.weights_bytes == pytest.approx(23.862e9, rel=1e-4)
    # KV cache f16 at 8192 tokens: 2 × 64 layers × 8 heads × 128 dim × 8192 × 2 bytes = 2 GiB exactly
    assert s.kv_bytes(8192) == 2 * 64 * 8 * 128 * 8192 * 2 == 2 * GIB
    # 24 GB card with 23 GiB free: 22.2 + 2 + 0.5 GiB do not fit, nor with 4096/2048 context
    p = plan_llm(s, 23 * GIB, n_ctx=8192)
    per_layer = (23.862e9 + 2 * GIB) / 64
    assert p.n_gpu_layers == int((23 * GIB - 0.5 * GIB) // per_layer) == 59
    assert p.n_ctx == 8192
    # an H200 (139 GiB free): everything on the GPU with the full 8192 context
    big = plan_llm(s, 139 * GIB, n_ctx=8192)
    assert big.n_gpu_layers == 64 and big.n_ctx == 8192
    # 24.3 GiB free: shrinking the context to 4096 (1 GiB KV) lets all layers fit
    mid = plan_llm(s, 24.3 * GIB, n_ctx=8192)
    assert mid.n_gpu_layers == 64 and mid.n_ctx == 4096
    # no GPU: CPU plan, and the message says so
    cpu = plan_llm(s, 0.0)
    assert cpu.n_gpu_layers == 0 and cpu.device == "cpu" and "CPU" in cpu.message(s)


def test_shape_read_from_gguf_metadata(tiny: Path) -> None:
    s = shape_from_gguf(tiny)
    assert (s.n_layers, s.n_kv_heads, s.head_dim, s.context_length) == (3, 2, 16, 512)
    assert s.n_params > 0 and 30 < s.bits_per_weight < 40  # f32 weights + header
    assert plan_llm(s, 8 * GIB).n_gpu_layers == 3


def test_bad_gguf_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "ggml-model-f16.bin"
    bad.write_bytes(b"tjgg" + b"\0" * 64)
    with pytest.raises(UserError, match="GGUF"):
        shape_from_gguf(bad)


def test_tiny_gguf_loads_and_streams(tiny: Path) -> None:
    llm = LocalLLM(tiny, n_ctx=256)
    pieces = list(llm.stream("You help.", "the ros node fails", max_tokens=16))
    assert len(pieces) >= 3 and all(isinstance(p, str) for p in pieces)
    assert llm.count_tokens("the ros node") > 0
    llm.close()


def test_one_llm_set_up_plans_then_loads(tiny: Path) -> None:
    """load_llm: the GGUF's own context caps the default, the plan on 0 free VRAM puts 0 layers on the GPU,
    and the prompt budget leaves room for the answer; no other module builds a llama_cpp.Llama."""
    llm = load_llm(tiny, free_vram=0.0)
    assert (llm.n_ctx, llm.n_gpu_layers) == (512, 0) and llm.plan is not None and llm.plan.device == "cpu"
    assert "CPU" in llm.describe() and llm.prompt_budget(10_000) == 256
    llm.close()
    llm.n_ctx = 8192  # the default context: doctor's 768-token answer leaves 8192 - 1024 for the prompt
    assert llm.prompt_budget(768) == 8192 - 1024
    root = Path(__file__).resolve().parents[1]
    builders = [
        str(f.relative_to(root))
        for f in [*(root / "embodied_ws").rglob("*.py"), *(root / "bench").glob("*.py")]
        if "Llama(" in f.read_text()
    ]
    assert builders == ["embodied_ws/assistant/llm.py"]


def test_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="assistant download"):
        LocalLLM(tmp_path / "none.gguf")


def test_split_think_while_streaming_and_done() -> None:
    assert split_think("<think>check the driver").think == "check the driver"
    done = split_think("<think>reasoning here</think>\nSource ROS 2 first.")
    assert done.think == "reasoning here" and done.answer == "Source ROS 2 first."
    assert split_think("plain answer").answer == "plain answer"


def test_redaction() -> None:
    text = (
        "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123 password: hunter22 Authorization: Bearer abc.def.ghi "
        "key AKIAABCDEFGHIJKLMNOP and ghp_abcdefghijklmnopqrstuvwxyz012345"
    )
    out = redact(text)
    for secret in ("hf_abcdef", "hunter22", "abc.def.ghi", "AKIAABCDEFGHIJKLMNOP", "ghp_abcdef"):
        assert secret not in out
    assert out.count("[REDACTED]") >= 5 and "password: [REDACTED]" in out


def test_context_packing_respects_budget_and_redacts() -> None:
    t = Triage()
    t.feed_text("RuntimeError: CUDA out of memory. token=sk-abcdefghijklmnopqrstuv\n" * 3)
    excerpts = [f"excerpt {i} " + "x" * 400 for i in range(20)]
    packed = pack_context("why?", t.findings(), excerpts, budget=600)
    assert packed.tokens <= 600 and packed.dropped > 0
    assert "cuda.oom" in packed.user and "sk-abcdef" not in packed.user


def test_download_manifest_and_sha256_check(tmp_path: Path) -> None:
    m = default_manifest()
    assert m.filename.endswith("Q4_K_M.gguf") and "DeepSeek-R1-Distill-Qwen-32B" in m.repo_id
    f = tmp_path / "w.gguf"
    f.write_bytes(b"weights")
    verify_sha256(f, sha256_file(f))
    with pytest.raises(UserError, match="sha256 mismatch"):
        verify_sha256(f, "0" * 64)


def test_doctor_llm_with_tiny_model(cli, tiny: Path) -> None:
    log = Path(__file__).parent / "fixtures" / "logs" / "cuda.library-missing.log"
    proc = cli("doctor", str(log), "--json", "--llm", "--model", str(tiny))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["findings"][0]["id"] == "cuda.library-missing"
    assert out["llm"]["n_gpu_layers"] == 0 and "CPU" in out["llm"]["plan"] and out["llm"]["prompt_tokens"] > 0
    assert out["unsure"] is False and out["llm"]["verdict"] is None  # a sure answer asks the model for no pick


def test_planner_shape_dataclass_is_frozen() -> None:
    with pytest.raises(AttributeError):
        R1_QWEN_32B_Q4.n_layers = 1  # type: ignore[misc]
    assert ModelShape(1e9, 2, 1, 8, 128, 4.0).kv_bytes(128) == 2 * 2 * 1 * 8 * 128 * 2

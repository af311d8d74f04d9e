"""GPU-workstation decisions, checked without a GPU: the llama-cpp-python build choice (fake nvidia-smi / nvcc /
pip on PATH), the driver query, the PPO device rule, the VRAM planner on 24 GB and 12 GB cards, doctor's GPU fields."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_ws.core.gpu import choose_torch_device, gpu_info
from embodied_ws.core.memory import GIB, R1_QWEN_32B_Q4, plan_llm

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "llama_build.py"

FAKE_SMI = """#!/bin/sh
case "$*" in
  *compute_cap,memory*) echo "NVIDIA GeForce RTX 4090, 550.54.14, 8.9, 24564, 23012" ;;
  *name,compute_cap*) echo "NVIDIA GeForce RTX 4090, 8.9" ;;
  *) echo "?" ;;
esac
"""
FAKE_NVCC = """#!/bin/sh
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Cuda compilation tools, release 12.4, V12.4.131"
"""
# a pip whose CUDA builds fail the way a broken toolkit does; CPU installs succeed
FAKE_PIP_CUDA_FAILS = """#!/bin/sh
echo "$CMAKE_ARGS|$*" >> "$(dirname "$0")/pip.calls"
case "$CMAKE_ARGS" in
  *GGML_CUDA=on*) echo "nvcc fatal   : Unsupported gpu architecture 'compute_89'" >&2
                  echo "ERROR: Failed building wheel for llama-cpp-python" >&2; exit 1 ;;
esac
if [ "$1" = wheel ]; then  # a built wheel where -w says
  while [ $# -gt 0 ]; do [ "$1" = -w ] && touch "$2/llama_cpp_python-0.0-py3-none-any.whl"; shift; done
fi
exit 0
"""
FAKE_PIP_OK = """#!/bin/sh
echo "$CMAKE_ARGS|$*" >> "$(dirname "$0")/pip.calls"
if [ "$1" = wheel ]; then  # a built wheel where -w says
  while [ $# -gt 0 ]; do [ "$1" = -w ] && touch "$2/llama_cpp_python-0.0-py3-none-any.whl"; shift; done
fi
exit 0
"""


def _exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture
def fakes(tmp_path: Path) -> dict[str, Path]:
    """Folders: one with nvidia-smi + nvcc, one with nvidia-smi only, one empty; a venv folder."""
    both, smi_only, empty, venv = (tmp_path / n for n in ("both", "smi", "empty", "venv"))
    for d in (both, smi_only, empty, venv):
        d.mkdir()
    _exe(both / "nvidia-smi", FAKE_SMI)
    _exe(both / "nvcc", FAKE_NVCC)
    _exe(smi_only / "nvidia-smi", FAKE_SMI)
    return {"both": both, "smi": smi_only, "empty": empty, "venv": venv}


def _build(path_dir: Path, venv: Path, cuda: str, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env["PATH"] = f"{path_dir}:/bin"  # no real nvidia-smi / nvcc can leak in
    env["XDG_CACHE_HOME"] = str(venv.parent / "cache")  # built wheels are kept here, never in the user's cache
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--venv", str(venv), "--cuda", cuda, *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


def _plan(path_dir: Path, venv: Path, cuda: str) -> dict:
    proc = _build(path_dir, venv, cuda, "--plan")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_gpu_and_toolkit_choose_the_cuda_build_for_the_cards_architecture(fakes) -> None:
    d = _plan(fakes["both"], fakes["venv"], "")
    assert d["variant"] == "cuda" and not d["forced"]
    assert d["cmake_args"] == "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=89"
    assert "RTX 4090" in d["reason"] and "CUDA 12.4" in d["reason"]
    assert d["spec"].startswith("llama-cpp-python==")  # the locked version is rebuilt, not a newer one


def test_no_gpu_means_the_cpu_build(fakes) -> None:
    d = _plan(fakes["empty"], fakes["venv"], "")
    assert d["variant"] == "cpu" and d["cmake_args"] == "" and "no NVIDIA GPU" in d["reason"]


def test_gpu_without_toolkit_is_a_cpu_build_that_says_how_to_get_cuda(fakes) -> None:
    d = _plan(fakes["smi"], fakes["venv"], "")
    assert d["variant"] == "cpu" and "no CUDA toolkit" in d["reason"] and "CUDA=1" in d["reason"]


def test_cuda_0_wins_and_cuda_1_forces(fakes) -> None:
    assert _plan(fakes["both"], fakes["venv"], "0")["variant"] == "cpu"
    forced = _plan(fakes["empty"], fakes["venv"], "1")
    assert forced["variant"] == "cuda" and forced["forced"]
    assert forced["cmake_args"].endswith("CMAKE_CUDA_ARCHITECTURES=all-major")  # no card visible to target


def test_cuda_home_counts_as_a_toolkit(fakes, tmp_path: Path) -> None:
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    _exe(home / "bin" / "nvcc", FAKE_NVCC)
    env = {**os.environ, "PATH": f"{fakes['smi']}:/bin", "CUDA_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--venv", str(fakes["venv"]), "--plan"], env=env, capture_output=True, text=True
    )
    assert json.loads(proc.stdout)["variant"] == "cuda"


def test_bad_cuda_value_is_one_line(fakes) -> None:
    proc = _build(fakes["empty"], fakes["venv"], "yes")
    assert proc.returncode != 0 and proc.stderr.strip().count("\n") == 0 and "CUDA='yes'" in proc.stderr


def test_failed_cuda_build_falls_back_to_cpu_with_one_line_and_is_not_retried_in_auto(fakes) -> None:
    pip = _exe(fakes["venv"] / "fake-pip", FAKE_PIP_CUDA_FAILS)
    proc = _build(fakes["both"], fakes["venv"], "", "--pip", str(pip))
    assert proc.returncode == 0
    warning = [ln for ln in proc.stdout.splitlines() if ln.startswith("warning:")]
    assert len(warning) == 1 and "CUDA build failed" in warning[0] and "make setup CUDA=1" in warning[0]
    assert "Unsupported gpu architecture" in warning[0] or "Failed building wheel" in warning[0]
    stamp = json.loads((fakes["venv"] / ".llama-build.json").read_text())
    assert stamp["variant"] == "cpu" and stamp["failed"].startswith("cuda:")
    calls = (fakes["venv"] / "pip.calls").read_text().splitlines()
    assert calls[0].startswith("-DGGML_CUDA=on") and "--no-cache-dir" in calls[0]  # a cached CPU wheel can't win
    assert calls[-2].startswith("-DLLAVA_BUILD=OFF|wheel")  # then the CPU build (no multimodal library) ...
    assert calls[-1].startswith("|install") and calls[-1].endswith(".whl")  # ... installed from the wheel cache
    # auto mode does not rebuild the failed CUDA build on every `make setup`; CUDA=1 retries it
    again = _build(fakes["both"], fakes["venv"], "", "--pip", str(pip))
    assert "CPU build kept" in again.stdout and len((fakes["venv"] / "pip.calls").read_text().splitlines()) == 3
    retry = _build(fakes["both"], fakes["venv"], "1", "--pip", str(pip))
    assert "CUDA build failed" in retry.stdout


def test_stamp_records_the_build_so_a_gpu_install_rebuilds_and_an_unchanged_one_does_nothing(fakes) -> None:
    pip = _exe(fakes["venv"] / "fake-pip", FAKE_PIP_OK)
    first = _build(fakes["empty"], fakes["venv"], "", "--pip", str(pip))
    assert "CPU build" in first.stdout
    assert json.loads((fakes["venv"] / ".llama-build.json").read_text())["variant"] == "cpu"
    n = len((fakes["venv"] / "pip.calls").read_text().splitlines())
    assert _build(fakes["empty"], fakes["venv"], "", "--pip", str(pip)).stdout == ""  # up to date: nothing
    assert len((fakes["venv"] / "pip.calls").read_text().splitlines()) == n
    gpu = _build(fakes["both"], fakes["venv"], "", "--pip", str(pip))  # the same venv, now with a GPU
    assert "CUDA build installed" in gpu.stdout
    assert json.loads((fakes["venv"] / ".llama-build.json").read_text())["variant"] == "cuda"
    back = _build(fakes["both"], fakes["venv"], "0", "--pip", str(pip))  # CUDA=0: back to a CPU build, rebuilt
    assert "CPU build" in back.stdout
    assert "--force-reinstall" in (fakes["venv"] / "pip.calls").read_text().splitlines()[-1]


def test_makefile_passes_cuda_to_the_build_step() -> None:
    out = subprocess.run(["make", "-n", "llama", "CUDA=1"], cwd=ROOT, capture_output=True, text=True).stdout
    assert 'scripts/llama_build.py --venv .venv --cuda "1"' in out


def test_driver_query_through_nvidia_smi(fakes, monkeypatch) -> None:
    monkeypatch.setenv("PATH", f"{fakes['both']}:/bin")
    info = gpu_info()
    assert info is not None and info.name == "NVIDIA GeForce RTX 4090" and info.compute_capability == "8.9"
    assert info.memory_free_mb == 23012 and info.bandwidth_gb_s == 1008.0
    monkeypatch.setenv("PATH", f"{fakes['empty']}:/bin")
    assert gpu_info() is None


def test_ppo_device_rule() -> None:
    import torch

    assert choose_torch_device("auto", image_policy=False) == "cpu"
    assert choose_torch_device("auto", image_policy=True) == ("cuda" if torch.cuda.is_available() else "cpu")
    assert choose_torch_device("cuda:1", image_policy=False) == "cuda:1"


def test_planner_on_24_and_12_gb_cards() -> None:
    """Hand-computed for DeepSeek-R1-Distill-Qwen-32B Q4_K_M (64 layers, 8 KV heads × 128, f16 cache):
    weights 32.8e9 × 4.85 / 8 × 1.2 = 23.862e9 B = 22.22 GiB; KV = 2 × 64 × 8 × 128 × 2 B = 256 KiB per token,
    so 2 GiB at 8192 tokens, 1 GiB at 4096; 0.5 GiB is kept in reserve.
    24 GiB free: 22.22 + 2 = 24.22 > 23.5, 22.22 + 1 = 23.22 ≤ 23.5 → all 64 layers, n_ctx 4096.
    12 GiB free: 11.5 GiB budget is under the weights even at n_ctx 2048 → partial offload at the asked
    context: (22.22 + 2) / 64 = 0.3785 GiB per layer → floor(11.5 / 0.3785) = 30 layers, n_ctx 8192."""
    s = R1_QWEN_32B_Q4
    assert s.weights_bytes / GIB == pytest.approx(22.224, abs=1e-3)
    p24 = plan_llm(s, 24 * GIB, n_ctx=8192)
    assert (p24.n_gpu_layers, p24.n_ctx, p24.device) == (64, 4096, "gpu")
    p12 = plan_llm(s, 12 * GIB, n_ctx=8192)
    assert (p12.n_gpu_layers, p12.n_ctx, p12.device) == (30, 8192, "gpu")
    assert "30/64 layers" in p12.message(s)


def test_doctor_env_json_has_the_gpu_fields(cli) -> None:
    proc = cli("doctor", "--env", "--json")
    assert proc.returncode == 0, proc.stderr
    gpu = json.loads(proc.stdout)["gpu"]
    for key in (
        "name",
        "driver",
        "cuda_driver",
        "cuda_runtime",
        "compute_capability",
        "memory_free_mb",
        "torch",
        "torch_cuda_available",
        "llama_offload",
        "llama_build",
    ):
        assert key in gpu
    assert gpu["torch"]  # torch is installed everywhere; the rest is None on a CPU machine
    if gpu["name"] is None:
        assert gpu["driver"] is None and gpu["compute_capability"] is None


def test_llm_decode_bench_skips_with_a_reason_or_runs_on_a_tiny_model(tmp_path: Path) -> None:
    from tiny_gguf import build_tiny_gguf

    model = build_tiny_gguf(tmp_path / "tiny.gguf")
    bench = ROOT / "bench" / "llm_decode.py"
    skipped = subprocess.run([sys.executable, str(bench), "--model", str(model)], capture_output=True, text=True)
    out = json.loads(skipped.stdout)
    if gpu_info() is None:
        assert "no NVIDIA GPU" in out["skipped"]
    cpu = subprocess.run(
        [sys.executable, str(bench), "--model", str(model), "--allow-cpu", "--decode", "8"],
        capture_output=True,
        text=True,
    )
    out = json.loads(cpu.stdout)
    assert out["decode_tok_per_s"] > 0 and out["n_gpu_layers"] == 0 and out["bound_tok_per_s"] is None


def test_a_built_wheel_is_reused_by_the_next_checkout_on_the_same_machine(fakes, tmp_path: Path) -> None:
    pip = _exe(fakes["venv"] / "fake-pip", FAKE_PIP_OK)
    assert _build(fakes["empty"], fakes["venv"], "0", "--pip", str(pip)).returncode == 0
    other = tmp_path / "venv2"  # a second clone's venv: same machine, same cache
    other.mkdir()
    pip2 = _exe(other / "fake-pip", FAKE_PIP_OK)
    assert _build(fakes["empty"], other, "0", "--pip", str(pip2)).returncode == 0
    calls = (other / "pip.calls").read_text().splitlines()
    assert len(calls) == 1 and calls[0].startswith("|install")  # no compile: the cached wheel

"""``embodied-ws doctor --env``: check the workstation's Python/ROS/CUDA/MuJoCo/LLM stack and print fixes."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from embodied_ws.core.gpu import gpu_info, nvidia_smi


@dataclass
class Check:
    """One environment check: ``status`` is ok, warn or fail; ``fix`` says what to do when not ok."""

    name: str
    status: str
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        """JSON form."""
        return asdict(self)


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def check_python() -> Check:
    """Python 3.12 (what ROS 2 Jazzy and LeRobot are built for); another version warns."""
    v = sys.version_info
    ok = (v.major, v.minor) == (3, 12)
    return Check(
        "python",
        "ok" if ok else "warn",
        f"Python {platform.python_version()} ({sys.executable})",
        "" if ok else "ROS 2 Jazzy and LeRobot 0.6 use Python 3.12",
    )


def _probe(code: str, timeout: float, env: dict[str, str] | None = None) -> tuple[bool, str]:
    """Run ``code`` in a fresh interpreter: (succeeded, its stdout or else its last stderr line)."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode == 0:
        return True, proc.stdout.strip()
    return False, (proc.stderr.strip().splitlines() or ["?"])[-1]


def check_ros() -> Check:
    """rclpy importable, and importing it in a fresh interpreter works (names ROS_DISTRO and the RMW)."""
    distro = os.environ.get("ROS_DISTRO")
    if not _has("rclpy"):
        return Check(
            "ros",
            "fail",
            f"rclpy not importable (ROS_DISTRO={distro})",
            "source /opt/ros/jazzy/setup.bash, or run `make setup` for the PyPI wheels",
        )
    ok, out = _probe("import rclpy, rclpy.impl.implementation_singleton; print(rclpy.__file__)", timeout=60)
    if not ok:
        return Check(
            "ros",
            "fail",
            f"rclpy import fails: {out}",
            "use the Python ROS was built for (3.12 for Jazzy); deactivate conda",
        )
    rmw = os.environ.get("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp (default)")
    return Check("ros", "ok", f"ROS_DISTRO={distro or 'wheels'}, rclpy at {out}, RMW={rmw}")


def check_torch() -> Check:
    """torch installed, with CUDA when built for it: driver, usable GPU, kernels for its architecture."""
    if not _has("torch"):
        return Check("torch", "fail", "torch not installed", "run `make setup`")
    import torch

    cuda_build = torch.version.cuda
    if not cuda_build:
        return Check(
            "torch",
            "warn",
            f"torch {torch.__version__} is a CPU-only build",
            "install a CUDA build of torch to train on the GPU",
        )
    driver = _nvidia_driver()
    if not torch.cuda.is_available():
        hint = "no NVIDIA driver found" if driver is None else f"driver {driver} cannot run CUDA {cuda_build}"
        return Check(
            "torch",
            "warn",
            f"torch {torch.__version__} (CUDA {cuda_build}) but no usable GPU: {hint}",
            "CPU training works; for the GPU install/upgrade the NVIDIA driver",
        )
    name = torch.cuda.get_device_name(0)
    cap = torch.cuda.get_device_capability(0)
    arch = f"sm_{cap[0]}{cap[1]}"
    if arch not in torch.cuda.get_arch_list():
        return Check(
            "torch",
            "fail",
            f"{name} is {arch}, this torch has kernels for {torch.cuda.get_arch_list()}",
            "install a torch build for this GPU architecture",
        )
    return Check("torch", "ok", f"torch {torch.__version__}, CUDA {cuda_build}, driver {driver}, {name} ({arch})")


def _nvidia_driver() -> str | None:
    return nvidia_smi("driver_version")


def check_mujoco_gl() -> Check:
    """MuJoCo renders offscreen with ``MUJOCO_GL`` (default egl), tried in a fresh interpreter."""
    backend = os.environ.get("MUJOCO_GL", "egl")
    code = (
        "import mujoco; m = mujoco.MjModel.from_xml_string("
        "'<mujoco><worldbody><geom size=\"1\"/></worldbody></mujoco>');"
        "r = mujoco.Renderer(m, 8, 8); d = mujoco.MjData(m); mujoco.mj_forward(m, d); r.update_scene(d); r.render()"
    )
    env = {**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": os.environ.get("PYOPENGL_PLATFORM", backend)}
    ok, out = _probe(code, timeout=120, env=env)
    if ok:
        return Check("mujoco_gl", "ok", f"offscreen rendering works with MUJOCO_GL={backend}")
    return Check(
        "mujoco_gl",
        "fail",
        f"MUJOCO_GL={backend} cannot render: {out}",
        "apt install libegl1 libegl-mesa0 (egl) or libosmesa6 and export MUJOCO_GL=osmesa",
    )


def check_glibc() -> Check:
    """glibc 2.28 or newer (what manylinux wheels need)."""
    lib, ver = platform.libc_ver()
    ok = lib == "glibc" and tuple(int(x) for x in ver.split(".")[:2]) >= (2, 28)
    return Check("glibc", "ok" if ok else "warn", f"{lib} {ver}", "" if ok else "manylinux wheels need glibc >= 2.28")


def check_video() -> Check:
    """ffmpeg found (on PATH or from imageio-ffmpeg) and torchcodec importable (LeRobot video datasets)."""
    ffmpeg = shutil.which("ffmpeg")
    if not ffmpeg and _has("imageio_ffmpeg"):
        import imageio_ffmpeg

        ffmpeg = imageio_ffmpeg.get_ffmpeg_exe()
    codec = "torchcodec importable" if _has("torchcodec") else "torchcodec missing (LeRobot video decoding)"
    if not ffmpeg:
        return Check("video", "fail", f"no ffmpeg; {codec}", "apt install ffmpeg or pip install imageio-ffmpeg")
    return Check(
        "video",
        "ok" if _has("torchcodec") else "warn",
        f"ffmpeg {ffmpeg}; {codec}",
        "" if _has("torchcodec") else "pip install torchcodec for LeRobot video datasets",
    )


def check_llama() -> Check:
    """llama-cpp-python installed for the assistant, with GPU offload where there is an NVIDIA driver."""
    if not _has("llama_cpp"):
        return Check(
            "llama_cpp",
            "warn",
            "llama-cpp-python not installed (assistant runs rules-only)",
            "pip install llama-cpp-python",
        )
    import llama_cpp

    gpu = bool(llama_cpp.llama_supports_gpu_offload())
    return Check(
        "llama_cpp",
        "ok" if gpu or _nvidia_driver() is None else "warn",
        f"llama-cpp-python {llama_cpp.__version__}, GPU offload {'yes' if gpu else 'no (CPU build)'}",
        "" if gpu else "for a GPU: make setup CUDA=1 (builds llama-cpp-python with GGML_CUDA=on)",
    )


def gpu_report() -> dict[str, object]:
    """Driver, CUDA, compute capability, memory, torch and llama.cpp offload in one record (``--json``: ``gpu``).

    Every field is present; values are None where a piece is missing (no GPU, no torch, no llama_cpp).
    """
    info = gpu_info()
    report: dict[str, object] = {
        "name": info.name if info else None,
        "driver": info.driver if info else None,
        "cuda_driver": info.cuda_driver if info else None,
        "compute_capability": info.compute_capability if info else None,
        "memory_total_mb": round(info.memory_total_mb) if info else None,
        "memory_free_mb": round(info.memory_free_mb) if info else None,
        "bandwidth_gb_s": info.bandwidth_gb_s if info else None,
        "torch": None,
        "cuda_runtime": None,
        "torch_cuda_available": None,
        "torch_arch_supported": None,
        "llama_cpp": None,
        "llama_offload": None,
        "llama_build": None,
    }
    if _has("torch"):
        import torch

        report["torch"] = torch.__version__
        report["cuda_runtime"] = torch.version.cuda
        report["torch_cuda_available"] = bool(torch.cuda.is_available())
        if torch.cuda.is_available():
            cap = torch.cuda.get_device_capability(0)
            report["torch_arch_supported"] = f"sm_{cap[0]}{cap[1]}" in torch.cuda.get_arch_list()
    if _has("llama_cpp"):
        import llama_cpp

        report["llama_cpp"] = llama_cpp.__version__
        report["llama_offload"] = bool(llama_cpp.llama_supports_gpu_offload())
    stamp = Path(sys.prefix) / ".llama-build.json"
    if stamp.is_file():
        try:
            report["llama_build"] = json.loads(stamp.read_text()).get("variant")
        except ValueError:
            report["llama_build"] = "unreadable stamp"
    return report


def check_gpu() -> Check:
    """One line on the GPU stack; the full record is :func:`gpu_report`."""
    r = gpu_report()
    if r["name"] is None:
        return Check("gpu", "ok", "no NVIDIA GPU: PPO, VLA and the assistant run on the CPU")
    detail = (
        f"{r['name']} (sm {r['compute_capability']}, {r['memory_free_mb']}/{r['memory_total_mb']} MiB free), "
        f"driver {r['driver']} (CUDA ≤ {r['cuda_driver']}), torch CUDA {r['cuda_runtime']}, "
        f"llama.cpp offload {'yes' if r['llama_offload'] else 'no'}"
    )
    if r["cuda_runtime"] and r["torch_cuda_available"] is False:
        return Check("gpu", "fail", detail, "the driver is older than torch's CUDA runtime: upgrade the driver")
    if r["llama_offload"] is False:
        return Check("gpu", "warn", detail, "rebuild llama-cpp-python with CUDA: make setup CUDA=1")
    return Check("gpu", "ok", detail)


CHECKS: list[Callable[[], Check]] = [
    check_python,
    check_ros,
    check_torch,
    check_gpu,
    check_mujoco_gl,
    check_glibc,
    check_video,
    check_llama,
]


def run_checks() -> list[Check]:
    """Run every check (each in its own guard so one broken piece does not hide the others)."""
    out = []
    for check in CHECKS:
        try:
            out.append(check())
        except (subprocess.SubprocessError, OSError, ImportError, RuntimeError) as exc:
            out.append(Check(check.__name__.removeprefix("check_"), "fail", f"{type(exc).__name__}: {exc}"))
    return out

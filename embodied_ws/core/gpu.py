"""What the NVIDIA driver says about the GPU: NVML (``nvidia-ml-py``) first, ``nvidia-smi`` as fallback.

Neither needs torch or a CUDA toolkit, so this works before torch is set up and in CPU-only
installs (where every query answers None).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import asdict, dataclass

#: peak memory bandwidth in GB/s of common cards (vendor data sheets), matched by substring of the
#: driver's device name; LLM decoding is bandwidth-bound, so this bounds its tokens/s
BANDWIDTH_GB_S: dict[str, float] = {
    "H200": 4800.0,
    "H100 SXM": 3350.0,
    "H100 PCIe": 2000.0,
    "H100": 3350.0,
    "A100-SXM4-80GB": 2039.0,
    "A100 80GB": 1935.0,
    "A100": 1555.0,
    "L40S": 864.0,
    "L4": 300.0,
    "A6000": 768.0,
    "RTX 6000 Ada": 960.0,
    "RTX 5090": 1792.0,
    "RTX 4090": 1008.0,
    "RTX 4080": 717.0,
    "RTX 4070 Ti": 504.0,
    "RTX 4060 Ti": 288.0,
    "RTX 3090": 936.0,
    "RTX 3080": 760.0,
    "RTX 3060": 360.0,
    "T4": 320.0,
    "V100": 900.0,
}


@dataclass(frozen=True)
class GpuInfo:
    """The first GPU as the driver reports it.

    :param name: device name (``NVIDIA GeForce RTX 4090``)
    :param driver: driver version (``550.54.14``)
    :param cuda_driver: highest CUDA version the driver supports (``12.4``), None when unknown
    :param compute_capability: ``8.9``
    :param memory_total_mb: total memory, MiB
    :param memory_free_mb: free memory now, MiB
    :param source: ``nvml`` or ``nvidia-smi``
    """

    name: str
    driver: str
    cuda_driver: str | None
    compute_capability: str | None
    memory_total_mb: float
    memory_free_mb: float
    source: str

    def to_dict(self) -> dict[str, object]:
        """JSON form."""
        return asdict(self)

    @property
    def bandwidth_gb_s(self) -> float | None:
        """Peak memory bandwidth from :data:`BANDWIDTH_GB_S`, None for an unknown card."""
        for key in sorted(BANDWIDTH_GB_S, key=len, reverse=True):
            if key.lower() in self.name.lower():
                return BANDWIDTH_GB_S[key]
        return None


def nvidia_smi(field: str) -> str | None:
    """The first GPU's value of ``--query-gpu=<field>`` (no units), or None without a usable nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return None
    return out.splitlines()[0].strip() if out else None


def _from_nvml(index: int) -> GpuInfo | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None  # no driver / no device: the usual CPU-machine answer
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()  # e.g. 12040
        name = pynvml.nvmlDeviceGetName(handle)
        driver = pynvml.nvmlSystemGetDriverVersion()
        return GpuInfo(
            name=name.decode() if isinstance(name, bytes) else str(name),
            driver=driver.decode() if isinstance(driver, bytes) else str(driver),
            cuda_driver=f"{cuda // 1000}.{(cuda % 1000) // 10}" if cuda else None,
            compute_capability=f"{major}.{minor}",
            memory_total_mb=mem.total / 2**20,
            memory_free_mb=mem.free / 2**20,
            source="nvml",
        )
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def _from_smi() -> GpuInfo | None:
    row = nvidia_smi("name,driver_version,compute_cap,memory.total,memory.free")
    if row is None:
        return None
    parts = [p.strip() for p in row.split(",")]
    if len(parts) != 5:
        return None
    try:
        total, free = float(parts[3]), float(parts[4])
    except ValueError:
        return None
    cap = parts[2] if parts[2] and parts[2][0].isdigit() else None
    return GpuInfo(parts[0], parts[1], None, cap, total, free, "nvidia-smi")


def gpu_info(index: int = 0) -> GpuInfo | None:
    """The GPU ``index`` as the driver reports it (NVML, else nvidia-smi), or None without one."""
    return _from_nvml(index) or (_from_smi() if index == 0 else None)


def choose_torch_device(requested: str, image_policy: bool) -> str:
    """The torch device for a PPO policy.

    ``auto`` keeps small MLP policies on the CPU — per-step inference of a 64×64 MLP on a GPU costs a
    host↔device copy per env step for no compute gain (SB3's own advice) — and puts image (CNN)
    policies on CUDA when torch sees a GPU. Any explicit value (``cpu``, ``cuda``, ``cuda:1``) wins.

    :param requested: ``ppo.device`` from the config
    :param image_policy: whether the observation holds camera images (a CNN policy)
    """
    if requested != "auto":
        return requested
    if not image_policy:
        return "cpu"
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"

"""GPU queries through nvidia-smi (no CUDA library needed, so it works before torch is set up)."""

from __future__ import annotations

import shutil
import subprocess


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

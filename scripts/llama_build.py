#!/usr/bin/env python3
"""Choose and make the llama-cpp-python build for this machine (run by ``make setup``; stdlib only).

Decision (``--cuda`` / ``make setup CUDA=...``):

- ``0``: CPU build, whatever the machine has.
- ``1``: CUDA build (``GGML_CUDA=on``) even when no GPU is visible (e.g. building an image).
- empty (auto): CUDA build when an NVIDIA GPU answers ``nvidia-smi`` **and** a CUDA toolkit is found
  (``nvcc`` on PATH, or ``$CUDA_HOME/bin/nvcc``); otherwise the CPU build, with one line saying why.

The CUDA build targets the visible cards' compute capabilities (``CMAKE_CUDA_ARCHITECTURES=89`` for
an RTX 4090) or, with no card visible, CMake's ``all-major``. A failed CUDA build falls back to the CPU
build with one line saying why and how to retry; auto mode does not retry the same failed build on
every ``make setup`` (``CUDA=1`` does). The stamp ``<venv>/.llama-build.json`` records what was built,
so a later install on a GPU machine (or a changed choice) rebuilds, and an unchanged one does nothing.

pip's wheel cache is keyed on the source, not on ``CMAKE_ARGS``, so builds run with ``--no-cache-dir`` and
the built wheel is kept in our own cache keyed on the spec, ``CMAKE_ARGS``, the CPU and the Python
(:func:`wheel_cache`): a second checkout on the same machine installs it instead of compiling again.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

PACKAGE = "llama-cpp-python"
STAMP_NAME = ".llama-build.json"


@dataclass
class Machine:
    """What the machine offers for a CUDA build."""

    gpus: list[str] = field(default_factory=list)  # "name (compute capability)"
    compute_caps: list[str] = field(default_factory=list)  # "8.9"
    nvcc: str | None = None
    cuda_version: str | None = None  # toolkit release, from nvcc --version


@dataclass
class Decision:
    """Which build to make and why."""

    variant: str  # "cpu" or "cuda"
    cmake_args: str
    reason: str
    forced: bool

    def key(self) -> str:
        """What identifies this build in the stamp."""
        return f"{self.variant}:{self.cmake_args}"


def _run(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def probe_machine(env: dict[str, str]) -> Machine:
    """Ask ``nvidia-smi`` and ``nvcc`` (found through ``env``'s PATH / CUDA_HOME) what is there."""
    path = env.get("PATH", "")
    m = Machine()
    smi = shutil.which("nvidia-smi", path=path)
    if smi:
        out = _run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"]) or ""
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2 and re.fullmatch(r"\d+\.\d+", parts[-1]):
                m.gpus.append(f"{parts[0]} ({parts[-1]})")
                m.compute_caps.append(parts[-1])
    nvcc = shutil.which("nvcc", path=path)
    cuda_home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if not nvcc and cuda_home and os.access(Path(cuda_home) / "bin" / "nvcc", os.X_OK):
        nvcc = str(Path(cuda_home) / "bin" / "nvcc")
    if nvcc:
        m.nvcc = nvcc
        found = re.search(r"release (\d+\.\d+)", _run([nvcc, "--version"]) or "")
        m.cuda_version = found.group(1) if found else None
    return m


def cuda_architectures(compute_caps: list[str]) -> str:
    """CMake's CUDA architecture list for these cards ("8.9" → "89"), or ``all-major`` when none is known."""
    archs = sorted({c.replace(".", "") for c in compute_caps}, key=int)
    return ";".join(archs) if archs else "all-major"


def decide(cuda: str, machine: Machine) -> Decision:
    """The build for ``cuda`` ("0", "1" or "" for auto) on ``machine``."""
    cuda = cuda.strip().lower()
    if cuda not in ("", "auto", "0", "1"):
        raise SystemExit(f"error: CUDA={cuda!r}: use CUDA=0 (CPU build), CUDA=1 (CUDA build) or leave it unset (auto)")
    cuda_args = f"-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES={cuda_architectures(machine.compute_caps)}"
    if cuda == "0":
        return Decision("cpu", "", "CUDA=0 asked for the CPU build", True)
    if cuda == "1":
        return Decision("cuda", cuda_args, "CUDA=1 asked for the CUDA build", True)
    if machine.gpus and machine.nvcc:
        toolkit = f"CUDA {machine.cuda_version}" if machine.cuda_version else machine.nvcc
        return Decision("cuda", cuda_args, f"NVIDIA GPU {', '.join(machine.gpus)} and {toolkit} found", False)
    if machine.gpus:
        return Decision(
            "cpu",
            "",
            f"NVIDIA GPU {', '.join(machine.gpus)} found but no CUDA toolkit (nvcc, CUDA_HOME): CPU build; "
            "install the CUDA toolkit, then `make setup CUDA=1`",
            False,
        )
    return Decision("cpu", "", "no NVIDIA GPU (nvidia-smi) found: CPU build", False)


def read_stamp(venv: Path) -> dict:
    """The recorded build, or {} when none was recorded."""
    try:
        return json.loads((venv / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return {}


def write_stamp(venv: Path, record: dict) -> None:
    """Record the build atomically."""
    tmp = venv / (STAMP_NAME + ".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(venv / STAMP_NAME)


def locked_version(lock: Path) -> str | None:
    """The pinned llama-cpp-python version in ``lock``."""
    try:
        for line in lock.read_text().splitlines():
            name, _, version = line.partition("==")
            if name.strip().lower().replace("_", "-") == PACKAGE:
                return version.strip()
    except OSError:
        pass
    return None


def installed_offload(python: str) -> bool | None:
    """Whether the installed llama_cpp can offload to a GPU (None: not importable)."""
    out = _run([python, "-c", "import llama_cpp; print(bool(llama_cpp.llama_supports_gpu_offload()))"])
    return None if out is None else out.strip() == "True"


#: llama.cpp's multimodal library (mtmd/llava) is not built: the assistant reads text, and the Python
#: package loads it only for image chat handlers (``import llama_cpp`` does not)
EXTRA_CMAKE_ARGS = "-DLLAVA_BUILD=OFF"


def wheel_cache(spec: str, cmake_args: str, python: str) -> Path:
    """Where the wheel built for ``spec`` with ``cmake_args`` on this CPU and Python is kept, so another checkout
    on the same machine (a second clone, CI) installs it in seconds instead of compiling llama.cpp again.

    The key holds the CPU's instruction-set flags: the CPU build targets the building machine (GGML_NATIVE),
    so a wheel is never reused on another processor. ``$XDG_CACHE_HOME`` (default ``~/.cache``)/embodied_ws."""
    flags = ""
    with contextlib.suppress(OSError):
        flags = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")), "")
    tag = _run([python, "-c", "import sys; print(sys.implementation.cache_tag)"]) or sys.version
    key = hashlib.sha256("|".join([spec, cmake_args, EXTRA_CMAKE_ARGS, platform.machine(), flags, tag]).encode())
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "embodied_ws" / "llama-wheels"
    return root / key.hexdigest()[:20]


def _last_error(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"error|fail", ln, re.I)] or lines or ["?"]
    return errors[-1].strip()[:200]


def pip_install(
    pip: list[str], spec: str, cmake_args: str, rebuild: bool, python: str = sys.executable
) -> tuple[bool, str]:
    """Install ``spec`` built with ``CMAKE_ARGS`` (from the machine's wheel cache when it was built before);
    (ok, last error line). ``--no-deps``: its dependencies come with the base requirements, installed at the
    same time (setup_venv.py)."""
    cache = wheel_cache(spec, cmake_args, python)
    wheels = sorted(cache.glob("*.whl"))
    if not wheels:
        args = f"{cmake_args} {EXTRA_CMAKE_ARGS}".strip()
        env = {**os.environ, "CMAKE_ARGS": args, "FORCE_CMAKE": "1"}
        env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        cache.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache.parent) as tmp:
            cmd = [*pip, "wheel", "-q", "--no-deps", "--no-cache-dir", "-w", tmp, spec]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            built = sorted(Path(tmp).glob("*.whl"))
            if proc.returncode != 0 or not built:
                return False, _last_error(proc)
            staged = Path(tmp) / "wheel"
            staged.mkdir()
            built[0].rename(staged / built[0].name)
            with contextlib.suppress(OSError):  # another setup on this machine just built the same: keep that
                staged.rename(cache)
        wheels = sorted(cache.glob("*.whl"))
    extra = ["--force-reinstall"] if rebuild else []
    proc = subprocess.run([*pip, "install", "-q", "--no-deps", *extra, str(wheels[0])], capture_output=True, text=True)
    return proc.returncode == 0, _last_error(proc) if proc.returncode else ""


def make_build(args: argparse.Namespace) -> int:
    """Decide, compare with the stamp, build when needed; always leaves a working build."""
    venv = Path(args.venv)
    python = str(venv / "bin" / "python")
    pip = args.pip.split() if args.pip else [python, "-m", "pip"]
    version = locked_version(Path(args.lock))
    spec = f"{PACKAGE}=={version}" if version else PACKAGE
    decision = decide(args.cuda, probe_machine(dict(os.environ)))
    stamp = read_stamp(venv)
    if args.plan:
        print(json.dumps({**asdict(decision), "spec": spec, "stamp": stamp}))
        return 0
    if stamp.get("key") == decision.key() and stamp.get("spec") == spec:
        return 0
    if decision.variant == "cuda" and not decision.forced and stamp.get("failed") == decision.key():
        print(
            f"llama-cpp-python: CPU build kept (the CUDA build failed before: {stamp.get('error')}); "
            "retry with `make setup CUDA=1`"
        )
        return 0
    if decision.variant == "cpu":
        offload = installed_offload(python)
        rebuild = offload is None or offload or stamp.get("variant") == "cuda"
        ok, error = pip_install(pip, spec, "", rebuild=bool(rebuild), python=python)
        if not ok:
            print(f"error: llama-cpp-python CPU build failed: {error}")
            return 1
        write_stamp(venv, {"key": decision.key(), "variant": "cpu", "spec": spec, "reason": decision.reason})
        print(f"llama-cpp-python: CPU build ({decision.reason})")
        return 0
    print(f"llama-cpp-python: building with CUDA ({decision.reason}; CMAKE_ARGS={decision.cmake_args}) ...")
    ok, error = pip_install(pip, spec, decision.cmake_args, rebuild=True, python=python)
    if ok:
        write_stamp(venv, {"key": decision.key(), "variant": "cuda", "spec": spec, "reason": decision.reason})
        print("llama-cpp-python: CUDA build installed (GPU offload on)")
        return 0
    ok_cpu, cpu_error = pip_install(pip, spec, "", rebuild=installed_offload(python) is None, python=python)
    if not ok_cpu:
        print(f"error: llama-cpp-python CUDA build failed ({error}) and the CPU build too ({cpu_error})")
        return 1
    write_stamp(
        venv,
        {
            "key": "cpu:",
            "variant": "cpu",
            "spec": spec,
            "failed": decision.key(),
            "error": error,
            "reason": "CUDA build failed",
        },
    )
    print(
        f"warning: llama-cpp-python CUDA build failed ({error}); using the CPU build — "
        "check nvcc/driver, then retry with `make setup CUDA=1`"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command line: ``llama_build.py --venv .venv --cuda "$(CUDA)" [--plan]``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", default=".venv")
    parser.add_argument("--cuda", default="", help="0, 1 or empty (auto)")
    parser.add_argument("--lock", default="requirements/lock.txt")
    parser.add_argument("--pip", default="", help="pip command (default: <venv>/bin/python -m pip)")
    parser.add_argument("--plan", action="store_true", help="print the decision as JSON; build nothing")
    return make_build(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

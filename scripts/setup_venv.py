#!/usr/bin/env python3
"""Fill the project's virtual environment (run by ``make setup``; stdlib only).

What takes the time on a fresh machine is installing ~3 GB of wheels (torch's CUDA build and its
NVIDIA libraries) and compiling llama.cpp. So:

1. ``uv`` (pinned, from PyPI) installs the locked requirements — base and, unless ROS 2 is sourced,
   the ROS 2 Jazzy wheels — in one resolution, with parallel downloads and unpacking. pip is the
   fallback (``--installer pip``, or when uv cannot be installed). uv is a well-kept installer; we only
   call it.
2. At the same time ``scripts/llama_build.py`` compiles llama-cpp-python (CPU or CUDA build, its own
   stamp and rules) in the background, installing it with ``--no-deps`` (its dependencies come with
   the base requirements), so the compile overlaps the downloads instead of following them.
3. The package itself is installed editable (pip, no build isolation: setuptools is already there).

Each phase's seconds go to ``<venv>/.setup-times.json`` (read by ``bench/install.py``) and one line
each to the terminal. The llama build's output is in ``<venv>/.llama-build.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: the uv release the setup installs (pinned: a new uv must not change how the lock is installed)
UV_VERSION = "0.13.9"


def run(cmd: list[str], **kwargs: object) -> None:
    """Run ``cmd``; exit with its status (and the command) when it fails."""
    proc = subprocess.run(cmd, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        print(f"error: setup step failed ({proc.returncode}): {' '.join(cmd)}", file=sys.stderr)
        sys.exit(proc.returncode or 1)


def install_uv(python: str) -> str | None:
    """The venv's uv executable, installed at the pinned version; None when it cannot be had."""
    uv = Path(python).parent / "uv"
    proc = subprocess.run(
        [python, "-m", "pip", "install", "-q", f"uv=={UV_VERSION}"], capture_output=True, text=True
    )
    if proc.returncode != 0 or not uv.is_file():
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        print(f"warning: uv {UV_VERSION} could not be installed ({last}); installing with pip (slower)")
        return None
    return str(uv)


def requirement_args(with_ros: bool) -> list[str]:
    """``-r``/``-c`` arguments for the locked requirements (ROS 2 wheels unless ROS is sourced)."""
    args = ["-r", "requirements/base.txt", "-c", "requirements/lock.txt"]
    if with_ros:
        args += ["-r", "requirements/ros.txt", "-c", "requirements/ros-lock.txt"]
    return args


def main(argv: list[str] | None = None) -> int:
    """Command line: ``setup_venv.py --venv .venv [--cuda ""] [--installer uv|pip]``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", default=".venv")
    parser.add_argument("--cuda", default="", help="llama-cpp-python build: empty (auto), 0 (CPU) or 1 (CUDA)")
    parser.add_argument("--installer", choices=("uv", "pip"), default="uv")
    args = parser.parse_args(argv)
    venv = Path(args.venv)
    python = str(venv / "bin" / "python")
    times: dict[str, float] = {}
    t0 = time.monotonic()

    def phase(name: str, since: float) -> float:
        now = time.monotonic()
        times[name] = round(now - since, 1)
        print(f"setup: {name} {times[name]:.0f} s", flush=True)
        return now

    t = t0
    run([python, "-m", "pip", "install", "-q", "--upgrade", "pip", "wheel", "setuptools<82"])
    uv = install_uv(python) if args.installer == "uv" else None
    t = phase("installer", t)

    venv.mkdir(exist_ok=True)
    llama_log = open(venv / ".llama-build.log", "w")  # noqa: SIM115 - closed after the build is waited for
    llama = subprocess.Popen(
        [python, "scripts/llama_build.py", "--venv", str(venv), "--cuda", args.cuda],
        stdout=llama_log,
        stderr=subprocess.STDOUT,
    )
    t_llama = t

    with_ros = not os.environ.get("ROS_DISTRO")
    print("setup: ROS 2 Jazzy wheels" if with_ros else f"setup: ROS {os.environ['ROS_DISTRO']} sourced: its rclpy")
    if uv:
        run([uv, "pip", "install", "--quiet", "--python", python, *requirement_args(with_ros)])
    else:
        run([python, "-m", "pip", "install", "-q", *requirement_args(with_ros)])
    t = phase("requirements", t)
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", "."])
    t = phase("package", t)

    code = llama.wait()
    llama_log.close()
    times["llama_build"] = round(time.monotonic() - t_llama, 1)
    for line in (venv / ".llama-build.log").read_text().splitlines():
        print(f"  {line}")
    print(f"setup: llama-cpp-python build {times['llama_build']:.0f} s (overlapping the requirements)")
    times["total"] = round(time.monotonic() - t0, 1)
    record = {"installer": "uv" if uv else "pip", "uv": UV_VERSION if uv else None, "seconds": times}
    (venv / ".setup-times.json").write_text(json.dumps(record, indent=1) + "\n")
    if code != 0:
        print("error: the llama-cpp-python build failed (see .venv/.llama-build.log)", file=sys.stderr)
        return code
    print(f"setup: done in {times['total'] / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())

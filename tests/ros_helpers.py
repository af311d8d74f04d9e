"""Helpers for tests that run real ROS 2 nodes in separate processes (DDS kept on this machine)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def isolate_dds() -> int:
    """Localhost-only discovery and a per-run domain id, inherited by every node we start."""
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    domain = int(os.environ.get("EMBODIED_TEST_DOMAIN", 1 + os.getpid() % 100))
    os.environ["ROS_DOMAIN_ID"] = str(domain)
    return domain


def start_node(module: str, *params: str) -> subprocess.Popen:
    """Start ``embodied_ws.ros.nodes.<module>`` with ``name:=value`` parameters."""
    args = [a for p in params for a in ("-p", p)]
    return subprocess.Popen(
        [sys.executable, "-m", f"embodied_ws.ros.nodes.{module}", "--ros-args", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop(proc: subprocess.Popen, sig: int | None = None) -> str:
    """Stop a node (SIGTERM, or ``sig``) and return its output."""
    if proc.poll() is None:
        if sig is None:
            proc.terminate()
        else:
            proc.send_signal(sig)
    try:
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out or ""


def wait_until(pred, timeout: float, every: float = 0.05) -> bool:
    """Poll ``pred`` until true or ``timeout`` seconds pass."""
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(every)
    return pred()

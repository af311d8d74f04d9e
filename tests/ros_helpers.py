"""Helpers for tests that run real ROS 2 nodes in separate processes (DDS kept on this machine)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def dds_environment() -> dict[str, str]:
    """Localhost-only discovery and a per-run domain id (``EMBODIED_TEST_DOMAIN`` overrides it).

    Tests marked ``ros`` get these in their environment through the ``dds_isolated`` fixture (conftest.py),
    so every node they start inherits them; nothing is set at import time.
    """
    domain = int(os.environ.get("EMBODIED_TEST_DOMAIN", 1 + os.getpid() % 100))
    return {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_DOMAIN_ID": str(domain)}


def start_node(module: str, *params: str) -> subprocess.Popen:
    """Start ``embodied_ws.ros.nodes.<module>`` with ``name:=value`` parameters.

    Only inside a test marked ``ros`` (its :func:`dds_environment` set): such a node never joins a lab's DDS
    domain, and ``make test`` runs those tests on their own, after the parallel run of the others, so the
    node keeps its rates in real time.
    """
    outside = {k: v for k, v in dds_environment().items() if os.environ.get(k) != v}
    if outside:
        raise RuntimeError(f"start_node({module!r}) outside a test marked ros: {sorted(outside)} not isolated")
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


#: ROS 2 Python packages (rclpy, messages, launch): only embodied_ws/ros and launch/ may import them
ROS_MODULES = [
    "rclpy",
    "std_msgs",
    "std_srvs",
    "sensor_msgs",
    "geometry_msgs",
    "trajectory_msgs",
    "diagnostic_msgs",
    "rosgraph_msgs",
    "builtin_interfaces",
    "launch",
    "launch_ros",
    "control_msgs",
]

_BLOCKER = """
import importlib.abc, sys
class _BlockRos(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"blocked ROS import: {name}", name=name)
        return None
BLOCKED = set(sys.argv[1].split(","))
sys.meta_path.insert(0, _BlockRos())
"""


def run_with_ros_blocked(code: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter where importing rclpy or any ROS message package fails.

    ``sys.argv[2:]`` of ``code`` are ``args``; the working directory is the repository root.
    """
    cmd = [sys.executable, "-c", _BLOCKER + code, ",".join(ROS_MODULES), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout)

"""Only embodied_ws/ros imports rclpy or ROS messages: every other module imports with them blocked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = [
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
]

SCRIPT = """
import importlib, importlib.abc, pathlib, sys
BLOCKED = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked ROS import: {name}")
        return None
sys.meta_path.insert(0, Block())
root = pathlib.Path(sys.argv[2])
for f in sorted((root / "embodied_ws").rglob("*.py")):
    mod = ".".join(f.relative_to(root).with_suffix("").parts)
    if mod.endswith("__init__"):
        mod = mod[: -len(".__init__")]
    if mod.startswith("embodied_ws.ros"):
        continue
    importlib.import_module(mod)
    print("ok", mod)
"""


def _run_with_ros_blocked(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` (the import SCRIPT or a variant) in a fresh interpreter with rclpy and ROS messages blocked."""
    cmd = [sys.executable, "-c", code, ",".join(BLOCKED), str(ROOT)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_every_module_outside_ros_imports_without_rclpy() -> None:
    proc = _run_with_ros_blocked(SCRIPT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = proc.stdout.split()
    assert "embodied_ws.cli" in imported and "embodied_ws.rl.train" in imported and "embodied_ws.tui.app" in imported


def test_ros_launch_plan_is_importable_without_rclpy_too() -> None:
    code = SCRIPT.replace('if mod.startswith("embodied_ws.ros"):\n        continue', "pass")
    code = code.replace("for f in sorted", "for f in [root / 'embodied_ws/ros/launch_plan.py'] or sorted")
    proc = _run_with_ros_blocked(code)
    assert proc.returncode == 0, proc.stderr[-2000:]

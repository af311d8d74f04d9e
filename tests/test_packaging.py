"""colcon builds the package (ament_python) and the install tree works as on a ROS 2 workstation."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a colcon build

ROOT = Path(__file__).resolve().parents[1]
NODES = ["mujoco_sim_node", "trainer_node", "lossy_relay"]
IGNORE = shutil.ignore_patterns(
    ".venv",
    ".git",
    "runs",
    "build",
    "install",
    "log",
    "__pycache__",
    "*.egg-info",
    ".pytest_cache",
    ".ruff_cache",
    "MUJOCO_LOG.TXT",
)


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    colcon = shutil.which("colcon", path=str(Path(sys.executable).parent)) or shutil.which("colcon")
    if colcon is None:
        pytest.skip("colcon not installed")
    ws = tmp_path_factory.mktemp("ws")
    shutil.copytree(ROOT, ws / "src" / "embodied_ws", ignore=IGNORE)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        [colcon, "build", "--base-paths", "src"], cwd=ws, capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return ws / "install"


def test_install_tree_layout(install: Path) -> None:
    lib = install / "embodied_ws" / "lib" / "embodied_ws"
    for node in NODES:
        assert (lib / node).is_file() and os.access(lib / node, os.X_OK), node
    share = install / "embodied_ws" / "share" / "embodied_ws"
    assert (share / "package.xml").is_file()
    for launch in ("train.launch.py", "sim.launch.py", "gazebo.launch.py"):
        assert (share / "launch" / launch).is_file()
    assert (share / "config" / "train" / "reach.yaml").is_file() and (
        share / "config" / "dr" / "default.yaml"
    ).is_file()
    assert (share / "models" / "arm3" / "scene.xml").is_file()
    marker = install / "embodied_ws" / "share" / "ament_index" / "resource_index" / "packages" / "embodied_ws"
    assert marker.is_file()


def _installed_env(install: Path) -> dict[str, str]:
    site = next((install / "embodied_ws" / "lib").glob("python3*/site-packages"))
    return {**os.environ, "AMENT_PREFIX_PATH": str(install / "embodied_ws"), "PYTHONPATH": str(site)}


def test_ament_index_finds_the_share_directory(install: Path) -> None:
    code = (
        "from ament_index_python.packages import get_package_share_directory as g; "
        "import embodied_ws.core.paths as p; print(g('embodied_ws')); print(p.share_dir()); print(p.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_installed_env(install), cwd="/", timeout=120
    )
    assert out.returncode == 0, out.stderr
    share, resolved, module = out.stdout.split()
    assert share == str(install / "embodied_ws" / "share" / "embodied_ws")
    assert resolved == share and module.startswith(str(install))


@pytest.mark.ros
def test_a_node_starts_from_lib(install: Path) -> None:
    exe = install / "embodied_ws" / "lib" / "embodied_ws" / "mujoco_sim_node"
    proc = subprocess.Popen(
        [sys.executable, str(exe), "--ros-args", "-p", "mode:=lockstep"],
        cwd="/",
        env=_installed_env(install),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen = []
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if "in lockstep mode" in line:
                break
    finally:
        proc.terminate()
        rest, _ = proc.communicate(timeout=30)
    out = "".join(seen) + (rest or "")
    assert "arm3/reach in lockstep mode" in out, out[-2000:]


@pytest.mark.parametrize("lock", ["requirements/lock.txt", "requirements/ros-lock.txt"])
def test_lock_files_pin_each_package_once(lock: str) -> None:
    """A merge that keeps two pins of one package makes pip's resolver fail (ResolutionImpossible) in CI."""
    names: dict[str, str] = {}
    for line in (Path(__file__).parents[1] / lock).read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name = re.split(r"[=<>!~\[ ;@]", line, maxsplit=1)[0].strip().lower().replace("_", "-").replace(".", "-")
        assert name not in names, f"{lock}: {names[name]!r} and {line!r} pin the same package"
        names[name] = line

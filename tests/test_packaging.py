"""colcon builds the package (ament_python), pip installs its wheel, and both installs work outside the checkout.

The wheel test installs ``pip wheel`` output into a fresh venv whose only other packages are the test
venv's (bridged by a ``.pth`` without its editable install of this package), then runs the CLI from a
folder outside the source tree: every file the package opens at run time must have been shipped.
"""

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
    site = next((install / "embodied_ws" / "lib").glob("python3*/site-packages"))
    missing = [f for f in _shipped_package_files() if not (site / f).is_file()]
    assert not missing, f"package files the install lacks (setup.py package_data): {missing}"


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


# ---------------------------------------------------------------------- pip: the wheel in a fresh venv
def _shipped_package_files() -> list[str]:
    """Non-Python files of the package in git (rules, similarity examples, styles): all opened at run time."""
    out = subprocess.run(["git", "ls-files", "embodied_ws"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [f for f in out.stdout.split() if not f.endswith(".py")]


#: a .pth line: the test venv's packages (and their own .pth hooks: ROS wheels, cmeel), minus its editable
#: install of embodied_ws, so the only embodied_ws importable is the installed wheel
BRIDGE = (
    "import site, sys; site.addsitedir({site!r}); "
    "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')]; "
    "sys.path[:] = [p for p in sys.path if '__editable__' not in p and p.rstrip('/') != {root!r}]\n"
)


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the package installed from its wheel (built from a copy of the checkout)."""
    import sysconfig
    import zipfile

    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work / "dist"),
         str(src)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = (work / "dist").glob("embodied_ws-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in _shipped_package_files() if f not in names]
    assert not missing, f"package files missing from the wheel (setup.py package_data): {missing}"
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    # pip of the test venv installs into the new one (which sees nothing of the test venv yet)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--force-reinstall",
         "--no-index", "-q", str(wheel)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    new_site = next((venv / "lib").glob("python3*/site-packages"))
    bridge = BRIDGE.format(site=sysconfig.get_paths()["purelib"], root=str(ROOT))
    (new_site / "zz_test_venv_packages.pth").write_text(bridge)
    return venv


def _in_venv(venv: Path, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``args`` (the first one from the venv's bin/) from ``cwd``, the checkout nowhere in the environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EMBODIED_WS_SHARE", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    exe = str(venv / "bin" / args[0])
    return subprocess.run([exe, *args[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_wheel_install_imports_from_the_venv_not_the_checkout(wheel_venv: Path, tmp_path: Path) -> None:
    code = (
        "import json, sys, embodied_ws; from embodied_ws.core.paths import share_dir; "
        "print(json.dumps({'file': embodied_ws.__file__, 'share': str(share_dir()), 'path': sys.path}))"
    )
    proc = _in_venv(wheel_venv, "python", "-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    import json

    out = json.loads(proc.stdout)
    assert Path(out["file"]).is_relative_to(wheel_venv), out["file"]
    assert Path(out["share"]) == wheel_venv / "share" / "embodied_ws", "models/config from the venv's share/"
    assert not any(p.rstrip("/") == str(ROOT) or "__editable__" in p for p in out["path"]), out["path"]


def test_wheel_install_runs_the_cli_outside_the_source_tree(wheel_venv: Path, tmp_path: Path) -> None:
    import json

    from deploy_helpers import untrained_run

    log = tmp_path / "train.log"
    log.write_text((ROOT / "tests" / "fixtures" / "logs" / "cuda.oom.log").read_text())
    proc = _in_venv(wheel_venv, "embodied-ws", "doctor", str(log), "--json", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    findings = json.loads(proc.stdout)["findings"]
    assert findings[0]["id"] == "cuda.oom"
    assert any(f["stage"] == "similarity" for f in findings), "the similarity stage read its shipped examples"

    proc = _in_venv(wheel_venv, "embodied-ws", "train", "--help", cwd=tmp_path)
    assert proc.returncode == 0 and "--ray-address" in proc.stdout, proc.stderr

    proc = _in_venv(wheel_venv, "embodied-ws", "robots", cwd=tmp_path)
    assert proc.returncode == 0 and "arm3" in proc.stdout, proc.stdout + proc.stderr

    run = untrained_run(tmp_path / "run")  # exported the way `embodied-ws train` exports
    proc = _in_venv(wheel_venv, "embodied-ws", "deploy", str(run / "policy"), "--check", "--json", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["state_joints"] == ["base_yaw", "shoulder", "elbow"]

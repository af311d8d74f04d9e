"""Shared fixtures: the foreign Gymnasium reacher model, a CLI runner, ROS test isolation and skipping."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ros_helpers import dds_environment

os.environ.setdefault("MUJOCO_GL", "egl")
ROOT = Path(__file__).resolve().parents[1]


def _has_rclpy() -> bool:
    try:
        return importlib.util.find_spec("rclpy") is not None
    except ImportError:  # an import hook that refuses it
        return False


HAS_RCLPY = _has_rclpy()
#: why ROS tests skip on a machine without ROS 2
NO_RCLPY = "rclpy (ROS 2) is not installed: source ROS 2 Jazzy, or `make setup` installs its wheels"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``ros`` skip with a reason when rclpy is missing."""
    if HAS_RCLPY:
        return
    skip = pytest.mark.skip(reason=NO_RCLPY)
    for item in items:
        if item.get_closest_marker("ros") is not None:
            item.add_marker(skip)


@pytest.fixture
def dds_isolated(monkeypatch: pytest.MonkeyPatch) -> int:
    """Localhost-only DDS discovery and this run's ROS domain for the test and every node it starts."""
    env = dds_environment()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return int(env["ROS_DOMAIN_ID"])


@pytest.fixture(autouse=True)
def _ros_tests_are_isolated(request: pytest.FixtureRequest) -> None:
    """Every test marked ``ros`` runs with :func:`dds_isolated`."""
    if request.node.get_closest_marker("ros") is not None:
        request.getfixturevalue("dds_isolated")


@pytest.fixture(scope="session")
def reacher_xml() -> str:
    """Gymnasium's own reacher.xml: a model we did not write."""
    import gymnasium

    path = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / "reacher.xml"
    assert path.is_file()
    return str(path)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``embodied-ws`` in a subprocess (the way users do)."""
    return subprocess.run(
        [sys.executable, "-m", "embodied_ws.cli", *args],
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def train_cmd(runs: Path, name: str, sets: list[str], *extra: str) -> list[str]:
    """``embodied-ws train --json`` for run ``name`` under ``runs`` with ``--set`` overrides."""
    args = [a for s in sets for a in ("--set", s)]
    return [
        sys.executable,
        "-m",
        "embodied_ws.cli",
        "train",
        "--name",
        name,
        "--runs",
        str(runs),
        "--json",
        *args,
        *extra,
    ]


@pytest.fixture
def cli():
    """The CLI runner."""
    return run_cli

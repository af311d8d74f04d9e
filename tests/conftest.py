"""Shared fixtures: small configs, the foreign Gymnasium reacher model, a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Register the project's markers (select with ``-m "not slow"``, ``-m ros``)."""
    config.addinivalue_line("markers", "slow: takes more than ~10 s")
    config.addinivalue_line("markers", "ros: starts real ROS 2 nodes in separate processes")


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

"""The test suite's own setup: registered markers, ROS tests skipping cleanly where rclpy is missing."""

from __future__ import annotations

import configparser

import pytest
from conftest import NO_RCLPY
from ros_helpers import ROOT, run_with_ros_blocked, start_node

ROS_TEST_MODULES = ["tests/test_ros_cdr.py", "tests/test_ros_nodes.py", "tests/test_ros_launch_and_assets.py"]


def test_slow_and_ros_markers_are_registered_and_enforced() -> None:
    ini = configparser.ConfigParser()
    ini.read(ROOT / "pytest.ini")
    markers = {line.split(":")[0].strip() for line in ini["pytest"]["markers"].strip().splitlines()}
    assert {"slow", "ros"} <= markers
    assert "--strict-markers" in ini["pytest"]["addopts"]


def test_ros_tests_skip_with_a_reason_when_rclpy_is_missing() -> None:
    code = (
        "import pytest\n"
        f"sys.exit(pytest.main(['-q', '-rs', '-m', 'ros', '-p', 'no:cacheprovider', *{ROS_TEST_MODULES!r}]))\n"
    )
    proc = run_with_ros_blocked(code)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "error" not in out.lower() and "passed" not in out, out[-3000:]
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) >= 3 and all(NO_RCLPY in line for line in skipped), out[-3000:]


def test_a_node_starts_only_inside_a_test_marked_ros() -> None:
    """``make test`` runs the tests marked ``ros`` on their own after the parallel run, and only they get the
    isolated DDS environment: a node started elsewhere is refused before its process exists."""
    with pytest.raises(RuntimeError, match="outside a test marked ros"):
        start_node("sim_node")

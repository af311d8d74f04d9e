"""Each log format a workstation produces is recognised with its severity and source."""

from __future__ import annotations

import pytest

from embodied_ws.assistant.parsers import is_error, parse_line

CASES = [
    ("[INFO] [1700000000.123] [talker]: Publishing: 'hi'", "rcl", "info", "talker"),
    ("[policy_node-1] [WARN] [1772446273.2] [policy_node]: no message on /joint_states", "rcl", "warn", "policy_node"),
    ("[ERROR] [launch]: Caught exception in launch", "launch", "error", "launch"),
    ("Failed   <<< arm_controller [2.05s, exited with code 1]", "colcon", "error", "arm_controller"),
    ("Starting >>> px4_msgs", "colcon", "info", "px4_msgs"),
    ("CMake Error at CMakeLists.txt:11 (find_package):", "cmake", "error", "CMakeLists.txt:11"),
    ("Traceback (most recent call last):", "python", "error", ""),
    ('  File "/home/lab/sim.py", line 4, in <module>', "python", "info", "/home/lab/sim.py:4"),
    ("ValueError: XML Error: Schema violation", "python", "error", "ValueError"),
    ("[spot_ros2-1] AttributeError: _ARRAY_API not found", "python", "error", "AttributeError"),
    ("RuntimeError: CUDA error: no kernel image is available", "cuda", "error", "CUDA error"),
    ("ncclSystemError: System call failed", "cuda", "error", "ncclSystemError"),
    ("WARNING: Nan, Inf or huge value in QACC at DOF 0. The simulation is unstable. Time = 0.0000.", "mujoco", "warn",
     "t=0.0000"),
    ("[gazebo-1] [Err] [SystemLoader.cc:92] Failed to load system plugin", "gazebo", "error", "SystemLoader.cc:92"),
    ("[Msg] [Server.cc:10] Loaded level [3]", "gazebo", "info", "Server.cc:10"),
    ("gguf_init_from_file: invalid magic characters tjgg", "llama.cpp", "error", "gguf_init_from_file"),
    ("llama_model_loader: loaded meta data with 24 key-value pairs", "llama.cpp", "info", "llama_model_loader"),
    ("just some output", "text", "info", ""),
]  # fmt: skip


@pytest.mark.parametrize("line,kind,severity,source", CASES)
def test_formats(line: str, kind: str, severity: str, source: str) -> None:
    p = parse_line(line)
    assert (p.kind, p.severity, p.source) == (kind, severity, source)


def test_is_error() -> None:
    assert is_error("Failed   <<< pkg [1s]") and not is_error("[INFO] [1.0] [n]: fine")

"""Missing outside things are one line and a non-zero exit: no network for ``assistant download``, no robot for
``deploy`` (nothing on /joint_states). Real processes: the CLI in a subprocess, real sockets, real nodes."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ros_helpers import ROOT, start_node, stop
from test_cli_errors import _assert_one_line_error


def _closed_port() -> int:
    """A localhost port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _download(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    clean.update(HF_HOME=str(tmp_path / "hf_home"), **env)
    return subprocess.run(
        [sys.executable, "-m", "embodied_ws.cli", "assistant", "download", "--dest", str(tmp_path / "models")],
        cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


class _RefusingHub(http.server.BaseHTTPRequestHandler):
    """A hub endpoint that answers every request with 403 (a proxy or firewall in the way)."""

    def _refuse(self) -> None:
        self.send_response(403)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"blocked by proxy\n")

    do_GET = do_HEAD = do_POST = _refuse

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_hub() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RefusingHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_assistant_download_without_network_is_one_line(tmp_path: Path) -> None:
    """Hub endpoint on a closed localhost port (no real network is touched): one line naming it, exit 2, no
    download folder left behind."""
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    proc = _download(tmp_path, HF_ENDPOINT=endpoint)
    _assert_one_line_error(proc, "cannot reach the model hub", endpoint, "DeepSeek")
    assert not (tmp_path / "models").exists()
    proc = _download(tmp_path, HF_HUB_OFFLINE="1")  # offline mode: the same, without a connection attempt
    _assert_one_line_error(proc, "cannot reach the model hub", "offline mode")
    assert proc.stdout == ""


def test_assistant_download_from_a_refusing_hub_is_one_line(tmp_path: Path, refusing_hub: str) -> None:
    proc = _download(tmp_path, HF_ENDPOINT=refusing_hub)
    _assert_one_line_error(proc, "cannot reach the model hub", refusing_hub, "403")
    assert not (tmp_path / "models").exists()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from deploy_helpers import untrained_run

    return untrained_run(tmp_path_factory.mktemp("norobot") / "run")


@pytest.mark.ros
def test_deploy_without_a_robot_says_so_and_exits_2(run: Path, cli) -> None:
    proc = cli("deploy", str(run), "--wait", "2", "--duration", "5")
    _assert_one_line_error(proc, "/joint_states", "no robot", "within 2 s", "--wait")
    assert proc.stdout == ""


@pytest.mark.ros
@pytest.mark.slow
def test_deploy_with_a_robot_passes_the_wait_and_commands_it(run: Path, cli) -> None:
    sim = start_node("mujoco_sim_node", "mode:=realtime")
    try:
        proc = cli("deploy", str(run), "--wait", "30", "--duration", "3", "--json")
    finally:
        stop(sim)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["published"] > 0, out

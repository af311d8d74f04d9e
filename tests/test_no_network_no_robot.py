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
    """A hub endpoint behind a proxy that answers 403; with ``lists_files`` the file listing (paths-info) still
    answers, so the refusal comes at the transfer itself."""

    lists_files = False

    def _refuse(self) -> None:
        self.send_response(403)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"blocked by proxy\n")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not (self.lists_files and "/paths-info/" in self.path):
            self._refuse()
            return
        from embodied_ws.assistant.download import default_manifest

        sha = "0" * 64
        body = json.dumps([{"type": "file", "path": default_manifest().filename, "size": 123, "oid": "1" * 40,
                            "lfs": {"oid": sha, "size": 123, "pointerSize": 130}}]).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_HEAD = _refuse

    def log_message(self, *args: object) -> None:
        pass


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def refusing_hub() -> Iterator[str]:
    yield from _serve(_RefusingHub)


@pytest.fixture
def hub_refusing_the_file() -> Iterator[str]:
    yield from _serve(type("ListsFiles", (_RefusingHub,), {"lists_files": True}))


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


def test_assistant_download_refused_at_the_transfer_is_one_line(tmp_path: Path, hub_refusing_the_file: str) -> None:
    """The hub lists the file, then refuses it: the notice that the transfer starts, then one error line with the
    root cause (the 403), exit 2; nothing in the folder pretends to be the model."""
    proc = _download(tmp_path, HF_ENDPOINT=hub_refusing_the_file)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    notice, error = proc.stderr.strip().splitlines()
    assert notice.startswith("downloading ") and error.startswith("error: "), proc.stderr
    assert "download failed" in error and "403" in error and "run it again to resume" in error, error
    assert proc.stdout == ""
    assert not list((tmp_path / "models").glob("*.gguf"))


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

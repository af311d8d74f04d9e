"""``doctor`` on logs that are not plain text files: gzipped logs are read, binary data and empty logs are named
as such (one line, exit 2) instead of "nothing failed"."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from test_cli_errors import _assert_one_line_error

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
TRACEBACK_LOG = FIXTURES / "mujoco.xml-parse.log"  # a Python traceback of a MuJoCo model that does not parse


def _doctor_json(cli, source: Path) -> dict:
    proc = cli("doctor", str(source), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_gzipped_log_is_decompressed(cli, tmp_path: Path) -> None:
    text = TRACEBACK_LOG.read_bytes()
    assert b"Traceback" in text
    plain = _doctor_json(cli, TRACEBACK_LOG)
    (tmp_path / "run.log.gz").write_bytes(gzip.compress(text))
    (tmp_path / "misnamed.log").write_bytes(gzip.compress(text))  # gzip by its bytes, whatever the name
    for name in ("run.log.gz", "misnamed.log"):
        out = _doctor_json(cli, tmp_path / name)
        assert out["findings"][0]["id"] == "mujoco.xml-parse", out
        assert out["lines"] == plain["lines"] and out["error_lines"] == plain["error_lines"] > 0
        assert "message" not in out  # not "nothing failed"
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "launch.log.gz").write_bytes(gzip.compress(text))  # rotated logs in a log folder
    assert _doctor_json(cli, folder)["findings"][0]["id"] == "mujoco.xml-parse"


def test_binary_data_is_not_a_text_log(cli, tmp_path: Path) -> None:
    noise = random.Random(0).randbytes(4096)
    (tmp_path / "noise.log").write_bytes(noise)
    (tmp_path / "noise.gz").write_bytes(gzip.compress(noise))
    for name in ("noise.log", "noise.gz"):
        _assert_one_line_error(cli("doctor", str(tmp_path / name)), name, "not a text log")
    cut = gzip.compress(TRACEBACK_LOG.read_bytes())
    (tmp_path / "cut.log.gz").write_bytes(cut[: len(cut) // 2])
    _assert_one_line_error(cli("doctor", str(tmp_path / "cut.log.gz")), "cut.log.gz", "not a readable gzip file")


def test_empty_log_says_empty(cli, tmp_path: Path) -> None:
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "empty.log.gz").write_bytes(gzip.compress(b""))
    for name in ("empty.log", "empty.log.gz"):
        _assert_one_line_error(cli("doctor", str(tmp_path / name), "--json"), name, "empty log")
    proc = subprocess.run(
        [sys.executable, "-m", "embodied_ws.cli", "doctor", "-"],
        input="",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    _assert_one_line_error(proc, "<stdin>", "empty log")


def test_text_with_a_few_non_utf8_bytes_is_still_a_log(cli, tmp_path: Path) -> None:
    text = TRACEBACK_LOG.read_bytes().replace(b"Traceback", b"Traceback \xe9t\xe9", 1)  # a Latin-1 word
    (tmp_path / "latin1.log").write_bytes(text)
    assert _doctor_json(cli, tmp_path / "latin1.log")["findings"][0]["id"] == "mujoco.xml-parse"
    (tmp_path / "ok.log").write_text("[INFO] [talker]: Publishing: 'Hello World: 1'\n")
    assert _doctor_json(cli, tmp_path / "ok.log")["message"].startswith("No error line")

"""Progress of long work without a terminal: plain lines on stdout and in the run's train.log."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_ws.core.progress import ProgressReporter, format_duration, track

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^train: [\d,]+/[\d,]+ steps \(\d+\.\d%\) \| [\d.]+k?/s( \| .*)? \| \S+ elapsed( \| ETA \S+)?$")


def test_plain_lines_when_not_a_terminal(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    rep = ProgressReporter("job", 100, "items", interval=0, log_file=log, tty=False)
    rep.start()
    rep.update(40, "succ 50%")
    rep.close()
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("job: 0/100 items (0.0%)")
    assert out[1].startswith("job: 40/100 items (40.0%)") and "succ 50%" in out[1] and "ETA" in out[1]
    assert len(out) == 3
    assert len(log.read_text().splitlines()) == 3


def test_interval_limits_the_lines(capsys: pytest.CaptureFixture[str]) -> None:
    rep = ProgressReporter("job", 1000, interval=3600, tty=False)
    rep.start()
    for i in range(1000):
        rep.update(i + 1)
    rep.close()
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2  # the first and the final line only
    assert out[-1].startswith("job: 1,000/1,000 steps (100.0%)") and "ETA" not in out[-1]


def test_disabled_prints_nothing_but_logs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    rep = ProgressReporter("job", 10, enabled=False, interval=0, log_file=log, tty=False)
    rep.start()
    rep.update(5)
    rep.close()
    assert capsys.readouterr().out == ""
    assert "job: 5/10" in log.read_text()


def test_track_reports_every_item(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBODIED_WS_PROGRESS_INTERVAL", "0")
    assert list(track(3, "record-demos", "episodes")) == [0, 1, 2]
    out = capsys.readouterr().out
    assert "record-demos: 3/3 episodes (100.0%)" in out


def test_format_duration() -> None:
    assert (format_duration(42), format_duration(725), format_duration(10920)) == ("42s", "12m05s", "3h02m")


@pytest.mark.slow
def test_train_prints_progress_lines_when_stdout_is_a_pipe(tmp_path: Path) -> None:
    sets = ["train.total_timesteps=8192", "train.checkpoint_every=4096", "train.eval_every=0", "train.n_envs=4"]
    cmd = [sys.executable, "-m", "embodied_ws.cli", "train", "--name", "piped", "--runs", str(tmp_path)]
    for s in sets:
        cmd += ["--set", s]
    env = {**os.environ, "EMBODIED_WS_PROGRESS_INTERVAL": "0"}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("train: ")]
    assert len(lines) >= 3, proc.stdout
    assert all(LINE.match(ln) for ln in lines), lines
    assert "ETA" in lines[1]
    assert lines[-1].startswith("train: 8,192/8,192 steps (100.0%)")
    log = (tmp_path / "piped" / "train.log").read_text().splitlines()
    assert len(log) == len(lines)
    # checkpoints/latest is a symlink: the newest checkpoint's files are reachable through it
    latest = tmp_path / "piped" / "checkpoints" / "latest"
    assert latest.is_symlink() and (latest / "model.zip").is_file()
    assert os.readlink(latest) == "step_0000008192"

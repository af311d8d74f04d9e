"""Pre-flight checks: expert demonstrations pass them all; for each check a dataset that breaks it gets one line
naming the key or episode and the fix."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from test_cli_errors import _assert_one_line_error
from vla_helpers import make_dataset, row_of, set_values

from embodied_ws.config.loader import load_config
from embodied_ws.core.errors import UserError
from embodied_ws.data.record import record_demos
from embodied_ws.vla.checks import CHECKS
from embodied_ws.vla.datafiles import verify_files
from embodied_ws.vla.preflight import build_context, preflight

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("checks") / "demos"
    record_demos("arm3", "reach_color", 2, out, seed=5, image_size=[32, 32], progress=False)
    return out


def _copy(good: Path, tmp_path: Path) -> Path:
    out = tmp_path / "broken"
    shutil.copytree(good, out)
    return out


def _only(dataset: Path, check: str) -> list[str]:
    """The failure lines of one check."""
    ctx = build_context(dataset, load_config("vla"))
    return [f.line() for f in CHECKS.get(check)(ctx)]


def _one(lines: list[str], *fragments: str) -> None:
    assert len(lines) == 1, lines
    assert "\n" not in lines[0] and lines[0].startswith("error: ") and "; fix: " in lines[0]
    for f in fragments:
        assert f in lines[0], lines[0]


def test_expert_demonstrations_pass_every_check(good: Path, cli) -> None:
    passed, findings = preflight(good, load_config("vla"), quiet=True)
    assert findings == [] and sorted(passed) == sorted(["files", *CHECKS.names()])
    proc = cli("vla", "check", str(good), "--policy", "smolvla")
    assert proc.returncode == 0, proc.stderr
    assert all(f"ok  {name}" in proc.stdout for name in ["files", *CHECKS.names()])


def test_missing_normalization_stats(good: Path, tmp_path: Path) -> None:
    ds = _copy(good, tmp_path)
    stats = json.loads((ds / "meta" / "stats.json").read_text())
    del stats["observation.state"]
    (ds / "meta" / "stats.json").write_text(json.dumps(stats))
    _one(_only(ds, "stats"), "observation.state", "MEAN_STD", "mean/std")


def test_camera_size_differs_from_declared(good: Path, tmp_path: Path) -> None:
    ds = _copy(good, tmp_path)
    info = json.loads((ds / "meta" / "info.json").read_text())
    info["features"]["observation.images.overview"]["shape"] = [48, 48, 3]
    (ds / "meta" / "info.json").write_text(json.dumps(info))
    _one(_only(ds, "cameras"), "observation.images.overview episode 0", "32x32", "48x48")


def test_control_rate_is_not_the_robots(tmp_path: Path) -> None:
    _one(_only(make_dataset(tmp_path / "ds", fps=30), "fps"), "error: fps:", "30 Hz", "25 Hz")


def test_idle_episode(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path / "ds", states=lambda ep, k: np.zeros(3), actions=lambda ep, k, q: np.zeros(3))
    lines = _only(ds, "idle")
    assert len(lines) == 2  # both episodes, one line each
    _one(lines[:1], "episode 0", "idle frames", "trim")


def test_actions_outside_joint_limits(tmp_path: Path) -> None:
    def actions(ep: int, k: int, q: np.ndarray) -> np.ndarray:
        return np.array([0.1 * k, 0.0, 0.0])  # base_yaw command grows past its 2.6 rad limit

    _one(_only(make_dataset(tmp_path / "ds", actions=actions), "action_range"), "action[base_yaw]", "joint limits")


def test_timestamp_gap(good: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    ds = _copy(good, tmp_path)
    path = next((ds / "data").rglob("*.parquet"))
    table = pq.read_table(path)
    t = table.column("timestamp").to_numpy().copy()
    ep = table.column("episode_index").to_numpy()
    rows = np.flatnonzero(ep == 1)
    t[rows[5] :] += 0.2  # 5 frames missing in episode 1
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp", [t.astype(np.float32)])
    pq.write_table(table, path)
    _one(_only(ds, "integrity"), "episode 1", "gap of 0.240 s after frame 4")


def test_replay_does_not_track(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)

    def actions(ep: int, k: int, q: np.ndarray) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, 3)  # commands unrelated to the recorded motion

    _one(_only(make_dataset(tmp_path / "ds", actions=actions), "replay"), "episode 0", "RMS error", "limit 0.1")


def test_cli_prints_one_line_and_exits_2(cli, tmp_path: Path) -> None:
    zero = np.zeros(3)
    ds = make_dataset(tmp_path / "ds", episodes=1, states=lambda ep, k: zero, actions=lambda ep, k, q: zero)
    proc = cli("vla", "check", str(ds), "--only", "idle", "--set", "vla.max_idle_ratio=0.5", "--set", "dr=none")
    _assert_one_line_error(proc, "episode 0", "100% idle frames (limit 50%)", "fix: trim")


def test_finetune_refuses_a_dataset_that_fails_a_check(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path / "ds", fps=30)
    with pytest.raises(UserError, match="fps"):
        preflight(ds, load_config("vla"), only=["fps"])


def test_non_finite_values_fail_naming_file_column_episode_and_frame(cli, tmp_path: Path) -> None:
    ds = make_dataset(tmp_path / "ds")
    data = next((ds / "data").rglob("*.parquet"))
    set_values(data, "action", [row_of(data, 1, 10)], 1, np.nan)  # one NaN command of the shoulder
    set_values(data, "observation.state", [row_of(data, 0, 3), row_of(data, 0, 4)], 2, np.inf)
    lines = _only(ds, "finite")
    assert len(lines) == 2, lines
    _one([x for x in lines if " action[" in x], str(data), "action[shoulder]", "1 non-finite", "episode 1 frame 10")
    _one([x for x in lines if "observation.state" in x], "observation.state[elbow]", "2 non-finite", "(inf)")
    assert _only(make_dataset(tmp_path / "clean"), "finite") == []

    proc = cli("vla", "check", str(ds), "--json")  # every check runs; the JSON lists what failed
    _assert_one_line_error(proc, str(ds), "2 failure(s) in finite")
    out = json.loads(proc.stdout)
    assert [f["check"] for f in out["failed"]] == ["finite", "finite"]
    action = next(f for f in out["failed"] if f["where"].endswith("action[shoulder]"))
    assert "episode 1 frame 10" in action["what"] and str(data) in action["where"]
    assert "finite" not in out["passed"] and {"files", "fps", "integrity", "stats"} <= set(out["passed"])


@pytest.fixture(scope="module")
def hub() -> Iterator[tuple[str, list[str]]]:
    """A local stand-in for the Hugging Face hub that records every request made to it."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(f"{self.command} {self.path}")
            self.send_response(404)
            self.end_headers()

        do_HEAD = do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}", hits
    srv.shutdown()


def _check_offline(endpoint: str, *args: str) -> subprocess.CompletedProcess:
    """``vla check`` with the hub pointed at ``endpoint`` and offline mode *not* set by the caller."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["HF_ENDPOINT"] = endpoint
    return subprocess.run(
        [sys.executable, "-m", "embodied_ws.cli", "vla", "check", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _cut(path: Path, keep: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


BROKEN = {
    "missing parquet": ("image", lambda ds: next((ds / "data").rglob("*.parquet")).unlink(), ".parquet", "missing"),
    "truncated parquet": (
        "image",
        lambda ds: _cut(next((ds / "data").rglob("*.parquet")), 0.5),
        ".parquet",
        "not a readable parquet file",
    ),
    "missing mp4": ("video", lambda ds: next((ds / "videos").rglob("*.mp4")).unlink(), ".mp4", "missing"),
    "truncated mp4": ("video", lambda ds: _cut(next((ds / "videos").rglob("*.mp4")), 0.6), ".mp4", "truncated"),
    "mp4 cut by a few bytes": (
        "video",
        lambda ds: _cut(next((ds / "videos").rglob("*.mp4")), 0.997),
        ".mp4",
        "needs it up to 2.40 s",
    ),
}


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("stored")
    return {"image": make_dataset(tmp / "image"), "video": make_dataset(tmp / "video", video=True)}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_files_give_one_line_and_no_network_call(
    case: str, stored: dict[str, Path], hub: tuple[str, list[str]], tmp_path: Path
) -> None:
    kind, damage, suffix, what = BROKEN[case]
    ds = tmp_path / "ds"
    shutil.copytree(stored[kind], ds)
    assert verify_files(ds) == []  # intact before the damage
    damage(ds)
    hub[1].clear()
    proc = _check_offline(hub[0], str(ds))
    _assert_one_line_error(proc, str(ds), suffix, what)
    assert hub[1] == [], hub[1]  # LeRobot was not let near the hub
    proc = _check_offline(hub[0], str(ds), "--json")
    assert proc.returncode == 2 and hub[1] == []
    failed = json.loads(proc.stdout)["failed"]
    assert len(failed) == 1 and failed[0]["check"] == "files" and suffix in failed[0]["where"], failed


def test_lerobot_is_kept_off_the_hub(stored: dict[str, Path], hub: tuple[str, list[str]], tmp_path: Path) -> None:
    """Unverified, LeRobot asks the hub for a missing file; inside ``hub_offline`` it cannot."""
    ds = tmp_path / "ds"
    shutil.copytree(stored["image"], ds)
    next((ds / "data").rglob("*.parquet")).unlink()
    code = (
        "import sys; from pathlib import Path; from embodied_ws.core.errors import UserError\n"
        "from embodied_ws.data.dataset import open_dataset; from embodied_ws.vla.datafiles import hub_offline\n"
        "try:\n"
        "    if sys.argv[2] == 'offline':\n"
        "        with hub_offline(): open_dataset(Path(sys.argv[1]))\n"
        "    else: open_dataset(Path(sys.argv[1]))\n"
        "except UserError as exc: print(exc.line())\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["HF_ENDPOINT"] = hub[0]
    for mode in ("online", "offline"):
        hub[1].clear()
        proc = subprocess.run(
            [sys.executable, "-c", code, str(ds), mode], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.stdout.startswith(f"error: {ds}: cannot read dataset"), proc.stdout + proc.stderr
        if mode == "online":
            assert any("/api/datasets/local/ds" in h for h in hub[1]), hub[1]  # the control: LeRobot goes online
        else:
            assert hub[1] == [] and "offline mode" in proc.stdout, (hub[1], proc.stdout)

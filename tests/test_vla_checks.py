"""Pre-flight checks: expert demonstrations pass them all; for each check a dataset that breaks it gets one line
naming the key or episode and the fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_cli_errors import _assert_one_line_error
from vla_helpers import make_dataset

from embodied_ws.config.loader import load_config
from embodied_ws.core.errors import UserError
from embodied_ws.data.record import record_demos
from embodied_ws.vla.checks import CHECKS
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
    assert findings == [] and sorted(passed) == CHECKS.names()
    proc = cli("vla", "check", str(good), "--policy", "smolvla")
    assert proc.returncode == 0, proc.stderr
    assert all(f"ok  {name}" in proc.stdout for name in CHECKS.names())


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

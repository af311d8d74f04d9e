"""``embodied-ws finetune`` end to end on expert demos with the tiny local SmolVLA: checks, LoRA, checkpoints,
``--resume``, adapter + merged export, evaluation in sim (success rate, mp4), the VLA runner, memory refusal."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_cli_errors import _assert_one_line_error
from vla_helpers import IMAGE, row_of, set_values, tiny_backbone

from embodied_ws.data.record import record_demos

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("ft")
    record_demos("arm3", "reach_color", 2, tmp / "demos", seed=7, image_size=[IMAGE, IMAGE], progress=False)
    return {"tmp": tmp, "demos": tmp / "demos", "vlm": tiny_backbone(tmp / "vlm")}


def _sets(vlm: Path, *extra: str) -> list[str]:
    sets = [
        f"vla.vlm_model_name={vlm}",
        "vla.load_vlm_weights=false",
        f"vla.image_size=[{IMAGE}, {IMAGE}]",
        "vla.chunk_size=8",
        "vla.n_action_steps=4",
        "vla.batch_size=4",
        "vla.lora_rank=4",
        "vla.checkpoint_every=1",
        "vla.eval_episodes=1",
        *extra,
    ]
    return [a for s in sets for a in ("--set", s)]


def test_finetune_resume_export_eval_and_runner(cli, setup: dict[str, Path]) -> None:
    runs = setup["tmp"] / "runs"
    base = ["finetune", str(setup["demos"]), "--name", "t", "--runs", str(runs), "--json"]
    first = cli(*base, *_sets(setup["vlm"], "vla.steps=2"), timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    s1 = json.loads(first.stdout.strip().splitlines()[-1])
    assert s1["steps"] == 2 and s1["lora"] and s1["trainable_share"] <= 0.02
    assert s1["memory"]["estimate_mb"] < s1["memory"]["free_mb"]
    run = runs / "t"
    assert (run / "checkpoints" / "latest").read_text() == "step_2"
    assert (run / "adapter" / "adapter_config.json").is_file() and (run / "merged" / "config.json").is_file()
    assert 0.0 <= s1["eval"]["success_rate"] <= 1.0 and Path(s1["eval"]["video"]).stat().st_size > 0

    second = cli(*base, "--resume", "--set", "vla.steps=4", timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    s2 = json.loads(second.stdout.strip().splitlines()[-1])
    assert s2["resumed_from"] == 2 and s2["steps"] == 4
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]

    from embodied_ws.vla.runner import VLARunner

    runner = VLARunner(run / "adapter", instruction="touch the red ball")
    obs = {"state": np.zeros(3), "images": {"overview": np.zeros((IMAGE, IMAGE, 3), dtype=np.uint8)}}
    actions = [runner.act(obs) for _ in range(6)]
    assert all(a.shape == (3,) and np.isfinite(a).all() for a in actions)
    assert runner.replans == 2  # chunks of 8, 4 executed per chunk: re-plan at calls 1 and 5
    runner.reset()
    runner.act(obs)
    assert runner.replans == 3

    # --pretrained: start from a saved LeRobot policy folder (here the merged one; users: lerobot/smolvla_base)
    third = cli(
        "finetune",
        str(setup["demos"]),
        "--name",
        "t2",
        "--runs",
        str(runs),
        "--json",
        "--pretrained",
        str(run / "merged"),
        "--set",
        "vla.steps=1",
        "--set",
        "vla.eval_episodes=0",
        "--set",
        "vla.batch_size=4",
        "--set",
        "vla.lora_rank=4",
        timeout=900,
    )
    assert third.returncode == 0, third.stderr[-3000:]
    s3 = json.loads(third.stdout.strip().splitlines()[-1])
    assert s3["steps"] == 1 and s3["trainable_share"] <= 0.02
    assert not (runs / "t2" / "base").exists()  # the pretrained folder is the adapter's base


def test_memory_estimate_refusal_names_the_knob(cli, setup: dict[str, Path]) -> None:
    proc = cli(
        "finetune",
        str(setup["demos"]),
        "--name",
        "big",
        "--runs",
        str(setup["tmp"] / "runs"),
        "--skip-checks",
        *_sets(setup["vlm"], "vla.batch_size=1000000"),
        timeout=900,
    )
    _assert_one_line_error(proc, "error: vla:", "MB free", "lower vla.batch_size")


def _ft(setup: dict[str, Path], runs: Path, name: str, *extra: str) -> list[str]:
    """``finetune`` on the demos, 10 steps, a checkpoint every 2, no evaluation."""
    sets = _sets(setup["vlm"], "vla.steps=10", "vla.checkpoint_every=2", "vla.eval_episodes=0")
    head = [sys.executable, "-m", "embodied_ws.cli", "finetune", str(setup["demos"]), "--name", name]
    return [*head, "--runs", str(runs), "--json", "--skip-checks", *sets, *extra]


def _losses(run: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


def test_killed_and_resumed_run_gives_the_uninterrupted_losses(setup: dict[str, Path]) -> None:
    runs = setup["tmp"] / "resume_runs"
    full = subprocess.run(_ft(setup, runs, "full"), capture_output=True, text=True, timeout=900)
    assert full.returncode == 0, full.stderr[-3000:]
    want = _losses(runs / "full")
    assert [s for s, _ in want] == list(range(1, 11))

    # a real SIGKILL once step 5 is logged: metrics.jsonl holds every step the killed process finished
    cut = runs / "cut"
    proc = subprocess.Popen(_ft(setup, runs, "cut"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = cut / "metrics.jsonl"
    while proc.poll() is None and not (metrics.is_file() and metrics.read_text().count("\n") >= 5):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err[-3000:]  # killed, not finished
    logged = _losses(cut)  # every line whole and parseable
    n = len(logged)
    assert 5 <= n < 10 and [s for s, _ in logged] == list(range(1, n + 1))
    assert logged == want[:n]  # steps before the kill: the same losses as the uninterrupted run
    latest = int((cut / "checkpoints" / "latest").read_text().removeprefix("step_"))
    assert latest <= n and latest % 2 == 0 and not (cut / "adapter").exists()

    resumed = subprocess.run(_ft(setup, runs, "cut", "--resume"), capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads(resumed.stdout.strip().splitlines()[-1])["resumed_from"] == latest
    got = _losses(cut)
    assert [s for s, _ in got] == list(range(1, 11))  # steps after the checkpoint are logged once, retrained
    diff = max(abs(a - b) for (_, a), (_, b) in zip(got, want, strict=True))
    print(f"killed after step {n}, resumed from step {latest}: max |loss - uninterrupted| = {diff:.3g}")
    assert diff <= 1e-6, (got, want)


def test_non_finite_loss_stops_the_run_naming_step_and_batch(cli, setup: dict[str, Path]) -> None:
    ds = setup["tmp"] / "nan_demos"
    shutil.copytree(setup["demos"], ds)
    data = next((ds / "data").rglob("*.parquet"))
    length = json.loads((ds / "meta" / "info.json").read_text())["total_frames"] // 2
    rows = [row_of(data, 0, k) for k in range(0, length // 2, 3)]  # every chunk of early episode 0 holds a NaN
    set_values(data, "action", rows, 0, float("nan"))
    runs = setup["tmp"] / "nan_runs"
    sets = _sets(setup["vlm"], "vla.steps=30", "vla.eval_episodes=0")

    refused = cli("finetune", str(ds), "--name", "checked", "--runs", str(runs), *sets, timeout=900)
    _assert_one_line_error(refused, str(data), "action[", "non-finite", "episode 0 frame 0")  # pre-flight
    assert not (runs / "checked" / "checkpoints").exists()

    proc = cli("finetune", str(ds), "--name", "nan", "--runs", str(runs), "--skip-checks", *sets, timeout=900)
    _assert_one_line_error(proc, str(ds), "loss is nan at step", "non-finite values in episode:frame 0:")
    step = int(proc.stderr.split("at step ")[1].split(";")[0])
    run = runs / "nan"
    assert [s for s, _ in _losses(run)] == list(range(1, step))  # the finite steps before it, logged
    assert all(np.isfinite(loss) for _, loss in _losses(run))
    assert not (run / "adapter").exists() and not (run / "merged").exists()  # no NaN adapter
    from safetensors.torch import load_file

    for ckpt in (run / "checkpoints").glob("step_*"):  # a checkpoint per finite step, none after
        assert int(ckpt.name.removeprefix("step_")) < step
        assert all(t.isfinite().all() for t in load_file(str(ckpt / "trainable.safetensors")).values())

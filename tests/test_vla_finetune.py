"""``embodied-ws finetune`` end to end on expert demos with the tiny local SmolVLA: checks, LoRA, checkpoints,
``--resume``, adapter + merged export, evaluation in sim (success rate, mp4), the VLA runner, memory refusal."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_cli_errors import _assert_one_line_error
from vla_helpers import IMAGE, tiny_backbone

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
        *_sets(setup["vlm"], "vla.batch_size=100000000"),
        timeout=900,
    )
    _assert_one_line_error(proc, "error: vla:", "MB free", "lower vla.batch_size")

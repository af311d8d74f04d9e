"""The VLA pipeline on a contact task, end to end through the CLI with the tiny local backbone (no hub):
``record-demos`` (scripted pick-and-place expert on the Menagerie Panda, its gripper driven) → a LeRobotDataset
v3 read back with LeRobot's own loader (instruction per episode, named gripper entry, scene camera) →
``finetune`` (LoRA; env and task taken from the dataset) → ``vla eval`` in sim with the task's success test.
Quick ones: each contact task's instruction, the gripper's action mapping, the recorded config round trip,
and the push and lift experts recorded as demos."""

from __future__ import annotations

import json
from pathlib import Path

import mujoco
import numpy as np
import pytest
from vla_helpers import IMAGE, tiny_backbone

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.data.commands import action_names, command_from_ctrl, ctrl_from_command, env_action
from embodied_ws.data.dataset import recorded_config, recorded_sets, write_sidecar
from embodied_ws.sim.env import RobotEnv

PANDA = Path(__file__).parent / "fixtures" / "robots" / "menagerie" / "panda.xml"
INSTRUCTION = "put the red cube on the green pad"
CAMERA = "observation.images.scene_camera"
SAID = {"push": "push the red cube onto the green pad", "lift": "pick up the red cube", "pick_place": INSTRUCTION}
GRIP = ["env.action_mode=absolute", f"env.robot={PANDA}", "task.gripper=action"]


def _env(task: str, *sets: str) -> RobotEnv:
    return RobotEnv(load_config("push", [f"env.task={task}", *sets]), load_dr("none"), seed=0)


def test_each_contact_task_states_its_instruction_with_the_scene_colours() -> None:
    got = {t: _env(t, *GRIP).core for t in ("lift", "pick_place")}
    got["push"] = _env("push", "env.action_mode=absolute").core
    assert {t: core.task.instruction(core.goal[0]) for t, core in got.items()} == SAID
    model = got["pick_place"].robot.model  # the colours named are the scene's: a red cube, a green goal
    rgba = {
        n: model.geom_rgba[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, n)]
        for n in ("scene_object", "scene_goal")
    }
    assert np.argmax(rgba["scene_object"][:3]) == 0 and np.argmax(rgba["scene_goal"][:3]) == 1


def test_gripper_entry_is_the_leader_set_point_both_ways() -> None:
    """Panda: the tendon actuator's 0..255 control is stored as the leader's 0..0.04 m set-point; the arm's
    commands as they are; and back to the control (replay) and to the env's -1 closed .. +1 open (eval)."""
    env = _env("lift", *GRIP)
    robot, core = env.core.robot, env.core
    assert action_names(robot) == [f"actuator{i}" for i in range(1, 8)] + ["gripper"]
    arm = np.linspace(-0.5, 0.5, 7)
    for ctrl, set_point, action in ((255.0, 0.04, 1.0), (0.0, 0.0, -1.0), (127.5, 0.02, 0.0)):
        cmd = command_from_ctrl(robot, np.array([*arm, ctrl]))
        np.testing.assert_allclose(cmd, [*arm, set_point], atol=1e-9)
        np.testing.assert_allclose(ctrl_from_command(robot, cmd), [*arm, ctrl], atol=1e-6)
        a = env_action(core, cmd)
        assert a[-1] == pytest.approx(action, abs=1e-9) and np.allclose(
            a[:7], (arm - core.ctrl_mid[:7]) / core.ctrl_half[:7]
        )
    env.reset(seed=0)
    env.step(env_action(core, np.array([*arm, 0.04])))  # the env's own mapping: set-point 0.04 m = fully open
    assert env.data.ctrl[7] == pytest.approx(255.0, abs=1e-6)


def test_recorded_config_rebuilds_the_env_from_another_folder(tmp_path: Path, monkeypatch) -> None:
    """The sidecar's env/task sections give back the recording's config (the robot path made absolute), and
    the user's --set after them still wins."""
    rel = Path("tests/fixtures/robots/menagerie/panda.xml")
    cfg = load_config(
        "push", ["env.task=pick_place", f"env.robot={rel}", "task.gripper=action", "task.lift_height=0.07"]
    )
    write_sidecar(tmp_path, {"robot": "panda", "config": recorded_config(cfg)})
    monkeypatch.chdir(tmp_path)
    back = load_config("vla", [*recorded_sets(tmp_path), "task.object_mass=0.2"])
    assert back.env.robot == str(PANDA.resolve()) and back.env.task == "pick_place"
    assert (back.task.gripper, back.task.lift_height, back.task.object_mass) == ("action", 0.07, 0.2)
    assert back.env.frame_skip == cfg.env.frame_skip and back.vla == load_config("vla").vla
    assert recorded_sets(tmp_path / "nothing") == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("robot", "task", "sets"),
    [("arm3", "push", []), (str(PANDA), "lift", ["task.gripper=action"])],
    ids=["arm3-push", "panda-lift"],
)
def test_push_and_lift_experts_record_demos(tmp_path: Path, robot: str, task: str, sets: list[str]) -> None:
    from embodied_ws.data.record import record_demos

    out = tmp_path / task
    s = record_demos(robot, task, 1, out, image_size=[16, 16], dr="none", progress=False, sets=sets)
    assert s["episodes"] == 1 and s["attempts"] == 1 and s["task"] == task
    assert s["instructions"] == [SAID[task]]
    side = json.loads((out / "meta" / "embodied_ws.json").read_text())
    assert side["config"]["env"]["task"] == task and side["cameras"]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from conftest import run_cli

    tmp = tmp_path_factory.mktemp("vla_contact")
    demos = tmp / "demos"
    proc = run_cli(
        "record-demos",
        *("--robot", str(PANDA), "--task", "pick_place", "--set", "task.gripper=action"),  # the push preset's env
        *("--episodes", "2", "--out", str(demos), "--image-size", str(IMAGE), str(IMAGE), "--dr", "none", "--json"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"tmp": tmp, "demos": demos, "record": json.loads(proc.stdout.strip().splitlines()[-1])}


@pytest.mark.slow
def test_pick_place_demos_read_back_with_lerobot(pipeline: dict) -> None:
    """LeRobot's own loader: the task's instruction on every frame, the gripper a named action entry that
    opens then closes on the cube, the scene camera's images showing the red cube."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    rec = pipeline["record"]
    assert rec["episodes"] == 2 and rec["task"] == "pick_place" and rec["instructions"] == [INSTRUCTION]
    ds = LeRobotDataset(repo_id="local/demos", root=pipeline["demos"])
    assert ds.meta.total_episodes == 2 and ds.fps == 25
    names = ds.meta.features["action"]["names"]
    assert names[-1] == "gripper" and len(names) == 8  # 7 arm joints + the gripper
    assert ds.meta.features["observation.state"]["names"][-1] == "finger_joint2"  # the gripper's leader joint
    assert list(ds.meta.tasks.index) == [INSTRUCTION]
    side = json.loads((pipeline["demos"] / "meta" / "embodied_ws.json").read_text())
    assert side["action"]["grippers"]["gripper"]["leader"] == "finger_joint2"
    assert side["config"]["env"]["task"] == "pick_place" and side["config"]["task"]["gripper"] == "action"
    for ep in range(2):
        lo, hi = int(ds.meta.episodes["dataset_from_index"][ep]), int(ds.meta.episodes["dataset_to_index"][ep])
        first, last = ds[lo], ds[hi - 1]
        assert first["task"] == INSTRUCTION and last["task"] == INSTRUCTION
        assert first[CAMERA].shape == (3, IMAGE, IMAGE)
        img = first[CAMERA].numpy()
        # the red cube is in view: a pixel whose red is over 1.5 x its green and blue (white light keeps the
        # table's brown at 1.3 x, the robot is grey, the goal green), even where a 4-cm cube fills less than a
        # pixel of this 32-px image and blends with the table
        assert ((img[0] > 0.3) & (img[0] > 1.5 * img[1]) & (img[0] > 1.5 * img[2])).any()
        # the gripper: commanded open (leader set-point 0.04 m) at the start, closed (0) at the end, where the
        # fingers stand on the cube (stopped well short of closed)
        assert first["action"][-1].item() == pytest.approx(0.04, abs=1e-4)
        assert last["action"][-1].item() == pytest.approx(0.0, abs=1e-4)
        assert last["observation.state"][-1].item() > 0.01


@pytest.mark.slow
def test_demo_actions_through_the_eval_mapping_reproduce_the_success(pipeline: dict) -> None:
    """The first episode's recorded actions, replayed open loop from its seed through the mapping ``vla eval``
    uses (:func:`env_action`), meet the task's success test: the gripper entry means what the env does."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset(repo_id="local/demos", root=pipeline["demos"])
    hi = int(ds.meta.episodes["dataset_to_index"][0])
    actions = np.stack([ds.hf_dataset[i]["action"].numpy() for i in range(hi)])
    side = json.loads((pipeline["demos"] / "meta" / "embodied_ws.json").read_text())
    sets = [f"{s}.{k}={json.dumps(v)}" for s in ("env", "task") for k, v in side["config"][s].items()]
    env = RobotEnv(load_config("vla", sets), load_dr("none"), seed=0)
    env.reset(seed=0)  # record-demos --seed 0: episode 0 (it succeeded at its first try)
    info: dict = {}
    for a in actions:
        _, _, term, trunc, info = env.step(env_action(env.core, a))
        assert not (term or trunc)
    assert info["is_success"]


@pytest.mark.slow
def test_finetune_on_the_dataset_then_vla_eval_in_sim(cli, pipeline: dict) -> None:
    """``finetune`` takes robot, task and camera from the dataset (no --robot/--task), passes its pre-flight
    checks (the gripper entry inside the leader's limits, the replay tracking it), and ``vla eval`` rolls the
    adapter out on pick_place with the task's instruction and success test."""
    tmp = pipeline["tmp"]
    vlm, runs = tiny_backbone(tmp / "vlm"), tmp / "runs"
    sets = [
        f"vla.vlm_model_name={vlm}",
        "vla.load_vlm_weights=false",
        f"vla.image_size=[{IMAGE}, {IMAGE}]",
        "vla.chunk_size=16",  # a whole chunk executed per inference: 13 inferences per 206-step episode
        "vla.n_action_steps=16",
        "vla.batch_size=4",
        "vla.lora_rank=4",
        "vla.steps=4",
        "vla.checkpoint_every=0",
        "vla.eval_episodes=0",
        "dr=none",
    ]
    args = [a for s in sets for a in ("--set", s)]
    ft = cli("finetune", str(pipeline["demos"]), "--name", "pp", "--runs", str(runs), "--json", *args, timeout=900)
    assert ft.returncode == 0, ft.stderr[-3000:]
    summary = json.loads(ft.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 4 and summary["lora"] and np.isfinite(summary["final_loss"])
    run_cfg = load_config(runs / "pp" / "config.yaml")
    assert (run_cfg.env.task, run_cfg.env.camera, run_cfg.task.gripper) == ("pick_place", "scene_camera", "action")

    ev = cli("vla", "eval", "pp", "--runs", str(runs), "--episodes", "1", "--json", timeout=900)
    assert ev.returncode == 0, ev.stderr[-3000:]
    metrics = json.loads(ev.stdout.strip().splitlines()[-1])
    print(f"vla eval (tiny backbone, 4 LoRA steps, 2 demos): {metrics}")
    assert metrics["episodes"] == 1 and metrics["task"] == "pick_place" and metrics["instruction"] == INSTRUCTION
    assert metrics["success_rate"] in (0.0, 1.0) and Path(metrics["video"]).stat().st_size > 0

"""``embodied-ws record-demos``: roll out a scripted expert (or a run's exported policy) in sim, DR on,
and write camera images, joint state, joint commands and the language instruction as LeRobotDataset v3.

Each frame holds the joint positions and the camera image *before* the step and the joint position
command sent to the servos at that step (rad; the values ``/<controller>/commands`` carries; a gripper the
policy drives: its leader joint's set-point, :mod:`embodied_ws.data.commands`), so a dataset replays on the
robot or in sim as is. The instruction is the task's own (``Task.instruction``), stored per episode as
LeRobot's ``task``. An episode ends a few steps after the task first succeeds (no long idle tail) or at the
episode limit; failed episodes are dropped and counted.

The rollouts run in the env of the ``vla`` preset (reach, reach_color) or the ``push`` preset (push, lift,
pick_place), or of ``--config``, with ``--set`` on top; the sidecar keeps the env and task sections, so
``finetune`` and ``vla eval`` rebuild the same env. Images come from ``env.camera``, else the robot's first
camera, else the camera the contact scene adds (:data:`embodied_ws.sim.scene.CAMERA`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.config.schema import RunConfig
from embodied_ws.core.errors import UserError
from embodied_ws.data.commands import action_names, command_from_ctrl, gripper_meta
from embodied_ws.data.dataset import create_dataset, features_for, progress_iter, recorded_config, write_sidecar

#: steps recorded after the first success, so the demonstration shows the robot settling on the target
HOLD_STEPS = 5


def demo_config(
    robot: str | None,
    task: str | None,
    image_size: list[int],
    dr: str,
    policy_run: Path | None,
    config: str | Path | None = None,
    sets: list[str] | None = None,
) -> RunConfig:
    """The run config of the rollouts: the run's own config for ``--policy``, else the ``config`` preset
    (None: the task's expert's, :func:`expert_preset`) with ``sets``, then ``robot``/``task`` when given,
    absolute joint-position actions (the expert's) and ``dr``."""
    size = f"[{image_size[0]}, {image_size[1]}]"
    if policy_run is not None:
        cfg_path = policy_run / "config.yaml"
        if not cfg_path.is_file():
            raise UserError("not a run folder (no config.yaml)", str(policy_run))
        return load_config(cfg_path, [*(sets or []), f"env.render_size={size}"])
    more = [f"env.robot={robot}"] if robot else []
    more += [f"env.task={task}"] if task else []
    more += ["env.action_mode=absolute", f"env.render_size={size}", f"dr={dr}"]
    return load_config(config or expert_preset(task), [*(sets or []), *more])


def expert_preset(task: str | None) -> str:
    """The preset a task's scripted expert records in: ``vla`` (reach, reach_color; also with no task given),
    ``push`` (the contact tasks: their table, cube and goal parameters)."""
    from embodied_ws.data.expert import EXPERTS

    return str(getattr(EXPERTS.get(task, "--task"), "preset", "vla")) if task else "vla"


def pick_camera(env: Any) -> str:
    """The camera the demos are filmed with: ``env.camera``, else the model's first (the robot's own come
    first, then the one a contact scene adds), which ``render()`` shows; ``env.camera`` is set to its name
    (the sidecar's config then names it for ``vla eval``)."""
    import mujoco

    name = env.cfg.env.camera
    if not name and env.model.ncam:
        name = mujoco.mj_id2name(env.model, mujoco.mjtObj.mjOBJ_CAMERA, 0) or ""
    if not name:
        raise UserError("the robot has no camera to record images from (set env.camera)", env.cfg.env.robot)
    env.cfg.env.camera = name  # what render() shows when none was set: the model's first camera
    return name


def instruction_of(env: Any) -> str:
    """The episode's language instruction: the task's own (``reach_color``) or a generic one."""
    task = env.core.task
    if hasattr(task, "instruction"):
        return task.instruction(env.core.goal[0])
    return f"{env.cfg.env.task} with the {env.core.robot.name}"


def make_actor(env: Any, policy_run: Path | None) -> Any:
    """The scripted expert registered for the task, or the run's exported policy."""
    if policy_run is not None:
        from embodied_ws.policy.exported import ExportedPolicy

        return ExportedPolicy(policy_run / "policy")
    from embodied_ws.data.expert import EXPERTS

    return EXPERTS.get(env.cfg.env.task, "--task")(env)


def record_episode(env: Any, actor: Any, seed: int, camera: str) -> tuple[list[dict[str, Any]], bool, str]:
    """One episode: ``(frames, success, instruction)``; a frame holds the state and image the actor saw and
    the command it led to. Ends early once success has been held :data:`HOLD_STEPS` steps."""
    from embodied_ws.policy.rollout import Step, rollout

    robot = env.core.robot
    frames: list[dict[str, Any]] = []
    seen: dict[str, Any] = {}
    held = 0

    def before(env: Any, obs: Any) -> Any:
        seen["instruction"] = seen.get("instruction") or instruction_of(env)
        seen["image"] = env.render()
        seen["state"] = env.data.qpos[robot.qpos_idx].astype(np.float32)
        return obs

    def after(step: Step) -> None:
        frames.append(
            {
                "observation.state": seen["state"],
                "action": command_from_ctrl(robot, env.data.ctrl[: robot.nu]).astype(np.float32),
                f"observation.images.{camera}": seen["image"],
            }
        )

    def success_held(step: Step) -> bool:
        nonlocal held
        held = held + 1 if step.info.get("is_success", False) else 0
        return held >= HOLD_STEPS

    episode = rollout(
        env, actor, seed, observe=before, on_step=after, stop=success_held, max_steps=env.core.episode_steps
    )
    return frames, episode.success, seen["instruction"]


def record_demos(
    robot: str,
    task: str,
    episodes: int,
    out: Path,
    policy_run: Path | None = None,
    seed: int = 0,
    image_size: list[int] | None = None,
    dr: str = "default",
    video: bool = False,
    keep_failed: bool = False,
    progress: bool = True,
    overwrite: bool = False,
    config: str | Path | None = None,
    sets: list[str] | None = None,
) -> dict[str, Any]:
    """Record ``episodes`` demonstrations into ``out`` (LeRobotDataset v3); returns a summary.

    :param robot: robot name or MJCF path (None: the preset's)
    :param task: registered task with a scripted expert (``reach``, ``reach_color``, ``push``, ``lift``,
        ``pick_place``; None: the preset's)
    :param episodes: number of episodes to keep
    :param out: dataset folder: new, empty, or an earlier ``record-demos`` output with ``overwrite``
        (replaced atomically); a folder that is not ours is refused
    :param policy_run: run folder whose exported policy acts instead of the expert
    :param seed: seed of the first episode (episode ``i`` uses ``seed + i``)
    :param image_size: [height, width] of the camera images
    :param dr: domain randomization preset (``none`` to disable)
    :param video: store images as mp4 instead of per-frame images
    :param keep_failed: keep failed episodes too (default: drop them, at most ``episodes`` extra tries)
    :param progress: show a progress bar
    :param overwrite: replace an earlier ``record-demos`` dataset at ``out``
    :param config: run preset or YAML the env is built from (None: ``vla``, ``push`` for the contact tasks)
    :param sets: ``key=value`` overrides of ``config`` (``task.gripper=action``)
    """
    from embodied_ws.sim.env import RobotEnv

    if episodes <= 0:
        raise UserError(f"must be > 0, got {episodes}", "--episodes")
    size = list(image_size or [128, 128])
    cfg = demo_config(robot, task, size, dr, policy_run, config, sets)
    env = RobotEnv(cfg, load_dr(cfg.dr), render_mode="rgb_array", seed=seed)
    actor = make_actor(env, policy_run)
    if policy_run is not None and actor.obs_size != env.observation_space.shape[0]:
        raise UserError("the run's policy does not match its env's observation", str(policy_run))
    r = env.core.robot
    camera = pick_camera(env)
    fps = round(1.0 / env.core.control_dt)
    feats = features_for(r.joint_names, action_names(r), {camera: (size[0], size[1])}, video)
    attempts, kept, successes = 0, 0, 0
    instructions: set[str] = set()
    with create_dataset(out, fps, feats, r.name, video, "record-demos", overwrite) as ds:
        for _ in progress_iter(episodes, "record-demos", progress):
            while True:
                frames, ok, instruction = record_episode(env, actor, seed + attempts, camera)
                attempts += 1
                successes += ok
                if ok or keep_failed or attempts >= 2 * episodes:
                    break
            if not (ok or keep_failed):
                continue
            for f in frames:
                ds.add_frame({**f, "task": instruction})
            ds.save_episode()
            instructions.add(instruction)
            kept += 1
        if kept == 0:
            raise UserError(
                f"no successful episode in {attempts} tries under DR {dr!r}; nothing to write; fix: --dr none (the "
                "default DR's action noise defeats the scripted grasp of lift/pick_place), or `embodied-ws task check`",
                str(out),
            )
    env.close()
    summary = {
        "dataset": str(out),
        "episodes": kept,
        "attempts": attempts,
        "success_rate": successes / attempts,
        "fps": fps,
        "robot": r.name,
        "task": cfg.env.task,
        "source": str(policy_run) if policy_run else "scripted expert",
        "instructions": sorted(instructions),
    }
    write_sidecar(
        out,
        {
            "robot": r.name,
            "task": cfg.env.task,
            "source": summary["source"],
            "control_rate_hz": 1.0 / env.core.control_dt,
            "joints": {"names": r.joint_names, "lower": r.joint_low.tolist(), "upper": r.joint_high.tolist()},
            "action": {
                "meaning": "joint position command (rad or m); a gripper: its leader joint's set-point",
                "names": action_names(r),
                "grippers": gripper_meta(r),
            },
            "cameras": {camera: size},
            "success_rate": summary["success_rate"],
            "instructions": summary["instructions"],
            "config": recorded_config(cfg),
        },
    )
    return summary

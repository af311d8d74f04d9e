"""Sim-to-real gap report: the same policy (or the same commands) in sim and on the robot, side by side.

- ``gap RUN --plant FILE``: the run's exported policy, in closed loop, on the nominal simulator
  ("sim") and on an in-process stand-in robot (:class:`embodied_ws.sysid.standin.StandInEnv`,
  "real"), the same episodes (goals, initial poses) on both.
- ``gap RUN --real BAG``: a recorded deployment (joint states, commands, ``/embodied/task``): the
  recorded commands are replayed open loop in the simulator from each episode's recorded start.

Both write ``report.md`` + PNGs: joint trajectories sim vs real, tracking error (|command − joint|),
success rate, and the trajectory RMSE between the two.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from embodied_ws.config.loader import load_config
from embodied_ws.config.schema import RunConfig
from embodied_ws.core.atomic import write_bytes_atomic, write_json_atomic
from embodied_ws.core.errors import UserError
from embodied_ws.randomization.plant import Plant
from embodied_ws.randomization.spec import DRSpec


@dataclass
class Side:
    """One side of the comparison (sim or real): per-episode joint trajectories and outcomes."""

    name: str
    q: list[np.ndarray] = field(default_factory=list)  # (T, nu) per episode
    ctrl: list[np.ndarray] = field(default_factory=list)  # (T, nu) commands applied
    success: list[bool] = field(default_factory=list)
    final_distance: list[float] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """Success rate, mean tracking error and final distance (when the task has one)."""
        track = [float(np.mean(np.abs(c[:-1] - q[1:]))) for q, c in zip(self.q, self.ctrl, strict=True) if len(q) > 1]
        out = {
            "episodes": len(self.success),
            "success_rate": float(np.mean(self.success)) if self.success else 0.0,
            "tracking_error_rad": float(np.mean(track)) if track else float("nan"),
        }
        if self.final_distance:
            out["mean_final_distance_m"] = float(np.mean(self.final_distance))
        return out


def run_config(run_dir: Path) -> RunConfig:
    """The run's resolved config; a folder without one is a one-line error."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise UserError("not a run folder (no config.yaml)", str(run_dir))
    return load_config(path)


def load_policy(run_dir: Path, env: Any) -> Any:
    """The run's exported policy, checked against ``env`` as ``deploy`` checks it: actuators, then the
    observation layout field by field (a policy for another robot or task is one line naming the field).

    :param run_dir: the run folder
    :param env: the env the policy will drive (:class:`~embodied_ws.sim.env.RobotEnv` or a stand-in)
    """
    from embodied_ws.policy.compat import check_actuators, check_layout
    from embodied_ws.policy.exported import ExportedPolicy

    policy = ExportedPolicy(run_dir / "policy")
    where = str(run_dir / "policy" / "policy.json")
    core = env.core
    check_actuators(policy.meta, list(core.robot.actuator_names), core.robot.name, where)
    check_layout(policy.meta, core.io, env.cfg, where)
    obs_size = env.observation_space.shape[0]
    if policy.obs_size != obs_size:
        raise UserError(f"policy expects {policy.obs_size} observations, the env gives {obs_size}", where)
    return policy


def run_episodes(env: Any, policy: Any, episodes: int, seed: int, name: str) -> Side:
    """Run ``policy`` for ``episodes`` episodes (episode ``i`` seeded ``seed + i``) and record the joints:
    the pose before every step and after the last, the command after every step."""
    from embodied_ws.policy.rollout import rollout

    side = Side(name)
    robot = env.core.robot
    for ep in range(episodes):
        qs: list[np.ndarray] = []
        cs: list[np.ndarray] = []

        def before(env: Any, obs: Any, qs: list[np.ndarray] = qs) -> Any:
            qs.append(env.data.qpos[robot.qpos_idx].copy())
            return obs

        def after(_step: Any, cs: list[np.ndarray] = cs) -> None:
            cs.append(env.data.ctrl.copy())

        episode = rollout(env, policy, seed + ep, observe=before, on_step=after)
        qs.append(env.data.qpos[robot.qpos_idx].copy())
        side.q.append(np.array(qs))
        side.ctrl.append(np.array([*cs, cs[-1]]))
        side.success.append(episode.success)
        dist = episode.info.get("reward_terms", {}).get("distance")
        if dist is not None:
            side.final_distance.append(-float(dist) / max(env.cfg.task.distance_weight, 1e-9))
    return side


def evaluate_on_plant(run_dir: Path, plant: Plant, episodes: int = 50, seed: int = 1234) -> dict[str, Any]:
    """``embodied-ws eval RUN --plant FILE``: the run's policy on an in-process stand-in robot."""
    from embodied_ws.sysid.standin import StandInEnv

    cfg = run_config(run_dir)
    env = StandInEnv(cfg, plant, seed=seed)
    policy = load_policy(run_dir, env)
    side = run_episodes(env, policy, episodes, seed, "stand-in")
    return {"run": str(run_dir), "plant": plant.source, **side.metrics()}


def gap_on_plant(run_dir: Path, plant: Plant, out: Path, episodes: int = 50, seed: int = 1234) -> dict[str, Any]:
    """Closed-loop sim (nominal model, no DR) vs stand-in (plant), same episodes; writes the report."""
    from embodied_ws.sim.env import RobotEnv
    from embodied_ws.sysid.standin import StandInEnv

    cfg = run_config(run_dir)
    sim_env = RobotEnv(cfg, DRSpec(enabled=False), seed=seed)
    real_env = StandInEnv(cfg, plant, seed=seed)
    policy = load_policy(run_dir, sim_env)
    sim = run_episodes(sim_env, policy, episodes, seed, "sim (nominal)")
    real = run_episodes(real_env, policy, episodes, seed, f"stand-in ({Path(plant.source).name})")
    names = list(sim_env.core.robot.joint_names)
    return write_report(out, sim, real, names, {"run": str(run_dir), "plant": plant.source, "mode": "closed loop"})


def gap_on_bag(run_dir: Path, bag: Path, out: Path, sim_plant: Plant | None = None) -> dict[str, Any]:
    """A recorded deployment vs its commands replayed open loop in the simulator; writes the report."""
    from embodied_ws.data.rosbag_io import read_float_arrays
    from embodied_ws.sim.core import build_robot
    from embodied_ws.sim.robot_defaults import position_servos
    from embodied_ws.sim.tasks import TASKS
    from embodied_ws.sysid.replay import load_recording

    cfg = run_config(run_dir)
    robot = build_robot(cfg)
    rec = load_recording(bag, robot)
    task = read_float_arrays(bag, "/embodied/task")
    if task.data.shape[0] == 0:
        raise UserError("no /embodied/task messages in the bag: record them too (embodied-ws record does)", str(bag))
    model = _plant_model(robot, sim_plant) if sim_plant is not None else robot.model.__copy__()
    latency = sim_plant.action_latency if sim_plant else 0
    task_impl = TASKS.get(cfg.env.task, "env.task")(robot, cfg.task)
    servo = position_servos(robot.model)
    sim, real = Side("sim (replayed commands)"), Side("recorded robot")
    data = mujoco.MjData(model)
    fs = max(1, round(rec.control_dt / robot.model.opt.timestep))
    left_out = 0
    for s, end, k in _episodes(rec, task):
        if _unknown_periods(rec, s, end, latency) > MAX_UNKNOWN_PERIODS + latency:
            left_out += 1  # the recorder had no command yet: replaying a hold would be a made-up gap
            continue
        u = _episode_commands(rec, s, end, latency, np.where(servo, rec.q[s], 0.0))
        u = np.clip(u, robot.ctrl_low, robot.ctrl_high)
        mujoco.mj_resetData(model, data)
        data.qpos[robot.qpos_idx], data.qvel[robot.qvel_idx] = rec.q[s], rec.v[s]
        qs = [rec.q[s].copy()]
        for i in range(1, end - s):
            data.ctrl[:] = u[i]
            mujoco.mj_step(model, data, nstep=fs)
            qs.append(data.qpos[robot.qpos_idx].copy())
        applied = np.vstack([u[1:], u[-1:]])  # row t: the command of the period ending at state t + 1
        for side, q in ((sim, np.array(qs)), (real, rec.q[s:end])):
            side.q.append(q)
            side.ctrl.append(applied)
            ok, dist = _final_success(robot, task_impl, q[-1], task.data[k], cfg)
            side.success.append(ok)
            if dist is not None:
                side.final_distance.append(dist)
    if not sim.q:
        raise UserError(
            f"no episode of the bag has its commands recorded ({left_out} left out): start the recorder before "
            "the deployment, or record longer",
            str(bag),
        )
    info = {"run": str(run_dir), "bag": str(bag), "mode": "open-loop replay of recorded commands"}
    if left_out:
        info["left_out"] = f"{left_out} episode(s) begun before the recorder saw any command"
    return write_report(out, sim, real, list(robot.joint_names), info)


# An episode is replayed only when the command of (almost) every period is known: a recorder that joined late
# (DDS discovery can take seconds on a busy machine) misses the first commands while it already records states.
# The first ``latency`` periods of a recording are unknown by construction and allowed on top.
MAX_UNKNOWN_PERIODS = 2


def _unknown_periods(rec: Any, s: int, end: int, latency: int) -> int:
    """Periods of the episode of states ``s .. end - 1`` whose command the recording cannot tell (none received
    yet, or before the recording began); a hold after a simulator reset is known, not counted."""
    j = np.arange(s + 1, end) - latency
    return int(np.sum((j < 0) | (rec.cmd_index[np.maximum(j, 0)] < 0)))


def _episode_commands(rec: Any, s: int, end: int, latency: int, hold: np.ndarray) -> np.ndarray:
    """``(end - s, nu)``: the command applied in each period of the episode of states ``s .. end - 1``.

    Row ``i`` is the period ending at state ``s + i`` (row 0 is unused: the start state). When the
    episode began with a simulator reset (the state stamps start over), the robot dropped the
    commands it held and started from ``hold`` (its measured pose), so commands received before
    state ``s`` never act in this episode; elsewhere (a new target on a running robot) they do.
    """
    j = np.arange(s, end) - latency
    idx = np.where(j >= 0, rec.cmd_index[np.maximum(j, 0)], -1)
    if _is_reset(rec, s):
        idx = np.where((j >= s) & (idx > rec.cmd_index[s]), idx, -1)
    return np.where((idx >= 0)[:, None], rec.commands[np.maximum(idx, 0)], hold[None, :])


def _is_reset(rec: Any, s: int) -> bool:
    """Whether the state stream restarted at state ``s`` (its stamp went back: a simulator reset)."""
    return rec.stamp is not None and 0 < s < len(rec.stamp) and rec.stamp[s] < rec.stamp[s - 1]


def _plant_model(robot: Any, plant: Plant) -> mujoco.MjModel:
    model = robot.model.__copy__()
    plant.apply(model)
    return model


def _episodes(rec: Any, task: Any) -> list[tuple[int, int, int]]:
    """``(start, end, task message)`` of every episode in a recording (states ``start .. end - 1``).

    An episode begins with a new ``/embodied/task`` message or a simulator reset (the state stamps
    start over). The task and state topics reach the recorder in either order, so a message within
    two states of a reset belongs to that reset. Episodes shorter than two states, or begun before
    the recording with no known target, are left out.
    """
    t_abs = rec.t0 + rec.t
    resets = np.flatnonzero(np.diff(rec.stamp) < 0) + 1 if rec.stamp is not None else np.zeros(0, dtype=np.int64)
    goal_at: dict[int, int] = {}
    for m, i in enumerate(np.searchsorted(t_abs, task.log_t)):
        near = resets[np.abs(resets - i) <= 2]
        start = int(near[np.argmin(np.abs(near - i))]) if near.size else int(i)
        if start < rec.n:
            goal_at[start] = m  # a later message for the same start wins
    out = []
    for start, end in itertools.pairwise([*sorted({0, *goal_at, *(int(r) for r in resets)}), rec.n]):
        m = goal_at.get(start)
        if m is None:  # a reset without its message in the bag, or the recording's start: the last target
            before = np.flatnonzero(task.log_t <= t_abs[start])
            m = int(before[-1]) if before.size else None
        if m is not None and end - start >= 2:
            out.append((start, end, m))
    return out


def _final_success(robot: Any, task: Any, q: np.ndarray, goal: np.ndarray, cfg: RunConfig) -> tuple[bool, float | None]:
    data = mujoco.MjData(robot.model)
    data.qpos[robot.qpos_idx] = q
    mujoco.mj_forward(robot.model, data)
    qvel = np.zeros((1, robot.model.nv))
    _, success, terms = task.evaluate(
        data.qpos[None], qvel, data.sensordata[None], goal[None, : task.goal_dim], np.zeros((1, robot.nu))
    )
    dist = terms.get("distance")
    return bool(success[0]), (None if dist is None else -float(dist[0]) / max(cfg.task.distance_weight, 1e-9))


def write_report(out: Path, sim: Side, real: Side, joints: list[str], info: dict[str, Any]) -> dict[str, Any]:
    """``report.md``, ``gap_joints.png``, ``gap_metrics.png`` and ``gap.json`` in ``out``; returns the JSON."""
    from embodied_ws.sysid.gap_plots import plot_joints, plot_metrics

    out.mkdir(parents=True, exist_ok=True)
    rmse = [
        float(np.sqrt(np.mean((a[: min(len(a), len(b))] - b[: min(len(a), len(b))]) ** 2)))
        for a, b in zip(sim.q, real.q, strict=True)
    ]
    result = {
        **info,
        "sim": sim.metrics(),
        "real": real.metrics(),
        "trajectory_rmse_rad": float(np.mean(rmse)) if rmse else float("nan"),
        "files": {k: str(out / k) for k in ("report.md", "gap_joints.png", "gap_metrics.png")},
    }
    plot_joints(out / "gap_joints.png", sim, real, joints)
    plot_metrics(out / "gap_metrics.png", result)
    rows = [
        ("episodes", "episodes", "{:d}"),
        ("success rate", "success_rate", "{:.2f}"),
        ("tracking error: mean abs(command − joint) (rad)", "tracking_error_rad", "{:.4f}"),
        ("final distance to target (m)", "mean_final_distance_m", "{:.4f}"),
    ]
    lines = [
        "# Sim-to-real gap",
        "",
        *[f"- {k}: `{v}`" for k, v in info.items()],
        "",
        f"| metric | {sim.name} | {real.name} |",
        "|---|---|---|",
    ]
    for label, key, fmt in rows:
        if key in result["sim"]:
            lines.append(f"| {label} | {fmt.format(result['sim'][key])} | {fmt.format(result['real'][key])} |")
    lines += [
        "",
        f"Joint trajectory RMSE sim vs real (same episodes): **{result['trajectory_rmse_rad']:.4f} rad**.",
        "",
        "![joints](gap_joints.png)",
        "",
        "![metrics](gap_metrics.png)",
        "",
    ]
    write_bytes_atomic(out / "report.md", "\n".join(lines).encode())
    write_json_atomic(out / "gap.json", result)
    return result

"""Test helper: an in-process recording of a plant driven by the sysid excitation, written as a bag.

It follows mujoco_sim_node's semantics (a command answers each state, the robot samples the latest
command at the start of each control period, ``action_latency`` periods late) so the fit can be
tested quickly without ROS; the ROS tests check the same path through real nodes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import mujoco
import numpy as np

from embodied_ws.data.bag import BagWriter, typestore
from embodied_ws.randomization.plant import Plant
from embodied_ws.sim.robot import Robot
from embodied_ws.sysid.excitation import Excitation, limit_setpoints


def record_plant(
    robot: Robot,
    plant: Plant,
    duration: float,
    out: Path,
    frame_skip: int = 20,
    seed: int = 0,
    commands_from: float = 0.0,
    task_every: float = 0.0,
    signal: Callable[[float, np.ndarray], np.ndarray] | None = None,
) -> None:
    """Simulate ``plant`` under the excitation for ``duration`` s and write /joint_states + commands to ``out``.

    :param commands_from: leave out the commands sent before this time (s), as a recorder that discovered the
        command publisher late does; the robot still moved under them
    :param task_every: also write an ``/embodied/task`` target (a new episode) every this many seconds (0: none)
    :param signal: set-point generator ``(t, start) -> set-points`` instead of the sysid excitation

    The plant's ``action_noise`` and ``obs_noise`` are applied as mujoco_sim_node applies them (noise on the
    applied commands, a fraction of the control half-range; noise on the published positions and velocities).
    """
    store = typestore()
    model = copy.copy(robot.model)
    plant.apply(model)
    data = mujoco.MjData(model)
    data.qpos[robot.qpos_idx] = robot.home_qpos[robot.qpos_idx]
    mujoco.mj_forward(model, data)
    dt = model.opt.timestep * frame_skip
    low = np.maximum(robot.joint_low, robot.ctrl_low)
    high = np.minimum(robot.joint_high, robot.ctrl_high)
    signal = signal or Excitation(low, high, duration, seed)
    half = (robot.ctrl_high - robot.ctrl_low) / 2
    noise = np.random.default_rng(seed + 1)
    k = plant.action_latency
    start = data.qpos[robot.qpos_idx].copy()
    sent = [start.copy()] * (k + 1)
    prev = start.copy()
    rng = np.random.default_rng(seed)
    ts = store.types
    topics = {"/joint_states": "sensor_msgs/msg/JointState", "/c/commands": "std_msgs/msg/Float64MultiArray"}
    if task_every:
        topics["/embodied/task"] = "std_msgs/msg/Float64MultiArray"
    per_task = round(task_every / dt) if task_every else 0
    with BagWriter(out, topics) as w:
        for i in range(int(duration / dt)):
            t = i * dt
            log = 10**9 + int((t + rng.uniform(0, 0.002)) * 1e9)
            if per_task and i % per_task == 0:
                target = ts["std_msgs/msg/Float64MultiArray"](
                    layout=ts["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0), data=np.array([0.3, 0.0, 0.3])
                )
                w.write_message("/embodied/task", log - 1_000_000, target)
            stamp = ts["builtin_interfaces/msg/Time"](sec=int(t), nanosec=round((t % 1) * 1e9) % 10**9)
            msg = ts["sensor_msgs/msg/JointState"](
                header=ts["std_msgs/msg/Header"](stamp=stamp, frame_id=""),
                name=list(robot.joint_names),
                position=data.qpos[robot.qpos_idx] + noise.standard_normal(robot.nu) * plant.obs_noise,
                velocity=data.qvel[robot.qvel_idx] + noise.standard_normal(robot.nu) * plant.obs_noise,
                effort=data.qfrc_actuator[robot.qvel_idx].copy(),
            )
            w.write_message("/joint_states", log, msg)
            prev = limit_setpoints(signal(t, start), prev, low, high, 0.5)
            layout = ts["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0)
            if t >= commands_from:
                msg = ts["std_msgs/msg/Float64MultiArray"](layout=layout, data=prev.copy())
                w.write_message("/c/commands", log + 2_000_000, msg)
            sent.append(prev.copy())
            ctrl = sent[-1 - k] + noise.standard_normal(robot.nu) * plant.action_noise * half
            data.ctrl[:] = np.clip(ctrl, robot.ctrl_low, robot.ctrl_high)
            mujoco.mj_step(model, data, nstep=frame_skip)

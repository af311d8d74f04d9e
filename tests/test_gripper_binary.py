"""``task.gripper_command: binary``: a gripper's action closes it fully (below 0) or opens it fully, the same in
the env (set-points, the lift task's squeeze test) and on the deploy side; NaN still holds the gripper."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from contact_helpers import run_episodes
from deploy_helpers import untrained_run

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.data.expert import LiftExpert
from embodied_ws.deploy.artifact import resolve_target
from embodied_ws.deploy.control import ControlCore
from embodied_ws.deploy.gripper_command import GripperLoop
from embodied_ws.sim.env import RobotEnv
from embodied_ws.sim.gripper import binary_command

FIX = Path(__file__).parent / "fixtures" / "robots"
PANDA = FIX / "menagerie" / "panda.xml"
JAW = FIX / "grippers" / "single_jaw.xml"  # leader "jaw", -0.2 (closed) .. 1.6 rad
LIFT = ["env.task=lift", f"env.robot={PANDA}", "task.gripper=action"]


def test_binary_command_keeps_not_finite_actions_for_the_hold() -> None:
    out = binary_command(np.array([-0.01, 0.0, 0.7, -3.0, np.nan, np.inf]))
    assert out[:4].tolist() == [-1.0, 1.0, 1.0, -1.0] and np.isnan(out[4]) and out[5] == np.inf


@pytest.mark.parametrize("mode", ["ee_delta", "delta"])
def test_a_small_close_action_commands_the_gripper_fully_closed(mode: str) -> None:
    """-0.2 on the gripper: continuous → 40 % of the way from the middle, binary → the closed end; the set-point
    the observation shows is the command as applied."""
    ctrl = {}
    for command in ("continuous", "binary"):
        sets = [*LIFT, f"env.action_mode={mode}", f"task.gripper_command={command}"]
        env = RobotEnv(load_config("push", sets), load_dr("none"), seed=0)
        env.reset(seed=0)
        io, k = env.core.io, env.core.robot.gripper_actuators[0]
        g = env.core.robot.grippers[0]
        action = np.zeros((1, io.action_dim))
        action[0, io.action_index(k)] = -0.2
        qpos = env.data.qpos[None].copy()
        setpoint, c = io.integrate(np.zeros((1, env.core.robot.nu)), action, qpos)
        ctrl[command] = (c[0, k], setpoint[0, k])
        half, mid = (g.ctrl_open - g.ctrl_closed) / 2, (g.ctrl_open + g.ctrl_closed) / 2
    assert ctrl["continuous"] == pytest.approx((mid - 0.2 * half, -0.2))
    assert ctrl["binary"] == pytest.approx((g.ctrl_closed, -1.0))


def test_the_lift_squeeze_test_reads_the_binary_command() -> None:
    env = RobotEnv(load_config("push", [*LIFT, "task.gripper_command=binary"]), load_dr("none"), seed=0)
    task = env.core.task
    a = np.zeros((2, env.core.io.action_dim))
    a[:, task.gripper_action] = [-0.05, 0.05]
    g = env.core.robot.grippers[0]
    assert task.commanded_gap(a) == pytest.approx([g.gap_closed, g.gap_open])


def test_the_scripted_lift_succeeds_with_a_binary_gripper() -> None:
    sets = [*LIFT, "env.action_mode=absolute", "env.episode_steps=200", "task.gripper_command=binary"]
    env = RobotEnv(load_config("push", sets), load_dr("none"), seed=0)
    terms = {"reach", "grasp", "lift", "goal", "success_bonus", "still", "action", "off_table"}
    _, ok, fired = run_episodes(env, range(3), LiftExpert(env), terms)
    assert sum(ok) >= 2 and fired["grasp"] > 0, (ok, fired)


def test_deploy_sends_the_binary_command_the_policy_was_trained_with(tmp_path: Path) -> None:
    """A policy whose every action is -0.1 (a slight close): trained binary, deploy drives the jaw to its closed
    end; trained continuous, it stops just below the middle."""
    ends = {}
    for command in ("continuous", "binary"):
        sets = [f"env.robot={JAW}", "task.gripper=action", f"task.gripper_command={command}"]
        run = untrained_run(tmp_path / command, *sets, action_bias=-0.1)
        core = ControlCore(resolve_target(run, ["deploy.soft_start_s=0.2"]))
        grip = GripperLoop.of(core)
        env = RobotEnv(core.cfg, load_dr("none"), seed=1)
        env.reset(seed=1)
        core.set_goal(env.core.goal[0])
        now, dt, sent = 0.0, 1.0 / core.rate_hz, None
        for i in range(60):
            assert core.set_state(env.data.qpos[core.qpos_adr], env.data.qvel[core.qvel_adr], i * dt, now)
            sent = grip.tick(core.tick(now))
            now += dt
        ends[command] = sent[0]
    lim = grip.command.limits
    assert ends["binary"] == pytest.approx(lim.closed[0])
    assert lim.closed[0] + 0.3 < ends["continuous"] < (lim.closed[0] + lim.open[0]) / 2

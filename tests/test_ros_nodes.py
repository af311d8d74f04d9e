"""Real rclpy nodes over Fast DDS in separate processes: lockstep equivalence, training, faults."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import train_cmd
from ros_helpers import ROOT, start_node, stop, wait_until

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.errors import EnvLost
from embodied_ws.rl.checkpoint import latest_checkpoint, read_state
from embodied_ws.sim.env import RobotEnv

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def _ros_env(*overrides: str, seed: int = 7):
    from embodied_ws.ros.topic_env import RosTopicEnv

    cfg = load_config("reach", list(overrides))
    return RosTopicEnv(cfg, load_dr(cfg.dr), seed=seed), cfg


@contextmanager
def _sim_and_env(sim_params: list[str], *overrides: str, seed: int = 7) -> Iterator[tuple[Any, Any]]:
    """mujoco_sim_node in its own process and a RosTopicEnv (config ``overrides``) on it; both stopped on exit."""
    sim = start_node("mujoco_sim_node", *sim_params)
    env = None
    try:
        env, cfg = _ros_env(*overrides, seed=seed)
        yield env, cfg
    finally:
        if env is not None:
            env.close()
        stop(sim)


def test_lockstep_ros_path_equals_in_process_env() -> None:
    """Same seed, same actions: identical trajectories with DR on (tolerance 1e-9, observed 0)."""
    with _sim_and_env(["mode:=lockstep", "seed:=7"]) as (env, cfg):
        ref = RobotEnv(cfg, load_dr(cfg.dr), seed=7)
        a_obs, _ = env.reset()
        b_obs, _ = ref.reset()
        worst = float(np.abs(a_obs - b_obs).max())
        actions = np.random.default_rng(0).uniform(-1, 1, (110, 3))
        for a in actions:  # crosses two episode boundaries
            a_obs, a_r, _, a_tr, a_info = env.step(a)
            b_obs, b_r, _, b_tr, b_info = ref.step(a)
            worst = max(worst, float(np.abs(a_obs - b_obs).max()), abs(a_r - b_r))
            assert a_tr == b_tr and a_info["dr"] == b_info["dr"]
            if a_tr:
                a_obs, _ = env.reset()
                b_obs, _ = ref.reset()
                worst = max(worst, float(np.abs(a_obs - b_obs).max()))
        print(f"lockstep ROS vs in-process: max |difference| = {worst:.3g} over 110 steps")
        assert worst <= 1e-9
        assert env.stats["dropped"] == 0


ROS_TRAIN_SETS = ["train.vec_env=ros", "train.n_envs=1", "ppo.n_steps=128", "ppo.batch_size=64", "ppo.n_epochs=2",
                  "train.eval_every=0", "train.curriculum_steps=0"]  # fmt: skip


def _train_cmd(runs: Path, name: str, *sets: str) -> list[str]:
    return train_cmd(runs, name, [*ROS_TRAIN_SETS, *sets])


def test_ppo_trains_through_the_ros_topic_env(tmp_path: Path) -> None:
    sim = start_node("mujoco_sim_node", "mode:=lockstep", "seed:=0")
    try:
        proc = subprocess.run(
            _train_cmd(tmp_path, "rosrun", "train.total_timesteps=512"),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = json.loads(proc.stdout)
        assert out["steps"] >= 512
        assert (tmp_path / "rosrun" / "policy" / "policy.safetensors").is_file()
    finally:
        stop(sim)


def test_sim_node_killed_mid_training_saves_checkpoint_and_stops(tmp_path: Path) -> None:
    sim = start_node("mujoco_sim_node", "mode:=lockstep", "seed:=0")
    trainer = subprocess.Popen(
        _train_cmd(
            tmp_path,
            "crash",
            "train.total_timesteps=100000",
            "train.checkpoint_every=128",
            "ros.timeout_s=0.5",
            "ros.retries=2",
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ckpts = tmp_path / "crash" / "checkpoints"
        assert wait_until(lambda: latest_checkpoint(ckpts) is not None, 180)
        before = read_state(latest_checkpoint(ckpts))["num_timesteps"]
        stop(sim, signal.SIGKILL)
        _, err = trainer.communicate(timeout=120)
        assert trainer.returncode == 3, err[-2000:]
        # the loss shows in a step (names /joint_states) or, when the kill lands in an episode reset, in the reset call
        assert "/joint_states" in err or "/mujoco_sim_node/reset" in err, err
        assert "checkpoint saved" in err and "Traceback" not in err
        # one error line (an "end effector: ... (auto-detected ...)" info line may come before it)
        lines = [ln for ln in err.strip().splitlines() if not ln.startswith("end effector:")]
        assert len(lines) == 1, err
        after = read_state(latest_checkpoint(ckpts))["num_timesteps"]
        assert after >= before
    finally:
        if trainer.poll() is None:
            trainer.kill()
        stop(sim)


def test_on_lost_wait_resumes_when_the_simulator_returns() -> None:
    sim = start_node("mujoco_sim_node", "mode:=lockstep", "seed:=1")
    env = None
    try:
        env, _ = _ros_env("ros.on_lost=wait", "ros.timeout_s=0.3", "ros.retries=1", "ros.lost_wait_s=60")
        env.reset()
        for _ in range(5):
            env.step(np.zeros(3))
        stop(sim, signal.SIGKILL)
        sim = start_node("mujoco_sim_node", "mode:=lockstep", "seed:=1")
        obs, _, _, truncated, info = env.step(np.zeros(3))
        assert truncated and info["sim_restarted"] and env.stats["sim_restarts"] == 1
        assert np.isfinite(obs).all()
        env.reset()
        env.step(np.zeros(3))
    finally:
        if env is not None:
            env.close()
        stop(sim)


def test_relay_dropping_ten_percent_of_commands() -> None:
    relay = start_node("lossy_relay", "input:=/relay/commands", "drop:=0.1", "seed:=3")
    try:
        with _sim_and_env(
            ["mode:=lockstep", "seed:=2"], "ros.command_topic=/relay/commands", "ros.timeout_s=0.2", "ros.retries=10"
        ) as (env, _):
            node = env.link.node  # the relay must be in the graph on both sides before its drops can be counted
            assert wait_until(
                lambda: (
                    node.count_subscribers("/relay/commands") >= 1
                    and node.count_publishers("/joint_group_position_controller/commands") >= 1
                ),
                30,
            )
            env.reset()
            rng = np.random.default_rng(0)
            for _ in range(150):
                _, _, _, trunc, info = env.step(rng.uniform(-1, 1, 3))
                if trunc:
                    env.reset()
            print(f"relay: {env.stats}")
            assert 3 <= env.stats["dropped"] <= 45 and env.stats["timeouts"] == 0
            assert info["ros"]["dropped"] == env.stats["dropped"]
    finally:
        out = stop(relay, signal.SIGINT)
    assert "dropped" in out


def test_resent_lockstep_command_gets_the_last_state_again_not_a_second_step() -> None:
    from embodied_ws.ros import cdr

    with _sim_and_env(["mode:=lockstep"]) as (env, _):
        env.reset()  # sim time back to 0, sequence numbers start over
        link, dt = env.link, env.core.control_dt
        hold = cdr.FloatArrayEncoder(3)
        stamps = []
        for seq in (1, 1, 2, 0, 0):  # a re-send of 1; 0 = an unsequenced publisher (always stepped)
            count = link.state_count
            link.pub.publish(hold.encode(env.core.ctrl_mid, seq))
            assert link.wait_for(lambda c=count: link.state_count > c, 5.0)
            stamps.append(cdr.JointStateDecoder.stamp(link.state))
        assert stamps == pytest.approx([dt, dt, 2 * dt, 3 * dt, 4 * dt], abs=1e-9)


def test_simulator_of_another_robot_gives_one_line_naming_the_missing_joints() -> None:
    from embodied_ws.core.errors import UserError

    with _sim_and_env(["mode:=lockstep", "env.robot:=cartpole", "env.task:=swingup"]) as (env, _):
        with pytest.raises(UserError, match=r"/joint_states: lacks joints .*shoulder") as err:
            env.reset()  # our arm3 env, a cartpole behind the topics
        assert "\n" not in err.value.line()


def test_realtime_mode_and_pause_gives_a_clear_stale_error() -> None:
    from rclpy.node import Node  # noqa: F401  (rclpy is importable here)

    realtime_sim = ["mode:=realtime", "real_time_factor:=1.0"]
    with _sim_and_env(realtime_sim, "ros.mode=realtime", "ros.timeout_s=0.5") as (env, _):
        env.reset()
        t = time.monotonic()
        for _ in range(10):
            env.step(np.zeros(3))
        assert 0.3 < time.monotonic() - t < 2.0  # paced at the 25 Hz control rate
        client = env.link.node.create_client(
            __import__("std_srvs.srv", fromlist=["SetBool"]).SetBool, "/mujoco_sim_node/set_pause"
        )
        assert client.wait_for_service(timeout_sec=5)
        req = client.srv_type.Request(data=True)
        fut = client.call_async(req)
        assert env.link.wait_for(fut.done, 5)  # the env spins its node while it waits
        with pytest.raises(EnvLost, match="/joint_states"):
            for _ in range(50):
                env.step(np.zeros(3))
        assert env.stats["stale"] > 0


def test_trainer_node_publishes_progress_and_serves_save_and_stop(tmp_path: Path) -> None:
    import rclpy
    from std_msgs.msg import String
    from std_srvs.srv import Trigger

    trainer = start_node(
        "trainer_node",
        "name:=node_run",
        f"runs:={tmp_path}",
        "train.total_timesteps:=10000000",
        "train.n_envs:=4",
        "train.eval_every:=0",
        "train.checkpoint_every:=0",
        "ppo.n_steps:=64",
    )
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("trainer_test_client", context=ctx)
    progress: list[dict] = []
    node.create_subscription(String, "/trainer_node/progress", lambda m: progress.append(json.loads(m.data)), 10)
    save = node.create_client(Trigger, "/trainer_node/save_checkpoint")
    stop_srv = node.create_client(Trigger, "/trainer_node/stop")
    from rclpy.executors import SingleThreadedExecutor

    executor = SingleThreadedExecutor(context=ctx)
    executor.add_node(node)

    def spin_until(pred, timeout: float) -> bool:
        end = time.time() + timeout
        while time.time() < end and not pred():
            executor.spin_once(timeout_sec=0.1)
        return pred()

    try:
        assert spin_until(lambda: any("step" in p for p in progress), 120), "no progress published"
        assert save.wait_for_service(timeout_sec=30)
        fut = save.call_async(Trigger.Request())
        assert spin_until(fut.done, 30) and fut.result().success
        ckpts = tmp_path / "node_run" / "checkpoints"
        assert spin_until(lambda: latest_checkpoint(ckpts) is not None, 60)
        fut = stop_srv.call_async(Trigger.Request())
        assert spin_until(fut.done, 30) and fut.result().success
        assert spin_until(lambda: any(p.get("done") for p in progress), 120)
        assert trainer.wait(timeout=120) == 0
        assert (tmp_path / "node_run" / "policy" / "policy.json").is_file()
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        stop(trainer)


# mujoco_sim_node whose ~/reset reply has no episode number (as any other simulator may answer)
QUIET_SIM = """
import sys
from embodied_ws.ros.nodes import mujoco_sim_node as m
class QuietSim(m.MujocoSimNode):
    def _on_reset(self, request, response):
        response = super()._on_reset(request, response)
        response.message = "reset done"
        return response
m.MujocoSimNode = QuietSim
sys.exit(m.main(sys.argv))
"""


def test_reset_reply_without_episode_id_episode_comes_from_the_task_topic() -> None:
    sim = subprocess.Popen(
        [sys.executable, "-c", QUIET_SIM, "--ros-args", "-p", "mode:=lockstep", "-p", "seed:=7"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    env = None
    try:
        env, cfg = _ros_env(seed=7)
        ref = RobotEnv(cfg, load_dr(cfg.dr), seed=7)
        for episode in (1, 2):  # the second reset must wait for episode 2's task, not take episode 1's again
            a_obs, _ = env.reset()
            b_obs, _ = ref.reset()
            np.testing.assert_allclose(a_obs, b_obs, atol=1e-9)
            assert env.link.episode == episode
            for _ in range(3):
                a_obs = env.step(np.full(3, 0.5))[0]
                b_obs = ref.step(np.full(3, 0.5))[0]
            np.testing.assert_allclose(a_obs, b_obs, atol=1e-9)
    finally:
        if env is not None:
            env.close()
        out = stop(sim)
    assert "Traceback" not in out


@pytest.mark.parametrize(
    "case,exit_code,logged",
    [("resume", 2, "no complete checkpoint to resume from"), ("runs-is-a-file", 2, "is not a folder")],
)
def test_trainer_node_error_in_training_thread_is_logged_and_sets_exit_code(
    tmp_path: Path, case: str, exit_code: int, logged: str
) -> None:
    (tmp_path / "file").write_text("not a folder")
    runs = tmp_path / "file" if case == "runs-is-a-file" else tmp_path
    params = ["name:=broken", f"runs:={runs}", "train.total_timesteps:=256", "train.n_envs:=2"]
    trainer = start_node("trainer_node", *params, *(["resume:=true"] if case == "resume" else []))
    try:
        assert trainer.wait(timeout=180) == exit_code
    finally:
        out = stop(trainer)
    assert "training stopped: " in out and logged in out, out[-2000:]

"""RosTopicEnv: a gymnasium env over the ROS 2 topic contract (mujoco_sim_node, Gazebo via ros_gz, a robot).

The env-side parts (latency, noise, delta set-points, observation, reward, DR draws) are the very
same :class:`EnvCore` as the in-process env; only the physics step is replaced by publishing the
command and waiting for (lockstep) or sampling (realtime) ``/joint_states``. The end-effector
position comes from forward kinematics of the measured joints on a local copy of the model, as on
a real robot. Dropped commands are re-sent and counted; silence past the retries raises
:class:`EnvLost` naming the topic, or waits for the simulator to come back (``ros.on_lost: wait``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any, override

import gymnasium as gym
import mujoco
import numpy as np
import rclpy
from rclpy.experimental import EventsExecutor
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger

from embodied_ws.config.schema import RunConfig
from embodied_ws.core.errors import EnvLost, UserError
from embodied_ws.randomization.spec import DRSpec
from embodied_ws.ros import cdr, qos
from embodied_ws.ros import conversions as conv
from embodied_ws.sim.core import EnvCore
from embodied_ws.sim.env import action_space, observation_space
from embodied_ws.sim.hooks import CoreHooks
from embodied_ws.sim.robot import published_joints

_SUM = np.add.reduce


class _Link:
    """A private rclpy context + node holding the latest messages.

    The executor is spun in the calling thread while the env waits (no background thread): a
    lockstep step is then one publish and one wake-up, like a raw ping-pong (``bench/ros_bridge.py``).
    ``/joint_states`` is taken serialized and commands go out serialized (:mod:`embodied_ws.ros.cdr`).
    """

    def __init__(self, cfg: RunConfig) -> None:
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = Node(f"embodied_topic_env_{os.getpid()}", context=self.ctx)
        self.state: bytes | None = None  # the latest /joint_states, serialized
        self.state_count = 0
        self.goal: np.ndarray | None = None
        self.episode = -1  # of the latest /embodied/task (layout.data_offset)
        self.task_count = 0
        r = cfg.ros
        self.command_topic = r.command_topic or f"/{r.controller}/commands"
        self.pub = self.node.create_publisher(Float64MultiArray, self.command_topic, qos.COMMAND)
        self.node.create_subscription(JointState, "/joint_states", self._on_state, qos.STATE, raw=True)
        self.node.create_subscription(Float64MultiArray, "/embodied/task", self._on_task, qos.LATCHED)
        self.reset_client = self.node.create_client(Trigger, f"{r.sim_node}/reset") if r.sim_node else None
        # rclpy's C++ events executor: far less Python per wake-up than SingleThreadedExecutor
        self.executor = EventsExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self._open = True

    def _on_state(self, raw: bytes) -> None:
        self.state = raw
        self.state_count += 1

    def _on_task(self, msg: Float64MultiArray) -> None:
        self.goal = conv.array_of(msg)
        self.episode = int(msg.layout.data_offset)
        self.task_count += 1

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        """Spin until ``predicate()`` holds or ``timeout`` seconds pass."""
        end = time.monotonic() + timeout
        while not predicate():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.executor.spin_once(timeout_sec=min(left, 0.1))
        return True

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)


class RosTopicEnv(CoreHooks, gym.Env):
    """The robot/task of ``cfg`` reached through ROS topics.

    :param cfg: run configuration (``env``, ``task`` and ``ros`` sections)
    :param dr: DR spec (env-side parts apply here; physics parts apply in the simulator)
    :param seed: seed of the env-side streams (use the simulator's ``seed`` for identical episodes)
    """

    metadata = {"render_modes": []}  # noqa: RUF012

    def __init__(self, cfg: RunConfig, dr: DRSpec, seed: int | None = None) -> None:
        self.cfg = cfg
        self.core = EnvCore(cfg, dr, 1, seed)
        self.model = self.core.models[0]
        self.data = mujoco.MjData(self.model)
        joints = published_joints(self.model)
        self.joint_names = [mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in joints]
        self._qadr = np.array([self.model.jnt_qposadr[j] for j in joints], dtype=np.int64)
        self._vadr = np.array([self.model.jnt_dofadr[j] for j in joints], dtype=np.int64)
        self.observation_space = observation_space(self.core)
        self.action_space = action_space(self.core)
        self.link = _Link(cfg)
        self._decoder = cdr.JointStateDecoder(self.joint_names)
        self._cmd = cdr.FloatArrayEncoder(self.core.robot.nu)
        self._seq = 0  # lockstep command sequence number (layout.data_offset): re-sends are not stepped twice
        self.stats = {"dropped": 0, "stale": 0, "timeouts": 0, "sim_restarts": 0}
        self._last_stamp = -1.0
        self._next_tick = 0.0

    # ------------------------------------------------------------------ gymnasium API
    @override
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self.core.seed(seed)
        # env-side DR draws (same order as the simulator's core), done while the simulator resets
        self._reset_simulator(meanwhile=lambda: self.core.begin_episode(0))
        if self.link.goal is not None and self.link.goal.size == self.core.goal.shape[1]:
            self.core.goal[0] = self.link.goal
        msg = self.link.state
        self._load_state(msg)
        self._last_stamp = self._decoder.stamp(msg)
        self._next_tick = time.monotonic() + self.core.control_dt
        obs = self.core.first_obs(0, self.data.qpos, self.data.qvel, self.data.sensordata)
        return obs.astype(np.float32), {"is_success": False, "dr": dict(self.core.dr_values[0])}

    @override
    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        actions = np.asarray(action, dtype=np.float64).reshape(1, -1)
        ctrl, bad = self.core.action_to_ctrl(actions)
        restarted = False
        try:
            msg = self._exchange(ctrl[0])
        except EnvLost:
            if self.cfg.ros.on_lost != "wait":
                raise
            self._wait_for_simulator()
            msg, restarted = self.link.state, True
        self._load_state(msg)
        d = self.data
        unstable = bad | (not math.isfinite(_SUM(d.qpos) + _SUM(d.qvel)))  # (1,) bools
        obs, reward, success, terminated, truncated, terms = self.core.finish_step(
            d.qpos[None], d.qvel[None], d.sensordata[None], actions, unstable
        )
        info = self.core.infos(success, terms, unstable)[0]
        info["ros"] = dict(self.stats)
        if restarted:
            info["sim_restarted"] = True
        return (
            obs[0].astype(np.float32),
            float(reward[0]),
            bool(terminated[0]) and not restarted,
            bool(truncated[0]) or restarted,
            info,
        )

    @override
    def close(self) -> None:
        self.link.close()

    # ------------------------------------------------------------------ transport
    def _exchange(self, ctrl: np.ndarray) -> bytes:
        r, link = self.cfg.ros, self.link
        if r.mode == "realtime":
            link.pub.publish(self._cmd.encode(ctrl))
            link.wait_for(lambda: time.monotonic() >= self._next_tick, max(0.0, self._next_tick - time.monotonic()))
            self._next_tick = max(self._next_tick + self.core.control_dt, time.monotonic())
            return self._fresh_realtime()
        self._seq += 1
        cmd = self._cmd.encode(ctrl, self._seq)
        for attempt in range(r.retries + 1):
            count = link.state_count
            link.pub.publish(cmd)
            if link.wait_for(lambda c=count: link.state_count > c and self._newer(link.state), r.timeout_s):
                return self._accept(link.state)
            self.stats["dropped" if attempt < r.retries else "timeouts"] += 1
        raise EnvLost(
            f"no new state within {r.timeout_s:.1f} s after {r.retries} re-sent commands "
            f"on {link.command_topic} (is the simulator running?)",
            "/joint_states",
        )

    def _fresh_realtime(self) -> bytes:
        r, link = self.cfg.ros, self.link
        deadline = time.monotonic() + r.timeout_s
        while True:
            msg = link.state
            if msg is not None and self._newer(msg):
                return self._accept(msg)
            if time.monotonic() > deadline:
                self.stats["timeouts"] += 1
                raise EnvLost(f"state stale for {r.timeout_s:.1f} s", "/joint_states")
            self.stats["stale"] += 1
            link.wait_for(lambda: link.state is not None and self._newer(link.state), r.stale_s)

    def _newer(self, msg: bytes) -> bool:
        return self._decoder.stamp(msg) > self._last_stamp

    def _accept(self, msg: bytes) -> bytes:
        self._last_stamp = self._decoder.stamp(msg)
        return msg

    def _reset_simulator(self, meanwhile: Callable[[], object] | None = None) -> None:
        """Reset the simulator (``~/reset``) and wait for its new episode; ``meanwhile`` runs while it resets."""
        r, link = self.cfg.ros, self.link
        meanwhile = meanwhile or (lambda: None)
        if link.reset_client is None:
            meanwhile()
            if not link.wait_for(lambda: link.state is not None, r.timeout_s * (r.retries + 1)):
                raise EnvLost("nothing published", "/joint_states")
            return
        # a service needs discovery both ways: give resets more time than a control step
        patience = max(5.0, r.timeout_s * (r.retries + 1))
        if not link.reset_client.wait_for_service(timeout_sec=patience):
            raise EnvLost("reset service not available (is mujoco_sim_node running?)", f"{r.sim_node}/reset")
        has_task = link.node.count_publishers("/embodied/task") > 0
        if has_task and not link.task_count:
            # the simulator's latched task first, so that it cannot pass for the new episode's below
            link.wait_for(lambda: link.task_count > 0, 1.0)
        tasks, count = link.task_count, link.state_count
        future = link.reset_client.call_async(Trigger.Request())
        meanwhile()
        if not link.wait_for(future.done, patience):
            raise EnvLost("reset did not answer", f"{r.sim_node}/reset")

        # the new episode is the first task after the call with an episode id (layout.data_offset ≥ 1; 0 = none
        # yet); the reply's text is for people and is never parsed
        def started() -> bool:
            return link.state_count > count and (not has_task or (link.task_count > tasks and link.episode >= 1))

        if not link.wait_for(started, patience):
            raise EnvLost("no state/task after reset", "/joint_states")
        self._last_stamp = -1.0

    def _wait_for_simulator(self) -> None:
        """``on_lost: wait``: block until the reset service is back, then start a new episode."""
        r = self.cfg.ros
        deadline = time.monotonic() + r.lost_wait_s
        while True:
            # the dead node can linger in the DDS graph for a while: keep trying resets until one answers
            try:
                self._reset_simulator()
                break
            except EnvLost:
                if self.link.reset_client is None or time.monotonic() > deadline:
                    raise EnvLost(f"simulator did not come back within {r.lost_wait_s:.0f} s",
                                  f"{r.sim_node}/reset") from None  # fmt: skip
                self.link.wait_for(lambda: False, 0.5)
        self.stats["sim_restarts"] += 1
        self.core.begin_episode(0)

    def _load_state(self, msg: bytes) -> None:
        try:
            q, qd = self._decoder.read(msg)
        except KeyError as exc:
            raise UserError(f"{exc.args[0]} (robot {self.core.robot.name})", "/joint_states") from None
        except cdr.CdrError as exc:
            raise UserError(str(exc), "/joint_states") from None
        d = self.data
        d.qpos[self._qadr] = q
        d.qvel[self._vadr] = qd
        mujoco.mj_kinematics(self.model, d)
        mujoco.mj_sensorPos(self.model, d)


def make_ros_vec_env(cfg: RunConfig, dr: DRSpec, n_envs: int, seed: int) -> Any:
    """The ``ros`` vec-env backend: one RosTopicEnv in SB3's DummyVecEnv (with the EnvHooks protocol).

    :param cfg: run configuration (``ros`` section)
    :param dr: DR spec
    :param n_envs: 1 (the backend registry enforces it)
    :param seed: seed of the env-side streams
    """
    from embodied_ws.rl.vec import HookedDummyVecEnv

    return HookedDummyVecEnv([lambda: RosTopicEnv(cfg, dr, seed)], cfg, dr)

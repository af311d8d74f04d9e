"""mujoco_sim_node: a registered robot/task (or an MJCF path) in MuJoCo behind the ROS 2 topic contract.

Publishes ``/joint_states`` (stamped with sim time), ``/clock``, the task observation on
``/embodied/task`` (latched; ``layout.data_offset`` = episode id) and optionally the camera; takes
actuator commands on ``/<controller>/commands``; serves ``~/reset`` and ``~/set_pause``. A robot whose
grippers are actions (``task.gripper: action``) also takes their leader joints' positions on ``gripper_topic``
(as a forward position gripper controller does); the arm's command then holds either every actuator or
the arm's alone (what ``policy_node`` sends: its gripper goes to its own controller).
``mode: lockstep`` advances exactly one control period per command (training); ``realtime`` steps
on a timer at ``real_time_factor`` × real time with the latest command. Physics DR is applied on reset.

``plant:=FILE`` makes the node a stand-in real robot (:mod:`embodied_ws.randomization.plant`): the
file's fixed physical values replace DR and are kept for every episode, a command takes effect
``action_latency`` control periods after it arrives, and optional noise is added to commands and
measured joint states.

``stamp_offset_s`` (settable while running) is added to every stamp: setting it lower makes the
clock jump back with the robot where it is, as a driver's clock step or a bag replay does (the
policy node must treat that as a state source that started over).
"""

from __future__ import annotations

import math
import sys

import mujoco
import numpy as np
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import SetBool, Trigger

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.randomization.latency import DelayLine
from embodied_ws.randomization.plant import load_plant
from embodied_ws.ros import cdr, qos
from embodied_ws.ros import conversions as conv
from embodied_ws.ros.params import choice, declare_node_parameters
from embodied_ws.ros.spin import run_node
from embodied_ws.sim.core import EnvCore
from embodied_ws.sim.robot import published_joints

#: node-level parameters (config fields are declared too, as ``env.robot``, ``env.task`` ...)
PARAMETERS = {
    "config": "reach",
    "mode": "realtime",
    "real_time_factor": 1.0,
    "seed": 0,
    "controller": "joint_group_position_controller",
    "publish_camera": False,
    "plant": "",
    "stamp_offset_s": 0.0,
    "gripper_topic": "/gripper_controller/commands",
}


class MujocoSimNode(Node):
    """The simulator side of the topic contract."""

    def __init__(self) -> None:
        super().__init__("mujoco_sim_node")
        overrides = declare_node_parameters(self, PARAMETERS)
        cfg = load_config(self.get_parameter("config").value, overrides)
        self.mode = choice(self, "mode", ("lockstep", "realtime"))
        plant_file = str(self.get_parameter("plant").value)
        self.plant = load_plant(plant_file) if plant_file else None
        dr = self.plant.env_spec() if self.plant else load_dr(cfg.dr)
        camera = bool(self.get_parameter("publish_camera").value)  # a rendering env keeps the full model
        self.core = EnvCore(cfg, dr, 1, int(self.get_parameter("seed").value), visual=camera)
        self.model = self.core.models[0]
        if self.plant:  # applied once now; every reset re-applies the same fixed values
            self.core.dr[0].sample_reset(self.model)
        latency = self.plant.action_latency if self.plant else 0
        self._cmd_delay = DelayLine(1, self.model.nu, latency)
        self._latency = latency
        self._act_noise = self.plant.action_noise if self.plant else 0.0
        self._obs_noise = self.plant.obs_noise if self.plant else 0.0
        self._noise_rng = np.random.default_rng(int(self.get_parameter("seed").value) + 1)
        self.data = mujoco.MjData(self.model)
        self.joints = published_joints(self.model)
        self.joint_names = [mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in self.joints]
        self._qadr = np.array([self.model.jnt_qposadr[j] for j in self.joints], dtype=np.int64)
        self._vadr = np.array([self.model.jnt_dofadr[j] for j in self.joints], dtype=np.int64)
        self.episode = 0
        self.steps = 0
        self.paused = False
        self._ctrl = np.zeros(self.model.nu)
        self._state_bytes = cdr.JointStateEncoder(self.joint_names)
        self._last_state = b""  # the last /joint_states sent, for re-sent commands
        # lockstep commands carry a sequence number in layout.data_offset (0 = none): a re-sent
        # command (its answer was lost or late) gets the last state again instead of a second step
        self._last_seq = 0
        self.duplicates = 0
        self._lo, self._hi = self.core.robot.ctrl_low, self.core.robot.ctrl_high
        robot = self.core.robot
        self._grip = list(robot.gripper_actuators)
        self._arm = np.array([k for k in range(self.model.nu) if k not in self._grip], dtype=np.int64)
        self._clock_listeners = 0
        self._stamp_offset = float(self.get_parameter("stamp_offset_s").value)
        self.add_on_set_parameters_callback(self._on_parameters)

        controller = self.get_parameter("controller").value
        self.pub_state = self.create_publisher(JointState, "/joint_states", qos.STATE)
        self.pub_clock = self.create_publisher(Clock, "/clock", qos.STATE)
        self.pub_task = self.create_publisher(Float64MultiArray, "/embodied/task", qos.LATCHED)
        self.pub_image = None
        if self.get_parameter("publish_camera").value:
            self.pub_image = self.create_publisher(Image, "/camera/image_raw", qos.SENSOR)
            h, w = cfg.env.image_size
            self._renderer = mujoco.Renderer(self.model, h, w)
        # the lockstep hot loop: state out and commands in as serialized bytes (embodied_ws.ros.cdr)
        self.create_subscription(Float64MultiArray, f"/{controller}/commands", self._on_command, qos.COMMAND, raw=True)
        if self._grip:
            gtopic = str(self.get_parameter("gripper_topic").value)
            self.create_subscription(Float64MultiArray, gtopic, self._on_gripper, qos.COMMAND)
        self.create_service(Trigger, "~/reset", self._on_reset)
        # link check: ~/ping is echoed on ~/pong at once (bench/ros_bridge.py's raw round-trip peer)
        self.pub_pong = self.create_publisher(Float64MultiArray, "~/pong", qos.COMMAND)
        self.create_subscription(Float64MultiArray, "~/ping", self.pub_pong.publish, qos.COMMAND)
        self.create_service(SetBool, "~/set_pause", self._on_pause)
        # start at the nominal pose; episodes (and their DR/goal draws) begin with ~/reset, so a
        # client seeded like this node sees exactly the episodes an in-process env would
        mujoco.mj_forward(self.model, self.data)
        self._ctrl = self.core.ctrl_mid + self.core.ctrl_half * self.core.hold_action(self.data.qpos)
        self._cmd_delay.reset(0, self._ctrl, latency)
        self.pub_task.publish(conv.float_array(self.core.goal[0], "goal", self.episode))  # latched: episode 0 = none
        self._publish()
        if self.mode == "realtime":
            rtf = float(self.get_parameter("real_time_factor").value)
            self.create_timer(self.core.control_dt / max(rtf, 1e-6), self._tick)
        self.get_logger().info(
            f"{self.core.robot.name}/{cfg.env.task} in {self.mode} mode, {len(self.joints)} joints, "
            f"{1.0 / self.core.control_dt:.0f} Hz control, commands on /{controller}/commands"
            + (f", plant {plant_file} (latency {latency} steps)" if self.plant else "")
        )

    # ------------------------------------------------------------------ simulation
    def reset_episode(self) -> None:
        """New episode: DR into the model, goal, initial state; publish state and task."""
        qpos = self.core.begin_episode(0)
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = qpos
        self._ctrl = self.core.ctrl_mid + self.core.ctrl_half * self.core.hold_action(qpos)
        self.data.ctrl[:] = self._ctrl
        self._cmd_delay.reset(0, self._ctrl, self._latency)
        mujoco.mj_forward(self.model, self.data)
        self.episode += 1
        self.steps = 0
        self._last_seq = 0
        self.pub_task.publish(conv.float_array(self.core.goal[0], "goal", self.episode))
        self._publish()

    def step(self) -> None:
        """Advance one control period with the current command (``action_latency`` periods old) and publish."""
        ctrl = self._cmd_delay.push(self._ctrl[None])[0] if self._latency else self._ctrl
        if self._act_noise:
            noisy = ctrl + self._noise_rng.standard_normal(ctrl.shape) * self._act_noise * self.core.ctrl_half
            ctrl = np.minimum(np.maximum(noisy, self._lo), self._hi)
        self.data.ctrl[:] = ctrl
        mujoco.mj_step(self.model, self.data, nstep=self.core.frame_skip)
        self.steps += 1
        self._publish()

    def _publish(self) -> None:
        d, t = self.data, self.data.time + self._stamp_offset
        q, v = d.qpos[self._qadr], d.qvel[self._vadr]
        if self._obs_noise:
            q = q + self._noise_rng.standard_normal(q.shape) * self._obs_noise
            v = v + self._noise_rng.standard_normal(v.shape) * self._obs_noise
        self._last_state = self._state_bytes.encode(q, v, d.qfrc_actuator[self._vadr], t)
        self.pub_state.publish(self._last_state)
        if self.steps % 50 == 0:  # re-check now and then: the query itself is not free
            self._clock_listeners = self.pub_clock.get_subscription_count()
        if self._clock_listeners:  # a publish costs tens of µs: only when someone listens
            self.pub_clock.publish(Clock(clock=conv.to_time(t)))
        if self.pub_image is not None:
            self._renderer.update_scene(d)
            rgb = self._renderer.render()
            img = Image(height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8", step=rgb.shape[1] * 3)
            img.header.stamp = conv.to_time(t)
            img.data = rgb.tobytes()
            self.pub_image.publish(img)

    # ------------------------------------------------------------------ callbacks
    def _on_command(self, raw: bytes) -> None:
        try:
            values, seq = cdr.float_array_data(raw)
        except cdr.CdrError as exc:
            self.get_logger().warn(f"command ignored: {exc}")
            return
        if values.size not in (self.model.nu, self._arm.size):
            also = f" (or {self._arm.size}: the arm's alone)" if self._grip else ""
            self.get_logger().warn(f"command has {values.size} values, expected {self.model.nu}{also}; ignored")
            return
        if not math.isfinite(values.sum()):
            self.get_logger().warn("non-finite command ignored")
            return
        if self.mode == "lockstep" and seq and seq <= self._last_seq:
            self.duplicates += 1
            self.pub_state.publish(self._last_state)
            self.get_logger().info(
                f"{self.duplicates} re-sent commands answered with the last state", throttle_duration_sec=10.0
            )
            return
        self._last_seq = seq
        if values.size != self.model.nu:  # the arm's alone: the grippers keep their own command
            full = self._ctrl.copy()
            full[self._arm] = values
            values = full
        self._ctrl = np.minimum(np.maximum(values, self._lo), self._hi)
        if self.mode == "lockstep" and not self.paused:
            self.step()

    def _on_gripper(self, msg: Float64MultiArray) -> None:
        """Leader joint positions, one per gripper (a forward position gripper controller's command)."""
        values = conv.array_of(msg)
        if values.size != len(self._grip) or not np.isfinite(values).all():
            self.get_logger().warn(f"gripper command ignored: {len(self._grip)} finite values expected",
                                   throttle_duration_sec=5.0)  # fmt: skip
            return
        for k, g, v in zip(self._grip, self.core.robot.grippers, values, strict=False):
            self._ctrl[k] = min(max(g.ctrl(g.action(v)), self._lo[k]), self._hi[k])

    def _tick(self) -> None:
        if not self.paused:
            self.step()

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self.reset_episode()
        response.success = True
        response.message = f"episode {self.episode}"  # for people; clients read the id from /embodied/task
        return response

    def _on_parameters(self, params: list) -> SetParametersResult:
        for p in params:
            if p.name == "stamp_offset_s":
                value = float(p.value)
                if not (math.isfinite(value) and self.data.time + value >= 0):
                    return SetParametersResult(successful=False, reason="stamp_offset_s: finite, stamps >= 0")
                self._stamp_offset = value
        return SetParametersResult(successful=True)

    def _on_pause(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        self.paused = bool(request.data)
        response.success = True
        response.message = "paused" if self.paused else "running"
        return response


def main(args: list[str] | None = None) -> int:
    """Entry point (``ros2 run embodied_ws mujoco_sim_node``)."""
    return run_node(MujocoSimNode, args)


if __name__ == "__main__":
    sys.exit(main())

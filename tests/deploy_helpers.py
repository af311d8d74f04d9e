"""Helpers for the deployment tests: a run folder whose policy went through the real export path (untrained PPO)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np


def untrained_run(run_dir: Path, *overrides: str, action_bias: float | None = None) -> Path:
    """Write ``run_dir/config.yaml`` and ``run_dir/policy/`` from a freshly initialised PPO (arm3 reach, DR off),
    in joint deltas (an action is a push on each joint, what the envelope and fault tests reason in; the preset's
    ``auto`` would give ``ee_delta``): ``env.action_mode=...`` in ``overrides`` picks another mode.

    The weights are random (seeded) but the files, shapes and normalization are exactly what
    ``embodied-ws train`` exports.

    :param action_bias: set the action head's bias to this: the policy then pushes every actuator the same
        way whatever it observes (an untrained head's outputs are near zero and their sign is luck)
    """
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from embodied_ws.config.loader import load_config, load_dr
    from embodied_ws.rl.export import export_policy
    from embodied_ws.rl.ppo import ppo_kwargs
    from embodied_ws.rl.run import save_run_config
    from embodied_ws.sim.env import RobotEnv

    cfg = load_config("reach", ["dr=none", "env.action_mode=delta", *overrides])
    env = RobotEnv(cfg, load_dr(cfg.dr), seed=0)
    venv = VecNormalize(DummyVecEnv([lambda: env]), norm_obs=True, norm_reward=False)
    venv.seed(0)
    venv.reset()
    venv.action_space.seed(0)
    for _ in range(64):  # non-trivial normalization statistics
        venv.step([venv.action_space.sample()])
    kw = ppo_kwargs(cfg)
    kw.update(device="cpu", batch_size=64)
    model = PPO(env=venv, **kw)
    if action_bias is not None:
        import torch

        with torch.no_grad():
            model.policy.action_net.bias.fill_(action_bias)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_run_config(run_dir, cfg)
    export_policy(run_dir / "policy", model, venv, env.core)
    return run_dir


def deploy_parity(core: Any, env: Any, obs: Any, ticks: int = 60) -> tuple[float, float]:
    """Run a deploy ``ControlCore`` beside the training ``env`` it was exported from, the core fed the env's
    measured state and the env stepped with the core's policy: ``(largest observation difference, largest
    command difference)`` over ``ticks`` control periods (``obs``: the env's observation after its reset)."""
    now, worst_obs, worst_cmd = 0.0, 0.0, 0.0
    for k in range(ticks):
        assert core.set_state(env.data.qpos[core.qpos_adr], env.data.qvel[core.qvel_adr], float(k), now)
        cmd = core.tick(now)
        assert cmd is not None
        worst_obs = max(worst_obs, float(np.abs(core.last_obs.astype(np.float32) - obs).max()))
        obs, *_ = env.step(core.policy.act(obs))
        worst_cmd = max(worst_cmd, float(np.abs(env.data.ctrl - cmd).max()))
        now += 1.0 / core.rate_hz
    return worst_obs, worst_cmd


#: the command topic of the default controller
COMMANDS = "/joint_group_position_controller/commands"


class LifecycleCalls:
    """Spinning, waiting, service calls and lifecycle transitions of a test probe (needs ``ex``, an rclpy
    executor with the probe's node, ``change`` and ``change_type``)."""

    ex: Any  # the probe's executor
    change: Any  # the /policy_node/change_state client
    change_type: Any  # lifecycle_msgs ChangeState

    def spin(self, seconds: float) -> None:
        """Process callbacks for ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.ex.spin_once(timeout_sec=0.02)

    def wait(self, pred: Any, timeout: float) -> bool:
        """Process callbacks until ``pred()`` holds (True) or ``timeout`` seconds pass (False)."""
        end = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > end:
                return False
            self.ex.spin_once(timeout_sec=0.02)
        return True

    def call(self, client: Any, request: Any, timeout: float = 30.0, resend: bool = False) -> Any:
        """Call a service. ``resend`` (idempotent services only): re-send every 5 s, as a reply sent before DDS
        matched our response reader is lost (``wait_for_service`` only says the request side is matched)."""
        assert client.wait_for_service(timeout_sec=timeout), client.srv_name
        tries, wait_s = (max(1, int(timeout // 5)), 5.0) if resend else (1, timeout)
        for _ in range(tries):
            future = client.call_async(request)
            if self.wait(future.done, wait_s):
                return future.result()
        raise AssertionError(f"{client.srv_name} did not answer")

    def transition(self, label: str) -> bool:
        """A lifecycle transition of /policy_node by name; whether it succeeded."""
        from lifecycle_msgs.msg import Transition

        ids = {"configure": Transition.TRANSITION_CONFIGURE, "activate": Transition.TRANSITION_ACTIVATE,
               "deactivate": Transition.TRANSITION_DEACTIVATE, "cleanup": Transition.TRANSITION_CLEANUP}  # fmt: skip
        req = self.change_type.Request()
        req.transition.id = ids[label]
        return bool(self.call(self.change, req).success)


class FaultProbe(LifecycleCalls):
    """The fault tests' own rclpy node: lifecycle client, e-stop and task publisher, simulator services, and
    listeners on commands, joint states and /diagnostics that keep each message's *source timestamp* (the
    publisher's clock: the same machine's for every node), so a command can be compared with the states
    published before it, whatever order they reach this process in.

    :param joints: the actuated joints in command order (``/joint_states`` is reordered to them)
    """

    def __init__(self, joints: list[str]) -> None:
        import numpy as np
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from lifecycle_msgs.srv import ChangeState, GetState
        from rcl_interfaces.srv import SetParameters
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Bool, Float64MultiArray
        from std_srvs.srv import SetBool, Trigger

        from embodied_ws.ros import qos

        self.np = np
        self.joints = joints
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = n = rclpy.create_node("fault_probe", context=self.ctx)
        deep = QoSProfile(depth=500, reliability=ReliabilityPolicy.RELIABLE)  # nothing dropped while we are busy
        #: (source time s, arrival time s, command)
        self.commands: list[tuple[float, float, Any]] = []
        #: (source time s, arrival time s, positions in command order, stamp s, publisher's sequence number)
        self.states: list[tuple[float, float, Any, float, int]] = []
        #: (arrival time s, status values with ``level`` and ``message``)
        self.diags: list[tuple[float, dict[str, Any]]] = []
        self.goal: Any = None
        n.create_subscription(Float64MultiArray, COMMANDS, self._on_cmd, deep)
        n.create_subscription(JointState, "/joint_states", self._on_state, deep)
        n.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 50)
        n.create_subscription(Float64MultiArray, "/embodied/task", lambda m: setattr(self, "goal", m), qos.LATCHED)
        self.estop_pub = n.create_publisher(Bool, "/embodied/estop", qos.LATCHED)
        self.task_pub = n.create_publisher(Float64MultiArray, "/embodied/task", qos.LATCHED)
        self.change = n.create_client(ChangeState, "/policy_node/change_state")
        self.change_type = ChangeState
        self.get = n.create_client(GetState, "/policy_node/get_state")
        self.reset = n.create_client(Trigger, "/mujoco_sim_node/reset")
        self.pause = n.create_client(SetBool, "/mujoco_sim_node/set_pause")
        self.params = n.create_client(SetParameters, "/mujoco_sim_node/set_parameters")
        self._msgs = {"ChangeState": ChangeState, "Trigger": Trigger, "SetBool": SetBool, "Bool": Bool,
                      "Float64MultiArray": Float64MultiArray, "SetParameters": SetParameters}  # fmt: skip
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(n)

    # ------------------------------------------------------------------ listeners
    def _on_cmd(self, msg: Any, info: dict[str, Any]) -> None:
        self.commands.append((info["source_timestamp"] * 1e-9, time.monotonic(), self.np.array(msg.data)))

    def _on_state(self, msg: Any, info: dict[str, Any]) -> None:
        pos = dict(zip(msg.name, msg.position, strict=True))
        q = self.np.array([pos[j] for j in self.joints])
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        seq = int(info.get("publication_sequence_number") or 0)
        self.states.append((info["source_timestamp"] * 1e-9, time.monotonic(), q, stamp, seq))

    def _on_diag(self, msg: Any) -> None:
        for s in msg.status:
            if s.name.startswith("policy_node"):
                d = {kv.key: kv.value for kv in s.values}
                level = int.from_bytes(s.level, "little") if isinstance(s.level, bytes) else int(s.level)
                stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9  # the node's (wall) clock
                d.update(level=level, message=s.message, stamp=stamp)
                self.diags.append((time.monotonic(), d))

    # ------------------------------------------------------------------ waiting and calling
    def diag_since(self, t: float, pred: Any) -> dict[str, Any] | None:
        """The first /diagnostics status that arrived after ``t`` and satisfies ``pred`` (None: none yet)."""
        return next((d for ta, d in self.diags if ta > t and pred(d)), None)

    def wait_diag(self, t: float, pred: Any, timeout: float) -> dict[str, Any]:
        """Wait for :meth:`diag_since`; fails with the last statuses seen."""
        ok = self.wait(lambda: self.diag_since(t, pred) is not None, timeout)
        assert ok, [(d["mode"], d["message"]) for _, d in self.diags[-5:]]
        return self.diag_since(t, pred)

    def estop(self, on: bool) -> float:
        """Publish the e-stop (latched); returns the publish time on the source clock (wall time)."""
        self.estop_pub.publish(self._msgs["Bool"](data=on))
        return time.time()

    def publish_task(self, values: list[float]) -> None:
        self.task_pub.publish(self._msgs["Float64MultiArray"](data=[float(v) for v in values]))

    def reset_sim(self) -> None:
        self.goal = None
        assert self.call(self.reset, self._msgs["Trigger"].Request(), resend=True).success
        assert self.wait(lambda: self.goal is not None, 20)

    def pause_sim(self, on: bool) -> None:
        assert self.call(self.pause, self._msgs["SetBool"].Request(data=on), resend=True).success

    def set_sim_parameter(self, name: str, value: float) -> None:
        from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue

        req = self._msgs["SetParameters"].Request()
        req.parameters = [Parameter(name=name, value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE,
                                                                    double_value=float(value)))]  # fmt: skip
        assert all(r.successful for r in self.call(self.params, req, resend=True).results)

    # ------------------------------------------------------------------ measurements
    def command_offsets(self, since: float = 0.0, known: tuple = ()) -> list[float]:
        """For every command published after ``since`` (source time): its largest joint distance from the
        measured pose the node had, taken as the closest of the states it may have had: those published in the
        0.3 s before the command (one may still have been on its way), the last one published before them
        (what the node holds on to when nothing newer came, as in a watchdog hold) and, when the next state
        is the first this process got from a new publisher, that one (the node may have discovered the new
        publisher before this process did and had its first states, at the same pose).

        :param known: ``(from, to, pose)``: the node is known (from its /diagnostics) to have had ``pose`` as its
            measured pose between these source times (it had not yet received a new publisher's states)
        """
        np = self.np
        ts = np.array([s[0] for s in self.states])
        qs = np.array([s[2] for s in self.states]) if self.states else np.zeros((0, len(self.joints)))
        seqs = [s[4] for s in self.states]
        first_of_new = {i for i in range(len(seqs)) if i == 0 or seqs[i] < seqs[i - 1]}
        out = []
        for tc, _, c in self.commands:
            if tc < since:
                continue
            recent = (ts <= tc) & (ts >= tc - 0.3)
            older = np.nonzero(ts < tc - 0.3)[0]
            if older.size:
                recent[older[-1]] = True
            later = np.nonzero(ts > tc)[0]
            if later.size and int(later[0]) in first_of_new:
                recent[later[0]] = True
            assert recent.any(), "a command with no state around it"
            cands = [qs[recent]] + [pose[None] for t0, t1, pose in known if t0 <= tc <= t1]
            out.append(float(np.min(np.max(np.abs(np.concatenate(cands) - c), axis=1))))
        return out

    def timeline(self, at: float, around: float = 0.6) -> str:
        """What this probe saw within ``around`` s of source time ``at``: states, commands and /diagnostics
        in source-time order (the failure message of an offset check, so a run on another machine can be read)."""
        rows = [(ts, f"state  seq {seq:5d} stamp {stamp:9.3f} q {np.round(q, 3).tolist()}")
                for ts, _, q, stamp, seq in self.states if abs(ts - at) <= around]  # fmt: skip
        rows += [(tc, f"cmd    {np.round(c, 3).tolist()}") for tc, _, c in self.commands if abs(tc - at) <= around]
        rows += [(d["stamp"], f"diag   {d['mode']}: {d['message']}")
                 for _, d in self.diags if abs(d["stamp"] - at) <= around]  # fmt: skip
        return "\n".join(f"{t - at:+7.3f} {line}" for t, line in sorted(rows, key=lambda r: r[0]))

    def close(self) -> None:
        import rclpy

        self.ex.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)

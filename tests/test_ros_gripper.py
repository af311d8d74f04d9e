"""Deploy of a gripper policy against the stand-in plant, over real nodes in separate processes.

One session: ``mujoco_sim_node`` as a stand-in real robot (``plant:=`` the hidden plant: gains x0.78, two
periods of command latency) running the single-jaw arm with ``task.gripper: action``, and ``policy_node`` with an
untrained policy (the real export path) whose every action is pushed to +1 (the jaw opens). This process listens:

* the gripper's command arrives on ``/gripper_controller/commands`` (std_msgs/Float64MultiArray, the leader's
  position in rad), every one inside the stroke and within the rate limit of the one before; the arm's command
  carries the arm's three joints alone; the simulated jaw follows the gripper topic (the loop is closed);
* while the state watchdog holds (the simulator paused), every gripper command is the last one before it;
* after the e-stop no gripper command at all.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deploy_helpers import FaultProbe, untrained_run
from ros_helpers import start_node, stop

pytestmark = [pytest.mark.ros, pytest.mark.slow]
FIX = Path(__file__).parent / "fixtures"
JAW = FIX / "robots" / "grippers" / "single_jaw.xml"  # leader "jaw": -0.2 (closed) .. 1.6 rad (open)
PLANT = FIX / "plants" / "hidden.yaml"
GRIPPER = "/gripper_controller/commands"
ARM = ["shoulder_pan", "shoulder_lift", "wrist_flex"]
STROKE_S = 0.5  # deploy.gripper_stroke_s (the default): a full stroke takes at least this long
START = 120.0  # a node start-up on a loaded 2-core machine


def test_a_gripper_policy_drives_the_stand_in_plant_on_its_own_topic_inside_its_envelope(tmp_path: Path) -> None:
    run = untrained_run(tmp_path / "run", f"env.robot={JAW}", "task.gripper=action", action_bias=3.0)
    sim = start_node("mujoco_sim_node", f"config:={run / 'config.yaml'}", "mode:=realtime", "seed:=5",
                     f"plant:={PLANT}")  # fmt: skip
    node = start_node("policy_node", f"policy:={run}", "autostart:=true", "deploy.soft_start_s:=0.5")
    probe = FaultProbe(ARM)
    grip: list[tuple[float, float]] = []  # (source time, command)
    jaw: list[float] = []  # measured by the simulator

    def on_grip(msg: Any, info: dict[str, Any]) -> None:
        grip.append((info["source_timestamp"] * 1e-9, float(msg.data[0]) if len(msg.data) == 1 else np.nan))

    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    deep = QoSProfile(depth=500, reliability=ReliabilityPolicy.RELIABLE)
    probe.node.create_subscription(Float64MultiArray, GRIPPER, on_grip, deep)
    probe.node.create_subscription(JointState, "/joint_states", lambda m: jaw.append(m.position[m.name.index("jaw")]),
                                   deep)  # fmt: skip
    out = ""
    try:
        probe.reset_sim()
        t = time.monotonic()
        d = probe.wait_diag(t, lambda d: d["mode"] == "running", START)
        rate = float(d["target_hz"])
        max_step = 1.8 / STROKE_S / rate
        # the jaw opens at the rate limit, and the simulated jaw follows the gripper topic
        assert probe.wait(lambda: grip and grip[-1][1] == pytest.approx(1.6), 20), grip[-5:]
        assert probe.wait(lambda: jaw and jaw[-1] > 1.4, 20), jaw[-5:]
        values = np.array([c for _, c in grip])
        steps = np.abs(np.diff(values))
        print(
            f"{len(values)} gripper commands from {values[0]:.3f} to {values[-1]:.3f} rad, largest step "
            f"{steps.max():.4f} (limit {max_step:.4f}); measured jaw {jaw[-1]:.3f}"
        )
        assert np.isfinite(values).all() and values.min() >= -0.2 - 1e-9 and values.max() <= 1.6 + 1e-9
        assert steps.max() <= max_step + 1e-9 and (steps > max_step / 2).sum() >= 3  # it really ramped
        assert probe.commands and all(c.shape == (3,) for _, _, c in probe.commands)  # the arm's joints alone

        # the state watchdog: the gripper keeps its last command
        probe.pause_sim(True)
        t = time.monotonic()
        probe.wait_diag(t, lambda d: d["mode"] == "state_timeout", 10)
        n, last = len(grip), grip[-1][1]
        probe.spin(0.6)
        held = [c for _, c in grip[n:]]
        print(f"watchdog: {len(held)} gripper commands, all {last:.4f}")
        assert held and all(c == last for c in held), held
        d = probe.wait_diag(t, lambda d: int(d.get("gripper_events.hold", 0)) > 0, 10)
        assert d["gripper_command"] == str([round(last, 5)]), d
        probe.pause_sim(False)
        probe.wait_diag(time.monotonic(), lambda d: d["mode"] == "running", 10)

        # the e-stop: nothing more on the gripper topic
        t_stop = probe.estop(True)
        probe.wait_diag(time.monotonic() - 1.0, lambda d: d["mode"] == "estop", 10)
        probe.spin(1.0)
        late = [tc - t_stop for tc, _ in grip if tc > t_stop + 0.2]
        assert not late, late
    finally:
        out = stop(node)
        stop(sim)
        probe.estop(False)
        probe.close()
    assert "Traceback" not in out and f"gripper topic {GRIPPER}" in out, out[-3000:]

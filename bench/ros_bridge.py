"""ROS-topic env speed vs a raw rclpy ping-pong between the same two processes (one JSON object).

Starts mujoco_sim_node (lockstep) in a second process, then from this process measures
(1) RosTopicEnv steps: command out, new /joint_states back, observation and reward computed;
(2) a raw rclpy round trip: Float64MultiArray to the node's ~/ping, echoed on ~/pong.
DDS stays on this machine (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, its own ROS_DOMAIN_ID).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def pingpong(n: int) -> float:
    """Round trips/s of a bare publisher/subscriber pair through the sim node's echo."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from std_msgs.msg import Float64MultiArray

    from embodied_ws.ros import qos

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("bench_ping", context=ctx)
    got = threading.Event()
    node.create_subscription(Float64MultiArray, "/mujoco_sim_node/pong", lambda m: got.set(), qos.COMMAND)
    pub = node.create_publisher(Float64MultiArray, "/mujoco_sim_node/ping", qos.COMMAND)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    msg = Float64MultiArray(data=[0.1, 0.2, 0.3])
    while pub.get_subscription_count() == 0 or node.count_publishers("/mujoco_sim_node/pong") == 0:
        ex.spin_once(timeout_sec=0.05)
    for _ in range(50):  # warm-up; re-send until both directions have matched
        got.clear()
        pub.publish(msg)
        end = time.monotonic() + 0.2
        while not got.is_set() and time.monotonic() < end:
            ex.spin_once(timeout_sec=0.05)
    t = time.perf_counter()
    for _ in range(n):
        got.clear()
        pub.publish(msg)
        while not got.is_set():
            ex.spin_once(timeout_sec=0.5)
    rate = n / (time.perf_counter() - t)
    ex.shutdown()
    node.destroy_node()
    rclpy.try_shutdown(context=ctx)
    return rate


def env_steps(n: int) -> tuple[float, np.ndarray]:
    """Steps/s and per-step latencies (s) of the ROS-topic env in lockstep mode."""
    from embodied_ws.config.loader import load_config, load_dr
    from embodied_ws.ros.topic_env import RosTopicEnv

    cfg = load_config("reach")
    env = RosTopicEnv(cfg, load_dr(cfg.dr), seed=0)
    env.reset()
    actions = np.random.default_rng(0).uniform(-1, 1, (n, 3))
    lat = np.empty(n)
    t0 = time.perf_counter()
    for i, a in enumerate(actions):
        t = time.perf_counter()
        _, _, _, trunc, _ = env.step(a)
        lat[i] = time.perf_counter() - t
        if trunc:
            env.reset()
    total = time.perf_counter() - t0
    env.close()
    return n / total, lat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.setdefault("ROS_DOMAIN_ID", str(150 + os.getpid() % 80))
    sim = subprocess.Popen([sys.executable, "-m", "embodied_ws.ros.nodes.mujoco_sim_node", "--ros-args",
                            "-p", "mode:=lockstep"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        rate, lat = env_steps(args.steps)
        pp = pingpong(args.steps)
    finally:
        sim.terminate()
        sim.wait(timeout=30)
    print(json.dumps({
        "steps": args.steps,
        "env_steps_per_s": round(rate, 1),
        "pingpong_roundtrips_per_s": round(pp, 1),
        "step_latency_p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 3),
        "step_latency_p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 3),
        "ratio": round(rate / pp, 3),
    }))  # fmt: skip


if __name__ == "__main__":
    main()

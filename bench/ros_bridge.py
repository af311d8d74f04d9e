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


class PingPong:
    """A bare publisher/subscriber pair round-tripping through the sim node's ~/ping echo."""

    def __init__(self) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from std_msgs.msg import Float64MultiArray

        from embodied_ws.ros import qos

        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node("bench_ping", context=self.ctx)
        self.got = threading.Event()
        self.node.create_subscription(Float64MultiArray, "/mujoco_sim_node/pong", lambda m: self.got.set(), qos.COMMAND)
        self.pub = self.node.create_publisher(Float64MultiArray, "/mujoco_sim_node/ping", qos.COMMAND)
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(self.node)
        self.msg = Float64MultiArray(data=[0.1, 0.2, 0.3])
        while self.pub.get_subscription_count() == 0:
            self.ex.spin_once(timeout_sec=0.05)
        for _ in range(50):  # warm-up; re-send until both directions have matched
            self.got.clear()
            self.pub.publish(self.msg)
            end = time.monotonic() + 0.2
            while not self.got.is_set() and time.monotonic() < end:
                self.ex.spin_once(timeout_sec=0.05)

    def rate(self, n: int) -> float:
        """Round trips per second over ``n`` round trips."""
        t = time.perf_counter()
        for _ in range(n):
            self.got.clear()
            self.pub.publish(self.msg)
            while not self.got.is_set():
                self.ex.spin_once(timeout_sec=0.5)
        return n / (time.perf_counter() - t)

    def close(self) -> None:
        import rclpy

        self.ex.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)


def env_rate(env, n: int, rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """Steps/s and per-step latencies (s) of the ROS-topic env in lockstep mode."""
    lat = np.empty(n)
    t0 = time.perf_counter()
    for i, a in enumerate(rng.uniform(-1, 1, (n, 3))):
        t = time.perf_counter()
        _, _, _, trunc, _ = env.step(a)
        lat[i] = time.perf_counter() - t
        if trunc:
            env.reset()
    return n / (time.perf_counter() - t0), lat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.setdefault("ROS_DOMAIN_ID", str(150 + os.getpid() % 80))
    sim = subprocess.Popen(
        [sys.executable, "-m", "embodied_ws.ros.nodes.mujoco_sim_node", "--ros-args", "-p", "mode:=lockstep"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    from embodied_ws.config.loader import load_config, load_dr
    from embodied_ws.ros.topic_env import RosTopicEnv

    try:
        cfg = load_config("reach")
        env = RosTopicEnv(cfg, load_dr(cfg.dr), seed=0)
        env.reset()
        ping = PingPong()
        rng = np.random.default_rng(0)
        rates, pps, lats = [], [], []
        for _ in range(args.repeats):  # alternate, best of each: the machine's noise hits both alike
            r, lat = env_rate(env, args.steps, rng)
            rates.append(r)
            lats.append(lat)
            pps.append(ping.rate(args.steps))
        rate, pp, lat = max(rates), max(pps), np.concatenate(lats)
        env.close()
        ping.close()
    finally:
        sim.terminate()
        sim.wait(timeout=30)
    print(
        json.dumps(
            {
                "steps": args.steps,
                "repeats": args.repeats,
                "env_steps_per_s": round(rate, 1),
                "pingpong_roundtrips_per_s": round(pp, 1),
                "step_latency_p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 3),
                "step_latency_p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 3),
                "ratio": round(rate / pp, 3),
            }
        )
    )


if __name__ == "__main__":
    main()

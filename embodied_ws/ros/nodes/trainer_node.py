"""trainer_node: the ``embodied-ws train`` pipeline as a ROS 2 node.

Trains on the in-process MuJoCo envs (``backend: mujoco``, fastest) or through the topic contract
(``backend: ros``, e.g. with mujoco_sim_node in lockstep or Gazebo). Publishes progress as JSON on
``~/progress`` (std_msgs/String) and serves ``~/save_checkpoint`` and ``~/stop`` (std_srvs/Trigger).
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from stable_baselines3.common.callbacks import BaseCallback
from std_msgs.msg import String
from std_srvs.srv import Trigger

from embodied_ws.config.loader import load_config
from embodied_ws.core.errors import EXIT_USER_ERROR, EnvLost, UserError
from embodied_ws.rl.backends import BACKENDS
from embodied_ws.ros.params import choice, declare_node_parameters
from embodied_ws.ros.spin import create_node

PARAMETERS = {"config": "reach", "backend": "mujoco", "name": "ros_run", "runs": "runs", "resume": False}


class NodeHooks(BaseCallback):
    """Publishes progress and honours the node's stop / save requests at rollout boundaries."""

    def __init__(self, node: TrainerNode) -> None:
        super().__init__()
        self.node = node
        self.checkpoints: Any = None

    def attach(self, checkpoints: Any) -> None:
        """Called by the pipeline with its checkpoint writer."""
        self.checkpoints = checkpoints

    def _on_step(self) -> bool:
        return not self.node.stop_requested.is_set()

    def _on_rollout_end(self) -> None:
        if self.node.save_requested.is_set() and self.checkpoints is not None:
            self.node.save_requested.clear()
            self.node.last_checkpoint = str(self.checkpoints.save())
        self.node.publish_progress(
            {"step": int(self.model.num_timesteps), "fps": self.logger.name_to_value.get("time/fps")}
        )


class TrainerNode(Node):
    """Runs training in a worker thread and exposes it over ROS."""

    def __init__(self) -> None:
        super().__init__("trainer_node")
        overrides = declare_node_parameters(self, PARAMETERS)
        backend = choice(self, "backend", tuple(BACKENDS.names()))
        overrides.append(f"train.vec_env={backend}")
        if BACKENDS.get(backend).max_envs is not None:
            overrides.append(f"train.n_envs={BACKENDS.get(backend).max_envs}")
        self.cfg = load_config(self.get_parameter("config").value, overrides)
        self.stop_requested = threading.Event()
        self.save_requested = threading.Event()
        self.last_checkpoint = ""
        self.result: dict[str, Any] | None = None
        self.error = ""
        self.pub = self.create_publisher(String, "~/progress", 10)
        self.create_service(Trigger, "~/save_checkpoint", self._on_save)
        self.create_service(Trigger, "~/stop", self._on_stop)
        self.worker = threading.Thread(target=self._train, daemon=True)

    def publish_progress(self, data: dict[str, Any]) -> None:
        """Publish one progress record (JSON)."""
        self.pub.publish(String(data=json.dumps(data)))

    def _train(self) -> None:
        from embodied_ws.rl.train import train

        name, runs = self.get_parameter("name").value, Path(self.get_parameter("runs").value)
        try:
            self.result = train(
                self.cfg,
                name,
                runs,
                resume=bool(self.get_parameter("resume").value),
                progress=False,
                extra_callbacks=[NodeHooks(self)],
            )
            self.publish_progress(
                {"done": True, "steps": self.result["steps"], "success": self.result["final_success"]}
            )
        except (UserError, EnvLost) as exc:
            self.error = str(exc)
            self.get_logger().error(f"training stopped: {exc}")
            self.publish_progress({"done": True, "error": self.error})

    def _on_save(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self.save_requested.set()
        response.success, response.message = True, "checkpoint will be written at the end of this rollout"
        return response

    def _on_stop(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self.stop_requested.set()
        response.success, response.message = True, "stopping after the current step; a final checkpoint is saved"
        return response


def main(args: list[str] | None = None) -> int:
    """Entry point (``ros2 run embodied_ws trainer_node``)."""
    node = create_node(TrainerNode, args)
    if node is None:
        return EXIT_USER_ERROR
    node.worker.start()
    executor = MultiThreadedExecutor(num_threads=2)
    executor.add_node(node)
    try:
        while rclpy.ok() and node.worker.is_alive():
            executor.spin_once(timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        node.stop_requested.set()
        node.worker.join(timeout=60)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 3 if node.error else 0


if __name__ == "__main__":
    sys.exit(main())

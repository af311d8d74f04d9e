"""trainer_node: the ``embodied-ws train`` pipeline as a ROS 2 node.

Trains on the in-process MuJoCo envs (``backend: mujoco``, fastest) or through the topic contract
(``backend: ros``, e.g. with mujoco_sim_node in lockstep or Gazebo). Publishes progress as JSON on
``~/progress`` (std_msgs/String) and serves ``~/save_checkpoint`` and ``~/stop`` (std_srvs/Trigger).
Any error in the training thread is logged and published (``done`` with ``error``); the process then
exits 2 (user error), 3 (simulator lost) or 1 (anything else).
"""

from __future__ import annotations

import json
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from stable_baselines3.common.callbacks import BaseCallback
from std_msgs.msg import String
from std_srvs.srv import Trigger

from embodied_ws.config.loader import load_config
from embodied_ws.core.errors import EXIT_ENV_LOST, EXIT_USER_ERROR, EnvLost, UserError
from embodied_ws.rl.backends import BACKENDS
from embodied_ws.ros.params import choice, declare_node_parameters
from embodied_ws.ros.spin import create_node

PARAMETERS = {"config": "reach", "backend": "mujoco", "name": "ros_run", "runs": "runs", "resume": False}


class NodeHooks(BaseCallback):
    """Publishes progress and honours the node's stop / save requests at rollout boundaries."""

    def __init__(self, node: TrainerNode) -> None:
        super().__init__()
        self.node = node
        self.run: Any = None

    def attach(self, run: Any) -> None:
        """Called by the pipeline with the :class:`TrainingRun` (whose ``save()`` writes a checkpoint).

        :param run: the training run
        """
        self.run = run

    def _on_step(self) -> bool:
        return not self.node.stop_requested.is_set()

    def _on_rollout_end(self) -> None:
        if self.node.save_requested.is_set() and self.run is not None:
            self.node.save_requested.clear()
            self.node.last_checkpoint = str(self.run.save())
        self.node.publish_progress(
            {"step": int(self.model.num_timesteps), "fps": self.logger.name_to_value.get("time/fps")}
        )


class TrainerNode(Node):
    """Runs training in a worker thread and exposes it over ROS."""

    def __init__(self) -> None:
        super().__init__("trainer_node")
        overrides = declare_node_parameters(self, PARAMETERS)
        backend = choice(self, "backend", tuple(BACKENDS.names()))
        self.cfg = load_config(self.get_parameter("config").value, [*overrides, f"train.vec_env={backend}"])
        limit = BACKENDS.get(backend).max_envs
        if limit is not None and self.cfg.train.n_envs > limit:
            self.cfg.train.n_envs = limit  # e.g. ros: one simulator behind the topics
        self.stop_requested = threading.Event()
        self.save_requested = threading.Event()
        self.last_checkpoint = ""
        self.result: dict[str, Any] | None = None
        self.error = ""
        self.exit_code = 0  # 2: user error, 3: simulator lost, 1: anything else
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
        except UserError as exc:
            self._failed(exc.line(), EXIT_USER_ERROR)
        except EnvLost as exc:
            self._failed(str(exc), EXIT_ENV_LOST)
        except Exception as exc:  # the thread must not die silently: log, publish, exit non-zero
            self.get_logger().error(traceback.format_exc())
            self._failed(f"{type(exc).__name__}: {exc}", 1)

    def _failed(self, error: str, exit_code: int) -> None:
        """Training stopped on an error: log it, publish ``done`` with it, and set the process exit code."""
        self.error, self.exit_code = error, exit_code
        self.get_logger().error(f"training stopped: {error}")
        self.publish_progress({"done": True, "error": error, "exit_code": exit_code})

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
    return node.exit_code


if __name__ == "__main__":
    sys.exit(main())

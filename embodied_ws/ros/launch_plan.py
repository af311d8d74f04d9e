"""What the launch files start, as plain data (ROS-free, unit-tested); ``launch/*.launch.py`` only
turn these :class:`NodeSpec` lists into ``launch_ros`` actions."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embodied_ws.rl.backends import BACKENDS

TRUE = ("true", "1", "yes", True)


@dataclass(frozen=True)
class NodeSpec:
    """One node to launch."""

    executable: str
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    package: str = "embodied_ws"
    arguments: tuple[str, ...] = ()


@dataclass(frozen=True)
class IncludeSpec:
    """Another package's launch file to include."""

    package: str
    launch_file: str
    arguments: dict[str, str] = field(default_factory=dict)


#: launch arguments and their defaults, per launch file
SIM_ARGS = {
    "robot": "arm3",
    "task": "reach",
    "config": "reach",
    "mode": "realtime",
    "use_sim_time": "false",
    "real_time_factor": "1.0",
    "seed": "0",
}
TRAIN_ARGS = {
    "backend": "mujoco",
    "robot": "arm3",
    "task": "reach",
    "config": "reach",
    "use_sim_time": "false",
    "name": "ros_run",
}
GAZEBO_ARGS = {"robot": "arm3", "use_sim_time": "true"}
DEPLOY_ARGS = {
    "policy": "",
    "dry_run": "false",
    "autostart": "true",
    "controller": "",
    "rate_hz": "",
    "use_sim_time": "false",
}


def _flag(value: Any) -> bool:
    return str(value).lower() in TRUE


def sim_plan(
    robot: str = "arm3",
    task: str = "reach",
    config: str = "reach",
    mode: str = "realtime",
    use_sim_time: Any = False,
    real_time_factor: Any = 1.0,
    seed: Any = 0,
) -> list[NodeSpec]:
    """mujoco_sim_node for ``sim.launch.py``."""
    return [
        NodeSpec(
            "mujoco_sim_node",
            "mujoco_sim_node",
            {
                "config": config,
                "env.robot": robot,
                "env.task": task,
                "mode": mode,
                "real_time_factor": float(real_time_factor),
                "seed": int(seed),
                "use_sim_time": _flag(use_sim_time),
            },
        )
    ]


def train_plan(
    backend: str = "mujoco",
    robot: str = "arm3",
    task: str = "reach",
    config: str = "reach",
    use_sim_time: Any = False,
    name: str = "ros_run",
) -> list[NodeSpec]:
    """trainer_node, plus mujoco_sim_node in lockstep mode when the backend trains through ROS topics.

    :param backend: a registered backend name (``embodied_ws.rl.backends.BACKENDS``)
    :raises UnknownNameError: no such backend
    """
    uses_topics = BACKENDS.get(backend, "backend").ros_topics
    trainer = NodeSpec(
        "trainer_node",
        "trainer_node",
        {
            "config": config,
            "backend": backend,
            "env.robot": robot,
            "env.task": task,
            "name": name,
            "use_sim_time": _flag(use_sim_time),
        },
    )
    if not uses_topics:
        return [trainer]
    return [*sim_plan(robot, task, config, mode="lockstep", use_sim_time=use_sim_time), trainer]


def gazebo_plan(
    robot: str = "arm3", use_sim_time: Any = True, out_dir: Path | None = None
) -> list[NodeSpec | IncludeSpec]:
    """Gazebo through ros_gz: world from our MJCF, the bridge, robot_state_publisher and the spawners."""
    from embodied_ws.sim.gazebo import write_assets
    from embodied_ws.sim.robot import load_robot

    assets = write_assets(load_robot(robot, need_ee=False), out_dir or Path(tempfile.mkdtemp(prefix="embodied_gz_")))
    sim_time = _flag(use_sim_time)
    return [
        IncludeSpec("ros_gz_sim", "gz_sim.launch.py", {"gz_args": f"-r {assets.world}"}),
        NodeSpec(
            "parameter_bridge",
            "bridge",
            {"config_file": str(assets.bridge), "use_sim_time": sim_time},
            package="ros_gz_bridge",
        ),
        NodeSpec(
            "robot_state_publisher",
            "robot_state_publisher",
            {"robot_description": assets.urdf.read_text(), "use_sim_time": sim_time},
            package="robot_state_publisher",
        ),
        NodeSpec(
            "spawner",
            "spawn_joint_state_broadcaster",
            package="controller_manager",
            arguments=("joint_state_broadcaster", "--param-file", str(assets.controllers)),
        ),
        NodeSpec(
            "spawner",
            "spawn_position_controller",
            package="controller_manager",
            arguments=("joint_group_position_controller", "--param-file", str(assets.controllers)),
        ),
    ]


def deploy_plan(
    policy: str = "",
    dry_run: Any = False,
    autostart: Any = True,
    controller: str = "",
    rate_hz: Any = "",
    use_sim_time: Any = False,
) -> list[NodeSpec]:
    """policy_node for ``deploy.launch.py``; ``autostart`` configures and activates it (no lifecycle manager).

    Empty ``controller``/``rate_hz`` keep the run's ``deploy`` settings.
    """
    if not str(policy).strip():
        raise ValueError("policy:=RUN_OR_POLICY_DIR is required")
    params: dict[str, Any] = {
        "policy": str(policy),
        "dry_run": _flag(dry_run),
        "autostart": _flag(autostart),
        "use_sim_time": _flag(use_sim_time),
    }
    if str(controller).strip():
        params["deploy.controller"] = str(controller)
    if str(rate_hz).strip():
        params["deploy.rate_hz"] = float(rate_hz)
    return [NodeSpec("policy_node", "policy_node", params)]

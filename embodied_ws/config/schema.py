"""Typed configuration: dataclasses for every section of a run's YAML (also mapped to ROS parameters)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EnvConfig:
    """Which robot and task, and how the env runs.

    :param robot: robot name from ``models/``, or a path to an MJCF, URDF (``.urdf``) or xacro (``.xacro``) file
    :param robot_args: xacro arguments of a ``.xacro`` robot, as ``NAME:=VALUE`` strings
    :param package_paths: folders holding ROS packages for ``$(find pkg)`` and ``package://pkg`` (searched
        before ``AMENT_PREFIX_PATH`` and ``ROS_PACKAGE_PATH``)
    :param task: registered task name (``reach``, ``swingup``)
    :param frame_skip: physics steps per control step (control period = frame_skip × timestep)
    :param episode_steps: control steps before truncation
    :param action_mode: ``delta`` (actions move servo set-points; torque actuators stay absolute)
        or ``absolute`` (actions map linearly onto each control range)
    :param delta_scale: delta mode: largest set-point change per control step, as a fraction of the
        control range's half-width
    :param camera_obs: add an rgb image to the observation (single env only)
    :param camera: camera name for rendering and camera observations (first camera when empty)
    :param image_size: [height, width] of camera observations
    :param render_size: [height, width] of ``render()`` frames and evaluation videos
    """

    robot: str = "arm3"
    robot_args: list[str] = field(default_factory=list)
    package_paths: list[str] = field(default_factory=list)
    task: str = "reach"
    frame_skip: int = 20
    episode_steps: int = 50
    action_mode: str = "delta"
    delta_scale: float = 0.1
    camera_obs: bool = False
    camera: str = ""
    image_size: list[int] = field(default_factory=lambda: [96, 96])
    render_size: list[int] = field(default_factory=lambda: [240, 320])


@dataclass
class TaskConfig:
    """Task parameters (each task reads the ones it needs).

    :param ee_body: end-effector body or site (reach); auto-detected when empty
    :param success_threshold: reach: distance in metres counted as success
    :param target_min_z: reach: lowest target height (None: no limit)
    :param target_joint_margin: reach: fraction of each joint range kept free at both ends when
        sampling targets (targets right at joint limits are unreachable in practice: the servo
        pushes into the limit)
    :param init_noise: half-width of the uniform noise on initial joint positions (rad or m)
    :param distance_weight: reach: weight of the distance penalty
    :param velocity_weight: reach: weight of the joint-velocity penalty
    :param success_bonus: reach: reward per step spent within the threshold
    :param precision_weight: reach: weight of ``exp(-(distance / success_threshold)²)``, a term
        whose slope is steep near the target, where the plain distance penalty gives little signal
    """

    ee_body: str = ""
    success_threshold: float = 0.05
    target_min_z: float | None = None
    target_joint_margin: float = 0.0
    init_noise: float = 0.1
    distance_weight: float = 1.0
    velocity_weight: float = 0.001
    success_bonus: float = 0.5
    precision_weight: float = 0.0


@dataclass
class PPOConfig:
    """Stable-Baselines3 PPO hyperparameters (passed through by name).

    :param lr_schedule: ``constant`` or ``linear`` (decays to 0 over the run: a settled final policy)
    """

    learning_rate: float = 3e-4
    lr_schedule: str = "constant"
    n_steps: int = 64
    batch_size: int = 256
    n_epochs: int = 10
    gamma: float = 0.97
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    net_arch: list[int] = field(default_factory=lambda: [64, 64])
    log_std_init: float = -0.5
    device: str = "auto"


@dataclass
class TrainConfig:
    """Training loop settings.

    :param total_timesteps: env-step budget
    :param n_envs: parallel envs
    :param vec_env: ``mujoco`` (batched rollout, fastest), ``subproc`` or ``dummy``
    :param seed: master seed (envs, DR, PPO)
    :param normalize_obs: wrap in VecNormalize (observation statistics saved with checkpoints)
    :param checkpoint_every: env steps between checkpoints (0: only at the end)
    :param keep_checkpoints: how many recent checkpoints to keep
    :param eval_every: env steps between evaluations (0: none)
    :param eval_episodes: episodes per evaluation
    :param target_success: stop early once two evaluations in a row reach this success rate (None: never)
    :param final_eval_episodes: episodes of the final evaluation reported in the run summary
    :param curriculum_steps: env steps over which DR ranges widen from 0 to full (0: full from the start)
    """

    total_timesteps: int = 300_000
    n_envs: int = 32
    vec_env: str = "mujoco"
    seed: int = 0
    normalize_obs: bool = True
    checkpoint_every: int = 50_000
    keep_checkpoints: int = 3
    eval_every: int = 25_000
    eval_episodes: int = 32
    target_success: float | None = 0.95
    final_eval_episodes: int = 256
    curriculum_steps: int = 0


@dataclass
class RosConfig:
    """The ROS-topic env (``train.vec_env: ros``): how it talks to a simulator or robot on the topic contract.

    :param mode: ``lockstep`` (one control period per command, wait for the new state) or ``realtime``
    :param sim_node: node serving ``~/reset`` (empty: no reset service, e.g. a real robot)
    :param controller: ros2_control controller name; commands go to ``/<controller>/commands``
    :param command_topic: override of the command topic (e.g. through a relay)
    :param timeout_s: how long to wait for a state before re-sending the command (lockstep)
    :param retries: re-sends before the simulator counts as lost
    :param on_lost: ``stop`` (checkpoint and stop training) or ``wait`` (wait for it to come back)
    :param lost_wait_s: how long ``wait`` waits
    :param stale_s: realtime: a state older than this is stale (counted; lost after ``timeout_s``)
    """

    mode: str = "lockstep"
    sim_node: str = "/mujoco_sim_node"
    controller: str = "joint_group_position_controller"
    command_topic: str = ""
    timeout_s: float = 1.0
    retries: int = 3
    on_lost: str = "stop"
    lost_wait_s: float = 30.0
    stale_s: float = 0.2


@dataclass
class RunConfig:
    """A whole run: env, task, DR (a file under ``config/dr`` or an inline mapping), PPO and training."""

    env: EnvConfig = field(default_factory=EnvConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    dr: Any = "default"
    ppo: PPOConfig = field(default_factory=PPOConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    ros: RosConfig = field(default_factory=RosConfig)

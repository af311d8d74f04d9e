"""Typed configuration: dataclasses for every section of a run's YAML (also mapped to ROS parameters).

String choices are ``Literal[...]`` annotations: the loader validates every value against its field's
annotation in one place (``embodied_ws.config.loader``), so a choice is declared here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

#: names of the vec-env backends registered in ``embodied_ws.rl.backends.BACKENDS`` (a test keeps both in step)
VecEnvName = Literal["mujoco", "subproc", "dummy", "ros", "ray"]


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
    :param ee_speed_limit: delta mode, for a model that states no joint velocity limits: the largest
        end-effector speed (m/s) all arm joints together may command at the home pose,
        ``Σ_j |J_j| · Δq_j / control period`` (``J_j``: the joint's end-effector Jacobian column); 0: no bound
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
    action_mode: Literal["delta", "absolute"] = "delta"
    delta_scale: float = 0.1
    ee_speed_limit: float = 5.5
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
    :param approach_speed: reach: mean end-effector speed (m/s) an episode must allow for: episodes are
        lengthened beyond ``env.episode_steps`` until the median distance from the home pose's end effector
        to a target is covered at this speed (a bigger arm gets longer episodes); 0: no lengthening
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
    approach_speed: float = 0.0


@dataclass
class PPOConfig:
    """Stable-Baselines3 PPO hyperparameters (passed through by name).

    :param lr_schedule: ``constant`` or ``linear`` (decays to 0 over the run: a settled final policy)
    """

    learning_rate: float = 3e-4
    lr_schedule: Literal["constant", "linear"] = "constant"
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
class RayConfig:
    """The Ray backend (``train.vec_env: ray``): where the sampler actors run and how big they are.

    :param address: Ray cluster to join (``auto``, ``host:6379``, ``ray://host:10001``); empty starts a
        local cluster on this machine (also set by ``embodied-ws train --ray-address``)
    :param actors: sampler actors; ``train.n_envs`` is split evenly over them (each steps its batch at once)
    :param cpus_per_actor: CPUs each actor declares to Ray (its MuJoCo rollout threads), so actors land on
        nodes that offer CPUs (samplers) and not on a learner node started with ``--num-cpus=0``
    """

    address: str = ""
    actors: int = 2
    cpus_per_actor: float = 1.0


@dataclass
class TrainConfig:
    """Training loop settings.

    :param total_timesteps: env-step budget
    :param n_envs: parallel envs
    :param vec_env: backend name from ``embodied_ws.rl.backends``: ``mujoco`` (batched rollout, fastest),
        ``subproc``, ``dummy``, ``ros`` (the ROS topic contract, one env) or ``ray`` (sampler actors, see ``ray``)
    :param seed: master seed (envs, DR, PPO)
    :param normalize_obs: wrap in VecNormalize (observation statistics saved with checkpoints)
    :param checkpoint_every: env steps between checkpoints (0: only at the end)
    :param keep_checkpoints: how many recent checkpoints to keep
    :param eval_every: env steps between evaluations (0: none)
    :param eval_episodes: episodes per evaluation
    :param target_success: stop early once two evaluations in a row reach this success rate (None: never)
    :param final_eval_episodes: episodes of the final evaluation reported in the run summary
    :param confirm_success: before an early stop, a confirmation evaluation on ``confirm_episodes`` fresh
        episodes (full DR) must reach this success rate, else learning goes on (two 64-episode evaluations
        that reach ``target_success`` can be a lucky moment of a policy that is worse on average); None: none
    :param confirm_episodes: episodes of each confirmation evaluation (1,024: ±0.8 points at 93 %, so
        repeated confirmations rarely pass a worse policy by luck)
    :param curriculum_steps: env steps over which DR ranges widen from 0 to full (0: full from the start)
    :param max_minutes: wall-clock budget of learning in minutes, across resumes (0: none); learning ends
        at whichever budget is spent first, and ``ppo.lr_schedule: linear`` decays over whichever is spent
        faster, so a run cut by time ends annealed
    :param ray: the Ray backend's cluster and actors (used with ``vec_env: ray``)
    """

    total_timesteps: int = 300_000
    n_envs: int = 32
    vec_env: VecEnvName = "mujoco"
    seed: int = 0
    normalize_obs: bool = True
    checkpoint_every: int = 50_000
    keep_checkpoints: int = 3
    eval_every: int = 25_000
    eval_episodes: int = 32
    target_success: float | None = 0.95
    final_eval_episodes: int = 256
    confirm_success: float | None = None
    confirm_episodes: int = 1024
    curriculum_steps: int = 0
    max_minutes: float = 0.0
    ray: RayConfig = field(default_factory=RayConfig)


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

    mode: Literal["lockstep", "realtime"] = "lockstep"
    sim_node: str = "/mujoco_sim_node"
    controller: str = "joint_group_position_controller"
    command_topic: str = ""
    timeout_s: float = 1.0
    retries: int = 3
    on_lost: Literal["stop", "wait"] = "stop"
    lost_wait_s: float = 30.0
    stale_s: float = 0.2


@dataclass
class VLAConfig:
    """VLA fine-tuning (``embodied-ws finetune``): a LeRobot policy, optionally wrapped with PEFT LoRA.

    :param policy: ``smolvla`` (default), ``pi0`` or ``act`` (a non-VLA baseline, trained in full)
    :param pretrained: policy to start from: a hub id (``lerobot/smolvla_base``) or a local folder;
        empty: a fresh policy whose backbone comes from ``vlm_model_name``
    :param vlm_model_name: SmolVLA backbone (hub id or a local folder with config + processor files)
    :param load_vlm_weights: load the backbone's weights (False: random init, for offline tests)
    :param lora: wrap with PEFT LoRA (only adapters train); False: full fine-tune
    :param lora_rank: LoRA rank ``r``
    :param lora_alpha: LoRA scaling ``alpha``
    :param lora_dropout: dropout on the LoRA path
    :param target_modules: regex or comma-separated names of the wrapped modules (empty: LeRobot's default
        for the policy)
    :param load_in_4bit: quantize the frozen base to 4 bit (needs CUDA and bitsandbytes)
    :param steps: optimizer steps
    :param batch_size: samples per step
    :param learning_rate: AdamW learning rate
    :param chunk_size: actions predicted per inference (the action chunk)
    :param n_action_steps: actions of each chunk executed before re-planning
    :param image_size: [height, width] the policy resizes camera images to (with padding)
    :param checkpoint_every: steps between checkpoints (0: only at the end)
    :param eval_episodes: sim episodes of the final evaluation (0: none)
    :param device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``
    :param num_workers: DataLoader worker processes
    :param seed: seed of sampling and initialisation
    :param max_idle_ratio: pre-flight: largest share of idle frames per episode
    :param max_tracking_error: pre-flight: largest RMS joint error (rad) when replaying a demonstration
    :param memory_margin: refuse to start when the estimate exceeds this fraction of free memory
    :param rename_map: dataset key → policy key, e.g. ``{observation.images.overview: observation.images.camera1}``
        for a pretrained policy trained with other camera names
    """

    policy: str = "smolvla"
    pretrained: str = ""
    vlm_model_name: str = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"
    load_vlm_weights: bool = True
    lora: bool = True
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: str = ""
    load_in_4bit: bool = False
    steps: int = 2000
    batch_size: int = 8
    learning_rate: float = 1e-4
    chunk_size: int = 50
    n_action_steps: int = 10
    image_size: list[int] = field(default_factory=lambda: [512, 512])
    checkpoint_every: int = 500
    eval_episodes: int = 10
    device: str = "auto"
    num_workers: int = 0
    seed: int = 0
    max_idle_ratio: float = 0.3
    max_tracking_error: float = 0.1
    memory_margin: float = 0.9
    rename_map: Any = None


@dataclass
class DeployConfig:
    """Running an exported policy on a robot (``embodied-ws deploy``, ``policy_node``): rate, topics, safety envelope.

    Commands are in the actuators' units (rad for the usual joint position servos).

    :param robot: robot driven (name or MJCF path); empty: the policy's own robot. Its observation
        layout must match the policy's
    :param rate_hz: control-loop rate; 0: the policy's control rate
    :param controller: ros2_control controller name; commands go to ``/<controller>/commands``
    :param command_topic: override of the command topic
    :param dry_run: compute and log commands but publish none
    :param limits_file: YAML with per-joint ``lower``/``upper`` (and optional ``max_velocity``) tighter
        than the model's (empty: the policy's joint limits and the model's control ranges)
    :param limit_margin: fraction of each joint range kept free at both ends
    :param max_step: largest change of a command between two ticks
    :param max_velocity: largest command velocity (units per second); the tighter of this and
        ``max_step`` per tick applies
    :param soft_start_s: after activation, ramp from the measured pose to the policy over this many seconds
    :param state_timeout_s: no new ``/joint_states`` for this long trips the state watchdog
        (at least two control periods)
    :param on_state_timeout: ``hold`` (repeat the last safe command) or ``safe_pose``
    :param safe_pose: command to move to on a state timeout in ``safe_pose`` mode (empty: the model's home pose)
    :param inference_timeout_s: observation + policy time above this drops the command and holds (0: off)
    :param diagnostics_hz: rate of ``/diagnostics`` reports (events are also reported at once)
    :param realtime_priority: 1-99: run the control loop's thread under ``SCHED_FIFO`` at this priority
        (needs root or ``CAP_SYS_NICE``/an rtprio limit; refused → a warning, the loop runs as before); 0: off
    """

    robot: str = ""
    rate_hz: float = 0.0
    controller: str = "joint_group_position_controller"
    command_topic: str = ""
    dry_run: bool = False
    limits_file: str = ""
    limit_margin: float = 0.02
    max_step: float = 0.1
    max_velocity: float = 2.0
    soft_start_s: float = 2.0
    state_timeout_s: float = 0.25
    on_state_timeout: str = "hold"
    safe_pose: list[float] = field(default_factory=list)
    inference_timeout_s: float = 0.02
    diagnostics_hz: float = 1.0
    realtime_priority: int = 0


@dataclass
class RunConfig:
    """A whole run: env, task, DR (a file under ``config/dr`` or an inline mapping), PPO, training, VLA, deployment."""

    env: EnvConfig = field(default_factory=EnvConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    dr: Any = "default"
    ppo: PPOConfig = field(default_factory=PPOConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    ros: RosConfig = field(default_factory=RosConfig)
    vla: VLAConfig = field(default_factory=VLAConfig)
    deploy: DeployConfig = field(default_factory=DeployConfig)

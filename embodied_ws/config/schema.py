"""Typed configuration: dataclasses for every section of a run's YAML (also mapped to ROS parameters).

String choices are ``Literal[...]`` annotations: the loader validates every value against its field's
annotation in one place (``embodied_ws.config.loader``), so a choice is declared here and nowhere else; a number
declares its range with :func:`~embodied_ws.config.fields.num`. The training sections live here, the ``ros:``
and ``deploy:`` sections in :mod:`embodied_ws.config.schema_deploy` and ``vla:`` in
:mod:`embodied_ws.config.schema_vla` (all importable from this module).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from embodied_ws.config.fields import COUNT_MAX, SEED_MAX, STEPS_MAX, WEIGHT, declared_range, num, within
from embodied_ws.config.schema_deploy import DeployConfig, RosConfig
from embodied_ws.config.schema_vla import VLAConfig

__all__ = [
    "DeployConfig",
    "EnvConfig",
    "PPOConfig",
    "RayConfig",
    "RosConfig",
    "RunConfig",
    "TaskConfig",
    "TrainConfig",
    "VLAConfig",
    "VecEnvName",
    "declared_range",
]

#: names of the vec-env backends registered in ``embodied_ws.rl.backends.BACKENDS`` (a test keeps both in step)
VecEnvName = Literal["mujoco", "subproc", "dummy", "ros", "ray"]


@dataclass
class EnvConfig:
    """Which robot and task, and how the env runs.

    :param robot: robot name from ``models/``, or a path to an MJCF, URDF (``.urdf``) or xacro (``.xacro``) file
    :param robot_args: xacro arguments of a ``.xacro`` robot, as ``NAME:=VALUE`` strings
    :param package_paths: folders holding ROS packages for ``$(find pkg)`` and ``package://pkg`` (searched
        before ``AMENT_PREFIX_PATH`` and ``ROS_PACKAGE_PATH``)
    :param task: registered task name (``reach``, ``swingup`` ...), a task plugin's entry-point name (group
        ``embodied_ws.tasks``) or a ``module:attr`` path to a task class (``my_pkg.tasks:Lift``)
    :param frame_skip: physics steps per control step (control period = frame_skip × timestep)
    :param physics_dt: physics timestep in seconds for the simulated robot and its scene (0: the model's own
        ``<option timestep>``); with ``frame_skip`` it sets the control period. MuJoCo Playground steps its
        Panda manipulation at 5 ms. The push preset keeps the model's 2 ms × 20: 4 ms × 10 gives Panda push
        1.45 × the env steps per second, but the scripted grasps of lift and pick_place slip more often at 4 ms
        (docs/benchmarks.md)
    :param episode_steps: control steps before truncation
    :param action_mode: ``delta`` (joint delta: actions move servo set-points; torque actuators stay absolute),
        ``absolute`` (actions map linearly onto each control range) or ``ee_delta`` (actions are a Cartesian
        step of the end effector, ``[dx, dy, dz]`` (+ ``dyaw`` with ``ee_yaw``) then one per driven gripper,
        turned into arm set-point steps by damped-least-squares IK inside the joint-delta bounds:
        :mod:`embodied_ws.sim.ik`); ``auto``: ``ee_delta`` for an arm of position servos with an end effector,
        else ``delta`` (:meth:`embodied_ws.sim.mapping.PolicyIO.auto_mode`)
    :param ee_yaw: ``ee_delta``: add a yaw action (rotation of the end effector about the world vertical)
    :param ee_orientation: ``ee_delta`` on an arm of six or more joints: ``hold`` keeps the hand at its home
        orientation (the heading is the policy's with ``ee_yaw``), ``free`` moves the position only (the hand
        turns as the joints happen to), ``auto`` (default): what the task asks (``hold`` for the table-top
        contact tasks, ``free`` for reach, whose targets need the hand turned) (:mod:`embodied_ws.sim.ik`)
    :param delta_scale: delta mode: largest set-point change per control step, as a fraction of the
        control range's half-width
    :param ee_speed_limit: delta mode, for a model that states no joint velocity limits: the largest
        end-effector speed (m/s) all arm joints together may command at the home pose,
        ``Σ_j |J_j| · Δq_j / control period`` (``J_j``: the joint's end-effector Jacobian column); 0: no bound
    :param servo_damping: ``auto`` adds joint damping to position servos the dynamics probe finds
        underdamped (they overshoot a step: ``kv = 0`` on a lightly damped joint), up to critical damping at
        the home pose; ``none`` (default) leaves the model's physics as the user wrote it
    :param camera_obs: add an rgb image to the observation (single env only)
    :param camera: camera name for rendering and camera observations (first camera when empty)
    :param image_size: [height, width] of camera observations
    :param render_size: [height, width] of ``render()`` frames and evaluation videos
    """

    robot: str = "arm3"
    robot_args: list[str] = field(default_factory=list)
    package_paths: list[str] = field(default_factory=list)
    task: str = "reach"
    frame_skip: int = num(20, 0, 10_000, low_open=True)
    physics_dt: float = num(0.0, 0.0, 0.1)
    episode_steps: int = num(50, 0, 10_000_000, low_open=True)
    action_mode: Literal["delta", "absolute", "ee_delta", "auto"] = "delta"
    ee_yaw: bool = False
    ee_orientation: Literal["auto", "hold", "free"] = "auto"
    delta_scale: float = num(0.1, 0.0, 2.0, low_open=True)
    ee_speed_limit: float = num(5.5, 0.0, 1000.0)
    servo_damping: Literal["none", "auto"] = "none"  # not "off": YAML 1.1 reads off as False
    camera_obs: bool = False
    camera: str = ""
    image_size: list[int] = field(default_factory=lambda: [96, 96], metadata=within(1, 4096))
    render_size: list[int] = field(default_factory=lambda: [240, 320], metadata=within(1, 4096))


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
        to a target is covered at this speed (a bigger arm gets longer episodes); push: plus the longest goal
        distance pushed at a third of it (lift, pick_place: their own phases); 0: no lengthening
    :param gripper: ``held`` (default): the gripper's joints are held at their home value and lose their
        actuator, the policy commands the arm only; ``action``: one more action entry per gripper, in
        [-1, 1] (-1 closed, +1 open), mapped to its actuator's set-point, mimic followers following
        (:mod:`embodied_ws.sim.gripper`); a robot whose gripper cannot be driven that way is refused with
        one line naming its joints
    :param gripper_command: how a gripper's action sets its set-point: ``continuous`` (default: linear,
        -1 closed .. +1 open) or ``binary`` (below 0 fully closed, else fully open, as VLA datasets record
        the gripper): a position-servo gripper squeezes with its full force only when commanded fully closed
    :param object_size: push: edge of the cube (m); 0: sized for the gripper's stroke (0.5 × the open
        fingertip gap, 2-6 cm), 5 cm for an arm without a gripper
    :param object_mass: push: mass of the cube (kg)
    :param object_yaw_noise: push: half-width of the cube's random start yaw (rad)
    :param goal_min_distance: push: shortest cube-to-goal distance at the start of an episode (m)
    :param goal_max_distance: push: longest cube-to-goal distance at the start of an episode (m)
    :param push_gate: push: the ``push`` term pays only while the end effector is within this distance (m)
        of the push pose behind the cube (the stage gate reach → push)
    :param reach_weight: push: weight of ``1 - tanh(sharpness · |ee − push pose|)``
    :param push_weight: push: weight of ``1 - tanh(sharpness · |cube − goal|)``, gated on ``push_gate``
    :param progress_weight: push: weight of the cube's speed towards the goal (``clip(v · u / 0.1 m/s, -1, 1)``),
        gated as ``push`` and off on the goal disc
    :param goal_weight: push: weight of ``exp(-(|cube − goal| / success_threshold)²)``, steep near the goal
    :param action_weight: push: weight of the ``-|action|²`` penalty
    :param reward_sharpness: push: slope (1/m) of the tanh distance terms
    :param off_table_penalty: push, lift: reward per step once the cube has left the table (negative)
    :param lift_height: lift: how high (m) above its resting height the held cube must be for success
    :param grasp_weight: lift: reward per step the cube is held between the fingers
    :param lift_weight: lift: weight of the held cube's height, as a fraction of ``lift_height`` (0..1)
    :param hold_seconds: lift, pick_place: how long (s) the cube must stay held at the goal before the success
        test (and the ``success_bonus`` term, paid on exactly those steps) counts it; episodes are lengthened
        to leave this time
    :param still_weight: lift, pick_place: weight of ``1 - tanh(|cube velocity| / 0.2 m/s)`` while the momentary
        success test holds (held at the goal: hold it still there, as ManiSkill's pick tasks reward a static robot
        once placed)
    """

    ee_body: str = ""
    success_threshold: float = num(0.05, 0.0, 100.0, low_open=True)
    target_min_z: float | None = num(None, -1000.0, 1000.0)
    target_joint_margin: float = num(0.0, 0.0, 0.5, high_open=True)
    init_noise: float = num(0.1, 0.0, 100.0)
    distance_weight: float = num(1.0, *WEIGHT)
    velocity_weight: float = num(0.001, *WEIGHT)
    success_bonus: float = num(0.5, *WEIGHT)
    precision_weight: float = num(0.0, *WEIGHT)
    approach_speed: float = num(0.0, 0.0, 1000.0)
    gripper: Literal["held", "action"] = "held"
    gripper_command: Literal["continuous", "binary"] = "continuous"
    object_size: float = num(0.0, 0.0, 1.0)
    object_mass: float = num(0.1, 0.0, 100.0, low_open=True)
    object_yaw_noise: float = num(0.5, 0.0, 3.1416)
    goal_min_distance: float = num(0.1, 0.0, 10.0)
    goal_max_distance: float = num(0.25, 0.0, 10.0, low_open=True)
    push_gate: float = num(0.05, 0.0, 10.0, low_open=True)
    reach_weight: float = num(1.0, *WEIGHT)
    push_weight: float = num(2.0, *WEIGHT)
    progress_weight: float = num(1.0, *WEIGHT)
    goal_weight: float = num(1.0, *WEIGHT)
    action_weight: float = num(0.01, *WEIGHT)
    reward_sharpness: float = num(5.0, 0.0, 1e4, low_open=True)
    off_table_penalty: float = num(-1.0, *WEIGHT)
    lift_height: float = num(0.05, 0.0, 10.0, low_open=True)
    grasp_weight: float = num(1.0, *WEIGHT)
    lift_weight: float = num(4.0, *WEIGHT)
    hold_seconds: float = num(1.0, 0.0, 1000.0)
    still_weight: float = num(1.0, *WEIGHT)


@dataclass
class PPOConfig:
    """Stable-Baselines3 PPO hyperparameters (passed through by name).

    :param lr_schedule: ``constant`` or ``linear`` (decays to 0 over the run: a settled final policy)
    :param grad_clip: ``global`` (SB3: one norm over all gradients, clipped to ``max_grad_norm``) or
        ``per_net`` (the policy's and the value function's gradients clipped each on its own)
    """

    learning_rate: float = num(3e-4, 0.0, 1.0, low_open=True)
    lr_schedule: Literal["constant", "linear"] = "constant"
    n_steps: int = num(64, 0, 10_000_000, low_open=True)
    batch_size: int = num(256, 0, 10_000_000, low_open=True)
    n_epochs: int = num(10, 0, 10_000, low_open=True)
    gamma: float = num(0.97, 0.0, 1.0, low_open=True)
    gae_lambda: float = num(0.95, 0.0, 1.0)
    clip_range: float = num(0.2, 0.0, 10.0, low_open=True)
    ent_coef: float = num(0.0, 0.0, 1000.0)
    vf_coef: float = num(0.5, 0.0, 1000.0)
    max_grad_norm: float = num(0.5, 0.0, 1e6, low_open=True)
    grad_clip: Literal["global", "per_net"] = "global"
    net_arch: list[int] = field(default_factory=lambda: [64, 64], metadata=within(1, 65_536))
    log_std_init: float = num(-0.5, -20.0, 20.0)
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
    actors: int = num(2, 0, 100_000, low_open=True)
    cpus_per_actor: float = num(1.0, 0.0, 1024.0, low_open=True)


@dataclass
class TrainConfig:
    """Training loop settings.

    :param total_timesteps: env-step budget
    :param n_envs: parallel envs
    :param vec_env: backend name from ``embodied_ws.rl.backends``: ``mujoco`` (batched rollout, fastest),
        ``subproc``, ``dummy``, ``ros`` (the ROS topic contract, one env) or ``ray`` (sampler actors, see ``ray``)
    :param seed: master seed (envs, DR, PPO)
    :param normalize_obs: wrap in VecNormalize (observation statistics saved with checkpoints)
    :param normalize_reward: VecNormalize also scales rewards by a running std of the discounted return (at
        ``ppo.gamma``): the value targets stay near unit scale whatever the task's reward sizes (reports,
        evaluations and ``ep_rew_mean`` keep the raw rewards)
    :param checkpoint_every: env steps between checkpoints (0: only at the end)
    :param keep_checkpoints: how many recent checkpoints to keep
    :param eval_every: env steps between evaluations (0: none)
    :param eval_episodes: episodes per evaluation
    :param target_success: stop early once two evaluations in a row reach this success rate (None: never)
    :param final_eval_episodes: episodes of the final evaluation reported in the run summary
    :param confirm_success: before an early stop, a confirmation evaluation on ``confirm_episodes`` fresh
        episodes (full DR) must show this success rate: the low end of its 95 % interval at it or above, else
        learning goes on (two 64-episode evaluations that reach ``target_success`` can be a lucky moment of a
        policy that is worse on average, and a point rate lets repeated confirmations pass one by luck); after ``n``
        failed ones, the next waits for ``2 + n`` new evaluations in a row at ``target_success``; None: none
    :param confirm_episodes: episodes of each confirmation evaluation (1,024: the 95 % interval reaches about
        1.6 points either side at 93 %, so a rate of 94.6 % shows 93 %)
    :param curriculum_steps: env steps over which DR ranges widen from 0 to full (0: full from the start)
    :param max_minutes: wall-clock budget of learning in minutes, across resumes (0: none); learning ends
        at whichever budget is spent first, and ``ppo.lr_schedule: linear`` decays over whichever is spent
        faster, so a run cut by time ends annealed
    :param ray: the Ray backend's cluster and actors (used with ``vec_env: ray``)
    """

    total_timesteps: int = num(300_000, 0, STEPS_MAX, low_open=True)
    n_envs: int = num(32, 0, 100_000, low_open=True)
    vec_env: VecEnvName = "mujoco"
    seed: int = num(0, 0, SEED_MAX)
    normalize_obs: bool = True
    normalize_reward: bool = False
    checkpoint_every: int = num(50_000, 0, STEPS_MAX)
    keep_checkpoints: int = num(3, 0, 1_000_000)
    eval_every: int = num(25_000, 0, STEPS_MAX)
    eval_episodes: int = num(32, 0, COUNT_MAX)
    target_success: float | None = num(0.95, 0.0, 1.0)
    final_eval_episodes: int = num(256, 0, COUNT_MAX)
    confirm_success: float | None = num(None, 0.0, 1.0)
    confirm_episodes: int = num(1024, 0, COUNT_MAX, low_open=True)
    curriculum_steps: int = num(0, 0, STEPS_MAX)
    max_minutes: float = num(0.0, 0.0, 1e7)
    ray: RayConfig = field(default_factory=RayConfig)


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

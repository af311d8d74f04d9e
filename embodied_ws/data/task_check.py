"""``embodied-ws task check ROBOT TASK``: will this task learn? Checks on short rollouts, before any training.

Random actions drive the env as the run would build it (the preset's action mode, DR and episode length);
the task's scripted expert (:data:`~embodied_ws.data.expert.EXPERTS`; a task from outside this repository
without one gets the expert of the built-in task it subclasses) drives an absolute-action copy with the same
episode length. From those episodes:

- **reward terms**: every named term is non-zero somewhere (a term that never fires shapes nothing; a task
  may list rare-event terms, a penalty for dropping the object, in an ``event_terms`` class attribute);
- **success**: the expert meets the success test (its success rate over the seeds);
- **reward vs success**: the expert out-scores random actions, successful episodes out-score failed ones and
  the reward at success steps is above the reward at failing steps (the reward's best point is success);
- **observations**: every entry is finite (NaN/inf is blocking) and its range (reported; a huge one warned);
- **grip**: for a task with an object (the task's ``object_body`` attribute, else the scene's first free body)
  and ``task.gripper: action``, the gripper closes on the object at the home pose, a lift's load acts, the
  object hangs in the fingers (:mod:`embodied_ws.sim.grip_hold`): slip and friction margin; then again at the
  hardest draw of the run's DR (the heaviest, smallest, most slippery object: :func:`worst_grip_draw`);
- **episode length**: the steps the expert needs to succeed, and the time its joint travel takes at the arm's
  measured joint speeds (:meth:`~embodied_ws.sim.robot.Robot.dynamics`), against the episode's steps.

Each finding is one line with its fix; a ``block`` finding means the task cannot learn as written.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from embodied_ws.config.loader import load_config, load_dr
from embodied_ws.core.errors import UserError
from embodied_ws.core.registry import error_line
from embodied_ws.data.task_findings import (
    MARGIN_WARN,
    Finding,
    Rollouts,
    check_episode_length,
    check_observations,
    check_reward_vs_success,
    check_success,
    check_terms,
)
from embodied_ws.policy.rollout import Step, rollout
from embodied_ws.randomization.sampler import DRSampler
from embodied_ws.randomization.spec import DRSpec

if TYPE_CHECKING:
    from embodied_ws.sim.grip_hold import HoldResult


@dataclass
class TaskCheck:
    """Every finding of a check and what was measured."""

    robot: str
    task: str
    findings: list[Finding]
    measured: dict[str, Any]

    @property
    def blocking(self) -> bool:
        """Whether any finding blocks learning."""
        return any(f.level == "block" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "robot": self.robot,
            "task": self.task,
            "blocking": self.blocking,
            "findings": [
                {"check": f.check, "level": f.level, "message": f.message, "fix": f.fix, "line": f.line()}
                for f in self.findings
            ],
            "measured": self.measured,
        }


class RandomActions:
    """Uniform random actions in [-1, 1] (what an untrained policy explores), ``size`` of them: the env's action
    space, whatever its mode (joint or end-effector deltas, grippers)."""

    def __init__(self, size: int, seed: int) -> None:
        self.nu = size
        self.rng = np.random.default_rng(seed)

    def act(self, obs: Any = None) -> np.ndarray:
        """A fresh uniform action."""
        return self.rng.uniform(-1.0, 1.0, self.nu)


def expert_for(name: str, task: Any) -> type | None:
    """The scripted expert of task ``name``: the one registered under that name; for a task from outside this
    repository without one, the expert of the built-in task its class derives from (a plugin subclassing
    ``reach`` gets the reach expert). None when there is none."""
    from embodied_ws.data.expert import EXPERTS
    from embodied_ws.sim.tasks import TASKS

    if name in EXPERTS:
        return EXPERTS.get(name)
    if TASKS.is_builtin(name):
        return None  # a built-in task without its own expert does not borrow its base class's
    builtin = {TASKS.get(n): n for n in TASKS.names()}
    for cls in type(task).__mro__:
        if cls in builtin and builtin[cls] in EXPERTS:
            return EXPERTS.get(builtin[cls])
    return None


def run_episodes(env: Any, actor: Any, seeds: list[int]) -> Rollouts:
    """Roll ``actor`` out in ``env`` once per seed, keeping rewards, terms, success and the task's observations."""
    out = Rollouts()
    for seed in seeds:
        _episode(env, actor, seed, out)
    return out


def _episode(env: Any, actor: Any, seed: int, out: Rollouts) -> None:
    robot, n_task = env.core.robot, env.core.task.obs_dim
    first: list[int] = []
    reached: list[np.ndarray] = []
    q0: list[np.ndarray] = []

    def seen(env_: Any, obs: Any) -> Any:
        if not q0:
            q0.append(env_.data.qpos[robot.qpos_idx].copy())
        return obs

    def keep(step: Step) -> None:
        out.rewards.append(step.reward)
        ok = bool(step.info.get("is_success", False))
        out.step_success.append(ok)
        for k, v in step.info.get("reward_terms", {}).items():
            out.terms.setdefault(k, []).append(float(v))
        state = step.observation["state"] if isinstance(step.observation, dict) else step.observation
        out.obs.append(np.asarray(state, dtype=float).ravel()[:n_task])
        if ok and not first:
            first.append(step.index)
            reached.append(env.data.qpos[robot.qpos_idx].copy())

    episode = rollout(env, actor, seed, observe=seen, on_step=keep, max_steps=env.core.episode_steps)
    end = reached[0] if reached else env.data.qpos[robot.qpos_idx].copy()
    out.travel.append(np.abs(end - q0[0]))
    out.returns.append(episode.total_return)
    out.success.append(episode.success)
    out.first_success.append(first[0] if first else None)


#: DR terms of a grasp and the end of each range that makes the object hardest to hold: the heaviest, the
#: smallest (a position-servo gripper squeezes a smaller object less) and the most slippery
GRIP_WORST_END = {"object_mass": "high", "object_size": "low", "object_friction": "low", "fingertip_friction": "low"}


def worst_grip_draw(spec: DRSpec | None) -> DRSpec | None:
    """The DR draw hardest on a grasp (:data:`GRIP_WORST_END` of each range, as fixed values); None when the
    spec randomizes none of those terms."""
    if spec is None:
        return None
    worst = [
        replace(p, low=v, high=v)
        for p in spec.active()
        if p.name in GRIP_WORST_END
        for v in [p.high if GRIP_WORST_END[p.name] == "high" else p.low]
    ]
    return DRSpec(tuple(worst)) if worst else None


def check_grip(env: Any, run_dr: DRSpec | None = None) -> tuple[list[Finding], dict[str, Any]]:
    """The gripper holds the task's object (:mod:`embodied_ws.sim.grip_hold`); skipped without a driven gripper
    and an object (a ``object_body`` attribute of the task, else the first free body of the scene).

    :param run_dr: the DR the run trains under: when the nominal grasp holds, it is tried again at the draw
        hardest on it (:func:`worst_grip_draw`), and a drop there is a warning (those episodes cannot succeed)
    """
    import mujoco

    from embodied_ws.sim.grip_hold import CREEP_WARN, free_bodies, grip_hold, needs_elliptic
    from embodied_ws.sim.gripper import place

    robot, core = env.core.robot, env.core
    model = robot.model
    obj = getattr(core.task, "object_body", None) or next(iter(free_bodies(model)), None)
    if not robot.grippers or not robot.gripper_actuators:
        why = "the gripper is held (task.gripper: held)" if robot.grippers else "the robot has no gripper"
        return [Finding("grip", "skip", f"no object/gripper: {why}")], {}
    if obj is None:
        return [Finding("grip", "skip", "no object/gripper: the task's scene has no free body to hold")], {}
    qpos = robot.home_qpos.copy()
    for g in robot.grippers:
        qpos = place(model, qpos, g, 1.0)  # open, followers and linkages where the constraints put them
    hold = core.hold_action(qpos)
    opened, closed = hold.copy(), hold.copy()
    opened[robot.gripper_actuators], closed[robot.gripper_actuators] = 1.0, -1.0
    joints = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) for g in robot.grippers for n in g.joints]

    def hold(on: mujoco.MjModel) -> HoldResult:
        ctrl_open, ctrl_closed = core.ctrl_mid + core.ctrl_half * opened, core.ctrl_mid + core.ctrl_half * closed
        return grip_hold(on, qpos, ctrl_open, ctrl_closed, [j for j in joints if j >= 0], obj)

    try:
        res = hold(model)
    except ValueError as exc:
        return [Finding("grip", "skip", f"no object/gripper: {exc}")], {}
    text = _hold_text(obj, res)
    cone = (
        '; MuJoCo\'s pyramidal cone slips early: <option cone="elliptic" impratio="10"/>'
        if needs_elliptic(model)
        else ""
    )
    if not res.held:
        fix = "raise fingertip/object friction or the gripper force, size the object for the stroke" + cone
        return [Finding("grip", "block", f"the gripper drops {text}", fix)], res.to_dict()
    if res.margin < MARGIN_WARN or res.slip_m > CREEP_WARN:
        what = "creeps" if res.slip_m > CREEP_WARN else f"holds with a friction margin under {MARGIN_WARN}"
        fix = "raise fingertip friction or the gripper force so DR of mass and friction cannot make it slip" + cone
        return [Finding("grip", "warn", f"the gripper {what}: {text}", fix)], res.to_dict()
    findings, measured = [Finding("grip", "ok", f"held: {text}")], res.to_dict()
    worst = worst_grip_draw(run_dr)
    if worst is not None:
        hard = copy.deepcopy(model)
        DRSampler(worst, hard, 0).sample_reset(hard)
        at = ", ".join(f"{p.name} {'x' if p.mode == 'scale' else '='}{p.low:g}" for p in worst.params)
        res_worst = hold(hard)
        measured["dr_worst"] = {"draw": at, **res_worst.to_dict()}
        worst_text = _hold_text(obj, res_worst)
        if res_worst.held:
            findings.append(Finding("grip", "ok", f"held at DR's hardest draw ({at}): {worst_text}"))
        else:
            fix = "narrow those DR ranges (dr.params) or raise the gripper force: no policy lifts what slips" + cone
            message = f"DR's hardest draw ({at}) makes the gripper drop {worst_text}"
            findings.append(Finding("grip", "warn", message, fix))
    return findings, measured


def _hold_text(obj: str, res: HoldResult) -> str:
    contact = "" if res.contact_at_end else ", no finger contact at the end"
    return (
        f"{obj!r}: slip {1000 * res.slip_m:.1f} mm over lift and hold, friction margin {res.margin:.2f} "
        f"(mu {res.friction:.2f} x normal {res.normal_force_n:.3g} N / weight {res.weight_n:.3g} N{contact})"
    )


def _guarded[T](task: str, actor: str, fn: Callable[[], T]) -> T:
    """``fn()``; an error raised by the task's (or the expert's) code is one line naming the task."""
    try:
        return fn()
    except UserError:
        raise
    except Exception as exc:  # the user's task code: its error is reported in one line
        raise UserError(f"task {task!r} failed under {actor}: {error_line(exc)}", "env.task") from None


def joint_speeds(core: Any) -> np.ndarray:
    """Per actuator, the fastest its joint moves in a run: the arm's measured speed (:meth:`~embodied_ws.sim.
    robot.Robot.dynamics`), or the set-point speed of delta actions where that is slower (NaN: unknown)."""
    speeds = np.asarray(core.robot.dynamics().measured_speeds(), dtype=float)
    bound = np.where(core.delta_actuators, np.broadcast_to(core.delta_scale, speeds.shape) * core.ctrl_half, np.inf)
    bound = bound / core.control_dt
    return np.where(np.isfinite(speeds), np.minimum(speeds, bound), np.where(np.isfinite(bound), bound, np.nan))


def task_check(
    robot: str,
    task: str,
    config: str = "reach",
    overrides: list[str] | None = None,
    episodes: int = 4,
    seed: int = 0,
    dr: str = "none",
    robot_args: list[str] | None = None,
    package_paths: list[str] | None = None,
) -> TaskCheck:
    """Run every check of this module on ``task`` over ``robot`` (module docstring).

    :param robot: robot name or model path
    :param task: task name, ``module:attr`` path or entry-point name
    :param config: the run preset (``reach``) or YAML whose ``env``/``task`` sections the run would use
    :param overrides: ``key=value`` settings applied after ``env.robot``/``env.task``
    :param episodes: episodes per actor (random, expert)
    :param seed: seed of the first episode
    :param dr: domain randomization preset for the rollouts (``none``: the nominal model)
    :param robot_args: xacro arguments (``NAME:=VALUE``), added to ``env.robot_args``
    :param package_paths: folders holding ROS packages, added to ``env.package_paths``
    :raises UserError: bad robot, task or settings (one line)
    """
    from embodied_ws.sim.core import build_robot
    from embodied_ws.sim.env import RobotEnv

    # the checks read the state observation: no camera rendering
    sets = [f"env.robot={robot}", f"env.task={task}", *(overrides or []), f"dr={dr}", "env.camera_obs=false"]

    def configured(extra: list[str]) -> Any:
        cfg = load_config(config, [*sets, *extra])
        cfg.env.robot_args += list(robot_args or [])
        cfg.env.package_paths += list(package_paths or [])
        return cfg

    cfg = configured([])
    spec = load_dr(cfg.dr)
    loaded = build_robot(cfg)
    env = RobotEnv(cfg, spec, seed=seed, robot=loaded)
    seeds = list(range(seed, seed + episodes))
    explorer = RandomActions(env.action_space.shape[0], seed)
    random = _guarded(task, "random actions", lambda: run_episodes(env, explorer, seeds))
    findings: list[Finding] = []
    expert_cls = expert_for(task, env.core.task)
    expert = None
    if expert_cls is not None:
        steps = env.core.episode_steps
        expert_cfg = configured(["env.action_mode=absolute", f"env.episode_steps={steps}"])
        expert_env = RobotEnv(expert_cfg, spec, seed=seed)  # its own robot: a task may add its scene to it
        expert = _guarded(task, "the scripted expert", lambda: run_episodes(expert_env, expert_cls(expert_env), seeds))
    findings += check_terms(random, expert, tuple(getattr(env.core.task, "event_terms", ())))
    findings += check_success(random, expert, task)
    findings += check_reward_vs_success(random, expert)
    obs_findings, ranges = check_observations([random] + ([expert] if expert else []), env.core.task.obs_names())
    findings += obs_findings
    # the grasp is also tried at the hardest draw of the DR the run trains under (not the rollouts' --dr)
    run_dr = load_config(config, [f"env.robot={robot}", f"env.task={task}", *(overrides or [])]).dr
    grip, grip_measured = check_grip(env, load_dr(run_dr))
    findings += grip
    length, length_measured = check_episode_length(
        expert, env.core.episode_steps, env.core.control_dt, joint_speeds(env.core)
    )
    findings += length
    measured = {
        "episodes": episodes,
        "random": {"returns": random.returns, "success_rate": float(np.mean(random.success))},
        "expert": None
        if expert is None
        else {"returns": expert.returns, "success_rate": float(np.mean(expert.success))},
        "observation_ranges": ranges,
        "grip": grip_measured,
        "episode_length": length_measured,
    }
    return TaskCheck(loaded.name, task, findings, measured)

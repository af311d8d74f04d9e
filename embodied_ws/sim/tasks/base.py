"""The Task protocol: batched numpy functions of the physics arrays, shared by every env flavour.

All methods take batches (first axis = env) so the single env (batch of 1), the vectorized env
(batch of N) and the ROS-topic env (``mujoco_sim_node``) run the very same task code.

**Writing your own task** (in your own package, no fork): subclass :class:`Task` (or write a class with
the same members: the optional ones then get :class:`Task`'s defaults) and name it either way:

- ``embodied-ws train --task my_pkg.tasks:HoldPose`` (``env.task: my_pkg.tasks:HoldPose``): a
  ``module:attr`` path, imported with :mod:`importlib` from the installed packages, ``PYTHONPATH`` or the
  current folder;
- a name from the ``embodied_ws.tasks`` entry-point group of your ``pyproject.toml``::

      [project.entry-points."embodied_ws.tasks"]
      hold_pose = "my_pkg.tasks:HoldPose"

A run records the ``module:attr`` in its ``config.yaml`` (also for an entry-point name), so ``eval``,
``--resume``, ``deploy`` and every worker process (``subproc``, Ray, the sim node) import the same class.

What a task provides (what the envs really use):

========================  ==================================================================================
``__init__(robot, cfg)``  a :class:`~embodied_ws.sim.robot.Robot` and the ``task:`` section (:class:`TaskConfig`)
``obs_dim``, ``goal_dim`` observation and goal sizes (ints; may be set in ``__init__``: they may depend on the robot)
``needs_ee``              class attribute: load the robot with an end-effector position sensor
                          (``robot.ee_sensor_idx`` indexes ``sensordata``)
``free_space``            class attribute: the task needs no contacts (envs that do not render drop the geoms;
                          delta set-points of a task with contacts stay within reach of the measured joints)
``sample_goal(rng)``      the episode's goal, ``(goal_dim,)``
``initial_qpos(rng)``     the episode's initial ``qpos``, ``(nq,)`` (velocities start at 0)
``observe(...)``          ``(n, obs_dim)`` from ``qpos (n, nq)``, ``qvel (n, nv)``, ``sensordata (n, ns)``,
                          ``goal (n, goal_dim)``
``evaluate(..., action)`` ``(reward (n,), success (n,) bool, terms)``: ``terms`` maps each reward term's NAME
                          to its ``(n,)`` values (``report.md`` and the episode infos show them by name);
                          ``success`` is the task's success test (evaluation's success rate counts it at the
                          episode's end)
``obs_names()``           optional: a name per observation entry (the exported policy's layout)
``min_episode_seconds``   optional: the shortest episode the task can be done in (episodes are lengthened)
``goal_markers(goal)``    optional: mocap body name → position of each goal marker drawn in the scene
``instruction(goal)``     optional: the episode's language instruction (``record-demos`` stores it per episode,
                          ``vla eval`` gives it to the policy; default: "<task> with the <robot>")
``success_hold_s``        optional (s, default 0): success counts only once ``evaluate``'s success test has held
                          without a break this long; until then the env core reports no success and zeroes the
                          ``success_bonus`` term (the bonus stays the success test) — lift: ``task.hold_seconds``
``terminated(...)``       optional: ``(n,)`` bool from ``qpos, qvel, sensordata, goal``: the episode can no
                          longer be won (the cube left the table) and ends early as *terminated* (not truncated:
                          PPO does not bootstrap its value)
========================  ==================================================================================

A task from outside this repository is checked when its env is built: a missing member, or an ``observe``
/ ``evaluate`` whose shapes do not match ``obs_dim`` / ``goal_dim``, is one line naming it (exit code 2).
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod

import mujoco
import numpy as np

from embodied_ws.config.schema import TaskConfig
from embodied_ws.core.errors import UserError
from embodied_ws.core.registry import Registry, error_line
from embodied_ws.sim.robot import Robot

#: the entry-point group of task plugins
ENTRY_POINT_GROUP = "embodied_ws.tasks"
#: methods every task defines (the rest of :class:`Task` has defaults)
REQUIRED_METHODS = ("sample_goal", "initial_qpos", "observe", "evaluate")


class Task(ABC):
    """A task over a :class:`Robot`: the protocol every task follows (the table in this module's docstring).

    :param robot: the loaded robot
    :param cfg: task parameters (the ``task:`` section)
    """

    #: whether the robot must be loaded with an end-effector position sensor
    needs_ee: bool = False
    #: the task needs no contacts: envs that do not render simulate a copy without geoms (less memory)
    free_space: bool = False
    #: observation size (set in the class, or in ``__init__`` when it depends on the robot)
    obs_dim: int = 0
    #: goal size (0: the task has no goal)
    goal_dim: int = 0
    #: seconds the success test must hold without a break before an env counts success (0: at once)
    success_hold_s: float = 0.0
    #: ``ee_delta`` with ``env.ee_orientation: auto``: hold the hand at its home orientation (table-top work)
    ee_hold_orientation: bool = False

    def __init__(self, robot: Robot, cfg: TaskConfig) -> None:
        self.robot = robot
        self.cfg = cfg

    @abstractmethod
    def sample_goal(self, rng: np.random.Generator) -> np.ndarray:
        """Goal of a new episode, shape ``(goal_dim,)``."""

    @abstractmethod
    def initial_qpos(self, rng: np.random.Generator) -> np.ndarray:
        """Initial joint positions of a new episode, shape ``(nq,)`` (velocities start at 0)."""

    @abstractmethod
    def observe(self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """Observation batch ``(n, obs_dim)``."""

    @abstractmethod
    def evaluate(
        self, qpos: np.ndarray, qvel: np.ndarray, sensordata: np.ndarray, goal: np.ndarray, action: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """``(reward (n,), success (n,) bool, reward terms {name: (n,)})``."""

    def min_episode_seconds(self, joint_speed: np.ndarray | None = None) -> float:
        """The shortest episode (s) in which the task can be done (0: no lower bound).

        :param joint_speed: ``(nu,)`` the fastest set-point speed of each actuated joint (None: unbounded)
        """
        return 0.0

    def obs_names(self) -> list[str]:
        """Name of each observation entry (for the exported policy's layout)."""
        return [f"obs_{i}" for i in range(self.obs_dim)]

    def goal_site_pos(self, goal: np.ndarray) -> np.ndarray | None:
        """Where to draw the goal marker (a mocap body named ``target``), if the task has one."""
        return None

    def goal_markers(self, goal: np.ndarray) -> dict[str, np.ndarray]:
        """Mocap body name → position for every goal marker (default: ``target`` at :meth:`goal_site_pos`)."""
        pos = self.goal_site_pos(goal)
        return {} if pos is None else {"target": pos}


def task_class(obj: object, ref: str, where: str | None = "env.task") -> type[Task]:
    """Check that ``obj`` (what ``ref`` names: a ``module:attr`` path or an entry point) is a task class.

    A :class:`Task` subclass must define every abstract method; another class must define
    :data:`REQUIRED_METHODS` and gets :class:`Task`'s defaults for the optional members.

    :raises UserError: one line naming what is missing
    """
    if not isinstance(obj, type):
        raise UserError(
            f"{ref!r} is a {type(obj).__name__}, not a task class (a class following embodied_ws.sim.tasks.Task)",
            where,
        )
    if issubclass(obj, Task):
        missing = sorted(getattr(obj, "__abstractmethods__", ()))
    else:
        missing = [m for m in REQUIRED_METHODS if not callable(getattr(obj, m, None))]
    if missing:
        raise UserError(f"{ref!r} does not follow the Task protocol: missing {', '.join(missing)}", where)
    if issubclass(obj, Task):
        return obj
    try:  # the class's own members first, Task's defaults for the rest
        return type(obj.__name__, (obj, Task), {"__doc__": obj.__doc__, "__wrapped_task__": obj})
    except TypeError as exc:
        raise UserError(f"{ref!r} cannot be used as a task: {exc}", where) from None


TASKS: Registry[type[Task]] = Registry("task", group=ENTRY_POINT_GROUP, paths=True, adapt=task_class)


def make_task(name: str, robot: Robot, cfg: TaskConfig, where: str = "env.task") -> Task:
    """The task ``name`` (registered, ``module:attr`` or entry point) over ``robot``; a task from outside this
    repository is checked on ``robot`` first (:func:`check_task`).

    :raises UserError: one line: unknown name, missing member, an error raised by the task, wrong shapes
    """
    cls = TASKS.get(name, where)
    if TASKS.is_builtin(name):
        return cls(robot, cfg)
    try:
        task = cls(robot, cfg)
    except UserError:
        raise
    except Exception as exc:  # the user's task: its error is reported in one line
        raise UserError(f"task {name!r} failed to start: {error_line(exc)}", where) from None
    check_task(task, robot, name, where)
    return task


def _shape_error(what: str, value: object, shape: tuple[int, ...]) -> str | None:
    arr = np.asarray(value)
    if arr.shape != shape:
        return f"{what} has shape {arr.shape}, expected {shape}"
    if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
        return f"{what} is not finite"
    return None


def check_task(task: Task, robot: Robot, name: str, where: str | None = "env.task") -> None:
    """One episode start and one step of ``task`` on ``robot``'s model: sizes are ints, every array has the
    shape the protocol states, reward terms are named.

    :raises UserError: one line naming the first member that is wrong
    """

    def fail(what: str) -> UserError:
        return UserError(f"task {name!r}: {what}", where)

    for attr, low in (("obs_dim", 1), ("goal_dim", 0)):
        value = getattr(task, attr, None)
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
            raise fail(f"{attr} must be an int >= {low} (set it in the class or in __init__), got {value!r}")
    model = robot.model
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    n, g = int(task.obs_dim), int(task.goal_dim)
    step = "sample_goal"
    try:
        goal = np.asarray(task.sample_goal(rng), dtype=float)
        problem = _shape_error("sample_goal's goal", goal, (g,))
        step = "initial_qpos"
        qpos = np.asarray(task.initial_qpos(rng), dtype=float)
        problem = problem or _shape_error("initial_qpos", qpos, (model.nq,))
        if problem:
            raise fail(problem)
        data.qpos[:] = qpos
        mujoco.mj_forward(model, data)
        args = (data.qpos[None].copy(), data.qvel[None].copy(), data.sensordata[None].copy(), goal[None])
        step = "observe"
        problem = _shape_error("observe's observation", task.observe(*args), (1, n))
        step = "evaluate"
        result = task.evaluate(*args, np.zeros((1, model.nu)))
        step = "obs_names"
        names = list(task.obs_names())
    except UserError:
        raise
    except Exception as exc:  # the user's task: its error is reported in one line
        raise fail(f"{step} raised {error_line(exc)}") from None
    if problem:
        raise fail(problem)
    if not isinstance(result, tuple) or len(result) != 3:
        raise fail("evaluate must return (reward, success, terms)")
    reward, success, terms = result
    problem = _shape_error("evaluate's reward", reward, (1,)) or _shape_error("evaluate's success", success, (1,))
    if problem:
        raise fail(problem)
    if not isinstance(terms, dict) or not terms or not all(isinstance(k, str) and k for k in terms):
        raise fail("evaluate's terms must be a non-empty dict naming each reward term ({name: (n,) array})")
    for key, value in terms.items():
        if problem := _shape_error(f"reward term {key!r}", value, (1,)):
            raise fail(problem)
    if len(names) != n:
        raise fail(f"obs_names gives {len(names)} names for obs_dim {n}")


def as_index(idx: np.ndarray) -> slice | np.ndarray:
    """A slice when ``idx`` is a contiguous ascending run (a view, cheaper than fancy indexing)."""
    if idx.size and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):
        return slice(int(idx[0]), int(idx[0]) + idx.size)
    return idx

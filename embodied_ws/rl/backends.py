"""Vec-env backends by name: one :class:`Registry` (:data:`BACKENDS`) of :class:`Backend` entries.

A backend builds ``n_envs`` envs of the configured robot/task as an SB3 ``VecEnv`` whose innermost env
implements :class:`embodied_ws.sim.hooks.EnvHooks` (curriculum, checkpoint state, export layout), and
declares which backend evaluates its policies (evaluation runs in-process: a ROS simulator serves the
training env only).

Entries are lazy ``"module:attr"`` strings, imported only when the backend is used, so heavy or
optional imports (rclpy, ray) stay out of ``embodied-ws --help`` and out of every other backend.

**Adding a backend** (as ``ray`` was): write its factory ``make(cfg, dr, n_envs, seed) -> VecEnv`` in a module of
its own (its vec env implements ``EnvHooks``, e.g. by mixing in ``embodied_ws.sim.hooks.PerEnvHooks``), then

1. one line here: ``BACKENDS.add("ray", Backend("embodied_ws.rl.ray_vec:make_ray_vec_env", eval_backend="mujoco"))``,
2. its name in ``VecEnvName`` in ``embodied_ws/config/schema.py`` (the config validates ``train.vec_env``
   from that annotation; ``tests/test_backends.py`` checks the two lists agree).

The trainer node's ``backend`` parameter and ``train.launch.py`` accept every registered name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from embodied_ws.core.errors import ConfigError
from embodied_ws.core.registry import Registry
from embodied_ws.sim.hooks import EnvHooks

if TYPE_CHECKING:
    from embodied_ws.config.schema import RunConfig
    from embodied_ws.randomization.spec import DRSpec


@dataclass(frozen=True)
class Backend:
    """One vec-env backend.

    :param factory: ``"module:attr"`` of ``make(cfg, dr, n_envs, seed) -> VecEnv``, imported when used
    :param eval_backend: the registered backend that runs this backend's evaluation episodes
    :param max_envs: most envs it can run (None: no limit)
    :param ros_topics: trains through the ROS topic contract (launch adds a simulator node in lockstep)
    :param summary: one line for listings and help
    """

    factory: str
    eval_backend: str
    max_envs: int | None = None
    ros_topics: bool = False
    summary: str = ""

    def load(self) -> Callable[..., Any]:
        """The factory (importing its module now)."""
        module, attr = self.factory.split(":")
        return getattr(importlib.import_module(module), attr)


#: every vec-env backend by name (``train.vec_env``)
BACKENDS: Registry[Backend] = Registry("backend")
BACKENDS.add(
    "mujoco",
    Backend("embodied_ws.sim.vec_env:MujocoVecEnv", "mujoco", summary="batched mujoco.rollout (default, fastest)"),
)
BACKENDS.add("subproc", Backend("embodied_ws.rl.vec:make_subproc", "dummy", summary="SB3 SubprocVecEnv of RobotEnv"))
BACKENDS.add("dummy", Backend("embodied_ws.rl.vec:make_dummy", "dummy", summary="SB3 DummyVecEnv of RobotEnv"))
BACKENDS.add(
    "ros",
    Backend(
        "embodied_ws.ros.topic_env:make_ros_vec_env",
        "mujoco",
        max_envs=1,
        ros_topics=True,
        summary="the ROS 2 topic contract (mujoco_sim_node, Gazebo, a robot)",
    ),
)
BACKENDS.add(
    "ray",
    Backend(
        "embodied_ws.rl.ray_vec:make_ray_vec_env",
        "mujoco",
        summary="Ray sampler actors, each stepping a batch of MuJoCo envs (train.ray: address, actors)",
    ),
)


def backend_for(cfg: RunConfig, name: str | None = None, n_envs: int | None = None) -> Backend:
    """The backend ``name`` (default ``cfg.train.vec_env``), checked to allow ``n_envs`` (default ``train.n_envs``).

    :raises UnknownNameError: no such backend
    :raises ConfigError: more envs than the backend runs
    """
    name = name or cfg.train.vec_env
    backend = BACKENDS.get(name, "train.vec_env")
    n = cfg.train.n_envs if n_envs is None else n_envs
    if backend.max_envs is not None and n > backend.max_envs:
        raise ConfigError(f"backend {name!r} runs at most {backend.max_envs} env(s): got {n}", "train.n_envs")
    return backend


def make_vec_env(cfg: RunConfig, dr: DRSpec, n_envs: int, seed: int, kind: str | None = None) -> Any:
    """Build ``n_envs`` envs of the configured robot/task with backend ``kind``.

    :param cfg: run configuration
    :param dr: DR spec
    :param n_envs: number of envs
    :param seed: master seed
    :param kind: registered backend name; defaults to ``cfg.train.vec_env``
    :returns: an SB3 ``VecEnv`` implementing :class:`EnvHooks`
    """
    name = kind or cfg.train.vec_env
    venv = backend_for(cfg, name, n_envs).load()(cfg, dr, n_envs, seed)
    if not isinstance(venv, EnvHooks):
        venv.close()
        raise TypeError(f"backend {name!r} built a {type(venv).__name__}, which does not implement EnvHooks")
    return venv


def env_hooks(venv: Any) -> EnvHooks:
    """The :class:`EnvHooks` of a (possibly wrapped) vec env: its innermost env."""
    inner = venv.unwrapped
    if not isinstance(inner, EnvHooks):
        raise TypeError(f"{type(inner).__name__} does not implement EnvHooks")
    return inner

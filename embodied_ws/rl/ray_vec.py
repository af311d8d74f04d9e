"""The Ray backend (``train.vec_env: ray``): sampler actors, each stepping a batch of MuJoCo envs.

Each :class:`SamplerActor` owns one :class:`~embodied_ws.sim.vec_env.MujocoVecEnv` (a batch of envs
stepped by ``mujoco.rollout``), so one control step costs one actor round trip per actor, not per env.
Actors declare ``train.ray.cpus_per_actor`` CPUs: on a cluster whose head and learner nodes offer no
CPUs (``ray start --num-cpus=0``, as in ``docker/compose.yaml``) they land on the sampler nodes.

A dead actor (node lost, process killed) is replaced by a fresh one as soon as a call finds it dead
(a step, the curriculum's DR scale, a checkpoint's state): its envs end their episodes at the next step
(truncated, last observation as the terminal one) and start new ones, training goes on, and the event is
counted (:attr:`RayVecEnv.actor_restarts`, in the run report).

Ray is imported only here, when the backend is used.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, override

import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn

from embodied_ws.sim.vec_env import UnwrappedVecEnv

if TYPE_CHECKING:
    from embodied_ws.config.schema import RunConfig
    from embodied_ws.randomization.spec import DRSpec
    from embodied_ws.sim.core import EnvCore
    from embodied_ws.sim.hooks import EnvState

#: checkpoint layout of this backend: one batched EnvCore state per actor
LAYOUT = "ray"


class SamplerActor:
    """A Ray actor holding a batch of MuJoCo envs (created through ``ray.remote`` by :class:`RayVecEnv`).

    :param cfg: run configuration
    :param dr: domain-randomization spec
    :param n_envs: envs in this actor's batch
    :param seed: this actor's master seed
    :param nthread: MuJoCo rollout threads (the actor's CPUs)
    """

    def __init__(self, cfg: RunConfig, dr: DRSpec, n_envs: int, seed: int, nthread: int) -> None:
        from embodied_ws.sim.vec_env import MujocoVecEnv

        self.env = MujocoVecEnv(cfg, dr, n_envs, seed, nthread=nthread)
        self.env.seed(seed)

    def reset(self) -> np.ndarray:
        """Start a new episode in every env; returns the observations."""
        return self.env.reset()

    def step(self, actions: np.ndarray) -> VecEnvStepReturn:
        """One control step of the whole batch."""
        self.env.step_async(actions)
        return self.env.step_wait()

    def seed(self, seed: int) -> None:
        """Seed the batch for its next reset."""
        self.env.seed(seed)

    def set_dr_scale(self, scale: float) -> None:
        """Curriculum knob of every env of the batch."""
        self.env.core.set_dr_scale(scale)

    def get_state(self) -> dict[str, Any]:
        """RNG and DR/curriculum state of the batch."""
        return self.env.core.state_dict()

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` (the restored streams win over a seed pending for the next reset)."""
        self.env.core.load_state_dict(state)
        self.env._reset_seeds()

    def env_method(self, name: str, indices: list[int], args: tuple, kwargs: dict[str, Any]) -> list[Any]:
        """``env_method`` on this batch's envs ``indices`` (local numbering)."""
        return self.env.env_method(name, *args, indices=indices, **kwargs)

    def get_attr(self, name: str, indices: list[int]) -> list[Any]:
        """``get_attr`` on this batch's envs ``indices`` (local numbering)."""
        return self.env.get_attr(name, indices)


def _ray() -> Any:
    from embodied_ws.core.optional import require

    return require("ray", "pip install 'ray[default]'")


def connect(
    address: str | None,
    num_cpus: int | None = None,
    object_store_mb: int | None = None,
    token_file: str | None = None,
) -> bool:
    """Join the Ray cluster at ``address`` (``auto``, ``host:port``, ``ray://...``), or start a local one.

    Joining sends the cluster's token (Ray token authentication, see :mod:`embodied_ws.rl.ray_cluster`):
    from ``token_file``, or Ray's ``RAY_AUTH_TOKEN_PATH`` / ``RAY_AUTH_TOKEN``; a refused or unreachable
    cluster is one line. A local cluster has Ray's token authentication on (Ray's default).

    :param address: cluster address; empty/None starts a local cluster on this machine
    :param num_cpus: CPUs of a local cluster (None: all)
    :param object_store_mb: object store of a local cluster in MiB (None: Ray's default, a share of RAM)
    :param token_file: a file holding the cluster's token (None: Ray's environment settings)
    :returns: True when this call started Ray (the caller shuts it down)
    """
    from embodied_ws.rl.ray_cluster import join, use_token

    ray = _ray()
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    use_token(token_file)
    if address:
        join(ray, address, **kwargs)
    else:  # "local": a new cluster even when RAY_ADDRESS or a `ray start` cluster on this machine exists
        store = object_store_mb * 2**20 if object_store_mb else None
        ray.init(address="local", num_cpus=num_cpus, object_store_memory=store, **kwargs)
    return True


class RayVecEnv(UnwrappedVecEnv):
    """SB3 VecEnv over Ray sampler actors, each stepping a batch of envs (implements ``EnvHooks``).

    :param cfg: run configuration (``train.ray``: address, actors, CPUs per actor)
    :param dr: domain-randomization spec
    :param n_envs: envs in all (split as evenly as possible over the actors)
    :param seed: master seed (actor ``k`` gets child seed ``k``; a replacement gets a fresh child)
    """

    def __init__(self, cfg: RunConfig, dr: DRSpec, n_envs: int, seed: int | None = 0) -> None:
        from embodied_ws.core.errors import ConfigError
        from embodied_ws.sim.core import EnvCore
        from embodied_ws.sim.env import action_space, observation_space

        rc = cfg.train.ray
        if rc.actors > n_envs:
            raise ConfigError(f"{rc.actors} actors need at least as many envs (got {n_envs})", "train.ray.actors")
        self.cfg, self.dr_spec = cfg, dr
        self._core = EnvCore(cfg, dr, 1, 0)  # local: spaces, observation layout and export only
        self.sizes = [len(c) for c in np.array_split(np.arange(n_envs), rc.actors)]
        self.offsets = np.cumsum([0, *self.sizes])
        self.cpus = rc.cpus_per_actor
        self.nthread = max(1, int(rc.cpus_per_actor))
        self._seed = 0 if seed is None else int(seed)
        self._owns_ray = connect(rc.address or None)
        self._remote_cls = _ray().remote(num_cpus=self.cpus, max_restarts=0)(SamplerActor)
        self.actors = [self._spawn(k, 0) for k in range(rc.actors)]
        self.generation = [0] * rc.actors
        self.actor_restarts = 0
        self.restart_events: list[dict[str, Any]] = []
        self.round_trips = 0
        self._dr_scale: float | None = None
        self._refs: list[Any] = []
        self._restarted: dict[int, np.ndarray] = {}  # actor → first observations of its replacement
        self._last_obs: np.ndarray | None = None
        self.render_mode = None
        super().__init__(n_envs, observation_space(self._core), action_space(self._core))

    # ------------------------------------------------------------------ actors
    def _child_seed(self, k: int, generation: int) -> int:
        return int(np.random.SeedSequence([self._seed, k, generation]).generate_state(1)[0])

    def _spawn(self, k: int, generation: int) -> Any:
        seed = self._child_seed(k, generation)
        return self._remote_cls.remote(self.cfg, self.dr_spec, self.sizes[k], seed, self.nthread)

    def _replace(self, k: int, reason: str) -> np.ndarray:
        """Start a new actor ``k`` (fresh seed, current curriculum scale); returns its first observations.

        :param k: the dead actor's index
        :param reason: why it is replaced (the Ray error's name, for the report)
        """
        ray = _ray()
        with contextlib.suppress(Exception):  # the actor is gone already; nothing to clean up
            ray.kill(self.actors[k], no_restart=True)
        self.generation[k] += 1
        self.actors[k] = self._spawn(k, self.generation[k])
        if self._dr_scale is not None:
            self.actors[k].set_dr_scale.remote(self._dr_scale)
        obs = ray.get(self.actors[k].reset.remote())
        self.actor_restarts += 1
        self.restart_events.append({"actor": k, "time": time.time(), "reason": reason})
        return obs

    def _slice(self, k: int) -> slice:
        return slice(int(self.offsets[k]), int(self.offsets[k + 1]))

    def _on_all(self, call: Callable[[int], Any], actors: Sequence[int] | None = None) -> list[Any]:
        """``ray.get(call(k))`` for actors ``k`` in ``actors`` (default all), replacing any actor found dead.

        A replaced actor's envs have restarted: the next :meth:`step_wait` ends their episodes (outside a
        step, before the first reset, nothing is owed to the learner).

        :param call: ``actor index → object ref`` of a call on ``self.actors[k]``
        :param actors: actor indices
        """
        ray = _ray()
        ks = list(range(len(self.actors)) if actors is None else actors)
        refs = [call(k) for k in ks]
        out = []
        for k, ref in zip(ks, refs, strict=True):
            try:
                out.append(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                obs = self._replace(k, type(exc).__name__)
                if self._last_obs is not None:
                    self._restarted[k] = obs
                out.append(ray.get(call(k)))
        return out

    # ------------------------------------------------------------------ VecEnv API
    @override
    def reset(self) -> np.ndarray:
        ray = _ray()
        if self._seeds[0] is not None:
            base = int(self._seeds[0])
            for k, actor in enumerate(self.actors):
                actor.seed.remote(int(np.random.SeedSequence([base, k]).generate_state(1)[0]))
            self._reset_seeds()
        refs = [actor.reset.remote() for actor in self.actors]
        parts = []
        for k, ref in enumerate(refs):
            try:
                parts.append(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                parts.append(self._replace(k, type(exc).__name__))
        self._restarted = {}
        self._last_obs = np.concatenate(parts).astype(np.float32)
        self.round_trips += 1
        return self._last_obs.copy()

    @override
    def step_async(self, actions: np.ndarray) -> None:
        actions = np.asarray(actions).reshape(self.num_envs, -1)
        self._refs = [
            None if k in self._restarted else a.step.remote(actions[self._slice(k)]) for k, a in enumerate(self.actors)
        ]

    @override
    def step_wait(self) -> VecEnvStepReturn:
        ray = _ray()
        obs, rew, done, infos = [], [], [], []
        for k, ref in enumerate(self._refs):
            try:
                o, r, d, i = self._restart_step(k, "") if ref is None else ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                o, r, d, i = self._restart_step(k, type(exc).__name__)
            obs.append(o)
            rew.append(r)
            done.append(d)
            infos.extend(i)
        self._refs = []
        self._restarted = {}
        self.round_trips += 1
        self._last_obs = np.concatenate(obs).astype(np.float32)
        return self._last_obs.copy(), np.concatenate(rew), np.concatenate(done), infos

    def _restart_step(self, k: int, reason: str) -> VecEnvStepReturn:
        """The step of a dead actor's envs: episodes end (truncated) and restart on a new actor.

        :param k: the actor
        :param reason: why it died; empty when it was replaced already (outside a step)
        """
        assert self._last_obs is not None
        last = self._last_obs[self._slice(k)]
        obs = self._restarted.pop(k) if not reason else self._replace(k, reason)
        n = self.sizes[k]
        infos = [
            {"terminal_observation": last[j].copy(), "TimeLimit.truncated": True, "actor_restart": True}
            for j in range(n)
        ]
        return obs, np.zeros(n, dtype=np.float32), np.ones(n, dtype=bool), infos

    @override
    def close(self) -> None:
        ray = _ray()
        for actor in self.actors:
            with contextlib.suppress(Exception):  # already dead
                ray.kill(actor, no_restart=True)
        self.actors = []
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()

    def _by_actor(self, indices: VecEnvIndices) -> list[tuple[int, list[int]]]:
        """Global env indices → ``[(actor, [local indices])]`` in index order."""
        idx = list(self._get_indices(indices))
        groups: list[tuple[int, list[int]]] = []
        for i in idx:
            k = int(np.searchsorted(self.offsets, i, side="right") - 1)
            if groups and groups[-1][0] == k:
                groups[-1][1].append(i - int(self.offsets[k]))
            else:
                groups.append((k, [i - int(self.offsets[k])]))
        return groups

    @override
    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        groups = dict(self._by_actor(indices))
        parts = self._on_all(lambda k: self.actors[k].get_attr.remote(attr_name, groups[k]), list(groups))
        return [v for part in parts for v in part]

    @override
    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise AttributeError(f"set_attr({attr_name!r}) is not supported on Ray sampler actors")

    @override
    def env_method(self, method_name: str, *args: Any, indices: VecEnvIndices = None, **kwargs: Any) -> list[Any]:
        if method_name == "set_dr_scale" and indices is None:
            self._dr_scale = float(args[0] if args else kwargs["scale"])
        groups = dict(self._by_actor(indices))
        parts = self._on_all(
            lambda k: self.actors[k].env_method.remote(method_name, groups[k], args, kwargs), list(groups)
        )
        return [v for part in parts for v in part]

    def _get_indices(self, indices: VecEnvIndices) -> Sequence[int]:
        if indices is None:
            return range(self.num_envs)
        if isinstance(indices, int):
            return [indices]
        return list(indices)

    # ------------------------------------------------------------------ EnvHooks (embodied_ws.sim.hooks)
    def set_dr_scale(self, scale: float) -> None:
        """Curriculum knob for every env of every actor (replacement actors get it too).

        :param scale: the DR scale in [0, 1]
        """
        self._dr_scale = float(scale)
        self._on_all(lambda k: self.actors[k].set_dr_scale.remote(self._dr_scale))

    def get_env_state(self) -> EnvState:
        """RNG and DR/curriculum state of every actor's batch (layout ``ray``)."""
        streams = self._on_all(lambda k: self.actors[k].get_state.remote())
        return {"layout": LAYOUT, "n_envs": self.num_envs, "streams": {"sizes": self.sizes, "actors": streams}}

    def set_env_state(self, state: EnvState, where: str) -> None:
        """Restore :meth:`get_env_state` into the actors (same env count and split, else a one-line error).

        :param state: a saved env state
        :param where: where it came from (for the error line)
        """
        from embodied_ws.core.errors import UserError
        from embodied_ws.sim.hooks import check_env_state

        check_env_state(state, LAYOUT, self.num_envs, where)
        if list(state["streams"]["sizes"]) != list(self.sizes):
            raise UserError(
                f"saved env state has actors of {state['streams']['sizes']} envs, these have {self.sizes}: "
                "resume with the run's own train.ray.actors",
                where,
            )
        saved = state["streams"]["actors"]
        self._on_all(lambda k: self.actors[k].set_state.remote(saved[k]))
        self._reset_seeds()  # the restored streams win over a seed still pending for the next reset

    def env_core(self) -> EnvCore:
        """A local core of one env with the actors' layout (robot, task, observation names, rate)."""
        return self._core

    # ------------------------------------------------------------------ report
    def stats(self) -> dict[str, Any]:
        """What the run report says about the samplers."""
        return {
            "actors": len(self.actors),
            "envs_per_actor": self.sizes,
            "cpus_per_actor": self.cpus,
            "actor_restarts": self.actor_restarts,
            "restart_events": self.restart_events,
        }


def make_ray_vec_env(cfg: RunConfig, dr: DRSpec, n_envs: int, seed: int) -> RayVecEnv:
    """Backend factory (``BACKENDS`` entry ``ray``).

    :param cfg: run configuration
    :param dr: DR spec
    :param n_envs: envs in all
    :param seed: master seed
    """
    return RayVecEnv(cfg, dr, n_envs, seed)

"""The typed protocol between a training run and the envs of any vec-env backend: :class:`EnvHooks`.

A backend's vec env (the innermost one, ``venv.unwrapped``) implements :class:`EnvHooks`, so the
curriculum, checkpoints, resume and the policy export work the same whatever steps the physics:

- :class:`embodied_ws.sim.vec_env.MujocoVecEnv` implements it over its one batched :class:`EnvCore`
  (layout ``batched``);
- SB3's ``DummyVecEnv``/``SubprocVecEnv`` over gym envs with :class:`CoreHooks` (``RobotEnv``,
  ``RosTopicEnv``) implement it through :class:`PerEnvHooks` (layout ``per_env``: one ``EnvCore`` of one env
  per env, reached with ``env_method``);
- a new backend (Ray ...) either reuses :class:`PerEnvHooks` (its vec env has ``env_method``) or
  implements the four methods itself with a layout name of its own.

Env state (:class:`EnvState`) names its layout and env count. Restoring it into envs of another layout
or count stops with a one-line :class:`UserError` (:func:`check_env_state`) instead of silently
restoring nothing; layouts that store the same streams (``dummy`` and ``subproc`` are both ``per_env``)
restore into each other exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypedDict, runtime_checkable

from embodied_ws.core.errors import UserError

if TYPE_CHECKING:
    from embodied_ws.config.schema import RunConfig
    from embodied_ws.randomization.spec import DRSpec
    from embodied_ws.sim.core import EnvCore


class EnvState(TypedDict):
    """RNG, DR and curriculum state of a backend's envs, as saved in checkpoints (JSON-serializable).

    :param layout: how ``streams`` is organized (``batched``: one ``EnvCore.state_dict()`` for all envs;
        ``per_env``: a list of one ``state_dict()`` per env)
    :param n_envs: number of envs the state belongs to
    :param streams: the state itself, as the layout says
    """

    layout: str
    n_envs: int
    streams: Any


@runtime_checkable
class EnvHooks(Protocol):
    """What a training run needs from the envs of any backend (implemented by the innermost vec env)."""

    num_envs: int

    def set_dr_scale(self, scale: float) -> None:
        """Curriculum knob for every env: 0 = nominal model, 1 = full DR ranges (from each env's next reset).

        :param scale: the DR scale in [0, 1]
        """
        ...

    def get_env_state(self) -> EnvState:
        """RNG, DR and curriculum state of every env (for checkpoints)."""
        ...

    def set_env_state(self, state: EnvState, where: str) -> None:
        """Restore :meth:`get_env_state`; a state of another layout or env count raises a one-line UserError.

        The restored streams replace any seed pending for the next reset (SB3 seeds envs when a model loads).

        :param state: what :meth:`get_env_state` returned (possibly on another backend)
        :param where: where the state came from, for the error line (a checkpoint path)
        """
        ...

    def env_core(self) -> EnvCore:
        """An :class:`EnvCore` with these envs' layout: robot, task, observation names, action mapping, rate."""
        ...


def check_env_state(state: Any, layout: str, n_envs: int, where: str) -> None:
    """Raise a one-line :class:`UserError` unless ``state`` was saved by envs of ``layout`` and ``n_envs``.

    :param state: a saved :class:`EnvState`
    :param layout: the layout of the envs it is to be restored into
    :param n_envs: their number
    :param where: where the state came from (for the error line)
    """
    saved = (state.get("layout"), state.get("n_envs")) if isinstance(state, dict) else (None, None)
    if saved != (layout, n_envs):
        raise UserError(
            f"saved env state is {saved[0] or 'of an unknown format'} with {saved[1]} envs, these envs are "
            f"{layout} with {n_envs}: resume with the run's own train.vec_env and train.n_envs",
            where,
        )


class CoreHooks:
    """Per-env side of the protocol on any gym env built around an :class:`EnvCore` (reached via ``env_method``)."""

    core: EnvCore

    def set_dr_scale(self, scale: float) -> None:
        """Curriculum knob: 0 = nominal model, 1 = full DR ranges.

        :param scale: the DR scale in [0, 1]
        """
        self.core.set_dr_scale(scale)

    def get_core_state(self) -> dict[str, Any]:
        """RNG and DR state for checkpoints."""
        return self.core.state_dict()

    def set_core_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_core_state`.

        :param state: what :meth:`get_core_state` returned
        """
        self.core.load_state_dict(state)


class PerEnvHooks:
    """:class:`EnvHooks` for a vec env with ``env_method`` over gym envs with :class:`CoreHooks` (layout ``per_env``).

    Mix it in before the vec env class (which provides ``env_method``) and call :meth:`bind` after construction.
    """

    LAYOUT = "per_env"
    num_envs: int
    env_method: Any  # the vec env's own (SB3 VecEnv)
    _reset_seeds: Any  # the vec env's own (SB3 VecEnv): forget seeds pending for the next reset

    def bind(self, cfg: RunConfig, dr: DRSpec) -> None:
        """Remember the envs' configuration (for :meth:`env_core`).

        :param cfg: the envs' run configuration
        :param dr: their DR spec
        """
        self._hooks_cfg, self._hooks_dr = cfg, dr
        self._hooks_core: EnvCore | None = None

    def set_dr_scale(self, scale: float) -> None:
        """See :meth:`EnvHooks.set_dr_scale`."""
        self.env_method("set_dr_scale", scale)

    def get_env_state(self) -> EnvState:
        """See :meth:`EnvHooks.get_env_state`."""
        return {"layout": self.LAYOUT, "n_envs": self.num_envs, "streams": self.env_method("get_core_state")}

    def set_env_state(self, state: EnvState, where: str) -> None:
        """See :meth:`EnvHooks.set_env_state`."""
        check_env_state(state, self.LAYOUT, self.num_envs, where)
        for i, s in enumerate(state["streams"]):
            self.env_method("set_core_state", s, indices=[i])
        self._reset_seeds()  # the restored streams win over a seed still pending for the next reset

    def env_core(self) -> EnvCore:
        """See :meth:`EnvHooks.env_core` (a local core of one env: the envs may live in other processes)."""
        if self._hooks_core is None:
            from embodied_ws.sim.core import EnvCore

            self._hooks_core = EnvCore(self._hooks_cfg, self._hooks_dr, 1, 0)
        return self._hooks_core

"""One owner of a training run: envs, model and run state, with learn, save and load together.

:class:`TrainingRun` (in the spirit of rsl_rl's ``OnPolicyRunner``) is a context manager: every env it
builds is closed on every exit path (a finished run, an error, an interrupt). :class:`RunState` is what a run
records and is saved and loaded as one piece with each checkpoint; what can be derived (the step count from
the model, the curriculum scale from the step count) is not saved. The callbacks write into the state; the
progress bar only renders it.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from embodied_ws.config.loader import load_dr, to_dict
from embodied_ws.config.schema import RunConfig
from embodied_ws.core.atomic import write_bytes_atomic
from embodied_ws.core.errors import EnvLost, UserError
from embodied_ws.core.outputs import FolderLock, claim, make_folder, read_marker
from embodied_ws.rl import callbacks as cb
from embodied_ws.rl.backends import backend_for, env_hooks, make_vec_env
from embodied_ws.rl.checkpoint import latest_checkpoint, load_vecnormalize, read_state, restore_rng, save_checkpoint
from embodied_ws.rl.ppo import make_training_env, ppo_kwargs, resolve_device
from embodied_ws.sim.urdf import save_generated_model


def save_run_config(run_dir: Path, cfg: RunConfig) -> None:
    """Write the resolved configuration as ``run_dir/config.yaml`` (atomically).

    :param run_dir: the run folder (must exist)
    :param cfg: the resolved run configuration
    """
    write_bytes_atomic(run_dir / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False).encode())


@dataclass
class RunState:
    """What a run has recorded so far; saved with every checkpoint (``state.json``) and restored on resume.

    :param episodes: ``(step, return)`` of every finished training episode
    :param evals: periodic evaluations (``step``, ``success_rate``, ``mean_return``, ``episodes``)
    :param physics_resets: training episodes ended by a physics fault
    :param actor_restarts: Ray sampler actors replaced after they died (``train.vec_env: ray``)
    :param learn_seconds: wall-clock seconds spent learning so far (what ``train.max_minutes`` counts)
    :param confirmations: confirmation evaluations before an early stop (``train.confirm_success``)
    :param recent_success: success (0/1) of the last training episodes (the evaluation gate reads them)
    """

    episodes: list[tuple[int, float]] = field(default_factory=list)
    evals: list[dict[str, float]] = field(default_factory=list)
    physics_resets: int = 0
    actor_restarts: int = 0
    learn_seconds: float = 0.0
    confirmations: list[dict[str, float]] = field(default_factory=list)
    recent_success: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form (for ``state.json``)."""
        return {
            "episodes": [list(e) for e in self.episodes],
            "evals": self.evals,
            "physics_resets": self.physics_resets,
            "actor_restarts": self.actor_restarts,
            "learn_seconds": self.learn_seconds,
            "confirmations": self.confirmations,
            "recent_success": self.recent_success,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunState:
        """Read :meth:`to_json` (extra keys, such as the step count, are ignored).

        :param data: a checkpoint's ``state.json`` content
        """
        return cls(
            [(int(s), float(r)) for s, r in data.get("episodes", [])],
            [dict(e) for e in data.get("evals", [])],
            int(data.get("physics_resets", 0)),
            int(data.get("actor_restarts", 0)),
            float(data.get("learn_seconds", 0.0)),
            [dict(e) for e in data.get("confirmations", [])],
            [int(bool(x)) for x in data.get("recent_success", [])],
        )


class TrainingRun:
    """A PPO training run in ``runs_root/name``: ``with TrainingRun(...) as run: run.learn(); run.finish()``.

    Entering builds (or, with ``resume``, loads) everything; leaving closes every env.

    :param cfg: resolved run configuration
    :param name: run name (folder under ``runs_root``)
    :param runs_root: folder of runs
    :param resume: continue from the run's latest checkpoint
    :param progress: report progress (a rich bar on a terminal, plain lines otherwise; both in train.log)
    """

    def __init__(
        self, cfg: RunConfig, name: str, runs_root: Path = Path("runs"), resume: bool = False, progress: bool = True
    ) -> None:
        self.cfg, self.name, self.resume, self.progress = cfg, name, resume, progress
        self.run_dir = runs_root / name
        self.ckpt_root = self.run_dir / "checkpoints"
        self.backend = backend_for(cfg)  # an unknown backend or env count fails before anything is written
        self.state = RunState()
        self.dr: Any = None
        self.venv: Any = None
        self.eval_env: Any = None
        self.model: Any = None
        self.save_seconds = 0.0
        self._restarts_before = 0  # sampler actors replaced before a resume (in the checkpoint's run state)
        self.timing: dict[str, float] = {}
        self.stopped: str = ""  # why learning ended: step budget, time budget, target success, keyboard interrupt
        self._evals: cb.EvalSuccess | None = None
        self._stack = ExitStack()

    # ------------------------------------------------------------------ lifetime
    def __enter__(self) -> TrainingRun:
        try:
            self._open()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _open(self) -> None:
        import torch
        from stable_baselines3 import PPO
        from stable_baselines3.common.logger import configure

        cfg = self.cfg
        self._own_run_dir()
        ckpt = latest_checkpoint(self.ckpt_root)
        if self.resume and ckpt is None:
            raise UserError("no complete checkpoint to resume from", str(self.ckpt_root))
        if not self.resume and ckpt is not None:
            raise UserError(
                "run already exists; pass --resume to continue it or choose another --name", str(self.run_dir)
            )
        make_folder(self.run_dir, "train")
        save_run_config(self.run_dir, cfg)
        save_generated_model(self.run_dir, cfg)  # a URDF/xacro robot: the MJCF that is simulated
        self.dr = load_dr(cfg.dr)
        if resolve_device(cfg.ppo.device, cfg.env.camera_obs) == "cpu":
            torch.set_num_threads(1)  # the sim threads own the cores; a 64×64 MLP gains nothing from more
        self.venv, self.timer = make_training_env(cfg, self.dr)
        self._stack.callback(self.timer.venv.close)  # the backend's envs (the wrappers only forward close)
        if cfg.train.eval_every:
            self.eval_env = self.make_eval_env(cfg.train.eval_episodes, cfg.train.seed + 10_000)
        if ckpt is not None:
            self.load(ckpt)
        else:
            self.model = PPO(env=self.venv, **ppo_kwargs(cfg))
        self.model.set_logger(configure(str(self.run_dir / "tb"), ["tensorboard"]))

    def _own_run_dir(self) -> None:
        """Lock the run folder for this run's whole life (a second ``train --name`` gets one line naming this
        PID) and check it is ours: new, empty, this verb's, or (``--resume``) a run from before the marker."""
        self._stack.callback(FolderLock(self.run_dir, "train").acquire().release)
        older = self.resume and read_marker(self.run_dir) is None and (self.run_dir / "config.yaml").is_file()
        if not older:
            claim(self.run_dir, "train", adds=True, flag="--name")

    def make_eval_env(self, n_envs: int, seed: int) -> Any:
        """Envs of the backend's evaluation backend, closed with the run.

        :param n_envs: one env per evaluation episode
        :param seed: their seed
        """
        venv = make_vec_env(self.cfg, self.dr, n_envs, seed, self.backend.eval_backend)
        self._stack.callback(venv.close)
        return venv

    # ------------------------------------------------------------------ state
    @property
    def curriculum_scale(self) -> float:
        """The DR scale the curriculum gives at the current step count (derived, never saved)."""
        return cb.curriculum_scale(self.cfg.train.curriculum_steps, int(self.model.num_timesteps))

    def save(self) -> Path:
        """Write a checkpoint now (model, optimizer, normalization, RNG, run state, env state); returns its folder."""
        t = time.perf_counter()
        self._sync_sampler_events()
        extra = {**self.state.to_json(), "env": env_hooks(self.venv).get_env_state()}
        path = save_checkpoint(self.ckpt_root, self.model, self.venv, extra, self.cfg.train.keep_checkpoints)
        self.save_seconds += time.perf_counter() - t
        return path

    def _sync_sampler_events(self) -> None:
        """Count the sampler actors replaced so far (this process's on top of those before a resume)."""
        restarts = getattr(self.venv.unwrapped, "actor_restarts", None)
        if restarts is not None:
            self.state.actor_restarts = self._restarts_before + int(restarts)

    def load(self, ckpt: Path) -> None:
        """Restore everything :meth:`save` wrote into this run's (already built) envs and a loaded model.

        :param ckpt: a checkpoint folder
        :raises UserError: the checkpoint is unreadable or its env state does not fit these envs
        """
        from stable_baselines3 import PPO
        from stable_baselines3.common.vec_env import VecNormalize

        data = read_state(ckpt)
        print(f"resuming from step {data['num_timesteps']} ({ckpt.name})", file=sys.stderr)
        base = self.venv.venv if isinstance(self.venv, VecNormalize) else self.venv
        self.venv = load_vecnormalize(ckpt, base)
        device = resolve_device(self.cfg.ppo.device, self.cfg.env.camera_obs)
        self.model = PPO.load(ckpt / "model.zip", env=self.venv, device=device)
        env_hooks(self.venv).set_env_state(data.get("env"), str(ckpt / "state.json"))  # type: ignore[arg-type]
        restore_rng(ckpt)
        self.state = RunState.from_json(data)
        self._restarts_before = self.state.actor_restarts

    # ------------------------------------------------------------------ training
    def learn(self, extra_callbacks: list[Any] | None = None) -> str | bool:
        """Train up to ``train.total_timesteps``; returns ``"keyboard interrupt"`` when interrupted, else False.

        :param extra_callbacks: more SB3 callbacks; one with ``attach(run)`` gets this run (to save checkpoints)
        :raises EnvLost: the simulator stopped answering (a checkpoint is saved first; the message names it)
        """
        cfg = self.cfg.train
        confirm = None
        if cfg.confirm_success is not None:

            def confirm_env() -> Any:
                venv = self.make_eval_env(min(cfg.confirm_episodes, cb.CONFIRM_ROUND), cfg.seed + 30_000)
                env_hooks(venv).set_dr_scale(1.0)
                return venv

            confirm = (cfg.confirm_success, cfg.confirm_episodes, confirm_env)
        episodes = cb.RecordEpisodes(self.state)
        evals = (
            cb.EvalSuccess(
                self.eval_env,
                cfg.eval_every,
                cfg.target_success,
                cfg.eval_episodes,
                self.state.evals,
                confirm,
                self.state.confirmations,
                episodes.success_rate,
            )
            if self.eval_env
            else None
        )
        self._evals = evals
        bar = cb.TrainProgress(
            cfg.total_timesteps, self.state, episodes, enabled=self.progress, log_file=self.run_dir / "train.log"
        )
        envs_for_curriculum = [self.venv] + ([self.eval_env] if self.eval_env else [])
        times = cb.TimeBreakdown(self.timer)
        budget = cb.TimeBudget(cfg.max_minutes * 60.0, self.state)
        callbacks = [
            times,
            budget,
            cb.Curriculum(cfg.curriculum_steps, envs_for_curriculum),
            cb.StaggerEpisodes(self.venv, cfg.seed),
            cb.CheckpointEvery(self.save, cfg.checkpoint_every),
            episodes,
            bar,
            *([evals] if evals else []),
        ]
        for extra in extra_callbacks or []:
            if hasattr(extra, "attach"):
                extra.attach(self)
        start = int(self.model.num_timesteps)
        remaining = cfg.total_timesteps - start
        interrupted: str | bool = False
        try:
            if remaining > 0:
                self.model.learn(remaining, callback=[*callbacks, *(extra_callbacks or [])], reset_num_timesteps=False)
        except KeyboardInterrupt:
            interrupted = "keyboard interrupt"
        except EnvLost as exc:
            bar.close()
            path = self.save()
            raise EnvLost(
                f"{exc.what}; checkpoint saved at {path} (step {self.model.num_timesteps}); "
                "resume with --resume once the simulator is back",
                exc.topic,
            ) from None
        finally:
            bar.close()
        self.stopped = (
            interrupted
            or (budget.reached and f"time budget ({cfg.max_minutes:g} min)")
            or (evals is not None and evals.reached and "target success")
            or "step budget"
        )
        if budget.reached:
            print(
                f"time budget of {cfg.max_minutes:g} min spent at step {self.model.num_timesteps:,}: learning ends",
                file=sys.stderr,
            )
        self.timing = times.summary(
            int(self.model.num_timesteps) - start,
            {"eval": evals.seconds if evals else 0.0, "checkpoint": self.save_seconds},
        )
        return interrupted

    def finish(self, interrupted: str | bool = False) -> dict[str, Any]:
        """Final evaluation (full DR), last checkpoint, policy export and report; returns the run summary.

        :param interrupted: what :meth:`learn` returned
        """
        from embodied_ws.rl.datawait import for_run
        from embodied_ws.rl.diagnosis import failure_motion
        from embodied_ws.rl.export import export_policy
        from embodied_ws.rl.report import hardware_summary, write_report

        cfg, model = self.cfg, self.model
        final = None
        finals: list[dict[str, Any]] = []
        if self._evals and cfg.train.final_eval_episodes:
            if self._evals.model is None:  # nothing left to learn: the callback never started
                self._evals.init_callback(model)
            final_env = self.make_eval_env(cfg.train.final_eval_episodes, cfg.train.seed + 20_000)
            env_hooks(final_env).set_dr_scale(1.0)
            final = self._evals.evaluate(final_env, cfg.train.final_eval_episodes, record=False, finals=finals)
        self.save()
        core = env_hooks(self.venv).env_core()
        export_policy(self.run_dir / "policy", model, self.venv, core)
        inner = self.venv.unwrapped
        wait = for_run(self.timing, cfg, inner) if self.timing else None
        if wait is not None:
            print(wait.message, file=sys.stderr)
        summary = {
            "name": self.name,
            "robot": core.robot.name,
            "task": cfg.env.task,
            "dr": bool(self.dr.enabled and self.dr.params),
            "steps": int(model.num_timesteps),
            "interrupted": interrupted,
            "stopped": self.stopped or str(interrupted or ""),
            "final_success": final["success_rate"] if final else None,
            "final_eval": final,
            "failures": failure_motion(finals, cfg.task),
            "target_success": cfg.train.target_success,
            "physics_resets": self.state.physics_resets,
            "time": self.timing,
            "data_wait": wait.to_dict() if wait is not None else None,
            "hardware": hardware_summary(
                str(model.device),
                sum(p.numel() for p in model.policy.parameters()),
                getattr(self.venv.unwrapped, "nthread", os.cpu_count() or 1),
            ),
            "evals": self.state.evals,
            "evals_skipped": self._evals.skipped if self._evals else 0,
            "confirmations": self.state.confirmations,
            "config": to_dict(cfg),
        }
        if hasattr(inner, "stats"):  # the Ray backend: actors, their envs and CPUs, replacements
            summary["ray"] = {**inner.stats(), "actor_restarts": self.state.actor_restarts}
        write_report(self.run_dir, summary, summary["evals"], self.state.episodes)
        return summary

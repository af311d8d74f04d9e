"""SB3 callbacks of the training pipeline: checkpoints, evaluation, curriculum, time breakdown, progress.

Each does its work at rollout boundaries (never per env step), so the pipeline runs at the speed of
a plain SB3 script (measured by ``bench/train_throughput.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from embodied_ws.rl.checkpoint import save_checkpoint
from embodied_ws.rl.backends import env_hooks
from embodied_ws.rl.vec import episode_success


class TimeBreakdown(BaseCallback):
    """Wall time of sampling (env stepping + policy inference) and of PPO updates, and the fps."""

    def __init__(self, timer: Any) -> None:
        super().__init__()
        self.timer = timer
        self.sampling = self.update = 0.0
        self._rollout_start = self._rollout_end = None
        self.start = time.perf_counter()
        self.end: float | None = None

    def _on_rollout_start(self) -> None:
        now = time.perf_counter()
        if self._rollout_end is not None:
            self.update += now - self._rollout_end
        self._rollout_start = now

    def _on_rollout_end(self) -> None:
        now = time.perf_counter()
        self.sampling += now - self._rollout_start
        self._rollout_end = now

    def _on_step(self) -> bool:
        return True

    def _on_training_end(self) -> None:
        self.end = time.perf_counter()
        if self._rollout_end is not None:
            self.update += self.end - self._rollout_end
            self._rollout_end = None

    def summary(self, steps_done: int, extra_seconds: dict[str, float]) -> dict[str, float]:
        """Seconds per phase of the learning loop (work after it, such as the final evaluation, is not
        counted); ``waiting_for_data`` is the learner's time blocked on env steps.

        :param extra_seconds: time spent between rollouts on other work (eval, checkpoints), taken out of
            the update time
        """
        end = self.end if self.end is not None else time.perf_counter()
        update = self.update - sum(extra_seconds.values())
        env = self.timer.step_seconds
        total = end - self.start
        return {
            "total_s": total,
            "sampling_s": self.sampling,
            "env_step_s": env,
            "policy_inference_s": max(self.sampling - env, 0.0),
            "update_s": max(update, 0.0),
            "waiting_for_data_s": env,
            **{f"{k}_s": v for k, v in extra_seconds.items()},
            "env_steps": steps_done,
            "env_steps_per_s": steps_done / total if total > 0 else 0.0,
        }


class CheckpointEvery(BaseCallback):
    """Save an atomic checkpoint every ``every`` env steps (checked at rollout ends)."""

    def __init__(self, root: Path, every: int, keep: int, extra: Callable[[], dict[str, Any]]) -> None:
        super().__init__()
        self.root, self.every, self.keep, self.extra = root, every, keep, extra
        self.next = every
        self.seconds = 0.0
        self.saved: list[Path] = []

    def _init_callback(self) -> None:
        if self.every:
            self.next = (self.model.num_timesteps // self.every + 1) * self.every

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        if self.every and self.model.num_timesteps >= self.next:
            self.save()
            self.next += self.every * max(1, (self.model.num_timesteps - self.next) // self.every + 1)

    def save(self) -> Path:
        """Write a checkpoint now."""
        t = time.perf_counter()
        venv = self.model.get_env()
        path = save_checkpoint(self.root, self.model, venv, {**self.extra(), "env": env_hooks(venv).get_env_state()}, self.keep)
        self.saved.append(path)
        self.seconds += time.perf_counter() - t
        return path


class EvalSuccess(BaseCallback):
    """Evaluate the deterministic policy on separate envs (DR on); stop once two evaluations in a row
    reach the target success rate (one 64-episode estimate is ±5 %: a single lucky one is not enough).

    :param eval_env: a vec env with one env per evaluation episode
    :param every: env steps between evaluations
    :param target: success rate that ends training early (None: never)
    """

    def __init__(self, eval_env: Any, every: int, target: float | None, episodes: int) -> None:
        super().__init__()
        self.eval_env, self.every, self.target, self.episodes = eval_env, every, target, episodes
        self.next = every
        self.history: list[dict[str, float]] = []
        self.seconds = 0.0
        self.reached = False

    def _init_callback(self) -> None:
        if self.every:
            self.next = (self.model.num_timesteps // self.every + 1) * self.every

    def _on_step(self) -> bool:
        return not self.reached

    def _on_rollout_end(self) -> None:
        if self.every and self.model.num_timesteps >= self.next:
            self.evaluate()
            self.next += self.every * max(1, (self.model.num_timesteps - self.next) // self.every + 1)

    def evaluate(self, env: Any = None, episodes: int | None = None, record: bool = True) -> dict[str, float]:
        """Run evaluation episodes now (on ``env``, default the periodic eval env) and record the result."""
        t = time.perf_counter()
        from stable_baselines3.common.vec_env import VecNormalize

        venv = self.model.get_env()
        norm = venv if isinstance(venv, VecNormalize) else None

        def act(obs: np.ndarray) -> np.ndarray:
            return self.model.predict(norm.normalize_obs(obs) if norm else obs, deterministic=True)[0]

        rate, ret, n = episode_success(env or self.eval_env, episodes or self.episodes, act)
        row = {"step": int(self.model.num_timesteps), "success_rate": rate, "mean_return": ret, "episodes": n}
        if record:
            self.history.append(row)
            self.logger.record("eval/success_rate", rate)
            self.logger.record("eval/mean_return", ret)
            recent = [h["success_rate"] for h in self.history[-2:]]
            if self.target is not None and len(recent) == 2 and min(recent) >= self.target:
                self.reached = True
        self.seconds += time.perf_counter() - t
        return row


class Curriculum(BaseCallback):
    """Widen DR ranges linearly from 0 (nominal) to 1 (full) over ``steps`` env steps (through :class:`EnvHooks`)."""

    def __init__(self, steps: int, envs: list[Any]) -> None:
        super().__init__()
        self.steps, self.envs = steps, envs
        self.scale = 0.0 if steps else 1.0

    def _on_training_start(self) -> None:
        self._push()

    def _on_step(self) -> bool:
        return True

    def _on_rollout_start(self) -> None:
        self._push()

    def _push(self) -> None:
        self.scale = 1.0 if not self.steps else min(1.0, self.model.num_timesteps / self.steps)
        for venv in self.envs:
            env_hooks(venv).set_dr_scale(self.scale)


class RichProgress(BaseCallback):
    """A rich progress bar over the step budget with fps, episode success and the latest eval."""

    def __init__(self, total: int, evals: EvalSuccess | None, enabled: bool = True) -> None:
        super().__init__()
        self.total, self.evals, self.enabled = total, evals, enabled
        self._progress: Any = None
        self._task: Any = None
        self._success: list[float] = []
        self.physics_resets = 0
        self.episodes: list[tuple[int, float]] = []

    def _on_training_start(self) -> None:
        if not self.enabled:
            return
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            TextColumn("{task.completed:,}/{task.total:,} steps"),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task("train", total=self.total, completed=self.model.num_timesteps, stats="")

    def _on_step(self) -> bool:
        for done, info in zip(self.locals["dones"], self.locals["infos"], strict=True):
            if done:
                self._success.append(float(info.get("is_success", False)))
                if "episode" in info:
                    self.episodes.append((self.num_timesteps, round(float(info["episode"]["r"]), 4)))
                if info.get("physics_reset"):
                    self.physics_resets += 1
        return True

    def _on_rollout_end(self) -> None:
        if self._progress is None:
            return
        recent = self._success[-200:]
        stats = f"succ {np.mean(recent):.0%}" if recent else ""
        if self.evals and self.evals.history:
            stats += f" | eval {self.evals.history[-1]['success_rate']:.0%}"
        self._progress.update(self._task, completed=self.model.num_timesteps, stats=stats)

    def _on_training_end(self) -> None:
        self.close()

    def close(self) -> None:
        """Stop the bar (idempotent; also called when training stops on an error)."""
        if self._progress is not None:
            self._progress.update(self._task, completed=self.model.num_timesteps)
            self._progress.stop()
            self._progress = None

"""SB3 callbacks of the training pipeline: checkpoints, evaluation, curriculum, time breakdown, progress.

Each does its work at rollout boundaries (never per env step), so the pipeline runs at the speed of
a plain SB3 script (measured by ``bench/train_throughput.py``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from embodied_ws.rl.backends import env_hooks
from embodied_ws.rl.vec import episode_success, success_interval


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


class _EveryNSteps(BaseCallback):
    """Runs :meth:`_run` at the first rollout end at or past each multiple of ``every`` env steps (0: never).

    :param every: env steps between runs
    """

    def __init__(self, every: int) -> None:
        super().__init__()
        self.every = every
        self.next = every

    def _init_callback(self) -> None:
        if self.every:  # a resumed run continues the schedule from its step count
            self.next = (self.model.num_timesteps // self.every + 1) * self.every

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        if self.every and self.model.num_timesteps >= self.next:
            self._run()
            self.next += self.every * max(1, (self.model.num_timesteps - self.next) // self.every + 1)

    def _run(self) -> None:
        raise NotImplementedError


class CheckpointEvery(_EveryNSteps):
    """Call ``save`` (the run's checkpoint writer) every ``every`` env steps (checked at rollout ends).

    :param save: writes a checkpoint now
    :param every: env steps between checkpoints (0: never here)
    """

    def __init__(self, save: Callable[[], Path], every: int) -> None:
        super().__init__(every)
        self.save = save

    def _run(self) -> None:
        self.save()


#: an evaluation steps at most this share of the env steps training takes between two evaluations: an arm with
#: long episodes (a heavily damped one: 11.3 s) is evaluated less often, so evaluation stays a bounded part of the
#: run (the damped Panda spent 24 % of its wall time evaluating at ``train.eval_every`` 25,000); arms with episodes
#: up to 195 steps keep 25,000 at 64 episodes
EVAL_STEP_SHARE = 0.5


def eval_interval(every: int, episodes: int, episode_steps: int) -> int:
    """Env steps between evaluations: ``every`` (``train.eval_every``), or more when one evaluation of ``episodes``
    episodes of ``episode_steps`` would step more than :data:`EVAL_STEP_SHARE` of that (0 stays 0: no evaluation)."""
    if every <= 0 or episodes <= 0:
        return every
    return max(every, math.ceil(episodes * episode_steps / EVAL_STEP_SHARE))


#: while the training episodes' success rate is this far under the early-stop target, only every
#: :data:`EVAL_GATE_STRIDE`-th periodic evaluation runs (the curve keeps its points): such a policy cannot stop.
#: Over the last 0.8 M steps of 14 Panda push runs the (stochastic) training episodes' rate was at or above
#: the 64-episode evaluations' in 11, by up to 5 points (the other 3, at 20-46 %, up to 9 points under);
#: evaluating took about a fifth of a 20-minute run
EVAL_GATE_MARGIN = 0.1
EVAL_GATE_STRIDE = 4
#: a confirmation evaluates its fresh episodes in rounds of at most this many, and fails as soon as it can no
#: longer pass (a 1,024-episode confirmation took about 60 s of a 20-minute Panda push run)
CONFIRM_ROUND = 256


def needed_successes(rate: float, episodes: int) -> int:
    """The fewest successes in ``episodes`` whose 95 % interval starts at ``rate`` or above (``episodes + 1``
    when none does)."""
    lo, hi = 0, episodes + 1
    while lo < hi:  # the interval's low end rises with the successes: bisect
        mid = (lo + hi) // 2
        if success_interval(mid, episodes)[0] >= rate:
            hi = mid
        else:
            lo = mid + 1
    return lo


def confirmation_hopeless(successes: int, done: int, total: int, need: int) -> bool:
    """A confirmation with ``successes`` in ``done`` of its ``total`` episodes cannot reach ``need`` successes
    even if the rest succeed at the high end of the 95 % interval of its rate so far."""
    return done < total and successes + (total - done) * success_interval(successes, done)[1] < need


class EvalSuccess(_EveryNSteps):
    """Evaluate the deterministic policy on separate envs (DR on); stop once two evaluations in a row
    reach the target success rate (one 64-episode estimate is ±5 %: a single lucky one is not enough).

    :param eval_env: a vec env with one env per evaluation episode
    :param every: env steps between evaluations
    :param target: success rate that ends training early (None: never)
    :param episodes: episodes per evaluation
    :param history: where results are appended (a training run passes its state's list; default a new one)
    :param confirm: ``(success rate, episodes, make_env)``: before stopping, evaluate ``episodes`` fresh episodes
        on ``make_env()`` (built once) and stop only if they reach the rate (None: no confirmation)
    :param confirmations: where confirmation results are appended (default a new list)
    :param training_success: the recent training episodes' success rate (None: none yet); while it is
        :data:`EVAL_GATE_MARGIN` or more under ``target``, only every :data:`EVAL_GATE_STRIDE`-th evaluation
        runs (None: every one)
    """

    def __init__(
        self,
        eval_env: Any,
        every: int,
        target: float | None,
        episodes: int,
        history: list[dict[str, float]] | None = None,
        confirm: tuple[float, int, Callable[[], Any]] | None = None,
        confirmations: list[dict[str, float]] | None = None,
        training_success: Callable[[], float | None] | None = None,
    ) -> None:
        super().__init__(every)
        self.eval_env, self.target, self.episodes = eval_env, target, episodes
        self.history = history if history is not None else []
        self.confirm = confirm
        self.confirmations = confirmations if confirmations is not None else []
        self.training_success = training_success
        self._confirm_env: Any = None
        self.seconds = 0.0
        self.skipped = 0
        self.reached = False

    def _on_step(self) -> bool:
        return not self.reached

    def _run(self) -> None:
        # which evaluation this is follows from the step count, so a resumed run skips the same ones
        if self.gated() and (self.next // self.every) % EVAL_GATE_STRIDE:
            self.skipped += 1
            return
        self.evaluate()

    def gated(self) -> bool:
        """The training episodes' success rate is :data:`EVAL_GATE_MARGIN` or more under the target: no
        evaluation could start an early stop, so most are skipped."""
        if self.target is None or self.training_success is None:
            return False
        rate = self.training_success()
        return rate is not None and rate < self.target - EVAL_GATE_MARGIN

    def evaluate(
        self,
        env: Any = None,
        episodes: int | None = None,
        record: bool = True,
        finals: list[dict[str, Any]] | None = None,
    ) -> dict[str, float]:
        """Run evaluation episodes now and return the result row.

        :param env: the vec env to evaluate on (default: the periodic eval env)
        :param episodes: how many episodes (default: ``episodes`` of the constructor)
        :param record: append the row to the history, log it and check the target
        :param finals: gets each episode's last success and reward terms (the final evaluation's diagnosis)
        """
        t = time.perf_counter()
        from stable_baselines3.common.vec_env import VecNormalize

        venv = self.model.get_env()
        norm = venv if isinstance(venv, VecNormalize) else None

        def act(obs: np.ndarray) -> np.ndarray:
            return self.model.predict(norm.normalize_obs(obs) if norm else obs, deterministic=True)[0]

        rate, ret, n = episode_success(env or self.eval_env, episodes or self.episodes, act, finals)
        row = {"step": int(self.model.num_timesteps), "success_rate": rate, "mean_return": ret, "episodes": n}
        self.seconds += time.perf_counter() - t
        if record:
            self.history.append(row)
            self.logger.record("eval/success_rate", rate)
            self.logger.record("eval/mean_return", ret)
            need = 2 + len(self.confirmations)  # every confirmation so far failed (a pass ends learning)
            recent = [h["success_rate"] for h in self._since_last_confirmation()[-need:]]
            if self.target is not None and len(recent) == need and min(recent) >= self.target:
                self.reached = self._confirmed()  # its evaluations count their own seconds
        return row

    def _since_last_confirmation(self) -> list[dict[str, float]]:
        """The periodic evaluations after the last confirmation (all of them before the first).

        A failed confirmation spends the evaluations that triggered it, and each one raises the bar: after ``n``
        failed ones the next needs ``2 + n`` new evaluations in a row at the target. Reusing the later of two
        (a high just proved an overestimate) confirmed on nearly every evaluation of a policy near the level: a
        Panda push run spent 468 s of its 20 minutes on five 1,024-episode confirmations, four of them in
        back-to-back pairs; with new pairs only, another spent 419 s of 12.8 minutes on eight. Read from the
        saved confirmations, so a resumed run keeps the rule."""
        if not self.confirmations:
            return self.history
        last = self.confirmations[-1]["step"]
        return [h for h in self.history if h["step"] > last]

    def _confirmed(self) -> bool:
        """The confirmation evaluation on fresh episodes (when configured) shows the target reached: the lower
        end of its rate's 95 % interval at ``train.confirm_success`` or above.

        The point rate is not enough: confirmations repeat until one passes, so a policy just under the level
        passes by luck. Three Panda push runs stopped on 1,024-episode confirmations of 90.8-91.8 % and then
        scored 87.5 %, 88.7 % and 92.2 % on their final 256 episodes."""
        if self.confirm is None:
            return True
        rate, episodes, make_env = self.confirm
        if self._confirm_env is None:
            self._confirm_env = make_env()  # CONFIRM_ROUND envs at most: each round resets them to fresh episodes
        need, successes, done, returns = needed_successes(rate, episodes), 0, 0, 0.0
        while not done or (done < episodes and not confirmation_hopeless(successes, done, episodes, need)):
            row = self.evaluate(self._confirm_env, min(episodes - done, self._confirm_env.num_envs), record=False)
            successes += round(row["success_rate"] * row["episodes"])
            returns += row["mean_return"] * row["episodes"]
            done += row["episodes"]
        row = {"step": int(self.model.num_timesteps), "success_rate": successes / done, "mean_return": returns / done}
        row |= {"episodes": done, "success_ci95": success_interval(successes, done)}
        self.confirmations.append(row)
        self.logger.record("eval/confirm_success_rate", row["success_rate"])
        return done == episodes and row["success_ci95"][0] >= rate


class TimeBudget(BaseCallback):
    """Ends learning once ``train.max_minutes`` of learning (across resumes) are spent; keeps the run state's
    ``learn_seconds`` current and tells a :class:`~embodied_ws.rl.ppo.LinearBudgetSchedule` the share spent.

    :param seconds: the budget in seconds (0: none, only the clock is kept)
    :param state: the run state (``learn_seconds`` before this process, updated as it runs)
    """

    def __init__(self, seconds: float, state: Any) -> None:
        super().__init__()
        self.seconds, self.state = seconds, state
        self.reached = False
        self._t0 = time.perf_counter()
        self._before = 0.0

    def _on_training_start(self) -> None:
        self._t0, self._before = time.perf_counter(), self.state.learn_seconds

    def _on_step(self) -> bool:
        self.state.learn_seconds = self._before + time.perf_counter() - self._t0
        if self.seconds and self.state.learn_seconds >= self.seconds:
            self.reached = True
            self._tell_schedule()  # the saved schedule says the budget is spent
        return not self.reached

    def _on_rollout_end(self) -> None:
        self._tell_schedule()

    def _tell_schedule(self) -> None:
        schedule = getattr(self.model, "learning_rate", None)
        if self.seconds and hasattr(schedule, "time_fraction"):
            schedule.time_fraction = min(1.0, self.state.learn_seconds / self.seconds)


def curriculum_scale(curriculum_steps: int, num_timesteps: int) -> float:
    """DR scale after ``num_timesteps`` env steps: linear from 0 to 1 over ``curriculum_steps`` (0: always 1).

    :param curriculum_steps: ``train.curriculum_steps``
    :param num_timesteps: env steps done
    """
    return 1.0 if not curriculum_steps else min(1.0, num_timesteps / curriculum_steps)


class StaggerEpisodes(BaseCallback):
    """At the start of training, spread the training envs' episodes over the episode length (each env's first
    episode starts a random number of steps in), for an arm that cannot follow its set-points.

    All envs reset together, and without early ends their episodes stay in step: with such an arm's long
    episodes (the damped Panda: 282 steps, 4.4 rollouts of ``ppo.n_steps`` 64) each PPO update then learns from
    one phase of every episode only, all reaching or all holding. Spread, every update sees all phases (the
    damped Panda, 1.5 M steps: see the issue-21 report). Arms that follow their set-points are left as they are,
    and so is a backend whose vec env has no ``stagger_episodes`` (only the MuJoCo batch has it).

    :param venv: the training vec env (possibly wrapped)
    :param seed: seed of the offsets
    """

    def __init__(self, venv: Any, seed: int) -> None:
        super().__init__()
        self.venv, self.seed = venv, seed
        self.offsets: np.ndarray | None = None

    def _on_training_start(self) -> None:
        if getattr(getattr(self, "model", None), "num_timesteps", 0):  # resumed: envs are as the checkpoint left them
            return
        hooks = env_hooks(self.venv)
        stagger = getattr(hooks, "stagger_episodes", None)
        if stagger is None:
            return
        core = hooks.env_core()
        if core.io.lead is None:  # an arm that follows its set-points: unchanged
            return
        self.offsets = np.random.default_rng(self.seed).integers(0, core.episode_steps, hooks.num_envs)
        stagger(self.offsets)

    def _on_step(self) -> bool:
        return True


class Curriculum(BaseCallback):
    """Push the DR scale (:func:`curriculum_scale` of the step count) to the envs at each rollout start.

    :param steps: ``train.curriculum_steps``
    :param envs: vec envs implementing :class:`EnvHooks` (possibly wrapped)
    """

    def __init__(self, steps: int, envs: list[Any]) -> None:
        super().__init__()
        self.steps, self.envs = steps, envs

    def _on_training_start(self) -> None:
        self._push()

    def _on_step(self) -> bool:
        return True

    def _on_rollout_start(self) -> None:
        self._push()

    def _push(self) -> None:
        scale = curriculum_scale(self.steps, self.model.num_timesteps)
        for venv in self.envs:
            env_hooks(venv).set_dr_scale(scale)


#: training episodes in the recent success rate (progress line, evaluation gate): SB3's own window
RECENT_EPISODES = 100


class RecordEpisodes(BaseCallback):
    """Record every finished training episode and physics reset into the run state.

    :param state: the run state (``episodes``, ``physics_resets``) this writes into
    """

    def __init__(self, state: Any) -> None:
        super().__init__()
        self.state = state

    def success_rate(self) -> float | None:
        """The success rate of the last :data:`RECENT_EPISODES` training episodes (run state: a resumed run
        keeps them; None before the first episode ends)."""
        recent = self.state.recent_success
        return sum(recent) / len(recent) if recent else None

    def _on_step(self) -> bool:
        for done, info in zip(self.locals["dones"], self.locals["infos"], strict=True):
            if done:
                recent = self.state.recent_success
                recent.append(int(bool(info.get("is_success", False))))
                del recent[:-RECENT_EPISODES]
                if "episode" in info:
                    self.state.episodes.append((self.num_timesteps, round(float(info["episode"]["r"]), 4)))
                if info.get("physics_reset"):
                    self.state.physics_resets += 1
        return True


class TrainProgress(BaseCallback):
    """Training progress over the step budget with recent episode success and the latest eval (reports only).

    A rich bar on a terminal, a plain line every 30 s otherwise (:class:`~embodied_ws.core.progress.ProgressReporter`),
    and the same lines appended to the run's ``train.log``.

    :param total: the step budget
    :param state: the run state (latest evaluation)
    :param episodes: the episode recorder (recent success)
    :param enabled: report progress at all
    :param log_file: where the plain lines are also appended
    """

    def __init__(
        self, total: int, state: Any, episodes: RecordEpisodes, enabled: bool = True, log_file: Path | None = None
    ) -> None:
        super().__init__()
        from embodied_ws.core.progress import ProgressReporter

        self.state, self.episodes = state, episodes
        self.reporter = ProgressReporter("train", total, "steps", enabled=enabled, log_file=log_file)
        self._started = False

    def _on_training_start(self) -> None:
        self.reporter.start(int(self.model.num_timesteps))
        self._started = True

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        rate = self.episodes.success_rate()
        stats = f"succ {rate:.0%}" if rate is not None else ""
        if self.state.evals:
            stats += f" | eval {self.state.evals[-1]['success_rate']:.0%}"
        self.reporter.update(int(self.model.num_timesteps), stats.strip(" |"))

    def _on_training_end(self) -> None:
        self.close()

    def close(self) -> None:
        """Final line and bar stop (idempotent; also called when training stops on an error)."""
        if self._started:
            self.reporter.update(int(self.model.num_timesteps), self.reporter.stats)
            self.reporter.close()
            self._started = False

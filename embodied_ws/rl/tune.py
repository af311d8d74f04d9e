"""``embodied-ws tune``: Optuna search over PPO hyperparameters and the task's reward-term weights.

Each trial trains PPO on the configured robot/task with sampled values (``--set``-style dotted config
keys) for a small step budget, evaluates the deterministic policy every ``eval_every`` steps on
separate envs with DR on (success rate: the one metric that does not move when the reward weights do),
reports each evaluation to Optuna, and is pruned when it falls behind (median pruner). Trials run in
parallel worker processes, or as Ray tasks on a cluster, sharing one Optuna journal file in the study
folder. The study folder gets ``best.yaml`` (the base config with the best values: ``embodied-ws train
--config`` takes it), ``importance.png``, ``results.json`` and the journal.

Search space YAML: one entry per dotted config key::

    ppo.learning_rate: {low: 1.0e-4, high: 1.0e-3, log: true}
    ppo.n_steps: {choices: [32, 64, 128]}
    task.success_bonus: {low: 0.0, high: 1.0}
    ppo.n_epochs: {low: 3, high: 10, int: true}
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embodied_ws.core.errors import ConfigError, UserError

#: PPO hyperparameters searched by default
DEFAULT_PPO_SPACE: dict[str, dict[str, Any]] = {
    "ppo.learning_rate": {"low": 1e-4, "high": 2e-3, "log": True},
    "ppo.n_steps": {"choices": [32, 64, 128]},
    "ppo.gamma": {"low": 0.9, "high": 0.995},
    "ppo.ent_coef": {"low": 1e-5, "high": 1e-2, "log": True},
    "ppo.clip_range": {"low": 0.1, "high": 0.3},
}
#: reward-term weights searched by default, per task (a task whose reward has no weights adds none)
DEFAULT_REWARD_SPACE: dict[str, dict[str, dict[str, Any]]] = {
    "reach": {
        "task.distance_weight": {"low": 0.25, "high": 2.0},
        "task.velocity_weight": {"low": 1e-4, "high": 1e-2, "log": True},
        "task.success_bonus": {"low": 0.0, "high": 1.0},
        "task.precision_weight": {"low": 0.0, "high": 2.0},
    },
}
_SPEC_KEYS = {"low", "high", "log", "int", "step", "choices"}


@dataclass(frozen=True)
class Param:
    """One searched config key.

    :param key: dotted config key (``ppo.learning_rate``)
    :param low: lower bound (numeric ranges)
    :param high: upper bound
    :param log: sample on a log scale
    :param is_int: integer range
    :param choices: categorical values (instead of a range)
    """

    key: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    is_int: bool = False
    choices: list[Any] = field(default_factory=list)

    def suggest(self, trial: Any) -> Any:
        """Draw this parameter's value for an Optuna trial."""
        if self.choices:
            return trial.suggest_categorical(self.key, self.choices)
        if self.is_int:
            return trial.suggest_int(self.key, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.key, float(self.low), float(self.high), log=self.log)


def _check_key(key: str, value: Any, where: str) -> None:
    """The key must be a config field that accepts ``value`` (checked with the real loader)."""
    from embodied_ws.config.loader import load_config

    try:
        load_config(None, [f"{key}={value!r}" if isinstance(value, str) else f"{key}={value}"])
    except ConfigError as exc:
        if "must be >" in exc.what or "must be in" in exc.what:
            raise ConfigError(f"{key}: value {value!r} is out of range ({exc.what})", where) from None
        raise ConfigError(f"{key}: {exc.what}", where) from None


def _number(v: Any) -> Any:
    """YAML 1.1 reads ``1e-3`` (no dot) as a string: accept it as the number it means."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def parse_space(data: Any, source: str, lines: dict[str, int] | None = None) -> list[Param]:
    """Validate a search space mapping; bad entries raise a one-line :class:`ConfigError`.

    :param data: ``{dotted.key: {low, high, log, int} | {choices: [...]}}``
    :param source: file name for the error lines
    :param lines: ``{key: line}`` from :func:`embodied_ws.config.loader.read_yaml`
    """
    lines = lines or {}

    def where(key: str) -> str:
        return f"{source}:{lines[key]}" if key in lines else f"{source}:{key}"

    if not isinstance(data, dict) or not data:
        raise ConfigError("a search space is a non-empty mapping of config keys to ranges", source)
    params = []
    for key, spec in data.items():
        w = where(str(key))
        if not isinstance(spec, dict):
            raise ConfigError(f"{key}: expected {{low, high}} or {{choices: [...]}}, got {spec!r}", w)
        unknown = set(spec) - _SPEC_KEYS
        if unknown:
            raise ConfigError(f"{key}: unknown field(s) {sorted(unknown)} (expected: {sorted(_SPEC_KEYS)})", w)
        if "choices" in spec:
            choices = spec["choices"]
            if not isinstance(choices, list) or not choices:
                raise ConfigError(f"{key}: choices must be a non-empty list", w)
            for c in choices:
                _check_key(str(key), c, w)
            params.append(Param(str(key), choices=list(choices)))
            continue
        low, high = _number(spec.get("low")), _number(spec.get("high"))
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)):
            raise ConfigError(f"{key}: low and high must be numbers, got low={low!r} high={high!r}", w)
        if not low < high:
            raise ConfigError(f"{key}: low must be < high, got low={low} high={high}", w)
        if spec.get("log") and low <= 0:
            raise ConfigError(f"{key}: a log range needs low > 0, got low={low}", w)
        is_int = bool(spec.get("int"))
        for v in (low, high):
            _check_key(str(key), int(v) if is_int else float(v), w)
        params.append(Param(str(key), float(low), float(high), bool(spec.get("log")), is_int))
    return params


def load_space(path: str | None, task: str) -> list[Param]:
    """The search space from a YAML file, or the default one for ``task`` (PPO + its reward weights)."""
    if path is None:
        return parse_space({**DEFAULT_PPO_SPACE, **DEFAULT_REWARD_SPACE.get(task, {})}, "default search space")
    from embodied_ws.config.loader import read_yaml

    data, lines = read_yaml(Path(path))
    return parse_space(data, path, lines)


@dataclass
class TuneJob:
    """Everything a worker needs to run trials (picklable for processes and Ray).

    :param base_config: base config preset or YAML path
    :param overrides: ``--set`` overrides of the base config
    :param params: the search space
    :param steps: env steps per trial
    :param eval_every: env steps between evaluations (pruning points)
    :param eval_episodes: episodes per evaluation
    :param storage: Optuna journal file
    :param study: study name
    :param seed: sampler seed
    """

    base_config: str | None
    overrides: list[str]
    params: list[Param]
    steps: int
    eval_every: int
    eval_episodes: int
    storage: str
    study: str
    seed: int


def trial_overrides(job: TuneJob, values: dict[str, Any]) -> list[str]:
    """``--set`` overrides of a trial: the job's, the sampled values, and the trial budget."""
    sampled = [f"{k}={v}" for k, v in values.items()]
    budget = [f"train.total_timesteps={job.steps}", f"train.eval_every={job.eval_every}"]
    budget += [f"train.eval_episodes={job.eval_episodes}", "train.target_success=null"]
    return [*job.overrides, *sampled, *budget]


def run_trial(job: TuneJob, trial: Any) -> float:
    """Train one trial; returns its last evaluation success rate (raises ``TrialPruned`` when pruned)."""
    import optuna
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    from embodied_ws.config.loader import load_config, load_dr
    from embodied_ws.rl.backends import make_vec_env
    from embodied_ws.rl.callbacks import EvalSuccess
    from embodied_ws.rl.ppo import make_training_env, ppo_kwargs

    torch.set_num_threads(1)
    values = {p.key: p.suggest(trial) for p in job.params}
    cfg = load_config(job.base_config, trial_overrides(job, values))
    cfg.ppo.batch_size = min(cfg.ppo.batch_size, cfg.ppo.n_steps * cfg.train.n_envs)
    dr = load_dr(cfg.dr)
    venv, _ = make_training_env(cfg, dr)
    eval_env = make_vec_env(cfg, dr, cfg.train.eval_episodes, cfg.train.seed + 10_000, "mujoco")
    evals = EvalSuccess(eval_env, cfg.train.eval_every, None, cfg.train.eval_episodes)

    class Report(BaseCallback):
        """Report each new evaluation to Optuna; stop training when the pruner says so."""

        pruned = False

        def _on_step(self) -> bool:
            return not self.pruned

        def _on_rollout_end(self) -> None:
            if len(evals.history) > len(trial_reported):
                row = evals.history[-1]
                trial_reported.append(row)
                trial.report(row["success_rate"], row["step"])
                self.pruned = trial.should_prune()

    trial_reported: list[dict[str, Any]] = []
    report = Report()
    model = PPO(env=venv, **ppo_kwargs(cfg))
    try:
        model.learn(cfg.train.total_timesteps, callback=[evals, report])
        if report.pruned:
            raise optuna.TrialPruned(f"pruned at step {trial_reported[-1]['step']}")
        if not evals.history or evals.history[-1]["step"] < model.num_timesteps:
            evals.model = model
            evals.evaluate()
        return float(evals.history[-1]["success_rate"])
    finally:
        venv.close()
        eval_env.close()


def storage_for(path: str) -> Any:
    """The Optuna journal storage in ``path`` (shared by every worker of a study)."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(path))


def work(job: TuneJob, n_trials: int, worker: int) -> int:
    """A worker: run ``n_trials`` trials of the study (a process or a Ray task); returns trials run."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=job.seed + worker)
    study = optuna.load_study(study_name=job.study, storage=storage_for(job.storage), sampler=sampler)
    study.optimize(lambda t: run_trial(job, t), n_trials=n_trials, catch=(ValueError, FloatingPointError))
    return n_trials


def shares(trials: int, jobs: int) -> list[int]:
    """Split ``trials`` over ``jobs`` workers (no empty worker)."""
    jobs = max(1, min(jobs, trials))
    return [trials // jobs + (1 if i < trials % jobs else 0) for i in range(jobs)]


def run_workers(job: TuneJob, trials: int, jobs: int, use_ray: bool, ray_address: str | None, tick: Any) -> None:
    """Run the trials over ``jobs`` workers (processes, or Ray tasks); ``tick()`` is called while waiting."""
    parts = shares(trials, jobs)
    if use_ray:
        from embodied_ws.rl.ray_vec import _ray, connect

        ray = _ray()
        owns = connect(ray_address)
        remote = ray.remote(num_cpus=1)(work)
        pending = [remote.remote(job, n, i) for i, n in enumerate(parts)]
        try:
            while pending:
                _, pending = ray.wait(pending, timeout=0.5)
                tick()
        finally:
            if owns:
                ray.shutdown()
        return
    if len(parts) == 1:
        work(job, parts[0], 0)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, wait

    with ProcessPoolExecutor(len(parts), mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(work, job, n, i) for i, n in enumerate(parts)]
        while not all(f.done() for f in futures):
            wait(futures, timeout=0.5)
            tick()
        for f in futures:
            f.result()


def best_config(job: TuneJob, best_params: dict[str, Any]) -> dict[str, Any]:
    """The base config (its own budget) with the best values, as a plain dict for ``best.yaml``."""
    from embodied_ws.config.loader import load_config, to_dict

    cfg = load_config(job.base_config, [*job.overrides, *(f"{k}={v}" for k, v in best_params.items())])
    return to_dict(cfg)


def importance_png(study: Any, path: Path) -> dict[str, float]:
    """Parameter importances (Optuna's fANOVA) as a bar chart; empty when the trials do not vary."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna

    try:
        imp = optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError, ZeroDivisionError):
        imp = {}
    imp = {k: (0.0 if math.isnan(v) else float(v)) for k, v in imp.items()}
    fig, ax = plt.subplots(figsize=(6, 0.4 * max(len(imp), 3) + 1.2), dpi=100)
    names = list(imp)[::-1]
    ax.barh(names, [imp[n] for n in names])
    ax.set_xlabel("importance (fANOVA) for evaluation success")
    ax.set_title("Which settings mattered" if imp else "Which settings mattered (no variation across trials)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return imp


def tune(
    job: TuneJob,
    out_dir: Path,
    trials: int,
    jobs: int = 1,
    use_ray: bool = False,
    ray_address: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the study and write ``best.yaml``, ``importance.png`` and ``results.json`` into ``out_dir``.

    :param trials: trials in all
    :param jobs: parallel workers
    :param use_ray: run workers as Ray tasks (one CPU each) instead of local processes
    :param ray_address: Ray cluster to join (None: a local one)
    :param progress: show a rich progress bar
    """
    import optuna
    import yaml

    from embodied_ws.core.atomic import write_bytes_atomic, write_json_atomic

    out_dir.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
    study = optuna.create_study(
        study_name=job.study,
        storage=storage_for(job.storage),
        direction="maximize",
        pruner=pruner,
        load_if_exists=True,
    )
    done_before = len(study.get_trials(deepcopy=False))
    bar = _Bar(trials, enabled=progress)

    def tick() -> None:
        bar.update(study.get_trials(deepcopy=False)[done_before:])

    t0 = time.perf_counter()
    try:
        if jobs == 1 and not use_ray:
            study.sampler = optuna.samplers.TPESampler(seed=job.seed)
            study.optimize(
                lambda t: run_trial(job, t),
                n_trials=trials,
                callbacks=[lambda s, _t: tick()],
                catch=(ValueError, FloatingPointError),
            )
        else:
            run_workers(job, trials, jobs, use_ray, ray_address, tick)
        tick()
    finally:
        bar.close()
    rows = [_row(t) for t in study.get_trials(deepcopy=False)]
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        raise UserError("no trial completed (all pruned or failed); widen the space or raise --steps", str(out_dir))
    best = study.best_trial
    cfg = best_config(job, best.params)
    write_bytes_atomic(out_dir / "best.yaml", yaml.safe_dump(cfg, sort_keys=False).encode())
    imp = importance_png(study, out_dir / "importance.png")
    result = {
        "study": job.study,
        "trials": rows,
        "best_value": best.value,
        "best_params": best.params,
        "best_trial": best.number,
        "pruned": sum(r["state"] == "PRUNED" for r in rows),
        "importance": imp,
        "config": str(out_dir / "best.yaml"),
        "importance_png": str(out_dir / "importance.png"),
        "seconds": time.perf_counter() - t0,
        "workers": len(shares(trials, jobs)),
        "on_ray": use_ray,
    }
    write_json_atomic(out_dir / "results.json", result)
    return result


def _row(t: Any) -> dict[str, Any]:
    steps = max(t.intermediate_values) if t.intermediate_values else None
    return {"number": t.number, "state": t.state.name, "value": t.value, "last_step": steps, "params": t.params}


class _Bar:
    """Progress over finished trials (complete / pruned / failed): a bar on a TTY, plain lines otherwise."""

    def __init__(self, total: int, enabled: bool) -> None:
        from embodied_ws.core.progress import ProgressReporter

        self._reporter = ProgressReporter("tune", total, "trials", enabled=enabled)
        self._reporter.start()

    def update(self, trials: list[Any]) -> None:
        finished = [t for t in trials if t.state.is_finished()]
        values = [t.value for t in finished if t.value is not None]
        pruned = sum(t.state.name == "PRUNED" for t in finished)
        stats = f"best {max(values):.0%} | pruned {pruned}" if values else f"pruned {pruned}"
        self._reporter.update(len(finished), stats)

    def close(self) -> None:
        self._reporter.close()


def default_jobs() -> int:
    """One worker per core, at most four."""
    return max(1, min(4, os.cpu_count() or 1))

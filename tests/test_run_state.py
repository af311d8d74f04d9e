"""TrainingRun: run state saved and restored as one piece; envs closed on every exit path."""

from __future__ import annotations

import json
from pathlib import Path

import mujoco
import numpy as np
import pytest
from stable_baselines3.common.callbacks import BaseCallback

from embodied_ws.config.loader import load_config
from embodied_ws.core.errors import UserError
from embodied_ws.rl import callbacks as cb
from embodied_ws.rl.backends import env_hooks
from embodied_ws.rl.run import TrainingRun

# DR without actuator parameters, so the servo sabotage below survives every episode's DR draw
DR = "dr={enabled: true, params: {body_mass: {dist: uniform, range: [0.8, 1.2], mode: scale}}}"
SETS = [
    DR,
    "train.n_envs=4",
    "ppo.n_steps=32",
    "ppo.batch_size=64",
    "ppo.n_epochs=1",
    "train.eval_every=128",
    "train.eval_episodes=4",
    "train.checkpoint_every=0",
    "train.curriculum_steps=2048",
    "train.final_eval_episodes=0",
    "train.target_success=null",
]


def _unstable(run: TrainingRun) -> None:
    """Servo gains of 1e12 without force limits on training env 0: MuJoCo blows up, the env is reset."""
    m = env_hooks(run.venv).env_core().models[0]
    m.actuator_gainprm[:, 0] = 1e12
    m.actuator_biasprm[:, 1] = -1e12
    m.actuator_forcelimited[:] = 0
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER


def _snapshot(run: TrainingRun) -> dict:
    return json.loads(
        json.dumps(
            {
                "step": int(run.model.num_timesteps),
                "curriculum_scale": run.curriculum_scale,
                "episodes": run.state.episodes,
                "evals": run.state.evals,
                "physics_resets": run.state.physics_resets,
                "recent_success": run.state.recent_success,
                "env": env_hooks(run.venv).get_env_state(),
                "obs_mean": run.venv.obs_rms.mean.tolist(),
            }
        )
    )


@pytest.mark.slow
def test_resumed_run_has_the_interrupted_runs_state(tmp_path: Path) -> None:
    cfg = load_config("reach", [*SETS, "train.total_timesteps=512"])
    with TrainingRun(cfg, "r", tmp_path, progress=False) as run:
        _unstable(run)
        assert run.learn() is False
        run.save()
        before = _snapshot(run)
    assert before["physics_resets"] > 0 and before["episodes"] and len(before["evals"]) == 4
    assert len(before["recent_success"]) == min(len(before["episodes"]), 100)
    # the curriculum pushes its scale to the envs at each rollout start: the last one began at step 384
    assert before["curriculum_scale"] == 512 / 2048
    assert {d["scale"] for d in before["env"]["streams"]["dr"]} == {384 / 2048}

    more = load_config("reach", [*SETS, "train.total_timesteps=640"])
    with TrainingRun(more, "r", tmp_path, resume=True, progress=False) as again:
        assert _snapshot(again) == before
        again.learn()
        assert again.state.episodes[: len(before["episodes"])] == [tuple(e) for e in before["episodes"]]
        assert len(again.state.evals) == 5 and again.model.num_timesteps == 640


class _Boom(BaseCallback):
    def _on_step(self) -> bool:
        raise RuntimeError("boom")


def test_envs_are_closed_on_every_exit_path(tmp_path: Path) -> None:
    cfg = load_config("reach", [*SETS, "train.total_timesteps=128"])
    run = TrainingRun(cfg, "r", tmp_path, progress=False)
    with pytest.raises(RuntimeError, match="boom"), run:
        run.learn([_Boom()])
    assert run.venv.unwrapped.closed and run.eval_env.closed

    with TrainingRun(cfg, "ok", tmp_path, progress=False) as done:
        done.learn()
        done.save()
    assert done.venv.unwrapped.closed

    other = load_config("reach", [*SETS, "train.total_timesteps=256", "train.n_envs=2"])
    resumed = TrainingRun(other, "ok", tmp_path, resume=True, progress=False)
    with (
        pytest.raises(UserError, match="saved env state is batched with 4 envs, these envs are batched with 2"),
        resumed,
    ):
        pass
    assert resumed.venv.unwrapped.closed and resumed.eval_env.closed
    assert np.isfinite(done.venv.obs_rms.mean).all()


@pytest.mark.parametrize(("confirm", "stops"), [(1.0, False), (0.0, True)])
def test_early_stop_waits_for_the_confirmation_on_fresh_episodes(tmp_path: Path, confirm: float, stops: bool) -> None:
    """Two periodic evaluations at the target trigger a confirmation on fresh episodes (full DR); learning stops
    only if it reaches ``train.confirm_success`` (an untrained policy reaches 0.0, never 1.0); after ``n`` failed
    ones, the next waits for ``2 + n`` new evaluations at the target."""
    sets = [s for s in SETS if not s.startswith(("train.target_success", "train.final_eval_episodes"))]
    sets += ["train.target_success=0.0", f"train.confirm_success={confirm}", "train.confirm_episodes=6"]
    sets += ["train.total_timesteps=768"]
    with TrainingRun(load_config("reach", sets), "confirm", tmp_path, progress=False) as run:
        run.learn()
        confirmations = run.state.confirmations
        assert confirmations and all(c["episodes"] == 6 for c in confirmations)
        if stops:
            assert run.stopped == "target success" and len(confirmations) == 1 and run.model.num_timesteps < 768
        else:  # none confirms; each failed one spends its evaluations and asks one more: after 2, 3, 4 ... new
            evals, ends = run.state.evals, []
            while (ends[-1] if ends else -1) + 2 + len(ends) < len(evals):
                ends.append((ends[-1] if ends else -1) + 2 + len(ends))
            assert run.stopped == "step budget" and len(ends) >= 2
            assert [c["step"] for c in confirmations] == [evals[i]["step"] for i in ends]
            assert all(c["success_rate"] < 1.0 for c in confirmations)


@pytest.mark.parametrize(("confirm", "stops"), [(0.9, False), (0.6, True)])
def test_a_confirmation_counts_by_the_low_end_of_its_interval(tmp_path: Path, confirm: float, stops: bool) -> None:
    """Every episode a success (a 100-m success radius): 6 of 6 is a rate of 1.0 whose 95 % interval starts at
    0.61, so it confirms 0.6 and not 0.9 (confirmations repeat until one passes: a point rate over the level
    would let a policy just under it stop by luck)."""
    sets = [s for s in SETS if not s.startswith(("train.target_success", "train.final_eval_episodes"))]
    sets += ["train.target_success=0.0", f"train.confirm_success={confirm}", "train.confirm_episodes=6"]
    sets += ["train.total_timesteps=768", "task.success_threshold=100"]
    with TrainingRun(load_config("reach", sets), "confirm_ci", tmp_path, progress=False) as run:
        run.learn()
        confirmations = run.state.confirmations
        assert confirmations and all(c["success_rate"] == 1.0 for c in confirmations)
        assert confirmations[0]["success_ci95"][0] == pytest.approx(0.61, abs=0.005)
        assert run.stopped == ("target success" if stops else "step budget")


# the evaluation gate and the confirmation's rounds (evaluation cost; the counts: tests/test_eval_gate.py)
GATE_SETS = [*SETS, "dr=none", "train.total_timesteps=1024"]


def _scheduled(total: int, every: int, rollout: int) -> list[int]:
    """Steps of the rollout ends at which :class:`_EveryNSteps` runs (each multiple of ``every``)."""
    return [s for s in range(rollout, total + 1, rollout) if s % every == 0]


def test_evaluations_are_skipped_while_the_training_success_is_far_under_the_target(tmp_path: Path) -> None:
    """An untrained reach policy (training success 0, target 0.9): after the first finished training episode
    only every fourth evaluation runs; with no target (nothing can stop early) every one runs."""
    gated = load_config("reach", [*GATE_SETS, "train.target_success=0.9"])
    with TrainingRun(gated, "gated", tmp_path, progress=False) as run:
        run.learn()
        steps = [e["step"] for e in run.state.evals]
        assert run.state.recent_success and sum(run.state.recent_success) == 0
        every = 128 * cb.EVAL_GATE_STRIDE
        assert steps and all(s % every == 0 for s in steps if s > 256)
        assert run._evals.skipped == len(_scheduled(1024, 128, 128)) - len(steps) > 0

    free = load_config("reach", [*GATE_SETS, "train.target_success=null"])
    with TrainingRun(free, "free", tmp_path, progress=False) as run:
        run.learn()
        assert [e["step"] for e in run.state.evals] == _scheduled(1024, 128, 128)
        assert run._evals.skipped == 0


def test_a_confirmation_runs_in_rounds_and_stops_once_it_cannot_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rounds of 4 fresh episodes out of 12: an untrained policy (0 of 4) fails after its first round; with a
    100-m success radius every episode succeeds and all three rounds run (12 of 12 confirms 0.7)."""
    assert cb.needed_successes(0.7, 12) == 12
    monkeypatch.setattr(cb, "CONFIRM_ROUND", 4)
    sets = [*GATE_SETS, "train.target_success=0.0", "train.confirm_episodes=12"]
    with TrainingRun(
        load_config("reach", [*sets, "train.confirm_success=0.7"]), "fail", tmp_path, progress=False
    ) as run:
        run.learn()
        confirmations = run.state.confirmations
        assert confirmations and all(c["episodes"] == 4 and c["success_rate"] == 0.0 for c in confirmations)
        assert run.stopped == "step budget"
    sure = [*sets, "train.confirm_success=0.7", "task.success_threshold=100"]
    with TrainingRun(load_config("reach", sure), "pass", tmp_path, progress=False) as run:
        run.learn()
        assert [(c["episodes"], c["success_rate"]) for c in run.state.confirmations] == [(12, 1.0)]
        assert run.stopped == "target success"

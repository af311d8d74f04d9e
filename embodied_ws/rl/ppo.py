"""PPO pieces shared by the training run and ``bench/train_throughput.py``: device, hyperparameters, env stack."""

from __future__ import annotations

from typing import Any

from embodied_ws.config.schema import RunConfig
from embodied_ws.core.gpu import choose_torch_device
from embodied_ws.rl.backends import make_vec_env
from embodied_ws.rl.vec import VecTimer


def resolve_device(device: str, image_policy: bool = False) -> str:
    """``ppo.device`` → a torch device (:func:`embodied_ws.core.gpu.choose_torch_device`).

    ``auto`` keeps MLP policies on the CPU (faster than a GPU for small networks, SB3's own advice) and puts
    image policies on CUDA when there is a GPU.

    :param device: ``auto``, ``cpu``, ``cuda``, ``cuda:1`` ...
    :param image_policy: the policy sees camera images (``env.camera_obs``)
    """
    return choose_torch_device(device, image_policy)


class LinearBudgetSchedule:
    """Learning rate falling linearly to 0 over whichever budget is spent faster: env steps or wall-clock time.

    SB3's ``LinearSchedule`` sees only the step progress it is called with; :class:`~embodied_ws.rl.callbacks.
    TimeBudget` sets :attr:`time_fraction` (the share of ``train.max_minutes`` spent) at each rollout end, so a
    run that its time budget ends has annealed too. A plain object with float attributes: it pickles with the model.

    :param initial: learning rate at the start
    """

    def __init__(self, initial: float) -> None:
        self.initial = initial
        self.time_fraction = 0.0

    def __call__(self, progress_remaining: float) -> float:
        """Learning rate at ``progress_remaining`` (1 → 0 over the step budget, as SB3 passes it)."""
        return self.initial * max(0.0, min(progress_remaining, 1.0 - self.time_fraction))


def ppo_kwargs(cfg: RunConfig) -> dict[str, Any]:
    """PPO constructor arguments from the ``ppo`` section (shared with ``bench/train_throughput.py``).

    :param cfg: run configuration
    """
    p = cfg.ppo
    lr: Any = p.learning_rate
    if p.lr_schedule == "linear":
        lr = LinearBudgetSchedule(p.learning_rate)
    return {
        "learning_rate": lr,
        "n_steps": p.n_steps,
        "batch_size": p.batch_size,
        "n_epochs": p.n_epochs,
        "gamma": p.gamma,
        "gae_lambda": p.gae_lambda,
        "clip_range": p.clip_range,
        "ent_coef": p.ent_coef,
        "vf_coef": p.vf_coef,
        "max_grad_norm": p.max_grad_norm,
        "policy_kwargs": {"net_arch": list(p.net_arch), "log_std_init": p.log_std_init},
        "device": resolve_device(p.device, cfg.env.camera_obs),
        "seed": cfg.train.seed,
        "verbose": 0,
    }


def make_training_env(cfg: RunConfig, dr: Any) -> tuple[Any, VecTimer]:
    """Training vec env: backend envs → timer → VecMonitor → VecNormalize (observations, and rewards when
    ``train.normalize_reward``).

    :param cfg: run configuration (``train.vec_env`` picks the backend)
    :param dr: DR spec
    :returns: ``(outermost vec env, the timer)``; closing the outermost closes the backend's envs
    """
    from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

    timer = VecTimer(make_vec_env(cfg, dr, cfg.train.n_envs, cfg.train.seed))
    venv: Any = VecMonitor(timer)
    if cfg.train.normalize_obs or cfg.train.normalize_reward:
        venv = VecNormalize(
            venv, norm_obs=cfg.train.normalize_obs, norm_reward=cfg.train.normalize_reward, gamma=cfg.ppo.gamma
        )
    return venv, timer

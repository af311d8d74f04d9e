"""PPO pieces shared by the training run and ``bench/train_throughput.py``: device, hyperparameters, env stack."""

from __future__ import annotations

from typing import Any

import torch
from stable_baselines3.common.policies import ActorCriticPolicy

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


#: parameter-name prefixes of the value function's own parameters (everything else is the policy's)
VALUE_PREFIXES = ("value_net.", "mlp_extractor.value_net.", "vf_features_extractor.")


class GroupClipAdam(torch.optim.Adam):
    """Adam that clips each parameter group's gradient norm to the group's own ``max_grad_norm`` first.

    SB3 clips the global norm of all gradients together; with raw (unnormalised) returns the value loss's
    gradient dominates that norm and the clip shrinks the policy's gradient with it (a Panda push run at
    2.4 M steps: by 0.003). Clipping the policy and the value function separately keeps each one's step its
    own. Torch has no per-group clip in its optimizers, hence this ten-line subclass.
    """

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """Clip each group's gradients to its ``max_grad_norm``, then take Adam's step."""
        for group in self.param_groups:
            torch.nn.utils.clip_grad_norm_(group["params"], group["max_grad_norm"])
        return super().step(closure)


class SplitClipPolicy(ActorCriticPolicy):
    """SB3's ``MlpPolicy`` with :class:`GroupClipAdam`: the policy's and the value function's gradients are
    clipped each to ``max_grad_norm`` (``ppo.grad_clip: per_net``; PPO's own global clip is then off).

    :param max_grad_norm: the clip of each group
    """

    def __init__(self, *args: Any, max_grad_norm: float = 0.5, **kwargs: Any) -> None:
        self.max_grad_norm = max_grad_norm  # read by _build, which ActorCriticPolicy.__init__ calls
        super().__init__(*args, **kwargs)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        named = list(self.named_parameters())
        value = [p for n, p in named if n.startswith(VALUE_PREFIXES)]
        policy = [p for n, p in named if not n.startswith(VALUE_PREFIXES)]
        groups = [{"params": ps, "max_grad_norm": self.max_grad_norm} for ps in (policy, value) if ps]
        self.optimizer = GroupClipAdam(groups, lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "max_grad_norm": self.max_grad_norm}


def ppo_kwargs(cfg: RunConfig) -> dict[str, Any]:
    """PPO constructor arguments from the ``ppo`` section, the policy included: ``PPO(env=venv, **ppo_kwargs(cfg))``
    (shared with ``tune`` and the benches).

    :param cfg: run configuration
    """
    p = cfg.ppo
    lr: Any = p.learning_rate
    if p.lr_schedule == "linear":
        lr = LinearBudgetSchedule(p.learning_rate)
    policy_kwargs: dict[str, Any] = {"net_arch": list(p.net_arch), "log_std_init": p.log_std_init}
    max_grad_norm = p.max_grad_norm
    policy: Any = "MlpPolicy"
    if p.grad_clip == "per_net":
        policy, policy_kwargs["max_grad_norm"], max_grad_norm = SplitClipPolicy, p.max_grad_norm, float("inf")
    return {
        "policy": policy,
        "learning_rate": lr,
        "n_steps": p.n_steps,
        "batch_size": p.batch_size,
        "n_epochs": p.n_epochs,
        "gamma": p.gamma,
        "gae_lambda": p.gae_lambda,
        "clip_range": p.clip_range,
        "ent_coef": p.ent_coef,
        "vf_coef": p.vf_coef,
        "max_grad_norm": max_grad_norm,
        "policy_kwargs": policy_kwargs,
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

"""LeRobot policies by name (``smolvla``, ``pi0``, ``act``) for a dataset, and LoRA through LeRobot's PEFT entry.

LeRobot makes the policy (``make_policy`` with the dataset's features) and its processors
(normalization with the dataset's stats, tokenizer, device); PEFT LoRA goes through
``PreTrainedPolicy.wrap_with_peft``, the entry point LeRobot's own trainer uses. A fresh policy has
no ``pretrained_path``, which ``wrap_with_peft`` requires, so it is saved once (``base/`` in the run
folder) and that path is set: adapters always refer to a base they can be reloaded on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from embodied_ws.config.schema import VLAConfig
from embodied_ws.core.registry import Registry

#: policy name → function(vla config, device) returning a fresh LeRobot policy config
POLICIES: Registry[Callable[[VLAConfig, str], Any]] = Registry("VLA policy")


@POLICIES.register("smolvla")
def smolvla_config(v: VLAConfig, device: str) -> Any:
    """SmolVLA: SmolVLM backbone + flow-matching action expert (LeRobot's ``SmolVLAConfig``)."""
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig

    return SmolVLAConfig(
        vlm_model_name=v.vlm_model_name,
        load_vlm_weights=v.load_vlm_weights,
        chunk_size=v.chunk_size,
        n_action_steps=v.n_action_steps,
        resize_imgs_with_padding=(v.image_size[1], v.image_size[0]),  # SmolVLA stores (width, height)
        device=device,
    )


@POLICIES.register("pi0")
def pi0_config(v: VLAConfig, device: str) -> Any:
    """π0 (PaliGemma backbone); in practice fine-tuned from ``--pretrained lerobot/pi0_base`` on a GPU."""
    from lerobot.policies.pi0.configuration_pi0 import PI0Config

    return PI0Config(chunk_size=v.chunk_size, n_action_steps=v.n_action_steps, device=device)


@POLICIES.register("act")
def act_config(v: VLAConfig, device: str) -> Any:
    """ACT: a non-VLA baseline trained from scratch (no language; ResNet-18 without downloaded weights)."""
    from lerobot.policies.act.configuration_act import ACTConfig

    return ACTConfig(
        chunk_size=v.chunk_size, n_action_steps=v.n_action_steps, pretrained_backbone_weights=None, device=device
    )


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when a GPU is visible, else ``cpu``."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def build_policy(v: VLAConfig, ds_meta: Any, device: str, base_dir: Path | None = None) -> tuple[Any, Any, Any]:
    """``(policy, preprocessor, postprocessor)`` for a dataset, on ``device``.

    With ``v.pretrained`` the policy loads from it (hub id or folder); otherwise a fresh one is built from
    :data:`POLICIES`. When LoRA is on and the policy has no checkpoint, it is saved to ``base_dir``.
    """
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    rename = dict(v.rename_map or {})
    if v.pretrained:
        cfg = PreTrainedConfig.from_pretrained(v.pretrained)
        cfg.pretrained_path = v.pretrained
        cfg.device = device
        cfg.use_peft = False  # a full policy to start from (an adapter is loaded with load_adapter)
    else:
        cfg = POLICIES.get(v.policy, "vla.policy")(v, device)
    policy = make_policy(cfg, ds_meta=ds_meta, rename_map=rename or None)
    if v.lora and not policy.config.pretrained_path:
        if base_dir is None:
            raise ValueError("a fresh policy needs base_dir to be saved before LoRA wrapping")
        base_dir = Path(base_dir).resolve()  # adapters refer to their base by this path
        policy.save_pretrained(base_dir)
        policy.config.pretrained_path = str(base_dir)
    if not v.pretrained:
        pre, post = make_pre_post_processors(policy.config, dataset_stats=ds_meta.stats)
        return policy, pre, post
    # a pretrained policy brings its processors (tokenizer, steps); normalize with this dataset's stats
    # and rename its cameras, as LeRobot's own trainer does
    pc = policy.config
    pre, post = make_pre_post_processors(
        pc,
        pretrained_path=v.pretrained,
        dataset_stats=ds_meta.stats,
        preprocessor_overrides={
            "device_processor": {"device": device},
            "normalizer_processor": {
                "features": {**pc.input_features, **pc.output_features},
                "norm_map": pc.normalization_mapping,
                "stats": ds_meta.stats,
            },
            "rename_observations_processor": {"rename_map": rename},
        },
        postprocessor_overrides={
            "unnormalizer_processor": {
                "features": pc.output_features,
                "norm_map": pc.normalization_mapping,
                "stats": ds_meta.stats,
            },
        },
    )
    return policy, pre, post


def lora_overrides(v: VLAConfig) -> dict[str, Any]:
    """LoRA settings as LeRobot's ``wrap_with_peft`` CLI overrides (None keeps LeRobot's default)."""
    targets: Any = v.target_modules or None
    if targets and "," in targets:
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    return {
        "method_type": "lora",
        "r": v.lora_rank,
        "lora_alpha": v.lora_alpha,
        "lora_dropout": v.lora_dropout,
        "target_modules": targets,
    }


def wrap_lora(policy: Any, v: VLAConfig) -> Any:
    """The policy wrapped with PEFT LoRA through LeRobot's entry point (base frozen, adapters trainable).

    With ``load_vlm_weights=False`` (the offline tiny backbone) LeRobot warns that LoRA on a random base
    is pointless; that is the point of the offline path, so the warning is held back there.
    """
    import logging

    if v.load_vlm_weights or v.pretrained:
        return policy.wrap_with_peft(peft_cli_overrides=lora_overrides(v))
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        return policy.wrap_with_peft(peft_cli_overrides=lora_overrides(v))
    finally:
        root.setLevel(level)


def trainable_share(model: Any) -> tuple[int, int]:
    """``(trainable parameters, all parameters)``."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def load_adapter(adapter_dir: Path, device: str = "cpu", merge: bool = False) -> Any:
    """A saved LoRA adapter on its base policy (``PeftModel``), or merged into a plain policy with ``merge``."""
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class
    from peft import PeftConfig, PeftModel

    peft_cfg = PeftConfig.from_pretrained(str(adapter_dir))
    base_cfg = PreTrainedConfig.from_pretrained(peft_cfg.base_model_name_or_path)
    base_cfg.device = device
    base = get_policy_class(base_cfg.type).from_pretrained(peft_cfg.base_model_name_or_path, config=base_cfg)
    model = PeftModel.from_pretrained(base, str(adapter_dir), config=peft_cfg)
    model.to(device)
    model.eval()
    if not merge:
        return model
    merged = model.merge_and_unload()
    merged.config.use_peft = False  # a plain policy now
    return merged

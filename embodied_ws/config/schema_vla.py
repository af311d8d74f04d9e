"""The ``vla:`` section of a run's config: demonstrations, LoRA fine-tuning and sim evaluation of a VLA policy.

Re-exported by :mod:`embodied_ws.config.schema`; see there for how the loader validates a field."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from embodied_ws.config.fields import COUNT_MAX, SEED_MAX, STEPS_MAX, num, within


@dataclass
class VLAConfig:
    """VLA fine-tuning (``embodied-ws finetune``): a LeRobot policy, optionally wrapped with PEFT LoRA.

    :param policy: ``smolvla`` (default), ``pi0`` or ``act`` (a non-VLA baseline, trained in full)
    :param pretrained: policy to start from: a hub id (``lerobot/smolvla_base``) or a local folder;
        empty: a fresh policy whose backbone comes from ``vlm_model_name``
    :param vlm_model_name: SmolVLA backbone (hub id or a local folder with config + processor files)
    :param load_vlm_weights: load the backbone's weights (False: random init, for offline tests)
    :param lora: wrap with PEFT LoRA (only adapters train); False: full fine-tune
    :param lora_rank: LoRA rank ``r``
    :param lora_alpha: LoRA scaling ``alpha``
    :param lora_dropout: dropout on the LoRA path
    :param target_modules: regex or comma-separated names of the wrapped modules (empty: LeRobot's default
        for the policy)
    :param load_in_4bit: quantize the frozen base to 4 bit (needs CUDA and bitsandbytes)
    :param steps: optimizer steps
    :param batch_size: samples per step
    :param learning_rate: AdamW learning rate
    :param chunk_size: actions predicted per inference (the action chunk)
    :param n_action_steps: actions of each chunk executed before re-planning
    :param image_size: [height, width] the policy resizes camera images to (with padding)
    :param checkpoint_every: steps between checkpoints (0: only at the end)
    :param eval_episodes: sim episodes of the final evaluation (0: none)
    :param device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``
    :param num_workers: DataLoader worker processes
    :param seed: seed of sampling and initialisation
    :param max_idle_ratio: pre-flight: largest share of idle frames per episode
    :param max_tracking_error: pre-flight: largest RMS joint error (rad) when replaying a demonstration
    :param memory_margin: refuse to start when the estimate exceeds this fraction of free memory
    :param rename_map: dataset key → policy key, e.g. ``{observation.images.overview: observation.images.camera1}``
        for a pretrained policy trained with other camera names
    """

    policy: str = "smolvla"
    pretrained: str = ""
    vlm_model_name: str = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"
    load_vlm_weights: bool = True
    lora: bool = True
    lora_rank: int = num(16, 0, 4096, low_open=True)
    lora_alpha: int = num(32, 0, 100_000, low_open=True)
    lora_dropout: float = num(0.05, 0.0, 1.0, high_open=True)
    target_modules: str = ""
    load_in_4bit: bool = False
    steps: int = num(2000, 0, STEPS_MAX, low_open=True)
    batch_size: int = num(8, 0, 1_000_000, low_open=True)
    learning_rate: float = num(1e-4, 0.0, 1.0, low_open=True)
    chunk_size: int = num(50, 0, 100_000, low_open=True)
    n_action_steps: int = num(10, 0, 100_000, low_open=True)
    image_size: list[int] = field(default_factory=lambda: [512, 512], metadata=within(1, 4096))
    checkpoint_every: int = num(500, 0, STEPS_MAX)
    eval_episodes: int = num(10, 0, COUNT_MAX)
    device: str = "auto"
    num_workers: int = num(0, 0, 1024)
    seed: int = num(0, 0, SEED_MAX)
    max_idle_ratio: float = num(0.3, 0.0, 1.0)
    max_tracking_error: float = num(0.1, 0.0, 1000.0)
    memory_margin: float = num(0.9, 0.0, 1.0, low_open=True)
    rename_map: Any = None

"""The ``vla:`` config section: bad values and unsupported combinations are one line, before any model is built."""

from __future__ import annotations

import pytest

from embodied_ws.config.loader import load_config
from embodied_ws.core.errors import ConfigError, UserError
from embodied_ws.vla.quantize import require_4bit


def test_vla_preset_loads_with_documented_defaults() -> None:
    cfg = load_config("vla")
    assert cfg.env.task == "reach_color" and cfg.env.action_mode == "absolute"
    assert cfg.vla.policy == "smolvla" and cfg.vla.lora and cfg.vla.n_action_steps <= cfg.vla.chunk_size


@pytest.mark.parametrize(
    ("sets", "where", "what"),
    [
        (["vla.policy=octo"], "vla.policy", "smolvla, pi0 or act"),
        (["vla.n_action_steps=60"], "vla.n_action_steps", "<= vla.chunk_size"),
        (["vla.lora_rank=0"], "vla.lora_rank", "> 0"),
        (["vla.policy=act"], "vla.lora", "ACT is a baseline trained from scratch"),
        (["vla.image_size=[64]"], "vla.image_size", "[height, width]"),
    ],
)
def test_bad_vla_values(sets: list[str], where: str, what: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config("vla", sets)
    assert where in exc.value.line() and what in exc.value.line()


def test_4bit_needs_cuda_and_bitsandbytes() -> None:
    with pytest.raises(UserError, match="CUDA"):
        require_4bit("cpu")

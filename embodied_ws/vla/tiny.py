"""A tiny SmolVLM backbone folder built locally: the offline path for tests, CI and benchmarks.

LeRobot's SmolVLA builds its backbone from ``vlm_model_name`` with ``AutoConfig`` / ``AutoProcessor``
(and ``load_vlm_weights=False`` skips the weights), so a folder holding a small ``SmolVLMConfig``
(llama text model + SigLIP-style vision encoder), a BPE tokenizer trained here with ``tokenizers``
(including SmolVLM's image special tokens) and a ``SmolVLMProcessor`` gives the real SmolVLA code
path with random weights and no hub download.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: SmolVLM's special tokens (the processor and SmolVLA look them up by these names)
SPECIAL = {
    "pad_token": "<|pad|>",
    "unk_token": "<|unk|>",
    "bos_token": "<|im_start|>",
    "eos_token": "<end_of_utterance>",
}
EXTRA = {
    "fake_image_token": "<fake_token_around_image>",
    "image_token": "<image>",
    "global_image_token": "<global-img>",
    "end_of_utterance_token": "<end_of_utterance>",
}
CORPUS = [
    "touch the red ball",
    "touch the green ball",
    "touch the blue ball",
    "reach the target with the arm",
    "pick up the cube and place it in the bin",
    "move the gripper to the left, right, up, down",
    "open close push pull grasp release rotate lift lower stop",
    "the quick brown fox jumps over the lazy dog 0 1 2 3 4 5 6 7 8 9",
]


def _train_tokenizer(vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=SPECIAL["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = list(dict.fromkeys([*SPECIAL.values(), *EXTRA.values()]))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    return tok


def build_tiny_backbone(
    out: Path,
    image_size: int = 64,
    text_hidden: int = 384,
    text_layers: int = 4,
    vision_hidden: int = 192,
    vision_layers: int = 2,
    vocab_size: int = 512,
) -> Path:
    """Write a tiny SmolVLM (config, tokenizer, processor) to ``out`` for ``vlm_model_name``; returns ``out``.

    :param image_size: vision encoder input (set the policy's image size, ``vla.image_size``, to the same)
    :param text_hidden: text model width (the action expert is 0.75 × this)
    :param text_layers: text model layers (SmolVLA interleaves self/cross attention every 2)
    :param vision_hidden: vision encoder width
    :param vision_layers: vision encoder layers
    :param vocab_size: BPE vocabulary size (the trained vocabulary may be smaller)
    """
    from transformers import (
        PreTrainedTokenizerFast,
        SmolVLMConfig,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = PreTrainedTokenizerFast(tokenizer_object=_train_tokenizer(vocab_size), **SPECIAL, extra_special_tokens=EXTRA)
    tok.padding_side = "right"
    patch = 16
    scale = 2
    heads = max(text_hidden // 64, 1)
    cfg = SmolVLMConfig(
        text_config={
            "model_type": "llama",
            "hidden_size": text_hidden,
            "intermediate_size": 4 * text_hidden,
            "num_hidden_layers": text_layers,
            "num_attention_heads": heads,
            "num_key_value_heads": heads,
            "head_dim": text_hidden // heads,
            "vocab_size": len(tok),
            "max_position_embeddings": 512,
            "pad_token_id": tok.pad_token_id,
        },
        vision_config={
            "hidden_size": vision_hidden,
            "intermediate_size": 4 * vision_hidden,
            "num_hidden_layers": vision_layers,
            "num_attention_heads": max(vision_hidden // 64, 1),
            "image_size": image_size,
            "patch_size": patch,
        },
        scale_factor=scale,
        image_token_id=tok.convert_tokens_to_ids(EXTRA["image_token"]),
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
    )
    cfg.save_pretrained(out)
    image_proc = SmolVLMImageProcessor(
        do_resize=True,
        size={"longest_edge": image_size},
        do_image_splitting=False,
        max_image_size={"longest_edge": image_size},
    )
    seq_len = (image_size // patch) ** 2 // scale**2
    video_proc = SmolVLMVideoProcessor(size={"longest_edge": image_size}, max_image_size={"longest_edge": image_size})
    processor = SmolVLMProcessor(
        image_processor=image_proc, tokenizer=tok, video_processor=video_proc, image_seq_len=seq_len
    )
    processor.save_pretrained(out)
    return out

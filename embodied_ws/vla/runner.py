"""Run a fine-tuned VLA like an exported policy: ``act(obs)`` → joint position commands, with an action-chunk queue.

A VLA predicts a chunk of ``chunk_size`` actions per inference; the runner executes the first
``n_action_steps`` of each chunk, one per ``act`` call, then re-plans from the newest observation
(LeRobot's receding-horizon scheme, made explicit so the deployment node can see and bound it).
``obs`` is a mapping: ``state`` (joint positions), ``images`` (camera name → H×W×3 uint8) and
``instruction`` (text); the result is one action per call, in the dataset's action units (rad).
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from embodied_ws.core.errors import UserError
from embodied_ws.data.dataset import IMAGE_PREFIX, STATE


def load_policy_folder(folder: Path, device: str) -> Any:
    """A LeRobot policy from ``adapter/`` (LoRA merged into its base), ``merged/`` or ``policy/``."""
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class

    if (folder / "adapter_config.json").is_file():
        from embodied_ws.vla.policies import load_adapter

        return load_adapter(folder, device, merge=True)
    cfg = PreTrainedConfig.from_pretrained(str(folder))
    cfg.device = device
    policy = get_policy_class(cfg.type).from_pretrained(str(folder), config=cfg)
    policy.to(device)
    policy.eval()
    return policy


class VLARunner:
    """A fine-tuned LeRobot policy behind the :class:`~embodied_ws.policy.exported.ExportedPolicy` interface.

    :param folder: a finetune run's ``adapter/``, ``merged/`` or ``policy/`` folder (processors saved with it)
    :param device: torch device
    :param n_action_steps: actions executed per chunk before re-planning (default: the policy's)
    :param instruction: instruction used when ``obs`` carries none
    """

    def __init__(
        self, folder: str | Path, device: str = "cpu", n_action_steps: int | None = None, instruction: str = ""
    ) -> None:
        from lerobot.policies.factory import make_pre_post_processors

        folder = Path(folder)
        if not (folder / "config.json").is_file():
            raise UserError("not a fine-tuned policy folder (no config.json)", str(folder))
        self.device = device
        self.policy = load_policy_folder(folder, device)
        self.config = self.policy.config
        overrides = {"device_processor": {"device": device}}
        self.pre, self.post = make_pre_post_processors(
            self.config, pretrained_path=str(folder), preprocessor_overrides=overrides
        )
        self.n_action_steps = int(n_action_steps or self.config.n_action_steps)
        self.instruction = instruction
        side = folder / "embodied_ws.json"
        self.meta = json.loads(side.read_text()) if side.is_file() else {}
        self.cameras = [k[len(IMAGE_PREFIX) :] for k in self.config.image_features]
        self.queue: deque[np.ndarray] = deque()
        self.replans = 0

    @property
    def obs_size(self) -> int:
        """Length of the joint-state vector the policy expects."""
        return int(self.config.input_features[STATE].shape[0])

    def reset(self) -> None:
        """Forget queued actions (call at the start of every episode)."""
        self.queue.clear()
        self.policy.reset()

    def _batch(self, obs: dict[str, Any]) -> dict[str, Any]:
        import torch

        state = np.asarray(obs["state"], dtype=np.float32).reshape(-1)
        if state.size != self.obs_size:
            raise UserError(f"state has {state.size} values, the policy expects {self.obs_size}", "obs.state")
        images = obs.get("images") or {}
        if "image" in obs and self.cameras:
            images = {self.cameras[0]: obs["image"], **images}
        batch: dict[str, Any] = {STATE: torch.from_numpy(state), "task": obs.get("instruction") or self.instruction}
        for cam in self.cameras:
            if cam not in images:
                raise UserError(f"no image for camera {cam!r} (have: {', '.join(images) or 'none'})", "obs.images")
            img = torch.from_numpy(np.ascontiguousarray(images[cam])).permute(2, 0, 1).float() / 255.0
            batch[IMAGE_PREFIX + cam] = img
        return batch

    def predict_chunk(self, obs: dict[str, Any]) -> np.ndarray:
        """A whole action chunk ``(chunk_size, action_dim)`` for ``obs`` (unnormalized)."""
        import torch

        with torch.no_grad():
            batch = self.pre(self._batch(obs))
            chunk = self.policy.predict_action_chunk(batch)
            chunk = self.post(chunk)
        return np.asarray(chunk.detach().cpu().float().numpy()[0])

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        """The next action (joint position commands); re-plans when the queue is empty."""
        if not self.queue:
            chunk = self.predict_chunk(obs)
            self.queue.extend(chunk[: self.n_action_steps])
            self.replans += 1
        return self.queue.popleft()

"""``embodied-ws assistant download``: fetch the default GGUF with huggingface_hub, resumable, sha256-checked.

This is the only network access of the assistant. The expected sha256 comes from the model
manifest when pinned there, else from the hub's LFS metadata for the file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import yaml

from embodied_ws.core.errors import UserError
from embodied_ws.core.paths import models_dir


@dataclass(frozen=True)
class ModelManifest:
    """Where a model's weights live on the hub."""

    name: str
    repo_id: str
    filename: str
    sha256: str | None = None
    size_bytes: int | None = None


def default_manifest() -> ModelManifest:
    """The assistant's default model (``models/llm/default.yaml``)."""
    path = models_dir() / "llm" / "default.yaml"
    data = yaml.safe_load(path.read_text())
    return ModelManifest(**data)


def default_model_path(cache: Path | None = None) -> Path:
    """Where ``download`` puts the default model (``~/.cache/embodied_ws/models/<file>``)."""
    return (cache or Path.home() / ".cache" / "embodied_ws" / "models") / default_manifest().filename


def sha256_file(path: Path, block: int = 8 << 20) -> str:
    """Hex sha256 of a file, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


def verify_sha256(path: Path, expected: str) -> None:
    """Raise a one-line error when ``path`` does not hash to ``expected``."""
    got = sha256_file(path)
    if got.lower() != expected.lower():
        raise UserError(f"sha256 mismatch: got {got}, expected {expected} (delete it and download again)", str(path))


def download(manifest: ModelManifest, dest_dir: Path) -> Path:
    """Download (resuming a partial file) into ``dest_dir`` and check its sha256."""
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError

    dest_dir.mkdir(parents=True, exist_ok=True)
    try:
        expected = manifest.sha256
        if expected is None:
            info = HfApi().get_paths_info(manifest.repo_id, [manifest.filename])
            lfs = getattr(info[0], "lfs", None) if info else None
            expected = getattr(lfs, "sha256", None)
        path = Path(hf_hub_download(manifest.repo_id, manifest.filename, local_dir=dest_dir))
    except (HfHubHTTPError, OSError) as exc:
        raise UserError(f"download failed: {exc}", f"{manifest.repo_id}/{manifest.filename}") from None
    if expected:
        verify_sha256(path, expected)
    return path

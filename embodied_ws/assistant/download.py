"""``embodied-ws assistant download``: fetch the default GGUF with huggingface_hub, resumable, sha256-checked.

This is the only network access of the assistant. The expected sha256 comes from the model
manifest when pinned there, else from the hub's LFS metadata for the file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
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


def _network_error_types() -> tuple[type[BaseException], ...]:
    """Exceptions by which huggingface_hub (and its HTTP client) says the hub could not be used."""
    import httpx
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    return (httpx.HTTPError, HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled, OSError)


def _reason(exc: BaseException) -> str:
    """The first line of the root cause's message (hub errors wrap the HTTP one and run over several lines)."""
    seen = {id(exc)}
    while (inner := exc.__cause__ or exc.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        exc = inner
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _hub_endpoint() -> str:
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def remote_file_info(manifest: ModelManifest) -> tuple[str | None, int | None]:
    """``(sha256, size in bytes)`` of the model file on the hub (``None`` where the hub does not say).

    This is the first request: without network it fails fast with one line naming the hub endpoint.
    """
    from huggingface_hub import HfApi

    where = f"{manifest.repo_id}/{manifest.filename}"
    try:
        info = HfApi().get_paths_info(manifest.repo_id, [manifest.filename])
    except _network_error_types() as exc:
        raise UserError(
            f"cannot reach the model hub at {_hub_endpoint()} ({_reason(exc)}); check the network "
            "(or HF_ENDPOINT / HF_HUB_OFFLINE), or fetch the file another way and pass --model",
            where,
        ) from None
    if not info:
        raise UserError(f"the hub at {_hub_endpoint()} has no such file", where)
    lfs = getattr(info[0], "lfs", None)
    size = getattr(lfs, "size", None) or getattr(info[0], "size", None)
    return getattr(lfs, "sha256", None), int(size) if size else None


def download(manifest: ModelManifest, dest_dir: Path, on_start: Callable[[int | None], None] | None = None) -> Path:
    """Download (resuming a partial file) into ``dest_dir`` and check its sha256.

    No network, an unreachable or refusing hub, or a transfer that breaks off: one line
    (:class:`UserError`), never a traceback; a partial file is kept and resumed next time.

    :param on_start: called with the file size (bytes, or None) once the hub has answered
    """
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import logging as hf_logging

    where = f"{manifest.repo_id}/{manifest.filename}"
    hf_logging.set_verbosity_error()  # its retry warnings would add lines to ours
    hub_sha, size = remote_file_info(manifest)
    expected = manifest.sha256 or hub_sha
    if on_start is not None:
        on_start(manifest.size_bytes or size)
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the download folder ({exc.strerror or exc})", str(dest_dir)) from None
    try:
        path = Path(hf_hub_download(manifest.repo_id, manifest.filename, local_dir=dest_dir))
    except _network_error_types() as exc:
        raise UserError(f"download failed ({_reason(exc)}); run it again to resume", where) from None
    if expected:
        verify_sha256(path, expected)
    return path

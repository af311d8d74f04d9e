"""Where the package's shared data (models/, config/, launch/) lives: source tree, pip prefix or ament share."""

from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path

PACKAGE = "embodied_ws"


@lru_cache(maxsize=1)
def share_dir() -> Path:
    """The folder holding ``models/`` and ``config/``.

    Looked up in order: ``$EMBODIED_WS_SHARE``, the source checkout next to the package,
    ``<sys.prefix>/share/embodied_ws`` (pip install) and the ament index (colcon install).
    """
    candidates: list[Path] = []
    if os.environ.get("EMBODIED_WS_SHARE"):
        candidates.append(Path(os.environ["EMBODIED_WS_SHARE"]))
    candidates.append(Path(__file__).resolve().parents[2])
    candidates.append(Path(sys.prefix) / "share" / PACKAGE)
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            candidates.append(Path(prefix) / "share" / PACKAGE)
    for cand in candidates:
        if (cand / "models").is_dir() and (cand / "config").is_dir():
            return cand
    return candidates[1]


def models_dir() -> Path:
    """Folder with one sub-folder per robot (``models/<robot>/scene.xml``)."""
    return share_dir() / "models"


def config_dir() -> Path:
    """Folder with the YAML presets (``config/train``, ``config/dr``)."""
    return share_dir() / "config"

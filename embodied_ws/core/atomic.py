"""Atomic file and folder writes: readers see the old version or the new one, never half of one."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process's umask (read from ``/proc``; else set and restored)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass  # no /proc: the set-and-restore way below
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file, fsync, then rename over it.

    :param mode: file permissions; default ``0o666`` less the umask, like any tool's files (give ``0o600``
        for a file that holds a secret)
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o666 & ~current_umask() if mode is None else mode)  # mkstemp makes 0600
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Atomically write ``obj`` as indented JSON."""
    write_bytes_atomic(path, (json.dumps(obj, indent=2) + "\n").encode())


def write_dir_atomic(path: Path, fill: Callable[[Path], None]) -> None:
    """Create folder ``path`` atomically: ``fill(tmp)`` writes into a temporary sibling that is then renamed.

    An existing ``path`` is replaced. Files written by ``fill`` are fsynced before the rename. The folder
    gets ``0o777`` less the umask (``mkdtemp`` makes 0700).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        tmp.chmod(0o777 & ~current_umask())
        fill(tmp)
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(path.parent)

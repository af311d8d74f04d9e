"""Log sources: a file, stdin, a folder of logs, or a command followed live. ANSI colours are stripped.

Everything streams: files are read in fixed-size chunks, so memory stays bounded on 1 GB logs.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import subprocess
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from embodied_ws.core.errors import UserError

ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
CHUNK = 8 << 20
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")


@dataclass(frozen=True)
class Chunk:
    """A run of whole lines: ``data`` (bytes, ANSI stripped) starting at line ``first_line`` of ``source``."""

    source: str
    first_line: int
    data: bytes


def strip_ansi(data: bytes) -> bytes:
    """Remove ANSI colour/cursor escapes (colcon and ros2 launch colour their output)."""
    return ANSI.sub(b"", data) if b"\x1b" in data else data


def _chunks_of(stream: io.BufferedIOBase, name: str, size: int = CHUNK) -> Iterator[Chunk]:
    # one block of whole lines is held back, so that a last line without "\n" joins the lines before it
    # (a tool template may span lines, e.g. a traceback's frame and its exception line)
    line = 1
    rest = held = b""
    while True:
        block = stream.read(size)
        if not block:
            break
        block = rest + block
        cut = block.rfind(b"\n")
        if cut < 0:
            rest = block
            continue
        if held:
            yield Chunk(name, line, strip_ansi(held))
            line += held.count(b"\n")
        held, rest = block[: cut + 1], block[cut + 1 :]
    tail = held + (rest + b"\n" if rest else b"")
    if tail:
        yield Chunk(name, line, strip_ansi(tail))


def _is_log_name(p: Path) -> bool:
    name = p.name[:-3] if p.name.endswith(".gz") else p.name
    return Path(name).suffix in LOG_SUFFIXES or name.startswith("stdout")


def log_files(folder: Path) -> list[Path]:
    """Log files under ``folder`` (recursively, e.g. ``~/.ros/log`` or colcon's ``log/``; gzipped too), oldest
    first."""
    files = [p for p in folder.rglob("*") if p.is_file() and _is_log_name(p)]
    return sorted(files, key=lambda p: (p.stat().st_mtime, str(p)))


def _file_chunks(path: Path) -> Iterator[Chunk]:
    """Chunks of one file; a gzip file (by its magic bytes, whatever its name) is decompressed as it streams."""
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        if not gz:
            yield from _chunks_of(fh, str(path))
            return
        try:
            with gzip.GzipFile(fileobj=fh) as z:
                yield from _chunks_of(z, str(path))  # type: ignore[arg-type]
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            raise UserError(f"not a readable gzip file ({exc or 'truncated'})", str(path)) from None


def read_chunks(source: str) -> Iterator[Chunk]:
    """Chunks of a source: ``-`` (stdin), a file, or a folder of logs; ``.gz`` files are decompressed."""
    if source == "-":
        yield from _chunks_of(sys.stdin.buffer, "<stdin>")
        return
    path = Path(source).expanduser()
    if path.is_dir():
        files = log_files(path)
        if not files:
            raise UserError("no log files (*.log, *.txt, stdout*) in this folder", str(path))
        for f in files:
            yield from _file_chunks(f)
        return
    if not path.is_file():
        raise UserError("log file not found", str(path))
    yield from _file_chunks(path)


def follow_command(argv: list[str]) -> Iterator[str]:
    """Run a command and yield its merged stdout/stderr lines as they come (ANSI stripped).

    The command is one the *user* gave; the assistant never runs commands proposed by a model.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    except OSError as exc:
        raise UserError(f"cannot run command: {exc.strerror}", argv[0]) from None
    if proc.stdout is None:  # cannot happen with stdout=PIPE; keeps the type checker honest
        raise UserError("command has no output pipe", argv[0])
    try:
        for raw in iter(proc.stdout.readline, b""):
            yield strip_ansi(raw).decode("utf-8", "replace").rstrip("\n")
        proc.wait()
    finally:  # the consumer stopped early (a cancelled TUI worker): do not leave the command running
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def lines_of(chunk: Chunk) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for each line of a chunk."""
    for i, raw in enumerate(chunk.data.splitlines()):
        yield chunk.first_line + i, raw.decode("utf-8", "replace")

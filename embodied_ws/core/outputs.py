"""Output folders: which ones are ours, and one writer per folder at a time.

The rule every verb that writes a folder follows:

- a folder that does not exist is created and marked as ours with :data:`MARKER` (JSON: the verb, when);
  an existing *empty* folder is taken the same way;
- an existing non-empty folder without our marker is refused (one line, exit 2) and never touched,
  neither written into nor deleted; so is a folder of ours made by another verb;
- a folder this verb already filled is replaced (or written into again) only with ``--overwrite``;
  verbs that add to their folder (``train --resume``, ``tune``) keep adding;
- while a verb writes a folder it holds an exclusive lock, the file ``.NAME.lock`` beside the folder
  (a POSIX record lock with the holder's PID inside). A second writer gets one line naming that PID;
  the kernel drops the lock when its process dies, so the lock of a dead PID is simply taken over;
- a folder we did not create is never deleted.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from embodied_ws.core.errors import UserError

#: the file that marks a folder as written by embodied-ws (and by which verb)
MARKER = ".embodied_ws"

#: lock files held by this process (POSIX locks do not exclude the process holding them)
_HELD: set[Path] = set()


def _io_error(exc: OSError, where: Path) -> UserError:
    """One line for an OS error on an output path (permission denied, read-only file system, ...)."""
    return UserError(f"cannot write here: {os.strerror(exc.errno) if exc.errno else exc}", str(where))


def lock_path(folder: Path) -> Path:
    """The lock file of ``folder``: ``.NAME.lock`` in its parent (it must outlive renames of the folder)."""
    folder = Path(os.path.abspath(folder))
    return folder.parent / f".{folder.name}.lock"


def pid_alive(pid: int) -> bool:
    """True if a process with this PID exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


class FolderLock:
    """An exclusive lock on an output folder for the whole time a verb writes it.

    ``with FolderLock(folder, "train"):`` ...; a second writer (any process) gets a :class:`UserError`
    naming the PID that holds it.

    :param folder: the output folder (need not exist yet)
    :param verb: the verb that writes it (shown to a second writer)
    """

    def __init__(self, folder: Path, verb: str) -> None:
        self.folder = Path(folder)
        self.verb = verb
        self.path = lock_path(self.folder)
        self._fd: int | None = None
        self._made: list[Path] = []  # folders made for the lock file, removed again on release if empty
        self.took_over: int | None = None  # PID of a dead holder whose lock was taken over

    def acquire(self) -> FolderLock:
        """Take the lock or raise a one-line :class:`UserError` naming the holder's PID."""
        if self.path in _HELD:
            raise UserError(f"already being written by this process (embodied-ws {self.verb})", str(self.folder))
        missing = [p for p in (self.path.parent, *self.path.parent.parents) if not p.exists()]
        anc = missing[-1].parent if missing else self.path.parent
        if not anc.is_dir():
            raise UserError(f"cannot create it: {anc} is not a folder", str(self.folder))
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _io_error(exc, self.folder) from None
        self._made = missing
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as exc:
                self._remove_made()
                raise _io_error(exc, self.folder) from None
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _read_holder(fd)
                os.close(fd)
                self._remove_made()
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    raise _io_error(exc, self.folder) from None
                pid = holder.get("pid", "unknown")
                verb = holder.get("verb", "?")
                raise UserError(
                    f"in use by PID {pid} (embodied-ws {verb}): wait for it to finish or stop it", str(self.folder)
                ) from None
            # the previous holder removes the file on release: make sure we locked the file that is there now
            try:
                st, now = os.fstat(fd), os.stat(self.path)
                same = (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            before = _read_holder(fd).get("pid")
            if isinstance(before, int) and before != os.getpid():
                self.took_over = before
                print(f"note: {self.folder}: taking over the lock of PID {before} (no longer running)", file=sys.stderr)
            record = {"pid": os.getpid(), "verb": self.verb, "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode(), 0)
            self._fd = fd
            _HELD.add(self.path)
            return self

    def release(self) -> None:
        """Give the lock up and remove its file (idempotent); parent folders made for it go if left empty."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)  # closing drops the POSIX lock
            self._fd = None
            _HELD.discard(self.path)
        self._remove_made()

    def _remove_made(self) -> None:
        for d in self._made:  # deepest first; one still holding something ends it
            try:
                d.rmdir()
            except OSError:
                break
        self._made = []

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def read_marker(folder: Path) -> dict[str, Any] | None:
    """Our marker of ``folder`` (``{"verb": ...}``), or None when the folder is not ours."""
    p = Path(folder) / MARKER
    if not p.is_file():
        return None
    try:
        data = json.loads(p.read_text() or "{}")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {"verb": "?"}  # our file name, unreadable content: ours, by an unknown verb
    return data if isinstance(data, dict) else {"verb": "?"}


def write_marker(folder: Path, verb: str) -> None:
    """Mark ``folder`` as written by ``embodied-ws verb``."""
    from embodied_ws.core.atomic import write_json_atomic

    try:
        write_json_atomic(Path(folder) / MARKER, {"verb": verb, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    except OSError as exc:
        raise _io_error(exc, Path(folder)) from None


def _entries(folder: Path) -> list[str]:
    return [n for n in os.listdir(folder) if n != MARKER]


def claim(folder: Path, verb: str, overwrite: bool = False, adds: bool = False, flag: str = "--out") -> str:
    """Check that ``verb`` may write ``folder`` (see the module rule); returns what the folder is now.

    :param folder: the output folder
    :param verb: the verb that writes it (recorded in the marker)
    :param overwrite: the user passed ``--overwrite``: a folder this verb filled may be replaced
    :param adds: the verb adds to its own folder (resume): a filled folder of this verb is fine without ``--overwrite``
    :param flag: the option that names the folder (for the message)
    :returns: ``"new"`` (does not exist), ``"empty"``, or ``"ours"`` (this verb's, with content)
    :raises UserError: the folder is not ours, another verb's, or filled and ``overwrite``/``adds`` not given
    """
    folder = Path(folder)
    if not folder.exists():
        check_creatable(folder)
        return "new"
    if not folder.is_dir():
        raise UserError(f"exists and is not a folder: choose another {flag}", str(folder))
    try:
        content = _entries(folder)
    except OSError as exc:
        raise _io_error(exc, folder) from None
    if not content:
        return "empty"
    mark = read_marker(folder)
    if mark is None:
        raise UserError(
            f"folder exists and was not written by embodied-ws (no {MARKER} marker); it is left untouched: "
            f"choose another {flag} or move it away yourself",
            str(folder),
        )
    if mark.get("verb") != verb:
        raise UserError(
            f"folder holds the output of `embodied-ws {mark.get('verb', '?')}`, not `{verb}`: choose another {flag}",
            str(folder),
        )
    if not (overwrite or adds):
        raise UserError(f"holds an earlier `{verb}` output: pass --overwrite to replace it or choose another {flag}",
                        str(folder))  # fmt: skip
    return "ours"


def check_creatable(path: Path) -> None:
    """A one-line :class:`UserError` unless ``path`` (not existing) can be created: its nearest existing
    ancestor must be a folder we may write into."""
    p = Path(os.path.abspath(path))
    anc = p.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise UserError(f"cannot create it: {anc} is not a folder", str(path))
    try:  # a real try: permissions, a read-only or pseudo file system, root or not
        os.rmdir(tempfile.mkdtemp(dir=anc, prefix=".embodied_ws_probe."))
    except OSError as exc:
        raise UserError(f"cannot create it in {anc}: {os.strerror(exc.errno or 0)}", str(path)) from None


def make_folder(folder: Path, verb: str) -> None:
    """Create ``folder`` (parents too) if needed and mark it as ``verb``'s; OS errors are one line."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _io_error(exc, Path(folder)) from None
    if read_marker(folder) is None:
        write_marker(folder, verb)


def remove_if_only_marker(folder: Path) -> None:
    """Remove ``folder`` if it holds nothing but our marker (an output begun and abandoned before any result)."""
    folder = Path(folder)
    if folder.is_dir() and read_marker(folder) is not None and not _entries(folder):
        shutil.rmtree(folder)


@contextlib.contextmanager
def output_folder(
    folder: Path, verb: str, overwrite: bool = False, adds: bool = False, flag: str = "--out"
) -> Iterator[Path]:
    """Lock, claim (see :func:`claim`), create and mark ``folder`` for ``verb`` writing into it in place.

    On an error before anything but the marker was written, a folder this call created is removed again.
    """
    folder = Path(folder)
    with FolderLock(folder, verb):
        state = claim(folder, verb, overwrite, adds, flag)
        make_folder(folder, verb)
        try:
            yield folder
        except BaseException:
            if state == "new":
                remove_if_only_marker(folder)
            raise


def replace_folder(src: Path, dest: Path) -> None:
    """Move the finished folder ``src`` to ``dest`` (in the same parent), replacing ``dest`` only when it is
    empty or ours (marked); call with ``dest`` claimed and locked. The old content goes only after the new is in place.
    """
    src, dest = Path(src), Path(dest)
    if not dest.exists():
        os.replace(src, dest)
        return
    if dest.is_dir() and not os.listdir(dest):
        os.replace(src, dest)  # rename(2) onto an empty folder
        return
    if read_marker(dest) is None:
        raise UserError("folder was not written by embodied-ws: left untouched", str(dest))
    old = dest.with_name(f".{dest.name}.old.{os.getpid()}")
    os.replace(dest, old)
    os.replace(src, dest)
    shutil.rmtree(old)


def write_files(files: dict[Path, bytes], overwrite: bool = False, flag: str = "--out") -> None:
    """Write single files into a folder that may be the user's (``robot show --out .``), atomically.

    A file that exists with other content is replaced only with ``overwrite``; all are checked before
    any is written. The same content again is left as it is.
    """
    from embodied_ws.core.atomic import write_bytes_atomic

    for path, data in files.items():
        if path.exists() and not overwrite and (not path.is_file() or path.read_bytes() != data):
            raise UserError(f"exists with other content (left untouched): pass --overwrite or choose another {flag}",
                            str(path))  # fmt: skip
    for path, data in files.items():
        if not (path.is_file() and path.read_bytes() == data):
            try:
                write_bytes_atomic(path, data)
            except OSError as exc:
                raise _io_error(exc, path) from None

"""Writing a file for the user all at once: readers see the old file or the new one, never a part.

:func:`write_atomic` writes a temporary file in the target's folder, flushes it to disk and
renames it over the target. Everything else is chosen to look like ``open(path, "wb")`` did it:

* a new file gets the permissions ``open`` would give (``0o666`` less the umask, applied by the
  kernel, default ACLs included), not ``mkstemp``'s ``0o600``; an existing file keeps its mode
  (and its owner and group where the process may set them);
* a symbolic link is written through: its target is replaced and the link stays;
* an existing file that is not a regular file (a FIFO, ``/dev/null``) is written into directly,
  as there is nothing to replace atomically (and a folder raises IsADirectoryError, as ``open``).

What differs: the file is a new one, so other hard links to the old file keep the old contents,
and a reader holding the old file open goes on reading the old contents.

A process killed mid-write (``kill -9``, the OOM killer) leaves its temporary file behind. The
temporary names are ``.corvid-<host>-<pid>-<random>.tmp`` so that a later write into the same
folder can tell whose they are: it removes those of this host whose process is gone and which
were last written more than a minute ago. The age test covers the writer the PID test cannot
see: a process of another PID namespace (a container sharing the folder and the host name) that
is still writing. A temporary whose PID was reused stays until that process ends too.
``O_TMPFILE`` + ``linkat`` would leave nothing behind, but it is Linux-only, unsupported on some
filesystems (NFS among them), and ``linkat`` cannot replace an existing file, so it would still
need a named temporary for the final rename; the named temporary with a later clean-up works
everywhere.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import stat
import time
import zlib
from typing import BinaryIO, Callable

__all__ = ["STALE_SECONDS", "write_atomic"]

STALE_SECONDS = 60.0  # a dead process's temporary file older than this is removed by the next write
_HOST = f"{zlib.crc32(socket.gethostname().encode()):08x}"
_TEMP = re.compile(r"\.corvid-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]+\.tmp")


def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> None:
    """Create or replace the file at ``path`` with what ``write(f)`` writes into the binary file ``f``.

    On any exception (from ``write`` too) the old file is left as it was and the temporary file is
    removed; the exception propagates. The errors are ``open``'s: PermissionError for a read-only
    folder, IsADirectoryError when ``path`` is a folder, ...

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "notes.txt")
    >>> write_atomic(p, lambda f: f.write(b"hello"))
    >>> open(p, "rb").read()
    b'hello'
    """
    target = os.path.realpath(path)  # write through symbolic links, as open(path, "wb") does
    try:
        old = os.stat(target)
    except FileNotFoundError:
        old = None
    if old is not None and not stat.S_ISREG(old.st_mode):
        with open(target, "wb") as f:
            write(f)
        return
    folder = os.path.dirname(target)
    _remove_stale_temporaries(folder)
    fd, tmp = _create_temporary(folder)
    try:
        with os.fdopen(fd, "wb") as f:
            if old is not None:
                _copy_mode_and_owner(f.fileno(), old)
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_folder(folder)


def _create_temporary(folder: str) -> tuple[int, str]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = os.path.join(folder, f".corvid-{_HOST}-{os.getpid()}-{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp  # the kernel applies the umask, as for open()
        except FileExistsError:
            continue


def _copy_mode_and_owner(fd: int, old: os.stat_result) -> None:
    new = os.fstat(fd)
    if (new.st_uid, new.st_gid) != (old.st_uid, old.st_gid):
        # root saving over a user's file keeps it theirs; others may only keep a group they are in
        with contextlib.suppress(PermissionError):
            os.fchown(fd, old.st_uid, old.st_gid)
    os.fchmod(fd, stat.S_IMODE(old.st_mode))  # after the chown, which clears the set-id bits


def _remove_stale_temporaries(folder: str) -> None:
    now = time.time()
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            m = _TEMP.fullmatch(entry.name)
            if m is None or m["host"] != _HOST or _alive(int(m["pid"])):
                continue
            with contextlib.suppress(OSError):  # another process may be removing it too
                if now - entry.stat(follow_symlinks=False).st_mtime > STALE_SECONDS:
                    os.unlink(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, as another user's
    return True


def _sync_folder(folder: str) -> None:
    """Flush the rename itself to disk, so a power cut after ``write_atomic`` returns keeps the new file."""
    with contextlib.suppress(OSError):  # some filesystems cannot open or sync a folder
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

"""Where datasets live on disk, and downloading files from mirrors with checksum verification.

Data folder: the ``root`` a loader is given, else ``$CORVID_DATA_DIR``, else
``~/.cache/corvid/datasets``. Each dataset has its own subfolder there (``mnist/``,
``fashion-mnist/``). An explicit ``root`` may also be that subfolder itself (the folder holding
the files), so ``MNIST(root="/data/mnist")`` and ``MNIST(root="/data")`` both work.

A download tries each mirror in turn. The file is streamed into a temporary file next to its
destination while its md5 is computed; only a file whose checksum matches is renamed into
place, so an interrupted or corrupted download never leaves a file behind. With ``tqdm``
installed (an optional dependency) a progress bar is shown; without it the download is silent.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any, BinaryIO

from .._files import write_atomic

__all__ = ["ChecksumError", "data_dir", "download_file"]

_CHUNK = 1 << 16


class ChecksumError(OSError):
    """A downloaded file's checksum differs from the known one (the file was not kept). A subclass of
    OSError, raised by :func:`download_file` when some mirror served the wrong bytes.

    >>> import pathlib
    >>> src = pathlib.Path("mirror.bin")
    >>> _ = src.write_bytes(b"corvid")
    >>> cv.data.download_file([src.resolve().as_uri()], "copy.bin", "0" * 32, progress=False)
    Traceback (most recent call last):
        ...
    corvid.data.download.ChecksumError: could not download copy.bin:
      file:///.../mirror.bin: md5 96591b07f494d94d6cf7c57342bfcae5, expected 00000000000000000000000000000000
    >>> pathlib.Path("copy.bin").exists(), issubclass(ChecksumError, OSError)
    (False, True)
    """


def data_dir(root: str | os.PathLike | None = None) -> pathlib.Path:
    """The data folder: ``root`` if given, else ``$CORVID_DATA_DIR``, else ``~/.cache/corvid/datasets``.

    >>> str(data_dir("/tmp/x"))
    '/tmp/x'
    """
    if root is not None:
        return pathlib.Path(root).expanduser()
    env = os.environ.get("CORVID_DATA_DIR")
    if env:
        return pathlib.Path(env).expanduser()
    return pathlib.Path.home() / ".cache" / "corvid" / "datasets"


def download_file(urls: Sequence[str], dest: str | os.PathLike, md5: str, progress: bool = True,
                  timeout: float = 30.0) -> pathlib.Path:
    """Download ``dest`` from the first of ``urls`` that serves it with the md5 ``md5``; returns ``dest``.

    Mirrors are tried in order; a network error or a checksum mismatch moves on to the next one.
    When all fail, raises :class:`ChecksumError` if some mirror served wrong bytes, else OSError,
    listing what each mirror did; nothing is left at ``dest`` or beside it. ``file://`` URLs work
    too (local mirrors, tests). ``progress=False`` hides the progress bar (shown with ``tqdm``).

    >>> import hashlib, pathlib
    >>> src = pathlib.Path("mirror.bin")
    >>> _ = src.write_bytes(b"corvid")
    >>> md5 = hashlib.md5(b"corvid").hexdigest()
    >>> urls = ["file:///nonexistent/data.bin", src.resolve().as_uri()]   # the first mirror fails
    >>> path = download_file(urls, "downloads/data.bin", md5, progress=False)
    >>> path, path.read_bytes()
    (PosixPath('downloads/data.bin'), b'corvid')
    """
    dest = pathlib.Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    bad_checksum = False
    for url in urls:
        def write(out: BinaryIO, url: str = url) -> None:
            got = _fetch(url, out, dest.name, timeout, progress)
            if got != md5:
                raise _WrongBytes(f"md5 {got}, expected {md5}")

        try:  # (atomic: a file of the umask's mode appears only with the right bytes)
            write_atomic(dest, write)
            return dest
        except _WrongBytes as e:
            bad_checksum = True
            failures.append(f"{url}: {e}")
        except (urllib.error.URLError, OSError, ValueError) as e:
            failures.append(f"{url}: {e}")
    error = ChecksumError if bad_checksum else OSError
    raise error(f"could not download {dest.name}:\n  " + "\n  ".join(failures or ["no mirror given"]))


class _WrongBytes(Exception):
    """A mirror served bytes whose checksum is not the expected one."""


def _fetch(url: str, out: BinaryIO, name: str, timeout: float, progress: bool) -> str:
    """Stream ``url`` into ``out``; returns the md5 hex digest of the bytes."""
    digest = hashlib.md5(usedforsecurity=False)
    with urllib.request.urlopen(url, timeout=timeout) as response:
        total = response.headers.get("Content-Length")
        bar = _progress_bar(name, int(total) if total else None) if progress else None
        try:
            for chunk in iter(lambda: response.read(_CHUNK), b""):
                out.write(chunk)
                digest.update(chunk)
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
    return digest.hexdigest()


def _progress_bar(name: str, total: int | None) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=name, leave=False)

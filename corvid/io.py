"""Saving and loading tensors: ``.npy``, ``.npz`` and safetensors. Loading never executes code.

* ``save(path, x)`` / ``load(path)`` pick the format from the extension: ``.npy`` (one tensor),
  ``.npz`` (a dict of tensors), ``.safetensors`` (a dict of tensors, the format Hugging Face uses).
* Every file is treated as hostile: each header is validated before anything is allocated
  (sizes, offsets inside the file and covering the data exactly once, known dtypes, shapes
  matching byte counts, no duplicate names), and a malformed, truncated or unsupported file
  raises one error, :class:`CorruptFileError` (a ValueError) naming the file and the problem.
  Missing or unreadable files raise the OSError ``open`` gives.
* safetensors is implemented from its specification (an 8-byte little-endian header length, a
  JSON header ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``,
  then the raw little-endian data). :func:`safe_open` reads only the tensors asked for, with
  positioned reads (``os.preadv``) straight into each tensor's memory (on the CPU, the corvid
  buffer itself: no copy after the read; elsewhere a host array, then copied). It does not
  memory-map the file: a mapped file truncated by another process kills the reader with SIGBUS at the first
  access past the new end, which no check made beforehand can exclude (the file may shrink
  between the check and the access); a read just returns fewer bytes, which becomes a
  CorruptFileError. Loading a 400 MB file (20 float32 tensors) takes as long as through a map
  with the page cache warm (0.048 s, median of 5, both) and half as long cold (0.14-0.17 s
  against 0.35-0.37 s), measured on a shared 2-core machine.
* ``.npy`` and ``.npz`` are read here too, not with ``np.load``: numpy parses the header with
  ``tokenize`` and ``ast`` and lets more than ValueError through (tokenize.TokenError for an
  unclosed bracket, MemoryError for 9000 minus signs, OverflowError for a dimension of 2**64),
  allocates the declared shape before looking at the data, and returns the raw bytes of a zip
  member that is not an array. Here the header is read as a bounded Python literal, the data
  size is checked against the file (or zip member) before allocating, a zip member may not
  expand beyond what its compression method can produce (a zip bomb declaring terabytes), and
  members may not overlap (a zip bomb sharing one compressed stream between many members).
  Object arrays (pickles) are refused.
* ``.npz`` keys become zip member names (``key.npy``); a key an unzip tool would write outside
  its folder (``..``, an absolute path, a backslash, NUL) is refused with a ValueError on saving.
* Writes go through :func:`corvid._files.write_atomic`: a temporary file renamed into place, so a
  crash never leaves a half-written file where a good one was, with the permissions ``open``
  would give.

>>> import corvid as cv, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
>>> cv.save(path, {"w": cv.ones(2, 3), "b": cv.zeros(3)})
>>> with cv.safe_open(path) as f:
...     sorted(f.keys()), f.get_tensor("b").tolist()
(['b', 'w'], [0.0, 0.0, 0.0])
"""

from __future__ import annotations

import ast
import contextlib
import json
import math
import os
import re
import struct
import sys
import threading
import zipfile
import zlib
from typing import Any, BinaryIO, Callable, Iterator, Mapping

import numpy as np

from . import dtype as dt
from ._files import write_atomic
from .graph.node import Op, node
from .runtime.cpu import CPUAllocator
from .runtime.device import Buffer, canonical_device, get_device
from .tensor import Tensor


class CorruptFileError(ValueError):
    """A file is not a valid tensor file (truncated, malformed header, inconsistent sizes).

    A ValueError; the message names the file and the problem.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "bad.npy")
    >>> with open(path, "wb") as f:
    ...     _ = f.write(b"not an array")
    >>> try:
    ...     cv.load(path)
    ... except ValueError as e:
    ...     print(type(e).__name__, "-", e)
    CorruptFileError - ...bad.npy: not a valid .npy file: it does not start with the .npy magic string ...
    """


_ST_DTYPES = {"F64": dt.float64, "F32": dt.float32, "F16": dt.float16, "BF16": dt.bfloat16, "I64": dt.int64,
              "I32": dt.int32, "I16": dt.int16, "I8": dt.int8, "U64": dt.uint64, "U32": dt.uint32,
              "U16": dt.uint16, "U8": dt.uint8, "BOOL": dt.bool_,
              "F8_E4M3": dt.float8_e4m3fn, "F8_E5M2": dt.float8_e5m2}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}
_MAX_HEADER = 100 << 20  # the reference implementation's limit
_MAX_DIMS = 32  # numpy 1.x's limit (numpy 2 allows 64)
# bytes per read from a zip member: each read makes a new bytes object, then copied into the array;
# 1 MiB stays in cache (16 MiB reads made a 400 MB .npz load 2.5x slower)
_CHUNK = 1 << 20


def _as_numpy(x: Any, name: str) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.numpy()
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x).reshape(x.shape)  # (ascontiguousarray makes 0-d arrays 1-d)
    raise TypeError(f"save: {name} is a {type(x).__name__}, not a tensor")


def _shape_problem(shape: Any, itemsize: int) -> str | None:
    """Why numpy could not allocate an array of ``shape`` (a list or tuple) and ``itemsize``, or None.

    Byte counts are checked against the file elsewhere; this catches what they let through: a
    zero dimension beside huge ones, too many dimensions, sizes that are not integers."""
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        return f"invalid shape {shape!r:.100} (dimensions must be integers >= 0)"
    if len(shape) > _MAX_DIMS:
        return f"{len(shape)} dimensions (at most {_MAX_DIMS})"
    if math.prod(s for s in shape if s) * itemsize > sys.maxsize:
        return f"shape {tuple(shape)!r:.100} is too large for any array"
    return None


def _byte_view(arr: np.ndarray) -> memoryview:
    """The bytes of the C- or Fortran-ordered ``arr``, writable, in memory order."""
    return memoryview((arr.T if not arr.flags.c_contiguous else arr).reshape(-1).view(np.uint8))


def _native(arr: np.ndarray) -> np.ndarray:
    """``arr`` in native byte order, labelled ``=`` (Tensor copies an array labelled ``<``, even
    on a little-endian machine), with every bool 0 or 1 (a file's other bytes would make
    ``True != True`` in kernels that compare the bytes)."""
    native = arr.dtype.newbyteorder("=")
    arr = arr.view(native) if arr.dtype.isnative else arr.astype(native)
    if arr.dtype == np.bool_:
        arr = arr.view(np.uint8) != 0
    return arr


# --- safetensors ----------------------------------------------------------------------------------------


def save_safetensors(tensors: Mapping[str, Any], path: str | os.PathLike,
                     metadata: Mapping[str, str] | None = None) -> None:
    """Write ``{name: tensor}`` as a safetensors file (atomically)."""
    if not isinstance(tensors, Mapping):
        raise TypeError(f"save_safetensors needs a dict of tensors, got {type(tensors).__name__}")
    header: dict[str, Any] = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("safetensors metadata must map str to str")
        header["__metadata__"] = dict(metadata)
    arrays, offset = [], 0
    for name in sorted(tensors):
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"invalid tensor name {name!r}")
        a = _as_numpy(tensors[name], name)
        d = dt.from_numpy(a.dtype)
        if d not in _ST_NAMES:
            raise TypeError(f"save_safetensors: dtype {d.name} of {name!r} has no safetensors name")
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes() if a.dtype.byteorder == ">" else a.tobytes()
        header[name] = {"dtype": _ST_NAMES[d], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        arrays.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # align the data to 8 bytes, as the reference writer does

    def write(f: BinaryIO) -> None:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in arrays:
            f.write(raw)

    write_atomic(path, write)


class SafeTensorsFile:
    """An open safetensors file: ``keys()``, ``get_tensor(name)`` (reads only that tensor),
    ``metadata()``. Use as a context manager (:func:`safe_open`) or call ``close()``.

    Threads may call ``get_tensor`` at the same time; ``close`` waits for the reads in flight.
    CorruptFileError when the header is invalid (on opening) or when the file was truncated
    after it was opened (from ``get_tensor``)."""

    def __init__(self, path: str | os.PathLike, device: str | None = None):
        self.path, self.device = os.fspath(path), device
        self._file = open(self.path, "rb")
        self._lock = threading.Lock()
        self._readers, self._closed = 0, False
        try:
            self._entries, self._meta, self._data_start = self._parse(os.fstat(self._file.fileno()).st_size)
        except BaseException:
            self._file.close()
            raise

    def _fail(self, why: str) -> CorruptFileError:
        return CorruptFileError(f"{self.path}: not a valid safetensors file: {why}")

    def _pread(self, n: int, offset: int, what: str) -> bytes:
        raw = os.pread(self._file.fileno(), n, offset)
        if len(raw) < n:
            raise self._fail(f"the file ends at byte {offset + len(raw)}, inside the {what} (truncated?)")
        return raw

    def _unique(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise self._fail(f"the header names {key!r} twice")
            out[key] = value
        return out

    def _parse(self, size: int) -> tuple[dict[str, tuple[dt.DType, tuple[int, ...], int, int]], dict, int]:
        if size < 8:
            raise self._fail(f"{size} bytes, too short for the 8-byte header length")
        (n,) = struct.unpack("<Q", self._pread(8, 0, "header length"))
        if n > _MAX_HEADER or 8 + n > size:
            raise self._fail(f"header length {n} does not fit in a {size}-byte file (truncated?)")
        try:
            header = json.loads(self._pread(n, 8, "header").decode("utf-8"), object_pairs_hook=self._unique)
        except CorruptFileError:
            raise
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise self._fail(f"header is not JSON ({e})") from None
        if not isinstance(header, dict):
            raise self._fail("header is not a JSON object")
        meta = header.pop("__metadata__", {}) or {}
        if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise self._fail("__metadata__ must map strings to strings")
        start, data_len = 8 + n, size - 8 - n
        entries, spans = {}, []
        for name, info in header.items():
            if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
                raise self._fail(f"entry {name!r} must have exactly dtype, shape and data_offsets")
            d = _ST_DTYPES.get(info["dtype"]) if isinstance(info["dtype"], str) else None
            if d is None:
                raise self._fail(f"entry {name!r} has dtype {info['dtype']!r}, which corvid does not support")
            shape, offs = info["shape"], info["data_offsets"]
            problem = _shape_problem(shape, d.itemsize) if isinstance(shape, list) else f"shape {shape!r} is no list"
            if problem:
                raise self._fail(f"entry {name!r}: {problem}")
            if (not isinstance(offs, list) or len(offs) != 2
                    or not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)
                    or not 0 <= offs[0] <= offs[1] <= data_len):
                raise self._fail(f"entry {name!r} has data_offsets {offs!r} outside the {data_len}-byte data "
                                 "(truncated?)")
            if offs[1] - offs[0] != math.prod(shape) * d.itemsize:
                raise self._fail(f"entry {name!r}: {offs[1] - offs[0]} bytes for shape {shape} of {info['dtype']}")
            entries[name] = (d, tuple(shape), offs[0], offs[1])
            spans.append((offs[0], offs[1]))
        pos = 0
        for a, b in sorted(spans):  # the spec: the buffers cover the data exactly, without overlap
            if a != pos:
                raise self._fail("tensor data overlaps or leaves gaps")
            pos = b
        if pos != data_len:
            raise self._fail(f"{data_len - pos} bytes after the last tensor")
        return entries, meta, start

    def keys(self) -> list[str]:
        return list(self._entries)

    def metadata(self) -> dict[str, str]:
        return dict(self._meta)

    def get_tensor(self, name: str) -> Tensor:
        """The tensor ``name``, read from the file now (only its bytes). KeyError for an unknown
        name, ValueError once closed, CorruptFileError if the file was truncated since opening."""
        if name not in self._entries:
            raise KeyError(f"{self.path} has no tensor {name!r}; it has {sorted(self._entries)[:10]}")
        d, shape, a, b = self._entries[name]
        direct = self._direct_buffer(d, math.prod(shape))
        if direct is not None:  # read into the tensor's own memory: no second copy (a 525 MB table was two)
            device, buf = direct
            self._read_into(name, memoryview(buf.handle)[:b - a], self._data_start + a)
            return Tensor._from_node(node(Op.BUFFER, (), buf, d, shape), device)
        out = np.empty(shape, np.dtype(d.np).newbyteorder("<"))
        self._read_into(name, _byte_view(out), self._data_start + a)
        return Tensor(_native(out), device=self.device)

    def _direct_buffer(self, d: dt.DType, count: int) -> tuple[str, Buffer] | None:
        """(device, an empty Buffer of ``count`` elements) when the file's bytes can be read into
        the device's memory as they are: a CPU device (its blocks are host bytes), a little-endian
        machine (the format's order), and not bool (whose bytes are normalized to 0 and 1)."""
        if sys.byteorder != "little" or d == dt.bool_ or count == 0:
            return None
        device = canonical_device(self.device)
        if type(device) is not str or not isinstance(get_device(device).allocator, CPUAllocator):
            return None
        return device, Buffer(device, d, count)

    def _read_into(self, name: str, view: memoryview, offset: int) -> None:
        done = 0
        with self._reading() as fd:
            while done < len(view):
                got = os.preadv(fd, [view[done:]], offset + done)
                if got == 0:
                    raise CorruptFileError(f"{self.path}: tensor {name!r} needs bytes {offset}..{offset + len(view)}, "
                                           f"but the file now ends at byte {offset + done}: it was truncated after "
                                           "it was opened")
                done += got

    @contextlib.contextmanager
    def _reading(self) -> Iterator[int]:
        """The descriptor, kept open until the read ends: closing it under a read would let the
        number be reused by another file, and the read would return that file's bytes."""
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.path} is closed")
            self._readers += 1
        try:
            yield self._file.fileno()
        finally:
            with self._lock:
                self._readers -= 1
                if self._closed and not self._readers:
                    self._file.close()

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if not self._readers:
                self._file.close()

    def __enter__(self) -> SafeTensorsFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def safe_open(path: str | os.PathLike, framework: str = "corvid", device: str | None = None) -> SafeTensorsFile:
    """Open a safetensors file for lazy reading (the ``safetensors`` package's API shape).

    Returns a :class:`SafeTensorsFile`: ``keys()``, ``metadata()``, and ``get_tensor(name)``, which
    reads only that tensor's bytes. ``framework`` is accepted for compatibility and ignored.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
    >>> cv.save(path, {"w": cv.ones(2, 3), "b": cv.zeros(3)}, metadata={"step": "10"})
    >>> with cv.safe_open(path) as f:
    ...     f.keys(), f.metadata(), f.get_tensor("b")
    (['b', 'w'], {'step': '10'}, Tensor([0., 0., 0.]))
    """
    return SafeTensorsFile(path, device)


def load_safetensors(path: str | os.PathLike, names: list[str] | None = None,
                     device: str | None = None) -> dict[str, Tensor]:
    """The tensors of a safetensors file (only ``names`` if given)."""
    with safe_open(path, device=device) as f:
        return {k: f.get_tensor(k) for k in (f.keys() if names is None else names)}


# --- .npy and .npz -----------------------------------------------------------------------------------------

_NPY_MAGIC = b"\x93NUMPY"
_NPY_MAX_HEADER = 10_000  # np.load's own default limit (max_header_size); an array's header is ~120 bytes
_NPY_DESCR = re.compile(r"[<>|=]?[biufc]\d+")  # '<f4', '|b1', '>i8': the scalar kinds corvid holds
# printable ASCII and white space but the backslash: all an array's header needs, and no escapes
# (which make ast warn)
_NPY_HEADER_TEXT = re.compile(r"[\t\n\f\r\x20-\x5b\x5d-\x7e]*")
# the most bytes one compressed byte can become (deflate: 1032); numpy writes no other method
_ZIP_EXPANSION = {zipfile.ZIP_STORED: 1, zipfile.ZIP_DEFLATED: 1032}


def _parse_npy_header(text: str, fail: Callable[[str], CorruptFileError]) -> tuple[np.dtype, tuple[int, ...], bool]:
    if not _NPY_HEADER_TEXT.fullmatch(text):
        raise fail(f"the header {text[:100]!r} has characters no array header has")
    try:
        header = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
        # the header is at most 10 kB: a MemoryError or RecursionError is the parser's depth limit
        raise fail(f"the header is not a Python literal ({type(e).__name__}: {e})") from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise fail(f"the header {text.strip()[:100]!r} is not a dict of descr, fortran_order and shape")
    descr, fortran, shape = header["descr"], header["fortran_order"], header["shape"]
    if not isinstance(fortran, bool):
        raise fail(f"fortran_order is {fortran!r}, not True or False")
    if isinstance(descr, str) and descr.lstrip("<>|=").startswith("O"):
        raise fail("it holds Python objects, stored as a pickle, which corvid never loads")
    if not isinstance(descr, str) or not _NPY_DESCR.fullmatch(descr):
        raise fail(f"descr {descr!r:.100} is not a dtype corvid holds (booleans, integers, floats and complex "
                   "numbers; no structured, string, date or object arrays)")
    try:
        dtype = np.dtype(descr)
    except (TypeError, ValueError) as e:
        raise fail(f"descr {descr!r} is not a numpy dtype ({e})") from None
    try:
        dt.from_numpy(dtype.newbyteorder("="))
    except TypeError:
        raise fail(f"dtype {descr!r} ({dtype.name}) is not one corvid supports") from None
    problem = _shape_problem(shape, dtype.itemsize) if isinstance(shape, tuple) else f"shape {shape!r} is no tuple"
    if problem:
        raise fail(problem)
    return dtype, shape, fortran


def _read_npy(f: BinaryIO, size: int, where: str) -> np.ndarray:
    """The array in the ``size`` bytes of ``.npy`` data that ``f`` reads from its start.
    CorruptFileError naming ``where`` for anything but one whole array of a dtype corvid has."""
    def fail(why: str) -> CorruptFileError:
        return CorruptFileError(f"{where}: not a valid .npy file: {why}")

    def take(n: int, what: str) -> bytes:
        raw = f.read(n)
        if len(raw) < n:
            raise fail(f"it ends inside the {what} (truncated?)")
        return raw

    prefix = f.read(8)
    if len(prefix) < 8 or prefix[:6] != _NPY_MAGIC:
        raise fail(f"it does not start with the .npy magic string \\x93NUMPY (it starts with {prefix!r})")
    major, minor = prefix[6], prefix[7]
    if (major, minor) not in ((1, 0), (2, 0), (3, 0)):
        raise fail(f"unknown format version {major}.{minor}")
    width = 2 if major == 1 else 4
    n = int.from_bytes(take(width, "header length"), "little")
    if n > _NPY_MAX_HEADER:
        raise fail(f"a {n}-byte header (at most {_NPY_MAX_HEADER})")
    raw = take(n, "header")
    try:
        text = raw.decode("utf-8" if major == 3 else "latin1")
    except UnicodeDecodeError as e:
        raise fail(f"the header is not UTF-8 ({e})") from None
    if major == 1:
        text = re.sub(r"(?<=\d)L\b", "", text)  # Python 2 wrote long integers as 3L
    dtype, shape, fortran = _parse_npy_header(text, fail)
    need, have = math.prod(shape) * dtype.itemsize, size - 8 - width - n
    if have < need:
        raise fail(f"shape {shape} of {dtype.name} needs {need} bytes of data, the file has {have} (truncated?)")
    if have > need:
        raise fail(f"{have - need} bytes follow the {need} bytes of data of shape {shape} of {dtype.name} (several "
                   "arrays saved into one file? np.load would read only the first)")
    arr = np.empty(shape, dtype, order="F" if fortran else "C")
    view, done = _byte_view(arr), 0
    while done < need:
        got = f.readinto(view[done:done + _CHUNK])
        if not got:
            raise fail(f"the data ends after {done} of {need} bytes (the file shrank while it was read)")
        done += got
    return _native(arr)


def _read_npz(z: zipfile.ZipFile, size: int, path: str) -> Iterator[tuple[str, np.ndarray]]:
    def fail(why: str) -> CorruptFileError:
        return CorruptFileError(f"{path}: not a valid .npz file: {why}")

    infos = z.infolist()
    seen: set[str] = set()
    for info in infos:
        if info.filename in seen:
            raise fail(f"two members are named {info.filename!r}")
        seen.add(info.filename)
    end, before = 0, "the start of the file"
    for info in sorted(infos, key=lambda i: i.header_offset):
        # 30 bytes: a local header without its name, so the spans are at most the real ones
        if info.header_offset < end:
            raise fail(f"member {info.filename!r} overlaps {before} (a damaged size, or a zip bomb sharing "
                       "data between members)")
        end, before = info.header_offset + 30 + info.compress_size, f"member {info.filename!r}"
    if end > size:
        raise fail(f"{before} ends after the {size}-byte file (truncated?)")
    for info in infos:
        member = f"{path} (member {info.filename!r})"
        if not info.filename.endswith(".npy"):
            raise fail(f"member {info.filename!r} is not an array (an .npz holds only <name>.npy members)")
        if info.flag_bits & 0x1:
            raise fail(f"member {info.filename!r} is encrypted")
        expansion = _ZIP_EXPANSION.get(info.compress_type)
        if expansion is None:
            raise fail(f"member {info.filename!r} uses compression method {info.compress_type}; numpy writes only "
                       f"stored ({zipfile.ZIP_STORED}) or deflated ({zipfile.ZIP_DEFLATED}) members")
        if info.file_size > expansion * info.compress_size:
            raise fail(f"member {info.filename!r} declares {info.file_size} bytes from {info.compress_size} "
                       f"compressed bytes, more than method {info.compress_type} can produce (a zip bomb?)")
        with z.open(info) as m:
            yield info.filename[:-4], _read_npy(m, info.file_size, member)


def _npz_arrays(path: str) -> Iterator[tuple[str, np.ndarray]]:
    """The (key, array) pairs of the .npz file at ``path``, one at a time: the caller turns each
    into a tensor before the next is read (holding them all as numpy arrays too doubled the peak
    memory and made a 400 MB load 1.5x slower), and its own errors are not taken for a bad file."""
    with open(path, "rb") as f:  # a missing or unreadable file raises open's OSError, not CorruptFileError
        size = os.fstat(f.fileno()).st_size
        try:
            with zipfile.ZipFile(f) as z:
                yield from _read_npz(z, size, path)
        except CorruptFileError:
            raise
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError, NotImplementedError) as e:
            # what zipfile raises for a bad archive: bad offsets seek before the start (OSError), a bad
            # CRC or structure (BadZipFile), damaged compressed data (zlib.error, EOFError), a member
            # needing a newer zip version than it reads (NotImplementedError)
            raise CorruptFileError(f"{path}: not a valid .npz file: {e}") from None


def _npz_member(key: Any) -> str:
    """The zip member name of ``key``: ``key.npy``, refusing keys that an unzip tool would turn into
    a path outside its folder (or that zip cannot hold)."""
    if not isinstance(key, str):
        raise TypeError(f"save: .npz keys must be strings, got {key!r}")
    if ("\0" in key or "\\" in key or re.match(r"[A-Za-z]:", key)
            or any(part in ("", ".", "..") for part in key.split("/"))):
        raise ValueError(f"save: .npz key {key!r} is unsafe as a zip member name: unzip tools extract '..', "
                         "'/x', backslashes and drive letters ('C:') outside their folder, and NUL or empty names "
                         "are invalid ('a/b' is kept); rename it, or save as .safetensors, where names are only names")
    return key + ".npy"


def _write_npz(f: BinaryIO, arrays: dict[str, np.ndarray]) -> None:
    # written here rather than with np.savez, which takes keys as keyword arguments: a key "file"
    # raises TypeError and a key "allow_pickle" is silently not saved
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, a in arrays.items():
            with z.open(name, "w", force_zip64=True) as m:
                np.lib.format.write_array(m, a, allow_pickle=False)


# --- the front door ------------------------------------------------------------------------------------------


def _numpy_lacks(a: np.ndarray) -> bool:
    """Whether ``a``'s dtype is one of ml_dtypes' (bfloat16, the 8-bit floats), which .npy cannot name."""
    return a.dtype.kind == "V" or dt.from_numpy(a.dtype) in (dt.bfloat16, *dt.FLOAT8_DTYPES)


def save(path: str | os.PathLike, obj: Any, metadata: Mapping[str, str] | None = None) -> None:
    """Save a tensor (``.npy``) or a dict of tensors (``.npz``, ``.safetensors``), atomically.

    A new file gets the permissions ``open`` would give; an existing one keeps its mode, and a
    symbolic link is written through. TypeError for a value that is not a tensor or a dtype the
    format cannot name; ValueError for an unknown extension or an ``.npz`` key that would be
    unsafe as a zip member name (``"../x"``). PyTorch's order, ``save(obj, path)``, is accepted too.
    ``metadata`` (a dict of strings) is stored in a ``.safetensors`` header.

    The files are numpy's and Hugging Face's own formats: ``np.load`` and the ``safetensors``
    package read them.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> cv.save(os.path.join(folder, "x.npy"), cv.arange(3))
    >>> np.load(os.path.join(folder, "x.npy"))
    array([0, 1, 2])
    >>> cv.save(os.path.join(folder, "x.npy"), cv.ones(2, dtype=cv.bfloat16))
    Traceback (most recent call last):
        ...
    TypeError: save: .npy cannot hold bfloat16 (numpy has no such type); use .safetensors
    """
    if isinstance(obj, (str, os.PathLike)) and not isinstance(path, (str, os.PathLike)):
        path, obj = obj, path  # (torch.save's order)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"save(path, obj): path must be a file name, got {type(path).__name__}")
    p = os.fspath(path)
    ext = os.path.splitext(p)[1].lower()
    if ext == ".safetensors":
        return save_safetensors(obj, p, metadata)
    if ext == ".npy":
        a = _as_numpy(obj, "the value")
        if _numpy_lacks(a):
            raise TypeError(f"save: .npy cannot hold {a.dtype.name} (numpy has no such type); use .safetensors")
        return write_atomic(p, lambda f: np.lib.format.write_array(f, a, allow_pickle=False))
    if ext == ".npz":
        if not isinstance(obj, Mapping):
            raise TypeError(f"save: .npz needs a dict of tensors, got {type(obj).__name__}")
        arrays = {_npz_member(k): _as_numpy(v, k) for k, v in obj.items()}
        lacking = next((a.dtype.name for a in arrays.values() if _numpy_lacks(a)), None)
        if lacking:
            raise TypeError(f"save: .npz cannot hold {lacking} (numpy has no such type); use .safetensors")
        return write_atomic(p, lambda f: _write_npz(f, arrays))
    raise ValueError(f"save: unknown extension {ext!r} in {p}; use .npy, .npz or .safetensors")


def load(path: str | os.PathLike, device: str | None = None) -> Any:
    """Load a ``.npy`` (a tensor), ``.npz`` or ``.safetensors`` file (a dict of tensors).

    CorruptFileError (a ValueError) naming the file and the problem for a malformed, truncated
    or unsupported file (object arrays included: loading never unpickles); ValueError for an
    unknown extension; ``open``'s OSError for a missing or unreadable file. ``device`` places the
    tensors (the default device if None).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "params.npz")
    >>> cv.save(path, {"w": cv.ones(2, 2), "b": cv.asarray([1, 2])})
    >>> params = cv.load(path)
    >>> sorted(params), params["b"]
    (['b', 'w'], Tensor([1, 2]))
    """
    p = os.fspath(path)
    ext = os.path.splitext(p)[1].lower()
    if ext == ".safetensors":
        return load_safetensors(p, device=device)
    if ext == ".npy":
        with open(p, "rb") as f:
            return Tensor(_read_npy(f, os.fstat(f.fileno()).st_size, p), device=device)
    if ext == ".npz":
        return {k: Tensor(a, device=device) for k, a in _npz_arrays(p)}
    raise ValueError(f"load: unknown extension {ext!r} in {p}; use .npy, .npz or .safetensors")


__all__ = ["CorruptFileError", "SafeTensorsFile", "load", "load_safetensors", "safe_open", "save", "save_safetensors"]

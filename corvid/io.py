"""Saving and loading tensors: ``.npy``, ``.npz`` and safetensors. Loading never executes code.

* ``save(path, x)`` / ``load(path)`` pick the format from the extension: ``.npy`` (one tensor),
  ``.npz`` (a dict of tensors), ``.safetensors`` (a dict of tensors, the format Hugging Face uses).
  numpy files are read with ``allow_pickle=False``.
* safetensors is implemented from its specification (an 8-byte little-endian header length, a
  JSON header ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``,
  then the raw little-endian data). :func:`safe_open` maps the file and reads only the tensors
  asked for. Every header is validated (sizes, offsets inside the file and covering the data
  exactly once, known dtypes, shapes matching byte counts): a malformed or truncated file raises
  :class:`CorruptFileError` naming the problem.
* Writes go to a temporary file in the same folder and are renamed into place, so a crash never
  leaves a half-written file where a good one was.

>>> import corvid as cv, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
>>> cv.save(path, {"w": cv.ones(2, 3), "b": cv.zeros(3)})
>>> with cv.safe_open(path) as f:
...     sorted(f.keys()), f.get_tensor("b").tolist()
(['b', 'w'], [0.0, 0.0, 0.0])
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
import tempfile
import zipfile
from typing import Any, Iterator, Mapping

import numpy as np

from . import dtype as dt
from .tensor import Tensor


class CorruptFileError(ValueError):
    """A file is not a valid tensor file (truncated, malformed header, inconsistent sizes)."""


_ST_DTYPES = {"F64": dt.float64, "F32": dt.float32, "F16": dt.float16, "BF16": dt.bfloat16, "I64": dt.int64,
              "I32": dt.int32, "I16": dt.int16, "I8": dt.int8, "U64": dt.uint64, "U32": dt.uint32,
              "U16": dt.uint16, "U8": dt.uint8, "BOOL": dt.bool_,
              "F8_E4M3": dt.float8_e4m3fn, "F8_E5M2": dt.float8_e5m2}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}
_MAX_HEADER = 100 << 20  # the reference implementation's limit


def _atomic_write(path: str | os.PathLike, write: Any) -> None:
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".corvid-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _as_numpy(x: Any, name: str) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.numpy()
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x).reshape(x.shape)  # (ascontiguousarray makes 0-d arrays 1-d)
    raise TypeError(f"save: {name} is a {type(x).__name__}, not a tensor")


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

    def write(f: Any) -> None:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in arrays:
            f.write(raw)

    _atomic_write(path, write)


class SafeTensorsFile:
    """An open safetensors file: ``keys()``, ``get_tensor(name)`` (reads only that tensor),
    ``metadata()``. Use as a context manager (:func:`safe_open`) or call ``close()``."""

    def __init__(self, path: str | os.PathLike, device: str | None = None):
        self.path, self.device = os.fspath(path), device
        self._file = open(self.path, "rb")
        try:
            size = os.fstat(self._file.fileno()).st_size
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if size else None
            self._entries, self._meta, self._data_start = self._parse(size)
        except BaseException:
            self.close()
            raise

    def _fail(self, why: str) -> CorruptFileError:
        return CorruptFileError(f"{self.path}: not a valid safetensors file: {why}")

    def _parse(self, size: int) -> tuple[dict[str, tuple[dt.DType, tuple[int, ...], int, int]], dict, int]:
        if size < 8 or self._map is None:
            raise self._fail(f"{size} bytes, too short for the 8-byte header length")
        (n,) = struct.unpack("<Q", self._map[:8])
        if n > _MAX_HEADER or 8 + n > size:
            raise self._fail(f"header length {n} does not fit in a {size}-byte file (truncated?)")
        try:
            header = json.loads(bytes(self._map[8:8 + n]).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
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
            d = _ST_DTYPES.get(info["dtype"])
            if d is None:
                raise self._fail(f"entry {name!r} has dtype {info['dtype']!r}, which corvid does not support")
            shape, offs = info["shape"], info["data_offsets"]
            if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                      for s in shape):
                raise self._fail(f"entry {name!r} has an invalid shape {shape!r}")
            if (not isinstance(offs, list) or len(offs) != 2 or not all(isinstance(o, int) for o in offs)
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
        if name not in self._entries:
            raise KeyError(f"{self.path} has no tensor {name!r}; it has {sorted(self._entries)[:10]}")
        if self._map is None:
            raise ValueError(f"{self.path} is closed")
        d, shape, a, b = self._entries[name]
        arr = np.frombuffer(self._map, dtype=np.dtype(d.np).newbyteorder("<"), count=math.prod(shape),
                            offset=self._data_start + a).reshape(shape)
        return Tensor(arr.astype(d.np, copy=True), device=self.device)  # copy: the map may close

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def close(self) -> None:
        if getattr(self, "_map", None) is not None:
            self._map.close()
            self._map = None
        if getattr(self, "_file", None) is not None:
            self._file.close()

    def __enter__(self) -> SafeTensorsFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def safe_open(path: str | os.PathLike, framework: str = "corvid", device: str | None = None) -> SafeTensorsFile:
    """Open a safetensors file for lazy reading (the ``safetensors`` package's API shape)."""
    return SafeTensorsFile(path, device)


def load_safetensors(path: str | os.PathLike, names: list[str] | None = None,
                     device: str | None = None) -> dict[str, Tensor]:
    """The tensors of a safetensors file (only ``names`` if given)."""
    with safe_open(path, device=device) as f:
        return {k: f.get_tensor(k) for k in (f.keys() if names is None else names)}


# --- numpy formats and the front door --------------------------------------------------------------------


def _numpy_lacks(a: np.ndarray) -> bool:
    """Whether ``a``'s dtype is one of ml_dtypes' (bfloat16, the 8-bit floats), which .npy cannot name."""
    return a.dtype.kind == "V" or dt.from_numpy(a.dtype) in (dt.bfloat16, *dt.FLOAT8_DTYPES)


def save(path: str | os.PathLike, obj: Any, metadata: Mapping[str, str] | None = None) -> None:
    """Save a tensor (``.npy``) or a dict of tensors (``.npz``, ``.safetensors``), atomically."""
    p = os.fspath(path)
    ext = os.path.splitext(p)[1].lower()
    if ext == ".safetensors":
        return save_safetensors(obj, p, metadata)
    if ext == ".npy":
        a = _as_numpy(obj, "the value")
        if _numpy_lacks(a):
            raise TypeError(f"save: .npy cannot hold {a.dtype.name} (numpy has no such type); use .safetensors")
        return _atomic_write(p, lambda f: np.save(f, a, allow_pickle=False))
    if ext == ".npz":
        if not isinstance(obj, Mapping):
            raise TypeError(f"save: .npz needs a dict of tensors, got {type(obj).__name__}")
        arrays = {k: _as_numpy(v, k) for k, v in obj.items()}
        lacking = next((a.dtype.name for a in arrays.values() if _numpy_lacks(a)), None)
        if lacking:
            raise TypeError(f"save: .npz cannot hold {lacking} (numpy has no such type); use .safetensors")
        return _atomic_write(p, lambda f: np.savez(f, **arrays))
    raise ValueError(f"save: unknown extension {ext!r} in {p}; use .npy, .npz or .safetensors")


def load(path: str | os.PathLike, device: str | None = None) -> Any:
    """Load a ``.npy`` (a tensor), ``.npz`` or ``.safetensors`` file (a dict of tensors)."""
    p = os.fspath(path)
    ext = os.path.splitext(p)[1].lower()
    if ext == ".safetensors":
        return load_safetensors(p, device=device)
    if ext not in (".npy", ".npz"):
        raise ValueError(f"load: unknown extension {ext!r} in {p}; use .npy, .npz or .safetensors")
    try:
        data = np.load(p, allow_pickle=False)
        if ext == ".npy":
            return Tensor(data, device=device)
        with data:
            return {k: Tensor(data[k], device=device) for k in data.files}
    except (ValueError, EOFError, OSError, zipfile.BadZipFile) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise CorruptFileError(f"{p}: not a valid {ext} file: {e}") from None


__all__ = ["CorruptFileError", "SafeTensorsFile", "load", "load_safetensors", "safe_open", "save", "save_safetensors"]

"""The IDX file format (MNIST's): a magic number, the dimensions, then the raw big-endian data.

Header: two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
0x0E float64), the number of dimensions, then each dimension as a big-endian uint32. Files may be
gzipped (detected from their first bytes, not their name). Every size is checked against the file:
a truncated or malformed file raises :class:`corvid.CorruptFileError` naming the problem.

>>> import gzip, io
>>> raw = bytes([0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3]) + bytes(range(6))
>>> parse_idx(raw).tolist()
[[0, 1, 2], [3, 4, 5]]
>>> parse_idx(gzip.compress(raw)).shape
(2, 3)
"""

from __future__ import annotations

import math
import os
import zlib

import numpy as np

from ..io import CorruptFileError, _shape_problem

__all__ = ["parse_idx", "read_idx"]

_TYPES = {0x08: np.dtype(np.uint8), 0x09: np.dtype(np.int8), 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
          0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
_GZIP_MAGIC = b"\x1f\x8b"


def parse_idx(data: bytes, name: str = "IDX data") -> np.ndarray:
    """The array stored in ``data`` (IDX bytes, gzipped or not), in native byte order.

    CorruptFileError (a ValueError) for a bad gzip stream, a bad magic number, an unknown type
    code, dimensions no array can have, or a data size that differs from what the dimensions
    announce; ``name`` names the data in those messages.

    >>> raw = bytes([0, 0, 0x08, 1, 0, 0, 0, 3]) + bytes([7, 8, 9])   # uint8, 1 dimension of 3
    >>> parse_idx(raw)
    array([7, 8, 9], dtype=uint8)
    >>> parse_idx(bytes([0, 0, 0x0D, 1, 0, 0, 0, 2]) + np.array([1.5, -2.0], ">f4").tobytes())
    array([ 1.5, -2. ], dtype=float32)
    >>> parse_idx(raw[:-1], "labels")
    Traceback (most recent call last):
        ...
    corvid.io.CorruptFileError: labels: dimensions (3,) of uint8 need 3 bytes of data, the file has 2
    """
    if data[:2] == _GZIP_MAGIC:
        try:
            data = _gunzip(data, name)
        except (OSError, EOFError, zlib.error) as e:
            raise CorruptFileError(f"{name}: not a valid gzip stream ({e})") from e
    if len(data) < 4:
        raise CorruptFileError(f"{name}: {len(data)} bytes is too short for an IDX header")
    if data[0] != 0 or data[1] != 0 or data[2] not in _TYPES:
        raise CorruptFileError(f"{name}: bad IDX magic number 0x{data[:4].hex()} (expected 0x0000TTNN with "
                               f"type TT in {', '.join(f'{t:02x}' for t in _TYPES)})")
    dtype, ndim = _TYPES[data[2]], data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise CorruptFileError(f"{name}: truncated header ({len(data)} bytes, {ndim} dimensions need {header})")
    shape = tuple(int(d) for d in np.frombuffer(data, ">u4", ndim, 4))
    problem = _shape_problem(shape, dtype.itemsize)  # a zero dimension lets any others pass the size check
    if problem:
        raise CorruptFileError(f"{name}: {problem}")
    expected = math.prod(shape) * dtype.itemsize
    if len(data) - header != expected:
        raise CorruptFileError(f"{name}: dimensions {shape} of {dtype.name} need {expected} bytes of data, the file "
                               f"has {len(data) - header}")
    return np.frombuffer(data, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _gunzip(data: bytes, name: str) -> bytes:
    """``data`` decompressed (one gzip member), but never past what its IDX header announces: a
    small file that inflates to gigabytes (a gzip bomb) is refused once it passes its header's
    size, before it is held in memory. A stream that is not IDX inside is returned as far as its
    first 4 bytes, for :func:`parse_idx` to name the problem."""
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = d.decompress(data, 4)
    if len(out) < 4 or out[0] or out[1] or out[2] not in _TYPES:
        return out
    header = 4 + 4 * out[3]
    out += d.decompress(d.unconsumed_tail, header - 4)
    if len(out) < header:
        return out
    shape = tuple(int(x) for x in np.frombuffer(out, ">u4", out[3], 4))
    if _shape_problem(shape, _TYPES[out[2]].itemsize):
        return out
    size = header + math.prod(shape) * _TYPES[out[2]].itemsize
    out += d.decompress(d.unconsumed_tail, size - header + 1)
    if len(out) > size:
        raise CorruptFileError(f"{name}: the gzip stream holds more than the {size} bytes its IDX header announces")
    if not d.eof and not d.unconsumed_tail and d.decompress(b"", 1) == b"":
        raise CorruptFileError(f"{name}: truncated gzip stream")
    return out


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The array in the IDX file at ``path`` (gzipped or not); see :func:`parse_idx`.

    >>> import gzip, pathlib
    >>> raw = bytes([0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 2]) + bytes([1, 2, 3, 4])   # uint8 (2, 2)
    >>> _ = pathlib.Path("tiny-idx2-ubyte.gz").write_bytes(gzip.compress(raw))
    >>> read_idx("tiny-idx2-ubyte.gz")
    array([[1, 2],
           [3, 4]], dtype=uint8)
    """
    with open(path, "rb") as f:
        return parse_idx(f.read(), os.fspath(path))

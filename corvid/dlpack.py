"""DLPack interchange: share CPU memory with numpy, torch and any other DLPack library, no copy.

Import (:func:`from_dlpack`): numpy consumes the producer's capsule (it implements every DLPack
version and keeps the producer alive); corvid wraps that memory in a :class:`Buffer` that is never
pooled, so the tensor reads the producer's memory for as long as it lives.

Export (``Tensor.__dlpack__``): the tensor is realized, and numpy produces the capsule for a view
of its buffer. The view's base is a small holder that references the corvid Buffer, so the capsule's
deleter (numpy's) keeps the Buffer out of the pool until the consumer lets go of it. Delegating
the capsule structs to numpy, instead of hand-written ctypes, leaves the ABI details (versioned
and legacy capsules, flags, deleters) to a well-kept implementation.

Shared memory is shared both ways: writes through the other library's view are seen by corvid
tensors that read the buffer (as with any DLPack view).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import ShapeError
from . import dtype as dt
from .graph.node import Op, node
from .runtime.device import Buffer, canonical_device
from .tensor import Tensor

__all__ = ["from_dlpack", "from_numpy", "DLPACK_CPU"]

DLPACK_CPU = 1  # DLDeviceType.kDLCPU
_NUMPY_HAS_VERSIONED_DLPACK = np.lib.NumpyVersion(np.__version__) >= "2.1.0"


def _zero_copy_handle(arr: np.ndarray) -> np.ndarray | None:
    """The CPU allocator's kind of handle (1-d uint8) over ``arr``'s memory, or None if a kernel
    could not read it in place (strided, misaligned or byte-swapped)."""
    if not (arr.flags.c_contiguous and arr.flags.aligned and arr.dtype.isnative):
        return None
    return arr.reshape(-1).view(np.uint8)


def from_dlpack(x: Any, /, *, device: str | None = None, copy: bool | None = None) -> Tensor:
    """A tensor over the memory of ``x``, any object with ``__dlpack__`` (numpy, torch, jax, ...).

    Zero-copy when the memory is C-contiguous and aligned, else copied. ``copy=True`` always
    copies; ``copy=False`` raises ValueError where a copy would be needed. Only CPU producers
    (``__dlpack_device__()[0] == 1``) and the dtypes corvid has are accepted: BufferError for
    other devices, TypeError for other dtypes (complex, ...).

    >>> import numpy as np, corvid as cv
    >>> a = np.arange(3.0)
    >>> t = cv.from_dlpack(a)
    >>> np.shares_memory(np.from_dlpack(t), a)
    True
    """
    dev = host_device(device)
    if not is_cpu(dev):
        raise ValueError(f"from_dlpack: only CPU devices (CPU, CPU:1, ...) can import DLPack memory, got {device!r}")
    if isinstance(x, Tensor):
        x = x.to(dev)
        return _copy(x) if copy else x
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"from_dlpack needs an object with __dlpack__, got {type(x).__name__}")
    try:
        arr = np.from_dlpack(x)
    except (BufferError, RuntimeError, ValueError) as e:
        raise BufferError(f"from_dlpack: cannot import {type(x).__name__} ({e}); only CPU memory is supported") from e
    return from_numpy(arr, copy=copy, device=dev)


def is_cpu(device: Any) -> bool:
    """Whether ``device`` (canonical) is one of the logical CPU devices, whose memory is host memory."""
    return type(device) is str and (device == "CPU" or device.startswith("CPU:"))


def host_device(device: str | None) -> str:
    """The CPU device host memory is imported to: ``device`` (canonical); for None the default
    device when it is a CPU device, else ``'CPU'`` (other devices cannot wrap host memory)."""
    dev = canonical_device(device)
    return dev if device is not None or is_cpu(dev) else "CPU"


def from_numpy(arr: np.ndarray, copy: bool | None = None, device: str | None = None) -> Tensor:
    """A tensor on a CPU device over ``arr``'s memory (``copy`` as in :func:`from_dlpack`):
    ``device`` (``'CPU'``, ``'CPU:1'``, …), by default the default device if it is a CPU device,
    else ``'CPU'``. ValueError for a device that is not a CPU device."""
    device = host_device(device)
    if not is_cpu(device):
        raise ValueError(f"from_numpy: only CPU devices (CPU, CPU:1, ...) can hold numpy memory, got {device!r}")
    d = dt.from_numpy(arr.dtype)
    handle = None if copy else _zero_copy_handle(arr)
    if handle is None:
        if copy is False:
            raise ShapeError("copy=False: the memory is not C-contiguous and aligned, so corvid cannot read it "
                             "without a copy")
        return Tensor(np.ascontiguousarray(arr), device=device)  # Tensor(ndarray) copies
    return Tensor._from_node(node(Op.BUFFER, (), Buffer.wrap(device, d, arr.size, handle), d, arr.shape), device)


def _copy(x: Tensor) -> Tensor:
    """An eager copy into corvid-owned memory."""
    return Tensor(x.numpy(), device=x.device)


class _BufferView:
    """Exposes a Buffer's bytes through ``__array_interface__``: numpy arrays made from it keep
    this object, and so the Buffer, alive."""

    __slots__ = ("buffer", "__array_interface__")

    def __init__(self, buffer: Buffer):
        self.buffer = buffer
        handle = buffer.handle
        self.__array_interface__ = {"version": 3, "shape": (buffer.nbytes,), "typestr": "|u1",
                                    "data": (handle.ctypes.data, False)}


def export_view(t: Tensor) -> np.ndarray:
    """A writable numpy view of ``t``'s realized buffer that keeps the buffer alive (no copy)."""
    if not is_cpu(t.device):
        raise BufferError(f"DLPack export is only implemented for CPU tensors (CPU, CPU:1, ...), this one is on "
                          f"{t.device}; move it with .to('CPU') first")
    if t.dtype is dt.bfloat16 or t.dtype in dt.FLOAT8_DTYPES:
        # (DLPack 1.1 has codes for them, but numpy's producer, which makes the capsule, has none)
        raise BufferError(f"DLPack export of {t.dtype.name} is not supported (numpy's DLPack producer has no "
                          f"{t.dtype.name}); export its bytes with .bitcast(corvid.uint{8 * t.dtype.itemsize}) "
                          "or a wider float with .astype")
    t.realize()
    raw = np.asarray(_BufferView(t.node.buffer))
    return raw.view(t.dtype.np).reshape(t.shape)


def dlpack_capsule(t: Tensor, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
    """``Tensor.__dlpack__``: a DLPack capsule over ``t``'s buffer (over a copy if ``copy``)."""
    if stream is not None:
        raise BufferError(f"DLPack export from the CPU takes no stream, got {stream!r}")
    if dl_device is not None and tuple(dl_device) != (DLPACK_CPU, 0):
        raise BufferError(f"DLPack export to device {tuple(dl_device)} is not supported (only CPU, (1, 0))")
    view = export_view(t)
    if copy:
        view = view.copy()
    if _NUMPY_HAS_VERSIONED_DLPACK and max_version is not None:
        return view.__dlpack__(max_version=max_version)
    return view.__dlpack__()

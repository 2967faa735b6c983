"""The device interface: what a backend provides, and the registry that finds backends by name.

A device is four things (see ``docs/backends.md``):

* an :class:`Allocator` that hands out raw memory and copies bytes in and out;
* a ``renderer`` that turns a kernel IR into source for that device;
* ``compile(kernel, source)`` that turns source into a callable :class:`Program`;
* ``synchronize()`` that waits for launched work.

:class:`Buffer` is the device-neutral handle the rest of corvid uses. Its memory goes back to the
allocator's pool as soon as the last reference to the Buffer disappears, and the pool hands it to
the next allocation of the same size (fresh memory costs page faults).
"""

from __future__ import annotations

import importlib
from collections import defaultdict
from typing import Any

import numpy as np

from ..dtype import DType


class Allocator:
    """Raw memory for one device, with a pool of freed blocks reused by exact byte size.

    Subclasses implement ``_alloc``, ``copyin`` and ``copyout``.
    """

    def __init__(self, pool_limit_bytes: int = 2 << 30):
        self._pool: dict[int, list[Any]] = defaultdict(list)
        self._pooled_bytes = 0
        self.pool_limit_bytes = pool_limit_bytes

    def alloc(self, nbytes: int) -> Any:
        free = self._pool.get(nbytes)
        if free:
            self._pooled_bytes -= nbytes
            return free.pop()
        return self._alloc(nbytes)

    def free(self, handle: Any, nbytes: int) -> None:
        if self._pooled_bytes + nbytes <= self.pool_limit_bytes:
            self._pool[nbytes].append(handle)
            self._pooled_bytes += nbytes

    def clear_pool(self) -> None:
        """Release every pooled block back to the system."""
        self._pool.clear()
        self._pooled_bytes = 0

    def _alloc(self, nbytes: int) -> Any:
        raise NotImplementedError

    def copyin(self, handle: Any, data: np.ndarray) -> None:
        raise NotImplementedError

    def copyout(self, handle: Any, nbytes: int) -> np.ndarray:
        """Return the bytes of ``handle`` as a new uint8 array."""
        raise NotImplementedError


class Program:
    """A compiled kernel. ``__call__(handles)`` runs it on the allocator handles of its buffers
    (output first, then inputs, in the kernel's parameter order)."""

    def __call__(self, handles: list[Any]) -> None:
        raise NotImplementedError


class Device:
    """A backend. Subclasses set ``name``, ``allocator``, ``renderer`` and implement ``compile``."""

    name: str = ""
    allocator: Allocator
    renderer: Any  # an object with ``render(kernel) -> str`` (see corvid/render/c.py)

    def compile(self, kernel: Any, source: str) -> Program:
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait until every launched program has finished (the CPU runs synchronously)."""

    def peak(self) -> Any:
        """This device's roofline (:class:`corvid.runtime.peak.Peak`), or None when unknown."""
        return None


class Buffer:
    """``size`` elements of ``dtype`` on ``device``. Memory is taken lazily and pooled on free."""

    __slots__ = ("device", "dtype", "size", "_handle", "pooled", "__weakref__")

    def __init__(self, device: str, dtype: DType, size: int):
        self.device, self.dtype, self.size = device, dtype, size
        self._handle: Any = None
        self.pooled = True  # False for foreign memory: it never enters the pool

    @classmethod
    def wrap(cls, device: str, dtype: DType, size: int, handle: Any) -> Buffer:
        """A Buffer over memory someone else owns (a DLPack import), zero-copy.

        ``handle`` must be what the device's allocator hands out (a 1-d uint8 numpy array on the
        CPU) and must keep the owner's memory alive; the Buffer holds it and never pools it, so
        the owner's memory is never reused for other tensors."""
        buf = cls(device, dtype, size)
        buf._handle, buf.pooled = handle, False
        return buf

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def handle(self) -> Any:
        if self._handle is None:
            self._handle = get_device(self.device).allocator.alloc(self.nbytes)
        return self._handle

    @property
    def allocated(self) -> bool:
        return self._handle is not None

    def copyin(self, data: np.ndarray) -> Buffer:
        get_device(self.device).allocator.copyin(self.handle, np.ascontiguousarray(data).view(np.uint8).reshape(-1))
        return self

    def numpy(self) -> np.ndarray:
        """A new 1-d numpy array holding this buffer's elements."""
        raw = get_device(self.device).allocator.copyout(self.handle, self.nbytes)
        return raw.view(self.dtype.np)

    def __del__(self) -> None:
        if self._handle is not None and self.pooled and _devices is not None:
            dev = _devices.get(self.device)
            if dev is not None:
                dev.allocator.free(self._handle, self.nbytes)

    def __repr__(self) -> str:
        return f"<Buffer {self.device} {self.dtype.name}[{self.size}]>"


# --- registry --------------------------------------------------------------------------------------

_BACKENDS = {"CPU": "corvid.runtime.cpu:CPUDevice", "NULL": "corvid.runtime.null:NullDevice",
             "CL": "corvid.runtime.opencl:CLDevice"}
_devices: dict[str, Device] = {}
DEFAULT_DEVICE = "CPU"


def canonical_device(name: str | None) -> str:
    """Normalize a device name (``'cpu'`` → ``'CPU'``); ValueError for unknown devices."""
    if name is None:
        return DEFAULT_DEVICE
    if not isinstance(name, str):
        raise TypeError(f"device must be a string like 'CPU', got {type(name).__name__}")
    canon = name.upper().split(":")[0]
    if canon not in _BACKENDS:
        raise ValueError(f"unknown device {name!r}; available: {', '.join(sorted(_BACKENDS))}")
    return canon


def get_device(name: str) -> Device:
    """The (lazily created, process-wide) device instance for ``name``."""
    dev = _devices.get(name)  # fast path: an already canonical name (what Buffers hold)
    if dev is not None:
        return dev
    name = canonical_device(name)
    dev = _devices.get(name)
    if dev is None:
        module, cls = _BACKENDS[name].split(":")
        dev = _devices[name] = getattr(importlib.import_module(module), cls)()
    return dev


def register_backend(name: str, target: str) -> None:
    """Make ``'module.path:ClassName'`` available as device ``name`` (used by plugins)."""
    _BACKENDS[name.upper()] = target

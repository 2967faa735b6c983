"""The device interface: what a backend provides, and the registry that finds backends by name.

A device is four things (see ``docs/backends.md``):

* an :class:`Allocator` that hands out raw memory and copies bytes in and out;
* a ``renderer`` that turns a kernel IR into source for that device;
* ``compile(kernel, source)`` that turns source into a callable :class:`Program`;
* ``synchronize()`` that waits for launched work.

:class:`Buffer` is the device-neutral handle the rest of corvid uses. Its memory goes back to the
allocator's pool as soon as the last reference to the Buffer disappears, and the pool hands it to
the next allocation of the same size (fresh memory costs page faults).

Device names: ``'CPU'`` (also spelled ``'cpu'``, ``'CPU:0'``), ``'CPU:1'``, ``'CPU:2'``, … are
distinct logical CPU devices (each its own allocator and buffers, all sharing the compiler and the
kernel caches), for testing multi-device code on one machine; ``'CL'``, ``'WEBGPU'``, ``'CUDA'``,
``'NULL'`` (and ``'NULL:1'``, ...). The default
device comes from ``CORVID_DEVICE`` at import, :func:`set_default_device` and the
:func:`default_device` block (see ``docs/devices.md``).
"""

from __future__ import annotations

import importlib
import os
import threading
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

from ..dtype import DType


def _pool_age_from_environment() -> int:
    value = os.environ.get("CORVID_POOL_AGE", "").strip()
    if not value:
        return DEFAULT_POOL_AGE
    try:
        age = int(value)
    except ValueError:
        age = -1
    if age < 0:
        raise ValueError(f"CORVID_POOL_AGE={value!r}: expected a number of allocations >= 0 (0: pooled blocks are "
                         "kept until cv.empty_cache())")
    return age


DEFAULT_POOL_AGE = 1 << 16  # allocations a pooled size may go unrequested before its blocks are released


class Allocator:
    """Raw memory for one device, with a pool of freed blocks reused by exact byte size.

    Subclasses implement ``_alloc``, ``copyin`` and ``copyout``, and ``clear_pool`` where a
    block must be given back explicitly (CUDA's ``cuMemFree``; the CPU's address table): every
    release of pooled blocks goes through it. ``alloc``, ``free`` and ``clear_pool`` may be
    called from several threads at once (a Buffer is freed in whichever thread drops its last
    reference): ``lock`` guards the pool, held for the few dict and list operations that take or
    return a block. It is taken with ``acquire``/``release`` rather than ``with``, which costs
    twice as much (0.14 against 0.25 us here; an eager op allocates and frees one to three
    blocks).

    What the pool keeps (its purpose is a loop that frees and allocates the same sizes again:
    a training step, a decode step, which then never waits for fresh memory):

    * at most ``pool_limit_bytes``; a block freed beyond it goes back to the system at once;
    * blocks of a size that no allocation asked for in the last ``release_after`` allocations
      (``CORVID_POOL_AGE``, default 65536; 0 keeps them) are given back: a loop whose steps
      make fewer allocations than that (a training or decode step: tens to thousands) keeps all
      its blocks, while the sizes of a one-off computation (a prompt's prefill, an evaluation at
      another batch size, loading) do not stay forever. The check runs every
      ``release_after // 4`` allocations, so a stale block goes within 1.25 ``release_after``
      allocations. It costs ``alloc`` about 40 ns (a count and a dict entry per call);
    * :meth:`trim` gives back blocks now: all of them, or those of the sizes asked for since a
      :meth:`mark` (what a computation whose sizes will not come again left behind: text
      generation trims its prefill's).
    """

    def __init__(self, pool_limit_bytes: int = 2 << 30):
        self._pool: dict[int, list[Any]] = defaultdict(list)
        self._pooled_bytes = 0
        self.pool_limit_bytes = pool_limit_bytes
        # reentrant: a garbage collection inside a locked section may free a Buffer, whose
        # __del__ then frees into the pool from the same thread
        self.lock = threading.RLock()
        self._count = 0  # allocations so far
        self._requested: dict[int, int] = {}  # size -> the number of the latest allocation of that size
        self._release_after = 0
        self._sweep_at = 0
        self.release_after = _pool_age_from_environment()

    @property
    def release_after(self) -> int:
        """Allocations after which pooled blocks of a size nobody asked for are released (0: never)."""
        return self._release_after

    @release_after.setter
    def release_after(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"release_after must be an int >= 0 (0: never), got {n!r}")
        with self.lock:
            self._release_after = n
            self._sweep_at = self._count + max(n // 4, 1) if n else float("inf")

    @property
    def pooled_bytes(self) -> int:
        """The bytes of the freed blocks the pool holds for reuse."""
        return self._pooled_bytes

    def alloc(self, nbytes: int) -> Any:
        lock = self.lock
        lock.acquire()
        try:
            self._count = count = self._count + 1
            self._requested[nbytes] = count
            if count >= self._sweep_at:
                self._sweep(count)
            free = self._pool.get(nbytes)
            if free:
                self._pooled_bytes -= nbytes
                return free.pop()
        finally:
            lock.release()
        return self._alloc(nbytes)

    def free(self, handle: Any, nbytes: int) -> None:
        lock = self.lock
        lock.acquire()
        try:
            if self._pooled_bytes + nbytes <= self.pool_limit_bytes:
                self._pool[nbytes].append(handle)
                self._pooled_bytes += nbytes
        finally:
            lock.release()

    def clear_pool(self) -> None:
        """Release every pooled block back to the system."""
        with self.lock:
            self._pool.clear()
            self._pooled_bytes = 0

    def mark(self) -> int:
        """The number of allocations so far: ``trim(since=mark)`` later releases the pooled blocks
        of the sizes asked for after this point.

        >>> from corvid.runtime.device import get_device
        >>> alloc = get_device("CPU").allocator
        >>> m = alloc.mark()
        >>> x = cv.arange(12345.0).exp().realize(); del x   # its block goes to the pool
        >>> alloc.trim(since=m) >= 12345 * 4
        True
        """
        return self._count

    def trim(self, since: int | None = None) -> int:
        """Give pooled blocks back to the system; the number of bytes given back.

        ``since=None`` releases every pooled block (as :func:`corvid.empty_cache`); ``since``, a
        :meth:`mark`, only those of the sizes some allocation asked for after that mark, so the
        blocks of a loop that ran before stay pooled."""
        with self.lock:
            if since is None:
                dropped = self._pooled_bytes
                self.clear_pool()
                return dropped
            requested = self._requested
            return self._release_sizes([s for s, blocks in self._pool.items() if blocks and requested.get(s, 0) > since])

    def _release_sizes(self, sizes: list[int]) -> int:
        """Release the pooled blocks of ``sizes`` through ``clear_pool`` (the device's way of giving
        blocks back), keeping the others; the bytes released."""
        if not sizes:
            return 0
        with self.lock:
            drop = set(sizes)
            kept = {s: blocks for s, blocks in self._pool.items() if blocks and s not in drop}
            kept_bytes = sum(s * len(blocks) for s, blocks in kept.items())
            released = self._pooled_bytes - kept_bytes
            for s in kept:
                del self._pool[s]
            try:
                self.clear_pool()  # (only the dropped blocks are left in it)
            finally:
                self._pool.update(kept)
                self._pooled_bytes = kept_bytes
            return released

    def _sweep(self, count: int) -> None:
        """Release the blocks of the sizes not asked for in the last ``release_after`` allocations
        (called by ``alloc``, with the lock held, every ``release_after // 4`` of them)."""
        age = self._release_after
        self._sweep_at = count + max(age // 4, 1)
        oldest = count - age
        requested, pool = self._requested, self._pool
        self._release_sizes([s for s, blocks in pool.items() if blocks and requested.get(s, 0) <= oldest])
        for s in [s for s, blocks in pool.items() if not blocks]:
            del pool[s]
        self._requested = {s: c for s, c in requested.items() if c > oldest}

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
    """A backend. Subclasses set ``name``, ``allocator``, ``renderer`` and implement ``compile``.

    ``family`` is the backend name without the index (``'CPU'`` for ``'CPU:1'``): the logical
    devices of one backend share its lowered kernels and compiled code, keyed by family."""

    name: str = ""
    allocator: Allocator
    renderer: Any  # an object with ``render(kernel) -> str`` (see corvid/render/c.py)
    has_float64 = True  # False: float64 tensors can be stored, but not computed with (WebGPU)

    @property
    def family(self) -> str:
        return self.name.partition(":")[0]

    def compile(self, kernel: Any, source: str) -> Program:
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait until every launched program has finished (the CPU runs synchronously)."""

    def graph(self, programs: list[Program]) -> Callable[[list[list[Any]]], None] | None:
        """A replayer of the fixed sequence ``programs`` (this device's) as one device graph, or
        None where the device has none (the default; the CPU).

        ``replay(handles)`` does what ``programs[i](handles[i])`` for each ``i`` in order would,
        with one launch (CUDA: :class:`corvid.runtime.cuda.CUDAGraph`); its first call records
        the graph. Every kernel launches when ``replay`` is called, after all the handles are
        known, so no handle may be freed before then (as a kernel's inputs may be freed once it
        has launched). Handles that stay the same from call to call cost nothing; ``jit`` keeps
        the memory of its intermediate values for as long as it keeps the replayer."""
        return None

    def peak(self) -> Any:
        """This device's roofline (:class:`corvid.runtime.peak.Peak`), or None when unknown."""
        return None

    @property
    def kind(self) -> str:
        """``'gpu'`` where kernels run on a graphics processor, ``'cpu'`` where they run on this
        machine's CPU: the CPU devices, and OpenCL or WebGPU on a CPU driver (PoCL, lavapipe)."""
        if self.family == "CUDA":
            return "gpu"
        cpu_like = getattr(self, "cpu_like", None)  # (CL: the OpenCL device's type)
        if cpu_like is not None:
            return "cpu" if cpu_like else "gpu"
        adapter = getattr(self, "adapter", None)  # (WEBGPU: the adapter wgpu picked)
        if adapter is not None:
            return "cpu" if str(adapter.info.get("adapter_type", "")).lower() == "cpu" else "gpu"
        return "cpu"


class Buffer:
    """``size`` elements of ``dtype`` on ``device``. Memory is taken lazily and pooled on free."""

    __slots__ = ("device", "dtype", "size", "_handle", "_owner", "pooled", "__weakref__")

    def __init__(self, device: str, dtype: DType, size: int):
        self.device, self.dtype, self.size = device, dtype, size
        self._handle: Any = None
        # the allocator the memory came from, which gets it back: a buffer can outlive its device's
        # registration (a backend registered again under the name), and the memory is the first
        # device's, never the pool of the one that holds the name now
        self._owner: Allocator | None = None
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
        """The device memory, taken from the allocator on first use. (Unlocked: whoever makes a
        Buffer takes its memory before other threads can see it, as the engine does, except for
        empty values, of which a race loses one 1-byte block.)"""
        if self._handle is None:
            owner = get_device(self.device).allocator
            self._handle = owner.alloc(self.nbytes)
            self._owner = owner
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
        if self._handle is not None and self.pooled:
            owner = self._owner
            if owner is None and _devices is not None:  # (a handle set from outside: the device's)
                dev = _devices.get(self.device)
                owner = None if dev is None else dev.allocator
            if owner is not None:
                owner.free(self._handle, self.size * self.dtype.itemsize)  # (self.nbytes, inlined)

    def __repr__(self) -> str:
        return f"<Buffer {self.device} {self.dtype.name}[{self.size}]>"


# --- registry --------------------------------------------------------------------------------------

_BACKENDS = {"CPU": "corvid.runtime.cpu:CPUDevice", "NULL": "corvid.runtime.null:NullDevice",
             "CL": "corvid.runtime.opencl:CLDevice", "WEBGPU": "corvid.runtime.webgpu:WebGPUDevice",
             "CUDA": "corvid.runtime.cuda:CUDADevice"}
# backends whose class takes an ``index`` and gives any number of distinct logical devices (own
# allocator and buffers, shared compiler and kernel caches): ``CPU:1`` tests multi-device code on
# one machine. Other backends have one device, ``NAME`` (``NAME:0`` is accepted as a spelling).
_LOGICAL = {"CPU", "NULL"}
_devices: dict[str, Device] = {}
# counts the changes of which device object a name means (a device made, a backend registered or
# removed): what eager graph recordings key on (engine/replay.py), since a function may build
# another graph on another backend of the same name (a product through its library, or not)
epoch = 0
_creating = threading.RLock()  # (reentrant: a backend's constructor may ask for another device)
_canonical: dict[Any, Any] = {}  # every spelling already seen -> its canonical name (the fast path)


def _parse(name: Any) -> Any:
    """The canonical name of ``name`` (validated), or a tuple of them for a device set."""
    if isinstance(name, (tuple, list)):
        devs = tuple(_parse(n) for n in name)
        if any(isinstance(d, tuple) for d in devs):
            raise ValueError(f"a device set holds single devices, got {name!r}")
        if len(set(devs)) != len(devs):
            raise ValueError(f"a device set names each device once, got {list(devs)}")
        if len(devs) < 2:
            raise ValueError(f"a device set needs at least two devices, got {list(devs)}; "
                             "pass the one device by name")
        return devs
    if not isinstance(name, str):
        raise TypeError(f"device must be a string like 'CPU' or 'CPU:1', got {type(name).__name__}")
    base, sep, index = name.strip().upper().partition(":")
    if base not in _BACKENDS:
        raise ValueError(f"unknown device {name!r}; available: {available_devices()}")
    if not sep or index == "0":
        return base
    if not index.isdigit():
        raise ValueError(f"bad device index in {name!r}: expected {base}:N with N a non-negative integer")
    if base not in _LOGICAL:
        raise ValueError(f"device {name!r} does not exist: {base} has one device ({base}); "
                         f"available: {available_devices()}")
    return f"{base}:{int(index)}"


def canonical_device(name: Any) -> Any:
    """The canonical name of a device: ``'cpu'``, ``'CPU:0'`` → ``'CPU'``; ``'cpu:1'`` → ``'CPU:1'``;
    None → the default device (:func:`get_default_device`). A list or tuple of at least two
    distinct devices (a sharded tensor's devices) gives a tuple of canonical names.

    ValueError for an unknown device or a bad index, listing what is available; TypeError for a
    name that is not a string."""
    if name is None:
        return _scoped.device or _default_name
    try:
        canon = _canonical.get(name)
    except TypeError:  # (a list: unhashable)
        canon = None
    if canon is None:
        canon = _parse(name)
        if isinstance(name, (str, tuple)):
            _canonical[name] = canon
    return canon


def available_devices() -> str:
    """The device names corvid knows, for error messages (``CPU:N`` stands for any N)."""
    names = sorted(_BACKENDS)
    return ", ".join(f"{n}, {n}:N" if n in _LOGICAL else n for n in names)


def devices() -> list[str]:
    """The devices that start on this machine, fastest first: GPUs (CUDA, then OpenCL and WebGPU
    on a graphics processor), the CPU, then OpenCL and WebGPU on CPU drivers (PoCL, lavapipe),
    which run the same cores as the CPU device with less of their speed. Each is started to find
    out (once per process: a driver's start can take a second). ``devices()[0]`` is the device
    the examples train on by default; ``CPU:1`` and the other logical devices are not listed.

    >>> import corvid as cv
    >>> "CPU" in cv.devices()
    True
    """
    found: list[tuple[int, str]] = []
    for order, name in enumerate(n for n in _BACKENDS if n != "NULL"):
        try:
            dev = get_device(name)
        except (ImportError, RuntimeError, OSError):  # (each names what is missing)
            continue
        rank = 0 if dev.kind == "gpu" else 1 if name == "CPU" else 2
        found.append((rank * 100 + order, name))
    return [name for _, name in sorted(found)]


def empty_cache(device: Any = None) -> int:
    """Give the memory of every freed block that ``device``'s pool keeps for reuse back to the system
    (as ``torch.cuda.empty_cache``); the number of bytes given back.

    Freed memory stays in the device's pool, where the next allocation of the same size takes it
    without asking the system (a training or decode step frees and allocates the same sizes at
    every step). The pool gives back on its own the sizes no allocation has asked for in a while
    (``CORVID_POOL_AGE`` allocations, see ``docs/environment.md``) and text generation gives back
    what its prefill used; this gives back everything now, e.g. after a one-off computation whose
    sizes will not come again, before measuring memory, or to leave memory to another process.
    Tensors keep their memory: only freed blocks are given back. ``device``: a device name, a
    list of them, or None for every device started so far (the ``NULL`` device's pool is emptied
    too, but it holds no memory and counts for nothing).

    >>> x = cv.arange(100_000, dtype=cv.float32).exp().realize()
    >>> del x                                # its memory goes to the CPU's pool
    >>> cv.empty_cache() >= 400_000
    True
    >>> cv.empty_cache()                     # nothing is left to give back
    0
    """
    if device is None:
        names = list(_devices)
    else:
        canon = canonical_device(device)
        names = list(canon) if isinstance(canon, tuple) else [canon]
    released = 0
    for n in names:
        dev = get_device(n)
        freed = dev.allocator.trim()
        released += 0 if dev.family == "NULL" else freed
    return released


def get_device(name: str) -> Device:
    """The (lazily created, process-wide) device instance for ``name``."""
    dev = _devices.get(name)  # fast path: an already canonical name (what Buffers hold)
    if dev is not None:
        return dev
    name = canonical_device(name)
    if isinstance(name, tuple):
        raise ValueError(f"{list(name)} is a set of devices, not one device")
    with _creating:  # one instance per device, even when two threads ask for a new one at once
        dev = _devices.get(name)
        if dev is None:
            base, _, index = name.partition(":")
            module, cls = _BACKENDS[base].split(":")
            backend = getattr(importlib.import_module(module), cls)
            dev = _devices[name] = backend(int(index)) if index else backend()
            _new_epoch()
    return dev


def _new_epoch() -> None:
    global epoch
    epoch += 1


def register_backend(name: str, target: str, logical: bool = False) -> None:
    """Make ``'module.path:ClassName'`` available as device ``name`` (used by plugins).

    ``logical=True`` says the class takes an ``index`` argument and that ``NAME:1``, ``NAME:2``, …
    are distinct devices of that backend."""
    _BACKENDS[name.upper()] = target
    if logical:
        _LOGICAL.add(name.upper())
    _new_epoch()


def unregister_backend(name: str) -> None:
    """Undo :func:`register_backend`: the backend and its started devices are forgotten (values
    already on them keep their buffers). The built-in backends cannot be removed."""
    base = name.upper()
    if base in ("CPU", "NULL"):
        raise ValueError(f"the {base} backend is built in")
    _BACKENDS.pop(base, None)
    _LOGICAL.discard(base)
    for key in [k for k in _devices if k == base or k.startswith(base + ":")]:
        _devices.pop(key, None)
    _new_epoch()
    for spelling in [s for s, c in _canonical.items() if c == base or c.startswith(base + ":")]:
        _canonical.pop(spelling)


# --- the default device ------------------------------------------------------------------------------

class _Scoped(threading.local):
    device: str | None = None  # set by a ``default_device`` block in this thread


_scoped = _Scoped()
_default_name = "CPU"


def get_default_device() -> str:
    """The device creation functions use when given none: the innermost ``default_device`` block
    of this thread, else what :func:`set_default_device` (or ``CORVID_DEVICE``) chose, else CPU.

    >>> with cv.default_device("CPU:1"):
    ...     print(cv.get_default_device(), cv.zeros(2).device)
    CPU:1 CPU:1
    """
    return canonical_device(None)


def set_default_device(name: str) -> None:
    """Make ``name`` the default device of every thread (outside ``default_device`` blocks).

    >>> import corvid as cv
    >>> cv.set_default_device("CPU:1"); cv.zeros(2).device
    'CPU:1'
    >>> cv.set_default_device("CPU")

    ValueError for an unknown device (the message lists the available ones)."""
    global _default_name
    dev = canonical_device(name)
    if isinstance(dev, tuple):
        raise ValueError(f"the default device is one device, not the set {list(dev)}")
    _default_name = dev


@contextmanager
def default_device(name: str) -> Iterator[str]:
    """Use ``name`` as the default device inside the block, in this thread (blocks nest).

    >>> import corvid as cv
    >>> with cv.default_device("CPU:1"):
    ...     cv.arange(3).device
    'CPU:1'
    """
    dev = canonical_device(name)
    if isinstance(dev, tuple):
        raise ValueError(f"the default device is one device, not the set {list(dev)}")
    saved, _scoped.device = _scoped.device, dev
    try:
        yield dev
    finally:
        _scoped.device = saved


def _default_from_environment() -> str:
    value = os.environ.get("CORVID_DEVICE", "").strip()
    if not value:
        return "CPU"
    try:
        dev = canonical_device(value)
    except ValueError as e:
        raise ValueError(f"CORVID_DEVICE={value!r}: {e}") from None
    if isinstance(dev, tuple):
        raise ValueError(f"CORVID_DEVICE={value!r} must name one device")
    return dev


_default_name = _default_from_environment()

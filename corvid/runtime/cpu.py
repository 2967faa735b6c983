"""The CPU device: kernels rendered to C, compiled by the system compiler, run through ctypes.

Memory is numpy-owned byte arrays (so copies in and out are plain numpy copies); the compiled
function receives raw pointers. ctypes releases the GIL during the call and OpenMP spreads
parallel loops over the cores; its idle threads spin briefly, then sleep (compiler.load_library).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from ..codegen.ir import Kernel
from ..render.c import CRenderer
from .compiler import compile_kernel, find_toolchain
from .device import Allocator, Device, Program
from .peak import Peak, cpu_peak


_TRIM_HEAP_BYTES = 1 << 20  # releasing at least this much also asks the C library to give its free memory back


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None (another C library)."""
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def _trim_heap() -> None:
    """Return the C heap's free memory to the system. Blocks below glibc's mmap threshold (which
    grows to the largest block freed so far, up to 32 MB) live in its heap and stay resident once
    freed: without this, the blocks a prompt's prefill gave back (``Allocator.trim``) still
    counted in the process's memory, and the next allocations of other sizes came on top."""
    fn = _malloc_trim()
    if fn is not None:
        fn(0)


ALIGN = 64  # bytes: where each block the CPU allocator hands out starts (a cache line, an AVX-512 vector)


class CPUAllocator(Allocator):
    """numpy byte arrays; remembers each live block's address so launching a kernel does not ask
    numpy for it again (``ndarray.ctypes.data`` costs about a microsecond per argument)."""

    def __init__(self, pool_limit_bytes: int = 2 << 30):
        super().__init__(pool_limit_bytes)
        # id(handle) -> (handle, address) for every block handed out and not yet released; the
        # strong reference keeps the id from being reused while the entry exists
        self._addresses: dict[int, tuple[np.ndarray, int]] = {}

    def _alloc(self, nbytes: int) -> np.ndarray:
        # a block starts on a cache line (ALIGN): numpy's large arrays start 16 bytes into a page,
        # so every 64-byte vector of an AVX-512 kernel spanned two lines (and half of AVX2's 32-byte
        # ones): a 1024^2 float32 matmul kernel ran 6.4 ms instead of 5.7 (Xeon, 2 cores)
        raw = np.empty(max(nbytes, 1) + ALIGN, dtype=np.uint8)
        start = -raw.ctypes.data % ALIGN
        h = raw[start:start + max(nbytes, 1)]  # (a view: it keeps ``raw`` alive)
        self._addresses[id(h)] = (h, h.ctypes.data)
        return h

    def free(self, handle: np.ndarray, nbytes: int) -> None:
        lock = self.lock  # (Allocator.free, inlined)
        lock.acquire()
        try:
            if self._pooled_bytes + nbytes <= self.pool_limit_bytes:
                self._pool[nbytes].append(handle)
                self._pooled_bytes += nbytes
                return
        finally:
            lock.release()
        self._addresses.pop(id(handle), None)  # not pooled: the block goes back to the system

    def clear_pool(self) -> None:
        with self.lock:
            released = self._pooled_bytes
            for blocks in self._pool.values():
                for h in blocks:
                    self._addresses.pop(id(h), None)
            super().clear_pool()
        if released >= _TRIM_HEAP_BYTES:
            _trim_heap()

    def address(self, handle: np.ndarray) -> int:
        entry = self._addresses.get(id(handle))
        # an entry holds its handle, so its id cannot have been reused by another live array
        return entry[1] if entry is not None else handle.ctypes.data  # (a handle from elsewhere)

    def copyin(self, handle: np.ndarray, data: np.ndarray) -> None:
        handle[: data.size] = data

    def copyout(self, handle: np.ndarray, nbytes: int) -> np.ndarray:
        return handle[:nbytes].copy()


class CPUProgram(Program):
    def __init__(self, fn: Any, allocator: CPUAllocator, lib_path: Any = None, fname: str | None = None):
        self.fn = fn
        self.lib_path, self.fname = lib_path, fname  # (the beam search times candidates in a child process)
        self._addresses = allocator._addresses
        self._address = allocator.address

    def __call__(self, handles: list[np.ndarray]) -> None:
        try:
            addrs = [self._addresses[id(h)][1] for h in handles]  # the common case: pooled blocks
        except KeyError:
            addrs = [self._address(h) for h in handles]
        self.fn(*addrs)


class CPUDevice(Device):
    """Logical CPU device ``index`` (``'CPU'`` is index 0): its own allocator, so its buffers are
    distinct from every other logical device's, and a renderer shared by all of them (the compiled
    libraries are cached by source, so a kernel compiles once for every index)."""

    _shared_renderer: CRenderer | None = None

    def __init__(self, index: int = 0) -> None:
        self.name = "CPU" if index == 0 else f"CPU:{index}"
        self.allocator = CPUAllocator()

    @property
    def renderer(self) -> CRenderer:
        if CPUDevice._shared_renderer is None:  # finding the compiler is deferred until a kernel is needed
            tc = find_toolchain()
            CPUDevice._shared_renderer = CRenderer(openmp=tc.openmp, libmvec=tc.libmvec)
        return CPUDevice._shared_renderer

    def peak(self) -> Peak:
        return cpu_peak()

    def compile(self, kernel: Kernel, source: str) -> CPUProgram:
        lib = compile_kernel(source, kernel.name)
        return CPUProgram(lib.function(kernel.name, [ctypes.c_void_p] * len(kernel.params)), self.allocator,
                          lib.path, kernel.name)

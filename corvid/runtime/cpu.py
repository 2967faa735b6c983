"""The CPU device: kernels rendered to C, compiled by the system compiler, run through ctypes.

Memory is numpy-owned byte arrays (so copies in and out are plain numpy copies); the compiled
function receives raw pointers. ctypes releases the GIL during the call and OpenMP spreads
parallel loops over the cores.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..codegen.ir import Kernel
from ..render.c import CRenderer
from .compiler import compile_kernel, find_toolchain
from .device import Allocator, Device, Program


class CPUAllocator(Allocator):
    def _alloc(self, nbytes: int) -> np.ndarray:
        return np.empty(max(nbytes, 1), dtype=np.uint8)

    def copyin(self, handle: np.ndarray, data: np.ndarray) -> None:
        handle[: data.size] = data

    def copyout(self, handle: np.ndarray, nbytes: int) -> np.ndarray:
        return handle[:nbytes].copy()


class CPUProgram(Program):
    def __init__(self, fn: Any):
        self.fn = fn

    def __call__(self, handles: list[np.ndarray]) -> None:
        self.fn(*[h.ctypes.data for h in handles])


class CPUDevice(Device):
    name = "CPU"

    def __init__(self) -> None:
        self.allocator = CPUAllocator()
        self._renderer: CRenderer | None = None

    @property
    def renderer(self) -> CRenderer:
        if self._renderer is None:  # finding the compiler is deferred until a kernel is needed
            tc = find_toolchain()
            self._renderer = CRenderer(openmp=tc.openmp, libmvec=tc.libmvec)
        return self._renderer

    def compile(self, kernel: Kernel, source: str) -> CPUProgram:
        lib = compile_kernel(source, kernel.name)
        return CPUProgram(lib.function(kernel.name, [ctypes.c_void_p] * len(kernel.params)))

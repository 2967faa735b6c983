"""The NULL device: runs the whole pipeline (schedule, lower, render) but executes nothing.

Use it to test scheduling and code generation quickly: ``cv.Tensor(..., device="NULL")``.
Reading values back gives zeros.
"""

from __future__ import annotations

import numpy as np

from ..codegen.ir import Kernel
from ..render.c import CRenderer
from .device import Allocator, Device, Program


class NullAllocator(Allocator):
    def _alloc(self, nbytes: int) -> int:
        return nbytes

    def copyin(self, handle: int, data: np.ndarray) -> None:
        pass

    def copyout(self, handle: int, nbytes: int) -> np.ndarray:
        return np.zeros(nbytes, dtype=np.uint8)


class NullProgram(Program):
    def __call__(self, handles: list) -> None:
        pass


class NullDevice(Device):
    """Logical NULL device ``index`` (``'NULL'`` is index 0)."""

    def __init__(self, index: int = 0) -> None:
        self.name = "NULL" if index == 0 else f"NULL:{index}"
        self.allocator = NullAllocator()
        self.renderer = CRenderer()

    def compile(self, kernel: Kernel, source: str) -> NullProgram:
        return NullProgram()

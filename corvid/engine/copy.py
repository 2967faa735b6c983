"""Copy steps: a COPY node's value moved from its source device's buffer into a buffer of the
destination device.

The scheduler gives every COPY a step of its own, ordered like kernels: after the kernels that
compute its source on the source device, before the kernels that read it on the destination. The
step goes through host memory (the source allocator's ``copyout``, then the destination's
``copyin``), which every backend provides; both are blocking, so a copy sees every kernel queued
before it and the destination's next kernel sees the copied bytes.
"""

from __future__ import annotations

from typing import Any

from ..runtime.device import Program, get_device


class CopyKernel:
    """What the schedule shows for a copy step (no loops, no generated source)."""

    def __init__(self, name: str, nbytes: int):
        self.name, self.nbytes = name, nbytes
        self.loops: list = []
        self.params = [None, None]  # out, in
        self.vector_width = 1

    def estimates(self) -> tuple[int, int]:
        return 0, 2 * self.nbytes


class CopyProgram(Program):
    """Runs a copy step on allocator handles ``[destination, source]``."""

    def __init__(self, source: str, destination: str, nbytes: int):
        self.source, self.destination, self.nbytes = source, destination, nbytes

    def __call__(self, handles: list[Any]) -> None:
        if self.nbytes:
            out, src = handles
            data = get_device(self.source).allocator.copyout(src, self.nbytes)
            get_device(self.destination).allocator.copyin(out, data)

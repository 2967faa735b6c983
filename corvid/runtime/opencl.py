"""The CL device: kernels rendered to OpenCL C, built and launched through pyopencl.

Install with ``pip install "corvid[opencl]"`` plus an OpenCL driver (an ICD): a GPU vendor's, or
PoCL on the CPU (Debian: ``apt-get install pocl-opencl-icd``). The device is the first one
OpenCL lists, or the one ``CORVID_CL_DEVICE`` names (its index in the list of every platform's
devices, or a part of its name).

Memory is ``cl.Buffer`` objects. Launches are queued on one in-order command queue, so a kernel
sees the results of the ones before it, a buffer returned to the pool may be handed out again at
once, and a read (a blocking copy on the same queue) waits for the kernels that write it.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import numpy as np

from ..codegen.ir import Kernel
from ..codegen.opt import gpu_heuristics
from ..render.gpu import kernel_dtypes
from ..graph.symbolic import Sym, size_function
from ..render.opencl import OpenCLRenderer, launch
from .device import Allocator, Device, Program


def _pyopencl() -> Any:
    """The pyopencl module, imported when the device starts (so that importing this module, as
    doctest collection does, works without it)."""
    try:
        import pyopencl
    except ImportError as e:
        raise ImportError('the CL device needs pyopencl: pip install "corvid[opencl]" '
                          "(and an OpenCL driver, e.g. PoCL: apt-get install pocl-opencl-icd)") from e
    return pyopencl


def _pick_device(cl: Any) -> Any:
    """The OpenCL device to use (see the module docstring); RuntimeError when there is none."""
    try:
        devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    except cl.Error as e:  # (no ICD installed: pyopencl reports PLATFORM_NOT_FOUND_KHR)
        devices, why = [], str(e)
    else:
        why = "no OpenCL platform has a device"
    if not devices:
        raise RuntimeError(f"the CL device found no OpenCL device ({why}); install a driver, e.g. PoCL "
                           "for the CPU: apt-get install pocl-opencl-icd")
    want = os.environ.get("CORVID_CL_DEVICE", "").strip()
    if not want:
        return devices[0]
    if want.isdigit():
        if int(want) >= len(devices):
            raise RuntimeError(f"CORVID_CL_DEVICE={want}: there are {len(devices)} OpenCL devices")
        return devices[int(want)]
    named = [d for d in devices if want.lower() in d.name.lower()]
    if not named:
        raise RuntimeError(f"CORVID_CL_DEVICE={want!r} matches no OpenCL device; there are: "
                           + ", ".join(d.name for d in devices))
    return named[0]


CPU_LIKE_VECTOR_LANES = 8  # float8 (PoCL, a 4096^2 column sum: 17 ms with float4, 11 ms with float8)


class CLAllocator(Allocator):
    """``cl.Buffer`` blocks (at least one byte: OpenCL has no empty buffers)."""

    def __init__(self, cl: Any, context: Any, queue: Any, pool_limit_bytes: int = 2 << 30):
        super().__init__(pool_limit_bytes)
        self.cl, self.context, self.queue = cl, context, queue

    def _alloc(self, nbytes: int) -> Any:
        cl = self.cl
        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(nbytes, 1))

    def copyin(self, handle: Any, data: np.ndarray) -> None:
        if data.size:
            self.cl.enqueue_copy(self.queue, handle, np.ascontiguousarray(data), is_blocking=True)

    def copyout(self, handle: Any, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, dtype=np.uint8)
        if nbytes:
            self.cl.enqueue_copy(self.queue, out, handle, is_blocking=True)
        return out


class CLProgram(Program):
    """One ``__kernel``, launched over the NDRange :func:`corvid.render.opencl.launch` gives
    (the work-group size too when the kernel has ``"local"`` loops; else the driver picks it)."""

    def __init__(self, kernel: Any, queue: Any, global_size: tuple[int, ...], local_size: tuple[int, ...] | None):
        self.kernel, self.queue, self.global_size, self.local_size = kernel, queue, global_size, local_size
        # a kernel over symbolic sizes (a jit program with dynamic sizes): its NDRange per call
        self._sizes = [size_function(s) for s in global_size] if any(isinstance(s, Sym) for s in global_size) \
            else None
        self.takes_sizes = self._sizes is not None

    def __call__(self, handles: list[Any], sizes: list[int] | None = None) -> None:
        global_size = self.global_size
        if self._sizes is not None:
            if sizes is None:
                raise RuntimeError("a kernel over symbolic sizes needs their values (it runs inside a jit program)")
            global_size = tuple(f if type(f) is int else f(sizes) for f in self._sizes)
        if 0 in global_size:  # (an empty output: nothing to compute)
            return
        self.kernel(self.queue, global_size, self.local_size, *handles)


class CLScatterProgram(CLProgram):
    """A SCATTER kernel (:func:`corvid.render.gpu._render_scatter`): ``x`` (the second buffer) is
    copied into the output (the first) by one buffer copy, then the kernel, one work item per
    output column and range of its rows, combines the updates in (the queue is in order)."""

    def __init__(self, kernel: Any, queue: Any, columns: int, nbytes: int, cl: Any):
        super().__init__(kernel, queue, (columns,), None)
        self.nbytes, self.cl = nbytes, cl

    def __call__(self, handles: list[Any]) -> None:
        if self.nbytes:
            self.cl.enqueue_copy(self.queue, handles[0], handles[1], byte_count=self.nbytes)
        super().__call__(handles)


class CLDevice(Device):
    """OpenCL through pyopencl. The CPU's optimization actions and beam search do not apply
    (``optimization_actions``: GCC vector types, OpenMP threads); :meth:`heuristics` chooses
    GPU-style ones (work-group reduces)."""

    name = "CL"
    optimization_actions = False
    sum_block = 64  # a cascaded sum's innermost run: a work item adds it alone, with no vector lanes (codegen/cascade.py)

    def __init__(self) -> None:
        self.cl = cl = _pyopencl()
        self.cl_device = _pick_device(cl)
        self.context = cl.Context([self.cl_device])
        self.queue = cl.CommandQueue(self.context)
        self.allocator = CLAllocator(cl, self.context, self.queue)
        self.renderer = OpenCLRenderer(fp64="cl_khr_fp64" in self.cl_device.extensions.split())
        if self.cl_device.type & cl.device_type.CPU:  # (PoCL runs work items on a few cores: a scatter wants a few each)
            self.renderer.scatter_items = 4 * self.cl_device.max_compute_units
        # an OpenCL driver for a CPU (PoCL) runs a work-group's items one after the other on one
        # core: a work item should read a contiguous run, and a work-group reduce only adds
        # barriers; a GPU runs the items side by side and wants neighbours to read neighbours
        self.cpu_like = bool(self.cl_device.type & cl.device_type.CPU)
        # a long reduce with few outputs runs as two kernels (corvid/ops/reduce.py), so that
        # more than one work-group (core, compute unit) takes part
        # (contiguous chunks on a GPU too: a work-group shares each partial, its items reading
        # neighbouring elements; strided partials are for one work item per partial: WEBGPU's)
        self.split_reduces = "chunks"
        self._programs: dict[str, Any] = {}  # source -> built cl.Program

    def compile(self, kernel: Kernel, source: str) -> CLProgram:
        from ..engine.schedule import ScatterKernel

        if isinstance(kernel, ScatterKernel):  # one work item per output column and range of rows (render/gpu.py: _render_scatter)
            O, n, m, inner = kernel.shape
            return CLScatterProgram(self.cl.Kernel(self._build(kernel.name, source), kernel.name), self.queue,
                                    self.renderer.scatter_work_items(O, n, m, inner),
                                    O * n * inner * kernel.dtype.itemsize, self.cl)
        from ..engine.host import TemplateKernel

        if isinstance(kernel, TemplateKernel):  # (a host op's template: its own work-groups)
            if kernel.threads > self.cl_device.max_work_group_size:
                raise RuntimeError(f"kernel {kernel.name}: a work-group of {kernel.threads} work items is more than "
                                   f"{self.cl_device.name} allows ({self.cl_device.max_work_group_size})")
            return CLProgram(self.cl.Kernel(self._build(kernel.name, source), kernel.name), self.queue,
                             (kernel.groups * kernel.threads,), (kernel.threads,))
        if not isinstance(kernel, Kernel):
            raise NotImplementedError(f"the CL device cannot run {type(kernel).__name__} {kernel.name!r} "
                                      "(only kernels of the IR and scatter)")
        prog = self._build(kernel.name, source)
        geometry = launch(kernel)
        local = geometry.local_size
        if local is not None and any(isinstance(s, Sym) for s in local):
            raise NotImplementedError(f"kernel {kernel.name}: a work-group over a symbolic size")
        if local is not None and math.prod(local) > self.cl_device.max_work_group_size:
            raise RuntimeError(f"kernel {kernel.name}: a work-group of {math.prod(local)} work items is more than "
                               f"{self.cl_device.name} allows ({self.cl_device.max_work_group_size})")
        return CLProgram(self.cl.Kernel(prog, kernel.name), self.queue, geometry.global_size, local)

    def _build(self, name: str, source: str) -> Any:
        """The built ``cl.Program`` of ``source`` (cached by source)."""
        cl, prog = self.cl, self._programs.get(source)
        if prog is None:
            try:
                with warnings.catch_warnings():  # (pyopencl warns on any compiler output)
                    warnings.simplefilter("ignore", cl.CompilerWarning)
                    prog = cl.Program(self.context, source).build()
            except cl.RuntimeError as e:
                raise RuntimeError(f"OpenCL could not build kernel {name} on {self.cl_device.name}:\n{e}\n"
                                   f"--- source ---\n{source}") from None
            self._programs[source] = prog
        return prog

    def heuristics(self, kernel: Kernel) -> Kernel:
        """The GPU-style actions (:func:`corvid.codegen.opt.gpu_heuristics`), with work-groups
        no larger than this device allows; no work-group reduces on a CPU-like device (see
        ``cpu_like``)."""
        lanes = CPU_LIKE_VECTOR_LANES if self.cpu_like and not any(dt.is_complex for dt in kernel_dtypes(kernel)) else 0
        return gpu_heuristics(kernel, self.cl_device.max_work_group_size, shared_reduce=not self.cpu_like,
                              vector_lanes=lanes)

    def synchronize(self) -> None:
        self.queue.finish()

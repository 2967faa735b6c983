"""The WEBGPU device: kernels rendered to WGSL (:mod:`corvid.render.wgsl`) and run through wgpu-py.

Install with ``pip install "corvid[webgpu]"``. wgpu-py runs on Vulkan, Metal or D3D12; without a
GPU, Mesa's lavapipe runs Vulkan on the CPU (Debian: ``apt-get install mesa-vulkan-drivers``).
The device is the adapter wgpu picks for high performance.

Memory is wgpu storage buffers, their sizes rounded up to whole 32-bit words (WGSL arrays are of
words). Every launch and copy goes through the device's one queue, in order: a kernel sees the
results of the ones before it, a buffer returned to the pool may be handed out again at once, and
a read (``queue.read_buffer``) waits for the kernels that write the buffer.

The device asks for the adapter's own limits rather than WebGPU's defaults (8 storage buffers per
shader, 128 MiB per binding): a fused kernel often reads more than 8 buffers. A kernel that needs
more than the adapter has raises (see :class:`corvid.render.wgsl.WGSLRenderer`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..codegen.ir import Kernel
from ..codegen.opt import gpu_heuristics
from ..render.wgsl import WORKGROUP_SIZE, WGSLRenderer, invocations
from .device import Allocator, Device, Program

_INSTALL = ('pip install "corvid[webgpu]" and a Vulkan, Metal or D3D12 driver (without a GPU, Mesa\'s '
            "lavapipe: apt-get install mesa-vulkan-drivers)")
# the adapter limits the device asks for (WebGPU's defaults are lower)
_LIMITS = ("max-storage-buffers-per-shader-stage", "max-storage-buffer-binding-size", "max-buffer-size",
           "max-compute-workgroups-per-dimension")


def _wgpu() -> Any:
    """The wgpu module, imported when the device starts (so that importing this module, as doctest
    collection does, works without it)."""
    try:
        import wgpu
    except ImportError as e:
        raise ImportError(f"the WEBGPU device needs wgpu: {_INSTALL}") from e
    return wgpu


def _words(nbytes: int) -> int:
    """``nbytes`` rounded up to whole 32-bit words, at least one (WebGPU binds no empty buffer)."""
    return max(4, -(-nbytes // 4) * 4)


class WebGPUAllocator(Allocator):
    """wgpu storage buffers that can also be copied to and from."""

    def __init__(self, wgpu: Any, device: Any, pool_limit_bytes: int = 2 << 30):
        super().__init__(pool_limit_bytes)
        self.device, self.queue = device, device.queue
        self.usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        self.max_bytes = device.limits["max-buffer-size"]

    def _alloc(self, nbytes: int) -> Any:
        if _words(nbytes) > self.max_bytes:
            raise MemoryError(f"WEBGPU: a buffer of {nbytes} bytes is larger than this device allows "
                              f"({self.max_bytes} bytes)")
        return self.device.create_buffer(size=_words(nbytes), usage=self.usage)

    def copyin(self, handle: Any, data: np.ndarray) -> None:
        if data.size:
            words = np.zeros(_words(data.size), np.uint8)
            words[:data.size] = data
            self.queue.write_buffer(handle, 0, words)

    def copyout(self, handle: Any, nbytes: int) -> np.ndarray:
        if not nbytes:
            return np.empty(0, np.uint8)
        raw = self.queue.read_buffer(handle, 0, _words(nbytes))
        return np.frombuffer(raw, np.uint8, count=nbytes).copy()


class WebGPUProgram(Program):
    """One compute pipeline, dispatched over enough workgroups for :func:`invocations`, spread
    over a second dispatch dimension past the device's per-dimension limit."""

    def __init__(self, name: str, device: Any, pipeline: Any, layout: Any, n: int):
        self.name, self.device, self.pipeline, self.layout = name, device, pipeline, layout
        groups = -(-n // WORKGROUP_SIZE)
        per_dim = device.limits["max-compute-workgroups-per-dimension"]
        self.grid = (min(groups, per_dim), -(-groups // per_dim), 1) if groups else (0, 0, 0)
        if self.grid[1] > per_dim:
            raise NotImplementedError(f"WEBGPU: kernel {name} needs {groups} workgroups, more than {per_dim}**2")
        self.max_binding = device.limits["max-storage-buffer-binding-size"]

    def _bind(self, handles: list[Any]) -> Any:
        """The bind group of ``handles``; MemoryError for a buffer larger than the device binds."""
        big = [h.size for h in handles if h.size > self.max_binding]
        if big:
            raise MemoryError(f"WEBGPU: kernel {self.name} binds a buffer of {big[0]} bytes, but this device binds "
                              f"at most {self.max_binding} bytes per storage buffer")
        return self.device.create_bind_group(layout=self.layout, entries=[
            {"binding": i, "resource": {"buffer": h, "offset": 0, "size": h.size}} for i, h in enumerate(handles)])

    def __call__(self, handles: list[Any]) -> None:
        if not self.grid[0]:  # (an empty output: nothing to compute)
            return
        group = self._bind(handles)
        encoder = self.device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(self.pipeline)
        compute.set_bind_group(0, group)
        compute.dispatch_workgroups(*self.grid)
        compute.end()
        self.device.queue.submit([encoder.finish()])


class WebGPUScatterProgram(WebGPUProgram):
    """A SCATTER kernel (:meth:`corvid.render.wgsl.WGSLRenderer.render_scatter`): ``x`` (the
    second buffer) is copied into the output (the first) by a buffer copy, then the shader,
    one invocation per output column and range of its rows, combines the updates in: one dispatch per chunk of updates
    (``pipelines``, each with its ``cv_first``), in order; all in one command buffer."""

    def __init__(self, name: str, device: Any, pipelines: list[Any], layout: Any, columns: int, nbytes: int):
        super().__init__(name, device, pipelines[0], layout, columns)
        self.pipelines, self.nbytes = pipelines, _words(nbytes)

    def __call__(self, handles: list[Any]) -> None:
        if not self.grid[0]:
            return
        group = self._bind(handles)
        encoder = self.device.create_command_encoder()
        encoder.copy_buffer_to_buffer(handles[1], 0, handles[0], 0, self.nbytes)
        for pipeline in self.pipelines:  # (each dispatch sees the writes of the one before)
            compute = encoder.begin_compute_pass()
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, group)
            compute.dispatch_workgroups(*self.grid)
            compute.end()
        self.device.queue.submit([encoder.finish()])


class WebGPUDevice(Device):
    """WebGPU through wgpu-py. It applies no optimization actions (``optimization_actions``):
    those of :mod:`corvid.codegen.opt` are CPU ones (GCC vector types, OpenMP threads)."""

    name = "WEBGPU"
    optimization_actions = False
    sum_block = 64  # a cascaded sum's innermost run: a work item adds it alone, with no vector lanes (codegen/cascade.py)
    has_float64 = False  # (WGSL has no 64-bit floats)

    def __init__(self) -> None:
        self.wgpu = wgpu = _wgpu()
        try:
            adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        except (wgpu.GPUError, RuntimeError) as e:  # (or None: wgpu-native reports no driver both ways)
            adapter, why = None, f"{type(e).__name__}: {e}"
        else:
            why = "wgpu returned no adapter"
        if adapter is None:
            raise RuntimeError(f"the WEBGPU device found no WebGPU adapter ({why}); {_INSTALL}")
        self.adapter = adapter
        self.device = adapter.request_device_sync(required_limits={k: adapter.limits[k] for k in _LIMITS})
        self.allocator = WebGPUAllocator(wgpu, self.device)
        info = adapter.info
        # Mesa's lavapipe (llvmpipe) ends every loop of an invocation once they have run 65535
        # iterations in all, without an error: kernels that would need more are refused
        lavapipe = "llvmpipe" in str(info.get("device", "")).lower() or "lavapipe" in str(info.get("description", "")).lower()
        self.renderer = WGSLRenderer(max_buffers=self.device.limits["max-storage-buffers-per-shader-stage"],
                                     loop_limit=65535 if lavapipe else None)
        # a long reduce with few outputs runs as two kernels (corvid/ops/reduce.py): more
        # invocations share it, and each stays within a loop limit like lavapipe's
        self.split_reduces = "chunks" if str(info.get("adapter_type", "")).lower() == "cpu" else "strided"
        if str(info.get("adapter_type", "")).lower() == "cpu":  # (a scatter wants a few invocations per core there)
            self.renderer.scatter_items = 4 * (os.cpu_count() or 1)
        self._pipelines: dict[str, tuple[Any, Any]] = {}  # source -> (pipeline, bind group layout)
        self._fence: Any = None  # a small buffer that synchronize() reads

    def compile(self, kernel: Kernel, source: str) -> WebGPUProgram:
        from ..engine.schedule import ScatterKernel

        if isinstance(kernel, ScatterKernel):  # (out, x, idx, src): x is copied, not bound for writing
            O, n, m, inner = kernel.shape
            firsts = range(0, m, self.renderer.scatter_chunk(m))
            built = []
            for first in firsts:
                key = f"{source}\n// cv_first = {first}"
                if key not in self._pipelines:
                    self._pipelines[key] = self._build(kernel.name, source, [True, False, False, False],
                                                       {"cv_first": first})
                built.append(self._pipelines[key])
            return WebGPUScatterProgram(kernel.name, self.device, [b[0] for b in built], built[0][1],
                                        self.renderer.scatter_work_items(O, n, m, inner),
                                        O * n * inner * kernel.dtype.itemsize)
        if not isinstance(kernel, Kernel):
            raise NotImplementedError(f"the WEBGPU device cannot run {type(kernel).__name__} {kernel.name!r} "
                                      "(only kernels of the IR and scatter)")
        built = self._pipelines.get(source)
        if built is None:
            built = self._pipelines[source] = self._build(kernel.name, source, [p.output for p in kernel.params])
        return WebGPUProgram(kernel.name, self.device, *built, invocations(kernel))

    def _build(self, name: str, source: str, outputs: list[bool], constants: dict[str, int] | None = None
               ) -> tuple[Any, Any]:
        """The compute pipeline of ``source`` and its bind group layout (declared, not derived
        from the shader: a parameter the shader never reads must still be bindable); ``outputs``:
        whether each parameter is written; ``constants``: the shader's override constants."""
        wgpu = self.wgpu
        entries = [{"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": wgpu.BufferBindingType.storage if out
                               else wgpu.BufferBindingType.read_only_storage}}
                   for i, out in enumerate(outputs)]
        try:
            layout = self.device.create_bind_group_layout(entries=entries)
            module = self.device.create_shader_module(code=source)
            pipeline = self.device.create_compute_pipeline(
                layout=self.device.create_pipeline_layout(bind_group_layouts=[layout]),
                compute={"module": module, "entry_point": name, **({"constants": constants} if constants else {})})
        except wgpu.GPUError as e:  # (a validation error, with the shader compiler's message)
            raise RuntimeError(f"WebGPU could not build kernel {name}:\n{e}\n--- source ---\n{source}") from None
        return pipeline, layout

    def heuristics(self, kernel: Kernel) -> Kernel:
        """The GPU-style register tiles of :func:`corvid.codegen.opt.gpu_heuristics` (no
        work-group reduces: the WGSL renderer has no workgroup memory yet)."""
        return gpu_heuristics(kernel, shared_reduce=False)

    def synchronize(self) -> None:
        # reading a buffer waits for the work submitted before it (wgpu 0.32's
        # on_submitted_work_done_sync fails against its own wgpu-native callback signature)
        if self._fence is None:
            self._fence = self.device.create_buffer(size=4, usage=self.wgpu.BufferUsage.COPY_SRC)
        self.device.queue.read_buffer(self._fence)

"""The CUDA device: kernels rendered to CUDA C (:mod:`corvid.render.cuda`), compiled at run time
with NVRTC and launched through the CUDA driver API, both from NVIDIA's ``cuda-bindings``.

Install with ``pip install "corvid[cuda]"`` (``cuda-bindings`` and the ``nvidia-cuda-nvrtc``
wheel: no CUDA toolkit needed) plus an NVIDIA driver. Written against cuda-bindings 13.x
(``cuda.bindings.driver``, ``cuda.bindings.nvrtc``; 12.x has the same modules and calls).
``CORVID_CUDA_DEVICE`` picks the GPU by its ordinal (default 0).

* **Compile**: NVRTC builds machine code (a cubin) for the GPU's own architecture
  (``--gpu-architecture=sm_90`` on an H100/H200), not PTX: a driver JIT-compiles only PTX no newer
  than itself, while a cubin from a newer NVRTC of the same major version loads. Kernels are built
  without fast math and with ``--fmad=false`` (see :mod:`corvid.render.cuda`). Cubins are cached
  in memory and on disk (``cache_dir()/cuda``, keyed by the source, the architecture, NVRTC's
  version and the options; written atomically, used only when their checksum matches).
* **Launch**: on one stream of the device's primary context, so launches are asynchronous and
  ordered: a kernel sees the results of the ones before it, and a buffer returned to the pool may
  be handed out again at once. ``synchronize()`` waits for the stream.
* **Memory**: ``cuMemAlloc`` blocks, pooled by size (the base :class:`Allocator`, up to a
  quarter of the GPU's memory) because allocating and freeing device memory synchronizes the GPU;
  an allocation that runs out of memory empties the pool and tries again. Copies go through two
  pinned host buffers, so a copy to the GPU returns once its data is staged (the DMA proceeds
  while the host stages the next chunk) and a copy back waits for the kernels before it.
* **Timing**: :meth:`CUDADevice.elapsed` measures launched work with CUDA events (GPU time, not
  the host's).

Without cuda-bindings, using ``device="CUDA"`` raises ImportError naming the extra; without a
driver or a GPU, RuntimeError says so (the backend suite then skips with that reason).
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import pathlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..codegen.ir import Kernel
from ..codegen.opt import gpu_heuristics
from ..render.cuda import CUDALaunch, CUDARenderer, cuda_launch
from .compiler import _is_private_file, _private_dir, _write_private, cache_dir
from .device import Allocator, Device, Program

STAGE_BYTES = 16 << 20  # each of the two pinned host buffers that copies go through
# NVRTC options of every kernel (with --gpu-architecture): no fast math, no contraction of a*b+c
# into fma beyond the IR's own, no warnings (unused helpers of the prelude)
NVRTC_OPTIONS = ("--fmad=false", "-w")
_INSTALL = 'pip install "corvid[cuda]" (cuda-bindings and the nvidia-cuda-nvrtc wheel; no CUDA toolkit needed)'


class CUDAError(RuntimeError):
    """A CUDA driver or NVRTC call failed."""


def _bindings() -> tuple[Any, Any]:
    """cuda-bindings' driver and NVRTC modules, imported when the device starts (so importing this
    module works without them); ImportError saying what to install."""
    try:
        from cuda.bindings import driver, nvrtc
    except ImportError as e:
        raise ImportError(f"the CUDA device needs cuda-bindings: {_INSTALL}") from e
    return driver, nvrtc


def _check(result: Any, call: str, describe: Callable[[Any], str]) -> Any:
    """The values of a cuda-bindings call's ``(status, *values)`` result (one value, a tuple of
    several, or None); CUDAError naming ``call`` when the status is not success."""
    status, values = result[0], result[1:]
    if int(status) != 0:
        raise CUDAError(f"{call} failed: {describe(status)}")
    return values[0] if len(values) == 1 else (values or None)


def _driver_error(cu: Any) -> Callable[[Any], str]:
    def describe(status: Any) -> str:
        err, text = cu.cuGetErrorString(status)
        return f"{getattr(status, 'name', status)} ({text.decode() if int(err) == 0 and text else 'no description'})"
    return describe


def _nvrtc_error(nvrtc: Any) -> Callable[[Any], str]:
    def describe(status: Any) -> str:
        err, text = nvrtc.nvrtcGetErrorString(status)
        return text.decode() if int(err) == 0 else str(status)
    return describe


# --- compiling --------------------------------------------------------------------------------------

class NVRTCCompiler:
    """CUDA C → cubin with NVRTC, cached in memory and on disk (see the module docstring)."""

    def __init__(self, nvrtc: Any):
        self.nvrtc = nvrtc
        self._describe = _nvrtc_error(nvrtc)
        try:
            major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion", self._describe)
        except RuntimeError as e:  # (cuda-pathfinder's "library not found" is a RuntimeError)
            raise ImportError(f"the CUDA device needs NVRTC (libnvrtc): {_INSTALL}; {e}") from e
        self.version = f"{major}.{minor}"
        self._memory: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def cubin(self, source: str, arch: str, name: str = "kernel") -> bytes:
        """The cubin of ``source`` for ``arch`` (``"sm_90"``); CUDAError with NVRTC's log and the
        source when it does not compile."""
        key = hashlib.sha256("\0".join([source, arch, self.version, *NVRTC_OPTIONS]).encode()).hexdigest()
        with self._lock:
            found = self._memory.get(key)
        if found is None:
            found = _load_cubin(key)
            if found is None:
                found = self.build(source, arch, name)
                _store_cubin(key, found)
            with self._lock:
                self._memory[key] = found
        return found

    def build(self, source: str, arch: str, name: str = "kernel") -> bytes:
        """:meth:`cubin` without the caches."""
        nv, describe = self.nvrtc, self._describe
        prog = _check(nv.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []),
                      "nvrtcCreateProgram", describe)
        try:
            options = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in NVRTC_OPTIONS)]
            status = nv.nvrtcCompileProgram(prog, len(options), options)[0]
            if int(status) != 0:
                size = _check(nv.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize", describe)
                log = b" " * size
                _check(nv.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog", describe)
                raise CUDAError(f"NVRTC {self.version} could not compile kernel {name} for {arch}: {describe(status)}\n"
                                f"{log.decode(errors='replace').rstrip(chr(0))}\n--- source ---\n{source}")
            size = _check(nv.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize", describe)
            cubin = b" " * size
            _check(nv.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN", describe)
            return cubin
        finally:
            nv.nvrtcDestroyProgram(prog)


def _cubin_path(key: str) -> pathlib.Path:
    return cache_dir() / "cuda" / key[:2] / f"{key}.cubin"


def _load_cubin(key: str) -> bytes | None:
    """A cached cubin whose checksum sidecar matches (and both files are the user's own), or None."""
    if os.environ.get("CORVID_NO_DISK_CACHE") == "1":
        return None
    path = _cubin_path(key)
    sidecar = path.with_suffix(".sha256")
    try:
        if not (_is_private_file(path) and _is_private_file(sidecar)):
            return None
        data = path.read_bytes()
        return data if hashlib.sha256(data).hexdigest() == sidecar.read_text().strip() else None
    except OSError:
        return None


def _store_cubin(key: str, cubin: bytes) -> None:
    if os.environ.get("CORVID_NO_DISK_CACHE") == "1":
        return
    path = _cubin_path(key)
    try:
        _private_dir(path.parent)
        _write_private(path, cubin)
        _write_private(path.with_suffix(".sha256"), hashlib.sha256(cubin).hexdigest().encode())
    except OSError:  # (a read-only cache: compile again next time)
        pass


# --- memory ----------------------------------------------------------------------------------------

class _Stage:
    """A pinned host buffer and the event of the last copy through it."""

    def __init__(self, device: CUDADevice, nbytes: int):
        self.device, self.nbytes = device, nbytes
        self.ptr = int(device.call("cuMemAllocHost", nbytes))
        self.array = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(self.ptr))
        self.event = device.call("cuEventCreate", device.cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        self.pending = False

    def wait(self) -> None:
        """Until the last copy through this buffer has finished (it may be reused)."""
        if self.pending:
            self.device.call("cuEventSynchronize", self.event)
            self.pending = False

    def issued(self) -> None:
        self.device.call("cuEventRecord", self.event, self.device.stream)
        self.pending = True


class CUDAAllocator(Allocator):
    """``cuMemAlloc`` blocks (handles are device addresses, ints), pooled by size; copies through
    pinned staging buffers (see the module docstring)."""

    def __init__(self, device: CUDADevice, pool_limit_bytes: int):
        super().__init__(pool_limit_bytes)
        self.device = device
        self._stages: list[_Stage] = []
        self._turn = 0

    def _alloc(self, nbytes: int) -> int:
        dev = self.device
        try:
            return int(dev.call("cuMemAlloc", max(nbytes, 1)))
        except CUDAError as e:
            if "OUT_OF_MEMORY" not in str(e):
                raise
            self.clear_pool()  # (pooled blocks of other sizes: give them back and try once more)
            return int(dev.call("cuMemAlloc", max(nbytes, 1)))

    def free(self, handle: int, nbytes: int) -> None:
        if self._pooled_bytes + nbytes <= self.pool_limit_bytes:
            super().free(handle, nbytes)
        else:
            self._release([handle])

    def clear_pool(self) -> None:
        self._release([h for blocks in self._pool.values() for h in blocks])
        super().clear_pool()

    def _release(self, handles: list[int]) -> None:
        if handles:
            self.device.synchronize()  # (a queued kernel may still use them)
            for h in handles:
                self.device.call("cuMemFree", h)

    def _stage(self) -> _Stage:
        """The next of the two pinned buffers (created on first use), once it is free."""
        if not self._stages:
            self._stages = [_Stage(self.device, STAGE_BYTES), _Stage(self.device, STAGE_BYTES)]
        stage = self._stages[self._turn]
        self._turn ^= 1
        stage.wait()
        return stage

    def copyin(self, handle: int, data: np.ndarray) -> None:
        src = data.reshape(-1).view(np.uint8)
        for start in range(0, src.size, STAGE_BYTES):
            n = min(STAGE_BYTES, src.size - start)
            stage = self._stage()
            stage.array[:n] = src[start:start + n]
            self.device.call("cuMemcpyHtoDAsync", handle + start, stage.ptr, n, self.device.stream)
            stage.issued()

    def copyout(self, handle: int, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, dtype=np.uint8)
        for start in range(0, nbytes, STAGE_BYTES):
            n = min(STAGE_BYTES, nbytes - start)
            stage = self._stage()
            self.device.call("cuMemcpyDtoHAsync", stage.ptr, handle + start, n, self.device.stream)
            stage.issued()
            stage.wait()
            out[start:start + n] = stage.array[:n]
        return out


# --- programs --------------------------------------------------------------------------------------

def kernel_params(handles: list[int]) -> tuple[ctypes.Array, list[ctypes.c_uint64]]:
    """cuLaunchKernel's ``void** kernelParams`` for pointer arguments ``handles`` (device
    addresses): an array of pointers to the values. Both returned objects must stay alive until
    the launch call returns (the driver copies the values then)."""
    values = [ctypes.c_uint64(h) for h in handles]
    return (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values)), values


class CUDAProgram(Program):
    """One ``__global__`` function, launched on the device's stream with the blocks and threads
    :func:`corvid.render.cuda.cuda_launch` gives."""

    def __init__(self, device: CUDADevice, function: Any, dims: CUDALaunch):
        self.device, self.function, self.dims = device, function, dims

    def __call__(self, handles: list[int]) -> None:
        if self.dims.blocks == 0:  # (an empty output: nothing to compute)
            return
        params, _alive = kernel_params(handles)
        tx, ty, tz = self.dims.threads
        self.device.call("cuLaunchKernel", self.function, self.dims.blocks, 1, 1, tx, ty, tz, 0, self.device.stream,
                         ctypes.addressof(params), 0)


# --- the device ------------------------------------------------------------------------------------

class CUDADevice(Device):
    """An NVIDIA GPU through cuda-bindings (see the module docstring). The CPU's optimization
    actions and beam search do not apply (``optimization_actions``); :meth:`heuristics` chooses
    GPU-style ones (register tiles, work-group reduces)."""

    name = "CUDA"
    optimization_actions = False
    # a long reduce with few outputs runs as two kernels (corvid/ops/reduce.py), neighbouring
    # threads reading neighbouring elements, so that more than one block takes part
    split_reduces = "strided"

    def __init__(self) -> None:
        self.cu, nvrtc = _bindings()
        self._describe = _driver_error(self.cu)
        self.compiler = NVRTCCompiler(nvrtc)
        cu = self.cu
        try:
            status = cu.cuInit(0)[0]
        except RuntimeError as e:  # (cuda-pathfinder: libcuda.so not found)
            raise RuntimeError(f"the CUDA device found no NVIDIA driver (libcuda): install one; {e}") from e
        if int(status) != 0:
            raise RuntimeError(f"the CUDA device could not start the driver: {self._describe(status)} "
                               "(is there an NVIDIA GPU and a working driver? see nvidia-smi)")
        count = _check(cu.cuDeviceGetCount(), "cuDeviceGetCount", self._describe)
        ordinal = int(os.environ.get("CORVID_CUDA_DEVICE", "0") or 0)
        if not 0 <= ordinal < count:
            raise RuntimeError(f"CORVID_CUDA_DEVICE={ordinal}: there are {count} CUDA GPUs")
        self.cu_device = _check(cu.cuDeviceGet(ordinal), "cuDeviceGet", self._describe)
        self.context = _check(cu.cuDevicePrimaryCtxRetain(self.cu_device), "cuDevicePrimaryCtxRetain", self._describe)
        self._thread = threading.local()  # (whether the context is current in a thread)
        attr = cu.CUdevice_attribute
        major = self.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.cu_device)
        minor = self.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.cu_device)
        self.arch = f"sm_{major}{minor}"
        self.max_threads = self.call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                     self.cu_device)
        self.gpu_name = self.call("cuDeviceGetName", 256, self.cu_device).split(b"\0")[0].decode()
        total = self.call("cuDeviceTotalMem", self.cu_device)
        self.stream = self.call("cuStreamCreate", cu.CUstream_flags.CU_STREAM_NON_BLOCKING)
        self.allocator = CUDAAllocator(self, pool_limit_bytes=int(total) // 4)
        self.renderer = CUDARenderer()
        self._functions: dict[bytes, tuple[Any, Any]] = {}  # cubin -> (module, function)
        self._timing: tuple[Any, Any] | None = None  # the two events of elapsed()

    def call(self, fn: str, *args: Any) -> Any:
        """``cuda.bindings.driver.<fn>(*args)`` in this device's context; its values (see
        :func:`_check`), CUDAError when it fails."""
        self._enter()
        return _check(getattr(self.cu, fn)(*args), fn, self._describe)

    def _enter(self) -> None:
        """Make the device's context current in this thread (each thread has its own)."""
        if not getattr(self._thread, "current", False):
            _check(self.cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent", self._describe)
            self._thread.current = True

    def compile(self, kernel: Kernel, source: str) -> CUDAProgram:
        if not isinstance(kernel, Kernel):
            raise NotImplementedError(f"the CUDA device cannot run {type(kernel).__name__} {kernel.name!r} yet "
                                      "(only kernels of the IR; scatter is rendered for the CPU only)")
        dims = cuda_launch(kernel)
        if math.prod(dims.threads) > self.max_threads:
            raise RuntimeError(f"kernel {kernel.name}: a block of {dims.threads} threads is more than "
                               f"{self.gpu_name} allows ({self.max_threads})")
        cubin = self.compiler.cubin(source, self.arch, kernel.name)
        found = self._functions.get(cubin)
        if found is None:
            try:
                module = self.call("cuModuleLoadData", cubin)
            except CUDAError as e:
                version = self.call("cuDriverGetVersion")
                raise CUDAError(f"{e}: kernel {kernel.name} built by NVRTC {self.compiler.version} for {self.arch} "
                                f"does not load on driver {version // 1000}.{version % 1000 // 10}; install an "
                                "NVRTC of the driver's major version (nvidia-cuda-nvrtc 13.x for 13.x drivers, "
                                "nvidia-cuda-nvrtc-cu12 for 12.x)") from None
            found = self._functions[cubin] = (module, self.call("cuModuleGetFunction", module, kernel.name.encode()))
        return CUDAProgram(self, found[1], dims)

    def heuristics(self, kernel: Kernel) -> Kernel:
        """The GPU-style actions (:func:`corvid.codegen.opt.gpu_heuristics`), with blocks no
        larger than this GPU allows."""
        return gpu_heuristics(kernel, self.max_threads)

    def synchronize(self) -> None:
        self.call("cuStreamSynchronize", self.stream)

    def elapsed(self, work: Callable[[], None]) -> float:
        """Seconds of GPU time that the work ``work()`` launches on this device takes, measured
        with CUDA events around it on the stream (waits for it to finish)."""
        if self._timing is None:
            self._timing = tuple(self.call("cuEventCreate", self.cu.CUevent_flags.CU_EVENT_DEFAULT) for _ in range(2))
        start, end = self._timing
        self.call("cuEventRecord", start, self.stream)
        work()
        self.call("cuEventRecord", end, self.stream)
        self.call("cuEventSynchronize", end)
        return float(self.call("cuEventElapsedTime", start, end)) / 1000

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
  in memory and on disk (``cache_dir()/cuda/<key[:2]>/<key>.cubin``, keyed by the source, the
  architecture, NVRTC's version and the options), trusted as the CPU's kernel cache trusts its
  libraries (:mod:`corvid.runtime.compiler`): folders of this user's that no one else can write
  (else one warning and a private temporary cache), entries written atomically with a
  ``<key>.sha256`` sidecar over the key and the cubin (an entry copied under another key does not
  verify), read once through a descriptor opened without following links and checked (a regular
  file of this user's, writable by no one else); the bytes checked are the bytes loaded. An entry
  that fails a check is deleted and built again.
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
* **Graphs**: :meth:`CUDADevice.graph` records a fixed sequence of launches (a ``jit`` program
  replayed again) into a CUDA graph, launched with one call from then on; the kernels whose
  arguments change between calls get new pointers first (:class:`CUDAGraph`).
  ``CORVID_CUDA_GRAPHS=0`` turns graphs off.
* **Search**: with ``CORVID_BEAM=N`` kernels are beam-searched over the GPU-style actions
  (:meth:`CUDADevice.candidate_opts`), timed in this process by :meth:`CUDADevice.elapsed`, and
  the winners cached per GPU model (:meth:`CUDADevice.search_identity`).

Graphs and the search are written against cuda-bindings 13.x but have not run on a GPU yet.

Without cuda-bindings, using ``device="CUDA"`` raises ImportError naming the extra; without a
driver or a GPU, RuntimeError says so (the backend suite then skips with that reason).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import math
import os
import pathlib
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..codegen.ir import Kernel, Opt
from ..codegen.opt import gpu_heuristics
from ..graph.symbolic import Sym, size_function
from ..render.cuda import MAX_BLOCKS, VECTOR_BYTES, CUDALaunch, CUDARenderer, cuda_launch, scatter_launch
from ..render.gpu import Launch
from .compiler import _cache_folder, _entry_digest, _open_private, _read_fd, _write_private
from .device import Allocator, Device, Program

STAGE_BYTES = 16 << 20  # each of the two pinned host buffers that copies go through
EXECUTABLES = 2  # instantiations of one CUDA graph that a call chooses from (see CUDAGraph)
# NVRTC options of every kernel (with --gpu-architecture): no fast math, no contraction of a*b+c
# into fma beyond the IR's own, no warnings (unused helpers of the prelude)
NVRTC_OPTIONS = ("--fmad=false", "-w")
_UNSET = object()
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


def _cubin_folder(key: str) -> pathlib.Path | None:
    """The folder of the disk entry ``key`` (checked, or this process's private temporary cache:
    see :func:`corvid.runtime.compiler._cache_folder`); None when ``CORVID_NO_DISK_CACHE`` asks
    for no disk cache (cubins are then kept in memory only)."""
    if os.environ.get("CORVID_NO_DISK_CACHE", "") not in ("", "0"):
        return None
    return _cache_folder("cuda", key[:2])


def _read_entry(folder: pathlib.Path, key: str) -> bytes:
    """The cubin of the entry ``key`` in ``folder``, read once through a checked descriptor
    (:func:`corvid.runtime.compiler._open_private`), if its sidecar holds the entry digest of the
    key and those bytes. Raises OSError (FileNotFoundError for a missing file, PermissionError for
    a foreign or writable one, plain OSError for a digest that does not match)."""
    fd = _open_private(folder / f"{key}.sha256")
    try:
        expected = os.read(fd, 256).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    fd = _open_private(folder / f"{key}.cubin")
    try:
        data = _read_fd(fd)
    finally:
        os.close(fd)
    if _entry_digest(key, data) != expected:
        raise OSError(f"{folder / key}.cubin: the checksum in its sidecar does not match (corrupt, or another entry's)")
    return data


def _load_cubin(key: str) -> bytes | None:
    """The cached cubin ``key`` if its entry verifies (:func:`_read_entry`); None when it is
    missing, and None (the entry deleted, to be built again) when it does not verify."""
    folder = _cubin_folder(key)
    if folder is None:
        return None
    try:
        return _read_entry(folder, key)
    except FileNotFoundError:
        return None  # not cached yet, or another process is writing it
    except OSError:
        (folder / f"{key}.cubin").unlink(missing_ok=True)
        (folder / f"{key}.sha256").unlink(missing_ok=True)
        return None


def _store_cubin(key: str, cubin: bytes) -> None:
    """Write the entry ``key`` (its sidecar first: a reader finding only one file builds again)."""
    folder = _cubin_folder(key)
    if folder is None:
        return
    try:
        _write_private(folder / f"{key}.sha256", _entry_digest(key, cubin).encode())
        _write_private(folder / f"{key}.cubin", cubin)
    except OSError:  # (a full disk: the cubin is built again next time)
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
        # one copy through the staging buffers at a time: a DataLoader thread copies the next batch
        # in while the training thread copies a loss out (two threads once took the same buffer)
        self._copying = threading.Lock()

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
        with self.lock:  # (the list and the clearing at once: another thread must not take a block being freed)
            handles = [h for blocks in self._pool.values() for h in blocks]
            super().clear_pool()
        self._release(handles)

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
        with self._copying:
            self._copyin(handle, src)

    def _copyin(self, handle: int, src: np.ndarray) -> None:
        for start in range(0, src.size, STAGE_BYTES):
            n = min(STAGE_BYTES, src.size - start)
            stage = self._stage()
            stage.array[:n] = src[start:start + n]
            self.device.call("cuMemcpyHtoDAsync", handle + start, stage.ptr, n, self.device.stream)
            stage.issued()

    def copyout(self, handle: int, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, dtype=np.uint8)
        with self._copying:
            self._copyout(handle, out)
        return out

    def _copyout(self, handle: int, out: np.ndarray) -> None:
        nbytes = out.size
        for start in range(0, nbytes, STAGE_BYTES):
            n = min(STAGE_BYTES, nbytes - start)
            stage = self._stage()
            self.device.call("cuMemcpyDtoHAsync", stage.ptr, handle + start, n, self.device.stream)
            stage.issued()
            stage.wait()
            out[start:start + n] = stage.array[:n]


# --- programs --------------------------------------------------------------------------------------

_PARAM_TYPES: dict[int, tuple[Any, Any]] = {}  # argument count -> (uint64 array type, pointer array type)


def kernel_params(handles: list[int]) -> tuple[ctypes.Array, ctypes.Array]:
    """cuLaunchKernel's ``void** kernelParams`` for pointer arguments ``handles`` (device
    addresses): an array of pointers to the values, which lie in a second array. Both returned
    objects must stay alive until the launch call returns (the driver copies the values then).
    (Two ctypes objects per launch, whatever the count: this runs at every eager kernel.)"""
    n = len(handles)
    types = _PARAM_TYPES.get(n)
    if types is None:
        types = _PARAM_TYPES[n] = (ctypes.c_uint64 * n, ctypes.c_void_p * n)
    values = types[0](*handles)
    base = ctypes.addressof(values)
    return types[1](*range(base, base + 8 * n, 8)), values


class CUDAProgram(Program):
    """One ``__global__`` function, launched on the device's stream with the blocks and threads
    :func:`corvid.render.cuda.cuda_launch` gives."""

    def __init__(self, device: CUDADevice, function: Any, dims: CUDALaunch):
        self.device, self.function, self.dims = device, function, dims
        # a kernel over symbolic sizes (a jit program with dynamic sizes): its block count per call
        self._blocks = size_function(dims.blocks) if isinstance(dims.blocks, Sym) else None
        self.takes_sizes = self._blocks is not None

    def __call__(self, handles: list[int], sizes: list[int] | None = None) -> None:
        self.launch(handles, self.device.stream, sizes)

    def launch(self, handles: list[int], stream: Any, sizes: list[int] | None = None) -> None:
        """Launch on ``handles`` (device addresses: output first) on ``stream``; nothing for an
        empty output. ``sizes``: the symbolic sizes' values, for a kernel over them."""
        blocks = self.dims.blocks
        if self._blocks is not None:
            if sizes is None:
                raise RuntimeError("a kernel over symbolic sizes needs their values (it runs inside a jit program)")
            blocks = self._blocks(sizes)
            if blocks > MAX_BLOCKS:
                raise RuntimeError(f"kernel over symbolic sizes {sizes}: {blocks} blocks (at most {MAX_BLOCKS})")
        if blocks == 0:
            return
        params, _alive = kernel_params(handles)
        tx, ty, tz = self.dims.threads
        self.device.call("cuLaunchKernel", self.function, blocks, 1, 1, tx, ty, tz, 0, stream,
                         ctypes.addressof(params), 0)

    def node_params(self, handles: list[int]) -> tuple[Any, Any]:
        """(``CUDA_KERNEL_NODE_PARAMS`` of this launch on ``handles``, what must stay alive until
        the driver call that takes them returns: it copies the argument values)."""
        params, alive = kernel_params(handles)
        p = self.device.cu.CUDA_KERNEL_NODE_PARAMS()
        p.func = self.function
        p.gridDimX, p.gridDimY, p.gridDimZ = self.dims.blocks, 1, 1
        p.blockDimX, p.blockDimY, p.blockDimZ = self.dims.threads
        p.sharedMemBytes = 0
        p.kernelParams = ctypes.addressof(params)
        return p, (params, alive)


# --- graphs ----------------------------------------------------------------------------------------

class CUDAGraph:
    """A fixed sequence of :class:`CUDAProgram` launches replayed as one CUDA graph: one
    ``cuGraphLaunch`` per call instead of a ``cuLaunchKernel`` per kernel
    (:meth:`CUDADevice.graph`). Calling it with each program's handles (device addresses) does what
    calling the programs in order on those handles would.

    * **Recording** (the first call): the launches are captured on a stream of the graph's own
      (``cuStreamBeginCapture`` in thread-local mode; nothing runs, and work that other threads put
      on the device's stream meanwhile is not captured), and each launch's kernel node is read from
      the capture (``cuStreamGetCaptureInfo``). A capture on one stream is a chain: each kernel
      depends on the one before, as on the stream.
    * **New arguments** (every call): a graph bakes in its kernels' argument pointers, and a caller
      passes new buffers at each call (arguments, results). So before the launch, each kernel node
      whose handles differ from those it holds is pointed at the new ones with
      ``cuGraphExecKernelNodeSetParams``, which affects only later launches (one still running is
      unaffected, so no wait is needed); the rest keep theirs. Copying the inputs into buffers of
      the graph's own instead (memcpy nodes) would cost a copy of every input and result at each
      call; an update costs a few microseconds of host time for each kernel that touches the
      call's inputs or results. A caller that keeps its intermediate values' memory fixed (``jit``
      does) leaves the other kernels untouched.
    * **Two executables** (``EXECUTABLES``): the graph is instantiated up to twice, and a call
      launches the one whose arguments differ least from its own. Memory that alternates between
      calls then needs no update at all: a training step's new state takes the memory of the state
      before last (the pool hands it back), so its kernels see two sets of pointers, one per
      executable.

    The graph and its executables are destroyed when this object is collected (a launch still
    running finishes first: the driver frees it afterwards). Calls are serialized by a lock: the
    node updates and the launch belong together."""

    def __init__(self, device: CUDADevice, programs: list[CUDAProgram]):
        self.device, self.programs = device, programs
        self.graph: Any = None
        self.nodes: list[Any] = []  # each program's kernel node (None: an empty launch, no node)
        self.recorded: list[list[int]] = []  # the handles each node was captured with
        self.executables: list[tuple[Any, list[list[int]]]] = []  # (executable, handles of each node now)
        self._owned: list[Any] = []  # the executables, destroyed with the graph
        self._lock = threading.Lock()

    def __call__(self, handles: list[list[int]]) -> None:
        dev = self.device
        with self._lock:
            if self.graph is None:
                self._record(handles)
            executable, current = self._closest(handles)
            for i, node in enumerate(self.nodes):
                if node is not None and handles[i] != current[i]:
                    params, _alive = self.programs[i].node_params(handles[i])
                    dev.call("cuGraphExecKernelNodeSetParams", executable, node, params)
                    current[i] = list(handles[i])
            dev.call("cuGraphLaunch", executable, dev.stream)

    def _closest(self, handles: list[list[int]]) -> tuple[Any, list[list[int]]]:
        """The executable whose nodes' handles differ least from ``handles``: a new one (as
        recorded) while none matches and there are fewer than ``EXECUTABLES``."""
        def changes(current: list[list[int]]) -> int:
            return sum(node is not None and h != c for node, h, c in zip(self.nodes, handles, current))

        best = min(self.executables, key=lambda e: changes(e[1]), default=None)
        if best is not None and (changes(best[1]) == 0 or len(self.executables) >= EXECUTABLES):
            return best
        executable = self.device.call("cuGraphInstantiate", self.graph, 0)
        self._owned.append(executable)
        self.executables.append((executable, [list(h) for h in self.recorded]))
        return self.executables[-1]

    def _record(self, handles: list[list[int]]) -> None:
        dev = self.device
        stream = dev.capture_stream()
        dev.call("cuStreamBeginCapture", stream, dev.cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        nodes: list[Any] = []
        try:
            for program, h in zip(self.programs, handles):
                if program.dims.blocks == 0:
                    nodes.append(None)
                    continue
                program.launch(h, stream)
                # (status, id, graph, dependencies, ...): the next node would depend on the last one
                deps = dev.call("cuStreamGetCaptureInfo", stream)[3]
                nodes.append(deps[0])
        except BaseException:
            with contextlib.suppress(CUDAError):  # end the capture; what it holds is of no use
                dev.call("cuGraphDestroy", dev.call("cuStreamEndCapture", stream))
            raise
        # (the graph stays: cuGraphExecKernelNodeSetParams names a node by its node in the graph)
        self.graph = dev.call("cuStreamEndCapture", stream)
        self.nodes, self.recorded = nodes, [list(h) for h in handles]
        done = weakref.finalize(self, _destroy_graph, dev, self.graph, self._owned)
        done.atexit = False  # (at exit the driver releases everything itself)


class SegmentedGraph:
    """A fixed sequence of kernels and library calls (cuBLASLt's products): each run of kernels
    between library calls is a :class:`CUDAGraph` of its own (a run whose launches are all empty
    is launched directly), and each library call is made as it is, on the device's stream, so the
    order is the sequence's. A library's kernels cannot be pointed at new buffers as a graph's own
    kernels can (their parameters are the library's), so they are not captured: a product's
    operands change at every call where they are the step's inputs."""

    def __init__(self, device: CUDADevice, programs: list[Any]):
        self.device = device
        self.parts: list[tuple[Any, int, int]] = []  # (a graph or a program, first index, end)
        start = 0
        for i, p in enumerate(programs + [None]):
            if p is None or not isinstance(p, CUDAProgram):
                run = programs[start:i]
                if run and any(q.dims.blocks for q in run):
                    self.parts.append((CUDAGraph(device, run), start, i))
                else:
                    self.parts.extend((q, j, j + 1) for j, q in enumerate(run, start))
                if p is not None:
                    self.parts.append((p, i, i + 1))
                start = i + 1

    def __call__(self, handles: list[list[int]]) -> None:
        for part, start, end in self.parts:
            if isinstance(part, CUDAGraph):
                part(handles[start:end])
            else:
                part(handles[start])


def _destroy_graph(device: CUDADevice, graph: Any, executables: list[Any]) -> None:
    with contextlib.suppress(Exception):  # (collected while the driver is shutting down)
        for executable in executables:
            device.call("cuGraphExecDestroy", executable)
        device.call("cuGraphDestroy", graph)


# --- the device ------------------------------------------------------------------------------------

def arch_number(arch: str) -> int:
    """A compute capability ``"sm_90"`` as 90 (0 for anything else)."""
    return int(arch[3:]) if arch.startswith("sm_") and arch[3:].isdigit() else 0


def tensor_core_arch(arch: str) -> bool:
    """Whether a GPU of compute capability ``arch`` (``"sm_90"``) has bfloat16 ``mma.sync`` (sm_80 on)."""
    return arch_number(arch) >= 80


class CUDADevice(Device):
    """An NVIDIA GPU through cuda-bindings (see the module docstring). The CPU's optimization
    actions do not apply (``optimization_actions``); :meth:`heuristics` chooses GPU-style ones
    (register tiles, work-group reduces), and a beam search (``CORVID_BEAM``) searches over those
    (:meth:`candidate_opts`), timed by :meth:`elapsed`, cached per GPU model
    (:meth:`search_identity`).

    ``bindings``: the ``(driver, nvrtc)`` modules to use instead of cuda-bindings' (tests pass
    stand-ins that record the calls)."""

    name = "CUDA"
    optimization_actions = False
    sum_block = 64  # a cascaded sum's innermost run: a work item adds it alone, with no vector lanes (codegen/cascade.py)
    # a long reduce with few outputs runs as two kernels (corvid/ops/reduce.py), so that more than
    # one block takes part: partials over contiguous chunks, each shared by a block's threads
    # (group_local), which then read neighbouring elements. The strided layout (partial p takes
    # every 1024th element) made those threads read 1024 floats apart: a 64M sum ran at
    # 0.53 TB/s on an H200 where PyTorch's reached 3.36
    split_reduces = "chunks"

    def __init__(self, bindings: tuple[Any, Any] | None = None) -> None:
        self.cu, nvrtc = bindings or _bindings()
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
        self.renderer.attention_variant = self.attention_variant  # (tensor-core attention: which split, see there)
        self._functions: dict[bytes, tuple[Any, Any]] = {}  # cubin -> (module, function)
        self._timing: tuple[Any, Any] | None = None  # the two events of elapsed()
        self._event_pool: list[Any] = []  # timing events of time_launch, reused
        self._capture: Any = None  # the stream graphs are recorded on (created by the first)
        self._blas: Any = _UNSET  # cuBLASLt's state (blas()), made on first use
        self.blas_error: str | None = None  # why blas() is None
        self._blas_lock = threading.Lock()
        self._attention_tc: bool | None = None  # attention_tensor_cores, found on first use
        self.attention_tc_error: str | None = None  # why the tensor-core attention kernels are not used
        self._tuning = threading.Lock()  # (one attention variant timed at a time)

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
        from ..engine.schedule import ScatterKernel

        from ..engine.host import TemplateKernel

        if isinstance(kernel, ScatterKernel):  # one thread per output column and range of rows (render/gpu.py: _render_scatter)
            dims = scatter_launch(self.renderer.scatter_work_items(*kernel.shape))
        elif isinstance(kernel, TemplateKernel):  # (a host op's template: its own blocks and threads)
            dims = CUDALaunch(Launch((), ()), kernel.groups, (kernel.threads, 1, 1), kernel.groups)
        elif not isinstance(kernel, Kernel):
            raise NotImplementedError(f"the CUDA device cannot run {type(kernel).__name__} {kernel.name!r} "
                                      "(only kernels of the IR and scatter)")
        else:
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

    def blas(self) -> Any:
        """cuBLASLt on this device (:class:`corvid.runtime.cublaslt.Blas`: large matrix products go
        to it, see :mod:`corvid.ops.blas`), or None, with the reason in ``blas_error``: when
        ``CORVID_CUBLAS=0``, or the library is not installed or does not start (a warning says so
        once; products then run as corvid's own kernels)."""
        if self._blas is _UNSET:
            with self._blas_lock:
                if self._blas is _UNSET:
                    self._blas = self._start_blas()
        return self._blas

    def _start_blas(self) -> Any:
        from .cublaslt import Blas, CublasError, CublasLt, load

        if os.environ.get("CORVID_CUBLAS", "1").strip() == "0":
            self.blas_error = "CORVID_CUBLAS=0"
            return None
        try:
            return Blas(self, CublasLt(self._blas_library() or load()))
        except (ImportError, OSError, AttributeError, CublasError) as e:
            self.blas_error = f"{type(e).__name__}: {e}"
            warnings.warn(f"the CUDA device computes matrix products with its own kernels, without cuBLASLt "
                          f"({self.blas_error}); they are many times slower at tensor-core sizes", stacklevel=3)
            return None

    def _blas_library(self) -> Any:
        """The cuBLASLt library to use instead of the installed one (tests give a stand-in)."""
        return None

    @property
    def attention_tensor_cores(self) -> bool:
        """Whether attention of bfloat16 operands runs on tensor cores (corvid/render/cuda_attention.py):
        a GPU with ``mma.sync`` on bfloat16 (:func:`tensor_core_arch`) on which a small kernel of
        the kind compiles and loads, tried once (else a warning, the reason in
        ``attention_tc_error``, and the float32 kernels)."""
        if self._attention_tc is None:
            with self._blas_lock:
                if self._attention_tc is None:
                    self._attention_tc = self._probe_attention_tc()
        return self._attention_tc

    def _probe_attention_tc(self) -> bool:
        if not tensor_core_arch(self.arch):
            self.attention_tc_error = f"{self.arch} has no bfloat16 mma.sync (sm_80 and later)"
            return False
        from ..render.cuda_attention import render

        name = "cv_probe_attention_tc"
        try:
            src = render(name, {"kind": "fwd_tc", "causal": True, "scale": 0.25, "has_mask": False},
                         [(1, 16, 16)] * 3, {})[0]
            module = self.call("cuModuleLoadData", self.compiler.cubin(src, self.arch, name))
            self.call("cuModuleUnload", module)
        except Exception as e:
            self.attention_tc_error = f"{type(e).__name__}: {str(e)[:400]}"
            warnings.warn(f"bfloat16 attention runs in float32 kernels: its tensor-core kernel did not build "
                          f"({self.attention_tc_error})", stacklevel=3)
            return False
        try:
            wrong = self._check_attention_tc()
        except Exception as e:  # (a kernel that fails to run is as unusable as a wrong one)
            wrong = f"{type(e).__name__}: {str(e)[:400]}"
        if wrong is not None:
            self.attention_tc_error = wrong
            warnings.warn(f"bfloat16 attention runs in float32 kernels: its tensor-core kernels did not compute "
                          f"what they should on this GPU ({wrong}); please report it", stacklevel=3)
            return False
        return True

    def _check_attention_tc(self) -> str | None:
        """What the tensor-core attention kernels got wrong on a small causal problem, or None:
        the forward, ``dq`` and ``dk``/``dv`` once each on 192 queries and keys of 64 (three row
        blocks: the tile stages, tiles at the edges and wholly inside), against the host function
        they stand for (``corvid/nn/flash.py: _host``), within the bfloat16 roundings they make.
        Their layouts (``ldmatrix``, ``mma``) are checked in an emulation without a GPU; this
        checks them on the GPU itself, once, before any result depends on them."""
        import ml_dtypes

        from .. import dtype as dt
        from ..nn.flash import _host

        rng = np.random.default_rng(0)
        shape, scale = (1, 192, 64), 0.125
        q, k, v, g = (rng.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16) for _ in range(4))
        params = {"causal": True, "scale": scale, "has_mask": False}
        want_out, want_lse = _host(q, k, v, kind="fwd_tc", **params)
        fwd = self._run_probe("fwd_tc", [q, k, v], dt.float32, q.size + shape[1], params)
        out, lse = fwd[:q.size].reshape(shape), fwd[q.size:].reshape(shape[:-1])
        delta = (g.astype(np.float32) * out).sum(-1).astype(np.float32)
        rest = [g, lse.astype(np.float32), delta]
        want_dq = _host(q, k, v, *rest, kind="dq_tc", **params)
        want_dk, want_dv = _host(q, k, v, *rest, kind="dkdv_tc", **params)
        dq = self._run_probe("dq_tc", [q, k, v, *rest], dt.bfloat16, q.size, params).reshape(shape)
        dkdv = self._run_probe("dkdv_tc", [q, k, v, *rest], dt.bfloat16, 2 * q.size, params)
        for what, got, want, tol in (("output", out, want_out, 8e-3), ("log-sum-exp", lse, want_lse, 1e-4),
                                     ("dq", dq, want_dq, 1.5e-2), ("dk", dkdv[:q.size].reshape(shape), want_dk, 1.5e-2),
                                     ("dv", dkdv[q.size:].reshape(shape), want_dv, 1.5e-2)):
            err = float(np.abs(got.astype(np.float64) - want).max())
            if not err <= tol * max(1.0, float(np.abs(want).max())):  # (a nan fails too)
                return f"{what} off by {err:.3g}"
        return None

    def _run_probe(self, kind: str, arrays: list[np.ndarray], out_dtype: Any, out_size: int, params: dict) -> np.ndarray:
        """One tensor-core attention kernel on ``arrays``, its output as float32 (a check's run)."""
        from ..render.cuda_attention import render

        name = f"cv_check_attention_{kind}"
        src, blocks, threads, _ = render(name, {"kind": kind, **params}, [a.shape for a in arrays], {})
        module = self.call("cuModuleLoadData", self.compiler.cubin(src, self.arch, name))
        alloc, held = self.allocator, []
        try:
            function = self.call("cuModuleGetFunction", module, name.encode())
            for a in arrays:
                raw = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
                held.append((alloc.alloc(raw.size), raw.size))
                alloc.copyin(held[-1][0], raw)
            nbytes = out_size * out_dtype.itemsize
            out = alloc.alloc(nbytes)
            held.append((out, nbytes))
            program = CUDAProgram(self, function, CUDALaunch(Launch((), ()), blocks, (threads, 1, 1), blocks))
            program([out] + [h for h, _ in held[:-1]])
            return alloc.copyout(out, nbytes).view(out_dtype.np).astype(np.float32)  # (after it: one stream)
        finally:
            self.synchronize()  # (before the memory goes back: the kernel may still run after a failure)
            for h, n in held:
                alloc.free(h, n)
            self.call("cuModuleUnload", module)

    def attention_variant(self, kind: str, params: dict, shapes: list[tuple[int, ...]], mask_info: dict) -> Any:
        """How tensor-core attention kernel ``kind`` splits its work at these shapes (a
        :class:`corvid.render.cuda_attention.Variant`): the default; with a beam width
        (``CORVID_BEAM``, ``cv.beam``) the fastest of ``cuda_attention.variants`` as this GPU times
        them (:meth:`time_attention_variants`), stored in the search cache (``search.sqlite``)
        under the GPU model, the shapes and the mask's layout, so that later processes read it."""
        import json

        from ..codegen.search import SearchCache, beam_width
        from ..render import cuda_attention as CA

        if beam_width() == 0:
            return CA.DEFAULT
        key = "|".join(["attention", self.search_identity(), kind, repr([tuple(s) for s in shapes]),
                        repr(bool(params["causal"])), repr(bool(params["has_mask"])), repr(sorted(mask_info.items()))])
        db = SearchCache()
        with self._tuning:
            stored = CA.parse_variant(db.get_text(key), kind, shapes[0][-1], shapes[2][-1])
            if stored is not None:
                return stored
            start = time.perf_counter()
            try:
                timed = [(t, i, v) for i, (v, t) in enumerate(self.time_attention_variants(kind, params, shapes, mask_info))
                         if isinstance(t, float)]
            except Exception as e:  # noqa: BLE001 -- (no memory for the timing's inputs...): the default, not stored
                warnings.warn(f"the variants of attention kernel {kind} were not timed ({type(e).__name__}: "
                              f"{str(e)[:200]}); it runs in its default variant", stacklevel=2)
                return CA.DEFAULT
            best = min(timed)[2] if timed else CA.DEFAULT
            db.put_text(key, json.dumps(best.as_dict()), time.perf_counter() - start)
            return best

    def time_attention_variants(self, kind: str, params: dict, shapes: list[tuple[int, ...]], mask_info: dict,
                                variants: list[Any] | None = None, runs: int = 5) -> list[tuple[Any, Any]]:
        """Each variant of tensor-core attention kernel ``kind`` (``cuda_attention.variants`` by
        default, the default variant first) run on random inputs of ``shapes``: ``(variant, seconds)``,
        the fastest of ``runs`` timed on the GPU, or ``(variant, why)`` for one that did not build,
        failed, or gave other values than the first (beyond the bfloat16 roundings a tile can
        move: the values are the same computation split otherwise, see ``Variant``)."""
        from concurrent.futures import ThreadPoolExecutor

        import ml_dtypes

        from .. import dtype as dt
        from ..render import cuda_attention as CA

        D, DV = shapes[0][-1], shapes[2][-1]
        todo = list(variants) if variants is not None else CA.variants(kind, D, DV)
        rng = np.random.default_rng(0)
        has_mask = bool(params["has_mask"])
        arrays = []
        for i, shape in enumerate(shapes):
            role = i if i < 3 or not has_mask else i - 1
            if i == 3 and has_mask:
                arrays.append(np.zeros(shape, np.float32))  # (a mask that hides nothing: every score computed)
            elif role < 4:  # q, k, v, the output's gradient
                arrays.append(rng.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16))
            elif role == 4:  # log-sum-exp: about a row's, so that the probabilities stay finite
                arrays.append((rng.standard_normal(shape) + math.log(max(shapes[1][-2], 1)) + 2).astype(np.float32))
            else:
                arrays.append(rng.standard_normal(shape).astype(np.float32))
        q, k, v = shapes[:3]
        BH, TQ = math.prod(q[:-2]), q[-2]
        out_dtype, out_size = (dt.float32, BH * TQ * (DV + 1)) if kind == "fwd_tc" else \
            (dt.bfloat16, math.prod(q) if kind == "dq_tc" else math.prod(k) + math.prod(v))
        results: list[tuple[Any, Any]] = []
        made = []
        for i, variant in enumerate(todo):
            name = f"cv_variant_{kind}_{i}"
            try:
                src, blocks, threads, _ = CA.render(name, params, shapes, mask_info, variant=variant)
            except (ValueError, NotImplementedError) as e:
                results.append((variant, str(e)))
                continue
            made.append((variant, name, src, blocks, threads))

        def build(item: tuple) -> Any:
            try:
                return self.compiler.cubin(item[2], self.arch, item[1])
            except Exception as e:  # noqa: BLE001 -- a variant that does not build is reported, not raised
                return e

        with ThreadPoolExecutor(max_workers=min(8, max(1, len(made)))) as pool:
            cubins = list(pool.map(build, made))
        alloc, held, modules = self.allocator, [], []
        try:
            for a in arrays:
                raw = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
                held.append((alloc.alloc(max(raw.size, 1)), max(raw.size, 1)))
                alloc.copyin(held[-1][0], raw)
            nbytes = out_size * out_dtype.itemsize
            out = alloc.alloc(nbytes)
            held.append((out, nbytes))
            handles = [out] + [h for h, _ in held[:-1]]
            unset = np.full(nbytes, 0xFF, np.uint8)  # (all nan, in float32 and bfloat16 alike)
            first = None
            for (variant, name, _, blocks, threads), cubin in zip(made, cubins):
                if isinstance(cubin, Exception):
                    results.append((variant, f"did not build: {str(cubin)[:300]}"))
                    continue
                try:
                    module = self.call("cuModuleLoadData", cubin)
                    modules.append(module)
                    program = CUDAProgram(self, self.call("cuModuleGetFunction", module, name.encode()),
                                          CUDALaunch(Launch((), ()), blocks, (threads, 1, 1), blocks))
                    alloc.copyin(out, unset)  # (so that a variant writing nothing gives nans, not the last one's values)
                    program(handles)
                    self.synchronize()
                    got = alloc.copyout(out, nbytes).view(out_dtype.np).astype(np.float32)
                    if first is None:
                        first = got
                    elif not np.allclose(got, first, rtol=0, atol=1.5e-2 * max(1.0, float(np.nanmax(np.abs(first)))),
                                         equal_nan=True):
                        results.append((variant, "other values than the first variant's"))
                        continue
                    results.append((variant, min(self.elapsed(lambda: program(handles)) for _ in range(runs))))
                except Exception as e:  # noqa: BLE001 -- a variant that fails to run is reported, not raised
                    results.append((variant, f"{type(e).__name__}: {str(e)[:300]}"))
        finally:
            self.synchronize()
            for h, n in held:
                alloc.free(h, n)
            for module in modules:
                self.call("cuModuleUnload", module)
        order = {variant: i for i, variant in enumerate(todo)}
        return sorted(results, key=lambda r: order[r[0]])

    def heuristics(self, kernel: Kernel) -> Kernel:
        """The GPU-style actions (:func:`corvid.codegen.opt.gpu_heuristics`), with blocks no
        larger than this GPU allows."""
        return gpu_heuristics(kernel, self.max_threads, vector_bytes=VECTOR_BYTES)

    def candidate_opts(self, kernel: Kernel) -> list[Opt]:
        """The actions a beam search tries next on ``kernel``
        (:func:`corvid.codegen.search.gpu_candidate_opts`, blocks no larger than this GPU allows)."""
        from ..codegen.search import gpu_candidate_opts

        return gpu_candidate_opts(kernel, self.max_threads)

    def search_identity(self) -> str:
        """What the beam search's cache is keyed by besides the kernel: the GPU model, its compute
        capability and NVRTC's version (``"CUDA:NVIDIA H200:sm_90:nvrtc13.0"``), so that actions
        found on one model are searched again on another."""
        return f"CUDA:{self.gpu_name}:{self.arch}:nvrtc{self.compiler.version}"

    def graph(self, programs: list[Program]) -> CUDAGraph | SegmentedGraph | None:
        """A :class:`CUDAGraph` replaying ``programs`` (this device's kernels) as one CUDA graph;
        a :class:`SegmentedGraph` when library calls (cuBLASLt's products) come between them; None
        when ``CORVID_CUDA_GRAPHS=0``, when one of them is neither a kernel nor a library call of
        this device (a copy between devices), or when no run of kernels has a non-empty launch (a
        graph needs a node)."""
        from .cublaslt import GemmProgram

        if os.environ.get("CORVID_CUDA_GRAPHS", "1").strip() == "0":
            return None
        if not all(isinstance(p, (CUDAProgram, GemmProgram)) and p.device is self for p in programs):
            return None
        if not any(isinstance(p, CUDAProgram) and p.dims.blocks for p in programs):
            return None
        if all(isinstance(p, CUDAProgram) for p in programs):
            return CUDAGraph(self, list(programs))
        return SegmentedGraph(self, list(programs))

    def capture_stream(self) -> Any:
        """The stream graphs are recorded on: a stream of their own, so that nothing else is
        captured."""
        if self._capture is None:
            self._capture = self.call("cuStreamCreate", self.cu.CUstream_flags.CU_STREAM_NON_BLOCKING)
        return self._capture

    def synchronize(self) -> None:
        self.call("cuStreamSynchronize", self.stream)

    def time_launch(self, run: Callable[[], None]) -> Callable[[], float]:
        """Launch ``run()``'s work between two CUDA events on the stream (no synchronize) and
        return a function giving the seconds between them, which waits for the second
        (:func:`corvid.profile`; the events go back to a pool when read)."""
        pool = self._event_pool
        start = pool.pop() if pool else self.call("cuEventCreate", self.cu.CUevent_flags.CU_EVENT_DEFAULT)
        end = pool.pop() if pool else self.call("cuEventCreate", self.cu.CUevent_flags.CU_EVENT_DEFAULT)
        self.call("cuEventRecord", start, self.stream)
        try:
            run()
        finally:
            self.call("cuEventRecord", end, self.stream)

        def seconds() -> float:
            try:
                self.call("cuEventSynchronize", end)
                return float(self.call("cuEventElapsedTime", start, end)) / 1000
            finally:
                pool.extend((start, end))

        return seconds

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

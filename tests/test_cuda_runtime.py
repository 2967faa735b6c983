"""CUDA graphs for ``jit`` replay and the GPU beam search, without a GPU (corvid/runtime/cuda.py,
corvid/transforms/jit.py, corvid/codegen/search.py).

``FakeCUDA`` is the real :class:`CUDADevice` given a stand-in for cuda-bindings' driver module
(``FakeDriver``): device memory is host memory (addresses are numpy arrays' addresses), a kernel
is the C the CPU renderer writes for it, built by the CPU's compiler, and the driver runs it on the
addresses it decodes from ``kernelParams``. Graphs are emulated as the driver keeps them: stream
capture records kernel nodes with copies of their arguments, ``cuGraphExecKernelNodeSetParams``
replaces a node's arguments, ``cuGraphLaunch`` runs the nodes in order. So a ``jit`` program on
``FakeCUDA`` computes real values through the device's own launch, graph and allocator code,
and a wrong pointer in a graph gives a wrong result. Every driver call is logged.

What this cannot check: that the real driver accepts these calls and behaves as emulated (that
needs a GPU). The parameter struct is checked against cuda-bindings' own when it is installed.
"""

import contextlib
import ctypes
import gc
import hashlib
import time
import types
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import corvid as cv
from corvid.codegen import search
from corvid.codegen.ir import Opt
from corvid.codegen.opt import apply_opts, reduce_loops
from corvid.codegen.passes import finalize
from corvid.engine import schedule as sched
from corvid.render.cuda import CUDALaunch, cuda_launch
from corvid.render.gpu import Launch
from corvid.runtime import device as registry
from corvid.runtime.compiler import compile_kernel
from corvid.runtime.cpu import CPUDevice
from corvid.runtime.cuda import CUDADevice, CUDAError, CUDAGraph, CUDAProgram
from tests.test_opt import _base, _real

FAKE = "FAKECUDA"
ACTIVE = 1  # CU_STREAM_CAPTURE_STATUS_ACTIVE


@dataclass(eq=False)
class FakeFunction:
    """A "loaded kernel": the CPU build of its C source, taking ``params`` addresses."""

    fn: Any
    params: int


@dataclass(eq=False)
class FakeNode:
    function: FakeFunction
    args: list[int]  # the arguments it was captured with


class FakeDriver:
    """The calls :class:`CUDADevice` makes on ``cuda.bindings.driver``, returning ``(status,
    *values)`` as cuda-bindings does; each call is logged in ``calls`` as ``(name, args)``. A name
    in ``fail`` returns an error status instead."""

    CUstream_flags = types.SimpleNamespace(CU_STREAM_NON_BLOCKING=1)
    CUevent_flags = types.SimpleNamespace(CU_EVENT_DEFAULT=0, CU_EVENT_DISABLE_TIMING=2)
    CUstreamCaptureMode = types.SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=1)
    CUdevice_attribute = types.SimpleNamespace(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR=75,
                                               CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR=76,
                                               CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK=1)
    CUDA_KERNEL_NODE_PARAMS = types.SimpleNamespace

    def __init__(self, name: bytes = b"Fake GPU", capability: tuple[int, int] = (9, 0)):
        self.name, self.capability = name, capability
        self.calls: list[tuple[str, tuple]] = []
        self.fail: set[str] = set()
        self.memory: dict[int, np.ndarray] = {}
        self.capturing: dict[Any, list[FakeNode]] = {}
        self.destroyed: list[Any] = []
        self._events: dict[str, float] = {}
        self._count = 0

    def __getattribute__(self, name: str) -> Any:
        attr = object.__getattribute__(self, name)
        if not name.startswith("cu") or not callable(attr):
            return attr

        def logged(*args: Any) -> tuple:
            self.calls.append((name, args))
            return (1,) if name in self.fail else attr(*args)
        return logged

    def named(self, name: str) -> list[tuple]:
        return [args for n, args in self.calls if n == name]

    def _new(self, kind: str) -> str:
        self._count += 1
        return f"{kind}{self._count}"

    # the device
    def cuInit(self, flags):
        return (0,)

    def cuGetErrorString(self, status):
        return (0, b"fake failure")

    def cuDeviceGetCount(self):
        return (0, 1)

    def cuDeviceGet(self, ordinal):
        return (0, ordinal)

    def cuDevicePrimaryCtxRetain(self, device):
        return (0, "context")

    def cuCtxSetCurrent(self, context):
        return (0,)

    def cuDeviceGetAttribute(self, attr, device):
        return (0, {75: self.capability[0], 76: self.capability[1], 1: 1024}[attr])

    def cuDeviceGetName(self, length, device):
        return (0, self.name.ljust(length, b"\0"))

    def cuDeviceTotalMem(self, device):
        return (0, 1 << 30)

    def cuDriverGetVersion(self):
        return (0, 13000)

    def cuStreamCreate(self, flags):
        return (0, self._new("stream"))

    def cuStreamSynchronize(self, stream):
        return (0,)

    # memory (host memory standing in for the GPU's)
    def cuMemAlloc(self, nbytes):
        raw = np.zeros(nbytes + 256, np.uint8)  # (aligned to 256 bytes, as the driver's blocks are)
        start = -raw.ctypes.data % 256
        block = raw[start:start + nbytes]
        self.memory[block.ctypes.data] = block
        return (0, block.ctypes.data)

    cuMemAllocHost = cuMemAlloc

    def cuMemFree(self, address):
        del self.memory[address]
        return (0,)

    def cuMemcpyHtoDAsync(self, dst, src, nbytes, stream):
        ctypes.memmove(dst, src, nbytes)
        return (0,)

    def cuMemcpyDtoHAsync(self, dst, src, nbytes, stream):
        ctypes.memmove(dst, src, nbytes)
        return (0,)

    def cuEventCreate(self, flags):
        return (0, self._new("event"))

    def cuEventRecord(self, event, stream):
        self._events[event] = time.perf_counter()
        return (0,)

    def cuEventSynchronize(self, event):
        return (0,)

    def cuEventElapsedTime(self, start, end):
        return (0, (self._events[end] - self._events[start]) * 1000)

    # kernels and graphs
    @staticmethod
    def _args(function: FakeFunction, params: int) -> list[int]:
        """The argument values behind ``kernelParams`` (read now, as the driver copies them)."""
        pointers = (ctypes.c_void_p * function.params).from_address(params)
        return [ctypes.c_uint64.from_address(p).value for p in pointers]

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        args = self._args(f, params)
        if stream in self.capturing:
            self.capturing[stream].append(FakeNode(f, args))
        else:
            f.fn(*args)
        return (0,)

    def cuStreamBeginCapture(self, stream, mode):
        assert stream not in self.capturing
        self.capturing[stream] = []
        return (0,)

    def cuStreamGetCaptureInfo(self, stream):
        nodes = self.capturing[stream]
        return (0, ACTIVE, 1, "graph", nodes[-1:], [], len(nodes[-1:]))

    def cuStreamEndCapture(self, stream):
        return (0, types.SimpleNamespace(nodes=self.capturing.pop(stream)))

    def cuGraphInstantiate(self, graph, flags):
        assert flags == 0
        return (0, types.SimpleNamespace(graph=graph, args={id(n): list(n.args) for n in graph.nodes}))

    def cuGraphExecKernelNodeSetParams(self, executable, node, p):
        assert id(node) in executable.args and p.func is node.function
        assert (p.gridDimY, p.gridDimZ, p.sharedMemBytes) == (1, 1, 0)
        executable.args[id(node)] = self._args(p.func, p.kernelParams)
        return (0,)

    def cuGraphLaunch(self, executable, stream):
        for n in executable.graph.nodes:
            n.function.fn(*executable.args[id(n)])
        return (0,)

    def cuGraphDestroy(self, graph):
        self.destroyed.append(graph)
        return (0,)

    def cuGraphExecDestroy(self, executable):
        self.destroyed.append(executable)
        return (0,)


class FakeNVRTC:
    def nvrtcVersion(self):
        return (0, 13, 0)

    def nvrtcGetErrorString(self, status):
        return (0, b"fake")


class FakeCUDA(CUDADevice):
    """:class:`CUDADevice` on :class:`FakeDriver`; kernels are rendered as C and built by the
    CPU's compiler, and they launch with the geometry the CUDA renderer would give them."""

    name = FAKE

    def __init__(self) -> None:
        super().__init__(bindings=(FakeDriver(), FakeNVRTC()))
        self.renderer = CPUDevice().renderer

    def heuristics(self, kernel):
        return kernel

    def compile(self, kernel, source):
        lib = compile_kernel(source, kernel.name)
        fn = lib.function(kernel.name, [ctypes.c_void_p] * len(kernel.params))
        # (a scatter is the CPU's C template: one call does it all)
        dims = CUDALaunch(Launch((), ()), 1, (1, 1, 1), 1) if isinstance(kernel, sched.ScatterKernel) else \
            cuda_launch(kernel)
        return CUDAProgram(self, FakeFunction(fn, len(kernel.params)), dims)


@contextlib.contextmanager
def registered(name: str, target: str):
    """A fresh device ``name`` of the class ``target`` ("module:Class"), registered for the block;
    the kernels compiled for it are dropped afterwards."""
    saved = dict(sched._cache), dict(sched._plans)
    registry.register_backend(name, target)
    try:
        yield registry.get_device(name)
    finally:
        registry._BACKENDS.pop(name, None)
        registry._devices.pop(name, None)
        for spelling in [s for s, c in registry._canonical.items() if c == name]:
            registry._canonical.pop(spelling)
        sched._cache.clear()
        sched._plans.clear()
        sched._cache.update(saved[0])
        sched._plans.update(saved[1])


@pytest.fixture
def fake():
    """A fresh FakeCUDA device named FAKECUDA."""
    with registered(FAKE, f"{__name__}:FakeCUDA") as dev:
        yield dev


def _program(jitted):
    """The one captured program of a jitted function."""
    (caps,) = jitted._cache.values()
    (cap,) = caps
    return cap


def _f(x, y):
    """Three kernels: h from the arguments, column sums m from h alone, the result from both."""
    h = (x @ y).relu()
    m = (h * 2).sum(axis=0, keepdims=True)
    return (h * m).sum(axis=1)


def _want(x, y):
    h = np.maximum(x @ y, 0)
    return (h * (h * 2).sum(axis=0, keepdims=True)).sum(axis=1)


def _inputs(seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 32)).astype(np.float32)


def _main_launches(dev):
    return [a for a in dev.cu.named("cuLaunchKernel") if a[8] == dev.stream]


# --- graphs ----------------------------------------------------------------------------------------

def test_the_second_call_records_a_graph_and_later_calls_launch_it_once(fake):
    cu = fake.cu
    jf = cv.jit(_f)
    for call in range(4):
        x, y = _inputs(call)
        cu.calls.clear()
        got = jf(cv.Tensor(x, device=FAKE), cv.Tensor(y, device=FAKE)).numpy()
        np.testing.assert_allclose(got, _want(x, y), rtol=1e-5)
        if call == 0:  # traced and run kernel by kernel
            kernels = len(_main_launches(fake))
            assert kernels >= 3 and not cu.named("cuStreamBeginCapture") and not cu.named("cuGraphLaunch")
        elif call == 1:  # recorded (on a stream of its own: nothing runs), then launched once
            assert len(cu.named("cuStreamBeginCapture")) == 1 and len(cu.named("cuGraphInstantiate")) == 1
            captured = cu.named("cuLaunchKernel")
            assert len(captured) == kernels and all(a[8] == fake.capture_stream() != fake.stream for a in captured)
            assert cu.named("cuGraphLaunch") == [(_program(jf)._graph.executables[0][0], fake.stream)]
        else:  # one launch, nothing recorded again
            assert not cu.named("cuLaunchKernel") and not cu.named("cuStreamBeginCapture")
            assert len(cu.named("cuGraphLaunch")) == 1
    assert jf.traces == 1 and _program(jf).runs == 4


def test_only_kernels_whose_pointers_changed_get_new_parameters(fake):
    cu = fake.cu
    jf = cv.jit(_f)
    x, y = _inputs(0)
    xs, ys = cv.Tensor(x, device=FAKE), cv.Tensor(y, device=FAKE)
    jf(xs, ys)
    jf(xs, ys)  # recorded
    graph = _program(jf)._graph
    first, last = id(graph.nodes[0]), id(graph.nodes[-1])

    def call(a, b):
        cu.calls.clear()
        out = jf(a, b)
        return out, {id(args[1]) for args in cu.named("cuGraphExecKernelNodeSetParams")}

    x2, y2 = _inputs(1)
    # new arguments: the matmul reads them (the result's memory is the dropped last result's)
    out3, updated = call(cv.Tensor(x2, device=FAKE), cv.Tensor(y2, device=FAKE))
    np.testing.assert_allclose(out3.numpy(), _want(x2, y2), rtol=1e-5)  # the graph read the new inputs
    assert updated == {first}
    # the old arguments again while the last result is kept: the last kernel writes new memory
    # (the first executable still has the old arguments: a second one took the new ones)
    out4, updated = call(xs, ys)
    np.testing.assert_allclose(out4.numpy(), _want(x, y), rtol=1e-5)
    assert updated == {last} and len(graph.executables) == 2
    del out4  # its memory goes back to the pool, and the next result gets it
    out5, updated = call(xs, ys)
    np.testing.assert_allclose(out5.numpy(), _want(x, y), rtol=1e-5)
    assert updated == set() and len(cu.named("cuGraphLaunch")) == 1
    np.testing.assert_allclose(out3.numpy(), _want(x2, y2), rtol=1e-5)  # an earlier result is untouched


def test_a_training_step_settles_on_two_executables_without_updates(fake):
    """The new weights take the memory of the weights before last, so each kernel that touches
    them alternates between two pointers: one executable for each, and no updates."""
    def step(w, x):
        g = x.T @ (x @ w).tanh()
        return w - 0.1 * g

    jf = cv.jit(step)
    rng = np.random.default_rng(0)
    w0, x0 = rng.standard_normal((16, 16)).astype(np.float32), rng.standard_normal((8, 16)).astype(np.float32)
    w, x, want = cv.Tensor(w0, device=FAKE), cv.Tensor(x0, device=FAKE), w0
    for call in range(6):
        fake.cu.calls.clear()
        w = jf(w, x)
        want = want - 0.1 * (x0.T @ np.tanh(x0 @ want))
        np.testing.assert_allclose(w.numpy(), want, rtol=1e-4, atol=1e-5)
        if call >= 3:
            assert not fake.cu.named("cuGraphExecKernelNodeSetParams")
            assert len(fake.cu.named("cuGraphLaunch")) == 1
    assert len(_program(jf)._graph.executables) == 2


def test_intermediates_belong_to_the_graph(fake):
    """The graph bakes in its intermediates' addresses: the pool must not hand them to anyone
    else, during a call or between calls, while later intermediates may reuse a dead one's."""
    def chain(x, w):
        a = (x @ w).relu()  # three intermediates of one size: c can live where a did
        b = (a @ w).tanh()
        c = (b @ w).relu()
        return (c @ w).sum(axis=1)

    jf = cv.jit(chain)
    rng = np.random.default_rng(0)
    for call in range(5):
        x, w = rng.standard_normal((2, 16, 16)).astype(np.float32)
        # pool blocks of every size the program uses, filled, kept while it runs
        bystanders = [cv.Tensor(np.full(n, 7.0, np.float32), device=FAKE) for n in (16 * 16, 16, 16 * 16, 16)]
        got = jf(cv.Tensor(x, device=FAKE), cv.Tensor(w, device=FAKE)).numpy()
        np.testing.assert_allclose(got, chain(cv.Tensor(x), cv.Tensor(w)).numpy(), rtol=1e-5, atol=1e-5)
        for b in bystanders:
            assert (b.numpy() == 7.0).all()
    cap = _program(jf)
    pooled = {h for blocks in fake.allocator._pool.values() for h in blocks}
    assert cap._fixed and not pooled & set(cap._fixed.values())
    # the intermediates of equal size whose lifetimes do not overlap share memory
    assert len(cap._graph_memory) < len(cap._fixed)


def test_graphs_can_be_turned_off(fake, monkeypatch):
    monkeypatch.setenv("CORVID_CUDA_GRAPHS", "0")
    jf = cv.jit(_f)
    for call in range(3):
        x, y = _inputs(call)
        fake.cu.calls.clear()
        np.testing.assert_allclose(jf(cv.Tensor(x, device=FAKE), cv.Tensor(y, device=FAKE)).numpy(), _want(x, y),
                                   rtol=1e-5)
        assert len(_main_launches(fake)) >= 3
        assert not fake.cu.named("cuStreamBeginCapture") and not fake.cu.named("cuGraphLaunch")
    assert _program(jf)._graph is False


def test_cpu_jit_is_unaffected():
    assert registry.get_device("CPU").graph([]) is None
    jf = cv.jit(_f)
    for call in range(3):
        x, y = _inputs(call)
        np.testing.assert_allclose(jf(cv.Tensor(x), cv.Tensor(y)).numpy(), _want(x, y), rtol=1e-5)
    cap = _program(jf)
    assert cap.runs == 3 and cap._graph is False and not cap._fixed and not cap._graph_memory


def _hand_program(dev, blocks=1, params=2):
    return CUDAProgram(dev, FakeFunction(lambda *a: None, params), CUDALaunch(None, blocks, (1, 1, 1), blocks))


def test_no_graph_for_foreign_or_empty_programs(fake):
    cpu = registry.get_device("CPU")
    cpu_program = cpu.compile(_base(_real(4) * 2), cpu.renderer.render(_base(_real(4) * 2)))
    assert fake.graph([_hand_program(fake), cpu_program]) is None
    assert fake.graph([_hand_program(fake, blocks=0)]) is None  # (a graph needs a node)
    assert isinstance(fake.graph([_hand_program(fake), _hand_program(fake, blocks=0)]), CUDAGraph)


def test_a_failed_capture_is_ended_and_a_graph_is_destroyed_when_dropped(fake):
    cu = fake.cu
    graph = fake.graph([_hand_program(fake)])
    cu.fail.add("cuLaunchKernel")
    with pytest.raises(CUDAError, match="cuLaunchKernel failed"):
        graph([[16, 32]])
    assert len(cu.named("cuStreamEndCapture")) == 1 and not cu.capturing and graph.graph is None
    cu.fail.clear()
    graph([[16, 32]])
    graph([[16, 48]])  # a second executable, for the new pointer
    (a, _), (b, _) = graph.executables
    assert a.args == {id(graph.nodes[0]): [16, 32]} and b.args == {id(graph.nodes[0]): [16, 48]}
    del graph
    gc.collect()
    assert all(any(x is y for x in cu.destroyed) for y in (a, b, a.graph))


def test_node_params_with_cuda_bindings():
    """The parameter struct as cuda-bindings builds it (no driver needed to build one)."""
    driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    dev = types.SimpleNamespace(cu=driver)
    program = CUDAProgram(dev, driver.CUfunction(0x1234), CUDALaunch(None, 5, (32, 4, 2), 5))
    p, alive = program.node_params([0x1000, 0x2000])
    assert (p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ) == (5, 1, 1, 32, 4, 2)
    assert int(p.func) == 0x1234 and p.sharedMemBytes == 0
    assert p.kernelParams == ctypes.addressof(alive[0])  # (alive: what the driver call must outlive)
    pointers = (ctypes.c_void_p * 2).from_address(p.kernelParams)
    assert [ctypes.c_uint64.from_address(a).value for a in pointers] == [0x1000, 0x2000]


# --- the beam search ---------------------------------------------------------------------------------

def test_the_search_cache_key_names_the_gpu_model(fake, monkeypatch):
    assert (fake.gpu_name, fake.arch) == ("Fake GPU", "sm_90")  # from cuDeviceGetName and the capability
    assert fake.search_identity() == "CUDA:Fake GPU:sm_90:nvrtc13.0"
    k = _base(_real(8, 16) @ _real(16, 4))
    key = search.search_key(k, FAKE)
    want = hashlib.sha256(("CUDA:Fake GPU:sm_90:nvrtc13.0\0" + fake.renderer.render(k)).encode()).hexdigest()
    assert key == want
    monkeypatch.setattr(fake, "arch", "sm_100")
    assert search.search_key(k, FAKE) not in (key, search.search_key(k, "CPU"))
    monkeypatch.setattr(fake, "arch", "sm_90")
    monkeypatch.setattr(fake, "gpu_name", "NVIDIA H100")
    assert search.search_key(k, FAKE) != key


def test_a_cache_from_one_gpu_model_is_not_used_on_another(fake, monkeypatch, tmp_path):
    db = search.SearchCache(tmp_path / "s.sqlite")
    monkeypatch.setattr(search, "SearchCache", lambda: db)
    searched = []

    def fake_search(k, device, width):
        searched.append(device)
        return search.SearchResult((Opt("upcast", 0, 2),), 1e-3, 2e-3, 1)

    monkeypatch.setattr(search, "beam_search", fake_search)
    k = _base(_real(8, 16) @ _real(16, 4))
    with cv.beam(2):
        assert search.optimize(k, FAKE).opts == (Opt("upcast", 0, 2),)
        assert search.optimize(k, FAKE).opts == (Opt("upcast", 0, 2),)  # from the cache
        assert searched == [FAKE]
        monkeypatch.setattr(fake, "gpu_name", "NVIDIA H100")
        search.optimize(k, FAKE)
    assert searched == [FAKE, FAKE]
    assert search.optimize(k, FAKE).opts == ()  # without a beam: the device's heuristics (none here)


def test_beam_search_on_the_gpu_times_candidates_with_events(fake, monkeypatch):
    timed = []
    elapsed = fake.elapsed

    def spy(work):
        timed.append(work)
        return elapsed(work)

    monkeypatch.setattr(fake, "elapsed", spy)
    tried = []
    candidates = fake.candidate_opts

    def spy_candidates(kernel):
        tried.extend(candidates(kernel))
        return candidates(kernel)

    monkeypatch.setattr(fake, "candidate_opts", spy_candidates)
    a, b = _real(16, 32), _real(32, 16, seed=1)
    k = _base(a @ b)
    result = search.beam_search(k, FAKE, 1, rounds=1)
    assert result.candidates >= 3 and len(timed) >= result.candidates  # every candidate, by the device's clock
    assert tried and {o.op for o in tried} <= {"upcast", "local", "group_local", "permute", "pad"}
    assert fake.cu.named("cuEventElapsedTime")
    # the winner computes what the unoptimized kernel does
    best = finalize(apply_opts(k, result.opts))
    prog = fake.compile(best, fake.renderer.render(best))
    runner = search._Runner.make(best, FAKE)
    got, _ = runner.run(prog, None, runs=1)
    inputs = search.random_inputs(k)
    np.testing.assert_allclose(got.reshape(16, 16), inputs[0].reshape(16, 32) @ inputs[1].reshape(32, 16),
                               rtol=1e-4, atol=1e-4)


def test_gpu_candidates():
    k = _base(_real(64, 512).sum(axis=1))
    opts = search.gpu_candidate_opts(k, max_group=128)
    ops = {o.op for o in opts}
    assert {"upcast", "local", "group_local"} <= ops and not ops & {"vectorize", "thread", "unroll", "split"}
    assert all(o.arg <= 128 for o in opts if o.op in ("local", "group_local"))
    shared = apply_opts(k, [Opt("group_local", 0, 64)])
    assert any(lp.kind == "local" for lp in reduce_loops(shared))
    more = search.gpu_candidate_opts(shared, max_group=128)
    assert not any(o.op == "group_local" for o in more)  # one work-group reduce per kernel
    assert all(o.arg * 64 <= 128 for o in more if o.op == "local")  # the block stays within the limit
    assert not any(o.op == "reduces_local" for o in opts)  # (one reduce)
    lse = _base(_real(8, 512).logsumexp(-1))  # (its max, then its sum: every reduce of the row shared)
    assert {o.arg for o in search.gpu_candidate_opts(lse, max_group=128) if o.op == "reduces_local"} == {16, 32, 64, 128}


def test_a_device_without_actions_of_its_own_is_not_searched(monkeypatch):
    class Plain(CPUDevice):
        optimization_actions = False

        def heuristics(self, kernel):
            return apply_opts(kernel, [Opt("upcast", 0, 2)])

    k = _base(_real(8, 4) * 2)
    monkeypatch.setattr(search, "beam_search", lambda *a: pytest.fail("searched"))
    monkeypatch.setitem(registry._devices, "PLAINTEST", Plain())
    with cv.beam(2):
        assert search.optimize(k, "PLAINTEST").opts == (Opt("upcast", 0, 2),)


# --- profiling --------------------------------------------------------------------------------------

def test_a_profile_times_each_kernel_between_cuda_events_and_bypasses_the_graph(fake):
    """cv.profile on the CUDA device: each kernel of a jit step (replayed as a graph before and
    after) launches between two events of the stream, with no synchronize between kernels; the
    profile lists every launch by its kernel's name, the events go back to a pool, and the step
    launches its graph again once the profile has ended."""
    cu = fake.cu
    jf = cv.jit(_f)
    x, y = _inputs(0)
    xs, ys = cv.Tensor(x, device=FAKE), cv.Tensor(y, device=FAKE)
    jf(xs, ys)
    jf(xs, ys)  # (the graph is recorded)
    cu.calls.clear()
    with cv.profile() as prof:
        got = jf(xs, ys).numpy()
        kernels = _main_launches(fake)
        records = cu.named("cuEventRecord")
        assert not cu.named("cuGraphLaunch") and len(kernels) >= 3
        # (two events a kernel, read at the end; the copy out has its own event)
        assert len(records) == 2 * len(kernels) + 1 and not cu.named("cuEventElapsedTime")
    np.testing.assert_allclose(got, _want(x, y), rtol=1e-5)
    names = [k.name for k in prof.kernels]
    assert names == [s.name for s in [ln.sk for ln in _program(jf).launches]]
    assert all(k.device == FAKE and k.seconds >= 0 for k in prof.kernels) and prof.total <= prof.wall
    assert len(fake._event_pool) == 2 * len(kernels)  # (every event returned)
    table = prof.table(top=2)
    assert table.splitlines()[1].split()[0] == prof.summary()[0].name and "more kernel names" in table
    cu.calls.clear()
    jf(xs, ys)
    assert len(cu.named("cuGraphLaunch")) == 1 and not cu.named("cuEventRecord")
    with cv.profile():
        with pytest.raises(RuntimeError, match="one at a time"):
            with cv.profile():
                pass


def test_eager_runtime_constants_are_uploaded_once_and_the_stream_is_not_waited_on(fake):
    """A kernel's runtime constants (``layer_norm``'s ``eps`` and ``1/n``) are one buffer per
    set of values: repeated eager calls launch their kernel and copy nothing to the device (a
    fresh upload per launch went through a staging buffer whose reuse waited on the stream, so
    every eager layer norm stalled until the GPU had caught up). New values still get their own."""
    w, b = cv.ones(256, device=FAKE), cv.zeros(256, device=FAKE)
    xs = [cv.Tensor(np.random.default_rng(i).standard_normal((8, 256)).astype(np.float32), device=FAKE).realize()
          for i in range(4)]

    def ln(x, eps=1e-5):
        return cv.nn.functional.layer_norm(x, (256,), w, b, eps=eps)

    ln(xs[0]).realize()
    fake.cu.calls.clear()
    outs = [ln(x).realize() for x in xs[1:]]
    # (and new blocks for the outputs, which stay alive here)
    assert [n for n, _ in fake.cu.calls if n != "cuMemAlloc"] == ["cuLaunchKernel"] * 3
    for x, got in zip(xs[1:], (o.numpy() for o in outs)):
        a = x.numpy().astype(np.float64)
        want = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    fake.cu.calls.clear()
    other = ln(xs[1], eps=0.25).numpy()  # (another eps: its own constants, the same kernel)
    assert len(fake.cu.named("cuMemcpyHtoDAsync")) == 1
    a = xs[1].numpy().astype(np.float64)
    np.testing.assert_allclose(other, (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 0.25),
                               rtol=1e-4, atol=1e-5)

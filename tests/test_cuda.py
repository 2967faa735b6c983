"""The CUDA backend without a GPU (corvid/render/cuda.py, corvid/runtime/cuda.py).

Every kernel the backend suite (tests/test_backends.py) builds is compiled for sm_90 (H100/H200)
to machine code -- NVRTC from cuda-bindings when it is installed (the runtime's own compile path),
else the nvidia-cuda-nvrtc wheel's libnvrtc through ctypes, else ``nvcc -cubin``; NVRTC and nvcc
both run ptxas, so register and shared-memory limits are checked too.
The kernels are captured from the suite's own computations, run on a CPU-backed device that makes
the CUDA device's graph choices (split reduces) and keeps each lowered kernel; the CUDA device's
heuristics (register tiles, work-group reduces) are then applied as on the device. The rest
checks the rendered text's structure and the launch geometry, which need no compiler.

Values: the suite's kernels of up to 4096 threads also run, as rendered, in an emulation of the
CUDA built-ins on the host (tests/cuda_emulator.py) against the CPU. What this cannot check is
the GPU itself (its compiler's code, its memory model, timing): that needs the backend suite run
on the CUDA device (it skips here with the reason).
"""

import ctypes
import inspect
import itertools
import math
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import corvid as cv
from corvid.codegen.ir import Opt
from corvid.codegen.opt import OptError, apply_opt, apply_opts, gpu_heuristics, reduce_loops
from corvid.codegen.passes import finalize
from corvid.render.cuda import BLOCK_THREADS, VECTOR_BYTES, CUDALaunch, CUDARenderer, cuda_launch
from corvid.render.gpu import Launch
from corvid.runtime import device as registry
from corvid.runtime.cpu import CPUDevice
from corvid.runtime.cuda import CUDADevice, kernel_params
from tests.test_fp8 import workload as fp8_workload
from tests.test_opt import _base, _kernels, _real

ARCH = "sm_90"  # the GPU later sessions get (H200); every kernel must build for it
MAX_THREADS = 1024  # an sm_90 block's thread limit, what CUDADevice.heuristics passes on
BATCHES = 2  # translation units compiled side by side (CI has 2 cores)
CAPTURE = "CUDAPTX"
_CAPTURED: list = []  # the kernels _Capture was given


class _Capture(CPUDevice):
    """The CPU computing unoptimized kernels, so the suite's checks pass and its data-dependent
    steps run as on any device; it records each lowered kernel, and builds its graphs as the
    CUDA device does (a long reduce with few outputs split in two, strided)."""

    optimization_actions = False
    split_reduces = "chunks"

    def __init__(self) -> None:
        super().__init__()
        self.name = CAPTURE

    def heuristics(self, kernel):
        _CAPTURED.append(kernel)
        return kernel


def _gpu_shaped(device: str) -> None:
    """Computations the suite's small sizes do not reach: the paths of the GPU heuristics."""
    rng = np.random.default_rng(0)

    def t(*shape):
        return cv.Tensor(rng.standard_normal(shape).astype(np.float32), device=device)

    big = t(3, 1 << 16)
    big.sum().numpy()  # split into partials and their reduce
    t(1 << 22).sum().numpy()  # partials long enough for vector loads (vector_reduce)
    t(2, 8192).sum(axis=1).numpy()  # the same in a block per row, few enough threads to be emulated
    t(2, 8192).max(axis=1).numpy()
    big.max(axis=1).numpy()
    (t(256, 64) @ t(64, 128)).tanh().numpy()  # register tiles
    t(64, 4096).sum(axis=1).numpy()  # a work-group reduce per row
    t(4, 8192).softmax(-1).numpy()
    t(4, 1100).softmax(-1).numpy()  # a row no work-group divides: padded (pad, pad_reduce, rows_local)
    t(4096, 2053).sum(axis=1).numpy()  # many long contiguous rows: a padded work-group each
    t(2, 4096).astype(cv.float16).sum(axis=1).numpy()
    cv.Tensor(rng.integers(-9, 9, (2, 4096)), device=device).prod(axis=1).numpy()
    (t(4, 4096) > 0).any(axis=1).numpy()
    fp8_workload(device)  # the 8-bit floats' conversions, ops, reductions and matmul
    # kernels of several outputs (engine/schedule.py: _groups): an Adam update (parameter and
    # moments, bfloat16 weights beside them), a norm's mean and variance, a loss's max and sum
    p, m, v, g = t(1024), t(1024), t(1024).abs(), t(1024)
    m2, v2 = m * 0.9 + g * 0.1, v * 0.999 + g * g * 0.001
    p2 = p - 0.01 * m2 / (v2.sqrt() + 1e-8)
    cv.realize(p2, m2, v2, p2.astype(cv.bfloat16))
    x = t(8, 2048)
    mu = x.mean(-1, keepdims=True)
    cv.realize(mu, ((x - mu) ** 2).mean(-1, keepdims=True))
    z = t(4, 4096)
    mx = z.max(-1, keepdims=True)
    cv.realize(mx, (z - mx).exp().sum(-1, keepdims=True))


def _run_suite(device: str) -> None:
    """Each test of tests/test_backends.py, with each of its parameters, on ``device``."""
    import tests.test_backends as suite

    for name, fn in vars(suite).items():
        if not name.startswith("test_") or not callable(fn):
            continue
        marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
        grids = [[dict(zip([a.strip() for a in m.args[0].split(",")], v if isinstance(v, tuple) else (v,)))
                  for v in m.args[1]] for m in marks]
        for combo in itertools.product(*grids):
            kwargs = {k: v for part in combo for k, v in part.items()}
            assert set(inspect.signature(fn).parameters) == {"device", *kwargs}, name
            fn(device=device, **kwargs)


@pytest.fixture(scope="module")
def suite_kernels():
    """(name, kernel as the CUDA device optimizes it) for every kernel the backend suite and
    :func:`_gpu_shaped` build, plus work-group reduce variants of test_opt's kernel spread."""
    registry.register_backend(CAPTURE, f"{__name__}:_Capture")
    _CAPTURED.clear()
    try:
        _run_suite(CAPTURE)
        _gpu_shaped(CAPTURE)
    finally:
        registry._BACKENDS.pop(CAPTURE, None)
        registry._devices.pop(CAPTURE, None)
        for spelling in [s for s, c in registry._canonical.items() if c == CAPTURE]:
            registry._canonical.pop(spelling)
    # (cascaded sums with the CUDA device's own runs: codegen/cascade.py)
    out = [(k.name, finalize(gpu_heuristics(k, MAX_THREADS, vector_bytes=VECTOR_BYTES), block=CUDADevice.sum_block))
           for k in _CAPTURED]
    for name, t in _kernels().items():
        k0 = _base(t)
        for axis, lp in enumerate(reduce_loops(k0)):
            for width in (2, 3, 16):
                if lp.size % width or width >= lp.size:
                    continue
                extra = [Opt("local", len(k0.loops) - 1, 2)] if k0.loops and k0.loops[-1].size % 2 == 0 else []
                for opts in ([Opt("group_local", axis, width)], [Opt("group_local", axis, width)] + extra):
                    out.append((f"{name} {[str(o) for o in opts]}", finalize(apply_opts(k0, opts), block=CUDADevice.sum_block)))
    return out


@pytest.fixture(scope="module")
def compiler():
    """(a function compiling one CUDA source for ARCH, raising with the compiler's log, its name):
    NVRTC (the runtime's path) when cuda-bindings and libnvrtc are there, else nvcc; else skip."""
    try:
        from corvid.runtime.cuda import NVRTCCompiler, _bindings

        nvrtc = NVRTCCompiler(_bindings()[1])
        return (lambda src: nvrtc.build(src, ARCH, "backend_suite")), f"NVRTC {nvrtc.version}"
    except ImportError:
        pass
    found = _nvrtc_library()
    if found is not None:
        return found
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip('neither NVRTC (pip install "corvid[cuda]") nor nvcc is available to compile CUDA C')

    def build(src: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "suite.cu")
            with open(path, "w") as f:
                f.write(src)
            command = [nvcc, "-cubin", f"-arch={ARCH}", "-fmad=false", "-w", "-o", os.path.join(tmp, "suite.cubin"), path]
            done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=600)
            if done.returncode:
                raise RuntimeError(done.stdout + done.stderr)

    return build, "nvcc"


def _nvrtc_library():
    """(build, name) over the nvidia-cuda-nvrtc wheel's libnvrtc through ctypes, where the wheel is
    installed without cuda-bindings: NVRTC is the runtime's compiler, and it needs no GPU."""
    import glob
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    paths = [] if spec is None else [p for d in spec.submodule_search_locations or []
                                     for p in sorted(glob.glob(os.path.join(d, "*", "lib", "libnvrtc.so.*")))]
    paths = [p for p in paths if "builtins" not in p]
    if not paths:
        return None
    lib = ctypes.CDLL(paths[-1])
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))

    def build(src: str) -> None:
        prog = ctypes.c_void_p()
        assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"suite.cu", 0, None, None) == 0
        try:
            opts = [f"--gpu-architecture={ARCH}".encode(), b"--fmad=false", b"-w"]
            if lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)):
                size = ctypes.c_size_t()
                lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
                log = ctypes.create_string_buffer(size.value)
                lib.nvrtcGetProgramLog(prog, log)
                raise RuntimeError(log.value.decode(errors="replace"))
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))

    return build, f"NVRTC {major.value}.{minor.value} (the wheel's libnvrtc, through ctypes)"


def _translation_unit(sources: list[str]) -> tuple[str, list[int]]:
    """One .cu holding every source, each in a namespace of its own (its prelude and helpers too)
    and its kernel renamed (``extern "C"`` names are global); and each source's first line."""
    parts, starts, line = [], [], 1
    for i, src in enumerate(sources):
        src = re.sub(r"(__launch_bounds__\(\d+\) )(\w+)\(", rf"\g<1>\g<2>_k{i}(", src, count=1)
        parts.append(f"namespace cvk{i} {{\n{src}}}\n")
        starts.append(line)
        line += parts[-1].count("\n")
    return "".join(parts), starts


def test_every_backend_suite_kernel_compiles_for_sm_90(compiler, suite_kernels):
    build, which = compiler
    renderer = CUDARenderer()
    sources, names, refused = [], [], []
    for name, k in suite_kernels:
        try:
            src = renderer.render(k)
        except NotImplementedError as e:
            refused.append((name, str(e)))
            continue
        cuda_launch(k)  # (within CUDA's limits)
        if src not in sources:
            sources.append(src)
            names.append(name)
    # nothing is refused (complex kernels included); the GPU heuristics' paths were all reached
    assert not refused, refused
    assert any("cv_complex64" in src for src in sources) and any("cv_complex128" in src for src in sources)
    assert {"upcast", "group_local", "local"} <= {o.op for _, k in suite_kernels for o in k.opts}
    assert len(sources) >= 100, len(sources)
    chunks = [list(range(len(sources)))[i::BATCHES] for i in range(BATCHES)]

    def compile_chunk(chunk: list[int]) -> str | None:
        tu, starts = _translation_unit([sources[i] for i in chunk])
        try:
            build(tu)
        except RuntimeError as e:  # name the kernels the errors are in
            lines = {int(n) for n in re.findall(r"\((\d+)\): error", str(e))}
            bad = {names[chunk[max(j for j, s in enumerate(starts) if s <= n)]] for n in lines}
            return f"{which} could not build {sorted(bad) or 'the batch'}:\n{str(e)[:4000]}"
        return None

    with ThreadPoolExecutor(BATCHES) as pool:
        errors = [e for e in pool.map(compile_chunk, chunks) if e]
    assert not errors, "\n\n".join(errors)


# --- the rendered text ------------------------------------------------------------------------------
def test_a_work_group_reduce_goes_through_shared_memory_with_barriers():
    k = apply_opt(_base(_real(64, 256).sum(axis=1)), Opt("group_local", 0, 16))
    src = CUDARenderer().render(k)
    assert '__global__ void __launch_bounds__(16) fuzz(float* __restrict__ p0, const float* __restrict__ p1)' in src
    assert "__shared__ float acc0_parts[16];" in src and src.count("__syncthreads();") == 3
    assert "int r1l = (int)threadIdx.x;" in src and "int cv_point = (int)blockIdx.x;" in src
    assert re.search(r"if \(r1l == 0\) \{\n\s+p0\[i0\] = acc0;", src)  # the first thread stores
    assert "return;" not in src  # (no thread may leave before a barrier)


def test_a_kernel_without_local_loops_gets_guarded_blocks():
    k = _base(_real(5, 300) * 2 + 1)
    src = CUDARenderer().render(k)
    assert "int cv_point = (int)blockIdx.x * 256 + (int)threadIdx.x;" in src
    assert "if (cv_point >= 1500) return;" in src and "__syncthreads" not in src
    dims = cuda_launch(k)
    assert (dims.blocks, dims.threads, dims.guarded) == (6, (256, 1, 1), True)


def test_grid_loops_are_flattened_into_blocks_along_x():
    """CUDA's y and z grid dimensions stop at 65535: every grid loop is taken apart from x."""
    x = cv.Tensor(np.zeros((70000, 3, 5), np.float32), device="NULL").permute(2, 1, 0)  # (three loops)
    k = _base(x + 1)
    assert [lp.size for lp in k.loops] == [5, 3, 70000]
    src = CUDARenderer().render(k)
    assert "int i0 = (int)cv_point / 210000;" in src
    assert "int i1 = (int)(cv_point / 70000 % 3);" in src and "int i2 = (int)(cv_point % 70000);" in src
    assert cuda_launch(k).blocks == math.ceil(5 * 3 * 70000 / BLOCK_THREADS)
    big = _base(cv.zeros((3, 1 << 30), dtype=cv.uint8, device="NULL") + 1)  # past 2^31 threads: 64-bit ids
    assert "long long cv_point = (long long)blockIdx.x * 256" in CUDARenderer().render(big)


def test_launch_geometry():
    k = _base(_real(64, 32) @ _real(32, 48, seed=1))
    plain = cuda_launch(k)
    assert (plain.blocks, plain.threads, plain.points) == (64 * 48 // 256, (256, 1, 1), 64 * 48)
    tiled = cuda_launch(apply_opts(k, [Opt("local", 1, 16), Opt("group_local", 0, 8)]))
    assert (tiled.blocks, tiled.threads, tiled.guarded) == (64 * 3, (16, 8, 1), False)
    soft = cuda_launch(_base(_real(8, 32).softmax(-1)))  # the row's reduces are computed once per row
    assert [lp.size for lp in soft.geometry.grid] == [8] and soft.threads == (8, 1, 1)
    alone = cuda_launch(_base(_real(8, 32).sum()))  # no grid loop: one thread does it all
    assert (alone.blocks, alone.threads) == (1, (1, 1, 1))
    lp = _base(_real(64, 32).sum(axis=1)).loops[0]
    with pytest.raises(NotImplementedError, match="at most"):
        CUDALaunch.of(Launch((), (lp, lp)))  # 64 x 64 threads in one block
    with pytest.raises(OptError, match="must divide"):
        apply_opt(k, Opt("group_local", 0, 5))


def test_dtypes_are_rendered_without_headers():
    """NVRTC has no C library or cuda_fp16.h: float16 is a 16-bit struct read as a float and
    written through cvt.rn (round to nearest even); bool is bool; nan and inf are bit patterns."""
    h = cv.Tensor(np.arange(6, dtype=np.float16), device="NULL")
    src = CUDARenderer().render(_base(h * 3 + float("inf")))
    assert "cv_half* __restrict__ p0, const cv_half* __restrict__ p1" in src
    assert "p0[i0] = cv_f32_f16(" in src and "(float)p1[i0]" in src and "__int_as_float(0x7f800000)" in src
    # (GCC's builtins are not CUDA's; __builtin_assume, the buffers' alignment, is both)
    assert "#include" not in src and "_Bool" not in src and "__builtin" not in src.replace("__builtin_assume(", "")
    f = cv.Tensor(np.zeros(4, np.float32), device="NULL")
    assert "(uint8_t)(int)(" in CUDARenderer().render(_base(f.astype(cv.uint8)))  # wraps as numpy (x86)
    assert "cv_f2u64(" in CUDARenderer().render(_base(f.astype(cv.uint64)))
    assert "__float_as_uint(" in CUDARenderer().render(_base(f.bitcast(cv.uint32) + 1))
    c = cv.Tensor(np.zeros(2, np.complex64), device="NULL")  # complex: a struct of two parts
    src = CUDARenderer().render(_base(c * c + 2))
    assert "cv_complex64* __restrict__ p0, const cv_complex64* __restrict__ p1" in src
    assert "cv_cmul(" in src and "cv_cadd(" in src and "fmaf(a.x, b.x, -(a.y * b.y))" in src
    assert "cv_casin(" in CUDARenderer().render(_base(c.asin())) and "cv_cpow(" in CUDARenderer().render(_base(c ** 1.5))


def test_float8_is_rendered_without_headers():
    """The 8-bit floats are bytes converted by bit arithmetic in device functions (CUDA's own
    cuda_fp8.h comes with the toolkit, which NVRTC alone lacks), rounded after every op."""
    x = cv.Tensor(np.zeros(4, np.uint8), device="NULL").bitcast(cv.float8_e5m2)
    src = CUDARenderer().render(_base(x * 3 + 1))
    assert "uint8_t* __restrict__ p0, const uint8_t* __restrict__ p1" in src
    assert "static inline __device__ uint8_t cv_f32_e5m2(float f)" in src and "__float_as_uint(" in src
    assert "p0[i0] = cv_f32_e5m2(" in src and "cv_round_e5m2(" in src
    assert "#include" not in src and "memcpy" not in src and "__builtin" not in src.replace("__builtin_assume(", "")



_HOST_SHIM = """#include <stdint.h>
#include <string.h>
#define __device__
static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }
static inline long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
"""
_HOST_WRAPPERS = """extern "C" {
uint32_t f16_f32(uint16_t x) { return __float_as_uint(cv_f16_f32(x)); }
uint16_t f32_f16(uint32_t u) { return cv_f32_f16(__uint_as_float(u)).bits; }
uint64_t f32_f64(uint32_t u) { return (uint64_t)__double_as_longlong(cv_f32_f64(__uint_as_float(u))); }
uint32_t f64_f32(uint64_t u) { return __float_as_uint(cv_f64_f32(__longlong_as_double((long long)u))); }
}
"""


def test_float_conversions_keep_nans_as_the_cpu(tmp_path):
    """The CUDA prelude's float conversions give the CPU device's bits for every nan, as x86
    converts: sign and the payload's top bits kept, quieted (numpy's for quiet nans; the GPU's
    cvt gives its canonical nan, so ml_dtypes' fp8 tables and float16 nans differed on an H200).
    Their nan branches are compiled for the host here, the cvt instructions replaced by a marker
    that the other values must reach."""
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler for the host")
    from corvid.render.cuda import _PRELUDE
    start, end = _PRELUDE.index("static inline __device__ float cv_f16_f32"), _PRELUDE.index("struct cv_complex64")
    body = _PRELUDE[start:end]
    body = body.replace('asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));', "f = __uint_as_float(0x12345678u);")
    body = body.replace('asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));', "h.bits = 0x1234;")
    body = body.replace("return (double)f;", "return __longlong_as_double(0x123456789LL);")
    body = body.replace("return (float)d;", "return __uint_as_float(0x12345678u);")
    assert "asm(" not in body and body.count("0x1234") == 4
    (tmp_path / "conv.cpp").write_text(_HOST_SHIM + body + _HOST_WRAPPERS)
    lib = tmp_path / "conv.so"
    subprocess.run([cxx, "-O1", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "conv.cpp")], check=True)
    so = ctypes.CDLL(str(lib))
    for name, a, r in (("f16_f32", ctypes.c_uint16, ctypes.c_uint32), ("f32_f16", ctypes.c_uint32, ctypes.c_uint16),
                       ("f32_f64", ctypes.c_uint32, ctypes.c_uint64), ("f64_f32", ctypes.c_uint64, ctypes.c_uint32)):
        getattr(so, name).argtypes, getattr(so, name).restype = [a], r
    rng = np.random.default_rng(0)
    cases = [  # (function, source bits, numpy source dtype, numpy target dtype, target bits dtype, marker)
        ("f16_f32", np.arange(1 << 16, dtype=np.uint16), np.float16, np.float32, np.uint32, 0x12345678),
        ("f32_f16", rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32), np.float32, np.float16, np.uint16, 0x1234),
        ("f32_f64", rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32), np.float32, np.float64, np.uint64, 0x123456789),
        ("f64_f32", rng.integers(0, 1 << 63, 20000, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, 20000, dtype=np.uint64),
         np.float64, np.float32, np.uint32, 0x12345678),
    ]
    for name, src, sdt, ddt, bits, marker in cases:
        nan_exp = {np.float16: 0x7c00, np.float32: 0x7f800000, np.float64: 0x7ff0000000000000}[sdt]
        mask = {np.float16: 0x7fff, np.float32: 0x7fffffff, np.float64: 0x7fffffffffffffff}[sdt]
        src = np.concatenate([src, src[:5000] | src.dtype.type(nan_exp), np.array([nan_exp, nan_exp | 1], src.dtype)])
        fn = getattr(so, name)
        got = np.array([fn(int(v)) for v in src], bits)
        isnan = (src & src.dtype.type(mask)) > src.dtype.type(nan_exp)
        want = cv.Tensor(src.view(sdt), device="CPU").astype(np.dtype(ddt)).numpy().view(bits)
        quiet = isnan & ((src & src.dtype.type((nan_exp >> 1) & ~nan_exp & mask)) != 0)
        with np.errstate(invalid="ignore"):  # (numpy converts float16 in software: a signaling nan stays one)
            np.testing.assert_array_equal(want[quiet], src[quiet].view(sdt).astype(ddt).view(bits), err_msg=name)
        assert quiet.sum() > 20 and (isnan & ~quiet).sum() > 20 and (~isnan).sum() > 0, name
        np.testing.assert_array_equal(got[isnan], want[isnan], err_msg=name)
        assert (got[~isnan] == marker).all(), name  # (everything else goes to the cvt instruction)


# --- the runtime, as far as it runs without a GPU ----------------------------------------------------
def test_the_device_says_what_is_missing():
    try:
        dev = registry.get_device("CUDA")
    except ImportError as e:
        assert 'pip install "corvid[cuda]"' in str(e)
    except RuntimeError as e:
        assert "driver" in str(e) or "GPU" in str(e), e
    else:
        assert dev.split_reduces == "chunks" and dev.arch.startswith("sm_")
        pytest.skip(f"a GPU is here ({dev.gpu_name}): tests/test_backends.py runs on it")


def test_kernel_params_point_at_the_addresses():
    handles = [0x7F0000001000, 0x7F0000002000, 1 << 40]
    params, alive = kernel_params(handles)
    assert [ctypes.c_uint64.from_address(params[i]).value for i in range(3)] == handles
    assert len(alive) == 3


def test_nvrtc_builds_are_cached_on_disk(tmp_path, monkeypatch):
    try:
        from corvid.runtime.cuda import CUDAError, NVRTCCompiler, _bindings

        nvrtc = _bindings()[1]
        compiler = NVRTCCompiler(nvrtc)
    except ImportError as e:
        pytest.skip(f"NVRTC not available: {e}")
    monkeypatch.setenv("CORVID_CACHE_DIR", str(tmp_path))
    src = CUDARenderer().render(_base(_real(4, 8).exp()))
    cubin = compiler.cubin(src, ARCH, "exp")
    assert cubin[:4] == b"\x7fELF" and b"fuzz" in cubin  # (extern "C": the name cuModuleGetFunction asks for)
    (path,) = (tmp_path / "cuda").glob("*/*.cubin")
    again = NVRTCCompiler(nvrtc)  # (a new process: nothing in memory)
    path.write_bytes(b"corrupt")  # the checksum no longer matches: built again
    assert again.cubin(src, ARCH, "exp") == cubin and path.read_bytes() == cubin
    with pytest.raises(CUDAError, match="could not compile kernel broken(.|\n)*--- source ---"):
        compiler.cubin(src.replace("expf(", "no_such_function("), ARCH, "broken")


def test_the_attention_kernels_compile_for_sm_90(compiler):
    """corvid/nn/flash.py's three kernels (forward, dq, dk/dv), causal or masked, for the head
    sizes GPT-2 and Llama use, and the three tensor-core kernels: PoCL checks the float32 ones'
    values (tests/test_flash_attention.py) and an emulation the others' (tests/test_attention_tc.py),
    this their CUDA spelling, the mma instruction's operands, registers and shared memory (48 KiB
    static at most)."""
    build, _ = compiler
    r, sources = CUDARenderer(), []
    # (the float32 kernels: blocks of 64, four work items per row, or one where the merge's rows
    # would not fit shared memory (dk/dv of 128 + 128); the tensor-core ones: 4 warps of 16 rows)
    for kind in ("fwd", "dq", "dkdv", "fwd_tc", "dq_tc", "dkdv_tc"):
        tc = kind.endswith("_tc")
        for d, dv, causal, mask in ((64, 64, True, None), (128, 128, False, (2, 1, 1, 1024)), (80, 32, False, (1, 1, 512, 1024))):
            shapes = [(2, 12, 512, d), (2, 12, 1024, d), (2, 12, 1024, dv)] + ([mask] if mask else [])
            if not kind.startswith("fwd"):
                shapes += [(2, 12, 512, dv), (2, 12, 512), (2, 12, 512)]
            params = {"kind": kind, "causal": causal, "scale": d ** -0.5, "has_mask": mask is not None}
            src, groups, threads, flops = r.render_attention(f"attention_{kind}_{d}_{int(causal)}", params, shapes)
            assert "#include" not in src and "__syncthreads();" in src
            assert ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in src) == tc
            assert tc or "__builtin" not in src
            rows = 64 if tc or (kind == "dkdv" and d + dv > 128) else 16  # (queries, or keys, per block)
            assert threads == (128 if tc else 64) and groups == 24 * (1024 if kind.startswith("dkdv") else 512) // rows
            assert flops > 0
            sources.append(src)
    # every variant of the tensor-core kernels at GPT-2's head (corvid/render/cuda_attention.py: variants)
    from corvid.render import cuda_attention as CA

    for kind in ("fwd_tc", "dq_tc", "dkdv_tc"):
        shapes = [(2, 12, 512, 64)] * 3 + ([] if kind == "fwd_tc" else [(2, 12, 512, 64), (2, 12, 512), (2, 12, 512)])
        params = {"kind": kind, "causal": True, "scale": 0.125, "has_mask": False}
        for i, variant in enumerate(CA.variants(kind, 64, 64)[1:]):
            src, groups, threads, _ = CA.render(f"variant_{kind}_{i}", params, shapes, {}, variant=variant)
            assert threads == 32 * variant.warps and groups == 24 * 512 // (16 * variant.warps * variant.m)
            assert "cvt.rn.bf16x2.f32" in src  # (the probabilities packed by one instruction on the GPU)
            sources.append(src)
    tu, _ = _translation_unit(sources)
    build(tu)


def _ptx_memory_ops(src: str) -> set[str]:
    """The global loads and stores (``ld.global.v4.f32``...) in the PTX nvcc makes of ``src``."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed (the PTX is read from its output)")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cu")
        with open(path, "w") as f:
            f.write(f"namespace cvk0 {{\n{src}}}\n")
        subprocess.run([nvcc, "-ptx", f"-arch={ARCH}", "-fmad=false", "-w", "-o", path + ".ptx", path],
                       check=True, capture_output=True, timeout=300)
        with open(path + ".ptx") as f:
            return set(re.findall(r"\b(?:ld|st)\.global[.\w]*", f.read()))


@pytest.mark.parametrize("case", ["chain", "bf16_gelu", "broadcast_row", "strided"])
def test_elementwise_kernels_read_and_write_16_bytes_per_instruction(case):
    """An elementwise kernel as the CUDA device optimizes and renders it: each work item's loads of
    an operand are neighbours the compiler merges into one 16-byte instruction (the buffers'
    alignment is stated; the loads come before any branch), as are its stores; a transposed
    operand stays element by element (its neighbours are far apart)."""
    n = 1 << 16
    x, row = _real(n // 768 * 768), _real(768, seed=1)
    t = {"chain": lambda: ((x * 1.5 + 0.5).relu() * x).exp(),
         "bf16_gelu": lambda: cv.nn.functional.gelu(x.astype(cv.bfloat16).realize()),
         "broadcast_row": lambda: (x.reshape(-1, 768) + row).astype(cv.bfloat16),
         "strided": lambda: _real(256, 256).T + 1}[case]()
    k = gpu_heuristics(_base(t), MAX_THREADS, vector_bytes=VECTOR_BYTES)
    assert any(o.op == "upcast" for o in k.opts)
    src = CUDARenderer().render(k)
    assert src.count("__builtin_assume(((unsigned long long)p") == len(k.params)
    ops = _ptx_memory_ops(src)
    want = {"chain": {"ld.global.v4.f32", "st.global.v4.f32"}, "bf16_gelu": {"ld.global.v4.u32", "st.global.v4.u32"},
            "broadcast_row": {"ld.global.v4.f32", "st.global.v4.u32"}, "strided": {"ld.global.f32", "st.global.v4.f32"}}[case]
    assert want <= ops, ops
    # (the scalar constants, 8-byte float parameters, are the only other loads)
    assert ops - want <= {"ld.global.f64", "ld.global.nc.f64"}, ops


def test_a_long_sums_partials_are_read_by_neighbouring_threads():
    """The CUDA device splits a long sum into partials over contiguous chunks (split_reduces),
    each shared by a block (group_local), so neighbouring threads read neighbouring elements;
    the strided split had them read 1024 floats apart (a 64M sum: 0.53 TB/s on an H200)."""
    from corvid.codegen.lower import lower_unmerged, merge_loops
    from corvid.ops.reduce import _split_reduce

    x = cv.Tensor(np.zeros(1 << 22, np.float32)).realize()
    partial = _split_reduce(x, "sum", (0,), 1 << 22, CUDADevice.split_reduces).schedule()[0]
    k = finalize(gpu_heuristics(merge_loops(lower_unmerged("p", partial.output, partial.inputs)[0]), MAX_THREADS),
                 block=CUDADevice.sum_block)
    assert [str(o) for o in k.opts] == ["group_local(0, 256)"] and cuda_launch(k).blocks == 1024
    (load,) = [line for line in CUDARenderer().render(k).splitlines() if "p1[" in line]
    local = next(lp.var.name for lp in k.reduce_loops() if lp.kind == "local")
    assert re.search(rf"\+{local}\b", load) and not re.search(rf"{local}\*", load), load  # (stride 1 across threads)


def test_a_long_sums_partials_read_16_bytes_per_instruction():
    """With the CUDA device's vector width, each work item of a long sum's partial reads four
    neighbouring float32 per step (vector_reduce, then group_local), which the compiler loads in
    one 16-byte instruction, and adds them before its one accumulator; the block's items read
    neighbouring 16-byte runs. (One float per step, a chain of dependent adds: a 64M sum at
    2.2 TB/s on an H200 where PyTorch reached 3.1.)"""
    from corvid.codegen.lower import lower_unmerged, merge_loops
    from corvid.ops.reduce import _split_reduce

    x = cv.Tensor(np.zeros(1 << 26, np.float32)).realize()
    partial = _split_reduce(x, "sum", (0,), 1 << 26, CUDADevice.split_reduces).schedule()[0]
    k = finalize(gpu_heuristics(merge_loops(lower_unmerged("p", partial.output, partial.inputs)[0]), MAX_THREADS,
                                vector_bytes=VECTOR_BYTES), block=CUDADevice.sum_block)
    assert [str(o) for o in k.opts] == ["vector_reduce(0, 4)", "group_local(0, 256)"] and cuda_launch(k).blocks == 1024
    src = CUDARenderer().render(k)
    assert src.count("p1[") == 4
    assert "ld.global.v4.f32" in _ptx_memory_ops(src)


# --- values, in an emulation ---------------------------------------------------------------------------
EMULATED_THREADS = 4096  # kernels of more threads (blocks x block size) are left out: an OS thread each


def test_every_small_backend_suite_kernel_computes_the_cpus_values_in_an_emulation(suite_kernels, tmp_path):
    """The backend suite's kernels as the CUDA device optimizes and renders them (work-group
    reduces through warp shuffles, rows shared by a block, the row cache, wide items, register
    tiles, every dtype), compiled by the host's C++ compiler with an emulation of CUDA's
    built-ins (tests/cuda_emulator.py) and run on random inputs: the values of the same kernel on
    the CPU -- bit for bit for integers and bool, to float rounding otherwise (sums in another
    order, the host's libm against the CPU kernels' own functions)."""
    from corvid.codegen import search
    from tests import cuda_emulator as E
    from tests.test_gpu_style import _run

    if E.compiler() is None:
        pytest.skip("no C++ compiler for the emulation")
    renderer, chosen, seen = CUDARenderer(), [], set()
    for name, k in suite_kernels:
        try:
            src = renderer.render(k)
        except NotImplementedError:
            continue
        dims = cuda_launch(k)
        if src in seen or k.dims_param is not None or dims.blocks * math.prod(dims.threads) > EMULATED_THREADS:
            continue
        seen.add(src)
        types = E.param_types(k)
        chosen.append((name, k, src, types, dims))
    assert len(chosen) >= 80, len(chosen)
    assert {"group_local", "rows_local", "upcast", "vector_reduce"} <= {o.op for _, k, *_ in chosen for o in k.opts}
    assert sum(search._outputs(k) > 1 for _, k, *_ in chosen) >= 3  # (kernels of several outputs)
    halves = [chosen[i::BATCHES] for i in range(BATCHES)]

    def build(i: int):
        folder = tmp_path / f"b{i}"
        folder.mkdir()
        try:
            return E.build_many([(src, types) for _, _, src, types, _ in halves[i]], str(folder))
        except RuntimeError as e:
            if "barrier" in str(e):
                pytest.skip(f"the CUDA emulation does not build here: {str(e)[:300]}")
            raise

    with ThreadPoolExecutor(BATCHES) as pool:
        libs = list(pool.map(build, range(BATCHES)))
    bad = []
    for lib, half in zip(libs, halves):
        for i, (name, k, _, _, dims) in enumerate(half):
            arrays = [np.ascontiguousarray(a) for a in search.random_inputs(k, seed=11)]
            want = _run("CPU", k, arrays)
            outs = [np.zeros(p.size, p.dtype.np) for p in k.params[:search._outputs(k)]]
            E.launch_many(lib, i, outs + arrays, int(dims.blocks), dims.threads)
            got = outs[0] if len(outs) == 1 else np.concatenate([o.astype(want.dtype) for o in outs])  # (as _run gives them)
            want = want.reshape(-1)
            if want.dtype.kind in "iub" or want.dtype.itemsize == 1:
                same = np.array_equal(got.view(np.uint8), want.view(np.uint8))
            else:
                g, w = got.astype(np.complex128 if want.dtype.kind == "c" else np.float64), \
                    want.astype(np.complex128 if want.dtype.kind == "c" else np.float64)
                same = bool(np.all((np.isnan(g) & np.isnan(w)) | (g == w) |
                                   (np.abs(g - w) <= 2e-3 * np.abs(w) + 1e-5 * max(1.0, np.nanmax(np.abs(w), initial=0)))))
            if not same:
                bad.append((name, [str(o) for o in k.opts]))
    assert not bad, bad

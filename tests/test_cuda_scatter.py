"""SCATTER on the CUDA device without a GPU (corvid/render/gpu.py: _render_scatter, the CUDA
dialect in corvid/render/cuda.py, the launch in corvid/runtime/cuda.py).

Two checks: every SCATTER kernel the CUDA device can be asked for (each reduce, each dtype, both
index layouts) is compiled for sm_90 by NVRTC or nvcc, as tests/test_cuda.py compiles the backend
suite's kernels; and the same CUDA sources run on the host through a small shim (``__global__``
functions as plain C++ functions, ``blockIdx``/``threadIdx`` set by a loop over the launch that
:func:`corvid.render.cuda.scatter_launch` gives, float16's PTX conversions replaced by the host's
``_Float16``), so their values are compared bitwise with the CPU's. What this cannot check is how
a GPU runs them (parallel threads): each thread owns its output column, so the order of threads
does not change the result.
"""

import ctypes
import os
import re
import shutil
import subprocess
import tempfile

import ml_dtypes
import numpy as np
import pytest

import corvid as cv
from corvid import dtype as dt
from corvid.ops.indexing import scatter_prim
from corvid.render.cuda import CUDARenderer, scatter_launch
from corvid.render.gpu import SCATTER_ITEMS, SCATTER_SCANS, scatter_ranges
from tests.test_cuda import _translation_unit, compiler  # noqa: F401  (compiler: a fixture)

REDUCES = ("set", "sum", "prod", "max", "min")
NUMERIC = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
           "float64", "complex64", "complex128")
SET_ONLY = ("bfloat16", "float8_e4m3fn", "float8_e5m2")  # (scatter_prim computes their other reduces in float32)


def _cases():
    for name in NUMERIC + SET_ONLY:
        for reduce in REDUCES:
            if (name in SET_ONLY and reduce != "set") or (name.startswith("complex") and reduce in ("max", "min")):
                continue
            yield name, reduce


def test_every_scatter_kernel_compiles_for_sm_90(compiler):  # noqa: F811
    build, which = compiler
    r = CUDARenderer()
    sources = [r.render_scatter(f"scatter_{reduce}_{name}_{inner}", reduce, dt.to_dtype(name), 3, 50, 70, inner, ii)
               for name, reduce in _cases() for inner, ii in ((4, 1), (4, 4), (1, 1))]
    assert len(sources) > 150
    for src in sources:
        assert "#include" not in src and "__builtin" not in src and "atomic" not in src
    tu, _ = _translation_unit(sources)
    build(tu)


def test_the_launch_is_one_thread_per_output_column_and_range_of_rows():
    dims = scatter_launch(3 * 1000)
    assert (dims.blocks, dims.threads, dims.points, dims.guarded) == (12, (256, 1, 1), 3000, True)
    assert scatter_launch(5).threads == (5, 1, 1) and scatter_launch(5).blocks == 1
    r = CUDARenderer()
    src = r.render_scatter("k", "sum", dt.float32, 3, 10, 20, 1000, 1)
    assert "const long long w = (long long)blockIdx.x * 256 + (long long)threadIdx.x;" in src
    assert "if (w >= O * R * I) return;" in src and 'extern "C" __global__ void __launch_bounds__(256) k(' in src
    assert "R = 10, c = 1;" in src and r.scatter_work_items(3, 10, 20, 1000) == 30000  # (a thread per row and column)
    # x[idx] = v on a long vector: tens of thousands of threads, not one; bounded by the index reads
    assert r.scatter_ranges(1, 10**6, 1000, 1) == r.scatter_items == 1 << 16
    assert r.scatter_ranges(1, 10**6, 10**6, 1) == r.scatter_scans // 10**6
    assert r.scatter_ranges(1, 7, 5, 1) == 7 and r.scatter_ranges(1, 100, 10**11, 1) == 1
    # GPT-2's embedding gradient (50257 x 768, 8192 tokens): 66,048 threads of 585 rows each
    assert r.scatter_ranges(1, 50257, 8192, 768) == 86 and r.scatter_work_items(1, 50257, 8192, 768) == 66048
    # (the module's defaults, a CPU-type device's: a few thousand)
    assert scatter_ranges(1, 10**6, 1000, 1) == SCATTER_ITEMS and scatter_ranges(2, 50257, 8192, 768) == 3
    assert scatter_ranges(1, 10**6, 10**6, 1) == SCATTER_SCANS // 10**6


# --- the CUDA sources, run on the host ---------------------------------------------------------------
_SHIM = r"""#include <cstring>
#include <cmath>
#include <utility>
#define __global__
#define __device__
#define __launch_bounds__(n)
#define __restrict__
#define __builtin_assume(x) ((void)0)  /* (clang's and CUDA's, not GCC's: the buffers' alignment, a hint) */
#define __align__(n) alignas(n)
struct cv_dim3 { unsigned x, y, z; };
static cv_dim3 blockIdx, threadIdx;
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline double __longlong_as_double(long long u) { double f; std::memcpy(&f, &u, 8); return f; }
static inline long long __double_as_longlong(double f) { long long u; std::memcpy(&u, &f, 8); return u; }
"""
_HOST_F16 = {  # the prelude's two PTX conversions, as the host's _Float16 does them
    r'asm\("cvt\.f32\.f16 %0, %1;" : "=f"\(f\) : "h"\(x\)\);':
        "_Float16 h; std::memcpy(&h, &x, 2); f = (float)h;",
    r'asm\("cvt\.rn\.f16\.f32 %0, %1;" : "=h"\(h\.bits\) : "f"\(f\)\);':
        "_Float16 v = (_Float16)f; std::memcpy(&h.bits, &v, 2);",
}
_DRIVE = r"""
template <class... A, std::size_t... I>
static void cv_call(void (*f)(A...), void** p, std::index_sequence<I...>) { f((A)p[I]...); }
template <class... A>
static void cv_drive(void (*f)(A...), void** p, long blocks, long threads) {
  for (long b = 0; b < blocks; b++)
    for (long t = 0; t < threads; t++) {
      blockIdx.x = (unsigned)b; threadIdx.x = (unsigned)t;
      cv_call(f, p, std::index_sequence_for<A...>{});
    }
}
"""


def _host_library(sources: list[str], tmp: str) -> ctypes.CDLL:
    """The CUDA sources built for the host as one library: source ``i``'s kernel launched by
    ``cv_run_<i>(pointers, blocks, threads)``."""
    parts = [_SHIM, _DRIVE]
    for i, src in enumerate(sources):
        for pattern, host in _HOST_F16.items():
            src, count = re.subn(pattern, host, src)
            assert count == 1, pattern
        name = re.search(r"__launch_bounds__\(\d+\) (\w+)\(", src).group(1)
        src = src.replace('extern "C" ', "")
        parts.append(f"namespace cvk{i} {{\n{src}}}\n"
                     f'extern "C" void cv_run_{i}(void** p, long b, long t) {{ cv_drive(cvk{i}::{name}, p, b, t); }}\n')
    path, lib = os.path.join(tmp, "scatter.cpp"), os.path.join(tmp, "scatter.so")
    with open(path, "w") as f:
        f.write("".join(parts))
    done = subprocess.run(["g++", "-std=c++17", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-w", "-o", lib, path],
                          capture_output=True, text=True, check=False)
    assert not done.returncode, done.stderr[:3000]
    return ctypes.CDLL(lib)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to run the CUDA sources on the host")
@pytest.mark.parametrize("reduce", REDUCES)
def test_the_cuda_scatter_sources_compute_the_cpus_bits(reduce):
    from tests.test_backends import _scatter_operands

    rng = np.random.default_rng(9)
    r = CUDARenderer()
    prim = {"max": "amax", "min": "amin"}.get(reduce, reduce)
    cases = []
    for name in [n for n, red in _cases() if red == reduce]:
        for shape, idx_shape in (((2, 6, 3), (2, 9, 3)), ((2, 6, 3), (2, 9)), ((1, 300, 1), (1, 400))):
            o, n, inner = shape
            m = idx_shape[1]
            if name in SET_ONLY:
                np_dt = getattr(ml_dtypes, name)
                x, src = rng.standard_normal(shape).astype(np_dt), rng.standard_normal((o, m, inner)).astype(np_dt)
            else:
                x, src = _scatter_operands(name, prim, rng, shape, m)
            idx = rng.integers(-2, n + 2, idx_shape)
            want = scatter_prim(cv.Tensor(x), 1, cv.Tensor(idx), cv.Tensor(src), prim).numpy()
            source = r.render_scatter(f"scatter_{reduce}_{name}", reduce, dt.to_dtype(name), o, n, m, inner,
                                      1 if idx.ndim == 2 else inner)
            cases.append((source, r.scatter_work_items(o, n, m, inner), x, idx, src, want))
    with tempfile.TemporaryDirectory() as tmp:
        lib = _host_library([c[0] for c in cases], tmp)
    for i, (_, items, x, idx, src, want) in enumerate(cases):
        out = np.zeros_like(x)
        arrays = [out, np.ascontiguousarray(x), idx.astype(np.int64), np.ascontiguousarray(src)]
        dims = scatter_launch(items)
        getattr(lib, f"cv_run_{i}")((ctypes.c_void_p * 4)(*[a.ctypes.data for a in arrays]),
                                    ctypes.c_long(dims.blocks), ctypes.c_long(dims.threads[0]))
        assert out.tobytes() == want.tobytes(), (i, want.dtype, reduce, out, want)


# --- a scatter into one repeated value (zeros: an embedding table's gradient) -------------------------

@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to run the CUDA sources on the host")
@pytest.mark.parametrize("reduce", ["sum", "set", "max"])
def test_a_filled_scatter_writes_its_one_value_where_x_was_copied(reduce):
    """``filled``: no x, every target is the literal before the updates; the CUDA source (run on
    the host) gives the CPU's bits for a scatter into the whole repeated array."""
    rng = np.random.default_rng(4)
    x, src = np.full((2, 40, 3), -1.5, np.float32), rng.standard_normal((2, 60, 3)).astype(np.float32)
    idx = rng.integers(-2, 42, (2, 60, 3))
    want = scatter_prim(cv.Tensor(x), 1, cv.Tensor(idx), cv.Tensor(src), {"max": "amax"}.get(reduce, reduce)).numpy()
    source = CUDARenderer().render_scatter("scatter_filled", reduce, dt.float32, 2, 40, 60, 3, 3, filled=-1.5)
    assert "__restrict__ x" not in source and ("= -1.5f;" in source) == (reduce != "set")  # (set: its bits)
    with tempfile.TemporaryDirectory() as tmp:
        lib = _host_library([source], tmp)
    out = np.zeros_like(x)
    arrays = [out, idx.astype(np.int64), src]
    dims = scatter_launch(CUDARenderer().scatter_work_items(2, 40, 60, 3))
    lib.cv_run_0((ctypes.c_void_p * 3)(*[a.ctypes.data for a in arrays]), ctypes.c_long(dims.blocks),
                 ctypes.c_long(dims.threads[0]))
    assert out.tobytes() == want.tobytes()


def _embedding_grad(device):
    rng = np.random.default_rng(2)
    w = cv.Tensor(rng.standard_normal((500, 48)).astype(np.float32), device=device).realize()
    idx = cv.Tensor(rng.integers(0, 500, (4, 30)), device=device).realize()
    up = cv.Tensor(rng.standard_normal((4, 30, 48)).astype(np.float32), device=device).realize()
    g = cv.grad(lambda w: (w[idx] * up).sum())(w)
    want = np.zeros((500, 48), np.float32)
    np.add.at(want, idx.numpy(), up.numpy())
    return g, want


@pytest.mark.parametrize("device", ["CPU", "CL"])
def test_an_embedding_gradient_scatters_into_a_value_not_a_table_of_zeros(device):
    """The zeros an embedding's gradient starts from are no kernel of their own, stored and read
    back (GPT-2's table: 154 MB written and read again each step): the C and CUDA templates write
    the literal themselves. The CL runtime copies x whole before its launch, so there x stays the
    table. The literal stays a literal for every other graph (a CONST node is shared)."""
    from corvid.engine.schedule import create_schedule
    from corvid.runtime.device import get_device

    try:
        get_device(device)
    except (ImportError, RuntimeError, OSError) as e:
        pytest.skip(f"{device} not available: {e}")
    g, want = _embedding_grad(device)
    (scatter,) = [sk for sk in create_schedule([g.node], device) if sk.name.startswith("scatter")]
    assert len(scatter.inputs) == (2 if device == "CPU" else 3) and scatter.output.numel > 1000
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-6, atol=1e-6)
    zero = cv.zeros((), device=device).node  # (the literal the zeros repeat: still no buffer)
    assert zero.op is cv.graph.node.Op.CONST and zero.buffer is None


@pytest.mark.parametrize("reduce", ["set", "sum", "prod", "amax", "amin"])
@pytest.mark.parametrize("value", [-1.5, -0.0, 0.0])
def test_a_scatter_into_a_repeated_literal_on_the_cpu_matches_numpy(reduce, value):
    """x = full(shape, value): the C template writes the literal (its bits for "set", where -0.0
    must stay -0.0) and gives the bits of the same scatter into a stored x (and numpy's ufunc.at
    for set, sum and prod)."""
    from corvid.engine.schedule import create_schedule

    rng = np.random.default_rng(8)
    idx, src = rng.integers(0, 30, 50), rng.standard_normal(50).astype(np.float32)
    src[::7] = -0.0
    y = scatter_prim(cv.full((30,), value, dtype=cv.float32), 0, cv.Tensor(idx), cv.Tensor(src), reduce)
    (scatter,) = [sk for sk in create_schedule([y.node], "CPU") if sk.name.startswith("scatter")]
    assert len(scatter.inputs) == 2  # (no x: the literal is in the kernel)
    stored = cv.Tensor(np.full(30, value, np.float32)).realize()
    assert y.numpy().tobytes() == scatter_prim(stored, 0, cv.Tensor(idx), cv.Tensor(src), reduce).numpy().tobytes()
    want = np.full(30, value, np.float32)
    if reduce == "set":
        want[idx] = src
    elif reduce in ("sum", "prod"):
        {"sum": np.add, "prod": np.multiply}[reduce].at(want, idx, src)
    else:  # (max and min: which of two equal zeros is kept differs from numpy's .at, as before)
        return
    assert y.numpy().tobytes() == want.tobytes()

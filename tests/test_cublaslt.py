"""Matrix products through cuBLASLt on the CUDA device, without a GPU (corvid/runtime/cublaslt.py,
corvid/ops/blas.py).

Three layers, each checkable here:

* **The C interface**: the constants and the ctypes prototypes against the ``cublasLt.h`` of
  NVIDIA's ``nvidia-cublas`` wheel (compiled with the C compiler, so the values are the header's own);
  skipped with the reason where the header is not installed.
* **The descriptors**: built by the real library (which needs no GPU for them) and read back
  through its own ``GetAttribute`` calls; skipped where the library is not installed.
* **The products**: the real :class:`CUDADevice` on the stand-in driver of test_cuda_runtime, with
  the stand-in library of ``tests/cublaslt_standin.py``, which computes what the descriptors
  describe on the stand-in's (host) memory. So every layout, transpose, batch stride and compute
  type that corvid chooses is checked against numpy, and gradients, jit, vmap and jvp run through
  the route.

What is not checked: that the real library, on a GPU, computes what its documentation says.
"""

import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import corvid as cv
from corvid.ops import blas as blas_ops
from corvid.runtime import cublaslt as L
from corvid.runtime import device as registry
from tests.cublaslt_standin import StandInLt
from tests.test_cuda_runtime import FakeCUDA, registered

DEV = "FAKEBLAS"


class BlasCUDA(FakeCUDA):
    """The stand-in CUDA device with the stand-in cuBLASLt."""

    name = DEV

    def _blas_library(self):
        self.standin = StandInLt()
        self.standin.memory = self.cu.memory  # (every matrix it reads or writes is checked to lie in a block)
        return self.standin


@pytest.fixture
def dev():
    with registered(DEV, f"{__name__}:BlasCUDA") as d:
        assert d.blas() is not None, d.blas_error
        yield d


def _t(a):
    return cv.Tensor(a, device=DEV)


def _rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed + len(shape) + sum(shape)).standard_normal(shape).astype(dtype)


# --- the product: layouts, transposes, batches --------------------------------------------------------

CASES = [  # (a's shape, b's shape, transpose a (stored as a.mT), transpose b)
    ((64, 96), (96, 80), False, False),
    ((64, 96), (96, 80), False, True),  # x @ w.T: a Linear layer
    ((64, 96), (96, 80), True, False),  # a.T @ g: a weight's gradient
    ((64, 96), (96, 80), True, True),
    ((3, 40, 72), (72, 48), False, False),  # batched rows times one matrix: folded into one product
    ((3, 40, 72), (72, 48), True, False),  # (a transposed batch cannot fold: a stride-0 b)
    ((40, 72), (3, 72, 48), False, True),  # one a for a batch of b: a's stride 0
    ((2, 3, 40, 72), (2, 3, 72, 48), False, True),  # attention's q @ k.mT
    ((2, 1, 40, 72), (1, 3, 72, 48), False, False),  # partial broadcasts: expanded
    ((5, 1, 40, 72), (5, 72, 48), False, False),
]


def _operands(a_shape, b_shape, ta, tb, dtype=np.float32):
    a, b = _rand(*a_shape, dtype=dtype), _rand(*b_shape, dtype=dtype, seed=1)
    ca = _t(np.ascontiguousarray(np.swapaxes(a, -1, -2))).mT if ta else _t(a)
    cb = _t(np.ascontiguousarray(np.swapaxes(b, -1, -2))).mT if tb else _t(b)
    return a, b, ca, cb


@pytest.mark.parametrize("a_shape,b_shape,ta,tb", CASES)
def test_products_match_numpy_with_the_operands_as_stored(dev, a_shape, b_shape, ta, tb):
    a, b, ca, cb = _operands(a_shape, b_shape, ta, tb)
    got = (ca @ cb).numpy()
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    calls = dev.standin.matmuls()
    assert calls, "the product did not go to the library"
    # a transposed view is read in place, with the library's flag (cuBLASLt's A is corvid's b)
    assert {c["transa"] for c in calls} == {int(tb)} and {c["transb"] for c in calls} == {int(ta)}
    assert {c["compute"] for c in calls} == {L.COMPUTE_32F}


def test_rows_of_a_batch_times_one_matrix_are_one_product(dev):
    _, _, ca, cb = _operands((4, 50, 64), (64, 96), False, True)
    (ca @ cb).numpy()
    (call,) = dev.standin.matmuls()
    assert call["d"]["cols"] == 200 and call["d"].get(L.LAYOUT_BATCH_COUNT, 1) == 1


def test_a_gradient_reads_a_transposed_weight_as_stored(dev):
    """The input gradient of ``x @ w.T`` multiplies by ``(w.T).mT``: two transposes, which cancel.
    The library reads ``w`` as stored, with no transpose flag; unwrapping one transpose only, a
    training step stored every weight's transpose as a copy to read it with the flag."""
    x, w = _t(_rand(64, 96)), _t(_rand(80, 96, seed=1)).astype(cv.bfloat16).realize()
    gx = cv.grad(lambda x: ((x.astype(cv.bfloat16) @ w.T).astype(cv.float32) ** 2).sum())(x)
    assert not [sk.name for sk in gx.schedule() if sk.name.startswith("copy")]
    xs, ws = _rand(64, 96), w.astype(cv.float32).numpy()
    xb = cv.Tensor(xs).astype(cv.bfloat16).astype(cv.float32).numpy()
    y = (xb.astype(np.float64) @ ws.T.astype(np.float64)).astype(ml_dtypes.bfloat16).astype(np.float64)
    want = (2 * y).astype(ml_dtypes.bfloat16).astype(np.float64) @ ws
    np.testing.assert_allclose(gx.numpy(), want, rtol=2e-2, atol=2e-2 * np.abs(want).max())
    dx = [c for c in dev.standin.matmuls() if (c["d"]["rows"], c["d"]["cols"]) == (96, 64)]
    assert dx and dx[0]["transa"] == 0 and dx[0]["transb"] == 0


def test_a_shared_operand_has_batch_stride_zero(dev):
    _, _, ca, cb = _operands((40, 72), (6, 72, 48), False, False)
    (ca @ cb).numpy()
    (call,) = dev.standin.matmuls()
    assert call["b"][L.LAYOUT_BATCH_COUNT] == 6 and call["b"][L.LAYOUT_STRIDED_BATCH_OFFSET] == 0  # corvid's a
    assert call["a"][L.LAYOUT_STRIDED_BATCH_OFFSET] == 72 * 48


@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-12), ("float16", 2e-3), ("bfloat16", 1.6e-2)])
def test_each_dtype_keeps_its_own_and_sums_wide(dev, dtype, rtol):
    import ml_dtypes

    npd = {"float64": np.float64, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    a, b = _rand(48, 160).astype(npd), _rand(160, 64, seed=3).astype(npd)
    out = _t(a) @ _t(b).astype(getattr(cv, dtype))
    assert out.dtype == getattr(cv, dtype)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=rtol, atol=rtol * np.abs(want).max())
    (call,) = dev.standin.matmuls()
    assert call["compute"] == (L.COMPUTE_64F if dtype == "float64" else L.COMPUTE_32F)


def test_mixed_dtypes_promote_before_the_product(dev):
    a = _rand(64, 64)
    b = _rand(64, 64, seed=5).astype(np.float16)
    got = (_t(a) @ _t(b)).numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_small_products_stay_corvid_kernels(dev):
    a, b = _rand(8, 16), _rand(16, 32, seed=1)
    np.testing.assert_allclose((_t(a) @ _t(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    assert not dev.standin.matmuls()
    assert blas_ops.matmul(_t(a), _t(b), cv.float32) is None


def test_integers_stay_corvid_kernels(dev):
    a = np.arange(64 * 64, dtype=np.int32).reshape(64, 64) % 7
    np.testing.assert_array_equal((_t(a) @ _t(a)).numpy(), a @ a)
    assert not dev.standin.matmuls()


def test_empty_products(dev):
    a, b = np.zeros((64, 0), np.float32), np.zeros((0, 4096), np.float32)
    np.testing.assert_array_equal((_t(a) @ _t(b)).numpy(), np.zeros((64, 4096), np.float32))
    assert (_t(np.zeros((0, 64, 64), np.float32)) @ _t(_rand(64, 64))).shape == (0, 64, 64)
    assert not dev.standin.matmuls()


# --- precision ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("precision,compute,bits", [("highest", L.COMPUTE_32F, None),
                                                    ("high", L.COMPUTE_32F_FAST_TF32, 10),
                                                    ("medium", L.COMPUTE_32F_FAST_16BF, 7)])
def test_float32_precision_chooses_the_compute_type(dev, precision, compute, bits):
    a, b = _rand(64, 256), _rand(256, 64, seed=7)
    with cv.matmul_precision(precision):
        got = (_t(a) @ _t(b)).numpy()
    (call,) = dev.standin.matmuls()
    assert call["compute"] == compute
    want = a.astype(np.float64) @ b.astype(np.float64)
    err = np.abs(got - want).max() / np.abs(want).max()
    if bits is None:
        assert err < 1e-6
    else:  # rounded operands: visibly less exact, within what the mantissa allows
        assert 2.0 ** -(bits + 6) < err < 2.0 ** -(bits - 2)


def test_precision_leaves_other_dtypes_and_is_validated(dev):
    a = _rand(64, 128).astype(np.float64)
    with cv.matmul_precision("medium"):
        (_t(a) @ _t(a.T.copy())).numpy()
    assert dev.standin.matmuls()[0]["compute"] == L.COMPUTE_64F
    with pytest.raises(ValueError, match="highest"):
        cv.set_float32_matmul_precision("tf32")
    with pytest.raises(ValueError):
        cv.matmul_precision("low")


def test_process_precision_and_jit_retraces(dev):
    a, b = _t(_rand(64, 128)), _t(_rand(128, 64, seed=2))
    f = cv.jit(lambda x, y: x @ y)
    try:
        f(a, b).numpy()
        cv.set_float32_matmul_precision("high")
        assert cv.get_float32_matmul_precision() == "high"
        f(a, b).numpy()
    finally:
        cv.set_float32_matmul_precision("highest")
    assert f.traces == 2
    assert [c["compute"] for c in dev.standin.matmuls()] == [L.COMPUTE_32F, L.COMPUTE_32F_FAST_TF32]


# --- transforms ---------------------------------------------------------------------------------------

def _mlp(x, w1, w2):
    return ((x @ w1.T).relu() @ w2).square().mean()


def test_gradients_go_through_the_library_and_match_the_cpu(dev):
    x, w1, w2 = _rand(64, 96), _rand(128, 96, seed=1), _rand(128, 80, seed=2)
    want = cv.grad(_mlp, argnums=(0, 1, 2))(cv.Tensor(x), cv.Tensor(w1), cv.Tensor(w2))
    got = cv.grad(_mlp, argnums=(0, 1, 2))(_t(x), _t(w1), _t(w2))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-5 * np.abs(w.numpy()).max())
    assert len(dev.standin.matmuls()) >= 5  # 2 forward, 3 backward (x's gradient needs none of w2's)


def test_backward_on_module_parameters(dev):
    cv.manual_seed(0)
    with cv.default_device(DEV):
        lin = cv.nn.Linear(128, 96)
    x = _t(_rand(64, 128))
    lin(x).square().sum().backward()
    ref = cv.nn.Linear(128, 96)
    ref.load_state_dict({k: cv.Tensor(v.numpy()) for k, v in lin.state_dict().items()})
    ref(cv.Tensor(x.numpy())).square().sum().backward()
    np.testing.assert_allclose(lin.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lin.bias.grad.numpy(), ref.bias.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_jit_replays_the_product_between_graphs_of_the_kernels(dev):
    from corvid.runtime.cuda import CUDAGraph, SegmentedGraph

    f = cv.jit(lambda x, w: ((x @ w.T + 1).relu() @ w) * 2)
    cu = dev.cu
    for seed in range(4):
        x, w = _rand(64, 96, seed=seed), _rand(80, 96, seed=seed + 9)
        cu.calls.clear()
        got = f(_t(x), _t(w)).numpy()
        np.testing.assert_allclose(got, (np.maximum(x @ w.T + 1, 0) @ w) * 2, rtol=1e-4, atol=1e-4)
        if seed >= 2:  # recorded at the second call: two graphs (the elementwise kernels), two products between
            assert len(cu.named("cuGraphLaunch")) == 2 and not cu.named("cuStreamBeginCapture")
    assert f.traces == 1 and len(dev.standin.matmuls()) == 8
    (caps,) = f._cache.values()
    graph = caps[0]._graph
    assert isinstance(graph, SegmentedGraph)
    assert [type(p).__name__ for p, _, _ in graph.parts] == ["GemmProgram", "CUDAGraph", "GemmProgram", "CUDAGraph"]
    assert all(isinstance(p, CUDAGraph) == (i % 2 == 1) for i, (p, _, _) in enumerate(graph.parts))


def test_graphs_off_launch_everything_directly(dev, monkeypatch):
    monkeypatch.setenv("CORVID_CUDA_GRAPHS", "0")
    f = cv.jit(lambda x, w: (x @ w.T + 1).relu())
    for seed in range(3):
        x, w = _rand(64, 96, seed=seed), _rand(80, 96, seed=seed + 9)
        np.testing.assert_allclose(f(_t(x), _t(w)).numpy(), np.maximum(x @ w.T + 1, 0), rtol=1e-5, atol=1e-5)
    assert not dev.cu.named("cuGraphLaunch") and len(dev.standin.matmuls()) == 3


def test_vmap_matches_a_loop(dev):
    xs, w = _rand(4, 64, 96), _rand(96, 80, seed=4)
    got = cv.vmap(lambda x: x @ _t(w))(_t(xs)).numpy()
    np.testing.assert_allclose(got, np.stack([x @ w for x in xs]), rtol=2e-5, atol=2e-5)
    assert dev.standin.matmuls()


def test_vmap_over_both_operands_of_a_batched_product(dev):
    a, b = _rand(3, 2, 40, 72), _rand(3, 72, 48, seed=2)
    got = cv.vmap(lambda x, y: x @ y)(_t(a), _t(b)).numpy()
    np.testing.assert_allclose(got, np.stack([x @ y for x, y in zip(a, b)]), rtol=2e-5, atol=2e-5)


def test_vmap_over_a_shared_matrix_and_a_batch(dev):
    a, b = _rand(3, 40, 72), _rand(3, 6, 72, 48, seed=2)  # (per example: a 2-d a under a batch of 6 b)
    got = cv.vmap(lambda x, y: x @ y)(_t(a), _t(b)).numpy()
    np.testing.assert_allclose(got, np.stack([x @ y for x, y in zip(a, b)]), rtol=2e-5, atol=2e-5)
    assert dev.standin.matmuls()


def test_vmap_with_a_broadcast_inside_the_batch_loops_with_aligned_addresses(dev):
    # per example a (1, 5, 72) against b (2, 72, 48): vmapped, a's stride is 0 inside and whole across
    # the examples, so the examples are looped over; odd sizes leave the loop's addresses 4-byte aligned
    a, b = _rand(3, 1, 5, 73), _rand(3, 2, 73, 1000, seed=2)
    got = cv.vmap(lambda x, y: x @ y)(_t(a), _t(b)).numpy()
    np.testing.assert_allclose(got, np.stack([x @ y for x, y in zip(a, b)]), rtol=2e-5, atol=2e-5)
    assert len(dev.standin.matmuls()) == 3
    (pref,) = [p for kind, p in dev.standin.calls if kind == "heuristic"]
    assert pref[L.PREF_MIN_ALIGNMENT_B_BYTES] == 4  # (the library's B: corvid's a, offsets of 5*73 floats)


def test_vmap_linear_with_a_bias_per_example(dev):
    F = cv.nn.functional
    x, w, b = _rand(4, 64, 96), _rand(80, 96, seed=1), _rand(4, 80, seed=2)
    got = cv.vmap(lambda xx, bb: F.linear(xx, _t(w), bb))(_t(x), _t(b)).numpy()
    np.testing.assert_allclose(got, np.stack([xx @ w.T + bb for xx, bb in zip(x, b)]), rtol=2e-5, atol=2e-5)


def test_jvp_is_the_product_rule(dev):
    a, b, ta, tb = _rand(64, 96), _rand(96, 80, seed=1), _rand(64, 96, seed=2), _rand(96, 80, seed=3)
    out, tangent = cv.jvp(lambda x, y: x @ y, (_t(a), _t(b)), (_t(ta), _t(tb)))
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(tangent.numpy(), ta @ b + a @ tb, rtol=2e-5, atol=2e-5)


def test_second_order_gradient(dev):
    x, w = _rand(64, 64), _rand(64, 64, seed=1)

    def f(x):
        return cv.grad(lambda y: (y @ _t(w)).tanh().sum())(x).square().sum()

    want = cv.grad(lambda y: cv.grad(lambda z: (z @ cv.Tensor(w)).tanh().sum())(y).square().sum())(cv.Tensor(x))
    want = want.numpy()
    np.testing.assert_allclose(cv.grad(f)(_t(x)).numpy(), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


# --- the device without the library ---------------------------------------------------------------------

def test_without_the_library_products_are_corvid_kernels(monkeypatch):
    monkeypatch.setenv("CORVID_CUBLAS", "0")
    d = FakeCUDA()
    assert d.blas() is None and d.blas_error == "CORVID_CUBLAS=0"


def test_a_library_that_does_not_start_warns_once_and_falls_back():
    class Failing(FakeCUDA):
        def _blas_library(self):
            return StandInLt(fail_create=True)

    d = Failing()
    with pytest.warns(UserWarning, match="own kernels"):
        assert d.blas() is None
    assert "cublasLtCreate" in d.blas_error and "not initialized" in d.blas_error
    assert d.blas() is None  # (decided once)


def test_a_named_library_that_is_missing_says_so(monkeypatch):
    monkeypatch.setenv("CORVID_CUBLASLT", "/nonexistent/libcublasLt.so")
    with pytest.raises(ImportError, match="CORVID_CUBLASLT"):
        L.library_path()


def test_a_refused_attribute_names_the_call_and_the_product():
    lt = L.CublasLt(StandInLt())
    with pytest.raises(L.CublasError, match=r"cublasLtMatrixLayoutCreate failed with status 7.*float32"):
        lt.layout(L.R_32F, 8, 4, 2, 1, 0, "float32 (8x4)")


# --- batch splitting ------------------------------------------------------------------------------------

@pytest.mark.parametrize("out_lead,a,b,want", [
    ((), [], [], (0, 1, 0, 0)),
    ((6,), [12], [0], (0, 6, 12, 0)),
    ((2, 3), [36, 12], [60, 20], (0, 6, 12, 20)),
    ((2, 3), [12, 0], [60, 20], (1, 3, 0, 20)),  # a broadcast inside the batch: the outer axis is looped
    ((2, 1, 3), [36, 0, 12], [0, 0, 0], (0, 6, 12, 0)),
    ((4, 5), [0, 0], [20, 4], (0, 20, 0, 4)),
])
def test_split_batch(out_lead, a, b, want):
    assert L.split_batch(out_lead, a, b) == want


# --- the C interface, against the header -----------------------------------------------------------------

def _header_dirs():
    dirs = []
    for base in sys.path:
        for sub in ("nvidia/cu13/include", "nvidia/cublas/include"):
            if os.path.isfile(os.path.join(base, sub, "cublasLt.h")):
                dirs.append(os.path.join(base, sub))
    runtime = sorted(glob.glob("/usr/local/cuda*/include/library_types.h")) + \
        [os.path.join(d, "library_types.h") for d in dirs if os.path.isfile(os.path.join(d, "library_types.h"))]
    return dirs[:1], [os.path.dirname(p) for p in runtime[:1]]


CONSTANTS = {
    "CUBLAS_STATUS_SUCCESS": L.STATUS_SUCCESS, "CUBLAS_OP_N": L.OP_N, "CUBLAS_OP_T": L.OP_T,
    "CUBLASLT_MATMUL_DESC_COMPUTE_TYPE": L.DESC_COMPUTE_TYPE, "CUBLASLT_MATMUL_DESC_SCALE_TYPE": L.DESC_SCALE_TYPE,
    "CUBLASLT_MATMUL_DESC_TRANSA": L.DESC_TRANSA, "CUBLASLT_MATMUL_DESC_TRANSB": L.DESC_TRANSB,
    "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT": L.LAYOUT_BATCH_COUNT,
    "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET": L.LAYOUT_STRIDED_BATCH_OFFSET,
    "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES": L.PREF_MAX_WORKSPACE_BYTES,
    "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES": L.PREF_MIN_ALIGNMENT_A_BYTES,
    "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES": L.PREF_MIN_ALIGNMENT_B_BYTES,
    "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES": L.PREF_MIN_ALIGNMENT_C_BYTES,
    "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES": L.PREF_MIN_ALIGNMENT_D_BYTES,
    "CUBLASLT_MATMUL_DESC_EPILOGUE": L.DESC_EPILOGUE, "CUBLASLT_MATMUL_DESC_BIAS_POINTER": L.DESC_BIAS_POINTER,
    "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE": L.DESC_BIAS_DATA_TYPE, "CUBLASLT_EPILOGUE_DEFAULT": L.EPILOGUE_DEFAULT,
    "CUBLASLT_EPILOGUE_BIAS": L.EPILOGUE_BIAS,
    "CUBLAS_COMPUTE_32F": L.COMPUTE_32F, "CUBLAS_COMPUTE_32F_FAST_16BF": L.COMPUTE_32F_FAST_16BF,
    "CUBLAS_COMPUTE_32F_FAST_TF32": L.COMPUTE_32F_FAST_TF32, "CUBLAS_COMPUTE_64F": L.COMPUTE_64F,
    "CUDA_R_32F": L.R_32F, "CUDA_R_64F": L.R_64F, "CUDA_R_16F": L.R_16F, "CUDA_R_16BF": L.R_16BF,
    "CUDA_R_8F_E4M3": L.R_8F_E4M3, "CUDA_R_8F_E5M2": L.R_8F_E5M2,
}


def test_constants_and_struct_match_the_header(tmp_path):
    lt_dirs, rt_dirs = _header_dirs()
    cc = shutil.which("gcc") or shutil.which("cc")
    if not lt_dirs or not rt_dirs or not cc:
        pytest.skip("needs cublasLt.h (pip install nvidia-cublas), CUDA's library_types.h and a C compiler")
    lines = [f'printf("{k} %d\\n", (int)({k}));' for k in CONSTANTS]
    src = tmp_path / "c.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include <cublasLt.h>\nint main(void){\n" +
                   "\n".join(lines) +
                   '\nprintf("SIZE %zu %zu %zu %zu %zu\\n", sizeof(cublasLtMatmulHeuristicResult_t), '
                   "offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize), "
                   "offsetof(cublasLtMatmulHeuristicResult_t, state), "
                   "offsetof(cublasLtMatmulHeuristicResult_t, wavesCount), sizeof(cublasLtMatmulAlgo_t));\n"
                   "return 0;}\n")
    exe = tmp_path / "c"
    subprocess.run([cc, str(src), *(f"-I{d}" for d in lt_dirs + rt_dirs), "-o", str(exe)], check=True,
                   capture_output=True)
    out = dict(line.split(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                              check=True).stdout.splitlines())
    for k, v in CONSTANTS.items():
        assert int(out[k]) == v, k
    H = L.HeuristicResult
    assert [int(x) for x in out["SIZE"].split()] == [ctypes.sizeof(H), H.workspaceSize.offset, H.state.offset,
                                                     H.wavesCount.offset, H.algo.size]


_C_KINDS = {"size_t": ctypes.c_size_t, "uint64_t": ctypes.c_uint64, "int64_t": ctypes.c_int64, "int": ctypes.c_int,
            "int32_t": ctypes.c_int}


def _c_kind(param: str):
    """The ctypes type a parameter of the header is passed as: a pointer (or an opaque handle, a
    stream), an integer of its width, or an enum (int)."""
    param = re.sub(r"\b(const|CUBLASWINAPI)\b", "", param).strip()
    handles = (r"\b(cublasLtHandle_t|cublasLtMatmulDesc_t|cublasLtMatrixLayout_t|cublasLtMatmulPreference_t"
               r"|cudaStream_t)\b")
    if "*" in param or "[" in param or re.search(handles, param):
        return ctypes.c_void_p
    base = param.rsplit(None, 1)[0] if " " in param else param
    return _C_KINDS.get(base, ctypes.c_int)  # (the rest are enums: int)


def test_prototypes_match_the_header():
    lt_dirs, _ = _header_dirs()
    if not lt_dirs:
        pytest.skip("needs cublasLt.h: pip install nvidia-cublas")
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", open(os.path.join(lt_dirs[0], "cublasLt.h")).read(), flags=re.S)
    for name, (restype, argtypes) in L.PROTOTYPES.items():
        m = re.search(r"(\w[\w\s\*]*?)\s*CUBLASWINAPI\s+" + name + r"\s*\(([^)]*)\)\s*;", text)
        assert m, name
        params = [p.strip() for p in m.group(2).split(",") if p.strip() and p.strip() != "void"]
        assert [_c_kind(p) for p in params] == argtypes, (name, params)
        ret = m.group(1).split()[-1]
        assert {"cublasStatus_t": ctypes.c_int, "size_t": ctypes.c_size_t,
                "char": ctypes.c_char_p}.get(ret.strip("*"), None) == restype, (name, ret)


# --- the descriptors, built by the real library -----------------------------------------------------------

def _real_library():
    try:
        return L.load()
    except (ImportError, OSError) as e:
        pytest.skip(f"the real cuBLASLt is not installed ({e})")


def _get(lib, fn, obj, attr, ctype):
    v, written = ctype(), ctypes.c_size_t()
    getter = getattr(lib, fn)
    getter.restype, getter.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                                     ctypes.c_size_t, ctypes.c_void_p]
    assert getter(obj.value, attr, ctypes.byref(v), ctypes.sizeof(v), ctypes.byref(written)) == 0
    assert written.value == ctypes.sizeof(v)
    return v.value


@pytest.mark.parametrize("g", [
    L.Gemm("float32", 64, 80, 96, False, False),
    L.Gemm("bfloat16", 64, 80, 96, False, True, batch=6, a_stride=64 * 96, b_stride=0),
    L.Gemm("float16", 10, 20, 30, True, False, batch=3, a_stride=0, b_stride=600),
    L.Gemm("float32", 64, 80, 96, True, True, precision="high"),
    L.Gemm("float64", 7, 5, 3, False, False),
    L.Gemm("bfloat16", 64, 80, 96, False, True, bias=True),
    L.Gemm("float32", 5, 1000, 73, False, False, batch=2, b_stride=73000, alignments=(4, 64, 16)),
    L.Gemm("float8_e4m3fn", 64, 80, 96, False, True, out="bfloat16", bias=True),
    L.Gemm("float8_e4m3fn", 32, 48, 64, False, True, batch=3, a_stride=32 * 64, out="float32"),
])
def test_the_real_library_holds_the_descriptors_as_meant(g):
    lib = _real_library()
    lt = L.CublasLt(lib)
    assert lt.version >= 120000
    p = L.Plan(lt, None, g, L.WORKSPACE_BYTES)  # (no handle: no GPU, so no algorithm is asked for)
    compute, scale, _ = g.compute()
    i32, i64, u64 = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64
    desc = "cublasLtMatmulDescGetAttribute"
    assert _get(lib, desc, p.desc, L.DESC_COMPUTE_TYPE, i32) == compute
    assert _get(lib, desc, p.desc, L.DESC_SCALE_TYPE, i32) == scale
    assert _get(lib, desc, p.desc, L.DESC_TRANSA, i32) == int(g.tb)
    assert _get(lib, desc, p.desc, L.DESC_TRANSB, i32) == int(g.ta)
    assert _get(lib, desc, p.desc, L.DESC_EPILOGUE, ctypes.c_uint32) == \
        (L.EPILOGUE_BIAS if g.bias else L.EPILOGUE_DEFAULT)
    if g.bias:
        assert _get(lib, desc, p.desc, L.DESC_BIAS_DATA_TYPE, i32) == L.DATA_TYPES[g.out_dtype]
        lt.bias(p.desc, 0x7F0000001000, "test")
        assert _get(lib, desc, p.desc, L.DESC_BIAS_POINTER, ctypes.c_uint64) == 0x7F0000001000
    lay = "cublasLtMatrixLayoutGetAttribute"
    rows, cols, ld = 2, 3, 4  # CUBLASLT_MATRIX_LAYOUT_ROWS, _COLS, _LD
    for layout, want, stride in ((p.x, (g.k, g.m, g.k) if g.tb else (g.m, g.k, g.m), g.b_stride),
                                 (p.y, (g.n, g.k, g.n) if g.ta else (g.k, g.n, g.k), g.a_stride),
                                 (p.d, (g.m, g.n, g.m), g.m * g.n)):
        assert (_get(lib, lay, layout, rows, u64), _get(lib, lay, layout, cols, u64),
                _get(lib, lay, layout, ld, i64)) == want
        kind = g.out_dtype if layout is p.d else g.dtype
        assert _get(lib, lay, layout, 0, ctypes.c_uint32) == L.DATA_TYPES[kind]  # CUBLASLT_MATRIX_LAYOUT_TYPE
        assert _get(lib, lay, layout, L.LAYOUT_BATCH_COUNT, i32) == g.batch
        if g.batch > 1:
            assert _get(lib, lay, layout, L.LAYOUT_STRIDED_BATCH_OFFSET, i64) == stride
    pref = "cublasLtMatmulPreferenceGetAttribute"
    assert _get(lib, pref, p.pref, L.PREF_MAX_WORKSPACE_BYTES, u64) == L.WORKSPACE_BYTES
    u32 = ctypes.c_uint32
    attrs = (L.PREF_MIN_ALIGNMENT_B_BYTES, L.PREF_MIN_ALIGNMENT_A_BYTES, L.PREF_MIN_ALIGNMENT_D_BYTES)
    got = tuple(_get(lib, pref, p.pref, attr, u32) for attr in attrs)
    assert got == g.alignments  # (the library's B is corvid's a)


# --- on a real GPU (skipped without one) -------------------------------------------------------------------

def _real_cuda():
    try:
        d = registry.get_device("CUDA")
    except Exception as e:
        pytest.skip(f"CUDA not available: {e}")
    if d.blas() is None:
        pytest.skip(f"cuBLASLt not available: {d.blas_error}")
    return d


@pytest.mark.parametrize("a_shape,b_shape,ta,tb", CASES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_real_cuda_products_match_numpy(a_shape, b_shape, ta, tb, dtype):
    import ml_dtypes

    _real_cuda()
    npd = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    a, b = _rand(*a_shape).astype(npd), _rand(*b_shape, seed=1).astype(npd)

    def on_gpu(v, t):
        if t:
            return cv.Tensor(np.ascontiguousarray(np.swapaxes(v, -1, -2)), device="CUDA").mT
        return cv.Tensor(v, device="CUDA")

    ca, cb = on_gpu(a, ta), on_gpu(b, tb)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    tol = 2e-5 if dtype == "float32" else 1e-2
    np.testing.assert_allclose((ca @ cb).numpy().astype(np.float64), want, rtol=tol, atol=tol * np.abs(want).max())


def test_real_cuda_training_step_gradients_match_the_cpu():
    _real_cuda()
    x, w1, w2 = _rand(64, 96), _rand(128, 96, seed=1), _rand(128, 80, seed=2)
    want = cv.grad(_mlp, argnums=(0, 1, 2))(cv.Tensor(x), cv.Tensor(w1), cv.Tensor(w2))
    got = cv.grad(_mlp, argnums=(0, 1, 2))(*(cv.Tensor(v, device="CUDA") for v in (x, w1, w2)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-5 * np.abs(w.numpy()).max())


# --- convolutions as products --------------------------------------------------------------------------

@pytest.mark.parametrize("stride,padding,dilation", [(1, 1, 1), (2, 0, 1), (1, 2, 2)])
def test_conv2d_and_its_gradients_through_the_library(dev, stride, padding, dilation):
    F = cv.nn.functional
    x, w, b = _rand(4, 16, 20, 20), _rand(24, 16, 3, 3, seed=1), _rand(24, seed=2)

    def loss(x, w, b):
        return F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation).tanh().sum()

    want = cv.value_and_grad(loss, argnums=(0, 1, 2))(cv.Tensor(x), cv.Tensor(w), cv.Tensor(b))
    got = cv.value_and_grad(loss, argnums=(0, 1, 2))(_t(x), _t(w), _t(b))
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-4)
    for g, r in zip(got[1], want[1]):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-4, atol=1e-5 * np.abs(r.numpy()).max())
    calls = dev.standin.matmuls()
    assert len(calls) >= 3  # forward, the input's gradient (a transposed convolution) and the weight's
    # the forward: per example, the weights times its windows as columns, written channels-first (no
    # copy to read the result back): one strided batch over the 4 examples, the weights (the
    # library's b: corvid's a) shared with a batch stride of 0; the bias is added afterwards
    side = (20 + 2 * padding - dilation * 2 - 1) // stride + 1
    fwd = calls[0]
    assert (fwd["d"]["rows"], fwd["d"]["cols"], fwd["d"][L.LAYOUT_BATCH_COUNT]) == (side * side, 24, 4)
    assert fwd["b"][L.LAYOUT_STRIDED_BATCH_OFFSET] == 0 and fwd["epilogue"] == L.EPILOGUE_DEFAULT


def test_grouped_and_small_convolutions_stay_corvid_kernels(dev):
    F = cv.nn.functional
    x, w = _rand(2, 8, 10, 10), _rand(8, 2, 3, 3, seed=1)
    np.testing.assert_allclose(F.conv2d(_t(x), _t(w), groups=4).numpy(),
                               F.conv2d(cv.Tensor(x), cv.Tensor(w), groups=4).numpy(), rtol=1e-5, atol=1e-5)
    assert not dev.standin.matmuls()


# --- the bias epilogue ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("x_shape", [(64, 96), (4, 32, 96)])
def test_linear_adds_its_bias_in_the_product(dev, x_shape):
    F = cv.nn.functional
    x, w, b = _rand(*x_shape), _rand(80, 96, seed=1), _rand(80, seed=2)
    got = F.linear(_t(x), _t(w), _t(b)).numpy()
    np.testing.assert_allclose(got, x @ w.T + b, rtol=2e-5, atol=2e-5)
    (call,) = dev.standin.matmuls()
    assert call["epilogue"] == L.EPILOGUE_BIAS


def test_linear_bias_gradients_and_jvp(dev):
    F = cv.nn.functional
    x, w, b = _rand(64, 96), _rand(80, 96, seed=1), _rand(80, seed=2)

    def loss(x, w, b):
        return F.linear(x, w, b).tanh().square().sum()

    want = cv.grad(loss, argnums=(0, 1, 2))(cv.Tensor(x), cv.Tensor(w), cv.Tensor(b))
    got = cv.grad(loss, argnums=(0, 1, 2))(_t(x), _t(w), _t(b))
    for g, r in zip(got, want):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-4, atol=1e-5 * np.abs(r.numpy()).max())
    tb = _rand(80, seed=5)
    _, tangent = cv.jvp(lambda bb: F.linear(_t(x), _t(w), bb), (_t(b),), (_t(tb),))
    np.testing.assert_allclose(tangent.numpy(), np.broadcast_to(tb, (64, 80)), rtol=1e-6)


def test_linear_under_autocast_keeps_the_bias_in_the_product(dev):
    import ml_dtypes

    F = cv.nn.functional
    x, w, b = _rand(64, 96), _rand(80, 96, seed=1), _rand(80, seed=2)
    with cv.autocast(cv.bfloat16):
        out = F.linear(_t(x), _t(w), _t(b))
    assert out.dtype == cv.bfloat16
    bf = ml_dtypes.bfloat16
    want = x.astype(bf).astype(np.float64) @ w.astype(bf).astype(np.float64).T + b.astype(bf).astype(np.float64)
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
    (call,) = dev.standin.matmuls()
    assert call["epilogue"] == L.EPILOGUE_BIAS and call["d"]["dtype"] == L.R_16BF


def test_a_bias_of_another_dtype_is_added_after_the_product(dev):
    F = cv.nn.functional
    x, w, b = _rand(64, 96), _rand(80, 96, seed=1), _rand(80, seed=2).astype(np.float64)
    got = F.linear(_t(x), _t(w), _t(b))
    assert got.dtype == cv.float64
    np.testing.assert_allclose(got.numpy(), x.astype(np.float64) @ w.T.astype(np.float64) + b, rtol=2e-5, atol=2e-5)
    assert [c["epilogue"] for c in dev.standin.matmuls()] == [L.EPILOGUE_DEFAULT]


# --- symbolic sizes -------------------------------------------------------------------------------------------

def test_jit_over_symbolic_rows_builds_a_plan_per_size(dev):
    F = cv.nn.functional
    w, b = _rand(80, 96, seed=1), _rand(80, seed=2)
    f = cv.jit(lambda x, w, b: F.linear(x, w, b).relu(), dynamic={0: {0: "batch", 1: "seq"}})
    for shape in [(2, 64, 96), (3, 50, 96), (4, 7, 96), (2, 64, 96)]:
        x = _rand(*shape, seed=sum(shape))
        np.testing.assert_allclose(f(_t(x), _t(w), _t(b)).numpy(), np.maximum(x @ w.T + b, 0), rtol=2e-5, atol=2e-5)
    assert f.traces == 1
    rows = [c["d"]["cols"] for c in dev.standin.matmuls()]  # (the library's columns: corvid's rows)
    assert rows == [128, 150, 28, 128]
    assert len([kind for kind, _ in dev.standin.calls if kind == "heuristic"]) == 3  # (a plan per size)


def test_jit_over_a_symbolic_batch_of_products(dev):
    f = cv.jit(lambda q, k: q @ k.mT, dynamic={0: {0: "b"}, 1: {0: "b"}})
    for batch in (3, 5):
        q, k = _rand(batch, 40, 64, seed=batch), _rand(batch, 48, 64, seed=batch + 1)
        np.testing.assert_allclose(f(_t(q), _t(k)).numpy(), q @ np.swapaxes(k, -1, -2), rtol=2e-5, atol=2e-5)
    assert f.traces == 1 and [c["d"].get(L.LAYOUT_BATCH_COUNT, 1) for c in dev.standin.matmuls()] == [3, 5]


# --- whole training steps through the library, against the CPU -------------------------------------------

def _losses(device, make, steps, batch):
    cv.manual_seed(0)
    with cv.default_device(device):
        run = make()
    return [float(run(*(cv.Tensor(v, device=device) for v in batch))) for _ in range(steps)]


def test_mnist_cnn_training_steps_match_the_cpu(dev):
    from examples.mnist import CNN, make_step

    rng = np.random.default_rng(0)
    batch = (rng.random((16, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, 16))

    def make():
        model, tx = CNN(), cv.optim.Adam.functional(lr=1e-3)
        state = {"model": model, "opt": tx.init(model)}
        step = make_step(tx)

        def run(x, y):
            state["model"], state["opt"], loss = step(state["model"], state["opt"], x, y)
            return loss.item()
        return run

    want = _losses("CPU", make, 3, batch)
    got = _losses(DEV, make, 3, batch)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert got[-1] < got[0]
    shapes = {(c["d"]["rows"], c["d"]["cols"], c["d"].get(L.LAYOUT_BATCH_COUNT, 1)) for c in dev.standin.matmuls()}
    assert (24 * 24, 32, 16) in shapes  # (the first convolution: 32 filters times each example's windows)


def test_gpt_training_steps_in_bfloat16_mixed_precision_match_the_cpu(dev):
    from examples.gpt import GPT, GPTConfig, Trainer

    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 65, (4, 33))
    batch = (tokens[:, :-1], tokens[:, 1:])
    config = GPTConfig(vocab_size=65, block_size=32, n_embd=64, n_head=4, n_layer=2)

    def make():
        trainer = Trainer(GPT(config), lr=3e-3, amp=cv.bfloat16)
        return lambda x, y: trainer.step(x, y).item()

    want = _losses("CPU", make, 3, batch)
    got = _losses(DEV, make, 3, batch)
    np.testing.assert_allclose(got, want, rtol=2e-2)  # (bfloat16 products: summed in another order)
    assert got[-1] < got[0]
    calls = dev.standin.matmuls()
    assert {c["d"]["dtype"] for c in calls} == {L.R_16BF}  # every product in bfloat16
    assert any(c["epilogue"] == L.EPILOGUE_BIAS for c in calls)


def test_the_gpu_report_names_the_route_and_checks_a_first_product(dev, monkeypatch):
    from benchmarks.gpu import _blas_line

    line = _blas_line(dev)
    assert line.startswith("matrix products: cuBLASLt 13.10.0; first product") and " ok, " in line, line
    monkeypatch.setenv("CORVID_CUBLAS", "0")
    off = FakeCUDA()
    assert _blas_line(off) == "matrix products: corvid's own kernels (no cuBLASLt: CORVID_CUBLAS=0)"


def test_the_library_is_found_where_the_wheel_puts_it_when_pathfinder_cannot_say(monkeypatch, tmp_path):
    import types

    lib = tmp_path / "nvidia" / "cu13" / "lib" / "libcublasLt.so.13"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    fake = types.ModuleType("cuda.pathfinder")
    fake.load_nvidia_dynamic_lib = lambda name: types.SimpleNamespace(abs_path=None)  # (loaded from elsewhere)
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", fake)
    monkeypatch.delenv("CORVID_CUBLASLT", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + [p for p in sys.path if "site-packages" not in p])
    assert L.library_path() == str(lib)


def test_debug_reports_count_the_products_arithmetic(dev):
    from corvid.engine.schedule import create_schedule

    a, b = _t(_rand(3, 64, 96)), _t(_rand(3, 80, 96, seed=1))
    (sk,) = [s for s in create_schedule([(a @ b.mT).node], DEV) if s.name.startswith("host_gemm")]
    assert sk.compiled.kernel.estimates()[0] == 2 * 3 * 64 * 96 * 80


def test_few_rows_times_a_computed_weight_stay_fused(dev):
    # a decode step times a dequantized weight: corvid's kernel reads the int8 values in place;
    # the library would store the whole float weight first
    w8 = np.random.default_rng(3).integers(-127, 128, (512, 1024)).astype(np.int8)
    scale = _rand(512, 1, seed=4)
    x1, x64 = _rand(1, 1024, seed=5), _rand(64, 1024, seed=6)
    w = _t(w8).astype(cv.float32) * _t(scale)
    want = lambda x: x @ (w8.astype(np.float64) * scale).T  # noqa: E731
    np.testing.assert_allclose((_t(x1) @ w.T).numpy(), want(x1), rtol=1e-4, atol=1e-3)
    assert not dev.standin.matmuls()
    np.testing.assert_allclose((_t(x1) @ _t(w8.astype(np.float32)).T).numpy(), x1 @ w8.astype(np.float32).T,
                               rtol=1e-5, atol=1e-3)  # (a stored weight: the library, even for one row)
    assert len(dev.standin.matmuls()) == 1
    big = want(x64)  # (many rows: the weight stored once, then the library)
    np.testing.assert_allclose((_t(x64) @ w.T).numpy(), big, rtol=1e-4, atol=1e-4 * np.abs(big).max())
    assert len(dev.standin.matmuls()) == 2


# --- 8-bit floats -----------------------------------------------------------------------------------------

def _fp8(*shape, seed=0, kind="float8_e4m3fn", scale=4.0):
    import ml_dtypes

    return (_rand(*shape, seed=seed) * scale).astype(getattr(ml_dtypes, kind))


def _fp8_reference(a, b, out):
    """The float64 product of the 8-bit values, rounded once to ``out`` (numpy's dtype)."""
    return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(out)


def _close_in(got, want, dtype):
    """Equal up to one rounding of ``dtype``, or float32 sums in another order than float64's."""
    import ml_dtypes

    eps = max(float(ml_dtypes.finfo(dtype).eps), 1e-5)
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_allclose(g, w, rtol=eps, atol=eps * np.nanmax(np.abs(w)) * 1e-3)


@pytest.mark.parametrize("out", ["bfloat16", "float16", "float32"])
def test_widened_float8_operands_are_one_float8_product(dev, out):
    import ml_dtypes

    a, w = _fp8(64, 96), _fp8(80, 96, seed=1)  # x @ w.T: the library's only 8-bit layout, no copy
    wide = getattr(cv, out)
    got = (_t(a).astype(wide) @ _t(w).astype(wide).T).numpy()
    npd = np.float32 if out == "float32" else getattr(ml_dtypes, out) if out == "bfloat16" else np.float16
    assert got.dtype == npd
    _close_in(got, _fp8_reference(a, w.T, npd), npd)
    (call,) = dev.standin.matmuls()
    assert call["a"]["dtype"] == call["b"]["dtype"] == L.R_8F_E4M3  # (the 8-bit operands, read as stored)
    assert call["d"]["dtype"] == call["c"]["dtype"] == L.DATA_TYPES[out]
    assert (call["transa"], call["transb"]) == (L.OP_T, L.OP_N) and call["compute"] == L.COMPUTE_32F


def test_a_float8_product_is_rounded_once_to_float8(dev):
    import ml_dtypes

    a, b = _fp8(64, 96, scale=1), _fp8(96, 80, seed=1, scale=1)  # b stored (k, m): copied to (m, k) for the library
    got = _t(a) @ _t(b)
    assert got.dtype is cv.float8_e4m3fn
    want = _fp8_reference(a, b, np.float32).astype(ml_dtypes.float8_e4m3fn)
    _close_in(got.numpy().astype(np.float32), want.astype(np.float32), np.float32)
    assert not np.isnan(want.astype(np.float32)).any()  # (in range: 448 is float8_e4m3fn's largest)
    mismatch = got.numpy().astype(np.float32) != want.astype(np.float32)
    assert mismatch.mean() < 0.01  # (a sum on the other side of an 8-bit rounding boundary: rare)
    (call,) = dev.standin.matmuls()
    assert call["a"]["dtype"] == L.R_8F_E4M3 and call["d"]["dtype"] == L.R_32F


@pytest.mark.parametrize("ta", [False, True])
def test_float8_operands_in_other_layouts_are_copied_to_the_libraries(dev, ta):
    a, b = _fp8(2, 64, 64), _fp8(64, 48, seed=1)
    ca = _t(np.ascontiguousarray(np.swapaxes(a, -1, -2))).mT if ta else _t(a)
    got = (ca.astype(cv.float32) @ _t(b).astype(cv.float32)).numpy()
    _close_in(got, _fp8_reference(a, b, np.float32), np.float32)
    calls = dev.standin.matmuls()
    assert calls
    for call in calls:
        assert call["a"]["dtype"] == L.R_8F_E4M3 and (call["transa"], call["transb"]) == (L.OP_T, L.OP_N)


@pytest.mark.parametrize("case", ["e5m2", "mixed", "odd k", "sm_80"])
def test_float8_products_the_tensor_cores_do_not_take_are_bfloat16_products(case):
    import ml_dtypes

    kinds = {"e5m2": ("float8_e5m2",) * 2, "mixed": ("float8_e4m3fn", "float8_e5m2")}.get(case, ("float8_e4m3fn",) * 2)
    k = 72 if case == "odd k" else 96
    a, w = _fp8(64, k, kind=kinds[0]), _fp8(80, k, seed=1, kind=kinds[1])
    target = f"{__name__}:OldBlasCUDA" if case == "sm_80" else f"{__name__}:BlasCUDA"
    with registered(DEV, target) as d:
        got = (_t(a).astype(cv.bfloat16) @ _t(w).astype(cv.bfloat16).T).numpy()
        calls = d.standin.matmuls()
    _close_in(got, _fp8_reference(a, w.T, ml_dtypes.bfloat16), ml_dtypes.bfloat16)
    assert calls and all(c["a"]["dtype"] == L.R_16BF for c in calls)


class OldBlasCUDA(BlasCUDA):
    """The stand-in CUDA device as an sm_80 GPU: no 8-bit float tensor cores."""

    def __init__(self):
        super().__init__()
        self.arch = "sm_80"


def test_float8_linear_adds_its_bias_in_the_product_as_the_library_allows(dev):
    import ml_dtypes

    x, w = _fp8(64, 96), _fp8(80, 96, seed=1)
    bias = _rand(80, seed=2)
    for out, epilogue in (("bfloat16", L.EPILOGUE_BIAS), ("float32", L.EPILOGUE_DEFAULT)):
        dev.standin.calls.clear()
        wide = getattr(cv, out)
        got = cv.nn.functional.linear(_t(x).astype(wide), _t(w).astype(wide), _t(bias).astype(wide)).numpy()
        npd = ml_dtypes.bfloat16 if out == "bfloat16" else np.float32
        want = (np.matmul(x.astype(np.float64), w.T.astype(np.float64)) + bias.astype(npd).astype(np.float64))
        _close_in(got, want.astype(npd), npd)
        (call,) = dev.standin.matmuls()
        assert call["a"]["dtype"] == L.R_8F_E4M3 and call["epilogue"] == epilogue


def test_float8_product_gradients_and_jvp_match_the_cpu(dev):
    x, w = _fp8(64, 96), _fp8(80, 96, seed=1)
    s = _rand(64, 80, seed=3)

    def f(x, w, s):
        return ((x.astype(cv.bfloat16) @ w.astype(cv.bfloat16).T).astype(cv.float32) * s).sum()

    want_v, want = cv.value_and_grad(f, argnums=(0, 1))(cv.Tensor(x), cv.Tensor(w), cv.Tensor(s))
    got_v, got = cv.value_and_grad(f, argnums=(0, 1))(_t(x), _t(w), _t(s))
    np.testing.assert_allclose(float(got_v.numpy()), float(want_v.numpy()), rtol=1e-3)
    for g, wa in zip(got, want):
        assert g.dtype is cv.float8_e4m3fn
        np.testing.assert_allclose(g.numpy().astype(np.float32), wa.numpy().astype(np.float32), rtol=0.07)
    # (the forward's product reads the 8-bit operands; the gradients' products, of a bfloat16
    # cotangent and an 8-bit operand, are bfloat16 products)
    assert [c["a"]["dtype"] for c in dev.standin.matmuls()].count(L.R_8F_E4M3) == 1
    tx = _fp8(64, 96, seed=4)
    _, want_t = cv.jvp(lambda x: f(x, cv.Tensor(w), cv.Tensor(s)), (cv.Tensor(x),), (cv.Tensor(tx),))
    _, got_t = cv.jvp(lambda x: f(x, _t(w), _t(s)), (_t(x),), (_t(tx),))
    np.testing.assert_allclose(float(got_t.numpy()), float(want_t.numpy()), rtol=2e-2)


def test_vmap_over_float8_operands_matches_a_loop(dev):
    x, w = _fp8(3, 64, 64), _fp8(80, 64, seed=1)  # (each example's product is large enough for the library)
    f = lambda x: x.astype(cv.float32) @ _t(w).astype(cv.float32).T  # noqa: E731
    got = cv.vmap(f)(_t(x)).numpy()
    assert [c["a"]["dtype"] for c in dev.standin.matmuls()] == [L.R_8F_E4M3]
    for i in range(3):
        _close_in(got[i], _fp8_reference(x[i], w.T, np.float32), np.float32)


def test_a_product_the_library_refuses_is_computed_on_the_host_with_a_warning(dev, monkeypatch):
    refuse = dev.standin.fp8_refusal
    monkeypatch.setattr(dev.standin, "fp8_refusal", lambda desc, la, *rest: "refused for the test"
                        if la["rows"] == 80 else refuse(desc, la, *rest))
    a, b = _rand(64, 96), _rand(96, 80, seed=1)
    with pytest.warns(UserWarning, match="cuBLASLt refused a matrix product"):
        got = (_t(a) @ _t(b)).numpy()
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=2e-5, atol=2e-5)
    assert not dev.standin.matmuls()  # (the library ran nothing)


def test_a_realized_product_is_the_library_output_not_a_copy_of_it(dev):
    """The library's product comes out flat and is reshaped: realizing it runs the library alone,
    and the result shares its buffer (planned as one graph, the reshape was a copy kernel of
    its own: 18-70 us after a 188 us 4096^2 bfloat16 product on an H200)."""
    a, b = _rand(128, 64, dtype=np.float32), _rand(64, 96, dtype=np.float32, seed=1)  # (above MIN_WORK)
    for dtype in (cv.float32, cv.bfloat16):
        x, y = _t(a).astype(dtype).realize(), _t(b).astype(dtype).realize()
        with cv.profile() as p:
            out = (x @ y).realize()
        assert [k.name for k in p.kernels] == ["host_gemm"]
        want = x.numpy().astype(np.float32) @ y.numpy().astype(np.float32)
        np.testing.assert_allclose(out.numpy().astype(np.float32), want, rtol=2e-2, atol=2e-2)
        assert out.shape == (128, 96) and out.dtype == dtype


def test_eager_library_calls_replay_their_recorded_graphs(dev, monkeypatch):
    """``a @ b``, ``F.linear`` and ``conv2d`` through the library, called eagerly again and again
    (engine/replay.py): each call after the first replays the recorded graph, builds the same
    nodes as the functions do, runs the library alone and gives the CPU's values."""
    from corvid.engine import replay

    from corvid.engine import schedule as sched

    walks = []
    real = sched._walk
    monkeypatch.setattr(sched, "_walk", lambda roots: walks.append(1) or real(roots))
    F = cv.nn.functional
    a, b = _rand(128, 64), _rand(64, 96, seed=1)
    w, bias = _rand(96, 64, seed=2), _rand(96, seed=3)
    img, kern = _rand(2, 8, 10, 10, seed=4), _rand(16, 8, 3, 3, seed=5)
    for dtype in (cv.float32, cv.bfloat16):
        x, y = _t(a).astype(dtype).realize(), _t(b).astype(dtype).realize()
        wt, bt = _t(w).astype(dtype).realize(), _t(bias).astype(dtype).realize()
        calls = {"matmul": (lambda: x @ y, lambda: x.numpy().astype(np.float32) @ y.numpy().astype(np.float32)),
                 "matmul_T": (lambda: x @ wt.T, lambda: x.numpy().astype(np.float32) @ wt.numpy().astype(np.float32).T),
                 "linear": (lambda: F.linear(x, wt, bt),
                            lambda: x.numpy().astype(np.float32) @ wt.numpy().astype(np.float32).T
                            + bt.numpy().astype(np.float32))}
        for name, (call, want) in calls.items():
            for i in range(3):
                out = call()
                with replay.off():
                    assert call().node is out.node, name
                walks.clear()
                with cv.profile() as p:
                    out.realize()
                assert [k.name for k in p.kernels] == ["host_gemm"], name
                assert i == 0 or not walks, name  # (a replay's realize plans from the recorded walk)
                np.testing.assert_allclose(out.numpy().astype(np.float32), want(), rtol=3e-2, atol=3e-2)
    xi, ki = _t(img).realize(), _t(kern).realize()
    want = cv.conv2d(cv.Tensor(img), cv.Tensor(kern), padding=1).numpy()
    for _ in range(3):
        out = cv.conv2d(xi, ki, padding=1)
        with replay.off():
            assert cv.conv2d(xi, ki, padding=1).node is out.node
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)

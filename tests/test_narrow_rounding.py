"""float16 and bfloat16 are computed in float32 and rounded to their dtype after every op, as
numpy's float16 ufuncs, ml_dtypes' bfloat16 ufuncs and PyTorch's eager ops round: a fused chain
gives the same values as the ops one at a time, and ``x.astype(bfloat16).astype(float32)``
quantizes even when both casts fuse into one kernel. A sum reduce (and so a matmul) accumulates in
float32 and rounds once. Checked on every executing device (CPU, CL, WEBGPU; a device that cannot
start is skipped with the reason: the ``device`` fixture of conftest.py)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import corvid as cv

NARROW = [(cv.float16, np.float16), (cv.bfloat16, ml_dtypes.bfloat16)]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (overflows made on purpose)


def same_values(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values, -0.0 and 0.0 told apart, any nan equal to any nan."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    g, w = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    ok = ~np.isnan(w)
    bad = np.flatnonzero((g[ok] != w[ok]) | (np.signbit(g[ok]) != np.signbit(w[ok])))
    assert bad.size == 0, f"{bad.size} differ, first: {g[ok][bad[:6]]} != {w[ok][bad[:6]]}"


def edge_values(npd) -> np.ndarray:
    """float32 values at the narrow dtype's rounding edges: ties, subnormals, overflow, specials."""
    info = ml_dtypes.finfo(npd)
    tiny, big, eps = float(info.smallest_subnormal), float(info.max), float(info.eps)
    ones = np.float32(1.0) + np.float32(eps) * np.array([0.25, 0.5, 0.75, 1.5, 2.5], np.float32)
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, tiny, tiny / 2, tiny * 0.75, -tiny / 2,
            float(info.smallest_normal), big, -big, big * 1.001, big * 2, 3.0e38, 1e-30, -1e-30]
    return np.concatenate([np.array(vals, np.float32), ones, -ones])


@pytest.mark.parametrize("d,npd", NARROW, ids=lambda v: getattr(v, "name", ""))
def test_a_round_trip_through_a_narrow_float_quantizes_even_when_the_casts_fuse(device, d, npd):
    rng = np.random.default_rng(0)
    a = np.concatenate([edge_values(npd), rng.standard_normal(5000).astype(np.float32) * 100])
    x = cv.Tensor(a, device=device)
    same_values(x.astype(d).astype(cv.float32).numpy(), a.astype(npd).astype(np.float32))
    # the round trip inside a float32 expression, one kernel
    got = (x.astype(d).astype(cv.float32) * 3.0 - x).numpy()
    want = a.astype(npd).astype(np.float32) * np.float32(3.0) - a
    same_values(got, want)


@pytest.mark.parametrize("d,npd", NARROW, ids=lambda v: getattr(v, "name", ""))
def test_a_fused_chain_rounds_after_every_op_as_the_ops_one_at_a_time(device, d, npd):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal(4096) * 8).astype(npd)
    b = (rng.standard_normal(4096) * 8).astype(npd)
    x, y = cv.Tensor(a, device=device), cv.Tensor(b, device=device)
    got = ((x * 1.5 + 0.5) * y - x / y).numpy()
    want = (a * npd(1.5) + npd(0.5)) * b - a / b
    same_values(got, want)
    got = (-(x - y) * (x + y)).numpy()  # (a negation is exact: nothing to round)
    same_values(got, -(a - b) * (a + b))
    # a narrow result computed from float32 operands rounds once, where it is cast
    f = rng.standard_normal(4096).astype(np.float32)
    got = ((cv.Tensor(f, device=device) * 3.0).astype(d) + x).numpy()
    same_values(got, (f * np.float32(3.0)).astype(npd) + a)


@pytest.mark.parametrize("d,npd", NARROW, ids=lambda v: getattr(v, "name", ""))
def test_arange_in_a_narrow_float_is_rounded_where_it_is_made(device, d, npd):
    got = cv.arange(0, 3000, dtype=d, device=device).numpy()
    same_values(got, np.arange(3000, dtype=np.float32).astype(npd))
    got = (cv.arange(0, 3000, dtype=d, device=device) * 1).numpy()
    same_values(got, np.arange(3000, dtype=np.float32).astype(npd) * npd(1))


@pytest.mark.parametrize("d,npd", NARROW, ids=lambda v: getattr(v, "name", ""))
def test_sums_and_matmuls_accumulate_in_float32_and_round_once(device, d, npd):
    """Small integers: every float32 partial sum is exact, so the result is the exact sum rounded
    once to the narrow dtype (a narrow accumulator would round at every step and drift)."""
    rng = np.random.default_rng(2)
    a = rng.integers(-8, 9, size=(40, 700)).astype(np.float32)
    x = cv.Tensor(a.astype(npd), device=device)
    same_values(x.sum().numpy(), np.array(a.sum(), np.float32).astype(npd))
    same_values(x.sum(axis=1).numpy(), a.sum(axis=1).astype(npd))
    p = rng.integers(-4, 5, size=(24, 64)).astype(np.float32)
    q = rng.integers(-4, 5, size=(64, 20)).astype(np.float32)
    got = (cv.Tensor(p.astype(npd), device=device) @ cv.Tensor(q.astype(npd), device=device)).numpy()
    same_values(got, (p @ q).astype(npd))
    big = np.full(600, 257, np.float32).astype(npd)  # (257 is not a bfloat16: 256 each)
    got = cv.Tensor(big, device=device).sum().numpy()
    same_values(got, np.array(big.astype(np.float32).sum(), np.float32).astype(npd))


@pytest.mark.parametrize("d,npd", NARROW, ids=lambda v: getattr(v, "name", ""))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_fuzz_round_trips_and_products_match_numpy(d, npd, data):
    floats = st.floats(width=32, allow_nan=True, allow_infinity=True)
    a = data.draw(hnp.arrays(np.float32, st.integers(1, 64), elements=floats))
    b = data.draw(hnp.arrays(np.float32, a.shape, elements=floats))
    x, y = cv.Tensor(a), cv.Tensor(b)
    same_values(x.astype(d).astype(cv.float32).numpy(), a.astype(npd).astype(np.float32))
    got = (x.astype(d) * y.astype(d) + x.astype(d)).numpy()
    an, bn = a.astype(npd), b.astype(npd)
    same_values(got, an * bn + an)


ALL_NARROW = [(cv.float16, np.float16), (cv.bfloat16, ml_dtypes.bfloat16),
              (cv.float8_e4m3fn, ml_dtypes.float8_e4m3fn), (cv.float8_e5m2, ml_dtypes.float8_e5m2)]
# (shapes of a @ b, each over the size from which the CPU runs a narrow matmul in float32 kernels)
BIG_MATMULS = [((48, 64), (64, 40)), ((2, 3, 40, 30), (3, 30, 64)), ((4096,), (4096, 24)), ((24, 4096), (4096,)),
               ((70000,), (70000,))]


@pytest.mark.parametrize("d,npd", ALL_NARROW, ids=lambda v: getattr(v, "name", ""))
@pytest.mark.parametrize("sa,sb", BIG_MATMULS, ids=str)
def test_big_narrow_matmuls_accumulate_exact_products_in_float32(d, npd, sa, sb):
    """A narrow matmul big enough to run through the float32 kernels (operands converted by
    kernels of their own, rounded once at the end) keeps the narrow matmul's values: small
    integers make every float32 partial sum exact, so the result is the exact one rounded once;
    1-d operands are squeezed as numpy does; a transposed operand gives the same values."""
    rng = np.random.default_rng(5)
    p = rng.integers(-3, 4, size=sa).astype(np.float32)
    q = rng.integers(-3, 4, size=sb).astype(np.float32)
    want = np.asarray(p @ q).astype(npd)
    x, y = cv.Tensor(p.astype(npd)), cv.Tensor(q.astype(npd))
    got = (x @ y).numpy()
    assert got.shape == want.shape
    same_values(got, want)
    if len(sb) == 2:
        yt = cv.Tensor(np.ascontiguousarray(q.T).astype(npd)).T
        same_values((x @ yt).numpy(), want)


@pytest.mark.parametrize("d,npd", ALL_NARROW, ids=lambda v: getattr(v, "name", ""))
def test_big_narrow_matmul_rounds_once_from_float32(d, npd):
    """Values that do not sum exactly: each result is the float32 dot product of the operands'
    values rounded once to the narrow dtype, so it is one of the two values of the dtype around the
    exact (float64) dot product: the float32 partial sums' own error is far below their spacing."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((64, 96)).astype(np.float32).astype(npd)
    b = rng.standard_normal((96, 80)).astype(np.float32).astype(npd)
    got = (cv.Tensor(a) @ cv.Tensor(b)).numpy().astype(np.float64)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bits = np.arange(1 << (8 * np.dtype(npd).itemsize), dtype=np.uint8 if np.dtype(npd).itemsize == 1 else np.uint16)
    values = np.unique(bits.view(npd).astype(np.float64))
    values = values[np.isfinite(values)]
    i = np.clip(np.searchsorted(values, exact), 1, values.size - 1)
    assert np.all((got == values[i - 1]) | (got == values[i]) | (got == exact))


def test_a_big_bfloat16_matmul_runs_in_vector_tiles():
    """The CPU's register tiles vectorize float32 loads and stores only: a bfloat16 matmul of
    128^3 runs as a float32 one (whose kernel the heuristics vectorize and tile) between kernels
    that convert the operands and round the result."""
    a = cv.Tensor(np.ones((128, 128), np.float32)).astype(cv.bfloat16).realize()
    kernels = (a @ a).schedule()
    assert [k.name.split("_")[0] for k in kernels].count("r") == 1
    mm = next(k for k in kernels if k.name.startswith("r"))
    assert mm.kernel.params[0].dtype == cv.float32 and all(p.dtype == cv.float32 for p in mm.kernel.params)
    assert any(o.op == "vectorize" for o in mm.kernel.opts) and any(o.op == "upcast" for o in mm.kernel.opts)


def test_big_bfloat16_matmul_gradients():
    """The float32 route is made of ordinary ops: gradients flow through the conversions (as
    narrow matmuls of their own) and equal the float32 gradients rounded to bfloat16."""
    rng = np.random.default_rng(7)
    a = rng.integers(-3, 4, size=(40, 48)).astype(np.float32)
    b = rng.integers(-3, 4, size=(48, 36)).astype(np.float32)
    x = cv.Tensor(a).astype(cv.bfloat16).detach().requires_grad_()
    y = cv.Tensor(b).astype(cv.bfloat16).detach().requires_grad_()
    (x @ y).sum().backward()
    assert x.grad.dtype == cv.bfloat16 and y.grad.dtype == cv.bfloat16
    bf = ml_dtypes.bfloat16
    same_values(x.grad.numpy(), (np.ones((40, 36), np.float32) @ b.T).astype(bf))
    same_values(y.grad.numpy(), (a.T @ np.ones((40, 36), np.float32)).astype(bf))


@pytest.mark.parametrize("d,npd", ALL_NARROW, ids=lambda v: getattr(v, "name", ""))
def test_big_narrow_convolutions_keep_the_narrow_values(d, npd):
    """A narrow convolution runs as the float32 one of the converted operands, rounded once, then
    the bias added in the narrow dtype: small integers give exact float32 sums, so the result is
    the exact convolution (numpy, float64) rounded once, plus the bias with one more rounding."""
    import corvid.nn.functional as F

    rng = np.random.default_rng(8)
    x = rng.integers(-2, 3, size=(2, 6, 16, 16)).astype(np.float32)
    w = rng.integers(-2, 3, size=(8, 3, 3, 3)).astype(np.float32)
    bias = rng.integers(-3, 4, size=8).astype(np.float32) / 4
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # (2, 6, 16, 16, 3, 3)
    win = win.reshape(2, 2, 3, 16, 16, 3, 3)  # groups=2: 3 input channels each
    exact = np.einsum("ngcyxij,gocij->ngoyx", win.astype(np.float64),
                      w.reshape(2, 4, 3, 3, 3).astype(np.float64)).reshape(2, 8, 16, 16)
    want = (exact.astype(np.float32).astype(npd) + bias.astype(npd).reshape(8, 1, 1)).astype(npd)
    got = F.conv2d(cv.Tensor(x.astype(npd)), cv.Tensor(w.astype(npd)), cv.Tensor(bias.astype(npd)),
                   padding=1, groups=2).numpy()
    same_values(got, want)


def test_big_bfloat16_convolution_gradients():
    """Gradients flow through the float32 route and equal the float32 convolution's gradients of
    the same values, rounded to bfloat16 (small integers: every sum exact)."""
    import corvid.nn.functional as F

    rng = np.random.default_rng(9)
    x = rng.integers(-2, 3, size=(2, 4, 14, 14)).astype(np.float32)
    w = rng.integers(-2, 3, size=(6, 4, 3, 3)).astype(np.float32)
    grads = []
    for d in (cv.bfloat16, cv.float32):
        xt = cv.Tensor(x).astype(d).detach().requires_grad_()
        wt = cv.Tensor(w).astype(d).detach().requires_grad_()
        F.conv2d(xt, wt, padding=1).sum().backward()
        assert xt.grad.dtype == d and wt.grad.dtype == d
        grads.append((xt.grad.numpy(), wt.grad.numpy()))
    bf = ml_dtypes.bfloat16
    same_values(grads[0][0], grads[1][0].astype(bf))
    same_values(grads[0][1], grads[1][1].astype(bf))



@pytest.mark.parametrize("d,npd", ALL_NARROW, ids=lambda v: getattr(v, "name", ""))
@pytest.mark.parametrize("rows", [1, 3, 7])
def test_a_few_narrow_rows_times_a_transposed_weight_read_it_as_stored(d, npd, rows):
    """``x @ w.T`` with fewer than 8 rows (a decode step's Linear layers) reads the narrow ``w``
    as it is stored and converts in registers: one kernel, over the narrow operands, and no
    float32 copy of ``w`` (converting all of w at every call cost 14x the product). A weight
    passed as a leaf under ``no_grad`` (generation's weights: a DETACH over the transposed view)
    too. The products accumulate in float32 and round once: -1, 0 and 1 make every partial sum
    exact, so the result is the exact one rounded once."""
    rng = np.random.default_rng(7)
    a = rng.integers(-1, 2, size=(1, rows, 256)).astype(np.float32)
    b = rng.integers(-1, 2, size=(384, 256)).astype(np.float32)
    want = (a.astype(np.float64) @ b.astype(np.float64).T).astype(npd)
    x = cv.Tensor(a.astype(npd))
    for w in (cv.Tensor(b.astype(npd)), cv.Tensor(b.astype(npd)).requires_grad_()):
        with cv.no_grad():
            y = x @ w.T
        kernels = y.schedule()
        assert len(kernels) == 1 and all(p.dtype == d for p in kernels[0].kernel.params)
        same_values(y.numpy(), want)


def test_a_packed_narrow_weight_is_converted_by_the_packing_copy():
    """A bfloat16 product of many rows whose weight the float32 product reads through a packed
    copy (ops/reduce.py: _packed_transpose) converts it in that copy: one kernel writes a float32
    copy of ``w`` (it converted it, then another kernel packed the converted copy). Values: the
    exact products (of -1, 0 and 1) rounded once."""
    from corvid.codegen.opt import cache_bytes

    k = 256
    m = -(-cache_bytes(3) // 8 // (4 * k) // 32) * 32  # (float32 columns past the packing threshold)
    rng = np.random.default_rng(8)
    a = rng.integers(-1, 2, size=(64, k)).astype(np.float32)
    b = rng.integers(-1, 2, size=(m, k)).astype(np.float32)
    w = cv.Tensor(b.astype(ml_dtypes.bfloat16)).realize()
    y = cv.Tensor(a.astype(ml_dtypes.bfloat16)) @ w.T
    copies = [sk for sk in y.schedule() if sk.output.numel == m * k]
    assert len(copies) == 1 and copies[0].output.dtype == cv.float32 and any(n is w.node for n in copies[0].inputs)
    same_values(y.numpy(), (a.astype(np.float64) @ b.astype(np.float64).T).astype(ml_dtypes.bfloat16))

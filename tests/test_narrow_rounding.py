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

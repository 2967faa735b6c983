"""Long float sums keep a pairwise summation's accuracy on every device (codegen/cascade.py).

Before the cascade, every accumulator added its elements one at a time: ``ones(2**30).sum()``
gave 536870912.0, ``10**8`` float32 values of 0.1 summed to 9679793 (numpy: 1.0000002e7) and
the variance of ``1e4 + randn(10**6)`` came out 6.08 instead of 1.0013. Each test here failed on
that code. The references are float64 numpy sums of the same float32 values.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import corvid as cv
from corvid.codegen.cascade import BLOCK, FAN, TOP, cascade_sums
from corvid.codegen.lower import lower

# elements for a device other than the CPU (CL on PoCL, WEBGPU on lavapipe run on these 2 cores;
# lavapipe runs at most 65535 loop iterations per invocation: a multiple of 1024 splits into 1024
# partials of 8192)
_DEVICE_N = 2**23


def _rel(got, want) -> float:
    return abs(float(got) - float(want)) / abs(float(want))


def test_a_sum_of_ones_counts_past_float32s_integer_range():
    # 2**30 ones from a constant (nothing is allocated): a single accumulator stopped at 2**24 per
    # lane (2**29 over 32 lanes); every run of a cascade stays far below 2**24
    assert float(cv.ones(2**30).sum().numpy()) == 2.0**30
    assert float(cv.ones(2**30 + 1280).sum().numpy()) == 2.0**30 + 1280  # (float32 steps by 128 there)


def test_a_hundred_million_tenths():
    a = np.full(10**8, 0.1, np.float32)
    t = cv.Tensor(a)
    exact = a.astype(np.float64).sum()
    # numpy's pairwise sum is off by 1.9e-7 here; the sequential sum was off by 3.2e-2
    assert _rel(t.sum().numpy(), exact) < 2e-6
    assert _rel(t.mean().numpy(), exact / a.size) < 2e-6


def test_a_hundred_million_normal_values_sum_like_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(10**8).astype(np.float32)
    exact = a.astype(np.float64).sum()
    err = abs(float(cv.Tensor(a).sum().numpy()) - exact)
    # relative to the sum of magnitudes (the error bound's scale): numpy's pairwise sum is at
    # 1e-10 of it here
    assert err / np.abs(a.astype(np.float64)).sum() < 1e-8


@pytest.mark.parametrize("offset", [1e4, 1e5])
def test_variance_at_a_large_offset(offset):
    rng = np.random.default_rng(1)
    a = (offset + rng.standard_normal(10**6)).astype(np.float32)
    t = cv.Tensor(a)
    want = np.var(a.astype(np.float64))
    assert _rel(cv.var(t).numpy(), want) < 1e-4
    assert _rel(cv.std(t, correction=1).numpy(), np.std(a.astype(np.float64), ddof=1)) < 1e-4
    # the mean fused into its consumer's kernel is as accurate as the mean realized alone
    centered = (t - t.mean()).numpy().astype(np.float64)
    exact = a.astype(np.float64) - a.astype(np.float64).mean()
    assert np.abs(centered - exact).max() <= 2 * np.spacing(np.float32(offset + 8))


def test_row_and_column_sums_of_long_axes():
    rng = np.random.default_rng(2)
    a = (100 + rng.standard_normal((4, 3 * 10**6))).astype(np.float32)
    t = cv.Tensor(a)
    exact = a.astype(np.float64)
    assert np.allclose(t.sum(1).numpy(), exact.sum(1), rtol=2e-6, atol=0)
    assert np.allclose(t.mean(1).numpy(), exact.mean(1), rtol=2e-6, atol=0)
    b = np.ascontiguousarray(a.T)  # a column sum: the heuristics vectorize it across the columns
    assert np.allclose(cv.Tensor(b).sum(0).numpy(), exact.sum(1), rtol=2e-6, atol=0)
    # a norm: a sum of squares over a long axis
    assert np.allclose(cv.linalg.vector_norm(t, axis=1).numpy(), np.sqrt((exact * exact).sum(1)), rtol=2e-6)


def test_float16_mean_and_variance_compute_in_float32():
    x = cv.Tensor(np.full(4, 65504, np.float16))
    assert x.mean().dtype == cv.float16 and float(x.mean().numpy()) == 65504.0
    assert float(x.var().numpy()) == 0.0  # (numpy's float16 var overflows to inf in the squares)
    y = cv.Tensor(np.array([1, 2, 3, 4], np.float16)).astype(cv.bfloat16)
    assert y.mean().dtype == cv.bfloat16 and float(y.mean().numpy()) == 2.5


def test_every_device_sums_long_inputs_accurately(device):
    a = np.full(_DEVICE_N, 0.1, np.float32)
    t = cv.Tensor(a, device=device)
    exact = a.astype(np.float64).sum()
    assert _rel(t.sum().numpy(), exact) < 2e-6
    rng = np.random.default_rng(3)
    # (30000: a variance kernel that WEBGPU runs in one invocation loops over the input twice, and
    # lavapipe allows 65535 loop iterations; at 2**23 its kernels recompute the mean in every
    # invocation, which it refuses, as before the cascade)
    b = (1e4 + rng.standard_normal(30000)).astype(np.float32)
    tb = cv.Tensor(b, device=device)
    assert _rel(cv.var(tb).numpy(), np.var(b.astype(np.float64))) < 1e-3
    assert float(cv.ones(2**25, device=device).sum().numpy()) == 2.0**25


@settings(max_examples=60, deadline=None)
@given(n=st.one_of(st.integers(1, 3 * BLOCK), st.sampled_from([2 * BLOCK - 1, 2 * BLOCK, BLOCK * FAN * TOP,
                                                                BLOCK * FAN * TOP + 1, BLOCK * (TOP + 1) + 7])),
       lead=st.integers(1, 3), dtype=st.sampled_from([np.float32, np.float64]))
def test_cascaded_sums_count_every_element_once(n, lead, dtype):
    """Small integers sum exactly in any order, so any element counted twice or skipped at the
    boundaries of the runs shows."""
    a = (np.arange(lead * n) % 7).reshape(lead, n).astype(dtype)
    t = cv.Tensor(a)
    assert np.array_equal(t.sum(1).numpy(), a.sum(1))
    assert float(t.sum().numpy()) == float(a.sum())
    assert np.array_equal(t.T.sum(0).numpy(), a.sum(1))


@pytest.mark.parametrize("shape,axes", [((3000, 5, 700), (0, 2)), ((5, 4100), None), ((2, 3, 70000), (1, 2))])
def test_sums_over_several_axes_and_complex(shape, axes):
    a = (np.arange(np.prod(shape)) % 5).reshape(shape).astype(np.float32)
    assert np.array_equal(cv.Tensor(a).sum(axes).numpy(), a.sum(axes))
    z = a.astype(np.complex64) * (1 - 2j)
    assert np.array_equal(cv.Tensor(z).sum(axes).numpy(), z.sum(axes))


def _reduce_runs(k) -> list[int]:
    return [lp.size for u in k.values() if u.op == "reduce" for lp in u.arg[1]]


def test_no_run_of_a_cascade_is_longer_than_its_bound():
    x = cv.ones(10**8 + 5)
    s = x.sum()
    from corvid.engine.schedule import create_schedule

    k = create_schedule([s.node], "CPU")[0].compiled.kernel
    runs = _reduce_runs(k)
    assert max(runs) <= max(BLOCK, TOP) and len(runs) > 3


def test_a_matmul_tile_keeps_its_dot_products_and_short_sums_are_untouched():
    a, b = cv.Tensor(np.ones((64, 4096), np.float32)), cv.Tensor(np.ones((4096, 64), np.float32))
    k = lower("mm", (a @ b).node, [a.node, b.node], device="CPU")
    assert any(o.op == "upcast" for o in k.opts)  # (the register tile)
    assert max(_reduce_runs(k)) == 4096
    short = lower("s", cv.ones(2 * BLOCK - 1).sum().node, [], device="CPU")
    assert cascade_sums(short) is short


def test_hypot_rounds_once():
    """float32 and narrower compute in float64 and round once (5, 12 gave 12.999999 with
    ``big * sqrt(1 + ratio**2)``); float64 scales by a power of two and stays within 1 ulp,
    over 60 decades, without overflow or underflow."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal(20000) * np.exp(rng.uniform(-30, 30, 20000))
    b = rng.standard_normal(20000) * np.exp(rng.uniform(-30, 30, 20000))
    for d in (np.float32, np.float64):
        x, y = a.astype(d), b.astype(d)
        got = cv.hypot(cv.asarray(x), cv.asarray(y)).numpy()
        ref = np.hypot(x.astype(np.float64), y.astype(np.float64)).astype(d)
        ulps = np.abs(got.astype(np.float64) - ref) / np.spacing(ref).astype(np.float64)
        assert ulps.max() <= (0 if d is np.float32 else 1), d
    assert cv.hypot(cv.asarray([5.0]), cv.asarray([12.0])).item() == 13.0
    big = np.array([1e308, 3e-310, 1e-320, 0.0])
    np.testing.assert_allclose(cv.hypot(cv.asarray(big), cv.asarray(big)).numpy(), np.hypot(big, big), rtol=1e-15)
    w = cv.Tensor([3.0, 0.0], requires_grad=True)
    cv.hypot(w, cv.Tensor([4.0, 0.0])).sum().backward()
    assert w.grad.tolist() == [0.6000000238418579, 0.0]  # x / hypot; 0 (not nan) at the origin

"""cumsum, cumprod, cummax, cummin, logcumsumexp against numpy (values, dtypes) and torch's index
rule for cummax/cummin (the last position of the running extreme). Both lowerings are checked:
the triangular reduce on small inputs and the log-step scan by forcing ``method`` or size.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import corvid as cv
from _data import sample
from corvid import dtype as cd
from corvid.ops import scan

DTYPES = [cd.bool_, cd.int8, cd.int32, cd.int64, cd.uint8, cd.uint32, cd.float16, cd.float32, cd.float64]
ids = lambda d: d.name  # noqa: E731


def data(d, shape, seed=0):
    return sample(d, shape, seed)


def tol(d):
    return {cd.float16: dict(rtol=1e-2, atol=1e-2), cd.float32: dict(rtol=1e-5, atol=1e-5)}.get(
        d, dict(rtol=1e-12, atol=1e-12))


@pytest.mark.parametrize("d", DTYPES, ids=ids)
def test_cumsum_cumprod_dtypes_like_numpy(d):
    x = data(d, (3, 5))
    for axis in (0, 1, -1, None):
        for name in ("cumsum", "cumprod"):
            got, want = getattr(cv, name)(cv.Tensor(x), axis=axis), getattr(np, name)(x, axis=axis)
            assert got.dtype.np == want.dtype, (name, got.dtype, want.dtype)
            np.testing.assert_allclose(got.numpy().astype(np.float64), want.astype(np.float64), **tol(d))


@pytest.mark.parametrize("d", DTYPES, ids=ids)
def test_cummax_cummin_values_and_indices(d):
    x = data(d, (2, 7), seed=1)
    for name, ufunc in (("cummax", np.maximum), ("cummin", np.minimum)):
        v, i = getattr(cv, name)(cv.Tensor(x), axis=1)
        np.testing.assert_array_equal(v.numpy(), ufunc.accumulate(x, axis=1))
        assert v.dtype is d and i.dtype is cd.int64
        # the index is the last j <= i holding the running extreme
        want = np.array([[max(j for j in range(k + 1) if r[j] == acc[k]) for k in range(len(r))]
                         for r, acc in zip(x, ufunc.accumulate(x, axis=1))])
        np.testing.assert_array_equal(i.numpy(), want)


def test_nan_inf_and_torch_index_rule():
    x = cv.Tensor([1.0, 3.0, 2.0, 3.0, np.nan, 1.0, np.nan])
    v, i = cv.cummax(x)
    np.testing.assert_array_equal(v.numpy(), [1, 3, 3, 3, np.nan, np.nan, np.nan])
    assert i.tolist() == [0, 1, 1, 3, 4, 4, 6]  # torch.cummax gives the same
    assert cv.cummin(cv.Tensor([3.0, 1.0, 1.0, 2.0])).indices.tolist() == [0, 1, 2, 2]
    s = np.array([1.0, np.inf, -np.inf, 2.0], np.float32)
    np.testing.assert_array_equal(cv.cumsum(cv.Tensor(s)).numpy(), np.cumsum(s))
    np.testing.assert_array_equal(cv.cumprod(cv.Tensor([2.0, -0.0, np.nan])).numpy(), [2.0, -0.0, np.nan])


@pytest.mark.parametrize("method", ["triangular", "logstep"])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_both_lowerings(method, op):
    x = data(cd.float64, (3, 11), seed=2)
    got = scan._scan_last(cv.Tensor(x), op, method).numpy()
    ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    np.testing.assert_allclose(got, ufunc.accumulate(x, axis=-1), rtol=1e-12)


def test_long_float32_cumsum_accuracy():
    """Both lowerings stay within float32 rounding of the float64 sum: rows * n^2 above the
    threshold picks the log-step scan (pairwise error), below it the triangular one."""
    rng = np.random.default_rng(3)
    for shape in [(2, 1000), (1, 5000)]:
        x = rng.uniform(0, 1, size=shape).astype(np.float32)
        want = np.cumsum(x.astype(np.float64), -1)
        np.testing.assert_allclose(cv.cumsum(cv.Tensor(x), axis=-1).numpy(), want, rtol=2e-6 * np.log2(shape[1]))


def test_logcumsumexp():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((2, 9)) * 30).astype(np.float32)
    want = np.logaddexp.accumulate(x.astype(np.float64), axis=1)
    np.testing.assert_allclose(cv.logcumsumexp(cv.Tensor(x), axis=1).numpy(), want, rtol=1e-5, atol=1e-5)
    big = rng.standard_normal(5000).astype(np.float32) * 50  # log-step path
    np.testing.assert_allclose(cv.logcumsumexp(cv.Tensor(big)).numpy(),
                               np.logaddexp.accumulate(big.astype(np.float64)), rtol=1e-5, atol=1e-4)
    special = np.array([-np.inf, -np.inf, 0.0, np.inf, 1.0], np.float32)
    np.testing.assert_array_equal(cv.logcumsumexp(cv.Tensor(special)).numpy(), np.logaddexp.accumulate(special))
    assert cv.logcumsumexp(cv.Tensor([1, 2])).dtype is cd.float32


def test_degenerate_shapes_and_include_initial():
    assert cv.cumsum(cv.Tensor(3)).tolist() == [3]  # numpy: axis=None flattens a 0-d input
    assert cv.cumsum(cv.Tensor(3.0), axis=0).shape == ()
    assert cv.cumsum(cv.zeros(2, 0), axis=1).shape == (2, 0)
    assert cv.cummax(cv.zeros(0)).indices.shape == (0,)
    np.testing.assert_array_equal(cv.cumprod(cv.ones(3, 1), axis=1).numpy(), np.ones((3, 1)))
    x = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(cv.cumulative_sum(cv.Tensor(x), axis=1, include_initial=True).numpy(),
                                  np.cumulative_sum(x, axis=1, include_initial=True))
    np.testing.assert_array_equal(cv.cumulative_prod(cv.Tensor(x[0]), include_initial=True).numpy(),
                                  np.cumulative_prod(x[0], include_initial=True))


def test_errors():
    with pytest.raises(IndexError, match="axis 2"):
        cv.cumsum(cv.zeros(2, 3), axis=2)
    with pytest.raises(IndexError, match="axis -3"):
        cv.cummax(cv.zeros(2, 3), axis=-3)
    with pytest.raises(ValueError, match="axis is required"):
        cv.cumulative_sum(cv.zeros(2, 3))


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[idx] += eps
        lo[idx] -= eps
        g[idx] = (f(cv.Tensor(hi)).item() - f(cv.Tensor(lo)).item()) / (2 * eps)
    return g


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "logcumsumexp", "cummax"])
def test_grad_matches_finite_differences(name):
    x = np.random.default_rng(5).uniform(0.5, 2, size=(2, 4))  # float64, distinct values
    w = cv.Tensor(np.arange(8.0).reshape(2, 4))
    fn = getattr(cv, name)
    pick = (lambda y: y.values) if name == "cummax" else (lambda y: y)
    f = lambda t: (pick(fn(t, axis=1)) * w).sum()  # noqa: E731
    np.testing.assert_allclose(cv.grad(f)(cv.Tensor(x)).numpy(), _fd(f, x), rtol=1e-6, atol=1e-6)


def test_logstep_grad_and_jvp():
    x = np.random.default_rng(6).uniform(0.5, 2, size=(1, 9))
    w = cv.Tensor(np.arange(9.0).reshape(1, 9))
    f = lambda t: (scan._scan_last(t, "prod", "logstep") * w).sum()  # noqa: E731
    np.testing.assert_allclose(cv.grad(f)(cv.Tensor(x)).numpy(), _fd(f, x), rtol=1e-6)
    _, dy = cv.jvp(lambda t: scan._scan_last(t, "sum", "logstep"), (cv.Tensor(x),), (cv.ones(1, 9, dtype="float64"),))
    np.testing.assert_allclose(dy.numpy(), np.arange(1.0, 10.0).reshape(1, 9))


def test_vmap_matches_loop():
    x = data(cd.float32, (3, 5), seed=7)
    got = cv.vmap(lambda r: cv.cumsum(r) + cv.cummin(r).values)(cv.Tensor(x))
    want = np.stack([np.cumsum(r) + np.minimum.accumulate(r) for r in x])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.integers(0, 2),
       st.sampled_from([np.float64, np.int32, np.bool_]), st.integers(0, 2**31 - 1))
def test_fuzz_cumsum(shape, axis_pick, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, size=shape).astype(dtype)
    axis = axis_pick % len(shape) - len(shape) * (axis_pick % 2)  # positive and negative axes
    got, want = cv.cumsum(cv.Tensor(x), axis=axis), np.cumsum(x, axis=axis)
    assert got.dtype.np == want.dtype
    np.testing.assert_array_equal(got.numpy(), want)

"""sort, argsort, topk, searchsorted and the unique functions against numpy (and torch's order for
descending sorts: nan first, ties in input order).

Both lowerings (rank by counting, bitonic network) are checked; the bitonic one on small sizes
by forcing ``method``. Reference orders use ``np.argsort(kind="stable")``, so stability is
asserted, not assumed.
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import corvid as cv
from _data import sample
from corvid import dtype as cd
from corvid.ops import sorting

DTYPES = [cd.bool_, cd.int8, cd.int32, cd.int64, cd.uint8, cd.uint64, cd.float16, cd.bfloat16, cd.float32,
          cd.float64]
ids = lambda d: d.name  # noqa: E731


def data(d, shape, seed=0):
    """Many duplicates: ints in [-3, 4), floats on a half-integer grid."""
    if d.is_float:
        return (np.random.default_rng(seed).integers(-3, 4, size=shape).astype(np.float64) / 2).astype(d.np)
    return sample(d, shape, seed)


def ref_argsort(x, axis=-1, descending=False):
    """numpy's stable order; descending keeps ties in input order and puts nan first (torch)."""
    f = np.asarray(x, dtype=np.float64)
    if not descending:
        return np.argsort(f, axis=axis, kind="stable")
    nan = np.isnan(f)
    first = np.argsort(-np.where(nan, 0, f), axis=axis, kind="stable")  # by value, then nans to the front
    then = np.argsort(~np.take_along_axis(nan, first, axis), axis=axis, kind="stable")
    return np.take_along_axis(first, then, axis)


@pytest.mark.parametrize("d", DTYPES, ids=ids)
def test_sort_argsort_every_dtype(d):
    x = data(d, (3, 9))
    for desc in (False, True):
        order = ref_argsort(x, -1, desc)
        np.testing.assert_array_equal(cv.argsort(cv.Tensor(x), descending=desc).numpy(), order)
        out = cv.sort(cv.Tensor(x), descending=desc)
        assert out.dtype is d
        np.testing.assert_array_equal(out.numpy(), np.take_along_axis(x, order, -1))


@pytest.mark.parametrize("method", ["counting", "bitonic"])
def test_nan_inf_signed_zero_and_stability(method):
    x = np.array([[1.0, np.nan, -0.0, 0.0, -np.inf, np.inf, np.nan, 1.0, -0.0, 2.0, -1.0]], np.float32)
    for desc in (False, True):
        v, i = sorting._sort(cv.Tensor(x), -1, desc, method=method)
        order = ref_argsort(x, -1, desc)
        np.testing.assert_array_equal(i.numpy(), order)
        got, want = v.numpy(), np.take_along_axis(x, order, -1)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # -0.0 survives the select


@pytest.mark.parametrize("method", ["counting", "bitonic"])
@pytest.mark.parametrize("d", [cd.int32, cd.bool_, cd.float64], ids=ids)
def test_both_lowerings_agree_with_numpy(method, d):
    x = data(d, (2, 13), seed=3)  # 13 pads to 16 in the bitonic network
    for desc in (False, True):
        v, i = sorting._sort(cv.Tensor(x), -1, desc, method=method)
        order = ref_argsort(x, -1, desc)
        np.testing.assert_array_equal(i.numpy(), order)
        np.testing.assert_array_equal(v.numpy(), np.take_along_axis(x, order, -1))


def test_axes_none_and_negative():
    x = data(cd.float32, (3, 4, 5), seed=1)
    t = cv.Tensor(x)
    for axis in (0, 1, -1, -3):
        np.testing.assert_array_equal(cv.argsort(t, axis=axis).numpy(), np.argsort(x, axis, kind="stable"))
        np.testing.assert_array_equal(t.sort(axis).values.numpy(), np.sort(x, axis))  # (PyTorch's (values, indices))
    np.testing.assert_array_equal(cv.sort(t, axis=None).numpy(), np.sort(x, None))
    np.testing.assert_array_equal(cv.argsort(t, axis=None).numpy(), np.argsort(x, None, kind="stable"))


def test_degenerate_shapes():
    assert cv.sort(cv.Tensor(2.5)).item() == 2.5 and cv.argsort(cv.Tensor(2.5)).item() == 0
    e = cv.sort(cv.zeros(3, 0))
    assert e.shape == (3, 0) and cv.argsort(cv.zeros(0, 4), axis=0).shape == (0, 4)
    np.testing.assert_array_equal(cv.argsort(cv.ones(4, 1)).numpy(), np.zeros((4, 1), np.int64))
    np.testing.assert_array_equal(cv.sort(cv.Tensor([[3.0], [1.0]]), axis=0).numpy(), [[1.0], [3.0]])


def test_bad_axis():
    with pytest.raises(IndexError, match="axis 2"):
        cv.sort(cv.zeros(2, 3), axis=2)
    with pytest.raises(IndexError, match="axis -3"):
        cv.topk(cv.zeros(2, 3), 1, axis=-3)


def test_topk():
    x = np.array([[1.0, np.nan, 3.0, 1.0, 3.0, -2.0], [0.0, 5.0, 5.0, 4.0, -1.0, 2.0]], np.float32)
    t = cv.Tensor(x)
    for k in (0, 1, 3, 6):
        v, i = cv.topk(t, k)
        order = ref_argsort(x, -1, True)[:, :k]
        np.testing.assert_array_equal(i.numpy(), order)
        np.testing.assert_array_equal(v.numpy(), np.take_along_axis(x, order, -1))
        v, i = t.topk(k, largest=False)
        order = ref_argsort(x, -1)[:, :k]
        np.testing.assert_array_equal(i.numpy(), order)
        np.testing.assert_array_equal(v.numpy(), np.take_along_axis(x, order, -1))
    v, i = cv.topk(t, 1, axis=0)
    np.testing.assert_array_equal(i.numpy(), [[0, 0, 1, 1, 0, 1]])  # nan is the largest
    with pytest.raises(ValueError, match="k=7"):
        cv.topk(t, 7)
    with pytest.raises(ValueError, match="k=-1"):
        cv.topk(t, -1)


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted(side):
    seq = np.array([-1.0, 0.0, 0.0, 2.0, np.inf, np.nan], np.float32)
    vals = np.array([[0.0, -0.0, 3.0, np.nan], [-5.0, 2.0, np.inf, -np.inf]], np.float32)
    got = cv.searchsorted(cv.Tensor(seq), cv.Tensor(vals), side=side)
    assert got.dtype is cd.int64
    np.testing.assert_array_equal(got.numpy(), np.searchsorted(seq, vals, side=side))
    ints = np.array([1, 3, 3, 7], np.int32)
    np.testing.assert_array_equal(cv.searchsorted(cv.Tensor(ints), 3, side=side).numpy(),
                                  np.searchsorted(ints, 3, side=side))
    perm = np.array([2, 0, 3, 1])
    shuffled = ints[np.argsort(perm)]
    assert np.array_equal(shuffled[perm], ints)
    np.testing.assert_array_equal(
        cv.searchsorted(cv.Tensor(shuffled), cv.Tensor([0, 3, 8]), side=side, sorter=cv.Tensor(perm)).numpy(),
        np.searchsorted(shuffled, [0, 3, 8], side=side, sorter=perm))
    # batched sequences (torch): one sorted row per row of values
    rows = np.sort(data(cd.float32, (3, 5), seed=2), -1)
    v = data(cd.float32, (3, 4), seed=4)
    want = np.stack([np.searchsorted(r, q, side=side) for r, q in zip(rows, v)])
    np.testing.assert_array_equal(cv.searchsorted(cv.Tensor(rows), cv.Tensor(v), side=side).numpy(), want)
    assert cv.searchsorted(cv.zeros(0), cv.Tensor([1.0, 2.0]), side=side).tolist() == [0, 0]


def test_searchsorted_errors():
    with pytest.raises(ValueError, match="side"):
        cv.searchsorted(cv.zeros(3), cv.zeros(2), side="middle")
    with pytest.raises(ValueError, match="sorter"):
        cv.searchsorted(cv.zeros(3), cv.zeros(2), sorter=cv.Tensor([0, 1]))
    with pytest.raises(ValueError, match="leading axes"):
        cv.searchsorted(cv.zeros(2, 3), cv.zeros(3, 4))


@pytest.mark.parametrize("d", [cd.bool_, cd.int32, cd.uint8, cd.float32], ids=ids)
def test_unique_all_every_dtype(d):
    x = data(d, (3, 4), seed=5)
    got, want = cv.unique_all(cv.Tensor(x)), np.unique_all(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)
    assert got.values.dtype is d and got.counts.dtype is cd.int64 and got.inverse_indices.shape == x.shape


def test_unique_nan_and_signed_zero():
    x = np.array([2.0, np.nan, -0.0, 0.0, np.nan, 2.0, -1.0], np.float32)
    for name in ("unique_values", "unique_counts", "unique_inverse", "unique_all"):
        got, want = getattr(cv, name)(cv.Tensor(x)), getattr(np, name)(x)
        for g, w in zip(got if name != "unique_values" else [got], want if name != "unique_values" else [want]):
            np.testing.assert_array_equal(g.numpy(), w)
    assert np.signbit(cv.unique_values(cv.Tensor(x)).numpy()[1])  # the first occurrence, -0.0, is kept


def test_unique_degenerate():
    out = cv.unique_all(cv.zeros(0, 3))
    assert out.values.shape == (0,) and out.counts.shape == (0,) and out.inverse_indices.shape == (0, 3)
    one = cv.unique_counts(cv.Tensor(4.0))
    assert one.values.tolist() == [4.0] and one.counts.tolist() == [1]


def test_sort_grad_is_the_permutation():
    x = np.array([[0.3, -1.2, 0.3, 2.0, -0.5]], np.float32)
    w = np.arange(1.0, 6.0, dtype=np.float32)
    for method in ("counting", "bitonic"):
        g = cv.grad(lambda t: (sorting._sort(t, -1, False, method=method).values * cv.Tensor(w)).sum())(cv.Tensor(x))
        want = np.zeros_like(x)
        want[0, np.argsort(x[0], kind="stable")] = w
        np.testing.assert_allclose(g.numpy(), want)
    g = cv.grad(lambda t: cv.topk(t, 2).values.sum())(cv.Tensor(x))
    np.testing.assert_allclose(g.numpy(), [[1, 0, 0, 1, 0]])


def test_sort_vmap_matches_loop():
    x = data(cd.float32, (4, 6), seed=7)
    got = cv.vmap(lambda r: cv.sort(r, descending=True))(cv.Tensor(x))
    np.testing.assert_array_equal(got.numpy(), np.stack([cv.sort(cv.Tensor(r), descending=True).numpy() for r in x]))
    idx = cv.vmap(lambda r: cv.searchsorted(cv.Tensor([-1.0, 0.0, 1.0]), r))(cv.Tensor(x))
    np.testing.assert_array_equal(idx.numpy(), np.searchsorted([-1.0, 0.0, 1.0], x))


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.integers(0, 2), st.booleans(),
       st.sampled_from([np.float32, np.int32]), st.integers(0, 2**31 - 1))
def test_fuzz_sort_argsort(shape, axis_pick, desc, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, size=shape).astype(dtype)
    if dtype == np.float32:
        x[rng.random(shape) < 0.2] = np.nan
    axis = -1 - (axis_pick % len(shape))
    order = ref_argsort(x, axis, desc)
    np.testing.assert_array_equal(cv.argsort(cv.Tensor(x), axis=axis, descending=desc).numpy(), order)
    np.testing.assert_array_equal(cv.sort(cv.Tensor(x), axis=axis, descending=desc).numpy(),
                                  np.take_along_axis(x, order, axis))


def test_bfloat16_values_roundtrip():
    x = np.array([1.5, -2.0, 0.25, np.nan], ml_dtypes.bfloat16)
    np.testing.assert_array_equal(cv.sort(cv.Tensor(x)).numpy().astype(np.float32),
                                  np.sort(x.astype(np.float32)))


def test_the_gradient_reaches_infinite_elements():
    """The gradient of a sort or topk is the cotangent permuted back, at ±inf too (the sort's
    own one-hot selection gave 0 * inf = nan there): the values are read at the indices when
    they are differentiated."""
    x = cv.Tensor([3.0, np.inf, 1.0, -np.inf, np.nan])
    w = cv.Tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    g = cv.grad(lambda t: (cv.sort(t) * w).sum())(x).numpy()
    np.testing.assert_array_equal(g, [3.0, 4.0, 2.0, 1.0, 5.0])  # (ascending: -inf, 1, 3, inf, nan)
    g = cv.grad(lambda t: (cv.sort(t, descending=True) * w).sum())(x).numpy()
    np.testing.assert_array_equal(g, [3.0, 2.0, 4.0, 5.0, 1.0])  # (descending: nan, inf, 3, 1, -inf)
    g = cv.grad(lambda t: cv.topk(t, 2).values.sum())(x).numpy()
    np.testing.assert_array_equal(g, [0.0, 1.0, 0.0, 0.0, 1.0])  # (nan counts as the largest)
    assert cv.sort(x).tolist()[:4] == [-np.inf, 1.0, 3.0, np.inf]


@pytest.mark.parametrize("n", [2, 3, 4, 7, 16, 33, 100])
def test_sorting_a_computed_input_ranks_each_element_once(n):
    """A fused input (x.exp().sin()) was evaluated once per compared position, by the vectorized
    and the scalar libm in turn, whose last bits can differ: ranks collided and sort of
    exp([0.5, -1, 2, 0]) gave [0.37, 1.0, 1.65, 1.0]. The input is stored first."""
    rng = np.random.default_rng(n)
    a = rng.standard_normal((3, n)).astype(np.float32)
    lazy = lambda: cv.Tensor(a).exp().sin()  # noqa: E731
    values = lazy().numpy()  # the same computation, stored: what the sort must order
    np.testing.assert_array_equal(cv.sort(lazy(), axis=1).numpy(), np.sort(values, axis=1))
    np.testing.assert_array_equal(cv.sort(lazy(), axis=1, descending=True).numpy(), -np.sort(-values, axis=1))
    np.testing.assert_array_equal(cv.argsort(lazy(), axis=1).numpy(), np.argsort(values, axis=1, kind="stable"))
    top = cv.topk(lazy(), min(3, n))
    np.testing.assert_array_equal(top[0].numpy(), -np.sort(-values, axis=1)[:, :min(3, n)])
    e = cv.Tensor([0.5, -1.0, 2.0, 0.0]).exp()
    assert cv.sort(e).tolist() == sorted(e.tolist())


@pytest.mark.parametrize("method", ["counting", "bitonic"])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_values_sort_in_numpys_order(method, dtype):
    """numpy's order for complex values: real parts, then imaginary ones, those with a nan part
    last (R + nan j, nan + R j, nan + nan j); stable; -0 and nan parts kept exactly."""
    from corvid.ops.sorting import _sort

    nan = np.nan
    a = np.array([2 + 1j, 1 + 5j, 1 - 2j, complex(nan, 0), 2 + 1j, 0j, complex(1, nan), complex(nan, nan),
                  complex(-0.0, -0.0), complex(0, nan), -3 + 0j, 1 + 5j], dtype)
    got = _sort(cv.Tensor(a), -1, False, method=method)
    want = np.sort(a, kind="stable")
    assert got.values.numpy().view(np.uint8).tobytes() == want.view(np.uint8).tobytes()
    np.testing.assert_array_equal(got.indices.numpy(), np.argsort(a, kind="stable"))
    down = _sort(cv.Tensor(a), -1, True, method=method).values.numpy()
    np.testing.assert_array_equal(np.sort(down), want)  # (the same values; ties keep their input order)
    assert [str(v) for v in down[:4]] == ["(nan+nanj)", "(nan+0j)", "(1+nanj)", "nanj"]
    u = cv.unique_counts(cv.Tensor(a))
    ref_values, ref_counts = np.unique(a, return_counts=True, equal_nan=False)
    assert [str(v) for v in u.values.numpy()] == [str(v) for v in ref_values]
    np.testing.assert_array_equal(u.counts.numpy(), ref_counts)

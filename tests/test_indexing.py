"""Integer-array and boolean-mask indexing, setitem, take/gather/scatter families, nonzero:
compared with numpy (and with hand loops for the torch-semantics functions)."""

import itertools

import numpy as np
import ml_dtypes
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import corvid as cv
from corvid.graph.node import Op

FUZZ = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


# --- getitem / setitem against numpy -----------------------------------------------------------------------
@st.composite
def indexed(draw, for_setitem=False):
    """(array, index tuple): any mix of ints, slices, None, ..., int arrays (lists, numpy, Tensors)
    and boolean masks that numpy accepts."""
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    x = rng.uniform(-5, 5, size=shape).astype(np.float32)
    bshape = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))  # the arrays' common broadcast shape
    items, axis, has_array, has_ellipsis = [], 0, False, False
    axes = {}  # item position -> the size of the axis an int or a slice consumes
    while axis < ndim:
        kind = draw(st.sampled_from(["int", "slice", "none", "array", "array", "mask", "ellipsis"]))
        n = shape[axis]
        if kind in ("int", "slice"):
            axes[len(items)] = n
        if kind == "int" and n:
            items.append(draw(st.integers(-n, n - 1)))
            axis += 1
        elif kind == "slice":
            items.append(slice(draw(st.none() | st.integers(-5, 5)), draw(st.none() | st.integers(-5, 5)),
                               draw(st.sampled_from([None, 1, 2, -1, -3]))))
            axis += 1
        elif kind == "none" and len(items) < 5:
            items.append(None)
        elif kind == "ellipsis" and not has_ellipsis:
            items.append(Ellipsis)
            has_ellipsis = True
            axis = ndim - draw(st.integers(0, ndim - axis))
        elif kind == "array" and (n or not int(np.prod(bshape))):
            own = tuple(1 if draw(st.booleans()) else s for s in bshape[len(bshape) - draw(st.integers(0, len(bshape))):])
            idx = rng.integers(-n, n, size=own) if n else np.zeros(bshape, np.int64)
            form = draw(st.sampled_from(["numpy", "list", "tensor"]))
            items.append(("arr", idx, form))
            has_array = True
            axis += 1
        elif kind == "mask" and not has_array:
            k = draw(st.integers(0, min(2, ndim - axis)))
            p = draw(st.sampled_from([0.0, 0.5, 1.0]))
            mask = rng.uniform(size=shape[axis:axis + k]) < p
            items.append(("mask", mask, draw(st.sampled_from(["numpy", "tensor"]))))
            has_array = True
            axis += k
    if not has_array:  # turn the first int or slice into an array over the same axis
        basic = [i for i, it in enumerate(items) if isinstance(it, (int, slice))]
        at, n = (basic[0], axes[basic[0]]) if basic else (0, shape[0] if ndim else 0)
        arr = ("arr", rng.integers(-n, n, size=bshape) if n else np.zeros((0,), np.int64), "tensor")
        items = items[:at] + [arr] + items[at + 1:] if basic else [arr]
        if ndim == 0:
            items = [("mask", np.array(draw(st.booleans())), "numpy")]
    return x, items


def _np_index(items):
    return tuple(it[1] if isinstance(it, tuple) else it for it in items)


def _cv_index(items):
    out = []
    for it in items:
        if isinstance(it, tuple):
            _, a, form = it
            out.append(cv.Tensor(a) if form == "tensor" else a.tolist() if form == "list" and a.ndim else a)
        else:
            out.append(it)
    return tuple(out)


@FUZZ
@given(indexed())
def test_getitem_matches_numpy(case):
    x, items = case
    want = x[_np_index(items)]
    got = cv.Tensor(x)[_cv_index(items)].numpy()
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@FUZZ
@given(indexed(), st.booleans())
def test_setitem_matches_numpy(case, scalar):
    x, items = case
    want = x.copy()
    target_shape = want[_np_index(items)].shape
    value = np.float32(7.5) if scalar else np.arange(int(np.prod(target_shape)), dtype=np.float32).reshape(target_shape)
    # duplicates: numpy keeps the last write in practice, and so do we (see the module docstring)
    want[_np_index(items)] = value
    t = cv.Tensor(x)
    t[_cv_index(items)] = value if scalar else cv.Tensor(value)
    np.testing.assert_array_equal(t.numpy(), want)


def test_getitem_forms():
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = cv.Tensor(x)
    cases = [
        ([0, 2],), (slice(None), [3, -1]), ([2, 0], slice(None), [4, -5]), (0, slice(None), [1, 2]),
        ([1], slice(1, 3), [[0], [4]]), (Ellipsis, [0, 0, 3]), (None, [1], None), ([[0], [1]], [[0, 1, 2]]),
        (x > 40,), (x[:, :, 0] > 20,), (slice(None), x[0] < 0), (True,), (False,), (np.array(1),), ([],),
        ([0, 1], None, [1, 2]), (1, [0, 3], 2),
    ]
    for idx in cases:
        np.testing.assert_array_equal(t[idx].numpy(), x[idx], err_msg=str(idx))
    s = cv.Tensor(3.0)
    assert t[cv.Tensor([[2, -1]]), 1].shape == (1, 2, 5)
    assert s[True].tolist() == [3.0] and s[False].shape == (0,) and s[None, True].shape == (1, 1)
    assert t[np.zeros((3, 4, 5), bool)].shape == (0,)
    np.testing.assert_array_equal(t[cv.Tensor(x > 55)].numpy(), x[x > 55])


def test_setitem_forms_and_duplicates():
    x = cv.zeros(5)
    x[[1, 3]] = cv.Tensor([7.0, 8.0])
    x[x > 7.5] = -1.0
    assert x.tolist() == [0.0, 7.0, 0.0, -1.0, 0.0]
    x[[0, 0, 0]] = cv.Tensor([1.0, 2.0, 3.0])  # the last duplicate wins
    assert x[0].item() == 3.0
    y = cv.zeros((2, 3), dtype=cv.int32)
    y[:, 1] = 2.9  # cast to the tensor's dtype
    y[1] = cv.Tensor([4, 5, 6])
    y[0, ::-2] = 9
    assert y.tolist() == [[9, 2, 9], [4, 5, 6]]
    with pytest.raises(ValueError, match="broadcast"):
        y[:, 0] = cv.Tensor([1, 2, 3])
    z = cv.arange(6).reshape(2, 3)
    z[cv.Tensor([[True, False, True], [False, False, True]])] = cv.Tensor([7, 8, 9])
    assert z.tolist() == [[7, 1, 8], [3, 4, 9]]


def test_errors():
    x = cv.ones((3, 4))
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 0 with size 3"):
        x[[0, 5]]
    with pytest.raises(IndexError, match="index -5 is out of bounds for axis 1 with size 4"):
        x[:, cv.Tensor([1, -5])]
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 1 with size 4"):
        x[cv.Tensor([0]), 4]
    with pytest.raises(IndexError, match="out of bounds"):
        x[[7]] = 1.0
    with pytest.raises(TypeError, match="integer or boolean"):
        x[[0.5]]
    with pytest.raises(TypeError, match="integer or boolean"):
        x[cv.Tensor([1.0])]
    with pytest.raises(IndexError, match="boolean index"):
        x[np.ones(4, bool)]
    with pytest.raises(IndexError, match="shape mismatch"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="too many"):
        x[[0], [0], [0]]
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 4"):
        cv.take(x, [4], axis=1)
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        cv.gather(x, 0, cv.Tensor([[3]]))
    with pytest.raises(IndexError):
        cv.scatter(x, 1, cv.Tensor([[9]]), 1.0)
    with pytest.raises(TypeError, match="integer"):
        cv.take(x, cv.Tensor([0.0]))
    with pytest.raises(ValueError, match="reduce must be one of"):
        cv.scatter_reduce(x, 0, cv.Tensor([[0]]), x, "max")
    with pytest.raises(ValueError, match="does not fit"):
        cv.gather(x, 0, cv.zeros((1, 5), dtype=cv.int64))
    with pytest.raises(ValueError, match="0-d"):
        cv.nonzero(cv.Tensor(1.0))


# --- take, take_along_axis, put_along_axis, index_select, nonzero ----------------------------------------
def test_take_family_matches_numpy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 4, 5)).astype(np.float32)
    t = cv.Tensor(x)
    idx = rng.integers(-4, 4, size=(2, 3))
    np.testing.assert_array_equal(cv.take(t, idx, axis=1).numpy(), np.take(x, idx, axis=1))
    np.testing.assert_array_equal(cv.take(t, cv.Tensor([59, -60, 0])).numpy(), np.take(x, [59, -60, 0]))
    np.testing.assert_array_equal(t.index_select(2, cv.Tensor([4, 4, 0])).numpy(), x[:, :, [4, 4, 0]])
    along = rng.integers(-5, 5, size=(3, 1, 7))
    np.testing.assert_array_equal(cv.take_along_axis(t, along, axis=2).numpy(), np.take_along_axis(x, along, axis=2))
    order = np.argsort(x, axis=0)
    np.testing.assert_array_equal(t.take_along_axis(cv.Tensor(order), 0).numpy(), np.sort(x, axis=0))
    put = x.copy()
    pidx = rng.permutation(5)[:2].reshape(1, 1, 2)
    np.put_along_axis(put, pidx, np.float32(9.0), axis=2)
    np.testing.assert_array_equal(cv.put_along_axis(t, pidx, 9.0, axis=2).numpy(), put)
    assert cv.take(t, [], axis=0).shape == (0, 4, 5)
    assert cv.take(cv.zeros((0, 2)), np.zeros((0,), np.int64), axis=0).shape == (0, 2)


def test_nonzero_and_one_argument_where():
    x = np.array([[0, 3, 0], [4, 0, 5]])
    for got, want in zip(cv.nonzero(cv.Tensor(x)), np.nonzero(x)):
        assert got.dtype == cv.int64 and got.tolist() == want.tolist()
    assert [a.tolist() for a in cv.where(cv.Tensor(x) > 3)] == [[1, 1], [0, 2]]
    assert cv.where(cv.Tensor([True, False]), 1.0, 2.0).tolist() == [1.0, 2.0]
    assert [a.shape for a in cv.Tensor(x).nonzero(as_tuple=True)] == [(3,), (3,)]
    assert cv.Tensor(x).nonzero().tolist() == np.argwhere(x).tolist()  # (PyTorch's (n, ndim) form)
    assert [a.shape for a in cv.nonzero(cv.zeros((2, 2)))] == [(0,), (0,)]
    with pytest.raises(TypeError, match="one argument"):
        cv.where(cv.Tensor([True]), 1.0)


# --- torch semantics: gather, scatter, scatter_reduce --------------------------------------------------
def _np_gather(x, axis, idx):
    out = np.empty(idx.shape, x.dtype)
    for pos in itertools.product(*map(range, idx.shape)):
        src = list(pos)
        src[axis] = idx[pos]
        out[pos] = x[tuple(src)]
    return out


def _np_scatter(x, axis, idx, src, reduce, include_self=True):
    out = x.copy()
    hits = {}
    for pos in itertools.product(*map(range, idx.shape)):
        dst = list(pos)
        dst[axis] = idx[pos]
        hits.setdefault(tuple(dst), []).append(src[pos])
    for dst, vals in hits.items():
        pool = ([x[dst]] if include_self and reduce != "set" else []) + vals
        if reduce == "set":
            out[dst] = vals[-1]
        elif reduce == "sum":
            out[dst] = np.sum(pool)
        elif reduce == "prod":
            out[dst] = np.prod(pool)
        elif reduce == "amax":
            out[dst] = np.max(pool)
        elif reduce == "amin":
            out[dst] = np.min(pool)
        else:
            out[dst] = np.sum(pool) / len(pool) if x.dtype.kind in "fc" else np.sum(pool) // len(pool)
    return out


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_matches_loop(axis):
    rng = np.random.default_rng(axis)
    x = rng.normal(size=(4, 5)).astype(np.float32)
    idx = rng.integers(0, x.shape[axis], size=(3, 4) if axis == 0 else (4, 7))
    idx = idx[:, :3] if axis == 0 else idx  # index smaller than x outside the axis
    np.testing.assert_array_equal(cv.gather(cv.Tensor(x), axis, cv.Tensor(idx)).numpy(), _np_gather(x, axis, idx))
    assert cv.Tensor(x).gather(axis, cv.Tensor(idx)).shape == idx.shape


_REDUCES = [(r, s) for r in ["set", "sum", "prod", "amax", "amin", "mean"] for s in (True, False)
            if r != "set" or s]  # plain scatter has no include_self


@pytest.mark.parametrize("reduce,include_self", _REDUCES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_scatter_reduce_matches_loop(reduce, include_self, dtype):
    rng = np.random.default_rng(1)
    x = rng.integers(-4, 5, size=(3, 5)).astype(dtype)
    idx = rng.integers(0, 5, size=(2, 4))  # duplicates along axis 1, smaller than x, larger than src? no
    src = rng.integers(-4, 5, size=(3, 6)).astype(dtype)
    want = _np_scatter(x, 1, idx, src, reduce, include_self)
    tx, ti, ts = cv.Tensor(x), cv.Tensor(idx), cv.Tensor(src)
    got = cv.scatter(tx, 1, ti, ts) if reduce == "set" else tx.scatter_reduce(1, ti, ts, reduce, include_self)
    assert got.dtype == tx.dtype
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_scatter_scalar_and_axis0():
    x = np.zeros((3, 2), np.float32)
    idx = np.array([[2, 0], [2, 1]])
    src = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    np.testing.assert_array_equal(cv.scatter(cv.Tensor(x), 0, cv.Tensor(idx), cv.Tensor(src)).numpy(),
                                  _np_scatter(x, 0, idx, src, "set"))
    assert cv.scatter(cv.zeros((2, 3)), 1, cv.Tensor([[2], [0]]), 5.0).tolist() == [[0, 0, 5], [5, 0, 0]]
    assert cv.scatter_reduce(cv.ones(3), 0, cv.Tensor([0, 0]), cv.Tensor([np.nan, 1.0]), "amax").isnan().tolist() == \
        [True, False, False]


# --- transforms ------------------------------------------------------------------------------------------
def test_grads():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 3)).astype(np.float32)
    w = rng.normal(size=(5, 3)).astype(np.float32)
    rows = np.array([0, 2, 2, -1, 0])
    g = cv.grad(lambda t: (t[rows] * cv.Tensor(w)).sum())(cv.Tensor(x)).numpy()
    want = np.zeros_like(x)
    np.add.at(want, rows, w)
    np.testing.assert_allclose(g, want, rtol=1e-6)
    g = cv.grad(lambda t: (cv.take(t, cv.Tensor(rows), axis=0) * cv.Tensor(w)).sum())(cv.Tensor(x)).numpy()
    np.testing.assert_allclose(g, want, rtol=1e-6)
    idx = np.array([[1, 1, 0], [3, 0, 0]])
    g = cv.grad(lambda t: (cv.gather(t, 0, cv.Tensor(idx)) ** 2).sum())(cv.Tensor(x)).numpy()
    want = np.zeros_like(x)
    np.add.at(want, (idx, np.arange(3)[None, :].repeat(2, 0)), 2 * _np_gather(x, 0, idx))
    np.testing.assert_allclose(g, want, rtol=1e-6)


def test_grads_of_writes():
    x = cv.Tensor([1.0, 2.0, 3.0, 4.0])
    src = cv.Tensor([10.0, 20.0, 30.0])
    idx = cv.Tensor([3, 0, 3])
    coef = cv.Tensor([1.0, 2.0, 3.0, 4.0])
    gx, gs = cv.grad(lambda a, b: (cv.scatter(a, 0, idx, b) * coef).sum(), argnums=(0, 1))(x, src)
    assert gx.tolist() == [0.0, 2.0, 3.0, 0.0] and gs.tolist() == [0.0, 1.0, 4.0]  # the last duplicate wins
    gx, gs = cv.grad(lambda a, b: (cv.scatter_reduce(a, 0, idx, b, "sum") * coef).sum(), argnums=(0, 1))(x, src)
    assert gx.tolist() == [1.0, 2.0, 3.0, 4.0] and gs.tolist() == [4.0, 1.0, 4.0]
    gs = cv.grad(lambda b: cv.scatter_reduce(x, 0, idx, b, "amax").sum())(src)
    assert gs.tolist() == [0.0, 1.0, 1.0]

    def f(a, b):
        y = a * 1.0
        y[[0, 2]] = b
        y[y > 25.0] = 0.0
        return (y * coef).sum()

    gx, gs = cv.grad(f, argnums=(0, 1))(x, cv.Tensor([5.0, 30.0]))
    assert gx.tolist() == [0.0, 2.0, 0.0, 4.0] and gs.tolist() == [1.0, 0.0]


def test_grad_matches_finite_differences():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 4))
    idx = np.array([[0, 2], [1, 1], [3, 0]])

    def f(t):
        y = t.take_along_axis(cv.Tensor(idx), 1).exp().sum()
        return y + cv.scatter_reduce(t, 1, cv.Tensor(idx), t * t, "prod", include_self=False).sum()

    g = cv.grad(f)(cv.Tensor(x)).numpy()
    eps, num = 1e-6, np.zeros_like(x)
    for pos in itertools.product(range(3), range(4)):
        d = np.zeros_like(x)
        d[pos] = eps
        num[pos] = (f(cv.Tensor(x + d)).item() - f(cv.Tensor(x - d)).item()) / (2 * eps)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6)


def test_vmap_matches_loop():
    rng = np.random.default_rng(4)
    xs = rng.normal(size=(4, 5, 2)).astype(np.float32)
    ii = np.array([0, 4, -1, 2])
    got = cv.vmap(lambda x, i: x[i])(cv.Tensor(xs), cv.Tensor(ii)).numpy()
    np.testing.assert_array_equal(got, np.stack([xs[k][ii[k]] for k in range(4)]))
    jj = rng.integers(0, 5, size=(4, 3))
    got = cv.vmap(lambda x, j: x[j, 1])(cv.Tensor(xs), cv.Tensor(jj)).numpy()
    np.testing.assert_array_equal(got, np.stack([xs[k][jj[k], 1] for k in range(4)]))
    got = cv.vmap(lambda j: cv.Tensor(xs[0])[j], in_axes=0)(cv.Tensor(jj)).numpy()
    np.testing.assert_array_equal(got, np.stack([xs[0][jj[k]] for k in range(4)]))

    def write(x, i):
        y = x * 1.0
        y[i] = cv.Tensor([7.0, 8.0])
        return y

    got = cv.vmap(write)(cv.Tensor(xs), cv.Tensor(ii)).numpy()
    want = xs.copy()
    want[np.arange(4), ii] = [7.0, 8.0]
    np.testing.assert_array_equal(got, want)
    got = cv.vmap(lambda x: x[x > 0] if False else cv.where(x > 0, x, 0.0))(cv.Tensor(xs))
    with pytest.raises(RuntimeError, match="depends on the values"):
        cv.vmap(lambda x: x[x > 0])(cv.Tensor(xs))


def test_traced_indices_are_guarded_not_checked():
    x = cv.Tensor([1.0, 2.0, 3.0])
    # out-of-range traced indices read 0 and their writes are dropped: nothing leaves the buffer
    assert cv.vmap(lambda i: x[i])(cv.Tensor([2, 3, -4, -1])).tolist() == [3.0, 0.0, 0.0, 3.0]
    m = cv.ones((2, 3))
    got = cv.vmap(lambda i, j: m[i, j] * 1.0, in_axes=(0, 0))(cv.Tensor([1, 0, 2]), cv.Tensor([2, 3, 0]))
    assert got.tolist() == [1.0, 0.0, 0.0]  # (0, 3) must not alias (1, 0)

    @cv.jit
    def f(a, i):
        return a[i] * 2

    assert f(x, cv.Tensor([2, 0])).tolist() == [6.0, 2.0]
    assert f(x, cv.Tensor([5, 1])).tolist() == [0.0, 4.0]


def test_setitem_on_leaves():
    w = cv.Tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="in place"):
        w[[0]] = 0.0
    with cv.no_grad():
        w[[0, 2]] = cv.Tensor([5.0, 6.0])
    assert w.requires_grad and w.is_leaf and w.tolist() == [5.0, 2.0, 6.0]
    (w[[1, 1]].sum()).backward()
    assert w.grad.tolist() == [0.0, 2.0, 0.0]


def test_vmap_setitem_constant():
    """gcc 12.2 with loop if-conversion miscompiled this kernel (E_4_5_2); kernels are built without it."""
    rng = np.random.default_rng(4)
    xs = rng.normal(size=(4, 5, 2)).astype(np.float32)
    ii = np.array([0, 4, -1, 2])

    def write(x, i):
        y = x * 1.0
        y[i] = 0.0
        return y

    want = xs.copy()
    want[np.arange(4), ii] = 0.0
    np.testing.assert_array_equal(cv.vmap(write)(cv.Tensor(xs), cv.Tensor(ii)).numpy(), want)


def test_take_is_one_indirect_load_kernel_reading_the_table_in_place():
    table = cv.Tensor(np.arange(15, dtype=np.float32).reshape(5, 3))
    ids = cv.Tensor(np.array([[4, 1], [0, -1]]))
    out = cv.take(table, ids, axis=0)
    (k,) = out.schedule()
    assert table.node in k.inputs and "p1[" in k.source and k.kernel.loops[0].size == 4
    np.testing.assert_array_equal(out.numpy(), np.arange(15, dtype=np.float32).reshape(5, 3)[[[4, 1], [0, 4]]])


def test_gather_under_jit_reads_zero_out_of_range_and_differentiates():
    f = cv.jit(lambda x, i: cv.take_along_axis(x, i, axis=1))
    x = cv.Tensor(np.arange(6.0).reshape(2, 3))
    assert f(x, cv.Tensor(np.array([[2], [0]]))).tolist() == [[2.0], [3.0]]
    assert f(x, cv.Tensor(np.array([[7], [-9]]))).tolist() == [[0.0], [0.0]]  # traced: no check, no stray read
    g = cv.grad(lambda t: (cv.take(t, cv.Tensor(np.array([0, 0, 2])), axis=0) ** 2).sum())(cv.Tensor([1.0, 2.0, 3.0]))
    assert g.tolist() == [4.0, 0.0, 6.0]  # the repeated index accumulates


# --- the SCATTER primitive (sum/mean scatters and the gather backward) ----------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_scatter_add_primitive_matches_numpy_add_at(axis, dtype):
    rng = np.random.default_rng(axis)
    x = (rng.standard_normal((4, 6, 5)) * 10).astype(dtype)
    ishape = list(x.shape)
    ishape[axis] = 9  # more updates than targets: duplicates add up
    idx = rng.integers(0, x.shape[axis], size=ishape)
    src = (rng.standard_normal(ishape) * 10).astype(dtype)
    got = cv.scatter_reduce(cv.Tensor(x), axis, cv.Tensor(idx), cv.Tensor(src), "sum")
    names = [k.name for k in got.schedule()]
    assert any(n.startswith("scatter_sum") for n in names) and not any(n.startswith("r_") for n in names)
    ref = x.copy()
    grid = list(np.indices(ishape))
    grid[axis] = idx
    np.add.at(ref, tuple(grid), src)
    tol = 1e-5 if dtype == np.float32 else 0
    np.testing.assert_allclose(got.numpy(), ref, rtol=tol, atol=tol)
    # without the old values, and the mean
    ref0 = np.zeros_like(x)
    np.add.at(ref0, tuple(grid), src)
    cnt = np.zeros(x.shape, np.int64)
    np.add.at(cnt, tuple(grid), 1)
    got0 = cv.scatter_reduce(cv.Tensor(x), axis, cv.Tensor(idx), cv.Tensor(src), "sum", include_self=False)
    np.testing.assert_allclose(got0.numpy(), np.where(cnt > 0, ref0, x), rtol=tol, atol=tol)
    if dtype in (np.float32, np.float64):
        mean = cv.scatter_reduce(cv.Tensor(x), axis, cv.Tensor(idx), cv.Tensor(src), "mean")
        np.testing.assert_allclose(mean.numpy(), np.where(cnt > 0, (ref0 + x) / (cnt + 1), x), rtol=1e-5, atol=1e-5)


def test_scatter_add_integer_overflow_wraps_like_numpy():
    x = np.array([2**31 - 1, 0], np.int32)
    got = cv.scatter_reduce(cv.Tensor(x), 0, cv.Tensor([0, 0]), cv.Tensor(np.array([1, 1], np.int32)), "sum")
    ref = x.copy()
    np.add.at(ref, [0, 0], np.array([1, 1], np.int32))
    np.testing.assert_array_equal(got.numpy(), ref)


def test_scatter_add_drops_out_of_range_indices_under_jit():
    f = cv.jit(lambda x, i, s: cv.scatter_reduce(x, 0, i, s, "sum"))
    x = np.zeros(4, np.float32)
    got = f(cv.Tensor(x), cv.Tensor(np.array([1, 9, -7, 1])), cv.Tensor(np.ones(4, np.float32))).numpy()
    np.testing.assert_array_equal(got, [0, 2, 0, 0])  # unchecked while traced: nothing is written outside


def test_scatter_add_transforms_match_loops():
    rng = np.random.default_rng(7)
    xs = rng.standard_normal((3, 5, 4))
    idx = rng.integers(0, 5, (3, 8, 4))
    src = rng.standard_normal((3, 8, 4))
    f = lambda x, i, s: cv.scatter_reduce(x, 0, i, s, "sum")  # noqa: E731
    got = cv.vmap(f)(cv.Tensor(xs), cv.Tensor(idx), cv.Tensor(src)).numpy()
    ref = np.stack([f(cv.Tensor(a), cv.Tensor(b), cv.Tensor(c)).numpy() for a, b, c in zip(xs, idx, src)])
    np.testing.assert_allclose(got, ref, atol=1e-12)
    # d/dx = g, d/dsrc = g read back at the indices; jvp is the scatter of the tangents
    loss = lambda x, s: (f(x, cv.Tensor(idx[0]), s) ** 2).sum()  # noqa: E731
    gx, gs = cv.grad(loss, argnums=(0, 1))(cv.Tensor(xs[0]), cv.Tensor(src[0]))
    out = f(cv.Tensor(xs[0]), cv.Tensor(idx[0]), cv.Tensor(src[0])).numpy()
    np.testing.assert_allclose(gx.numpy(), 2 * out, atol=1e-12)
    np.testing.assert_allclose(gs.numpy(), 2 * np.take_along_axis(out, idx[0], 0), atol=1e-12)
    _, t = cv.jvp(lambda s: f(cv.Tensor(xs[0]), cv.Tensor(idx[0]), s), (cv.Tensor(src[0]),), (cv.Tensor(np.ones((8, 4))),))
    cnt = np.zeros((5, 4))
    np.add.at(cnt, (idx[0], np.arange(4)), 1.0)
    np.testing.assert_allclose(t.numpy(), cnt, atol=1e-12)


def test_embedding_backward_is_one_scatter_not_a_one_hot():
    rng = np.random.default_rng(8)
    table, ids = rng.standard_normal((1000, 16)).astype(np.float32), rng.integers(0, 1000, 300)
    t = cv.Tensor(table, requires_grad=True)
    (cv.take(t, cv.Tensor(ids), axis=0) ** 2).sum().backward()
    ref = np.zeros_like(table)
    np.add.at(ref, ids, 2 * table[ids])
    np.testing.assert_allclose(t.grad.numpy(), ref, rtol=1e-5, atol=1e-5)
    g = cv.grad(lambda w: (cv.take(w, cv.Tensor(ids), axis=0) ** 2).sum())(cv.Tensor(table))
    assert any(k.name.startswith("scatter_sum") for k in g.schedule())


def test_embedding_backward_of_a_token_batch_scatters_into_the_table_once():
    """Token ids (B, T): the table is broadcast against both, and its cotangent used to be
    scattered into one table per token, then summed (GPT-2's: 128 x 50257 x 768 floats, which
    killed the process); now the tokens join the scattered axis."""
    rng = np.random.default_rng(9)
    table, ids = rng.standard_normal((500, 8)).astype(np.float32), rng.integers(0, 500, (4, 16))
    g = cv.grad(lambda w: (cv.take(w, cv.Tensor(ids), axis=0) ** 2).sum())(cv.Tensor(table))
    assert max(k.output.numel for k in g.schedule()) <= table.size, [(k.name, k.output.numel) for k in g.schedule()]
    ref = np.zeros_like(table)
    np.add.at(ref, ids.ravel(), 2 * table[ids.ravel()])
    np.testing.assert_allclose(g.numpy(), ref, rtol=1e-5, atol=1e-5)
    x = rng.standard_normal((3, 500, 8)).astype(np.float32)  # a gathered axis after a batch axis
    gx = cv.grad(lambda v: (cv.take(v, cv.Tensor(ids[0]), axis=1) ** 2).sum())(cv.Tensor(x))
    ref = np.zeros_like(x)
    for i in ids[0]:
        ref[:, i] += 2 * x[:, i]
    np.testing.assert_allclose(gx.numpy(), ref, rtol=1e-5, atol=1e-5)


# --- every write is one O(m) SCATTER kernel: set/prod/amax/amin, setitem, put_along_axis ---------------
def _kernel_names(t):
    return [k.name for k in t.schedule()]


_ALL_REDUCES = ["set", "sum", "prod", "amax", "amin", "mean"]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8", "uint8", "int16", "uint32", "uint64", "bool",
                                   "complex64", "float64"])
@pytest.mark.parametrize("reduce", _ALL_REDUCES)
def test_scatter_every_dtype_and_reduce_matches_loop(dtype, reduce):
    if reduce in ("amax", "amin") and dtype == "complex64":
        with pytest.raises(TypeError, match="complex"):
            cv.scatter_reduce(cv.zeros(3, dtype=cv.complex64), 0, cv.Tensor([0]), cv.zeros(1, dtype=cv.complex64),
                              reduce)
        return
    if reduce == "mean" and dtype == "bool":
        return  # mean of booleans is not a boolean
    rng = np.random.default_rng(11)
    npd = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    x = rng.integers(0, 4, size=(3, 6)).astype(npd)
    src = rng.integers(0, 4, size=(3, 7)).astype(npd)
    if dtype == "complex64":
        x, src = x + 1j * rng.integers(0, 3, size=x.shape), src - 1j * rng.integers(0, 3, size=src.shape)
        x, src = x.astype(npd), src.astype(npd)
    idx = rng.integers(0, 6, size=(3, 7))
    for include_self in ((True,) if reduce == "set" else (True, False)):
        tx, ti, ts = cv.Tensor(x), cv.Tensor(idx), cv.Tensor(src)
        got = cv.scatter(tx, 1, ti, ts) if reduce == "set" else cv.scatter_reduce(tx, 1, ti, ts, reduce, include_self)
        assert got.dtype == tx.dtype
        names = _kernel_names(got)
        assert any(n.startswith("scatter_") for n in names) and not any(n.startswith("r_") for n in names), names
        want = _np_scatter(x.astype(np.complex128 if dtype == "complex64" else np.float64), 1, idx,
                           src.astype(np.complex128 if dtype == "complex64" else np.float64), reduce, include_self)
        if dtype == "bool":
            want = want.astype(bool) if reduce not in ("sum", "prod") else \
                _np_scatter(x, 1, idx, src, "amax" if reduce == "sum" else "amin", include_self)  # or / and
        elif npd.kind in "iu":  # wrap like numpy's integer arithmetic (small products stay in range here)
            want = np.floor(want).astype(npd) if reduce == "mean" else want.astype(npd)
        tol = 1e-2 if dtype in ("float16", "bfloat16") else 1e-6
        np.testing.assert_allclose(got.numpy().astype(want.dtype), want, rtol=tol, atol=tol)


def test_scatter_prod_integer_overflow_wraps_and_amax_nan_propagates():
    x = np.array([2**20, 1], np.int32)
    got = cv.scatter_reduce(cv.Tensor(x), 0, cv.Tensor([0, 0]), cv.Tensor(np.array([2**10, 2**5], np.int32)), "prod")
    want = x.copy()
    np.multiply.at(want, [0, 0], np.array([2**10, 2**5], np.int32))
    np.testing.assert_array_equal(got.numpy(), want)
    for reduce in ("amax", "amin"):
        x = cv.Tensor([1.0, np.nan, 3.0, -0.0])
        got = cv.scatter_reduce(x, 0, cv.Tensor([0, 0, 2, 1]), cv.Tensor([np.nan, 2.0, -np.inf, 5.0]), reduce)
        want = [np.nan, np.nan, 3.0 if reduce == "amax" else -np.inf, -0.0]
        np.testing.assert_array_equal(got.numpy(), np.array(want, np.float32))


def test_setitem_and_put_along_axis_are_one_scatter():
    rng = np.random.default_rng(12)
    x = rng.standard_normal(100_000).astype(np.float32)
    idx = rng.integers(-100_000, 100_000, 30_000)
    val = rng.standard_normal(30_000).astype(np.float32)
    t = cv.Tensor(x)
    t[cv.Tensor(idx)] = cv.Tensor(val)
    names = _kernel_names(t)
    assert names.count("scatter_set_1_100000_30000_1") == 1 and not any(n.startswith("r_") for n in names)
    want = x.copy()
    for i, v in zip(idx, val):  # the last duplicate wins
        want[i] = v
    np.testing.assert_array_equal(t.numpy(), want)
    x2 = rng.standard_normal((4, 50)).astype(np.float32)
    i2 = rng.integers(0, 50, (4, 20))
    got = cv.put_along_axis(cv.Tensor(x2), cv.Tensor(i2), 7.0, axis=1)
    assert any(n.startswith("scatter_set") for n in _kernel_names(got))
    want = x2.copy()
    np.put_along_axis(want, i2, 7.0, axis=1)
    np.testing.assert_array_equal(got.numpy(), want)


def _fd_check(f, args, argnum, eps=1e-6):
    """Finite-difference gradient of the scalar f at args[argnum] (float64)."""
    base = [a.copy() for a in args]
    num = np.zeros_like(base[argnum])
    for pos in np.ndindex(num.shape):
        hi, lo = [a.copy() for a in base], [a.copy() for a in base]
        hi[argnum][pos] += eps
        lo[argnum][pos] -= eps
        num[pos] = (f(*map(cv.Tensor, hi)).item() - f(*map(cv.Tensor, lo)).item()) / (2 * eps)
    return num


@pytest.mark.parametrize("reduce", _ALL_REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_grads_and_jvp_match_finite_differences(reduce, include_self):
    if reduce == "set" and not include_self:
        return
    rng = np.random.default_rng(13)
    x = rng.standard_normal((3, 5))
    src = rng.standard_normal((3, 6))
    if reduce == "prod":  # zeros among the factors: one zero, and two zeros, in a target
        x[0, 1], src[0, 0], src[1, 2], src[1, 3] = 0.0, 0.0, 0.0, 0.0
    idx = np.array([[1, 1, 3, 0, 3, 1], [0, 2, 2, 2, 4, 4], [4, 3, 2, 1, 0, 0]])
    if reduce == "prod":
        idx[1, 2], idx[1, 3] = 2, 2
    coef = rng.standard_normal((3, 5))

    def f(a, b):
        out = cv.scatter(a, 1, cv.Tensor(idx), b) if reduce == "set" else \
            cv.scatter_reduce(a, 1, cv.Tensor(idx), b, reduce, include_self)
        return (out * cv.Tensor(coef)).sum()

    gx, gs = cv.grad(f, argnums=(0, 1))(cv.Tensor(x), cv.Tensor(src))
    np.testing.assert_allclose(gx.numpy(), _fd_check(f, [x, src], 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gs.numpy(), _fd_check(f, [x, src], 1), rtol=1e-5, atol=1e-6)
    tx, ts = rng.standard_normal(x.shape), rng.standard_normal(src.shape)
    _, t = cv.jvp(f, (cv.Tensor(x), cv.Tensor(src)), (cv.Tensor(tx), cv.Tensor(ts)))
    np.testing.assert_allclose(t.item(), (gx.numpy() * tx).sum() + (gs.numpy() * ts).sum(), rtol=1e-9)


def test_scatter_amax_ties_share_the_gradient_and_vmap_matches_loop():
    x = cv.Tensor([2.0, 0.0, 0.0])
    src = cv.Tensor([2.0, 1.0, 2.0, 5.0])
    idx = cv.Tensor([0, 1, 0, 2])
    gx, gs = cv.grad(lambda a, b: cv.scatter_reduce(a, 0, idx, b, "amax").sum(), argnums=(0, 1))(x, src)
    third = 1 / 3
    np.testing.assert_allclose(gx.numpy(), [third, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(gs.numpy(), [third, 1, third, 1], rtol=1e-6)
    rng = np.random.default_rng(14)
    xs, ss = rng.standard_normal((4, 6)), rng.standard_normal((4, 9))
    ii = rng.integers(0, 6, (4, 9))
    for reduce in ("prod", "amin"):
        f = lambda a, i, b: cv.scatter_reduce(a, 0, i, b, reduce)  # noqa: E731,B023
        got = cv.vmap(f)(cv.Tensor(xs), cv.Tensor(ii), cv.Tensor(ss)).numpy()
        want = np.stack([_np_scatter(a, 0, i, b, reduce) for a, i, b in zip(xs, ii, ss)])
        np.testing.assert_allclose(got, want, rtol=1e-12)


# --- the bounds check and the gather kernel -----------------------------------------------------------------
@pytest.mark.parametrize("bad", [3, -4, 2**63 - 1, -2**63])
def test_tensor_indices_out_of_range_name_the_index(bad):
    """The one-reduction check (max of i >= 0 ? i : ~i) lets no index out of [-n, n) through, at
    the edges of int64 too, and the message still names the offending index."""
    x = cv.arange(12).reshape(4, 3)
    idx = cv.Tensor(np.array([[0], [bad], [-3], [2]], np.int64))
    with pytest.raises(IndexError, match=f"index {bad} is out of bounds for axis 1 with size 3"):
        cv.take_along_axis(x, idx, axis=1)
    with pytest.raises(IndexError, match=f"index {bad} is out of bounds for axis 1 with size 3"):
        cv.take(x, idx.reshape(-1), axis=1)


def test_tensor_indices_in_range_take_one_reduction(monkeypatch):
    """In-range indices (the edges -n and n - 1 included) are checked without the min/max pass,
    which only runs to find the index an error names."""
    from corvid.ops import indexing

    def no_ranges(tensors):
        raise AssertionError("min/max of in-range indices computed")

    monkeypatch.setattr(indexing, "_device_ranges", no_ranges)
    a = np.arange(12.0).reshape(4, 3)
    i = np.array([[-3], [2], [0], [-1]])
    np.testing.assert_array_equal(cv.take_along_axis(cv.Tensor(a), cv.Tensor(i), axis=1).numpy(),
                                  np.take_along_axis(a, i, axis=1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int64, np.uint16, np.bool_,
                                   ml_dtypes.bfloat16, np.float16], ids=lambda d: np.dtype(d).name)
def test_gather_kernels_vectorized_with_omp_simd_match_numpy(dtype):
    """A gather's innermost output loop is rendered with ``omp simd`` (hardware gathers); negative
    indices, every dtype, a row length that is not a multiple of the vector width."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-100, 100, size=(37, 29)).astype(dtype)
    i = rng.integers(-29, 29, size=(37, 45))
    got = cv.take_along_axis(cv.Tensor(x), cv.Tensor(i), axis=1)
    (sk,) = [k for k in got.schedule() if "gather" in {u.op for u in k.kernel.values()}]
    assert "#pragma omp simd" in sk.source or "parallel for simd" in sk.source
    np.testing.assert_array_equal(got.numpy(), np.take_along_axis(x, i, axis=1))
    flat = rng.integers(-x.size, x.size, size=300)
    np.testing.assert_array_equal(cv.take(cv.Tensor(x), cv.Tensor(flat)).numpy(), np.take(x, flat))


def test_gather_under_vmap_reads_zero_out_of_range_with_omp_simd():
    """Unchecked indices (a vmap placeholder) stay gated in the vectorized loop: out of range reads 0."""
    x = cv.Tensor(np.arange(1.0, 7.0, dtype=np.float32))
    f = cv.vmap(lambda i: cv.take(x, i))
    got = f(cv.Tensor(np.array([[0, 9, -1, -7, 5]] * 3))).numpy()
    np.testing.assert_array_equal(got, [[1.0, 0.0, 6.0, 0.0, 6.0]] * 3)


_VIEWS = {  # name: (view of a (12, 10) array, axis to gather along, size of that axis)
    "transpose": (lambda a: a.T, 1, 12),
    "shrink": (lambda a: a[2:9, 1:8], 0, 7),
    "flip": (lambda a: a[::-1], 0, 12),
    "flip both": (lambda a: a[::-1, ::-1], 1, 10),
    "expand": (lambda a: a[3:4].broadcast_to((6, 10)) if not isinstance(a, np.ndarray) else
               np.broadcast_to(a[3:4], (6, 10)), 1, 10),
    "merge": (lambda a: a.reshape(3, 4, 10)[1:].reshape(8, 10), 0, 8),
    "split gathered": (lambda a: a.reshape(12, 2, 5), 1, 2),
    "one column": (lambda a: a[:, 3:4], 1, 1),
    "permuted split": (lambda a: (a.reshape(3, 4, 10).transpose(2, 0, 1) if isinstance(a, np.ndarray) else
                                  a.reshape(3, 4, 10).permute(2, 0, 1)).reshape(10, 12), 1, 12),
}


@pytest.mark.parametrize("name", sorted(_VIEWS))
def test_gather_reads_through_views_of_a_buffer(name):
    """A gather from views of a stored buffer reads it in place (one kernel, no copy of the
    source) when the views step evenly along the gathered axis, and matches numpy either way."""
    view, axis, n = _VIEWS[name]
    a = np.arange(120, dtype=np.float32).reshape(12, 10)
    x = cv.Tensor(a).realize()
    xv, av = view(x), view(a)
    shape = list(av.shape)
    shape[axis] = 5
    i = np.random.default_rng(3).integers(-n, n, size=shape)
    got = cv.take_along_axis(xv, cv.Tensor(i), axis=axis)
    kernels = got.schedule()
    np.testing.assert_array_equal(got.numpy(), np.take_along_axis(av, i, axis=axis))
    if name != "split gathered":  # (a gathered axis of 2 is split by the reshape's // and %: it copies)
        assert len(kernels) == 1, kernels


def test_embedding_lookup_and_column_gather_read_the_table_in_place():
    """``table[idx]`` and ``x[:, idx]`` used to copy the whole source (a narrowing slice, a
    permute) before gathering; now each is one kernel reading the realized buffer."""
    rng = np.random.default_rng(4)
    t = rng.standard_normal((500, 16)).astype(np.float32)
    i = rng.integers(3, 480, size=37)
    table, idx = cv.Tensor(t).realize(), cv.Tensor(i).realize()
    for got, want in ((table[idx], t[i]), (table[:, idx[:9] % 16], t[:, i[:9] % 16])):
        (k,) = [k for k in got.schedule() if "gather" in {u.op for u in k.kernel.values()}]
        assert any(n is table.node for n in k.inputs)  # the table itself, not a copy
        np.testing.assert_array_equal(got.numpy(), want)
    assert len(table[idx].schedule()) == 1
    doubled = (table * 2)[idx]  # a computed source: stored once (that kernel), then read in place
    assert len(doubled.schedule()) == 2
    np.testing.assert_array_equal(doubled.numpy(), (t * 2)[i])



def test_embedding_reads_a_detached_or_jit_argument_table_in_place():
    """A table under a mark (``detach()``, a ``requires_grad`` argument of a jitted gradient) is
    read in place too: each forward copied the whole table first (the marks hid the buffer)."""
    import corvid.nn.functional as F

    rng = np.random.default_rng(5)
    t = rng.standard_normal((3000, 32)).astype(np.float32)
    ids = np.array([[1, 7, 2999, 7]])
    table = cv.Tensor(t, requires_grad=True)
    names = [k.name for k in F.embedding(cv.Tensor(ids), table.detach()).schedule()]
    assert not any(n.startswith("copy") for n in names), names

    def loss(w, i):
        return (F.embedding(i, w) ** 2).sum()

    step = cv.jit(cv.grad(loss))
    got = step(table, cv.Tensor(ids)).numpy()
    want = np.zeros_like(t)
    np.add.at(want, ids.ravel(), 2 * t[ids.ravel()])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    (captured,) = [c for caps in step._cache.values() for c in caps]
    launches = [la.sk.name for la in captured.launches]
    assert sum(n.startswith("copy") for n in launches) <= 1, launches  # (the result's; not the table's)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int32"])
@pytest.mark.parametrize("reduce", ["sum", "amax"])
def test_scatter_reduce_of_each_dtype_matches_numpy(dtype, reduce):
    # (float16 scatter kernels are standalone C sources: they need the float16 type's definition too)
    import ml_dtypes

    npdt = {"bfloat16": ml_dtypes.bfloat16}.get(dtype, dtype)
    idx = np.array([1, 1, 3, 0, 3])
    src = np.array([1.5, 2.5, -3.0, 0.25, 4.0]).astype(npdt)
    x = np.ones(5).astype(npdt)
    want = x.astype(np.float64)
    (np.add if reduce == "sum" else np.maximum).at(want, idx, src.astype(np.float64))
    got = cv.Tensor(x).scatter_reduce(0, cv.Tensor(idx), cv.Tensor(src), reduce)
    assert got.dtype.name == dtype
    np.testing.assert_array_equal(got.numpy().astype(np.float64), want.astype(npdt).astype(np.float64))


def test_gather_through_a_view_that_was_computed_meanwhile():
    """A gather built on a view, whose view node is then realized (another tensor's value): the
    lowering walked through the views to the buffer below while the scheduler passed the view's
    own buffer (TypeError in the C renderer; found by the Array API suite's take tests)."""
    a = np.arange(40, dtype=np.float32)
    v = cv.Tensor(a).reshape(2, 5, 4)[:, 1:, :]
    out = cv.take(v, cv.asarray([2, 0]), axis=1)
    v.realize()
    np.testing.assert_array_equal(out.numpy(), np.take(a.reshape(2, 5, 4)[:, 1:, :], [2, 0], axis=1))
    w = cv.Tensor(a).reshape(8, 5)
    rows = w[cv.asarray([7, 1])]
    w.realize()
    np.testing.assert_array_equal(rows.numpy(), a.reshape(8, 5)[[7, 1]])


def test_filling_a_small_tensor_one_element_at_a_time_writes_in_place_on_the_host():
    """x[i, j] = v in a loop on a small CPU tensor is numpy's write into a copy (as PyTorch's
    in-place write): the tensor stays one stored value instead of growing a node per write (400
    writes made a kernel that took seconds to compile), and casts as the graph form does."""
    x = cv.zeros((20, 20))
    ref = np.zeros((20, 20), np.float32)
    for i in range(20):
        for j in range(20):
            x[i, j] = i * 0.5 - j
            ref[i, j] = i * 0.5 - j
    assert x.node.op is Op.BUFFER and x.schedule() == []
    np.testing.assert_array_equal(x.numpy(), ref)
    y = cv.zeros(5, dtype=cv.int8)
    y[1:3] = cv.Tensor([300.0, -1.5])  # the cast of the graph form: wraps, truncates
    assert y.tolist() == (cv.Tensor([0.0, 300.0, -1.5, 0.0, 0.0]).astype(cv.int8)).tolist()
    w = cv.zeros(3, requires_grad=True) * 1.0  # traced for gradients: still the graph form
    w[1] = 2.0
    assert w.node.op is not Op.BUFFER and w.tolist() == [0.0, 2.0, 0.0]


def test_a_mask_axis_of_size_zero_selects_nothing():
    """The Array API's rule for boolean indexing: each mask axis equals the indexed axis or is 0
    (nothing selected); any other size is an IndexError."""
    y = cv.arange(6).reshape(2, 3)
    assert y[cv.Tensor(np.zeros((2, 0), bool))].shape == (0,)
    assert y[np.zeros((0, 3), bool)].shape == (0,)
    assert cv.Tensor([False])[cv.Tensor(np.zeros(0, bool))].shape == (0,)
    assert y[np.zeros(0, bool)].shape == (0, 3)
    with pytest.raises(IndexError, match="does not match"):
        y[cv.Tensor(np.zeros(3, bool))]

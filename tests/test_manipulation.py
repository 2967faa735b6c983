"""roll, tile, repeat, diff, tril/triu, meshgrid, moveaxis, swapaxes, rot90, frac, broadcast_arrays,
expand_dims, unstack, nan_to_num, diagonal/diag/trace against numpy, plus gradients and vmap."""

import numpy as np
import pytest

import corvid as cv
from _data import sample
from corvid import dtype as cd

DTYPES = [cd.bool_, cd.int8, cd.int64, cd.uint16, cd.float16, cd.float32, cd.float64]
ids = lambda d: d.name  # noqa: E731


def data(d, shape, seed=0):
    return sample(d, shape, seed, lo=-5, hi=6, normal=True)


def same(got, want):
    assert got.dtype.np == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("d", DTYPES, ids=ids)
def test_views_every_dtype(d):
    x = data(d, (2, 3, 4))
    t = cv.Tensor(x)
    same(cv.roll(t, (1, -5), (0, 2)), np.roll(x, (1, -5), (0, 2)))
    same(cv.roll(t, 7), np.roll(x, 7))
    same(cv.tile(t, (2, 1, 1, 3)), np.tile(x, (2, 1, 1, 3)))
    same(cv.repeat(t, 2, axis=1), np.repeat(x, 2, axis=1))
    same(cv.repeat(t, [2, 0, 1], axis=-2), np.repeat(x, [2, 0, 1], axis=-2))
    same(cv.tril(t, -1), np.tril(x, -1))
    same(cv.triu(t, 2), np.triu(x, 2))
    same(cv.moveaxis(t, (0, -1), (2, 0)), np.moveaxis(x, (0, -1), (2, 0)))
    same(cv.swapaxes(t, 0, -1), np.swapaxes(x, 0, -1))
    same(cv.rot90(t, 3, (2, 1)), np.rot90(x, 3, (2, 1)))
    same(cv.diagonal(t, 1, 2, 1), np.diagonal(x, 1, 2, 1))
    got, want = cv.diff(t, 2, axis=1), np.diff(x, 2, axis=1)
    if d is cd.float16:  # the fused second difference keeps its float32 intermediate
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-3, atol=2e-3)
    else:
        same(got, want)


def test_roll_tile_repeat_edge_cases():
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    t = cv.Tensor(x)
    same(cv.roll(t, -1, 1), np.roll(x, -1, 1))
    same(cv.roll(t, 3, 1), x)
    same(cv.roll(t, (1, 1), (1, 1)), np.roll(x, (1, 1), (1, 1)))
    same(cv.roll(cv.zeros(0, 3), 2, 0), np.zeros((0, 3), np.float32))
    same(cv.tile(t, 0), np.tile(x, 0))
    same(cv.tile(cv.Tensor(1.5), (2, 2)), np.tile(np.float32(1.5), (2, 2)))
    same(cv.repeat(t, 3), np.repeat(x, 3))
    same(cv.repeat(cv.Tensor(2.0), 3), np.repeat(np.float32(2.0), 3))
    same(cv.repeat(t, cv.Tensor([0, 2]), axis=0), np.repeat(x, [0, 2], axis=0))
    neg0 = cv.repeat(cv.Tensor([-0.0, np.nan]), [2, 1])
    assert np.signbit(neg0.numpy()[:2]).all() and np.isnan(neg0.numpy()[2])  # copied bit-exactly


def test_errors():
    t = cv.zeros(2, 3)
    with pytest.raises(ValueError, match="2 counts for axis 1 of size 3"):
        cv.repeat(t, [1, 2], axis=1)
    with pytest.raises(ValueError, match="non-negative"):
        cv.repeat(t, -1)
    with pytest.raises(IndexError, match="axis 2"):
        cv.repeat(t, 2, axis=2)
    with pytest.raises(IndexError, match="axis -3"):
        cv.roll(t, 1, -3)
    with pytest.raises(ValueError, match="different lengths"):
        cv.roll(t, (1, 2, 3), (0, 1))
    with pytest.raises(ValueError, match="different"):
        cv.rot90(t, 1, (1, 1))
    with pytest.raises(ValueError, match="at least 2"):
        cv.tril(cv.zeros(3))
    with pytest.raises(ValueError, match="0-d"):
        cv.diff(cv.Tensor(1.0))
    with pytest.raises(ValueError, match="indexing"):
        cv.meshgrid(cv.zeros(2), indexing="ji")
    with pytest.raises(TypeError, match="int32"):
        cv.frac(cv.Tensor([1], dtype="int32"))
    with pytest.raises(IndexError, match="source axis 3"):
        cv.moveaxis(t, 3, 0)
    with pytest.raises(ValueError, match="axis1 and axis2"):
        cv.diagonal(t, 0, 1, -1)


def test_diff_prepend_append_and_bool():
    x = np.array([[1, 4, 9], [2, 2, 0]], np.int32)
    t = cv.Tensor(x)
    same(cv.diff(t, prepend=0), np.diff(x, prepend=np.int32(0)))
    five = np.full((1, 3), 5, np.int32)
    same(cv.diff(t, axis=0, append=cv.Tensor(five)), np.diff(x, axis=0, append=five))
    same(cv.diff(t, n=0), x)
    same(cv.diff(t, n=5), np.diff(x, n=5))
    b = np.array([True, True, False, True])
    same(cv.diff(cv.Tensor(b)), np.diff(b))


def test_meshgrid_broadcast_expand_unstack():
    a, b, c = np.arange(2), np.arange(3.0), np.arange(4, dtype=np.int8)
    for indexing in ("xy", "ij"):
        for g, w in zip(cv.meshgrid(cv.Tensor(a), cv.Tensor(b), cv.Tensor(c), indexing=indexing),
                        np.meshgrid(a, b, c, indexing=indexing)):
            np.testing.assert_array_equal(g.numpy(), w)
    assert cv.meshgrid(cv.Tensor(b))[0].shape == (3,)
    outs = cv.broadcast_arrays(cv.zeros(3, 1), cv.ones(4), cv.Tensor(2.0))
    assert [o.shape for o in outs] == [(3, 4)] * 3
    with pytest.raises(ValueError, match="cannot be broadcast"):
        cv.broadcast_arrays(cv.zeros(2), cv.zeros(3))
    want = np.expand_dims(np.zeros((2, 3)), (0, -1)).shape
    assert cv.expand_dims(cv.zeros(2, 3), (0, -1)).shape == want
    assert cv.expand_dims(cv.zeros(2, 3), -1).shape == (2, 3, 1)
    x = np.arange(6).reshape(2, 3)
    parts = cv.unstack(cv.Tensor(x), axis=-1)
    assert len(parts) == 3 and all(np.array_equal(p.numpy(), x[:, i]) for i, p in enumerate(parts))
    assert cv.unstack(cv.zeros(0, 2)) == ()


def test_frac_nan_to_num():
    x = np.array([2.5, -2.5, -0.0, np.inf, np.nan, 1e20], np.float32)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(cv.frac(cv.Tensor(x)).numpy(), x - np.trunc(x))
    y = np.array([np.nan, np.inf, -np.inf, -1.5], np.float64)
    np.testing.assert_array_equal(cv.nan_to_num(cv.Tensor(y)).numpy(), np.nan_to_num(y))
    np.testing.assert_array_equal(cv.nan_to_num(cv.Tensor(y), nan=1.0, posinf=2.0, neginf=-3.0).numpy(),
                                  np.nan_to_num(y, nan=1.0, posinf=2.0, neginf=-3.0))
    np.testing.assert_array_equal(cv.nan_to_num(cv.Tensor(y.astype(np.float16))).numpy(),
                                  np.nan_to_num(y.astype(np.float16)))
    same(cv.nan_to_num(cv.Tensor([1, 2])), np.array([1, 2]))


@pytest.mark.parametrize("offset", [-3, -1, 0, 2, 5])
def test_diagonal_diag_trace(offset):
    x = np.arange(24.0).reshape(2, 3, 4)
    same(cv.diagonal(cv.Tensor(x), offset, 1, 2), np.diagonal(x, offset, 1, 2))
    same(cv.diagonal(cv.Tensor(x), offset, -1, 0), np.diagonal(x, offset, -1, 0))
    m = x[0]
    same(cv.diag(cv.Tensor(m), offset), np.diag(m, offset))
    v = np.array([1, -2, 3], np.int32)
    same(cv.diag(cv.Tensor(v), offset), np.diag(v, offset))
    same(cv.trace(cv.Tensor(x.astype(np.int8)), offset, 1, 2), np.trace(x.astype(np.int8), offset, 1, 2))
    same(cv.diag(cv.zeros(0), offset), np.diag(np.zeros(0, np.float32), offset))


def test_methods_attached():
    t = cv.Tensor(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(t.roll(1, 1).numpy(), np.roll(np.arange(6.0).reshape(2, 3), 1, 1))
    assert t.tile(2).shape == (2, 6) and t.repeat(1, 2).shape == (2, 6) and t.diagonal().shape == (2,)
    assert t.repeat_interleave(2).shape == (12,)  # (numpy's element repeat; x.repeat tiles, as PyTorch's)
    assert t.trace().item() == 4.0 and t.tril().shape == (2, 3) and t.frac().shape == (2, 3)


def test_gradients():
    x = np.random.default_rng(1).standard_normal((3, 4))
    w = cv.Tensor(np.random.default_rng(2).standard_normal((3, 4)))

    def check(f, want):
        np.testing.assert_allclose(cv.grad(lambda t: (f(t) * f(w)).sum())(cv.Tensor(x)).numpy(), want, rtol=1e-12)

    check(lambda t: cv.roll(t, 1, 1), w.numpy())  # a permutation: grad of <P x, P w> is w
    check(lambda t: cv.rot90(t), w.numpy())
    check(lambda t: cv.tril(t, 1), np.tril(w.numpy(), 1))
    check(lambda t: cv.diagonal(t, 1), np.diag(np.diag(w.numpy(), 1), 1)[:3, :4])
    g = cv.grad(lambda t: (cv.repeat(t, [1, 0, 2], axis=0) ** 2).sum())(cv.Tensor(x))
    np.testing.assert_allclose(g.numpy(), 2 * x * np.array([1, 0, 2])[:, None], rtol=1e-12)
    g = cv.grad(lambda t: cv.tile(t, (2, 1)).sum() + cv.diff(t, 1, 0).sum())(cv.Tensor(x))
    np.testing.assert_allclose(g.numpy(), np.broadcast_to(2 + np.array([-1, 0, 1])[:, None], x.shape), rtol=1e-12)
    g = cv.grad(lambda t: cv.frac(t * 3).sum())(cv.Tensor(x))
    np.testing.assert_allclose(g.numpy(), np.full_like(x, 3.0))


def test_vmap_matches_loop():
    x = np.random.default_rng(3).standard_normal((4, 3, 3)).astype(np.float32)
    f = lambda m: cv.diagonal(cv.rot90(cv.triu(m)), 0) + cv.roll(cv.diff(m, axis=0, append=0.0), 1, 0)[0]  # noqa: E731
    got = cv.vmap(f)(cv.Tensor(x)).numpy()
    want = np.stack([f(cv.Tensor(m)).numpy() for m in x])
    np.testing.assert_allclose(got, want)


def test_stacking_pieces_computed_in_a_loop_compiles_one_kernel_for_them(monkeypatch):
    """``stack([x[i] * y[j] for ...])`` of small CPU values: the pieces are one kernel structure
    (their slices stored by numpy first) and numpy concatenates them; as the graph form, every
    offset was a new kernel and the stack one large kernel (seconds of compiling, in the Array
    API suite's test_outer)."""
    from corvid.runtime import cpu

    sources = []
    compile_kernel = cpu.compile_kernel
    monkeypatch.setattr(cpu, "compile_kernel", lambda src, name: sources.append(src) or compile_kernel(src, name))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(7).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    x, y = cv.Tensor(a), cv.Tensor(b)
    got = cv.stack([cv.stack([x[i] * y[j] for j in range(6)]) for i in range(7)])
    np.testing.assert_array_equal(got.numpy(), np.outer(a, b))
    assert len(set(sources)) <= 2, len(set(sources))  # (the product; at most one more, e.g. a cast)
    mixed = cv.concat([cv.Tensor([1, 2], dtype=cv.int8), cv.Tensor([0.5])])  # promotes as the graph form
    assert mixed.dtype == cv.float32 and mixed.tolist() == [1.0, 2.0, 0.5]
    w = cv.Tensor([1.0, 2.0], requires_grad=True)
    s = cv.stack([w[0] * 2, w[1] * 3])  # traced for gradients: the graph form, differentiable
    s.sum().backward()
    assert w.grad.tolist() == [2.0, 3.0]

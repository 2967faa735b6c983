"""Reductions, softmax, matmul, cat/stack/split/chunk against numpy.

Accumulation dtypes follow numpy: sum/prod of bool and signed ints give int64, of unsigned ints
uint64, floats keep their dtype (float16/bfloat16 accumulate in float32 inside the kernel, so they
are compared with a relative tolerance of 1e-2). mean/var/std of ints give float32 (corvid's
default float; numpy gives float64). max/min over an empty axis raise ValueError.
"""

import ml_dtypes
import numpy as np
import pytest

import corvid as cv
from corvid import dtype as cd

INTS = [cd.int8, cd.int16, cd.int32, cd.int64, cd.uint8, cd.uint16, cd.uint32, cd.uint64]
FLOATS = [cd.float16, cd.bfloat16, cd.float32, cd.float64]
ALL = [cd.bool_] + INTS + FLOATS
ids = lambda d: d.name  # noqa: E731
AXES = [None, 0, 1, -1, (0, 2), (-1, 0), (), (0, 1, 2)]


def tol(d):
    if d in (cd.float16, cd.bfloat16):
        return dict(rtol=1e-2, atol=1e-2)
    if d is cd.float32:
        return dict(rtol=1e-5, atol=1e-5)
    return dict(rtol=1e-12, atol=1e-12)


def data(d, shape=(2, 3, 4), seed=0):
    rng = np.random.default_rng(seed)
    if d.is_bool:
        return rng.random(shape) < 0.5
    if d.is_int:
        lo = 0 if d.kind == "u" else -5
        return rng.integers(lo, 6, size=shape).astype(d.np)
    return (rng.standard_normal(shape) * 2).astype(d.np)


def check(out, exp, d):
    assert out.dtype is d, (out.dtype, d)
    got = out.numpy()
    assert got.shape == np.shape(exp), (got.shape, np.shape(exp))
    if d.is_float:
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(exp, dtype=np.float64), equal_nan=True, **tol(d))
    else:
        np.testing.assert_array_equal(got, np.asarray(exp).astype(d.np))


def f64(a):
    return np.asarray(a).astype(np.float64)


@pytest.mark.parametrize("d", ALL, ids=ids)
@pytest.mark.parametrize("axis", AXES, ids=str)
def test_sum_prod(d, axis):
    a = data(d)
    t = cv.Tensor(a)
    sd = cd.sum_dtype(d)
    ref_in = f64(a) if d.is_float else a.astype(sd.np)
    check(t.sum(axis), ref_in.sum(axis=axis), sd)
    check(t.prod(axis, keepdims=True), ref_in.prod(axis=axis, keepdims=True), sd)


@pytest.mark.parametrize("d", ALL, ids=ids)
@pytest.mark.parametrize("axis", [None, 1, (0, 2), -1], ids=str)
def test_max_min(d, axis):
    a = data(d)
    t = cv.Tensor(a)
    ref = f64(a) if d.is_float else a
    check(t.max(axis=axis), ref.max(axis=axis), d)  # (numpy's keywords: the reduction; x.max(d) is PyTorch's)
    check(t.min(axis, keepdims=True), ref.min(axis=axis, keepdims=True), d)


@pytest.mark.parametrize("d", [cd.int8, cd.uint64, cd.int64], ids=ids)
def test_max_min_extremes(d):
    info = np.iinfo(d.np)
    a = np.array([[info.min, info.max, 0], [info.min, info.min, info.min]], dtype=d.np)
    check(cv.Tensor(a).max(1).values, a.max(1), d)
    check(cv.Tensor(a).min(axis=1), a.min(1), d)


@pytest.mark.parametrize("d", [cd.float16, cd.float32, cd.float64], ids=ids)
def test_nan_propagation(d):
    a = np.array([[1.0, np.nan, 3.0], [np.inf, -np.inf, 2.0], [-1.0, 5.0, np.nan]], dtype=d.np)
    t = cv.Tensor(a)
    for name in ("sum", "prod", "max", "min"):
        check(getattr(t, name)(axis=1), getattr(np, name)(f64(a), axis=1), d)
        check(getattr(t, name)(axis=0), getattr(np, name)(f64(a), axis=0), d)
    check(t.mean(1), np.mean(f64(a), axis=1), d)
    np.testing.assert_array_equal(t.argmax(1).numpy(), np.argmax(a, axis=1))
    np.testing.assert_array_equal(t.argmin(1).numpy(), np.argmin(a, axis=1))
    np.testing.assert_array_equal(t.argmax(0).numpy(), np.argmax(a, axis=0))
    # nan in the first position must win too
    b = np.array([np.nan, 1.0, 2.0], dtype=d.np)
    check(cv.Tensor(b).max(), np.nan, d)
    check(cv.Tensor(b[::-1].copy()).min(), np.nan, d)


@pytest.mark.parametrize("d", [cd.bool_, cd.int8, cd.uint16, cd.int64, cd.float16, cd.bfloat16, cd.float32,
                               cd.float64], ids=ids)
@pytest.mark.parametrize("axis", [None, 0, -1, (1, 2)], ids=str)
def test_mean_var_std(d, axis):
    a = data(d)
    t = cv.Tensor(a)
    rd = d if d.is_float else cd.float32
    x = f64(a)
    check(t.mean(axis), x.mean(axis=axis), rd)
    check(t.var(axis=axis), x.var(axis=axis), rd)  # (numpy's keywords: numpy's default correction 0)
    check(t.std(axis, keepdims=True), x.std(axis=axis, keepdims=True), rd)
    check(t.var(axis, correction=1), x.var(axis=axis, ddof=1), rd)
    check(t.var(axis), x.var(axis=axis, ddof=1), rd)  # (PyTorch's form: unbiased by default)
    check(t.std(axis, ddof=1), x.std(axis=axis, ddof=1), rd)


@pytest.mark.parametrize("d", ALL, ids=ids)
@pytest.mark.parametrize("axis", [None, 0, 1, -1], ids=str)
def test_argmax_argmin(d, axis):
    a = data(d, (3, 5), seed=2)
    if d.is_int or d.is_bool:  # duplicates: the first index must win
        pass
    t = cv.Tensor(a)
    for name in ("argmax", "argmin"):
        out = getattr(t, name)(axis)
        assert out.dtype is cd.int64
        np.testing.assert_array_equal(out.numpy(), getattr(np, name)(a, axis=axis))
        out = getattr(t, name)(axis, keepdims=True)
        np.testing.assert_array_equal(out.numpy(), getattr(np, name)(a, axis=axis, keepdims=True))


def test_argmax_first_of_ties():
    a = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [0, -1, 5, 5]], dtype=np.int32)
    np.testing.assert_array_equal(cv.Tensor(a).argmax(1).numpy(), [1, 0, 2])
    np.testing.assert_array_equal(cv.Tensor(a).argmin(1).numpy(), [3, 0, 1])
    np.testing.assert_array_equal(cv.Tensor(a).argmax().numpy(), 10)


@pytest.mark.parametrize("d", [cd.bool_, cd.int32, cd.uint8, cd.float32, cd.bfloat16], ids=ids)
@pytest.mark.parametrize("axis", [None, 1, (0, 2)], ids=str)
def test_any_all(d, axis):
    a = data(d)
    if d.is_float:
        a[0, 0, 0] = np.nan
    t = cv.Tensor(a)
    check(t.any(axis), np.any(a, axis=axis), cd.bool_)
    check(t.all(axis, keepdims=True), np.all(a, axis=axis, keepdims=True), cd.bool_)


@pytest.mark.parametrize("d", [cd.float16, cd.float32, cd.float64], ids=ids)
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2)], ids=str)
def test_logsumexp(d, axis):
    a = data(d) * 10
    t = cv.Tensor(a.astype(d.np))
    x = f64(a.astype(d.np))
    m = x.max(axis=axis, keepdims=True)
    ref = np.log(np.exp(x - m).sum(axis=axis, keepdims=True)) + m
    check(t.logsumexp(axis, keepdims=True), ref, d)
    check(t.logsumexp(axis), np.squeeze(ref, axis=axis) if axis is not None else ref.reshape(()), d)


def test_logsumexp_infinities():
    a = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [1000.0, 1000.0], [np.nan, 1.0]])
    ref = [-np.inf, np.inf, 1000.0 + np.log(2), np.nan]
    check(cv.Tensor(a).logsumexp(1), ref, cd.float64)


@pytest.mark.parametrize("d", [cd.float16, cd.bfloat16, cd.float32, cd.float64, cd.int32], ids=ids)
@pytest.mark.parametrize("axis", [0, -1, 1])
def test_softmax_log_softmax(d, axis):
    a = data(d) * 3
    a = a.astype(d.np)
    x = f64(a)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    sm = e / e.sum(axis=axis, keepdims=True)
    rd = d if d.is_float else cd.float32
    check(cv.Tensor(a).softmax(axis), sm, rd)
    check(cv.Tensor(a).log_softmax(axis), np.log(sm), rd)


def test_softmax_large_values():
    a = np.array([[1000.0, 1000.0, -1000.0], [-np.inf, 0.0, 0.0]], dtype=np.float32)
    check(cv.Tensor(a).softmax(), [[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]], cd.float32)


# --- empty axes and degenerate shapes --------------------------------------------------------------
def test_empty_reductions():
    e = cv.Tensor(np.zeros((3, 0), dtype=np.float32))
    check(e.sum(1), np.zeros(3), cd.float32)
    check(e.prod(1), np.ones(3), cd.float32)
    check(e.sum(0), np.zeros(0), cd.float32)
    check(e.sum(), 0.0, cd.float32)
    check(e.max(axis=0), np.zeros(0), cd.float32)  # reducing a non-empty axis of an empty tensor is fine
    check(e.any(1), np.zeros(3, dtype=bool), cd.bool_)
    check(e.all(1), np.ones(3, dtype=bool), cd.bool_)
    check(e.mean(1), np.full(3, np.nan), cd.float32)
    check(cv.Tensor(np.zeros((0, 2), dtype=np.int8)).sum(0), np.zeros(2), cd.int64)
    with pytest.raises(ValueError):
        e.max(axis=1)
    with pytest.raises(ValueError):
        e.min()
    with pytest.raises(ValueError):
        e.argmax(1)


def test_zero_dim_reductions():
    s = cv.Tensor(np.float64(2.5))
    check(s.sum(), 2.5, cd.float64)
    check(s.max(), 2.5, cd.float64)
    check(s.sum(axis=0), 2.5, cd.float64)
    check(s.mean(), 2.5, cd.float64)
    np.testing.assert_array_equal(s.argmax().numpy(), 0)
    check(s.sum(keepdims=True), 2.5, cd.float64)


def test_axis_errors():
    t = cv.Tensor(np.zeros((2, 3)))
    with pytest.raises(IndexError):
        t.sum(2)
    with pytest.raises(ValueError):
        t.sum((0, -2))


def test_sum_dtype_argument_and_overflow():
    a = np.full(300, 100, dtype=np.int8)
    check(cv.Tensor(a).sum(), 30000, cd.int64)
    check(cv.Tensor(a).sum(dtype=cv.int8), a.sum(dtype=np.int8), cd.int8)
    u = np.array([2**63, 2**63, 5], dtype=np.uint64)
    check(cv.Tensor(u).sum(), u.sum(), cd.uint64)
    f = np.ones(1000, dtype=np.float16)
    check(cv.Tensor(f).sum(dtype=cv.float32), 1000.0, cd.float32)


def test_reduce_noncontiguous_and_fused():
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5) / 16
    t = cv.Tensor(a)
    check(t.permute(2, 0, 1)[::2, :, ::-1].sum((0, 2)), a.transpose(2, 0, 1)[::2, :, ::-1].sum((0, 2)), cd.float32)
    check((t * 2 - 1).exp().sum(1).log(), np.log(np.exp(f64(a) * 2 - 1).sum(1)), cd.float32)
    check(t - t.mean(-1, keepdims=True), a - a.mean(-1, keepdims=True), cd.float32)
    check(t.max(axis=0) + t.min(axis=0), a.max(0) + a.min(0), cd.float32)
    check(t.sum(1).sum(0), a.sum(1).sum(0), cd.float32)


# --- matmul -------------------------------------------------------------------------------------------
MATMUL_SHAPES = [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
                 ((2, 1, 2, 3), (4, 3, 2)), ((1, 3), (2, 3, 1)), ((2, 0), (0, 3)), ((0, 3), (3, 2))]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
def test_matmul_shapes(sa, sb):
    a, b = data(cd.float32, sa, 1), data(cd.float32, sb, 2)
    check(cv.Tensor(a) @ cv.Tensor(b), f64(a) @ f64(b), cd.float32)


@pytest.mark.parametrize("d", [cd.bool_, cd.int8, cd.int32, cd.int64, cd.uint8, cd.float16, cd.bfloat16,
                               cd.float64], ids=ids)
def test_matmul_dtypes(d):
    a, b = data(d, (3, 4), 1), data(d, (4, 2), 2)
    if d.is_float:
        ref = f64(a) @ f64(b)
    elif d.is_bool:
        ref = (a.astype(np.int64) @ b.astype(np.int64)) > 0
    else:
        ref = np.matmul(a, b)  # wraps in the operand dtype, like numpy
    check(cv.Tensor(a).matmul(cv.Tensor(b)), ref, d)


def test_matmul_mixed_and_errors():
    a = data(cd.int16, (2, 3), 1)
    b = data(cd.float32, (3, 2), 2)
    check(cv.Tensor(a) @ cv.Tensor(b), f64(a) @ f64(b), cd.float32)
    check(a.tolist() @ cv.Tensor(b), f64(a) @ f64(b), cd.float32)
    with pytest.raises(ValueError):
        cv.Tensor(np.zeros((2, 3))) @ cv.Tensor(np.zeros((2, 3)))
    with pytest.raises(ValueError):
        cv.Tensor(np.zeros(())) @ cv.Tensor(np.zeros((2,)))
    int8_overflow = np.full((1, 4), 100, dtype=np.int8)
    check(cv.Tensor(int8_overflow) @ cv.Tensor(int8_overflow.T.copy()),
          np.matmul(int8_overflow, int8_overflow.T), cd.int8)


def test_matmul_transposed_views():
    a = data(cd.float32, (4, 3), 1)
    b = data(cd.float32, (5, 4), 2)
    ta, tb = cv.Tensor(a), cv.Tensor(b)
    check(ta.T @ tb.T, a.T @ b.T, cd.float32)
    check(ta.mT[:, ::2] @ tb.T[::2, ::-1], a.T[:, ::2] @ b.T[::2, ::-1], cd.float32)


def test_large_matmul_reads_a_packed_copy_of_b(monkeypatch):
    """Past an eighth of the last-level cache the right operand is copied into column panels first (lowered to a
    3-loop kernel over the panels); values, batching, transposed views and gradients unchanged."""
    import corvid.ops.reduce as red

    monkeypatch.setattr(red, "_PACK_LLC_FRACTION", 1 << 40)  # (any operand is past it)
    monkeypatch.setattr(red, "_PACK_MIN_ROWS", 8)
    a, b = data(cd.float64, (2, 16, 24), 1), data(cd.float64, (24, 32), 2)
    ta, tb = cv.Tensor(a, requires_grad=True), cv.Tensor(b, requires_grad=True)
    out = ta @ tb
    names = [k.name for k in out.schedule()]
    assert names[0].startswith("copy") and names[-1] == "r_32_2_16", names  # rows, panels, panel columns
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-12)
    out.sum().backward()
    np.testing.assert_allclose(ta.grad.numpy(), np.ones((2, 16, 32)) @ b.T, rtol=1e-12)
    np.testing.assert_allclose(tb.grad.numpy(), (a.transpose(0, 2, 1) @ np.ones((2, 16, 32))).sum(0), rtol=1e-12)
    check(cv.Tensor(a) @ cv.Tensor(b.T.copy()).T, a @ b, cd.float64)
    # a CPU layout trick: other devices (NULL stands for them: it schedules without running) read b as it is
    assert not any(k.name.startswith("copy") for k in (cv.Tensor(a, device="NULL") @ cv.Tensor(b, device="NULL")).schedule())
    check(cv.Tensor(a[:, :4]) @ cv.Tensor(b), a[:, :4] @ b, cd.float64)  # 4 rows: no copy pays off
    assert not (cv.Tensor(a[:, :4]) @ cv.Tensor(b)).schedule()[0].name.startswith("copy")


# --- cat / stack / split / chunk -------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cat(axis):
    a, b, c = data(cd.float32, (2, 3), 1), data(cd.float32, (2, 3), 2), data(cd.float32, (2, 3), 3)
    check(cv.cat([cv.Tensor(a), cv.Tensor(b), cv.Tensor(c)], axis), np.concatenate([a, b, c], axis), cd.float32)
    check(cv.concat([cv.Tensor(a)], axis), a, cd.float32)


def test_cat_mixed_dtypes_sizes_and_specials():
    a = np.array([[1, 2]], dtype=np.int8)
    b = np.array([[-0.0, np.nan], [np.inf, 3.5]], dtype=np.float32)
    out = cv.cat([cv.Tensor(a), cv.Tensor(b)], 0)
    check(out, np.concatenate([a.astype(np.float32), b]), cd.float32)
    assert np.signbit(out.numpy()[1, 0])
    e = np.zeros((0, 2), dtype=np.int8)
    check(cv.cat([cv.Tensor(e), cv.Tensor(a), cv.Tensor(e)]), a, cd.int8)
    with pytest.raises(ValueError):
        cv.cat([cv.Tensor(np.zeros((2, 3))), cv.Tensor(np.zeros((3, 2)))], 0)
    with pytest.raises(ValueError):
        cv.cat([])


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack(axis):
    arrs = [data(cd.int32, (2, 3), s) for s in range(3)]
    check(cv.stack([cv.Tensor(x) for x in arrs], axis), np.stack(arrs, axis), cd.int32)
    with pytest.raises(ValueError):
        cv.stack([cv.Tensor(np.zeros(2)), cv.Tensor(np.zeros(3))])


def test_split_chunk():
    a = np.arange(30, dtype=np.int16).reshape(10, 3)
    t = cv.Tensor(a)
    parts = t.split(4)
    assert [p.shape for p in parts] == [(4, 3), (4, 3), (2, 3)]
    for p, r in zip(parts, np.split(a, [4, 8])):
        check(p, r, cd.int16)
    parts = t.split([1, 0, 9])
    for p, r in zip(parts, np.split(a, [1, 1])):
        check(p, r, cd.int16)
    parts = t.split(1, axis=1)
    for p, r in zip(parts, np.split(a, 3, axis=1)):
        check(p, r, cd.int16)
    chunks = t.chunk(3)
    assert [c.shape[0] for c in chunks] == [4, 4, 2]
    chunks = t.chunk(4, axis=-1)
    assert [c.shape for c in chunks] == [(10, 1)] * 3
    check(cv.cat(t.chunk(3), 0), a, cd.int16)
    with pytest.raises(ValueError):
        t.split([3, 3])
    with pytest.raises(ValueError):
        t.chunk(0)


def test_bf16_sum_accuracy():
    a = np.ones(4096, dtype=ml_dtypes.bfloat16)
    check(cv.Tensor(a).sum(), 4096.0, cd.bfloat16)


def test_two_multi_axis_reductions_in_one_kernel():
    """Regression: merging the loops of the second multi-axis reduce of a kernel (codegen)."""
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 8
    t = cv.Tensor(a)
    x = f64(a)
    check((t - t.max()).exp().sum(), np.exp(x - x.max()).sum(), cd.float32)
    check((t - t.sum((1, 2), keepdims=True)).sum((1, 2)), (x - x.sum((1, 2), keepdims=True)).sum((1, 2)), cd.float32)


def test_a_few_rows_times_a_transposed_weight_read_it_in_place():
    """``x @ w.T`` with one row (a Linear layer at batch 1, a decode step) reads w in place: the
    transposed copy of all of w cost 15x the product. From 8 rows the copy pays and stays."""
    w = cv.Tensor(np.random.default_rng(0).standard_normal((512, 256)).astype(np.float32))
    x1 = cv.Tensor(np.random.default_rng(1).standard_normal((1, 256)).astype(np.float32))
    x8 = cv.Tensor(np.random.default_rng(2).standard_normal((8, 256)).astype(np.float32))
    assert [k.name.split("_")[0] for k in (x1 @ w.T).schedule()] == ["r"]
    assert any(k.name.startswith("copy") for k in (x8 @ w.T).schedule())
    np.testing.assert_allclose((x1 @ w.T).numpy(), x1.numpy() @ w.numpy().T, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose((x8 @ w.T).numpy(), x8.numpy() @ w.numpy().T, rtol=1e-5, atol=1e-4)

"""Tensor methods and ``nn.functional`` against PyTorch where a port of PyTorch's op tests found
corvid's values, errors or arguments wrong; and the ``cv`` functions against numpy where they
must stay numpy's. Values, dtypes and gradients (``cv.grad`` against torch autograd), with 0-d,
empty, broadcast and non-contiguous inputs.
"""

import math
import warnings

import numpy as np
import pytest

import corvid as cv
import corvid.nn.functional as F
from corvid.ops import scan
from corvid.ops.elementwise import ArgumentError

torch = pytest.importorskip("torch")
TF = torch.nn.functional

INF, NAN = math.inf, math.nan


def same(got, want, rtol=1e-6, atol=1e-6):
    """``got`` (a corvid tensor) equals ``want`` (a torch tensor): shape, dtype and values."""
    w = want.detach().numpy()
    g = got.numpy()
    assert g.shape == w.shape, (g.shape, w.shape)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)


def torch_grads(fn, *arrays):
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    fn(*leaves).sum().backward()
    return [t.grad for t in leaves]


def cv_grads(fn, *arrays):
    g = cv.grad(lambda *xs: fn(*xs).sum(), argnums=tuple(range(len(arrays))))(*(cv.Tensor(a) for a in arrays))
    return list(g)


# --- logaddexp and logcumsumexp gradients ---------------------------------------------------------------
@pytest.mark.parametrize("d", [np.float32, np.float64], ids=lambda d: d.__name__)
def test_logaddexp_splits_the_gradient_of_a_tie(d):
    a = np.array([1.0, 2.0, 0.0, -3.0, 100.0, 1.0, -INF, -INF], d)
    b = np.array([1.0, 3.0, -0.0, -3.0, -100.0, INF, 1.0, 5.0], d)
    same(cv.logaddexp(cv.Tensor(a), cv.Tensor(b)), torch.logaddexp(torch.tensor(a), torch.tensor(b)))
    np.testing.assert_allclose(cv.logaddexp(cv.Tensor(a), cv.Tensor(b)).numpy(), np.logaddexp(a, b), rtol=1e-6)
    for got, want in zip(cv_grads(cv.logaddexp, a, b), torch_grads(torch.logaddexp, a, b)):
        same(got, want)
    assert cv_grads(cv.logaddexp, a, b)[0].numpy()[0] == 0.5  # the tie: half each, not all to the first


def test_logaddexp_gradient_broadcast_and_non_contiguous():
    rng = np.random.default_rng(0)
    a = rng.integers(-2, 3, (4, 3)).astype(np.float32)  # small integers: many ties
    b = rng.integers(-2, 3, (4,)).astype(np.float32)
    fn = lambda x, y: cv.logaddexp(x.T, y)  # noqa: E731  (a transposed view against a broadcast row)
    got = cv_grads(fn, a, b)
    want = torch_grads(lambda x, y: torch.logaddexp(x.T, y), a, b)
    for g, w in zip(got, want):
        same(g, w)


def test_logcumsumexp_gradient_is_finite(monkeypatch):
    """``[0, 100]``: the triangular form's terms outside a prefix were exp(100 - 0), inf in float32,
    and their zero cotangent times inf was nan. Both lowerings are checked (the log-step one by
    forcing it)."""
    for work in (scan.TRIANGULAR_WORK, 0):
        monkeypatch.setattr(scan, "TRIANGULAR_WORK", work)
        for values in ([0.0, 100.0], [100.0, 0.0, -100.0, 50.0], [0.0, 0.0, 1.0], [3.0]):
            x = np.array(values, np.float32)
            same(cv.logcumsumexp(cv.Tensor(x), axis=0), torch.logcumsumexp(torch.tensor(x), 0), rtol=1e-6)
            (got,) = cv_grads(lambda t: t.logcumsumexp(0), x)
            assert np.isfinite(got.numpy()).all(), (work, values)
            (want,) = torch_grads(lambda t: torch.logcumsumexp(t, 0), x)
            same(got, want, rtol=1e-4, atol=1e-30)  # (torch's float32 gradient is a few ulps off: 3.99999 for 4)
        x = np.array([[0.0, 100.0, -50.0], [90.0, 0.0, 3.0], [1.0, 1.0, 1.0], [-80.0, 80.0, 0.0]], np.float32)
        for axis in (0, 1):  # along either axis of a transposed view
            (got,) = cv_grads(lambda t: t.T.logcumsumexp(axis), x)
            (want,) = torch_grads(lambda t: torch.logcumsumexp(t.T, axis), x)
            same(got, want, rtol=1e-4, atol=1e-30)


# --- var and std with correction >= N ---------------------------------------------------------------------
@pytest.mark.parametrize("c", [2, 3, 2.5], ids=str)
def test_var_std_past_the_count_divide_by_zero(c):
    """correction >= N: PyTorch and numpy divide the sum of squares by 0: inf, or nan for 0/0 (equal
    values, one element, an empty axis) and for nan or inf among the values."""
    for values in ([1.0, 2.0], [-3.0, 5.0], [1.0, 1.0], [5.0], [], [1.0, NAN], [1.0, INF]):
        x = np.array(values, np.float32)
        with warnings.catch_warnings():  # (both warn about the degrees of freedom)
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                want_np = np.var(x, ddof=c), np.std(x, ddof=c)
            want_t = torch.tensor(x).var(correction=c), torch.tensor(x).std(correction=c)
        t = cv.Tensor(x)
        for got, wn, wt in zip((t.var(correction=c), t.std(ddof=c)), want_np, want_t):
            same(got, wt)
            np.testing.assert_equal(got.item(), wn)
        np.testing.assert_equal(cv.var(t, correction=c).item(), want_np[0])
        np.testing.assert_equal(cv.std(t, correction=c).item(), want_np[1])


def test_var_past_the_count_along_an_axis():
    x = np.array([[1.0, 2.0, 4.0], [3.0, 3.0, 3.0]], np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for axis, c in ((1, 3), (0, 2), (1, 4), ((0, 1), 6)):
            want = torch.tensor(x).var(dim=axis, correction=c, keepdim=True)
            same(cv.Tensor(x).var(axis, keepdims=True, correction=c), want)
            with np.errstate(all="ignore"):
                np.testing.assert_equal(cv.var(cv.Tensor(x), axis=axis, correction=c).numpy(),
                                        np.var(x, axis=axis, ddof=c))


# --- reductions over the axis of a 0-d tensor -----------------------------------------------------------------
REDUCTIONS = {
    "sum": (lambda t, a: t.sum(a), lambda t, a: t.sum(a)),
    "prod": (lambda t, a: t.prod(a), lambda t, a: t.prod(a)),
    "mean": (lambda t, a: t.mean(a), lambda t, a: t.mean(a)),
    "max": (lambda t, a: t.max(a).values, lambda t, a: t.max(a).values),
    "min": (lambda t, a: t.min(a, keepdims=True), lambda t, a: t.amin(a, keepdim=True)),
    "var": (lambda t, a: t.var(a), lambda t, a: t.var(a)),
    "std": (lambda t, a: t.std(a, correction=1), lambda t, a: t.std(a)),
    "logsumexp": (lambda t, a: t.logsumexp(a), lambda t, a: t.logsumexp(a)),
    "softmax": (lambda t, a: t.softmax(a), lambda t, a: t.softmax(a)),
    "log_softmax": (lambda t, a: t.log_softmax(a), lambda t, a: t.log_softmax(a)),
    "argmax": (lambda t, a: t.argmax(a), lambda t, a: t.argmax(a)),
    "argmin": (lambda t, a: t.argmin(a, keepdims=True), lambda t, a: t.argmin(a, keepdim=True)),
    "any": (lambda t, a: (t > 0).any(a), lambda t, a: (t > 0).any(a)),
    "all": (lambda t, a: (t > 0).all(a), lambda t, a: (t > 0).all(a)),
    "flip": (lambda t, a: t.flip(a), lambda t, a: t.flip(a)),
    "squeeze": (lambda t, a: t.squeeze(a), lambda t, a: t.squeeze(a)),
    "transpose": (lambda t, a: t.transpose(a, 0), lambda t, a: t.transpose(a, 0)),
    "gather": (lambda t, a: t.gather(a, cv.Tensor(0)), lambda t, a: t.gather(a, torch.tensor(0))),
    "index_select": (lambda t, a: t.index_select(a, cv.Tensor([0])), lambda t, a: t.index_select(a, torch.tensor([0]))),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_a_0d_tensor_has_axis_0_and_minus_1(name):
    """PyTorch reads a 0-d tensor as one element along axis 0 (or -1); no other axis exists."""
    ours, theirs = REDUCTIONS[name]
    for axis in (-1, 0):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torch's std of one element warns)
            same(ours(cv.Tensor(np.float32(3.0)), axis), theirs(torch.tensor(3.0), axis))
    for axis in (1, -2):
        with pytest.raises(IndexError):
            theirs(torch.tensor(3.0), axis)
        with pytest.raises(IndexError, match="out of range for a tensor with 0 dimensions"):
            ours(cv.Tensor(3.0), axis)


def test_0d_reductions_in_the_cv_namespace_and_gradients():
    s = cv.Tensor(3.0)
    for fn in (cv.sum, cv.prod, cv.mean, cv.max, cv.min, cv.var, cv.std):
        assert fn(s, axis=-1).shape == fn(s, axis=(-1,), keepdims=True).shape == ()
        assert fn(s, axis=-1).item() == fn(s).item()
    assert cv.argmax(s, axis=-1).item() == 0
    assert cv.grad(lambda t: t.sum(-1) * t.mean(axis=-1))(s).item() == 6.0
    assert cv.grad(lambda t: t.logsumexp(-1))(s).item() == 1.0


# --- bitwise ops read an out-of-range Python int as the dtype's bit pattern -------------------------------------
BIT_DTYPES = [(cv.int8, torch.int8), (cv.int16, torch.int16), (cv.int32, torch.int32), (cv.int64, torch.int64),
              (cv.uint8, torch.uint8)]
BIG = [0xFFFFFFFF, 0xFF, 0x1FF, 2**40 + 1, -2**40, 2**63, 2**64 - 1, -1, 255]


@pytest.mark.parametrize("ds", BIT_DTYPES, ids=lambda ds: ds[0].name)
def test_bitwise_with_a_python_int_wraps_as_torch(ds):
    d, td = ds
    a = np.array([1, 2, 100, 0], d.np)
    ops = {"|": lambda x, v: x | v, "&": lambda x, v: x & v, "^": lambda x, v: x ^ v,
           "r|": lambda x, v: v | x, "r&": lambda x, v: v & x, "r^": lambda x, v: v ^ x}
    for v in BIG:
        for name, op in ops.items():
            same(op(cv.Tensor(a), v), op(torch.tensor(a, dtype=td), v))
    same(cv.Tensor(a).bitwise_or(0xFFFFFFFF), torch.tensor(a, dtype=td).bitwise_or(0xFFFFFFFF))
    same(cv.Tensor(a[0]) ^ 0xFFFFFFFF, torch.tensor(a[0], dtype=td) ^ 0xFFFFFFFF)  # 0-d


def test_bitwise_int_beyond_64_bits_and_arithmetic_still_raise():
    t = cv.Tensor(np.array([1, 2], np.int32))
    with pytest.raises(OverflowError):
        torch.tensor([1, 2], dtype=torch.int32) | 2**64
    with pytest.raises(OverflowError):
        t | 2**64
    with pytest.raises(OverflowError, match="out of bounds for int32"):  # numpy 2's rule for arithmetic stays
        t + 0xFFFFFFFF
    assert (t | 0xFFFFFFFF).tolist() == [-1, -1]


# --- arguments that must raise ------------------------------------------------------------------------------------
def test_clamp_without_bounds_raises_as_torch():
    x = cv.Tensor([1.0, -2.0])
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
        torch.tensor([1.0]).clamp(None, None)
    for call in (lambda: x.clamp(), lambda: x.clamp(None, None), lambda: x.clamp(min=None, max=None)):
        with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None") as e:
            call()
        assert isinstance(e.value, ValueError) and isinstance(e.value, ArgumentError)
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
        x.clip(None, None)  # (torch's Tensor.clip is its clamp)
    assert cv.clip(x).tolist() == [1.0, -2.0]  # numpy's and the Array API's clip: the identity
    a = np.array([[-1.0, 0.0, 0.5], [2.0, 1.0, -3.0]], np.float32)  # one bound is enough
    for lo, hi in ((0.0, None), (None, 1.0), (0.0, 1.0)):
        same(cv.Tensor(a).T.clamp(lo, hi), torch.tensor(a).T.clamp(lo, hi))
        (got,) = cv_grads(lambda t: t.T.clamp(lo, hi), a)
        (want,) = torch_grads(lambda t: t.T.clamp(lo, hi), a)
        same(got, want)


@pytest.mark.parametrize("axes", [(0, 0), (0, -2), (1, 1, 0)], ids=str)
def test_flip_with_a_repeated_axis_raises_runtime_error(axes):
    x = cv.zeros((2, 3))
    with pytest.raises(RuntimeError, match="appears multiple times"):
        torch.zeros(2, 3).flip(axes)
    with pytest.raises(RuntimeError, match="more than once"):
        x.flip(axes)
    with pytest.raises(ValueError, match="more than once"):  # numpy's exception class too
        cv.flip(x, axis=axes)


@pytest.mark.parametrize("exponent", [-1, -2, np.int64(-1), [1, -1, 2]], ids=repr)
@pytest.mark.parametrize("base", [[2, 1, -1], [True, False, True]], ids=str)
def test_integer_to_a_negative_integer_power_raises_as_torch(base, exponent):
    message = "Integers to negative integer powers are not allowed"
    if isinstance(exponent, list):  # known when the op is built: corvid refuses it as numpy does
        with pytest.raises(ValueError, match=message):
            np.array(base) ** np.array(exponent)
    else:  # (a tensor exponent's values are torch's kernel's business: it raises only for a scalar)
        with pytest.raises(RuntimeError, match=message):
            torch.tensor(base) ** int(exponent)
    with pytest.raises(RuntimeError, match=message) as e:
        cv.Tensor(base) ** exponent
    assert isinstance(e.value, ValueError)  # numpy raises ValueError with the same words
    with pytest.raises(RuntimeError, match=message):
        cv.Tensor(base).pow(exponent)
    assert (cv.Tensor([2, 4]) ** -1.0).tolist() == [0.5, 0.25]  # a float exponent is fine


# --- div(rounding_mode=) -------------------------------------------------------------------------------------------
FLOATS = np.array([5.0, -5.0, 7.5, -7.5, 0.0, -0.0, 1.0, INF, -INF, NAN, 3.0], np.float32)
DIVISORS = np.array([2.0, 2.0, -2.0, 2.0, 3.0, 1.0, -3.0, 2.0, INF, 1.0, 0.0], np.float32)


@pytest.mark.parametrize("mode", [None, "trunc", "floor"], ids=str)
def test_div_rounding_mode_floats(mode):
    a, b = cv.Tensor(FLOATS), cv.Tensor(DIVISORS)
    ta, tb = torch.tensor(FLOATS), torch.tensor(DIVISORS)
    same(a.div(b, rounding_mode=mode), ta.div(tb, rounding_mode=mode))
    got, want = a.div(b, rounding_mode=mode).numpy(), ta.div(tb, rounding_mode=mode).numpy()
    np.testing.assert_array_equal(np.signbit(got[got == 0]), np.signbit(want[want == 0]))  # -0.0 where torch has it
    same(a.div(2.5, rounding_mode=mode), ta.div(2.5, rounding_mode=mode))
    same(cv.Tensor(FLOATS.astype(np.float16)).div(3, rounding_mode=mode),
         torch.tensor(FLOATS.astype(np.float16)).div(3, rounding_mode=mode))
    x = FLOATS[:7].reshape(1, 7)
    same(cv.Tensor(np.repeat(x, 2, 0)).T.div(cv.Tensor([[2.0, -3.0]]), rounding_mode=mode),  # broadcast, a view
         torch.tensor(np.repeat(x, 2, 0)).T.div(torch.tensor([[2.0, -3.0]]), rounding_mode=mode))


@pytest.mark.parametrize("mode", [None, "trunc", "floor"], ids=str)
@pytest.mark.parametrize("ds", [(np.int64, torch.int64), (np.int32, torch.int32), (np.int8, torch.int8),
                                (np.uint8, torch.uint8)], ids=lambda ds: ds[0].__name__)
def test_div_rounding_mode_integers(mode, ds):
    nd, td = ds
    a = np.array([5, 7, 0, 1, 100, 3, 6], nd)
    b = np.array([2, 3, 3, 4, 7, 3, 4], nd)
    if np.issubdtype(nd, np.signedinteger):
        a, b = np.concatenate([a, -a, a, -a]), np.concatenate([b, b, -b, -b])
    same(cv.Tensor(a).div(cv.Tensor(b), rounding_mode=mode), torch.tensor(a, dtype=td).div(torch.tensor(b, dtype=td),
                                                                                          rounding_mode=mode))
    for s in (2, 3):
        same(cv.Tensor(a).div(s, rounding_mode=mode), torch.tensor(a, dtype=td).div(s, rounding_mode=mode))
    same(cv.Tensor(a).div(2.5, rounding_mode=mode), torch.tensor(a, dtype=td).div(2.5, rounding_mode=mode))
    same(cv.Tensor(a[1]).div(2, rounding_mode=mode), torch.tensor(a[1], dtype=td).div(2, rounding_mode=mode))  # 0-d


def test_div_rounding_mode_gradient_and_errors():
    a, b = np.array([5.0, -5.0, 7.5], np.float32), np.array([3.0, 2.0, -1.5], np.float32)
    for mode in ("trunc", "floor"):
        got = cv_grads(lambda x, y: x.div(y, rounding_mode=mode), a, b)
        want = torch_grads(lambda x, y: x.div(y, rounding_mode=mode), a, b)
        for g, w in zip(got, want):
            same(g, w)
    with pytest.raises(RuntimeError, match="rounding_mode"):
        torch.tensor(a).div(2, rounding_mode="round")
    with pytest.raises(RuntimeError, match="rounding_mode"):
        cv.Tensor(a).div(2, rounding_mode="round")
    assert cv.Tensor([]).div(2, rounding_mode="floor").shape == (0,)


# --- scatter(reduce=, value=) -----------------------------------------------------------------------------------------
INDEX = np.array([[0, 1, 0, 2], [2, 2, 1, 0]])


@pytest.mark.parametrize("reduce", [None, "add", "multiply"], ids=str)
@pytest.mark.parametrize("ds", [(np.float32, torch.float32), (np.int64, torch.int64)], ids=lambda ds: ds[0].__name__)
def test_scatter_reduce_and_value(reduce, ds):
    nd, td = ds
    x = np.arange(2, 14).reshape(3, 4).astype(nd)
    src = np.arange(1, 9).reshape(2, 4).astype(nd)
    kw = {} if reduce is None else {"reduce": reduce}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch deprecates reduce= with a tensor src)
        for dim, idx in ((0, INDEX), (-1, INDEX.T[:3].copy()), (1, INDEX.T[:3].copy())):
            want = torch.tensor(x, dtype=td).scatter(dim, torch.tensor(idx), torch.tensor(src.T if dim else src,
                                                                                          dtype=td), **kw)
            same(cv.Tensor(x).scatter(dim, cv.Tensor(idx), cv.Tensor(src.T if dim else src), **kw), want)
            want = torch.tensor(x, dtype=td).scatter(dim, torch.tensor(idx), value=3, **kw)
            same(cv.Tensor(x).scatter(dim, cv.Tensor(idx), value=3, **kw), want)
            same(cv.scatter(cv.Tensor(x), dim, cv.Tensor(idx), 3, **kw),
                 torch.scatter(torch.tensor(x, dtype=td), dim, torch.tensor(idx), 3, **kw))


def test_scatter_gradients_as_torch():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    src = np.arange(1, 9, dtype=np.float32).reshape(2, 4)
    weight = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = cv_grads(lambda a, s: a.scatter(0, cv.Tensor(INDEX), s) * cv.Tensor(weight), x, src)
    want = torch_grads(lambda a, s: a.scatter(0, torch.tensor(INDEX), s) * torch.tensor(weight), x, src)
    for g, w in zip(got, want):
        same(g, w)
    (got,) = cv_grads(lambda a: a.scatter(0, cv.Tensor(INDEX), value=2.0) * cv.Tensor(weight), x)
    (want,) = torch_grads(lambda a: a.scatter(0, torch.tensor(INDEX), value=2.0) * torch.tensor(weight), x)
    same(got, want)
    # torch has no derivative for scatter(reduce="add"); scatter_add is the same function
    got = cv_grads(lambda a, s: a.scatter(0, cv.Tensor(INDEX), s, reduce="add") * cv.Tensor(weight), x, src)
    want = torch_grads(lambda a, s: a.scatter_add(0, torch.tensor(INDEX), s) * torch.tensor(weight), x, src)
    for g, w in zip(got, want):
        same(g, w)


def test_scatter_argument_errors():
    x, idx = cv.zeros((3, 4)), cv.Tensor(INDEX)
    with pytest.raises(RuntimeError, match="add or multiply"):
        torch.zeros(3, 4).scatter(0, torch.tensor(INDEX), 1.0, reduce="sum")
    with pytest.raises(RuntimeError, match="'add' or 'multiply'"):
        x.scatter(0, idx, 1.0, reduce="sum")
    with pytest.raises(TypeError, match="exactly one"):
        x.scatter(0, idx)
    with pytest.raises(TypeError, match="exactly one"):
        x.scatter(0, idx, cv.ones((2, 4)), value=1.0)


# --- per-side padding for convolutions and pooling ------------------------------------------------------------
def _conv_case(nd, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3) + (5, 6, 4)[:nd]).astype(np.float32)
    w = rng.standard_normal((4, 3) + (3, 2, 2)[:nd]).astype(np.float32)
    return x, w


PER_SIDE = {1: [(0, 1), (2, 0)], 2: [(0, 1, 0, 1), (1, 0, 2, 1)], 3: [(1, 0, 0, 2, 1, 1)]}


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_takes_per_side_padding_as_f_pad(nd):
    """A flat ``2 * nd`` tuple is F.pad's (last axis first): ``conv(x, w, padding=p)`` is
    ``conv(F.pad(x, p), w)``; ``nd`` (before, after) pairs list the axes first to last."""
    x, w = _conv_case(nd)
    ours, theirs = getattr(cv, f"conv{nd}d"), getattr(TF, f"conv{nd}d")
    for p in PER_SIDE[nd]:
        pairs = tuple((p[2 * j], p[2 * j + 1]) for j in reversed(range(nd)))
        want = theirs(TF.pad(torch.tensor(x), p), torch.tensor(w), stride=2 if nd == 2 else 1)
        same(ours(cv.Tensor(x), cv.Tensor(w), padding=p, stride=2 if nd == 2 else 1), want, rtol=1e-5, atol=1e-5)
        same(getattr(F, f"conv{nd}d")(cv.Tensor(x), cv.Tensor(w), padding=pairs, stride=2 if nd == 2 else 1), want,
             rtol=1e-5, atol=1e-5)
        got = cv_grads(lambda a, b: ours(a, b, padding=p), x, w)
        want_g = torch_grads(lambda a, b: theirs(TF.pad(a, p), b), x, w)
        for g, wg in zip(got, want_g):
            same(g, wg, rtol=1e-4, atol=1e-4)


def test_conv_padding_forms_that_are_refused():
    x, w = _conv_case(2)
    for p in [(1, 2, 3), (1, -1), ((1, 2), 3), ((1, 2, 3), (0, 0)), (0, 1, 0, -1), 1.5, "full"]:
        with pytest.raises(ValueError, match="padding must be"):
            cv.conv2d(cv.Tensor(x), cv.Tensor(w), padding=p)


@pytest.mark.parametrize("p", [(0, 1, 0, 1), (1, 0, 1, 1), ((1, 0), (0, 1))], ids=str)
def test_pooling_takes_per_side_padding(p):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    flat = p if isinstance(p[0], int) else tuple(v for pair in reversed(p) for v in pair)
    tx = torch.tensor(x)
    same(F.max_pool2d(cv.Tensor(x), 2, padding=p), TF.max_pool2d(TF.pad(tx, flat, value=-INF), 2))
    same(cv.max_pool2d(cv.Tensor(x), 3, 2, padding=p), TF.max_pool2d(TF.pad(tx, flat, value=-INF), 3, 2))
    same(cv.avg_pool2d(cv.Tensor(x), 2, padding=p), TF.avg_pool2d(TF.pad(tx, flat), 2), rtol=1e-5)
    # count_include_pad=False divides by the real elements of each window
    real = TF.avg_pool2d(TF.pad(torch.ones_like(tx), flat), 2)
    same(cv.avg_pool2d(cv.Tensor(x), 2, padding=p, count_include_pad=False),
         TF.avg_pool2d(TF.pad(tx, flat), 2) / real, rtol=1e-5)
    (got,) = cv_grads(lambda t: cv.max_pool2d(t, 2, padding=p), x)
    (want,) = torch_grads(lambda t: TF.max_pool2d(TF.pad(t, flat, value=-INF), 2), x)
    same(got, want)
    with pytest.raises(ValueError, match="half the"):
        cv.max_pool2d(cv.Tensor(x), 2, padding=(0, 2, 0, 0))


# --- negative pads crop ---------------------------------------------------------------------------------------------
PAD_MODES = ["constant", "reflect", "replicate", "circular"]


@pytest.mark.parametrize("pad", [(-1, 2), (-2, -1), (2, -1), (-4, 3), (-3, 2), (-5, 1), (-6, 0)], ids=str)
def test_f_pad_negative_amounts_crop_as_torch(pad):
    """Every mode crops: reflect and replicate still read the uncropped axis, circular wraps the
    cropped one. (Constant mode cropped already.)"""
    x = np.arange(6.0, dtype=np.float32).reshape(1, 1, 6)
    for mode in PAD_MODES:
        try:
            want = TF.pad(torch.tensor(x), pad, mode=mode)
        except RuntimeError:
            with pytest.raises(ValueError):
                F.pad(cv.Tensor(x), pad, mode=mode)
            continue
        same(F.pad(cv.Tensor(x), pad, mode=mode), want)


def test_f_pad_negative_amounts_2d_view_and_gradient():
    x = np.arange(20.0, dtype=np.float32).reshape(1, 1, 5, 4)
    for mode in PAD_MODES:
        for pad in [(-1, 1, 1, -1), (-1, -1, 0, 0), (1, -2, -1, 2)]:
            same(F.pad(cv.Tensor(x).mT, pad, mode=mode), TF.pad(torch.tensor(x).mT, pad, mode=mode))
            (got,) = cv_grads(lambda t: F.pad(t, pad, mode=mode).square(), x)
            (want,) = torch_grads(lambda t: TF.pad(t, pad, mode=mode).square(), x)
            same(got, want)


def test_pad_refuses_crops_beyond_the_axis():
    x = cv.arange(6.0).reshape(1, 6)
    for mode in ("reflect", "replicate"):
        with pytest.raises(ValueError, match="cannot pad axis"):
            F.pad(x, (-7, 2), mode=mode)
    with pytest.raises(ValueError, match="crops more than the shape"):  # circular wraps the cropped axis
        F.pad(x, (-7, 2), mode="circular")
    with pytest.raises(ValueError, match="cannot pad axis"):
        F.pad(x, (-5, 2), mode="circular")
    with pytest.raises(ValueError, match="crops more than the shape"):
        F.pad(x, (-4, -3))
    assert x.pad(((0, 0), (-2, -1))).tolist() == np.arange(6.0).reshape(1, 6)[:, 2:5].tolist()


# --- exception types catchable the numpy way and the PyTorch way ----------------------------------------------
def test_shape_and_axis_errors_are_both_libraries_types():
    """A shape mismatch is a ValueError (numpy) and a RuntimeError (PyTorch); an axis out of range
    an IndexError (PyTorch) and a ValueError (numpy's AxisError); both name the problem."""
    for call, want in ((lambda: cv.ones(2, 3) @ cv.ones(2, 3), "align"),
                       (lambda: cv.ones(2, 3) + cv.ones(4), "broadcast"),
                       (lambda: cv.ones(6).reshape(4, 2), "cannot reshape"),
                       (lambda: cv.nn.Linear(4, 2)(cv.ones(3, 5)), "expected an input")):
        with pytest.raises(RuntimeError, match=want) as e:
            call()
        assert isinstance(e.value, ValueError) and isinstance(e.value, cv.ShapeError)
    with pytest.raises(RuntimeError):
        torch.ones(2, 3) @ torch.ones(2, 3)  # (the type PyTorch code catches)
    for call in (lambda: cv.ones(2, 3).sum(axis=5), lambda: cv.ones(2, 3).softmax(-3)):
        with pytest.raises(IndexError, match="out of range") as e:
            call()
        assert isinstance(e.value, ValueError) and isinstance(e.value, cv.AxisError)
    with pytest.raises(IndexError):
        torch.ones(2, 3).sum(5)


def test_the_namespace_bitwise_functions_keep_numpys_overflow_error():
    """``int32 | 0xFFFFFFFF`` wraps on the Tensor operator (PyTorch); ``cv.bitwise_or`` raises as numpy 2's does."""
    a = np.array([1, -2], np.int32)
    for fn in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        with pytest.raises(OverflowError):
            getattr(np, fn)(a, 0xFFFFFFFF)
        with pytest.raises(OverflowError, match="out of bounds for int32"):
            getattr(cv, fn)(cv.Tensor(a), 0xFFFFFFFF)
        assert getattr(cv, fn)(cv.Tensor(a), 5).tolist() == getattr(np, fn)(a, 5).tolist()
    assert (cv.Tensor(a) | 0xFFFFFFFF).tolist() == (torch.tensor(a) | 0xFFFFFFFF).tolist()


def test_convolution_modules_take_per_side_padding():
    """``nn.Conv2d(padding=(left, right, top, bottom))``, F.pad's order, in every padding mode:
    torch's module on the padded input (torch's module takes only symmetric padding)."""
    x = np.random.default_rng(0).standard_normal((1, 2, 6, 7)).astype(np.float32)
    for mode, tmode in (("zeros", "constant"), ("reflect", "reflect"), ("circular", "circular")):
        m = cv.nn.Conv2d(2, 3, 3, padding=(0, 1, 2, 0), padding_mode=mode)
        ref = torch.nn.Conv2d(2, 3, 3)
        ref.weight.data, ref.bias.data = torch.tensor(m.weight.numpy()), torch.tensor(m.bias.numpy())
        want = ref(torch.nn.functional.pad(torch.tensor(x), (0, 1, 2, 0), mode=tmode)).detach().numpy()
        np.testing.assert_allclose(m(cv.Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)
    assert cv.nn.Conv2d(2, 3, 3, padding=(1, 1, 2, 2)).padding == (2, 1)  # (symmetric: the usual form)
    with pytest.raises(ValueError, match="padding"):
        cv.nn.Conv2d(2, 3, 3, padding=(1, 2, 3))


def test_fixed_rank_pooling_takes_torchs_keyword_names():
    """``F.avg_pool2d(x, kernel_size=2)`` and ``output_size=`` work as in PyTorch (the size was a
    positional-only ``size``: TypeError)."""
    x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    t = torch.tensor(x)
    for name in ("max_pool2d", "avg_pool2d"):
        got = getattr(F, name)(cv.Tensor(x), kernel_size=2, stride=1).numpy()
        np.testing.assert_allclose(got, getattr(torch.nn.functional, name)(t, kernel_size=2, stride=1).numpy())
        np.testing.assert_allclose(getattr(cv, name)(cv.Tensor(x), kernel_size=(2, 1)).numpy(),
                                   getattr(torch.nn.functional, name)(t, kernel_size=(2, 1)).numpy())
    for name in ("adaptive_avg_pool2d", "adaptive_max_pool2d"):
        got = getattr(F, name)(cv.Tensor(x), output_size=(2, 3)).numpy()
        np.testing.assert_allclose(got, getattr(torch.nn.functional, name)(t, output_size=(2, 3)).numpy())
    np.testing.assert_allclose(cv.avg_pool1d(cv.Tensor(x[0]), kernel_size=2).numpy(),
                               torch.nn.functional.avg_pool1d(t[0], kernel_size=2).numpy())

"""Elementwise ops against numpy, for every dtype each op supports.

References are computed by numpy: in the tensor's own dtype for integer/bool ops (exact, wrapping
like C), and in float64 for float math, then compared with a tolerance that fits the dtype.
float16/bfloat16 are computed in float32 inside fused kernels and rounded only at the store, so
they are compared with a relative tolerance of 1e-2.

Documented corvid behaviour that differs from numpy and is tested as such:
* integer ``**`` with a negative integer exponent gives 0 (1 for base 1, +-1 for base -1) instead
  of raising;
* math functions of integer/bool tensors compute in float32 (numpy: float64 / float16 by width);
* ``bool % bool`` and ``bool // bool`` give int8, as numpy does.
"""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corvid as cv
from corvid import dtype as cd

BOOL = [cd.bool_]
SIGNED = [cd.int8, cd.int16, cd.int32, cd.int64]
UNSIGNED = [cd.uint8, cd.uint16, cd.uint32, cd.uint64]
INTS = SIGNED + UNSIGNED
FLOATS = [cd.float16, cd.bfloat16, cd.float32, cd.float64]
ALL = BOOL + INTS + FLOATS
ids = lambda d: d.name  # noqa: E731


def tol(d):
    if d in (cd.float16, cd.bfloat16):
        return dict(rtol=1e-2, atol=1e-2)
    if d is cd.float32:
        return dict(rtol=2e-5, atol=1e-6)
    return dict(rtol=1e-12, atol=1e-13)


def samples(d, which=0):
    """A small 1-d array of edge and ordinary values of dtype ``d``."""
    if d.is_bool:
        return np.array([True, False, True, True, False, False, True, False][which:] +
                        [False, True, True, False, True, False, False, True][:which], dtype=bool)
    if d.is_int:
        info = np.iinfo(d.np)
        base = [info.min, info.max, 0, 1, 2, 3, 7, 100 % (info.max + 1), info.max - 1, 5]
        if info.min < 0:
            base += [-1, -2, -7, info.min + 1, -100 % (info.max + 1) * -1]
        else:
            base += [info.max // 2, 9, 11, 13, 64]
        arr = np.array(base, dtype=object)
        return np.roll(arr, which).astype(d.np)
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.75, -0.3, 10.0, 1.5, np.nan, np.inf, -np.inf, 2.0, -7.0]
    return np.roll(np.array(vals, dtype=np.float64), which).astype(d.np)


def f64(a):
    return np.asarray(a).astype(np.float64)


def check(out, expected, d=None, signed_zero=False):
    d = d or out.dtype
    got = out.numpy()
    assert out.dtype is d, (out.dtype, d)
    assert got.shape == np.shape(expected)
    if d.is_float:
        exp = np.asarray(expected).astype(d.np)
        np.testing.assert_allclose(f64(got), f64(exp), equal_nan=True, **tol(d))
        if signed_zero:
            z = f64(exp) == 0
            assert (np.signbit(f64(got))[z] == np.signbit(f64(exp))[z]).all(), (got, exp)
    else:
        np.testing.assert_array_equal(got, np.asarray(expected).astype(d.np))


# --- arithmetic -------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", INTS + FLOATS, ids=ids)
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_add_sub_mul(op, d):
    a, b = samples(d), samples(d, 3)
    fn = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y}[op]
    if d.is_float:
        exp = fn(f64(a), f64(b))
    else:
        with np.errstate(over="ignore"):
            exp = fn(a, b)  # wraps
    check(fn(cv.Tensor(a), cv.Tensor(b)), exp, d, signed_zero=True)


def test_bool_add_mul_are_or_and():
    a, b = samples(cd.bool_), samples(cd.bool_, 3)
    check(cv.Tensor(a) + cv.Tensor(b), a | b, cd.bool_)
    check(cv.Tensor(a) * cv.Tensor(b), a & b, cd.bool_)
    with pytest.raises(TypeError):
        cv.Tensor(a) - cv.Tensor(b)
    with pytest.raises(TypeError):
        -cv.Tensor(a)


@pytest.mark.parametrize("d", BOOL + INTS + FLOATS, ids=ids)
def test_truediv(d):
    a, b = samples(d), samples(d, 3)
    out = cv.Tensor(a) / cv.Tensor(b)
    rd = d if d.is_float else cd.float32
    with np.errstate(all="ignore"):
        exp = f64(a) / f64(b)
    check(out, exp, rd, signed_zero=True)


@pytest.mark.parametrize("d", INTS + FLOATS, ids=ids)
def test_floordiv_mod(d):
    a, b = samples(d), samples(d, 3)
    if d.is_float:
        with np.errstate(all="ignore"):
            ef, em = np.floor_divide(f64(a), f64(b)), np.remainder(f64(a), f64(b))
            # (an infinite operand over a finite one or the reverse: the Array API's quotient, a / b,
            # where numpy gives Python's nan and -1)
            ef = np.where(np.isinf(f64(a)) != np.isinf(f64(b)), f64(a) / f64(b), ef)
    else:
        # integer division by zero gives 0 (numpy too); INT_MIN // -1 wraps to INT_MIN, % gives 0
        with np.errstate(all="ignore"):
            ef, em = np.floor_divide(a, b), np.remainder(a, b)
    check(cv.Tensor(a) // cv.Tensor(b), ef, d, signed_zero=d is not cd.bfloat16)
    check(cv.Tensor(a) % cv.Tensor(b), em, d, signed_zero=d is not cd.bfloat16)


@pytest.mark.parametrize("d", SIGNED, ids=ids)
def test_int_min_div_minus_one(d):
    info = np.iinfo(d.np)
    a = cv.Tensor(np.array([info.min, info.min, 7, -7, 0], dtype=d.np))
    b = cv.Tensor(np.array([-1, 0, 0, -1, -1], dtype=d.np))
    np.testing.assert_array_equal((a // b).numpy(), np.array([info.min, 0, 0, 7, 0], dtype=d.np))
    np.testing.assert_array_equal((a % b).numpy(), np.zeros(5, dtype=d.np))


def test_bool_floordiv_mod_give_int8():
    a = cv.Tensor([True, True, False, False])
    b = cv.Tensor([True, False, True, False])
    check(a // b, np.array([1, 0, 0, 0]), cv.int8)
    check(a % b, np.array([0, 0, 0, 0]), cv.int8)


@pytest.mark.parametrize("d", INTS, ids=ids)
def test_int_pow(d):
    a = samples(d)
    e = np.array([0, 1, 2, 3, 5, 7, 63, 64, 2, 3, 1, 0, 2, 9, 4][:len(a)], dtype=d.np)
    with np.errstate(all="ignore"):
        exp = np.power(a, e)
    check(cv.Tensor(a) ** cv.Tensor(e), exp, d)


@pytest.mark.parametrize("d", SIGNED, ids=ids)
def test_int_pow_negative_exponent_documented(d):
    a = cv.Tensor(np.array([1, -1, -1, 2, -3, 0, 5], dtype=d.np))
    e = cv.Tensor(np.array([-3, -3, -2, -1, -2, -1, -100], dtype=d.np))
    np.testing.assert_array_equal((a ** e).numpy(), np.array([1, -1, 1, 0, 0, 0, 0], dtype=d.np))


@pytest.mark.parametrize("d", FLOATS, ids=ids)
def test_float_pow(d):
    a, b = samples(d), samples(d, 4)
    with np.errstate(all="ignore"):
        exp = np.power(f64(a), f64(b))
    check(cv.Tensor(a) ** cv.Tensor(b), exp, d)


@pytest.mark.parametrize("d", INTS + FLOATS, ids=ids)
def test_neg_abs_sign(d):
    a = samples(d)
    with np.errstate(over="ignore"):
        if d.is_float:
            check(-cv.Tensor(a), -f64(a), d, signed_zero=True)
            check(abs(cv.Tensor(a)), np.abs(f64(a)), d, signed_zero=True)
            check(cv.sign(cv.Tensor(a)), np.sign(f64(a)), d, signed_zero=True)  # (the method is PyTorch's: nan -> 0)
        else:
            check(-cv.Tensor(a), -a, d)
            check(cv.Tensor(a).abs(), np.abs(a), d)
            check(cv.Tensor(a).sign(), np.sign(a), d)


def test_bool_abs_sign():
    a = samples(cd.bool_)
    check(cv.Tensor(a).abs(), a, cd.bool_)
    check(cv.Tensor(a).sign(), a, cd.bool_)


# --- float math ---------------------------------------------------------------------------------
def _np_ref(name):
    return {
        "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
        "expm1": np.expm1, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "reciprocal": lambda x: 1 / x,
        "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
        "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
        "atanh": np.arctanh, "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc,
        "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0),
        "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2))),
        "silu": lambda x: x / (1 + np.exp(-x)),
        "softplus": lambda x: np.logaddexp(0, x),
        "erf": np.vectorize(math.erf),
    }[name]


UNARY = ["exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
         "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "floor", "ceil",
         "round", "trunc", "sigmoid", "relu", "gelu", "silu", "softplus"]


def _unary_input(name, d):
    a = samples(d)
    if name in ("asin", "acos", "atanh"):  # mostly inside the domain
        a = np.array([0.0, -0.0, 0.5, -0.5, 0.9, -0.9, 1.0, -1.0, 2.0, np.nan, 0.25, np.inf], dtype=np.float64)
    if name in ("acosh",):
        a = np.array([1.0, 1.5, 2.0, 10.0, 100.0, 0.5, np.nan, np.inf, -1.0], dtype=np.float64)
    if name == "round":
        a = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, -0.0, 0.0, 3.7, -3.7, np.nan, np.inf, 1e6 + 0.5])
    return a.astype(d.np)


@pytest.mark.parametrize("d", FLOATS, ids=ids)
@pytest.mark.parametrize("name", UNARY)
def test_unary_float(name, d):
    a = _unary_input(name, d)
    with np.errstate(all="ignore"):
        exp = _np_ref(name)(f64(a))
    out = getattr(cv.Tensor(a), name)()
    sz = name in ("floor", "ceil", "trunc", "round", "sqrt", "sin", "tan", "asin", "atan", "sinh", "tanh",
                  "asinh", "atanh", "expm1", "log1p")
    if d is cv.bfloat16 and name == "round":
        exp = np.round(f64(a))  # the input 1e6+0.5 is rounded to bf16 already
    check(out, exp, d, signed_zero=sz)


@pytest.mark.parametrize("d", BOOL + INTS, ids=ids)
@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin", "tanh", "sigmoid", "reciprocal", "rsqrt"])
def test_unary_math_on_ints_gives_float32(name, d):
    a = samples(d) if not d.is_int else np.clip(samples(d), -50, 50).astype(d.np)
    with np.errstate(all="ignore"):
        exp = _np_ref(name)(f64(a))
    check(getattr(cv.Tensor(a), name)(), exp, cd.float32)


@pytest.mark.parametrize("d", BOOL + INTS, ids=ids)
@pytest.mark.parametrize("name", ["floor", "ceil", "round", "trunc"])
def test_rounding_ints_is_identity(name, d):
    a = samples(d)
    check(getattr(cv.Tensor(a), name)(), a, d)


def test_round_decimals():
    a = np.array([1.2345, -2.5678, 0.125, 10.05], dtype=np.float64)
    check(cv.Tensor(a).round(2), np.round(a, 2), cv.float64)


def test_relu_int_and_gelu_tanh():
    a = np.array([-3, -1, 0, 2, 5], dtype=np.int32)
    check(cv.Tensor(a).relu(), np.maximum(a, 0), cv.int32)
    x = np.linspace(-5, 5, 11)
    ref = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    check(cv.Tensor(x).gelu(approximate="tanh"), ref, cv.float64)
    # softplus must not overflow for large inputs
    big = np.array([-1000.0, -30.0, 0.0, 30.0, 1000.0], dtype=np.float32)
    check(cv.Tensor(big).softplus(), np.logaddexp(0, f64(big)), cv.float32)
    check(cv.Tensor(big).softplus(beta=2.0), np.logaddexp(0, 2 * f64(big)) / 2, cv.float32)


@pytest.mark.parametrize("d", FLOATS, ids=ids)
def test_atan2(d):
    a, b = samples(d), samples(d, 5)
    check(cv.Tensor(a).atan2(cv.Tensor(b)), np.arctan2(f64(a), f64(b)), d, signed_zero=True)


def test_atan2_ints_give_float32():
    a, b = np.array([1, -1, 0, 3], dtype=np.int16), np.array([0, 2, -1, 4], dtype=np.int16)
    check(cv.Tensor(a).atan2(cv.Tensor(b)), np.arctan2(f64(a), f64(b)), cv.float32)


# --- maximum / minimum / clip / where -----------------------------------------------------------------
@pytest.mark.parametrize("d", ALL, ids=ids)
def test_maximum_minimum(d):
    a, b = samples(d), samples(d, 3)
    if d.is_float:
        ea, eb = np.maximum(f64(a), f64(b)), np.minimum(f64(a), f64(b))
    else:
        ea, eb = np.maximum(a, b), np.minimum(a, b)
    check(cv.Tensor(a).maximum(cv.Tensor(b)), ea, d)
    check(cv.Tensor(a).minimum(cv.Tensor(b)), eb, d)


@pytest.mark.parametrize("d", INTS + FLOATS, ids=ids)
def test_clip(d):
    a = samples(d)
    lo, hi = (0, 5) if d.is_int else (-1.0, 2.5)
    exp = np.clip(f64(a), lo, hi) if d.is_float else np.clip(a, lo, hi)
    check(cv.Tensor(a).clip(lo, hi), exp, d)
    check(cv.Tensor(a).clip(min=lo), np.maximum(f64(a) if d.is_float else a, lo), d)
    check(cv.Tensor(a).clip(max=hi), np.minimum(f64(a) if d.is_float else a, hi), d)


@pytest.mark.parametrize("d", ALL, ids=ids)
def test_where(d):
    a, b = samples(d), samples(d, 2)
    c = samples(cd.bool_, 1)[: len(a)]
    c = np.resize(c, a.shape)
    check(cv.where(cv.Tensor(c), cv.Tensor(a), cv.Tensor(b)), np.where(c, a, b), d, signed_zero=True)


def test_where_broadcast_and_scalars():
    c = np.array([[True], [False]])
    a = np.arange(3, dtype=np.int8)
    out = cv.where(cv.Tensor(c), cv.Tensor(a), 5)
    check(out, np.where(c, a, 5), cv.int8)
    out = cv.Tensor(a).where(cv.Tensor(c), 1.5)  # PyTorch's method: self where condition, else other
    check(out, np.where(c, a, 1.5), cv.float32)
    # cond given as an int tensor
    ci = np.array([0, 2, -1], dtype=np.int32)
    check(cv.where(cv.Tensor(ci), 1.0, 0.0), np.where(ci != 0, 1.0, 0.0), cv.float32)


# --- comparisons ---------------------------------------------------------------------------------------
CMPS = {"lt": lambda x, y: x < y, "le": lambda x, y: x <= y, "gt": lambda x, y: x > y,
        "ge": lambda x, y: x >= y, "eq": lambda x, y: x == y, "ne": lambda x, y: x != y}


@pytest.mark.parametrize("d", ALL, ids=ids)
@pytest.mark.parametrize("op", list(CMPS))
def test_comparisons(op, d):
    a, b = samples(d), samples(d, 3)
    b[::3] = a[::3]
    fn = CMPS[op]
    check(fn(cv.Tensor(a), cv.Tensor(b)), fn(a, b), cd.bool_)


def test_comparisons_with_scalars_and_reflected():
    a = np.array([-2, 0, 3, 5], dtype=np.int8)
    t = cv.Tensor(a)
    check(t < 3, a < 3, cd.bool_)
    check(3 < t, 3 < a, cd.bool_)
    check(t >= 0.5, a >= 0.5, cd.bool_)
    check(2 >= t, 2 >= a, cd.bool_)
    check(t == 0, a == 0, cd.bool_)
    check(0 != t, 0 != a, cd.bool_)
    u = cv.Tensor(np.array([0, 200, 255], dtype=np.uint8))
    check(u > 100, np.array([False, True, True]), cd.bool_)


def test_mixed_sign_compare():
    a = np.array([-1, 0, 5], dtype=np.int64)
    b = np.array([2**64 - 1, 0, 3], dtype=np.uint64)
    # int64 vs uint64 promotes to float64 (lattice), as numpy does
    check(cv.Tensor(a) < cv.Tensor(b), a.astype(np.float64) < b.astype(np.float64), cd.bool_)
    c = np.array([-1, 0, 100], dtype=np.int8)
    e = np.array([255, 0, 99], dtype=np.uint8)
    check(cv.Tensor(c) < cv.Tensor(e), c.astype(np.int16) < e.astype(np.int16), cd.bool_)


# --- logic and bits -----------------------------------------------------------------------------------
@pytest.mark.parametrize("d", BOOL + INTS, ids=ids)
def test_bitwise(d):
    a, b = samples(d), samples(d, 3)
    ta, tb = cv.Tensor(a), cv.Tensor(b)
    check(ta & tb, a & b, d)
    check(ta | tb, a | b, d)
    check(ta ^ tb, a ^ b, d)
    check(~ta, ~a, d)
    check(ta.bitwise_and(tb), a & b, d)


@pytest.mark.parametrize("d", FLOATS, ids=ids)
def test_bitwise_on_floats_raises(d):
    t = cv.Tensor(np.ones(2, dtype=d.np))
    for fn in (lambda x: x & x, lambda x: x | x, lambda x: x ^ x, lambda x: ~x, lambda x: x << 1):
        with pytest.raises(TypeError):
            fn(t)


@pytest.mark.parametrize("d", INTS, ids=ids)
def test_shifts(d):
    bits = d.itemsize * 8
    a = samples(d)
    s = np.array([0, 1, 3, bits - 1, bits, bits + 1, 2 * bits, 5, 1, 7, 2, bits - 2, 4, 6, 0][:len(a)], dtype=d.np)
    ta, ts = cv.Tensor(a), cv.Tensor(s)
    # numpy: shifting by >= the bit width gives 0 (left) or the sign fill (right)
    check(ta << ts, np.left_shift(a, s), d)
    check(ta >> ts, np.right_shift(a, s), d)
    check(ta << 2, np.left_shift(a, np.array(2, dtype=d.np)), d)
    check(1 << ts, np.left_shift(np.ones_like(s), s), d)
    check(ta.bitwise_left_shift(ts), np.left_shift(a, s), d)
    check(ta.bitwise_right_shift(ts), np.right_shift(a, s), d)


@pytest.mark.parametrize("d", [cd.bool_, cd.int16, cd.float32], ids=ids)
def test_logical(d):
    a, b = samples(d), samples(d, 3)
    ta, tb = cv.Tensor(a), cv.Tensor(b)
    check(ta.logical_and(tb), np.logical_and(a, b), cd.bool_)
    check(ta.logical_or(tb), np.logical_or(a, b), cd.bool_)
    check(ta.logical_xor(tb), np.logical_xor(a, b), cd.bool_)
    check(ta.logical_not(), np.logical_not(a), cd.bool_)
    check(ta.logical_and(True), np.logical_and(a, True), cd.bool_)


@pytest.mark.parametrize("d", ALL, ids=ids)
def test_isnan_isinf_isfinite(d):
    a = samples(d)
    t = cv.Tensor(a)
    fa = f64(a)
    check(t.isnan(), np.isnan(fa), cd.bool_)
    check(t.isinf(), np.isinf(fa), cd.bool_)
    check(t.isfinite(), np.isfinite(fa), cd.bool_)


# --- promotion, broadcasting, Python operators --------------------------------------------------------
@pytest.mark.parametrize("d", INTS + FLOATS, ids=ids)
def test_weak_python_scalars(d):
    t = cv.Tensor(np.array([1, 2, 3], dtype=d.np))
    assert (t + 1).dtype is d
    assert (1 + t).dtype is d
    assert (t * 2).dtype is d
    assert (t + 1.5).dtype is (d if d.is_float else cd.float32)
    assert (t + True).dtype is d
    assert (t < 1).dtype is cd.bool_
    assert (t / 2).dtype is (d if d.is_float else cd.float32)


def test_bool_with_weak_scalars():
    t = cv.Tensor([True, False])
    assert (t + 1).dtype is cd.int64
    check(t + 1, np.array([2, 1]), cd.int64)
    assert (t * 1.5).dtype is cd.float32
    check(t * 1.5, np.array([1.5, 0.0]), cd.float32)


def test_strong_promotion():
    pairs = [(np.int8, np.uint8, np.int16), (np.int32, np.float16, np.float16), (np.uint64, np.int64, np.float64),
             (np.int16, np.int64, np.int64), (np.float16, np.float32, np.float32), (np.uint8, np.uint32, np.uint32)]
    for x, y, z in pairs:
        a = np.array([1, 2, 3], dtype=x)
        b = np.array([4, 5, 6], dtype=y)
        out = cv.Tensor(a) + cv.Tensor(b)
        assert out.dtype is cd.from_numpy(np.dtype(z))
        np.testing.assert_array_equal(out.numpy(), (a.astype(z) + b.astype(z)))
    bf = cv.Tensor(np.array([1.5], dtype=ml_dtypes.bfloat16))
    h = cv.Tensor(np.array([2.0], dtype=np.float16))
    assert (bf + h).dtype is cv.float32
    check(bf + h, np.array([3.5]), cv.float32)


def test_int8_wraparound_with_weak_scalar():
    t = cv.Tensor(np.array([127, -128, 100], dtype=np.int8))
    check(t + 1, np.array([-128, -127, 101]), cv.int8)
    check(t * 2, np.array([-2, 0, -56]), cv.int8)
    u = cv.Tensor(np.array([0, 255], dtype=np.uint8))
    check(u - 1, np.array([255, 254]), cv.uint8)
    check(-u, np.array([0, 1]), cv.uint8)


def test_reflected_operators():
    a = np.array([1.0, 2.0, -4.0, 0.5], dtype=np.float32)
    t = cv.Tensor(a)
    check(2 - t, 2 - a, cv.float32)
    check(2 + t, 2 + a, cv.float32)
    check(3 * t, 3 * a, cv.float32)
    check(2 / t, 2 / a, cv.float32)
    check(7 // t, 7 // a, cv.float32)
    check(7 % t, 7 % a, cv.float32)
    check(2 ** t, 2.0 ** a, cv.float32)
    check(t ** 2, a ** 2, cv.float32)
    check(+t, a, cv.float32)
    i = np.array([1, 2, 3, -4], dtype=np.int16)
    ti = cv.Tensor(i)
    check(10 - ti, 10 - i, cv.int16)
    check(10 // ti, 10 // i, cv.int16)
    check(10 % ti, 10 % i, cv.int16)
    check(2 ** cv.Tensor(np.array([0, 1, 5], dtype=np.int16)), np.array([1, 2, 32]), cv.int16)
    check(5 & ti, 5 & i, cv.int16)
    check(5 | ti, 5 | i, cv.int16)
    check(5 ^ ti, 5 ^ i, cv.int16)
    check(1 << cv.Tensor(np.array([0, 3], dtype=np.int16)), np.array([1, 8]), cv.int16)
    check(256 >> cv.Tensor(np.array([0, 3], dtype=np.int16)), np.array([256, 32]), cv.int16)
    check(1.5 - ti, 1.5 - i, cv.float32)
    # numpy arrays on the left defer to the tensor
    out = np.float32(2.0) - t
    assert isinstance(out, cv.Tensor)
    out = a - t
    assert isinstance(out, cv.Tensor)
    check(out, np.zeros(4), cv.float32)


def test_broadcasting():
    a = np.arange(6, dtype=np.float32).reshape(3, 1, 2)
    b = np.arange(4, dtype=np.float32).reshape(4, 1) - 3
    check(cv.Tensor(a) * cv.Tensor(b), a * b, cv.float32)
    check(cv.Tensor(a) - cv.Tensor(np.float32(2.0)), a - 2, cv.float32)
    c = np.arange(2, dtype=np.int32)
    check(cv.Tensor(a) + cv.Tensor(c), a + c, cv.float32)
    check(cv.Tensor(a).maximum(cv.Tensor(b)), np.maximum(a, b), cv.float32)
    check(cv.Tensor(a) + [1.0, 2.0], a + np.array([1.0, 2.0], dtype=np.float32), cv.float32)
    with pytest.raises(ValueError):
        cv.Tensor(np.zeros((3, 2))) + cv.Tensor(np.zeros((4,)))


def test_zero_dim_and_empty():
    s = cv.Tensor(np.float64(3.5))
    assert s.shape == ()
    check(s * 2 + 1, np.float64(8.0), cv.float64)
    check(s.exp(), np.exp(3.5), cv.float64)
    e = cv.Tensor(np.zeros((0, 3), dtype=np.int32))
    out = e + 1
    assert out.shape == (0, 3)
    assert out.numpy().shape == (0, 3)
    check((e * e).exp(), np.zeros((0, 3)), cv.float32)
    check(cv.Tensor(np.zeros((2, 0))) < cv.Tensor(np.zeros((1, 0))), np.zeros((2, 0), dtype=bool), cd.bool_)
    check(cv.Tensor(np.zeros((4, 1))) + cv.Tensor(np.zeros((0,))), np.zeros((4, 0)), cv.float64)


def test_unsupported_operand():
    with pytest.raises(TypeError):
        cv.Tensor([1.0]) + "a"
    with pytest.raises(TypeError):
        cv.Tensor([1.0]) + object()


def test_fused_chain_matches_numpy():
    a = np.linspace(-3, 3, 13, dtype=np.float32)
    t = cv.Tensor(a)
    out = ((t * 2 + 1).exp() / (1 + t.abs())).log1p().tanh() - t.sigmoid()
    x = f64(a)
    ref = np.tanh(np.log1p(np.exp(x * 2 + 1) / (1 + np.abs(x)))) - 1 / (1 + np.exp(-x))
    check(out, ref, cv.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exp_through_its_underflow_range_matches_numpy(dtype):
    """exp shifts arguments whose result underflows (to keep libmvec's vector exp off its scalar
    fallback, render/c.py): zeros, subnormals, -inf, nan and the edges must still match numpy."""
    edges = [-np.inf, -1e30, -1000, -760, -745.2, -744, -720, -708.5, -708, -707.9, -200, -104, -103.9,
             -103.3, -100, -90, -87.4, -87.0, -86.99, -1, -0.0, 0, 1, 80, 88.7, np.inf, np.nan]
    x = np.array(edges, dtype)
    x = np.concatenate([x, np.linspace(-120 if dtype == np.float32 else -760, -60, 1001).astype(dtype)])
    got = cv.Tensor(x).exp().numpy()
    with np.errstate(over="ignore"):
        want = np.exp(x)
    np.testing.assert_array_max_ulp(got, want, maxulp=4)  # (libmvec: a few ulp in float32)


# --- Python ints beyond an integer dtype's range ------------------------------------------------------------
_CMP = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.sampled_from(INTS), st.integers(-(2**70), 2**70) | st.sampled_from([-1, 2**63, 2**64, -2**63 - 1, 256, -129]),
       st.sampled_from(sorted(_CMP)), st.booleans())
def test_comparisons_with_any_python_int_are_exact(d, value, op, reflected):
    """A comparison with a Python int outside the dtype's range is answered exactly (as numpy 2
    does), not after wrapping the int into the dtype (2**64 as 0, -1 as 255); checked against
    Python's own comparisons of the elements' exact values."""
    info = np.iinfo(d.np)
    a = np.array([info.min, info.min + 1, -1 if info.min else 0, 0, 1, info.max - 1, info.max], dtype=d.np)
    t = cv.Tensor(a)
    got = (_CMP[op](value, t) if reflected else _CMP[op](t, value)).numpy()
    want = [(_CMP[op](value, int(v)) if reflected else _CMP[op](int(v), value)) for v in a]
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("d", INTS, ids=ids)
def test_arithmetic_with_a_python_int_beyond_the_dtype_raises(d):
    """numpy 2 and JAX refuse a Python int that the operation's dtype cannot hold; a C cast would
    wrap it silently (x + 2**64 would add 0)."""
    info = np.iinfo(d.np)
    t = cv.Tensor(np.array([1, 2], dtype=d.np))
    for big in (info.max + 1, info.min - 1, 2**70):
        for f in (lambda: t + big, lambda: big - t, lambda: t * big, lambda: cv.maximum(t, big),
                  lambda: cv.where(t > 1, t, big), lambda: t // big):
            with pytest.raises(OverflowError, match="out of bounds for " + d.name):
                f()
    np.testing.assert_array_equal((t + info.max).numpy(), np.array([1, 2], d.np) + np.array(info.max, d.np))
    # a bound beyond the range clips nothing on that side (numpy 2)
    np.testing.assert_array_equal(t.clip(info.min - 1, info.max + 1).numpy(), [1, 2])
    np.testing.assert_array_equal(t.clip(-2**70, 1).numpy(), [1, 1])


def test_python_int_fills_beyond_64_bits_raise():
    """An explicit integer dtype converts a fill value as a C cast (as PyTorch: -1 as uint8 is 255);
    an inferred one (int64) must hold it; nothing wraps a value no 64-bit integer holds."""
    assert cv.full(2, -1, dtype=cv.uint8).tolist() == [255, 255]
    assert cv.Tensor(2**64 - 1, dtype=cv.uint64).item() == 2**64 - 1
    for f in (lambda: cv.full(2, 2**64, dtype=cv.uint64), lambda: cv.full(2, 2**63),
              lambda: cv.Tensor(2**70), lambda: cv.Tensor(-2**63 - 1, dtype=cv.int64)):
        with pytest.raises(OverflowError, match="out of bounds"):
            f()


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64])
def test_round_integers_to_negative_decimals(dtype):
    """Integers round to a multiple of 10**-decimals, half to even, exactly, wrapping where the
    multiple overflows (they came back unchanged); numpy agrees where its float64 path is exact."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(3)
    a = rng.integers(info.min, info.max, 200, dtype=dtype, endpoint=True)
    a[:6] = [info.min, info.max, 0, 5, 15, 25]
    bits = 8 * np.dtype(dtype).itemsize
    for decimals in (-1, -2, -3, -25, 0, 2):
        f = 10 ** max(-decimals, 0)
        want = []
        for v in a.tolist():
            q, r = divmod(v, f)
            m = (q + (r > f // 2 or (r == f // 2 and q % 2 == 1 and f > 1))) * f
            m %= 2 ** bits  # wrap
            want.append(m - 2 ** bits if info.min < 0 and m > info.max else m)
        got = cv.round(cv.Tensor(a), decimals=decimals).numpy()
        assert got.dtype == a.dtype and got.tolist() == want, decimals
        exact = (np.abs(a.astype(np.float64)) < 2.0 ** 52) & (np.abs(a.astype(np.float64)) + f <= info.max)
        with np.errstate(invalid="ignore", over="ignore"):
            np.testing.assert_array_equal(got[exact], np.round(a, decimals)[exact])


_ACTIVATIONS = {"gelu": lambda t: t.gelu(), "gelu_tanh": lambda t: t.gelu(approximate="tanh"),
                "silu": lambda t: t.silu(), "sigmoid": lambda t: t.sigmoid()}


@pytest.mark.parametrize("name", sorted(_ACTIVATIONS))
def test_activations_of_narrow_floats_are_computed_in_float32_and_rounded_once(name):
    """bfloat16/float16 GELU, SiLU and sigmoid (as PyTorch's kernels): the float32 value rounded
    once, and the gradient ``g * f'(x)`` in float32 rounded once (op by op, GELU was rounded some
    ten times); the gradient against finite differences in float64, and grad of grad."""
    f = _ACTIVATIONS[name]
    rng = np.random.default_rng(0)
    x32 = rng.standard_normal(4096).astype(np.float32) * 3
    g32 = rng.standard_normal(4096).astype(np.float32)
    for narrow in (cv.bfloat16, cv.float16):
        x, g = cv.Tensor(x32).astype(narrow), cv.Tensor(g32).astype(narrow)
        wide = x.astype(cv.float32)
        got = f(x).numpy().view(np.uint16)
        np.testing.assert_array_equal(got, f(wide).astype(narrow).numpy().view(np.uint16))
        (dx,) = cv.vjp(f, x)[1](g)
        assert dx.dtype == narrow
        want = cv.vjp(f, wide)[1](g.astype(cv.float32))[0].astype(narrow)
        np.testing.assert_array_equal(dx.numpy().view(np.uint16), want.numpy().view(np.uint16))
    x64 = cv.Tensor(x32[:64].astype(np.float64))
    d = cv.grad(lambda t: f(t).sum())(x64).numpy()
    h = 1e-6
    np.testing.assert_allclose(d, (f(x64 + h).numpy() - f(x64 - h).numpy()) / (2 * h), rtol=1e-6, atol=1e-9)
    d2 = cv.grad(lambda t: cv.grad(lambda u: f(u).sum())(t).sum())(x64).numpy()
    num2 = (cv.grad(lambda t: f(t).sum())(x64 + h).numpy() - cv.grad(lambda t: f(t).sum())(x64 - h).numpy()) / (2 * h)
    np.testing.assert_allclose(d2, num2, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("a_shape,b_shape", [((4, 3), (3,)), ((4, 1), (1, 5)), ((2, 1, 3), (4, 1)), ((3,), (2, 3)),
                                             ((1,), ()), ((0, 3), (1, 3)), ((2, 3), (2, 1))])
def test_broadcasting_two_tensors_builds_the_graph_broadcast_to_builds(a_shape, b_shape):
    """``a op b`` of one dtype and different shapes is built without the general path's
    promotion (a fast path): its graph is the one ``broadcast_to`` then the same-shape op build
    (one node, hash-consed), and its values numpy's."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
    ta, tb = cv.Tensor(a), cv.Tensor(b)
    shape = np.broadcast_shapes(a_shape, b_shape)
    for got, want, ref in [(ta + tb, a + b, ta.broadcast_to(shape) + tb.broadcast_to(shape)),
                           (tb * ta, b * a, tb.broadcast_to(shape) * ta.broadcast_to(shape)),
                           (ta < tb, a < b, ta.broadcast_to(shape) < tb.broadcast_to(shape))]:
        assert got.node is ref.node and got.shape == shape
        np.testing.assert_array_equal(got.numpy(), want)


def test_shapes_that_do_not_broadcast_still_raise_naming_them():
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4,\)"):
        cv.ones(2, 3) + cv.ones(4)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        cv.ones(2, 3, dtype=cv.int32) * cv.ones(3, 3, dtype=cv.int32)

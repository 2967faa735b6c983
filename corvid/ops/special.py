"""Special functions: erf family, gamma family, Bessel i0, and the bit-level float functions.
(``frac`` lives with the other rounding helpers in :mod:`corvid.ops.manipulation`.)

``erfc`` and ``lgamma`` are primitives (libm computes them); everything else is a composite of
primitives, so autodiff, vmap and jit apply unchanged. The series-based composites (``erfinv``,
``digamma``, ``i0``) compute in float64 and round to the input's float dtype, which keeps them
within a few ulps of the float64 reference for every float dtype.

Integer and bool inputs compute in the default float dtype (float32), like the other math
functions. Each function takes tensors; :mod:`corvid.array_api` wraps them for scalars.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .. import dtype as dt
from ..graph.node import Op
from .elementwise import where

if TYPE_CHECKING:
    from ..tensor import Tensor

__all__ = ["erf", "erfc", "erfinv", "lgamma", "digamma", "i0", "logaddexp", "hypot", "copysign",
           "nextafter", "signbit"]

_BITS = {1: dt.int8, 2: dt.int16, 4: dt.int32, 8: dt.int64}


def _float(x: Tensor) -> Tensor:
    return x if x.dtype.is_float else x.astype(dt.default_float)


def _in_f64(fn, x: Tensor) -> Tensor:
    """``fn`` evaluated in float64 and rounded back to ``x``'s float dtype."""
    x = _float(x)
    return fn(x.astype(dt.float64)).astype(x.dtype)


def _float_pair(a: Tensor, b: Any) -> tuple[Tensor, Tensor]:
    """``a`` and ``b`` promoted together (Array API rules), integers and bools to the default float."""
    from ..tensor import result_type

    d = result_type(a, b)
    d = d if d.is_float else dt.default_float
    return a.astype(d), a._operand(b, d)


def _polyval(coeffs: tuple[float, ...], x: Tensor) -> Tensor:
    """``coeffs[0] + coeffs[1]*x + ...`` by Horner's rule."""
    acc = x._const(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = acc * x + c
    return acc


def erf(x: Tensor) -> Tensor:
    """Error function, ``2/sqrt(pi)`` times the integral of ``exp(-t**2)`` from 0 to ``x`` (libm ``erf``).

    >>> cv.round(cv.erf(cv.asarray([0.0, 0.5, -3.0, cv.inf])), decimals=4)
    Tensor([ 0.    ,  0.5205, -1.    ,  1.    ])
    """
    return x.erf()


def erfc(x: Tensor) -> Tensor:
    """``1 - erf(x)`` without the cancellation for large ``x`` (libm ``erfc``).

    >>> x = cv.asarray(10.0, dtype=cv.float64)
    >>> cv.erfc(x).item(), (1 - cv.erf(x)).item()
    (2.088487583762545e-45, 0.0)
    """
    return _float(x)._unary(Op.ERFC)


def lgamma(x: Tensor) -> Tensor:
    """``log(|gamma(x)|)`` (libm ``lgamma``); +inf at the poles 0, -1, -2, ...

    Finite where ``gamma`` itself overflows (``gamma(200)`` is beyond float64).

    >>> cv.round(cv.lgamma(cv.asarray([1.0, 3.0, 0.5, 0.0, -1.0])), decimals=4)  # log 2 at 3
    Tensor([0.    , 0.6931, 0.5724,    inf,    inf])
    """
    return _float(x)._unary(Op.LGAMMA)


# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011): single-precision
# polynomials in w = -log(1 - x^2), central (w < 5) and tail. Newton steps then refine to float64.
_ERFINV_CENTRAL = (1.50140941, 0.246640727, -0.00417768164, -0.00125372503, 0.00021858087, -4.39150654e-06,
                   -3.5233877e-06, 3.43273939e-07, 2.81022636e-08)
_ERFINV_TAIL = (2.83297682, 1.00167406, 0.00943887047, -0.0076224613, 0.00573950773, -0.00367342844,
                0.00134934322, 0.000100950558, -0.000200214257)
_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)
_ERFINV_NEWTON_STEPS = 4  # from the float32-accurate start, 4 reach float64 accuracy down to 1 - 2**-53


def _erfinv64(x: Tensor) -> Tensor:
    a = x.abs()
    w = -((1 - a) * (1 + a)).log()
    central = _polyval(_ERFINV_CENTRAL, w - 2.5)
    tail = _polyval(_ERFINV_TAIL, where(w < 5, 9.0, w).sqrt() - 3)  # 9.0: keep the unused branch finite
    y = where(w < 5, central, tail) * a
    # Newton on erf(y) = a near 0; in the tail on log(erfc(y)) = log(1 - a), which is nearly
    # linear in y where erf flattens out (1 - a is exact there: Sterbenz)
    tail_side = a > 0.5
    log_q = where(tail_side, 1 - a, 1.0).log()
    for _ in range(_ERFINV_NEWTON_STEPS):
        slope = _TWO_OVER_SQRT_PI * (-(y * y)).exp()
        c = erfc(y)
        tail_step = (c.log() - log_q) * c / slope
        y = y - where(tail_side, -tail_step, (y.erf() - a) / slope)
    y = where(a.eq(1), math.inf, where(a > 1, math.nan, y))
    return copysign(y, x)


def erfinv(x: Tensor) -> Tensor:
    """Inverse error function on [-1, 1]: ±inf at ±1, nan outside, -0.0 at -0.0.

    >>> import corvid as cv
    >>> print(f"{cv.erfinv(cv.Tensor(0.5, dtype=cv.float64)).item():.12f}")
    0.476936276204
    """
    return _in_f64(_erfinv64, x)


# psi(x) ~ log x - 1/(2x) - sum B_2k / (2k x^2k): coefficients of 1/x^2k, enough for x >= 10
_DIGAMMA_ASYMPTOTIC = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)
_DIGAMMA_SHIFT = 10


def _digamma64(x: Tensor) -> Tensor:
    reflect = x < 0
    xp = where(reflect, 1 - x, x)  # psi(x) = psi(1 - x) - pi / tan(pi x) for x < 0
    small = xp < _DIGAMMA_SHIFT
    shift = x._const(0.0)
    for k in range(_DIGAMMA_SHIFT):  # psi(x) = psi(x + n) - sum 1/(x + k)
        shift = shift + where(small, (xp + k).reciprocal(), 0.0)
    z = where(small, xp + _DIGAMMA_SHIFT, xp)
    inv2 = (z * z).reciprocal()
    series = _polyval(_DIGAMMA_ASYMPTOTIC, inv2) * inv2
    psi = z.log() - 0.5 / z - series - shift
    frac_part = x - x.trunc()  # tan has period pi: reduce first so pi*x does not lose the fraction
    safe_frac = where(reflect & frac_part.ne(0), frac_part, 0.5)  # keeps the unused branch's gradient finite
    psi = where(reflect, psi - math.pi / (math.pi * safe_frac).tan(), psi)
    pole = reflect & frac_part.eq(0)
    return where(pole | x.eq(-math.inf), math.nan, where(x.eq(0), -copysign(x._const(math.inf), x), psi))


def digamma(x: Tensor) -> Tensor:
    """Logarithmic derivative of gamma: -inf at +0, +inf at -0, nan at negative integers and -inf.

    >>> cv.round(cv.digamma(cv.asarray([1.0, 2.0, 0.5])), decimals=4)  # -Euler's constant at 1
    Tensor([-0.5772,  0.4228, -1.9635])
    >>> cv.digamma(cv.asarray([0.0, -0.0, -1.0]))
    Tensor([-inf,  inf,  nan])
    """
    return _in_f64(_digamma64, x)


# I0(x) = sum (x^2/4)^k / (k!)^2 for |x| <= 20, written in z = x^2/400 so the coefficients stay in
# range; for |x| > 20 the asymptotic series e^x / sqrt(2 pi x) * sum ((2k-1)!!)^2 / (k! (8x)^k),
# whose terms fall below 3e-18 (relative) by k = 30 at x = 20.
_I0_SWITCH = 20.0
_I0_SERIES = tuple(100.0 ** k / math.factorial(k) ** 2 for k in range(46))
_I0_ASYMPTOTIC = tuple(math.prod((2 * j - 1) ** 2 for j in range(1, k + 1)) / (math.factorial(k) * 8.0 ** k)
                       for k in range(31))


def _i0_64(x: Tensor) -> Tensor:
    a = x.abs()
    near = a <= _I0_SWITCH
    small = _polyval(_I0_SERIES, where(near, a, 0.0).square() * (1 / 400))
    far_a = where(near, _I0_SWITCH + 1, a)
    half = (far_a * 0.5).exp()  # e^x as e^(x/2) * e^(x/2): finite for every x where I0 is
    large = half * (half * (2 * math.pi * far_a).rsqrt()) * _polyval(_I0_ASYMPTOTIC, far_a.reciprocal())
    return where(near, small, where(a.isinf(), math.inf, large))


def i0(x: Tensor) -> Tensor:
    """Modified Bessel function of the first kind, order 0 (even; inf for ``|x| > ~713`` in float64).

    >>> cv.round(cv.i0(cv.asarray([0.0, 1.0, -1.0, 2.0])), decimals=4)
    Tensor([1.    , 1.2661, 1.2661, 2.2796])
    """
    return _in_f64(_i0_64, x)


def logaddexp(a: Tensor, b: Any) -> Tensor:
    """``log(exp(a) + exp(b))`` without overflow; equal infinities give that infinity.

    Symmetric in ``a`` and ``b``, its gradient too: where they are equal each gets half (as
    PyTorch; ``maximum`` splits a tie and ``abs`` has slope 0 at 0).

    >>> import corvid as cv
    >>> cv.grad(lambda a: cv.logaddexp(a, cv.Tensor(1.0)))(cv.Tensor(1.0)).item()
    0.5
    """
    a, b = _float_pair(a, b)
    gap = where(a.eq(b), 0.0, a - b).abs()  # (inf - inf would be nan, in the value or the gradient)
    return a.maximum(b) + (-gap).exp().log1p()


def hypot(a: Tensor, b: Any) -> Tensor:
    """``sqrt(a^2 + b^2)`` without overflow or underflow; inf if either is ±inf (even with nan).

    Integer inputs compute in float32.

    >>> cv.hypot(cv.asarray([3.0, 3e30]), cv.asarray([4.0, 4e30]))  # 9e60 would overflow float32
    Tensor([5.e+00, 5.e+30])
    >>> cv.hypot(cv.asarray([cv.inf, cv.nan]), cv.asarray([cv.nan, 1.0]))
    Tensor([inf, nan])
    """
    from ..runtime.device import get_device

    x, y = (v.abs() for v in _float_pair(a, b))
    d = x.dtype
    if d.itemsize < 8 and get_device(x.device).has_float64:
        # squares of float32 (and narrower) values are exact and cannot overflow in float64:
        # one rounding, at the end (``big * sqrt(1 + ratio**2)`` was 1 ulp off for 5, 12 -> 13)
        x64, y64 = x.astype(dt.float64), y.astype(dt.float64)
        out = _sqrt0(x64 * x64 + y64 * y64).astype(d)
    else:
        # scale by a power of two near the larger value (exact), so the squares neither overflow
        # nor underflow; the exponent is clipped so that the scale itself stays finite
        big = x.maximum(y)
        safe = where(big.eq(0) | big.isinf() | big.isnan(), 1.0, big)
        scale = (-safe.log2().floor()).clip(-1000, 1000).exp2()
        xs, ys = x * scale, y * scale
        out = _sqrt0(xs * xs + ys * ys) / scale
    return where(x.isinf() | y.isinf(), math.inf, out)


def _sqrt0(sq: Tensor) -> Tensor:
    """``sqrt(sq)`` whose gradient at 0 is 0, not nan (hypot(0, 0)'s gradient, as the subgradient)."""
    zero = sq.eq(0)
    return where(zero, 0.0, where(zero, 1.0, sq).sqrt())


def signbit(x: Tensor) -> Tensor:
    """True where the sign bit is set: negative numbers, -0.0, and nans with the sign bit.

    Unlike ``x < 0``, it tells -0.0 from 0.0; never true for unsigned integers and bools.

    >>> cv.signbit(cv.asarray([-1.0, -0.0, 0.0, 2.0]))
    Tensor([ True,  True, False, False])
    >>> cv.signbit(cv.asarray([-3, 3]))
    Tensor([ True, False])
    """
    if x.dtype.is_float:
        return x.bitcast(_BITS[x.dtype.itemsize]) < 0
    if x.dtype.is_unsigned or x.dtype.is_bool:
        return x._const(False, dt.bool_)
    return x < 0


def copysign(a: Tensor, b: Any) -> Tensor:
    """``|a|`` with the sign bit of ``b`` (so -0.0 and negative nans count as negative).

    Integer inputs compute in float32; ``cv.copysign`` takes a Python scalar for either operand.

    >>> cv.copysign(cv.asarray([1.0, 2.0, 3.0]), cv.asarray([-1.0, -0.0, 0.0]))
    Tensor([-1., -2.,  3.])
    >>> cv.asarray([1.0, -2.0]).copysign(1)
    Tensor([1., 2.])
    """
    a, b = _float_pair(a, b)
    return where(signbit(b), -a.abs(), a.abs())


def nextafter(a: Tensor, b: Any) -> Tensor:
    """The next representable value after ``a`` in the direction of ``b`` (``b`` if they are equal).

    Both must have the same float dtype (TypeError otherwise, as the Array API standard says).

    >>> (cv.nextafter(cv.asarray(1.0), 2.0) - 1).item() == cv.finfo(cv.float32).eps
    True
    >>> cv.nextafter(cv.asarray(0.0, dtype=cv.float64), -1.0).item()  # the smallest subnormal, negated
    -5e-324
    """
    from ..tensor import Tensor

    b = b if isinstance(b, Tensor) else a._operand(b, a.dtype)
    if not a.dtype.is_float or b.dtype is not a.dtype:
        raise TypeError(f"nextafter needs two tensors of the same float dtype, got {a.dtype.name} and {b.dtype.name}")
    shape = a.maximum(b).shape
    a, b = a.broadcast_to(shape), b.broadcast_to(shape)
    ints = _BITS[a.dtype.itemsize]
    bits = a.bitcast(ints)
    away_from_zero = (b > a).eq(a > 0)  # moving up from a positive, or down from a negative, value
    step = where(away_from_zero, bits + 1, bits - 1).bitcast(a.dtype)
    tiny = a._const(1, ints).bitcast(a.dtype)  # the smallest subnormal
    from_zero = where(b > 0, tiny, -tiny)
    out = where(a.eq(0), from_zero, step)
    return where(a.isnan() | b.isnan(), math.nan, where(a.eq(b), b, out))

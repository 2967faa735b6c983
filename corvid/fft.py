"""Fast Fourier transforms: the ``fft`` extension of the Array API standard (2025.12).

``cv.fft.fft``, ``ifft``, ``fftn``, ``ifftn``, ``fft2``, ``ifft2``, ``rfft``, ``irfft``, ``rfftn``,
``irfftn``, ``hfft``, ``ihfft``, ``fftfreq``, ``rfftfreq``, ``fftshift``, ``ifftshift``, with numpy's
meaning of ``n``/``s`` (zero-pad or trim first), ``axis``/``axes`` and ``norm``
(``"backward"``: the inverse divides by n; ``"ortho"``: both by sqrt(n); ``"forward"``: the
forward transform divides by n).

How it runs: every transform is ordinary corvid Tensor ops, so it compiles to corvid's own kernels
(on any device), fuses, differentiates (``grad``, ``backward``, ``jvp``), batches (``vmap``) and
traces (``jit``). A complex value travels as two real tensors (real and imaginary parts); each
small DFT below is a real matrix product, which the kernel optimizer tiles and vectorizes.

* **Mixed radix** (Cooley-Tukey, "four-step" order): a length ``n = n1 * n2`` transform along an
  axis of a ``(P, n, Q)`` view is a length-``n2`` transform of the ``(P, n2, n1 * Q)`` view,
  a twiddle multiply, and a dense ``n1``-point DFT written straight into natural order: one
  reduce kernel (plus a twiddle pass) per factor, no bit reversal, no transposes. ``n1`` is the
  largest divisor of ``n`` up to 16. The outermost stage of a transform along the last axis
  (Q = 1) is instead a row-wise matrix product (rows of ``n1``, which vectorizes), stored in
  ``k2``-major order and read back transposed by whatever consumes it.
* **Small lengths** (up to 16, and prime factors up to 64) are one dense DFT matrix product.
* **Other lengths** (a prime factor above 64): Bluestein's chirp-z algorithm turns the length-n
  DFT into a circular convolution of power-of-two length ``m >= 2n - 1``, done with the
  mixed-radix transform. So any length works in O(n log n).
* **Real input** (``rfft``, ``irfft``, and through them ``rfftn``, ``irfftn``, ``hfft``, ``ihfft``):
  an even length n = 2m costs a length-m complex transform, half the full one. ``rfft`` packs
  ``z[j] = x[2j] + i x[2j+1]`` (a reshape: its two parts are the even and odd samples, each stored
  once so that the first matrix product vectorizes), transforms it (Z, with Z[m] = Z[0]) and
  splits the result in one elementwise pass, for k = 0..m:
  ``X[k] = (Z[k] + conj(Z[m-k])) / 2 - i w^k (Z[k] - conj(Z[m-k])) / 2`` with ``w = exp(-2 pi i/n)``.
  ``irfft`` runs it backwards: ``(X[k] + conj(X[m-k])) + i w^-k (X[k] - conj(X[m-k]))`` is
  2 (E[k] + i O[k]) for the DFTs E, O of the even and odd output samples, so an unnormalized
  length-m inverse of it gives ``n (x[2j] + i x[2j+1])``, whose parts interleave into x. As
  numpy's, ``irfft`` ignores the imaginary parts of the zero and Nyquist frequencies. Odd n: the
  full transform of the real input (whose first stage skips the zero imaginary part), or the full
  inverse of the spectrum completed by its mirrored conjugate.

Twiddle and chirp tables are computed in float64 on the host and cast to the working precision.
Accuracy: relative error about 1e-7 (complex64) and 1e-15 (complex128) times log n.

Dtypes: complex64 computes in float32, complex128 in float64. Real inputs are accepted where the
standard asks for complex ones (float64 → complex128; other floats, ints and bools → complex64).
``rfft``-family inputs must be real (complex raises TypeError, as numpy's would drop the imaginary
part silently).

>>> import corvid as cv
>>> x = cv.Tensor([1.0, 2.0, 3.0, 4.0])
>>> cv.fft.fft(x).numpy()
array([10.+0.j, -2.+2.j, -2.+0.j, -2.-2.j], dtype=complex64)
>>> cv.fft.irfft(cv.fft.rfft(x), n=4).numpy()
array([1., 2., 3., 4.], dtype=float32)
"""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import numpy as np

from . import dtype as dt
from .dtype import DType
from .ops.elementwise import make_complex
from .ops.manipulation import roll
from .ops.movement import cat, normalize_axis, stack
from .tensor import Tensor

__all__ = ["fft", "ifft", "fftn", "ifftn", "fft2", "ifft2", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
           "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_RADIX = 16  # the largest factor split off per stage, and the largest length done as one dense DFT
_DENSE_PRIME = 64  # a prime factor up to this is one dense DFT; above it, Bluestein
_NORMS = ("backward", "ortho", "forward")


# ---------------------------------------------------------------- tables (float64, host)

def _smallest_prime_factor(n: int) -> int:
    return next((p for p in range(2, math.isqrt(n) + 1) if n % p == 0), n)


def _split(n: int) -> int:
    """The factor ``n1`` split off a length-n transform; 1 means do it whole (dense up to 64,
    else Bluestein)."""
    if n <= _RADIX:
        return 1
    small = next((d for d in range(_RADIX, 1, -1) if n % d == 0), 0)
    if small:
        return small
    p = _smallest_prime_factor(n)  # above 16 here
    return p if p < n and p <= _DENSE_PRIME else 1


def _cis(k: np.ndarray, n: int, sign: int) -> np.ndarray:
    """``exp(sign 2 pi i k / n)`` for integers k: the angle reduced mod n in integers first, and
    quarter turns exact (1, i, -1, -i), so that e.g. the DFT of a real even signal has no rounding
    noise in its imaginary part."""
    k = np.asarray(k, dtype=np.int64) % n
    w = np.exp(sign * 2j * np.pi * (k / n))
    quarter = (4 * k) % n == 0
    w[quarter] = np.array([1, 1j, -1, complex(0, -1)])[(sign * 4 * k[quarter] // n) % 4]
    return w


@functools.lru_cache(maxsize=256)
def _dft_matrix(n: int, sign: int) -> np.ndarray:
    k = np.arange(n)
    return _cis(np.outer(k, k), n, sign)


@functools.lru_cache(maxsize=256)
def _twiddles(n2: int, n1: int, sign: int) -> np.ndarray:
    """``w[k2, j1] = exp(sign 2 pi i j1 k2 / n)`` for ``n = n1 n2``."""
    return _cis(np.outer(np.arange(n2), np.arange(n1)), n1 * n2, sign)


@functools.lru_cache(maxsize=64)
def _chirp(n: int, sign: int) -> np.ndarray:
    """``exp(sign i pi j^2 / n)`` for j < n."""
    j = np.arange(n, dtype=np.int64)
    return _cis(j * j, 2 * n, sign)


@functools.lru_cache(maxsize=64)
def _bluestein_kernel(n: int, m: int, sign: int) -> np.ndarray:
    """The DFT (length m) of the chirp filter: conj(chirp) at 0..n-1 and, wrapped, at m-n+1..m-1."""
    c = np.conj(_chirp(n, sign))
    b = np.zeros(m, dtype=np.complex128)
    b[:n] = c
    b[m - n + 1:] = c[1:][::-1]
    return np.fft.fft(b)


@functools.lru_cache(maxsize=64)
def _split_twiddles(n: int, sign: int) -> np.ndarray:
    """``sign i exp(sign 2 pi i k / n)`` for k <= n/2: the odd half's weight in :func:`_real_pass`."""
    return sign * 1j * _cis(np.arange(n // 2 + 1), n, sign)


@functools.lru_cache(maxsize=512)
def _table(kind: str, args: tuple, real: DType, device: str) -> tuple[Tensor, Tensor]:
    """A table as (real part, imaginary part) constants in the working precision, made once."""
    a = {"dft": _dft_matrix, "dftT": lambda n, sign: _dft_matrix(n, sign).T, "twiddle": _twiddles,
         "chirp": _chirp, "bluestein": _bluestein_kernel, "split": _split_twiddles}[kind](*args)
    return (Tensor(np.ascontiguousarray(a.real).astype(real.np), device=device),
            Tensor(np.ascontiguousarray(a.imag).astype(real.np), device=device))


# ---------------------------------------------------------------- the transform on (re, im) pairs

def _cmul(xr: Tensor, xi: Tensor | None, wr: Tensor, wi: Tensor) -> tuple[Tensor, Tensor]:
    if xi is None:
        return xr * wr, xr * wi
    return xr * wr - xi * wi, xr * wi + xi * wr


def _dense(xr: Tensor, xi: Tensor | None, n: int, sign: int) -> tuple[Tensor, Tensor]:
    """The n-point DFT along axis 1 of (P, n, Q) parts, as one real matrix product per part."""
    P, _, Q = xr.shape
    if Q == 1:  # rows of n: (P, n) @ F^T
        fr, fi = _table("dftT", (n, sign), xr.dtype, xr.device)
        ar = xr.reshape(P, n)
        yr, yi = ar @ fr, ar @ fi
        if xi is not None:
            ai = xi.reshape(P, n)
            yr, yi = yr - ai @ fi, yi + ai @ fr
        return yr.reshape(P, n, 1), yi.reshape(P, n, 1)
    fr, fi = _table("dft", (n, sign), xr.dtype, xr.device)  # F (n, n) @ x (P, n, Q): columns of Q
    yr, yi = fr @ xr, fi @ xr
    if xi is not None:
        yr, yi = yr - fi @ xi, yi + fr @ xi
    return yr, yi


def _dft(xr: Tensor, xi: Tensor | None, sign: int) -> tuple[Tensor, Tensor]:
    """Unnormalized DFT (``exp(sign 2 pi i jk/n)``) along axis 1 of real parts shaped (P, n, Q);
    ``xi`` None means a zero imaginary part."""
    P, n, Q = xr.shape
    if n == 1:
        return xr, (xi if xi is not None else xr * 0)
    n1 = _split(n)
    if n1 == 1:
        if n <= _DENSE_PRIME:
            return _dense(xr, xi, n, sign)
        return _bluestein(xr, xi, sign)
    n2 = n // n1
    # x[j1 + n1 j2] -> view (P, n2, n1 Q); transform along j2 (length n2)
    dr, di = _dft(xr.reshape(P, n2, n1 * Q), None if xi is None else xi.reshape(P, n2, n1 * Q), sign)
    wr, wi = (t[:, :, None] for t in _table("twiddle", (n2, n1, sign), xr.dtype, xr.device))  # (k2, j1, 1)
    er, ei = _cmul(dr.reshape(P, n2, n1, Q), di.reshape(P, n2, n1, Q), wr, wi)  # (P, k2, j1, Q)
    if Q == 1:
        # the outermost stage: the dense DFT's row form (P n2 rows of n1 @ F^T), which vectorizes
        # where the k1-major reduce below would not, stored k2-major and read back transposed
        # (stored first: fused into its consumer's natural order it would not vectorize either)
        yr, yi = _dense(er.reshape(P * n2, n1, 1), ei.reshape(P * n2, n1, 1), n1, sign)
        yr, yi = (t.contiguous().reshape(P, n2, n1).permute(0, 2, 1).reshape(P, n, 1) for t in (yr, yi))
        return yr, yi
    # X[n2 k1 + k2] = sum_j1 F[k1, j1] e[k2, j1]: written (P, k1, k2, Q), i.e. natural order
    fr, fi = (t[None, :, None, :, None] for t in _table("dft", (n1, sign), xr.dtype, xr.device))  # (1,k1,1,j1,1)
    er, ei = er[:, None], ei[:, None]  # (P, 1, k2, j1, Q)
    yr = (fr * er - fi * ei).sum(3)
    yi = (fi * er + fr * ei).sum(3)
    return yr.reshape(P, n, Q), yi.reshape(P, n, Q)


def _bluestein(xr: Tensor, xi: Tensor | None, sign: int) -> tuple[Tensor, Tensor]:
    """Any length n through a power-of-two circular convolution (Bluestein's chirp-z)."""
    P, n, Q = xr.shape
    m = 1 << (2 * n - 2).bit_length()  # >= 2n - 1
    cr, ci = (t[:, None] for t in _table("chirp", (n, sign), xr.dtype, xr.device))
    # the three phases are kept apart (contiguous): fused, their index expressions grow too
    # large for the scheduler to analyse quickly, and nothing is saved (each is read many times)
    ar, ai = _cmul(xr, xi, cr, ci)  # x_j * chirp_j
    ar, ai = ar.pad(((0, 0), (0, m - n), (0, 0))).contiguous(), ai.pad(((0, 0), (0, m - n), (0, 0))).contiguous()
    ar, ai = _dft(ar, ai, -1)
    br, bi = (t[:, None] for t in _table("bluestein", (n, m, sign), xr.dtype, xr.device))
    ar, ai = _cmul(ar, ai, br, bi)
    ar, ai = _dft(ar.contiguous(), ai.contiguous(), 1)  # unnormalized inverse: divide by m below
    ar, ai = ar[:, :n] * (1.0 / m), ai[:, :n] * (1.0 / m)
    return _cmul(ar, ai, cr, ci)


# ---------------------------------------------------------------- real input: half-length transforms

def _real_pass(yr: Tensor, yi: Tensor, sign: int) -> tuple[Tensor, Tensor]:
    """``(Y[k] + conj(Y[m-k])) + V[k] (Y[k] - conj(Y[m-k]))`` for k = 0..m along axis 1 of
    (P, m + 1, Q) parts, with ``V[k] = sign i exp(sign 2 pi i k / 2m)``.

    The step between a real length-2m signal x and the complex z[j] = x[2j] + i x[2j+1]. Forward
    (sign -1, Y the DFT of z with Y[m] = Y[0]): twice the first m + 1 frequencies of x. Inverse
    (sign +1, Y those frequencies of x): for k < m, twice the DFT of z, i.e. 2 (E + i O) with E, O
    the DFTs of the even and odd samples of x."""
    m = yr.shape[1] - 1
    br, bi = yr.flip(1), -yi.flip(1)  # conj(Y[m - k])
    vr, vi = (t[:, None] for t in _table("split", (2 * m, sign), yr.dtype, yr.device))
    er, ei = _cmul(yr - br, yi - bi, vr, vi)
    return yr + br + er, yi + bi + ei


def _batch(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    """(P, Q): the sizes before and after ``axis``, for the (P, n, Q) view the transforms work on."""
    return math.prod(shape[:axis]), math.prod(shape[axis + 1:])


def _rfft_along(x: Tensor, axis: int) -> tuple[Tensor, Tensor]:
    """Unnormalized DFT of the real ``x`` along ``axis``: its ``n // 2 + 1`` non-negative frequencies
    as (re, im). Even n: the length-n/2 complex transform of z[j] = x[2j] + i x[2j+1] and
    :func:`_real_pass`, half the work of the full transform. Odd n: the full transform (of a zero
    imaginary part, which its first stage skips), cut."""
    shape = x.shape
    n = shape[axis]
    h = n // 2 + 1
    P, Q = _batch(shape, axis)
    out = shape[:axis] + (h,) + shape[axis + 1:]
    if P * Q == 0:
        z = x._const(0, shape=out)
        return z, z
    if n % 2:
        yr, yi = _dft(x.reshape(P, n, Q), None, -1)
        return yr[:, :h].reshape(out), yi[:, :h].reshape(out)
    z = x.reshape(P, h - 1, 2, Q)  # even and odd samples: strided views, stored so the first stage vectorizes
    yr, yi = _dft(z[:, :, 0].contiguous(), z[:, :, 1].contiguous(), -1)
    yr, yi = (cat([t, t[:, :1]], 1) for t in (yr, yi))  # Y[m] = Y[0]
    yr, yi = _real_pass(yr, yi, -1)
    return (yr * 0.5).reshape(out), (yi * 0.5).reshape(out)


def _irfft_along(re: Tensor, im: Tensor, axis: int, n: int) -> Tensor:
    """Unnormalized inverse DFT along ``axis``: the real length-n signal whose spectrum starts with
    (re, im), trimmed or zero-padded to ``n // 2 + 1`` (the rest is its mirrored conjugate). As in
    numpy, the imaginary parts of the zero and (even n) Nyquist frequencies are ignored. Even n:
    :func:`_real_pass`, a length-n/2 complex inverse, its real and imaginary parts interleaved.
    Odd n: the real part of the full spectrum's inverse."""
    h = n // 2 + 1
    re, im = _resize(re, axis, h), _resize(im, axis, h)
    shape = re.shape
    P, Q = _batch(shape, axis)
    out = shape[:axis] + (n,) + shape[axis + 1:]
    if P * Q == 0:
        return re._const(0, shape=out)
    re, im = re.reshape(P, h, Q), im.reshape(P, h, Q)
    if n % 2:  # X[n - k] = conj(X[k]) for k = h-1..1
        yr, _ = _dft(cat([re, re[:, :0:-1]], 1), cat([im, -im[:, :0:-1]], 1), 1)
        return yr.reshape(out)
    m = h - 1
    im = im[:, 1:m].pad(((0, 0), (1, 1), (0, 0)))  # drop Im X[0] and Im X[m]
    zr, zi = _real_pass(re, im, 1)
    # the pass is stored before the transform: fused into the first matrix product it would be
    # recomputed for every output row, and keep the product from vectorizing
    zr, zi = _dft(zr[:, :m].contiguous(), zi[:, :m].contiguous(), 1)  # n (x[2j] + i x[2j+1])
    return stack([zr, zi], 2).reshape(out)


# ---------------------------------------------------------------- public API helpers

def _tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def _complex_type(d: DType) -> DType:
    if d.is_complex:
        return d
    return dt.complex128 if d is dt.float64 else dt.complex64


def _parts(x: Tensor) -> tuple[Tensor, Tensor | None]:
    """(real, imag or None) in the working real dtype."""
    c = _complex_type(x.dtype)
    if x.dtype.is_complex:  # each part contiguous: the first stage's matrix products then vectorize
        return x.real.contiguous(), x.imag.contiguous()
    return x.astype(c.real_dtype), None


def _hermitian_parts(x: Tensor) -> tuple[Tensor, Tensor]:
    """(real, imag) of a spectrum for the inverse real transforms, in the working real dtype (zeros
    for a real input). Views, not stored: :func:`_irfft_along` reads them in an elementwise pass."""
    r = _complex_type(x.dtype).real_dtype
    return x.real.astype(r), x.imag.astype(r)


def _check_norm(norm: str) -> None:
    if norm not in _NORMS:
        raise ValueError(f"norm must be one of {_NORMS}, got {norm!r}")


def _scale(n: int, norm: str, inverse: bool) -> float:
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    return 1.0 / n if (norm == "forward") != inverse else 1.0


def _scaled(x: Tensor, s: float) -> Tensor:
    return x * s if s != 1.0 else x


def _complex_result(re: Tensor, im: Tensor, s: float) -> Tensor:
    return make_complex(_scaled(re, s), _scaled(im, s))


def _resize(x: Tensor, axis: int, n: int) -> Tensor:
    """Trim or zero-pad ``x`` along ``axis`` to length n."""
    have = x.shape[axis]
    if n == have:
        return x
    if n < have:
        return x[(slice(None),) * axis + (slice(0, n),)]
    pads = [(0, 0)] * x.ndim
    pads[axis] = (0, n - have)
    return x.pad(pads)


def _check_n(n: int | None, name: str = "n") -> None:
    if n is not None and (not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1):
        raise ValueError(f"invalid number of data points {name}={n!r}: must be a positive int")


def _axis_and_n(x: Tensor, n: int | None, axis: int, norm: str, name: str,
                hermitian: bool = False) -> tuple[int, int]:
    """The checked axis and length of a 1-D transform. The default length is the input's, or for
    a Hermitian input (``irfft``, ``hfft``) ``2 (m - 1)``."""
    _check_norm(norm)
    _check_n(n)
    if x.ndim == 0:
        raise ValueError(f"{name}: needs at least 1 dimension, got a 0-d tensor")
    a = normalize_axis(axis, x.ndim)
    if n is None:
        n = 2 * (x.shape[a] - 1) if hermitian else x.shape[a]
    if n < 1:
        raise ValueError(f"{name}: invalid number of data points ({n}) along axis {axis}")
    return a, int(n)


def _along(re: Tensor, im: Tensor | None, axis: int, sign: int) -> tuple[Tensor, Tensor]:
    """Unnormalized DFT of (re, im) along ``axis`` (any shape)."""
    shape = re.shape
    n = shape[axis]
    P, Q = _batch(shape, axis)
    if P * Q == 0:
        z = re.reshape(shape) * 0
        return z, z
    yr, yi = _dft(re.reshape(P, n, Q), None if im is None else im.reshape(P, n, Q), sign)
    return yr.reshape(shape), yi.reshape(shape)


def _c2c(x: Any, n: int | None, axis: int, norm: str, inverse: bool, name: str) -> Tensor:
    x = _tensor(x)
    a, n = _axis_and_n(x, n, axis, norm, name)
    re, im = _parts(_resize(x, a, n))
    return _complex_result(*_along(re, im, a, 1 if inverse else -1), _scale(n, norm, inverse))


def _axes_and_sizes(x: Tensor, s: Sequence[int] | None, axes: Sequence[int] | None,
                    name: str) -> tuple[list[int], list[int]]:
    if axes is None:
        axes = list(range(x.ndim - len(s), x.ndim)) if s is not None else list(range(x.ndim))
    elif isinstance(axes, (int, np.integer)):
        axes = [int(axes)]
    axes = [normalize_axis(a, x.ndim) for a in axes]
    if len(set(axes)) != len(axes):
        raise ValueError(f"{name}: repeated axes {axes}")
    if s is None:
        sizes = [x.shape[a] for a in axes]
    else:
        s = [int(v) for v in s]
        if len(s) != len(axes):
            raise ValueError(f"{name}: s {tuple(s)} and axes {tuple(axes)} have different lengths")
        sizes = [x.shape[a] if v == -1 else v for a, v in zip(axes, s)]
    for v in sizes:
        _check_n(v, "s")
    return axes, sizes


def _c2c_n(x: Any, s: Sequence[int] | None, axes: Sequence[int] | None, norm: str, inverse: bool,
           name: str) -> Tensor:
    x = _tensor(x)
    _check_norm(norm)
    axes, sizes = _axes_and_sizes(x, s, axes, name)
    if not axes:
        return x.astype(_complex_type(x.dtype))
    for a, n in zip(axes, sizes):
        x = _resize(x, a, n)
    re, im = _parts(x)
    for a in axes:
        re, im = _along(re, im, a, 1 if inverse else -1)
    return _complex_result(re, im, _scale(math.prod(sizes), norm, inverse))


def _real_input(x: Any, name: str) -> Tensor:
    x = _tensor(x)
    if x.dtype.is_complex:
        raise TypeError(f"{name} needs a real input, got {x.dtype.name}")
    return x


# ---------------------------------------------------------------- complex-to-complex

def fft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The 1-D discrete Fourier transform along ``axis`` (zero-padded or trimmed to ``n``).

    ``X[k] = sum_j x[j] exp(-2 pi i jk / n)``, numpy's definition; ``norm`` chooses the scaling (see
    the module docstring). Real input is accepted (float64 gives complex128, others complex64).

    >>> x = cv.Tensor([1.0, 2.0, 3.0, 4.0])
    >>> cv.fft.fft(x).numpy()
    array([10.+0.j, -2.+2.j, -2.+0.j, -2.-2.j], dtype=complex64)
    >>> cv.fft.fft(x, n=2).numpy()  # trimmed to [1, 2]
    array([ 3.+0.j, -1.+0.j], dtype=complex64)
    >>> cv.fft.fft(x, norm="ortho").numpy()  # divided by sqrt(4)
    array([ 5.+0.j, -1.+1.j, -1.+0.j, -1.-1.j], dtype=complex64)
    """
    return _c2c(x, n, axis, norm, False, "fft")


def ifft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The 1-D inverse discrete Fourier transform along ``axis`` (``n``, ``axis``, ``norm`` as in
    :func:`fft`; by default it divides by n).

    >>> x = cv.Tensor([1.0, 2.0, 3.0, 4.0])
    >>> cv.fft.ifft(cv.fft.fft(x)).numpy()
    array([1.+0.j, 2.+0.j, 3.+0.j, 4.+0.j], dtype=complex64)
    >>> cv.fft.ifft(cv.Tensor([4.0, 0.0, 0.0, 0.0])).numpy()
    array([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j], dtype=complex64)
    """
    return _c2c(x, n, axis, norm, True, "ifft")


def fftn(x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
         norm: str = "backward") -> Tensor:
    """The N-D discrete Fourier transform over ``axes`` (all axes if None; the last len(s) if only
    ``s`` is given); ``s[i]`` is the length along ``axes[i]`` (-1: keep).

    >>> cv.fft.fftn(cv.Tensor([[1.0, 2.0], [3.0, 4.0]])).numpy()
    array([[10.+0.j, -2.+0.j],
           [-4.+0.j,  0.+0.j]], dtype=complex64)
    >>> cv.fft.fftn(cv.ones(2, 3, 4), s=(5, 6)).shape  # the last two axes, zero-padded
    (2, 5, 6)
    """
    return _c2c_n(x, s, axes, norm, False, "fftn")


def ifftn(x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str = "backward") -> Tensor:
    """The N-D inverse discrete Fourier transform (see :func:`fftn`).

    >>> x = cv.Tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> cv.fft.ifftn(cv.fft.fftn(x)).numpy()
    array([[1.+0.j, 2.+0.j],
           [3.+0.j, 4.+0.j]], dtype=complex64)
    """
    return _c2c_n(x, s, axes, norm, True, "ifftn")


def fft2(x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
         norm: str = "backward") -> Tensor:
    """:func:`fftn` over the last two axes (by default; ``axes`` names two others).

    >>> cv.fft.fft2(cv.Tensor([[1.0, 2.0], [3.0, 4.0]])).numpy()
    array([[10.+0.j, -2.+0.j],
           [-4.+0.j,  0.+0.j]], dtype=complex64)
    >>> cv.fft.fft2(cv.ones(3, 4, 5)).shape  # a batch of 3 images
    (3, 4, 5)
    """
    return _c2c_n(x, s, axes, norm, False, "fft2")


def ifft2(x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
          norm: str = "backward") -> Tensor:
    """:func:`ifftn` over the last two axes (by default; ``axes`` names two others).

    >>> x = cv.Tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> cv.fft.ifft2(cv.fft.fft2(x)).numpy()
    array([[1.+0.j, 2.+0.j],
           [3.+0.j, 4.+0.j]], dtype=complex64)
    """
    return _c2c_n(x, s, axes, norm, True, "ifft2")


# ---------------------------------------------------------------- real <-> Hermitian

def rfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The DFT of a real input along ``axis``: the ``n // 2 + 1`` non-negative frequencies.

    The others are their complex conjugates, so they are left out. TypeError for complex input.

    >>> cv.fft.rfft(cv.Tensor([1.0, 2.0, 3.0, 4.0])).numpy()
    array([10.+0.j, -2.+2.j, -2.+0.j], dtype=complex64)
    >>> cv.fft.rfft(cv.ones(5)).shape
    (3,)
    """
    x = _real_input(x, "rfft")
    a, n = _axis_and_n(x, n, axis, norm, "rfft")
    re, _ = _parts(_resize(x, a, n))
    return _complex_result(*_rfft_along(re, a), _scale(n, norm, False))


def irfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The inverse of :func:`rfft`: a real output of length ``n`` (default ``2 (m - 1)`` for an
    input of length m). The imaginary parts of the zero (and, for even n, Nyquist) frequency are
    ignored, as in numpy. Pass ``n`` for an odd length: the default is always even.

    >>> x = cv.Tensor([1.0, 2.0, 3.0])
    >>> cv.fft.irfft(cv.fft.rfft(x), n=3).numpy()
    array([1., 2., 3.], dtype=float32)
    >>> cv.fft.irfft(cv.fft.rfft(x)).shape  # 2 * (2 - 1)
    (2,)
    """
    x = _tensor(x)
    a, n = _axis_and_n(x, n, axis, norm, "irfft", hermitian=True)
    return _scaled(_irfft_along(*_hermitian_parts(x), a, n), _scale(n, norm, True))


def rfftn(x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str = "backward") -> Tensor:
    """The N-D DFT of a real input; the last of ``axes`` keeps ``n // 2 + 1`` frequencies (the real
    transform along it comes first, then complex ones along the others).

    >>> cv.fft.rfftn(cv.Tensor([[1.0, 2.0], [3.0, 4.0]])).numpy()
    array([[10.+0.j, -2.+0.j],
           [-4.+0.j,  0.+0.j]], dtype=complex64)
    >>> cv.fft.rfftn(cv.ones(4, 6)).shape
    (4, 4)
    """
    x = _real_input(x, "rfftn")
    _check_norm(norm)
    axes_, sizes = _axes_and_sizes(x, s, axes, "rfftn")
    if not axes_:
        raise ValueError("rfftn: needs at least one axis")
    for a, n in zip(axes_, sizes):
        x = _resize(x, a, n)
    re, im = _rfft_along(_parts(x)[0], axes_[-1])
    for a in axes_[:-1]:
        re, im = _along(re, im, a, -1)
    return _complex_result(re, im, _scale(math.prod(sizes), norm, False))


def irfftn(x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
           norm: str = "backward") -> Tensor:
    """The inverse of :func:`rfftn`: ``s[-1]`` (default ``2 (m - 1)``) is the real output length
    along the last of ``axes`` (complex inverses along the others come first, the real one last).

    >>> x = cv.Tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> cv.fft.irfftn(cv.fft.rfftn(x), s=(2, 2)).numpy()
    array([[1., 2.],
           [3., 4.]], dtype=float32)
    >>> cv.fft.irfftn(cv.fft.rfftn(cv.ones(4, 6))).shape
    (4, 6)
    """
    x = _tensor(x)
    _check_norm(norm)
    if axes is None:
        axes_ = list(range(x.ndim - len(s), x.ndim)) if s is not None else list(range(x.ndim))
    else:
        axes_ = [normalize_axis(a, x.ndim) for a in ([axes] if isinstance(axes, int) else axes)]
    if not axes_:
        raise ValueError("irfftn: needs at least one axis")
    if len(set(axes_)) != len(axes_):
        raise ValueError(f"irfftn: repeated axes {axes_}")
    if s is None:
        sizes = [x.shape[a] for a in axes_[:-1]] + [2 * (x.shape[axes_[-1]] - 1)]
    else:
        s = [int(v) for v in s]
        if len(s) != len(axes_):
            raise ValueError(f"irfftn: s {tuple(s)} and axes {tuple(axes_)} have different lengths")
        sizes = [x.shape[a] if v == -1 else v for a, v in zip(axes_[:-1], s[:-1])]
        sizes.append(2 * (x.shape[axes_[-1]] - 1) if s[-1] == -1 else s[-1])
    for v in sizes:
        _check_n(v, "s")
    for a, n in zip(axes_[:-1], sizes[:-1]):
        x = _resize(x, a, n)
    re, im = _hermitian_parts(x)
    if len(axes_) > 1:  # stored for the matrix products of the complex inverses along the other axes
        re, im = re.contiguous(), im.contiguous()
        for a in axes_[:-1]:
            re, im = _along(re, im, a, 1)
    return _scaled(_irfft_along(re, im, axes_[-1], sizes[-1]), _scale(math.prod(sizes), norm, True))


_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def hfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The DFT of a signal with Hermitian symmetry given by its first half ``x``: a real output of
    length ``n`` (default ``2 (m - 1)``), as ``numpy.fft.hfft``.

    >>> cv.fft.hfft(cv.Tensor([1.0, 2.0, 3.0])).numpy()  # the signal [1, 2, 3, 2]
    array([ 8., -2.,  0., -2.], dtype=float32)
    """
    _check_norm(norm)
    x = _tensor(x)
    return irfft(x.conj() if x.dtype.is_complex else x, n=n, axis=axis, norm=_SWAP[norm])


def ihfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The inverse of :func:`hfft` for a real input: ``n // 2 + 1`` complex values.

    >>> x = cv.Tensor([1.0, 2.0, 3.0, 2.0])
    >>> cv.fft.ihfft(x).real.tolist()
    [2.0, -0.5, 0.0]
    >>> cv.fft.hfft(cv.fft.ihfft(x)).numpy()
    array([1., 2., 3., 2.], dtype=float32)
    """
    _check_norm(norm)
    x = _real_input(x, "ihfft")
    return rfft(x, n=n, axis=axis, norm=_SWAP[norm]).conj()


# ---------------------------------------------------------------- frequencies and shifts

def fftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: str | None = None) -> Tensor:
    """Sample frequencies ``[0, 1, ..., ceil(n/2) - 1, -floor(n/2), ..., -1] / (d n)``: those of
    each output of :func:`fft` for samples ``d`` apart (cycles per unit of ``d``). The default
    float dtype unless ``dtype`` says otherwise.

    >>> cv.fft.fftfreq(4).tolist()
    [0.0, 0.25, -0.5, -0.25]
    >>> cv.fft.fftfreq(4, d=0.5).tolist()
    [0.0, 0.5, -1.0, -0.5]
    """
    _check_n(n)
    k = np.arange(n)
    k = np.where(k < (n + 1) // 2, k, k - n)
    return Tensor(k / (d * n), dtype=dt.default_float if dtype is None else dtype, device=device)


def rfftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: str | None = None) -> Tensor:
    """Sample frequencies of :func:`rfft`: ``[0, 1, ..., n // 2] / (d n)``.

    >>> cv.fft.rfftfreq(4).tolist()
    [0.0, 0.25, 0.5]
    """
    _check_n(n)
    return Tensor(np.arange(n // 2 + 1) / (d * n), dtype=dt.default_float if dtype is None else dtype,
                  device=device)


def _shift(x: Any, axes: int | Sequence[int] | None, inverse: bool) -> Tensor:
    x = _tensor(x)
    if axes is None:
        axes = list(range(x.ndim))
    elif isinstance(axes, (int, np.integer)):
        axes = [int(axes)]
    axes = [normalize_axis(a, x.ndim) for a in axes]
    if not axes:
        return x
    shifts = [-(x.shape[a] // 2) if inverse else x.shape[a] // 2 for a in axes]
    return roll(x, shifts, axes)


def fftshift(x: Any, /, *, axes: int | Sequence[int] | None = None) -> Tensor:
    """Move the zero frequency to the middle (``roll`` by ``n // 2`` along ``axes``; all if None).

    >>> cv.fft.fftshift(cv.fft.fftfreq(4)).tolist()
    [-0.5, -0.25, 0.0, 0.25]
    >>> cv.fft.fftshift(cv.arange(5)).tolist()
    [3, 4, 0, 1, 2]
    >>> cv.fft.fftshift(cv.arange(6).reshape(2, 3), axes=1).tolist()
    [[2, 0, 1], [5, 3, 4]]
    """
    return _shift(x, axes, False)


def ifftshift(x: Any, /, *, axes: int | Sequence[int] | None = None) -> Tensor:
    """The inverse of :func:`fftshift` (they differ for odd lengths: ``roll`` by ``-(n // 2)``).

    >>> cv.fft.ifftshift(cv.arange(5)).tolist()
    [2, 3, 4, 0, 1]
    >>> cv.fft.ifftshift(cv.fft.fftshift(cv.arange(5))).tolist()
    [0, 1, 2, 3, 4]
    """
    return _shift(x, axes, True)

"""General (non-symmetric) eigenvalues and eigenvectors written only in corvid Tensor ops: ``eig``
of the ``"kernels"`` backend of :mod:`corvid.linalg` (see :mod:`corvid.linalg_kernels` for the
conventions all its functions share: stacks ``(..., n, n)``, the step's position as data so that
every step of a sequence is a kernel of the same structure, replay by ``jit`` per shape).

Everything is computed in complex128 (complex input or not, float32 or not: see
``linalg_kernels._wide``), in three phases:

* **Hessenberg reduction**: n-2 Householder steps ``H <- Pᴴ H P`` (LAPACK's zlarfg reflectors, so
  the subdiagonal is real), each applied from both sides in one step whose column is data; the
  reflectors are accumulated into ``Zᴴ``, kept next to H as ``[H | Zᴴ]`` (Z = the Schur vectors).
* **Shifted QR iterations** (as LAPACK's zlahqr, single shift, implicit): one *step* is one
  Givens rotation, applied to rows and columns of H (and rows of Zᴴ) in one kernel. A step that
  starts an iteration deflates (sets to 0 every subdiagonal entry ``|h_k,k-1| <= eps(|h_k-1,k-1|
  + |h_kk|)``, with |z| = |Re z| + |Im z|), picks the active window ``[lo, hi]`` (the lowest
  unreduced block), takes the Wilkinson shift μ of its trailing 2x2 (an exceptional shift after
  10, 20, … iterations without a deflation at ``hi``) and introduces the bulge with the rotation
  that zeroes ``h_lo+1,lo`` of ``H - μI``; the next steps chase the bulge down to ``hi``, and the
  step after the last one starts the next iteration. The bulge's position, the window's bottom
  and the iteration count are a state row under the matrix (the window's top and the shift are
  needed only by the starting step, which computes them), so every step is the same kernel
  whatever the window: deflation is data. A finished matrix (no unreduced subdiagonal entry
  left) gets identity steps.
  Convergence: ``n`` steps make a *sweep*; when values can be read, the loop stops after the
  first sweep that leaves every matrix finished (one synchronization per sweep; a matrix with a
  nan or inf stops there too, with nan results), or after ``EIG_MAX_SWEEPS · n`` sweeps; otherwise
  (inside ``jit``/``vmap``) ``EIG_SWEEPS · n + 4`` sweeps run (extra steps on a finished matrix
  are identities). Typical matrices need about 2 n sweeps (2 n² steps; up to 3.3 n for a cyclic
  permutation, whose eigenvalues all have modulus 1 and need exceptional shifts).
* **Eigenvectors**: H is now the upper-triangular Schur form T (``A = Z T Zᴴ``), whose diagonal
  holds the eigenvalues. The eigenvectors of T (unit upper triangular Y with ``T Y = Y diag(T)``)
  come from a back-substitution of n-1 steps, each computing one row of Y for all eigenvalues
  at once (a divisor ``t_ii - t_kk`` smaller than ``eps·max|t|`` is replaced by that bound, as
  LAPACK's ztrevc, so repeated eigenvalues give finite vectors); then ``V = Z Y``, each column
  normalized to unit 2-norm with its largest component real and positive (LAPACK's zgeev).

The eigenvalues come in Schur order, not LAPACK's; for real input they are computed in complex
arithmetic, so real eigenvalues may carry an imaginary part at the rounding level and complex
ones are conjugate pairs only up to rounding. No balancing is done (LAPACK's zgeev scales rows
and columns first, which helps badly scaled matrices). Cost: n-2 Hessenberg steps (5 kernels
each: the reflector's reductions, the products ``vᴴ[H | Zᴴ]`` and ``H v``, the update), about
2 n² QR steps (one kernel each, O(n²) work: ~1 ms at n = 128, 0.04 ms at n = 24) and n-1
back-substitution steps (2 kernels each): meant for small and medium matrices.
"""

from __future__ import annotations

import math

import numpy as np

from . import dtype as dt
from .linalg_kernels import (_H, _abs2, _batched, _gather2, _iota, _mdiag, _polar, _replayed, _rotate_pairs,
                             _sweeps, _wide)
from .ops.elementwise import where
from .ops.movement import cat
from .tensor import Tensor

__all__ = ["EIG_MAX_SWEEPS", "EIG_SWEEPS", "eig"]

EIG_SWEEPS = 4  # the fixed count, 4 n + 4 sweeps, when values cannot be read (jit, vmap)
EIG_MAX_SWEEPS = 30  # the limit, per row of the matrix, when convergence is checked
_STATE = 3  # state row entries of a QR step: position, hi, iterations since hi last moved
_EPS = float(np.finfo(np.float64).eps)
_TINY = float(np.finfo(np.float64).tiny)


def _cabs1(z: Tensor) -> Tensor:
    """``|Re z| + |Im z|``: LAPACK's cheap modulus for thresholds."""
    return z.real.abs() + z.imag.abs()


def _state(s: Tensor, col: int) -> Tensor:
    """Entry ``col`` of the state row (the last row) of ``s`` (B, n+1, w), (B, 1, 1)."""
    return s[:, -1:, col:col + 1]


def _index(x: Tensor) -> Tensor:
    """A state entry (a small integer stored in the complex state row) as int64."""
    return x.real.astype(dt.int64)


def _with_state(s: Tensor, body: Tensor, values: list[Tensor]) -> Tensor:
    """``body`` (B, n+1, w) with its last row replaced by ``values`` (each (B, 1, 1)) and zeros."""
    _, n1, w = s.shape
    i = _iota(n1, s.device).reshape(1, n1, 1)
    j = _iota(w, s.device).reshape(1, 1, w)
    row = s._const(0, s.dtype, ())
    for c in reversed(range(len(values))):
        row = where(j == c, values[c].astype(s.dtype), row)
    return where(i == n1 - 1, row, body)


# --- Hessenberg reduction --------------------------------------------------------------------------
def _hessenberg_step(s: Tensor) -> Tensor:
    """Reduce column k (the state) of H in ``s`` = [H | Zᴴ | state row] (B, n+1, w):
    ``H <- Pᴴ H P`` and ``Zᴴ <- Pᴴ Zᴴ`` with the reflector ``P = I - τ v vᴴ`` (v_k+1 = 1) for
    which ``Pᴴ H[k+1:, k] = β e_1``, β real; column k is written exactly (β, then zeros)."""
    _, n1, w = s.shape
    n = n1 - 1
    i = _iota(n1, s.device).reshape(1, n1, 1)
    j = _iota(w, s.device).reshape(1, 1, w)
    k = _index(_state(s, 0))
    zero, one = s._const(0, s.dtype, ()), s._const(1, s.dtype, ())
    col = _gather2(s, i, k)
    head, below = i == k + 1, (i > k + 1) & (i < n)
    alpha = where(head, col, zero).sum(1, keepdims=True)
    sig2 = where(below, _abs2(col), 0.0).sum(1, keepdims=True)
    trivial = sig2.eq(0) & alpha.imag.eq(0)
    norm = (_abs2(alpha) + sig2).sqrt()
    beta = where(trivial, alpha.real, where(alpha.real >= 0, -norm, norm)).astype(s.dtype)
    tau = where(trivial, zero, (beta - alpha) / where(trivial, one, beta))
    scale = where(trivial, zero, 1 / where(trivial, one, alpha - beta))

    def v(idx: Tensor) -> Tensor:
        return where(idx == k + 1, one, where((idx > k + 1) & (idx < n), _gather2(s, idx, k) * scale, zero))

    vc, vr = v(i), v(j)  # v as a column and as a row (0 outside H's rows and columns)
    y = (vc.conj() * s).sum(1, keepdims=True)  # vᴴ [H | Zᴴ]
    hv = (s * vr).sum(-1, keepdims=True)  # H v
    sigma = (y * vr).sum(-1, keepdims=True)  # vᴴ H v
    left = s - tau.conj() * vc * y  # Pᴴ [H | Zᴴ]
    out = left - tau * (hv - tau.conj() * vc * sigma) * vr.conj()  # then H P: (Pᴴ H) v = H v - τ̄ v σ
    out = where(j == k, where(head, beta, where(below, zero, out)), out)
    return _with_state(s, out, [k + 1])


def _hessenberg_impl(a: Tensor) -> Tensor:
    """``[H | Zᴴ]`` in complex128 with a zero state row, (B, n+1, max(2n, 3)), for ``a`` (..., n, n):
    ``a = Z H Zᴴ`` with H upper Hessenberg."""
    a = _wide(_batched(a, 2)[0]).astype(dt.complex128)
    b, n, _ = a.shape
    w = max(2 * n, _STATE)
    eye = (_iota(n, a.device).reshape(n, 1) == _iota(w - n, a.device).reshape(1, w - n)).astype(a.dtype)
    s = cat([cat([a, eye.broadcast_to((b, n, w - n))], -1), a._const(0, a.dtype, (b, 1, w))], 1).contiguous()
    for _ in range(n - 2):
        s = _hessenberg_step(s).contiguous()
    return _with_state(s, s, []).contiguous()


# --- shifted QR iterations -------------------------------------------------------------------------
def _negligible(s: Tensor, i: Tensor) -> Tensor:
    """Whether the subdiagonal entry ``h_i,i-1`` of H in ``s`` is negligible, for row indices ``i``
    (1 <= i < n; False elsewhere): below ``eps`` times its diagonal neighbours, or tiny."""
    n = s.shape[1] - 1
    prev = where(i > 0, i - 1, 0)
    sub = _cabs1(_gather2(s, i, prev))
    near = _cabs1(_gather2(s, prev, prev)) + _cabs1(_gather2(s, i, i))
    return (i >= 1) & (i < n) & ((sub <= _EPS * near) | (sub <= _TINY * n / _EPS))


def _window(s: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(negligible subdiagonal flags (B, n+1, 1), lo, hi (B, 1, 1)): the active window is the
    lowest unreduced block ``[lo, hi]``; hi = 0 when there is none (H is triangular)."""
    n1 = s.shape[1]
    i = _iota(n1, s.device).reshape(1, n1, 1)
    neg = _negligible(s, i)
    live = (i >= 1) & (i < n1 - 1) & ~neg
    hi = where(live, i, 0).max(1, keepdims=True)
    lo = where((neg | i.eq(0)) & (i <= hi), i, 0).max(1, keepdims=True)
    return neg, lo, hi


def _shift(s: Tensor, lo: Tensor, hi: Tensor, its: Tensor) -> Tensor:
    """The shift of an iteration on the window ``[lo, hi]``: the eigenvalue of its trailing 2x2
    block closer to the last diagonal entry (Wilkinson's; LAPACK zlahqr's formula), or after
    10, 30, … (20, 40, …) iterations without a deflation at hi zlahqr's exceptional shift from
    the top (bottom) of the window."""
    h1 = where(hi > 0, hi - 1, 0)
    a, b, c, d = _gather2(s, h1, h1), _gather2(s, h1, hi), _gather2(s, hi, h1), _gather2(s, hi, hi)
    x = (a - d) * 0.5
    bc = b * c
    y = (x * x + bc).sqrt()
    y = where((x.conj() * y).real < 0, -y, y)
    den = x + y
    zero = den.eq(0)
    mu = d - where(zero, s._const(0, s.dtype, ()), bc / where(zero, s._const(1, s.dtype, ()), den))
    top = _gather2(s, lo, lo) + 0.75 * _gather2(s, lo + 1, lo).real.abs()
    bottom = d + 0.75 * c.real.abs()
    odd = (its // 10) % 2 == 1
    return where((its > 0) & (its % 10 == 0), where(odd, top, bottom), mu)


def _chase_step(s: Tensor) -> Tensor:
    """One Givens step of the shifted QR iterations on ``s`` = [H | Zᴴ | state row] (B, n+1, w):
    starts an iteration (deflation, window, shift, the first rotation) when the previous one is
    finished, else moves the bulge one row down. One kernel."""
    _, n1, w = s.shape
    n = n1 - 1
    i = _iota(n1, s.device).reshape(1, n1, 1)
    j = _iota(w, s.device).reshape(1, 1, w)
    pos0, hi0, its0 = (_index(_state(s, c)) for c in range(_STATE))
    start = pos0 + 1 >= hi0
    neg, lo, hi = _window(s)
    its = where(hi == hi0, its0 + 1, 0)
    mu = _shift(s, lo, hi, its)  # only a starting step uses it
    pos = where(start, lo, pos0 + 1)
    hi, its = where(start, hi, hi0), where(start, its, its0)
    before = where(pos > 0, pos - 1, 0)
    f = where(start, _gather2(s, pos, pos) - mu, _gather2(s, pos, before))
    g = where(start, _gather2(s, pos + 1, pos), _gather2(s, pos + 1, before))
    # the rotation [[c, sn], [-s̄n, c]] that zeroes g under f (LAPACK's zlartg), c real
    af, ag = f.abs(), g.abs()
    rho = (af * af + ag * ag).sqrt()
    active = (pos < hi) & (rho > 0)
    safe = where(active, rho, rho._const(1))
    phase = where(af.eq(0), f._const(1), f / where(af.eq(0), af._const(1), af).astype(f.dtype))
    dc = where(active, -(ag * ag) / (safe * (af + safe)), rho._const(0))  # c - 1, accurate
    sn = where(active, phase * g.conj() / safe.astype(f.dtype), f._const(0))

    def spec(k: Tensor, inside: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        here, nxt = inside & (k == pos), inside & (k == pos + 1)
        return (where(here | nxt, dc, dc._const(0)), where(here, sn.conj(), where(nxt, -sn, sn._const(0))),
                where(here, pos + 1, where(nxt, pos, k)))

    out = _rotate_pairs(s, i, j, spec(i, i < n), spec(j, j < n))
    bulge = ~start & (i == pos + 1) & (j == before) & (pos > 0)
    deflated = start & neg & (j == i - 1)
    out = where(bulge | deflated, s._const(0, s.dtype, ()), out)
    return _with_state(s, out, [pos, hi, its])


def _chase_sweep_impl(s: Tensor) -> Tensor:
    """One sweep: n steps of :func:`_chase_step` on ``s`` (B, n+1, w)."""
    for _ in range(s.shape[1] - 1):
        s = _chase_step(s).contiguous()
    return s


def _unfinished(s: Tensor) -> Tensor:
    """(B,): how many subdiagonal entries are not negligible yet, plus one while a bulge is being
    chased; 0 for a matrix with a nan or inf (nothing more can be computed)."""
    n1 = s.shape[1]
    i = _iota(n1, s.device).reshape(1, n1, 1)
    live = ((i >= 1) & (i < n1 - 1) & ~_negligible(s, i)).astype(dt.float64).sum((-2, -1))
    chasing = (_index(_state(s, 0)) + 1 < _index(_state(s, 1))).astype(dt.float64).reshape(-1)
    bad = ~_cabs1(s[:, :-1, :]).sum((-2, -1)).isfinite()
    return where(bad, 0.0, live + chasing)


# --- eigenvectors ------------------------------------------------------------------------------------
def _backsub_step(s: Tensor) -> Tensor:
    """Row i (the state) of the eigenvectors Y of the triangular T in ``s`` = [T | Y | state row]
    (B, n+1, 2n): ``y_ik = -Σ_j>i t_ij y_jk / (t_ii - t_kk)`` for every k > i at once, the divisor
    kept at least the state's ``smin`` in size (rows below i are done; Y starts as the identity)."""
    _, n1, w = s.shape
    n = n1 - 1
    i = _iota(n1, s.device).reshape(1, n1, 1)
    j = _iota(w, s.device).reshape(1, 1, w)
    row, smin = _index(_state(s, 0)), _state(s, 1)
    jj = _iota(n, s.device).reshape(1, n, 1)
    k = _iota(n, s.device).reshape(1, 1, n)
    acc = (where(jj > row, _gather2(s, row, jj), s._const(0, s.dtype, ())) * s[:, :n, n:]).sum(1, keepdims=True)
    d = _gather2(s, row, row) - _gather2(s, k, k)
    d = where(_cabs1(d) < smin.real, smin, d)
    new = (-acc / d).pad(((0, 0), (0, 0), (n, 0)))  # (B, 1, 2n): in Y's columns
    out = where((i == row) & (j - n > row), new, s)
    return _with_state(s, out, [row - 1, smin])


def _eigvecs_impl(shape: tuple[int, ...], out: dt.DType, s: Tensor) -> tuple[Tensor, Tensor]:
    """(eigenvalues (..., n), unit eigenvectors (..., n, n)) in dtype ``out`` for an input of
    ``shape`` from ``s`` = [T | Zᴴ | state] after the QR iterations (T is taken as the upper
    triangle of H); all nan for a matrix with a nan or inf."""
    b, n1, _ = s.shape
    n = n1 - 1
    t = s[:, :n, :n].triu()
    z = _H(s[:, :n, n:2 * n])
    eye = (_iota(n, s.device).reshape(n, 1) == _iota(n, s.device).reshape(1, n)).astype(s.dtype)
    ty = cat([cat([t, eye.broadcast_to((b, n, n))], -1), s._const(0, s.dtype, (b, 1, 2 * n))], 1)
    smin = (_cabs1(t).max((-2, -1), keepdims=True) * _EPS).maximum(_TINY * n / _EPS)
    ty = _with_state(ty, ty, [ty._const(n - 2, dt.int64, (b, 1, 1)), smin]).contiguous()
    for _ in range(n - 1):
        ty = _backsub_step(ty).contiguous()
    v = z @ ty[:, :n, n:]
    v = v / _abs2(v).sum(1, keepdims=True).sqrt().astype(v.dtype)
    mag = _abs2(v)
    rows = _iota(n, s.device).reshape(1, n, 1)
    first = where(mag.eq(mag.max(1, keepdims=True)), rows, n).min(1, keepdims=True)  # the largest component
    size, phase = _polar(where(rows == first, v, v._const(0)).sum(1, keepdims=True))
    v = where(rows == first, size.astype(v.dtype), v * phase.conj())  # that component exactly real
    bad = ~_cabs1(s[:, :n, :]).sum((-2, -1), keepdims=True).isfinite()
    nan = s._const(complex(math.nan, math.nan), s.dtype, ())
    w, v = where(bad[:, 0], nan, (t * eye).sum(-1)), where(bad, nan, v)
    return w.astype(out).reshape(shape[:-1]), v.astype(out).reshape(shape)


_hessenberg = _replayed(_hessenberg_impl)
_chase_sweep = _replayed(_chase_sweep_impl)
_eigvecs = _replayed(_eigvecs_impl, static_argnums=(0, 1))


def eig(a: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (..., n) and right eigenvectors (columns, (..., n, n), unit 2-norm, largest
    component real) of each square matrix of ``a``: ``a @ v = v * w[..., None, :]``. Complex
    results: complex64 for float32/complex64 input, complex128 for float64/complex128."""
    n = a.shape[-1]
    out = dt.complex64 if a.dtype in (dt.float32, dt.complex64) else dt.complex128
    if a.numel() == 0 or n == 1:
        return _mdiag(a).astype(out), a._const(1, out, a.shape)
    s = _sweeps(_chase_sweep, _hessenberg(a), _unfinished, EIG_SWEEPS * n + 4, EIG_MAX_SWEEPS * n)
    return _eigvecs(a.shape, out, s)

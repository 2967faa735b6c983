"""Dense linear algebra written only in corvid Tensor ops: the ``"kernels"`` backend of
:mod:`corvid.linalg`.

Nothing here calls numpy.linalg or a host kernel, and nothing reads a value back to Python to
decide what to compute (except the optional convergence checks of the Jacobi methods, below), so
every function runs wherever corvid's generated kernels run, and works under ``vmap``, ``jit`` and
the transforms. The public functions of :mod:`corvid.linalg` call these when the backend is
``"kernels"``; their derivatives come from the rules in :mod:`corvid.linalg`, never from
differentiating the algorithms below. All functions take stacks ``(..., M, N)`` of float32 or
float64 matrices (complex64/complex128 too for the Cholesky and LU families) and batch over the
leading dimensions.

How each algorithm keeps the number of kernels moderate: a sequential algorithm needs one kernel
launch per dependent step, and a kernel whose *structure* (ops, shapes, constants) changes at each
step would also be compiled at each step. So every step below is written to be one (LU: two)
kernels of the same structure each time: the step's position is data (a rotating panel, a flag
column, a state row, an index buffer), and the small reductions a step needs (a pivot search, a
norm, a dot product) depend only on the batch index (and column), so the scheduler fuses them
into the step's kernel, where they are computed once per matrix (column). The intended kernel
boundaries are explicit (``contiguous()``), which also keeps the scheduler to a single pass.

* ``cholesky``: recursive (divide and conquer) on the block size ``CHOL_BASE``. A diagonal block
  of that size is factorized in *one* fused kernel: Gaussian elimination of ``[A | I]`` written as
  ``CHOL_BASE`` elementwise rank-1 updates, which the code generator unrolls (and whose scalar part
  it hoists out of the element loops), giving both ``L`` and ``L⁻¹`` of the block. A larger matrix
  is split in halves: ``L21 = A21 L11⁻ᴴ``, the Schur complement ``A22 - L21 L21ᴴ`` is factorized
  recursively, and ``L⁻¹`` is assembled as ``[[X11, 0], [-X22 L21 X11, X22]]`` (4 matrix products
  per split). Sub-problems of one recursion level share shapes, so their kernels compile once.
* ``tri_inv`` (inverse of a triangular matrix), used by every solve: log-depth. Level ``s`` inverts
  all diagonal blocks of size ``2^s`` at once (batched products ``-X22 T21 X11``), so an ``n x n``
  triangle costs about ``3 log2(n)`` kernels. ``solve_triangular`` multiplies by it.
* ``lu`` (partial pivoting), then ``solve``, ``inv``, ``det``, ``slogdet``: blocked right-looking
  with panels of ``LU_BLOCK`` columns. Rows never move during the factorization: a column step
  picks the pivot among the rows not yet used (an argmax over a packed ``(|x|, row)`` integer key,
  a reduction fused with the read of the pivot row), eliminates, and marks the pivot row in a flag
  column with the step number. The active column is data (a state row of the panel), so every
  step is the same two kernels. After a panel, the pivot rows are gathered (``U12 = L11⁻¹ A[piv]``)
  and the other rows get one product (``A -= L21 U12``); at the end all rows are gathered into
  pivot order. ``det`` multiplies U's diagonal by the sign of the permutation (its inversion
  count); ``solve``/``inv`` multiply by ``tri_inv`` of L and U. A zero pivot skips the
  elimination (as LAPACK's getrf): ``det`` is 0 and ``slogdet`` is ``(0, -inf)`` for a singular
  matrix, and ``solve``/``inv`` then contain inf/nan.
* ``qr``: blocked Householder (LAPACK's sign convention, so Q and R match numpy's up to
  rounding). The panel is stored transposed, so the reduction ``vᵀ A`` of a step is fused into
  its kernel (one launch per column); panels are applied to the trailing columns in compact WY
  form ``I - V T Vᵀ`` with ``T⁻¹ = diag(1/τ) + striu(VᵀV)`` (``tri_inv``), and so is Q.
* ``eigh``: cyclic two-sided Jacobi in round-robin (tournament) order: each round rotates n/2
  disjoint pairs at once, ``[A | Vᵀ]`` in one kernel (the angles are computed inline from
  gathered entries); a sweep is n-1 rounds. ``svd``: one-sided (Hestenes) Jacobi on the columns
  of ``[Aᵀ | Vᵀ]`` the same way (the column norms and dot products are reductions fused into the
  round's kernel); U is completed to an orthonormal basis with ``qr`` where needed.
  Within a pair, eigh writes the exact ``a_pp - t a_pq``, ``a_qq + t a_pq`` and 0, and both
  members of a pair compute the angle from the same entries (so each rotation is orthogonal).
  Convergence: when the values can be read (not inside ``jit`` or ``vmap``), it is checked after
  every sweep (one synchronization per sweep): eigh stops when the off-diagonal mass is at most
  ``(n·eps)²·‖A‖²``, svd when every cosine between columns is below ``eps·√m``, or after
  ``JACOBI_MAX_SWEEPS``; otherwise a fixed ``JACOBI_SWEEPS[dtype]`` sweeps run (the rotations of a
  converged matrix are the identity, so extra sweeps are harmless). A matrix with nan never
  converges and stops at the limit (nan results).

Replay: the public functions (and one Jacobi sweep) are captured with ``jit`` per input shape
when called on plain values, so a second call of the same shape launches the recorded kernels
without building or scheduling the graph again (under ``grad``, ``jvp``, ``vmap`` or an enclosing
``jit`` they run inside that trace instead). The *first* call of a shape pays for building and
scheduling every step (seconds for n = 1024) and for compiling its kernels (cached on disk).

Cost: Cholesky launches about ``7 n / CHOL_BASE`` kernels, LU about ``2 n + 22 n / LU_BLOCK``, QR
about ``n + 25 n / QR_BLOCK``, a triangular inverse about ``3 log2(n)``; the Jacobi methods are O(n³) per sweep and launch n - 1 kernels
per sweep (typically 6 to 8 sweeps): they are meant for the small and medium matrices typical
inside models.

>>> import corvid as cv
>>> from corvid import linalg_kernels as K
>>> a = cv.Tensor([[4.0, 2.0], [2.0, 3.0]])
>>> [[round(v, 4) for v in row] for row in K.cholesky(a).tolist()]
[[2.0, 0.0], [1.0, 1.4142]]
>>> round(K.det(a).item(), 4)
8.0
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np

from . import dtype as dt
from .engine import capture
from .graph.node import Op, node
from .ops.elementwise import where
from .ops.indexing import _has_placeholder, gather_prim
from .ops.movement import cat
from .tensor import Tensor

__all__ = ["CHOL_BASE", "LU_BLOCK", "QR_BLOCK", "JACOBI_MAX_SWEEPS", "JACOBI_SWEEPS", "cholesky", "det", "eigh",
           "eigvalsh", "inv", "lu", "pinv", "qr", "slogdet", "solve", "solve_triangular", "svd", "svdvals", "tri_inv"]

CHOL_BASE = 8  # the block that one fused kernel factorizes (its kernel has about CHOL_BASE³/3 operations)
LU_BLOCK = 64  # columns per LU panel
QR_BLOCK = 32  # columns per Householder panel
JACOBI_MAX_SWEEPS = 30  # the limit when convergence is checked
JACOBI_SWEEPS = {dt.float32: 10, dt.float64: 14}  # the fixed count when it cannot be (jit, vmap)


# --- helpers -------------------------------------------------------------------------------------
def _iota(n: int, device: str) -> Tensor:
    return Tensor._from_node(node(Op.IOTA, (), None, dt.int64, (n,)), device)


def _eye(n: int, like: Tensor) -> Tensor:
    i = _iota(n, like.device)
    return (i.reshape(n, 1) == i.reshape(1, n)).astype(like.dtype)


def _batched(a: Tensor, core: int) -> tuple[Tensor, tuple[int, ...]]:
    """``a`` with its leading dimensions flattened into one: (B, *core dims)."""
    batch = a.shape[:a.ndim - core]
    return a.reshape((math.prod(batch),) + a.shape[a.ndim - core:]), batch


def _H(a: Tensor) -> Tensor:
    return a.mT.conj()


def _mdiag(a: Tensor) -> Tensor:
    """The diagonal of each (..., n, n) matrix, (..., n)."""
    n = a.shape[-1]
    return (a * _eye(n, a)).sum(-1)


def _gather2(x: Tensor, rows: Tensor | int, cols: Tensor | int) -> Tensor:
    """``x[b, rows, cols]`` of the stored (B, R, C) ``x`` for int64 ``rows``/``cols`` that
    broadcast to (1 or B, R', C'): one indirect load per element, (B, R', C')."""
    b, nr, nc = x.shape
    idx = rows * nc + cols
    shape = (b,) + idx.shape[1:]
    flat = gather_prim(x.reshape(b, nr * nc), idx.broadcast_to(shape).reshape(b, -1), 1)
    return flat.reshape(shape)


def _rows(x: Tensor, idx: Tensor) -> Tensor:
    """Rows ``idx`` (B, k) of the stored (B, n, c) ``x``: (B, k, c), one indirect load each."""
    b, _, c = x.shape
    return gather_prim(x, idx[:, :, None].broadcast_to((b, idx.shape[1], c)), 1)


def _real_dtype(a: Tensor) -> dt.DType:
    return a.dtype.real_dtype


def _eps(a: Tensor) -> float:
    return float(np.finfo(_real_dtype(a).np).eps)


def _readable(t: Tensor) -> bool:
    """Whether ``t``'s value can be computed now (not a jit trace or a vmap placeholder)."""
    return not capture.tracing() and not _has_placeholder(t.node)


def _pad_identity(a: Tensor, n: int) -> Tensor:
    """(B, m, m) -> (B, n, n): ``a`` in the top-left corner, the identity in the rest."""
    m = a.shape[-1]
    if n == m:
        return a
    p = a.pad(((0, 0), (0, n - m), (0, n - m)))
    i = _iota(n, a.device)
    extra = (i.reshape(n, 1) == i.reshape(1, n)) & (i.reshape(n, 1) >= m)
    return where(extra, a._const(1, a.dtype, ()), p)


def _hermitian_from_lower(a: Tensor) -> Tensor:
    """The Hermitian matrix whose lower triangle is ``a``'s (real diagonal)."""
    low = a.tril(-1)
    d = _mdiag(a).real.astype(a.dtype)
    return low + _H(low) + d[..., None] * _eye(a.shape[-1], a)


def _block(a11: Tensor, a21: Tensor, a22: Tensor) -> Tensor:
    """[[a11, 0], [a21, a22]], stored."""
    zero = a11._const(0, a11.dtype, a11.shape[:-1] + (a22.shape[-1],))
    return cat([cat([a11, zero], -1), cat([a21, a22], -1)], -2).contiguous()


# --- triangular inverse and solve ------------------------------------------------------------------
def _tri_inv_lower(t: Tensor, unit: bool) -> Tensor:
    """The inverse of each lower-triangular (B, n, n) ``t`` (entries above the diagonal ignored)."""
    b, n = t.shape[0], t.shape[-1]
    if n == 0 or b == 0:
        return t
    size = 1 << (n - 1).bit_length()
    t = _pad_identity(t, size).tril().contiguous()
    d = t._const(1, t.dtype, (b, size)) if unit else _mdiag(t)
    x = (1 / d).reshape(b, size, 1, 1).contiguous()  # inverses of the 1x1 diagonal blocks
    h = 1
    while h < size:
        m = size // (2 * h)
        blocks = t.reshape(b, m, 2 * h, m, 2 * h).permute(0, 2, 4, 1, 3)  # (B, 2h, 2h, m, m)
        flat = blocks.reshape(b, 2 * h, 2 * h, m * m).pad(((0, 0), (0, 0), (0, 0), (0, m)))
        diag = flat.reshape(b, 2 * h, 2 * h, m, m + 1)[..., 0].permute(0, 3, 1, 2)  # (B, m, 2h, 2h)
        t21 = diag[:, :, h:, :h]
        pairs = x.reshape(b, m, 2, h, h)
        x11, x22 = pairs[:, :, 0], pairs[:, :, 1]
        x21 = (-(x22 @ (t21 @ x11).contiguous())).contiguous()
        x = _block(x11, x21, x22)
        h *= 2
    return x.reshape(b, size, size)[:, :n, :n]


def tri_inv(t: Tensor, *, lower: bool = True, unit_diagonal: bool = False) -> Tensor:
    """The inverse of each triangular matrix of ``t`` (..., n, n); only the triangle named by
    ``lower`` is read (with ones on the diagonal when ``unit_diagonal``). A zero on the diagonal
    gives inf/nan entries."""
    t3, batch = _batched(t, 2)
    x = _tri_inv_lower(t3 if lower else _H(t3), unit_diagonal)
    x = x if lower else _H(x)
    return x.reshape(batch + t.shape[-2:])


def solve_triangular(t: Tensor, b: Tensor, *, lower: bool = True, unit_diagonal: bool = False) -> Tensor:
    """``X`` with ``t @ X = b`` for triangular ``t`` (..., n, n) and ``b`` (..., n, k)."""
    return tri_inv(t, lower=lower, unit_diagonal=unit_diagonal) @ b


# --- cholesky --------------------------------------------------------------------------------------
def _chol_base(a: Tensor) -> tuple[Tensor, Tensor]:
    """L and L⁻¹ of each Hermitian positive-definite (B, n, n) ``a``, n <= CHOL_BASE, in one
    fused kernel: elimination of [A | I] gives [D Lᵤᴴ | Lᵤ⁻¹] (Lᵤ unit lower, A = Lᵤ D Lᵤᴴ)."""
    n = a.shape[-1]
    m = cat([a, _eye(n, a).broadcast_to(a.shape)], -1)
    rows = _iota(n, a.device).reshape(n, 1)
    for k in range(n):
        mult = where(rows > k, m[:, :, k:k + 1] / m[:, k:k + 1, k:k + 1], a._const(0, a.dtype, ()))
        m = m - mult * m[:, k:k + 1, :]
    m = m.contiguous()
    u, e = m[..., :n], m[..., n:]
    r = (1 / _mdiag(u).real.sqrt()).contiguous()  # nan for a matrix that is not positive definite
    lo = (_H(u) * r.astype(a.dtype)[:, None, :]).tril()
    li = (e * r.astype(a.dtype)[:, :, None]).tril()
    return lo, li


def _chol_rec(a: Tensor, need_inv: bool) -> tuple[Tensor, Tensor | None]:
    n = a.shape[-1]
    if n <= CHOL_BASE:
        return _chol_base(a)
    h = CHOL_BASE * -(-n // (2 * CHOL_BASE))
    l11, x11 = _chol_rec(a[:, :h, :h], True)
    l21 = (a[:, h:, :h] @ _H(x11)).contiguous()
    schur = (a[:, h:, h:] - l21 @ _H(l21)).contiguous()
    l22, x22 = _chol_rec(schur, need_inv)
    lo = _block(l11, l21, l22)
    li = _block(x11, (-(x22 @ (l21 @ x11).contiguous())).contiguous(), x22) if need_inv else None
    return lo, li


def cholesky(a: Tensor) -> Tensor:
    """The lower Cholesky factor of each Hermitian positive-definite matrix of ``a`` (..., n, n);
    only the lower triangle is read. A matrix that is not positive definite gives nan entries."""
    a3, _ = _batched(a, 2)
    n = a.shape[-1]
    if a3.shape[0] == 0 or n == 0:
        return a
    size = n if n <= CHOL_BASE else CHOL_BASE * -(-n // CHOL_BASE)
    full = _pad_identity(_hermitian_from_lower(a3), size).contiguous()
    lo, _ = _chol_rec(full, False)
    return lo[:, :n, :n].reshape(a.shape)


# --- LU with partial pivoting ----------------------------------------------------------------------
def _pivot_key(x: Tensor, rows: Tensor, n: int) -> Tensor:
    """An int64 key whose maximum picks the largest ``|x|`` (the first row among equals): the high
    32 bits order |x| (as float32 bits, or the high word of the float64 bits), the low 32 bits are
    ``n - 1 - row``."""
    mag = x.abs()
    if mag.dtype is dt.float64:
        hi = mag.bitcast(dt.int64) & -(1 << 32)
    else:
        hi = mag.astype(dt.float32).bitcast(dt.int32).astype(dt.int64) * (1 << 32)
    return hi | ((n - 1) - rows)


def _lu_step(p: Tensor, nb: int) -> Tensor:
    """One column step on the panel ``p`` (B, n+1, nb+1). Rows 0..n-1 hold the panel's columns
    0..nb-1 (the columns before the active one are finished: multipliers and U entries) and, in
    column nb, a flag: 0 for rows not yet pivots, else the global step number + 1. Row n holds
    the step's state: the active column k in column 0 and -(the next global step number + 1) in
    column nb. Returns the panel after the step.

    Two kernels, the same at every step (the active column is data, read with gathers): the pivot
    search (an argmax over a packed integer key, a reduction per matrix) with the pivot row, and
    the elimination."""
    _, rows1, w = p.shape
    n = rows1 - 1
    r = _iota(rows1, p.device).reshape(1, rows1, 1)
    c = _iota(w + 2, p.device).reshape(1, 1, w + 2)
    one, zero_ = p._const(1, p.dtype, ()), p._const(0, p.dtype, ())
    state = p[:, n:, :]
    k = state[:, :, :1].real.astype(dt.int64)  # (B, 1, 1)
    flag = p[:, :, nb:].real
    free = flag.eq(0)
    col = _gather2(p, r, k)  # the active column (B, n+1, 1)
    key = where(free, _pivot_key(col, r, rows1), -1)
    piv = (rows1 - 1) - (key.max(1, keepdims=True) & 0xFFFFFFFF)  # (B, 1, 1)
    # head: the pivot row in the columns after k (0 elsewhere), then the pivot's row and value
    prow = where((c > k) & (c < nb), _gather2(p, piv, where(c < w, c, 0)), zero_)
    head = where(c == w, piv.astype(p.dtype), where(c == w + 1, _gather2(p, piv, k), prow)).contiguous()
    pv, piv = head[:, :, w + 1:], head[:, :, w:w + 1].real.astype(dt.int64)
    cc = c[:, :, :w]
    is_piv = r == piv
    active = free & ~is_piv
    zero = pv.eq(0)  # a zero pivot: nothing to eliminate (LAPACK's getrf does the same)
    col = _gather2(p, r, k)
    mult = where(active & ~zero, col / where(zero, one, pv), zero_)
    rest = p - mult * head[:, :, :w]
    newcol = where(active, mult, col)
    newflag = where(is_piv, -state[:, :, nb:], flag).astype(p.dtype)
    body = where(cc == nb, newflag, where(cc == k, newcol, rest))
    counters = where(cc == 0, state + 1, where(cc == nb, state - 1, state))
    return where(r == n, counters, body).contiguous()


def lu(a: Tensor) -> tuple[Tensor, Tensor]:
    """The LU factorization with partial pivoting of each square matrix of ``a`` (..., n, n):
    ``(lu, piv)`` with ``lu`` in LAPACK's compact form (unit-lower L below the diagonal, U on and
    above) and ``piv`` (..., n) int64 the original row of each row of ``lu``:
    ``a[..., piv, :] = L @ U``."""
    a3, batch = _batched(a, 2)
    b, n = a3.shape[0], a.shape[-1]
    if b == 0 or n == 0:
        return a, a._const(0, dt.int64, a.shape[:-1])
    nb = min(n, LU_BLOCK)
    size = nb * -(-n // nb)
    work = _pad_identity(a3, size).contiguous()
    flag = a3._const(0, a3.dtype, (b, size, 1))
    done = []
    for c0 in range(0, size, nb):
        marks = cat([a3._const(0, a3.dtype, (b, 1, nb)), a3._const(-(c0 + 1), a3.dtype, (b, 1, 1))], -1)  # state
        panel = cat([cat([work[:, :, :nb], flag], -1), marks], 1).contiguous()
        for _ in range(nb):
            panel = _lu_step(panel, nb)
        panel = panel[:, :size]
        flag = panel[:, :, nb:]
        done.append(panel[:, :, :nb])
        if c0 + nb == size:
            break
        trail = work[:, :, nb:]
        step = flag.real[:, :, 0] - (c0 + 1)  # (B, n): the panel step at which each row was the pivot
        j = _iota(nb, a.device)
        rows = _iota(size, a.device)
        piv = ((step[:, None, :] == j.reshape(1, nb, 1)).astype(dt.int64) * rows.reshape(1, 1, size)).sum(-1)
        piv = piv.contiguous()  # (B, nb): the pivot rows of this panel, in order
        l11 = _rows(panel[:, :, :nb].contiguous(), piv).tril(-1) + _eye(nb, a3)
        u12 = (_tri_inv_lower(l11, True) @ _rows(trail.contiguous(), piv)).contiguous()  # (B, nb, nt)
        free = flag.real.eq(0).astype(a3.dtype)
        mults = (panel[:, :, :nb] * free).contiguous()  # L21: the multipliers of the rows not yet pivots
        update = (mults @ u12).contiguous()  # a plain product, so it gets the vectorized matmul kernel
        mine = (step >= 0) & (step < nb)
        scattered = _rows(u12, where(mine, step, 0).astype(dt.int64))  # row r of U12 where r is a pivot
        work = where(mine[:, :, None], scattered, trail - update).contiguous()
    order = (flag.real[:, :, 0].astype(dt.int64) - 1).contiguous()  # the step at which each row was the pivot
    steps = _iota(size, a.device)
    piv = ((order[:, None, :] == steps.reshape(1, size, 1)).astype(dt.int64) * steps.reshape(1, 1, size)).sum(-1)
    piv = piv.contiguous()
    packed = cat(done, -1).contiguous()
    lu_ = _rows(packed, piv)[:, :n, :n]
    return lu_.reshape(a.shape), piv[:, :n].reshape(batch + (n,))


def _lu_parts(a: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(L, U, piv, permutation sign) of each (B, n, n) matrix."""
    lu_, piv = lu(a)
    n = a.shape[-1]
    lo = lu_.tril(-1) + _eye(n, lu_)
    up = lu_.triu()
    inversions = (piv[:, :, None] > piv[:, None, :]) & (_iota(n, a.device).reshape(n, 1) < _iota(n, a.device).reshape(1, n))
    parity = inversions.astype(dt.int64).sum((-2, -1)) % 2
    return lo, up, piv, (1 - 2 * parity).astype(_real_dtype(a))


def det(a: Tensor) -> Tensor:
    """The determinant of each square matrix of ``a`` (..., n, n): 0 for a singular one."""
    a3, batch = _batched(a, 2)
    if a.shape[-1] == 0:
        return a._const(1, a.dtype, batch)
    if a3.shape[0] == 0:
        return a._const(0, a.dtype, batch)
    _, up, _, sign = _lu_parts(a3)
    return (_mdiag(up).prod(-1) * sign.astype(a.dtype)).reshape(batch)


def slogdet(a: Tensor) -> tuple[Tensor, Tensor]:
    """``(sign, log|det|)`` of each square matrix of ``a``: ``(0, -inf)`` for a singular one."""
    a3, batch = _batched(a, 2)
    rd = _real_dtype(a)
    if a.shape[-1] == 0 or a3.shape[0] == 0:
        return a._const(1, a.dtype, batch), a._const(0, rd, batch)
    _, up, _, sign = _lu_parts(a3)
    d = _mdiag(up)
    mag = d.abs()
    unit = d.sign() if not a.dtype.is_complex else where(mag.eq(0), a._const(0, a.dtype, ()), d / mag.astype(a.dtype))
    s = unit.prod(-1) * sign.astype(a.dtype)
    return s.reshape(batch), mag.log().sum(-1).reshape(batch)


def solve(a: Tensor, b: Tensor) -> Tensor:
    """``X`` with ``a @ X = b`` for square ``a`` (..., n, n) and ``b`` (..., n, k) with the same
    leading dimensions. A singular ``a`` gives inf/nan entries."""
    a3, _ = _batched(a, 2)
    b3 = b.reshape((a3.shape[0],) + b.shape[-2:])
    if a3.shape[0] == 0 or a.shape[-1] == 0 or b.shape[-1] == 0:
        return b
    lo, up, piv, _ = _lu_parts(a3)
    pb = _rows(b3.contiguous(), piv)
    x = _H(_tri_inv_lower(_H(up), False)) @ (_tri_inv_lower(lo, True) @ pb).contiguous()
    return x.reshape(b.shape)


def inv(a: Tensor) -> Tensor:
    """The inverse of each square matrix of ``a`` (..., n, n). A singular one gives inf/nan entries."""
    a3, _ = _batched(a, 2)
    n = a.shape[-1]
    if a3.shape[0] == 0 or n == 0:
        return a
    lo, up, piv, _ = _lu_parts(a3)
    x = (_H(_tri_inv_lower(_H(up), False)) @ _tri_inv_lower(lo, True)).contiguous()  # U⁻¹ L⁻¹ = (P A)⁻¹
    steps = _iota(n, a.device)
    ipiv = ((piv[:, None, :] == steps.reshape(1, n, 1)).astype(dt.int64) * steps.reshape(1, 1, n)).sum(-1).contiguous()
    return gather_prim(x, ipiv[:, None, :].broadcast_to(x.shape), 2).reshape(a.shape)  # A⁻¹ = (P A)⁻¹ P


# --- QR (blocked Householder) ------------------------------------------------------------------------
def _qr_step(p: Tensor, nb: int) -> Tensor:
    """One Householder step on the transposed panel ``p`` (B, nb+2, m+1). Rows 0..nb-1 are the
    panel's columns (0 the active one; rotated: finished ones at the end), row nb flags the rows of
    the matrix still active (1.0), row nb+1 holds τ at the index of each step's diagonal row.
    Column m marks finished panel columns (1). One kernel: the norms and the products ``vᵀ a`` are
    reductions per matrix and per column, fused; the rotation is a gather."""
    _, w, m1 = p.shape
    m = m1 - 1
    j = _iota(w, p.device).reshape(1, w, 1)
    r = _iota(m1, p.device).reshape(1, 1, m1)
    zero, one = p._const(0, p.dtype, ()), p._const(1, p.dtype, ())
    x = p[:, :1, :]
    act = p[:, nb:nb + 1, :] > 0.5
    prev = where(r > 0, _gather2(p, nb, r - 1), zero) > 0.5
    first = act & ~prev
    alpha = where(first, x, zero).sum(-1, keepdims=True)
    sig2 = where(act & ~first, x * x, zero).sum(-1, keepdims=True)
    trivial = sig2.eq(0)
    norm = (alpha * alpha + sig2).sqrt()
    beta = where(trivial, alpha, where(alpha >= 0, -norm, norm))
    tau = where(trivial, zero, (beta - alpha) / where(trivial, one, beta))
    scale = where(trivial, zero, 1 / where(trivial, one, alpha - beta))
    v = where(first, one, where(act, x * scale, zero))  # (B, 1, m+1): 0 at the marker column
    src = where(j < nb - 1, j + 1, where(j == nb - 1, 0, j))  # the rotation
    moved = _gather2(p, src, r)
    wsrc = (v * moved).sum(-1, keepdims=True)  # vᵀ a for each (rotated) column
    pending = 1 - _gather2(p, src, m)
    rest = moved - tau * v * (wsrc * pending)
    newcol = where(r == m, one, where(first, beta, where(act, v, x)))
    flag = where(first, zero, p[:, nb:nb + 1, :])
    taus = where(first, tau, p[:, nb + 1:, :])
    return where(j == nb + 1, taus, where(j == nb, flag, where(j == nb - 1, newcol, rest))).contiguous()


def _householder_t(vt: Tensor, tau: Tensor) -> tuple[Tensor, Tensor]:
    """(Vᵀ with the vectors of τ = 0 zeroed, T) of the compact WY form ``H_1 ⋯ H_k = I - V T Vᵀ``:
    T⁻¹ = diag(1/τ) + striu(Vᵀ V) (1 where τ = 0, whose vector contributes nothing)."""
    k = vt.shape[1]
    skip = tau.eq(0)
    vt = (vt * (~skip).astype(vt.dtype)[:, :, None]).contiguous()
    d = where(skip, vt._const(1, vt.dtype, ()), 1 / where(skip, vt._const(1, vt.dtype, ()), tau))
    tinv = ((vt @ vt.mT).contiguous().triu(1) + d[:, :, None] * _eye(k, vt)).contiguous()
    return vt, _H(_tri_inv_lower(_H(tinv), False))


def _qr(a: Tensor, mode: str) -> tuple[Tensor, Tensor]:
    b, m, n = a.shape
    k = min(m, n)
    if k == 0 or b == 0:
        q = _eye(m, a).broadcast_to((b, m, m))
        return (q if mode == "complete" else q[:, :, :k]), a._const(0, a.dtype, (b, m if mode == "complete" else k, n))
    nb = min(k, QR_BLOCK)
    kp = nb * -(-k // nb)
    mp = max(m, kp)
    zeros = a._const(0, a.dtype, (b, m, kp - k))
    work = cat([a[:, :, :k], zeros, a[:, :, k:]], -1) if kp > k else a
    work = work.pad(((0, 0), (0, mp - m), (0, 0))) if mp > m else work
    ct = cat([work.mT, a._const(0, a.dtype, (b, work.shape[-1], 1))], -1).contiguous()  # (B, n', m'+1)
    flag = (_iota(mp + 1, a.device) < mp).astype(a.dtype).reshape(1, 1, mp + 1).broadcast_to((b, 1, mp + 1))
    taus = a._const(0, a.dtype, (b, 1, mp + 1))
    panels = []
    rows = _iota(mp, a.device).reshape(1, 1, mp)
    for c0 in range(0, kp, nb):
        p = cat([ct[:, :nb], flag, taus], 1).contiguous()
        for _ in range(nb):
            p = _qr_step(p, nb)
        flag, taus = p[:, nb:nb + 1], p[:, nb + 1:]
        comp = p[:, :nb, :mp]
        panels.append(comp)
        ct = ct[:, nb:]
        if ct.shape[1]:
            pos = c0 + _iota(nb, a.device).reshape(1, nb, 1)
            vt = where(rows > pos, comp, where(rows == pos, a._const(1, a.dtype, ()), a._const(0, a.dtype, ())))
            vt, t = _householder_t(vt, taus[:, 0, c0:c0 + nb])
            c = ct[:, :, :mp]
            c = c - (((c @ vt.mT).contiguous() @ t).contiguous() @ vt).contiguous()
            ct = cat([c, ct[:, :, mp:]], -1).contiguous()
    comp = cat(panels, 1)  # (B, kp, m'): the compact columns, transposed
    rfull = cat([comp, ct[:, :, :mp]], 1).mT  # (B, m', n')
    r_rows = m if mode == "complete" else k
    rr = (cat([rfull[:, :, :k], rfull[:, :, kp:]], -1) if kp > k else rfull)[:, :min(r_rows, mp)].triu()
    if r_rows > rr.shape[1]:
        rr = rr.pad(((0, 0), (0, r_rows - rr.shape[1]), (0, 0)))
    pos = _iota(kp, a.device).reshape(1, kp, 1)
    vt = where(rows > pos, comp, where(rows == pos, a._const(1, a.dtype, ()), a._const(0, a.dtype, ())))
    vt, t = _householder_t(vt, taus[:, 0, :kp])
    q_cols = m if mode == "complete" else k
    eye = _eye(mp, a)[:, :q_cols]
    q = eye - vt.mT @ (t @ vt[:, :, :q_cols])
    return q[:, :m], rr


def qr(a: Tensor, mode: str = "reduced") -> tuple[Tensor, Tensor]:
    """Householder QR of each matrix of ``a`` (..., M, N) with numpy's shapes and LAPACK's sign
    convention (R's diagonal is ``-sign(a_kk)·norm``): ``mode`` "reduced" or "complete"."""
    a3, batch = _batched(a, 2)
    q, r = _qr(a3, mode)
    return q.reshape(batch + q.shape[1:]), r.reshape(batch + r.shape[1:])


# --- Jacobi: eigh and svd --------------------------------------------------------------------------
_ROUNDS: dict[tuple[int, int, str], list[Tensor]] = {}


def _rounds(n: int, width: int, device: str) -> list[Tensor]:
    """The n-1 rounds of a round-robin tournament of n (even) players, as index buffers of length
    ``width`` (>= n): entry i is i's partner (entries from n on are themselves). Each round pairs
    every index once, and every pair meets once per sweep."""
    key = (n, width, device)
    if key not in _ROUNDS:
        out = []
        for rnd in range(n - 1):
            partner = np.arange(width, dtype=np.int64)
            pairs = [(rnd, n - 1)] + [((rnd + i) % (n - 1), (rnd - i) % (n - 1)) for i in range(1, n // 2)]
            for p, q in pairs:
                partner[p], partner[q] = q, p
            out.append(Tensor(partner, device=device).realize())
        _ROUNDS[key] = out
    return _ROUNDS[key]


def _rotation(app: Tensor, aqq: Tensor, apq: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(c, s, t = s/c) of the Jacobi rotation that zeroes ``apq`` of [[app, apq], [apq, aqq]]
    (Golub and Van Loan's sym.schur2); (1, 0, 0) when ``apq`` is 0."""
    zero = apq.eq(0)
    theta = (aqq - app) / (2 * where(zero, apq._const(1), apq))
    sgn = where(theta >= 0, theta._const(1), theta._const(-1))
    t = sgn / (theta.abs() + (1 + theta * theta).sqrt())  # inf θ gives t = 0
    t = where(zero, t._const(0), t)
    c = 1 / (1 + t * t).sqrt()
    return c, c * t, t


def _eigh_round(s: Tensor, partner: Tensor) -> Tensor:
    """One round on ``s`` = [A | Vᵀ] (B, n, 2n): every pair (i, partner[i]) rotated at once,
    ``A <- Jᵀ A J`` and ``Vᵀ <- Jᵀ Vᵀ``, in one kernel (angles computed inline). Within a pair
    the entries use the exact forms ``a_pp - t a_pq``, ``a_qq + t a_pq`` and 0."""
    _, n, w = s.shape
    i = _iota(n, s.device).reshape(1, n, 1)
    j = _iota(w, s.device).reshape(1, 1, w)
    pi, pj = partner[:n].reshape(1, n, 1), partner.reshape(1, 1, w)

    def angle(k: Tensor, pk: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        lo = k < pk
        p, q = where(lo, k, pk), where(lo, pk, k)  # both members of a pair read the same entries
        apq = _gather2(s, p, q)
        c, sn, t = _rotation(_gather2(s, p, p), _gather2(s, q, q), apq)
        return c, where(lo, -sn, sn), where(lo, -t, t), apq

    ci, si, ti, api = angle(i, pi)
    inside = j < n
    cj, sj, _, _ = angle(where(inside, j, 0), where(inside, pj, 0))
    cj, sj = where(inside, cj, cj._const(1)), where(inside, sj, sj._const(0))
    row_i = cj * s + sj * _gather2(s, i, pj)
    row_p = cj * _gather2(s, pi, j) + sj * _gather2(s, pi, pj)
    out = ci * row_i + si * row_p
    out = where(j == i, s + ti * api, where((j == pi) & (pi != i), s._const(0), out))
    return out.contiguous()


def _eigh_sweep_impl(s: Tensor) -> Tensor:
    """One sweep (n-1 rounds) of :func:`_eigh_round` on ``s`` (B, n, 2n)."""
    n = s.shape[1]
    for partner in _rounds(n, 2 * n, s.device):
        s = _eigh_round(s, partner)
    return s


def _svd_sweep_impl(st: Tensor) -> Tensor:
    """One sweep (n-1 rounds) of :func:`_svd_round` on ``st`` (B, n, m+n)."""
    n = st.shape[1]
    for partner in _rounds(n, n, st.device):
        st = _svd_round(st, partner, st.shape[2] - n)
    return st


def _sweeps(step: Callable[[Tensor], Tensor], state: Tensor, off: Callable[[Tensor], Tensor]) -> Tensor:
    """Jacobi sweeps until ``off(state)`` (a (B,) measure, converged at <= 0) says so for every
    matrix, checked after each sweep when values can be read; a fixed count otherwise."""
    d = _real_dtype(state)
    if not _readable(state):
        for _ in range(JACOBI_SWEEPS.get(d, JACOBI_SWEEPS[dt.float64])):
            state = step(state)
        return state
    for _ in range(JACOBI_MAX_SWEEPS):
        state = step(state)
        if not bool((off(state) > 0).any().item()):
            break
    return state


def _sorted_order(keys: Tensor) -> Tensor:
    """The int64 permutation (B, n) that sorts each row of ``keys`` (B, n) ascending, stable."""
    n = keys.shape[-1]
    i = _iota(n, keys.device)
    a, c = keys[:, :, None], keys[:, None, :]
    before = (c < a) | (c.eq(a) & (i.reshape(1, 1, n) < i.reshape(1, n, 1)))
    rank = before.astype(dt.int64).sum(-1)  # (B, n): the position of each element
    return ((rank[:, None, :] == i.reshape(1, n, 1)).astype(dt.int64) * i.reshape(1, 1, n)).sum(-1).contiguous()


def _eigh(a: Tensor) -> tuple[Tensor, Tensor]:
    b, n = a.shape[0], a.shape[-1]
    if n <= 1 or b == 0:
        return _mdiag(a), _eye(n, a).broadcast_to(a.shape)
    size = n + n % 2
    sym = _hermitian_from_lower(a).pad(((0, 0), (0, size - n), (0, size - n)))
    s = cat([sym, _eye(size, a).broadcast_to((b, size, size))], -1).contiguous()
    eps = _eps(a)

    def off(s: Tensor) -> Tensor:
        m = s[:, :, :size]
        sq = m * m
        return (sq * (1 - _eye(size, sq))).sum((-2, -1)) - (size * eps) ** 2 * sq.sum((-2, -1))

    s = _sweeps(_eigh_sweep, s, off)
    w = _mdiag(s[:, :n, :n])
    order = _sorted_order(w)
    vt = _rows(s[:, :n, size:size + n].contiguous(), order)
    return gather_prim(w, order, 1), vt.mT


def eigh(a: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (ascending) and orthonormal eigenvectors (columns) of each symmetric matrix of
    ``a`` (..., n, n), by cyclic Jacobi; only the lower triangle is read."""
    a3, batch = _batched(a, 2)
    w, v = _eigh(a3)
    return w.reshape(batch + w.shape[1:]), v.reshape(a.shape)


def eigvalsh(a: Tensor) -> Tensor:
    """The eigenvalues (ascending) of each symmetric matrix of ``a`` (..., n, n)."""
    return eigh(a)[0]


def _svd_round(st: Tensor, partner: Tensor, m: int) -> Tensor:
    """One round of one-sided Jacobi on ``st`` = [Aᵀ | Vᵀ] (B, n, m+n): the columns i and
    partner[i] of A (rows of ``st``) are rotated to be orthogonal, and V with them. The squared
    norms and dot products are reductions fused into the kernel."""
    _, n, w = st.shape
    i = _iota(n, st.device).reshape(1, n, 1)
    r = _iota(m, st.device).reshape(1, 1, m)
    pi = partner[:n].reshape(1, n, 1)
    ai, ap = st[:, :, :m], _gather2(st, pi, r)
    norm_i, norm_p, dot = (ai * ai).sum(-1, keepdims=True), (ap * ap).sum(-1, keepdims=True), (ai * ap).sum(-1, keepdims=True)
    lo = i < pi
    c, sn, _ = _rotation(where(lo, norm_i, norm_p), where(lo, norm_p, norm_i), dot)
    sn = where(lo, -sn, sn)
    j = _iota(w, st.device).reshape(1, 1, w)
    return (c * st + sn * _gather2(st, pi, j)).contiguous()


def _svd_jacobi(a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(Aᵀ rotated, s, Vᵀ) for (B, m, n) ``a`` with m >= n, n >= 1: ``rows of the first / s`` are
    U's columns. Singular values descending; the rows of both are in that order."""
    b, m, n = a.shape
    size = n + n % 2
    at = a.mT.pad(((0, 0), (0, size - n), (0, 0)))
    st = cat([at, _eye(size, a).broadcast_to((b, size, size))], -1).contiguous()
    tol = _eps(a) * max(m, 1) ** 0.5

    def off(st: Tensor) -> Tensor:
        x = st[:, :, :m]
        g = x @ x.mT
        d = _mdiag(g)
        den = d[:, :, None] * d[:, None, :]
        ratio = where(den > 0, g * g / where(den > 0, den, den._const(1)), den._const(0))
        ratio = ratio * (1 - _eye(size, ratio))
        return ratio.max((-2, -1)) - tol * tol

    if n > 1:
        st = _sweeps(_svd_sweep, st, off)
    x = st[:, :n, :m]
    s = (x * x).sum(-1).sqrt()
    order = _sorted_order(-s)
    packed = _rows(st[:, :n].contiguous(), order)
    return packed[:, :, :m], gather_prim(s, order, 1), packed[:, :, m:m + n]


def _orthonormal_completion(u: Tensor, s: Tensor, full: bool) -> Tensor:
    """``u`` (B, m, k) with the columns of zero singular values (and, when ``full``, m - k more)
    replaced by an orthonormal basis of the complement: Householder QR of ``u``."""
    m, k = u.shape[-2:]
    q, _ = _qr(u, "complete" if full else "reduced")
    keep = (s > 0)[:, None, :]
    head = where(keep, u, q[:, :, :k])
    return cat([head, q[:, :, k:]], -1) if full and m > k else head


def _svd(a: Tensor, full_matrices: bool, vectors: bool) -> tuple[Tensor | None, Tensor, Tensor | None]:
    b, m, n = a.shape
    k = min(m, n)
    if k == 0 or b == 0:
        s = a._const(0, a.dtype, (b, k))
        if not vectors:
            return None, s, None
        mu, nv = (m, n) if full_matrices else (k, k)
        return _eye(m, a)[:, :mu].broadcast_to((b, m, mu)), s, _eye(n, a)[:nv].broadcast_to((b, nv, n))
    wide = m < n
    x, s, vt = _svd_jacobi(a.mT if wide else a)
    if not vectors:
        return None, s, None
    safe = where(s > 0, s, s._const(1))
    u = (x / safe[:, :, None]).mT  # (B, rows, k)
    u = _orthonormal_completion(u, s, full_matrices)
    if wide:  # a = (aᵀ)ᵀ = V S Uᵀ of aᵀ's factors
        return vt.mT, s, u.mT
    return u, s, vt


def svd(a: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """``(U, S, Vh)`` of each real matrix of ``a`` (..., M, N) by one-sided Jacobi, with numpy's
    shapes; singular values descending. Columns of U for zero singular values, and the extra ones
    with ``full_matrices``, complete an orthonormal basis (Householder QR)."""
    a3, batch = _batched(a, 2)
    u, s, vh = _svd(a3, full_matrices, True)
    return u.reshape(batch + u.shape[1:]), s.reshape(batch + s.shape[1:]), vh.reshape(batch + vh.shape[1:])


def svdvals(a: Tensor) -> Tensor:
    """The singular values (descending) of each real matrix of ``a`` (..., M, N)."""
    a3, batch = _batched(a, 2)
    s = _svd(a3, False, False)[1]
    return s.reshape(batch + s.shape[1:])


def pinv(a: Tensor, rtol: float) -> Tensor:
    """The pseudo-inverse of each real matrix of ``a`` (..., M, N): singular values at most ``rtol``
    times the largest count as zero."""
    a3, batch = _batched(a, 2)
    b, m, n = a3.shape
    if min(m, n) == 0 or b == 0:
        return a._const(0, a.dtype, batch + (n, m))
    wide = m < n
    x, s, vt = _svd_jacobi(a3.mT if wide else a3)
    cut = s.max(-1, keepdims=True) * rtol
    inv_s = where(s > cut, 1 / where(s > cut, s, s._const(1)), s._const(0))
    # rows of x are s·uᵀ: P = V diag(1/s) Uᵀ = V diag(1/s²) x for the tall case
    p = vt.mT @ (x * (inv_s * inv_s)[:, :, None])  # (n', m')
    p = p.mT if wide else p
    return p.reshape(batch + (n, m))


# --- eager replay ----------------------------------------------------------------------------------
def _replayed(fn: Callable[..., Any], static_argnums: tuple[int, ...] = ()) -> Callable[..., Any]:
    """``fn`` captured by ``jit`` and replayed when all its tensor arguments are plain values, so a
    second call with the same shapes launches the recorded kernels without building and scheduling
    the graph again; traced arguments (``grad``, ``jvp``, ``vmap``, an enclosing ``jit``) run
    ``fn`` itself, inside that trace."""
    from .transforms.jit import jit

    jitted = jit(fn, static_argnums=static_argnums)

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        if capture.tracing() or any(isinstance(x, Tensor) and x.node.traced for x in args):
            return fn(*args)
        return jitted(*args)
    call.jitted = jitted  # type: ignore[attr-defined]  (tests read .jitted.traces)
    return call


_eigh_sweep = _replayed(_eigh_sweep_impl)
_svd_sweep = _replayed(_svd_sweep_impl)
cholesky = _replayed(cholesky)
lu = _replayed(lu)
det = _replayed(det)
slogdet = _replayed(slogdet)
solve = _replayed(solve)
inv = _replayed(inv)
qr = _replayed(qr, static_argnums=(1,))

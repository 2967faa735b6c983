"""Dense linear algebra written only in corvid Tensor ops: the ``"kernels"`` backend of
:mod:`corvid.linalg`.

Nothing here calls numpy.linalg or a host kernel, and nothing reads a value back to Python to
decide what to compute (except the optional convergence checks of the iterative methods, below),
so every function runs wherever corvid's generated kernels run, and works under ``vmap``, ``jit``
and the transforms. The public functions of :mod:`corvid.linalg` call these when the backend is
``"kernels"``; their derivatives come from the rules in :mod:`corvid.linalg`, never from
differentiating the algorithms below. All functions take stacks ``(..., M, N)`` of float32,
float64, complex64 or complex128 matrices and batch over the leading dimensions. ``eig`` (general
eigenvalues: Hessenberg reduction and shifted QR iterations) is in
:mod:`corvid.linalg_kernels_eig`, built on the helpers here.

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
* ``qr``: blocked Householder with LAPACK's conventions (dgeqrf/zgeqrf: reflectors
  ``H = I - τ v vᴴ`` with a real β, so R's diagonal is real and Q and R match numpy's up to
  rounding, complex ones too). The panel is stored transposed, so the reduction ``vᴴ A`` of a
  step is fused into its kernel (one launch per column); panels are applied to the trailing
  columns in compact WY form ``I - V T Vᴴ`` with ``T⁻¹ = diag(1/τ) + striu(VᴴV)``
  (``tri_inv``), and so is Q.
* ``eigh``: cyclic two-sided Jacobi in round-robin (tournament) order: each round rotates n/2
  disjoint pairs at once, ``[A | Vᴴ]`` in one kernel (the angles are computed inline from
  gathered entries); a sweep is n-1 rounds. ``svd`` (and ``pinv``): one-sided (Hestenes) Jacobi
  on the columns of ``[Aᵀ | Vᵀ]`` the same way (the column norms and products ``a_pᴴ a_q`` are
  reductions fused into the round's kernel); U is completed to an orthonormal basis with ``qr``
  where needed. A complex pair is rotated by the unitary ``[[c, s·u], [-s·ū, c]]`` with
  ``u = a_pq/|a_pq|`` and the real (c, s) of the real pair ``(a_pp, |a_pq|, a_qq)``, so the
  eigenvalues and singular values come out real.
  Accuracy: both work in float64 (complex128) whatever the input precision, since every entry
  goes through O(n) rotations per sweep and in float32 their rounding errors added up to ~2e-5 at
  n = 128 (now ~1e-7, as LAPACK's). Each rotation is applied in the update form
  ``x + ((c-1)·x + s·y)`` with ``c - 1`` accurate, negligible ones (below ``eps·√|a_pp a_qq|``,
  or a cosine below ``eps·√m`` between columns) are skipped, and both members of a pair compute
  the angle from the same values (eigh: the same entries; svd: the same gathered loads, so the
  fused reductions round alike): otherwise tiny rotations grow the norms by ``t²/2`` each time,
  and mismatched angles lose orthogonality, errors that added up to 1e-12 at n = 128 in float64
  (now ~2e-15). Within a pair, eigh writes the exact ``a_pp - t|a_pq|``, ``a_qq + t|a_pq|``
  (real) and 0.
  Convergence: when the values can be read (not inside ``jit`` or ``vmap``), it is checked after
  every sweep (one synchronization per sweep): eigh stops when the off-diagonal mass is at most
  ``(n·eps)²·‖A‖²``, svd when every cosine between columns is below ``4·eps·√m`` (measured by a
  matrix product, which rounds differently from the rounds' own threshold), or after
  ``JACOBI_MAX_SWEEPS``; otherwise a fixed ``JACOBI_SWEEPS[dtype]`` sweeps run (the rotations of
  a converged matrix are the identity, so extra sweeps are harmless). A matrix with nan has a nan
  measure and stops after its first sweep (nan results).

Replay: the functions are made of pieces captured with ``jit`` per input shape and replayed when
called on plain values, so a second call of the same shape launches the recorded kernels without
building or scheduling the graph again (under ``grad``, ``jvp``, ``vmap`` or an enclosing ``jit``
they run inside that trace instead). The pieces: ``cholesky`` whole; for LU and QR the start, the
steps of one panel (the same program for every panel, since the panel's position is data: most
of the kernels, traced once), the update after each panel and the finish, then the solve, inverse
or determinant; one Jacobi sweep; each phase of ``eig``. The *first* call of a shape pays for
building and scheduling each piece once and for compiling its kernels (cached on disk): a
1024x1024 ``solve`` schedules about 640 kernels (1.2 s) where replaying the whole function as one
program meant scheduling all 2,500 (4.3 s, same machine and load); a second call takes the same
time either way (0.16 to 0.2 s).

Cost: Cholesky launches about ``7 n / CHOL_BASE`` kernels, LU about ``2 n + 22 n / LU_BLOCK``, QR
about ``n + 25 n / QR_BLOCK``, a triangular inverse about ``3 log2(n)``; the Jacobi methods are
O(n³) per sweep and launch n - 1 kernels per sweep (typically 5 to 9 sweeps, n = 8 to 128), and
``eig`` about 2 n² kernels of O(n²) each: they are meant for the small and medium matrices
typical inside models.

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

__all__ = ["CHOL_BASE", "LU_BLOCK", "QR_BLOCK", "JACOBI_MAX_SWEEPS", "JACOBI_SWEEPS", "cholesky", "det", "eig", "eigh",
           "eigvalsh", "inv", "lu", "pinv", "qr", "slogdet", "solve", "solve_triangular", "svd", "svdvals", "tri_inv"]

CHOL_BASE = 8  # the block that one fused kernel factorizes (its kernel has about CHOL_BASE³/3 operations)
LU_BLOCK = 64  # columns per LU panel
QR_BLOCK = 32  # columns per Householder panel
JACOBI_MAX_SWEEPS = 30  # the limit when convergence is checked
JACOBI_SWEEPS = {dt.float32: 10, dt.float64: 14}  # the fixed count, by input precision, when it cannot be (jit, vmap)


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


def _abs2(x: Tensor) -> Tensor:
    """``|x|²`` in the real dtype (without the square root of ``abs``)."""
    return x.real * x.real + x.imag * x.imag if x.dtype.is_complex else x * x


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


def _lu_panel_input(work: Tensor, flag: Tensor, c0: int, nb: int) -> Tensor:
    """The panel (B, size+1, nb+1) of :func:`_lu_step` for the first ``nb`` columns of the trailing
    matrix ``work`` (B, size, ·), the pivot flags, and the state row of global column ``c0``."""
    b = work.shape[0]
    marks = cat([work._const(0, work.dtype, (b, 1, nb)), work._const(-(c0 + 1), work.dtype, (b, 1, 1))], -1)
    return cat([cat([work[:, :, :nb], flag], -1), marks], 1).contiguous()


def _lu_start(a: Tensor) -> tuple[Tensor, Tensor]:
    """(the padded matrix (B, size, size), its first panel) for ``a`` (..., n, n): n is padded
    with the identity to a multiple of the panel width ``min(n, LU_BLOCK)``."""
    a, _ = _batched(a, 2)
    b, n = a.shape[0], a.shape[-1]
    nb = min(n, LU_BLOCK)
    size = nb * -(-n // nb)
    work = _pad_identity(a, size).contiguous()
    return work, _lu_panel_input(work, a._const(0, a.dtype, (b, size, 1)), 0, nb)


def _lu_panel(panel: Tensor) -> Tensor:
    """All nb column steps of :func:`_lu_step` on a panel (B, size+1, nb+1)."""
    nb = panel.shape[-1] - 1
    for _ in range(nb):
        panel = _lu_step(panel, nb)
    return panel


def _lu_next(panel: Tensor, work: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """After the steps of the panel of the trailing matrix ``work`` (B, size, size - c0): (the
    panel's finished columns, the next trailing matrix, its first panel). The pivot rows are
    gathered (``U12 = L11⁻¹ A[piv]``) and the other rows get one product (``A -= L21 U12``)."""
    _, size, width = work.shape
    nb = panel.shape[-1] - 1
    c0 = size - width
    panel = panel[:, :size]
    flag = panel[:, :, nb:]
    trail = work[:, :, nb:]
    step = flag.real[:, :, 0] - (c0 + 1)  # (B, n): the panel step at which each row was the pivot
    j = _iota(nb, work.device)
    rows = _iota(size, work.device)
    piv = ((step[:, None, :] == j.reshape(1, nb, 1)).astype(dt.int64) * rows.reshape(1, 1, size)).sum(-1)
    piv = piv.contiguous()  # (B, nb): the pivot rows of this panel, in order
    l11 = _rows(panel[:, :, :nb].contiguous(), piv).tril(-1) + _eye(nb, work)
    u12 = (_tri_inv_lower(l11, True) @ _rows(trail.contiguous(), piv)).contiguous()  # (B, nb, nt)
    free = flag.real.eq(0).astype(work.dtype)
    mults = (panel[:, :, :nb] * free).contiguous()  # L21: the multipliers of the rows not yet pivots
    update = (mults @ u12).contiguous()  # a plain product, so it gets the vectorized matmul kernel
    mine = (step >= 0) & (step < nb)
    scattered = _rows(u12, where(mine, step, 0).astype(dt.int64))  # row r of U12 where r is a pivot
    work = where(mine[:, :, None], scattered, trail - update).contiguous()
    return panel[:, :, :nb], work, _lu_panel_input(work, flag, c0 + nb, nb)


def _lu_finish(shape: tuple[int, ...], last: Tensor, *done: Tensor) -> tuple[Tensor, Tensor]:
    """(lu, piv) of the input of ``shape`` (..., n, n) from the last panel after its steps and the
    finished columns of the panels before it: all rows gathered into pivot order."""
    n = shape[-1]
    size, nb = last.shape[1] - 1, last.shape[-1] - 1
    order = (last[:, :size, nb].real.astype(dt.int64) - 1).contiguous()  # the step at which each row was the pivot
    steps = _iota(size, last.device)
    piv = ((order[:, None, :] == steps.reshape(1, size, 1)).astype(dt.int64) * steps.reshape(1, 1, size)).sum(-1)
    piv = piv.contiguous()
    packed = cat(list(done) + [last[:, :size, :nb]], -1).contiguous()
    return _rows(packed, piv)[:, :n, :n].reshape(shape), piv[:, :n].reshape(shape[:-1])


def _lu(a: Tensor) -> tuple[Tensor, Tensor]:
    """(lu, piv) of each matrix of a non-empty ``a`` (..., n, n): blocked right-looking, in
    replayed pieces (every panel's steps are the same replayed program; the batch dimensions are
    flattened inside the pieces, where reshapes cost nothing)."""
    work, panel = _lu_start(a)
    nb = panel.shape[-1] - 1
    done = []
    while work.shape[-1] > nb:
        cols, work, panel = _lu_next(_lu_panel(panel), work)
        done.append(cols)
    return _lu_finish(a.shape, _lu_panel(panel), *done)


def lu(a: Tensor) -> tuple[Tensor, Tensor]:
    """The LU factorization with partial pivoting of each square matrix of ``a`` (..., n, n):
    ``(lu, piv)`` with ``lu`` in LAPACK's compact form (unit-lower L below the diagonal, U on and
    above) and ``piv`` (..., n) int64 the original row of each row of ``lu``:
    ``a[..., piv, :] = L @ U``."""
    if a.numel() == 0:
        return a, a._const(0, dt.int64, a.shape[:-1])
    return _lu(a)


def _lu_parts(lu_: Tensor, piv: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(L, U, piv, permutation sign) of each factorization (..., n, n), batch flattened: (B, …)."""
    lu_, _ = _batched(lu_, 2)
    piv, _ = _batched(piv, 1)
    n = lu_.shape[-1]
    lo = lu_.tril(-1) + _eye(n, lu_)
    up = lu_.triu()
    i = _iota(n, lu_.device)
    inversions = (piv[:, :, None] > piv[:, None, :]) & (i.reshape(n, 1) < i.reshape(1, n))
    parity = inversions.astype(dt.int64).sum((-2, -1)) % 2
    return lo, up, piv, (1 - 2 * parity).astype(_real_dtype(lu_))


def _det_lu(lu_: Tensor, piv: Tensor) -> Tensor:
    _, up, _, sign = _lu_parts(lu_, piv)
    return (_mdiag(up).prod(-1) * sign.astype(lu_.dtype)).reshape(lu_.shape[:-2])


def det(a: Tensor) -> Tensor:
    """The determinant of each square matrix of ``a`` (..., n, n): 0 for a singular one."""
    batch = a.shape[:-2]
    if a.shape[-1] == 0:
        return a._const(1, a.dtype, batch)
    if a.numel() == 0:
        return a._const(0, a.dtype, batch)
    return _det_lu(*_lu(a))


def _slogdet_lu(lu_: Tensor, piv: Tensor) -> tuple[Tensor, Tensor]:
    _, up, _, sign = _lu_parts(lu_, piv)
    d = _mdiag(up)
    mag = d.abs()
    zero = lu_._const(0, lu_.dtype, ())
    unit = d.sign() if not lu_.dtype.is_complex else where(mag.eq(0), zero, d / mag.astype(lu_.dtype))
    batch = lu_.shape[:-2]
    return (unit.prod(-1) * sign.astype(lu_.dtype)).reshape(batch), mag.log().sum(-1).reshape(batch)


def slogdet(a: Tensor) -> tuple[Tensor, Tensor]:
    """``(sign, log|det|)`` of each square matrix of ``a``: ``(0, -inf)`` for a singular one."""
    batch = a.shape[:-2]
    if a.numel() == 0:
        return a._const(1, a.dtype, batch), a._const(0, _real_dtype(a), batch)
    return _slogdet_lu(*_lu(a))


def _solve_lu(lu_: Tensor, piv: Tensor, b: Tensor) -> Tensor:
    lo, up, piv, _ = _lu_parts(lu_, piv)
    pb = _rows(b.reshape((lo.shape[0],) + b.shape[-2:]).contiguous(), piv)
    x = _H(_tri_inv_lower(_H(up), False)) @ (_tri_inv_lower(lo, True) @ pb).contiguous()
    return x.reshape(b.shape)


def solve(a: Tensor, b: Tensor) -> Tensor:
    """``X`` with ``a @ X = b`` for square ``a`` (..., n, n) and ``b`` (..., n, k) with the same
    leading dimensions. A singular ``a`` gives inf/nan entries."""
    if a.numel() == 0 or b.numel() == 0:
        return b
    return _solve_lu(*_lu(a), b)


def _inv_lu(lu_: Tensor, piv: Tensor) -> Tensor:
    shape = lu_.shape
    lo, up, piv, _ = _lu_parts(lu_, piv)
    x = (_H(_tri_inv_lower(_H(up), False)) @ _tri_inv_lower(lo, True)).contiguous()  # U⁻¹ L⁻¹ = (P A)⁻¹
    n = lu_.shape[-1]
    steps = _iota(n, lu_.device)
    ipiv = ((piv[:, None, :] == steps.reshape(1, n, 1)).astype(dt.int64) * steps.reshape(1, 1, n)).sum(-1).contiguous()
    return gather_prim(x, ipiv[:, None, :].broadcast_to(x.shape), 2).reshape(shape)  # A⁻¹ = (P A)⁻¹ P


def inv(a: Tensor) -> Tensor:
    """The inverse of each square matrix of ``a`` (..., n, n). A singular one gives inf/nan entries."""
    if a.numel() == 0:
        return a
    return _inv_lu(*_lu(a))


# --- QR (blocked Householder) ------------------------------------------------------------------------
def _qr_step(p: Tensor, nb: int) -> Tensor:
    """One Householder step on the transposed panel ``p`` (B, nb+2, m+1). Rows 0..nb-1 are the
    panel's columns (0 the active one; rotated: finished ones at the end), row nb flags the rows of
    the matrix still active (1.0), row nb+1 holds τ at the index of each step's diagonal row.
    Column m marks finished panel columns (1). One kernel: the norms and the products ``vᴴ a`` are
    reductions per matrix and per column, fused; the rotation is a gather. Complex columns follow
    LAPACK's zlarfg: β is real (so is R's diagonal), τ complex, and a column is reflected by
    ``H_iᴴ = I - τ̄ v vᴴ``."""
    _, w, m1 = p.shape
    m = m1 - 1
    j = _iota(w, p.device).reshape(1, w, 1)
    r = _iota(m1, p.device).reshape(1, 1, m1)
    zero, one = p._const(0, p.dtype, ()), p._const(1, p.dtype, ())
    x = p[:, :1, :]
    act = p[:, nb:nb + 1, :].real > 0.5
    prev = where(r > 0, _gather2(p, nb, r - 1), zero).real > 0.5
    first = act & ~prev
    alpha = where(first, x, zero).sum(-1, keepdims=True)
    sig2 = where(act & ~first, _abs2(x), 0.0).sum(-1, keepdims=True)
    trivial = sig2.eq(0) & alpha.imag.eq(0)
    norm = (_abs2(alpha) + sig2).sqrt()
    beta = where(trivial, alpha.real, where(alpha.real >= 0, -norm, norm)).astype(p.dtype)
    tau = where(trivial, zero, (beta - alpha) / where(trivial, one, beta))
    scale = where(trivial, zero, 1 / where(trivial, one, alpha - beta))
    v = where(first, one, where(act, x * scale, zero))  # (B, 1, m+1): 0 at the marker column
    src = where(j < nb - 1, j + 1, where(j == nb - 1, 0, j))  # the rotation
    moved = _gather2(p, src, r)
    wsrc = (v.conj() * moved).sum(-1, keepdims=True)  # vᴴ a for each (rotated) column
    pending = 1 - _gather2(p, src, m)
    rest = moved - tau.conj() * v * (wsrc * pending)
    newcol = where(r == m, one, where(first, beta, where(act, v, x)))
    flag = where(first, zero, p[:, nb:nb + 1, :])
    taus = where(first, tau, p[:, nb + 1:, :])
    return where(j == nb + 1, taus, where(j == nb, flag, where(j == nb - 1, newcol, rest))).contiguous()


def _householder_t(vt: Tensor, tau: Tensor) -> tuple[Tensor, Tensor]:
    """(Vᵀ with the vectors of τ = 0 zeroed, T) of the compact WY form ``H_1 ⋯ H_k = I - V T Vᴴ``
    (``H_i = I - τ_i v_i v_iᴴ``): T⁻¹ = diag(1/τ) + striu(Vᴴ V) (1 where τ = 0, whose vector
    contributes nothing)."""
    k = vt.shape[1]
    skip = tau.eq(0)
    vt = (vt * (~skip).astype(vt.dtype)[:, :, None]).contiguous()
    d = where(skip, vt._const(1, vt.dtype, ()), 1 / where(skip, vt._const(1, vt.dtype, ()), tau))
    tinv = ((vt.conj() @ vt.mT).contiguous().triu(1) + d[:, :, None] * _eye(k, vt)).contiguous()
    return vt, _H(_tri_inv_lower(_H(tinv), False))


def _qr_panel_input(ct: Tensor, p: Tensor) -> Tensor:
    """The next panel (B, nb+2, m'+1): the first nb rows of the transposed trailing matrix ``ct``,
    then the flag and τ rows carried over from the previous panel ``p``."""
    nb = p.shape[1] - 2
    return cat([ct[:, :nb], p[:, nb:]], 1).contiguous()


def _qr_start(a: Tensor) -> tuple[Tensor, Tensor]:
    """(the trailing matrix after the first panel's rows, the first panel) for ``a`` (..., m, n),
    k = min(m, n) >= 1: the matrix transposed (``ct`` (B, n', m'+1), a finished-column mark in
    column m'), its first k columns padded to a multiple of the panel width ``min(k, QR_BLOCK)``
    and its rows to at least that (m')."""
    a, _ = _batched(a, 2)
    b, m, n = a.shape
    k = min(m, n)
    nb = min(k, QR_BLOCK)
    kp = nb * -(-k // nb)
    mp = max(m, kp)
    zeros = a._const(0, a.dtype, (b, m, kp - k))
    work = cat([a[:, :, :k], zeros, a[:, :, k:]], -1) if kp > k else a
    work = work.pad(((0, 0), (0, mp - m), (0, 0))) if mp > m else work
    ct = cat([work.mT, a._const(0, a.dtype, (b, work.shape[-1], 1))], -1).contiguous()  # (B, n', m'+1)
    flag = (_iota(mp + 1, a.device) < mp).astype(a.dtype).reshape(1, 1, mp + 1).broadcast_to((b, 1, mp + 1))
    p = cat([ct[:, :nb], flag, a._const(0, a.dtype, (b, 1, mp + 1))], 1).contiguous()
    return ct[:, nb:], p


def _qr_panel(p: Tensor) -> Tensor:
    """All nb Householder steps of :func:`_qr_step` on a panel (B, nb+2, m'+1)."""
    nb = p.shape[1] - 2
    for _ in range(nb):
        p = _qr_step(p, nb)
    return p


def _reflectors(comp: Tensor, taus: Tensor, c0: int) -> tuple[Tensor, Tensor]:
    """(Vᵀ, T) of the compact WY form of the reflectors of the rows ``comp`` (B, k, m') (the
    compact columns, transposed, of global columns c0, c0+1, …): unit at each one's diagonal
    row, zeros above it."""
    rows = _iota(comp.shape[-1], comp.device).reshape(1, 1, -1)
    pos = c0 + _iota(comp.shape[1], comp.device).reshape(1, -1, 1)
    zero, one = comp._const(0, comp.dtype, ()), comp._const(1, comp.dtype, ())
    return _householder_t(where(rows > pos, comp, where(rows == pos, one, zero)), taus)


def _apply_panel(c0: int, p: Tensor, rest: Tensor) -> tuple[Tensor, Tensor]:
    """(the compact columns of the panel ``p`` of global columns c0… after its steps, the
    transposed trailing matrix ``rest`` with the panel's reflectors applied)."""
    nb, mp = p.shape[1] - 2, p.shape[-1] - 1
    comp = p[:, :nb, :mp]
    if not rest.shape[1]:
        return comp, rest
    vt, t = _reflectors(comp, p[:, nb + 1, c0:c0 + nb], c0)
    c = rest[:, :, :mp]
    c = c - (((c @ _H(vt)).contiguous() @ t.conj()).contiguous() @ vt).contiguous()  # (I - V T Vᴴ)ᴴ A, transposed
    return comp, cat([c, rest[:, :, mp:]], -1).contiguous()


def _qr_next(c0: int, p: Tensor, rest: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """After the steps of the panel of global columns c0…: (its compact columns, the updated
    trailing matrix without the next panel's rows, the next panel)."""
    comp, rest = _apply_panel(c0, p, rest)
    nb = p.shape[1] - 2
    return comp, rest[:, nb:], _qr_panel_input(rest, p)


def _qr_finish(mode: str, shape: tuple[int, ...], c0: int, p: Tensor, rest: Tensor,
               *done: Tensor) -> tuple[Tensor, Tensor]:
    """(Q, R) of the input of ``shape`` (..., m, n) from the last panel (global columns c0…)
    after its steps, the transposed columns after it (``rest``, not updated yet) and the compact
    columns of the panels before: R from the compact columns, Q = I - V T Vᴴ."""
    m, k = shape[-2], min(shape[-2:])
    nb, mp = p.shape[1] - 2, p.shape[-1] - 1
    last, rest = _apply_panel(c0, p, rest)
    comp = cat(list(done) + [last], 1)  # (B, kp, m'): the compact columns, transposed
    kp = comp.shape[1]
    rfull = cat([comp, rest[:, :, :mp]], 1).mT  # (B, m', n')
    r_rows = m if mode == "complete" else k
    rr = (cat([rfull[:, :, :k], rfull[:, :, kp:]], -1) if kp > k else rfull)[:, :min(r_rows, mp)].triu()
    if r_rows > rr.shape[1]:
        rr = rr.pad(((0, 0), (0, r_rows - rr.shape[1]), (0, 0)))
    vt, t = _reflectors(comp, p[:, nb + 1, :kp], 0)
    q_cols = m if mode == "complete" else k
    eye = _eye(mp, p)[:, :q_cols]
    q = eye - vt.mT @ (t @ vt.conj()[:, :, :q_cols])
    batch = shape[:-2]
    return q[:, :m].reshape(batch + (m, q_cols)), rr.reshape(batch + rr.shape[1:])


def _qr(a: Tensor, mode: str) -> tuple[Tensor, Tensor]:
    """(Q, R) of each matrix of ``a`` (..., m, n): blocked Householder in replayed pieces (every
    panel's steps are the same replayed program; the batch dimensions are flattened inside the
    pieces, where reshapes cost nothing)."""
    *batch, m, n = a.shape
    k = min(m, n)
    if a.numel() == 0:
        rows = m if mode == "complete" else k
        q = _eye(m, a)[:, :rows].broadcast_to(tuple(batch) + (m, rows))
        return q, a._const(0, a.dtype, tuple(batch) + (rows, n))
    rest, p = _qr_start(a)
    nb = p.shape[1] - 2
    done, c0 = [], 0
    while c0 + nb < k:
        comp, rest, p = _qr_next(c0, _qr_panel(p), rest)
        done.append(comp)
        c0 += nb
    return _qr_finish(mode, a.shape, c0, _qr_panel(p), rest, *done)


def qr(a: Tensor, mode: str = "reduced") -> tuple[Tensor, Tensor]:
    """Householder QR of each matrix of ``a`` (..., M, N) with numpy's shapes and LAPACK's sign
    convention (R's diagonal is ``-sign(a_kk)·norm``): ``mode`` "reduced" or "complete"."""
    return _qr(a, mode)


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


def _wide(a: Tensor) -> Tensor:
    """``a`` in float64 (complex128 for complex input): the precision the iterative methods work
    in whatever the input's (each entry goes through O(n) rotations per sweep; in float32 their
    rounding errors add up to ~2e-5 at n = 128)."""
    return a.astype(dt.complex128 if a.dtype.is_complex else dt.float64)


def _polar(z: Tensor) -> tuple[Tensor, Tensor]:
    """``(r, u)`` with ``z = r·u``: ``(|z|, z/|z|)`` for complex ``z`` (u = 1 at 0), ``(z, 1)`` for real."""
    if not z.dtype.is_complex:
        return z, z._const(1)
    r = z.abs()
    zero = r.eq(0)
    return r, where(zero, z._const(1), z / where(zero, r._const(1), r).astype(z.dtype))


def _rotation(app: Tensor, aqq: Tensor, apq: Tensor, small: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(c - 1, s, t = s/c) of the Jacobi rotation that zeroes ``apq`` of [[app, apq], [apq, aqq]]
    (Golub and Van Loan's sym.schur2); (0, 0, 0) where ``small`` (``apq`` negligible).

    Rotations are applied in update form ``x + ((c-1)·x + s·y)``, with ``c - 1 = -t²c/(1+√(1+t²))``
    computed to full relative accuracy: for small t, c itself rounds to 1 (or a neighbour), and
    ``c·x + s·y`` would then grow the rotated vectors' norms by up to t²/2 every time, an error
    of one sign that adds up over the sweeps (3e-14 of orthogonality at n = 128). Negligible
    rotations are skipped for the same reason."""
    zero = small | apq.eq(0)
    theta = (aqq - app) / (2 * where(zero, apq._const(1), apq))
    sgn = where(theta >= 0, theta._const(1), theta._const(-1))
    t = sgn / (theta.abs() + (1 + theta * theta).sqrt())  # inf θ gives t = 0
    t = where(zero, t._const(0), t)
    root = (1 + t * t).sqrt()
    c = 1 / root
    return -(t * t) * c / (1 + root), c * t, t


def _pair_factor(first: Tensor, s: Tensor, u: Tensor) -> Tensor:
    """The coefficient of the partner's column in a column's update by the unitary rotation
    ``[[c, s·u], [-s·ū, c]]`` of a pair (p, q): ``-s·ū`` for p (where ``first``), ``s·u`` for q;
    rows use its conjugate. For a Hermitian 2x2 matrix with (p, q) entry ``r``, ``u = r/|r|`` and
    the real :func:`_rotation` (c, s) for ``|r|`` diagonalize it (real: u = 1, r signed)."""
    return where(first, -(s * u.conj()), s * u)


def _rotate_pairs(s: Tensor, i: Tensor, j: Tensor, row: tuple[Tensor, Tensor, Tensor],
                  col: tuple[Tensor, Tensor, Tensor]) -> Tensor:
    """``Gᴴ S G`` for a G made of disjoint 2x2 rotations, elementwise over the (B, R, C) ``s``
    (indices ``i`` (1, R, 1), ``j`` (1, 1, C)): ``row = (c - 1, f, partner)`` per row and ``col``
    per column; a column becomes ``x + ((c-1)·x + f·x_partner)`` and a row the same with ``f̄``
    (c real, ``f`` from :func:`_pair_factor`; c = 1, f = 0 leave a row or column alone). Four
    gathered loads per element."""
    (di, fi, pi), (dj, fj, pj) = row, col
    left = s + (dj * s + fj * _gather2(s, i, pj))
    x = _gather2(s, pi, j)
    right = x + (dj * x + fj * _gather2(s, pi, pj))
    return left + (di * left + fi.conj() * right)


def _eigh_round(s: Tensor, partner: Tensor) -> Tensor:
    """One round on ``s`` = [A | Vᴴ] (B, n, 2n): every pair (i, partner[i]) rotated at once,
    ``A <- Jᴴ A J`` and ``Vᴴ <- Jᴴ Vᴴ``, in one kernel (angles computed inline). Within a pair
    the entries use the exact forms ``a_pp - t |a_pq|``, ``a_qq + t |a_pq|`` (real) and 0; an
    ``a_pq`` below ``eps·√|a_pp a_qq|`` is set to 0 without a rotation."""
    _, n, w = s.shape
    eps = _eps(s)
    i = _iota(n, s.device).reshape(1, n, 1)
    j = _iota(w, s.device).reshape(1, 1, w)
    pi, pj = partner[:n].reshape(1, n, 1), partner.reshape(1, 1, w)

    def angle(k: Tensor, pk: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(c - 1, f, the change of the diagonal entry) of k's rotation."""
        first = k < pk
        p, q = where(first, k, pk), where(first, pk, k)  # both members of a pair read the same entries
        r, u = _polar(_gather2(s, p, q))
        app, aqq = _gather2(s, p, p).real, _gather2(s, q, q).real
        dc, sn, t = _rotation(app, aqq, r, r.abs() <= eps * (app * aqq).abs().sqrt())
        return dc, _pair_factor(first, sn, u), where(first, -t, t) * r

    dci, fi, shift = angle(i, pi)
    inside = j < n
    dcj, fj, _ = angle(where(inside, j, 0), where(inside, pj, 0))
    dcj, fj = where(inside, dcj, dcj._const(0)), where(inside, fj, fj._const(0))
    out = _rotate_pairs(s, i, j, (dci, fi, pi), (dcj, fj, pj))
    out = where(j == i, (s.real + shift).astype(s.dtype), where((j == pi) & (pi != i), s._const(0), out))
    return out.contiguous()


def _svd_round(st: Tensor, partner: Tensor, m: int) -> Tensor:
    """One round of one-sided Jacobi on ``st`` = [Aᵀ | Vᵀ] (B, n, m+n): the columns i and
    partner[i] of A (rows of ``st``) are rotated to be orthogonal, and V with them (the rotation
    that diagonalizes their 2x2 Gram matrix). The squared norms and the products ``a_iᴴ a_p`` are
    reductions fused into the kernel. Both members of a pair compute them from the same gathered
    loads in the same order, so they get the same bits and the rotation is exactly orthogonal (a
    direct and a gathered sum may round differently, and near convergence the products are at
    the rounding level: the mismatch cost 1e-12 of V's orthogonality at n = 128). Columns whose
    cosine is below :func:`_svd_tol` are not rotated."""
    _, n, w = st.shape
    i = _iota(n, st.device).reshape(1, n, 1)
    r = _iota(m, st.device).reshape(1, 1, m)
    pi = partner[:n].reshape(1, n, 1)
    first = i < pi
    ap, aq = _gather2(st, where(first, i, pi), r), _gather2(st, where(first, pi, i), r)
    npp, nqq = _abs2(ap).sum(-1, keepdims=True), _abs2(aq).sum(-1, keepdims=True)
    g, u = _polar((ap.conj() * aq).sum(-1, keepdims=True))  # the Gram entry a_pᴴ a_q
    dc, sn, _ = _rotation(npp, nqq, g, _abs2(g) <= _svd_tol(st, m) ** 2 * npp * nqq)
    j = _iota(w, st.device).reshape(1, 1, w)
    return (st + (dc * st + _pair_factor(first, sn, u) * _gather2(st, pi, j))).contiguous()


def _eigh_sweep_impl(s: Tensor) -> Tensor:
    """One sweep (n-1 rounds) of :func:`_eigh_round` on ``s`` (B, n, 2n)."""
    n = s.shape[1]
    for partner in _rounds(n, 2 * n, s.device):
        s = _eigh_round(s, partner)
    return s


def _svd_tol(a: Tensor, m: int) -> float:
    """The cosine below which two columns of length ``m`` are not rotated: ``eps·√m``, about the
    rounding error of their dot product. The convergence check allows 4 times as much, since it
    computes the cosines by a matrix product, which rounds differently: with the same threshold
    it could see a pair as not converged that the rounds no longer rotate, and never stop."""
    return _eps(a) * max(m, 1) ** 0.5


def _svd_sweep_impl(st: Tensor) -> Tensor:
    """One sweep (n-1 rounds) of :func:`_svd_round` on ``st`` (B, n, m+n)."""
    n = st.shape[1]
    for partner in _rounds(n, n, st.device):
        st = _svd_round(st, partner, st.shape[2] - n)
    return st


def _sweeps(step: Callable[[Tensor], Tensor], state: Tensor, left: Callable[[Tensor], Tensor], fixed: int,
            limit: int) -> Tensor:
    """``step`` applied until ``left(state)`` (a (B,) measure of the work left, converged at <= 0;
    nan counts as converged, since nothing more can be computed) is done for every matrix, checked
    after each step when values can be read (one synchronization per step), at most ``limit``
    times; ``fixed`` times when they cannot (inside ``jit`` or ``vmap``)."""
    if not _readable(state):
        for _ in range(fixed):
            state = step(state)
        return state
    for _ in range(limit):
        state = step(state)
        if not bool((left(state) > 0).any().item()):
            break
    return state


def _jacobi_sweeps(step: Callable[[Tensor], Tensor], state: Tensor, off: Callable[[Tensor], Tensor],
                   d: dt.DType) -> Tensor:
    """Jacobi sweeps on ``state`` for an input of real dtype ``d`` (see :func:`_sweeps`)."""
    return _sweeps(step, state, off, JACOBI_SWEEPS.get(d, JACOBI_SWEEPS[dt.float64]), JACOBI_MAX_SWEEPS)


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
        return _mdiag(a).real, _eye(n, a).broadcast_to(a.shape)
    x = _wide(a)
    size = n + n % 2
    sym = _hermitian_from_lower(x).pad(((0, 0), (0, size - n), (0, size - n)))
    s = cat([sym, _eye(size, x).broadcast_to((b, size, size))], -1).contiguous()
    eps = _eps(x)

    def off(s: Tensor) -> Tensor:
        sq = _abs2(s[:, :, :size])
        return (sq * (1 - _eye(size, sq))).sum((-2, -1)) - (size * eps) ** 2 * sq.sum((-2, -1))

    s = _jacobi_sweeps(_eigh_sweep, s, off, _real_dtype(a))
    w = _mdiag(s[:, :n, :n]).real
    order = _sorted_order(w)
    vh = _rows(s[:, :n, size:size + n].contiguous(), order)
    return gather_prim(w, order, 1).astype(_real_dtype(a)), _H(vh).astype(a.dtype)


def eigh(a: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (ascending, real) and orthonormal (unitary) eigenvectors (columns) of each
    symmetric (Hermitian) matrix of ``a`` (..., n, n), by cyclic Jacobi; only the lower triangle
    is read (and the real part of the diagonal)."""
    a3, batch = _batched(a, 2)
    w, v = _eigh(a3)
    return w.reshape(batch + w.shape[1:]), v.reshape(a.shape)


def eigvalsh(a: Tensor) -> Tensor:
    """The eigenvalues (ascending, real) of each symmetric (Hermitian) matrix of ``a`` (..., n, n)."""
    return eigh(a)[0]


def _svd_jacobi(a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(Aᵀ rotated, s, Vᵀ) for (B, m, n) ``a`` with m >= n, n >= 1, in the wide dtype: ``rows of
    the first / s`` are U's columns (transposed), ``A = U diag(s) Vᴴ``. Singular values
    descending; the rows of both are in that order."""
    d = _real_dtype(a)
    a = _wide(a)
    b, m, n = a.shape
    size = n + n % 2
    at = a.mT.pad(((0, 0), (0, size - n), (0, 0)))
    st = cat([at, _eye(size, a).broadcast_to((b, size, size))], -1).contiguous()
    tol = 4 * _svd_tol(a, m)

    def off(st: Tensor) -> Tensor:
        x = st[:, :, :m]
        g = x.conj() @ x.mT
        d = _mdiag(g).real
        den = d[:, :, None] * d[:, None, :]
        ratio = where(den > 0, _abs2(g) / where(den > 0, den, den._const(1)), den._const(0))
        ratio = ratio * (1 - _eye(size, ratio))
        return ratio.max((-2, -1)) - tol * tol

    if n > 1:
        st = _jacobi_sweeps(_svd_sweep, st, off, d)
    x = st[:, :n, :m]
    s = _abs2(x).sum(-1).sqrt()
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
    rd = _real_dtype(a)
    if k == 0 or b == 0:
        s = a._const(0, rd, (b, k))
        if not vectors:
            return None, s, None
        mu, nv = (m, n) if full_matrices else (k, k)
        return _eye(m, a)[:, :mu].broadcast_to((b, m, mu)), s, _eye(n, a)[:nv].broadcast_to((b, nv, n))
    wide = m < n  # a = (aᵀ)ᵀ = Vhᵀ S Uᵀ of aᵀ's factors
    x, s, vt = _svd_jacobi(a.mT if wide else a)
    if not vectors:
        return None, s.astype(rd), None
    safe = where(s > 0, s, s._const(1))
    u = _orthonormal_completion((x / safe[:, :, None]).mT, s, full_matrices)  # (B, rows, k)
    u, vh = (vt.conj().mT, u.mT) if wide else (u, vt.conj())
    return u.astype(a.dtype), s.astype(rd), vh.astype(a.dtype)


def svd(a: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """``(U, S, Vh)`` of each matrix of ``a`` (..., M, N) by one-sided Jacobi, with numpy's shapes;
    singular values descending (real). Columns of U for zero singular values, and the extra ones
    with ``full_matrices``, complete an orthonormal basis (Householder QR)."""
    a3, batch = _batched(a, 2)
    u, s, vh = _svd(a3, full_matrices, True)
    return u.reshape(batch + u.shape[1:]), s.reshape(batch + s.shape[1:]), vh.reshape(batch + vh.shape[1:])


def svdvals(a: Tensor) -> Tensor:
    """The singular values (descending, real) of each matrix of ``a`` (..., M, N)."""
    a3, batch = _batched(a, 2)
    s = _svd(a3, False, False)[1]
    return s.reshape(batch + s.shape[1:])


def pinv(a: Tensor, rtol: float) -> Tensor:
    """The pseudo-inverse of each matrix of ``a`` (..., M, N): singular values at most ``rtol``
    times the largest count as zero."""
    a3, batch = _batched(a, 2)
    b, m, n = a3.shape
    if min(m, n) == 0 or b == 0:
        return a._const(0, a.dtype, batch + (n, m))
    wide = m < n  # pinv(a) = pinv(aᵀ)ᵀ
    x, s, vt = _svd_jacobi(a3.mT if wide else a3)
    cut = s.max(-1, keepdims=True) * rtol
    inv_s = where(s > cut, 1 / where(s > cut, s, s._const(1)), s._const(0))
    # rows of x are s·uᵀ: P = V diag(1/s) Uᴴ = V diag(1/s²) x̄ for the tall case
    p = vt.mT @ (x.conj() * (inv_s * inv_s)[:, :, None])  # (n', m')
    p = p.mT if wide else p
    return p.astype(a.dtype).reshape(batch + (n, m))


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
_lu_start = _replayed(_lu_start)
_lu_panel = _replayed(_lu_panel)
_lu_next = _replayed(_lu_next)
_lu_finish = _replayed(_lu_finish, static_argnums=(0,))  # the input's shape
_det_lu = _replayed(_det_lu)
_slogdet_lu = _replayed(_slogdet_lu)
_solve_lu = _replayed(_solve_lu)
_inv_lu = _replayed(_inv_lu)
_qr_start = _replayed(_qr_start)
_qr_panel = _replayed(_qr_panel)
_qr_next = _replayed(_qr_next, static_argnums=(0,))
_qr_finish = _replayed(_qr_finish, static_argnums=(0, 1, 2))


def eig(a: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues and unit right eigenvectors of each square matrix of ``a`` (..., n, n), complex:
    :func:`corvid.linalg_kernels_eig.eig` (a module of its own, built on the helpers here)."""
    from .linalg_kernels_eig import eig as general

    return general(a)

"""Linear algebra: the ``linalg`` extension of the Array API standard (2025.12), real dtypes.

``cv.linalg.<fn>`` takes stacks of matrices ``(..., M, N)`` everywhere. Two kinds of functions:

* **compositions** (``cross``, ``diagonal``, ``matmul``, ``matrix_norm``, ``matrix_power``,
  ``outer``, ``tensordot``, ``trace``, ``vecdot``, ``vector_norm``, ``matrix_rank``,
  ``lstsq``) are Tensor ops, so they fuse, batch and differentiate like any other;
* **factorizations and solves** (``cholesky``, ``det``, ``eigh``, ``eigvalsh``, ``inv``,
  ``pinv``, ``qr``, ``slogdet``, ``solve``, ``svd``, ``svdvals``) are host kernels over
  ``numpy.linalg`` (LAPACK; see :mod:`corvid.engine.host`), one ``CUSTOM`` node each. Each is
  wrapped in ``custom_vjp`` *and* ``custom_jvp`` with rules written in Tensor ops (which call the
  other host-backed functions), so ``grad``, ``jvp``, higher orders, ``vmap`` and ``jit`` work.

Dtypes: integer and bool inputs compute in the default float dtype; float16 and bfloat16 are
computed in float32 on the host and cast back. Complex dtypes (and so ``eig``/``eigvals``) are
not supported yet.

Errors: a non-square matrix where a square one is needed, or fewer than 2 dimensions, raises
ValueError naming the shape when the function is called. A failure inside LAPACK (a singular
matrix in ``inv``/``solve``, a matrix that is not positive definite in ``cholesky``) can only be
seen when the value is computed, so it raises :class:`LinAlgError` (a ValueError) at realize
time (``.numpy()``, ``.realize()``, a jitted call). ``det`` of a singular matrix is 0, not an error.

Derivatives, and where they do not exist:

* ``cholesky``, ``eigh``, ``eigvalsh`` read only the lower triangle of ``x``, which is taken to be
  symmetric: gradients are symmetric, and tangents are symmetrized before use;
* ``eigh``/``svd``: the eigenvector (singular vector) derivatives divide by ``λj - λi``
  (``sj² - si²``). Exactly repeated values have no such derivative; their term is dropped (0),
  which leaves losses of the eigenvalues alone (or of the spaces they span) right, and near-repeated
  values give large derivatives, as they should. The sign of each vector is arbitrary, so losses
  should not depend on it (``v**4``, ``v vᵀ``, ``U S Vh``);
* ``svd``: the terms for zero singular values use 0 for ``1/s``; with ``full_matrices=True`` and a
  non-square input, the extra columns of ``U`` (rows of ``Vh``) are an arbitrary basis of the
  complement: reverse mode gives them no gradient, forward mode raises NotImplementedError;
* ``qr``: R must be invertible (full rank); ``mode="complete"`` with ``M > N`` has no derivative
  (NotImplementedError when one is requested);
* ``det``/``slogdet`` use ``inv(x)``: a singular matrix raises LinAlgError in the backward;
* ``pinv`` (and ``lstsq``) assume the rank is constant near ``x``;
* ``vector_norm``/``matrix_norm``: the gradient of a 2-norm or Frobenius norm at zero is 0.

>>> import corvid as cv
>>> a = cv.Tensor([[4.0, 1.0], [1.0, 3.0]])
>>> [round(v, 4) for v in cv.linalg.eigvalsh(a).tolist()]
[2.382, 4.618]
>>> cv.linalg.solve(a, cv.Tensor([1.0, 2.0])).shape
(2,)
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from . import dtype as dt
from .array_api import asarray, matmul, matrix_transpose, tensordot, vecdot
from .creation import eye
from .dtype import DType, DTypeLike
from .engine.host import HostOp, host_call
from .ops.elementwise import where
from .ops.manipulation import diagonal as _diagonal, moveaxis
from .ops.movement import cat, normalize_axis, stack
from .tensor import Tensor, broadcast_shapes
from .transforms.custom import custom_vjp
from .transforms.forward import custom_jvp
from .tree import register_pytree_node

__all__ = ["LinAlgError", "EighResult", "QRResult", "SlogdetResult", "SVDResult", "cholesky", "cross", "det",
           "diagonal", "eigh", "eigvalsh", "inv", "lstsq", "matmul", "matrix_norm", "matrix_power", "matrix_rank",
           "matrix_transpose", "outer", "pinv", "qr", "slogdet", "solve", "svd", "svdvals", "tensordot", "trace",
           "vecdot", "vector_norm"]


class LinAlgError(ValueError):
    """LAPACK could not compute the value: a singular matrix, one that is not positive definite."""


class EighResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


class QRResult(NamedTuple):
    Q: Tensor
    R: Tensor


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


class SVDResult(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


for _cls in (EighResult, QRResult, SlogdetResult, SVDResult):  # so vmap/jit/grad see their tensors
    register_pytree_node(_cls, lambda r: (tuple(r), None), lambda _, ch, cls=_cls: cls(*ch))


# --- host kernels -------------------------------------------------------------------------------------
_NUMPY: dict[str, Callable[..., Any]] = {
    "inv": np.linalg.inv,
    "det": np.linalg.det,
    "slogdet": lambda a: tuple(np.linalg.slogdet(a)),
    "solve": np.linalg.solve,
    "cholesky": np.linalg.cholesky,
    "eigh": lambda a: tuple(np.linalg.eigh(a)),
    "eigvalsh": np.linalg.eigvalsh,
    "qr": lambda a, mode: tuple(np.linalg.qr(a, mode=mode)),
    "svd": lambda a, full_matrices: tuple(np.linalg.svd(a, full_matrices=full_matrices)),
    "svdvals": lambda a: np.linalg.svd(a, compute_uv=False),
    "pinv": lambda a, rtol: np.linalg.pinv(a, rcond=rtol),
}


def _lapack(name: str) -> Callable[..., Any]:
    fn = _NUMPY[name]

    def run(*arrays: np.ndarray, **params: Any) -> Any:
        try:
            return fn(*arrays, **params)
        except np.linalg.LinAlgError as e:
            raise LinAlgError(f"linalg.{name}: {e} (for an input of shape {arrays[0].shape})") from None
    return run


_RUN = {name: _lapack(name) for name in _NUMPY}


def _host(name: str, *inputs: Tensor, shapes: Sequence[tuple[int, ...]], **params: Any) -> list[Tensor]:
    op = HostOp(f"linalg.{name}", _RUN[name], params=tuple(sorted(params.items())), batched=True)
    return host_call(op, *inputs, outputs=[(s, inputs[0].dtype) for s in shapes])


def _rules(impl: Callable[..., Any], vjp: Callable[..., tuple], jvp: Callable[..., Any]) -> Callable[..., Any]:
    """``impl`` (a host call) with both derivative rules. ``vjp(args, outs, cts)`` returns one
    cotangent per argument; ``jvp(args, outs, tangents)`` the output tangents. ``outs`` is the
    function applied again through this very wrapper (the same host node, by hash-consing), so
    the rules are differentiable themselves and higher orders work."""
    def fwd(*args: Any) -> tuple[Any, Any]:
        return impl(*args), args

    def bwd(args: tuple, cts: Any) -> tuple:
        return vjp(args, wrapped(*args), cts)

    def rule(primals: tuple, tangents: tuple) -> tuple[Any, Any]:
        outs = wrapped(*primals)
        return outs, jvp(primals, outs, tangents)

    reverse = custom_vjp(impl)
    reverse.defvjp(fwd, bwd)
    wrapped = custom_jvp(reverse)
    wrapped.defjvp(rule)
    return wrapped


# --- small helpers ------------------------------------------------------------------------------------
def _matrix(x: Any, name: str, square: bool = False) -> Tensor:
    x = x if isinstance(x, Tensor) else asarray(x)
    if x.ndim < 2:
        raise ValueError(f"linalg.{name}: needs a matrix or a stack of matrices (..., M, N), got shape {x.shape}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"linalg.{name}: needs square matrices (..., M, M), got shape {x.shape}")
    return x


def _float_dtype(x: Tensor) -> DType:
    return x.dtype if x.dtype.is_float else dt.default_float


def _on_host(x: Tensor) -> Tensor:
    """``x`` in a dtype LAPACK has: float32 or float64."""
    d = _float_dtype(x)
    return x.astype(dt.float32 if d.itemsize < 4 else d)


def _back(y: Any, like: Tensor) -> Any:
    d = _float_dtype(like)
    return y if y.dtype is d else y.astype(d)


def _sym(a: Tensor) -> Tensor:
    return (a + a.mT) * 0.5


def _eye_like(a: Tensor, n: int) -> Tensor:
    return eye(n, dtype=a.dtype, device=a.device)


def _diag_embed(v: Tensor) -> Tensor:
    return v[..., None] * _eye_like(v, v.shape[-1])


def _mdiag(a: Tensor) -> Tensor:
    return _diagonal(a, 0, -2, -1)


def _safe_recip(d: Tensor) -> Tensor:
    """1/d, with 0 where d is exactly 0 (repeated eigen/singular values, the diagonal)."""
    zero = d.eq(0)
    return where(zero, 0.0, 1 / where(zero, 1.0, d))


def _gap_recip(w: Tensor, squares: bool = False) -> Tensor:
    """F[..., i, j] = 1 / (w_j - w_i), or 1 / (w_j² - w_i²) with ``squares``; 0 where w_j == w_i
    (the diagonal included). The squares are taken as (w_j - w_i)(w_j + w_i): a difference of
    products may be contracted to an FMA by the C compiler and not be exactly 0 for equal values."""
    wj, wi = w[..., None, :], w[..., :, None]
    return _safe_recip((wj - wi) * (wj + wi) if squares else wj - wi)


# --- inv, det, slogdet, solve ------------------------------------------------------------------------
def _inv_impl(a: Tensor) -> Tensor:
    return _host("inv", a, shapes=[a.shape])[0]


_inv = _rules(_inv_impl,
              lambda args, y, g: (-(y.mT @ g @ y.mT),),
              lambda args, y, ts: -(y @ ts[0] @ y))


def inv(x: Tensor, /) -> Tensor:
    """The inverse of each square matrix of ``x`` (..., M, M). LinAlgError at realize if singular.

    >>> import corvid as cv
    >>> cv.linalg.inv(cv.Tensor([[2.0, 0.0], [0.0, 4.0]])).tolist()
    [[0.5, 0.0], [0.0, 0.25]]
    """
    x = _matrix(x, "inv", square=True)
    return _back(_inv(_on_host(x)), x)


def _det_impl(a: Tensor) -> Tensor:
    return _host("det", a, shapes=[a.shape[:-2]])[0]


_det = _rules(_det_impl,
              lambda args, d, g: ((g * d)[..., None, None] * _inv(args[0]).mT,),
              lambda args, d, ts: d * (_inv(args[0]).mT * ts[0]).sum((-2, -1)))


def det(x: Tensor, /) -> Tensor:
    """The determinant of each square matrix of ``x`` (..., M, M), shape (...). Its gradient
    ``det · x⁻ᵀ`` needs the inverse: LinAlgError in the backward of a singular matrix."""
    x = _matrix(x, "det", square=True)
    return _back(_det(_on_host(x)), x)


def _slogdet_impl(a: Tensor) -> tuple[Tensor, Tensor]:
    return tuple(_host("slogdet", a, shapes=[a.shape[:-2]] * 2))


_slogdet = _rules(_slogdet_impl,
                  lambda args, outs, cts: (cts[1][..., None, None] * _inv(args[0]).mT,),
                  lambda args, outs, ts: (outs[0] * 0, (_inv(args[0]).mT * ts[0]).sum((-2, -1))))


def slogdet(x: Tensor, /) -> SlogdetResult:
    """``(sign, logabsdet)`` of each square matrix: ``det = sign · exp(logabsdet)``; a singular
    matrix has sign 0 and logabsdet -inf. The sign has a zero derivative."""
    x = _matrix(x, "slogdet", square=True)
    sign, logabs = _slogdet(_on_host(x))
    return SlogdetResult(_back(sign, x), _back(logabs, x))


def _solve_impl(a: Tensor, b: Tensor) -> Tensor:
    return _host("solve", a, b, shapes=[b.shape])[0]


def _solve_vjp(args: tuple, x: Tensor, g: Tensor) -> tuple:
    gb = _solve(args[0].mT, g)
    return -(gb @ x.mT), gb


_solve = _rules(_solve_impl, _solve_vjp,
                lambda args, x, ts: _solve(args[0], ts[1] - ts[0] @ x))


def solve(x1: Tensor, x2: Tensor, /) -> Tensor:
    """The solution ``X`` of ``x1 @ X = x2``. ``x1`` is (..., M, M); ``x2`` is (..., M, K), or
    (M,) for one vector (then the result is (..., M)). Batch dimensions broadcast. ValueError
    for mismatched shapes; LinAlgError at realize if ``x1`` is singular."""
    a = _matrix(x1, "solve", square=True)
    b = x2 if isinstance(x2, Tensor) else asarray(x2)
    vector = b.ndim == 1
    if vector:
        b = b[:, None]
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise ValueError(f"linalg.solve: x2 of shape {x2.shape} does not match x1 of shape {a.shape} "
                         "(need (..., M, K) or (M,))")
    try:
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"linalg.solve: the batch dimensions of {a.shape} and {x2.shape} do not broadcast") from None
    d = dt.promote_types(_float_dtype(a), _float_dtype(b))
    host = dt.float32 if d.itemsize < 4 else d
    aa = a.astype(host).broadcast_to(batch + a.shape[-2:])
    bb = b.astype(host).broadcast_to(batch + b.shape[-2:])
    out = _solve(aa, bb).astype(d)
    return out[..., 0] if vector else out


# --- cholesky, eigh, eigvalsh ------------------------------------------------------------------------
def _phi(a: Tensor) -> Tensor:
    """The lower triangle with half the diagonal."""
    return a.tril() - 0.5 * _diag_embed(_mdiag(a))


def _cholesky_impl(a: Tensor) -> Tensor:
    return _host("cholesky", a, shapes=[a.shape])[0]


def _cholesky_vjp(args: tuple, lo: Tensor, g: Tensor) -> tuple:
    li = _inv(lo)
    return (_sym(li.mT @ _phi(lo.mT @ g) @ li),)


def _cholesky_jvp(args: tuple, lo: Tensor, ts: tuple) -> Tensor:
    li = _inv(lo)
    return lo @ _phi(li @ _sym(ts[0]) @ li.mT)


_cholesky = _rules(_cholesky_impl, _cholesky_vjp, _cholesky_jvp)


def cholesky(x: Tensor, /, *, upper: bool = False) -> Tensor:
    """The Cholesky factor of each symmetric positive-definite matrix of ``x`` (..., M, M):
    lower ``L`` with ``x = L Lᵀ``, or upper ``U = Lᵀ`` with ``x = Uᵀ U`` when ``upper``. Only
    the lower triangle of ``x`` is read. LinAlgError at realize if it is not positive definite."""
    x = _matrix(x, "cholesky", square=True)
    lo = _back(_cholesky(_on_host(x)), x)
    return lo.mT if upper else lo


def _eigh_impl(a: Tensor) -> tuple[Tensor, Tensor]:
    return tuple(_host("eigh", a, shapes=[a.shape[:-1], a.shape]))


def _eigh_vjp(args: tuple, outs: tuple, cts: tuple) -> tuple:
    (w, v), (gw, gv) = outs, cts
    inner = _diag_embed(gw) + _gap_recip(w) * (v.mT @ gv)
    return (_sym(v @ inner @ v.mT),)


def _eigh_jvp(args: tuple, outs: tuple, ts: tuple) -> tuple:
    w, v = outs
    p = v.mT @ _sym(ts[0]) @ v
    return _mdiag(p), v @ (_gap_recip(w) * p)


_eigh = _rules(_eigh_impl, _eigh_vjp, _eigh_jvp)


def eigh(x: Tensor, /) -> EighResult:
    """Eigenvalues (ascending, (..., M)) and orthonormal eigenvectors (columns, (..., M, M)) of
    each symmetric matrix of ``x``; only its lower triangle is read."""
    x = _matrix(x, "eigh", square=True)
    w, v = _eigh(_on_host(x))
    return EighResult(_back(w, x), _back(v, x))


def _eigvalsh_impl(a: Tensor) -> Tensor:
    return _host("eigvalsh", a, shapes=[a.shape[:-1]])[0]


def _eigvalsh_vjp(args: tuple, w: Tensor, g: Tensor) -> tuple:
    v = _eigh(args[0])[1]
    return ((v * g[..., None, :]) @ v.mT,)


def _eigvalsh_jvp(args: tuple, w: Tensor, ts: tuple) -> Tensor:
    v = _eigh(args[0])[1]
    return (v * (_sym(ts[0]) @ v)).sum(-2)


_eigvalsh = _rules(_eigvalsh_impl, _eigvalsh_vjp, _eigvalsh_jvp)


def eigvalsh(x: Tensor, /) -> Tensor:
    """The eigenvalues of each symmetric matrix of ``x`` (ascending, (..., M))."""
    x = _matrix(x, "eigvalsh", square=True)
    return _back(_eigvalsh(_on_host(x)), x)


# --- qr ------------------------------------------------------------------------------------------
def _qr_impl(a: Tensor, mode: str) -> tuple[Tensor, Tensor]:
    *batch, m, n = a.shape
    k = m if mode == "complete" else min(m, n)
    return tuple(_host("qr", a, shapes=[(*batch, m, k), (*batch, k, n)], mode=mode))


def _qr_check(a: Tensor, mode: str) -> None:
    if mode == "complete" and a.shape[-2] > a.shape[-1]:
        raise NotImplementedError(f"linalg.qr: mode='complete' of a tall matrix {a.shape} has no derivative (the "
                                  "extra columns of Q are not unique); use mode='reduced'")


def _right_rinv(b: Tensor, r: Tensor) -> Tensor:
    """``b @ R⁻ᵀ``."""
    return _solve(r, b.mT).mT


def _qr_vjp_square(q: Tensor, r: Tensor, gq: Tensor, gr: Tensor) -> Tensor:
    """The cotangent of A = QR with R square (M >= N)."""
    n = gr @ r.mT - q.mT @ gq
    m = n.triu() + n.triu(1).mT
    return _right_rinv(gq + q @ m, r)


def _qr_vjp(args: tuple, outs: tuple, cts: tuple) -> tuple:
    (a, mode), (q, r), (gq, gr) = args, outs, cts
    _qr_check(a, mode)
    m = a.shape[-2]
    if a.shape[-1] <= m:
        return _qr_vjp_square(q, r, gq, gr), None
    y, gr2 = a[..., m:], gr[..., m:]  # wide: A = Q [R1 | R2] with R2 = Qᵀ Y
    gx = _qr_vjp_square(q, r[..., :m], gq + y @ gr2.mT, gr[..., :m])
    return cat([gx, q @ gr2], -1), None


def _qr_jvp_square(q: Tensor, r: Tensor, da: Tensor) -> tuple[Tensor, Tensor]:
    d = _solve(r.mT, da.mT).mT  # dA R⁻¹
    x = q.mT @ d
    low = x.tril(-1)
    upper = x - (low - low.mT)  # dR R⁻¹ (QᵀdQ is the antisymmetric part)
    return d - q @ upper, upper @ r


def _qr_jvp(args: tuple, outs: tuple, ts: tuple) -> tuple:
    (a, mode), (q, r), da = args, outs, ts[0]
    _qr_check(a, mode)
    m = a.shape[-2]
    if a.shape[-1] <= m:
        return _qr_jvp_square(q, r, da)
    dq, dr1 = _qr_jvp_square(q, r[..., :m], da[..., :m])
    dr2 = dq.mT @ a[..., m:] + q.mT @ da[..., m:]
    return dq, cat([dr1, dr2], -1)


_qr = _rules(_qr_impl, _qr_vjp, _qr_jvp)


def qr(x: Tensor, /, *, mode: str = "reduced") -> QRResult:
    """``x = Q R`` for each matrix of ``x`` (..., M, N), K = min(M, N): ``mode="reduced"`` gives Q
    (..., M, K) with orthonormal columns and upper-triangular R (..., K, N); ``"complete"`` gives
    Q (..., M, M) and R (..., M, N). ValueError for another mode."""
    x = _matrix(x, "qr")
    if mode not in ("reduced", "complete"):
        raise ValueError(f"linalg.qr: mode must be 'reduced' or 'complete', got {mode!r}")
    q, r = _qr(_on_host(x), mode)
    return QRResult(_back(q, x), _back(r, x))


# --- svd, svdvals, pinv ------------------------------------------------------------------------------
def _svd_impl(a: Tensor, full_matrices: bool) -> tuple[Tensor, Tensor, Tensor]:
    *batch, m, n = a.shape
    k = min(m, n)
    mu, nv = (m, n) if full_matrices else (k, k)
    return tuple(_host("svd", a, shapes=[(*batch, m, mu), (*batch, k), (*batch, nv, n)],
                       full_matrices=full_matrices))


def _svd_vjp(args: tuple, outs: tuple, cts: tuple) -> tuple:
    a = args[0]
    k = min(a.shape[-2:])
    (u, s, vh), (gu, gs, gvh) = outs, cts
    u, vh, gu, gvh = u[..., :k], vh[..., :k, :], gu[..., :k], gvh[..., :k, :]
    v, gv = vh.mT, gvh.mT
    f = _gap_recip(s, squares=True)
    j = f * (u.mT @ gu - gu.mT @ u)
    kk = f * (v.mT @ gv - gv.mT @ v)
    inner = j * s[..., None, :] + _diag_embed(gs) + s[..., :, None] * kk
    s_inv = _safe_recip(s)
    gu_out = gu * s_inv[..., None, :]  # Ū S⁻¹
    gv_out = gv * s_inv[..., None, :]  # V̄ S⁻¹
    ga = (u @ inner @ vh
          + (gu_out - u @ (u.mT @ gu_out)) @ vh
          + u @ (gv_out - v @ (v.mT @ gv_out)).mT)
    return ga, None


def _svd_jvp(args: tuple, outs: tuple, ts: tuple) -> tuple:
    (a, full_matrices), (u, s, vh), da = args, outs, ts[0]
    if full_matrices and a.shape[-2] != a.shape[-1]:
        raise NotImplementedError(f"linalg.svd: forward-mode derivative with full_matrices=True of a non-square "
                                  f"matrix {a.shape} (the extra singular vectors are not unique); use "
                                  "full_matrices=False")
    v = vh.mT
    p = u.mT @ da @ v
    f = _gap_recip(s, squares=True)
    s_row, s_col = s[..., None, :], s[..., :, None]
    s_inv = _safe_recip(s)[..., None, :]
    dav, datu = da @ v, da.mT @ u
    du = u @ (f * (p * s_row + s_col * p.mT)) + (dav - u @ (u.mT @ dav)) * s_inv
    dv = v @ (f * (s_col * p + p.mT * s_row)) + (datu - v @ (v.mT @ datu)) * s_inv
    return du, _mdiag(p), dv.mT


_svd = _rules(_svd_impl, _svd_vjp, _svd_jvp)


def svd(x: Tensor, /, *, full_matrices: bool = True) -> SVDResult:
    """``x = U diag(S) Vh`` for each matrix of ``x`` (..., M, N), K = min(M, N): singular values S
    (..., K) descending; U (..., M, M) and Vh (..., N, N) when ``full_matrices``, else U
    (..., M, K) and Vh (..., K, N)."""
    x = _matrix(x, "svd")
    u, s, vh = _svd(_on_host(x), bool(full_matrices))
    return SVDResult(_back(u, x), _back(s, x), _back(vh, x))


def _svdvals_impl(a: Tensor) -> Tensor:
    return _host("svdvals", a, shapes=[a.shape[:-2] + (min(a.shape[-2:]),)])[0]


def _svdvals_vjp(args: tuple, s: Tensor, g: Tensor) -> tuple:
    u, _, vh = _svd(args[0], False)
    return ((u * g[..., None, :]) @ vh,)


def _svdvals_jvp(args: tuple, s: Tensor, ts: tuple) -> Tensor:
    u, _, vh = _svd(args[0], False)
    return (u * (ts[0] @ vh.mT)).sum(-2)


_svdvals = _rules(_svdvals_impl, _svdvals_vjp, _svdvals_jvp)


def svdvals(x: Tensor, /) -> Tensor:
    """The singular values of each matrix of ``x`` (..., M, N), descending, shape (..., min(M, N))."""
    x = _matrix(x, "svdvals")
    return _back(_svdvals(_on_host(x)), x)


def _pinv_impl(a: Tensor, rtol: float) -> Tensor:
    return _host("pinv", a, shapes=[a.shape[:-2] + (a.shape[-1], a.shape[-2])], rtol=rtol)[0]


def _pinv_vjp(args: tuple, p: Tensor, g: Tensor) -> tuple:
    a = args[0]
    gt = g.mT
    left = gt @ p @ p.mT  # (I - A P) Gᵀ P Pᵀ
    right = p.mT @ p @ gt  # Pᵀ P Gᵀ (I - P A)
    return -(p.mT @ g @ p.mT) + left - a @ (p @ left) + right - (right @ p) @ a, None


def _pinv_jvp(args: tuple, p: Tensor, ts: tuple) -> Tensor:
    a, da = args[0], ts[0]
    dat = da.mT
    left = p @ p.mT @ dat  # P Pᵀ dAᵀ (I - A P)
    right = dat @ p.mT @ p  # (I - P A) dAᵀ Pᵀ P
    return -(p @ da @ p) + left - (left @ a) @ p + right - p @ (a @ right)


_pinv = _rules(_pinv_impl, _pinv_vjp, _pinv_jvp)


def _default_rtol(x: Tensor, rtol: float | None) -> float:
    return max(x.shape[-2:]) * dt.finfo(_float_dtype(x)).eps if rtol is None else float(rtol)


def pinv(x: Tensor, /, *, rtol: float | None = None) -> Tensor:
    """The Moore-Penrose pseudo-inverse of each matrix of ``x`` (..., M, N), shape (..., N, M).
    Singular values at most ``rtol`` times the largest count as zero; ``rtol`` (a float) defaults
    to ``max(M, N) · eps`` of the result dtype."""
    x = _matrix(x, "pinv")
    return _back(_pinv(_on_host(x), _default_rtol(x, rtol)), x)


def lstsq(x1: Tensor, x2: Tensor, /, *, rtol: float | None = None) -> Tensor:
    """The least-squares (minimum-norm) solution ``X`` of ``x1 @ X ≈ x2`` (a corvid extension):
    ``pinv(x1, rtol=rtol) @ x2``. ``x1`` is (..., M, N); ``x2`` is (..., M, K) or (M,)."""
    a = _matrix(x1, "lstsq")
    b = x2 if isinstance(x2, Tensor) else asarray(x2)
    vector = b.ndim == 1
    b = b[:, None] if vector else b
    if b.ndim < 2 or b.shape[-2] != a.shape[-2]:
        raise ValueError(f"linalg.lstsq: x2 of shape {x2.shape} does not match x1 of shape {a.shape} "
                         "(need (..., M, K) or (M,))")
    out = pinv(a, rtol=rtol) @ b
    return out[..., 0] if vector else out


def matrix_rank(x: Tensor, /, *, rtol: float | Tensor | None = None) -> Tensor:
    """The number of singular values above ``rtol`` times the largest, per matrix (int64, shape
    (...)). ``rtol`` (a float, or a tensor broadcasting against (...)) defaults to
    ``max(M, N) · eps``."""
    x = _matrix(x, "matrix_rank")
    if min(x.shape[-2:]) == 0:
        return x._const(0, dt.default_int, x.shape[:-2])
    s = svdvals(x)
    tol = (rtol if isinstance(rtol, Tensor) else _default_rtol(x, rtol))
    cut = s.max(-1, keepdims=True) * (tol[..., None] if isinstance(tol, Tensor) else tol)
    return (s > cut).sum(-1, dtype=dt.default_int)


# --- compositions ------------------------------------------------------------------------------------
def cross(x1: Tensor, x2: Tensor, /, *, axis: int = -1) -> Tensor:
    """The cross product of 3-vectors along ``axis`` of the broadcast operands. ValueError unless
    both have size 3 there."""
    a = x1 if isinstance(x1, Tensor) else asarray(x1)
    b = x2 if isinstance(x2, Tensor) else asarray(x2)
    shape = broadcast_shapes(a.shape, b.shape)
    ax = normalize_axis(axis, len(shape))
    for t in (a, b):
        if t.ndim < len(shape) - ax or t.shape[ax - len(shape)] != 3:
            raise ValueError(f"linalg.cross: axis {axis} must have size 3 in both operands, got shapes "
                             f"{a.shape} and {b.shape}")
    a, b = moveaxis(a.broadcast_to(shape), ax, -1), moveaxis(b.broadcast_to(shape), ax, -1)
    c = [a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
         a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
         a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]]
    return moveaxis(stack(c, -1), -1, ax)


def diagonal(x: Tensor, /, *, offset: int = 0) -> Tensor:
    """The diagonal of each matrix (..., M, N) as a last axis; ``offset > 0`` above the main one."""
    return _diagonal(_matrix(x, "diagonal"), offset, -2, -1)


def trace(x: Tensor, /, *, offset: int = 0, dtype: DTypeLike | None = None) -> Tensor:
    """The sum of each matrix's diagonal, shape (...); integers accumulate as in ``sum``."""
    return diagonal(x, offset=offset).sum(-1, dtype=dtype)


def outer(x1: Tensor, x2: Tensor, /) -> Tensor:
    """The outer product of two vectors (N,) and (M,): (N, M). ValueError for other ranks."""
    a = x1 if isinstance(x1, Tensor) else asarray(x1)
    b = x2 if isinstance(x2, Tensor) else asarray(x2)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"linalg.outer: needs two vectors, got shapes {a.shape} and {b.shape}")
    return a[:, None] * b[None, :]


def matrix_power(x: Tensor, n: int, /) -> Tensor:
    """Each square matrix of ``x`` raised to the integer ``n`` by repeated squaring: the identity
    for 0 (in ``x``'s dtype), powers of the inverse for ``n < 0``."""
    x = _matrix(x, "matrix_power", square=True)
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise TypeError(f"linalg.matrix_power: n must be an int, got {type(n).__name__}")
    n = int(n)
    if n == 0:
        return _eye_like(x, x.shape[-1]).broadcast_to(x.shape)
    base, n = (inv(x), -n) if n < 0 else (x, n)
    result = None
    while n:
        if n & 1:
            result = base if result is None else result @ base
        n >>= 1
        if n:
            base = base @ base
    return result


def _root(total: Tensor, p: float) -> Tensor:
    """``total ** (1/p)``, with a zero (not nan) gradient where ``total`` is 0."""
    zero = total.eq(0)
    safe = where(zero, 1.0, total)
    return where(zero, 0.0, safe.sqrt() if p == 2 else safe ** (1 / p))


def vector_norm(x: Tensor, /, *, axis: int | Sequence[int] | None = None, keepdims: bool = False,
                ord: float = 2) -> Tensor:  # noqa: A002  (the standard's name)
    """The ``ord``-norm over ``axis`` (all axes when None; a tuple reduces several): ``inf`` the
    largest ``|x|``, ``-inf`` the smallest, 0 the number of non-zeros, else ``(Σ|x|^ord)^(1/ord)``.
    Result in a float dtype (ints in the default float)."""
    x = x if isinstance(x, Tensor) else asarray(x)
    x = x.astype(_float_dtype(x))
    axes = tuple(range(x.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(sorted({normalize_axis(a, x.ndim) for a in axes}))
    if ord == math.inf:
        return x.abs().max(axes, keepdims)
    if ord == -math.inf:
        return x.abs().min(axes, keepdims)
    if ord == 0:
        return x.ne(0).astype(x.dtype).sum(axes, keepdims)
    if ord == 1:
        return x.abs().sum(axes, keepdims)
    if ord == 2:
        return _root((x * x).sum(axes, keepdims), 2)
    return _root((x.abs() ** ord).sum(axes, keepdims), ord)


def matrix_norm(x: Tensor, /, *, keepdims: bool = False, ord: float | str = "fro") -> Tensor:  # noqa: A002
    """A norm of each matrix (..., M, N): ``"fro"`` (Frobenius), ``"nuc"`` (sum of singular values),
    2 / -2 (largest / smallest singular value), 1 / -1 (largest / smallest column sum of ``|x|``),
    ``inf`` / ``-inf`` (largest / smallest row sum). Shape (...), or (..., 1, 1) with ``keepdims``.
    ValueError for another ``ord``."""
    x = _matrix(x, "matrix_norm")
    x = x.astype(_float_dtype(x))
    if ord == "fro":
        out = _root((x * x).sum((-2, -1)), 2)
    elif ord == "nuc":
        out = svdvals(x).sum(-1)
    elif ord in (2, -2):
        s = svdvals(x)
        out = s.max(-1) if ord == 2 else s.min(-1)
    elif ord in (1, -1, math.inf, -math.inf):
        sums = x.abs().sum(-2 if abs(ord) == 1 else -1)
        out = sums.max(-1) if ord > 0 else sums.min(-1)
    else:
        raise ValueError(f"linalg.matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got {ord!r}")
    return out[..., None, None] if keepdims else out

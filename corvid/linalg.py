"""Linear algebra: the ``linalg`` extension of the Array API standard (2025.12), plus ``eig``,
``eigvals``, ``norm``, ``cond`` and ``lstsq`` (numpy.linalg's), for real and complex dtypes.

``cv.linalg.<fn>`` takes stacks of matrices ``(..., M, N)`` everywhere. Two kinds of functions:

* **compositions** (``cond``, ``cross``, ``diagonal``, ``matmul``, ``matrix_norm``, ``matrix_power``,
  ``norm``, ``outer``, ``tensordot``, ``trace``, ``vecdot``, ``vector_norm``, ``matrix_rank``,
  ``lstsq``) are Tensor ops over the functions below, so they fuse, batch and differentiate;
* **factorizations and solves** (``cholesky``, ``det``, ``eig``, ``eigvals``, ``eigh``,
  ``eigvalsh``, ``inv``, ``pinv``, ``qr``, ``slogdet``, ``solve``, ``svd``, ``svdvals``) each have
  one implementation per *backend*, and are wrapped in ``custom_vjp`` *and* ``custom_jvp`` with
  rules written in Tensor ops (which call the other wrapped functions), so ``grad``, ``jvp``,
  higher orders, ``vmap`` and ``jit`` work with either backend.

Backends (:func:`set_backend`, process-wide, the context manager :func:`use_backend`, per thread, or the
environment variable ``CORVID_LINALG`` read at import; the choice applies when a function is
*called*, i.e. when its graph is built):

* ``"lapack"`` (the default): host kernels over ``numpy.linalg`` (LAPACK; see
  :mod:`corvid.engine.host`), one ``CUSTOM`` node each;
* ``"kernels"``: :mod:`corvid.linalg_kernels`, the same functions written only in corvid Tensor
  ops (blocked Cholesky, LU with partial pivoting, Householder QR, Jacobi eigh/SVD, and Hessenberg
  reduction with shifted QR iterations for ``eig``/``eigvals``), for real and complex dtypes, so
  they run wherever corvid's generated kernels run. The iterative methods (``eigh``, ``svd``,
  ``pinv``, ``eig``) compute in float64 (complex128) whatever the input precision, so float32
  results are as accurate as LAPACK's. ``eig`` returns the eigenvalues in Schur order (not
  LAPACK's), and for real input its real eigenvalues may carry an imaginary part at the rounding
  level (it works in complex arithmetic). Called on plain (untraced) tensors, its functions run at
  once: their kernels are captured with ``jit`` per input shape and replayed (the first call of a
  shape also builds, schedules and compiles them); inside ``grad``/``jvp``/``vmap``/``jit`` they
  become part of the traced graph. Its error behaviour differs (see below).

Dtypes: integer and bool inputs compute in the default float dtype; 8- and 16-bit floats are
computed in float32 and cast back. complex64/complex128 work everywhere (Hermitian for
``cholesky``/``eigh``/``eigvalsh``, which read only the lower triangle, and ignore the imaginary
part of the diagonal). Real-valued results of complex inputs (eigenvalues of ``eigh``, singular
values, ``logabsdet``, norms) have the real dtype (float32 for complex64). ``eig``/``eigvals``
always return complex results (complex64 for float32 input, complex128 for float64), as numpy.

Errors: a non-square matrix where a square one is needed, fewer than 2 dimensions, mismatched
shapes or an unknown ``ord``/``p``/``mode`` raise ValueError when the function is called. With
LAPACK, a failure (a singular matrix in ``inv``/``solve``, a matrix that is not positive definite
in ``cholesky``, nan or inf in ``eig``) can only be seen when the value is computed, so it raises
:class:`LinAlgError` (a ValueError) at realize time (``.numpy()``, ``.realize()``, a jitted
call). With the kernels backend nothing raises at realize: a singular matrix gives inf/nan
entries from ``inv``/``solve``, a matrix that is not positive definite gives nan entries from
``cholesky``, and a matrix with nan or inf gives nan eigenvalues and eigenvectors from ``eig``.
Either way ``det`` of a singular matrix is 0, ``slogdet`` is ``(0, -inf)``, and ``cond`` is inf
(for ``p`` None or ±2, as large as rounding leaves the smallest singular value, as numpy's).

Derivatives, and where they do not exist. Complex inputs follow the JAX convention of
:mod:`corvid.transforms.reverse` (``grad`` of a real loss of a complex ``z`` is
``dL/dRe z - 1j dL/dIm z``); every function here has both derivative rules for complex inputs.

* ``cholesky``, ``eigh``, ``eigvalsh`` read only the lower triangle of ``x``, which is taken to be
  symmetric (Hermitian): gradients are symmetric (Hermitian), and tangents are symmetrized before use;
* ``eigh``/``svd``/``eig``: the eigenvector (singular vector) derivatives divide by ``λj - λi``
  (``sj² - si²``). Exactly repeated values have no such derivative; their term is dropped (0),
  which leaves losses of the eigenvalues alone (or of the spaces they span) right, and
  near-repeated values give large derivatives, as they should. The sign (complex phase) of each
  vector is arbitrary, so losses should not depend on it (``|v|**4``, ``v vᴴ``, ``U S Vh``); the
  parts of a cotangent that would change a phase are ignored;
* ``eig`` (non-symmetric): eigenvectors are normalized to unit length (as LAPACK's), and their
  derivative keeps that normalization; it needs the eigenvector matrix to be invertible;
  ``eigvals`` is ``eig(x).eigenvalues``. For real input the gradient is real;
* ``svd``: the terms for zero singular values use 0 for ``1/s``; with ``full_matrices=True`` and a
  non-square input, the extra columns of ``U`` (rows of ``Vh``) are an arbitrary basis of the
  complement: reverse mode gives them no gradient, forward mode raises NotImplementedError;
* ``qr``: R must be invertible (full rank); ``mode="complete"`` with ``M > N`` has no derivative
  (NotImplementedError when one is requested);
* ``det``/``slogdet`` use ``inv(x)``: with LAPACK a singular matrix raises LinAlgError in the
  backward; the sign of ``slogdet`` has a zero derivative for real input (and ``sign · i·Im(tr(x⁻¹dx))``
  for complex input);
* ``pinv`` (and ``lstsq``) assume the rank is constant near ``x``;
* ``vector_norm``/``matrix_norm``/``norm``: the gradient of a 2-norm or Frobenius norm at zero is 0.

>>> import corvid as cv
>>> a = cv.Tensor([[4.0, 1.0], [1.0, 3.0]])
>>> [round(v, 4) for v in cv.linalg.eigvalsh(a).tolist()]
[2.382, 4.618]
>>> cv.linalg.solve(a, cv.Tensor([1.0, 2.0])).shape
(2,)
>>> with cv.linalg.use_backend("kernels"):
...     [round(v, 4) for v in cv.linalg.eigvalsh(a).tolist()]
[2.382, 4.618]
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import warnings
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np

from .errors import ShapeError
from . import dtype as dt
from .array_api import asarray, matmul, matrix_transpose, tensordot, vecdot
from .creation import eye
from .dtype import DType, DTypeLike
from .engine.host import HostOp, host_call
from .ops.elementwise import make_complex, where
from .ops.manipulation import diagonal as _diagonal, moveaxis
from .ops.movement import cat, normalize_axis, stack
from .tensor import Tensor, broadcast_shapes
from .transforms.custom import custom_vjp
from .transforms.forward import custom_jvp
from .tree import register_pytree_node

__all__ = ["LinAlgError", "EigResult", "EighResult", "QRResult", "SlogdetResult", "SVDResult", "cholesky", "cond",
           "cross", "det", "diagonal", "eig", "eigh", "eigvals", "eigvalsh", "get_backend", "inv", "lstsq", "matmul",
           "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "norm", "outer", "pinv", "qr",
           "set_backend", "slogdet", "solve", "svd", "svdvals", "tensordot", "trace", "use_backend", "vecdot",
           "vector_norm"]


class LinAlgError(ValueError):
    """LAPACK could not compute the value: a singular matrix, one that is not positive definite.

    A ValueError (as ``numpy.linalg.LinAlgError``), raised when the value is computed (``.numpy()``,
    ``.realize()``), not when the function is called, since graphs are lazy. The kernels backend
    never raises it (see :func:`set_backend`): it gives inf or nan entries instead.

    >>> x = cv.linalg.inv(cv.zeros(2, 2))  # nothing computed yet
    >>> x.numpy()
    Traceback (most recent call last):
    ...
    corvid.linalg.LinAlgError: linalg.inv: Singular matrix (for an input of shape (2, 2))
    """


class EigResult(NamedTuple):
    """What :func:`eig` returns: a named tuple ``(eigenvalues, eigenvectors)``, both complex.

    >>> w, v = cv.linalg.eig(cv.Tensor([[2.0, 1.0], [0.0, 3.0]]))
    >>> w.tolist()
    [(2+0j), (3+0j)]
    >>> cv.linalg.eig(cv.eye(3)).eigenvectors.shape
    (3, 3)
    """

    eigenvalues: Tensor
    eigenvectors: Tensor


class EighResult(NamedTuple):
    """What :func:`eigh` returns: a named tuple ``(eigenvalues, eigenvectors)``.

    >>> res = cv.linalg.eigh(cv.Tensor([[2.0, 1.0], [1.0, 2.0]]))
    >>> res.eigenvalues.tolist(), res.eigenvectors.shape
    ([1.0, 3.0], (2, 2))
    """

    eigenvalues: Tensor
    eigenvectors: Tensor


class QRResult(NamedTuple):
    """What :func:`qr` returns: a named tuple ``(Q, R)``.

    >>> res = cv.linalg.qr(cv.ones(4, 2))
    >>> res.Q.shape, res.R.shape
    ((4, 2), (2, 2))
    """

    Q: Tensor
    R: Tensor


class SlogdetResult(NamedTuple):
    """What :func:`slogdet` returns: a named tuple ``(sign, logabsdet)``.

    >>> sign, logabsdet = cv.linalg.slogdet(cv.Tensor([[2.0, 0.0], [0.0, -3.0]]))
    >>> sign.item(), round(logabsdet.item(), 4)  # log(6)
    (-1.0, 1.7918)
    """

    sign: Tensor
    logabsdet: Tensor


class SVDResult(NamedTuple):
    """What :func:`svd` returns: a named tuple ``(U, S, Vh)``.

    >>> res = cv.linalg.svd(cv.ones(4, 2), full_matrices=False)
    >>> res.U.shape, res.S.shape, res.Vh.shape
    ((4, 2), (2,), (2, 2))
    """

    U: Tensor
    S: Tensor
    Vh: Tensor


for _cls in (EigResult, EighResult, QRResult, SlogdetResult, SVDResult):  # so vmap/jit/grad see their tensors
    register_pytree_node(_cls, lambda r: (tuple(r), None), lambda _, ch, cls=_cls: cls(*ch))


# --- backends ----------------------------------------------------------------------------------------
BACKENDS = ("lapack", "kernels")


def _initial_backend() -> str:
    name = os.environ.get("CORVID_LINALG", "lapack").strip().lower() or "lapack"
    if name not in BACKENDS:
        warnings.warn(f"CORVID_LINALG={name!r} is not one of {BACKENDS}; using 'lapack'", stacklevel=2)
        return "lapack"
    return name


_backend = _initial_backend()


class _Scoped(threading.local):
    """The backends of the ``use_backend`` blocks a thread is in, innermost last (per thread: a
    block in one thread does not change what another thread's calls use)."""

    def __init__(self) -> None:
        self.stack: list[str] = []


_scoped = _Scoped()


def get_backend() -> str:
    """The backend that linalg functions called now (in this thread) use: ``"lapack"`` or
    ``"kernels"``. The innermost :func:`use_backend` block decides, else :func:`set_backend`.

    >>> with cv.linalg.use_backend("kernels"):
    ...     print(cv.linalg.get_backend())
    kernels
    """
    return _scoped.stack[-1] if _scoped.stack else _backend


def set_backend(name: str) -> str:
    """Use ``name`` (``"lapack"`` or ``"kernels"``) for the factorizations and solves called from
    now on (process-wide); returns the previous backend. ValueError for another name. See the
    module docstring for what each backend does; :func:`use_backend` sets it for a block.

    >>> previous = cv.linalg.set_backend("kernels")
    >>> cv.linalg.det(cv.Tensor([[2.0, 0.0], [0.0, 3.0]])).item()
    6.0
    >>> cv.linalg.set_backend(previous)
    'kernels'
    """
    global _backend
    if name not in BACKENDS:
        raise ValueError(f"linalg.set_backend: backend must be one of {BACKENDS}, got {name!r}")
    previous, _backend = _backend, name
    return previous


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """``with cv.linalg.use_backend("kernels"): ...``: :func:`set_backend` for the block only,
    and for this thread only. ValueError for another name. The backend applies to the functions
    called in the block (when their graphs are built), whenever their values are computed.

    >>> a = cv.Tensor([[2.0, 1.0], [1.0, 2.0]])
    >>> with cv.linalg.use_backend("kernels"):
    ...     w = cv.linalg.eigvalsh(a)
    >>> [round(v, 4) for v in w.tolist()]
    [1.0, 3.0]
    """
    if name not in BACKENDS:
        raise ValueError(f"linalg.use_backend: backend must be one of {BACKENDS}, got {name!r}")
    _scoped.stack.append(name)
    try:
        yield
    finally:
        _scoped.stack.pop()


_K: Any = None


def _kernels() -> Any:
    """The :mod:`corvid.linalg_kernels` module when the kernels backend is active, else None."""
    global _K
    if get_backend() != "kernels":
        return None
    if _K is None:
        from . import linalg_kernels as _K
    return _K


# --- host kernels -------------------------------------------------------------------------------------
def _complex_of(a: np.ndarray) -> np.dtype:
    return np.result_type(a.dtype, np.complex64)


def _eig_host(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w, v = np.linalg.eig(a)
    return w.astype(_complex_of(a)), v.astype(_complex_of(a))


def _inv_or_nan(a: np.ndarray) -> np.ndarray:
    """``inv`` with nan matrices where LAPACK finds a singular one (numpy's ``cond`` does the same)."""
    try:
        return np.linalg.inv(a)
    except np.linalg.LinAlgError:
        flat = a.reshape((-1,) + a.shape[-2:])
        out = np.full(flat.shape, np.nan, dtype=np.result_type(a.dtype, np.float32))
        for i, m in enumerate(flat):
            try:
                out[i] = np.linalg.inv(m)
            except np.linalg.LinAlgError:
                pass
        return out.reshape(a.shape)


_NUMPY: dict[str, Callable[..., Any]] = {
    "inv": np.linalg.inv,
    "inv_or_nan": _inv_or_nan,
    "det": np.linalg.det,
    "slogdet": lambda a: tuple(np.linalg.slogdet(a)),
    "solve": np.linalg.solve,
    "cholesky": np.linalg.cholesky,
    "eig": _eig_host,
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


def _host(name: str, *inputs: Tensor, shapes: Sequence[tuple[int, ...]], dtype: DType | None = None,
          **params: Any) -> list[Tensor]:
    """The outputs of host function ``name``, all of ``dtype`` (the first input's by default)."""
    op = HostOp(f"linalg.{name}", _RUN[name], params=tuple(sorted(params.items())), batched=True)
    return host_call(op, *inputs, outputs=[(s, dtype or inputs[0].dtype) for s in shapes])


def _rules(impl: Callable[..., Any], vjp: Callable[..., tuple], jvp: Callable[..., Any]) -> Callable[..., Any]:
    """``impl`` with both derivative rules. ``vjp(args, outs, cts)`` returns one cotangent per
    argument; ``jvp(args, outs, tangents)`` the output tangents. ``outs`` is the function applied
    again through this very wrapper (the same nodes, by hash-consing), so the rules are
    differentiable themselves and higher orders work. Arguments and outputs must be real here
    (``custom_vjp`` differentiates float tensors): :class:`_Fn` splits complex ones."""
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


class _Fn:
    """A factorization with its derivative rules, for real and complex tensors.

    ``kinds`` says, per output, whether it is complex: ``"x"`` when an input is, ``"c"`` always,
    ``"r"`` never. The rules are written once for both: holomorphic parts are the real formulas,
    the rest conjugate explicitly (JAX's convention: a cotangent ``c`` of ``z`` is the map
    ``dz -> Re(c dz)``). Complex tensors cross the ``custom_vjp``/``custom_jvp`` boundary as
    (real, imaginary) pairs, since those differentiate float tensors only; cotangents cross as
    ``(Re c, -Im c)``, which is what the pair's own reverse rules produce. The first ``ntensors``
    arguments are tensors, the rest are static parameters."""

    def __init__(self, impl: Callable[..., Any], vjp: Callable[..., tuple], jvp: Callable[..., Any], kinds: str,
                 ntensors: int = 1):
        self.impl, self.vjp, self.jvp, self.kinds, self.nt = impl, vjp, jvp, kinds, ntensors
        self.real = _rules(impl, vjp, jvp)
        self.split: dict[tuple[bool, ...], Callable[..., Any]] = {}

    def __call__(self, *args: Any) -> Any:
        cin = tuple(a.dtype.is_complex for a in args[:self.nt])
        cout = tuple(k == "c" or (k == "x" and any(cin)) for k in self.kinds)
        if not any(cin) and not any(cout):
            return self.real(*args)
        fn = self.split.get(cin)
        if fn is None:
            fn = self.split[cin] = self._make_split(cin, cout)
        return fn(*args)

    def _make_split(self, cin: tuple[bool, ...], cout: tuple[bool, ...]) -> Callable[..., Any]:
        impl, vjp, jvp, nt = self.impl, self.vjp, self.jvp, self.nt
        single = len(cout) == 1

        def join(parts: Sequence[Any]) -> tuple:
            args, i = [], 0
            for c in cin:
                args.append(make_complex(parts[i], parts[i + 1]) if c else parts[i])
                i += 2 if c else 1
            return tuple(args) + tuple(parts[i:])

        def split_out(outs: Any) -> tuple:
            flat: list[Tensor] = []
            for c, o in zip(cout, (outs,) if single else outs):
                flat += [o.real, o.imag] if c else [o.real]
            return tuple(flat)

        def join_out(flat: Sequence[Tensor], cotangent: bool = False) -> Any:
            res, i = [], 0
            for c in cout:
                res.append(make_complex(flat[i], -flat[i + 1] if cotangent else flat[i + 1]) if c else flat[i])
                i += 2 if c else 1
            return res[0] if single else tuple(res)

        def impl_s(*parts: Any) -> tuple:
            return split_out(impl(*join(parts)))

        def vjp_s(parts: tuple, outs: tuple, cts: tuple) -> tuple:
            args = join(parts)
            g = vjp(args, join_out(outs), join_out(cts, cotangent=True))
            res: list[Tensor | None] = []
            for c, gi in zip(cin, g[:nt]):
                if gi is None:
                    res += [None, None] if c else [None]
                elif c:
                    gi = gi if gi.dtype.is_complex else gi.astype(dt.complex64 if gi.dtype.itemsize <= 4 else
                                                                   dt.complex128)
                    res += [gi.real, -gi.imag]
                else:
                    res.append(gi.real)  # a real input's cotangent is the real part
            return tuple(res) + (None,) * (len(parts) - len(res))

        def jvp_s(parts: tuple, outs: tuple, ts: tuple) -> tuple:
            args, targs, i = join(parts), [], 0
            for c in cin:
                targs.append(make_complex(ts[i], ts[i + 1]) if c else ts[i])
                i += 2 if c else 1
            return split_out(jvp(args, join_out(outs), tuple(targs) + tuple(ts[i:])))

        wrapped = _rules(impl_s, vjp_s, jvp_s)

        def call(*args: Any) -> Any:
            parts: list[Any] = []
            for c, a in zip(cin, args[:nt]):
                parts += [a.real, a.imag] if c else [a]
            return join_out(wrapped(*parts, *args[nt:]))
        return call


# --- small helpers ------------------------------------------------------------------------------------
def _matrix(x: Any, name: str, square: bool = False) -> Tensor:
    x = x if isinstance(x, Tensor) else asarray(x)
    if x.ndim < 2:
        raise ShapeError(f"linalg.{name}: needs a matrix or a stack of matrices (..., M, N), got shape {x.shape}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"linalg.{name}: needs square matrices (..., M, M), got shape {x.shape}")
    return x


def _float_dtype(x: Tensor) -> DType:
    return x.dtype if x.dtype.is_float or x.dtype.is_complex else dt.default_float


def _on_host(x: Tensor) -> Tensor:
    """``x`` in a dtype LAPACK has: float32, float64, complex64 or complex128."""
    d = _float_dtype(x)
    return x.astype(dt.float32 if d.itemsize < 4 else d)


def _back(y: Any, like: Tensor) -> Any:
    """A result computed on the host, in the dtype for ``like``: its float dtype (its real part's
    for real results of complex input); complex results stay complex64/complex128."""
    if y.dtype.is_complex:
        return y
    d = _float_dtype(like).real_dtype
    return y if y.dtype is d else y.astype(d)


def _H(a: Tensor) -> Tensor:
    """The conjugate transpose of each matrix (the transpose for real dtypes)."""
    return a.mT.conj()


def _herm(a: Tensor) -> Tensor:
    return (a + _H(a)) * 0.5


def _eye_like(a: Tensor, n: int) -> Tensor:
    return eye(n, dtype=a.dtype, device=a.device)


def _diag_embed(v: Tensor) -> Tensor:
    return v[..., None] * _eye_like(v, v.shape[-1])


def _mdiag(a: Tensor) -> Tensor:
    return _diagonal(a, 0, -2, -1)


def _imag_unit(x: Tensor) -> Tensor:
    """``1j * x`` for a real ``x``."""
    return make_complex(x._const(0), x)


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
    k = _kernels()
    return k.inv(a) if k else _host("inv", a, shapes=[a.shape])[0]


def _inv_vjp(args: Any, y: Tensor, g: Tensor) -> tuple[Tensor]:
    return (-(y.mT @ g @ y.mT),)


def _inv_jvp(args: Any, y: Tensor, ts: Sequence[Tensor]) -> Tensor:
    return -(y @ ts[0] @ y)


_inv = _Fn(_inv_impl, _inv_vjp, _inv_jvp, "x")


def inv(x: Tensor, /) -> Tensor:
    """The inverse of each square matrix of ``x`` (..., M, M). LinAlgError at realize if singular
    (LAPACK backend).

    >>> import corvid as cv
    >>> cv.linalg.inv(cv.Tensor([[2.0, 0.0], [0.0, 4.0]])).tolist()
    [[0.5, 0.0], [0.0, 0.25]]
    """
    x = _matrix(x, "inv", square=True)
    return _back(_inv(_on_host(x)), x)


def _inv_or_nan_impl(a: Tensor) -> Tensor:
    k = _kernels()
    return k.inv(a) if k else _host("inv_or_nan", a, shapes=[a.shape])[0]


_inv_or_nan = _Fn(_inv_or_nan_impl, _inv_vjp, _inv_jvp, "x")


def _det_impl(a: Tensor) -> Tensor:
    k = _kernels()
    return k.det(a) if k else _host("det", a, shapes=[a.shape[:-2]])[0]


_det = _Fn(_det_impl,
           lambda args, d, g: ((g * d)[..., None, None] * _inv(args[0]).mT,),
           lambda args, d, ts: d * (_inv(args[0]).mT * ts[0]).sum((-2, -1)), "x")


def det(x: Tensor, /) -> Tensor:
    """The determinant of each square matrix of ``x`` (..., M, M), shape (...). Its gradient
    ``det · x⁻ᵀ`` needs the inverse: LinAlgError in the backward of a singular matrix (LAPACK).

    >>> cv.linalg.det(cv.Tensor([[1.0, 2.0], [3.0, 4.0]])).item()
    -2.0
    >>> cv.linalg.det(cv.stack([cv.eye(2), 2 * cv.eye(2)])).tolist()  # a stack of matrices
    [1.0, 4.0]
    """
    x = _matrix(x, "det", square=True)
    return _back(_det(_on_host(x)), x)


def _slogdet_impl(a: Tensor) -> tuple[Tensor, Tensor]:
    k = _kernels()
    if k:
        return k.slogdet(a)
    sign, logabs = _host("slogdet", a, shapes=[a.shape[:-2]] * 2)
    return sign, logabs.real


def _slogdet_vjp(args: tuple, outs: tuple, cts: tuple) -> tuple:
    c = cts[1]
    if outs[0].dtype.is_complex:  # d sign = sign · i·Im(t), t = tr(x⁻¹ dx): its cotangent adds i·Im(c_sign · sign)
        c = make_complex(c, (cts[0] * outs[0]).imag)
    return (c[..., None, None] * _inv(args[0]).mT,)


def _slogdet_jvp(args: tuple, outs: tuple, ts: tuple) -> tuple:
    t = (_inv(args[0]).mT * ts[0]).sum((-2, -1))
    if outs[0].dtype.is_complex:
        return outs[0] * _imag_unit(t.imag), t.real
    return outs[0] * 0, t


_slogdet = _Fn(_slogdet_impl, _slogdet_vjp, _slogdet_jvp, "xr")


def slogdet(x: Tensor, /) -> SlogdetResult:
    """``(sign, logabsdet)`` of each square matrix: ``det = sign · exp(logabsdet)``; a singular
    matrix has sign 0 and logabsdet -inf. For complex input the sign is ``det/|det|`` (complex)
    and logabsdet is real. The sign of a real matrix has a zero derivative. Returns a
    :class:`SlogdetResult`; use it where ``det`` would overflow or underflow.

    >>> sign, logabsdet = cv.linalg.slogdet(cv.Tensor([[1.0, 2.0], [3.0, 4.0]]))
    >>> sign.item(), round(logabsdet.item(), 4)  # det = -2
    (-1.0, 0.6931)
    >>> cv.linalg.slogdet(cv.Tensor([[1.0, 2.0], [2.0, 4.0]]))  # singular
    SlogdetResult(sign=Tensor(0.), logabsdet=Tensor(-inf))
    """
    x = _matrix(x, "slogdet", square=True)
    sign, logabs = _slogdet(_on_host(x))
    return SlogdetResult(_back(sign, x), _back(logabs, x))


def _solve_impl(a: Tensor, b: Tensor) -> Tensor:
    k = _kernels()
    return k.solve(a, b) if k else _host("solve", a, b, shapes=[b.shape])[0]


def _solve_vjp(args: tuple, x: Tensor, g: Tensor) -> tuple:
    gb = _solve(args[0].mT, g)
    return -(gb @ x.mT), gb


_solve = _Fn(_solve_impl, _solve_vjp, lambda args, x, ts: _solve(args[0], ts[1] - ts[0] @ x), "x", ntensors=2)


def solve(x1: Tensor, x2: Tensor, /) -> Tensor:
    """The solution ``X`` of ``x1 @ X = x2``. ``x1`` is (..., M, M); ``x2`` is (..., M, K), or
    (M,) for one vector (then the result is (..., M)). Batch dimensions broadcast. ValueError
    for mismatched shapes; LinAlgError at realize if ``x1`` is singular (LAPACK backend).

    >>> a = cv.Tensor([[3.0, 1.0], [1.0, 2.0]])
    >>> cv.linalg.solve(a, cv.Tensor([9.0, 8.0])).tolist()
    [2.0, 3.0]
    >>> cv.linalg.solve(a, cv.eye(2)).shape  # (M, K): K right-hand sides
    (2, 2)
    """
    a = _matrix(x1, "solve", square=True)
    b = x2 if isinstance(x2, Tensor) else asarray(x2)
    vector = b.ndim == 1
    if vector:
        b = b[:, None]
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise ShapeError(f"linalg.solve: x2 of shape {x2.shape} does not match x1 of shape {a.shape} "
                         "(need (..., M, K) or (M,))")
    try:
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ShapeError(f"linalg.solve: the batch dimensions of {a.shape} and {x2.shape} do not broadcast") from None
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
    k = _kernels()
    return k.cholesky(a) if k else _host("cholesky", a, shapes=[a.shape])[0]


def _cholesky_vjp(args: tuple, lo: Tensor, g: Tensor) -> tuple:
    li = _inv(lo)
    return (_herm(li.mT @ _phi(lo.mT @ g) @ li.conj()),)


def _cholesky_jvp(args: tuple, lo: Tensor, ts: tuple) -> Tensor:
    li = _inv(lo)
    return lo @ _phi(li @ _herm(ts[0]) @ _H(li))


_cholesky = _Fn(_cholesky_impl, _cholesky_vjp, _cholesky_jvp, "x")


def cholesky(x: Tensor, /, *, upper: bool = False) -> Tensor:
    """The Cholesky factor of each symmetric (Hermitian) positive-definite matrix of ``x``
    (..., M, M): lower ``L`` with ``x = L Lᴴ``, or upper ``U = Lᴴ`` with ``x = Uᴴ U`` when
    ``upper``. Only the lower triangle of ``x`` is read. LinAlgError at realize if it is not
    positive definite (LAPACK backend; nan entries with the kernels backend).

    >>> a = cv.Tensor([[4.0, 2.0], [2.0, 5.0]])
    >>> cv.linalg.cholesky(a).tolist()
    [[2.0, 0.0], [1.0, 2.0]]
    >>> cv.linalg.cholesky(a, upper=True).tolist()
    [[2.0, 1.0], [0.0, 2.0]]
    """
    x = _matrix(x, "cholesky", square=True)
    lo = _back(_cholesky(_on_host(x)), x)
    return _H(lo) if upper else lo


def _eigh_impl(a: Tensor) -> tuple[Tensor, Tensor]:
    k = _kernels()
    if k:
        return k.eigh(a)
    w, v = _host("eigh", a, shapes=[a.shape[:-1], a.shape])
    return w.real, v


def _eigh_vjp(args: tuple, outs: tuple, cts: tuple) -> tuple:
    (w, v), (gw, gv) = outs, cts
    inner = _diag_embed(gw) + _gap_recip(w) * (v.mT @ gv)
    return (_herm(v.conj() @ inner @ v.mT),)


def _eigh_jvp(args: tuple, outs: tuple, ts: tuple) -> tuple:
    w, v = outs
    p = _H(v) @ _herm(ts[0]) @ v
    return _mdiag(p).real, v @ (_gap_recip(w) * p)


_eigh = _Fn(_eigh_impl, _eigh_vjp, _eigh_jvp, "rx")


def eigh(x: Tensor, /) -> EighResult:
    """Eigenvalues (ascending, real, (..., M)) and orthonormal (unitary) eigenvectors (columns,
    (..., M, M)) of each symmetric (Hermitian) matrix of ``x``; only its lower triangle is read.

    Returns an :class:`EighResult`. The sign of each eigenvector is arbitrary (as in numpy), so
    the example checks ``x = V diag(w) Vᵀ`` rather than printing ``V``:

    >>> a = cv.Tensor([[2.0, 1.0], [1.0, 2.0]])
    >>> w, v = cv.linalg.eigh(a)
    >>> w.tolist()
    [1.0, 3.0]
    >>> np.allclose(((v * w) @ v.T).numpy(), a.numpy())
    True
    """
    x = _matrix(x, "eigh", square=True)
    w, v = _eigh(_on_host(x))
    return EighResult(_back(w, x), _back(v, x))


def _eigvalsh_impl(a: Tensor) -> Tensor:
    k = _kernels()
    return k.eigvalsh(a) if k else _host("eigvalsh", a, shapes=[a.shape[:-1]], dtype=a.dtype.real_dtype)[0]


def _eigvalsh_vjp(args: tuple, w: Tensor, g: Tensor) -> tuple:
    v = _eigh(args[0])[1]
    return ((v.conj() * g[..., None, :]) @ v.mT,)


def _eigvalsh_jvp(args: tuple, w: Tensor, ts: tuple) -> Tensor:
    v = _eigh(args[0])[1]
    return (v.conj() * (_herm(ts[0]) @ v)).sum(-2).real


_eigvalsh = _Fn(_eigvalsh_impl, _eigvalsh_vjp, _eigvalsh_jvp, "r")


def eigvalsh(x: Tensor, /) -> Tensor:
    """The eigenvalues of each symmetric (Hermitian) matrix of ``x`` (ascending, real, (..., M)).
    Only the lower triangle is read, as in :func:`eigh`.

    >>> cv.linalg.eigvalsh(cv.Tensor([[2.0, 1.0], [1.0, 2.0]])).tolist()
    [1.0, 3.0]
    """
    x = _matrix(x, "eigvalsh", square=True)
    return _back(_eigvalsh(_on_host(x)), x)


# --- eig, eigvals ---------------------------------------------------------------------------------
def _eig_impl(a: Tensor) -> tuple[Tensor, Tensor]:
    k = _kernels()
    if k:
        return k.eig(a)
    c = dt.complex128 if a.dtype in (dt.float64, dt.complex128) else dt.complex64
    return tuple(_host("eig", a, shapes=[a.shape[:-1], a.shape], dtype=c))


def _eig_vjp(args: tuple, outs: tuple, cts: tuple) -> tuple:
    """The adjoint of :func:`_eig_jvp`: with X = V⁻¹ dA V, dλ = diag(X) and dV = V (F∘X) minus
    V times the real part of diag(Vᴴ dV) (unit-norm columns), the cotangent is V⁻ᵀ K Vᵀ with
    K = diag(gλ) + F∘(Vᵀ gV - Z), Z[k, i] = (VᴴV)[i, k] · Re((Vᵀ gV)[i, i])."""
    (w, v), (gw, gv) = outs, cts
    vtg = v.mT @ gv
    z = (_H(v) @ v).mT * _mdiag(vtg).real[..., None, :]
    k = _diag_embed(gw) + _gap_recip(w) * (vtg - z)
    return (_inv(v).mT @ k @ v.mT,)


def _eig_jvp(args: tuple, outs: tuple, ts: tuple) -> tuple:
    w, v = outs
    x = _inv(v) @ ts[0] @ v
    dv = v @ (_gap_recip(w) * x)
    dv = dv - v * (v.conj() * dv).sum(-2).real[..., None, :]
    return _mdiag(x), dv


_eig = _Fn(_eig_impl, _eig_vjp, _eig_jvp, "cc")


def eig(x: Tensor, /) -> EigResult:
    """Eigenvalues (..., M) and right eigenvectors (columns, (..., M, M), unit length) of each
    square matrix of ``x``, not necessarily symmetric: ``x @ v = v * w[..., None, :]``. Results
    are complex (complex64 for float32 input, complex128 for float64). LAPACK backend: LAPACK's
    order, as numpy.linalg.eig, and LinAlgError at realize for nan or inf entries. Kernels
    backend (:mod:`corvid.linalg_kernels_eig`): Schur order, each vector's largest component
    real, nan results for nan or inf entries. Differentiable (see the module notes). Returns an
    :class:`EigResult`.

    >>> a = cv.Tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> w, v = cv.linalg.eig(a)
    >>> np.round(w.numpy(), 4)
    array([-0.3723+0.j,  5.3723+0.j], dtype=complex64)
    >>> np.allclose((a.astype(cv.complex64) @ v).numpy(), (v * w).numpy())
    True
    """
    x = _matrix(x, "eig", square=True)
    w, v = _eig(_on_host(x))
    return EigResult(w, v)


def eigvals(x: Tensor, /) -> Tensor:
    """The eigenvalues of each square matrix of ``x`` (complex, (..., M)): ``eig(x).eigenvalues``
    (the same computation, so the order is the same as ``eig``'s).

    >>> cv.linalg.eigvals(cv.Tensor([[0.0, -1.0], [1.0, 0.0]])).tolist()  # a rotation: ±i
    [1j, -1j]
    """
    x = _matrix(x, "eigvals", square=True)
    return eig(x).eigenvalues


# --- qr ------------------------------------------------------------------------------------------
def _qr_impl(a: Tensor, mode: str) -> tuple[Tensor, Tensor]:
    k = _kernels()
    if k:
        return k.qr(a, mode)
    *batch, m, n = a.shape
    kk = m if mode == "complete" else min(m, n)
    return tuple(_host("qr", a, shapes=[(*batch, m, kk), (*batch, kk, n)], mode=mode))


def _qr_check(a: Tensor, mode: str) -> None:
    if mode == "complete" and a.shape[-2] > a.shape[-1]:
        raise NotImplementedError(f"linalg.qr: mode='complete' of a tall matrix {a.shape} has no derivative (the "
                                  "extra columns of Q are not unique); use mode='reduced'")


def _qr_vjp_square(q: Tensor, r: Tensor, hq: Tensor, hr: Tensor) -> Tensor:
    """The cotangent of A = QR with R square (M >= N), in the conjugated form: ``hq``, ``hr`` and
    the result are the conjugates of JAX-convention cotangents (the real formulas with ᵀ -> ᴴ)."""
    n = hr @ _H(r) - _H(q) @ hq
    up = n.triu(1)
    m = up + _H(up) + _diag_embed(_mdiag(n).real)
    return _H(_solve(r, _H(hq + q @ m)))  # (hQ + Q M) R⁻ᴴ


def _qr_vjp(args: tuple, outs: tuple, cts: tuple) -> tuple:
    (a, mode), (q, r), (gq, gr) = args, outs, cts
    _qr_check(a, mode)
    hq, hr = gq.conj(), gr.conj()
    m = a.shape[-2]
    if a.shape[-1] <= m:
        return _qr_vjp_square(q, r, hq, hr).conj(), None
    y, hr2 = a[..., m:], hr[..., m:]  # wide: A = Q [R1 | R2] with R2 = Qᴴ Y
    gx = _qr_vjp_square(q, r[..., :m], hq + y @ _H(hr2), hr[..., :m])
    return cat([gx, q @ hr2], -1).conj(), None


def _qr_jvp_square(q: Tensor, r: Tensor, da: Tensor) -> tuple[Tensor, Tensor]:
    d = _H(_solve(_H(r), _H(da)))  # dA R⁻¹
    x = _H(q) @ d
    low = x.tril(-1)
    omega = low - _H(low)  # Qᴴ dQ: skew-Hermitian; its imaginary diagonal keeps diag(R) real
    if x.dtype.is_complex:
        omega = omega + _diag_embed(_imag_unit(_mdiag(x).imag))
    upper = x - omega  # dR R⁻¹
    return d - q @ upper, upper @ r


def _qr_jvp(args: tuple, outs: tuple, ts: tuple) -> tuple:
    (a, mode), (q, r), da = args, outs, ts[0]
    _qr_check(a, mode)
    m = a.shape[-2]
    if a.shape[-1] <= m:
        return _qr_jvp_square(q, r, da)
    dq, dr1 = _qr_jvp_square(q, r[..., :m], da[..., :m])
    dr2 = _H(dq) @ a[..., m:] + _H(q) @ da[..., m:]
    return dq, cat([dr1, dr2], -1)


_qr = _Fn(_qr_impl, _qr_vjp, _qr_jvp, "xx")


def qr(x: Tensor, /, *, mode: str = "reduced") -> QRResult:
    """``x = Q R`` for each matrix of ``x`` (..., M, N), K = min(M, N): ``mode="reduced"`` gives Q
    (..., M, K) with orthonormal columns and upper-triangular R (..., K, N); ``"complete"`` gives
    Q (..., M, M) and R (..., M, N). ValueError for another mode. Returns a :class:`QRResult`;
    as numpy's, the signs of R's diagonal are LAPACK's (not made positive).

    >>> x = cv.Tensor([[3.0, 1.0], [4.0, 2.0]])
    >>> q, r = cv.linalg.qr(x)
    >>> np.round(q.numpy(), 4)
    array([[-0.6, -0.8],
           [-0.8,  0.6]], dtype=float32)
    >>> np.round(r.numpy(), 4)
    array([[-5. , -2.2],
           [ 0. ,  0.4]], dtype=float32)
    >>> cv.linalg.qr(cv.ones(4, 2), mode="complete").Q.shape
    (4, 4)
    """
    x = _matrix(x, "qr")
    if mode not in ("reduced", "complete"):
        raise ValueError(f"linalg.qr: mode must be 'reduced' or 'complete', got {mode!r}")
    q, r = _qr(_on_host(x), mode)
    return QRResult(_back(q, x), _back(r, x))


# --- svd, svdvals, pinv ------------------------------------------------------------------------------
def _svd_impl(a: Tensor, full_matrices: bool) -> tuple[Tensor, Tensor, Tensor]:
    k = _kernels()
    if k:
        return k.svd(a, full_matrices)
    *batch, m, n = a.shape
    kk = min(m, n)
    mu, nv = (m, n) if full_matrices else (kk, kk)
    u, s, vh = _host("svd", a, shapes=[(*batch, m, mu), (*batch, kk), (*batch, nv, n)], full_matrices=full_matrices)
    return u, s.real, vh


def _svd_vjp(args: tuple, outs: tuple, cts: tuple) -> tuple:
    a = args[0]
    k = min(a.shape[-2:])
    (u, s, vh), (gu, gs, gvh) = outs, cts
    u, vh, gu, gvh = u[..., :k], vh[..., :k, :], gu[..., :k], gvh[..., :k, :]
    hu, hvh = gu.conj(), gvh.conj()  # conjugated form: the real formulas with ᵀ -> ᴴ
    v, hv = _H(vh), _H(hvh)
    f = _gap_recip(s, squares=True)
    uhu = _H(u) @ hu
    j = f * (uhu - _H(hu) @ u)
    kk = f * (_H(v) @ hv - _H(hv) @ v)
    inner = j * s[..., None, :] + _diag_embed(gs) + s[..., :, None] * kk
    s_inv = _safe_recip(s)
    if u.dtype.is_complex:  # the phase of (u_i, v_i): the imaginary diagonal of Uᴴ gU, divided by s
        inner = inner + _diag_embed(_imag_unit(_mdiag(uhu).imag * s_inv))
    gu_out = hu * s_inv[..., None, :]  # Ū S⁻¹
    gv_out = hv * s_inv[..., None, :]  # V̄ S⁻¹
    ga = (u @ inner @ vh
          + (gu_out - u @ (_H(u) @ gu_out)) @ vh
          + u @ _H(gv_out - v @ (_H(v) @ gv_out)))
    return ga.conj(), None


def _svd_jvp(args: tuple, outs: tuple, ts: tuple) -> tuple:
    (a, full_matrices), (u, s, vh), da = args, outs, ts[0]
    if full_matrices and a.shape[-2] != a.shape[-1]:
        raise NotImplementedError(f"linalg.svd: forward-mode derivative with full_matrices=True of a non-square "
                                  f"matrix {a.shape} (the extra singular vectors are not unique); use "
                                  "full_matrices=False")
    v = _H(vh)
    p = _H(u) @ da @ v
    ph = _H(p)
    f = _gap_recip(s, squares=True)
    s_row, s_col = s[..., None, :], s[..., :, None]
    s_inv = _safe_recip(s)[..., None, :]
    dav, datu = da @ v, _H(da) @ u
    du = u @ (f * (p * s_row + s_col * ph)) + (dav - u @ (_H(u) @ dav)) * s_inv
    dv = v @ (f * (s_col * p + ph * s_row)) + (datu - v @ (_H(v) @ datu)) * s_inv
    if u.dtype.is_complex:  # Im(pᵢᵢ) = sᵢ·Im(uᵢᴴduᵢ - vᵢᴴdvᵢ): put the phase change on u
        du = du + u * _imag_unit(_mdiag(p).imag[..., None, :] * s_inv)
    return du, _mdiag(p).real, _H(dv)


_svd = _Fn(_svd_impl, _svd_vjp, _svd_jvp, "xrx")


def svd(x: Tensor, /, *, full_matrices: bool = True) -> SVDResult:
    """``x = U diag(S) Vh`` for each matrix of ``x`` (..., M, N), K = min(M, N): singular values S
    (..., K) descending (real); U (..., M, M) and Vh (..., N, N) when ``full_matrices``, else U
    (..., M, K) and Vh (..., K, N). Returns an :class:`SVDResult`; the signs of the singular
    vectors are arbitrary, as in numpy.

    >>> x = cv.Tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    >>> u, s, vh = cv.linalg.svd(x, full_matrices=False)
    >>> u.shape, s.shape, vh.shape
    ((3, 2), (2,), (2, 2))
    >>> np.allclose(((u * s) @ vh).numpy(), x.numpy(), atol=1e-5)
    True
    >>> cv.linalg.svd(x).U.shape  # full_matrices=True
    (3, 3)
    """
    x = _matrix(x, "svd")
    u, s, vh = _svd(_on_host(x), bool(full_matrices))
    return SVDResult(_back(u, x), _back(s, x), _back(vh, x))


def _svdvals_impl(a: Tensor) -> Tensor:
    k = _kernels()
    if k:
        return k.svdvals(a)
    return _host("svdvals", a, shapes=[a.shape[:-2] + (min(a.shape[-2:]),)], dtype=a.dtype.real_dtype)[0]


def _svdvals_vjp(args: tuple, s: Tensor, g: Tensor) -> tuple:
    u, _, vh = _svd(args[0], False)
    return (((u * g[..., None, :]) @ vh).conj(),)


def _svdvals_jvp(args: tuple, s: Tensor, ts: tuple) -> Tensor:
    u, _, vh = _svd(args[0], False)
    return (u.conj() * (ts[0] @ _H(vh))).sum(-2).real


_svdvals = _Fn(_svdvals_impl, _svdvals_vjp, _svdvals_jvp, "r")


def svdvals(x: Tensor, /) -> Tensor:
    """The singular values of each matrix of ``x`` (..., M, N), descending, shape (..., min(M, N)),
    real (float32 for complex64).

    >>> cv.linalg.svdvals(cv.Tensor([[3.0, 0.0], [0.0, -4.0]])).tolist()
    [4.0, 3.0]
    """
    x = _matrix(x, "svdvals")
    return _back(_svdvals(_on_host(x)), x)


def _pinv_impl(a: Tensor, rtol: float) -> Tensor:
    k = _kernels()
    if k:
        return k.pinv(a, rtol)
    return _host("pinv", a, shapes=[a.shape[:-2] + (a.shape[-1], a.shape[-2])], rtol=rtol)[0]


def _pinv_vjp(args: tuple, p: Tensor, g: Tensor) -> tuple:
    a = args[0]
    h = g.conj()  # conjugated form: the real formula with ᵀ -> ᴴ
    ht = _H(h)
    left = ht @ p @ _H(p)  # (I - A P) Gᴴ P Pᴴ
    right = _H(p) @ p @ ht  # Pᴴ P Gᴴ (I - P A)
    ga = -(_H(p) @ h @ _H(p)) + left - a @ (p @ left) + right - (right @ p) @ a
    return ga.conj(), None


def _pinv_jvp(args: tuple, p: Tensor, ts: tuple) -> Tensor:
    a, da = args[0], ts[0]
    dat = _H(da)
    left = p @ _H(p) @ dat  # P Pᴴ dAᴴ (I - A P)
    right = dat @ _H(p) @ p  # (I - P A) dAᴴ Pᴴ P
    return -(p @ da @ p) + left - (left @ a) @ p + right - p @ (a @ right)


_pinv = _Fn(_pinv_impl, _pinv_vjp, _pinv_jvp, "x")


def _default_rtol(x: Tensor, rtol: float | None) -> float:
    return max(x.shape[-2:]) * dt.finfo(_float_dtype(x).real_dtype).eps if rtol is None else float(rtol)


def pinv(x: Tensor, /, *, rtol: float | Tensor | None = None) -> Tensor:
    """The Moore-Penrose pseudo-inverse of each matrix of ``x`` (..., M, N), shape (..., N, M).
    Singular values at most ``rtol`` times the largest count as zero; ``rtol`` defaults to
    ``max(M, N) · eps`` of the result dtype, and is a float or a tensor that broadcasts to the stack's
    shape (...): a cutoff per matrix (ValueError for one that does not).

    >>> pinv(asarray([[2.0, 0.0], [0.0, 1e-9]]), rtol=asarray(1e-6)).tolist()
    [[0.5, 0.0], [0.0, 0.0]]
    """
    x = _matrix(x, "pinv")
    if isinstance(rtol, Tensor):
        batch = x.shape[:-2]
        if not _broadcasts_to(rtol.shape, batch):
            raise ShapeError(f"linalg.pinv: rtol of shape {rtol.shape} does not broadcast to the stack shape "
                             f"{batch} of x {x.shape}")
        if x.size == 0:  # no matrix, or no singular value: nothing to cut
            rtol = None
        elif rtol.size == 1:
            rtol = float(rtol.reshape(()))
        else:
            return _pinv_per_matrix(x, rtol)
    return _back(_pinv(_on_host(x), _default_rtol(x, rtol)), x)


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def _pinv_per_matrix(x: Tensor, rtol: Tensor) -> Tensor:
    """``pinv`` with a cutoff per matrix, from the SVD: ``V diag(1/s) Uᴴ`` over the kept ``s``
    (differentiable through the SVD's rules)."""
    u, s, vh = svd(x, full_matrices=False)
    keep = s > s.max(-1, keepdims=True) * rtol.astype(s.dtype)[..., None]
    inv_s = where(keep, 1 / where(keep, s, 1.0), 0.0)
    return _H(vh) @ (inv_s[..., :, None] * _H(u))


def lstsq(x1: Tensor, x2: Tensor, /, *, rtol: float | None = None) -> Tensor:
    """The least-squares (minimum-norm) solution ``X`` of ``x1 @ X ≈ x2`` (a corvid extension):
    ``pinv(x1, rtol=rtol) @ x2``. ``x1`` is (..., M, N); ``x2`` is (..., M, K) or (M,). Unlike
    ``numpy.linalg.lstsq``, it returns only the solution (no residuals, rank or singular values).

    A line ``c0 + c1 t`` through three points:

    >>> t = cv.Tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
    >>> c = cv.linalg.lstsq(t, cv.Tensor([1.0, 2.0, 4.0]))
    >>> [round(v, 4) for v in c.tolist()]
    [0.8333, 1.5]
    """
    a = _matrix(x1, "lstsq")
    b = x2 if isinstance(x2, Tensor) else asarray(x2)
    vector = b.ndim == 1
    b = b[:, None] if vector else b
    if b.ndim < 2 or b.shape[-2] != a.shape[-2]:
        raise ShapeError(f"linalg.lstsq: x2 of shape {x2.shape} does not match x1 of shape {a.shape} "
                         "(need (..., M, K) or (M,))")
    out = pinv(a, rtol=rtol) @ b
    return out[..., 0] if vector else out


def matrix_rank(x: Tensor, /, *, rtol: float | Tensor | None = None) -> Tensor:
    """The number of singular values above ``rtol`` times the largest, per matrix (int64, shape
    (...)). ``rtol`` (a float, or a tensor broadcasting against (...)) defaults to
    ``max(M, N) · eps``.

    >>> cv.linalg.matrix_rank(cv.Tensor([[1.0, 2.0], [2.0, 4.0]])).item()
    1
    >>> cv.linalg.matrix_rank(cv.eye(3)).item()
    3
    """
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
    both have size 3 there.

    >>> cv.linalg.cross(cv.Tensor([1.0, 0.0, 0.0]), cv.Tensor([0.0, 1.0, 0.0])).tolist()
    [0.0, 0.0, 1.0]
    """
    a = x1 if isinstance(x1, Tensor) else asarray(x1)
    b = x2 if isinstance(x2, Tensor) else asarray(x2)
    shape = broadcast_shapes(a.shape, b.shape)
    ax = normalize_axis(axis, len(shape))
    for t in (a, b):
        if t.ndim < len(shape) - ax or t.shape[ax - len(shape)] != 3:
            raise ShapeError(f"linalg.cross: axis {axis} must have size 3 in both operands, got shapes "
                             f"{a.shape} and {b.shape}")
    a, b = moveaxis(a.broadcast_to(shape), ax, -1), moveaxis(b.broadcast_to(shape), ax, -1)
    c = [a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
         a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
         a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]]
    return moveaxis(stack(c, -1), -1, ax)


def diagonal(x: Tensor, /, *, offset: int = 0) -> Tensor:
    """The diagonal of each matrix (..., M, N) as a last axis; ``offset > 0`` above the main one.
    Unlike :func:`corvid.diagonal` (numpy's), always the last two axes (the Array API's).

    >>> m = cv.arange(1, 10).reshape(3, 3)
    >>> cv.linalg.diagonal(m).tolist(), cv.linalg.diagonal(m, offset=1).tolist()
    ([1, 5, 9], [2, 6])
    """
    return _diagonal(_matrix(x, "diagonal"), offset, -2, -1)


def trace(x: Tensor, /, *, offset: int = 0, dtype: DTypeLike | None = None) -> Tensor:
    """The sum of each matrix's diagonal, shape (...); integers accumulate as in ``sum``. Unlike
    :func:`corvid.trace` (numpy's), always over the last two axes (the Array API's).

    >>> cv.linalg.trace(cv.arange(1, 10).reshape(3, 3)).item()
    15
    >>> cv.linalg.trace(cv.stack([cv.eye(2), 3 * cv.ones(2, 2)])).tolist()
    [2.0, 6.0]
    """
    return diagonal(x, offset=offset).sum(-1, dtype=dtype)


def outer(x1: Tensor, x2: Tensor, /) -> Tensor:
    """The outer product of two vectors (N,) and (M,): (N, M). ValueError for other ranks.

    >>> cv.linalg.outer(cv.Tensor([1, 2]), cv.Tensor([1, 10, 100])).tolist()
    [[1, 10, 100], [2, 20, 200]]
    """
    a = x1 if isinstance(x1, Tensor) else asarray(x1)
    b = x2 if isinstance(x2, Tensor) else asarray(x2)
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(f"linalg.outer: needs two vectors, got shapes {a.shape} and {b.shape}")
    return a[:, None] * b[None, :]


def matrix_power(x: Tensor, n: int, /) -> Tensor:
    """Each square matrix of ``x`` raised to the integer ``n`` by repeated squaring: the identity
    for 0 (in ``x``'s dtype), powers of the inverse for ``n < 0``. TypeError for a non-int ``n``.

    >>> m = cv.Tensor([[1.0, 1.0], [0.0, 1.0]])
    >>> cv.linalg.matrix_power(m, 3).tolist()
    [[1.0, 3.0], [0.0, 1.0]]
    >>> cv.linalg.matrix_power(m, -1).tolist()
    [[1.0, -1.0], [0.0, 1.0]]
    """
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


def _magnitudes(x: Tensor) -> Tensor:
    """``|x|`` for complex ``x`` (real dtype), else ``x`` in its float dtype."""
    return x.abs() if x.dtype.is_complex else x.astype(_float_dtype(x))


def vector_norm(x: Tensor, /, *, axis: int | Sequence[int] | None = None, keepdims: bool = False,
                ord: float = 2) -> Tensor:  # noqa: A002  (the standard's name)
    """The ``ord``-norm over ``axis`` (all axes when None; a tuple reduces several): ``inf`` the
    largest ``|x|``, ``-inf`` the smallest, 0 the number of non-zeros, else ``(Σ|x|^ord)^(1/ord)``.
    Result in a real float dtype (ints in the default float, complex64 in float32). ValueError for
    a string ``ord``.

    >>> v = cv.Tensor([3.0, 0.0, -4.0])
    >>> cv.linalg.vector_norm(v).item(), cv.linalg.vector_norm(v, ord=1).item()
    (5.0, 7.0)
    >>> cv.linalg.vector_norm(v, ord=float("inf")).item(), cv.linalg.vector_norm(v, ord=0).item()
    (4.0, 2.0)
    >>> cv.linalg.vector_norm(cv.Tensor([[3.0, 4.0], [6.0, 8.0]]), axis=1).tolist()
    [5.0, 10.0]
    """
    x = x if isinstance(x, Tensor) else asarray(x)
    if isinstance(ord, str) or not isinstance(ord, (int, float, np.integer, np.floating)) or isinstance(ord, bool):
        raise ValueError(f"linalg.vector_norm: ord must be a number (inf, -inf, 0 or any other), got {ord!r}")
    x = _magnitudes(x)
    axes = tuple(range(x.ndim)) if axis is None else (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(sorted({normalize_axis(a, x.ndim) for a in axes}))
    if ord == math.inf:
        return x.abs().max(axis=axes, keepdims=keepdims)
    if ord == -math.inf:
        return x.abs().min(axis=axes, keepdims=keepdims)
    if ord == 0:
        return x.ne(0).astype(x.dtype).sum(axes, keepdims)
    if ord == 1:
        return x.abs().sum(axes, keepdims)
    if ord == 2:
        return _root((x * x).sum(axes, keepdims), 2)
    return _root((x.abs() ** ord).sum(axes, keepdims), ord)


def _valid_matrix_ord(ord: Any) -> bool:  # noqa: A002
    if isinstance(ord, str):
        return ord in ("fro", "nuc")
    if isinstance(ord, bool) or not isinstance(ord, (int, float, np.integer, np.floating)):
        return False
    return ord in (1, -1, 2, -2, math.inf, -math.inf)


def matrix_norm(x: Tensor, /, *, keepdims: bool = False, ord: float | str = "fro") -> Tensor:  # noqa: A002
    """A norm of each matrix (..., M, N): ``"fro"`` (Frobenius), ``"nuc"`` (sum of singular values),
    2 / -2 (largest / smallest singular value), 1 / -1 (largest / smallest column sum of ``|x|``),
    ``inf`` / ``-inf`` (largest / smallest row sum). Shape (...), or (..., 1, 1) with ``keepdims``;
    a real float dtype. ValueError for another ``ord``.

    >>> a = cv.Tensor([[1.0, -2.0], [3.0, 4.0]])
    >>> cv.linalg.matrix_norm(a, ord=1).item(), cv.linalg.matrix_norm(a, ord=float("inf")).item()
    (6.0, 7.0)
    >>> d = cv.Tensor([[3.0, 0.0], [0.0, 4.0]])
    >>> cv.linalg.matrix_norm(d).item(), cv.linalg.matrix_norm(d, ord="nuc").item()
    (5.0, 7.0)
    """
    x = _matrix(x, "matrix_norm")
    if not _valid_matrix_ord(ord):
        raise ValueError(f"linalg.matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got {ord!r}")
    if ord in ("nuc", 2, -2):
        s = svdvals(x)
        out = s.sum(-1) if ord == "nuc" else s.max(axis=-1) if ord == 2 else s.min(axis=-1)
    else:
        m = _magnitudes(x)
        if ord == "fro":
            out = _root((m * m).sum((-2, -1)), 2)
        else:
            sums = m.abs().sum(-2 if abs(ord) == 1 else -1)
            out = sums.max(axis=-1) if ord > 0 else sums.min(axis=-1)
    return out[..., None, None] if keepdims else out


def norm(x: Tensor, /, ord: float | str | None = None, axis: int | Sequence[int] | None = None,  # noqa: A002
         keepdims: bool = False) -> Tensor:
    """numpy.linalg.norm: a vector or a matrix norm, chosen by ``axis``.

    * ``axis`` an int (or a 1-tuple): the vector norm :func:`vector_norm` of order ``ord`` (2 when
      None) along it;
    * ``axis`` a pair: the matrix norm :func:`matrix_norm` of order ``ord`` ('fro' when None) of
      the matrices spanned by those two axes (any two distinct axes, in that order);
    * ``axis`` None: with ``ord`` None, the 2-norm of all elements whatever the rank; otherwise
      ``x`` must be 1-D (vector norm) or 2-D (matrix norm).

    ``keepdims`` keeps the reduced axes as size 1. ValueError for a bad ``axis`` or an ``ord``
    the chosen kind of norm does not have (a string for a vector, 3 for a matrix, …).

    >>> cv.linalg.norm(cv.Tensor([3.0, -4.0])).item()
    5.0
    >>> m = cv.Tensor([[3.0, 4.0], [0.0, 0.0]])
    >>> cv.linalg.norm(m, axis=1).tolist()  # a vector norm per row
    [5.0, 0.0]
    >>> cv.linalg.norm(m, ord=1).item()  # 2-D, ord given: the matrix 1-norm (largest column sum)
    4.0
    """
    x = x if isinstance(x, Tensor) else asarray(x)
    if axis is None:
        if ord is None:
            out = vector_norm(x)
            return out.reshape((1,) * x.ndim) if keepdims else out
        if x.ndim not in (1, 2):
            raise ShapeError(f"linalg.norm: with ord={ord!r} and axis=None, x must be 1-D or 2-D, got shape {x.shape}")
        axes = tuple(range(x.ndim))
    else:
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis) if isinstance(axis, (tuple, list)) \
            else (axis,)
        if not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in axes):
            raise TypeError(f"linalg.norm: axis must be an int or a tuple of ints, got {axis!r}")
        axes = tuple(normalize_axis(a, x.ndim) for a in axes)
    if len(axes) == 1:
        if isinstance(ord, str):
            raise ValueError(f"linalg.norm: invalid norm order {ord!r} for vectors")
        return vector_norm(x, axis=axes[0], keepdims=keepdims, ord=2 if ord is None else ord)
    if len(axes) != 2:
        raise ValueError(f"linalg.norm: axis must name 1 or 2 axes, got {axis!r}")
    if axes[0] == axes[1]:
        raise ValueError(f"linalg.norm: duplicate axes {axis!r}")
    ord = "fro" if ord is None else ord
    if not _valid_matrix_ord(ord):
        raise ValueError(f"linalg.norm: invalid norm order {ord!r} for matrices")
    out = matrix_norm(moveaxis(x, axes, (-2, -1)), ord=ord)
    if keepdims:
        shape = list(x.shape)
        for a in axes:
            shape[a] = 1
        out = out.reshape(tuple(shape))
    return out


def cond(x: Tensor, /, p: float | str | None = None) -> Tensor:
    """The condition number of each matrix of ``x`` (..., M, N) in the norm ``p`` (numpy.linalg.cond):
    for ``p`` None, 2 or -2 the ratio of the largest to the smallest singular value (-2: its
    reciprocal), any shape; for 'fro', 'nuc', 1, -1, inf or -inf, ``norm(x, p) · norm(inv(x), p)``
    of square matrices. A singular matrix gives inf (nan only where ``x`` has a nan). Shape
    (...), a real float dtype. ValueError for another ``p`` or a non-square matrix with such a ``p``.

    >>> a = cv.Tensor([[2.0, 0.0], [0.0, 0.5]])
    >>> cv.linalg.cond(a).item(), cv.linalg.cond(a, 1).item()
    (4.0, 4.0)
    >>> cv.linalg.cond(cv.zeros(2, 2)).item()
    inf
    """
    x = _matrix(x, "cond")
    if p is None or (not isinstance(p, str) and not isinstance(p, bool) and p in (2, -2)):
        s = svdvals(x)
        big, small = s.max(axis=-1), s.min(axis=-1)
        r = big / small if p != -2 else small / big
    else:
        if not _valid_matrix_ord(p):
            raise ValueError(f"linalg.cond: p must be None, 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got {p!r}")
        x = _matrix(x, "cond", square=True)
        xi = _inv_or_nan(_on_host(x))
        r = matrix_norm(x, ord=p) * _back(matrix_norm(xi, ord=p), x)
    bad = _magnitudes(x).isnan().any((-2, -1))
    return where(r.isnan() & ~bad, math.inf, r)

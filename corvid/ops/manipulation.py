"""Array manipulation composed from movement ops: roll, tile, repeat, diff, tril/triu, meshgrid,
moveaxis, rot90, broadcast_arrays, expand_dims, unstack, diagonal/diag/trace, frac, nan_to_num.

Everything here is a view (reshape, permute, expand, pad, shrink, flip) plus at most a ``where``
or a subtraction, so autodiff, jvp and vmap need no rules of their own. The one exception is
``repeat`` with per-element counts: its output length depends on the counts, which are read as
Python ints (a Tensor of counts is realized), and the copy is one gather.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import ShapeError
from .. import dtype as dt
from ..graph.node import Op, node
from .elementwise import where
from .movement import cat, normalize_axis

if TYPE_CHECKING:
    from ..tensor import Tensor

__all__ = ["roll", "tile", "repeat", "diff", "tril", "triu", "meshgrid", "moveaxis", "swapaxes", "rot90", "frac",
           "broadcast_arrays", "expand_dims", "unstack", "nan_to_num", "diagonal", "diag", "trace"]


def _tensor(x: Any) -> Tensor:
    from ..tensor import Tensor

    return x if isinstance(x, Tensor) else Tensor(x)


def _iota(n: int, like: Tensor) -> Tensor:
    """0, 1, ..., n-1 as int64, computed inside the kernel that reads it."""
    return like._new(node(Op.IOTA, (), None, dt.int64, (n,)))


def axis_of(axis: int, ndim: int) -> int:
    """``normalize_axis`` that also accepts 0 and -1 for a 0-d tensor (as torch does for scans and sorts)."""
    return 0 if ndim == 0 and axis in (0, -1) and not isinstance(axis, bool) else normalize_axis(axis, ndim)


def _axes_arg(axis: int | Sequence[int], ndim: int, what: str = "axis") -> list[int]:
    items = [axis] if isinstance(axis, int) else list(axis)
    out = [normalize_axis(a, ndim, what) for a in items]
    if len(set(out)) != len(out):
        raise ValueError(f"repeated {what} in {axis}")
    return out


def take_at(x: Tensor, index: Tensor, axis: int) -> Tensor:
    """``x`` gathered along ``axis`` at the int ``index`` (1-D, values in range): one GATHER, an
    indirect load, so values come back bit-exactly (``-0.0`` and nan included) in O(len(index)),
    and the gradient is a scatter-add."""
    from .indexing import _take

    return _take(x, index.astype(dt.int64), normalize_axis(axis, x.ndim))


def moveaxis(x: Tensor, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
    """Move axes ``source`` to positions ``destination`` (numpy semantics; ints or equal-length sequences).

    >>> moveaxis(cv.zeros(2, 3, 4), 0, -1).shape
    (3, 4, 2)
    """
    x = _tensor(x)
    src = _axes_arg(source, x.ndim, "source axis")
    dst = _axes_arg(destination, x.ndim, "destination axis")
    if len(src) != len(dst):
        raise ValueError(f"moveaxis: source {source} and destination {destination} have different lengths")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return x.permute(order) if x.ndim else x


def swapaxes(x: Tensor, axis1: int, axis2: int) -> Tensor:
    """Exchange two axes (a view), as ``numpy.swapaxes``; the method form is
    :meth:`Tensor.transpose <corvid.Tensor.transpose>`.

    >>> cv.swapaxes(cv.zeros(2, 3, 4), 0, 2).shape
    (4, 3, 2)
    """
    return _tensor(x).transpose(axis1, axis2)


def expand_dims(x: Tensor, axis: int | Sequence[int] = 0) -> Tensor:
    """Insert size-1 axes so that they sit at ``axis`` in the result (Array API; an int or a tuple,
    negative counting from the end of the result). A view; ``x.expand_dims(axis)`` (an int) is
    ``x.unsqueeze(axis)``.

    >>> x = cv.Tensor([1, 2])
    >>> cv.expand_dims(x, 0).shape, cv.expand_dims(x, -1).shape
    ((1, 2), (2, 1))
    >>> cv.expand_dims(cv.zeros(2, 3), (0, 3)).shape
    (1, 2, 3, 1)
    """
    x = _tensor(x)
    axes = sorted(_axes_arg(axis, x.ndim + (1 if isinstance(axis, int) else len(axis))))
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return x.reshape(tuple(shape))


def broadcast_arrays(*tensors: Tensor) -> tuple[Tensor, ...]:
    """Every input broadcast to their common shape (views), a tuple as the Array API and numpy 2
    give it. ValueError if the shapes conflict.

    >>> a, b = cv.broadcast_arrays(cv.Tensor([[1], [2]]), cv.Tensor([10, 20, 30]))
    >>> a.tolist(), b.tolist()
    ([[1, 1, 1], [2, 2, 2]], [[10, 20, 30], [10, 20, 30]])
    """
    from ..tensor import broadcast_shapes

    ts = [_tensor(t) for t in tensors]
    shape = broadcast_shapes(*(t.shape for t in ts))
    return tuple(t.broadcast_to(shape) for t in ts)


def unstack(x: Tensor, axis: int = 0) -> tuple[Tensor, ...]:
    """The slices of ``x`` along ``axis``, each without that axis (inverse of ``stack``), as a
    tuple of views. ValueError for a 0-d tensor.

    >>> x = cv.Tensor([[1, 2], [3, 4]])
    >>> [t.tolist() for t in cv.unstack(x)]
    [[1, 2], [3, 4]]
    >>> [t.tolist() for t in cv.unstack(x, axis=1)]
    [[1, 3], [2, 4]]
    """
    x = _tensor(x)
    if x.ndim == 0:
        raise ValueError("unstack needs at least 1 dimension, got a 0-d tensor")
    a = normalize_axis(axis, x.ndim)
    return tuple(p.squeeze(a) for p in x.split(1, a)) if x.shape[a] else ()


def roll(x: Tensor, shift: int | Sequence[int], axis: int | Sequence[int] | None = None) -> Tensor:
    """Shift elements by ``shift`` along ``axis``, wrapping around (numpy semantics; the flattened
    tensor if ``axis`` is None). ``shift`` and ``axis`` may be equal-length sequences.

    >>> cv.roll(cv.arange(5), 2).tolist(), cv.roll(cv.arange(5), -1).tolist()
    ([3, 4, 0, 1, 2], [1, 2, 3, 4, 0])
    >>> m = cv.arange(6).reshape(2, 3)
    >>> cv.roll(m, 1, axis=1).tolist()
    [[2, 0, 1], [5, 3, 4]]
    >>> cv.roll(m, 1).tolist()  # axis=None: the flattened tensor, reshaped back
    [[5, 0, 1], [2, 3, 4]]
    """
    x = _tensor(x)
    if axis is None:
        if not isinstance(shift, int):
            raise ValueError("roll: with axis=None, shift must be a single int")
        return roll(x.reshape(-1), shift, 0).reshape(x.shape)
    shifts = [shift] if isinstance(shift, int) else list(shift)
    axes = [axis] if isinstance(axis, int) else list(axis)
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise ValueError(f"roll: shift {shift} and axis {axis} have different lengths")
    for s, a in zip(shifts, axes):
        a = normalize_axis(a, x.ndim)
        n = x.shape[a] if x.ndim else 1
        if n == 0 or x.ndim == 0 or int(s) % n == 0:
            continue
        k = int(s) % n
        head, tail = x.split([n - k, k], a)
        x = cat([tail, head], a)
    return x


def tile(x: Tensor, reps: int | Sequence[int]) -> Tensor:
    """``x`` repeated ``reps[i]`` times along each axis (numpy semantics: ``reps`` and the shape are
    left-padded with ones to the same length). A broadcast plus a reshape: no copy until stored.

    >>> cv.tile(cv.Tensor([1, 2]), 3).tolist()
    [1, 2, 1, 2, 1, 2]
    >>> cv.tile(cv.Tensor([1, 2]), (2, 2)).tolist()
    [[1, 2, 1, 2], [1, 2, 1, 2]]
    """
    x = _tensor(x)
    r = [reps] if isinstance(reps, int) else [int(v) for v in reps]
    if any(v < 0 for v in r):
        raise ValueError(f"tile: reps must be non-negative, got {reps}")
    nd = max(len(r), x.ndim)
    r = [1] * (nd - len(r)) + r
    shape = (1,) * (nd - x.ndim) + x.shape
    inter = tuple(v for s in shape for v in (1, s))
    big = tuple(v for rep, s in zip(r, shape) for v in (rep, s))
    return x.reshape(inter).expand(big).reshape(tuple(rep * s for rep, s in zip(r, shape)))


def repeat(x: Tensor, repeats: Any, axis: int | None = None) -> Tensor:
    """Each element repeated ``repeats`` times along ``axis`` (numpy semantics; the flattened tensor if
    ``axis`` is None). ``repeats`` is an int or one count per element along the axis (a sequence, a
    numpy array or a Tensor, which is realized: the output length depends on it).

    ValueError for negative counts or a count list of the wrong length.

    >>> repeat(cv.Tensor([1, 2]), [1, 3]).tolist()
    [1, 2, 2, 2]
    """
    from ..tensor import Tensor

    x = _tensor(x)
    if axis is None:
        x, axis = x.reshape(-1), 0
    a = normalize_axis(axis, x.ndim)
    if x.ndim == 0:
        x, a = x.reshape(1), 0
    n = x.shape[a]
    counts = np.asarray(repeats.numpy() if isinstance(repeats, Tensor) else repeats)
    if counts.dtype.kind not in "iub" or counts.ndim > 1:
        raise ValueError(f"repeat: repeats must be an int or a 1-D sequence of ints, got {repeats!r}")
    if (counts < 0).any():
        raise ValueError(f"repeat: repeats must be non-negative, got {repeats!r}")
    if counts.size == 1:
        r = int(counts.reshape(()))
        y = x.unsqueeze(a + 1)
        shape = list(y.shape)
        shape[a + 1] = r
        return y.expand(tuple(shape)).reshape(x.shape[:a] + (n * r,) + x.shape[a + 1:])
    if counts.size != n:
        raise ShapeError(f"repeat: got {counts.size} counts for axis {a} of size {n} (shape {x.shape})")
    index = np.repeat(np.arange(n), counts)
    return take_at(x, Tensor(index, device=x.device), a)


def diff(x: Tensor, n: int = 1, axis: int = -1, prepend: Any = None, append: Any = None) -> Tensor:
    """The ``n``-th discrete difference ``x[i+1] - x[i]`` along ``axis`` (numpy semantics, with
    ``prepend``/``append`` joined first; scalars broadcast to one slice). For bool tensors the
    difference is ``!=``, as in numpy. ValueError for negative ``n`` or a 0-d tensor.

    >>> x = cv.Tensor([1, 4, 9, 16])
    >>> cv.diff(x).tolist(), cv.diff(x, n=2).tolist()
    ([3, 5, 7], [2, 2])
    >>> cv.diff(cv.Tensor([1, 4, 9]), prepend=0).tolist()
    [1, 3, 5]
    """
    x = _tensor(x)
    if n < 0:
        raise ValueError(f"diff: order n must be non-negative, got {n}")
    if x.ndim == 0:
        raise ValueError("diff needs at least 1 dimension, got a 0-d tensor")
    a = normalize_axis(axis, x.ndim)
    parts = []
    if prepend is not None:
        parts.append(_slice_like(x, prepend, a))
    parts.append(x)
    if append is not None:
        parts.append(_slice_like(x, append, a))
    y = cat(parts, a) if len(parts) > 1 else x
    for _ in range(n):
        if y.shape[a] == 0:
            break
        hi = y.shrink([(1, s) if i == a else (0, s) for i, s in enumerate(y.shape)])
        lo = y.shrink([(0, s - 1) if i == a else (0, s) for i, s in enumerate(y.shape)])
        y = hi.ne(lo) if y.dtype.is_bool else hi - lo
    return y


def _slice_like(x: Tensor, v: Any, axis: int) -> Tensor:
    """``prepend``/``append``: a scalar (weak, as in arithmetic) broadcasts to one slice along ``axis``."""
    from ..tensor import result_type

    t = x._const(v, result_type(x, v), ()) if isinstance(v, (bool, int, float)) else _tensor(v)
    if t.ndim == 0:
        shape = list(x.shape)
        shape[axis] = 1
        return t.broadcast_to(tuple(shape))
    return t


def _tri_mask(x: Tensor, k: int, lower: bool) -> Tensor:
    if x.ndim < 2:
        raise ShapeError(f"{'tril' if lower else 'triu'} needs at least 2 dimensions, got shape {x.shape}")
    r, c = x.shape[-2:]
    d = _iota(c, x).reshape(1, c) - _iota(r, x).reshape(r, 1)  # column - row
    return d <= k if lower else d >= k


def tril(x: Tensor, k: int = 0) -> Tensor:
    """The lower triangle of the last two axes: elements with ``col - row <= k`` kept, others 0.
    ValueError for fewer than 2 dimensions.

    >>> m = cv.arange(1, 10).reshape(3, 3)
    >>> cv.tril(m).tolist()
    [[1, 0, 0], [4, 5, 0], [7, 8, 9]]
    >>> cv.tril(m, -1).tolist()
    [[0, 0, 0], [4, 0, 0], [7, 8, 0]]
    """
    x = _tensor(x)
    return where(_tri_mask(x, k, True), x, x._const(0, x.dtype, ()))


def triu(x: Tensor, k: int = 0) -> Tensor:
    """The upper triangle of the last two axes: elements with ``col - row >= k`` kept, others 0.
    ValueError for fewer than 2 dimensions.

    >>> m = cv.arange(1, 10).reshape(3, 3)
    >>> cv.triu(m).tolist()
    [[1, 2, 3], [0, 5, 6], [0, 0, 9]]
    >>> cv.triu(m, 1).tolist()
    [[0, 2, 3], [0, 0, 6], [0, 0, 0]]
    """
    x = _tensor(x)
    return where(_tri_mask(x, k, False), x, x._const(0, x.dtype, ()))


def meshgrid(*tensors: Tensor, indexing: str = "xy") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-D tensors (numpy semantics), a tuple as the Array API and numpy 2
    give it. ``indexing='xy'`` swaps the first two output axes (Cartesian), ``'ij'`` keeps input
    order (matrix). Outputs are broadcast views.

    >>> xs, ys = cv.meshgrid(cv.Tensor([1, 2, 3]), cv.Tensor([10, 20]))
    >>> xs.tolist(), ys.tolist()
    ([[1, 2, 3], [1, 2, 3]], [[10, 10, 10], [20, 20, 20]])
    >>> [t.shape for t in cv.meshgrid(cv.Tensor([1, 2, 3]), cv.Tensor([10, 20]), indexing="ij")]
    [(3, 2), (3, 2)]
    """
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    ts = [_tensor(t) for t in tensors]
    for t in ts:
        if t.ndim != 1:
            raise ShapeError(f"meshgrid: inputs must be 1-D, got shape {t.shape}")
    shape = [t.shape[0] for t in ts]
    if indexing == "xy" and len(ts) >= 2:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, t in enumerate(ts):
        pos = (1 - i if i < 2 else i) if indexing == "xy" and len(ts) >= 2 else i
        view = [1] * len(ts)
        view[pos] = t.shape[0]
        out.append(t.reshape(tuple(view)).expand(tuple(shape)))
    return tuple(out)


def rot90(x: Tensor, k: int = 1, axes: Sequence[int] = (0, 1)) -> Tensor:
    """Rotate by 90 degrees ``k`` times in the plane ``axes``, from the first axis toward the second
    (numpy semantics: counterclockwise for a matrix shown with row 0 on top). ValueError unless
    ``axes`` names two different axes.

    >>> m = cv.Tensor([[1, 2], [3, 4]])
    >>> cv.rot90(m).tolist(), cv.rot90(m, -1).tolist()
    ([[2, 4], [1, 3]], [[3, 1], [4, 2]])
    """
    x = _tensor(x)
    if len(axes) != 2:
        raise ValueError(f"rot90: axes must name exactly 2 axes, got {axes}")
    a, b = (normalize_axis(v, x.ndim) for v in axes)
    if a == b:
        raise ValueError(f"rot90: axes must be different, got {axes}")
    k %= 4
    if k == 0:
        return x
    if k == 2:
        return x.flip((a, b))
    if k == 1:
        return x.flip(b).transpose(a, b)
    return x.transpose(a, b).flip(b)


def frac(x: Tensor) -> Tensor:
    """The fractional part ``x - trunc(x)`` (sign of ``x``, as ``torch.frac``); TypeError for
    integer or bool tensors.

    >>> cv.frac(cv.Tensor([1.5, -1.25, 2.0])).tolist()
    [0.5, -0.25, 0.0]
    """
    x = _tensor(x)
    if not x.dtype.is_float:
        raise TypeError(f"frac is not supported for {x.dtype.name} tensors (needs float)")
    return x - x.trunc()


def nan_to_num(x: Tensor, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
    """nan replaced by ``nan``, +inf by ``posinf`` and -inf by ``neginf`` (default: the dtype's largest
    and smallest finite values, as numpy). Integer and bool tensors come back unchanged.

    >>> x = cv.Tensor([float("nan"), float("inf"), -float("inf"), 1.0])
    >>> cv.nan_to_num(x, posinf=9.0, neginf=-9.0).tolist()
    [0.0, 9.0, -9.0, 1.0]
    >>> cv.nan_to_num(x).tolist()[1] == cv.finfo(cv.float32).max
    True
    """
    x = _tensor(x)
    if not x.dtype.is_float:
        return x
    info = dt.finfo(x.dtype)
    hi = float(info.max) if posinf is None else posinf
    lo = float(info.min) if neginf is None else neginf
    out = where(x.isnan(), x._const(nan, x.dtype, ()), x)
    out = where(x.eq(math.inf), x._const(hi, x.dtype, ()), out)
    return where(x.eq(-math.inf), x._const(lo, x.dtype, ()), out)


def diagonal(x: Tensor, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """The diagonal of the plane (``axis1``, ``axis2``), shifted by ``offset`` (above the main one when
    positive), as a new last axis (numpy semantics). A view: the plane is flattened and read with
    stride ``cols + 1``. :func:`corvid.linalg.diagonal` is the Array API form (the last two axes).

    >>> m = cv.arange(1, 10).reshape(3, 3)
    >>> cv.diagonal(m).tolist(), cv.diagonal(m, 1).tolist(), cv.diagonal(m, -1).tolist()
    ([1, 5, 9], [2, 6], [4, 8])
    >>> cv.diagonal(cv.zeros(2, 3, 4), axis1=1, axis2=2).shape
    (2, 3)
    """
    x = _tensor(x)
    if x.ndim < 2:
        raise ShapeError(f"diagonal needs at least 2 dimensions, got shape {x.shape}")
    a, b = normalize_axis(axis1, x.ndim, "axis1"), normalize_axis(axis2, x.ndim, "axis2")
    if a == b:
        raise ValueError(f"diagonal: axis1 and axis2 must differ, got {axis1} and {axis2}")
    y = moveaxis(x, (a, b), (-2, -1))
    r, c = y.shape[-2:]
    batch = y.shape[:-2]
    lo_r, lo_c = (0, offset) if offset >= 0 else (-offset, 0)
    m = max(min(r - lo_r, c - lo_c), 0)
    if m == 0:
        return x._const(0, x.dtype, batch + (0,))
    y = y.shrink([(0, s) for s in batch] + [(lo_r, lo_r + m), (lo_c, lo_c + m)])
    flat = y.reshape(batch + (m * m,)).pad([(0, 0)] * len(batch) + [(0, m)])
    return flat.reshape(batch + (m, m + 1)).shrink([(0, s) for s in batch] + [(0, m), (0, 1)]).reshape(batch + (m,))


def diag(v: Tensor, k: int = 0) -> Tensor:
    """A 1-D ``v`` placed on diagonal ``k`` of a square matrix, or diagonal ``k`` of a 2-D ``v``
    (numpy semantics). Building the matrix is the inverse of the strided read: pad, flatten, reshape.

    >>> cv.diag(cv.Tensor([1, 2])).tolist()
    [[1, 0], [0, 2]]
    >>> cv.diag(cv.Tensor([1, 2]), 1).tolist()
    [[0, 1, 0], [0, 0, 2], [0, 0, 0]]
    >>> cv.diag(cv.arange(1, 10).reshape(3, 3)).tolist()
    [1, 5, 9]
    """
    v = _tensor(v)
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ShapeError(f"diag needs a 1-D or 2-D tensor, got shape {v.shape}")
    n = v.shape[0]
    size = n + abs(k)
    if n == 0:
        return v._const(0, v.dtype, (size, size))
    m = v.reshape(n, 1).pad(((0, 0), (0, n))).reshape(n * (n + 1)).shrink(((0, n * n),)).reshape(n, n)
    return m.pad(((0, k), (k, 0)) if k >= 0 else ((-k, 0), (0, -k)))


def trace(x: Tensor, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None) -> Tensor:
    """Sum along a diagonal (numpy semantics, the diagonal as in :func:`diagonal`; ints accumulate
    like ``sum``).

    >>> m = cv.arange(1, 10).reshape(3, 3)
    >>> cv.trace(m).item(), cv.trace(m, 1).item()
    (15, 8)
    >>> cv.trace(cv.ones(2, 2, 3), axis1=1, axis2=2).tolist()
    [2.0, 2.0]
    """
    return diagonal(x, offset, axis1, axis2).sum(-1, dtype=dtype)


def _attach() -> None:
    from ..tensor import Tensor

    for name in ("roll", "tile", "repeat", "diff", "tril", "triu", "moveaxis", "rot90", "frac", "nan_to_num",
                 "diagonal", "trace", "unstack"):
        setattr(Tensor, name, globals()[name])


_attach()

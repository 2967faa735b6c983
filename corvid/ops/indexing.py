"""Indexing by arrays: integer-array and boolean-mask ``x[...]`` and ``x[...] = v``, ``take``,
``take_along_axis``, ``put_along_axis``, ``gather``, ``scatter``, ``scatter_reduce``,
``index_select``, ``nonzero`` and one-argument ``where``.

Reads use the ``GATHER`` primitive (an indirect load: ``take``, ``take_along_axis``, ``gather``,
integer-array ``x[...]``). Every write uses the ``SCATTER`` primitive (an indirect write:
``x[idx] = v``, ``put_along_axis``, ``scatter``, ``scatter_reduce`` and the backward of every
gather): one kernel, O(m) for m index entries, duplicates combined in index order, every dtype.
``"set"``, ``"sum"``, ``"prod"``, ``"amax"`` and ``"amin"`` are its own modes; ``"mean"`` is a sum
divided by a count (a second scatter), and ``include_self=False`` first resets the targets that
are hit to the reduction's identity. Derivatives (:func:`scatter_vjp`, :func:`scatter_jvp`):
``"set"`` passes the gradient to the write that wins, ``"amax"``/``"amin"`` share it evenly among
the values equal to the result (``x``'s own included), ``"prod"`` gives each factor the product
of the others (exactly, with zeros among them).

Bounds. Indices may be negative (counted from the end). Out-of-range indices raise IndexError
naming the index and the size. Host indices (ints, lists, numpy arrays) are checked on the host.
Tensor indices are checked on the device: indexing with tensor indices therefore synchronizes
once. ``take``, ``take_along_axis`` and ``gather`` run one reduction (the largest ``i < 0 ? ~i : i``
must be below the size; the min and max, for the message, only on failure); ``x[...]`` computes
the min and max of all its index tensors in one small schedule (it also narrows the slice it reads
by them). Under ``jit`` tracing, or when the index depends on a ``vmap``/``jit`` placeholder, the
values are unknown: nothing is checked and nothing can go out of bounds either: GATHER reads 0
there, SCATTER drops the write.

Boolean masks have data-dependent result shapes: ``x[mask]`` calls :func:`nonzero` (which
synchronizes) and cannot be traced. The exception is ``x[mask] = scalar``, which is
``where(mask, scalar, x)`` and works everywhere.

Duplicate indices in a write (``x[idx] = v``, ``scatter``, ``put_along_axis``): the last
duplicate in index order wins (numpy promises no order; this one is deterministic).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ShapeError
from .. import dtype as dt
from ..engine import capture
from ..engine import eager
from ..graph.node import Node, Op, node, toposort
from .elementwise import ArgumentError
from .elementwise import where as _where3
from .movement import cat, normalize_axis

if TYPE_CHECKING:
    from ..tensor import Tensor

_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")
_MISSING = object()  # (an argument not given, where None is a value)


# --- small builders -----------------------------------------------------------------------------------
def _tensor_cls():
    from ..tensor import Tensor

    return Tensor


def _iota(n: int, device: str) -> Tensor:
    return _tensor_cls()._from_node(node(Op.IOTA, (), None, dt.int64, (n,)), device)


def _has_placeholder(n: Node) -> bool:
    """True when a value-less VAR (a vmap/jit placeholder) lies below ``n``: its values are unknown."""
    return n.traced and any(m.op is Op.VAR and not m.src for m in toposort([n], stop=lambda m: m.buffer is not None))


def _guarded(t: Tensor) -> bool:
    """Whether the values of index tensor ``t`` cannot be read now (jit tracing or a placeholder)."""
    return capture.tracing() or _has_placeholder(t.node)


def _as_tensor(x: Any, like: Tensor) -> Tensor:
    T = _tensor_cls()
    if isinstance(x, T):
        if x.device != like.device:
            raise ValueError(f"tensors on different devices: {like.device} and {x.device}")
        return x
    return T(x, device=like.device)


def _int_index(idx: Any, like: Tensor, what: str) -> Tensor:
    """An integer index argument as an int64 Tensor; TypeError for float or bool indices."""
    t = _as_tensor(idx, like) if not isinstance(idx, (list, tuple)) else _as_tensor(_host_array(idx), like)
    if not t.dtype.is_int:
        raise TypeError(f"{what} must be an integer tensor, got {t.dtype.name}")
    return t.astype(dt.int64)


def _host_array(x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.size == 0 and a.dtype.kind == "f":  # [] means "no indices", not a float array
        a = a.astype(np.int64)
    return a


def _check_range(lo: int, hi: int, n: int, axis: int) -> None:
    bad = lo if lo < -n else hi if hi >= n else None
    if bad is not None:
        raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {n}")


def _device_ranges(tensors: list[Tensor]) -> list[tuple[int, int]]:
    """(min, max) of each non-empty int tensor, computed in one schedule (this synchronizes)."""
    if not tensors:
        return []
    parts = []
    for t in tensors:
        parts += [t.min().reshape(1), t.max().reshape(1)]
    vals = cat(parts).numpy().tolist()
    return [(int(vals[2 * i]), int(vals[2 * i + 1])) for i in range(len(tensors))]


def _wrap(idx: Tensor, n: int) -> Tensor:
    """Negative indices counted from the end (out-of-range ones stay out of range)."""
    return _where3(idx < 0, idx + n, idx)


def gather_prim(x: Tensor, idx: Tensor, axis: int) -> Tensor:
    """The GATHER primitive (an indirect load): ``out[..., j, ...] = x[..., idx[..., j, ...], ...]``
    along ``axis``; ``idx`` has ``x``'s rank and each other dimension of ``x`` equals ``idx``'s
    or is 1. Indices outside ``[0, n)`` read 0 (nothing is read out of bounds)."""
    return x._new(node(Op.GATHER, (x.node, idx.astype(dt.int64).node), axis, x.dtype, idx.shape))


def _take(x: Tensor, idx: Tensor, axis: int) -> Tensor:
    """``x.shape[:axis] + idx.shape + x.shape[axis+1:]``: elements of ``x`` at ``idx`` (int64, in
    ``[0, n)``; anything else reads 0) along ``axis``: one indirect load per element."""
    pre, post, b = x.shape[:axis], x.shape[axis + 1:], idx.shape
    xv = x.reshape(pre + (1,) * len(b) + (x.shape[axis],) + post)  # the gathered dims broadcast
    iv = idx.reshape((1,) * len(pre) + b + (1,) + (1,) * len(post)).broadcast_to(pre + b + (1,) + post)
    return gather_prim(xv, iv, len(pre) + len(b)).reshape(pre + b + post)


def _extreme(d: dt.DType, high: bool) -> Any:
    if d.is_float:
        return math.inf if high else -math.inf
    if d.is_bool:
        return high
    info = dt.iinfo(d)
    return info.max if high else info.min


# scatter_reduce's names -> the SCATTER primitive's
_PRIM_REDUCE = {"set": "set", "sum": "sum", "prod": "prod", "amax": "max", "amin": "min"}


def scatter_prim(x: Tensor, nj: int, idx: Tensor, src: Tensor, reduce: str = "sum") -> Tensor:
    """The SCATTER primitive: ``x`` is ``J + (n,) + R`` (``nj`` = len(J)), ``idx`` is ``J + (m,)``
    or ``J + (m,) + R`` (entries outside ``[0, n)`` are dropped), ``src`` is ``J + (m,) + R``;
    returns ``x`` with each ``src[j, i, r]`` combined into ``[j, idx[j, i(, r)], r]`` by ``reduce``
    (a key of :data:`_PRIM_REDUCE`), in index order: O(m) work, duplicates combine
    deterministically (the last ``"set"`` wins). Every dtype; bfloat16 and 8-bit float arithmetic
    runs in float32 (rounded once at the end). TypeError for ``"amax"``/``"amin"`` of complex numbers."""
    prim = _PRIM_REDUCE[reduce]
    if x.dtype.is_complex and prim in ("max", "min"):
        raise TypeError(f"scatter_reduce: {reduce!r} is not defined for complex dtype {x.dtype.name} (complex "
                        "numbers have no order)")
    if (x.dtype is dt.bfloat16 or x.dtype in dt.FLOAT8_DTYPES) and prim != "set":
        return scatter_prim(x.astype(dt.float32), nj, idx, src.astype(dt.float32), reduce).astype(x.dtype)
    i64, s = idx.astype(dt.int64), src.astype(x.dtype)
    return x._new(node(Op.SCATTER, (x.node, i64.node, s.node), (prim, nj), x.dtype, x.shape))


def _hit_count(x: Tensor, nj: int, idx: Tensor) -> Tensor:
    """How many index entries hit each target: int64, ``x``'s shape (``J + (n,) + 1s`` when the
    index is the same for every ``r``)."""
    per_r = idx.ndim > nj + 1
    count = scatter_prim(x._const(0, dt.int64, x.shape if per_r else x.shape[:nj + 1]), nj, idx,
                         x._const(1, dt.int64, idx.shape))
    return count.reshape(count.shape + (1,) * (x.ndim - count.ndim))


def _scatter(x: Tensor, nj: int, idx: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:
    """The write core (layouts of :func:`scatter_prim`). Each target ``x[j, k, r]`` combines the
    ``src[j, i, r]`` that hit it by ``reduce``: ``"set"`` (the last such ``i`` wins), or one of
    :data:`_REDUCTIONS`, with ``x``'s own value when ``include_self``. Targets hit by nothing keep
    their value."""
    if idx.shape[nj] == 0 or x.size == 0:
        return x
    if reduce == "set" or (include_self and reduce != "mean"):
        return scatter_prim(x, nj, idx, src, reduce)
    hit = _hit_count(x, nj, idx) > 0
    if reduce != "mean":  # without x's value: start hit targets from the reduction's identity
        fill = 0 if reduce == "sum" else 1 if reduce == "prod" or x.dtype.is_complex else \
            _extreme(x.dtype, reduce == "amin")
        return scatter_prim(_where3(hit, x._const(fill, x.dtype, ()), x), nj, idx, src, reduce)
    total = scatter_prim(x if include_self else x._const(0, x.dtype, x.shape), nj, idx, src)
    count = _hit_count(x, nj, idx) + (1 if include_self else 0)
    c = count.maximum(1).astype(x.dtype)
    mean = total / c if x.dtype.is_float or x.dtype.is_complex else total // c
    return _where3(hit, mean.astype(x.dtype), x)


def _expand_index(idx: Tensor, nj: int, shape: tuple[int, ...]) -> Tensor:
    """A ``J + (m,)`` index broadcast to ``shape`` = ``J + (m,) + R`` (a ``J + (m,) + R`` one as is)."""
    return idx.reshape(idx.shape + (1,) * (len(shape) - idx.ndim)).broadcast_to(shape)


def _scatter_weights(x: Tensor, idx: Tensor, src: Tensor, y: Tensor, reduce: str, nj: int) -> tuple[Tensor, Tensor]:
    """The derivative of ``y = SCATTER(x, idx, src)`` as weights ``wx`` (``x``'s shape) and ``ws``
    (``src``'s): ``dy = wx * dx + SCATTER_sum(0, idx, ws * dsrc)``. ``"set"``: only the winning
    (last) write of each target counts; ``"max"``/``"min"``: the contributors equal to the result
    share it evenly; ``"prod"``: the product of the others (exact with zeros among them)."""
    full = _expand_index(idx, nj, src.shape)
    at = lambda t: gather_prim(t, full, nj)  # noqa: E731  (a target's value read back at each src entry)
    if reduce == "sum":
        return x._const(1, x.dtype, ()), src._const(1, src.dtype, ())
    if reduce == "set":
        order = _iota(idx.shape[nj], x.device).reshape((1,) * nj + (idx.shape[nj],) + (1,) * (idx.ndim - nj - 1))
        winner = scatter_prim(x._const(-1, dt.int64, idx.shape[:nj] + (x.shape[nj],) + idx.shape[nj + 1:]), nj,
                              idx, order.broadcast_to(idx.shape), "set")
        winner = winner.reshape(winner.shape + (1,) * (x.ndim - winner.ndim))
        mine = at(winner).eq(_expand_index(order, nj, src.shape))
        return (winner < 0).astype(x.dtype), mine.astype(src.dtype)
    if reduce in ("max", "min"):
        tie_x, tie_s = x.eq(y), src.eq(at(y))
        count = scatter_prim(tie_x.astype(dt.int64), nj, full, tie_s.astype(dt.int64))
        share = _where3(count > 0, 1 / count.maximum(1).astype(x.dtype), 0)
        return _where3(tie_x, share, 0), _where3(tie_s, at(share), 0)
    zx, zs = x.eq(0), src.eq(0)  # prod
    zeros = scatter_prim(zx.astype(dt.int64), nj, full, zs.astype(dt.int64))
    nonzero = scatter_prim(_where3(zx, 1, x), nj, idx, _where3(zs, 1, src), "prod")

    def weight(c: Tensor, z: Tensor, p: Tensor, zc: Tensor) -> Tensor:
        return _where3(zc, _where3(z.eq(1), p, 0), _where3(z.eq(0), p / _where3(zc, 1, c), 0))

    return weight(x, zeros, nonzero, zx), weight(src, at(zeros), at(nonzero), zs)


def scatter_vjp(x: Tensor, idx: Tensor, src: Tensor, y: Tensor, g: Tensor, reduce: str, nj: int,
                need: list[bool]) -> tuple[Tensor | None, Tensor | None]:
    """Cotangents of SCATTER's ``x`` and ``src`` (see :func:`_scatter_weights`)."""
    wx, ws = _scatter_weights(x, idx, src, y, reduce, nj)
    gx = g * wx if need[0] else None
    gs = gather_prim(g, _expand_index(idx, nj, src.shape), nj) * ws if need[2] else None
    return gx, gs


def scatter_jvp(x: Tensor, idx: Tensor, src: Tensor, y: Tensor, tx: Tensor, ts: Tensor, reduce: str,
                nj: int) -> Tensor:
    """The tangent of SCATTER's output from the tangents of ``x`` and ``src``."""
    wx, ws = _scatter_weights(x, idx, src, y, reduce, nj)
    return scatter_prim((tx * wx).broadcast_to(x.shape), nj, idx, (ts * ws).broadcast_to(src.shape))


def _checked(idx: Tensor, n: int, axis: int) -> Tensor:
    """``idx`` (int64) with negative entries wrapped; IndexError if out of range (unless guarded)."""
    if idx.size and not _guarded(idx):
        # one reduction when all is well: every index is in [-n, n) exactly when the largest
        # i < 0 ? ~i : i (~i is -i - 1, which cannot overflow) is below n; the min and max, for
        # the message, only when it is not
        if _where3(idx < 0, ~idx, idx).max().item() >= n:
            lo, hi = _device_ranges([idx])[0]
            _check_range(lo, hi, n, axis)
    return _wrap(idx, n)


# --- public functions ----------------------------------------------------------------------------------
def take(x: Tensor, indices: Any, axis: int | None = None) -> Tensor:
    """Elements of ``x`` at ``indices`` along ``axis`` (numpy ``take``; the flattened ``x`` if
    ``axis`` is None). Result shape: ``x.shape[:axis] + indices.shape + x.shape[axis+1:]``.

    ``indices``: ints (negative count from the end), as a Tensor, numpy array or list. IndexError
    when out of range, TypeError for non-integer indices. Tensor indices synchronize once for the
    bounds check (see the module docstring).

    >>> import corvid as cv
    >>> cv.take(cv.Tensor([[1, 2], [3, 4]]), [1, 0, -1], axis=1).tolist()
    [[2, 1, 2], [4, 3, 4]]
    """
    if axis is None:
        x, axis = x.reshape(-1), 0
    a = normalize_axis(axis, x.ndim)
    if x.ndim == 0:  # (axis 0 or -1 of a 0-d tensor: one element)
        x = x.reshape(1)
    return _take(x, _checked(_int_index(indices, x, "take: indices"), x.shape[a], a), a)


def index_select(x: Tensor, axis: int, index: Any) -> Tensor:
    """Torch ``index_select``: ``take`` with a 1-d index along ``axis`` (ValueError otherwise).

    Note the argument order, PyTorch's: the axis comes before the index (numpy's ``take`` has
    ``indices`` first). Negative indices count from the end.

    >>> x = cv.asarray([[1, 2, 3], [4, 5, 6]])
    >>> cv.index_select(x, 1, cv.asarray([2, 0]))
    Tensor([[3, 1],
            [6, 4]])
    >>> x.index_select(0, [1, 1])
    Tensor([[4, 5, 6],
            [4, 5, 6]])
    """
    idx = _int_index(index, x, "index_select: index")
    if x.ndim == 0:  # (as torch: one index, a 0-d result)
        if idx.size != 1:
            raise ShapeError(f"index_select: a 0-d tensor takes one index, got shape {idx.shape}")
        return take(x, idx.reshape(()), axis)
    if idx.ndim != 1:
        raise ShapeError(f"index_select: index must be 1-d, got shape {idx.shape}")
    return take(x, idx, axis)


def take_along_axis(x: Tensor, indices: Any, axis: int = -1) -> Tensor:
    """numpy ``take_along_axis``: ``out[..., j, ...] = x[..., indices[..., j, ...], ...]`` along
    ``axis``. ``indices`` has ``x.ndim`` dimensions and broadcasts against ``x`` in the others.

    >>> import corvid as cv
    >>> x = cv.Tensor([[10, 30, 20], [60, 40, 50]])
    >>> cv.take_along_axis(x, x.argmax(axis=1, keepdims=True), axis=1).tolist()
    [[30], [60]]
    """
    from ..tensor import broadcast_shapes

    idx = _int_index(indices, x, "take_along_axis: indices")
    a = normalize_axis(axis, x.ndim)
    if idx.ndim != x.ndim:
        raise ShapeError(f"take_along_axis: indices must have {x.ndim} dimensions like x, got shape {idx.shape}")
    shape = broadcast_shapes(x.shape[:a] + x.shape[a + 1:], idx.shape[:a] + idx.shape[a + 1:])
    idx = _checked(idx, x.shape[a], a)
    full = shape[:a] + (idx.shape[a],) + shape[a:]
    return gather_prim(x, idx.broadcast_to(full), a)


def gather(x: Tensor, axis: int, index: Any) -> Tensor:
    """Torch ``gather``: ``out[i][j][k] = x[index[i][j][k]][j][k]`` for ``axis=0`` (and so on).
    ``index`` has ``x.ndim`` dimensions, each no larger than ``x``'s except along ``axis``; the
    result has ``index``'s shape. Negative indices count from the end (torch rejects them).

    >>> import corvid as cv
    >>> cv.gather(cv.Tensor([[1, 2], [3, 4]]), 1, cv.Tensor([[0, 0], [1, 0]])).tolist()
    [[1, 1], [4, 3]]
    """
    idx = _int_index(index, x, "gather: index")
    a = normalize_axis(axis, x.ndim)
    if x.ndim == 0 and idx.ndim <= 1:  # (as torch: one element along axis 0 or -1; the index's shape)
        return take_along_axis(x.reshape(1), idx.reshape(-1), 0).reshape(idx.shape)
    _check_torch_shapes("gather", x, idx, a)
    part = x.shrink(tuple((0, idx.shape[d]) if d != a else (0, s) for d, s in enumerate(x.shape)))
    return take_along_axis(part, idx, a)


def _check_torch_shapes(name: str, x: Tensor, idx: Tensor, a: int, src: Tensor | None = None) -> None:
    if idx.ndim != x.ndim or any(i > s for d, (i, s) in enumerate(zip(idx.shape, x.shape)) if d != a):
        raise ShapeError(f"{name}: index of shape {idx.shape} does not fit x of shape {x.shape} outside axis {a} "
                         "(it needs the same number of dimensions, each no larger)")
    if src is not None and (src.ndim != x.ndim or any(i > s for i, s in zip(idx.shape, src.shape))):
        raise ShapeError(f"{name}: index of shape {idx.shape} is larger than src of shape {src.shape}")


def _scatter_along(name: str, x: Tensor, a: int, idx: Tensor, src: Tensor, reduce: str, include_self: bool,
                   broadcast: bool) -> Tensor:
    """Scatter ``src`` into ``x`` at ``idx`` along axis ``a``. Torch layout (``broadcast=False``):
    ``idx`` no larger than ``x`` outside ``a``, ``src`` cut to ``idx``'s shape. numpy layout
    (``broadcast=True``, ``put_along_axis``): ``idx`` broadcasts against ``x``, ``src`` against ``idx``."""
    n = x.shape[a]
    idx = _checked(idx, n, a)
    if broadcast:
        from ..tensor import broadcast_shapes

        shape = broadcast_shapes(x.shape[:a] + x.shape[a + 1:], idx.shape[:a] + idx.shape[a + 1:])
        if shape != x.shape[:a] + x.shape[a + 1:]:
            raise ShapeError(f"{name}: indices of shape {idx.shape} do not broadcast to x of shape {x.shape} "
                             f"outside axis {a}")
        full = x.shape[:a] + (idx.shape[a],) + x.shape[a + 1:]
        idx, src = idx.broadcast_to(full), src.broadcast_to(full)
    else:
        src = src.shrink(tuple((0, s) for s in idx.shape))
        # positions outside index's extent take no part: their index is -1, which hits nothing
        pads = tuple((0, s - i) if d != a else (0, 0) for d, (i, s) in enumerate(zip(idx.shape, x.shape)))
        idx, src = idx.pad(pads, -1), src.pad(pads)
    return _scatter(x, a, idx, src, reduce, include_self)


def _src_like(src: Any, x: Tensor) -> Tensor:
    T = _tensor_cls()
    s = src if isinstance(src, T) else T(src, dtype=x.dtype, device=x.device)
    return s.astype(x.dtype)


# torch scatter's reduce names -> scatter_reduce's (x's own value always takes part)
_SCATTER_REDUCE = {None: "set", "add": "sum", "multiply": "prod"}


def scatter(x: Tensor, axis: int, index: Any, src: Any = _MISSING, *, value: Any = _MISSING,
            reduce: str | None = None) -> Tensor:
    """Torch ``scatter`` (out of place): a copy of ``x`` with ``out[index[i][j]][j] = src[i][j]``
    for ``axis=0`` (and so on). ``src`` is a tensor at least as large as ``index`` or a scalar,
    cast to ``x``'s dtype; ``value=`` names a scalar instead. Duplicate indices: the last one
    along ``axis`` wins. ``reduce="add"`` or ``"multiply"`` combines each ``src`` element into
    the target instead, ``x``'s value included (``scatter_reduce``'s ``"sum"``/``"prod"``).

    TypeError unless exactly one of ``src`` and ``value`` is given; :class:`ArgumentError` for
    another ``reduce``.

    >>> import corvid as cv
    >>> cv.scatter(cv.zeros((2, 3)), 1, cv.Tensor([[2], [0]]), 5.0).tolist()
    [[0.0, 0.0, 5.0], [5.0, 0.0, 0.0]]
    >>> cv.ones(3).scatter(0, cv.Tensor([0, 0, 2]), value=2.0, reduce="add").tolist()
    [5.0, 1.0, 3.0]
    """
    if (src is _MISSING) == (value is _MISSING):
        raise TypeError("scatter: give the values to write as src or as value=, exactly one of them")
    mode = _SCATTER_REDUCE.get(reduce) if reduce is None or isinstance(reduce, str) else None
    if mode is None:
        raise ArgumentError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r} (scatter_reduce "
                            f"takes {', '.join(map(repr, _REDUCTIONS))})")
    return _torch_scatter(x, axis, index, value if src is _MISSING else src, mode, True)


def scatter_reduce(x: Tensor, axis: int, index: Any, src: Any, reduce: str, include_self: bool = True) -> Tensor:
    """Torch ``scatter_reduce`` (out of place): each ``src[i][j]`` (``axis=0``) is combined into
    ``out[index[i][j]][j]`` by ``reduce``: ``"sum"``, ``"prod"``, ``"mean"``, ``"amax"`` or
    ``"amin"``. With ``include_self`` the old value of ``x`` takes part; without it, targets that
    ``index`` hits get only the reduction of ``src``. Targets not hit keep ``x``'s value. Integer
    ``"mean"`` rounds down. ValueError for another ``reduce``.

    >>> import corvid as cv
    >>> x = cv.Tensor([1.0, 1.0, 1.0])
    >>> cv.scatter_reduce(x, 0, cv.Tensor([0, 0, 2]), cv.Tensor([2.0, 3.0, 4.0]), "sum").tolist()
    [6.0, 1.0, 5.0]
    """
    if reduce not in _REDUCTIONS:
        raise ValueError(f"scatter_reduce: reduce must be one of {_REDUCTIONS}, got {reduce!r}")
    return _torch_scatter(x, axis, index, src, reduce, include_self)


def _torch_scatter(x: Tensor, axis: int, index: Any, src: Any, reduce: str, include_self: bool) -> Tensor:
    idx = _int_index(index, x, "scatter: index")
    a = normalize_axis(axis, x.ndim)
    s = _src_like(src, x)
    if s.ndim == 0:
        s = s.broadcast_to(idx.shape)
    _check_torch_shapes("scatter", x, idx, a, s)
    return _scatter_along("scatter", x, a, idx, s, reduce, include_self, broadcast=False)


def put_along_axis(x: Tensor, indices: Any, values: Any, axis: int) -> Tensor:
    """numpy ``put_along_axis``, out of place (the graph is immutable): returns a copy of ``x``
    with ``values`` written at ``indices`` along ``axis`` (``indices`` broadcasts against ``x``,
    ``values`` against ``indices``). Write back with ``x.assign(...)``.

    >>> import corvid as cv
    >>> cv.put_along_axis(cv.zeros((2, 2)), cv.Tensor([[1], [0]]), 7.0, axis=1).tolist()
    [[0.0, 7.0], [7.0, 0.0]]
    """
    idx = _int_index(indices, x, "put_along_axis: indices")
    a = normalize_axis(axis, x.ndim)
    if idx.ndim != x.ndim:
        raise ShapeError(f"put_along_axis: indices must have {x.ndim} dimensions like x, got shape {idx.shape}")
    return _scatter_along("put_along_axis", x, a, idx, _src_like(values, x), "set", True,
                          broadcast=True)


def nonzero(x: Tensor) -> tuple[Tensor, ...]:
    """The indices of the non-zero elements of ``x``, one int64 tensor per dimension (numpy and
    Array API semantics, row-major order). The result's size depends on the values: this realizes
    ``x`` and synchronizes, and it cannot be traced (RuntimeError under ``jit``/``vmap``).
    ValueError for a 0-d tensor.

    >>> import corvid as cv
    >>> [t.tolist() for t in cv.nonzero(cv.Tensor([[0, 3], [4, 0]]))]
    [[0, 1], [1, 0]]
    """
    if not isinstance(x, _tensor_cls()):
        x = _tensor_cls()(x)
    if x.ndim == 0:
        raise ShapeError("nonzero of a 0-d tensor is not defined; use x.reshape(1)")
    if _guarded(x):
        raise RuntimeError("nonzero (and boolean-mask indexing) has a result whose shape depends on the values; "
                           "it cannot be traced by jit or vmap. Use where(mask, x, other) instead")
    return tuple(_tensor_cls()(a.astype(np.int64), device=x.device) for a in np.nonzero(x.numpy()))


def where(condition: Any, x: Any = _MISSING, y: Any = _MISSING) -> Any:
    """``where(cond, x, y)``: ``x`` where ``cond`` is true, else ``y`` (broadcast, promoted).
    ``where(cond)``: ``nonzero(cond)`` (numpy).

    ``x`` and ``y`` may be Python scalars. Differentiable in ``x`` and ``y``: the gradient flows only
    to the branch selected at each element.

    >>> x = cv.asarray([1.0, -2.0, 3.0])
    >>> cv.where(x > 0, x, 0)
    Tensor([1., 0., 3.])
    >>> cv.where(cv.asarray([[True], [False]]), 1, cv.asarray([0.5, 0.25]))  # broadcast to (2, 2)
    Tensor([[1.  , 1.  ],
            [0.5 , 0.25]])
    >>> cv.where(cv.asarray([0, 3, 0, 4]))
    (Tensor([1, 3]),)
    """
    if x is _MISSING and y is _MISSING:
        return nonzero(condition)
    if x is _MISSING or y is _MISSING:
        raise TypeError("where takes one argument (nonzero) or three (cond, x, y)")
    return _where3(condition, x, y)


# --- x[index] and x[index] = value ---------------------------------------------------------------------
def _parse(x: Tensor, index: Any) -> list[tuple[str, Any, int]]:
    """The items of ``index`` as ``(kind, value, axis of x)`` with ``...`` expanded. Kinds: ``none``,
    ``slice``, ``int``, ``array`` (int np.ndarray or int Tensor) and ``mask`` (bool np.ndarray or
    bool Tensor, covering ``value.ndim`` axes)."""
    T = _tensor_cls()
    parsed: list[tuple[str, Any]] = []
    for it in (list(index) if isinstance(index, tuple) else [index]):
        if it is None or it is Ellipsis or isinstance(it, slice):
            parsed.append(("none" if it is None else "ellipsis" if it is Ellipsis else "slice", it))
        elif isinstance(it, (bool, np.bool_)):
            parsed.append(("mask", np.asarray(bool(it))))
        elif isinstance(it, (int, np.integer)):
            parsed.append(("int", int(it)))
        elif isinstance(it, T) or isinstance(it, (list, tuple, np.ndarray)):
            if isinstance(it, T):
                if it.device != x.device:
                    raise ValueError(f"index tensor on {it.device}, indexed tensor on {x.device}")
                kind = "b" if it.dtype.is_bool else "i" if it.dtype.is_int else "f"
                name = it.dtype.name
            else:
                try:
                    it = _host_array(it)
                except ValueError as e:
                    raise IndexError(f"cannot use {type(it).__name__} as an index: {e}") from None
                kind, name = it.dtype.kind.replace("u", "i"), it.dtype.name
            if kind not in "bi":
                raise TypeError(f"arrays used as indices must be of integer or boolean type, got {name}")
            parsed.append(("mask" if kind == "b" else "array", it))
        else:
            raise TypeError(f"unsupported index {it!r}: use ints, slices, None, ..., integer or boolean arrays")
    if sum(1 for k, _ in parsed if k == "ellipsis") > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(v.ndim if k == "mask" else 1 for k, v in parsed if k not in ("none", "ellipsis"))
    if used > x.ndim:
        raise IndexError(f"too many indices for a tensor of shape {x.shape}: {used} were given")
    fill = [("slice", slice(None))] * (x.ndim - used)
    at = next((i for i, (k, _) in enumerate(parsed) if k == "ellipsis"), None)
    if at is None:
        parsed += fill
    else:  # an ellipsis separates advanced indices (numpy) even where it stands for no axis
        parsed[at:at + 1] = fill or [("sep", None)]
    out, axis = [], 0
    for k, v in parsed:
        if k == "mask" and v.shape != x.shape[axis:axis + v.ndim] and len(x.shape[axis:axis + v.ndim]) == v.ndim \
                and all(m in (s, 0) for m, s in zip(v.shape, x.shape[axis:])):
            # a size-0 mask axis selects nothing along a longer one (the Array API's rule: each
            # axis of the mask equals the indexed one or is 0): an all-false mask of that shape
            v = np.zeros(x.shape[axis:axis + v.ndim], bool)
        out.append((k, v, axis))
        if k == "mask":
            if v.shape != x.shape[axis:axis + v.ndim]:
                raise IndexError(f"boolean index of shape {v.shape} does not match the indexed axes "
                                 f"{x.shape[axis:axis + v.ndim]} (axes {axis}..{axis + v.ndim - 1} of {x.shape})")
            axis += v.ndim
        elif k not in ("none", "sep"):
            axis += 1
    return out


class _Plan:
    """A basic index (one slice or None per dimension of ``view = x[basic]``) followed by a
    gather of the flattened advanced dimensions ``positions`` of ``view`` at ``flat`` (shape B)."""

    def __init__(self, basic: list[Any], positions: list[int], flat: Tensor, adjacent: bool):
        self.basic, self.positions, self.flat, self.adjacent = basic, positions, flat, adjacent


def _plan(x: Tensor, entries: list[tuple[str, Any, int]]) -> _Plan:
    from ..tensor import broadcast_shapes

    T = _tensor_cls()
    basic: list[Any] = []
    adv: list[tuple[int, Any, int, int]] = []  # (position in the view, index array, axis of x, its size)
    for k, v, axis in entries:
        if k == "mask" and isinstance(v, T):
            nonzero(v.reshape(-1))  # raises under tracing: the result's shape depends on the values
            v = v.numpy()
        if k == "mask" and v.ndim == 0:  # x[True]: a new axis of size 1, indexed by [0] (by [] for False)
            basic.append(None)
            adv.append((len(basic) - 1, np.zeros(1 if v else 0, np.int64), axis, 1))
        elif k == "mask":
            for i, a in enumerate(np.nonzero(v)):
                basic.append(slice(None))
                adv.append((len(basic) - 1, a, axis + i, x.shape[axis + i]))
        elif k in ("int", "array"):
            basic.append(slice(None))
            adv.append((len(basic) - 1, np.asarray(v) if k == "int" else v, axis, x.shape[axis]))
        elif k != "sep":
            basic.append(v)
    try:
        shape = broadcast_shapes(*(a.shape for _, a, _, _ in adv))
    except ValueError:
        raise IndexError("shape mismatch: indexing arrays could not be broadcast together with shapes "
                         + " ".join(str(tuple(a.shape)) for _, a, _, _ in adv)) from None
    # bounds: host arrays here, unguarded tensors in one schedule, guarded ones are left to GATHER's gate
    dev = [i for i, (_, a, _, _) in enumerate(adv) if isinstance(a, T) and a.size and not _guarded(a)]
    ranges = dict(zip(dev, _device_ranges([adv[i][1].astype(dt.int64) for i in dev])))
    values, guarded = [], False
    for i, (p, a, axis, n) in enumerate(adv):
        if isinstance(a, T):
            a = a.astype(dt.int64)
            rng = ranges.get(i)
            guarded = guarded or (rng is None and a.size > 0)
        else:
            a = a.astype(np.int64)
            rng = (int(a.min()), int(a.max())) if a.size else None
        start, narrow = 0, basic[p] is not None  # (None: the new axis of x[True], size 1 already)
        if rng is not None:
            _check_range(*rng, n, axis)
            lo, hi = rng
            if narrow and (lo >= 0 or hi < 0):  # all of one sign: only the axis slice [lo, hi] takes part
                start = lo % n
                basic[p] = slice(start, hi % n + 1)
        elif narrow and not a.size:
            basic[p] = slice(0, 0)
        if isinstance(a, np.ndarray):
            values.append(T(np.where(a < 0, a + n, a) - start, device=x.device))
        elif rng is not None and rng[0] >= 0:
            values.append(a - start if start else a)
        elif rng is not None and rng[1] < 0 and narrow:
            values.append(a + (n - start))
        else:
            values.append(_wrap(a, n))
    view_shape = x[tuple(basic)].shape
    positions = [p for p, _, _, _ in adv]
    flat, valid, stride = None, None, 1
    for p, v in reversed(list(zip(positions, values))):
        n = view_shape[p]
        term = v.broadcast_to(shape) * stride if stride != 1 else v.broadcast_to(shape)
        flat = term if flat is None else flat + term
        if guarded and len(adv) > 1:
            ok = (v >= 0) & (v < n)
            valid = ok if valid is None else valid & ok
        stride *= n
    if valid is not None:  # an out-of-range part must not alias another element's flat index
        flat = _where3(valid.broadcast_to(shape), flat, -1)
    at = [j for j, (k, _, _) in enumerate(entries) if k in ("int", "array", "mask")]
    adjacent = at == list(range(at[0], at[0] + len(at)))
    return _Plan(basic, positions, flat, adjacent)


def _view_flat(view: Tensor, plan: _Plan) -> Tensor:
    """``view`` with the advanced dimensions first, merged into one: ``(N,) + rest``."""
    rest = [d for d in range(view.ndim) if d not in plan.positions]
    moved = view.permute(tuple(plan.positions) + tuple(rest))
    return moved.reshape((math.prod(view.shape[p] for p in plan.positions),) + tuple(view.shape[d] for d in rest))


def _result_order(plan: _Plan, nb: int, nrest: int) -> tuple[int, ...] | None:
    """The permutation from ``B + rest`` to numpy's layout (None when B stays in front)."""
    p0 = plan.positions[0]
    if not plan.adjacent or p0 == 0:
        return None
    rest = list(range(nb, nb + nrest))
    return tuple(rest[:p0]) + tuple(range(nb)) + tuple(rest[p0:])


def getitem(x: Tensor, index: Any) -> Tensor:
    """``x[index]`` with integer arrays, boolean masks, and any mix with ints, slices, None and
    ``...``, as numpy: the index arrays broadcast together to a shape B, which replaces the
    indexed dimensions where they are adjacent in the index, or goes first otherwise. A boolean
    mask acts as its :func:`nonzero`. IndexError when out of range (naming the index and the
    size), or for masks of the wrong shape; TypeError for float indices.

    >>> import corvid as cv
    >>> x = cv.arange(12).reshape(3, 4)
    >>> x[[0, 2], 1:3].tolist()
    [[1, 2], [9, 10]]
    >>> x[x % 5 == 0].tolist()
    [0, 5, 10]
    """
    plan = _plan(x, _parse(x, index))
    view = x[tuple(plan.basic)]
    out = _take(_view_flat(view, plan), plan.flat, 0)
    order = _result_order(plan, plan.flat.ndim, view.ndim - len(plan.positions))
    return out if order is None else out.permute(order)


def _fit(value: Tensor, shape: tuple[int, ...]) -> Tensor:
    v = value
    while v.ndim > len(shape) and v.shape[0] == 1:
        v = v.reshape(v.shape[1:])
    try:
        return v.broadcast_to(shape)
    except ValueError:
        raise ShapeError(f"could not broadcast a value of shape {value.shape} into the indexed shape {shape}") from None


def _place(t: Tensor, axis: int, n: int, start: int, step: int, fill: Any) -> Tensor:
    """The inverse of ``_step``: put ``t``'s elements along ``axis`` at ``range(start, ., step)`` of
    an axis of size ``n``; everything else is ``fill``. Movement ops only."""
    count = t.shape[axis]
    pads = [(0, 0)] * t.ndim
    if count == 0:
        pads[axis] = (0, n)
        return t.pad(pads, fill)
    if step < 0:
        t, start, step = t.flip(axis), start + step * (count - 1), -step
    if step > 1:
        t = t.unsqueeze(axis + 1)
        spread = [(0, 0)] * t.ndim
        spread[axis + 1] = (0, step - 1)
        t = t.pad(spread, fill).reshape(t.shape[:axis] + (count * step,) + t.shape[axis + 2:])
        t = t.shrink(tuple((0, (count - 1) * step + 1) if d == axis else (0, s) for d, s in enumerate(t.shape)))
    pads[axis] = (start, n - start - t.shape[axis])
    return t.pad(pads, fill)


def _put_basic(x: Tensor, basic: list[Any], view: Tensor) -> Tensor:
    """``x`` with the region ``x[basic]`` (slices and None) replaced by ``view``."""
    if all(it == slice(None) for it in basic):
        return view
    keep = [d for d, it in enumerate(basic) if it is not None]
    t = view.reshape(tuple(view.shape[d] for d in keep))
    mask = t._const(True, dt.bool_, t.shape)
    for axis, it in enumerate(it for it in basic if it is not None):
        start, _, step = it.indices(x.shape[axis])
        t = _place(t, axis, x.shape[axis], start, step, 0)
        mask = _place(mask, axis, x.shape[axis], start, step, False)
    return _where3(mask, t, x)


def setitem(x: Tensor, index: Any, value: Any) -> None:
    """``x[index] = value``: ``x`` is rebound to a new graph (nodes are immutable; see
    :meth:`Tensor.assign`, which also says what happens to ``requires_grad`` leaves). ``value``
    is broadcast to ``x[index]``'s shape and cast to ``x``'s dtype. Any index ``__getitem__``
    takes works. Duplicate indices: the last one (in the order of the flattened index) wins.
    ``x[mask] = scalar`` is a plain ``where`` (no synchronization; works under jit and vmap).

    >>> import corvid as cv
    >>> x = cv.zeros(5)
    >>> x[[1, 3]] = cv.Tensor([7.0, 8.0])
    >>> x[x > 7.5] = -1.0
    >>> x.tolist()
    [0.0, 7.0, 0.0, -1.0, 0.0]
    """
    v = _src_like(value, x)
    entries = _parse(x, index)
    kinds = [k for k, _, _ in entries]
    if "array" not in kinds and "mask" not in kinds:
        entries = [e for e in entries if e[0] != "sep"]  # it matters only for placing advanced indices
        basic = []
        for k, it, axis in entries:
            if k == "int":
                _check_range(it, it, x.shape[axis], axis)
                it = slice(it % x.shape[axis], it % x.shape[axis] + 1)
            basic.append(it)
        view = x[tuple(basic)]
        target = tuple(s for s, (k, _, _) in zip(view.shape, entries) if k != "int")
        fitted = _fit(v, target).reshape(view.shape)
        if not _host_put(x, basic, fitted):
            x.assign(_put_basic(x, basic, fitted))
        return
    masks = [v_ for k, v_, _ in entries if k == "mask"]
    if "array" not in kinds and len(masks) == 1 and masks[0].ndim > 0 and v.size == 1:
        x.assign(_masked_fill(x, entries, v))
        return
    plan = _plan(x, entries)
    view = x[tuple(plan.basic)]
    flat_view = _view_flat(view, plan)
    nb, rest = plan.flat.ndim, flat_view.shape[1:]
    order = _result_order(plan, nb, len(rest))
    target = plan.flat.shape + rest
    if order is not None:
        target = tuple(target[i] for i in order)
    vb = _fit(v, target)
    if order is not None:
        vb = vb.permute(tuple(order.index(i) for i in range(len(order))))
    m = plan.flat.size
    new = _scatter(flat_view, 0, plan.flat.reshape(m), vb.reshape((m,) + rest), "set")
    moved = new.reshape(tuple(view.shape[p] for p in plan.positions) + rest)
    perm = list(plan.positions) + [d for d in range(view.ndim) if d not in plan.positions]
    x.assign(_put_basic(x, plan.basic, moved.permute(tuple(perm.index(d) for d in range(view.ndim)))))


def _host_put(x: Tensor, basic: list[Any], value: Tensor) -> bool:
    """``x[basic] = value`` written by numpy into a copy of ``x``'s value, when ``x`` is small on
    a CPU and nothing is traced (``corvid/engine/eager.py``): what PyTorch's in-place write does.
    The graph form is a kernel of a new structure for each index, and a tensor filled one element
    at a time in a loop grew one node per write, into a kernel that took seconds to compile.
    False, writing nothing, otherwise."""
    if not eager.host_ok([x, value], x.node.numel):
        return False
    found = eager.host_arrays([x, value])
    if found is None:
        return False
    a, v = found
    a = a.copy() if not a.flags.writeable else a
    a[tuple(basic)] = v
    x.assign(eager.stored(a, x))
    return True


def _masked_fill(x: Tensor, entries: list[tuple[str, Any, int]], v: Tensor) -> Tensor:
    """``x[... mask ...] = scalar`` as ``where``: writes the same elements whatever the layout."""
    T = _tensor_cls()
    basic, mask_at = [], 0
    for k, it, axis in entries:
        if k == "sep":  # placement does not matter for a scalar
            continue
        if k == "int":
            _check_range(it, it, x.shape[axis], axis)
            it = slice(it % x.shape[axis], it % x.shape[axis] + 1)
        if k == "mask":
            mask_at, m = len(basic), it if isinstance(it, T) else T(it, device=x.device)
            basic += [slice(None)] * m.ndim
        else:
            basic.append(it)
    view = x[tuple(basic)]
    m = m.reshape((1,) * mask_at + m.shape + (1,) * (view.ndim - mask_at - m.ndim))
    return _put_basic(x, basic, _where3(m, v.reshape(()), view))


def _attach() -> None:
    T = _tensor_cls()
    T.take, T.take_along_axis, T.put_along_axis, T.index_select = take, take_along_axis, put_along_axis, index_select
    T.gather, T.scatter, T.scatter_reduce, T.nonzero = gather, scatter, scatter_reduce, nonzero
    T.__setitem__ = setitem


_attach()

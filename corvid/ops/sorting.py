"""Sorting and searching: sort, argsort, topk, searchsorted, and the Array API unique functions.

The order is a total order on keys: ascending puts nan last (numpy), descending puts nan first
(nan counts as the largest value, as torch); ``-0.0`` and ``0.0`` are equal. Every sort is
stable: equal keys keep their input order, in both directions.

Two lowerings, chosen by the work they do (``rows * n^2 <= COUNTING_WORK`` picks counting):

* **rank by counting**: ``rank[i] = #{j : x[j] before x[i]} + #{j < i : x[j] equal to x[i]}``,
  a REDUCE over an (n, n) comparison, then a one-hot select ``out[r] = x[i] where rank[i] == r``.
  Two kernels, O(n^2) work, trivially stable.
* **bitonic network** over (key, index) pairs compared lexicographically, which makes every pair
  distinct and so the network stable. The axis is padded to a power of two P with keys that sort
  after everything (their indices are >= n). ``log2(P) * (log2(P) + 1) / 2`` compare-exchange
  stages, each a few views (reshape, flip) and ``where``s, stored after every stage: O(n log^2 n)
  work, two kernels per stage (keys and indices).

Values travel through ``where`` in both lowerings, so the gradient of a sort is the exact
permutation of the cotangent, and ``grad``/``jvp``/``vmap`` need no rules of their own.

Measured on the CPU backend (float32 argsort, one thread, warm caches, ms, counting vs bitonic;
the machine was shared, so the numbers are rough): 8 rows x n=256: 1.3 vs 40; 8 x 1024: 4 vs 82;
64 x 1024: 29 vs 101; 8 x 4096: 80 vs 121; 1 x 16384: 146 vs 146. The network pays a launch per
kernel (110 kernels at n = 1024) and, on first use, a compile per kernel (about 0.8 s in all at
n = 1024 against 0.1 s for counting), hence ``COUNTING_WORK = 2**28``.

``searchsorted`` counts too (``#{j : x1[j] before v}``), O(n * m), and therefore ignores the
order of ``x1``: with a ``sorter`` the result is the same. The ``unique_*`` functions have
data-dependent shapes: they sort lazily, realize the number of distinct values (one scalar), and
then build their outputs with one-hot selects sized by it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import ShapeError
from .. import dtype as dt
from .elementwise import where
from .manipulation import _iota, _tensor, axis_of, moveaxis, take_at
from .movement import cat
from .scan import ValuesIndices, cumsum

if TYPE_CHECKING:
    from ..tensor import Tensor

__all__ = ["sort", "argsort", "topk", "searchsorted", "unique_values", "unique_counts", "unique_inverse",
           "unique_all"]

COUNTING_WORK = 2**28  # rows * n^2 up to this: rank by counting; beyond: the bitonic network


# --- the order -----------------------------------------------------------------------------------
def _key(x: Tensor) -> Tensor:
    return x.astype(dt.uint8) if x.dtype.is_bool else x


def _before(a: Tensor, b: Tensor, descending: bool) -> Tensor:
    """Whether key ``a`` sorts strictly before key ``b``. Complex keys: numpy's order, the real
    parts then the imaginary ones, with the values that have a nan part last, in the classes
    ``R + nan j``, ``nan + R j``, ``nan + nan j`` (descending: the whole order reversed)."""
    if a.dtype.is_complex:
        if descending:
            return _before(b, a, False)
        ca, cb = _nan_class(a), _nan_class(b)
        ar, br = a.real, b.real
        lexi = _before(ar, br, False) | (_same(ar, br) & _before(a.imag, b.imag, False))
        return (ca < cb) | (ca.eq(cb) & lexi)
    lt = b < a if descending else a < b
    if not a.dtype.is_float:
        return lt
    return lt | ((a if descending else b).isnan() & ~(b if descending else a).isnan())


def _nan_class(z: Tensor) -> Tensor:
    return z.real.isnan().astype(dt.int8) * 2 + z.imag.isnan().astype(dt.int8)


def _same(a: Tensor, b: Tensor) -> Tensor:
    if a.dtype.is_complex:
        return _same(a.real, b.real) & _same(a.imag, b.imag)
    eq = a.eq(b)
    return eq | (a.isnan() & b.isnan()) if a.dtype.is_float else eq


# --- rank by counting ----------------------------------------------------------------------------
def _counting(x: Tensor, descending: bool, k: int) -> tuple[Tensor, Tensor]:
    """The first ``k`` sorted values and their indices along the last axis of ``x``."""
    n = x.shape[-1]
    key = _key(x)
    xi, xj = key.unsqueeze(-1), key.unsqueeze(-2)                      # (..., i, 1), (..., 1, j)
    i, j = _iota(n, x).reshape(n, 1), _iota(n, x).reshape(1, n)
    ahead = _before(xj, xi, descending) | (_same(xj, xi) & (j < i))
    rank = ahead.astype(dt.int32)._reduce("sum", -1, False)           # (..., n)
    hit = rank.unsqueeze(-2).eq(_iota(k, x).astype(dt.int32).reshape(k, 1))  # (..., r, i)
    if x.dtype.is_complex:  # (each part picked alone: a product by 1 + 0j turns a nan part into nan + nan j)
        from .elementwise import make_complex

        re, im = (where(hit, p.unsqueeze(-2), 1.0)._reduce("prod", -1, False) for p in (x.real, x.imag))
        values = make_complex(re, im)
    else:
        fill = x._const(True if x.dtype.is_bool else 1, x.dtype, ())
        values = where(hit, x.unsqueeze(-2), fill)._reduce("prod", -1, False)
    indices = where(hit, _iota(n, x).reshape(1, n), 0)._reduce("sum", -1, False)
    return values, indices


# --- bitonic network -----------------------------------------------------------------------------
def _bitonic(x: Tensor, descending: bool) -> tuple[Tensor, Tensor]:
    """Sorted values and indices along the last axis. Reverse mode uses a hand-written rule (the
    cotangent sorted back by index through the same network): differentiating the stages directly
    would fuse the whole backward network into one kernel, exponential in the number of stages."""
    from ..transforms.custom import custom_vjp

    @custom_vjp
    def run(t: Tensor) -> tuple[Tensor, Tensor]:
        n = t.shape[-1]
        p = 1 << max(n - 1, 1).bit_length()
        key = _key(t)
        if key.dtype.is_complex:  # (the last of the order, or its first when descending)
            sentinel: Any = complex(-math.inf, -math.inf) if descending else complex(math.nan, math.nan)
        elif key.dtype.is_float:
            sentinel = -math.inf if descending else math.nan
        else:
            sentinel = dt.min_value(key.dtype) if descending else dt.max_value(key.dtype)
        batch = key.shape[:-1]
        key = key.pad([(0, 0)] * len(batch) + [(0, p - n)], sentinel)
        key, idx, _ = _network(key, _iota(p, t).expand(batch + (p,)), [], descending)
        keep = [(0, s) for s in batch] + [(0, n)]
        key, idx = key.shrink(keep), idx.shrink(keep)
        return (key.astype(dt.bool_) if t.dtype.is_bool else key), idx

    def backward(idx: Tensor, ct: tuple[Tensor, Any]) -> tuple[Tensor]:
        n = idx.shape[-1]
        p = 1 << max(n - 1, 1).bit_length()
        pads = [(0, 0)] * (idx.ndim - 1) + [(0, p - n)]
        fill = _iota(p, idx).expand(idx.shape[:-1] + (p,))                # pad slots keep indices >= n
        order = where(fill < n, idx.pad(pads), fill)
        _, _, (g,) = _network(order, order, [ct[0].pad(pads)], False)
        return (g.shrink([(0, s) for s in idx.shape]),)

    def forward(t: Tensor) -> tuple[tuple[Tensor, Tensor], Tensor]:
        out = run(t)
        return out, out[1]

    run.defvjp(forward, backward)
    return run(x)


def _network(key: Tensor, idx: Tensor, payloads: list[Tensor], descending: bool):
    """Sort (key, idx) pairs along the last axis (a power of two long), moving ``payloads`` along."""
    p = key.shape[-1]
    size = 2
    while size <= p:
        key, idx, payloads = _stage(key, idx, payloads, size // 2, True, descending)
        half = size // 4
        while half >= 1:
            key, idx, payloads = _stage(key, idx, payloads, half, False, descending)
            half //= 2
        size *= 2
    return key, idx, payloads


def _stage(key: Tensor, idx: Tensor, payloads: list[Tensor], half: int, mirror: bool, descending: bool):
    """One compare-exchange stage: element ``t`` of each block of ``2 * half`` is compared with
    element ``t + half`` or, when ``mirror``, with its mirror image ``2 * half - 1 - t`` (that form
    merges two ascending runs, so no stage needs a reversed direction)."""
    shape = key.shape
    blocks = shape[:-1] + (shape[-1] // (2 * half), 2, half)

    def halves(t: Tensor) -> tuple[Tensor, Tensor]:
        t2 = t.reshape(blocks)
        a, b = t2.shrink(_part(blocks, 0)), t2.shrink(_part(blocks, 1))
        return (a, b.flip(-1)) if mirror else (a, b)

    (ka, kb), (ia, ib) = halves(key), halves(idx)
    swap = _before(kb, ka, descending) | (_same(ka, kb) & (ib < ia))

    def exchange(t: Tensor) -> Tensor:
        a, b = halves(t)
        lo, hi = where(swap, b, a), where(swap, a, b)
        return cat([lo, hi.flip(-1) if mirror else hi], -2).reshape(shape).contiguous()

    return exchange(key), exchange(idx), [exchange(t) for t in payloads]


def _part(blocks: tuple[int, ...], which: int) -> list[tuple[int, int]]:
    return [(0, s) for s in blocks[:-2]] + [(which, which + 1), (0, blocks[-1])]


# --- public sorting ------------------------------------------------------------------------------
def _sort(x: Any, axis: int | None, descending: bool, k: int | None = None,
          method: str | None = None) -> ValuesIndices:
    """Sorted values and indices along ``axis`` (flattened if None), the first ``k`` if given."""
    x = _tensor(x)
    if axis is None:
        x, a = x.reshape(-1), 0
    else:
        a = axis_of(axis, x.ndim)
    if x.ndim == 0:
        return ValuesIndices(x, x._const(0, dt.int64, ()))
    n = x.shape[a]
    k = n if k is None else k
    # the elements are compared with each other at different positions of one kernel: a computed
    # input (x.exp()) fused there is evaluated once per position, by the vectorized and the
    # scalar libm in turn, whose results can differ in the last place, so ranks collided (sort of
    # exp([0.5, -1, 2, 0]) gave [0.37, 1.0, 1.65, 1.0]). Stored first, each element has one value.
    y = moveaxis(x.contiguous() if n > 1 else x, a, -1)
    if n <= 1 or k == 0:
        keep = [(0, s) for s in y.shape[:-1]] + [(0, k)]
        values, indices = y.shrink(keep), x._const(0, dt.int64, y.shape[:-1] + (k,))
    elif (method or ("counting" if y.size * n <= COUNTING_WORK else "bitonic")) == "counting":
        values, indices = _counting(y, descending, k)
    else:
        values, indices = _bitonic(y, descending)
        if k < n:
            keep = [(0, s) for s in y.shape[:-1]] + [(0, k)]
            values, indices = values.shrink(keep), indices.shrink(keep)
    indices = moveaxis(indices, -1, a)
    if x.node.traced and x.dtype.is_float and n > 1 and k:
        # (being differentiated: the values read at the indices, one gather whose gradient is the
        # exact scatter back; the sort's own selection multiplies by one-hot masks, and 0 * inf
        # made the gradient nan at infinite elements)
        from .indexing import gather_prim

        return ValuesIndices(gather_prim(x, indices, a), indices)
    return ValuesIndices(moveaxis(values, -1, a), indices)


def sort(x: Tensor, axis: int | None = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """``x`` sorted along ``axis`` (the flattened tensor if None), stable, same dtype.

    Ascending puts nan last; ``descending=True`` puts nan first and keeps equal values in input
    order. Differentiable: the gradient is the cotangent permuted back. IndexError for a bad axis.

    >>> sort(cv.Tensor([3.0, float("nan"), 1.0])).tolist()
    [1.0, 3.0, nan]
    """
    return _sort(x, axis, descending).values


def argsort(x: Tensor, axis: int | None = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """The int64 indices that sort ``x`` along ``axis`` (see :func:`sort`); equals
    ``np.argsort(x, kind="stable")`` for ascending order.

    Ascending puts nan last, ``descending=True`` first; equal values keep their input order in both
    directions (so descending is not the reverse of ascending, unlike ``np.argsort(x)[::-1]``).

    >>> x = cv.asarray([3.0, cv.nan, 1.0, 3.0])
    >>> cv.argsort(x), cv.argsort(x, descending=True)
    (Tensor([2, 0, 3, 1]), Tensor([1, 0, 3, 2]))
    """
    return _sort(x, axis, descending).indices


def topk(x: Tensor, k: int, axis: int = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:
    """The ``k`` largest (or smallest) values along ``axis`` and their int64 indices, in sorted
    order (also when ``sorted=False``); ties keep input order, nan counts as the largest.
    ValueError unless ``0 <= k <= x.shape[axis]``.

    Returns a named tuple ``(values, indices)``, as PyTorch's ``topk``.

    >>> values, indices = cv.topk(cv.asarray([1, 5, 3, 5]), 2)
    >>> values, indices
    (Tensor([5, 5]), Tensor([1, 3]))
    >>> cv.topk(cv.asarray([1.0, 5.0, 3.0]), 2, largest=False).values
    Tensor([1., 3.])
    """
    x = _tensor(x)
    a = axis_of(axis, x.ndim)
    n = x.shape[a] if x.ndim else 1
    if not isinstance(k, int) or not 0 <= k <= n:
        raise ShapeError(f"topk: k={k} is out of range for axis {a} of size {n} (shape {x.shape})")
    return _sort(x, a, largest, k)


def searchsorted(x1: Tensor, x2: Any, side: str = "left", sorter: Any = None) -> Tensor:
    """Indices where the values ``x2`` would be inserted into the sorted ``x1`` to keep it sorted.

    ``x1`` is 1-D (numpy), or (..., n) with ``x2`` of shape (..., m) sharing the leading axes
    (torch). ``side='left'`` gives the first suitable index, ``'right'`` the last; nan sorts last.
    Returns int64 of ``x2``'s shape. ``sorter`` (indices that sort ``x1``) is accepted and only
    checked, since the count does not depend on the order of ``x1``.
    ValueError for a bad ``side``, shape or sorter.

    >>> edges = cv.asarray([1, 3, 5, 7])
    >>> cv.searchsorted(edges, cv.asarray([0, 3, 6, 8]))
    Tensor([0, 1, 3, 4])
    >>> edges.searchsorted(cv.asarray([3]), side="right")
    Tensor([2])
    """
    from ..tensor import result_type

    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    x1 = _tensor(x1)
    if x1.ndim == 0:
        raise ValueError("searchsorted: x1 must have at least 1 dimension, got a 0-d tensor")
    v = x2 if not isinstance(x2, (bool, int, float)) else x1._const(x2, result_type(x1, x2), ())
    v = _tensor(v)
    if sorter is not None and tuple(_tensor(sorter).shape) != x1.shape:
        raise ShapeError(f"searchsorted: sorter of shape {_tensor(sorter).shape} does not match x1 {x1.shape}")
    if x1.ndim > 1 and (v.ndim != x1.ndim or v.shape[:-1] != x1.shape[:-1]):
        raise ShapeError(f"searchsorted: x2 of shape {v.shape} must share the leading axes of x1 {x1.shape}")
    common = result_type(x1, v)
    seq, vals = _key(x1.astype(common)), _key(v.astype(common))
    if x1.ndim == 1:
        seq_b, val_b = seq, vals.unsqueeze(-1)                          # (n,), (..., 1)
    else:
        seq_b, val_b = seq.unsqueeze(-2), vals.unsqueeze(-1)            # (..., 1, n), (..., m, 1)
    hit = _before(seq_b, val_b, False) if side == "left" else ~_before(val_b, seq_b, False)
    if x1.shape[-1] == 0:
        return v._const(0, dt.int64, v.shape)
    return hit.sum(-1)


# --- unique (data-dependent shapes) ------------------------------------------------------------
class UniqueAll(NamedTuple):
    values: Tensor
    indices: Tensor
    inverse_indices: Tensor
    counts: Tensor


class UniqueCounts(NamedTuple):
    values: Tensor
    counts: Tensor


class UniqueInverse(NamedTuple):
    values: Tensor
    inverse_indices: Tensor


def _unique(x: Any) -> UniqueAll:
    """All four unique outputs (unused ones are never computed: they stay lazy).

    Each nan is its own value (Array API; numpy's ``equal_nan=False``); ``-0.0`` equals ``0.0``
    and the first occurrence's value is kept. Values come out sorted."""
    x = _tensor(x)
    flat = x.reshape(-1)
    n = flat.shape[0]
    if n == 0:
        empty = flat._const(0, dt.int64, (0,))
        return UniqueAll(flat, empty, x._const(0, dt.int64, x.shape), empty)
    values, perm = _sort(flat, 0, False)
    if n > 1:
        s = values.astype(dt.uint8) if values.dtype.is_bool else values
        new = s.shrink(((1, n),)).ne(s.shrink(((0, n - 1),)))          # nan != nan: each nan is new
        first = cat([flat._const(True, dt.bool_, (1,)), new])
    else:
        first = flat._const(True, dt.bool_, (1,))
    group = cumsum(first) - 1                                           # (n,) group of each sorted slot
    u = int(first.sum().item())
    slot = _iota(u, x).reshape(u, 1)
    in_group = group.reshape(1, n).eq(slot)                             # (u, n)
    heads = (in_group & first.reshape(1, n))
    head_pos = where(heads, _iota(n, x).reshape(1, n), 0).sum(-1)      # sorted slot of each group's head
    uniq = take_at(values, head_pos, 0)
    indices = where(heads, perm.reshape(1, n), 0).sum(-1)
    counts = in_group.sum(-1)
    inverse = where(perm.reshape(n, 1).eq(_iota(n, x).reshape(1, n)), group.reshape(n, 1), 0).sum(0)
    return UniqueAll(uniq, indices, inverse.reshape(x.shape), counts)


def unique_all(x: Tensor) -> UniqueAll:
    """Sorted distinct values of ``x`` (flattened), the index of each one's first occurrence, the
    inverse indices (``values[inverse] == x``, shape of ``x``) and the counts; indices are int64.

    Each nan is distinct. Realizes one scalar (the number of distinct values), so it cannot be
    used inside ``vmap`` or ``jit``; the values stay differentiable.

    >>> u = cv.unique_all(cv.asarray([3, 1, 3, 2, 1]))
    >>> u.values, u.indices, u.counts
    (Tensor([1, 2, 3]), Tensor([1, 3, 0]), Tensor([2, 1, 2]))
    >>> u.inverse_indices
    Tensor([2, 0, 2, 1, 0])
    """
    return _unique(x)


def unique_counts(x: Tensor) -> UniqueCounts:
    """Sorted distinct values of ``x`` and how often each occurs (see :func:`unique_all`).

    >>> values, counts = cv.unique_counts(cv.asarray([3, 1, 3, 2, 1]))
    >>> values, counts
    (Tensor([1, 2, 3]), Tensor([2, 1, 2]))
    """
    out = _unique(x)
    return UniqueCounts(out.values, out.counts)


def unique_inverse(x: Tensor) -> UniqueInverse:
    """Sorted distinct values of ``x`` and the inverse indices (see :func:`unique_all`).

    The inverse indices have ``x``'s shape: ``values[inverse_indices]`` rebuilds ``x``.

    >>> values, inverse = cv.unique_inverse(cv.asarray([[3, 1], [3, 2]]))
    >>> values
    Tensor([1, 2, 3])
    >>> inverse
    Tensor([[2, 0],
            [2, 1]])
    """
    out = _unique(x)
    return UniqueInverse(out.values, out.inverse_indices)


def unique_values(x: Tensor) -> Tensor:
    """Sorted distinct values of ``x`` (flattened; see :func:`unique_all`).

    Each nan is its own value (as the Array API says; numpy's ``unique`` merges them by default),
    and -0.0 equals 0.0.

    >>> cv.unique_values(cv.asarray([3, 1, 3, 2, 1]))
    Tensor([1, 2, 3])
    >>> cv.unique_values(cv.asarray([1.0, cv.nan, cv.nan]))
    Tensor([ 1., nan, nan])
    """
    return _unique(x).values


def _attach() -> None:
    from ..tensor import Tensor

    for name in ("sort", "argsort", "topk", "searchsorted"):
        setattr(Tensor, name, globals()[name])


_attach()

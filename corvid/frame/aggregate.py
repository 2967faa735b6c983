"""Aggregations of a column: over all its rows, or per group.

Per group, every aggregation is a scatter into one slot per group (corvid's SCATTER primitive:
one O(n) kernel that combines values in row order, with no atomics): ``sum`` adds the values,
``count`` adds ones, ``min``/``max`` combine from the identity, ``mean`` is the two, ``var`` and
``std`` a second pass over the deviations from the group means gathered back to the rows (two
passes, as numerically sound as pandas' Welford update), ``first``/``last`` the least or
greatest row index per group, then a gather. Rows that take no part (nulls, rows a filter
dropped, rows of null keys) get slot -1, which the scatter drops; so a filter followed by a
grouped sum never compacts the table. The values themselves are computed inside the scatter's
input, fused. ``median`` and ``quantile`` sort on the host (numpy).

Null results follow pandas: the sum of a group without values is 0, its count 0, every other
aggregation null; ``var``/``std`` (``ddof=1``) of one value is null.
"""

from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..ops.elementwise import where
from ..ops.indexing import gather_prim, scatter_prim
from ..tensor import Tensor
from .column import Column, host, iota, take, tensor_of
from .types import ColumnType, column_type

__all__ = ["AGGREGATIONS", "group_reduce", "reduce_column"]

AGGREGATIONS = ("sum", "mean", "min", "max", "count", "std", "var", "first", "last", "median", "null_count",
                "n_unique", "size", "any", "all")

_F64 = column_type("float64")
_I64 = column_type("int64")


def _check(how: str, t: ColumnType) -> None:
    if how not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {how!r}; choose one of {', '.join(AGGREGATIONS)}")
    if t.kind == "str" and how not in ("min", "max", "count", "first", "last", "null_count", "n_unique", "size"):
        raise TypeError(f"{how} of a str column is not defined (min, max, count, first, last and n_unique are)")
    if t.kind == "datetime" and how in ("sum", "var", "std"):
        raise TypeError(f"{how} of a {t.name} column is not defined")
    if how in ("any", "all") and t.kind != "bool":
        raise TypeError(f"{how} needs a bool column, got {t.name}")


def result_type(how: str, t: ColumnType) -> ColumnType:
    """The type of ``how`` over a column of type ``t``."""
    if how in ("count", "null_count", "n_unique", "size"):
        return _I64
    if how in ("min", "max", "first", "last"):
        return t
    if how in ("any", "all"):
        return t
    if how == "sum":
        if t.kind == "bool" or (t.kind == "int" and t.dtype.kind == "i"):
            return _I64
        if t.kind == "int":
            return column_type("uint64")
        return t
    if t.is_temporal and how in ("mean", "median"):
        return t
    if t.is_temporal:
        return ColumnType("duration", dt.int64, t.unit)
    return t if t.kind == "float" and how != "var" else _F64 if t.kind != "float" else t


def _ok(col: Column, keep: Tensor | None) -> Tensor | None:
    if col.valid is None:
        return keep
    return col.valid if keep is None else col.valid & keep


def _identity(t: ColumnType, how: str) -> float | int | bool:
    d = t.dtype
    high = how == "min"
    if d.is_float:
        return float("inf") if high else float("-inf")
    if d.is_bool:
        return high
    info = np.iinfo(d.np)
    return int(info.max if high else info.min)


# --- all rows ---------------------------------------------------------------------------------
def reduce_column(how: str, col: Column, keep: Tensor | None = None, ddof: int = 1) -> Column:
    """``how`` over the rows of ``col`` that ``keep`` keeps (all when None): a 1-row Column
    (lazy, except ``median`` and ``n_unique``, which compute)."""
    _check(how, col.type)
    out_t = result_type(how, col.type)
    v, n = col.values, len(col)
    ok = _ok(col, keep)
    if how == "size":
        count = v._const(n, dt.int64, ()) if keep is None else keep.astype(dt.int64).sum()
        return Column(count.reshape(1), out_t)
    if how == "null_count":
        nulls = v._const(0, dt.int64, ()) if col.valid is None else \
            ((~col.valid) if keep is None else (~col.valid & keep)).astype(dt.int64).sum()
        return Column(nulls.reshape(1), out_t)
    count = v._const(n, dt.int64, ()) if ok is None else ok.astype(dt.int64).sum()
    if how == "count":
        return Column(count.reshape(1), out_t)
    if how in ("median", "n_unique"):
        return _host_reduce(how, col, ok, out_t)
    if n == 0 and how in ("min", "max", "first", "last"):
        return Column(v._const(0, out_t.dtype, (1,)), out_t, v._const(False, dt.bool_, (1,)), col.categories)
    if how in ("sum", "mean", "var", "std"):
        wide = dt.float64 if (col.type.kind == "float" or how != "sum") else out_t.dtype
        x = v.astype(wide) if ok is None else where(ok, v.astype(wide), 0)
        total = x.sum()
        if how == "sum":
            return Column(total.astype(out_t.dtype).reshape(1), out_t)
        mean = total / count.maximum(1).astype(dt.float64)
        if how == "mean":
            return _finish(mean.reshape(1), (count > 0).reshape(1), col.type, out_t)
        dev = v.astype(dt.float64) - mean
        sq = dev * dev if ok is None else where(ok, dev * dev, 0)
        var = sq.sum() / (count - ddof).maximum(1).astype(dt.float64)
        value = var.sqrt() if how == "std" else var
        return _finish(value.reshape(1), (count > ddof).reshape(1), col.type, out_t)
    if how in ("any", "all"):
        x = v if ok is None else where(ok, v, how == "all")
        value = x.any() if how == "any" else x.all()
        return Column(value.reshape(1), out_t)
    if how in ("min", "max"):
        x = v if ok is None else where(ok, v, v._const(_identity(col.type, how), v.dtype, ()))
        value = x.min() if how == "min" else x.max()
        return Column(value.reshape(1), out_t, (count > 0).reshape(1), col.categories)
    # first / last: the least or greatest row index that takes part
    rows = iota(n)
    pick = (where(ok, rows, n).min() if ok is not None else rows.min()) if how == "first" else \
        (where(ok, rows, -1).max() if ok is not None else rows.max())
    pick = where((pick >= 0) & (pick < n), pick, -1).reshape(1)
    return take(col, pick, maybe_missing=True)


def _finish(value: Tensor, valid: Tensor, src: ColumnType, out_t: ColumnType) -> Column:
    """A float64 statistic as ``out_t`` (a mean of datetimes is a datetime, of float32 float32)."""
    if out_t.dtype is not dt.float64:
        value = value.round().astype(out_t.dtype) if out_t.dtype.is_int else value.astype(out_t.dtype)
    return Column(value, out_t, valid)


def _host_reduce(how: str, col: Column, ok: Tensor | None, out_t: ColumnType) -> Column:
    values = host(col.values)
    if ok is not None:
        values = values[host(ok)]
    if how == "n_unique":
        return Column(tensor_of(np.array([len(np.unique(values))], np.int64)), out_t)
    if len(values) == 0:
        return Column(tensor_of(np.zeros(1, out_t.dtype.np)), out_t, tensor_of(np.zeros(1, bool)))
    med = np.median(values.astype(np.float64))
    return _finish(tensor_of(np.array([med])), tensor_of(np.ones(1, bool)), col.type, out_t)


# --- per group ---------------------------------------------------------------------------------
class Groups:
    """Which group each row falls in: ``codes`` (int64 per row, in ``[0, slots)``, -1 for rows that
    take part in no group) and ``pick`` (int64, the slot of each output group, in output order;
    None when the slots are the groups, in order)."""

    def __init__(self, codes: Tensor, slots: int, pick: Tensor | None, count: int):
        self.codes, self.slots, self.pick, self.count = codes, slots, pick, count

    def select(self, per_slot: Tensor) -> Tensor:
        return per_slot if self.pick is None else gather_prim(per_slot, self.pick, 0)


def _scatter(groups: Groups, init: float | bool, dtype: dt.DType, codes: Tensor, values: Tensor,
             mode: str = "sum") -> Tensor:
    target = codes._const(init, dtype, (groups.slots,))
    if codes.shape[0] == 0 or groups.slots == 0:
        return target
    return scatter_prim(target, 0, codes, values.astype(dtype), mode)


def group_reduce(how: str, col: Column, groups: Groups, ddof: int = 1) -> Column:
    """``how`` of ``col``'s values per group: a Column with one row per group (``groups.count``)."""
    _check(how, col.type)
    out_t = result_type(how, col.type)
    v, n = col.values, len(col)
    codes = groups.codes if col.valid is None else where(col.valid, groups.codes, -1)
    if how == "size":
        return Column(groups.select(_scatter(groups, 0, dt.int64, groups.codes, v._const(1, dt.int64, (n,)))), out_t)
    if how == "null_count":
        nulls = groups.codes if col.valid is None else where(col.valid, -1, groups.codes)
        src = v._const(1 if col.valid is not None else 0, dt.int64, (n,))
        return Column(groups.select(_scatter(groups, 0, dt.int64, nulls, src)), out_t)
    count = _scatter(groups, 0, dt.int64, codes, v._const(1, dt.int64, (n,)))
    if how == "count":
        return Column(groups.select(count), out_t)
    if how in ("median", "n_unique"):
        return _host_group(how, col, groups, out_t)
    has = groups.select(count) > 0
    if how in ("sum", "mean", "var", "std"):
        wide = dt.float64 if (col.type.kind == "float" or how != "sum") else out_t.dtype
        total = _scatter(groups, 0, wide, codes, v.astype(wide))
        if how == "sum":
            return Column(groups.select(total).astype(out_t.dtype), out_t)
        mean = total / count.maximum(1).astype(dt.float64)
        if how == "mean":
            return _finish(groups.select(mean), has, col.type, out_t)
        dev = v.astype(dt.float64) - gather_prim(mean, codes, 0)
        sq = _scatter(groups, 0, dt.float64, codes, dev * dev)
        var = sq / (count - ddof).maximum(1).astype(dt.float64)
        value = var.sqrt() if how == "std" else var
        return _finish(groups.select(value), groups.select(count) > ddof, col.type, out_t)
    if how in ("any", "all"):
        hits = _scatter(groups, 0, dt.int64, codes, v.astype(dt.int64))
        value = hits > 0 if how == "any" else hits.eq(count)
        return Column(groups.select(value), out_t)
    if how in ("min", "max"):
        value = _scatter(groups, _identity(col.type, how), v.dtype, codes, v, "amin" if how == "min" else "amax")
        return Column(groups.select(value), out_t, has, col.categories)
    rows = _scatter(groups, n if how == "first" else -1, dt.int64, codes, iota(n), "amin" if how == "first" else "amax")
    rows = groups.select(rows)
    return take(col, where(has, rows, -1), maybe_missing=True)


def _host_group(how: str, col: Column, groups: Groups, out_t: ColumnType) -> Column:
    """median / n_unique per group, on the host: sort by (group, value), then read positions."""
    codes = host(groups.codes if col.valid is None else where(col.valid, groups.codes, -1))
    values = host(col.values)
    part = codes >= 0
    codes, values = codes[part], values[part]
    order = np.lexsort((values, codes))
    codes, values = codes[order], values[order]
    counts = np.bincount(codes, minlength=groups.slots)
    starts = np.cumsum(counts) - counts
    pick = np.arange(groups.slots) if groups.pick is None else host(groups.pick)
    counts, starts = counts[pick], starts[pick]
    if how == "n_unique":
        new = np.ones(len(values), bool)
        new[1:] = (values[1:] != values[:-1]) | (codes[1:] != codes[:-1])
        firsts = np.cumsum(new)
        ends = starts + counts
        uniq = np.where(counts > 0, firsts[np.maximum(ends - 1, 0)] - np.where(starts > 0, firsts[
            np.maximum(starts - 1, 0)], 0), 0) if len(values) else np.zeros(len(pick), np.int64)
        return Column(tensor_of(uniq.astype(np.int64)), out_t)
    f = values.astype(np.float64)
    lo = starts + np.maximum(counts - 1, 0) // 2
    hi = starts + counts // 2
    safe = lambda i: f[np.clip(i, 0, max(len(f) - 1, 0))] if len(f) else np.zeros(len(i))
    med = (safe(lo) + safe(hi)) / 2
    return _finish(tensor_of(med), tensor_of(counts > 0), col.type, out_t)

"""Key columns to dense integer codes: the first step of a group-by, a join and a pivot.

Each row gets a *slot*: an int64 in ``[0, slots)``, equal for equal keys, ordered as the keys
are (so slots come out sorted), or -1 for a row that takes part in nothing (a null key, a row a
filter dropped). Two ways to a key's slot, by the spread of its values:

* **direct**: integer-like keys (integers, bools, datetimes, durations, and strings, whose codes
  already are dense) whose range ``max - min + 1`` is at most ``DIRECT_LIMIT`` times the rows
  (and under ``DIRECT_MAX`` slots) use ``key - min`` itself: one min/max reduction, nothing
  sorted or hashed. Group ids, category codes, years, small counts: most keys. A range with
  gaps leaves empty slots, which :func:`group` drops after counting the rows per slot (one
  scatter). 10M rows over 1M keys: ~30 ms here, where pandas' hash table takes ~550 ms.
* **sorted**: any other key (floats, sparse integers such as timestamps or hashed ids) is
  factorized on the host with ``numpy.unique`` (a sort): O(n log n), slower than pandas' hash
  table on 10M sparse keys (about 2x); see docs/frame.md.

Several keys combine into one slot ``s1 * slots2 + s2`` (mixed radix) while the product of their
slot counts stays under ``DIRECT_MAX``, else the combined codes are factorized again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import dtype as dt
from ..ops.elementwise import where
from ..ops.indexing import gather_prim, scatter_prim
from ..ops.movement import cat
from ..tensor import Tensor
from .aggregate import Groups
from .column import Column, host, iota, tensor_of
from .types import STR

__all__ = ["group", "slot_codes"]

DIRECT_LIMIT = 4  # a range up to this many slots per row is used directly
DIRECT_MIN = 1 << 16  # ... and any range up to this
DIRECT_MAX = 1 << 27  # never more slots than this (counts of 1 GiB)

Decode = Callable[[np.ndarray], list[Column]]  # slots -> the key columns' values at those slots


def _one_key(col: Column, ok: Tensor | None, null_slot: bool, n_rows: int) -> tuple[Tensor, int, Decode]:
    """Slots of one key column: (codes, slot count, decode). Rows where ``ok`` is false get -1;
    null keys get -1, or with ``null_slot`` the last slot (whose key is null)."""
    t = col.type
    valid = col.valid
    part = ok if valid is None else (valid if ok is None else valid & ok)
    if t.kind == "str" or t.kind == "bool":
        size = len(col.categories) if t.kind == "str" else 2
        raw, low = col.values.astype(dt.int64), 0
        decode_values = _decode_range(col, 0)
    elif t.kind == "float":
        return _sorted_key(col, part, ok, null_slot)
    else:
        v = col.values.astype(dt.int64) if col.values.dtype is not dt.uint64 else None
        if v is None:
            return _sorted_key(col, part, ok, null_slot)
        big = np.iinfo(np.int64)
        lo_in = v if part is None else where(part, v, big.max)
        hi_in = v if part is None else where(part, v, big.min)
        if len(col) == 0:
            lo, hi = 0, -1
        else:
            lo, hi = (int(x) for x in cat([lo_in.min().reshape(1), hi_in.max().reshape(1)]).numpy())
        if hi < lo:  # no rows take part
            lo, hi = 0, -1
        size = hi - lo + 1
        if size > max(DIRECT_LIMIT * n_rows, DIRECT_MIN) or size > DIRECT_MAX:
            return _sorted_key(col, part, ok, null_slot)
        raw, low = v - lo, lo
        decode_values = _decode_range(col, low)
    codes = raw if part is None else where(part, raw, -1)
    if null_slot and valid is not None:
        nulls = ~valid if ok is None else ~valid & ok
        codes = where(nulls, size, codes)

        def decode(slots: np.ndarray, inner: Decode = decode_values, size: int = size) -> list[Column]:
            (c,) = inner(np.minimum(slots, max(size - 1, 0)))
            miss = slots >= size
            if miss.any():
                c = c.replace(valid=tensor_of(~miss))
            return [c]

        return codes, size + 1, decode
    return codes, size, decode_values


def _decode_range(col: Column, low: int) -> Decode:
    def decode(slots: np.ndarray) -> list[Column]:
        values = (slots.astype(np.int64) + low)
        if col.type.kind == "str":
            return [Column(tensor_of(values.astype(np.int32)), STR, None, col.categories)]
        return [Column(tensor_of(values.astype(col.type.dtype.np)), col.type)]
    return decode


def _sorted_key(col: Column, part: Tensor | None, ok: Tensor | None, null_slot: bool) -> tuple[Tensor, int, Decode]:
    """Factorize on the host (numpy.unique): sorted uniques and each row's index among them."""
    values = host(col.values)
    take_rows = np.ones(len(values), bool) if part is None else host(part)
    uniq, inverse = np.unique(values[take_rows], return_inverse=True)
    codes = np.full(len(values), -1, np.int64)
    codes[take_rows] = inverse
    size = len(uniq)
    if null_slot and col.valid is not None:
        nulls = ~host(col.valid)
        if ok is not None:
            nulls &= host(ok)
        codes[nulls] = size
        size += 1

    def decode(slots: np.ndarray) -> list[Column]:
        miss = slots >= len(uniq)
        vals = uniq[np.minimum(slots, max(len(uniq) - 1, 0))] if len(uniq) else np.zeros(len(slots), values.dtype)
        c = Column(tensor_of(vals.astype(values.dtype)), col.type)
        return [c.replace(valid=tensor_of(~miss)) if miss.any() else c]

    return tensor_of(codes), size, decode


def slot_codes(keys: Sequence[Column], ok: Tensor | None, dropna: bool = True) -> tuple[Tensor, int, Decode]:
    """Slots of the rows of several key columns (see the module docstring): (codes, slot count,
    decode). ``ok`` (bool per row, or None) says which rows take part; with ``dropna`` a row with
    a null key takes no part, without it each key's nulls are a slot of their own (its last)."""
    n = len(keys[0])
    parts = [_one_key(k, ok, not dropna, n) for k in keys]
    if len(parts) == 1:
        return parts[0]
    total = 1
    for _, size, _ in parts:
        total *= max(size, 1)
    codes, missing = None, None
    if total <= DIRECT_MAX:
        for c, size, _ in parts:
            codes = c if codes is None else codes * size + c
            miss = c < 0
            missing = miss if missing is None else missing | miss
        codes = where(missing, -1, codes)
        sizes = [size for _, size, _ in parts]

        def decode(slots: np.ndarray) -> list[Column]:
            out, rest = [], slots.astype(np.int64)
            digits = []
            for size in reversed(sizes):
                digits.append(rest % max(size, 1))
                rest = rest // max(size, 1)
            for (_, _, dec), d in zip(parts, reversed(digits)):
                out += dec(d)
            return out

        return codes, total, decode
    # too many combinations for one range: factorize the rows of key slots on the host
    stacked = np.stack([host(c) for c, _, _ in parts], axis=1)
    rows = (stacked >= 0).all(axis=1)
    uniq, inverse = np.unique(stacked[rows], axis=0, return_inverse=True)
    codes_np = np.full(n, -1, np.int64)
    codes_np[rows] = inverse.reshape(-1)

    def decode_rows(slots: np.ndarray) -> list[Column]:
        out = []
        for k, (_, _, dec) in enumerate(parts):
            out += dec(uniq[slots, k] if len(uniq) else np.zeros(len(slots), np.int64))
        return out

    return tensor_of(codes_np), len(uniq), decode_rows


def group(keys: Sequence[Column], keep: Tensor | None, dropna: bool = True, sort: bool = True
          ) -> tuple[Groups, list[Column]]:
    """Groups of the rows by ``keys`` (only rows ``keep`` keeps), and the key columns of the
    groups (one row per group: sorted by key, nulls last; or, with ``sort=False``, in the order
    each group first appears). Computes: the slots' counts decide which groups exist."""
    codes, slots, decode = slot_codes(keys, keep, dropna)
    n = len(keys[0])
    if slots == 0 or n == 0:
        empty = np.zeros(0, np.int64)
        return Groups(codes, slots, tensor_of(empty), 0), decode(empty)
    ones = codes._const(1, dt.int64, (n,))
    counts = host(scatter_prim(codes._const(0, dt.int64, (slots,)), 0, codes, ones))
    present = np.flatnonzero(counts).astype(np.int64)
    if not sort and len(present) > 1:
        first = scatter_prim(codes._const(n, dt.int64, (slots,)), 0, codes, iota(n), "amin")
        first_rows = host(gather_prim(first, tensor_of(present), 0))
        present = present[np.argsort(first_rows, kind="stable")]
    pick = None if len(present) == slots and sort else tensor_of(present)
    return Groups(codes, slots, pick, len(present)), decode(present)


def dense_codes(keys: Sequence[Column], keep: Tensor | None = None, dropna: bool = False
                ) -> tuple[Tensor, int, list[Column]]:
    """Each row's group number in ``[0, groups)`` (groups sorted by key; -1 for rows in none),
    the number of groups and the key columns of the groups."""
    groups, key_cols = group(keys, keep, dropna)
    if groups.pick is None:
        return groups.codes, groups.count, key_cols
    table = np.full(max(groups.slots, 1), -1, np.int64)
    table[host(groups.pick)] = np.arange(groups.count)
    codes = groups.codes
    dense = where(codes >= 0, gather_prim(tensor_of(table), codes, 0), -1)
    return dense, groups.count, key_cols

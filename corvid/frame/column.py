"""A column: a 1-D tensor of values, an optional validity mask, and its type.

``Column`` is the storage under :class:`~corvid.frame.Series` and every
:class:`~corvid.frame.DataFrame` column. Its tensors are lazy like any corvid tensor: building a
column from another (a cast, a gather, an arithmetic expression) runs nothing until a value is
needed. Strings are codes into a sorted dictionary (``categories``, a numpy object array held on
the host); two string columns with different dictionaries are brought onto their merged
dictionary (:func:`unify`) before codes are compared, concatenated or joined.

A null's slot in ``values`` holds an unspecified value; everything that reads values reads
``valid`` too. ``valid is None`` means "no nulls" and costs nothing.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtype as dt
from ..creation import arange
from ..dlpack import export_view
from ..dlpack import from_numpy as _wrap_numpy
from ..ops.elementwise import where
from ..ops.indexing import gather_prim
from ..ops.movement import cat
from ..tensor import Tensor
from .types import STR, ColumnType, column_type, from_numpy_dtype, unit_scale

__all__ = ["Column", "as_column", "take", "unify"]


def tensor_of(a: np.ndarray) -> Tensor:
    """A CPU tensor over a numpy array (no copy when it is contiguous and aligned)."""
    a = np.ascontiguousarray(a)
    if a.dtype == np.float16:
        a = a.astype(np.float32)
    return _wrap_numpy(a)


def iota(n: int) -> Tensor:
    """0, 1, ..., n-1 as a lazy int64 tensor (no buffer: it is computed inside its consumer)."""
    return arange(n, dtype=dt.int64)


def host(t: Tensor) -> np.ndarray:
    """The values of a tensor as a read-only numpy view of its buffer (computes it; a copy where
    the buffer cannot be viewed)."""
    try:
        a = export_view(t)
    except BufferError:
        return t.numpy()
    a.flags.writeable = False
    return a


class Column:
    """Values (a 1-D tensor), validity (a bool tensor or None) and a :class:`ColumnType`;
    ``categories`` is the sorted dictionary of a string column."""

    __slots__ = ("categories", "type", "valid", "values")

    def __init__(self, values: Tensor, type: ColumnType, valid: Tensor | None = None,
                 categories: np.ndarray | None = None):
        self.values, self.type, self.valid = values, type, valid
        self.categories = categories if type.kind == "str" else None
        if type.kind == "str" and categories is None:
            self.categories = np.array([], dtype=object)

    def __len__(self) -> int:
        return self.values.shape[0]

    def replace(self, values: Tensor | None = None, valid: Any = ..., type: ColumnType | None = None,
                categories: Any = ...) -> Column:
        return Column(self.values if values is None else values, self.type if type is None else type,
                      self.valid if valid is ... else valid, self.categories if categories is ... else categories)

    def valid_or_true(self) -> Tensor:
        """The validity as a bool tensor (all true without nulls)."""
        if self.valid is not None:
            return self.valid
        return self.values._const(True, dt.bool_, self.values.shape)

    def null_count(self) -> Tensor:
        """The number of nulls, a lazy int64 scalar."""
        if self.valid is None:
            return self.values._const(0, dt.int64, ())
        return (~self.valid).astype(dt.int64).sum()

    def realize(self) -> Column:
        """Compute the values and the validity (in one schedule)."""
        from ..tensor import realize

        realize(*[t for t in (self.values, self.valid) if t is not None])
        return self

    def to_numpy(self) -> np.ndarray:
        """The values as numpy, nulls as NaN (floats; ints and bools with nulls become float64),
        None (strings) or NaT (datetimes, durations)."""
        values = host(self.values)
        valid = None if self.valid is None else host(self.valid)
        kind = self.type.kind
        if kind == "str":
            cats = self.categories
            out = cats[np.clip(values, 0, max(len(cats) - 1, 0))] if len(cats) else np.full(len(values), None, object)
            out = np.asarray(out, dtype=object)
            if valid is not None:
                out[~valid] = None
            return out
        if kind in ("datetime", "duration"):
            out = values.view(self.type.np).copy()
            if valid is not None:
                out[~valid] = np.array("NaT", dtype=out.dtype)
            return out
        if valid is None or valid.all():
            return values.copy()
        out = values.astype(np.float64) if kind != "float" else values.copy()
        out[~valid] = np.nan
        return out

    def to_list(self) -> list:
        """Python values, None for nulls (datetimes as ``numpy.datetime64``)."""
        kind = self.type.kind
        values = self.to_numpy() if kind in ("str", "datetime", "duration") else host(self.values)
        valid = np.ones(len(values), bool) if self.valid is None else host(self.valid)
        if kind in ("datetime", "duration"):
            return [v if ok else None for v, ok in zip(values, valid)]
        items = values.tolist()
        return [v if ok else None for v, ok in zip(items, valid)]


# --- building columns from data -------------------------------------------------------------------
def _strings(values: np.ndarray, valid: np.ndarray | None) -> Column:
    """Dictionary-encode an array of strings (None where ``valid`` is false)."""
    values = np.asarray(values, dtype=object)
    if valid is None:
        valid_np = np.array([v is not None for v in values], dtype=bool) if values.dtype == object else None
        if valid_np is not None and valid_np.all():
            valid_np = None
    else:
        valid_np = valid
    present = values if valid_np is None else values[valid_np]
    bad = [v for v in present[:1000] if not isinstance(v, str)]
    if bad:
        raise TypeError(f"a str column holds only strings and None, got {type(bad[0]).__name__} {bad[0]!r}")
    cats, inverse = np.unique(present.astype(str), return_inverse=True) if len(present) else (np.array([], str), np.zeros(0, np.int64))
    codes = np.zeros(len(values), np.int32)
    if valid_np is None:
        codes[:] = inverse
    else:
        codes[valid_np] = inverse
    return Column(tensor_of(codes), STR, None if valid_np is None else tensor_of(valid_np), cats.astype(object))


def from_categories(codes: np.ndarray, categories: np.ndarray, valid: np.ndarray | None = None) -> Column:
    """A string column from codes into ``categories`` (any order, duplicates allowed): the
    dictionary is sorted and deduplicated, and the codes remapped (on the host: the dictionary
    is small next to the column)."""
    cats = np.asarray(categories, dtype=object).astype(str)
    uniq, inverse = np.unique(cats, return_inverse=True)
    codes = np.asarray(codes)
    if valid is not None:
        codes = np.where(valid, codes, 0)
    remap = inverse.astype(np.int32)
    new = remap[codes] if len(remap) else np.zeros(len(codes), np.int32)
    return Column(tensor_of(new.astype(np.int32)), STR, None if valid is None else tensor_of(valid), uniq.astype(object))


def _object_column(values: np.ndarray) -> Column:
    """A column from a Python list/object array: None is null; the others decide the type."""
    valid = np.array([v is not None and v is not np.ma.masked for v in values], dtype=bool)
    present = [v for v, ok in zip(values, valid) if ok]
    kinds = {type(v) for v in present}
    if not present:
        return Column(tensor_of(np.zeros(len(values), np.float64)), column_type("float64"),
                      tensor_of(valid) if len(values) else None)
    if all(issubclass(k, str) for k in kinds):
        return _strings(values, valid if not valid.all() else None)
    if all(issubclass(k, (bool, np.bool_)) for k in kinds):
        filled, ctype = np.array([bool(v) if ok else False for v, ok in zip(values, valid)]), None
    elif all(issubclass(k, (datetime.datetime, datetime.date, np.datetime64)) for k in kinds):
        filled = np.array([np.datetime64(v) if ok else np.datetime64("NaT") for v, ok in zip(values, valid)])
        if filled.dtype.str.endswith("[D]"):
            filled = filled.astype("datetime64[s]")
        ctype = None
    elif all(issubclass(k, (datetime.timedelta, np.timedelta64)) for k in kinds):
        filled, ctype = np.array([np.timedelta64(v) if ok else np.timedelta64("NaT") for v, ok in zip(values, valid)]), None
    elif all(issubclass(k, (int, np.integer)) and not issubclass(k, (bool, np.bool_)) for k in kinds):
        filled, ctype = np.array([v if ok else 0 for v, ok in zip(values, valid)], dtype=np.int64), None
    elif all(issubclass(k, (int, float, np.integer, np.floating)) for k in kinds):
        filled, ctype = np.array([float(v) if ok else 0.0 for v, ok in zip(values, valid)], dtype=np.float64), None
    else:
        names = sorted(k.__name__ for k in kinds)
        raise TypeError(f"a column's values must share one type (numbers, bools, strings, datetimes or durations, "
                        f"with None for nulls), got a mix of {', '.join(names)}")
    col = _from_array(filled, ctype)
    if not valid.all():
        col = col.replace(valid=tensor_of(valid))
    return col


def _from_array(a: np.ndarray, ctype: ColumnType | None = None) -> Column:
    if a.ndim != 1:
        raise ValueError(f"a column is 1-D, got an array of shape {a.shape}")
    if a.dtype.kind in ("U", "S", "T"):
        return _strings(a.astype(object), None)
    if a.dtype == object:
        return _object_column(a)
    t = ctype or from_numpy_dtype(a.dtype)
    valid = None
    if t.kind in ("datetime", "duration"):
        if np.datetime_data(a.dtype)[0] != t.unit:
            a = a.astype(t.np)
        nat = np.isnat(a)
        valid = ~nat if nat.any() else None
        a = a.view(np.int64)
    elif a.dtype != t.dtype.np:
        a = a.astype(t.dtype.np)
    return Column(tensor_of(a), t, None if valid is None else tensor_of(valid))


def as_column(data: Any, length: int | None = None, name: str = "column") -> Column:
    """A Column from a Tensor, a numpy array (masked arrays: masked entries are null), a list,
    a :class:`~corvid.frame.Series`, a pandas/polars/pyarrow 1-D object, or a scalar broadcast
    to ``length`` rows. Lists use None for nulls; NaN is a float value, not a null.

    >>> as_column([1, None, 3]).to_list()
    [1, None, 3]
    """
    from .series import Series

    if isinstance(data, Column):
        col = data
    elif isinstance(data, Series):
        col = data._compacted()
    elif isinstance(data, Tensor):
        if data.ndim != 1:
            raise ValueError(f"column {name!r}: a column is 1-D, got a tensor of shape {data.shape}")
        col = Column(data, column_type(data.dtype))
    elif isinstance(data, np.ma.MaskedArray):
        col = _from_array(np.ma.getdata(data))
        mask = np.ma.getmaskarray(data)
        if mask.any():
            col = col.replace(valid=tensor_of(~mask))
    elif isinstance(data, np.ndarray):
        if data.ndim == 0:
            return as_column(data.item(), length, name)
        col = _from_array(data)
    elif isinstance(data, (list, tuple, range)):
        col = _from_array(np.array(list(data), dtype=object) if not isinstance(data, range) else np.arange(
            data.start, data.stop, data.step)) if len(data) else Column(tensor_of(np.zeros(0, np.float64)),
                                                                        column_type("float64"))
    elif _foreign(data):
        from .interop import foreign_column

        col = foreign_column(data)
    elif data is None or np.isscalar(data) or isinstance(data, (datetime.date, datetime.timedelta)):
        if length is None:
            raise ValueError(f"column {name!r}: a scalar needs a length")
        return broadcast_scalar(data, length)
    else:
        raise TypeError(f"column {name!r}: cannot make a column of {type(data).__name__}")
    if length is not None and len(col) != length:
        raise ValueError(f"column {name!r} has {len(col)} rows, expected {length} (as many as the other columns)")
    return col


def _foreign(data: Any) -> bool:
    mod = type(data).__module__.split(".")[0]
    return mod in ("pandas", "polars", "pyarrow")


def broadcast_scalar(value: Any, length: int, like: ColumnType | None = None) -> Column:
    """``length`` copies of a Python scalar (None: nulls of type ``like``, float64 without it)."""
    if value is None:
        t = like or column_type("float64")
        zero = Tensor(np.zeros(1, t.dtype.np)).expand(length) if length else tensor_of(np.zeros(0, t.dtype.np))
        valid = Tensor(np.zeros(1, bool)).expand(length) if length else tensor_of(np.zeros(0, bool))
        return Column(zero, t, valid, np.array([], object) if t.kind == "str" else None)
    one = as_column([value])
    if like is not None and like.kind == one.type.kind and like.kind in ("int", "float"):
        one = cast(one, like)
    if one.type.kind == "str":
        return Column(one.values.expand(length) if length else one.values[:0], STR, None, one.categories)
    values = one.values.expand(length) if length else one.values[:0]
    return Column(values, one.type)


# --- moving rows --------------------------------------------------------------------------------
def take(col: Column, idx: Tensor, maybe_missing: bool = False) -> Column:
    """The rows of ``col`` at ``idx`` (int64, in range; with ``maybe_missing``, -1 gives a null)."""
    values = gather_prim(col.values, idx, 0)
    valid = None if col.valid is None else gather_prim(col.valid, idx, 0)
    if maybe_missing:
        hit = idx >= 0
        valid = hit if valid is None else valid & hit
    return Column(values, col.type, valid, col.categories)


def slice_rows(col: Column, start: int, stop: int) -> Column:
    return Column(col.values[start:stop], col.type, None if col.valid is None else col.valid[start:stop],
                  col.categories)


# --- types ------------------------------------------------------------------------------------
def unify(cols: Sequence[Column]) -> list[Column]:
    """String columns recoded onto their merged, sorted dictionary (other columns as they are)."""
    if not all(c.type.kind == "str" for c in cols):
        return list(cols)
    cats = [c.categories for c in cols]
    if all(len(c) == len(cats[0]) and np.array_equal(c, cats[0]) for c in cats):
        return list(cols)
    merged = np.unique(np.concatenate([c.astype(str) for c in cats])) if any(len(c) for c in cats) \
        else np.array([], str)
    out = []
    for c in cols:
        if len(c.categories) == 0:
            out.append(c.replace(categories=merged.astype(object)))
            continue
        remap = np.searchsorted(merged, c.categories.astype(str)).astype(np.int32)
        codes = gather_prim(tensor_of(remap), c.values.astype(dt.int64), 0)
        out.append(Column(codes, STR, c.valid, merged.astype(object)))
    return out


def common_type(types: Sequence[ColumnType], what: str) -> ColumnType:
    """The type several columns (or a join's two keys) share, promoted as numpy would; TypeError
    when there is none (a string and a number, a datetime and a duration)."""
    kinds = {t.kind for t in types}
    if len(kinds) == 1 and kinds <= {"str", "bool"}:
        return types[0]
    if len(kinds) == 1 and kinds <= {"datetime", "duration"}:
        unit = max((t.unit for t in types), key=unit_scale)
        return ColumnType(types[0].kind, dt.int64, unit)
    if kinds <= {"int", "float", "bool"}:
        return from_numpy_dtype(np.result_type(*[t.dtype.np for t in types]))
    names = ", ".join(sorted({t.name for t in types}))
    raise TypeError(f"{what}: cannot combine columns of types {names}")


def cast(col: Column, to: Any) -> Column:
    """``col`` converted to type ``to`` (see :func:`~corvid.frame.types.column_type`).

    Numbers convert like numpy's ``astype``; strings parse to numbers, bools and datetimes (on the
    dictionary: each distinct string once), anything formats to strings. ValueError for a
    string that does not parse."""
    t = column_type(to)
    src = col.type
    if t == src:
        return col
    if src.kind == "str" and t.kind != "str":
        return _parse_strings(col, t)
    if t.kind == "str":
        return _format(col)
    if src.is_temporal and t.is_temporal:
        if src.kind != t.kind:
            raise TypeError(f"cannot cast {src.name} to {t.name}")
        f, g = unit_scale(t.unit), unit_scale(src.unit)
        values = col.values * (f // g) if f >= g else col.values // (g // f)
        return Column(values, t, col.valid)
    if src.is_temporal or t.is_temporal:
        if src.kind in ("int",) or t.kind in ("int",):  # the underlying counts
            return Column(col.values.astype(t.dtype), t, col.valid)
        raise TypeError(f"cannot cast {src.name} to {t.name}")
    if t.kind == "int" and src.kind == "float":
        values = where(col.values.isnan() | col.values.isinf(), 0, col.values).astype(t.dtype)
        return Column(values, t, col.valid)
    return Column(col.values.astype(t.dtype), t, col.valid)


def _parse_strings(col: Column, t: ColumnType) -> Column:
    cats = col.categories.astype(str)
    try:
        if t.kind == "bool":
            low = np.char.lower(cats) if len(cats) else cats
            ok = np.isin(low, ["true", "false", "1", "0"])
            if not ok.all():
                raise ValueError(f"{cats[~ok][0]!r} is not a bool")
            parsed = np.isin(low, ["true", "1"])
        elif t.is_temporal:
            parsed = cats.astype(t.np).view(np.int64)
        else:
            parsed = cats.astype(t.dtype.np)
    except ValueError as e:
        raise ValueError(f"cannot cast str to {t.name}: {e}") from None
    values = gather_prim(tensor_of(parsed if len(parsed) else np.zeros(1, t.dtype.np)), col.values.astype(dt.int64), 0)
    return Column(values, t, col.valid)


def _format(col: Column) -> Column:
    """Any column as strings (through numpy on the host: formatting is host work)."""
    values = col.to_numpy()
    valid = None if col.valid is None else host(col.valid)
    if col.type.kind == "float" and valid is not None:
        text = np.array([repr(float(v)) for v in values], dtype=object)
    elif col.type.kind == "bool":
        text = np.array(["true" if v else "false" for v in values], dtype=object)
    else:
        text = values.astype(str).astype(object)
    if valid is not None:
        text[~valid] = None
    return _strings(text, valid)


def concat_columns(cols: Sequence[Column], what: str = "concat") -> Column:
    """One column with the rows of ``cols`` one after another (types promoted, dictionaries merged)."""
    t = common_type([c.type for c in cols], what)
    cols = [cast(c, t) for c in cols]
    cols = unify(cols) if t.kind == "str" else cols
    values = cat([c.values for c in cols]) if len(cols) > 1 else cols[0].values
    valid = None
    if any(c.valid is not None for c in cols):
        valid = cat([c.valid_or_true() for c in cols]) if len(cols) > 1 else cols[0].valid
    return Column(values, t, valid, cols[0].categories if t.kind == "str" else None)

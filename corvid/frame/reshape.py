"""Reshaping: concat, pivot (long to wide), melt (wide to long), unique rows, dummy columns.

All of them move values with corvid ops: ``concat`` is one ``cat`` per column, ``melt`` a
``cat`` of the value columns and a gather of the id columns, ``pivot`` a group-by whose results
are scattered into a (rows x columns) grid, one column of it per distinct value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtype as dt
from ..ops.elementwise import where
from ..ops.indexing import gather_prim, scatter_prim
from .column import Column, broadcast_scalar, concat_columns, host, iota, take, tensor_of
from .errors import ColumnNotFoundError, check_columns
from .keys import dense_codes
from .types import STR, column_type

__all__ = ["concat", "melt", "pivot", "to_dummies", "unique_rows"]


def concat(frames: Sequence[Any], how: str = "vertical") -> Any:
    """Frames joined end to end.

    ``how="vertical"``: rows one after another; every frame has the same column names (ValueError
    naming the difference otherwise), types are promoted (int and float to float, string
    dictionaries merged; TypeError for types that do not mix). ``"diagonal"``: the union of the
    columns, nulls where a frame lacks one. ``"horizontal"``: columns side by side (same number of
    rows, distinct names).

    >>> import corvid.frame as cf
    >>> a = cf.DataFrame({"k": ["x"], "v": [1]})
    >>> b = cf.DataFrame({"k": ["y", "x"], "v": [2.5, None]})
    >>> cf.concat([a, b]).to_dict()
    {'k': ['x', 'y', 'x'], 'v': [1.0, 2.5, None]}
    """
    from .frame import DataFrame

    frames = [f._compact() for f in frames]
    if not frames:
        raise ValueError("concat: no frames")
    if how == "horizontal":
        n = frames[0]._n
        cols: dict[str, Column] = {}
        for f in frames:
            if f._n != n:
                raise ValueError(f"concat(how='horizontal'): frames of {n} and {f._n} rows")
            for k, c in f._cols.items():
                if k in cols:
                    raise ValueError(f"concat(how='horizontal'): column {k!r} is in two frames")
                cols[k] = c
        return DataFrame._make(cols, n)
    if how not in ("vertical", "diagonal"):
        raise ValueError(f"concat: how must be 'vertical', 'diagonal' or 'horizontal', got {how!r}")
    names = frames[0].columns
    if how == "vertical":
        for f in frames[1:]:
            if f.columns != names:
                missing = sorted(set(names) - set(f.columns))
                extra = sorted(set(f.columns) - set(names))
                raise ValueError(f"concat: frames have different columns (missing {missing}, extra {extra}, or "
                                 "another order); select the same columns, or use how='diagonal'")
    else:
        for f in frames[1:]:
            names += [c for c in f.columns if c not in names]
    out = {}
    for name in names:
        parts = []
        like = next(f._cols[name].type for f in frames if name in f._cols)
        for f in frames:
            parts.append(f._cols[name] if name in f._cols else broadcast_scalar(None, f._n, like))
        out[name] = concat_columns(parts, f"concat of column {name!r}")
    return DataFrame._make(out, sum(f._n for f in frames))


def melt(frame: Any, id_vars: Any = None, value_vars: Any = None, variable_name: str = "variable",
         value_name: str = "value") -> Any:
    """One row per (row, value column): the ``id_vars`` repeated, the value column's name in
    ``variable_name`` (a str column), its value in ``value_name`` (types promoted). The rows of
    the first value column come first, as pandas orders them. ``value_vars`` defaults to every
    column not in ``id_vars``.

    >>> import corvid.frame as cf
    >>> wide = cf.DataFrame({"day": [1, 2], "oslo": [3.0, 4.0], "lima": [19.0, 20.0]})
    >>> wide.melt("day", variable_name="city", value_name="temp").to_dict()
    {'day': [1, 2, 1, 2], 'city': ['oslo', 'oslo', 'lima', 'lima'], 'temp': [3.0, 4.0, 19.0, 20.0]}
    """
    from .frame import DataFrame, _names

    frame = frame._compact()
    ids = _names(id_vars)
    values = _names(value_vars) or [c for c in frame.columns if c not in ids]
    check_columns(ids + values, frame.columns)
    n, k = frame._n, len(values)
    rows = tensor_of(np.tile(np.arange(n, dtype=np.int64), k))
    cols = {name: take(frame._cols[name], rows) for name in ids}
    cats = np.unique(np.array(values, dtype=str))
    codes = np.repeat(np.searchsorted(cats, np.array(values, dtype=str)).astype(np.int32), n)
    cols[variable_name] = Column(tensor_of(codes), STR, None, cats.astype(object))
    cols[value_name] = concat_columns([frame._cols[v] for v in values], "melt of the value columns") if k else \
        broadcast_scalar(None, 0)
    return DataFrame._make(cols, n * k)


def pivot(frame: Any, index: Any, columns: str, values: str, aggregate: str = "first") -> Any:
    """One row per ``index`` key (sorted), one column per distinct value of ``columns`` (sorted,
    named by the value as text) holding ``aggregate`` (``first``, ``sum``, ``mean``, ...) of
    ``values`` over the rows with that pair; null where no row has it.

    >>> import corvid.frame as cf
    >>> long = cf.DataFrame({"day": [1, 1, 2], "city": ["oslo", "lima", "oslo"], "temp": [3.0, 19.0, 4.0]})
    >>> long.pivot(index="day", columns="city", values="temp").to_dict()
    {'day': [1, 2], 'lima': [19.0, None], 'oslo': [3.0, 4.0]}
    """
    from .expr import col
    from .frame import DataFrame, _names

    idx = _names(index)
    check_columns(idx + [columns, values], frame.columns)
    cells = frame.group_by(*idx, columns).agg(__value=col(values).agg(aggregate))
    row_codes, g, row_keys = dense_codes([cells._cols[k] for k in idx])
    col_codes, width, (headers,) = dense_codes([cells._cols[columns]])
    flat = row_codes * width + col_codes
    value = cells._cols["__value"]
    out = dict(zip(idx, row_keys))
    size = g * width
    hit = value.valid_or_true()
    grid_values = value.values._const(0, value.values.dtype, (size,))
    grid_valid = hit._const(False, dt.bool_, (size,))
    if size and len(cells):
        grid_values = scatter_prim(grid_values, 0, flat, value.values, "set")
        grid_valid = scatter_prim(grid_valid, 0, flat, hit, "set")
    for j, h in enumerate(headers.to_list()):
        name = "null" if h is None else str(h)
        if name in out:
            raise ValueError(f"pivot: the column made for value {h!r} would be named {name!r}, which is an index "
                             "column; rename one first")
        pick = tensor_of(np.arange(g, dtype=np.int64) * width + j)
        out[name] = Column(gather_prim(grid_values, pick, 0), value.type, gather_prim(grid_valid, pick, 0),
                           value.categories)
    return DataFrame._make(out, g)


def unique_rows(frame: Any, subset: list[str], keep: str = "first") -> Any:
    """The rows that are the first (``keep="first"``) or last of their ``subset`` key, in row order."""
    from .frame import DataFrame
    from .keys import group

    if keep not in ("first", "last"):
        raise ValueError(f"unique: keep must be 'first' or 'last', got {keep!r}")
    check_columns(subset, frame.columns)
    frame = frame._compact()
    if frame._n == 0:
        return frame
    groups, _ = group([frame._cols[k] for k in subset], None, dropna=False)
    n = frame._n
    init = n if keep == "first" else -1
    rows = scatter_prim(groups.codes._const(init, dt.int64, (groups.slots,)), 0, groups.codes, iota(n),
                        "amin" if keep == "first" else "amax")
    picked = np.sort(host(groups.select(rows)))
    idx = tensor_of(picked.astype(np.int64))
    return DataFrame._make({k: take(c, idx) for k, c in frame._cols.items()}, len(picked))


def to_dummies(frame: Any, columns: list[str], drop_first: bool = False) -> Any:
    """Each of ``columns`` (every str column when empty) replaced, in place, by one uint8 column
    per distinct value (``{column}_{value}``, 1 where the row has it); nulls are 0 everywhere."""
    from .frame import DataFrame

    names = columns or [k for k, c in frame._cols.items() if c.type.kind == "str"]
    for name in names:
        if name not in frame._cols:
            raise ColumnNotFoundError(name, frame._cols)
    out: dict[str, Column] = {}
    for name, c in frame._cols.items():
        if name not in names:
            out[name] = c
            continue
        if c.type.kind == "str":
            labels = list(c.categories)
            codes = c.values
        else:
            uniq = frame.select(name).unique().sort(name)
            labels = [v for v in uniq[name].to_list() if v is not None]
            codes = None
        for j, label in enumerate(labels[1:] if drop_first else labels):
            j = j + 1 if drop_first else j
            hit = (codes == j) if codes is not None else (c.values == label)
            if c.valid is not None:
                hit = hit & c.valid
            out[f"{name}_{label}"] = Column(where(hit, 1, 0).astype(dt.uint8),
                                            column_type("uint8"))
    return DataFrame._make(out, frame._n, frame._keep)

"""Exchange with Arrow, Parquet, pandas and polars.

**Arrow** (``pip install "corvid[frame]"`` for pyarrow): numbers, datetimes and durations cross
without a copy both ways: a column's tensor wraps the Arrow buffer (:func:`corvid.dlpack.from_numpy`
over ``numpy.frombuffer``), and :func:`to_arrow` hands Arrow a view of the computed tensor's
buffer. Strings cross as dictionary arrays (the int32 codes without a copy; a plain Arrow string
column is dictionary-encoded by Arrow's own kernel first). What cannot be shared is converted:
validity (Arrow packs it in bits, corvid keeps a bool per row) and bools (bit-packed too).

**pandas**: through numpy, without a copy for columns of numbers without nulls; nullable
integers and bools become pandas' masked arrays (``Int64``, ``boolean``), floats with nulls
float64 with NaN, strings pandas' string type (``categories=True``: ``Categorical``, which
shares the codes). From pandas, NaN counts as null (``nan_is_null``), as pandas treats it.

**polars**: through Arrow both ways (polars shares Arrow's memory).

**Parquet**: read and written by pyarrow.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from .. import dtype as dt
from ..dlpack import export_view
from .column import Column, _from_array, from_categories, host, tensor_of
from .types import BOOL, ColumnType, from_numpy_dtype

__all__ = ["from_arrow", "from_pandas", "from_polars", "read_parquet", "to_arrow", "to_pandas", "to_polars",
           "write_parquet"]


def need(module: str, what: str, extra: str) -> Any:
    """Import ``module`` or raise ImportError saying what to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{what} needs {module.split('.')[0]}: pip install \"corvid[{extra}]\" "
                          f"(or pip install {module.split('.')[0]})") from None


# --- Arrow -------------------------------------------------------------------------------------
def _arrow_validity(arr: Any) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _arrow_values(arr: Any, np_dtype: np.dtype) -> np.ndarray:
    """The data buffer of a fixed-width Arrow array as numpy, without a copy."""
    buf = arr.buffers()[1]
    return np.frombuffer(buf, dtype=np_dtype, count=len(arr) + arr.offset)[arr.offset:]


def arrow_column(arr: Any, name: str = "column") -> Column:
    """A Column over an Arrow Array or ChunkedArray (chunks are combined first: a copy)."""
    pa = need("pyarrow", "Arrow exchange", "frame")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    t = arr.type
    valid = _arrow_validity(arr)
    v_tensor = None if valid is None else tensor_of(valid)
    if pa.types.is_dictionary(t):
        if not (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)):
            raise TypeError(f"column {name!r}: dictionary of {t.value_type} is not supported (only strings)")
        codes = _arrow_values(arr.indices, arr.indices.type.to_pandas_dtype())
        cats = np.asarray(arr.dictionary.to_pylist(), dtype=object)
        return from_categories(codes.astype(np.int64), cats, valid)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return arrow_column(arr.dictionary_encode(), name)
    if pa.types.is_boolean(t):
        return Column(tensor_of(arr.fill_null(False).to_numpy(zero_copy_only=False)), BOOL,
                      v_tensor)
    if pa.types.is_timestamp(t) or pa.types.is_duration(t):
        unit = t.unit
        kind = "datetime" if pa.types.is_timestamp(t) else "duration"
        return Column(tensor_of(_arrow_values(arr, np.dtype(np.int64))), ColumnType(kind, dt.int64, unit), v_tensor)
    if pa.types.is_date32(t):
        days = _arrow_values(arr, np.dtype(np.int32))
        return Column(tensor_of(days).astype(dt.int64) * 86_400, ColumnType("datetime", dt.int64, "s"), v_tensor)
    if pa.types.is_date64(t):
        return Column(tensor_of(_arrow_values(arr, np.dtype(np.int64))), ColumnType("datetime", dt.int64, "ms"), v_tensor)
    if pa.types.is_null(t):
        n = len(arr)
        return Column(tensor_of(np.zeros(n, np.float64)), from_numpy_dtype(np.dtype(np.float64)),
                      tensor_of(np.zeros(n, bool)))
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        np_dtype = np.dtype(t.to_pandas_dtype())
        if np_dtype == np.float16:
            return _from_array(arr.to_numpy(zero_copy_only=False).astype(np.float32)).replace(valid=v_tensor)
        return Column(tensor_of(_arrow_values(arr, np_dtype)), from_numpy_dtype(np_dtype), v_tensor)
    raise TypeError(f"column {name!r}: Arrow type {t} is not supported (numbers, bools, strings, dictionaries, "
                    "timestamps, dates and durations are)")


def from_arrow(table: Any) -> Any:
    """A DataFrame over a ``pyarrow.Table`` or ``RecordBatch`` (see the module docstring for what
    is shared). TypeError for a column type corvid does not hold (lists, structs, decimals).

    >>> import pyarrow as pa, corvid.frame as cf
    >>> df = cf.from_arrow(pa.table({"x": [1, None, 3], "s": ["a", "b", None]}))
    >>> df.to_dict()
    {'x': [1, None, 3], 's': ['a', 'b', None]}
    """
    from .frame import DataFrame

    need("pyarrow", "from_arrow", "frame")
    cols = {name: arrow_column(table.column(i), name) for i, name in enumerate(table.column_names)}
    return DataFrame._make(cols, table.num_rows)


def _arrow_array(c: Column) -> Any:
    pa = need("pyarrow", "to_arrow", "frame")
    n = len(c)
    valid = None if c.valid is None else host(c.valid)
    mask_buf = None
    if valid is not None and not valid.all():
        mask_buf = pa.py_buffer(np.packbits(valid, bitorder="little"))
    t = c.type
    if t.kind == "str":
        codes = export_view(c.values.astype(dt.int32).realize())
        indices = pa.Array.from_buffers(pa.int32(), n, [mask_buf, pa.py_buffer(codes)])
        return pa.DictionaryArray.from_arrays(indices, pa.array(list(c.categories), type=pa.string()))
    if t.kind == "bool":
        return pa.array(host(c.values), mask=None if mask_buf is None else ~valid, type=pa.bool_())
    values = export_view(c.values.realize())
    arrow_type = {"datetime": lambda: pa.timestamp(t.unit), "duration": lambda: pa.duration(t.unit)}.get(
        t.kind, lambda: pa.from_numpy_dtype(values.dtype))()
    return pa.Array.from_buffers(arrow_type, n, [mask_buf, pa.py_buffer(values)],
                                 null_count=-1 if mask_buf is not None else 0)


def to_arrow(frame: Any) -> Any:
    """A ``pyarrow.Table`` of the frame: numbers, datetimes and durations over the tensors' own
    memory (kept alive by Arrow), strings as dictionary arrays sharing the codes.

    >>> import corvid.frame as cf
    >>> t = cf.DataFrame({"x": [1.5, None], "s": ["a", "b"]}).to_arrow()
    >>> t.column("x").to_pylist(), str(t.schema.field("s").type)
    ([1.5, None], 'dictionary<values=string, indices=int32, ordered=0>')
    """
    pa = need("pyarrow", "to_arrow", "frame")
    frame = frame.realize()
    arrays = [_arrow_array(c) for c in frame._cols.values()]
    return pa.Table.from_arrays(arrays, names=frame.columns) if arrays else pa.table({})


def read_parquet(path: Any, columns: list[str] | None = None) -> Any:
    """A DataFrame of a Parquet file (through ``pyarrow.parquet``; ``columns``: only those).

    >>> import corvid.frame as cf
    >>> cf.DataFrame({"a": [1, 2]}).write_parquet("t.parquet")
    >>> cf.read_parquet("t.parquet").to_dict()
    {'a': [1, 2]}
    """
    pq = need("pyarrow.parquet", "read_parquet", "frame")
    return from_arrow(pq.read_table(path, columns=columns))


def write_parquet(frame: Any, path: Any, **options: Any) -> None:
    """Write ``frame`` to a Parquet file (``pyarrow.parquet.write_table``'s ``options``)."""
    pq = need("pyarrow.parquet", "write_parquet", "frame")
    pq.write_table(to_arrow(frame), path, **options)


# --- pandas ------------------------------------------------------------------------------------
def _pandas_column(s: Any, name: str, nan_is_null: bool) -> Column:
    pd = importlib.import_module("pandas")
    d = s.dtype
    if isinstance(d, pd.CategoricalDtype):
        codes = np.asarray(s.cat.codes, dtype=np.int64)
        valid = codes >= 0
        return from_categories(np.maximum(codes, 0), np.asarray(d.categories, dtype=object),
                               None if valid.all() else valid)
    if isinstance(d, pd.DatetimeTZDtype):
        s = s.dt.tz_convert("UTC").dt.tz_localize(None)
        d = s.dtype
    if hasattr(s.array, "_data") and hasattr(s.array, "_mask"):  # masked arrays: Int64, boolean, Float64
        values, mask = np.asarray(s.array._data), np.asarray(s.array._mask)
        col = _from_array(values)
        return col.replace(valid=tensor_of(~mask)) if mask.any() else col
    if d.kind in "iub":
        return _from_array(s.to_numpy(copy=False))
    if d.kind == "f":
        values = s.to_numpy(copy=False)
        col = _from_array(values)
        nan = np.isnan(values) if nan_is_null else None
        return col.replace(valid=tensor_of(~nan)) if nan is not None and nan.any() else col
    if d.kind in "mM":
        return _from_array(s.to_numpy(copy=False))
    values = s.to_numpy(dtype=object, na_value=None) if hasattr(s, "to_numpy") else np.asarray(s, dtype=object)
    return _from_array(np.asarray(values, dtype=object))


def from_pandas(df: Any, nan_is_null: bool = True) -> Any:
    """A DataFrame of a pandas DataFrame's columns (its index is dropped; ``reset_index()``
    first to keep it). NaN in a float column is null unless ``nan_is_null=False``.

    >>> import pandas as pd, corvid.frame as cf
    >>> cf.from_pandas(pd.DataFrame({"x": [1.0, float("nan")], "s": ["a", None]})).to_dict()
    {'x': [1.0, None], 's': ['a', None]}
    """
    from .frame import DataFrame

    cols = {str(k): _pandas_column(df[k], str(k), nan_is_null) for k in df.columns}
    return DataFrame._make(cols, len(df))


def to_pandas(frame: Any, categories: bool = False) -> Any:
    """A pandas DataFrame (see the module docstring for the types). ``categories=True`` gives str
    columns as ``pandas.Categorical`` over the same codes.

    >>> import corvid.frame as cf
    >>> pdf = cf.DataFrame({"n": [1, None], "s": ["a", "b"]}).to_pandas()
    >>> pdf.dtypes.astype(str).tolist(), pdf["n"].tolist()
    (['Int64', 'str'], [1, <NA>])
    """
    pd = need("pandas", "to_pandas", "test")
    frame = frame.realize()
    data = {}
    for name, c in frame._cols.items():
        t = c.type
        valid = None if c.valid is None else host(c.valid)
        nulls = valid is not None and not valid.all()
        if t.kind == "str":
            codes = host(c.values).astype(np.int64)
            if nulls:
                codes = np.where(valid, codes, -1)
            cat = pd.Categorical.from_codes(codes, categories=list(c.categories))
            data[name] = cat if categories else pd.array(np.asarray(cat, dtype=object), dtype="str")
        elif t.kind in ("int", "bool") and nulls:
            data[name] = pd.arrays.IntegerArray(host(c.values).copy(), ~valid) if t.kind == "int" else \
                pd.arrays.BooleanArray(host(c.values).copy(), ~valid)
        else:
            data[name] = c.to_numpy()
    return pd.DataFrame(data, copy=False)


# --- polars ------------------------------------------------------------------------------------
def from_polars(df: Any) -> Any:
    """A DataFrame of a polars DataFrame (through Arrow)."""
    return from_arrow(df.to_arrow())


def to_polars(frame: Any) -> Any:
    """A polars DataFrame (through Arrow: numbers shared, strings as polars Categorical... cast
    with polars if you want plain strings)."""
    pl = need("polars", "to_polars", "test")
    return pl.from_arrow(to_arrow(frame))


# --- dispatch ----------------------------------------------------------------------------------
def from_any(data: Any) -> Any:
    """A DataFrame of a pandas or polars DataFrame, or a pyarrow Table/RecordBatch."""
    mod = type(data).__module__.split(".")[0]
    if mod == "pandas":
        return from_pandas(data)
    if mod == "polars":
        return from_polars(data)
    if mod == "pyarrow":
        return from_arrow(data)
    raise TypeError(f"cannot make a DataFrame of {type(data).__name__}; pass a dict of columns, a list of row "
                    "dicts, or a pandas/polars DataFrame or pyarrow Table")


def foreign_column(data: Any) -> Column:
    """A Column of a pandas or polars Series, or a pyarrow Array/ChunkedArray."""
    mod = type(data).__module__.split(".")[0]
    if mod == "pandas":
        return _pandas_column(data, str(getattr(data, "name", "column")), True)
    if mod == "polars":
        return arrow_column(data.to_arrow(), data.name)
    return arrow_column(data)

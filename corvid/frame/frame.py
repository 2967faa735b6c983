"""DataFrame: named, typed columns of equal length, held as corvid tensors.

Methods return new frames (columns are shared, never copied) whose values are lazy tensors: a
chain such as ``df.filter(col("x") > 3).with_columns(y=col("x") * 2)`` builds a graph and runs
nothing. A filter does not even move rows: it records which rows it keeps (a bool tensor), and
what follows either reads that mask (elementwise work and aggregations, grouped or not, fold it
into their kernels) or, when rows must move (sort, join, display, export), compacts the frame
once: one synchronizing count of the mask, then one gather per column.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .. import dtype as dt
from ..ops.movement import stack
from ..tensor import Tensor
from .aggregate import reduce_column
from .column import Column, as_column, broadcast_scalar, host, slice_rows, take, tensor_of
from .errors import ColumnNotFoundError
from .expr import Context, Expr, _broadcast, col
from .series import Series, compact_index

__all__ = ["DataFrame"]

Names = str | Sequence[str]


def _names(x: Any) -> list[str]:
    if x is None:
        return []
    return [x] if isinstance(x, (str, Expr)) else list(x)


class DataFrame:
    """A table: an ordered mapping of column names to typed columns of equal length.

    ``DataFrame(data)``: ``data`` is a dict of name -> column values (lists with None for nulls,
    numpy arrays, Tensors, Series; a scalar is repeated), a list of row dicts, or a pandas or polars
    DataFrame or pyarrow Table. ValueError when columns differ in length.

    >>> import corvid.frame as cf
    >>> df = cf.DataFrame({"city": ["Oslo", "Lima", "Oslo"], "temp": [3.5, 19.0, None]})
    >>> df.shape, df.columns, [t.name for t in df.dtypes]
    ((3, 2), ['city', 'temp'], ['str', 'float64'])
    >>> df.group_by("city").agg(cf.col("temp").mean()).to_dict()
    {'city': ['Lima', 'Oslo'], 'temp': [19.0, 3.5]}
    """

    __slots__ = ("__weakref__", "_cols", "_keep", "_n")

    def __init__(self, data: Any = None):
        if data is None:
            data = {}
        if isinstance(data, DataFrame):
            self._cols, self._n, self._keep = dict(data._cols), data._n, data._keep
            return
        if isinstance(data, list) and (not data or isinstance(data[0], dict)):
            names: list[str] = []
            for row in data:
                names += [k for k in row if k not in names]
            data = {k: [row.get(k) for row in data] for k in names}
        if not isinstance(data, dict):
            from .interop import from_any

            other = from_any(data)
            self._cols, self._n, self._keep = other._cols, other._n, other._keep
            return
        cols: dict[str, Column] = {}
        n = None
        for name, values in data.items():
            if not isinstance(name, str):
                raise TypeError(f"column names are strings, got {name!r}")
            if np.isscalar(values) or values is None:
                continue
            c = as_column(values, n, name)
            n = len(c) if n is None else n
            cols[name] = c
        n = n or 0
        out = {}
        for name, values in data.items():
            out[name] = cols[name] if name in cols else broadcast_scalar(values, n)
        self._cols, self._n, self._keep = out, n, None

    @classmethod
    def _make(cls, cols: dict[str, Column], n: int, keep: Tensor | None = None) -> DataFrame:
        df = cls.__new__(cls)
        df._cols, df._n, df._keep = cols, n, keep
        return df

    def _compact(self) -> DataFrame:
        """Apply a pending filter (in place: the frame's values do not change, only how they are held)."""
        if self._keep is not None:
            idx = compact_index(self._keep)
            self._cols = {k: take(c, idx) for k, c in self._cols.items()}
            self._n, self._keep = idx.shape[0], None
        return self

    def _column(self, name: str) -> Column:
        try:
            return self._cols[name]
        except KeyError:
            raise ColumnNotFoundError(name, self._cols) from None

    def _context(self) -> Context:
        keep = self._keep
        return Context(self._cols, self._n, keep, lambda how, c, ddof: reduce_column(how, c, keep, ddof),
                       self._column)

    # -- description ---------------------------------------------------------------------------
    @property
    def columns(self) -> list[str]:
        """The column names, in order."""
        return list(self._cols)

    @property
    def dtypes(self) -> list[Any]:
        """The column types (:class:`~corvid.frame.types.ColumnType`), in order."""
        return [c.type for c in self._cols.values()]

    @property
    def schema(self) -> dict[str, str]:
        """Column name -> type name."""
        return {k: c.type.name for k, c in self._cols.items()}

    def __len__(self) -> int:
        return self._compact()._n

    @property
    def height(self) -> int:
        """The number of rows."""
        return len(self)

    @property
    def width(self) -> int:
        """The number of columns."""
        return len(self._cols)

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, columns)."""
        return len(self), len(self._cols)

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    def __getattr__(self, name: str) -> Series:
        if name.startswith("_"):
            raise AttributeError(name)
        cols = object.__getattribute__(self, "_cols")
        if name in cols:
            return Series._make(name, cols[name], self._keep)
        raise AttributeError(f"'DataFrame' object has no attribute {name!r} and no column of that name")

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {k for k in self._cols if k.isidentifier()})

    def __getitem__(self, key: Any) -> Any:
        """``df["x"]``: a Series; ``df[["a", "b"]]``: those columns; ``df[mask]`` (a bool Series
        or expression): the rows where it is true; ``df[2:5]``: rows by position."""
        if isinstance(key, str):
            return Series._make(key, self._column(key), self._keep)
        if isinstance(key, (Series, Expr)):
            return self.filter(key)
        if isinstance(key, slice):
            return self._slice(key)
        if isinstance(key, (list, tuple)):
            return self.select(*key)
        raise TypeError(f"a DataFrame is indexed by a column name, a list of names, a bool Series or expression, "
                        f"or a slice of rows; not {type(key).__name__}")

    def __setitem__(self, name: str, value: Any) -> None:
        """``df["z"] = values``: add or replace a column (values, a Series, an expression or a scalar)."""
        new = self.with_columns(**{name: value})
        self._cols, self._n, self._keep = new._cols, new._n, new._keep

    # -- columns -------------------------------------------------------------------------------
    def _evaluate(self, items: Sequence[Any], named: dict[str, Any]) -> list[tuple[str, Column, bool]]:
        """(name, column, is one value) for each expression, name or value given."""
        if any(isinstance(e, Expr) and e.reads_neighbours() for e in [*items, *named.values()]):
            self._compact()  # (a row's neighbours are the kept rows)
        ctx = self._context()
        out = []
        for item in items:
            if isinstance(item, str):
                out.append((item, self._column(item), False))
            elif isinstance(item, Expr):
                out.append((item.output_name, item.evaluate(ctx), item.is_aggregate()))
            elif isinstance(item, Series):
                out.append((item.name, self._aligned(item), False))
            else:
                raise TypeError(f"expected a column name, an expression or a Series, got {type(item).__name__}")
        for name, value in named.items():
            if callable(value) and not isinstance(value, (Expr, Series)):
                value = value(self)
            if isinstance(value, Expr):
                out.append((name, value.alias(name).evaluate(ctx), value.is_aggregate()))
            elif isinstance(value, Series):
                out.append((name, self._aligned(value), False))
            elif np.isscalar(value) or value is None:
                out.append((name, broadcast_scalar(value, 1), True))
            else:
                self._compact()
                out.append((name, as_column(value, self._n, name), False))
                ctx = self._context()
        return out

    def _aligned(self, s: Series) -> Column:
        """A Series' column over this frame's stored rows."""
        if s._keep is self._keep and len(s._col) == self._n:
            return s._col
        if self._keep is None and s._keep is None and len(s._col) == self._n:
            return s._col
        c = s._compacted()
        self._compact()
        if len(c) != self._n:
            raise ValueError(f"series {s.name!r} has {len(c)} values, the frame {self._n} rows")
        return c

    def select(self, *columns: Any, **named: Any) -> DataFrame:
        """A frame of the given columns: names, expressions (named by their ``output_name``) and
        ``name=expression`` pairs. Aggregating expressions give one row when all of them aggregate,
        else they are repeated on every row.

        >>> import corvid.frame as cf
        >>> df = cf.DataFrame({"a": [1, 2, 3], "b": [4.0, 5.0, 6.0]})
        >>> df.select("a", twice=cf.col("b") * 2).to_dict()
        {'a': [1, 2, 3], 'twice': [8.0, 10.0, 12.0]}
        >>> df.select(cf.col("a").sum(), cf.col("b").max()).to_dict()
        {'a': [6], 'b': [6.0]}
        """
        items = [c for item in columns for c in (_names(item) if not isinstance(item, Series) else [item])]
        results = self._evaluate(items, named)
        if results and all(one for _, _, one in results):
            return DataFrame._make({name: c for name, c, _ in results}, 1)
        n = self._n
        return DataFrame._make({name: _broadcast(c, n) for name, c, _ in results}, n, self._keep)

    def with_columns(self, *exprs: Any, **named: Any) -> DataFrame:
        """This frame with columns added or replaced: expressions, Series, or ``name=value`` pairs
        (an expression, a Series, values, a scalar, or a function of the frame).

        >>> import corvid.frame as cf
        >>> df = cf.DataFrame({"x": [1.0, 2.0, 3.0]})
        >>> df.with_columns(centred=cf.col("x") - cf.col("x").mean()).to_dict()
        {'x': [1.0, 2.0, 3.0], 'centred': [-1.0, 0.0, 1.0]}
        """
        results = self._evaluate(list(exprs), named)
        cols = dict(self._cols)
        for name, c, _ in results:
            cols[name] = _broadcast(c, self._n)
        return DataFrame._make(cols, self._n, self._keep)

    def assign(self, **named: Any) -> DataFrame:
        """pandas' name for :meth:`with_columns` with ``name=value`` pairs (values may be
        functions of the frame, as in pandas)."""
        return self.with_columns(**named)

    def drop(self, *names: Names) -> DataFrame:
        """This frame without the named columns (ColumnNotFoundError for an unknown name)."""
        gone = [n for item in names for n in _names(item)]
        for n in gone:
            self._column(n)
        return DataFrame._make({k: c for k, c in self._cols.items() if k not in gone}, self._n, self._keep)

    def rename(self, mapping: dict[str, str]) -> DataFrame:
        """Columns renamed by ``mapping`` (old -> new)."""
        for old in mapping:
            self._column(old)
        return DataFrame._make({mapping.get(k, k): c for k, c in self._cols.items()}, self._n, self._keep)

    # -- rows ----------------------------------------------------------------------------------
    def filter(self, *predicates: Any) -> DataFrame:
        """The rows where every predicate (a bool expression or Series) is true; a null counts as
        false. Lazy: the rows are not moved until something needs them moved.

        >>> import corvid.frame as cf
        >>> df = cf.DataFrame({"x": [1, 5, None, 7]})
        >>> df.filter(cf.col("x") > 2).to_dict()
        {'x': [5, 7]}
        """
        keep = self._keep
        for p in predicates:
            if isinstance(p, Series):
                c = self._aligned(p)
                keep = self._keep
            elif isinstance(p, Expr):
                c = p.evaluate(self._context())
            else:
                raise TypeError(f"filter takes bool expressions or Series, got {type(p).__name__}")
            if c.type.kind != "bool":
                raise TypeError(f"filter needs a bool condition, got a {c.type.name} column")
            c = _broadcast(c, self._n)
            cond = c.values if c.valid is None else c.values & c.valid
            keep = cond if keep is None else keep & cond
        return DataFrame._make(self._cols, self._n, keep)

    where = filter

    def _slice(self, key: slice) -> DataFrame:
        self._compact()
        start, stop, step = key.indices(self._n)
        if step != 1:
            idx = tensor_of(np.arange(start, stop, step, dtype=np.int64))
            return DataFrame._make({k: take(c, idx) for k, c in self._cols.items()}, idx.shape[0])
        stop = max(stop, start)
        return DataFrame._make({k: slice_rows(c, start, stop) for k, c in self._cols.items()}, stop - start)

    def head(self, n: int = 5) -> DataFrame:
        """The first ``n`` rows."""
        return self._slice(slice(0, max(n, 0)))

    def tail(self, n: int = 5) -> DataFrame:
        """The last ``n`` rows."""
        total = len(self)
        return self._slice(slice(max(total - max(n, 0), 0), total))

    def take(self, indices: Any) -> DataFrame:
        """The rows at ``indices`` (ints; negative ones count from the end). IndexError out of range."""
        self._compact()
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < -self._n or idx.max() >= self._n):
            raise IndexError(f"row index out of range for a frame of {self._n} rows")
        idx = np.where(idx < 0, idx + self._n, idx)
        t = tensor_of(idx)
        return DataFrame._make({k: take(c, t) for k, c in self._cols.items()}, len(idx))

    def sample(self, n: int | None = None, frac: float | None = None, seed: int = 0) -> DataFrame:
        """``n`` rows (or a fraction ``frac`` of them) drawn without replacement, in random order
        (``numpy.random.default_rng(seed)``)."""
        total = len(self)
        count = n if n is not None else round((frac if frac is not None else 1.0) * total)
        if not 0 <= count <= total:
            raise ValueError(f"sample: cannot draw {count} of {total} rows without replacement")
        return self.take(np.random.default_rng(seed).permutation(total)[:count])

    def sort(self, by: Names, descending: bool | Sequence[bool] = False, nulls_last: bool = True) -> DataFrame:
        """Rows ordered by one or more columns (or expressions), each ascending or descending;
        stable (ties keep their order); nulls last (first with ``nulls_last=False``), NaN after
        every number. The order is found on the host (numpy), the rows moved by one gather per
        column.

        >>> import corvid.frame as cf
        >>> df = cf.DataFrame({"k": ["b", "a", "b", None], "v": [1, 2, 3, 4]})
        >>> df.sort(["k", "v"], descending=[False, True]).to_dict()
        {'k': ['a', 'b', 'b', None], 'v': [2, 3, 1, 4]}
        """
        from .order import sort_order

        keys = _names(by)
        desc = [descending] * len(keys) if isinstance(descending, bool) else list(descending)
        if len(desc) != len(keys):
            raise ValueError(f"sort: {len(desc)} descending flags for {len(keys)} keys")
        self._compact()
        ctx = self._context()
        cols = [self._column(k) if isinstance(k, str) else k.evaluate(ctx) for k in keys]
        order = tensor_of(sort_order(cols, desc, nulls_last))
        return DataFrame._make({k: take(c, order) for k, c in self._cols.items()}, self._n)

    # -- nulls ---------------------------------------------------------------------------------
    def drop_nulls(self, subset: Names | None = None) -> DataFrame:
        """The rows without a null in ``subset`` (every column when None)."""
        names = _names(subset) or self.columns
        keep = self._keep
        for n in names:
            c = self._column(n)
            if c.valid is not None:
                keep = c.valid if keep is None else keep & c.valid
        return DataFrame._make(self._cols, self._n, keep)

    dropna = drop_nulls

    def fill_null(self, value: Any = None, strategy: str | None = None, subset: Names | None = None) -> DataFrame:
        """Nulls replaced: by ``value`` (a scalar, or a dict of column -> value), or by ``strategy``:
        ``"forward"``/``"backward"`` (the previous/next non-null value in row order), ``"mean"``,
        ``"min"``, ``"max"``, ``"zero"``. Columns whose type does not take the value are left
        alone when ``subset`` is None, else TypeError."""
        from . import compute
        from .window import fill_direction

        if (value is None) == (strategy is None):
            raise ValueError("fill_null: give a value or a strategy, exactly one of them")
        names = _names(subset) or self.columns
        cols = dict(self._cols)
        if strategy in ("forward", "backward"):
            self._compact()
            cols = dict(self._cols)
        for n in names:
            c = self._column(n) if strategy not in ("forward", "backward") else cols[n]
            if c.valid is None:
                continue
            v = value.get(n) if isinstance(value, dict) else value
            if isinstance(value, dict) and n not in value:
                continue
            try:
                if strategy in ("forward", "backward"):
                    cols[n] = fill_direction(c, strategy == "forward")
                elif strategy is not None:
                    how = {"zero": None}.get(strategy, strategy)
                    if how not in (None, "mean", "min", "max"):
                        raise ValueError(f"fill_null: unknown strategy {strategy!r}")
                    fill = 0 if how is None else reduce_column(how, c, self._keep).to_list()[0]
                    cols[n] = compute.fill_null(c, fill)
                else:
                    cols[n] = compute.fill_null(c, v)
            except TypeError:
                if subset is not None:
                    raise
        return DataFrame._make(cols, self._n if strategy not in ("forward", "backward") else len(self),
                               self._keep)

    fillna = fill_null

    def null_count(self) -> DataFrame:
        """A one-row frame of each column's number of nulls."""
        return self.select(*[col(n).null_count() for n in self._cols])

    def is_empty(self) -> bool:
        """Whether the frame has no rows."""
        return len(self) == 0

    # -- grouping, joining, reshaping (their own modules) -------------------------------------
    def group_by(self, *keys: Any, sort: bool = True, dropna: bool = True) -> Any:
        """Groups of rows with equal keys (names or expressions), for :meth:`GroupBy.agg` and the
        shortcuts ``sum``, ``mean``... (see :class:`corvid.frame.groupby.GroupBy`). Groups come
        out sorted by key (``sort=False``: in order of first appearance); rows with a null key are
        left out (``dropna=False``: their own group, last)."""
        from .groupby import GroupBy

        return GroupBy(self, [k for item in keys for k in _names(item)], sort, dropna)

    groupby = group_by

    def join(self, other: DataFrame, on: Names | None = None, how: str = "inner", *, left_on: Names | None = None,
             right_on: Names | None = None, suffix: str = "_right") -> DataFrame:
        """Rows of this frame and ``other`` matched on equal keys (see :func:`corvid.frame.join.join`)."""
        from .join import join

        return join(self, other, on, how, left_on=left_on, right_on=right_on, suffix=suffix)

    merge = join

    def pivot(self, index: Names, columns: str, values: str, aggregate: str = "first") -> DataFrame:
        """A wide table: one row per ``index`` key, one column per distinct value of ``columns``
        (see :func:`corvid.frame.reshape.pivot`)."""
        from .reshape import pivot

        return pivot(self, index, columns, values, aggregate)

    def melt(self, id_vars: Names | None = None, value_vars: Names | None = None, variable_name: str = "variable",
             value_name: str = "value") -> DataFrame:
        """A long table: one row per (row, value column) (see :func:`corvid.frame.reshape.melt`)."""
        from .reshape import melt

        return melt(self, id_vars, value_vars, variable_name, value_name)

    unpivot = melt

    def unique(self, subset: Names | None = None, keep: str = "first") -> DataFrame:
        """The rows whose ``subset`` key (all columns when None) is the first (or ``keep="last"``)
        of its kind, in their order."""
        from .reshape import unique_rows

        return unique_rows(self, _names(subset) or self.columns, keep)

    drop_duplicates = unique

    def describe(self, percentiles: Sequence[float] = (0.25, 0.5, 0.75)) -> DataFrame:
        """Summary statistics of the numeric and bool columns: count, null_count, mean, std, min,
        the percentiles, max (see :func:`corvid.frame.summary.describe`)."""
        from .summary import describe

        return describe(self, percentiles)

    def rolling(self, window: Any, on: str | None = None, min_periods: int | None = None) -> Any:
        """Moving windows over the rows in order (see :class:`corvid.frame.window.Rolling`)."""
        from .window import Rolling

        return Rolling(self, window, on, min_periods)

    def to_dummies(self, columns: Names | None = None, drop_first: bool = False) -> DataFrame:
        """String (or bool/int) columns replaced by one 0/1 column per distinct value, named
        ``{column}_{value}`` (pandas' ``get_dummies``; every str column when ``columns`` is None)."""
        from .reshape import to_dummies

        return to_dummies(self, _names(columns), drop_first)

    # -- out -----------------------------------------------------------------------------------
    def realize(self) -> DataFrame:
        """Compute every column now (one schedule), and apply a pending filter."""
        from ..tensor import realize

        self._compact()
        realize(*[t for c in self._cols.values() for t in (c.values, c.valid) if t is not None])
        return self

    def to_dict(self) -> dict[str, list]:
        """Column name -> list of Python values (None for nulls)."""
        self._compact()
        return {k: c.to_list() for k, c in self._cols.items()}

    def to_numpy(self) -> np.ndarray:
        """A 2-D numpy array (rows x columns) of the promoted type (object when mixed with strings)."""
        self._compact()
        arrays = [c.to_numpy() for c in self._cols.values()]
        if not arrays:
            return np.zeros((self._n, 0))
        return np.stack(arrays, axis=1) if len({a.dtype for a in arrays}) == 1 else \
            np.stack([a.astype(object) if any(x.dtype == object for x in arrays) else a for a in arrays], axis=1)

    def to_tensor(self, columns: Names | None = None, dtype: Any = dt.float32) -> Tensor:
        """The columns (all when None) as one lazy (rows, columns) Tensor of ``dtype``: the
        features of a model. ValueError for nulls (fill or drop them first), TypeError for str,
        datetime and duration columns (encode them: :meth:`to_dummies`, ``.dt`` parts, casts).

        >>> import corvid.frame as cf
        >>> cf.DataFrame({"a": [1, 2], "b": [0.5, 1.5], "c": [True, False]}).to_tensor().tolist()
        [[1.0, 0.5, 1.0], [2.0, 1.5, 0.0]]
        """
        names = _names(columns) or self.columns
        self._compact()
        cols = [self._column(n) for n in names]
        for n, c in zip(names, cols):
            if c.type.kind in ("str", "datetime", "duration"):
                raise TypeError(f"to_tensor: column {n!r} is {c.type.name}; encode it first (to_dummies for "
                                f"categories, .dt parts or cast('int64') for times)")
        nullable = [(n, c) for n, c in zip(names, cols) if c.valid is not None]
        if nullable:
            counts = host(stack([c.null_count() for _, c in nullable]))
            bad = [n for (n, _), k in zip(nullable, counts) if k]
            if bad:
                raise ValueError(f"to_tensor: columns {', '.join(map(repr, bad))} have nulls; fill_null(...) or "
                                 "drop_nulls() first")
        if not cols:
            raise ValueError("to_tensor: no columns")
        return stack([c.values.astype(dtype) for c in cols], axis=1)

    def to_dataset(self, features: Names | None = None, target: Names | None = None, dtype: Any = dt.float32,
                   target_dtype: Any = None) -> Any:
        """A :class:`corvid.data` dataset of this frame's rows, ready for a ``DataLoader``:
        samples are ``(features, target)`` (see :class:`corvid.frame.dataset.FrameDataset`)."""
        from .dataset import FrameDataset

        return FrameDataset(self, features, target, dtype, target_dtype)

    @property
    def plot(self) -> Any:
        """Charts of columns through :mod:`corvid.plot` (see :class:`corvid.frame.plot.FramePlot`)."""
        from .plot import FramePlot

        return FramePlot(self)

    def to_arrow(self) -> Any:
        """A ``pyarrow.Table`` over the same memory where Arrow's layout allows (see :mod:`corvid.frame.interop`)."""
        from .interop import to_arrow

        return to_arrow(self)

    def to_pandas(self, categories: bool = False) -> Any:
        """A pandas DataFrame (str columns as ``Categorical`` with ``categories=True``; see
        :func:`corvid.frame.interop.to_pandas`)."""
        from .interop import to_pandas

        return to_pandas(self, categories)

    def to_polars(self) -> Any:
        """A polars DataFrame (through Arrow; see :mod:`corvid.frame.interop`)."""
        from .interop import to_polars

        return to_polars(self)

    def write_csv(self, path: Any, **options: Any) -> None:
        """Write a CSV file (see :func:`corvid.frame.csv.write_csv`)."""
        from .csv import write_csv

        write_csv(self, path, **options)

    def write_parquet(self, path: Any, **options: Any) -> None:
        """Write a Parquet file (needs pyarrow; see :func:`corvid.frame.interop.write_parquet`)."""
        from .interop import write_parquet

        write_parquet(self, path, **options)

    def __repr__(self) -> str:
        from .display import frame_text

        return frame_text(self)

    def _repr_html_(self) -> str:
        from .display import frame_html

        return frame_html(self)

    def __eq__(self, other: object) -> bool:  # (frames are compared whole: use col(...) == ... for rows)
        if not isinstance(other, DataFrame):
            return NotImplemented
        return self.equals(other)

    __hash__ = None  # type: ignore[assignment]

    def equals(self, other: DataFrame) -> bool:
        """Same column names, types and values (nulls equal nulls, NaN equals NaN)."""
        if self.columns != other.columns or self.schema != other.schema or len(self) != len(other):
            return False
        for name in self.columns:
            a, b = self[name].to_list(), other[name].to_list()
            for x, y in zip(a, b):
                both_nan = isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)
                if not (x == y or (x is None and y is None) or both_nan):
                    return False
        return True

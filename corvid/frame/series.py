"""Series: one named column, with arithmetic, comparisons and aggregations.

A Series taken from a frame (``df["x"]``, ``df.x``) shares that frame's rows, including a filter
not yet applied: ``df.x > 3`` is then computed over the frame's stored rows, and ``df[df.x > 3]``
combines it with the frame's filter without compacting anything. Aggregations (``sum``,
``mean``...) compute and return Python values.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..tensor import Tensor
from . import compute
from .aggregate import reduce_column
from .column import Column, as_column, cast, host, take, tensor_of
from .types import ColumnType

__all__ = ["Series"]


def compact_index(keep: Tensor) -> Tensor:
    """The positions of the true entries of ``keep`` (computes it: a filter's result size), as
    int32 when they fit: the gathers that move the rows then read half the index bytes."""
    rows = np.flatnonzero(host(keep))
    return tensor_of(rows.astype(np.int32) if keep.shape[0] < 2**31 else rows)


class Series:
    """A named column of typed values with nulls (see :mod:`corvid.frame.types`).

    ``Series(name, values, dtype=None)``; ``Series(values)`` names it ``""``. ``values`` is
    anything :func:`corvid.frame.column.as_column` takes: a list (None for nulls), a numpy array,
    a Tensor, a pandas/polars/pyarrow column.

    >>> import corvid.frame as cf
    >>> s = cf.Series("x", [1.0, None, 3.0])
    >>> s.dtype.name, len(s), s.null_count(), s.sum(), s.mean()
    ('float64', 3, 1, 4.0, 2.0)
    >>> (s * 2 + 1).to_list()
    [3.0, None, 7.0]
    """

    __slots__ = ("_col", "_keep", "name")

    def __init__(self, name: Any = "", values: Any = None, dtype: Any = None):
        if not isinstance(name, str) and values is None:
            name, values = "", name
        col = as_column([] if values is None else values, name=name)
        self.name, self._col, self._keep = name, cast(col, dtype) if dtype is not None else col, None

    @classmethod
    def _make(cls, name: str, col: Column, keep: Tensor | None = None) -> Series:
        s = cls.__new__(cls)
        s.name, s._col, s._keep = name, col, keep
        return s

    def _derive(self, col: Column, name: str | None = None) -> Series:
        return Series._make(self.name if name is None else name, col, self._keep)

    def _compacted(self) -> Column:
        """The column with a pending filter applied (computes which rows it keeps)."""
        if self._keep is None:
            return self._col
        idx = compact_index(self._keep)
        self._col, self._keep = take(self._col, idx), None
        return self._col

    # -- description -----------------------------------------------------------------------------
    @property
    def dtype(self) -> ColumnType:
        """The column type (``.name``: ``'int64'``, ``'str'``, ``'datetime[ns]'``...)."""
        return self._col.type

    def __len__(self) -> int:
        return len(self._compacted())

    def alias(self, name: str) -> Series:
        """The same values under another name."""
        return self._derive(self._col, name)

    rename = alias

    def to_frame(self) -> Any:
        """A one-column DataFrame."""
        from .frame import DataFrame

        return DataFrame._make({self.name: self._col}, len(self._col), self._keep)

    # -- values ----------------------------------------------------------------------------------
    def to_numpy(self) -> np.ndarray:
        """The values as numpy; nulls are NaN (numbers), None (strings) or NaT (datetimes), as pandas."""
        return self._compacted().to_numpy()

    def to_list(self) -> list:
        """The values as Python objects, None for nulls."""
        return self._compacted().to_list()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.to_numpy()
        return a if dtype is None else a.astype(dtype)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.to_list())

    def to_tensor(self, dtype: Any = None) -> Tensor:
        """The values as a corvid Tensor (lazy; string codes for a str column, counts of the unit for
        datetimes). ValueError when there are nulls: fill or drop them first."""
        col = self._compacted()
        if col.valid is not None and host(col.null_count()) > 0:
            raise ValueError(f"series {self.name!r} has nulls; fill_null(...) or drop_nulls() before to_tensor()")
        values = col.values
        return values if dtype is None else values.astype(dtype)

    @property
    def tensor(self) -> Tensor:
        """The values tensor (see :meth:`to_tensor`)."""
        return self.to_tensor()

    def realize(self) -> Series:
        """Compute the values now."""
        self._compacted().realize()
        return self

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)):
            values = self.to_list()
            return values[int(key)]
        if isinstance(key, slice):
            return self.to_frame()[key][self.name]
        if isinstance(key, Series):
            return self.to_frame()[key][self.name]
        raise TypeError(f"a Series is indexed by an int, a slice or a bool Series, not {type(key).__name__}")

    def head(self, n: int = 5) -> Series:
        """The first ``n`` values."""
        return self.to_frame().head(n)[self.name]

    def tail(self, n: int = 5) -> Series:
        """The last ``n`` values."""
        return self.to_frame().tail(n)[self.name]

    # -- elementwise -----------------------------------------------------------------------------
    def _binary(self, op: str, other: Any, reflected: bool = False) -> Series:
        from .expr import Expr

        if isinstance(other, Expr):
            return NotImplemented
        a, keep = self._col, self._keep
        if isinstance(other, Series):
            if len(other._col) == len(a) and (other._keep is None or other._keep is keep or keep is None):
                keep = keep if keep is not None else other._keep
                other = other._col
            else:
                a, keep, other = self._compacted(), None, other._compacted()
                if len(other) != len(a):
                    raise ValueError(f"series of {len(a)} and {len(other)} values cannot be combined elementwise")
        elif isinstance(other, (list, np.ndarray, Tensor)):
            a, keep = self._compacted(), None
            other = as_column(other, len(a))
        return Series._make(self.name, compute.binary(op, a, other, reflected), keep)

    def __add__(self, o: Any) -> Series: return self._binary("add", o)
    def __radd__(self, o: Any) -> Series: return self._binary("add", o, True)
    def __sub__(self, o: Any) -> Series: return self._binary("sub", o)
    def __rsub__(self, o: Any) -> Series: return self._binary("sub", o, True)
    def __mul__(self, o: Any) -> Series: return self._binary("mul", o)
    def __rmul__(self, o: Any) -> Series: return self._binary("mul", o, True)
    def __truediv__(self, o: Any) -> Series: return self._binary("truediv", o)
    def __rtruediv__(self, o: Any) -> Series: return self._binary("truediv", o, True)
    def __floordiv__(self, o: Any) -> Series: return self._binary("floordiv", o)
    def __rfloordiv__(self, o: Any) -> Series: return self._binary("floordiv", o, True)
    def __mod__(self, o: Any) -> Series: return self._binary("mod", o)
    def __pow__(self, o: Any) -> Series: return self._binary("pow", o)
    def __rpow__(self, o: Any) -> Series: return self._binary("pow", o, True)
    def __eq__(self, o: object) -> Series: return self._binary("eq", o)  # type: ignore[override]
    def __ne__(self, o: object) -> Series: return self._binary("ne", o)  # type: ignore[override]
    def __lt__(self, o: Any) -> Series: return self._binary("lt", o)
    def __le__(self, o: Any) -> Series: return self._binary("le", o)
    def __gt__(self, o: Any) -> Series: return self._binary("gt", o)
    def __ge__(self, o: Any) -> Series: return self._binary("ge", o)
    def __and__(self, o: Any) -> Series: return self._binary("and", o)
    def __rand__(self, o: Any) -> Series: return self._binary("and", o, True)
    def __or__(self, o: Any) -> Series: return self._binary("or", o)
    def __ror__(self, o: Any) -> Series: return self._binary("or", o, True)
    def __xor__(self, o: Any) -> Series: return self._binary("xor", o)
    def __neg__(self) -> Series: return self._derive(compute.unary("neg", self._col))
    def __invert__(self) -> Series: return self._derive(compute.unary("invert", self._col))
    def __abs__(self) -> Series: return self._derive(compute.unary("abs", self._col))

    __hash__ = None  # type: ignore[assignment]  (== compares elementwise)

    def __bool__(self) -> bool:
        raise TypeError("a Series has no truth value; combine conditions with & and |, and use .any() or .all()")

    def is_null(self) -> Series:
        """True where the value is null."""
        return self._derive(compute.unary("is_null", self._col))

    def is_not_null(self) -> Series:
        """True where the value is not null."""
        return self._derive(compute.unary("is_not_null", self._col))

    def is_nan(self) -> Series:
        """True where a float value is NaN."""
        return self._derive(compute.unary("is_nan", self._col))

    def fill_null(self, value: Any) -> Series:
        """Nulls replaced by ``value``."""
        other = value._col if isinstance(value, Series) else value
        return self._derive(compute.fill_null(self._col, other))

    def cast(self, to: Any) -> Series:
        """Converted to another column type."""
        return self._derive(cast(self._col, to))

    def is_in(self, values: Any) -> Series:
        """True where the value is one of ``values``."""
        return self._derive(compute.is_in(self._col, values))

    def shift(self, periods: int = 1) -> Series:
        """The values ``periods`` rows earlier (later when negative); null where there is none."""
        return Series._make(self.name, compute.shift(self._compacted(), periods))

    def diff(self, periods: int = 1) -> Series:
        """The value minus the one ``periods`` rows earlier."""
        return self - self.shift(periods)

    def abs(self) -> Series:
        """Absolute values."""
        return self._derive(compute.unary("abs", self._col))

    def round(self, decimals: int = 0) -> Series:
        """Rounded half to even to ``decimals`` places."""
        return self._derive(compute.round_column(self._col, decimals))

    def clip(self, lower: Any = None, upper: Any = None) -> Series:
        """Values limited to ``[lower, upper]``."""
        return self._derive(compute.clip(self._col, lower, upper))

    def sqrt(self) -> Series:
        """Square roots."""
        return self._derive(compute.unary("sqrt", self._col))

    def exp(self) -> Series:
        """e to the values."""
        return self._derive(compute.unary("exp", self._col))

    def log(self) -> Series:
        """Natural logarithms."""
        return self._derive(compute.unary("log", self._col))

    @property
    def str(self) -> Any:
        """String functions (see :class:`corvid.frame.text.StrExpr`)."""
        from .text import StrExpr

        return StrExpr(self)

    @property
    def dt(self) -> Any:
        """Datetime parts (see :class:`corvid.frame.text.DtExpr`)."""
        from .text import DtExpr

        return DtExpr(self)

    # -- aggregations ----------------------------------------------------------------------------
    def _reduce(self, how: str, ddof: int = 1) -> Any:
        return reduce_column(how, self._col, self._keep, ddof).to_list()[0]

    def sum(self) -> Any:
        """The sum of the non-null values (0 without any)."""
        return self._reduce("sum")

    def mean(self) -> Any:
        """The mean of the non-null values (None without any)."""
        return self._reduce("mean")

    def min(self) -> Any:
        """The least non-null value."""
        return self._reduce("min")

    def max(self) -> Any:
        """The greatest non-null value."""
        return self._reduce("max")

    def count(self) -> int:
        """The number of non-null values."""
        return self._reduce("count")

    def std(self, ddof: int = 1) -> Any:
        """The standard deviation of the non-null values."""
        return self._reduce("std", ddof)

    def var(self, ddof: int = 1) -> Any:
        """The variance of the non-null values."""
        return self._reduce("var", ddof)

    def median(self) -> Any:
        """The median of the non-null values."""
        return self._reduce("median")

    def first(self) -> Any:
        """The first non-null value."""
        return self._reduce("first")

    def last(self) -> Any:
        """The last non-null value."""
        return self._reduce("last")

    def null_count(self) -> int:
        """The number of nulls."""
        return self._reduce("null_count")

    def n_unique(self) -> int:
        """The number of distinct non-null values."""
        return self._reduce("n_unique")

    def any(self) -> bool:
        """Whether any non-null value is true."""
        return self._reduce("any")

    def all(self) -> bool:
        """Whether every non-null value is true."""
        return self._reduce("all")

    def unique(self) -> Series:
        """The distinct values, sorted (nulls last)."""
        return self.to_frame().group_by(self.name, dropna=False).agg()[self.name]

    def value_counts(self, sort: bool = True) -> Any:
        """A frame of each distinct value and its number of rows (``count``), most frequent first
        (``sort=False``: in value order)."""
        counts = self.to_frame().group_by(self.name, dropna=False).agg(count=(self.name, "size"))
        return counts.sort("count", descending=True) if sort else counts

    def sort(self, descending: bool = False, nulls_last: bool = True) -> Series:
        """The values sorted (stable; nulls last unless ``nulls_last=False``)."""
        return self.to_frame().sort(self.name, descending=descending, nulls_last=nulls_last)[self.name]

    def rolling(self, window: Any, min_periods: int | None = None) -> Any:
        """Moving-window aggregations over the values in order (see :meth:`DataFrame.rolling`)."""
        from .window import Rolling

        return Rolling(self.to_frame(), window, None, min_periods, only=[self.name])

    # -- display ---------------------------------------------------------------------------------
    def __repr__(self) -> str:
        from .display import series_text

        return series_text(self)

    def _repr_html_(self) -> str:
        from .display import frame_html

        return frame_html(self.to_frame(), what="Series")

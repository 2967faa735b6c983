"""Moving windows over a frame's rows in order, and filling nulls from neighbouring rows.

A window ends at its row and starts either ``window - 1`` rows earlier (``rolling(3)``) or, on a
sorted column, just after ``value - window`` (``rolling("7d", on="time")``: the rows of the
last seven days, pandas' ``closed="right"``; the starts are found by ``numpy.searchsorted`` on
the sorted column). Then every aggregation is a few kernels whatever the window's length:

* ``sum``, ``count``, ``mean``: differences of prefix sums (corvid ``cumsum``);
* ``var``, ``std``: prefix sums of the values and their squares, taken around the column's mean
  (which keeps the subtraction's cancellation small);
* ``min``, ``max``: a sparse table (level k holds the extreme of 2^k rows, built by doubling in
  ``log2(longest window)`` kernels), read twice per row over overlapping power-of-two spans.

A result has ``min_periods`` values or more behind it, else it is null (default: the window for
a count of rows, as pandas; 1 for a window on a column).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtype as dt
from ..ops.elementwise import where
from ..ops.indexing import gather_prim
from ..ops.movement import cat
from ..ops.scan import cummax, cumsum
from ..tensor import Tensor
from .aggregate import _identity
from .column import Column, host, iota, take, tensor_of
from .compute import as_duration
from .errors import check_columns
from .types import column_type

__all__ = ["Rolling", "fill_direction"]


def fill_direction(col: Column, forward: bool) -> Column:
    """Nulls replaced by the closest earlier (``forward``) or later non-null value; leading (or
    trailing) nulls stay null."""
    if col.valid is None or len(col) == 0:
        return col
    n = len(col)
    rows = iota(n)
    if forward:
        last = cummax(where(col.valid, rows, -1)).values
    else:
        flipped = where(col.valid, rows, n).flip(0)
        last = (-cummax(-flipped).values).flip(0)
        last = where(last < n, last, -1)
    return take(col, last, maybe_missing=True)


class Rolling:
    """Moving-window aggregations (from :meth:`DataFrame.rolling` or :meth:`Series.rolling`).

    ``window``: a number of rows, or, with ``on`` naming a column sorted ascending (numbers,
    datetimes), a span of that column (a number; for datetimes a duration such as ``"7d"``).
    Each method returns a frame with the ``on`` column and the aggregated columns (``columns``,
    default every numeric one), one row per row.

    >>> import corvid.frame as cf
    >>> df = cf.DataFrame({"t": [1, 2, 3, 5, 6], "x": [1.0, 2.0, None, 4.0, 5.0]})
    >>> df.rolling(2).sum()["x"].to_list()
    [None, 3.0, None, None, 9.0]
    >>> df.rolling(2, on="t").mean()["x"].to_list()   # rows with t in (t - 2, t]
    [1.0, 1.5, 2.0, 4.0, 4.5]
    """

    def __init__(self, frame: Any, window: Any, on: str | None, min_periods: int | None,
                 only: Sequence[str] | None = None):
        frame = frame._compact()
        self.frame, self.on, self.only = frame, on, only
        n = frame._n
        if on is None:
            if not isinstance(window, (int, np.integer)) or window < 1:
                raise ValueError(f"rolling: a window without on= is a number of rows (>= 1), got {window!r}")
            self.starts = (iota(n) - (int(window) - 1)).maximum(0) if n else iota(0)
            self.longest = min(int(window), max(n, 1))
            self.min_periods = int(window) if min_periods is None else min_periods
        else:
            check_columns([on], frame.columns)
            self.starts, self.longest = self._spans(frame._cols[on], window)
            self.min_periods = 1 if min_periods is None else min_periods

    def _spans(self, key: Column, window: Any) -> tuple[Tensor, int]:
        t = key.type
        if key.valid is not None and host(key.null_count()) > 0:
            raise ValueError(f"rolling: column {self.on!r} has nulls; a window needs a value on every row")
        values = host(key.values)
        if t.kind in ("datetime", "duration"):
            span = np.timedelta64(int(window), t.unit) if isinstance(window, (int, np.integer)) else \
                as_duration(window)
            width = int(span.astype(f"m8[{t.unit}]").astype(np.int64))
        elif t.kind in ("int", "float"):
            if not isinstance(window, (int, float, np.integer, np.floating)):
                raise TypeError(f"rolling: a window on the {t.name} column {self.on!r} is a number, got {window!r}")
            width = window
        else:
            raise TypeError(f"rolling: on= needs a numeric or datetime column, {self.on!r} is {t.name}")
        if len(values) > 1 and (np.diff(values) < 0).any():
            raise ValueError(f"rolling: column {self.on!r} is not sorted ascending; sort the frame by it first")
        starts = np.searchsorted(values, values - width, side="right").astype(np.int64)
        longest = int((np.arange(len(values)) - starts + 1).max()) if len(values) else 1
        return tensor_of(starts), longest

    def _columns(self, how: str, columns: Any) -> list[str]:
        from .frame import _names

        names = _names(columns) or list(self.only or [])
        if not names:
            names = [k for k, c in self.frame._cols.items() if k != self.on and c.type.kind in ("int", "float", "bool")]
        check_columns(names, self.frame.columns)
        return names

    def _run(self, how: str, columns: Any, ddof: int = 1) -> Any:
        from .frame import DataFrame

        out: dict[str, Column] = {}
        if self.on is not None and self.only is None:
            out[self.on] = self.frame._cols[self.on]
        for name in self._columns(how, columns):
            out[name] = self._aggregate(how, self.frame._cols[name], ddof)
        return DataFrame._make(out, self.frame._n)

    def _aggregate(self, how: str, c: Column, ddof: int) -> Column:
        if c.type.kind not in ("int", "float", "bool"):
            raise TypeError(f"rolling {how} needs a numeric column, got {c.type.name}")
        n = len(c)
        if n == 0:
            return Column(c.values.astype(dt.float64), column_type("float64"))
        ends = iota(n) + 1
        ok = c.valid_or_true()
        count = _span_sum(cumsum(ok.astype(dt.int64), include_initial=True), self.starts, ends)
        enough = count >= max(self.min_periods, 1)
        if how == "count":  # (pandas: null until the window spans min_periods rows, null or not)
            return Column(count, column_type("int64"), (ends - self.starts) >= max(self.min_periods, 1))
        if how in ("min", "max"):
            return self._extreme(how, c, ok, enough)
        x = where(ok, c.values.astype(dt.float64), 0.0)
        if how in ("sum", "mean"):
            total = _span_sum(cumsum(x, include_initial=True), self.starts, ends)
            value = total if how == "sum" else total / count.maximum(1).astype(dt.float64)
            if how == "sum" and c.type.kind in ("int", "bool"):
                exact = _span_sum(cumsum(where(ok, c.values.astype(dt.int64), 0), include_initial=True),
                                  self.starts, ends)
                return Column(exact, column_type("int64"), enough)
            return Column(value, column_type("float64") if c.type.kind != "float" else c.type, enough)
        if how in ("var", "std"):
            centre = (x.sum() / ok.astype(dt.float64).sum().maximum(1)).reshape(1).expand(n)
            y = where(ok, x - centre, 0.0)
            s1 = _span_sum(cumsum(y, include_initial=True), self.starts, ends)
            s2 = _span_sum(cumsum(y * y, include_initial=True), self.starts, ends)
            k = count.astype(dt.float64)
            var = ((s2 - s1 * s1 / k.maximum(1)) / (k - ddof).maximum(1)).maximum(0.0)
            value = var.sqrt() if how == "std" else var
            return Column(value, column_type("float64"), enough & (count > ddof))
        raise ValueError(f"rolling: unknown aggregation {how!r}")

    def _extreme(self, how: str, c: Column, ok: Tensor, enough: Tensor) -> Column:
        n = len(c)
        ident = _identity(c.type, how)
        level = where(ok, c.values, c.values._const(ident, c.values.dtype, ()))
        op = (lambda a, b: a.minimum(b)) if how == "min" else (lambda a, b: a.maximum(b))
        levels, span = [level], 1
        while span * 2 <= self.longest:
            shifted = level.pad(((0, span),), ident)[span:]
            level = op(level, shifted).contiguous()
            levels.append(level)
            span *= 2
        table = cat(levels) if len(levels) > 1 else levels[0]
        ends = iota(n)
        length = ends - self.starts + 1
        k = length.astype(dt.float64).log2().floor().astype(dt.int64).minimum(len(levels) - 1)
        width = (2.0 ** k.astype(dt.float64)).astype(dt.int64)
        a = gather_prim(table, k * n + self.starts, 0)
        b = gather_prim(table, k * n + ends - width + 1, 0)
        return Column(op(a, b), c.type, enough)

    def sum(self, columns: Any = None) -> Any:
        """The sum of each window's non-null values."""
        return self._run("sum", columns)

    def mean(self, columns: Any = None) -> Any:
        """The mean of each window's non-null values."""
        return self._run("mean", columns)

    def min(self, columns: Any = None) -> Any:
        """The least value of each window."""
        return self._run("min", columns)

    def max(self, columns: Any = None) -> Any:
        """The greatest value of each window."""
        return self._run("max", columns)

    def count(self, columns: Any = None) -> Any:
        """The number of non-null values in each window."""
        return self._run("count", columns)

    def std(self, columns: Any = None, ddof: int = 1) -> Any:
        """The standard deviation of each window's values."""
        return self._run("std", columns, ddof)

    def var(self, columns: Any = None, ddof: int = 1) -> Any:
        """The variance of each window's values."""
        return self._run("var", columns, ddof)


def _span_sum(prefix: Tensor, starts: Tensor, ends: Tensor) -> Tensor:
    """``sum(x[start:end])`` per row from the prefix sums (``prefix[i]`` = sum of the first i)."""
    return gather_prim(prefix, ends, 0) - gather_prim(prefix, starts, 0)

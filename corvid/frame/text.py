"""String and datetime functions: ``.str`` and ``.dt`` of expressions and series.

A string function runs once per *distinct* string, on the host (numpy), over the column's
sorted dictionary; the rows only gather the result by their codes, in a kernel. A column of 10M
rows over 50 city names lowercases 50 strings. Datetime parts are integer arithmetic on the
counts since 1970 (Howard Hinnant's ``civil_from_days``), compiled like any column math.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtype as dt
from ..ops.elementwise import where
from ..ops.indexing import gather_prim
from .column import Column, tensor_of
from .types import STR, column_type, unit_scale

__all__ = ["DtExpr", "StrExpr", "dt_part", "str_map"]


def str_map(col: Column, fn: Callable[[np.ndarray], np.ndarray], out: str = "str") -> Column:
    """``fn`` applied to the dictionary of a string column (an object array of str in, an array
    out), read back per row: a string column when ``out == "str"``, else of type ``out``."""
    if col.type.kind != "str":
        raise TypeError(f".str needs a str column, got {col.type.name}")
    cats = col.categories
    mapped = np.asarray(fn(cats.astype(str) if len(cats) else np.array([], str)))
    codes = col.values.astype(dt.int64)
    if out == "str":
        uniq, inverse = np.unique(mapped.astype(str), return_inverse=True) if len(mapped) else \
            (np.array([], str), np.zeros(0, np.int64))
        table = tensor_of(inverse.astype(np.int32) if len(inverse) else np.zeros(1, np.int32))
        return Column(gather_prim(table, codes, 0), STR, col.valid, uniq.astype(object))
    t = column_type(out)
    table = tensor_of(mapped.astype(t.dtype.np) if len(mapped) else np.zeros(1, t.dtype.np))
    return Column(gather_prim(table, codes, 0), t, col.valid)


_STR_FUNCS: dict[str, tuple[Callable[..., np.ndarray], str]] = {
    "lower": (lambda c: np.char.lower(c), "str"),
    "upper": (lambda c: np.char.upper(c), "str"),
    "strip": (lambda c: np.char.strip(c), "str"),
    "len": (lambda c: np.char.str_len(c), "int64"),
    "contains": (lambda c, pat: np.char.find(c, pat) >= 0, "bool"),
    "startswith": (lambda c, pat: np.char.startswith(c, pat), "bool"),
    "endswith": (lambda c, pat: np.char.endswith(c, pat), "bool"),
    "replace": (lambda c, old, new: np.char.replace(c, old, new), "str"),
    "slice": (lambda c, start, stop: np.array([s[start:stop] for s in c], dtype=object).astype(str), "str"),
}


def str_function(col: Column, name: str, *args: Any) -> Column:
    fn, out = _STR_FUNCS[name]
    return str_map(col, lambda c: fn(c, *args), out)


class _Accessor:
    """Builds expressions (``of`` an Expr) or columns (``of`` a Series) from named functions."""

    def __init__(self, of: Any):
        self._of = of

    def _apply(self, fn: Callable[..., Column], *params: Any) -> Any:
        from .expr import Expr
        from .series import Series

        if isinstance(self._of, Expr):
            return Expr("fn", (self._of,), (fn, *params))
        s: Series = self._of
        return s._derive(fn(s._col, *params))


class StrExpr(_Accessor):
    """String functions of a str column (each evaluated once per distinct string).

    >>> import corvid.frame as cf
    >>> s = cf.Series("city", ["Oslo", "lima", None, "Oslo"])
    >>> s.str.upper().to_list(), s.str.len().to_list(), s.str.contains("li").to_list()
    (['OSLO', 'LIMA', None, 'OSLO'], [4, 4, None, 4], [False, True, None, False])
    """

    def lower(self) -> Any:
        """Lowercased."""
        return self._apply(str_function, "lower")

    def upper(self) -> Any:
        """Uppercased."""
        return self._apply(str_function, "upper")

    def strip(self) -> Any:
        """Leading and trailing whitespace removed."""
        return self._apply(str_function, "strip")

    def len(self) -> Any:
        """Lengths in characters (int64)."""
        return self._apply(str_function, "len")

    def contains(self, pattern: str) -> Any:
        """Whether ``pattern`` (plain text) occurs."""
        return self._apply(str_function, "contains", pattern)

    def startswith(self, prefix: str) -> Any:
        """Whether the string starts with ``prefix``."""
        return self._apply(str_function, "startswith", prefix)

    def endswith(self, suffix: str) -> Any:
        """Whether the string ends with ``suffix``."""
        return self._apply(str_function, "endswith", suffix)

    def replace(self, old: str, new: str) -> Any:
        """Every ``old`` replaced by ``new``."""
        return self._apply(str_function, "replace", old, new)

    def slice(self, start: int, stop: int | None = None) -> Any:
        """Characters ``start:stop``."""
        return self._apply(str_function, "slice", start, stop)


# --- datetimes ---------------------------------------------------------------------------------
_DAY_S = 86_400


def _civil(days: Any) -> tuple[Any, Any, Any]:
    """(year, month, day) of days since 1970-01-01 (proleptic Gregorian), integer tensor ops."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2).astype(dt.int64)
    return year, month, day


def dt_part(col: Column, part: str) -> Column:
    """A part of each datetime (``year``, ``month``, ``day``, ``hour``, ``minute``, ``second``,
    ``weekday`` (Monday 0), ``day_of_year``), the ``date`` (midnight), or of a duration
    (``total_seconds`` as float64, ``days``)."""
    t = col.type
    if t.kind == "duration":
        scale = unit_scale(t.unit)
        if part == "total_seconds":
            return Column(col.values.astype(dt.float64) / scale, column_type("float64"), col.valid)
        if part == "days":
            return Column(col.values // (scale * _DAY_S), column_type("int64"), col.valid)
        raise ValueError(f"a duration has total_seconds and days, not {part!r}")
    if t.kind != "datetime":
        raise TypeError(f".dt needs a datetime or duration column, got {t.name}")
    per_day = unit_scale(t.unit) * _DAY_S
    ticks = col.values
    days = ticks // per_day
    if part == "date":
        return Column(days * per_day, t, col.valid)
    of_day = (ticks - days * per_day) // unit_scale(t.unit)
    i64 = column_type("int64")
    if part in ("hour", "minute", "second"):
        value = {"hour": of_day // 3600, "minute": (of_day // 60) % 60, "second": of_day % 60}[part]
        return Column(value, i64, col.valid)
    if part == "weekday":
        return Column((days + 3) % 7, i64, col.valid)
    year, month, day = _civil(days)
    if part == "day_of_year":
        jan1 = _days_from_civil(year)
        return Column(days - jan1 + 1, i64, col.valid)
    value = {"year": year, "month": month, "day": day}.get(part)
    if value is None:
        raise ValueError(f"unknown datetime part {part!r}")
    return Column(value, i64, col.valid)


def _days_from_civil(year: Any) -> Any:
    """Days since 1970-01-01 of January 1st of ``year``."""
    y = year - 1
    era = y // 400
    yoe = y - era * 400
    doy = 306  # (153 * (1 + 9) + 2) // 5 for January (month index 10 of the March-based year)
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


class DtExpr(_Accessor):
    """Parts of a datetime column (or of a duration column: ``total_seconds``, ``days``).

    >>> import corvid.frame as cf
    >>> s = cf.Series("t", np.array(["2024-02-29T13:45:00", "1969-12-31T23:59:59"], dtype="datetime64[s]"))
    >>> s.dt.year().to_list(), s.dt.month().to_list(), s.dt.day().to_list(), s.dt.hour().to_list()
    ([2024, 1969], [2, 12], [29, 31], [13, 23])
    >>> s.dt.weekday().to_list(), s.dt.day_of_year().to_list()
    ([3, 2], [60, 365])
    """

    def year(self) -> Any:
        """The year."""
        return self._apply(dt_part, "year")

    def month(self) -> Any:
        """The month, 1 to 12."""
        return self._apply(dt_part, "month")

    def day(self) -> Any:
        """The day of the month, 1 to 31."""
        return self._apply(dt_part, "day")

    def hour(self) -> Any:
        """The hour, 0 to 23."""
        return self._apply(dt_part, "hour")

    def minute(self) -> Any:
        """The minute, 0 to 59."""
        return self._apply(dt_part, "minute")

    def second(self) -> Any:
        """The second, 0 to 59."""
        return self._apply(dt_part, "second")

    def weekday(self) -> Any:
        """The day of the week, Monday 0 to Sunday 6."""
        return self._apply(dt_part, "weekday")

    def day_of_year(self) -> Any:
        """The day of the year, 1 to 366."""
        return self._apply(dt_part, "day_of_year")

    def date(self) -> Any:
        """The datetime at midnight of its day."""
        return self._apply(dt_part, "date")

    def total_seconds(self) -> Any:
        """A duration in seconds (float64)."""
        return self._apply(dt_part, "total_seconds")

    def days(self) -> Any:
        """A duration in whole days (rounded down)."""
        return self._apply(dt_part, "days")

"""Column types: what a column holds, and how it is stored in a corvid tensor.

A column's values live in one 1-D tensor whose dtype follows from its type:

=================  =====================================  ==============================
type               values tensor                          e.g.
=================  =====================================  ==============================
``int*``/``uint*`` the integers                           ``int64``, ``uint8``
``float*``         the floats (NaN is a value, not null)  ``float64``, ``float32``
``bool``           bool                                   ``bool``
``str``            int32 codes into a sorted dictionary   ``str``
``datetime[u]``    int64 counts of unit ``u`` since 1970  ``datetime[ns]``, ``datetime[s]``
``duration[u]``    int64 counts of unit ``u``             ``duration[us]``
=================  =====================================  ==============================

Strings are dictionary-encoded with their dictionary kept *sorted*, so comparing, sorting and
grouping strings is comparing, sorting and grouping their codes, in compiled kernels. Missing
values are a separate validity mask, never a sentinel value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtype as dt

__all__ = ["UNITS", "ColumnType", "column_type"]

UNITS = ("s", "ms", "us", "ns")  # datetime/duration units (numpy's names); coarser ones become seconds
_UNIT_SCALE = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_KINDS = ("int", "float", "bool", "str", "datetime", "duration")


@dataclass(frozen=True)
class ColumnType:
    """The type of a column: ``kind`` (int, float, bool, str, datetime, duration), the ``dtype``
    of its values tensor, and the ``unit`` of a datetime or duration.

    >>> column_type("datetime[ms]")
    ColumnType('datetime[ms]')
    >>> column_type("int32").dtype, column_type("str").dtype
    (corvid.int32, corvid.int32)
    """

    kind: str
    dtype: dt.DType
    unit: str | None = None

    @property
    def name(self) -> str:
        """The type's name: ``int64``, ``float32``, ``bool``, ``str``, ``datetime[ns]``, ``duration[s]``."""
        if self.kind in ("datetime", "duration"):
            return f"{self.kind}[{self.unit}]"
        return "str" if self.kind == "str" else self.dtype.name

    @property
    def np(self) -> np.dtype:
        """The numpy dtype of this type's values as :meth:`Series.to_numpy` gives them."""
        if self.kind == "datetime":
            return np.dtype(f"datetime64[{self.unit}]")
        if self.kind == "duration":
            return np.dtype(f"timedelta64[{self.unit}]")
        return np.dtype(object) if self.kind == "str" else self.dtype.np

    @property
    def is_numeric(self) -> bool:
        """Integers and floats (bool is not numeric here, as in pandas' ``describe``)."""
        return self.kind in ("int", "float")

    @property
    def is_temporal(self) -> bool:
        return self.kind in ("datetime", "duration")

    @property
    def orderable(self) -> bool:
        """Every type has an order: strings by their sorted dictionary, datetimes by time."""
        return True

    def __repr__(self) -> str:
        return f"ColumnType({self.name!r})"


STR = ColumnType("str", dt.int32)
BOOL = ColumnType("bool", dt.bool_)


def unit_scale(unit: str) -> int:
    """Ticks of ``unit`` in a second."""
    return _UNIT_SCALE[unit]


def finer_unit(a: str, b: str) -> str:
    return a if _UNIT_SCALE[a] >= _UNIT_SCALE[b] else b


def from_numpy_dtype(d: np.dtype) -> ColumnType:
    """The column type of a numpy array of dtype ``d`` (object arrays are handled by the caller)."""
    d = np.dtype(d)
    if d.kind == "M" or d.kind == "m":
        unit = np.datetime_data(d)[0]
        if unit not in UNITS:
            unit = "s" if unit not in ("ps", "fs", "as") else "ns"
        return ColumnType("datetime" if d.kind == "M" else "duration", dt.int64, unit)
    if d.kind == "b":
        return BOOL
    if d.kind in ("U", "S", "O", "T"):
        return STR
    if d.kind in ("i", "u"):
        return ColumnType("int", dt.from_numpy(d))
    if d.kind == "f":
        if d.itemsize < 4:
            return ColumnType("float", dt.float32)
        return ColumnType("float", dt.from_numpy(d))
    raise TypeError(f"a column cannot hold numpy dtype {d}; columns hold integers, floats, bools, strings, "
                    "datetimes and durations")


def column_type(spec: Any) -> ColumnType:
    """The :class:`ColumnType` that ``spec`` names: a ColumnType, a name (``"int64"``, ``"float"``,
    ``"str"``, ``"datetime[ms]"``, ``"duration"``), a corvid or numpy dtype, or ``int``/``float``/
    ``bool``/``str``. TypeError for anything else.

    >>> column_type(float).name, column_type("datetime").name, column_type(np.uint8).name
    ('float64', 'datetime[ns]', 'uint8')
    """
    if isinstance(spec, ColumnType):
        return spec
    if spec is str or spec in ("str", "string", "category", "utf8"):
        return STR
    if spec is bool or spec == "bool":
        return BOOL
    if spec is int or spec == "int":
        return ColumnType("int", dt.int64)
    if spec is float or spec == "float":
        return ColumnType("float", dt.float64)
    if isinstance(spec, str):
        for kind in ("datetime", "duration"):
            if spec == kind:
                return ColumnType(kind, dt.int64, "ns")
            if spec.startswith(kind + "[") and spec.endswith("]") and spec[len(kind) + 1:-1] in UNITS:
                return ColumnType(kind, dt.int64, spec[len(kind) + 1:-1])
    if isinstance(spec, dt.DType):
        if spec.is_complex:
            raise TypeError(f"a column cannot hold {spec.name}: complex columns are not supported")
        return BOOL if spec.is_bool else ColumnType("float" if spec.is_float else "int", spec)
    try:
        return from_numpy_dtype(np.dtype(spec))
    except TypeError:
        raise TypeError(f"unknown column type {spec!r}; use one of int8..int64, uint8..uint64, float32, float64, "
                        "bool, str, datetime[s|ms|us|ns], duration[s|ms|us|ns]") from None


def numeric_result(a: ColumnType, b: ColumnType | Any) -> ColumnType:
    """numpy's promotion of two numeric/bool column types (or a column type and a Python scalar)."""
    left = a.dtype.np
    right = b.dtype.np if isinstance(b, ColumnType) else b
    return from_numpy_dtype(np.result_type(left, right))

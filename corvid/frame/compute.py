"""Elementwise work on columns: arithmetic, comparisons, logic, null handling, casts.

Every function here builds corvid tensor ops (nothing runs until a value is needed), so a chain
of them fuses into one kernel with its consumer. Results follow pandas' and numpy's type rules
(not corvid's Array API ones): an integer column divided by one is float64, ``int64 + 0.5`` is
float64, ``float32 + 0.5`` stays float32. A null in either operand gives a null, except in
``&`` and ``|``, which use three-valued (Kleene) logic as SQL, pandas' nullable booleans and
polars do: ``False & null`` is False, ``True | null`` is True.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtype as dt
from ..ops.elementwise import where
from ..tensor import Tensor
from .column import Column, broadcast_scalar, cast, common_type, tensor_of, unify
from .types import BOOL, ColumnType, column_type, from_numpy_dtype, unit_scale

__all__ = ["binary", "fill_null", "is_in", "unary"]

ARITH = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
LOGIC = ("and", "or", "xor")
SYMBOL = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**",
          "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "and": "&", "or": "|", "xor": "^"}

_TENSOR_OP: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "truediv": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
    "pow": lambda a, b: a ** b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
}


def _and_valid(a: Tensor | None, b: Tensor | None) -> Tensor | None:
    if a is None:
        return b
    return a if b is None else a & b


def _scalar_column(value: Any, like: Column) -> Column:
    """A Python/numpy scalar as a column of ``like``'s length, typed to go with ``like``."""
    n = len(like)
    t = like.type
    if value is None:
        return broadcast_scalar(None, n, t)
    if t.is_temporal and isinstance(value, (str, datetime.date, datetime.timedelta, np.datetime64, np.timedelta64)):
        if t.kind == "datetime" and isinstance(value, (str, datetime.date, np.datetime64)):
            v = np.datetime64(value)
            kind = "datetime"
        else:
            v = np.timedelta64(value) if not isinstance(value, str) else np.timedelta64(_parse_duration(value))
            kind = "duration"
        unit = np.datetime_data(v.dtype)[0]
        unit = unit if unit in ("s", "ms", "us", "ns") else "s"
        v = v.astype(f"{'M' if kind == 'datetime' else 'm'}8[{unit}]")
        return Column(tensor_of(np.array([v.view(np.int64)])).expand(n), ColumnType(kind, dt.int64, unit))
    if isinstance(value, (datetime.timedelta, np.timedelta64)):
        v = np.timedelta64(value)
        return _scalar_column(v, Column(like.values, ColumnType("duration", dt.int64, "ns")))
    return broadcast_scalar(value, n)


def _parse_duration(text: str) -> np.timedelta64:
    """'7d', '12h', '30min', '15s', '250ms', '10us', '5ns' as a numpy duration."""
    units = {"d": "D", "h": "h", "min": "m", "m": "m", "s": "s", "ms": "ms", "us": "us", "ns": "ns", "w": "W"}
    s = text.strip().lower()
    for suffix in sorted(units, key=len, reverse=True):
        if s.endswith(suffix) and s[:-len(suffix)].strip().lstrip("-").isdigit():
            return np.timedelta64(int(s[:-len(suffix)]), units[suffix])
    raise ValueError(f"cannot read {text!r} as a duration; write e.g. '7d', '12h', '30min', '15s', '250ms'")


def as_duration(value: Any) -> np.timedelta64:
    """A window or offset given as a duration: a string ('7d'), timedelta or numpy timedelta64."""
    if isinstance(value, str):
        return _parse_duration(value)
    return np.timedelta64(value)


def binary(op: str, a: Column, b: Any, reflected: bool = False) -> Column:
    """``a op b`` (``b op a`` when ``reflected``) for an op of :data:`ARITH`, :data:`COMPARE` or
    :data:`LOGIC`; ``b`` is a Column of ``a``'s length or a scalar. TypeError for types that do
    not go together, naming both."""
    if not isinstance(b, Column):
        weak = _weak_scalar(op, a, b, reflected)
        if weak is not None:
            return weak
        b = _scalar_column(b, a)
    if reflected:
        a, b = b, a
    if op in LOGIC:
        return _logic(op, a, b)
    ta, tb = a.type, b.type
    valid = _and_valid(a.valid, b.valid)
    if ta.kind == "str" or tb.kind == "str":
        if op in COMPARE and ta.kind == tb.kind:
            a, b = unify([a, b])
            return Column(_TENSOR_OP[op](a.values, b.values), BOOL, valid)
        raise TypeError(f"cannot apply {SYMBOL[op]} to {ta.name} and {tb.name}")
    if ta.is_temporal or tb.is_temporal:
        return _temporal(op, a, b, valid)
    if op in COMPARE:
        t = common_type([ta, tb], f"comparison {SYMBOL[op]}")
        return Column(_TENSOR_OP[op](a.values.astype(t.dtype), b.values.astype(t.dtype)), BOOL, valid)
    t = _arith_type(op, ta, tb)
    x, y = a.values.astype(t.dtype), b.values.astype(t.dtype)
    return Column(_TENSOR_OP[op](x, y), t, valid)


def _weak_scalar(op: str, a: Column, b: Any, reflected: bool) -> Column | None:
    """``a op b`` for a number ``b`` that takes ``a``'s type where it fits (numpy's rule for Python
    scalars: ``float32 + 0.5`` stays float32, ``int8 * 2`` int8); None where that does not apply."""
    if isinstance(b, (bool, np.bool_)) or not isinstance(b, (int, float, np.integer, np.floating)) or \
            op in LOGIC or a.type.kind not in ("int", "float"):
        return None
    try:
        t = from_numpy_dtype(np.result_type(a.type.dtype.np, b if isinstance(b, (int, float)) else b.item()))
    except (TypeError, OverflowError):
        return None
    if op not in COMPARE:
        t = _arith_type(op, a.type, t)
    x = a.values.astype(t.dtype)
    c = x._const(b, t.dtype, x.shape)
    out = _TENSOR_OP[op](c, x) if reflected else _TENSOR_OP[op](x, c)
    return Column(out, BOOL if op in COMPARE else t, a.valid)


def _arith_type(op: str, ta: ColumnType, tb: ColumnType) -> ColumnType:
    try:
        t = from_numpy_dtype(np.result_type(ta.dtype.np, tb.dtype.np))
    except TypeError:
        raise TypeError(f"cannot apply {SYMBOL[op]} to {ta.name} and {tb.name}") from None
    if t.kind == "bool" and op in ("add", "sub", "mul", "floordiv", "mod", "pow"):
        return column_type("int64")
    if op == "truediv" and t.kind != "float":
        return column_type("float64")
    return t


def _temporal(op: str, a: Column, b: Column, valid: Tensor | None) -> Column:
    ta, tb = a.type, b.type

    def same_unit(x: Column, y: Column) -> tuple[Column, Column, str]:
        unit = max(x.type.unit or "s", y.type.unit or "s", key=unit_scale)
        return cast(x, ColumnType(x.type.kind, dt.int64, unit)), cast(y, ColumnType(y.type.kind, dt.int64, unit)), unit

    kinds = (ta.kind, tb.kind)
    if op in COMPARE and ta.kind == tb.kind:
        x, y, _ = same_unit(a, b)
        return Column(_TENSOR_OP[op](x.values, y.values), BOOL, valid)
    if op == "sub" and kinds == ("datetime", "datetime"):
        x, y, unit = same_unit(a, b)
        return Column(x.values - y.values, ColumnType("duration", dt.int64, unit), valid)
    if op in ("add", "sub") and kinds in (("datetime", "duration"), ("duration", "duration")) or \
            (op == "add" and kinds == ("duration", "datetime")):
        x, y, unit = same_unit(a, b)
        kind = "datetime" if "datetime" in kinds else "duration"
        return Column(_TENSOR_OP[op](x.values, y.values), ColumnType(kind, dt.int64, unit), valid)
    if ta.kind == "duration" and tb.kind in ("int", "float") and op in ("mul", "truediv", "floordiv"):
        scaled = _TENSOR_OP[op](a.values.astype(dt.float64), b.values.astype(dt.float64))
        return Column(scaled.round().astype(dt.int64) if tb.kind == "float" or op == "truediv" else
                      _TENSOR_OP[op](a.values, b.values.astype(dt.int64)), ta, valid)
    if tb.kind == "duration" and ta.kind in ("int", "float") and op == "mul":
        return _temporal(op, b, a, valid)
    if op == "truediv" and kinds == ("duration", "duration"):
        x, y, _ = same_unit(a, b)
        return Column(x.values.astype(dt.float64) / y.values.astype(dt.float64), column_type("float64"), valid)
    raise TypeError(f"cannot apply {SYMBOL[op]} to {ta.name} and {tb.name}")


def _logic(op: str, a: Column, b: Column) -> Column:
    if a.type.kind != "bool" or b.type.kind != "bool":
        if a.type.kind == "int" and b.type.kind == "int":  # bitwise on integers
            t = common_type([a.type, b.type], SYMBOL[op])
            fn = {"and": lambda x, y: x & y, "or": lambda x, y: x | y, "xor": lambda x, y: x ^ y}[op]
            return Column(fn(a.values.astype(t.dtype), b.values.astype(t.dtype)), t, _and_valid(a.valid, b.valid))
        raise TypeError(f"{SYMBOL[op]} needs bool columns (or integers, bitwise), got {a.type.name} and {b.type.name}")
    x, y = a.values, b.values
    if op == "xor" or (a.valid is None and b.valid is None):
        fn = {"and": lambda p, q: p & q, "or": lambda p, q: p | q, "xor": lambda p, q: p ^ q}[op]
        return Column(fn(x, y), BOOL, _and_valid(a.valid, b.valid))
    va, vb = a.valid_or_true(), b.valid_or_true()
    if op == "and":  # false wins over null
        value = (x | ~va) & (y | ~vb)
        valid = (va & vb) | (va & ~x) | (vb & ~y)
    else:  # true wins over null
        value = (x & va) | (y & vb)
        valid = (va & vb) | (va & x) | (vb & y)
    return Column(value, BOOL, valid)


_FLOAT_FUNCS = ("sqrt", "exp", "log", "log2", "log10", "log1p", "expm1", "sin", "cos", "tan", "tanh", "floor",
                "ceil")


def unary(op: str, a: Column) -> Column:
    """``-a`` (``neg``), ``abs``, ``~a`` (``invert``: logical not for bools, bitwise for integers),
    ``is_null``, ``is_not_null``, ``is_nan`` or a math function of :data:`_FLOAT_FUNCS`."""
    t = a.type
    if op == "is_null":
        return Column(~a.valid_or_true(), BOOL)
    if op == "is_not_null":
        return Column(a.valid_or_true(), BOOL)
    if op == "invert":
        if t.kind not in ("bool", "int"):
            raise TypeError(f"~ needs a bool or integer column, got {t.name}")
        return Column(~a.values, t, a.valid)
    if t.kind == "str" or (t.kind == "datetime" and op != "is_nan"):
        raise TypeError(f"{op} is not defined for {t.name} columns")
    if op == "neg":
        return Column(-a.values if t.kind != "bool" else -(a.values.astype(dt.int64)),
                      t if t.kind != "bool" else column_type("int64"), a.valid)
    if op == "abs":
        return Column(a.values.abs(), t, a.valid)
    if op == "is_nan":
        return Column(a.values.isnan() if t.kind == "float" else a.values._const(False, dt.bool_, a.values.shape),
                      BOOL, a.valid)
    if op in _FLOAT_FUNCS:
        if t.is_temporal:
            raise TypeError(f"{op} is not defined for {t.name} columns")
        ft = t if t.kind == "float" else column_type("float64")
        x = a.values.astype(ft.dtype)
        if op == "log10":
            return Column(x.log() / np.log(10.0), ft, a.valid)
        return Column(getattr(x, op)(), ft, a.valid)
    raise ValueError(f"unknown operation {op!r}")


def round_column(a: Column, decimals: int = 0) -> Column:
    """Round half to even (numpy's and pandas' rule) to ``decimals`` places; integers unchanged."""
    if a.type.kind != "float":
        return a
    scale = 10.0 ** decimals
    return Column((a.values * scale).round() / scale if decimals else a.values.round(), a.type, a.valid)


def clip(a: Column, lower: Any = None, upper: Any = None) -> Column:
    x = a.values
    if lower is not None:
        x = x.maximum(_scalar_column(lower, a).values.astype(x.dtype)) if not isinstance(lower, Column) else \
            x.maximum(lower.values.astype(x.dtype))
    if upper is not None:
        x = x.minimum(_scalar_column(upper, a).values.astype(x.dtype)) if not isinstance(upper, Column) else \
            x.minimum(upper.values.astype(x.dtype))
    return Column(x, a.type, a.valid)


def fill_null(a: Column, value: Any) -> Column:
    """``a`` with its nulls replaced by ``value`` (a scalar or a Column of the same length; the
    result's type is the promotion of both)."""
    if a.valid is None:
        return a
    other = value if isinstance(value, Column) else _scalar_column(value, a)
    t = common_type([a.type, other.type], "fill_null")
    a2, o2 = cast(a, t), cast(other, t)
    if t.kind == "str":
        a2, o2 = unify([a2, o2])
    values = where(a2.valid, a2.values, o2.values)
    valid = None if o2.valid is None else (a2.valid | o2.valid)
    return Column(values, t, valid, a2.categories)


def is_in(a: Column, values: Any) -> Column:
    """Whether each value of ``a`` is among ``values`` (a list or array; a null is never in it)."""
    vals = list(values)
    if a.type.kind == "str":
        codes = [int(np.searchsorted(a.categories, v)) for v in vals
                 if isinstance(v, str) and len(a.categories) and
                 np.searchsorted(a.categories, v) < len(a.categories) and
                 a.categories[np.searchsorted(a.categories, v)] == v]
        table = np.zeros(max(len(a.categories), 1), bool)
        table[codes] = True
        from ..ops.indexing import gather_prim

        return Column(gather_prim(tensor_of(table), a.values.astype(dt.int64), 0), BOOL, a.valid)
    hit = None
    for v in vals:
        if v is None:
            continue
        eq = binary("eq", a, v).values
        hit = eq if hit is None else hit | eq
    if hit is None:
        hit = a.values._const(False, dt.bool_, a.values.shape)
    return Column(hit, BOOL, a.valid)


def if_else(cond: Column, then: Column, otherwise: Column) -> Column:
    """``then`` where ``cond`` is true, else ``otherwise`` (a null condition picks ``otherwise``)."""
    t = common_type([then.type, otherwise.type], "when/then/otherwise")
    a, b = cast(then, t), cast(otherwise, t)
    if t.kind == "str":
        a, b = unify([a, b])
    c = cond.values if cond.valid is None else cond.values & cond.valid
    valid = None
    if a.valid is not None or b.valid is not None:
        valid = where(c, a.valid_or_true(), b.valid_or_true())
    return Column(where(c, a.values, b.values), t, valid, a.categories)


def shift(a: Column, periods: int) -> Column:
    """The values moved down by ``periods`` rows (up when negative), nulls where nothing moved in."""
    n, p = len(a), int(periods)
    if p == 0 or n == 0:
        return a
    if abs(p) >= n:
        return broadcast_scalar(None, n, a.type).replace(categories=a.categories)
    pads = ((p, 0),) if p > 0 else ((0, -p),)
    cut = slice(0, n) if p > 0 else slice(-p, n - p)
    values = a.values.pad(pads)[cut]
    valid = a.valid_or_true().pad(pads, False)[cut]
    return Column(values, a.type, valid, a.categories)

"""Column expressions: ``col("x") > 3``, ``(col("a") * 2).alias("b")``, ``col("x").sum()``.

An expression is a small tree that says how to compute a column from a frame's columns; a frame
evaluates it when a method receives it (``filter``, ``select``, ``with_columns``, a group-by's
``agg``). Evaluating builds corvid tensor ops over the columns, so the whole expression, and
the method that uses it, fuses into the kernels of whatever needs the result.

An expression that aggregates (``col("x").mean()``) gives one value over the frame's rows, or
one per group inside ``group_by(...).agg``; combined with a row-wise expression it is broadcast
(``col("x") - col("x").mean()`` centres a column). Its output name is the first column it reads
unless ``alias`` names it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..tensor import Tensor
from . import compute
from .aggregate import AGGREGATIONS
from .column import Column, as_column, broadcast_scalar, cast

__all__ = ["Expr", "col", "lit", "when"]


class Context:
    """What an expression is evaluated against: the columns by name, the number of (physical)
    rows, the rows a filter keeps (None: all), and how aggregations are computed here
    (``aggregate(how, column, ddof)``: one value over the kept rows, or one per group)."""

    def __init__(self, columns: dict[str, Column], n: int, keep: Tensor | None,
                 aggregate: Callable[[str, Column, int], Column], names: Callable[[str], Column]):
        self.columns, self.n, self.keep, self.aggregate, self.lookup = columns, n, keep, aggregate, names


class Expr:
    """A column expression (see the module docstring). Build one with :func:`col`,
    :func:`lit` or :func:`when`; combine with operators and methods.

    >>> import corvid.frame as cf
    >>> df = cf.DataFrame({"x": [1, 2, 3, 4]})
    >>> df.filter(cf.col("x") > 2)["x"].to_list()
    [3, 4]
    >>> df.select((cf.col("x") * 10).alias("y"), cf.col("x").mean().alias("m")).to_dict()
    {'y': [10, 20, 30, 40], 'm': [2.5, 2.5, 2.5, 2.5]}
    """

    __slots__ = ("args", "op", "params")

    def __init__(self, op: str, args: tuple = (), params: tuple = ()):
        self.op, self.args, self.params = op, args, params

    # -- naming ------------------------------------------------------------------------------
    @property
    def output_name(self) -> str:
        """The name the result gets: the alias, else the first column read, else ``"literal"``."""
        if self.op == "alias":
            return self.params[0]
        if self.op == "col":
            return self.params[0]
        for a in self.args:
            if isinstance(a, Expr):
                name = a.output_name
                if name != "literal":
                    return name
        return "literal"

    def alias(self, name: str) -> Expr:
        """The same values under the name ``name``."""
        return Expr("alias", (self,), (name,))

    def is_aggregate(self) -> bool:
        """True when every column this expression reads is under an aggregation (one value)."""
        if self.op == "agg":
            return True
        if self.op == "col":
            return False
        inner = [a for a in self.args if isinstance(a, Expr)]
        return all(a.is_aggregate() for a in inner) and bool(inner) and any(_reads(a) for a in inner)

    def columns(self) -> list[str]:
        """The names of the columns this expression reads, in order of appearance."""
        if self.op == "col":
            return [self.params[0]]
        out: list[str] = []
        for a in self.args:
            if isinstance(a, Expr):
                out += [c for c in a.columns() if c not in out]
        return out

    # -- operators -----------------------------------------------------------------------------
    def _bin(self, op: str, other: Any, reflected: bool = False) -> Expr:
        return Expr("binary", (self, _expr(other)), (op, reflected))

    def __add__(self, o: Any) -> Expr: return self._bin("add", o)
    def __radd__(self, o: Any) -> Expr: return self._bin("add", o, True)
    def __sub__(self, o: Any) -> Expr: return self._bin("sub", o)
    def __rsub__(self, o: Any) -> Expr: return self._bin("sub", o, True)
    def __mul__(self, o: Any) -> Expr: return self._bin("mul", o)
    def __rmul__(self, o: Any) -> Expr: return self._bin("mul", o, True)
    def __truediv__(self, o: Any) -> Expr: return self._bin("truediv", o)
    def __rtruediv__(self, o: Any) -> Expr: return self._bin("truediv", o, True)
    def __floordiv__(self, o: Any) -> Expr: return self._bin("floordiv", o)
    def __rfloordiv__(self, o: Any) -> Expr: return self._bin("floordiv", o, True)
    def __mod__(self, o: Any) -> Expr: return self._bin("mod", o)
    def __rmod__(self, o: Any) -> Expr: return self._bin("mod", o, True)
    def __pow__(self, o: Any) -> Expr: return self._bin("pow", o)
    def __rpow__(self, o: Any) -> Expr: return self._bin("pow", o, True)
    def __eq__(self, o: object) -> Expr: return self._bin("eq", o)  # type: ignore[override]
    def __ne__(self, o: object) -> Expr: return self._bin("ne", o)  # type: ignore[override]
    def __lt__(self, o: Any) -> Expr: return self._bin("lt", o)
    def __le__(self, o: Any) -> Expr: return self._bin("le", o)
    def __gt__(self, o: Any) -> Expr: return self._bin("gt", o)
    def __ge__(self, o: Any) -> Expr: return self._bin("ge", o)
    def __and__(self, o: Any) -> Expr: return self._bin("and", o)
    def __rand__(self, o: Any) -> Expr: return self._bin("and", o, True)
    def __or__(self, o: Any) -> Expr: return self._bin("or", o)
    def __ror__(self, o: Any) -> Expr: return self._bin("or", o, True)
    def __xor__(self, o: Any) -> Expr: return self._bin("xor", o)
    def __neg__(self) -> Expr: return Expr("unary", (self,), ("neg",))
    def __invert__(self) -> Expr: return Expr("unary", (self,), ("invert",))
    def __abs__(self) -> Expr: return Expr("unary", (self,), ("abs",))

    __hash__ = None  # type: ignore[assignment]  (== builds an expression)

    def __bool__(self) -> bool:
        raise TypeError("an expression has no truth value; combine conditions with & and |, not 'and'/'or'")

    # -- methods -------------------------------------------------------------------------------
    def is_null(self) -> Expr:
        """True where the value is null."""
        return Expr("unary", (self,), ("is_null",))

    def is_not_null(self) -> Expr:
        """True where the value is not null."""
        return Expr("unary", (self,), ("is_not_null",))

    def is_nan(self) -> Expr:
        """True where a float value is NaN (a value, unlike a null)."""
        return Expr("unary", (self,), ("is_nan",))

    def fill_null(self, value: Any) -> Expr:
        """Nulls replaced by ``value`` (a scalar or an expression)."""
        return Expr("fill_null", (self, _expr(value)))

    def cast(self, to: Any) -> Expr:
        """Converted to another column type (``"float64"``, ``cv.int32``, ``str``, ``"datetime[s]"``)."""
        return Expr("cast", (self,), (to,))

    def is_in(self, values: Sequence[Any]) -> Expr:
        """True where the value is one of ``values``."""
        return Expr("is_in", (self,), (tuple(values),))

    def abs(self) -> Expr:
        """Absolute values."""
        return Expr("unary", (self,), ("abs",))

    def shift(self, periods: int = 1) -> Expr:
        """The values ``periods`` rows earlier (later when negative); null where there is none.
        Order-dependent: a frame applies a pending filter before evaluating it."""
        return Expr("fn", (self,), (compute.shift, periods))

    def diff(self, periods: int = 1) -> Expr:
        """The value minus the one ``periods`` rows earlier."""
        return self - self.shift(periods)

    def reads_neighbours(self) -> bool:
        """Whether a row's result depends on other rows (``shift``, ``diff``)."""
        if self.op == "fn" and self.params[0] is compute.shift:
            return True
        return any(isinstance(a, Expr) and a.reads_neighbours() for a in self.args)

    def round(self, decimals: int = 0) -> Expr:
        """Rounded half to even to ``decimals`` places."""
        return Expr("round", (self,), (decimals,))

    def clip(self, lower: Any = None, upper: Any = None) -> Expr:
        """Values limited to ``[lower, upper]``."""
        return Expr("clip", (self,), (lower, upper))

    def apply_math(self, fn: str) -> Expr:
        return Expr("unary", (self,), (fn,))

    def sqrt(self) -> Expr:
        """Square roots (as floats)."""
        return self.apply_math("sqrt")

    def exp(self) -> Expr:
        """e to the values (as floats)."""
        return self.apply_math("exp")

    def log(self) -> Expr:
        """Natural logarithms (as floats)."""
        return self.apply_math("log")

    def log1p(self) -> Expr:
        """``log(1 + x)`` (as floats)."""
        return self.apply_math("log1p")

    # aggregations
    def _agg(self, how: str, ddof: int = 1) -> Expr:
        return Expr("agg", (self,), (how, ddof))

    def sum(self) -> Expr:
        """The sum (0 without values)."""
        return self._agg("sum")

    def mean(self) -> Expr:
        """The mean of the non-null values."""
        return self._agg("mean")

    def min(self) -> Expr:
        """The least non-null value."""
        return self._agg("min")

    def max(self) -> Expr:
        """The greatest non-null value."""
        return self._agg("max")

    def count(self) -> Expr:
        """The number of non-null values."""
        return self._agg("count")

    def std(self, ddof: int = 1) -> Expr:
        """The standard deviation (``ddof=1``: the sample's, as pandas)."""
        return self._agg("std", ddof)

    def var(self, ddof: int = 1) -> Expr:
        """The variance (``ddof=1``: the sample's, as pandas)."""
        return self._agg("var", ddof)

    def first(self) -> Expr:
        """The first non-null value."""
        return self._agg("first")

    def last(self) -> Expr:
        """The last non-null value."""
        return self._agg("last")

    def median(self) -> Expr:
        """The median of the non-null values."""
        return self._agg("median")

    def n_unique(self) -> Expr:
        """The number of distinct non-null values."""
        return self._agg("n_unique")

    def null_count(self) -> Expr:
        """The number of nulls."""
        return self._agg("null_count")

    def agg(self, how: str) -> Expr:
        """The aggregation named ``how`` (see :data:`corvid.frame.aggregate.AGGREGATIONS`)."""
        if how not in AGGREGATIONS:
            raise ValueError(f"unknown aggregation {how!r}; choose one of {', '.join(AGGREGATIONS)}")
        return self._agg(how)

    @property
    def str(self) -> Any:
        """String functions (:class:`corvid.frame.text.StrExpr`): ``col("s").str.lower()``..."""
        from .text import StrExpr

        return StrExpr(self)

    @property
    def dt(self) -> Any:
        """Datetime parts (:class:`corvid.frame.text.DtExpr`): ``col("t").dt.year()``..."""
        from .text import DtExpr

        return DtExpr(self)

    def __repr__(self) -> str:
        return f"<Expr {_show(self)}>"

    # -- evaluation ----------------------------------------------------------------------------
    def evaluate(self, ctx: Context) -> Column:
        """The column this expression gives in ``ctx`` (one row when it aggregates over all rows)."""
        op, args, params = self.op, self.args, self.params
        if op == "col":
            return ctx.lookup(params[0])
        if op == "lit":
            return as_column([params[0]]) if params[0] is not None else broadcast_scalar(None, 1)
        if op == "const":
            return params[0]
        if op == "alias":
            return args[0].evaluate(ctx)
        if op == "agg":
            return ctx.aggregate(params[0], args[0].evaluate(ctx), params[1])
        if op == "binary":
            a, b = _pair(args[0].evaluate(ctx), args[1], ctx)
            return compute.binary(params[0], a, b, reflected=params[1])
        a = args[0].evaluate(ctx)
        if op == "unary":
            return compute.unary(params[0], a)
        if op == "fill_null":
            a, b = _pair(a, args[1], ctx)
            return compute.fill_null(a, b)
        if op == "cast":
            return cast(a, params[0])
        if op == "is_in":
            return compute.is_in(a, params[0])
        if op == "round":
            return compute.round_column(a, params[0])
        if op == "clip":
            return compute.clip(a, *params)
        if op == "when":
            cond = a
            then, other = (_broadcast(x.evaluate(ctx), len(cond)) for x in args[1:])
            cond = _broadcast(cond, max(len(then), len(other)))
            return compute.if_else(cond, _broadcast(then, len(cond)), _broadcast(other, len(cond)))
        if op == "fn":
            return params[0](a, *params[1:])
        raise ValueError(f"unknown expression {op!r}")


def _reads(e: Expr) -> bool:
    return e.op in ("col", "agg") or any(isinstance(a, Expr) and _reads(a) for a in e.args)


def _broadcast(c: Column, n: int) -> Column:
    if len(c) == n or len(c) != 1:
        return c
    return Column(c.values.expand(n), c.type, None if c.valid is None else c.valid.expand(n), c.categories)


def _pair(a: Column, other: Expr, ctx: Context) -> tuple[Column, Any]:
    """``a`` and the other operand: a literal stays a scalar (typed by ``a``), a column is
    broadcast against ``a`` when one of them is a single value."""
    if other.op == "lit":
        return a, other.params[0]
    b = other.evaluate(ctx)
    n = max(len(a), len(b))
    return _broadcast(a, n), _broadcast(b, n)


def _expr(x: Any) -> Expr:
    from .series import Series

    if isinstance(x, Expr):
        return x
    if isinstance(x, Series):
        return Expr("const", (), (x._compacted(),))
    return Expr("lit", (), (x,))


def _show(e: Expr) -> str:
    if e.op == "col":
        return f"col({e.params[0]!r})"
    if e.op == "lit":
        return repr(e.params[0])
    if e.op == "binary":
        a, b = _show(e.args[0]), _show(e.args[1])
        if e.params[1]:
            a, b = b, a
        return f"({a} {compute.SYMBOL[e.params[0]]} {b})"
    if e.op == "alias":
        return f"{_show(e.args[0])}.alias({e.params[0]!r})"
    if e.op == "agg":
        return f"{_show(e.args[0])}.{e.params[0]}()"
    if e.op == "unary":
        return f"{_show(e.args[0])}.{e.params[0]}()"
    inner = ", ".join(_show(a) for a in e.args if isinstance(a, Expr))
    return f"{e.op}({inner})"


def col(name: str) -> Expr:
    """The column named ``name`` of the frame the expression is used on.

    >>> import corvid.frame as cf
    >>> df = cf.DataFrame({"price": [2.0, 3.0], "qty": [10, 20]})
    >>> df.with_columns(total=cf.col("price") * cf.col("qty"))["total"].to_list()
    [20.0, 60.0]
    """
    return Expr("col", (), (name,))


def lit(value: Any) -> Expr:
    """A literal value, broadcast to every row (``None``: a null).

    >>> import corvid.frame as cf
    >>> cf.DataFrame({"x": [1, 2]}).with_columns(one=cf.lit(1.5))["one"].to_list()
    [1.5, 1.5]
    """
    return Expr("lit", (), (value,))


class _When:
    def __init__(self, cond: Expr):
        self.cond = cond

    def then(self, value: Any) -> _Then:
        return _Then(self.cond, _expr(value))


class _Then:
    def __init__(self, cond: Expr, value: Expr):
        self.cond, self.value = cond, value

    def otherwise(self, value: Any) -> Expr:
        return Expr("when", (self.cond, self.value, _expr(value)))


def when(condition: Any) -> _When:
    """``when(cond).then(a).otherwise(b)``: ``a`` where the condition holds, else ``b`` (a null
    condition counts as false).

    >>> import corvid.frame as cf
    >>> df = cf.DataFrame({"x": [1, 5, 3]})
    >>> df.select(cf.when(cf.col("x") > 2).then("big").otherwise("small").alias("size"))["size"].to_list()
    ['small', 'big', 'big']
    """
    return _When(_expr(condition))

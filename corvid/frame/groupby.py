"""Group-by: rows with equal keys, aggregated per group.

``df.group_by("k").agg(...)`` runs in two steps. The keys become one slot per row
(:mod:`corvid.frame.keys`: a min/max, then ``key - min`` for integer-like keys; one synchronizing
count per slot decides which groups exist). Then each aggregation is one scatter kernel over the
rows into the slots, with its column expression and a pending filter fused into the scatter's
input (:mod:`corvid.frame.aggregate`), and a gather of the groups that exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .aggregate import group_reduce
from .column import Column
from .expr import Context, Expr, col

__all__ = ["GroupBy"]


class GroupBy:
    """Groups of a frame's rows (from :meth:`DataFrame.group_by`).

    :meth:`agg` takes aggregating expressions (``col("x").sum()``) and ``name=(column, how)``
    pairs (pandas' named aggregation), several at once; the shortcuts (``sum()``, ``mean()``,
    ``min()``, ``max()``, ``count()``, ``std()``, ``var()``, ``first()``, ``last()``,
    ``median()``) aggregate every column that is not a key and takes that aggregation; ``size()``
    counts the rows of each group.

    >>> import corvid.frame as cf
    >>> df = cf.DataFrame({"k": ["a", "b", "a", "b", "a"], "x": [1, 2, 3, None, 5]})
    >>> df.group_by("k").agg(cf.col("x").sum(), n=("x", "count"), mean=cf.col("x").mean()).to_dict()
    {'k': ['a', 'b'], 'x': [9, 2], 'n': [3, 1], 'mean': [3.0, 2.0]}
    >>> df.group_by("k").size().to_dict()
    {'k': ['a', 'b'], 'size': [3, 2]}
    """

    def __init__(self, frame: Any, keys: Sequence[Any], sort: bool, dropna: bool):
        if not keys:
            raise ValueError("group_by needs at least one key")
        self.frame, self.keys, self.sort, self.dropna = frame, list(keys), sort, dropna
        self._groups = None

    def _grouping(self) -> tuple[Any, list[tuple[str, Column]]]:
        """(Groups, [(key name, key column per group)]), computed once."""
        if self._groups is None:
            from .keys import group

            ctx = self.frame._context()
            names, cols = [], []
            for k in self.keys:
                if isinstance(k, str):
                    names.append(k)
                    cols.append(self.frame._column(k))
                else:
                    names.append(k.output_name)
                    cols.append(k.evaluate(ctx))
            groups, key_cols = group(cols, self.frame._keep, self.dropna, self.sort)
            self._groups = (groups, list(zip(names, key_cols)))
        return self._groups

    def agg(self, *exprs: Any, **named: Any) -> Any:
        """One row per group: the keys, then one column per aggregation, in the order given."""
        from .frame import DataFrame

        groups, keys = self._grouping()
        frame = self.frame
        ctx = Context(frame._cols, frame._n, frame._keep,
                      lambda how, c, ddof: group_reduce(how, c, groups, ddof), frame._column)
        items: list[tuple[str, Expr]] = []
        for e in exprs:
            for x in ([e] if not isinstance(e, (list, tuple)) else e):
                if not isinstance(x, Expr):
                    raise TypeError(f"agg takes aggregating expressions (col('x').sum()) and name=(column, how) "
                                    f"pairs, got {type(x).__name__}")
                items.append((x.output_name, x))
        for name, spec in named.items():
            if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
                items.append((name, col(spec[0]).agg(spec[1])))
            elif isinstance(spec, Expr):
                items.append((name, spec))
            else:
                raise TypeError(f"agg: {name}= takes (column, how) or an aggregating expression, got {spec!r}")
        out: dict[str, Column] = dict(keys)
        for name, e in items:
            if not e.is_aggregate():
                raise ValueError(f"agg: {e!r} does not aggregate; use e.g. .sum(), .mean(), .first() on it")
            out[name] = e.evaluate(ctx)
        return DataFrame._make(out, groups.count)

    def _every(self, how: str, **params: Any) -> Any:
        key_names = {k for k in self.keys if isinstance(k, str)}
        exprs = []
        for name, c in self.frame._cols.items():
            if name in key_names:
                continue
            if how in ("sum", "mean", "std", "var", "median") and c.type.kind not in ("int", "float", "bool") and \
                    not (c.type.kind == "duration" or (c.type.kind == "datetime" and how in ("mean", "median"))):
                continue
            exprs.append(col(name).agg(how) if not params else col(name)._agg(how, **params))
        return self.agg(*exprs)

    def sum(self) -> Any:
        """The sum of each numeric column per group."""
        return self._every("sum")

    def mean(self) -> Any:
        """The mean of each numeric column per group."""
        return self._every("mean")

    def median(self) -> Any:
        """The median of each numeric column per group."""
        return self._every("median")

    def min(self) -> Any:
        """The least value of each column per group."""
        return self._every("min")

    def max(self) -> Any:
        """The greatest value of each column per group."""
        return self._every("max")

    def count(self) -> Any:
        """The number of non-null values of each column per group."""
        return self._every("count")

    def std(self, ddof: int = 1) -> Any:
        """The standard deviation of each numeric column per group."""
        return self._every("std", ddof=ddof)

    def var(self, ddof: int = 1) -> Any:
        """The variance of each numeric column per group."""
        return self._every("var", ddof=ddof)

    def first(self) -> Any:
        """The first non-null value of each column per group."""
        return self._every("first")

    def last(self) -> Any:
        """The last non-null value of each column per group."""
        return self._every("last")

    def size(self) -> Any:
        """The number of rows of each group, as a column ``size``."""
        from .frame import DataFrame

        groups, keys = self._grouping()
        any_col = next(iter(self.frame._cols.values()))
        out = dict(keys)
        out["size"] = group_reduce("size", any_col, groups)
        return DataFrame._make(out, groups.count)

    len = size

    @property
    def ngroups(self) -> int:
        """The number of groups."""
        return self._grouping()[0].count

"""``describe``: summary statistics of a frame's numeric and bool columns.

Counts, means, standard deviations and extremes are corvid reductions, all computed in one
schedule; the percentiles sort each column's values on the host (numpy's ``quantile``, linear
interpolation as pandas uses).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtype as dt
from ..ops.movement import cat
from .aggregate import reduce_column
from .column import Column, as_column, host, tensor_of
from .types import ColumnType, column_type

__all__ = ["describe"]

_STATS = ("count", "null_count", "mean", "std", "min", "max")


def describe(frame: Any, percentiles: Sequence[float] = (0.25, 0.5, 0.75)) -> Any:
    """A frame with a ``statistic`` column (count, null_count, mean, std, min, the percentiles as
    ``25%``..., max) and one float64 column per numeric or bool column of ``frame``. A statistic
    of a column without values is null.

    >>> import corvid.frame as cf
    >>> d = cf.DataFrame({"x": [1.0, 2.0, None, 4.0], "s": ["a", "b", "c", "d"]}).describe()
    >>> d["statistic"].to_list()
    ['count', 'null_count', 'mean', 'std', 'min', '25%', '50%', '75%', 'max']
    >>> [round(v, 4) for v in d["x"].to_list()]
    [3.0, 1.0, 2.3333, 1.5275, 1.0, 1.5, 2.0, 3.0, 4.0]
    """
    from .frame import DataFrame

    for q in percentiles:
        if not 0 <= q <= 1:
            raise ValueError(f"describe: percentiles are in [0, 1], got {q}")
    names = [k for k, c in frame._cols.items() if c.type.kind in ("int", "float", "bool")]
    labels = ["count", "null_count", "mean", "std", "min"] + [f"{q * 100:g}%" for q in percentiles] + ["max"]
    out: dict[str, Column] = {"statistic": as_column(labels)}
    if not names:
        return DataFrame._make(out, len(labels))
    keep = frame._keep
    parts, valids = [], []
    for name in names:
        c = frame._cols[name]
        if c.type.kind == "bool":
            c = Column(c.values.astype(dt.uint8), ColumnType("int", dt.uint8), c.valid)
        for how in _STATS:
            r = reduce_column(how, c, keep)
            parts.append(r.values.astype(dt.float64))
            valids.append(r.valid_or_true())
    stats = host(cat(parts + valids)).reshape(2, len(names), len(_STATS))
    values, valid = stats[0], stats[1].astype(bool)
    for j, name in enumerate(names):
        c = frame._cols[name]
        data = host(c.values).astype(np.float64)
        ok = np.ones(len(data), bool) if c.valid is None else host(c.valid).copy()
        if keep is not None:
            ok &= host(keep)
        data = data[ok]
        qs = np.quantile(data, list(percentiles)) if len(data) else np.zeros(len(percentiles))
        row = list(values[j, :5]) + list(qs) + [values[j, 5]]
        ok_row = list(valid[j, :5]) + [len(data) > 0] * len(percentiles) + [valid[j, 5]]
        out[name] = Column(tensor_of(np.array(row, np.float64)), column_type("float64"), tensor_of(np.array(ok_row)))
    return DataFrame._make(out, len(labels))


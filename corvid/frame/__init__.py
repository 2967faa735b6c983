"""corvid.frame: tables on corvid tensors, from CSV/Parquet to a training batch.

A :class:`DataFrame` is named, typed columns (integers, floats, bools, strings, datetimes,
durations) with missing values as masks; its operations build lazy corvid graphs that compile
into fused kernels like every corvid op.

>>> import corvid.frame as cf
>>> df = cf.DataFrame({"k": ["a", "b", "a"], "x": [1.0, 2.0, 4.0]})
>>> df.filter(cf.col("x") > 1).group_by("k").agg(cf.col("x").sum()).to_dict()
{'k': ['a', 'b'], 'x': [4.0, 2.0]}
"""

from .errors import CSVError, ColumnNotFoundError
from .expr import Expr, col, lit, when
from .frame import DataFrame
from .series import Series
from .types import ColumnType

__all__ = ["CSVError", "ColumnNotFoundError", "ColumnType", "DataFrame", "Expr", "Series", "col", "lit", "when"]

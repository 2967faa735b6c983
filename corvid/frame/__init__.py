"""corvid.frame: tables on corvid tensors, from CSV/Parquet to a training batch.

A :class:`DataFrame` holds named, typed columns (integers, floats, bools, strings, datetimes,
durations), each a corvid tensor with missing values as a separate mask. Its operations build
lazy corvid graphs that compile into fused kernels like every corvid op: a filter followed by a
grouped sum is a mask and two scatters, not a loop over rows.

* build: :class:`DataFrame`, :class:`Series`, :func:`read_csv`, :func:`read_parquet`,
  :func:`from_arrow`, :func:`from_pandas`, :func:`from_polars`, :func:`concat`
* compute: expressions (:func:`col`, :func:`lit`, :func:`when`), ``select``, ``filter``,
  ``with_columns``, ``sort``, ``group_by(...).agg``, ``join``, ``pivot``, ``melt``,
  ``drop_nulls``/``fill_null``, ``describe``, ``rolling``
* use: ``to_tensor``, ``to_dataset`` (a :mod:`corvid.data` dataset), ``plot``, ``to_arrow``,
  ``to_pandas``, ``to_polars``, ``write_csv``, ``write_parquet``

pyarrow (``pip install "corvid[frame]"``) is optional: it reads CSV fast and reads and writes
Parquet and Arrow; everything else needs only corvid.

>>> import corvid.frame as cf
>>> df = cf.DataFrame({"k": ["a", "b", "a"], "x": [1.0, 2.0, 4.0]})
>>> df.filter(cf.col("x") > 1).group_by("k").agg(cf.col("x").sum()).to_dict()
{'k': ['a', 'b'], 'x': [4.0, 2.0]}
"""

from .csv import read_csv
from .errors import ColumnNotFoundError, CSVError
from .expr import Expr, col, lit, when
from .frame import DataFrame
from .interop import from_arrow, from_pandas, from_polars, read_parquet
from .reshape import concat
from .series import Series
from .types import ColumnType

__all__ = ["CSVError", "ColumnNotFoundError", "ColumnType", "DataFrame", "Expr", "Series", "col", "concat",
           "from_arrow", "from_pandas", "from_polars", "lit", "read_csv", "read_parquet", "when"]

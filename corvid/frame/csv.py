"""CSV files: typed, read in blocks, with a progress bar for large files.

With pyarrow installed (``pip install "corvid[frame]"``) the file is parsed by Arrow's CSV reader:
blocks of ``block_size`` bytes are read from the file and parsed on every core, each column's type
is inferred over the whole file (int64, float64, bool, timestamps, dates, strings) unless
``dtypes`` names it, and the columns become corvid tensors over Arrow's memory
(:mod:`corvid.frame.interop`). Without pyarrow (or with ``engine="python"``) the standard
library's ``csv`` module reads the file row by row in chunks and numpy converts each column
(about 50x slower; it is the fallback, not the fast path).

Either way a line with the wrong number of fields, or a value that does not parse as the type
asked for, raises :class:`~corvid.frame.CSVError` naming the file and the line (1-based, the header
is line 1), unless ``bad_lines="skip"`` drops such lines. A file larger than
``PROGRESS_BYTES`` shows a tqdm progress bar when tqdm is installed (``progress=`` forces it
on or off).
"""

from __future__ import annotations

import csv as _csv
import io
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from .column import Column, _from_array, _strings, cast, host, tensor_of
from .errors import CSVError

__all__ = ["NULL_VALUES", "read_csv", "write_csv"]

NULL_VALUES = ("", "NA", "N/A", "NULL", "null", "NaN", "nan", "None")  # read as null by default
PROGRESS_BYTES = 64 << 20  # files at least this large show a progress bar (with tqdm)
BLOCK_SIZE = 16 << 20  # bytes per block of the Arrow reader


class _Counted(io.RawIOBase):
    """A binary file that reports the bytes read to a progress bar."""

    def __init__(self, f: Any, bar: Any):
        self.f, self.bar = f, bar

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self.f.readinto(b)
        if n and self.bar is not None:
            self.bar.update(n)
        return n

    def close(self) -> None:
        self.f.close()
        super().close()


def _progress(path: str, show: bool | None) -> Any:
    size = os.path.getsize(path)
    if show is False or (show is None and size < PROGRESS_BYTES):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=size, unit="B", unit_scale=True, unit_divisor=1024, desc=os.path.basename(path), leave=False)


def read_csv(path: Any, *, dtypes: dict[str, Any] | None = None, columns: Sequence[str] | None = None,
             separator: str = ",", header: bool = True, skip_rows: int = 0,
             null_values: Sequence[str] = NULL_VALUES,
             bad_lines: str = "error", engine: str = "auto", block_size: int = BLOCK_SIZE,
             progress: bool | None = None) -> Any:
    """A DataFrame of a CSV file.

    ``dtypes``: column name -> type (``"int64"``, ``"float32"``, ``str``, ``"datetime[s]"``...) for
    the columns whose inferred type is not the one wanted; ``columns``: read only these;
    ``header=False``: the first line is data and the columns are named ``column_0``...;
    ``skip_rows``: lines to skip before the header (a comment, a title);
    ``null_values``: the texts that mean null; ``bad_lines``: ``"error"`` or ``"skip"``;
    ``engine``: ``"auto"`` (pyarrow when installed), ``"pyarrow"`` or ``"python"``.

    Raises CSVError (a ValueError) for a malformed line or a value that does not parse, with
    the line number; ColumnNotFoundError for a name in ``columns``/``dtypes`` the file lacks.

    >>> import corvid.frame as cf
    >>> _ = open("t.csv", "w").write("city,temp,day\\nOslo,3.5,2024-01-02\\nLima,,2024-01-03\\n")
    >>> df = cf.read_csv("t.csv")
    >>> df.schema
    {'city': 'str', 'temp': 'float64', 'day': 'datetime[s]'}
    >>> df["temp"].to_list()
    [3.5, None]
    >>> _ = open("bad.csv", "w").write("a,b\\n1,2\\n3,4,5\\n")
    >>> cf.read_csv("bad.csv")
    Traceback (most recent call last):
        ...
    corvid.frame.errors.CSVError: bad.csv, line 3: expected 2 fields, got 3: '3,4,5'
    """
    from .errors import check_columns

    path = os.fspath(path)
    if bad_lines not in ("error", "skip"):
        raise ValueError(f"read_csv: bad_lines must be 'error' or 'skip', got {bad_lines!r}")
    if engine not in ("auto", "pyarrow", "python"):
        raise ValueError(f"read_csv: engine must be 'auto', 'pyarrow' or 'python', got {engine!r}")
    use_arrow = engine == "pyarrow" or (engine == "auto" and _have_pyarrow())
    reader = _read_arrow if use_arrow else _read_python
    frame = reader(path, separator, header, skip_rows, list(null_values), bad_lines, block_size, progress)
    if columns is not None:
        check_columns(columns, frame.columns)
        frame = frame.select(*columns)
    if dtypes:
        check_columns(dtypes, frame.columns)
        cols = dict(frame._cols)
        for name, t in dtypes.items():
            try:
                cols[name] = cast(cols[name], t)
            except ValueError as e:
                raise CSVError(path, None, f"column {name!r}: {e}") from None
        frame = frame._make(cols, frame._n)
    return frame


def _have_pyarrow() -> bool:
    try:
        import pyarrow.csv  # noqa: F401
    except ImportError:
        return False
    return True


_ROW = re.compile(r"Row #(\d+)")


def _read_arrow(path: str, separator: str, header: bool, skip_rows: int, null_values: list[str], bad_lines: str,
                block_size: int, progress: bool | None) -> Any:
    import pyarrow as pa
    import pyarrow.csv as pc

    from .interop import from_arrow

    bad: list[Any] = []

    def handler(row: Any) -> str:
        bad.append(row)
        return "skip" if bad_lines == "skip" else "error"

    def parse(threads: bool) -> Any:
        bar = _progress(path, progress) if threads else None
        try:
            with open(path, "rb", buffering=0) as raw, io.BufferedReader(_Counted(raw, bar), 1 << 20) as f:
                return pc.read_csv(
                    f,
                    read_options=pc.ReadOptions(block_size=block_size, use_threads=threads, skip_rows=skip_rows,
                                                autogenerate_column_names=not header),
                    parse_options=pc.ParseOptions(delimiter=separator, invalid_row_handler=handler),
                    convert_options=pc.ConvertOptions(null_values=null_values, strings_can_be_null=True,
                                                      quoted_strings_can_be_null=False))
        finally:
            if bar is not None:
                bar.close()

    try:
        table = parse(True)
    except pa.ArrowInvalid as first:
        # threads do not know line numbers: parse again on one thread to find the line
        bad.clear()
        try:
            table = parse(False)
        except pa.ArrowInvalid as e:
            raise _arrow_error(path, str(e), bad) from None
        raise _arrow_error(path, str(first), bad) from None
    frame = from_arrow(table)
    if not header:
        frame = frame.rename({f"f{i}": f"column_{i}" for i in range(frame.width)})
    return frame


def _arrow_error(path: str, message: str, bad: list[Any]) -> CSVError:
    message = message.replace("CSV parse error: ", "")
    if bad and bad[0].number is not None:
        row = bad[0]
        return CSVError(path, row.number, f"expected {row.expected_columns} fields, got {row.actual_columns}: "
                                          f"{row.text!r}")
    found = _ROW.search(message)
    line = int(found.group(1)) if found else None
    return CSVError(path, line, _ROW.sub("", message).strip(": ").strip())


def _read_python(path: str, separator: str, header: bool, skip_rows: int, null_values: list[str], bad_lines: str,
                 block_size: int, progress: bool | None) -> Any:
    from .frame import DataFrame

    nulls = set(null_values)
    bar = _progress(path, progress)
    with open(path, newline="", encoding="utf-8") as f:
        for _ in range(skip_rows):
            f.readline()
        reader = _csv.reader(f, delimiter=separator)
        first = next(reader, None)
        if first is None:
            return DataFrame({})
        names = first if header else [f"column_{i}" for i in range(len(first))]
        width = len(names)
        fields: list[list[str]] = [[] for _ in range(width)]
        if not header:
            for j, v in enumerate(first):
                fields[j].append(v)
        seen = 0
        for row in reader:
            if len(row) != width:
                if not row:
                    continue
                if bad_lines == "skip":
                    continue
                text = separator.join(row)
                raise CSVError(path, reader.line_num + skip_rows, f"expected {width} fields, got {len(row)}: {text!r}")
            for j, v in enumerate(row):
                fields[j].append(v)
            if bar is not None:
                seen += 1
                if seen % 65536 == 0:
                    bar.update(f.buffer.tell() - bar.n)
        if bar is not None:
            bar.close()
    cols = {}
    for name, values in zip(names, fields):
        cols[name] = _infer(np.array(values, dtype=object), nulls)
    return DataFrame._make(cols, len(fields[0]) if fields else 0)


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?$")


def _infer(text: np.ndarray, nulls: set[str]) -> Column:
    """A typed column of CSV text: int64, float64, bool, datetime or str, the first that parses
    every non-null value."""
    is_null = np.array([t in nulls for t in text], dtype=bool) if len(text) else np.zeros(0, bool)
    present = text[~is_null].astype(str)
    valid = None if not is_null.any() else ~is_null
    filled = text.copy()
    filled[is_null] = "0"
    col = None
    for kind in ("int64", "float64"):
        try:
            if len(present):
                present.astype(kind)
            col = _from_array(filled.astype(str).astype(kind))
            break
        except (ValueError, OverflowError):
            continue
    if col is None and len(present) and np.isin(np.char.lower(present), ["true", "false"]).all():
        col = _from_array(np.char.lower(filled.astype(str)) == "true")
    if col is None and len(present) and all(_DATE.match(s) for s in present[:100]):
        try:
            filled[is_null] = present[0]
            stamps = np.array([s.replace(" ", "T") for s in filled.astype(str)], dtype="datetime64[s]")
            col = _from_array(stamps)
        except ValueError:
            col = None
    if col is None:
        strings = text.copy()
        strings[is_null] = None
        return _strings(strings, valid)
    return col if valid is None else col.replace(valid=tensor_of(valid))


def write_csv(frame: Any, path: Any, separator: str = ",", header: bool = True, null_value: str = "") -> None:
    """Write ``frame`` as CSV (nulls as ``null_value``; datetimes in ISO 8601; floats as Python
    prints them, which read back exactly).

    >>> import corvid.frame as cf
    >>> cf.DataFrame({"a": [1, None], "s": ["x,y", "z"]}).write_csv("out.csv")
    >>> print(open("out.csv").read().strip())
    a,s
    1,"x,y"
    ,z
    """
    frame = frame.realize()
    columns = []
    for c in frame._cols.values():
        kind = c.type.kind
        valid = np.ones(len(c), bool) if c.valid is None else host(c.valid)
        if kind == "datetime":
            text = np.datetime_as_string(c.to_numpy()).astype(object)
        elif kind == "float":
            text = np.array([repr(float(v)) for v in host(c.values)], dtype=object)
        elif kind == "bool":
            text = np.where(host(c.values), "true", "false").astype(object)
        elif kind == "str":
            text = c.to_numpy()
        else:
            text = host(c.values).astype(str).astype(object)
        text = np.where(valid, text, null_value)
        columns.append(text)
    with open(os.fspath(path), "w", newline="", encoding="utf-8") as f:
        w = _csv.writer(f, delimiter=separator, lineterminator="\n")
        if header:
            w.writerow(frame.columns)
        w.writerows(zip(*columns) if columns else [])


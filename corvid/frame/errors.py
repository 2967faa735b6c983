"""The errors corvid.frame raises that name more than the exception type can.

>>> import corvid.frame as cf
>>> try:
...     cf.DataFrame({"price": [1.0]})["prise"]
... except KeyError as e:
...     print(e)
no column named 'prise'; did you mean 'price'? (the columns are: price)
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["CSVError", "ColumnNotFoundError"]


class ColumnNotFoundError(KeyError):
    """A column name the frame does not have (a KeyError, as pandas raises), with the closest
    names (``difflib``) and the columns it does have in the message."""

    def __init__(self, name: object, available: Iterable[str], what: str = "column"):
        names = list(available)
        close = difflib.get_close_matches(str(name), names, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        shown = ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20 else "")
        super().__init__(f"no {what} named {name!r}{hint} (the columns are: {shown or 'none'})")
        self.name, self.suggestion = name, close[0] if close else None

    def __str__(self) -> str:  # (KeyError's would quote the message)
        return str(self.args[0])


class CSVError(ValueError):
    """A CSV file that cannot be read as a table: ``path`` and the 1-based ``line`` of the
    problem are in the message and as attributes."""

    def __init__(self, path: str, line: int | None, problem: str):
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")
        self.path, self.line, self.problem = path, line, problem


def check_columns(names: Iterable[str], available: Iterable[str]) -> None:
    """ColumnNotFoundError for the first of ``names`` that is not among ``available``."""
    have = list(available)
    present = set(have)
    for n in names:
        if n not in present:
            raise ColumnNotFoundError(n, have)

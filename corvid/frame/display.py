"""Printing a frame or a series, and their notebook display (``_repr_html_``).

As for tensors (:mod:`corvid.display`), a long frame shows its first and last :data:`EDGE` rows
and only those are computed: they are sliced out of the lazy columns first. Nulls print as
``null``; each column's type is printed under its name.
"""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np

from ..display import _TABLE, _style
from .column import Column, host

__all__ = ["EDGE", "frame_html", "frame_text", "series_text"]

EDGE = 5  # rows shown at each end of a long frame
MAX_ROWS = 2 * EDGE  # frames with at most this many rows are shown whole
MAX_COLUMNS = 12  # wider frames show their first and last MAX_COLUMNS // 2 columns
MAX_WIDTH = 32  # characters of a value before it is cut with "…"


def _cell(value: Any, kind: str) -> str:
    if value is None:
        return "null"
    if kind == "float":
        if not math.isfinite(value):
            return str(value)
        text = f"{value:.6g}"
        return text + ".0" if text.lstrip("-").isdigit() else text
    if kind in ("datetime", "duration"):
        return str(value)
    if kind == "bool":
        return "true" if value else "false"
    text = str(value)
    return text if len(text) <= MAX_WIDTH else text[:MAX_WIDTH - 1] + "…"


def _cells(col: Column) -> list[str]:
    kind = col.type.kind
    if kind in ("datetime", "duration"):
        values = col.to_numpy()
        valid = np.ones(len(values), bool) if col.valid is None else host(col.valid)
        text = np.datetime_as_string(values) if kind == "datetime" else values.astype(str)
        return [str(t) if ok else "null" for t, ok in zip(text, valid)]
    return [_cell(v, kind) for v in col.to_list()]


def _rows(frame: Any) -> tuple[list[str], list[str], list[list[str]], int, bool]:
    """(names, type names, rows of cell text, total rows, cut) of what a display shows."""
    n = len(frame)
    names = frame.columns
    if len(names) > MAX_COLUMNS:
        names = names[:MAX_COLUMNS // 2] + ["…"] + names[-(MAX_COLUMNS // 2):]
    cut = n > MAX_ROWS
    parts = [frame.head(EDGE), frame.tail(EDGE)] if cut else [frame]
    columns: dict[str, list[str]] = {}
    for name in names:
        if name == "…":
            continue
        cells = []
        for part in parts:
            cells += _cells(part._cols[name])
        columns[name] = cells
    count = 2 * EDGE if cut else n
    rows = [[columns[k][i] if k != "…" else "…" for k in names] for i in range(count)]
    if cut:
        rows.insert(EDGE, ["…"] * len(names))
    types = [frame._cols[k].type.name if k != "…" else "" for k in names]
    return names, types, rows, n, cut


def frame_text(frame: Any, what: str = "DataFrame") -> str:
    """The frame as an aligned text table under a line giving its size.

    >>> import corvid.frame as cf
    >>> print(cf.DataFrame({"city": ["Oslo", None], "temp": [3.5, 19.0]}))
    DataFrame: 2 rows x 2 columns
    city  temp
    str   float64
    ----  -------
    Oslo  3.5
    null  19.0
    """
    names, types, rows, n, _ = _rows(frame)
    head = f"{what}: {n:,} row{'s' * (n != 1)} x {frame.width} column{'s' * (frame.width != 1)}"
    if not names:
        return head
    table = [names, types] + rows
    widths = [max(len(r[j]) for r in table) for j in range(len(names))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    out = [head, line(names), line(types), line(["-" * w for w in widths])] + [line(r) for r in rows]
    return "\n".join(out)


def series_text(s: Any) -> str:
    """A series as a one-column table titled with its name and length."""
    return frame_text(s.to_frame(), what=f"Series {s.name!r}")


def frame_html(frame: Any, what: str = "DataFrame") -> str:
    """HTML for a notebook: the size, then a table whose header gives each column's name and type
    (the style of :func:`corvid.display.tensor_html`)."""
    names, types, rows, n, _ = _rows(frame)
    summary = f"{n:,} row{'s' * (n != 1)} x {frame.width} column{'s' * (frame.width != 1)}"
    head = "".join(f"<th {_style()}>{html.escape(k)}<br><span style=\"font-weight: normal; opacity: 0.6\">"
                   f"{html.escape(t)}</span></th>" for k, t in zip(names, types))
    body = []
    for r in rows:
        cells = []
        for c, t in zip(r, types):
            align = "right" if t.startswith(("int", "uint", "float")) else "left"
            text = html.escape(c)
            if c == "null":
                text = f'<span style="opacity: 0.5">{text}</span>'
            cells.append(f"<td {_style(align)}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<div><b>{html.escape(what)}</b> ({html.escape(summary)})"
            f"<table {_TABLE}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")

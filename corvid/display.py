"""Rich display in Jupyter: a tensor (``Tensor._repr_html_``) as a table of its shape, dtype and
device above its values, and a module (``Module._repr_html_``) as a table of its layers with
their parameter counts.

A big tensor is abbreviated as numpy prints it (the first and last :data:`EDGE` entries along
each long axis, ``...`` between them) and only those entries are computed: the corners are
sliced out of the lazy tensor first, so showing a 10,000 x 10,000 result computes 49 values.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import numpy as np

from .ops.movement import cat

if TYPE_CHECKING:
    from .nn.module import Module
    from .tensor import Tensor

__all__ = ["EDGE", "THRESHOLD", "module_html", "tensor_html", "tensor_values_text"]

EDGE = 3  # entries shown at each end of a long axis
THRESHOLD = 1000  # tensors with at most this many elements are shown whole (numpy's default)

_TABLE = 'style="border-collapse: collapse; font-family: monospace; font-size: 12px"'


def _style(align: str = "left", indent: int = 0) -> str:
    return f'style="text-align: {align}; padding: 1px 12px 1px {indent}em"'


def _corners(t: Tensor, edge: int) -> np.ndarray:
    """The entries numpy's summary of ``t`` shows, with one filler entry at each cut (numpy
    summarizes an axis longer than ``2 * edge`` and drops its middle, i.e. the filler)."""
    for axis, n in enumerate(t.shape):
        if n > 2 * edge + 1:
            head = (slice(None),) * axis + (slice(0, edge + 1),)
            tail = (slice(None),) * axis + (slice(n - edge, n),)
            t = cat([t[head], t[tail]], axis=axis)
    return t.numpy()


def tensor_values_text(t: Tensor, edge: int = EDGE, threshold: int = THRESHOLD) -> str:
    """The values of ``t`` as numpy prints them, abbreviated past ``threshold`` elements to the
    first and last ``edge`` entries of each long axis (only those are computed).

    >>> print(tensor_values_text(cv.arange(10_000).reshape(100, 100), edge=2))
    [[   0,    1, ...,   98,   99],
     [ 100,  101, ...,  198,  199],
     ...,
     [9800, 9801, ..., 9898, 9899],
     [9900, 9901, ..., 9998, 9999]]
    """
    t = t.detach()
    if t.size <= threshold:
        return np.array2string(t.numpy(), separator=", ", threshold=threshold)
    return np.array2string(_corners(t, edge), separator=", ", threshold=0, edgeitems=edge)


def _table(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th {_style()}>{html.escape(k)}</th><td {_style()}>{html.escape(v)}</td></tr>"
                   for k, v in rows)
    return f"<table {_TABLE}>{body}</table>"


def tensor_html(t: Tensor) -> str:
    """HTML for a tensor: its class, shape, dtype, device (and ``requires_grad`` when set) in a
    table, then its values (see :func:`tensor_values_text`). A tensor on the NULL device has no
    values to show (that device computes nothing)."""
    rows = [("shape", str(t.shape)), ("dtype", t.dtype.name), ("device", t.device)]
    if t.requires_grad:
        rows.append(("requires_grad", "True"))
    if t.device == "NULL":
        values = "(not computed: the NULL device runs nothing)"
    else:
        values = tensor_values_text(t)
    return (f"<div><b>{html.escape(type(t).__name__)}</b>{_table(rows)}"
            f'<pre style="margin-top: 4px">{html.escape(values)}</pre></div>')


def _own_parameters(m: Module) -> list[tuple[str, Any]]:
    return list(m.named_parameters(recurse=False))


def module_html(m: Module) -> str:
    """HTML for a module: one row per module (itself first, then every descendant, indented by
    depth) with its type and hyperparameters, the parameters it owns (count, shapes, whether they
    train), and the totals below."""
    head = "".join(f"<th {_style()}>{h}</th>" for h in ("layer", "type", "parameters", "shapes", "trainable"))
    rows = []
    for name, sub in m.named_modules():
        own = _own_parameters(sub)
        count = sum(p.size for _, p in own)
        trains = [p.requires_grad for _, p in own]
        trainable = "" if not own else "yes" if all(trains) else "no" if not any(trains) else "partly"
        shapes = ", ".join(f"{n} {tuple(p.shape)}" for n, p in own)
        kind = f"{type(sub).__name__}({sub.extra_repr()})" if "\n" not in sub.extra_repr() else type(sub).__name__
        depth = name.count(".") + 1 if name else 0
        cells = [name or "(this module)", kind, f"{count:,}" if own else "", shapes, trainable]
        styles = [_style(indent=depth), _style(), _style("right"), _style(), _style()]
        rows.append("<tr>" + "".join(f"<td {style}>{html.escape(c)}</td>" for style, c in zip(styles, cells)) + "</tr>")
    params = list(m.parameters())
    total = sum(p.size for p in params)
    trainable_total = sum(p.size for p in params if p.requires_grad)
    buffers = sum(b.size for b in m.buffers())
    summary = f"{total:,} parameters ({trainable_total:,} trainable)"
    if buffers:
        summary += f", {buffers:,} buffer values"
    mode = "training" if m.training else "eval"
    return (f"<div><b>{html.escape(type(m).__name__)}</b> ({mode} mode)"
            f"<table {_TABLE}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            f"<p>{html.escape(summary)}</p></div>")

"""What every corvid plot shares: importing matplotlib and choosing its backend, turning tensors
into numpy arrays, making figures and axes, labelling them, and saving them to files."""

from __future__ import annotations

import os
import pathlib
import sys
from typing import Any

import numpy as np

try:
    import matplotlib
except ImportError as e:  # the optional extra is missing: say exactly what to install
    raise ImportError('corvid.plot needs matplotlib, an optional extra: pip install "corvid[plot]" '
                      '(or pip install matplotlib)') from e


def _choose_backend() -> None:
    """Agg (draws to files, never opens a window) unless in Jupyter, whose inline backend shows
    figures in the page, or unless the user chose a backend (``MPLBACKEND``, ``matplotlib.use``,
    or pyplot already imported)."""
    if "ipykernel" in sys.modules or os.environ.get("MPLBACKEND") or "matplotlib.pyplot" in sys.modules:
        return
    chosen = getattr(matplotlib.rcParams, "_get_backend_or_none", lambda: None)()
    if chosen is None:
        matplotlib.use("Agg")


_choose_backend()

import matplotlib.pyplot as plt  # noqa: E402  (after the backend choice)
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure, SubFigure  # noqa: E402

from ..tensor import Tensor  # noqa: E402
from .theme import styled  # noqa: E402

__all__ = ["Axes", "Figure", "as_array", "decorate", "new_axes", "savefig", "subplots"]

SAVE_FORMATS = ("png", "svg", "pdf")
# Metadata that would change on every save (dates): dropped so a re-saved figure is the same file.
_STABLE_METADATA = {"png": {}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}


def as_array(value: Any, name: str) -> np.ndarray:
    """``value`` (a corvid Tensor, a numpy array, a list or a scalar) as a numpy array matplotlib
    can draw: a tensor is computed (``.numpy()``), 8- and 16-bit floats become float32.

    TypeError for complex values (plot ``.real``, ``.imag`` or ``abs()``) and for values numpy
    cannot make a numeric or string array of."""
    if isinstance(value, Tensor):
        value = value.numpy()
    try:
        arr = np.asarray(value)
    except ValueError as e:  # ragged nested lists
        raise TypeError(f"{name}: cannot be made into an array ({e})") from None
    if arr.dtype.kind == "c":
        raise TypeError(f"{name}: complex values cannot be plotted; plot .real, .imag or abs() of them")
    if arr.dtype.kind == "V" or (arr.dtype.kind == "f" and arr.dtype.itemsize < 4):  # half, ml_dtypes' bfloat16, fp8
        arr = arr.astype(np.float32)
    if arr.dtype.kind not in "biufU":
        raise TypeError(f"{name}: expected numbers, got an array of {arr.dtype} ({type(value).__name__})")
    return arr


def new_axes(ax: Axes | None = None, projection: str | None = None) -> Axes:
    """``ax`` itself, or the axes of a new figure (3-D axes for ``projection="3d"``)."""
    if ax is not None:
        if not isinstance(ax, Axes):
            raise TypeError(f"ax must be matplotlib Axes, got {type(ax).__name__}")
        return ax
    _, ax = plt.subplots(subplot_kw={"projection": projection} if projection else None)
    return ax


def decorate(ax: Axes, *, title: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
             logx: bool = False, logy: bool = False, legend: bool | None = None) -> Axes:
    """Set what is given: title, axis labels, log scales; a legend when ``legend`` is True, or
    when it is None and some artist of ``ax`` has a label."""
    if title is not None:
        ax.set_title(title)
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if legend or (legend is None and ax.get_legend_handles_labels()[1]):
        ax.legend()
    return ax


def subplots(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None, title: str | None = None,
             sharex: bool = False, sharey: bool = False, squeeze: bool = True,
             projection: str | None = None) -> tuple[Figure, Any]:
    """A new figure with a grid of ``nrows`` x ``ncols`` axes, in corvid's theme.

    Returns ``(figure, axes)`` as ``matplotlib.pyplot.subplots`` does: one Axes for a 1x1 grid, a
    1-D numpy array of them for one row or column, else 2-D (``squeeze=False``: always 2-D).
    ``title`` is the figure's title above all axes; ``projection="3d"`` makes 3-D axes. Pass the
    axes to the plotting functions with ``ax=``.

    >>> fig, (left, right) = cv.plot.subplots(1, 2, figsize=(9, 3), title="training")
    >>> ax = cv.plot.line([1.0, 0.5, 0.25], ax=left, title="loss", logy=True)
    >>> ax is left, fig.get_suptitle()
    (True, 'training')
    >>> plt.close(fig)
    >>> fig, axes = cv.plot.subplots(2, 3)
    >>> axes.shape, type(axes[0, 0]).__name__
    ((2, 3), 'Axes')
    >>> plt.close(fig)
    """
    if nrows < 1 or ncols < 1:
        raise ValueError(f"subplots: nrows and ncols must be at least 1, got {nrows} x {ncols}")
    with styled():
        fig, axes = plt.subplots(nrows, ncols, figsize=figsize, sharex=sharex, sharey=sharey, squeeze=squeeze,
                                 subplot_kw={"projection": projection} if projection else None)
        if title is not None:
            fig.suptitle(title, fontweight="bold")
    return fig, axes


def savefig(fig: Figure | Axes, path: str | os.PathLike, *, dpi: float | None = None) -> pathlib.Path:
    """Save the figure (or the figure of the axes ``fig``) to ``path``, as PNG, SVG or PDF by its
    extension, cropped to what is drawn. Returns the path. Saving again gives the same file
    (no dates in the metadata).

    ValueError for another extension; TypeError when ``fig`` is not a matplotlib Figure or Axes.

    >>> ax = cv.plot.line([1.0, 2.0, 4.0])
    >>> path = cv.plot.savefig(ax, "curve.svg")
    >>> path, path.read_text().startswith("<?xml")
    (PosixPath('curve.svg'), True)
    >>> first = path.read_bytes()
    >>> cv.plot.savefig(ax.figure, "curve.svg").read_bytes() == first   # byte for byte
    True
    >>> cv.plot.savefig(ax, "curve.png").read_bytes()[:4]
    b'\x89PNG'
    >>> plt.close(ax.figure)
    """
    path = pathlib.Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in SAVE_FORMATS:
        raise ValueError(f"savefig: {path.name!r}: the extension must be one of "
                         f"{', '.join('.' + f for f in SAVE_FORMATS)}")
    if isinstance(fig, Axes):
        fig = fig.figure
    if isinstance(fig, SubFigure):
        fig = fig.figure  # the whole figure it is part of
    if not isinstance(fig, Figure):
        raise TypeError(f"savefig: expected a matplotlib Figure or Axes, got {type(fig).__name__}")
    with styled():
        fig.savefig(path, format=fmt, dpi=dpi, metadata=_STABLE_METADATA[fmt])
    return path

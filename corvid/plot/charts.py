"""Charts of values: line, scatter, bar, hist, errorbar, fill_between.

Each takes corvid tensors, numpy arrays or lists, draws on ``ax`` (or on a new figure's axes
when ``ax`` is None), applies the common labelling keywords (``title``, ``xlabel``, ``ylabel``,
``logx``, ``logy``; a legend appears once an artist has a ``label``) and returns the Axes, so
further matplotlib calls can adjust it. Other keyword arguments go to the matplotlib function of
the same name (``color=``, ``linestyle=``, ``marker=``, ``alpha=``…).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ShapeError
from .figure import Axes, as_array, decorate, new_axes
from .theme import styled

__all__ = ["bar", "errorbar", "fill_between", "hist", "line", "scatter"]


def _vector(value: Any, name: str, fn: str, length: int | None = None) -> np.ndarray:
    arr = as_array(value, name)
    if arr.ndim != 1:
        raise ShapeError(f"{fn}: {name} must be 1-D, got shape {arr.shape}")
    if length is not None and len(arr) != length:
        raise ValueError(f"{fn}: {name} has {len(arr)} values, expected {length} (as many as x)")
    return arr


def line(x: Any, y: Any = None, *, ax: Axes | None = None, label: str | Sequence[str] | None = None,
         title: str | None = None, xlabel: str | None = None, ylabel: str | None = None, logx: bool = False,
         logy: bool = False, **kwargs: Any) -> Axes:
    """Line plot of ``y`` against ``x``; ``line(y)`` plots against 0, 1, 2…

    ``y`` is 1-D (one line) or 2-D (n, k): k lines, one per column, labelled by ``label`` (a list
    of k names). ``x`` is 1-D with n values. ValueError for other shapes.

    >>> import matplotlib.pyplot as plt
    >>> x = cv.linspace(0, 6, 50)
    >>> ax = cv.plot.line(x, x.sin(), label="sin", title="a wave")
    >>> type(ax).__name__, len(ax.lines), ax.get_title()
    ('Axes', 1, 'a wave')
    >>> plt.close(ax.figure)
    >>> ax = cv.plot.line(cv.stack([x.sin(), x.cos()], axis=1), label=["sin", "cos"])   # one line per column
    >>> [line.get_label() for line in ax.lines]
    ['sin', 'cos']
    >>> plt.close(ax.figure)
    >>> ax = cv.plot.line([1.0, 0.5, 0.25], logy=True, xlabel="step")
    >>> ax.lines[0].get_xdata().tolist(), ax.get_yscale()
    ([0, 1, 2], 'log')
    >>> plt.close(ax.figure)
    """
    ys = as_array(x if y is None else y, "y")
    if ys.ndim not in (1, 2):
        raise ShapeError(f"line: y must be 1-D (one line) or 2-D (one line per column), got shape {ys.shape}")
    xs = np.arange(len(ys)) if y is None else _vector(x, "x", "line", len(ys))
    count = 1 if ys.ndim == 1 else ys.shape[1]
    names = [label] * count if label is None or isinstance(label, str) else list(label)
    if len(names) != count:
        raise ValueError(f"line: {len(names)} labels for {count} line{'s' * (count != 1)}")
    with styled():
        ax = new_axes(ax)
        for artist, name in zip(ax.plot(xs, ys, **kwargs), names):
            if name is not None:
                artist.set_label(name)
        return decorate(ax, title=title, xlabel=xlabel, ylabel=ylabel, logx=logx, logy=logy)


def scatter(x: Any, y: Any, *, c: Any = None, s: Any = None, ax: Axes | None = None, label: str | None = None,
            colorbar: bool = False, title: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
            logx: bool = False, logy: bool = False, **kwargs: Any) -> Axes:
    """Points at ``(x[i], y[i])``; ``c`` colours them (one colour, or one value per point mapped
    through the colormap ``cmap=``, with a colorbar when ``colorbar``), ``s`` sizes them.

    ``x`` and ``y`` are 1-D of equal length (ValueError otherwise).

    >>> import matplotlib.pyplot as plt
    >>> ax = cv.plot.scatter(cv.Tensor([0.0, 1.0, 2.0]), cv.Tensor([1.0, 0.0, 1.0]), c=[0.1, 0.5, 0.9], colorbar=True)
    >>> ax.collections[0].get_offsets().tolist(), len(ax.figure.axes)   # the colorbar has its own axes
    ([[0.0, 1.0], [1.0, 0.0], [2.0, 1.0]], 2)
    >>> plt.close(ax.figure)
    """
    xs = _vector(x, "x", "scatter")
    ys = _vector(y, "y", "scatter", len(xs))
    if c is not None and not isinstance(c, str):
        c = as_array(c, "c")
    if s is not None:
        s = as_array(s, "s")
    with styled():
        ax = new_axes(ax)
        points = ax.scatter(xs, ys, c=c, s=s, label=label, **kwargs)
        if colorbar:
            ax.figure.colorbar(points, ax=ax)
        return decorate(ax, title=title, xlabel=xlabel, ylabel=ylabel, logx=logx, logy=logy)


def bar(x: Any, height: Any = None, *, yerr: Any = None, horizontal: bool = False, ax: Axes | None = None,
        label: str | None = None, title: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
        logy: bool = False, **kwargs: Any) -> Axes:
    """Bars of ``height`` at positions or category names ``x``; ``bar(heights)`` puts them at
    0, 1, 2…  ``yerr`` draws error bars; ``horizontal=True`` draws them sideways (``logy`` then
    scales the bar lengths, on the x axis).

    >>> import matplotlib.pyplot as plt
    >>> ax = cv.plot.bar(["cat", "dog", "bird"], [3, 5, 2], ylabel="count")
    >>> [float(p.get_height()) for p in ax.patches], [t.get_text() for t in ax.get_xticklabels()]
    ([3.0, 5.0, 2.0], ['cat', 'dog', 'bird'])
    >>> plt.close(ax.figure)
    >>> ax = cv.plot.bar(cv.Tensor([3.0, 5.0]), horizontal=True)
    >>> [float(p.get_width()) for p in ax.patches]
    [3.0, 5.0]
    >>> plt.close(ax.figure)
    """
    heights = _vector(x if height is None else height, "height", "bar")
    where = np.arange(len(heights)) if height is None else _vector(x, "x", "bar", len(heights))
    err = None if yerr is None else as_array(yerr, "yerr")
    with styled():
        ax = new_axes(ax)
        if horizontal:
            ax.barh(where, heights, xerr=err, label=label, **kwargs)
        else:
            ax.bar(where, heights, yerr=err, label=label, **kwargs)
        ax.grid(False, axis="y" if horizontal else "x")  # grid lines between bars only clutter
        return decorate(ax, title=title, xlabel=xlabel, ylabel=ylabel, logx=logy and horizontal,
                        logy=logy and not horizontal)


def hist(values: Any, bins: int | Sequence[float] = 30, *, density: bool = False, ax: Axes | None = None,
         label: str | None = None, title: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
         logy: bool = False, **kwargs: Any) -> Axes:
    """Histogram of every element of ``values`` (any shape: a weight matrix, a batch of
    activations), in ``bins`` equal bins (or at the given bin edges); ``density=True`` scales
    the bars to a probability density.

    ValueError when ``values`` is empty or holds NaN or infinity (filter them first: the range of
    the bins would be undefined).

    >>> import matplotlib.pyplot as plt
    >>> ax = cv.plot.hist(cv.Tensor([[0.0, 0.1], [0.9, 1.0]]), bins=2)   # all 4 elements
    >>> [float(p.get_height()) for p in ax.patches]
    [2.0, 2.0]
    >>> plt.close(ax.figure)
    >>> ax = cv.plot.hist([0.0, 0.5, 1.0, 1.0], bins=[0, 0.5, 1.0], density=True)
    >>> [float(p.get_height()) for p in ax.patches]
    [0.5, 1.5]
    >>> plt.close(ax.figure)
    >>> cv.plot.hist(cv.Tensor([1.0, float("nan")]))
    Traceback (most recent call last):
        ...
    ValueError: hist: 1 of the 2 values are NaN or infinite; filter them first
    """
    flat = as_array(values, "values").ravel()
    if flat.size == 0:
        raise ValueError("hist: values is empty")
    bad = int(np.count_nonzero(~np.isfinite(flat))) if flat.dtype.kind == "f" else 0
    if bad:
        raise ValueError(f"hist: {bad} of the {flat.size} values are NaN or infinite; filter them first")
    with styled():
        ax = new_axes(ax)
        ax.hist(flat, bins=bins, density=density, label=label, **kwargs)
        return decorate(ax, title=title, xlabel=xlabel, ylabel=ylabel, logy=logy)


def errorbar(x: Any, y: Any, yerr: Any = None, xerr: Any = None, *, ax: Axes | None = None, label: str | None = None,
             fmt: str = "o-", capsize: float = 3, title: str | None = None, xlabel: str | None = None,
             ylabel: str | None = None, logx: bool = False, logy: bool = False, **kwargs: Any) -> Axes:
    """``y`` against ``x`` with error bars: ``yerr``/``xerr`` a scalar, one value per point
    (symmetric) or shape (2, n) (below, above). ``fmt`` is matplotlib's format string.

    ``x`` and ``y`` are 1-D of equal length (ValueError otherwise).

    >>> import matplotlib.pyplot as plt
    >>> ax = cv.plot.errorbar([1, 2, 3], [0.5, 0.75, 0.875], yerr=[0.1, 0.05, 0.02], ylabel="accuracy")
    >>> ax.lines[0].get_ydata().tolist(), type(ax.containers[0]).__name__
    ([0.5, 0.75, 0.875], 'ErrorbarContainer')
    >>> plt.close(ax.figure)
    """
    xs = _vector(x, "x", "errorbar")
    ys = _vector(y, "y", "errorbar", len(xs))
    yerr = None if yerr is None else as_array(yerr, "yerr")
    xerr = None if xerr is None else as_array(xerr, "xerr")
    with styled():
        ax = new_axes(ax)
        ax.errorbar(xs, ys, yerr=yerr, xerr=xerr, fmt=fmt, capsize=capsize, label=label, **kwargs)
        return decorate(ax, title=title, xlabel=xlabel, ylabel=ylabel, logx=logx, logy=logy)


def fill_between(x: Any, y1: Any, y2: Any = 0.0, *, ax: Axes | None = None, label: str | None = None,
                 alpha: float = 0.3, title: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
                 logx: bool = False, logy: bool = False, **kwargs: Any) -> Axes:
    """Shade the band between ``y1`` and ``y2`` (a scalar or values) over ``x``: a range around a
    mean, a confidence interval.

    ``x`` and ``y1`` are 1-D of equal length, ``y2`` a scalar or 1-D of that length too.

    >>> import matplotlib.pyplot as plt
    >>> steps = cv.arange(5.0)
    >>> mean, std = steps * 0.5, cv.full((5,), 0.25)
    >>> ax = cv.plot.fill_between(steps, mean - std, mean + std, label="±1 std")
    >>> ax = cv.plot.line(steps, mean, ax=ax, label="mean")   # on the same axes
    >>> [t.get_text() for t in ax.get_legend().get_texts()]
    ['±1 std', 'mean']
    >>> plt.close(ax.figure)
    """
    xs = _vector(x, "x", "fill_between")
    lower = _vector(y1, "y1", "fill_between", len(xs))
    upper = as_array(y2, "y2")
    if upper.ndim:
        upper = _vector(upper, "y2", "fill_between", len(xs))
    with styled():
        ax = new_axes(ax)
        ax.fill_between(xs, lower, upper, alpha=alpha, label=label, **kwargs)
        return decorate(ax, title=title, xlabel=xlabel, ylabel=ylabel, logx=logx, logy=logy)

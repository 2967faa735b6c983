"""Functions of two variables sampled on a grid: contour lines or filled bands (contour), and a
3-D surface (surface). ``z[i, j]`` is the value at ``(x[j], y[i])``, as ``cv.meshgrid`` and
``np.meshgrid`` lay grids out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ShapeError
from .figure import Axes, as_array, decorate, new_axes
from .theme import styled

__all__ = ["contour", "surface"]


def _grid(z: Any, x: Any, y: Any, fn: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, Y, Z), all (ny, nx): ``x``/``y`` may be 1-D (nx)/(ny), 2-D like z, or None (0, 1, 2…)."""
    zs = as_array(z, "z")
    if zs.ndim != 2:
        raise ShapeError(f"{fn}: z must be 2-D (ny, nx), got shape {zs.shape}")
    ny, nx = zs.shape
    xs = np.arange(nx) if x is None else as_array(x, "x")
    ys = np.arange(ny) if y is None else as_array(y, "y")
    if xs.ndim == 1 and ys.ndim == 1:
        if (len(xs), len(ys)) != (nx, ny):
            raise ShapeError(f"{fn}: x has {len(xs)} values and y {len(ys)}; z of shape {zs.shape} needs {nx} and {ny}")
        xs, ys = np.meshgrid(xs, ys)
    if xs.shape != zs.shape or ys.shape != zs.shape:
        raise ShapeError(f"{fn}: x and y must be 1-D ({nx},) and ({ny},), or 2-D like z {zs.shape}; "
                         f"got {xs.shape} and {ys.shape}")
    return xs, ys, zs


def contour(z: Any, x: Any = None, y: Any = None, *, levels: int | Sequence[float] = 10, filled: bool = True,
            colorbar: bool = True, cmap: str | None = None, ax: Axes | None = None, title: str | None = None,
            xlabel: str | None = None, ylabel: str | None = None, **kwargs: Any) -> Axes:
    """Contours of ``z`` (ny, nx) over the grid ``x``, ``y``: filled bands between ``levels``
    (their number, or the values), or only the lines with ``filled=False`` (then labelled with
    their values). The colorbar is on by default.

    >>> import matplotlib.pyplot as plt
    >>> xs = cv.linspace(-2, 2, 21)
    >>> X, Y = cv.meshgrid(xs, xs)
    >>> ax = cv.plot.contour((X ** 2 + Y ** 2).sqrt(), xs, xs, title="distance from 0")
    >>> type(ax).__name__, ax.get_title(), len(ax.figure.axes)   # the colorbar has its own axes
    ('Axes', 'distance from 0', 2)
    >>> plt.close(ax.figure)
    >>> ax = cv.plot.contour((X ** 2 + Y ** 2).sqrt(), xs, xs, levels=[0.5, 1.0], filled=False, colorbar=False)
    >>> sorted({t.get_text() for t in ax.texts})   # the lines' labels
    ['0.5', '1.0']
    >>> plt.close(ax.figure)
    """
    xs, ys, zs = _grid(z, x, y, "contour")
    with styled():
        ax = new_axes(ax)
        drawn = (ax.contourf if filled else ax.contour)(xs, ys, zs, levels=levels, cmap=cmap, **kwargs)
        if not filled:
            ax.clabel(drawn, fontsize=8)
        if colorbar:
            ax.figure.colorbar(drawn, ax=ax)
        return decorate(ax, title=title, xlabel=xlabel, ylabel=ylabel, legend=False)


def surface(z: Any, x: Any = None, y: Any = None, *, cmap: str = "viridis", colorbar: bool = False,
            ax: Axes | None = None, title: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
            zlabel: str | None = None, **kwargs: Any) -> Axes:
    """``z`` (ny, nx) as a 3-D surface over the grid ``x``, ``y`` (1-D or 2-D like z), coloured
    by height. ``ax`` must be 3-D axes (``cv.plot.subplots(projection="3d")``; ValueError
    otherwise); without one, a new figure gets them. Returns the 3-D Axes.

    >>> import matplotlib.pyplot as plt
    >>> xs = cv.linspace(-3, 3, 20)
    >>> X, Y = cv.meshgrid(xs, xs)
    >>> ax = cv.plot.surface((-(X ** 2 + Y ** 2) / 2).exp(), xs, xs, title="a Gaussian bump", zlabel="height")
    >>> type(ax).__name__, ax.get_zlabel()
    ('Axes3D', 'height')
    >>> plt.close(ax.figure)
    """
    xs, ys, zs = _grid(z, x, y, "surface")
    if ax is not None and getattr(ax, "name", None) != "3d":
        raise ValueError("surface: ax must be 3-D axes, e.g. from cv.plot.subplots(projection='3d')")
    with styled():
        ax = new_axes(ax, projection="3d")
        drawn = ax.plot_surface(xs, ys, zs, cmap=cmap, linewidth=0, antialiased=True, **kwargs)
        if zlabel is not None:
            ax.set_zlabel(zlabel)
        if colorbar:
            ax.figure.colorbar(drawn, ax=ax, shrink=0.7)
        return decorate(ax, title=title, xlabel=xlabel, ylabel=ylabel, legend=False)

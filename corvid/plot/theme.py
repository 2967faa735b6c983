"""The look of corvid figures: one style dictionary, applied around each corvid plotting call.

matplotlib reads most style settings (rcParams) when an artist is created, so every function
of :mod:`corvid.plot` draws inside :func:`theme`, a ``matplotlib.rc_context``. Nothing changes
matplotlib's global settings: figures drawn with plain matplotlib keep its own defaults, unless
drawn inside ``with cv.plot.theme():`` too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import matplotlib

__all__ = ["PALETTE", "STYLE", "styled", "theme"]

# Distinguishable for the common colour-vision deficiencies, and readable on white.
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#7f7f7f", "#000000")

STYLE: dict[str, Any] = {
    "figure.figsize": (6.0, 4.0),
    "figure.dpi": 100,
    "figure.facecolor": "white",
    "figure.constrained_layout.use": True,  # room for titles, labels and colorbars without overlap
    "font.size": 10,
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
    "axes.titlesize": 12,
    "axes.titleweight": "bold",
    "axes.labelsize": 10,
    "axes.edgecolor": "#555555",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "#e3e3e3",
    "grid.linewidth": 0.8,
    "xtick.color": "#555555",
    "ytick.color": "#555555",
    "lines.linewidth": 1.8,
    "lines.markersize": 5,
    "legend.frameon": False,
    "image.cmap": "viridis",
    "savefig.dpi": 100,
    "savefig.bbox": "tight",
    "savefig.facecolor": "white",
    "svg.hashsalt": "corvid",  # fixed ids in SVG files: saving again gives the same file
}

_depth = 0  # how many theme() contexts are open: corvid calls inside one keep the user's overrides


@contextlib.contextmanager
def theme(rc: dict[str, Any] | None = None) -> Iterator[None]:
    """Draw with corvid's style (:data:`STYLE`), updated by the matplotlib rcParams in ``rc``.

    Applies to everything created inside the block, corvid plots and plain matplotlib alike, and
    is undone at its end. Corvid plotting functions called inside keep the block's settings.
    KeyError (from matplotlib) for a name that is not an rcParam.

    >>> import matplotlib, matplotlib.pyplot as plt
    >>> before = matplotlib.rcParams["lines.linewidth"]
    >>> with cv.plot.theme({"lines.linewidth": 3.0, "figure.figsize": (8, 3)}):
    ...     ax = cv.plot.line([1.0, 2.0])
    ...     fig, plain = plt.subplots()          # plain matplotlib inside the block is themed too
    >>> ax.lines[0].get_linewidth(), plain.spines["top"].get_visible()
    (3.0, False)
    >>> matplotlib.rcParams["lines.linewidth"] == before   # matplotlib's own settings are back
    True
    >>> plt.close(ax.figure); plt.close(fig)
    """
    global _depth
    with matplotlib.rc_context({**STYLE, **(rc or {})}):
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1


def styled() -> contextlib.AbstractContextManager:
    """The context every corvid plotting function draws in: :func:`theme` unless one is open."""
    return contextlib.nullcontext() if _depth else theme()

"""corvid.plot: matplotlib charts that take corvid tensors directly (an optional extra:
``pip install "corvid[plot]"``; importing it without matplotlib raises an ImportError that says so).

Every function accepts corvid Tensors (computed with ``.numpy()``), numpy arrays and lists, draws
in corvid's theme (:mod:`corvid.plot.theme`, applied to corvid's figures only) and returns the
matplotlib Axes (``image_grid``: the Figure), so anything matplotlib can do is one call away.
Without ``ax=`` each call makes a new figure.

* values: :func:`line`, :func:`scatter`, :func:`bar`, :func:`hist`, :func:`errorbar`, :func:`fill_between`
* arrays as pictures: :func:`imshow`, :func:`heatmap`, :func:`image_grid`
* fields over a grid: :func:`contour`, :func:`surface` (3-D)
* layout and files: :func:`subplots`, :func:`savefig` (PNG, SVG, PDF), :func:`theme`

::

    fig, (left, right) = cv.plot.subplots(1, 2, figsize=(9, 3))
    cv.plot.line(losses, ax=left, title="training loss", xlabel="step", logy=True)
    cv.plot.image_grid(x[:16], labels=y[:16], predictions=model(x[:16]))
    cv.plot.savefig(fig, "curves.svg")

Outside Jupyter, matplotlib draws with its file-only Agg backend (set ``MPLBACKEND`` to get
windows); in Jupyter, figures appear under the cell.
"""

from .charts import bar, errorbar, fill_between, hist, line, scatter
from .fields import contour, surface
from .figure import savefig, subplots
from .images import heatmap, image_grid, imshow
from .theme import PALETTE, STYLE, theme

__all__ = ["PALETTE", "STYLE", "bar", "contour", "errorbar", "fill_between", "heatmap", "hist", "image_grid", "imshow",
           "line", "savefig", "scatter", "subplots", "surface", "theme"]

"""Pictures of arrays: one image (imshow), a matrix as coloured cells (heatmap), and a batch of
images in a grid with their labels and predictions (image_grid).

Images may come channels-first, as corvid's convolutions take them ((C, H, W), batches
(N, C, H, W)), or channels-last ((H, W, C)); C is 1 (grey), 3 (RGB) or 4 (RGBA). When both
readings fit, channels-last wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.ticker import MaxNLocator

from ..errors import ShapeError
from .figure import Axes, Figure, as_array, decorate, new_axes, plt
from .theme import styled

__all__ = ["heatmap", "image_grid", "imshow"]

MAX_GRID_IMAGES = 256  # a bigger grid is unreadable and slow to draw: slice the batch first
_CHANNELS = (1, 3, 4)
_WRONG, _RIGHT = "#d62728", "#2a7d2e"


def _to_image(arr: np.ndarray, what: str) -> np.ndarray:
    """(H, W) or (H, W, 3|4) from (H, W), (H, W, C) or (C, H, W)."""
    if arr.ndim == 3 and arr.shape[-1] not in _CHANNELS and arr.shape[0] in _CHANNELS:
        arr = np.moveaxis(arr, 0, -1)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim == 2 or (arr.ndim == 3 and arr.shape[-1] in (3, 4)):
        return arr
    raise ShapeError(f"{what}: an image is (H, W), (H, W, C) or (C, H, W) with C in 1, 3, 4; got shape {arr.shape}")


def imshow(image: Any, *, ax: Axes | None = None, cmap: str = "gray", colorbar: bool = False,
           vmin: float | None = None, vmax: float | None = None, title: str | None = None, axis: bool = False,
           **kwargs: Any) -> Axes:
    """Show one image: grey levels through ``cmap`` for one channel, colours for RGB(A).

    ``image``: (H, W), (H, W, C) or (C, H, W) with C in 1, 3, 4 (ValueError otherwise).
    ``colorbar`` adds the scale of values beside it; ``axis=True`` keeps the pixel-coordinate
    ticks. Returns the Axes; the image artist is ``ax.images[0]``.

    >>> ax = cv.plot.imshow(cv.linspace(0, 1, 30).reshape(1, 5, 6), title="a ramp")   # (C, H, W), C = 1
    >>> ax.images[0].get_array().shape, ax.get_title()
    ((5, 6), 'a ramp')
    >>> plt.close(ax.figure)
    >>> ax = cv.plot.imshow(cv.zeros(3, 2, 2), axis=True)   # RGB, channels first
    >>> ax.images[0].get_array().shape
    (2, 2, 3)
    >>> plt.close(ax.figure)
    """
    img = _to_image(as_array(image, "image"), "imshow")
    with styled():
        ax = new_axes(ax)
        shown = ax.imshow(img, cmap=cmap if img.ndim == 2 else None, vmin=vmin, vmax=vmax, **kwargs)
        ax.grid(False)
        if not axis:
            ax.set_axis_off()
        if colorbar:
            ax.figure.colorbar(shown, ax=ax)
        return decorate(ax, title=title)


def heatmap(matrix: Any, *, ax: Axes | None = None, cmap: str = "viridis", colorbar: bool = True,
            annotate: bool = False, fmt: str = "{:.2g}", xticklabels: Sequence[Any] | None = None,
            yticklabels: Sequence[Any] | None = None, vmin: float | None = None, vmax: float | None = None,
            title: str | None = None, xlabel: str | None = None, ylabel: str | None = None, **kwargs: Any) -> Axes:
    """A matrix as a grid of coloured cells, row 0 at the top: attention weights, a confusion
    matrix, a correlation matrix.

    ``matrix`` is 2-D (ValueError otherwise). ``annotate=True`` writes each value in its cell,
    formatted by ``fmt``; ``xticklabels``/``yticklabels`` name the columns/rows (as many as there
    are). The colorbar is on by default.

    >>> confusion = cv.Tensor([[5, 1], [0, 4]])
    >>> names = ["cat", "dog"]
    >>> ax = cv.plot.heatmap(confusion, annotate=True, fmt="{:d}", xticklabels=names, yticklabels=names,
    ...                      xlabel="predicted", ylabel="true")
    >>> [t.get_text() for t in ax.texts], [t.get_text() for t in ax.get_xticklabels()]
    (['5', '1', '0', '4'], ['cat', 'dog'])
    >>> plt.close(ax.figure)
    """
    m = as_array(matrix, "matrix")
    if m.ndim != 2:
        raise ShapeError(f"heatmap: matrix must be 2-D, got shape {m.shape}")
    for name, ticks, count in (("xticklabels", xticklabels, m.shape[1]), ("yticklabels", yticklabels, m.shape[0])):
        if ticks is not None and len(ticks) != count:
            raise ValueError(f"heatmap: {len(ticks)} {name} for {count} {'columns' if name[0] == 'x' else 'rows'}")
    with styled():
        ax = new_axes(ax)
        shown = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest", **kwargs)
        ax.grid(False)
        ax.spines[:].set_visible(False)
        for axis, ticks, count in ((ax.xaxis, xticklabels, m.shape[1]), (ax.yaxis, yticklabels, m.shape[0])):
            if ticks is not None:
                axis.set_ticks(range(count), [str(t) for t in ticks])
            else:
                axis.set_major_locator(MaxNLocator(integer=True))  # cells sit at whole numbers
        if annotate:
            _annotate(ax, m, shown, fmt)
        if colorbar:
            ax.figure.colorbar(shown, ax=ax)
        return decorate(ax, title=title, xlabel=xlabel, ylabel=ylabel, legend=False)


def _annotate(ax: Axes, m: np.ndarray, shown: Any, fmt: str) -> None:
    """Each value in its cell, white on the dark half of the colormap, black on the light half."""
    levels = shown.norm(m)
    for (i, j), value in np.ndenumerate(m):
        dark = np.mean(shown.cmap(levels[i, j])[:3]) < 0.5
        ax.text(j, i, fmt.format(value.item()), ha="center", va="center", fontsize=8,
                color="white" if dark else "black")


def _class_indices(values: Any, name: str, n: int) -> np.ndarray:
    """Class indices (n,) from indices, or from scores (n, classes) by their argmax."""
    arr = as_array(values, name)
    if arr.ndim == 2:
        arr = arr.argmax(axis=1)
    if arr.shape != (n,):
        raise ValueError(f"image_grid: {name} must hold one class index per image ({n},) or scores ({n}, classes); "
                         f"got shape {arr.shape}")
    return arr


def image_grid(images: Any, labels: Any = None, predictions: Any = None, *, ncols: int = 8,
               class_names: Sequence[str] | None = None, cmap: str = "gray", title: str | None = None,
               size: float = 1.25) -> Figure:
    """A batch of images in a grid, each titled by its label and/or predicted class; mistakes
    (prediction ≠ label) get a red title, ``"3 (true 5)"``, and a red frame; correct predictions
    a green title.

    ``images``: a batch (N, H, W), (N, C, H, W) or (N, H, W, C), C in 1, 3, 4, at most 256 images
    (slice a bigger batch first). ``labels`` and ``predictions``: class indices (N,), or for
    ``predictions`` scores/logits (N, classes) whose argmax is taken; ``class_names`` names the
    classes. ``size`` is the width of one image in inches. Returns the new Figure. ValueError
    for a batch that is not images, or labels/predictions that do not match it.

    >>> images = cv.zeros(4, 1, 8, 8)
    >>> fig = cv.plot.image_grid(images, labels=[0, 1, 2, 0], predictions=[0, 1, 1, 0], ncols=2,
    ...                          class_names=["cat", "dog", "bird"])
    >>> type(fig).__name__, [ax.get_title() for ax in fig.axes]
    ('Figure', ['cat', 'dog', 'dog (true bird)', 'cat'])
    >>> plt.close(fig)
    >>> logits = cv.Tensor([[2.0, 0.1], [0.3, 1.0], [0.9, 0.1]])
    >>> fig = cv.plot.image_grid(cv.zeros(3, 4, 4), labels=[0, 0, 0], predictions=logits, ncols=2)
    >>> [ax.get_title() for ax in fig.axes]   # the 4th cell of the 2 x 2 grid is empty
    ['0', '1 (true 0)', '0', '']
    >>> plt.close(fig)
    """
    batch = as_array(images, "images")
    if batch.ndim not in (3, 4):
        raise ValueError(f"image_grid: images must be a batch (N, H, W), (N, C, H, W) or (N, H, W, C); "
                         f"got shape {batch.shape}")
    n = len(batch)
    if not 1 <= n <= MAX_GRID_IMAGES:
        raise ValueError(f"image_grid: {n} images; show 1 to {MAX_GRID_IMAGES} (slice the batch, e.g. images[:64])")
    if ncols < 1:
        raise ValueError(f"image_grid: ncols must be at least 1, got {ncols}")
    pictures = [_to_image(batch[i], "image_grid") for i in range(n)]
    truth = None if labels is None else _class_indices(labels, "labels", n)
    guess = None if predictions is None else _class_indices(predictions, "predictions", n)

    def name(k: Any) -> str:
        return str(class_names[int(k)]) if class_names is not None else str(k.item())

    cols = min(ncols, n)
    rows = -(-n // cols)
    titled = truth is not None or guess is not None
    with styled():
        fig, axes = plt.subplots(rows, cols, squeeze=False, figsize=(cols * size, rows * (size + 0.25 * titled)))
        for i, ax in enumerate(axes.flat):
            ax.grid(False)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.spines[:].set_visible(False)
            if i >= n:
                ax.set_axis_off()
                continue
            ax.imshow(pictures[i], cmap=cmap if pictures[i].ndim == 2 else None)
            if guess is None and truth is not None:
                ax.set_title(name(truth[i]), fontsize=10, fontweight="normal")
            elif guess is not None:
                wrong = truth is not None and guess[i] != truth[i]
                text = f"{name(guess[i])} (true {name(truth[i])})" if wrong else name(guess[i])
                color = _WRONG if wrong else _RIGHT if truth is not None else "black"
                ax.set_title(text, fontsize=10, color=color, fontweight="bold" if wrong else "normal")
                if wrong:
                    ax.spines[:].set_visible(True)
                    ax.spines[:].set_color(_WRONG)
                    ax.spines[:].set_linewidth(2.5)
        if title is not None:
            fig.suptitle(title, fontweight="bold")
    return fig

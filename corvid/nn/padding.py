"""``F.pad``: padding with a constant or by reflecting, replicating or wrapping the edges.

>>> import corvid.nn.functional as F
>>> F.pad(cv.Tensor([[1.0, 2.0, 3.0]]), (2, 1), mode="reflect").tolist()
[[3.0, 2.0, 1.0, 2.0, 3.0, 2.0]]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ops.manipulation import take_at
from ..tensor import Tensor

__all__ = ["pad"]

_MODES = ("constant", "reflect", "replicate", "circular")


def _source_index(n: int, before: int, after: int, mode: str) -> np.ndarray:
    """For each position of the padded axis, the index of the input element it copies (a
    negative amount starts or ends the range inside the axis: it crops)."""
    i = np.arange(-before, n + after)
    if mode == "replicate":
        return np.clip(i, 0, n - 1)
    if mode == "circular":
        return i % n
    period = 2 * (n - 1)  # reflect: mirror at both ends without repeating the edge element
    i = np.abs(i) % period if period else np.zeros_like(i)
    return np.where(i >= n, period - i, i)


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad ``x`` as ``torch.nn.functional.pad``: ``pad`` lists ``(before, after)`` amounts starting
    from the *last* axis — ``(left, right)`` pads the last axis, ``(left, right, top, bottom)``
    the last two.

    ``mode`` is ``"constant"`` (fill with ``value``, default 0), ``"reflect"`` (mirror without
    repeating the edge; amounts below the axis size), ``"replicate"`` (repeat the edge) or
    ``"circular"`` (wrap around; amounts at most the axis size). Negative amounts crop, in every
    mode, as torch's: ``"reflect"`` and ``"replicate"`` still mirror or repeat the uncropped
    axis (``(-4, 3)`` of ``[0..5]`` reflects to ``[4, 5, 4, 3, 2]``), ``"circular"`` wraps the
    cropped one (``(-1, 2)`` gives ``[1, 2, 3, 4, 5, 1, 2]``). ValueError for an odd-length
    ``pad``, more pairs than axes, an unknown mode, or amounts the mode cannot produce (a crop
    beyond the axis, an empty result outside ``"constant"`` mode).

    >>> pad(cv.Tensor([[1.0, 2.0]]), (1, 1, 1, 0), value=9.0).tolist()
    [[9.0, 9.0, 9.0, 9.0], [9.0, 1.0, 2.0, 9.0]]
    """
    x = x if isinstance(x, Tensor) else Tensor(x)
    amounts = [int(p) for p in pad]
    if len(amounts) % 2 or len(amounts) // 2 > x.ndim:
        raise ValueError(f"pad: {tuple(pad)} must be (before, after) pairs for at most {x.ndim} axes of the input "
                         f"of shape {x.shape}")
    if mode not in _MODES:
        raise ValueError(f"pad: unknown mode {mode!r}; expected one of {', '.join(_MODES)}")
    pairs = [(0, 0)] * x.ndim
    for j in range(len(amounts) // 2):
        pairs[x.ndim - 1 - j] = (amounts[2 * j], amounts[2 * j + 1])
    if mode == "constant":
        return x.pad(pairs, 0.0 if value is None else value)
    if value is not None and value != 0:
        raise ValueError(f"pad: value only applies to mode 'constant', not {mode!r}")
    if mode == "circular":  # the wrap reads the cropped axis
        x = x.pad([(min(b, 0), min(a, 0)) for b, a in pairs])
        pairs = [(max(b, 0), max(a, 0)) for b, a in pairs]
    for axis, (before, after) in enumerate(pairs):
        if before == 0 and after == 0:
            continue
        n = x.shape[axis]
        limit = n - 1 if mode == "reflect" else n if mode == "circular" else None
        if n == 0 or min(before, after) < -n or n + before + after < 1 or \
                (limit is not None and max(before, after) > limit):
            raise ValueError(f"pad: mode {mode!r} cannot pad axis {axis} of size {n} by {(before, after)} "
                             f"(input shape {x.shape})")
        x = take_at(x, Tensor(_source_index(n, before, after, mode), device=x.device), axis)  # in range: no check
    return x

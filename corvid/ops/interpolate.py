"""Resampling of the spatial axes of ``(N, C, *spatial)`` tensors (torch's ``interpolate``).

Every mode is separable: resampling a 2-d or 3-d input is resampling one axis after another.
Which input elements feed an output element, and with which weights, depends only on the
shapes, so it is computed here in numpy, once per call, and the tensor work is one small product
per axis with a constant ``(in, out)`` matrix: a row of taps (2 for linear, 4 for cubic, with
clamped indices adding up at the borders) per output element. The matrices are constants, so
gradients, jvp and vmap follow from the matmul. Nearest neighbour copies instead of multiplying:
an integer upscale is a broadcast (expand + reshape), anything else a gather
(:func:`corvid.ops.manipulation.take_at`), so values come back bit-exactly.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import ShapeError
from .manipulation import take_at

if TYPE_CHECKING:
    from ..tensor import Tensor

__all__ = ["interpolate"]

# mode -> the number of spatial dims it needs (None: any)
_MODES = {"nearest": None, "nearest-exact": None, "linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3,
          "area": None}
CUBIC_A = -0.75  # torch's (and OpenCV's) cubic convolution constant


def _scale(i: int, o: int, align_corners: bool, factor: float | None) -> float:
    """Source step per output element (torch's ``area_pixel_compute_scale``)."""
    if align_corners:
        return (i - 1) / (o - 1) if o > 1 else 0.0
    return 1.0 / factor if factor is not None and factor > 0 else i / o


def _source(o: int, scale: float, align_corners: bool, clamp: bool) -> np.ndarray:
    dst = np.arange(o, dtype=np.float64)
    if align_corners:
        return dst * scale
    src = (dst + 0.5) * scale - 0.5
    return np.maximum(src, 0.0) if clamp else src


def _cubic(t: np.ndarray) -> np.ndarray:
    """Weights of the four taps ``floor(src)-1 .. floor(src)+2`` for fractions ``t``, shape ``(o, 4)``."""
    a = CUBIC_A
    near = lambda x: ((a + 2) * x - (a + 3)) * x * x + 1  # noqa: E731  |x| <= 1
    far = lambda x: ((a * x - 5 * a) * x + 8 * a) * x - 4 * a  # noqa: E731  1 < |x| < 2
    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=1)


def _matrix(i: int, o: int, mode: str, align_corners: bool, factor: float | None) -> np.ndarray:
    """The ``(i, o)`` resampling matrix of one axis for the linear and cubic modes."""
    scale = _scale(i, o, align_corners, factor)
    m = np.zeros((i, o))
    cols = np.arange(o)
    if mode == "bicubic":
        src = _source(o, scale, align_corners, clamp=False)
        base = np.floor(src).astype(np.int64)
        w = _cubic(src - base)
        for tap in range(4):
            np.add.at(m, (np.clip(base - 1 + tap, 0, i - 1), cols), w[:, tap])
        return m
    src = _source(o, scale, align_corners, clamp=True)
    lo = np.minimum(np.floor(src).astype(np.int64), i - 1)
    hi = np.minimum(lo + 1, i - 1)
    frac = src - lo
    np.add.at(m, (lo, cols), 1.0 - frac)
    np.add.at(m, (hi, cols), frac)
    return m


def _nearest_index(i: int, o: int, factor: float | None, exact: bool) -> np.ndarray:
    # torch computes these in float32; so do we, so that boundary cases pick the same element
    scale = np.float32(1.0 / factor) if factor is not None and factor > 0 else np.float32(i) / np.float32(o)
    dst = np.arange(o, dtype=np.float32)
    src = np.floor((dst + np.float32(0.5)) * scale) if exact else np.floor(dst * scale)
    return np.minimum(src.astype(np.int64), i - 1)


def _sizes(x: Tensor, nd: int, size: Any, scale_factor: Any) -> tuple[tuple[int, ...], tuple[float | None, ...]]:
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    spatial = x.shape[2:]
    if size is not None:
        sizes = list(size) if isinstance(size, (tuple, list)) else [size] * nd
        if len(sizes) != nd or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in sizes):
            raise ShapeError(f"interpolate: size must be {nd} positive ints for input of shape {x.shape}, got {size!r}")
        return tuple(int(s) for s in sizes), (None,) * nd
    factors = list(scale_factor) if isinstance(scale_factor, (tuple, list)) else [scale_factor] * nd
    if len(factors) != nd or any(not isinstance(f, (int, float, np.number)) or not f > 0 for f in factors):
        raise ShapeError(f"interpolate: scale_factor must be {nd} positive numbers for input of shape {x.shape}, "
                         f"got {scale_factor!r}")
    sizes = tuple(math.floor(i * float(f)) for i, f in zip(spatial, factors))
    if any(s < 1 for s in sizes):
        raise ValueError(f"interpolate: scale_factor {scale_factor!r} gives the empty output size {sizes} "
                         f"for input of shape {x.shape}")
    return sizes, tuple(float(f) for f in factors)


def interpolate(x: Tensor, size: int | Sequence[int] | None = None, scale_factor: float | Sequence[float] | None = None,
                mode: str = "nearest", align_corners: bool | None = None) -> Tensor:
    """Resample the spatial axes of ``x`` ``(N, C, *spatial)`` (1 to 3 of them) to ``size``, or to
    ``floor(spatial * scale_factor)``, with torch's semantics (``recompute_scale_factor=False``).

    Modes: ``"nearest"`` (source ``floor(dst*scale)``), ``"nearest-exact"``
    (``floor((dst+0.5)*scale)``), ``"linear"`` (1 spatial dim), ``"bilinear"`` (2),
    ``"trilinear"`` (3), ``"bicubic"`` (2; cubic convolution with ``A = -0.75``, border taps
    clamped into the input) and ``"area"`` (:func:`corvid.ops.conv.adaptive_avg_pool`).
    ``align_corners`` (linear and cubic modes only; default False) maps the corner elements of input
    and output onto each other instead of their outer edges. A given ``scale_factor`` sets the
    sampling step ``1/scale_factor`` as in torch. Float input only for the non-nearest modes.
    ValueError for an unknown mode, a mode that does not match the number of spatial dims, both
    or neither of ``size`` and ``scale_factor``, or an output size below 1.

    >>> interpolate(cv.Tensor([[[1.0, 2.0]]]), scale_factor=2, mode="linear").tolist()
    [[[1.0, 1.25, 1.75, 2.0]]]
    """
    from ..tensor import Tensor

    x = x if isinstance(x, Tensor) else Tensor(x)
    if mode not in _MODES:
        raise ValueError(f"interpolate: unknown mode {mode!r}; expected one of {', '.join(_MODES)}")
    nd = x.ndim - 2
    if not 1 <= nd <= 3:
        raise ShapeError(f"interpolate: expected an input of 3 to 5 dimensions (N, C, *spatial), got shape {x.shape}")
    want = _MODES[mode]
    if want is not None and want != nd:
        raise ValueError(f"interpolate: mode {mode!r} needs {want} spatial dimension{'s' if want > 1 else ''}, "
                         f"got input of shape {x.shape}")
    linear = mode in ("linear", "bilinear", "bicubic", "trilinear")
    if align_corners is not None and not linear:
        raise ShapeError(f"interpolate: align_corners only applies to linear and cubic modes, not {mode!r}")
    if linear and not x.dtype.is_float or mode == "area" and not x.dtype.is_float:
        raise TypeError(f"interpolate: mode {mode!r} needs a float tensor, got {x.dtype.name}")
    sizes, factors = _sizes(x, nd, size, scale_factor)
    if mode == "area":
        from .conv import adaptive_avg_pool

        return adaptive_avg_pool(x, sizes)
    for j, (o, f) in enumerate(zip(sizes, factors)):
        axis, i = 2 + j, x.shape[2 + j]
        if linear:
            m = _matrix(i, o, mode, bool(align_corners), f)
            if i == o and np.array_equal(m, np.eye(i)):
                continue
            x = (x.moveaxis(axis, -1) @ Tensor(m.astype(x.dtype.np), device=x.device)).moveaxis(-1, axis)
        else:
            x = _nearest(x, axis, o, f, mode == "nearest-exact")
    return x


def _nearest(x: Tensor, axis: int, o: int, factor: float | None, exact: bool) -> Tensor:
    from ..tensor import Tensor

    i = x.shape[axis]
    index = _nearest_index(i, o, factor, exact)
    if np.array_equal(index, np.arange(o)) and i == o:
        return x
    if o % i == 0 and np.array_equal(index, np.arange(o) // (o // i)):  # integer upscale: a broadcast
        r = o // i
        shape = x.shape[:axis + 1] + (r,) + x.shape[axis + 1:]
        return x.unsqueeze(axis + 1).expand(shape).reshape(x.shape[:axis] + (o,) + x.shape[axis + 1:])
    return take_at(x, Tensor(index, device=x.device), axis)

"""Pooling and resampling layers: max, average and adaptive pooling over 1 to 3 spatial
dimensions, and :class:`Upsample` (``F.interpolate``).

The modules hold the hyperparameters and call corvid's pooling functions (:mod:`corvid.ops.conv`:
a window view reduced in one kernel; a reshape when the windows tile the input) with PyTorch's
arguments and output sizes. Inputs are ``(N, C, *spatial)`` or unbatched ``(C, *spatial)``.

>>> from corvid import nn
>>> nn.MaxPool2d(2)(cv.arange(16.0).reshape(1, 1, 4, 4)).reshape(-1).tolist()
[5.0, 7.0, 13.0, 15.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..ops import conv as pools
from ..ops.interpolate import interpolate as _interpolate
from ..tensor import Tensor
from .module import Module, check_input

__all__ = [
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "Upsample",
    "interpolate",
]


def interpolate(input: Tensor, size: int | Sequence[int] | None = None,
                scale_factor: float | Sequence[float] | None = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resample the spatial axes of ``(N, C, *spatial)`` to ``size`` or by ``scale_factor``
    (``torch.nn.functional.interpolate``; modes ``nearest``, ``nearest-exact``, ``linear``,
    ``bilinear``, ``bicubic``, ``trilinear``, ``area``: see :func:`corvid.interpolate`).
    ``recompute_scale_factor=True`` computes the output size from ``scale_factor`` and then
    samples as if that size had been given. ValueError for ``antialias=True`` (not implemented).

    >>> interpolate(cv.ones(1, 1, 2, 2), scale_factor=2, mode="bilinear").shape
    (1, 1, 4, 4)
    """
    if antialias:
        raise ValueError("interpolate: antialias=True is not implemented")
    if recompute_scale_factor and scale_factor is not None:
        nd = input.ndim - 2
        factors = scale_factor if isinstance(scale_factor, (tuple, list)) else [scale_factor] * nd
        size, scale_factor = [math.floor(s * f) for s, f in zip(input.shape[2:], factors)], None
    return _interpolate(input, size, scale_factor, mode, align_corners)


def _spatial_text(nd: int) -> str:
    return ", ".join(("L",) if nd == 1 else ("H", "W") if nd == 2 else ("D", "H", "W"))


class _Pool(Module):
    _nd = 0

    def _check(self, x: Any) -> Tensor:
        s = _spatial_text(self._nd)
        return check_input(self, x, (self._nd + 1, self._nd + 2), f"(N, C, {s}) or (C, {s})")


class _MaxPool(_Pool):
    def __init__(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, return_indices: bool = False,
                 ceil_mode: bool = False):
        super().__init__()
        if return_indices:
            raise ValueError(f"{type(self).__name__}: return_indices=True is not implemented")
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.dilation, self.ceil_mode = padding, dilation, ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        k = self.kernel_size if not isinstance(self.kernel_size, int) else (self.kernel_size,) * self._nd
        return pools.max_pool(self._check(x), tuple(k), self.stride, self.padding, self.dilation, self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPool):
    """Max over windows of ``(N, C, L)`` (torch's arguments; ``stride`` defaults to ``kernel_size``).

    >>> MaxPool1d(2)(cv.Tensor([[[1.0, 3.0, 2.0, 0.0]]])).tolist()
    [[[3.0, 2.0]]]
    """

    _nd = 1


class MaxPool2d(_MaxPool):
    """Max over windows of ``(N, C, H, W)``; see :class:`MaxPool1d`."""

    _nd = 2


class MaxPool3d(_MaxPool):
    """Max over windows of ``(N, C, D, H, W)``; see :class:`MaxPool1d`."""

    _nd = 3


class _AvgPool(_Pool):
    def __init__(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, x: Tensor) -> Tensor:
        k = self.kernel_size if not isinstance(self.kernel_size, int) else (self.kernel_size,) * self._nd
        return pools.avg_pool(self._check(x), tuple(k), self.stride, self.padding, self.ceil_mode,
                              self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPool):
    """Mean over windows of ``(N, C, L)`` (torch's arguments: ``count_include_pad`` counts the
    zero padding in the divisor, ``divisor_override`` replaces it).

    >>> AvgPool1d(2)(cv.Tensor([[[1.0, 3.0, 2.0, 0.0]]])).tolist()
    [[[2.0, 1.0]]]
    """

    _nd = 1


class AvgPool2d(_AvgPool):
    """Mean over windows of ``(N, C, H, W)``; see :class:`AvgPool1d`."""

    _nd = 2


class AvgPool3d(_AvgPool):
    """Mean over windows of ``(N, C, D, H, W)``; see :class:`AvgPool1d`."""

    _nd = 3


class _AdaptivePool(_Pool):
    _reduce = staticmethod(pools.adaptive_avg_pool)

    def __init__(self, output_size: int | Sequence[int | None]):
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        size = self.output_size if not isinstance(self.output_size, int) else (self.output_size,) * self._nd
        return type(self)._reduce(self._check(x), tuple(size))

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptivePool):
    """Average pooling of ``(N, C, L)`` to ``output_size`` bins (torch's bin edges).

    >>> AdaptiveAvgPool1d(2)(cv.arange(5.0).reshape(1, 1, 5)).tolist()
    [[[1.0, 3.0]]]
    """

    _nd = 1


class AdaptiveAvgPool2d(_AdaptivePool):
    """Average pooling of ``(N, C, H, W)`` to ``output_size`` (an int, a pair; ``None`` keeps an
    axis); ``AdaptiveAvgPool2d(1)`` is global average pooling.

    >>> AdaptiveAvgPool2d(1)(cv.ones(2, 3, 4, 4)).shape
    (2, 3, 1, 1)
    """

    _nd = 2


class AdaptiveAvgPool3d(_AdaptivePool):
    """Average pooling of ``(N, C, D, H, W)`` to ``output_size``; see :class:`AdaptiveAvgPool2d`."""

    _nd = 3


class _AdaptiveMaxPool(_AdaptivePool):
    _reduce = staticmethod(pools.adaptive_max_pool)

    def __init__(self, output_size: int | Sequence[int | None], return_indices: bool = False):
        if return_indices:
            raise ValueError(f"{type(self).__name__}: return_indices=True is not implemented")
        super().__init__(output_size)


class AdaptiveMaxPool1d(_AdaptiveMaxPool):
    """Max pooling of ``(N, C, L)`` to ``output_size`` bins (torch's bin edges)."""

    _nd = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPool):
    """Max pooling of ``(N, C, H, W)`` to ``output_size``."""

    _nd = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPool):
    """Max pooling of ``(N, C, D, H, W)`` to ``output_size``."""

    _nd = 3


class Upsample(Module):
    """Resampling as a layer: :func:`interpolate` with fixed ``size`` or ``scale_factor``,
    ``mode`` (``"nearest"`` default, ``"bilinear"``, ``"linear"``, ``"bicubic"``,
    ``"trilinear"``…) and ``align_corners``.

    >>> Upsample(scale_factor=2)(cv.Tensor([[[1.0, 2.0]]])).tolist()
    [[[1.0, 1.0, 2.0, 2.0]]]
    """

    def __init__(self, size: int | Sequence[int] | None = None, scale_factor: float | Sequence[float] | None = None,
                 mode: str = "nearest", align_corners: bool | None = None,
                 recompute_scale_factor: bool | None = None):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        x = check_input(self, x, (3, 4, 5), "(N, C, *spatial) with 1 to 3 spatial axes")
        return interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                           self.recompute_scale_factor)

    def extra_repr(self) -> str:
        what = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return f"{what}, mode={self.mode!r}"

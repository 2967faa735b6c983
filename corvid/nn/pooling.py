"""Pooling and resampling layers: max, average and adaptive pooling over 1 to 3 spatial
dimensions, max unpooling, and :class:`Upsample` (``F.interpolate``).

The modules hold the hyperparameters and call corvid's pooling functions (:mod:`corvid.ops.conv`:
a window view reduced in one kernel; a reshape when the windows tile the input) with PyTorch's
arguments and output sizes. Inputs are ``(N, C, *spatial)`` or unbatched ``(C, *spatial)``.

``return_indices=True`` (``F.max_pool2d(..., return_indices=True)``, ``nn.MaxPool2d(...,
return_indices=True)``) also gives, per output element, the flat index of its maximum within its
``(N, C)`` plane, as PyTorch (``h * W + w`` in 2-d): the first maximum in window order (the last
NaN if the window has one), never a padding position. Those indices feed :func:`max_unpool2d`.

>>> from corvid import nn
>>> nn.MaxPool2d(2)(cv.arange(16.0).reshape(1, 1, 4, 4)).reshape(-1).tolist()
[5.0, 7.0, 13.0, 15.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import ShapeError
from .. import dtype as dt
from ..creation import arange, zeros
from ..ops import conv as pools
from ..ops.elementwise import where
from ..ops.indexing import scatter
from ..ops.interpolate import interpolate as _interpolate
from ..tensor import Tensor
from .module import Module, check_input
from .parameter import tracing

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
    "MaxUnpool1d",
    "MaxUnpool2d",
    "MaxUnpool3d",
    "Upsample",
    "interpolate",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_unpool1d",
    "max_unpool2d",
    "max_unpool3d",
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


def _spatial_rank(x: Tensor, nd: int, what: str) -> Tensor:
    x = x if isinstance(x, Tensor) else Tensor(x)
    if x.ndim not in (nd + 1, nd + 2):
        raise ValueError(f"{what}: expected an input of {nd + 1} or {nd + 2} dimensions ((N,) C, *spatial), "
                         f"got shape {x.shape}")
    return x


def max_pool_with_indices(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                          padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                          ceil_mode: bool = False, *, nd: int) -> tuple[Tensor, Tensor]:
    """Max pooling over the last ``nd`` axes of ``((N,) C, *spatial)`` that also returns where each
    maximum is: ``(values, indices)``, both of the pooled shape, ``indices`` int64 flat positions in
    ``spatial`` (PyTorch's layout). The maximum taken is the first in window order, or the last
    NaN, as PyTorch's CPU kernel; its whole gradient goes to that element, as PyTorch's (plain
    :func:`corvid.max_pool` splits a tie evenly). Arguments and errors as :func:`corvid.max_pool`.

    >>> v, i = max_pool_with_indices(cv.Tensor([[[1.0, 3.0, 3.0, 0.0]]]), 2, nd=1)
    >>> v.tolist(), i.tolist()
    ([[[3.0, 3.0]]], [[[1, 2]]])
    """
    what = f"max_pool{nd}d"
    x = _spatial_rank(x, nd, what)
    k = pools._ints(kernel_size, nd, f"{what}: kernel_size")
    win, _ = pools._pool_view(x, nd, k, stride, padding, dilation, ceil_mode, dt.reduce_identity(x.dtype, "max"), what)
    positions = arange(math.prod(x.shape[-nd:]), device=x.device).reshape(x.shape[-nd:])
    pos, _ = pools._pool_view(positions, nd, k, stride, padding, dilation, ceil_mode, -1, what)  # -1: padding
    size = math.prod(k)
    win = win.reshape(win.shape[:win.ndim - nd] + (size,))
    pos = pos.reshape(pos.shape[:pos.ndim - nd] + (size,))
    order = arange(size, device=x.device)
    # torch's scan: a later element replaces the best so far when it is larger or NaN, and the
    # scan starts at the first element inside the input (padding never wins, even against -inf)
    choice = where((win == win.max(-1, keepdims=True)) & (pos >= 0), order, size).min(-1, keepdims=True)
    if x.dtype.is_float:
        last_nan = where(win.isnan(), order, -1).max(-1, keepdims=True)
        choice = where(last_nan >= 0, last_nan, choice)
    pick = order == choice
    return where(pick, win, 0).sum(-1).astype(x.dtype), where(pick, pos, 0).sum(-1)  # sum widens small ints


class _MaxPool(_Pool):
    def __init__(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, return_indices: bool = False,
                 ceil_mode: bool = False):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.dilation, self.ceil_mode = padding, dilation, ceil_mode
        self.return_indices = return_indices

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        k = self.kernel_size if not isinstance(self.kernel_size, int) else (self.kernel_size,) * self._nd
        x = self._check(x)
        if self.return_indices:
            return max_pool_with_indices(x, tuple(k), self.stride, self.padding, self.dilation, self.ceil_mode,
                                         nd=self._nd)
        return pools.max_pool(x, tuple(k), self.stride, self.padding, self.dilation, self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
                + (", return_indices=True" if self.return_indices else ""))


class MaxPool1d(_MaxPool):
    """Max over windows of ``(N, C, L)`` (torch's arguments; ``stride`` defaults to ``kernel_size``).

    >>> MaxPool1d(2)(cv.Tensor([[[1.0, 3.0, 2.0, 0.0]]])).tolist()
    [[[3.0, 2.0]]]
    """

    _nd = 1


class MaxPool2d(_MaxPool):
    """Max over windows of ``(N, C, H, W)`` or ``(C, H, W)``; see :class:`MaxPool1d`. ``kernel_size``,
    ``stride``, ``padding`` and ``dilation`` are an int or an ``(h, w)`` pair.

    >>> x = cv.arange(16.0).reshape(1, 1, 4, 4)
    >>> cv.nn.MaxPool2d(2)(x).tolist()
    [[[[5.0, 7.0], [13.0, 15.0]]]]
    >>> cv.nn.MaxPool2d(3, stride=1, padding=1)(x).shape   # same-size output
    (1, 1, 4, 4)
    """

    _nd = 2


class MaxPool3d(_MaxPool):
    """Max over windows of ``(N, C, D, H, W)`` or ``(C, D, H, W)``; see :class:`MaxPool1d`.

    >>> cv.nn.MaxPool3d(2)(cv.arange(8.0).reshape(1, 1, 2, 2, 2)).tolist()
    [[[[[7.0]]]]]
    >>> cv.nn.MaxPool3d((1, 2, 2))(cv.ones(2, 3, 4, 8, 8)).shape   # pool H and W only
    (2, 3, 4, 4, 4)
    """

    _nd = 3


def _max_pool_function(nd: int) -> Any:
    plain = getattr(pools, f"max_pool{nd}d")

    def max_pool(input: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
                 return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        if return_indices:
            return max_pool_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode, nd=nd)
        return plain(input, kernel_size, stride, padding, dilation, ceil_mode)

    max_pool.__name__ = max_pool.__qualname__ = f"max_pool{nd}d"
    max_pool.__doc__ = (f"Max pooling over {nd} spatial dimension{'s' if nd > 1 else ''} with torch's arguments: "
                        ":func:`corvid.max_pool`, or ``(values, indices)`` with ``return_indices=True`` "
                        "(see :func:`max_pool_with_indices`). ``stride`` defaults to ``kernel_size``.\n\n"
                        + _MAX_POOL_EXAMPLES[nd])
    return max_pool


_MAX_POOL_EXAMPLES = {
    1: """>>> import corvid.nn.functional as F
>>> x = cv.Tensor([[[1.0, 3.0, 2.0, 5.0, 4.0]]])
>>> F.max_pool1d(x, 2).tolist()   # the last element is dropped
[[[3.0, 5.0]]]
>>> F.max_pool1d(x, 2, ceil_mode=True).tolist()   # ... unless ceil_mode keeps a partial window
[[[3.0, 5.0, 4.0]]]
>>> v, i = F.max_pool1d(x, 2, return_indices=True)
>>> i.tolist()
[[[1, 3]]]
""",
    2: """>>> import corvid.nn.functional as F
>>> x = cv.arange(16.0).reshape(1, 1, 4, 4)
>>> F.max_pool2d(x, 2).tolist()
[[[[5.0, 7.0], [13.0, 15.0]]]]
>>> F.max_pool2d(x, (1, 4)).tolist()   # a window per row
[[[[3.0], [7.0], [11.0], [15.0]]]]
>>> F.max_pool2d(x, 3, stride=1, padding=1).shape
(1, 1, 4, 4)
""",
    3: """>>> import corvid.nn.functional as F
>>> v, i = F.max_pool3d(cv.arange(8.0).reshape(1, 1, 2, 2, 2), 2, return_indices=True)
>>> v.tolist(), i.tolist()
([[[[[7.0]]]]], [[[[[7]]]]])
>>> F.max_pool3d(cv.ones(2, 4, 4, 4), (1, 2, 2)).shape   # unbatched (C, D, H, W)
(2, 4, 2, 2)
""",
}


max_pool1d, max_pool2d, max_pool3d = (_max_pool_function(n) for n in (1, 2, 3))


def max_unpool(input: Tensor, indices: Tensor, kernel_size: int | Sequence[int],
               stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
               output_size: Sequence[int] | None = None, *, nd: int) -> Tensor:
    """The partial inverse of max pooling (``F.max_unpool2d``): zeros of the unpooled shape with
    each ``input`` value written at its flat position ``indices`` (as ``return_indices=True``
    gives them) in its ``(N, C)`` plane.

    The spatial output size is ``(in - 1) * stride - 2 * padding + kernel_size`` per axis, or
    ``output_size`` (spatial sizes, or the full shape), which must lie strictly within ``stride``
    of that. ValueError for shapes that do not match, IndexError for an index outside the output
    (checked once per call, a small synchronization; not checked while ``jit``/``vmap`` trace).
    Where two windows chose the same element, it is written once and gets the gradient once.

    >>> v, i = max_pool_with_indices(cv.Tensor([[[1.0, 3.0, 4.0, 0.0]]]), 2, nd=1)
    >>> max_unpool(v, i, 2, nd=1).tolist()
    [[[0.0, 3.0, 4.0, 0.0]]]
    """
    what = f"max_unpool{nd}d"
    x = _spatial_rank(input, nd, what)
    idx = indices if isinstance(indices, Tensor) else Tensor(indices)
    if not idx.dtype.is_int:
        raise TypeError(f"{what}: indices must be an integer tensor, got {idx.dtype.name}")
    if idx.shape != x.shape:
        raise ShapeError(f"{what}: indices of shape {idx.shape} must have the input's shape {x.shape}")
    k = pools._ints(kernel_size, nd, f"{what}: kernel_size")
    s = k if stride is None else pools._ints(stride, nd, f"{what}: stride")
    p = pools._ints(padding, nd, f"{what}: padding", lo=0)
    default = tuple((i - 1) * ss - 2 * pp + kk for i, ss, pp, kk in zip(x.shape[-nd:], s, p, k))
    if output_size is None:
        out = default
    else:
        out = tuple(int(o) for o in output_size)
        if len(out) == nd + 2 or (len(out) == nd + 1 and x.ndim == nd + 1):
            out = out[-nd:]
        if len(out) != nd or not all(d - ss < o < d + ss for o, d, ss in zip(out, default, s)):
            raise ValueError(f"{what}: output_size {tuple(output_size)} must give {nd} spatial sizes, each strictly "
                             f"between {tuple(d - ss for d, ss in zip(default, s))} and "
                             f"{tuple(d + ss for d, ss in zip(default, s))}")
    lead = x.shape[:x.ndim - nd]
    plane = math.prod(out)
    flat_idx = idx.reshape(lead + (-1,)).astype(dt.int64)
    if idx.size and not tracing():
        lo, hi = int(flat_idx.min().item()), int(flat_idx.max().item())
        if lo < 0 or hi >= plane:
            raise IndexError(f"{what}: indices must be in [0, {plane}) for the output size {out}, got values in "
                             f"[{lo}, {hi}]")
    dest = zeros(lead + (plane,), dtype=x.dtype, device=x.device)
    return scatter(dest, -1, flat_idx, x.reshape(lead + (-1,))).reshape(lead + out)


def _max_unpool_function(nd: int) -> Any:
    def unpool(input: Tensor, indices: Tensor, kernel_size: int | Sequence[int],
               stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
               output_size: Sequence[int] | None = None) -> Tensor:
        return max_unpool(input, indices, kernel_size, stride, padding, output_size, nd=nd)

    unpool.__name__ = unpool.__qualname__ = f"max_unpool{nd}d"
    unpool.__doc__ = (f":func:`max_unpool` over {nd} spatial dimension{'s' if nd > 1 else ''} (torch's arguments): "
                      f"the values of ``max_pool{nd}d(..., return_indices=True)`` put back at their positions, "
                      "zeros elsewhere.\n\n" + _MAX_UNPOOL_EXAMPLES[nd])
    return unpool


_MAX_UNPOOL_EXAMPLES = {
    1: """>>> import corvid.nn.functional as F
>>> v, i = F.max_pool1d(cv.Tensor([[[1.0, 3.0, 4.0, 0.0, 7.0]]]), 2, return_indices=True)
>>> F.max_unpool1d(v, i, 2).tolist()
[[[0.0, 3.0, 4.0, 0.0]]]
>>> F.max_unpool1d(v, i, 2, output_size=[5]).tolist()   # the length before pooling
[[[0.0, 3.0, 4.0, 0.0, 0.0]]]
""",
    2: """>>> import corvid.nn.functional as F
>>> v, i = F.max_pool2d(cv.arange(16.0).reshape(1, 1, 4, 4), 2, return_indices=True)
>>> F.max_unpool2d(v, i, 2).tolist()
[[[[0.0, 0.0, 0.0, 0.0], [0.0, 5.0, 0.0, 7.0], [0.0, 0.0, 0.0, 0.0], [0.0, 13.0, 0.0, 15.0]]]]
>>> F.max_unpool2d(v, i, 2, output_size=(5, 5)).shape
(1, 1, 5, 5)
""",
    3: """>>> import corvid.nn.functional as F
>>> v, i = F.max_pool3d(cv.arange(8.0).reshape(1, 1, 2, 2, 2), 2, return_indices=True)
>>> F.max_unpool3d(v, i, 2).reshape(-1).tolist()
[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 7.0]
""",
}


max_unpool1d, max_unpool2d, max_unpool3d = (_max_unpool_function(n) for n in (1, 2, 3))


class _MaxUnpool(_Pool):
    def __init__(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, kernel_size if stride is None else stride, padding

    def forward(self, input: Tensor, indices: Tensor, output_size: Sequence[int] | None = None) -> Tensor:
        return max_unpool(self._check(input), indices, self.kernel_size, self.stride, self.padding, output_size,
                          nd=self._nd)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpool):
    """:func:`max_unpool` of ``(N, C, L)`` as a layer; ``forward(input, indices, output_size=None)``.

    >>> pool, unpool = MaxPool1d(2, return_indices=True), MaxUnpool1d(2)
    >>> unpool(*pool(cv.Tensor([[[1.0, 3.0, 4.0, 0.0]]]))).tolist()
    [[[0.0, 3.0, 4.0, 0.0]]]
    """

    _nd = 1


class MaxUnpool2d(_MaxUnpool):
    """:func:`max_unpool` of ``(N, C, H, W)``: the maxima of :class:`MaxPool2d` (``return_indices=True``)
    back at their places, zeros elsewhere; see :class:`MaxUnpool1d`.

    >>> pool, unpool = cv.nn.MaxPool2d(2, return_indices=True), cv.nn.MaxUnpool2d(2)
    >>> unpool(*pool(cv.Tensor([[[[1.0, 2.0], [4.0, 3.0]]]]))).tolist()
    [[[[0.0, 0.0], [4.0, 0.0]]]]
    """

    _nd = 2


class MaxUnpool3d(_MaxUnpool):
    """:func:`max_unpool` of ``(N, C, D, H, W)``; see :class:`MaxUnpool1d`.

    >>> pool, unpool = cv.nn.MaxPool3d(2, return_indices=True), cv.nn.MaxUnpool3d(2)
    >>> unpool(*pool(cv.arange(8.0).reshape(1, 1, 2, 2, 2))).reshape(-1).tolist()
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 7.0]
    """

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
    """Mean over windows of ``(N, C, H, W)`` or ``(C, H, W)``; see :class:`AvgPool1d`. With padding,
    ``count_include_pad=False`` divides by the number of real elements instead of the window size.

    >>> cv.nn.AvgPool2d(2)(cv.arange(16.0).reshape(1, 1, 4, 4)).tolist()
    [[[[2.5, 4.5], [10.5, 12.5]]]]
    >>> cv.nn.AvgPool2d(2, padding=1)(cv.ones(1, 1, 2, 2)).tolist()   # 1 of 4 in each window is real
    [[[[0.25, 0.25], [0.25, 0.25]]]]
    >>> cv.nn.AvgPool2d(2, padding=1, count_include_pad=False)(cv.ones(1, 1, 2, 2)).tolist()
    [[[[1.0, 1.0], [1.0, 1.0]]]]
    """

    _nd = 2


class AvgPool3d(_AvgPool):
    """Mean over windows of ``(N, C, D, H, W)`` or ``(C, D, H, W)``; see :class:`AvgPool1d`.

    >>> x = cv.arange(8.0).reshape(1, 1, 2, 2, 2)
    >>> cv.nn.AvgPool3d(2)(x).tolist()
    [[[[[3.5]]]]]
    >>> cv.nn.AvgPool3d(2, divisor_override=1)(x).tolist()   # the window sum
    [[[[[28.0]]]]]
    """

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
    """Average pooling of ``(N, C, D, H, W)`` to ``output_size`` (an int, a triple; ``None`` keeps an
    axis); see :class:`AdaptiveAvgPool2d`.

    >>> cv.nn.AdaptiveAvgPool3d(1)(cv.ones(2, 3, 4, 5, 6)).shape
    (2, 3, 1, 1, 1)
    >>> cv.nn.AdaptiveAvgPool3d((None, 1, 1))(cv.ones(2, 3, 4, 5, 6)).shape
    (2, 3, 4, 1, 1)
    """

    _nd = 3


class _AdaptiveMaxPool(_AdaptivePool):
    _reduce = staticmethod(pools.adaptive_max_pool)

    def __init__(self, output_size: int | Sequence[int | None], return_indices: bool = False):
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, x: Tensor) -> Any:
        size = self.output_size if not isinstance(self.output_size, int) else (self.output_size,) * self._nd
        return pools.adaptive_max_pool(self._check(x), tuple(size), self.return_indices)


class AdaptiveMaxPool1d(_AdaptiveMaxPool):
    """Max pooling of ``(N, C, L)`` or ``(C, L)`` to ``output_size`` bins (torch's bin edges: bin ``i``
    spans ``floor(i * L / out)`` to ``ceil((i + 1) * L / out)``, so bins may overlap);
    ``return_indices=True`` also returns the position of each maximum.

    >>> x = cv.Tensor([[[1.0, 5.0, 2.0, 0.0, 3.0]]])
    >>> cv.nn.AdaptiveMaxPool1d(3)(x).tolist()   # bins [0, 2), [1, 4), [3, 5)
    [[[5.0, 5.0, 3.0]]]
    >>> v, i = cv.nn.AdaptiveMaxPool1d(2, return_indices=True)(x)
    >>> v.tolist(), i.tolist()
    ([[[5.0, 3.0]]], [[[1, 4]]])
    """

    _nd = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPool):
    """Max pooling of ``(N, C, H, W)`` or ``(C, H, W)`` to ``output_size`` (an int, a pair; ``None``
    keeps an axis); ``AdaptiveMaxPool2d(1)`` is global max pooling. See :class:`AdaptiveMaxPool1d`.

    >>> x = cv.arange(16.0).reshape(1, 1, 4, 4)
    >>> cv.nn.AdaptiveMaxPool2d(1)(x).tolist()
    [[[[15.0]]]]
    >>> cv.nn.AdaptiveMaxPool2d((2, 1))(x).tolist()
    [[[[7.0], [15.0]]]]
    >>> cv.nn.AdaptiveMaxPool2d((None, 1))(cv.arange(6.0).reshape(1, 2, 3)).tolist()   # unbatched
    [[[2.0], [5.0]]]
    """

    _nd = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPool):
    """Max pooling of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` to ``output_size``; see
    :class:`AdaptiveMaxPool1d`.

    >>> x = cv.arange(8.0).reshape(1, 1, 2, 2, 2)
    >>> cv.nn.AdaptiveMaxPool3d(1)(x).tolist()
    [[[[[7.0]]]]]
    >>> cv.nn.AdaptiveMaxPool3d((1, 2, 2))(x).reshape(-1).tolist()
    [4.0, 5.0, 6.0, 7.0]
    """

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

"""Convolution layers: :class:`Conv1d`, :class:`Conv2d`, :class:`Conv3d` and the transposed
:class:`ConvTranspose1d`, :class:`ConvTranspose2d`, :class:`ConvTranspose3d`.

They hold the weights and call :func:`corvid.conv` / :func:`corvid.conv_transpose` (one fused
kernel each, with a hand-written backward). Layout, arguments, parameter shapes and default
initialization are PyTorch's: weight ``(C_out, C_in/groups, *kernel)`` (transposed:
``(C_in, C_out/groups, *kernel)``), ``kaiming_uniform_(a=sqrt(5))``, bias uniform in
``±1/sqrt(fan_in)``. Inputs are ``(N, C_in, *spatial)`` or unbatched ``(C_in, *spatial)``.

>>> from corvid import nn
>>> nn.Conv2d(1, 4, 3, padding=1)(cv.ones(2, 1, 5, 5)).shape
(2, 4, 5, 5)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..creation import empty
from ..ops.conv import _side_pads, conv, conv_transpose
from ..tensor import Tensor
from .linear import reset_affine
from .module import Module, check_input, shape_error
from .padding import pad
from .parameter import Parameter

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _tuple(v: int | Sequence[int], nd: int, name: str) -> tuple[int, ...]:
    t = (v,) * nd if isinstance(v, int) else tuple(v)
    if len(t) != nd or not all(isinstance(i, int) for i in t):
        raise ValueError(f"{name} must be an int or {nd} ints, got {v!r}")
    return t


class _ConvNd(Module):
    """What convolutions and transposed convolutions share: hyperparameters, weights, checks."""

    _nd = 0
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], stride: Any,
                 padding: Any, dilation: Any, groups: int, bias: bool, padding_mode: str, output_padding: Any,
                 device: str | None, dtype: Any):
        super().__init__()
        name, nd = type(self).__name__, self._nd
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: groups={groups} must divide in_channels={in_channels} and "
                             f"out_channels={out_channels}")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"{name}: padding_mode must be one of {_PADDING_MODES}, got {padding_mode!r}")
        if isinstance(padding, str) and (padding not in ("same", "valid") or self._transposed):
            raise ValueError(f"{name}: padding must be an int, a tuple" + ("" if self._transposed else ", 'same' or "
                             "'valid'") + f", got {padding!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _tuple(kernel_size, nd, f"{name}: kernel_size")
        self.stride = _tuple(stride, nd, f"{name}: stride")
        if isinstance(padding, str) or self._transposed:
            self.padding = padding if isinstance(padding, str) else _tuple(padding, nd, f"{name}: padding")
        else:  # (per side too: (before, after) pairs, or F.pad's flat order, last axis first)
            pairs = _side_pads(padding, nd, f"{name}: padding")
            self.padding = tuple(a for a, _ in pairs) if all(a == b for a, b in pairs) else pairs
        self.dilation = _tuple(dilation, nd, f"{name}: dilation")
        self.output_padding = _tuple(output_padding, nd, f"{name}: output_padding")
        self.groups, self.padding_mode = groups, padding_mode
        if padding == "same" and any(s != 1 for s in self.stride):
            raise ValueError(f"{name}: padding='same' needs stride 1, got {self.stride}")
        if self._transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Parameter(empty(*shape, dtype=dtype, device=device))
        self.bias = Parameter(empty(out_channels, dtype=dtype, device=device)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's default: ``kaiming_uniform_(weight, a=sqrt(5))``, bias ``U(±1/sqrt(fan_in))``."""
        reset_affine(self.weight, self.bias)

    def _batched(self, x: Any) -> tuple[Tensor, bool]:
        """``x`` as ``(N, C, *spatial)`` and whether it came without the batch axis."""
        nd = self._nd
        spatial = ", ".join(("L",) if nd == 1 else ("H", "W") if nd == 2 else ("D", "H", "W"))
        expected = f"(N, {self.in_channels}, {spatial}) or ({self.in_channels}, {spatial})"
        x = check_input(self, x, (nd + 1, nd + 2), expected)
        if x.shape[-nd - 1] != self.in_channels:
            raise shape_error(self, expected, x)
        unbatched = x.ndim == nd + 1
        return (x.unsqueeze(0) if unbatched else x), unbatched

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._nd:
            s += f", padding={self.padding!r}" if isinstance(self.padding, str) else f", padding={self.padding}"
        if self.dilation != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode!r}"
        return s


class _Conv(_ConvNd):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
                 dilation: int | Sequence[int] = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: str | None = None, dtype: Any = None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, 0, device, dtype)

    def _edge_pads(self) -> list[int]:
        """F.pad amounts (last axis first) for a non-zero ``padding_mode``."""
        if self.padding == "valid":
            pairs = [(0, 0)] * self._nd
        elif self.padding == "same":
            total = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            pairs = [(t // 2, t - t // 2) for t in total]
        else:
            pairs = [p if isinstance(p, tuple) else (p, p) for p in self.padding]
        return [a for before, after in reversed(pairs) for a in (before, after)]

    def forward(self, x: Tensor) -> Tensor:
        x, unbatched = self._batched(x)
        if self.padding_mode == "zeros":
            y = conv(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        else:
            xp = pad(x, self._edge_pads(), mode=self.padding_mode)
            y = conv(xp, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        return y.squeeze(0) if unbatched else y


class Conv1d(_Conv):
    """1-d convolution over ``(N, C_in, L)``; see the module docstring.

    >>> Conv1d(2, 3, 3)(cv.ones(1, 2, 8)).shape
    (1, 3, 6)
    """

    _nd = 1


class Conv2d(_Conv):
    """2-d convolution over ``(N, C_in, H, W)``; see the module docstring. ``padding`` may be an
    int, a pair, ``"valid"`` or ``"same"`` (stride 1); ``padding_mode`` is ``"zeros"``,
    ``"reflect"``, ``"replicate"`` or ``"circular"``.

    >>> Conv2d(3, 8, 3, stride=2, padding=1)(cv.ones(1, 3, 8, 8)).shape
    (1, 8, 4, 4)
    """

    _nd = 2


class Conv3d(_Conv):
    """3-d convolution over ``(N, C_in, D, H, W)``; see the module docstring.

    >>> Conv3d(1, 2, 2)(cv.ones(1, 1, 3, 3, 3)).shape
    (1, 2, 2, 2, 2)
    """

    _nd = 3


class _ConvTranspose(_ConvNd):
    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                 output_padding: int | Sequence[int] = 0, groups: int = 1, bias: bool = True,
                 dilation: int | Sequence[int] = 1, padding_mode: str = "zeros", device: str | None = None,
                 dtype: Any = None):
        if padding_mode != "zeros":
            raise ValueError(f"{type(self).__name__}: only padding_mode='zeros' is supported (as in torch), "
                             f"got {padding_mode!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, output_padding, device, dtype)

    def forward(self, x: Tensor, output_size: Sequence[int] | None = None) -> Tensor:
        """``output_size`` (the spatial sizes, or the full shape) picks ``output_padding`` for
        this call, resolving the ambiguity of strided outputs; ValueError if it is not reachable."""
        x, unbatched = self._batched(x)
        opad = self.output_padding
        if output_size is not None:
            want = tuple(output_size)[-self._nd:]
            base = [(i - 1) * s - 2 * p + d * (k - 1) + 1 for i, s, p, d, k in
                    zip(x.shape[2:], self.stride, self.padding, self.dilation, self.kernel_size)]
            opad = tuple(w - b for w, b in zip(want, base))
            if any(not 0 <= o < max(s, d) for o, s, d in zip(opad, self.stride, self.dilation)):
                raise ValueError(f"{type(self).__name__}: output_size {tuple(output_size)} is not reachable from an "
                                 f"input of shape {x.shape}; sizes from {tuple(base)} up to "
                                 f"{tuple(b + max(s, d) - 1 for b, s, d in zip(base, self.stride, self.dilation))}")
        y = conv_transpose(x, self.weight, self.bias, self.stride, self.padding, opad, self.dilation, self.groups)
        return y.squeeze(0) if unbatched else y


class ConvTranspose1d(_ConvTranspose):
    """1-d transposed convolution over ``(N, C_in, L)``; see the module docstring.

    >>> ConvTranspose1d(2, 3, 2, stride=2)(cv.ones(1, 2, 4)).shape
    (1, 3, 8)
    """

    _nd = 1


class ConvTranspose2d(_ConvTranspose):
    """2-d transposed convolution over ``(N, C_in, H, W)``; see the module docstring.

    >>> ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)(cv.ones(1, 4, 5, 5)).shape
    (1, 2, 10, 10)
    """

    _nd = 2


class ConvTranspose3d(_ConvTranspose):
    """3-d transposed convolution over ``(N, C_in, D, H, W)``; see the module docstring.

    >>> ConvTranspose3d(1, 1, 2, stride=2)(cv.ones(1, 1, 2, 2, 2)).shape
    (1, 1, 4, 4, 4)
    """

    _nd = 3

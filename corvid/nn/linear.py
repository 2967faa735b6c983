"""Affine maps and reshapes: :class:`Linear` (``F.linear``), :class:`Identity`, :class:`Flatten`
and :class:`Unflatten`.

>>> from corvid import nn
>>> nn.Linear(4, 2)(cv.ones(3, 4)).shape
(3, 2)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import ShapeError
from ..amp import narrow
from ..creation import empty
from ..tensor import Tensor
from ..dtype import bfloat16
from ..engine.replay import replayed
from ..ops.reduce import _on_cpu
from . import cpu_matmul, init
from .module import Module, shape_error
from .parameter import Parameter

__all__ = ["Flatten", "Identity", "Linear", "Unflatten", "linear"]


@replayed
def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias``: ``x`` of shape ``(*, in)``, ``weight`` ``(out, in)``, ``bias``
    ``(out,)`` give ``(*, out)``. ValueError naming the shapes if ``in`` differs.

    >>> linear(cv.ones(2, 3), cv.ones(4, 3), cv.zeros(4)).shape
    (2, 4)
    """
    if weight.ndim != 2 or x.shape[-1:] != weight.shape[1:]:
        raise ShapeError(f"linear: input of shape {x.shape} does not fit weight of shape {weight.shape} "
                         "(expected input (*, in) and weight (out, in))")
    if bias is not None and not _on_cpu(x):  # (a GPU's library adds the bias as it writes the product)
        from ..ops import blas

        out = blas.linear(*narrow(x, weight, bias))  # (under autocast: all three in bfloat16/float16)
        if out is not None:
            return out
    out = cpu_matmul.linear(x, weight) if x.dtype == weight.dtype == bfloat16 else None  # (AVX512-BF16)
    if out is None:
        out = x @ weight.T
    return out if bias is None else out + narrow(bias)[0]  # (under autocast the bias too is bfloat16/float16)


def reset_affine(weight: Tensor, bias: Tensor | None) -> None:
    """PyTorch's default initialization of a linear or convolution layer:
    ``kaiming_uniform_(weight, a=sqrt(5))``, bias uniform in ``±1/sqrt(fan_in)``."""
    init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in = math.prod(weight.shape[1:])
        b = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        init.uniform_(bias, -b, b)


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight`` of shape ``(out_features, in_features)`` and
    ``bias`` ``(out_features,)`` (absent with ``bias=False``), both initialized uniformly in
    ``±1/sqrt(in_features)`` as in PyTorch. Input ``(*, in_features)``, output ``(*, out_features)``;
    ValueError naming the layer for another last dimension.

    >>> lin = Linear(3, 2)
    >>> lin(cv.ones(5, 3)).shape, lin.weight.shape
    ((5, 2), (2, 3))
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: str | None = None,
                 dtype: Any = None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype, device=device))
        self.bias = Parameter(empty(out_features, dtype=dtype, device=device)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's default: ``kaiming_uniform_(weight, a=sqrt(5))``, bias ``U(±1/sqrt(in_features))``."""
        reset_affine(self.weight, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = x if isinstance(x, Tensor) else Tensor(x)
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise shape_error(self, f"(*, {self.in_features})", x)
        return linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Identity(Module):
    """Returns its input unchanged (any constructor arguments are ignored, as in PyTorch).

    >>> Identity(54, unused="x")(cv.ones(2)).tolist()
    [1.0, 1.0]
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__()

    def forward(self, x: Any) -> Any:
        return x


class Flatten(Module):
    """Merges dimensions ``start_dim..end_dim`` (default: all but the batch axis) into one.

    >>> Flatten()(cv.ones(2, 3, 4)).shape
    (2, 12)
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Splits dimension ``dim`` into ``unflattened_size`` (one entry may be -1). ValueError if
    the sizes do not multiply to that dimension.

    >>> Unflatten(1, (3, 4))(cv.ones(2, 12)).shape
    (2, 3, 4)
    """

    def __init__(self, dim: int, unflattened_size: Sequence[int]):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        d = self.dim % x.ndim if x.ndim else 0
        sizes = list(self.unflattened_size)
        known = math.prod(s for s in sizes if s != -1)
        if sizes.count(-1) > 1 or (sizes.count(-1) == 0 and known != x.shape[d]) or \
                (sizes.count(-1) == 1 and (known == 0 or x.shape[d] % known)):
            raise ValueError(f"Unflatten({self.extra_repr()}): sizes {self.unflattened_size} do not fit dimension "
                             f"{self.dim} of the input of shape {x.shape}")
        return x.reshape(x.shape[:d] + tuple(sizes) + x.shape[d + 1:])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"

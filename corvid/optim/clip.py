"""Gradient clipping: by the global norm of all gradients, or elementwise by value."""

from __future__ import annotations

import math
from collections.abc import Iterable

from .. import dtype as dt
from ..autograd import no_grad
from ..ops.movement import stack
from ..tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_"]


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> Tensor:
    """Scale the gradients of ``parameters`` together so that their global ``norm_type``-norm (the
    norm of all gradients concatenated; ``math.inf`` for the largest magnitude) is at most
    ``max_norm``; returns that norm before clipping, as a float32 0-d tensor.

    The scale is ``min(1, max_norm / (norm + 1e-6))``, as PyTorch. The new gradients stay lazy,
    so they fuse into the optimizer step that reads them. ``error_if_nonfinite=True`` raises
    RuntimeError when the norm is nan or inf (this reads the norm, so it synchronizes).

    >>> w = cv.Tensor([3.0, 4.0], requires_grad=True)
    >>> (w * w).sum().backward()          # grad = [6, 8], norm 10
    >>> clip_grad_norm_([w], 1.0).item()
    10.0
    >>> [round(v, 3) for v in w.grad.tolist()]
    [0.6, 0.8]
    """
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return Tensor(0.0)
    with no_grad():
        p = float(norm_type)
        mags = [g.detach().astype(dt.float32).abs() for g in grads]
        if math.isinf(p):
            total = stack([m.max() for m in mags]).max()
        else:
            total = stack([(m.square() if p == 2 else m.pow(p)).sum() for m in mags]).sum()
            total = total.sqrt() if p == 2 else total.pow(1 / p)
        if error_if_nonfinite and not math.isfinite(total.item()):
            raise RuntimeError(f"the total norm of order {norm_type} of the gradients is non-finite "
                               f"({total.item()}), so they cannot be clipped; pass error_if_nonfinite=False to "
                               "clip anyway")
        scale = (max_norm / (total + 1e-6)).minimum(1.0)
        for param in params:
            if param.grad is not None:
                param.grad = param.grad.detach() * scale.astype(param.grad.dtype)
    return total


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clamp every gradient of ``parameters`` elementwise to ``[-clip_value, clip_value]`` (lazily).

    >>> w = cv.Tensor([3.0, -4.0], requires_grad=True)
    >>> (w * w).sum().backward()
    >>> clip_grad_value_(w, 1.0)
    >>> w.grad.tolist()
    [1.0, -1.0]
    """
    if clip_value < 0:
        raise ValueError(f"clip_value must be non-negative, got {clip_value}")
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    with no_grad():
        for param in params:
            if param.grad is not None:
                param.grad = param.grad.detach().clip(-clip_value, clip_value)


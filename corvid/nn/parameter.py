"""``nn.Parameter``: the tensors a :class:`~corvid.nn.Module` registers and trains, and small
helpers on tensor values the modules share.

>>> p = Parameter(cv.zeros(3))
>>> p.requires_grad, p.shape
(True, (3,))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..autograd import detach_node
from ..graph.node import Op, node
from ..tensor import Tensor

__all__ = ["Parameter"]


class Parameter(Tensor):
    """A tensor that a :class:`Module` registers as a parameter when it is assigned to an attribute.

    ``Parameter(data, requires_grad=True)`` is a leaf tensor holding ``data`` (a tensor, array or
    nested list; a tensor is shared, not copied, but never linked to ``data``'s gradient) that
    ``backward()`` accumulates gradients into, as ``torch.nn.Parameter``. It is a thin subclass
    of :class:`corvid.Tensor`, not a function returning a tensor, because registration needs to
    recognise it: ``self.w = Parameter(...)`` registers ``w``, ``self.w = cv.ones(3)`` does not.
    Results of operations on it are plain tensors.

    The value is computed at once unless it is a constant fill (``cv.zeros``, ``cv.empty``…), so
    a random initialisation is drawn once instead of being recomputed by every kernel reading it.

    >>> p = Parameter(cv.ones(2))
    >>> p.requires_grad, p.is_leaf
    (True, True)
    >>> (p * 3).sum().backward(); p.grad.tolist()
    [3.0, 3.0]
    """

    __slots__ = ()

    def __init__(self, data: Any = None, requires_grad: bool = True):
        if data is None:
            data = np.zeros(0, np.float32)
        if isinstance(data, Tensor):
            data = value_of(data)
        super().__init__(data)
        if not _is_constant(self) and not tracing():
            self.realize()
        if requires_grad:
            self.requires_grad_()

    def detach(self) -> Tensor:
        """The value as a plain tensor with no gradient flowing back (not a Parameter)."""
        return Tensor._from_node(detach_node(self.node), self.device)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo: dict) -> Parameter:
        return Parameter(value_of(self), requires_grad=self.requires_grad)


def _is_constant(t: Tensor) -> bool:
    """Whether ``t`` is a scalar constant broadcast to its shape (free to recompute in a kernel)."""
    n = t.node
    while n.op in (Op.EXPAND, Op.RESHAPE, Op.DETACH):
        n = n.src[0]
    return n.op is Op.CONST


def tracing() -> bool:
    """Whether jit or vmap is tracing: values may be placeholders, which cannot be computed now."""
    from .. import random
    from ..engine import capture

    return capture.tracing() or bool(random._interceptors)  # both transforms intercept random draws


def value_of(t: Tensor) -> Tensor:
    """``t``'s value as a plain tensor with no gradient history; shares the memory when computed
    (buffers are never written in place, so sharing is safe), else ``t.detach()``."""
    n = t.node
    if n.buffer is not None:
        return Tensor._from_node(node(Op.BUFFER, (), n.buffer, n.dtype, n.shape), t.device)
    return t.detach()

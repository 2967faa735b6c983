"""Dropout: zero elements at random while training, scaling the rest so the expectation is unchanged.

The mask comes from corvid's generator (``cv.manual_seed`` makes it reproducible). Inside
``cv.jit`` every call draws a new mask; inside ``cv.vmap`` a draw needs ``randomness=`` (see
:func:`corvid.vmap`).

>>> from corvid import nn
>>> d = nn.Dropout(0.5)
>>> d.eval()(cv.ones(3)).tolist()      # identity in eval mode
[1.0, 1.0, 1.0]
>>> sorted(set(nn.Dropout(0.5)(cv.ones(1000)).tolist()))
[0.0, 2.0]
"""

from __future__ import annotations

from ..creation import rand
from ..dtype import float32
from ..ops.elementwise import where
from ..tensor import Tensor
from .module import Module

__all__ = ["Dropout", "dropout"]


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Each element zeroed with probability ``p``, the others multiplied by ``1 / (1 - p)``, when
    ``training``; the input unchanged otherwise (or when ``p == 0``). ``inplace`` is accepted for
    compatibility (the result is a new tensor). ValueError unless ``0 <= p <= 1``.

    >>> dropout(cv.ones(4), 0.5, training=False).tolist()
    [1.0, 1.0, 1.0, 1.0]
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    x = input if isinstance(input, Tensor) else Tensor(input)
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = rand(*x.shape, dtype=float32, device=x.device) >= p
    return where(keep, x * (1.0 / (1.0 - p)), 0.0)


class Dropout(Module):
    """Module form of :func:`dropout`: in training mode each element is zeroed with probability ``p``
    and the others scaled by ``1 / (1 - p)``; the identity after ``eval()``. ValueError unless
    ``0 <= p <= 1``.

    >>> d = cv.nn.Dropout(0.5)
    >>> sorted(set(d(cv.ones(1000)).tolist()))   # kept elements are doubled
    [0.0, 2.0]
    >>> d.eval()(cv.ones(3)).tolist()
    [1.0, 1.0, 1.0]
    """

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"

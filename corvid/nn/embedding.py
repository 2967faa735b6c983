"""Lookup tables: :class:`Embedding` (``F.embedding``) and ``F.one_hot``.

>>> from corvid import nn
>>> emb = nn.Embedding(10, 3, padding_idx=0)
>>> emb(cv.Tensor([[0, 5], [9, 0]])).shape
(2, 2, 3)
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import ShapeError
from ..autograd import no_grad
from ..creation import arange, empty, zeros
from ..dtype import int64
from ..ops.elementwise import where
from ..ops.indexing import scatter, take
from ..ops.indexing import _guarded
from ..tensor import Tensor
from . import init
from .module import Module
from .parameter import Parameter

__all__ = ["Embedding", "embedding", "one_hot"]


def _indices(x: Any, what: str) -> Tensor:
    t = x if isinstance(x, Tensor) else Tensor(x)
    if not t.dtype.is_int:
        raise TypeError(f"{what}: indices must be an integer tensor, got {t.dtype.name}")
    return t


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` (``(num_embeddings, dim)``) at the integer ``input`` indices: shape
    ``input.shape + (dim,)``. Rows looked up at ``padding_idx`` get no gradient. IndexError for an
    index out of range (checked once per call, a small synchronization), TypeError for non-integer
    indices; ``scale_grad_by_freq`` and ``sparse`` are not implemented (ValueError).

    ``max_norm`` renormalizes in place first, as PyTorch: every row that ``input`` looks up and
    whose ``norm_type``-norm exceeds ``max_norm`` is scaled to ``max_norm`` (by
    ``max_norm / (norm + 1e-7)``) in ``weight`` itself (:meth:`Tensor.assign`, outside the
    gradient), then the lookup reads the new rows.

    >>> embedding(cv.Tensor([1, 0]), cv.Tensor([[0.0, 1.0], [2.0, 3.0]])).tolist()
    [[2.0, 3.0], [0.0, 1.0]]
    >>> w = cv.Tensor([[3.0, 4.0], [0.3, 0.4]])
    >>> out = embedding(cv.Tensor([0]), w, max_norm=1.0)   # row 0 has norm 5
    >>> [round(v, 4) for v in out[0].tolist()], [round(v, 4) for v in w[0].tolist()]
    ([0.6, 0.8], [0.6, 0.8])
    """
    if scale_grad_by_freq or sparse:
        raise ValueError("embedding: scale_grad_by_freq and sparse are not implemented")
    idx = _indices(input, "embedding")
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-d (num_embeddings, dim), got shape {weight.shape}")
    if max_norm is not None:
        _renorm_rows(weight, idx, float(max_norm), float(norm_type))
    out = take(weight, idx, axis=0)
    if padding_idx is None:
        return out
    pad = padding_idx % weight.shape[0]
    return where((idx == pad).unsqueeze(-1), out.detach(), out)


def _renorm_rows(weight: Tensor, idx: Tensor, max_norm: float, norm_type: float) -> None:
    """Scale the rows of ``weight`` that ``idx`` names and whose norm exceeds ``max_norm`` down to
    it, in place (``torch.embedding_renorm_``)."""
    if max_norm < 0 or not norm_type > 0:
        raise ValueError(f"embedding: max_norm must be >= 0 and norm_type > 0, got {max_norm} and {norm_type}")
    with no_grad():
        w = weight.detach()
        mags = w.abs()
        if math.isinf(norm_type):
            norm = mags.max(-1, keepdims=True)
        elif norm_type == 2:
            norm = mags.square().sum(-1, keepdims=True).sqrt()
        else:
            norm = mags.pow(norm_type).sum(-1, keepdims=True).pow(1 / norm_type)
        looked_up = scatter(zeros(weight.shape[0], dtype=weight.dtype, device=weight.device), 0, idx.reshape(-1), 1.0)
        shrink = (looked_up.unsqueeze(-1) > 0) & (norm > max_norm)
        weight.assign(where(shrink, w * (max_norm / (norm + 1e-7)), w))


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding: ``out[..., c] = (tensor[...] == c)``, shape ``tensor.shape +
    (num_classes,)``. ``num_classes=-1`` uses ``max + 1`` (reading the maximum synchronizes).
    TypeError for non-integer input, ValueError for negative values or values
    ``>= num_classes`` (not checked where the values cannot be read, inside ``jit``: such a
    value's row is all zeros there).

    >>> one_hot(cv.Tensor([0, 2]), 3).tolist()
    [[1, 0, 0], [0, 0, 1]]
    """
    t = _indices(tensor, "one_hot")
    if num_classes == -1:
        num_classes = int(t.max().item()) + 1 if t.size else 0
    elif t.size and not _guarded(t):  # (values not readable now, in a jit trace: a class out of range gives zeros)
        lo, hi = int(t.min().item()), int(t.max().item())
        if lo < 0 or hi >= num_classes:
            raise ValueError(f"one_hot: class values must be in [0, {num_classes}), got values in [{lo}, {hi}]")
    return (t.unsqueeze(-1) == arange(num_classes, device=t.device)).astype(int64)


class Embedding(Module):
    """A table of ``num_embeddings`` vectors of size ``embedding_dim`` (parameter ``weight``,
    initialized from N(0, 1) as in torch, with the ``padding_idx`` row zeroed), looked up by
    integer indices of any shape (see :func:`embedding`; with ``max_norm`` each call first scales
    the rows it looks up to at most that ``norm_type``-norm, in ``weight`` itself).

    >>> emb = Embedding.from_pretrained(cv.Tensor([[1.0, 2.0], [3.0, 4.0]]))
    >>> emb(cv.Tensor([1])).tolist(), emb.weight.requires_grad
    ([[3.0, 4.0]], False)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Tensor | None = None, _freeze: bool = False,
                 device: str | None = None, dtype: Any = None):
        super().__init__()
        if scale_grad_by_freq or sparse:
            raise ValueError("Embedding: scale_grad_by_freq and sparse are not implemented")
        if max_norm is not None and (max_norm < 0 or not norm_type > 0):
            raise ValueError(f"Embedding: max_norm must be >= 0 and norm_type > 0, got {max_norm} and {norm_type}")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} is outside the {num_embeddings} embeddings")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        if _weight is None:
            self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype, device=device),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ShapeError(f"Embedding: _weight of shape {tuple(_weight.shape)} does not match "
                                 f"({num_embeddings}, {embedding_dim})")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        """PyTorch's default: N(0, 1), then the ``padding_idx`` row set to 0."""
        w = self.weight
        table = init.normal_(empty(*w.shape, dtype=w.dtype, device=w.device))  # lazy: one kernel with the mask
        if self.padding_idx is not None:
            rows = arange(self.num_embeddings, device=w.device).unsqueeze(-1)
            table = where(rows == self.padding_idx, 0.0, table)
        with no_grad():
            w.assign(table)
        w.realize()  # also when frozen (not a requires_grad leaf, which assign computes at once)

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, padding_idx: int | None = None,
                        max_norm: float | None = None, norm_type: float = 2.0) -> Embedding:
        """An Embedding holding ``embeddings`` (2-d), frozen (no gradient) unless ``freeze=False``."""
        t = embeddings if isinstance(embeddings, Tensor) else Tensor(embeddings)
        if t.ndim != 2:
            raise ShapeError(f"Embedding.from_pretrained: embeddings must be 2-d, got shape {t.shape}")
        return cls(t.shape[0], t.shape[1], padding_idx=padding_idx, max_norm=max_norm, norm_type=norm_type, _weight=t,
                   _freeze=freeze)

    def forward(self, x: Tensor) -> Tensor:
        return embedding(x, self.weight, self.padding_idx, self.max_norm, self.norm_type)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}" + (f", norm_type={self.norm_type}" if self.norm_type != 2 else "")
        return s

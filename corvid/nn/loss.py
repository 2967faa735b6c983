"""Loss modules: thin wrappers that keep a loss function's options and call it.

Each ``XLoss(**options)`` stores PyTorch's constructor arguments and its ``forward`` calls the
function of the same snake_case name in :mod:`corvid.nn.losses` with them
(``CrossEntropyLoss(label_smoothing=0.1)(x, y) == cross_entropy(x, y, label_smoothing=0.1)``).
Class weights given to a constructor are registered as a buffer named ``weight`` (and
``pos_weight`` for :class:`BCEWithLogitsLoss`), as in torch, so they move and save with the model.

>>> from corvid import nn
>>> nn.MSELoss()(cv.Tensor([1.0, 3.0]), cv.Tensor([1.0, 1.0])).item()
2.0
"""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from . import losses
from .module import Module

__all__ = [
    "BCELoss",
    "BCEWithLogitsLoss",
    "CTCLoss",
    "CosineEmbeddingLoss",
    "CrossEntropyLoss",
    "HuberLoss",
    "KLDivLoss",
    "L1Loss",
    "MSELoss",
    "MarginRankingLoss",
    "NLLLoss",
    "SmoothL1Loss",
    "TripletMarginLoss",
]


class _Loss(Module):
    """Calls ``losses.<_function>(*inputs, **options)``; options are attributes, tensors buffers."""

    _function = ""
    _tensor_options: tuple[str, ...] = ()

    def __init__(self, **options: Any):
        super().__init__()
        self._options = tuple(options)
        for name, value in options.items():
            if name in self._tensor_options:
                self.register_buffer(name, None if value is None else value if isinstance(value, Tensor)
                                     else Tensor(value))
            else:
                setattr(self, name, value)

    def forward(self, *inputs: Tensor) -> Tensor:
        fn = getattr(losses, self._function)
        return fn(*inputs, **{name: getattr(self, name) for name in self._options})

    def extra_repr(self) -> str:
        shown = [f"{n}={getattr(self, n)!r}" for n in self._options if n not in self._tensor_options]
        return ", ".join(shown)


class MSELoss(_Loss):
    """Mean squared error, :func:`~corvid.nn.losses.mse_loss`: ``forward(input, target)``."""

    _function = "mse_loss"

    def __init__(self, *, reduction: str = "mean"):
        super().__init__(reduction=reduction)


class L1Loss(_Loss):
    """Mean absolute error, :func:`~corvid.nn.losses.l1_loss`: ``forward(input, target)``."""

    _function = "l1_loss"

    def __init__(self, *, reduction: str = "mean"):
        super().__init__(reduction=reduction)


class CrossEntropyLoss(_Loss):
    """:func:`~corvid.nn.losses.cross_entropy` of logits and class indices (or probabilities):
    ``forward(input, target)``; ``weight`` is a buffer of per-class weights."""

    _function = "cross_entropy"
    _tensor_options = ("weight",)

    def __init__(self, weight: Tensor | None = None, *, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__(weight=weight, ignore_index=ignore_index, reduction=reduction,
                         label_smoothing=label_smoothing)


class NLLLoss(_Loss):
    """:func:`~corvid.nn.losses.nll_loss` of log-probabilities and class indices: ``forward(input, target)``."""

    _function = "nll_loss"
    _tensor_options = ("weight",)

    def __init__(self, weight: Tensor | None = None, *, ignore_index: int = -100, reduction: str = "mean"):
        super().__init__(weight=weight, ignore_index=ignore_index, reduction=reduction)


class BCELoss(_Loss):
    """:func:`~corvid.nn.losses.binary_cross_entropy` of probabilities: ``forward(input, target)``."""

    _function = "binary_cross_entropy"
    _tensor_options = ("weight",)

    def __init__(self, weight: Tensor | None = None, *, reduction: str = "mean"):
        super().__init__(weight=weight, reduction=reduction)


class BCEWithLogitsLoss(_Loss):
    """:func:`~corvid.nn.losses.binary_cross_entropy_with_logits`: ``forward(input, target)``;
    ``weight`` and ``pos_weight`` are buffers."""

    _function = "binary_cross_entropy_with_logits"
    _tensor_options = ("weight", "pos_weight")

    def __init__(self, weight: Tensor | None = None, *, reduction: str = "mean", pos_weight: Tensor | None = None):
        super().__init__(weight=weight, reduction=reduction, pos_weight=pos_weight)


class HuberLoss(_Loss):
    """:func:`~corvid.nn.losses.huber_loss` (quadratic below ``delta``, linear above): ``forward(input, target)``."""

    _function = "huber_loss"

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction, delta=delta)


class SmoothL1Loss(_Loss):
    """:func:`~corvid.nn.losses.smooth_l1_loss` (quadratic below ``beta``): ``forward(input, target)``."""

    _function = "smooth_l1_loss"

    def __init__(self, *, reduction: str = "mean", beta: float = 1.0):
        super().__init__(reduction=reduction, beta=beta)


class KLDivLoss(_Loss):
    """:func:`~corvid.nn.losses.kl_div` of log-probabilities ``input`` and ``target``
    (log-probabilities with ``log_target=True``): ``forward(input, target)``."""

    _function = "kl_div"

    def __init__(self, *, reduction: str = "mean", log_target: bool = False):
        super().__init__(reduction=reduction, log_target=log_target)


class CTCLoss(_Loss):
    """:func:`~corvid.nn.losses.ctc_loss`: ``forward(log_probs, targets, input_lengths, target_lengths)``."""

    _function = "ctc_loss"

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__(blank=blank, reduction=reduction, zero_infinity=zero_infinity)


class TripletMarginLoss(_Loss):
    """:func:`~corvid.nn.losses.triplet_margin_loss`: ``forward(anchor, positive, negative)``."""

    _function = "triplet_margin_loss"

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False, *,
                 reduction: str = "mean"):
        super().__init__(margin=margin, p=p, eps=eps, swap=swap, reduction=reduction)


class CosineEmbeddingLoss(_Loss):
    """:func:`~corvid.nn.losses.cosine_embedding_loss`: ``forward(input1, input2, target)`` with target ±1."""

    _function = "cosine_embedding_loss"

    def __init__(self, margin: float = 0.0, *, reduction: str = "mean"):
        super().__init__(margin=margin, reduction=reduction)


class MarginRankingLoss(_Loss):
    """:func:`~corvid.nn.losses.margin_ranking_loss`: ``forward(input1, input2, target)`` with target ±1."""

    _function = "margin_ranking_loss"

    def __init__(self, margin: float = 0.0, *, reduction: str = "mean"):
        super().__init__(margin=margin, reduction=reduction)

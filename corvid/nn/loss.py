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
    """Mean squared error, :func:`~corvid.nn.losses.mse_loss`: ``forward(input, target)``;
    ``reduction`` is ``"mean"`` (default), ``"sum"`` or ``"none"`` (the elementwise losses).

    >>> x, y = cv.Tensor([1.0, 2.0, 4.0]), cv.Tensor([1.0, 1.0, 1.0])
    >>> cv.nn.MSELoss(reduction="sum")(x, y).item()
    10.0
    >>> cv.nn.MSELoss(reduction="none")(x, y).tolist()
    [0.0, 1.0, 9.0]
    """

    _function = "mse_loss"

    def __init__(self, *, reduction: str = "mean"):
        super().__init__(reduction=reduction)


class L1Loss(_Loss):
    """Mean absolute error, :func:`~corvid.nn.losses.l1_loss`: ``forward(input, target)``;
    ``reduction`` is ``"mean"`` (default), ``"sum"`` or ``"none"``.

    >>> x, y = cv.Tensor([1.0, 2.0, 4.0]), cv.Tensor([1.0, 1.0, 1.0])
    >>> cv.nn.L1Loss(reduction="none")(x, y).tolist()
    [0.0, 1.0, 3.0]
    >>> round(cv.nn.L1Loss()(x, y).item(), 4)
    1.3333
    """

    _function = "l1_loss"

    def __init__(self, *, reduction: str = "mean"):
        super().__init__(reduction=reduction)


class CrossEntropyLoss(_Loss):
    """:func:`~corvid.nn.losses.cross_entropy` of logits and class indices (or probabilities):
    ``forward(input, target)``; ``weight`` is a buffer of per-class weights (the weighted mean
    divides by the sum of the targets' weights, as PyTorch).

    >>> logits = cv.Tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    >>> target = cv.Tensor([0, 2])
    >>> [round(v, 4) for v in cv.nn.CrossEntropyLoss(reduction="none")(logits, target).tolist()]
    [0.2395, 1.0986]
    >>> round(cv.nn.CrossEntropyLoss(ignore_index=2)(logits, target).item(), 4)   # only the first row
    0.2395
    >>> round(cv.nn.CrossEntropyLoss(label_smoothing=0.1)(logits, target).item(), 4)
    0.7357
    >>> crit = cv.nn.CrossEntropyLoss(weight=cv.Tensor([1.0, 1.0, 3.0]))
    >>> round(crit(logits, target).item(), 4), [name for name, _ in crit.named_buffers()]
    (0.8838, ['weight'])
    """

    _function = "cross_entropy"
    _tensor_options = ("weight",)

    def __init__(self, weight: Tensor | None = None, *, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__(weight=weight, ignore_index=ignore_index, reduction=reduction,
                         label_smoothing=label_smoothing)


class NLLLoss(_Loss):
    """:func:`~corvid.nn.losses.nll_loss` of log-probabilities and class indices: ``forward(input, target)``
    is minus the log-probability of each sample's class (``weight``, a buffer, weights the classes).

    >>> logp = cv.Tensor([[-0.5, -1.0], [-2.0, -0.25]])
    >>> cv.nn.NLLLoss(reduction="none")(logp, cv.Tensor([0, 1])).tolist()
    [0.5, 0.25]
    >>> cv.nn.NLLLoss()(logp, cv.Tensor([0, 1])).item()
    0.375
    """

    _function = "nll_loss"
    _tensor_options = ("weight",)

    def __init__(self, weight: Tensor | None = None, *, ignore_index: int = -100, reduction: str = "mean"):
        super().__init__(weight=weight, ignore_index=ignore_index, reduction=reduction)


class BCELoss(_Loss):
    """:func:`~corvid.nn.losses.binary_cross_entropy` of probabilities: ``forward(input, target)`` is
    ``-(target * log(input) + (1 - target) * log(1 - input))``; prefer :class:`BCEWithLogitsLoss` on
    logits, which is stable.

    >>> p, y = cv.Tensor([0.9, 0.2]), cv.Tensor([1.0, 0.0])
    >>> [round(v, 4) for v in cv.nn.BCELoss(reduction="none")(p, y).tolist()]
    [0.1054, 0.2231]
    """

    _function = "binary_cross_entropy"
    _tensor_options = ("weight",)

    def __init__(self, weight: Tensor | None = None, *, reduction: str = "mean"):
        super().__init__(weight=weight, reduction=reduction)


class BCEWithLogitsLoss(_Loss):
    """:func:`~corvid.nn.losses.binary_cross_entropy_with_logits`: ``forward(input, target)``, the
    binary cross-entropy of ``sigmoid(input)`` computed stably from the logits; ``weight`` and
    ``pos_weight`` (the weight of the positive term, per class) are buffers.

    >>> x, y = cv.Tensor([0.0, 0.0]), cv.Tensor([1.0, 0.0])
    >>> round(cv.nn.BCEWithLogitsLoss()(x, y).item(), 4)   # log 2
    0.6931
    >>> round(cv.nn.BCEWithLogitsLoss(pos_weight=cv.Tensor([3.0]))(x, y).item(), 4)   # (3 + 1) / 2 * log 2
    1.3863
    >>> cv.nn.BCEWithLogitsLoss()(cv.Tensor([-100.0]), cv.Tensor([1.0])).item()   # no overflow
    100.0
    """

    _function = "binary_cross_entropy_with_logits"
    _tensor_options = ("weight", "pos_weight")

    def __init__(self, weight: Tensor | None = None, *, reduction: str = "mean", pos_weight: Tensor | None = None):
        super().__init__(weight=weight, reduction=reduction, pos_weight=pos_weight)


class HuberLoss(_Loss):
    """:func:`~corvid.nn.losses.huber_loss`: ``forward(input, target)``, ``0.5 * d**2`` for
    ``|d| < delta`` and ``delta * (|d| - 0.5 * delta)`` above (``d = input - target``).

    >>> x, y = cv.Tensor([0.5, 3.0]), cv.Tensor([0.0, 0.0])
    >>> cv.nn.HuberLoss(reduction="none")(x, y).tolist()
    [0.125, 2.5]
    >>> cv.nn.HuberLoss(reduction="none", delta=2.0)(x, y).tolist()
    [0.125, 4.0]
    """

    _function = "huber_loss"

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction, delta=delta)


class SmoothL1Loss(_Loss):
    """:func:`~corvid.nn.losses.smooth_l1_loss`: ``forward(input, target)``, ``0.5 * d**2 / beta`` for
    ``|d| < beta`` and ``|d| - 0.5 * beta`` above; the Huber loss divided by ``beta``.

    >>> x, y = cv.Tensor([0.5, 3.0]), cv.Tensor([0.0, 0.0])
    >>> cv.nn.SmoothL1Loss(reduction="none")(x, y).tolist()
    [0.125, 2.5]
    >>> cv.nn.SmoothL1Loss(reduction="none", beta=2.0)(x, y).tolist()
    [0.0625, 2.0]
    """

    _function = "smooth_l1_loss"

    def __init__(self, *, reduction: str = "mean", beta: float = 1.0):
        super().__init__(reduction=reduction, beta=beta)


class KLDivLoss(_Loss):
    """:func:`~corvid.nn.losses.kl_div` of log-probabilities ``input`` and ``target``
    (log-probabilities with ``log_target=True``): ``forward(input, target)``, the sum of
    ``target * (log(target) - input)``; ``reduction="batchmean"`` divides the sum by the batch size,
    the true KL divergence (``"mean"`` averages over elements, as PyTorch).

    >>> q, p = cv.Tensor([[0.25, 0.75]]), cv.Tensor([[0.5, 0.5]])
    >>> round(cv.nn.KLDivLoss(reduction="batchmean")(q.log(), p).item(), 4)   # KL(p || q)
    0.1438
    >>> round(cv.nn.KLDivLoss(reduction="batchmean", log_target=True)(q.log(), p.log()).item(), 4)
    0.1438
    >>> cv.nn.KLDivLoss(reduction="batchmean")(p.log(), p).item()
    0.0
    """

    _function = "kl_div"

    def __init__(self, *, reduction: str = "mean", log_target: bool = False):
        super().__init__(reduction=reduction, log_target=log_target)


class CTCLoss(_Loss):
    """:func:`~corvid.nn.losses.ctc_loss`: ``forward(log_probs, targets, input_lengths, target_lengths)``
    with ``log_probs`` of shape (T, N, C); ``inf`` when no alignment fits (0 with ``zero_infinity=True``).

    >>> log_probs = cv.full((2, 1, 2), 0.5).log()       # T=2 steps, 1 sample, classes {blank, 1}
    >>> ctc = cv.nn.CTCLoss()
    >>> round(ctc(log_probs, cv.Tensor([[1]]), [2], [1]).item(), 4)   # 3 of 4 paths spell "1": -log(3/4)
    0.2877
    >>> ctc(log_probs, cv.Tensor([[1, 1]]), [2], [2]).item()   # "11" needs a blank between: 3 steps
    inf
    >>> cv.nn.CTCLoss(zero_infinity=True)(log_probs, cv.Tensor([[1, 1]]), [2], [2]).item()
    0.0
    """

    _function = "ctc_loss"

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__(blank=blank, reduction=reduction, zero_infinity=zero_infinity)


class TripletMarginLoss(_Loss):
    """:func:`~corvid.nn.losses.triplet_margin_loss`: ``forward(anchor, positive, negative)``,
    ``max(d(a, p) - d(a, n) + margin, 0)`` with ``d`` the ``p``-norm distance.

    >>> a, pos, neg = cv.Tensor([[0.0, 0.0]]), cv.Tensor([[0.0, 1.0]]), cv.Tensor([[0.0, 3.0]])
    >>> round(cv.nn.TripletMarginLoss()(a, pos, neg).item(), 4)   # 1 - 3 + 1 < 0
    0.0
    >>> round(cv.nn.TripletMarginLoss(margin=3.0)(a, pos, neg).item(), 4)
    1.0
    """

    _function = "triplet_margin_loss"

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False, *,
                 reduction: str = "mean"):
        super().__init__(margin=margin, p=p, eps=eps, swap=swap, reduction=reduction)


class CosineEmbeddingLoss(_Loss):
    """:func:`~corvid.nn.losses.cosine_embedding_loss`: ``forward(input1, input2, target)`` with target
    ±1: ``1 - cos`` for pairs marked 1, ``max(cos - margin, 0)`` for pairs marked -1.

    >>> u, v = cv.Tensor([[1.0, 0.0], [1.0, 0.0]]), cv.Tensor([[0.0, 1.0], [1.0, 1.0]])
    >>> [round(t, 4) for t in cv.nn.CosineEmbeddingLoss(reduction="none")(u, v, cv.Tensor([1, -1])).tolist()]
    [1.0, 0.7071]
    >>> [round(t, 4) for t in cv.nn.CosineEmbeddingLoss(0.5, reduction="none")(u, v, cv.Tensor([1, -1])).tolist()]
    [1.0, 0.2071]
    """

    _function = "cosine_embedding_loss"

    def __init__(self, margin: float = 0.0, *, reduction: str = "mean"):
        super().__init__(margin=margin, reduction=reduction)


class MarginRankingLoss(_Loss):
    """:func:`~corvid.nn.losses.margin_ranking_loss`: ``forward(input1, input2, target)`` with target
    ±1, ``max(-target * (input1 - input2) + margin, 0)``: 0 when the pair is ranked as ``target`` says.

    >>> x1, x2 = cv.Tensor([3.0, 1.0]), cv.Tensor([1.0, 2.0])
    >>> cv.nn.MarginRankingLoss(reduction="none")(x1, x2, cv.Tensor([1, 1])).tolist()
    [0.0, 1.0]
    >>> cv.nn.MarginRankingLoss(margin=1.0, reduction="none")(x1, x2, cv.Tensor([1, -1])).tolist()
    [0.0, 0.0]
    """

    _function = "margin_ranking_loss"

    def __init__(self, margin: float = 0.0, *, reduction: str = "mean"):
        super().__init__(margin=margin, reduction=reduction)

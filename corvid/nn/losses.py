"""Loss functions with PyTorch's functional signatures and reduction rules.

Every loss takes ``reduction`` in ``"none"`` (the per-element or per-sample loss), ``"mean"`` or
``"sum"``; arguments after the inputs are keyword-only where PyTorch still has its deprecated
``size_average``/``reduce`` positions, so a positional call from old code fails loudly instead of
meaning something else. Each loss is a composition of lazy ops written in a numerically stable
form (``logsumexp`` rather than ``log(softmax)``, ``softplus`` rather than ``log(sigmoid)``), so
the forward and backward passes fuse into a few kernels and differentiate with every transform.

>>> logits = cv.Tensor([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]])
>>> round(cross_entropy(logits, cv.Tensor([0, 2])).item(), 4)
0.1755

Class-index targets are read on the host to check their range (``IndexError`` for an index
outside ``[0, C)`` that is not ``ignore_index``) when their values are available; inside ``jit``
or ``vmap`` they are not checked and an out-of-range index contributes nothing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ShapeError
from .. import dtype as dt
from ..amp import float32_op
from ..creation import arange
from ..engine import capture
from ..graph.node import Op
from ..ops.elementwise import where
from ..ops.reduce import _on_cpu
from ..tensor import Tensor, result_type

__all__ = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_embedding_loss", "cross_entropy",
           "ctc_loss", "huber_loss", "kl_div", "l1_loss", "margin_ranking_loss", "mse_loss", "nll_loss",
           "smooth_l1_loss", "triplet_margin_loss"]

_REDUCTIONS = ("none", "mean", "sum")


# --- helpers ----------------------------------------------------------------------------------------
def _tensor(x: Any, like: Tensor | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    return Tensor(x, device=None if like is None else like.device)


def _float(x: Any) -> Tensor:
    t = _tensor(x)
    return t if t.dtype.is_float else t.astype(dt.default_float)


def _check_reduction(reduction: str, allowed: tuple[str, ...] = _REDUCTIONS) -> None:
    if reduction not in allowed:
        raise ValueError(f"reduction must be one of {', '.join(map(repr, allowed))}, got {reduction!r}")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    _check_reduction(reduction)
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()


def _pair(input: Any, target: Any) -> tuple[Tensor, Tensor]:
    """The two operands as float tensors of the input's dtype (the ops broadcast them, as PyTorch does)."""
    x = _float(input)
    y = _tensor(target, x).astype(x.dtype)
    return x, y


def _weighted(loss: Tensor, weight: Any, reduction: str, mean_over_weight: bool) -> Tensor:
    """PyTorch's elementwise ``weight`` (same shape as the loss): ``mean`` divides by ``weight.sum()``
    for mse/l1 and by the element count for huber."""
    if weight is None:
        return _reduce(loss, reduction)
    w = _tensor(weight, loss).astype(loss.dtype)
    if w.shape != loss.shape:
        raise ShapeError(f"weight has shape {w.shape}, the input has shape {loss.shape}: they must be equal")
    _check_reduction(reduction)
    loss = loss * w
    if reduction == "mean" and mean_over_weight:
        return loss.sum() / w.sum()
    return _reduce(loss, reduction)


def _host_values(t: Tensor) -> np.ndarray | None:
    """The values of an integer tensor when they can be read now (None inside jit/vmap)."""
    if capture.tracing() or t.node.traced:
        return None
    return t.numpy()


def _class_axis_shape(x: Tensor, axis: int) -> tuple[int, ...]:
    return tuple(s if i == axis else 1 for i, s in enumerate(x.shape))


# --- regression ---------------------------------------------------------------------------------------
@float32_op
def mse_loss(input: Any, target: Any, *, reduction: str = "mean", weight: Any = None) -> Tensor:
    """Squared error ``(input - target)**2``, reduced.

    ``input`` and ``target`` broadcast together; ``weight`` (optional, the input's shape)
    multiplies each element, and then ``"mean"`` is ``sum(w * err) / sum(w)`` (as PyTorch).

    >>> mse_loss(cv.Tensor([1.0, 2.0]), cv.Tensor([0.0, 0.0])).item()
    2.5
    """
    x, y = _pair(input, target)
    return _weighted((x - y).square(), weight, reduction, True)


@float32_op
def l1_loss(input: Any, target: Any, *, reduction: str = "mean", weight: Any = None) -> Tensor:
    """Absolute error ``|input - target|``, reduced (``weight`` as in :func:`mse_loss`).

    >>> l1_loss(cv.Tensor([1.0, -3.0]), cv.Tensor([0.0, 0.0]), reduction="sum").item()
    4.0
    """
    x, y = _pair(input, target)
    return _weighted((x - y).abs(), weight, reduction, True)


@float32_op
def huber_loss(input: Any, target: Any, reduction: str = "mean", delta: float = 1.0, weight: Any = None) -> Tensor:
    """``0.5 d**2`` where ``|d| < delta``, else ``delta * (|d| - 0.5 delta)``, with ``d = input - target``.

    ``weight`` multiplies each element; ``"mean"`` then averages over the elements (as PyTorch).

    >>> huber_loss(cv.Tensor([0.5, 3.0]), cv.Tensor([0.0, 0.0]), reduction="none").tolist()
    [0.125, 2.5]
    """
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    x, y = _pair(input, target)
    d = x - y
    a = d.abs()
    return _weighted(where(a < delta, 0.5 * d * d, delta * (a - 0.5 * delta)), weight, reduction, False)


@float32_op
def smooth_l1_loss(input: Any, target: Any, *, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta``; ``beta=0`` is the L1 loss.

    >>> smooth_l1_loss(cv.Tensor([0.5, 3.0]), cv.Tensor([0.0, 0.0]), reduction="none").tolist()
    [0.125, 2.5]
    """
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    x, y = _pair(input, target)
    d = x - y
    a = d.abs()
    loss = a if beta == 0 else where(a < beta, (0.5 / beta) * d * d, a - 0.5 * beta)
    return _reduce(loss, reduction)


# --- classification -------------------------------------------------------------------------------------
_PICK: Any = None


def _pick(x: Tensor, t: Tensor, axis: int) -> Tensor:
    """``x`` at index ``t`` (in range) along ``axis``, which it drops: a gather, one element per
    row, where ``where(one_hot, x, 0).sum(axis)`` read the whole row (a language model's loss:
    8192 rows of 50257 logits, 823 MB in bfloat16, for 8192 values). Its gradient is the dense
    ``where(one_hot, g, 0)`` (a ``custom_vjp``), which fuses with the softmax's in the backward,
    not the gather's own, a scatter into zeros of the logits' size."""
    global _PICK
    if _PICK is None:
        from ..transforms.custom import custom_vjp

        def take(x: Tensor, src: Tensor, t: Tensor, axis: int) -> Tensor:
            return src.take_along_axis(t.unsqueeze(axis), axis).squeeze(axis).astype(x.dtype)

        def bwd(res: tuple, g: Tensor) -> tuple:
            shape, dtype, device, t, axis = res
            classes = arange(shape[axis], device=device).reshape(tuple(n if i == axis else 1 for i, n in enumerate(shape)))
            # (src is x's value, not a second path to it: its cotangent is none)
            return where(classes.eq(t.unsqueeze(axis)), g.unsqueeze(axis), 0.0).astype(dtype), None, None, None

        _PICK = custom_vjp(take)
        _PICK.defvjp(lambda x, src, t, axis: (_PICK(x, src, t, axis), (x.shape, x.dtype, x.device, t, axis)), bwd)
    # a gather reads a stored operand: from the narrower float that x widens (autocast's float32
    # of bfloat16 logits), exactly, rather than have the widened copy stored (1.6 GB for GPT-2's)
    src = x
    while src.node.op is Op.CAST and src.node.src[0].dtype.is_float and src.node.src[0].dtype.itemsize < src.dtype.itemsize:
        src = src._new(src.node.src[0])
    return _PICK(x, src, t, axis)


def _class_targets(logp: Tensor, target: Any, weight: Any, ignore_index: int, lse: Tensor | None = None
                   ) -> tuple[Tensor, Tensor, Tensor]:
    """For log-probabilities ``logp`` (N, C, d1, ...) or (C,) and class indices ``target``
    (N, d1, ...) or (): ``(picked, w, hit)`` where ``picked`` is ``logp`` at the target class,
    ``w`` the target's class weight (0 where ignored) and ``hit`` the one-hot mask (N, C, ...).
    With ``lse`` (keepdims), ``logp`` is logits and the log-probabilities ``logp - lse``: the
    target's logit is gathered, and ``lse`` subtracted from it alone."""
    axis = 0 if logp.ndim == 1 else 1
    t = _tensor(target, logp)
    if not t.dtype.is_int:
        raise TypeError(f"class-index targets must be integers, got {t.dtype.name} (float targets of the input's "
                        "shape are read as class probabilities)")
    expected = logp.shape[:axis] + logp.shape[axis + 1:]
    if t.shape != expected:
        raise ShapeError(f"target has shape {t.shape}; for input of shape {logp.shape} it must be {expected}")
    n_classes = logp.shape[axis]
    values = _host_values(t)
    if values is not None:
        bad = values[((values < 0) | (values >= n_classes)) & (values != ignore_index)]
        if bad.size:
            raise IndexError(f"target {int(bad.flat[0])} is out of bounds for {n_classes} classes "
                             f"(ignore_index={ignore_index})")
    classes = arange(n_classes, device=logp.device).reshape(_class_axis_shape(logp, axis))
    hit = classes.eq(t.astype(dt.int64).unsqueeze(axis))
    valid = t.ne(ignore_index)
    if lse is None:
        picked = where(hit, logp, 0.0).sum(axis)
    else:  # (an ignored target reads class 0, and picks 0)
        index = where(valid, t, 0).astype(dt.int64)
        picked = where(valid, _pick(logp, index, axis) - lse.squeeze(axis), 0.0)
    if weight is None:
        w = valid.astype(logp.dtype)
    else:
        cw = _tensor(weight, logp).astype(logp.dtype)
        if cw.shape != (n_classes,):
            raise ShapeError(f"weight must have shape ({n_classes},), got {cw.shape}")
        w = where(hit, cw.reshape(_class_axis_shape(logp, axis)), 0.0).sum(axis) * valid.astype(logp.dtype)
    return picked, w, hit


@float32_op
def nll_loss(input: Any, target: Any, weight: Any = None, *, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class indices: ``-weight[t] * input[n, t]`` for log-probabilities.

    ``input``: (N, C), (N, C, d1, ...) or (C,); ``target``: integers (N,), (N, d1, ...) or ().
    ``weight``: optional (C,) class weights. Targets equal to ``ignore_index`` contribute 0 and
    leave the ``"mean"`` denominator, which is ``sum(weight[t])`` over the other targets; when every
    target is ignored that is 0/0 = nan, as in PyTorch. ``"none"`` gives shape (N, d1, ...).

    >>> nll_loss(cv.Tensor([[-0.5, -1.0]]), cv.Tensor([1])).item()
    1.0
    """
    _check_reduction(reduction)
    logp = _float(input)
    picked, w, _ = _class_targets(logp, target, weight, ignore_index)
    loss = -picked * w
    if reduction in ("mean", "sum") and not _on_cpu(loss):
        # on a GPU each row's loss is stored (N values) before their sum: fused into it, the
        # per-row reduce over the classes made one kernel of a single output that read every
        # logit (a language model's 8192 x 50257: one work-group; the CPU splits such a kernel
        # across its threads itself)
        loss = loss.contiguous()
    if reduction == "mean":
        return loss.sum() / w.sum()
    return _reduce(loss, reduction)


@float32_op
def cross_entropy(input: Any, target: Any, weight: Any = None, *, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy between logits and targets: ``nll_loss(log_softmax(input, 1), target)``,
    computed with one ``logsumexp`` per row.

    ``input``: logits (N, C), (N, C, d1, ...) or (C,). ``target`` is either class indices
    (integers of the input's shape without the class axis; ``weight``, ``ignore_index`` and the
    ``"mean"`` rule as in :func:`nll_loss`) or class probabilities (floats of the input's shape;
    ``"mean"`` divides by the number of samples, ``ignore_index`` does not apply).
    ``label_smoothing`` in [0, 1] mixes the target with the uniform distribution: the loss is
    ``(1 - s) * nll + s / C * sum_c(-weight[c] * log p_c)``.

    >>> x = cv.Tensor([[1.0, 2.0, 3.0]])
    >>> round(cross_entropy(x, cv.Tensor([2]), label_smoothing=0.1).item(), 4)
    0.5076
    """
    _check_reduction(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    x = _float(input)
    if x.ndim == 0:
        raise ShapeError("cross_entropy: input must have a class axis (shape (C,), (N, C) or (N, C, d1, ...))")
    axis = 0 if x.ndim == 1 else 1
    n_classes = x.shape[axis]
    lse = x.logsumexp(axis, keepdims=True)
    logp = x - lse
    cw = None if weight is None else _tensor(weight, x).astype(x.dtype).reshape(_class_axis_shape(x, axis))
    t = _tensor(target, x)
    if t.dtype.is_float:
        if t.shape != x.shape:
            raise ShapeError(f"probability targets must have the input's shape {x.shape}, got {t.shape}")
        t = t.astype(x.dtype)
        if label_smoothing:
            t = t * (1 - label_smoothing) + label_smoothing / n_classes
        per_class = logp * t if cw is None else logp * t * cw
        return _reduce(-per_class.sum(axis), reduction)
    picked, w, _ = _class_targets(x, t, weight, ignore_index, lse=lse)
    loss = -picked * w
    if label_smoothing:
        valid = t.ne(ignore_index).astype(x.dtype)
        smooth = -(logp if cw is None else logp * cw).sum(axis) * valid
        loss = (1 - label_smoothing) * loss + (label_smoothing / n_classes) * smooth
    if reduction in ("mean", "sum") and not _on_cpu(loss):
        loss = loss.contiguous()  # (each row's loss stored before their sum: see nll_loss)
    if reduction == "mean":
        return loss.sum() / w.sum()
    return _reduce(loss, reduction)


@float32_op
def binary_cross_entropy(input: Any, target: Any, weight: Any = None, *, reduction: str = "mean") -> Tensor:
    """``-weight * (t log p + (1 - t) log(1 - p))`` for probabilities ``p = input`` in [0, 1].

    Each log is clamped at -100 (as PyTorch), so ``p`` of exactly 0 or 1 gives a finite loss.
    ``weight`` broadcasts to the input. Prefer :func:`binary_cross_entropy_with_logits` on logits.

    >>> round(binary_cross_entropy(cv.Tensor([0.8]), cv.Tensor([1.0])).item(), 4)
    0.2231
    """
    p, t = _pair(input, target)
    loss = -(t * p.log().maximum(-100.0) + (1 - t) * (-p).log1p().maximum(-100.0))
    if weight is not None:
        loss = loss * _tensor(weight, p).astype(p.dtype)
    return _reduce(loss, reduction)


@float32_op
def binary_cross_entropy_with_logits(input: Any, target: Any, weight: Any = None, *, reduction: str = "mean",
                                     pos_weight: Any = None) -> Tensor:
    """Binary cross entropy on logits ``x``: ``-weight * (pw t log s(x) + (1 - t) log(1 - s(x)))``
    with ``s`` the sigmoid, computed as ``(1 - t) x + (1 + (pw - 1) t) softplus(-x)`` (no overflow).

    ``pos_weight`` (broadcast along the last axis, typically (C,)) scales the positive term;
    ``weight`` broadcasts to the input.

    >>> round(binary_cross_entropy_with_logits(cv.Tensor([100.0]), cv.Tensor([0.0])).item(), 1)
    100.0
    """
    x, t = _pair(input, target)
    softplus_neg = (-x).maximum(0) + (-x.abs()).exp().log1p()  # log(1 + exp(-x)), stable both ways
    if pos_weight is None:
        loss = (1 - t) * x + softplus_neg
    else:
        pw = _tensor(pos_weight, x).astype(x.dtype)
        loss = (1 - t) * x + (1 + (pw - 1) * t) * softplus_neg
    if weight is not None:
        loss = loss * _tensor(weight, x).astype(x.dtype)
    return _reduce(loss, reduction)


@float32_op
def kl_div(input: Any, target: Any, *, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """Kullback-Leibler divergence ``target * (log target - input)`` for log-probabilities ``input``.

    With ``log_target=True`` the target is given as log-probabilities too
    (``exp(t) * (t - input)``). A zero target contributes 0. ``reduction="batchmean"`` divides
    the sum by ``input.shape[0]`` (the mathematically correct KL for a batch); ``"mean"``
    averages over every element, as PyTorch does.

    >>> p = cv.Tensor([0.5, 0.5])
    >>> kl_div(p.log(), p, reduction="sum").item()
    0.0
    """
    _check_reduction(reduction, _REDUCTIONS + ("batchmean",))
    x, t = _pair(input, target)
    if log_target:
        loss = t.exp() * (t - x)
    else:
        positive = t > 0
        loss = where(positive, t * where(positive, t, 1.0).log(), 0.0) - t * x
    if reduction == "batchmean":
        return loss.sum() / (x.shape[0] if x.ndim else 1)
    return _reduce(loss, reduction)


# --- embeddings and ranking ------------------------------------------------------------------------------
def _pairwise_distance(a: Tensor, b: Tensor, p: float, eps: float) -> Tensor:
    """``||a - b + eps||_p`` over the last axis (PyTorch's ``pairwise_distance``)."""
    d = (a - b + eps).abs()
    if p == 2:
        return d.square().sum(-1).sqrt()
    if p == 1:
        return d.sum(-1)
    if math.isinf(p):
        return d.max(axis=-1)
    return d.pow(p).sum(-1).pow(1 / p)


def triplet_margin_loss(anchor: Any, positive: Any, negative: Any, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, *, reduction: str = "mean") -> Tensor:
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``d`` the p-norm distance over the last axis.

    Inputs are (N, D) or (D,). ``swap=True`` uses ``min(d(a, n), d(p, n))`` as the negative
    distance. ``"none"`` gives shape (N,).

    >>> a, q = cv.Tensor([[0.0, 0.0]]), cv.Tensor([[3.0, 4.0]])
    >>> round(triplet_margin_loss(a, a, q, eps=0.0).item(), 4)
    0.0
    """
    if p <= 0:
        raise ValueError(f"triplet_margin_loss: p must be positive, got {p}")
    a, pos = _pair(anchor, positive)
    neg = _tensor(negative, a).astype(a.dtype)
    d_pos = _pairwise_distance(a, pos, p, eps)
    d_neg = _pairwise_distance(a, neg, p, eps)
    if swap:
        d_neg = d_neg.minimum(_pairwise_distance(pos, neg, p, eps))
    return _reduce((d_pos - d_neg + margin).clip(min=0), reduction)


def cosine_embedding_loss(input1: Any, input2: Any, target: Any, margin: float = 0.0, *,
                          reduction: str = "mean") -> Tensor:
    """``1 - cos(x1, x2)`` where ``target`` is 1 and ``max(0, cos(x1, x2) - margin)`` where it is -1.

    ``input1``, ``input2``: (N, D) or (D,); ``target``: (N,) or () of ±1. The cosine is taken
    over the last axis with 1e-12 added to each squared norm (as PyTorch).

    >>> cosine_embedding_loss(cv.Tensor([[1.0, 0.0]]), cv.Tensor([[2.0, 0.0]]), cv.Tensor([1])).item()
    0.0
    """
    x1, x2 = _pair(input1, input2)
    y = _tensor(target, x1)
    eps = 1e-12
    cos = (x1 * x2).sum(-1) / (((x1 * x1).sum(-1) + eps) * ((x2 * x2).sum(-1) + eps)).sqrt()
    loss = where(y.eq(1), 1 - cos, 0.0) + where(y.eq(-1), (cos - margin).clip(min=0), 0.0)
    return _reduce(loss, reduction)


def margin_ranking_loss(input1: Any, input2: Any, target: Any, margin: float = 0.0, *,
                        reduction: str = "mean") -> Tensor:
    """``max(0, -target * (input1 - input2) + margin)``: ``target`` 1 means input1 should rank higher.

    >>> margin_ranking_loss(cv.Tensor([1.0]), cv.Tensor([2.0]), cv.Tensor([1.0])).item()
    1.0
    """
    x1, x2 = _pair(input1, input2)
    y = _tensor(target, x1)
    common = result_type(x1, y) if y.dtype.is_float else x1.dtype  # (a float64 target promotes, as torch's)
    x1, x2, y = x1.astype(common), x2.astype(common), y.astype(common)
    return _reduce((-y * (x1 - x2) + margin).clip(min=0), reduction)


# --- connectionist temporal classification --------------------------------------------------------------
# minus the log-probability of an unreachable state: finite, so gradients never meet inf - inf or 0 * inf
_UNREACHABLE = 1e30


@float32_op
def ctc_loss(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, blank: int = 0,
             reduction: str = "mean", zero_infinity: bool = False) -> Tensor:
    """Connectionist temporal classification loss: ``-log`` of the total probability of every
    alignment of ``targets`` to the ``log_probs`` sequence (blanks between and around labels).

    ``log_probs``: (T, N, C) or unbatched (T, C), log-probabilities (e.g. ``log_softmax``) over C
    classes, ``blank`` among them. ``targets``: padded (N, S) or concatenated (sum of
    ``target_lengths``,) class indices, never ``blank``. ``input_lengths``, ``target_lengths``:
    (N,) ints. The loss per sample is ``inf`` when no alignment fits the input length
    (``zero_infinity=True`` makes it 0, and its gradient 0); ``"mean"`` divides each sample's
    loss by its target length (at least 1) and then averages, as PyTorch.

    The targets and lengths are read on the host. The forward pass is the log-space alpha
    recursion over time, one kernel per time step (the same compiled kernel every step); the
    gradient comes from differentiating it. Each step selects its frame with a one-hot reduction
    over time, so the cost is O(T^2 N S) for S = 2 * max target length + 1: meant for sequences of
    up to a few hundred steps.

    >>> lp = cv.Tensor(np.log(np.full((2, 1, 2), 0.5, np.float32)))
    >>> round(ctc_loss(lp, cv.Tensor([[1]]), [2], [1], reduction="sum").item(), 4)   # 3 of 4 paths fit
    0.2877
    """
    _check_reduction(reduction)
    lp = _float(log_probs)
    if lp.ndim not in (2, 3):
        raise ShapeError(f"ctc_loss: log_probs must be (T, N, C) or (T, C), got shape {lp.shape}")
    unbatched = lp.ndim == 2
    if unbatched:
        lp = lp.unsqueeze(1)
    n_steps, batch, n_classes = lp.shape
    in_lens = np.asarray(_host_int(input_lengths, "input_lengths")).reshape(-1)
    tg_lens = np.asarray(_host_int(target_lengths, "target_lengths")).reshape(-1)
    labels = _padded_targets(_host_int(targets, "targets"), tg_lens, batch, unbatched)
    if in_lens.shape != (batch,) or tg_lens.shape != (batch,):
        raise ValueError(f"ctc_loss: input_lengths and target_lengths need {batch} entries, got "
                         f"{in_lens.shape[0]} and {tg_lens.shape[0]}")
    if (in_lens < 0).any() or (in_lens > n_steps).any():
        raise ValueError(f"ctc_loss: input_lengths must be in [0, {n_steps}], got {in_lens.tolist()}")
    if not 0 <= blank < n_classes:
        raise ValueError(f"ctc_loss: blank {blank} is not a class index (C = {n_classes})")
    used = np.concatenate([labels[n, :tg_lens[n]] for n in range(batch)]) if batch else labels.reshape(-1)
    if ((used < 0) | (used >= n_classes) | (used == blank)).any():
        raise ValueError(f"ctc_loss: targets must be class indices in [0, {n_classes}) other than blank {blank}")

    n_states = 2 * labels.shape[1] + 1
    ext = np.full((batch, n_states), blank, np.int64)  # blank, l1, blank, l2, ..., blank
    ext[:, 1::2] = labels
    skip = np.zeros((batch, n_states), bool)  # s may come from s - 2: a label that differs from the one before
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    states = np.arange(n_states)
    dev, np_dtype = lp.device, lp.dtype.np
    unreachable = -min(_UNREACHABLE, dt.finfo(lp.dtype).max / 4)
    onehot = Tensor((ext[:, :, None] == np.arange(n_classes)).astype(np_dtype), device=dev)
    frames = (lp.reshape(n_steps, batch, 1, n_classes) * onehot).sum(-1).contiguous()  # (T, N, S)
    skip_t = Tensor(skip, device=dev)
    # a virtual step before the first frame, in state 0 with probability 1, makes every step alike
    alpha = where(Tensor(np.broadcast_to(states == 0, (batch, n_states)).copy(), device=dev), 0.0, unreachable)
    for t in range(n_steps):
        select = np.zeros((n_steps, 1, 1), np_dtype)
        select[t] = 1  # frames[t], picked by data rather than by an offset, so each step is the same kernel
        frame = (frames * Tensor(select, device=dev)).sum(0)
        a1 = alpha.pad(((0, 0), (1, 0)), unreachable)[:, :n_states]
        a2 = where(skip_t, alpha.pad(((0, 0), (2, 0)), unreachable)[:, :n_states], unreachable)
        top = alpha.maximum(a1).maximum(a2)
        step = ((alpha - top).exp() + (a1 - top).exp() + (a2 - top).exp()).log() + top + frame
        alpha = where(Tensor((in_lens > t).reshape(batch, 1), device=dev), step, alpha).contiguous()
    ends = np.stack([2 * tg_lens, 2 * tg_lens - 1], -1)  # the final blank and the final label (none if empty)
    pick = states[None, None, :] == ends[:, :, None]  # (N, 2, S)
    final = where(Tensor(pick.any(-1), device=dev),
                  where(Tensor(pick, device=dev), alpha.unsqueeze(1), 0.0).sum(-1), unreachable)
    log_lik = final.logsumexp(-1)
    impossible = log_lik < 0.5 * unreachable
    loss = where(impossible, 0.0 if zero_infinity else math.inf, -where(impossible, 0.0, log_lik))
    if unbatched:
        loss = loss.reshape(())
    if reduction == "mean":
        per_label = Tensor(np.maximum(tg_lens, 1).astype(np_dtype), device=dev).reshape(loss.shape)
        return (loss / per_label).mean()
    return _reduce(loss, reduction)


def _host_int(x: Any, name: str) -> np.ndarray:
    a = x.numpy() if isinstance(x, Tensor) else np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"ctc_loss: {name} must be integers, got {a.dtype}")
    return a.astype(np.int64)


def _padded_targets(targets: np.ndarray, lengths: np.ndarray, batch: int, unbatched: bool) -> np.ndarray:
    """Targets as an (N, max length) array, from padded (N, S) or concatenated (sum of lengths,) form."""
    if (lengths < 0).any():
        raise ValueError(f"ctc_loss: target_lengths must be non-negative, got {lengths.tolist()}")
    width = int(lengths.max()) if lengths.size else 0
    if targets.ndim == 2 or (unbatched and targets.ndim == 1 and targets.size >= width):
        rows = targets.reshape(batch, -1)
        if rows.shape[1] < width:
            raise ShapeError(f"ctc_loss: padded targets have {rows.shape[1]} columns, a target length is {width}")
        return rows[:, :width]
    if targets.ndim != 1 or targets.size != lengths.sum():
        raise ValueError(f"ctc_loss: concatenated targets need sum(target_lengths) = {int(lengths.sum())} "
                         f"entries, got shape {targets.shape}")
    out = np.zeros((batch, width), np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for n in range(batch):
        out[n, :lengths[n]] = targets[offsets[n]:offsets[n + 1]]
    return out

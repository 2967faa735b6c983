"""Normalization: batch, layer, RMS, group and instance normalization (functions and modules),
and ``F.normalize``.

Each normalizes with statistics over some axes, ``(x - mean) / sqrt(var + eps)`` (the biased
variance), then applies an optional per-feature affine map. The functions compose ordinary
tensor ops, so they fuse into few kernels and differentiate, vmap and jit without special rules.

Running statistics (BatchNorm, and InstanceNorm with ``track_running_stats=True``) are buffers
updated in training mode with ``new = (1 - momentum) * old + momentum * batch_stat`` (unbiased
variance), from detached values, so no gradient flows into them. The update happens in place
(``Tensor.assign``, computed at once when running eagerly), so it reaches the tensors the module
holds: the model itself in PyTorch-style code, the state written back by ``cv.jit``, and the
tensors passed to :func:`~corvid.nn.functional_call`. Under ``cv.grad`` with the module as the
differentiated argument, the module is rebuilt around traced leaves and the float statistics
are updated on that copy (return it with ``has_aux=True`` to keep them). Training-mode BatchNorm
under ``cv.vmap`` raises: per-example statistics cannot update one shared buffer.

>>> from corvid import nn
>>> bn = nn.BatchNorm1d(2)
>>> y = bn(cv.Tensor([[100.0, 200.0], [300.0, 600.0]]))
>>> y.tolist(), bn.running_mean.tolist()            # batch statistics; running mean 0.9*0 + 0.1*mean
([[-1.0, -1.0], [1.0, 1.0]], [20.0, 40.0])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import ShapeError
from ..amp import float32_op
from ..autograd import no_grad
from ..creation import ones, zeros
from ..dtype import finfo, int64
from ..engine import capture
from ..engine.replay import replayed
from ..tensor import Tensor
from ..graph.symbolic import Sym
from .module import Module, check_input, shape_error
from .parameter import Parameter, tracing

__all__ = [
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "GroupNorm",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "LayerNorm",
    "RMSNorm",
    "batch_norm",
    "group_norm",
    "instance_norm",
    "layer_norm",
    "normalize",
    "rms_norm",
]


def _channel_view(t: Tensor | None, ndim: int) -> Tensor | None:
    """A per-channel vector shaped to broadcast against ``(N, C, *spatial)``."""
    return None if t is None else t.reshape((1, -1) + (1,) * (ndim - 2))


def _affine(y: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def _update(buffer: Tensor, value: Tensor, momentum: float | Tensor) -> None:
    """``buffer <- (1 - momentum) * buffer + momentum * value``, in place and detached."""
    if tracing() and not capture.tracing():  # vmap, not jit
        raise RuntimeError("running statistics cannot be updated under cv.vmap (one shared buffer, per-example "
                           "statistics); call .eval() on the module or use track_running_stats=False")
    with no_grad():
        buffer.assign(buffer * (1 - momentum) + value.detach().reshape(buffer.shape).astype(buffer.dtype) * momentum)
    if not tracing():
        buffer.realize()


def _normalize(x: Tensor, axes: tuple[int, ...], eps: float, mean: Tensor | None = None,
               var: Tensor | None = None) -> Tensor:
    if mean is None:
        mean = x.mean(axes, keepdims=True)
        var = x.var(axes, keepdims=True)
    return (x - mean) * (var + eps).rsqrt()


@float32_op
def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
               bias: Tensor | None = None, training: bool = False, momentum: float | Tensor = 0.1,
               eps: float = 1e-5) -> Tensor:
    """Batch normalization of ``(N, C, *spatial)``: each channel normalized over ``N`` and the
    spatial axes, then ``* weight + bias`` (shape ``(C,)``, optional).

    With ``training=True`` (or no running statistics) the batch statistics are used, and the
    running ones, if given, are updated in place (see the module docstring); otherwise
    ``running_mean``/``running_var`` are. ValueError for fewer than 2 dims, or for a single value
    per channel in training (its variance is undefined).

    >>> batch_norm(cv.Tensor([[0.0], [200.0]]), None, None).tolist()
    [[-1.0], [1.0]]
    """
    x = input if isinstance(input, Tensor) else Tensor(input)
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: expected an input of shape (N, C, *spatial), got {x.shape}")
    axes = (0,) + tuple(range(2, x.ndim))
    if training or running_mean is None:
        count = x.node.numel // max(x.shape[1], 1)
        if training and count <= 1:
            raise ShapeError(f"batch_norm: expected more than 1 value per channel when training, got input of shape "
                             f"{x.shape}")
        mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
        if training and running_mean is not None:
            _update(running_mean, mean, momentum)
            # (a symbolic count, in a jit trace: the unbiased factor computed by the kernel)
            unbiased = var * count / (count - 1) if isinstance(count, Sym) else var * (count / (count - 1))
            _update(running_var, unbiased, momentum)
    else:
        mean, var = _channel_view(running_mean, x.ndim), _channel_view(running_var, x.ndim)
    y = _normalize(x, axes, eps, mean, var)
    return _affine(y, _channel_view(weight, x.ndim), _channel_view(bias, x.ndim))


def _trailing(x: Tensor, normalized_shape: int | Sequence[int], what: str) -> tuple[int, ...]:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if x.shape[x.ndim - len(shape):] != shape or len(shape) > x.ndim:
        raise ShapeError(f"{what}: expected an input of shape (*, {', '.join(map(str, shape))}), got {x.shape}")
    return tuple(range(x.ndim - len(shape), x.ndim))


@float32_op
@replayed
def layer_norm(input: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing axes ``normalized_shape`` of each sample, then ``* weight +
    bias`` (shape ``normalized_shape``). ValueError if the input does not end with that shape.

    >>> layer_norm(cv.Tensor([[100.0, 300.0]]), 2).tolist()
    [[-1.0, 1.0]]
    """
    x = input if isinstance(input, Tensor) else Tensor(input)
    return _affine(_normalize(x, _trailing(x, normalized_shape, "layer_norm"), eps), weight, bias)


@float32_op
@replayed
def rms_norm(input: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """``x / sqrt(mean(x²) + eps) * weight`` over the trailing axes ``normalized_shape`` (no mean
    subtraction); ``eps`` defaults to the dtype's machine epsilon, as torch.

    >>> rms_norm(cv.Tensor([[3.0, 4.0]]), 2).tolist()[0][1] > 1.13
    True
    """
    x = input if isinstance(input, Tensor) else Tensor(input)
    axes = _trailing(x, normalized_shape, "rms_norm")
    e = finfo(x.dtype).eps if eps is None else eps
    y = x * ((x * x).mean(axes, keepdims=True) + e).rsqrt()
    return y if weight is None else y * weight


@float32_op
def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Split the ``C`` channels of ``(N, C, *spatial)`` into ``num_groups`` groups and normalize
    each sample's group over its channels and spatial axes, then ``* weight + bias`` (shape
    ``(C,)``). ValueError if ``num_groups`` does not divide ``C``.

    >>> group_norm(cv.Tensor([[100.0, 300.0, 500.0, 700.0]]), 2).tolist()
    [[-1.0, 1.0, -1.0, 1.0]]
    """
    x = input if isinstance(input, Tensor) else Tensor(input)
    if x.ndim < 2 or num_groups < 1 or x.shape[1] % num_groups:
        raise ShapeError(f"group_norm: {num_groups} groups must divide the channels (axis 1) of the input of shape "
                         f"{x.shape}")
    g = x.reshape((x.shape[0], num_groups, -1))
    y = _normalize(g, (2,), eps).reshape(x.shape)
    return _affine(y, _channel_view(weight, x.ndim), _channel_view(bias, x.ndim))


@float32_op
def instance_norm(input: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,
                  weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalize each channel of each sample of ``(N, C, *spatial)`` over its spatial axes, then
    ``* weight + bias``. With ``use_input_stats=False`` the running statistics are used instead;
    with it and running statistics given, they are updated with the batch mean of the
    per-instance statistics. ValueError for fewer than 3 dims.

    >>> instance_norm(cv.Tensor([[[100.0, 300.0]]])).tolist()
    [[[-1.0, 1.0]]]
    """
    x = input if isinstance(input, Tensor) else Tensor(input)
    if x.ndim < 3:
        raise ShapeError(f"instance_norm: expected an input of shape (N, C, *spatial), got {x.shape}")
    axes = tuple(range(2, x.ndim))
    if use_input_stats or running_mean is None:
        mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
        if use_input_stats and running_mean is not None:
            count = math.prod(x.shape[2:])
            _update(running_mean, mean.mean(0), momentum)
            _update(running_var, (var * (count / max(count - 1, 1))).mean(0), momentum)
    else:
        mean, var = _channel_view(running_mean, x.ndim), _channel_view(running_var, x.ndim)
    y = _normalize(x, axes, eps, mean, var)
    return _affine(y, _channel_view(weight, x.ndim), _channel_view(bias, x.ndim))


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """``x / max(||x||_p, eps)`` along ``dim``.

    >>> normalize(cv.Tensor([[3.0, 4.0]])).tolist()
    [[0.6000000238418579, 0.800000011920929]]
    """
    x = input if isinstance(input, Tensor) else Tensor(input)
    norm = (x.abs() ** p).sum(dim, keepdims=True) ** (1.0 / p) if p != 2 else (x * x).sum(dim, keepdims=True).sqrt()
    return x / norm.maximum(eps)


# --- modules -------------------------------------------------------------------------------------------


class _NormBase(Module):
    """Per-channel affine parameters and optional running statistics (BatchNorm, InstanceNorm)."""

    _ranks: tuple[int, ...] = ()
    _shape_text = ""
    _unbatched_rank: int | None = None

    def __init__(self, num_features: int, eps: float, momentum: float | None, affine: bool,
                 track_running_stats: bool, device: str | None, dtype: Any):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(ones(num_features, dtype=dtype, device=device))
            self.bias = Parameter(zeros(num_features, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype, device=device))
            self.register_buffer("running_var", ones(num_features, dtype=dtype, device=device))
            self.register_buffer("num_batches_tracked", zeros((), dtype=int64, device=device))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def reset_running_stats(self) -> None:
        """Running mean 0, running variance 1, batch count 0."""
        if self.track_running_stats:
            with no_grad():
                self.running_mean.assign(0.0)
                self.running_var.assign(1.0)
                self.num_batches_tracked.assign(0)

    def reset_parameters(self) -> None:
        """Reset the running statistics, and the affine parameters to weight 1 and bias 0."""
        self.reset_running_stats()
        if self.affine:
            from . import init

            init.ones_(self.weight)
            init.zeros_(self.bias)

    def _momentum(self) -> float | Tensor:
        """BatchNorm's update factor for this training step; counts the step (``num_batches_tracked += 1``).
        ``momentum=None`` averages all steps equally: factor ``1 / num_batches_tracked``."""
        with no_grad():
            self.num_batches_tracked.assign(self.num_batches_tracked + 1)
        if not tracing():
            self.num_batches_tracked.realize()
        if self.momentum is None:
            return 1.0 / self.num_batches_tracked.astype(self.running_mean.dtype)
        return self.momentum

    def _check(self, x: Any) -> Tensor:
        text = self._shape_text.format(c=self.num_features)
        x = check_input(self, x, self._ranks, text)
        if x.shape[0 if x.ndim == self._unbatched_rank else 1] != self.num_features:
            raise shape_error(self, text, x)
        return x

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: str | None = None, dtype: Any = None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        x = self._check(x)
        momentum = self._momentum() if self.training and self.track_running_stats else 0.0
        use_batch = self.training or not self.track_running_stats
        return batch_norm(x, self.running_mean if self.track_running_stats else None, self.running_var, self.weight,
                          self.bias, use_batch, momentum, self.eps)


class BatchNorm1d(_BatchNorm):
    """Batch normalization of ``(N, C)`` or ``(N, C, L)`` (see :func:`batch_norm`); weight 1 and bias 0,
    buffers ``running_mean`` (0), ``running_var`` (1) and ``num_batches_tracked`` (int64), as torch.
    Training mode uses and updates batch statistics, eval mode uses the running ones.

    >>> BatchNorm1d(3)(cv.randn(4, 3)).shape
    (4, 3)
    """

    _ranks, _shape_text, _unbatched_rank = (2, 3), "(N, {c}) or (N, {c}, L)", None


class BatchNorm2d(_BatchNorm):
    """Batch normalization of ``(N, C, H, W)`` per channel; see :class:`BatchNorm1d`.

    >>> BatchNorm2d(2).eval()(cv.ones(1, 2, 3, 3)).shape
    (1, 2, 3, 3)
    """

    _ranks, _shape_text, _unbatched_rank = (4,), "(N, {c}, H, W)", None


class BatchNorm3d(_BatchNorm):
    """Batch normalization of ``(N, C, D, H, W)`` per channel; see :class:`BatchNorm1d`. In training
    mode the running mean and (unbiased) variance move by ``momentum`` towards the batch's.

    >>> bn = cv.nn.BatchNorm3d(2)
    >>> y = bn(cv.arange(16.0).reshape(2, 2, 1, 2, 2))
    >>> [round(v, 4) for v in y.mean(axis=(0, 2, 3, 4)).tolist()]   # each channel centred
    [0.0, 0.0]
    >>> [round(v, 4) for v in bn.running_mean.tolist()], bn.num_batches_tracked.item()   # 0.1 * batch mean
    ([0.55, 0.95], 1)
    """

    _ranks, _shape_text, _unbatched_rank = (5,), "(N, {c}, D, H, W)", None


class _InstanceNorm(_NormBase):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device: str | None = None, dtype: Any = None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        x = self._check(x)
        unbatched = x.ndim == self._unbatched_rank
        if unbatched:
            x = x.unsqueeze(0)
        use_input = self.training or not self.track_running_stats
        momentum = self.momentum if self.momentum is not None else 0.0  # as torch: no batch count here
        y = instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias, use_input, momentum,
                          self.eps)
        return y.squeeze(0) if unbatched else y


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization of ``(N, C, L)`` or ``(C, L)`` (see :func:`instance_norm`); no affine
    parameters and no running statistics by default, as torch.

    >>> InstanceNorm1d(2)(cv.randn(3, 2, 5)).shape
    (3, 2, 5)
    """

    _ranks, _shape_text, _unbatched_rank = (2, 3), "(N, {c}, L) or ({c}, L)", 2


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization of ``(N, C, H, W)`` or ``(C, H, W)``: each channel of each sample is
    normalized over its own ``H x W`` values; see :class:`InstanceNorm1d`.

    >>> inorm = cv.nn.InstanceNorm2d(1)
    >>> y = inorm(cv.Tensor([[[[1.0, 3.0], [5.0, 7.0]]]]))   # mean 4, variance 5
    >>> [round(v, 4) for v in y.flatten().tolist()]
    [-1.3416, -0.4472, 0.4472, 1.3416]
    >>> inorm(cv.ones(1, 2, 2)).shape   # unbatched (C, H, W)
    (1, 2, 2)
    """

    _ranks, _shape_text, _unbatched_rank = (3, 4), "(N, {c}, H, W) or ({c}, H, W)", 3


class InstanceNorm3d(_InstanceNorm):
    """Instance normalization of ``(N, C, D, H, W)`` or ``(C, D, H, W)``; see :class:`InstanceNorm1d`.
    ``affine=True`` adds a per-channel ``weight`` and ``bias``.

    >>> inorm = cv.nn.InstanceNorm3d(2, affine=True)
    >>> y = inorm(cv.arange(16.0).reshape(1, 2, 2, 2, 2))
    >>> [round(v, 4) for v in y.std(axis=(2, 3, 4)).flatten().tolist()]   # per sample and channel
    [1.0, 1.0]
    >>> sorted(name for name, _ in inorm.named_parameters())
    ['bias', 'weight']
    """

    _ranks, _shape_text, _unbatched_rank = (4, 5), "(N, {c}, D, H, W) or ({c}, D, H, W)", 4


class LayerNorm(Module):
    """:func:`layer_norm` over the trailing ``normalized_shape``, with ``weight`` (1) and ``bias``
    (0) of that shape unless ``elementwise_affine=False`` (``bias=False`` drops only the bias).

    >>> LayerNorm(4)(cv.randn(2, 4)).shape
    (2, 4)
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device: str | None = None, dtype: Any = None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        shape = self.normalized_shape
        if elementwise_affine:
            self.weight = Parameter(ones(shape, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
        if elementwise_affine and bias:
            self.bias = Parameter(zeros(shape, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        x = x if isinstance(x, Tensor) else Tensor(x)
        n = len(self.normalized_shape)
        if x.shape[x.ndim - n:] != self.normalized_shape or x.ndim < n:
            raise shape_error(self, f"(*, {', '.join(map(str, self.normalized_shape))})", x)
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class RMSNorm(Module):
    """:func:`rms_norm` over the trailing ``normalized_shape``, with ``weight`` (1) unless
    ``elementwise_affine=False``; ``eps=None`` uses the input dtype's machine epsilon.

    >>> RMSNorm(4)(cv.randn(2, 4)).shape
    (2, 4)
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True, device: str | None = None, dtype: Any = None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)

    def forward(self, x: Tensor) -> Tensor:
        x = x if isinstance(x, Tensor) else Tensor(x)
        n = len(self.normalized_shape)
        if x.shape[x.ndim - n:] != self.normalized_shape or x.ndim < n:
            raise shape_error(self, f"(*, {', '.join(map(str, self.normalized_shape))})", x)
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(Module):
    """:func:`group_norm` with ``num_groups`` groups of the ``num_channels`` channels and
    per-channel ``weight`` (1) and ``bias`` (0) unless ``affine=False``. ValueError if
    ``num_groups`` does not divide ``num_channels``.

    >>> GroupNorm(2, 4)(cv.randn(3, 4, 5)).shape
    (3, 4, 5)
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device: str | None = None, dtype: Any = None):
        super().__init__()
        if num_groups < 1 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_groups={num_groups} must divide num_channels={num_channels}")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        if affine:
            self.weight = Parameter(ones(num_channels, dtype=dtype, device=device))
            self.bias = Parameter(zeros(num_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        x = x if isinstance(x, Tensor) else Tensor(x)
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise shape_error(self, f"(N, {self.num_channels}, *)", x)
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"

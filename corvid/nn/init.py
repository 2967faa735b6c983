"""Parameter initializers (``nn.init``), with PyTorch's names, formulas and defaults.

Each ``name_(tensor, ...)`` fills ``tensor`` in place and returns it: a
:class:`~corvid.nn.Parameter` (or any ``requires_grad`` leaf) keeps its identity and gets the new
value, computed at once (``Tensor.assign`` under ``no_grad``); any other tensor is rebound to the
new, still lazy, value (so ``normal_(cv.empty(3))`` builds a value without running anything). Random fills draw from corvid's global generator (``cv.manual_seed``).

The scaled initializers use the fans of a weight of shape ``(out, in, *kernel)``:
``fan_in = in * prod(kernel)`` and ``fan_out = out * prod(kernel)`` (ValueError below 2 dims).

>>> from corvid import nn
>>> w = nn.Parameter(cv.empty(3, 4))
>>> _ = nn.init.kaiming_uniform_(w, a=5 ** 0.5)
>>> bool((w.abs() <= 0.5).all())   # bound = 1 / sqrt(fan_in)
True
"""

from __future__ import annotations

import math

from ..errors import ShapeError
from ..autograd import no_grad
from ..creation import full, rand, randn
from ..dtype import float64
from ..ops.elementwise import where
from ..tensor import Tensor
from .parameter import Parameter, tracing

__all__ = [
    "calculate_gain",
    "constant_",
    "glorot_normal_",
    "glorot_uniform_",
    "kaiming_normal_",
    "kaiming_uniform_",
    "normal_",
    "ones_",
    "orthogonal_",
    "trunc_normal_",
    "uniform_",
    "xavier_normal_",
    "xavier_uniform_",
    "zeros_",
]

_LINEAR = ("linear", "identity", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "sigmoid")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The gain that keeps activations' variance stable through ``nonlinearity``: 1 for linear
    layers and sigmoid, 5/3 for tanh, √2 for relu, √(2 / (1 + slope²)) for leaky_relu (``param``
    is the slope, default 0.01), 3/4 for selu. ValueError for an unknown name.

    >>> round(calculate_gain("relu"), 4), calculate_gain("leaky_relu", 1.0)
    (1.4142, 1.0)
    """
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"calculate_gain: negative_slope {slope!r} is not a number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _fans(t: Tensor) -> tuple[int, int]:
    if t.ndim < 2:
        raise ShapeError(f"fan in and fan out need a tensor of at least 2 dimensions, got shape {t.shape}")
    receptive = math.prod(t.shape[2:])
    return t.shape[1] * receptive, t.shape[0] * receptive


def _fan(t: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _fans(t)
    return fan_in if mode == "fan_in" else fan_out


def _fill(t: Tensor, value: Tensor) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"initializers fill a Tensor in place, got {type(t).__name__}")
    with no_grad():
        t.assign(value)
    if isinstance(t, Parameter) and not tracing():  # a frozen Parameter is no leaf: compute it too
        t.realize()
    return t


def _check_float(t: Tensor, name: str) -> None:
    if not isinstance(t, Tensor) or not t.dtype.is_float:
        what = t.dtype.name if isinstance(t, Tensor) else type(t).__name__
        raise TypeError(f"{name} needs a floating-point tensor, got {what}")


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    """Fill with samples uniform in ``[a, b)``.

    >>> bool((uniform_(cv.empty(5), -1, 1).abs() <= 1).all())
    True
    """
    _check_float(tensor, "uniform_")
    return _fill(tensor, rand(*tensor.shape, dtype=tensor.dtype, device=tensor.device) * (b - a) + a)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """Fill with samples from N(mean, std²).

    >>> normal_(cv.empty(2, 3), 0.0, 0.02).shape
    (2, 3)
    """
    _check_float(tensor, "normal_")
    return _fill(tensor, randn(*tensor.shape, dtype=tensor.dtype, device=tensor.device) * std + mean)


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with ``val``.

    >>> constant_(cv.empty(2), 0.5).tolist()
    [0.5, 0.5]
    """
    return _fill(tensor, full(tensor.shape, val, dtype=tensor.dtype, device=tensor.device))


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with 0 (in place for a :class:`~corvid.nn.Parameter`, which keeps its identity).

    >>> w = cv.nn.Parameter(cv.empty(2, 3))
    >>> zeros_(w) is w
    True
    >>> w.tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    return constant_(tensor, 0)


def ones_(tensor: Tensor) -> Tensor:
    """Fill with 1, in the tensor's own dtype.

    >>> ones_(cv.empty(3)).tolist()
    [1.0, 1.0, 1.0]
    >>> ones_(cv.empty(2, dtype=cv.int32)).tolist()
    [1, 1]
    """
    return constant_(tensor, 1)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot uniform: ``U(-b, b)`` with ``b = gain * sqrt(6 / (fan_in + fan_out))``.

    >>> bool((xavier_uniform_(cv.empty(3, 5)).abs() <= (6 / 8) ** 0.5).all())
    True
    """
    fan_in, fan_out = _fans(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot normal: ``N(0, std²)`` with ``std = gain * sqrt(2 / (fan_in + fan_out))``; also named
    ``glorot_normal_``. ValueError for fewer than 2 dimensions.

    >>> w = xavier_normal_(cv.empty(200, 200))            # std = sqrt(2 / 400) ≈ 0.0707
    >>> abs(w.std().item() - (2 / 400) ** 0.5) < 0.002
    True
    """
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


glorot_uniform_ = xavier_uniform_
glorot_normal_ = xavier_normal_


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    """He uniform: ``U(-b, b)`` with ``b = gain * sqrt(3 / fan)``, ``gain = calculate_gain(nonlinearity, a)``
    and ``fan`` per ``mode`` (``"fan_in"`` or ``"fan_out"``). ``a = sqrt(5)`` gives PyTorch's
    default Linear/Conv weights, ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``.

    >>> bool((kaiming_uniform_(cv.empty(4, 9), a=5 ** 0.5).abs() <= 1 / 3).all())
    True
    """
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    """He normal: ``N(0, std²)`` with ``std = gain / sqrt(fan)`` (arguments as :func:`kaiming_uniform_`);
    ``nonlinearity="relu"`` gives ``std = sqrt(2 / fan_in)``, the usual choice before a ReLU.

    >>> w = kaiming_normal_(cv.empty(256, 128), nonlinearity="relu")   # std = sqrt(2 / 128) = 0.125
    >>> abs(w.std().item() - 0.125) < 0.005
    True
    >>> w = kaiming_normal_(cv.empty(256, 128), mode="fan_out", nonlinearity="relu")   # sqrt(2 / 256)
    >>> abs(w.std().item() - (2 / 256) ** 0.5) < 0.005
    True
    """
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode)))


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0) -> Tensor:
    """Fill with ``N(mean, std²)`` conditioned on ``[a, b]`` (absolute bounds, as torch), by the
    inverse CDF: a uniform sample between the bounds' CDF values mapped through ``erfinv``.
    ValueError unless ``a < b``.

    >>> bool((trunc_normal_(cv.empty(100), std=1.0, a=-0.5, b=0.5).abs() <= 0.5).all())
    True
    """
    from ..ops.special import erfinv

    _check_float(tensor, "trunc_normal_")
    if not a < b:
        raise ValueError(f"trunc_normal_: a ({a}) must be below b ({b})")
    lo = math.erf((a - mean) / (std * math.sqrt(2.0)))  # 2*CDF - 1 at the bounds
    hi = math.erf((b - mean) / (std * math.sqrt(2.0)))
    u = rand(*tensor.shape, dtype=float64, device=tensor.device) * (hi - lo) + lo
    x = (erfinv(u) * (std * math.sqrt(2.0)) + mean).clip(a, b)
    return _fill(tensor, x.astype(tensor.dtype))


def orthogonal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Fill with a (semi-)orthogonal matrix, scaled by ``gain``: the Q factor of a QR
    decomposition of a normal sample, signs fixed so the distribution is uniform (Haar). A tensor
    of more than 2 dims is treated as ``(shape[0], prod(shape[1:]))``. ValueError below 2 dims.

    >>> q = orthogonal_(cv.empty(3, 3))
    >>> bool(((q @ q.T) - cv.eye(3)).abs().max() < 1e-5)
    True
    """
    from .. import linalg
    from ..ops.manipulation import diagonal

    _check_float(tensor, "orthogonal_")
    if tensor.ndim < 2:
        raise ShapeError(f"orthogonal_: needs at least 2 dimensions, got shape {tensor.shape}")
    rows = tensor.shape[0]
    cols = tensor.size // rows if rows else 0
    flat = randn(rows, cols, dtype=tensor.dtype, device=tensor.device)
    if rows < cols:
        flat = flat.T
    q, r = linalg.qr(flat)
    q = q * where(diagonal(r) >= 0, 1.0, -1.0)  # R's diagonal signs: makes Q's distribution uniform
    if rows < cols:
        q = q.T
    return _fill(tensor, q.reshape(tensor.shape) * gain)

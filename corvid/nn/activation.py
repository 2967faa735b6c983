"""Activation functions, as functions (``F.relu``) and as modules (``nn.ReLU``).

Each function takes a float tensor of any shape and returns one of the same shape and dtype,
elementwise (``softmax`` and friends along ``dim``), with PyTorch's formulas and PyTorch's
derivative at the kinks (``relu'(0) = 0``, ``hardtanh'`` is 0 at its bounds). NaN propagates. The
``inplace`` arguments are accepted for signature compatibility: corvid tensors are values, so
the result is always a new tensor (which costs nothing extra: it fuses into the same kernel).

Formulas that could overflow in a branch that ``where`` discards (``exp`` of a large input) are
written so that branch stays finite, since a discarded ``inf`` still turns the gradient into NaN.

>>> from corvid import nn
>>> import corvid.nn.functional as F
>>> F.relu(cv.Tensor([-1.0, 2.0])).tolist()
[0.0, 2.0]
>>> nn.Sequential(nn.Linear(2, 2), nn.GELU(approximate="tanh"))(cv.ones(1, 2)).shape
(1, 2)
"""

from __future__ import annotations

from typing import Any

from ..errors import ShapeError
from ..ops.elementwise import where
from ..tensor import Tensor
from .module import Module
from .parameter import Parameter

__all__ = [
    "CELU",
    "ELU",
    "GELU",
    "SELU",
    "Hardsigmoid",
    "Hardswish",
    "Hardtanh",
    "LeakyReLU",
    "LogSigmoid",
    "LogSoftmax",
    "Mish",
    "PReLU",
    "ReLU",
    "ReLU6",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Softmin",
    "Softplus",
    "Softsign",
    "Tanh",
    "celu",
    "elu",
    "gelu",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "leaky_relu",
    "log_softmax",
    "logsigmoid",
    "mish",
    "prelu",
    "relu",
    "relu6",
    "selu",
    "sigmoid",
    "silu",
    "softmax",
    "softmin",
    "softplus",
    "softsign",
    "tanh",
]

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _float(x: Any, name: str) -> Tensor:
    t = x if isinstance(x, Tensor) else Tensor(x)
    if not t.dtype.is_float:
        raise TypeError(f"{name} needs a floating-point tensor, got {t.dtype.name}")
    return t


def relu(x: Tensor, inplace: bool = False) -> Tensor:
    """``max(x, 0)``, with derivative 0 at 0 (as torch).

    >>> relu(cv.Tensor([-1.0, 0.5])).tolist()
    [0.0, 0.5]
    """
    return _float(x, "relu").relu()


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` clipped to ``[min_val, max_val]``; derivative 1 strictly inside, 0 elsewhere.

    >>> hardtanh(cv.Tensor([-3.0, 0.5, 3.0])).tolist()
    [-1.0, 0.5, 1.0]
    """
    x = _float(x, "hardtanh")
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) must not exceed max_val ({max_val})")
    return where(x <= min_val, min_val, where(x >= max_val, max_val, x))


def relu6(x: Tensor, inplace: bool = False) -> Tensor:
    """``min(max(x, 0), 6)``.

    >>> relu6(cv.Tensor([-1.0, 7.0])).tolist()
    [0.0, 6.0]
    """
    return hardtanh(x, 0.0, 6.0)


def leaky_relu(x: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """``x`` where positive, ``negative_slope * x`` elsewhere.

    >>> leaky_relu(cv.Tensor([-2.0, 2.0]), 0.5).tolist()
    [-1.0, 2.0]
    """
    x = _float(x, "leaky_relu")
    return where(x > 0, x, x * negative_slope)


def elu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere.

    >>> elu(cv.Tensor([0.0, 1.0])).tolist()
    [0.0, 1.0]
    """
    x = _float(x, "elu")
    neg = where(x > 0, 0.0, x)  # the negative branch on values that cannot overflow exp
    return where(x > 0, x, neg.expm1() * alpha)


def celu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` where positive, ``alpha * (exp(x / alpha) - 1)`` elsewhere (ValueError for ``alpha == 0``).

    >>> celu(cv.Tensor([2.0])).tolist()
    [2.0]
    """
    if alpha == 0:
        raise ValueError("celu: alpha must not be 0")
    x = _float(x, "celu")
    neg = where(x > 0, 0.0, x)
    return where(x > 0, x, (neg * (1.0 / alpha)).expm1() * alpha)


def selu(x: Tensor, inplace: bool = False) -> Tensor:
    """``scale * elu(x, alpha)`` with the self-normalizing constants (alpha ≈ 1.6733, scale ≈ 1.0507).

    >>> round(selu(cv.Tensor([1.0])).item(), 4)
    1.0507
    """
    return elu(x, _SELU_ALPHA) * _SELU_SCALE


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """``x * Φ(x)`` (Φ the standard normal CDF, via erf), or its tanh approximation with
    ``approximate="tanh"``. ValueError for another ``approximate``.

    >>> round(gelu(cv.Tensor([1.0])).item(), 4), round(gelu(cv.Tensor([1.0]), "tanh").item(), 4)
    (0.8413, 0.8412)
    """
    return _float(x, "gelu").gelu(approximate)


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))``, computed from ``exp(-|x|)`` so that neither the value nor the
    gradient overflows for large ``|x|``.

    >>> sigmoid(cv.Tensor([0.0])).tolist()
    [0.5]
    """
    x = _float(x, "sigmoid")
    positive = x >= 0
    e = where(positive, -x, x).exp()  # exp(-|x|), with the right derivative at 0
    return where(positive, 1.0, e) / (1.0 + e)


def silu(x: Tensor, inplace: bool = False) -> Tensor:
    """``x * sigmoid(x)`` (also called swish).

    >>> silu(cv.Tensor([0.0])).tolist()
    [0.0]
    """
    x = _float(x, "silu")
    return x * sigmoid(x)


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold`` (as torch).

    >>> round(softplus(cv.Tensor([0.0])).item(), 4)
    0.6931
    """
    x = _float(x, "softplus")
    bx = x * beta
    smooth = (bx.maximum(0.0) + (-bx.abs()).exp().log1p()) * (1.0 / beta)
    return where(bx > threshold, x, smooth)


def mish(x: Tensor, inplace: bool = False) -> Tensor:
    """``x * tanh(softplus(x))``.

    >>> round(mish(cv.Tensor([1.0])).item(), 4)
    0.8651
    """
    x = _float(x, "mish")
    return x * softplus(x).tanh()


def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent.

    >>> tanh(cv.Tensor([0.0])).tolist()
    [0.0]
    """
    return _float(x, "tanh").tanh()


def softsign(x: Tensor) -> Tensor:
    """``x / (1 + |x|)``.

    >>> softsign(cv.Tensor([1.0])).tolist()
    [0.5]
    """
    x = _float(x, "softsign")
    return x / (1.0 + x.abs())


def logsigmoid(x: Tensor) -> Tensor:
    """``log(sigmoid(x)) = -softplus(-x)``, stable for large ``|x|``.

    >>> round(logsigmoid(cv.Tensor([0.0])).item(), 4)
    -0.6931
    """
    x = _float(x, "logsigmoid")
    return x.minimum(0.0) - (-x.abs()).exp().log1p()


def hardswish(x: Tensor, inplace: bool = False) -> Tensor:
    """``x * relu6(x + 3) / 6``.

    >>> hardswish(cv.Tensor([-4.0, 0.0, 4.0])).tolist()
    [-0.0, 0.0, 4.0]
    """
    x = _float(x, "hardswish")
    return x * relu6(x + 3.0) * (1.0 / 6.0)


def hardsigmoid(x: Tensor, inplace: bool = False) -> Tensor:
    """``relu6(x + 3) / 6``.

    >>> hardsigmoid(cv.Tensor([-4.0, 0.0, 4.0])).tolist()
    [0.0, 0.5, 1.0]
    """
    return relu6(_float(x, "hardsigmoid") + 3.0) * (1.0 / 6.0)


def prelu(x: Tensor, weight: Tensor) -> Tensor:
    """``x`` where positive, ``weight * x`` elsewhere; ``weight`` has one element, or one per
    channel (axis 1 of ``x``). ValueError if its size matches neither.

    >>> prelu(cv.Tensor([[-2.0, 2.0]]), cv.Tensor([0.25])).tolist()
    [[-0.5, 2.0]]
    """
    x = _float(x, "prelu")
    if weight.size != 1 and (x.ndim < 2 or weight.size != x.shape[1]):
        raise ShapeError(f"prelu: weight of shape {weight.shape} must have 1 element or one per channel "
                         f"(axis 1) of the input of shape {x.shape}")
    w = weight.reshape(()) if weight.size == 1 else weight.reshape((-1,) + (1,) * (x.ndim - 2))
    return where(x > 0, x, x * w)


def _dim(dim: int | None, name: str) -> int:
    if dim is None:
        raise ValueError(f"{name}: pass dim (the axis to normalize over); corvid has no implicit choice")
    return dim


def softmax(x: Tensor, dim: int | None = None, dtype: Any = None) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim`` (required), computed in ``dtype`` if given.

    >>> softmax(cv.Tensor([[0.0, 0.0]]), dim=1).tolist()
    [[0.5, 0.5]]
    """
    x = _float(x, "softmax") if dtype is None else Tensor(x).astype(dtype)
    return x.softmax(_dim(dim, "softmax"))


def log_softmax(x: Tensor, dim: int | None = None, dtype: Any = None) -> Tensor:
    """``log(softmax(x))`` along ``dim`` (required), computed stably.

    >>> [round(v, 4) for v in log_softmax(cv.Tensor([0.0, 0.0]), dim=0).tolist()]
    [-0.6931, -0.6931]
    """
    x = _float(x, "log_softmax") if dtype is None else Tensor(x).astype(dtype)
    return x.log_softmax(_dim(dim, "log_softmax"))


def softmin(x: Tensor, dim: int | None = None, dtype: Any = None) -> Tensor:
    """``softmax(-x)`` along ``dim`` (required).

    >>> softmin(cv.Tensor([0.0, 0.0]), dim=0).tolist()
    [0.5, 0.5]
    """
    x = _float(x, "softmin") if dtype is None else Tensor(x).astype(dtype)
    return (-x).softmax(_dim(dim, "softmin"))


# --- modules -------------------------------------------------------------------------------------------


class _Inplace(Module):
    """An activation with only the (ignored) ``inplace`` flag."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_Inplace):
    """Module form of :func:`relu`: ``max(x, 0)`` elementwise.

    >>> cv.nn.ReLU()(cv.Tensor([-1.0, 0.0, 2.0])).tolist()
    [0.0, 0.0, 2.0]
    """

    def forward(self, x: Tensor) -> Tensor:
        return relu(x)


class ReLU6(_Inplace):
    """Module form of :func:`relu6`: ``x`` clipped to ``[0, 6]``.

    >>> cv.nn.ReLU6()(cv.Tensor([-1.0, 3.0, 8.0])).tolist()
    [0.0, 3.0, 6.0]
    """

    def forward(self, x: Tensor) -> Tensor:
        return relu6(x)


class SELU(_Inplace):
    """Module form of :func:`selu`: the self-normalizing ``scale * elu(x, alpha)``.

    >>> [round(v, 4) for v in cv.nn.SELU()(cv.Tensor([-1.0, 1.0])).tolist()]
    [-1.1113, 1.0507]
    """

    def forward(self, x: Tensor) -> Tensor:
        return selu(x)


class SiLU(_Inplace):
    """Module form of :func:`silu`: ``x * sigmoid(x)`` (swish).

    >>> [round(v, 4) for v in cv.nn.SiLU()(cv.Tensor([-1.0, 0.0, 1.0])).tolist()]
    [-0.2689, 0.0, 0.7311]
    """

    def forward(self, x: Tensor) -> Tensor:
        return silu(x)


class Mish(_Inplace):
    """Module form of :func:`mish`: ``x * tanh(softplus(x))``.

    >>> [round(v, 4) for v in cv.nn.Mish()(cv.Tensor([-1.0, 0.0, 1.0])).tolist()]
    [-0.3034, 0.0, 0.8651]
    """

    def forward(self, x: Tensor) -> Tensor:
        return mish(x)


class Hardswish(_Inplace):
    """Module form of :func:`hardswish`: ``x * relu6(x + 3) / 6``, 0 below -3 and ``x`` above 3.

    >>> cv.nn.Hardswish()(cv.Tensor([-3.0, 0.0, 3.0, 4.0])).tolist()
    [-0.0, 0.0, 3.0, 4.0]
    """

    def forward(self, x: Tensor) -> Tensor:
        return hardswish(x)


class Hardsigmoid(_Inplace):
    """Module form of :func:`hardsigmoid`: ``relu6(x + 3) / 6``, a piecewise-linear sigmoid.

    >>> cv.nn.Hardsigmoid()(cv.Tensor([-3.0, 0.0, 1.5, 3.0])).tolist()
    [0.0, 0.5, 0.75, 1.0]
    """

    def forward(self, x: Tensor) -> Tensor:
        return hardsigmoid(x)


class Sigmoid(Module):
    """Module form of :func:`sigmoid`: ``1 / (1 + exp(-x))``, which saturates without overflow.

    >>> [round(v, 4) for v in cv.nn.Sigmoid()(cv.Tensor([-2.0, 0.0, 2.0])).tolist()]
    [0.1192, 0.5, 0.8808]
    >>> cv.nn.Sigmoid()(cv.Tensor([-1000.0, 1000.0])).tolist()
    [0.0, 1.0]
    """

    def forward(self, x: Tensor) -> Tensor:
        return sigmoid(x)


class Tanh(Module):
    """Module form of :func:`tanh`: the hyperbolic tangent.

    >>> [round(v, 4) for v in cv.nn.Tanh()(cv.Tensor([-1.0, 0.0, 1.0])).tolist()]
    [-0.7616, 0.0, 0.7616]
    """

    def forward(self, x: Tensor) -> Tensor:
        return tanh(x)


class Softsign(Module):
    """Module form of :func:`softsign`: ``x / (1 + |x|)``.

    >>> cv.nn.Softsign()(cv.Tensor([-3.0, 0.0, 1.0])).tolist()
    [-0.75, 0.0, 0.5]
    """

    def forward(self, x: Tensor) -> Tensor:
        return softsign(x)


class LogSigmoid(Module):
    """Module form of :func:`logsigmoid`: ``log(sigmoid(x))``, finite for large negative ``x``.

    >>> [round(v, 4) for v in cv.nn.LogSigmoid()(cv.Tensor([-1.0, 0.0, 1.0])).tolist()]
    [-1.3133, -0.6931, -0.3133]
    >>> cv.nn.LogSigmoid()(cv.Tensor([-1000.0])).tolist()
    [-1000.0]
    """

    def forward(self, x: Tensor) -> Tensor:
        return logsigmoid(x)


class LeakyReLU(Module):
    """Module form of :func:`leaky_relu`: ``x`` where positive, ``negative_slope * x`` (default 0.01)
    elsewhere.

    >>> cv.nn.LeakyReLU(negative_slope=0.5)(cv.Tensor([-2.0, 3.0])).tolist()
    [-1.0, 3.0]
    >>> cv.nn.LeakyReLU()
    LeakyReLU(negative_slope=0.01)
    """

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, x: Tensor) -> Tensor:
        return leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    """Module form of :func:`elu`: ``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere.

    >>> [round(v, 4) for v in cv.nn.ELU()(cv.Tensor([-1.0, 2.0])).tolist()]
    [-0.6321, 2.0]
    >>> [round(v, 4) for v in cv.nn.ELU(alpha=0.5)(cv.Tensor([-1.0, 2.0])).tolist()]
    [-0.3161, 2.0]
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, x: Tensor) -> Tensor:
        return elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(ELU):
    """Module form of :func:`celu`: ``x`` where positive, ``alpha * (exp(x / alpha) - 1)`` elsewhere
    (``alpha`` scales the input of ``exp`` too, unlike :class:`ELU`).

    >>> [round(v, 4) for v in cv.nn.CELU(alpha=2.0)(cv.Tensor([-1.0, 2.0])).tolist()]
    [-0.7869, 2.0]
    """

    def forward(self, x: Tensor) -> Tensor:
        return celu(x, self.alpha)


class GELU(Module):
    """Module form of :func:`gelu` (``approximate="none"`` or ``"tanh"``); ValueError for another
    ``approximate``.

    >>> [round(v, 4) for v in cv.nn.GELU()(cv.Tensor([-1.0, 0.0, 1.0])).tolist()]
    [-0.1587, 0.0, 0.8413]
    >>> [round(v, 4) for v in cv.nn.GELU(approximate="tanh")(cv.Tensor([-1.0, 0.0, 1.0])).tolist()]
    [-0.1588, 0.0, 0.8412]
    """

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softplus(Module):
    """Module form of :func:`softplus`: ``log(1 + exp(beta * x)) / beta``, and ``x`` itself where
    ``beta * x > threshold``.

    >>> [round(v, 4) for v in cv.nn.Softplus()(cv.Tensor([-1.0, 0.0, 1.0])).tolist()]
    [0.3133, 0.6931, 1.3133]
    >>> [round(v, 4) for v in cv.nn.Softplus(beta=2.0)(cv.Tensor([0.0, 30.0])).tolist()]
    [0.3466, 30.0]
    """

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x: Tensor) -> Tensor:
        return softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Hardtanh(Module):
    """Module form of :func:`hardtanh`: ``x`` clipped to ``[min_val, max_val]`` (default ``[-1, 1]``);
    ValueError if ``min_val > max_val``.

    >>> cv.nn.Hardtanh()(cv.Tensor([-2.0, 0.5, 2.0])).tolist()
    [-1.0, 0.5, 1.0]
    >>> cv.nn.Hardtanh(-2.0, 2.0)(cv.Tensor([-3.0, 0.5, 3.0])).tolist()
    [-2.0, 0.5, 2.0]
    """

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        if min_val > max_val:
            raise ValueError(f"Hardtanh: min_val ({min_val}) must not exceed max_val ({max_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, x: Tensor) -> Tensor:
        return hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class PReLU(Module):
    """:func:`prelu` with a learned slope: ``num_parameters`` is 1 (shared) or the number of
    channels; the parameter ``weight`` starts at ``init`` (0.25), as torch.

    >>> PReLU()(cv.Tensor([-4.0])).tolist()
    [-1.0]
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = Parameter(Tensor([float(init)] * num_parameters))

    def forward(self, x: Tensor) -> Tensor:
        return prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class _Normalizer(Module):
    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax(_Normalizer):
    """Module form of :func:`softmax` along ``dim``. Unlike PyTorch, ``dim`` has no implicit default:
    calling a ``Softmax()`` built without it raises ValueError.

    >>> p = cv.nn.Softmax(dim=1)(cv.Tensor([[1.0, 1.0], [0.0, 2.0]]))
    >>> [[round(v, 4) for v in row] for row in p.tolist()]
    [[0.5, 0.5], [0.1192, 0.8808]]
    """

    def forward(self, x: Tensor) -> Tensor:
        return softmax(x, self.dim)


class LogSoftmax(_Normalizer):
    """Module form of :func:`log_softmax` along ``dim`` (required, as for :class:`Softmax`).

    >>> [round(v, 4) for v in cv.nn.LogSoftmax(dim=0)(cv.Tensor([0.0, 1.0])).tolist()]
    [-1.3133, -0.3133]
    """

    def forward(self, x: Tensor) -> Tensor:
        return log_softmax(x, self.dim)


class Softmin(_Normalizer):
    """Module form of :func:`softmin`: ``softmax(-x)`` along ``dim`` (required), so the smallest input
    gets the largest weight.

    >>> [round(v, 4) for v in cv.nn.Softmin(dim=0)(cv.Tensor([0.0, 1.0])).tolist()]
    [0.7311, 0.2689]
    """

    def forward(self, x: Tensor) -> Tensor:
        return softmin(x, self.dim)


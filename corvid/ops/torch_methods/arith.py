"""Elementwise, reduction and linear-algebra methods with PyTorch's names and semantics."""

from __future__ import annotations

import math
from typing import Any

from ... import dtype as dt
from ...dtype import DTypeLike
from ...errors import ShapeError
from ...linalg import cross as _linalg_cross
from ...tensor import Tensor, broadcast_shapes, result_type
from .. import manipulation, special
from ..elementwise import ElementwiseMixin, where
from ..reduce import ReduceMixin
from ._common import MinMax, _tensor


# --- elementwise ----------------------------------------------------------------------------------------
def add(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    """``self + alpha * other`` (broadcast, promoted), as PyTorch's ``add``; ``cv.add`` has no ``alpha``.

    >>> cv.Tensor([1.0, 2.0]).add(cv.Tensor([10.0, 20.0]), alpha=2)
    Tensor([21., 42.])
    """
    return ElementwiseMixin.add(self, other if alpha == 1 else _tensor(self, other) * alpha)


def sub(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    """``self - alpha * other`` (broadcast, promoted), as PyTorch's ``sub``; ``subtract`` is the same method.

    ``cv.subtract`` has no ``alpha``.

    >>> cv.Tensor([1.0, 2.0]).sub(cv.Tensor([10.0, 20.0]), alpha=2)
    Tensor([-19., -38.])
    """
    return ElementwiseMixin.sub(self, other if alpha == 1 else _tensor(self, other) * alpha)


def fmod(self: Tensor, other: Any) -> Tensor:
    """The remainder of ``self / other`` with the sign of ``self`` (C's ``fmod``; ``remainder`` and
    ``%`` take the divisor's sign). Floats: exact, nan for a zero divisor. Gradient as PyTorch:
    1 for ``self``, ``-trunc(self / other)`` for ``other``.

    >>> import corvid as cv
    >>> cv.Tensor([-7.0, 7.0]).fmod(3).tolist(), (cv.Tensor([-7.0, 7.0]) % 3).tolist()
    ([-1.0, 1.0], [2.0, 1.0])
    """
    b = self._operand(other, result_type(self, other)) if not isinstance(other, Tensor) else other
    r = self.remainder(b)
    if r.dtype.is_float:
        # for a >= 0 and |b|, numpy's remainder is exact and equals fmod; mirror it for a < 0
        a, mag = self.astype(r.dtype), b.astype(r.dtype).abs()
        return where(special.signbit(a), -(-a).remainder(mag), a.remainder(mag))
    return where(r.ne(0) & ((r < 0) != (self < 0)), r - b, r)


def lerp(self: Tensor, end: Any, weight: Any) -> Tensor:
    """``self + weight * (end - self)``, in PyTorch's two-sided form (exactly ``end`` at weight 1).

    ``weight`` is a scalar or a tensor (broadcast); below 0.5 the result is computed from
    ``self``, above from ``end``.

    >>> cv.Tensor([0.0, 10.0]).lerp(cv.Tensor([10.0, 20.0]), 0.25)
    Tensor([ 2.5, 12.5])
    >>> cv.Tensor([0.0, 10.0]).lerp(cv.Tensor([10.0, 20.0]), cv.Tensor([0.5, 1.0]))
    Tensor([ 5., 20.])
    """
    w = weight if isinstance(weight, Tensor) else self._operand(weight, result_type(self, end))
    gap = _tensor(self, end) - self
    return where(w.abs() < 0.5, self + w * gap, _tensor(self, end) - gap * (1 - w))


def isclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """Elementwise ``|self - other| <= atol + rtol * |other|``, as a bool tensor (PyTorch's ``isclose``).

    Equal values (infinities included) are close, a finite and an infinite value are not, nan is
    close to nan only with ``equal_nan``. Integers compare in float64. ValueError for negative
    tolerances.

    >>> a = cv.Tensor([1.0, 1e-9, float("nan"), float("inf")])
    >>> a.isclose(cv.Tensor([1.000001, 0.0, float("nan"), float("inf")]))
    Tensor([ True,  True, False,  True])
    >>> a.isclose(cv.Tensor([1.000001, 0.0, float("nan"), float("inf")]), equal_nan=True)
    Tensor([ True,  True,  True,  True])
    """
    if rtol < 0 or atol < 0:
        raise ValueError(f"isclose: rtol and atol must be non-negative, got rtol={rtol}, atol={atol}")
    common = result_type(self, other)
    a = self.astype(common if common.is_float or common.is_complex else dt.float64)
    b = a._operand(other, a.dtype)
    close = a.eq(b)
    if rtol or atol:
        err = (a - b).abs()
        close = close | (err.isfinite() & (err <= atol + rtol * b.abs()))
    return close | (a.isnan() & b.isnan()) if equal_nan else close


def allclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """Whether every element is :func:`isclose` (a Python bool; computes both tensors).

    >>> cv.Tensor([1.0, 2.0]).allclose(cv.Tensor([1.0, 2.000001]))
    True
    >>> cv.Tensor([1.0, 2.0]).allclose(cv.Tensor([1.0, 2.1]))
    False
    """
    return bool(isclose(self, other, rtol, atol, equal_nan).all().item())


def equal(self: Tensor, other: Any) -> bool:
    """Whether ``other`` has this shape and equal values (a Python bool; nan is not equal to nan).

    PyTorch's ``equal``; ``cv.equal`` is the Array API's elementwise ``==``.

    >>> cv.Tensor([1, 2]).equal(cv.Tensor([1, 2]))
    True
    >>> cv.Tensor([1, 2]).equal(cv.Tensor([[1, 2]]))
    False
    """
    other = _tensor(self, other)
    return self.shape == other.shape and bool(self.eq(other).all().item())


def masked_fill(self: Tensor, mask: Any, value: Any) -> Tensor:
    """``value`` where the bool ``mask`` is true, else ``self`` (broadcast together; ``self``'s dtype).

    ``value`` is a scalar or a 0-d tensor (which gets a gradient). TypeError for a mask that is
    not bool, ValueError for a value with dimensions.

    >>> x = cv.Tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> x.masked_fill(x > 2, 0.0)
    Tensor([[1., 2.],
            [0., 0.]])
    >>> x.masked_fill(cv.Tensor([True, False]), -1.0)
    Tensor([[-1.,  2.],
            [-1.,  4.]])
    """
    m = _tensor(self, mask)
    if not m.dtype.is_bool:
        raise TypeError(f"masked_fill: the mask must be a bool tensor, got {m.dtype.name}; compare first (x != 0)")
    if isinstance(value, Tensor) and value.ndim:
        raise ShapeError(f"masked_fill: value must be a scalar or a 0-d tensor, got shape {value.shape}")
    v = value.astype(self.dtype) if isinstance(value, Tensor) else self._operand(value, self.dtype)
    return where(m, v, self)


def xlogy(self: Tensor, other: Any) -> Tensor:
    """``self * log(other)``, 0 where ``self`` is 0 (unless ``other`` is nan), in a float dtype.

    Gradient as PyTorch's: ``log(other)`` for ``self`` (0 where ``self`` is 0 and ``other <= 0``),
    ``self / other`` for ``other``.

    >>> cv.Tensor([0.0, 0.0, 2.0]).xlogy(cv.Tensor([0.0, float("nan"), 4.0]))
    Tensor([0.       ,       nan, 2.7725887])
    """
    common = result_type(self, other)
    x = self.astype(common if common.is_float else dt.default_float)
    y = x._operand(other, x.dtype)
    # log(1) = 0 where the product must be 0 although log(other) is not finite (and no inf enters
    # the unused branch's gradient)
    safe = where(x.eq(0) & ((y <= 0) | y.isinf()), 1.0, y)
    return x * safe.log()


def fmax(self: Tensor, other: Any) -> Tensor:
    """Elementwise maximum ignoring nan (nan only where both are); at a tie the gradient goes to ``self``.

    :meth:`maximum` propagates nan instead.

    >>> cv.Tensor([1.0, float("nan"), float("nan")]).fmax(cv.Tensor([2.0, 0.0, float("nan")]))
    Tensor([ 2.,  0., nan])
    """
    a, b = _promoted(self, other)
    return where((a >= b) | b.isnan(), a, b)


def fmin(self: Tensor, other: Any) -> Tensor:
    """Elementwise minimum ignoring nan (nan only where both are); at a tie the gradient goes to ``self``.

    :meth:`minimum` propagates nan instead.

    >>> cv.Tensor([1.0, float("nan"), float("nan")]).fmin(cv.Tensor([2.0, 0.0, float("nan")]))
    Tensor([ 1.,  0., nan])
    """
    a, b = _promoted(self, other)
    return where((a <= b) | b.isnan(), a, b)


def _promoted(self: Tensor, other: Any) -> tuple[Tensor, Tensor]:
    common = result_type(self, other)
    a = self.astype(common)
    return a, a._operand(other, common)


def isposinf(self: Tensor) -> Tensor:
    """True where the value is +inf (never for integers).

    >>> cv.Tensor([1.0, float("inf"), float("-inf")]).isposinf()
    Tensor([False,  True, False])
    """
    return self.eq(math.inf) if self.dtype.is_float else self._const(False, dt.bool_)


def isneginf(self: Tensor) -> Tensor:
    """True where the value is -inf (never for integers).

    >>> cv.Tensor([1.0, float("inf"), float("-inf")]).isneginf()
    Tensor([False, False,  True])
    """
    return self.eq(-math.inf) if self.dtype.is_float else self._const(False, dt.bool_)


def positive(self: Tensor) -> Tensor:
    """``self`` itself, PyTorch's unary plus (TypeError for bool, as PyTorch).

    >>> x = cv.Tensor([1, -2])
    >>> x.positive() is x
    True
    """
    if self.dtype.is_bool:
        raise TypeError("positive is not defined for bool tensors")
    return self


def deg2rad(self: Tensor) -> Tensor:
    """Degrees to radians, elementwise (integers give float32).

    >>> cv.Tensor([0, 90, 180]).deg2rad()
    Tensor([0.       , 1.5707964, 3.1415927])
    """
    return _float(self) * (math.pi / 180)


def rad2deg(self: Tensor) -> Tensor:
    """Radians to degrees, elementwise (integers give float32).

    >>> cv.Tensor([0.0, cv.pi / 2, cv.pi]).rad2deg()
    Tensor([  0.,  90., 180.])
    """
    return _float(self) * (180 / math.pi)


def _float(x: Tensor) -> Tensor:
    return x if x.dtype.is_float or x.dtype.is_complex else x.astype(dt.default_float)


def addcmul(self: Tensor, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
    """``self + value * tensor1 * tensor2`` (broadcast), as PyTorch's ``addcmul``.

    >>> cv.Tensor([1.0, 1.0]).addcmul(cv.Tensor([2.0, 3.0]), cv.Tensor([4.0, 5.0]), value=0.5)
    Tensor([5. , 8.5])
    """
    return self + _tensor(self, tensor1) * tensor2 * value


def addcdiv(self: Tensor, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
    """``self + value * tensor1 / tensor2`` (broadcast), as PyTorch's ``addcdiv``.

    >>> cv.Tensor([1.0, 1.0]).addcdiv(cv.Tensor([2.0, 3.0]), cv.Tensor([4.0, 6.0]), value=2)
    Tensor([2., 2.])
    """
    return self + _tensor(self, tensor1) / tensor2 * value


def clamp_min(self: Tensor, min: Any) -> Tensor:  # noqa: A002  (PyTorch's name)
    """``clamp(min=min)``: values below ``min`` raised to it.

    >>> cv.Tensor([-1.0, 0.5, 2.0]).clamp_min(0.0)
    Tensor([0. , 0.5, 2. ])
    """
    return self.clip(min, None)


def clamp_max(self: Tensor, max: Any) -> Tensor:  # noqa: A002
    """``clamp(max=max)``: values above ``max`` lowered to it.

    >>> cv.Tensor([-1.0, 0.5, 2.0]).clamp_max(1.0)
    Tensor([-1. ,  0.5,  1. ])
    """
    return self.clip(None, max)


def torch_sign(self: Tensor) -> Tensor:
    """-1, 0 or 1 by sign, as PyTorch's ``sign``/``sgn``: a nan gives 0.

    ``cv.sign`` keeps nan, as numpy and the Array API do. Complex input gives ``x / |x|`` (0 at 0).

    >>> x = cv.Tensor([-2.0, 0.0, 3.0, float("nan")])
    >>> x.sign(), cv.sign(x)
    (Tensor([-1.,  0.,  1.,  0.]), Tensor([-1.,  0.,  1., nan]))
    >>> cv.Tensor([3 + 4j, 0j]).sgn()
    Tensor([0.6+0.8j, 0. +0.j ], dtype=complex64)
    """
    out = ElementwiseMixin.sign(self)
    return where(self.isnan(), 0, out) if self.dtype.is_float else out


def torch_square(self: Tensor) -> Tensor:
    """``x * x``, elementwise; a bool tensor gives int64, as PyTorch's (``cv.square`` keeps numpy's bool).

    >>> cv.Tensor([-3, 2]).square()
    Tensor([9, 4])
    >>> cv.Tensor([True, False]).square(), cv.square(cv.Tensor([True, False]))
    (Tensor([1, 0]), Tensor([ True, False]))
    """
    return ElementwiseMixin.square(self.astype(dt.int64) if self.dtype.is_bool else self)


def torch_angle(self: Tensor) -> Tensor:
    """The argument (phase) in (-pi, pi], as PyTorch's ``angle``.

    A real number gives pi below zero, nan for nan and 0 otherwise, -0.0 included (numpy's
    ``angle`` gives pi there); integers give float32.

    >>> cv.Tensor([1j, -1 + 0j]).angle()
    Tensor([1.5707964, 3.1415927])
    >>> cv.Tensor([-1.0, -0.0, 2.0, float("nan")]).angle()
    Tensor([3.1415927, 0.       , 0.       ,       nan])
    """
    if self.dtype.is_complex:
        return ElementwiseMixin.angle(self)
    x = self.astype(dt.float32) if not self.dtype.is_float else self
    return where(x < 0, math.pi, where(x.isnan(), x, 0)).astype(x.dtype)


# --- reductions ---------------------------------------------------------------------------------------
def amax(self: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    """Maximum over ``dim`` (an int or a tuple; ``()`` or None: all), the values alone (PyTorch's ``amax``).

    At ties the gradient is shared evenly (``max(dim)`` gives it to one element and also returns
    the indices).

    >>> x = cv.Tensor([[1.0, 5.0], [7.0, 2.0]])
    >>> x.amax(), x.amax(1), x.amax(dim=0, keepdim=True)
    (Tensor(7.), Tensor([5., 7.]), Tensor([[7., 5.]]))
    """
    return ReduceMixin.max(self, None if dim == () else dim, keepdim)


def amin(self: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    """Minimum over ``dim`` (an int or a tuple; ``()`` or None: all), the values alone; see :func:`amax`.

    >>> cv.Tensor([[1.0, 5.0], [7.0, 2.0]]).amin(1)
    Tensor([1., 2.])
    """
    return ReduceMixin.min(self, None if dim == () else dim, keepdim)


def aminmax(self: Tensor, *, dim: int | None = None, keepdim: bool = False) -> MinMax:
    """``(min, max)`` over ``dim`` (all elements if None), a named tuple as PyTorch's ``aminmax``.

    >>> x = cv.Tensor([[1.0, 5.0], [7.0, 2.0]])
    >>> x.aminmax()
    MinMax(min=Tensor(1.), max=Tensor(7.))
    >>> x.aminmax(dim=1).max
    Tensor([5., 7.])
    """
    return MinMax(ReduceMixin.min(self, dim, keepdim), ReduceMixin.max(self, dim, keepdim))


def nansum(self: Tensor, dim: Any = None, keepdim: bool = False, dtype: DTypeLike | None = None) -> Tensor:
    """Sum over ``dim`` with nan counted as 0 (accumulation dtypes as ``sum``).

    >>> x = cv.Tensor([[1.0, float("nan")], [3.0, 4.0]])
    >>> x.nansum(), x.nansum(1)
    (Tensor(8.), Tensor([1., 7.]))
    """
    x = where(self.isnan(), 0, self) if self.dtype.is_float else self
    return ReduceMixin.sum(x, dim, keepdim, dtype)


def nanmean(self: Tensor, dim: Any = None, keepdim: bool = False, dtype: DTypeLike | None = None) -> Tensor:
    """Mean over ``dim`` of the values that are not nan (nan where there are none).

    >>> x = cv.Tensor([[1.0, float("nan")], [3.0, 4.0]])
    >>> x.nanmean(dim=1)
    Tensor([1. , 3.5])
    """
    x = self if dtype is None else self.astype(dtype)
    x = x if x.dtype.is_float else x.astype(dt.default_float)
    count = ReduceMixin.sum(~x.isnan(), dim, keepdim, x.dtype)
    return nansum(x, dim, keepdim) / count


def count_nonzero(self: Tensor, dim: Any = None) -> Tensor:
    """The number of non-zero elements over ``dim`` (an int, a tuple, or None for all), int64.

    >>> x = cv.Tensor([[0, 1, 2], [3, 0, 0]])
    >>> x.count_nonzero(), x.count_nonzero(1)
    (Tensor(3), Tensor([2, 1]))
    """
    return ReduceMixin.sum(self.ne(0), dim, False, dt.int64)


# --- linear algebra -----------------------------------------------------------------------------------
def _ranks(name: str, *pairs: tuple[Tensor, int]) -> None:
    if any(t.ndim != n for t, n in pairs):
        want = " and ".join(f"{n}-D" for _, n in pairs)
        got = " and ".join(str(t.shape) for t, _ in pairs)
        raise ShapeError(f"{name}: expected {want} tensors, got shapes {got}")


def mm(self: Tensor, mat2: Tensor) -> Tensor:
    """The product of two matrices. ValueError unless both are 2-D with matching inner sizes.

    Unlike ``@`` (:func:`corvid.matmul`), neither vectors nor batches are accepted, as PyTorch's ``mm``.

    >>> cv.Tensor([[1.0, 2.0], [3.0, 4.0]]).mm(cv.Tensor([[1.0], [1.0]]))
    Tensor([[3.],
            [7.]])
    """
    _ranks("mm", (self, 2), (mat2, 2))
    return self @ mat2


def mv(self: Tensor, vec: Tensor) -> Tensor:
    """A matrix times a vector. ValueError unless 2-D and 1-D with matching sizes.

    >>> cv.Tensor([[1.0, 2.0], [3.0, 4.0]]).mv(cv.Tensor([1.0, 1.0]))
    Tensor([3., 7.])
    """
    _ranks("mv", (self, 2), (vec, 1))
    return self @ vec


def bmm(self: Tensor, mat2: Tensor) -> Tensor:
    """Batched matrix product of (b, n, m) and (b, m, p). ValueError for other ranks or batch sizes.

    >>> cv.ones(2, 3, 4).bmm(cv.ones(2, 4, 5)).shape
    (2, 3, 5)
    """
    _ranks("bmm", (self, 3), (mat2, 3))
    if self.shape[0] != mat2.shape[0]:
        raise ShapeError(f"bmm: batch sizes differ: {self.shape} and {mat2.shape}")
    return self @ mat2


def dot(self: Tensor, other: Tensor) -> Tensor:
    """The inner product of two vectors of equal length, a 0-d tensor.

    Complex values are not conjugated (as PyTorch's ``dot``; :func:`corvid.vecdot` conjugates
    the first). ValueError for other ranks or lengths.

    >>> cv.Tensor([1.0, 2.0, 3.0]).dot(cv.Tensor([4.0, 5.0, 6.0]))
    Tensor(32.)
    """
    _ranks("dot", (self, 1), (other, 1))
    return self @ other


def outer(self: Tensor, vec2: Tensor) -> Tensor:
    """The outer product of two vectors, shape (n, m). ValueError for other ranks.

    >>> cv.Tensor([1, 2]).outer(cv.Tensor([1, 10, 100]))
    Tensor([[  1,  10, 100],
            [  2,  20, 200]])
    """
    _ranks("outer", (self, 1), (vec2, 1))
    return self[:, None] * vec2[None, :]


def cross(self: Tensor, other: Tensor, dim: int | None = None) -> Tensor:
    """The cross product of 3-vectors along ``dim`` of the broadcast operands.

    Without ``dim``, along the first dimension of size 3 (PyTorch's ``Tensor.cross``;
    ``cv.linalg.cross`` uses the last). ValueError when there is none.

    >>> cv.Tensor([1.0, 0.0, 0.0]).cross(cv.Tensor([0.0, 1.0, 0.0]))
    Tensor([0., 0., 1.])
    >>> a = cv.Tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])  # two vectors, as columns
    >>> a.cross(cv.Tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])).tolist()
    [[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]]
    """
    if dim is None:
        shape = broadcast_shapes(self.shape, other.shape)
        if 3 not in shape:
            raise ShapeError(f"cross: no dimension of size 3 in shapes {self.shape} and {other.shape}")
        dim = shape.index(3)
    return _linalg_cross(self, other, axis=dim)


def kron(self: Tensor, other: Tensor) -> Tensor:
    """The Kronecker product: block ``i`` of the result is ``self[i] * other``, shape the product of
    the two shapes (the shorter padded with leading ones). One broadcast multiply and a reshape.

    >>> import corvid as cv
    >>> cv.Tensor([1, 10]).kron(cv.Tensor([1, 2, 3])).tolist()
    [1, 2, 3, 10, 20, 30]
    """
    nd = max(self.ndim, other.ndim)
    a = self.reshape((1,) * (nd - self.ndim) + self.shape)
    b = other.reshape((1,) * (nd - other.ndim) + other.shape)
    spread_a = tuple(v for s in a.shape for v in (s, 1))
    spread_b = tuple(v for s in b.shape for v in (1, s))
    return (a.reshape(spread_a) * b.reshape(spread_b)).reshape(tuple(s * t for s, t in zip(a.shape, b.shape)))


def addmm(self: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    """``beta * self + alpha * (mat1 @ mat2)``; with ``beta=0`` ``self`` is ignored (its nans too).

    ``mat1`` and ``mat2`` are matrices, as in :func:`mm`; ``self`` broadcasts to the product.

    >>> cv.ones(2, 2).addmm(cv.Tensor([[1.0, 2.0], [3.0, 4.0]]), cv.eye(2), beta=0.5, alpha=2)
    Tensor([[2.5, 4.5],
            [6.5, 8.5]])
    """
    product = mm(mat1, mat2)
    product = product if alpha == 1 else product * alpha
    if beta == 0:
        return product.broadcast_to(broadcast_shapes(self.shape, product.shape))
    return (self if beta == 1 else self * beta) + product


def diag(self: Tensor, diagonal: int = 0) -> Tensor:
    """A 1-D tensor placed on diagonal ``diagonal`` of a square matrix, or that diagonal of a matrix.

    >>> cv.Tensor([1, 2]).diag(1)
    Tensor([[0, 1, 0],
            [0, 0, 2],
            [0, 0, 0]])
    >>> cv.Tensor([[1, 2], [3, 4]]).diag()
    Tensor([1, 4])
    """
    return manipulation.diag(self, diagonal)

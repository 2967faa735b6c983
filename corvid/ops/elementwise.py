"""Elementwise ops: Python operators, math functions, activations, comparisons, logic.

All broadcast like numpy and promote with the Array API rules (Python scalars are weak). Math
functions on integer or bool tensors compute in the default float dtype (float32).

Complex tensors (complex64, complex128) support arithmetic, ``==``/``!=``, ``abs`` (a real result),
``sign`` (``z/|z|``, 0 at 0), the exp/log/power/trigonometric/hyperbolic functions (C99 ``<complex.h>``
on the CPU), ``real``, ``imag``, ``conj``, ``angle`` and ``isnan``/``isinf``/``isfinite`` (either
part). Ordering ops (``<``, ``maximum``, ``clip``, floor division, rounding to integers, ``erf``,
``atan2``, bitwise ops) raise TypeError, as the Array API says. ``exp2``, ``log2``, ``log10``,
``log1p`` and ``expm1`` of a complex value are composed from ``exp``/``log`` (no extra accuracy
near 0 for ``log1p``/``expm1``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ArgumentError
from .. import dtype as dt
from ..engine.replay import replayed
from ..graph.node import Op, node

if TYPE_CHECKING:
    from ..tensor import Tensor


def _as_float(x: Tensor) -> Tensor:
    return x if x.dtype.is_float or x.dtype.is_complex else x.astype(dt.default_float)


def _check_kind(name: str, x: Tensor, *allowed: str) -> None:
    kind = "float" if x.dtype.is_float else "bool" if x.dtype.is_bool else "complex" if x.dtype.is_complex else "int"
    if kind not in allowed:
        raise TypeError(f"{name} is not supported for {x.dtype.name} tensors (needs {' or '.join(allowed)})")


def _round_int(x: Tensor, digits: int) -> Tensor:
    """Integer ``x`` rounded to a multiple of ``10**digits`` (``digits > 0``), half to even, in
    int64 (uint64 for uint64), cast back with wrap-around."""
    f = 10 ** digits
    if f > 2 * int(np.iinfo(x.dtype.np).max) + 1:  # every value is under half a step: all round to 0
        return x._const(0, x.dtype).broadcast_to(x.shape)
    wide = dt.uint64 if x.dtype is dt.uint64 else dt.int64
    w = x.astype(wide)
    q = w // f
    r = w - q * f  # in [0, f): floor division
    up = (r > f // 2) | ((r == f // 2) & ((q % 2) != 0))
    return ((q + up.astype(wide)) * f).astype(x.dtype)


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """``a`` where ``cond`` is true, else ``b`` (broadcast; ``a`` and ``b`` promoted together)."""
    from ..tensor import Tensor, broadcast_shapes, result_type

    if type(cond) is Tensor and type(a) is Tensor and type(b) is Tensor:  # the common case, built directly
        cn, an, bn = cond.node, a.node, b.node
        if cn.dtype is dt.bool_ and an.dtype is bn.dtype and cn.shape == an.shape == bn.shape and \
                cond.device == a.device == b.device:
            return cond._new(node(Op.WHERE, (cn, an, bn), None, an.dtype, an.shape))
    anchor = next((x for x in (cond, a, b) if isinstance(x, Tensor)), None)
    if anchor is None:
        anchor = Tensor(cond)
    c = cond if isinstance(cond, Tensor) else Tensor(cond, device=anchor.device)
    common = result_type(a, b)
    shape = broadcast_shapes(c.shape, *(x.shape if isinstance(x, Tensor) else () for x in (a, b)))
    srcs = (c.astype(dt.bool_).broadcast_to(shape).node,
            anchor._operand(a, common).broadcast_to(shape).node, anchor._operand(b, common).broadcast_to(shape).node)
    return anchor._new(node(Op.WHERE, srcs, None, common, shape))


def _real_only(name: str, x: Tensor) -> Tensor:
    """``x``, or TypeError if it is complex (the op needs ordered values)."""
    if x.dtype.is_complex:
        raise TypeError(f"{name} is not defined for complex tensors ({x.dtype.name})")
    return x


def make_complex(re: Any, im: Any) -> Tensor:
    """``re + 1j*im`` as a complex tensor (the parts exactly, also when they are inf or nan).

    ``re`` and ``im`` are real tensors or scalars; they broadcast and promote together, integers
    and bools to float32. float64 parts give complex128, other floats complex64; complex parts
    raise TypeError. Exported as ``cv.complex``.

    >>> import corvid as cv
    >>> cv.complex(cv.Tensor([1.0]), 2.0).numpy()
    array([1.+2.j], dtype=complex64)
    """
    from ..tensor import Tensor, result_type

    anchor = re if isinstance(re, Tensor) else im if isinstance(im, Tensor) else Tensor(re)
    common = result_type(re, im)
    if common.is_complex:
        raise TypeError(f"complex(re, im) needs real parts, got {common.name}")
    part = dt.float64 if common is dt.float64 else dt.float32
    return anchor._operand(re, part)._elementwise(Op.COMPLEX, im, dtype=part, out=dt.complex128 if part is dt.float64 else dt.complex64)


class ElementwiseMixin:
    __slots__ = ()

    # --- unary builders ----------------------------------------------------------------------------
    def _unary(self: Tensor, op: Op) -> Tensor:
        return self._new(node(op, (self.node,), None, self.dtype, self.shape))

    def _float_unary(self: Tensor, op: Op) -> Tensor:
        return _as_float(self)._unary(op)

    # --- arithmetic operators ----------------------------------------------------------------------
    def add(self: Tensor, other: Any) -> Tensor:
        out = self._elementwise(Op.ADD, other, name="add")
        return out if not out.dtype.is_bool else self._elementwise(Op.OR, other)

    def sub(self: Tensor, other: Any) -> Tensor:
        out = self._elementwise(Op.SUB, other, name="subtract")
        if out.dtype.is_bool:
            raise TypeError("subtracting bool tensors is not supported; use logical_xor or ^")
        return out

    def mul(self: Tensor, other: Any) -> Tensor:
        """``self * other``, elementwise (broadcast, promoted); two bool operands give their logical and.

        ``multiply`` is the same method.

        >>> cv.Tensor([1.0, 2.0]).mul(cv.Tensor([3.0, 4.0]))
        Tensor([3., 8.])
        >>> cv.Tensor([1, 2]).mul(1.5)
        Tensor([1.5, 3. ])
        """
        out = self._elementwise(Op.MUL, other, name="multiply")
        return out if not out.dtype.is_bool else self._elementwise(Op.AND, other)

    def div(self: Tensor, other: Any, rounding_mode: str | None = None) -> Tensor:
        """True division; integer inputs give the default float dtype.

        ``rounding_mode`` (PyTorch's): ``"floor"`` rounds the quotient toward -inf (as
        :meth:`floor_divide`), ``"trunc"`` toward zero; both keep the promoted dtype, so integers
        give integers (bools int8, as ``floor_divide``). Integer division by zero gives 0 there
        (PyTorch raises, but the divisor is only known when the kernel runs). Their derivative is
        0. ArgumentError for another mode, TypeError for complex operands.

        >>> cv.Tensor([7, -7]).div(2, rounding_mode="trunc").tolist()
        [3, -3]
        """
        from ..tensor import result_type

        common = result_type(self, other)
        if rounding_mode is None:
            return self._elementwise(Op.DIV, other, dtype=common if common.is_float or common.is_complex
                                     else dt.default_float)
        if rounding_mode == "floor":
            return _torch_floor(self, other, self.floor_divide(other))
        if rounding_mode != "trunc":
            raise ArgumentError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
        if common.is_complex:
            raise TypeError(f"div: rounding_mode='trunc' is not defined for complex operands ({common.name})")
        if common.is_float:
            return self.div(other).trunc()  # (PyTorch's definition: the rounded quotient, truncated)
        floor = self.floor_divide(other)
        if not common.is_int or common.is_unsigned:
            return floor
        # the floor is one below the truncation where the exact quotient is negative and not whole:
        # a non-zero remainder (which has the divisor's sign) whose sign differs from the dividend's
        rem = self.remainder(other)
        return where(rem.ne(0) & ((self < 0) ^ (rem < 0)), floor + 1, floor)

    def floor_divide(self: Tensor, other: Any) -> Tensor:
        """Floor division ``self // other``: the quotient rounded toward -inf.

        As numpy's (integer division by zero gives 0), except with an infinite operand, where the
        quotient is the Array API's: ``inf // 2`` is inf and ``-3 // inf`` is -0.0 (numpy and
        PyTorch give nan and -1, as :meth:`div` with ``rounding_mode="floor"`` does). bool operands
        give int8; TypeError for complex.

        >>> cv.Tensor([7, -7]).floor_divide(2)
        Tensor([ 3, -4])
        >>> cv.Tensor([7, -7]).floor_divide(0)
        Tensor([0, 0])
        """
        from ..tensor import result_type

        if result_type(self, other).is_bool:
            return self._elementwise(Op.IDIV, other, dtype=dt.int8)
        return _real_only("floor_divide", self._elementwise(Op.IDIV, other, name="floor_divide"))

    def remainder(self: Tensor, other: Any) -> Tensor:
        """Remainder with the sign of the divisor (numpy/Python ``%``); bool operands give int8.

        C's ``fmod``, which takes the dividend's sign, is :meth:`fmod`.

        >>> cv.Tensor([7, -7]).remainder(3)
        Tensor([1, 2])
        >>> cv.Tensor([7, -7]).remainder(-3)
        Tensor([-2, -1])
        """
        from ..tensor import result_type

        if result_type(self, other).is_bool:
            return self._elementwise(Op.MOD, other, dtype=dt.int8)
        return _real_only("remainder", self._elementwise(Op.MOD, other, name="remainder"))

    def pow(self: Tensor, other: Any) -> Tensor:
        """``self ** other``. Integer powers use exact integer math. bool operands give int8.

        An integer power with a negative exponent known when the op is built (a Python or numpy
        integer, or a list or array holding one) raises :class:`ArgumentError` (a ValueError, as
        numpy's, and a RuntimeError, as PyTorch's). In a tensor exponent a negative value is only
        known when the kernel runs: it gives 0 (1 for base 1, 1 or -1 by parity for base -1), what
        truncating ``1 / base**-e`` gives, as PyTorch's integer pow does.

        >>> (cv.Tensor([2, 1, -1]) ** cv.Tensor([-1, -1, -1])).tolist()
        [0, 1, -1]
        """
        from ..tensor import _fits, result_type

        common = result_type(self, other)
        if common.is_bool:
            return self._elementwise(Op.POW, other, dtype=dt.int8)
        if common.is_int:
            if isinstance(other, (int, np.integer)) and not isinstance(other, bool):
                negative = other < 0 and _fits(int(other), common)  # (else the operand's OverflowError)
            else:
                negative = isinstance(other, (list, tuple, np.ndarray)) and bool((np.asarray(other) < 0).any())
            if negative:
                raise ArgumentError(f"power: Integers to negative integer powers are not allowed ({self.dtype.name} "
                                    f"tensor ** {other!r}); use a float base (x.astype(float32) ** {other!r})")
        return self._elementwise(Op.POW, other, name="power")

    def rsub(self: Tensor, other: Any) -> Tensor:
        """``other - self`` (PyTorch's ``rsub``, without its ``alpha``).

        >>> cv.Tensor([1, 2]).rsub(10)
        Tensor([9, 8])
        """
        return self._operand_like(other).sub(self)

    def _operand_like(self: Tensor, other: Any) -> Tensor:
        from ..tensor import Tensor, _fits, _weak_result, result_type

        if isinstance(other, Tensor):
            return other
        kind = type(other)
        if kind is float or kind is int or kind is bool:  # (a Python scalar: its weak dtype, looked up)
            common = _weak_result(self.dtype, kind)
            if kind is int and common.is_int and not _fits(other, common):
                raise OverflowError(f"Python integer {other} is out of bounds for {common.name}")
            return self._const(other, common, ())
        return self._operand(other, result_type(self, other) if not isinstance(other, (list, tuple)) else
                             Tensor(other).dtype, ())

    __add__ = add
    __sub__ = sub
    __mul__ = mul
    __truediv__ = div
    __floordiv__ = floor_divide
    __mod__ = remainder
    __pow__ = pow

    def __radd__(self, other): return self._operand_like(other).add(self)  # noqa: E704
    def __rsub__(self, other): return self._operand_like(other).sub(self)  # noqa: E704
    def __rmul__(self, other): return self._operand_like(other).mul(self)  # noqa: E704
    def __rtruediv__(self, other): return self._operand_like(other).div(self)  # noqa: E704
    def __rfloordiv__(self, other): return self._operand_like(other).floor_divide(self)  # noqa: E704
    def __rmod__(self, other): return self._operand_like(other).remainder(self)  # noqa: E704
    def __rpow__(self, other): return self._operand_like(other).pow(self)  # noqa: E704

    def neg(self: Tensor) -> Tensor:
        """``-self``, elementwise.

        ``negative`` is the same method. TypeError for bool tensors (``~`` is their logical not).

        >>> cv.Tensor([1, -2]).neg()
        Tensor([-1,  2])
        """
        if self.dtype.is_bool:
            raise TypeError("negating a bool tensor is not supported; use ~ or logical_not")
        return self._unary(Op.NEG)

    __neg__ = neg

    def __pos__(self: Tensor) -> Tensor:
        return self

    def abs(self: Tensor) -> Tensor:
        """Absolute value; for complex input the modulus ``|z|`` (overflow-safe, as ``hypot``) in the real dtype.

        ``absolute`` is the same method. Signed integers wrap at their minimum, as in C and numpy
        (``int8`` -128 stays -128).

        >>> cv.Tensor([-2, 3]).abs()
        Tensor([2, 3])
        >>> cv.Tensor([3 + 4j]).abs()
        Tensor([5.])
        """
        if self.dtype.is_complex:
            return self._new(node(Op.ABS, (self.node,), None, self.dtype.real_dtype, self.shape))
        return self if self.dtype.is_bool or self.dtype.is_unsigned else self._unary(Op.ABS)

    __abs__ = abs

    def square(self: Tensor) -> Tensor:
        return self * self

    def sign(self: Tensor) -> Tensor:
        """-1, 0 or 1 by sign (nan stays nan, -0.0 gives 0.0 as in numpy); ``z/|z|`` for complex (0 at 0)."""
        if self.dtype.is_bool:
            return self
        if self.dtype.is_complex:
            mag = self.abs()
            return where(mag.eq(0), self._const(0), self / mag.astype(self.dtype))
        zero = self._const(0)
        rest = where(self.eq(zero), zero, self) if self.dtype.is_float else zero
        return where(self > zero, self._const(1), where(self < zero, self._const(-1), rest))

    # --- comparisons -------------------------------------------------------------------------------
    def __lt__(self: Tensor, other: Any) -> Tensor:
        """``self < other``, elementwise (broadcast), as a bool tensor; false where a value is nan.

        ``lt`` is the same method. TypeError for complex values, which are not ordered.

        >>> cv.Tensor([1.0, 2.0, float("nan")]).lt(2.0)
        Tensor([ True, False, False])
        """
        return _ordered(self._elementwise(Op.CMPLT, other))

    def __gt__(self: Tensor, other: Any) -> Tensor:
        """``self > other``, elementwise (broadcast), as a bool tensor; false where a value is nan.

        ``gt`` is the same method. TypeError for complex values, which are not ordered.

        >>> cv.Tensor([1, 2, 3]).gt(2)
        Tensor([False, False,  True])
        """
        kind = type(other)
        if kind is int or kind is float or kind is bool:  # a Python scalar that keeps self's dtype: the
            from ..tensor import _fits, _int_out_of_range, _scalar_operand, _weak_result  # general path's graph

            sn = self.node
            common = _weak_result(sn.dtype, kind)
            if kind is int and common.is_int and not _fits(other, common):
                return _int_out_of_range(self, Op.CMPLT, other, common, sn.shape, first=False)
            if common is sn.dtype:
                return _ordered(self._new(node(Op.CMPLT, (_scalar_operand(other, common, sn.shape), sn), None,
                                               dt.bool_, sn.shape)))
        return _ordered(self._operand_like(other)._elementwise(Op.CMPLT, self))

    def __le__(self: Tensor, other: Any) -> Tensor:
        """``self <= other``, elementwise (broadcast), as a bool tensor; false where a value is nan.

        ``le`` is the same method. TypeError for complex values, which are not ordered.

        >>> cv.Tensor([1, 2, 3]).le(2)
        Tensor([ True,  True, False])
        """
        return (self < other) | self.eq(other)

    def __ge__(self: Tensor, other: Any) -> Tensor:
        """``self >= other``, elementwise (broadcast), as a bool tensor; false where a value is nan.

        ``ge`` is the same method. TypeError for complex values, which are not ordered.

        >>> cv.Tensor([1, 2, 3]).ge(2)
        Tensor([False,  True,  True])
        """
        return (self > other) | self.eq(other)

    def eq(self: Tensor, other: Any) -> Tensor:
        """``self == other``, elementwise (broadcast), as a bool tensor; nan equals nothing, itself included.

        >>> cv.Tensor([1, 2, 3]).eq(cv.Tensor([1, 0, 3]))
        Tensor([ True, False,  True])
        >>> cv.Tensor([float("nan")]).eq(float("nan"))
        Tensor([False])
        """
        return self._elementwise(Op.CMPEQ, other)

    def ne(self: Tensor, other: Any) -> Tensor:
        """``self != other``, elementwise (broadcast), as a bool tensor; true where a value is nan.

        >>> cv.Tensor([1.0, 2.0, float("nan")]).ne(2.0)
        Tensor([ True, False,  True])
        """
        return self._elementwise(Op.CMPNE, other)

    __eq__ = eq  # type: ignore[assignment]
    __ne__ = ne  # type: ignore[assignment]

    def maximum(self: Tensor, other: Any) -> Tensor:
        """Elementwise maximum (broadcast, promoted); nan wins (numpy semantics; :meth:`fmax` ignores nan).

        TypeError for complex values.

        >>> cv.Tensor([1.0, 5.0, float("nan")]).maximum(cv.Tensor([3.0, 2.0, 0.0]))
        Tensor([ 3.,  5., nan])
        """
        return _real_only("maximum", self._elementwise(Op.MAX, other))

    def minimum(self: Tensor, other: Any) -> Tensor:
        """Elementwise minimum (broadcast, promoted); nan wins (numpy semantics; :meth:`fmin` ignores nan).

        TypeError for complex values.

        >>> cv.Tensor([1.0, 5.0, float("nan")]).minimum(cv.Tensor([3.0, 2.0, 0.0]))
        Tensor([ 1.,  2., nan])
        """
        return _real_only("minimum", self._elementwise(Op.MIN, other))

    def clip(self: Tensor, min: Any = None, max: Any = None) -> Tensor:
        """Limit values to ``[min, max]`` (either may be None; tensor bounds broadcast).

        Values as numpy's ``clip`` (nan in ``self`` or in a bound gives nan; ``min > max`` gives
        ``max``). Derivative as ``torch.clamp``: 1 where ``min <= x <= max``, bounds included
        (``maximum`` alone would split a tie in half), else 0 for ``x`` and 1 for the bound that
        is returned.

        >>> x = cv.Tensor([-1.0, 0.0, 2.0], requires_grad=True)
        >>> x.clip(0.0, 1.0).sum().backward(); x.grad.tolist()
        [0.0, 1.0, 0.0]

        As PyTorch's ``Tensor.clip`` (its ``clamp``), :class:`ArgumentError` when both bounds are
        None; ``cv.clip(x)`` returns ``x`` then, as numpy and the Array API do.
        """
        if min is None and max is None:
            raise ArgumentError("clip: At least one of 'min' or 'max' must not be None "
                                "(cv.clip(x) returns x unchanged, as numpy's clip does)")
        if self.dtype.is_int:  # a Python int bound beyond the dtype's range clips nothing there (numpy 2)
            info = dt.iinfo(self.dtype)
            if type(min) is int and min < info.min:
                min = None
            if type(max) is int and max > info.max:
                max = None
        out, inside = self, None
        if min is not None:
            out, inside = out.maximum(min), self >= min
        if max is not None:
            out = out.minimum(max)
            inside = self <= max if inside is None else inside & (self <= max)
        return out if inside is None else where(inside, self, out)

    def clamp(self: Tensor, min: Any = None, max: Any = None) -> Tensor:
        """PyTorch's ``clamp``: :meth:`clip` (:class:`ArgumentError` when both bounds are None).

        >>> cv.Tensor([-1.0, 2.0]).clamp(min=0.0).tolist()
        [0.0, 2.0]
        """
        if min is None and max is None:
            raise ArgumentError("clamp: At least one of 'min' or 'max' must not be None "
                                "(cv.clip(x) returns x unchanged, as numpy's clip does)")
        return self.clip(min, max)

    def where(self: Tensor, condition: Any, other: Any) -> Tensor:
        """This tensor where ``condition`` is true, else ``other`` (broadcast, promoted together):
        PyTorch's ``x.where(condition, y)``, which is ``cv.where(condition, x, y)``.

        >>> cv.Tensor([1, 2, 3]).where(cv.Tensor([True, False, True]), 0)
        Tensor([1, 0, 3])
        """
        return where(condition, self, other)

    # --- logic and bits ----------------------------------------------------------------------------
    def _bitwise(self: Tensor, op: Op, other: Any, name: str) -> Tensor:
        out = self._elementwise(op, _bit_pattern(self, other), name=name)
        _check_kind(name, out, "int", "bool")
        return out

    def __and__(self, other): return self._bitwise(Op.AND, other, "bitwise_and")  # noqa: E704
    def __or__(self, other): return self._bitwise(Op.OR, other, "bitwise_or")  # noqa: E704
    def __xor__(self, other): return self._bitwise(Op.XOR, other, "bitwise_xor")  # noqa: E704

    # and, or and xor commute: the reflected forms are the same ops
    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__
    bitwise_and, bitwise_or, bitwise_xor = __and__, __or__, __xor__

    def __lshift__(self, other): return self._shift(Op.SHL, other)  # noqa: E704
    def __rshift__(self, other): return self._shift(Op.SHR, other)  # noqa: E704
    def __rlshift__(self, other): return self._operand_like(other)._shift(Op.SHL, self)  # noqa: E704
    def __rrshift__(self, other): return self._operand_like(other)._shift(Op.SHR, self)  # noqa: E704

    def _shift(self: Tensor, op: Op, other: Any) -> Tensor:
        out = self._elementwise(op, other, name="shift")
        _check_kind("bit shifts", out, "int")
        return out

    bitwise_left_shift, bitwise_right_shift = __lshift__, __rshift__

    def bitwise_not(self: Tensor) -> Tensor:
        """``~x``: logical not for bools, all bits flipped for integers.

        ``bitwise_invert`` in the Array API (:func:`corvid.bitwise_invert`). TypeError for floats.

        >>> cv.Tensor([0, 5], dtype=cv.int8).bitwise_not()
        Tensor([-1, -6], dtype=int8)
        >>> cv.Tensor([True, False]).bitwise_not()
        Tensor([False,  True])
        """
        _check_kind("bitwise_not", self, "int", "bool")
        return self._elementwise(Op.XOR, True if self.dtype.is_bool else -1 if not self.dtype.is_unsigned
                                 else dt.iinfo(self.dtype).max)

    __invert__ = bitwise_not

    def logical_not(self: Tensor) -> Tensor:
        """True where this tensor is false (zero), for any dtype; nan counts as true, so gives false.

        >>> cv.Tensor([0.0, 2.0, float("nan")]).logical_not()
        Tensor([ True, False, False])
        """
        return self.astype(dt.bool_)._elementwise(Op.XOR, True)

    def logical_and(self: Tensor, other: Any) -> Tensor:
        """True where both operands are true (non-zero), for any dtypes (broadcast); a bool tensor.

        >>> cv.Tensor([0, 1, 2]).logical_and(cv.Tensor([1, 1, 0]))
        Tensor([False,  True, False])
        """
        return self.astype(dt.bool_)._elementwise(Op.AND, _to_bool(self, other))

    def logical_or(self: Tensor, other: Any) -> Tensor:
        """True where either operand is true (non-zero), for any dtypes (broadcast); a bool tensor.

        >>> cv.Tensor([0, 1, 2]).logical_or(cv.Tensor([0, 0, 1]))
        Tensor([False,  True,  True])
        """
        return self.astype(dt.bool_)._elementwise(Op.OR, _to_bool(self, other))

    def logical_xor(self: Tensor, other: Any) -> Tensor:
        """True where exactly one operand is true (non-zero), for any dtypes (broadcast); a bool tensor.

        >>> cv.Tensor([0, 1, 2]).logical_xor(cv.Tensor([1, 1, 0]))
        Tensor([ True, False,  True])
        """
        return self.astype(dt.bool_)._elementwise(Op.XOR, _to_bool(self, other))

    # --- float math --------------------------------------------------------------------------------
    def exp(self): return self._float_unary(Op.EXP)  # noqa: E704
    def log(self): return self._float_unary(Op.LOG)  # noqa: E704

    def exp2(self: Tensor) -> Tensor:
        return (self * math.log(2)).exp() if self.dtype.is_complex else self._float_unary(Op.EXP2)

    def expm1(self: Tensor) -> Tensor:
        return self.exp() - 1 if self.dtype.is_complex else self._float_unary(Op.EXPM1)

    def log2(self: Tensor) -> Tensor:
        return self.log() * (1 / math.log(2)) if self.dtype.is_complex else self._float_unary(Op.LOG2)

    def log1p(self: Tensor) -> Tensor:
        return (self + 1).log() if self.dtype.is_complex else self._float_unary(Op.LOG1P)

    def sqrt(self): return self._float_unary(Op.SQRT)  # noqa: E704
    def reciprocal(self): return self._float_unary(Op.RECIP)  # noqa: E704
    def sin(self): return self._float_unary(Op.SIN)  # noqa: E704
    def cos(self): return self._float_unary(Op.COS)  # noqa: E704
    def tan(self): return self._float_unary(Op.TAN)  # noqa: E704
    def asin(self): return self._float_unary(Op.ASIN)  # noqa: E704
    def acos(self): return self._float_unary(Op.ACOS)  # noqa: E704
    def atan(self): return self._float_unary(Op.ATAN)  # noqa: E704
    def sinh(self): return self._float_unary(Op.SINH)  # noqa: E704
    def cosh(self): return self._float_unary(Op.COSH)  # noqa: E704
    def tanh(self): return self._float_unary(Op.TANH)  # noqa: E704
    def asinh(self): return self._float_unary(Op.ASINH)  # noqa: E704
    def acosh(self): return self._float_unary(Op.ACOSH)  # noqa: E704
    def atanh(self): return self._float_unary(Op.ATANH)  # noqa: E704
    def erf(self): return _real_only("erf", self)._float_unary(Op.ERF)  # noqa: E704

    def log10(self: Tensor) -> Tensor:
        return self.log2() * (1 / math.log2(10))

    def rsqrt(self: Tensor) -> Tensor:
        return self.sqrt().reciprocal()

    def atan2(self: Tensor, other: Any) -> Tensor:
        """Angle of the point (other, self): ``atan2(y=self, x=other)``, in [-pi, pi].

        The quadrant follows both signs, signed zeros included (IEEE); integers give float32,
        complex values raise TypeError.

        >>> cv.Tensor([1.0, 1.0, -1.0]).atan2(cv.Tensor([1.0, -1.0, -1.0]))
        Tensor([ 0.7853982,  2.3561945, -2.3561945])
        >>> cv.Tensor([0.0, -0.0]).atan2(-1.0)
        Tensor([ 3.1415927, -3.1415927])
        """
        from ..tensor import result_type

        common = result_type(self, other)
        if common.is_complex:
            raise TypeError(f"atan2 is not defined for complex tensors ({common.name})")
        return self._elementwise(Op.ATAN2, other, dtype=common if common.is_float else dt.default_float)

    def _rounding(self: Tensor, op: Op) -> Tensor:
        return self if not _real_only(op.name.lower(), self).dtype.is_float else self._unary(op)

    def floor(self): return self._rounding(Op.FLOOR)  # noqa: E704
    def ceil(self): return self._rounding(Op.CEIL)  # noqa: E704
    def trunc(self): return self._rounding(Op.TRUNC)  # noqa: E704

    def round(self: Tensor, decimals: int = 0) -> Tensor:
        """Round half to even (numpy semantics), optionally to ``decimals`` places; complex rounds both parts.

        With ``decimals`` a float value is scaled by ``10**decimals``, rounded and scaled back, as
        numpy and PyTorch do. Integers are unchanged unless ``decimals`` is negative: then they
        round to a multiple of ``10**-decimals``, half to even, in exact integer arithmetic (numpy
        goes through float64, which loses the low digits of large int64 values), wrapping on
        overflow as numpy's int8 ``127 -> -126`` does. Bool tensors are returned unchanged.

        >>> cv.Tensor([0.5, 1.5, 2.5, -0.5]).round()
        Tensor([ 0.,  2.,  2., -0.])
        >>> cv.Tensor([1.2345, 2.5]).round(decimals=2)
        Tensor([1.23, 2.5 ])
        >>> cv.Tensor([1250, 1350, -1251, 15]).round(decimals=-2)
        Tensor([ 1200,  1400, -1300,     0])
        """
        if self.dtype.is_complex:
            return make_complex(self.real.round(decimals), self.imag.round(decimals))
        if not self.dtype.is_float:
            return self if self.dtype.is_bool or decimals >= 0 else _round_int(self, -decimals)
        if decimals == 0:
            return self._unary(Op.ROUND)
        scale = 10.0 ** decimals
        return (self * scale)._unary(Op.ROUND) / scale

    def isnan(self: Tensor) -> Tensor:
        """True where the value is nan (for complex: where either part is); false for integers.

        >>> cv.Tensor([1.0, float("nan"), float("inf")]).isnan()
        Tensor([False,  True, False])
        """
        if self.dtype.is_complex:
            return self.real.isnan() | self.imag.isnan()
        return self.ne(self) if self.dtype.is_float else self._const(False, dt.bool_)

    def isinf(self: Tensor) -> Tensor:
        """True where the value is ±inf (for complex: where either part is); false for integers.

        >>> cv.Tensor([1.0, float("nan"), float("-inf")]).isinf()
        Tensor([False, False,  True])
        """
        if self.dtype.is_complex:
            return self.real.isinf() | self.imag.isinf()
        return self.abs().eq(math.inf) if self.dtype.is_float else self._const(False, dt.bool_)

    def isfinite(self: Tensor) -> Tensor:
        """True where the value is neither inf nor nan (for complex: where both parts are); true for integers.

        >>> cv.Tensor([1.0, float("nan"), float("-inf")]).isfinite()
        Tensor([ True, False, False])
        """
        if self.dtype.is_complex:
            return self.real.isfinite() & self.imag.isfinite()
        return self.abs() < math.inf if self.dtype.is_float else self._const(True, dt.bool_)

    # --- complex parts -----------------------------------------------------------------------------
    @property
    def real(self: Tensor) -> Tensor:
        """The real part (float32 for complex64, float64 for complex128); a real tensor itself.

        >>> cv.Tensor([1 + 2j, 3 - 4j]).real
        Tensor([1., 3.])
        """
        if not self.dtype.is_complex:
            return self
        return self._new(node(Op.REAL, (self.node,), None, self.dtype.real_dtype, self.shape))

    @property
    def imag(self: Tensor) -> Tensor:
        """The imaginary part (float32 for complex64, float64 for complex128); zeros for a real tensor.

        >>> cv.Tensor([1 + 2j, 3 - 4j]).imag
        Tensor([ 2., -4.])
        >>> cv.Tensor([1.0, 2.0]).imag
        Tensor([0., 0.])
        """
        if not self.dtype.is_complex:
            return self._const(0)
        return self._new(node(Op.IMAG, (self.node,), None, self.dtype.real_dtype, self.shape))

    def conj(self: Tensor) -> Tensor:
        """The complex conjugate; a real tensor itself.

        >>> cv.Tensor([1 + 2j, 3 - 4j]).conj()
        Tensor([1.-2.j, 3.+4.j], dtype=complex64)
        """
        return self._unary(Op.CONJ) if self.dtype.is_complex else self

    def angle(self: Tensor) -> Tensor:
        """The argument ``atan2(imag, real)`` in (-pi, pi]; real input gives 0 or pi (float32 for ints)."""
        x = _as_float(self)
        return x.imag.atan2(x.real)

    # --- activations -------------------------------------------------------------------------------
    def relu(self: Tensor) -> Tensor:
        """``max(x, 0)`` with derivative 0 at 0, as torch (``maximum(x, 0)`` would split the tie
        and give 0.5 there). nan stays nan.

        >>> x = cv.Tensor([-1.0, 0.0, 1.0], requires_grad=True)
        >>> x.relu().sum().backward(); x.grad.tolist()
        [0.0, 0.0, 1.0]
        """
        return where(self <= 0, 0, self)

    @replayed
    def sigmoid(self: Tensor) -> Tensor:
        """The logistic function ``1 / (1 + exp(-x))``, elementwise; integers compute in float32.

        Computed from ``e = exp(-|x|)`` (which never overflows): ``1/(1+e)`` for x >= 0,
        ``e/(1+e)`` below, so tiny results keep their relative precision and the gradient is
        finite everywhere (the naive form's is 0 * inf = nan at x = -100 in float32).

        >>> cv.Tensor([-100.0, 0.0, 2.0]).sigmoid()
        Tensor([3.78351e-44, 5.00000e-01, 8.80797e-01])
        """
        return _activation_rule("sigmoid")(_as_float(self))

    @replayed
    def silu(self: Tensor) -> Tensor:
        """SiLU (swish), ``x * sigmoid(x)``, elementwise; integers compute in float32.

        >>> cv.Tensor([-1.0, 0.0, 2.0]).silu()
        Tensor([-0.26894143,  0.        ,  1.761594  ])
        """
        return _activation_rule("silu")(_as_float(self))

    @replayed
    def gelu(self: Tensor, approximate: str = "none") -> Tensor:
        """GELU, ``x * Phi(x)`` with ``Phi`` the standard normal CDF, elementwise; integers compute in float32.

        ``Phi`` comes from ``erf``; ``approximate='tanh'`` uses PyTorch's tanh approximation instead.
        ValueError for another ``approximate``.

        >>> x = cv.Tensor([-1.0, 0.0, 2.0])
        >>> x.gelu()
        Tensor([-0.15865526,  0.        ,  1.9544997 ])
        >>> x.gelu(approximate="tanh")
        Tensor([-0.158808 ,  0.       ,  1.9545977])
        """
        x = _as_float(self)
        if approximate not in ("none", "tanh"):
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return _activation_rule("gelu_tanh" if approximate == "tanh" else "gelu")(x)

    def softplus(self: Tensor, beta: float = 1.0) -> Tensor:
        """``log(1 + exp(beta*x)) / beta`` computed without overflow (a smooth ``relu``).

        >>> cv.Tensor([-100.0, 0.0, 100.0]).softplus()
        Tensor([3.783506e-44, 6.931472e-01, 1.000000e+02])
        """
        x = _as_float(self) * beta
        return (x.maximum(0) + (-x.abs()).exp().log1p()) / beta


_NARROW_FLOATS = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
_GELU_C = math.sqrt(2 / math.pi)
_RULES: dict[str, Any] = {}


def _sigmoid_of(x: Tensor, slope: bool = True) -> tuple[Tensor, Tensor | None]:
    """(sigmoid(x), its derivative or None without ``slope``), from ``e = exp(-|x|)``, which never
    overflows: 1/(1+e) for x >= 0, e/(1+e) below; the derivative ``e/(1+e)^2`` (``s * (1 - s)``
    is 0 from x = 17 on in float32: the 1 - s cancels)."""
    up = x >= 0
    e = where(up, -x, x).exp()
    r = (1 + e).reciprocal()
    return where(up, r, e * r), e * r * r if slope else None


def _activation_parts(name: str, x: Tensor, slope: bool = True) -> tuple[Tensor, Tensor | None]:
    """(the activation ``name`` of ``x``, its derivative, or None without ``slope``: the forward
    builds only the value's graph), computed in ``x``'s dtype."""
    if name == "gelu_tanh":
        t = (_GELU_C * (x + 0.044715 * x * x * x)).tanh()
        value = 0.5 * x * (1 + t)
        if not slope:
            return value, None
        return value, 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * (_GELU_C * (1 + 3 * 0.044715 * x * x))
    if name == "gelu":
        phi = 0.5 * (1 + (x * (1 / math.sqrt(2))).erf())
        return x * phi, phi + x * ((-0.5) * x * x).exp() * (1 / math.sqrt(2 * math.pi)) if slope else None
    s, ds = _sigmoid_of(x, slope)
    if name == "sigmoid":
        return s, ds
    return x * s, s + x * ds if slope else None  # silu


def _activation_rule(name: str) -> Any:
    """The activation ``name`` (``gelu``, ``gelu_tanh``, ``silu``, ``sigmoid``) as a
    ``custom_vjp``: its value, and a backward ``g * f'(x)`` computed from ``x`` alone. A narrow
    float (bfloat16, float16, float8) is computed in float32 and rounded once, value and
    gradient, as PyTorch's kernels do (op by op, GELU was rounded after each of some ten steps).
    And the backward shares nothing with the forward but ``x``: differentiated through GELU's
    formula, the pieces the two had in common were stored between them, a GPT-2 step's MLP
    backward five kernels over 8192 x 3072 values where one suffices."""
    rule = _RULES.get(name)
    if rule is not None:
        return rule
    from ..transforms.custom import custom_vjp

    def wide(x: Tensor) -> Tensor:
        return x.astype(dt.float32) if x.dtype.name in _NARROW_FLOATS else x

    def value(x: Tensor) -> Tensor:
        return _activation_parts(name, wide(x), slope=False)[0].astype(x.dtype)

    def bwd(res: tuple[Tensor], g: Tensor) -> tuple[Tensor]:
        (x,) = res
        return ((wide(g) * _activation_parts(name, wide(x))[1]).astype(x.dtype),)

    def fwd(x: Tensor) -> tuple[Tensor, tuple[Tensor]]:
        # (the residual is x's value now, in a tensor of its own: an in-place op, x.sigmoid_(),
        # then gives x the result's node, and the rule would differentiate at the result)
        return rule(x), (type(x)._from_node(x.node, x.device),)

    rule = custom_vjp(value)
    rule.defvjp(fwd, bwd)
    _RULES[name] = rule
    return rule


def _bit_pattern(t: Tensor, value: Any) -> Any:
    """The operand of a bitwise op on ``t``: a Python int outside the range of ``t``'s integer
    dtype is read as a bit pattern of that width, wrapped (as PyTorch: ``int32 | 0xFFFFFFFF`` is
    ``int32 | -1``; numpy 2 raises OverflowError). Anything else is returned as is, an int that no
    64-bit integer holds too (the operand's OverflowError follows)."""
    if type(value) is not int or not t.dtype.is_int:
        return value
    info = dt.iinfo(t.dtype)
    if info.min <= value <= info.max or not -(1 << 63) <= value < (1 << 64):
        return value
    return (value - info.min) % (1 << info.bits) + info.min


def _torch_floor(a: Tensor, b: Any, floor: Tensor) -> Tensor:
    """``floor`` (``a // b``) with PyTorch's (and Python's) values where an operand is infinite:
    ``inf // 2`` is nan and ``-5 // inf`` is -1 (the floor of -0.0...), where ``//`` gives the
    Array API standard's IEEE quotient (inf and -0.0). Finite operands, and a zero divisor, agree."""
    if not floor.dtype.is_float:
        return floor
    a, b = a.astype(floor.dtype), a._operand(b, floor.dtype)
    a_inf, b_inf = a.isinf(), b.isinf()
    below_zero = b_inf & a.isfinite() & a.ne(0) & ((a < 0) ^ (b < 0))  # a finite quotient just below 0
    return where(a_inf & b.isfinite() & b.ne(0), math.nan, where(below_zero, -1.0, floor))


def _ordered(cmp: Tensor) -> Tensor:
    """``cmp`` (an order comparison), or TypeError if it compares complex values."""
    if cmp.node.src and cmp.node.src[0].dtype.is_complex:
        raise TypeError("complex values are not ordered: <, <=, > and >= are not defined for them")
    return cmp


def _to_bool(anchor: Tensor, other: Any) -> Tensor:
    from ..tensor import Tensor

    t = other if isinstance(other, Tensor) else anchor._operand(other, dt.bool_)
    return t.astype(dt.bool_)


# --- docstrings of the one-line methods ------------------------------------------------------------------
# name: (summary, input, printed result). A docstring is the summary, the dtype rules of the method's
# kind and the example ``cv.Tensor(input).name()`` with its result (run by tests/test_docstrings.py).
_FLOAT_MATH: dict[str, tuple[str, str, str]] = {
    "exp": ("The exponential ``e**x``", "[0.0, 1.0]", "Tensor([1.       , 2.7182817])"),
    "exp2": ("``2**x``", "[-1, 0, 3]", "Tensor([0.5, 1. , 8. ])"),
    "expm1": ("``exp(x) - 1``, accurate near 0", "[0.0, 1e-10]", "Tensor([0.e+00, 1.e-10])"),
    "log": ("The natural logarithm (-inf at 0, nan below)", "[1.0, 0.0]", "Tensor([  0., -inf])"),
    "log2": ("The base-2 logarithm", "[1, 8]", "Tensor([0., 3.])"),
    "log10": ("The base-10 logarithm", "[1, 100, 1000]", "Tensor([0., 2., 3.])"),
    "log1p": ("``log(1 + x)``, accurate near 0", "[0.0, 1e-10]", "Tensor([0.e+00, 1.e-10])"),
    "sqrt": ("The square root (nan for negative input)", "[4.0, 2.0, -1.0]",
             "Tensor([2.       , 1.4142135,       nan])"),
    "rsqrt": ("The reciprocal square root ``1 / sqrt(x)``", "[4.0, 0.25]", "Tensor([0.5, 2. ])"),
    "reciprocal": ("``1 / x`` (inf at 0)", "[2, 0]", "Tensor([0.5, inf])"),
    "sin": ("The sine (radians)", "[0.0, cv.pi / 2]", "Tensor([0., 1.])"),
    "cos": ("The cosine (radians)", "[0.0, cv.pi]", "Tensor([ 1., -1.])"),
    "tan": ("The tangent (radians)", "[0.0, cv.pi / 4]", "Tensor([0., 1.])"),
    "asin": ("The inverse sine, in [-pi/2, pi/2] (nan outside [-1, 1])", "[0.0, 1.0]",
             "Tensor([0.       , 1.5707964])"),
    "acos": ("The inverse cosine, in [0, pi] (nan outside [-1, 1])", "[1.0, 0.0, -1.0]",
             "Tensor([0.       , 1.5707964, 3.1415927])"),
    "atan": ("The inverse tangent, in [-pi/2, pi/2]", '[0.0, 1.0, float("inf")]',
             "Tensor([0.       , 0.7853982, 1.5707964])"),
    "sinh": ("The hyperbolic sine", "[0.0, 1.0]", "Tensor([0.       , 1.1752012])"),
    "cosh": ("The hyperbolic cosine", "[0.0, 1.0]", "Tensor([1.       , 1.5430806])"),
    "tanh": ("The hyperbolic tangent", '[-float("inf"), 0.0, 1.0]', "Tensor([-1.       ,  0.       ,  0.7615942])"),
    "asinh": ("The inverse hyperbolic sine", "[0.0, 1.0]", "Tensor([0.       , 0.8813736])"),
    "acosh": ("The inverse hyperbolic cosine (nan below 1)", "[1.0, 2.0, 0.5]",
              "Tensor([0.      , 1.316958,      nan])"),
    "atanh": ("The inverse hyperbolic tangent (±inf at ±1, nan beyond)", "[0.0, 0.5, 1.0]",
              "Tensor([0.        , 0.54930615,        inf])"),
    "erf": ("The error function ``2/sqrt(pi) * integral of exp(-t**2)`` from 0 to x", '[0.0, 0.5, float("inf")]',
            "Tensor([0.       , 0.5204999, 1.       ])"),
}
_ROUNDING: dict[str, tuple[str, str, str]] = {
    "floor": ("Round toward -inf", "[-1.5, 0.5, 2.0]", "Tensor([-2.,  0.,  2.])"),
    "ceil": ("Round toward +inf", "[-1.5, 0.5, 2.0]", "Tensor([-1.,  1.,  2.])"),
    "trunc": ("Round toward zero (drop the fraction)", "[-1.5, 0.5, 2.0]", "Tensor([-1.,  0.,  2.])"),
}
_COMPOSED = {"exp2": "``exp``", "expm1": "``exp``", "log2": "``log``", "log10": "``log``", "log1p": "``log``"}
_NOT_IN_CV = {"exp2", "rsqrt"}  # no cv function of the same name


def _math_doc(name: str, summary: str, values: str, result: str) -> str:
    own = "" if name in _NOT_IN_CV else f"The method form of :func:`corvid.{name}`. "
    if name in _ROUNDING:
        kinds = "Integer and bool tensors are returned unchanged; TypeError for complex tensors."
    elif name == "erf":
        kinds = "Integer and bool tensors compute in float32 (the default float dtype); TypeError for complex tensors."
    else:
        kinds = "Integer and bool tensors compute in float32 (the default float dtype); complex tensors give " + (
            f"a complex result, composed from {_COMPOSED[name]}." if name in _COMPOSED else "a complex result.")
    return f"{summary}, elementwise.\n\n{own}{kinds}\n\n>>> cv.Tensor({values}).{name}()\n{result}\n"


for _name, _entry in {**_FLOAT_MATH, **_ROUNDING}.items():
    getattr(ElementwiseMixin, _name).__doc__ = _math_doc(_name, *_entry)

_BITWISE_DOCS = {
    "bitwise_and": """``self & other``, elementwise, for integers and bools.

        The method form of :func:`corvid.bitwise_and`, except that a Python int outside this
        tensor's integer range is read as a bit pattern of its width, as PyTorch does
        (``int32 & 0xFFFFFFFF`` is ``int32 & -1``; ``cv.bitwise_and`` raises OverflowError, as
        numpy). TypeError for floats.

        >>> cv.Tensor([12, 10]).bitwise_and(6)
        Tensor([4, 2])
        """,
    "bitwise_or": """``self | other``, elementwise, for integers and bools.

        The method form of :func:`corvid.bitwise_or`; Python ints out of range wrap as in
        :meth:`bitwise_and`. TypeError for floats.

        >>> cv.Tensor([12, 10]).bitwise_or(6)
        Tensor([14, 14])
        """,
    "bitwise_xor": """``self ^ other``, elementwise, for integers and bools.

        The method form of :func:`corvid.bitwise_xor`; Python ints out of range wrap as in
        :meth:`bitwise_and`. TypeError for floats.

        >>> cv.Tensor([12, 10]).bitwise_xor(6)
        Tensor([10, 12])
        >>> cv.Tensor([True, False]).bitwise_xor(True)
        Tensor([False,  True])
        """,
    "bitwise_left_shift": """``self << other``, elementwise, for integers.

        The method form of :func:`corvid.bitwise_left_shift`. Shifts by the bit width or more give
        0. TypeError for floats and bools.

        >>> cv.Tensor([1, 8]).bitwise_left_shift(2)
        Tensor([ 4, 32])
        """,
    "bitwise_right_shift": """``self >> other``, elementwise, for integers.

        The method form of :func:`corvid.bitwise_right_shift`. Arithmetic for signed integers: the
        sign bit is copied in, so negative values round toward -inf (and shifts by the bit width or
        more give -1 for them, 0 otherwise). TypeError for floats and bools.

        >>> cv.Tensor([-8, -7, 8]).bitwise_right_shift(1)
        Tensor([-4, -4,  4])
        """,
}
for _name, _doc in _BITWISE_DOCS.items():
    getattr(ElementwiseMixin, _name).__doc__ = _doc
del _name, _entry, _doc

"""The Python Array API namespace (standard revision 2025.12): ``import corvid as xp``.

Code written against the standard (``xp = x.__array_namespace__()``) runs on corvid tensors. This
module adds the standard's functions that corvid's Tensor methods do not already provide as
functions, and re-exports those that other modules implement (manipulation, scans, sorting,
indexing), so the namespace is complete in one place. Everything stays lazy and differentiable:
the functions are thin wrappers over Tensor methods and :mod:`corvid.ops.special`.

Deviations from the standard, by design:

* complex64 and complex128 cover arithmetic, the elementwise math functions, ``sum``/``prod``/
  ``mean`` and ``matmul`` (see :mod:`corvid.ops.elementwise`); for real input ``real`` and ``conj``
  are the identity and ``imag`` is zero;
* the default floating dtype is float32 (the standard allows it); float16, bfloat16, float8_e4m3fn
  and float8_e5m2 exist too;
* arrays are values: in-place operators rebind the tensor to a new graph, so a "copy" of a
  corvid-owned tensor is a new handle; only memory shared through DLPack is copied eagerly.

>>> import corvid as cv
>>> x = cv.asarray([1.0, 2.0, 3.0])
>>> xp = x.__array_namespace__()
>>> xp.sum(xp.exp(x - xp.max(x))).shape
()
"""

from __future__ import annotations

import builtins
import math
from typing import Any, Sequence

import numpy as np

from .errors import ShapeError
from . import dtype as dt
from .creation import empty_like as _empty_like, full_like as _full_like
from .dlpack import _copy, from_dlpack, from_numpy, host_device, is_cpu
from .dtype import DType, DTypeLike
from .ops import special
from .ops.elementwise import ElementwiseMixin
from .ops.indexing import nonzero, take, take_along_axis, where
from .ops.manipulation import (broadcast_arrays, diff, expand_dims, frac, meshgrid, moveaxis, repeat, roll, tile,
                               tril, triu, unstack)
from .ops.movement import cat, normalize_axis, stack
from .ops.scan import cumulative_prod, cumulative_sum
from .ops.sorting import argsort, searchsorted, sort, unique_all, unique_counts, unique_inverse, unique_values
from .runtime.device import canonical_device
from .tensor import Tensor, _fits, broadcast_shapes
from .tensor import result_type as _result_type_of

__array_api_version__ = "2025.12"
API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12", "2025.12")

e, inf, nan, pi = math.e, math.inf, math.nan, math.pi
newaxis = None

__all__ = [
    "__array_api_version__", "__array_namespace_info__", "e", "inf", "nan", "newaxis", "pi",
    # creation
    "asarray", "from_dlpack", "full_like", "zeros_like", "ones_like", "empty_like", "meshgrid", "tril", "triu",
    # data types
    "astype", "can_cast", "finfo", "iinfo", "isdtype", "result_type", "broadcast_shapes",
    # elementwise
    "abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and", "bitwise_invert",
    "bitwise_left_shift", "bitwise_or", "bitwise_right_shift", "bitwise_xor", "ceil", "clip", "conj", "copysign",
    "cos", "cosh", "divide", "equal", "exp", "expm1", "floor", "floor_divide", "greater", "greater_equal", "hypot",
    "imag", "isfinite", "isinf", "isnan", "less", "less_equal", "log", "log1p", "log2", "log10", "logaddexp",
    "logical_and", "logical_not", "logical_or", "logical_xor", "maximum", "minimum", "multiply", "negative",
    "nextafter", "not_equal", "positive", "pow", "real", "reciprocal", "remainder", "round", "sign", "signbit",
    "sin", "sinh", "square", "sqrt", "subtract", "tan", "tanh", "trunc",
    # special functions (beyond the standard)
    "erf", "erfc", "erfinv", "lgamma", "digamma", "i0", "frac",
    # statistics and utilities
    "max", "mean", "min", "prod", "std", "sum", "var", "cumulative_sum", "cumulative_prod", "all", "any", "diff",
    # manipulation
    "broadcast_arrays", "broadcast_to", "concat", "expand_dims", "flip", "moveaxis", "permute_dims", "repeat",
    "reshape", "roll", "squeeze", "stack", "tile", "unstack",
    # searching, sorting, sets, indexing
    "argmax", "argmin", "count_nonzero", "nonzero", "searchsorted", "where", "sort", "argsort", "unique_all",
    "unique_counts", "unique_inverse", "unique_values", "isin", "take", "take_along_axis",
    # linear algebra in the main namespace
    "matmul", "matrix_transpose", "tensordot", "vecdot",
]


# --- conversion ----------------------------------------------------------------------------------------
def _t(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else asarray(x)


def _pair(x1: Any, x2: Any) -> tuple[Tensor, Any]:
    """``x1`` as a tensor, ready for a binary method with ``x2`` (one of them may be a scalar)."""
    if isinstance(x1, Tensor):
        return x1, x2
    if isinstance(x2, Tensor):
        return x2._operand_like(x1), x2
    return asarray(x1), x2


def asarray(obj: Any, /, *, dtype: DTypeLike | None = None, device: str | None = None,
            copy: bool | None = None) -> Tensor:
    """A tensor from a tensor, a Python scalar or (nested) sequence, a numpy array, or any DLPack or
    buffer-protocol object.

    ``copy=True`` always copies; ``copy=False`` never does (ValueError where it would have to:
    Python data, a dtype change, strided foreign memory); ``copy=None`` shares a corvid tensor and
    copies foreign memory (a later write to the numpy array does not change the tensor).
    Python floats give float32, ints int64, bools bool, unless ``dtype`` is given; a numpy array
    keeps its dtype.

    >>> cv.asarray([[1, 2], [3, 4]])
    Tensor([[1, 2],
            [3, 4]])
    >>> cv.asarray([1, 2], dtype=cv.float64)
    Tensor([1., 2.], dtype=float64)
    >>> a = np.zeros(2, dtype=np.int16)
    >>> t = cv.asarray(a)
    >>> a[0] = 7  # the tensor holds a copy
    >>> t
    Tensor([0, 0], dtype=int16)
    """
    d = None if dtype is None else dt.to_dtype(dtype)
    dev = None if device is None else canonical_device(device)
    if isinstance(obj, Tensor):
        if dev is not None and dev != obj.device:
            if copy is False:
                raise ValueError(f"asarray(copy=False): the tensor is on {obj.device}, not {dev}")
            obj = obj.to(dev)
        if d is not None and d is not obj.dtype:
            if copy is False:
                raise ValueError(f"asarray(copy=False) cannot change dtype {obj.dtype.name} to {d.name}")
            return obj.astype(d)
        return _copy_tensor(obj) if copy else obj
    if copy is False:
        if isinstance(obj, np.ndarray) or hasattr(obj, "__dlpack__") or _has_buffer(obj):
            arr = np.asarray(obj) if isinstance(obj, np.ndarray) or not hasattr(obj, "__dlpack__") \
                else np.from_dlpack(obj)
            if d is not None and dt.from_numpy(arr.dtype) is not d:
                raise ValueError(f"asarray(copy=False) cannot change dtype {arr.dtype} to {d.name}")
            host = host_device(dev)
            if not is_cpu(host):
                raise ValueError(f"asarray(copy=False) cannot move CPU memory to {dev}")
            return from_numpy(arr, copy=False, device=host)
        raise ValueError(f"asarray(copy=False): a {type(obj).__name__} has no memory a tensor can share")
    if not isinstance(obj, np.ndarray) and hasattr(obj, "__dlpack__"):
        obj = np.from_dlpack(obj)
    elif _has_buffer(obj):
        obj = np.asarray(obj)
    return Tensor(obj, dtype=d, device=dev)


def _has_buffer(obj: Any) -> bool:
    if isinstance(obj, (bool, int, float, complex, list, tuple, str, np.ndarray)):
        return False
    try:
        memoryview(obj)
    except (TypeError, ValueError):
        return False
    return True


def _copy_tensor(x: Tensor) -> Tensor:
    # corvid never writes a buffer in place, so a new handle is an independent copy, except for
    # memory someone else owns (DLPack imports), which that owner may still change
    buf = x.node.buffer
    if buf is not None and not buf.pooled:
        return _copy(x)
    return Tensor._from_node(x.node, x.device)


def full_like(x: Tensor, /, fill_value: bool | int | float, dtype: DTypeLike | None = None,
              requires_grad: bool = False, *, device: str | None = None) -> Tensor:
    """A tensor of ``x``'s shape (and dtype and device, unless given) filled with ``fill_value``.

    As in numpy and PyTorch, the value is converted to the dtype: a float fill of an integer
    tensor is truncated, so pass ``dtype`` for a float result.

    >>> x = cv.asarray([[1, 2], [3, 4]], dtype=cv.int32)
    >>> cv.full_like(x, 7)
    Tensor([[7, 7],
            [7, 7]], dtype=int32)
    >>> cv.full_like(x, 0.5, dtype=cv.float32)
    Tensor([[0.5, 0.5],
            [0.5, 0.5]])
    """
    return _like(_full_like(x, fill_value, dtype, requires_grad), device)


def zeros_like(x: Tensor, /, dtype: DTypeLike | None = None, requires_grad: bool = False, *,
               device: str | None = None) -> Tensor:
    """Zeros of ``x``'s shape, with ``x``'s dtype and device unless given (a constant: nothing is
    allocated until a kernel stores it).

    ``requires_grad=True`` makes a float result a leaf for ``backward()``, as in PyTorch.

    >>> cv.zeros_like(cv.asarray([[1, 2, 3]]))
    Tensor([[0, 0, 0]])
    >>> cv.zeros_like(cv.asarray([1, 2]), dtype=cv.float32)
    Tensor([0., 0.])
    """
    return full_like(x, 0, dtype, requires_grad, device=device)


def ones_like(x: Tensor, /, dtype: DTypeLike | None = None, requires_grad: bool = False, *,
              device: str | None = None) -> Tensor:
    """Ones of ``x``'s shape, with ``x``'s dtype and device unless given (see :func:`zeros_like`).

    >>> cv.ones_like(cv.asarray([[1.5, 2.5]]))
    Tensor([[1., 1.]])
    >>> cv.ones_like(cv.asarray([1.5, 2.5]), dtype=cv.bool)
    Tensor([ True,  True])
    """
    return full_like(x, 1, dtype, requires_grad, device=device)


def empty_like(x: Tensor, /, dtype: DTypeLike | None = None, requires_grad: bool = False, *,
               device: str | None = None) -> Tensor:
    """A tensor of ``x``'s shape, dtype and device (unless given) with unspecified values, in the Array
    API's sense; corvid gives zeros, which cost nothing (see :func:`corvid.empty`).

    >>> e = cv.empty_like(cv.asarray([[1, 2, 3]], dtype=cv.int16))
    >>> e.shape, e.dtype
    ((1, 3), corvid.int16)
    """
    return _like(_empty_like(x, dtype, requires_grad), device)


def _like(t: Tensor, device: str | None) -> Tensor:
    return t if device is None else t.to(device)


# --- data types ----------------------------------------------------------------------------------------
def astype(x: Tensor, dtype: DTypeLike, /, *, copy: bool = True, device: str | None = None) -> Tensor:
    """``x`` converted to ``dtype`` (and moved to ``device``). ``copy=False`` returns ``x`` itself
    when nothing changes.

    Floats convert to integers by truncation toward zero; integers to a narrower integer wrap, as in
    numpy and C.

    >>> cv.astype(cv.asarray([1.7, -1.7]), cv.int32)
    Tensor([ 1, -1], dtype=int32)
    >>> cv.astype(cv.asarray([300, -1]), "uint8")
    Tensor([ 44, 255], dtype=uint8)
    >>> x = cv.asarray([1.0])
    >>> cv.astype(x, cv.float32, copy=False) is x
    True
    """
    out = _t(x).astype(dtype)
    if device is not None:
        out = out.to(device)
    return _copy_tensor(out) if copy and out is x else out


def _dtype_of(x: Any) -> DType:
    return x.dtype if isinstance(x, Tensor) else dt.to_dtype(x)


def can_cast(from_: DTypeLike | Tensor, to: DTypeLike, /, casting: str = "safe") -> bool:
    """Whether ``from_`` (a dtype or a tensor) promotes to ``to`` without loss (see :func:`dtype.can_cast`).

    ``casting`` is ``'safe'`` (the Array API's meaning), or numpy's ``'no'``, ``'same_kind'`` or
    ``'unsafe'``.

    >>> cv.can_cast(cv.int32, cv.int64), cv.can_cast(cv.int64, cv.int32)
    (True, False)
    >>> cv.can_cast(cv.int64, cv.int32, casting="same_kind"), cv.can_cast(cv.float64, cv.int32, casting="same_kind")
    (True, False)
    >>> cv.can_cast(cv.asarray([1.0]), cv.float64)
    True
    """
    return dt.can_cast(_dtype_of(from_), to, casting)


def finfo(type: DTypeLike | Tensor, /) -> dt.FInfo:  # noqa: A002  (the standard's name)
    """Limits of a floating-point dtype, or of a tensor's dtype: ``bits``, ``eps``, ``max``, ``min``,
    ``smallest_normal`` (Python floats) and ``dtype``. TypeError for integer and bool dtypes.

    For a complex dtype, the limits of its real part (``finfo(complex64)`` describes float32), as in
    numpy and the Array API standard.

    >>> cv.finfo(cv.float16).max, cv.finfo(cv.float32).eps
    (65504.0, 1.1920928955078125e-07)
    >>> cv.finfo(cv.asarray([1 + 2j])).dtype
    corvid.float32
    """
    return dt.finfo(_dtype_of(type))


def iinfo(type: DTypeLike | Tensor, /) -> dt.IInfo:  # noqa: A002
    """Limits of an integer dtype, or of a tensor's dtype: ``bits``, ``max``, ``min`` (Python ints) and
    ``dtype``. TypeError for bool and float dtypes.

    >>> cv.iinfo(cv.int8).min, cv.iinfo(cv.int8).max
    (-128, 127)
    >>> cv.iinfo(cv.asarray([1], dtype=cv.uint16)).max
    65535
    """
    return dt.iinfo(_dtype_of(type))


_KINDS = {
    "bool": lambda d: d.is_bool,
    "signed integer": lambda d: d.kind == "i",
    "unsigned integer": lambda d: d.kind == "u",
    "integral": lambda d: d.is_int,
    "real floating": lambda d: d.is_float,
    "complex floating": lambda d: d.is_complex,
    "numeric": lambda d: not d.is_bool,
}


def isdtype(dtype: DTypeLike, kind: DTypeLike | str | tuple) -> bool:
    """Whether ``dtype`` is of ``kind``: a dtype, a kind name (``'bool'``, ``'signed integer'``,
    ``'unsigned integer'``, ``'integral'``, ``'real floating'``, ``'complex floating'``,
    ``'numeric'``), or a tuple of those. ValueError for an unknown kind name.

    >>> cv.isdtype(cv.int32, "integral"), cv.isdtype(cv.uint8, "signed integer")
    (True, False)
    >>> cv.isdtype(cv.float16, ("real floating", "complex floating"))
    True
    >>> cv.isdtype(cv.bool, "numeric")  # bool is not numeric
    False
    """
    d = dt.to_dtype(dtype)
    if isinstance(kind, tuple):
        return builtins.any(isdtype(d, k) for k in kind)
    if isinstance(kind, str) and kind in _KINDS:
        return _KINDS[kind](d)
    try:
        return dt.to_dtype(kind) is d
    except TypeError:
        raise ValueError(f"unknown dtype kind {kind!r}; expected a dtype or one of "
                         f"{', '.join(map(repr, _KINDS))}") from None


def result_type(*arrays_and_dtypes: Any) -> DType:
    """The dtype of combining tensors, dtypes and Python scalars (weak) by Array API promotion.

    A Python scalar only contributes its kind, never its width; integer dtypes without a common
    integer type give float64, as in numpy (see :func:`corvid.dtype.result_type` for the lattice).

    >>> cv.result_type(cv.int8, cv.uint8)
    corvid.int16
    >>> x = cv.asarray([1, 2], dtype=cv.int32)
    >>> cv.result_type(x, 7), cv.result_type(x, 1.5)
    (corvid.int32, corvid.float32)
    >>> cv.result_type(cv.int64, cv.uint64)
    corvid.float64
    """
    args: list[Any] = []
    for x in arrays_and_dtypes:
        if isinstance(x, (DType, str, np.dtype, type)):
            args.append(dt.to_dtype(x))
        elif isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
            args.append(x)
        else:
            args.append(_result_type_of(x))
    return dt.result_type(*args)


# --- elementwise ---------------------------------------------------------------------------------------
def _unary(method: str, doc: str):
    def fn(x: Tensor, /) -> Tensor:
        return getattr(_t(x), method)()
    fn.__doc__ = doc
    return fn


def _binary(method: str, doc: str):
    def fn(x1: Any, x2: Any, /) -> Tensor:
        a, b = _pair(x1, x2)
        return getattr(a, method)(b)
    fn.__doc__ = doc
    return fn


abs = _unary("abs", """Absolute value (integers wrap at their minimum, as in C and numpy).

>>> cv.abs(cv.asarray([-1.5, 0.0, 2.0]))
Tensor([1.5, 0. , 2. ])
>>> cv.abs(cv.asarray([-128, 5], dtype=cv.int8))  # +128 does not fit in int8
Tensor([-128,    5], dtype=int8)
""")  # noqa: A001
acos = _unary("acos", """Inverse cosine, in radians; nan outside [-1, 1].

Integer inputs compute in float32, as for every transcendental function here.

>>> cv.round(cv.acos(cv.asarray([1.0, 0.0, -1.0, 2.0])), decimals=4)
Tensor([0.    , 1.5708, 3.1416,    nan])
""")
acosh = _unary("acosh", """Inverse hyperbolic cosine; nan below 1.

>>> cv.round(cv.acosh(cv.asarray([1.0, 2.0, 0.5])), decimals=4)
Tensor([0.   , 1.317,   nan])
""")
asin = _unary("asin", """Inverse sine, in radians; nan outside [-1, 1].

>>> cv.round(cv.asin(cv.asarray([0.0, 1.0, 2.0])), decimals=4)
Tensor([0.    , 1.5708,    nan])
""")
asinh = _unary("asinh", """Inverse hyperbolic sine.

>>> cv.round(cv.asinh(cv.asarray([0.0, 1.0, -1.0])), decimals=4)
Tensor([ 0.    ,  0.8814, -0.8814])
""")
atan = _unary("atan", """Inverse tangent, in radians (in ``[-pi/2, pi/2]``); see :func:`atan2` for the angle of a point.

>>> cv.round(cv.atan(cv.asarray([0.0, 1.0, -cv.inf])), decimals=4)
Tensor([ 0.    ,  0.7854, -1.5708])
""")
atanh = _unary("atanh", """Inverse hyperbolic tangent; ±inf at ±1, nan outside [-1, 1].

>>> cv.round(cv.atanh(cv.asarray([0.0, 0.5, 1.0])), decimals=4)
Tensor([0.    , 0.5493,    inf])
""")
ceil = _unary("ceil", """Round toward +inf (integers unchanged); the result keeps ``x``'s dtype.

>>> cv.ceil(cv.asarray([-1.5, 0.2, 2.0]))
Tensor([-1.,  1.,  2.])
""")
cos = _unary("cos", """Cosine of an angle in radians.

>>> cv.cos(cv.asarray([0.0, cv.pi]))
Tensor([ 1., -1.])
""")
cosh = _unary("cosh", """Hyperbolic cosine.

>>> cv.round(cv.cosh(cv.asarray([0.0, 1.0])), decimals=4)
Tensor([1.    , 1.5431])
""")
exp = _unary("exp", """Exponential, ``e ** x``.

>>> cv.round(cv.exp(cv.asarray([0.0, 1.0, -cv.inf])), decimals=4)
Tensor([1.    , 2.7183, 0.    ])
""")
expm1 = _unary("expm1", """``exp(x) - 1``, accurate near 0 where the subtraction would cancel.

>>> x = cv.asarray(1e-10, dtype=cv.float64)
>>> cv.expm1(x).item(), (cv.exp(x) - 1).item()
(1.00000000005e-10, 1.000000082740371e-10)
""")
floor = _unary("floor", """Round toward -inf (integers unchanged); the result keeps ``x``'s dtype.

>>> cv.floor(cv.asarray([-1.5, 0.2, 2.0]))
Tensor([-2.,  0.,  2.])
""")
isfinite = _unary("isfinite", """True where neither inf nor nan (always for integers and bools).

>>> cv.isfinite(cv.asarray([1.0, cv.inf, cv.nan]))
Tensor([ True, False, False])
""")
isinf = _unary("isinf", """True where ±inf (never for integers and bools).

>>> cv.isinf(cv.asarray([1.0, -cv.inf, cv.nan]))
Tensor([False,  True, False])
""")
isnan = _unary("isnan", """True where nan (never for integers and bools).

>>> cv.isnan(cv.asarray([1.0, cv.inf, cv.nan]))
Tensor([False, False,  True])
""")
log = _unary("log", """Natural logarithm: -inf at 0, nan below 0.

>>> cv.log(cv.asarray([1.0, 0.0, -1.0]))
Tensor([  0., -inf,  nan])
""")
log1p = _unary("log1p", """``log(1 + x)``, accurate near 0 where ``1 + x`` would round.

>>> cv.log1p(cv.asarray(1e-10, dtype=cv.float64)).item()
9.999999999500001e-11
""")
log2 = _unary("log2", """Base-2 logarithm.

>>> cv.log2(cv.asarray([1.0, 8.0, 0.5]))
Tensor([ 0.,  3., -1.])
""")
log10 = _unary("log10", """Base-10 logarithm.

>>> cv.log10(cv.asarray([1.0, 1000.0, 0.01]))
Tensor([ 0.,  3., -2.])
""")
logical_not = _unary("logical_not", """Logical not of any dtype, by truth value (zero is False): a bool tensor.

>>> cv.logical_not(cv.asarray([0.0, 2.0, -0.5]))
Tensor([ True, False, False])
""")
bitwise_invert = _unary("bitwise_not", """``~x`` for integers and bools (logical not for bools).

>>> cv.bitwise_invert(cv.asarray([0, 5], dtype=cv.uint8))
Tensor([255, 250], dtype=uint8)
>>> cv.bitwise_invert(cv.asarray([True, False]))
Tensor([False,  True])
""")
negative = _unary("neg", """``-x`` (TypeError for bool; integers wrap at their minimum).

>>> cv.negative(cv.asarray([1, -2]))
Tensor([-1,  2])
""")
reciprocal = _unary("reciprocal", """``1 / x``; integer inputs compute in float32.

>>> cv.reciprocal(cv.asarray([2, 4]))
Tensor([0.5 , 0.25])
""")
def sign(x: Tensor, /) -> Tensor:
    """-1, 0 or 1 by sign; nan stays nan; ±0 gives +0 (the Tensor method is PyTorch's: nan gives 0).

    >>> x = cv.asarray([-2.0, 0.0, 3.0, cv.nan])
    >>> cv.sign(x), x.sign()
    (Tensor([-1.,  0.,  1., nan]), Tensor([-1.,  0.,  1.,  0.]))
    """
    return ElementwiseMixin.sign(_t(x))
sin = _unary("sin", """Sine of an angle in radians.

>>> cv.sin(cv.asarray([0.0, cv.pi / 2]))
Tensor([0., 1.])
""")
sinh = _unary("sinh", """Hyperbolic sine.

>>> cv.round(cv.sinh(cv.asarray([0.0, 1.0])), decimals=4)
Tensor([0.    , 1.1752])
""")
sqrt = _unary("sqrt", """Square root (nan for negative input, -0 for -0).

>>> cv.sqrt(cv.asarray([4.0, -1.0, -0.0]))
Tensor([ 2., nan, -0.])
""")
def square(x: Tensor, /) -> Tensor:
    """``x * x`` (bool stays bool, as numpy's; the Tensor method is PyTorch's: int64).

    >>> cv.square(cv.asarray([-3, 2]))
    Tensor([9, 4])
    >>> b = cv.asarray([True, False])
    >>> cv.square(b), b.square()
    (Tensor([ True, False]), Tensor([1, 0]))
    """
    return ElementwiseMixin.square(_t(x))
tan = _unary("tan", """Tangent of an angle in radians.

>>> cv.round(cv.tan(cv.asarray([0.0, cv.pi / 4])), decimals=4)
Tensor([0., 1.])
""")
tanh = _unary("tanh", """Hyperbolic tangent, with values in [-1, 1].

>>> cv.round(cv.tanh(cv.asarray([0.0, 1.0, cv.inf])), decimals=4)
Tensor([0.    , 0.7616, 1.    ])
""")
trunc = _unary("trunc", """Round toward zero (integers unchanged); the result keeps ``x``'s dtype.

>>> cv.trunc(cv.asarray([-1.7, 1.7]))
Tensor([-1.,  1.])
""")

add = _binary("add", """``x1 + x2`` (broadcast, promoted; bool + bool is logical or).

Either operand may be a Python scalar, which takes the tensor's dtype if its kind allows
(``int8 + 1`` stays int8, ``int8 + 1.5`` is float32).

>>> cv.add(cv.asarray([1, 2]), 10)
Tensor([11, 12])
>>> cv.add(cv.asarray([[0.0], [1.0]]), cv.asarray([10.0, 20.0]))  # broadcast to (2, 2)
Tensor([[10., 20.],
        [11., 21.]])
""")
atan2 = _binary("atan2", """Angle of the point (x2, x1), with the IEEE signed-zero and infinity cases.

In radians, in [-pi, pi]. Note the order: ``atan2(y, x)``, as in numpy and C.

>>> cv.round(cv.atan2(cv.asarray([1.0, 0.0, -0.0]), cv.asarray([0.0, -1.0, -1.0])), decimals=4)
Tensor([ 1.5708,  3.1416, -3.1416])
""")
def _bitwise(method: str, doc: str):
    """A bitwise function of the namespace: numpy's (a Python int outside the tensor's dtype is an
    OverflowError), where the Tensor operators wrap it as PyTorch's do (``int32 | 0xFFFFFFFF``)."""
    op = _binary(method, doc)

    def fn(x1: Any, x2: Any, /) -> Tensor:
        for scalar, other in ((x1, x2), (x2, x1)):
            if type(scalar) is int and isinstance(other, Tensor) and other.dtype.is_int and not _fits(scalar, other.dtype):
                raise OverflowError(f"Python integer {scalar} is out of bounds for {other.dtype.name}")
        return op(x1, x2)
    fn.__doc__ = doc
    return fn


bitwise_and = _bitwise("__and__", """``x1 & x2`` for integers and bools.

As numpy, and unlike the ``&`` operator (which wraps the integer as PyTorch does), a Python int
that the tensor's dtype cannot hold is an OverflowError.

>>> cv.bitwise_and(cv.asarray([12, 10]), 6)
Tensor([4, 2])
>>> cv.bitwise_and(cv.asarray([1], dtype=cv.uint8), 256)
Traceback (most recent call last):
    ...
OverflowError: Python integer 256 is out of bounds for uint8
""")
bitwise_or = _bitwise("__or__", """``x1 | x2`` for integers and bools (a Python int must fit the tensor's dtype, as in
:func:`bitwise_and`).

>>> cv.bitwise_or(cv.asarray([12, 10]), 3)
Tensor([15, 11])
""")
bitwise_xor = _bitwise("__xor__", """``x1 ^ x2`` for integers and bools (a Python int must fit the tensor's dtype, as in
:func:`bitwise_and`).

>>> cv.bitwise_xor(cv.asarray([12, 10]), 6)
Tensor([10, 12])
>>> cv.bitwise_xor(cv.asarray([True, True]), cv.asarray([True, False]))
Tensor([False,  True])
""")
bitwise_left_shift = _binary("__lshift__", """``x1 << x2``; shifts past the width give 0.

>>> cv.bitwise_left_shift(cv.asarray([1, 1, 3]), cv.asarray([3, 64, 1]))
Tensor([8, 0, 6])
""")
bitwise_right_shift = _binary("__rshift__", """``x1 >> x2`` (arithmetic for signed integers: the sign bit is copied in).

>>> cv.bitwise_right_shift(cv.asarray([-8, 8]), 1)
Tensor([-4,  4])
""")
divide = _binary("div", """True division; integer inputs compute in float32.

>>> cv.divide(cv.asarray([1, 3]), 2)
Tensor([0.5, 1.5])
>>> cv.divide(cv.asarray([1.0, -1.0, 0.0]), 0.0)
Tensor([ inf, -inf,  nan])
""")
equal = _binary("eq", """``x1 == x2`` elementwise, a bool tensor (nan equals nothing, -0 equals +0).

>>> cv.equal(cv.asarray([1.0, cv.nan, 0.0]), cv.asarray([1.0, cv.nan, -0.0]))
Tensor([ True, False,  True])
""")
floor_divide = _binary("floor_divide", """Floor of ``x1 / x2`` (Python semantics: toward -inf, not toward 0 as in C).

>>> cv.floor_divide(cv.asarray([7, -7]), 2)
Tensor([ 3, -4])
""")
greater = _binary("__gt__", """``x1 > x2`` elementwise, a bool tensor (False where either is nan).

>>> cv.greater(cv.asarray([1.0, 5.0, cv.nan]), 3)
Tensor([False,  True, False])
""")
greater_equal = _binary("__ge__", """``x1 >= x2`` elementwise, a bool tensor.

>>> cv.greater_equal(cv.asarray([1, 3, 5]), 3)
Tensor([False,  True,  True])
""")
less = _binary("__lt__", """``x1 < x2`` elementwise, a bool tensor (False where either is nan).

>>> cv.less(cv.asarray([1.0, 5.0, cv.nan]), 3)
Tensor([ True, False, False])
""")
less_equal = _binary("__le__", """``x1 <= x2`` elementwise, a bool tensor.

>>> cv.less_equal(cv.asarray([1, 3, 5]), 3)
Tensor([ True,  True, False])
""")
logical_and = _binary("logical_and", """Logical and of any dtypes, by truth value (zero is False): a bool tensor.

>>> cv.logical_and(cv.asarray([1, 0, 2]), cv.asarray([True, True, False]))
Tensor([ True, False, False])
""")
logical_or = _binary("logical_or", """Logical or of any dtypes, by truth value: a bool tensor.

>>> cv.logical_or(cv.asarray([0, 0, 2]), cv.asarray([0.0, 0.5, 0.0]))
Tensor([False,  True,  True])
""")
logical_xor = _binary("logical_xor", """Logical xor of any dtypes, by truth value: a bool tensor.

>>> cv.logical_xor(cv.asarray([1, 1, 0]), cv.asarray([True, False, False]))
Tensor([False,  True, False])
""")
maximum = _binary("maximum", """Elementwise maximum (broadcast, promoted); nan propagates (as numpy's, not ``fmax``).

>>> cv.maximum(cv.asarray([1.0, cv.nan, 3.0]), cv.asarray([2.0, 0.0, 1.0]))
Tensor([ 2., nan,  3.])
""")
minimum = _binary("minimum", """Elementwise minimum (broadcast, promoted); nan propagates (as numpy's, not ``fmin``).

>>> cv.minimum(cv.asarray([1.0, cv.nan, 3.0]), 2.0)
Tensor([ 1., nan,  2.])
""")
multiply = _binary("mul", """``x1 * x2`` (broadcast, promoted; bool * bool is logical and).

>>> cv.multiply(cv.asarray([1, 2]), cv.asarray([3, 4]))
Tensor([3, 8])
>>> cv.multiply(cv.asarray([1, 2]), 0.5)
Tensor([0.5, 1. ])
""")
not_equal = _binary("ne", """``x1 != x2`` elementwise, a bool tensor (True where either is nan).

>>> cv.not_equal(cv.asarray([1.0, cv.nan]), cv.asarray([1.0, cv.nan]))
Tensor([False,  True])
""")
pow = _binary("pow", """``x1 ** x2`` (IEEE ``pow`` special cases for floats; exact for integers).

An integer to a negative integer power is an ArgumentError (as PyTorch; numpy raises
ValueError): use a float base. Among the IEEE cases, ``x ** 0`` is 1 and ``1 ** y`` is 1, even for nan.

>>> cv.pow(cv.asarray([2, 3]), 2)
Tensor([4, 9])
>>> cv.pow(cv.asarray([cv.nan, 1.0, 4.0]), cv.asarray([0.0, cv.nan, 0.5]))
Tensor([1., 1., 2.])
""")  # noqa: A001
remainder = _binary("remainder", """``x1 % x2`` with the sign of ``x2`` (Python semantics; C's ``fmod`` has ``x1``'s).

>>> cv.remainder(cv.asarray([7, -7]), 3)
Tensor([1, 2])
>>> cv.remainder(cv.asarray([7.0, -7.0]), -3)
Tensor([-2., -1.])
""")
subtract = _binary("sub", """``x1 - x2`` (broadcast, promoted; either may be a Python scalar).

>>> cv.subtract(cv.asarray([5, 3]), 1)
Tensor([4, 2])
>>> cv.subtract(10, cv.asarray([1, 2]))
Tensor([9, 8])
""")


def positive(x: Tensor, /) -> Tensor:
    """``+x``: ``x`` itself (TypeError for bool, which has no arithmetic).

    >>> cv.positive(cv.asarray([-1, 2]))
    Tensor([-1,  2])
    """
    x = _t(x)
    if x.dtype.is_bool:
        raise TypeError("positive is not defined for bool tensors")
    return x


def round(x: Tensor, /, *, decimals: int = 0) -> Tensor:  # noqa: A001
    """Round half to even, as numpy (``decimals`` is a corvid extension: places after the point).

    >>> cv.round(cv.asarray([0.5, 1.5, 2.5, -1.5]))
    Tensor([ 0.,  2.,  2., -2.])
    >>> cv.round(cv.asarray([3.14159, 2.71828]), decimals=2)
    Tensor([3.14, 2.72])
    """
    return _t(x).round(decimals)


def clip(x: Tensor, /, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    """``x`` limited to ``[min, max]`` (either may be None); the result keeps ``x``'s dtype.
    nan in ``x`` or in a bound gives nan; with ``min > max`` the result is ``max`` (as numpy).

    >>> cv.clip(cv.asarray([-2, 0, 5]), 0, 3)
    Tensor([0, 0, 3])
    >>> cv.clip(cv.asarray([-2.0, cv.nan, 5.0]), max=1.0)
    Tensor([-2., nan,  1.])
    """
    x = _t(x)
    if min is None and max is None:  # (the standard's identity; the PyTorch-style method raises)
        return x
    out = x.clip(min, max)
    return out if out.dtype is x.dtype else out.astype(x.dtype)


def real(x: Tensor, /) -> Tensor:
    """The real part (float32 for complex64, float64 for complex128); ``x`` itself for real input.

    >>> cv.real(cv.asarray([1 + 2j, 3 - 1j]))
    Tensor([1., 3.])
    """
    return _t(x).real


def conj(x: Tensor, /) -> Tensor:
    """The complex conjugate; ``x`` itself for real input.

    >>> cv.conj(cv.asarray([1 + 2j, 3 - 1j]))
    Tensor([1.-2.j, 3.+1.j], dtype=complex64)
    """
    return _t(x).conj()


def imag(x: Tensor, /) -> Tensor:
    """The imaginary part (float32 for complex64, float64 for complex128); zeros of ``x``'s shape and
    dtype for real input.

    >>> cv.imag(cv.asarray([1 + 2j, 3 - 1j]))
    Tensor([ 2., -1.])
    >>> cv.imag(cv.asarray([1.0, 2.0]))
    Tensor([0., 0.])
    """
    return _t(x).imag


def _special_binary(fn, doc: str):
    def wrapped(x1: Any, x2: Any, /) -> Tensor:
        a, b = _pair(x1, x2)
        return fn(a, b)
    wrapped.__doc__ = doc
    return wrapped


copysign = _special_binary(special.copysign, special.copysign.__doc__)
hypot = _special_binary(special.hypot, special.hypot.__doc__)
logaddexp = _special_binary(special.logaddexp, special.logaddexp.__doc__)
nextafter = _special_binary(special.nextafter, special.nextafter.__doc__)


def _special_unary(fn):
    def wrapped(x: Tensor, /) -> Tensor:
        return fn(_t(x))
    wrapped.__doc__ = fn.__doc__
    return wrapped


signbit = _special_unary(special.signbit)
erf = _special_unary(special.erf)
erfc = _special_unary(special.erfc)
erfinv = _special_unary(special.erfinv)
lgamma = _special_unary(special.lgamma)
digamma = _special_unary(special.digamma)
i0 = _special_unary(special.i0)


# --- statistics and utilities --------------------------------------------------------------------------
Axis = int | Sequence[int] | None


def max(x: Tensor, /, *, axis: Axis = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Maximum over ``axis`` (every axis if None); nan propagates; ValueError over an empty axis.

    >>> x = cv.asarray([[1, 5, 2], [4, 0, 6]])
    >>> cv.max(x), cv.max(x, axis=0)
    (Tensor(6), Tensor([4, 5, 6]))
    >>> cv.max(x, axis=1, keepdims=True).shape
    (2, 1)
    >>> cv.max(cv.asarray([1.0, cv.nan, 3.0]))
    Tensor(nan)
    """
    return _t(x).max(axis=axis, keepdims=keepdims)


def min(x: Tensor, /, *, axis: Axis = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Minimum over ``axis`` (every axis if None); nan propagates; ValueError over an empty axis.

    >>> x = cv.asarray([[1, 5, 2], [4, 0, 6]])
    >>> cv.min(x), cv.min(x, axis=1)
    (Tensor(0), Tensor([1, 0]))
    """
    return _t(x).min(axis=axis, keepdims=keepdims)


def mean(x: Tensor, /, *, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over ``axis`` (every axis if None; nan over an empty axis).

    Integer and bool input computes in float32 (numpy's gives float64).

    >>> x = cv.asarray([[1.0, 2.0], [3.0, 5.0]])
    >>> cv.mean(x), cv.mean(x, axis=1)
    (Tensor(2.75), Tensor([1.5, 4. ]))
    """
    return _t(x).mean(axis, keepdims)


def sum(x: Tensor, /, *, axis: Axis = None, dtype: DTypeLike | None = None,  # noqa: A001
        keepdims: bool = False) -> Tensor:
    """Sum over ``axis`` (every axis if None); bool and signed integers accumulate in int64, unsigned
    in uint64, floats in their dtype, unless ``dtype`` is given (as numpy).

    >>> x = cv.asarray([100, 100], dtype=cv.int8)
    >>> cv.sum(x)
    Tensor(200)
    >>> cv.sum(x, dtype=cv.int8)  # accumulated in int8: wraps
    Tensor(-56, dtype=int8)
    >>> cv.sum(cv.asarray([[1.0, 2.0], [3.0, 4.0]]), axis=0)
    Tensor([4., 6.])
    """
    return _t(x).sum(axis, keepdims, dtype)


def prod(x: Tensor, /, *, axis: Axis = None, dtype: DTypeLike | None = None, keepdims: bool = False) -> Tensor:
    """Product over ``axis`` (every axis if None); accumulation dtypes as :func:`sum`; 1 over an empty
    axis.

    >>> cv.prod(cv.asarray([[1, 2], [3, 4]]), axis=1)
    Tensor([ 2, 12])
    >>> cv.prod(cv.asarray([], dtype=cv.float32))
    Tensor(1.)
    """
    return _t(x).prod(axis, keepdims, dtype)


def var(x: Tensor, /, *, axis: Axis = None, correction: float = 0.0, keepdims: bool = False) -> Tensor:
    """Variance over ``axis`` with ``correction`` subtracted from the count (nan when nothing is left).

    ``correction=0`` (the default, numpy's ``ddof=0``) is the population variance, ``correction=1``
    the unbiased sample variance (PyTorch's default).

    >>> x = cv.asarray([1.0, 2.0, 3.0, 4.0])
    >>> cv.var(x), cv.round(cv.var(x, correction=1), decimals=4)
    (Tensor(1.25), Tensor(1.6667))
    """
    return _t(x).var(axis=axis, keepdims=keepdims, correction=correction)


def std(x: Tensor, /, *, axis: Axis = None, correction: float = 0.0, keepdims: bool = False) -> Tensor:
    """Standard deviation, ``sqrt(var)``, with ``correction`` as in :func:`var`.

    >>> cv.std(cv.asarray([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]))
    Tensor(2.)
    """
    return _t(x).std(axis=axis, keepdims=keepdims, correction=correction)


def all(x: Tensor, /, *, axis: Axis = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """True where every element over ``axis`` is non-zero (True over an empty axis); a bool tensor.

    >>> cv.all(cv.asarray([[1, 0], [2, 3]]), axis=1)
    Tensor([False,  True])
    >>> cv.all(cv.asarray([], dtype=cv.bool))
    Tensor(True)
    """
    return _t(x).all(axis, keepdims)


def any(x: Tensor, /, *, axis: Axis = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """True where some element over ``axis`` is non-zero (False over an empty axis); nan counts as
    non-zero.

    >>> cv.any(cv.asarray([[1, 0], [0, 0]]), axis=1)
    Tensor([ True, False])
    >>> cv.any(cv.asarray([0.0, cv.nan]))
    Tensor(True)
    """
    return _t(x).any(axis, keepdims)


# --- manipulation --------------------------------------------------------------------------------------
def broadcast_to(x: Tensor, /, shape: Sequence[int]) -> Tensor:
    """``x`` broadcast to ``shape`` (a view; ValueError if incompatible).

    >>> cv.broadcast_to(cv.asarray([1, 2, 3]), (2, 3))
    Tensor([[1, 2, 3],
            [1, 2, 3]])
    """
    return _t(x).broadcast_to(tuple(shape))


def concat(arrays: Sequence[Tensor], /, axis: int | None = 0) -> Tensor:
    """Join tensors along an existing axis (``axis=None`` flattens them first); promoted dtype.

    The Array API name of numpy's ``concatenate`` and PyTorch's ``cat``.

    >>> a, b = cv.asarray([[1, 2]]), cv.asarray([[3, 4]])
    >>> cv.concat([a, b])
    Tensor([[1, 2],
            [3, 4]])
    >>> cv.concat([a, b], axis=1)
    Tensor([[1, 2, 3, 4]])
    >>> cv.concat([cv.asarray([1, 2]), cv.asarray([[3.5]])], axis=None)
    Tensor([1. , 2. , 3.5])
    """
    ts = [_t(a) for a in arrays]
    if axis is None:
        return cat([t.reshape(-1) for t in ts], 0)
    return cat(ts, axis)


def flip(x: Tensor, /, *, axis: Axis = None) -> Tensor:
    """Reverse the order of elements along ``axis`` (an int or a tuple; every axis if None).

    >>> x = cv.asarray([[1, 2], [3, 4]])
    >>> cv.flip(x, axis=1)
    Tensor([[2, 1],
            [4, 3]])
    >>> cv.flip(x)
    Tensor([[4, 3],
            [2, 1]])
    """
    return _t(x).flip(axis)


def permute_dims(x: Tensor, /, axes: Sequence[int]) -> Tensor:
    """Reorder dimensions (negative axes allowed); ValueError unless ``axes`` is a permutation.

    numpy's ``transpose(x, axes)``, PyTorch's ``permute``.

    >>> cv.permute_dims(cv.zeros((2, 3, 4)), (2, 0, 1)).shape
    (4, 2, 3)
    """
    return _t(x).permute(tuple(axes))


def reshape(x: Tensor, /, shape: Sequence[int], *, copy: bool | None = None) -> Tensor:
    """``x`` with a new shape of the same size (one entry may be -1). A reshape never copies, so
    ``copy=False`` always succeeds and ``copy=True`` gives an independent handle.

    >>> cv.reshape(cv.arange(6), (2, -1))
    Tensor([[0, 1, 2],
            [3, 4, 5]])
    """
    out = _t(x).reshape(tuple(shape))
    return _copy_tensor(out) if copy else out


def squeeze(x: Tensor, /, axis: int | Sequence[int]) -> Tensor:
    """Remove the size-1 dimensions ``axis`` (ValueError if one is not size 1; the PyTorch-style
    method leaves such a dimension alone).

    Unlike numpy's, ``axis`` is required, as the standard says.

    >>> x = cv.zeros((1, 3, 1))
    >>> cv.squeeze(x, axis=0).shape, cv.squeeze(x, axis=(0, 2)).shape
    ((3, 1), (3,))
    >>> x.squeeze(1).shape  # the method: size 3, left alone
    (1, 3, 1)
    """
    return _t(x).squeeze(axis=axis)


# --- searching -----------------------------------------------------------------------------------------
def argmax(x: Tensor, /, *, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the first maximum (the first nan, if any) along ``axis`` (flattened if None), int64.

    >>> x = cv.asarray([[1, 5, 5], [7, 0, 2]])
    >>> cv.argmax(x, axis=1)
    Tensor([1, 0])
    >>> cv.argmax(x)  # in the flattened tensor
    Tensor(3)
    >>> cv.argmax(cv.asarray([1.0, cv.nan, 3.0]))
    Tensor(1)
    """
    return _t(x).argmax(axis, keepdims)


def argmin(x: Tensor, /, *, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the first minimum (the first nan, if any) along ``axis`` (flattened if None), int64.

    >>> cv.argmin(cv.asarray([[1, 5, 0], [7, 0, 0]]), axis=1, keepdims=True)
    Tensor([[2],
            [1]])
    """
    return _t(x).argmin(axis, keepdims)


def count_nonzero(x: Tensor, /, *, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Number of non-zero elements over ``axis`` (every axis if None; nan counts as non-zero), int64.

    >>> x = cv.asarray([[0, 1, 2], [0, 0, 3]])
    >>> cv.count_nonzero(x), cv.count_nonzero(x, axis=1)
    (Tensor(3), Tensor([2, 1]))
    """
    x = _t(x)
    return x.ne(0).sum(axis, keepdims, dt.int64)


# --- sets ----------------------------------------------------------------------------------------------
def isin(x1: Tensor | int, x2: Tensor | int, /, *, invert: bool = False) -> Tensor:
    """True where an element of ``x1`` equals some element of ``x2`` (``invert=True``: equals none),
    a bool tensor of ``x1``'s shape (0-d for a scalar ``x1``). Equality is :func:`equal`'s after
    promotion: nan is in nothing, -0 is in a set holding +0. One of the two must be a tensor
    (TypeError otherwise).

    Every pair is compared in one fused reduce, ``O(x1.size * x2.size)`` work and no sort: lazy and
    the same on every device. (``searchsorted`` counts by comparison too, so a sorted ``x2`` would
    save nothing.)

    >>> isin(asarray([1, 2, 3]), asarray([3, 1])).tolist()
    [True, False, True]
    """
    if not isinstance(x1, Tensor) and not isinstance(x2, Tensor):
        raise TypeError(f"isin needs a tensor for x1 or x2, got {type(x1).__name__} and {type(x2).__name__}")
    # (a scalar is compared as it is: exactly, even a Python int beyond the tensor's dtype)
    if not isinstance(x2, Tensor):
        found = x1.eq(x2)
    elif not isinstance(x1, Tensor):
        found = x2.eq(x1).any()
    else:
        found = x1[..., None].eq(x2.reshape(-1)).any(-1)
    return found.logical_not() if invert else found


# --- linear algebra in the main namespace --------------------------------------------------------------
def matmul(x1: Tensor, x2: Tensor, /) -> Tensor:
    """Matrix product (numpy semantics for 1-d operands and batch broadcasting).

    A 1-d first operand is a row vector, a 1-d second one a column vector, and the added dimension
    is removed from the result; the leading (batch) dimensions broadcast. The ``@`` operator.

    >>> cv.matmul(cv.asarray([[1, 2], [3, 4]]), cv.asarray([1, 1]))
    Tensor([3, 7])
    >>> cv.matmul(cv.ones((5, 2, 3)), cv.ones((3, 4))).shape
    (5, 2, 4)
    """
    return _t(x1).matmul(_t(x2))


def matrix_transpose(x: Tensor, /) -> Tensor:
    """The last two dimensions swapped (ValueError below 2 dimensions); the ``.mT`` property.

    >>> cv.matrix_transpose(cv.asarray([[1, 2, 3]]))
    Tensor([[1],
            [2],
            [3]])
    >>> cv.matrix_transpose(cv.zeros((5, 2, 3))).shape
    (5, 3, 2)
    """
    return _t(x).mT


def tensordot(x1: Tensor, x2: Tensor, /, *, axes: int | tuple[Sequence[int], Sequence[int]] = 2) -> Tensor:
    """Sum of products over ``axes``: the last ``axes`` of ``x1`` with the first of ``x2``, or the
    explicit pairs ``(axes1, axes2)``; the free axes of ``x1`` come first in the result.

    >>> cv.tensordot(cv.ones((2, 3, 4)), cv.ones((3, 4, 5))).shape  # axes=2: over (3, 4)
    (2, 5)
    >>> cv.tensordot(cv.ones((2, 3)), cv.ones((2, 5)), axes=([0], [0])).shape
    (3, 5)
    >>> cv.tensordot(cv.asarray([1, 2]), cv.asarray([3, 4]), axes=0)  # the outer product
    Tensor([[3, 4],
            [6, 8]])
    """
    a, b = _t(x1), _t(x2)
    if isinstance(axes, int):
        if axes < 0:
            raise ValueError(f"tensordot: axes must be non-negative, got {axes}")
        ax1, ax2 = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        ax1 = [normalize_axis(i, a.ndim) for i in axes[0]]
        ax2 = [normalize_axis(i, b.ndim) for i in axes[1]]
    if len(ax1) != len(ax2) or builtins.any(a.shape[i] != b.shape[j] for i, j in zip(ax1, ax2)):
        raise ShapeError(f"tensordot: axes {ax1} of shape {a.shape} do not match axes {ax2} of shape {b.shape}")
    free1 = [i for i in range(a.ndim) if i not in ax1]
    free2 = [j for j in range(b.ndim) if j not in ax2]
    k = math.prod(a.shape[i] for i in ax1)
    left = a.permute(free1 + ax1).reshape(math.prod(a.shape[i] for i in free1), k)
    right = b.permute(ax2 + free2).reshape(k, math.prod(b.shape[j] for j in free2))
    return left.matmul(right).reshape(tuple(a.shape[i] for i in free1) + tuple(b.shape[j] for j in free2))


def vecdot(x1: Tensor, x2: Tensor, /, *, axis: int = -1) -> Tensor:
    """Dot product over ``axis`` of the broadcast operands; complex ``x1`` is conjugated (``sum(conj(x1)*x2)``).

    >>> cv.vecdot(cv.asarray([[1.0, 2.0], [3.0, 4.0]]), cv.asarray([1.0, 1.0]))
    Tensor([3., 7.])
    >>> cv.vecdot(cv.asarray([1j, 1]), cv.asarray([1j, 1]))  # conj(1j) * 1j + 1
    Tensor(2.+0.j, dtype=complex64)
    """
    a, b = _t(x1), _t(x2)
    shape = broadcast_shapes(a.shape, b.shape)
    ax = normalize_axis(axis, len(shape))
    k = ax - len(shape)  # the axis counted from the end, as both operands align there
    sizes = [t.shape[k] if -k <= t.ndim else 1 for t in (a, b)]  # (a missing axis broadcasts: size 1)
    if a.ndim and b.ndim and sizes[0] != sizes[1]:
        raise ShapeError(f"vecdot: the sizes along axis {axis} differ ({sizes[0]} and {sizes[1]}, of shapes "
                         f"{a.shape} and {b.shape}); the standard does not broadcast the contracted axis")
    products = a.conj() * b
    # the standard's promotion and no wider: uint8 vectors give a uint8 dot product (wrapping as
    # uint8 arithmetic does), where a plain sum would accumulate in uint64
    return products.sum(ax, dtype=None if products.dtype.is_bool else products.dtype)


# --- inspection ----------------------------------------------------------------------------------------
class _Info:
    """What ``__array_namespace_info__()`` returns: capabilities, devices and dtypes of corvid."""

    def capabilities(self) -> dict[str, Any]:
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": None}

    def default_device(self) -> str:
        return canonical_device(None)

    def devices(self) -> tuple[str, ...]:
        """The devices that start here, fastest first (:func:`corvid.devices`, as the standard's
        tuple); ``CPU:1`` and the other logical devices work when named too (see ``docs/devices.md``)."""
        from .runtime.device import devices

        return tuple(devices())

    def default_dtypes(self, *, device: str | None = None) -> dict[str, DType]:
        canonical_device(device)
        return {"real floating": dt.default_float, "complex floating": dt.default_complex,
                "integral": dt.default_int, "indexing": dt.int64}

    def dtypes(self, *, device: str | None = None, kind: str | tuple | None = None) -> dict[str, DType]:
        """The standard's dtypes corvid has (float16, bfloat16 and the 8-bit floats are extra and not
        listed), by kind."""
        canonical_device(device)
        names = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32",
                 "float64", "complex64", "complex128")
        found = {n: dt.to_dtype(n) for n in names}
        return found if kind is None else {n: d for n, d in found.items() if isdtype(d, kind)}


def __array_namespace_info__() -> _Info:
    """Inspection of the namespace: ``capabilities()``, ``default_device()``, ``devices()``,
    ``default_dtypes()``, ``dtypes(kind=...)``."""
    return _Info()

"""Creating tensors: constants, ranges, identity matrices, and random numbers.

Constants never allocate: ``zeros((1000, 1000))`` is one scalar broadcast, materialized only if a
kernel stores it. ``arange`` is an index computed inside the kernel that reads it.
"""

from __future__ import annotations

import math
import operator
from typing import Any

from . import dtype as dt
from .dtype import DType, DTypeLike
from .graph.node import Op, node
from .graph.symbolic import Num, Sym, SymbolicSizeError, as_size
from .ops.movement import check_size
from . import random as _random
from .random import manual_seed, randint
from .runtime.device import canonical_device
from .tensor import Tensor, _check_int_fill, _const_node

__all__ = ["zeros", "ones", "full", "empty", "arange", "linspace", "eye", "zeros_like", "ones_like", "full_like",
           "empty_like", "rand", "randn", "randint", "manual_seed"]


def _shape(shape: Any, itemsize: int = 1, what: str | None = None) -> tuple[int, ...]:
    """``shape`` as a tuple of ints: TypeError for anything else, ValueError for a negative
    dimension or a tensor of more than 2**63 - 1 bytes (of ``itemsize``-byte elements)."""
    if isinstance(shape, (int, Sym)):
        shape = (shape,)
    try:
        out = tuple(as_size(s) if isinstance(s, Sym) else int(s.__index__()) for s in shape)
    except (AttributeError, TypeError):
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    if any(s < 0 for s in out):
        raise ValueError(f"negative dimensions are not allowed: {out}")
    check_size(out, itemsize, what)
    return out


def _dtype_for(value: Any, dtype: DTypeLike | None) -> DType:
    return dt.to_dtype(dtype) if dtype is not None else dt.python_scalar_dtype(value)


def _leaf(t: Tensor, requires_grad: bool) -> Tensor:
    """``t`` made a ``requires_grad`` leaf when asked (TypeError for non-float dtypes)."""
    return t.requires_grad_() if requires_grad else t


def full(shape: Any, fill_value: bool | int | float, dtype: DTypeLike | None = None, device: str | None = None,
         requires_grad: bool = False) -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value`` (dtype from the value if not given).

    A Python bool gives bool, an int int64, a float float32. Every float creation function takes
    ``requires_grad=True`` to make a leaf for ``backward()``.

    >>> cv.full((2, 3), 7)
    Tensor([[7, 7, 7],
            [7, 7, 7]])
    >>> cv.full(2, 0.5, dtype=cv.float16)
    Tensor([0.5, 0.5], dtype=float16)
    """
    d = _dtype_for(fill_value, dtype)
    _check_int_fill(fill_value, d, dtype is not None, "full")
    out = _const_node(fill_value, d, _shape(shape, d.itemsize))
    return _leaf(Tensor._from_node(out, canonical_device(device)), requires_grad)


def zeros(shape: Any = (), *dims: int, dtype: DTypeLike | None = None, device: str | None = None,
          requires_grad: bool = False) -> Tensor:
    """Zeros of ``shape``, default float32: ``zeros((2, 3))`` or ``zeros(shape=(2, 3))`` (the Array
    API's signature), or ``zeros(2, 3)`` (PyTorch's); ``zeros()`` is 0-d. TypeError for a shape
    that is not ints, ValueError for a negative dimension.

    >>> zeros(2, 3).shape == zeros(shape=(2, 3)).shape == (2, 3)
    True
    """
    return full(_varargs((shape, *dims)), 0.0 if dtype is None else 0, dtype or dt.default_float, device, requires_grad)


def ones(shape: Any = (), *dims: int, dtype: DTypeLike | None = None, device: str | None = None,
         requires_grad: bool = False) -> Tensor:
    """Ones of ``shape`` (spelled as for :func:`zeros`), default float32.

    >>> cv.ones(2, 3)
    Tensor([[1., 1., 1.],
            [1., 1., 1.]])
    >>> cv.ones((2,), dtype=cv.int32)
    Tensor([1, 1], dtype=int32)
    """
    return full(_varargs((shape, *dims)), 1.0 if dtype is None else 1, dtype or dt.default_float, device, requires_grad)


def empty(shape: Any = (), *dims: int, dtype: DTypeLike | None = None, device: str | None = None,
          requires_grad: bool = False) -> Tensor:
    """Uninitialized values in the Array API sense; corvid gives zeros (a constant costs nothing).

    Unlike numpy's and PyTorch's, the values are therefore deterministic, but code should not rely
    on that.

    >>> x = cv.empty(2, 3)
    >>> x.shape, x.dtype
    ((2, 3), corvid.float32)
    """
    return zeros(shape, *dims, dtype=dtype, device=device, requires_grad=requires_grad)


def rand(*shape: Any, dtype: DTypeLike | None = None, device: str | None = None, requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1) of ``shape``, default float32, from the global generator (see
    :func:`corvid.manual_seed`; :func:`corvid.random.uniform` takes an explicit key).

    >>> x = cv.rand(2, 3)
    >>> x.shape, x.dtype
    ((2, 3), corvid.float32)
    >>> bool(((x >= 0) & (x < 1)).all())
    True
    """
    return _leaf(_random.rand(*shape, dtype=dtype, device=device), requires_grad)


def randn(*shape: Any, dtype: DTypeLike | None = None, device: str | None = None,
          requires_grad: bool = False) -> Tensor:
    """Standard normal samples of ``shape``, default float32, from the global generator (see
    :func:`corvid.manual_seed`; :func:`corvid.random.normal` takes an explicit key).

    >>> x = cv.randn(2, 3, dtype=cv.float64)
    >>> x.shape, x.dtype
    ((2, 3), corvid.float64)
    >>> bool(x.isfinite().all())
    True
    """
    return _leaf(_random.randn(*shape, dtype=dtype, device=device), requires_grad)


def _varargs(shape: tuple[Any, ...]) -> Any:
    """The shape in ``f(2, 3)`` or ``f((2, 3))``, given the positional arguments."""
    return shape[0] if len(shape) == 1 and not isinstance(shape[0], (int, Sym)) else shape


def full_like(x: Tensor, fill_value: bool | int | float, dtype: DTypeLike | None = None,
              requires_grad: bool = False) -> Tensor:
    return full(x.shape, fill_value, dtype or x.dtype, x.device, requires_grad)


def zeros_like(x: Tensor, dtype: DTypeLike | None = None, requires_grad: bool = False) -> Tensor:
    return full(x.shape, 0, dtype or x.dtype, x.device, requires_grad)


def ones_like(x: Tensor, dtype: DTypeLike | None = None, requires_grad: bool = False) -> Tensor:
    return full(x.shape, 1, dtype or x.dtype, x.device, requires_grad)


def empty_like(x: Tensor, dtype: DTypeLike | None = None, requires_grad: bool = False) -> Tensor:
    return zeros_like(x, dtype, requires_grad)


def arange(start: float, stop: float | None = None, step: float = 1, dtype: DTypeLike | None = None,
           device: str | None = None, requires_grad: bool = False) -> Tensor:
    """``start, start+step, ...`` below ``stop`` (``arange(n)`` counts from 0). Ints give int64.

    OverflowError when an integer result has a value its dtype cannot hold (numpy gives float64
    for ``arange(2**63 - 2, 2**63 + 2)``, rounding all four values to 2**63; a C cast would wrap
    them); ValueError for a zero step or a tensor too big to address.

    >>> cv.arange(5)
    Tensor([0, 1, 2, 3, 4])
    >>> cv.arange(5, 0, -2)
    Tensor([5, 3, 1])
    >>> cv.arange(1, 2, 0.25)
    Tensor([1.  , 1.25, 1.5 , 1.75])
    """
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    if isinstance(start, Sym) or isinstance(stop, Sym):  # symbolic sizes (a jit trace): integer steps
        return _symbolic_arange(start, stop, step, dtype, device, requires_grad)
    n = max(math.ceil((stop - start) / step), 0)
    d = dt.to_dtype(dtype) if dtype is not None else dt.result_type(start, stop, step)
    if d is dt.bool_:
        raise TypeError("arange does not produce bool tensors")
    if d.is_int and n:
        info = dt.iinfo(d)
        last = start + (n - 1) * step
        if not (info.min <= start <= info.max and info.min <= last <= info.max):
            raise OverflowError(f"arange: the values run from {start} to {last}, beyond the range of {d.name} "
                                f"[{info.min}, {info.max}]")
    check_size((n,), d.itemsize, "arange")
    dev = canonical_device(device)
    idx = Tensor._from_node(node(Op.IOTA, (), None, dt.int64 if not d.is_float else d, (n,)), dev)
    out = idx * step + start if n and (step != 1 or start != 0) else idx
    return _leaf(out.astype(d), requires_grad)


def _symbolic_arange(start: Any, stop: Any, step: Any, dtype: DTypeLike | None, device: str | None,
                     requires_grad: bool) -> Tensor:
    """``arange`` whose start or stop is a symbolic size: integers, the count computed by the kernels."""
    if type(step) is not int or not all(isinstance(x, (int, Sym)) and not isinstance(x, bool) for x in (start, stop)):
        raise TypeError("arange with a symbolic size takes integer start, stop and step")
    n = (stop - start + step - 1) // step if step > 0 else (start - stop - step - 1) // -step
    if not isinstance(n, Sym) or isinstance(n, Num):
        n = int(n)
    if isinstance(n, Sym) and n.vmin < 0:
        raise SymbolicSizeError(f"arange({start!r}, {stop!r}, {step}) may be empty or negative in length: its count "
                                "depends on the symbolic sizes")
    d = dt.to_dtype(dtype) if dtype is not None else dt.int64
    dev = canonical_device(device)
    idx = Tensor._from_node(node(Op.IOTA, (), None, dt.int64 if not d.is_float else d, (n,)), dev)
    out = idx * step + start if (step != 1 or not (isinstance(start, int) and start == 0)) else idx
    return _leaf(out.astype(d), requires_grad)


def linspace(start: float, stop: float, num: int, endpoint: bool = True, dtype: DTypeLike | None = None,
             device: str | None = None, requires_grad: bool = False) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop`` (included if ``endpoint``).

    TypeError when ``num`` is not an integer (``2.0``, nan) or ``dtype`` is bool; ValueError when
    ``num`` is negative or the tensor is too big to address.

    >>> cv.linspace(0, 1, 5)
    Tensor([0.  , 0.25, 0.5 , 0.75, 1.  ])
    >>> cv.linspace(0, 1, 4, endpoint=False)
    Tensor([0.  , 0.25, 0.5 , 0.75])
    """
    try:
        num = operator.index(num)
    except TypeError:
        raise TypeError(f"linspace: num must be an integer, got {num!r}") from None
    if num < 0:
        raise ValueError(f"linspace: num must be non-negative, got {num}")
    d = dt.to_dtype(dtype) if dtype is not None else dt.default_float
    if d is dt.bool_:
        raise TypeError("linspace does not produce bool tensors")
    check_size((num,), d.itemsize, "linspace")
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    idx = Tensor._from_node(node(Op.IOTA, (), None, dt.float64, (num,)), canonical_device(device))
    out = idx * step + start
    if endpoint and num > 1:
        from .ops.elementwise import where

        out = where(arange(num, device=device).eq(num - 1), float(stop), out)
    return _leaf(out.astype(d), requires_grad)


def eye(n: int, m: int | None = None, k: int = 0, dtype: DTypeLike | None = None, device: str | None = None,
        requires_grad: bool = False) -> Tensor:
    """``n x m`` matrix with ones on the ``k``-th diagonal. TypeError unless ``n``, ``m`` and ``k``
    are integers; ValueError for a negative size (numpy: "negative dimensions are not allowed").

    ``k > 0`` is above the main diagonal, ``k < 0`` below; ``m`` defaults to ``n``.

    >>> cv.eye(2)
    Tensor([[1., 0.],
            [0., 1.]])
    >>> cv.eye(2, 3, k=1, dtype=cv.int32)
    Tensor([[0, 1, 0],
            [0, 0, 1]], dtype=int32)
    """
    try:
        n, m, k = operator.index(n), operator.index(n if m is None else m), operator.index(k)
    except TypeError:
        raise TypeError(f"eye: n, m and k must be integers, got {n!r}, {m!r}, {k!r}") from None
    d = dt.to_dtype(dtype) if dtype is not None else dt.default_float
    _shape((n, m), d.itemsize, "eye")
    rows = arange(n, device=device).reshape(n, 1)
    cols = arange(m, device=device).reshape(1, m)
    return _leaf((cols - rows).eq(k).astype(d), requires_grad)


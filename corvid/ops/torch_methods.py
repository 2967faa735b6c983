"""Tensor methods with PyTorch's names, signatures and semantics.

The ``cv`` namespace follows the Array API and numpy; ``Tensor``'s methods follow PyTorch, so that
PyTorch code ports by changing the import. This module adds the methods PyTorch has and corvid
lacked, and adapts the ones whose signature differed; :func:`_attach` (run on import, after every
other ops module) sets them on ``Tensor``. Each is composed of corvid ops, so it stays lazy and
differentiable, and the ``cv.*`` functions keep their own semantics.

Where numpy and PyTorch give a method name two meanings, the method is PyTorch's, positional
forms included: ``x.max(1)``, ``x.min(1)`` and ``x.sort(1)`` are ``(values, indices)``,
``x.var()``/``x.std()`` unbiased, ``x.squeeze(d)`` a no-op on a size that is not 1,
``x.nonzero()`` the ``(n, ndim)`` tensor and ``x.repeat(2, 3)`` a tiling. numpy's keyword names
(``axis=``, ``keepdims=``, ``ddof=``) select numpy's meaning on these methods, which is how
corvid's own code and the ``cv`` functions call them. ``docs/pytorch.md`` lists every difference.

In-place methods (``add_``, ``fill_``, ...) rebind the tensor to a new graph, as ``+=`` does
(:meth:`Tensor.assign`); views share no memory, so ``x[0].add_(1)`` leaves ``x`` unchanged.
``masked_select``, ``nonzero``, ``unique`` and ``repeat_interleave`` with tensor counts have
data-dependent shapes: they compute their input first.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from ..errors import ArgumentError, ShapeError
from .. import dtype as dt
from ..creation import full
from ..dtype import DType, DTypeLike
from ..linalg import cross as _linalg_cross
from ..tensor import Tensor, broadcast_shapes, result_type
from . import indexing, manipulation, scan, sorting, special
from .elementwise import ElementwiseMixin, where
from .movement import MovementMixin, _shape_arg, normalize_axis, stack
from .reduce import ReduceMixin
from .scan import ValuesIndices


class MinMax(NamedTuple):
    """What ``aminmax`` returns (PyTorch's field names)."""

    min: Tensor
    max: Tensor


def _tensor(like: Tensor, x: Any) -> Tensor:
    """``x`` as a tensor on ``like``'s device (a Tensor is returned as is)."""
    return x if isinstance(x, Tensor) else Tensor(x, device=like.device)


def _int_arg(value: Any, what: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    return int(value.__index__())


# --- PyTorch's keyword names for existing methods ----------------------------------------------------
def _torch_names(fn: Callable[..., Any], name: str, **aliases: str) -> Callable[..., Any]:
    """``fn`` as a method that also takes PyTorch's keyword names: ``aliases`` maps each one to
    ``fn``'s own (``dim="axis"``). TypeError when a call gives both names."""

    @functools.wraps(fn)
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Any:
        for theirs, ours in aliases.items():
            if theirs in kwargs:
                if ours in kwargs:
                    raise TypeError(f"{name}() got both {theirs}= and {ours}=; they name the same argument")
                kwargs[ours] = kwargs.pop(theirs)
        return fn(self, *args, **kwargs)

    names = ", ".join(f"{t}= for {o}=" for t, o in aliases.items())
    method.__doc__ = f"{fn.__doc__ or ''}\n\nPyTorch's keyword names work too: {names}."
    method.__name__ = method.__qualname__ = name
    return method


_DIM = {"dim": "axis", "keepdim": "keepdims"}
_RENAMED: dict[str, tuple[Callable[..., Any], dict[str, str]]] = {
    "sum": (ReduceMixin.sum, _DIM), "prod": (ReduceMixin.prod, _DIM), "any": (ReduceMixin.any, _DIM),
    "all": (ReduceMixin.all, _DIM), "argmax": (ReduceMixin.argmax, _DIM), "argmin": (ReduceMixin.argmin, _DIM),
    "logsumexp": (ReduceMixin.logsumexp, _DIM), "softmax": (ReduceMixin.softmax, _DIM),
    "log_softmax": (ReduceMixin.log_softmax, _DIM), "unsqueeze": (MovementMixin.unsqueeze, _DIM),
    "cumsum": (scan.cumsum, _DIM), "cumprod": (scan.cumprod, _DIM),
    "cummax": (scan.cummax, _DIM), "cummin": (scan.cummin, _DIM), "logcumsumexp": (scan.logcumsumexp, _DIM),
    "argsort": (sorting.argsort, _DIM), "topk": (sorting.topk, _DIM), "diff": (manipulation.diff, _DIM),
    "roll": (manipulation.roll, {"shifts": "shift", "dims": "axis"}),
    "rot90": (manipulation.rot90, {"dims": "axes"}),
    "diagonal": (manipulation.diagonal, {"dim1": "axis1", "dim2": "axis2"}),
    "tril": (manipulation.tril, {"diagonal": "k"}), "triu": (manipulation.triu, {"diagonal": "k"}),
    "gather": (indexing.gather, _DIM), "scatter": (indexing.scatter, _DIM),
    "scatter_reduce": (indexing.scatter_reduce, _DIM), "index_select": (indexing.index_select, _DIM),
}


def permute(self: Tensor, *dims: Any, **kwargs: Any) -> Tensor:
    """Reorder dimensions: output dim ``i`` is input dim ``dims[i]`` (``x.permute(1, 0)``,
    ``x.permute((1, 0))`` or ``x.permute(dims=(1, 0))``). ValueError unless a permutation."""
    if "dims" in kwargs:
        if dims:
            raise TypeError("permute() got dims both as arguments and as dims=")
        dims = (kwargs.pop("dims"),)
    if kwargs:
        raise TypeError(f"permute() got unexpected keywords {sorted(kwargs)}")
    return MovementMixin.permute(self, *dims)


def split(self: Tensor, split_size_or_sections: int | Sequence[int], dim: int = 0, *,
          axis: int | None = None) -> tuple[Tensor, ...]:
    """Pieces along ``dim``: of ``split_size_or_sections`` elements each (an int; the last may be
    smaller), or of the listed sizes (which must add up to the size). A tuple of views."""
    return tuple(MovementMixin.split(self, split_size_or_sections, dim if axis is None else axis))


def chunk(self: Tensor, chunks: int, dim: int = 0, *, axis: int | None = None) -> tuple[Tensor, ...]:
    """``chunks`` nearly equal pieces along ``dim`` (PyTorch's rule: pieces of ``ceil(n / chunks)``,
    so there may be fewer; an empty axis gives ``chunks`` empty pieces). ValueError for
    ``chunks <= 0``."""
    a = dim if axis is None else axis
    if self.ndim and self.shape[normalize_axis(a, self.ndim)] == 0 and chunks > 0:
        return (self,) * chunks
    return tuple(MovementMixin.chunk(self, chunks, a))


def flip(self: Tensor, *dims: Any, **kwargs: Any) -> Tensor:
    """Reverse the order of elements along ``dims``: ``x.flip(0)``, ``x.flip(0, 1)``,
    ``x.flip((0, 1))``, ``x.flip(dims=...)`` or ``x.flip(axis=...)``; every axis when none is named
    (a corvid extension: PyTorch requires ``dims``). ValueError for an axis named twice."""
    named = [kwargs.pop(k) for k in ("dims", "axis") if k in kwargs]
    if kwargs or len(named) + bool(dims) > 1:
        raise TypeError("flip() takes the axes once: as arguments, as dims= or as axis=")
    axes = named[0] if named else dims[0] if len(dims) == 1 else dims if dims else None
    return MovementMixin.flip(self, axes)


def tile(self: Tensor, *dims: Any) -> Tensor:
    """``self`` repeated ``dims[i]`` times along each axis (``x.tile(2, 3)`` or ``x.tile((2, 3))``);
    fewer entries than dimensions are padded with ones in front, more add leading axes."""
    return manipulation.tile(self, _shape_arg(dims))


def repeat(self: Tensor, *sizes: Any) -> Tensor:
    """PyTorch's ``x.repeat(*sizes)``: ``self`` tiled ``sizes[i]`` times along each axis, extra
    entries adding leading axes (``x.repeat(2, 3)`` or ``x.repeat((2, 3))``). numpy's element
    repeat is ``cv.repeat`` (or :meth:`repeat_interleave`). ArgumentError for fewer sizes than
    dimensions, as PyTorch.

    >>> import corvid as cv
    >>> cv.Tensor([1, 2]).repeat(2, 2).tolist()
    [[1, 2, 1, 2], [1, 2, 1, 2]]
    """
    shape = _shape_arg(sizes)
    if len(shape) < self.ndim:
        raise ArgumentError(f"repeat: {len(shape)} sizes for a tensor of {self.ndim} dimensions; give one per "
                            "dimension at least (numpy's element repeat is cv.repeat or x.repeat_interleave)")
    return manipulation.tile(self, shape)


# --- forms PyTorch's keywords select ----------------------------------------------------------------
_TORCH_REDUCE_KEYS = ("dim", "keepdim")


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _dim_keepdim(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], default_dim: Any) -> tuple[Any, bool]:
    """``(dim, keepdim)`` from ``x.name(dim, keepdim)``, either positional or by keyword."""
    if len(args) > 2:
        raise TypeError(f"{name}() takes at most 2 positional arguments (dim, keepdim), got {len(args)}")
    if len(args) >= 1 and "dim" in kwargs or len(args) == 2 and "keepdim" in kwargs:
        raise TypeError(f"{name}() got an argument both by position and by keyword")
    dim = kwargs.pop("dim", args[0] if args else default_dim)
    keepdim = kwargs.pop("keepdim", args[1] if len(args) == 2 else False)
    return dim, bool(keepdim)


def _extreme(self: Tensor, op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if len(args) == 1 and not kwargs and isinstance(args[0], Tensor):
        return self.maximum(args[0]) if op == "max" else self.minimum(args[0])
    reduction = ReduceMixin.max if op == "max" else ReduceMixin.min
    numpy_form = any(k in kwargs for k in ("axis", "keepdims")) or (args and not _is_int(args[0]))
    if numpy_form or not (args or kwargs):
        return reduction(self, *args, **kwargs)
    dim, keepdim = _dim_keepdim(op, args, kwargs, None)
    if kwargs:
        raise TypeError(f"{op}() got unexpected keywords {sorted(kwargs)}")
    if dim is None:
        raise TypeError(f"{op}(dim=None) is not a form PyTorch has; use x.{op}() for all elements")
    a = manipulation.axis_of(_int_arg(dim, "dim"), self.ndim)
    if self.ndim == 0:
        return ValuesIndices(self, self._const(0, dt.int64, ()))
    index = ReduceMixin._arg_extreme(self, op, a, True)
    # the values read at the index: the gradient goes to that element only, as PyTorch's does
    values = indexing.gather_prim(self, index, a)
    return ValuesIndices(values, index) if keepdim else ValuesIndices(values.squeeze(a), index.squeeze(a))


def torch_max(self: Tensor, *args: Any, **kwargs: Any) -> Any:
    """The maximum, in PyTorch's three forms and numpy's:

    * ``x.max()``: of all elements (0-d);
    * ``x.max(other)`` with a Tensor: the elementwise maximum (nan wins);
    * ``x.max(d, keepdim=False)`` or ``x.max(dim=d)`` (PyTorch's): ``(values, indices)`` along the
      int ``d``, the index of the first maximum (of the first nan, if any); the gradient goes to
      that element;
    * ``x.max(axis=a, keepdims=False)`` (numpy's keywords) or ``x.max(a)`` with a tuple of axes:
      the reduction alone (numpy and the Array API: ``cv.max``).

    ValueError over an empty axis; TypeError for complex tensors.

    >>> import corvid as cv
    >>> x = cv.Tensor([[1.0, 5.0], [7.0, 2.0]])
    >>> x.max(1).indices.tolist(), x.max(axis=1).tolist()
    ([1, 0], [5.0, 7.0])
    """
    return _extreme(self, "max", args, kwargs)


def torch_min(self: Tensor, *args: Any, **kwargs: Any) -> Any:
    """The minimum: the forms of :func:`torch_max` (``x.min(dim=d)`` is ``(values, indices)``)."""
    return _extreme(self, "min", args, kwargs)


def _spread(self: Tensor, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], torch_default: bool) -> Tensor:
    """``var``'s arguments: PyTorch's ``(dim, unbiased, keepdim)`` (positional) or keywords, whose
    default correction is 1 (``unbiased=False`` or ``correction=`` choose another); numpy's form
    (default correction 0) when one of numpy's keywords ``axis=``, ``keepdims=``, ``ddof=`` is given."""
    if not torch_default and any(k in kwargs for k in ("axis", "keepdims", "ddof")):
        return ReduceMixin.var(self, *args, **kwargs)
    if len(args) > 3:
        raise TypeError(f"{name}() takes at most 3 positional arguments (dim, unbiased, keepdim), got {len(args)}")
    if len(args) >= 2:  # (PyTorch's var(dim, unbiased, keepdim) overload)
        if "unbiased" in kwargs:
            raise TypeError(f"{name}() got unbiased both by position and by keyword")
        kwargs["unbiased"] = args[1]
        args = args[:1] + args[2:]
    unbiased = kwargs.pop("unbiased", None)
    correction = kwargs.pop("correction", None)
    if unbiased is not None and correction is not None:
        raise TypeError(f"{name}() got both unbiased= and correction=; give one")
    dim, keepdim = _dim_keepdim(name, args, kwargs, None)
    if kwargs:
        raise TypeError(f"{name}() got unexpected keywords {sorted(kwargs)}")
    c = correction if correction is not None else 0 if unbiased is False else 1
    return ReduceMixin.var(self, dim, keepdim, c)


def torch_var(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """Variance, PyTorch's ``var(dim=None, *, correction=1, keepdim=False)`` (and its ``var(dim,
    unbiased, keepdim)``): unbiased unless ``unbiased=False`` or ``correction=`` says otherwise.
    With numpy's keywords (``axis=``, ``keepdims=``, ``ddof=``) it is numpy's, which divides by
    ``n`` by default, as ``cv.var`` does.

    >>> import corvid as cv
    >>> x = cv.Tensor([1.0, 2.0, 3.0, 4.0])
    >>> round(x.var().item(), 4), x.var(axis=0).item()
    (1.6667, 1.25)
    """
    return _spread(self, "var", args, kwargs, False)


def torch_std(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """Standard deviation, ``sqrt`` of :func:`torch_var` (the same two forms)."""
    return _spread(self, "std", args, kwargs, False).sqrt()


def var_mean(self: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
    """``(var, mean)`` over ``dim`` as ``torch.var_mean``: unbiased by default, ``correction=``,
    ``unbiased=`` and ``keepdim=`` as in :func:`torch_var`."""
    dim, keepdim = _dim_keepdim("var_mean", args, dict(kwargs), None)
    return _spread(self, "var_mean", args, kwargs, True), mean(self, dim, keepdim)


def std_mean(self: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
    """``(std, mean)`` over ``dim`` as ``torch.std_mean`` (see :func:`var_mean`)."""
    v, m = var_mean(self, *args, **kwargs)
    return v.sqrt(), m


def mean(self: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: DTypeLike | None = None,
         axis: Any = None, keepdims: bool | None = None) -> Tensor:
    """Arithmetic mean over ``dim`` (all if None; an int or a tuple), computed in ``dtype`` when
    given. Integer input gives the default float (PyTorch raises there); empty gives nan. numpy's
    ``axis=``/``keepdims=`` work too."""
    x = self if dtype is None else self.astype(dtype)
    return ReduceMixin.mean(x, dim if axis is None else axis, keepdim if keepdims is None else keepdims)


def squeeze(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """Remove size-1 dimensions: all of them, or those named (``x.squeeze(d)``, ``x.squeeze(dim=d)``,
    an int or a tuple). A named dimension whose size is not 1 is left alone, as in PyTorch
    (``cv.squeeze`` raises there, as numpy and the Array API do); numpy's ``axis=`` keyword keeps
    numpy's error."""
    if "axis" in kwargs:
        return MovementMixin.squeeze(self, *args, **kwargs)
    if len(args) + len(kwargs) > 1 or set(kwargs) - {"dim"}:
        raise TypeError("squeeze() takes one argument, dim")
    dim = kwargs.pop("dim") if kwargs else args[0] if args else None
    if dim is None:
        return MovementMixin.squeeze(self)
    named = [dim] if isinstance(dim, int) else list(dim)
    axes = [a for a in (manipulation.axis_of(d, self.ndim) for d in named) if self.ndim and self.shape[a] == 1]
    return MovementMixin.squeeze(self, tuple(axes)) if axes else self


def nonzero(self: Tensor, *, as_tuple: bool = False) -> Any:
    """Indices of the non-zero elements, row-major, as PyTorch gives them: one int64 tensor of shape
    ``(n, ndim)``; ``as_tuple=True``: one 1-D tensor per dimension (a 0-d tensor counts as 1-D;
    ``cv.nonzero`` is numpy's tuple). Computes ``self``."""
    parts = indexing.nonzero(self.reshape(1) if self.ndim == 0 else self)
    if as_tuple:
        return parts
    if self.ndim == 0:
        return self._const(0, dt.int64, (parts[0].shape[0], 0))
    return stack(parts, 1)


def argwhere(self: Tensor) -> Tensor:
    """Indices of the non-zero elements as an int64 tensor of shape ``(n, ndim)`` (``nonzero(as_tuple=False)``)."""
    return nonzero(self, as_tuple=False)


def sort(self: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Any:
    """PyTorch's ``x.sort(dim=-1, descending=False, stable=False)``: ``(values, indices)`` along
    ``dim`` (``cv.sort`` is the Array API's, the values alone). Always stable: equal values keep
    their order, ascending puts nan last and descending first, as PyTorch. The gradient permutes
    the cotangent back.

    >>> import corvid as cv
    >>> cv.Tensor([3.0, 1.0, 2.0]).sort(0, descending=True).indices.tolist()
    [0, 2, 1]
    """
    dim = _int_arg(dim, "sort: dim")
    order = sorting._sort(self, dim, bool(descending)).indices
    if self.ndim == 0:
        return ValuesIndices(self, order)
    # the values read at the indices: one gather, whose gradient is the exact scatter back (also
    # at infinities, where the sort's own one-hot product gives nan)
    return ValuesIndices(indexing.gather_prim(self, order, manipulation.axis_of(dim, self.ndim)), order)


# --- dtypes and metadata ------------------------------------------------------------------------------
def _cast(d: DType) -> Callable[[Tensor], Tensor]:
    def method(self: Tensor) -> Tensor:
        return self.astype(d)

    method.__doc__ = f"This tensor converted to {d.name} (itself if it is one already)."
    return method


_CASTS = {"float": dt.float32, "double": dt.float64, "half": dt.float16, "bfloat16": dt.bfloat16,
          "int": dt.int32, "long": dt.int64, "short": dt.int16, "char": dt.int8, "byte": dt.uint8,
          "bool": dt.bool_, "cfloat": dt.complex64, "cdouble": dt.complex128}


def type_as(self: Tensor, other: Tensor) -> Tensor:
    """This tensor converted to ``other``'s dtype."""
    return self.astype(other.dtype)


def to(self: Tensor, *args: Any, dtype: DTypeLike | None = None, device: Any = None, non_blocking: bool = False,
       copy: bool = False) -> Tensor:
    """This tensor on a device and/or in a dtype, as PyTorch's ``to``: ``x.to("CPU:1")``,
    ``x.to(cv.float16)``, ``x.to("CPU:1", cv.float16)``, ``x.to(other)`` (other's device and dtype),
    or by keyword. ``copy=True`` returns a new tensor even when nothing changes. Devices as
    :meth:`Tensor.to` (``"cpu"``, ``"CPU:1"``, a list to replicate); ``non_blocking`` is ignored."""
    for a in args:
        if isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif isinstance(a, DType):
            dtype = a
        else:
            device = a
    out = self if device is None else _DEVICE_TO(self, device)
    out = out if dtype is None else out.astype(dtype)
    return clone(out) if copy and out is self else out


def cpu(self: Tensor) -> Tensor:
    """This tensor on the CPU (itself if it is there)."""
    return _DEVICE_TO(self, "CPU")


def clone(self: Tensor, *, memory_format: Any = None) -> Tensor:
    """An independent copy; gradients flow back to ``self``. corvid never writes a value in place,
    so this is a new handle on the same graph (an in-place method on either rebinds only that one),
    except over memory a DLPack or ``from_numpy(copy=False)`` owner may still write, which is
    copied now."""
    buf = self.node.buffer
    if buf is not None and not buf.pooled and not self.requires_grad:
        return Tensor(self.numpy(), device=self.device)
    return Tensor._from_node(self.node, self.device)


def dim(self: Tensor) -> int:
    """The number of dimensions (``ndim``)."""
    return self.ndim


def is_floating_point(self: Tensor) -> bool:
    """True for real floating dtypes (float8 to float64; not complex)."""
    return self.dtype.is_float


def is_complex(self: Tensor) -> bool:
    """True for complex64 and complex128."""
    return self.dtype.is_complex


def element_size(self: Tensor) -> int:
    """Bytes per element."""
    return self.dtype.itemsize


def stride(self: Tensor, dim: int | None = None) -> Any:
    """The row-major strides of this shape, in elements (one of them for ``dim``). corvid stores
    every computed value row-major and keeps views as index arithmetic in the kernels that read
    them, so the contiguous layout is the only one a value has."""
    strides, step = [], 1
    for s in reversed(self.shape):
        strides.append(step)
        step *= max(s, 1)
    out = tuple(reversed(strides))
    return out if dim is None else out[normalize_axis(dim, self.ndim)]


def is_contiguous(self: Tensor, memory_format: Any = None) -> bool:
    """Always True: see :func:`stride`."""
    return True


def _new_shape(size: tuple[Any, ...]) -> tuple[int, ...]:
    return _shape_arg(size) if size else ()


def new_full(self: Tensor, size: Any, fill_value: Any, *, dtype: DTypeLike | None = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """A tensor of ``size`` filled with ``fill_value``, with this tensor's dtype and device unless given."""
    return full(_new_shape((size,)), fill_value, dtype or self.dtype, device or self.device, requires_grad)


def new_zeros(self: Tensor, *size: Any, dtype: DTypeLike | None = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    """Zeros of ``size`` (``new_zeros(2, 3)`` or ``new_zeros((2, 3))``), this tensor's dtype and device unless given."""
    return full(_new_shape(size), 0, dtype or self.dtype, device or self.device, requires_grad)


def new_ones(self: Tensor, *size: Any, dtype: DTypeLike | None = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """Ones of ``size``, this tensor's dtype and device unless given."""
    return full(_new_shape(size), 1, dtype or self.dtype, device or self.device, requires_grad)


def new_tensor(self: Tensor, data: Any, *, dtype: DTypeLike | None = None, device: Any = None,
               requires_grad: bool = False) -> Tensor:
    """A tensor of ``data`` (copied; a Tensor is detached) with this tensor's dtype and device unless given."""
    if isinstance(data, Tensor):
        data = data.detach()
    return Tensor(data, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)


# --- shapes and views ---------------------------------------------------------------------------------
def view(self: Tensor, *shape: Any) -> Tensor:
    """``view(*shape)``: :meth:`Tensor.reshape` (never a copy in corvid, so it works on any tensor).
    ``view(dtype)``: the same bits read as ``dtype`` (:meth:`Tensor.bitcast`); PyTorch also lets
    the item size change, which corvid does not (ValueError naming both sizes)."""
    if len(shape) == 1 and isinstance(shape[0], DType):
        return self.bitcast(shape[0])
    return self.reshape(*shape)


def view_as(self: Tensor, other: Tensor) -> Tensor:
    """This tensor reshaped to ``other``'s shape."""
    return self.reshape(other.shape)


reshape_as = view_as


def expand_as(self: Tensor, other: Tensor) -> Tensor:
    """This tensor broadcast to ``other``'s shape (a view)."""
    return self.expand(other.shape)


def unflatten(self: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    """Dimension ``dim`` split into ``sizes`` (one may be -1). ValueError if they do not multiply to its size.

    >>> import corvid as cv
    >>> cv.zeros(2, 6).unflatten(1, (3, -1)).shape
    (2, 3, 2)
    """
    a = normalize_axis(dim, self.ndim)
    sizes = tuple(int(s) for s in sizes)
    known = math.prod(s for s in sizes if s != -1)
    if sizes.count(-1) > 1 or (-1 in sizes and (known == 0 or self.shape[a] % known)) or \
            (-1 not in sizes and known != self.shape[a]):
        raise ShapeError(f"unflatten: sizes {sizes} do not fill dimension {a} of size {self.shape[a]} "
                         f"(shape {self.shape})")
    sizes = tuple(self.shape[a] // known if s == -1 else s for s in sizes)
    return self.reshape(self.shape[:a] + sizes + self.shape[a + 1:])


def unfold(self: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Every window of ``size`` elements along ``dimension``, ``step`` apart: the windows replace the
    dimension (``(n - size) // step + 1`` of them) and their elements form a new last dimension.

    A view, built as diagonal reads: the axis is broadcast to one copy per window, flattened and
    padded so that each window starts ``n + step`` elements after the previous one, then reshaped
    to rows of ``n + step`` and cut to ``size`` columns. ValueError unless
    ``0 <= size <= n`` and ``step > 0``.

    >>> import corvid as cv
    >>> cv.arange(5).unfold(0, 2, 2).tolist()
    [[0, 1], [2, 3]]
    """
    x = self.reshape(1) if self.ndim == 0 else self
    d = manipulation.axis_of(dimension, self.ndim)
    n = x.shape[d]
    if step <= 0 or not 0 <= size <= n:
        raise ValueError(f"unfold: needs 0 <= size <= {n} (the size of dimension {dimension}) and step > 0, "
                         f"got size={size}, step={step}")
    m = (n - size) // step + 1
    y = manipulation.moveaxis(x, d, -1)
    batch, keep = y.shape[:-1], [(0, s) for s in y.shape[:-1]]
    if size == 0:
        windows = y.shrink(keep + [(0, 0)]).unsqueeze(-2).expand(batch + (m, 0))
    else:
        rows = y.unsqueeze(-2).expand(batch + (m, n)).reshape(batch + (m * n,))
        rows = rows.pad([(0, 0)] * len(batch) + [(0, m * step)])
        windows = rows.reshape(batch + (m, n + step)).shrink(keep + [(0, m), (0, size)])
    out = manipulation.moveaxis(windows, -2, d)
    return out.reshape(out.shape[1:]) if self.ndim == 0 else out


def narrow(self: Tensor, dim: int, start: Any, length: int) -> Tensor:
    """Elements ``start .. start + length - 1`` along ``dim`` (a view); ``start`` may be negative or
    a 0-d integer tensor. IndexError/ValueError when the range does not fit."""
    a = normalize_axis(dim, self.ndim)
    n = self.shape[a]
    s = _int_arg(start, "narrow: start")
    if not -n <= s <= n:
        raise IndexError(f"narrow: start {s} is out of range for dimension {a} of size {n}")
    s %= max(n, 1)
    if length < 0 or s + length > n:
        raise ValueError(f"narrow: start {s} + length {length} exceeds dimension {a} of size {n}")
    return self.shrink([(s, s + length) if i == a else (0, k) for i, k in enumerate(self.shape)])


def select(self: Tensor, dim: int, index: int) -> Tensor:
    """The slice at ``index`` along ``dim``, without that dimension (``x.select(1, 0)`` is ``x[:, 0]``)."""
    a = normalize_axis(dim, self.ndim)
    return self[(slice(None),) * a + (_int_arg(index, "select: index"),)]


def unbind(self: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """The slices along ``dim``, each without it. ValueError for a 0-d tensor."""
    return manipulation.unstack(self, dim)


def tensor_split(self: Tensor, indices_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    """Views along ``dim``: ``sections`` (an int) nearly equal parts, the first ``n % sections`` one
    longer; or parts cut at the listed ``indices`` (slicing rules: negative counts from the end,
    out of range gives empty parts). A 0-d integer tensor counts as sections, a 1-D one as indices.

    >>> import corvid as cv
    >>> [p.tolist() for p in cv.arange(5).tensor_split(3)]
    [[0, 1], [2, 3], [4]]
    """
    a = normalize_axis(dim, self.ndim)
    n = self.shape[a]
    cuts = indices_or_sections
    if isinstance(cuts, Tensor):
        cuts = cuts.item() if cuts.ndim == 0 else cuts.tolist()
    if isinstance(cuts, int):
        if cuts <= 0:
            raise ValueError(f"tensor_split: sections must be positive, got {cuts}")
        q, r = divmod(n, cuts)
        cuts = [i * q + min(i, r) for i in range(1, cuts)]
    bounds = [None, *cuts, None]
    lead = (slice(None),) * a
    return tuple(self[lead + (slice(lo, hi),)] for lo, hi in zip(bounds[:-1], bounds[1:]))


def transpose_2d(self: Tensor) -> Tensor:
    """``t()``: a matrix transposed; 0-d and 1-d tensors unchanged. ValueError above 2 dimensions."""
    if self.ndim > 2:
        raise ShapeError(f"t() needs at most 2 dimensions, got shape {self.shape}; use transpose(dim0, dim1) or mT")
    return self.transpose(0, 1) if self.ndim == 2 else self


def adjoint(self: Tensor) -> Tensor:
    """The conjugate transpose of the last two dimensions (``mH``). ValueError below 2 dimensions."""
    return self.mT.conj()


def _hermitian(self: Tensor) -> Tensor:
    """``H``: the conjugate transpose of a matrix (a 0-d tensor: its conjugate). ValueError otherwise."""
    if self.ndim not in (0, 2):
        raise ShapeError(f"H is defined for matrices (2-D), got shape {self.shape}; use mH for a batch")
    return self.conj() if self.ndim == 0 else self.mT.conj()


def flipud(self: Tensor) -> Tensor:
    """Rows reversed (dimension 0). ValueError for a 0-d tensor."""
    if self.ndim < 1:
        raise ValueError("flipud needs at least 1 dimension, got a 0-d tensor")
    return MovementMixin.flip(self, 0)


def fliplr(self: Tensor) -> Tensor:
    """Columns reversed (dimension 1). ValueError below 2 dimensions."""
    if self.ndim < 2:
        raise ShapeError(f"fliplr needs at least 2 dimensions, got shape {self.shape}")
    return MovementMixin.flip(self, 1)


# --- elementwise ----------------------------------------------------------------------------------------
def add(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    """``self + alpha * other`` (broadcast, promoted)."""
    return ElementwiseMixin.add(self, other if alpha == 1 else _tensor(self, other) * alpha)


def sub(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    """``self - alpha * other`` (broadcast, promoted)."""
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
    """``self + weight * (end - self)``, in PyTorch's two-sided form (exactly ``end`` at weight 1)."""
    w = weight if isinstance(weight, Tensor) else self._operand(weight, result_type(self, end))
    gap = _tensor(self, end) - self
    return where(w.abs() < 0.5, self + w * gap, _tensor(self, end) - gap * (1 - w))


def isclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """Elementwise ``|self - other| <= atol + rtol * |other|`` (bool), as PyTorch: equal values
    (infinities included) are close, a finite and an infinite value are not, nan is close to nan
    only with ``equal_nan``. Integers compare in float64. ValueError for negative tolerances."""
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
    """Whether every element is :func:`isclose` (a Python bool; computes both tensors)."""
    return bool(isclose(self, other, rtol, atol, equal_nan).all().item())


def equal(self: Tensor, other: Any) -> bool:
    """Whether ``other`` has this shape and equal values (a Python bool; nan is not equal to nan).
    ``cv.equal`` is the Array API's elementwise ``==``."""
    other = _tensor(self, other)
    return self.shape == other.shape and bool(self.eq(other).all().item())


def masked_fill(self: Tensor, mask: Any, value: Any) -> Tensor:
    """``value`` where the bool ``mask`` is true, else ``self`` (broadcast together; ``self``'s
    dtype). ``value`` is a scalar or a 0-d tensor (which gets a gradient). TypeError for a mask
    that is not bool, ValueError for a value with dimensions."""
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
    ``self / other`` for ``other``."""
    common = result_type(self, other)
    x = self.astype(common if common.is_float else dt.default_float)
    y = x._operand(other, x.dtype)
    # log(1) = 0 where the product must be 0 although log(other) is not finite (and no inf enters
    # the unused branch's gradient)
    safe = where(x.eq(0) & ((y <= 0) | y.isinf()), 1.0, y)
    return x * safe.log()


def fmax(self: Tensor, other: Any) -> Tensor:
    """Elementwise maximum ignoring nan (nan only where both are); at a tie the gradient goes to ``self``."""
    a, b = _promoted(self, other)
    return where((a >= b) | b.isnan(), a, b)


def fmin(self: Tensor, other: Any) -> Tensor:
    """Elementwise minimum ignoring nan (nan only where both are); at a tie the gradient goes to ``self``."""
    a, b = _promoted(self, other)
    return where((a <= b) | b.isnan(), a, b)


def _promoted(self: Tensor, other: Any) -> tuple[Tensor, Tensor]:
    common = result_type(self, other)
    a = self.astype(common)
    return a, a._operand(other, common)


def isposinf(self: Tensor) -> Tensor:
    """True where the value is +inf."""
    return self.eq(math.inf) if self.dtype.is_float else self._const(False, dt.bool_)


def isneginf(self: Tensor) -> Tensor:
    """True where the value is -inf."""
    return self.eq(-math.inf) if self.dtype.is_float else self._const(False, dt.bool_)


def positive(self: Tensor) -> Tensor:
    """``self`` (TypeError for bool, as PyTorch)."""
    if self.dtype.is_bool:
        raise TypeError("positive is not defined for bool tensors")
    return self


def deg2rad(self: Tensor) -> Tensor:
    """Degrees to radians (integers give float32)."""
    return _float(self) * (math.pi / 180)


def rad2deg(self: Tensor) -> Tensor:
    """Radians to degrees (integers give float32)."""
    return _float(self) * (180 / math.pi)


def _float(x: Tensor) -> Tensor:
    return x if x.dtype.is_float or x.dtype.is_complex else x.astype(dt.default_float)


def addcmul(self: Tensor, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
    """``self + value * tensor1 * tensor2``."""
    return self + _tensor(self, tensor1) * tensor2 * value


def addcdiv(self: Tensor, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
    """``self + value * tensor1 / tensor2``."""
    return self + _tensor(self, tensor1) / tensor2 * value


def clamp_min(self: Tensor, min: Any) -> Tensor:  # noqa: A002  (PyTorch's name)
    """``clamp(min=min)``."""
    return self.clip(min, None)


def clamp_max(self: Tensor, max: Any) -> Tensor:  # noqa: A002
    """``clamp(max=max)``."""
    return self.clip(None, max)


def torch_sign(self: Tensor) -> Tensor:
    """-1, 0 or 1 by sign, as PyTorch's ``sign``/``sgn``: a nan gives 0 (``cv.sign`` keeps nan, as
    numpy and the Array API do); complex input gives ``x / |x|`` (0 at 0)."""
    out = ElementwiseMixin.sign(self)
    return where(self.isnan(), 0, out) if self.dtype.is_float else out


def torch_square(self: Tensor) -> Tensor:
    """``x * x``; a bool tensor gives int64, as PyTorch's (``cv.square`` keeps numpy's bool)."""
    return ElementwiseMixin.square(self.astype(dt.int64) if self.dtype.is_bool else self)


def torch_angle(self: Tensor) -> Tensor:
    """The argument in (-pi, pi], as PyTorch's ``angle``: a real number gives pi below zero, nan for
    nan and 0 otherwise, -0.0 included (numpy's ``atan2`` gives pi there); integers give float32."""
    if self.dtype.is_complex:
        return ElementwiseMixin.angle(self)
    x = self.astype(dt.float32) if not self.dtype.is_float else self
    return where(x < 0, math.pi, where(x.isnan(), x, 0)).astype(x.dtype)


# --- reductions ---------------------------------------------------------------------------------------
def amax(self: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    """Maximum over ``dim`` (an int or a tuple; ``()`` or None: all). At ties the gradient is shared
    evenly (PyTorch's ``amax``; ``max(dim=)`` gives it to one element)."""
    return ReduceMixin.max(self, None if dim == () else dim, keepdim)


def amin(self: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    """Minimum over ``dim``; see :func:`amax`."""
    return ReduceMixin.min(self, None if dim == () else dim, keepdim)


def aminmax(self: Tensor, *, dim: int | None = None, keepdim: bool = False) -> MinMax:
    """``(min, max)`` over ``dim`` (all elements if None)."""
    return MinMax(ReduceMixin.min(self, dim, keepdim), ReduceMixin.max(self, dim, keepdim))


def nansum(self: Tensor, dim: Any = None, keepdim: bool = False, dtype: DTypeLike | None = None) -> Tensor:
    """Sum over ``dim`` with nan counted as 0 (accumulation dtypes as ``sum``)."""
    x = where(self.isnan(), 0, self) if self.dtype.is_float else self
    return ReduceMixin.sum(x, dim, keepdim, dtype)


def nanmean(self: Tensor, dim: Any = None, keepdim: bool = False, dtype: DTypeLike | None = None) -> Tensor:
    """Mean over ``dim`` of the values that are not nan (nan where there are none)."""
    x = self if dtype is None else self.astype(dtype)
    x = x if x.dtype.is_float else x.astype(dt.default_float)
    count = ReduceMixin.sum(~x.isnan(), dim, keepdim, x.dtype)
    return nansum(x, dim, keepdim) / count


def count_nonzero(self: Tensor, dim: Any = None) -> Tensor:
    """The number of non-zero elements over ``dim`` (an int, a tuple, or None for all), int64."""
    return ReduceMixin.sum(self.ne(0), dim, False, dt.int64)


# --- linear algebra -----------------------------------------------------------------------------------
def _ranks(name: str, *pairs: tuple[Tensor, int]) -> None:
    if any(t.ndim != n for t, n in pairs):
        want = " and ".join(f"{n}-D" for _, n in pairs)
        got = " and ".join(str(t.shape) for t, _ in pairs)
        raise ShapeError(f"{name}: expected {want} tensors, got shapes {got}")


def mm(self: Tensor, mat2: Tensor) -> Tensor:
    """The product of two matrices. ValueError unless both are 2-D with matching inner sizes."""
    _ranks("mm", (self, 2), (mat2, 2))
    return self @ mat2


def mv(self: Tensor, vec: Tensor) -> Tensor:
    """A matrix times a vector. ValueError unless 2-D and 1-D with matching sizes."""
    _ranks("mv", (self, 2), (vec, 1))
    return self @ vec


def bmm(self: Tensor, mat2: Tensor) -> Tensor:
    """Batched matrix product of (b, n, m) and (b, m, p). ValueError for other ranks or batch sizes."""
    _ranks("bmm", (self, 3), (mat2, 3))
    if self.shape[0] != mat2.shape[0]:
        raise ShapeError(f"bmm: batch sizes differ: {self.shape} and {mat2.shape}")
    return self @ mat2


def dot(self: Tensor, other: Tensor) -> Tensor:
    """The inner product of two vectors of equal length (0-d; complex values are not conjugated).
    ValueError for other ranks or lengths."""
    _ranks("dot", (self, 1), (other, 1))
    return self @ other


def outer(self: Tensor, vec2: Tensor) -> Tensor:
    """The outer product of two vectors, shape (n, m). ValueError for other ranks."""
    _ranks("outer", (self, 1), (vec2, 1))
    return self[:, None] * vec2[None, :]


def cross(self: Tensor, other: Tensor, dim: int | None = None) -> Tensor:
    """The cross product of 3-vectors along ``dim`` of the broadcast operands; without ``dim``, the
    first dimension of size 3 (PyTorch's ``Tensor.cross``; ``cv.linalg.cross`` uses the last).
    ValueError when there is none."""
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
    """``beta * self + alpha * (mat1 @ mat2)``; with ``beta=0`` ``self`` is ignored (its nans too)."""
    product = mm(mat1, mat2)
    product = product if alpha == 1 else product * alpha
    if beta == 0:
        return product.broadcast_to(broadcast_shapes(self.shape, product.shape))
    return (self if beta == 1 else self * beta) + product


def diag(self: Tensor, diagonal: int = 0) -> Tensor:
    """A 1-D tensor placed on diagonal ``diagonal`` of a square matrix, or that diagonal of a matrix."""
    return manipulation.diag(self, diagonal)


# --- indexing -----------------------------------------------------------------------------------------
def masked_select(self: Tensor, mask: Any) -> Tensor:
    """The elements where the bool ``mask`` is true (the two broadcast together), as a 1-D tensor in
    row-major order. Computes the mask (the length depends on it). TypeError for a non-bool mask."""
    m = _tensor(self, mask)
    if not m.dtype.is_bool:
        raise TypeError(f"masked_select: the mask must be a bool tensor, got {m.dtype.name}")
    shape = broadcast_shapes(self.shape, m.shape)
    return self.broadcast_to(shape)[m.broadcast_to(shape)].reshape(-1)


def _index_1d(self: Tensor, name: str, dim: int, index: Any) -> tuple[int, Tensor]:
    """``dim`` normalized and ``index`` as 1-D int64, bounds-checked, negative entries wrapped."""
    a = normalize_axis(dim, self.ndim)
    idx = indexing._int_index(index, self, f"{name}: index")
    if idx.ndim > 1:
        raise ShapeError(f"{name}: index must be 1-D, got shape {idx.shape}")
    return a, indexing._checked(idx.reshape(-1), self.shape[a], a)


def _index_write(self: Tensor, name: str, dim: int, index: Any, source: Any, mode: str) -> Tensor:
    """``source``'s slices combined by ``mode`` into ``self`` at ``index`` along ``dim``: one
    SCATTER in :func:`corvid.ops.indexing.scatter_prim`'s layout (``dim`` is its ``J``)."""
    a, idx = _index_1d(self, name, dim, index)
    want = self.shape[:a] + idx.shape + self.shape[a + 1:]
    src = _tensor(self, source)
    if src.shape != want:
        raise ShapeError(f"{name}: source must have shape {want} (self's, with {idx.shape[0]} entries along dim "
                         f"{a}), got {src.shape}")
    spread = idx.reshape((1,) * a + idx.shape).broadcast_to(self.shape[:a] + idx.shape)
    return indexing._scatter(self, a, spread, src.astype(self.dtype), mode)


def index_add(self: Tensor, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Tensor:
    """A copy with ``alpha * source[..., i, ...]`` added at ``index[i]`` along ``dim`` (duplicates
    add up). ``source`` has ``self``'s shape with ``len(index)`` entries along ``dim``; ValueError
    otherwise, IndexError for an index out of range.

    >>> import corvid as cv
    >>> cv.zeros(3).index_add(0, cv.Tensor([0, 0, 2]), cv.Tensor([1.0, 2.0, 3.0])).tolist()
    [3.0, 0.0, 3.0]
    """
    return _index_write(self, "index_add", dim, index, source if alpha == 1 else _tensor(self, source) * alpha, "sum")


def index_copy(self: Tensor, dim: int, index: Any, source: Any) -> Tensor:
    """A copy with ``source[..., i, ...]`` written at ``index[i]`` along ``dim`` (of duplicates the
    last wins; PyTorch leaves that undefined). Shapes as :func:`index_add`."""
    return _index_write(self, "index_copy", dim, index, source, "set")


def index_fill(self: Tensor, dim: int, index: Any, value: Any) -> Tensor:
    """A copy with the slices at ``index`` along ``dim`` set to ``value`` (a scalar or a 0-d tensor,
    which gets a gradient)."""
    a, idx = _index_1d(self, "index_fill", dim, index)
    hit = indexing._scatter(self._const(False, dt.bool_, (self.shape[a],)), 0, idx,
                            self._const(True, dt.bool_, idx.shape), "set")
    return masked_fill(self, hit.reshape(hit.shape + (1,) * (self.ndim - a - 1)), value)


def scatter_add(self: Tensor, dim: int, index: Any, src: Any) -> Tensor:
    """A copy with ``src[i][j]`` added at ``[index[i][j]][j]`` (``dim=0``, and so on); duplicates add up."""
    return indexing.scatter_reduce(self, dim, index, src, "sum")


def take_along_dim(self: Tensor, indices: Any, dim: int | None = None) -> Tensor:
    """Elements at ``indices`` along ``dim`` (numpy's ``take_along_axis``: the other dimensions
    broadcast); without ``dim`` both are flattened."""
    if dim is None:
        return indexing.take(self.reshape(-1), _tensor(self, indices).reshape(-1), 0)
    return indexing.take_along_axis(self, indices, dim)


def repeat_interleave(self: Tensor, repeats: Any, dim: int | None = None, *, output_size: int | None = None) -> Tensor:
    """Each element repeated ``repeats`` times along ``dim`` (flattened if None): an int, or one count
    per element (a tensor, computed first: the length depends on it). ValueError for negative
    counts, a wrong number of them, or an ``output_size`` that does not match.

    >>> import corvid as cv
    >>> cv.Tensor([1, 2]).repeat_interleave(cv.Tensor([1, 2])).tolist()
    [1, 2, 2]
    """
    out = manipulation.repeat(self, repeats, dim)
    a = 0 if dim is None else normalize_axis(dim, max(self.ndim, 1))
    if output_size is not None and out.shape[a] != output_size:
        raise ShapeError(f"repeat_interleave: output_size={output_size}, but the counts give {out.shape[a]}")
    return out


def unique(self: Tensor, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,  # noqa: A002
           dim: int | None = None) -> Any:
    """The distinct values of the flattened tensor, sorted (also when ``sorted=False``, which PyTorch
    allows), and with the flags the inverse indices (``self``'s shape) and the counts, int64.
    Each nan is distinct. Computes ``self`` (the length depends on it). ``dim`` is not supported
    (NotImplementedError)."""
    if dim is not None:
        raise NotImplementedError("unique(dim=...) (distinct slices) is not supported; flatten the slices into "
                                  "keys first, or call unique without dim for distinct elements")
    out = sorting.unique_all(self)
    extra = ((out.inverse_indices,) if return_inverse else ()) + ((out.counts,) if return_counts else ())
    return (out.values, *extra) if extra else out.values


# --- in place -----------------------------------------------------------------------------------------
def _write(self: Tensor, result: Tensor, name: str) -> Tensor:
    """Rebind ``self`` to ``result`` (:meth:`Tensor.assign`), with PyTorch's rules: the shape must
    stay, and the dtype may narrow within its kind (a float64 result into float32) but not go
    down a kind (float into int: TypeError)."""
    if result.shape != self.shape:
        raise ShapeError(f"{name}: the result has shape {result.shape}, this tensor {self.shape}; an in-place "
                         "op cannot change the shape (use the out-of-place form)")
    if result.dtype is not self.dtype and not dt.can_cast(result.dtype, self.dtype, "same_kind"):
        raise TypeError(f"{name}: the result is {result.dtype.name}, which cannot be stored in this "
                        f"{self.dtype.name} tensor; convert first (x = x.to({result.dtype.name}))")
    return self.assign(result)


def _in_place(name: str) -> Callable[..., Tensor]:
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return _write(self, getattr(self, name)(*args, **kwargs), name + "_")

    method.__doc__ = f"In-place ``{name}``: rebinds this tensor to the result (see :meth:`Tensor.assign`); returns it."
    method.__name__ = method.__qualname__ = name + "_"
    return method


_IN_PLACE = ("add", "sub", "mul", "div", "pow", "fmod", "remainder", "clamp", "clip", "clamp_min", "clamp_max",
             "lerp", "addcmul", "addcdiv", "masked_fill", "index_add", "index_copy", "index_fill", "scatter",
             "scatter_add", "scatter_reduce", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "relu",
             "floor", "ceil", "round", "trunc", "reciprocal", "sin", "cos", "copysign", "nan_to_num", "tril", "triu")


def fill_(self: Tensor, value: Any) -> Tensor:
    """Every element set to ``value`` (a scalar or a 0-d tensor), in place; returns self."""
    v = value.astype(self.dtype) if isinstance(value, Tensor) else full((), value, self.dtype, self.device)
    return self.assign(v)


def zero_(self: Tensor) -> Tensor:
    """Every element set to 0, in place; returns self."""
    return fill_(self, 0)


def copy_(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
    """``src`` (broadcast to this shape, converted to this dtype, moved to this device) written
    into this tensor in place; returns self."""
    s = _tensor(self, src)
    return self.assign(_DEVICE_TO(s, self.device) if s.device != self.device else s)


# --- attaching ----------------------------------------------------------------------------------------
_DEVICE_TO = Tensor.to  # the device-only ``to`` that corvid's own code calls

_METHODS: dict[str, Any] = {
    "max": torch_max, "min": torch_min, "var": torch_var, "std": torch_std, "var_mean": var_mean,
    "std_mean": std_mean, "mean": mean, "squeeze": squeeze, "nonzero": nonzero, "argwhere": argwhere, "sort": sort,
    "permute": permute, "split": split, "chunk": chunk, "flip": flip, "tile": tile, "repeat": repeat,
    "type_as": type_as, "to": to,
    "cpu": cpu, "clone": clone, "dim": dim, "ndimension": dim, "nelement": Tensor.numel,
    "is_floating_point": is_floating_point, "is_complex": is_complex, "element_size": element_size,
    "stride": stride, "is_contiguous": is_contiguous, "new_full": new_full, "new_zeros": new_zeros,
    "new_ones": new_ones, "new_empty": new_zeros, "new_tensor": new_tensor, "view": view, "view_as": view_as,
    "reshape_as": reshape_as, "expand_as": expand_as, "unflatten": unflatten, "unfold": unfold, "narrow": narrow,
    "select": select, "unbind": unbind, "tensor_split": tensor_split, "t": transpose_2d, "adjoint": adjoint,
    "movedim": manipulation.moveaxis, "swapdims": MovementMixin.transpose, "flipud": flipud, "fliplr": fliplr,
    "add": add, "sub": sub, "subtract": sub, "multiply": ElementwiseMixin.mul, "divide": ElementwiseMixin.div,
    "true_divide": ElementwiseMixin.div, "fmod": fmod, "lerp": lerp, "isclose": isclose, "allclose": allclose,
    "equal": equal, "masked_fill": masked_fill, "xlogy": xlogy, "fmax": fmax, "fmin": fmin, "isposinf": isposinf,
    "isneginf": isneginf, "positive": positive, "negative": ElementwiseMixin.neg, "absolute": ElementwiseMixin.abs,
    "sgn": torch_sign, "sign": torch_sign, "square": torch_square, "angle": torch_angle, "deg2rad": deg2rad, "rad2deg": rad2deg, "addcmul": addcmul, "addcdiv": addcdiv,
    "clamp_min": clamp_min, "clamp_max": clamp_max, "lt": ElementwiseMixin.__lt__, "le": ElementwiseMixin.__le__,
    "gt": ElementwiseMixin.__gt__, "ge": ElementwiseMixin.__ge__, "logaddexp": special.logaddexp,
    "copysign": special.copysign, "hypot": special.hypot, "signbit": special.signbit, "amax": amax, "amin": amin,
    "aminmax": aminmax, "nansum": nansum, "nanmean": nanmean, "count_nonzero": count_nonzero, "mm": mm, "mv": mv,
    "bmm": bmm, "dot": dot, "outer": outer, "cross": cross, "kron": kron, "addmm": addmm, "diag": diag,
    "masked_select": masked_select, "index_add": index_add, "index_copy": index_copy, "index_fill": index_fill,
    "scatter_add": scatter_add, "take_along_dim": take_along_dim,
    "repeat_interleave": repeat_interleave, "unique": unique, "fill_": fill_, "zero_": zero_, "copy_": copy_,
}

def _nbytes(self: Tensor) -> int:
    """Bytes the elements take (``numel() * element_size()``)."""
    return self.size * self.dtype.itemsize


_PROPERTIES: dict[str, Callable[[Tensor], Any]] = {"mH": adjoint, "H": _hermitian, "itemsize": element_size,
                                                   "nbytes": _nbytes}


def _attach() -> None:
    for name, (fn, aliases) in _RENAMED.items():
        setattr(Tensor, name, _torch_names(fn, name, **aliases))
    for name, fn in _METHODS.items():
        setattr(Tensor, name, fn)
    for name, d in _CASTS.items():
        setattr(Tensor, name, _cast(d))
    for name, getter in _PROPERTIES.items():
        setattr(Tensor, name, property(getter, doc=getter.__doc__))
    for name in _IN_PLACE:
        setattr(Tensor, name + "_", _in_place(name))


_attach()

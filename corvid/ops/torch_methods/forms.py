"""PyTorch's keyword names on existing methods, and the forms where PyTorch and numpy give one
method name two meanings (max/min/sort/var/std/squeeze/nonzero/repeat)."""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from ... import dtype as dt
from ...dtype import DTypeLike
from ...errors import ArgumentError
from ...tensor import Tensor
from .. import indexing, manipulation, scan, sorting
from ..movement import MovementMixin, _shape_arg, normalize_axis, stack
from ..reduce import ReduceMixin
from ..scan import ValuesIndices
from ._common import _int_arg


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

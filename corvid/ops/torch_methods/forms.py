"""PyTorch's keyword names on existing methods, and the forms where PyTorch and numpy give one
method name two meanings (max/min/sort/var/std/squeeze/nonzero/repeat)."""

from __future__ import annotations

import functools
import inspect
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

    params = inspect.signature(fn).parameters
    names = ", ".join(f"``{t}=`` for ``{o}=``" for t, o in aliases.items() if o in params)
    summary, example = _TORCH_EXAMPLES[name]
    method.__doc__ = (f"{inspect.cleandoc(fn.__doc__) if fn.__doc__ else summary}\n\n"
                      f"PyTorch's keyword names work too: {names}.\n\n{example}")
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

# name: (the summary where the wrapped function has no docstring, an example in PyTorch's keywords),
# added to each method's docstring (tests/test_docstrings.py runs the example)
_TORCH_EXAMPLES: dict[str, tuple[str, str]] = {
    "sum": ("Sum over ``axis`` (all axes if None).", """\
>>> cv.Tensor([[1, 2], [3, 4]]).sum(dim=1, keepdim=True)
Tensor([[3],
        [7]])
"""),
    "prod": ("Product over ``axis`` (all axes if None).", """\
>>> cv.Tensor([[1, 2], [3, 4]]).prod(dim=0)
Tensor([3, 8])
"""),
    "any": ("Whether any element is true (non-zero) over ``axis`` (all axes if None).", """\
>>> cv.Tensor([[True, False], [False, False]]).any(dim=1)
Tensor([ True, False])
"""),
    "all": ("Whether every element is true (non-zero) over ``axis`` (all axes if None).", """\
>>> cv.Tensor([[True, True], [True, False]]).all(dim=1, keepdim=True)
Tensor([[ True],
        [False]])
"""),
    "argmax": ("Index of the first maximum along ``axis`` (flattened if None), int64.", """\
>>> cv.Tensor([[1, 2], [4, 3]]).argmax(dim=1, keepdim=True)
Tensor([[1],
        [0]])
"""),
    "argmin": ("Index of the first minimum along ``axis`` (flattened if None), int64.", """\
>>> cv.Tensor([[1, 2], [0, 3]]).argmin(dim=0)
Tensor([1, 0])
"""),
    "logsumexp": ("``log(sum(exp(x)))`` over ``axis``, computed stably.", """\
>>> cv.Tensor([[0.0, 0.0], [1.0, 1.0]]).logsumexp(dim=1)
Tensor([0.6931472, 1.6931472])
"""),
    "softmax": ("``exp(x) / sum(exp(x))`` along ``axis``, computed stably.", """\
>>> cv.Tensor([[1.0, 1.0], [0.0, 1e9]]).softmax(dim=1)
Tensor([[0.5, 0.5],
        [0. , 1. ]])
"""),
    "log_softmax": ("``log(softmax(x))`` along ``axis``, computed stably.", """\
>>> cv.Tensor([[0.0, 0.0]]).log_softmax(dim=1)
Tensor([[-0.6931472, -0.6931472]])
"""),
    "unsqueeze": ("Insert a size-1 dimension at ``axis``.", """\
>>> cv.zeros(2, 3).unsqueeze(dim=1).shape
(2, 1, 3)
"""),
    "cumsum": ("Running sum along ``axis``.", """\
>>> cv.Tensor([[1, 2], [3, 4]]).cumsum(dim=1)
Tensor([[1, 3],
        [3, 7]])
"""),
    "cumprod": ("Running product along ``axis``.", """\
>>> cv.Tensor([[1, 2], [3, 4]]).cumprod(dim=0)
Tensor([[1, 2],
        [3, 8]])
"""),
    "cummax": ("Running maximum along ``axis`` and the index where each was attained.", """\
>>> cv.Tensor([1.0, 3.0, 3.0, 2.0]).cummax(dim=0)
ValuesIndices(values=Tensor([1., 3., 3., 3.]), indices=Tensor([0, 1, 2, 2]))
"""),
    "cummin": ("Running minimum along ``axis`` and the index where each was attained.", """\
>>> cv.Tensor([4.0, 2.0, 2.0, 3.0]).cummin(dim=0)
ValuesIndices(values=Tensor([4., 2., 2., 2.]), indices=Tensor([0, 1, 2, 2]))
"""),
    "logcumsumexp": ("``log(cumsum(exp(x)))`` along ``axis``, computed stably.", """\
>>> [round(v, 4) for v in cv.Tensor([0.0, 0.0, 1.0]).logcumsumexp(dim=0).tolist()]
[0.0, 0.6931, 1.5514]
"""),
    "argsort": ("The int64 indices that sort the tensor along ``axis``.", """\
>>> cv.Tensor([[3, 1, 2]]).argsort(dim=1, descending=True)
Tensor([[0, 2, 1]])
"""),
    "topk": ("The ``k`` largest (or smallest) values along ``axis`` and their indices.", """\
>>> cv.Tensor([[1.0, 4.0], [2.0, 3.0]]).topk(1, dim=0, largest=False)
ValuesIndices(values=Tensor([[1., 3.]]), indices=Tensor([[0, 1]]))
"""),
    "diff": ("The ``n``-th discrete difference along ``axis``.", """\
>>> cv.Tensor([[1, 2], [4, 8]]).diff(dim=0)
Tensor([[3, 6]])
"""),
    "roll": ("Shift elements by ``shift`` along ``axis``, wrapping around.", """\
>>> cv.Tensor([[1, 2], [3, 4]]).roll(shifts=1, dims=1)
Tensor([[2, 1],
        [4, 3]])
"""),
    "rot90": ("Rotate by 90 degrees ``k`` times in the plane ``axes``.", """\
>>> cv.Tensor([[1, 2], [3, 4]]).rot90(1, dims=(0, 1))
Tensor([[2, 4],
        [1, 3]])
"""),
    "diagonal": ("The diagonal of the plane (``axis1``, ``axis2``), shifted by ``offset``.", """\
>>> cv.arange(9).reshape(3, 3).diagonal(offset=1, dim1=0, dim2=1)
Tensor([1, 5])
"""),
    "tril": ("The lower triangle of the last two axes.", """\
>>> cv.ones(3, 3).tril(diagonal=-1)
Tensor([[0., 0., 0.],
        [1., 0., 0.],
        [1., 1., 0.]])
"""),
    "triu": ("The upper triangle of the last two axes.", """\
>>> cv.ones(3, 3).triu(diagonal=1)
Tensor([[0., 1., 1.],
        [0., 0., 1.],
        [0., 0., 0.]])
"""),
    "gather": ("Torch ``gather``: the elements at ``index`` along ``axis``.", """\
>>> cv.Tensor([[1, 2], [3, 4]]).gather(dim=1, index=cv.Tensor([[1, 1], [0, 1]]))
Tensor([[2, 2],
        [3, 4]])
"""),
    "scatter": ("Torch ``scatter`` (out of place).", """\
>>> cv.zeros(2, 3).scatter(dim=1, index=cv.Tensor([[2], [0]]), src=cv.Tensor([[5.0], [6.0]]))
Tensor([[0., 0., 5.],
        [6., 0., 0.]])
"""),
    "scatter_reduce": ("Torch ``scatter_reduce`` (out of place).", """\
>>> cv.zeros(3).scatter_reduce(dim=0, index=cv.Tensor([0, 0, 2]), src=cv.Tensor([1.0, 2.0, 3.0]), reduce="amax")
Tensor([2., 0., 3.])
"""),
    "index_select": ("Torch ``index_select``: the slices at a 1-d ``index`` along ``axis``.", """\
>>> cv.Tensor([[1, 2], [3, 4]]).index_select(dim=0, index=cv.Tensor([1, 0]))
Tensor([[3, 4],
        [1, 2]])
"""),
}


def permute(self: Tensor, *dims: Any, **kwargs: Any) -> Tensor:
    """Reorder dimensions: output dim ``i`` is input dim ``dims[i]``.

    As PyTorch's: ``x.permute(1, 0)``, ``x.permute((1, 0))`` or ``x.permute(dims=(1, 0))``.
    ValueError unless a permutation.

    >>> x = cv.zeros(2, 3, 4)
    >>> x.permute(2, 0, 1).shape, x.permute((2, 0, 1)).shape
    ((4, 2, 3), (4, 2, 3))
    """
    if "dims" in kwargs:
        if dims:
            raise TypeError("permute() got dims both as arguments and as dims=")
        dims = (kwargs.pop("dims"),)
    if kwargs:
        raise TypeError(f"permute() got unexpected keywords {sorted(kwargs)}")
    return MovementMixin.permute(self, *dims)


def split(self: Tensor, split_size_or_sections: int | Sequence[int], dim: int = 0, *,
          axis: int | None = None) -> tuple[Tensor, ...]:
    """Pieces along ``dim`` of ``split_size_or_sections`` elements each, or of the listed sizes; a tuple of views.

    As PyTorch's ``split``: an int is the size of each piece (the last may be smaller), a list
    gives the sizes, which must add up to the size along ``dim``. (numpy's ``split`` takes a
    number of pieces or the indices to cut at, as :meth:`tensor_split` does.)

    >>> x = cv.arange(5)
    >>> [p.tolist() for p in x.split(2)]
    [[0, 1], [2, 3], [4]]
    >>> [p.tolist() for p in x.split([1, 4])]
    [[0], [1, 2, 3, 4]]
    """
    return tuple(MovementMixin.split(self, split_size_or_sections, dim if axis is None else axis))


def chunk(self: Tensor, chunks: int, dim: int = 0, *, axis: int | None = None) -> tuple[Tensor, ...]:
    """``chunks`` nearly equal pieces along ``dim``, a tuple of views.

    PyTorch's rule: pieces of ``ceil(n / chunks)``, so there may be fewer (:meth:`tensor_split`
    always gives ``chunks``); an empty axis gives ``chunks`` empty pieces. ValueError for
    ``chunks <= 0``.

    >>> [p.tolist() for p in cv.arange(5).chunk(3)]
    [[0, 1], [2, 3], [4]]
    >>> [p.tolist() for p in cv.arange(6).chunk(4)]
    [[0, 1], [2, 3], [4, 5]]
    """
    a = dim if axis is None else axis
    if self.ndim and self.shape[normalize_axis(a, self.ndim)] == 0 and chunks > 0:
        return (self,) * chunks
    return tuple(MovementMixin.chunk(self, chunks, a))


def flip(self: Tensor, *dims: Any, **kwargs: Any) -> Tensor:
    """Reverse the order of elements along ``dims``.

    ``x.flip(0)``, ``x.flip(0, 1)``, ``x.flip((0, 1))``, ``x.flip(dims=...)`` or
    ``x.flip(axis=...)``; every axis when none is named (a corvid extension: PyTorch requires
    ``dims``). ValueError for an axis named twice.

    >>> x = cv.Tensor([[1, 2], [3, 4]])
    >>> x.flip(0)
    Tensor([[3, 4],
            [1, 2]])
    >>> x.flip(0, 1)
    Tensor([[4, 3],
            [2, 1]])
    """
    named = [kwargs.pop(k) for k in ("dims", "axis") if k in kwargs]
    if kwargs or len(named) + bool(dims) > 1:
        raise TypeError("flip() takes the axes once: as arguments, as dims= or as axis=")
    axes = named[0] if named else dims[0] if len(dims) == 1 else dims if dims else None
    return MovementMixin.flip(self, axes)


def tile(self: Tensor, *dims: Any) -> Tensor:
    """``self`` repeated ``dims[i]`` times along each axis (``x.tile(2, 3)`` or ``x.tile((2, 3))``).

    Fewer entries than dimensions are padded with ones in front, more add leading axes.

    >>> cv.Tensor([1, 2]).tile(2)
    Tensor([1, 2, 1, 2])
    >>> cv.Tensor([1, 2]).tile(2, 2)
    Tensor([[1, 2, 1, 2],
            [1, 2, 1, 2]])
    """
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
    """The minimum, in PyTorch's three forms and numpy's, as :meth:`max`.

    ``x.min()`` of all elements; ``x.min(other)`` the elementwise minimum; ``x.min(d)`` or
    ``x.min(dim=d, keepdim=False)`` PyTorch's ``(values, indices)`` (the first minimum);
    ``x.min(axis=a)`` numpy's values alone (``cv.min``).

    >>> x = cv.Tensor([[1.0, 5.0], [7.0, 2.0]])
    >>> x.min(1)
    ValuesIndices(values=Tensor([1., 2.]), indices=Tensor([0, 1]))
    >>> x.min(axis=1)
    Tensor([1., 2.])
    """
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
    """Standard deviation, ``sqrt`` of :meth:`var`: unbiased by default, as PyTorch's.

    With numpy's keywords (``axis=``, ``keepdims=``, ``ddof=``) it divides by ``n``, as
    ``cv.std`` does.

    >>> x = cv.Tensor([1.0, 2.0, 3.0, 4.0])
    >>> x.std(), x.std(unbiased=False), x.std(axis=0)
    (Tensor(1.2909945), Tensor(1.118034), Tensor(1.118034))
    """
    return _spread(self, "std", args, kwargs, False).sqrt()


def var_mean(self: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
    """``(var, mean)`` over ``dim`` as ``torch.var_mean``: unbiased by default.

    ``correction=``, ``unbiased=`` and ``keepdim=`` as in :meth:`var` (numpy's keywords are
    not accepted here).

    >>> x = cv.Tensor([[1.0, 2.0, 3.0], [2.0, 2.0, 2.0]])
    >>> x.var_mean(1)
    (Tensor([1., 0.]), Tensor([2., 2.]))
    >>> x.var_mean(dim=1, correction=0)
    (Tensor([0.6666667, 0.       ]), Tensor([2., 2.]))
    """
    dim, keepdim = _dim_keepdim("var_mean", args, dict(kwargs), None)
    return _spread(self, "var_mean", args, kwargs, True), mean(self, dim, keepdim)


def std_mean(self: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
    """``(std, mean)`` over ``dim`` as ``torch.std_mean``: unbiased by default (see :meth:`var_mean`).

    >>> std, mean = cv.Tensor([[1.0, 2.0, 3.0], [2.0, 2.0, 2.0]]).std_mean(dim=1)
    >>> std.tolist(), mean.tolist()
    ([1.0, 0.0], [2.0, 2.0])
    """
    v, m = var_mean(self, *args, **kwargs)
    return v.sqrt(), m


def mean(self: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: DTypeLike | None = None,
         axis: Any = None, keepdims: bool | None = None) -> Tensor:
    """Arithmetic mean over ``dim`` (all if None; an int or a tuple), computed in ``dtype`` when given.

    PyTorch's signature ``mean(dim, keepdim, *, dtype)``; numpy's ``axis=``/``keepdims=`` work
    too. Integer input gives the default float (PyTorch raises there); empty gives nan.

    >>> x = cv.Tensor([[1, 2], [3, 4]])
    >>> x.mean(), x.mean(1), x.mean(dim=0, keepdim=True)
    (Tensor(2.5), Tensor([1.5, 3.5]), Tensor([[2., 3.]]))
    """
    x = self if dtype is None else self.astype(dtype)
    return ReduceMixin.mean(x, dim if axis is None else axis, keepdim if keepdims is None else keepdims)


def squeeze(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """Remove size-1 dimensions: all of them, or those named (``x.squeeze(d)``, ``x.squeeze(dim=d)``).

    ``d`` is an int or a tuple. A named dimension whose size is not 1 is left alone, as in
    PyTorch (``cv.squeeze`` raises there, as numpy and the Array API do); numpy's ``axis=``
    keyword keeps numpy's error.

    >>> x = cv.zeros(2, 1, 3)
    >>> x.squeeze().shape, x.squeeze(1).shape, x.squeeze(0).shape
    ((2, 3), (2, 3), (2, 1, 3))
    """
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
    """Indices of the non-zero elements, row-major, as PyTorch gives them: an int64 tensor ``(n, ndim)``.

    ``as_tuple=True``: one 1-D tensor per dimension (a 0-d tensor counts as 1-D; ``cv.nonzero``
    is numpy's tuple). Computes ``self``.

    >>> x = cv.Tensor([[0, 3], [4, 0]])
    >>> x.nonzero()
    Tensor([[0, 1],
            [1, 0]])
    >>> x.nonzero(as_tuple=True)
    (Tensor([0, 1]), Tensor([1, 0]))
    """
    parts = indexing.nonzero(self.reshape(1) if self.ndim == 0 else self)
    if as_tuple:
        return parts
    if self.ndim == 0:
        return self._const(0, dt.int64, (parts[0].shape[0], 0))
    return stack(parts, 1)


def argwhere(self: Tensor) -> Tensor:
    """Indices of the non-zero elements as an int64 tensor of shape ``(n, ndim)`` (``nonzero(as_tuple=False)``).

    >>> cv.Tensor([[0, 3], [4, 0]]).argwhere()
    Tensor([[0, 1],
            [1, 0]])
    """
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

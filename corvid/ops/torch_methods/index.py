"""Indexing methods and the in-place ``_`` forms with PyTorch's names and semantics."""

from __future__ import annotations

from typing import Any, Callable

from ... import dtype as dt
from ...creation import full
from ...errors import ShapeError
from ...tensor import Tensor, broadcast_shapes
from .. import indexing, manipulation, sorting
from ..movement import normalize_axis
from ._common import _DEVICE_TO, _tensor
from .arith import masked_fill


# --- indexing -----------------------------------------------------------------------------------------
def masked_select(self: Tensor, mask: Any) -> Tensor:
    """The elements where the bool ``mask`` is true (the two broadcast together), as a 1-D tensor.

    Row-major order. Computes the mask (the length depends on it). TypeError for a non-bool mask.

    >>> x = cv.Tensor([[1, 2], [3, 4]])
    >>> x.masked_select(x > 1)
    Tensor([2, 3, 4])
    >>> x.masked_select(cv.Tensor([True, False]))
    Tensor([1, 3])
    """
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
    """A copy with ``source[..., i, ...]`` written at ``index[i]`` along ``dim``.

    Of duplicate indices the last wins (PyTorch leaves that undefined). Shapes as
    :meth:`index_add`.

    >>> cv.zeros(2, 3).index_copy(1, cv.Tensor([2, 0]), cv.Tensor([[1.0, 2.0], [3.0, 4.0]]))
    Tensor([[2., 0., 1.],
            [4., 0., 3.]])
    """
    return _index_write(self, "index_copy", dim, index, source, "set")


def index_fill(self: Tensor, dim: int, index: Any, value: Any) -> Tensor:
    """A copy with the slices at ``index`` along ``dim`` set to ``value``.

    ``value`` is a scalar or a 0-d tensor (which gets a gradient).

    >>> cv.Tensor([[1, 2, 3], [4, 5, 6]]).index_fill(1, cv.Tensor([0, 2]), -1)
    Tensor([[-1,  2, -1],
            [-1,  5, -1]])
    """
    a, idx = _index_1d(self, "index_fill", dim, index)
    hit = indexing._scatter(self._const(False, dt.bool_, (self.shape[a],)), 0, idx,
                            self._const(True, dt.bool_, idx.shape), "set")
    return masked_fill(self, hit.reshape(hit.shape + (1,) * (self.ndim - a - 1)), value)


def scatter_add(self: Tensor, dim: int, index: Any, src: Any) -> Tensor:
    """A copy with ``src[i][j]`` added at ``[index[i][j]][j]`` (``dim=0``, and so on); duplicates add up.

    ``scatter_reduce(dim, index, src, "sum")``.

    >>> cv.zeros(2, 2).scatter_add(1, cv.Tensor([[0, 0], [1, 0]]), cv.Tensor([[1.0, 2.0], [3.0, 4.0]]))
    Tensor([[3., 0.],
            [4., 3.]])
    """
    return indexing.scatter_reduce(self, dim, index, src, "sum")


def take_along_dim(self: Tensor, indices: Any, dim: int | None = None) -> Tensor:
    """Elements at ``indices`` along ``dim`` (numpy's ``take_along_axis``: the other dimensions broadcast).

    Without ``dim`` both are flattened. Negative indices count from the end (PyTorch raises).

    >>> x = cv.Tensor([[10, 30, 20], [60, 40, 50]])
    >>> x.take_along_dim(x.argmax(dim=1, keepdim=True), dim=1)
    Tensor([[30],
            [60]])
    >>> x.take_along_dim(cv.Tensor([0, 5]))
    Tensor([10, 50])
    """
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
    """The distinct values of the flattened tensor, sorted, with the inverse indices and counts on request.

    Sorted also when ``sorted=False`` (which lets PyTorch keep another order). With the flags, the
    inverse indices (``self``'s shape) and the counts, int64, follow the values in a tuple. Each
    nan is distinct. Computes ``self`` (the length depends on it). ``dim`` is not supported
    (NotImplementedError).

    >>> x = cv.Tensor([3, 1, 3, 2, 1, 3])
    >>> x.unique()
    Tensor([1, 2, 3])
    >>> values, inverse, counts = x.unique(return_inverse=True, return_counts=True)
    >>> inverse, counts
    (Tensor([2, 0, 2, 1, 0, 2]), Tensor([2, 1, 3]))
    """
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

    init, args, result = _IN_PLACE[name]
    method.__doc__ = f"""In-place :meth:`{name}`: rebinds this tensor to ``self.{name}(...)`` and returns it.

The result keeps this tensor's shape and dtype, as PyTorch's in-place methods do: a float result
cannot go into an integer tensor (TypeError), a float64 one into float32 is cast. Other tensors
that shared the old value keep it (views share no memory; see :meth:`Tensor.assign`). On a leaf
that requires grad, RuntimeError outside ``cv.no_grad()``.

>>> x = cv.Tensor({init})
>>> x.{name}_({args}) is x
True
>>> x
{result}
"""
    method.__name__ = method.__qualname__ = name + "_"
    return method


# name: (the tensor, the arguments, the tensor after ``x.name_(arguments)``), the example of each docstring
_IN_PLACE: dict[str, tuple[str, str, str]] = {
    "add": ("[1.0, 2.0]", "10.0, alpha=2", "Tensor([21., 22.])"),
    "sub": ("[1.0, 2.0]", "0.5", "Tensor([0.5, 1.5])"),
    "mul": ("[1.0, 2.0]", "3.0", "Tensor([3., 6.])"),
    "div": ("[1.0, 2.0]", "4.0", "Tensor([0.25, 0.5 ])"),
    "pow": ("[1.0, 2.0, 3.0]", "2", "Tensor([1., 4., 9.])"),
    "fmod": ("[-7.0, 7.0]", "3.0", "Tensor([-1.,  1.])"),
    "remainder": ("[-7.0, 7.0]", "3.0", "Tensor([2., 1.])"),
    "clamp": ("[-1.0, 0.5, 2.0]", "0.0, 1.0", "Tensor([0. , 0.5, 1. ])"),
    "clip": ("[-1.0, 0.5, 2.0]", "max=1.0", "Tensor([-1. ,  0.5,  1. ])"),
    "clamp_min": ("[-1.0, 0.5]", "0.0", "Tensor([0. , 0.5])"),
    "clamp_max": ("[0.5, 2.0]", "1.0", "Tensor([0.5, 1. ])"),
    "lerp": ("[0.0, 10.0]", "cv.Tensor([10.0, 20.0]), 0.5", "Tensor([ 5., 15.])"),
    "addcmul": ("[1.0, 1.0]", "cv.Tensor([2.0, 3.0]), cv.Tensor([4.0, 5.0])", "Tensor([ 9., 16.])"),
    "addcdiv": ("[1.0, 1.0]", "cv.Tensor([2.0, 3.0]), cv.Tensor([4.0, 6.0])", "Tensor([1.5, 1.5])"),
    "masked_fill": ("[1.0, 2.0, 3.0]", "cv.Tensor([True, False, True]), 0.0", "Tensor([0., 2., 0.])"),
    "index_add": ("[1.0, 1.0, 1.0]", "0, cv.Tensor([0, 0, 2]), cv.Tensor([1.0, 2.0, 3.0])", "Tensor([4., 1., 4.])"),
    "index_copy": ("[0.0, 0.0, 0.0]", "0, cv.Tensor([2, 0]), cv.Tensor([1.0, 2.0])", "Tensor([2., 0., 1.])"),
    "index_fill": ("[[1, 2], [3, 4]]", "1, cv.Tensor([0]), 0", "Tensor([[0, 2],\n        [0, 4]])"),
    "scatter": ("[[0, 0, 0], [0, 0, 0]]", "1, cv.Tensor([[2], [0]]), cv.Tensor([[5], [6]])",
                "Tensor([[0, 0, 5],\n        [6, 0, 0]])"),
    "scatter_add": ("[1.0, 1.0, 1.0]", "0, cv.Tensor([0, 0, 2]), cv.Tensor([1.0, 2.0, 3.0])", "Tensor([4., 1., 4.])"),
    "scatter_reduce": ("[1.0, 1.0, 1.0]", '0, cv.Tensor([0, 0, 2]), cv.Tensor([5.0, 2.0, 0.0]), "amax"',
                       "Tensor([5., 1., 1.])"),
    "neg": ("[1, -2]", "", "Tensor([-1,  2])"),
    "abs": ("[-1.5, 2.0]", "", "Tensor([1.5, 2. ])"),
    "exp": ("[0.0, 1.0]", "", "Tensor([1.       , 2.7182817])"),
    "log": ("[1.0, 0.0]", "", "Tensor([  0., -inf])"),
    "sqrt": ("[4.0, 9.0]", "", "Tensor([2., 3.])"),
    "rsqrt": ("[4.0, 0.25]", "", "Tensor([0.5, 2. ])"),
    "sigmoid": ("[0.0, 100.0]", "", "Tensor([0.5, 1. ])"),
    "tanh": ('[0.0, float("inf")]', "", "Tensor([0., 1.])"),
    "relu": ("[-1.0, 2.0]", "", "Tensor([0., 2.])"),
    "floor": ("[-1.5, 1.5]", "", "Tensor([-2.,  1.])"),
    "ceil": ("[-1.5, 1.5]", "", "Tensor([-1.,  2.])"),
    "round": ("[0.5, 1.5, 2.567]", "", "Tensor([0., 2., 3.])"),
    "trunc": ("[-1.5, 1.5]", "", "Tensor([-1.,  1.])"),
    "reciprocal": ("[2.0, 4.0]", "", "Tensor([0.5 , 0.25])"),
    "sin": ("[0.0, cv.pi / 2]", "", "Tensor([0., 1.])"),
    "cos": ("[0.0, cv.pi]", "", "Tensor([ 1., -1.])"),
    "copysign": ("[1.0, 2.0]", "cv.Tensor([-1.0, 0.0])", "Tensor([-1.,  2.])"),
    "nan_to_num": ('[float("nan"), float("inf"), 1.0]', "posinf=100.0", "Tensor([  0., 100.,   1.])"),
    "tril": ("[[1, 2], [3, 4]]", "", "Tensor([[1, 0],\n        [3, 4]])"),
    "triu": ("[[1, 2], [3, 4]]", "", "Tensor([[1, 2],\n        [0, 4]])"),
}


def fill_(self: Tensor, value: Any) -> Tensor:
    """Every element set to ``value`` (a scalar or a 0-d tensor), in place; returns self.

    >>> x = cv.zeros(2)
    >>> x.fill_(7.0) is x
    True
    >>> x
    Tensor([7., 7.])
    """
    v = value.astype(self.dtype) if isinstance(value, Tensor) else full((), value, self.dtype, self.device)
    return self.assign(v)


def zero_(self: Tensor) -> Tensor:
    """Every element set to 0, in place; returns self.

    >>> x = cv.ones(2)
    >>> x.zero_() is x
    True
    >>> x
    Tensor([0., 0.])
    """
    return fill_(self, 0)


def copy_(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
    """``src`` (broadcast to this shape, converted to this dtype, moved to this device) written into this tensor.

    In place; returns self. ``non_blocking`` is ignored.

    >>> x = cv.zeros(2, 2)
    >>> x.copy_(cv.Tensor([1, 2])) is x
    True
    >>> x
    Tensor([[1., 2.],
            [1., 2.]])
    """
    s = _tensor(self, src)
    return self.assign(_DEVICE_TO(s, self.device) if s.device != self.device else s)

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

from typing import Any, Callable

from ...tensor import Tensor
from .. import manipulation, special
from ..elementwise import ElementwiseMixin
from ..movement import MovementMixin
from . import arith, forms, index, meta

# --- attaching ----------------------------------------------------------------------------------------

_METHODS: dict[str, Any] = {
    "max": forms.torch_max, "min": forms.torch_min, "var": forms.torch_var, "std": forms.torch_std,
    "var_mean": forms.var_mean, "std_mean": forms.std_mean, "mean": forms.mean, "squeeze": forms.squeeze,
    "nonzero": forms.nonzero, "argwhere": forms.argwhere, "sort": forms.sort, "permute": forms.permute,
    "split": forms.split, "chunk": forms.chunk, "flip": forms.flip, "tile": forms.tile, "repeat": forms.repeat,
    "type_as": meta.type_as, "to": meta.to, "cpu": meta.cpu, "clone": meta.clone, "dim": meta.dim,
    "ndimension": meta.dim, "nelement": Tensor.numel, "is_floating_point": meta.is_floating_point,
    "is_complex": meta.is_complex, "element_size": meta.element_size, "stride": meta.stride,
    "is_contiguous": meta.is_contiguous, "new_full": meta.new_full, "new_zeros": meta.new_zeros,
    "new_ones": meta.new_ones, "new_empty": meta.new_zeros, "new_tensor": meta.new_tensor, "view": meta.view,
    "view_as": meta.view_as, "reshape_as": meta.reshape_as, "expand_as": meta.expand_as, "unflatten": meta.unflatten,
    "unfold": meta.unfold, "narrow": meta.narrow, "select": meta.select, "unbind": meta.unbind,
    "tensor_split": meta.tensor_split, "t": meta.transpose_2d, "adjoint": meta.adjoint,
    "movedim": manipulation.moveaxis, "swapdims": MovementMixin.transpose, "flipud": meta.flipud,
    "fliplr": meta.fliplr, "add": arith.add, "sub": arith.sub, "subtract": arith.sub,
    "multiply": ElementwiseMixin.mul, "divide": ElementwiseMixin.div, "true_divide": ElementwiseMixin.div,
    "fmod": arith.fmod, "lerp": arith.lerp, "isclose": arith.isclose, "allclose": arith.allclose,
    "equal": arith.equal, "masked_fill": arith.masked_fill, "xlogy": arith.xlogy, "fmax": arith.fmax,
    "fmin": arith.fmin, "isposinf": arith.isposinf, "isneginf": arith.isneginf, "positive": arith.positive,
    "negative": ElementwiseMixin.neg, "absolute": ElementwiseMixin.abs, "sgn": arith.torch_sign,
    "sign": arith.torch_sign, "square": arith.torch_square, "angle": arith.torch_angle, "deg2rad": arith.deg2rad,
    "rad2deg": arith.rad2deg, "addcmul": arith.addcmul, "addcdiv": arith.addcdiv, "clamp_min": arith.clamp_min,
    "clamp_max": arith.clamp_max, "lt": ElementwiseMixin.__lt__, "le": ElementwiseMixin.__le__,
    "gt": ElementwiseMixin.__gt__, "ge": ElementwiseMixin.__ge__, "logaddexp": special.logaddexp,
    "copysign": special.copysign, "hypot": special.hypot, "signbit": special.signbit, "amax": arith.amax,
    "amin": arith.amin, "aminmax": arith.aminmax, "nansum": arith.nansum, "nanmean": arith.nanmean,
    "count_nonzero": arith.count_nonzero, "mm": arith.mm, "mv": arith.mv, "bmm": arith.bmm, "dot": arith.dot,
    "outer": arith.outer, "cross": arith.cross, "kron": arith.kron, "addmm": arith.addmm, "diag": arith.diag,
    "masked_select": index.masked_select, "index_add": index.index_add, "index_copy": index.index_copy,
    "index_fill": index.index_fill, "scatter_add": index.scatter_add, "take_along_dim": index.take_along_dim,
    "repeat_interleave": index.repeat_interleave, "unique": index.unique, "fill_": index.fill_, "zero_": index.zero_,
    "copy_": index.copy_,
}


def _nbytes(self: Tensor) -> int:
    """Bytes the elements take (``numel() * element_size()``).

    >>> cv.Tensor([[1, 2], [3, 4]]).nbytes, cv.Tensor([1.0], dtype=cv.float64).nbytes
    (32, 8)
    """
    return self.size * self.dtype.itemsize


_PROPERTIES: dict[str, Callable[[Tensor], Any]] = {
    "mH": meta.adjoint, "H": meta._hermitian, "itemsize": meta.element_size, "nbytes": _nbytes,
}


def _attach() -> None:
    for name, (fn, aliases) in forms._RENAMED.items():
        setattr(Tensor, name, forms._torch_names(fn, name, **aliases))
    for name, fn in _METHODS.items():
        setattr(Tensor, name, fn)
    for name, d in meta._CASTS.items():
        setattr(Tensor, name, meta._cast(name, d))
    for name, getter in _PROPERTIES.items():
        setattr(Tensor, name, property(getter, doc=getter.__doc__))
    for name in index._IN_PLACE:
        setattr(Tensor, name + "_", index._in_place(name))


_attach()

"""Casts, metadata, new tensors, and shape and view methods with PyTorch's names."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from ... import dtype as dt
from ...creation import full
from ...dtype import DType, DTypeLike
from ...errors import ShapeError
from ...tensor import Tensor
from .. import manipulation
from ..movement import MovementMixin, _shape_arg, normalize_axis
from ._common import _DEVICE_TO, _int_arg


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

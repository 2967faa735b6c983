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
def _cast(name: str, d: DType) -> Callable[[Tensor], Tensor]:
    def method(self: Tensor) -> Tensor:
        return self.astype(d)

    example, result = _CAST_EXAMPLES[name]
    method.__doc__ = (f"This tensor converted to {d.name}: ``x.astype(cv.{d.name})``.\n\n"
                      "As numpy's ``astype``: floats to integers truncate toward zero, integers wrap, any non-zero "
                      f"value (nan included) is True.\n\n>>> {example}\n{result}\n\n"
                      f"(A tensor of dtype {d.name} is not copied: ``x.{name}()`` is ``x`` itself "
                      "when it is one already).")
    method.__name__ = method.__qualname__ = name
    return method


_CASTS = {"float": dt.float32, "double": dt.float64, "half": dt.float16, "bfloat16": dt.bfloat16,
          "int": dt.int32, "long": dt.int64, "short": dt.int16, "char": dt.int8, "byte": dt.uint8,
          "bool": dt.bool_, "cfloat": dt.complex64, "cdouble": dt.complex128}
# name: (an example, its printed result), in each cast's docstring
_CAST_EXAMPLES = {
    "float": ("cv.Tensor([1, 2]).float()", "Tensor([1., 2.])"),
    "double": ("cv.Tensor([1, 2]).double()", "Tensor([1., 2.], dtype=float64)"),
    "half": ("cv.Tensor([1.0, 70000.0]).half()  # float16 overflows above 65504", "Tensor([ 1., inf], dtype=float16)"),
    "bfloat16": ("cv.Tensor([1.0, 3.14159]).bfloat16().tolist()", "[1.0, 3.140625]"),
    "int": ("cv.Tensor([1.7, -1.7]).int()", "Tensor([ 1, -1], dtype=int32)"),
    "long": ("cv.Tensor([1.7, -1.7]).long()", "Tensor([ 1, -1])"),
    "short": ("cv.Tensor([1.7, -1.7]).short()", "Tensor([ 1, -1], dtype=int16)"),
    "char": ("cv.Tensor([127, 128]).char()", "Tensor([ 127, -128], dtype=int8)"),
    "byte": ("cv.Tensor([-1, 256]).byte()", "Tensor([255,   0], dtype=uint8)"),
    "bool": ('cv.Tensor([0.0, 0.5, float("nan")]).bool()', "Tensor([False,  True,  True])"),
    "cfloat": ("cv.Tensor([1.0, 2.0]).cfloat()", "Tensor([1.+0.j, 2.+0.j], dtype=complex64)"),
    "cdouble": ("cv.Tensor([1.0, 2.0]).cdouble()", "Tensor([1.+0.j, 2.+0.j], dtype=complex128)"),
}


def type_as(self: Tensor, other: Tensor) -> Tensor:
    """This tensor converted to ``other``'s dtype.

    >>> cv.Tensor([1, 2]).type_as(cv.zeros(1, dtype=cv.float64))
    Tensor([1., 2.], dtype=float64)
    """
    return self.astype(other.dtype)


def to(self: Tensor, *args: Any, dtype: DTypeLike | None = None, device: Any = None, non_blocking: bool = False,
       copy: bool = False) -> Tensor:
    """This tensor on a device and/or in a dtype, as PyTorch's ``to``.

    ``x.to("CPU:1")``, ``x.to(cv.float16)``, ``x.to("CPU:1", cv.float16)``, ``x.to(other)``
    (other's device and dtype), or by keyword. ``copy=True`` returns a new tensor even when
    nothing changes. Devices as :meth:`Tensor.to` (``"cpu"``, ``"CPU:1"``, a list to replicate);
    ``non_blocking`` is ignored.

    >>> x = cv.Tensor([1, 2])
    >>> x.to(cv.float16)
    Tensor([1., 2.], dtype=float16)
    >>> x.to("cpu", cv.float32).device, x.to(cv.zeros(1)).dtype
    ('CPU', corvid.float32)
    >>> x.to(x) is x, x.to(x, copy=True) is x
    (True, False)
    """
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
    """This tensor on the CPU (itself if it is there).

    >>> x = cv.Tensor([1.0])
    >>> x.cpu() is x, x.cpu().device
    (True, 'CPU')
    """
    return _DEVICE_TO(self, "CPU")


def clone(self: Tensor, *, memory_format: Any = None) -> Tensor:
    """An independent copy; gradients flow back to ``self``.

    corvid never writes a value in place, so this is a new handle on the same graph (an in-place
    method on either rebinds only that one), except over memory a DLPack or
    ``from_numpy(copy=False)`` owner may still write, which is copied now.

    >>> x = cv.Tensor([1.0, 2.0], requires_grad=True)
    >>> y = x.clone()
    >>> y.add_(1.0)
    Tensor([2., 3.])
    >>> x
    Tensor([1., 2.])
    >>> (y * 3).sum().backward(); x.grad
    Tensor([3., 3.])
    """
    buf = self.node.buffer
    if buf is not None and not buf.pooled and not self.requires_grad:
        return Tensor(self.numpy(), device=self.device)
    return Tensor._from_node(self.node, self.device)


def dim(self: Tensor) -> int:
    """The number of dimensions (``ndim``); ``ndimension`` is the same method.

    >>> cv.zeros(2, 3).dim(), cv.Tensor(1.0).ndimension()
    (2, 0)
    """
    return self.ndim


def is_floating_point(self: Tensor) -> bool:
    """True for real floating dtypes (float8 to float64; not complex).

    >>> cv.Tensor([1.0]).is_floating_point(), cv.Tensor([1]).is_floating_point(), cv.Tensor([1j]).is_floating_point()
    (True, False, False)
    """
    return self.dtype.is_float


def is_complex(self: Tensor) -> bool:
    """True for complex64 and complex128.

    >>> cv.Tensor([1j]).is_complex(), cv.Tensor([1.0]).is_complex()
    (True, False)
    """
    return self.dtype.is_complex


def element_size(self: Tensor) -> int:
    """Bytes per element; the ``itemsize`` property is the same number.

    >>> x = cv.zeros(3, dtype=cv.float16)
    >>> x.element_size(), x.itemsize, cv.Tensor([1j]).element_size()
    (2, 2, 8)
    """
    return self.dtype.itemsize


def stride(self: Tensor, dim: int | None = None) -> Any:
    """The row-major strides of this shape, in elements (one of them for ``dim``).

    corvid stores every computed value row-major and keeps views as index arithmetic in the
    kernels that read them, so the contiguous layout is the only one a value has: a transposed
    view has the strides of its own shape (PyTorch's are permuted).

    >>> x = cv.zeros(2, 3, 4)
    >>> x.stride(), x.stride(1), x.mT.stride()
    ((12, 4, 1), 4, (12, 3, 1))
    """
    strides, step = [], 1
    for s in reversed(self.shape):
        strides.append(step)
        step *= max(s, 1)
    out = tuple(reversed(strides))
    return out if dim is None else out[normalize_axis(dim, self.ndim)]


def is_contiguous(self: Tensor, memory_format: Any = None) -> bool:
    """Always True: see :meth:`stride`.

    >>> cv.zeros(2, 3).mT.is_contiguous()
    True
    """
    return True


def _new_shape(size: tuple[Any, ...]) -> tuple[int, ...]:
    return _shape_arg(size) if size else ()


def new_full(self: Tensor, size: Any, fill_value: Any, *, dtype: DTypeLike | None = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """A tensor of ``size`` filled with ``fill_value``, with this tensor's dtype and device unless given.

    >>> x = cv.Tensor([1, 2], dtype=cv.int16)
    >>> x.new_full((2, 2), 7)
    Tensor([[7, 7],
            [7, 7]], dtype=int16)
    >>> x.new_full((2,), 1.5, dtype=cv.float32)
    Tensor([1.5, 1.5])
    """
    return full(_new_shape((size,)), fill_value, dtype or self.dtype, device or self.device, requires_grad)


def new_zeros(self: Tensor, *size: Any, dtype: DTypeLike | None = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    """Zeros of ``size`` (``new_zeros(2, 3)`` or ``new_zeros((2, 3))``), this tensor's dtype and device unless given.

    ``new_empty`` is the same method: corvid has no uninitialized memory to hand out.

    >>> x = cv.Tensor([1, 2], dtype=cv.int16)
    >>> x.new_zeros(2, 3).shape, x.new_zeros((2, 3)).dtype
    ((2, 3), corvid.int16)
    >>> x.new_empty(2)
    Tensor([0, 0], dtype=int16)
    """
    return full(_new_shape(size), 0, dtype or self.dtype, device or self.device, requires_grad)


def new_ones(self: Tensor, *size: Any, dtype: DTypeLike | None = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """Ones of ``size`` (``new_ones(2, 3)`` or ``new_ones((2, 3))``), this tensor's dtype and device unless given.

    >>> x = cv.Tensor([1, 2], dtype=cv.int16)
    >>> x.new_ones(3)
    Tensor([1, 1, 1], dtype=int16)
    >>> x.new_ones(2, dtype=cv.float32)
    Tensor([1., 1.])
    """
    return full(_new_shape(size), 1, dtype or self.dtype, device or self.device, requires_grad)


def new_tensor(self: Tensor, data: Any, *, dtype: DTypeLike | None = None, device: Any = None,
               requires_grad: bool = False) -> Tensor:
    """A tensor of ``data`` (copied; a Tensor is detached) with this tensor's dtype and device unless given.

    >>> cv.Tensor([1, 2], dtype=cv.int16).new_tensor([3, 4])
    Tensor([3, 4], dtype=int16)
    """
    if isinstance(data, Tensor):
        data = data.detach()
    return Tensor(data, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)


# --- shapes and views ---------------------------------------------------------------------------------
def view(self: Tensor, *shape: Any) -> Tensor:
    """``view(*shape)``: :meth:`Tensor.reshape`; ``view(dtype)``: the same bits read as ``dtype``.

    A reshape is never a copy in corvid, so ``view`` works on any tensor (PyTorch's needs
    compatible strides). The dtype form is :meth:`Tensor.bitcast`; PyTorch also lets the item
    size change, which corvid does not (ValueError naming both sizes).

    >>> x = cv.arange(6)
    >>> x.view(2, 3)
    Tensor([[0, 1, 2],
            [3, 4, 5]])
    >>> x.view(-1, 2).shape
    (3, 2)
    >>> cv.Tensor([1.0]).view(cv.int32)
    Tensor([1065353216], dtype=int32)
    """
    if len(shape) == 1 and isinstance(shape[0], DType):
        return self.bitcast(shape[0])
    return self.reshape(*shape)


def view_as(self: Tensor, other: Tensor) -> Tensor:
    """This tensor reshaped to ``other``'s shape; ``reshape_as`` is the same method.

    >>> cv.arange(6).view_as(cv.zeros(3, 2)).shape
    (3, 2)
    """
    return self.reshape(other.shape)


reshape_as = view_as


def expand_as(self: Tensor, other: Tensor) -> Tensor:
    """This tensor broadcast to ``other``'s shape (a view).

    >>> cv.Tensor([[1], [2]]).expand_as(cv.zeros(2, 3))
    Tensor([[1, 1, 1],
            [2, 2, 2]])
    """
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
    """Elements ``start .. start + length - 1`` along ``dim`` (a view).

    ``start`` may be negative or a 0-d integer tensor. IndexError/ValueError when the range does
    not fit.

    >>> x = cv.arange(12).reshape(3, 4)
    >>> x.narrow(1, 1, 2)
    Tensor([[ 1,  2],
            [ 5,  6],
            [ 9, 10]])
    >>> x.narrow(0, -1, 1)
    Tensor([[ 8,  9, 10, 11]])
    """
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
    """The slice at ``index`` along ``dim``, without that dimension (``x.select(1, 0)`` is ``x[:, 0]``).

    >>> x = cv.arange(6).reshape(2, 3)
    >>> x.select(1, 0), x.select(0, -1)
    (Tensor([0, 3]), Tensor([3, 4, 5]))
    """
    a = normalize_axis(dim, self.ndim)
    return self[(slice(None),) * a + (_int_arg(index, "select: index"),)]


def unbind(self: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """The slices along ``dim``, each without it, as a tuple. ValueError for a 0-d tensor.

    >>> cv.arange(6).reshape(2, 3).unbind(1)
    (Tensor([0, 3]), Tensor([1, 4]), Tensor([2, 5]))
    """
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
    """``t()``: a matrix transposed; 0-d and 1-d tensors unchanged. ValueError above 2 dimensions.

    >>> cv.Tensor([[1, 2, 3], [4, 5, 6]]).t()
    Tensor([[1, 4],
            [2, 5],
            [3, 6]])
    >>> cv.Tensor([1, 2]).t()
    Tensor([1, 2])
    """
    if self.ndim > 2:
        raise ShapeError(f"t() needs at most 2 dimensions, got shape {self.shape}; use transpose(dim0, dim1) or mT")
    return self.transpose(0, 1) if self.ndim == 2 else self


def adjoint(self: Tensor) -> Tensor:
    """The conjugate transpose of the last two dimensions; the ``mH`` property is the same.

    A batch of matrices stays a batch. ValueError below 2 dimensions.

    >>> z = cv.Tensor([[1 + 1j, 2], [3, 4 - 2j]])
    >>> z.adjoint()
    Tensor([[1.-1.j, 3.-0.j],
            [2.-0.j, 4.+2.j]], dtype=complex64)
    >>> cv.zeros(5, 2, 3).mH.shape
    (5, 3, 2)
    """
    return self.mT.conj()


def _hermitian(self: Tensor) -> Tensor:
    """``H``: the conjugate transpose of a matrix (a 0-d tensor: its conjugate). ValueError otherwise.

    For a batch of matrices use ``mH``.

    >>> cv.Tensor([[1 + 1j, 2], [3, 4 - 2j]]).H
    Tensor([[1.-1.j, 3.-0.j],
            [2.-0.j, 4.+2.j]], dtype=complex64)
    """
    if self.ndim not in (0, 2):
        raise ShapeError(f"H is defined for matrices (2-D), got shape {self.shape}; use mH for a batch")
    return self.conj() if self.ndim == 0 else self.mT.conj()


def flipud(self: Tensor) -> Tensor:
    """Rows reversed (dimension 0). ValueError for a 0-d tensor.

    >>> cv.Tensor([[1, 2], [3, 4]]).flipud()
    Tensor([[3, 4],
            [1, 2]])
    """
    if self.ndim < 1:
        raise ValueError("flipud needs at least 1 dimension, got a 0-d tensor")
    return MovementMixin.flip(self, 0)


def fliplr(self: Tensor) -> Tensor:
    """Columns reversed (dimension 1). ValueError below 2 dimensions.

    >>> cv.Tensor([[1, 2], [3, 4]]).fliplr()
    Tensor([[2, 1],
            [4, 3]])
    """
    if self.ndim < 2:
        raise ShapeError(f"fliplr needs at least 2 dimensions, got shape {self.shape}")
    return MovementMixin.flip(self, 1)

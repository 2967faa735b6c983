"""Movement ops: they never copy. Each becomes an index rewrite inside the kernels that read it.

Primitives: reshape, permute, expand, pad, shrink, flip. Everything else here — transpose,
squeeze, slicing with steps, ``__getitem__``, concatenation, splitting — is composed from them.
A step slice ``x[::k]`` is pad-to-multiple, reshape ``(n/k, k)``, shrink to the first column,
reshape back; the index simplifier turns that into ``k*i`` in the generated code.
"""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import AxisError, ShapeError
from ..graph.node import Op, node
from ..graph.symbolic import Num, Sym, as_size, hint
from .elementwise import ArgumentError

if TYPE_CHECKING:
    from ..tensor import Tensor


def _shape_arg(shape: tuple[Any, ...]) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    try:
        return tuple(s if isinstance(s, Sym) and not isinstance(s, Num) else int(s.__index__()) for s in shape)
    except (AttributeError, TypeError):
        raise TypeError(f"shape entries must be integers, got {shape}") from None


# the most bytes a tensor may take: what a signed 64-bit size counts (numpy's limit too, and the
# kernels index with int64)
MAX_BYTES = 2**63 - 1


def check_size(shape: tuple[int, ...], itemsize: int, what: str | None = None) -> None:
    """ValueError when ``shape`` holds more than :data:`MAX_BYTES` bytes of ``itemsize``-byte
    elements: a tensor that big could be neither allocated nor indexed, so it is refused where its
    shape is made (``zeros((2**63,))`` failed in the C compiler; numpy: "array is too big").
    ``what`` (the operation) starts the message."""
    n = math.prod(hint(s) for s in shape)  # (a symbolic size: as traced; jit checks each call's)
    if n * itemsize > MAX_BYTES:
        raise ShapeError(f"{what + ': ' if what else ''}a tensor of shape {shape} ({n} elements of {itemsize} "
                         "byte(s) each) is too big: at most 2**63 - 1 bytes can be addressed")


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """Map a possibly negative axis into ``range(ndim)``; AxisError (an IndexError and a ValueError)
    naming the ndim if out of range.

    A 0-d tensor takes axis 0 and -1 (as PyTorch, which treats it as one axis of size 1 here),
    both mapped to 0: callers reduce or move over nothing."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"{what} must be an int, got {type(axis).__name__}")
    span = max(ndim, 1)
    if not -span <= axis < span:
        raise AxisError(f"{what} {axis} is out of range for a tensor with {ndim} dimension{'s' if ndim != 1 else ''}")
    return axis % span


class MovementMixin:
    __slots__ = ()

    def _move(self: Tensor, op: Op, arg: Any, shape: tuple[int, ...]) -> Tensor:
        return self._new(node(op, (self.node,), arg, self.dtype, shape))

    def reshape(self: Tensor, *shape: Any) -> Tensor:
        """View with a new shape of the same size; one entry may be -1 (inferred). ValueError if
        sizes differ. The shape is given as separate ints or one tuple; no data is copied.

        >>> cv.arange(6).reshape(2, 3).tolist()
        [[0, 1, 2], [3, 4, 5]]
        >>> cv.arange(6).reshape((-1, 2)).shape
        (3, 2)
        """
        new = list(_shape_arg(shape))
        size = self.node.numel  # (not self.size: that builds a callable Size each time)
        if new.count(-1) > 1:
            raise ShapeError(f"reshape: only one dimension can be -1, got {tuple(new)}")
        if -1 in new:
            rest = math.prod(s for s in new if s != -1)
            if rest == 0 or size % rest:
                raise ShapeError(f"cannot reshape tensor of shape {self.shape} into {tuple(new)}")
            new[new.index(-1)] = size // rest
        new_t = tuple(new)
        if any(s < 0 for s in new_t) or math.prod(new_t) != size:
            raise ShapeError(f"cannot reshape tensor of shape {self.shape} (size {size}) into {new_t}")
        return self if new_t == self.shape else self._move(Op.RESHAPE, new_t, new_t)

    def permute(self: Tensor, *dims: Any) -> Tensor:
        """Reorder dimensions: output dim ``i`` is input dim ``dims[i]``."""
        order = tuple(normalize_axis(d, self.ndim) for d in _shape_arg(dims))
        if sorted(order) != list(range(self.ndim)):
            raise ShapeError(f"permute: {tuple(_shape_arg(dims))} is not a permutation of the {self.ndim} dims of {self.shape}")
        if order == tuple(range(self.ndim)):
            return self
        return self._move(Op.PERMUTE, order, tuple(self.shape[d] for d in order))

    def transpose(self: Tensor, dim0: int = -2, dim1: int = -1) -> Tensor:
        """Swap two dimensions (default: the last two), a view. ``swapaxes`` and ``swapdims`` are
        the same method. Unlike ``numpy.transpose``, which reverses all axes, this swaps two (as
        ``torch.transpose``); see :attr:`T` and :meth:`permute`.

        >>> cv.arange(6).reshape(2, 3).transpose().tolist()
        [[0, 3], [1, 4], [2, 5]]
        >>> cv.zeros(2, 3, 4).transpose(0, 2).shape
        (4, 3, 2)
        """
        order = list(range(self.ndim))
        a, b = normalize_axis(dim0, self.ndim), normalize_axis(dim1, self.ndim)
        if not order:  # a 0-d tensor: its only "axis" swapped with itself
            return self
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    swapaxes = transpose

    @property
    def T(self: Tensor) -> Tensor:
        """All dimensions reversed (numpy's ``.T``), a view.

        >>> cv.arange(6).reshape(2, 3).T.tolist()
        [[0, 3], [1, 4], [2, 5]]
        >>> cv.zeros(2, 3, 4).T.shape
        (4, 3, 2)
        """
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self: Tensor) -> Tensor:
        """The last two dimensions swapped (matrix transpose of a batch), a view. ValueError for
        fewer than 2 dimensions.

        >>> cv.zeros(2, 3, 4).mT.shape
        (2, 4, 3)
        """
        if self.ndim < 2:
            raise ShapeError(f"mT needs at least 2 dimensions, got shape {self.shape}")
        return self.transpose(-2, -1)

    def expand(self: Tensor, *shape: Any) -> Tensor:
        """Broadcast to ``shape`` without copying (numpy rules; -1 keeps a size). The shape is given
        as separate ints or one tuple; ValueError for a size that is neither 1 nor the target's.

        >>> cv.Tensor([1, 2, 3]).expand(2, 3).tolist()
        [[1, 2, 3], [1, 2, 3]]
        >>> cv.Tensor([[1], [2]]).expand(-1, 3).tolist()
        [[1, 1, 1], [2, 2, 2]]
        """
        new = _shape_arg(shape)
        if len(new) < self.ndim:
            raise ShapeError(f"cannot broadcast shape {self.shape} to {new}: fewer dimensions")
        old = (1,) * (len(new) - self.ndim) + self.shape
        new = tuple(o if n == -1 else n for o, n in zip(old, new))
        for o, n in zip(old, new):
            if o != n and o != 1:
                raise ShapeError(f"cannot broadcast shape {self.shape} to {new}")
        x = self if old == self.shape else self.reshape(old)
        if new == old:
            return x
        check_size(new, self.dtype.itemsize, "expand")
        return x._move(Op.EXPAND, new, new)

    def broadcast_to(self: Tensor, shape: Sequence[int]) -> Tensor:
        """Broadcast to ``shape`` (a tuple) without copying: :meth:`expand` with the Array API's
        signature, as :func:`corvid.broadcast_to`.

        >>> cv.Tensor([1, 2, 3]).broadcast_to((2, 3)).tolist()
        [[1, 2, 3], [1, 2, 3]]
        """
        return self.expand(tuple(shape))

    def pad(self: Tensor, pads: Sequence[tuple[int, int]] | Sequence[int], value: Any = 0) -> Tensor:
        """Pad with a constant: ``pads[i] = (before, after)`` for dimension ``i`` (numpy order).

        A flat sequence ``(before0, after0, before1, after1, ...)`` is accepted too, first axis
        first (unlike ``torch.nn.functional.pad``, which starts from the last axis). Negative
        amounts crop. ``value`` is cast to the tensor's dtype.

        >>> cv.Tensor([1, 2, 3]).pad([(1, 2)]).tolist()
        [0, 1, 2, 3, 0, 0]
        >>> cv.Tensor([1, 2, 3]).pad([(-1, 1)], value=9).tolist()
        [2, 3, 9]
        >>> cv.ones(2, 2).pad((1, 0, 0, 1)).tolist()
        [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0]]
        """
        flat = list(pads)
        if flat and not isinstance(flat[0], (tuple, list)):
            if len(flat) % 2:
                raise ValueError(f"pad: a flat padding list needs pairs, got {len(flat)} numbers")
            flat = [tuple(flat[i:i + 2]) for i in range(0, len(flat), 2)]
        if len(flat) != self.ndim:
            raise ShapeError(f"pad: got {len(flat)} (before, after) pairs for a tensor of shape {self.shape}")
        pairs = tuple((as_size(b), as_size(a)) for b, a in flat)
        # (max(0, x), not max(x, 0): where a symbolic amount is 0 at the traced size, the constant is
        # kept and the program assumes x <= 0, not x >= 0, which would hold at that size only)
        crop = tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs, self.shape))
        if any(hi < lo for lo, hi in crop):
            raise ShapeError(f"pad: negative padding {pairs} crops more than the shape {self.shape}")
        x = self.shrink(crop)
        grow = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
        if all(b == 0 and a == 0 for b, a in grow):
            return x
        shape = tuple(s + b + a for s, (b, a) in zip(x.shape, grow))
        check_size(shape, self.dtype.itemsize, "pad")
        v = value if not isinstance(value, bool) and self.dtype.is_float else value
        v = complex(v) if self.dtype.is_complex else float(v) if self.dtype.is_float else bool(v) \
            if self.dtype.is_bool else int(v)
        return x._move(Op.PAD, (grow, v), shape)

    def shrink(self: Tensor, bounds: Sequence[tuple[int, int]]) -> Tensor:
        """Keep ``[start, stop)`` of each dimension (a view): one ``(start, stop)`` pair per
        dimension, ``0 <= start <= stop <= size`` (ValueError otherwise). A primitive of slicing.

        >>> cv.arange(10).shrink([(2, 5)]).tolist()
        [2, 3, 4]
        >>> cv.arange(6).reshape(2, 3).shrink([(0, 1), (1, 3)]).tolist()
        [[1, 2]]
        """
        b = tuple((as_size(lo), as_size(hi)) for lo, hi in bounds)
        if len(b) != self.ndim or any(not 0 <= lo <= hi <= s for (lo, hi), s in zip(b, self.shape)):
            raise ShapeError(f"shrink: bounds {b} do not fit shape {self.shape}")
        if all(lo == 0 and hi == s for (lo, hi), s in zip(b, self.shape)):
            return self
        return self._move(Op.SHRINK, b, tuple(hi - lo for lo, hi in b))

    def flip(self: Tensor, axis: int | Sequence[int] | None = None) -> Tensor:
        """Reverse the order of elements along ``axis`` (all axes if None). :class:`ArgumentError`
        (a ValueError, as numpy's, and a RuntimeError, as PyTorch's) when an axis is named twice
        (``(0, 0)``, ``(0, -2)`` of a matrix). A 0-d tensor takes axis 0 or -1 and is returned."""
        axes = range(self.ndim) if axis is None else [axis] if isinstance(axis, int) else axis
        named = [normalize_axis(a, self.ndim) for a in axes]
        if len(set(named)) != len(named):
            raise ArgumentError(f"flip: axis {tuple(axes)} names an axis more than once (tensor of shape {self.shape})")
        norm = tuple(a for a in sorted(named) if self.ndim and self.shape[a] > 1)
        return self._move(Op.FLIP, norm, self.shape) if norm else self

    def squeeze(self: Tensor, axis: int | Sequence[int] | None = None) -> Tensor:
        """Remove size-1 dimensions (all of them, or those in ``axis``; ValueError if not size 1)."""
        if axis is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        axes = {normalize_axis(a, self.ndim) for a in ([axis] if isinstance(axis, int) else axis)}
        if self.ndim == 0:  # (axis 0 or -1: nothing to remove)
            return self
        for a in axes:
            if self.shape[a] != 1:
                raise ShapeError(f"cannot squeeze axis {a} of size {self.shape[a]} (shape {self.shape})")
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def unsqueeze(self: Tensor, axis: int) -> Tensor:
        """Insert a size-1 dimension at ``axis`` (negative counts from the end of the result)."""
        a = normalize_axis(axis, self.ndim + 1)
        return self.reshape(self.shape[:a] + (1,) + self.shape[a:])

    expand_dims = unsqueeze

    def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dimensions ``start_dim..end_dim`` (inclusive) into one (as ``torch.flatten``); a
        0-d tensor becomes shape ``(1,)``.

        >>> cv.zeros(2, 3, 4).flatten().shape
        (24,)
        >>> cv.zeros(2, 3, 4, 5).flatten(1, 2).shape
        (2, 12, 5)
        """
        s, e = normalize_axis(start_dim, self.ndim), normalize_axis(end_dim, self.ndim)
        if self.ndim == 0:
            return self.reshape(1)
        if e < s:
            raise ValueError(f"flatten: end_dim {end_dim} is before start_dim {start_dim}")
        return self.reshape(self.shape[:s] + (math.prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    def _step(self: Tensor, axis: int, start: int, stop: int, step: int) -> Tensor:
        """Elements ``range(start, stop, step)`` along ``axis`` (indices already normalized)."""
        if type(start) is int and type(stop) is int:
            count = len(range(start, stop, step))
        else:  # (symbolic bounds)
            count = (stop - start + step - 1) // step if step > 0 else (start - stop - step - 1) // -step
            count = as_size(count) if count > 0 else 0
        bounds = [(0, s) for s in self.shape]
        if step < 0:
            last = start + (count - 1) * step
            bounds[axis] = (last, start + 1) if count else (0, 0)
            x = self.shrink(bounds).flip(axis)
            step = -step
        else:
            bounds[axis] = (start, start + (count - 1) * step + 1) if count else (0, 0)
            x = self.shrink(bounds)
        if step == 1 or count <= 1:
            return x
        pads = [(0, 0)] * x.ndim
        pads[axis] = (0, count * step - x.shape[axis])
        x = x.pad(pads)
        x = x.reshape(x.shape[:axis] + (count, step) + x.shape[axis + 1:])
        keep = [(0, s) for s in x.shape]
        keep[axis + 1] = (0, 1)
        return x.shrink(keep).reshape(x.shape[:axis] + (count,) + x.shape[axis + 2:])

    def __getitem__(self: Tensor, index: Any) -> Tensor:
        """Basic indexing: ints, slices (any step), ``None`` and ``...``; integer arrays and
        boolean masks go to :func:`corvid.ops.indexing.getitem`."""
        items = list(index) if isinstance(index, tuple) else [index]
        for it in items:
            if not (it is None or it is Ellipsis or isinstance(it, slice) or _is_int(it)):
                from .indexing import getitem

                return getitem(self, index)  # integer arrays, boolean masks
        ellipses = [i for i, it in enumerate(items) if it is Ellipsis]  # by identity: Tensor == is elementwise
        if len(ellipses) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        used = sum(1 for it in items if it is not None and it is not Ellipsis)
        if used > self.ndim:
            raise IndexError(f"too many indices for a tensor of shape {self.shape}: {used} were given")
        if ellipses:
            e = ellipses[0]
            items[e:e + 1] = [slice(None)] * (self.ndim - used)
        else:
            items += [slice(None)] * (self.ndim - used)
        x, axis, out_shape = self, 0, []
        for it in items:
            if it is None:
                out_shape.append(1)
                continue
            size = self.shape[axis]
            if isinstance(it, slice):
                start, stop, step = it.indices(size) if type(size) is int else _symbolic_slice(it, size)
                x = x._step(axis, start, stop, step)
                out_shape.append(x.shape[axis])
            else:
                i = as_size(it) if isinstance(it, Sym) else int(it.__index__())
                if not -size <= i < size:
                    raise IndexError(f"index {i} is out of bounds for axis {axis} with size {size}")
                if type(size) is not int or type(i) is not int:  # (symbolic: no modulo of a size)
                    i = i + size if i < 0 else i
                else:
                    i = i % size
                x = x._step(axis, i, i + 1, 1)
            axis += 1
        return x.reshape(tuple(out_shape))

    def split(self: Tensor, sizes: int | Sequence[int], axis: int = 0) -> list[Tensor]:
        """Split along ``axis`` into pieces of ``sizes`` (an int: equal pieces, the last may be smaller).
        ValueError for a 0-d tensor, which has no axis to split."""
        if self.ndim == 0:
            raise ShapeError("split: a 0-d tensor has no axis to split; reshape it to (1,) first")
        a = normalize_axis(axis, self.ndim)
        n = self.shape[a]
        if isinstance(sizes, int):
            if sizes <= 0:
                raise ValueError(f"split size must be positive, got {sizes}")
            sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
        if sum(sizes) != n:
            raise ShapeError(f"split sizes {list(sizes)} do not add up to {n} (axis {a} of shape {self.shape})")
        out, start = [], 0
        for s in sizes:
            bounds = [(0, d) for d in self.shape]
            bounds[a] = (start, start + s)
            out.append(self.shrink(bounds))
            start += s
        return out

    def chunk(self: Tensor, chunks: int, axis: int = 0) -> list[Tensor]:
        """Split into ``chunks`` nearly equal pieces along ``axis`` (as torch.chunk)."""
        if chunks <= 0:
            raise ValueError(f"chunk count must be positive, got {chunks}")
        if self.ndim == 0:
            raise ShapeError("chunk: a 0-d tensor has no axis to split; reshape it to (1,) first")
        n = self.shape[normalize_axis(axis, self.ndim)]
        return self.split(max(-(-n // chunks), 1), axis)


def _bool():
    from ..dtype import bool_

    return bool_


def _symbolic_slice(it: slice, size: Sym) -> tuple[Any, Any, int]:
    """``it.indices(size)`` for a symbolic ``size`` (comparisons the sizes' ranges do not decide
    become guards of the jit program)."""
    step = 1 if it.step is None else operator.index(it.step)
    if step == 0:
        raise ValueError("slice step cannot be zero")
    lo, hi = (0, size) if step > 0 else (-1, size - 1)

    def bound(v: Any, default: Any) -> Any:
        if v is None:
            return default
        v = as_size(v) if isinstance(v, Sym) else operator.index(v)
        if type(v) is int and v < 0:
            v = v + size
        return lo if v < lo else hi if v > hi else v

    if step > 0:
        return bound(it.start, 0), bound(it.stop, size), step
    return bound(it.start, size - 1), bound(it.stop, -1), step


def _is_int(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, int) or isinstance(x, Sym):
        return True
    import numpy as np

    if isinstance(x, np.integer):
        return True
    from ..engine.capture import tracing
    from ..tensor import Tensor

    # a traced 0-d index has no value yet: it takes the GATHER path of corvid.ops.indexing
    return isinstance(x, Tensor) and x.ndim == 0 and x.dtype.is_int and not (x.node.traced or tracing())


def cat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Concatenate along an existing axis: each input is padded into place and selected by its mask
    (a select, not an add, so -0.0 and nan survive).

    Shapes must agree outside ``axis`` and dtypes promote as in arithmetic. ValueError for no
    tensors, 0-d tensors (use :func:`stack`) or shapes that differ. ``cv.concat`` is the Array
    API name.

    >>> cv.cat([cv.Tensor([1, 2]), cv.Tensor([3])]).tolist()
    [1, 2, 3]
    >>> cv.cat([cv.zeros(2, 3), cv.ones(2, 1)], axis=1).shape
    (2, 4)
    """
    ts = list(tensors)
    if not ts:
        raise ValueError("cat needs at least one tensor")
    from ..tensor import result_type

    first = ts[0]
    for i, t in enumerate(ts):
        if t.ndim == 0:
            raise ValueError(f"cat: zero-dimensional tensors cannot be concatenated (the tensor at position {i} "
                             "has shape ()); stack them, or reshape them to (1,) first")
    a = normalize_axis(axis, first.ndim)
    for t in ts[1:]:
        if t.ndim != first.ndim or any(s != f for i, (s, f) in enumerate(zip(t.shape, first.shape)) if i != a):
            raise ShapeError(f"cat: shapes {[t.shape for t in ts]} differ outside axis {a}")
    common = result_type(*ts)
    total = sum(t.shape[a] for t in ts)
    shape = first.shape[:a] + (total,) + first.shape[a + 1:]
    from ..engine import eager

    if eager.host_ok(ts, math.prod(shape)) and (len(ts) > 8 or all(eager.readable(t) for t in ts)):
        # small pieces on a CPU: numpy's concatenate of their values (one kernel for the pieces'
        # computations, the same for each piece of a loop), not a kernel for this placement
        found = eager.host_arrays([t.astype(common) for t in ts])
        if found is not None:
            return eager.stored(np.concatenate(found, axis=a), first, shape, common)
    out, start = None, 0
    for t in ts:
        pads = [(0, 0)] * t.ndim
        pads[a] = (start, total - start - t.shape[a])
        piece = t.astype(common).pad(pads)
        if out is None:
            out = piece
        else:
            from .elementwise import where

            out = where(t._const(True, _bool(), t.shape).pad(pads, False), piece, out)
        start += t.shape[a]
    return out


def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors of equal shape along a new axis (at position ``axis`` of the result).
    ValueError for no tensors or unequal shapes.

    >>> a, b = cv.Tensor([1, 2]), cv.Tensor([3, 4])
    >>> cv.stack([a, b]).tolist()
    [[1, 2], [3, 4]]
    >>> cv.stack([a, b], axis=1).tolist()
    [[1, 3], [2, 4]]
    """
    ts = list(tensors)
    if not ts:
        raise ValueError("stack needs at least one tensor")
    if any(t.shape != ts[0].shape for t in ts):
        raise ShapeError(f"stack: all shapes must be equal, got {[t.shape for t in ts]}")
    a = normalize_axis(axis, ts[0].ndim + 1)
    return cat([t.unsqueeze(a) for t in ts], a)

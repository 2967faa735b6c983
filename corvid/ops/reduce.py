"""Reductions and the ops built on them: sum, prod, max, min, mean, var, std, argmax, argmin,
any, all, logsumexp, softmax, log_softmax, matmul.

One primitive, REDUCE (sum/prod/max/min over axes, keeping them as size 1), carries them all;
matmul is a broadcast multiply followed by a sum over the shared axis, which the scheduler fuses
into one kernel together with whatever elementwise work follows it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import ShapeError
from .. import dtype as dt
from ..amp import _AUTOCAST, narrow, widen
from ..codegen.opt import cache_bytes
from ..graph.node import IDENTITY, Node, Op, node
from ..graph.symbolic import Num, SymbolicSizeError, is_symbolic
from ..engine.replay import replayed
from .elementwise import where
from .movement import normalize_axis

if TYPE_CHECKING:
    from ..tensor import Tensor

Axis = int | Sequence[int] | None


def _axes(x: Tensor, axis: Axis) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(x.ndim))
    if isinstance(axis, int):
        items = [axis]
    elif isinstance(axis, (tuple, list)):
        items = list(axis)
    else:
        raise TypeError(f"axis must be an int, a tuple of ints or None, got {type(axis).__name__}")
    norm = [normalize_axis(a, x.ndim) for a in items]
    if len(set(norm)) != len(norm):
        raise ShapeError(f"repeated axis in {axis} for shape {x.shape}")
    if x.ndim == 0:  # axis 0 / -1 of a 0-d tensor is accepted (as torch does) and reduces nothing
        return ()
    return tuple(sorted(norm))


# rows of ``a`` from which ``x @ w.T`` copies ``w`` transposed: fewer rows read ``w`` once or a few
# times, and the copy (all of ``w``) cost more than the product it speeds up (one row of a
# 2048x8192 Linear: 15.8 ms with the copy, 1.09 ms reading w in place, its rows contiguous in k)
_TRANSPOSE_COPY_ROWS = 8
_TRANSPOSE_COPY_MIN = 1 << 14  # elements of b: smaller transposed operands are read in place,
_TRANSPOSE_COPY_WORK = 1 << 20  # unless the product does this many multiply-adds
# (a language model's head over 1024 tokens reads a 64 x 128 embedding table 1024 times)
# a right operand of at least an eighth of the last-level cache is read through a packed copy (see
# _packed_transpose): beyond it, its rows lie so far apart that walking a column panel misses the
# TLB at every row (measured on a 2-core AVX-512 machine with 32 MiB of L3, where this is 4 MiB:
# 2048^2 float32 140 -> 225 GFLOP/s; 1024^2 11.1-11.5 -> 10.3 ms, numpy's OpenBLAS 10.6-10.8)
_PACK_LLC_FRACTION = 8
_PACK_PANEL_BYTES = 128  # columns per panel: two 64-byte vectors
_PACK_MIN_ROWS = 64  # a matrix-vector product reads b once anyway: a copy would only add traffic
# float16, bfloat16 and the 8-bit floats: a product of two of them is exact in float32 (at most 22
# significant bits), and a matmul of them accumulates those exact products in float32 and rounds
# once (render/c.py: narrow_rounded). On the CPU one of at least this many multiply-adds runs as
# the float32 matmul of the converted operands, rounded at the end: the same values, through the
# float32 kernels' vector tiles (which read and write float32 only): 512^2 bfloat16 3.6 -> 167 GFLOP/s
_NARROW_FLOATS = frozenset({dt.float16, dt.bfloat16, dt.float8_e4m3fn, dt.float8_e5m2})
_NARROW_MATMUL_MIN = 1 << 16


# A device without one kernel's view of all its cores (a GPU, OpenCL) runs a long reduce with few
# outputs in two kernels: partials side by side, then their reduce (see _split_reduce)
_SPLIT_MIN = 1 << 16  # reduced elements
_SPLIT_MAX_OUT = 64  # outputs
# or shorter reduces of this many elements in all (a convolution's bias gradient: 32 channels,
# each a sum over (N, H, W) = 128 x 20 x 20, ran on 32 work-groups of 64: 2048 threads)
_SPLIT_SHORT, _SPLIT_TOTAL = 1 << 12, 1 << 20
_SPLIT_PARTS = 1024  # partials per output (at most)
# A column reduce (the reduced axes lead, the kept ones are contiguous: a bias's or a norm's weight
# gradient, a sum over a batch's rows) of more outputs than that, on such a device, is split too:
# one work-group per column read the column's elements a row apart, each warp's load touching 32
# rows (a GPT-2 step's bias and norm gradients over 8192 rows of 768 and 3072 columns: some 4 ms of
# a 60 ms step on an H200); partials over chunks of rows, one work item per (chunk, column), read
# each row's columns side by side instead, then a short column reduce sums the partials
_COLUMN_MAX_OUT = 1 << 15  # outputs from which one work item per column already fills the device
_COLUMN_MIN_ROWS = 512  # rows below which the column reduce stays one kernel
_COLUMN_ITEMS = 1 << 17  # work items of the partials' kernel (at most)
_COLUMN_ROWS = 16  # rows per partial (at least)


_split_layouts: dict[str, str | None] = {}
_SUM_DTYPES: dict[dt.DType, dt.DType] = {}  # dt.sum_dtype, remembered: sum() is called per step


def _split_layout(device: str) -> str | None:
    found = _split_layouts.get(device, False)
    if found is False:
        from ..runtime.device import get_device

        found = _split_layouts[device] = getattr(get_device(device), "split_reduces", None)
    return found


def _split_reduce(x: Tensor, op: str, axes: tuple[int, ...], n: int, layout: str) -> Tensor:
    """``op`` over ``axes`` (keeping them as size 1) as two reduces: first ``parts`` partials,
    each over a contiguous chunk of the reduced elements (``layout="chunks"``: what a CPU-like
    device that runs a work item's loop at a time reads fastest) or over every ``parts``-th
    element (``"strided"``: neighbouring work items of a GPU read neighbouring elements); then
    the partials' reduce. Both are REDUCE nodes, so gradients and transforms see ordinary
    reduces."""
    kept = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    parts = next((p for p in (_SPLIT_PARTS, 512, 256, 128) if n % p == 0), 0)
    if not parts:  # (an odd count: one kernel)
        return x._new(node(Op.REDUCE, (x.node,), (op, axes), x.dtype, kept))
    keep = [i for i in range(x.ndim) if i not in axes]
    lead = tuple(x.shape[i] for i in keep)
    flat = x.permute(keep + list(axes))
    if layout == "chunks":
        partial = flat.reshape(lead + (parts, n // parts))._reduce(op, -1, keepdims=False)
    else:
        partial = flat.reshape(lead + (n // parts, parts))._reduce(op, -2, keepdims=False)
    # (stored: the scheduler would fuse the two reduces back into one kernel)
    return partial.contiguous()._reduce(op, -1, keepdims=False).reshape(kept)


def _column_parts(shape: tuple, axes: tuple[int, ...], layout: str | None) -> int:
    """How many partials :func:`_split_columns` makes for a reduce over ``axes`` of ``shape``:
    0 unless it is a column reduce (its reduced axes all come before its kept ones) on a device
    that splits reduces, with at least :data:`_COLUMN_MIN_ROWS` rows, more outputs than
    :data:`_SPLIT_MAX_OUT` and fewer than :data:`_COLUMN_MAX_OUT`, and 2**20 elements in all."""
    if layout is None or is_symbolic(shape) or max(axes) >= len(shape) or \
            any(i not in axes for i in range(max(axes))):
        return 0
    n = math.prod(shape[: max(axes) + 1])
    m = math.prod(shape[max(axes) + 1:])
    if n < _COLUMN_MIN_ROWS or not _SPLIT_MAX_OUT < m < _COLUMN_MAX_OUT or n * m < _SPLIT_TOTAL:
        return 0
    parts = 1
    while n % (parts * 2) == 0 and parts * 2 * m <= _COLUMN_ITEMS and n // (parts * 2) >= _COLUMN_ROWS:
        parts *= 2
    return parts if parts >= 4 else 0


def _split_columns(x: Tensor, op: str, axes: tuple[int, ...], parts: int, layout: str) -> Tensor:
    """``op`` over the leading ``axes`` of ``x`` (a column reduce, see :func:`_column_parts`),
    keeping them as size 1, as two reduces: ``parts`` partials per column, each over a chunk of
    the rows (``layout="chunks"``: contiguous rows; ``"strided"``: every ``parts``-th row), stored
    as a (parts, columns) array, so that neighbouring work items read neighbouring columns of a
    row; then the partials' column reduce. Both are REDUCE nodes, as in :func:`_split_reduce`."""
    kept = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    n = math.prod(x.shape[: max(axes) + 1])
    m = x.node.numel // n
    if layout == "chunks":
        partial = x.reshape((parts, n // parts, m))._reduce(op, 1, keepdims=False)
    else:
        partial = x.reshape((n // parts, parts, m))._reduce(op, 0, keepdims=False)
    # (stored: the scheduler would fuse the two reduces back into one kernel)
    return partial.contiguous()._reduce(op, 0, keepdims=False).reshape(kept)


def _on_cpu(t: Tensor) -> bool:
    return isinstance(t.device, str) and t.device.startswith("CPU")


def _packs(b: Tensor, rows: int) -> bool:
    """Whether ``rows`` rows times ``b`` read ``b`` through a packed copy (:func:`_packed_transpose`)."""
    if not _on_cpu(b):
        return False
    k, m = b.shape[-2:]
    if is_symbolic(m) and not isinstance(m % (_PACK_PANEL_BYTES // b.dtype.itemsize), Num):
        return False  # (whole panels only where the symbolic column count provably has them: no guard on it)
    return b.dtype.is_float and b.dtype.itemsize >= 4 and not m % (_PACK_PANEL_BYTES // b.dtype.itemsize) and \
        rows >= _PACK_MIN_ROWS and k * m * b.dtype.itemsize >= cache_bytes(3) // _PACK_LLC_FRACTION


def _packed_transpose(b: Tensor, rows: int) -> Tensor | None:
    """``b.mT`` (shape (..., m, k)) read from a copy of ``b`` in which each panel of P columns is
    stored contiguously, row after row (shape (..., m/P, k, P)); None when ``b`` is small, not a
    float, its column count is not a multiple of P, or too few ``rows`` of the left operand would
    reuse a panel to pay for the copy, or on a device without the CPU's caches and TLB (a GPU
    reads a matmul's operands through its own tiles)."""
    if not _packs(b, rows):
        return None
    k, m = b.shape[-2:]
    p = _PACK_PANEL_BYTES // b.dtype.itemsize
    lead = tuple(range(b.ndim - 2))
    r = len(lead)
    packed = b.reshape(b.shape[:-1] + (m // p, p)).permute(lead + (r + 1, r, r + 2)).contiguous()
    return packed.permute(lead + (r, r + 2, r + 1)).reshape(b.shape[:-2] + (m, k))


def _matmul(a: Tensor, b: Tensor, common: dt.DType) -> Tensor:
    """``a @ b`` in ``common`` for operands of at least 2 dimensions: a broadcast product summed
    over the shared axis (one kernel, with whatever elementwise work follows).

    Differentiated, its gradients are matrix products again (:func:`_matmul_bwd`), so they get the
    layout choices below. The primitives' own rules would read each operand in the layout of the
    forward: the gradient of ``x @ w.T`` with respect to ``x`` would read the transposed copy of
    ``w`` along its rows, a dot product per output that the heuristics do not tile (a GPT training
    step, 4 layers of width 128: the four such kernels per layer took 60% of the step)."""
    if not _on_cpu(b):  # (a GPU's library: cuBLASLt on CUDA, with rules of its own; see ops/blas.py)
        from . import blas

        product = blas.matmul(a, b, common)
        if product is not None:
            return product
    elif common is dt.float32:
        from ..amp import get_float32_matmul_precision

        if get_float32_matmul_precision() == "medium":  # (bfloat16 dot products, where the CPU has them)
            from ..nn import cpu_matmul

            product = cpu_matmul.float32_product(a.astype(common), b.astype(common))
            if product is not None:
                return product
    if common.is_float and (a.node.traced or b.node.traced):
        rule = _MATMUL_RULE or _matmul_rule()
        return rule(a.astype(common), b.astype(common))
    return _matmul_impl(a, b, common)


_MATMUL_RULE = None


def _matmul_rule() -> Any:
    global _MATMUL_RULE
    from ..transforms.custom import custom_vjp

    @custom_vjp
    def matmul(a: Tensor, b: Tensor) -> Tensor:
        return _matmul_impl(a, b, a.dtype)

    matmul.defvjp(lambda a, b: (_matmul_impl(a, b, a.dtype), (a, b)), _matmul_bwd)
    _MATMUL_RULE = matmul
    return matmul


def _mT(t: Tensor) -> Tensor:
    """``t.mT``; for a view that swaps the last two axes (``w.T``), the tensor under it."""
    if _transposed_view(t):
        return t._new(t.node.src[0])
    return t.mT


def _sum_to(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``t`` summed over the axes that broadcasting ``shape`` to ``t.shape`` added or stretched."""
    lead = t.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and t.shape[lead + i] != 1)
    return (t.sum(axes, keepdims=True) if axes else t).reshape(shape)


def _matmul_bwd(res: tuple[Tensor, Tensor], g: Tensor) -> tuple[Tensor, Tensor]:
    """``da = g @ b.mT`` and ``db = a.mT @ g`` (summed over broadcast batch axes). A 2-d ``b``
    under a batched ``a`` (a Linear layer) is one product over the batch's rows, so ``db`` is one
    reduce, not a product per batch element summed afterwards."""
    a, b = res
    if b.ndim == 2 and a.ndim > 2:
        k, m = b.shape
        a2, g2 = a.reshape(-1, k), g.reshape(-1, m)
        return (g2 @ _mT(b)).reshape(a.shape), _mT(a2) @ g2
    return _sum_to(g @ _mT(b), a.shape), _sum_to(_mT(a) @ g, b.shape)


def _padded_columns(a: Tensor, b: Tensor, common: dt.DType) -> int:
    """The column count ``a @ b`` is computed with on the CPU: ``b``'s, rounded up to whole 64-byte
    vectors when it is not (a language model's head over an odd vocabulary: 65 characters, GPT-2's
    50257 tokens) and the product is large; the register tile vectorizes along the columns only
    when their count is a multiple of the vector width, and the scalar kernel of GPT-2's head ran
    at ~2 GFLOP/s. A matrix-vector product, few columns (a tile unrolls them whole) or more than
    a quarter of them wasted keep the count."""
    m = b.shape[-1]
    lane = 64 // max(common.itemsize, 1)
    if is_symbolic(m):  # (a symbolic column count: rounded up to whole vectors, so the tile vectorizes)
        if not (_on_cpu(b) and common.is_float and common.itemsize >= 4) or isinstance(m % lane, Num) and m % lane == 0:
            return m
        return (m + lane - 1) // lane * lane
    if not _on_cpu(b) or not common.is_float or common.itemsize < 4 or m < 2 * lane or not m % lane or \
            a.shape[-2] < _PACK_MIN_ROWS // 8 or a.size * m < _TRANSPOSE_COPY_WORK:
        return m
    padded = -(-m // lane) * lane
    return padded if padded - m <= m // 4 else m


def _matmul_impl(a: Tensor, b: Tensor, common: dt.DType, padded_once: bool = False) -> Tensor:
    from ..tensor import broadcast_shapes

    m = b.shape[-1]
    padded = m if padded_once else _padded_columns(a, b, common)
    if padded != m:  # (b copied once with zero columns; the product stored, then its view)
        bp = b.astype(common).pad(((0, 0),) * (b.ndim - 1) + ((0, padded - m),)).contiguous()
        return _matmul_impl(a, bp, common, padded_once=True).contiguous()[..., :m]
    packed = _packed_transpose(b.astype(common), a.shape[-2])
    if packed is None and _transposed_view(b) and a.shape[-2] >= _TRANSPOSE_COPY_ROWS and \
            (b.size >= _TRANSPOSE_COPY_MIN or a.size * b.shape[-1] >= _TRANSPOSE_COPY_WORK):
        # ``x @ w.T`` (a Linear layer, attention's ``q @ k.mT``, most backward matmuls) would read
        # w across its rows in the inner loop: a transposed copy (O(k*m)) lets the kernel vectorize
        # along contiguous columns of b, measured 3x faster than the dot-product form at 512^2.
        # Counted over the batch: attention's 64 (batch x heads) 64x32 keys are one copy kernel
        # (the score product's kernel ran 4x faster); and a small b is copied too when many rows
        # read it
        b = b.contiguous()
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
    a3 = a.astype(common).broadcast_to(batch + (n, k)).reshape(batch + (n, 1, k))
    bt = b.astype(common).mT if packed is None else packed
    b3 = bt.broadcast_to(batch + (m, k)).reshape(batch + (1, m, k))
    return (a3 * b3)._reduce("sum", -1, False) if k else a3._const(0, common, batch + (n, m))


def _reads_in_place(a: Tensor, b: Tensor) -> bool:
    """Whether ``a @ b`` is a few rows times a transposed view (``x @ w.T`` of a token in a
    decode step), which the product reads in place, both operands along the shared axis: a narrow
    ``w`` is then read as it is stored and converted in registers. Converting it to float32
    first wrote a float32 copy of all of ``w`` for each call (one bfloat16 row times a
    2048x8192 weight: 18 ms to convert, 1.3 ms to read it in place)."""
    if a.shape[-2] >= _TRANSPOSE_COPY_ROWS:
        return False
    n = b.node
    while n.op in IDENTITY and n.src:  # (a weight passed as a leaf: DETACH(PERMUTE(VAR(w))) under no_grad)
        n = n.src[0]
    return _swaps_last_axes(n)


def _real_float(x: Tensor) -> Tensor:
    """``x`` as a real float tensor (ints and bools in the default float); TypeError for complex."""
    if x.dtype.is_complex:
        raise TypeError(f"this reduction is not defined for complex tensors ({x.dtype.name})")
    return x if x.dtype.is_float else x.astype(dt.default_float)


def _transposed_view(t: Tensor) -> bool:
    """Whether ``t`` is a permute that swaps its last two axes (``w.T``, ``w.mT``)."""
    return _swaps_last_axes(t.node)


def _swaps_last_axes(n: Node) -> bool:
    """Whether the node ``n`` is a permute that swaps its last two axes."""
    ndim = len(n.shape)
    if n.op is not Op.PERMUTE or ndim < 2:
        return False
    perm = n.arg
    return perm[-2:] == (ndim - 1, ndim - 2) and all(perm[i] == i for i in range(ndim - 2))


class ReduceMixin:
    __slots__ = ()

    def _reduce(self: Tensor, op: str, axis: Axis, keepdims: bool, dtype: dt.DType | None = None) -> Tensor:
        if op in ("max", "min") and self.dtype.is_complex:
            raise TypeError(f"{op} is not defined for complex tensors ({self.dtype.name}): they are not ordered")
        x = self if dtype is None or dtype is self.dtype else self.astype(dtype)
        shape = x.shape
        if axis is None:  # (the common case, written out: this runs once per call of sum())
            axes: tuple[int, ...] = tuple(range(len(shape)))
            kept = (1,) * len(shape)
            out_shape = kept if keepdims else ()
        else:
            axes = _axes(x, axis)
            kept = tuple(1 if i in axes else s for i, s in enumerate(shape))
            out_shape = kept if keepdims else tuple(s for i, s in enumerate(shape) if i not in axes)
        n = 1
        for a in axes:
            n *= shape[a]
        if n == 0:
            if op in ("max", "min"):
                raise ShapeError(f"{op} of an empty axis has no identity (shape {self.shape}, axis {axis})")
            if not x.node.traced:
                return x._const(dt.reduce_identity(x.dtype, op), x.dtype, out_shape)
            # (being differentiated: the identity as x padded to one element along its empty axes, so
            # that the result stays in x's graph and x gets its (empty) gradient, as in PyTorch)
            filled = x.pad([(0, 1 if i in axes and s == 0 else 0) for i, s in enumerate(shape)],
                           dt.reduce_identity(x.dtype, op))
            return filled._reduce(op, axes, keepdims).reshape(out_shape)
        if 1 in shape:
            axes = tuple(a for a in axes if shape[a] != 1)
        if not axes:  # (a 0-d tensor, or only axes of size 1)
            return x.reshape(out_shape)
        # (a symbolic size: one reduce, whose kernel cascades the sum over it)
        layout = _split_layout(x.device) if not is_symbolic(n) and not is_symbolic(kept) and \
            (n >= _SPLIT_MIN or n >= _SPLIT_SHORT and n * math.prod(kept) >= _SPLIT_TOTAL) \
            and math.prod(kept) <= _SPLIT_MAX_OUT else None
        if layout is not None:
            return _split_reduce(x, op, axes, n, layout).reshape(out_shape)
        if not is_symbolic(n) and n >= _COLUMN_MIN_ROWS:  # (is_symbolic first: a comparison of a symbolic size guards a trace)
            layout = _split_layout(x.device)
            parts = _column_parts(shape, axes, layout)
            if parts:
                return _split_columns(x, op, axes, parts, layout).reshape(out_shape)
        out = x._new(node(Op.REDUCE, (x.node,), (op, axes), x.dtype, kept))
        return out if out_shape == kept else out._move(Op.RESHAPE, out_shape, out_shape)

    @replayed
    def sum(self: Tensor, axis: Axis = None, keepdims: bool = False, dtype: Any = None) -> Tensor:
        """Sum over ``axis`` (all axes if None). bool and small ints accumulate in int64, uints in uint64."""
        if dtype is None:
            src = self.dtype
            d = _SUM_DTYPES.get(src)
            if d is None:
                d = _SUM_DTYPES[src] = dt.sum_dtype(src)
        else:
            d = dt.to_dtype(dtype)
        return self._reduce("sum", axis, keepdims, d)

    def prod(self: Tensor, axis: Axis = None, keepdims: bool = False, dtype: Any = None) -> Tensor:
        d = dt.sum_dtype(self.dtype) if dtype is None else dt.to_dtype(dtype)
        return self._reduce("prod", axis, keepdims, d)

    def max(self: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        """Maximum over ``axis``; nan propagates; ValueError over an empty axis."""
        return self._reduce("max", axis, keepdims)

    def min(self: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return self._reduce("min", axis, keepdims)

    def any(self: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return self.astype(dt.bool_)._reduce("sum", axis, keepdims)

    def all(self: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return self.astype(dt.bool_)._reduce("prod", axis, keepdims)

    def mean(self: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        """Arithmetic mean; integer inputs give the default float dtype; empty gives nan. float16,
        bfloat16 and the 8-bit floats are summed and divided in float32 and rounded once, as
        numpy's float16 mean and PyTorch's do (the mean of ``[65504] * 4`` in float16 is 65504,
        where a float16 sum would overflow to inf)."""
        x = self if self.dtype.is_float or self.dtype.is_complex else self.astype(dt.default_float)
        n = math.prod(x.shape[a] for a in _axes(x, axis))
        total = x.sum(axis, keepdims, dtype=dt.float32 if x.dtype in _NARROW_FLOATS else None)
        if is_symbolic(n):  # (a symbolic count: divided by at run time)
            mean = total / n
        else:
            mean = total * (1 / n) if n else total * math.nan
        return mean.astype(x.dtype) if mean.dtype != x.dtype else mean

    def var(self: Tensor, axis: Axis = None, keepdims: bool = False, correction: float = 0, ddof: float | None = None) -> Tensor:
        """Variance with ``correction`` (alias ``ddof``) subtracted from the count. For a complex
        tensor it is the real mean of ``|x - mean|**2`` (as numpy; the result is real).

        With ``correction >= N`` (N the reduced count) the sum of squares is divided by 0, as
        numpy and PyTorch do: inf where it is positive, nan where it is 0 (an empty axis, equal
        values) or nan. (Both also warn; this is lazy and does not.)

        >>> cv.Tensor([1.0, 2.0]).var(correction=2).item()
        inf
        """
        c = correction if ddof is None else ddof
        x = self if self.dtype.is_complex else _real_float(self)
        if x.dtype in _NARROW_FLOATS:  # computed in float32, rounded once (as PyTorch: no overflow in the squares)
            return ReduceMixin.var(x.astype(dt.float32), axis, keepdims, c).astype(x.dtype)
        n = math.prod(x.shape[a] for a in _axes(x, axis))
        dev = x - x.mean(axis, keepdims=True)
        sq = dev.real * dev.real + dev.imag * dev.imag if x.dtype.is_complex else dev * dev
        total = sq.sum(axis, keepdims)
        if is_symbolic(n):  # (a symbolic count: divided by at run time; at least 2, so above an integer correction of 1)
            if not float(c).is_integer():
                raise SymbolicSizeError(f"var: a fractional correction ({c}) of a symbolic count")
            return total / (n - int(c)) if n - int(c) > 0 else total / 0.0
        return total * (1 / (n - c)) if n - c > 0 else total / 0.0

    def std(self: Tensor, axis: Axis = None, keepdims: bool = False, correction: float = 0, ddof: float | None = None) -> Tensor:
        return ReduceMixin.var(self, axis, keepdims, correction, ddof).sqrt()

    def _arg_extreme(self: Tensor, op: str, axis: int | None, keepdims: bool) -> Tensor:
        from ..tensor import Tensor

        if axis is None:
            x, ax = self.reshape(-1), 0
        elif self.ndim == 0:  # axis 0 or -1 (IndexError otherwise): one element, at index 0
            x, ax = self.reshape(1), normalize_axis(axis, 0)
        else:
            x, ax = self, normalize_axis(axis, self.ndim)
        n = x.shape[ax]
        if n == 0:
            raise ShapeError(f"arg{op} of an empty axis (shape {self.shape})")
        best = x._reduce(op, ax, True)
        hit = x.eq(best)
        if x.dtype.is_float:
            hit = hit | (x.isnan() & best.isnan())
        shape = [1] * x.ndim
        shape[ax] = n
        rev = Tensor._from_node(node(Op.IOTA, (), None, dt.int64, (n,)), self.device)
        rev = (n - 1 - rev).reshape(shape)
        first = where(hit, rev, -1)._reduce("max", ax, True)
        out = (n - 1) - first
        if axis is None or self.ndim == 0:
            return out.reshape((1,) * self.ndim if keepdims else ())
        return out if keepdims else out.squeeze(ax)

    def argmax(self: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
        """Index of the first maximum (first nan, if any) along ``axis`` (flattened if None), int64."""
        return self._arg_extreme("max", axis, keepdims)

    def argmin(self: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return self._arg_extreme("min", axis, keepdims)

    def logsumexp(self: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
        """``log(sum(exp(x)))`` computed stably (shifted by the max).

        The shift takes no gradient (the result does not depend on it: its derivative through
        the max is ``1 - sum(softmax)``, zero), so the gradient is ``softmax(x)`` alone, as in
        JAX; through the max, a backward pass read the input three more times (the max's
        one-hot and its ties: a language model's 8192 x 50257 logits, 823 MB a read)."""
        (x,) = widen(_real_float(self))
        m = x.max(axis, keepdims=True).detach()
        m = where(m.isinf(), 0.0, m)
        out = (x - m).exp().sum(axis, keepdims=True).log() + m
        return out if keepdims else out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in _axes(x, axis)))

    @replayed
    def softmax(self: Tensor, axis: int = -1) -> Tensor:
        """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (the shift takes no gradient:
        the result does not depend on it; see :meth:`logsumexp`)."""
        (x,) = widen(_real_float(self))
        e = (x - x.max(axis, keepdims=True).detach()).exp()
        return e / e.sum(axis, keepdims=True)

    @replayed
    def log_softmax(self: Tensor, axis: int = -1) -> Tensor:
        """``x - logsumexp(x)`` along ``axis``, shifted by the max (which takes no gradient)."""
        (x,) = widen(_real_float(self))
        shifted = x - x.max(axis, keepdims=True).detach()
        return shifted - shifted.exp().sum(axis, keepdims=True).log()

    @replayed
    def matmul(self: Tensor, other: Tensor) -> Tensor:
        """Matrix product with numpy semantics: 1-d operands are promoted then squeezed, batch
        dimensions broadcast. ValueError naming both shapes if the inner sizes differ. ``x @ y``
        is the same.

        >>> a = cv.Tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> a.matmul(cv.Tensor([1.0, 1.0])).tolist()
        [3.0, 7.0]
        >>> cv.ones(5, 2, 3).matmul(cv.ones(3, 4)).shape
        (5, 2, 4)
        """
        from ..tensor import Tensor, result_type

        if not isinstance(other, Tensor):
            other = Tensor(other, device=self.device)
        if _AUTOCAST.get() is not None:  # (mixed precision: the product in bfloat16/float16)
            self, other = narrow(self, other)
        if self.ndim == 0 or other.ndim == 0:
            raise ShapeError(f"matmul: operands must have at least 1 dimension, got shapes {self.shape} and {other.shape}")
        a = self.reshape(1, -1) if self.ndim == 1 else self
        b = other.reshape(-1, 1) if other.ndim == 1 else other
        if a.shape[-1] != b.shape[-2]:
            raise ShapeError(f"matmul: shapes {self.shape} and {other.shape} do not align "
                             f"({a.shape[-1]} != {b.shape[-2]})")
        common = a.dtype if a.dtype is b.dtype else result_type(a, b)
        if common in _NARROW_FLOATS and a.shape[-2] * a.shape[-1] * b.shape[-1] >= _NARROW_MATMUL_MIN and _on_cpu(a) \
                and not _reads_in_place(a, b):
            # (the operands are converted once, by kernels of their own, not at every read of the
            # tiles; the float32 result is stored, so that the rounding to ``common`` is a kernel of
            # its own and the matmul stores vectors)
            a32, b32 = a.astype(dt.float32).contiguous(), b.astype(dt.float32)
            if not _packs(b32, a.shape[-2]):
                b32 = b32.contiguous()
            # (else the packed copy the float32 product makes converts b itself: one copy of b, not
            # two; a prompt of 512 tokens converted each weight of a language model, then packed it)
            token = _AUTOCAST.set(None)  # (this float32 product is the narrow one's value: autocast must not narrow it)
            try:
                out = a32.matmul(b32).contiguous().astype(common)
            finally:
                _AUTOCAST.reset(token)
        else:
            out = _matmul(a, b, common)
        if self.ndim == 1:
            out = out.squeeze(-2)
        if other.ndim == 1:
            out = out.squeeze(-1)
        return out

    __matmul__ = matmul

    def __rmatmul__(self: Tensor, other: Any) -> Tensor:
        from ..tensor import Tensor

        return Tensor(other, device=self.device).matmul(self)

    dot = matmul

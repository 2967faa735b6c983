"""Convolution and pooling over 1, 2 or 3 spatial dimensions (layout ``(N, C, *spatial)``, as torch).

Everything here is built on one view, :func:`sliding_windows`: for every output position it
exposes the window of input elements it reads, as extra axes, without copying anything. One
spatial axis of size ``i`` becomes two axes ``(o, k)`` with ``view[o, b] = x[o*stride + b*dilation]``:

1. repeat the axis ``e`` times (``expand``) and flatten, so the data reads ``x, x, x, ...``;
2. cut the flat axis into rows of ``i + dilation`` elements (``shrink`` + ``reshape``): row ``b``
   now starts at element ``b*dilation`` of ``x``, because each row is ``dilation`` longer than ``x``;
3. keep the first ``i - dilation*(k-1)`` columns (every window that fits) and every ``stride``-th
   of them, then swap the two axes.

In the generated code the element of step 2 is ``(b*(i+dilation) + a) % i``; the index simplifier
pulls the multiple of ``i`` out and proves ``b*dilation + a < i``, so the modulo disappears and a
convolution's inner loop reads ``x[(o*stride + b*dilation)*row + ...]``: plain index arithmetic.

A convolution is then the window view times the weights, summed over ``(C_in/groups, *kernel)``:
one fused reduce kernel, like matmul. With several output channels per group the product is laid
out channels-last, ``(N, *out, C_out)``, against a channels-last copy of the (small) weights, so
the innermost output loop reads weights contiguously and the matmul heuristic of
``codegen/opt.py`` vectorizes and register-tiles it; the result is stored once and read back
through a permute. Max pooling is a ``max`` over the window axes of the view of
an input padded with ``-inf``; average pooling a ``sum`` divided by a per-position count. The
transposed convolution is the convolution's gradient with respect to its input written forward:
spread the input with ``stride - 1`` zeros between elements (a pad and a reshape), pad by
``dilation*(kernel-1) - padding``, and convolve with the flipped kernel, its channel axes swapped.

Gradients of the convolution come from a ``custom_vjp`` rule (``_conv_bwd``), because the automatic
gradient of the window view is an overlap-add with ``//`` and ``%`` in its indices that first
stores ``g·wᵀ`` at ``(N, *out, C_in*kernel)`` size (8x the forward for MNIST's second conv). The
rule writes each cotangent as a forward-style reduce: ``dx`` is the transposed convolution of the
cotangent (padded so it restores ``x``'s shape), ``dw`` a matmul of the window view of ``x`` with
the cotangent stored channels-last, reduced over ``(N, *out)`` in batch chunks that run in
parallel, and ``dbias`` a sum. Those are Tensor ops (``dx`` calls :func:`conv` again), so grad of
grad works, and ``vmap`` batches the rule (``transforms/custom.py``). ``jvp`` needs no rule of
its own: under forward mode the custom_vjp call returns the implementation's graph, and its
primitives' tangents give ``conv(tx, w) + conv(x, tw)``. ``conv_transpose`` is built on
:func:`conv`, so it inherits the rule; pooling keeps the automatic gradient, which is cheap when
the windows tile the input (``stride == kernel``, no dilation: the view is a reshape).

Gradients of max pooling: the ``max`` reduce sends the cotangent to the element that holds the
maximum; when several elements of one window tie, it is split equally between them (torch gives
it all to the first). Windows that overlap add their contributions.
"""

from __future__ import annotations

import functools
import math
import textwrap
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import ShapeError
from .. import dtype as dt
from ..amp import narrow as amp_narrow
from ..engine.replay import replayed
from ..graph.node import MOVEMENT, node
from ..transforms.custom import custom_vjp

if TYPE_CHECKING:
    from ..tensor import Tensor

__all__ = ["conv", "conv1d", "conv2d", "conv3d", "conv_transpose", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "max_pool", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool", "avg_pool1d",
           "avg_pool2d", "avg_pool3d", "adaptive_avg_pool", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
           "adaptive_avg_pool3d", "adaptive_max_pool", "adaptive_max_pool1d", "adaptive_max_pool2d",
           "adaptive_max_pool3d", "sliding_windows"]

IntOrTuple = int | Sequence[int]


def _tensor(x: Any) -> Tensor:
    from ..tensor import Tensor

    return x if isinstance(x, Tensor) else Tensor(x)


def _ints(v: IntOrTuple, n: int, name: str, lo: int = 1) -> tuple[int, ...]:
    """``v`` as ``n`` ints ``>= lo`` (an int is repeated); ValueError naming ``name`` otherwise."""
    items = [v] * n if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else list(v)
    if len(items) != n or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in items):
        raise ValueError(f"{name} must be an int or a sequence of {n} ints, got {v!r}")
    if any(i < lo for i in items):
        raise ValueError(f"{name} must be >= {lo}, got {v!r}")
    return tuple(int(i) for i in items)


def _spatial(x: Tensor, nd: int | None, what: str, lo: int = 1, hi: int = 3) -> int:
    """The number of spatial dims of ``x`` (``(N, C, *spatial)``), checked against ``nd`` if given."""
    n = x.ndim - 2 if nd is None else nd
    if not lo <= n <= hi or x.ndim != n + 2:
        want = f"{n + 2}" if nd is not None else f"{lo + 2} to {hi + 2}"
        raise ShapeError(f"{what}: expected an input of {want} dimensions (N, C, *spatial), got shape {x.shape}")
    return n


def _window_axis(x: Tensor, axis: int, k: int, s: int, d: int) -> Tensor:
    """Axis ``axis`` (size ``i``) becomes ``(o, k)`` with ``y[o, b] = x[o*s + b*d]`` (a view)."""
    i = x.shape[axis]
    fit = i - d * (k - 1)  # window starts at stride 1
    pre, post = x.shape[:axis], x.shape[axis + 1:]
    keep_pre, keep_post = [(0, t) for t in pre], [(0, t) for t in post]
    reps = -(-k * (i + d) // i)
    y = x.unsqueeze(axis).expand(pre + (reps, i) + post).reshape(pre + (reps * i,) + post)
    y = y.shrink(keep_pre + [(0, k * (i + d))] + keep_post).reshape(pre + (k, i + d) + post)
    y = y.shrink(keep_pre + [(0, k), (0, fit)] + keep_post)
    if s > 1:
        y = y._step(axis + 1, 0, fit, s)
    return y.transpose(axis, axis + 1)


def sliding_windows(x: Tensor, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> Tensor:
    """The windows of the last ``len(kernel)`` axes of ``x`` as a view, without copying.

    ``x`` of shape ``(*batch, *spatial)`` gives ``(*batch, *out, *kernel)`` where
    ``out[j] = (spatial[j] - dilation[j]*(kernel[j]-1) - 1) // stride[j] + 1`` and
    ``view[..., o, b] = x[..., o*stride + b*dilation]`` on every axis. ValueError if a window does
    not fit (an output size below 1).

    >>> sliding_windows(cv.arange(5.0), (2,), (2,), (1,)).tolist()
    [[0.0, 1.0], [2.0, 3.0]]
    """
    nd = len(kernel)
    first = x.ndim - nd
    sizes = x.shape[first:]
    for i, k, d in zip(sizes, kernel, dilation):
        if i - d * (k - 1) < 1:
            raise ValueError(f"sliding_windows: the window (kernel {tuple(kernel)}, dilation {tuple(dilation)}) "
                             f"does not fit the spatial shape {sizes} of the input of shape {x.shape}")
    # the view is a chain of some 15 movement nodes over x, the same for every x of one shape: it
    # is recorded once and rebuilt node by node after that (eager convolutions built it at every call)
    key = (x.shape, x.dtype, tuple(kernel), tuple(stride), tuple(dilation))
    recipe = _WINDOWS.get(key) if not x.node.traced and all(type(s) is int for s in x.shape) else None
    if recipe is not None:
        n = x.node
        for op, arg, shape in recipe:
            n = node(op, (n,), arg, n.dtype, shape)
        return x._new(n)
    base = x
    for j, (k, s, d) in enumerate(zip(kernel, stride, dilation)):
        x = _window_axis(x, first + 2 * j, k, s, d)
    order = (list(range(first)) + [first + 2 * j for j in range(nd)] + [first + 2 * j + 1 for j in range(nd)])
    out = x.permute(order)
    if not base.node.traced and all(type(s) is int for s in base.shape):
        steps, n = [], out.node
        while n is not base.node and n.op in MOVEMENT and len(n.src) == 1:
            steps.append((n.op, n.arg, n.shape))
            n = n.src[0]
        if n is base.node:  # (a chain of views down to x: what the recipe replays)
            if len(_WINDOWS) >= WINDOW_RECIPES:
                _WINDOWS.clear()
            _WINDOWS[key] = tuple(reversed(steps))
    return out


WINDOW_RECIPES = 256  # sliding-window views kept as recipes (per input shape, kernel, stride, dilation)
_WINDOWS: dict[tuple, tuple] = {}


def _pads(padding: Any, nd: int, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
          what: str) -> tuple[tuple[int, int], ...]:
    """Per-axis ``(before, after)`` padding from an int, a tuple, ``"valid"`` or ``"same"``."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * nd
        if padding != "same":
            raise ValueError(f"{what}: padding must be an int, a tuple, 'valid' or 'same', got {padding!r}")
        if any(s != 1 for s in stride):
            raise ValueError(f"{what}: padding='same' needs stride 1, got stride {stride}")
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in total)  # the extra element goes after, as torch
    return _side_pads(padding, nd, what)


def _side_pads(padding: Any, nd: int, what: str) -> tuple[tuple[int, int], ...]:
    """Per spatial axis ``(before, after)`` amounts, each ``>= 0``, from a padding argument:

    * an int: every side of every axis;
    * ``nd`` ints: both sides of each axis, first to last (torch's form);
    * ``nd`` ``(before, after)`` pairs, first axis to last;
    * ``2 * nd`` ints in :func:`corvid.nn.functional.pad`'s order, *last* axis first:
      ``(left, right, top, bottom)`` for two spatial axes, so that ``conv2d(x, w, padding=p)`` is
      ``conv2d(F.pad(x, p), w)``. (Torch's convolutions take only the symmetric forms.)

    The forms differ in length or nesting, so none is mistaken for another. ValueError naming
    ``what`` for anything else."""
    if isinstance(padding, (int, np.integer)):
        items = [padding] * nd
    else:
        try:
            items = list(padding)
        except TypeError:
            items = []
    nested = [isinstance(p, (tuple, list)) for p in items]
    if len(items) == nd and not any(nested):
        pairs = [(q, q) for q in items]
    elif len(items) == nd and all(nested):
        pairs = [tuple(p) for p in items]
    elif len(items) == 2 * nd and not any(nested):
        pairs = [(items[2 * j], items[2 * j + 1]) for j in reversed(range(nd))]
    else:
        pairs = []

    def amount(q: Any) -> bool:
        return isinstance(q, (int, np.integer)) and not isinstance(q, bool) and q >= 0

    if not pairs or not all(len(p) == 2 and amount(p[0]) and amount(p[1]) for p in pairs):
        raise ValueError(f"{what}: padding must be an int, {nd} ints, {nd} (before, after) pairs or {2 * nd} ints "
                         f"(last axis first, as F.pad), none negative; got {padding!r}")
    return tuple((int(b), int(a)) for b, a in pairs)


def _check_weight(x: Tensor, w: Tensor, groups: int, what: str, transposed: bool) -> int:
    nd = _spatial(x, None, what)
    if w.ndim != nd + 2:
        raise ShapeError(f"{what}: weight of shape {w.shape} needs {nd + 2} dimensions for input of shape {x.shape}")
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"{what}: groups must be a positive int, got {groups!r}")
    c_in = x.shape[1]
    if c_in % groups:
        raise ShapeError(f"{what}: groups={groups} does not divide the {c_in} input channels of shape {x.shape}")
    if transposed:
        if w.shape[0] != c_in:
            raise ShapeError(f"{what}: weight of shape {w.shape} expects {w.shape[0]} input channels, "
                             f"input of shape {x.shape} has {c_in}")
    else:
        if w.shape[0] % groups:
            raise ShapeError(f"{what}: groups={groups} does not divide the {w.shape[0]} output channels "
                             f"of weight shape {w.shape}")
        if w.shape[1] * groups != c_in:
            raise ShapeError(f"{what}: weight of shape {w.shape} expects {w.shape[1] * groups} input channels "
                             f"({w.shape[1]} per group x {groups} groups), input of shape {x.shape} has {c_in}")
    return nd


def _add_bias(out: Tensor, bias: Any, what: str) -> Tensor:
    if bias is None:
        return out
    b = _tensor(bias)
    if b.shape != (out.shape[1],):
        raise ShapeError(f"{what}: bias of shape {b.shape} does not match the {out.shape[1]} output channels")
    return out + b.reshape((out.shape[1],) + (1,) * (out.ndim - 2))


@replayed
def conv(x: Tensor, w: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1, padding: Any = 0,
         dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:
    """N-d convolution (cross-correlation, as torch): ``x`` ``(N, C_in, *spatial)`` with ``w``
    ``(C_out, C_in/groups, *kernel)`` gives ``(N, C_out, *out)``, 1 to 3 spatial dims.

    ``out[j] = (spatial[j] + 2*padding[j] - dilation[j]*(kernel[j]-1) - 1) // stride[j] + 1``.
    ``padding`` is an int, a tuple, ``"valid"`` (0) or ``"same"`` (output size = input size; needs
    stride 1; an odd total puts the extra zero after); or per side: a ``(before, after)`` pair
    per spatial axis, or ``2 * nd`` ints last axis first as ``F.pad`` takes them (``(left,
    right, top, bottom)`` in 2-d; ``conv2d(x, w, padding=p)`` is ``conv2d(F.pad(x, p), w)``). ``bias`` has shape ``(C_out,)``. Dtypes
    promote as in ``x * w``. ValueError naming the shapes for a channel mismatch, ``groups`` not
    dividing the channels, or a window larger than the padded input.

    Computed as one fused kernel: the window view of the padded input times the weights, summed
    over ``(C_in/groups, *kernel)``. The gradient is hand-written (see the module docstring);
    ``jvp``, ``vmap`` and higher-order gradients compose with it.

    >>> conv(cv.ones(1, 1, 4, 4), cv.ones(2, 1, 3, 3)).shape
    (1, 2, 2, 2)
    """
    x, w = amp_narrow(_tensor(x), _tensor(w))  # (under autocast: the product in bfloat16/float16)
    nd = _check_weight(x, w, groups, "conv", transposed=False)
    kernel = w.shape[2:]
    st = _ints(stride, nd, "conv: stride")
    dil = _ints(dilation, nd, "conv: dilation")
    pads = _pads(padding, nd, kernel, st, dil, "conv")
    out_sz = _out_sizes(x, kernel, st, dil, pads, "conv", w)
    if bias is not None:
        (bias,) = amp_narrow(_tensor(bias))
        if bias.shape != (w.shape[0],):
            raise ShapeError(f"conv: bias of shape {bias.shape} does not match the {w.shape[0]} output channels")
    if 0 in (x.shape[1], *kernel):
        from ..tensor import result_type

        return _add_bias(x._const(0, result_type(x, w), (x.shape[0], w.shape[0]) + out_sz), bias, "conv")
    narrow = _narrow_route(x, w, x.shape[0] * w.shape[0] * math.prod(out_sz) * math.prod(w.shape[1:]))
    if narrow is not None:
        # float16, bfloat16, 8-bit floats: the float32 convolution of the converted operands,
        # rounded once (the same values: see _narrow_route); the float32 result is stored
        # channels-last, and the rounding is part of the copy that reads it back
        out = _conv(x.astype(dt.float32), w.astype(dt.float32), None, (st, pads, dil, groups))
        return _add_bias(out.astype(narrow), bias, "conv")
    return _conv(x, w, bias, (st, pads, dil, groups))


def _narrow_route(x: Tensor, w: Tensor, macs: int) -> dt.DType | None:
    """The narrow float dtype (float16, bfloat16, an 8-bit float) of a product of ``x`` and ``w``
    that the CPU computes as a float32 product of the converted operands rounded once, or None.
    Their products are exact in float32 and a narrow sum accumulates in float32 and rounds once
    (render/c.py: narrow_rounded), so the values are the same; the float32 kernels are the ones
    the heuristics vectorize and tile (a 3x3 bfloat16 conv of 8x32x28x28 ran at 5 GFLOP/s)."""
    from ..tensor import result_type
    from .reduce import _NARROW_FLOATS, _NARROW_MATMUL_MIN, _on_cpu

    common = result_type(x, w)
    return common if common in _NARROW_FLOATS and macs >= _NARROW_MATMUL_MIN and _on_cpu(x) else None


def _conv_forward(x: Tensor, w: Tensor, bias: Tensor | None, spec: tuple) -> Tensor:
    """The convolution of :func:`conv` on checked arguments; ``spec = (stride, pads, dilation,
    groups)`` with ``pads`` as ``(before, after)`` per axis. Undecorated: its automatic gradient
    is the slow overlap-add of the window view (see :func:`_conv_bwd`)."""
    st, pads, dil, g = spec
    nd = x.ndim - 2
    kernel = w.shape[2:]
    n, c_in, c_out = x.shape[0], x.shape[1], w.shape[0]
    cg, og = c_in // g, c_out // g
    xp = x.pad(((0, 0), (0, 0)) + pads) if any(p != (0, 0) for p in pads) else x
    out_sz = _out_sizes(x, kernel, st, dil, pads, "conv", w)
    if g == 1 and _library_route(x, w, n * c_out * math.prod(out_sz) * c_in * math.prod(kernel)):
        # a device's BLAS library (cuBLASLt on CUDA): per example, the weights (C_out, C_in *
        # kernel) times its windows stored as columns (C_in * kernel, *out): one strided batch of
        # products, the weights shared (a batch stride of 0), written channels-first as the result
        # is laid out. The windows' copy reads the padded view through gates (it is a copy: the
        # bounds tests cost little there), and writes and reads runs of output positions. (The
        # windows as rows, times the weights transposed, gave the result channels-last: a copy
        # of its own to read it back, and one of the padded input.) The bias is added after the
        # products, fused with what reads the result
        from ..tensor import result_type

        common = result_type(x, w)
        cols = _im2col_columns(sliding_windows(xp, kernel, st, dil)).astype(common)
        out = (w.astype(common).reshape(c_out, -1) @ cols).reshape((n, c_out) + out_sz)
        return _add_bias(out, bias, "conv")
    if xp is not x:
        # store the padded input: with the padding read through gates, every load of the inner
        # loop carries a bounds test (a 3x3 pad-1 conv of 32x64x56x56 ran at 60 ms; stored, 43 ms)
        xp = xp.contiguous()
    win = sliding_windows(xp, kernel, st, dil)                               # (N, C_in, *out, *kernel)
    red = tuple(range(-1 - nd, 0))                                           # (C_in/groups, *kernel)
    sp, ks = tuple(range(3, 3 + nd)), tuple(range(3 + nd, 3 + 2 * nd))
    win = win.reshape((n, g, cg) + out_sz + kernel)
    if og == 1:
        # one output channel per group (depthwise): output columns innermost, read contiguously
        win = win.permute((0, 1) + sp + (2,) + ks).unsqueeze(2)              # (N, G, 1, *out, Cg, *kernel)
        out = (win * w.reshape((1, g, 1) + (1,) * nd + (cg,) + kernel)).sum(red)
        return _add_bias(out.reshape((n, c_out) + out_sz), bias, "conv")
    # Output channels innermost: each window element is loaded once and multiplies a contiguous
    # vector of weights (stored (G, Cg, *kernel, Og), a copy of the small weight tensor), which is
    # the layout the matmul heuristic of codegen/opt.py vectorizes and register-tiles. The result
    # is stored channels-last and read back through a permute.
    win = win.permute((0,) + sp + (1, 2) + ks).unsqueeze(1 + nd + 1)        # (N, *out, G, 1, Cg, *kernel)
    wt = w.reshape((g, og, cg) + kernel).permute((0, 2) + tuple(range(3, 3 + nd)) + (1,)).contiguous()
    wt = wt.permute((0, 2 + nd, 1) + tuple(range(2, 2 + nd)))              # (G, Og, Cg, *kernel), a view
    out = (win * wt.reshape((1,) + (1,) * nd + wt.shape)).sum(red).reshape((n,) + out_sz + (c_out,))
    if bias is not None:
        out = out + bias
    return out.contiguous().permute((0, 1 + nd) + tuple(range(1, 1 + nd)))


def _library_route(x: Tensor, w: Tensor, macs: int) -> bool:
    """Whether a convolution of ``macs`` multiply-adds runs as a matrix product through the
    device's BLAS library (:mod:`corvid.ops.blas`: cuBLASLt on CUDA)."""
    from ..tensor import result_type
    from . import blas
    from .reduce import _on_cpu

    return not _on_cpu(x) and macs >= blas.MIN_WORK and result_type(x, w).name in blas.DTYPES and \
        blas.available(x.device)


def _im2col(win: Tensor) -> Tensor:
    """The window view ``(N, C, *out, *kernel)`` as a matrix of one row per output position:
    ``(N * prod(out), C * prod(kernel))`` (a copy: the windows overlap)."""
    nd = (win.ndim - 2) // 2
    n, c = win.shape[:2]
    cols = win.permute((0,) + tuple(range(2, 2 + nd)) + (1,) + tuple(range(2 + nd, 2 + 2 * nd)))
    return cols.reshape(n * math.prod(win.shape[2:2 + nd]), c * math.prod(win.shape[2 + nd:]))


def _im2col_columns(win: Tensor) -> Tensor:
    """The window view ``(N, C, *out, *kernel)`` as one matrix per example with a column per
    output position: ``(N, C * prod(kernel), prod(out))`` (a copy once stored: the windows overlap)."""
    nd = (win.ndim - 2) // 2
    n, c = win.shape[:2]
    cols = win.permute((0, 1) + tuple(range(2 + nd, 2 + 2 * nd)) + tuple(range(2, 2 + nd)))
    return cols.reshape(n, c * math.prod(win.shape[2 + nd:]), math.prod(win.shape[2:2 + nd]))


def _conv_fwd(x: Tensor, w: Tensor, bias: Tensor | None, spec: tuple) -> tuple[Tensor, Any]:
    return _conv_forward(x, w, bias, spec), (x, w, bias is not None, spec)


def _conv_bwd(res: Any, g: Tensor) -> tuple[Tensor | None, ...]:
    """Cotangents of ``(x, w, bias, spec)``, each a forward-style convolution (see the module
    docstring): the automatic gradient of the window view is an overlap-add with ``//`` and ``%``
    in its indices, 5 to 10 times slower than the forward."""
    x, w, has_bias, spec = res
    st, pads, dil, g_ = spec
    nd = x.ndim - 2
    # the cotangent stored once, channels-last: the layout the weight gradient reads, and the
    # input gradient pads it that way too (two copies in two layouts cost the MNIST step ~1 ms)
    last = g.permute((0,) + tuple(range(2, 2 + nd)) + (1,)).contiguous()     # (N, *out, C_out)
    gv = last.permute((0, 1 + nd) + tuple(range(1, 1 + nd)))                # (N, C_out, *out), a view
    dx = _conv_transpose_core(gv, w, None, st, dil, g_, tuple(d * (k - 1) - p for d, k, (p, _) in
                                                        zip(dil, w.shape[2:], pads)), x.shape[2:], last=last)
    dw = _conv_weight_grad(x, gv, w.shape, spec, last=last)
    db = g.sum((0,) + tuple(range(2, 2 + nd))) if has_bias else None
    return dx, dw, db, None


def _conv_weight_grad(x: Tensor, g: Tensor, w_shape: tuple[int, ...], spec: tuple, last: Tensor | None = None) -> Tensor:
    """``dw[co, ci, *k] = sum over (n, *o) of g[n, co, *o] * window(x)[n, ci, *o, *k]``: a matmul
    whose reduce axis is ``(N, *out)``. ``g`` is copied channels-last and the result is laid out
    ``(G, *kernel, C_in/groups, C_out/groups)`` (stored, then permuted back), so the innermost output
    loop walks output channels contiguously and the one above it, input channels, gives the matmul
    heuristic its rows to register-tile."""
    st, pads, dil, groups = spec
    nd = x.ndim - 2
    kernel = w_shape[2:]
    n, c_in, c_out = x.shape[0], x.shape[1], w_shape[0]
    cg, og = c_in // groups, c_out // groups
    xp = x.pad(((0, 0), (0, 0)) + pads) if any(p != (0, 0) for p in pads) else x
    win = sliding_windows(xp, kernel, st, dil)                               # (N, C_in, *out, *kernel)
    out_sz = win.shape[2:2 + nd]
    if groups == 1 and _library_route(x, g, n * c_out * math.prod(out_sz) * c_in * math.prod(kernel)):
        # the library's product (see _conv_forward): dw = g's rows (channels-last) transposed times im2col(x)
        from ..tensor import result_type

        common = result_type(x, g)
        rows = last if last is not None else g.permute((0,) + tuple(range(2, 2 + nd)) + (1,))  # (N, *out, C_out)
        rows = rows.astype(common).reshape(-1, c_out)
        return (rows.T @ _im2col(win).astype(common)).reshape(w_shape)
    sp, ks = tuple(range(3, 3 + nd)), tuple(range(3 + nd, 3 + 2 * nd))
    win = win.reshape((n, groups, cg) + out_sz + kernel).permute((1,) + ks + (2, 0) + sp)
    win = win.unsqueeze(2 + nd)                                              # (G, *kernel, Cg, 1, N, *out)
    if last is not None:  # g already stored channels-last: (N, *out, G*Og) viewed as (G, N, *out, Og)
        gl = last.reshape((n,) + out_sz + (groups, og)).permute((1 + nd, 0) + tuple(range(1, 1 + nd)) + (2 + nd,))
    else:
        gl = g.reshape((n, groups, og) + out_sz).permute((1, 0) + tuple(range(3, 3 + nd)) + (2,)).contiguous()
    gl = gl.permute((0, 2 + nd, 1) + tuple(range(2, 2 + nd)))              # (G, Og, N, *out), a view
    gl = gl.reshape((groups,) + (1,) * (nd + 1) + gl.shape[1:])
    prod = win * gl                                                          # (G, *kernel, Cg, Og, N, *out)
    split = _batch_split(n, math.prod(out_sz))
    if split > 1:
        # a long reduce into a small output: partial sums over `split` batch chunks run in parallel
        prod = prod.reshape(prod.shape[:3 + nd] + (split, n // split) + out_sz)
        prod = prod.permute((3 + nd,) + tuple(range(3 + nd)) + tuple(range(4 + nd, 5 + 2 * nd)))
        part = prod.sum(tuple(range(-1 - nd, 0))).contiguous()
        dw = part.sum(0).contiguous()
    else:
        dw = prod.sum(tuple(range(-1 - nd, 0))).contiguous()                # (G, *kernel, Cg, Og)
    return dw.permute((0, 2 + nd, 1 + nd) + tuple(range(1, 1 + nd))).reshape(w_shape)


def _batch_split(n: int, per_example: int) -> int:
    """How many batch chunks a weight gradient's reduce over ``(N, *out)`` is split into: the
    largest divisor of ``n`` up to 16 that leaves each chunk at least 4096 products."""
    return max((d for d in range(1, 17) if n % d == 0 and (n // d) * per_example >= 4096), default=1)


_conv = custom_vjp(_conv_forward)
_conv.defvjp(_conv_fwd, _conv_bwd)


def _out_sizes(x: Tensor, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int],
               pads: Sequence[tuple[int, int]], what: str, w: Tensor | None = None) -> tuple[int, ...]:
    out = []
    for i, k, s, d, (a, b) in zip(x.shape[2:], kernel, stride, dilation, pads):
        o = (i + a + b - d * (k - 1) - 1) // s + 1
        if o < 1:
            wdesc = f"weight of shape {w.shape}" if w is not None else f"kernel {tuple(kernel)}"
            raise ValueError(f"{what}: the {wdesc} (dilation {tuple(dilation)}) is larger than the padded input "
                             f"(shape {x.shape}, padding {tuple(pads)}): output size would be {o}")
        out.append(o)
    return tuple(out)


def conv1d(x: Tensor, w: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1, padding: Any = 0,
           dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:
    """:func:`conv` with one spatial dimension (``x`` of shape ``(N, C, L)``), as torch's ``F.conv1d``.

    ``w`` has shape ``(C_out, C_in/groups, K)``; the other arguments are :func:`conv`'s. Like
    torch's, it is a cross-correlation: the kernel is not flipped.

    >>> x = cv.Tensor([[[1.0, 2.0, 3.0, 4.0]]])
    >>> w = cv.Tensor([[[1.0, 0.0, -1.0]]])
    >>> cv.conv1d(x, w).tolist()
    [[[-2.0, -2.0]]]
    >>> cv.conv1d(x, w, padding="same").tolist()
    [[[-2.0, -2.0, -2.0, 3.0]]]
    >>> cv.conv1d(x, w, bias=cv.Tensor([10.0])).tolist()
    [[[8.0, 8.0]]]
    """
    _spatial(_tensor(x), 1, "conv1d")
    return conv(x, w, bias, stride, padding, dilation, groups)


def conv2d(x: Tensor, w: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1, padding: Any = 0,
           dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:
    """:func:`conv` with two spatial dimensions (``x`` of shape ``(N, C, H, W)``), as torch's ``F.conv2d``.

    ``w`` has shape ``(C_out, C_in/groups, KH, KW)``; the other arguments are :func:`conv`'s.

    >>> x = cv.arange(16.0).reshape(1, 1, 4, 4)
    >>> cv.conv2d(x, cv.ones(1, 1, 2, 2), stride=2).tolist()
    [[[[10.0, 18.0], [42.0, 50.0]]]]
    >>> cv.conv2d(x, cv.ones(3, 1, 3, 3), padding=1).shape
    (1, 3, 4, 4)
    >>> cv.conv2d(cv.ones(1, 4, 5, 5), cv.ones(4, 1, 3, 3), groups=4).shape  # depthwise
    (1, 4, 3, 3)
    """
    _spatial(_tensor(x), 2, "conv2d")
    return conv(x, w, bias, stride, padding, dilation, groups)


def conv3d(x: Tensor, w: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1, padding: Any = 0,
           dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:
    """:func:`conv` with three spatial dimensions (``x`` of shape ``(N, C, D, H, W)``), as torch's
    ``F.conv3d``.

    ``w`` has shape ``(C_out, C_in/groups, KD, KH, KW)``; the other arguments are :func:`conv`'s.

    >>> cv.conv3d(cv.ones(1, 2, 4, 4, 4), cv.ones(5, 2, 3, 3, 3)).shape
    (1, 5, 2, 2, 2)
    >>> cv.conv3d(cv.ones(1, 1, 3, 3, 3), cv.ones(1, 1, 3, 3, 3)).item()
    27.0
    """
    _spatial(_tensor(x), 3, "conv3d")
    return conv(x, w, bias, stride, padding, dilation, groups)


def _spread(x: Tensor, axis: int, s: int) -> Tensor:
    """``s - 1`` zeros between the elements of ``axis``: size ``i`` becomes ``(i-1)*s + 1`` (a view)."""
    if s == 1 or x.shape[axis] == 0:
        return x
    i = x.shape[axis]
    pre, post = x.shape[:axis], x.shape[axis + 1:]
    y = x.unsqueeze(axis + 1).pad([(0, 0)] * (axis + 1) + [(0, s - 1)] + [(0, 0)] * len(post))
    y = y.reshape(pre + (i * s,) + post)
    return y.shrink([(0, t) for t in pre] + [(0, (i - 1) * s + 1)] + [(0, t) for t in post])


def conv_transpose(x: Tensor, w: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
                   padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
                   groups: int = 1) -> Tensor:
    """N-d transposed convolution (torch's ``conv_transpose``): ``x`` ``(N, C_in, *spatial)`` with
    ``w`` ``(C_in, C_out/groups, *kernel)`` gives ``(N, C_out, *out)``, 1 to 3 spatial dims, where
    ``out[j] = (spatial[j]-1)*stride[j] - 2*padding[j] + dilation[j]*(kernel[j]-1) + output_padding[j] + 1``.

    It is the gradient of :func:`conv` with respect to its input, computed forward: the input is
    spread by ``stride`` (zeros in between), padded by ``dilation*(kernel-1) - padding`` (plus
    ``output_padding`` after), and convolved with the spatially flipped kernel whose channel axes
    are swapped within each group. ``output_padding`` must be smaller than ``stride`` or
    ``dilation``. ValueError naming the shapes for a channel mismatch, ``groups`` not dividing
    the channels, or an output size below 1.

    >>> conv_transpose(cv.ones(1, 2, 3, 3), cv.ones(2, 4, 2, 2), stride=2).shape
    (1, 4, 6, 6)
    """
    x, w = amp_narrow(_tensor(x), _tensor(w))  # (under autocast: the product in bfloat16/float16)
    bias = None if bias is None else amp_narrow(_tensor(bias))[0]
    nd = _check_weight(x, w, groups, "conv_transpose", transposed=True)
    kernel = w.shape[2:]
    st = _ints(stride, nd, "conv_transpose: stride")
    dil = _ints(dilation, nd, "conv_transpose: dilation")
    pad = _ints(padding, nd, "conv_transpose: padding", lo=0)
    opad = _ints(output_padding, nd, "conv_transpose: output_padding", lo=0)
    for o, s, d in zip(opad, st, dil):
        if o >= max(s, d):
            raise ValueError(f"conv_transpose: output_padding {opad} must be smaller than stride {st} "
                             f"or dilation {dil}")
    sizes = tuple((i - 1) * s - 2 * p + d * (k - 1) + o + 1
                  for i, s, p, d, k, o in zip(x.shape[2:], st, pad, dil, kernel, opad))
    if any(o < 1 for o in sizes):
        raise ShapeError(f"conv_transpose: input of shape {x.shape} with weight of shape {w.shape} (stride {st}, "
                         f"padding {pad}, dilation {dil}) gives the invalid output size {sizes}")
    before = tuple(d * (k - 1) - p for d, k, p in zip(dil, kernel, pad))
    return _conv_transpose_core(x, w, bias, st, dil, groups, before, sizes)


def _conv_transpose_core(x: Tensor, w: Tensor, bias: Tensor | None, stride: tuple[int, ...], dilation: tuple[int, ...], groups: int,
                         before: tuple[int, ...], sizes: tuple[int, ...], last: Tensor | None = None) -> Tensor:
    """``x`` spread by ``stride``, padded by ``before`` (negative crops) and on the right to give an
    output of spatial size ``sizes``, convolved with ``w`` (``(C_in, C_out/groups, *kernel)``)
    flipped, its channel axes swapped within each group."""
    nd = x.ndim - 2
    kernel = w.shape[2:]
    for j in range(nd):
        x = _spread(x, 2 + j, stride[j])
    after = tuple(o + d * (k - 1) - i - b for o, d, k, i, b in zip(sizes, dilation, kernel, x.shape[2:], before))
    padded = any(b > 0 or a > 0 for b, a in zip(before, after))
    g, c_in, og = groups, x.shape[1], w.shape[1]
    library = g == 1 and _library_route(x, w, x.shape[0] * og * math.prod(sizes) * c_in * math.prod(kernel))
    # a padded input is stored, not read through gates in the inner loop: a gradient's padding is
    # kernel-1 on each side (MNIST's 5x5 dx: 45 -> 21 ms), and the one-output-channel path
    # vectorizes along output positions only for ungated loads. (Not where a library computes the
    # convolution: its windows' copy reads the padded view, gates and all; it is a copy anyway.)
    if library:
        x = x.pad(((0, 0), (0, 0)) + tuple(zip(before, after)))
    elif padded and last is not None and all(s == 1 for s in stride):
        # x is a view of `last`, stored channels-last: pad that, and store the copy channels-last
        lp = last.pad(((0, 0),) + tuple(zip(before, after)) + ((0, 0),)).contiguous()
        x = lp.permute((0, 1 + nd) + tuple(range(1, 1 + nd)))
    elif padded:  # the cotangent stored, then the padded copy: a plain copy, not a fused one with gates
        x = x.contiguous().pad(((0, 0), (0, 0)) + tuple(zip(before, after))).contiguous()
    else:
        x = x.pad(((0, 0), (0, 0)) + tuple(zip(before, after)))
    wf = w.reshape((g, c_in // g, og) + kernel).transpose(1, 2).reshape((g * og, c_in // g) + kernel)
    wf = wf.flip(tuple(range(2, 2 + nd)))
    return conv(x, wf, bias, 1, 0, dilation, g)


def conv_transpose1d(x: Tensor, w: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1) -> Tensor:
    """:func:`conv_transpose` with one spatial dimension (``x`` of shape ``(N, C_in, L)``), as
    torch's ``F.conv_transpose1d``, with its argument order (``groups`` before ``dilation``).

    ``w`` has shape ``(C_in, C_out/groups, K)``. Each input element adds a scaled copy of the kernel
    to the output, ``stride`` apart:

    >>> x, w = cv.Tensor([[[1.0, 2.0]]]), cv.Tensor([[[1.0, 1.0, 1.0]]])
    >>> cv.conv_transpose1d(x, w).tolist()
    [[[1.0, 3.0, 3.0, 2.0]]]
    >>> cv.conv_transpose1d(x, w, stride=2).tolist()
    [[[1.0, 1.0, 3.0, 2.0, 2.0]]]
    """
    _spatial(_tensor(x), 1, "conv_transpose1d")
    return conv_transpose(x, w, bias, stride, padding, output_padding, dilation, groups)


def conv_transpose2d(x: Tensor, w: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1) -> Tensor:
    """:func:`conv_transpose` with two spatial dimensions (``x`` of shape ``(N, C_in, H, W)``), as
    torch's ``F.conv_transpose2d``, with its argument order (``groups`` before ``dilation``).

    ``w`` has shape ``(C_in, C_out/groups, KH, KW)``; ``stride`` 2 with a 2x2 kernel doubles the size.

    >>> cv.conv_transpose2d(cv.ones(1, 1, 2, 2), cv.ones(1, 1, 2, 2)).tolist()
    [[[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]]]
    >>> cv.conv_transpose2d(cv.ones(1, 8, 5, 5), cv.ones(8, 4, 2, 2), stride=2).shape
    (1, 4, 10, 10)
    """
    _spatial(_tensor(x), 2, "conv_transpose2d")
    return conv_transpose(x, w, bias, stride, padding, output_padding, dilation, groups)


def conv_transpose3d(x: Tensor, w: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1) -> Tensor:
    """:func:`conv_transpose` with three spatial dimensions (``x`` of shape ``(N, C_in, D, H, W)``),
    as torch's ``F.conv_transpose3d``, with its argument order (``groups`` before ``dilation``).

    ``w`` has shape ``(C_in, C_out/groups, KD, KH, KW)``.

    >>> cv.conv_transpose3d(cv.ones(1, 2, 2, 2, 2), cv.ones(2, 3, 2, 2, 2), stride=2).shape
    (1, 3, 4, 4, 4)
    """
    _spatial(_tensor(x), 3, "conv_transpose3d")
    return conv_transpose(x, w, bias, stride, padding, output_padding, dilation, groups)


# --- pooling -------------------------------------------------------------------------------------------


def _pool_dims(x: Tensor, kernel_size: IntOrTuple, nd: int | None, what: str) -> int:
    if nd is None:
        nd = len(kernel_size) if isinstance(kernel_size, (tuple, list)) else x.ndim - 2
    if not 1 <= nd <= 3 or x.ndim not in (nd + 1, nd + 2):
        raise ValueError(f"{what}: expected an input of {nd + 1} or {nd + 2} dimensions ((N,) C, *spatial) "
                         f"for {nd} spatial dims, got shape {x.shape}")
    return nd


def _pool_view(x: Tensor, nd: int, kernel_size: IntOrTuple, stride: IntOrTuple | None, padding: IntOrTuple,
               dilation: IntOrTuple, ceil_mode: bool, fill: Any, what: str) -> tuple[Tensor, list[np.ndarray]]:
    """The windows ``(*batch, *out, *kernel)`` of ``x`` padded with ``fill``, and per spatial axis
    the number of window elements inside ``x`` plus explicit padding (torch's average divisor)
    and inside ``x`` only, as ``(counts_with_pad, counts_real)`` arrays of length ``out``."""
    k = _ints(kernel_size, nd, f"{what}: kernel_size")
    s = k if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0) else \
        _ints(stride, nd, f"{what}: stride")
    p = _side_pads(padding, nd, what)
    d = _ints(dilation, nd, f"{what}: dilation")
    sizes = x.shape[-nd:]
    pads, outs, counts = [], [], []
    for i, kk, ss, (pb, pa), dd in zip(sizes, k, s, p, d):
        span = dd * (kk - 1) + 1
        if 2 * max(pb, pa) > span:
            raise ValueError(f"{what}: padding {padding} must be at most half the (dilated) kernel {k} on each side")
        room = i + pb + pa - span
        o = (-(-room // ss) if ceil_mode else room // ss) + 1
        if ceil_mode and o > 1 and (o - 1) * ss >= i + pb:  # the last window must start inside x or the left pad
            o -= 1
        if room < 0 or o < 1:
            raise ShapeError(f"{what}: kernel {k} (dilation {d}) does not fit the input of shape {x.shape} "
                             f"with padding {padding}: output size would be {o}")
        pads.append((pb, max(pa, (o - 1) * ss + span - i - pb)))
        outs.append(o)
        start = np.arange(o) * ss - pb
        end = np.minimum(start + span, i + pa)
        counts.append((end - start, np.minimum(end, i) - np.maximum(start, 0)))
    xp = x.pad([(0, 0)] * (x.ndim - nd) + pads, fill)
    lead = x.ndim - nd
    if s == k and all(dd == 1 for dd in d):
        # windows that tile the input: a reshape, whose gradient is a reshape too (the window
        # view's gradient is an overlap-add with // and % in its indices, 50x slower than the pool)
        xp = xp.shrink([(0, t) for t in xp.shape[:lead]] + [(0, o * kk) for o, kk in zip(outs, k)])
        split = xp.reshape(xp.shape[:lead] + tuple(t for o, kk in zip(outs, k) for t in (o, kk)))
        order = list(range(lead)) + [lead + 2 * j for j in range(nd)] + [lead + 2 * j + 1 for j in range(nd)]
        return split.permute(order), counts
    win = sliding_windows(xp, k, s, d)
    win = win.shrink([(0, t) for t in win.shape[:lead]] + [(0, o) for o in outs] + [(0, t) for t in k])
    return win, counts


def max_pool(x: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
             dilation: IntOrTuple = 1, ceil_mode: bool = False) -> Tensor:
    """Max pooling over the last 1 to 3 axes of ``((N,) C, *spatial)`` (torch semantics).

    The number of spatial dims is ``len(kernel_size)`` (``x.ndim - 2`` for an int). ``stride``
    defaults to ``kernel_size``; ``padding`` (at most half the kernel; an int, one per axis, or
    per side as :func:`conv` takes it) pads with ``-inf`` (the dtype's lowest value for ints); ``ceil_mode`` rounds the output size up, keeping only windows
    that start inside the input or its left padding. Gradient: each window's cotangent goes to its
    maximum, split equally between tied elements. ValueError for shapes that do not fit.

    >>> max_pool(cv.arange(16.0).reshape(1, 1, 4, 4), 2).reshape(-1).tolist()
    [5.0, 7.0, 13.0, 15.0]
    """
    x = _tensor(x)
    nd = _pool_dims(x, kernel_size, None, "max_pool")
    fill = dt.reduce_identity(x.dtype, "max")
    win, _ = _pool_view(x, nd, kernel_size, stride, padding, dilation, ceil_mode, fill, "max_pool")
    if x.ndim == nd + 2 and _channels_last(x.node, nd):
        # the input is a convolution's output, stored channels-last: reduce a channels-last view of
        # the windows, so the pooled values (and the gradient's window counts) are stored that way
        # too and every kernel around them reads and writes along channels, not across them
        win = win.permute((0,) + tuple(range(2, 2 + nd)) + (1,) + tuple(range(2 + nd, 2 + 2 * nd)))
        y = win.max(tuple(range(-nd, 0)))
        return y.permute((0, 1 + nd) + tuple(range(1, 1 + nd)))
    return win.max(tuple(range(-nd, 0)))


def _channels_last(n: Any, nd: int, depth: int = 6) -> bool:
    """Whether ``n`` is, through elementwise ops (a relu), a channels-first view of a stored
    channels-last tensor: the permute :func:`_conv_forward` returns. (A layout choice only.)"""
    from ..graph.node import ELEMENTWISE, IDENTITY, Op

    to_first = (0, 1 + nd) + tuple(range(1, 1 + nd))
    if n.op is Op.PERMUTE:
        return tuple(n.arg) == to_first and n.src[0].op in (Op.CONTIGUOUS, Op.BUFFER)
    if depth == 0 or not (n.op in ELEMENTWISE or n.op in IDENTITY):  # (a traced variable's marker)
        return False
    return any(_channels_last(s, nd, depth - 1) for s in n.src if s.shape == n.shape)


def avg_pool(x: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
             ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """Average pooling over the last 1 to 3 axes of ``((N,) C, *spatial)`` (torch semantics), float only.

    Zero padding; the divisor is the window's size clipped to the padded input
    (``count_include_pad=True``) or the number of real elements in the window (False), or
    ``divisor_override``. Arguments as :func:`max_pool`. TypeError for non-float input.

    >>> avg_pool(cv.arange(4.0).reshape(1, 1, 4), 2).tolist()
    [[[0.5, 2.5]]]
    """
    x = _tensor(x)
    if not x.dtype.is_float:
        raise TypeError(f"avg_pool needs a float tensor, got {x.dtype.name}")
    nd = _pool_dims(x, kernel_size, None, "avg_pool")
    win, counts = _pool_view(x, nd, kernel_size, stride, padding, 1, ceil_mode, 0.0, "avg_pool")
    total = win.sum(tuple(range(-nd, 0)))
    if divisor_override is not None:
        return total / divisor_override
    div = functools.reduce(np.multiply.outer, [c[0] if count_include_pad else c[1] for c in counts])
    if (div == div.flat[0]).all():
        return total / int(div.flat[0])
    from ..tensor import Tensor

    return total / Tensor(div.astype(x.dtype.np), device=x.device)


def _adaptive_bins(i: int, o: int) -> tuple[np.ndarray, np.ndarray]:
    start = (np.arange(o) * i) // o
    end = -((-(np.arange(o) + 1) * i) // o)
    return start, end


def _adaptive_sizes(x: Tensor, output_size: Any, what: str) -> tuple[int, ...]:
    nd = len(output_size) if isinstance(output_size, (tuple, list)) else x.ndim - 2
    if not 1 <= nd <= 3 or x.ndim not in (nd + 1, nd + 2):
        raise ValueError(f"{what}: expected an input of {nd + 1} or {nd + 2} dimensions ((N,) C, *spatial), "
                         f"got shape {x.shape}")
    items = [output_size] * nd if not isinstance(output_size, (tuple, list)) else list(output_size)
    sizes = tuple(x.shape[x.ndim - nd + j] if o is None else o for j, o in enumerate(items))
    for o in sizes:
        if not isinstance(o, (int, np.integer)) or isinstance(o, bool) or o < 1:
            raise ValueError(f"{what}: output_size must be positive ints (or None), got {output_size!r}")
    if any(t == 0 for t in x.shape[-nd:]):
        raise ShapeError(f"{what}: input of shape {x.shape} has an empty spatial axis")
    return tuple(int(o) for o in sizes)


def adaptive_avg_pool(x: Tensor, output_size: IntOrTuple) -> Tensor:
    """Average pooling to a fixed ``output_size`` over the last 1 to 3 axes (torch's bins: output ``o``
    of an axis of size ``i`` averages ``[floor(o*i/out), ceil((o+1)*i/out))``). ``None`` in
    ``output_size`` keeps that axis. Each axis whose size the output divides is a mean over
    equal windows (a view); otherwise it is a product with a small ``(i, out)`` averaging matrix.

    >>> adaptive_avg_pool(cv.arange(5.0).reshape(1, 1, 5), 2).tolist()
    [[[1.0, 3.0]]]
    """
    x = _tensor(x)
    if not x.dtype.is_float:
        raise TypeError(f"adaptive_avg_pool needs a float tensor, got {x.dtype.name}")
    sizes = _adaptive_sizes(x, output_size, "adaptive_avg_pool")
    nd = len(sizes)
    for j, o in enumerate(sizes):
        axis = x.ndim - nd + j
        i = x.shape[axis]
        if i == o:
            continue
        xs = x.moveaxis(axis, -1)
        if i % o == 0:
            xs = sliding_windows(xs, (i // o,), (i // o,), (1,)).mean(-1)
        else:
            start, end = _adaptive_bins(i, o)
            cols = np.arange(i)[:, None]
            avg = ((cols >= start) & (cols < end)) / (end - start)                   # (i, o)
            from ..tensor import Tensor

            xs = xs @ Tensor(avg.astype(x.dtype.np), device=x.device)
        x = xs.moveaxis(-1, axis)
    return x


def adaptive_max_pool(x: Tensor, output_size: IntOrTuple, return_indices: bool = False) -> Any:
    """Max pooling to a fixed ``output_size`` (bins as :func:`adaptive_avg_pool`), one axis at a time
    (the max of a box is the max of its rows' maxima). ``return_indices=True`` also gives, as
    PyTorch's, each maximum's flat index within its input plane (int64; the first maximum in
    row-major order, or the last nan, as PyTorch's kernels pick): found the same way, the last
    axis first, each pass carrying the index of the row whose maximum it keeps.

    >>> adaptive_max_pool(cv.arange(5.0).reshape(1, 1, 5), 2).tolist()
    [[[2.0, 4.0]]]
    """
    from .elementwise import where
    from ..tensor import Tensor

    x = _tensor(x)
    sizes = _adaptive_sizes(x, output_size, "adaptive_max_pool")
    nd = len(sizes)
    low = x._const(dt.reduce_identity(x.dtype, "max"), x.dtype, ())
    index, span = None, 1  # (the flat index within the axes passed so far, and their element count)
    for j in reversed(range(nd)) if return_indices else range(nd):
        o, axis = sizes[j], x.ndim - nd + j
        i = x.shape[axis]
        if i == o and not return_indices:
            continue
        start, end = _adaptive_bins(i, o)
        cols = np.arange(i)[None, :]
        inside = Tensor((cols >= start[:, None]) & (cols < end[:, None]), device=x.device)   # (o, i)
        win = where(inside, x.moveaxis(axis, -1).unsqueeze(-2), low)  # (..., o, i)
        top = win.max(axis=-1, keepdims=True)
        if return_indices:  # (..., o): the position along this axis; PyTorch's: the first maximum, the last nan
            col = Tensor(np.arange(i), device=x.device)
            first_max = where(inside & (win == top), col, i).min(axis=-1)
            last_nan = where(inside & win.isnan(), col, -1).max(axis=-1)
            pos = where(top.squeeze(-1).isnan(), last_nan, first_max)
            if index is not None:
                rows = index.moveaxis(axis, -1).unsqueeze(-2).expand(win.shape)
                within = rows.take_along_axis(pos.unsqueeze(-1), axis=-1).squeeze(-1)
                pos = pos * span + within
            index, span = pos.moveaxis(-1, axis), span * i
        x = top.squeeze(-1).moveaxis(-1, axis)
    return (x, index.astype(dt.int64)) if return_indices else x


_SPATIAL = {1: "L", 2: "H, W", 3: "D, H, W"}


def _fixed(fn: Any, nd: int, name: str, example: str) -> Any:
    """``fn`` for ``nd`` spatial dims: an int kernel/output size is repeated, the input rank checked.
    ``example`` (doctest lines) ends its docstring."""

    def sized(x: Any, size: Any) -> tuple[Tensor, tuple]:
        x = _tensor(x)
        if x.ndim not in (nd + 1, nd + 2):
            raise ValueError(f"{name}: expected an input of {nd + 1} or {nd + 2} dimensions ((N,) C, *spatial), "
                             f"got shape {x.shape}")
        if not isinstance(size, (tuple, list)):
            size = (size,) * nd
        elif len(size) != nd:
            raise ValueError(f"{name}: expected {nd} sizes, got {size!r}")
        return x, tuple(size)

    if fn.__name__.startswith("adaptive"):
        def pool(x: Tensor, output_size: IntOrTuple, *args: Any, **kwargs: Any) -> Any:
            x, size = sized(x, output_size)
            return fn(x, size, *args, **kwargs)
    else:
        def pool(x: Tensor, kernel_size: IntOrTuple, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            x, size = sized(x, kernel_size)
            return fn(x, size, *args, **kwargs)

    pool.__name__ = pool.__qualname__ = name
    size = "output_size" if fn.__name__.startswith("adaptive") else "kernel_size"
    pool.__doc__ = (
        f":func:`{fn.__name__}` over {nd} spatial dimension{'s' if nd > 1 else ''} (``x`` of shape "
        f"``(N, C, {_SPATIAL[nd]})`` or ``(C, {_SPATIAL[nd]})``), as torch's ``F.{name}``.\n\n"
        + f"``{size}`` is "
        + ("an int or a 1-tuple" if nd == 1 else f"an int, used for every spatial axis, or a tuple of {nd}")
        + f"; ValueError for another input rank. The other arguments are :func:`{fn.__name__}`'s.\n\n"
        + textwrap.dedent(example).strip() + "\n")
    return pool


max_pool1d = _fixed(max_pool, 1, "max_pool1d", """
    >>> x = cv.Tensor([[[1.0, 3.0, 2.0, 5.0, 4.0]]])
    >>> cv.max_pool1d(x, 2).tolist()
    [[[3.0, 5.0]]]
    >>> cv.max_pool1d(x, 2, ceil_mode=True).tolist()  # keeps the last, partial window
    [[[3.0, 5.0, 4.0]]]
    >>> cv.max_pool1d(x, 3, stride=1).tolist()
    [[[3.0, 5.0, 5.0]]]
    """)
max_pool2d = _fixed(max_pool, 2, "max_pool2d", """
    >>> x = cv.arange(16.0).reshape(1, 1, 4, 4)
    >>> cv.max_pool2d(x, 2).tolist()
    [[[[5.0, 7.0], [13.0, 15.0]]]]
    >>> cv.max_pool2d(x, 3, stride=1).tolist()
    [[[[10.0, 11.0], [14.0, 15.0]]]]
    """)
max_pool3d = _fixed(max_pool, 3, "max_pool3d", """
    >>> cv.max_pool3d(cv.arange(8.0).reshape(1, 1, 2, 2, 2), 2).tolist()
    [[[[[7.0]]]]]
    >>> cv.max_pool3d(cv.ones(2, 3, 4, 4, 4), 2).shape
    (2, 3, 2, 2, 2)
    """)
avg_pool1d = _fixed(avg_pool, 1, "avg_pool1d", """
    >>> x = cv.Tensor([[[1.0, 3.0, 2.0, 5.0, 4.0]]])
    >>> cv.avg_pool1d(x, 2).tolist()
    [[[2.0, 3.5]]]
    >>> cv.avg_pool1d(x, 2, padding=1).tolist()  # the padding zero counts
    [[[0.5, 2.5, 4.5]]]
    >>> cv.avg_pool1d(x, 2, padding=1, count_include_pad=False).tolist()
    [[[1.0, 2.5, 4.5]]]
    """)
avg_pool2d = _fixed(avg_pool, 2, "avg_pool2d", """
    >>> cv.avg_pool2d(cv.arange(16.0).reshape(1, 1, 4, 4), 2).tolist()
    [[[[2.5, 4.5], [10.5, 12.5]]]]
    """)
avg_pool3d = _fixed(avg_pool, 3, "avg_pool3d", """
    >>> cv.avg_pool3d(cv.arange(8.0).reshape(1, 1, 2, 2, 2), 2).tolist()
    [[[[[3.5]]]]]
    >>> cv.avg_pool3d(cv.ones(2, 3, 4, 4, 4), 2, stride=1).shape
    (2, 3, 3, 3, 3)
    """)
adaptive_avg_pool1d = _fixed(adaptive_avg_pool, 1, "adaptive_avg_pool1d", """
    >>> x = cv.arange(5.0).reshape(1, 1, 5)
    >>> cv.adaptive_avg_pool1d(x, 3).tolist()  # bins [0, 2), [1, 4), [3, 5)
    [[[0.5, 2.0, 3.5]]]
    """)
adaptive_avg_pool2d = _fixed(adaptive_avg_pool, 2, "adaptive_avg_pool2d", """
    >>> x = cv.arange(16.0).reshape(1, 1, 4, 4)
    >>> cv.adaptive_avg_pool2d(x, 1).tolist()  # global average pooling
    [[[[7.5]]]]
    >>> cv.adaptive_avg_pool2d(x, (2, 1)).tolist()
    [[[[3.5], [11.5]]]]
    >>> cv.adaptive_avg_pool2d(x, (None, 2)).shape  # None keeps that axis
    (1, 1, 4, 2)
    """)
adaptive_avg_pool3d = _fixed(adaptive_avg_pool, 3, "adaptive_avg_pool3d", """
    >>> cv.adaptive_avg_pool3d(cv.ones(2, 3, 4, 5, 6), 1).shape
    (2, 3, 1, 1, 1)
    """)
adaptive_max_pool1d = _fixed(adaptive_max_pool, 1, "adaptive_max_pool1d", """
    >>> x = cv.Tensor([[[1.0, 3.0, 2.0, 5.0, 4.0]]])
    >>> cv.adaptive_max_pool1d(x, 2).tolist()
    [[[3.0, 5.0]]]
    >>> values, indices = cv.adaptive_max_pool1d(x, 2, return_indices=True)
    >>> indices.tolist()
    [[[1, 3]]]
    """)
adaptive_max_pool2d = _fixed(adaptive_max_pool, 2, "adaptive_max_pool2d", """
    >>> cv.adaptive_max_pool2d(cv.arange(16.0).reshape(1, 1, 4, 4), 2).tolist()
    [[[[5.0, 7.0], [13.0, 15.0]]]]
    """)
adaptive_max_pool3d = _fixed(adaptive_max_pool, 3, "adaptive_max_pool3d", """
    >>> cv.adaptive_max_pool3d(cv.ones(2, 3, 4, 5, 6), (1, 2, 3)).shape
    (2, 3, 1, 2, 3)
    """)

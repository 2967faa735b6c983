"""Weight-only quantization: the weights of ``nn.Linear`` layers stored as 8-bit or 4-bit integers
with a float32 scale per group of inputs, and unpacked and scaled inside the product's kernel.

:func:`quantize` replaces the ``Linear`` layers of a model by :class:`QuantizedLinear` layers, in
place (``cv.quantize`` is the same function). Activations, biases and everything else stay in
floating point; only the weight matrices shrink, to about a quarter ("int8") or an eighth
("int4") of their float32 size, which is what bounds a language model's generation speed (each
new token reads every weight once) and its memory.

The format, symmetric with no zero points: each row of a weight ``(out_features, in_features)``
is cut into groups of ``group_size`` consecutive inputs (128 unless told; it must divide
``in_features``). A group's scale is its largest magnitude divided by ``qmax`` (127 for "int8",
7 for "int4") and each weight is stored as ``round(w / scale)`` (half to even), an integer in
``[-qmax, qmax]``; zero stays exactly zero and each weight is off by at most half its group's
scale. "int8" keeps the integers as int8, one per input. "int4" packs two a byte (:func:`pack_int4`),
each as the nibble ``q + 8`` (so the format holds -8..7; the quantizer writes -7..7): within a
group, byte ``j`` holds input ``j`` in its low nibble and input ``j + group_size / 2`` in its high
one, so each half of a group unpacks with one shift.

The rows are stored in blocks of ``B`` outputs (:func:`block_rows`: 64, or the largest power of
two dividing ``out_features`` when 64 does not), interleaved: ``qweight`` is int8
``(out / B, in, B)`` ("int8") or uint8 ``(out / B, in / 2, B)`` ("int4"), where
``qweight[b, c, l]`` is byte (or integer) ``c`` of output row ``b * B + l``, and ``scales`` is
float32 ``(out / B, in / group_size, B)`` the same way. So the ``B`` outputs of a block read one
contiguous run of bytes per input, which a kernel computing them side by side loads as vectors
(a row-major weight would make it sum each row's groups across vector lanes: 4x slower at one
token). Both are buffers: the state dict of a quantized model holds ``qweight`` and ``scales``
(and the float ``bias``) for each such layer, and ``cv.save`` / ``load_state_dict`` round-trip
it; a state dict in the row-major layout of earlier corvid versions (``qweight`` ``(out, in)`` or
``(out, in / 2)``, ``scales`` ``(out, in / group_size)``) loads too, converted as it is read.

The kernels: a :class:`QuantizedLinear` computes ``x @ dequantize(w).T + bias`` with ordinary
tensor ops, so every device runs it. With fewer than :data:`MATMUL_ROWS` rows of input the product
is written as a broadcast product summed over each group's inputs and over the groups. Below 8 rows
(a token at a time, as in generation) the scheduler fuses the unpacking and the scaling into that
reduce: one kernel, which reads the packed bytes and writes no dequantized weight; on the CPU it
computes a block's ``B`` outputs side by side (the heuristics unroll the block,
``codegen/opt.py``), one vector lane each. From 8 rows it dequantizes the weight first, in a kernel
of its own (the rule by which it stores a value that a kernel would evaluate 8 times per element).
From ``MATMUL_ROWS`` rows on (a prompt, a training batch) the weight is dequantized once per call
into a float32 copy laid out as the float matmul's tiled kernel reads it: two kernels, about as
fast as a float ``Linear`` (a narrow input is converted first and the float32 product stored before
it is rounded, as a narrow matmul does: the tiles read and write float32 only). On a CPU with
bfloat16 dot products (AVX512-BF16), a bfloat16 input of 8 rows or more goes instead to
:func:`corvid.nn.cpu_matmul.matmul_quantized`: the integers are packed as bfloat16 (exactly),
each group's sum is multiplied by its scale, and no dequantized copy is made; fewer than 8 rows
of int4 (a decode step) go to its kernel that reads the stored bytes directly. (A
Llama-3.2-1B-shaped int4 model on a 2-core Zen 4: a 512-token prefill from 0.66x torch's speed
to 0.96-1.23x across runs, its peak memory from 1.46x to 1.19x the weights, decoding from 37.6
to 41-45 tokens/s; ``python -m benchmarks --only llm_decode``.)

>>> from corvid import nn
>>> model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8))
>>> w = model[0].weight.detach()
>>> model = quantize(model, "int4", group_size=32)
>>> model[0]
QuantizedLinear(in_features=64, out_features=32, bias=True, mode='int4', group_size=32)
>>> {k: (v.dtype.name, v.shape) for k, v in model[0].state_dict().items()}   # one block of 32 rows
{'bias': ('float32', (32,)), 'qweight': ('uint8', (1, 32, 32)), 'scales': ('float32', (1, 2, 32))}
>>> err = (model[0].dequantize() - w).abs().reshape(32, 2, 32).max(axis=-1)   # per group
>>> bool((err <= row_major(model[0].scales) / 2 * (1 + 1e-6)).all())          # half a scale at most
True
>>> x = cv.randn(1, 64)
>>> len(model[0](x).schedule())                        # unpack, scale and product: one kernel
1
>>> model(x).shape
(1, 8)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import dtype as dt
from .amp import autocast, autocast_dtype
from .autograd import no_grad
from .creation import arange, zeros
from .nn import cpu_matmul
from .nn.linear import Linear
from .nn.module import Module, replace_modules, shape_error
from .nn.parameter import Parameter
from .ops.elementwise import where
from .tensor import Tensor

__all__ = ["BLOCK_ROWS", "DEFAULT_GROUP_SIZE", "MATMUL_ROWS", "MODES", "QuantizedEmbedding", "QuantizedLinear",
           "block_rows", "blocked", "dequantize_weight", "load_hints", "pack_int4", "quantize", "quantize_weight",
           "row_major", "unpack_int4"]

MODES = ("int8", "int4")
"""The quantization modes: "int8" (a byte a weight) and "int4" (two weights a byte)."""

DEFAULT_GROUP_SIZE = 128
"""The inputs that share a scale unless ``group_size`` says otherwise."""

MATMUL_ROWS = 32
"""From this many input rows on (counted over the leading dimensions), a :class:`QuantizedLinear`
dequantizes its weight once per call and runs the float matmul's tiled kernel. With fewer, it
writes the product as a broadcast product summed over the groups, which the scheduler fuses
with the unpacking and the scaling into one kernel while it evaluates each weight fewer than 8
times (``RECOMPUTE_RATIO`` in ``engine/schedule.py``: below 8 rows, the generation case); from 8
rows it stores the dequantized weight first, in the ``(out, in)`` layout that product reads.
Measured on 2 cores (AVX-512) at 2048x8192 and 512x2048: the broadcast product is the faster
form below about 32 rows, the tiled matmul above."""

BLOCK_ROWS = 64
"""The output rows a block of the stored layout holds (when they divide ``out_features``: see
:func:`block_rows`). 64 float32 lanes are 4 AVX-512 (8 AVX2) vector accumulators: measured on 2
cores (Zen 4) at 8192x2048 int4, one token: 0.29 ms with blocks of 64 (the block's loop unrolled),
3.1 ms with 32, 1.2 ms row-major."""

_QMAX = {"int8": 127, "int4": 7}


def block_rows(out_features: int) -> int:
    """The outputs per block of the stored layout (module docstring): :data:`BLOCK_ROWS`, or the
    largest power of two dividing ``out_features`` when it does not (1 for an odd count).

    >>> block_rows(8192), block_rows(96), block_rows(10)
    (64, 32, 2)
    """
    return math.gcd(out_features, BLOCK_ROWS)


def blocked(a: Any, block: int | None = None) -> Tensor:
    """A row-major ``(out, c)`` array in the stored layout, ``(out / block, c, block)`` (``block``:
    :func:`block_rows` of ``out`` unless told): entry ``[b, j, l]`` is ``a[b * block + l, j]``.
    :func:`row_major` inverts it.

    >>> blocked(cv.Tensor([[1, 2], [3, 4], [5, 6], [7, 8]]), 2).tolist()
    [[[1, 3], [2, 4]], [[5, 7], [6, 8]]]
    """
    from .errors import ShapeError

    a = a if isinstance(a, Tensor) else Tensor(a)
    if a.ndim != 2:
        raise ShapeError(f"blocked: expected a row-major array of shape (out, c), got {a.shape}")
    out, c = a.shape
    b = block_rows(out) if block is None else block
    if isinstance(b, bool) or not isinstance(b, int) or b <= 0 or out % b:
        raise ValueError(f"blocked: block must be a positive int dividing the {out} rows, got {block!r}")
    return a.reshape(out // b, b, c).permute(0, 2, 1)


def row_major(a: Any) -> Tensor:
    """The row-major ``(out, c)`` array of one in the stored layout ``(out / B, c, B)`` (a 2-d
    array is returned as it is): the inverse of :func:`blocked`.

    >>> row_major(cv.Tensor([[[1, 3], [2, 4]], [[5, 7], [6, 8]]])).tolist()
    [[1, 2], [3, 4], [5, 6], [7, 8]]
    """
    a = a if isinstance(a, Tensor) else Tensor(a)
    if a.ndim == 2:
        return a
    if a.ndim != 3:
        from .errors import ShapeError

        raise ShapeError(f"row_major: expected an array of shape (out / B, c, B), got {a.shape}")
    nb, c, b = a.shape
    return a.permute(0, 2, 1).reshape(nb * b, c)

Skip = str | Iterable[str] | Callable[[str, Any], bool] | None


def _check_mode(mode: Any, where: str) -> str:
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"{where}: mode must be one of {', '.join(repr(m) for m in MODES)}, got {mode!r}")
    return mode


def _check_group(group_size: Any, in_features: int, mode: str, where: str) -> int:
    """The group size to use (``None``: one group a row); ValueError naming what does not fit."""
    if group_size is None:
        group_size = in_features
    _check_group_value(group_size, where)
    if in_features % group_size:
        raise ValueError(f"{where}: group_size={group_size} does not divide in_features={in_features}; "
                         f"use a divisor of it ({_divisors_hint(in_features, mode)}) or group_size=None for one group "
                         "per row")
    if mode == "int4" and group_size % 2:
        raise ValueError(f"{where}: int4 packs two inputs of a group in a byte, so group_size must be even, "
                         f"got {group_size}")
    return group_size


def _check_group_value(group_size: Any, where: str) -> None:
    if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int) or
                                   group_size <= 0):
        raise ValueError(f"{where}: group_size must be a positive int (or None: one group per row), "
                         f"got {group_size!r}")


def _divisors_hint(n: int, mode: str) -> str:
    found = [g for g in (128, 64, 32, 16) if n % g == 0 and (mode == "int8" or g % 2 == 0)]
    return "e.g. " + ", ".join(map(str, found)) if found else f"{n} has none from 16 to 128"


def quantize_weight(weight: Any, mode: str = "int8", group_size: int | None = DEFAULT_GROUP_SIZE
                    ) -> tuple[Tensor, Tensor]:
    """``(qweight, scales)`` of a float weight ``(out_features, in_features)`` in the format of the
    module docstring, in blocks of ``B = block_rows(out)`` rows: int8 ``(out / B, in, B)`` for
    "int8", packed uint8 ``(out / B, in / 2, B)`` for "int4", and float32 scales
    ``(out / B, in / group_size, B)``, each the largest magnitude of its group over 127 or 7
    (:func:`row_major` gives the ``(out, ...)`` arrays). Computed with tensor ops on the weight's
    device, in float32 (float64 for a float64 weight).

    ValueError for a mode other than "int8" or "int4", a group size that does not divide
    ``in_features`` (or is odd, for "int4"), or a weight with inf or nan values; ShapeError for a
    weight that is not 2-d, TypeError for one that is not a float.

    >>> w = cv.Tensor([[0.5, -1.0, 0.25, 2.0]])
    >>> q, s = quantize_weight(w, "int8", group_size=2)
    >>> row_major(q).tolist(), row_major(s).tolist()
    ([[64, -127, 16, 127]], [[0.007874015718698502, 0.015748031437397003]])
    >>> (dequantize_weight(q, s) - w).abs().max().item() <= s.max().item() / 2
    True
    """
    from .errors import ShapeError

    mode = _check_mode(mode, "quantize_weight")
    w = weight if isinstance(weight, Tensor) else Tensor(weight)
    if w.ndim != 2:
        raise ShapeError(f"quantize_weight: expected a weight of shape (out_features, in_features), got {w.shape}")
    if not w.dtype.is_float:
        raise TypeError(f"quantize_weight: expected a floating-point weight, got {w.dtype.name}")
    out, n = w.shape
    g = _check_group(group_size, n, mode, "quantize_weight")
    b = block_rows(out)
    qmax = _QMAX[mode]
    with no_grad(), autocast(enabled=False):
        w = w.detach().astype(dt.float64 if w.dtype == dt.float64 else dt.float32)
        groups = w.reshape(out, n // g, g)
        amax = groups.abs().max(axis=-1, keepdims=True)
        if not _traced(amax) and out * n and not bool(amax.realize().isfinite().all()):
            raise ValueError("quantize_weight: the weight has inf or nan values, which no scale represents")
        scale = amax / qmax
        q = where(scale > 0, groups / where(scale > 0, scale, 1), 0).round().clip(-qmax, qmax)
        scales = blocked(scale.reshape(out, n // g).astype(dt.float32), b).contiguous()
        q = q.astype(dt.int8).reshape(out, n)
        packed = q if mode == "int8" else pack_int4(q, g)
        return blocked(packed, b).contiguous().realize(), scales.realize()


def _traced(t: Tensor) -> bool:
    return bool(t.node.traced)


def pack_int4(q: Any, group_size: int) -> Tensor:
    """Integers in ``-8..7`` of shape ``(out, in)`` packed two a byte: uint8 ``(out, in / 2)``,
    each value as the nibble ``q + 8``; within each group of ``group_size`` inputs, byte ``j``
    holds input ``j`` (low nibble) and input ``j + group_size / 2`` (high nibble). Values outside
    ``-8..7`` wrap (only their low 4 bits of ``q + 8`` are kept). :func:`unpack_int4` inverts it.
    TypeError for a tensor that is not of integers, ShapeError for one that is not 2-d.

    >>> p = pack_int4(cv.Tensor([[-8, -1, 0, 7]], dtype=cv.int8), group_size=4)
    >>> p.dtype.name, p.tolist()          # 0 | 8 << 4 and 7 | 15 << 4
    ('uint8', [[128, 247]])
    >>> unpack_int4(p, group_size=4).tolist()
    [[-8, -1, 0, 7]]
    """
    from .errors import ShapeError

    q = q if isinstance(q, Tensor) else Tensor(q)
    if q.dtype.is_float or q.dtype.is_complex or q.dtype == dt.bool_:
        raise TypeError(f"pack_int4: expected integers in -8..7, got {q.dtype.name}")
    if q.ndim != 2:
        raise ShapeError(f"pack_int4: expected integers of shape (out, in), got {q.shape}")
    out, n = q.shape
    g = _check_group(group_size, n, "int4", "pack_int4")
    nib = (q.astype(dt.int16) + 8).astype(dt.uint8) & 15
    halves = nib.reshape(out, n // g, 2, g // 2)
    return (halves[:, :, 0] | (halves[:, :, 1] << 4)).reshape(out, n // 2)


def _nibbles(packed: Tensor, group_size: int) -> Tensor:
    """The stored nibbles (0..15) of packed int4 weights, row-major uint8 ``(out, in / 2)``, as
    uint8 ``(out, in / group_size, 2, group_size / 2)``: the low and the high nibbles of each
    group's bytes."""
    out, half = packed.shape
    g = group_size
    shifts = (arange(2, dtype=dt.uint8, device=packed.device) * 4).reshape(1, 1, 2, 1)
    both = packed.reshape(out, half * 2 // g, 1, g // 2).expand(out, half * 2 // g, 2, g // 2)
    return (both >> shifts) & 15


def unpack_int4(packed: Any, group_size: int) -> Tensor:
    """The int8 values ``(out, in)`` (each in ``-8..7``) of int4 weights packed by :func:`pack_int4`
    (uint8 ``(out, in / 2)``). ValueError when ``group_size`` does not fit the packed shape.

    >>> unpack_int4(cv.Tensor([[0x8f, 0x07]], dtype=cv.uint8), group_size=2).tolist()
    [[7, 0, -1, -8]]
    """
    p = packed if isinstance(packed, Tensor) else Tensor(packed)
    if p.dtype != dt.uint8 or p.ndim != 2:
        raise TypeError(f"unpack_int4: expected packed weights of dtype uint8 and shape (out, in / 2), "
                        f"got {p.dtype.name} {p.shape}")
    out, half = p.shape
    g = _check_group(group_size, half * 2, "int4", "unpack_int4")
    return (_nibbles(p, g).astype(dt.int8) - 8).reshape(out, half * 2)


def _layout(qweight: Tensor, scales: Tensor, where: str) -> tuple[str, int, int]:
    """(mode, in_features, group size) of a quantized weight in the stored layout (or the
    row-major one), read from its dtype and shapes; TypeError/ValueError when they do not make one."""
    if qweight.dtype == dt.int8:
        mode = "int8"
    elif qweight.dtype == dt.uint8:
        mode = "int4"
    else:
        raise TypeError(f"{where}: qweight must be int8 (mode 'int8') or packed uint8 (mode 'int4'), "
                        f"got {qweight.dtype.name}")
    if qweight.ndim not in (2, 3) or scales.ndim != qweight.ndim or scales.shape[0] != qweight.shape[0] or \
            scales.shape[1] == 0 or scales.shape[2:] != qweight.shape[2:]:
        raise ValueError(f"{where}: qweight {qweight.shape} and scales {scales.shape} do not fit: expected "
                         "(out / B, in, B) or (out / B, in / 2, B) and (out / B, in / group_size, B) (or the "
                         "row-major (out, in) or (out, in / 2) and (out, in / group_size))")
    n = qweight.shape[1] * (2 if mode == "int4" else 1)
    if n % scales.shape[1] or (mode == "int4" and (n // scales.shape[1]) % 2):
        raise ValueError(f"{where}: scales of shape {scales.shape} do not divide the {n} inputs of a "
                         f"{mode} qweight of shape {qweight.shape} into groups")
    return mode, n, n // scales.shape[1]


def _as_blocks(a: Tensor) -> Tensor:
    """A stored ``(out / B, c, B)`` array as it is, a row-major ``(out, c)`` one as blocks of one row."""
    return a if a.ndim == 3 else a.reshape(a.shape + (1,))


def _grouped(qweight: Tensor, scales: Tensor, mode: str, group_size: int, compute: dt.DType) -> Tensor:
    """The dequantized weight in groups, ``(out, in / group_size, group_size)``, in ``compute``."""
    q, s = _as_blocks(qweight), _as_blocks(scales)
    nb, _, b = q.shape
    groups, g = s.shape[1], group_size
    if mode == "int8":
        values = q.reshape(nb, groups, g, b).astype(compute)
    else:
        p = q.reshape(nb, groups, 1, g // 2, b)
        shifts = (arange(2, dtype=dt.uint8, device=q.device) * 4).reshape(1, 1, 2, 1, 1)
        nib = (p.expand(nb, groups, 2, g // 2, b) >> shifts) & 15
        values = (nib.astype(compute) - 8).reshape(nb, groups, g, b)
    w = values * s.astype(compute).reshape(nb, groups, 1, b)
    return w.permute(0, 3, 1, 2).reshape(nb * b, groups, g)


def _fused_product(x: Tensor, qweight: Tensor, scales: Tensor, mode: str, group_size: int) -> Tensor:
    """``x @ dequantize(w).T`` for ``x`` of shape ``(rows, in)`` written as the broadcast product
    summed over each group's inputs and the groups, which the scheduler fuses with the unpacking
    and the scaling into one reduce. Each index is affine in the loops (no division), so the
    innermost loop walks a group's bytes contiguously: for "int4" the low and the high nibbles of
    a byte are two terms of the sum, each with its half of the group's inputs."""
    rows, n = x.shape
    q, sc = _as_blocks(qweight), _as_blocks(scales)
    nb, _, b = q.shape
    groups, g, c = n // group_size, group_size, x.dtype
    s = sc.astype(c).reshape(1, nb, groups, 1, b)
    if mode == "int8":
        w = q.reshape(1, nb, groups, g, b).astype(c) * s
        y = (x.reshape(rows, 1, groups, g, 1) * w).sum(axis=(2, 3))
    else:
        p = q.reshape(1, nb, groups, g // 2, b)
        halves = x.reshape(rows, 1, groups, 2, g // 2, 1)
        low, high = (p & 15).astype(c) - 8, (p >> 4).astype(c) - 8
        y = ((halves[:, :, :, 0] * low + halves[:, :, :, 1] * high) * s).sum(axis=(2, 3))
    return y.reshape(rows, nb * b)


def dequantize_weight(qweight: Any, scales: Any, dtype: Any = dt.float32) -> Tensor:
    """The float weight ``(out_features, in_features)`` that quantized weights stand for:
    ``q * scale`` of each input, in ``dtype`` (float32 unless told). The mode and the group size
    are read from ``qweight``'s dtype (int8: "int8", uint8: packed "int4") and the shapes.
    TypeError or ValueError when ``qweight`` and ``scales`` do not make a quantized weight.

    >>> q, s = quantize_weight(cv.Tensor([[1.2, -2.6, 3.5, 7.0]]), "int4", group_size=4)
    >>> row_major(s).tolist(), dequantize_weight(q, s).tolist()      # scale 7 / 7; 3.5 rounds half to even
    ([[1.0]], [[1.0, -3.0, 4.0, 7.0]])
    """
    q = qweight if isinstance(qweight, Tensor) else Tensor(qweight)
    s = scales if isinstance(scales, Tensor) else Tensor(scales)
    mode, n, g = _layout(q, s, "dequantize_weight")
    target = dt.to_dtype(dtype)
    compute = dt.float64 if target == dt.float64 else dt.float32
    out = q.shape[0] * (q.shape[2] if q.ndim == 3 else 1)
    return _grouped(q, s, mode, g, compute).reshape(out, n).astype(target)


def _init_quantized(layer: Module, rows: int, n: int, mode: str, group_size: int | None, device: str | None,
                    dtype: Any, names: tuple[str, str]) -> None:
    """Check a quantized layer's arguments (ValueError/TypeError naming the layer and ``names``,
    the arguments ``rows`` and ``n`` came as), set its ``mode``, ``group_size`` and ``dtype``, and
    register zero ``qweight`` and ``scales`` in the stored layout for a ``(rows, n)`` weight."""
    where = type(layer).__name__
    for name, v in zip(names, (rows, n)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{where}: {name} must be a positive int, got {v!r}")
    layer.mode = _check_mode(mode, where)
    layer.group_size = _check_group(group_size, n, mode, where)
    layer.dtype = dt.float32 if dtype is None else dt.to_dtype(dtype)
    if not layer.dtype.is_float:
        raise TypeError(f"{where}: dtype must be a floating-point dtype, got {layer.dtype.name}")
    b = block_rows(rows)
    layer.register_buffer("qweight", zeros(rows // b, n // 2 if mode == "int4" else n, b,
                                           dtype=dt.uint8 if mode == "int4" else dt.int8, device=device))
    layer.register_buffer("scales", zeros(rows // b, n // layer.group_size, b, dtype=dt.float32, device=device))


def _from_row_major(layer: Module, name: str, value: Tensor, rows: int) -> Tensor:
    """A state dict's ``qweight`` or ``scales`` in the row-major layout of earlier corvid versions
    (2-d, with the layer's ``rows``) in the stored layout (``load_state_dict`` calls a layer's
    ``_load_value`` before it compares shapes); anything else as it is."""
    held = layer.__dict__.get(name)
    if name in ("qweight", "scales") and value.ndim == 2 and value.shape[0] == rows and held is not None and \
            held.ndim == 3:
        return blocked(value, held.shape[2])
    return value


class QuantizedLinear(Module):
    """A linear layer with quantized weights: ``y = x @ dequantize().T + bias``, the weight kept
    as the buffers ``qweight`` and ``scales`` of the module docstring's format, the bias (if any)
    a float :class:`~corvid.nn.Parameter`.

    ``QuantizedLinear(in_features, out_features, bias=True, mode="int8", group_size=128,
    device=None, dtype=None)`` makes one with zero weights, the skeleton a quantized state dict
    loads into; :meth:`from_linear` quantizes a trained ``nn.Linear``. ``dtype`` (float32 unless
    told; the Linear's weight dtype for :meth:`from_linear`) is the bias's and :attr:`weight`'s.
    The output has the input's float dtype (float32 for integer inputs, the autocast dtype
    inside ``cv.autocast``) and is computed in float32 (float64 for float64 inputs) whatever
    ``dtype`` is. ValueError for a bad mode or group size (see :func:`quantize_weight`) and,
    naming the layer, for an input whose last dimension is not ``in_features``.

    The quantized weight is frozen: ``qweight`` is an integer buffer and ``scales`` a float
    buffer, neither a parameter, so ``parameters()`` (what an optimizer gets) holds the bias
    alone, while gradients flow through the layer to its input: adapters and other layers
    around it train. :attr:`weight` is the dequantized weight (read-only), for code that reads
    ``layer.weight``. ``module.to(dtype)`` casts ``scales`` with the other float tensors
    (bfloat16 scales are off by up to 0.4%).

    >>> from corvid import nn
    >>> lin = nn.Linear(64, 16)
    >>> q = QuantizedLinear.from_linear(lin, "int8", group_size=32)
    >>> x = cv.randn(3, 64)
    >>> bool(((q(x) - lin(x)).abs() < 0.05).all())          # (int8: within sum |x| * scale / 2)
    True
    >>> bool(((q(x) - (x @ q.dequantize().T + q.bias)).abs() < 1e-5).all())
    True
    >>> [name for name, _ in q.named_parameters()], [name for name, _ in q.named_buffers()]
    (['bias'], ['qweight', 'scales'])
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, mode: str = "int8",
                 group_size: int | None = DEFAULT_GROUP_SIZE, device: str | None = None, dtype: Any = None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        _init_quantized(self, out_features, in_features, mode, group_size, device, dtype,
                        ("in_features", "out_features"))
        self.bias = Parameter(zeros(out_features, dtype=self.dtype, device=device)) if bias else None

    @classmethod
    def from_linear(cls, linear: Any, mode: str = "int8", group_size: int | None = DEFAULT_GROUP_SIZE
                    ) -> QuantizedLinear:
        """The quantized form of an ``nn.Linear``: its weight quantized by :func:`quantize_weight`
        (on the weight's device), its bias the same Parameter object (an optimizer holding it
        keeps working). The Linear is left unchanged. TypeError for anything but a ``Linear``;
        ValueError as :func:`quantize_weight`, naming the layer's ``in_features``.

        >>> from corvid import nn
        >>> q = QuantizedLinear.from_linear(nn.Linear(256, 4, bias=False), "int4")
        >>> q.qweight.shape, q.scales.shape, q.bias is None       # (one block of 4 rows)
        ((1, 128, 4), (1, 2, 4), True)
        """
        if not isinstance(linear, Linear):
            raise TypeError(f"QuantizedLinear.from_linear: expected an nn.Linear, got {type(linear).__name__}")
        mode = _check_mode(mode, "QuantizedLinear.from_linear")
        g = _check_group(group_size, linear.in_features, mode,
                         f"QuantizedLinear.from_linear(Linear(in_features={linear.in_features}, ...))")
        return _quantized_layer(linear.weight, linear.bias, mode, g, cls)

    def dequantize(self, dtype: Any = None) -> Tensor:
        """The weight ``(out_features, in_features)`` this layer multiplies by, in ``dtype``
        (the layer's ``dtype`` unless told): :func:`dequantize_weight` of its buffers.

        >>> from corvid import nn
        >>> q = QuantizedLinear.from_linear(nn.Linear(256, 2), "int8")
        >>> q.dequantize().shape, q.dequantize(cv.float64).dtype.name
        ((2, 256), 'float64')
        """
        return dequantize_weight(self.qweight, self.scales, self.dtype if dtype is None else dtype)

    @property
    def weight(self) -> Tensor:
        """The dequantized weight ``(out_features, in_features)`` in the layer's ``dtype``: what
        :meth:`dequantize` gives (a value computed from the buffers, not a parameter).

        >>> QuantizedLinear(256, 3).weight.shape
        (3, 256)
        """
        return self.dequantize()

    def forward(self, x: Tensor) -> Tensor:
        return _quantized_product(self, x, self.in_features, self.out_features, self.mode, self.group_size, self.bias)

    def _load_value(self, name: str, value: Tensor) -> Tensor:
        return _from_row_major(self, name, value, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, mode={self.mode!r}, group_size={self.group_size}")


def _quantized_product(layer: Module, x: Any, n: int, out: int, want_mode: str, want_group: int,
                       bias: Tensor | None) -> Tensor:
    """``x @ dequantize(w).T (+ bias)`` of ``layer``'s ``qweight`` and ``scales``: the forward of
    :class:`QuantizedLinear` and the tied output head of :class:`QuantizedEmbedding` (module
    docstring: the fused product below :data:`MATMUL_ROWS` rows, else a dequantized copy and the
    float matmul)."""
    x = x if isinstance(x, Tensor) else Tensor(x)
    if x.ndim == 0 or x.shape[-1] != n:
        raise shape_error(layer, f"(*, {n})", x)
    if x.dtype.is_complex:
        raise TypeError(f"{type(layer).__name__}: complex inputs are not supported, got {x.dtype.name}")
    qweight, scales = layer.qweight, layer.scales
    low = autocast_dtype()
    out_dtype = low or (x.dtype if x.dtype.is_float else dt.float32)
    if low is not None and x.dtype in (dt.float32, dt.float64):
        x = x.astype(low)  # (the input rounded as a product under autocast reads it)
    compute = dt.float64 if x.dtype == dt.float64 else dt.float32
    lead = x.shape[:-1]
    rows = math.prod(lead)
    mode, _, g = _layout(qweight, scales, type(layer).__name__)
    held = math.prod(qweight.shape[::2])
    if (mode, g, held) != (want_mode, want_group, out):
        raise ValueError(f"{type(layer).__name__}({layer.extra_repr()}): its buffers hold {mode} weights with "
                         f"group_size={g} for {held} outputs")
    with autocast(enabled=False):
        xs = x.astype(compute).reshape(rows, n)
        few = mode == "int4" and qweight.ndim == 3 and qweight.shape[2] == 64 and rows < cpu_matmul.MIN_ROWS
        if x.dtype == dt.bfloat16 and g % 2 == 0 and cpu_matmul.usable(x, rows, n, qweight, scales, few=few):
            # (bfloat16 dot products of the integers as they are, each group's sum times its
            # scale: exact products, and no dequantized copy of the weight; without a bias the
            # kernel rounds to the output dtype itself)
            direct = bias is None and out_dtype in (dt.float32, dt.bfloat16)
            y = cpu_matmul.matmul_quantized(x.reshape(rows, n), _as_blocks(qweight), _as_blocks(scales), mode, g,
                                            out_dtype if direct else dt.float32)
            if direct:
                return y.reshape(lead + (out,))
        elif rows < MATMUL_ROWS:
            y = _fused_product(xs, qweight, scales, mode, g)
        else:
            if x.dtype != compute:  # (converted once: the tiled product's loads of a narrow x converted at every use)
                xs = xs.contiguous()
            y = xs @ _grouped(qweight, scales, mode, g, compute).reshape(out, n).T
        if bias is not None:
            y = y + bias.astype(compute)
        if out_dtype != compute:
            # the product stores float32 and its consumers round it: the tiled product stores
            # float32 vectors (with the rounding to a narrow output and a consumer's view fused
            # in, it was left untiled: a bfloat16 model's key projection of a 512-token prompt
            # took 250 ms, most of a prefill), and the fused one's unrolled block is vectorized
            # by the compiler from its float32 stores (a residual and a bfloat16 rounding fused
            # in left a decode step's down projection scalar: 0.3 -> 3.1 ms)
            y = y.contiguous()
    return y.reshape(lead + (out,)).astype(out_dtype)


class QuantizedEmbedding(Module):
    """An embedding table stored quantized, as :class:`QuantizedLinear` stores a weight (the rows
    are the embeddings, the groups run along ``embedding_dim``): ``forward(ids)`` looks the rows
    up and dequantizes only those, in the layer's ``dtype``;
    :meth:`~corvid.quant.QuantizedEmbedding.attend` is the output head tied to the table
    (``h @ table.T``, the fused product of :class:`QuantizedLinear`), so a language model with
    tied embeddings reads its largest matrix quantized at every token.
    ``cv.quantize(model, mode, embeddings=True)`` makes them of a model's ``nn.Embedding`` layers.

    ``QuantizedEmbedding(num_embeddings, embedding_dim, mode="int8", group_size=128,
    padding_idx=None, device=None, dtype=None)`` makes one with zero weights (the skeleton a
    state dict loads into); :meth:`from_embedding` quantizes an ``nn.Embedding``. The table is
    frozen (two buffers, no parameter). ``padding_idx`` is kept for the repr (it only changes
    gradients, and the table has none).

    >>> from corvid import nn
    >>> emb = nn.Embedding(100, 64)
    >>> q = QuantizedEmbedding.from_embedding(emb, "int8", group_size=32)
    >>> ids = cv.Tensor([[3, 7, 3]])
    >>> bool(((q(ids) - emb(ids)).abs() <= 0.03).all()), q(ids).shape
    (True, (1, 3, 64))
    >>> h = cv.randn(2, 64)
    >>> bool(((q.attend(h) - h @ q.dequantize().T).abs() < 1e-4).all())
    True
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, mode: str = "int8",
                 group_size: int | None = DEFAULT_GROUP_SIZE, padding_idx: int | None = None,
                 device: str | None = None, dtype: Any = None):
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        _init_quantized(self, num_embeddings, embedding_dim, mode, group_size, device, dtype,
                        ("num_embeddings", "embedding_dim"))

    @classmethod
    def from_embedding(cls, embedding: Any, mode: str = "int8", group_size: int | None = DEFAULT_GROUP_SIZE
                       ) -> QuantizedEmbedding:
        """The quantized form of an ``nn.Embedding`` (left unchanged): its table quantized by
        :func:`quantize_weight`, its ``dtype`` the table's. TypeError for anything else;
        ValueError as :func:`quantize_weight`, and for an embedding with ``max_norm`` (which
        renormalizes the table in place at each lookup: a frozen table cannot)."""
        from .nn.embedding import Embedding

        if not isinstance(embedding, Embedding):
            raise TypeError(f"QuantizedEmbedding.from_embedding: expected an nn.Embedding, got "
                            f"{type(embedding).__name__}")
        if embedding.max_norm is not None:
            raise ValueError("QuantizedEmbedding.from_embedding: an embedding with max_norm renormalizes its table "
                             "in place at each lookup, which a quantized table cannot; skip it")
        return _quantized_embedding(embedding.weight, mode, group_size, embedding.padding_idx)

    def dequantize(self, dtype: Any = None) -> Tensor:
        """The table ``(num_embeddings, embedding_dim)`` in ``dtype`` (the layer's unless told)."""
        return dequantize_weight(self.qweight, self.scales, self.dtype if dtype is None else dtype)

    @property
    def weight(self) -> Tensor:
        """The dequantized table (a value computed from the buffers: reading it computes the
        whole table; a lookup and :meth:`~corvid.quant.QuantizedEmbedding.attend` do not)."""
        return self.dequantize()

    def forward(self, ids: Any) -> Tensor:
        from .nn.embedding import _indices

        idx = _indices(ids, "QuantizedEmbedding")
        if not _traced(idx) and idx.size and bool(((idx < -self.num_embeddings) | (idx >= self.num_embeddings)).any()):
            raise IndexError(f"QuantizedEmbedding: an index is out of range for {self.num_embeddings} embeddings")
        idx = where(idx < 0, idx + self.num_embeddings, idx)
        q, s = self._rows(self.qweight, idx), self._rows(self.scales, idx)  # (the rows looked up, still packed)
        lead, groups, g = q.shape[:-1], self.embedding_dim // self.group_size, self.group_size
        if self.mode == "int8":
            values = q.reshape(lead + (groups, g)).astype(dt.float32)
        else:  # (the rows' bytes are row-major packed int4: pack_int4's layout)
            values = (_nibbles(q.reshape(-1, q.shape[-1]), g).astype(dt.float32) - 8).reshape(lead + (groups, g))
        return (values * s.reshape(lead + (groups, 1))).reshape(lead + (self.embedding_dim,)).astype(self.dtype)

    @staticmethod
    def _rows(table: Tensor, idx: Tensor) -> Tensor:
        """The rows ``idx`` of a table in the stored layout ``(n / B, c, B)``, ``idx.shape + (c,)``:
        one gather from the flat table (row ``r``'s entry ``j`` is at ``(r // B * c + j) * B + r % B``),
        which reads those rows only (the row-major view of the table is not a view: a copy of it all)."""
        _, c, b = table.shape
        base = (idx // b) * (c * b) + idx % b
        flat = base.unsqueeze(-1) + arange(c, dtype=base.dtype, device=table.device) * b
        return table.reshape(-1)[flat]

    def attend(self, h: Any) -> Tensor:
        """``h @ table.T``: the logits of an output head tied to this table, ``(*, num_embeddings)``
        for ``h`` of shape ``(*, embedding_dim)``, computed as :class:`QuantizedLinear` computes
        its product (the table never dequantized whole below :data:`MATMUL_ROWS` rows)."""
        return _quantized_product(self, h, self.embedding_dim, self.num_embeddings, self.mode, self.group_size, None)

    def _load_value(self, name: str, value: Tensor) -> Tensor:
        return _from_row_major(self, name, value, self.num_embeddings)

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return (f"{self.num_embeddings}, {self.embedding_dim}{pad}, mode={self.mode!r}, "
                f"group_size={self.group_size}")


def _quantized_embedding(weight: Tensor, mode: str, group_size: int | None,
                         padding_idx: int | None = None) -> QuantizedEmbedding:
    """The :class:`QuantizedEmbedding` of a float table ``(num, dim)``, its buffers realized."""
    num, dim = weight.shape
    layer = QuantizedEmbedding(num, dim, mode, group_size, padding_idx, weight.device, weight.dtype)
    layer.qweight, layer.scales = quantize_weight(weight, mode, layer.group_size)
    return layer


def quantize(model: Any, mode: str = "int8", group_size: int | None = DEFAULT_GROUP_SIZE, skip: Skip = None,
             embeddings: bool = False) -> Any:
    """Replace every ``nn.Linear`` layer of ``model`` by a :class:`QuantizedLinear` (its weight
    quantized to ``mode``, "int8" or "int4", with ``group_size`` inputs a scale: see the module
    docstring), in place, and return ``model``. ``cv.quantize`` is this function.

    ``skip`` keeps layers in floating point: a name or a sequence of names, each matching the
    ``Linear`` layers whose qualified name (as in ``named_modules``) is that name or ends with
    ``"."`` and it (``"lm_head"``, ``"mlp.down_proj"``, ``"model.layers.0.self_attn.q_proj"``); or
    a predicate ``skip(name, layer) -> bool``. Norms and everything that is not a ``Linear`` stay
    as they are, and so do embeddings unless ``embeddings=True``, which replaces every
    ``nn.Embedding`` by a :class:`QuantizedEmbedding` in the same mode and group size (``skip``
    applies to them too): a language model's output head tied to its embedding then reads the
    quantized table (:meth:`~corvid.quant.QuantizedEmbedding.attend`). Layers quantized before are
    left alone, and a layer held in several places becomes one quantized layer, everywhere. When
    ``model`` is itself a ``Linear``, which cannot be replaced in place, its quantized form is
    returned (:meth:`QuantizedLinear.from_linear`).

    Every layer is checked before any is replaced: ValueError for a bad mode, for a group size
    that does not divide the ``in_features`` of a layer (naming them: skip them, or choose
    another size, or ``group_size=None`` for a scale per output row), and for a name in ``skip``
    that matches no ``Linear`` layer (a misspelt name would otherwise be quantized silently).
    ``embeddings=True``: ValueError too for a group size that does not divide an embedding's
    dimension, or an embedding with ``max_norm``.

    >>> from corvid import nn
    >>> class Net(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.body = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
    ...         self.lm_head = nn.Linear(32, 10)
    ...     def forward(self, x):
    ...         return self.lm_head(self.body(x))
    >>> net = quantize(Net(), "int8", group_size=32, skip="lm_head")
    >>> [type(m).__name__ for m in (net.body[0], net.body[2], net.lm_head)]
    ['QuantizedLinear', 'QuantizedLinear', 'Linear']
    >>> net(cv.randn(2, 32)).shape
    (2, 10)
    >>> quantize(nn.Sequential(nn.Linear(10, 4)), "int4", group_size=32)
    Traceback (most recent call last):
        ...
    ValueError: quantize: group_size=32 does not divide the in_features of 0 (10); skip those layers, use a divisor of their in_features, or group_size=None for one group per row
    """
    mode = _check_mode(mode, "quantize")
    _check_group_value(group_size, "quantize")
    if not isinstance(embeddings, bool):
        raise TypeError(f"quantize: embeddings must be True or False, got {embeddings!r}")
    if isinstance(model, Linear):
        return QuantizedLinear.from_linear(model, mode, group_size)
    if not isinstance(model, Module):
        raise TypeError(f"quantize: expected an nn.Module, got {type(model).__name__}")
    chosen = _to_quantize(model, mode, group_size, skip, embeddings=embeddings)
    tables = _embeddings_to_quantize(model, mode, group_size, skip) if embeddings else {}
    swap: dict[int, Module] = {key: QuantizedLinear.from_linear(m, mode, group_size) for key, (_, m) in chosen.items()}
    swap.update({key: QuantizedEmbedding.from_embedding(m, mode, group_size) for key, (_, m) in tables.items()})
    replace_modules(model, swap)
    return model


def _embeddings_to_quantize(model: Module, mode: str, group_size: int | None, skip: Skip = None,
                            where: str = "quantize") -> dict[int, tuple[str, Any]]:
    """``{id(layer): (name, layer)}`` of the ``nn.Embedding`` layers ``quantize(...,
    embeddings=True)`` replaces, all checked first (ValueError naming those that do not fit)."""
    from .nn.embedding import Embedding

    found: dict[int, tuple[str, Any]] = {}
    for name, m in model.named_modules():
        if isinstance(m, Embedding) and id(m) not in found:
            found[id(m)] = (name, m)
    if callable(skip) and not isinstance(skip, str):
        found = {key: (name, m) for key, (name, m) in found.items() if not skip(name, m)}
    elif skip is not None:
        names = [skip] if isinstance(skip, str) else list(skip)
        found = {key: (name, m) for key, (name, m) in found.items()
                 if not any(name == t or name.endswith("." + t) for t in names)}
    misfits = []
    for name, m in found.values():
        if m.max_norm is not None:
            raise ValueError(f"{where}: the embedding {name or '(the model)'} has max_norm, which renormalizes its "
                             "table in place at each lookup; a quantized table cannot (skip it)")
        try:
            _check_group(group_size, m.embedding_dim, mode, where)
        except ValueError:
            misfits.append(f"{name} ({m.embedding_dim})")
    if misfits:
        raise ValueError(f"{where}: group_size={group_size} does not divide the embedding_dim of {', '.join(misfits)}; "
                         "skip those embeddings, use a divisor, or group_size=None for one group per row")
    return found


def _quantized_layer(weight: Tensor, bias: Any, mode: str, group_size: int | None,
                     cls: type[QuantizedLinear] | None = None) -> QuantizedLinear:
    """The :class:`QuantizedLinear` of a float ``weight`` ``(out, in)`` and ``bias`` (a Parameter
    or None, kept as it is): its buffers :func:`quantize_weight` of the weight, realized, on the
    weight's device, its ``dtype`` the weight's (``cls``: a subclass to make). What :meth:`QuantizedLinear.from_linear` makes
    of a Linear, and ``models.from_pretrained(..., quantize=mode)`` of each weight it reads."""
    out, n = weight.shape
    layer = (cls or QuantizedLinear)(n, out, False, mode, group_size, weight.device, weight.dtype)
    layer.qweight, layer.scales = quantize_weight(weight, mode, layer.group_size)
    layer.bias = bias
    return layer


def _to_quantize(model: Module, mode: str, group_size: int | None, skip: Skip = None,
                 where: str = "quantize", embeddings: bool = False) -> dict[int, tuple[str, Linear]]:
    """``{id(layer): (name, layer)}`` of the ``Linear`` layers :func:`quantize` replaces (each
    once, under its first name in ``named_modules``), all checked first: ValueError naming the
    layers whose ``in_features`` ``group_size`` does not divide (or an unknown ``skip`` name).
    ``models.from_pretrained`` chooses with it on the model's skeleton, before reading weights."""
    linears: dict[int, tuple[str, Linear]] = {}
    for name, m in model.named_modules():
        if isinstance(m, Linear) and id(m) not in linears:
            linears[id(m)] = (name, m)
    kept = _skipped(model, linears, skip, embeddings)
    chosen = {key: (name, m) for key, (name, m) in linears.items() if key not in kept}
    misfits = []
    for name, m in chosen.values():
        try:
            _check_group(group_size, m.in_features, mode, where)
        except ValueError:
            misfits.append(f"{name} ({m.in_features})")
    if misfits:
        odd = " or is odd (int4 packs two inputs of a group a byte)" \
            if mode == "int4" and isinstance(group_size, int) and group_size % 2 else ""
        remedy = "skip those layers, use" if where == "quantize" else "use"
        raise ValueError(f"{where}: group_size={group_size} does not divide the in_features of "
                         f"{', '.join(misfits)}{odd}; {remedy} a divisor of their in_features, or "
                         "group_size=None for one group per row")
    return chosen


def _skipped(model: Module, linears: dict[int, tuple[str, Linear]], skip: Skip, embeddings: bool = False) -> set[int]:
    """The ids of the Linear layers ``skip`` keeps in floating point (``embeddings``: a name may
    also match an embedding, which ``quantize(..., embeddings=True)`` would replace)."""
    from .nn.embedding import Embedding

    kinds: tuple[type, ...] = (Linear, Embedding) if embeddings else (Linear,)
    if skip is None:
        return set()
    if callable(skip) and not isinstance(skip, str):
        return {key for key, (name, m) in linears.items() if skip(name, m)}
    names = [skip] if isinstance(skip, str) else list(skip)
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"quantize: skip must be a name, a sequence of names or a predicate (name, layer) -> bool, "
                        f"got {skip!r}")
    kept: set[int] = set()
    every = [(name, m) for name, m in model.named_modules(remove_duplicate=False) if name]
    for t in names:
        hits = [m for name, m in every if (name == t or name.endswith("." + t)) and isinstance(m, kinds)]
        if not hits:
            listed = ", ".join(sorted({name for name, _ in linears.values()})) or "none"
            raise ValueError(f"quantize: skip names {t!r}, which is no Linear layer of {type(model).__name__} "
                             f"(nor ends with '.{t}'); its Linear layers: {listed}")
        kept.update(id(m) for m in hits)
    return kept


def _dtype_name(v: Any) -> str:
    d = getattr(v, "dtype", None)
    return str(getattr(d, "name", d)).rpartition(".")[2]


def _stored_layout(q: Any, s: Any) -> tuple[str, int] | None:
    """(mode, group size) of a state dict's qweight and scales (any array type), or None."""
    try:
        qs, ss = tuple(q.shape), tuple(s.shape)
        n = qs[1] * (2 if _dtype_name(q) == "uint8" else 1)
        return ("int4" if _dtype_name(q) == "uint8" else "int8"), n // ss[1]
    except (AttributeError, IndexError, TypeError, ZeroDivisionError):
        return None


def load_hints(own: Mapping[str, Any], state_dict: Mapping[str, Any]) -> list[str]:
    """Why a state dict does not fit a model when one of them has quantized layers where the
    other has float ones, or other modes or group sizes, with what to call to make them fit:
    lines that :meth:`~corvid.nn.Module.load_state_dict` adds to its error. ``own`` maps the
    model's state keys to its tensors. Empty when quantization is not the problem.

    >>> from corvid import nn
    >>> q = quantize(nn.Sequential(nn.Linear(64, 8)), "int4", group_size=32)
    >>> try:
    ...     nn.Sequential(nn.Linear(64, 8)).load_state_dict(q.state_dict())
    ... except RuntimeError as e:
    ...     print(str(e).splitlines()[-1].strip())
    the state dict holds int4 weights with group_size=32 for float layers of the model (0): quantize the model the same way first, cv.quantize(model, 'int4', group_size=32), then load it
    """
    hints, to_quantize, to_float, differ = [], {}, [], {}
    for key in state_dict:
        prefix, _, last = str(key).rpartition(".")
        if last != "qweight":
            continue
        layer = prefix or "(the model)"
        dot = prefix + "." if prefix else ""
        stored = _stored_layout(state_dict[key], state_dict.get(dot + "scales"))
        if key not in own and dot + "weight" in own and stored is not None:
            to_quantize.setdefault(stored, []).append(layer)
        elif key in own and dot + "scales" in own and stored is not None:
            mine = _stored_layout(own[key], own[dot + "scales"])
            if mine != stored:
                differ.setdefault((stored, mine), []).append(layer)
    for key in own:
        prefix, _, last = str(key).rpartition(".")
        dot = prefix + "." if prefix else ""
        if last == "qweight" and key not in state_dict and dot + "weight" in state_dict:
            to_float.append(prefix or "(the model)")
    for (mode, g), layers in to_quantize.items():
        hints.append(f"the state dict holds {mode} weights with group_size={g} for float layers of the model "
                     f"({_some(layers)}): quantize the model the same way first, cv.quantize(model, {mode!r}, "
                     f"group_size={g}), then load it")
    if to_float:
        hints.append(f"the state dict holds float weights for quantized layers of the model ({_some(to_float)}): "
                     "load it into the float model, then quantize that (cv.quantize)")
    for ((mode, g), (mine, my_g)), layers in differ.items():
        hints.append(f"the state dict's {mode} weights with group_size={g} do not fit the model's {mine} layers with "
                     f"group_size={my_g} ({_some(layers)}): quantize the float model with cv.quantize(model, "
                     f"{mode!r}, group_size={g}) to load them")
    return hints


def _some(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")

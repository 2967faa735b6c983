"""Matrix products by a device's BLAS library: cuBLASLt on the CUDA device
(:mod:`corvid.runtime.cublaslt`).

``a @ b`` (and everything built on it: ``linear``, attention's products, the gradients of all of
them) on a device that offers a library (``device.blas()`` returns one) becomes one host op,
``gemm``, when both operands are float32, float64, float16 or bfloat16, the sizes are constant and
the product is large enough (:data:`MIN_WORK` multiply-adds) to pay for a kernel of its own. The
op reads its operands as they are stored: a transposed view (``w.T``) is passed as the matrix
under it with a transpose flag, a 2-d operand under a batched one is shared by the batch (a
stride of 0), and a batched ``a`` times a 2-d ``b`` is one product over all rows. On any other
device (or where the library is missing) the op's numpy function computes the same values.

What it costs: the product is no longer fused with the elementwise work around it (a bias or an
activation after it is a kernel of its own; a cast before it is stored). For large products the
library's tensor-core kernels are worth far more than the fusion.

* Gradients: the matmul rule's backward (:func:`corvid.ops.reduce._matmul_bwd`) is products
  again, so they take this route too.
* Forward mode: a ``custom_jvp`` whose tangent is ``ta @ b + a @ tb`` (products again).
* ``vmap``: the op takes leading batch axes.
* 8-bit floats: a product of two float8 operands, or of their widenings
  (``a8.astype(cv.bfloat16) @ w8.astype(cv.bfloat16).T``, the way a quantized model is written),
  runs on the GPU's 8-bit tensor cores where it has them (sm_89 and later), summed in float32 and
  written in the widened dtype (or rounded once to the 8-bit float for ``a8 @ b8``); see
  :func:`_float8_product`.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from .. import dtype as dt
from ..amp import get_float32_matmul_precision
from ..engine.host import HostOp, host_call
from ..graph.node import IDENTITY, Op
from ..graph.symbolic import hint, is_symbolic
from ..runtime.device import get_device
from ..tensor import Tensor, broadcast_shapes, result_type
from ..transforms.custom import custom_vjp
from ..transforms.forward import custom_jvp
from .reduce import _sum_to, _swaps_last_axes, _transposed_view

FEW_ROWS = 16  # rows (over the batch) below which an operand that is not stored keeps corvid's kernel
MIN_WORK = 1 << 18  # multiply-adds (batch*n*m*k): four 64x64x64 products; below it corvid's fused kernel stays
DTYPES = ("float32", "float64", "float16", "bfloat16")


def _reference(a: np.ndarray, b: np.ndarray, *bias: np.ndarray, ta: bool, tb: bool, precision: str,
               out: str = "") -> np.ndarray:
    """What the library computes, in numpy: narrow operands in float32 (the library's sums), the
    bias added before the one rounding to the result's dtype (``out``, else the operands')."""
    wide = np.float64 if a.dtype == np.float64 else np.float32
    x = np.swapaxes(a, -1, -2) if ta else a
    y = np.swapaxes(b, -1, -2) if tb else b
    product = np.matmul(x.astype(wide), y.astype(wide))
    if bias:  # (m,), or (*vmap axes, m): those are the output's first axes
        b = bias[0]
        product = product + b.reshape(b.shape[:-1] + (1,) * (product.ndim - b.ndim) + b.shape[-1:]).astype(wide)
    return product.astype(getattr(dt, out).np if out else a.dtype)


_refused: set[str] = set()  # the products the library found no algorithm for (warned once each)


def _native(device: str, params: dict, in_specs: list[tuple[tuple, Any]]) -> Any:
    """The library's program on a device that offers one; None elsewhere (numpy computes). A
    product the library refuses (its heuristic finds no algorithm for these sizes, layouts and
    alignments) is computed by the numpy function too, with a warning naming it, rather than
    failing the whole computation."""
    dev = get_device(device)
    blas = dev.blas() if hasattr(dev, "blas") else None
    if blas is None:
        return None
    if len(in_specs) > 2 and len(in_specs[2][0]) > 1:  # (a bias per vmapped example: the numpy function's)
        return None
    from ..runtime.cublaslt import CublasError, GemmProgram

    try:
        return GemmProgram(dev, blas, params, in_specs)
    except CublasError as e:
        what = f"{[tuple(s) for s, _ in in_specs]} {dict(params)}"
        if what not in _refused:
            _refused.add(what)
            import warnings

            warnings.warn(f"cuBLASLt refused a matrix product ({e}); corvid computes it on the host, which is "
                          "slow: please report the shapes", stacklevel=2)
        return None


def _flops(params: dict, in_specs: list[tuple[tuple, Any]]) -> Any:
    """2 * n * m * k over the batch (sizes symbolic where the shapes are)."""
    (a, _), (b, _) = in_specs[:2]
    lead = [max(x, y) if isinstance(x, int) and isinstance(y, int) else (y if x == 1 else x)
            for x, y in zip((1,) * (len(b) - len(a)) + tuple(a[:-2]), (1,) * (len(a) - len(b)) + tuple(b[:-2]))]
    m = b[-2] if params["tb"] else b[-1]
    return 2 * math.prod(lead) * a[-2] * a[-1] * m


@functools.lru_cache(maxsize=None)
def _op(ta: bool, tb: bool, precision: str, out: str = "") -> HostOp:
    """The op of one product variant (made once: the graph's node for a product is keyed on it)."""
    params = (("ta", ta), ("tb", tb), ("precision", precision)) + ((("out", out),) if out else ())
    return HostOp("gemm", _reference, params, batched=True, native=_native, flops=_flops)


def available(device: str) -> bool:
    """Whether ``device`` runs products through a library (starting it if need be); never for a
    sharded value (a tuple of devices)."""
    if not isinstance(device, str) or device.partition(":")[0] == "CPU":
        return False

    try:
        dev = get_device(device)
    except Exception:
        return False
    return hasattr(dev, "blas") and dev.blas() is not None


def _applies(a: Tensor, b: Tensor, common: dt.DType) -> tuple[int, ...] | None:
    """The batch shape of ``a @ b`` where the library computes it (see the module docstring),
    else None."""
    if (common.name not in DTYPES and common not in FLOAT8) or a.device != b.device or not available(a.device):
        return None
    n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = () if a.ndim == 2 and b.ndim == 2 else broadcast_shapes(a.shape[:-2], b.shape[:-2])
    constant = all(type(s) is int for s in a.shape + b.shape)
    sizes = (n, k, m) + tuple(batch) if constant else [hint(s) for s in (n, k, m) + tuple(batch)]
    if math.prod(sizes) < MIN_WORK or 0 in sizes:  # (a symbolic size: the value it was traced with)
        return None
    if not constant and any(is_symbolic(s) for s in a.shape + b.shape) and a.shape[:-2] != b.shape[:-2] and \
            (a.ndim != 2 and b.ndim != 2):
        return None  # (symbolic leading axes broadcast against each other: corvid's kernels)
    if hint(n) * math.prod(hint(s) for s in batch) < FEW_ROWS and not (_held(a) and _held(b)):
        # a few rows (a decode step) times a value not yet stored (a dequantized weight, a slice of a
        # KV cache): corvid's kernel reads it in place, fused with what computes it; the library
        # would first store it whole, then read it once
        return None
    return batch


def _held(t: Tensor) -> bool:
    """Whether ``t`` reads a stored value as it is (a buffer, a traced placeholder, or a
    transposed view of one, under markers): the op takes it without a copy."""
    n = t.node
    while n.buffer is None and n.src and (n.op in IDENTITY or _swaps_last_axes(n)):
        n = n.src[0]
    return n.buffer is not None or n.op is Op.VAR


def matmul(a: Tensor, b: Tensor, common: dt.DType) -> Tensor | None:
    """``a @ b`` in ``common`` through the device's library, or None where it does not apply
    (see the module docstring)."""
    if common in FLOAT8:  # (summed in float32 by the library, rounded once to the 8-bit float by corvid)
        product = _float8_product(a.astype(common), b.astype(common), dt.float32)
        return None if product is None else product.astype(common)
    if common in _FLOAT8_OUT:
        a8, b8 = _float8_source(a), _float8_source(b)
        product = None if a8 is None or b8 is None else _float8_product(a8, b8, common)
        if product is not None:
            return product
    batch = _applies(a, b, common)
    return None if batch is None else _gemm(a.astype(common), b.astype(common), batch)


def linear(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor | None:
    """``x @ weight.T + bias`` with the bias added by the library as it writes the product (its
    bias epilogue: no pass of its own over the result), or None where the library does not
    compute the product or the bias has another dtype than it (promotion: the product, then the
    sum)."""
    if x.ndim < 2 or bias.ndim != 1 or bias.device != x.device:
        return None
    common = result_type(x, weight)
    if common in _FLOAT8_OUT and bias.dtype == common:
        x8, w8 = _float8_source(x), _float8_source(weight)
        product = None if x8 is None or w8 is None else _float8_product(x8, w8.T, common, bias)
        if product is not None:
            return product
    batch = _applies(x, weight.T, common)
    if batch is None or bias.dtype != common:
        return None
    return _gemm(x.astype(common), weight.astype(common).T, batch, bias)


# --- 8-bit floats ------------------------------------------------------------------------------------

FLOAT8 = (dt.float8_e4m3fn, dt.float8_e5m2)
_FLOAT8_OUT = (dt.bfloat16, dt.float16, dt.float32)  # what a product of 8-bit floats may be written as


def _float8_source(t: Tensor) -> Tensor | None:
    """The 8-bit float tensor of which ``t`` is a widening (``x8.astype(cv.bfloat16)``, or a
    transposed view of one), else None. A widening of an 8-bit float is exact, so the product of
    two widened operands is the library's product of the 8-bit floats themselves, written in the
    wider dtype: what XLA makes of ``dot(convert(a8), convert(b8))`` too."""
    n = t.node
    swapped = _swaps_last_axes(n)
    if swapped:
        n = n.src[0]
    if n.op is not Op.CAST or n.src[0].dtype not in FLOAT8:
        return None
    source = t._new(n.src[0])
    return source.mT if swapped else source


def _float8_product(a8: Tensor, b8: Tensor, out: dt.DType, bias: Tensor | None = None) -> Tensor | None:
    """``a8 @ b8`` (8-bit floats) summed in float32 and written as ``out`` (float32, bfloat16 or
    float16), by the library, or None where it does not compute the product.

    On a GPU with 8-bit float tensor cores (sm_89 and later; :attr:`Blas.fp8`) the product reads
    the 8-bit operands. The library takes them in one layout only: both with ``k`` contiguous
    (``a`` as (n, k), ``b`` as the transpose of an (m, k) matrix: ``x @ w.T``), so an operand
    stored otherwise is copied first (a byte per element), and ``k`` and ``m`` must be multiples
    of 16. float8_e5m2 operands (which it takes only beside a float8_e4m3fn one), other sizes and
    older GPUs: the operands are widened to bfloat16 (float16 for a float16 result; both exact)
    and multiplied as those, with the same float32 sums and the one rounding to ``out``."""
    if a8.device != b8.device or not available(a8.device):
        return None
    k, m = a8.shape[-1], b8.shape[-1]
    cores = get_device(a8.device).blas().fp8 and a8.dtype is b8.dtype is dt.float8_e4m3fn and \
        isinstance(k, int) and isinstance(m, int) and k % 16 == 0 and m % 16 == 0
    if not cores:
        wide = dt.float16 if out is dt.float16 else dt.bfloat16
        batch = _applies(a8, b8, wide)
        if batch is None:
            return None
        return _gemm(a8.astype(wide), b8.astype(wide), batch, bias, out if out is not wide else None)
    batch = _applies(a8, b8, a8.dtype)
    if batch is None:
        return None
    x = a8.contiguous() if _transposed_view(a8) else a8
    y = b8 if _transposed_view(b8) else b8.mT.contiguous().mT
    if bias is not None and out is dt.float32:  # (the library's float32 result of 8-bit floats takes a bfloat16 bias)
        return _gemm(x, y, batch, None, out) + bias
    return _gemm(x, y, batch, bias, out)


def _fit(t: Tensor, batch: tuple[int, ...]) -> Tensor:
    """``t``'s leading axes as the op takes them: the batch's, or as many 1s (one matrix for all,
    read with a batch stride of 0); a partial broadcast is expanded (stored once by the op). Both
    operands get the batch's rank, so that the leading axes ``vmap`` puts in front of each line up."""
    lead = t.shape[:-2]
    if lead == batch:
        return t
    if math.prod(lead) == 1:
        return t.reshape((1,) * len(batch) + t.shape[-2:])
    return t.broadcast_to(batch + t.shape[-2:])


def _stored(t: Tensor, batch: tuple[int, ...]) -> tuple[Tensor, bool]:
    """``t`` as the matrix the op reads, and whether it is read transposed: the tensor under the
    views that swap the last two axes (``w.T``; a gradient's ``w.T.mT``: none) with the flag,
    its leading axes fitted (:func:`_fit`). (Unwrapping one view only, the backward of ``x @ w.T``
    stored ``w.T`` as a transposed copy of ``w`` at every step, to read it with the flag.)"""
    flag = False
    while t.node.buffer is None and _transposed_view(t):
        t = t._new(t.node.src[0])
        flag = not flag
    return _fit(t, batch), flag


def _gemm(a: Tensor, b: Tensor, batch: tuple[int, ...], bias: Tensor | None = None,
          out: dt.DType | None = None) -> Tensor:
    """The op on ``a`` and ``b`` as stored; ``out``: the result's dtype where it is not theirs."""
    n, m = a.shape[-2], b.shape[-1]

    if b.ndim == 2 and a.ndim > 2 and batch and not _transposed_view(a):  # (every batch entry's rows times one b)
        return _gemm(a.reshape(-1, a.shape[-1]), b, (), bias, out).reshape(batch + (n, m))
    (x, ta), (y, tb) = _stored(a, batch), _stored(b, batch)
    return _product(x, y, bias, ta, tb, batch, "" if out is None or out is a.dtype else out.name)


def _op_of(x: Tensor, t: bool) -> Tensor:
    """``op(x)``: the matrix the product reads from the stored ``x``."""
    return x.mT if t else x


def _call(x: Tensor, y: Tensor, bias: Tensor | None, ta: bool, tb: bool, batch: tuple[int, ...], out: str) -> Tensor:

    n = x.shape[-1] if ta else x.shape[-2]
    m = y.shape[-2] if tb else y.shape[-1]
    precision = get_float32_matmul_precision() if x.dtype is dt.float32 else "highest"
    ins = (x, y) if bias is None else (x, y, bias)
    (result,) = host_call(_op(ta, tb, precision, out), *ins,
                          outputs=[(batch + (n, m), getattr(dt, out) if out else x.dtype)])
    return result


@custom_vjp
def _product_vjp(x: Tensor, y: Tensor, bias: Tensor | None, ta: bool, tb: bool, batch: tuple[int, ...],
                 out: str) -> Tensor:
    return _call(x, y, bias, ta, tb, batch, out)


def _product_fwd(x, y, bias, ta, tb, batch, out):
    return _call(x, y, bias, ta, tb, batch, out), (x, y, bias is not None, ta, tb)


def _product_bwd(res, g):
    """``op(a)``'s gradient ``g @ op(b).mT`` and ``op(b)``'s ``op(a).mT @ g``, each turned back
    into the stored operand's layout and summed over a batch it was shared by; the bias's, ``g``
    summed over its rows. (Operands of another dtype than the result, 8-bit floats, get theirs.)"""

    x, y, has_bias, ta, tb = res
    da = g @ _op_of(y, tb).mT
    db = _op_of(x, ta).mT @ g
    dx = da.mT if ta else da
    dy = db.mT if tb else db
    dbias = g.sum(tuple(range(g.ndim - 1))) if has_bias else None
    return (_sum_to(dx, x.shape).astype(x.dtype), _sum_to(dy, y.shape).astype(y.dtype), dbias,
            None, None, None, None)


_product_vjp.defvjp(_product_fwd, _product_bwd)


@custom_jvp
def _product(x: Tensor, y: Tensor, bias: Tensor | None, ta: bool, tb: bool, batch: tuple[int, ...],
             out: str = "") -> Tensor:
    return _product_vjp(x, y, bias, ta, tb, batch, out)


@_product.defjvp
def _product_jvp(primals: tuple, tangents: tuple) -> tuple[Tensor, Tensor]:
    x, y, bias, ta, tb, batch, out = primals
    tx, ty, tbias = tangents[:3]
    result = _product(x, y, bias, ta, tb, batch, out)
    wide = getattr(dt, out) if out else x.dtype  # (8-bit operands: their widenings, as the product reads them)
    tangent = _op_of(tx, ta).astype(wide) @ _op_of(y, tb).astype(wide) + \
        _op_of(x, ta).astype(wide) @ _op_of(ty, tb).astype(wide)
    if bias is not None and tbias is not None:
        tangent = tangent + tbias
    return result, tangent

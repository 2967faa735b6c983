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
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import dtype as dt
from ..engine.host import HostOp, host_call
from ..graph.symbolic import hint, is_symbolic
from ..tensor import Tensor, broadcast_shapes
from ..transforms.custom import custom_vjp
from ..transforms.forward import custom_jvp

FEW_ROWS = 16  # rows (over the batch) below which an operand that is not stored keeps corvid's kernel
MIN_WORK = 1 << 18  # multiply-adds (batch*n*m*k): four 64x64x64 products; below it corvid's fused kernel stays
DTYPES = ("float32", "float64", "float16", "bfloat16")


def _reference(a: np.ndarray, b: np.ndarray, *bias: np.ndarray, ta: bool, tb: bool, precision: str) -> np.ndarray:
    """What the library computes, in numpy: narrow operands in float32 (the library's sums), the
    bias added before the one rounding to the operands' dtype."""
    wide = np.float64 if a.dtype == np.float64 else np.float32
    x = np.swapaxes(a, -1, -2) if ta else a
    y = np.swapaxes(b, -1, -2) if tb else b
    out = np.matmul(x.astype(wide), y.astype(wide))
    if bias:  # (m,), or (*vmap axes, m): those are the output's first axes
        b = bias[0]
        out = out + b.reshape(b.shape[:-1] + (1,) * (out.ndim - b.ndim) + b.shape[-1:]).astype(wide)
    return out.astype(a.dtype)


def _native(device: str, params: dict, in_specs: list[tuple[tuple, Any]]) -> Any:
    """The library's program on a device that offers one; None elsewhere (numpy computes)."""
    from ..runtime.device import get_device

    dev = get_device(device)
    blas = dev.blas() if hasattr(dev, "blas") else None
    if blas is None:
        return None
    if len(in_specs) > 2 and len(in_specs[2][0]) > 1:  # (a bias per vmapped example: the numpy function's)
        return None
    from ..runtime.cublaslt import GemmProgram

    return GemmProgram(dev, blas, params, in_specs)


def _flops(params: dict, in_specs: list[tuple[tuple, Any]]) -> Any:
    """2 * n * m * k over the batch (sizes symbolic where the shapes are)."""
    (a, _), (b, _) = in_specs[:2]
    lead = [max(x, y) if isinstance(x, int) and isinstance(y, int) else (y if x == 1 else x)
            for x, y in zip((1,) * (len(b) - len(a)) + tuple(a[:-2]), (1,) * (len(a) - len(b)) + tuple(b[:-2]))]
    m = b[-2] if params["tb"] else b[-1]
    return 2 * math.prod(lead) * a[-2] * a[-1] * m


def _op(ta: bool, tb: bool, precision: str) -> HostOp:
    return HostOp("gemm", _reference, (("ta", ta), ("tb", tb), ("precision", precision)), batched=True,
                  native=_native, flops=_flops)


def available(device: str) -> bool:
    """Whether ``device`` runs products through a library (starting it if need be); never for a
    sharded value (a tuple of devices)."""
    if not isinstance(device, str) or device.partition(":")[0] == "CPU":
        return False
    from ..runtime.device import get_device

    try:
        dev = get_device(device)
    except Exception:
        return False
    return hasattr(dev, "blas") and dev.blas() is not None


def _applies(a: Tensor, b: Tensor, common: dt.DType) -> tuple[int, ...] | None:
    """The batch shape of ``a @ b`` where the library computes it (see the module docstring),
    else None."""
    if common.name not in DTYPES or a.device != b.device or not available(a.device):
        return None
    n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    sizes = [hint(s) for s in (n, k, m) + tuple(batch)]  # (a symbolic size: the value it was traced with)
    if math.prod(sizes) < MIN_WORK or 0 in sizes:
        return None
    if any(is_symbolic(s) for s in a.shape + b.shape) and a.shape[:-2] != b.shape[:-2] and \
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
    from ..graph.node import IDENTITY, Op
    from .reduce import _swaps_last_axes

    n = t.node
    while n.buffer is None and n.src and (n.op in IDENTITY or _swaps_last_axes(n)):
        n = n.src[0]
    return n.buffer is not None or n.op is Op.VAR


def matmul(a: Tensor, b: Tensor, common: dt.DType) -> Tensor | None:
    """``a @ b`` in ``common`` through the device's library, or None where it does not apply
    (see the module docstring)."""
    batch = _applies(a, b, common)
    return None if batch is None else _gemm(a.astype(common), b.astype(common), batch)


def linear(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor | None:
    """``x @ weight.T + bias`` with the bias added by the library as it writes the product (its
    bias epilogue: no pass of its own over the result), or None where the library does not
    compute the product or the bias has another dtype than it (promotion: the product, then the
    sum)."""
    from ..tensor import result_type

    if x.ndim < 2 or bias.ndim != 1 or bias.device != x.device:
        return None
    common = result_type(x, weight)
    batch = _applies(x, weight.T, common)
    if batch is None or bias.dtype != common:
        return None
    return _gemm(x.astype(common), weight.astype(common).T, batch, bias)


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
    """``t`` as the matrix the op reads, and whether it is read transposed: the tensor under a view
    that swaps the last two axes (``w.T``) with the flag, its leading axes fitted (:func:`_fit`)."""
    from .reduce import _transposed_view

    if _transposed_view(t):
        under = t._new(t.node.src[0])
        return _fit(under, batch), True
    return _fit(t, batch), False


def _gemm(a: Tensor, b: Tensor, batch: tuple[int, ...], bias: Tensor | None = None) -> Tensor:
    n, m = a.shape[-2], b.shape[-1]
    from .reduce import _transposed_view

    if b.ndim == 2 and a.ndim > 2 and batch and not _transposed_view(a):  # (every batch entry's rows times one b)
        return _gemm(a.reshape(-1, a.shape[-1]), b, (), bias).reshape(batch + (n, m))
    (x, ta), (y, tb) = _stored(a, batch), _stored(b, batch)
    return _product(x, y, bias, ta, tb, batch)


def _op_of(x: Tensor, t: bool) -> Tensor:
    """``op(x)``: the matrix the product reads from the stored ``x``."""
    return x.mT if t else x


def _call(x: Tensor, y: Tensor, bias: Tensor | None, ta: bool, tb: bool, batch: tuple[int, ...]) -> Tensor:
    from ..amp import get_float32_matmul_precision

    n = x.shape[-1] if ta else x.shape[-2]
    m = y.shape[-2] if tb else y.shape[-1]
    precision = get_float32_matmul_precision() if x.dtype is dt.float32 else "highest"
    ins = (x, y) if bias is None else (x, y, bias)
    (out,) = host_call(_op(ta, tb, precision), *ins, outputs=[(batch + (n, m), x.dtype)])
    return out


@custom_vjp
def _product_vjp(x: Tensor, y: Tensor, bias: Tensor | None, ta: bool, tb: bool, batch: tuple[int, ...]) -> Tensor:
    return _call(x, y, bias, ta, tb, batch)


def _product_fwd(x, y, bias, ta, tb, batch):
    return _call(x, y, bias, ta, tb, batch), (x, y, bias is not None, ta, tb)


def _product_bwd(res, g):
    """``op(a)``'s gradient ``g @ op(b).mT`` and ``op(b)``'s ``op(a).mT @ g``, each turned back
    into the stored operand's layout and summed over a batch it was shared by; the bias's, ``g``
    summed over its rows."""
    from .reduce import _sum_to

    x, y, has_bias, ta, tb = res
    da = g @ _op_of(y, tb).mT
    db = _op_of(x, ta).mT @ g
    dx = da.mT if ta else da
    dy = db.mT if tb else db
    dbias = g.sum(tuple(range(g.ndim - 1))) if has_bias else None
    return _sum_to(dx, x.shape), _sum_to(dy, y.shape), dbias, None, None, None


_product_vjp.defvjp(_product_fwd, _product_bwd)


@custom_jvp
def _product(x: Tensor, y: Tensor, bias: Tensor | None, ta: bool, tb: bool, batch: tuple[int, ...]) -> Tensor:
    return _product_vjp(x, y, bias, ta, tb, batch)


@_product.defjvp
def _product_jvp(primals: tuple, tangents: tuple) -> tuple[Tensor, Tensor]:
    x, y, bias, ta, tb, batch = primals
    tx, ty, tbias = tangents[:3]
    out = _product(x, y, bias, ta, tb, batch)
    tangent = _op_of(tx, ta) @ _op_of(y, tb) + _op_of(x, ta) @ _op_of(ty, tb)
    if bias is not None and tbias is not None:
        tangent = tangent + tbias
    return out, tangent

"""bfloat16 products on CPUs with bfloat16 dot-product instructions (AVX512-BF16: AMD Zen 4 and
later, Intel Cooper Lake and Sapphire Rapids): ``x @ w.T`` of a bfloat16 input with a bfloat16
or quantized weight, as the prefill of a bfloat16 or quantized language model asks for it.

corvid's generated products compute in float32 (one multiply-add per pair of numbers); the
``vdpbf16ps`` instruction multiplies two pairs of bfloat16 numbers and adds both products to a
float32 lane, twice the work per instruction. Measured on a 2-core Zen 4, ``512 x 2048 @ 2048 x
8192``: 21 ms here (the weight's packing included), 20 ms for torch's oneDNN product, about
45 ms for corvid's float32 tiles.

* **The kernels** (C with intrinsics, :mod:`corvid.nn.cpu_matmul_c`, one build per weight kind
  and output dtype) pack each block of 48 outputs of the weight into a panel per thread (no
  packed copy of the whole weight is kept), then run 8 rows by 48 outputs in 24 vector registers.
* **Quantized weights** (:func:`matmul_quantized`, the blocked layout of :mod:`corvid.quant`)
  are packed from their integers, which bfloat16 holds exactly, and each group's sum is
  multiplied by its scale: every product is exact, and the float32 copy of the dequantized
  weight that a many-row quantized product made before (67 MB for a Llama-3.2-1B MLP matrix)
  is gone.
* **The result** is float32, or bfloat16 rounded once from the float32 sum (half the memory of
  a prompt's intermediate values).
* **When:** a CPU device whose compiler targets those instructions (``-march=native`` on such a
  CPU; a tuning without them, ``CORVID_CC_FLAGS=-march=x86-64-v3``, keeps the float32 product),
  bfloat16 input and weight, at least :data:`MIN_ROWS` rows, an even input size, and no
  transform watching (``grad`` with gradients enabled, ``jvp``, ``vmap``: those take the
  ordinary product, which they know how to differentiate and batch). ``jit`` programs replay
  it, over symbolic row counts too.
* **Values:** each output is the float32 sum of exact bfloat16 products, as the ordinary product
  computes it, in another order (the instruction adds products in pairs), and subnormal inputs
  count as zero (the instruction's rule). Elsewhere the op's numpy function computes the same.
"""

from __future__ import annotations

import ctypes
import functools
import math
from typing import Any

import numpy as np

from .. import dtype as dt
from ..autograd import depends_on, is_grad_enabled
from ..engine.host import HostOp, host_call
from ..graph.symbolic import is_symbolic, size_function
from ..tensor import Tensor
from . import cpu_matmul_c

MIN_ROWS = 8  # rows from which a product takes this path (from 8 rows the kernel packing the weight wins)
_WATCHING = frozenset({"grad", "jvp", "vmap", "checkpoint", "checkpoint_in", "recompute"})


@functools.cache
def _function(kind: str, out: str = "float32") -> Any:
    """The compiled kernel for weights of ``kind`` writing ``out``, or None where the toolchain's
    target has no AVX512-BF16."""
    from ..runtime.compiler import CompileError, CompilerNotFoundError, compile_kernel

    name = f"cv_matmul_bf16_{kind}_{out}"
    try:
        lib = compile_kernel(cpu_matmul_c.source(name, kind, out), name)
    except (CompileError, CompilerNotFoundError):
        return None
    return lib.function(name, [ctypes.c_void_p] * 4 + [ctypes.c_longlong] * 5)


def available() -> bool:
    """Whether this process's CPU kernels can use the bfloat16 dot-product instructions."""
    return _function("bf16") is not None


class _Program:
    """The product on CPU buffers; its row count may be symbolic (``takes_sizes``)."""

    def __init__(self, device: str, params: dict, shapes: list[tuple]):
        from ..runtime.device import get_device

        self.address = get_device(device).allocator.address
        self.kind = params["kind"]
        self.fn = _function(self.kind, params["out"])
        self.rows = size_function(shapes[0][0])
        self.k = int(shapes[0][1])
        self.n, self.block, self.group = int(params["n"]), int(params["block"]), int(params["group"])
        self.takes_sizes = is_symbolic(shapes[0][0])

    def __call__(self, handles: list[Any], sizes: list[int] | None = None) -> None:
        m = self.rows if type(self.rows) is int else self.rows(sizes)
        ptrs = [self.address(h) for h in handles] + [None]
        self.fn(ptrs[0], ptrs[1], ptrs[2], ptrs[3], m, self.n, self.k, self.block, self.group)


def _native(device: str, params: dict, in_specs: list[tuple[tuple, Any]]) -> Any:
    if device.partition(":")[0] != "CPU" or _function(params["kind"], params["out"]) is None:
        return None
    return _Program(device, params, [shape for shape, _ in in_specs])


def _reference(x: np.ndarray, w: np.ndarray, *scales: np.ndarray, kind: str, n: int, block: int,
               group: int, out: str) -> np.ndarray:
    """numpy's product of the same operands (what runs where the kernel does not)."""
    if kind == "bf16":
        weight = w.astype(np.float32)
    else:
        nb, _, b = w.shape
        if kind == "int8":
            q = w.astype(np.float32)  # (nb, K, B)
        else:
            g = group
            lo, hi = (w & 15).astype(np.float32) - 8, (w >> 4).astype(np.float32) - 8  # (nb, K/2, B)
            k2 = w.shape[1]
            lo, hi = lo.reshape(nb, k2 * 2 // g, g // 2, b), hi.reshape(nb, k2 * 2 // g, g // 2, b)
            q = np.concatenate([lo, hi], axis=2).reshape(nb, k2 * 2, b)
        s = np.repeat(scales[0].astype(np.float32), group, axis=1)  # (nb, K, B)
        weight = (q * s).transpose(0, 2, 1).reshape(nb * b, -1)[:n]
    return x.astype(np.float32) @ weight.T


def _call(kind: str, x: Tensor, w: Tensor, scales: Tensor | None, n: int, block: int, group: int,
          out: dt.DType) -> Tensor:
    if out not in (dt.float32, dt.bfloat16):
        raise ValueError(f"bfloat16 product: the result is float32 or bfloat16, not {out.name}")
    params = (("kind", kind), ("n", int(n)), ("block", int(block)), ("group", int(group)), ("out", out.name))
    op = HostOp(f"matmul_bf16_{kind}", _reference, params, native=_native)
    ins = [x.astype(dt.bfloat16), w] + ([scales.astype(dt.float32)] if scales is not None else [])
    (y,) = host_call(op, *ins, outputs=[((x.shape[0], n), out)])
    return y


def matmul(x: Tensor, w: Tensor, out: dt.DType = dt.float32) -> Tensor:
    """``x (M, K) @ w.T`` for ``w (N, K)``, both read as bfloat16; float32 sums, the result
    ``out`` (float32, or bfloat16 rounded once)."""
    return _call("bf16", x, w.astype(dt.bfloat16), None, w.shape[0], 1, 1, out)


def matmul_quantized(x: Tensor, qweight: Tensor, scales: Tensor, mode: str, group_size: int,
                     out: dt.DType = dt.float32) -> Tensor:
    """``x (M, K) @ dequantize(w).T`` from bfloat16 ``x`` and the blocked ``qweight`` and ``scales``
    of :mod:`corvid.quant` (``mode`` "int8" or "int4"), without a dequantized copy; float32 sums,
    the result ``out`` (float32, or bfloat16 rounded once)."""
    nb, _, b = qweight.shape
    return _call(mode, x, qweight, scales, nb * b, b, group_size, out)


def usable(x: Tensor, rows: Any, k: int, *weights: Tensor) -> bool:
    """Whether a product of ``x`` (``rows`` rows of ``k``, bfloat16) with weights made of
    ``weights`` takes the packed kernel (module docstring: when)."""
    if x.dtype != dt.bfloat16 or x.device.partition(":")[0] != "CPU" or k % 2 or k == 0:
        return False
    if rows < MIN_ROWS:  # (a symbolic row count: a guard of the trace, a program for each side)
        return False
    watching = _WATCHING if not is_grad_enabled() else _WATCHING | {"leaf"}
    if any(depends_on(t.node, watching) for t in (x, *weights)):
        return False
    return available()


def linear(x: Tensor, weight: Tensor) -> Tensor | None:
    """``x @ weight.T`` through the packed kernel, rounded to bfloat16, or None where it does not
    apply (:func:`usable`)."""
    if weight.dtype != dt.bfloat16 or weight.ndim != 2 or x.ndim < 1:
        return None
    lead = x.shape[:-1]
    rows = math.prod(lead) if lead else 1
    if not usable(x, rows, weight.shape[1], weight):
        return None
    y = matmul(x.reshape(rows, weight.shape[1]), weight, dt.bfloat16)
    return y.reshape(lead + (weight.shape[0],))


__all__ = ["available", "linear", "matmul", "matmul_quantized", "usable"]

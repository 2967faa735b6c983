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
# float32 products under "medium" precision whose right operand is stored (k, m): from this many rows
# its transposed bfloat16 copy pays (512 x 2048 @ 2048 x 1024: 5.6 ms with the copy, 5.0 without the path)
TRANSPOSED_COPY_ROWS = 2048
_HOOKS = ("_forward_pre_hooks", "_forward_hooks")
_WATCHING = frozenset({"grad", "jvp", "vmap", "checkpoint", "checkpoint_in", "recompute"})


@functools.cache
def _function(kind: str, out: str = "float32", act: str | None = None) -> Any:
    """The compiled kernel for weights of ``kind`` writing ``out`` (gated by ``act``), or None
    where the toolchain's target has no AVX512-BF16."""
    from ..runtime.compiler import CompileError, CompilerNotFoundError, compile_kernel

    name = f"cv_matmul_bf16_{kind}_{out}" + (f"_{act}" if act else "")
    try:
        text = cpu_matmul_c.gemv_source(name, out) if kind == "int4gemv" else cpu_matmul_c.source(name, kind, out, act)
        lib = compile_kernel(text, name)
    except (CompileError, CompilerNotFoundError):
        return None
    fn = lib.function(name, [ctypes.c_void_p] * 6 + [ctypes.c_longlong] * 5)
    fn.restype = ctypes.c_int  # (nonzero: its scratch memory could not be allocated)
    return fn


def available() -> bool:
    """Whether this process's CPU kernels can use the bfloat16 dot-product instructions."""
    return _function("bf16") is not None


class _Program:
    """The product on CPU buffers; its row count may be symbolic (``takes_sizes``)."""

    def __init__(self, device: str, params: dict, shapes: list[tuple]):
        from ..runtime.device import get_device

        self.address = get_device(device).allocator.address
        self.kind, self.gated = params["kind"], params["act"] is not None
        self.fn = _function(self.kind, params["out"], params["act"])
        self.rows = size_function(shapes[0][0])
        self.k = int(shapes[0][1])
        self.n, self.block, self.group = int(params["n"]), int(params["block"]), int(params["group"])
        self.takes_sizes = is_symbolic(shapes[0][0])

    def __call__(self, handles: list[Any], sizes: list[int] | None = None) -> None:
        m = self.rows if type(self.rows) is int else self.rows(sizes)
        ptrs = [self.address(h) for h in handles]
        quantized = self.kind != "bf16"
        c, a, w = ptrs[:3]
        s = ptrs[3] if quantized else None
        w2 = (ptrs[4] if quantized else ptrs[3]) if self.gated else None
        s2 = ptrs[5] if self.gated and quantized else None
        if self.fn(c, a, w, s, w2, s2, m, self.n, self.k, self.block, self.group):
            raise MemoryError(f"bfloat16 product ({self.kind}): the CPU kernel could not allocate its scratch memory "
                              f"({m} x {self.k} by {self.n})")


def _native(device: str, params: dict, in_specs: list[tuple[tuple, Any]]) -> Any:
    if device.partition(":")[0] != "CPU" or _function(params["kind"], params["out"], params["act"]) is None:
        return None
    return _Program(device, params, [shape for shape, _ in in_specs])


def _dequantized(w: np.ndarray, scales: np.ndarray | None, kind: str, n: int, group: int) -> np.ndarray:
    """A weight operand as float32 ``(n, K)``."""
    if kind == "bf16":
        return w.astype(np.float32)
    kind = "int4" if kind == "int4gemv" else kind
    nb, _, b = w.shape
    if kind == "int8":
        q = w.astype(np.float32)  # (nb, K, B)
    else:
        g, k2 = group, w.shape[1]
        lo, hi = (w & 15).astype(np.float32) - 8, (w >> 4).astype(np.float32) - 8  # (nb, K/2, B)
        lo, hi = lo.reshape(nb, k2 * 2 // g, g // 2, b), hi.reshape(nb, k2 * 2 // g, g // 2, b)
        q = np.concatenate([lo, hi], axis=2).reshape(nb, k2 * 2, b)
    s = np.repeat(scales.astype(np.float32), group, axis=1)  # (nb, K, B)
    return (q * s).transpose(0, 2, 1).reshape(nb * b, -1)[:n]


def _round_bf16(a: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return a.astype(ml_dtypes.bfloat16).astype(np.float32)


ACTIVATIONS = {"silu": lambda g: g / (1 + np.exp(-g)),
               "gelu_tanh": lambda g: g - g / (1 + np.exp(1.5957691216057308 * (g + 0.044715 * g ** 3)))}


def _reference(x: np.ndarray, *ops: np.ndarray, kind: str, n: int, block: int, group: int, out: str,
               act: str | None) -> np.ndarray:
    """numpy's product of the same operands (what runs where the kernel does not)."""
    per = 1 if kind == "bf16" else 2
    x = x.astype(np.float32)
    with np.errstate(over="ignore"):
        y = x @ _dequantized(ops[0], ops[1] if per == 2 else None, kind, n, group).T
        if act is not None:
            u = x @ _dequantized(ops[per], ops[per + 1] if per == 2 else None, kind, n, group).T
            y = ACTIVATIONS[act](_round_bf16(y)) * _round_bf16(u)
    return y


def _call(kind: str, x: Tensor, weights: list[Tensor], n: int, block: int, group: int, out: dt.DType,
          act: str | None = None) -> Tensor:
    if out not in (dt.float32, dt.bfloat16):
        raise ValueError(f"bfloat16 product: the result is float32 or bfloat16, not {out.name}")
    params = (("kind", kind), ("n", int(n)), ("block", int(block)), ("group", int(group)), ("out", out.name),
              ("act", act))
    op = HostOp(f"matmul_bf16_{kind}" + (f"_{act}" if act else ""), _reference, params, native=_native)
    (y,) = host_call(op, x.astype(dt.bfloat16), *weights, outputs=[((x.shape[0], n), out)])
    return y


def matmul(x: Tensor, w: Tensor, out: dt.DType = dt.float32) -> Tensor:
    """``x (M, K) @ w.T`` for ``w (N, K)``, both read as bfloat16; float32 sums, the result
    ``out`` (float32, or bfloat16 rounded once)."""
    return _call("bf16", x, [w.astype(dt.bfloat16)], w.shape[0], 1, 1, out)


def matmul_quantized(x: Tensor, qweight: Tensor, scales: Tensor, mode: str, group_size: int,
                     out: dt.DType = dt.float32) -> Tensor:
    """``x (M, K) @ dequantize(w).T`` from bfloat16 ``x`` and the blocked ``qweight`` and ``scales``
    of :mod:`corvid.quant` (``mode`` "int8" or "int4"), without a dequantized copy; float32 sums,
    the result ``out`` (float32, or bfloat16 rounded once)."""
    nb, _, b = qweight.shape
    # (a few rows of int4 in blocks of 64: the kernel that reads the bytes as stored, no packing)
    kind = "int4gemv" if mode == "int4" and b == 64 and x.shape[0] < MIN_ROWS else mode
    return _call(kind, x, [qweight, scales.astype(dt.float32)], nb * b, b, group_size, out)


_GATED_ACTS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh"}


def gated(x: Tensor, gate: Any, up: Any, activation: str) -> Tensor | None:
    """``act(gate(x)) * up(x)`` of two linear layers in one kernel (module docstring), bfloat16, or
    None where it does not apply: both plain ``Linear`` layers with bfloat16 weights or both
    ``QuantizedLinear`` of one mode and group size, no bias and no hooks, an activation of
    :data:`_GATED_ACTS` (Hugging Face's names), and what :func:`usable` asks. The products are
    rounded to bfloat16 before the activation, as the layers give them; the activation is
    computed in float32 and the result rounded once (the composite rounds each op of the
    activation, so a value may differ in its last bit)."""
    from .linear import Linear

    from ..amp import autocast_dtype

    act = _GATED_ACTS.get(activation)
    if act is None or x.dtype != dt.bfloat16 or x.ndim < 1 or type(gate) is not type(up) or autocast_dtype():
        return None
    if any(m.bias is not None or any(getattr(m, h) for h in _HOOKS) for m in (gate, up)):
        return None
    k, n = gate.in_features, gate.out_features
    if (up.in_features, up.out_features) != (k, n) or x.shape[-1] != k:
        return None
    lead = x.shape[:-1]
    rows = math.prod(lead) if lead else 1
    if type(gate) is Linear:
        if gate.weight.dtype != dt.bfloat16 or up.weight.dtype != dt.bfloat16 or not usable(x, rows, k, gate.weight,
                                                                                             up.weight):
            return None
        y = _call("bf16", x.reshape(rows, k), [gate.weight, up.weight], n, 1, 1, dt.bfloat16, act)
        return y.reshape(lead + (n,))
    if not hasattr(gate, "qweight") or (gate.mode, gate.group_size) != (up.mode, up.group_size) or \
            gate.group_size % 2 or gate.qweight.ndim != 3 or up.qweight.ndim != 3:
        return None
    if not usable(x, rows, k, gate.qweight, gate.scales, up.qweight, up.scales):
        return None
    b = gate.qweight.shape[2]
    weights = [gate.qweight, gate.scales.astype(dt.float32), up.qweight, up.scales.astype(dt.float32)]
    y = _call(gate.mode, x.reshape(rows, k), weights, n, b, gate.group_size, dt.bfloat16, act)
    return y.reshape(lead + (n,))


def float32_product(a: Tensor, b: Tensor) -> Tensor | None:
    """``a @ b`` of float32 operands as bfloat16 dot products with float32 sums and result: what
    ``cv.set_float32_matmul_precision("medium")`` allows on a CPU that has them (about twice as
    fast as float32 tiles, operands rounded to 8 significant bits). None where it does not apply: a
    batched ``b``, fewer than :data:`MIN_ROWS` rows, a ``b`` that is not a transposed view (a
    Linear layer's ``w.T``) with fewer than :data:`TRANSPOSED_COPY_ROWS` rows to pay for its
    transposed bfloat16 copy, or what :func:`usable` asks (no transform watching, the
    instructions available)."""
    from ..ops.reduce import _transposed_view

    if a.dtype != dt.float32 or b.dtype != dt.float32 or a.ndim < 2 or b.ndim != 2:
        return None
    k, m = b.shape
    lead = a.shape[:-1]
    rows = math.prod(lead)
    if not _transposed_view(b) and (is_symbolic(rows) or rows < TRANSPOSED_COPY_ROWS):
        return None
    x, w = a.astype(dt.bfloat16).reshape(rows, k), b.mT.astype(dt.bfloat16)  # (w: (m, k), stored once)
    if not usable(x, rows, k, w):
        return None
    return matmul(x, w, dt.float32).reshape(lead + (m,))


def usable(x: Tensor, rows: Any, k: int, *weights: Tensor, few: bool = False) -> bool:
    """Whether a product of ``x`` (``rows`` rows of ``k``, bfloat16) with weights made of
    ``weights`` takes the packed kernel (module docstring: when); with ``few``, whether it takes
    the few-row kernel (fewer than :data:`MIN_ROWS` rows: int4 weights)."""
    if x.dtype != dt.bfloat16 or x.device.partition(":")[0] != "CPU" or k % 2 or k == 0:
        return False
    if (rows < MIN_ROWS) != few:  # (a symbolic row count: a guard of the trace, a program for each side)
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


__all__ = ["available", "float32_product", "gated", "linear", "matmul", "matmul_quantized", "usable"]

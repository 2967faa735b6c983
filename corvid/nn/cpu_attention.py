"""Fused attention on the CPU: the scores are never stored whole.

``scaled_dot_product_attention`` on a CPU device (float32, bfloat16 or float16 operands; no
dropout) runs as three hand-written C kernels (:mod:`corvid.nn.cpu_attention_c`) instead of the
composite's score matrix: a flash-attention-style streaming softmax over blocks of 64 keys, each
block's scores in a tile of the thread. The forward kernel also writes each row's log-sum-exp,
from which the two backward kernels (``dq``; ``dk`` and ``dv``) recompute the probabilities, so
a gradient stores no score matrix either. Memory grows with the sequence, not its square: a
512-token prefill of a 32-head model no longer writes two 38 MB score tensors per layer.

* **Grouped-query attention** is native: keys and values keep their ``kv_heads`` (a divisor of
  the query heads) and each is read once for its group, never repeated per head.
* **Masks:** ``is_causal`` (top-left aligned, as torch), a boolean mask (True: the key takes
  part) or an additive float mask, broadcast over the batch, head and query axes without being
  expanded (the kernel reads it with stride 0). A query that sees no key gets zeros (output and
  gradients), as the composite does.
* **Sizes are read when the kernel runs**, so one build serves every shape, and a ``jit``
  program with symbolic sizes (a KV cache's length) replays it at every size.
* **Transforms:** reverse mode through a ``custom_vjp`` (the backward kernels); forward mode
  (``jvp``) through a ``custom_jvp`` whose tangent is the composite's; ``vmap`` through the host
  op's batching. float64 operands stay on the composite (its accuracy is float64's).

Each kernel is a host op (:mod:`corvid.engine.host`) with a *native* program: on a CPU device the
compiled C runs on the buffers; anywhere else (and as the tests' reference) the numpy function
here computes the same values.
"""

from __future__ import annotations

import ctypes
import functools
import math
from typing import Any

import numpy as np

from .. import dtype as dt
from ..engine.host import HostOp, host_call
from ..graph.symbolic import is_symbolic, size_function
from ..tensor import Tensor
from ..transforms.custom import custom_vjp
from ..transforms.forward import custom_jvp, jvp
from . import cpu_attention_c

MAX_HEAD = 1024  # head sizes up to this run fused (the tiles of a thread hold 64 rows of them)


# --- the numpy reference (what the op computes, on any device) ------------------------------------


def _reference(*arrays: np.ndarray, kind: str, causal: bool, scale: float, mask: str, dtype: str,
               softcap: float = 0.0) -> Any:
    q, k, v = (a.astype(np.float32) for a in arrays[:3])
    has_mask = mask != "none"
    m = arrays[3] if has_mask else None
    rest = arrays[4 if has_mask else 3:]
    group = q.shape[-3] // k.shape[-3]
    k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        s = np.matmul(q * np.float32(scale), np.swapaxes(k, -1, -2))
        t = None
        if softcap:
            t = np.tanh(s / np.float32(softcap))
            s = t * np.float32(softcap)
        if mask == "float":
            s = s + m
        elif mask == "bool":
            s = np.where(m.astype(bool), s, -np.inf)
        if causal:
            s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
        top = s.max(-1, keepdims=True)
        top = np.where(np.isneginf(top), 0, top)
        e = np.exp(s - top)
        total = e.sum(-1, keepdims=True)
        if kind == "fwd":
            out = np.matmul(e / np.where(total == 0, 1, total), v)
            tot = total[..., 0]
            lse = np.where(tot == 0, -np.inf, top[..., 0] + np.log(np.where(tot == 0, 1, tot)))
            return out.astype(np.float32), lse.astype(np.float32)
        do, lse, delta = rest
        p = np.where(np.isneginf(s) | np.isneginf(lse[..., None]), 0, np.exp(s - lse[..., None]))
        ds = p * (np.matmul(do, np.swapaxes(v, -1, -2)) - delta[..., None])
        if t is not None:
            ds = ds * (1 - t * t)
        if kind == "dq":
            return (np.matmul(ds, k) * np.float32(scale)).astype(np.float32)
        lead = q.shape[:-3]
        dk = np.matmul(np.swapaxes(ds, -1, -2), q * np.float32(scale))
        dv = np.matmul(np.swapaxes(p, -1, -2), do)
        hk = k.shape[-3] // group
        dk = dk.reshape(lead + (hk, group) + dk.shape[-2:]).sum(-3)
        dv = dv.reshape(lead + (hk, group) + dv.shape[-2:]).sum(-3)
        return dk.astype(np.float32), dv.astype(np.float32)


# --- the native program: the C kernel on the CPU's buffers ------------------------------------------


def _wide() -> bool:
    """Whether the kernels' block products take 16-float vectors: kernels are built for 64-byte
    vectors (AVX-512, where the compiler's tuning does not split them) with fused multiply-adds."""
    from ..codegen.opt import vector_bytes
    from ..render.c import has_fma

    return vector_bytes() >= 64 and has_fma()


@functools.cache
def _function(kind: str, dtype: str, mask: str, wide: bool) -> Any:
    from ..runtime.compiler import compile_kernel
    from ..render.c import has_fma

    name = f"cv_attention_{kind}_{dtype}_{mask}{'_wide' if wide else ''}"
    source = cpu_attention_c.source(name, kind, dtype, mask, has_fma(), wide=wide)
    lib = compile_kernel(source, name)
    fn = lib.function(name, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_float])
    fn.restype = ctypes.c_int  # (nonzero: its scratch memory could not be allocated)
    return fn


class _Program:
    """Runs one attention kernel on CPU buffers. Its sizes come from the inputs' shapes, which may
    be symbolic (``takes_sizes``: a jit program then passes each call's sizes)."""

    def __init__(self, device: str, params: dict, shapes: list[tuple]):
        from ..runtime.device import get_device

        self.kind, self.causal, self.scale = params["kind"], params["causal"], params["scale"]
        self.cap = ctypes.c_float(params["softcap"])
        self.mask, self.dtype = params["mask"], params["dtype"]
        self.allocator = get_device(device).allocator
        self.shapes = [tuple(size_function(s) for s in shape) for shape in shapes]
        self.takes_sizes = any(is_symbolic(s) for shape in shapes for s in shape)
        self.fn = _function(self.kind, self.dtype, self.mask, _wide())
        self._fixed = None if self.takes_sizes else self._arguments(None)

    def _arguments(self, sizes: list[int] | None) -> tuple[Any, Any, Any]:
        shapes = [tuple(s if type(s) is int else s(sizes) for s in shape) for shape in self.shapes]
        q, k, v = shapes[:3]
        lead = q[:-3]
        b = math.prod(lead)
        dims = [b, q[-3], k[-3], q[-2], k[-2], q[-1], v[-1], int(self.causal), 0, 0]
        moff = None
        if self.mask != "none":
            m = shapes[3]
            strides = [0] * len(m)
            step = 1
            for ax in range(len(m) - 1, -1, -1):
                strides[ax] = step if m[ax] != 1 else 0
                step *= m[ax]
            dims[8], dims[9] = strides[-3], strides[-2]
            index = np.indices(lead, dtype=np.int64).reshape(len(lead), -1) if lead else np.zeros((0, 1), np.int64)
            moff = np.ascontiguousarray((index * np.array(strides[:-3], np.int64)[:, None]).sum(0), np.int64)
            if moff.size == 0:
                moff = np.zeros(1, np.int64)
        return (ctypes.c_longlong * len(dims))(*dims), moff, ctypes.c_float(self.scale)

    def __call__(self, handles: list[Any], sizes: list[int] | None = None) -> None:
        dims, moff, scale = self._fixed if self._fixed is not None else self._arguments(sizes)
        addr = self.allocator.address
        ptrs = [addr(h) for h in handles]
        has_mask = self.mask != "none"
        out, ins = ptrs[0], ptrs[1:]
        args = [out, *ins[:3], ins[3] if has_mask else None, moff.ctypes.data if moff is not None else None,
                *ins[4 if has_mask else 3:]]
        if self.fn(ctypes.cast((ctypes.c_void_p * len(args))(*args), ctypes.c_void_p), ctypes.addressof(dims), scale,
                   self.cap):
            raise MemoryError(f"scaled_dot_product_attention ({self.kind}): the CPU kernel could not allocate its "
                              f"scratch memory (sizes {list(dims)})")


def _native(device: str, params: dict, in_specs: list[tuple[tuple, Any]]) -> Any:
    """The native program of the op on ``device``: the C kernel on a CPU device, else None (the
    numpy reference runs)."""
    if device.partition(":")[0] != "CPU":
        return None
    return _Program(device, params, [shape for shape, _ in in_specs])


def _op(kind: str, causal: bool, scale: float, mask: str, dtype: str, softcap: float) -> HostOp:
    params = (("kind", kind), ("causal", bool(causal)), ("scale", float(scale)), ("mask", mask), ("dtype", dtype),
              ("softcap", float(softcap)))
    return HostOp(f"attention_cpu_{kind}", _reference, params, batched=True, native=_native)


# --- the differentiable function ----------------------------------------------------------------------


def _forward(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, scale: float,
             softcap: float) -> tuple[Tensor, Tensor]:
    kind = "none" if mask is None else "bool" if mask.dtype.is_bool else "float"
    ins = [q, k, v] + ([mask] if mask is not None else [])
    lead_h_tq = q.shape[:-1]
    out, lse = host_call(_op("fwd", causal, scale, kind, q.dtype.name, softcap), *ins,
                         outputs=[(lead_h_tq + (v.shape[-1],), dt.float32), (lead_h_tq, dt.float32)])
    return out, lse


@custom_vjp
def _attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, scale: float,
               softcap: float) -> Tensor:
    return _forward(q, k, v, mask, causal, scale, softcap)[0]


def _attention_fwd(q, k, v, mask, causal, scale, softcap):
    out, lse = _forward(q, k, v, mask, causal, scale, softcap)
    return out, (q, k, v, mask, causal, scale, softcap, out, lse)


def _attention_bwd(res, g):
    q, k, v, mask, causal, scale, softcap, out, lse = res
    g = g.astype(dt.float32).contiguous()
    delta = (g * out).sum(-1)
    kind = "none" if mask is None else "bool" if mask.dtype.is_bool else "float"
    ins = [q, k, v] + ([mask] if mask is not None else []) + [g, lse, delta]
    (dq,) = host_call(_op("dq", causal, scale, kind, q.dtype.name, softcap), *ins, outputs=[(q.shape, dt.float32)])
    dk, dv = host_call(_op("dkdv", causal, scale, kind, q.dtype.name, softcap), *ins,
                       outputs=[(k.shape, dt.float32), (v.shape, dt.float32)])
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None, None, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def _composite(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, scale: float,
               softcap: float = 0.0) -> Tensor:
    """The same attention from ordinary ops (the forward-mode tangent's definition)."""
    from .attention import masked_softmax

    group = q.shape[-3] // k.shape[-3]
    if group > 1:
        from ..ops.manipulation import repeat

        k, v = repeat(k, group, axis=-3), repeat(v, group, axis=-3)
    scores = (q.astype(dt.float32) * scale) @ k.astype(dt.float32).mT
    if softcap:
        scores = (scores / softcap).tanh() * softcap
    keep = None
    if mask is not None and not mask.dtype.is_bool:
        scores = scores + mask
    elif mask is not None:
        keep = mask
    if causal:
        from ..creation import ones
        from ..ops.manipulation import tril

        tri = tril(ones(q.shape[-2], k.shape[-2], dtype=dt.bool_, device=q.device))
        keep = tri if keep is None else keep & tri
    return masked_softmax(scores, keep) @ v.astype(dt.float32)


@custom_jvp
def _fused(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, scale: float, softcap: float) -> Tensor:
    return _attention(q, k, v, mask, causal, scale, softcap)


@_fused.defjvp
def _fused_jvp(primals, tangents):
    q, k, v, mask, causal, scale, softcap = primals
    tq, tk, tv = tangents[:3]
    zero = [t if t is not None else x.zeros_like() for t, x in zip((tq, tk, tv), (q, k, v))]
    _, tangent = jvp(lambda a, b, c: _composite(a, b, c, mask, causal, scale, softcap), (q, k, v), tuple(zero))
    return _fused(q, k, v, mask, causal, scale, softcap), tangent


# --- the entry point ----------------------------------------------------------------------------------


def can_fuse(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float) -> bool:
    """Whether the fused CPU kernels serve this call: a CPU device, float32/bfloat16/float16
    operands with equal leading axes, as many or a divisor as many key/value heads as query heads
    (axis -3), heads of at most :data:`MAX_HEAD` channels, no dropout, nothing empty, and a mask
    (boolean or float) that broadcasts to the scores."""
    if dropout_p > 0.0 or q.device.partition(":")[0] != "CPU" or k.device != q.device or v.device != q.device:
        return False
    from .flash import route

    if route() == "composite":
        return False
    if not all(t.dtype.name in ("float32", "bfloat16", "float16") for t in (q, k, v)):
        return False
    if q.ndim < 2 or not (q.ndim == k.ndim == v.ndim):
        return False
    if q.ndim >= 3 and (q.shape[:-3] != k.shape[:-3] or k.shape[:-3] != v.shape[:-3] or k.shape[-3] != v.shape[-3]
                        or q.shape[-3] % k.shape[-3] != 0):
        return False
    if max(q.shape[-1], v.shape[-1]) > MAX_HEAD or any(s == 0 for s in q.shape + k.shape + v.shape):
        return False
    if mask is not None:
        if not (mask.dtype.is_bool or mask.dtype.name == "float32") or mask.ndim > q.ndim:
            return False
        full = q.shape[:-1] + (k.shape[-2],)
        shape = (1,) * (q.ndim - mask.ndim) + mask.shape
        if any(not (m == 1 or m == f) for m, f in zip(shape, full)):
            return False
    return True


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, scale: float,
              softcap: float | None = None) -> Tensor:
    """The fused ``scaled_dot_product_attention`` (see :func:`can_fuse`): ``q (..., H, Tq, E)``,
    ``k (..., Hk, Tk, E)``, ``v (..., Hk, Tk, Ev)`` with ``H`` a multiple of ``Hk``; ``mask`` a
    boolean (True: the key takes part) or additive float tensor broadcasting to ``(..., H, Tq,
    Tk)``, or None. ``softcap`` caps the scaled scores to ``softcap * tanh(score / softcap)``
    before the mask (Gemma 2). The result has the operands' promoted dtype."""
    dtype = dt.result_type(q.dtype, k.dtype, v.dtype)
    flat = q.ndim == 2
    if flat:  # (one head)
        q, k, v = q[None], k[None], v[None]
    same = q.dtype == k.dtype == v.dtype and q.dtype.name in ("float32", "bfloat16")
    work = q.dtype if same else dt.float32
    q, k, v = (t.astype(work).contiguous() for t in (q, k, v))
    if mask is not None:
        shape = (1,) * (q.ndim - mask.ndim) + mask.shape
        mask = mask.reshape(shape).expand(shape[:-1] + (k.shape[-2],)).contiguous()  # (the key axis whole)
    out = _fused(q, k, v, mask, bool(causal), float(scale), float(softcap or 0.0))
    if flat:
        out = out[0]
    return out.astype(dtype) if dtype != dt.float32 else out


__all__ = ["attention", "can_fuse"]

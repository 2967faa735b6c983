"""Fused attention on GPU-style devices: one kernel, the scores never stored.

``scaled_dot_product_attention`` on the CL and CUDA devices (float32 work; float16 and bfloat16
inputs are widened first, except bfloat16 ones on a GPU with tensor cores, which run
:mod:`corvid.render.cuda_attention`'s kernels) computes ``softmax(q @ k.T * scale + mask) @ v`` with a
flash-attention-style streaming softmax (:func:`corvid.render.gpu.render_attention`): each work
item owns a query row, the work-group loads tiles of keys and values into local memory, and the
row keeps a running maximum, sum and output, so memory grows with the sequence, not its square.
The backward pass is two more kernels of the same kind (one per query row for ``dq``, one per
key row for ``dk`` and ``dv``), recomputing the probabilities from the forward's log-sum-exp:
no atomics, deterministic. The values are the composite's (:mod:`corvid.nn.attention`) within
float32 rounding: a query whose keys are all masked out gets zeros and zero gradients.

Each kernel is a host op (:mod:`corvid.engine.host`) with a template: on a device whose renderer
has ``render_attention`` the template runs; anywhere else (and as the tests' reference) the
numpy function below computes the same thing on the host.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import dtype as dt
from ..engine.host import HostOp, host_call
from ..ops.elementwise import where
from ..tensor import Tensor
from ..transforms.custom import custom_vjp

MAX_HEAD = 256  # head sizes up to this run fused (a work item keeps a row of q and of the output in registers)


def _scores(q: np.ndarray, k: np.ndarray, mask: np.ndarray | None, causal: bool, scale: float) -> np.ndarray:
    s = np.matmul((q * np.float32(scale)).astype(np.float32), np.swapaxes(k, -1, -2))
    if mask is not None:
        s = s + mask
    if causal:
        tq, tk = s.shape[-2:]
        s = np.where(np.tril(np.ones((tq, tk), bool)), s, -np.inf)
    return s


def _host(*arrays: np.ndarray, kind: str, causal: bool, scale: float, has_mask: bool) -> Any:
    """The host version of the kernels (the whole score matrix at once); the tensor-core kernels
    of bfloat16 operands (``fwd_tc``, ``dq_tc``, ``dkdv_tc``) are the others on their float32 values."""
    q, k, v = (a.astype(np.float32) for a in arrays[:3])
    kind = kind.removesuffix("_tc")
    mask = arrays[3] if has_mask else None
    rest = arrays[4 if has_mask else 3:]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        s = _scores(q, k, mask, causal, scale)
        if kind == "fwd":
            m = s.max(-1, keepdims=True)
            m = np.where(np.isneginf(m), 0, m)
            e = np.exp(s - m)
            total = e.sum(-1, keepdims=True)
            out = np.matmul(e / np.where(total == 0, 1, total), v)
            lse = np.where(total[..., 0] == 0, -np.inf, m[..., 0] + np.log(np.where(total == 0, 1, total))[..., 0])
            return out.astype(np.float32), lse.astype(np.float32)
        do, lse, delta = (a.astype(np.float32) for a in rest)
        p = np.where(np.isneginf(s), 0, np.exp(s - lse[..., None]))
        ds = p * (np.matmul(do, np.swapaxes(v, -1, -2)) - delta[..., None])
        if kind == "dq":
            return (np.matmul(ds, k) * np.float32(scale)).astype(np.float32)
        dk = np.matmul(np.swapaxes(ds, -1, -2), q * np.float32(scale))
        dv = np.matmul(np.swapaxes(p, -1, -2), do)
        return dk.astype(np.float32), dv.astype(np.float32)


def _op(kind: str, causal: bool, scale: float, has_mask: bool) -> HostOp:
    return HostOp(f"attention_{kind}", _host, (("kind", kind), ("causal", bool(causal)), ("scale", float(scale)),
                                              ("has_mask", bool(has_mask))), batched=True, template="attention")


def _forward(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, scale: float, tc: str
             ) -> tuple[Tensor, Tensor]:
    """The forward kernel (``tc``: ``"_tc"`` for the tensor-core one): output and log-sum-exp, float32."""
    ins = [q, k, v] + ([mask] if mask is not None else [])
    lead, tq, dv = q.shape[:-2], q.shape[-2], v.shape[-1]
    out, lse = host_call(_op("fwd" + tc, causal, scale, mask is not None), *ins,
                         outputs=[(lead + (tq, dv), dt.float32), (lead + (tq,), dt.float32)])
    return out, lse


def _backward(res: tuple, g: Tensor, tc: str) -> tuple:
    """The two backward kernels: ``dq``, then ``dk`` and ``dv`` (float32 sums, rounded to the
    operands' dtype: by the tensor-core kernels as they write them, which halves what they write
    and what reads them), from the output's gradient in the operands' dtype and ``delta =
    rowsum(g * out)``."""
    q, k, v, mask, causal, scale, out, lse = res
    g = g.astype(q.dtype).contiguous()
    delta = (g.astype(dt.float32) * out).sum(-1)  # (of the gradient the kernels read)
    ins = [q, k, v] + ([mask] if mask is not None else []) + [g, lse, delta]
    written = q.dtype if tc else dt.float32  # (the tensor-core kernels' operands are all bfloat16)
    (dq,) = host_call(_op("dq" + tc, causal, scale, mask is not None), *ins, outputs=[(q.shape, written)])
    dk, dv = host_call(_op("dkdv" + tc, causal, scale, mask is not None), *ins,
                       outputs=[(k.shape, written), (v.shape, written)])
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None, None


def _differentiable(tc: str) -> Any:
    """Attention as a ``custom_vjp`` of the kernels: the float32 ones (``tc=""``, float32 operands)
    or the tensor-core ones (``"_tc"``, bfloat16 operands: :mod:`corvid.render.cuda_attention`)."""
    @custom_vjp
    def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, scale: float) -> Tensor:
        return _forward(q, k, v, mask, causal, scale, tc)[0]

    def fwd(q, k, v, mask, causal, scale):
        out, lse = _forward(q, k, v, mask, causal, scale, tc)
        return out, (q, k, v, mask, causal, scale, out, lse)

    attention.defvjp(fwd, lambda res, g: _backward(res, g, tc))
    return attention


_attention, _attention_tc = _differentiable(""), _differentiable("_tc")


def route() -> str:
    """``$CORVID_ATTENTION``: ``fused`` (the default: the fused kernels wherever they serve the
    call, on the CPU and on GPU-style devices; bfloat16 operands on a GPU with tensor cores take
    the tensor-core kernels), ``float32`` (the fused float32 kernels for every dtype) or
    ``composite`` (never: the score matrix from products, a softmax kernel, a product again; on
    a GPU whose products go to a library, that is the library's tensor cores)."""
    import os

    value = os.environ.get("CORVID_ATTENTION", "fused").strip().lower() or "fused"
    if value not in ("fused", "float32", "composite"):
        raise ValueError(f"CORVID_ATTENTION={value!r}: expected 'fused', 'float32' or 'composite'")
    return value


def tensor_cores(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether attention runs on tensor cores: bfloat16 operands on a device that has the kernels
    (``attention_tensor_cores``: CUDA, sm_80 and later), heads they take, the default route."""
    from ..render.cuda_attention import applies
    from ..runtime.device import get_device

    if not all(t.dtype is dt.bfloat16 for t in (q, k, v)) or route() != "fused":
        return False
    if not applies(q.shape[-1], v.shape[-1]):
        return False
    try:
        return bool(getattr(get_device(q.device), "attention_tensor_cores", False))
    except Exception:
        return False


def fused(device: str) -> bool:
    """Whether ``device``'s renderer runs the attention template (CL, CUDA)."""
    from ..runtime.device import get_device

    try:
        return hasattr(get_device(device).renderer, "render_attention")
    except Exception:  # (a device that does not start has no renderer to ask)
        return False


def can_fuse(q: Tensor, k: Tensor, v: Tensor, keep: Tensor | None, add: Tensor | None, dropout_p: float) -> bool:
    """Whether the fused kernels serve this call: a device that has them, float operands of equal
    leading shape, heads of at most :data:`MAX_HEAD`, no dropout and no float mask (its gradient
    is the composite's business)."""
    if dropout_p > 0.0 or add is not None or not fused(q.device) or route() == "composite":
        return False
    if not all(t.dtype.is_float and t.dtype.name != "float64" for t in (q, k, v)):
        return False
    if q.ndim < 3 or not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        return False
    if max(q.shape[-1], v.shape[-1]) > MAX_HEAD or 0 in q.shape + k.shape + v.shape:
        return False
    return keep is None or keep.ndim <= q.ndim


def attention(q: Tensor, k: Tensor, v: Tensor, keep: Tensor | None, causal: bool, scale: float) -> Tensor:
    """The fused ``scaled_dot_product_attention`` (see :func:`can_fuse`): ``keep`` a boolean mask
    (True: the key takes part) broadcastable to ``(..., Tq, Tk)``, or None."""
    dtype = q.dtype
    cores = tensor_cores(q, k, v)
    q, k, v = (t.contiguous() if cores else t.astype(dt.float32).contiguous() for t in (q, k, v))
    mask = None
    if keep is not None:
        shape = (1,) * (q.ndim - keep.ndim) + keep.shape
        tk = k.shape[-2]
        keep = keep.reshape(shape)
        full = shape[:-1] + (tk,)  # (the key axis whole; the others may stay 1: broadcast in the kernel)
        mask = where(keep.expand(full), 0.0, -math.inf).astype(dt.float32).contiguous()  # (0: kept, -inf: not)
    out = (_attention_tc if cores else _attention)(q, k, v, mask, bool(causal), float(scale))
    return out.astype(dtype) if dtype != dt.float32 else out


__all__ = ["attention", "can_fuse", "fused", "tensor_cores"]

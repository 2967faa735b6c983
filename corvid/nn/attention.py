"""Attention: ``F.scaled_dot_product_attention`` and :class:`MultiheadAttention`.

Both compute ``softmax(q @ k.T * scale + mask) @ v`` without dropout (and, for
:class:`MultiheadAttention`, with ``need_weights=False``) as fused kernels that never store the
scores, forward and backward: on the CPU through :mod:`corvid.nn.cpu_attention` (a boolean or
float mask, grouped-query heads read as they are), on the CL and CUDA devices as one
flash-attention-style kernel (:mod:`corvid.nn.flash`; no float mask). Elsewhere, and with
dropout or float64 operands, they are computed from ordinary tensor ops (a few fused kernels).
The softmax is *safe*: a query whose keys are all masked out gets weights 0 (output 0) instead
of NaN, as torch's ``scaled_dot_product_attention`` does.

Mask conventions differ between the two PyTorch APIs, and corvid keeps each one's: in
``scaled_dot_product_attention`` a boolean mask is True where a position **takes part**; in
:class:`MultiheadAttention` boolean ``attn_mask`` and ``key_padding_mask`` are True where a
position is **masked out**. Float masks are added to the scores in both.

>>> import corvid.nn.functional as F
>>> q = k = v = cv.ones(1, 2, 4, 8)          # (batch, heads, length, head_dim)
>>> F.scaled_dot_product_attention(q, k, v, is_causal=True).shape
(1, 2, 4, 8)
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import ShapeError
from ..creation import empty, ones, zeros
from ..dtype import bool_
from ..ops.elementwise import where
from ..ops.manipulation import repeat, tril
from ..ops.movement import cat
from ..tensor import Tensor
from . import cpu_attention, flash, init
from .dropout import dropout
from .linear import Linear, linear
from .module import Module, shape_error
from .parameter import Parameter

__all__ = ["MultiheadAttention", "scaled_dot_product_attention"]


def masked_softmax(scores: Tensor, keep: Tensor | None) -> Tensor:
    """Softmax over the last axis of ``scores`` restricted to where ``keep`` (bool, broadcast) is
    True; rows with nothing kept (or only ``-inf`` scores) give zeros instead of NaN."""
    if keep is not None:
        scores = where(keep, scores, -math.inf)
    top = scores.max(-1, keepdims=True).detach()  # softmax is shift invariant: no gradient through the max
    top = where(top == -math.inf, 0.0, top)
    e = (scores - top).exp()
    total = e.sum(-1, keepdims=True)
    return e / where(total == 0, 1.0, total)


def _merge_mask(keep: Tensor | None, add: Tensor | None, mask: Tensor, take_part: bool) -> tuple[Tensor | None,
                                                                                               Tensor | None]:
    """Fold ``mask`` into a boolean keep-mask and an additive float mask."""
    if mask.dtype.is_bool:
        k = mask if take_part else mask.logical_not()
        return (k if keep is None else keep & k), add
    return keep, (mask if add is None else add + mask)


def _causal(n_q: int, n_k: int, device: str) -> Tensor:
    return tril(ones(n_q, n_k, dtype=bool_, device=device))


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """``softmax(query @ key.T * scale + mask) @ value`` over the last two axes, as torch.

    Shapes: ``query (..., L, E)``, ``key (..., S, E)``, ``value (..., S, Ev)`` → ``(..., L, Ev)``;
    leading axes broadcast. ``scale`` defaults to ``1/sqrt(E)``. ``attn_mask`` broadcasts to
    ``(..., L, S)``: boolean True means the key takes part, a float mask is added to the scores.
    ``is_causal`` lets query ``i`` see keys ``0..i`` (the top-left aligned lower triangle) and
    excludes ``attn_mask``. A query that sees no key gets zeros. ``dropout_p`` drops attention
    weights (always, as the functional torch API: pass 0 in evaluation). ``enable_gqa`` lets
    ``key``/``value`` have fewer heads (axis -3) than ``query``, a divisor, each shared by a group
    of query heads. ValueError for mismatched shapes or both masks.

    >>> q = cv.Tensor([[[1.0, 0.0]]])
    >>> k = cv.Tensor([[[1.0, 0.0], [0.0, 1.0]]])
    >>> v = cv.Tensor([[[1.0], [3.0]]])
    >>> keep = cv.Tensor([[True, False]])
    >>> scaled_dot_product_attention(q, k, v, attn_mask=keep).tolist()
    [[[1.0]]]
    """
    q, k, v = (t if isinstance(t, Tensor) else Tensor(t) for t in (query, key, value))
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"scaled_dot_product_attention: expected query (..., L, E), key (..., S, E) and value "
                         f"(..., S, Ev), got {q.shape}, {k.shape} and {v.shape}")
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: pass either attn_mask or is_causal=True, not both")
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    mask = None if attn_mask is None else attn_mask if isinstance(attn_mask, Tensor) else Tensor(attn_mask)
    gqa_ok = enable_gqa or k.ndim < 3 or k.shape[-3] in (1, q.shape[-3])  # (heads of 1 broadcast as well)
    if gqa_ok and cpu_attention.can_fuse(q, k, v, mask, dropout_p):  # (the CPU: no score matrix)
        return cpu_attention.attention(q, k, v, mask, is_causal, s)
    if enable_gqa and k.ndim >= 3 and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        hq, hk = q.shape[-3], k.shape[-3]
        if hq % hk:
            raise ValueError(f"scaled_dot_product_attention: {hk} key/value heads must divide {hq} query heads")
        k, v = repeat(k, hq // hk, axis=-3), repeat(v, hq // hk, axis=-3)
    given = (mask, None) if mask is not None and mask.dtype.is_bool else (None, mask)
    if flash.can_fuse(q, k, v, *given, dropout_p):  # (a GPU-style device: one kernel, no score matrix)
        return flash.attention(q, k, v, given[0], is_causal, s)
    scores = (q * s) @ k.mT
    keep, add = (_causal(q.shape[-2], k.shape[-2], q.device), None) if is_causal else (None, None)
    if mask is not None:
        keep, add = _merge_mask(keep, add, mask, True)
    if add is not None:
        scores = scores + add
    weights = masked_softmax(scores, keep)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return weights @ v


class MultiheadAttention(Module):
    """Multi-head attention with PyTorch's parameters, names, defaults and call signature.

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False)`` returns ``(output, weights)``. Inputs are
    ``(L, N, E)`` (``(N, L, E)`` with ``batch_first=True``, ``(L, E)`` unbatched); key and value
    have length ``S`` and sizes ``kdim``/``vdim`` (default ``embed_dim``). ``weights`` are the
    attention weights ``(N, L, S)`` averaged over heads (``(N, heads, L, S)`` with
    ``average_attn_weights=False``), None unless ``need_weights``.

    Masks (torch's MultiheadAttention convention): boolean True means *masked out*, float masks
    are added. ``key_padding_mask`` is ``(N, S)``; ``attn_mask`` is ``(L, S)`` or
    ``(N * num_heads, L, S)``; ``is_causal=True`` without ``attn_mask`` applies the causal mask.
    A query with every key masked gets output ``out_proj.bias`` and weights 0 (torch gives NaN
    when ``need_weights``). Parameters: ``in_proj_weight (3E, E)`` and ``in_proj_bias (3E,)``
    (or ``q_proj_weight``/``k_proj_weight``/``v_proj_weight`` when ``kdim``/``vdim`` differ),
    ``out_proj`` (a Linear), and ``bias_k``/``bias_v`` with ``add_bias_kv``. Dropout applies to
    the attention weights in training mode.

    >>> mha = MultiheadAttention(8, 2, batch_first=True)
    >>> x = cv.randn(3, 5, 8)
    >>> out, w = mha(x, x, x)
    >>> out.shape, w.shape
    ((3, 5, 8), (3, 5, 5))
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: str | None = None, dtype: Any = None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.head_dim = embed_dim // num_heads
        self.add_zero_attn = add_zero_attn
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        f = {"dtype": dtype, "device": device}
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, **f))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, **f))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, **f))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, **f))
        if bias:
            self.in_proj_bias = Parameter(zeros(3 * embed_dim, **f))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, **f)
        if add_bias_kv:
            self.bias_k = Parameter(empty(1, 1, embed_dim, **f))
            self.bias_v = Parameter(empty(1, 1, embed_dim, **f))
        else:
            self.register_parameter("bias_k", None)
            self.register_parameter("bias_v", None)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """PyTorch's initialization: xavier-uniform projections, zero biases, xavier-normal bias_k/v."""
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        e, b = self.embed_dim, self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            if query is key and key is value:  # self-attention: one matmul for all three
                return tuple(linear(query, w, b).split(e, axis=-1))  # type: ignore[return-value]
            return linear(query, w[:e], bq), linear(key, w[e:2 * e], bk), linear(value, w[2 * e:], bv)
        return (linear(query, self.q_proj_weight, bq), linear(key, self.k_proj_weight, bk),
                linear(value, self.v_proj_weight, bv))

    def _inputs(self, query: Any, key: Any, value: Any) -> tuple[Tensor, Tensor, Tensor, bool]:
        """``(N, L, E)`` views of the inputs (the same object where the inputs were the same), and
        whether they came unbatched."""
        q = query if isinstance(query, Tensor) else Tensor(query)
        k = q if key is query else key if isinstance(key, Tensor) else Tensor(key)
        v = k if value is key else value if isinstance(value, Tensor) else Tensor(value)
        seq = "(N, L, E)" if self.batch_first else "(L, N, E)"
        if q.ndim not in (2, 3) or q.shape[-1] != self.embed_dim:
            raise shape_error(self, f"{seq} or (L, E) with E = {self.embed_dim}", q)
        if k.ndim != q.ndim or v.ndim != q.ndim or k.shape[-1] != self.kdim or v.shape[-1] != self.vdim \
                or k.shape[:-1] != v.shape[:-1]:
            raise ShapeError(f"MultiheadAttention: key {k.shape} and value {v.shape} must match the query's layout "
                             f"{q.shape}, with sizes kdim={self.kdim} and vdim={self.vdim} and one length")
        unbatched = q.ndim == 2

        def layout(t: Tensor) -> Tensor:
            return t.unsqueeze(0) if unbatched else t if self.batch_first else t.transpose(0, 1)

        q2 = layout(q)
        k2 = q2 if k is q else layout(k)
        v2 = k2 if v is k else layout(v)
        if k2.shape[0] != q2.shape[0]:
            raise ShapeError(f"MultiheadAttention: query and key have different batch sizes ({q.shape} and {k.shape})")
        return q2, k2, v2, unbatched

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        q, k, v, unbatched = self._inputs(query, key, value)
        n, length, heads, d = q.shape[0], q.shape[1], self.num_heads, self.head_dim
        q, k, v = self._project(q, k, v)
        keep, add = None, None
        if attn_mask is not None:
            m = attn_mask if isinstance(attn_mask, Tensor) else Tensor(attn_mask)
            if m.ndim == 3:
                m = m.reshape(n, heads, m.shape[1], m.shape[2])
            keep, add = _merge_mask(keep, add, m, take_part=False)
        elif is_causal:
            keep = _causal(length, k.shape[1], q.device)
        if key_padding_mask is not None:
            m = key_padding_mask if isinstance(key_padding_mask, Tensor) else Tensor(key_padding_mask)
            if unbatched and m.ndim == 1:
                m = m.unsqueeze(0)
            keep, add = _merge_mask(keep, add, m.reshape(n, 1, 1, m.shape[-1]), take_part=False)
        if self.bias_k is not None:
            k = cat([k, self.bias_k.reshape(1, 1, -1).expand(n, 1, self.embed_dim)], axis=1)
            v = cat([v, self.bias_v.reshape(1, 1, -1).expand(n, 1, self.embed_dim)], axis=1)
            keep, add = _extend_masks(keep, add)
        q = q.reshape(n, length, heads, d).transpose(1, 2)
        k = k.reshape(n, k.shape[1], heads, d).transpose(1, 2)
        v = v.reshape(n, v.shape[1], heads, d).transpose(1, 2)
        if self.add_zero_attn:
            k = cat([k, zeros(n, heads, 1, d, dtype=k.dtype, device=k.device)], axis=2)
            v = cat([v, zeros(n, heads, 1, d, dtype=v.dtype, device=v.device)], axis=2)
            keep, add = _extend_masks(keep, add)
        drop = self.dropout if self.training and self.dropout > 0.0 else 0.0
        fused = None
        if not need_weights:
            mask = keep if add is None else add if keep is None else where(keep, add, -math.inf)
            if cpu_attention.can_fuse(q, k, v, mask, drop):
                fused = cpu_attention.attention(q, k, v, mask, False, 1.0 / math.sqrt(d))
            elif flash.can_fuse(q, k, v, keep, add, drop):
                fused = flash.attention(q, k, v, keep, False, 1.0 / math.sqrt(d))
        if fused is not None:
            out = self.out_proj(fused.transpose(1, 2).reshape(n, length, self.embed_dim))
            return (out.squeeze(0) if unbatched else out if self.batch_first else out.transpose(0, 1)), None
        scores = (q * (1.0 / math.sqrt(d))) @ k.mT
        if add is not None:
            scores = scores + add
        weights = masked_softmax(scores, keep)
        if self.training and self.dropout > 0.0:
            weights = dropout(weights, self.dropout)
        out = (weights @ v).transpose(1, 2).reshape(n, length, self.embed_dim)
        out = self.out_proj(out)
        if unbatched:
            out = out.squeeze(0)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        w = weights.mean(1) if average_attn_weights else weights
        return out, (w.squeeze(0) if unbatched else w)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"


def _extend_masks(keep: Tensor | None, add: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
    """The masks with one more key position (appended by add_bias_kv / add_zero_attn), which every query sees."""
    if keep is not None:
        keep = keep.pad([(0, 0)] * (keep.ndim - 1) + [(0, 1)], True)
    if add is not None:
        add = add.pad([(0, 0)] * (add.ndim - 1) + [(0, 1)], 0.0)
    return keep, add

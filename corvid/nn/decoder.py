"""Building blocks of decoder-only language models (Llama, Mistral, Qwen2, Phi-3, Gemma):
:class:`CausalSelfAttention`, :class:`GatedMLP` and :class:`GemmaRMSNorm`.

Their parameters carry Hugging Face's names (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, or
Phi-3's fused ``qkv_proj``; ``gate_proj``, ``up_proj``, ``down_proj``, or the fused
``gate_up_proj``), so a ``transformers`` checkpoint's tensors load into them as they are (see
:mod:`corvid.models`). Positions enter through rotary embeddings (:class:`~corvid.nn.RotaryEmbedding`),
computed once per forward and passed to every layer's attention.

>>> from corvid import nn
>>> attn = nn.CausalSelfAttention(32, num_heads=4, num_kv_heads=2)
>>> rope = nn.RotaryEmbedding(attn.head_dim)
>>> x = cv.randn(1, 6, 32)
>>> y = attn(x, rope.cos_sin(6))
>>> mlp = nn.GatedMLP(32, 64)
>>> (x + y + mlp(x + y)).shape
(1, 6, 32)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..creation import arange, zeros
from ..dtype import float32
from ..ops.manipulation import repeat
from ..tensor import Tensor
from .activation import gelu, relu, silu
from . import cpu_attention, cpu_matmul
from .attention import masked_softmax, scaled_dot_product_attention
from .linear import Linear
from .module import Module, shape_error
from .norm import RMSNorm, rms_norm
from .parameter import Parameter
from .rotary import apply_rotary_emb

__all__ = ["CausalSelfAttention", "GatedMLP", "GemmaRMSNorm"]

# Hugging Face's names (``hidden_act``) for the activations a gated MLP uses
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": silu,
    "swish": silu,
    "gelu": gelu,
    "gelu_pytorch_tanh": lambda x: gelu(x, approximate="tanh"),
    "gelu_new": lambda x: gelu(x, approximate="tanh"),
    "relu": relu,
}


def activation_function(name: str) -> Callable[[Tensor], Tensor]:
    """The activation Hugging Face calls ``name``; ValueError naming the supported ones."""
    try:
        return ACTIVATIONS[name]
    except (KeyError, TypeError):
        raise ValueError(f"activation {name!r} is not supported (supported: {', '.join(ACTIVATIONS)})") from None


def softcap(x: Tensor, cap: float) -> Tensor:
    """``cap * tanh(x / cap)``: ``x`` squashed smoothly into ``(-cap, cap)`` (Gemma 2)."""
    return (x / cap).tanh() * cap


def causal_mask(n_q: int, n_k: int, window: int | None = None, device: str | None = None) -> Tensor:
    """Boolean ``(n_q, n_k)``, True where a query sees a key: the queries are the last ``n_q`` of
    the ``n_k`` positions (bottom-right aligned), each sees itself and the keys before it, and with
    ``window`` only the ``window`` latest of those (``query - key < window``)."""
    q = arange(n_k - n_q, n_k, device=device).reshape(n_q, 1)
    k = arange(n_k, device=device).reshape(1, n_k)
    keep = k <= q
    return keep if window is None else keep & (q - k < window)


class GatedMLP(Module):
    """A gated feed-forward block, ``down_proj(act(gate_proj(x)) * up_proj(x))``: SwiGLU or GeGLU.

    SwiGLU with ``activation="silu"`` (Llama, Mistral, Qwen2, Phi-3), GeGLU with
    ``"gelu_pytorch_tanh"`` (Gemma). ``activation`` takes Hugging Face's ``hidden_act`` names: ``silu`` (``swish``),
    ``gelu`` (exact), ``gelu_pytorch_tanh`` (``gelu_new``, the tanh approximation), ``relu``;
    ValueError for another.

    ``fused=True`` holds the gate and up projections as one ``gate_up_proj`` of
    ``2 * intermediate_size`` outputs, gate first (Phi-3's checkpoints): one matrix product
    instead of two, same values. ``bias`` gives every projection a bias. Input ``(*,
    hidden_size)``, output the same shape.

    >>> mlp = GatedMLP(8, 16)
    >>> [name for name, _ in mlp.named_parameters()]
    ['gate_proj.weight', 'up_proj.weight', 'down_proj.weight']
    >>> GatedMLP(8, 16, "gelu_pytorch_tanh", fused=True)(cv.ones(2, 8)).shape
    (2, 8)
    """

    def __init__(self, hidden_size: int, intermediate_size: int, activation: str = "silu", bias: bool = False,
                 fused: bool = False, device: str | None = None, dtype: Any = None):
        super().__init__()
        self.act = activation_function(activation)
        self.hidden_size, self.intermediate_size, self.activation, self.fused = (hidden_size, intermediate_size,
                                                                                activation, fused)
        f = {"bias": bias, "device": device, "dtype": dtype}
        if fused:
            self.gate_up_proj = Linear(hidden_size, 2 * intermediate_size, **f)
        else:
            self.gate_proj = Linear(hidden_size, intermediate_size, **f)
            self.up_proj = Linear(hidden_size, intermediate_size, **f)
        self.down_proj = Linear(intermediate_size, hidden_size, **f)

    def forward(self, x: Tensor) -> Tensor:
        if self.fused:
            h = self.gate_up_proj(x)
            n = self.intermediate_size
            gate, up = h[..., :n], h[..., n:]
        else:
            both = cpu_matmul.gated(x, self.gate_proj, self.up_proj, self.activation)  # (one kernel on such CPUs)
            if both is not None:
                return self.down_proj(both)
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(self.act(gate) * up)

    def extra_repr(self) -> str:
        return (f"{self.hidden_size}, {self.intermediate_size}, activation={self.activation!r}"
                + (", fused=True" if self.fused else ""))



class CausalSelfAttention(Module):
    """Causal self-attention with rotary positions, grouped-query heads, an optional sliding
    window and soft-capping: the attention of Llama, Mistral, Qwen2, Phi-3, Gemma and Gemma 2.

    ``num_heads`` query heads of ``head_dim`` channels (default ``hidden_size // num_heads``)
    share ``num_kv_heads`` key/value heads (default ``num_heads``; a divisor of it: grouped-query
    attention, multi-query with 1), each used by ``num_heads // num_kv_heads`` consecutive query
    heads. Parameters: ``q_proj``, ``k_proj``, ``v_proj`` (or ``qkv_proj``, the three stacked in
    that order, with ``fused_qkv=True``, as Phi-3 stores them) with biases when ``qkv_bias``
    (Qwen2), and ``o_proj`` with one when ``out_bias``.

    ``forward(x, rotary=None, cache=None)``: ``x`` is ``(batch, T, hidden_size)``; ``rotary`` is the
    ``(cos, sin)`` pair of :meth:`RotaryEmbedding.cos_sin` for the ``T`` positions, applied to
    queries and keys (None: no rotary embedding). Query ``i`` attends to keys ``0..i``, and with
    ``sliding_window=w`` to the ``w`` latest of them only (``i - j < w``: Mistral, Gemma 2's
    local layers). With a key/value ``cache`` (one layer's of :class:`corvid.models.KVCache`),
    the queries attend instead to what ``cache.update(keys, values, sliding_window)`` returns:
    the cached keys and values with the new ones stored, and the boolean mask of those each
    query sees. Scores are ``q · k * scale`` (default ``head_dim ** -0.5``), soft-capped to
    ``softcap * tanh(score / softcap)`` when ``softcap`` is set (Gemma 2), then softmax-ed. On
    the CPU the fused kernels of :mod:`corvid.nn.cpu_attention` do it all, soft-capping included;
    elsewhere, without soft-capping, the work goes to ``F.scaled_dot_product_attention`` (one
    fused kernel on a GPU). ShapeError for an input of another shape; ValueError for head counts that do not
    divide.

    >>> attn = CausalSelfAttention(16, num_heads=4, num_kv_heads=1, sliding_window=2, softcap=50.0)
    >>> [name for name, p in attn.named_parameters()], attn.k_proj.weight.shape
    (['q_proj.weight', 'k_proj.weight', 'v_proj.weight', 'o_proj.weight'], (4, 16))
    >>> attn(cv.randn(2, 5, 16)).shape
    (2, 5, 16)
    """

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int | None = None, head_dim: int | None = None,
                 qkv_bias: bool = False, out_bias: bool = False, sliding_window: int | None = None,
                 softcap: float | None = None, scale: float | None = None, fused_qkv: bool = False,
                 device: str | None = None, dtype: Any = None):
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads <= 0 or num_kv_heads <= 0 or num_heads % num_kv_heads:
            raise ValueError(f"CausalSelfAttention: num_kv_heads={num_kv_heads} must divide num_heads={num_heads}")
        if head_dim is None:
            if hidden_size % num_heads:
                raise ValueError(f"CausalSelfAttention: hidden_size={hidden_size} is no multiple of "
                                 f"num_heads={num_heads}; give head_dim")
            head_dim = hidden_size // num_heads
        if sliding_window is not None and sliding_window < 1:
            raise ValueError(f"CausalSelfAttention: sliding_window must be at least 1, got {sliding_window}")
        self.hidden_size, self.num_heads, self.num_kv_heads = hidden_size, num_heads, num_kv_heads
        self.head_dim = head_dim
        self.sliding_window, self.softcap, self.fused_qkv = sliding_window, softcap, fused_qkv
        self.scale = head_dim ** -0.5 if scale is None else float(scale)
        f = {"device": device, "dtype": dtype}
        q_out, kv_out = num_heads * head_dim, num_kv_heads * head_dim
        if fused_qkv:
            self.qkv_proj = Linear(hidden_size, q_out + 2 * kv_out, bias=qkv_bias, **f)
        else:
            self.q_proj = Linear(hidden_size, q_out, bias=qkv_bias, **f)
            self.k_proj = Linear(hidden_size, kv_out, bias=qkv_bias, **f)
            self.v_proj = Linear(hidden_size, kv_out, bias=qkv_bias, **f)
        self.o_proj = Linear(q_out, hidden_size, bias=out_bias, **f)

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries ``(B, heads, T, head_dim)``, keys and values ``(B, kv_heads, T, head_dim)``."""
        b, t = x.shape[0], x.shape[1]
        q_out, kv_out = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        if self.fused_qkv:
            qkv = self.qkv_proj(x)
            q, k, v = qkv[..., :q_out], qkv[..., q_out:q_out + kv_out], qkv[..., q_out + kv_out:]
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return (q.reshape(b, t, self.num_heads, self.head_dim).transpose(1, 2),
                k.reshape(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2),
                v.reshape(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
        """The attention of queries ``(B, heads, Tq, head_dim)`` on keys and values ``(B,
        kv_heads, Tk, head_dim)`` with this layer's mask, scale and soft-capping: ``(B, heads, Tq,
        head_dim)``. The queries are the last ``Tq`` of the ``Tk`` positions.

        ``mask``, a boolean tensor broadcasting to ``(B, heads, Tq, Tk)`` (True where a query sees
        a key), replaces the causal and sliding-window mask: a cache whose slots are not in
        position order, or partly empty, says itself which keys each query sees.

        >>> attn = CausalSelfAttention(8, num_heads=2)
        >>> q = k = v = cv.ones(1, 2, 3, 4)
        >>> attn.attend(q, k, v).shape
        (1, 2, 3, 4)
        >>> attn.attend(q[:, :, -1:], k, v, mask=cv.Tensor([True, True, False])).shape
        (1, 2, 1, 4)
        """
        n_q, n_k = q.shape[-2], k.shape[-2]
        window = self.sliding_window if self.sliding_window is not None and self.sliding_window < n_k else None
        if self.softcap is not None or mask is not None:
            # the CPU's fused kernels: grouped keys and values read once per group, soft-capping
            # inside (the scores are never stored)
            causal = mask is None and window is None and n_q == n_k
            keep = mask if mask is not None or causal else causal_mask(n_q, n_k, window, q.device)
            if cpu_attention.can_fuse(q, k, v, keep, 0.0):
                return cpu_attention.attention(q, k, v, keep, causal, self.scale, self.softcap)
        if mask is not None and self.num_kv_heads != self.num_heads and q.ndim == 4:
            # grouped-query attention on a cache: the queries of each key/value head as one block
            # of rows, so that the cached keys and values are read as they are, not repeated per head
            b, g = q.shape[0], self.num_heads // self.num_kv_heads
            qg = q.reshape(b, self.num_kv_heads, g * n_q, q.shape[-1])
            keep = mask.broadcast_to((b, self.num_heads, n_q, n_k)).reshape(b, self.num_kv_heads, g * n_q, n_k)
            if self.softcap is None:
                out = scaled_dot_product_attention(qg, k, v, attn_mask=keep, scale=self.scale)
            else:
                out = masked_softmax(softcap((qg @ k.mT) * self.scale, self.softcap), keep) @ v
            return out.reshape(b, self.num_heads, n_q, v.shape[-1])
        if self.softcap is None:
            if mask is None and window is None and n_q == n_k:
                return scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale, enable_gqa=True)
            keep = causal_mask(n_q, n_k, window, q.device) if mask is None else mask
            return scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=self.scale, enable_gqa=True)
        if self.num_kv_heads != self.num_heads:
            group = self.num_heads // self.num_kv_heads
            k, v = repeat(k, group, axis=-3), repeat(v, group, axis=-3)
        scores = softcap((q @ k.mT) * self.scale, self.softcap)
        return masked_softmax(scores, causal_mask(n_q, n_k, window, q.device) if mask is None else mask) @ v

    def forward(self, x: Tensor, rotary: tuple[Tensor, Tensor] | None = None, cache: Any = None) -> Tensor:
        x = x if isinstance(x, Tensor) else Tensor(x)
        if x.ndim != 3 or x.shape[-1] != self.hidden_size:
            raise shape_error(self, f"(N, T, {self.hidden_size})", x)
        q, k, v = self._project(x)
        if rotary is not None:
            cos, sin = rotary
            q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        if cache is None:
            out = self.attend(q, k, v)
        else:  # the cache stores the new keys and values and says which of its slots each query sees
            k, v, mask = cache.update(k, v, self.sliding_window)
            out = self.attend(q, k, v, mask)
        b, t = x.shape[0], x.shape[1]
        width = self.num_heads * self.head_dim
        if t == 1:
            # one token: the heads are in order already, and stored as one row. Read through
            # the view, the grouped heads' index stayed (r//256)*256 + (r//64)%4*64 + r%64 in
            # the projection's inner loop, which did not vectorize: a decode step's o_proj read
            # its weight at 2 GB/s (the simplifier folds a split in two, not in three)
            return self.o_proj(out.reshape(b, t, width).contiguous())
        return self.o_proj(out.transpose(1, 2).reshape(b, t, width))

    def extra_repr(self) -> str:
        s = (f"{self.hidden_size}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
             f"head_dim={self.head_dim}")
        if self.sliding_window is not None:
            s += f", sliding_window={self.sliding_window}"
        if self.softcap is not None:
            s += f", softcap={self.softcap}"
        return s


class GemmaRMSNorm(RMSNorm):
    """Gemma's RMS normalization, which scales by ``1 + weight``.

    ``x / sqrt(mean(x²) + eps) * (1 + weight)`` over the trailing ``normalized_shape``, with ``weight`` initialized to 0 (the scale is centred on 1), as the
    ``weight`` of a Gemma checkpoint means it. Computed in float32 and rounded once to the
    input's dtype (a bfloat16 model's norms round the product, not its factors, as Gemma's
    reference does). ``eps`` defaults to 1e-6.

    >>> norm = GemmaRMSNorm(2)
    >>> norm.weight.tolist(), [round(v, 4) for v in norm(cv.Tensor([[3.0, 4.0]]))[0].tolist()]
    ([0.0, 0.0], [0.8485, 1.1314])
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-6, device: str | None = None,
                 dtype: Any = None):
        super().__init__(normalized_shape, eps, True, device, dtype)
        self.weight = Parameter(zeros(self.normalized_shape, dtype=dtype, device=device))

    def forward(self, x: Tensor) -> Tensor:
        x = x if isinstance(x, Tensor) else Tensor(x)
        n = len(self.normalized_shape)
        if x.ndim < n or x.shape[x.ndim - n:] != self.normalized_shape:
            raise shape_error(self, f"(*, {', '.join(map(str, self.normalized_shape))})", x)
        y = rms_norm(x.astype(float32), self.normalized_shape, None, self.eps)
        return (y * (self.weight.astype(float32) + 1.0)).astype(x.dtype)


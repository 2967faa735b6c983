"""One decoder-only transformer for the Llama family and its relatives: :class:`CausalLM`.

Llama (2, 3, 3.1), Mistral, Qwen2, Phi-3, Gemma and Gemma 2 are the same network with different
options (:class:`~corvid.models.CausalLMConfig`). Modules and parameters carry the names of the
``transformers`` implementations, so a checkpoint's tensors map onto :meth:`CausalLM.state_dict`
one to one::

    model.embed_tokens.weight                                   (vocab_size, hidden_size)
    model.layers.{i}.input_layernorm.weight                     norms (hidden_size,)
    model.layers.{i}.self_attn.{q,k,v,o}_proj.{weight,bias}     or Phi-3's self_attn.qkv_proj
    model.layers.{i}.post_attention_layernorm.weight
    model.layers.{i}.pre_feedforward_layernorm.weight           Gemma 2 only, with
    model.layers.{i}.post_feedforward_layernorm.weight          (sandwich norms)
    model.layers.{i}.mlp.{gate,up,down}_proj.weight             or Phi-3's mlp.gate_up_proj
    model.norm.weight
    lm_head.weight                                              absent with tied embeddings

Norms compute in float32, as the reference: Llama-style norms round the normalized value to the
model's dtype before scaling by ``weight``; Gemma's scale by ``1 + weight`` in float32 and round
once. The model computes in the dtype of its parameters (bfloat16 stays bfloat16).

>>> from corvid.models import CausalLM
>>> model = CausalLM({"model_type": "llama", "vocab_size": 50, "hidden_size": 16, "intermediate_size": 32,
...                   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2})
>>> model(cv.Tensor([[1, 2, 3]])).shape
(1, 3, 50)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import nn
from ..dtype import float32
from ..errors import ShapeError
from ..nn import functional as F
from ..nn.decoder import softcap
from ..tensor import Tensor
from .config import CausalLMConfig

__all__ = ["CausalLM", "Decoder", "DecoderLayer"]


class LlamaRMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` as Llama's reference computes it: normalized in float32, rounded to the
    input's dtype, then scaled by ``weight``."""

    def forward(self, x: Tensor) -> Tensor:
        y = F.rms_norm(x.astype(float32), self.normalized_shape, None, self.eps).astype(x.dtype)
        return y * self.weight


def _norm(config: CausalLMConfig, device: str | None, dtype: Any) -> nn.Module:
    if config.gemma_norm:
        return nn.GemmaRMSNorm(config.hidden_size, config.rms_norm_eps, device=device, dtype=dtype)
    return LlamaRMSNorm(config.hidden_size, config.rms_norm_eps, device=device, dtype=dtype)


def _as_config(config: CausalLMConfig | Mapping[str, Any]) -> CausalLMConfig:
    if isinstance(config, CausalLMConfig):
        return config
    if isinstance(config, Mapping):
        return CausalLMConfig.from_dict(config)
    raise TypeError(f"expected a CausalLMConfig or a config.json dict, got {type(config).__name__}")


class DecoderLayer(nn.Module):
    """One layer of a ``CausalLM``: attention and a gated MLP, each after a norm and added to the
    residual stream.

    Layer ``layer_idx`` of a :class:`CausalLM` has ``self_attn`` (a
    :class:`~corvid.nn.CausalSelfAttention` with the layer's sliding window) and ``mlp`` (a
    :class:`~corvid.nn.GatedMLP`): ``h = x + self_attn(input_layernorm(x))``, then
    ``h + mlp(post_attention_layernorm(h))``.
    With ``config.sandwich_norm`` (Gemma 2) the attention's output is normed before the addition
    (``post_attention_layernorm``) and the MLP has a norm on each side
    (``pre_feedforward_layernorm``, ``post_feedforward_layernorm``).

    ``forward(x, rotary)``: ``x`` is ``(batch, T, hidden_size)``, ``rotary`` the ``(cos, sin)``
    pair of the model's :class:`~corvid.nn.RotaryEmbedding` for those positions.

    >>> cfg = CausalLMConfig(vocab_size=10, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
    ...                      num_attention_heads=2)
    >>> layer = DecoderLayer(cfg, 0)
    >>> layer(cv.ones(1, 3, 8), nn.RotaryEmbedding(4).cos_sin(3)).shape
    (1, 3, 8)
    """

    def __init__(self, config: CausalLMConfig | Mapping[str, Any], layer_idx: int, device: str | None = None,
                 dtype: Any = None):
        super().__init__()
        c = _as_config(config)
        self.layer_idx, self.sandwich_norm = layer_idx, c.sandwich_norm
        f = {"device": device, "dtype": dtype}
        self.self_attn = nn.CausalSelfAttention(
            c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim, qkv_bias=c.qkv_bias,
            out_bias=c.out_bias, sliding_window=c.layer_windows[layer_idx], softcap=c.attn_logit_softcapping,
            scale=c.attention_scale, fused_qkv=c.fused_projections, **f)
        self.mlp = nn.GatedMLP(c.hidden_size, c.intermediate_size, c.hidden_act, bias=c.mlp_bias,
                               fused=c.fused_projections, **f)
        self.input_layernorm = _norm(c, **f)
        self.post_attention_layernorm = _norm(c, **f)
        if c.sandwich_norm:
            self.pre_feedforward_layernorm = _norm(c, **f)
            self.post_feedforward_layernorm = _norm(c, **f)

    def forward(self, x: Tensor, rotary: tuple[Tensor, Tensor] | None = None) -> Tensor:
        if self.sandwich_norm:
            h = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), rotary))
            return h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))
        h = x + self.self_attn(self.input_layernorm(x), rotary)
        return h + self.mlp(self.post_attention_layernorm(h))

    def extra_repr(self) -> str:
        return f"layer_idx={self.layer_idx}"


class Decoder(nn.Module):
    """The body of a ``CausalLM``: token embeddings, the layers and the final norm.

    As ``transformers``' ``LlamaModel``: token embeddings ``embed_tokens`` (times ``sqrt(hidden_size)``, rounded to the model's dtype, with
    ``config.scale_embeddings``), the ``layers`` and the final ``norm``, with one
    :class:`~corvid.nn.RotaryEmbedding` (``rotary_emb``, no parameters) whose cosines and sines
    every layer shares.

    ``forward(input_ids)``: integer ids ``(batch, T)`` give the final hidden states ``(batch, T,
    hidden_size)``, in the parameters' dtype.

    >>> cfg = CausalLMConfig(vocab_size=10, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
    ...                      num_attention_heads=2)
    >>> Decoder(cfg)(cv.Tensor([[1, 2]])).shape
    (1, 2, 8)
    """

    def __init__(self, config: CausalLMConfig | Mapping[str, Any], device: str | None = None, dtype: Any = None):
        super().__init__()
        c = self.config = _as_config(config)
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size, device=device, dtype=dtype)
        self.layers = nn.ModuleList([DecoderLayer(c, i, device, dtype) for i in range(c.num_hidden_layers)])
        self.norm = _norm(c, device, dtype)
        self.rotary_emb = nn.RotaryEmbedding(c.head_dim, c.rope_theta, c.rotary_dim, c.rope_scaling,
                                             c.max_position_embeddings)

    def forward(self, input_ids: Tensor) -> Tensor:
        ids = input_ids if isinstance(input_ids, Tensor) else Tensor(input_ids)
        if not ids.dtype.is_int:
            raise TypeError(f"{type(self).__name__}: token ids must be integers, got {ids.dtype.name}")
        if ids.ndim != 2:
            raise ShapeError(f"{type(self).__name__}: expected token ids of shape (batch, T), got {ids.shape}")
        x = self.embed_tokens(ids)
        if self.config.scale_embeddings:  # (the factor rounded to the model's dtype first, as the reference does)
            x = x * float(np.asarray(self.config.hidden_size ** 0.5, dtype=x.dtype.np))
        rotary = self.rotary_emb.cos_sin(ids.shape[1], x.dtype, x.device)
        for layer in self.layers:
            x = layer(x, rotary)
        return self.norm(x)


class CausalLM(nn.Module):
    """A decoder-only language model of the Llama family: Llama 2/3/3.1, Mistral, Qwen2, Phi-3,
    Gemma and Gemma 2.

    The model is a :class:`Decoder` ``model`` then the output projection ``lm_head`` (None with
    tied embeddings, which reuse ``model.embed_tokens.weight``), and Gemma 2's final soft-capping.

    ``CausalLM(config, device=None, dtype=None)`` builds one with fresh weights from a
    :class:`CausalLMConfig` or a ``config.json`` dict (initialized as ``transformers`` does, see
    :meth:`reset_parameters`); :func:`corvid.models.from_pretrained` loads a checkpoint folder.

    ``forward(input_ids)``: integer token ids ``(batch, T)`` give the logits ``(batch, T,
    vocab_size)`` of the next token at every position, in the parameters' dtype; position ``t``
    sees tokens ``0..t`` only. Greedy decoding can therefore recompute the whole sequence at each
    step, or (same kernels every step) run a fixed-length padded sequence and read position ``t``.

    >>> model = CausalLM({"model_type": "qwen2", "vocab_size": 30, "hidden_size": 16, "intermediate_size": 32,
    ...                   "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 1,
    ...                   "tie_word_embeddings": True})
    >>> model.lm_head is None, model.model.layers[0].self_attn.q_proj.bias.shape
    (True, (16,))
    >>> ids = cv.Tensor([[3, 1, 4]])
    >>> next_token = model(ids)[:, -1].argmax(-1)
    >>> next_token.shape
    (1,)
    """

    def __init__(self, config: CausalLMConfig | Mapping[str, Any], device: str | None = None, dtype: Any = None):
        super().__init__()
        self._build(_as_config(config), device, dtype)
        self.reset_parameters()

    def _build(self, c: CausalLMConfig, device: str | None, dtype: Any) -> None:
        self.config = c
        self.model = Decoder(c, device, dtype)
        self.lm_head = None if c.tie_word_embeddings else nn.Linear(c.hidden_size, c.vocab_size, bias=False,
                                                                    device=device, dtype=dtype)

    @classmethod
    def _skeleton(cls, config: CausalLMConfig) -> CausalLM:
        """A model of ``config`` whose parameters live on the NULL device (nothing allocated,
        no initialization computed), for a loader to replace every one of them."""
        model = cls.__new__(cls)
        nn.Module.__init__(model)
        model._build(config, "NULL", None)
        return model

    def reset_parameters(self) -> None:
        """``transformers``' initialization: every projection and embedding matrix from a normal
        distribution of mean 0 and standard deviation ``config.initializer_range``, biases 0, norm
        weights 1 (0 for Gemma's ``1 + weight``)."""
        std = self.config.initializer_range
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, std)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.RMSNorm):
                (nn.init.zeros_ if isinstance(m, nn.GemmaRMSNorm) else nn.init.ones_)(m.weight)

    @property
    def dtype(self) -> Any:
        """The dtype of the parameters, in which the model computes."""
        return self.model.embed_tokens.weight.dtype

    def forward(self, input_ids: Tensor) -> Tensor:
        h = self.model(input_ids)
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(h, weight)
        cap = self.config.final_logit_softcapping
        return logits if cap is None else softcap(logits, cap)

    def extra_repr(self) -> str:
        return f"model_type={self.config.model_type!r}"


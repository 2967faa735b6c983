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

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from .. import nn
from ..dtype import float32
from ..errors import ShapeError
from ..nn import functional as F
from ..nn.decoder import softcap
from ..ops.elementwise import where
from ..quant import QuantizedEmbedding
from ..tensor import Tensor
from . import generation
from .cache import KVCache
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


def _rotary(rope: nn.RotaryEmbedding, positions: Tensor, dtype: Any) -> tuple[Tensor, Tensor]:
    """The cosines and sines ``(batch, 1, T, rotary_dim)`` for positions ``(batch, T)``, broadcasting
    over the heads. Longrope's factors are the long ones when the largest position is past the
    original context, as ``transformers`` decides, here from a tensor: no value is read, so a
    jitted step replays at every position."""
    if rope.long_inv_freq is None:
        cos, sin = rope.cos_sin(positions, dtype)
    else:
        p, original = positions.astype(float32), rope.original_max_position_embeddings
        (cs, ss), (cl, sl) = rope._cos_sin(p, 0, dtype), rope._cos_sin(p, original + 1, dtype)
        long = positions.max() >= original
        cos, sin = where(long, cl, cs), where(long, sl, ss)
    return cos.unsqueeze(1), sin.unsqueeze(1)


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

    ``forward(x, rotary, cache=None)``: ``x`` is ``(batch, T, hidden_size)``, ``rotary`` the ``(cos, sin)``
    pair of the model's :class:`~corvid.nn.RotaryEmbedding` for those positions; ``cache``, a
    :class:`~corvid.models.KVCache`, makes the attention store the new keys and values there and
    attend to the cached ones too.

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

    def forward(self, x: Tensor, rotary: tuple[Tensor, Tensor] | None = None, cache: KVCache | None = None) -> Tensor:
        attn = self.self_attn(self.input_layernorm(x), rotary, None if cache is None else cache._layer(self.layer_idx))
        if self.sandwich_norm:
            h = x + self.post_attention_layernorm(attn)
            return h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))
        h = x + attn
        return h + self.mlp(self.post_attention_layernorm(h))

    def extra_repr(self) -> str:
        return f"layer_idx={self.layer_idx}"


class Decoder(nn.Module):
    """The body of a ``CausalLM``: token embeddings, the layers and the final norm.

    As ``transformers``' ``LlamaModel``: token embeddings ``embed_tokens`` (times ``sqrt(hidden_size)``, rounded to the model's dtype, with
    ``config.scale_embeddings``), the ``layers`` and the final ``norm``, with one
    :class:`~corvid.nn.RotaryEmbedding` (``rotary_emb``, no parameters) whose cosines and sines
    every layer shares.

    ``forward(input_ids, cache=None, inputs_embeds=None)``: integer ids ``(batch, T)`` give the
    final hidden states ``(batch, T, hidden_size)``, in the parameters' dtype. With a
    :class:`~corvid.models.KVCache`, the ids are the next ``T`` tokens of the sequences it holds:
    their positions follow the cached ones, they attend to those too, and their keys and values
    are added to it. ``inputs_embeds`` ``(batch, T, hidden_size)`` replaces the ids' embeddings
    (``input_ids`` None; Gemma's scaling by ``sqrt(hidden_size)`` still applies, as in
    ``transformers``).

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

    def forward(self, input_ids: Tensor | None, cache: KVCache | None = None,
                inputs_embeds: Tensor | None = None) -> Tensor:
        name = type(self).__name__
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"{name}: give either input_ids or inputs_embeds")
        if inputs_embeds is None:
            ids = input_ids if isinstance(input_ids, Tensor) else Tensor(input_ids)
            if not ids.dtype.is_int:
                raise TypeError(f"{name}: token ids must be integers, got {ids.dtype.name}")
            if ids.ndim != 2:
                raise ShapeError(f"{name}: expected token ids of shape (batch, T), got {ids.shape}")
            x = self.embed_tokens(ids)
        else:
            x = inputs_embeds
            if x.ndim != 3 or x.shape[-1] != self.config.hidden_size:
                raise ShapeError(f"{name}: expected inputs_embeds of shape (batch, T, {self.config.hidden_size}), "
                                 f"got {x.shape}")
        if self.config.scale_embeddings:  # (the factor rounded to the model's dtype first, as the reference does)
            x = x * float(np.asarray(self.config.hidden_size ** 0.5, dtype=x.dtype.np))
        n = x.shape[1]
        if cache is None:
            rotary = self.rotary_emb.cos_sin(n, x.dtype, x.device)
        else:
            cache._check(x.shape[:2], x.dtype)
            rotary = _rotary(self.rotary_emb, cache._positions(n), x.dtype)
        # computed once for every layer (fused into each layer's rotation instead, the cosines and
        # sines of a decode step were evaluated for every head of every layer: 56 of its 3,900 us
        # per layer for Llama 3.2 1B's queries)
        rotary = (rotary[0].contiguous(), rotary[1].contiguous())
        for layer in self.layers:
            x = layer(x, rotary, cache)
        if cache is not None:
            cache._advance(n)
        return self.norm(x)


class CausalLM(nn.Module):
    """A decoder-only language model of the Llama family: Llama 2/3/3.1, Mistral, Qwen2, Phi-3,
    Gemma and Gemma 2.

    The model is a :class:`Decoder` ``model`` then the output projection ``lm_head`` (None with
    tied embeddings, which reuse ``model.embed_tokens.weight``), and Gemma 2's final soft-capping.

    ``CausalLM(config, device=None, dtype=None)`` builds one with fresh weights from a
    :class:`CausalLMConfig` or a ``config.json`` dict (initialized as ``transformers`` does, see
    :meth:`reset_parameters`); :func:`corvid.models.from_pretrained` loads a checkpoint folder.

    ``forward(input_ids, cache=None, logits_to_keep=0, inputs_embeds=None)``: integer token ids
    ``(batch, T)`` give the logits ``(batch, T, vocab_size)`` of the next token at every position,
    in the parameters' dtype; position ``t`` sees tokens ``0..t`` only. With a
    :class:`~corvid.models.KVCache`, the ids continue the sequences the cache holds, whose keys
    and values they attend to, and their own are added to it. ``logits_to_keep=k`` computes the
    logits of the last ``k`` positions only (0: all), what decoding needs. ``inputs_embeds``
    replaces the ids' embeddings (see :class:`Decoder`).

    :meth:`generate` and :meth:`stream` continue prompts, greedily or sampling, with a cache.

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
        self.generation_config: dict[str, Any] = {}  # a checkpoint's generation_config.json (from_pretrained)
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
        emb = self.model.embed_tokens
        return emb.dtype if isinstance(emb, QuantizedEmbedding) else emb.weight.dtype

    def forward(self, input_ids: Tensor | None, cache: KVCache | None = None, logits_to_keep: int = 0,
                inputs_embeds: Tensor | None = None) -> Tensor:
        if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int) or logits_to_keep < 0:
            raise ValueError(f"CausalLM: logits_to_keep must be an int >= 0, got {logits_to_keep!r}")
        h = self.model(input_ids, cache, inputs_embeds)
        if logits_to_keep:
            h = h[:, -logits_to_keep:]
        # the head is called, not read (its hooks run; a quantized or LoRA head computes as itself)
        emb = self.model.embed_tokens
        if self.lm_head is not None:
            logits = self.lm_head(h)
        elif isinstance(emb, QuantizedEmbedding):  # (a tied head reads the quantized table)
            logits = emb.attend(h)
        else:
            logits = F.linear(h, emb.weight)
        cap = self.config.final_logit_softcapping
        return logits if cap is None else softcap(logits, cap)

    def generate(self, input_ids: Any, max_new_tokens: int = 32, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, key: Tensor | None = None, stop_tokens: Any = None,
                 attention_mask: Any = None, pad_token_id: int | None = None,
                 stream: Callable[[list[int]], Any] | None = None) -> Tensor:
        """Continue prompts by up to ``max_new_tokens`` tokens: int64 ``(batch, n)``, the new tokens
        only (``n <= max_new_tokens``: fewer when every sequence stopped).

        ``input_ids``: one prompt (a sequence of ids), a batch ``(batch, T)`` (a tensor or array,
        with an ``attention_mask`` of 0s and 1s when its rows are padded, on the left or the
        right), or a list of prompts of different lengths. The prompts are run once, filling a
        :class:`~corvid.models.KVCache`, then each new token is computed alone from the cache,
        by one compiled step replayed for every token (see :mod:`corvid.models.generation`).

        ``temperature=0`` decodes greedily (``transformers``' ``do_sample=False``); otherwise
        tokens are drawn from the logits divided by ``temperature``, restricted by ``top_k`` and
        ``top_p`` (:func:`~corvid.models.sample`), as a pure function of ``key`` (a
        :func:`corvid.random.key`; None draws one from the global generator, which
        :func:`corvid.manual_seed` seeds).

        A sequence ends at a token of ``stop_tokens`` (an id or ids; default the config's
        ``eos_token_id``, ``()`` for none), which is included; from then on it gets
        ``pad_token_id`` (default the config's, else the first stop token, else 0) until all
        have ended. ``stream``, a function, is called with each step's tokens (a list of
        ``batch`` ints) as soon as they are known; :meth:`stream` is the iterator form.

        ValueError for ``max_new_tokens < 0``, a negative ``temperature``, ``top_k < 1``,
        ``top_p`` outside ``(0, 1]``, token ids outside the vocabulary, or a mask that does not
        fit the ids.

        >>> model = CausalLM({"model_type": "mistral", "vocab_size": 40, "hidden_size": 16, "intermediate_size": 32,
        ...                   "num_hidden_layers": 2, "num_attention_heads": 2, "sliding_window": 4})
        >>> out = model.generate([5, 7, 11], max_new_tokens=6, temperature=0)
        >>> out.shape
        (1, 6)
        >>> ids = cv.Tensor([[5, 7, 11]])                       # the same without a cache
        >>> for _ in range(6):
        ...     ids = cv.cat([ids, model(ids)[:, -1:].argmax(-1)], axis=1)
        >>> ids[:, 3:].tolist() == out.tolist()
        True
        >>> key = cv.random.key(0)
        >>> batch = model.generate([[5, 7, 11], [3]], max_new_tokens=4, top_k=10, key=key, stop_tokens=())
        >>> batch.shape, batch.tolist() == model.generate([[5, 7, 11], [3]], max_new_tokens=4, top_k=10, key=key,
        ...                                               stop_tokens=()).tolist()
        ((2, 4), True)
        """
        return generation.generate_tokens(self, input_ids, max_new_tokens, temperature, top_k, top_p, key,
                                          stop_tokens, attention_mask, pad_token_id, stream)

    def stream(self, input_ids: Any, max_new_tokens: int = 32, temperature: float = 1.0, top_k: int | None = None,
               top_p: float | None = None, key: Tensor | None = None, stop_tokens: Any = None,
               attention_mask: Any = None, pad_token_id: int | None = None) -> Iterator[list[int]]:
        """:meth:`generate` as an iterator: each step's tokens, a list of one int per sequence,
        yielded as soon as they are computed (the arguments are those of :meth:`generate`, checked
        at the call). The next token is computed when the iterator is asked for it.

        >>> model = CausalLM({"model_type": "llama", "vocab_size": 40, "hidden_size": 16, "intermediate_size": 32,
        ...                   "num_hidden_layers": 1, "num_attention_heads": 2})
        >>> steps = list(model.stream([1, 2, 3], max_new_tokens=5, temperature=0))
        >>> len(steps), len(steps[0])
        (5, 1)
        >>> [s[0] for s in steps] == model.generate([1, 2, 3], max_new_tokens=5, temperature=0)[0].tolist()
        True
        """
        return generation.stream_tokens(self, input_ids, max_new_tokens, temperature, top_k, top_p, key,
                                        stop_tokens, attention_mask, pad_token_id)

    def extra_repr(self) -> str:
        return f"model_type={self.config.model_type!r}"


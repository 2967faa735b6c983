"""The configuration of a decoder-only language model, read from a Hugging Face ``config.json``.

:class:`CausalLMConfig` holds what the one implementation in :mod:`corvid.models.llama` needs,
with the differences between the families spelled out as options (norm style, biases, fused
projections, sliding windows per layer, soft-capping...). :meth:`CausalLMConfig.from_dict`
translates a ``config.json`` of each supported family, in both the layout ``transformers`` 4
wrote (``rope_theta`` and ``rope_scaling`` at the top level) and the one of ``transformers`` 5
(``rope_parameters``), and raises ValueError naming the architecture or option it does not
support.

>>> cfg = CausalLMConfig.from_dict({"model_type": "mistral", "vocab_size": 100, "hidden_size": 32,
...                                 "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
...                                 "num_key_value_heads": 2, "sliding_window": 4})
>>> cfg.head_dim, cfg.layer_windows, cfg.tie_word_embeddings
(8, (4, 4), False)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..nn.decoder import ACTIVATIONS
from ..nn.rotary import ROPE_TYPES

__all__ = ["ARCHITECTURES", "CausalLMConfig"]

# Hugging Face's ``architectures`` entry of each supported ``model_type``
ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "phi3": "Phi3ForCausalLM", "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM"}


def _unsupported(what: str) -> ValueError:
    return ValueError(f"corvid.models: {what}; supported: {', '.join(ARCHITECTURES.values())} "
                      f"(model_type {', '.join(ARCHITECTURES)})")


@dataclasses.dataclass(frozen=True)
class CausalLMConfig:
    """The sizes and options of a decoder-only transformer (the fields are Hugging Face's names
    where it has one).

    Every layer is ``x + attn(norm(x))`` then ``+ mlp(norm(...))`` (with ``sandwich_norm``, Gemma 2's
    extra norms on each branch's output too): grouped-query causal self-attention
    (:class:`~corvid.nn.CausalSelfAttention`) with rotary positions (:class:`~corvid.nn.RotaryEmbedding`:
    ``rope_theta``, ``rope_scaling``, ``partial_rotary_factor``) and a gated MLP
    (:class:`~corvid.nn.GatedMLP` with ``hidden_act``). The family options:

    * ``qkv_bias``, ``out_bias``, ``mlp_bias``: biases of the projections (Qwen2 has qkv biases);
    * ``fused_projections``: ``qkv_proj`` and ``gate_up_proj`` as Phi-3 stores them;
    * ``layer_windows``: each layer's sliding window (None: the whole context);
    * ``attn_logit_softcapping``, ``final_logit_softcapping``, ``query_pre_attn_scalar`` (the
      attention scale is its inverse square root) and ``sandwich_norm``: Gemma 2's;
    * ``gemma_norm`` (norms scale by ``1 + weight``: :class:`~corvid.nn.GemmaRMSNorm`) and
      ``scale_embeddings`` (embeddings times ``sqrt(hidden_size)``): Gemma's;
    * ``tie_word_embeddings``: the output projection is the token embedding's matrix.

    ``bos_token_id``, ``eos_token_id`` (one id or a list) and ``pad_token_id`` are the special
    tokens :meth:`CausalLM.generate` stops at and pads finished sequences with by default.

    ``model_type`` names the family (``"llama"``, ``"mistral"``, ``"qwen2"``, ``"phi3"``,
    ``"gemma"``, ``"gemma2"``) for messages and ``repr``; the options alone decide the
    computation. Build one from a ``config.json`` with :meth:`from_dict`.

    >>> cfg = CausalLMConfig(vocab_size=10, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
    ...                      num_attention_heads=2)
    >>> cfg.num_key_value_heads, cfg.head_dim, cfg.rotary_dim
    (2, 4, 4)
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    model_type: str = "llama"
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: Mapping[str, Any] | None = None
    partial_rotary_factor: float = 1.0
    max_position_embeddings: int | None = None
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    fused_projections: bool = False
    layer_windows: tuple[int | None, ...] | None = None
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    query_pre_attn_scalar: float | None = None
    sandwich_norm: bool = False
    gemma_norm: bool = False
    scale_embeddings: bool = False
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None

    def __post_init__(self) -> None:
        kv = self.num_attention_heads if self.num_key_value_heads is None else self.num_key_value_heads
        object.__setattr__(self, "num_key_value_heads", kv)
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(f"CausalLMConfig: hidden_size={self.hidden_size} is no multiple of "
                                 f"num_attention_heads={self.num_attention_heads}; give head_dim")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if kv <= 0 or self.num_attention_heads % kv:
            raise ValueError(f"CausalLMConfig: num_key_value_heads={kv} must divide "
                             f"num_attention_heads={self.num_attention_heads}")
        windows = self.layer_windows
        windows = (None,) * self.num_hidden_layers if windows is None else tuple(windows)
        if len(windows) != self.num_hidden_layers:
            raise ValueError(f"CausalLMConfig: layer_windows has {len(windows)} entries for "
                             f"{self.num_hidden_layers} layers")
        object.__setattr__(self, "layer_windows", windows)
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"CausalLMConfig: hidden_act {self.hidden_act!r} is not supported (supported: "
                             f"{', '.join(ACTIVATIONS)})")
        s = dict(self.rope_scaling or {})
        rope_type = s.get("rope_type", s.get("type", "default"))
        if rope_type not in ROPE_TYPES:
            raise ValueError(f"CausalLMConfig: rope_type {rope_type!r} (rope_scaling) is not supported (supported: "
                             f"{', '.join(ROPE_TYPES)})")
        rotary = self.rotary_dim
        if rotary <= 0 or rotary % 2:
            raise ValueError(f"CausalLMConfig: partial_rotary_factor={self.partial_rotary_factor} of head_dim="
                             f"{self.head_dim} gives {rotary} rotated channels; it must be even and positive")

    @property
    def rotary_dim(self) -> int:
        """The channels of each head that rotary embeddings rotate: ``int(head_dim * partial_rotary_factor)``."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def attention_scale(self) -> float:
        """The factor of the attention scores: ``query_pre_attn_scalar ** -0.5`` if set (Gemma 2),
        else ``head_dim ** -0.5``."""
        return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> CausalLMConfig:
        """The configuration a Hugging Face ``config.json`` (as a dict) describes, for the
        families Llama (2, 3, 3.1 with ``"llama3"`` rope scaling), Mistral, Qwen2, Phi-3, Gemma
        and Gemma 2, with the defaults of their ``transformers`` configuration classes for the
        fields it lacks.

        ValueError naming what is not supported: another ``model_type`` or ``architectures``
        (a sequence-classification head, a multimodal model...), a ``rope_type`` other than
        ``default``, ``linear``, ``llama3``, ``yarn`` and ``longrope``, rope parameters that
        differ per layer type, an unknown ``layer_types`` entry, an unsupported ``hidden_act``,
        bidirectional attention, or a quantized checkpoint (``quantization_config``).

        >>> cfg = CausalLMConfig.from_dict({"model_type": "gemma2", "vocab_size": 100, "hidden_size": 32,
        ...                                 "intermediate_size": 64, "num_hidden_layers": 2,
        ...                                 "num_attention_heads": 4, "head_dim": 8, "sliding_window": 4})
        >>> cfg.layer_windows, cfg.attn_logit_softcapping, cfg.hidden_act, cfg.tie_word_embeddings
        ((4, None), 50.0, 'gelu_pytorch_tanh', True)
        >>> CausalLMConfig.from_dict({"model_type": "bert"})
        Traceback (most recent call last):
            ...
        ValueError: corvid.models: model_type 'bert' is not supported; supported: ...
        """
        c = dict(config)
        kind = _model_type(c)
        if c.get("quantization_config"):
            method = c["quantization_config"].get("quant_method", "?") if isinstance(c["quantization_config"],
                                                                                  dict) else "?"
            raise ValueError(f"corvid.models: quantized checkpoints are not supported (quantization_config with "
                             f"quant_method {method!r}); load an unquantized {ARCHITECTURES[kind]}")
        if c.get("use_bidirectional_attention"):
            raise ValueError(f"corvid.models: use_bidirectional_attention=True ({kind}) is not supported: "
                             "these models are causal")
        missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                               "num_attention_heads") if c.get(k) is None]
        if missing:
            raise ValueError(f"corvid.models: the {kind} configuration lacks {', '.join(missing)}")
        gemma = kind in ("gemma", "gemma2")
        layers, heads = int(c["num_hidden_layers"]), int(c["num_attention_heads"])
        act = c.get("hidden_activation") or c.get("hidden_act") if gemma else c.get("hidden_act")
        if act is None or (kind == "gemma" and act == "gelu"):
            # (Gemma's first releases wrote "gelu" and meant the tanh approximation, as transformers reads it)
            act = "gelu_pytorch_tanh" if gemma else "silu"
        head_dim = c.get("head_dim") or (256 if gemma and "head_dim" not in c else None)
        theta, scaling, partial = _rope(c, kind)
        bias = bool(c.get("attention_bias", False))
        return cls(
            vocab_size=int(c["vocab_size"]), hidden_size=int(c["hidden_size"]),
            intermediate_size=int(c["intermediate_size"]), num_hidden_layers=layers, num_attention_heads=heads,
            num_key_value_heads=c.get("num_key_value_heads") or heads, head_dim=head_dim, model_type=kind,
            hidden_act=act, rms_norm_eps=float(c.get("rms_norm_eps", 1e-5 if kind == "phi3" else 1e-6)),
            rope_theta=theta, rope_scaling=scaling, partial_rotary_factor=partial,
            max_position_embeddings=c.get("max_position_embeddings"),
            qkv_bias=True if kind == "qwen2" else bias, out_bias=False if kind == "qwen2" else bias,
            mlp_bias=bool(c.get("mlp_bias", False)) if kind == "llama" else False,
            fused_projections=kind == "phi3", layer_windows=_windows(c, kind, layers),
            attn_logit_softcapping=c.get("attn_logit_softcapping", 50.0) if kind == "gemma2" else None,
            final_logit_softcapping=c.get("final_logit_softcapping", 30.0) if kind == "gemma2" else None,
            query_pre_attn_scalar=c.get("query_pre_attn_scalar", 256) if kind == "gemma2" else None,
            sandwich_norm=kind == "gemma2", gemma_norm=gemma, scale_embeddings=gemma,
            tie_word_embeddings=bool(c.get("tie_word_embeddings", gemma)),
            initializer_range=float(c.get("initializer_range", 0.02)),
            bos_token_id=c.get("bos_token_id"), eos_token_id=c.get("eos_token_id"),
            pad_token_id=c.get("pad_token_id"))


def _model_type(c: dict[str, Any]) -> str:
    kind, archs = c.get("model_type"), c.get("architectures")
    known = {v: k for k, v in ARCHITECTURES.items()}
    if archs:
        names = archs if isinstance(archs, (list, tuple)) else [archs]
        found = [known[a] for a in names if a in known]
        if not found:
            raise _unsupported(f"architectures {list(names)} are not supported")
        if kind is None:
            kind = found[0]
    if kind not in ARCHITECTURES:
        raise _unsupported(f"model_type {kind!r} is not supported" if kind is not None
                           else "the configuration names no model_type or architectures")
    return kind


def _rope(c: dict[str, Any], kind: str) -> tuple[float, dict[str, Any] | None, float]:
    """``rope_theta``, the scaling parameters (None when unscaled) and ``partial_rotary_factor``,
    from transformers 5's ``rope_parameters`` or transformers 4's top-level fields and ``rope_scaling``."""
    params = c.get("rope_parameters") or c.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise ValueError(f"corvid.models: rope parameters must be a dict, got {params!r}")
    layer_types = set(c.get("layer_types") or ())
    nested = sorted(layer_types & set(params))
    if nested:
        raise ValueError(f"corvid.models: rope parameters that differ per layer type ({nested}) are not supported")
    params = dict(params)
    theta = float(params.pop("rope_theta", c.get("rope_theta", 10000.0)))
    partial = float(params.pop("partial_rotary_factor", c.get("partial_rotary_factor", 1.0)) or 1.0)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "su" or (kind == "phi3" and rope_type == "yarn"):
        rope_type = "longrope"  # (Phi-3's early names for it, which transformers renames too)
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"corvid.models: rope_type {rope_type!r} is not supported (supported: "
                         f"{', '.join(ROPE_TYPES)})")
    if rope_type == "default":
        return theta, None, partial
    params["rope_type"] = rope_type
    params.pop("type", None)
    if rope_type in ("llama3", "yarn", "longrope"):
        if kind == "phi3" and c.get("original_max_position_embeddings") is not None:
            params["original_max_position_embeddings"] = c["original_max_position_embeddings"]
        params.setdefault("original_max_position_embeddings", c.get("max_position_embeddings"))
    return theta, params, partial


def _windows(c: dict[str, Any], kind: str, layers: int) -> tuple[int | None, ...]:
    """Each layer's sliding window, None for full attention."""
    window = c.get("sliding_window")
    if kind == "qwen2" and not c.get("use_sliding_window", False):
        window = None
    if kind in ("llama", "gemma"):
        window = None
    types = c.get("layer_types")
    if types is None:
        if kind == "gemma2":
            types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
        elif kind == "qwen2":
            first = c.get("max_window_layers", 28)
            types = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
        else:
            types = ["sliding_attention"] * layers
    if len(types) < layers:
        raise ValueError(f"corvid.models: layer_types has {len(types)} entries for {layers} layers")
    out = []
    for t in types[:layers]:
        if t not in ("full_attention", "sliding_attention"):
            raise ValueError(f"corvid.models: layer type {t!r} is not supported (full_attention, sliding_attention)")
        out.append(int(window) if t == "sliding_attention" and window is not None else None)
    return tuple(out)

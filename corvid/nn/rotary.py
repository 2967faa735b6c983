"""Rotary position embeddings (RoPE): :class:`RotaryEmbedding` and ``F.apply_rotary_emb``.

RoPE encodes a token's position by rotating pairs of channels of each query and key by angles
``position * inv_freq[i]``, so that the score ``q · k`` depends only on the distance between
the two positions. The pairs are Hugging Face's "rotate half" layout (GPT-NeoX's): channel
``i`` of the first half of the rotated channels pairs with channel ``i`` of the second half, the
layout of Llama, Mistral, Qwen2, Phi-3 and Gemma checkpoints converted to ``transformers``.

The frequencies ``inv_freq[i] = base ** (-2i / rotary_dim)`` may be rescaled for longer contexts
(``scaling``, a Hugging Face ``rope_scaling`` / ``rope_parameters`` dict, by its ``rope_type``):

* ``"default"``: unscaled;
* ``"linear"``: every frequency divided by ``factor`` (position interpolation);
* ``"llama3"``: Llama 3.1's: low frequencies divided by ``factor``, high ones kept, a smooth
  ramp between (``low_freq_factor``, ``high_freq_factor``, ``original_max_position_embeddings``);
* ``"yarn"``: YaRN's ramp between interpolated and extrapolated frequencies (``beta_fast``,
  ``beta_slow``, ``truncate``) and a cos/sin scale ``attention_factor`` (``mscale``,
  ``mscale_all_dim``);
* ``"longrope"``: Phi-3's per-frequency factors, ``short_factor`` while the sequence fits in
  ``original_max_position_embeddings`` and ``long_factor`` beyond, with a cos/sin scale.

Other types (``"dynamic"``, whose frequencies depend on the lengths seen before) raise ValueError.
``rotary_dim`` below the head size rotates only the first ``rotary_dim`` channels (partial
rotary, Hugging Face's ``partial_rotary_factor``); the others pass through unchanged.

Frequencies are computed in float64 and stored as float32; angles and their cosines are computed
in float32 and, as in ``transformers``, cast to the dtype of the rotated tensor.

>>> from corvid import nn
>>> rope = nn.RotaryEmbedding(8)
>>> q = cv.ones(1, 2, 5, 8)                 # (batch, heads, length, head_dim)
>>> rope(q).shape
(1, 2, 5, 8)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..creation import arange
from ..dtype import float32, to_dtype
from ..errors import ShapeError
from ..ops.movement import cat
from ..tensor import Tensor
from ..graph.symbolic import Sym
from .module import Module

__all__ = ["RotaryEmbedding", "apply_rotary_emb"]

ROPE_TYPES = ("default", "linear", "llama3", "yarn", "longrope")


def apply_rotary_emb(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary position embedding: ``x`` with its first channels rotated by the angles whose
    cosines and sines are ``cos`` and ``sin``.

    The first ``R = cos.shape[-1]`` channels become ``x_r * cos + rotate_half(x_r) * sin``, where
    ``rotate_half`` maps the halves ``(a, b)`` to ``(-b, a)``; the others are unchanged.

    ``x`` is ``(..., T, D)``; ``cos`` and ``sin`` are ``(..., T, R)`` (``R`` even, at most ``D``),
    broadcast against ``x``, both halves holding the same angles, as
    :meth:`RotaryEmbedding.cos_sin` makes them. ShapeError for an odd or too large ``R`` or
    ``cos`` and ``sin`` of different shapes.

    >>> import math
    >>> x = cv.Tensor([[1.0, 0.0, 0.0, 0.0]])          # one position, 4 channels, pairs (0, 2) and (1, 3)
    >>> angle = cv.Tensor([[math.pi / 2, 0.0, math.pi / 2, 0.0]])
    >>> [round(v, 6) + 0.0 for v in apply_rotary_emb(x, angle.cos(), angle.sin())[0].tolist()]
    [0.0, 0.0, 1.0, 0.0]
    """
    r = cos.shape[-1]
    if cos.shape != sin.shape or r % 2 or r > x.shape[-1]:
        raise ShapeError(f"apply_rotary_emb: cos {cos.shape} and sin {sin.shape} must have one shape whose last "
                         f"size is even and at most the {x.shape[-1]} channels of x {x.shape}")
    rot = x if r == x.shape[-1] else x[..., :r]
    half = r // 2
    out = rot * cos + cat([-rot[..., half:], rot[..., :half]], axis=-1) * sin
    return out if r == x.shape[-1] else cat([out, x[..., r:]], axis=-1)


def _option(scaling: Mapping[str, Any], key: str, rope_type: str) -> Any:
    if scaling.get(key) is None:
        raise ValueError(f"RotaryEmbedding: rope_type {rope_type!r} needs {key!r} in its scaling parameters, "
                         f"got {dict(scaling)}")
    return scaling[key]


def _exponents(dim: int) -> np.ndarray:
    return np.arange(0, dim, 2, dtype=np.float64) / dim


def _llama3(inv: np.ndarray, s: Mapping[str, Any]) -> np.ndarray:
    factor, low, high = (float(_option(s, k, "llama3")) for k in ("factor", "low_freq_factor", "high_freq_factor"))
    old = float(_option(s, "original_max_position_embeddings", "llama3"))
    wavelen = 2 * math.pi / inv
    out = np.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, (1 - smooth) * out / factor + smooth * out, out)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(dim: int, base: float, s: Mapping[str, Any], max_positions: int | None) -> tuple[np.ndarray, float]:
    original = int(_option(s, "original_max_position_embeddings", "yarn"))
    factor = s.get("factor")
    if factor is None:
        if max_positions is None:
            raise ValueError("RotaryEmbedding: rope_type 'yarn' without 'factor' needs max_position_embeddings")
        factor = max_positions / original
    factor = float(factor)
    attention = s.get("attention_factor")
    if attention is None:
        mscale, mscale_all = s.get("mscale"), s.get("mscale_all_dim")
        attention = (_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all) if mscale and mscale_all
                     else _yarn_mscale(factor))
    fast, slow = s.get("beta_fast") or 32, s.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(fast), correction_dim(slow)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # (as the reference: no division by zero)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    freqs = base ** _exponents(dim)
    extrapolated = 1 - ramp
    return (1 / (factor * freqs)) * (1 - extrapolated) + (1 / freqs) * extrapolated, float(attention)


def _longrope_factors(dim: int, s: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    out = []
    for key in ("short_factor", "long_factor"):
        f = np.asarray(_option(s, key, "longrope"), dtype=np.float64)
        if f.shape != (dim // 2,):
            raise ValueError(f"RotaryEmbedding: longrope's {key} has {f.size} entries; {dim} rotated channels "
                             f"need {dim // 2}")
        out.append(f)
    return out[0], out[1]


class RotaryEmbedding(Module):
    """Rotary position embeddings (RoPE) for attention heads of ``dim`` channels, with Hugging
    Face's context scalings.

    The first ``rotary_dim`` channels (default all; even) are rotated, with base ``base``
    (Hugging Face's ``rope_theta``) and optional context scaling ``scaling`` (a ``rope_scaling``
    dict; see the module's description of the types). ``max_position_embeddings`` is the
    model's context length, which ``"yarn"`` and ``"longrope"`` use when the dict has no
    ``factor``.

    ``forward(x, positions=None)`` rotates ``x`` of shape ``(..., T, dim)`` (``(batch, heads, T,
    dim)`` in attention) for the positions of its ``T`` rows: ``positions`` is None for
    ``0..T-1``, an int ``p`` for ``p..p+T-1``, or an integer tensor ``(T,)`` or ``(batch, T)``.
    :meth:`cos_sin` makes the cosines and sines once, for several tensors rotated alike (every
    layer of a model), to pass to :func:`apply_rotary_emb`.

    The module has no parameters and no state-dict entries: the frequencies (``inv_freq``, a
    float32 numpy array, and ``long_inv_freq`` for longrope) are plain attributes, so
    ``Module.to(dtype=...)`` never rounds them. ``attention_scaling`` multiplies cos and sin
    (1 except for yarn and longrope). ValueError for an unsupported ``rope_type`` or missing
    scaling parameters.

    >>> rope = RotaryEmbedding(4, base=10000.0)
    >>> rope.inv_freq.tolist()
    [1.0, 0.009999999776482582]
    >>> cos, sin = rope.cos_sin(3)
    >>> cos.shape, [round(v, 2) for v in cos[1].tolist()]       # angles 1 and 0.01 at position 1
    ((3, 4), [0.54, 1.0, 0.54, 1.0])
    >>> rope(cv.ones(1, 3, 4), positions=10).shape          # positions 10, 11, 12
    (1, 3, 4)
    """

    def __init__(self, dim: int, base: float = 10000.0, rotary_dim: int | None = None,
                 scaling: Mapping[str, Any] | None = None, max_position_embeddings: int | None = None):
        super().__init__()
        rotary_dim = dim if rotary_dim is None else int(rotary_dim)
        if rotary_dim <= 0 or rotary_dim % 2 or rotary_dim > dim:
            raise ValueError(f"RotaryEmbedding: rotary_dim={rotary_dim} must be even, positive and at most dim={dim}")
        self.dim, self.rotary_dim, self.base = dim, rotary_dim, float(base)
        self.max_position_embeddings = max_position_embeddings
        s = dict(scaling or {})
        rope_type = s.get("rope_type", s.get("type", "default"))
        if rope_type not in ROPE_TYPES:
            raise ValueError(f"RotaryEmbedding: rope_type {rope_type!r} is not supported (supported: "
                             f"{', '.join(ROPE_TYPES)})")
        self.rope_type, self.scaling = rope_type, s
        self.attention_scaling = 1.0
        self.original_max_position_embeddings: int | None = None
        inv = 1.0 / self.base ** _exponents(rotary_dim)
        long = None
        if rope_type == "linear":
            inv = inv / float(_option(s, "factor", "linear"))
        elif rope_type == "llama3":
            inv = _llama3(inv, s)
        elif rope_type == "yarn":
            inv, self.attention_scaling = _yarn(rotary_dim, self.base, s, max_position_embeddings)
        elif rope_type == "longrope":
            short, long_factor = _longrope_factors(rotary_dim, s)
            original = int(_option(s, "original_max_position_embeddings", "longrope"))
            factor = s.get("factor")
            if factor is None:
                if max_position_embeddings is None:
                    raise ValueError("RotaryEmbedding: rope_type 'longrope' without 'factor' needs "
                                     "max_position_embeddings")
                factor = max_position_embeddings / original
            attention = s.get("attention_factor")
            if attention is None:
                attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
            self.attention_scaling, self.original_max_position_embeddings = float(attention), original
            long = inv / long_factor
            inv = inv / short
        self.inv_freq = inv.astype(np.float32)
        self.long_inv_freq = None if long is None else long.astype(np.float32)

    def _frequencies(self, length: int) -> np.ndarray:
        """The frequencies for a sequence of ``length`` positions (longrope's depend on it)."""
        if self.long_inv_freq is not None and length > self.original_max_position_embeddings:
            return self.long_inv_freq
        return self.inv_freq

    def cos_sin(self, positions: Any, dtype: Any = float32, device: str | None = None) -> tuple[Tensor, Tensor]:
        """The cosines and sines of the angles for ``positions``: an int ``T`` (positions
        ``0..T-1``) or an integer tensor of any shape ``P``; both ``P + (rotary_dim,)``, times
        ``attention_scaling``, computed in float32 and returned in ``dtype``, on ``device``
        (a tensor's own by default).

        >>> cos, sin = RotaryEmbedding(8, rotary_dim=4).cos_sin(cv.Tensor([[0, 1], [5, 6]]))
        >>> cos.shape, sin[0, 0].tolist()
        ((2, 2, 4), [0.0, 0.0, 0.0, 0.0])
        """
        if isinstance(positions, (int, Sym)):  # (a symbolic length too: a jit trace with dynamic sizes)
            return self._cos_sin(arange(positions, dtype=float32, device=device), positions, dtype)
        p = positions if isinstance(positions, Tensor) else Tensor(positions)
        if not p.dtype.is_int:
            raise TypeError(f"RotaryEmbedding: positions must be integers, got {p.dtype.name}")
        p = p if device is None else p.to(device)
        # (longrope alone needs the length, and reading it synchronizes)
        length = int(p.max().item()) + 1 if self.long_inv_freq is not None and p.size else 0
        return self._cos_sin(p.astype(float32), length, dtype)

    def _cos_sin(self, pos: Tensor, length: int, dtype: Any) -> tuple[Tensor, Tensor]:
        angles = pos.unsqueeze(-1) * Tensor(self._frequencies(length), device=pos.device)
        angles = cat([angles, angles], axis=-1)
        cos, sin = angles.cos(), angles.sin()
        if self.attention_scaling != 1.0:
            cos, sin = cos * self.attention_scaling, sin * self.attention_scaling
        d = to_dtype(dtype)
        return cos.astype(d), sin.astype(d)

    def forward(self, x: Tensor, positions: Any = None) -> Tensor:
        x = x if isinstance(x, Tensor) else Tensor(x)
        if x.ndim < 2 or x.shape[-1] != self.dim:
            raise ShapeError(f"RotaryEmbedding: expected an input (..., T, {self.dim}), got {x.shape}")
        t = x.shape[-2]
        if positions is None or isinstance(positions, int):
            start = positions or 0
            cos, sin = self._cos_sin(arange(start, start + t, dtype=float32, device=x.device), start + t, x.dtype)
        else:
            pos = positions if isinstance(positions, Tensor) else Tensor(positions)
            if pos.shape[-1] != t:
                raise ShapeError(f"RotaryEmbedding: positions {pos.shape} do not match the {t} rows of x {x.shape}")
            cos, sin = self.cos_sin(pos, x.dtype, x.device)
        if cos.ndim == 3 and x.ndim == 4:  # (batch, T) positions for (batch, heads, T, dim)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return apply_rotary_emb(x, cos, sin)

    def extra_repr(self) -> str:
        s = f"{self.dim}, base={self.base:g}"
        if self.rotary_dim != self.dim:
            s += f", rotary_dim={self.rotary_dim}"
        return s + (f", rope_type={self.rope_type!r}" if self.rope_type != "default" else "")

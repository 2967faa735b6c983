"""The key/value cache of a decoding :class:`~corvid.models.CausalLM`: :class:`KVCache`.

Decoding one token at a time, a layer's attention needs the keys and values of every earlier
token; the cache keeps them, so each step computes the new token's only. The cache is *static*:
every layer's keys and values live in tensors of a fixed number of slots (``max_length``), the
tokens written so far in the first ``length`` of them and the rest masked. ``length`` is a
tensor, not a Python int, so a step's graph is the same at every length and ``cv.jit`` replays
one program for all of them (:meth:`CausalLM.generate` does so).

Several sequences of different lengths share a cache left-padded: sequence ``b`` starts at slot
``padding[b]``, its token in slot ``s`` has position ``s - padding[b]`` (what rotary embeddings
see) and the slots before ``padding[b]`` are never attended to. A key in slot ``s`` is seen by
the query in slot ``q`` when ``padding[b] <= s <= q`` and, in a layer with a sliding window
``w``, ``q - s < w``: the mask every layer attends with (soft-capped or not).

``KVCache`` is a pytree (its tensors are the leaves), so a jitted function can take one and
return the updated one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..creation import arange, zeros
from ..dtype import float32, int64, to_dtype
from ..errors import ShapeError
from ..ops.elementwise import where
from ..runtime.device import canonical_device
from ..tensor import Tensor
from ..tree import register_pytree_node
from .config import CausalLMConfig

__all__ = ["KVCache"]


class KVCache:
    """The keys and values of every layer of a :class:`~corvid.models.CausalLM`, for
    ``max_length`` slots of ``batch_size`` sequences (see the module's description).

    ``KVCache(config, batch_size, max_length, dtype=float32, device=None, padding=None)``:
    ``config`` is the model's (a :class:`CausalLMConfig` or a ``config.json`` dict), ``dtype``
    its parameters' (``model.dtype``), ``device`` theirs (the default device if None).
    ``padding`` gives each sequence's number of left-padding slots (default none).

    Attributes: ``keys`` and ``values``, one tensor ``(batch_size, num_key_value_heads,
    max_length, head_dim)`` per layer; ``padding``, int64 ``(batch_size,)``; ``length``, the
    number of slots written, an int64 0-d tensor.

    ``model(ids, cache=cache)`` writes the keys and values of the tokens ``ids`` (``(batch_size,
    T)``) into the ``T`` slots from ``length`` on, returns their logits and advances ``length``:
    the cache is updated in place (its attributes are bound to the new tensors). Writing past
    ``max_length`` is not checked (a step does not read ``length``): slots beyond it are
    dropped and the logits are wrong; :meth:`CausalLM.generate` sizes its cache itself.

    >>> from corvid.models import CausalLM
    >>> model = CausalLM({"model_type": "llama", "vocab_size": 32, "hidden_size": 16, "intermediate_size": 32,
    ...                   "num_hidden_layers": 2, "num_attention_heads": 2})
    >>> cache = KVCache(model.config, batch_size=1, max_length=8)
    >>> cache.keys[0].shape
    (1, 2, 8, 8)
    >>> prompt = model(cv.Tensor([[3, 1, 4]]), cache=cache)            # fills slots 0..2
    >>> step = model(prompt[:, -1:].argmax(-1), cache=cache)            # one token: slot 3
    >>> cache.length.item(), step.shape
    (4, (1, 1, 32))
    >>> whole = model(cv.Tensor([[3, 1, 4, prompt[0, -1].argmax().item()]]))
    >>> float((step[0, -1] - whole[0, -1]).abs().max()) < 1e-5
    True
    """

    def __init__(self, config: CausalLMConfig | Mapping[str, Any], batch_size: int, max_length: int,
                 dtype: Any = float32, device: str | None = None, padding: Sequence[int] | Tensor | None = None):
        c = config if isinstance(config, CausalLMConfig) else CausalLMConfig.from_dict(config)
        for name, v in (("batch_size", batch_size), ("max_length", max_length)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"KVCache: {name} must be a positive int, got {v!r}")
        d = to_dtype(dtype)
        if not d.is_float:
            raise ValueError(f"KVCache: dtype must be a floating-point dtype (the model's), got {d.name}")
        device = canonical_device(device)
        shape = (int(batch_size), c.num_key_value_heads, int(max_length), c.head_dim)
        self.keys = [zeros(shape, dtype=d, device=device) for _ in range(c.num_hidden_layers)]
        self.values = [zeros(shape, dtype=d, device=device) for _ in range(c.num_hidden_layers)]
        if padding is None:
            pad = np.zeros(batch_size, np.int64)
        else:
            pad = np.asarray(padding.numpy() if isinstance(padding, Tensor) else padding)
            if pad.shape != (batch_size,) or pad.dtype.kind not in "iu" or (pad < 0).any() or (pad >= max_length).any():
                raise ValueError(f"KVCache: padding must be {batch_size} ints in [0, {max_length}), got {padding!r}")
        self.padding = Tensor(pad.astype(np.int64), device=device)
        self.length = Tensor(np.int64(0), device=device)
        self._masks: dict[Any, Tensor] = {}

    @property
    def batch_size(self) -> int:
        """The number of sequences."""
        return self.keys[0].shape[0] if self.keys else self.padding.shape[0]

    @property
    def max_length(self) -> int:
        """The number of slots of each sequence."""
        return self.keys[0].shape[2]

    @property
    def dtype(self) -> Any:
        """The dtype of the keys and values (the model's)."""
        return self.keys[0].dtype

    def _layer(self, index: int) -> _LayerCache:
        """Layer ``index``'s part of the cache, as :class:`~corvid.nn.CausalSelfAttention` takes it
        (``update(keys, values, sliding_window)``)."""
        return _LayerCache(self, index)

    def _positions(self, n: int) -> Tensor:
        """The positions ``(batch_size, n)`` of the next ``n`` tokens: their slots minus each
        sequence's padding (an int64 tensor computed from ``length``, no value read)."""
        slots = self.length + arange(n, dtype=int64, device=self.length.device)
        return slots.reshape(1, n) - self.padding.reshape(-1, 1)

    def _check(self, shape: tuple[int, int], dtype: Any) -> None:
        """ShapeError or TypeError unless ``(batch_size, T)`` new tokens of a model computing in
        ``dtype`` fit this cache."""
        b, t = shape
        if b != self.batch_size or t > self.max_length:
            raise ShapeError(f"KVCache: {t} new tokens of {b} sequences do not fit a cache of {self.batch_size} "
                             f"sequences of {self.max_length} slots")
        if dtype != self.dtype:
            raise TypeError(f"KVCache: the cache holds {self.dtype.name} keys and values, the model computes in "
                            f"{to_dtype(dtype).name}; make it with dtype=model.dtype")

    def _advance(self, n: int) -> None:
        """Count ``n`` more slots as written (the model calls it after its layers stored them)."""
        self.length = self.length + n
        self._masks = {}

    def _mask(self, n: int, window: int | None) -> Tensor:
        """Boolean ``(batch_size, 1, n, max_length)``: which slots each of the ``n`` new tokens sees
        (one tensor per window in a step, shared by the layers)."""
        mask = self._masks.get((n, window))
        if mask is None:
            device = self.length.device
            query = (self.length + arange(n, dtype=int64, device=device)).reshape(n, 1)
            slot = arange(self.max_length, dtype=int64, device=device).reshape(1, -1)
            keep = (slot <= query) & (slot >= self.padding.reshape(-1, 1, 1, 1))
            if window is not None:
                keep = keep & (query - slot < window)
            mask = self._masks[(n, window)] = keep
        return mask

    def _update(self, index: int, k: Tensor, v: Tensor, window: int | None) -> tuple[Tensor, Tensor, Tensor]:
        old_k, old_v = self.keys[index], self.values[index]
        if k.shape[:2] + k.shape[3:] != old_k.shape[:2] + old_k.shape[3:] or k.shape != v.shape:
            raise ShapeError(f"KVCache: keys {k.shape} and values {v.shape} do not fit layer {index}'s cache "
                             f"{old_k.shape}")
        n, size = k.shape[2], self.max_length
        # (stored first: the new keys' rotary embedding, cosines and sines, would otherwise be
        # recomputed for every slot the broadcast below writes)
        k, v = k.astype(old_k.dtype).contiguous(), v.astype(old_v.dtype).contiguous()
        slot = arange(size, dtype=int64, device=old_k.device)
        if n == 1:  # one token: broadcast it to the slot it goes to
            new_k = where((slot == self.length).reshape(size, 1), k, old_k)
            new_v = where((slot == self.length).reshape(size, 1), v, old_v)
        else:  # slot s takes token s - length where that is one of the n
            offset = slot - self.length
            inside = ((offset >= 0) & (offset < n)).reshape(size, 1)
            take = offset.clip(0, n - 1)
            new_k = where(inside, k[:, :, take], old_k)
            new_v = where(inside, v[:, :, take], old_v)
        self.keys[index], self.values[index] = new_k, new_v
        return new_k, new_v, self._mask(n, window)

    def __repr__(self) -> str:
        return (f"KVCache(batch_size={self.batch_size}, max_length={self.max_length}, layers={len(self.keys)}, "
                f"dtype={self.dtype.name})")


class _LayerCache:
    """One layer's view of a :class:`KVCache`, what :class:`~corvid.nn.CausalSelfAttention` updates."""

    __slots__ = ("cache", "index")

    def __init__(self, cache: KVCache, index: int):
        self.cache, self.index = cache, index

    def update(self, k: Tensor, v: Tensor, window: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Store keys and values ``(batch, kv_heads, T, head_dim)`` of ``T`` new tokens; return the
        layer's whole cache (keys, values) and the mask of the slots each new token sees."""
        return self.cache._update(self.index, k, v, window)


def _flatten(c: KVCache) -> tuple[list[Tensor], int]:
    return [*c.keys, *c.values, c.padding, c.length], len(c.keys)


def _unflatten(layers: int, leaves: list[Any]) -> KVCache:
    c = object.__new__(KVCache)
    c.keys, c.values = list(leaves[:layers]), list(leaves[layers:2 * layers])
    c.padding, c.length = leaves[2 * layers], leaves[2 * layers + 1]
    c._masks = {}
    return c


register_pytree_node(KVCache, _flatten, _unflatten)

"""Generating text with a :class:`~corvid.models.CausalLM`: :func:`sample`, and the loop behind
:meth:`CausalLM.generate` and :meth:`CausalLM.stream`.

A generation is a *prefill* then one *decode step* per new token. The prefill runs the prompts
through the model once, storing every layer's keys and values in a :class:`KVCache`, and picks
the first token from the last position's logits; each step runs the latest token alone, reading
the cache for the earlier ones. Both are ``cv.jit`` programs, kept per model (and released with
it) and reused by later calls:

* the decode step is traced once for a choice of sampling options (greedy or not, ``top_k``,
  whether ``top_p`` is set), and replayed for every token, every cache size and every batch of
  two or more prompts: the cache's number of slots and the batch are symbolic sizes of the
  program (``cv.jit(dynamic=...)``: its kernels read them when they run), the next slot is a
  tensor (``KVCache.length``), and the temperature and ``top_p`` are tensors too, so no value
  the graph depends on changes (a batch of one is a program of its own: sizes 1 are constants);
* the prefill is traced once per prompt-length *bucket* (and options): prompts are left-padded to
  16, 32, 64, 128 or 256 tokens, beyond that to a multiple of 256; its cache size and batch are
  symbolic too. (The prompt length stays a constant: the prefill's products run 10-30% faster
  with their row count known.)
* the cache holds the bucket plus ``max_new_tokens`` slots, rounded up to a multiple of 64.

The prefill's intermediate values have sizes that follow the prompt's length (a 512-token
prompt of a Llama-3.2-1B-shaped model: 0.28 GB of them), which the decode steps never ask for
again: once the prefill has run, the blocks of the sizes it asked for are given back to the
system (``Allocator.trim(since=...)``) rather than kept in the device's pool, so the decode
steps' memory does not come on top of them. The pool's other blocks (an earlier decode step's,
a training step's) stay.

Prompts of different lengths are left-padded (their padding is masked out and their positions
start at 0, as ``transformers`` does with an ``attention_mask``); a sequence that produced a
stop token gets ``pad_token_id`` from then on, and generation ends when every sequence has
stopped or after ``max_new_tokens`` tokens. Sampling draws from the logits divided by
``temperature``, keeping the ``top_k`` largest and then the smallest set of tokens whose
probability reaches ``top_p`` (the order of ``transformers``' warpers); ``temperature=0`` is
greedy decoding. The draws are a pure function of the ``key`` (:mod:`corvid.random`): the same
key gives the same tokens.

Phi-3's longrope switches to its long factors once a sequence passes the original context;
``transformers`` then recomputes the cache of the whole sequence, and so does the loop here,
once, at the same token.
"""

from __future__ import annotations

import math
import numbers
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .. import random as rnd
from ..autograd import no_grad
from ..creation import arange, zeros
from ..dtype import float32, uint32
from ..graph.node import Op
from ..nn.embedding import embedding
from ..nn.pytree import functional_call
from ..ops.elementwise import where
from ..quant import QuantizedEmbedding
from ..runtime.device import get_device
from ..tensor import Tensor
from ..transforms.jit import jit
from .cache import KVCache

__all__ = ["sample"]

_CACHE_STEP = 64  # cache sizes are multiples of this


def _bucket(n: int) -> int:
    """The padded length of a prompt of ``n`` tokens: 16, 32, 64, 128, 256, then multiples of 256."""
    if n <= 256:
        return max(16, 1 << (n - 1).bit_length())
    return -(-n // 256) * 256


def _check_sampling(temperature: Any, top_k: Any, top_p: Any) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not (
            math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, numbers.Real) or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be None or a number in (0, 1], got {top_p!r}")


def _order_key(x: Tensor) -> Tensor:
    """float32 ``x`` as uint32 keys in the same order (-inf smallest): the bits, with the sign
    bit flipped for a positive number and every bit for a negative one."""
    u = x.bitcast(uint32)
    return where((u >> 31) == 1, ~u, u | 0x80000000)


def _largest_key(keys: Tensor, feasible: Callable[[Tensor], Tensor]) -> Tensor:
    """The largest uint32 ``t`` (``(..., 1)``) for which ``feasible(keys >= t)`` holds, for a
    test that holds at 0 and fails from some ``t`` on: four bits at a time from the top, each
    pass testing the 16 values of the next four bits at once (``feasible`` takes the masks
    ``(..., 16, n)`` and gives ``(..., 16)``). Eight passes over ``keys``, where a sort would
    cost hundreds of kernels over a vocabulary."""
    best = zeros(keys.shape[:-1] + (1,), dtype=uint32, device=keys.device)
    nibbles = arange(16, dtype=uint32, device=keys.device)
    for shift in range(28, -1, -4):
        candidates = best + (nibbles << shift)  # (..., 16): candidate 0 is ``best``, which holds
        ok = feasible(keys.unsqueeze(-2) >= candidates.unsqueeze(-1))
        best = best + ((ok.sum(-1, keepdims=True) - 1).astype(uint32) << shift)
    return best


def _filter(logits: Tensor, temperature: Any, top_k: int | None, top_p: Any) -> Tensor:
    """float32 logits divided by the temperature, with -inf for the tokens top-k and top-p drop
    (``temperature`` and ``top_p`` may be numbers or 0-d tensors)."""
    x = logits.astype(float32) / temperature
    if top_k is not None and top_k < x.shape[-1]:
        # the k-th largest value: the largest one with at least k values at or above it
        keys = _order_key(x)
        kth = _largest_key(keys, lambda above: above.sum(-1) >= top_k)
        x = where(keys < kth, -math.inf, x)
    if top_p is not None:
        # the least likely token kept: the nucleus is every token up to the first (most likely
        # first) at which the probabilities reach top_p, i.e. the largest probability whose
        # tokens and the more likely ones together have at least top_p
        probs = x.softmax(-1).contiguous()  # (stored once, not recomputed by each pass)
        keys = _order_key(probs)
        least = _largest_key(keys, lambda above: where(above, probs.unsqueeze(-2), 0.0).sum(-1) >= top_p)
        x = where(keys < least, -math.inf, x)
    return x


def sample(logits: Tensor, key: Tensor | None = None, temperature: float = 1.0, top_k: int | None = None,
           top_p: float | None = None) -> Tensor:
    """The next token drawn from ``logits`` ``(..., vocab_size)``: int64 ids of shape ``logits.shape[:-1]``.

    The logits are divided by ``temperature``; ``top_k`` keeps only the ``top_k`` most likely
    tokens; ``top_p`` then keeps the *nucleus*, the most likely tokens whose probabilities, added
    in decreasing order, reach ``top_p`` (every token up to the first that reaches it; tokens
    exactly as likely as the last kept one are kept too). A token is then drawn from the softmax
    of what is left, a pure function of ``key`` (a :func:`corvid.random.key`; Gumbel-max, as
    :func:`corvid.random.categorical`). ``temperature=0`` is greedy: the most likely token (the
    first one on ties), no key needed.

    ValueError for a negative temperature, ``top_k < 1``, ``top_p`` outside ``(0, 1]``, or a
    missing key when sampling.

    >>> logits = cv.Tensor([[0.0, 3.0, 1.0, -1.0]])
    >>> sample(logits, temperature=0).tolist()
    [1]
    >>> key = cv.random.key(0)
    >>> sample(logits, key, top_k=1).tolist()                   # only the most likely one is left
    [1]
    >>> [sample(logits, k, top_p=0.9).item() for k in cv.random.split(key, 6)]   # tokens 1 and 2 only
    [1, 1, 1, 1, 1, 2]
    """
    _check_sampling(temperature, top_k, top_p)
    x = logits if isinstance(logits, Tensor) else Tensor(logits)
    if x.ndim < 1 or not x.dtype.is_float:
        raise ValueError(f"sample: logits must be floating-point, of shape (..., vocab_size), got {x.dtype.name} "
                         f"{x.shape}")
    if temperature == 0:
        return x.argmax(-1)
    if key is None:
        raise ValueError("sample: sampling (temperature > 0) needs a key (cv.random.key(seed)); temperature=0 "
                         "is greedy")
    return rnd.categorical(key, _filter(x, temperature, top_k, None if top_p == 1 else top_p))


def _choose(logits: Tensor, key: Tensor | None, temperature: Tensor | None, top_k: int | None,
            top_p: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """The next tokens and the key for the next step (``key`` None: greedy)."""
    if key is None:
        return logits.argmax(-1), None
    use, following = rnd.split(key)
    return rnd.categorical(use, _filter(logits, temperature, top_k, top_p)), following


class _Programs:
    """The jitted prefill and decode step of one model. They hold the model weakly (a program
    keeps no parameter: they are arguments), so a model's programs go when it goes."""

    def __init__(self, model: Any):
        ref = weakref.ref(model)

        def run(params: list[Tensor], table: Tensor | None, cache: KVCache, ids: Tensor, key: Tensor | None,
                temperature: Tensor | None, top_p: Tensor | None, names: tuple[str, ...],
                top_k: int | None) -> tuple[Tensor, KVCache, Any]:
            with no_grad():
                # (a quantized table, None here, is looked up by the model's own embedding layer)
                embeds = None if table is None else embedding(ids, table)
                logits = functional_call(ref(), dict(zip(names, params)), ids if table is None else None, cache=cache,
                                         logits_to_keep=1, inputs_embeds=embeds)
                token, key = _choose(logits[:, -1], key, temperature, top_k, top_p)
            return token.reshape(-1, 1), cache, key

        # the cache's slots and the batch are symbolic sizes (transforms/jit.py, dynamic=): a new
        # max_new_tokens or number of prompts replays the programs instead of tracing and compiling them
        sizes = {2: {0: "batch", 2: "slots"}, 3: {0: "batch"}}
        self.prefill = jit(run, static_argnums=(7, 8), dynamic=sizes)  # traced per prompt bucket
        self.step = jit(run, static_argnums=(7, 8), dynamic=sizes)  # traced once per choice of options


_PROGRAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _weights(model: Any) -> tuple[tuple[str, ...], list[Tensor], list[Tensor], Tensor | None]:
    """The names of the model's parameters and buffers, their values as the decode step reads them
    and as a long prefill does, and the token embedding matrix; all on the tensors' own memory.
    (Arguments of the programs, not constants frozen in them: new weights need no new trace.)

    (The forms are chosen for corvid's CPU matrix products: a weight passed as a ``requires_grad``
    leaf is read in place by ``x @ w.T``, best for the one row of a decode step and short prompts,
    where a plain weight's transposed view is first copied to a better layout, which pays from
    some 64 rows on. The embedding matrix is passed as a plain tensor, because a lookup in a
    leaf argument copies the whole matrix; so are buffers, which no matrix product reads as
    ``w.T`` (a quantized layer's weights and scales: a quantized embedding's are looked up by the
    model itself, and the table is None).)"""
    names, leaves, plain = [], [], []
    params = [(name, p, True) for name, p in model.named_parameters()]
    for name, p, is_param in [*params, *((name, b, False) for name, b in model.named_buffers())]:
        names.append(name)
        plain.append(_view(p))
        leaves.append(_view(p).requires_grad_() if is_param and p.dtype.is_float else plain[-1])
    emb = model.model.embed_tokens
    return tuple(names), leaves, plain, None if isinstance(emb, QuantizedEmbedding) else _view(emb.weight)


def _device(model: Any) -> str:
    """The device of the model's token embedding (of its quantized table's buffers when quantized:
    its ``weight`` would be the whole table dequantized)."""
    emb = model.model.embed_tokens
    return (emb.qweight if isinstance(emb, QuantizedEmbedding) else emb.weight).device


_PLAIN_ROWS = 64  # prompt tokens (over the batch) from which a prefill reads the plain weights


def _view(p: Tensor) -> Tensor:
    """A new tensor on the memory of ``p``, without its gradient mark."""
    p.realize()
    n = p.node
    if n.op is Op.VAR and n.src:  # (a leaf: its value is under the mark)
        n = n.src[0]
    return Tensor._from_node(n, p.device)


def _programs(model: Any) -> _Programs:
    p = _PROGRAMS.get(model)
    if p is None:
        p = _PROGRAMS[model] = _Programs(model)
    return p


def _prompts(input_ids: Any, attention_mask: Any, vocab_size: int) -> tuple[list[np.ndarray], int]:
    """Each prompt's tokens and the width ``transformers`` would see (the padded length)."""
    if isinstance(input_ids, Tensor):
        input_ids = input_ids.numpy()
    if isinstance(input_ids, Sequence) and input_ids and not isinstance(input_ids[0], numbers.Number):
        rows = [r.numpy() if isinstance(r, Tensor) else r for r in input_ids]
        if len({len(r) if isinstance(r, (Sequence, np.ndarray)) else -1 for r in rows}) == 1:
            input_ids = np.asarray(rows)  # (prompts of one length: a batch)
    if isinstance(input_ids, np.ndarray) or (isinstance(input_ids, Sequence) and input_ids
                                             and all(isinstance(t, numbers.Number) for t in input_ids)):
        ids = np.asarray(input_ids)
        if ids.ndim == 1:
            ids = ids[None]
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise ValueError(f"generate: input_ids must be token ids (batch, T) or (T,) with T >= 1, got shape "
                             f"{ids.shape}")
        rows = list(ids)
        if attention_mask is not None:
            mask = np.asarray(attention_mask.numpy() if isinstance(attention_mask, Tensor) else attention_mask)
            mask = mask[None] if mask.ndim == 1 else mask
            if mask.shape != ids.shape:
                raise ValueError(f"generate: attention_mask {mask.shape} must have the shape of input_ids {ids.shape}")
            rows = []
            for i, (row, keep) in enumerate(zip(ids, mask.astype(bool))):
                where_kept = np.flatnonzero(keep)
                if where_kept.size == 0 or where_kept[-1] - where_kept[0] + 1 != where_kept.size:
                    raise ValueError(f"generate: attention_mask row {i} must mark one run of at least one token "
                                     "(left or right padding)")
                rows.append(row[where_kept[0]:where_kept[-1] + 1])
        width = ids.shape[1]
    elif isinstance(input_ids, Sequence) and input_ids:
        if attention_mask is not None:
            raise ValueError("generate: attention_mask goes with a padded (batch, T) input_ids; a list of prompts "
                             "of different lengths needs none")
        rows = [np.asarray(r.numpy() if isinstance(r, Tensor) else r) for r in input_ids]
        if any(r.ndim != 1 or r.size == 0 for r in rows):
            raise ValueError("generate: each prompt of a list must be a non-empty sequence of token ids")
        width = max(r.size for r in rows)
    else:
        raise ValueError(f"generate: input_ids must be token ids (batch, T), (T,) or a list of prompts, got "
                         f"{input_ids!r}")
    for r in rows:
        if r.dtype.kind not in "iu" or (r < 0).any() or (r >= vocab_size).any():
            raise ValueError(f"generate: token ids must be integers in [0, {vocab_size}), got {r.tolist()}")
    return [r.astype(np.int64) for r in rows], width


def _token_set(tokens: Any, vocab_size: int, what: str) -> list[int]:
    if tokens is None:
        return []
    tokens = [tokens] if isinstance(tokens, numbers.Integral) else list(tokens)
    for t in tokens:
        if isinstance(t, bool) or not isinstance(t, numbers.Integral) or not 0 <= t < vocab_size:
            raise ValueError(f"generate: {what} must be token ids in [0, {vocab_size}), got {t!r}")
    return [int(t) for t in tokens]


def stream_tokens(model: Any, input_ids: Any, max_new_tokens: int = 32, temperature: float = 1.0,
                  top_k: int | None = None, top_p: float | None = None, key: Tensor | None = None,
                  stop_tokens: Any = None, attention_mask: Any = None,
                  pad_token_id: int | None = None) -> Iterator[list[int]]:
    """:meth:`CausalLM.stream`: the arguments checked now, the tokens computed as they are asked for."""
    c = model.config
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) or max_new_tokens < 0:
        raise ValueError(f"generate: max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    _check_sampling(temperature, top_k, top_p)
    prompts, width = _prompts(input_ids, attention_mask, c.vocab_size)
    stops = _token_set(c.eos_token_id if stop_tokens is None else stop_tokens, c.vocab_size, "stop_tokens")
    if pad_token_id is None:
        pad_token_id = c.pad_token_id if c.pad_token_id is not None else stops[0] if stops else 0
    pad = _token_set(pad_token_id, c.vocab_size, "pad_token_id")[0]
    device = _device(model)
    if temperature == 0:
        key = None
    elif key is None:  # a key from the global generator: cv.manual_seed makes the tokens reproducible
        key = rnd.random_bits((2,), device)[0]
    else:
        key = rnd._check_key(key, "generate")
    return _run(model, prompts, width, int(max_new_tokens), temperature, top_k, top_p, key, stops, pad, device)


def _run(model: Any, prompts: list[np.ndarray], width: int, n: int, temperature: float, top_k: int | None,
         top_p: float | None, key: Tensor | None, stops: list[int], pad: int, device: Any) -> Iterator[list[int]]:
    if n == 0:
        return
    batch, longest = len(prompts), max(p.size for p in prompts)
    bucket = _bucket(longest)
    slots = -(-(bucket + n) // _CACHE_STEP) * _CACHE_STEP
    history = np.full((batch, bucket + n), pad, np.int64)  # the tokens fed, padding on the left
    padding = [bucket - p.size for p in prompts]
    for row, p in zip(history, prompts):
        row[bucket - p.size:bucket] = p
    programs = _programs(model)
    names, leaves, plain, table = _weights(model)
    if top_k is not None and top_k >= model.config.vocab_size:
        top_k = None
    if key is None:
        t_temp = t_top_p = None
    else:
        t_temp = Tensor(np.float32(temperature), device=device)
        t_top_p = None if top_p is None or top_p == 1 else Tensor(np.float32(top_p), device=device)

    allocators = [get_device(d).allocator for d in (device if isinstance(device, tuple) else (device,))]

    def prefill(length: int) -> tuple[Tensor, KVCache, Any]:
        marks = [a.mark() for a in allocators]
        cache = KVCache(model.config, batch, slots, model.dtype, device, padding)
        params = plain if batch * length >= _PLAIN_ROWS else leaves
        out = programs.prefill(params, table, cache, Tensor(history[:, :length], device=device), key, t_temp,
                               t_top_p, names, top_k)
        for a, m in zip(allocators, marks):  # (the prompt-length-sized blocks it freed: see the module docstring)
            a.trim(since=m)
        return out

    rope = model.model.rotary_emb
    # the length (counted as transformers counts it, from the padded width) at which longrope recomputes
    switch = rope.original_max_position_embeddings if rope.long_inv_freq is not None else None
    token, cache, key = prefill(bucket)
    done = np.zeros(batch, bool)
    for i in range(n):
        if i:
            if switch is not None and width + i - 1 == switch:
                token, cache, key = prefill(bucket + i)
            else:
                token, cache, key = programs.step(leaves, table, cache, token, key, t_temp, t_top_p, names, top_k)
        got = token.numpy()[:, 0]
        history[:, bucket + i] = got
        out = np.where(done, pad, got)
        done |= np.isin(out, stops)
        yield out.tolist()
        if done.all():
            return


def generate_tokens(model: Any, input_ids: Any, max_new_tokens: int = 32, temperature: float = 1.0,
                    top_k: int | None = None, top_p: float | None = None, key: Tensor | None = None,
                    stop_tokens: Any = None, attention_mask: Any = None, pad_token_id: int | None = None,
                    stream: Callable[[list[int]], Any] | None = None) -> Tensor:
    """:meth:`CausalLM.generate`: the steps of :func:`stream_tokens` gathered into ``(batch, n)``."""
    steps = []
    for tokens in stream_tokens(model, input_ids, max_new_tokens, temperature, top_k, top_p, key, stop_tokens,
                          attention_mask, pad_token_id):
        if stream is not None:
            stream(tokens)
        steps.append(tokens)
    batch = len(steps[0]) if steps else len(_prompts(input_ids, attention_mask, model.config.vocab_size)[0])
    out = np.array(steps, np.int64).T if steps else np.zeros((batch, 0), np.int64)
    return Tensor(out, device=_device(model))


"""Random numbers from a counter-based generator computed inside kernels.

Element ``i`` of a draw is Threefry-2x32 (20 rounds) of the counter ``offset + i`` under a key
made from the seed. Nothing depends on how kernels are split or ordered, so the same seed gives
the same numbers whatever the schedule. The key and the counter offset enter the kernel as a
tiny input buffer, so every draw of the same shape reuses one compiled kernel.

Threads: the global generator (``manual_seed``, ``rand``, ``randn``, ``randint``) is one stream
shared by every thread. Each draw reserves its counters atomically, so two threads never get the
same numbers, but how their draws interleave decides which thread gets which numbers: for
reproducible numbers per thread, give each thread a key (``fold_in(key(seed), thread_index)``)
and use the key functions. Interceptors (a ``vmap`` or ``jit`` trace) are per thread.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Callable

import numpy as np

from .errors import ShapeError
from . import dtype as dt
from .dtype import DTypeLike
from .graph.node import Op, node
from .runtime.device import Buffer, canonical_device
from .tensor import Tensor

__all__ = ["PRNGKey", "bernoulli", "categorical", "fold_in", "key", "manual_seed", "normal", "permutation", "rand",
           "randint", "randint_key", "randn", "random_bits", "split", "threefry2x32", "truncated_normal", "uniform"]

_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
_state = {"seed": 0, "offset": 0}
_state_lock = threading.Lock()  # a draw reads and advances the offset as one step


def manual_seed(seed: int) -> None:
    """Reset the generator: later draws are a function of ``seed`` and the draw order only (the
    generator is shared by all threads: see the module docstring). TypeError for a non-int seed.

    >>> cv.manual_seed(0)
    >>> a = cv.rand(3)
    >>> cv.manual_seed(0)
    >>> cv.rand(3).tolist() == a.tolist()
    True
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    with _state_lock:
        _state["seed"], _state["offset"] = seed % (1 << 64), 0


def _rotl(x: Tensor, r: int) -> Tensor:
    return (x << r) | (x >> (32 - r))


def threefry2x32(key: tuple[Tensor, Tensor], x0: Tensor, x1: Tensor) -> tuple[Tensor, Tensor]:
    """The Threefry-2x32 block function with 20 rounds on uint32 tensors.

    ``key`` is a pair of uint32 words and ``(x0, x1)`` the two words of each counter block; returns
    the two encrypted words, elementwise (broadcasting). Every sampler here is built on it.

    >>> u32 = lambda *v: cv.Tensor(list(v), dtype=cv.uint32)
    >>> y0, y1 = cv.random.threefry2x32((u32(0), u32(0)), u32(0, 1), u32(0, 0))
    >>> y0.tolist(), y1.tolist()
    ([1797259609, 1351547692], [2579123966, 3235790642])
    """
    ks = (key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDA)
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(20):
        x0 = x0 + x1
        x1 = _rotl(x1, _ROTATIONS[i % 8]) ^ x0
        if i % 4 == 3:
            s = i // 4 + 1
            x0, x1 = x0 + ks[s % 3], x1 + ks[(s + 1) % 3] + s
    return x0, x1


class _ThreadStack(threading.local):
    """A stack (``append``, ``pop``, ``len``, ``[i]``) of which each thread sees its own."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def append(self, x: Any) -> None:
        self.items.append(x)

    def pop(self) -> Any:
        return self.items.pop()

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        return self.items[i]


# Functions that intercept draws, innermost last. Transforms install one while they trace a
# function: vmap (corvid/transforms/batching.py) to batch, share or forbid the draws made inside
# it, jit to record them. Each is called as ``interceptor(shape, device, outer)``, where
# ``outer(shape, device)`` draws through the next one out (the last one draws for real). Per
# thread: a trace in one thread must not take another thread's draws.
_interceptors: _ThreadStack = _ThreadStack()


def random_bits(shape: tuple[int, ...], device: str | None = None) -> tuple[Tensor, Tensor]:
    """Two independent uint32 words per element of ``shape`` from the global generator (advances it).

    >>> cv.manual_seed(0)
    >>> b0, b1 = cv.random.random_bits((2,))
    >>> b0.tolist(), b1.dtype
    ([1797259609, 1351547692], corvid.uint32)
    """
    return _draw(len(_interceptors), tuple(shape), canonical_device(device))


def _draw(level: int, shape: tuple[int, ...], device: str) -> tuple[Tensor, Tensor]:
    if level == 0:
        return _generate(shape, device)
    return _interceptors[level - 1](shape, device, lambda s, d: _draw(level - 1, tuple(s), d))


def _generate(shape: tuple[int, ...], device: str) -> tuple[Tensor, Tensor]:
    buf = params_buffer(math.prod(shape), device)
    params = Tensor._from_node(node(Op.BUFFER, (), buf, PARAMS_DTYPE, (PARAMS_SIZE,)), device)
    return bits_from_params(params, shape, device)


PARAMS_DTYPE, PARAMS_SIZE = dt.uint32, 4  # a draw's parameters: key (2 words), counter offset (2 words)


def params_buffer(n: int, device: str) -> Buffer:
    """The parameters of the next draw of ``n`` numbers as a uint32 buffer ``[key lo, key hi,
    offset lo, offset hi]``; advances the generator by ``n``."""
    with _state_lock:
        seed, offset = _state["seed"], _state["offset"]
        _state["offset"] = offset + n
    words = np.array([seed & 0xFFFFFFFF, seed >> 32, offset & 0xFFFFFFFF, (offset >> 32) & 0xFFFFFFFF],
                     dtype=np.uint32)
    buf = Buffer(canonical_device(device), PARAMS_DTYPE, PARAMS_SIZE)
    buf.copyin(words)
    return buf


def bits_from_params(params: Tensor, shape: tuple[int, ...], device: str | None = None) -> tuple[Tensor, Tensor]:
    """Two uint32 words per element of ``shape`` from a draw's parameters (see :func:`params_buffer`)."""
    n = math.prod(shape)
    k0, k1 = params[0], params[1]
    base = params[2].astype(dt.uint64) | (params[3].astype(dt.uint64) << 32)
    ctr = Tensor._from_node(node(Op.IOTA, (), None, dt.uint64, (n,)), canonical_device(device)) + base
    lo, hi = (ctr & 0xFFFFFFFF).astype(dt.uint32), (ctr >> 32).astype(dt.uint32)
    b0, b1 = threefry2x32((k0, k1), lo, hi)
    return b0.reshape(shape), b1.reshape(shape)


def _shape_of(shape: tuple[Any, ...]) -> tuple[int, ...]:
    from .creation import _shape, _varargs

    return _shape(_varargs(shape))


def _wide(t: Tensor) -> dt.DType:
    """The dtype the samplers compute in: float64, or float32 on a device with no float64
    arithmetic (WebGPU), where float32 results may then differ in the last bit between schedules
    (see :func:`randn`)."""
    from .runtime.device import get_device

    devices = t.device if isinstance(t.device, tuple) else (t.device,)
    return dt.float64 if all(get_device(d).has_float64 for d in devices) else dt.float32


def _uniform(bits: Tensor, d: dt.DType) -> Tensor:
    """[0, 1) from the top 24 bits (float32) — enough for every float type up to float32."""
    return ((bits >> 8).astype(dt.float32) * (1.0 / (1 << 24))).astype(d) if d is not dt.float64 else \
        (bits >> 8).astype(dt.float64) * (1.0 / (1 << 24))


def rand(*shape: Any, dtype: DTypeLike | None = None, device: str | None = None) -> Tensor:
    """Uniform samples in [0, 1) of ``shape`` from the global generator (:func:`manual_seed`), in
    the default float dtype or ``dtype`` (TypeError for a non-float one). :func:`uniform` takes a key.

    >>> cv.manual_seed(0)
    >>> x = cv.rand(2, 3)
    >>> x.shape, x.dtype, bool(((x >= 0) & (x < 1)).all())
    ((2, 3), corvid.float32, True)
    """
    d = dt.to_dtype(dtype or dt.default_float)
    if not d.is_float:
        raise TypeError(f"rand needs a float dtype, got {d.name}")
    b0, _ = random_bits(_shape_of(shape), device)
    return _uniform(b0, d)


def randn(*shape: Any, dtype: DTypeLike | None = None, device: str | None = None) -> Tensor:
    """Standard normal samples of ``shape`` (Box-Muller on two uniform words) from the global
    generator (:func:`manual_seed`). :func:`normal` takes a key.

    >>> cv.manual_seed(0)
    >>> x = cv.randn(1000)
    >>> x.shape, abs(x.mean().item()) < 0.1, abs(x.std().item() - 1) < 0.1
    ((1000,), True, True)
    """
    d = dt.to_dtype(dtype or dt.default_float)
    if not d.is_float:
        raise TypeError(f"randn needs a float dtype, got {d.name}")
    b0, b1 = random_bits(_shape_of(shape), device)
    # Computed in float64 and rounded to ``d``: vectorized (libmvec) and scalar libm log/cos may
    # differ in the last bit, and how a draw is later sliced or fused decides which one runs. The
    # float64 error is far below float32 resolution, so float32 and narrower results are the same
    # whatever the schedule (float64 results may differ in the last bit). On a device with no
    # float64 arithmetic (WebGPU) it is float32, which gives up that guarantee there.
    w = _wide(b0)
    u1 = 1.0 - _uniform(b0, w)  # (0, 1]: log is finite
    u2 = _uniform(b1, w)
    return ((-2.0 * u1.log()).sqrt() * (u2 * (2 * math.pi)).cos()).astype(d)


def randint(*args: Any, **kwargs: Any) -> Tensor:
    """Integers uniform in ``[low, high)``: ``randint(low, high=None, size=(), dtype=None, device=None)``
    from the global generator (``randint(n, size=...)`` means ``[0, n)``), or, with a key first,
    JAX's ``randint(key, shape, minval, maxval, dtype=None)`` (:func:`randint_key`). int64 unless
    ``dtype`` says otherwise; ValueError unless ``high > low``.

    >>> cv.manual_seed(0)
    >>> x = cv.randint(5, 8, size=(2, 3))
    >>> x.shape, x.dtype, set(x.reshape(-1).tolist()) <= {5, 6, 7}
    ((2, 3), corvid.int64, True)
    >>> cv.random.randint(cv.random.key(0), (5,), 0, 10).tolist()
    [5, 4, 2, 9, 1]
    """
    if args and isinstance(args[0], Tensor):
        return randint_key(*args, **kwargs)
    return _randint_global(*args, **kwargs)


def _randint_global(low: int, high: int | None = None, size: Any = (), dtype: DTypeLike | None = None,
                    device: str | None = None) -> Tensor:
    if high is None:
        low, high = 0, low
    if high <= low:
        raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
    d = dt.to_dtype(dtype or dt.default_int)
    b0, b1 = random_bits(_shape_of((size,) if isinstance(size, int) else (tuple(size),)), device)
    wide = b0.astype(dt.uint64) | (b1.astype(dt.uint64) << 32)
    return ((wide % (high - low)).astype(dt.int64) + low).astype(d)


_KEYS = object()  # (_key_bits: draw on the key's device: split and fold_in make keys)


# --- explicit keys (JAX style): key, split, fold_in, uniform, normal, truncated_normal, randint,
# bernoulli, categorical, permutation --------------------------------------------------------------------
# A key is a uint32 tensor of shape (2,) (a batch of keys: (..., 2)). Every function below is a
# pure function of its key, computed by the same Threefry kernels as the global generator, so the
# same key gives the same numbers on every device, in any kernel split, under jit and vmap.
# Samples are created where every creation function creates: on ``device=``, else the default device
# (a key made outside a ``with cv.default_device("CUDA"):`` block draws on CUDA inside it); the
# key is only their seed. Keys from split and fold_in stay on their key's device.


def key(seed: int, device: str | None = None) -> Tensor:
    """A key from an integer seed (any Python int; taken modulo 2**64): a uint32 tensor of shape
    (2,), the seed's high and low words (JAX's ``PRNGKey``; ``PRNGKey`` is the same function).
    Sampling with a key does not advance any state: the same key gives the same numbers.

    >>> cv.random.key(0)
    Tensor([0, 0], dtype=uint32)
    >>> cv.random.key(2**32 + 5)
    Tensor([1, 5], dtype=uint32)
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"key: seed must be an int, got {type(seed).__name__}")
    s = seed % (1 << 64)
    return Tensor(np.array([s >> 32, s & 0xFFFFFFFF], dtype=np.uint32), device=device)


PRNGKey = key


def _check_key(k: Any, name: str) -> Tensor:
    if not isinstance(k, Tensor) or k.dtype is not dt.uint32 or k.ndim < 1 or k.shape[-1] != 2:
        got = f"{k.dtype.name}{list(k.shape)}" if isinstance(k, Tensor) else type(k).__name__
        raise TypeError(f"{name}: expected a key (uint32 tensor of shape (2,), from cv.random.key), got {got}")
    if k.ndim != 1:
        raise ShapeError(f"{name}: expected a single key of shape (2,), got shape {k.shape}; "
                         "use cv.vmap over a batch of keys")
    return k


def _key_bits(k: Tensor, shape: tuple[int, ...], device: Any = _KEYS) -> tuple[Tensor, Tensor]:
    """Two uint32 words per element of ``shape``: Threefry of the counters 0..n-1 under ``k``,
    computed on ``device`` (None: the default device, as every creation function; the key's own
    for new keys). The key, 8 bytes, is copied there when it lives elsewhere."""
    dev = k.device if device is _KEYS or type(k.device) is tuple else canonical_device(device)
    if dev != k.device:
        k = k.to(dev)
    n = math.prod(shape)
    ctr = Tensor._from_node(node(Op.IOTA, (), None, dt.uint64, (n,)), dev)
    lo, hi = (ctr & 0xFFFFFFFF).astype(dt.uint32), (ctr >> 32).astype(dt.uint32)
    b0, b1 = threefry2x32((k[0], k[1]), lo, hi)
    return b0.reshape(shape), b1.reshape(shape)


def split(k: Tensor, num: int = 2) -> Tensor:
    """``num`` new independent keys, shape (num, 2): use one for a draw and split the other again,
    never the same key twice.

    >>> k = cv.random.key(0)
    >>> cv.random.split(k)
    Tensor([[1797259609, 2579123966],
            [1351547692, 3235790642]], dtype=uint32)
    >>> k1, k2 = cv.random.split(k)
    >>> cv.random.split(k, 3).shape
    (3, 2)
    """
    k = _check_key(k, "split")
    if not isinstance(num, int) or num < 0:
        raise ValueError(f"split: num must be a non-negative int, got {num!r}")
    b0, b1 = _key_bits(k, (num,))
    from .ops.movement import stack

    return stack([b0, b1], axis=-1)


def fold_in(k: Tensor, data: int) -> Tensor:
    """A new key that depends on ``k`` and the integer ``data`` (e.g. a step number, a thread index).

    >>> k = cv.random.key(0)
    >>> cv.random.fold_in(k, 1).shape
    (2,)
    >>> bool((cv.random.fold_in(k, 1) == cv.random.fold_in(k, 2)).all())
    False
    """
    k = _check_key(k, "fold_in")
    d = int(data) % (1 << 64)
    b0, b1 = threefry2x32((k[0], k[1]), k._const(d & 0xFFFFFFFF, dt.uint32, ()), k._const(d >> 32, dt.uint32, ()))
    from .ops.movement import stack

    return stack([b0, b1])


def _shape_arg(shape: Any) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def _float_dtype(dtype: DTypeLike | None, name: str) -> dt.DType:
    d = dt.to_dtype(dtype or dt.default_float)
    if not d.is_float:
        raise TypeError(f"{name} needs a float dtype, got {d.name}")
    return d


def uniform(k: Tensor, shape: Any = (), dtype: DTypeLike | None = None, minval: float = 0.0,
            maxval: float = 1.0, device: str | None = None) -> Tensor:
    """Uniform samples in ``[minval, maxval)`` of ``shape``, a pure function of the key ``k`` (JAX's
    ``uniform``); the default float dtype or ``dtype``.

    >>> k = cv.random.key(0)
    >>> [round(v, 4) for v in cv.random.uniform(k, (3,)).tolist()]
    [0.4185, 0.3147, 0.3932]
    >>> x = cv.random.uniform(k, (1000,), minval=-1.0, maxval=1.0)
    >>> -1 <= x.min().item() and x.max().item() < 1
    True
    """
    k, d = _check_key(k, "uniform"), _float_dtype(dtype, "uniform")
    b0, _ = _key_bits(k, _shape_arg(shape), device)
    u = _uniform(b0, _wide(b0))
    return (u * (maxval - minval) + minval).astype(d)


def normal(k: Tensor, shape: Any = (), dtype: DTypeLike | None = None, device: str | None = None) -> Tensor:
    """Standard normal samples of ``shape`` (Box-Muller on the key's two words per element), a pure
    function of the key ``k`` (JAX's ``normal``).

    >>> k = cv.random.key(0)
    >>> [round(v, 4) for v in cv.random.normal(k, (3,)).tolist()]
    [-0.8404, 0.0185, 0.9949]
    >>> cv.random.normal(k, (2, 3), dtype=cv.float64).dtype
    corvid.float64
    """
    k, d = _check_key(k, "normal"), _float_dtype(dtype, "normal")
    b0, b1 = _key_bits(k, _shape_arg(shape), device)
    w = _wide(b0)
    u1, u2 = 1.0 - _uniform(b0, w), _uniform(b1, w)
    return ((-2.0 * u1.log()).sqrt() * (u2 * (2 * math.pi)).cos()).astype(d)


def truncated_normal(k: Tensor, lower: float, upper: float, shape: Any = (), dtype: DTypeLike | None = None,
                     device: str | None = None) -> Tensor:
    """Standard normal samples conditioned on ``lower <= x <= upper`` (inverse-CDF method), as JAX's
    ``truncated_normal``. ValueError unless ``lower < upper``.

    >>> x = cv.random.truncated_normal(cv.random.key(0), -1.0, 1.0, (1000,))
    >>> -1 <= x.min().item() and x.max().item() <= 1
    True
    """
    from .ops.special import erfinv

    k, d = _check_key(k, "truncated_normal"), _float_dtype(dtype, "truncated_normal")
    if not lower < upper:
        raise ValueError(f"truncated_normal: lower ({lower}) must be below upper ({upper})")
    a, b = math.erf(lower / math.sqrt(2)), math.erf(upper / math.sqrt(2))
    b0, _ = _key_bits(k, _shape_arg(shape), device)
    u = _uniform(b0, _wide(b0)) * (b - a) + a  # uniform in [erf(lower/√2), erf(upper/√2))
    x = erfinv(u) * math.sqrt(2)
    return x.clip(lower, upper).astype(d)


def randint_key(k: Tensor, shape: Any, minval: int, maxval: int, dtype: DTypeLike | None = None,
                device: str | None = None) -> Tensor:
    """Integers uniform in ``[minval, maxval)`` (``cv.random.randint`` with a key), int64 unless
    ``dtype`` says otherwise. ValueError unless ``maxval > minval``.

    >>> cv.random.randint_key(cv.random.key(0), (5,), 0, 10).tolist()
    [5, 4, 2, 9, 1]
    """
    k = _check_key(k, "randint")
    if maxval <= minval:
        raise ValueError(f"randint: maxval ({maxval}) must be greater than minval ({minval})")
    d = dt.to_dtype(dtype or dt.default_int)
    b0, b1 = _key_bits(k, _shape_arg(shape), device)
    wide = b0.astype(dt.uint64) | (b1.astype(dt.uint64) << 32)
    return ((wide % (maxval - minval)).astype(dt.int64) + minval).astype(d)


def bernoulli(k: Tensor, p: Any = 0.5, shape: Any = None, device: str | None = None) -> Tensor:
    """Booleans that are True with probability ``p`` (a float or a tensor broadcast to ``shape``;
    a tensor ``p`` decides the device). Without ``shape``, one per element of ``p``.

    >>> k = cv.random.key(0)
    >>> cv.random.bernoulli(k, 0.5, (6,)).tolist()
    [True, True, True, False, False, True]
    >>> cv.random.bernoulli(k, cv.Tensor([0.0, 1.0])).tolist()
    [False, True]
    """
    k = _check_key(k, "bernoulli")
    pt = p if isinstance(p, Tensor) else Tensor(float(p), device=device)
    shp = pt.shape if shape is None else _shape_arg(shape)
    b0, _ = _key_bits(k, shp, pt.device)
    w = _wide(b0)
    return _uniform(b0, w) < pt.astype(w)


def categorical(k: Tensor, logits: Tensor, axis: int = -1, shape: Any = None) -> Tensor:
    """Indices drawn with probabilities ``softmax(logits)`` along ``axis`` (Gumbel-max), int64, of
    the shape of ``logits`` without ``axis`` (or ``shape``, to which that broadcasts).

    >>> k = cv.random.key(0)
    >>> cv.random.categorical(k, cv.Tensor([0.0, 0.0, 10.0])).item()  # almost surely 2
    2
    >>> cv.random.categorical(k, cv.zeros(4), shape=(6,)).tolist()
    [1, 3, 0, 0, 2, 2]
    """
    from .ops.manipulation import moveaxis
    from .ops.movement import normalize_axis

    k = _check_key(k, "categorical")
    ax = normalize_axis(axis, logits.ndim)
    batch = logits.shape[:ax] + logits.shape[ax + 1:]
    out_shape = batch if shape is None else _shape_arg(shape)
    n = logits.shape[ax]
    b0, _ = _key_bits(k, out_shape + (n,), logits.device)  # (on the logits' device)
    w = _wide(b0)
    moved = moveaxis(logits.astype(w), ax, -1)
    g = -(-(1.0 - _uniform(b0, w)).log()).log()  # Gumbel noise (u in (0, 1])
    return (moved + g).argmax(axis=-1)


def permutation(k: Tensor, x: Any, device: str | None = None) -> Tensor:
    """A random permutation of ``arange(x)`` (an int; on ``device``) or of ``x``'s first axis (a
    tensor; on its device).

    >>> k = cv.random.key(0)
    >>> cv.random.permutation(k, 5).tolist()
    [1, 2, 0, 4, 3]
    >>> cv.random.permutation(k, cv.Tensor([10, 20, 30])).tolist()
    [20, 30, 10]
    """
    k = _check_key(k, "permutation")
    n = x if isinstance(x, int) else x.shape[0]
    b0, b1 = _key_bits(k, (n,), device if isinstance(x, int) else x.device)
    order = (b0.astype(dt.uint64) << 32 | b1.astype(dt.uint64)).argsort(stable=True)
    if isinstance(x, int):
        return order
    from .ops.indexing import take

    return take(x, order, axis=0)

"""Random numbers from a counter-based generator computed inside kernels.

Element ``i`` of a draw is Threefry-2x32 (20 rounds) of the counter ``offset + i`` under a key
made from the seed. Nothing depends on how kernels are split or ordered, so the same seed gives
the same numbers whatever the schedule. The key and the counter offset enter the kernel as a
tiny input buffer, so every draw of the same shape reuses one compiled kernel.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from . import dtype as dt
from .dtype import DTypeLike
from .graph.node import Op, node
from .runtime.device import Buffer, canonical_device
from .tensor import Tensor

_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
_state = {"seed": 0, "offset": 0}


def manual_seed(seed: int) -> None:
    """Reset the generator: later draws are a function of ``seed`` and the draw order only."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    _state["seed"], _state["offset"] = seed % (1 << 64), 0


def _rotl(x: Tensor, r: int) -> Tensor:
    return (x << r) | (x >> (32 - r))


def threefry2x32(key: tuple[Tensor, Tensor], x0: Tensor, x1: Tensor) -> tuple[Tensor, Tensor]:
    """The Threefry-2x32 block function with 20 rounds on uint32 tensors."""
    ks = (key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDA)
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(20):
        x0 = x0 + x1
        x1 = _rotl(x1, _ROTATIONS[i % 8]) ^ x0
        if i % 4 == 3:
            s = i // 4 + 1
            x0, x1 = x0 + ks[s % 3], x1 + ks[(s + 1) % 3] + s
    return x0, x1


# Functions that intercept draws, innermost last. Transforms install one while they trace a
# function: vmap (corvid/transforms/batching.py) to batch, share or forbid the draws made inside
# it, jit to record them. Each is called as ``interceptor(shape, device, outer)``, where
# ``outer(shape, device)`` draws through the next one out (the last one draws for real).
_interceptors: list[Callable[..., tuple[Tensor, Tensor]]] = []


def random_bits(shape: tuple[int, ...], device: str | None = None) -> tuple[Tensor, Tensor]:
    """Two independent uint32 words per element of ``shape`` (advances the generator)."""
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


def _uniform(bits: Tensor, d: dt.DType) -> Tensor:
    """[0, 1) from the top 24 bits (float32) — enough for every float type up to float32."""
    return ((bits >> 8).astype(dt.float32) * (1.0 / (1 << 24))).astype(d) if d is not dt.float64 else \
        (bits >> 8).astype(dt.float64) * (1.0 / (1 << 24))


def rand(*shape: Any, dtype: DTypeLike | None = None, device: str | None = None) -> Tensor:
    """Uniform samples in [0, 1) of ``shape``."""
    d = dt.to_dtype(dtype or dt.default_float)
    if not d.is_float:
        raise TypeError(f"rand needs a float dtype, got {d.name}")
    b0, _ = random_bits(_shape_of(shape), device)
    return _uniform(b0, d)


def randn(*shape: Any, dtype: DTypeLike | None = None, device: str | None = None) -> Tensor:
    """Standard normal samples of ``shape`` (Box-Muller on two uniform words)."""
    d = dt.to_dtype(dtype or dt.default_float)
    if not d.is_float:
        raise TypeError(f"randn needs a float dtype, got {d.name}")
    b0, b1 = random_bits(_shape_of(shape), device)
    # Computed in float64 and rounded to ``d``: vectorized (libmvec) and scalar libm log/cos may
    # differ in the last bit, and how a draw is later sliced or fused decides which one runs. The
    # float64 error is far below float32 resolution, so float32 and narrower results are the same
    # whatever the schedule (float64 results may differ in the last bit).
    u1 = 1.0 - _uniform(b0, dt.float64)  # (0, 1]: log is finite
    u2 = _uniform(b1, dt.float64)
    return ((-2.0 * u1.log()).sqrt() * (u2 * (2 * math.pi)).cos()).astype(d)


def randint(low: int, high: int | None = None, size: Any = (), dtype: DTypeLike | None = None,
            device: str | None = None) -> Tensor:
    """Integers uniform in ``[low, high)`` (``randint(n, size=...)`` means ``[0, n)``)."""
    if high is None:
        low, high = 0, low
    if high <= low:
        raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
    d = dt.to_dtype(dtype or dt.default_int)
    b0, b1 = random_bits(_shape_of((size,) if isinstance(size, int) else (tuple(size),)), device)
    wide = b0.astype(dt.uint64) | (b1.astype(dt.uint64) << 32)
    return ((wide % (high - low)).astype(dt.int64) + low).astype(d)

"""The workloads: inputs, the same computation written for each framework, and how to rate it.

Each workload's ``ops`` maps a framework name to a function of the framework's own arrays. Sizes
come in two flavours: full (what the table quotes) and ``quick`` (tiny, for the smoke test).
``target`` is the issue's goal for numpy_time / corvid_time (issue 24: the matrix products, 1024² to
4096², >= 0.9x numpy); ``peer_target`` = (peer, ratio) a goal against a named peer (issue 5: the
5-op chain >= 3x JAX, the sum as fast as PyTorch, softmax >= 2x JAX; issue 24: conv2d >= 1.0x
PyTorch), judged only where that peer is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

MB = 1 << 20


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    make_inputs: Callable[[np.random.Generator, bool], tuple[np.ndarray, ...]]  # (rng, quick)
    ops: dict[str, Callable]
    rate: Callable[[tuple[np.ndarray, ...]], tuple[float, str]]  # (work per call, unit): bytes → GB/s, flops → GFLOP/s
    target: float | None  # None: reported, no target set by the issue
    rtol: float
    atol: float
    peer_target: tuple[str, float] | None = None  # (peer, its time / corvid's time at least)
    # calls take turns over this many copies of the inputs: with several whose total passes the
    # last-level cache, every call reads its data from memory, not what the one before left cached
    copies: int = 1


def _torch():
    import torch

    return torch


def _jnp():
    import jax.numpy as jnp

    return jnp


def _jax_nn():
    import jax

    return jax.nn


# --- elementwise chain --------------------------------------------------------------------------

def _chain_inputs(rng: np.random.Generator, quick: bool) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal(4096 if quick else 16 * MB, dtype=np.float32),)


CHAIN = Workload(
    "elementwise_chain", "((x*1.5+0.5).relu()*x).exp(), 16M float32", _chain_inputs,
    {
        "corvid": lambda x: ((x * 1.5 + 0.5).relu() * x).exp(),
        "numpy": lambda x: np.exp(np.maximum(x * np.float32(1.5) + np.float32(0.5), np.float32(0)) * x),
        "torch": lambda x: ((x * 1.5 + 0.5).relu() * x).exp(),
        "jax": lambda x: _jnp().exp(_jnp().maximum(x * 1.5 + 0.5, 0) * x),
    },
    rate=lambda ins: (2 * ins[0].nbytes, "GB/s"),  # read x, write the result
    target=3.0, rtol=1e-5, atol=1e-6, peer_target=("jax", 3.0))


# --- sum ------------------------------------------------------------------------------------------

def _sum_inputs(rng: np.random.Generator, quick: bool) -> tuple[np.ndarray, ...]:
    return (rng.random(4096 if quick else 16 * MB, dtype=np.float32),)


SUM = Workload(
    "sum", "x.sum(), 16M float32", _sum_inputs,
    {
        "corvid": lambda x: x.sum(),
        "numpy": lambda x: x.sum(),
        "torch": lambda x: x.sum(),
        "jax": lambda x: _jnp().sum(x),
    },
    rate=lambda ins: (ins[0].nbytes, "GB/s"),
    target=1.0, rtol=1e-4, atol=0.0,  # float32 sums of 16M terms differ by summation order
    peer_target=("torch", 1.0))


# The same sum, each call on the next of 4 copies (256 MB): the row above re-reads one 64 MB
# buffer, so what the 32 MB L3 keeps of it from the call before (which depends on the order the
# previous call read it in, and on the other framework's call in between) swings that row's
# figures by up to 40% from run to run; here every byte comes from memory.
SUM_COLD = Workload(
    "sum_cold", "x.sum(), 16M float32, 4 copies in turn (read from memory)", _sum_inputs, SUM.ops,
    rate=SUM.rate, target=1.0, rtol=1e-4, atol=0.0, peer_target=("torch", 1.0), copies=4)


# --- softmax --------------------------------------------------------------------------------------

def _softmax_inputs(rng: np.random.Generator, quick: bool) -> tuple[np.ndarray, ...]:
    n = 64 if quick else 4096
    return (rng.standard_normal((n, n), dtype=np.float32),)


def _np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


SOFTMAX = Workload(
    "softmax", "x.softmax(-1), 4096x4096 float32", _softmax_inputs,
    {
        "corvid": lambda x: x.softmax(-1),
        "numpy": _np_softmax,
        "torch": lambda x: _torch().softmax(x, -1),
        "jax": lambda x: _jax_nn().softmax(x, axis=-1),
    },
    rate=lambda ins: (2 * ins[0].nbytes, "GB/s"),
    target=3.0, rtol=1e-5, atol=1e-7, peer_target=("jax", 2.0))


# --- matmul ---------------------------------------------------------------------------------------

def _matmul(n: int, quick_n: int) -> Workload:
    def inputs(rng: np.random.Generator, quick: bool) -> tuple[np.ndarray, ...]:
        m = quick_n if quick else n
        return rng.standard_normal((m, m), dtype=np.float32), rng.standard_normal((m, m), dtype=np.float32)

    mm = lambda a, b: a @ b  # noqa: E731  (the same operator in every framework)
    return Workload(
        f"matmul_{n}", f"a @ b, {n}x{n} float32", inputs,
        {"corvid": mm, "numpy": mm, "torch": mm, "jax": mm},
        rate=lambda ins: (2.0 * ins[0].shape[0] ** 3, "GFLOP/s"),
        target=0.9, rtol=1e-3, atol=1e-3)  # issue 24: >= 0.9x numpy, 1024^2 to 4096^2 (issue 5 asked 0.8x)


# --- array namespace (issue 4): linalg and indexing; the issue asks to report these ----------------

def _spd_inputs(rng: np.random.Generator, quick: bool) -> tuple[np.ndarray, ...]:
    n = 32 if quick else 1024
    a = rng.standard_normal((n, n), dtype=np.float32)
    return (a @ a.T / n + np.eye(n, dtype=np.float32), rng.standard_normal((n, 1), dtype=np.float32))


def _cv():
    import corvid

    return corvid


SOLVE = Workload(
    "solve_1024", "linalg.solve(a, b), 1024x1024 float32 (host LAPACK kernel)", _spd_inputs,
    {"corvid": lambda a, b: _cv().linalg.solve(a, b), "numpy": np.linalg.solve,
     "torch": lambda a, b: _torch().linalg.solve(a, b), "jax": lambda a, b: _jnp().linalg.solve(a, b)},
    rate=lambda ins: (2 / 3 * ins[0].shape[0] ** 3, "GFLOP/s"), target=None, rtol=1e-2, atol=1e-2)

CHOLESKY = Workload(
    "cholesky_1024", "linalg.cholesky(a), 1024x1024 float32 (host LAPACK kernel)", lambda r, q: _spd_inputs(r, q)[:1],
    {"corvid": lambda a: _cv().linalg.cholesky(a), "numpy": np.linalg.cholesky,
     "torch": lambda a: _torch().linalg.cholesky(a), "jax": lambda a: _jnp().linalg.cholesky(a)},
    rate=lambda ins: (1 / 3 * ins[0].shape[0] ** 3, "GFLOP/s"), target=None, rtol=1e-3, atol=1e-3)


def _kernels_backend(fn):
    """``fn`` run with corvid's own-kernel linalg backend (``cv.linalg.use_backend("kernels")``)."""
    def run(*args):
        with _cv().linalg.use_backend("kernels"):
            return fn(*args)
    return run


SOLVE_KERNELS = Workload(
    "solve_kernels_1024", "linalg.solve(a, b), 1024x1024 float32 (corvid's own kernels: blocked LU, no LAPACK)",
    _spd_inputs,
    {"corvid": _kernels_backend(lambda a, b: _cv().linalg.solve(a, b)), "numpy": np.linalg.solve,
     "torch": lambda a, b: _torch().linalg.solve(a, b), "jax": lambda a, b: _jnp().linalg.solve(a, b)},
    rate=lambda ins: (2 / 3 * ins[0].shape[0] ** 3, "GFLOP/s"), target=None, rtol=1e-2, atol=1e-2)

CHOLESKY_KERNELS = Workload(
    "cholesky_kernels_1024", "linalg.cholesky(a), 1024x1024 float32 (corvid's own kernels: recursive blocked, no "
    "LAPACK)", lambda r, q: _spd_inputs(r, q)[:1],
    {"corvid": _kernels_backend(lambda a: _cv().linalg.cholesky(a)), "numpy": np.linalg.cholesky,
     "torch": lambda a: _torch().linalg.cholesky(a), "jax": lambda a: _jnp().linalg.cholesky(a)},
    rate=lambda ins: (1 / 3 * ins[0].shape[0] ** 3, "GFLOP/s"), target=None, rtol=1e-3, atol=1e-3)


def _gather_inputs(rng: np.random.Generator, quick: bool) -> tuple[np.ndarray, ...]:
    rows, cols, k = (64, 32, 8) if quick else (4096, 256, 64)
    return rng.standard_normal((rows, cols), dtype=np.float32), rng.integers(0, cols, size=(rows, k))


GATHER = Workload(
    "gather", "take_along_axis(x, idx, 1): 4096x256 float32, 64 indices per row", _gather_inputs,
    {"corvid": lambda x, i: _cv().take_along_axis(x, i, axis=1), "numpy": lambda x, i: np.take_along_axis(x, i, 1),
     "torch": lambda x, i: _torch().gather(x, 1, i), "jax": lambda x, i: _jnp().take_along_axis(x, i, axis=1)},
    rate=lambda ins: (ins[1].size * 4 * 2, "GB/s"), target=None, rtol=0, atol=0)


# --- fft (issue 4): corvid's own kernels (mixed radix, Bluestein for a prime) against numpy's pocketfft

def _fft_inputs(n: int, quick_n: int, real: bool = False):
    def make(rng: np.random.Generator, quick: bool) -> tuple[np.ndarray, ...]:
        m = quick_n if quick else n
        if real:
            return (rng.standard_normal(m, dtype=np.float32),)
        return ((rng.standard_normal(m) + 1j * rng.standard_normal(m)).astype(np.complex64),)
    return make


def _fft(name: str, n: int, quick_n: int, what: str) -> Workload:
    return Workload(
        name, f"fft.fft(x), {n} complex64 ({what})", _fft_inputs(n, quick_n),
        {"corvid": lambda x: _cv().fft.fft(x), "numpy": np.fft.fft,
         "torch": lambda x: _torch().fft.fft(x), "jax": lambda x: _jnp().fft.fft(x)},
        rate=lambda ins: (5 * ins[0].size * np.log2(ins[0].size), "GFLOP/s"), target=None, rtol=1e-3,
        atol=1e-3 * np.sqrt(n))


FFT_POW2 = _fft("fft_2^20", 1 << 20, 256, "radix 16")
FFT_PRIME = _fft("fft_prime_1000003", 1000003, 257, "a prime length: Bluestein")
# a real input: a half-length complex transform plus a split pass; rated as half a complex fft's flops
FFT_REAL = Workload(
    "rfft_2^20", f"fft.rfft(x), {1 << 20} float32 (half-length complex transform)",
    _fft_inputs(1 << 20, 256, real=True),
    {"corvid": lambda x: _cv().fft.rfft(x), "numpy": np.fft.rfft,
     "torch": lambda x: _torch().fft.rfft(x), "jax": lambda x: _jnp().fft.rfft(x)},
    rate=lambda ins: (2.5 * ins[0].size * np.log2(ins[0].size), "GFLOP/s"), target=None, rtol=1e-3,
    atol=1e-3 * np.sqrt(1 << 20))


def _scatter_inputs(rng: np.random.Generator, quick: bool) -> tuple[np.ndarray, ...]:
    rows, cols, k = (64, 32, 8) if quick else (4096, 256, 64)
    return (rng.standard_normal((rows, cols), dtype=np.float32), rng.integers(0, cols, size=(rows, k)),
            rng.standard_normal((rows, k), dtype=np.float32))


def _np_scatter_add(x: np.ndarray, idx: np.ndarray, src: np.ndarray) -> np.ndarray:
    out = x.copy()
    np.add.at(out, (np.arange(x.shape[0])[:, None], idx), src)
    return out


SCATTER = Workload(
    "scatter_add", "scatter_reduce(x, 1, idx, src, 'sum'): 4096x256 float32, 64 updates per row (duplicates add)",
    _scatter_inputs,
    {"corvid": lambda x, i, s: _cv().scatter_reduce(x, 1, i, s, "sum"), "numpy": _np_scatter_add,
     "torch": lambda x, i, s: x.scatter_add(1, i, s), "jax": lambda x, i, s: x.at[_jnp().arange(x.shape[0])[:, None], i].add(s)},
    rate=lambda ins: (ins[1].size * 4 * 3, "GB/s"), target=None, rtol=1e-4, atol=1e-4)


# --- convolution (issue 5: >= PyTorch's 85 GFLOP/s on this machine class; issue 24: >= 1.0x torch, same run) --

def _conv_inputs(rng: np.random.Generator, quick: bool) -> tuple[np.ndarray, ...]:
    n, c, hw, o = (2, 4, 8, 4) if quick else (32, 64, 56, 64)
    return (rng.standard_normal((n, c, hw, hw), dtype=np.float32),
            (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32))


def _np_conv2d(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """3x3, padding 1, stride 1: windows of the padded input contracted with the weights (BLAS)."""
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), (2, 3))
    return np.tensordot(windows, w, axes=((1, 4, 5), (1, 2, 3))).transpose(0, 3, 1, 2)


def _jax_conv(x, w):
    import jax

    return jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)))


CONV2D = Workload(
    "conv2d", "conv2d(x, w, padding=1): x 32x64x56x56, w 64x64x3x3, float32", _conv_inputs,
    {"corvid": lambda x, w: _cv().conv2d(x, w, padding=1), "numpy": _np_conv2d,
     "torch": lambda x, w: _torch().nn.functional.conv2d(x, w, padding=1), "jax": _jax_conv},
    rate=lambda ins: (2.0 * ins[0].shape[0] * ins[1].shape[0] * ins[0].shape[1] * 9 * ins[0].shape[2] * ins[0].shape[3],
                      "GFLOP/s"), target=None, rtol=1e-3, atol=1e-3, peer_target=("torch", 1.0))


WORKLOADS: list[Workload] = [CHAIN, SUM, SUM_COLD, SOFTMAX, _matmul(1024, 32), _matmul(2048, 48),
                             _matmul(4096, 64), CONV2D, SOLVE, CHOLESKY,
                             SOLVE_KERNELS, CHOLESKY_KERNELS, GATHER, SCATTER, FFT_POW2, FFT_PRIME, FFT_REAL]

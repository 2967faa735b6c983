"""corvid's benchmark suite: ``python -m benchmarks``.

Runs a fixed set of workloads (a fused elementwise chain, a full sum, a row softmax, three matrix
products, a convolution, linalg, indexing, fft) and the transform/overhead workloads of
:mod:`benchmarks.transforms` (graph-building cost per op, a jitted call, a jitted MLP training
step), :mod:`benchmarks.training` (the MNIST CNN step), :mod:`benchmarks.models` (a GPT forward)
and :mod:`benchmarks.blocks` (one transformer block's forward) on corvid and on every peer
framework that is importable (numpy always; torch and jax when installed), in one process, and
prints tables of medians, throughputs, ratios and targets; then :mod:`benchmarks.kernels`' check
warns about each compute-bound corvid kernel under half of the measured peak.
See ``python -m benchmarks --help`` and :mod:`benchmarks.harness`.
"""

import os

# numpy's OpenBLAS runs its own threads, which spin for 2^28 cycles (~0.1 s) after each call unless
# told otherwise, read when numpy loads it: a corvid kernel timed right after a numpy call shared
# its cores with them (the 1024^2 matmul, interleaved with numpy's: 210 GFLOP/s, 458 with this).
# 2^20 cycles (~0.3 ms) is about corvid's own pool's spin. Set OPENBLAS_THREAD_TIMEOUT to compare.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "20")

# Every framework's OpenMP pool gets the policy corvid's own pool uses (idle threads spin for a few
# hundred microseconds, then sleep: corvid/runtime/compiler.py), set before any of them loads its
# OpenMP runtime: otherwise the figures depend on import order, and a pool left spinning for
# milliseconds (libgomp's default) by one framework slows the next one's kernels (torch's CNN step
# on 2 busy cores: 140 ms sleeping, 350-680 ms spinning). Set OMP_WAIT_POLICY or GOMP_SPINCOUNT
# yourself to compare another policy.
from corvid.runtime.compiler import _OMP_SPIN_ENV, _OMP_USER_ENV  # noqa: E402  (loads no OpenMP)

if not any(k in os.environ for k in _OMP_USER_ENV):
    os.environ.update(_OMP_SPIN_ENV)

from .harness import ALL, main, run_benchmarks  # noqa: E402
from .transforms import OVERHEADS  # noqa: E402
from .workloads import WORKLOADS  # noqa: E402

__all__ = ["ALL", "OVERHEADS", "WORKLOADS", "main", "run_benchmarks"]

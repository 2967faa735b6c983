"""corvid's benchmark suite: ``python -m benchmarks``.

Runs a fixed set of workloads (a fused elementwise chain, a full sum, a row softmax, two matrix
products) on corvid and on every peer framework that is importable (numpy always; torch and jax
when installed), in one process, and prints one table of medians, throughputs and ratios.
See ``python -m benchmarks --help`` and :mod:`benchmarks.harness`.
"""

from .harness import main, run_benchmarks
from .workloads import WORKLOADS

__all__ = ["WORKLOADS", "main", "run_benchmarks"]

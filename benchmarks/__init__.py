"""corvid's benchmark suite: ``python -m benchmarks``.

Runs a fixed set of workloads (a fused elementwise chain, a full sum, a row softmax, two matrix
products) and the transform/overhead workloads of :mod:`benchmarks.transforms` (graph-building cost
per op, a jitted call, a jitted MLP training step) on corvid and on every peer framework that is importable (numpy always; torch and jax
when installed), in one process, and prints one table of medians, throughputs and ratios.
See ``python -m benchmarks --help`` and :mod:`benchmarks.harness`.
"""

from .harness import ALL, main, run_benchmarks
from .transforms import OVERHEADS
from .workloads import WORKLOADS

__all__ = ["ALL", "OVERHEADS", "WORKLOADS", "main", "run_benchmarks"]

"""Host time per eager op on the CUDA device's code path, without a GPU: ``python -m benchmarks.dispatch``.

On a GPU an eager op (``(a @ b).realize()``, ``F.layer_norm(x).realize()``) costs its kernel plus
the host's work around it: building the graph, planning, launching. For the GPU report's eager
rows (the products, layer norm, ``x + 1``) that host work was the gap to PyTorch on an H200 (the
bfloat16 product: 188 us in cuBLASLt, 308 us eager). This measures the host's share alone, on the
real :class:`~corvid.runtime.cuda.CUDADevice` over the test suite's stand-in driver and stand-in
cuBLASLt (``tests/test_cuda_runtime.py``, ``tests/test_cublaslt.py``), with every kernel launch and
library call made a no-op once warm: what remains is corvid's Python, per call, on this machine
(the GPU machines' CPUs ran the same Python about 1.5 to 2 times slower). Run from the repository
root (it imports ``tests``). Figures are the minimum over repeats of a loop of calls.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

import numpy as np

DEVICE = "DISPATCHCUDA"


def _time(call: Callable[[], Any], calls: int, repeats: int) -> float:
    """Seconds per call: the minimum over ``repeats`` loops of ``calls`` calls (after a warm-up)."""
    for _ in range(max(calls // 10, 5)):
        call()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def ops(cv: Any, device: str) -> dict[str, Callable[[], Any]]:
    """The eager calls measured, each realizing its result."""
    F = cv.nn.functional
    rng = np.random.default_rng(0)

    def t(*shape: int, dtype: Any = None) -> Any:
        x = cv.Tensor(rng.standard_normal(shape).astype(np.float32), device=device)
        return (x if dtype is None else x.astype(dtype)).realize()

    a, b = t(256, 256, dtype=cv.bfloat16), t(256, 256, dtype=cv.bfloat16)
    a8, b8 = t(256, 256, dtype=cv.float8_e4m3fn), t(256, 256, dtype=cv.float8_e4m3fn)
    x, w, bias = t(64, 768), t(768), t(768)
    small = t(1024)
    img, kern = t(8, 16, 16, 16), t(16, 16, 3, 3)
    return {
        "x + 1 (1024)": lambda: (small + 1).realize(),
        "a @ b (bf16, library)": lambda: (a @ b).realize(),
        "a @ b.T (bf16, library)": lambda: (a @ b.T).realize(),
        "a8 @ b8.T (fp8 as bf16)": lambda: (a8.astype(cv.bfloat16) @ b8.astype(cv.bfloat16).T).realize(),
        "layer_norm (64x768)": lambda: F.layer_norm(x, (768,), w, bias).realize(),
        "softmax (64x768)": lambda: x.softmax(-1).realize(),
        "gelu (64x768)": lambda: F.gelu(x).realize(),
        "sum (64x768)": lambda: x.sum().realize(),
        "conv2d 3x3 (library)": lambda: cv.conv2d(img, kern, padding=1).realize(),
    }


def measure(calls: int = 500, repeats: int = 5) -> dict[str, float]:
    """Seconds of host time per call of each op, on the stand-in CUDA device."""
    import corvid as cv
    from tests.test_cuda_runtime import registered

    with registered(DEVICE, "tests.test_cublaslt:BlasCUDA") as dev:
        dev.blas()
        table = ops(cv, DEVICE)
        for call in table.values():  # (compiled, planned and run once for real)
            call()
        dev.cu.cuLaunchKernel = lambda *args: (0,)  # (the stand-ins' own work is not corvid's)
        dev.standin.cublasLtMatmul = lambda *args: 0
        return {name: _time(call, calls, repeats) for name, call in table.items()}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=500, help="calls per timed loop (default 500)")
    p.add_argument("--repeats", type=int, default=5, help="timed loops per op; the fastest counts (default 5)")
    args = p.parse_args(argv)
    for name, seconds in measure(args.calls, args.repeats).items():
        print(f"{name:<24} {seconds * 1e6:8.1f} us of host time per call")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

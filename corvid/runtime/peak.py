"""This machine's hardware limits, measured once and cached: the roofline that kernel timings are
compared with (``DEBUG=2`` and the benchmarks print the fraction of it a kernel reaches).

* compute: float32 FLOP/s of a C loop of independent vector multiply-adds (fused where the CPU
  has FMA) on every core (or one core's figure times the cores, if higher: on a busy machine
  that is the steadier measurement), the best a kernel could do; float64 counts half.
* memory: bytes/s of a parallel read (a sum) of a buffer much larger than the caches.

:func:`cpu_peak` measures on first use (about a second) and stores the figures in the cache
directory (``peak.json``, keyed by the compiler and CPU identity), so later processes read them.
The file is trusted as kernel cache entries are (:mod:`corvid.runtime.compiler`): read through a
descriptor opened without following links, and only if it is a regular file of this user's that
no one else can write; a file that is not, or that is not a table of positive finite figures, is
ignored and the figures are measured again (and the file rewritten). ``CORVID_PEAK="GFLOPS,GBPS"``
overrides the measurement.
"""

from __future__ import annotations

import ctypes
import functools
import json
import math
import os
import pathlib
import time
from dataclasses import dataclass

import numpy as np

_CHAINS = 12  # independent accumulators per thread: enough to cover FMA latency x throughput
_ITERS = 1 << 22
_READ_BYTES = 256 << 20
_FORMAT = 2  # bumped when the measuring code changes: older cached figures are measured again
_MAX_TABLE_BYTES = 1 << 20  # a peak.json larger than this is not corvid's (an entry is ~100 bytes)


@dataclass(frozen=True)
class Peak:
    gflops: float  # float32 GFLOP/s, all cores
    gbps: float    # memory read GB/s, all cores

    def bound_seconds(self, flops: float, nbytes: float, float64: bool = False) -> float:
        """The roofline: the least time ``flops`` and ``nbytes`` can take on this machine."""
        return max(flops / (self.gflops * 1e9 / (2 if float64 else 1)), nbytes / (self.gbps * 1e9))

    def fraction(self, flops: float, nbytes: float, seconds: float, float64: bool = False) -> float:
        """The share of the roofline a kernel of ``seconds`` reaches (1.0: at the hardware limit)."""
        return self.bound_seconds(flops, nbytes, float64) / max(seconds, 1e-12)


def _source(vector_bytes: int, fma: bool) -> str:
    lanes = vector_bytes // 4
    chains = "\n".join(f"    v a{i} = init + {i};" for i in range(_CHAINS))
    # (kernels are built with -ffp-contract=off: a fused multiply-add is written as one, as the
    # C renderer writes them)
    steps = " ".join(f"a{i} = madd(a{i}, m, c);" for i in range(_CHAINS))
    total = " + ".join(f"a{i}" for i in range(_CHAINS))
    body = f"for (int l = 0; l < {lanes}; l++) r[l] = __builtin_fmaf(a[l], b[l], c[l]);" if fma else "r = a * b + c;"
    return f"""#include <stdint.h>
typedef float v __attribute__((vector_size({vector_bytes})));
static inline v madd(v a, v b, v c) {{ v r; {body} return r; }}
void corvid_peak_flops(long long iters, int threads, float* out) {{
  double total = 0;
  #pragma omp parallel num_threads(threads) reduction(+:total)
  {{
    v init = {{0}}, m, c;
    for (int l = 0; l < {lanes}; l++) {{ m[l] = 0.9999999f; c[l] = 1e-7f; init[l] = (float)l * 1e-3f; }}
{chains}
    for (long long i = 0; i < iters; i++) {{ {steps} }}
    v s = {total};
    for (int l = 0; l < {lanes}; l++) total += s[l];
  }}
  out[0] = (float)total;
}}
void corvid_peak_read(const float* restrict x, long long n, float* out) {{
  float total = 0;
  #pragma omp parallel for simd reduction(+:total) schedule(static)
  for (long long i = 0; i < n; i++) total += x[i];
  out[0] = total;
}}
"""


def _measure() -> Peak:
    from ..codegen.opt import vector_bytes
    from .compiler import compile_kernel

    from ..codegen.passes import has_fma

    lib = compile_kernel(_source(vector_bytes(), has_fma()), "corvid_peak")
    flops_fn = lib.function("corvid_peak_flops", [ctypes.c_longlong, ctypes.c_int, ctypes.c_void_p])
    read_fn = lib.function("corvid_peak_read", [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p])
    out = np.zeros(1, np.float32)
    threads = _threads()
    per_call = _ITERS * _CHAINS * (vector_bytes() // 4) * 2

    def rate(n: int) -> float:  # GFLOP/s of n threads, best of 3
        flops_fn(1 << 12, n, out.ctypes.data)  # warm up the thread pool
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            flops_fn(_ITERS, n, out.ctypes.data)
            best = min(best, time.perf_counter() - t0)
        return n * per_call / best / 1e9

    # all cores at once, or one core times the core count, whichever is higher: on a busy machine
    # the threads wait for each other, and a one-thread figure is the steadier one
    gflops = max(rate(threads), rate(1) * threads if threads > 1 else 0.0)
    x = np.ones(_READ_BYTES // 4, np.float32)
    read_fn(x.ctypes.data, x.size, out.ctypes.data)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        read_fn(x.ctypes.data, x.size, out.ctypes.data)
        best = min(best, time.perf_counter() - t0)
    return Peak(round(gflops, 1), round(_READ_BYTES / best / 1e9, 1))


def _threads() -> int:
    from .compiler import find_toolchain

    if not find_toolchain().openmp:
        return 1
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _read_table(path: pathlib.Path) -> dict:
    """The figures table in ``path``; empty when it is missing, not a private file of this user's
    (:func:`corvid.runtime.compiler._open_private`), larger than ``_MAX_TABLE_BYTES``, or not a
    JSON object."""
    from .compiler import _open_private, _read_fd

    try:
        fd = _open_private(path)
        try:
            if os.fstat(fd).st_size > _MAX_TABLE_BYTES:
                return {}
            table = json.loads(_read_fd(fd))
        finally:
            os.close(fd)
    except (OSError, ValueError, RecursionError):  # (RecursionError: JSON nested too deeply)
        return {}
    return table if isinstance(table, dict) else {}


def _table_key() -> str:
    """The entry of this machine's figures in ``peak.json``: compiler and CPU, threads, format."""
    from .compiler import find_toolchain

    return f"{find_toolchain().key()}:{_threads()}:{_FORMAT}"


def _valid_figures(entry: object) -> bool:
    return (isinstance(entry, list) and len(entry) == 2
            and all(type(v) in (int, float) and math.isfinite(v) and v > 0 for v in entry))


@functools.cache
def cpu_peak() -> Peak:
    """The CPU's measured (or cached, or ``CORVID_PEAK``) roofline for the current thread count.

    Raises ValueError for a ``CORVID_PEAK`` that is not two numbers."""
    override = os.environ.get("CORVID_PEAK", "").strip()
    if override:
        try:
            g, b = (float(v) for v in override.split(","))
            return Peak(g, b)
        except ValueError:
            raise ValueError(f"CORVID_PEAK must be 'GFLOPS,GBPS' (two numbers), got {override!r}") from None
    from .compiler import _write_private, cache_dir

    path = cache_dir() / "peak.json"
    key = _table_key()
    table = _read_table(path)
    entry = table.get(key)
    if _valid_figures(entry):
        return Peak(float(entry[0]), float(entry[1]))
    peak = _measure()
    table[key] = [peak.gflops, peak.gbps]
    try:
        _write_private(path, json.dumps(table).encode())
    except OSError:  # (a full disk: measured again next time)
        pass
    return peak

"""This machine's hardware limits, measured once and cached: the roofline that kernel timings are
compared with (``CORVID_DEBUG=2`` and the benchmarks print the fraction of it a kernel reaches).

* compute: float32 FLOP/s of a C loop of independent vector multiply-adds (fused where the CPU
  has FMA) on every core (or one core's figure times the cores, if higher: on a busy machine
  that is the steadier measurement), the best a kernel could do; float64 counts half. The loop
  is built with every vector width (16, 32 and 64 bytes) and the fastest counts, so the peak does
  not depend on the width kernels are written with (:func:`corvid.codegen.opt.vector_bytes`):
  where that width is the wrong one (64-byte GNU vectors under gcc's 256-bit tuning for Intel's
  AVX-512 cores ran 17x slower), kernels show as far below the peak instead of the peak falling
  with them. ``Peak.widths`` keeps one core's figure per width, which ``tests/test_tunings.py``
  and ``python -m corvid.info`` compare with the chosen width.
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
_WIDTHS = (16, 32, 64)  # vector bytes the compute loop is measured with
_FORMAT = 3  # bumped when the measuring code changes: older cached figures are measured again
_MAX_TABLE_BYTES = 1 << 20  # a peak.json larger than this is not corvid's (an entry is ~100 bytes)


@dataclass(frozen=True)
class Peak:
    gflops: float  # float32 GFLOP/s, all cores
    gbps: float    # memory read GB/s, all cores
    # (vector bytes, one core's float32 GFLOP/s with vectors of that width), where measured
    widths: tuple[tuple[int, float], ...] = ()

    def bound_seconds(self, flops: float, nbytes: float, float64: bool = False) -> float:
        """The roofline: the least time ``flops`` and ``nbytes`` can take on this machine."""
        return max(flops / (self.gflops * 1e9 / (2 if float64 else 1)), nbytes / (self.gbps * 1e9))

    def fraction(self, flops: float, nbytes: float, seconds: float, float64: bool = False) -> float:
        """The share of the roofline a kernel of ``seconds`` reaches (1.0: at the hardware limit)."""
        return self.bound_seconds(flops, nbytes, float64) / max(seconds, 1e-12)


def _source(vector_bytes: int, fma: bool) -> str:
    from ..render.c import vector_fma_helper

    lanes = vector_bytes // 4
    chains = "\n".join(f"    v a{i} = init + {i};" for i in range(_CHAINS))
    # (kernels are built with -ffp-contract=off: a fused multiply-add is written as one, as the
    # C renderer writes them)
    steps = " ".join(f"a{i} = madd(a{i}, m, c);" for i in range(_CHAINS))
    total = " + ".join(f"a{i}" for i in range(_CHAINS))
    # the multiply-add as the C renderer writes it (one rounding where the CPU has FMA)
    madd = vector_fma_helper("madd", "v", lanes, True) if fma else "static inline v madd(v a, v b, v c) { return a * b + c; }\n"
    return f"""#include <stdint.h>
typedef float v __attribute__((vector_size({vector_bytes})));
{madd}void corvid_peak_flops(long long iters, int threads, float* out) {{
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
    from ..codegen.passes import has_fma
    from .compiler import compile_kernel

    out = np.zeros(1, np.float32)
    threads = _threads()

    def rater(vector_bytes: int):
        lib = compile_kernel(_source(vector_bytes, has_fma()), f"corvid_peak{vector_bytes}")
        flops_fn = lib.function("corvid_peak_flops", [ctypes.c_longlong, ctypes.c_int, ctypes.c_void_p])
        per_call = _ITERS * _CHAINS * (vector_bytes // 4) * 2

        def rate(n: int, iters: int = _ITERS) -> float:  # GFLOP/s of n threads, best of 3
            flops_fn(1 << 12, n, out.ctypes.data)  # warm up the thread pool
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                flops_fn(iters, n, out.ctypes.data)
                best = min(best, time.perf_counter() - t0)
            return n * per_call * iters / _ITERS / best / 1e9
        return rate

    # each width on one core, a quarter of the loop (the widths differ by 2x or more when one is
    # wrong; ~0.1 s each), then the fastest on every core
    raters = {w: rater(w) for w in _WIDTHS}
    widths = tuple((w, round(r(1, _ITERS // 4), 1)) for w, r in raters.items())
    rate = raters[max(widths, key=lambda wr: wr[1])[0]]
    # all cores at once, or one core times the core count, whichever is higher: on a busy machine
    # the threads wait for each other, and a one-thread figure is the steadier one
    gflops = max(rate(threads), rate(1) * threads if threads > 1 else 0.0)
    lib = compile_kernel(_source(_WIDTHS[-1], has_fma()), f"corvid_peak{_WIDTHS[-1]}")
    read_fn = lib.function("corvid_peak_read", [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p])
    x = np.ones(_READ_BYTES // 4, np.float32)
    read_fn(x.ctypes.data, x.size, out.ctypes.data)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        read_fn(x.ctypes.data, x.size, out.ctypes.data)
        best = min(best, time.perf_counter() - t0)
    return Peak(round(gflops, 1), round(_READ_BYTES / best / 1e9, 1), widths)


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


def _positive(v: object) -> bool:
    return type(v) in (int, float) and math.isfinite(v) and v > 0


def _valid_figures(entry: object) -> bool:
    """``[GFLOPS, GBPS]``, or ``[GFLOPS, GBPS, {vector bytes: one core's GFLOPS}]``."""
    if not isinstance(entry, list) or len(entry) not in (2, 3) or not all(_positive(v) for v in entry[:2]):
        return False
    return len(entry) == 2 or (isinstance(entry[2], dict) and len(entry[2]) <= len(_WIDTHS) and all(
        k.isdigit() and int(k) in _WIDTHS and _positive(v) for k, v in entry[2].items()))


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
        widths = tuple(sorted((int(k), float(v)) for k, v in entry[2].items())) if len(entry) == 3 else ()
        return Peak(float(entry[0]), float(entry[1]), widths)
    peak = _measure()
    table[key] = [peak.gflops, peak.gbps] + ([{str(w): g for w, g in peak.widths}] if peak.widths else [])
    try:
        _write_private(path, json.dumps(table).encode())
    except OSError:  # (a full disk: measured again next time)
        pass
    return peak

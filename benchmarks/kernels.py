"""The kernel check (issue 24): no compute-bound kernel runs under half of this machine's measured
peak without a printed warning.

After a workload is timed, corvid's side of it (the CPU framework ``corvid``; not the
``corvid@DEVICE`` columns) is called ``runs`` more times with each kernel timed on its own: the
timer of ``CORVID_DEBUG=2`` (:mod:`corvid.engine.realize`, and the replay loop of :mod:`corvid.transforms.jit`,
which reports a replayed kernel the same way), with its printer swapped for a collector for the
duration. A kernel is one compiled program launched from the workload's schedule; launches of the
same program in one call (two LayerNorms of one shape, the 1000 calls of ``jit_call``) are added
up. Per kernel, the least time per call over the runs counts; its work is corvid's own estimate
(``Kernel.estimates``: floating point operations and compulsory bytes).

What is listed (:func:`slow_kernels`):

* *compute-bound*: by the roofline (:mod:`corvid.runtime.peak`), its operations take longer at
  the peak FLOP/s than its bytes at the peak read bandwidth (float64 counts half the FLOP/s);
* *under half the peak*: :meth:`Peak.fraction` < ``SLOW_FRACTION`` (0.5);
* *and it matters*: it takes at least ``SHARE`` (5%) of the workload's kernel time per call, or at
  least ``MIN_SECONDS`` (1 ms) per call.

Each such kernel gets one ``WARNING slow kernel`` line at the end of the report: the workload, the
kernel's name, its loops (as ``CORVID_DEBUG=2`` prints them), its inputs and output, its time per call,
GFLOP/s, the fraction of the compute peak, its share of the workload's kernel time and the
optimization actions applied to it. ``--kernels`` lists every kernel that matters, whatever bounds
it. The per-kernel times include each launch's own overhead (a few µs), not the Python around it.
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TextIO

SLOW_FRACTION = 0.5  # issue 24: "no compute-bound kernel under 50% of the measured peak without a warning"
SHARE = 0.05         # a kernel matters from this share of the workload's kernel time per call ...
MIN_SECONDS = 1e-3   # ... or from this many seconds per call


class KernelCheckUnavailable(RuntimeError):
    """corvid's per-kernel timer is not where this module looks for it."""


@dataclass
class KernelStat:
    """One compiled kernel of a workload's call: its launches per call added up."""
    name: str
    loops: str        # the loop sizes as generated ("2048x24x32"), as CORVID_DEBUG=2 prints them
    signature: str    # "(float32[8, 256, 768], ...) -> float32[8, 256, 3072]"
    opts: str         # the optimization actions applied
    launches: int     # per call
    seconds: float    # per call, all its launches; the least over the profiled calls
    flops: float      # per call, all its launches
    nbytes: float
    float64: bool

    def compute_bound(self, peak: Any) -> bool:
        return self.flops / (peak.gflops * 1e9 / (2 if self.float64 else 1)) > self.nbytes / (peak.gbps * 1e9)

    def fraction(self, peak: Any) -> float:
        return peak.fraction(self.flops, self.nbytes, self.seconds, self.float64)

    def gflops(self) -> float:
        return self.flops / max(self.seconds, 1e-12) / 1e9

    def gbps(self) -> float:
        return self.nbytes / max(self.seconds, 1e-12) / 1e9


@dataclass
class KernelProfile:
    kernels: list[KernelStat] = field(default_factory=list)  # slowest first
    runs: int = 0

    @property
    def total_s(self) -> float:
        """The workload's kernel time per call (the sum of its kernels' least times)."""
        return sum(k.seconds for k in self.kernels)

    def matters(self, k: KernelStat) -> bool:
        return k.seconds >= MIN_SECONDS or k.seconds >= SHARE * self.total_s


@contextlib.contextmanager
def _kernel_timer() -> Iterator[list[tuple[Any, float]]]:
    """Within: every kernel corvid launches is timed on its own (``CORVID_DEBUG=2``), and its
    (ScheduledKernel, seconds) appended to the yielded list instead of printed. ``CORVID_DEBUG=2``'s
    other output (a summary line per realize) is swallowed."""
    import corvid.engine.realize as realize_mod
    import corvid.transforms.jit as jit_mod

    records: list[tuple[Any, float]] = []

    def collect(sk: Any, seconds: float, dbg: int) -> None:
        records.append((sk, seconds))

    modules = [realize_mod, jit_mod]
    missing = [m.__name__ for m in modules if not callable(getattr(m, "_report", None))]
    if missing:
        raise KernelCheckUnavailable(f"no CORVID_DEBUG=2 kernel reporter (_report) in {', '.join(missing)}")
    saved = [(m, m._report) for m in modules]
    old_debug = os.environ.get("CORVID_DEBUG")
    os.environ["CORVID_DEBUG"] = "2"
    for m in modules:
        m._report = collect
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield records
    finally:
        for m, fn in saved:
            m._report = fn
        if old_debug is None:
            os.environ.pop("CORVID_DEBUG", None)
        else:
            os.environ["CORVID_DEBUG"] = old_debug


def _describe(sk: Any) -> tuple[str, str, str, float, float, bool]:
    kernel = sk.kernel
    flops, nbytes = kernel.estimates()
    loops = "x".join(str(lp.size) for lp in getattr(kernel, "loops", ())) or "1"
    ins = ", ".join(f"{n.dtype.name}{list(n.shape)}" for n in sk.inputs)
    outs = ", ".join(f"{n.dtype.name}{list(n.shape)}" for n in sk.outputs)
    signature = f"({ins}) -> {outs if not sk.extra else '(' + outs + ')'}"
    opts = " ".join(str(o) for o in getattr(kernel, "opts", ()))
    return loops, signature, opts, float(flops), float(nbytes), sk.output.dtype.name in ("float64", "complex128")


def profile_kernels(call: Callable[[], Any], runs: int = 3) -> KernelProfile:
    """Call ``call`` (one unit of a workload: its result computed when it returns) ``runs`` times
    with every kernel timed on its own; see the module docstring."""
    per_run: list[dict[tuple, list]] = []
    described: dict[tuple, tuple] = {}
    for _ in range(max(1, runs)):
        with _kernel_timer() as records:
            call()
        found: dict[tuple, list] = {}
        for sk, seconds in records:
            key = (sk.name, id(sk.compiled))
            if key not in described:
                described[key] = _describe(sk)
            entry = found.setdefault(key, [0, 0.0])
            entry[0] += 1
            entry[1] += seconds
        per_run.append(found)
        del records
    stats = []
    for key, (loops, signature, opts, flops, nbytes, f64) in described.items():
        seen = [run[key] for run in per_run if key in run]
        launches = seen[0][0]
        stats.append(KernelStat(key[0], loops, signature, opts, launches, min(s for _, s in seen),
                                flops * launches, nbytes * launches, f64))
    stats.sort(key=lambda k: -k.seconds)
    return KernelProfile(stats, len(per_run))


def slow_kernels(profile: KernelProfile, peak: Any) -> list[KernelStat]:
    """The kernels the check warns about: compute-bound, under ``SLOW_FRACTION`` of the peak,
    and mattering (see the module docstring); slowest first."""
    return [k for k in profile.kernels
            if profile.matters(k) and k.compute_bound(peak) and k.fraction(peak) < SLOW_FRACTION]


def _line(workload: str, k: KernelStat, profile: KernelProfile, peak: Any) -> str:
    bound = "compute" if k.compute_bound(peak) else "memory"
    launches = f"{k.launches} launches" if k.launches != 1 else "1 launch"
    rate = f"{k.gflops():.1f} GFLOP/s" if bound == "compute" else f"{k.gbps():.1f} GB/s"
    share = k.seconds / profile.total_s if profile.total_s > 0 else 0.0
    return (f"{workload}: {k.name} [{k.loops}] {k.signature}: {k.seconds * 1e3:.3f} ms/call ({launches}), {rate}, "
            f"{k.fraction(peak) * 100:.0f}% of {bound} peak, {share * 100:.0f}% of the workload's kernel time"
            + (f"; actions: {k.opts}" if k.opts else ""))


def report(profiles: dict[str, KernelProfile], peak: Any, out: TextIO, every: bool = False,
           quick: bool = False) -> int:
    """Print the check's warnings (and with ``every`` each workload's kernels that matter); the
    number of warnings."""
    print(file=out)
    if peak is None:
        print("kernel check: skipped (no roofline: corvid/runtime/peak.py could not measure this machine)", file=out)
        return 0
    profiled = {name: p for name, p in profiles.items() if p.kernels}
    print(f"kernel check (issue 24): corvid's kernels timed one by one (CORVID_DEBUG=2's timer, least of the profiled "
          f"calls) against the roofline ({peak.gflops:g} GFLOP/s float32, {peak.gbps:g} GB/s); a warning for each "
          f"compute-bound kernel under {SLOW_FRACTION:.0%} of the peak that takes >= {SHARE:.0%} of its workload's "
          f"kernel time or >= {MIN_SECONDS * 1e3:g} ms per call"
          + (" (quick sizes: tiny kernels, the figures mean nothing)" if quick else "") + ".", file=out)
    if every:
        for name, p in profiled.items():
            print(f"  {name}: {len(p.kernels)} kernels, {p.total_s * 1e3:.3f} ms of kernel time per call "
                  f"(least of {p.runs})", file=out)
            for k in p.kernels:
                if p.matters(k):
                    print("    " + _line(name, k, p, peak), file=out)
    count = 0
    for name, p in profiled.items():
        for k in slow_kernels(p, peak):
            print("WARNING slow kernel: " + _line(name, k, p, peak), file=out)
            count += 1
    if not count:
        print(f"kernel check: no compute-bound kernel that matters runs under {SLOW_FRACTION:.0%} of the peak "
              f"({len(profiled)} workloads profiled).", file=out)
    else:
        print(f"kernel check: {count} compute-bound kernel{'s' if count != 1 else ''} under {SLOW_FRACTION:.0%} "
              f"of the peak ({len(profiled)} workloads profiled).", file=out)
    return count

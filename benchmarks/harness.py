"""Timing, checking and reporting: the engine behind ``python -m benchmarks``.

For every workload and framework: convert the inputs once (untimed), time the first call
(for corvid and jax this includes scheduling and compilation), warm up, then time up to
``--repeat`` steady-state calls with ``time.perf_counter`` around fully computed work and keep
the median. The steady-state calls of the frameworks take turns (an untimed and a timed call of
each, then again), so a ratio compares calls made under the same machine conditions. Each call builds the computation from scratch, as a user's code would (for corvid
that is the lazy graph, the schedule lookup and the kernel launch). corvid's result is checked
against numpy's; a mismatch prints a FAIL line and makes the exit status 1.

By default corvid compiles into a fresh, temporary kernel cache, so "first" really includes the
C compiler; ``--warm-cache`` uses the normal on-disk cache instead.

Targets are either ratios (an array workload's ``target``: numpy's time / corvid's;
``peer_target``: a named peer's time / corvid's, on any workload) or absolute (an overhead
workload's ``target``, in its unit); a ratio always compares figures measured in the same run. An
overhead workload with a ``peer_target`` takes its steady-state samples in turns with its peers,
as the array workloads do.

After the tables, the kernel check (:mod:`benchmarks.kernels`) prints a warning for each
compute-bound corvid kernel that runs under half of the measured peak and matters to its
workload (``--no-kernel-check`` skips it; ``--kernels`` lists every kernel that matters).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TextIO

import numpy as np

from . import kernels as kernel_check
from .blocks import BLOCKS
from .frameworks import Framework, available_frameworks, device_frameworks
from .models import MODELS
from .training import CNN_TRAIN
from .transforms import OVERHEADS, Overhead, Prepared
from .workloads import WORKLOADS, Workload


@dataclass
class Timing:
    first_s: float
    runs_s: list[float]
    only_first: bool = False  # too slow to repeat within the budget: the first call is the only sample

    @property
    def median_s(self) -> float:
        return statistics.median(self.runs_s)


@dataclass
class Row:
    workload: Workload
    timings: dict[str, Timing] = field(default_factory=dict)
    work: tuple[float, str] = (0.0, "")
    failures: list[str] = field(default_factory=list)
    kernels: kernel_check.KernelProfile | None = None  # corvid's kernels, timed one by one


def time_calls(call: Callable[[], Any], repeat: int, budget_s: float) -> Timing:
    """Time ``call`` (which returns only when its work is done): first call, warm-up, steady state.

    Steady-state runs stop after ``repeat`` samples or once ``budget_s`` is spent (at least one
    sample). A first call slower than ``budget_s`` is not repeated: it becomes the only sample."""
    gc.collect()
    t0 = time.perf_counter()
    call()
    first = time.perf_counter() - t0
    if first > budget_s:
        return Timing(first, [first], only_first=True)
    if first < budget_s / 4:
        call()  # warm-up: caches, page faults of pooled buffers, CPU frequency
    runs: list[float] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection in the middle of a sample is noise, not the framework's cost
    try:
        spent = time.perf_counter()
        while len(runs) < repeat and (not runs or time.perf_counter() - spent < budget_s):
            t0 = time.perf_counter()
            call()
            runs.append(time.perf_counter() - t0)
    finally:
        if gc_was_enabled:
            gc.enable()
    return Timing(first, runs)


def time_interleaved(calls: dict[str, Callable[[], Any]], repeat: int, budget_s: float,
                     failed: Callable[[str, Exception], None]) -> dict[str, Timing]:
    """Time several frameworks' ``calls`` of one workload as :func:`time_calls` does, but take
    the steady-state samples in turns, so that every framework is measured under the same
    conditions: on a shared machine the memory bandwidth and the load of other tenants drift
    within seconds, which sequential runs turn into false ratios. A turn is an untimed call, then
    a timed one: the untimed call absorbs the switch from the previous framework (its thread
    pool still spinning, its data in the caches), which no user of one framework pays.

    A call that raises is reported through ``failed(name, error)`` and dropped."""
    timings: dict[str, Timing] = {}
    active: list[str] = []
    for name, call in calls.items():  # first calls (compilation) and warm-ups, one framework at a time
        gc.collect()
        try:
            t0 = time.perf_counter()
            call()
            first = time.perf_counter() - t0
            if first <= budget_s and first < budget_s / 4:
                call()  # warm-up: caches, page faults of pooled buffers, CPU frequency
        except Exception as e:
            failed(name, e)
            continue
        if first > budget_s:
            timings[name] = Timing(first, [first], only_first=True)
        else:
            timings[name] = Timing(first, [])
            active.append(name)
    spent = dict.fromkeys(active, 0.0)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection in the middle of a sample is noise, not the framework's cost
    try:
        while active:
            for name in list(active):
                runs = timings[name].runs_s
                if len(runs) >= repeat or (runs and spent[name] >= budget_s):
                    active.remove(name)
                    continue
                try:
                    t0 = time.perf_counter()
                    calls[name]()  # (settles: see above)
                    t1 = time.perf_counter()
                    calls[name]()
                    dt = time.perf_counter() - t1
                    spent[name] += t1 - t0
                except Exception as e:
                    failed(name, e)
                    active.remove(name)
                    del timings[name]
                    continue
                runs.append(dt)
                spent[name] += dt
    finally:
        if gc_was_enabled:
            gc.enable()
    return timings


def _check(row: Row, got: np.ndarray, want: np.ndarray, who: str = "corvid") -> None:
    wl = row.workload
    if got.shape != want.shape:
        row.failures.append(f"{who}: shape {got.shape} != numpy's {want.shape}")
        return
    wide = np.complex128 if np.iscomplexobj(got) or np.iscomplexobj(want) else np.float64
    err = np.abs(got.astype(wide) - want.astype(wide))
    tol = wl.atol + wl.rtol * np.abs(want.astype(wide))
    bad = ~(err <= tol)  # also catches nan
    if bad.any():
        i = np.unravel_index(int(np.argmax(np.where(bad, err, -1.0))), err.shape) if err.ndim else ()
        row.failures.append(f"{who}: {int(bad.sum())} of {bad.size} elements differ beyond rtol={wl.rtol} "
                            f"atol={wl.atol}; worst at {tuple(int(j) for j in i)}: {got[i]!r}, numpy {want[i]!r}")


def _bound_call(fw: Framework, fn: Callable, arg_sets: list[list], outs: dict[str, Any]) -> Callable[[], None]:
    """One timed call of ``fn``, on the next of ``arg_sets`` in turn: its finished result goes to
    ``outs[fw.name]``."""
    turn = [0]

    def call() -> None:
        args = arg_sets[turn[0]]
        turn[0] = (turn[0] + 1) % len(arg_sets)
        outs[fw.name] = fw.finish(fn(*args))
    return call


def _profile(name: str, call: Callable[[], Any], timing: Timing, quick: bool, log: TextIO
             ) -> kernel_check.KernelProfile | None:
    """corvid's kernels of one workload, each timed on its own (:mod:`benchmarks.kernels`; each
    kernel's least time counts): one call on quick sizes or when a call is slower than the
    budget, three when a call takes over half a second, else five (a busy machine slows a
    kernel now and then: more calls, a steadier least time)."""
    runs = 1 if quick or timing.only_first else 3 if timing.median_s > 0.5 else 5
    try:
        return kernel_check.profile_kernels(call, runs)
    except Exception as e:  # the check is a report: a failure to run it must not hide the timings
        print(f"  {name:<18} corvid  WARNING kernel check unavailable: {type(e).__name__}: {e}", file=log)
        return None


def run_workload(wl: Workload, frameworks: list[Framework], repeat: int, budget_s: float, quick: bool,
                 log: TextIO, profile: bool = False) -> Row:
    row = Row(wl)
    inputs = wl.make_inputs(np.random.default_rng(0), quick)
    row.work = wl.rate(inputs)
    chosen = [fw for fw in frameworks if fw.impl in wl.ops]
    outs: dict[str, Any] = {}
    calls: dict[str, Callable[[], None]] = {}
    for fw in chosen:
        # (copies of the same values: every call's result is checked against numpy alike)
        arg_sets = [[fw.to_native(a if c == 0 else a.copy()) for a in inputs] for c in range(wl.copies)]
        calls[fw.name] = _bound_call(fw, fw.wrap(wl.ops[fw.impl]), arg_sets, outs)

    def failed(name: str, e: Exception) -> None:  # report and go on: one broken peer must not hide the others
        fw = next(f for f in chosen if f.name == name)
        if fw.impl == "corvid" and fw.name != "corvid" and isinstance(e, (NotImplementedError, TypeError)):
            # a backend that says it cannot run an op or a dtype (complex numbers on CL,
            # float64 on WEBGPU): refused clearly, not wrong
            print(f"  {wl.name:<18} {fw.name:<7} unsupported: {str(e).splitlines()[0]}", file=log)
            return
        print(f"  {wl.name:<18} {fw.name:<7} ERROR {type(e).__name__}: {e}", file=log)
        if fw.impl == "corvid":
            row.failures.append(f"{fw.name} raised {type(e).__name__}: {e}")

    row.timings = time_interleaved(calls, repeat, budget_s, failed)
    results: dict[str, np.ndarray] = {}
    for fw in chosen:
        t = row.timings.get(fw.name)
        if t is None:
            continue
        if fw.impl in ("corvid", "numpy"):
            results[fw.name] = fw.to_numpy(outs[fw.name])
        note = " (one call only: slower than --budget)" if t.only_first else ""
        print(f"  {wl.name:<18} {fw.name:<7} first {t.first_s * 1e3:10.2f} ms   median {t.median_s * 1e3:10.2f} ms"
              f"  ({len(t.runs_s)} runs){note}", file=log, flush=True)
    if profile and "corvid" in row.timings:
        row.kernels = _profile(wl.name, calls["corvid"], row.timings["corvid"], quick, log)
    outs.clear()
    calls.clear()
    for name, got in results.items():
        if name != "numpy" and "numpy" in results:
            _check(row, got, results["numpy"], name)
    for f in row.failures:
        print(f"FAIL {wl.name}: {f}", file=log, flush=True)
    return row


@dataclass
class OverheadRow:
    workload: Overhead
    timings: dict[str, Timing] = field(default_factory=dict)  # per call of the runner's ``call``
    units: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    kernels: kernel_check.KernelProfile | None = None  # corvid's kernels, timed one by one

    def best(self, name: str) -> float:
        """The minimum time per unit, in the workload's unit."""
        return min(self.timings[name].runs_s) / self.units[name] * self.workload.scale

    def median(self, name: str) -> float:
        return self.timings[name].median_s / self.units[name] * self.workload.scale

    def met(self) -> bool | None:
        """The absolute target: None without one, or without corvid's figure."""
        if "corvid" not in self.timings or self.workload.target is None:
            return None
        return self.best("corvid") <= self.workload.target

    def peer_ratio(self) -> float | None:
        """The peer of ``peer_target``'s time / corvid's (per-unit minima, as the table shows
        them); None without a peer target or without both figures."""
        pt = self.workload.peer_target
        if pt is None or pt[0] not in self.timings or "corvid" not in self.timings:
            return None
        return self.best(pt[0]) / self.best("corvid")

    def peer_met(self) -> bool | None:
        ratio = self.peer_ratio()
        return None if ratio is None else ratio >= self.workload.peer_target[1]


def run_overhead(wl: Overhead, frameworks: list[Framework], repeat: int, budget_s: float, quick: bool,
                 log: TextIO, profile: bool = False) -> OverheadRow:
    """Time one transform/overhead workload on every framework that has a runner for it: one
    framework after the other, or, for a workload with a ``peer_target``, all prepared first and
    their steady-state samples taken in turns (:func:`time_interleaved`: the ratio the target
    judges compares calls made under the same machine conditions)."""
    row = OverheadRow(wl)
    chosen = [fw.name for fw in frameworks if fw.name in wl.runners]

    def failed(name: str, e: Exception) -> None:  # report and go on: one broken peer must not hide the others
        print(f"  {wl.name:<18} {name:<7} ERROR {type(e).__name__}: {e}", file=log)
        if name == "corvid":
            row.failures.append(f"raised {type(e).__name__}: {e}")

    interleave = wl.peer_target is not None
    preps: dict[str, Prepared] = {}
    timings: dict[str, Timing] = {}
    if interleave:
        for name in chosen:
            try:
                preps[name] = wl.runners[name](quick)
            except Exception as e:
                failed(name, e)
        timings = time_interleaved({n: p.call for n, p in preps.items()}, repeat, budget_s, failed)
    for name in chosen:
        try:
            if not interleave:
                preps = {name: wl.runners[name](quick)}  # (the previous framework's runner goes)
                timings[name] = time_calls(preps[name].call, repeat, budget_s)
            elif name not in timings:
                continue
            prep, t = preps[name], timings[name]
            row.timings[name] = t
            row.units[name] = prep.units
            if profile and name == "corvid":
                # (before the check: a training check runs 200 more steps, after which the
                # benchmark's loss is near 1e-8 and the gradients are subnormal floats, which
                # made the kernels 5x slower than in the timed steps: corvid/runtime/denormal.py)
                row.kernels = _profile(wl.name, prep.call, t, quick, log)
            problem = prep.check()
        except Exception as e:
            failed(name, e)
            continue
        if problem is not None:
            print(f"  {wl.name:<18} {name:<7} CHECK FAILED: {problem}", file=log)
            if name == "corvid":
                row.failures.append(problem)
        line = (f"  {wl.name:<18} {name:<7} min {row.best(name):10.2f} {wl.unit:<8} "
                f"median {row.median(name):10.2f} {wl.unit}  ({len(t.runs_s)} runs x {prep.units})")
        if name == "corvid" and wl.target is not None:
            line += (f"   target <= {wl.target:g} {wl.unit} ({wl.reference}): "
                     f"{'met' if row.met() else 'MISSED'}")
        print(line, file=log, flush=True)
    preps.clear()
    ratio = row.peer_ratio()
    if ratio is not None:
        peer, want = wl.peer_target
        print(f"  {wl.name:<18} corvid  target >= {want:g}x {peer} (same run): {peer} {row.best(peer):.2f} / "
              f"corvid {row.best('corvid'):.2f} {wl.unit} = {ratio:.2f}x: {'met' if row.peer_met() else 'MISSED'}",
              file=log, flush=True)
    for f in row.failures:
        print(f"FAIL {wl.name}: corvid {f}", file=log, flush=True)
    return row


def format_overhead_table(rows: list[OverheadRow], names: list[str]) -> str:
    """Per-unit minimum times, ratios (peer / corvid), the absolute targets and those against a peer."""
    peers = [n for n in names if n != "corvid"]
    header = (["workload", "unit"] + names + [f"vs {p}" for p in peers if p != "numpy"]
              + ["target (corvid)", "target vs peer", "check"])
    lines = []
    for r in rows:
        has = lambda n: n in r.timings  # noqa: E731
        cells = [r.workload.name, r.workload.unit] + [f"{r.best(n):.2f}" if has(n) else "-" for n in names]
        cells += [f"{r.best(p) / r.best('corvid'):.2f}x" if has(p) and has("corvid") else "-"
                  for p in peers if p != "numpy"]
        met = r.met()
        target = "-" if r.workload.target is None else \
            f"<= {r.workload.target:g}: {'-' if met is None else 'met' if met else 'MISSED'}"
        peer_goal = "-"
        if r.workload.peer_target is not None and r.peer_ratio() is not None:
            peer, want = r.workload.peer_target
            peer_goal = f">= {want:g}x {peer}: {'met' if r.peer_met() else 'MISSED'}"
        cells += [target, peer_goal, "FAIL" if r.failures else "ok"]
        lines.append(cells)
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    fmt = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    out = [fmt(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [fmt(line) for line in lines]
    return "\n".join(out)


def _targets(w: Overhead) -> str:
    """An overhead workload's targets, for the table's footnote."""
    parts = [] if w.target is None else [f"<= {w.target:g} {w.unit} ({w.reference})"]
    if w.peer_target is not None:
        parts.append(f">= {w.peer_target[1]:g}x {w.peer_target[0]} in the same run ({w.reference})"
                     if w.target is None else f">= {w.peer_target[1]:g}x {w.peer_target[0]} in the same run")
    return f"{w.name} " + ", ".join(parts)


def _fmt_ms(t: Timing | None) -> str:
    if t is None:
        return "-"
    return f"{t.median_s * 1e3:.2f}{'*' if t.only_first else ''}"


def format_table(rows: list[Row], names: list[str]) -> str:
    """The summary table: medians, throughputs, ratios (peer time / corvid time) and the targets."""
    peers = [n for n in names if n != "corvid"]
    header = (["workload"] + [f"{n} ms" for n in names] + ["corvid rate", "corvid % of peak"]
              + [f"{p} rate" for p in peers] + [f"vs {p}" for p in peers]
              + ["target vs numpy", "target vs peer", "first call ms (corvid)", "check"])
    peak = _peak()
    lines = []
    for r in rows:
        amount, unit = r.work
        rate = lambda n: (f"{amount / r.timings[n].median_s / 1e9:.1f} {unit}"  # noqa: E731
                          if n in r.timings else "-")
        c = r.timings.get("corvid")
        ratios = [f"{r.timings[p].median_s / c.median_s:.2f}x" if c and p in r.timings else "-" for p in peers]
        goal = "-"
        if c and "numpy" in r.timings and r.workload.target is None:
            goal = "report only"
        elif c and "numpy" in r.timings:
            met = r.workload.target is None or r.timings["numpy"].median_s / c.median_s >= r.workload.target
            goal = f">= {r.workload.target:g}x: {'met' if met else 'MISSED'}"
        peer_goal = "-"
        if c and r.workload.peer_target is not None and r.workload.peer_target[0] in r.timings:
            peer, want = r.workload.peer_target
            ratio = r.timings[peer].median_s / c.median_s
            peer_goal = f">= {want:g}x {peer}: {'met' if ratio >= want else 'MISSED'}"
        roof = "-"
        if c and peak is not None and unit in ("GFLOP/s", "GB/s"):
            limit = peak.gflops if unit == "GFLOP/s" else peak.gbps
            roof = f"{amount / c.median_s / 1e9 / limit * 100:.0f}% ({'compute' if unit == 'GFLOP/s' else 'memory'})"
        lines.append([r.workload.name] + [_fmt_ms(r.timings.get(n)) for n in names] + [rate("corvid"), roof]
                     + [rate(p) for p in peers] + ratios
                     + [goal, peer_goal, f"{c.first_s * 1e3:.1f}" if c else "-", "FAIL" if r.failures else "ok"])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    fmt = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    out = [fmt(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [fmt(line) for line in lines]
    return "\n".join(out)


def _peak() -> Any:
    """This machine's roofline (corvid/runtime/peak.py), or None if it cannot be measured."""
    try:
        from corvid.runtime.peak import cpu_peak

        return cpu_peak()
    except Exception:  # no compiler: the table goes without the column's figures
        return None


@contextlib.contextmanager
def _kernel_cache(cold: bool) -> Iterator[str]:
    """Point corvid at a fresh temporary kernel cache (cold) or leave the user's cache (warm)."""
    if not cold:
        yield "warm (the on-disk kernel cache; first calls may skip the C compiler)"
        return
    old = os.environ.get("CORVID_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="corvid-bench-cache-") as d:
        os.environ["CORVID_CACHE_DIR"] = d
        try:
            yield "cold (fresh temporary kernel cache: first calls include the C compiler)"
        finally:
            if old is None:
                os.environ.pop("CORVID_CACHE_DIR", None)
            else:
                os.environ["CORVID_CACHE_DIR"] = old


ALL: list[Workload | Overhead] = [*WORKLOADS, *OVERHEADS, CNN_TRAIN, *MODELS, *BLOCKS]


LATENCY = "cnn_first_step"  # benchmarks/latency.py: the compile latency, in new processes
PLAN = "gpt2_plan"  # benchmarks/plan.py: planning a 12-layer GPT-2 training step, in a new process
# Report sections of their own: module name -> its row name for --only. Each module has
# ``measure(quick: bool)`` and ``report(result, out: TextIO)``; a RuntimeError from either prints as a FAIL line.
SECTIONS = {"frame": "frame", "llm": "llm_decode", "dynamic": "jit_dynamic"}
_CHILD_ROWS = (LATENCY, PLAN, *SECTIONS.values())


def _tokens(only: list[str] | None) -> list[str]:
    return [t for item in only or [] for t in item.split(",") if t]


def select(only: list[str] | None) -> list[Workload | Overhead]:
    """Workloads (array and overhead ones) whose name equals or starts with one of ``only`` (all when empty)."""
    if not only:
        return list(ALL)
    tokens = _tokens(only)
    chosen = [w for w in ALL if any(w.name == t or w.name.startswith(t) for t in tokens)]
    if not chosen and any(row.startswith(t) for t in tokens for row in _CHILD_ROWS):
        return []
    if not chosen:
        raise ValueError(f"no workload matches {', '.join(tokens)}; choose from {', '.join(w.name for w in ALL)}")
    return chosen


def run_benchmarks(only: list[str] | None = None, repeat: int = 10, budget_s: float = 10.0, quick: bool = False,
                   cold_cache: bool = True, out: TextIO = sys.stdout, devices: str = "all",
                   kernel_check_on: bool = True, list_kernels: bool = False) -> list[Row | OverheadRow]:
    """Run the selected workloads on every available framework and print the tables to ``out``;
    the array workloads also on each corvid device that ``devices`` names (see
    :func:`benchmarks.frameworks.device_frameworks`), as ``corvid@DEVICE`` columns. Then (unless
    ``kernel_check_on`` is false) the kernel check of :mod:`benchmarks.kernels`: a warning per
    slow compute-bound corvid kernel (``list_kernels``: also every kernel that matters)."""
    chosen = select(only)
    latency_too = not only or any(LATENCY.startswith(t) for t in _tokens(only))
    plan_too = not only or any(PLAN.startswith(t) for t in _tokens(only))
    sections = [m for m, row in SECTIONS.items() if not only or any(row.startswith(t) for t in _tokens(only))]
    workloads = [w for w in chosen if isinstance(w, Workload)]
    overheads = [w for w in chosen if isinstance(w, Overhead)]
    frameworks, skipped = available_frameworks()
    on_devices, not_started = device_frameworks(devices)
    frameworks, skipped = frameworks + on_devices, skipped + not_started
    names = [fw.name for fw in frameworks]
    with _kernel_cache(cold_cache) as cache_note:
        print(f"corvid benchmarks on {platform.machine()} with {os.cpu_count()} cores, Python "
              f"{platform.python_version()}; " + ", ".join(f"{fw.name} {fw.version}" for fw in frameworks), file=out)
        if skipped:
            print("skipped: " + ", ".join(skipped), file=out)
        print(f"kernel cache: {cache_note}; {'quick (tiny) sizes' if quick else 'full sizes'}, "
              f"repeat {repeat}, budget {budget_s:g} s per measurement", file=out, flush=True)
        rows = [run_workload(wl, frameworks, repeat, budget_s, quick, out, kernel_check_on) for wl in workloads]
        orows = [run_overhead(wl, frameworks, repeat, budget_s, quick, out, kernel_check_on) for wl in overheads]
    if rows:
        print(file=out)
        print(format_table(rows, names), file=out)
        peak = _peak()
        print("ms: median of the steady-state runs; *: one call only (first call, too slow to repeat). "
              "rate: derived from the median. vs X: X's time / corvid's time (>1: corvid is faster). "
              "% of peak: corvid's rate over this machine's measured limit"
              + (f" ({peak.gflops:g} GFLOP/s float32, {peak.gbps:g} GB/s read; corvid/runtime/peak.py)"
                 if peak is not None else "") + ".", file=out)
    if orows:
        print(file=out)
        print(format_overhead_table(orows, names), file=out)
        print("transform/overhead workloads: minimum time per unit over the steady-state runs (a run does many "
              "units). vs X: X's time / corvid's time (a target vs a peer is judged on it). torch runs eagerly "
              "(no jit); targets: " + "; ".join(_targets(w) for w in overheads) + ".", file=out)
    if latency_too:
        from . import latency

        print(file=out)
        try:
            latency.report(latency.measure(quick), out)
        except RuntimeError as e:
            print(f"FAIL {LATENCY}: {e}", file=out)
    if plan_too:
        from . import plan

        try:
            plan.report(plan.measure(quick), out, quick)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"FAIL {PLAN}: {e}", file=out)
    for module in sections:
        import importlib

        section = importlib.import_module(f"{__package__}.{module}")
        print(file=out, flush=True)
        try:
            section.report(section.measure(quick), out)
        except RuntimeError as e:
            print(f"FAIL {SECTIONS[module]}: {e}", file=out)
    if kernel_check_on and (rows or orows):
        profiles = {r.workload.name: r.kernels for r in [*rows, *orows] if r.kernels is not None}
        kernel_check.report(profiles, _peak(), out, every=list_kernels, quick=quick)
    return [*rows, *orows]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--gpu" in argv:  # the one-command GPU report: its own options (python -m benchmarks --gpu --help)
        from . import gpu

        return gpu.main([a for a in argv if a != "--gpu"])
    if "--geometry" in argv:  # the CUDA launch geometry of a workload's kernels, without a GPU
        from . import geometry

        return geometry.main([a for a in argv if a != "--geometry"])
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", action="store_true",
                   help="instead: the GPU report (CUDA tests, corvid vs PyTorch on the GPU, the examples; "
                        "benchmarks/gpu.py); see python -m benchmarks --gpu --help")
    p.add_argument("--geometry", action="store_true",
                   help="instead: the launch geometry of a workload's kernels as the CUDA device would launch "
                        "them, without a GPU (benchmarks/geometry.py); see python -m benchmarks --geometry --help")
    p.add_argument("--only", action="append", metavar="NAME",
                   help="run only workloads whose name starts with NAME (repeatable, or comma separated): "
                        + ", ".join([w.name for w in ALL] + list(_CHILD_ROWS)))
    p.add_argument("--repeat", type=int, default=10, metavar="N", help="steady-state runs per measurement (default 10)")
    p.add_argument("--budget", type=float, default=10.0, metavar="SECONDS",
                   help="stop repeating a measurement after this long (default 10)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks the harness, measures nothing useful")
    p.add_argument("--warm-cache", action="store_true", help="use the on-disk kernel cache instead of a fresh one")
    p.add_argument("--devices", default="all", metavar="LIST",
                   help="corvid devices besides the CPU to run the array workloads on, comma separated (default "
                        "'all': every one that starts here, e.g. CL on PoCL; 'CPU': none)")
    p.add_argument("--no-kernel-check", action="store_true",
                   help="skip the kernel check (a warning per compute-bound corvid kernel under 50%% of the peak)")
    p.add_argument("--kernels", action="store_true",
                   help="the kernel check also lists every corvid kernel that matters to each workload")
    p.add_argument("--heuristics", action="store_true",
                   help="instead: time every kernel the default heuristics change against its unoptimized form")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.heuristics:
        from . import heuristics

        with _kernel_cache(not args.warm_cache):
            results = heuristics.check_heuristics(args.quick)
        heuristics.report(results, sys.stdout)
        return 0 if all(r.ok for r in results) else 1
    try:
        rows = run_benchmarks(args.only, args.repeat, args.budget, args.quick, cold_cache=not args.warm_cache,
                              devices=args.devices, kernel_check_on=not args.no_kernel_check,
                              list_kernels=args.kernels)
    except ValueError as e:
        p.error(str(e))
    return 1 if any(r.failures for r in rows) else 0

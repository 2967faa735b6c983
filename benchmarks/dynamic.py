"""``jit`` with symbolic sizes (``dynamic=``, issue 29 part 4) against a trace per size.

Two workloads whose size changes from call to call, each jitted twice in the same process: with
every size constant (``dynamic=False``: a new size is traced and compiled) and with that size
symbolic (traced once, every size replayed):

* ``dyn_mlp_train``: a training step (784-512-10 MLP, cross-entropy, Adam) over batches of
  64, 48, 17, 100, 64, 33, 48 rows (the ragged batches of a loader without ``drop_last``);
* ``dyn_llm_prefill``: a 4-layer Llama-shaped model (width 512, 8 heads, random weights) over
  prompts of 37, 100, 256, 180, 64, 100 tokens.

Reported per mode: the traces, the seconds spent in the first call at each size the function had
not seen (what a user waits for: tracing, scheduling, compiling), and the steady-state time of a
call at a size seen before (median of turns taken with the other mode). Targets: a new size
costs at least 10x less with symbolic sizes, and a steady call at most 1.3x the constant-size
program's (whose kernels are specialized to that size). The kernel cache is a fresh temporary
directory for the whole section, so compiles are real.

Run: ``python -m benchmarks --only jit_dynamic`` (``--quick``: smaller sizes, for a smoke run).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

import numpy as np

from .harness import time_interleaved

NEW_SIZE_TARGET = 10.0  # constant-size first calls / symbolic first calls, over the new sizes
STEADY_TARGET = 1.3  # symbolic steady call / constant-size steady call, at most


@dataclass
class DynRow:
    name: str
    sizes: list[int]
    traces: dict[str, int] = field(default_factory=dict)
    first_s: dict[str, float] = field(default_factory=dict)  # the very first call (both modes trace and compile)
    new_size_s: dict[str, float] = field(default_factory=dict)  # summed first calls at the later new sizes
    steady_ms: dict[str, float] = field(default_factory=dict)
    max_error: float = 0.0  # |symbolic - constant| over the outputs compared


def _mlp(quick: bool) -> tuple[Callable[[Any], Callable], list[int], Callable[[int], tuple]]:
    import corvid as cv
    import corvid.nn as nn

    width = 128 if quick else 512
    sizes = [16, 12, 5, 25, 16] if quick else [64, 48, 17, 100, 64, 33, 48]
    rng = np.random.default_rng(0)

    def make(dynamic: Any) -> Callable:
        cv.manual_seed(0)
        model = nn.Sequential(nn.Linear(784, width), nn.ReLU(), nn.Linear(width, 10))
        opt = cv.optim.Adam(model.parameters(), lr=1e-3)

        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return cv.jit(step, dynamic=dynamic)

    def batch(n: int) -> tuple:
        return (cv.Tensor(rng.standard_normal((n, 784)).astype(np.float32)), cv.Tensor(rng.integers(0, 10, n)))

    return make, sizes, batch


def _llm(quick: bool) -> tuple[Callable[[Any], Callable], list[int], Callable[[int], tuple]]:
    import corvid as cv
    from corvid.models import CausalLM

    config = dict(model_type="llama", vocab_size=2000, hidden_size=128 if quick else 512,
                  intermediate_size=384 if quick else 1536, num_hidden_layers=2 if quick else 4,
                  num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024, rms_norm_eps=1e-5)
    sizes = [20, 50, 33, 20] if quick else [37, 100, 256, 180, 64, 100]
    cv.manual_seed(0)
    model = CausalLM(config)
    rng = np.random.default_rng(0)

    def make(dynamic: Any) -> Callable:
        return cv.jit(lambda ids: model(ids), dynamic=dynamic)

    def batch(n: int) -> tuple:
        return (cv.Tensor(rng.integers(0, 2000, (1, n))),)

    return make, sizes, batch


WORKLOADS: dict[str, tuple[Callable, Any]] = {
    "dyn_mlp_train": (_mlp, {0: {0: "batch"}, 1: {0: "batch"}}),
    "dyn_llm_prefill": (_llm, {0: {1: "seq"}}),
}


def _run(name: str, quick: bool, out: TextIO) -> DynRow:
    build, spec = WORKLOADS[name]
    make, sizes, batch = build(quick)
    row = DynRow(name, sizes)
    fns = {"constant": make(False), "symbolic": make(spec)}
    inputs = {n: batch(n) for n in sorted(set(sizes))}
    results: dict[str, list[np.ndarray]] = {}
    for mode, fn in fns.items():
        seen: set[int] = set()
        spent, outs, first = 0.0, [], None
        for n in sizes:
            t0 = time.perf_counter()
            value = fn(*inputs[n]).numpy()
            dt = time.perf_counter() - t0
            if first is None:
                first = dt
            elif n not in seen:
                spent += dt
            seen.add(n)
            outs.append(value)
        row.traces[mode], row.first_s[mode], row.new_size_s[mode] = fn.traces, first, spent
        results[mode] = outs
        print(f"  {name} {mode}: {fn.traces} traces, first call {first:.2f} s, then {spent:.2f} s in the first "
              f"calls at {len(seen) - 1} new sizes", file=out, flush=True)
    if name != "dyn_mlp_train":  # (the training steps update two different models: compared by loss below)
        row.max_error = max(float(np.abs(a - b).max()) for a, b in zip(results["constant"], results["symbolic"]))
    else:
        row.max_error = max(abs(float(a) - float(b)) for a, b in zip(results["constant"], results["symbolic"]))
    steady = sizes[0]
    timings = time_interleaved({mode: (lambda fn=fn: fn(*inputs[steady]).realize()) for mode, fn in fns.items()},
                               5, 20.0, lambda mode, e: print(f"  {mode} failed: {e}", file=out))
    row.steady_ms = {mode: t.median_s * 1e3 for mode, t in timings.items()}
    return row


def measure(quick: bool) -> list[DynRow]:
    """Both workloads in a fresh kernel cache (restored afterwards)."""
    old = os.environ.get("CORVID_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="corvid-dyn-bench-") as cache:
        os.environ["CORVID_CACHE_DIR"] = cache
        try:
            print(f"jit_dynamic: symbolic sizes against a trace per size ({'quick' if quick else 'full'} sizes, "
                  "fresh kernel cache)", file=sys.stdout, flush=True)
            return [_run(name, quick, sys.stdout) for name in WORKLOADS]
        finally:
            if old is None:
                os.environ.pop("CORVID_CACHE_DIR", None)
            else:
                os.environ["CORVID_CACHE_DIR"] = old


def report(rows: list[DynRow], out: TextIO) -> None:
    """The table of :func:`measure`; RuntimeError when the two modes' results differ."""
    head = f"{'workload':<18} {'sizes':<28} {'traces c/s':>10} {'first c / s (s)':>16} {'new sizes c / s (s)':>20} " \
           f"{'x':>6} {'steady c / s (ms)':>18} {'ratio':>6}"
    print(head, file=out)
    bad = []
    for r in rows:
        new_c, new_s = r.new_size_s["constant"], r.new_size_s["symbolic"]
        st_c, st_s = r.steady_ms.get("constant", float("nan")), r.steady_ms.get("symbolic", float("nan"))
        sizes = ",".join(map(str, r.sizes))
        print(f"{r.name:<18} {sizes:<28} {r.traces['constant']:>4}/{r.traces['symbolic']:<5} "
              f"{r.first_s['constant']:>7.2f} / {r.first_s['symbolic']:<6.2f} {new_c:>9.2f} / {new_s:<8.2f} {new_c / max(new_s, 1e-9):>6.1f} {st_c:>8.2f} / {st_s:<7.2f} "
              f"{st_s / st_c:>6.2f}", file=out)
        if r.max_error > 1e-3:
            bad.append(f"{r.name}: symbolic and constant results differ by {r.max_error:.3g}")
    print(f"first: the first call (c: constant sizes, s: symbolic sizes). new sizes: seconds in the first call at each "
          f"later size not seen before; "
          f"x: c / s (target >= {NEW_SIZE_TARGET:g}). steady: median ms per call at a size seen before, the two "
          f"modes taking turns; ratio: s / c (target <= {STEADY_TARGET:g}).", file=out, flush=True)
    if bad:
        raise RuntimeError("; ".join(bad))

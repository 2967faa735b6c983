"""Keeps ``python -m benchmarks`` from rotting: the whole harness on tiny sizes (no absolute timing claims;
one relative one: the heuristics against no optimization, kernel by kernel)."""

import io
import json
import math
import pathlib
import subprocess
import sys

import pytest

from benchmarks import ALL, OVERHEADS, WORKLOADS, harness

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_harness_runs_every_workload_on_tiny_sizes():
    out = io.StringIO()
    rows = harness.run_benchmarks(repeat=2, budget_s=5.0, quick=True, cold_cache=False, out=out)
    text = out.getvalue()
    assert [r.workload.name for r in rows] == [w.name for w in ALL]
    for r in rows:
        assert not r.failures, r.failures
        peers = set(r.workload.runners) if isinstance(r, harness.OverheadRow) else {"corvid", "numpy"}
        assert {"corvid", "numpy"} & peers <= set(r.timings)
        assert all(t > 0 for t in r.timings["corvid"].runs_s)
    assert "FAIL" not in text
    for w in ALL:
        assert f"| {w.name} " in text


def test_transform_workloads_run_on_quick_sizes_and_give_finite_figures():
    """graph_build, jit_call and mlp_train: they run, pass their own checks (the jitted result is
    right, traced once, the MLP loss goes down) and give finite per-unit figures."""
    out = io.StringIO()
    rows = harness.run_benchmarks(only=[w.name for w in OVERHEADS], repeat=2, budget_s=5.0, quick=True,
                                  cold_cache=False, out=out)
    assert [r.workload.name for r in rows] == ["graph_build", "jit_call", "mlp_train"]
    text = out.getvalue()
    for r in rows:
        assert isinstance(r, harness.OverheadRow)
        assert not r.failures, r.failures
        assert r.units["corvid"] >= 1
        for name in r.timings:
            assert math.isfinite(r.best(name)) and r.best(name) > 0
            assert math.isfinite(r.median(name))
        assert r.met() in (True, False)
        assert f"target <= {r.workload.target:g} {r.workload.unit}" in text
    assert "FAIL" not in text and "ERROR" not in text


def test_only_selects_by_prefix_and_rejects_unknown_names():
    assert [w.name for w in harness.select(["matmul"])] == ["matmul_1024", "matmul_2048", "matmul_4096"]
    assert [w.name for w in harness.select(["jit,mlp"])] == ["jit_call", "mlp_train"]
    assert [w.name for w in harness.select(["sum,softmax"])] == ["sum", "sum_cold", "softmax"]
    with pytest.raises(ValueError, match="no workload matches"):
        harness.select(["nope"])


def test_a_workload_with_copies_takes_turns_over_them():
    """``copies``: each call reads the next copy of the inputs (distinct buffers, equal values),
    so a memory-bound row reads from memory, not from what the previous call left cached."""
    import numpy as np

    from benchmarks.frameworks import Framework
    from benchmarks.workloads import SUM_COLD

    seen = []
    fw = Framework("numpy", np.__version__, to_native=lambda a: a, finish=lambda a: a, to_numpy=lambda a: a)
    arg_sets = [[np.full(3, float(c))] for c in range(SUM_COLD.copies)]
    outs = {}
    call = harness._bound_call(fw, lambda x: seen.append(x[0]) or x.sum(), arg_sets, outs)
    for _ in range(2 * SUM_COLD.copies):
        call()
    assert SUM_COLD.copies >= 2 and seen == [float(c) for c in range(SUM_COLD.copies)] * 2
    assert outs["numpy"] == 3.0 * (SUM_COLD.copies - 1)


def test_a_wrong_corvid_result_is_reported_as_fail():
    import numpy as np

    row = harness.Row(WORKLOADS[0])
    harness._check(row, np.array([1.0, 2.0], np.float32), np.array([1.0, 2.5], np.float32))
    assert row.failures and "1 of 2 elements" in row.failures[0]


def test_latency_benchmark_runs_cold_then_warm_in_new_processes():
    """benchmarks.latency: two child processes over one fresh cache; the warm one finds the kernels
    the cold one compiled (so its first step compiles nothing and is faster), and both train."""
    from benchmarks import latency

    res = latency.measure(quick=True)
    for run in (res.cold, res.warm):
        assert math.isfinite(run["loss0"]) and run["loss1"] < run["loss0"]
    assert res.warm["first_s"] < res.cold["first_s"]
    out = io.StringIO()
    latency.report(res, out)
    assert "cold cache" in out.getvalue() and "warm cache" in out.getvalue()


def test_table_reports_the_fraction_of_the_roofline():
    out = io.StringIO()
    harness.run_benchmarks(only=["sum", "conv2d"], repeat=1, budget_s=2.0, quick=True, cold_cache=False, out=out)
    text = out.getvalue()
    assert "% of peak" in text and "(memory)" in text and "(compute)" in text


_CHECK = ("import json; from dataclasses import asdict; from benchmarks.heuristics import check_heuristics; "
          "print(json.dumps([asdict(r) | {'ok': r.ok} for r in check_heuristics(quick=True)]))")


def _check_in_a_new_process() -> list[dict]:
    proc = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_heuristics_never_give_a_slower_kernel_than_no_optimization():
    """Issue 5: on the benchmark set (small sizes) and a CNN training step, every kernel the
    heuristics change computes the same result and is not slower than the unoptimized kernel.

    Each check runs in a process of its own, and a kernel counts as slower only when it is slower
    in three processes: the time of a small kernel here depends on the process's address layout
    (the softmax's 64x64 kernel, unchanged, measured 6.0, 7.1 and 10.4 us in fresh processes, and
    once 6 us plain against 12 us with its actions within one), which no action causes."""
    results = _check_in_a_new_process()
    assert len(results) >= 10 and any("pad" in r["opts"] for r in results)
    key = lambda i, r: (i, r["workload"], r["kernel"])  # noqa: E731  (the check's order is fixed: seeded inputs)
    slow = {key(i, r): r for i, r in enumerate(results) if not r["ok"]}
    for _ in range(2):
        if not slow:
            break
        again = {key(i, r) for i, r in enumerate(_check_in_a_new_process()) if not r["ok"]}
        slow = {k: r for k, r in slow.items() if k in again}
    assert not slow, list(slow.values())


def test_peer_targets_are_judged_against_the_named_peer():
    """Issue 5's goals name a peer (the sum as fast as PyTorch): the table judges them against
    that peer's time in the same run, not numpy's, and says nothing where that peer is absent."""
    sum_wl = next(w for w in WORKLOADS if w.name == "sum")
    assert sum_wl.peer_target == ("torch", 1.0)
    timing = lambda s: harness.Timing(s, [s])  # noqa: E731
    slower = harness.Row(sum_wl, {"corvid": timing(2.0), "numpy": timing(3.0), "torch": timing(1.9)}, (1.0, "GB/s"))
    faster = harness.Row(sum_wl, {"corvid": timing(1.8), "numpy": timing(3.0), "torch": timing(1.9)}, (1.0, "GB/s"))
    no_torch = harness.Row(sum_wl, {"corvid": timing(2.0), "numpy": timing(3.0)}, (1.0, "GB/s"))
    text = harness.format_table([slower, faster], ["corvid", "numpy", "torch"]).splitlines()
    assert ">= 1x: met" in text[2] and ">= 1x torch: MISSED" in text[2]  # met against numpy, not torch
    assert ">= 1x torch: met" in text[3]
    assert "torch:" not in harness.format_table([no_torch], ["corvid", "numpy"])


def test_dispatch_benchmark_measures_host_time_on_the_stand_in_cuda_device():
    """``python -m benchmarks.dispatch``: every eager op runs on the stand-in CUDA device (the real
    CUDADevice over the test suite's stand-in driver and cuBLASLt) and gets a finite host time."""
    from benchmarks import dispatch

    times = dispatch.measure(calls=3, repeats=1)
    assert set(times) == {"x + 1 (1024)", "a @ b (bf16, library)", "a @ b.T (bf16, library)", "a8 @ b8.T (fp8 as bf16)", "layer_norm (64x768)", "softmax (64x768)",
                          "gelu (64x768)", "sum (64x768)", "conv2d 3x3 (library)"}
    assert all(0 < t < 1.0 for t in times.values()), times

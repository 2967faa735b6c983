"""The issue-24 additions to ``python -m benchmarks``: the transformer block workload, targets as
ratios against a peer measured in the same run (on overhead rows too), matmul_4096, and the
kernel check (a warning per compute-bound corvid kernel under half of the measured peak)."""

import io
import os

import numpy as np
import pytest

from benchmarks import ALL, harness, kernels
from benchmarks.blocks import (TRANSFORMER_BLOCK, BlockSizes, _reference, block_input, block_sizes, block_weights,
                               check_block)
from benchmarks.models import numpy_block
from benchmarks.training import CNN_TRAIN
from benchmarks.workloads import WORKLOADS


def _timing(s: float) -> harness.Timing:
    return harness.Timing(s, [s])


def test_the_targets_of_issue_24():
    names = {w.name: w for w in ALL}
    for n in ("matmul_1024", "matmul_2048", "matmul_4096"):
        assert names[n].target == 0.9, n
    assert names["conv2d"].peer_target == ("torch", 1.0)
    assert CNN_TRAIN.target == 104.0 and CNN_TRAIN.peer_target == ("torch", 1.0)  # the absolute target stays
    assert TRANSFORMER_BLOCK.target is None and TRANSFORMER_BLOCK.peer_target == ("torch", 1.0)
    assert [w.name for w in harness.select(["matmul_4"])] == ["matmul_4096"]
    assert block_sizes(False) == BlockSizes(batch=8, seq=256, d=768, heads=12)


def test_an_overhead_row_judges_its_peer_target_on_the_same_runs_figures():
    def row(corvid: float, torch: float | None) -> harness.OverheadRow:
        r = harness.OverheadRow(CNN_TRAIN)
        for name, s in (("corvid", corvid), ("torch", torch)):
            if s is not None:
                r.timings[name], r.units[name] = _timing(s), 1
        return r

    slower, faster, alone = row(0.090, 0.080), row(0.070, 0.080), row(0.070, None)
    assert slower.peer_met() is False and faster.peer_met() is True and alone.peer_met() is None
    assert slower.met() is True  # 90 ms <= 104 ms: the absolute target is judged apart
    lines = harness.format_overhead_table([slower, faster, alone], ["corvid", "numpy", "torch"]).splitlines()
    assert "<= 104: met" in lines[2] and ">= 1x torch: MISSED" in lines[2]
    assert ">= 1x torch: met" in lines[3]
    assert "torch:" not in lines[4]
    block = harness.OverheadRow(TRANSFORMER_BLOCK, {"corvid": _timing(0.1), "torch": _timing(0.2)},
                                {"corvid": 1, "torch": 1})
    assert block.met() is None and block.peer_ratio() == pytest.approx(2.0)
    assert ">= 1x torch: met" in harness.format_overhead_table([block], ["corvid", "torch"])


def test_the_block_check_sees_an_error_in_either_branch():
    w = block_weights(True)
    s = block_sizes(True)
    assert check_block(numpy_block(w, "", s.heads, block_input(True), np.float32), True) is None
    want = _reference(True)
    assert check_block(want.astype(np.float32), True) is None
    no_attention = dict(w, **{"attn.c_proj.weight": np.zeros_like(w["attn.c_proj.weight"])})
    wrong = numpy_block(no_attention, "", s.heads, block_input(True), np.float32)
    assert "differs" in check_block(wrong, True)
    assert "shape" in check_block(want[:1], True)


def test_transformer_block_runs_on_quick_sizes_and_is_judged_against_torch():
    pytest.importorskip("torch")
    out = io.StringIO()
    rows = harness.run_benchmarks(only=["transformer_block"], repeat=2, budget_s=5.0, quick=True, cold_cache=False,
                                  out=out, devices="CPU")
    text = out.getvalue()
    (r,) = rows
    assert not r.failures, r.failures
    assert {"corvid", "numpy", "torch"} <= set(r.timings)
    assert r.peer_ratio() is not None and r.peer_met() in (True, False)
    assert "target >= 1x torch (same run)" in text and "| transformer_block " in text
    assert "FAIL" not in text and "ERROR" not in text
    # the kernel check timed the jitted block's kernels one by one
    assert r.kernels is not None and len(r.kernels.kernels) >= 5
    assert any(k.flops > 0 for k in r.kernels.kernels) and "kernel check (issue 24)" in text


def test_the_kernel_check_times_each_kernel_and_restores_debug():
    import corvid as cv
    import corvid.engine.realize as realize_mod
    import corvid.transforms.jit as jit_mod

    reporters = (realize_mod._report, jit_mod._report)
    debug = os.environ.get("CORVID_DEBUG")
    rng = np.random.default_rng(0)
    a, b = (cv.Tensor(rng.standard_normal((64, 64), dtype=np.float32)).realize() for _ in range(2))
    prof = kernels.profile_kernels(lambda: (a @ b).realize(), runs=2)
    assert (realize_mod._report, jit_mod._report) == reporters and os.environ.get("CORVID_DEBUG") == debug
    assert prof.runs == 2 and prof.kernels
    mm = max(prof.kernels, key=lambda k: k.flops)
    assert mm.flops >= 2 * 64 ** 3 and mm.launches == 1 and mm.seconds > 0

    jitted = cv.jit(lambda x: (x @ x).sum())
    jitted(a).realize()
    assert kernels.profile_kernels(lambda: jitted(a).realize(), runs=1).kernels  # replayed kernels too


def test_the_kernel_check_warns_about_slow_compute_bound_kernels_that_matter():
    from corvid.runtime.peak import Peak

    def stat(name: str, seconds: float, flops: float, nbytes: float) -> kernels.KernelStat:
        return kernels.KernelStat(name, "8x8", "() -> float32[8]", "", 1, seconds, flops, nbytes, False)

    peak = Peak(gflops=100.0, gbps=10.0)
    prof = kernels.KernelProfile([
        stat("slow_matmul", 0.010, 2e8, 1e6),    # compute-bound, 20 GFLOP/s: 20% of peak -> warned
        stat("fast_matmul", 0.0025, 2e8, 1e6),   # 80 GFLOP/s: 80% -> not
        stat("copy", 0.010, 0.0, 1e7),           # memory-bound: never
        stat("tiny_matmul", 1e-5, 2e4, 1e2),     # slow but neither >= 5% of the time nor >= 1 ms
    ], runs=1)
    assert [k.name for k in kernels.slow_kernels(prof, peak)] == ["slow_matmul"]
    out = io.StringIO()
    assert kernels.report({"wl": prof, "empty": kernels.KernelProfile()}, peak, out) == 1
    text = out.getvalue()
    assert "WARNING slow kernel: wl: slow_matmul [8x8]" in text and "20% of compute peak" in text
    assert "fast_matmul" not in text and "FAIL" not in text
    out = io.StringIO()
    assert kernels.report({"wl": kernels.KernelProfile([prof.kernels[1]], 1)}, peak, out) == 0
    assert "no compute-bound kernel that matters" in out.getvalue()


def test_matmul_4096_is_listed_with_the_other_products():
    names = [w.name for w in WORKLOADS]
    assert names.index("matmul_4096") == names.index("matmul_2048") + 1

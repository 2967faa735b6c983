"""Keeps ``python -m benchmarks`` from rotting: the whole harness on tiny sizes (no timing claims)."""

import io

import pytest

from benchmarks import WORKLOADS, harness


def test_harness_runs_every_workload_on_tiny_sizes():
    out = io.StringIO()
    rows = harness.run_benchmarks(repeat=2, budget_s=5.0, quick=True, cold_cache=False, out=out)
    text = out.getvalue()
    assert [r.workload.name for r in rows] == [w.name for w in WORKLOADS]
    for r in rows:
        assert not r.failures, r.failures
        assert {"corvid", "numpy"} <= set(r.timings)
        assert all(t > 0 for t in r.timings["corvid"].runs_s)
    assert "FAIL" not in text
    for w in WORKLOADS:
        assert f"| {w.name} " in text


def test_only_selects_by_prefix_and_rejects_unknown_names():
    assert [w.name for w in harness.select(["matmul"])] == ["matmul_1024", "matmul_2048"]
    assert [w.name for w in harness.select(["sum,softmax"])] == ["sum", "softmax"]
    with pytest.raises(ValueError, match="no workload matches"):
        harness.select(["nope"])


def test_a_wrong_corvid_result_is_reported_as_fail():
    import numpy as np

    row = harness.Row(WORKLOADS[0])
    harness._check(row, np.array([1.0, 2.0], np.float32), np.array([1.0, 2.5], np.float32))
    assert row.failures and "1 of 2 elements" in row.failures[0]

"""The ``jit_dynamic`` benchmark section runs at quick sizes and reports both modes (targets are
judged on full sizes only: a report line, not an assertion here)."""

from __future__ import annotations

import io

from benchmarks import dynamic


def test_the_dynamic_section_measures_both_modes_and_their_results_agree():
    rows = dynamic.measure(quick=True)
    assert [r.name for r in rows] == list(dynamic.WORKLOADS)
    for r in rows:
        assert set(r.traces) == {"constant", "symbolic"}
        # a trace per size without symbolic sizes; fewer with them (guards split a few ranges at most)
        assert r.traces["symbolic"] < r.traces["constant"]
        assert r.steady_ms["symbolic"] > 0 and r.steady_ms["constant"] > 0
        assert r.max_error <= 1e-3
    out = io.StringIO()
    dynamic.report(rows, out)
    text = out.getvalue()
    assert "dyn_mlp_train" in text and "dyn_llm_prefill" in text and "target" in text

"""The corvid.frame benchmark section runs on its quick sizes, agrees with pandas, and reports
its table through the harness's ``--only frame``."""

from __future__ import annotations

import io

from benchmarks import frame, harness


def test_frame_section_runs_quick_and_checks_against_pandas():
    out = io.StringIO()
    rows = frame.measure(True, repeat=1, budget_s=5.0, out=out, only=["frame_groupby_1k", "frame_filter", "frame_join"])
    assert [r.workload.name for r in rows] == ["frame_groupby_1k", "frame_filter", "frame_join"]
    for r in rows:
        assert not r.failures, r.failures
        assert {"corvid", "pandas"} <= set(r.timings)
        assert r.ratio("pandas") is not None and r.ratio("pandas") > 0
    frame.report(rows, out)
    text = out.getvalue()
    assert "| frame_join " in text and "vs pandas" in text and "FAIL" not in text


def test_only_frame_selects_the_section_alone():
    assert harness.select(["frame"]) == []  # no array workload: the section runs by itself
    assert "frame" in harness.SECTIONS

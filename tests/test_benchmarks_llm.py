"""The llm_decode report section (benchmarks/llm.py) on its tiny model: every corvid mode loads,
prefills and decodes in its own process and in turns, and the report has their rows and the
targets (not judged at quick sizes). Figures at full size come from `python -m benchmarks --only
llm_decode`, never from a test."""

import io

import pytest

pytest.importorskip("safetensors")


def test_llm_section_measures_every_mode_on_quick_sizes():
    from benchmarks import harness, llm

    result = llm.measure(quick=True)
    assert result.failures == {}, result.failures
    for mode in ("bf16", "int8", "int4"):
        speed = result.speed[f"corvid {mode}"]
        assert speed["decode_s"] > 0 and speed["prefill_s"] > 0
        assert result.alone[f"corvid {mode}"]["peak_bytes"] > 0
    out = io.StringIO()
    llm.report(result, out)
    text = out.getvalue()
    assert "corvid int4" in text and "(quick sizes: not judged)" in text and "FAIL" not in text
    assert "llm" in harness.SECTIONS and harness.select(["llm_decode"]) == []

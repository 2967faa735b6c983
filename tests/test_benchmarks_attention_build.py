"""benchmarks/attention_build.py: the tensor-core attention kernels' registers, spills and shared
memory as ptxas reports them (skipped without nvcc), and the occupancy arithmetic."""

import shutil

import pytest

from benchmarks import attention_build as AB


def test_resident_warps_follow_the_tightest_of_registers_threads_and_shared_memory():
    assert AB.resident_warps(138, 128, 36864) == 12  # (3 blocks of 4 warps by registers: 144 x 128 each)
    assert AB.resident_warps(253, 128, 37888) == 8  # (256 registers a thread: 2 blocks)
    assert AB.resident_warps(64, 128, 100000) == 8  # (2 blocks by shared memory)
    assert AB.resident_warps(32, 1024, 0) == 64  # (2 blocks by threads: 2048)
    assert AB.resident_warps(168, 128, 27648) == 12


def test_the_table_lists_each_kernels_variants(capsys, monkeypatch):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed (the figures are ptxas's)")
    from corvid.render import cuda_attention as CA

    monkeypatch.setattr(CA, "variants", lambda kind, d, dv: [CA.DEFAULT])
    assert AB.main(["--tokens", "128"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [r.split()[0] for r in rows] == ["fwd_tc", "dq_tc", "dkdv_tc"]
    for r in rows:
        fields = r.split()
        regs, spill, smem, ptx, warps = (int(x) for x in fields[-5:])
        assert 64 <= regs <= 255 and spill == 0 and 16384 < smem <= 49152 and ptx > 1000 and warps in (4, 8, 12, 16)

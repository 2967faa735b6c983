"""cv.profile (corvid/profiler.py) on the CPU: every kernel a realize or a jit call launches inside
the block is listed once, by name, with its time and estimates; nothing outside the block; the
summary adds up per name. (tests/test_cuda_runtime.py checks the CUDA device's event timing on
the stand-in driver.)"""

import threading

import numpy as np
import pytest

import corvid as cv


def _x():
    return cv.Tensor(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)).realize()


def test_each_launch_is_listed_once_with_its_kernels_name():
    x = _x()
    f = cv.jit(lambda a: (a * 2 + 1).exp().sum(1))
    f(x)  # (traced outside the block)
    (x - 1).realize()  # (outside: not listed)
    with cv.profile() as prof:
        eager = (x.T @ x).sum(0)
        schedule = eager.schedule()
        eager.realize()
        for _ in range(3):
            f(x)
    jitted = [ln.sk.name for ln in next(iter(f._cache.values()))[0].launches]
    assert [k.name for k in prof.kernels] == [sk.name for sk in schedule] + jitted * 3
    assert all(k.device == "CPU" and k.seconds > 0 for k in prof.kernels)
    assert prof.kernels[0].flops >= 2 * 64 ** 3 and prof.kernels[0].nbytes >= 64 * 64 * 4  # (x read once: both operands)
    summary = {s.name: s for s in prof.summary()}
    names = [k.name for k in prof.kernels]
    assert all(summary[n].calls == names.count(n) for n in names)
    assert sum(s.seconds for s in summary.values()) == pytest.approx(prof.total)
    assert prof.summary()[0].seconds == max(s.seconds for s in summary.values())
    assert prof.total <= prof.wall
    lines = prof.table().splitlines()
    assert lines[0].split()[:3] == ["kernel", "device", "calls"] and lines[-1].startswith("total")
    assert len(lines) == len(summary) + 2


def test_nothing_is_measured_outside_the_block_or_without_a_realize():
    x = _x()
    with cv.profile() as prof:
        y = x * 3  # (lazy: nothing runs)
    assert prof.kernels == [] and prof.total == 0
    y.realize()
    assert prof.kernels == []
    assert "total" in prof.table()


def test_a_failure_inside_the_block_ends_the_profile():
    x = _x()
    with pytest.raises(ValueError, match="boom"):
        with cv.profile() as prof:
            (x + 1).realize()
            raise ValueError("boom")
    assert len(prof.kernels) == 1
    with cv.profile() as again:  # (the first one ended: a new one may start)
        (x + 2).realize()
    assert len(again.kernels) == 1


def test_one_profile_at_a_time_and_kernels_of_other_threads_are_counted():
    x = _x()
    with cv.profile() as prof:
        with pytest.raises(RuntimeError, match="one at a time"):
            with cv.profile():
                pass
        t = threading.Thread(target=lambda: (x * 5).realize())
        t.start()
        t.join()
    assert len(prof.kernels) == 1  # (the process's kernels: the other thread's too)

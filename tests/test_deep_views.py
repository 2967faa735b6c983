"""Deep chains of views: chains whose index the simplifier cannot fold are split into kernels (the
scheduler stores a view's source where its index would pass MAX_INDEX_SIZE terms), so they
schedule in about a second and give numpy's value. Each case ran for minutes before (8 flip
rounds never finished rendering; 2000 pad rounds took 96 s), so each runs in a subprocess with a
timeout: a regression fails instead of hanging the suite."""

import subprocess
import sys
import textwrap

import numpy as np

import corvid as cv
from corvid.engine.schedule import MAX_INDEX_SIZE, VIEW_PROBE_DEPTH

TIMEOUT_S = 60

_CASES = textwrap.dedent("""
    import numpy as np
    import corvid as cv

    def flip_rounds(n):
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        x, e = cv.Tensor(a), a
        for _ in range(n):
            x = x.flip(0).reshape(4, 3).reshape(3, 4)
            e = e[::-1].reshape(4, 3).reshape(3, 4)
        return x, e

    def transpose_rounds(n):
        a = np.arange(24, dtype=np.float32).reshape(4, 6)
        x, e = cv.Tensor(a), a
        for _ in range(n):
            x = x.reshape(6, 4).permute(1, 0).reshape(4, 6)
            e = e.reshape(6, 4).T.reshape(4, 6)
        return x, e

    def shift_rounds(n):
        a = np.arange(1, 2 * n + 1, dtype=np.float32)
        x, e = cv.Tensor(a), a
        for _ in range(n):
            x = x.pad(((1, 0),))[:-1]
            e = np.pad(e, (1, 0))[:-1]
        return x, e
""")


def run_case(case: str, rounds: int) -> int:
    """Run ``case(rounds)`` in a fresh interpreter, check it against numpy there; its kernel count."""
    script = _CASES + textwrap.dedent(f"""
        x, e = {case}({rounds})
        y = x * 2  # (computed from the chain: a view realized alone may be copied by numpy instead)
        kernels = len(y.schedule())
        np.testing.assert_array_equal(y.numpy(), e * 2)
        np.testing.assert_array_equal(x.numpy(), e)
        print(kernels)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1])


def test_flip_and_reshape_rounds_split_into_kernels():
    # each round multiplies the written-out index by 5: 8 rounds made 470k terms
    assert 2 <= run_case("flip_rounds", 8) <= 4


def test_reshape_transpose_reshape_rounds_split_into_kernels():
    assert 2 <= run_case("transpose_rounds", 16) <= 4


def test_pad_and_shrink_rounds_split_where_the_gate_grows():
    # each pad adds a condition to the gate: 3000 of them are split into a few kernels
    assert 2 <= run_case("shift_rounds", 3000) <= 8


def test_short_view_chains_stay_one_kernel():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = cv.Tensor(a)
    for _ in range(VIEW_PROBE_DEPTH):  # probed, and small enough to fuse
        x = x.reshape(6, 4).reshape(4, 6)
    assert len((x * 2).schedule()) == 1
    np.testing.assert_array_equal((x * 2).numpy(), a * 2)
    assert x.schedule() == [] and np.array_equal(x.numpy(), a)  # reshapes alone share the buffer


def test_the_first_kernel_of_a_split_chain_reads_a_bounded_index():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x, e = cv.Tensor(a), a
    for _ in range(12):
        x = x.flip(0).reshape(4, 3).reshape(3, 4)
        e = e[::-1].reshape(4, 3).reshape(3, 4)
    sched = x.schedule()
    # a load's index is at most the limit plus one view's growth (a round multiplies it by 5)
    assert all(len(k.source) < 40 * MAX_INDEX_SIZE for k in sched)
    np.testing.assert_array_equal(x.numpy(), e)

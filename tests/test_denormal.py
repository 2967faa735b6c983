"""cv.set_flush_denormal (corvid/runtime/denormal.py): subnormal floats flushed on the CPU when
asked (in the calling thread and in the kernels' OpenMP threads), IEEE otherwise."""

import platform

import numpy as np
import pytest

import corvid as cv

X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")
N = 1 << 22  # (a kernel over this many elements runs on every OpenMP thread)


def _tiny_products():
    x = cv.Tensor(np.full(N, 1e-20, np.float32))
    return (x * 1e-20 + 0.0).numpy()  # 1e-40: a subnormal float32


def test_subnormals_are_kept_by_default():
    got = _tiny_products()
    want = np.float32(1e-20) * np.float32(1e-20)
    assert want != 0 and np.array_equal(got, np.full(N, want, np.float32))
    assert cv.flush_denormal() is False


@pytest.mark.skipif(not X86, reason="flushing subnormals is the x86 MXCSR's")
def test_flushing_subnormals_and_back():
    try:
        assert cv.set_flush_denormal(True) is True and cv.flush_denormal() is True
        assert not _tiny_products().any()  # every thread's share flushed
        assert np.float32(1e-20) * np.float32(1e-20) == 0  # (numpy in this thread too, as with torch)
        x = cv.Tensor(np.array([2e-39, -3.0], np.float32))
        np.testing.assert_array_equal((x + 1.0).numpy(), [1.0, -2.0])  # a subnormal input reads as zero
    finally:
        assert cv.set_flush_denormal(False) is True
    assert cv.flush_denormal() is False
    want = np.float32(1e-20) * np.float32(1e-20)
    assert np.array_equal(_tiny_products(), np.full(N, want, np.float32))


def test_the_mode_must_be_a_bool():
    with pytest.raises(TypeError, match="True or False"):
        cv.set_flush_denormal(1)

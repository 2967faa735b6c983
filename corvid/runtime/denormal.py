"""Flushing subnormal floats on the CPU: ``cv.set_flush_denormal`` (as ``torch.set_flush_denormal``).

A float32 below 1.18e-38 in magnitude (a subnormal) costs an x86 core a microcode assist of about
a hundred cycles in every operation that reads or makes one. Training that drives a loss toward
zero fills its gradients with them: the MNIST CNN's Adam step on the benchmark's synthetic batch
went from 42 ms to 203 ms once its loss was near 1e-8 (a 2-core Xeon), and back to 41 ms with
subnormals flushed. corvid keeps IEEE arithmetic by default, as numpy and PyTorch do (a subnormal
is a value, and tests compare with numpy bit for bit); ``cv.set_flush_denormal(True)`` trades it
for speed: subnormal inputs read as zero (DAZ) and subnormal results become zero (FTZ).

The mode is the x86 MXCSR register's, which every thread has its own of: the call sets it in the
calling thread and in the OpenMP threads that run corvid's CPU kernels (threads created later by
the calling thread inherit it). numpy in the calling thread flushes too while it is on. Other
threads, and other devices (GPUs keep IEEE subnormals: NVRTC builds without ``-ftz``), are not
affected. On a CPU without MXCSR (not x86) it returns False and changes nothing.
"""

from __future__ import annotations

import ctypes
import platform
import threading

_SOURCE = r"""
void cv_flush_denormal(int on) {  /* MXCSR bits: FTZ 0x8000, DAZ 0x0040 */
  #pragma omp parallel
  {
    unsigned csr = __builtin_ia32_stmxcsr();
    __builtin_ia32_ldmxcsr(on ? (csr | 0x8040u) : (csr & ~0x8040u));
  }
}
int cv_flush_denormal_state(void) { return (__builtin_ia32_stmxcsr() & 0x8040u) == 0x8040u; }
"""

_lock = threading.Lock()
_functions: list = []


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")


def _helpers() -> tuple:
    with _lock:
        if not _functions:
            from .compiler import compile_kernel

            lib = compile_kernel(_SOURCE, "cv_flush_denormal")
            set_fn = lib.function("cv_flush_denormal", [ctypes.c_int])
            get_fn = lib.function("cv_flush_denormal_state", [])
            get_fn.restype = ctypes.c_int
            _functions.extend([set_fn, get_fn])
        return _functions[0], _functions[1]


def set_flush_denormal(mode: bool) -> bool:
    """Flush subnormal floats to zero on the CPU (``mode=True``: faster where values underflow,
    no longer IEEE) or keep them (``False``, the default). Returns True where the CPU supports
    it (x86) and the mode is now set, False elsewhere (nothing changes). See the module docstring
    for which threads it affects.

    >>> x = cv.Tensor(np.array([1e-20], np.float32))
    >>> (x * 1e-20).tolist()  # a subnormal float32, kept
    [9.99994610111476e-41]
    >>> cv.set_flush_denormal(True)  # (an x86 CPU)
    True
    >>> (x * 1e-20).tolist()
    [0.0]
    >>> cv.set_flush_denormal(False)
    True
    """
    if not isinstance(mode, bool):
        raise TypeError(f"set_flush_denormal: mode must be True or False, got {mode!r}")
    if not _x86():
        return False
    set_fn, _ = _helpers()
    set_fn(int(mode))
    return True


def flush_denormal() -> bool:
    """Whether subnormal floats are flushed in the calling thread (:func:`set_flush_denormal`).

    >>> cv.flush_denormal()
    False
    """
    if not _x86():
        return False
    return bool(_helpers()[1]())


__all__ = ["flush_denormal", "set_flush_denormal"]

"""Complex values on the CUDA device without a GPU (corvid/render/gpu.py: _COMPLEX_LIB, the CUDA
dialect's cv_complex64/cv_complex128 structs).

The backend suite's complex kernels are compiled for sm_90 by tests/test_cuda.py. Here the CUDA
sources of complex kernels run on the host through the shim of tests/test_cuda_scatter.py (each
thread of the launch :func:`corvid.render.cuda.cuda_launch` gives, one after another), and their
values are compared with numpy's: bitwise for arithmetic, products, quotients and product
reduces (infinities and nans included); within a few ulps for the functions (the host's libm
stands in for CUDA's, whose error bounds are documented).
"""

import ctypes
import re
import shutil
import tempfile

import numpy as np
import pytest

import corvid as cv
from corvid.codegen.passes import finalize
from corvid.render.cuda import CUDARenderer, cuda_launch
from corvid.runtime.cuda import CUDADevice
from tests.test_cuda_scatter import _host_library
from tests.test_opt import _base

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to run the CUDA sources on the host")

def _other(d):
    return {np.dtype(np.complex64): np.complex128, np.dtype(np.complex128): np.complex64}[np.dtype(d)]


# (cv, numpy) pairs computed exactly as numpy does; no constants (a kernel reads those from a buffer)
EXACT = {"arith": (lambda x: x * x + x / (x + x.conj()) - x, lambda a: a * a + a / (a + np.conj(a)) - a),
         "conj": (lambda x: x.conj() * x, lambda a: np.conj(a) * a),
         "parts": (lambda x: x.real * x.imag - x.imag, lambda a: a.real * a.imag - a.imag),
         "eq": (lambda x: x == x.conj(), lambda a: a == np.conj(a)),
         "prod": (lambda x: x.prod(axis=1), lambda a: a.prod(axis=1)),
         "neg": (lambda x: -x + x.real.astype(x.dtype), lambda a: -a + a.real.astype(a.dtype)),
         "cast": (lambda x: x.astype(cv.Tensor(np.zeros(1, _other(x.dtype.np))).dtype), lambda a: a.astype(_other(a.dtype)))}
FUNCTIONS = ("exp", "log", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh", "abs", "arcsin", "arccos", "arctan",
             "arcsinh", "arccosh", "arctanh")


@pytest.mark.parametrize("npdt", [np.complex64, np.complex128])
def test_cuda_complex_kernels_compute_the_cpus_values(npdt):
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((5, 40)) + 1j * rng.standard_normal((5, 40))).astype(npdt)
    a[0, :6] = [0, -0.0 + 2j, 1e30 - 1e30j, np.inf + 1j, 3 - 4j, 1e-30 + 0j]
    exprs = dict(EXACT, **{name: (lambda x, name=name: getattr(x, name.replace("arc", "a"))(), getattr(np, name))
                           for name in FUNCTIONS})
    exprs["pow"] = (lambda x: x ** x, lambda a: a ** a)
    exprs["sum"] = (lambda x: x.sum(axis=1), lambda a: a.sum(axis=1))  # (numpy adds pairwise: not its bits)
    r, cases = CUDARenderer(), []
    for name, (f, g) in exprs.items():
        x = cv.Tensor(a).realize()
        with np.errstate(all="ignore"):
            want = g(a)
        k = finalize(_base(f(x)), block=CUDADevice.sum_block)
        assert len(k.params) == 2, name  # (the output and x)
        src = r.render(k)
        src = re.sub(r"(__launch_bounds__\(\d+\) )(\w+)\(", rf"\g<1>k_{name}(", src, count=1)
        cases.append((name, src, cuda_launch(k), want))
    with tempfile.TemporaryDirectory() as tmp:
        lib = _host_library([c[1] for c in cases], tmp)
    for i, (name, _, dims, want) in enumerate(cases):
        out = np.zeros_like(want)
        arrays = [out, a, a, a]  # (the kernel takes two)
        getattr(lib, f"cv_run_{i}")((ctypes.c_void_p * 4)(*[x.ctypes.data for x in arrays]),
                                    ctypes.c_long(dims.blocks), ctypes.c_long(dims.threads[0]))
        if name in EXACT:
            assert out.tobytes() == want.tobytes(), (name, out, want)
        else:
            tol = 5e-5 if npdt == np.complex64 else 1e-12
            finite = np.isfinite(want)
            np.testing.assert_allclose(out[finite], want[finite], rtol=tol, atol=tol, err_msg=name)

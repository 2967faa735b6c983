"""Kernels as the CUDA device renders them, run without a GPU: work-group reduces through warp
shuffles (corvid/render/cuda.py: ``CUDARenderer._emit_shared_reduce``) and elementwise kernels of
wide items (corvid/codegen/opt.py: ``wide_items``; tests/test_cuda.py reads their PTX).

The kernels are those the CUDA device makes (its heuristics; work-groups of 256, 64 and 32 work
items, rows shared by a block, a row's reduces sharing one), rendered as CUDA C and compiled by
the host's C++ compiler with an emulation of the CUDA built-ins (tests/cuda_emulator.py: a block's
threads as OS threads, ``__syncthreads``, and ``__shfl_down_sync``/``__shfl_sync`` across each
warp of 32). Their values are compared with the same kernels run unoptimized on the CPU: exactly
where the order of a reduce cannot show (max and min with nan and signed zeros, integer sums that
wrap), to float rounding for float sums. A kernel whose shuffles read the wrong lane, or whose
warps' partials are combined from the wrong slots, gives wrong values here.
"""

import numpy as np
import pytest

from corvid.codegen.ir import Opt
from corvid.codegen.opt import apply_opt, gpu_heuristics
from corvid.codegen.passes import finalize
from corvid.codegen import search
from corvid.render.cuda import VECTOR_BYTES, CUDARenderer, cuda_launch
from corvid.runtime.cuda import CUDADevice
from tests import cuda_emulator as E
from tests.test_gpu_style import _run
from tests.test_opt import _base, _real

import corvid as cv

MAX_THREADS = 1024


def _emulate(k, arrays: list[np.ndarray]) -> np.ndarray:
    """Kernel ``k``'s output, computed by its CUDA source in the emulation."""
    if E.compiler() is None:
        pytest.skip("no C++ compiler")
    src = CUDARenderer().render(k)
    dims = cuda_launch(k)
    assert dims.threads[1:] == (1, 1), "the emulation has one thread dimension"
    text, name = E.kernel_source(src)
    types = E.param_types(k)
    try:
        lib = E.build(text, name, types)
    except Exception as e:  # (a compiler without C++20's <barrier>)
        pytest.skip(f"the CUDA emulation does not build here: {str(e)[:300]}")
    out = np.zeros(k.params[0].size, k.params[0].dtype.np)
    E.launch(lib, [out] + [np.ascontiguousarray(a) for a in arrays], int(dims.blocks), dims.threads[0])
    return out


def _cuda(k0):
    return finalize(gpu_heuristics(k0, MAX_THREADS), block=CUDADevice.sum_block)


def _inputs(k0, seed: int, special: bool = False) -> list[np.ndarray]:
    arrays = search.random_inputs(k0, seed=seed)
    if special:  # nan in some rows, signed zeros and infinities in others
        out = []
        for a in arrays:
            if a.dtype.kind == "f":
                a = a.copy().reshape(-1)
                a[::997] = np.nan
                a[5::13] = -0.0
                a[7::17] = 0.0
                a[11::1013] = -np.inf
            out.append(a)
        arrays = out
    return arrays


def _same(got, want, exact: bool, atol=1e-6):
    """Bit for bit, or to float32 rounding (``atol``: a sum's bound, eps times the sum of the
    magnitudes times the depth of its tree)."""
    assert got.dtype == want.dtype
    if exact:
        np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8))
    else:
        bad = ~(np.abs(got.astype(np.float64) - want) <= atol + 1e-5 * np.abs(want))
        assert not bad.any(), (got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("case", ["sum_rows", "max_rows", "min_rows", "int_sum", "softmax", "logsumexp", "full_sum"])
def test_work_group_reduces_through_warp_shuffles_keep_their_values(case):
    ints = cv.Tensor(np.random.default_rng(1).integers(-2**31, 2**31 - 1, (64, 4096), dtype=np.int64)
                     .astype(np.int32)).realize()
    t = {"sum_rows": lambda: _real(64, 4096).sum(axis=1),
         "max_rows": lambda: _real(64, 4096).max(axis=1),
         "min_rows": lambda: _real(64, 4096).min(axis=1),
         "int_sum": lambda: ints.astype(cv.uint32).sum(axis=1, dtype=cv.uint32),
         "softmax": lambda: _real(8, 8192).softmax(-1),
         "logsumexp": lambda: _real(64, 512).logsumexp(axis=1),
         "full_sum": lambda: _real(1 << 16).sum()}[case]()
    k0 = _base(t)
    # (a log-sum-exp's reduces share a work-group per row from 4096 rows on; fewer here, as fast)
    k = apply_opt(k0, Opt("reduces_local", 0, 128)) if case == "logsumexp" else _cuda(k0)
    src = CUDARenderer().render(k)
    assert "__shfl_down_sync" in src and src.count("__syncthreads();") <= 4 * src.count("__shfl_down_sync")
    exact = case in ("max_rows", "min_rows", "int_sum")
    arrays = _inputs(k0, seed=3, special=case in ("max_rows", "min_rows"))
    atol = 1e-6
    if case in ("sum_rows", "full_sum"):  # (the order differs from the CPU's: within the rounding of each)
        atol = 2 * np.finfo(np.float32).eps * _run("CPU", k0, [np.abs(a) for a in arrays])
    _same(_emulate(k, arrays), _run("CPU", k0, arrays), exact, atol)


@pytest.mark.parametrize("width", [32, 64, 16])
def test_a_work_group_of_one_warp_or_of_no_whole_warp(width):
    """32 work items: one warp, its total broadcast from lane 0; 64: two warps' partials through
    shared memory; 16: no whole warp, so the tree through shared memory, as before."""
    k0 = _base(_real(32, 1024).max(axis=1))
    k = apply_opt(k0, Opt("group_local", 0, width))
    src = CUDARenderer().render(k)
    assert ("__shfl_down_sync" in src) == (width % 32 == 0)
    assert ("__shfl_sync(" in src) == (width == 32)
    arrays = _inputs(k0, seed=4, special=True)
    _same(_emulate(k, arrays), _run("CPU", k0, arrays), True)


@pytest.mark.parametrize("case", ["chain", "bf16", "broadcast_row", "to_int8", "odd_rows"])
def test_wide_items_compute_the_cpus_values(case):
    """Elementwise kernels of 4 or 8 outputs per thread, their loads first, as CUDA renders them
    (with the buffers' alignment stated): the values of the unoptimized kernel on the CPU."""
    n = 1 << 14
    x = _real(n)
    t = {"chain": lambda: (x * 1.5 + 0.5).relu() * x - 2,
         "bf16": lambda: (x.astype(cv.bfloat16) * 3 + 1).astype(cv.bfloat16),
         "broadcast_row": lambda: (x.reshape(-1, 256) + _real(256, seed=1)).astype(cv.bfloat16),
         "to_int8": lambda: (x * 100).astype(cv.int8),
         "odd_rows": lambda: _real(64, 258)[:, :257] * 2 + _real(64, 1, seed=2)}[case]()  # (4 rows per item)
    k0 = _base(t)
    k = gpu_heuristics(k0, MAX_THREADS, vector_bytes=VECTOR_BYTES)
    assert any(o.op == "upcast" for o in k.opts)
    arrays = _inputs(k0, seed=6, special=True)
    _same(_emulate(k, arrays), _run("CPU", k0, arrays), True)

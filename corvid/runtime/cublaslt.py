"""Matrix products on the CUDA device through NVIDIA's cuBLASLt, called with ctypes.

corvid writes its own kernels for everything it fuses (elementwise chains, reductions, softmax,
norms). A large matrix product is the exception: it is arithmetic on tensor cores, and NVIDIA's
library is what PyTorch and JAX call for it too (docs/backends.md says why this route was chosen).
``a @ b`` on a CUDA tensor becomes one host op (:mod:`corvid.ops.blas`) whose program on the CUDA
device is :class:`GemmProgram`: one ``cublasLtMatmul`` on the device's stream, so it is ordered
with corvid's own kernels like any launch.

* **The library** comes from NVIDIA's ``nvidia-cublas`` wheel (``pip install "corvid[cuda]"``),
  found through ``cuda-pathfinder`` when it is installed, else in the wheel's folders, else on
  the system's library path; ``CORVID_CUBLASLT`` names a file instead, and ``CORVID_CUBLAS=0``
  turns the route off (corvid's own kernels compute the products). Nothing here runs without an
  NVIDIA driver: only the descriptors are built on the host.
* **Layout**: corvid's arrays are row-major and cuBLASLt's column-major. A row-major ``C = A @ B``
  is the column-major ``C^T = B^T A^T``, and a row-major matrix read as column-major is its
  transpose, so the product is computed as cuBLASLt's ``D = B' A'`` with the buffers as they are:
  no copies. A transposed view (``w.T``, the gradients' ``g @ w``) is passed as the matrix under
  it with cuBLASLt's transpose flag.
* **Batches**: one strided batch (``BATCH_COUNT``, ``STRIDED_BATCH_OFFSET``); a 2-d operand under a
  batched one is read with a stride of 0. Leading axes that no single stride describes (a
  broadcast inside a batch, as ``vmap`` can make) are looped over, one call per outer index.
* **Precision** (:func:`corvid.set_float32_matmul_precision`): float32 products compute in exact
  float32 (``CUBLAS_COMPUTE_32F``) by default; ``"high"`` allows TF32 tensor cores, ``"medium"``
  bfloat16 ones. float16 and bfloat16 operands use the tensor cores and accumulate in float32;
  float64 computes in float64.
* **Plans**: the descriptors and the algorithm the library's heuristic picks are built once per
  shape and kept (:class:`Blas`); every call shares one workspace of :data:`WORKSPACE_BYTES`.

Tested without a GPU (``tests/test_cublaslt.py``): the constants and the ctypes prototypes against
the wheel's ``cublasLt.h``, the descriptors against the real library (which builds them without a
GPU), and every product through a stand-in library that computes what the descriptors describe.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import math
import os
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from .device import Program

_INSTALL = 'pip install "corvid[cuda]" (it brings NVIDIA\'s nvidia-cublas wheel)'
WORKSPACE_BYTES = 32 << 20  # what NVIDIA suggests for Hopper's kernels; shared by every product of a device

# --- constants (cublasLt.h, cublas_api.h and library_types.h of CUDA 13; the test file checks them) --------------
STATUS_SUCCESS = 0
OP_N, OP_T = 0, 1
DESC_COMPUTE_TYPE, DESC_SCALE_TYPE, DESC_TRANSA, DESC_TRANSB = 0, 1, 3, 4
DESC_EPILOGUE, DESC_BIAS_POINTER, DESC_BIAS_DATA_TYPE = 7, 8, 26
EPILOGUE_DEFAULT, EPILOGUE_BIAS = 1, 4
LAYOUT_BATCH_COUNT, LAYOUT_STRIDED_BATCH_OFFSET = 5, 6
PREF_MAX_WORKSPACE_BYTES = 1
PREF_MIN_ALIGNMENT_A_BYTES, PREF_MIN_ALIGNMENT_B_BYTES = 5, 6
PREF_MIN_ALIGNMENT_C_BYTES, PREF_MIN_ALIGNMENT_D_BYTES = 7, 8
ALIGNMENT = 256  # what cuMemAlloc's blocks are aligned to, and what the library assumes unless told
COMPUTE_32F, COMPUTE_32F_FAST_16BF, COMPUTE_32F_FAST_TF32, COMPUTE_64F = 68, 75, 77, 70
R_32F, R_64F, R_16F, R_16BF, R_8F_E4M3, R_8F_E5M2 = 0, 1, 2, 14, 28, 29

# corvid dtype name -> the cudaDataType of the operands and the result (Gemm.compute gives the compute and scale types)
DATA_TYPES = {"float32": R_32F, "float64": R_64F, "float16": R_16F, "bfloat16": R_16BF,
              "float8_e4m3fn": R_8F_E4M3, "float8_e5m2": R_8F_E5M2}
FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
FP8_ARCH = 89  # compute capability (x10) from which the library has 8-bit float tensor-core products (Ada, Hopper)
FP8_ALIGN = 16  # elements: what an 8-bit float product's k and leading dimensions must be multiples of
# float32's compute type by precision (the others have one each)
FLOAT32_COMPUTE = {"highest": COMPUTE_32F, "high": COMPUTE_32F_FAST_TF32, "medium": COMPUTE_32F_FAST_16BF}


class CublasError(RuntimeError):
    """A cuBLASLt call failed; the message names the call, its status and the product."""


class HeuristicResult(ctypes.Structure):
    """``cublasLtMatmulHeuristicResult_t``: an algorithm (64 opaque bytes) and what it needs."""

    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspaceSize", ctypes.c_size_t), ("state", ctypes.c_int),
                ("wavesCount", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


# name -> (restype, argtypes): the functions used, as cublasLt.h declares them
_P, _I32, _U64, _I64, _SZ = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_int64, ctypes.c_size_t
PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "cublasLtGetVersion": (_SZ, []),
    "cublasLtGetStatusString": (ctypes.c_char_p, [_I32]),
    "cublasLtCreate": (_I32, [_P]),
    "cublasLtDestroy": (_I32, [_P]),
    "cublasLtMatmulDescCreate": (_I32, [_P, _I32, _I32]),
    "cublasLtMatmulDescDestroy": (_I32, [_P]),
    "cublasLtMatmulDescSetAttribute": (_I32, [_P, _I32, _P, _SZ]),
    "cublasLtMatrixLayoutCreate": (_I32, [_P, _I32, _U64, _U64, _I64]),
    "cublasLtMatrixLayoutDestroy": (_I32, [_P]),
    "cublasLtMatrixLayoutSetAttribute": (_I32, [_P, _I32, _P, _SZ]),
    "cublasLtMatmulPreferenceCreate": (_I32, [_P]),
    "cublasLtMatmulPreferenceDestroy": (_I32, [_P]),
    "cublasLtMatmulPreferenceSetAttribute": (_I32, [_P, _I32, _P, _SZ]),
    "cublasLtMatmulAlgoGetHeuristic": (_I32, [_P, _P, _P, _P, _P, _P, _P, _I32, _P, _P]),
    "cublasLtMatmul": (_I32, [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _SZ, _P]),
}


def library_path() -> str:
    """Where libcublasLt is: ``$CORVID_CUBLASLT``, cuda-pathfinder's answer, the nvidia-cublas
    wheel's folders, or the system's library path. ImportError naming the extra when none has it."""
    named = os.environ.get("CORVID_CUBLASLT", "").strip()
    if named:
        if not os.path.isfile(named):
            raise ImportError(f"CORVID_CUBLASLT={named}: no such file")
        return named
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib  # type: ignore[import-not-found]

        found = load_nvidia_dynamic_lib("cublasLt").abs_path
        if found:  # (None when it cannot tell where an already loaded copy came from)
            return found
    except Exception:  # (not installed, or it found nothing: look where the wheels put it)
        pass
    for base in sys.path:
        for pattern in ("nvidia/cu13/lib/libcublasLt.so.*", "nvidia/cublas/lib/libcublasLt.so.*"):
            found = sorted(glob.glob(os.path.join(base, pattern)))
            if found:
                return found[-1]
    found = ctypes.util.find_library("cublasLt")
    if found:
        return found
    raise ImportError(f"cuBLASLt (libcublasLt) was not found: {_INSTALL}")


def load(path: str | None = None) -> ctypes.CDLL:
    """The library with :data:`PROTOTYPES` declared."""
    lib = ctypes.CDLL(path or library_path())
    for name, (restype, argtypes) in PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


class _Owned:
    """An opaque cuBLASLt object, destroyed with ``destroy`` when collected."""

    def __init__(self, lib: Any, destroy: str, value: ctypes.c_void_p):
        self.value = value
        self._done = weakref.finalize(self, getattr(lib, destroy), value)
        self._done.atexit = False  # (the library may be gone at exit)


class CublasLt:
    """The calls corvid makes, on a library (:func:`load`'s, or a stand-in with the same
    functions); every status is checked (:class:`CublasError`)."""

    def __init__(self, lib: Any):
        self.lib = lib
        self.version = int(lib.cublasLtGetVersion())

    def check(self, status: int, call: str, what: str = "") -> None:
        if int(status) != STATUS_SUCCESS:
            try:
                text = self.lib.cublasLtGetStatusString(int(status))
                text = text.decode() if isinstance(text, bytes) else str(text)
            except Exception:
                text = "?"
            raise CublasError(f"{call} failed with status {int(status)} ({text}){': ' + what if what else ''}")

    def _set(self, fn: str, obj: _Owned, attr: int, value: Any, what: str) -> None:
        self.check(getattr(self.lib, fn)(obj.value, attr, ctypes.byref(value), ctypes.sizeof(value)), fn, what)

    def handle(self) -> _Owned:
        h = ctypes.c_void_p()
        self.check(self.lib.cublasLtCreate(ctypes.byref(h)), "cublasLtCreate",
                   "is the device's context current and its driver working?")
        return _Owned(self.lib, "cublasLtDestroy", h)

    def matmul_desc(self, compute: int, scale: int, transa: int, transb: int, what: str,
                    bias_type: int | None = None) -> _Owned:
        """A matmul descriptor; with ``bias_type``, the bias epilogue (a vector of that type added
        to each column of D: corvid's rows; its pointer is set per call, :meth:`bias`)."""
        d = ctypes.c_void_p()
        self.check(self.lib.cublasLtMatmulDescCreate(ctypes.byref(d), compute, scale), "cublasLtMatmulDescCreate",
                   what)
        desc = _Owned(self.lib, "cublasLtMatmulDescDestroy", d)
        self._set("cublasLtMatmulDescSetAttribute", desc, DESC_TRANSA, ctypes.c_int32(transa), what)
        self._set("cublasLtMatmulDescSetAttribute", desc, DESC_TRANSB, ctypes.c_int32(transb), what)
        if bias_type is not None:
            self._set("cublasLtMatmulDescSetAttribute", desc, DESC_EPILOGUE, ctypes.c_uint32(EPILOGUE_BIAS), what)
            self._set("cublasLtMatmulDescSetAttribute", desc, DESC_BIAS_DATA_TYPE, ctypes.c_int32(bias_type), what)
        return desc

    def bias(self, desc: _Owned, address: int, what: str) -> None:
        """Point a bias epilogue's descriptor at the bias vector (device address)."""
        self._set("cublasLtMatmulDescSetAttribute", desc, DESC_BIAS_POINTER, ctypes.c_void_p(address), what)

    def layout(self, dtype: int, rows: int, cols: int, ld: int, batch: int, stride: int, what: str) -> _Owned:
        d = ctypes.c_void_p()
        self.check(self.lib.cublasLtMatrixLayoutCreate(ctypes.byref(d), dtype, ctypes.c_uint64(rows),
                                                       ctypes.c_uint64(cols), ctypes.c_int64(ld)),
                   "cublasLtMatrixLayoutCreate", what)
        layout = _Owned(self.lib, "cublasLtMatrixLayoutDestroy", d)
        if batch > 1:
            self._set("cublasLtMatrixLayoutSetAttribute", layout, LAYOUT_BATCH_COUNT, ctypes.c_int32(batch), what)
            self._set("cublasLtMatrixLayoutSetAttribute", layout, LAYOUT_STRIDED_BATCH_OFFSET,
                      ctypes.c_int64(stride), what)
        return layout

    def preference(self, workspace: int, what: str, alignments: tuple[int, int, int] | None = None) -> _Owned:
        """The heuristic's preferences: the workspace it may use, and where the operands' addresses
        are less aligned than :data:`ALIGNMENT` (an outer loop's offsets), their alignment in
        bytes (Y: corvid's a, X: its b, D) so that only algorithms that work with it are chosen."""
        d = ctypes.c_void_p()
        self.check(self.lib.cublasLtMatmulPreferenceCreate(ctypes.byref(d)), "cublasLtMatmulPreferenceCreate", what)
        pref = _Owned(self.lib, "cublasLtMatmulPreferenceDestroy", d)
        self._set("cublasLtMatmulPreferenceSetAttribute", pref, PREF_MAX_WORKSPACE_BYTES, ctypes.c_uint64(workspace),
                  what)
        if alignments is not None and min(alignments) < ALIGNMENT:
            y, x, out = alignments
            for attr, value in ((PREF_MIN_ALIGNMENT_A_BYTES, x), (PREF_MIN_ALIGNMENT_B_BYTES, y),
                                (PREF_MIN_ALIGNMENT_C_BYTES, out), (PREF_MIN_ALIGNMENT_D_BYTES, out)):
                self._set("cublasLtMatmulPreferenceSetAttribute", pref, attr, ctypes.c_uint32(value), what)
        return pref

    def heuristic(self, handle: _Owned, desc: _Owned, a: _Owned, b: _Owned, c: _Owned, pref: _Owned,
                  what: str) -> HeuristicResult:
        """The library's first choice of algorithm for the product (C is also D)."""
        result, count = HeuristicResult(), ctypes.c_int(0)
        self.check(self.lib.cublasLtMatmulAlgoGetHeuristic(handle.value, desc.value, a.value, b.value, c.value,
                                                           c.value, pref.value, 1, ctypes.byref(result),
                                                           ctypes.byref(count)),
                   "cublasLtMatmulAlgoGetHeuristic", what)
        if count.value < 1 or result.state != STATUS_SUCCESS:
            raise CublasError(f"cublasLtMatmulAlgoGetHeuristic found no algorithm (state {result.state}): {what}")
        return result


@dataclass(frozen=True)
class Gemm:
    """One product in corvid's (row-major) terms: ``out[i] = op(a[i]) @ op(b[i])`` for ``i`` in
    ``batch``, ``op(a)`` of shape (n, k) and ``op(b)`` (k, m). ``ta``: ``a`` is stored (k, n) (a
    transposed view was passed as the matrix under it); ``tb``: ``b`` is stored (m, k).
    ``a_stride``/``b_stride``: elements between batch entries (0: one matrix for all)."""

    dtype: str
    n: int
    m: int
    k: int
    ta: bool
    tb: bool
    batch: int = 1
    a_stride: int = 0
    b_stride: int = 0
    precision: str = "highest"
    bias: bool = False  # a bias vector of m entries added to every row (cuBLASLt's bias epilogue)
    alignments: tuple[int, int, int] = (ALIGNMENT, ALIGNMENT, ALIGNMENT)  # bytes: a's, b's and the output's addresses
    out: str = ""  # the result's dtype (C's and D's) where it is not the operands' ("": theirs)

    @property
    def out_dtype(self) -> str:
        return self.out or self.dtype

    def describe(self) -> str:
        a = f"({self.k}x{self.n})^T" if self.ta else f"({self.n}x{self.k})"
        b = f"({self.m}x{self.k})^T" if self.tb else f"({self.k}x{self.m})"
        return f"{self.dtype} {a} @ {b}" + (f", batch {self.batch}" if self.batch > 1 else "") + \
            (" + bias" if self.bias else "") + (f" -> {self.out}" if self.out else "")

    def compute(self) -> tuple[int, int, Any]:
        """(compute type, scale type, ctypes type of alpha and beta)."""
        if self.dtype == "float64":
            return COMPUTE_64F, R_64F, ctypes.c_double
        if self.dtype == "float32":
            return FLOAT32_COMPUTE[self.precision], R_32F, ctypes.c_float
        return COMPUTE_32F, R_32F, ctypes.c_float  # (16- and 8-bit float operands: float32 sums and scale)


class Plan:
    """A :class:`Gemm`'s descriptors and algorithm, as cuBLASLt sees it: ``D = op(X) @ op(Y)``
    column-major, ``X`` corvid's ``b`` and ``Y`` its ``a`` (see the module docstring)."""

    def __init__(self, lt: CublasLt, handle: _Owned | None, g: Gemm, workspace: int):
        what = g.describe()
        dtype, out = DATA_TYPES[g.dtype], DATA_TYPES[g.out_dtype]
        compute, scale, self.scalar = g.compute()
        self.desc = lt.matmul_desc(compute, scale, OP_T if g.tb else OP_N, OP_T if g.ta else OP_N, what,
                                   bias_type=out if g.bias else None)
        # X: corvid's b, stored row-major (k, m) = column-major (m, k), or (m, k) row-major if tb
        self.x = lt.layout(dtype, g.k if g.tb else g.m, g.m if g.tb else g.k, g.k if g.tb else g.m, g.batch,
                           g.b_stride, what)
        # Y: corvid's a, stored row-major (n, k) = column-major (k, n), or (k, n) row-major if ta
        self.y = lt.layout(dtype, g.n if g.ta else g.k, g.k if g.ta else g.n, g.n if g.ta else g.k, g.batch,
                           g.a_stride, what)
        # D (and C): row-major (n, m) = column-major (m, n)
        self.d = lt.layout(out, g.m, g.n, g.m, g.batch, g.m * g.n, what)
        self.pref = lt.preference(workspace, what, g.alignments)
        self.algo = lt.heuristic(handle, self.desc, self.x, self.y, self.d, self.pref, what) if handle else None
        self.alpha, self.beta = self.scalar(1.0), self.scalar(0.0)
        self.what = what


class Blas:
    """A CUDA device's cuBLASLt state: the library, a handle made in the device's context, one
    workspace, and the plans of the products run so far (built once per :class:`Gemm`)."""

    def __init__(self, device: Any, lt: CublasLt):
        self.device, self.lt = device, lt
        device._enter()
        self.handle = lt.handle()
        self.workspace = int(device.allocator._alloc(WORKSPACE_BYTES))  # (kept for the device's lifetime)
        self._plans: dict[Gemm, Plan] = {}
        self._lock = threading.Lock()
        from .cuda import arch_number

        # whether the GPU has 8-bit float tensor cores (sm_89 and later): products of them then run as such
        self.fp8 = arch_number(str(getattr(device, "arch", ""))) >= FP8_ARCH

    def plan(self, g: Gemm) -> Plan:
        with self._lock:
            p = self._plans.get(g)
            if p is None:
                p = self._plans[g] = Plan(self.lt, self.handle, g, WORKSPACE_BYTES)
            return p

    def run(self, g: Gemm, out: int, a: int, b: int, stream: Any, bias: int | None = None) -> None:
        """``out = op(a) @ op(b) (+ bias)`` on device addresses, queued on ``stream``."""
        p = self.plan(g)
        with self._lock:  # (a bias pointer is the shared descriptor's until the call has read it)
            self._run(p, out, a, b, stream, bias)

    def _run(self, p: Plan, out: int, a: int, b: int, stream: Any, bias: int | None) -> None:
        lib = self.lt.lib
        self.device._enter()
        if bias is not None:
            self.lt.bias(p.desc, bias, p.what)
        self.lt.check(lib.cublasLtMatmul(self.handle.value, p.desc.value, ctypes.byref(p.alpha), ctypes.c_void_p(b),
                                         p.x.value, ctypes.c_void_p(a), p.y.value, ctypes.byref(p.beta),
                                         ctypes.c_void_p(out), p.d.value, ctypes.c_void_p(out), p.d.value,
                                         ctypes.byref(p.algo.algo), ctypes.c_void_p(self.workspace),
                                         ctypes.c_size_t(WORKSPACE_BYTES), ctypes.c_void_p(_stream(stream))),
                      "cublasLtMatmul", p.what)


def _stream(stream: Any) -> int:
    """A driver stream (cuda-bindings' ``CUstream``) as the address the library takes."""
    try:
        return int(stream)
    except (TypeError, ValueError):
        return 0 if stream is None else id(stream)  # (a stand-in driver's stream: the stand-in library ignores it)


# --- the program -----------------------------------------------------------------------------------


def _lead_strides(lead: tuple[int, ...], out_lead: tuple[int, ...], matrix: int) -> list[int]:
    """Elements between consecutive indices of each of ``out_lead``'s axes, in an operand stored
    contiguously with leading axes ``lead`` (right-aligned; size 1 or absent: broadcast, 0)."""
    lead = (1,) * (len(out_lead) - len(lead)) + tuple(lead)
    strides, step = [], matrix
    for size in reversed(lead):
        strides.append(step if size != 1 else 0)
        step *= size
    return strides[::-1]


def split_batch(out_lead: tuple[int, ...], a_strides: list[int], b_strides: list[int]) -> tuple[int, int, int, int]:
    """How many leading axes are looped over (``outer``), and the one strided batch the rest form:
    (outer axes, batch count, a's stride, b's stride). Trailing leading axes join the batch while
    each operand's stride across them stays one number."""
    axes = len(out_lead)
    batch, a_stride, b_stride = 1, 0, 0
    cut = axes
    for i in range(axes - 1, -1, -1):
        size = out_lead[i]
        if size == 1:
            cut = i
            continue
        ok = True
        for stride, inner in ((a_strides[i], a_stride), (b_strides[i], b_stride)):
            if batch > 1 and stride != inner * batch:  # (a stride that does not continue the inner one)
                ok = False
        if not ok:
            break
        if batch == 1:
            a_stride, b_stride = a_strides[i], b_strides[i]
        batch *= size
        cut = i
    return cut, batch, a_stride, b_stride


def layout(a_shape: tuple[int, ...], b_shape: tuple[int, ...], dtype: Any, params: dict,
           bias: bool) -> tuple[Gemm | None, list[tuple[int, int, int]]]:
    """The product the op's inputs of these shapes describe (constant sizes): the :class:`Gemm`
    of the strided batch, and the element offsets (output, a, b) of each outer index (none, and
    no Gemm, for an empty batch)."""
    ta, tb = bool(params["ta"]), bool(params["tb"])
    n, k = (a_shape[-1], a_shape[-2]) if ta else (a_shape[-2], a_shape[-1])
    m = b_shape[-2] if tb else b_shape[-1]
    out_lead = tuple(max(x, y) for x, y in zip(*_aligned(a_shape[:-2], b_shape[:-2])))
    if 0 in out_lead:  # (an empty batch: nothing to compute)
        return None, []
    a_str = _lead_strides(a_shape[:-2], out_lead, n * k)
    b_str = _lead_strides(b_shape[:-2], out_lead, k * m)
    cut, batch, a_stride, b_stride = split_batch(out_lead, a_str, b_str)
    outer = out_lead[:cut]
    out_str = [math.prod(out_lead[i + 1:]) * n * m for i in range(len(outer))]
    offsets = []
    for flat in range(math.prod(outer)):
        idx, rest = [], flat
        for extent in reversed(outer):
            idx.append(rest % extent)
            rest //= extent
        idx.reverse()
        offsets.append((sum(i * s for i, s in zip(idx, out_str)), sum(i * s for i, s in zip(idx, a_str)),
                        sum(i * s for i, s in zip(idx, b_str))))
    out = params.get("out", "")
    sizes = (dtype.itemsize, dtype.itemsize, _itemsize(out) if out else dtype.itemsize)  # (a, b, the output)
    # (an outer loop's offsets may leave an operand less aligned than its block: the heuristic is told)
    align = tuple(math.gcd(ALIGNMENT, *(off[j] * sizes[j] for off in offsets)) for j in (1, 2, 0))
    gemm = Gemm(dtype.name, n, m, k, ta, tb, batch, a_stride, b_stride, params.get("precision", "highest"), bias,
                align, out)  # type: ignore[arg-type]
    return gemm, offsets


def _itemsize(name: str) -> int:
    from .. import dtype as dt

    return getattr(dt, name).itemsize


class GemmProgram(Program):
    """``a @ b`` of :mod:`corvid.ops.blas`'s host op on a CUDA device: handles are the output,
    ``a``, ``b`` and the bias if any (device addresses); one ``cublasLtMatmul`` per outer index.
    Over symbolic sizes (a ``jit`` program with ``dynamic=`` sizes) it ``takes_sizes``: each
    call's shapes are evaluated and their plan is looked up (built on the first call of a size)."""

    def __init__(self, device: Any, blas: Blas, params: dict, in_specs: list[tuple[tuple, Any]]):
        from ..graph.symbolic import is_symbolic, size_function

        (a_shape, a_dt), (b_shape, _) = in_specs[:2]
        self.device, self.blas, self.params, self.dtype = device, blas, dict(params), a_dt
        self.has_bias = len(in_specs) > 2
        self.itemsize = a_dt.itemsize
        self.out_itemsize = _itemsize(params["out"]) if params.get("out") else a_dt.itemsize
        self.takes_sizes = any(is_symbolic(d) for d in a_shape + b_shape)
        if self.takes_sizes:  # (each size a function of the call's sizes)
            self._shapes = [tuple(size_function(d) for d in shape) for shape in (a_shape, b_shape)]
            self._layouts: dict[tuple, tuple[Gemm | None, list]] = {}
        else:
            self.gemm, self.offsets = layout(a_shape, b_shape, a_dt, params, self.has_bias)
            if self.gemm is not None:
                blas.plan(self.gemm)  # (built now: a product the library refuses is known where it is scheduled)

    def _at(self, sizes: list[int] | None) -> tuple[Gemm | None, list[tuple[int, int, int]]]:
        if not self.takes_sizes:
            return self.gemm, self.offsets
        if sizes is None:
            raise RuntimeError("a product over symbolic sizes needs their values (it runs inside a jit program)")
        a, b = (tuple(d if isinstance(d, int) else d(sizes) for d in shape) for shape in self._shapes)
        found = self._layouts.get((a, b))
        if found is None:
            found = self._layouts[(a, b)] = layout(a, b, self.dtype, self.params, self.has_bias)
        return found

    def __call__(self, handles: list[int], sizes: list[int] | None = None) -> None:
        gemm, offsets = self._at(sizes)
        out, a, b = (int(h) for h in handles[:3])
        bias = int(handles[3]) if self.has_bias else None
        size, out_size = self.itemsize, self.out_itemsize
        for o, x, y in offsets:
            self.blas.run(gemm, out + o * out_size, a + x * size, b + y * size, self.device.stream,  # type: ignore[arg-type]
                          bias)


def _aligned(a: tuple, b: tuple) -> tuple[tuple, tuple]:
    """Two shapes right-aligned to the same length (missing leading axes are 1)."""
    r = max(len(a), len(b))
    return (1,) * (r - len(a)) + tuple(a), (1,) * (r - len(b)) + tuple(b)

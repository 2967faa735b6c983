"""A stand-in for NVIDIA's cuBLASLt, for testing corvid's calls without a GPU.

:class:`StandInLt` has the functions :mod:`corvid.runtime.cublaslt` calls, taking the same ctypes
arguments the real library would (``byref`` pointers, ``c_void_p`` addresses, ``c_uint64`` sizes),
so the code under test is the code that calls the real library. Its ``cublasLtMatmul`` computes
what cuBLASLt's documentation says the descriptors describe: column-major matrices of the layouts'
rows, columns and leading dimensions, ``op`` from the descriptor's transpose flags, strided batches,
``D = alpha * op(A) @ op(B) + beta * C``, with the compute type's rounding of the operands (TF32:
10 mantissa bits; FAST_16BF: bfloat16). It reads and writes the addresses it is given (the stand-in
driver's device memory is host memory). Attribute sizes are checked as the library checks them.
"""

from __future__ import annotations

import ctypes
import itertools
from typing import Any

import ml_dtypes
import numpy as np

from corvid.runtime import cublaslt as L

INVALID_VALUE, NOT_INITIALIZED, NOT_SUPPORTED = 7, 1, 15
NP = {L.R_32F: np.float32, L.R_64F: np.float64, L.R_16F: np.float16, L.R_16BF: ml_dtypes.bfloat16,
      L.R_8F_E4M3: ml_dtypes.float8_e4m3fn, L.R_8F_E5M2: ml_dtypes.float8_e5m2}
FP8 = (L.R_8F_E4M3, L.R_8F_E5M2)
# 8-bit float products (cuBLASLt's documentation, for sm_89/sm_90): the result types each (C type) allows
FP8_RESULTS = {L.R_16BF: (L.R_16BF, L.R_8F_E4M3, L.R_8F_E5M2), L.R_16F: (L.R_16F, L.R_8F_E4M3, L.R_8F_E5M2),
               L.R_32F: (L.R_32F,)}
# attribute -> its C type's size (cublasLt.h)
DESC_SIZES = {L.DESC_TRANSA: 4, L.DESC_TRANSB: 4, L.DESC_EPILOGUE: 4, L.DESC_BIAS_POINTER: 8, L.DESC_BIAS_DATA_TYPE: 4}
LAYOUT_SIZES = {L.LAYOUT_BATCH_COUNT: 4, L.LAYOUT_STRIDED_BATCH_OFFSET: 8}
PREF_SIZES = {L.PREF_MAX_WORKSPACE_BYTES: 8, L.PREF_MIN_ALIGNMENT_A_BYTES: 4, L.PREF_MIN_ALIGNMENT_B_BYTES: 4,
              L.PREF_MIN_ALIGNMENT_C_BYTES: 4, L.PREF_MIN_ALIGNMENT_D_BYTES: 4}
ALGO_MARK = 0x5EED


def _round_mantissa(x: np.ndarray, bits: int) -> np.ndarray:
    """float32 values rounded to ``bits`` mantissa bits (nearest even), as a tensor core reads them."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    drop = 23 - bits
    half = (1 << (drop - 1)) - 1
    u = (u + half + ((u >> drop) & 1)) >> drop << drop
    return (u & 0xFFFFFFFF).astype(np.uint32).view(np.float32)


class StandInLt:
    def __init__(self, fail_create: bool = False):
        self.objects: dict[int, dict] = {}
        self.calls: list[tuple[str, Any]] = []
        self.fail_create = fail_create
        self._ids = itertools.count(0x1000)
        self._aligned: dict[int, dict] = {}  # a descriptor's heuristic preferences (the alignment it was chosen for)
        self.destroyed = 0

    # --- helpers
    @staticmethod
    def _k(obj: Any) -> Any:
        """An object's key: the value of the c_void_p the library was handed."""
        return obj.value if isinstance(obj, ctypes.c_void_p) else obj

    def _new(self, out: Any, **fields: Any) -> int:
        key = next(self._ids)
        self.objects[key] = dict(fields)
        out._obj.value = key
        return 0

    def _set(self, obj: Any, attr: int, value: Any, size: Any, sizes: dict) -> int:
        key = self._k(obj)
        want = sizes.get(int(attr))
        if key not in self.objects or want is None or int(getattr(size, "value", size)) != want:
            return INVALID_VALUE
        self.objects[key][int(attr)] = value._obj.value
        return 0

    def _destroy(self, obj: Any) -> int:
        key = self._k(obj)
        self.objects.pop(key, None)
        self.destroyed += 1
        return 0

    # --- the library's functions
    def cublasLtGetVersion(self) -> int:
        return 131000

    def cublasLtGetStatusString(self, status: int) -> bytes:
        return {INVALID_VALUE: b"an unsupported value or parameter was passed to the function",
                NOT_INITIALIZED: b"the library was not initialized",
                NOT_SUPPORTED: b"the functionality requested is not supported"}.get(int(status), b"?")

    def cublasLtCreate(self, out: Any) -> int:
        self.calls.append(("create", None))
        return NOT_INITIALIZED if self.fail_create else self._new(out, kind="handle")

    def cublasLtDestroy(self, h: Any) -> int:
        return self._destroy(h)

    def cublasLtMatmulDescCreate(self, out: Any, compute: int, scale: int) -> int:
        return self._new(out, kind="desc", compute=int(compute), scale=int(scale))

    def cublasLtMatmulDescSetAttribute(self, d: Any, attr: int, value: Any, size: Any) -> int:
        return self._set(d, attr, value, size, DESC_SIZES)

    cublasLtMatmulDescDestroy = _destroy

    def cublasLtMatrixLayoutCreate(self, out: Any, dtype: int, rows: Any, cols: Any, ld: Any) -> int:
        rows, cols, ld = (int(v.value) for v in (rows, cols, ld))
        if ld < rows:
            return INVALID_VALUE
        return self._new(out, kind="layout", dtype=int(dtype), rows=rows, cols=cols, ld=ld)

    def cublasLtMatrixLayoutSetAttribute(self, d: Any, attr: int, value: Any, size: Any) -> int:
        return self._set(d, attr, value, size, LAYOUT_SIZES)

    cublasLtMatrixLayoutDestroy = _destroy

    def cublasLtMatmulPreferenceCreate(self, out: Any) -> int:
        return self._new(out, kind="pref")

    def cublasLtMatmulPreferenceSetAttribute(self, d: Any, attr: int, value: Any, size: Any) -> int:
        return self._set(d, attr, value, size, PREF_SIZES)

    cublasLtMatmulPreferenceDestroy = _destroy

    def fp8_refusal(self, desc: dict, la: dict, lb: dict, lc: dict, ld_: dict) -> str | None:
        """Why the library has no algorithm for an 8-bit float product (None: it has one, or the
        product is not of 8-bit floats): on Hopper only "TN" (A transposed, B not), float32
        compute, leading dimensions of A and B multiples of 16, not two E5M2 operands, C's type
        one that allows D's, and for a float32 result a bfloat16 bias."""
        if la["dtype"] not in FP8 and lb["dtype"] not in FP8:
            return None
        if la["dtype"] not in FP8 or lb["dtype"] not in FP8:
            return "an 8-bit operand beside another type"
        if (desc.get(L.DESC_TRANSA, 0), desc.get(L.DESC_TRANSB, 0)) != (L.OP_T, L.OP_N):
            return "not TN"
        if desc["compute"] != L.COMPUTE_32F or desc["scale"] != L.R_32F:
            return "compute type"
        if la["ld"] % 16 or lb["ld"] % 16:
            return "leading dimension"
        if la["dtype"] == lb["dtype"] == L.R_8F_E5M2:
            return "two E5M2 operands"
        if ld_["dtype"] not in FP8_RESULTS.get(lc["dtype"], ()):
            return "C and D types"
        if desc.get(L.DESC_EPILOGUE, L.EPILOGUE_DEFAULT) == L.EPILOGUE_BIAS:
            want = L.R_16BF if ld_["dtype"] in (L.R_32F,) + FP8 else ld_["dtype"]
            if desc.get(L.DESC_BIAS_DATA_TYPE, ld_["dtype"]) != want:
                return "bias type"
        return None

    def cublasLtMatmulAlgoGetHeuristic(self, handle, desc, a, b, c, d, pref, requested, results, count) -> int:
        self.calls.append(("heuristic", dict(self.objects[self._k(pref)])))
        if self.objects.get(self._k(handle), {}).get("kind") != "handle" or int(requested) < 1:
            return INVALID_VALUE
        o, k = self.objects, self._k
        why = self.fp8_refusal(o[k(desc)], o[k(a)], o[k(b)], o[k(c)], o[k(d)])
        if why is not None:
            self.calls.append(("refused", why))
            return NOT_SUPPORTED
        self._aligned[self._k(desc)] = {a: v for a, v in self.objects[self._k(pref)].items() if isinstance(a, int)}
        r = results._obj
        r.algo[0] = ALGO_MARK
        r.workspaceSize = 0
        r.state = 0
        count._obj.value = 1
        return 0

    def cublasLtMatmul(self, handle, desc, alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, algo, workspace,
                       workspace_size, stream) -> int:
        o, k = self.objects, self._k
        if o.get(k(handle), {}).get("kind") != "handle" or algo._obj[0] != ALGO_MARK:
            return INVALID_VALUE
        # (the algorithm was chosen for the alignment the preference gave: an address less aligned fails)
        chosen = self._aligned.get(k(desc), {})
        for ptr, attr in ((a, L.PREF_MIN_ALIGNMENT_A_BYTES), (b, L.PREF_MIN_ALIGNMENT_B_BYTES),
                          (d, L.PREF_MIN_ALIGNMENT_D_BYTES)):
            if ptr.value % chosen.get(attr, L.ALIGNMENT):
                return INVALID_VALUE
        desc = o[k(desc)]
        la, lb, lc, ld_ = o[k(adesc)], o[k(bdesc)], o[k(cdesc)], o[k(ddesc)]
        if self.fp8_refusal(desc, la, lb, lc, ld_) is not None:
            return NOT_SUPPORTED
        epilogue = desc.get(L.DESC_EPILOGUE, L.EPILOGUE_DEFAULT)
        self.calls.append(("matmul", dict(compute=desc["compute"], transa=desc.get(L.DESC_TRANSA, 0),
                                          transb=desc.get(L.DESC_TRANSB, 0), a=dict(la), b=dict(lb), c=dict(lc),
                                          d=dict(ld_), epilogue=epilogue)))
        if epilogue not in (L.EPILOGUE_DEFAULT, L.EPILOGUE_BIAS) or \
                (epilogue == L.EPILOGUE_BIAS and not desc.get(L.DESC_BIAS_POINTER)):
            return INVALID_VALUE
        if int(workspace_size.value) and not workspace.value:
            return INVALID_VALUE
        opa, opb = desc.get(L.DESC_TRANSA, 0), desc.get(L.DESC_TRANSB, 0)
        am, ak = (la["cols"], la["rows"]) if opa else (la["rows"], la["cols"])
        bk, bn = (lb["cols"], lb["rows"]) if opb else (lb["rows"], lb["cols"])
        if ak != bk or (am, bn) != (ld_["rows"], ld_["cols"]) or (lc["rows"], lc["cols"]) != (am, bn):
            return INVALID_VALUE
        batches = {lay.get(L.LAYOUT_BATCH_COUNT, 1) for lay in (la, lb, lc, ld_)}
        if len(batches) != 1:
            return INVALID_VALUE
        count = batches.pop()
        wide = np.float64 if desc["compute"] == L.COMPUTE_64F else np.float32
        al, be = alpha._obj.value, beta._obj.value
        for i in range(count):
            x = self._read(a.value, la, i).astype(wide)
            y = self._read(b.value, lb, i).astype(wide)
            if desc["compute"] == L.COMPUTE_32F_FAST_TF32:
                x, y = _round_mantissa(x, 10), _round_mantissa(y, 10)
            elif desc["compute"] == L.COMPUTE_32F_FAST_16BF:
                x, y = _round_mantissa(x, 7), _round_mantissa(y, 7)
            x = x.T if opa else x
            y = y.T if opb else y
            res = al * (x @ y)
            if be:
                res = res + be * self._read(c.value, lc, i).astype(wide)
            if epilogue == L.EPILOGUE_BIAS:  # a vector of D's rows, in the bias type (default: D's), every batch
                kind = desc.get(L.DESC_BIAS_DATA_TYPE, ld_["dtype"])
                vec = self._read(desc[L.DESC_BIAS_POINTER], dict(dtype=kind, rows=res.shape[0], cols=1,
                                                                 ld=res.shape[0]), 0)
                res = res + vec.astype(wide)
            self._view(d.value, ld_, i)[...] = res.astype(NP[ld_["dtype"]])
        return 0

    memory: dict[int, np.ndarray] | None = None  # the stand-in driver's blocks (address -> bytes), when given

    def _view(self, address: int, lay: dict, i: int) -> np.ndarray:
        """Batch entry ``i`` of a column-major matrix at ``address``, as a (rows, cols) array view.
        With the driver's ``memory``, a matrix that is not inside one allocated block is an
        IndexError (on a GPU: a read of another value, or a write over it)."""
        dtype = np.dtype(NP[lay["dtype"]])
        rows, cols, ld = lay["rows"], lay["cols"], lay["ld"]
        start = address + i * lay.get(L.LAYOUT_STRIDED_BATCH_OFFSET, 0) * dtype.itemsize
        count = ld * (cols - 1) + rows
        if self.memory is not None and not any(base <= start and start + count * dtype.itemsize <= base + block.size
                                               for base, block in self.memory.items()):
            raise IndexError(f"a {rows}x{cols} matrix (ld {ld}, batch entry {i}) at {start:#x} is not inside "
                             "an allocated block")
        flat = np.frombuffer((ctypes.c_uint8 * (count * dtype.itemsize)).from_address(start), dtype=dtype)
        return np.lib.stride_tricks.as_strided(flat, shape=(rows, cols), strides=(dtype.itemsize, ld * dtype.itemsize))

    def _read(self, address: int, lay: dict, i: int) -> np.ndarray:
        return self._view(address, lay, i).copy()

    def matmuls(self) -> list[dict]:
        return [c for kind, c in self.calls if kind == "matmul"]

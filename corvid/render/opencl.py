"""Render a linearized kernel as OpenCL C (the ``CL`` backend, :mod:`corvid.runtime.opencl`).

OpenCL C is C99 with address spaces and a grid of work items, so :class:`OpenCLRenderer` reuses
the C renderer's statements and values, and the work-group structure that it shares with the
CUDA renderer (:mod:`corvid.render.gpu`: launch geometry, work-group reduces, gated stores).
What is OpenCL's own:

* the signature: ``__kernel void name(__global float* restrict p0, __global const ...)``;
* the grid: the outermost output loops (up to 3, :data:`GRID_DIMS`) are work-group ids, the
  innermost of them on dimension 0 (neighbouring work items then touch neighbouring elements);
  ``"local"`` loops are ``get_local_id``; without any, the driver picks the work-group size and
  grid loops are ``get_global_id``. Work-group memory is ``__local``, its barrier
  ``barrier(CLK_LOCAL_MEM_FENCE)``;
* types: ``long`` is 64 bits in OpenCL C (``long long`` is reserved), the ``<stdint.h>`` names
  are typedefs of OpenCL's, math functions are the overloaded built-ins (``exp``, not ``expf``),
  selects are ternaries and bit casts are ``as_<type>``;
* no OpenMP pragmas, libmvec declarations or vector types (the ``CL`` device applies no
  optimization actions, so kernels reach the renderer unvectorized).

Complex values are ``float2``/``double2`` (real part ``.x``, imaginary ``.y``), computed by the
helpers of :mod:`corvid.render.gpu` (numpy's product and quotient, bitwise; exp, log, sqrt, the
trigonometric and hyperbolic functions; the inverse ones and complex powers raise
NotImplementedError). Contraction is off (``#pragma OPENCL FP_CONTRACT OFF``: OpenCL C's default
lets the compiler fuse ``a*b + c``, which the CPU's kernels never do unless the IR says). float64
and complex128 need the device's ``cl_khr_fp64``. float16 and bfloat16 are computed in float, as on the CPU: float16 is read and
written with ``vload_half``/``vstore_half_rte`` (no cl_khr_fp16 needed), bfloat16 is stored as
``ushort``, float8_e4m3fn and float8_e5m2 as ``uchar`` (converted by the C renderer's helpers,
:func:`corvid.render.c.float8_helpers`).
"""

from __future__ import annotations

import re

from ..codegen.ir import Kernel
from ..codegen.linearize import StoreStmt
from ..dtype import DType
from ..graph.node import Op
from ..graph.symbolic import Num
from .c import _MATH, _float_helpers, compute_type
from .gpu import GRID_DIMS, GPURenderer, Launch, kernel_dtypes, launch

__all__ = ["GRID_DIMS", "Launch", "OpenCLRenderer", "launch"]

VECTOR_WIDTHS = (2, 4, 8, 16)  # OpenCL C's vector lengths (besides 3, which is padded to 4 in memory)
_CL_TYPES = {"bool": "uchar", "int8": "char", "int16": "short", "int32": "int", "int64": "long",
             "uint8": "uchar", "uint16": "ushort", "uint32": "uint", "uint64": "ulong",
             "float16": "half", "bfloat16": "ushort", "float32": "float", "float64": "double",
             "float8_e4m3fn": "uchar", "float8_e5m2": "uchar", "complex64": "float2", "complex128": "double2"}
# a float16 element read from buffer n (the C renderer writes ``(float)p<n>[index]``): OpenCL
# dereferences ``half`` pointers only with cl_khr_fp16, but vload_half works everywhere
_HALF_LOAD = re.compile(r"\(float\)p(\d+)\[([^\[\]]*)\]")

_PRELUDE = """#pragma OPENCL FP_CONTRACT OFF
typedef char int8_t; typedef short int16_t; typedef int int32_t; typedef long int64_t;
typedef uchar uint8_t; typedef ushort uint16_t; typedef uint uint32_t; typedef ulong uint64_t;
static inline long cv_floordiv(long a, long b) { long q = a / b; return q - ((a % b != 0) & ((a < 0) != (b < 0))); }
static inline long cv_clampi(long i, long hi) { return i < 0 ? 0 : (i > hi ? hi : i); }
static inline long cv_floormod(long a, long b) { long r = a % b; return r + (((r != 0) & ((r < 0) != (b < 0))) ? b : 0); }
static inline float cv_bf16_f32(ushort x) { return as_float((uint)x << 16); }
static inline ushort cv_f32_bf16(float f) {
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40);
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
"""

_VSTORE_HALF = """static inline void cv_vstore_half(float v, long i, __global half* p) {
  uint u = as_uint(v);
  if ((u & 0x7fffffffu) <= 0x7f800000u) vstore_half_rte(v, i, p);
  else ((__global ushort*)p)[i] = (ushort)(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu));
}
"""

# a float rounded to float16 and back (the C renderer's (float)(_Float16)x, which needs cl_khr_fp16);
# a nan keeps the top 10 bits of its payload, quieted, as x86's conversion keeps them (the
# rounding of vstore_half_rte leaves a nan's payload to the implementation)
_ROUND_HALF = """static inline float cv_round_f16(float v) {
  uint u = as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return as_float((u & 0xffffe000u) | 0x400000u);  // (a nan, as x86 converts it)
  ushort h;
  vstore_half_rte(v, 0, (half*)&h);
  return vload_half(0, (const half*)&h);
}
"""

# C spellings the inherited C renderer writes, and their OpenCL C equivalents (applied to the
# rendered body and helpers; the prelude above is written in OpenCL C already)
_C_TO_CL = (("long long", "long"), ("__builtin_fmaf(", "fma("), ("__builtin_fma(", "fma("),
            ('(-__builtin_nanf(""))', "as_float(0xffc00000u)"),
            ('(-__builtin_nan(""))', "as_double(0xfff8000000000000UL)"),
            ('__builtin_nanf("")', "NAN"), ('__builtin_nan("")', "((double)NAN)"),
            ("__builtin_inff()", "INFINITY"), ("__builtin_inf()", "((double)INFINITY)"),
            ("float _Complex", "float2"), ("double _Complex", "double2"), ("__builtin_complex(", "cv_complex("))


class OpenCLRenderer(GPURenderer):
    """Kernel IR → OpenCL C. ``fp64``: whether the target device has ``cl_khr_fp64`` (float64
    kernels raise NotImplementedError without it)."""

    dialect, device, types, long_type = "OpenCL", "CL", _CL_TYPES, "long"
    shared, barrier = "__local", "barrier(CLK_LOCAL_MEM_FENCE);"
    spellings = _C_TO_CL

    vectors = True  # OpenCL C's floatN/doubleN (see _vtype)
    complex_types = {"complex64": "float2", "complex128": "double2"}
    overload = "__attribute__((overloadable))"  # (clang's, which OpenCL C compilers are)
    bits_helpers = ("static inline uint cv_f32_u32(float f) { return as_uint(f); }\n"
                    "static inline float cv_u32_f32(uint u) { return as_float(u); }\n")
    float8_types = ("uint", "uchar")

    def __init__(self, fp64: bool = True):
        super().__init__()
        self.fp64 = fp64

    def _check(self, k: Kernel) -> None:
        super()._check(k)
        if k.vector_width > 1 and k.vector_width not in VECTOR_WIDTHS:
            raise NotImplementedError(f"OpenCL renderer: vectors of {k.vector_width} lanes (OpenCL C has "
                                      f"{', '.join(map(str, VECTOR_WIDTHS))})")
        if not self.fp64 and any(dt.name in ("float64", "complex128") for dt in kernel_dtypes(k)):
            raise NotImplementedError("float64 on the CL device needs the cl_khr_fp64 extension, "
                                      "which this OpenCL device does not report")

    def _signature(self, k: Kernel) -> str:
        args = ", ".join(f"__global {'' if p.output else 'const '}{_CL_TYPES[p.dtype.name]}* restrict p{i}"
                         for i, p in enumerate(k.params))
        return f"__kernel void {k.name}({args})"

    def _prelude(self) -> str:
        return ("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if self.fp64 else "") + _PRELUDE

    def _grid_index(self, pos: int) -> str:
        dim = len(self.launch.grid) - 1 - pos  # the innermost grid loop is dimension 0
        return f"{'get_group_id' if self.launch.local else 'get_global_id'}({dim})"

    def _local_id(self, dim: int) -> str:
        return f"get_local_id({dim})"

    def _emit_store(self, s: StoreStmt, depth: int) -> None:
        if self.k.params[s.store.param].dtype.name == "float16":
            self._emit_half_store(s, depth)
        else:
            super()._emit_store(s, depth)

    def _emit_half_store(self, s: StoreStmt, depth: int) -> None:
        """A float16 store: vstore_half_rte rounds the float to nearest even, as numpy does; a nan
        is written as numpy writes it (sign, quiet bit and the payload's top bits: OpenCL leaves
        that open, and PoCL sets every payload bit)."""
        st = s.store
        self.helpers.setdefault("cv_vstore_half", _VSTORE_HALF)
        line = f"cv_vstore_half({self._ref(st.value)}, {self._s(st.index).render(self._var)}, p{st.param});"
        gate = None if st.gate is None else self._s(st.gate)
        if gate is not None and gate == Num(0):
            return
        if gate is not None and gate != Num(1):
            line = f"if ({gate.render(self._var)}) {line}"
        self.lines.append("  " * depth + line)

    def _rounded(self, u, expr: str) -> str:
        if u.dtype.name == "float16" and id(u) in self.rounded:
            self.helpers.setdefault("cv_round_f16", _ROUND_HALF)
            return f"cv_round_f16({expr})"
        return super()._rounded(u, expr)

    def _expr(self, u) -> str:
        out = super()._expr(u)
        if u.op in ("load", "gather") and self.k.params[u.arg[0]].dtype.name == "float16":
            out = _HALF_LOAD.sub(lambda m: f"vload_half({m.group(2)}, p{m.group(1)})", out)
        return out

    def _bitcast(self, u) -> str:
        s, d = u.src[0].dtype, u.dtype
        if s.is_bool or d.is_bool or "float16" in (s.name, d.name):
            raise NotImplementedError(f"OpenCL renderer: bitcast from {s.name} to {d.name}")
        # (through the stored bits: bfloat16 and the 8-bit floats are computed in float)
        return self._from_storage(f"as_{_CL_TYPES[d.name]}({self._to_storage(self._ref(u.src[0]), s)})", d)

    # SCATTER (corvid/render/gpu.py: _render_scatter) ------------------------------------------
    scatter_copies_x = False  # (the CL device copies x with one enqueue_copy: all work items at once)

    def _scatter_signature(self, name: str, t: str, x: bool = True) -> str:
        return (f"__kernel void {name}(__global {t}* restrict out, {f'__global const {t}* restrict x, ' if x else ''}"
                f"__global const int64_t* restrict idx, __global const {t}* restrict src)")

    def _scatter_id(self) -> str:
        return "(long)get_global_id(0)"

    def _template_signature(self, name: str, n_inputs: int, threads: int) -> str:
        args = ", ".join(["__global float* restrict p0"] + [f"__global const float* restrict p{i + 1}" for i in range(n_inputs)])
        return f"__kernel __attribute__((reqd_work_group_size({threads}, 1, 1))) void {name}({args})"

    def _group_id(self) -> str:
        return "get_group_id(0)"

    def _scatter_load_narrow(self, dtype: DType) -> str:
        if dtype.name == "float16":  # (vload_half needs no cl_khr_fp16)
            return "vload_half({i}, (__global const half*){p})"
        return super()._scatter_load_narrow(dtype)

    def _scatter_store_narrow(self, dtype: DType) -> str:
        if dtype.name == "float16":
            return "cv_vstore_half({v}, {i}, (__global half*){p});"
        return "{p}[{i}] = cv_f32_bf16({v});"

    def _scatter_helpers(self, dtype: DType) -> str:
        return _VSTORE_HALF if dtype.name == "float16" else ""

    # vectors: OpenCL C's own types, with the GCC-style names and helpers the C renderer uses ---
    def _vtype(self, dt: DType) -> str:
        n = self.k.vector_width
        name = f"cv_{dt.name}x{n}"
        if name not in self.helpers:
            base, mask = ("float", "int") if dt.name == "float32" else ("double", "long")
            # a comparison of OpenCL vectors gives -1 (all bits set) per true lane, as GCC's do,
            # and select() takes the lane of its second argument where the mask's top bit is set
            self.helpers[name] = (f"typedef {base}{n} {name};\ntypedef {mask}{n} {name}_mask;\n"
                                  f"static inline {name} {name}_select({name}_mask m, {name} a, {name} b) "
                                  f"{{ return select(b, a, m); }}\n")
        return name

    def _broadcast(self, x: str, dt: DType) -> str:
        return f"(({self._vtype(dt)})({x}))"

    def _vload(self, dt: DType, param: int, offset: str) -> str:
        return f"vload{self.k.vector_width}(0, p{param} + {offset})"  # (any element alignment)

    def _vstore(self, dt: DType, param: int, offset: str, value: str) -> str:
        return f"vstore{self.k.vector_width}({value}, 0, p{param} + {offset});"

    def _vector_fma(self, dt: DType) -> str:
        return "fma"  # overloaded for vectors, one rounding per lane

    def _math_name(self, op: Op, dt: DType) -> str:
        return _MATH[op]  # overloaded for float and double

    def _alu(self, op: Op, a: list[str], src: list[DType], dt: DType) -> str:
        in_dt = src[-1] if op is Op.WHERE else (src[0] if src else dt)
        if in_dt.is_float and op in (Op.IDIV, Op.MOD):  # numpy's float floor_divide/remainder
            t = compute_type(in_dt)
            self.helpers.setdefault(f"fh_{t}", _float_helpers(t, ""))
        return super()._alu(op, a, src, dt)

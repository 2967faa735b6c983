"""Render a linearized kernel as C for the CPU backend.

Every value becomes one typed local (``float v3 = expf(v2);``), so integer results wrap at their
own width after each op, as numpy's do. The narrow floats (float16, bfloat16, float8_e4m3fn,
float8_e5m2) are stored as 16- or 8-bit values and computed in float, rounded to their dtype after
every op, as numpy's and ml_dtypes' ufuncs and PyTorch's eager ops do (:func:`narrow_rounded`;
skipping the rounding between fused ops would make results depend on what fused, and
``x.astype(bfloat16).astype(float32)`` would not quantize). The 8-bit floats are converted on the
bits with ml_dtypes' rounding (:func:`float8_helpers`).

Loops marked parallel become OpenMP loops; sum/prod accumulators get an ``omp simd reduction``
so the compiler may vectorize them without ``-ffast-math``. libm functions that glibc's libmvec
provides in vector form are declared ``simd`` so loops calling them vectorize (the toolchain probe
says whether libmvec is there).
"""

from __future__ import annotations

import copy
import ctypes
import ctypes.util
import functools
import math
from collections import Counter

import numpy as np

from ..codegen.ir import Kernel, U
from ..codegen.opt import VECTOR_OPS, stream_sums
from ..codegen.opt import _contiguous_in as _lane_contiguous
from ..codegen.opt import _stride
from ..codegen.passes import has_fma
from ..codegen.linearize import AccFinal, AccInit, AccUpdate, Def, For, StoreStmt, linearize
from ..dtype import DType, iinfo, reduce_identity
from ..dtype import float32 as _F32, float64 as _F64
from ..graph.node import Op
from ..graph.symbolic import And, BVar, Cmp, Dim, Lin, Num, Sym, Var, is_symbolic, upper

_STORAGE = {"bool": "uint8_t",  # (not _Bool: gcc has no vector type for _Bool loads)
             "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
            "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
            "float16": "cv_f16", "bfloat16": "uint16_t", "float32": "float", "float64": "double",
            "float8_e4m3fn": "uint8_t", "float8_e5m2": "uint8_t",
            "complex64": "float _Complex", "complex128": "double _Complex"}
# dtypes stored narrower than float and computed in float
FLOAT_COMPUTED = ("float8_e4m3fn", "float8_e5m2", "float16", "bfloat16")
# the 8-bit floats: the short name in their conversion helpers' names (cv_f32_e4m3, cv_e4m3_f32)
FLOAT8 = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}

_MATH = {Op.SQRT: "sqrt", Op.EXP: "exp", Op.EXP2: "exp2", Op.LOG: "log", Op.LOG2: "log2", Op.LOG1P: "log1p",
         Op.EXPM1: "expm1", Op.SIN: "sin", Op.COS: "cos", Op.TAN: "tan", Op.ASIN: "asin", Op.ACOS: "acos",
         Op.ATAN: "atan", Op.SINH: "sinh", Op.COSH: "cosh", Op.TANH: "tanh", Op.ASINH: "asinh",
         Op.ACOSH: "acosh", Op.ATANH: "atanh", Op.ERF: "erf", Op.ERFC: "erfc", Op.LGAMMA: "lgamma", Op.FLOOR: "floor", Op.CEIL: "ceil",
         Op.ROUND: "rint", Op.TRUNC: "trunc", Op.ABS: "fabs", Op.ATAN2: "atan2", Op.POW: "pow"}
_BINARY_MATH = {"atan2", "pow"}
COLLAPSE_BELOW = 64  # a parallel loop with fewer iterations shares the threads with the loops inside it
# exp where its result is subnormal or 0, kept off libmvec's slow path: (below this, add this
# exact constant c (the sum is exact there), keep the sum at least this, multiply by exp(-c))
_EXP_UNDERFLOW = {"float": ("-87.34", "24.0", "-82.0", "3.775134544279098e-11"),
                  "double": ("-708.4", "48.0", "-700.0", "1.4251640827409352e-21")}
# complex ops that are C99 <complex.h> functions (glibc has them all; libmvec has no complex forms);
# tanh and tan go through _complex_tanh_helpers
_COMPLEX_MATH = {Op.SQRT: "csqrt", Op.EXP: "cexp", Op.LOG: "clog", Op.SIN: "csin", Op.COS: "ccos",
                 Op.ASIN: "casin", Op.ACOS: "cacos", Op.ATAN: "catan", Op.SINH: "csinh", Op.COSH: "ccosh",
                 Op.ASINH: "casinh", Op.ACOSH: "cacosh", Op.ATANH: "catanh", Op.POW: "cpow", Op.ABS: "cabs"}
# non-temporal vector loads (vmovntdqa) for streamed sums (the ``stream`` action): x86 only, the
# widest that the kernel's -march=native allows; without them CV_NT_BYTES stays undefined and sums
# read as usual. Compiler builtins, not <immintrin.h>, whose parsing took ~150 ms per kernel
_STREAM_HELPERS = """#if defined(__x86_64__) && defined(__AVX512F__)
#define CV_NT_BYTES 64
#elif defined(__x86_64__) && defined(__AVX2__)
#define CV_NT_BYTES 32
#elif defined(__x86_64__) && defined(__SSE4_1__)
#define CV_NT_BYTES 16
#endif
#ifdef CV_NT_BYTES
typedef long long cv_ntbits __attribute__((vector_size(CV_NT_BYTES)));
typedef float cv_ntf32 __attribute__((vector_size(CV_NT_BYTES)));
typedef double cv_ntf64 __attribute__((vector_size(CV_NT_BYTES)));
#if defined(__clang__)
#define cv_ntload(p) __builtin_nontemporal_load((const cv_ntbits*)(p))
#elif CV_NT_BYTES == 64
#define cv_ntload(p) __builtin_ia32_movntdqa512((cv_ntbits*)(p))
#elif CV_NT_BYTES == 32
#define cv_ntload(p) __builtin_ia32_movntdqa256((cv_ntbits*)(p))
#else
#define cv_ntload(p) __builtin_ia32_movntdqa((cv_ntbits*)(p))
#endif
#endif
"""
_INFIX = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.DIV: "/", Op.CMPLT: "<", Op.CMPEQ: "==", Op.CMPNE: "!=",
          Op.AND: "&", Op.OR: "|", Op.XOR: "^"}

# float16 elements in C: _Float16 where the compiler has it (gcc 12, clang 15), else clang's
# storage-only __fp16 (clang 14 has no _Float16 on x86); kernels compute narrow floats in float
_F16_TYPEDEF = """#ifdef __FLT16_MAX__
typedef _Float16 cv_f16;
#else
typedef __fp16 cv_f16; /* clang before 15 on x86: half as a storage type, converted as _Float16 is */
#endif
"""
_PRELUDE = _F16_TYPEDEF + """#include <stdint.h>
#include <string.h>
static inline long long cv_floordiv(long long a, long long b) { long long q = a / b; return q - ((a % b != 0) & ((a < 0) != (b < 0))); }
static inline long long cv_clampi(long long i, long long hi) { return i < 0 ? 0 : (i > hi ? hi : i); }
static inline long long cv_floormod(long long a, long long b) { long long r = a % b; return r + (((r != 0) & ((r < 0) != (b < 0))) ? b : 0); }
static inline float cv_bf16_f32(uint16_t x) { uint32_t u = (uint32_t)x << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t cv_f32_bf16(float f) {  /* (a nan quieted; a mask, not a branch: loops over it vectorize) */
  uint32_t u; memcpy(&u, &f, 4);
  uint32_t nan = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
  return (uint16_t)((nan & ((u >> 16) | 0x40u)) | (~nan & ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)));
}
"""


# Conversions of the 8-bit floats, written on the bits with unsigned ints so that every C dialect
# computes the same bytes: decoding is exact; encoding rounds to nearest even as ml_dtypes does
# (float8_e4m3fn: nan, infinities and everything that rounds past 448 become nan, sign kept;
# float8_e5m2: IEEE, overflow to infinity, every nan 0x7e with its sign). Both paths (normal,
# subnormal) are computed and one is kept by a bit mask, without branches, so that loops over
# them vectorize (kernels are built without gcc's loop if-conversion). ``{u}`` is the dialect's
# name for uint32_t, ``{b}`` for uint8_t; cv_f32_u32 and cv_u32_f32 reinterpret the bits.
_FLOAT8_SRC = {
    "e4m3": """static inline float cv_e4m3_f32({b} x) {{
  {u} s = ({u})(x & 0x80u) << 24, e = (x >> 3) & 0xfu, m = x & 7u;
  {u} normal = ((e + 120u) << 23) | (m << 20), sub = cv_f32_u32((float)(int)m * 0.001953125f);
  {u} nan = 0u - ({u})((x & 0x7fu) == 0x7fu), low = 0u - ({u})(e == 0u);
  return cv_u32_f32(s | (nan & 0x7fc00000u) | (~nan & ((low & sub) | (~low & normal))));
}}
static inline {b} cv_f32_e4m3(float f) {{
  {u} u = cv_f32_u32(f), a = u & 0x7fffffffu, s = (u >> 24) & 0x80u;
  {u} r = (a - 0x3c000000u + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
  r = r > 0x7fu ? 0x7fu : r;
  {u} shift = 141u - (a >> 23);
  shift = shift > 25u ? 25u : shift;
  {u} m = (a & 0x7fffffu) | 0x800000u, q = m >> shift, rem = m & ((1u << shift) - 1u), tie = 1u << (shift - 1u);
  q += (({u})(rem > tie) | (({u})(rem == tie) & q)) & 1u;
  {u} normal = 0u - ({u})(a >= 0x3c800000u);
  return ({b})(s | (normal & r) | (~normal & q));
}}
static inline float cv_round_e4m3(float f) {{ return cv_e4m3_f32(cv_f32_e4m3(f)); }}
""",
    "e5m2": """static inline float cv_e5m2_f32({b} x) {{
  {u} s = ({u})(x & 0x80u) << 24, e = (x >> 2) & 0x1fu, m = x & 3u;
  {u} normal = ((e + 112u) << 23) | (m << 21), sub = cv_f32_u32((float)(int)m * 1.52587890625e-05f);
  {u} top = 0u - ({u})(e == 31u), low = 0u - ({u})(e == 0u), nan = 0u - ({u})(m != 0u);
  {u} special = 0x7f800000u | (nan & 0x400000u);
  return cv_u32_f32(s | (top & special) | (~top & ((low & sub) | (~low & normal))));
}}
static inline {b} cv_f32_e5m2(float f) {{
  {u} u = cv_f32_u32(f), a = u & 0x7fffffffu, s = (u >> 24) & 0x80u;
  {u} r = (a - 0x38000000u + 0xfffffu + ((a >> 21) & 1u)) >> 21;
  r = r > 0x7cu ? 0x7cu : r;
  {u} shift = 134u - (a >> 23);
  shift = shift > 25u ? 25u : shift;
  {u} m = (a & 0x7fffffu) | 0x800000u, q = m >> shift, rem = m & ((1u << shift) - 1u), tie = 1u << (shift - 1u);
  q += (({u})(rem > tie) | (({u})(rem == tie) & q)) & 1u;
  {u} normal = 0u - ({u})(a >= 0x38800000u), nan = 0u - ({u})(a > 0x7f800000u);
  return ({b})(s | (nan & 0x7eu) | (~nan & ((normal & r) | (~normal & q))));
}}
static inline float cv_round_e5m2(float f) {{ return cv_e5m2_f32(cv_f32_e5m2(f)); }}
""",
}


def float8_helpers(short: str, u32: str = "uint32_t", u8: str = "uint8_t") -> str:
    """C source of ``cv_<short>_f32`` (decode), ``cv_f32_<short>`` (encode) and ``cv_round_<short>``
    (float to the nearest 8-bit value, as a float) for the 8-bit float ``short`` (``"e4m3"``,
    ``"e5m2"``), with ``u32``/``u8`` the dialect's names of the unsigned types. They call
    ``cv_f32_u32`` and ``cv_u32_f32``, which each dialect defines."""
    return _FLOAT8_SRC[short].format(u=u32, b=u8)


# ops whose narrow-float result is one of their operands or its negation: there is nothing to round
_EXACT_OPS = (Op.WHERE, Op.MAX, Op.MIN, Op.NEG, Op.ABS)


def narrow_rounded(k: Kernel) -> set[int]:
    """The values of ``k`` (by id) of a narrow float dtype (float16, bfloat16, the 8-bit floats:
    computed in float) that are rounded to their dtype where computed: every one an op computes
    (alu, cast, index, a sum or product reduce) except selections and sign changes, and except a
    product that only sum reduces read: those accumulate the exact products in float32 (a matmul's
    dot products, as ml_dtypes' dot, PyTorch's CPU kernels and matrix units do)."""
    readers: dict[int, list[U]] = {}
    for u in k.values():
        for x in u.src:
            readers.setdefault(id(x), []).append(u)
    stored = {id(st.value) for st in k.stores}
    out = set()
    for u in k.values():
        if u.dtype.name not in FLOAT_COMPUTED or u.op not in ("alu", "cast", "index", "reduce"):
            continue
        if (u.op == "alu" and u.arg in _EXACT_OPS) or (u.op == "reduce" and u.arg[0] in ("max", "min")):
            continue
        if u.op == "alu" and u.arg is Op.MUL and id(u) not in stored and \
                all(r.op == "reduce" and r.arg[0] == "sum" for r in readers.get(id(u), [])):
            continue
        out.add(id(u))
    return out


def _float_helpers(t: str, sfx: str) -> str:
    """numpy's remainder for floats (fmod based, the sign follows the divisor) and floor_divide,
    which is numpy's but for the Array API standard's special cases: with a zero divisor or an
    infinite (or nan) operand the result is the IEEE quotient (inf // 2 = inf, -3 // inf = -0, where
    numpy gives nan and -1 as Python does). ``x - x != 0`` tests for inf and nan without <math.h>."""
    return f"""static inline {t} cv_fmod_{t}({t} a, {t} b) {{
  {t} m = fmod{sfx}(a, b);
  if (m != 0) {{ if ((b < 0) != (m < 0)) m += b; }} else m = copysign{sfx}(0, b);
  return m;
}}
static inline {t} cv_fdiv_{t}({t} a, {t} b) {{
  if (b == 0 || a - a != 0 || b - b != 0) return a / b;
  {t} m = fmod{sfx}(a, b), d = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) d -= 1;
  if (d == 0) return copysign{sfx}(0, a / b);
  {t} f = floor{sfx}(d);
  return (d - f > 0.5) ? f + 1 : f;
}}
"""


def _complex_tanh_helpers(t: str, r: str) -> str:
    """Complex tanh and tan (``-i tanh(iz)``, as the standard defines it and numpy computes it) on
    glibc's ctanh, which keeps C99's sign for tanh(inf + iy): that of sin(2y). The Array API
    standard gives ``1 + 0i`` for every finite positive y (``tanh(conj(z)) = conj(tanh(z))`` and
    oddness give the other signs): the imaginary zero takes y's sign, on every device (the GPU
    renderers' cv_ctanh checks the same cases first)."""
    f = "f" if r == "float" else ""
    return f"""static inline {t} cv_ctanh_{r}({t} z) {{
  {r} x = __real__ z, y = __imag__ z;
  if (x - x != 0 && x == x) return __builtin_complex(__builtin_copysign{f}(1, x), __builtin_copysign{f}(0, y));
  return ctanh{f}(z);
}}
static inline {t} cv_ctan_{r}({t} z) {{
  {t} w = cv_ctanh_{r}(__builtin_complex(-__imag__ z, __real__ z));
  return __builtin_complex(__imag__ w, -__real__ w);
}}
"""


# a value the compiler may not look through (an empty asm that "changes" its register): gcc 12's
# vectorizer turns a complex product's plain formula into vfmaddsub, which fuses a product into
# each part whatever -ffp-contract says (-march=rocketlake); with every product opaque it cannot
_OPAQUE = """#ifndef CV_OPAQUE
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define CV_OPAQUE(v) __asm__("" : "+x"(v))
#elif defined(__GNUC__) && defined(__aarch64__)
#define CV_OPAQUE(v) __asm__("" : "+w"(v))
#else
#define CV_OPAQUE(v) ((void)0)
#endif
#endif
"""


def _complex_helpers(t: str, r: str, fma: bool = False) -> str:
    """numpy's complex multiply (no C99 Annex G recovery of infinities) and divide (Smith's
    algorithm; a zero divisor gives numpy's inf/nan parts). numpy's SIMD loops multiply with one
    fused multiply-add per part where the CPU has FMA (``fma``): ``fma(ar, br, -(ai*bi))`` and
    ``fma(ar, bi, ai*br)``, written out here (as the GPU renderers do), so every compiler gives
    numpy's bits: left to contraction, gcc fused it only in some loops (x * y, not x * x) and
    clang never. Without FMA the plain formula. Nothing else is contracted: it changes signs of
    infinite and zero parts numpy's loops give."""
    off = '__attribute__((optimize("fp-contract=off")))'
    f = "f" if r == "float" else ""
    product = (f"__builtin_complex(__builtin_fma{f}(ar, br, -(ai * bi)), __builtin_fma{f}(ar, bi, ai * br))" if fma
               else "__builtin_complex(ar * br - ai * bi, ar * bi + ai * br)")
    return f"""{_OPAQUE}static inline {off} {t} cv_cmul_{r}({t} a, {t} b) {{
  {r} ar = __real__ a, ai = __imag__ a, br = __real__ b, bi = __imag__ b;
  return {product};
}}
static inline {off} {t} cv_cmulplain_{r}({t} a, {t} b) {{  /* numpy's multiply.reduce: the plain formula */
  {r} ar = __real__ a, ai = __imag__ a, br = __real__ b, bi = __imag__ b;
  {r} p0 = ar * br, p1 = ai * bi, p2 = ar * bi, p3 = ai * br;
  CV_OPAQUE(p0); CV_OPAQUE(p1); CV_OPAQUE(p2); CV_OPAQUE(p3);  /* (else gcc's vectorizer fuses them: vfmaddsub) */
  return __builtin_complex(p0 - p1, p2 + p3);
}}
static inline {off} {t} cv_cdiv_{r}({t} a, {t} b) {{
  {r} ar = __real__ a, ai = __imag__ a, br = __real__ b, bi = __imag__ b;
  {r} abr = __builtin_fabs{"f" if r == "float" else ""}(br), abi = __builtin_fabs{"f" if r == "float" else ""}(bi);
  if (abr >= abi) {{
    if (abr == 0 && abi == 0) return __builtin_complex(ar / abr, ai / abr);
    {r} rat = bi / br, scl = ({r})1 / (br + bi * rat);
    return __builtin_complex((ar + ai * rat) * scl, (ai - ar * rat) * scl);
  }}
  {r} rat = br / bi, scl = ({r})1 / (bi + br * rat);
  return __builtin_complex((ar * rat + ai) * scl, (ai * rat - ar) * scl);
}}
"""


def _int_helpers(t: str, unsigned: bool, bits: int) -> str:
    u = f"u{t}" if not unsigned else t
    neg_one_guard = "" if unsigned else "if (b == -1) return (" + t + ")(0 - (" + u + ")a);"
    fix_div = "" if unsigned else " if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;"
    fix_mod = "" if unsigned else " if (r != 0 && ((r < 0) != (b < 0))) r += b;"
    sar = f"return (b >= {bits} || b < 0) ? (a < 0 ? -1 : 0) : a >> b;" if not unsigned else \
        f"return (b >= {bits}) ? 0 : a >> b;"
    return f"""static inline {t} cv_idiv_{t}({t} a, {t} b) {{ if (b == 0) return 0; {neg_one_guard} {t} q = a / b;{fix_div} return q; }}
static inline {t} cv_imod_{t}({t} a, {t} b) {{ if (b == 0) return 0; {neg_one_guard.replace("(0 - (" + u + ")a)", "0")} {t} r = a % b;{fix_mod} return r; }}
static inline {t} cv_shl_{t}({t} a, {t} b) {{ return ({"" if unsigned else "b < 0 || "}b >= {bits}) ? 0 : ({t})(({u})a << b); }}
static inline {t} cv_shr_{t}({t} a, {t} b) {{ {sar} }}
static inline {t} cv_ipow_{t}({t} a, {t} b) {{
  {"" if unsigned else f"if (b < 0) return (a == 1) ? 1 : (a == -1) ? ((b & 1) ? -1 : 1) : 0;"}
  {u} r = 1, x = ({u})a; uint64_t e = (uint64_t)b;
  while (e) {{ if (e & 1) r *= x; x *= x; e >>= 1; }}
  return ({t})r;
}}
"""


@functools.cache
def _libmvec_has(fname: str) -> bool:
    path = ctypes.util.find_library("mvec")
    if path is None:
        return False
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return False
    return hasattr(lib, f"_ZGVdN8v_{fname}f") and hasattr(lib, f"_ZGVdN4v_{fname}")


def compute_type(dt: DType) -> str:
    """The C type a value of ``dt`` lives in while it is computed on."""
    if dt.is_bool:
        return "_Bool"
    return "float" if dt.name in FLOAT_COMPUTED else _STORAGE[dt.name]


def render_const(value, dt: DType) -> str:
    t = compute_type(dt)
    if dt.is_complex:
        z, part = complex(value), dt.real_dtype
        return f"__builtin_complex({render_const(z.real, part)}, {render_const(z.imag, part)})"
    if dt.is_bool:
        return "1" if value else "0"
    if dt.is_float:
        v = float(value)
        sfx = "f" if t == "float" else ""
        if math.isnan(v):  # (a nan keeps its sign: signbit(-nan) is True)
            return f"(-__builtin_nan{sfx}(\"\"))" if math.copysign(1.0, v) < 0 else f"__builtin_nan{sfx}(\"\")"
        if math.isinf(v):
            return f"(-__builtin_inf{sfx}())" if v < 0 else f"__builtin_inf{sfx}()"
        return f"{v!r}{sfx}" if v >= 0 or v != 0 else f"-0.0{sfx}"
    v = int(value)
    if dt.name == "int64" and v == -(1 << 63):
        return "(-9223372036854775807LL-1)"
    suffix = {"int64": "LL", "uint64": "ULL", "uint32": "U"}.get(dt.name, "")
    return f"(({t}){v}{suffix})"


def _body_syms(body: list):
    """Every index expression in a loop body's statements, nested loops included."""
    for st in body:
        if isinstance(st, Def):
            yield from st.u.syms()
        elif isinstance(st, StoreStmt):
            yield st.store.index
            if st.store.gate is not None:
                yield st.store.gate
        elif isinstance(st, For):
            yield from _body_syms(st.body)


def _cmps(x: Sym):
    """The comparisons inside a 0/1 expression."""
    if isinstance(x, Cmp):
        yield x
    elif isinstance(x, And):
        for item in x.items:
            yield from _cmps(item)


def _linear_in(x: Sym, v: Var) -> tuple[int, int]:
    """``(a, b)`` with ``x == a*v + b``, or ``(0, 0)`` when it is not of that form."""
    if x == v:
        return 1, 0
    if isinstance(x, Lin) and len(x.terms) == 1 and v in x.terms:
        return x.terms[v], x.const
    return 0, 0


def _unit_stride(x: Sym, v: Var) -> bool:
    """Whether ``x`` moves by 0 or 1 when ``v`` does."""
    if x == v or v not in x.vars():
        return True
    return isinstance(x, Lin) and x.terms.get(v) == 1 and all(a == v or v not in a.vars() for a in x.terms)


def _vector_valued(u: U) -> bool:
    """Lane-dependent values of these dtypes are held in vector registers; others (bool, ints,
    8- and 16-bit floats) only as scalars inside a lane loop."""
    return u.dtype.name in ("float32", "float64")


def vector_fma_helper(name: str, vt: str, lanes: int, single: bool) -> str:
    """C source of ``static inline vt name(a, b, c)``: ``a*b + c`` on GNU vectors of ``lanes``
    lanes with one rounding. gcc: a lane loop of scalar fma, which it compiles to one vector
    instruction. clang compiles that loop lane by lane for 64-byte vectors (the peak probe, which
    writes its multiply-adds with this helper too, measured 2.7 GFLOP/s instead of 250), so there
    ``a * b + c`` with contraction allowed in this one statement (kernels are built with
    ``-ffp-contract=off``): clang emits it as ``llvm.fmuladd``, one vector fma on an FMA target."""
    fma = "__builtin_fmaf" if single else "__builtin_fma"
    return (f"static inline {vt} {name}({vt} a, {vt} b, {vt} c) {{\n#ifdef __clang__\n"
            "#pragma clang fp contract(on)\n  return a * b + c;\n#else\n"
            f"  {vt} r; for (int l = 0; l < {lanes}; l++) r[l] = {fma}(a[l], b[l], c[l]); return r;\n#endif\n}}\n")


class CRenderer:
    """Kernel IR → C source. Subclasses for other C-like languages override the hooks.

    A renderer holds its configuration; the state of one rendering (the lines, the names given to
    values, the helpers used) lives on a copy made per :meth:`render` call, so one renderer (a
    device's) can render from several threads at once."""

    def __init__(self, openmp: bool = True, libmvec: bool = True, fma: bool | None = None):
        self.openmp, self.libmvec = openmp, libmvec
        self.fma = has_fma() if fma is None else fma  # write sums of products as fused multiply-adds

    unwritten: frozenset | set = frozenset()  # values not written out (set per rendering: _render)
    symbolic_sizes = True  # kernels over symbolic sizes (read from the sizes param: Kernel.dims_param)

    def render(self, k: Kernel) -> str:
        """The source of kernel ``k``."""
        return copy.copy(self)._render(k)

    def _render(self, k: Kernel) -> str:
        self.k, self.lines, self.names, self.helpers, self.math_used = k, [], {}, {}, set()
        self.complex_math: dict[str, str] = {}  # complex libm function -> its declaration
        self._lane_ctx: dict[int, str] | None = None  # inside a lane loop: the lane scalars' local names
        self._narrow: dict[Var, Var] = {}  # inside a piece of a split loop: its variable with the piece's range
        self.rounded = narrow_rounded(k)
        self._setup_lanes(k)
        # products that only a sum reads which accumulates them as fused multiply-adds
        # (_accumulate): written out as well, they were dead code that still changed gcc's register
        # allocation of a matmul's micro-kernel (11 register moves per step of its loop, then 2)
        readers = Counter(id(x) for u in k.values() for x in u.src)
        readers.update(id(st.value) for st in k.stores)
        self.unwritten = {id(u.src[0]) for u in k.values() if self._fused_product(u) is not None and
                          readers[id(u.src[0])] == 1}
        big = any(upper(lp.size) >= 1 << 31 for lp in k.loops + k.reduce_loops()) or \
            any(upper(p.size) >= 1 << 31 for p in k.params)
        # an index whose terms or partial sums leave int range (e.g. (-i) % 16384 simplified to
        # (i*16383) % 16384) is computed in 64 bits, as is everything when sizes need it
        big = big or any(_magnitude(x) >= 1 << 31 for u in k.values() for x in u.syms()) or \
            any(_magnitude(st.index) >= 1 << 31 for st in k.stores)
        self.index_t = "long long" if big else "int"
        self._emit_block(linearize(k), 1)
        args = ", ".join(
            f"{'' if p.output else 'const '}{_STORAGE[p.dtype.name]}* restrict p{i}" for i, p in enumerate(k.params))
        head = [_PRELUDE, *self._math_decls(), *self.helpers.values(), f"void {k.name}({args}) {{"]
        if k.dims_param is not None:  # the symbolic sizes, read once (see graph/symbolic.py: Dim)
            head += [f"  const long long cv_d{j} = p{k.dims_param}[{j}]; (void)cv_d{j};"
                     for j in range(k.params[k.dims_param].size)]
        return "\n".join(head + self.lines + ["}", ""])

    def _setup_lanes(self, k: Kernel) -> None:
        """For a vectorized kernel: which values are vectors (``vec``) and which of those live in
        vector variables (``held``)."""
        self.lane = Var("lane", 0, k.vector_width - 1) if k.vector_width > 1 else None
        self.vec, self.held = set(), set()
        if self.lane is not None:
            for u in k.values():
                if any(self.lane in x.vars() for x in u.syms()) or any(id(x) in self.vec for x in u.src):
                    self.vec.add(id(u))
            # vector values held in vector registers: those with a vector form, and the others
            # (computed lane by lane) that a vector op, a sum or a store reads; the rest are
            # computed inside their users' lane loops (gcc vectorizes one lane loop, not a chain
            # of them that pass values through vector variables)
            self.held = {id(u) for u in k.values() if id(u) in self.vec and self._native(u)}
            for u in k.values():
                if id(u) in self.held:
                    self.held.update(id(x) for x in u.src if id(x) in self.vec and _vector_valued(x))
            self.held.update(id(st.value) for st in k.stores if id(st.value) in self.vec)

    # statements ------------------------------------------------------------------------------------
    def _emit_block(self, stmts: list, depth: int) -> None:
        pad = "  " * depth
        for s in stmts:
            if isinstance(s, Def):
                if id(s.u) in self.unwritten:
                    continue
                if id(s.u) in self.vec and not self._native(s.u):
                    if id(s.u) in self.held:
                        self._emit_lane_def(s.u, pad)
                    continue  # a lane scalar: computed inside the lane loops of its users
                self.lines.append(f"{pad}{self._type(s.u)} {self._name(s.u)} = {self._rounded(s.u, self._expr(s.u))};")
            elif isinstance(s, AccInit):
                init = render_const(reduce_identity(s.u.dtype, s.u.arg[0]), s.u.dtype)
                if id(s.u) in self.vec:
                    init = self._broadcast(init, s.u.dtype)
                self.lines.append(f"{pad}{self._type(s.u)} {self._name(s.u)} = {init};")
                if self._nan_flag(s.u):
                    self.lines.append(f"{pad}int {self._name(s.u)}_nan = 0;  // int, not _Bool: a bool flag blocks vectorization")
            elif isinstance(s, AccFinal):
                if self._nan_flag(s.u):
                    acc = self._name(s.u)
                    self.lines.append(f"{pad}if ({acc}_nan) {acc} = {render_const(math.nan, s.u.dtype)};")
            elif isinstance(s, AccUpdate):
                self.lines.append(f"{pad}{self._accumulate(s.u)}")
            elif isinstance(s, StoreStmt):
                p, idx, value = s.store.param, self._s(s.store.index), s.store.value
                dt = self.k.params[p].dtype
                gate = None if s.store.gate is None else self._s(s.store.gate)
                if gate == Num(0):  # (a piece of a split loop where this store never happens)
                    continue
                if self.lane is not None and self.lane in idx.vars() and not _lane_contiguous(idx, self.lane):
                    # a strided store of a vector (an output that is not contiguous along the lanes)
                    v = f"{self._ref(value)}[lane]" if id(value) in self.vec else self._ref(value)
                    line = (f"for (int lane = 0; lane < {self.k.vector_width}; lane++) "
                            f"p{p}[{idx.render(self._var)}] = {v};")
                elif self.lane is not None and self.lane in idx.vars():
                    v = self._ref(value) if id(value) in self.vec else self._broadcast(self._ref(value), dt)
                    line = self._vstore(dt, p, self._lane0(idx), v)
                else:
                    line = f"p{p}[{idx.render(self._var)}] = {self._to_storage(self._ref(value), dt)};"
                if gate is not None and gate != Num(1):  # (a padded loop: the gate never depends on the lane)
                    line = f"if ({gate.render(self._var)}) {line}"
                self.lines.append(pad + line)
            elif isinstance(s, For) and s.parallel and s.reduce and self.openmp and \
                    (len(s.reduce) > 1 or id(s.reduce[0]) in self.vec or self._stream(s) is not None):
                self._emit_partials(s, pad, depth)
            elif isinstance(s, For) and not s.parallel and self._stream(s) is not None:
                # a streamed sum on one thread: the whole loop is the thread's share
                self.lines.append(f"{pad}{{")
                self.lines.append(f"{pad}  {self.index_t} cv_lo = 0, cv_hi = {s.loop.size};")
                self._emit_stream(s, self._stream(s), pad + "  ", depth + 1, "1")
                v = self._var(s.loop.var)
                self.lines.append(f"{pad}  #pragma omp simd{self._reduction_clause(s.reduce)}")
                self.lines.append(f"{pad}  for ({self.index_t} {v} = cv_at; {v} < cv_hi; {v}++) {{")
                self._emit_block(s.body, depth + 2)
                self.lines.append(f"{pad}  }}")
                self.lines.append(f"{pad}}}")
            elif isinstance(s, For) and self._collapse(s) > 1:
                # few parallel iterations (3 over 2 threads leaves one idle a third of the time):
                # the loops nested right inside share the threads too (OpenMP's collapse)
                chain = [s]
                for _ in range(self._collapse(s) - 1):
                    chain.append(chain[-1].body[0])
                self.lines.append(f"{pad}#pragma omp parallel for collapse({len(chain)}) schedule(static)")
                for j, f in enumerate(chain):
                    v = self._var(f.loop.var)
                    self.lines.append(f"{pad}{'  ' * j}for ({self.index_t} {v} = 0; {v} < {f.loop.size}; {v}++) {{")
                self._emit_block(chain[-1].body, depth + len(chain))
                for j in reversed(range(len(chain))):
                    self.lines.append(f"{pad}{'  ' * j}}}")
            elif isinstance(s, For):
                pieces = self._pieces(s)
                outer = self._narrow
                for lo, hi in pieces:
                    if len(pieces) > 1 and isinstance(lo, str):  # (a symbolic loop's tail: gated as it was)
                        self._narrow = outer
                    elif len(pieces) > 1 and isinstance(lo, int) and isinstance(hi, int):
                        # this piece's conditions on the loop variable are constants
                        self._narrow = {**outer, s.loop.var: Var(s.loop.var.name, lo, hi - 1)}
                    elif len(pieces) > 1:  # a symbolic loop's main piece, [0, cut): its gates all hold
                        self._narrow = {**outer, s.loop.var: BVar(s.loop.var.name, hi)}
                        hi = f"({hi} < {s.loop.size} ? {hi} : {s.loop.size})"
                    pragma = self._pragma(s)
                    if pragma:
                        self.lines.append(f"{pad}{pragma}")
                    elif s.loop.unroll > 1:  # (an omp loop must follow its pragma: simd loops unroll anyway)
                        self.lines.append(f"{pad}#pragma GCC unroll {s.loop.unroll}")
                    v = self._var(s.loop.var)
                    self.lines.append(f"{pad}for ({self.index_t} {v} = {lo}; {v} < {hi}; {v}++) {{")
                    self._emit_block(s.body, depth + 1)
                    self.lines.append(f"{pad}}}")
                self._narrow = outer

    def _emit_partials(self, s: For, pad: str, depth: int) -> None:
        """A top-level reduce loop across threads with several (or vector) sum accumulators,
        which OpenMP's reduction clause cannot take: each thread sums its static share into
        accumulators of its own, and their partials are added to the outer ones in thread order
        (the same result on every run with the same thread count)."""
        self.helpers.setdefault("omp_decls", "int omp_get_max_threads(void); int omp_get_thread_num(void); int omp_get_num_threads(void);\n")
        accs = [(self._name(u), self._type(u), u) for u in s.reduce]
        self.lines.append(f"{pad}{{")
        self.lines.append(f"{pad}  int cv_nt = omp_get_max_threads();")
        inits = []
        for name, t, u in accs:
            init = render_const(reduce_identity(u.dtype, u.arg[0]), u.dtype)
            inits.append(self._broadcast(init, u.dtype) if id(u) in self.vec else init)
            self.lines.append(f"{pad}  {t} {name}_part[cv_nt];")
        # (a team may get fewer threads than asked for: the partials of absent ones add nothing)
        self.lines.append(f"{pad}  for (int cv_t = 0; cv_t < cv_nt; cv_t++) {{ "
                          + " ".join(f"{name}_part[cv_t] = {init};" for (name, _, _), init in zip(accs, inits)) + " }")
        self.lines.append(f"{pad}  #pragma omp parallel num_threads(cv_nt)")
        self.lines.append(f"{pad}  {{")
        for (name, t, _), init in zip(accs, inits):
            self.lines.append(f"{pad}    {t} {name} = {init};")
        v = self._var(s.loop.var)
        keep = self._stream(s)
        if self._simd_group(s) or keep is not None:
            # the static schedule's shares by hand, so that the loop can carry the simd clause
            # (an 'omp for' reduction cannot name the thread's private accumulators)
            self.lines.append(f"{pad}    {self.index_t} cv_lo = ({self.index_t})((long long){s.loop.size} * "
                              "omp_get_thread_num() / omp_get_num_threads());")
            self.lines.append(f"{pad}    {self.index_t} cv_hi = ({self.index_t})((long long){s.loop.size} * "
                              "(omp_get_thread_num() + 1) / omp_get_num_threads());")
            start = "cv_lo"
            if keep is not None:
                self._emit_stream(s, keep, pad + "    ", depth + 2)
                start = "cv_at"
            self.lines.append(f"{pad}    #pragma omp simd{self._reduction_clause(s.reduce)}")
            self.lines.append(f"{pad}    for ({self.index_t} {v} = {start}; {v} < cv_hi; {v}++) {{")
        else:
            self.lines.append(f"{pad}    #pragma omp for schedule(static)")
            self.lines.append(f"{pad}    for ({self.index_t} {v} = 0; {v} < {s.loop.size}; {v}++) {{")
        self._emit_block(s.body, depth + 3)
        self.lines.append(f"{pad}    }}")
        for name, _, _ in accs:
            self.lines.append(f"{pad}    {name}_part[omp_get_thread_num()] = {name};")
        self.lines.append(f"{pad}  }}")
        self.lines.append(f"{pad}  for (int cv_t = 0; cv_t < cv_nt; cv_t++) {{")
        for name, _, _ in accs:
            self.lines.append(f"{pad}    {name} += {name}_part[cv_t];")
        self.lines.append(f"{pad}  }}")
        self.lines.append(f"{pad}}}")

    def _stream(self, s: For) -> int | None:
        """The ``keep_kib`` of the kernel's ``stream`` action when ``s`` is the loop it streams:
        the top-level reduce loop (across threads or on one), every accumulator a sum of one contiguous
        load (:func:`~corvid.codegen.opt.stream_sums`). None otherwise (read as usual)."""
        opt = next((o for o in self.k.opts if o.op == "stream"), None)
        if opt is None or not s.innermost or s.loop.var not in {lp.var for lp in self.k.reduce_loops()} or \
                self.lane is not None or self._narrow:
            return None
        sums = stream_sums(self.k)
        if isinstance(sums, str) or sorted(map(id, sums)) != sorted(map(id, s.reduce)):
            return None
        return opt.arg

    def _emit_stream(self, s: For, keep_kib: int, pad: str, depth: int, threads: str = "omp_get_num_threads()") -> None:
        """The first part of a thread's share ``[cv_lo, cv_hi)`` of a streamed sum: from the first
        iteration at which every stream is aligned to the vector width up to ``keep_kib`` KiB (split
        among the threads) before the end, the loads are non-temporal (vmovntdqa), summed into
        vector accumulators whose lanes are then added to the scalar ones in order. Leaves
        ``cv_at``, where the ordinary loop goes on. Where the streams' addresses are not aligned
        alike, or the CPU has no such load, everything is read as usual."""
        self.helpers.setdefault("stream", _STREAM_HELPERS)
        v, it = self._var(s.loop.var), self.index_t
        loads: list[U] = []
        for u in s.reduce:
            if all(x is not u.src[0] for x in loads):
                loads.append(u.src[0])
        size = loads[0].dtype.itemsize
        vt = "cv_ntf32" if size == 4 else "cv_ntf64"
        keep_iters = keep_kib * 1024 // (size * len(loads))
        lanes = f"(CV_NT_BYTES / {size})"
        clause = self._reduction_clause(s.reduce)

        def addr(x: U) -> str:
            return f"&p{x.arg[0]}[{self._s(x.arg[1]).render(self._var)}]"

        def body(lo: str, hi: str) -> None:
            self.lines.append(f"{pad}    #pragma omp simd{clause}")
            self.lines.append(f"{pad}    for ({it} {v} = {lo}; {v} < {hi}; {v}++) {{")
            self._emit_block(s.body, depth + 3)
            self.lines.append(f"{pad}    }}")

        add = self.lines.append
        add(f"{pad}{it} cv_at = cv_lo;")
        add("#ifdef CV_NT_BYTES")
        add(f"{pad}{{")
        add(f"{pad}  {it} cv_mid = cv_hi - ({it})({keep_iters}LL / {threads});")
        add(f"{pad}  uintptr_t " + ", ".join(f"cv_a{j}" for j in range(len(loads))) + ";")
        add(f"{pad}  {{ {it} {v} = cv_at; " + " ".join(f"cv_a{j} = (uintptr_t){addr(x)};"
                                                      for j, x in enumerate(loads)) + " }")
        alike = " | ".join(f"(cv_a0 ^ cv_a{j})" for j in range(1, len(loads))) or "0"
        add(f"{pad}  if (cv_mid - cv_at >= 4 * {lanes} && cv_a0 % {size} == 0 && ({alike}) % CV_NT_BYTES == 0) {{")
        add(f"{pad}    {it} cv_pe = cv_at + ({it})((CV_NT_BYTES - cv_a0 % CV_NT_BYTES) % CV_NT_BYTES / {size});")
        body("cv_at", "cv_pe")
        add(f"{pad}    cv_at = cv_pe;")
        add(f"{pad}    {vt} " + ", ".join(f"cv_s{j} = {{0}}" for j in range(len(loads))) + ";")
        add(f"{pad}    for ({it} {v} = cv_at; {v} + {lanes} <= cv_mid; {v} += {lanes}) {{")
        for j, x in enumerate(loads):
            add(f"{pad}      cv_s{j} += ({vt})cv_ntload({addr(x)});")
        add(f"{pad}    }}")
        add(f"{pad}    cv_at += (cv_mid - cv_at) / {lanes} * {lanes};")
        add(f"{pad}    for (int cv_j = 0; cv_j < {lanes}; cv_j++) {{")
        for u in s.reduce:
            add(f"{pad}      {self._name(u)} += cv_s{next(j for j, x in enumerate(loads) if x is u.src[0])}[cv_j];")
        add(f"{pad}    }}")
        add(f"{pad}  }}")
        add(f"{pad}}}")
        add("#endif")

    def _collapse(self, s: For) -> int:
        """How many perfectly nested loops a parallel loop shares its threads with: while there
        are fewer than ``COLLAPSE_BELOW`` iterations in all (a plain parallel loop only: no reduce
        or simd clause)."""
        if not (s.parallel and self.openmp) or s.reduce or is_symbolic(s.loop.size) or s.loop.size >= COLLAPSE_BELOW or \
                self._pragma(s) != "#pragma omp parallel for schedule(static)":
            return 1
        n, total, f = 1, s.loop.size, s
        while total < COLLAPSE_BELOW and len(f.body) == 1 and isinstance(f.body[0], For) and not f.body[0].reduce \
                and not is_symbolic(f.body[0].loop.size):
            f = f.body[0]
            n, total = n + 1, total * f.loop.size
        return n

    def _s(self, x: Sym) -> Sym:
        """An index expression as seen inside the pieces of split loops (see :meth:`_pieces`)."""
        return x.substitute(self._narrow) if self._narrow and x.vars() & self._narrow.keys() else x

    def _pieces(self, s: For) -> list[tuple[int, int]]:
        """Index-set splitting: the ranges a loop is cut into so that every bounds test of a padded
        read on its variable alone (``i - 4 >= 0``, ``i - 4 < 20``) is constant in each, making
        the middle piece a plain ungated copy and the others constants. Not for a parallel loop
        (one OpenMP loop), a vectorized kernel, or more than 3 pieces or 9 copies of a body."""
        whole = [(0, s.loop.size)]
        if is_symbolic(s.loop.size):  # (its tests involve no lane: any kernel)
            return whole if s.parallel or self._narrow else self._symbolic_pieces(s) or whole
        if s.parallel or self.lane is not None or len(self._narrow) >= 2:
            return whole
        v = s.loop.var
        cuts: set[int] = set()
        for x in _body_syms(s.body):
            for c in _cmps(self._s(x)):  # (those an enclosing piece already decides are gone)
                if c.x.vars() != {v}:
                    continue
                terms, const = _linear_in(c.x, v)
                if terms > 0:  # a*v + const (< or >=) c changes at v = ceil((c - const) / a)
                    t = -((const - c.c) // terms)
                    if 0 < t < s.loop.size:
                        cuts.add(t)
        if not cuts or len(cuts) > 2:
            return whole
        bounds = [0, *sorted(cuts), s.loop.size]
        return list(zip(bounds, bounds[1:]))

    def _symbolic_pieces(self, s: For) -> list | None:
        """A loop over a symbolic size whose body's bounds tests on its variable (``8*v + k < n``,
        a padded row tile's) all hold below one cut: ``[(0, cut), (cut, size)]``, the first piece
        without the tests (its loads plain, its stores ungated), the second as it was (``cut``
        as a string there: ``min(cut, size)`` rendered); None when no such cut is found."""
        v = s.loop.var
        cmps, cuts = [], {}
        for x in _body_syms(s.body):
            for c in _cmps(self._s(x)):
                if v not in c.x.vars():
                    continue
                if c.op != "<" or not all(w == v or isinstance(w, Dim) for w in c.x.vars()):
                    return None
                a = 1 if c.x == v else c.x.terms.get(v, 0) if isinstance(c.x, Lin) else 0
                if a <= 0:
                    return None
                cmps.append(c)
                cut = (c.c - (c.x - v * a) + a - 1) // a  # a*v + e < c  <=>  v < ceil((c - e) / a)
                cuts.setdefault(cut, None)
        for cut in cuts:
            if not isinstance(cut, Sym) or isinstance(cut, Num) or cut.vmax < 1:
                continue
            w = BVar(v.name, cut)
            if all(c.substitute({v: w}) == Num(1) for c in cmps):
                lo_hi = f"({cut} < {s.loop.size} ? {cut} : {s.loop.size})"
                return [(0, cut), (lo_hi, s.loop.size)]
        return None

    def _nan_flag(self, u: U) -> bool:
        """Float max/min track nan in a flag so the comparison itself can vectorize (a vector
        accumulator keeps nan by its select instead)."""
        return u.op == "reduce" and u.arg[0] in ("max", "min") and u.dtype.is_float and id(u) not in self.vec

    def _simd_group(self, s: For) -> bool:
        """Several scalar float sum/max/min accumulators in an innermost loop that reads memory
        only contiguously along it (the chunks of ``upcast_reduce``): each vectorizes along the
        loop, one vector accumulator per chunk. A group with any strided read (a matmul's
        register tile) is left to the compiler's straight-line vectorizer across accumulators."""
        if len(s.reduce) < 2 or not s.innermost or any(
                id(u) in self.vec or u.arg[0] not in ("sum", "max", "min") or u.dtype.name not in ("float32", "float64")
                for u in s.reduce):
            return False
        v = s.loop.var
        for st in s.body:
            if isinstance(st, Def) and st.u.op == "gather":
                return False
            if isinstance(st, Def) and st.u.op == "load" and not _unit_stride(st.u.arg[1], v):
                return False
        return True

    def _simd_gather(self, s: For) -> bool:
        """An innermost output loop (no accumulators) that reads memory indirectly (a GATHER)
        and writes a different element each iteration: ``omp simd`` vectorizes it, which gcc's
        cost model otherwise declines. Kernels timed alternately on Zen 4 (``omp simd`` against
        none): take_along_axis 4096x64 of 256 floats 170 vs 374 us, take of 1M from 1M 621 vs
        1399 us, 4096 embedding rows of 256 floats 327 vs 418 us, 64x16 of 64 floats 1.1 vs
        1.0 us. Not in a kernel with vector types (a gather is then a lane loop inside the vector
        code), nor with complex values."""
        if s.reduce or self.k.vector_width > 1:  # (a nested loop fails the body check below)
            return False
        v, gathers = s.loop.var, False
        for st in s.body:
            if isinstance(st, Def):
                if st.u.dtype.is_complex:
                    return False
                gathers = gathers or st.u.op == "gather"
            elif not isinstance(st, StoreStmt) or _stride(st.store.index, v) == 0:
                return False
        return gathers

    def _reduction_clause(self, accs) -> str:
        """OpenMP reduction clauses for ``accs`` (one op each; nan flags of float max/min)."""
        by_op: dict[str, list[str]] = {}
        for u in accs:
            by_op.setdefault({"sum": "+", "prod": "*"}.get(u.arg[0], u.arg[0]), []).append(self._name(u))
            if self._nan_flag(u):
                by_op.setdefault("|", []).append(f"{self._name(u)}_nan")
        return "".join(f" reduction({op}:{','.join(names)})" for op, names in by_op.items())

    def _pragma(self, s: For) -> str:
        # a single accumulator vectorizes along its loop; a group of them (register tiles) is
        # left to the compiler's straight-line vectorizer across the accumulators, unless every
        # read is contiguous along the loop (_simd_group)
        if self._simd_group(s):
            return f"#pragma omp simd{self._reduction_clause(s.reduce)}"
        if self._simd_gather(s):
            return "#pragma omp parallel for simd schedule(static)" if s.parallel and self.openmp else "#pragma omp simd"
        red = s.reduce[0] if len(s.reduce) == 1 and id(s.reduce[0]) not in self.vec else None
        # a complex product multiplies the numpy way (cv_cmul), which omp's '*' combiner would not
        simd_red = red is not None and s.innermost and not red.dtype.is_bool and \
            not (red.dtype.is_complex and red.arg[0] == "prod")
        clause = ""
        if red is not None and (simd_red or s.parallel) and not red.dtype.is_bool:
            acc = self._name(red)
            clause = f" reduction({ {'sum': '+', 'prod': '*'}.get(red.arg[0], red.arg[0])}:{acc})"
            if self._nan_flag(red):
                clause += f" reduction(|:{acc}_nan)"
        if s.parallel and self.openmp:
            return f"#pragma omp parallel for{' simd' if simd_red else ''}{clause} schedule(static)"
        if simd_red:
            return f"#pragma omp simd{clause}"
        return ""

    def _fused_product(self, u: U) -> U | None:
        """The product that the sum reduce ``u`` accumulates as a fused multiply-add, or None."""
        if u.op != "reduce" or u.arg[0] != "sum" or not self.fma or u.dtype.name not in ("float32", "float64"):
            return None
        m = u.src[0]
        return m if m.op == "alu" and m.arg is Op.MUL and m.dtype == u.dtype else None

    def _accumulate(self, u: U) -> str:
        acc, v, op = self._name(u), self._ref(u.src[0]), u.arg[0]
        if op in ("sum", "prod") and u.dtype.is_int and not u.dtype.is_unsigned and id(u) not in self.vec:
            t = compute_type(u.dtype)  # wrap on overflow, as numpy does (no -fwrapv)
            return f"{acc} = ({t})((u{t}){acc} {'+' if op == 'sum' else '*'} (u{t}){v});"
        m = self._fused_product(u)
        if m is not None:  # a sum of products accumulates with fused multiply-adds
            a, b = (self._ref(x) if id(x) in self.vec or id(u) not in self.vec else
                    self._broadcast(self._ref(x), u.dtype) for x in m.src)
            if id(u) in self.vec:
                return f"{acc} = {self._vector_fma(u.dtype)}({a}, {b}, {acc});"
            return f"{acc} = {'__builtin_fmaf' if u.dtype.name == 'float32' else '__builtin_fma'}({a}, {b}, {acc});"
        if op == "sum":
            return f"{acc} += {v};" if not u.dtype.is_bool else f"{acc} = {acc} | {v};"
        if op == "prod":
            if u.dtype.is_complex:
                return f"{acc} = {self._complex_helper(u.dtype, 'cmulplain')}({acc}, {v});"
            return f"{acc} *= {v};" if not u.dtype.is_bool else f"{acc} = {acc} & {v};"
        if self._nan_flag(u):
            cmp = ">" if op == "max" else "<"
            return f"{acc}_nan |= ({v} != {v}); {acc} = {self._select(f'{v} {cmp} {acc}', v, acc, u.dtype)};"
        if id(u) in self.vec:  # lanes: a nan in v replaces acc, and no comparison replaces a nan acc
            cmp = ">" if op == "max" else "<"
            return f"{acc} = {self._vtype(u.dtype)}_select(({v} {cmp} {acc}) | ({v} != {v}), {v}, {acc});"
        return f"{acc} = {self._minmax(op, acc, v, u.dtype)};"

    # vectors (GCC vector extensions; clang supports them too) ---------------------------------------
    def _vtype(self, dt: DType) -> str:
        name = f"cv_{dt.name}x{self.k.vector_width}"
        if name not in self.helpers:
            t, nbytes = compute_type(dt), dt.itemsize * self.k.vector_width
            it = "int32_t" if dt.itemsize == 4 else "int64_t"
            self.helpers[name] = (
                f"typedef {t} {name} __attribute__((vector_size({nbytes}), aligned({dt.itemsize})));\n"
                f"typedef {it} {name}_mask __attribute__((vector_size({nbytes})));\n"
                f"static inline {name} {name}_select({name}_mask m, {name} a, {name} b) "
                f"{{ return ({name})(((({name}_mask)a) & m) | ((({name}_mask)b) & ~m)); }}\n")
        return name

    def _type(self, u: U) -> str:
        return self._vtype(u.dtype) if id(u) in self.vec else compute_type(u.dtype)

    def _vload(self, dt: DType, param: int, offset: str) -> str:
        """The vector of ``dt`` at ``p<param> + offset`` (the type is aligned to one element)."""
        return f"*(const {self._vtype(dt)}*)(p{param} + {offset})"

    def _vstore(self, dt: DType, param: int, offset: str, value: str) -> str:
        return f"*({self._vtype(dt)}*)(p{param} + {offset}) = {value};"

    def _broadcast(self, x: str, dt: DType) -> str:
        return f"(({self._vtype(dt)}){{{', '.join([x] * self.k.vector_width)}}})"

    def _lane0(self, idx) -> str:
        return idx.substitute({self.lane: Num(0)}).render(self._var)

    def _native(self, u: U) -> bool:
        """Whether vector value ``u`` has a vector form of its own: a contiguous ungated load, an
        arithmetic op of ``VECTOR_OPS``, a multiply-add or a sum. Any other lane-dependent value is
        computed lane by lane (see :meth:`_emit_lane_def`)."""
        if not _vector_valued(u):
            return False
        if u.op == "load":
            return u.arg[2] is None and _lane_contiguous(u.arg[1], self.lane)
        return u.op in ("mulacc", "reduce") or (u.op == "alu" and u.arg in VECTOR_OPS)

    def _emit_lane_def(self, u: U, pad: str) -> None:
        """A vector value with no vector form (``exp``, a ``where``, a gated or strided load...):
        a loop over the lanes computes it as scalars, each lane-dependent non-float value it needs
        (a comparison, an index, a bf16 load) inlined in that loop. The compiler vectorizes such
        a loop where it can (libmvec gives ``exp`` a vector form); where it cannot, the kernel
        still gets its register tiles around a scalar step."""
        order: list[U] = []
        seen: set[int] = set()

        def visit(x: U) -> None:
            if id(x) in seen or id(x) not in self.vec or (id(x) in self.held and x is not u):
                return
            seen.add(id(x))
            for src in x.src:
                visit(src)
            if x is not u:
                order.append(x)

        visit(u)
        name = self._name(u)
        self.lines.append(f"{pad}{self._vtype(u.dtype)} {name};")
        self.lines.append(f"{pad}for (int lane = 0; lane < {self.k.vector_width}; lane++) {{")
        self._lane_ctx = {}
        try:
            for j, x in enumerate(order):
                self.lines.append(f"{pad}  {compute_type(x.dtype)} {name}_{j} = {self._rounded(x, self._expr(x))};")
                self._lane_ctx[id(x)] = f"{name}_{j}"
            self.lines.append(f"{pad}  {name}[lane] = {self._rounded(u, self._expr(u))};")
        finally:
            self._lane_ctx = None
        self.lines.append(f"{pad}}}")

    def _vector_fma(self, dt: DType) -> str:
        """``a*b + c`` on vectors with one rounding (:func:`vector_fma_helper`)."""
        vt = self._vtype(dt)
        name = f"{vt}_fma"
        if name not in self.helpers:
            self.helpers[name] = vector_fma_helper(name, vt, self.k.vector_width, dt.name == "float32")
        return name

    def _vector_alu(self, u: U) -> str:
        args = [self._ref(x) if id(x) in self.vec else self._broadcast(self._ref(x), u.dtype) for x in u.src]
        if u.op == "mulacc":  # one rounding, as the scalar fma (kernels are built with -ffp-contract=off)
            return f"{self._vector_fma(u.dtype)}({args[0]}, {args[1]}, {args[2]})"
        if u.arg is Op.NEG:
            return f"-{args[0]}"
        if u.arg in (Op.MAX, Op.MIN):
            cmp, v = (">=" if u.arg is Op.MAX else "<="), self._vtype(u.dtype)
            return f"{v}_select(({args[0]} {cmp} {args[1]}) | ({args[0]} != {args[0]}), {args[0]}, {args[1]})"
        return f"{args[0]} {_INFIX[u.arg]} {args[1]}"

    # values ----------------------------------------------------------------------------------------
    def _var(self, v: Var) -> str:
        return v.name

    def _name(self, u: U) -> str:
        if id(u) not in self.names:
            self.names[id(u)] = f"{'acc' if u.op == 'reduce' else 'v'}{len(self.names)}"
        return self.names[id(u)]

    def _ref(self, u: U) -> str:
        if u.op == "const":
            return render_const(u.arg, u.dtype)
        if u.op == "reduce" and id(u) in self.rounded:  # (the accumulator itself is float)
            return self._rounded(u, self._name(u))
        if self._lane_ctx is not None and id(u) in self.vec:  # inside a lane loop: this lane's value
            return self._lane_ctx.get(id(u)) or f"{self._name(u)}[lane]"
        return self._name(u)

    def _rounded(self, u: U, expr: str) -> str:
        """``expr``, the value of ``u``, rounded to its narrow float dtype if ``u`` is one of
        :func:`narrow_rounded`."""
        if id(u) not in self.rounded:
            return expr
        if u.dtype.name in FLOAT8:
            return f"cv_round_{self._float8(u.dtype)}({expr})"
        return self._from_storage(self._to_storage(expr, u.dtype), u.dtype)  # (float16, bfloat16)

    def _to_storage(self, expr: str, dt: DType) -> str:
        """A computed value as the element stored in a buffer of ``dt``."""
        if dt.name == "bfloat16":
            return f"cv_f32_bf16({expr})"
        if dt.name == "float16":
            return f"(cv_f16)({expr})"
        if dt.name in FLOAT8:
            return f"cv_f32_{self._float8(dt)}({expr})"
        return expr

    def _from_storage(self, expr: str, dt: DType) -> str:
        """An element read from a buffer of ``dt`` as the value computed on."""
        if dt.name == "bfloat16":
            return f"cv_bf16_f32({expr})"
        if dt.name == "float16":
            return f"(float){expr}"
        if dt.name in FLOAT8:
            return f"cv_{self._float8(dt)}_f32({expr})"
        return expr

    # the dialect's bit reinterpretations that float8_helpers call, and its names of the types there
    bits_helpers = ("static inline uint32_t cv_f32_u32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }\n"
                    "static inline float cv_u32_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }\n")
    float8_types = ("uint32_t", "uint8_t")

    def _float8(self, dt: DType) -> str:
        """The short name of an 8-bit float (``e4m3``), its conversion helpers added to the kernel."""
        short = FLOAT8[dt.name]
        self.helpers.setdefault("cv_bits", self.bits_helpers)
        self.helpers.setdefault(f"cv_{short}", float8_helpers(short, *self.float8_types))
        return short

    def _expr(self, u: U) -> str:
        if id(u) in self.vec and self._lane_ctx is None:
            if u.op == "load":
                return self._vload(u.dtype, u.arg[0], self._lane0(u.arg[1]))
            return self._vector_alu(u)
        if u.op == "gather":
            param, base, stride, size, gate = u.arg
            base, gate = self._s(base), None if gate is None else self._s(gate)
            if gate == Num(1):
                gate = None
            elif gate == Num(0):
                return render_const(0, u.dtype)
            v = self._ref(u.src[0])
            ok = f"(({v}) >= 0) & (({v}) < {size})" + ("" if gate is None else f" & ({gate.render(self._var)})")
            off = f"({base.render(self._var)}) + (long long)({v}) * {stride}"
            src = f"p{param}[cv_clampi({off}, {self.k.params[param].size - 1})]"
            val = self._from_storage(src, self.k.params[param].dtype)
            if self.k.params[param].size == 0:
                return render_const(0, u.dtype)
            return self._select(ok, val, render_const(0, u.dtype), u.dtype)
        if u.op == "load":
            param, idx, gate = u.arg
            idx, gate = self._s(idx), None if gate is None else self._s(gate)
            if gate == Num(1):
                gate = None
            elif gate == Num(0):  # (a piece of a split loop that reads only padding)
                return render_const(0, u.dtype)
            src = f"p{param}[{idx.render(self._var)}]"
            if gate is None:
                return self._from_storage(src, self.k.params[param].dtype)
            if self.k.params[param].size == 0:  # nothing to read: every element is padding
                return render_const(0, u.dtype)
            # clamp the index into the buffer (read anything in bounds where the gate is off), then
            # select: no branch. Not `idx * gate`: gcc 12.2's vectorizer miscompiles that address form
            g = gate.render(self._var)
            src = f"p{param}[cv_clampi({idx.render(self._var)}, {self.k.params[param].size - 1})]"
            val = self._from_storage(src, self.k.params[param].dtype)
            return self._select(g, val, render_const(0, u.dtype), u.dtype)
        if u.op == "index":
            return f"({compute_type(u.dtype)}){self._s(u.arg).render(self._var)}"
        if u.op == "cast":
            return self._cast(self._ref(u.src[0]), u.src[0].dtype, u.dtype)
        if u.op == "bitcast":
            return self._bitcast(u)
        if u.op == "mulacc":  # a*b + c with one rounding (codegen/passes.py)
            fn = "__builtin_fmaf" if u.dtype.name == "float32" else "__builtin_fma"
            return f"{fn}({', '.join(self._ref(s) for s in u.src)})"
        return self._alu(u.arg, [self._ref(s) for s in u.src], [s.dtype for s in u.src], u.dtype)

    def _select(self, c: str, a: str, b: str, dt: DType) -> str:
        """``c ? a : b`` without a branch (bit masks), so a loop vectorizes without gcc's
        if-conversion, which kernels are built without (gcc 12.2 miscompiles with it)."""
        t = compute_type(dt)
        if dt.is_bool:
            return f"(_Bool)((({c}) != 0) & ({a}) | (({c}) == 0) & ({b}))"
        name = f"cv_sel_{t.replace(' ', '_')}"
        if name not in self.helpers and dt.is_complex:  # select whole 64-bit words of the two parts
            n = dt.itemsize // 8
            self.helpers[name] = (
                f"static inline {t} {name}(int c, {t} a, {t} b) {{ uint64_t x[{n}], y[{n}], m = (uint64_t)0 - "
                f"(uint64_t)(c != 0); memcpy(x, &a, {dt.itemsize}); memcpy(y, &b, {dt.itemsize}); "
                f"for (int i = 0; i < {n}; i++) x[i] = (x[i] & m) | (y[i] & ~m); "
                f"{t} r; memcpy(&r, x, {dt.itemsize}); return r; }}\n")
        if name not in self.helpers:
            bits = {"float": "uint32_t", "double": "uint64_t"}.get(t, "u" + t if t.startswith("int") else t)
            if t in ("float", "double"):
                n = 4 if t == "float" else 8
                body = (f"{bits} x, y, m = ({bits})0 - ({bits})(c != 0); memcpy(&x, &a, {n}); memcpy(&y, &b, {n}); "
                        f"x = (x & m) | (y & ~m); {t} r; memcpy(&r, &x, {n}); return r;")
            else:
                body = f"{bits} m = ({bits})0 - ({bits})(c != 0); return ({t})((({bits})a & m) | (({bits})b & ~m));"
            self.helpers[name] = f"static inline {t} {name}(int c, {t} a, {t} b) {{ {body} }}\n"
        return f"{name}({c}, {a}, {b})"

    def _cast(self, x: str, src: DType, dst: DType) -> str:
        if src.name in FLOAT8 and dst.is_int:
            # ml_dtypes' rule: nan -> 0 and ±inf -> the integer type's max/min; other values are
            # truncated and wrap to the type's width, as numpy converts a float32 on x86 (through a
            # wide signed integer: -2.0 -> 4294967294 in uint32)
            info, inf = iinfo(dst), render_const(math.inf, _F32)
            finite = f"({compute_type(dst)})(long long)({x})"
            out = self._select(f"{x} == -{inf}", render_const(info.min, dst), finite, dst)
            out = self._select(f"{x} == {inf}", render_const(info.max, dst), out, dst)
            return self._select(f"{x} != {x}", render_const(0, dst), out, dst)
        if dst.is_bool:
            return f"({x} != 0)"
        if src.is_float and dst.name in ("uint32", "uint64"):
            return self._float_to_wide_unsigned(x, src, dst)
        if src.is_bool and dst.name in ("float32", "float64"):  # (a select vectorizes; gcc 12's (float)_Bool does not)
            return self._select(x, render_const(1, dst), render_const(0, dst), dst)
        return f"({compute_type(dst)})({x})"

    def _float_to_wide_unsigned(self, x: str, src: DType, dst: DType) -> str:
        """A real float to uint32 or uint64 as numpy converts it on x86, where C leaves values out
        of range undefined: through a signed 64-bit integer, in which nan and values out of range
        are INT64_MIN; to uint32, then truncated to 32 bits (-1.5 -> 4294967295, 1e20 -> 0, as
        numpy's scalar loop; its SIMD loop, which long arrays take, gives 2147483648 for nan and
        values below -2**63: numpy itself is not consistent there); to uint64, values from 2**63
        up go through ``x - 2**63`` (-3.0 -> 2**64 - 3, 1e20 -> 0, nan -> 2**63)."""
        t = compute_type(src)
        two63 = "9223372036854775808.0" + ("f" if t == "float" else "")
        fn = f"cv_{t}_to_i64"
        self.helpers.setdefault(fn, f"static inline long long {fn}({t} x) {{ return (x >= -{two63} && x < {two63}) ? "
                                    f"(long long)x : (long long)0x8000000000000000UL; }}\n")
        if dst.name == "uint32":
            return f"(uint32_t){fn}({x})"
        return f"(({x}) >= {two63} ? ((uint64_t){fn}(({x}) - {two63}) ^ 0x8000000000000000UL) : (uint64_t){fn}({x}))"

    def _bitcast(self, u: U) -> str:
        s, d = u.src[0].dtype, u.dtype
        fn = f"cv_bitcast_{s.name}_{d.name}"
        if fn not in self.helpers:
            st, dtt = _STORAGE[s.name], _STORAGE[d.name]
            to_store, out = self._to_storage("x", s), self._from_storage("r", d)
            self.helpers[fn] = (f"static inline {compute_type(d)} {fn}({compute_type(s)} x) {{ {st} a = {to_store}; "
                                f"{dtt} r; memcpy(&r, &a, sizeof r); return {out}; }}\n")
        return f"{fn}({self._ref(u.src[0])})"

    def _minmax(self, op: str, a: str, b: str, dt: DType) -> str:
        cmp = ">=" if op == "max" else "<="
        if dt.is_float:  # numpy semantics: nan propagates
            return self._select(f"({a} {cmp} {b}) | ({a} != {a})", a, b, dt)
        return self._select(f"{a} {cmp} {b}", a, b, dt)

    def _alu(self, op: Op, a: list[str], src: list[DType], dt: DType) -> str:
        t = compute_type(src[0]) if src else compute_type(dt)
        in_dt = src[-1] if op is Op.WHERE else src[0]
        if op is Op.WHERE:
            return self._select(a[0], a[1], a[2], dt)
        if in_dt.kind == "c" or dt.kind == "c":
            return self._complex_alu(op, a, in_dt, dt)
        if op in (Op.ADD, Op.SUB, Op.MUL, Op.NEG) and in_dt.is_int and not in_dt.is_unsigned and in_dt.itemsize >= 4:
            # signed overflow wraps (as numpy's does) through unsigned arithmetic; the kernels are
            # built without -fwrapv so that index arithmetic stays affine and vectorizes
            u = f"u{t}"
            if op is Op.NEG:
                return f"({t})(0 - ({u}){a[0]})"
            return f"({t})(({u}){a[0]} {_INFIX[op]} ({u}){a[1]})"
        if op in _INFIX:
            return f"{a[0]} {_INFIX[op]} {a[1]}"
        if op is Op.NEG:
            return f"-{a[0]}"
        if op is Op.RECIP:
            return f"1 / {a[0]}"
        if op in (Op.MAX, Op.MIN):
            return self._minmax("max" if op is Op.MAX else "min", a[0], a[1], in_dt)
        if in_dt.is_float:
            if op in (Op.IDIV, Op.MOD):
                self.helpers.setdefault(f"fh_{t}", _float_helpers(t, "f" if t == "float" else ""))
                return f"cv_{'fdiv' if op is Op.IDIV else 'fmod'}_{t}({a[0]}, {a[1]})"
            name = _MATH[op] + ("f" if t == "float" else "")
            self.math_used.add((_MATH[op], t))
            if op is Op.EXP and t in _EXP_UNDERFLOW:
                return f"{self._exp_helper(t, name)}({a[0]})"
            return f"{name}({', '.join(a)})"
        # integers and bools
        if op is Op.ABS:
            return self._select(f"{a[0]} < 0", f"({t})(0 - (u{t}){a[0]})", a[0], in_dt) if not in_dt.is_unsigned else a[0]
        fn = {Op.IDIV: "idiv", Op.MOD: "imod", Op.SHL: "shl", Op.SHR: "shr", Op.POW: "ipow"}.get(op)
        if fn is None:
            raise NotImplementedError(f"C renderer: {op.name} on {in_dt.name}")
        self.helpers.setdefault(f"ih_{t}", _int_helpers(t, in_dt.is_unsigned, in_dt.itemsize * 8))
        return f"cv_{fn}_{t}({a[0]}, {a[1]})"

    def _exp_helper(self, t: str, name: str) -> str:
        """``exp`` that keeps to the fast path of libmvec's vector ``exp``: an argument whose result
        is subnormal or 0 (a masked softmax's -inf, any x < -87.3 in float32) makes the vector
        routine redo the whole vector in scalar code, 10-18x slower. Such an argument gets an
        exact constant ``c`` added (clamped, -inf included) and the result is multiplied by
        ``exp(-c)``: the same zeros and subnormals, rounded once, with no special case."""
        helper = f"cv_exp_{t}"
        if helper not in self.helpers:
            lo, shift, floor, scale = _EXP_UNDERFLOW[t]
            sel = self._select("c", "a", "b", _F32 if t == "float" else _F64).split("(")[0]
            f = "f" if t == "float" else ""
            self.helpers[helper] = (
                f"static inline {t} {helper}({t} x) {{ int low = x < {lo}{f}; "
                f"{t} y = x + {shift}{f}; y = {sel}(y < {floor}{f}, {floor}{f}, y); "
                f"{t} r = {name}({sel}(low, y, x)); return {sel}(low, r * {scale}{f}, r); }}\n")
        return helper

    def _complex_helper(self, dt: DType, fn: str) -> str:
        r = compute_type(dt.real_dtype)
        self.helpers.setdefault(f"ch_{r}", _complex_helpers(compute_type(dt), r, self.fma))
        return f"cv_{fn}_{r}"

    def _complex_alu(self, op: Op, a: list[str], in_dt: DType, dt: DType) -> str:
        """Complex arithmetic on C99 ``_Complex`` values (parts through GCC's ``__real__``/``__imag__``)."""
        if op is Op.COMPLEX:
            return f"__builtin_complex({a[0]}, {a[1]})"
        sfx = "f" if in_dt is not None and in_dt.itemsize == 8 else ""
        if op in (Op.ADD, Op.SUB, Op.CMPEQ, Op.CMPNE):
            return f"{a[0]} {_INFIX[op]} {a[1]}"
        if op is Op.NEG:
            return f"-{a[0]}"
        if op is Op.MUL:
            return f"{self._complex_helper(in_dt, 'cmul')}({a[0]}, {a[1]})"
        if op in (Op.DIV, Op.RECIP):
            num, den = (a[0], a[1]) if op is Op.DIV else (render_const(1, in_dt), a[0])
            return f"{self._complex_helper(in_dt, 'cdiv')}({num}, {den})"
        if op is Op.REAL:
            return f"__real__ ({a[0]})"
        if op is Op.IMAG:
            return f"__imag__ ({a[0]})"
        if op is Op.CONJ:
            return f"__builtin_conj{sfx}({a[0]})"
        if op in (Op.TANH, Op.TAN):
            r, t = compute_type(in_dt.real_dtype), compute_type(in_dt)
            self.complex_math["ctanh" + sfx] = f"{t} ctanh{sfx}({t});"
            self.helpers.setdefault(f"cth_{r}", _complex_tanh_helpers(t, r))
            return f"cv_c{'tanh' if op is Op.TANH else 'tan'}_{r}({a[0]})"
        if op in _COMPLEX_MATH:
            name, t = _COMPLEX_MATH[op] + sfx, compute_type(in_dt)
            ret = compute_type(dt)
            self.complex_math[name] = f"{ret} {name}({', '.join([t] * len(a))});"
            return f"{name}({', '.join(a)})"
        raise NotImplementedError(f"C renderer: {op.name} on {in_dt.name}")

    def _math_decls(self) -> list[str]:
        out = list(self.complex_math.values())
        for base, t in sorted(self.math_used):
            name = base + ("f" if t == "float" else "")
            args = f"{t}, {t}" if base in _BINARY_MATH else t
            simd = self.libmvec and _libmvec_has(base)
            attr = '__attribute__((simd("notinbranch"))) ' if simd else ""
            out.append(f"{attr}{t} {name}({args});")
        needs_fmod = any(k.startswith("fh_") for k in self.helpers)
        if needs_fmod:
            for t, sfx in (("float", "f"), ("double", "")):
                out.append(f"{t} fmod{sfx}({t}, {t}); {t} copysign{sfx}({t}, {t}); {t} floor{sfx}({t});")
        return out



def _magnitude(x: Sym) -> int:
    """The largest absolute value ``x`` or any part of it can take while it is computed (each
    term and partial sum of a linear form included), from the variables' bounds."""
    m = max(abs(x.vmin), abs(x.vmax))
    if isinstance(x, Lin):
        m = max(m, sum(abs(c) * _magnitude(a) for a, c in x.terms.items()) + abs(x.const))
    return max([m] + [_magnitude(c) for c in x._children()])


_SET_TYPES = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t", 16: "cv_bits128"}


def _scatter_combine(reduce: str, dtype: DType, t: str) -> str:
    """The C statement that combines ``v`` into the target ``d[0]`` for one SCATTER reduce."""
    if reduce == "set":
        return "d[0] = v;"
    if reduce in ("max", "min"):  # nan in either operand wins, as numpy's maximum/minimum
        keep = ">=" if reduce == "max" else "<="
        return f"d[0] = (d[0] != d[0] || d[0] {keep} v) ? d[0] : v;"
    if dtype.is_bool:  # or / and: a sum of trues is true, and its byte stays 1
        return f"d[0] = d[0] {'|' if reduce == 'sum' else '&'} v;"
    op = "+" if reduce == "sum" else "*"
    if dtype.is_int and dtype.name != "bool":  # unsigned arithmetic: wraps like numpy, no undefined behaviour
        return f"d[0] = ({t})((uint64_t)d[0] {op} (uint64_t)v);"
    if dtype.is_complex and reduce == "prod":  # the plain formula, written out (see render_scatter)
        return f"d[0] = cv_cmulplain_{'float' if dtype.name == 'complex64' else 'double'}(d[0], v);"
    return f"d[0] = d[0] {op} v;"


def scatter_fill(value: float, dtype: DType, reduce: str, t: str) -> str:
    """The literal a filled SCATTER writes into every target (see :func:`render_scatter`): its bits
    as the unsigned type ``t`` for ``"set"`` (which moves bits), else the value."""
    if reduce != "set":
        return render_const(value, dtype)
    bits = int(np.array(value, dtype.np).view(f"u{dtype.itemsize}").item())
    return f"(({t}){bits}ULL)"


def render_scatter(name: str, reduce: str, dtype: DType, O: int, n: int, m: int, inner: int, idx_inner: int,
                   openmp: bool, filled: float | None = None) -> str:
    """C for SCATTER (see graph/node.py): copy x, then combine each src element into its target by
    ``reduce`` (``"sum"``, ``"prod"``, ``"max"``, ``"min"``, or ``"set"``, which copies the bits, so
    it serves every dtype). Work is split across threads by ``o`` (or, with one ``o``, by blocks of
    ``r``), so no two threads touch one target and duplicates combine in index order (the last
    ``"set"`` wins), without atomics. ``filled``: there is no ``x``; every target is this literal
    before the updates (a scatter into zeros)."""
    t = _SET_TYPES[dtype.itemsize] if reduce == "set" else _STORAGE[dtype.name]
    par = "#pragma omp parallel for schedule(static)" if openmp else ""
    idx = "idx[o * m + i]" if idx_inner == 1 else "idx[(o * m + i) * I + r]"
    body = f"""      long long t = {idx};
      if (t < 0 || t >= n) continue;  /* out of range: dropped */
      {t}* d = out + (o * n + t) * I + r;
      {t} v = src[(o * m + i) * I + r];
      {_scatter_combine(reduce, dtype, t)}"""
    if O > 1 or inner < 64:
        loops = f"""  {par}
  for (long long o = 0; o < O; o++)
    for (long long i = 0; i < m; i++)
      for (long long r = 0; r < I; r++) {{
{body}
      }}"""
    else:  # one o: threads take blocks of columns r
        loops = f"""  {par}
  for (long long rb = 0; rb < I; rb += 64) {{
    const long long o = 0, re = rb + 64 < I ? rb + 64 : I;
    for (long long i = 0; i < m; i++)
      for (long long r = rb; r < re; r++) {{
{body}
      }}
  }}"""
    # a complex product multiplies by the plain formula, as numpy's multiply.at and the GPU
    # renderers' scatter (gpu.py: scatter_combine) do, written out: C's own operator is the
    # compiler's, and gcc 12 for an Intel AVX-512 core (-march=rocketlake) fuses it into a
    # vfmaddsub even under -ffp-contract=off, so complex128 products differed in the last bits
    helpers = _complex_helpers(_STORAGE[dtype.name], "float" if dtype.name == "complex64" else "double", has_fma()) \
        if dtype.is_complex and reduce == "prod" else ""
    return _F16_TYPEDEF + f"""#include <stdint.h>
typedef struct {{ uint64_t lo, hi; }} cv_bits128;
{helpers}void {name}({t}* restrict out, {"" if filled is not None else f"const {t}* restrict x, "}const int64_t* restrict idx, const {t}* restrict src) {{
  const long long O = {O}, n = {n}, m = {m}, I = {inner};
  {par}
  for (long long e = 0; e < O * n * I; e++) out[e] = {"x[e]" if filled is None else scatter_fill(filled, dtype, reduce, t)};
{loops}
}}
"""

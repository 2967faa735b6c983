"""Render a linearized kernel as a WGSL compute shader (the ``WEBGPU`` backend, :mod:`corvid.runtime.webgpu`).

WGSL is too far from C to reuse the C renderer's text (``let``/``var`` declarations, no implicit
conversions, no ternary, ``select(f, t, c)``, bool results of comparisons, 32-bit types only), so
:class:`WGSLRenderer` walks the statement tree of :func:`corvid.codegen.linearize.linearize`
itself. What it shares with the OpenCL renderer is the mapping onto a grid:

* **The grid is one flat id over the output elements.** Every output loop (any number of them)
  is recovered from the invocation's id by division and modulo, so there is no limit of 3 grid
  dimensions, and the runtime spreads the workgroups over two dispatch dimensions when there are
  more than a dimension holds (65535). Values ``linearize`` hoisted above an output loop are
  computed by every invocation; reduce loops run as ordinary loops inside one invocation.
* **Storage is 32-bit words.** WGSL storage buffers hold ``f32``, ``i32`` and ``u32`` arrays
  only. Narrower dtypes (bool, int8/16, uint8/16, float16, bfloat16, float8_e4m3fn, float8_e5m2)
  are packed into ``u32`` words, their bytes in numpy's layout, and read with ``extractBits``. An output narrower than 4
  bytes is written a whole word at a time: each invocation computes the 4 (or 2) consecutive
  elements of one word and stores the word, so no two invocations write the same word (there is
  no read-modify-write race, and no atomics are needed). 64-bit elements are two words.
* **Arithmetic follows numpy, not WGSL's defaults** (see :mod:`corvid.render.wgsl_lib`): narrow
  integers are computed in 32 bits and wrapped to their width after each op, as the C backend
  does; int64 and uint64 are emulated on word pairs; float16, bfloat16 and the 8-bit floats are
  computed in f32 and rounded to nearest even after every op (as the C renderer does,
  :func:`corvid.render.c.narrow_rounded`).

What WGSL cannot express raises at render time, which is when a tensor is realized:
complex64 is ``vec2<f32>`` (real, imaginary), computed by wgsl_lib's helpers (numpy's quotient;
its product through WGSL's ``fma``, which a driver may round twice: within an ulp of numpy's).
:class:`TypeError` for dtypes WGSL has no arithmetic for (float64 beyond loads, copies and casts
to float32; complex128, whose parts are float64), :class:`NotImplementedError` for ops not written yet (erf, erfc, lgamma)
and for kernels that bind more buffers than the device allows.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from ..codegen.ir import Kernel, Loop, U
from ..codegen.linearize import AccInit, AccUpdate, Def, For, StoreStmt, linearize, placement
from ..dtype import DType, iinfo, reduce_identity
from ..dtype import int32 as _I32
from ..graph.node import Op
from ..graph.symbolic import And, Cmp, FloorDiv, Lin, Mod, Num, Sym, Var
from .c import FLOAT8 as _FLOAT8
from .c import _magnitude, narrow_rounded
from .gpu import SCATTER_ITEMS, scatter_ranges
from .wgsl_lib import HELPERS, with_deps

WORKGROUP_SIZE = 64
_ARRAY_OF = {"float32": "f32", "int32": "i32", "uint32": "u32"}  # every other dtype: u32 words
_FLOATS_IN_F32 = ("float8_e4m3fn", "float8_e5m2", "float16", "bfloat16", "float32")
# float ops with a WGSL built-in that is accurate and defined for every input (lavapipe checked)
_NATIVE_MATH = {Op.EXP2: "exp2", Op.FLOOR: "floor",
                Op.CEIL: "ceil", Op.ROUND: "round", Op.TRUNC: "trunc", Op.ABS: "abs"}
# float ops computed by a helper of wgsl_lib (WGSL leaves their domain or accuracy open)
_HELPER_MATH = {Op.SIN: "cv_sin", Op.COS: "cv_cos", Op.TAN: "cv_tan", Op.SQRT: "cv_sqrt", Op.EXP: "cv_exp", Op.LOG: "cv_log", Op.LOG2: "cv_log2",
                Op.LOG1P: "cv_log1p", Op.EXPM1: "cv_expm1", Op.ASIN: "cv_asin", Op.ACOS: "cv_acos",
                Op.ATAN: "cv_atan", Op.SINH: "cv_sinh", Op.COSH: "cv_cosh", Op.TANH: "cv_tanh",
                Op.ASINH: "cv_asinh", Op.ACOSH: "cv_acosh", Op.ATANH: "cv_atanh", Op.POW: "cv_pow",
                Op.ATAN2: "cv_atan2", Op.MAX: "cv_max_f32", Op.MIN: "cv_min_f32",
                Op.IDIV: "cv_fdiv_floor", Op.MOD: "cv_fmod_floor"}
_INFIX = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.DIV: "/", Op.CMPLT: "<", Op.CMPEQ: "==", Op.CMPNE: "!=",
          Op.AND: "&", Op.OR: "|", Op.XOR: "^"}
_REDUCE_OP = {"sum": Op.ADD, "prod": Op.MUL, "max": Op.MAX, "min": Op.MIN}


def _kind(dt: DType) -> str:
    """How a value of ``dt`` is held while computed: ``bool``, ``i32``/``u32`` (integers of at
    most 32 bits, wrapped to their width), ``f32`` (float32 and the narrower floats), ``i64``/``u64``
    (word pairs), ``f64`` (the two words of a float64, only loaded, stored or cast)."""
    if dt.is_bool:
        return "bool"
    if dt.is_float:
        return "f64" if dt.itemsize == 8 else "f32"
    if dt.is_int:
        return ("u" if dt.is_unsigned else "i") + ("64" if dt.itemsize == 8 else "32")
    return "c64" if dt.itemsize == 8 else "complex"  # (complex64: vec2<f32>; complex128 has float64 parts)


def elements_per_invocation(k: Kernel) -> int:
    """Output elements one invocation computes: those of one 32-bit word for outputs narrower
    than 4 bytes (so that one invocation writes each word), else 1; a kernel of several outputs
    goes by its narrowest."""
    return max(1, 4 // min(p.dtype.itemsize for p in k.params if p.output))


def grid_loops(k: Kernel) -> list[Loop]:
    """The output loops that the invocation id stands for: all of them, except those a reduce is
    hoisted out of (a softmax's columns, whose row max and sum each column reads), which stay
    loops inside the invocation so that it computes the reduce once for all of them, not once
    per element (packed outputs keep every loop in the grid: an invocation writes one word)."""
    if elements_per_invocation(k) > 1:
        return list(k.loops)
    values, place = placement(k)
    shallowest = min((len(place[id(u)]) for u in values if u.op == "reduce"), default=len(k.loops))
    return list(k.loops[:shallowest])


def _loop_trips(stmts: list, grid: set, mult: int = 1) -> int:
    """Loop iterations one invocation runs (the grid loops are its id, not loops)."""
    total = 0
    for s in stmts:
        if isinstance(s, For):
            inner = mult if s.loop.var in grid else mult * s.loop.size
            total += (0 if s.loop.var in grid else inner) + _loop_trips(s.body, grid, inner)
    return total


def invocations(k: Kernel) -> int:
    """How many invocations the shader of ``k`` needs (the runtime launches at least these)."""
    return -(-math.prod(lp.size for lp in grid_loops(k)) // elements_per_invocation(k))


def unsupported_dtype_error(dt: DType) -> TypeError:
    """The error for a dtype WGSL has no arithmetic for (float64, and complex128, whose parts are float64)."""
    if dt.is_complex:
        why = "its parts are float64, and WGSL has no 64-bit floats (complex128 tensors can be stored there and copied)"
    else:
        why = "WGSL has no 64-bit floats (float64 tensors can be stored there, copied and cast to float32)"
    instead = "complex64, or another device ('CPU', 'CL')" if dt.is_complex else "float32, or another device ('CPU', 'CL')"
    return TypeError(f"WEBGPU has no {dt.name}: {why}; use {instead}")


class WGSLRenderer:
    """Kernel IR → WGSL. ``max_buffers``: the device's storage buffers per shader stage (a
    kernel with more parameters raises NotImplementedError). ``loop_limit``: loop iterations
    after which the driver silently leaves loops (lavapipe: 65535 per invocation, counted over
    all its loops); a kernel whose invocations would run more raises NotImplementedError."""

    def __init__(self, max_buffers: int = 8, loop_limit: int | None = None):
        self.max_buffers, self.loop_limit = max_buffers, loop_limit

    def render(self, k: Kernel) -> str:
        """The source of kernel ``k``, rendered on a copy of this renderer (thread-safe, as
        :meth:`corvid.render.c.CRenderer.render`)."""
        return copy.copy(self)._render(k)

    def _render(self, k: Kernel) -> str:
        self._check(k)
        self.k, self.lines, self.names, self.used = k, [], {}, set()
        self.rounded = narrow_rounded(k)
        self.per = elements_per_invocation(k)
        grid = grid_loops(k)
        total, n = math.prod(lp.size for lp in grid), invocations(k)
        self.strides = {lp.var: math.prod(x.size for x in grid[i + 1:]) for i, lp in enumerate(grid)}
        self.outermost = grid[0].var if grid else None
        self.lines.append(f"  let gid = (wg.y * nwg.x + wg.x) * {WORKGROUP_SIZE}u + lid;")
        self.lines.append(f"  if (gid >= {n}u) {{ return; }}")
        # float zeros are read from the dispatch size (z is always 1), not written as literals:
        # Mesa folds x * 0.0 to 0.0 (wrong for inf and nan) but cannot fold what it cannot see
        self.lines.append("  let cv_zero = f32(nwg.z - 1u);")
        self.lines.append("  cv_one = f32(nwg.z);")
        stmts = linearize(k)
        if self.loop_limit is not None and _loop_trips(stmts, set(self.strides)) * self.per > self.loop_limit:
            raise NotImplementedError(
                f"WEBGPU: kernel {k.name} runs {_loop_trips(stmts, set(self.strides)) * self.per} loop iterations per "
                f"invocation, but this driver ({self.loop_limit}-iteration loop limit: lavapipe) would silently stop "
                "its loops early; use another device for it (a reduce over fewer elements at a time fits)")
        if self.per == 1:
            self.lines.append("  let cv_flat = i32(gid);")
            self._emit(stmts, 1)
        else:
            self.lines.append("  var cv_word = 0u;")
            self.lines.append(f"  for (var cv_sub = 0u; cv_sub < {self.per}u; cv_sub++) {{")
            self.lines.append(f"    let cv_flat = i32(gid * {self.per}u + cv_sub);")
            self.lines.append(f"    if (cv_flat >= {total}) {{ break; }}")
            self._emit(stmts, 2)
            self.lines.append("  }")
            self.lines.append("  p0[gid] = cv_word;")
        decls = [f"@group(0) @binding({i}) var<storage, {'read_write' if p.output else 'read'}> "
                 f"p{i}: array<{_ARRAY_OF.get(p.dtype.name, 'u32')}>;" for i, p in enumerate(k.params)]
        helpers = [HELPERS[name][0] for name in with_deps(self.used)]
        entry = (f"@compute @workgroup_size({WORKGROUP_SIZE})\nfn {k.name}(@builtin(workgroup_id) wg: vec3<u32>, "
                 "@builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {")
        # cv_one: an opaque 1.0 for the helpers (see wgsl_lib: it keeps Mesa from rewriting (1 + x) - 1 as x)
        decls.append("var<private> cv_one: f32;")
        return "\n".join([*decls, "", *helpers, "", entry, *self.lines, "}", ""])

    def render_scatter(self, name: str, reduce: str, dtype: DType, O: int, n: int, m: int, inner: int,
                       idx_inner: int) -> str:
        """WGSL for SCATTER (see corvid/render/c.py: render_scatter). The runtime copies ``x`` into
        the output first (a buffer copy, :class:`corvid.runtime.webgpu.WebGPUScatterProgram`);
        then one invocation per output column ``(o, r)`` and range of its rows
        (:meth:`scatter_ranges`: ``O * inner * R`` invocations) combines the
        updates into it in index order (a dispatch per chunk of :meth:`scatter_chunk` updates where
        the driver limits loops). An invocation owns every element it touches, so the
        result is deterministic and the same as the CPU's (the last ``"set"`` wins; float sums
        in index order), with no races. Elements narrower than a word share words with other
        columns' elements: the output is then an array of atomic words, written with
        ``atomicAnd``/``atomicOr`` on the element's own bits only (exact, and still
        deterministic). Out-of-range indices are dropped. ``"set"`` copies bits, so it serves
        every dtype; the others compute as numpy does (integers wrap, nan wins for max/min) in
        bool, the integers, float16, float32 and complex64 (sum, prod); TypeError for float64 and
        complex128 arithmetic, which WGSL has not (no 64-bit floats)."""
        size = dtype.itemsize
        if reduce != "set":
            if dtype.name in ("complex128", "float64"):
                raise unsupported_dtype_error(dtype)
            if dtype.name in ("bfloat16",) or dtype.name in _FLOAT8:
                raise NotImplementedError(f"WGSL scatter: {reduce} on {dtype.name} (scatter_prim computes it in float32)")
        words = max(1, size // 4)
        if max(O * n, O * m) * inner * words >= 1 << 31:
            raise NotImplementedError(f"WEBGPU: scatter {name} indexes more than 2**31 words")
        used: set[str] = set()
        k = "(o * m + i)" if idx_inner == 1 else "((o * m + i) * I + r)"
        R = self.scatter_ranges(O, n, m, inner)
        lines = [f"  let w = (wg.y * nwg.x + wg.x) * {WORKGROUP_SIZE}u + lid;",
                 f"  let O = {O}u; let n = {n}u; let m = {m}u; let I = {inner}u; let R = {R}u; let c = {-(-n // R)}u;",
                 "  if (w >= O * R * I) { return; }",
                 "  let o = w / (R * I); let r = w % I; let lo = (w / I) % R * c; let hi = min(n, lo + c);",
                 # (a dispatch per chunk of updates, each from its cv_first: see scatter_chunk)
                 f"  for (var i = cv_first; i < min(m, cv_first + {self.scatter_chunk(m)}u); i++) {{",
                 f"    let k = {k};",
                 "    let t = p2[2u * k]; ",
                 "    if (p2[2u * k + 1u] != 0u || t < lo || t >= hi) { continue; }  // another invocation's rows, or out of range (dropped)",
                 "    let e = (o * n + t) * I + r;",
                 "    let s = (o * m + i) * I + r;"]
        if size < 4:
            bits, per = 8 * size, 4 // size
            lines += [f"    let wd = e / {per}u; let sh = (e % {per}u) * {bits}u;",
                      f"    let d = extractBits(atomicLoad(&p0[wd]), sh, {bits}u);",
                      f"    let v = extractBits(p3[s / {per}u], (s % {per}u) * {bits}u, {bits}u);",
                      f"    let nv = {self._scatter_value(reduce, dtype, used)};",
                      f"    atomicAnd(&p0[wd], ~(0x{(1 << bits) - 1:x}u << sh));",
                      f"    atomicOr(&p0[wd], (nv & 0x{(1 << bits) - 1:x}u) << sh);"]
        elif size == 4:
            lines += ["    let d = p0[e];", "    let v = p3[s];",
                      f"    p0[e] = {self._scatter_value(reduce, dtype, used)};"]
        else:
            if reduce == "set":
                lines += [f"    for (var q = 0u; q < {words}u; q++) {{ p0[{words}u * e + q] = p3[{words}u * s + q]; }}"]
            else:  # int64, uint64, complex64: word pairs
                lines += ["    let d = vec2<u32>(p0[2u * e], p0[2u * e + 1u]);",
                          "    let v = vec2<u32>(p3[2u * s], p3[2u * s + 1u]);",
                          f"    let nv = {self._scatter_value(reduce, dtype, used)};",
                          "    p0[2u * e] = nv.x; p0[2u * e + 1u] = nv.y;"]
        lines.append("  }")
        out_t = "array<atomic<u32>>" if size < 4 else "array<u32>"
        decls = ["override cv_first: u32 = 0u;  // the first update this dispatch combines",
                 f"@group(0) @binding(0) var<storage, read_write> p0: {out_t};",
                 "// (binding 1, x, is copied into p0 before this shader runs)",
                 "@group(0) @binding(2) var<storage, read> p2: array<u32>;",
                 "@group(0) @binding(3) var<storage, read> p3: array<u32>;"]
        helpers = [HELPERS[h][0] for h in with_deps(used)]
        entry = (f"@compute @workgroup_size({WORKGROUP_SIZE})\nfn {name}(@builtin(workgroup_id) wg: vec3<u32>, "
                 "@builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {")
        return "\n".join([*decls, "", *helpers, "", entry, *lines, "}", ""])

    scatter_items = SCATTER_ITEMS  # the invocations a scatter aims at (corvid/render/gpu.py: scatter_ranges)

    def scatter_ranges(self, O: int, n: int, m: int, inner: int) -> int:
        """Ranges of rows a SCATTER shader splits its columns into, one invocation each (:func:`scatter_ranges`)."""
        return scatter_ranges(O, n, m, inner, self.scatter_items)

    def scatter_work_items(self, O: int, n: int, m: int, inner: int) -> int:
        """The invocations a SCATTER shader of this shape runs (one per column and range)."""
        return O * inner * self.scatter_ranges(O, n, m, inner)

    def scatter_chunk(self, m: int) -> int:
        """Updates one dispatch of a SCATTER kernel combines (each invocation loops over them):
        all ``m``, or the driver's loop limit (lavapipe leaves loops silently past 65535
        iterations per invocation), so that the runtime dispatches the shader once per chunk, in
        order, with ``cv_first`` set to the chunk's first update."""
        return m if self.loop_limit is None else max(1, min(m, self.loop_limit))

    @staticmethod
    def _scatter_value(reduce: str, dtype: DType, used: set[str]) -> str:
        """The WGSL expression of the combined value of ``d`` and ``v`` (the target's and the
        update's bits: ``u32`` of the element's width, or ``vec2<u32>`` for 64-bit integers)."""
        if reduce == "set":
            return "v"
        kind, size = _kind(dtype), dtype.itemsize
        if kind == "c64":  # a sum, or numpy's product by the plain formula (as the CPU's scatter)
            if reduce == "prod":
                used.add("cv_cmul_plain")
                return "bitcast<vec2<u32>>(cv_cmul_plain(bitcast<vec2<f32>>(d), bitcast<vec2<f32>>(v)))"
            return "bitcast<vec2<u32>>(bitcast<vec2<f32>>(d) + bitcast<vec2<f32>>(v))"
        if kind in ("i64", "u64"):
            if reduce in ("sum", "prod"):
                used.add("cv_add64" if reduce == "sum" else "cv_mul64")
                return f"{'cv_add64' if reduce == 'sum' else 'cv_mul64'}(d, v)"
            lt = "cv_lt_i64" if kind == "i64" else "cv_lt_u64"
            used.add(lt)
            return f"select(v, d, !{lt}({'d, v' if reduce == 'max' else 'v, d'}))"  # d >= v (max), d <= v (min)
        if dtype.is_bool:  # sum and max: or; prod and min: and
            return f"d {'|' if reduce in ('sum', 'max') else '&'} v"
        if dtype.is_int:  # the bits of a wrapping sum or product are those of unsigned arithmetic
            if reduce in ("sum", "prod"):
                return f"d {'+' if reduce == 'sum' else '*'} v"
            bits = 8 * size
            a, b = ("d", "v") if dtype.is_unsigned else \
                (f"(bitcast<i32>(d << {32 - bits}u) >> {32 - bits}u)", f"(bitcast<i32>(v << {32 - bits}u) >> {32 - bits}u)")
            if bits == 32 and not dtype.is_unsigned:
                a, b = "bitcast<i32>(d)", "bitcast<i32>(v)"
            return f"select(v, d, {a} {'>=' if reduce == 'max' else '<='} {b})"
        # float32, float16: computed in f32 (float16 rounded to nearest even once, as on the CPU)
        if dtype.name == "float16":
            used.update(("cv_f16_f32", "cv_f32_f16"))
            a, b = "cv_f16_f32(d)", "cv_f16_f32(v)"
        else:
            a, b = "bitcast<f32>(d)", "bitcast<f32>(v)"
        if reduce in ("max", "min"):  # nan in either wins (the kept value's bits, as the CPU copies them)
            used.add("cv_isnan")
            keep = f"cv_isnan({a}) || (!cv_isnan({b}) && {a} {'>=' if reduce == 'max' else '<='} {b})"
            return f"select(v, d, {keep})"
        value = f"({a} {'+' if reduce == 'sum' else '*'} {b})"
        return f"cv_f32_f16{value}" if dtype.name == "float16" else f"bitcast<u32>{value}"

    def _check(self, k: Kernel) -> None:
        """Raise for what this renderer cannot compute exactly (see the module docstring)."""
        if k.vector_width > 1:
            raise NotImplementedError("WGSL renderer: vectorized kernels (the WEBGPU device applies no "
                                      "optimization actions; was the kernel optimized for the CPU?)")
        if len(k.params) > self.max_buffers:
            raise NotImplementedError(
                f"kernel {k.name} reads {len(k.params) - 1} buffers and writes 1, but this WebGPU device binds at "
                f"most {self.max_buffers} storage buffers per shader; realize part of the expression first "
                "(.realize()) or use another device")
        for p in k.params:
            if _kind(p.dtype) == "complex":
                raise unsupported_dtype_error(p.dtype)
        for u in k.values():
            if _kind(u.dtype) == "complex" or (_kind(u.dtype) == "f64" and u.op != "load"):
                raise unsupported_dtype_error(u.dtype)
            for s in u.src:
                if _kind(s.dtype) == "f64" and not (u.op == "cast" and u.dtype.name in _FLOATS_IN_F32):
                    raise unsupported_dtype_error(s.dtype)
            if u.op == "alu" and u.arg in (Op.ERF, Op.ERFC, Op.LGAMMA):
                raise NotImplementedError(f"WEBGPU: {u.arg.name.lower()} is not implemented yet (WGSL has no "
                                          "built-in for it); compute it on another device")
        for st in k.stores:
            if _kind(st.value.dtype) == "f64" and k.params[st.param].dtype.name != "float64":
                raise unsupported_dtype_error(st.value.dtype)
        syms = [x for u in k.values() for x in u.syms()] + [st.index for st in k.stores]
        if any(lp.size >= 1 << 31 for lp in k.loops + k.reduce_loops()) or \
                any(p.size >= 1 << 31 for p in k.params) or any(_magnitude(x) >= 1 << 31 for x in syms):
            raise NotImplementedError(f"WEBGPU: kernel {k.name} needs indices beyond 32 bits")
        if elements_per_invocation(k) > 1:
            flat: Sym = Num(0)
            for i, lp in enumerate(k.loops):
                flat = flat + lp.var * math.prod(x.size for x in k.loops[i + 1:])
            row_major = len({st.param for st in k.stores}) == len(k.stores) and all(
                st.index == flat and st.gate in (None, Num(1)) and math.prod(lp.size for lp in k.loops) ==
                k.params[st.param].size for st in k.stores)
            if not row_major:
                narrow = min((p for p in k.params if p.output), key=lambda p: p.dtype.itemsize)
                raise NotImplementedError(f"WEBGPU: kernel {k.name} writes {narrow.dtype.name} elements out "
                                          "of order, which packed 32-bit words cannot take")

    # statements ------------------------------------------------------------------------------------
    def _emit(self, stmts: list, depth: int) -> None:
        pad = "  " * depth
        for s in stmts:
            if isinstance(s, For) and not s.reduce and s.loop.var in self.strides:
                v, stride = s.loop.var, self.strides[s.loop.var]
                x = "cv_flat" if stride == 1 else f"(cv_flat / {stride})"
                self.lines.append(f"{pad}let {v.name} = {x if v == self.outermost else f'{x} % {s.loop.size}'};")
                self._emit(s.body, depth)
            elif isinstance(s, For):
                v = s.loop.var.name
                self.lines.append(f"{pad}for (var {v} = 0; {v} < {s.loop.size}; {v}++) {{")
                self._emit(s.body, depth + 1)
                self.lines.append(f"{pad}}}")
            elif isinstance(s, Def):
                self.lines.append(f"{pad}let {self._name(s.u)} = {self._rounded(s.u, self._expr(s.u))};")
            elif isinstance(s, AccInit):
                init = self._const(reduce_identity(s.u.dtype, s.u.arg[0]), s.u.dtype)
                self.lines.append(f"{pad}var {self._name(s.u)} = {init};")
            elif isinstance(s, AccUpdate):
                acc, dt = self._name(s.u), s.u.dtype
                op = _REDUCE_OP[s.u.arg[0]]
                self.lines.append(f"{pad}{acc} = {self._alu(op, [acc, self._ref(s.u.src[0])], [dt, dt], dt)};")
            elif isinstance(s, StoreStmt):
                self._emit_store(s, pad)
            # (AccFinal needs nothing: max and min carry nan in the accumulator itself)

    def _emit_store(self, s: StoreStmt, pad: str) -> None:
        st, dt = s.store, self.k.params[s.store.param].dtype
        value = self._ref(st.value)
        if self.per > 1:  # (checked: the store index is the flat element index)
            bits = self._to_bits(value, dt)
            self.lines.append(f"{pad}cv_word = cv_word | ({bits} << (cv_sub * {8 * dt.itemsize}u));")
            return
        if st.gate == Num(0):
            return
        idx = self._idx(st.index)
        if dt.itemsize == 8:
            if _kind(dt) == "c64":
                value = f"bitcast<vec2<u32>>({value})"
            line = f"p{st.param}[2 * {idx}] = {value}.x; p{st.param}[2 * {idx} + 1] = {value}.y;"
        else:
            line = f"p{st.param}[{idx}] = {value};"
        if st.gate is not None and st.gate != Num(1):
            line = f"if ({self._cond(st.gate)}) {{ {line} }}"
        self.lines.append(pad + line)

    # indices ---------------------------------------------------------------------------------------
    def _idx(self, x: Sym) -> str:
        """An index expression as an i32 (floor division and modulo helpers where it can be negative)."""
        if isinstance(x, Num):
            return str(x.value)
        if isinstance(x, Var):
            return x.name
        if isinstance(x, Lin):
            parts = []
            for a, c in sorted(x.terms.items(), key=lambda t: -t[0].vmax * abs(t[1])):
                r = self._idx(a)
                parts.append(r if c == 1 else f"-{r}" if c == -1 else f"{r} * {c}")
            if x.const:
                parts.append(str(x.const))
            return "(" + " + ".join(parts).replace("+ -", "- ") + ")"
        if isinstance(x, (FloorDiv, Mod)):
            a, op = self._idx(x.x), "/" if isinstance(x, FloorDiv) else "%"
            if x.x.vmin >= 0:
                return f"({a} {op} {x.d})"
            fn = "cv_idiv_i32" if isinstance(x, FloorDiv) else "cv_imod_i32"
            self.used.add(fn)
            return f"{fn}({a}, {x.d})"
        if isinstance(x, (Cmp, And)):
            return f"select(0, 1, {self._cond(x)})"
        raise NotImplementedError(f"WGSL renderer: index expression {x!r}")

    def _cond(self, x: Sym) -> str:
        """A 0/1 index expression (a gate) as a WGSL bool."""
        if isinstance(x, Num):
            return "true" if x.value else "false"
        if isinstance(x, Cmp):
            return f"({self._idx(x.x)} {x.op} {x.c})"
        if isinstance(x, And):
            return "(" + " && ".join(self._cond(i) for i in x.items) + ")"
        return f"({self._idx(x)} != 0)"

    # values ----------------------------------------------------------------------------------------
    def _name(self, u: U) -> str:
        if id(u) not in self.names:
            self.names[id(u)] = f"{'acc' if u.op == 'reduce' else 'v'}{len(self.names)}"
        return self.names[id(u)]

    def _ref(self, u: U) -> str:
        if u.op == "reduce" and id(u) in self.rounded:  # (the accumulator itself is f32)
            return self._rounded(u, self._name(u))
        return self._const(u.arg, u.dtype) if u.op == "const" else self._name(u)

    def _rounded(self, u: U, expr: str) -> str:
        """``expr``, the value of ``u``, rounded to its narrow float dtype where ``u`` is one of
        :func:`corvid.render.c.narrow_rounded`."""
        if id(u) not in self.rounded:
            return expr
        if u.dtype.name in _FLOAT8:
            return self._helper(f"cv_round_{_FLOAT8[u.dtype.name]}", expr)
        return self._from_bits(self._to_bits(expr, u.dtype), u.dtype)  # (float16, bfloat16)

    def _helper(self, name: str, *args: str) -> str:
        self.used.add(name)
        return f"{name}({', '.join(args)})"

    def _const(self, value, dt: DType) -> str:
        kind = _kind(dt)
        if kind == "c64":
            return self._complex_const(value, dt)
        if kind == "bool":
            return "true" if value else "false"
        if kind == "f32":
            v = np.float32(value)
            if v == 0:
                return "(-cv_zero)" if np.signbit(v) else "cv_zero"
            if np.isnan(v):  # (the quiet nan, keeping the sign: signbit(-nan) is True)
                return f"bitcast<f32>({0xffc00000 if np.signbit(v) else 0x7fc00000}u)"
            if np.isinf(v):
                return f"bitcast<f32>({int(v.view(np.uint32))}u)"
            return f"{float(v)!r}f"
        v = int(value)
        if kind in ("i64", "u64"):
            v &= (1 << 64) - 1
            return f"vec2<u32>({v & 0xffffffff}u, {v >> 32}u)"
        if kind == "u32":
            return f"{v}u"
        return "i32(-2147483648)" if v == -(1 << 31) else f"{v}i"

    def _zero(self, dt: DType) -> str:
        return "vec2<u32>(0u, 0u)" if _kind(dt) == "f64" else self._const(0, dt)

    def _complex_const(self, value, dt: DType) -> str:
        z = complex(value)
        return f"vec2<f32>({self._const(z.real, dt.real_dtype)}, {self._const(z.imag, dt.real_dtype)})"

    def _read(self, param: int, idx: str) -> str:
        """Element ``idx`` of buffer ``param`` as its compute value."""
        dt = self.k.params[param].dtype
        if dt.name in _ARRAY_OF:
            return f"p{param}[{idx}]"
        if dt.itemsize == 8:
            words = f"vec2<u32>(p{param}[2 * {idx}], p{param}[2 * {idx} + 1])"
            return f"bitcast<vec2<f32>>({words})" if _kind(dt) == "c64" else words
        per = 4 // dt.itemsize
        bits = f"extractBits(p{param}[{idx} / {per}], u32({idx} % {per}) * {8 * dt.itemsize}u, {8 * dt.itemsize}u)"
        return self._from_bits(bits, dt)

    def _expr(self, u: U) -> str:
        if u.op == "load":
            param, idx, gate = u.arg
            if gate == Num(0) or self.k.params[param].size == 0:
                return self._zero(u.dtype)
            if gate is None or gate == Num(1):
                return self._read(param, self._idx(idx))
            # clamp the index into the buffer, then select: no branch, no out-of-bounds read
            safe = f"clamp({self._idx(idx)}, 0, {self.k.params[param].size - 1})"
            return f"select({self._zero(u.dtype)}, {self._read(param, safe)}, {self._cond(gate)})"
        if u.op == "gather":
            return self._gather(u)
        if u.op == "index":
            return self._cast(self._idx(u.arg), _I32, u.dtype)
        if u.op == "cast":
            return self._cast(self._ref(u.src[0]), u.src[0].dtype, u.dtype)
        if u.op == "bitcast":
            return self._bitcast(self._ref(u.src[0]), u.src[0].dtype, u.dtype)
        if u.op == "mulacc":
            return f"fma({', '.join(self._ref(s) for s in u.src)})"
        if u.op == "alu" and u.arg in (Op.CMPLT, Op.CMPEQ, Op.CMPNE, Op.SUB) and _kind(u.src[0].dtype) == "f32" \
                and u.src[0] is u.src[1]:  # x != x is numpy's nan test, x - x is nan for inf: compilers fold both
            x = self._ref(u.src[0])
            nan = self._helper("cv_isnan", x)
            if u.arg is Op.SUB:
                return f"select(cv_zero, bitcast<f32>(0x7fc00000u), {nan} || {self._helper('cv_isinf', x)})"
            return {Op.CMPLT: "false", Op.CMPEQ: f"!{nan}", Op.CMPNE: nan}[u.arg]
        if u.op == "alu":
            return self._alu(u.arg, [self._ref(s) for s in u.src], [s.dtype for s in u.src], u.dtype)
        raise NotImplementedError(f"WGSL renderer: {u.op}")

    def _gather(self, u: U) -> str:
        """``x[base + v * stride]`` where ``0 <= v < size`` and the gate holds, else 0."""
        param, base, stride, size, gate = u.arg
        if self.k.params[param].size == 0 or gate == Num(0):
            return self._zero(u.dtype)
        v, vt = self._ref(u.src[0]), u.src[0].dtype
        kind = _kind(vt)
        if kind in ("i64", "u64"):
            ok, iv = f"({v}.y == 0u && {v}.x < {size}u)", f"i32({v}.x)"
        elif kind == "u32":
            ok, iv = f"({v} < {size}u)", f"i32({v})"
        elif kind == "i32":
            ok, iv = f"({v} >= 0 && {v} < {size})", v
        else:
            raise NotImplementedError(f"WGSL renderer: gather with {vt.name} indices")
        if gate is not None and gate != Num(1):
            ok = f"({ok} && {self._cond(gate)})"
        off = f"clamp({self._idx(base)} + {iv} * {stride}, 0, {self.k.params[param].size - 1})"
        return f"select({self._zero(u.dtype)}, {self._read(param, off)}, {ok})"

    # conversions -----------------------------------------------------------------------------------
    def _wrap(self, x: str, dt: DType) -> str:
        """A 32-bit integer result brought back to ``dt``'s width (int8/16 sign-extended, uint8/16
        masked), as numpy's arithmetic wraps."""
        if not dt.is_int or dt.itemsize >= 4:
            return x
        bits = 8 * dt.itemsize
        return f"({x} & {(1 << bits) - 1}u)" if dt.is_unsigned else f"extractBits({x}, 0u, {bits}u)"

    def _to_bits(self, x: str, dt: DType) -> str:
        """The storage bits of a value of at most 32 bits, in the low bits of a u32."""
        kind = _kind(dt)
        if kind == "bool":
            return f"select(0u, 1u, {x})"
        if dt.name == "float16":
            return self._helper("cv_f32_f16", x)
        if dt.name == "bfloat16":
            return self._helper("cv_f32_bf16", x)
        if dt.name in _FLOAT8:
            return self._helper(f"cv_f32_{_FLOAT8[dt.name]}", x)
        if kind == "u32":
            return x
        mask = "" if dt.itemsize == 4 else f" & {(1 << 8 * dt.itemsize) - 1}u"
        return f"(bitcast<u32>({x}){mask})"

    def _from_bits(self, bits: str, dt: DType) -> str:
        """A value of at most 32 bits from its storage bits (the low bits of a u32)."""
        kind = _kind(dt)
        if kind == "bool":
            return f"({bits} != 0u)"
        if dt.name == "float16":
            return self._helper("cv_f16_f32", bits)
        if dt.name == "bfloat16":
            return f"bitcast<f32>({bits} << 16u)"
        if dt.name in _FLOAT8:
            return self._helper(f"cv_{_FLOAT8[dt.name]}_f32", bits)
        if kind == "u32":
            return bits
        if dt.name == "float32":
            return f"bitcast<f32>({bits})"
        return self._wrap(f"bitcast<i32>({bits})", dt)

    def _cast(self, x: str, src: DType, dst: DType) -> str:
        s, d = _kind(src), _kind(dst)
        if d == "c64":  # (complex64 to complex64 is the only complex-to-complex cast: complex128 is refused)
            return x if s == "c64" else f"vec2<f32>({self._cast(x, src, dst.real_dtype)}, cv_zero)"
        if s == "c64":  # numpy's: the real part (bool: either part nonzero)
            if d == "bool":
                return f"({self._cast(f'{x}.x', src.real_dtype, dst)} || {self._cast(f'{x}.y', src.real_dtype, dst)})"
            return self._cast(f"{x}.x", src.real_dtype, dst)
        if src.name in _FLOAT8 and dst.is_int:
            # ml_dtypes' rule: nan -> 0 and ±inf -> the integer type's max/min; other values are
            # truncated and wrap to the type's width (numpy's conversion through a wide integer)
            info = iinfo(dst)
            wide = self._helper("cv_f32_i64", x)
            finite = wide if d in ("i64", "u64") else self._cast(f"bitcast<i32>({wide}.x)", _I32, dst)
            inf = self._helper("cv_isinf", x)
            big = f"select({self._const(info.min, dst)}, {self._const(info.max, dst)}, {x} > cv_zero)"
            out = f"select({finite}, {big}, {inf})"
            return f"select({out}, {self._zero(dst)}, {self._helper('cv_isnan', x)})"
        if d == "bool":
            if s == "f32":  # (on the bits: nan is true, and no compiler can assume it away)
                return f"((bitcast<u32>({x}) & 0x7fffffffu) != 0u)"
            return {"bool": x, "i32": f"({x} != 0)", "u32": f"({x} != 0u)"}.get(s, f"any({x} != vec2<u32>(0u, 0u))")
        if s == "bool":
            one = {"f32": "select(cv_zero, 1.0, {})", "i32": "select(0, 1, {})", "u32": "select(0u, 1u, {})"}
            return one[d].format(x) if d in one else f"vec2<u32>(select(0u, 1u, {x}), 0u)"
        if s == "f64":
            return self._helper("cv_f64_f32", x)
        if d == "f32":
            if s == "f32":
                return x
            if s in ("i64", "u64"):
                return self._helper(f"cv_{s}_f32", x)
            return f"f32({x})"
        if s == "f32":
            if d == "i64":
                return self._helper("cv_f32_i64", x)
            if d == "u64":
                return self._helper("cv_f32_u64", x)
            if dst.name == "uint32":  # (x86 converts through int64: -1.0 -> 4294967295)
                return f"{self._helper('cv_f32_i64', x)}.x"
            i = self._helper("cv_f32_i32", x)
            return self._wrap(i if d == "i32" else f"bitcast<u32>({i})", dst)
        if d in ("i64", "u64"):
            if s in ("i64", "u64"):
                return x
            return self._helper("cv_sext", x) if s == "i32" else f"vec2<u32>({x}, 0u)"
        low = f"{x}.x" if s in ("i64", "u64") else x  # integer to a 32-bit (or narrower) integer
        from_signed = s == "i32"
        if d == "i32":
            return self._wrap(low if from_signed else f"bitcast<i32>({low})", dst)
        return self._wrap(f"bitcast<u32>({low})" if from_signed else low, dst)

    def _bitcast(self, x: str, src: DType, dst: DType) -> str:
        if src.is_bool or dst.is_bool:
            raise NotImplementedError(f"WGSL renderer: bitcast from {src.name} to {dst.name}")
        if src.itemsize == 8:
            return x  # int64 <-> uint64 (float64 never gets here: _check)
        return self._from_bits(self._to_bits(x, src), dst)

    # arithmetic ------------------------------------------------------------------------------------
    def _alu(self, op: Op, a: list[str], src: list[DType], dt: DType) -> str:
        if op is Op.WHERE:
            return f"select({a[2]}, {a[1]}, {a[0]})"
        kind = _kind(src[0])
        if kind == "c64" or op is Op.COMPLEX:
            return self._complex_alu(op, a, src[0])
        if kind == "f32":
            return self._float_alu(op, a)
        if kind == "bool":
            return self._bool_alu(op, a)
        if kind in ("i64", "u64"):
            return self._int64_alu(op, a, kind)
        return self._int32_alu(op, a, kind, dt)

    def _float_alu(self, op: Op, a: list[str]) -> str:
        if op is Op.CMPNE:  # (true where either is nan: Mesa compiles != as an ordered comparison)
            return f"(!({a[0]} == {a[1]}) || {self._helper('cv_isnan', a[0])} || {self._helper('cv_isnan', a[1])})"
        if op in _INFIX and op not in (Op.AND, Op.OR, Op.XOR):
            return f"({a[0]} {_INFIX[op]} {a[1]})"
        if op is Op.NEG:
            return f"(-{a[0]})"
        if op is Op.RECIP:
            return f"(1.0 / {a[0]})"
        if op in _NATIVE_MATH:
            return f"{_NATIVE_MATH[op]}({a[0]})"
        if op in _HELPER_MATH:
            return self._helper(_HELPER_MATH[op], *a)
        raise NotImplementedError(f"WGSL renderer: {op.name} on floats")

    def _complex_alu(self, op: Op, a: list[str], dt: DType) -> str:
        """complex64 arithmetic on vec2<f32> (the helpers of wgsl_lib: numpy's product and
        quotient, the functions by the C renderers' formulas)."""
        if op is Op.COMPLEX:
            return f"vec2<f32>({a[0]}, {a[1]})"
        if op in (Op.ADD, Op.SUB):
            return f"({a[0]} {_INFIX[op]} {a[1]})"
        if op is Op.NEG:
            return f"(-{a[0]})"
        if op is Op.REAL:
            return f"{a[0]}.x"
        if op is Op.IMAG:
            return f"{a[0]}.y"
        if op is Op.CONJ:
            return f"vec2<f32>({a[0]}.x, -{a[0]}.y)"
        if op in (Op.CMPEQ, Op.CMPNE):  # (on the parts' float comparisons: a nan part is unequal)
            eq = f"({self._float_alu(Op.CMPEQ, [f'{a[0]}.x', f'{a[1]}.x'])} && " \
                 f"{self._float_alu(Op.CMPEQ, [f'{a[0]}.y', f'{a[1]}.y'])})"
            return eq if op is Op.CMPEQ else f"(!{eq})"
        if op is Op.RECIP:
            return self._helper("cv_cdiv", "vec2<f32>(1.0, 0.0)", a[0])
        fn = {Op.MUL: "cv_cmul", Op.DIV: "cv_cdiv", Op.ABS: "cv_cabs", Op.EXP: "cv_cexp", Op.LOG: "cv_clog",
              Op.SQRT: "cv_csqrt", Op.SIN: "cv_csin", Op.COS: "cv_ccos", Op.TAN: "cv_ctan", Op.SINH: "cv_csinh",
              Op.COSH: "cv_ccosh", Op.TANH: "cv_ctanh", Op.ASIN: "cv_casin", Op.ACOS: "cv_cacos",
              Op.ATAN: "cv_catan", Op.ASINH: "cv_casinh", Op.ACOSH: "cv_cacosh", Op.ATANH: "cv_catanh",
              Op.POW: "cv_cpow"}.get(op)
        if fn is None:
            raise NotImplementedError(f"WGSL renderer: {op.name} on {dt.name}")
        return self._helper(fn, *a)

    def _bool_alu(self, op: Op, a: list[str]) -> str:
        table = {Op.AND: "({0} & {1})", Op.OR: "({0} | {1})", Op.XOR: "({0} != {1})", Op.CMPEQ: "({0} == {1})",
                 Op.CMPNE: "({0} != {1})", Op.CMPLT: "(!{0} & {1})", Op.MAX: "({0} | {1})", Op.MIN: "({0} & {1})",
                 Op.ADD: "({0} | {1})", Op.MUL: "({0} & {1})"}
        if op not in table:
            raise NotImplementedError(f"WGSL renderer: {op.name} on bool")
        return table[op].format(*a)

    def _int32_alu(self, op: Op, a: list[str], kind: str, dt: DType) -> str:
        if op in (Op.CMPLT, Op.CMPEQ, Op.CMPNE, Op.AND, Op.OR, Op.XOR):
            return f"({a[0]} {_INFIX[op]} {a[1]})"
        if op in (Op.ADD, Op.SUB, Op.MUL):
            return self._wrap(f"({a[0]} {_INFIX[op]} {a[1]})", dt)
        if op is Op.NEG:
            return self._wrap(f"(-{a[0]})" if kind == "i32" else f"(0u - {a[0]})", dt)
        if op in (Op.MAX, Op.MIN):
            return f"{op.name.lower()}({a[0]}, {a[1]})"
        if op is Op.ABS:
            return self._wrap(f"abs({a[0]})", dt) if kind == "i32" else a[0]
        fn = {Op.IDIV: "idiv", Op.MOD: "imod", Op.SHL: "shl", Op.SHR: "shr", Op.POW: "ipow"}.get(op)
        if fn is None:
            raise NotImplementedError(f"WGSL renderer: {op.name} on {dt.name}")
        return self._wrap(self._helper(f"cv_{fn}_{kind}", *a), dt)

    def _int64_alu(self, op: Op, a: list[str], kind: str) -> str:
        if op in (Op.AND, Op.OR, Op.XOR):
            return f"({a[0]} {_INFIX[op]} {a[1]})"
        if op is Op.CMPEQ:
            return f"all({a[0]} == {a[1]})"
        if op is Op.CMPNE:
            return f"any({a[0]} != {a[1]})"
        lt = f"cv_lt_{kind}"
        if op is Op.CMPLT:
            return self._helper(lt, *a)
        if op is Op.MAX:  # numpy's: a if a >= b else b
            return f"select({a[1]}, {a[0]}, !{self._helper(lt, a[0], a[1])})"
        if op is Op.MIN:
            return f"select({a[1]}, {a[0]}, !{self._helper(lt, a[1], a[0])})"
        if op is Op.ABS:
            return self._helper("cv_abs_i64", a[0]) if kind == "i64" else a[0]
        if op is Op.SHL:
            return self._helper("cv_shl64", a[0], self._helper("cv_shift_count", a[1]))
        if op is Op.SHR:
            return self._helper("cv_ashr64" if kind == "i64" else "cv_lshr64", a[0], self._helper("cv_shift_count", a[1]))
        if op is Op.POW:
            return self._helper("cv_ipow_64", a[0], a[1], "true" if kind == "i64" else "false")
        fn = {Op.ADD: "cv_add64", Op.SUB: "cv_sub64", Op.MUL: "cv_mul64", Op.NEG: "cv_neg64",
              Op.IDIV: f"cv_idiv_{kind}", Op.MOD: f"cv_imod_{kind}"}.get(op)
        if fn is None:
            raise NotImplementedError(f"WGSL renderer: {op.name} on 64-bit integers")
        return self._helper(fn, *a)


"""Render a linearized kernel as OpenCL C (the ``CL`` backend, :mod:`corvid.runtime.opencl`).

OpenCL C is C99 with address spaces and a grid of work items, so :class:`OpenCLRenderer` reuses
the C renderer's statements and values and changes only what differs:

* the signature: ``__kernel void name(__global float* restrict p0, __global const ...)``;
* the grid (:func:`launch`): the outermost output loops (up to 3, :data:`GRID_DIMS`) are not
  loops but work-group ids, the innermost of them on dimension 0 (neighbouring work items then
  touch neighbouring elements) -- except output loops that a reduce is hoisted out of (a softmax's
  columns, whose row max and sum every column reads): those stay loops inside the work item, which
  computes the reduce once for all of them. ``"local"`` loops (the ``local`` and ``group_local``
  actions) are work-item ids within a work-group; without any, the driver picks the work-group
  size. Everything else, sequential reduce loops included, runs as ordinary loops;
* a work-group reduce (``group_local``): each work item reduces its strided share, then the
  partials meet in ``__local`` memory, combined as a tree with barriers, and every work item reads
  the total (so the code after it runs uniformly); stores that do not depend on the partial's
  index are made by its first work item only;
* types: ``long`` is 64 bits in OpenCL C (``long long`` is reserved), the ``<stdint.h>`` names
  are typedefs of OpenCL's, math functions are the overloaded built-ins (``exp``, not ``expf``),
  selects are ternaries and bit casts are ``as_<type>``;
* no OpenMP pragmas, libmvec declarations or vector types (the ``CL`` device applies no
  optimization actions, so kernels reach the renderer unvectorized).

Complex dtypes are not supported yet (NotImplementedError); float64 needs the device's
``cl_khr_fp64``. float16 and bfloat16 are computed in float, as on the CPU: float16 is read and
written with ``vload_half``/``vstore_half_rte`` (no cl_khr_fp16 needed), bfloat16 is stored as
``ushort``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..codegen.ir import Kernel, Loop, U
from ..codegen.linearize import AccFinal, For, StoreStmt, linearize, placement
from ..dtype import DType
from ..graph.node import Op
from ..graph.symbolic import Num
from .c import _MATH, CRenderer, _float_helpers, _magnitude, compute_type

GRID_DIMS = 3  # OpenCL's NDRange has at most 3 dimensions

_CL_TYPES = {"bool": "uchar", "int8": "char", "int16": "short", "int32": "int", "int64": "long",
             "uint8": "uchar", "uint16": "ushort", "uint32": "uint", "uint64": "ulong",
             "float16": "half", "bfloat16": "ushort", "float32": "float", "float64": "double"}
# a float16 element read from buffer n (the C renderer writes ``(float)p<n>[index]``): OpenCL
# dereferences ``half`` pointers only with cl_khr_fp16, but vload_half works everywhere
_HALF_LOAD = re.compile(r"\(float\)p(\d+)\[([^\[\]]*)\]")

_PRELUDE = """typedef char int8_t; typedef short int16_t; typedef int int32_t; typedef long int64_t;
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

# C spellings the inherited C renderer writes, and their OpenCL C equivalents (applied to the
# rendered body and helpers; the prelude above is written in OpenCL C already)
_C_TO_CL = (("long long", "long"), ("__builtin_fmaf(", "fma("), ("__builtin_fma(", "fma("),
            ('__builtin_nanf("")', "NAN"), ('__builtin_nan("")', "((double)NAN)"),
            ("__builtin_inff()", "INFINITY"), ("__builtin_inf()", "((double)INFINITY)"))


@dataclass(frozen=True)
class Launch:
    """How a kernel maps onto the NDRange: ``grid`` the output loops that are work-group ids
    (outermost first, the last on dimension 0), ``local`` the ``"local"`` loops that are work-item
    ids within a group (the first on dimension 0), and the sizes to launch with."""

    grid: tuple[Loop, ...]
    local: tuple[Loop, ...]

    @property
    def local_size(self) -> tuple[int, ...] | None:
        """The work-group size, or None to let the driver choose (no ``"local"`` loops)."""
        if not self.local:
            return None
        dims = max(len(self.grid), len(self.local))
        return tuple(self.local[d].size if d < len(self.local) else 1 for d in range(dims))

    @property
    def global_size(self) -> tuple[int, ...]:
        groups = tuple(lp.size for lp in reversed(self.grid)) or (1,)
        per_group = self.local_size or ()
        dims = max(len(groups), len(per_group))
        return tuple((groups[d] if d < len(groups) else 1) * (per_group[d] if d < len(per_group) else 1)
                     for d in range(dims))


def launch(k: Kernel) -> Launch:
    """The NDRange of ``k`` (see the module docstring): NotImplementedError for more than
    :data:`GRID_DIMS` ``"local"`` loops."""
    local = tuple(lp for lp in k.loops if lp.kind == "local") + \
        tuple({lp.var: lp for lp in k.reduce_loops() if lp.kind == "local"}.values())
    if len(local) > GRID_DIMS:
        raise NotImplementedError(f"OpenCL renderer: {len(local)} work-group dimensions (at most {GRID_DIMS})")
    values, place = placement(k)
    # a reduce computed outside some output loop (placed above it) keeps that loop in the work item
    shallowest = min((len(place[id(u)]) for u in values if u.op == "reduce"), default=len(k.loops))
    grid: list[Loop] = []
    for lp in k.loops[:min(shallowest, GRID_DIMS)]:
        if lp.kind == "local":
            break
        grid.append(lp)
    return Launch(tuple(grid), local)


def global_size(k: Kernel) -> tuple[int, ...]:
    """The NDRange of ``k`` as :class:`OpenCLRenderer` maps it (see :func:`launch`)."""
    return launch(k).global_size


class OpenCLRenderer(CRenderer):
    """Kernel IR → OpenCL C. ``fp64``: whether the target device has ``cl_khr_fp64`` (float64
    kernels raise NotImplementedError without it)."""

    def __init__(self, fp64: bool = True):
        # fma: OpenCL's fma() is exact on every device, so multiply-adds need no CPU feature
        super().__init__(openmp=False, libmvec=False, fma=True)
        self.fp64 = fp64

    def render(self, k: Kernel) -> str:
        self._check(k)
        self.k, self.lines, self.names, self.helpers, self.math_used = k, [], {}, {}, set()
        self.complex_math = {}
        self.lane, self.vec, self.held, self._lane_ctx, self._narrow = None, set(), set(), None, {}
        big = any(lp.size >= 1 << 31 for lp in k.loops + k.reduce_loops()) or any(p.size >= 1 << 31 for p in k.params)
        big = big or any(_magnitude(x) >= 1 << 31 for u in k.values() for x in u.syms()) or \
            any(_magnitude(st.index) >= 1 << 31 for st in k.stores)
        self.index_t = "long" if big else "int"
        self.launch = launch(k)
        self.locals_decl: list[str] = []  # __local arrays: OpenCL C allows them at kernel scope only
        ids = []
        for d, lp in enumerate(self.launch.local):
            ids.append(f"  {self.index_t} {self._var(lp.var)} = ({self.index_t})get_local_id({d});")
        self._shared_reduce = {lp.var for lp in self.launch.local if lp not in k.loops}
        self._emit_grid(linearize(k), list(self.launch.grid))
        args = ", ".join(f"__global {'' if p.output else 'const '}{_CL_TYPES[p.dtype.name]}* restrict p{i}"
                         for i, p in enumerate(k.params))
        body = "\n".join([*self.helpers.values(), f"__kernel void {k.name}({args}) {{", *self.locals_decl, *ids,
                          *self.lines, "}", ""])
        for c, cl in _C_TO_CL:
            body = body.replace(c, cl)
        fp64 = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if self.fp64 else ""
        return fp64 + _PRELUDE + body

    def _check(self, k: Kernel) -> None:
        """NotImplementedError for what this renderer cannot express (rather than wrong values)."""
        if k.vector_width > 1:
            raise NotImplementedError("OpenCL renderer: vectorized kernels (the CL device applies no "
                                      "optimization actions; was the kernel optimized for the CPU?)")
        dtypes = {p.dtype for p in k.params} | {u.dtype for u in k.values()} | \
            {s.dtype for u in k.values() for s in u.src}
        for dt in dtypes:
            if dt.name not in _CL_TYPES:
                raise NotImplementedError(f"the CL device does not support {dt.name} yet")
            if dt.name == "float64" and not self.fp64:
                raise NotImplementedError("float64 on the CL device needs the cl_khr_fp64 extension, "
                                          "which this OpenCL device does not report")

    def _emit_grid(self, stmts: list, grid: list[Loop]) -> None:
        """Print ``stmts`` with the output loops ``grid`` (outermost first) as work-group ids (or
        global ids, when the driver picks the work-group size). Statements around a grid loop run
        in every work item (each computes them itself)."""
        for s in stmts:
            if isinstance(s, For) and not s.reduce and grid and s.loop.var == grid[0].var:
                dim = len(grid) - 1  # the innermost grid loop is dimension 0
                fn = "get_group_id" if self.launch.local else "get_global_id"
                self.lines.append(f"  {self.index_t} {self._var(s.loop.var)} = ({self.index_t}){fn}({dim});")
                self._emit_grid(s.body, grid[1:])
            else:
                self._emit_block([s], 1)

    def _emit_shared_reduce(self, u: U, pad: str) -> None:
        """After the accumulator ``u`` of a work-group reduce is final in each work item: combine
        the work items' partials in local memory (a tree: step ``s`` adds item ``l + s`` into item
        ``l``), then every item reads the total."""
        lp = next(x for x in u.arg[1] if x.kind == "local")
        dims = self.launch.local
        stride = {x.var: math.prod(y.size for y in dims[j + 1:]) for j, x in enumerate(dims)}
        mine = " + ".join(f"{self._var(x.var)} * {stride[x.var]}" for x in dims)
        first = " + ".join(f"{self._var(x.var)} * {stride[x.var]}" for x in dims if x.var != lp.var) or "0"
        acc, t, step = self._name(u), self._type(u), stride[lp.var]
        arr = f"{acc}_parts"
        self.locals_decl.append(f"  __local {t} {arr}[{math.prod(x.size for x in dims)}];")
        lid, top = self._var(lp.var), 1 << (lp.size - 1).bit_length()
        fence = "barrier(CLK_LOCAL_MEM_FENCE);"
        self.lines += [
            f"{pad}{arr}[{mine}] = {acc};",
            f"{pad}{fence}",
            f"{pad}for (int s = {top // 2}; s > 0; s >>= 1) {{",
            f"{pad}  if ({lid} < s && {lid} + s < {lp.size}) "
            f"{arr}[{mine}] = {self._combine(u, f'{arr}[{mine}]', f'{arr}[{mine} + s * {step}]')};",
            f"{pad}  {fence}",
            f"{pad}}}",
            f"{pad}{acc} = {arr}[{first}];",
            f"{pad}{fence}  // (before the array is written again)",
        ]

    def _combine(self, u: U, a: str, b: str) -> str:
        """Two partial results of the reduce ``u`` combined (each already nan-final)."""
        op, dt = u.arg[0], u.dtype
        if op == "sum":
            return f"({a} | {b})" if dt.is_bool else self._alu(Op.ADD, [a, b], [dt, dt], dt)
        if op == "prod":
            return f"({a} & {b})" if dt.is_bool else self._alu(Op.MUL, [a, b], [dt, dt], dt)
        if dt.is_float:  # a nan in either partial is the result
            cmp = ">" if op == "max" else "<"
            return f"(({a}) != ({a}) ? ({a}) : (({b}) != ({b}) || ({b}) {cmp} ({a})) ? ({b}) : ({a}))"
        return self._minmax(op, a, b, dt)

    # hooks of CRenderer -----------------------------------------------------------------------
    def _emit_block(self, stmts: list, depth: int) -> None:
        for s in stmts:
            if isinstance(s, For) and s.loop.kind == "local":  # a work-item id, declared at the top
                self._emit_block(s.body, depth)
            elif isinstance(s, StoreStmt) and self._shared_reduce:
                self.lines.append("  " * depth + f"if ({' && '.join(f'{self._var(v)} == 0' for v in self._shared_reduce)}) {{")
                self._emit_store(s, depth + 1)
                self.lines.append("  " * depth + "}")
            elif isinstance(s, StoreStmt):
                self._emit_store(s, depth)
            else:
                super()._emit_block([s], depth)
                if isinstance(s, AccFinal) and any(lp.kind == "local" for lp in s.u.arg[1]):
                    self._emit_shared_reduce(s.u, "  " * depth)

    def _emit_store(self, s: StoreStmt, depth: int) -> None:
        if self.k.params[s.store.param].dtype.name == "float16":
            self._emit_half_store(s, depth)
        else:
            super()._emit_block([s], depth)

    def _emit_half_store(self, s: StoreStmt, depth: int) -> None:
        """A float16 store: vstore_half_rte rounds the float to nearest even, as numpy does."""
        st = s.store
        line = f"vstore_half_rte({self._ref(st.value)}, {self._s(st.index).render(self._var)}, p{st.param});"
        gate = None if st.gate is None else self._s(st.gate)
        if gate is not None and gate == Num(0):
            return
        if gate is not None and gate != Num(1):
            line = f"if ({gate.render(self._var)}) {line}"
        self.lines.append("  " * depth + line)

    def _expr(self, u) -> str:
        out = super()._expr(u)
        if u.op in ("load", "gather") and self.k.params[u.arg[0]].dtype.name == "float16":
            out = _HALF_LOAD.sub(lambda m: f"vload_half({m.group(2)}, p{m.group(1)})", out)
        return out

    def _pragma(self, s: For) -> str:
        return ""

    def _math_decls(self) -> list[str]:
        return []  # OpenCL's math functions are built in

    def _select(self, c: str, a: str, b: str, dt: DType) -> str:
        return f"(({c}) ? ({a}) : ({b}))"

    def _bitcast(self, u) -> str:
        s, d = u.src[0].dtype, u.dtype
        if s.is_bool or d.is_bool or "float16" in (s.name, d.name):
            raise NotImplementedError(f"OpenCL renderer: bitcast from {s.name} to {d.name}")
        x = self._ref(u.src[0])
        if s.name == "bfloat16":
            x = f"cv_f32_bf16({x})"
        out = f"as_{_CL_TYPES[d.name]}({x})"
        return f"cv_bf16_f32({out})" if d.name == "bfloat16" else out

    def _alu(self, op: Op, a: list[str], src: list[DType], dt: DType) -> str:
        in_dt = src[-1] if op is Op.WHERE else (src[0] if src else dt)
        if in_dt.is_float and op in _MATH:
            return f"{_MATH[op]}({', '.join(a)})"  # overloaded for float and double
        if in_dt.is_float and op in (Op.IDIV, Op.MOD):  # numpy's float floor_divide/remainder
            t = compute_type(in_dt)
            self.helpers.setdefault(f"fh_{t}", _float_helpers(t, ""))
        return super()._alu(op, a, src, dt)

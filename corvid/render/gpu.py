"""What the GPU-style renderers (OpenCL C, CUDA C) share: the launch geometry and the work-group
structure of a kernel, printed through small dialect hooks.

A kernel runs as a grid of work-groups (OpenCL) or thread blocks (CUDA) of work items (threads):

* :func:`launch`: the outermost output loops are not loops but work-group ids -- except output
  loops that a reduce is hoisted out of (a softmax's columns, whose row max and sum every column
  reads): those stay loops inside the work item, which computes the reduce once for all of them.
  ``"local"`` loops (the ``local`` and ``group_local`` actions) are work-item ids within a
  work-group. Everything else, sequential reduce loops included, runs as ordinary loops;
* a work-group reduce (``group_local``): each work item reduces its strided share, then the
  partials meet in work-group memory (``__local``, ``__shared__``), combined as a tree with
  barriers, and every work item reads the total (so the code after it runs uniformly); stores
  that do not depend on the partial's index are made by its first work item only.

:class:`GPURenderer` prints that structure and leaves to a dialect (:mod:`corvid.render.opencl`,
:mod:`corvid.render.cuda`) how an id is read (:meth:`GPURenderer._grid_index`,
:meth:`GPURenderer._local_id`), the qualifier of work-group memory and the barrier, the signature,
the prelude and the C spellings it rewrites. Both keep the C renderer's statements and values.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..codegen.ir import Kernel, Loop, U
from ..codegen.linearize import AccFinal, Def, For, StoreStmt, linearize, placement
from ..dtype import DType
from ..graph.node import Op
from ..graph.symbolic import Var, upper
from .c import _MATH, CRenderer, _magnitude, compute_type, narrow_rounded, render_const, scatter_fill

GRID_DIMS = 3  # NDRanges and thread blocks have at most 3 dimensions


@dataclass(frozen=True)
class Launch:
    """How a kernel maps onto a grid of work-groups: ``grid`` the output loops that are work-group
    ids (outermost first), ``local`` the ``"local"`` loops that are work-item ids within a group
    (the first on dimension 0). The sizes are OpenCL's NDRange; :mod:`corvid.render.cuda` derives
    its blocks and threads from the same loops."""

    grid: tuple[Loop, ...]
    local: tuple[Loop, ...]
    # (reduce loop, output loop): a work-group reduce's loop whose partials are indexed by the
    # id of a "local" output loop (the ``rows_local`` action): it takes no dimension of its own
    aliases: tuple[tuple[Loop, Loop], ...] = ()

    @property
    def local_size(self) -> tuple[int, ...] | None:
        """The work-group size, or None when the kernel has no ``"local"`` loops (the driver, or
        the CUDA renderer, chooses it)."""
        if not self.local:
            return None
        dims = max(len(self.grid), len(self.local))
        return tuple(self.local[d].size if d < len(self.local) else 1 for d in range(dims))

    @property
    def global_size(self) -> tuple[int, ...]:
        """Work items per dimension, the innermost grid loop on dimension 0."""
        groups = tuple(lp.size for lp in reversed(self.grid)) or (1,)
        per_group = self.local_size or ()
        dims = max(len(groups), len(per_group))
        return tuple((groups[d] if d < len(groups) else 1) * (per_group[d] if d < len(per_group) else 1)
                     for d in range(dims))


def launch(k: Kernel, max_grid: int | None = GRID_DIMS) -> Launch:
    """The grid of ``k`` (see the module docstring): at most ``max_grid`` output loops become
    work-group ids (None: all that may; CUDA flattens them into one block index).
    NotImplementedError for more than :data:`GRID_DIMS` ``"local"`` loops."""
    values, place = placement(k)
    out_local = tuple(lp for lp in k.loops if lp.kind == "local")
    reduce_local = tuple({lp.var: lp for lp in k.reduce_loops() if lp.kind == "local"}.values())
    aliases = _aliases(k, out_local, reduce_local, values, place)
    local = out_local + tuple(lp for lp in reduce_local if lp not in dict(aliases))
    if len(local) > GRID_DIMS:
        raise NotImplementedError(f"GPU renderer: {len(local)} work-group dimensions (at most {GRID_DIMS})")
    # a reduce computed outside some output loop (placed above it) keeps that loop in the work item
    shallowest = min((len(place[id(u)]) for u in values if u.op == "reduce"), default=len(k.loops))
    grid: list[Loop] = []
    for lp in k.loops[:shallowest if max_grid is None else min(shallowest, max_grid)]:
        if lp.kind == "local":
            break
        grid.append(lp)
    return Launch(tuple(grid), local, aliases)


def _aliases(k: Kernel, out_local: tuple[Loop, ...], reduce_local: tuple[Loop, ...], values: list[U],
             place: dict[int, tuple]) -> tuple[tuple[Loop, Loop], ...]:
    """The work-group reduce loops that share the id of the one ``"local"`` output loop (the
    ``rows_local`` action): of its size, and every reduce over them computed outside that loop
    (so the items reduce together, then use the total in their own columns). Without output
    loops of the kind, several work-group reduce loops of one size (``reduces_local``: reduces
    that follow one another, none inside another's loops) share the first one's id."""
    if not out_local and len(reduce_local) > 1 and len({lp.size for lp in reduce_local}) == 1:
        ids = {lp.var for lp in reduce_local}
        for u in values:  # (a reduce inside another's work-group loop cannot share its id)
            inside = set(place[id(u)]) & ids
            over = {lp.var for lp in u.arg[1]} & ids if u.op == "reduce" else set()
            if len(inside) > 1 or (inside and over and inside != over):
                return ()
        return tuple((lp, reduce_local[0]) for lp in reduce_local[1:])
    if len(out_local) != 1:
        return ()
    row = out_local[0]
    out = []
    for lp in reduce_local:
        users = [u for u in values if u.op == "reduce" and lp in u.arg[1]]
        if lp.size == row.size and users and all(row.var not in place[id(u)] for u in users):
            out.append((lp, row))
    return tuple(out)


def kernel_dtypes(k: Kernel) -> set[DType]:
    """Every dtype ``k`` stores, loads or computes in."""
    return {p.dtype for p in k.params} | {u.dtype for u in k.values()} | {s.dtype for u in k.values() for s in u.src}


# complex arithmetic and math on a struct of two parts (x: real, y: imaginary), overloaded by
# precision: numpy's product and quotient (Smith's algorithm), as the CPU computes them
# (render/c.py: _complex_helpers). The product is fused as numpy's SIMD loop and the CPU's kernels
# (gcc's fmaddsub) compute it on an FMA machine: re = fma(ar, br, -(ai*bi)), im = fma(ar, bi, ai*br)
# (the plain formula differed from both in the last bit of 43% of random products, and gave
# nan for (1e30-1e30j)**2 where they give -inf-infj); a product reduce multiplies by the plain
# formula (cv_cmul_plain), as numpy's multiply.reduce and the CPU's reduce do. The functions are the textbook formulas numpy's
# libm computes (exp, log, sqrt after FreeBSD's csqrt, sin, cos, sinh, cosh, tan and tanh after Kahan)
_COMPLEX_LIB = """{fn} {t} cv_complex({r} a, {r} b) {{ {t} c; c.x = a; c.y = b; return c; }}
{fn} {t} cv_cadd({t} a, {t} b) {{ return cv_complex(a.x + b.x, a.y + b.y); }}
{fn} {t} cv_csub({t} a, {t} b) {{ return cv_complex(a.x - b.x, a.y - b.y); }}
{fn} {t} cv_cneg({t} a) {{ return cv_complex(-a.x, -a.y); }}
{fn} {t} cv_conj({t} a) {{ return cv_complex(a.x, -a.y); }}
{fn} bool cv_ceq({t} a, {t} b) {{ return a.x == b.x && a.y == b.y; }}
{fn} {t} cv_cmul({t} a, {t} b) {{ return cv_complex(fma{f}(a.x, b.x, -(a.y * b.y)), fma{f}(a.x, b.y, a.y * b.x)); }}
{fn} {t} cv_cmul_plain({t} a, {t} b) {{ return cv_complex(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }}
{fn} {t} cv_cdiv({t} a, {t} b) {{
  {r} abr = fabs{f}(b.x), abi = fabs{f}(b.y);
  if (abr >= abi) {{
    if (abr == 0 && abi == 0) return cv_complex(a.x / abr, a.y / abr);
    {r} rat = b.y / b.x, scl = ({r})1 / (b.x + b.y * rat);
    return cv_complex((a.x + a.y * rat) * scl, (a.y - a.x * rat) * scl);
  }}
  {r} rat = b.x / b.y, scl = ({r})1 / (b.y + b.x * rat);
  return cv_complex((a.x * rat + a.y) * scl, (a.y * rat - a.x) * scl);
}}
{fn} {r} cv_cabs({t} a) {{ return hypot{f}(a.x, a.y); }}
{fn} {t} cv_cexp({t} a) {{
  if (a.y == 0) return cv_complex(exp{f}(a.x), a.y);
  {r} e = exp{f}(a.x);
  return cv_complex(e * cos{f}(a.y), e * sin{f}(a.y));
}}
{fn} {t} cv_clog({t} a) {{ return cv_complex(log{f}(hypot{f}(a.x, a.y)), atan2{f}(a.y, a.x)); }}
{fn} {t} cv_csqrt({t} a) {{
  if (a.x == 0 && a.y == 0) return cv_complex(({r})0, a.y);
  if (a.y == a.y && a.y - a.y != a.y - a.y) return cv_complex(fabs{f}(a.y), a.y);  /* (an infinite part) */
  if (a.x != a.x) return cv_complex(a.x, a.y - a.y + a.x);
  if (a.x - a.x != a.x - a.x) return a.x > 0 ? cv_complex(a.x, a.y == a.y ? copysign{f}(({r})0, a.y) : a.y)
                                 : cv_complex(fabs{f}(a.y - a.y), copysign{f}(-a.x, a.y));
  {r} h = hypot{f}(a.x, a.y);
  if (a.x >= 0) {{ {r} t = sqrt{f}((a.x + h) * ({r})0.5); return cv_complex(t, a.y / (2 * t)); }}
  {r} t = sqrt{f}((h - a.x) * ({r})0.5);
  return cv_complex(fabs{f}(a.y) / (2 * t), copysign{f}(t, a.y));
}}
{fn} {t} cv_csin({t} a) {{ return cv_complex(sin{f}(a.x) * cosh{f}(a.y), cos{f}(a.x) * sinh{f}(a.y)); }}
{fn} {t} cv_ccos({t} a) {{ return cv_complex(cos{f}(a.x) * cosh{f}(a.y), -(sin{f}(a.x) * sinh{f}(a.y))); }}
{fn} {t} cv_csinh({t} a) {{ return cv_complex(sinh{f}(a.x) * cos{f}(a.y), cosh{f}(a.x) * sin{f}(a.y)); }}
{fn} {t} cv_ccosh({t} a) {{ return cv_complex(cosh{f}(a.x) * cos{f}(a.y), sinh{f}(a.x) * sin{f}(a.y)); }}
{fn} {t} cv_ctanh({t} a) {{  /* the Array API's special cases first (render/c.py: _complex_tanh_helpers) */
  if (a.x - a.x != 0 && a.x == a.x) return cv_complex(copysign{f}(({r})1, a.x), copysign{f}(({r})0, a.y));
  if (a.y == 0) return cv_complex(tanh{f}(a.x), a.y);
  if (a.y - a.y != 0) return cv_complex(a.x == 0 ? a.x : a.y - a.y, a.y - a.y);  /* (y infinite or nan) */
  if (fabs{f}(a.x) > {big}) {{  /* tanh(x) is +-1; the imaginary part underflows */
    {r} e = exp{f}(-2 * fabs{f}(a.x));
    return cv_complex(copysign{f}(({r})1, a.x), 4 * sin{f}(a.y) * cos{f}(a.y) * e);
  }}
  {r} t = tan{f}(a.y), beta = 1 + t * t, s = sinh{f}(a.x), rho = sqrt{f}(1 + s * s), den = 1 + beta * s * s;
  return cv_complex(beta * rho * s / den, t / den);
}}
{fn} {t} cv_ctan({t} a) {{ {t} w = cv_ctanh(cv_complex(-a.y, a.x)); return cv_complex(w.y, -w.x); }}
{fn} {t} cv_casinh({t} a) {{  /* log(z + sqrt(z*z + 1)), on the half plane where it does not cancel */
  {r} s = copysign{f}(({r})1, a.x);  /* (odd: computed where re >= 0, -0 included, so -0 + iy takes its cut's side) */
  {t} z = cv_complex(s * a.x, s * a.y);
  {t} zz = cv_cmul_plain(z, z), w;
  if (fabs{f}(z.x) > {huge} || fabs{f}(z.y) > {huge}) {{  /* (z*z + 1 is z*z, which would overflow): log(2z) */
    w = cv_clog(z);
    w.x += ({r})0.6931471805599453;
  }} else {{
    w = cv_clog(cv_cadd(z, cv_csqrt(cv_complex(zz.x + 1, zz.y))));  /* (zz.y keeps its zero's sign: the branch cut) */
  }}
  return cv_complex(s * w.x, s * w.y);
}}
{fn} {t} cv_casin({t} a) {{ {t} w = cv_casinh(cv_complex(-a.y, a.x)); return cv_complex(w.y, -w.x); }}
{fn} {t} cv_cacos({t} a) {{ {t} w = cv_casin(a); return cv_complex(({r})1.5707963267948966 - w.x, -w.y); }}
{fn} {t} cv_catanh({t} a) {{  /* (log(1 + z) - log(1 - z)) / 2 */
  if (fabs{f}(a.x) > {huge} || fabs{f}(a.y) > {huge}) {{  /* atanh(1/z) +- i pi/2, atanh(w) = w there */
    {t} w = cv_cdiv(cv_complex(({r})1, ({r})0), a);
    return cv_complex(w.x, copysign{f}(({r})1.5707963267948966, a.y) + w.y);
  }}
  {t} p = cv_clog(cv_complex(1 + a.x, a.y)), m = cv_clog(cv_complex(1 - a.x, -a.y));
  return cv_complex((p.x - m.x) * ({r})0.5, (p.y - m.y) * ({r})0.5);
}}
{fn} {t} cv_catan({t} a) {{ {t} w = cv_catanh(cv_complex(-a.y, a.x)); return cv_complex(w.y, -w.x); }}
{fn} {t} cv_cacosh({t} a) {{  /* log(z + sqrt(z + 1) sqrt(z - 1)) */
  {t} q = cv_cmul_plain(cv_csqrt(cv_complex(a.x + 1, a.y)), cv_csqrt(cv_complex(a.x - 1, a.y)));
  return cv_clog(cv_cadd(a, q));
}}
{fn} {t} cv_cpow({t} a, {t} b) {{  /* numpy's: small integer powers by repeated products, else exp(b log a) */
  if (b.x == 0 && b.y == 0) return cv_complex(({r})1, ({r})0);
  if (b.y == 0 && b.x == 2) return cv_cmul(a, a);  /* (numpy's a ** 2 and a ** 0.5: square and sqrt) */
  if (b.y == 0 && b.x == ({r})0.5) return cv_csqrt(a);
  if (a.x == 0 && a.y == 0) {{
    if (b.x > 0 && b.y == 0) return cv_complex(({r})0, ({r})0);
    return cv_complex(({r})0 / ({r})0, ({r})0 / ({r})0);  /* (nan, nan): 0 to a negative or complex power */
  }}
  if (b.y == 0 && b.x > -100 && b.x < 100 && b.x == ({r})(long)b.x) {{
    long n = (long)b.x;
    if (n == 1) return a;
    if (n == 2) return cv_cmul_plain(a, a);
    if (n == 3) return cv_cmul_plain(a, cv_cmul_plain(a, a));
    {t} acc = cv_complex(({r})1, ({r})0), p = a;
    long m = n < 0 ? -n : n;
    for (long mask = 1;; mask <<= 1) {{
      if (m & mask) acc = cv_cmul_plain(acc, p);
      if (m < (mask << 1)) break;
      p = cv_cmul_plain(p, p);
    }}
    return n < 0 ? cv_cdiv(cv_complex(({r})1, ({r})0), acc) : acc;
  }}
  return cv_cexp(cv_cmul(b, cv_clog(a)));
}}
"""
# Op -> the helper computing it on complex values (the others raise NotImplementedError)
_COMPLEX_FN = {Op.EXP: "cv_cexp", Op.LOG: "cv_clog", Op.SQRT: "cv_csqrt", Op.SIN: "cv_csin", Op.COS: "cv_ccos",
               Op.SINH: "cv_csinh", Op.COSH: "cv_ccosh", Op.TANH: "cv_ctanh", Op.TAN: "cv_ctan", Op.ABS: "cv_cabs",
               Op.ASIN: "cv_casin", Op.ACOS: "cv_cacos", Op.ATAN: "cv_catan", Op.ASINH: "cv_casinh",
               Op.ACOSH: "cv_cacosh", Op.ATANH: "cv_catanh", Op.POW: "cv_cpow"}


SCATTER_BITS = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t", 16: "cv_bits128"}
SCATTER_ITEMS = 4096  # work items a GPU's scatter aims at (a few per core of a GPU's SMs)
SCATTER_SCANS = 1 << 26  # index reads a scatter allows itself in all (work items × updates each reads)


def scatter_ranges(O: int, n: int, m: int, inner: int, items: int = SCATTER_ITEMS, scans: int = SCATTER_SCANS) -> int:
    """Into how many ranges of rows a SCATTER kernel (``O`` outer, ``n`` rows, ``m`` updates,
    ``inner`` columns) splits each output column: one work item per (column, range), so a 1-D
    scatter (``x[idx] = v``) or an embedding table's gradient runs on about ``items`` work items,
    not one per column. Each work item reads every index (it combines those in its range), so
    the ranges are bounded by ``scans`` index reads in all (:data:`SCATTER_SCANS`)."""
    columns = max(O * inner, 1)
    budget = scans // max(columns * m, 1)
    return max(1, min(n, -(-items // columns), budget))


class GPURenderer(CRenderer):
    """Kernel IR → a GPU dialect of C (see the module docstring). Subclasses set the class
    attributes and implement the hooks marked below."""

    dialect = ""  # in error messages: "OpenCL", "CUDA"
    device = ""  # the device's name, in error messages
    types: ClassVar[dict[str, str]] = {}  # dtype name -> element type of a buffer pointer
    long_type = ""  # the 64-bit index type
    shared = ""  # the qualifier of work-group memory
    barrier = ""  # a work-group barrier over work-group memory
    max_grid: int | None = GRID_DIMS  # output loops that may be work-group ids (see launch)
    spellings: tuple[tuple[str, str], ...] = ()  # C spellings the C renderer prints -> this dialect's
    vectors = False  # whether the dialect renders vectorized kernels (see OpenCLRenderer)

    def __init__(self) -> None:
        # fma: both dialects' fma() is exact on every device, so multiply-adds need no CPU feature
        super().__init__(openmp=False, libmvec=False, fma=True)

    def _render(self, k: Kernel) -> str:
        self._check(k)
        self.k, self.lines, self.names, self.helpers, self.math_used = k, [], {}, {}, set()
        self.complex_math = {}
        self.unwritten: set[int] = set()  # (values the C renderer may leave out; the GPU dialects write every one)
        self._lane_ctx, self._narrow = None, {}
        self.rounded = narrow_rounded(k)
        self._setup_lanes(k)
        big = any(upper(lp.size) >= 1 << 31 for lp in k.loops + k.reduce_loops()) or \
            any(upper(p.size) >= 1 << 31 for p in k.params)
        big = big or any(_magnitude(x) >= 1 << 31 for u in k.values() for x in u.syms()) or \
            any(_magnitude(st.index) >= 1 << 31 for st in k.stores)
        self.index_t = self.long_type if big else "int"
        self.launch = launch(k, self.max_grid)
        self.shared_decls: list[str] = []  # work-group arrays, declared at kernel scope (OpenCL allows no other)
        self._shared_reduce = {lp.var for lp in self.launch.local if lp not in k.loops} | \
            {lp.var for lp, _ in self.launch.aliases}
        self._alias = {lp.var: row.var for lp, row in self.launch.aliases}
        stmts = linearize(k)
        self._plan_row_cache(stmts)
        self._emit_grid(stmts, list(self.launch.grid))
        sizes = [] if k.dims_param is None else [  # (the symbolic sizes, read once: see graph/symbolic.py Dim)
            f"  {self.long_type} cv_d{j} = p{k.dims_param}[{j}];" for j in range(k.params[k.dims_param].size)]
        body = "\n".join([*self.helpers.values(), f"{self._signature(k)} {{", *self._assumptions(k),
                          *self.shared_decls, *sizes,
                          *self._ids(), *self.lines, "}", ""])
        for c, spelled in self.spellings:
            body = body.replace(c, spelled)
        return self._prelude() + body

    def _check(self, k: Kernel) -> None:
        """NotImplementedError for what this renderer cannot express (rather than wrong values)."""
        if k.vector_width > 1 and not self.vectors:
            raise NotImplementedError(f"{self.dialect} renderer: vectorized kernels (the {self.device} device applies "
                                      "no CPU optimization actions; was the kernel optimized for the CPU?)")
        for dt in kernel_dtypes(k):
            if dt.name not in self.types:
                raise NotImplementedError(f"the {self.device} device does not support {dt.name} yet")

    # dialect hooks ----------------------------------------------------------------------------
    def _signature(self, k: Kernel) -> str:
        """The kernel's declaration, up to its opening brace."""
        raise NotImplementedError

    def _prelude(self) -> str:
        """Source before the helpers and the kernel: typedefs, index helpers, extensions."""
        raise NotImplementedError

    def _assumptions(self, k: Kernel) -> list[str]:
        """Lines at the top of the kernel telling the compiler what the runtime guarantees (none
        by default)."""
        return []

    def _ids(self) -> list[str]:
        """Lines at the top of the kernel that read the ids it needs: each ``"local"`` loop's
        variable (:meth:`_local_id`), and whatever :meth:`_grid_index` reads."""
        return [f"  {self.index_t} {self._var(lp.var)} = ({self.index_t}){self._local_id(d)};"
                for d, lp in enumerate(self.launch.local)] + \
            [f"  {self.index_t} {self._var(lp.var)} = {self._var(row.var)};  // (the same work items)"
             for lp, row in self.launch.aliases]

    def _grid_index(self, pos: int) -> str:
        """The value of grid loop ``pos`` (0: the outermost of ``self.launch.grid``)."""
        raise NotImplementedError

    def _local_id(self, dim: int) -> str:
        """The work item's id within its work-group along ``dim``."""
        raise NotImplementedError

    def _emit_store(self, s: StoreStmt, depth: int) -> None:
        """A store (a dialect with its own way to write a dtype overrides this)."""
        super()._emit_block([s], depth)

    # the work-group structure ------------------------------------------------------------------
    def _emit_grid(self, stmts: list, grid: list[Loop]) -> None:
        """Print ``stmts`` with the output loops ``grid`` (outermost first) as ids. Statements
        around a grid loop run in every work item (each computes them itself). A work item's
        own loads come first (they depend on no other value), so that a GPU compiler, which
        merges neighbouring loads only within a basic block, sees those of a wide item
        (``wide_items``) side by side before any branch of the arithmetic (``erff``)."""
        if not grid:
            stmts = [s for s in stmts if isinstance(s, Def) and s.u.op == "load"] + \
                [s for s in stmts if not (isinstance(s, Def) and s.u.op == "load")]
        for s in stmts:
            if isinstance(s, For) and not s.reduce and grid and s.loop.var == grid[0].var:
                pos = len(self.launch.grid) - len(grid)
                index = self._grid_index(pos)
                self.lines.append(f"  {self.index_t} {self._var(s.loop.var)} = ({self.index_t}){index};")
                self._emit_grid(s.body, grid[1:])
            else:
                self._emit_block([s], 1)

    def _emit_shared_reduce(self, u: U, pad: str) -> None:
        """After the accumulator ``u`` of a work-group reduce is final in each work item: combine
        the work items' partials in work-group memory (a tree: step ``s`` adds item ``l + s`` into
        item ``l``), then every item reads the total."""
        lp = next(x for x in u.arg[1] if x.kind == "local")
        dims = self.launch.local
        stride = {x.var: math.prod(y.size for y in dims[j + 1:]) for j, x in enumerate(dims)}
        own = self._alias.get(lp.var, lp.var)  # (the dimension its partials are indexed by)
        mine = " + ".join(f"{self._var(x.var)} * {stride[x.var]}" for x in dims)
        first = " + ".join(f"{self._var(x.var)} * {stride[x.var]}" for x in dims if x.var != own) or "0"
        acc, t, step = self._name(u), self._type(u), stride[own]
        arr = f"{acc}_parts"
        self.shared_decls.append(f"  {self.shared} {t} {arr}[{math.prod(x.size for x in dims)}];")
        lid, top = self._var(lp.var), 1 << (lp.size - 1).bit_length()
        self.lines += [
            f"{pad}{arr}[{mine}] = {acc};",
            f"{pad}{self.barrier}",
            f"{pad}for (int s = {top // 2}; s > 0; s >>= 1) {{",
            (f"{pad}  if ({lid} < s && {lid} + s < {lp.size}) "
             f"{arr}[{mine}] = {self._combine(u, f'{arr}[{mine}]', f'{arr}[{mine} + s * {step}]')};"),
            f"{pad}  {self.barrier}",
            f"{pad}}}",
            f"{pad}{acc} = {arr}[{first}];",
            f"{pad}{self.barrier}  // (before the array is written again)",
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

    # the row cache ------------------------------------------------------------------------------
    def _plan_row_cache(self, stmts: list) -> None:
        """Find the loads that several loops of one scope repeat (see :data:`ROW_CACHE_MAX`):
        ``self._row_write`` (the first loop's loads, which also keep what they read) and
        ``self._row_read`` (the later loops' loads of the same elements, which read it back), by
        value id: (array name, loop variable); ``self._row_arrays``: the arrays each writing loop
        declares before it, by the loop's id."""
        self._row_write: dict[int, tuple[str, Var]] = {}
        self._row_read: dict[int, tuple[str, Var]] = {}
        self._row_arrays: dict[int, list[str]] = {}
        if self.k.vector_width > 1:  # (vector kernels, OpenCL's on a CPU driver: their loads stay as they are)
            return
        if os.environ.get("CORVID_ROW_CACHE", "1").strip() == "0":  # (off: for comparing on a GPU)
            return
        grid = {lp.var for lp in self.launch.grid}
        scopes: list[list[For]] = []

        def scan(block: list, scope: list[For]) -> None:
            for st in block:
                if not isinstance(st, For):
                    continue
                if st.loop.kind == "local" or (not st.reduce and st.loop.var in grid):
                    scan(st.body, scope)  # (no C scope of its own: ids, or a loop the launch flattened)
                else:
                    scope.append(st)
                    inner: list[For] = []
                    scopes.append(inner)
                    scan(st.body, inner)

        top: list[For] = []
        scopes.append(top)
        scan(stmts, top)
        budget = ROW_CACHE_MAX
        count = 0
        for loops in scopes:
            first: dict[tuple, tuple[U, For]] = {}
            for f in loops:
                n = f.loop.size
                if not isinstance(n, int) or n > ROW_CACHE_MAX or n < 2:
                    continue
                loads = _flat_loads(f.body)
                if loads is None:
                    continue
                canon = Var("cv_row", 0, n - 1)
                for u in loads:
                    if u.dtype.itemsize > 4 or u.dtype.is_complex or id(u) in self._row_write:
                        continue
                    param, idx, gate = u.arg
                    if f.loop.var not in idx.vars():
                        continue
                    swap = {**self._alias, f.loop.var: canon}
                    key = (param, u.dtype.name, n, _norm(idx, swap), None if gate is None else _norm(gate, swap))
                    seen = first.get(key)
                    if seen is None:
                        first[key] = (u, f)
                        continue
                    if seen[1] is f:
                        continue
                    writer, wf = seen
                    if id(writer) not in self._row_write:
                        if budget < n:
                            continue
                        budget -= n
                        name = f"cv_row{count}"
                        count += 1
                        self._row_write[id(writer)] = (name, wf.loop.var)
                        self._row_arrays.setdefault(id(wf), []).append(f"{self._type(writer)} {name}[{n}];")
                    self._row_read[id(u)] = (self._row_write[id(writer)][0], f.loop.var)

    def _row_cached(self, s: For) -> bool:
        """Whether a loop writes or reads the row cache (it is then unrolled, so that the arrays'
        indices are constants and they stay in registers)."""
        loads = _flat_loads(s.body) or []
        return any(id(u) in self._row_write or id(u) in self._row_read for u in loads)

    # hooks of CRenderer -----------------------------------------------------------------------
    def _emit_block(self, stmts: list, depth: int) -> None:
        for s in stmts:
            if isinstance(s, Def) and id(s.u) in self._row_read:  # (read again: from the row cache)
                name, var = self._row_read[id(s.u)]
                self.lines.append("  " * depth + f"{self._type(s.u)} {self._name(s.u)} = {name}[{self._var(var)}];")
            elif isinstance(s, Def) and id(s.u) in self._row_write:
                super()._emit_block([s], depth)
                name, var = self._row_write[id(s.u)]
                self.lines.append("  " * depth + f"{name}[{self._var(var)}] = {self._name(s.u)};")
            elif isinstance(s, For) and s.loop.kind != "local" and self._row_cached(s):
                for decl in self._row_arrays.get(id(s), []):
                    self.lines.append("  " * depth + decl)
                if s.loop.unroll <= 1:  # (a loop the search unrolls keeps its own count)
                    self.lines.append("  " * depth + f"#pragma GCC unroll {s.loop.size}")
                super()._emit_block([s], depth)
            elif isinstance(s, For) and s.loop.kind == "local":  # a work-item id, declared at the top
                self._emit_block(s.body, depth)
            elif isinstance(s, StoreStmt) and self._gates(s):
                self.lines.append("  " * depth + f"if ({' && '.join(f'{self._var(v)} == 0' for v in self._gates(s))}) {{")
                self._emit_store(s, depth + 1)
                self.lines.append("  " * depth + "}")
            elif isinstance(s, StoreStmt):
                self._emit_store(s, depth)
            else:
                super()._emit_block([s], depth)
                if isinstance(s, AccFinal) and any(lp.kind == "local" for lp in s.u.arg[1]):
                    self._emit_shared_reduce(s.u, "  " * depth)

    def _gates(self, s: StoreStmt) -> list:
        """The work-group reduce ids a store is made at 0 of: every one, except those that share
        the id of a ``"local"`` output loop that the store's index uses (each item stores its own
        columns there)."""
        used = s.store.index.vars()
        return sorted((v for v in self._shared_reduce if self._alias.get(v) not in used), key=lambda v: v.name)

    def _pragma(self, s: For) -> str:
        return ""

    def _math_decls(self) -> list[str]:
        return []  # the math functions are built in

    def _select(self, c: str, a: str, b: str, dt: DType) -> str:
        return f"(({c}) ? ({a}) : ({b}))"  # (the C renderer's bit-mask selects go through memcpy)

    def _math_name(self, op: Op, dt: DType) -> str:
        """The built-in math function computing ``op`` on ``dt`` (a float type)."""
        raise NotImplementedError

    # complex values (see _COMPLEX_LIB) -------------------------------------------------------
    overload = ""  # the attribute that lets a helper be overloaded by precision (OpenCL C's)
    math_suffix = ""  # the suffix of float math functions (CUDA's expf; OpenCL's are overloaded)

    def complex_lib(self, dt: DType) -> str:
        """The complex helpers (:data:`_COMPLEX_LIB`) of ``dt``'s precision, in this dialect."""
        r = compute_type(dt.real_dtype)
        f = self.math_suffix if r == "float" else ""
        big = "9" if r == "float" else "22"  # tanh(x) rounds to 1 beyond
        huge = "4096" if r == "float" else "1e8"  # 1 / sqrt(epsilon): z*z + 1 rounds to z*z beyond
        return _COMPLEX_LIB.format(fn=f"{self.function} {self.overload}".rstrip(), t=self.complex_types[dt.name],
                                   r=r, f=f, big=big, huge=huge)

    def _complex_lib(self, dt: DType) -> None:
        """Add the complex helpers of ``dt``'s precision to the kernel."""
        self.helpers.setdefault(f"cv_complex_{dt.name}", self.complex_lib(dt))

    def _complex_alu(self, op: Op, a: list[str], in_dt: DType, dt: DType) -> str:
        """Complex arithmetic through the helpers of :data:`_COMPLEX_LIB` (each part a field)."""
        cdt = in_dt if in_dt is not None and in_dt.is_complex else dt
        self._complex_lib(cdt)
        if op is Op.COMPLEX:
            return f"cv_complex({a[0]}, {a[1]})"
        if op is Op.REAL:
            return f"({a[0]}).x"
        if op is Op.IMAG:
            return f"({a[0]}).y"
        simple = {Op.ADD: "cv_cadd", Op.SUB: "cv_csub", Op.MUL: "cv_cmul", Op.DIV: "cv_cdiv", Op.NEG: "cv_cneg",
                  Op.CONJ: "cv_conj", Op.CMPEQ: "cv_ceq", **_COMPLEX_FN}
        if op is Op.CMPNE:
            return f"!cv_ceq({a[0]}, {a[1]})"
        if op is Op.RECIP:
            return f"cv_cdiv({render_const(1, in_dt)}, {a[0]})"
        if op in simple:
            return f"{simple[op]}({', '.join(a)})"
        raise NotImplementedError(f"the {self.device} device does not compute {op.name.lower()} of {cdt.name} yet "
                                  f"(complex {', '.join(sorted(o.name.lower() for o in _COMPLEX_FN))} and arithmetic "
                                  "are written); use the CPU")

    def _cast(self, x: str, src: DType, dst: DType) -> str:
        if dst.is_complex:
            self._complex_lib(dst)
            r = compute_type(dst.real_dtype)
            if src.is_complex:
                re_, im = (self._cast(f"({x}).{p}", src.real_dtype, dst.real_dtype) for p in "xy")
                return f"cv_complex({re_}, {im})"
            return f"cv_complex({self._cast(x, src, dst.real_dtype)}, ({r})0)"
        if src.is_complex:  # numpy's cast: the real part (bool: either part nonzero)
            if dst.is_bool:
                return f"(({x}).x != 0 || ({x}).y != 0)"
            return self._cast(f"({x}).x", src.real_dtype, dst)
        return super()._cast(x, src, dst)

    def _accumulate(self, u: U) -> str:
        if u.dtype.is_complex and u.arg[0] in ("sum", "prod"):
            self._complex_lib(u.dtype)
            acc, v = self._name(u), self._ref(u.src[0])
            return f"{acc} = {'cv_cadd' if u.arg[0] == 'sum' else 'cv_cmul_plain'}({acc}, {v});"
        return super()._accumulate(u)

    # SCATTER: a fixed template (see _render_scatter) with these dialect hooks ------------------
    scatter_copies_x = True  # whether each work item copies its column of x (else the runtime copies x first)
    scatter_items = SCATTER_ITEMS  # the work items a scatter aims at (a device running them one by one wants few)
    scatter_scans = SCATTER_SCANS  # the index reads a scatter's work items make in all, at most

    def scatter_ranges(self, O: int, n: int, m: int, inner: int) -> int:
        """Ranges of rows a SCATTER kernel of this shape splits its columns into (:func:`scatter_ranges`)."""
        return scatter_ranges(O, n, m, inner, self.scatter_items, self.scatter_scans)

    def scatter_work_items(self, O: int, n: int, m: int, inner: int) -> int:
        """The work items a SCATTER kernel of this shape launches (one per column and range)."""
        return O * inner * self.scatter_ranges(O, n, m, inner)

    def render_attention(self, name: str, params: dict, shapes: list[tuple[int, ...]]) -> tuple[str, int, int, int]:
        """The fused attention kernels (:func:`_render_attention`), a template of host ops
        (corvid/nn/flash.py): ``(source, work-groups, work items per group, flops)``."""
        return _render_attention(self, name, params, shapes)

    def _template_signature(self, name: str, n_inputs: int, threads: int) -> str:
        """The declaration of a template kernel over float32 buffers: the output, then ``n_inputs``."""
        raise NotImplementedError

    def _group_id(self) -> str:
        """The work-group's index (one dimension)."""
        raise NotImplementedError

    def render_scatter(self, name: str, reduce: str, dtype: DType, O: int, n: int, m: int, inner: int,
                       idx_inner: int, filled: float | None = None) -> str:
        """The source of a SCATTER kernel (see :func:`_render_scatter`), launched over ``O * inner``
        work items (:meth:`scatter_items`)."""
        return _render_scatter(self, name, reduce, dtype, O, n, m, inner, idx_inner, filled)

    def _scatter_signature(self, name: str, t: str, x: bool = True) -> str:
        """The declaration of a SCATTER kernel ``(out, x, idx, src)`` whose elements are ``t``
        (``(out, idx, src)`` without ``x``)."""
        raise NotImplementedError

    def _scatter_id(self) -> str:
        """The work item's index over the whole launch (one dimension)."""
        raise NotImplementedError

    def _scatter_load_narrow(self, dtype: DType) -> str:
        """How a float16 or bfloat16 element is read as a float: a format string of ``p`` (the
        buffer, of 16-bit words) and ``i`` (the index)."""
        return "cv_bf16_f32({p}[{i}])" if dtype.name == "bfloat16" else "cv_f16_f32({p}[{i}])"

    def _scatter_store_narrow(self, dtype: DType) -> str:
        """How a float ``v`` is written as a float16 or bfloat16 element (rounded to nearest even)."""
        raise NotImplementedError

    def _scatter_helpers(self, dtype: DType) -> str:
        """Helpers a SCATTER kernel of ``dtype`` needs besides the prelude."""
        return ""

    # complex values: a struct of two floats (OpenCL's float2/double2, CUDA's own structs) -------
    complex_types: ClassVar[dict[str, str]] = {}  # complex dtype name -> its type (fields x: real, y: imaginary)
    function = "static inline"  # how a helper function is declared

    def _alu(self, op: Op, a: list[str], src: list[DType], dt: DType) -> str:
        in_dt = src[-1] if op is Op.WHERE else (src[0] if src else dt)
        if in_dt.is_float and op in _MATH:
            return f"{self._math_name(op, in_dt)}({', '.join(a)})"
        return super()._alu(op, a, src, dt)


# --- the row cache ---------------------------------------------------------------------------------------

# Loads that several loops of one scope repeat, element for element (a softmax reads its row for
# the maximum, again for the sum, again for the output; a layer norm likewise): the first loop
# keeps what it reads in an array of the work item's own, unrolled so that the array stays in
# registers, and the later loops read it back from there instead of from memory. A row of 8192
# floats over 256 work items is 32 per item, and the kernel then reads memory once instead of
# three times. At most this many elements per work item (registers).
ROW_CACHE_MAX = 64


def _flat_loads(body: list) -> list[U] | None:
    """The loads a loop's body computes, looking through work-item ids (``"local"`` loops: no
    loop in the source); None when it holds another loop."""
    out: list[U] = []
    for st in body:
        if isinstance(st, For):
            if st.loop.kind != "local":
                return None
            inner = _flat_loads(st.body)
            if inner is None:
                return None
            out += inner
        elif isinstance(st, Def) and st.u.op == "load":
            out.append(st.u)
    return out


def _norm(expr, swap: dict) -> str:
    """An index expression with its loop and alias variables renamed, as text (a comparable key)."""
    return expr.substitute(swap).render()


# --- SCATTER (see graph/node.py and corvid/render/c.py: render_scatter) --------------------------------



def scatter_combine(reduce: str, dtype: DType, t: str, d: str = "d", v: str = "v") -> str:
    """The C expression combining ``v`` into ``d`` (both of the compute type; ``t`` the storage
    type of an integer) as the CPU's scatter does (corvid/render/c.py: _scatter_combine): nan
    wins for max/min, integers wrap through unsigned 64-bit arithmetic, bool sums are an or and
    products an and."""
    if reduce == "set":
        return v
    if reduce in ("max", "min"):  # nan in either operand wins, as numpy's maximum/minimum
        keep = ">=" if reduce == "max" else "<="
        nan = f"{d} != {d} || " if dtype.is_float else ""
        return f"({nan}{d} {keep} {v}) ? {d} : {v}"
    if dtype.is_bool:
        return f"{d} {'|' if reduce == 'sum' else '&'} {v}"
    if dtype.is_complex:  # (_COMPLEX_LIB's; the product by the plain formula, as the CPU's scatter)
        return f"{'cv_cadd' if reduce == 'sum' else 'cv_cmul_plain'}({d}, {v})"
    op = "+" if reduce == "sum" else "*"
    if dtype.is_int:
        return f"({t})((uint64_t){d} {op} (uint64_t){v})"
    return f"{d} {op} {v}"


def _scatter_types(self: GPURenderer, reduce: str, dtype: DType) -> tuple[str, str]:
    """(the buffers' element type, the type values are combined in) of a SCATTER kernel."""
    if reduce == "set":  # the bits are copied: any dtype
        return SCATTER_BITS[dtype.itemsize], SCATTER_BITS[dtype.itemsize]
    if dtype.is_complex:  # (max and min never get here: complex numbers have no order)
        return self.complex_types[dtype.name], self.complex_types[dtype.name]
    if dtype.name not in self.types:
        raise NotImplementedError(f"the {self.device} device does not support {dtype.name} yet")
    if dtype.name in ("float16", "bfloat16"):  # stored as their bits, computed in float
        return "uint16_t", "float"
    if dtype.name.startswith("float8"):  # (scatter_prim computes these in float32)
        raise NotImplementedError(f"{self.dialect} scatter: {reduce} on {dtype.name}")
    return compute_type_of(dtype), compute_type_of(dtype)


def compute_type_of(dtype: DType) -> str:
    """The C type a SCATTER kernel combines values of ``dtype`` in (bool: its byte)."""
    return "uint8_t" if dtype.is_bool else compute_type(dtype)


def _render_scatter(self: GPURenderer, name: str, reduce: str, dtype: DType, O: int, n: int, m: int, inner: int,
                   idx_inner: int, filled: float | None = None) -> str:
    """The SCATTER kernel in this dialect: one work item per column ``(o, r)`` of the output and
    range ``q`` of its rows (``R`` ranges of ``c`` rows, :meth:`GPURenderer.scatter_ranges`; work
    item ``w = (o * R + q) * inner + r``, so neighbouring work items touch neighbouring elements)
    copies its part of ``x`` (or the runtime copies all of ``x`` first: ``scatter_copies_x``),
    then combines the updates that fall in its range into it, in index order. The work item owns
    every target it touches, so the result is deterministic and race-free without atomics, and
    each target sees exactly the CPU's sequence of operations (the last ``"set"`` wins; float
    sums in index order are bitwise the CPU's). Out-of-range indices are dropped. ``filled``: there
    is no ``x``; every target is this float literal before the updates (where the work items copy
    ``x``)."""
    if filled is not None and not self.scatter_copies_x:
        raise ValueError("a filled scatter needs a template that copies x itself")
    if dtype.name in ("float64", "complex128") and reduce != "set" and not getattr(self, "fp64", True):
        raise NotImplementedError(f"{dtype.name} on the CL device needs the cl_khr_fp64 extension, "
                                  "which this OpenCL device does not report")
    st, ct = _scatter_types(self, reduce, dtype)
    L = self.long_type
    if dtype.name in ("float16", "bfloat16") and reduce != "set":
        load = self._scatter_load_narrow(dtype)
        store = self._scatter_store_narrow(dtype)
    else:
        load, store = "{p}[{i}]", "{p}[{i}] = {v};"
    idx = "idx[o * m + i]" if idx_inner == 1 else "idx[(o * m + i) * I + r]"
    combine = scatter_combine(reduce, dtype, st)
    x_at = "x[(o * n + t) * I + r]" if filled is None else scatter_fill(filled, dtype, reduce, st)
    copy = f"  for ({L} t = lo; t < hi; t++) out[(o * n + t) * I + r] = {x_at};\n" \
        if self.scatter_copies_x else "  /* (x was copied into out before the launch) */\n"
    R = self.scatter_ranges(O, n, m, inner)
    helpers = self._scatter_helpers(dtype) + (self.complex_lib(dtype) if dtype.is_complex and reduce != "set" else "")
    body = f"""{self._scatter_signature(name, st, filled is None)} {{
  const {L} O = {O}, n = {n}, m = {m}, I = {inner}, R = {R}, c = {-(-n // R)};
  const {L} w = {self._scatter_id()};
  if (w >= O * R * I) return;
  const {L} o = w / (R * I), r = w % I, lo = (w / I) % R * c, hi = lo + c < n ? lo + c : n;
{copy}  for ({L} i = 0; i < m; i++) {{
    const {L} t = {idx};
    if (t < lo || t >= hi) continue;  /* another work item's rows, or out of range (dropped) */
    const {L} e = (o * n + t) * I + r;
    const {ct} d = {load.format(p="out", i="e")};
    const {ct} v = {load.format(p="src", i="(o * m + i) * I + r")};
    {store.format(p="out", i="e", v=f"({ct})({combine})" if reduce != "set" and not dtype.is_complex else
                  combine if reduce != "set" else "v")}
  }}
}}
"""
    return self._prelude() + "typedef struct { uint64_t lo, hi; } cv_bits128;\n" + helpers + body



# --- ATTENTION: a flash-attention-style template (see corvid/nn/flash.py) -------------------------------

ATTENTION_THREADS = 64  # query (or key) rows per work-group: one per work item
ATTENTION_TILE_FLOATS = 4096  # local memory per tile of keys (or queries): 16 KiB of float32
ATTENTION_SPLIT = 4  # work items per query (or key) row, each taking every 4th key (or query) of a tile


def attention_shapes(kind: str, shapes: list[tuple[int, ...]], has_mask: bool) -> dict:
    """The sizes the attention template is specialized for, from its inputs' shapes (q, k, v,
    [mask], [do, lse, delta]): leading dims, Tq, Tk, D, Dv and the mask's strides."""
    q, k, v = shapes[:3]
    lead, tq, d, tk, dv = q[:-2], q[-2], q[-1], k[-2], v[-1]
    out = {"lead": lead, "bh": math.prod(lead), "tq": tq, "tk": tk, "d": d, "dv": dv}
    if has_mask:
        m = shapes[3]
        strides, acc = [], 1
        for size in reversed(m):
            strides.append(acc if size != 1 else 0)
            acc *= size
        strides = strides[::-1]
        out["mask_lead"] = tuple(strides[:-2])  # (0 where the mask broadcasts over that leading dim)
        out["mask_row"] = strides[-2]  # 0: one row for every query (a padding mask)
    return out


def _attention_moff(self: GPURenderer, s: dict) -> list[str]:
    """Lines computing ``moff``, the mask's offset for the work-group's (leading index) ``bh``."""
    L = self.long_type
    lines = [f"  {L} cv_rem = bh, moff = 0;"]
    for size, stride in reversed(list(zip(s["lead"], s["mask_lead"]))):
        if stride:
            lines.append(f"  moff += (cv_rem % {size}) * {stride};")
        lines.append(f"  cv_rem /= {size};")
    return lines


def _merged_rows(self: GPURenderer, S: int, rows: list[tuple[str, int, str, str]]) -> list[str]:
    """Lines that add up the ``S`` work items' partial rows of each ``(array, length, output
    offset, factor)`` of ``rows`` through local memory (``cv_sm``, whose tiles are done with) and
    store the sums, each work item ``sub`` of a row storing every ``S``-th element."""
    width = sum(n for _, n, _, _ in rows)
    lines, at = [], 0
    for arr, n, _, _ in rows:
        lines.append(f"  for (int d = 0; d < {n}; d++) cv_sm[t * {width} + {at} + d] = {arr}[d];")
        at += n
    lines += [f"  {self.barrier}", "  if (!live) return;", "  const int first = t - sub;"]
    at = 0
    for arr, n, out, factor in rows:
        lines += [f"  for (int d = sub; d < {n}; d += {S}) {{",
                  "    float o = 0.0f;",
                  f"    for (int u = 0; u < {S}; u++) o += cv_sm[(first + u) * {width} + {at} + d];",
                  f"    p0[{out} + d] = o{factor};",
                  "  }"]
        at += n
    return lines


def _render_attention(self: GPURenderer, name: str, params: dict, shapes: list[tuple[int, ...]]
                     ) -> tuple[str, int, int, int]:
    """(source, work-groups, work items per group, flops) of one attention kernel (``params["kind"]``:
    ``"fwd"``, ``"dq"`` or ``"dkdv"``), float32 throughout (see corvid/nn/flash.py).

    ``fwd`` and ``dq``: :data:`ATTENTION_SPLIT` work items per query row ``i`` (one where the
    rows they merge would not fit local memory), :data:`ATTENTION_THREADS` work items per
    work-group; the group loads tiles of keys and values into local memory (barriers around each
    tile), and each item runs through its share of the tile's keys (every ``S``-th) with its own
    running maximum ``m``, sum ``l`` and output row (``fwd``: then the row's items rescale their
    rows to the common maximum and add them up: ``out = acc / l``, and ``lse = m + log l``), or
    recomputes ``p = exp(s - lse)`` and adds ``ds * k`` into its ``dq`` row (then the items' rows
    are added up). ``dkdv``: likewise per key row, tiles of queries (their scaled rows, output
    gradients, lse and delta), adding ``p * do`` into ``dv`` and ``ds * q`` into ``dk``. The causal mask ends a group's key loop at its last
    row (``fwd``, ``dq``) or starts its query loop at its first key (``dkdv``); a boolean mask
    arrives as an additive one (0 or -inf) with its own broadcast strides. Keys whose score is
    ``-inf`` are skipped, so a query that sees none gets zeros."""
    kind, causal, has_mask = params["kind"], params["causal"], params["has_mask"]
    if kind not in ("fwd", "dq", "dkdv"):  # (the tensor-core kernels are CUDA's alone)
        raise NotImplementedError(f"the {self.dialect} renderer has no attention kernel {kind!r}")
    s = attention_shapes(kind, shapes, has_mask)
    T, L = ATTENTION_THREADS, self.long_type
    TQ, TK, D, DV, BH = s["tq"], s["tk"], s["d"], s["dv"], s["bh"]
    scale = repr(float(np.float32(params["scale"]))) + "f"
    sfx = self.math_suffix
    mask = [f"        s += p4[moff + ({L})i * {s['mask_row']} + j];"] if has_mask else []
    extra = 4 if has_mask else 3  # (where do, lse and delta start)
    rows = TQ if kind != "dkdv" else TK
    # work items per row, each over every S-th key (or query) of a tile, merged at the end (a row
    # per work item left a GPT-2 block's float32 attention, 8 x 12 heads of 256 tokens, to 24,576
    # threads on a GPU that holds 270,336); where the merged rows would not fit the tiles' local
    # memory, one
    merged = {"fwd": DV, "dq": D, "dkdv": D + DV}[kind]  # (floats per work item that the merge adds up)
    S = ATTENTION_SPLIT if T * merged <= 2 * ATTENTION_TILE_FLOATS else 1
    R = T // S  # rows per work-group
    nb = -(-rows // R)
    head = [f"{self._template_signature(name, len(shapes), T)} {{",
            f"  const int t = (int){self._local_id(0)};",
            f"  const {L} g = ({L}){self._group_id()};",
            f"  const {L} bh = g / {nb};",
            f"  const int r0 = (int)(g % {nb}) * {R};"]
    if has_mask:
        head += _attention_moff(self, s)
    if kind in ("fwd", "dq"):
        tile = max(8, min(64, ATTENTION_TILE_FLOATS // (D + DV)))
        if S > 1:  # (one array: the tiles of keys and values, then the rows the merge adds)
            body = [f"  {self.shared} float cv_sm[{max(tile * (D + DV), T * merged)}];",
                    *([f"  {self.shared} float cv_m[{T}];", f"  {self.shared} float cv_l[{T}];"] if kind == "fwd" else []),
                    f"  const int sub = t % {S};", f"  const int i = r0 + t / {S};", f"  const int live = i < {TQ};"]
        else:
            body = [f"  {self.shared} float ks[{tile * D}];", f"  {self.shared} float vs[{tile * DV}];",
                    "  const int i = r0 + t;", f"  const int live = i < {TQ};"]
        body += [
                f"  float qv[{D}];",
                f"  for (int d = 0; d < {D}; d++) qv[d] = live ? p1[(bh * {TQ} + i) * {D} + d] * {scale} : 0.0f;"]
        if kind == "fwd":
            body += [f"  float acc[{DV}];", f"  for (int d = 0; d < {DV}; d++) acc[d] = 0.0f;",
                     "  float m = -__builtin_inff(), l = 0.0f;"]
        else:
            body += [f"  float dov[{DV}], dq[{D}];",
                     f"  for (int d = 0; d < {DV}; d++) dov[d] = live ? p{extra + 1}[(bh * {TQ} + i) * {DV} + d] : 0.0f;",
                     f"  for (int d = 0; d < {D}; d++) dq[d] = 0.0f;",
                     f"  const float li = live ? p{extra + 2}[bh * {TQ} + i] : 0.0f;",
                     f"  const float di = live ? p{extra + 3}[bh * {TQ} + i] : 0.0f;"]
        end = f"(r0 + {R} < {TK} ? r0 + {R} : {TK})" if causal else str(TK)
        body += [f"  for (int j0 = 0; j0 < {end}; j0 += {tile}) {{",
                 f"    for (int e = t; e < {tile * D}; e += {T}) {{ const int jj = j0 + e / {D}; "
                 f"ks[e] = jj < {TK} ? p2[(bh * {TK} + jj) * {D} + e % {D}] : 0.0f; }}",
                 f"    for (int e = t; e < {tile * DV}; e += {T}) {{ const int jj = j0 + e / {DV}; "
                 f"vs[e] = jj < {TK} ? p3[(bh * {TK} + jj) * {DV} + e % {DV}] : 0.0f; }}",
                 f"    {self.barrier}",
                 "    if (live) {",
                 f"      for (int jj = {'sub' if S > 1 else '0'}; jj < {tile}; jj += {S}) {{",
                 "        const int j = j0 + jj;",
                 f"        if (j >= {TK}{' || j > i' if causal else ''}) break;",
                 "        float s = 0.0f;",
                 f"        for (int d = 0; d < {D}; d++) s += qv[d] * ks[jj * {D} + d];",
                 *mask,
                 "        if (s == -__builtin_inff()) continue;"]
        if kind == "fwd":
            body += ["        const float mn = s > m ? s : m;",
                     f"        const float c = exp{sfx}(m - mn), p = exp{sfx}(s - mn);",
                     "        l = l * c + p;",
                     f"        for (int d = 0; d < {DV}; d++) acc[d] = acc[d] * c + p * vs[jj * {DV} + d];",
                     "        m = mn;"]
        else:
            body += [f"        const float p = exp{sfx}(s - li);",
                     "        float dp = 0.0f;",
                     f"        for (int d = 0; d < {DV}; d++) dp += dov[d] * vs[jj * {DV} + d];",
                     "        const float ds = p * (dp - di);",
                     f"        for (int d = 0; d < {D}; d++) dq[d] += ds * ks[jj * {D} + d];"]
        body += ["      }", "    }", f"    {self.barrier}", "  }"]
        if S > 1 and kind == "fwd":  # the row's S partial maxima, sums and rows, rescaled to their common maximum
            body += ["  cv_m[t] = m;", "  cv_l[t] = l;", f"  {self.barrier}",
                     "  const int first = t - sub;",
                     "  float mx = cv_m[first];",
                     f"  for (int u = 1; u < {S}; u++) mx = cv_m[first + u] > mx ? cv_m[first + u] : mx;",
                     "  float sum = 0.0f;",
                     f"  for (int u = 0; u < {S}; u++) if (cv_m[first + u] != -__builtin_inff()) "
                     f"sum += cv_l[first + u] * exp{sfx}(cv_m[first + u] - mx);",
                     f"  const float c = m == -__builtin_inff() ? 0.0f : exp{sfx}(m - mx);",
                     f"  for (int d = 0; d < {DV}; d++) cv_sm[t * {DV} + d] = acc[d] * c;",
                     f"  {self.barrier}",
                     "  if (!live) return;",
                     "  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;",
                     f"  for (int d = sub; d < {DV}; d += {S}) {{",
                     "    float o = 0.0f;",
                     f"    for (int u = 0; u < {S}; u++) o += cv_sm[(first + u) * {DV} + d];",
                     f"    p0[(bh * {TQ} + i) * {DV} + d] = o * inv;",
                     "  }",
                     f"  if (sub == 0) p0[{BH * TQ * DV} + bh * {TQ} + i] = sum > 0.0f ? mx + log{sfx}(sum) : -__builtin_inff();"]
        elif kind == "fwd":
            body += ["  if (!live) return;",
                     "  const float inv = l > 0.0f ? 1.0f / l : 0.0f;",
                     f"  for (int d = 0; d < {DV}; d++) p0[(bh * {TQ} + i) * {DV} + d] = acc[d] * inv;",
                     f"  p0[{BH * TQ * DV} + bh * {TQ} + i] = l > 0.0f ? m + log{sfx}(l) : -__builtin_inff();"]
        elif S > 1:  # the row's S partial gradients added up
            body += _merged_rows(self, S, [("dq", D, f"(bh * {TQ} + i) * {D}", f" * {scale}")])
        else:
            body += ["  if (!live) return;",
                     f"  for (int d = 0; d < {D}; d++) p0[(bh * {TQ} + i) * {D} + d] = dq[d] * {scale};"]
        flops = 2 * BH * TQ * TK * (D + DV) * (1 if kind == "fwd" else 2) // (2 if causal else 1)
    else:  # dkdv
        tile = max(8, min(64, ATTENTION_TILE_FLOATS // (D + DV + 2)))
        if S > 1:  # (one array: the tiles of queries, output gradients, lse and delta, then the merge's rows)
            body = [f"  {self.shared} float cv_sm[{max(tile * (D + DV + 2), T * merged)}];",
                    f"  const int sub = t % {S};", f"  const int j = r0 + t / {S};", f"  const int live = j < {TK};"]
        else:
            body = [f"  {self.shared} float qs[{tile * D}];", f"  {self.shared} float dos[{tile * DV}];",
                    f"  {self.shared} float ls[{tile}];", f"  {self.shared} float dls[{tile}];",
                    "  const int j = r0 + t;", f"  const int live = j < {TK};"]
        body += [
                f"  float kv[{D}], vv[{DV}], dk[{D}], dv[{DV}];",
                f"  for (int d = 0; d < {D}; d++) {{ kv[d] = live ? p2[(bh * {TK} + j) * {D} + d] : 0.0f; dk[d] = 0.0f; }}",
                f"  for (int d = 0; d < {DV}; d++) {{ vv[d] = live ? p3[(bh * {TK} + j) * {DV} + d] : 0.0f; dv[d] = 0.0f; }}",
                f"  for (int i0 = {'r0' if causal else '0'}; i0 < {TQ}; i0 += {tile}) {{",
                f"    for (int e = t; e < {tile * D}; e += {T}) {{ const int ii = i0 + e / {D}; "
                f"qs[e] = ii < {TQ} ? p1[(bh * {TQ} + ii) * {D} + e % {D}] * {scale} : 0.0f; }}",
                f"    for (int e = t; e < {tile * DV}; e += {T}) {{ const int ii = i0 + e / {DV}; "
                f"dos[e] = ii < {TQ} ? p{extra + 1}[(bh * {TQ} + ii) * {DV} + e % {DV}] : 0.0f; }}",
                f"    for (int e = t; e < {tile}; e += {T}) {{ const int ii = i0 + e; "
                f"ls[e] = ii < {TQ} ? p{extra + 2}[bh * {TQ} + ii] : 0.0f; dls[e] = ii < {TQ} ? p{extra + 3}[bh * {TQ} + ii] : 0.0f; }}",
                f"    {self.barrier}",
                "    if (live) {",
                f"      for (int ii = {'sub' if S > 1 else '0'}; ii < {tile}; ii += {S}) {{",
                "        const int i = i0 + ii;",
                f"        if (i >= {TQ}) break;",
                *(["        if (i < j) continue;"] if causal else []),
                "        float s = 0.0f;",
                f"        for (int d = 0; d < {D}; d++) s += qs[ii * {D} + d] * kv[d];",
                *mask,
                "        if (s == -__builtin_inff()) continue;",
                f"        const float p = exp{sfx}(s - ls[ii]);",
                f"        for (int d = 0; d < {DV}; d++) dv[d] += p * dos[ii * {DV} + d];",
                "        float dp = 0.0f;",
                f"        for (int d = 0; d < {DV}; d++) dp += dos[ii * {DV} + d] * vv[d];",
                "        const float ds = p * (dp - dls[ii]);",
                f"        for (int d = 0; d < {D}; d++) dk[d] += ds * qs[ii * {D} + d];",
                "      }", "    }", f"    {self.barrier}", "  }"]
        if S > 1:  # the key row's S partial gradients added up
            body += _merged_rows(self, S, [("dk", D, f"(bh * {TK} + j) * {D}", ""),
                                           ("dv", DV, f"{BH * TK * D} + (bh * {TK} + j) * {DV}", "")])
        else:
            body += ["  if (!live) return;",
                     f"  for (int d = 0; d < {D}; d++) p0[(bh * {TK} + j) * {D} + d] = dk[d];",
                     f"  for (int d = 0; d < {DV}; d++) p0[{BH * TK * D} + (bh * {TK} + j) * {DV} + d] = dv[d];"]
        flops = 4 * BH * TQ * TK * (D + DV) // (2 if causal else 1)
    if S > 1 and kind != "dkdv":  # (the tiles in the one array: ks at its start, vs after the keys)
        body = [line.replace("ks[", "cv_sm[").replace("vs[", f"cv_sm[{tile * D} + ") for line in body]
    elif S > 1:  # (qs, dos, ls and dls one after another)
        body = [line.replace("dls[", f"cv_sm[{tile * (D + DV + 1)} + ").replace("dos[", f"cv_sm[{tile * D} + ")
                .replace("qs[", "cv_sm[").replace(" ls[", f" cv_sm[{tile * (D + DV)} + ")
                .replace("- ls[", f"- cv_sm[{tile * (D + DV)} + ") for line in body]
    text = "\n".join(head + body + ["}", ""])
    for c, spelled in self.spellings:
        text = text.replace(c, spelled)
    return self._prelude() + text, BH * nb, T, flops


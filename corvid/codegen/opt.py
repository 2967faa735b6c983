"""Optimization actions on a kernel, and the default heuristics that choose them.

An action is a small transformation that keeps results identical:

* ``upcast(k, axis, amount)``: split output loop ``axis`` into an outer loop and ``amount``
  copies of the body (register tiling). Reduces in the copies share their loop variables, so the
  linearizer runs them in one loop with ``amount`` accumulators that the C compiler keeps in
  (vector) registers.
* ``vectorize(k, axis, width)``: the output loop ``axis`` becomes ``outer*width + lane``; values
  that depend on ``lane`` are vectors of ``width`` lanes (contiguous loads and stores, vector
  arithmetic and accumulators). Only applied where every lane-dependent access is contiguous
  and every lane-dependent op has a vector form.
* ``reorder(k, order)``: permute the output loops.

``apply_heuristics`` picks actions without search. For now it targets kernels where a reduce runs
inside the innermost output loop and reads an input with a stride along that loop (a matmul, or a
sum over a leading axis): it tiles that loop and the one before it so each loaded value is reused
from registers. The optimizer issue extends this with more actions and beam search.
"""

from __future__ import annotations

import functools

from ..graph.node import Op
from ..graph.symbolic import Lin, Num, Sym, Var
from .ir import Kernel, Loop, Store, U, substitute_arg

# register tile of a matmul-like kernel: ROW_TILES rows (tried in order, the first that divides the
# row count wins) x COL_TILES vectors. 8x2 keeps 16 vector accumulators and, per step of the reduce,
# loads 2 vectors of the right operand and 8 scalars of the left one: measured on a 2-core AVX-512
# machine it runs 1024x1024 f32 at numpy's speed, where 4x1 reached a fifth of it.
ROW_TILES = (8, 6, 4, 2)
COL_TILES = (2,)
SMALL_UPCAST = 16  # a matmul-like kernel's innermost output loop up to this size is unrolled whole
VECTOR_OPS = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.NEG, Op.MAX, Op.MIN})


@functools.cache
def vector_bytes() -> int:
    """Native SIMD width of this CPU in bytes (64 with AVX-512, else 32)."""
    try:
        with open("/proc/cpuinfo") as f:
            return 64 if " avx512f" in f.read() else 32
    except OSError:
        return 32


def _copy_into(dst: Kernel, src: Kernel, mapping: dict[Var, Sym], memo_out: dict[int, U]) -> None:
    memo: dict[int, U] = {}
    for u in src.values():
        memo[id(u)] = dst.u(u.op, u.dtype, tuple(memo[id(s)] for s in u.src), substitute_arg(u, mapping))
    memo_out.update(memo)


def upcast(k: Kernel, axis: int, amount: int) -> Kernel:
    """Tile output loop ``axis`` by ``amount`` (which must divide its size)."""
    lp = k.loops[axis]
    if lp.size % amount:
        raise ValueError(f"upcast: {amount} does not divide loop size {lp.size}")
    outer = Var(f"{lp.var.name}u", 0, lp.size // amount - 1)
    keep = [Loop(outer, lp.size // amount, lp.kind)] if amount < lp.size else []  # whole: no loop left
    loops = k.loops[:axis] + keep + k.loops[axis + 1:]
    out = Kernel(k.name, k.params, loops, vector_width=k.vector_width)
    for i in range(amount):
        memo: dict[int, U] = {}
        mapping = {lp.var: outer * amount + i if keep else Num(i)}
        _copy_into(out, k, mapping, memo)
        out.stores += [Store(s.param, s.index.substitute(mapping), memo[id(s.value)]) for s in k.stores]
    return out


def lane_var(width: int) -> Var:
    return Var("lane", 0, width - 1)


def _contiguous_in(expr: Sym, lane: Var) -> bool:
    return expr.substitute({lane: Num(0)}) + lane == expr


def can_vectorize(k: Kernel, axis: int, width: int) -> bool:
    """Whether ``vectorize(k, axis, width)`` would give only contiguous vector accesses and vector ops."""
    lp = k.loops[axis]
    if lp.size % width or len(k.params) == 0:
        return False
    lane = lane_var(width)
    trial = vectorize(k, axis, width)
    vec: set[int] = set()
    for u in trial.values():
        dep = any(lane in s.vars() for s in u.syms()) or any(id(x) in vec for x in u.src)
        if not dep:
            continue
        vec.add(id(u))
        if u.dtype.name not in ("float32", "float64"):
            return False
        if u.op == "load":
            if u.arg[2] is not None or not _contiguous_in(u.arg[1], lane):
                return False
        elif u.op == "reduce":
            if u.arg[0] != "sum":
                return False
        elif not (u.op == "alu" and u.arg in VECTOR_OPS):
            return False
    return all(_contiguous_in(st.index, lane) and k.params[st.param].dtype.name in ("float32", "float64")
               for st in trial.stores)


def vectorize(k: Kernel, axis: int, width: int) -> Kernel:
    """Make output loop ``axis`` an outer loop of vectors of ``width`` lanes."""
    lp = k.loops[axis]
    outer = Var(f"{lp.var.name}v", 0, lp.size // width - 1)
    loops = k.loops[:axis] + [Loop(outer, lp.size // width, lp.kind)] + k.loops[axis + 1:]
    out = Kernel(k.name, k.params, loops, vector_width=width)
    memo: dict[int, U] = {}
    mapping = {lp.var: outer * width + lane_var(width)}
    _copy_into(out, k, mapping, memo)
    out.stores = [Store(s.param, s.index.substitute(mapping), memo[id(s.value)]) for s in k.stores]
    return out


def reorder(k: Kernel, order: list[int]) -> Kernel:
    """Permute the output loops (``order[i]`` is the old position of new loop ``i``)."""
    return Kernel(k.name, k.params, [k.loops[i] for i in order], k.stores, k._cse, k.vector_width)


def _stride(expr: Sym, v: Var) -> int:
    if expr == v:
        return 1
    if isinstance(expr, Lin):
        return expr.terms.get(v, 0)
    return 0


def apply_heuristics(k: Kernel) -> Kernel:
    """Choose and apply actions for ``k`` (no search)."""
    if not k.loops or len(k.stores) != 1:
        return k
    inner = k.loops[-1]
    store = next((u for u in k.values() if u.op == "reduce"), None)
    if store is None or store.arg[0] != "sum" or not store.dtype.is_float:
        return k
    red_vars = [lp.var for lp in store.arg[1]]
    loads = [u for u in k.values() if u.op == "load" and u.arg[2] is None]
    # a matmul-like reduce: some load walks the reduce axis with a stride, another is contiguous in the output
    strided = any(_stride(u.arg[1], r) > 1 for u in loads for r in red_vars)
    contiguous_out = any(_stride(u.arg[1], inner.var) == 1 for u in loads)
    width = vector_bytes() // store.dtype.itemsize
    if strided and not can_vectorize(k, len(k.loops) - 1, width) and 1 < inner.size <= SMALL_UPCAST:
        # a narrow output (a 10-class head): all its columns share one pass over the reduce, with
        # one accumulator each, instead of one strided pass per column
        return upcast(k, len(k.loops) - 1, inner.size)
    if not (strided and contiguous_out) or not can_vectorize(k, len(k.loops) - 1, width):
        return k
    # rows: the innermost output loop that the vector (column) loads do not depend on, so one
    # vector load serves every row of the tile (in a matmul, the loop right above the columns;
    # in a batched DFT stage written in natural order it can be further out)
    vector_loads = [u for u in loads if _stride(u.arg[1], inner.var) == 1]
    row_var = next((lp.var for lp in reversed(k.loops[:-1])
                    if not any(lp.var in u.arg[1].vars() for u in vector_loads)
                    and any(lp.size % r == 0 for r in ROW_TILES)), None)
    k = vectorize(k, len(k.loops) - 1, width)
    cols = next((c for c in COL_TILES if k.loops[-1].size % c == 0), 1)
    whole = cols == k.loops[-1].size  # the tile takes every column: the vector loop disappears
    if cols > 1:
        k = upcast(k, len(k.loops) - 1, cols)
    adjacent = len(k.loops) - (1 if whole else 2)  # the loop right above the columns
    row_axis = next((i for i, lp in enumerate(k.loops) if lp.var == row_var), adjacent)
    rows = next((r for r in ROW_TILES if row_axis >= 0 and k.loops[row_axis].size % r == 0), 1)
    if rows > 1:
        n_loops = len(k.loops)
        k = upcast(k, row_axis, rows)
        if not whole and row_axis == adjacent and len(k.loops) == n_loops:  # a row and a column loop are left
            # walk column panels outermost: a panel of the right operand stays in cache while all rows pass
            order = list(range(len(k.loops) - 2)) + [len(k.loops) - 1, len(k.loops) - 2]
            k = reorder(k, order)
    return k

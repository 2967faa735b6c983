"""Optimization actions on a kernel, and the default heuristics that choose them.

An action (:class:`~corvid.codegen.ir.Opt`) is a small transformation that keeps results equal
(identical, except that ``vectorize``, ``group``, ``upcast_reduce`` and ``vector_reduce`` reassociate a float
sum). Apply one with :func:`apply_opt`; a kernel records the actions applied to it in ``kernel.opts``. ``axis``
counts the kernel's output loops (outermost first), except for ``unroll``, ``group``,
``group_local``, ``upcast_reduce`` and ``vector_reduce``, whose ``axis`` counts its reduce loops
(:func:`reduce_loops`).

* ``upcast(axis, amount)``: split output loop ``axis`` into an outer loop and ``amount`` copies of
  the body (register tiling). Reduces in the copies share their loop variables, so the
  linearizer runs them in one loop with ``amount`` accumulators that the C compiler keeps in
  (vector) registers.
* ``vectorize(axis, width)``: the output loop ``axis`` becomes ``outer*width + lane``; values
  that depend on ``lane`` are vectors of ``width`` lanes (contiguous loads and stores, vector
  arithmetic and accumulators). Only where every lane-dependent access is contiguous and every
  lane-dependent op has a vector form.
* ``permute(0, order)``: reorder the output loops (``order[i]`` is the old position of loop ``i``).
* ``split(axis, amount)``: output loop ``axis`` becomes two loops, ``amount`` iterations inside
  (loop tiling); ``local(axis, amount)`` the same with a ``"local"`` inner loop, the work-group
  dimension of GPU-style backends (the C renderer runs it as a plain loop).
* ``unroll(axis, amount)``: the compiler unrolls reduce loop ``axis`` ``amount`` times.
* ``group(axis, amount)``: reduce loop ``axis`` becomes partial reductions over chunks of
  ``amount`` iterations, then a reduction of the partials (two-step reduce).
  ``group_local(axis, amount)`` the same with ``amount`` partials that the work items of a
  work-group compute side by side and combine in local memory (GPU-style backends).
* ``rows_local(axis, amount)``: the innermost output loop ``axis``, which every reduce is hoisted
  out of (a softmax's columns), split across ``amount`` work items that also share every reduce
  loop (GPU-style backends only: a work-group per row instead of a work item).
* ``reduces_local(0, amount)``: every reduce of a kernel whose several reduces follow one another
  over a row (a log-sum-exp's maximum, then its sum) shared by the same ``amount`` work items
  (GPU-style backends only: one work-group reduces each in turn).
* ``upcast_reduce(axis, amount)``: reduce loop ``axis`` split into ``amount`` contiguous chunks
  reduced side by side in one loop (one accumulator per chunk, combined pairwise in order
  afterwards): independent add chains instead of one. Float32/float64 sums, maxima and minima.
* ``vector_reduce(axis, amount)``: reduce loop ``axis`` over groups of ``amount`` neighbours, each
  combined pairwise before it joins the one accumulator: each step reads ``amount`` neighbours, a
  GPU's vector load (CUDA's wide reduces: see :func:`gpu_heuristics`). The same dtypes.
* ``stream(axis, keep_kib)``: a full sum reads its input past the caches (non-temporal loads),
  except for the last ``keep_kib`` KiB, which it reads through them: data larger than the last-level
  cache would only evict what the caches hold (the caller's working set, the part that the next
  read of the same data could find there). Only a kernel with no output loop whose every reduce is
  a float32/float64 sum of a contiguous load (the C renderer on x86 with SSE4.1 or later; other
  renderers and CPUs read as usual). Its loop adds a thread's whole share into vector
  accumulators, so a sum long enough to be cascaded (:mod:`corvid.codegen.cascade`, every sum of
  2048 elements or more) drops it: the heuristics no longer choose it, until the cascade's
  innermost runs read with non-temporal loads themselves.
* ``pad(axis, multiple)``: round output loop ``axis`` up to a multiple of ``multiple`` (so an
  awkward size such as 1023 takes a tile of 8); the extra iterations' loads and stores are gated.
* ``thread(axis)``: output loop ``axis`` is the one that runs across threads; ``thread(-1)``
  keeps the kernel on one thread. Without it the linearizer chooses.

:class:`OptError` says an action does not apply (an axis out of range, an amount that does not
divide, lanes that would not be contiguous). ``apply_heuristics`` picks actions without search;
:mod:`corvid.codegen.search` searches over them.
"""

from __future__ import annotations

import functools
import os
import math
from collections.abc import Callable

from ..graph.node import Op
from ..graph.symbolic import (Dim, Lin, Num, Prod, Sym, SymbolicSizeError, Var, hint, is_symbolic, loop_var, strict_sizes,
                              sym_and, upper)
from .ir import Kernel, Loop, Opt, U, substitute_arg

# register tile of a matmul-like kernel: ROW_TILES rows (the largest that divides the row count and
# fits the accumulator budget wins) x COL_TILES vectors (the first that divides the vector columns).
# 8x2 keeps 16 vector accumulators and, per step of the reduce, loads 2 vectors of the right
# operand and 8 scalars of the left one: measured on a 2-core AVX-512 machine it runs 1024x1024 f32
# at numpy's speed, where 4x1 reached a fifth of it. With 16 vector registers (AVX2) 6x2 fits.
ROW_TILES = (8, 6, 4, 3, 2)
COL_TILES = (2, 3, 5)
SPARE_REGISTERS = 4  # vector registers a tile leaves for the column loads and the broadcast row value
TRANSPOSE_TILE = 16  # a transposing copy walks tiles of this many elements on each side
SMALL_UPCAST = 16  # a matmul-like kernel's innermost output loop up to this size is unrolled whole
# ... and up to this size when its contiguous operand holds narrow integers converted in the kernel
# (quantized weights in blocks of rows, corvid.quant.BLOCK_ROWS): one accumulator per output, which
# the C compiler's straight-line vectorizer packs into vectors, as it converts the integers; with
# vector types (vectorize) it converted them lane by lane. Measured on 2 cores (Zen 4) at 8192x2048
# int4, one token: 0.29 ms, against 4.0 ms for the float matmul's register tile and 3.1 ms for
# half the block unrolled.
CONVERTED_BLOCK = 64
# a GPU-style kernel with fewer outputs than this runs too few work items to fill a device (one
# per output) when its reduces are long: the work items of a group then share each reduce
GPU_MANY_OUTPUTS = 4096
GPU_TILE = 8  # a GPU-style work item's register tile: up to 8 x 8 outputs
GPU_MIN_ITEMS = 256  # ... while at least this many work items are left
TILE_REUSE_RATIO = 16  # ... for a reused operand that touches at least 1/16 as many elements as the largest other
GPU_ROW_MIN = 128  # a row (softmax, norm) this long is shared by a work-group's items (rows_local)
# a full sum of at least REDUCE_STREAMS_MIN elements reads REDUCE_STREAMS chunks side by side
REDUCE_STREAMS = 2
REDUCE_STREAMS_MIN = 1 << 12
VECTOR_OPS = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.NEG, Op.MAX, Op.MIN})


class OptError(ValueError):
    """An optimization action that does not apply to this kernel."""


@functools.cache
def _has_avx512() -> bool:
    """Whether kernels are compiled for AVX-512 (the compiler's target; /proc/cpuinfo when no
    compiler says)."""
    target = _toolchain_bits()[0]
    if target is not None:
        return target >= 512
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f" in f.read()
    except OSError:
        return False


def _toolchain_bits() -> tuple[int | None, int | None]:
    """(the target's widest vectors, the tuning's preferred width) in bits, as the compiler says."""
    from ..runtime.compiler import CompilerNotFoundError, find_toolchain

    try:
        tc = find_toolchain()
    except CompilerNotFoundError:
        return None, None
    return tc.target_vector_bits, tc.preferred_vector_bits


@functools.cache
def vector_bytes() -> int:
    """The SIMD width, in bytes, of the vectors kernels are written with: the widest the
    compiler's target has (64 with AVX-512, 32 with AVX; from its predefined macros, so
    ``-march=x86-64-v3`` on an AVX-512 CPU gives 32), or less where its tuning prefers narrower
    vectors (gcc's ``-mprefer-vector-width``: 256 bits for Intel's AVX-512 cores), since gcc
    splits wider vector types into slow code there (a 1024^2 matmul: 15 GFLOP/s instead of 435).
    At least 32: narrower targets still get 32-byte GNU vectors, split by the compiler."""
    target, preferred = _toolchain_bits()
    width = 64 if _has_avx512() else 32
    if target is not None and target >= 256:
        width = min(width, target // 8)
    return min(width, preferred // 8) if preferred and preferred >= 128 else width


# No x86-64 CPU gives a core more than 12 MiB of last-level cache (AMD's stacked-cache parts: 96 MiB
# for 8 cores; most have 1.5-4 MiB), so a larger share per core is not this process's to use
MAX_LLC_PER_CORE = 16 << 20


@functools.cache
def cache_bytes(level: int) -> int:
    """This CPU's data (or unified) cache size at ``level`` (1, 2, 3), from sysfs; typical sizes
    (32 KiB, 1 MiB, 32 MiB) where the system does not say.

    The last level is bounded by MAX_LLC_PER_CORE times the cores this process may run on: in a VM sysfs
    reports the host's whole cache (a 2-vCPU Intel VM said 480 MiB), which the host's other cores
    share, and decisions sized by it (when to pack a matmul operand: ``corvid/ops/reduce.py``)
    then picked the layouts of a 480 MiB cache (1024^2..4096^2 matmuls at 39-64 GFLOP/s)."""
    size = _sysfs_cache_bytes(level)
    if level >= 3:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        size = min(size, MAX_LLC_PER_CORE * cores)
    return size


def _sysfs_cache_bytes(level: int) -> int:
    import glob

    for folder in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(f"{folder}/level") as f:
                lvl = int(f.read())
            with open(f"{folder}/type") as f:
                kind = f.read().strip()
            with open(f"{folder}/size") as f:
                text = f.read().strip().upper()
        except (OSError, ValueError):
            continue
        if lvl == level and kind in ("Data", "Unified"):
            unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            try:
                return int(text.rstrip("KMG")) * unit
            except ValueError:
                break
    return {1: 32 << 10, 2: 1 << 20}.get(level, 32 << 20)


@functools.cache
def vector_registers() -> int:
    """Vector registers of this CPU (32 with AVX-512, at any vector width: AVX-512VL gives 256-bit
    vectors the same 32; else 16)."""
    return 32 if _has_avx512() else 16


def _copy_into(dst: Kernel, src: Kernel, mapping: dict[Var, Sym], memo_out: dict[int, U]) -> None:
    memo: dict[int, U] = {}
    for u in src.values():
        memo[id(u)] = dst.u(u.op, u.dtype, tuple(memo[id(s)] for s in u.src), substitute_arg(u, mapping))
    memo_out.update(memo)


def _output_loop(k: Kernel, axis: int, amount: int | None = None) -> Loop:
    if not 0 <= axis < len(k.loops):
        raise OptError(f"axis {axis} is not an output loop of a kernel with {len(k.loops)}")
    lp = k.loops[axis]
    if amount is not None and (amount < 1 or lp.size % amount):
        raise OptError(f"{amount} does not divide loop {axis} of size {lp.size}")
    return lp


def reduce_loops(k: Kernel) -> list[Loop]:
    """The kernel's reduce loops, each once, in the order its values use them."""
    seen: dict[Var, Loop] = {}
    for lp in k.reduce_loops():
        seen.setdefault(lp.var, lp)
    return list(seen.values())


def _reduce_loop(k: Kernel, axis: int) -> Loop:
    loops = reduce_loops(k)
    if not 0 <= axis < len(loops):
        raise OptError(f"axis {axis} is not a reduce loop of a kernel with {len(loops)}")
    return loops[axis]


def upcast(k: Kernel, axis: int, amount: int) -> Kernel:
    """Tile output loop ``axis`` by ``amount`` (which must divide its size)."""
    lp = _output_loop(k, axis, amount)
    outer = loop_var(f"{lp.var.name}u", lp.size // amount)
    # (whole: no loop left; a symbolic size keeps its loop, which may run once)
    keep = [Loop(outer, lp.size // amount, lp.kind)] if is_symbolic(lp.size) or amount < lp.size else []
    out = k.empty_like(k.loops[:axis] + keep + k.loops[axis + 1:])
    for i in range(amount):
        memo: dict[int, U] = {}
        mapping = {lp.var: outer * amount + i if keep else Num(i)}
        _copy_into(out, k, mapping, memo)
        out.stores += [s.moved(mapping, memo[id(s.value)]) for s in k.stores]
    return out


def lane_var(width: int) -> Var:
    return Var("lane", 0, width - 1)


def _contiguous_in(expr: Sym, lane: Var) -> bool:
    return expr.substitute({lane: Num(0)}) + lane == expr


def can_vectorize(k: Kernel, axis: int, width: int) -> bool:
    """Whether ``vectorize(k, axis, width)`` would give a kernel the renderers can write: its
    stores contiguous float vectors, its lane-dependent reduces float sums. Other lane-dependent
    values need no vector form: a value with none (``exp``, a comparison, a gated or strided
    load) is computed lane by lane (see ``render/c.py``), so whether that pays is the
    heuristics' and the beam search's call."""
    if not 0 <= axis < len(k.loops) or k.vector_width > 1:
        return False
    lp = k.loops[axis]
    if width < 2 or lp.size % width or len(k.params) == 0:
        return False
    lane = lane_var(width)
    trial = _vectorized(k, axis, width)
    vec: set[int] = set()
    for u in trial.values():
        dep = any(lane in s.vars() for s in u.syms()) or any(id(x) in vec for x in u.src)
        if not dep:
            continue
        vec.add(id(u))
        if u.op == "reduce" and (u.arg[0] not in ("sum", "max", "min") or u.dtype.name not in ("float32", "float64")):
            return False
    # stores of float vectors: contiguous ones whole, strided ones lane by lane
    return all(k.params[st.param].dtype.name in ("float32", "float64")
               and (st.gate is None or lane not in st.gate.vars()) for st in trial.stores)


def _vectorized(k: Kernel, axis: int, width: int) -> Kernel:
    lp = k.loops[axis]
    outer = loop_var(f"{lp.var.name}v", lp.size // width)
    out = k.empty_like(k.loops[:axis] + [Loop(outer, lp.size // width, lp.kind)] + k.loops[axis + 1:], width)
    memo: dict[int, U] = {}
    mapping = {lp.var: outer * width + lane_var(width)}
    _copy_into(out, k, mapping, memo)
    out.stores = [s.moved(mapping, memo[id(s.value)]) for s in k.stores]
    return out


def vectorize(k: Kernel, axis: int, width: int) -> Kernel:
    """Make output loop ``axis`` an outer loop of vectors of ``width`` lanes."""
    if not can_vectorize(k, axis, width):
        raise OptError(f"loop {axis} does not vectorize by {width} (non-contiguous lanes, an op without a "
                       "vector form, or an already vectorized kernel)")
    return _vectorized(k, axis, width)


def permute(k: Kernel, order: tuple[int, ...]) -> Kernel:
    """Permute the output loops (``order[i]`` is the old position of new loop ``i``)."""
    if sorted(order) != list(range(len(k.loops))):
        raise OptError(f"{order} is not a permutation of the {len(k.loops)} output loops")
    return Kernel(k.name, k.params, [k.loops[i] for i in order], k.stores, k._cse, k.vector_width, k.opts,
                  k.parallel, k.dims_param)


def split(k: Kernel, axis: int, amount: int, kind: str | None = None) -> Kernel:
    """Output loop ``axis`` as an outer loop and an inner one of ``amount`` iterations."""
    lp = _output_loop(k, axis, amount)
    if not 1 < amount < lp.size:
        raise OptError(f"split: amount {amount} must be between 1 and the loop size {lp.size}, exclusive")
    o, i = Var(f"{lp.var.name}o", 0, lp.size // amount - 1), Var(f"{lp.var.name}i", 0, amount - 1)
    loops = k.loops[:axis] + [Loop(o, lp.size // amount, lp.kind), Loop(i, amount, kind or lp.kind)] + k.loops[axis + 1:]
    out = k.substitute({lp.var: o * amount + i}, loops)
    if out.parallel == lp.var:
        out.parallel = o
    return out


def local(k: Kernel, axis: int, amount: int) -> Kernel:
    """``split`` with a ``"local"`` (work-group) inner loop."""
    return split(k, axis, amount, "local")


def unroll(k: Kernel, axis: int, amount: int) -> Kernel:
    """Ask the compiler to unroll reduce loop ``axis`` ``amount`` times."""
    lp = _reduce_loop(k, axis)
    if not 1 < amount <= lp.size:
        raise OptError(f"unroll: amount {amount} must be in (1, {lp.size}]")
    new = Loop(lp.var, lp.size, lp.kind, amount)
    swap = {id(u): tuple(new if x.var == lp.var else x for x in u.arg[1]) for u in k.values() if u.op == "reduce"}
    return k.substitute({}, k.loops, swap)


def group(k: Kernel, axis: int, amount: int) -> Kernel:
    """Reduce loop ``axis`` as partial reductions over chunks of ``amount``, then a reduction of
    the partials: every reduce over that loop becomes an outer reduce of an inner one."""
    return _two_step(k, axis, amount, local=False)


def group_local(k: Kernel, axis: int, amount: int) -> Kernel:
    """Reduce loop ``axis`` shared by ``amount`` work items of a work-group: item ``l`` reduces
    the elements ``l, l + amount, l + 2*amount, ...`` (neighbouring items read neighbouring
    elements), then the partials meet in local memory. The partial loop is a ``"local"`` reduce
    loop: GPU-style renderers give each work item one of its iterations and combine through
    local memory and barriers; the C renderer runs it as a plain loop."""
    return _two_step(k, axis, amount, local=True)


def rows_local(k: Kernel, axis: int, amount: int) -> Kernel:
    """The work items of a work-group share a row: output loop ``axis``, which every reduce is
    hoisted out of (a softmax's or a norm's columns, whose row max, sum or mean each column
    reads), is split as ``local`` splits it (item ``l`` takes the columns ``l, l + amount, ...``),
    and every reduce loop that ``amount`` divides is shared by the same ``amount`` work items as
    ``group_local`` shares one. GPU-style renderers give both the same work-item id (see
    :func:`corvid.render.gpu.launch`): the items reduce the row together through local memory,
    then each computes and stores its own columns, where otherwise one work item computed the
    whole row. GPU-style devices only: the C renderer cannot run it."""
    from .linearize import placement

    _output_loop(k, axis)  # (an OptError for an axis out of range)
    if axis != len(k.loops) - 1 or any(x.kind == "local" for x in k.loops + k.reduce_loops()):
        raise OptError("rows_local: the innermost output loop of a kernel without work-group loops")
    values, place = placement(k)
    reduces = [u for u in values if u.op == "reduce"]
    if not reduces or any(len(place[id(u)]) > axis for u in reduces):
        raise OptError("rows_local: every reduce must be hoisted out of the loop")
    shared = [x for x in reduce_loops(k) if x.size % amount == 0 and x.size > amount]
    if not shared:
        raise OptError(f"rows_local: no reduce loop is a multiple of {amount} (and longer)")
    out = split(k, axis, amount, "local")
    for x in shared:
        out = _two_step(out, next(i for i, y in enumerate(reduce_loops(out)) if y.var == x.var), amount, True, many=True)
    return out


def reduces_local(k: Kernel, axis: int, amount: int) -> Kernel:
    """Every reduce shared by the same ``amount`` work items, as ``group_local`` shares one: each
    reduce's longest loop that ``amount`` divides (``axis`` is unused: 0). For a kernel whose
    outputs need several reduces over one row, one after the other, and no output loop over it
    (a row's log-sum-exp: its maximum, then the sum of exponentials; a loss per row adds the
    target's logit), where ``group_local`` could share only one of them and every work item
    walked the others whole. GPU-style renderers give the reduces one work-item id (see
    :func:`corvid.render.gpu.launch`); each is combined through local memory before the next
    reads it. GPU-style devices only."""
    from .linearize import placement

    if any(x.kind == "local" for x in k.loops + k.reduce_loops()):
        raise OptError("reduces_local: the kernel already has work-group loops")
    values, place = placement(k)
    reduces = [u for u in values if u.op == "reduce"]
    looped = {lp.var for u in reduces for lp in u.arg[1]}
    if len(reduces) < 2 or any(set(place[id(u)]) & looped for u in reduces):
        raise OptError("reduces_local: several reduces, none computed inside another's loop")
    chosen: list[Var] = []
    for u in reduces:
        fits = [lp for lp in u.arg[1] if lp.size % amount == 0 and lp.size > amount]
        if not fits:
            raise OptError(f"reduces_local: a reduce has no loop that {amount} divides (and is shorter than)")
        best = max(fits, key=lambda lp: lp.size).var
        if best not in chosen:
            chosen.append(best)
    out = k
    for var in chosen:
        out = _two_step(out, next(i for i, y in enumerate(reduce_loops(out)) if y.var == var), amount, True, many=True)
    return out


def _two_step(k: Kernel, axis: int, amount: int, local: bool, many: bool = False) -> Kernel:
    lp = _reduce_loop(k, axis)
    name = "group_local" if local else "group"
    if not 1 < amount < lp.size or lp.size % amount:
        raise OptError(f"{name}: {amount} must divide the reduce loop size {lp.size} and be smaller")
    if local and not many and any(x.kind == "local" for x in k.reduce_loops()):
        raise OptError("group_local: the kernel already has a work-group reduce")
    chunks = lp.size // amount
    if local:  # partial l takes the elements c*amount + l: the inner loop c walks with a stride
        part, c = Var(f"{lp.var.name}l", 0, amount - 1), Var(f"{lp.var.name}c", 0, chunks - 1)
        mapping = {lp.var: c * amount + part}
        inner_loop, outer_loop = Loop(c, chunks, "reduce", lp.unroll), Loop(part, amount, "local")
    else:  # partial g takes the chunk g*amount ... g*amount + amount - 1
        part, c = Var(f"{lp.var.name}g", 0, chunks - 1), Var(f"{lp.var.name}c", 0, amount - 1)
        mapping = {lp.var: part * amount + c}
        inner_loop, outer_loop = Loop(c, amount, "reduce", lp.unroll), Loop(part, chunks, "reduce")
    out = k.empty_like(k.loops)
    memo: dict[int, U] = {}
    for u in k.values():
        src = tuple(memo[id(s)] for s in u.src)
        loops = u.arg[1] if u.op == "reduce" else ()
        j = next((n for n, x in enumerate(loops) if x.var == lp.var), None)
        if j is None:
            memo[id(u)] = out.u(u.op, u.dtype, src, substitute_arg(u, mapping))
            continue
        inner = out.u("reduce", u.dtype, src, (u.arg[0], (inner_loop,) + loops[j + 1:]))
        memo[id(u)] = out.u("reduce", u.dtype, (inner,), (u.arg[0], loops[:j] + (outer_loop,)))
    out.stores = [s.moved(mapping, memo[id(s.value)]) for s in k.stores]
    return out


# the elementwise op that combines two partial results of a reduce
_COMBINE = {"sum": Op.ADD, "max": Op.MAX, "min": Op.MIN}


def upcast_reduce(k: Kernel, axis: int, amount: int) -> Kernel:
    """Reduce loop ``axis`` split into ``amount`` contiguous chunks that are reduced side by side
    in one loop: every reduce over it becomes ``amount`` accumulators, accumulator ``s`` walking
    the elements ``s*chunk ... s*chunk + chunk - 1``, combined in order afterwards (a pairwise
    tree). Independent accumulators hide the latency of the combining op, and a long sum reads
    ``amount`` memory streams at once instead of one. Float sums, maxima and minima
    (float32/float64) only: narrow floats round every partial result once, which changes it."""
    return _accumulators(k, axis, amount, "upcast_reduce", interleave=False)


def vector_reduce(k: Kernel, axis: int, amount: int) -> Kernel:
    """Reduce loop ``axis`` over groups of ``amount`` neighbours: each step reads the elements
    ``amount*c ... amount*c + amount - 1`` (a GPU's one vector load: 16 bytes, four float32),
    combines them pairwise (independent ops) and adds the result to the one accumulator. Then
    ``group_local`` on the same loop gives work item ``l`` the neighbours at ``amount*l``, next to
    those of item ``l + 1``, and one work-group reduce combines the items. Same dtypes as
    ``upcast_reduce``."""
    return _accumulators(k, axis, amount, "vector_reduce", interleave=True)


def _accumulators(k: Kernel, axis: int, amount: int, name: str, interleave: bool) -> Kernel:
    lp = _reduce_loop(k, axis)
    if not 1 < amount < lp.size or lp.size % amount:
        raise OptError(f"{name}: {amount} must divide the reduce loop size {lp.size} and be smaller")
    for u in k.values():
        if u.op == "reduce" and any(x.var == lp.var for x in u.arg[1]) and \
                (u.arg[0] not in _COMBINE or u.dtype.name not in ("float32", "float64")):
            raise OptError(f"{name}: a {u.arg[0]} of {u.dtype.name} keeps one accumulator (only float32 "
                          "and float64 sums, maxima and minima take several)")
    chunk = lp.size // amount
    c = Var(f"{lp.var.name}s", 0, chunk - 1)
    inner = Loop(c, chunk, lp.kind, lp.unroll)
    out = k.empty_like(k.loops)
    memos = [dict() for _ in range(amount)]  # id(u) -> u's copy for accumulator s
    for u in k.values():
        if u.op == "reduce" and any(x.var == lp.var for x in u.arg[1]):
            loops = tuple(inner if x.var == lp.var else x for x in u.arg[1])
            if interleave:  # the neighbours combined (pairwise, in order), then one accumulator
                parts = [m[id(u.src[0])] for m in memos]
                if any(x.dtype != u.dtype for x in parts):
                    raise OptError(f"{name}: a {u.arg[0]} of {parts[0].dtype.name} values into {u.dtype.name}")
            else:
                parts = [out.u("reduce", u.dtype, (m[id(u.src[0])],), (u.arg[0], loops)) for m in memos]
            while len(parts) > 1:  # pairwise, in order
                parts = [out.u("alu", u.dtype, (a, b), _COMBINE[u.arg[0]]) for a, b in zip(parts[::2], parts[1::2])] \
                    + parts[len(parts) - len(parts) % 2:]
            done = out.u("reduce", u.dtype, (parts[0],), (u.arg[0], loops)) if interleave else parts[0]
            for m in memos:
                m[id(u)] = done
            continue
        for s, m in enumerate(memos):
            m[id(u)] = out.u(u.op, u.dtype, tuple(m[id(x)] for x in u.src),
                             substitute_arg(u, {lp.var: c * amount + s if interleave else c + s * chunk}))
    out.stores = [st.moved({}, memos[0][id(st.value)]) for st in k.stores]
    return out


def stream_sums(k: Kernel) -> list[U] | str:
    """The sums that ``stream`` reads past the caches: every reduce of a kernel with no output loop
    and one reduce loop, each a float32/float64 sum of an ungated load of its own dtype that walks
    memory contiguously along the loop, all of one element size. A string says why not."""
    loops = reduce_loops(k)
    if k.loops or len(loops) != 1:
        return "only a full reduce (no output loop, one reduce loop) streams its input"
    sums = [u for u in k.values() if u.op == "reduce"]
    for u in sums:
        x = u.src[0]
        if u.arg[0] != "sum" or u.dtype.name not in ("float32", "float64"):
            return f"a {u.arg[0]} of {u.dtype.name} does not stream (float32 and float64 sums only)"
        if x.op != "load" or x.dtype != u.dtype or x.arg[2] is not None or \
                _stride(x.arg[1], loops[0].var) != 1 or x.arg[1].vars() - {loops[0].var}:
            return "only a sum of a contiguous load of its own dtype streams (no arithmetic or gate before the sum)"
    if len({u.dtype.itemsize for u in sums}) != 1:
        return "the streamed sums must read one element size"
    return sums


def _streamed_bytes(k: Kernel, sums: list[U]) -> int:
    """The bytes the loads of ``sums`` (from :func:`stream_sums`) read over the reduce loop."""
    return reduce_loops(k)[0].size * len({id(u.src[0]) for u in sums}) * sums[0].dtype.itemsize


def stream(k: Kernel, axis: int, keep_kib: int) -> Kernel:
    """Reduce loop ``axis`` reads its inputs past the caches except for the last ``keep_kib`` KiB
    (see the module docstring); the kernel's values are unchanged, the renderer reads
    ``kernel.opts``."""
    _reduce_loop(k, axis)  # (OptError for an axis that is not a reduce loop)
    sums = stream_sums(k)
    if isinstance(sums, str):
        raise OptError(f"stream: {sums}")
    total = _streamed_bytes(k, sums)
    if not isinstance(keep_kib, int) or not 0 <= keep_kib * 1024 < total:
        raise OptError(f"stream: keep_kib={keep_kib!r} must be a whole number of KiB below the {total} bytes read")
    if any(o.op == "stream" for o in k.opts):
        raise OptError("stream: the kernel streams already")
    return Kernel(k.name, k.params, k.loops, k.stores, k._cse, k.vector_width, k.opts, k.parallel, k.dims_param)


def pad(k: Kernel, axis: int, multiple: int) -> Kernel:
    """Round output loop ``axis`` up to a multiple of ``multiple`` so that tiles divide it: the
    extra iterations read nothing out of bounds (their loads are gated) and store nothing (their
    stores are gated); what they compute is thrown away."""
    lp = _output_loop(k, axis)
    if multiple < 2 or lp.size % multiple == 0:
        raise OptError(f"pad: loop {axis} of size {lp.size} is already a multiple of {multiple}")
    size = (lp.size + multiple - 1) // multiple * multiple
    v = loop_var(f"{lp.var.name}p", size)
    inside = v.lt(lp.size)
    mapping = {lp.var: v}
    out = k.empty_like(k.loops[:axis] + [Loop(v, size, lp.kind, lp.unroll)] + k.loops[axis + 1:])
    memo: dict[int, U] = {}
    for u in k.values():
        arg = substitute_arg(u, mapping)
        if u.op == "load" and lp.var in u.arg[1].vars():
            arg = (arg[0], arg[1], inside if arg[2] is None else sym_and(arg[2], inside))
        elif u.op == "gather" and lp.var in u.arg[1].vars():
            arg = (*arg[:4], inside if arg[4] is None else sym_and(arg[4], inside))
        memo[id(u)] = out.u(u.op, u.dtype, tuple(memo[id(s)] for s in u.src), arg)
    for st in k.stores:
        moved = st.moved(mapping, memo[id(st.value)])
        moved.gate = inside if moved.gate is None else sym_and(moved.gate, inside)
        out.stores.append(moved)
    if out.parallel == lp.var:
        out.parallel = v
    return out


def pad_reduce(k: Kernel, axis: int, multiple: int) -> Kernel:
    """Round reduce loop ``axis`` up to a multiple of ``multiple`` so that a work-group divides it
    (a vocabulary of 50257 has no such divisor): the extra iterations read nothing out of bounds
    (their loads are gated) and add the reduce's identity (each reduce over the loop takes
    ``where(inside, value, identity)``)."""
    from .. import dtype as dt

    lp = _reduce_loop(k, axis)
    if multiple < 2 or is_symbolic(lp.size) or lp.size % multiple == 0:
        raise OptError(f"pad_reduce: loop {axis} of size {lp.size} is symbolic or already a multiple of {multiple}")
    if any(x.kind == "local" for x in k.loops + k.reduce_loops()):
        raise OptError("pad_reduce: before any work-group action")
    size = (lp.size + multiple - 1) // multiple * multiple
    v = loop_var(f"{lp.var.name}p", size)
    inside = v.lt(lp.size)
    mapping = {lp.var: v}
    padded = Loop(v, size, lp.kind, lp.unroll)
    out = k.empty_like(k.loops)
    memo: dict[int, U] = {}
    for u in k.values():
        src = tuple(memo[id(s)] for s in u.src)
        if u.op == "reduce" and any(x.var == lp.var for x in u.arg[1]):
            value = src[0]
            identity = out.u("const", value.dtype, (), dt.reduce_identity(value.dtype, u.arg[0]))
            cond = out.u("index", dt.bool_, (), inside)
            src = (out.u("alu", value.dtype, (cond, value, identity), Op.WHERE),)
            arg = (u.arg[0], tuple(padded if x.var == lp.var else x for x in u.arg[1]))
        else:
            arg = substitute_arg(u, mapping)
            if u.op == "load" and lp.var in u.arg[1].vars():
                arg = (arg[0], arg[1], inside if arg[2] is None else sym_and(arg[2], inside))
            elif u.op == "gather" and lp.var in u.arg[1].vars():
                arg = (*arg[:4], inside if arg[4] is None else sym_and(arg[4], inside))
        memo[id(u)] = out.u(u.op, u.dtype, src, arg)
    out.stores = [s.moved(mapping, memo[id(s.value)]) for s in k.stores]
    return out


def thread(k: Kernel, axis: int, arg: None = None) -> Kernel:
    """Run output loop ``axis`` across threads (``-1``: one thread)."""
    choice = "off" if axis == -1 else _output_loop(k, axis).var
    return Kernel(k.name, k.params, k.loops, k.stores, k._cse, k.vector_width, k.opts, choice, k.dims_param)


ACTIONS: dict[str, Callable[..., Kernel]] = {
    "upcast": upcast, "vectorize": vectorize, "permute": lambda k, axis, order: permute(k, tuple(order)),
    "split": split, "local": local, "unroll": unroll, "group": group, "group_local": group_local, "rows_local": rows_local,
    "reduces_local": reduces_local,
    "thread": thread, "pad": pad, "pad_reduce": pad_reduce, "upcast_reduce": upcast_reduce,
    "vector_reduce": vector_reduce, "stream": stream,
}


def apply_opt(k: Kernel, opt: Opt) -> Kernel:
    """``k`` with the action ``opt`` applied and recorded in ``opts``; OptError if it does not apply."""
    action = ACTIONS.get(opt.op)
    if action is None:
        raise OptError(f"unknown optimization action {opt.op!r}; known: {sorted(ACTIONS)}")
    out = action(k, opt.axis, opt.arg)
    out.opts = k.opts + (opt,)
    return out


def apply_opts(k: Kernel, opts: tuple[Opt, ...] | list[Opt]) -> Kernel:
    """``k`` with each action of ``opts`` applied in order."""
    for opt in opts:
        k = apply_opt(k, opt)
    return k


def _stride(expr: Sym, v: Var) -> int | Sym:
    """How far ``expr`` moves per step of ``v`` (0 when it does not depend on it linearly); a
    symbolic stride (a row of a symbolic size) is an expression, at least its lowest value."""
    if expr == v:
        return 1
    if isinstance(expr, Lin):
        out = expr.terms.get(v, 0)
        for a, c in expr.terms.items():
            if isinstance(a, Prod) and a.factors.count(v) == 1:  # (v times sizes)
                rest = [f for f in a.factors if f is not v and f != v]
                if all(isinstance(x, Dim) or x.vars() <= _dims(x) for x in rest):
                    factor: Sym | int = c
                    for f in rest:
                        factor = factor * f
                    out = out + factor
        return out
    return 0


def _dims(x: Sym) -> frozenset:
    return frozenset(w for w in x.vars() if isinstance(w, Dim))


def apply_heuristics(k: Kernel) -> Kernel:
    """Choose and apply actions for ``k`` (no search): register tiles for a matmul-like sum,
    else a loop order that walks memory contiguously."""
    if len({st.param for st in k.stores}) != len(k.stores):  # (one output stored twice: actions applied already)
        return k
    if k.symbolic():
        return _symbolic_heuristics(k)
    if not k.loops:
        return _reduce_streams(k)
    out = _matmul_heuristics(k)
    return _reduce_columns(_access_order(k)) if out is k else out


def _symbolic_heuristics(k: Kernel) -> Kernel:
    """The heuristics for a kernel with loops over symbolic sizes: a matmul's register tile
    (a symbolic row loop padded to the tile: the rows past the size gated), else the loop
    order and vectors of the constant loops. A choice that depends on a symbolic size's value
    is not made (the kernel serves every size)."""
    try:
        with strict_sizes():
            if not k.loops:
                return k
            out = _matmul_heuristics(k)
            return _reduce_columns(_access_order(k)) if out is k else out
    except (SymbolicSizeError, OptError):
        return k


def _reduce_streams(k: Kernel) -> Kernel:
    """A float sum with no output loop (a full ``sum``, a norm, a mean) of at least
    ``REDUCE_STREAMS_MIN`` elements read contiguously: ``REDUCE_STREAMS`` chunks summed side by
    side (``upcast_reduce``), one vector accumulator each. One add chain per thread bounds a sum
    of cache-resident data by the add's latency: in a C harness on a 2-core AVX-512 machine, 2
    chunks summed 16K float32 (one thread) 0.81 -> 0.55 us and 1M (two threads) 27.5 -> 22.0 us,
    and 16M from memory at the same speed (+0-4%). More chunks (8: one memory stream each) read
    16M 1-5% slower from memory (7% when re-reading one buffer)."""
    loops = reduce_loops(k)
    if len(loops) != 1 or loops[0].size < REDUCE_STREAMS_MIN:
        return k
    lp = loops[0]
    for u in k.values():
        if u.op == "reduce" and (u.arg[0] != "sum" or u.dtype.name not in ("float32", "float64")):
            return k
        if u.op == "gather" or (u.op == "load" and _stride(u.arg[1], lp.var) not in (0, 1)):
            return k
    # chunks of whole vectors, so that every stream starts where a vector would
    amount = REDUCE_STREAMS if lp.size % (REDUCE_STREAMS * 16) == 0 else 0
    return apply_opt(k, Opt("upcast_reduce", 0, amount)) if amount else k


def gpu_heuristics(k: Kernel, max_group: int = 256, shared_reduce: bool = True, vector_lanes: int = 0,
                   vector_bytes: int = 0) -> Kernel:
    """Actions for GPU-style devices (no search).

    * Register tiles: where a reduce reads values that do not depend on one of the two innermost
      output loops (a matmul's rows and columns, a convolution's pixels and channels), a work
      item computes a tile of up to ``GPU_TILE`` x ``GPU_TILE`` outputs, so each value it loads
      serves a whole row or column of the tile (measured on PoCL: a 1024^2 matmul 3.6 s -> 40 ms).
    * Work-group reduces (``shared_reduce``, a device with local memory): a long reduce with few
      outputs (a full sum, a norm, a row sum of a short, wide matrix) is shared by the work items
      of a work-group (``group_local``), where one work item per output would leave the device
      idle. Only when every reduce is computed per output element.
    * A work-group per row (``rows_local``, ``shared_reduce``): where the reduces are hoisted out of
      the innermost output loop (a softmax's row max and sum, a norm's mean and variance), one
      work item per row ran the whole row (8192 threads for a 8192^2 softmax on a 132-SM GPU);
      the items of a work-group now reduce the row together and each stores its own columns.
    * Several reduces over one row with no output loop over it (a log-sum-exp, a loss per row):
      ``reduces_local`` shares each of them, where ``group_local`` shared one and every work item
      walked the others whole (a loss over GPT-2's 50257 logits: one work item per row before).
    * Vector columns (``vector_lanes``, a device that runs a work item's loops one after another,
      such as PoCL on a CPU): a reduce whose output loop reads its input contiguously (a sum over
      a leading axis) gets vectors of that many lanes across the outputs, as on the CPU
      (``_reduce_columns``): each work item then reads whole runs of a row, not one element per
      row (PoCL, a 4096^2 column sum: 66 -> 11 ms). Elsewhere such a driver vectorizes across
      work items itself, and explicit vectors only slowed it down (a 5-op chain 7.7 -> 67 ms).
    * Wide items (``vector_bytes``, a GPU that loads that many bytes in one instruction: CUDA's
      16): a kernel with no reduce gives each work item ``vector_bytes`` of its narrowest
      contiguous operand (``upcast`` of the innermost output loop, see :func:`wide_items`), which
      the GPU compiler reads and writes with one vector instruction each."""
    loops = reduce_loops(k)
    if not loops:
        return wide_items(k, vector_bytes) if vector_bytes else k
    from .linearize import placement

    values, place = placement(k)
    if any(len(place[id(u)]) < len(k.loops) for u in values if u.op == "reduce"):
        return _rows_shared(k, max_group) if shared_reduce else k
    tiled = _register_tiles(k, values)
    if tiled is not k:
        return tiled
    if vector_lanes:
        columns = _reduce_columns(k, vector_lanes)
        if columns is not k:
            return columns
    if not shared_reduce:
        return k
    if math.prod(lp.size for lp in k.loops) >= GPU_MANY_OUTPUTS:
        # many outputs fill a device one work item each, unless each reads a long contiguous row:
        # a language model's loss reduced 8192 rows of 50257 logits with 8192 work items, whose
        # neighbours read 50257 elements apart; a work-group per row reads them side by side
        return _long_rows_shared(k, values, loops, max_group)
    if math.prod(lp.size for lp in loops) < GPU_MANY_OUTPUTS // 8:
        return k
    shared = _reduces_shared(k, values, loops, max_group)  # (several reduces over one row: all shared)
    if shared is not None:
        return shared
    # the reduce loop that takes the widest work-group: the reduce may be spread over several
    # loops none of which is long (a convolution's bias gradient sums (N, H, W): 128 x 20 x 20,
    # which left 32 work items summing 51200 elements each)
    best = (0, 0, 0)  # (work-group width, loop size, axis): the widest group, on the longest loop
    for axis, lp in enumerate(loops):
        width = next((w for w in (256, 128, 64, 32, 16) if w <= max_group and lp.size % w == 0 and w < lp.size), 0)
        best = max(best, (width, lp.size, axis))
    if best[0]:
        wide = _wide_reduce(k, values, best[2], vector_bytes, max_group) if vector_bytes else None
        return wide or apply_opt(k, Opt("group_local", best[2], best[0]))
    return _padded_group(k, loops, max_group)


WIDE_REDUCE_MIN = 1 << 12  # elements of a reduce loop from which a work item reads vectors (wide_reduce)


def _wide_reduce(k: Kernel, values: list[U], axis: int, vector_bytes: int, max_group: int) -> Kernel | None:
    """A work-group reduce whose work items each read ``vector_bytes`` of neighbours per step
    (``vector_reduce``, then ``group_local`` over the same loop), or None where it does not
    apply: a reduce loop shorter than :data:`WIDE_REDUCE_MIN`, a load along it that is not
    contiguous, or a reduce that keeps one accumulator (see ``upcast_reduce``).

    Why: a full sum's work items each loaded one float32 per step, a chain of dependent adds
    (an H200: a 64M sum at 2.2 TB/s where PyTorch's vector loads reach 3.1). With four float32
    neighbours per step the load is one 16-byte instruction (the renderer states the buffers'
    alignment, as for :func:`wide_items`) and the four adds are independent."""
    lp = reduce_loops(k)[axis]
    if is_symbolic(lp.size) or lp.size < WIDE_REDUCE_MIN:
        return None
    loads = [u for u in values if u.op in ("load", "gather") and lp.var in u.arg[1].vars()]
    if not loads or any(u.op != "load" or _stride(u.arg[1], lp.var) != 1 for u in loads):
        return None
    amount = min(WIDE_ITEMS_MAX, vector_bytes // min(u.dtype.itemsize for u in loads))
    if amount < 2 or lp.size % amount:
        return None
    inner = lp.size // amount
    width = next((w for w in (256, 128, 64, 32) if w <= max_group and inner % w == 0 and w < inner), 0)
    if not width:
        return None
    try:
        return apply_opt(apply_opt(k, Opt("vector_reduce", axis, amount)), Opt("group_local", axis, width))
    except OptError:  # (a reduce that keeps one accumulator: a narrow float's, an integer's)
        return None


WIDE_ITEMS_MAX = 8  # elements per work item at most (wide_items): 16 bytes of bfloat16; 8 bytes of int8/bool
WIDE_ITEMS_ROWS = 4  # rows per work item where no loop gives 16-byte neighbours (wide_items)
WIDE_ITEMS_MIN_OUTPUTS = 1 << 14  # smaller kernels keep an element per work item (more work items, same bytes)


def wide_items(k: Kernel, vector_bytes: int) -> Kernel:
    """``upcast`` of the innermost output loop of an elementwise kernel by the elements of
    ``vector_bytes`` bytes of its narrowest operand read or written contiguously along that loop
    (at most :data:`WIDE_ITEMS_MAX`), so that each work item's loads of one operand are
    neighbours starting on a multiple of that many elements. Where that many elements do not
    divide it (or no operand is contiguous along it), an outer loop upcast by
    :data:`WIDE_ITEMS_ROWS` instead: the item's loads are then single but in flight together.
    ``k`` unchanged where neither applies, where a size is symbolic, or where the kernel is small.

    Why: a GPU keeps a few loads per work item in flight; one float per thread kept about 8 KiB
    in flight per SM, where an H200 needs some 20 KiB to reach its bandwidth, and 16 bytes is
    what its widest load instruction moves (as PyTorch's elementwise kernels do). The renderer
    states the buffers' alignment (``render/cuda.py``), so that the compiler may merge the
    neighbours into one instruction."""
    if not k.loops or k.vector_width > 1 or any(is_symbolic(lp.size) for lp in k.loops):
        return k
    if math.prod(lp.size for lp in k.loops) < WIDE_ITEMS_MIN_OUTPUTS:
        return k
    axis = len(k.loops) - 1
    var = k.loops[axis].var
    accessed = [(u.arg[0], u.arg[1]) for u in k.values() if u.op == "load"] + \
        [(st.param, st.index) for st in k.stores]
    sizes = [k.params[p].dtype.itemsize for p, idx in accessed if _stride(idx, var) == 1]
    amount = min(WIDE_ITEMS_MAX, vector_bytes // min(sizes)) if sizes else 0
    if amount >= 2 and k.loops[axis].size % amount == 0:
        return apply_opt(k, Opt("upcast", axis, amount))
    # no 16-byte neighbours (a row of odd length: 8192 rows of GPT-2's 50257 logits): the work item
    # still takes several rows, the same column of each, so that its loads are independent and in
    # flight together, neighbouring work items still reading neighbours
    for outer, lp in enumerate(k.loops[:-1]):
        if lp.size % WIDE_ITEMS_ROWS == 0:
            return apply_opt(k, Opt("upcast", outer, WIDE_ITEMS_ROWS))
    return k


# a contiguous reduce this long is shared by a work-group even when outputs are many: one work item
# per row left a GPT-2 step's 8192 rows of 768 (the norms' sums, forward and backward) to 8192
# threads on a 132-SM GPU, neighbours reading rows 768 elements apart
GPU_LONG_ROW = 256
GPU_PAD_MIN = 1024  # a reduce (or row) this long that no work-group divides is padded up to one


def _widest(max_group: int) -> int:
    return next(w for w in (256, 128, 64, 32) if w <= max_group)


def _padded_group(k: Kernel, loops: list[Loop], max_group: int, axis: int | None = None) -> Kernel:
    """``group_local`` on reduce loop ``axis`` (the longest by default) after rounding it up to a
    multiple of the widest work-group (``pad_reduce``), when it is long enough; else ``k``."""
    if axis is None:
        axis = max(range(len(loops)), key=lambda i: loops[i].size)
    lp, width = loops[axis], _widest(max_group)
    if is_symbolic(lp.size) or lp.size < GPU_PAD_MIN:
        return k
    try:
        padded = apply_opt(k, Opt("pad_reduce", axis, width)) if lp.size % width else k
        return apply_opt(padded, Opt("group_local", axis, width))
    except OptError:
        return k


def _reduces_shared(k: Kernel, values: list[U], loops: list[Loop], max_group: int) -> Kernel | None:
    """``reduces_local`` for a kernel whose several reduces each walk one row of the same length
    (a row's log-sum-exp, a loss per row), after rounding the row up to the widest work-group
    (``pad_reduce`` on each) where none divides it and it is long enough; None where it does
    not apply (one reduce, rows of several lengths, a reduce spread over several loops)."""
    reduces = [u for u in values if u.op == "reduce"]
    if len(reduces) < 2 or len(loops) < 2 or any(len(u.arg[1]) != 1 for u in reduces):
        return None
    size = loops[0].size
    if is_symbolic(size) or any(lp.size != size for lp in loops):
        return None
    width = next((w for w in (256, 128, 64, 32) if w <= max_group and size % w == 0 and w < size), 0)
    padded = k
    try:
        if not width:
            if size < GPU_PAD_MIN:
                return None
            width = _widest(max_group)
            for axis in range(len(loops)):
                padded = apply_opt(padded, Opt("pad_reduce", axis, width))
        return apply_opt(padded, Opt("reduces_local", 0, width))
    except OptError:
        return None


def _long_rows_shared(k: Kernel, values: list[U], loops: list[Loop], max_group: int) -> Kernel:
    """A work-group per output (``group_local``, padded if need be; ``reduces_local`` where
    several reduces walk the row) for a kernel of many outputs whose reduces walk a row of at
    least :data:`GPU_LONG_ROW` contiguous elements; else ``k``."""
    if any(is_symbolic(lp.size) or lp.size < GPU_LONG_ROW for lp in loops):
        return k
    # (a row of a load, or of a gather: an embedding's rows looked up by token)
    if not any(u.op in ("load", "gather") and any(_stride(u.arg[1], lp.var) == 1 for lp in loops) for u in values):
        return k  # (a column reduce: neighbouring outputs already read neighbouring elements)
    if len(loops) != 1:
        shared = _reduces_shared(k, values, loops, max_group)
        return k if shared is None else shared
    size = loops[0].size
    width = next((w for w in (256, 128, 64, 32) if w <= max_group and size % w == 0 and w < size), 0)
    if width:
        return apply_opt(k, Opt("group_local", 0, width))
    return _padded_group(k, loops, max_group, 0)


def _rows_shared(k: Kernel, max_group: int) -> Kernel:
    """A work-group per row (``rows_local``) for a kernel whose reduces are hoisted out of its
    innermost output loop (softmax, norms), rows of at least :data:`GPU_ROW_MIN`: the widest
    work-group that divides the row and one of its reduce loops; a row of at least
    :data:`GPU_PAD_MIN` that none divides (a vocabulary of 50257) is padded up to the widest
    (``pad`` on the row, ``pad_reduce`` on its reduce loops); else ``k``."""
    if not k.loops or is_symbolic(k.loops[-1].size) or k.loops[-1].size < GPU_ROW_MIN:
        return k
    row, last = k.loops[-1].size, len(k.loops) - 1
    for width in (256, 128, 64, 32):
        if width > max_group or row % width:
            continue
        try:
            return apply_opt(k, Opt("rows_local", last, width))
        except OptError:
            continue
    if row < GPU_PAD_MIN:
        return k
    width = _widest(max_group)
    try:
        padded = apply_opt(k, Opt("pad", last, width))
        for axis, lp in enumerate(reduce_loops(padded)):
            if lp.size == row:
                padded = apply_opt(padded, Opt("pad_reduce", axis, width))
        return apply_opt(padded, Opt("rows_local", last, width))
    except OptError:
        return k


def _register_tiles(k: Kernel, values: list[U]) -> Kernel:
    """``k`` with its two innermost output loops upcast (see :func:`gpu_heuristics`), or ``k``."""
    if len(k.loops) < 2:
        return k
    reduced = {lp.var for lp in k.reduce_loops()}
    loads = [u for u in values if u.op in ("load", "gather") and u.syms()[0].vars() & reduced]
    size = {lp.var: hint(lp.size) for lp in k.loops + k.reduce_loops()}
    extent = {id(u): math.prod(size.get(v, 1) for v in u.syms()[0].vars()) for u in loads}
    opts = []
    for axis in (len(k.loops) - 1, len(k.loops) - 2):
        lp = k.loops[axis]
        # the same value for every iteration, of an operand about as large as the others (a
        # product's): a row's mean and scale in a norm's weight gradient are reused as well, but
        # a cache serves them anyway, and a tile for them only divided the work items by 8
        widest = max((extent[id(u)] for u in loads if lp.var in u.syms()[0].vars()), default=0)
        reused = any(lp.var not in u.syms()[0].vars() and extent[id(u)] * TILE_REUSE_RATIO >= widest for u in loads)
        amount = next((a for a in (GPU_TILE, GPU_TILE // 2, 2) if lp.size % a == 0 and a <= lp.size), 0)
        if reused and amount:
            opts.append(Opt("upcast", axis, amount))
    if not opts or math.prod(lp.size for lp in k.loops) // math.prod(o.arg for o in opts) < GPU_MIN_ITEMS:
        return k
    return apply_opts(k, opts)


def _reduce_columns(k: Kernel, lanes: int = 0) -> Kernel:
    """A reduce (sum, max, min) whose innermost output loop walks its input contiguously (a
    max-pool over channels-last data): vectors across that loop, one accumulator per lane; the
    compiler could only vectorize the reduce loop, which is short or strided there."""
    if not reduce_loops(k) or not k.loops:
        return k
    inner = k.loops[-1].var
    size = {lp.var: hint(lp.size) for lp in k.loops}  # (a symbolic size: as traced, for the weights)
    size.update({lp.var: hint(lp.size) for lp in k.reduce_loops()})
    along = [0, 0]  # bytes the loads along the inner loop touch: [contiguous, strided]
    for u in k.values():
        if u.op == "load" and inner in u.arg[1].vars():
            along[_stride(u.arg[1], inner) != 1] += math.prod(size.get(v, 1) for v in u.arg[1].vars()) * u.dtype.itemsize
    if along[0] <= along[1]:  # most of the data would be gathered lane by lane (a row max read along rows)
        return k
    full = lanes or vector_bytes() // 4
    width = next((w for w in (full, full // 2, full // 4) if w >= 4 and can_vectorize(k, len(k.loops) - 1, w)), 0)
    return apply_opt(k, Opt("vectorize", len(k.loops) - 1, width)) if width else k


def _access_order(k: Kernel) -> Kernel:
    """Put innermost the output loop along which clearly the most bytes are read and written
    contiguously (each access weighted by the elements it touches: the product of the sizes of
    the loops its index uses): a max-pool or a copy whose input is channels-last and whose output
    is not then reads whole cache lines, writing with a stride instead of reading with one."""
    if len(k.loops) < 2:
        return k
    size = {lp.var: hint(lp.size) for lp in k.loops}  # (a symbolic size: as traced, for the weights)
    size.update({lp.var: hint(lp.size) for lp in k.reduce_loops()})
    score = [0] * len(k.loops)
    accesses = [(u.arg[1], u.dtype.itemsize) for u in k.values() if u.op == "load"]
    accesses += [(st.index, k.params[st.param].dtype.itemsize) for st in k.stores]
    for index, itemsize in accesses:
        touched = math.prod(size.get(v, 1) for v in index.vars()) * itemsize
        for i, lp in enumerate(k.loops):
            if _stride(index, lp.var) == 1:
                score[i] += touched
    best = max(range(len(k.loops)), key=lambda i: (score[i], i))
    if not k.reduce_loops():
        tiled = _transpose_tiles(k, score, best)
        if tiled is not k:
            return tiled
    if score[best] < 2 * score[-1] or upper(k.loops[best].size) < 8 or best == len(k.loops) - 1:
        return k
    order = tuple(i for i in range(len(k.loops)) if i != best) + (best,)
    return apply_opt(k, Opt("permute", 0, order))


def _transpose_tiles(k: Kernel, score: list[int], best: int) -> Kernel:
    """A transpose (one access contiguous along loop ``a``, another along loop ``b``, each a good
    share of the bytes): both loops in tiles of ``TRANSPOSE_TILE``, the tile loops outside, so
    a tile's cache lines are used whole on both sides instead of one element per line."""
    t = TRANSPOSE_TILE
    other = [i for i in range(len(k.loops)) if i != best and score[i] * 4 >= score[best] > 0]
    if not other:
        return k
    b = max(other, key=lambda i: score[i])
    a_lp, b_lp = k.loops[best], k.loops[b]
    if is_symbolic(a_lp.size) or is_symbolic(b_lp.size):
        return k
    # (measured on a 2-core Xeon, float32, batched transposes: 64x64 tiled was slower, 6.2 -> 7.6 ms
    # over 4096 of them; a side of 128 or more with the other of 32 or more gained 1.5-2.1x:
    # 3136x64 4.2 -> 1.9 ms, 64x3136 1.8 -> 1.1, 1024x64 2.5 -> 1.2, 32x256 3.0 -> 1.8, a conv's
    # channels-last output copied back to channels-first among them)
    if min(a_lp.size, b_lp.size) < 2 * t or max(a_lp.size, b_lp.size) < 8 * t or a_lp.size % t or b_lp.size % t:
        return k
    k = apply_opt(k, Opt("split", b, t))
    k = apply_opt(k, Opt("split", best + (best > b), t))
    names = {a_lp.var.name + "o", a_lp.var.name + "i", b_lp.var.name + "o", b_lp.var.name + "i"}
    pos = {lp.var.name: i for i, lp in enumerate(k.loops)}
    rest = tuple(i for i, lp in enumerate(k.loops) if lp.var.name not in names)
    order = rest + tuple(pos[n] for n in (b_lp.var.name + "o", a_lp.var.name + "o", b_lp.var.name + "i", a_lp.var.name + "i"))
    return apply_opt(k, Opt("permute", 0, order))


def _matmul_heuristics(k: Kernel) -> Kernel:
    inner = k.loops[-1]
    store = next((u for u in k.values() if u.op == "reduce"), None)
    if store is None or store.arg[0] != "sum" or not store.dtype.is_float:
        return k
    red_vars = [lp.var for lp in store.arg[1]]
    loads = [u for u in k.values() if u.op == "load" and u.arg[2] is None]
    # a matmul-like reduce: some load walks the reduce axis with a stride, another is contiguous in the output
    strided = any(_stride(u.arg[1], r) > 1 for u in loads for r in red_vars)
    contiguous_out = any(_stride(u.arg[1], inner.var) == 1 for u in loads)
    if strided and contiguous_out and not is_symbolic(inner.size) and inner.size <= CONVERTED_BLOCK and any(
            u.dtype.is_int and u.dtype.itemsize < store.dtype.itemsize and _stride(u.arg[1], inner.var) == 1 and
            any(r in u.arg[1].vars() for r in red_vars) for u in loads):
        # narrow integers converted in the kernel (a block of quantized weight rows: corvid.quant):
        # the block's outputs unrolled whole, which the compiler vectorizes across them (whatever
        # the output's dtype: a bfloat16 projection of a decode step is rounded as it is stored)
        return apply_opt(k, Opt("upcast", len(k.loops) - 1, inner.size))
    # the native vector width, or a half or quarter of it when that divides the columns (1000 = 125 x 8)
    full = vector_bytes() // store.dtype.itemsize
    width = next((w for w in (full, full // 2, full // 4) if w >= 4 and can_vectorize(k, len(k.loops) - 1, w)), 0)
    if strided and not width and 1 < inner.size <= SMALL_UPCAST:
        # a narrow output (a 10-class head): all its columns share one pass over the reduce, with
        # one accumulator each, instead of one strided pass per column
        return apply_opt(k, Opt("upcast", len(k.loops) - 1, inner.size))
    if strided and not contiguous_out and 1 < inner.size and any(inner.var not in u.arg[1].vars() for u in loads):
        # no load is contiguous along the outputs (a matmul whose result is reduced again, as in
        # relu(a @ b).sum(1): the output loop is a row of a): tile the rows, so that each load
        # that does not depend on the row (a column of b) serves the whole tile
        rows = next((r for r in ROW_TILES if inner.size % r == 0 and r < inner.size), 0)
        return apply_opt(k, Opt("upcast", len(k.loops) - 1, rows)) if rows else k
    if not (strided and contiguous_out) or not width:
        return k
    # rows: the innermost output loop that the vector (column) loads do not depend on, so one
    # vector load serves every row of the tile (in a matmul, the loop right above the columns;
    # in a batched DFT stage written in natural order it can be further out)
    # (the loads of the reduce's body: a load of the epilogue, such as a residual added to the
    # product, runs once per output and depends on the rows; counted, it left a transformer's MLP
    # projection no row loop, tiled across column panels: 24% of the peak, 3.6x slower)
    vector_loads = [u for u in loads if _stride(u.arg[1], inner.var) == 1 and
                    any(r in u.arg[1].vars() for r in red_vars)] or \
        [u for u in loads if _stride(u.arg[1], inner.var) == 1]
    free = [i for i in reversed(range(len(k.loops) - 1))
            if not any(k.loops[i].var in u.arg[1].vars() for u in vector_loads)]
    cols = next((c for c in COL_TILES if (inner.size // width) % c == 0), 1)
    budget = vector_registers() - SPARE_REGISTERS
    tiles = [r for r in ROW_TILES if r * cols <= budget]
    row_axis = next((i for i in free if any(k.loops[i].size % r == 0 for r in tiles if 2 * r > tiles[0])), None)
    if row_axis is None and free and (is_symbolic(k.loops[free[0]].size) or k.loops[free[0]].size > tiles[0]):
        # an awkward row count (1021, 1023): pad it to a multiple of the tile, gating the extra rows
        row_axis = free[0]
        k = apply_opt(k, Opt("pad", row_axis, tiles[0]))
    row_var = None if row_axis is None else k.loops[row_axis].var
    k = apply_opt(k, Opt("vectorize", len(k.loops) - 1, width))
    whole = cols == k.loops[-1].size  # the tile takes every column: the vector loop disappears
    if cols > 1:
        k = apply_opt(k, Opt("upcast", len(k.loops) - 1, cols))
    adjacent = len(k.loops) - (1 if whole else 2)  # the loop right above the columns
    row_axis = next((i for i, lp in enumerate(k.loops) if lp.var == row_var), adjacent)
    rows = next((r for r in tiles if row_axis >= 0 and k.loops[row_axis].size % r == 0), 1)
    if rows > 1:
        n_loops = len(k.loops)
        k = apply_opt(k, Opt("upcast", row_axis, rows))
        if not whole and row_axis == adjacent and len(k.loops) == n_loops:  # a row and a column loop are left
            # walk column panels outermost: a panel of the right operand stays in cache while all rows pass
            order = list(range(len(k.loops) - 2)) + [len(k.loops) - 1, len(k.loops) - 2]
            k = apply_opt(k, Opt("permute", 0, tuple(order)))
        elif whole and len(k.loops) == n_loops and row_axis + 2 == len(k.loops) and \
                any(k.loops[-1].var in u.arg[1].vars() for u in vector_loads):
            # the same with a packed right operand (its panels are a loop of their own): panels outermost
            order = list(range(len(k.loops) - 2)) + [len(k.loops) - 1, len(k.loops) - 2]
            k = apply_opt(k, Opt("permute", 0, tuple(order)))
        else:
            return k
        k = _row_blocks(k, rows, [lp.size for lp in reduce_loops(k)], store.dtype.itemsize)
    return k


# a matmul whose panels are walked outermost (the loop order above) takes its rows in blocks of
# BLOCK_ROWS when a block of the left operand fits in half of a core's L2 cache: each panel then
# passes over rows the cache holds, where before every panel streamed the whole left operand in
# from the last-level cache again. Measured on a 2-core Xeon (2 MiB L2), float32, GFLOP/s without
# -> with: 2048x256 @ 256x1024 292 -> 355, 2048x512 @ 512x2048 292-330 -> 385, 4096x256 @ 256x256
# 274-311 -> 405, 2048x768 @ 768x3072 336 -> 371, 1024^3 363 -> 372; and without the condition,
# a block that does not fit (2048^3, a reduce of 3072) lost 4-7%, as did 512 rows in two blocks.
BLOCK_ROWS = 256
MIN_ROW_BLOCKS = 4


def _row_blocks(k: Kernel, tile_rows: int, reduce_sizes: list[int | Sym], itemsize: int) -> Kernel:
    """``k`` (its last two loops: the panels, then the row tiles of ``tile_rows`` rows) with the
    row tiles in blocks of :data:`BLOCK_ROWS` rows, the blocks outermost (see above), where a
    block's rows of the left operand fit in half of the L2 cache and there are at least
    :data:`MIN_ROW_BLOCKS` blocks to share among the threads."""
    if len(k.loops) < 2 or tile_rows < 1 or BLOCK_ROWS % tile_rows or any(is_symbolic(s) for s in reduce_sizes):
        return k
    reduce_len = math.prod(reduce_sizes)
    tiles = k.loops[-1].size
    per_block = BLOCK_ROWS // tile_rows
    if is_symbolic(tiles) or is_symbolic(k.loops[-2].size) or tiles % per_block or \
            tiles < MIN_ROW_BLOCKS * per_block or BLOCK_ROWS * reduce_len * itemsize > cache_bytes(2) // 2:
        return k
    n = len(k.loops)
    k = apply_opt(k, Opt("split", n - 1, per_block))
    return apply_opt(k, Opt("permute", 0, tuple(range(n - 2)) + (n - 1, n - 2, n)))

"""Linearize a kernel: decide where each value is computed and produce nested statements.

Each value is placed in the innermost loop among the variables it depends on. A value that does
not depend on a loop's variable is therefore computed outside that loop: a row's max in softmax
is computed once per row even though the output loop over columns reads it for every column.
A reduce is placed by the variables of its body minus its own loop variables, and its loops nest
inside that place.

The result is a tree of statements that a renderer prints one by one:

* ``Def(u)``: compute a value;
* ``AccInit(u)``, ``For(..., reduce=u)`` whose innermost body ends with ``AccUpdate(u)``, ``AccFinal(u)``;
* ``For(loop, body, parallel)``: a loop; ``parallel`` asks the renderer to split it across cores;
* ``StoreStmt(store)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..graph.symbolic import Var, hint
from .ir import Kernel, Loop, Store, U

PARALLEL_MIN_WORK = 1 << 16  # below this many innermost iterations a thread launch costs more than it saves


@dataclass
class Def:
    u: U


@dataclass
class AccInit:
    u: U


@dataclass
class AccUpdate:
    u: U


@dataclass
class AccFinal:
    """After a reduce's loops: lets a renderer finish an accumulator (e.g. apply a nan flag)."""

    u: U


@dataclass
class StoreStmt:
    store: Store


@dataclass
class For:
    loop: Loop
    body: list = field(default_factory=list)
    parallel: bool = False
    reduce: tuple[U, ...] = ()  # set on the loops of a reduce: the accumulators they update
    innermost: bool = False


def placement(k: Kernel) -> tuple[list[U], dict[int, tuple[Var, ...]]]:
    """Topologically ordered values and, for each, the path of loop variables it is computed in."""
    values = k.values()
    free: dict[int, frozenset[Var]] = {}
    lanes = frozenset({Var("lane", 0, k.vector_width - 1)}) if k.vector_width > 1 else frozenset()
    for u in values:  # the vector lane is inside a value, not a loop: it does not affect placement
        f = frozenset().union(*(free[id(s)] for s in u.src), *(s.vars() - lanes for s in u.syms()))
        if u.op == "reduce":
            f = f - {lp.var for lp in u.arg[1]}
        free[id(u)] = f

    out_path = tuple(lp.var for lp in k.loops)
    scope: dict[Var, tuple[Var, ...]] = {v: out_path[: i + 1] for i, v in enumerate(out_path)}

    def deepest(vs: frozenset[Var]) -> tuple[Var, ...]:
        return max((scope.get(v, ()) for v in vs), key=len, default=())  # (a symbolic size: anywhere)

    place: dict[int, tuple[Var, ...]] = {}
    for u in reversed(values):  # enclosing reduces come later in topological order: place them first
        if u.op == "reduce":
            p = place[id(u)] = deepest(free[id(u)])
            for i, lp in enumerate(u.arg[1]):
                scope[lp.var] = p + tuple(x.var for x in u.arg[1][: i + 1])
    for u in values:
        if u.op != "reduce":
            place[id(u)] = deepest(free[id(u)])
    return values, place


def linearize(k: Kernel) -> list:
    """The statement tree of ``k`` (see module docstring)."""
    values, place = placement(k)
    out_path = tuple(lp.var for lp in k.loops)
    by_place: dict[tuple[Var, ...], list[U]] = {}
    for u in values:
        if u.op != "const":  # constants are rendered inline
            by_place.setdefault(place[id(u)], []).append(u)

    def needs(unit: list[U], path: tuple[Var, ...], here: set[int]) -> set[int]:
        """Values placed at ``path`` that ``unit`` needs, looking through values placed deeper."""
        out: set[int] = set()
        stack = [s for u in unit for s in u.src]
        seen: set[int] = set()
        while stack:
            x = stack.pop()
            if id(x) in seen or x.op == "const":
                continue
            seen.add(id(x))
            p = place[id(x)]
            if id(x) in here:
                out.add(id(x))
            elif len(p) > len(path) and p[: len(path)] == path:
                stack.extend(x.src)
        return out - {id(u) for u in unit}

    def block(path: tuple[Var, ...]) -> list:
        items = by_place.get(path, [])
        here = {id(u) for u in items}
        units: list[list[U]] = []
        group_of: dict[tuple, list[U]] = {}
        for u in items:  # reduces with the same op and loops run in one loop nest
            if u.op == "reduce":
                key = (u.arg[0], u.arg[1])
                if key in group_of:
                    group_of[key].append(u)
                    continue
                group_of[key] = [u]
                units.append(group_of[key])
            else:
                units.append([u])
        deps = [needs(unit, path, here) for unit in units]
        stmts: list = []
        done: set[int] = set()
        pending = list(range(len(units)))
        while pending:
            i = next(i for i in pending if deps[i] <= done)
            pending.remove(i)
            unit = units[i]
            if unit[0].op == "reduce":
                stmts += [AccInit(u) for u in unit] + [reduce_nest(unit, 0)] + [AccFinal(u) for u in unit]
            else:
                stmts.append(Def(unit[0]))
            done |= {id(u) for u in unit}
        depth = len(path)
        if path == out_path[:depth]:
            if depth < len(k.loops):
                stmts.append(For(k.loops[depth], block(path + (k.loops[depth].var,))))
            else:
                stmts += [StoreStmt(s) for s in k.stores]
        return stmts

    def reduce_nest(unit: list[U], level: int) -> For:
        loops = unit[0].arg[1]
        path = place[id(unit[0])] + tuple(lp.var for lp in loops[: level + 1])
        body = block(path)
        last = level + 1 == len(loops)
        if last:
            body += [AccUpdate(u) for u in unit]
        else:
            body.append(reduce_nest(unit, level + 1))
        # (innermost: no loop nested inside, so a renderer may vectorize it; a cascaded sum's
        # outer levels hold the levels below)
        return For(loops[level], body, reduce=tuple(unit), innermost=last and not any(isinstance(x, For) for x in body))

    stmts = block(())
    _mark_parallel(k, stmts)
    return stmts


def _work(stmts: list, mult: int = 1) -> int:
    """Statements executed by the nest, counting hoisting (what a thread launch must amortize)."""
    total = 0
    for s in stmts:
        total += _work(s.body, mult * hint(s.loop.size)) if isinstance(s, For) else mult
    return total


def _mark_parallel(k: Kernel, stmts: list) -> None:
    """Mark the loop that runs across threads: the one the ``thread`` action chose, else the
    outermost output loop (or a top-level reduce) when the kernel has enough work."""
    if k.parallel == "off":
        return
    if isinstance(k.parallel, Var):
        level = stmts
        while True:
            s = next((s for s in level if isinstance(s, For) and not s.reduce), None)
            if s is None:
                break
            if s.loop.var == k.parallel:
                s.parallel = True
                return
            level = s.body
    if _work(stmts) < PARALLEL_MIN_WORK:
        return
    loops = [s for s in stmts if isinstance(s, For)]
    # the outermost output loop when there is one; otherwise a top-level reduce
    for s in loops:
        if not s.reduce:
            s.parallel = True
            return
    for s in loops:
        # one accumulator: OpenMP's reduction clause; several float sums (a vectorized column
        # sum's register tile): per-thread partials that the renderer adds up in thread order
        if hint(s.loop.size) >= 2 and (len(s.reduce) == 1 or all(u.arg[0] == "sum" and u.dtype.is_float
                                                           and not u.dtype.is_complex for u in s.reduce)):
            s.parallel = True
            return

"""Linearize a kernel: decide where each value is computed and produce nested statements.

Each value is placed in the innermost loop among the variables it depends on. A value that does
not depend on a loop's variable is therefore computed outside that loop: a row's max in softmax
is computed once per row even though the output loop over columns reads it for every column.
A reduce is placed by the variables of its body minus its own loop variables, and its loops nest
inside that place.

The result is a tree of statements that a renderer prints one by one:

* ``Def(u)``: compute a value;
* ``AccInit(u)`` then ``For(..., reduce=u)`` whose innermost body ends with ``AccUpdate(u)``;
* ``For(loop, body, parallel)``: a loop; ``parallel`` asks the renderer to split it across cores;
* ``StoreStmt(store)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..graph.symbolic import Var
from .ir import Kernel, Loop, Store, U, _trip_counts

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
class StoreStmt:
    store: Store


@dataclass
class For:
    loop: Loop
    body: list = field(default_factory=list)
    parallel: bool = False
    reduce: U | None = None  # set on the loops of a reduce: the accumulator they update
    innermost: bool = False


def placement(k: Kernel) -> tuple[list[U], dict[int, tuple[Var, ...]]]:
    """Topologically ordered values and, for each, the path of loop variables it is computed in."""
    values = k.values()
    free: dict[int, frozenset[Var]] = {}
    for u in values:
        f = frozenset().union(*(free[id(s)] for s in u.src), *(s.vars() for s in u.syms()))
        if u.op == "reduce":
            f = f - {lp.var for lp in u.arg[1]}
        free[id(u)] = f

    out_path = tuple(lp.var for lp in k.loops)
    scope: dict[Var, tuple[Var, ...]] = {v: out_path[: i + 1] for i, v in enumerate(out_path)}

    def deepest(vs: frozenset[Var]) -> tuple[Var, ...]:
        return max((scope[v] for v in vs), key=len, default=())

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

    def block(path: tuple[Var, ...]) -> list:
        stmts: list = []
        for u in by_place.get(path, ()):
            if u.op == "reduce":
                stmts += [AccInit(u), reduce_nest(u, 0)]
            else:
                stmts.append(Def(u))
        depth = len(path)
        if path == out_path[:depth]:
            if depth < len(k.loops):
                stmts.append(For(k.loops[depth], block(path + (k.loops[depth].var,))))
            else:
                stmts += [StoreStmt(s) for s in k.stores]
        return stmts

    def reduce_nest(u: U, level: int) -> For:
        loops = u.arg[1]
        path = place[id(u)] + tuple(lp.var for lp in loops[: level + 1])
        body = block(path)
        last = level + 1 == len(loops)
        body.append(AccUpdate(u) if last else reduce_nest(u, level + 1))
        return For(loops[level], body, reduce=u, innermost=last)

    stmts = block(())
    _mark_parallel(k, stmts)
    return stmts


def _mark_parallel(k: Kernel, stmts: list) -> None:
    trips = _trip_counts(k)
    work = max(trips.values(), default=0)
    if work < PARALLEL_MIN_WORK:
        return
    loops = [s for s in stmts if isinstance(s, For)]
    # the outermost output loop when there is one; otherwise a top-level sum/prod reduce
    for s in loops:
        if s.reduce is None:
            s.parallel = True
            return
    for s in loops:
        if s.reduce.arg[0] in ("sum", "prod") and s.loop.size >= 2:
            s.parallel = True
            return

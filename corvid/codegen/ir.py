"""The device-neutral kernel IR.

A :class:`Kernel` is a nest of output loops (``Loop``, outermost first) around one or more stores.
Values are a DAG of :class:`U` nodes over loop variables:

========== =========================================================================
op         meaning
========== =========================================================================
``const``  a literal; ``arg`` is the Python value
``load``   ``arg = (param, index: Sym, gate: Sym | None)``; a gated load reads 0 where gate is 0
``index``  an integer expression of loop variables used as a value; ``arg`` is the Sym
``alu``    a primitive elementwise op; ``arg`` is the graph :class:`~corvid.graph.node.Op`
``cast``   value conversion to ``dtype``;  ``bitcast``: reinterpretation of the bits
``reduce`` ``arg = (op, loops)``: combine ``src[0]`` over the reduce loops into one accumulator
``mulacc`` ``src[0] * src[1] + src[2]`` with one rounding (made by :mod:`corvid.codegen.passes`)
========== =========================================================================

Nothing here says *where* a value is computed: :mod:`corvid.codegen.linearize` places each value
in the innermost loop its variables need, so loop-invariant work is hoisted by construction.
Loops have a ``kind``: ``"global"`` loops may run in parallel (GPU grid dimensions, CPU threads),
``"local"`` loops are the work-group dimensions of GPU-style backends (plain loops on the CPU),
``"reduce"`` loops carry an accumulator. A kernel also records the optimization actions applied
to it (``opts``, see :mod:`corvid.codegen.opt`) and which loop runs across threads (``parallel``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Iterable
from typing import Any

from ..dtype import DType
from ..graph.symbolic import Sym, Var, hint, is_symbolic


@dataclass(frozen=True)
class Loop:
    var: Var
    size: int
    kind: str  # "global" | "local" | "reduce"
    unroll: int = 1  # > 1: the renderer asks the compiler to unroll the loop this many times


@dataclass(frozen=True)
class Opt:
    """One optimization action applied to a kernel (see :mod:`corvid.codegen.opt`): ``op`` names
    the action, ``axis`` the loop it acts on, ``arg`` its amount (or the loop order of a
    ``permute``). A kernel keeps the actions applied to it, in order, in ``Kernel.opts``."""

    op: str
    axis: int
    arg: Any = None

    def __str__(self) -> str:
        return f"{self.op}({self.axis}{'' if self.arg is None else f', {self.arg}'})"


class U:
    """One IR value. Create through :meth:`Kernel.u` so identical values are shared (CSE)."""

    __slots__ = ("op", "dtype", "src", "arg", "key")

    def __init__(self, op: str, dtype: DType, src: tuple[U, ...], arg: Any, key: tuple):
        self.op, self.dtype, self.src, self.arg, self.key = op, dtype, src, arg, key

    def syms(self) -> tuple[Sym, ...]:
        """The symbolic index expressions this value reads directly."""
        if self.op == "load":
            return (self.arg[1],) if self.arg[2] is None else (self.arg[1], self.arg[2])
        if self.op == "index":
            return (self.arg,)
        if self.op == "gather":  # arg: (param, base index, stride of the gathered axis, its size, gate)
            return (self.arg[1],) if self.arg[4] is None else (self.arg[1], self.arg[4])
        return ()

    def __repr__(self) -> str:
        return f"U({self.op}, {self.dtype.name}, {self.arg})"


@dataclass(frozen=True)
class Param:
    """A buffer argument of a kernel: ``size`` elements of ``dtype``."""

    dtype: DType
    size: int
    output: bool


@dataclass
class Store:
    """``param[index] = value``, only where ``gate`` (when set) is non-zero."""

    param: int
    index: Sym
    value: U
    gate: Sym | None = None

    def moved(self, mapping: dict[Var, Sym], value: U) -> Store:
        """This store with loop variables replaced and ``value`` as its value."""
        if not mapping:
            return Store(self.param, self.index, value, self.gate)
        return Store(self.param, self.index.substitute(mapping), value,
                     None if self.gate is None else self.gate.substitute(mapping))


@dataclass
class Kernel:
    name: str
    params: list[Param]
    loops: list[Loop]
    stores: list[Store] = field(default_factory=list)
    _cse: dict[tuple, U] = field(default_factory=dict, repr=False)
    vector_width: int = 1  # lanes of the ``lane`` variable, when the kernel is vectorized
    opts: tuple[Opt, ...] = ()  # the optimization actions applied, in order
    # which loop runs across threads: None lets the linearizer choose, "off" keeps the kernel on one
    # thread, a Var names the output loop (set by the ``thread`` action)
    parallel: Any = None
    # the param holding the symbolic sizes (int64, one per :class:`Dim` slot) the kernel's loops
    # and indices use, or None (every size a constant)
    dims_param: int | None = None

    def empty_like(self, loops: list[Loop], vector_width: int | None = None) -> Kernel:
        """A kernel with this one's name, params, actions and threading, new loops and no values."""
        return Kernel(self.name, self.params, loops, vector_width=self.vector_width if vector_width is None
                      else vector_width, opts=self.opts, parallel=self.parallel, dims_param=self.dims_param)

    def u(self, op: str, dtype: DType, src: tuple[U, ...] = (), arg: Any = None) -> U:
        """The unique value for (op, dtype, src, arg) in this kernel."""
        key = (op, dtype, tuple(id(s) for s in src), _arg_key(arg))
        found = self._cse.get(key)
        if found is None:
            found = self._cse[key] = U(op, dtype, src, arg, key)
        return found

    def values(self) -> list[U]:
        """Every value the stores need, sources before users."""
        return post_order(st.value for st in self.stores)

    def symbolic(self) -> bool:
        """Whether a loop of the kernel runs over a symbolic size (known only at run time)."""
        return self.dims_param is not None and any(is_symbolic(lp.size) for lp in self.loops + self.reduce_loops())

    def reduce_loops(self) -> list[Loop]:
        return [lp for u in self.values() if u.op == "reduce" for lp in u.arg[1]]

    def substitute(self, mapping: dict[Var, Sym], loops: list[Loop],
                   reduce_loops: dict[int, tuple[Loop, ...]] | None = None) -> Kernel:
        """A copy with loop variables replaced (used to merge loops) and new output loops.

        ``reduce_loops`` maps ``id`` of a reduce value to its replacement loop tuple."""
        out = self.empty_like(loops)
        memo: dict[int, U] = {}
        for u in self.values():
            src = tuple(memo[id(s)] for s in u.src)
            arg = substitute_arg(u, mapping)
            if u.op == "reduce" and reduce_loops and id(u) in reduce_loops:
                arg = (arg[0], reduce_loops[id(u)])
            memo[id(u)] = out.u(u.op, u.dtype, src, arg)
        out.stores = [s.moved(mapping, memo[id(s.value)]) for s in self.stores]
        return out

    # cost model, for CORVID_DEBUG and the roofline report -------------------------------------------
    def estimates(self) -> tuple[int, int]:
        """(floating point operations, bytes moved): each float ALU op and each float accumulate
        counted once per iteration of the loops it runs in as generated (hoisted out of the loops
        it does not depend on: a layer norm's mean is not recounted inside its variance's loop),
        times the lanes of a vector value, and every buffer read or written once (the compulsory
        traffic)."""
        trips = _trip_counts(self)
        lanes = self.vector_width
        vec: set[int] = set()
        if lanes > 1:
            lane = Var("lane", 0, lanes - 1)
            for u in self.values():
                if any(lane in s.vars() for s in u.syms()) or any(id(x) in vec for x in u.src):
                    vec.add(id(u))
        flops = 0
        for u in self.values():
            if u.dtype.is_float and u.op in ("alu", "reduce", "mulacc"):
                n = trips[id(u.src[0])] if u.op == "reduce" else trips[id(u)]
                flops += n * (lanes if id(u) in vec else 1) * (2 if u.op == "mulacc" else 1)
        nbytes = sum(hint(p.size) * p.dtype.itemsize for p in self.params)
        return flops, nbytes


def post_order(roots: Iterable[U]) -> list[U]:
    """The values under ``roots``, sources before users, each once (iterative: any depth)."""
    order: list[U] = []
    seen: set[int] = set()
    for root in roots:
        stack = [(root, False)]
        while stack:
            x, done = stack.pop()
            if done:
                order.append(x)
            elif id(x) not in seen:
                seen.add(id(x))
                stack.append((x, True))
                stack.extend((s, False) for s in reversed(x.src) if id(s) not in seen)
    return order


def _trip_counts(k: Kernel) -> dict[int, int]:
    """How often each value runs, as placed by linearize (a reduce: how often its update runs)."""
    from .linearize import placement

    values, place = placement(k)
    size = {lp.var: hint(lp.size) for lp in k.loops}
    for u in values:
        if u.op == "reduce":
            size.update({lp.var: hint(lp.size) for lp in u.arg[1]})
    counts: dict[int, int] = {}
    for u in values:
        n = math.prod(size.get(v, 1) for v in place[id(u)])
        counts[id(u)] = n
        if u.op == "reduce":  # keyed by the body value, as estimates() reads it
            counts[id(u.src[0])] = max(counts.get(id(u.src[0]), 0), n * math.prod(hint(lp.size) for lp in u.arg[1]))
    return counts


def _arg_key(arg: Any) -> Any:
    if isinstance(arg, float):
        return ("f", arg, math.copysign(1.0, arg), math.isnan(arg))
    if isinstance(arg, complex):  # -0j and 0j (and nan parts) are different constants
        return ("c", _arg_key(arg.real), _arg_key(arg.imag))
    return arg


def substitute_arg(u: U, mapping: dict[Var, Sym]) -> Any:
    """``u``'s argument with loop variables replaced in its index expressions."""
    arg = u.arg
    if u.op == "load":  # (param, index, gate)
        return (arg[0], arg[1].substitute(mapping), None if arg[2] is None else arg[2].substitute(mapping))
    if u.op == "index":
        return arg.substitute(mapping)
    if u.op == "gather":  # (param, base index, stride, size, gate)
        return (arg[0], arg[1].substitute(mapping), arg[2], arg[3], None if arg[4] is None else arg[4].substitute(mapping))
    return arg

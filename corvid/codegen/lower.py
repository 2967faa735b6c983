"""Lowering: one kernel's piece of the lazy graph → the kernel IR.

The walk starts at the kernel's output with one loop variable per output dimension and carries,
for every node it visits, the symbolic index of each of that node's dimensions plus a *gate*
(the condition under which the element is real, not padding):

* elementwise ops pass index and gate through unchanged;
* movement ops rewrite the index (reshape: flatten then unflatten; permute: reorder; expand: 0;
  shrink: offset; flip: mirror; pad: shift, and the gate gains the in-bounds test);
* a reduce introduces new loop variables for its reduced axes;
* a node that is stored in a buffer becomes a (gated) load at the flat index.

Afterwards adjacent loops are merged wherever that does not add divisions or modulos to any
index, so a contiguous elementwise kernel of any rank becomes one flat loop.

Some chains of views have no short index: ``x.flip(0).reshape(4, 3).reshape(3, 4)`` repeated
reuses each index several times, and the simplifier cannot fold it, so the index written out grows
fivefold per round (8 rounds: a C source of 10^6 terms, which never finished rendering). Given
``max_index``, the lowering refuses a view whose index and gate would be larger than that
(:class:`LoweringTooLarge` naming the view's source in ``cut``); the scheduler then stores that
source, and the next kernel starts again from a plain buffer index.
"""

from __future__ import annotations

import math
from itertools import count
from typing import Callable, Generator

from ..dtype import bool_ as _BOOL
from ..dtype import float64 as _F64
from ..dtype import int64 as _I64
from ..graph.node import ELEMENTWISE, IDENTITY, Node, Op
from ..graph.symbolic import FloorDiv, Mod, Num, Sym, Var, count_divmod, is_symbolic, loop_var, sym_and
from .ir import Kernel, Loop, Param, Store, U, substitute_arg


def strides_of(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major element strides of a contiguous array."""
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc if s != 1 else 0)
        acc *= s
    return tuple(reversed(out))


def flat_index(idx: tuple[Sym, ...], shape: tuple[int, ...]) -> Sym:
    flat: Sym = Num(0)
    for i, st in zip(idx, strides_of(shape)):
        if st:
            flat = flat + i * st
    return flat


# float constants that stay literals in the source (folding them matters, and they rarely vary);
# every other finite float constant is read from the kernel's constants buffer (see runtime_const)
BAKED_FLOATS = frozenset({0.0, 1.0, -1.0, 0.5, 2.0})


INT_CONST_MAX = 1 << 53  # (integers the float64 constants buffer holds exactly)
_COMPARES = frozenset({Op.CMPLT, Op.CMPEQ, Op.CMPNE})
_MOVES = frozenset({Op.RESHAPE, Op.PERMUTE, Op.EXPAND, Op.SHRINK, Op.FLIP})


def compared_consts(nodes: list[Node]) -> frozenset[int]:
    """The ids of the integer CONST nodes (seen through views) that ``nodes`` only compare with:
    read at run time on the C backend (:func:`runtime_const`)."""
    compared, other = set(), set()
    for n in nodes:
        if n.op in _MOVES:  # (a view of the constant: its consumers decide)
            continue
        for s in n.src:
            while s.op in _MOVES and s.src:
                s = s.src[0]
            if s.op is Op.CONST and s.dtype.is_int:
                (compared if n.op in _COMPARES else other).add(id(s))
    return frozenset(compared - other)


def _plain(a: float) -> bool:
    return math.isfinite(a) and not (a == 0.0 and math.copysign(1.0, a) < 0)


def runtime_const(n: Node, ints: bool = False) -> bool:
    """Whether the CONST node ``n`` is a kernel argument rather than a literal: a finite float
    other than :data:`BAKED_FLOATS` (and not -0.0), so ``x * lr`` compiles once for every ``lr``;
    likewise a complex one (two values: its parts), other than 0, 1 and -1; with ``ints`` (kernels
    of the C backend, for a constant only compared with: :func:`compared_consts`), an integer above
    16 in size that is not a power of two and fits a float64 exactly (``labels == k`` for each class
    ``k``). Integer arithmetic keeps its literals: multiplying or dividing by a runtime value
    measured 1.6 to 5.5 times slower (a random generator's hash, ``x // 1000``)."""
    a = n.arg
    if ints and n.dtype.is_int and isinstance(a, int) and not isinstance(a, bool):
        m = abs(a)
        return 16 < m <= INT_CONST_MAX and m & (m - 1) != 0
    if n.dtype.is_complex:
        return isinstance(a, complex) and _plain(a.real) and _plain(a.imag) and a not in (0, 1, -1)
    return n.dtype.is_float and isinstance(a, float) and _plain(a) and a not in BAKED_FLOATS


# what a node being lowered asks for: the value of (source, index, gate)
Need = tuple[Node, tuple[Sym, ...], Sym]


class LoweringTooLarge(RuntimeError):
    """A region whose fused kernel would have more values than the lowering's ``limit`` (a
    reduce re-evaluated inside another, level after level: a recurrence over a matmul), or an
    index larger than its ``max_index``. ``cut`` is then the node to store so that the region
    splits where its index grew too large (None for too many values)."""

    def __init__(self, message: str, cut: Node | None = None):
        super().__init__(message)
        self.cut = cut


class _Lowerer:
    def __init__(self, kernel: Kernel, param_of: Callable[[Node], int | None], limit: float = math.inf,
                 max_index: float = math.inf, int_consts: frozenset[int] = frozenset()):
        self.k, self.param_of, self.limit, self.max_index = kernel, param_of, limit, max_index
        self.consts: list[Node] = []  # runtime constants, in the order of their slots
        self.const_slot: dict[int, int] = {}  # a runtime constant's first value in the buffer
        self.const_values = 0  # values in the constants buffer (a complex constant has two)
        self.int_consts = int_consts  # ids of the integer constants read at run time (see runtime_const)
        self.const_param: int | None = None
        self.memo: dict[tuple, U] = {}
        self.reduce_origin: dict[int, Node] = {}  # id of a reduce value -> the graph node it computes
        self.names = count()
        self.stand_ins: dict[Var, Sym] = {}  # a padded dimension's in-bounds index -> its expression

    def new_var(self, prefix: str, size: int | Sym) -> Var:
        return loop_var(f"{prefix}{next(self.names)}", size)

    def emit(self, n: Node, idx: tuple[Sym, ...], gate: Sym, root: bool = False) -> U:
        """The value of element ``idx`` of ``n`` where ``gate`` holds (memoized per (node, index, gate)).

        The walk keeps its own stack: each node being lowered is a generator (:meth:`_emit`) that
        yields the ``(source, index, gate)`` it needs and is sent that value back, so a chain of
        any depth lowers without Python recursion (a 400-op elementwise chain used to overflow)."""
        key = (id(n), idx, gate)
        found = self.memo.get(key)
        if found is not None:
            return found
        stack = [(key, self._start(n, idx, gate, root))]
        value: U | None = None
        while stack:
            key, walk = stack[-1]
            try:
                s, s_idx, s_gate = walk.send(value)
            except StopIteration as done:
                stack.pop()
                value = self.memo[key] = done.value
                continue
            key = (id(s), s_idx, s_gate)
            value = self.memo.get(key)
            if value is None:
                stack.append((key, self._start(s, s_idx, s_gate, False)))
        assert value is not None
        return value

    def _start(self, n: Node, idx: tuple[Sym, ...], gate: Sym, root: bool) -> Generator[Need, U, U]:
        if len(self.memo) >= self.limit:
            raise LoweringTooLarge(f"more than {self.limit} distinct values")
        return self._emit(n, idx, gate, root)

    def _emit(self, n: Node, idx: tuple[Sym, ...], gate: Sym, root: bool) -> Generator[Need, U, U]:
        k, op = self.k, n.op
        param = None if root else self.param_of(n)
        if param is not None:
            return k.u("load", n.dtype, (), (param, flat_index(idx, n.shape), None if gate == Num(1) else gate))
        if op is Op.CONST:
            if isinstance(n.arg, Sym):  # a symbolic size as a value
                v = k.u("index", _I64, (), n.arg)
                return v if n.dtype is _I64 else k.u("cast", n.dtype, (v,), None)
            if not runtime_const(n, id(n) in self.int_consts):
                return k.u("const", n.dtype, (), n.arg)
            slot = self.const_slot.get(id(n))
            if slot is None:
                slot = self.const_slot[id(n)] = self.const_values
                self.consts.append(n)
                self.const_values += 2 if n.dtype.is_complex else 1
            if self.const_param is None:  # its size is set when lowering ends
                self.const_param = len(k.params)
                k.params.append(Param(_F64, 0, False))
            if n.dtype.is_complex:  # (its parts, then the complex number)
                part = n.dtype.real_dtype
                re, im = (k.u("load", _F64, (), (self.const_param, Num(slot + j), None)) for j in (0, 1))
                if part is not _F64:
                    re, im = k.u("cast", part, (re,), None), k.u("cast", part, (im,), None)
                return k.u("alu", n.dtype, (re, im), Op.COMPLEX)
            v = k.u("load", _F64, (), (self.const_param, Num(slot), None))
            return v if n.dtype is _F64 else k.u("cast", n.dtype, (v,), None)
        if op is Op.IOTA:
            return k.u("index", n.dtype, (), idx[0])
        if op in ELEMENTWISE:
            src = []
            for s in n.src:
                src.append((yield s, idx, gate))
            if op in (Op.CAST, Op.BITCAST):
                return k.u(op.name.lower(), n.dtype, tuple(src), n.arg)
            return k.u("alu", n.dtype, tuple(src), op)
        if op is Op.CONTIGUOUS or op in IDENTITY:
            if not n.src:
                raise ValueError(f"{n}: a placeholder has no value to compute")
            return (yield n.src[0], idx, gate)
        if op is Op.GATHER:
            return (yield from self._gather(n, idx, gate))
        if op is Op.REDUCE:
            red_op, axes = n.arg
            src_shape = n.src[0].shape
            loops = tuple(Loop(self.new_var("r", src_shape[a]), src_shape[a], "reduce") for a in axes)
            inner = list(idx)
            for a, lp in zip(axes, loops):
                inner[a] = lp.var
            body = yield n.src[0], tuple(inner), gate
            u = k.u("reduce", n.dtype, (body,), (red_op, loops))
            self.reduce_origin[id(u)] = n
            return u
        return (yield from self._movement(n, idx, gate))

    def _gather(self, n: Node, idx: tuple[Sym, ...], gate: Sym) -> Generator[Need, U, U]:
        """An indirect load: the index value is computed here, the other coordinates address the
        stored operand: directly, or through the views (:func:`gather_address`) over it."""
        x, ix = n.src
        axis = n.arg
        found = gather_address(x, axis, stop=lambda m: self.param_of(m) is not None)
        if found is not None:
            read, base, stride, cs = found
            param = self.param_of(read)
            base = base.substitute({c: i for d, (c, i) in enumerate(zip(cs, idx)) if d != axis})
        else:
            param = self.param_of(x)
            if param is None:
                raise NotImplementedError(f"GATHER reads from {x}, which the scheduler did not store")
            strides = strides_of(x.shape)
            base, stride = Num(0), strides[axis]
            for d, (i, st) in enumerate(zip(idx, strides)):
                if d != axis and st and x.shape[d] != 1:
                    base = base + i * st
        v = yield ix, idx, gate
        return self.k.u("gather", n.dtype, (v,), (param, base, stride, x.shape[axis],
                                                  None if gate == Num(1) else gate))

    def _movement(self, n: Node, idx: tuple[Sym, ...], gate: Sym) -> Generator[Need, U, U]:
        (src,), op, arg, shape = n.src, n.op, n.arg, n.src[0].shape
        if op in VIEWS:
            new_idx = view_index(n, idx)
            self._check_size(src, new_idx, gate)
            return (yield src, new_idx, gate)
        if op is Op.PAD:
            pads, value = arg
            new_idx, conds = [], []
            for i, (before, _), size in zip(idx, pads, shape):
                j = i - before
                c = [j.ge(0), j.lt(size)]
                conds += c
                if size > 0 and not isinstance(j, Num) and sym_and(*c) != Num(1):
                    # Inside the gate j is in [0, size): the source is indexed by a stand-in
                    # variable with that range, which the simplifier can use (a reshape's // and %
                    # of it vanish), and which becomes j again when lowering ends. Out of the gate
                    # the stand-in's arithmetic may differ, but there every load is gated and the
                    # value is replaced by the pad value.
                    v = self.new_var("p", size)
                    self.stand_ins[v] = j
                    j = v
                new_idx.append(j)
            valid = sym_and(*conds)
            if valid == Num(0):
                return self.k.u("const", n.dtype, (), value)
            inner_gate = sym_and(gate, valid)
            self._check_size(src, new_idx, inner_gate)
            inner = yield src, tuple(new_idx), inner_gate
            if valid == Num(1):
                return inner
            cond = self.k.u("index", _BOOL, (), valid)
            return self.k.u("alu", n.dtype, (cond, inner, self.k.u("const", n.dtype, (), value)), Op.WHERE)
        raise NotImplementedError(f"cannot lower {op}")

    def _check_size(self, src: Node, idx: tuple[Sym, ...] | list[Sym], gate: Sym) -> None:
        """Refuse to read ``src`` at an index (with its gate) larger than ``max_index`` written out,
        unless ``src`` is loaded from a buffer anyway."""
        size = gate.tree_size + sum(i.tree_size for i in idx)
        if size > self.max_index and self.param_of(src) is None:
            raise LoweringTooLarge(f"an index of {size} terms reading {src}", cut=src)


VIEWS = frozenset({Op.RESHAPE, Op.PERMUTE, Op.EXPAND, Op.SHRINK, Op.FLIP})  # movement ops without a gate


def view_index(n: Node, idx: tuple[Sym, ...]) -> tuple[Sym, ...]:
    """The index into ``n``'s source of element ``idx`` of the view ``n`` (an op of VIEWS)."""
    op, arg, shape = n.op, n.arg, n.src[0].shape
    if op is Op.RESHAPE:
        flat = flat_index(idx, n.shape)
        return tuple(Num(0) if size == 1 else (flat // st) % size for size, st in zip(shape, strides_of(shape)))
    if op is Op.PERMUTE:
        inv: list[Sym] = [Num(0)] * len(arg)
        for out_dim, src_dim in enumerate(arg):
            inv[src_dim] = idx[out_dim]
        return tuple(inv)
    if op is Op.EXPAND:
        return tuple(Num(0) if s == 1 else i for i, s in zip(idx, shape))
    if op is Op.SHRINK:
        return tuple(i + b for i, (b, _) in zip(idx, arg))
    return tuple((s - 1) - i if d in arg else i for d, (i, s) in enumerate(zip(idx, shape)))  # FLIP


_SEEN_THROUGH = VIEWS | IDENTITY  # (marks: a detach or requires_grad mark over the table, under jit too)


def gather_address(x: Node, axis: int, stop: Callable[[Node], bool] | None = None
                   ) -> tuple[Node, Sym, int, tuple[Var, ...]] | None:
    """Where a GATHER along ``axis`` of ``x`` reads when ``x`` is a chain of views (no pad): (the
    node under the views, the flat index there of element ``(c0, c1, ...)`` of ``x`` with the
    gathered coordinate 0, the step per unit of that coordinate, the variables ``c``: the
    ``axis`` entry is unused). None when there is no view to see through, the gathered axis is
    empty, or the views do not step through memory evenly along it (a reshape that splits it):
    the scheduler then stores ``x`` itself, a copy. Reading through the views spares that copy:
    ``table[idx]`` used to copy the whole table. The scheduler and the lowering both ask here,
    so they agree on what is stored; the walk also ends at a node ``stop`` says is stored (a
    kernel input already)."""
    if x.op not in _SEEN_THROUGH or not x.src or x.shape[axis] == 0:
        return None
    cs = tuple(loop_var(f"c{d}", s) if is_symbolic(s) else Var(f"c{d}", 0, max(s - 1, 0)) for d, s in enumerate(x.shape))
    g = cs[axis]
    at = tuple(c if d == axis or s != 1 else Num(0) for d, (c, s) in enumerate(zip(cs, x.shape)))
    def see_through(m: Node) -> bool:
        return m.op in _SEEN_THROUGH and bool(m.src) and m.buffer is None and not (stop is not None and stop(m))

    n, flat = x, None
    while see_through(n):
        if n.op is Op.RESHAPE and not see_through(n.src[0]):
            # a reshape keeps the row-major order: the flat index under the last one is the flat
            # index of its own coordinates (its div/mod form did not simplify back, as with a 3-d
            # table read through reshape(-1), which was then copied whole)
            flat, n = flat_index(at, n.shape), n.src[0]
            break
        at, n = (at if n.op in IDENTITY else view_index(n, at)), n.src[0]
    if n.buffer is None and not n.src:  # a literal or a generator (CONST, IOTA): never given a buffer here
        return None
    if flat is None:
        flat = flat_index(at, n.shape)
    base = flat.substitute({g: Num(0)})
    if x.shape[axis] == 1:  # only coordinate 0 is read (the gate drops the rest): no step to find
        return n, base, 0, cs
    stride = flat.substitute({g: Num(1)}) - base
    if not isinstance(stride, Num) or base + g * stride.value != flat:
        return None
    return n, base, stride.value, cs


class GroupIndexMismatch(RuntimeError):
    """A kernel of several outputs (:func:`lower_unmerged` given a list of roots) where one output
    reads another at an element other than its own (``m2 = m1 + m1.flip(0)``): computed inline,
    that output would be evaluated twice per element. The scheduler then gives each its own kernel."""


def lower_unmerged(name: str, root: Node | list[Node], inputs: list[Node], limit: float = math.inf,
                   max_index: float = math.inf, int_consts: frozenset[int] = frozenset()
                   ) -> tuple[Kernel, _Lowerer]:
    """Lower the graph under ``root`` into a kernel storing ``root`` into param 0, one loop per
    output dimension. ``inputs`` are the nodes read from buffers (params 1..n).
    :class:`LoweringTooLarge` when it would emit more than ``limit`` values, or read a computed
    node at an index (and gate) of more than ``max_index`` terms (see :attr:`Sym.tree_size`).

    ``root`` may be a list of nodes of one shape (a kernel of several outputs, see
    ``engine/schedule.py: _groups``): output ``i`` is param ``i``, the inputs follow, and all the
    outputs share the loops, so a value two of them need is computed once. One output may read
    another only at its own element (:class:`GroupIndexMismatch` otherwise)."""
    roots = root if isinstance(root, list) else [root]
    shape = roots[0].shape
    if any(r.shape != shape for r in roots):
        raise ValueError(f"the outputs of one kernel must have one shape, got {[r.shape for r in roots]}")
    params = [Param(r.dtype, r.numel, True) for r in roots] + [Param(n.dtype, n.numel, False) for n in inputs]
    index_of = {id(n): i + len(roots) for i, n in enumerate(inputs)}
    kernel = Kernel(name, params, [])
    # the symbolic sizes' values (a kernel of a jit trace with symbolic dimensions: transforms/jit.py)
    kernel.dims_param = next((i + len(roots) for i, n in enumerate(inputs) if n.op is Op.VAR and not n.src
                              and n.arg.kind == "jit-dims"), None)
    lw = _Lowerer(kernel, lambda n: index_of.get(id(n)), limit, max_index, int_consts)
    loops = [Loop(lw.new_var("i", s), s, "global") for s in shape]
    idx = tuple(lp.var if lp.size > 1 else Num(0) for lp in loops)
    values = [lw.emit(r, idx, Num(1), root=True) for r in roots]
    if len(roots) > 1:
        own = {id(r): (id(r), idx, Num(1)) for r in roots}
        for key in lw.memo:
            if key[0] in own and key != own[key[0]]:
                raise GroupIndexMismatch(f"{name}: an output is read at another element by another output")
    if lw.const_param is not None:
        kernel.params[lw.const_param] = Param(_F64, lw.const_values, False)
    kernel.loops = [lp for lp in loops if lp.size > 1]
    flat = flat_index(idx, shape)
    kernel.stores = [Store(i, flat, v) for i, v in enumerate(values)]
    if lw.stand_ins:
        kernel = _substituted(kernel, lw, _resolved(lw.stand_ins))
    return kernel, lw


def _substituted(k: Kernel, lw: _Lowerer, mapping: dict[Var, Sym]) -> Kernel:
    """``k`` with ``mapping`` applied, and the lowerer's maps of values (``memo``,
    ``reduce_origin``) pointing at the new values."""
    out = k.empty_like(k.loops)
    memo: dict[int, U] = {}
    for u in k.values():
        memo[id(u)] = out.u(u.op, u.dtype, tuple(memo[id(x)] for x in u.src), substitute_arg(u, mapping))
    out.stores = [st.moved(mapping, memo[id(st.value)]) for st in k.stores]
    lw.memo = {key: memo[id(u)] for key, u in lw.memo.items() if id(u) in memo}
    lw.reduce_origin = {id(memo[i]): n for i, n in lw.reduce_origin.items() if i in memo}
    return out


def _resolved(stand_ins: dict[Var, Sym]) -> dict[Var, Sym]:
    """The stand-ins of padded dimensions with the stand-ins inside their own expressions (a pad
    of a pad) replaced too, so that one substitution removes them all."""
    out: dict[Var, Sym] = {}
    for v, e in stand_ins.items():  # in creation order: an outer pad's stand-in comes first
        out[v] = e.substitute(out) if out else e
    return out


def lower(name: str, root: Node, inputs: list[Node], device: str | None = None) -> Kernel:
    """Lower ``root``'s kernel, merge its loops and optimize it: for ``device`` by
    :func:`corvid.codegen.search.optimize` (heuristics, or beam search when asked for), else by
    the heuristics."""
    from .opt import apply_heuristics
    from .search import optimize

    k = merge_loops(lower_unmerged(name, root, inputs)[0])
    return apply_heuristics(k) if device is None else optimize(k, device)


# --- loop merging ------------------------------------------------------------------------------------


def _divmod_cost(k: Kernel) -> int:
    return sum(count_divmod(s) for u in k.values() for s in u.syms()) + sum(count_divmod(s.index) for s in k.stores)


def _merge_pair(a: Loop, b: Loop, fresh: Var) -> tuple[Loop, dict[Var, Sym]]:
    merged = Loop(fresh, a.size * b.size, a.kind)
    return merged, {a.var: fresh // b.size, b.var: fresh % b.size}


def _divisors(k: Kernel, v: Var) -> list[int]:
    """The ``d`` of every ``v // d`` and ``v % d`` in the kernel's indices, in order of appearance."""
    found: list[int] = []
    roots = [x for u in k.values() for x in u.syms()] + [st.index for st in k.stores]
    stack, seen = roots[::-1], set()
    while stack:  # in pre-order, with its own stack, each shared node once (an index is a DAG)
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, (FloorDiv, Mod)) and x.x == v and x.d not in found:
            found.append(x.d)
        stack.extend(reversed(x._children()))
    return found


def split_divided_loops(k: Kernel) -> Kernel:
    """Split an output loop whose variable the indices take apart (``v // d`` and ``v % d``, as a
    reshape of a permuted view writes them) into an outer and an inner loop, when that leaves fewer
    divisions: the inner loop is then a plain stride that the optimizer can vectorize and tile."""
    cost = _divmod_cost(k)
    d = 0
    while d < len(k.loops):
        lp = k.loops[d]
        if is_symbolic(lp.size):  # (a loop over a symbolic size keeps its variable)
            d += 1
            continue
        for div in _divisors(k, lp.var):
            if not 1 < div < lp.size or lp.size % div:
                continue
            o, i = Var(f"{lp.var.name}o", 0, lp.size // div - 1), Var(f"{lp.var.name}i", 0, div - 1)
            trial = k.substitute({lp.var: o * div + i},
                                 k.loops[:d] + [Loop(o, lp.size // div, lp.kind), Loop(i, div, lp.kind)] + k.loops[d + 1:])
            trial_cost = _divmod_cost(trial)
            if trial_cost < cost:
                k, cost = trial, trial_cost
                break
        else:
            d += 1
    return k


def merge_loops(k: Kernel) -> Kernel:
    """Merge adjacent loops (output loops, and loops of each reduce) while no index gets costlier
    (after :func:`split_divided_loops`, which undoes a merge a reshape made costly)."""
    k = split_divided_loops(k)
    cost = _divmod_cost(k)
    names = count()
    d = len(k.loops) - 2
    while d >= 0:
        a, b = k.loops[d], k.loops[d + 1]
        if is_symbolic(a.size) or is_symbolic(b.size):  # (the inner loop keeps a constant size)
            d -= 1
            continue
        merged, mapping = _merge_pair(a, b, Var(f"i{a.var.name[1:]}_{next(names)}", 0, a.size * b.size - 1))
        trial = k.substitute(mapping, k.loops[:d] + [merged] + k.loops[d + 2:])
        trial_cost = _divmod_cost(trial)
        if trial_cost <= cost:
            k, cost = trial, trial_cost
        d -= 1
    n_reduces = sum(1 for u in k.values() if u.op == "reduce")
    for ri in range(n_reduces):  # look each reduce up again: every accepted merge rebuilds the kernel
        red_now = [u for u in k.values() if u.op == "reduce"][ri]
        d = len(red_now.arg[1]) - 2
        while d >= 0:
            loops = red_now.arg[1]
            a, b = loops[d], loops[d + 1]
            if is_symbolic(a.size) or is_symbolic(b.size):
                d -= 1
                continue
            merged, mapping = _merge_pair(a, b, Var(f"r{a.var.name[1:]}_{next(names)}", 0, a.size * b.size - 1))
            new_loops = loops[:d] + (merged,) + loops[d + 2:]
            trial = k.substitute(mapping, k.loops, {id(red_now): new_loops})
            trial_cost = _divmod_cost(trial)
            if trial_cost <= cost:
                k, cost = trial, trial_cost
                red_now = [u for u in k.values() if u.op == "reduce"][ri]
            d -= 1
    return k


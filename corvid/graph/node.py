"""The lazy graph: immutable, hash-consed nodes over a small set of primitive ops.

Every Tensor operation builds a :class:`Node`. Nodes are created only through :func:`node`, which
returns the existing node when an identical one (same op, same sources, same argument) is alive:
a common subexpression is one node and therefore computes once.

A node carries its shape and dtype. Elementwise primitives require equal shapes (the Tensor layer
inserts explicit broadcasts), so every rule downstream is simple.
"""

from __future__ import annotations

import math
import weakref
from _weakref import _remove_dead_weakref
from enum import Enum, auto
from typing import Any

from ..dtype import DType


class Op(Enum):
    # sources
    BUFFER = auto()  # realized memory; arg: a runtime Buffer
    CONST = auto()  # a scalar broadcast to the node's shape; arg: Python value
    IOTA = auto()  # 0, 1, 2, ... along a 1-d shape
    # unary math (renderers implement them natively)
    NEG = auto(); RECIP = auto(); SQRT = auto(); EXP = auto(); EXP2 = auto(); LOG = auto()  # noqa: E702
    LOG2 = auto(); LOG1P = auto(); EXPM1 = auto(); SIN = auto(); COS = auto(); TAN = auto()  # noqa: E702
    ASIN = auto(); ACOS = auto(); ATAN = auto(); SINH = auto(); COSH = auto(); TANH = auto()  # noqa: E702
    ASINH = auto(); ACOSH = auto(); ATANH = auto(); ERF = auto(); ABS = auto()  # noqa: E702
    ERFC = auto(); LGAMMA = auto()  # noqa: E702
    FLOOR = auto(); CEIL = auto(); ROUND = auto(); TRUNC = auto()  # noqa: E702
    CAST = auto(); BITCAST = auto()  # arg: target DType  # noqa: E702
    # complex parts: REAL and IMAG give the real dtype of the parts, CONJ keeps the dtype
    REAL = auto(); IMAG = auto(); CONJ = auto()  # noqa: E702
    # binary
    ADD = auto(); SUB = auto(); MUL = auto(); DIV = auto(); IDIV = auto(); MOD = auto()  # noqa: E702
    POW = auto(); MAX = auto(); MIN = auto(); ATAN2 = auto()  # noqa: E702
    CMPLT = auto(); CMPEQ = auto(); CMPNE = auto()  # noqa: E702
    AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto()  # noqa: E702
    COMPLEX = auto()  # COMPLEX(re, im): two equal real float dtypes -> the complex dtype of that width
    # ternary
    WHERE = auto()
    # reduce over axes, keeping them as size 1; arg: (reduce op, axes)
    REDUCE = auto()
    # movement: arg is the op's parameter
    RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()  # noqa: E702
    # realization boundary: force a stored copy
    CONTIGUOUS = auto()
    # the value moved between devices; arg: (source device, destination device). The scheduler
    # computes the source on its device and gives the copy a step of its own (engine/schedule.py)
    COPY = auto()
    # transforms (autodiff, vmap, jit). VAR marks a variable a transform differentiates or
    # batches; arg: a unique Mark. With one source it is the identity on that source's value;
    # with none it is a placeholder that has no value (realizing it is an error). DETACH is the
    # identity whose derivative is zero (detach, stop_gradient, no_grad).
    VAR = auto(); DETACH = auto()  # noqa: E702
    # a host function (engine/host.py): arg (HostOp, output shapes); value: the outputs packed flat
    CUSTOM = auto()
    # indirect read: GATHER(x, idx), arg axis: out[..., j, ...] = x[..., idx[..., j, ...], ...] along
    # axis (take_along_axis); the result has idx's shape; x has the same rank, each other dimension
    # equal to idx's or 1 (broadcast). An index outside [0, x.shape[axis]) reads 0.
    GATHER = auto()
    # indirect write: SCATTER(x, idx, src), arg (reduce, nj): x is J + (n,) + R (len(J) = nj), idx
    # J + (m,) or J + (m,) + R int64, src J + (m,) + R; out = x with each src[j, i, r] combined into
    # [j, idx[j, i(, r)], r] by reduce ("set", "sum", "prod", "max", "min"), in index order. An
    # index outside [0, n) is dropped. Its own kernel (engine/schedule.py) over stored operands.
    SCATTER = auto()

    # members are singletons compared by identity: hash them by identity too (C speed; Enum's own
    # __hash__ is a Python function, and every node() lookup hashes an Op)
    __hash__ = object.__hash__


UNARY = frozenset(
    {Op.NEG, Op.RECIP, Op.SQRT, Op.EXP, Op.EXP2, Op.LOG, Op.LOG2, Op.LOG1P, Op.EXPM1, Op.SIN, Op.COS,
     Op.TAN, Op.ASIN, Op.ACOS, Op.ATAN, Op.SINH, Op.COSH, Op.TANH, Op.ASINH, Op.ACOSH, Op.ATANH,
     Op.ERF, Op.ERFC, Op.LGAMMA, Op.ABS, Op.FLOOR, Op.CEIL, Op.ROUND, Op.TRUNC, Op.CAST, Op.BITCAST,
     Op.REAL, Op.IMAG, Op.CONJ})
BINARY = frozenset(
    {Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.IDIV, Op.MOD, Op.POW, Op.MAX, Op.MIN, Op.ATAN2, Op.CMPLT,
     Op.CMPEQ, Op.CMPNE, Op.AND, Op.OR, Op.XOR, Op.SHL, Op.SHR, Op.COMPLEX})
COMPARISON = frozenset({Op.CMPLT, Op.CMPEQ, Op.CMPNE})
ELEMENTWISE = UNARY | BINARY | {Op.WHERE}
MOVEMENT = frozenset({Op.RESHAPE, Op.PERMUTE, Op.EXPAND, Op.PAD, Op.SHRINK, Op.FLIP})
IDENTITY = frozenset({Op.VAR, Op.DETACH})  # value-preserving markers, free in kernels
REDUCE_OPS = ("sum", "prod", "max", "min")


class Node:
    """One immutable node of the lazy graph. Create with :func:`node`, never directly.

    ``buffer`` is the one mutable slot: the engine sets it when the node's value is computed, so
    every graph that still refers to this node reads the stored value instead of recomputing it.
    """

    __slots__ = ("op", "src", "arg", "dtype", "shape", "buffer", "traced", "marked", "walked", "__weakref__")

    def __init__(self, op: Op, src: tuple[Node, ...], arg: Any, dtype: DType, shape: tuple[int, ...]):
        self.op, self.src, self.arg, self.dtype, self.shape = op, src, arg, dtype, shape
        self.buffer = arg if op is Op.BUFFER else None
        self.walked = None  # a replayed root's walk (engine/replay.py), which realizing it checks and reuses
        # traced: a VAR lies below (outside a DETACH): the node depends on a marked variable.
        # marked: a VAR lies below, DETACHes or not (what a transform that takes its VARs out of a
        # graph must visit: the value under a DETACH is computed over them all the same)
        traced = marked = op is Op.VAR
        if not traced:
            for s in src:
                if s.marked:
                    marked = True
                    if s.traced and op is not Op.DETACH:
                        traced = True
                        break
        self.traced, self.marked = traced, marked

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        arg = "" if self.arg is None or self.op is Op.BUFFER else f", {self.arg}"
        return f"<{self.op.name}{arg} {self.dtype.name}{list(self.shape)}>"


class _KeyRef(weakref.ref):
    """A weak reference that remembers its ``_live`` key (set after creation: no Python __init__)."""

    __slots__ = ("key",)


# the hash-consing table: key -> weak reference to the live node (a WeakValueDictionary, minus
# its Python-level get/set overhead, which dominated graph building)
_live: dict[tuple, _KeyRef] = {}


def _forget(ref: _KeyRef, live: dict[tuple, _KeyRef] = _live) -> None:
    # the node died: drop its entry unless the key already names a newer, live node. The test and
    # the deletion are one C call (atomic under the GIL): a Python ``get`` then ``del`` could delete
    # the entry another thread inserted in between. (The table is bound as a default so that this
    # still works while the interpreter shuts down.)
    _remove_dead_weakref(live, ref.key)


class Mark:
    """The identity of one VAR node: unique per variable, compared by identity.

    ``kind`` says which mechanism made it (``"leaf"`` for a ``requires_grad`` tensor, ``"grad"``,
    ``"jvp"``, ``"vmap"``, ``"jit"`` for transforms); ``data`` is free for that mechanism's use."""

    __slots__ = ("kind", "data", "__weakref__")

    def __init__(self, kind: str, data: Any = None):
        self.kind, self.data = kind, data

    def __repr__(self) -> str:
        return f"Mark({self.kind}@{id(self):x})"


def _arg_key(op: Op, arg: Any) -> Any:
    # -0.0 == 0.0 in Python, but they are different constants
    if op is Op.CONST and isinstance(arg, float):
        return ("f", arg, math.copysign(1.0, arg))
    if op is Op.CONST and isinstance(arg, complex):
        return _complex_key(arg)
    if op is Op.BUFFER or op is Op.VAR:
        return id(arg)
    return arg


def _complex_key(z: complex) -> tuple:
    # the signs of zero parts matter (1/(0-0j) differs from 1/(0+0j)), and 0j == -0j in Python
    return ("c", z, math.copysign(1.0, z.real), math.copysign(1.0, z.imag))


def node(op: Op, src: tuple[Node, ...], arg: Any, dtype: DType, shape: tuple[int, ...]) -> Node:
    """Return the unique live node for (op, src, arg, dtype, shape), creating it if needed.

    Safe from several threads: two threads building the same node get the same object."""
    if op is Op.CONST:
        key = (op, src, ("f", arg, math.copysign(1.0, arg)) if isinstance(arg, float) else
               _complex_key(arg) if isinstance(arg, complex) else arg, dtype, shape)
    elif op is Op.BUFFER or op is Op.VAR:
        key = (op, src, id(arg), dtype, shape)
    else:
        key = (op, src, arg, dtype, shape)  # _arg_key, inlined
    ref = _live.get(key)
    if ref is not None:
        found = ref()
        if found is not None:
            return found
    found = Node(op, src, arg, dtype, shape)
    ref = _KeyRef(found, _forget)
    ref.key = key
    # setdefault inserts atomically: when two threads build the same node at once, the second
    # gets the first's, so a shared subexpression stays one node (computed once)
    other = _live.setdefault(key, ref)
    if other is not ref:
        winner = other()
        if winner is not None:
            return winner
        _live[key] = ref  # a dead entry whose callback has not run yet
    return found


def _never(n: Node) -> bool:
    return False


def toposort(roots: list[Node], stop=_never, children=None) -> list[Node]:
    """Nodes reachable from ``roots`` in dependency order (sources first): a depth-first
    post-order that visits each node's sources in order.

    Traversal does not descend below nodes for which ``stop`` is true (they are still listed).
    ``children(n)`` replaces ``n.src`` as the edges to follow when given.
    """
    # (this runs on every realize: explicit stacks of the nodes being visited, their sources and
    # the next source to visit, with no tuples built per step)
    order: list[Node] = []
    seen: set[int] = set()
    for root in roots:
        if id(root) in seen:
            continue
        seen.add(id(root))
        if stop(root):
            order.append(root)
            continue
        stack, srcs, nxt = [root], [root.src if children is None else children(root)], [0]
        while stack:
            src = srcs[-1]
            i = nxt[-1]
            while i < len(src) and id(src[i]) in seen:
                i += 1
            if i == len(src):
                order.append(stack.pop())
                srcs.pop()
                nxt.pop()
                continue
            nxt[-1] = i + 1
            s = src[i]
            seen.add(id(s))
            if stop(s):
                order.append(s)
            else:
                stack.append(s)
                srcs.append(s.src if children is None else children(s))
                nxt.append(0)
    return order


def graph_dot(roots: list[Node]) -> str:
    """The graph below ``roots`` as Graphviz dot text (``CORVID_DEBUG=4`` prints it)."""
    lines = ["digraph corvid {", "  node [shape=box, fontname=monospace];"]
    for n in toposort(roots):
        label = f"{n.op.name}\\n{n.dtype.name}{list(n.shape)}"
        if n.op not in (Op.BUFFER,) and n.arg is not None:
            label += f"\\n{n.arg}"
        style = ', style=filled, fillcolor="#dddddd"' if n.buffer is not None else ""
        lines.append(f'  n{id(n)} [label="{label}"{style}];')
        lines.extend(f"  n{id(s)} -> n{id(n)};" for s in n.src)
    lines.append("}")
    return "\n".join(lines)

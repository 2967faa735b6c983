"""Vectorizing map: ``vmap(f)`` runs ``f`` once over a whole batch, with no Python loop.

``f`` is traced once on *placeholders* of the per-example shapes (``VAR`` nodes without a
source, see :mod:`corvid.graph.node`). The graph it returns is then rewritten by one batching
rule per primitive: each node becomes ``(new node, batched?)``, where a batched node carries
the batch as its leading axis. Inputs are moved so their mapped axis comes first (a permute,
which never copies) and substitute the placeholders; operands that do not depend on a batched
input stay as they are and are broadcast (``EXPAND``, free) where they meet batched ones. The
rewrite visits each node once, so it costs O(graph size), and the result is an ordinary lazy
graph: a vmapped elementwise chain is still one fused kernel.

Everything composite (matmul, softmax, indexing, cat, stack, ...) is made of primitives, so it
batches for free. Values that need concrete numbers while ``f`` is traced (``item()``,
``bool()``, ``numpy()``) raise the placeholder's ValueError instead of computing anything.

Random draws inside ``f`` follow ``randomness`` (as ``torch.func.vmap``):

* ``"error"`` (default): a draw raises RuntimeError, so a batch never silently shares numbers;
* ``"different"``: every example gets its own numbers. The draw is made once for the whole batch
  (batch x shape numbers from the counter-based generator), so with one draw per call the result
  equals a Python loop over the examples under the same seed;
* ``"same"``: one draw of the per-example shape, shared by every example.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from ..errors import ShapeError
from .. import random as _random
from ..graph.node import ELEMENTWISE, Mark, Node, Op, node, toposort
from ..tensor import Tensor
from ..tree import TreeDef, tree_flatten, tree_structure, tree_unflatten

_RANDOMNESS = ("error", "different", "same")

# A VAR whose mark carries data about its arguments (a custom_jvp call, say) must have that data
# batched too. ``MARK_RULES[kind](mark, batch, size, cache) -> new mark`` does it: ``batch(node)``
# gives ``(batched node, 0 or None)``, ``cache`` is one dict per vmap for the rule's own use.
# Marks of other kinds are kept as they are.
MARK_RULES: dict[str, Callable[[Mark, Callable[[Node], tuple[Node, int | None]], int, dict], Mark]] = {}


def vmap(f: Callable[..., Any], in_axes: Any = 0, out_axes: Any = 0, randomness: str = "error",
         axis_size: int | None = None) -> Callable[..., Any]:
    """Map ``f`` over an axis of its arguments; returns the batched function.

    ``in_axes`` says which axis of each argument is mapped: an int (negative counts from the
    end), ``None`` (not mapped: the same value for every example), or a pytree prefix of the
    argument tuple giving one of those per subtree (``in_axes=(None, 0)``, ``({"w": None}, 1)``).
    Keyword arguments are always mapped over axis 0. ``out_axes`` places the batch axis in each
    output leaf likewise (``None`` is allowed only for outputs that do not depend on the batch).
    Outputs that do not depend on a mapped input are broadcast along the batch axis.
    ``axis_size`` gives the batch size when no argument is mapped (and must agree otherwise).
    ``randomness`` is ``"error"``, ``"different"`` or ``"same"`` (see the module docstring).

    Raises ValueError when the mapped sizes differ (naming them), an axis is out of range, or
    ``in_axes``/``out_axes`` do not match the structure of the arguments/outputs.

    >>> import corvid as cv
    >>> x, w = cv.ones((5, 3)), cv.ones((3, 2))
    >>> cv.vmap(lambda row, w: row @ w, in_axes=(0, None))(x, w).shape
    (5, 2)
    """
    if randomness not in _RANDOMNESS:
        raise ValueError(f"vmap: randomness must be one of {_RANDOMNESS}, got {randomness!r}")
    if axis_size is not None and (not isinstance(axis_size, int) or isinstance(axis_size, bool) or axis_size < 0):
        raise ValueError(f"vmap: axis_size must be a non-negative int, got {axis_size!r}")
    _check_axes_spec(in_axes, "in_axes")
    _check_axes_spec(out_axes, "out_axes")

    @functools.wraps(f)
    def batched(*args: Any, **kwargs: Any) -> Any:
        return _vmap_call(f, args, kwargs, in_axes, out_axes, randomness, axis_size)

    return batched


def _check_axes_spec(spec: Any, what: str) -> None:
    for leaf in tree_flatten(spec, is_leaf=lambda x: x is None)[0]:
        if leaf is not None and (not isinstance(leaf, int) or isinstance(leaf, bool)):
            raise TypeError(f"vmap: {what} entries must be ints or None, got {leaf!r}")


def _is_axis(x: Any) -> bool:
    return x is None or isinstance(x, int)


def _prefix_leaves(prefix: Any, tree: Any, what: str, where: str) -> list[int | None]:
    """One axis per leaf of ``tree``, from ``prefix``: an int/None for a whole subtree, or a
    container of the same kind as the subtree with one entry per child. (The pairs still to match
    are a stack, not a recursion: a prefix as deep as the tree works at any depth.)"""
    out: list[int | None] = []
    todo = [(prefix, tree)]
    while todo:
        prefix, tree = todo.pop()
        if _is_axis(prefix):
            out += [prefix] * len(tree_flatten(tree)[0])
            continue
        ptd = tree_structure(prefix, is_leaf=lambda x: x is not prefix)
        children, td = tree_flatten(tree, is_leaf=lambda x: x is not tree)
        if td.kind is None or td.kind is not ptd.kind or td.aux != ptd.aux or len(td.children) != len(ptd.children):
            raise ValueError(f"vmap: {what} {prefix!r} does not match the structure of {where} ({_describe(tree)})")
        pchildren = tree_flatten(prefix, is_leaf=lambda x: x is not prefix)[0]
        todo.extend(reversed(list(zip(pchildren, children))))
    return out


def _describe(tree: Any) -> str:
    td: TreeDef = tree_structure(tree)
    return repr(td) if td.kind is not None else type(tree).__name__


class _Level:
    """One active vmap: its batch size, random mode and the placeholders it substitutes."""

    def __init__(self, size: int, randomness: str):
        self.size, self.randomness = size, randomness
        self.env: dict[int, Node] = {}  # placeholder id -> batched value (batch on axis 0)
        self.placeholders: list[Node] = []  # keeps the env's keys alive

    def placeholder(self, batched: Tensor) -> Tensor:
        """A per-example stand-in for ``batched`` (whose axis 0 is the batch)."""
        ph = node(Op.VAR, (), Mark("vmap"), batched.dtype, batched.shape[1:])
        self.env[id(ph)] = batched.node
        self.placeholders.append(ph)
        return batched._new(ph)

    def draw(self, shape: tuple[int, ...], device: str, outer: Callable) -> tuple[Tensor, Tensor]:
        """Intercepts a random draw made while this level's function is traced."""
        if self.randomness == "error":
            raise RuntimeError("vmap: random numbers were drawn inside a vmapped function; pass "
                               "randomness='different' (a new draw per example) or 'same' (one draw shared by "
                               "the batch) to vmap")
        if self.randomness == "same":
            return outer(shape, device)
        b0, b1 = outer((self.size,) + tuple(shape), device)
        return self.placeholder(b0), self.placeholder(b1)


def _vmap_call(f, args, kwargs, in_axes, out_axes, randomness, axis_size):
    if not _is_axis(in_axes) and not isinstance(in_axes, (tuple, list)):
        raise ValueError(f"vmap: in_axes must be an int, None or a tuple with one entry per argument, got {in_axes!r}")
    if not _is_axis(in_axes) and len(in_axes) != len(args):
        raise ValueError(f"vmap: in_axes has {len(in_axes)} entries but the function got {len(args)} positional "
                         "arguments")
    leaves, axes, names = [], [], []
    for i, a in enumerate(args):
        ax = in_axes if _is_axis(in_axes) else in_axes[i]
        ls = tree_flatten(a)[0]
        leaves += ls
        axes += _prefix_leaves(ax, a, "in_axes entry", f"argument {i}")
        names += [f"argument {i}" + (f" (leaf {j})" if len(ls) > 1 else "") for j in range(len(ls))]
    kw_leaves, kw_tree = tree_flatten(kwargs)
    leaves += kw_leaves
    axes += [0] * len(kw_leaves)
    names += ["a keyword argument"] * len(kw_leaves)

    mapped: list[tuple[int, Tensor, int, str]] = []
    for k, (x, ax, name) in enumerate(zip(leaves, axes, names)):
        if ax is None:
            continue
        if not isinstance(x, Tensor):
            if isinstance(x, (bool, int, float)):
                raise ValueError(f"vmap: {name} is a Python scalar and cannot be mapped over axis {ax}; "
                                 "use in_axes=None for it")
            x = Tensor(x)
        if not -x.ndim <= ax < x.ndim:
            raise ShapeError(f"vmap: in_axes {ax} is out of range for {name} of shape {x.shape}")
        mapped.append((k, x, ax % x.ndim, name))
    sizes = {x.shape[ax] for _, x, ax, _ in mapped}
    if axis_size is not None:
        sizes.add(axis_size)
    if len(sizes) > 1:
        detail = ", ".join(f"{name} has size {x.shape[ax]} along axis {ax}" for _, x, ax, name in mapped)
        given = f", axis_size={axis_size}" if axis_size is not None else ""
        raise ValueError(f"vmap got different sizes along the mapped axes: {detail}{given}")
    if not sizes:
        raise ValueError("vmap: no argument is mapped (every in_axes entry is None); pass axis_size to give the "
                         "batch size")

    level = _Level(sizes.pop(), randomness)
    traced = list(leaves)
    for k, x, ax, _ in mapped:
        front = x if ax == 0 else x.permute((ax,) + tuple(d for d in range(x.ndim) if d != ax))
        traced[k] = level.placeholder(front)
    n_pos = len(traced) - len(kw_leaves)
    pos_args = _rebuild_args(args, traced[:n_pos])
    kw = tree_unflatten(kw_tree, traced[n_pos:])

    _random._interceptors.append(level.draw)
    try:
        out = f(*pos_args, **kw)
    finally:
        _random._interceptors.pop()

    out_leaves, out_tree = tree_flatten(out)
    oaxes = _prefix_leaves(out_axes, out, "out_axes", "the function's output")
    batcher = _Batcher(level)
    results = []
    for i, (y, ax) in enumerate(zip(out_leaves, oaxes)):
        results.append(_finish(batcher, y, ax, level.size, i))
    return tree_unflatten(out_tree, results)


def _rebuild_args(args: tuple, leaves: list[Any]) -> list[Any]:
    out, pos = [], 0
    for a in args:
        td = tree_structure(a)
        out.append(tree_unflatten(td, leaves[pos:pos + td.num_leaves]))
        pos += td.num_leaves
    return out


def _finish(batcher: _Batcher, y: Any, ax: int | None, size: int, i: int) -> Any:
    if not isinstance(y, Tensor):
        if ax is None:
            return y
        y = Tensor(y)
    n, bdim = batcher.batch(y.node)
    if ax is None:
        if bdim is not None:
            raise ValueError(f"vmap: out_axes is None for output {i}, but that output depends on the mapped inputs")
        return y
    if not -(y.ndim + 1) <= ax <= y.ndim:
        raise ShapeError(f"vmap: out_axes {ax} is out of range for output {i} of per-example shape {y.shape}")
    ax %= y.ndim + 1
    out = y._new(n if bdim is not None else _broadcast(n, size))
    if ax == 0:
        return out
    order = list(range(1, y.ndim + 1))
    order.insert(ax, 0)
    return out.permute(order)


def _broadcast(n: Node, size: int) -> Node:
    """``n`` with a new leading axis of ``size`` (an EXPAND: nothing is copied)."""
    shape = (size,) + n.shape
    if n.op is Op.EXPAND and n.src[0].op is Op.RESHAPE and n.src[0].src[0].op is Op.CONST:
        n = n.src[0].src[0]  # a broadcast scalar: broadcast the scalar itself once
    ones = (1,) * (len(shape) - len(n.shape)) + n.shape
    return node(Op.EXPAND, (node(Op.RESHAPE, (n,), ones, n.dtype, ones),), shape, n.dtype, shape)


class _Batcher:
    """The batching rewrite of one vmap level: node -> (new node, batch axis 0 or None), memoized."""

    def __init__(self, level: _Level):
        self.level = level
        self.memo: dict[int, tuple[Node, int | None]] = {k: (v, 0) for k, v in level.env.items()}
        self.keep: list[Node] = list(level.placeholders)  # the memo is keyed by id: keep nodes alive
        self.marks: dict[int, Any] = {}  # free for MARK_RULES (one batched record per call, say)

    def batch(self, root: Node) -> tuple[Node, int | None]:
        for n in toposort([root], stop=lambda m: not m.marked or id(m) in self.memo):
            if id(n) not in self.memo:
                self.memo[id(n)] = self._rule(n)
                self.keep.append(n)
        return self.memo[id(root)]

    def _rule(self, n: Node) -> tuple[Node, int | None]:
        if not n.marked or not n.src:  # constants, buffers, placeholders of other transforms (a DETACH: its source may be batched)
            return n, None
        srcs = [self.memo[id(s)] for s in n.src]
        if all(b is None for _, b in srcs):
            return n, None
        size, op = self.level.size, n.op
        shape = (size,) + n.shape
        if op in ELEMENTWISE:
            new = tuple(s if b is not None else _broadcast(s, size) for s, b in srcs)
            return node(op, new, n.arg, n.dtype, shape), 0
        if op is Op.GATHER:
            (x, bx), (ix, bi) = srcs
            if bx is None:
                x = node(Op.RESHAPE, (x,), (1,) + x.shape, x.dtype, (1,) + x.shape)  # broadcast dimension
            if bi is None:
                ix = _broadcast(ix, size)
            return node(Op.GATHER, (x, ix), n.arg + 1, n.dtype, shape), 0
        if op is Op.SCATTER:  # the batch axis joins J
            parts = tuple(s if b is not None else _broadcast(s, size) for s, b in srcs)
            return node(Op.SCATTER, parts, (n.arg[0], n.arg[1] + 1), n.dtype, shape), 0
        if op is Op.CUSTOM:
            from ..engine.host import batch_host

            return batch_host(n, srcs, size), 0
        (src, _), arg = srcs[0], n.arg
        if op is Op.REDUCE:
            arg = (arg[0], tuple(a + 1 for a in arg[1]))
        elif op in (Op.RESHAPE, Op.EXPAND):
            arg = shape
        elif op is Op.PERMUTE:
            arg = (0,) + tuple(p + 1 for p in arg)
        elif op is Op.PAD:
            arg = (((0, 0),) + arg[0], arg[1])
        elif op is Op.SHRINK:
            arg = ((0, size),) + arg
        elif op is Op.FLIP:
            arg = tuple(a + 1 for a in arg)
        elif op is Op.VAR and arg.kind in MARK_RULES:
            arg = MARK_RULES[arg.kind](arg, self.batch, size, self.marks)
        elif op not in (Op.CONTIGUOUS, Op.DETACH, Op.VAR, Op.COPY):
            raise NotImplementedError(f"vmap has no batching rule for {op.name}")
        return node(op, (src,), arg, n.dtype, shape), 0


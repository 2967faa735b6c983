"""Reverse-mode differentiation: one vector-Jacobian rule per primitive, and the walk that applies
them from the outputs down to the marked variables.

Rules are written with Tensor ops, so the backward pass is a lazy graph like any other: it fuses
with the forward into the same kernels, and it can itself be differentiated (``grad`` of
``grad``). The walk follows traced nodes only, ignores buffers (gradients flow through realized
nodes), and gives a cotangent only to float nodes that lead to a wanted VAR.

Conventions:

* int and bool values carry no gradient: comparisons, bitwise ops, casts to or from them;
  rounding (floor, ceil, round, trunc), floor division and ``BITCAST`` have a zero derivative;
* at ties, ``maximum``/``minimum`` and the ``max``/``min`` reductions split the cotangent evenly
  among the tied inputs (as ``torch.amax`` and JAX do), so a sum of the shares is the cotangent;
* ``abs`` has derivative ``sign(x)`` (0 at 0); ``x ** y`` gives 0 instead of nan where the
  formula hits ``0 * inf`` (``y == 0`` for the base, ``x == 0, y >= 0`` for the exponent), as
  torch does; ``prod`` handles zeros exactly (no division by zero);
* complex values follow JAX's convention: a cotangent ``c`` of a complex value ``z`` stands for the
  linear map ``dz -> Re(c * dz)``. Holomorphic rules are the real formulas unchanged (no
  conjugation); ``conj`` sends ``conj(c)``, ``real`` sends ``c + 0j``, ``imag`` sends ``-1j * c``,
  ``complex(re, im)`` sends ``(Re c, -Im c)`` and ``|z|`` sends ``c * conj(z)/|z|``. So ``grad`` of a
  real loss through complex intermediates of real inputs is the ordinary real gradient, and for a
  complex input it is ``dL/dx - 1j * dL/dy`` (the conjugate of the steepest-ascent direction, as JAX);
* a VAR that is not wanted is the identity; ``DETACH`` stops the gradient. Two VAR kinds change
  the walk: a ``custom_vjp`` output sends its cotangent to the user's rule, which returns the
  cotangents of the call's arguments; a ``checkpoint`` output sends it into a fresh copy of its
  region (see :mod:`corvid.transforms.custom`).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from ..errors import ShapeError
from ..autograd import enable_grad
from ..graph.node import Mark, Node, Op, node
from ..ops.elementwise import make_complex, where
from ..ops.special import digamma as _digamma
from ..tensor import Tensor
from .rewrite import rewrite

# --- rules -------------------------------------------------------------------------------------------
# unary: (x, y, g) -> cotangent of x, where y is the op's output and g the cotangent of y
_LN2 = math.log(2.0)
UNARY_RULES: dict[Op, Callable[[Tensor, Tensor, Tensor], Tensor]] = {
    Op.NEG: lambda x, y, g: -g,
    Op.RECIP: lambda x, y, g: -(g * y * y),
    Op.SQRT: lambda x, y, g: g / (y * 2),
    Op.EXP: lambda x, y, g: g * y,
    Op.EXP2: lambda x, y, g: g * y * _LN2,
    Op.LOG: lambda x, y, g: g / x,
    Op.LOG2: lambda x, y, g: g / (x * _LN2),
    Op.LOG1P: lambda x, y, g: g / (x + 1),
    Op.EXPM1: lambda x, y, g: g * (y + 1),
    Op.SIN: lambda x, y, g: g * x.cos(),
    Op.COS: lambda x, y, g: -(g * x.sin()),
    Op.TAN: lambda x, y, g: g * (y * y + 1),
    Op.ASIN: lambda x, y, g: g * (1 - x * x).rsqrt(),
    Op.ACOS: lambda x, y, g: -(g * (1 - x * x).rsqrt()),
    Op.ATAN: lambda x, y, g: g / (x * x + 1),
    Op.SINH: lambda x, y, g: g * x.cosh(),
    Op.COSH: lambda x, y, g: g * x.sinh(),
    Op.TANH: lambda x, y, g: g * (1 - y * y),
    Op.ASINH: lambda x, y, g: g * (x * x + 1).rsqrt(),
    Op.ACOSH: lambda x, y, g: g * (x * x - 1).rsqrt(),
    Op.ATANH: lambda x, y, g: g / (1 - x * x),
    Op.ERF: lambda x, y, g: g * (2 / math.sqrt(math.pi)) * (-(x * x)).exp(),
    Op.ERFC: lambda x, y, g: -(g * (2 / math.sqrt(math.pi)) * (-(x * x)).exp()),
    Op.LGAMMA: lambda x, y, g: g * _digamma(x),
    Op.ABS: lambda x, y, g: g.astype(x.dtype) * x.sign().conj() if x.dtype.is_complex else g * x.sign(),
    Op.REAL: lambda x, y, g: g.astype(x.dtype),
    Op.IMAG: lambda x, y, g: make_complex(g._const(0), -g),
    Op.CONJ: lambda x, y, g: g.conj(),
    Op.CAST: lambda x, y, g: g.astype(x.dtype),
    Op.CONTIGUOUS: lambda x, y, g: g.contiguous(),  # a forward boundary is one in the backward too
}


def _max_share(a: Tensor, b: Tensor, g: Tensor) -> Tensor:
    """The part of g that max(a, b) sends to a: all of it where a wins, half at a tie."""
    return where(a > b, g, where(a.eq(b), g * 0.5, 0.0))


def _min_share(a: Tensor, b: Tensor, g: Tensor) -> Tensor:
    return where(a < b, g, where(a.eq(b), g * 0.5, 0.0))


# binary: one function per input, (a, b, y, g) -> cotangent of that input
BINARY_RULES: dict[Op, tuple[Callable[..., Tensor], Callable[..., Tensor]]] = {
    Op.ADD: (lambda a, b, y, g: g, lambda a, b, y, g: g),
    Op.SUB: (lambda a, b, y, g: g, lambda a, b, y, g: -g),
    Op.MUL: (lambda a, b, y, g: g * b, lambda a, b, y, g: g * a),
    Op.DIV: (lambda a, b, y, g: g / b, lambda a, b, y, g: -(g * y) / b),
    Op.POW: (lambda a, b, y, g: where(b.eq(0), 0.0, g * b * a ** (b - 1)),
             lambda a, b, y, g: where(a.eq(0) & (b.real >= 0), 0.0, g * y * a.log())),
    Op.COMPLEX: (lambda a, b, y, g: g.real, lambda a, b, y, g: -g.imag),
    Op.MAX: (lambda a, b, y, g: _max_share(a, b, g), lambda a, b, y, g: _max_share(b, a, g)),
    Op.MIN: (lambda a, b, y, g: _min_share(a, b, g), lambda a, b, y, g: _min_share(b, a, g)),
    Op.ATAN2: (lambda a, b, y, g: g * b / (a * a + b * b), lambda a, b, y, g: -(g * a) / (a * a + b * b)),
    Op.MOD: (lambda a, b, y, g: g, lambda a, b, y, g: -(g * (a / b).floor())),
}

# ops with a zero derivative, or whose values are never floats (so never carry a cotangent)
ZERO_RULES = frozenset({Op.FLOOR, Op.CEIL, Op.ROUND, Op.TRUNC, Op.BITCAST, Op.IDIV, Op.CMPLT, Op.CMPEQ,
                        Op.CMPNE, Op.AND, Op.OR, Op.XOR, Op.SHL, Op.SHR, Op.DETACH, Op.BUFFER, Op.CONST,
                        Op.IOTA})


def _reduce_rule(x: Tensor, y: Tensor, g: Tensor, op: str, axes: tuple[int, ...]) -> Tensor:
    if op == "sum":
        return g.expand(x.shape)
    if op in ("max", "min"):
        hit = x.eq(y)
        count = hit.astype(x.dtype)._reduce("sum", axes, True)
        return where(hit, g / count, 0.0)
    # prod: the product of the other elements, computed without dividing by zero
    zero = x.eq(0)
    safe = where(zero, 1.0, x)
    zeros = zero.astype(x.dtype)._reduce("sum", axes, True)
    rest = safe._reduce("prod", axes, True)
    others = where(zeros.eq(0), rest / safe, where(zeros.eq(1) & zero, rest, 0.0))
    return g * others


def _movement_rule(n: Node, g: Tensor) -> Tensor:
    x_shape = n.src[0].shape
    if n.op is Op.RESHAPE:
        return g.reshape(x_shape)
    if n.op is Op.PERMUTE:
        return g.permute(tuple(sorted(range(len(n.arg)), key=n.arg.__getitem__)))
    if n.op is Op.EXPAND:
        axes = tuple(i for i, (s, o) in enumerate(zip(x_shape, n.shape)) if s != o)
        return g._reduce("sum", axes, True)
    if n.op is Op.PAD:
        return g.shrink([(b, b + s) for (b, _), s in zip(n.arg[0], x_shape)])
    if n.op is Op.SHRINK:
        return g.pad([(lo, s - hi) for (lo, hi), s in zip(n.arg, x_shape)])
    assert n.op is Op.FLIP
    return g.flip(n.arg)


MOVEMENT_OPS = frozenset({Op.RESHAPE, Op.PERMUTE, Op.EXPAND, Op.PAD, Op.SHRINK, Op.FLIP})


def _gather_rule(x: Tensor, idx: Tensor, g: Tensor, axis: int) -> Tensor:
    """Scatter-add of ``g`` into ``x``'s shape at ``idx`` along ``axis`` (the SCATTER primitive,
    O(len(idx))); summed over the dimensions ``x`` broadcast."""
    from ..ops.indexing import scatter_prim

    n = x.shape[axis]
    # leading dimensions that x broadcasts (an embedding lookup: the table against every token)
    # join the scattered axis: one scatter into the table's shape, not a table per token summed
    # afterwards (GPT-2's embedding gradient for 128 tokens would take 128 x 50257 x 768 floats)
    spread = [d for d in range(axis) if x.shape[d] == 1 and idx.shape[d] != 1]
    if spread and math.prod(g.shape):
        keep = [d for d in range(axis) if d not in spread]
        rest = list(range(axis + 1, idx.ndim))
        order = keep + spread + [axis] + rest
        lead = tuple(idx.shape[d] for d in keep)
        m = math.prod(idx.shape[d] for d in spread) * idx.shape[axis]
        idx = idx.permute(order).reshape(lead + (m,) + idx.shape[axis + 1:])
        g = g.permute(order).reshape(lead + (m,) + g.shape[axis + 1:])
        gx = scatter_prim(g._const(0, g.dtype, lead + (n,) + g.shape[len(lead) + 1:]), len(lead), idx, g)
        gx = gx.reshape(tuple(x.shape[d] if d < axis else gx.shape[d - axis + len(lead)] for d in range(x.ndim)))
    else:
        full = idx.shape[:axis] + (n,) + idx.shape[axis + 1:]
        gx = g._const(0, g.dtype, full)
        if math.prod(g.shape):
            gx = scatter_prim(gx, axis, idx, g)
    wide = tuple(d for d in range(x.ndim) if x.shape[d] == 1 and gx.shape[d] != 1)
    return (gx.sum(wide, keepdims=True) if wide else gx).astype(x.dtype)


def vjp_rule(n: Node, g: Tensor, need: list[bool]) -> list[Tensor | None]:
    """Cotangents of ``n``'s sources given the cotangent ``g`` of ``n`` (None: no contribution).

    Only sources with ``need[i]`` get one. VAR, DETACH and custom kinds are handled by the walk."""
    out: list[Tensor | None] = [None] * len(n.src)
    if not any(need) or n.op in ZERO_RULES:
        return out
    t = lambda m: Tensor._from_node(m, g.device)  # noqa: E731
    if n.op in UNARY_RULES:
        out[0] = UNARY_RULES[n.op](t(n.src[0]), t(n), g)
    elif n.op in BINARY_RULES:
        a, b = t(n.src[0]), t(n.src[1])
        for i, rule in enumerate(BINARY_RULES[n.op]):
            if need[i]:
                out[i] = rule(a, b, t(n), g)
    elif n.op is Op.WHERE:
        c = t(n.src[0])
        out[1] = where(c, g, 0.0) if need[1] else None
        out[2] = where(c, 0.0, g) if need[2] else None
    elif n.op is Op.REDUCE:
        out[0] = _reduce_rule(t(n.src[0]), t(n), g, *n.arg)
    elif n.op in MOVEMENT_OPS:
        out[0] = _movement_rule(n, g)
    elif n.op is Op.COPY:  # the cotangent goes back to the source's device
        out[0] = g.to(n.arg[0])
    elif n.op is Op.GATHER:
        if need[0]:
            out[0] = _gather_rule(t(n.src[0]), t(n.src[1]), g, n.arg)
    elif n.op is Op.SCATTER:
        from ..ops.indexing import scatter_vjp

        out[0], out[2] = scatter_vjp(t(n.src[0]), t(n.src[1]), t(n.src[2]), t(n), g, *n.arg, need)
    elif n.op is Op.CUSTOM:
        raise NotImplementedError(f"the host op {n.arg.op.name} has no derivative rule: its module must wrap it "
                                  "in custom_vjp (see corvid/engine/host.py)")
    else:
        raise NotImplementedError(f"no vector-Jacobian rule for {n.op.name}")
    return out


# --- the walk ----------------------------------------------------------------------------------------
class _Walk:
    """One backward sweep. Items are graph nodes plus the custom_vjp calls (which stand between a
    custom output and the call's arguments)."""

    def __init__(self, wanted: Callable[[Mark], bool]):
        self.wanted = wanted
        self.kids: dict[int, tuple[Any, ...]] = {}
        self.regions: dict[int, tuple[dict, dict]] = {}  # checkpoint region -> (rewrite memo, fresh marks)

    def children(self, n: Any) -> tuple[Any, ...]:
        if not isinstance(n, Node):  # a custom_vjp call: its gradient goes to its arguments
            return tuple(x for x in n.inputs if x.traced)
        if n.op is Op.DETACH:
            return ()
        if n.op is Op.VAR and n.src:
            if n.arg.kind == "custom_vjp":
                return (n.arg.data[0],)
            if n.arg.kind == "checkpoint":
                return (self._recompute(n),)
        return tuple(s for s in n.src if s.traced)

    def _recompute(self, n: Node) -> Node:
        """A copy of the checkpoint output's graph over fresh VARs at the region's inputs, so the
        backward recomputes the region instead of reading its forward nodes."""
        region = n.arg.data
        memo, fresh = self.regions.setdefault(id(region), ({}, {}))
        is_input = lambda v: v.op is Op.VAR and v.arg.kind == "checkpoint_in" and v.arg.data is region  # noqa: E731

        def replace(v: Node, srcs: tuple[Node, ...]) -> Node | None:
            if not is_input(v):
                return None
            mark = fresh.setdefault(id(v.arg), Mark("recompute"))
            return node(Op.VAR, srcs, mark, v.dtype, v.shape)

        return rewrite([n.src[0]], replace, is_input, memo)[0]

    def order(self, roots: list[Node]) -> tuple[list[Any], dict[int, bool]]:
        """Items below ``roots`` in dependency order, and whether each leads to a wanted VAR."""
        post: list[Any] = []
        reach: dict[int, bool] = {}
        stack: list[tuple[Any, bool]] = [(r, False) for r in reversed(roots)]
        while stack:
            n, expanded = stack.pop()
            if expanded:
                hit = isinstance(n, Node) and n.op is Op.VAR and self.wanted(n.arg)
                reach[id(n)] = hit or any(reach[id(k)] for k in self.kids[id(n)])
                post.append(n)
            elif id(n) not in self.kids:
                self.kids[id(n)] = kids = self.children(n)
                stack.append((n, True))
                stack.extend((k, False) for k in reversed(kids) if id(k) not in self.kids)
        return post, reach


def backprop(roots: list[Tensor], seeds: list[Tensor], wanted: Callable[[Mark], bool]
             ) -> tuple[dict[int, Tensor], dict[int, Mark]]:
    """Walk from ``roots`` (with cotangents ``seeds``) down to the VARs whose mark is ``wanted``.

    Returns ``(cotangents, reached)``: the summed cotangent of each wanted mark (by id) that
    received one, and every wanted mark the walk found (a mark reached only through zero-derivative
    ops has no cotangent)."""
    walk = _Walk(wanted)
    post, reach = walk.order([r.node for r in roots])
    ct: dict[int, Any] = {}

    def add(key: int, g: Tensor) -> None:
        ct[key] = g if key not in ct else ct[key] + g

    for r, s in zip(roots, seeds):
        if reach[id(r.node)] and (r.dtype.is_float or r.dtype.is_complex):
            add(id(r.node), s)
    grads: dict[int, Tensor] = {}
    reached: dict[int, Mark] = {}
    for n in reversed(post):
        key = id(n)
        if not reach[key]:
            continue
        if isinstance(n, Node) and n.op is Op.VAR and wanted(n.arg):
            reached[id(n.arg)] = n.arg
        if key not in ct:
            continue
        g = ct.pop(key)
        if not isinstance(n, Node):
            for x, c in zip(n.inputs, n.pullback(g)):
                if c is not None and reach.get(id(x), False):
                    add(id(x), c)
        elif n.op is Op.VAR:
            if wanted(n.arg):
                grads[id(n.arg)] = g if id(n.arg) not in grads else grads[id(n.arg)] + g
            if n.arg.kind == "custom_vjp":
                call, index = n.arg.data
                shares = ct.setdefault(id(call), {})
                shares[index] = g if index not in shares else shares[index] + g
            else:
                for k in walk.kids[key]:
                    if reach[id(k)]:
                        add(id(k), g)
        else:
            need = [reach.get(id(s), False) and (s.dtype.is_float or s.dtype.is_complex) for s in n.src]
            for s, c in zip(n.src, vjp_rule(n, g, need)):
                if c is not None:
                    if c.shape != s.shape or c.dtype is not s.dtype:
                        raise RuntimeError(f"internal error: the {n.op.name} rule gave a {c.dtype.name}{list(c.shape)} "
                                           f"cotangent for a {s.dtype.name}{list(s.shape)} input")
                    add(id(s), c)
    return grads, reached


# --- JAX style: vjp, grad, value_and_grad, jacrev ----------------------------------------------------
def _argnums(argnums: int | tuple[int, ...], nargs: int, name: str) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for i in nums:
        if not isinstance(i, int) or not -nargs <= i < nargs:
            raise ValueError(f"{name}: argnums {argnums} does not fit a call with {nargs} positional argument(s)")
    return tuple(i % nargs for i in nums)


def _float_input(x: Any, name: str, argnum: int) -> Tensor:
    if isinstance(x, Tensor):
        t = x
    elif isinstance(x, (float, complex)) or (hasattr(x, "dtype") and getattr(x.dtype, "kind", "") in ("f", "c")):
        t = Tensor(x)
    else:
        raise TypeError(f"{name}: argument {argnum} contains a {type(x).__name__}; only float tensors can be "
                        "differentiated (pass other values as arguments not in argnums)")
    if not (t.dtype.is_float or t.dtype.is_complex):
        raise TypeError(f"{name}: argument {argnum} has dtype {t.dtype.name}; only float (or complex) tensors can "
                        "be differentiated")
    return t


_RULE_KINDS = frozenset({"custom_vjp", "checkpoint", "checkpoint_in"})


def _unmark(tensors: list[Tensor], marks: set[int]) -> list[Tensor]:
    """The same values with this transform's VARs taken out (they are identities on the inputs),
    and the ``custom_vjp``/``checkpoint`` marks left over nothing traced (a matmul's rule marks its
    product: once the inputs' marks are gone, nothing can differentiate through it)."""
    is_ours = lambda n: n.op is Op.VAR and id(n.arg) in marks  # noqa: E731

    def replace(n: Node, srcs: tuple[Node, ...]) -> Node | None:
        if is_ours(n):
            return srcs[0]
        if n.op is Op.VAR and n.src and n.arg.kind in _RULE_KINDS and not srcs[0].traced:
            return srcs[0]
        return None

    nodes = rewrite([t.node for t in tensors], replace, is_ours)
    return [Tensor._from_node(n, t.device) for n, t in zip(nodes, tensors)]


def _unmark_tree(tree: Any, marks: set[int]) -> Any:
    from ..tree import tree_flatten, tree_unflatten

    leaves, td = tree_flatten(tree)
    pos = [i for i, v in enumerate(leaves) if isinstance(v, Tensor)]
    for i, t in zip(pos, _unmark([leaves[i] for i in pos], marks)):
        leaves[i] = t
    return tree_unflatten(td, leaves)


class _Pullback:
    """``f`` called once on marked arguments; ``flat(cotangents)`` walks back to them."""

    def __init__(self, f: Callable[..., Any], args: tuple[Any, ...], argnums: int | tuple[int, ...],
                 has_aux: bool, name: str):
        from ..tree import tree_flatten, tree_unflatten

        self.name, self.nums = name, _argnums(argnums, len(args), name)
        call = list(args)
        self.inputs: list[Tensor] = []
        self.marks: list[Mark] = []
        self.arg_trees = []
        for i in self.nums:
            leaves, td = tree_flatten(args[i])
            marked = []
            for leaf in leaves:
                x = _float_input(leaf, name, i)
                mark = Mark("grad")
                self.inputs.append(x)
                self.marks.append(mark)
                marked.append(Tensor._from_node(node(Op.VAR, (x.node,), mark, x.dtype, x.shape), x.device))
            self.arg_trees.append((td, len(leaves)))
            call[i] = tree_unflatten(td, marked)
        self.mark_ids = {id(m) for m in self.marks}
        with enable_grad():
            result = f(*call)
        self.aux = None
        if has_aux:
            if not isinstance(result, (tuple, list)) or len(result) != 2:
                raise ValueError(f"{name}: with has_aux=True the function must return a pair (output, aux)")
            result, self.aux = result
            self.aux = _unmark_tree(self.aux, self.mark_ids)
        self.outs, self.out_tree = tree_flatten(result)
        for v in self.outs:
            if not isinstance(v, Tensor):
                raise TypeError(f"{name}: the function must return tensors (or a pytree of them), got a "
                                f"{type(v).__name__}")
        self.out = tree_unflatten(self.out_tree, _unmark(self.outs, self.mark_ids))

    def flat(self, seeds: list[Tensor]) -> list[Tensor]:
        """Cotangents of every marked input leaf (zeros where no gradient reaches it)."""
        with enable_grad():
            grads, _ = backprop(self.outs, seeds, lambda m: id(m) in self.mark_ids)
            res = [grads[id(m)] if id(m) in grads else x._const(0.0) for m, x in zip(self.marks, self.inputs)]
            return _unmark(res, self.mark_ids)

    def per_arg(self, flat: list[Any]) -> list[Any]:
        """Split a list aligned with the marked leaves back into one pytree per differentiated argument."""
        from ..tree import tree_unflatten

        out, start = [], 0
        for td, count in self.arg_trees:
            out.append(tree_unflatten(td, flat[start:start + count]))
            start += count
        return out

    def seeds_from(self, ct: Any) -> list[Tensor]:
        from ..tree import tree_flatten

        leaves, td = tree_flatten(ct)
        if td != self.out_tree:
            raise ValueError(f"{self.name}: the cotangent has structure {td}, the output has {self.out_tree}")
        seeds = []
        for o, c in zip(self.outs, leaves):
            c = c if isinstance(c, Tensor) else Tensor(c, dtype=o.dtype, device=o.device)
            if c.shape != o.shape:
                raise ShapeError(f"{self.name}: a cotangent of shape {c.shape} was given for an output of "
                                 f"shape {o.shape}")
            seeds.append(c.astype(o.dtype))
        return seeds


def vjp(f: Callable[..., Any], *primals: Any, has_aux: bool = False) -> tuple[Any, ...]:
    """Evaluate ``f(*primals)`` and return ``(out, vjp_fn)`` (``(out, vjp_fn, aux)`` with ``has_aux``).

    ``vjp_fn(ct)`` takes a cotangent shaped like ``out`` (same pytree structure and shapes) and
    returns a tuple with one cotangent per primal, each shaped like that primal: ``ct`` times the
    Jacobian. Primals are pytrees of float tensors (TypeError otherwise); ``vjp_fn`` can be called
    any number of times.

    >>> import corvid as cv
    >>> y, pull = cv.vjp(lambda x: x * x, cv.Tensor([1.0, 2.0]))
    >>> pull(cv.Tensor([1.0, 1.0]))[0].tolist()
    [2.0, 4.0]
    """
    pb = _Pullback(f, primals, tuple(range(len(primals))), has_aux, "vjp")

    def vjp_fn(ct: Any) -> tuple[Any, ...]:
        return tuple(pb.per_arg(pb.flat(pb.seeds_from(ct))))

    return (pb.out, vjp_fn, pb.aux) if has_aux else (pb.out, vjp_fn)


def value_and_grad(f: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False
                   ) -> Callable[..., tuple[Any, Any]]:
    """A function returning ``(f(*args), gradient)``; with ``has_aux``, ``((value, aux), gradient)``.

    See :func:`grad` for the contract. One backward pass gives both (JAX's ``value_and_grad``).

    >>> loss = lambda x: (x ** 2).sum()
    >>> value, g = cv.value_and_grad(loss)(cv.Tensor([1.0, 2.0]))
    >>> value.item(), g.tolist()
    (5.0, [2.0, 4.0])
    >>> f = lambda x, y: (x * y).sum()
    >>> value, (gx, gy) = cv.value_and_grad(f, argnums=(0, 1))(cv.Tensor([1.0, 2.0]), cv.Tensor([3.0, 4.0]))
    >>> gx.tolist(), gy.tolist()
    ([3.0, 4.0], [1.0, 2.0])
    """

    def value_and_grad_f(*args: Any) -> tuple[Any, Any]:
        pb = _Pullback(f, args, argnums, has_aux, "grad")
        out = pb.outs[0] if len(pb.outs) == 1 and pb.out_tree.kind is None else None
        if out is None:
            raise TypeError(f"grad: the function must return one scalar tensor, got a pytree {pb.out_tree}")
        if not out.dtype.is_float:
            raise TypeError(f"grad: the function's output must be a float tensor, got {out.dtype.name}")
        if out.shape != ():
            raise ShapeError(f"grad: the function must return a scalar (shape ()), got shape {out.shape}; "
                             "use vjp or jacrev for other outputs, or reduce it (e.g. .sum())")
        grads = pb.per_arg(pb.flat([out._const(1.0)]))
        g = grads[0] if isinstance(argnums, int) else tuple(grads)
        return ((pb.out, pb.aux) if has_aux else pb.out), g

    return value_and_grad_f


def grad(f: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable[..., Any]:
    """The gradient of scalar ``f`` with respect to argument ``argnums`` (an int, or a tuple of them).

    The result has the pytree structure of that argument (a tuple of them for tuple ``argnums``);
    with ``has_aux`` ``f`` returns ``(value, aux)`` and the result is ``(gradient, aux)``.
    Differentiated arguments must be float tensors or pytrees of them (TypeError otherwise);
    ``f`` must return a float scalar of shape () (ValueError naming the shape otherwise). ``f``
    runs with grad mode enabled, even under an outer ``no_grad``. Gradients are lazy tensors and
    differentiable again: ``grad(grad(f))`` is the second derivative.

    >>> import corvid as cv
    >>> cv.grad(lambda x: (x ** 3).sum())(cv.Tensor([1.0, 2.0])).tolist()
    [3.0, 12.0]
    """
    vg = value_and_grad(f, argnums, has_aux)

    def grad_f(*args: Any) -> Any:
        value, g = vg(*args)
        return (g, value[1]) if has_aux else g

    return grad_f


def jacrev(f: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable[..., Any]:
    """The Jacobian of ``f`` by reverse mode: for an output leaf of shape ``O`` and an input leaf of
    shape ``I`` the block has shape ``O + I``.

    The result has the output's pytree structure, each leaf holding the input argument's structure
    (a tuple of them for tuple ``argnums``); with ``has_aux`` it is ``(jacobian, aux)``. The
    backward pass is vmapped over the one-hot cotangents: one graph for all output elements.

    >>> import corvid as cv
    >>> cv.jacrev(lambda x: x * x)(cv.Tensor([1.0, 2.0])).tolist()
    [[2.0, 0.0], [0.0, 4.0]]
    """
    from ..creation import arange
    from ..tree import tree_unflatten
    from .batching import vmap

    def jac_f(*args: Any) -> Any:
        pb = _Pullback(f, args, argnums, has_aux, "jacrev")
        blocks = []
        for k, o in enumerate(pb.outs):
            if not o.dtype.is_float:
                raise TypeError(f"jacrev: output {k} has dtype {o.dtype.name}; only float outputs can be "
                                "differentiated")
            if o.size == 0:
                per_leaf = [x._const(0.0, shape=o.shape + x.shape) for x in pb.inputs]
            else:  # all rows at once: the pullback vmapped over the one-hot cotangents
                idx = arange(o.size, device=o.device)
                basis = idx.reshape(-1, 1).eq(idx.reshape(1, -1)).astype(o.dtype).reshape((o.size,) + o.shape)
                rows = vmap(lambda ct, k=k: pb.flat([ct if i == k else p._const(0.0) for i, p in enumerate(pb.outs)]),
                            randomness="same")(basis)
                per_leaf = [r.reshape(o.shape + x.shape) for r, x in zip(rows, pb.inputs)]
            grads = pb.per_arg(per_leaf)
            blocks.append(grads[0] if isinstance(argnums, int) else tuple(grads))
        jac = tree_unflatten(pb.out_tree, blocks)
        return (jac, pb.aux) if has_aux else jac

    return jac_f

"""Forward-mode differentiation: ``jvp``, ``jacfwd``, ``hessian`` and ``custom_jvp``.

``jvp(f, primals, tangents)`` wraps each primal in a ``VAR`` node with a fresh ``Mark("jvp")``,
calls ``f`` once, then walks the graph ``f`` returned from the sources up and gives every node
that depends on a marked input a tangent, by one rule per primitive (``_RULES``). Rules are
written with Tensor ops, so the tangent graph is lazy like any other: it fuses with the primal
into the same kernels, and it can be differentiated or batched again (``jvp`` of ``jvp``,
``jvp`` of ``grad`` for Hessian-vector products, ``vmap`` of ``jvp``). Nodes that do not depend
on a marked input have no tangent (``None`` here), so untouched parts of the graph cost nothing.

Conventions:

* outputs that are not floats (ints, bools: comparisons, ``argmax``, casts to int) have a zero
  tangent of the output's own dtype and shape (JAX would use its ``float0`` dtype; corvid has no
  such dtype, and zeros of the same dtype stack and compare like any tensor);
* tangents given for int or bool primals are ignored (their shape must still match);
* rounding (floor, ceil, round, trunc), floor division, comparisons and ``BITCAST`` have a zero
  tangent; ``x % y`` for floats is ``x - floor(x/y)*y`` and differentiates as such;
* at ties, ``maximum``/``minimum`` and ``max``/``min`` reductions split the tangent evenly
  among the tied inputs; ``abs`` has derivative ``sign(x)`` (0 at 0).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

from ..errors import ShapeError
from ..graph.node import MOVEMENT, Mark, Node, Op, node, toposort
from ..ops.elementwise import make_complex, where
from ..ops.special import digamma as _digamma
from ..tensor import Tensor, copy_to
from ..tree import tree_flatten, tree_unflatten
from .batching import MARK_RULES, vmap
from .custom import untraced
from .rewrite import rewrite


def jvp(f: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any],
        has_aux: bool = False) -> tuple[Any, ...]:
    """Evaluate ``f(*primals)`` and its directional derivative along ``tangents``.

    ``primals`` is a tuple (or list) of arguments, each a pytree of tensors; ``tangents`` has the
    same structure and shapes (float tangents are cast to their primal's dtype). Returns
    ``(out, tangent_out)`` with ``tangent_out`` shaped like ``out``, or ``(out, tangent_out, aux)``
    when ``has_aux`` (``f`` then returns ``(out, aux)`` and ``aux`` is not differentiated).
    ValueError if the structures or shapes differ.

    >>> import corvid as cv
    >>> y, t = cv.jvp(lambda x: (x * x).sum(), (cv.Tensor([1.0, 2.0]),), (cv.Tensor([1.0, 0.0]),))
    >>> y.item(), t.item()
    (5.0, 2.0)
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp: primals and tangents must be tuples (or lists) of arguments, got "
                        f"{type(primals).__name__} and {type(tangents).__name__}")
    p_leaves, p_tree = tree_flatten(tuple(primals))
    t_leaves, t_tree = tree_flatten(tuple(tangents))
    if p_tree != t_tree:
        raise ValueError(f"jvp: primals and tangents have different structures: {p_tree} and {t_tree}")
    seeds: dict[int, Tensor] = {}
    marked = []
    for x, t in zip(p_leaves, t_leaves):
        x = x if isinstance(x, Tensor) else Tensor(x)
        t = t if isinstance(t, Tensor) else Tensor(t, device=x.device)
        if t.shape != x.shape:
            raise ShapeError(f"jvp: a tangent of shape {t.shape} was given for a primal of shape {x.shape}")
        v = x._new(node(Op.VAR, (x.node,), Mark("jvp"), x.dtype, x.shape))
        if x.dtype.is_float or x.dtype.is_complex:
            seeds[id(v.node)] = t.astype(x.dtype)
        marked.append(v)
    res = f(*tree_unflatten(p_tree, marked))
    if has_aux:
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise ValueError("jvp: with has_aux=True, f must return a pair (output, aux)")
        res, aux = res
    outs, out_tree = tree_flatten(res)
    outs = [y if isinstance(y, Tensor) else Tensor(y) for y in outs]
    tangent_of = _Forward(seeds).tangents([y.node for y in outs])
    tans = [tangent_of(y) for y in outs]
    # this transform's VARs are done with: without them the results are the very nodes f(x)
    # builds on the plain inputs (so they share buffers already computed, by hash-consing)
    mine = {id(v.node.arg) for v in marked}
    strip = lambda n, srcs: srcs[0] if n.op is Op.VAR and id(n.arg) in mine else None  # noqa: E731
    nodes = rewrite([y.node for y in outs + tans], strip)
    out = tree_unflatten(out_tree, [y._new(n) for y, n in zip(outs, nodes)])
    tan = tree_unflatten(out_tree, [t._new(n) for t, n in zip(tans, nodes[len(outs):])])
    return (out, tan, aux) if has_aux else (out, tan)


class _Forward:
    """One forward sweep: tangents for every node between the seeds and the outputs."""

    def __init__(self, seeds: dict[int, Tensor]):
        self.tan: dict[int, Tensor | None] = dict(seeds)
        self.custom: dict[int, list[Tensor]] = {}  # custom_jvp call id -> its output tangents
        self.keep: list[Node] = []  # tan is keyed by id: keep the nodes alive

    def tangents(self, roots: list[Node]) -> Callable[[Tensor], Tensor]:
        for n in _order(roots, self.tan):
            if id(n) not in self.tan:
                self.tan[id(n)] = self._tangent(n)
                self.keep.append(n)

        def tangent_of(y: Tensor) -> Tensor:
            t = self.tan.get(id(y.node))
            return y._const(0) if t is None else t
        return tangent_of

    def _tangent(self, n: Node) -> Tensor | None:
        if n.op is Op.VAR and n.src and n.arg.kind == "custom_jvp":
            return self._custom(n)
        if not n.src or not (n.dtype.is_float or n.dtype.is_complex) or n.op is Op.DETACH:
            return None
        ts = [self.tan.get(id(s)) for s in n.src]
        if all(t is None for t in ts):
            return None
        dev = _device(ts)
        xs = [Tensor._from_node(s, dev) for s in n.src]
        out = _RULES[n.op](Tensor._from_node(n, dev), xs, ts)
        if out is not None and out.dtype is not n.dtype:
            out = out.astype(n.dtype)
        return out

    def _custom(self, n: Node) -> Tensor | None:
        call, index = n.arg.data
        if id(call) not in self.custom:
            ts = [self.tan.get(id(x.node)) if isinstance(x, Tensor) else None for x in call.args]
            if all(t is None for t in ts):
                return None
            full = [None if not isinstance(x, Tensor) else x._const(0) if t is None else t
                    for x, t in zip(call.args, ts)]
            self.custom[id(call)] = call.tangents(full)
        return self.custom[id(call)][index]


def _device(ts: list[Tensor | None]) -> str:
    return next(t.device for t in ts if t is not None)


def _order(roots: list[Node], done: dict[int, Any]) -> list[Node]:
    """Traced nodes below ``roots`` in dependency order; a custom_jvp output depends on the
    arguments of its call (its rule replaces the function's own graph)."""
    def deps(n: Node) -> Sequence[Node]:
        if n.op is Op.VAR and n.src and n.arg.kind == "custom_jvp":
            return [x.node for x in n.arg.data[0].args if isinstance(x, Tensor)]
        return n.src

    return toposort(roots, stop=lambda n: not n.traced or id(n) in done, children=deps)


# --- rules: (output, inputs, input tangents or None) -> output tangent or None --------------------

def _z(t: Tensor | None, like: Tensor) -> Tensor:
    return like._const(0) if t is None else t


def _plus(a: Tensor | None, b: Tensor | None) -> Tensor | None:
    return b if a is None else a if b is None else a + b


def _unary(f: Callable[[Tensor, Tensor, Tensor], Tensor | None]):
    return lambda y, xs, ts: f(y, xs[0], ts[0])


def _zero(y: Tensor, xs: list[Tensor], ts: list[Tensor | None]) -> None:
    return None


_LN2 = math.log(2)

def _no_host_jvp(y: Tensor) -> Tensor:
    raise NotImplementedError(f"the host op {y.node.arg.op.name} has no tangent rule: its module must wrap it in "
                              "custom_jvp (see corvid/engine/host.py)")


_RULES: dict[Op, Callable[[Tensor, list[Tensor], list[Tensor | None]], Tensor | None]] = {
    Op.NEG: _unary(lambda y, x, t: -t),
    Op.RECIP: _unary(lambda y, x, t: -t * y * y),
    Op.SQRT: _unary(lambda y, x, t: t / (y * 2)),
    Op.EXP: _unary(lambda y, x, t: t * y),
    Op.EXP2: _unary(lambda y, x, t: t * y * _LN2),
    Op.LOG: _unary(lambda y, x, t: t / x),
    Op.LOG2: _unary(lambda y, x, t: t / (x * _LN2)),
    Op.LOG1P: _unary(lambda y, x, t: t / (x + 1)),
    Op.EXPM1: _unary(lambda y, x, t: t * (y + 1)),
    Op.SIN: _unary(lambda y, x, t: t * x.cos()),
    Op.COS: _unary(lambda y, x, t: -t * x.sin()),
    Op.TAN: _unary(lambda y, x, t: t * (y * y + 1)),
    Op.ASIN: _unary(lambda y, x, t: t * (1 - x * x).rsqrt()),
    Op.ACOS: _unary(lambda y, x, t: -t * (1 - x * x).rsqrt()),
    Op.ATAN: _unary(lambda y, x, t: t / (x * x + 1)),
    Op.SINH: _unary(lambda y, x, t: t * x.cosh()),
    Op.COSH: _unary(lambda y, x, t: t * x.sinh()),
    Op.TANH: _unary(lambda y, x, t: t * (1 - y * y)),
    Op.ASINH: _unary(lambda y, x, t: t * (x * x + 1).rsqrt()),
    Op.ACOSH: _unary(lambda y, x, t: t * (x * x - 1).rsqrt()),
    Op.ATANH: _unary(lambda y, x, t: t / (1 - x * x)),
    Op.ERF: _unary(lambda y, x, t: t * (-(x * x)).exp() * (2 / math.sqrt(math.pi))),
    Op.ERFC: _unary(lambda y, x, t: -t * (-(x * x)).exp() * (2 / math.sqrt(math.pi))),
    Op.LGAMMA: _unary(lambda y, x, t: t * _digamma(x)),
    Op.ABS: _unary(lambda y, x, t: (t * x.sign().conj()).real if x.dtype.is_complex else t * x.sign()),
    Op.REAL: _unary(lambda y, x, t: t.real),
    Op.IMAG: _unary(lambda y, x, t: t.imag),
    Op.CONJ: _unary(lambda y, x, t: t.conj()),
    Op.COMPLEX: lambda y, xs, ts: make_complex(_z(ts[0], xs[0]), _z(ts[1], xs[1])),
    Op.CAST: _unary(lambda y, x, t: t.astype(y.dtype)),  # float -> float (int outputs stop earlier)
    Op.ADD: lambda y, xs, ts: _plus(ts[0], ts[1]),
    Op.SUB: lambda y, xs, ts: _plus(ts[0], None if ts[1] is None else -ts[1]),
    Op.MUL: lambda y, xs, ts: _plus(None if ts[0] is None else ts[0] * xs[1],
                                    None if ts[1] is None else xs[0] * ts[1]),
    Op.DIV: lambda y, xs, ts: _plus(None if ts[0] is None else ts[0] / xs[1],
                                    None if ts[1] is None else -ts[1] * (y / xs[1])),
    Op.POW: lambda y, xs, ts: _plus(
        None if ts[0] is None else ts[0] * xs[1] * xs[0].pow(xs[1] - 1),
        # log(0) is -inf; 0**b with b > 0 is 0, so its term is 0 (as JAX does)
        None if ts[1] is None else ts[1] * y * where(xs[0].eq(0), 1, xs[0]).log()),
    Op.MAX: lambda y, xs, ts: _select_extreme(xs[0] > xs[1], xs[0] < xs[1], _z(ts[0], y), _z(ts[1], y)),
    Op.MIN: lambda y, xs, ts: _select_extreme(xs[0] < xs[1], xs[0] > xs[1], _z(ts[0], y), _z(ts[1], y)),
    Op.ATAN2: lambda y, xs, ts: (_z(ts[0], y) * xs[1] - xs[0] * _z(ts[1], y)) / (xs[0] * xs[0] + xs[1] * xs[1]),
    Op.MOD: lambda y, xs, ts: _plus(ts[0], None if ts[1] is None else -ts[1] * (xs[0] / xs[1]).floor()),
    Op.WHERE: lambda y, xs, ts: where(xs[0], _z(ts[1], y), _z(ts[2], y)),
    Op.REDUCE: lambda y, xs, ts: _reduce(y, xs[0], ts[0]),
    Op.CONTIGUOUS: lambda y, xs, ts: ts[0].contiguous(),
    Op.COPY: lambda y, xs, ts: copy_to(ts[0], y.node.arg[1]),  # the tangent moves with the value
    Op.VAR: lambda y, xs, ts: ts[0],
    Op.CUSTOM: lambda y, xs, ts: _no_host_jvp(y),
    Op.GATHER: lambda y, xs, ts: None if ts[0] is None else y._new(
        node(Op.GATHER, (ts[0].node, xs[1].node), y.node.arg, y.dtype, y.shape)),
    Op.SCATTER: lambda y, xs, ts: _scatter_jvp(xs[0], xs[1], xs[2], y, _z(ts[0], xs[0]), _z(ts[2], xs[2]),
                                               *y.node.arg),
}
for _op in (Op.FLOOR, Op.CEIL, Op.ROUND, Op.TRUNC, Op.BITCAST, Op.IDIV):
    _RULES[_op] = _zero
for _op in MOVEMENT:
    _RULES[_op] = lambda y, xs, ts: _move(y, ts[0])


def _scatter_jvp(*args: Any) -> Tensor:
    from ..ops.indexing import scatter_jvp

    return scatter_jvp(*args)


def _select_extreme(first: Tensor, second: Tensor, ta: Tensor, tb: Tensor) -> Tensor:
    return where(first, ta, where(second, tb, (ta + tb) * 0.5))


def _move(y: Tensor, t: Tensor) -> Tensor:
    n = y.node
    arg = (n.arg[0], 0.0) if n.op is Op.PAD else n.arg  # padding adds constants: their tangent is 0
    return t._new(node(n.op, (t.node,), arg, t.dtype, n.shape))


def _reduce(y: Tensor, x: Tensor, t: Tensor) -> Tensor:
    op, axes = y.node.arg
    if op == "sum":
        return t.sum(axes, keepdims=True, dtype=t.dtype)
    if op == "prod":
        # d prod = sum_i t_i * prod_{j != i} x_j, exact with zeros: with no zero it is
        # prod * sum(t/x); with one zero only that entry's term survives; with more it is 0.
        zero = x.eq(0)
        safe = where(zero, 1, x)
        rest = safe.prod(axes, keepdims=True, dtype=x.dtype)
        zeros = zero.sum(axes, keepdims=True)
        none_zero = rest * where(zero, 0, t / safe).sum(axes, keepdims=True, dtype=t.dtype)
        one_zero = rest * where(zero, t, 0).sum(axes, keepdims=True, dtype=t.dtype)
        return where(zeros.eq(0), none_zero, where(zeros.eq(1), one_zero, 0))
    hit = x.eq(y.broadcast_to(x.shape))  # max/min: the tangent of the winners, averaged over ties
    count = hit.sum(axes, keepdims=True, dtype=t.dtype)
    return where(hit, t, 0).sum(axes, keepdims=True, dtype=t.dtype) / count


# --- Jacobians ---------------------------------------------------------------------------------------

def jacfwd(f: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable[..., Any]:
    """The Jacobian of ``f`` with respect to the arguments ``argnums``, by forward mode.

    For an output leaf of shape ``O`` and an input leaf of shape ``I`` the Jacobian has shape
    ``O + I``. One ``jvp`` per input leaf is batched over the basis of that leaf with ``vmap``
    (not a Python loop over basis vectors). With a tuple ``argnums`` each output leaf maps to a
    tuple with one Jacobian per argument; pytree arguments give pytrees of Jacobians (outer
    structure: the output, inner: the input). Random draws in ``f`` are shared by every basis
    vector (``randomness="same"``): the Jacobian of one sample of ``f``. Differentiated
    arguments must be float tensors (TypeError otherwise).

    >>> import corvid as cv
    >>> cv.jacfwd(lambda x: x * x)(cv.Tensor([1.0, 2.0])).tolist()
    [[2.0, 0.0], [0.0, 4.0]]
    """
    multi = not isinstance(argnums, int)
    nums = tuple(argnums) if multi else (argnums,)

    @functools.wraps(f)
    def jacobian(*args: Any) -> Any:
        for a in nums:
            if not -len(args) <= a < len(args):
                raise ValueError(f"jacfwd: argnums {a} is out of range for {len(args)} arguments")
        leaves, tree = tree_flatten(tuple(args[a] for a in nums))
        leaves = [x if isinstance(x, Tensor) else Tensor(x) for x in leaves]
        if not leaves:
            raise ValueError("jacfwd: the differentiated arguments contain no tensors")
        for x in leaves:
            if not x.dtype.is_float:
                raise TypeError(f"jacfwd needs float inputs to differentiate, got {x.dtype.name}")

        def g(*diff: Any) -> Any:
            full = list(args)
            for a, v in zip(nums, diff):
                full[a] = v
            return f(*full)

        primals = tuple(tree_unflatten(tree, leaves))
        per_input = []  # for each input leaf: the Jacobians of the flat outputs
        for k, x in enumerate(leaves):
            def directional(v: Tensor, k: int = k) -> Any:
                ts = [v if j == k else y._const(0) for j, y in enumerate(leaves)]
                return jvp(g, primals, tuple(tree_unflatten(tree, ts)), has_aux=has_aux)[1]

            jac, out_tree = tree_flatten(vmap(directional, out_axes=-1, randomness="same")(_basis(x)))
            per_input.append([j.reshape(j.shape[:-1] + x.shape) for j in jac])
        combined = [tree_unflatten(tree, [jacs[i] for jacs in per_input]) for i in range(out_tree.num_leaves)]
        out = tree_unflatten(out_tree, [c if multi else c[0] for c in combined])
        return (out, g(*primals)[1]) if has_aux else out

    return jacobian


def _basis(x: Tensor) -> Tensor:
    """The ``x.size`` unit vectors of ``x``'s shape, stacked on a leading axis."""
    from ..creation import eye

    return eye(x.size, dtype=x.dtype, device=x.device).reshape((x.size,) + x.shape)


def hessian(f: Callable[..., Any], argnums: int | Sequence[int] = 0) -> Callable[..., Any]:
    """The Hessian of scalar ``f``: ``jacfwd(jacrev(f))`` (forward over reverse).

    For an input of shape ``I`` it has shape ``I + I``. ``argnums`` as in :func:`jacfwd` (a tuple
    gives nested tuples of blocks, one per pair of arguments).

    >>> f = lambda x: (x ** 3).sum()
    >>> cv.hessian(f)(cv.Tensor([1.0, 2.0])).tolist()  # diag(6 x)
    [[6.0, 0.0], [0.0, 12.0]]
    """
    from .reverse import jacrev

    return jacfwd(jacrev(f, argnums), argnums)


# --- custom rules ------------------------------------------------------------------------------------

class custom_jvp:
    """A function with a hand-written JVP rule, used by ``jvp``/``jacfwd`` instead of
    differentiating its implementation (for numerical stability or speed).

    Decorate the function, then register the rule with ``defjvp``. The rule is called as
    ``rule(primals, tangents)`` with the argument tuple and a tuple of the same structure
    holding each argument's tangent (zeros where it has none; ``None`` for leaves that are not
    tensors), and returns ``(primal_out, tangent_out)``; only ``tangent_out`` is used. Calling
    the function runs its implementation. The rule also applies under ``vmap`` (it is vmapped).

    >>> import corvid as cv
    >>> @cv.custom_jvp
    ... def log1pexp(x):
    ...     return (1 + x.exp()).log()
    >>> @log1pexp.defjvp
    ... def _(primals, tangents):
    ...     (x,), (t,) = primals, tangents
    ...     return log1pexp(x), t * x.sigmoid()
    >>> cv.jvp(log1pexp, (cv.Tensor(100.0),), (cv.Tensor(1.0),))[1].item()
    1.0
    """

    def __init__(self, fun: Callable[..., Any]):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.rule: Callable[[tuple, tuple], Any] | None = None

    def defjvp(self, rule: Callable[[tuple, tuple], Any]) -> Callable[[tuple, tuple], Any]:
        """Register ``rule(primals, tangents) -> (primal_out, tangent_out)``; returns it."""
        self.rule = rule
        return rule

    def __call__(self, *args: Any) -> Any:
        if self.rule is None:
            raise TypeError(f"custom_jvp function {getattr(self, '__name__', '?')} has no rule: register one "
                            "with @f.defjvp")
        out = self.fun(*args)
        if untraced(args):
            return out  # no transform is watching: nothing to mark
        arg_leaves, arg_tree = tree_flatten(args)
        if not any(isinstance(x, Tensor) and x.node.traced for x in arg_leaves):
            return out  # no transform is watching: nothing to mark
        leaves, tree = tree_flatten(out)
        call = _CustomCall(self.rule, arg_tree, arg_leaves, tree, [y.shape if isinstance(y, Tensor) else None
                                                                   for y in leaves])
        marked = [y._new(node(Op.VAR, (y.node,), Mark("custom_jvp", (call, i)), y.dtype, y.shape))
                  if isinstance(y, Tensor) else y for i, y in enumerate(leaves)]
        return tree_unflatten(tree, marked)


class _CustomCall:
    """One call of a custom_jvp function: its rule, arguments and outputs."""

    def __init__(self, rule: Callable, arg_tree: Any, args: list[Any], out_tree: Any,
                 out_shapes: list[tuple[int, ...] | None]):
        self.rule, self.arg_tree, self.args = rule, arg_tree, args
        self.out_tree, self.out_shapes = out_tree, out_shapes

    def tangents(self, arg_tangents: list[Tensor | None]) -> list[Tensor]:
        primals = tree_unflatten(self.arg_tree, self.args)
        tangents = tree_unflatten(self.arg_tree, arg_tangents)
        res = self.rule(primals, tangents)
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise ValueError("custom_jvp: the rule must return a pair (primal_out, tangent_out)")
        leaves, tree = tree_flatten(res[1])
        if tree != self.out_tree:
            raise ValueError(f"custom_jvp: the rule's tangent_out has structure {tree}, the function's output "
                             f"has {self.out_tree}")
        for t, s in zip(leaves, self.out_shapes):
            if s is not None and (not isinstance(t, Tensor) or t.shape != s):
                raise ShapeError(f"custom_jvp: the rule returned a tangent of shape {getattr(t, 'shape', None)} "
                                 f"for an output of shape {s}")
        return leaves


def _batch_custom_mark(mark: Mark, batch: Callable[[Node], tuple[Node, int | None]], size: int,
                      cache: dict[int, _CustomCall]) -> Mark:
    """The mark of a custom_jvp output under vmap: the same rule, vmapped over the batched
    arguments (``batch`` maps a node to its batched node and batch axis, 0 or None)."""
    call, index = mark.data
    new = cache.get(id(call))
    if new is None:
        args, axes = [], []
        for x in call.args:
            if isinstance(x, Tensor):
                n, b = batch(x.node)
                args.append(x._new(n))
                axes.append(b)
            else:
                args.append(x)
                axes.append(None)
        ax = tree_unflatten(call.arg_tree, axes)
        rule = vmap(call.rule, in_axes=(ax, ax), out_axes=0, axis_size=size)
        new = _CustomCall(rule, call.arg_tree, args, call.out_tree,
                          [None if s is None else (size,) + s for s in call.out_shapes])
        cache[id(call)] = new
    return Mark("custom_jvp", (new, index))


MARK_RULES["custom_jvp"] = _batch_custom_mark

__all__ = ["custom_jvp", "hessian", "jacfwd", "jvp"]

"""User control over the backward pass: ``custom_vjp`` (a hand-written rule) and ``checkpoint``
(recompute a region in the backward instead of reading its forward values).

Both mark the function's outputs with a VAR of their own kind; the reverse walk
(:mod:`corvid.transforms.reverse`) treats those VARs specially. Forward values are unchanged: the
VARs are identities, so the outputs fuse into kernels as usual.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from ..errors import ShapeError
from ..autograd import REVERSE_KINDS, is_grad_enabled
from ..graph.node import Mark, Node, Op, node
from ..tensor import Tensor
from ..tree import TreeDef, tree_flatten, tree_unflatten


def _none_is_leaf(v: Any) -> bool:
    return v is None


def _differentiable(x: Any) -> bool:
    return isinstance(x, Tensor) and x.dtype.is_float and x.node.traced


_PLAIN = frozenset({int, float, bool, str, complex, type(None)})


def _plain(x: Any, depth: int = 3) -> bool:
    """A plain Python scalar, or a tuple of plain values nested at most ``depth`` deep."""
    t = type(x)
    return t in _PLAIN or (t is tuple and depth > 0 and all(_plain(v, depth - 1) for v in x))


def untraced(args: tuple) -> bool:
    """True when no transform can be watching ``args``: each a tensor that depends on no traced
    variable, a plain Python scalar, or tuples of such scalars (a convolution's strides and
    paddings). (A quick test, made before flattening the arguments as pytrees, which costs
    microseconds per call of a library product; False for any other argument, which the caller
    then flattens.)"""
    for a in args:
        t = type(a)
        if t is Tensor:
            if a.node.traced:
                return False
        elif not _plain(a):
            return False
    return True


def _wrap(x: Tensor, mark: Mark) -> Tensor:
    return Tensor._from_node(node(Op.VAR, (x.node,), mark, x.dtype, x.shape), x.device)


class custom_vjp:
    """A function with a hand-written vector-Jacobian product, used by every reverse-mode walk
    (``grad``, ``vjp``, ``backward``) instead of differentiating its implementation.

    Decorate ``f``, then call ``f.defvjp(fwd, bwd)``. ``fwd(*args)`` returns ``(out, residuals)``
    (it may call ``f`` itself); ``bwd(residuals, ct)`` gets the cotangent of ``out`` (same
    structure; zeros for outputs that received none, None for non-float ones) and returns a tuple
    with one cotangent per argument, each shaped like that argument (None for a zero cotangent).
    Residuals may depend on the arguments, so ``bwd`` is itself differentiable (higher-order
    gradients work). When no argument is being differentiated, calling ``f`` just runs ``f``.

    As in JAX, ``f`` must not close over tensors that are being differentiated: pass them as
    arguments (ValueError otherwise, since their gradient would be lost).

    >>> import corvid as cv
    >>> @cv.custom_vjp
    ... def clip_grad(x):
    ...     return x
    >>> clip_grad.defvjp(lambda x: (x, None), lambda res, g: (g.clip(-1, 1),))
    >>> cv.grad(lambda x: (clip_grad(x) * 5).sum())(cv.Tensor([1.0, 2.0])).tolist()
    [1.0, 1.0]
    """

    def __init__(self, fun: Callable[..., Any]):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.fwd: Callable[..., Any] | None = None
        self.bwd: Callable[..., Any] | None = None
        self._in_fwd = 0  # fwd calling f must run f, not this rule again

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        """Register ``fwd(*args) -> (out, residuals)`` and ``bwd(residuals, ct) -> tuple of cotangents``."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any) -> Any:
        if self.fwd is None or self.bwd is None:
            raise TypeError(f"custom_vjp {self.fun.__name__}: call defvjp(fwd, bwd) before calling it")
        if self._in_fwd or not is_grad_enabled() or untraced(args):
            return self.fun(*args)
        flat = [tree_flatten(a, _none_is_leaf) for a in args]
        if self._in_fwd or not is_grad_enabled() or not any(_differentiable(x) for leaves, _ in flat for x in leaves):
            return self.fun(*args)
        self._in_fwd += 1
        try:
            result = self.fwd(*args)
        finally:
            self._in_fwd -= 1
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise TypeError(f"custom_vjp {self.fun.__name__}: fwd must return a pair (output, residuals)")
        out, res = result
        outs, out_tree = tree_flatten(out)
        call = _CustomCall(self, res, flat, outs, out_tree)
        _check_no_closure(self.fun.__name__, outs, call.inputs)
        wrapped = [_wrap(o, Mark("custom_vjp", (call, i))) if isinstance(o, Tensor) and o.dtype.is_float else o
                   for i, o in enumerate(outs)]
        return tree_unflatten(out_tree, wrapped)


class _CustomCall:
    """One call of a custom_vjp function: what its backward needs. ``inputs`` (the argument nodes
    that can take a gradient) and ``pullback`` are what the reverse walk uses."""

    def __init__(self, fn: custom_vjp, res: Any, flat: list[tuple[list[Any], TreeDef]], outs: list[Any],
                 out_tree: TreeDef):
        self.fn, self.res, self.flat, self.out_tree = fn, res, flat, out_tree
        self.outs = [(o.dtype, o.shape, o.device) if isinstance(o, Tensor) and o.dtype.is_float else None
                     for o in outs]
        self.inputs: list[Node] = [x.node for leaves, _ in flat for x in leaves if _differentiable(x)]

    def pullback(self, cts: dict[int, Tensor]) -> list[Tensor | None]:
        from ..creation import zeros

        name = self.fn.fun.__name__
        full = [None if aval is None else cts[i] if i in cts else zeros(aval[1], dtype=aval[0], device=aval[2])
                for i, aval in enumerate(self.outs)]
        result = self.fn.bwd(self.res, tree_unflatten(self.out_tree, full))
        if not isinstance(result, (tuple, list)) or len(result) != len(self.flat):
            raise TypeError(f"custom_vjp {name}: bwd must return a tuple with one cotangent per argument "
                            f"({len(self.flat)}), got {type(result).__name__}"
                            + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else ""))
        out: list[Tensor | None] = []
        for i, (r, (leaves, td)) in enumerate(zip(result, self.flat)):
            r_leaves = [None] * len(leaves) if r is None else tree_flatten(r, _none_is_leaf)[0]
            if len(r_leaves) != len(leaves):
                raise TypeError(f"custom_vjp {name}: bwd's cotangent for argument {i} has "
                                f"{len(r_leaves)} leaves, the argument has structure {td}")
            for x, c in zip(leaves, r_leaves):
                if not _differentiable(x):
                    continue
                if c is not None:
                    c = c if isinstance(c, Tensor) else Tensor(c, dtype=x.dtype, device=x.device)
                    if c.shape != x.shape:
                        raise ShapeError(f"custom_vjp {name}: bwd returned a cotangent of shape {c.shape} "
                                         f"for argument {i} of shape {x.shape}")
                    c = c.astype(x.dtype)
                out.append(c)
        return out


def _check_no_closure(name: str, outs: list[Any], inputs: list[Node]) -> None:
    """ValueError if an output depends on a differentiated variable other than through the inputs."""
    stop = {id(n) for n in inputs}
    stack = [o.node for o in outs if isinstance(o, Tensor) and o.node.traced]
    seen: set[int] = set()
    while stack:
        n = stack.pop()
        if id(n) in stop or id(n) in seen or n.op is Op.DETACH:
            continue
        seen.add(id(n))
        if n.op is Op.VAR and n.arg.kind in REVERSE_KINDS:
            raise ValueError(f"custom_vjp {name}: the function closes over a tensor that is being differentiated "
                             f"({n.dtype.name}{list(n.shape)}); pass it as an argument")
        stack.extend(s for s in n.src if s.traced)


class _Region:
    """The identity of one checkpoint call (its input and output marks point to it)."""


def checkpoint(f: Callable[..., Any]) -> Callable[..., Any]:
    """``f`` whose backward recomputes its forward instead of reading the forward's values
    (rematerialization, ``jax.checkpoint``). Values and gradients are unchanged.

    How: the arguments enter ``f`` through VARs marking the region's inputs, and its float outputs
    leave through a ``checkpoint`` VAR. When a reverse walk reaches such an output, it does not
    descend into the forward graph; it differentiates a copy of the region rebuilt over fresh
    VARs at the inputs, so the backward kernels compute the region again (by graph rewriting, not
    by calling ``f`` again: random draws inside keep their values, and gradients reach tensors
    ``f`` closes over, such as parameters). What this guarantees is that the backward graph never
    references the region's intermediate nodes. The forward graph itself stays referenced by the
    outputs, so buffers of intermediates that were already computed live as long as the outputs.

    >>> import corvid as cv
    >>> layer = cv.checkpoint(lambda x: (x * x).sin())
    >>> round(cv.grad(lambda x: layer(x).sum())(cv.Tensor([1.0])).item(), 4)
    1.0806
    """

    @functools.wraps(f)
    def checkpointed(*args: Any) -> Any:
        leaves, td = tree_flatten(args)
        if not is_grad_enabled() or not any(_differentiable(x) for x in leaves):
            return f(*args)
        region = _Region()
        inner = [_wrap(x, Mark("checkpoint_in", region)) if _differentiable(x) else x for x in leaves]
        outs, out_tree = tree_flatten(f(*tree_unflatten(td, inner)))
        mark = Mark("checkpoint", region)
        return tree_unflatten(out_tree, [_wrap(o, mark) if _differentiable(o) else o for o in outs])

    return checkpointed


class _BatchedCall:
    """A custom_vjp call seen through vmap: the same ``bwd``, vmapped over the batched residuals
    and cotangents; cotangents of arguments that were not batched are summed over the batch."""

    def __init__(self, call: _CustomCall, batch: Callable[[Node], tuple[Node, int | None]], size: int):
        self.call, self.size = call, size
        self.inputs: list[Node] = []
        self.input_batched: list[bool] = []
        for x in call.inputs:
            n, b = batch(x)
            self.inputs.append(n)
            self.input_batched.append(b is not None)
        res_leaves, self.res_tree = tree_flatten(call.res, _none_is_leaf)
        self.res, self.res_axes = [], []
        for r in res_leaves:
            if isinstance(r, Tensor) and r.node.traced:
                n, b = batch(r.node)
                self.res.append(r._new(n))
                self.res_axes.append(b)
            else:
                self.res.append(r)
                self.res_axes.append(None)
        self.outs = [None if a is None else (a[0], (size,) + a[1], a[2]) for a in call.outs]

    def pullback(self, cts: dict[int, Tensor]) -> list[Tensor | None]:
        from ..creation import zeros
        from .batching import vmap

        full = [None if a is None else cts[i] if i in cts else zeros(a[1], dtype=a[0], device=a[2])
                for i, a in enumerate(self.outs)]
        idx = [i for i, a in enumerate(full) if a is not None]

        def one(res_leaves: list[Any], ct_leaves: list[Tensor]) -> list[Tensor]:
            call = self.call
            saved = call.res
            call.res = tree_unflatten(self.res_tree, res_leaves)
            try:
                got = call.pullback(dict(zip(idx, ct_leaves)))
            finally:
                call.res = saved
            device = ct_leaves[0].device if ct_leaves else None  # (the inputs are nodes: no device of their own)
            return [g if g is not None else zeros(x.shape, dtype=x.dtype, device=device) for g, x in
                    zip(got, call.inputs)]

        per = vmap(one, in_axes=(self.res_axes, 0), out_axes=0, axis_size=self.size)(
            self.res, [full[i] for i in idx])
        return [g if batched else g.sum(axis=0) for g, batched in zip(per, self.input_batched)]


def _batch_custom_vjp(mark: Mark, batch: Callable[[Node], tuple[Node, int | None]], size: int,
                      cache: dict[int, Any]) -> Mark:
    call, index = mark.data
    new = cache.get(id(call))
    if new is None:
        new = cache[id(call)] = _BatchedCall(call, batch, size)
    return Mark("custom_vjp", (new, index))


def _register() -> None:
    from .batching import MARK_RULES

    MARK_RULES["custom_vjp"] = _batch_custom_vjp


_register()

"""PyTorch-style autograd on Tensor: ``requires_grad`` leaves, ``backward()`` into ``.grad``,
``no_grad``, ``detach`` and in-place updates of leaves (what optimizers need).

A leaf is a tensor whose node is ``VAR(value, Mark("leaf", weakref(tensor)))``. Every op on it
builds a graph that mentions that VAR, so ``loss.backward()`` walks from the loss down to the
leaves (:mod:`corvid.transforms.reverse`) and adds each cotangent into the owner's ``.grad``.

>>> import corvid as cv
>>> w = cv.Tensor([1.0, -2.0, 3.0], requires_grad=True)
>>> (w * w).sum().backward()
>>> w.grad.tolist()
[2.0, -4.0, 6.0]

The graph is immutable, so "in place" means the *handle* changes: ``assign`` and ``+=``, ``-=``,
``*=``, ``/=`` point the same Tensor object at a new node. For a leaf under :class:`no_grad`
the new value keeps the leaf's mark, so the tensor stays the same leaf (and is realized at once,
so an optimizer loop never grows a graph across steps).

Grad mode is per thread. Under ``no_grad`` every op whose result depends on a reverse-mode mark
(a ``requires_grad`` leaf, or a variable of :func:`corvid.grad` and friends) wraps the result in
``DETACH``. Like ``torch.func``: a ``no_grad`` inside a function given to ``cv.grad`` stops the
gradient there, while ``cv.grad`` called under an outer ``no_grad`` still differentiates. Marks
of the other transforms (``jvp``, ``vmap``) are not affected.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from .errors import ShapeError
from .engine import capture
from .graph.node import Mark, Node, Op, node

if TYPE_CHECKING:
    from .tensor import Tensor

REVERSE_KINDS = frozenset({"leaf", "grad"})  # marks that no_grad cuts and reverse mode differentiates
_LEAF = frozenset({"leaf"})
F = TypeVar("F", bound=Callable[..., Any])


class _GradMode(threading.local):
    enabled = True

    def __init__(self) -> None:
        self.saved: list[bool] = []  # the modes that this thread's open no_grad/enable_grad blocks replaced


grad_mode = _GradMode()


def is_grad_enabled() -> bool:
    """True unless inside :class:`no_grad` (per thread; :class:`enable_grad` turns it back on).

    >>> cv.is_grad_enabled()
    True
    >>> with cv.no_grad():
    ...     cv.is_grad_enabled()
    False
    """
    return grad_mode.enabled


class _SetGradMode:
    """Context manager and decorator that sets grad mode on entry and restores it on exit.

    The saved modes are kept per thread, not on the object, so one object (a module-level
    ``no_grad()``) may be entered from several threads at once."""

    _value = True

    def __enter__(self) -> None:
        grad_mode.saved.append(grad_mode.enabled)
        grad_mode.enabled = self._value

    def __exit__(self, *exc: Any) -> None:
        grad_mode.enabled = grad_mode.saved.pop()

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with type(self)():
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class no_grad(_SetGradMode):
    """Stop recording gradients: results of ops stop depending on ``requires_grad`` leaves.

    >>> import corvid as cv
    >>> w = cv.ones(3, requires_grad=True)
    >>> with cv.no_grad():
    ...     y = w * 2
    >>> y.requires_grad
    False

    Also a decorator (``@cv.no_grad()``). Functional transforms re-enable grad mode while they
    run the function they differentiate."""

    _value = False


class enable_grad(_SetGradMode):
    """Turn grad mode back on inside :class:`no_grad` (context manager or decorator, as
    ``torch.enable_grad``).

    >>> w = cv.ones(2, requires_grad=True)
    >>> with cv.no_grad():
    ...     with cv.enable_grad():
    ...         y = w * 2
    ...     z = w * 2
    >>> y.requires_grad, z.requires_grad
    (True, False)
    """

    _value = True


# --- which marks a node depends on ------------------------------------------------------------------
_no_leaf: weakref.WeakSet[Node] = weakref.WeakSet()  # traced nodes known not to depend on a leaf
_no_reverse: weakref.WeakSet[Node] = weakref.WeakSet()  # ... nor on any reverse-mode mark


def depends_on(n: Node, kinds: frozenset[str]) -> bool:
    """True when a VAR whose mark kind is in ``kinds`` lies below ``n`` (not through a DETACH).

    Walks only traced nodes and stops at the first hit; negative answers are memoized, so asking
    again about a graph that grew by one op costs O(1)."""
    if not n.traced:
        return False
    memo = _no_leaf if kinds == _LEAF else _no_reverse if kinds == REVERSE_KINDS else None
    stack, seen = [n], set()
    while stack:
        x = stack.pop()
        if x.op is Op.VAR and x.arg.kind in kinds:
            return True
        if x.op is Op.DETACH or id(x) in seen or (memo is not None and x in memo):
            continue
        seen.add(id(x))
        stack.extend(s for s in x.src if s.traced)
    if memo is not None:
        memo.add(n)
    return False


def detach_node(n: Node) -> Node:
    return node(Op.DETACH, (n,), None, n.dtype, n.shape) if n.traced else n


def cut_under_no_grad(n: Node) -> Node:
    """What ``Tensor._new`` keeps of a traced result under no_grad: reverse-mode marks are cut."""
    return detach_node(n) if depends_on(n, REVERSE_KINDS) else n


def leaf_node(value: Node, mark: Mark) -> Node:
    """``VAR(value, mark)``; when the value is computed already the VAR shares its buffer."""
    v = node(Op.VAR, (value,), mark, value.dtype, value.shape)
    if value.buffer is not None:
        v.buffer = value.buffer
    return v


def _own_leaf(t: Tensor) -> bool:
    n = t.node
    return n.op is Op.VAR and n.arg.kind == "leaf" and n.arg.data() is t


class AutogradMixin:
    """The PyTorch-style autograd surface of :class:`corvid.Tensor`."""

    __slots__ = ()

    @property
    def requires_grad(self: Tensor) -> bool:
        """True for a ``requires_grad`` leaf and for every result computed from one (outside no_grad).

        Setting it (``x.requires_grad = True``) is :meth:`requires_grad_`.

        >>> x = cv.Tensor([1.0, 2.0], requires_grad=True)
        >>> x.requires_grad, (x * 2).requires_grad, x.detach().requires_grad
        (True, True, False)
        >>> cv.ones(2).requires_grad
        False
        """
        return depends_on(self.node, _LEAF)

    @requires_grad.setter
    def requires_grad(self: Tensor, flag: bool) -> None:
        self.requires_grad_(flag)

    def requires_grad_(self: Tensor, requires_grad: bool = True) -> Tensor:
        """Make this tensor a leaf whose gradient ``backward()`` accumulates into ``.grad`` (or stop).

        TypeError for non-float dtypes; RuntimeError when turning it off on a non-leaf result.
        Returns the tensor itself (in place, as torch's).

        >>> w = cv.zeros(2).requires_grad_()
        >>> (w + 3).sum().backward()
        >>> w.grad.tolist()
        [1.0, 1.0]
        """
        own = _own_leaf(self)
        if requires_grad:
            if own:
                return self
            if not self.dtype.is_float:
                raise TypeError(f"only floating point tensors can require gradients, this one is {self.dtype.name}")
            n = self.node
            self.node = leaf_node(detach_node(n) if depends_on(n, _LEAF) else n, Mark("leaf", weakref.ref(self)))
        elif own:
            self.node = self.node.src[0]
        elif self.requires_grad:
            raise RuntimeError("requires_grad can only be turned off on a leaf; use detach() for a result of ops")
        return self

    @property
    def is_leaf(self: Tensor) -> bool:
        """True unless this tensor is the result of ops on a ``requires_grad`` leaf (torch semantics).

        >>> x = cv.Tensor([1.0, 2.0], requires_grad=True)
        >>> x.is_leaf, (x * 2).is_leaf, cv.ones(2).is_leaf
        (True, False, True)
        """
        return _own_leaf(self) or not self.requires_grad

    def detach(self: Tensor) -> Tensor:
        """The same value with no gradient flowing back through it (a DETACH node; no copy).
        :func:`corvid.stop_gradient` does the same for pytrees.

        >>> x = cv.Tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> (x.detach() * x).sum().backward()  # d/dx of c * x, with c = x held constant
        >>> x.grad.tolist()
        [1.0, 2.0, 3.0]
        """
        return type(self)._from_node(detach_node(self.node), self.device)

    def backward(self: Tensor, gradient: Any = None, create_graph: bool = False) -> None:
        """Add d(self)/d(leaf), contracted with ``gradient``, into ``leaf.grad`` for every leaf below.

        ``gradient`` (the cotangent, same shape as self) defaults to 1 for a one-element tensor;
        any other shape needs it (RuntimeError otherwise, as in torch). Gradients accumulate over
        calls; set ``leaf.grad = None`` to reset. The graph is immutable, so calling backward twice
        works (no ``retain_graph``). The new ``.grad`` tensors are computed at once, in one
        schedule; with ``create_graph=True`` they stay differentiable (for higher derivatives).

        >>> x = cv.Tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> y = x ** 2
        >>> y.sum().backward()
        >>> x.grad.tolist()
        [2.0, 4.0, 6.0]
        >>> y.backward(gradient=cv.Tensor([1.0, 0.0, 0.0]))  # accumulates
        >>> x.grad.tolist()
        [4.0, 4.0, 6.0]
        """
        from .engine.realize import holder, realize
        from .tensor import Tensor
        from .transforms.reverse import backprop

        if not self.dtype.is_float:
            raise TypeError(f"backward needs a float tensor, this one is {self.dtype.name}")
        if not depends_on(self.node, _LEAF):
            raise RuntimeError("backward: this tensor does not depend on any tensor with requires_grad=True "
                               "(were its inputs detached, or computed under no_grad?)")
        if gradient is None:
            if self.size != 1:
                raise RuntimeError("backward: a gradient can be created implicitly only for a one-element tensor, "
                                   f"this one has shape {self.shape}; pass gradient= (a tensor of that shape)")
            seed = self._const(1.0)
        else:
            seed = gradient if isinstance(gradient, Tensor) else Tensor(gradient, device=self.device)
            if seed.shape != self.shape:
                raise ShapeError(f"backward: gradient has shape {seed.shape}, the tensor has shape {self.shape}")
            seed = seed.astype(self.dtype)
        with enable_grad():
            grads, reached = backprop([self], [seed], lambda m: m.kind == "leaf")
            updates: list[tuple[Tensor, Tensor]] = []
            for key, mark in reached.items():
                owner = mark.data()
                if owner is None or not _own_leaf(owner):
                    continue  # the leaf is gone, or no longer requires grad
                if owner.node.arg is not mark:
                    raise RuntimeError(
                        f"backward: a leaf tensor of shape {owner.shape} that this result was computed from has "
                        "been updated in place since (assign, +=, an optimizer step); its .grad would be the "
                        "gradient at its old value. Recompute the result from the updated tensor, or call "
                        "backward before updating it.")
                g = grads[key] if key in grads else owner._const(0.0)
                g = g if create_graph else g.detach()
                updates.append((owner, g if owner.grad is None else owner.grad + g))
            if capture.tracing():  # inside jit: the values are computed when the program runs
                for owner, g in updates:
                    owner.grad = g
                return
            held = [holder(g.node) for _, g in updates]
            realize(held, None, [g.device for _, g in updates])  # one schedule for all of them
            for owner, g in updates:
                owner.grad = g.realize()

    # --- in-place updates --------------------------------------------------------------------------
    def assign(self: Tensor, value: Any) -> Tensor:
        """Point this tensor at ``value`` (broadcast to its shape, cast to its dtype); returns self.

        For a ``requires_grad`` leaf this must happen under :class:`no_grad` (RuntimeError
        otherwise): the tensor stays the same leaf with the new value, computed at once. Any other
        tensor is simply rebound to the new graph; other tensors that shared its old node keep the
        old value (nodes are immutable).

        >>> w = cv.Tensor([1.0, 2.0], requires_grad=True)
        >>> with cv.no_grad():
        ...     _ = w.assign(w - 0.5)  # an optimizer step
        >>> w.tolist(), w.is_leaf, w.requires_grad
        ([0.5, 1.5], True, True)
        >>> cv.zeros(3).assign(7).tolist()  # broadcast and cast to float32
        [7.0, 7.0, 7.0]
        """
        from .tensor import Tensor

        v = value if isinstance(value, Tensor) else Tensor(value, dtype=self.dtype, device=self.device)
        v = v.astype(self.dtype).broadcast_to(self.shape)
        if _own_leaf(self):
            if grad_mode.enabled:
                raise RuntimeError("a leaf tensor that requires grad cannot be updated in place while gradients "
                                   "are recorded; do it under `with cv.no_grad():` (as optimizers do)")
            inner = detach_node(v.node) if depends_on(v.node, _LEAF) else v.node
            capture.note_mutation(self, "node")
            # a new mark: results computed from the old value can no longer reach this leaf
            self.node = leaf_node(inner, Mark("leaf", self.node.arg.data))
            return self if capture.tracing() else self.realize()
        capture.note_mutation(self, "node")
        self.node = v.node
        return self

    def _inplace(self: Tensor, result: Tensor, op: str) -> Tensor:
        if result.dtype is not self.dtype:
            raise TypeError(f"in-place {op} would change dtype {self.dtype.name} to {result.dtype.name}")
        if result.shape != self.shape:
            raise ShapeError(f"in-place {op}: result shape {result.shape} differs from {self.shape}")
        return self.assign(result)

    def __iadd__(self, other): return self._inplace(self + other, "+=")  # noqa: E704
    def __isub__(self, other): return self._inplace(self - other, "-=")  # noqa: E704
    def __imul__(self, other): return self._inplace(self * other, "*=")  # noqa: E704
    def __itruediv__(self, other): return self._inplace(self / other, "/=")  # noqa: E704


def stop_gradient(x: Any) -> Any:
    """``x`` (a tensor or a pytree of them) with no gradient flowing back through it (JAX name of
    :meth:`Tensor.detach`). Non-tensor leaves pass through unchanged.

    >>> f = lambda x: (x * cv.stop_gradient(x)).sum()  # the gradient of c * x: c = x
    >>> cv.grad(f)(cv.Tensor([1.0, 2.0])).tolist()
    [1.0, 2.0]
    >>> cv.stop_gradient({"step": 3, "w": cv.Tensor([1.0])})
    {'step': 3, 'w': Tensor([1.])}
    """
    from .tensor import Tensor
    from .tree import tree_map

    return tree_map(lambda v: v.detach() if isinstance(v, Tensor) else v, x)

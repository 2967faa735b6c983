"""Recorded graphs: an eager call of a library function builds its graph once per signature.

An eager op's host time on a GPU is mostly Python: ``F.layer_norm(x, (768,), w, b)`` makes some
twenty nodes through the Tensor methods (promotion, broadcasting, axis checks, the autocast
wrapper), then :func:`~corvid.engine.schedule.plan_for` walks those nodes again to find the
graph's key. For the same argument dtypes, shapes and static arguments the function builds the
same graph every time, only over other input nodes. :func:`replayed` records that graph the first
time, as a list of steps ``node(op, sources, arg, dtype, shape)`` with sources numbered, and
replays it afterwards with :func:`~corvid.graph.node.node` alone. Nodes are hash-consed, so the
replay returns the very nodes the function would have built (tested node for node), and every
cache below (the kernels, the plans) sees the same graph.

The replayed root (and the node under it that realizing computes first, such as a library
product's flat result) also carries the walk that :func:`~corvid.engine.schedule.plan_for` would
make (``Node.walked``: the nodes below it in walk order, the ones among them that a kernel
computes, and the graph's key), so realizing it is one check that none of those nodes was
computed since and one lookup of the plan.

A function is replayed only when it is safe to be: every tensor argument is a stored value (a
Buffer on one device, not a view, no variable of a transform or autograd below it: so not a
trainable parameter, even under ``no_grad``; a frozen one is a stored value) or up to three
views and casts of one (``x @ w.T``: the views are part of the key and replayed), every other
argument is a plain value (numbers, strings, None, dtypes, tuples and lists of them), and the
recorded graph holds nothing but the arguments and literals (no stored value that the function
made, such as a small result numpy computed). Anything else calls the function. The key includes
the autocast dtype and the float32 matmul precision (``amp.policy``), the settings that change
the graphs products build, and the device registry's epoch (a device name may come to mean another
backend, whose products take another route). A decorated function must build its graph from its arguments'
dtypes, shapes and devices and its static arguments alone: no random draws, no reads of values.
"""

from __future__ import annotations

import functools
import math
import threading
from typing import Any, Callable, TypeVar

from ..dtype import DType
from ..graph.node import IDENTITY, MOVEMENT, Node, Op, node, toposort
from ..runtime import device as _registry
from ..runtime.device import Buffer

F = TypeVar("F", bound=Callable[..., Any])

LIMIT = 256  # recorded signatures kept per function (the oldest go first)
_NO = object()  # an argument that is not replayed: the function is called
_UNREPLAYABLE = object()  # a signature whose graph cannot be replayed (see the module docstring)
_VIEWS = MOVEMENT | IDENTITY
_CHAIN = MOVEMENT | {Op.CAST}  # what may lie between a tensor argument and the stored value under it
CHAIN_MAX = 3  # ... at most this many of them (``x.astype(bf16).T``)
_deps: list[Any] = []  # (amp.policy, Tensor), bound at the first call
_off = threading.local()  # ``off`` blocks (tests compare a replay with the function's own build)


class Recording:
    """One signature's graph: ``steps`` over values numbered inputs first, then ``fixed`` (the
    literals the graph holds), then the steps' results; ``root`` the result's number; ``walks``
    the recorded walks (:func:`_walk_of`) of the nodes realizing the result plans: the root, and
    the node under it that realizing computes first (a library product's flat result)."""

    __slots__ = ("fixed", "steps", "root", "device", "walks")

    def __init__(self, fixed: tuple[Node, ...], steps: tuple, root: int, device: Any, walks: tuple = ()):
        self.fixed, self.steps, self.root, self.device, self.walks = fixed, steps, root, device, walks

    def replay(self, inputs: list[Node]) -> Node:
        vals = inputs + list(self.fixed)
        add = vals.append
        for op, arg, dtype, shape, src in self.steps:
            add(node(op, (vals[src[0]],) if len(src) == 1 else tuple([vals[i] for i in src]), arg, dtype, shape))
        for at, (order, interior, key) in self.walks:
            n = vals[at]
            if n.buffer is None:
                n.walked = (tuple([vals[i] for i in order]), tuple([vals[i] for i in interior]), key)
        return vals[self.root]


def _static(v: Any) -> Any:
    """The key of a non-tensor argument, or ``_NO``: its type with its value (1, 1.0 and True
    differ; so do 0.0 and -0.0; every nan is one key)."""
    t = type(v)
    if t is int or t is bool or t is str or v is None or t is DType:
        return (t, v)
    if t is float:
        return (t, v, math.copysign(1.0, v)) if v == v else (t, "nan")
    if t is tuple or t is list:
        parts = tuple([_static(x) for x in v])
        return _NO if _NO in parts else (t, parts)
    return _NO


def _signature(args: tuple, kwargs: dict, tensor: type) -> tuple[tuple, list[Node]] | None:
    """(the call's key, the stored nodes under its tensor arguments) or None when the call is
    not replayed. A tensor argument is a stored value, or up to :data:`CHAIN_MAX`
    views and casts of one (``w.T``, ``x.astype(bf16)``), whose ops, arguments, dtypes and shapes
    are part of the key: the recording replays them over the stored value. The key numbers
    repeated stored values (``f(x, x)`` is another graph than ``f(x, y)``)."""
    key: list[Any] = []
    nodes: list[Node] = []
    for name, v in zip((None,) * len(args), args) if not kwargs else \
            [*zip((None,) * len(args), args), *kwargs.items()]:
        if isinstance(v, tensor):
            n = v.node  # (a subclass too: a frozen Parameter builds the graph a Tensor does)
            if n.marked:
                return None
            chain: tuple = ()
            if type(n.buffer) is not Buffer or n.op in _VIEWS:  # (a few views or casts of a stored value: ``w.T``)
                levels = []
                while n.buffer is None and n.op in _CHAIN and len(levels) < CHAIN_MAX:
                    levels.append((n.op, n.arg, n.dtype, n.shape))
                    n = n.src[0]
                if type(n.buffer) is not Buffer or n.op in _VIEWS:
                    return None
                chain = tuple(levels)
            for i, m in enumerate(nodes):
                if m is n:
                    key.append((name, "same", i, chain))
                    break
            else:
                key.append((name, n.op, n.dtype, n.shape, v.device, chain))
            nodes.append(n)
        else:
            s = _static(v)
            if s is _NO:
                return None
            key.append((name, s))
    return tuple(key), nodes


def _record(out: Any, inputs: list[Node], tensor: type) -> Any:
    """The :class:`Recording` of ``out``'s graph over ``inputs``, or ``_UNREPLAYABLE``."""
    if type(out) is not tensor:
        return _UNREPLAYABLE
    root = out.node
    number = {}
    for i, n in enumerate(inputs):
        number.setdefault(id(n), i)
    if id(root) in number:  # (the function returned an argument)
        return Recording((), (), number[id(root)], out.device)
    order = toposort([root], stop=lambda n: id(n) in number)
    depends = {id(n) for n in inputs}
    fixed: list[Node] = []
    steps: list[Node] = []
    for n in order:
        if id(n) in number:
            continue
        if any(id(s) in depends for s in n.src):  # (a step may be a node computed already: it is the same value)
            depends.add(id(n))
            steps.append(n)
        elif n.buffer is not None or n.marked or n.op is Op.BUFFER:
            return _UNREPLAYABLE  # (a value the function stored, or a variable: not a literal)
        else:
            fixed.append(n)
    base = len(inputs)
    for j, n in enumerate(fixed):
        number[id(n)] = base + j
    base += len(fixed)
    recorded = []
    for j, n in enumerate(steps):
        number[id(n)] = base + j
        recorded.append((n.op, n.arg, n.dtype, n.shape, tuple([number[id(s)] for s in n.src])))
    from .schedule import stored_under_reshape, view_base_to_compute

    walks = []
    for n in (root, view_base_to_compute(root, out.device) or stored_under_reshape(root)):
        walk = None if n is None or number.get(id(n), 0) < len(inputs) else _walk_of(n, number, len(inputs))
        if walk is not None:
            walks.append((number[id(n)], walk))
    return Recording(tuple(fixed), tuple(recorded), number[id(root)], out.device, tuple(walks))


def _walk_of(root: Node, number: dict[int, int], inputs: int) -> tuple | None:
    """What planning ``root`` walks (:func:`~corvid.engine.schedule._walk`), by value number:
    the nodes below the root in walk order, those a kernel computes, and the key. None unless
    the walk stops at the arguments alone (a step computed already ends it elsewhere: a replay's
    fresh nodes would be walked further)."""
    from .schedule import _walk

    if root.buffer is not None:
        return None
    every, key, _, _ = _walk([root])
    if key is None or any(number.get(id(n), inputs) >= inputs for n in every[:-1] if n.buffer is not None) \
            or any(id(n) not in number for n in every):
        return None
    order = tuple([number[id(n)] for n in every[:-1]])
    interior = tuple([number[id(n)] for n in every[:-1] if n.buffer is None])
    return order, interior, key


def replayed(fn: F) -> F:
    """Decorate a function of tensors and static arguments that returns one tensor: an eager call
    (every tensor argument stored) builds its graph from a recording of the first call with the
    same signature (see the module docstring)."""
    recordings: dict[tuple, Any] = {}
    lock = threading.Lock()

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _deps:  # (imported at the first call: this module is imported by the ops that tensor.py imports)
            from ..amp import policy
            from ..tensor import Tensor

            _deps[:] = (policy, Tensor)  # (one assignment: two threads may both get here)
        policy, Tensor = _deps
        found = None if getattr(_off, "on", False) else _signature(args, kwargs, Tensor)
        if found is None:
            return fn(*args, **kwargs)
        key, inputs = found
        key = (key, policy(), _registry.epoch)
        rec = recordings.get(key)
        if rec is None:
            out = fn(*args, **kwargs)
            rec = _record(out, inputs, Tensor)
            with lock:
                if len(recordings) >= LIMIT:
                    del recordings[next(iter(recordings))]
                recordings[key] = rec
            return out
        if rec is _UNREPLAYABLE:
            return fn(*args, **kwargs)
        return Tensor._from_node(rec.replay(inputs), rec.device)

    wrapper.recordings = recordings  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


class off:
    """Call decorated functions directly in this thread inside the block (no recording, no replay)."""

    def __enter__(self) -> off:
        self._saved = getattr(_off, "on", False)
        _off.on = True
        return self

    def __exit__(self, *exc: Any) -> None:
        _off.on = self._saved

"""``jit``: trace a function once per input signature, capture its kernels, replay them.

``cv.jit(f)`` calls ``f`` the first time with *placeholders* in place of its tensor arguments
(value-less ``VAR`` nodes), so the function builds one lazy graph. That graph is scheduled once;
the resulting kernel list, with each kernel's inputs resolved to *slots*, is the captured program.
Every later call with the same signature binds the new argument buffers to the slots and launches
the same compiled kernels: no Python op code runs, no graph is built, nothing is re-scheduled.
On a device with graphs (:meth:`Device.graph`: CUDA), the second call records the kernels into
one device graph, and the calls from then on launch it once (``_Captured._launch_graph``).

What a slot can be:

* an argument of the call (tensor leaves of the args/kwargs pytree);
* *state*: a tensor the function reads and updates in place (``Tensor.assign``, ``+=`` under
  ``no_grad``, ``.grad`` written by ``backward``). It is read at each call from the tensor's
  current value and written back after the call, so an optimizer step under ``jit`` updates the
  parameters as the plain function would;
* a ``requires_grad`` leaf captured from the enclosing scope (a model's parameters): read at each
  call from the tensor's current value;
* a random draw: each call advances the generator exactly as running ``f`` would, so a call draws
  new numbers and ``manual_seed`` makes the sequence reproducible;
* a constant: any other tensor captured from the enclosing scope is frozen at trace time (as in
  JAX): pass it as an argument if it changes between calls;
* a *scalar input*: a Python number read at each call (:func:`scalar_input`; an optimizer's
  learning rate, so a scheduler can change it without a retrace);
* the output of an earlier kernel (freed as soon as its last reader has run).

The signature is the pytree structure of the arguments, the shape/dtype/device of each tensor
leaf, and the value of each non-tensor leaf (Python numbers, strings… are static: a new value
traces again). Before replaying, guards recorded while tracing are checked (shapes of state and
captured leaves, whether a ``.grad`` existed, and those the traced code adds with
:func:`add_guard`); if one fails the function is traced again. A signature keeps its
``MAX_PROGRAMS`` most recent programs.

Anything that needs a concrete value while tracing (``item()``, ``bool()``, ``numpy()``, printing
a tensor, Python control flow on tensor values) raises :class:`JitError` naming the problem: a
captured program is never silently wrong.

Threads: a jitted function may be called from several threads at once. A trace belongs to the
thread that runs it (its placeholders, recorded updates and requests are invisible to the other
threads), and one function traces one signature at a time: a thread that needs the program
another thread is tracing waits for it instead of tracing again (a trace of an optimizer step
briefly points the parameters at placeholders, which another trace of it must not read). Replays
run side by side, each with its own buffers.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
import weakref
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..amp import policy as _policy
from ..engine.capture import Recorder as _Recorder, recording as _recording, symbolic_sizes as _symbolic_sizes
from ..graph.symbolic import Dim, Num, Sym, SymbolicSizeError, assuming_hints as _assuming_hints, compare as _compare
from ..graph.symbolic import size_function as _size_function
from ..engine.realize import _moved, _report, debug_level as _debug_level
from ..graph.node import Mark, Node, Op, node, toposort
from ..runtime.device import Buffer, canonical_device, default_device, get_device
from ..tree import tree_flatten, tree_unflatten
from .. import dtype as _dt
from .. import profiler as _profiler

_INT64 = _dt.int64


class JitError(ValueError):
    """The function cannot be captured by ``jit`` (it needs a concrete value while traced, …)."""


# --- the captured program ------------------------------------------------------------------------------


@dataclass
class _Slot:
    kind: str  # "arg" | "state" | "leaf" | "rng" | "scalar" | "const" | "kernel" | "empty" | "dims"
    ref: Any = None  # arg index; (tensor weakref, attr); leaf weakref; draw index; reader; Buffer; kernel index
    dtype: Any = None
    shape: tuple[int, ...] = ()
    device: Any = None  # the device its buffer lives on
    fallback: Buffer | None = None  # a captured leaf's value at trace time, used if the tensor is gone


@dataclass
class _Launch:
    sk: Any  # ScheduledKernel
    outs: list[int]  # the slot of each output (params 0..k-1 of the kernel)
    ins: list[int]
    free_after: list[int] = field(default_factory=list)


@dataclass
class _Captured:
    slots: list[_Slot]
    launches: list[_Launch]
    outputs: list[tuple[str, Any]]  # ("slot", i) or ("static", value)
    out_tree: Any
    writes: list[tuple[Any, str, int | None]]  # (tensor weakref or arg index, attr, slot or None)
    guards: list[Callable[[], bool]]
    draws: list[int]
    kernels: int = 0
    _plan: Any = None  # what run() needs, precomputed once (see _make_plan)
    runs: int = 0  # calls of run(); the second records a device graph (see _launch_graph)
    _graph: Any = None  # the device's replayer of the launches (Device.graph); False: none
    _fixed: dict[int, Any] = field(default_factory=dict)  # slot -> handle of an intermediate in a graph
    _graph_memory: list[Buffer] = field(default_factory=list)  # the memory behind _fixed
    # a device graph's intermediates live in _graph_memory: one replay of it at a time
    _graph_lock: Any = field(default_factory=threading.Lock)
    # symbolic sizes: where each one's value is read, (argument index, axis) per Dim slot (empty:
    # every size is a constant); the program then serves every call whose sizes match ``pattern``
    sizes: tuple[tuple[int, int], ...] = ()
    pattern: Any = None  # per tensor argument: its shape, a Dim where a size is symbolic
    # comparisons of symbolic sizes decided while tracing (symbolic.assuming_hints): (a function
    # of the sizes' values giving a - b, op, the result the program assumes)
    size_guards: tuple = ()

    def _make_plan(self) -> tuple:
        """Per-call work reduced to flat tuples: which slots read arguments, which read other
        tensors (closures), the rng slots, each launch as (program, device, allocator, outputs as
        (slot, dtype, numel, itemsize), input slots, slots to free), and each output."""
        from .. import random as rnd

        args, others, rngs = [], [], []
        for i, s in enumerate(self.slots):
            if s.kind == "arg":
                args.append((i, s.ref))
            elif s.kind == "leaf":
                others.append((i, _leaf_reader(s)))
            elif s.kind == "state":
                others.append((i, _state_reader(s.ref, s.fallback)))
            elif s.kind == "const":
                others.append((i, lambda dyn, b=s.ref: b))
            elif s.kind == "empty":
                others.append((i, lambda dyn, s=s: Buffer(s.device, s.dtype, 0)))
            elif s.kind == "scalar":
                others.append((i, lambda dyn, s=s: _scalar_buffer(s.ref(), s.dtype, s.device)))
            elif s.kind == "rng":  # (a draw of a symbolic count: this call's count)
                count = _size_fn(self.draws[s.ref])
                rngs.append((i, lambda d, s=s, c=count: rnd.params_buffer(c if type(c) is int else c(d), s.device)))
            elif s.kind == "dims":
                others.append((i, lambda dyn, s=s: _sizes_buffer(self.sizes, dyn, s.device)))
        launches = tuple((_sized(ln.sk), ln.sk.device, get_device(ln.sk.device).allocator.alloc,
                          tuple((o, n.dtype, _size_fn(n.numel), n.dtype.itemsize) for o, n in zip(ln.outs, ln.sk.outputs)),
                          tuple(ln.ins), tuple(ln.free_after)) for ln in self.launches)
        outputs = tuple((kind, v, self.slots[v].dtype if kind == "slot" else None,
                         _shape_fn(self.slots[v].shape) if kind == "slot" else None,
                         self.slots[v].device if kind == "slot" else None) for kind, v in self.outputs)
        return tuple(args), tuple(others), tuple(rngs), launches, outputs

    def run(self, dyn: list[Any]) -> Any:
        Tensor = _TENSOR or _tensor_class()  # noqa: N806
        plan = self._plan
        if plan is None:
            plan = self._plan = self._make_plan()
        args, others, rngs, launches, outputs = plan
        bufs: list[Buffer | None] = [None] * len(self.slots)
        for i, k in args:
            n = dyn[k].node
            bufs[i] = n.buffer if n.op is Op.BUFFER else _buffer_of(dyn[k])  # realized: nothing to do
        for i, read in others:
            bufs[i] = read(dyn)
        sizes = [dyn[a].shape[ax] for a, ax in self.sizes] if self.sizes else None
        for i, draw in rngs:  # after the reads, in draw order (as before)
            bufs[i] = draw(sizes)
        dbg = _debug_level()
        self.runs += 1
        prof = _profiler._ACTIVE  # (a profile times each kernel: no device graph meanwhile)
        graphed = sizes is None and self.runs > 1 and self._graph is not False and dbg < 2 and prof is None and \
            self._launch_graph(launches, bufs)
        if not graphed:
            for k, (program, device, alloc, outs_of, ins, free) in enumerate(launches):
                hs = []
                for o, dtype, numel, itemsize in outs_of:
                    if type(numel) is not int:  # a symbolic size: this call's
                        numel = numel(sizes)
                    out = bufs[o] = Buffer(device, dtype, numel)
                    out._handle = h = alloc(numel * itemsize)  # what out.handle would do, minus the device lookup
                    out._owner = alloc.__self__
                    hs.append(h)
                if type(program) is tuple:  # (a program whose launch depends on the symbolic sizes)
                    program = functools.partial(program[0], sizes=sizes)
                if dbg >= 2:  # DEBUG=2 reports each replayed kernel as a plain realize does
                    t0 = time.perf_counter()
                    program(hs + [bufs[j].handle for j in ins])
                    get_device(device).synchronize()
                    _report(self.launches[k].sk, time.perf_counter() - t0, dbg)
                elif prof is not None:
                    sk = self.launches[k].sk
                    prof.record(sk.name, device, sk.kernel, functools.partial(program, hs + [bufs[j].handle for j in ins]))
                else:
                    for j in ins:  # (the handles as ``Buffer.handle`` gives them, without its property call)
                        b = bufs[j]
                        h = b._handle
                        hs.append(h if h is not None else b.handle)
                    program(hs)
                for j in free:
                    bufs[j] = None
        outs = []
        for kind, v, dtype, shape, device in outputs:
            if kind == "static":
                outs.append(v)
            elif kind == "size":
                outs.append(v(sizes))
            else:
                if type(shape) is not tuple:
                    shape = shape(sizes)
                outs.append(Tensor._from_node(node(Op.BUFFER, (), bufs[v], dtype, shape), device))
        for ref, attr, j in self.writes:
            t = dyn[ref] if isinstance(ref, int) else ref()
            if t is None:  # nobody can see this tensor any more (a local of the function)
                continue
            if j is None:  # the function set the attribute to None (zero_grad)
                t.grad = None
                continue
            s = self.slots[j]
            shape = s.shape
            if sizes is not None and type(shape) is tuple and any(type(d) is not int for d in shape):
                shape = _shape_of_call(s, sizes)  # (an argument updated in place, of symbolic shape)
            value = node(Op.BUFFER, (), bufs[j], bufs[j].dtype, shape)
            if attr == "node":
                t.node = _rewrap(t.node, value)
            else:
                t.grad = Tensor._from_node(value, s.device)
        if self.out_tree.kind is None:  # the result is one leaf
            return outs[0]
        return tree_unflatten(self.out_tree, outs)

    def _launch_graph(self, launches: tuple, bufs: list[Buffer | None]) -> bool:
        """From the second run on, launch the kernels as one device graph (:meth:`Device.graph`;
        the second run records it): True when done, False where the device has none (the
        kernels then launch one by one, as in the first run).

        A graph bakes in its kernels' arguments, so the intermediate values (kernel outputs that
        are neither returned nor written back) live in memory the program owns for as long as it
        keeps the graph: the pool cannot hand it to anyone else between or during calls, and
        only the kernels that read the call's inputs or write its results get new arguments. An
        intermediate's memory is reused by a later one after its last reader, as the pool would
        do, which is safe because the graph runs its kernels in order."""
        if not launches:
            return False
        with self._graph_lock:
            if self._graph is None:
                devices = {ln[1] for ln in launches}
                graph = get_device(devices.pop()).graph([ln[0] for ln in launches]) if len(devices) == 1 else None
                if graph is None:
                    self._graph = False
                    return False
                self._graph = graph
                self._fixed = self._graph_intermediates(launches)
            if self._graph is False:
                return False
            fixed, handles = self._fixed, []
            for _, device, alloc, outs_of, ins, _ in launches:
                hs = []
                for o, dtype, numel, itemsize in outs_of:
                    h = fixed.get(o)
                    if h is None:  # a result: new memory at every call, as without a graph
                        out = bufs[o] = Buffer(device, dtype, numel)
                        out._handle = h = alloc(numel * itemsize)
                        out._owner = alloc.__self__
                    hs.append(h)
                handles.append(hs + [fixed[j] if j in fixed else bufs[j].handle for j in ins])
            self._graph(handles)
            return True

    def _graph_intermediates(self, launches: tuple) -> dict[int, Any]:
        """The handle of each intermediate value's slot, in memory kept in ``_graph_memory``."""
        results = {v for kind, v in self.outputs if kind == "slot"} | {j for _, _, j in self.writes}
        fixed: dict[int, Any] = {}
        spare: dict[int, list[Any]] = {}  # nbytes -> handles whose last reader has run
        nbytes_of: dict[int, int] = {}
        for _, device, _, outs_of, _, free in launches:
            for o, dtype, numel, itemsize in outs_of:
                nbytes = nbytes_of[o] = numel * itemsize
                if o not in results:
                    if spare.get(nbytes):
                        fixed[o] = spare[nbytes].pop()
                    else:
                        b = Buffer(device, dtype, numel)
                        self._graph_memory.append(b)
                        fixed[o] = b.handle
            for j in free:
                spare.setdefault(nbytes_of[j], []).append(fixed[j])
        return fixed


def _leaf_reader(s: _Slot) -> Callable[[list[Any]], Buffer]:
    ref, fallback = s.ref, s.fallback

    def read(dyn: list[Any]) -> Buffer:
        t = ref()
        return fallback if t is None else _buffer_of(t)

    return read


def _state_reader(ref: tuple[Any, str], fallback: Buffer | None) -> Callable[[list[Any]], Buffer]:
    def read(dyn: list[Any]) -> Buffer:
        who, attr = ref
        t = dyn[who] if isinstance(who, int) else who()
        if t is None:  # a tensor made inside the function (a local accumulator): its initial value
            return fallback
        return _buffer_of(t if attr == "node" else t.grad)

    return read


def _sized(sk: Any) -> Any:
    """The program of a launch; ``(program,)`` when it takes the call's symbolic sizes (a
    GPU-style kernel whose NDRange is computed from them; a C kernel reads them itself)."""
    program = sk.program
    return (program,) if getattr(program, "takes_sizes", False) else program


def _sizes_buffer(sizes: tuple[tuple[int, int], ...], dyn: list[Any], device: str) -> Buffer:
    """The values of a program's symbolic sizes for this call (int64, in Dim slot order)."""
    return Buffer(device, _INT64, len(sizes)).copyin(np.array([dyn[a].shape[ax] for a, ax in sizes], np.int64))


_size_fn = _size_function


def _shape_of_call(slot: _Slot, sizes: list[int]) -> tuple[int, ...]:
    """A slot's shape at this call's symbolic sizes (its function compiled once, kept on the slot)."""
    fn = getattr(slot, "_shape_call", None)
    if fn is None:
        fn = slot._shape_call = _shape_fn(slot.shape)
    return fn(sizes)


def _shape_fn(shape: tuple) -> Any:
    if all(type(s) is int for s in shape):
        return shape
    fns = [_size_fn(s) for s in shape]
    return lambda d: tuple(f if type(f) is int else f(d) for f in fns)


def _scalar_buffer(value: float, dtype: Any, device: str) -> Buffer:
    t = _tensor_class()(np.array(value, dtype=dtype.np), device=device)
    return _buffer_of(t)


def _rewrap(old: Node, value: Node) -> Node:
    """The new node of a tensor whose value was replaced: a leaf keeps its mark."""
    if old.op is Op.VAR and old.src and old.arg.kind == "leaf":  # a new value: a new mark (as assign)
        return node(Op.VAR, (value,), Mark("leaf", old.arg.data), value.dtype, value.shape)
    return value


def _buffer_of(t: Any) -> Buffer:
    t.realize()
    n = t.node
    while n.buffer is None and n.op is Op.VAR and n.src:  # a leaf: VAR(BUFFER)
        n = n.src[0]
    if n.buffer is None:
        raise JitError(f"jit: could not get the value of an input ({n})")
    return n.buffer


# --- what code running inside a trace can ask for (the optimizers' step uses both) ------------------------


@dataclass
class _Requests:
    guards: list[Callable[[], bool]] = field(default_factory=list)
    scalars: list[tuple[Node, Callable[[], float]]] = field(default_factory=list)


class _Tracing(threading.local):
    def __init__(self) -> None:
        self.requests: list[_Requests] = []  # one per trace running in this thread, innermost last


_tracing = _Tracing()


def add_guard(check: Callable[[], bool]) -> None:
    """Inside a ``jit`` trace: replay the captured program only while ``check()`` is true, and
    trace the function again when it is false. Outside a trace: nothing.

    For Python state that the traced code read and the program has frozen (an optimizer's
    hyperparameters, which tensors hold its state): the check says whether it is still the same.

    >>> scale = [2.0]
    >>> def f(x):
    ...     add_guard(lambda s=scale[0]: scale[0] == s)
    ...     return x * scale[0]
    >>> g = cv.jit(f)
    >>> g(cv.ones(2)).tolist(), g.traces
    ([2.0, 2.0], 1)
    >>> scale[0] = 3.0
    >>> g(cv.ones(2)).tolist(), g.traces
    ([3.0, 3.0], 2)
    """
    requests = _tracing.requests
    if requests:
        requests[-1].guards.append(check)


def scalar_input(read: Callable[[], float], dtype: Any, device: str | None = None) -> Any:
    """A 0-d tensor of ``dtype`` holding ``read()``, a Python number, on ``device`` (default: the
    default device). Inside a ``jit`` trace it is
    a placeholder that the captured program fills with ``read()`` at every call, so a number that
    changes between calls (a learning rate a scheduler sets) is neither frozen nor a reason to
    trace again. Outside a trace: ``Tensor(read())`` now.

    >>> lr = [0.5]
    >>> step = cv.jit(lambda x: x * scalar_input(lambda: lr[0], cv.float32))
    >>> step(cv.ones(2)).tolist()
    [0.5, 0.5]
    >>> lr[0] = 2.0
    >>> step(cv.ones(2)).tolist(), step.traces
    ([2.0, 2.0], 1)
    """
    from .. import dtype as dt

    d = dt.to_dtype(dtype)
    device = canonical_device(device)
    tensor = _tensor_class()
    requests = _tracing.requests
    if not requests:
        return tensor(np.array(read(), dtype=d.np), device=device)
    req = requests[-1]
    p = node(Op.VAR, (), Mark("jit-scalar", len(req.scalars)), d, ())
    req.scalars.append((p, read))
    return tensor._from_node(p, device)


# --- jit itself ---------------------------------------------------------------------------------------

MAX_PROGRAMS = 8  # per signature: guards that keep failing (a value that changes every call) cannot grow it
MAX_FAST = 4096  # exact shapes remembered for the fast lookup (a program with symbolic sizes serves many)
SYMBOLIC_MAX = 2**31 - 1  # the largest value of a symbolic size (sizes 0 and 1 are always constants)


def jit(fun: Callable | None = None, *, static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (), dynamic: Any = False) -> Any:
    """Compile ``fun`` into a replayable kernel program (usable as ``@jit`` or ``jit(f, ...)``).

    ``static_argnums`` / ``static_argnames`` name arguments that are not traced: their values are
    part of the signature (they must be hashable), so a new value traces again. Returns a
    :class:`Jitted`; see the module docstring for what is captured and what cannot be.

    ``dynamic`` says which sizes may vary without a new trace (*symbolic sizes*: the kernels take
    them as run-time arguments). ``False`` (the default): every new shape traces and compiles
    again. A dict ``{argument: {axis: "name"}}`` (an argument by position or keyword; the axes
    apply to every tensor in it; one name is one size, equal wherever it appears) traces those
    sizes symbolically from the first call. ``True``: the sizes in which a call differs from the
    first traced one become symbolic, traced once more, and every later size replays that
    program. See :doc:`/jit` (docs/jit.md) for the rules.

    >>> @cv.jit
    ... def step(x):
    ...     return (x * 2 + 1).sum()
    >>> step(cv.Tensor([1.0, 2.0])).item(), step(cv.Tensor([3.0, 4.0])).item()
    (8.0, 16.0)
    >>> step.traces  # the second call replayed the captured kernels
    1
    >>> step(cv.ones(3)).item(), step.traces  # a new shape traces again
    (9.0, 2)
    >>> power = cv.jit(lambda x, n: x ** n, static_argnums=1)
    >>> power(cv.Tensor([2.0]), 3).tolist()
    [8.0]
    >>> rows = cv.jit(lambda x: (x * 2).sum(axis=1), dynamic={0: {0: "batch"}})
    >>> rows(cv.ones((3, 4))).tolist(), rows(cv.ones((5, 4))).tolist(), rows.traces  # one trace for every batch size
    ([8.0, 8.0, 8.0], [8.0, 8.0, 8.0, 8.0, 8.0], 1)
    """
    if fun is None:
        return lambda f: jit(f, static_argnums=static_argnums, static_argnames=static_argnames, dynamic=dynamic)
    if not callable(fun):
        raise TypeError(f"jit needs a callable, got {type(fun).__name__}")
    return Jitted(fun, static_argnums, static_argnames, dynamic)


class Jitted:
    """A function wrapped by :func:`jit`. ``traces`` counts how often it was traced."""

    def __init__(self, fun: Callable, static_argnums: int | Sequence[int], static_argnames: str | Sequence[str],
                 dynamic: Any = False):
        self.fun = fun
        self.dynamic = _check_dynamic(dynamic)
        # programs with symbolic sizes, per signature without sizes (see _rank_key); the first
        # tensor shapes traced per such signature (dynamic=True compares later calls with them)
        self._symbolic: dict[Any, list[_Captured]] = {}
        self._first_shapes: dict[Any, list[tuple[int, ...]]] = {}
        self._static_only: set[Any] = set()  # signatures whose symbolic trace failed: static traces
        self.static_argnums = {static_argnums} if isinstance(static_argnums, int) else set(static_argnums)
        self.static_argnames = {static_argnames} if isinstance(static_argnames, str) else set(static_argnames)
        self._cache: dict[Any, list[_Captured]] = {}
        # calls whose arguments are all positional, plain, untraced Tensors: (shape, dtype, device)
        # of each -> the same list as in _cache (skips pytree flattening and the signature build)
        self._fast: dict[tuple, list[_Captured]] = {}
        self.traces = 0
        # held while tracing (reentrant: the function may call itself on untraced values)
        self._trace_lock = threading.RLock()
        functools.update_wrapper(self, fun)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:  # methods: bind like a function
        return self if obj is None else functools.partial(self, obj)

    def _fast_key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple | None:
        if kwargs or self.static_argnums:
            return None
        tensor = _TENSOR or _tensor_class()
        if len(args) == 1:  # (the common case, written out)
            a = args[0]
            if type(a) is not tensor:
                return None
            n = a.node
            if n.traced:
                return None
            return (n.shape, n.dtype, a.device, _policy())
        sig = []
        for a in args:
            if type(a) is not tensor:
                return None
            n = a.node
            if n.traced:  # a requires_grad leaf, or a value of an enclosing transform: the general path
                return None
            sig.append((n.shape, n.dtype, a.device))
        return (*sig, _policy())  # (a trace under autocast or another matmul precision computes otherwise)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fast = self._fast_key(args, kwargs)
        if fast is not None:
            for cap in self._fast.get(fast, ()):
                for g in cap.guards:
                    if not g():
                        break
                else:
                    return cap.run(list(args))
        return self._call(fast, args, kwargs)

    def _call(self, fast: tuple | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        from ..tensor import Tensor

        is_t = lambda x: isinstance(x, Tensor)  # noqa: E731
        dyn_args = [a if i not in self.static_argnums else _Static(a) for i, a in enumerate(args)]
        dyn_kwargs = {k: (v if k not in self.static_argnames else _Static(v)) for k, v in kwargs.items()}
        leaves, tree = tree_flatten((dyn_args, dyn_kwargs), is_leaf=lambda x: is_t(x) or isinstance(x, _Static))
        leaves = [Tensor(x) if isinstance(x, np.ndarray) else x for x in leaves]  # arrays are traced, as in JAX
        dyn = [x for x in leaves if is_t(x)]
        if any(_under_transform(t) for t in dyn):
            return self.fun(*args, **kwargs)  # inside grad/jvp/vmap tracing: become part of that trace
        key = (tree, tuple(_leaf_key(x) for x in leaves), _policy())
        cap = self._program(key)
        if cap is None and self.dynamic is not False:
            cap = self._symbolic_program(leaves, tree, dyn, fast)
        if cap is None:
            with self._trace_lock:
                cap = self._program(key)  # traced by another thread while this one waited
                if cap is None and self.dynamic is not False:
                    cap = self._symbolic_program(leaves, tree, dyn, fast, trace=True, args=args, kwargs=kwargs)
                if cap is None:
                    cap = self._trace(leaves, tree, dyn)
                    caps = self._cache.setdefault(key, [])
                    caps.append(cap)
                    if len(caps) > MAX_PROGRAMS:
                        del caps[0]
                    if fast is not None:
                        self._fast[fast] = caps
                    self._first_shapes.setdefault(_rank_key(leaves, tree), [x.shape for x in dyn])
        return cap.run(dyn)

    def _symbolic_program(self, leaves: list[Any], tree: Any, dyn: list[Any], fast: tuple | None,
                          trace: bool = False, args: tuple = (), kwargs: dict | None = None) -> _Captured | None:
        """A program with symbolic sizes that serves this call: one traced before whose sizes
        match, or (``trace``) a new one when the ``dynamic`` rules make some size symbolic.
        None: trace with every size constant."""
        rank = _rank_key(leaves, tree)
        for cap in list(self._symbolic.get(rank, ())):
            if _matches(cap.pattern, dyn, cap) and all(g() for g in cap.guards):
                if fast is not None:
                    if len(self._fast) > MAX_FAST:
                        self._fast.clear()
                    self._fast[fast] = [cap]
                return cap
        if not trace or rank in self._static_only:
            return None
        pattern = self._pattern(rank, dyn, args, kwargs or {})
        if pattern is None:
            return None
        try:
            cap = self._trace(leaves, tree, dyn, pattern)
        except Exception as e:  # noqa: BLE001 -- automatic mode falls back to constant sizes on any failure
            if self.dynamic is True:  # (automatic: fall back to a trace per shape, as without it)
                self._static_only.add(rank)
                if _debug_level() >= 1:
                    print(f"jit {getattr(self.fun, '__name__', '')}: sizes stay constant: {e}", file=sys.stderr)
                return None
            if not isinstance(e, (SymbolicSizeError, NotImplementedError)):
                raise  # (the function's own error: as a trace with constant sizes would raise it)
            raise JitError(f"jit: {getattr(self.fun, '__name__', 'the function')} cannot be traced with symbolic "
                           f"sizes {_describe(pattern)}: {e}") from e
        caps = self._symbolic.setdefault(rank, [])
        caps.append(cap)
        if len(caps) > MAX_PROGRAMS:
            del caps[0]
        return cap

    def _pattern(self, rank: Any, dyn: list[Any], args: tuple, kwargs: dict) -> list[tuple] | None:
        """Each tensor argument's shape with a :class:`Dim` where a size is symbolic, or None when
        none is (the ``dynamic`` rules; a size of 0 or 1 is never symbolic)."""

        labels: dict[tuple[int, int], str] = {}
        if isinstance(self.dynamic, dict):
            owner = _leaf_owners(args, kwargs, self.static_argnums, self.static_argnames, _param_names(self.fun))
            found: set[tuple[Any, int]] = set()
            for j, names in enumerate(owner):
                who = next((w for w in names if w in self.dynamic), None)
                for ax, label in self.dynamic.get(who, {}).items():
                    nd = len(dyn[j].shape)
                    if -nd <= ax < nd:  # (a tensor of the argument without that axis keeps its sizes)
                        labels[(j, ax % nd)] = label
                        found.add((who, ax))
            for who, axes in self.dynamic.items():
                for ax in axes:
                    if (who, ax) not in found and any(who in names for names in owner):
                        raise JitError(f"jit: dynamic names axis {ax} of argument {who!r}, which no tensor of it has")
        else:
            first = self._first_shapes.get(rank)
            if first is None:
                return None
            groups: dict[tuple[int, int], str] = {}
            for j, (a, b) in enumerate(zip(first, (x.shape for x in dyn))):
                for ax, (u, v) in enumerate(zip(a, b)):
                    if u != v:
                        labels[(j, ax)] = groups.setdefault((u, v), f"s{len(groups)}")
            for cap in self._symbolic.get(rank, ()):  # (sizes symbolic before stay symbolic)
                for j, shape in enumerate(cap.pattern):
                    for ax, d in enumerate(shape):
                        if isinstance(d, Dim) and (j, ax) not in labels and dyn[j].shape[ax] >= 2:
                            labels[(j, ax)] = d.label
        labels = {k: v for k, v in labels.items() if dyn[k[0]].shape[k[1]] >= 2}
        if not labels:
            return None
        slot: dict[str, Dim] = {}
        value: dict[str, int] = {}
        pattern = [list(x.shape) for x in dyn]
        for (j, ax), label in sorted(labels.items()):
            d = slot.get(label)
            if d is None:
                d = slot[label] = Dim(len(slot), label, 2, SYMBOLIC_MAX, hint=dyn[j].shape[ax])
                value[label] = dyn[j].shape[ax]
            elif dyn[j].shape[ax] != value[label]:
                raise JitError(f"jit: the sizes named {label!r} differ in this call "
                               f"({value[label]} and {dyn[j].shape[ax]}); one name is one size")
            pattern[j][ax] = d
        return [tuple(p) for p in pattern]

    def _program(self, key: tuple) -> _Captured | None:
        """A captured program for signature ``key`` whose guards hold, or None."""
        for cap in list(self._cache.get(key, ())):  # (a copy: another thread may add one meanwhile)
            if all(g() for g in cap.guards):
                return cap
        return None

    def _trace(self, leaves: list[Any], tree: Any, dyn: list[Any], pattern: list[tuple] | None = None) -> _Captured:
        from .. import random as rnd
        from ..tensor import Tensor

        self.traces += 1
        holders: dict[int, int] = {}  # id(placeholder Tensor) -> arg index
        traced_leaves = []
        marks: dict[int, int] = {}  # id(jit mark) -> arg index
        for x in leaves:
            if not isinstance(x, Tensor):
                traced_leaves.append(x.value if isinstance(x, _Static) else x)
                continue
            i = len(holders)
            mark = Mark("jit", i)
            marks[id(mark)] = i
            shape = x.shape if pattern is None else pattern[i]
            p = node(Op.VAR, (), mark, x.dtype, shape)
            lm = _leaf_mark(x)
            if lm is not None:  # keep a requires_grad argument a leaf inside the function
                p = node(Op.VAR, (p,), lm, x.dtype, shape)
            t = Tensor._from_node(p, x.device)
            holders[id(t)] = i
            traced_leaves.append(t)
        args, kwargs = tree_unflatten(tree, traced_leaves)
        rec = _Recorder()
        req = _Requests()
        _tracing.requests.append(req)
        rnd._interceptors.append(_rng_interceptor(rec))
        # creation inside the function (``cv.arange(t)`` in a model's forward) follows the
        # arguments: traced under their device when they all share one (part of the signature),
        # so a step jitted for a GPU model makes its constants there wherever it is called from
        on = {x.device for x in leaves if isinstance(x, Tensor)}
        scope = default_device(next(iter(on))) if len(on) == 1 and type(next(iter(on))) is str else nullcontext()
        hints = {d.slot: dyn[j].shape[ax] for j, shape in enumerate(pattern or ()) for ax, d in enumerate(shape)
                 if isinstance(d, Dim)}
        assumed = _assuming_hints(hints) if pattern is not None else nullcontext([])
        try:
            with _recording(rec), scope, assumed as size_guards:
                out = self.fun(*args, **kwargs)
                news = [(t, attr, t.node if attr == "node" else (t.grad.node if t.grad is not None else None))
                        for t, attr, _ in rec.mutated.values()]
                # snapshot the outputs: restoring the updated tensors below must not change them
                out_leaves, out_tree = tree_flatten(out, is_leaf=lambda x: isinstance(x, Tensor))
                out_leaves = [Tensor._from_node(x.node, x.device) if isinstance(x, Tensor) else x for x in out_leaves]
        except SymbolicSizeError:
            raise
        except ValueError as e:
            if "placeholder" in str(e):
                raise JitError(f"jit: {getattr(self.fun, '__name__', 'the function')} needs a concrete tensor value "
                               "while it is traced (item(), bool(), numpy(), printing, or Python control flow on "
                               "a tensor). Compute it outside the jitted function, or make the argument static "
                               "(static_argnums).") from e
            raise
        finally:
            rnd._interceptors.pop()
            _tracing.requests.pop()
            rec.restore()  # the tensors the function updated get their real new values when it runs
        sizes = None
        if pattern is not None:
            sizes = _sizes_of(pattern)
            if _debug_level() >= 1:
                print(f"jit {getattr(self.fun, '__name__', '')}: traced with symbolic sizes {_describe(pattern)}",
                      file=sys.stderr)
        with _assuming_hints(hints) if pattern is not None else nullcontext([]) as more:
            cap = _capture(out_leaves, out_tree, rec, news, holders, marks, dyn, req, tree, sizes)
        if pattern is not None:
            cap.pattern = pattern
            cap.size_guards = tuple((_size_fn(d), op, want) for d, op, want in size_guards + more)
            if cap.size_guards and _debug_level() >= 1:
                print(f"jit {getattr(self.fun, '__name__', '')}: assumes {', '.join(f'{d!r} {op} 0' if want else f'not {d!r} {op} 0' for d, op, want in size_guards + more)}",
                      file=sys.stderr)
        return cap


def _tensor_class() -> type:
    global _TENSOR
    if _TENSOR is None:
        from ..tensor import Tensor

        _TENSOR = Tensor
    return _TENSOR


_TENSOR: type | None = None


class _Static:
    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


def _leaf_key(x: Any) -> Any:
    from ..tensor import Tensor

    if isinstance(x, Tensor):
        return ("T", x.shape, x.dtype, x.device)
    v = x.value if isinstance(x, _Static) else x
    try:
        hash(v)
    except TypeError:
        raise TypeError(f"jit: a non-tensor argument must be hashable (it is part of the signature), "
                        f"got {type(v).__name__}; mark it static only if hashable, or pass a tensor") from None
    return ("S", type(v), v)


def _check_dynamic(dynamic: Any) -> Any:
    """``dynamic`` as jit keeps it (False, True, or {argument: {axis: label}}); TypeError if malformed."""
    if dynamic is None or dynamic is False:
        return False
    if dynamic is True:
        return True
    if not isinstance(dynamic, dict):
        raise TypeError(f"jit: dynamic must be False, True or a dict {{argument: {{axis: name}}}}, got {dynamic!r}")
    out = {}
    for who, axes in dynamic.items():
        if not isinstance(who, (int, str)) or isinstance(who, bool):
            raise TypeError(f"jit: dynamic names an argument by position (int) or keyword (str), got {who!r}")
        if not isinstance(axes, dict) or not all(isinstance(a, int) and not isinstance(a, bool) and
                                                  isinstance(n, str) and n for a, n in axes.items()):
            raise TypeError(f"jit: dynamic[{who!r}] must map axes (int) to size names (str), got {axes!r}")
        out[who] = dict(axes)
    return out


def _rank_key(leaves: list[Any], tree: Any) -> tuple:
    """The signature without the tensors' sizes: structure, each tensor's rank, dtype and device,
    every other leaf's value."""
    from ..tensor import Tensor

    return (tree, tuple(("T", len(x.shape), x.dtype, x.device) if isinstance(x, Tensor) else _leaf_key(x)
                        for x in leaves), _policy())


def _matches(pattern: list[tuple], dyn: list[Any], cap: _Captured | None = None) -> bool:
    """Whether the tensors' shapes fit ``pattern`` (constants equal, each Dim's sizes in its range
    and equal wherever it appears) and give the comparisons ``cap`` assumed the same results."""
    seen: dict[Dim, int] = {}
    for want, x in zip(pattern, dyn):
        got = x.shape
        if len(got) != len(want):
            return False
        for w, g in zip(want, got):
            if type(w) is int:
                if w != g:
                    return False
            elif not w.vmin <= g <= w.vmax or seen.setdefault(w, g) != g:
                return False
    if cap is not None and cap.size_guards:
        values = [dyn[a].shape[ax] for a, ax in cap.sizes]
        return all(_compare(fn(values), op) == want for fn, op, want in cap.size_guards)
    return True


def _param_names(fun: Callable) -> list[str]:
    """The names of ``fun``'s positional parameters ([] when it has no signature to read)."""
    import inspect

    try:
        return [p.name for p in inspect.signature(fun).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []


def _leaf_owners(args: tuple, kwargs: dict, static_argnums: set, static_argnames: set,
                 names: list[str] = ()) -> list[tuple]:
    """For each tensor leaf of the call (in flattening order), the argument it belongs to: its
    position and name (or its keyword)."""
    from ..tensor import Tensor

    is_leaf = lambda x: isinstance(x, (Tensor, np.ndarray))  # noqa: E731
    owner: list[tuple] = []
    for who, value in [*enumerate(args), *sorted(kwargs.items())]:
        if who in static_argnums or who in static_argnames:
            continue
        ids = (who, names[who]) if type(who) is int and who < len(names) else (who,)
        owner += [ids] * sum(1 for x in tree_flatten(value, is_leaf=is_leaf)[0] if is_leaf(x))
    return owner


def _sizes_of(pattern: list[tuple]) -> tuple[tuple[int, int], ...]:
    """Where each Dim slot's value is read: (tensor argument, axis), in slot order."""
    where: dict[int, tuple[int, int]] = {}
    for j, shape in enumerate(pattern):
        for ax, d in enumerate(shape):
            if isinstance(d, Dim):
                where.setdefault(d.slot, (j, ax))
    return tuple(where[i] for i in range(len(where)))


def _describe(pattern: list[tuple]) -> str:
    """The symbolic sizes of a pattern as ``arg0[0]=batch, arg1[1]=seq``."""
    return ", ".join(f"arg{j}[{ax}]={d!r}" for j, shape in enumerate(pattern)
                     for ax, d in enumerate(shape) if isinstance(d, Dim))


def _leaf_mark(t: Any) -> Mark | None:
    """The mark of ``t`` if it is a ``requires_grad`` leaf itself."""
    n = t.node
    if n.op is Op.VAR and n.src and n.arg.kind == "leaf" and callable(n.arg.data) and n.arg.data() is t:
        return n.arg
    return None


def _under_transform(t: Any) -> bool:
    """Whether ``t`` is a value traced by an enclosing grad/jvp/vmap/jit (not just a leaf)."""
    n = t.node
    if not n.traced:
        return False
    return any(m.op is Op.VAR and m.arg.kind != "leaf" for m in toposort([n], stop=lambda m: m.buffer is not None))


def _rng_interceptor(rec: _Recorder) -> Callable:
    from .. import random as rnd
    from ..tensor import Tensor

    def draw(shape: tuple[int, ...], device: str, outer: Callable) -> Any:
        n = 1
        for s in shape:
            n *= s
        p = node(Op.VAR, (), Mark("jit-rng", len(rec.draws)), rnd.PARAMS_DTYPE, (rnd.PARAMS_SIZE,))
        rec.draws.append((p, n))
        return rnd.bits_from_params(Tensor._from_node(p, device), shape, device)

    return draw


def _capture(out_leaves: list[Any], out_tree: Any, rec: _Recorder, writes_src: list[tuple[Any, str, Node | None]],
             holders: dict[int, int], marks: dict[int, int], dyn: list[Any], req: _Requests,
             arg_tree: Any = None, sizes: tuple[tuple[int, int], ...] | None = None) -> _Captured:
    """Schedule the traced graph once and resolve every kernel input to a slot.

    ``writes_src`` lists the updated tensors with their new values (the roots written back)."""
    from ..engine.realize import compile_schedule
    from ..engine.schedule import create_schedule
    from ..tensor import Tensor

    roots = [x.node for x in out_leaves if isinstance(x, Tensor)] + [n for _, _, n in writes_src if n is not None]
    root_devices = [x.device for x in out_leaves if isinstance(x, Tensor)] + \
        [t.device for t, _, n in writes_src if n is not None]
    # where values without a device of their own (draws, scalars, state) are placed
    device = root_devices[0] if root_devices else dyn[0].device if dyn else canonical_device(None)
    if any(type(d) is tuple for d in root_devices) or any(type(x.device) is tuple for x in dyn):
        raise JitError("jit does not capture sharded tensors yet; call the function without jit")

    slots: list[_Slot] = []
    slot_of: dict[int, int] = {}
    keep: list[Node] = []  # nodes whose .buffer is set only while scheduling

    def add(n: Node, s: _Slot) -> int:
        slot_of[id(n)] = len(slots)
        slots.append(s)
        return slot_of[id(n)]

    # state read by the function: the value a mutated attribute held before the first update
    # (an argument's old value is the argument itself, handled as one)
    old_state = {id(old): (t, attr) for t, attr, old in rec.mutated.values() if old is not None and id(t) not in holders}
    guards: list[Callable[[], bool]] = list(req.guards)
    scalar_reads = {id(p): read for p, read in req.scalars}
    for t, attr, old in rec.mutated.values():
        if id(t) not in holders:  # an argument's shape is part of the signature already
            guards.append(_state_guard(t, attr, old))
    mutated = {id(t) for t, _, _ in rec.mutated.values()}
    for t in _static_tensors(arg_tree):
        if id(t) not in mutated:  # (state the program updates is read at each call)
            guards.append(_value_guard(t))
    draw_sizes = [n for _, n in rec.draws]
    draw_slot = {id(p): i for i, (p, _) in enumerate(rec.draws)}
    graph = toposort(roots, stop=lambda n: n.buffer is not None or id(n) in old_state)
    written = {id(n) for _, _, n in writes_src if n is not None}
    try:
        for n in graph:
            if id(n) in old_state:
                t, attr = old_state[id(n)]
                if n.buffer is None:  # its value at trace time, so that scheduling stops here
                    n.buffer = _buffer_of(Tensor._from_node(n, device))
                add(n, _Slot("state", (weakref.ref(t), attr), n.dtype, n.shape, device, fallback=n.buffer))
            elif n.op is Op.VAR and not n.src:
                if n.arg.kind == "jit" and id(n.arg) in marks:
                    i = marks[id(n.arg)]
                    add(n, _Slot("arg", i, n.dtype, n.shape, dyn[i].device))
                    keep.append(n)
                    n.buffer = _buffer_of(dyn[i])
                elif id(n) in draw_slot:
                    add(n, _Slot("rng", draw_slot[id(n)], n.dtype, n.shape, device))
                    keep.append(n)
                    n.buffer = Buffer(device, n.dtype, n.numel)
                elif id(n) in scalar_reads:
                    read = scalar_reads[id(n)]
                    add(n, _Slot("scalar", read, n.dtype, n.shape, device))
                    keep.append(n)
                    n.buffer = _scalar_buffer(read(), n.dtype, device)
                else:
                    raise JitError(f"jit: the function's result depends on a placeholder of an enclosing "
                                   f"{n.arg.kind} trace; call jit inside the transform instead")
            elif n.op is Op.VAR and n.arg.kind == "leaf" and n.src and id(n) not in written and \
                    not _has_placeholder(n.src[0]):
                t = n.arg.data() if callable(n.arg.data) else None
                if n.buffer is None:  # a captured parameter: its value at each call
                    inner = n.src[0]
                    from ..engine.realize import holder, realize

                    h = holder(inner)
                    realize([h], device)
                    n.buffer = h.buffer
                add(n, _Slot("leaf", weakref.ref(t) if t is not None else (lambda: None), n.dtype, n.shape, device,
                             fallback=n.buffer))
                if t is not None:
                    guards.append(_shape_guard(t, n))
        if sizes:  # the symbolic sizes' values: an input of the kernels that use them, read per call
            sizes_node = node(Op.VAR, (), Mark("jit-dims"), _INT64, (len(sizes),))
            keep.append(sizes_node)
            sizes_node.buffer = _sizes_buffer(sizes, dyn, device)
            add(sizes_node, _Slot("dims", None, _INT64, (len(sizes),), device))
            with _symbolic_sizes(sizes_node):
                schedule = create_schedule(roots, device, root_devices)
        else:
            schedule = create_schedule(roots, device, root_devices)
        compile_schedule(schedule)
        launches: list[_Launch] = []
        for sk in schedule:
            ins = [_input_slot(m, slot_of, slots, None if sk.output.op is Op.COPY else sk.device) for m in sk.inputs]
            outs = [add(n, _Slot("kernel", len(launches), n.dtype, n.shape, sk.device)) for n in sk.outputs]
            launches.append(_Launch(sk, outs, ins))
            sk.program  # compile now, not during the first replay  # noqa: B018
        outputs: list[tuple[str, Any]] = []
        for x in out_leaves:
            if isinstance(x, Tensor):
                outputs.append(("slot", _root_slot(x.node, slot_of, slots, device)))
            elif isinstance(x, Sym) and not isinstance(x, Num):  # a symbolic size returned: this call's value
                outputs.append(("size", _size_fn(x)))
            else:
                outputs.append(("static", x.value if isinstance(x, Num) else x))
        writes = []
        for t, attr, new in writes_src:
            ref = holders[id(t)] if id(t) in holders else weakref.ref(t)
            writes.append((ref, attr, None if new is None else _root_slot(new, slot_of, slots, device)))
    finally:
        for n in keep:
            if n.op is Op.VAR and not n.src:
                n.buffer = None
    # free each kernel output after its last reader, unless it is returned or written back
    pinned = {i for k, i in outputs if k == "slot"} | {j for _, _, j in writes}
    last: dict[int, int] = {}
    for li, ln in enumerate(launches):
        for j in ln.ins:
            last[j] = li
    for j, li in last.items():
        if slots[j].kind == "kernel" and j not in pinned:
            launches[li].free_after.append(j)
    return _Captured(slots, launches, outputs, out_tree, writes, guards, draw_sizes, len(launches), sizes=sizes or ())


def _has_placeholder(n: Node) -> bool:
    """Whether a value-less VAR (an argument or draw of this trace) lies below ``n``."""
    return n.traced and any(m.op is Op.VAR and not m.src for m in toposort([n], stop=lambda m: m.buffer is not None))


def _input_slot(n: Node, slot_of: dict[Any, int], slots: list[_Slot], device: str | None = None) -> int:
    """The slot of kernel input ``n``; ``device``: the kernel's, when the input must be there."""
    if id(n) in slot_of:
        return slot_of[id(n)]
    if n.buffer is None:
        raise JitError(f"jit: internal error: kernel input {n} has no value")
    b = n.buffer
    if device is not None and type(b) is Buffer and b.device != device:
        # a graph of constants realized on another device first (one node serves every device:
        # see engine/realize.py _moved): this kernel's own copy of the value, made once
        key = (id(n), device)
        if key not in slot_of:
            slot_of[key] = len(slots)
            slots.append(_Slot("const", _moved(b, device), n.dtype, n.shape, device))
        return slot_of[key]
    slot_of[id(n)] = len(slots)
    slots.append(_Slot("const", b, n.dtype, n.shape, b.device))
    return slot_of[id(n)]


def _root_slot(n: Node, slot_of: dict[int, int], slots: list[_Slot], device: str) -> int:
    while id(n) not in slot_of and n.op in (Op.VAR, Op.DETACH) and n.src and n.buffer is None:
        n = n.src[0]  # identity wrappers around a value that has a slot
    if id(n) in slot_of:
        return slot_of[id(n)]
    if n.numel == 0:
        slot_of[id(n)] = len(slots)
        slots.append(_Slot("empty", None, n.dtype, n.shape, device))
        return slot_of[id(n)]
    return _input_slot(n, slot_of, slots)


def _state_guard(t: Any, attr: str, old: Node | None) -> Callable[[], bool]:
    ref = weakref.ref(t)
    shape = None if old is None else (old.shape, old.dtype)

    def check() -> bool:
        x = ref()
        if x is None:  # gone (a local of the function): nothing to guard
            return True
        cur = x.node if attr == "node" else (x.grad.node if x.grad is not None else None)
        return (None if cur is None else (cur.shape, cur.dtype)) == shape

    return check


def _static_tensors(tree: Any) -> list[Any]:
    """The static tensors of the modules in a flattened argument tree (see
    :func:`corvid.nn.pytree.static_tensors`): their values are constants of a trace."""
    from ..nn.pytree import _ModuleDef, static_tensors

    modules, stack = [], [tree]
    while stack:
        td = stack.pop()
        if isinstance(getattr(td, "aux", None), _ModuleDef):
            modules.extend(td.aux.modules)
        stack.extend(getattr(td, "children", ()))
    return static_tensors(modules)


def _value_guard(t: Any) -> Callable[[], bool]:
    """True while ``t`` holds the value it held at the trace (``load_state_dict`` rebinds a
    module's tensors to new values under the same identity, which the signature cannot see)."""
    ref, node_ref = weakref.ref(t), weakref.ref(t.node)
    return lambda: (x := ref()) is None or x.node is node_ref()


def _shape_guard(t: Any, n: Node) -> Callable[[], bool]:
    ref, sig = weakref.ref(t), (n.shape, n.dtype)
    return lambda: (x := ref()) is None or (x.shape, x.dtype) == sig

"""Host kernels: a graph node computed by a Python/numpy function instead of generated code.

Some operations are best left to a well-kept library rather than written again as kernels: the
dense linear algebra of LAPACK (solve, QR, SVD, eigh …) that ``numpy.linalg`` wraps, for
instance. ``host_call(op, *inputs)`` puts such a function in the lazy graph as one ``CUSTOM`` node:

* the node's value is the function's outputs, flattened and concatenated (one buffer; each output
  is a free ``shrink``/``reshape`` view of it), so a multi-output function runs once;
* the scheduler always gives it a kernel of its own, and stores its inputs contiguously (an input
  under markers, such as a parameter under ``grad`` or ``jit``, is read from the value under them;
  a view of a literal is stored as a copy of its own, not on the shared literal node);
* the kernel's program copies the inputs to numpy arrays, calls the function, and copies the
  packed result back: it works on any device, and ``jit`` replays it like any other kernel;
* ``vmap`` batches it when the op says its function accepts leading batch dimensions (numpy.linalg
  functions do); autodiff goes through ``custom_vjp``/``custom_jvp`` wrappers written by the op's
  module (a bare ``CUSTOM`` node has no derivative rule and says so).

>>> import numpy as np, corvid as cv
>>> op = HostOp("example.cumsum", lambda a: np.cumsum(a, axis=-1), batched=True)
>>> (y,) = host_call(op, cv.Tensor([1.0, 2.0, 3.0]), outputs=[((3,), cv.float32)])
>>> y.tolist()
[1.0, 3.0, 6.0]
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from ..dtype import DType
from ..graph.node import Node, Op, node
from ..graph.symbolic import hint, is_symbolic


class HostOp:
    """A named host function. Equal names (and ``params``) mean the same computation, which is
    what the schedule and kernel caches key on. ``fn(*arrays, **dict(params))`` returns one array
    or a tuple of them; ``batched`` says it accepts leading batch dimensions on every input.
    ``template`` names a device kernel template computing the same outputs (a device whose
    renderer has ``render_<template>`` runs that instead of ``fn``: see :class:`TemplateKernel`).
    ``native(device, params, in_specs)`` may return a program of the device's own that computes
    the outputs on its buffers (``in_specs``: each input's shape, symbolic sizes included, and
    dtype; a program over symbolic sizes says ``takes_sizes`` and is called with each call's
    sizes), or None where it has none and ``fn`` runs. ``flops(params, in_specs)`` may count the
    arithmetic (for ``CORVID_DEBUG=2``'s rates)."""

    __slots__ = ("name", "fn", "params", "batched", "template", "native", "flops", "_hash")

    def __init__(self, name: str, fn: Callable[..., Any], params: tuple = (), batched: bool = False,
                 template: str | None = None, native: Callable[..., Any] | None = None,
                 flops: Callable[..., int] | None = None):
        self.name, self.fn, self.params, self.batched, self.template = name, fn, tuple(params), batched, template
        self.native, self.flops = native, flops
        self._hash = hash((name, self.params))  # (the graph's node key hashes it at every call)

    def _key(self) -> tuple:
        return (self.name, self.params)

    def __eq__(self, other: object) -> bool:
        return other is self or isinstance(other, HostOp) and self._key() == other._key()

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"HostOp({self.name}{', ' + repr(self.params) if self.params else ''})"


class HostArg(tuple):
    """The ``arg`` of a CUSTOM node: ``(op, output shapes)``."""

    @property
    def op(self) -> HostOp:
        return self[0]

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        return self[1]


_TENSOR: tuple | None = None


def _tensor() -> tuple:
    """(corvid.tensor.Tensor, realize.holder), imported once (this module loads before them; an
    import in ``host_call`` cost about a microsecond per call)."""
    global _TENSOR
    from ..tensor import Tensor
    from .realize import holder

    _TENSOR = (Tensor, holder)
    return _TENSOR


def host_call(op: HostOp, *inputs: Any, outputs: Sequence[tuple[tuple[int, ...], DType]]) -> list[Any]:
    """Tensors for the outputs of ``op`` applied to ``inputs`` (all outputs share one dtype)."""
    Tensor, holder = _TENSOR or _tensor()
    ins = [x if isinstance(x, Tensor) else Tensor(x) for x in inputs]
    # (an input is stored: a view of a literal, such as the cotangent of a sum, is stored as a copy
    # of its own, not on the shared literal node, which later kernels would then read from memory;
    # a reshape of a stored value is read from that value's buffer: engine/schedule.py, _host_input)
    ins = [x._new(h) if (h := holder(x.node)) is not x.node else x for x in ins]
    if not ins:
        raise ValueError(f"{op.name}: a host call needs at least one input tensor")
    device = ins[0].device
    if any(x.device != device for x in ins):
        raise ValueError(f"{op.name}: inputs on different devices: {sorted({x.device for x in ins})}")
    dtypes = {d for _, d in outputs}
    if len(dtypes) != 1:
        raise ValueError(f"{op.name}: host call outputs must share one dtype, got {sorted(d.name for d in dtypes)}")
    dtype = dtypes.pop()
    # (a symbolic size stays one: only an op with a native program runs over them)
    shapes = tuple(tuple(s if is_symbolic(s) else int(s) for s in shape) for shape, _ in outputs)
    total = sum(math.prod(s) for s in shapes)
    packed = Tensor._from_node(node(Op.CUSTOM, tuple(x.node for x in ins), HostArg((op, shapes)), dtype, (total,)),
                               device)
    return unpack(packed, shapes)


def unpack(packed: Any, shapes: Sequence[tuple[int, ...]]) -> list[Any]:
    """The outputs of a packed host result (views: no copy)."""
    if len(shapes) == 1:  # (the whole packed value: no slice; the reshape's node built directly)
        shape = tuple(shapes[0])
        if shape == packed.shape:
            return [packed]
        return [packed._new(node(Op.RESHAPE, (packed.node,), shape, packed.dtype, shape))]
    out, start = [], 0
    for s in shapes:
        n = math.prod(s)
        out.append(packed[start:start + n].reshape(s))
        start += n
    return out


class HostKernel:
    """What the schedule shows for a host kernel (no loops, no generated source)."""

    def __init__(self, name: str, in_specs: list[tuple[tuple[int, ...], DType]], out_size: int, out_dtype: DType,
                 flops: Any = 0):
        self.name, self.in_specs, self.out_size, self.out_dtype = name, in_specs, out_size, out_dtype
        self.flops = flops
        self.loops: list = []
        self.vector_width = 1

    def estimates(self) -> tuple[int, int]:
        """(flops, bytes moved); sizes symbolic at their hints (the values traced with)."""
        nbytes = sum(math.prod(s) * d.itemsize for s, d in self.in_specs) + self.out_size * self.out_dtype.itemsize
        return hint(self.flops), hint(nbytes)


class TemplateKernel:
    """What the schedule shows for a host op that a device runs as a kernel template of its
    renderer (``render_<template>``: one source for the op and its input shapes): the source is
    launched as ``groups`` work-groups of ``threads`` work items, over the packed output then the
    inputs, as every kernel is."""

    def __init__(self, name: str, in_specs: list[tuple[tuple[int, ...], DType]], out_size: int, out_dtype: DType,
                 groups: int, threads: int, flops: int = 0):
        self.name, self.in_specs, self.out_size, self.out_dtype = name, in_specs, out_size, out_dtype
        self.groups, self.threads, self.flops = groups, threads, flops
        self.loops: list = []
        self.vector_width = 1

    def estimates(self) -> tuple[int, int]:
        nbytes = sum(math.prod(s) * d.itemsize for s, d in self.in_specs) + self.out_size * self.out_dtype.itemsize
        return self.flops, nbytes


class HostProgram:
    """Runs a host op on device buffers: copy in to numpy, call, pack, copy out."""

    def __init__(self, arg: HostArg, kernel: HostKernel, device: str):
        self.arg, self.kernel, self.device = arg, kernel, device

    def __call__(self, handles: list[Any]) -> None:
        from ..runtime.device import get_device

        dev = get_device(self.device)
        if self.device == "NULL":
            return
        alloc = dev.allocator
        arrays = []
        for h, (shape, dt) in zip(handles[1:], self.kernel.in_specs):
            nbytes = math.prod(shape) * dt.itemsize
            raw = alloc.copyout(h, nbytes) if nbytes else np.zeros(0, np.uint8)
            arrays.append(raw.view(dt.np).reshape(shape))
        op = self.arg.op
        res = op.fn(*arrays, **dict(op.params))
        outs = res if isinstance(res, tuple) else (res,)
        if len(outs) != len(self.arg.shapes):
            raise RuntimeError(f"{op.name}: returned {len(outs)} outputs, declared {len(self.arg.shapes)}")
        parts = []
        for o, shape in zip(outs, self.arg.shapes):
            a = np.asarray(o)
            if a.shape != shape:
                raise RuntimeError(f"{op.name}: returned shape {a.shape}, declared {shape}")
            parts.append(a.astype(self.kernel.out_dtype.np, copy=False).reshape(-1))
        packed = np.ascontiguousarray(np.concatenate(parts) if parts else np.zeros(0, self.kernel.out_dtype.np))
        if packed.size:
            alloc.copyin(handles[0], packed.view(np.uint8).reshape(-1))


def batch_host(n: Node, srcs: list[tuple[Node, int | None]], size: int) -> Node:
    """vmap's rule for a CUSTOM node: the same op over inputs with a leading batch axis; the packed
    result is regrouped per example so the batch is axis 0 of a (size, total) value."""
    from ..runtime.device import get_default_device
    from ..tensor import Tensor

    arg: HostArg = n.arg
    if not arg.op.batched:
        raise NotImplementedError(f"vmap: the host op {arg.op.name} does not accept batch dimensions")
    ins = []
    device = get_default_device()  # nodes carry no device and only nodes come back: any label works
    for s, b in srcs:
        t = Tensor._from_node(s, device)
        if b is None:
            t = t.reshape((1,) + t.shape).expand((size,) + t.shape)
        ins.append(t)
    outs = host_call(arg.op, *ins, outputs=[((size,) + s, n.dtype) for s in arg.shapes])
    flat = [o.reshape(size, -1) for o in outs]
    from ..ops.movement import cat

    res = flat[0] if len(flat) == 1 else cat(flat, axis=1)
    return res.node

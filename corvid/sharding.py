"""Sharded tensors: one logical array whose data lives as one part per device.

``x.shard(devices, axis=k)`` splits ``x`` along axis ``k`` over ``devices`` (``axis=None``
replicates it on every device). The result is an ordinary :class:`~corvid.Tensor` whose
``device`` is the tuple of devices. Every op on it builds the usual lazy graph over *logical*
(whole-array) shapes, so autograd, optimizers and ``nn`` work unchanged and pay nothing when no
tensor is sharded. Only when a value is computed does :func:`partition_schedule` turn the logical
graph into one graph per device, giving each logical value a *layout*: split along one axis, or
replicated.

* Sources: a sharded buffer keeps its parts; constants are replicated (free: they are computed
  where they are used).
* Elementwise ops take the layout of their first split operand. A replicated operand is sliced
  locally (no communication); an operand split differently is gathered first.
* A reduce over other axes stays split. Over the split axis, each device reduces its own part,
  then an *all-reduce* makes the result replicated: every device combines the partials of all
  devices in device order, so the replicas are bitwise equal.
* Movement ops keep the split when they leave the split axis whole (a reshape that keeps, merges
  or evenly splits it, permute, expand, pad/flip of other axes, a shrink that leaves every part
  non-empty) and gather otherwise.
* So ``matmul`` (a broadcast multiply and a sum) of rows split by a replicated matrix gives rows
  split, and with the contraction axis split on both sides, partial products and an all-reduce.
* Indirect and host ops (gather, scatter, linalg) run replicated on every device.
* Communication is COPY steps between devices (:mod:`corvid.engine.copy`), scheduled like kernels.

>>> import corvid as cv
>>> w = cv.Tensor([[1.0], [2.0]]).shard(["CPU:0", "CPU:1"])   # replicated
>>> x = cv.arange(6.0).reshape(3, 2).shard(["CPU:0", "CPU:1"], axis=0)
>>> (x @ w).tolist()
[[2.0], [8.0], [14.0]]
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import numpy as np

from .errors import ShapeError
from .dtype import DType
from .engine.realize import holder
from .engine.schedule import ScheduledKernel, _place, create_schedule
from .graph.node import ELEMENTWISE, Node, Op, node, toposort
from .runtime.device import Buffer, canonical_device


class Layout(NamedTuple):
    """How a value is laid out over a device set: split along ``axis``, or replicated (None)."""

    devices: tuple[str, ...]
    axis: int | None


def split_sizes(n: int, count: int) -> tuple[int, ...]:
    """Part sizes of ``n`` elements over ``count`` devices: the first ``n % count`` one larger."""
    base, extra = divmod(n, count)
    return tuple(base + (i < extra) for i in range(count))


def shard(t: Any, devices: Sequence[str], axis: int | None = None) -> Any:
    """``t`` split along ``axis`` over ``devices`` (replicated when ``axis`` is None); see
    :meth:`corvid.Tensor.shard`."""
    from .tensor import copy_to

    if isinstance(devices, str) or not isinstance(devices, (list, tuple)):
        raise TypeError(f"shard: devices must be a list of device names, got {devices!r}")
    devs = canonical_device(list(devices))
    if axis is not None:
        if not isinstance(axis, int) or not -t.ndim <= axis < t.ndim:
            raise ShapeError(f"shard: axis {axis!r} is out of range for a tensor of shape {t.shape}")
        axis %= t.ndim
        if t.shape[axis] < len(devs):
            raise ShapeError(f"shard: axis {axis} has {t.shape[axis]} elements, fewer than the {len(devs)} "
                             "devices (every device needs at least one); replicate with axis=None instead")
    if t.device == devs and axis is None and _known_replicated(t):
        return t
    return copy_to(t, Layout(devs, axis))


def _known_replicated(t: Any) -> bool:
    b = t.node.buffer
    return isinstance(b, MultiBuffer) and b.axis is None


def layout(t: Any) -> Layout | None:
    """The layout of a computed sharded tensor (None for a single-device tensor); computes it."""
    if type(t.device) is not tuple:
        return None
    t.realize()
    b = t.node.buffer
    return Layout(b.device, b.axis)


class MultiBuffer:
    """The value of a sharded tensor: one :class:`Buffer` per device, split along ``axis`` with
    ``sizes`` elements each along it, or replicated (``axis`` None). Quacks like a Buffer for what
    tensors read (``device``, ``dtype``, ``size``, ``numpy()``); kernels only ever see the parts."""

    __slots__ = ("parts", "axis", "sizes", "shape", "dtype", "__weakref__")

    def __init__(self, parts: list[Buffer], axis: int | None, sizes: tuple[int, ...], shape: tuple[int, ...],
                 dtype: DType):
        self.parts, self.axis, self.sizes, self.shape, self.dtype = parts, axis, sizes, shape, dtype

    @property
    def device(self) -> tuple[str, ...]:
        return tuple(p.device for p in self.parts)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def part_shape(self, i: int) -> tuple[int, ...]:
        return self.shape if self.axis is None else _with(self.shape, self.axis, self.sizes[i])

    def numpy(self) -> np.ndarray:
        """The whole value as a new 1-d numpy array (the parts gathered through host memory)."""
        if self.axis is None:
            return self.parts[0].numpy()
        arrays = [p.numpy().reshape(self.part_shape(i)) for i, p in enumerate(self.parts)]
        return np.concatenate(arrays, axis=self.axis).reshape(-1)

    def __repr__(self) -> str:
        how = "replicated" if self.axis is None else f"split on axis {self.axis} as {list(self.sizes)}"
        return f"<MultiBuffer {list(self.device)} {self.dtype.name}{list(self.shape)} {how}>"


def replicated_buffer(parts: list[Buffer], shape: tuple[int, ...]) -> MultiBuffer:
    """A replicated value from one buffer per device."""
    return MultiBuffer(parts, None, (), shape, parts[0].dtype)


# --- partitioning ------------------------------------------------------------------------------------


class _Split(NamedTuple):
    """A logical value's per-device form: ``parts[i]`` is the node device ``devices[i]`` computes."""

    devices: tuple[str, ...]
    axis: int | None
    parts: tuple[Node, ...]

    @property
    def sizes(self) -> tuple[int, ...]:
        return () if self.axis is None else tuple(p.shape[self.axis] for p in self.parts)


class ShardedSchedule(list):
    """The per-device kernels and copies of a partitioned graph; ``assemble()`` (after they ran)
    gives each logical root its value: a :class:`MultiBuffer`, or a gathered buffer."""

    def __init__(self, steps: list[ScheduledKernel], roots: list[Node], values: list[Node | _Split]):
        super().__init__(steps)
        self._roots, self._values = roots, values

    def assemble(self) -> None:
        for r, v in zip(self._roots, self._values):
            if isinstance(v, Node):
                r.buffer = v.buffer
            elif v.axis is None:
                r.buffer = replicated_buffer([p.buffer for p in v.parts], r.shape)
            else:
                r.buffer = MultiBuffer([p.buffer for p in v.parts], v.axis, v.sizes, r.shape, r.dtype)


def partition_schedule(roots: list[Node], devices: list[Any]) -> ShardedSchedule:
    """The schedule computing ``roots`` (each on its device or device set) from per-device graphs:
    every logical value on a device set becomes one node per device (see the module docstring)."""
    every = toposort(roots, stop=lambda n: n.buffer is not None)
    placed = _place(roots, tuple(devices), every)
    done: dict[int, Node | _Split] = {}
    for n in every:
        where = placed[id(n)]
        done[id(n)] = _per_device(n, where, done) if type(where) is tuple else _on_one(n, where, done)
    steps_roots: list[Node] = []
    steps_devices: list[str] = []
    values: list[Node | _Split] = []
    for r in roots:
        v = done[id(r)]
        if isinstance(v, _Split):  # one root per device, each a node of its own
            parts = []
            for d, p in zip(v.devices, v.parts):
                h = holder(p)
                if any(h is q for q in steps_roots):  # (a constant: the same node on every device)
                    h = _copy(h, steps_devices[next(i for i, q in enumerate(steps_roots) if q is h)], d)
                steps_roots.append(h)
                steps_devices.append(d)
                parts.append(h)
            v = _Split(v.devices, v.axis, tuple(parts))
        else:
            v = holder(v)
            steps_roots.append(v)
            steps_devices.append(placed[id(r)])
        values.append(v)
    for h, d in zip(steps_roots, steps_devices):  # empty parts need no kernel
        if h.buffer is None and h.numel == 0:
            h.buffer = Buffer(d, h.dtype, 0)
    return ShardedSchedule(create_schedule(steps_roots, None, steps_devices), list(roots), values)


def _on_one(n: Node, device: str, done: dict[int, Node | _Split]) -> Node:
    """A node placed on one device: itself, over its sources' per-device forms."""
    if isinstance(n.buffer, MultiBuffer):  # (a constant graph computed sharded earlier, see Tensor.realize)
        return _whole_on(_from_buffer(n, n.buffer.device), n.shape, device)
    if n.buffer is not None:
        return n
    if n.op is Op.COPY and type(n.arg[0]) is tuple:  # a gather onto this device
        return _whole_on(done[id(n.src[0])], n.shape, device)
    srcs = tuple(done[id(s)] for s in n.src)
    if all(a is b for a, b in zip(srcs, n.src)):
        return n
    return node(n.op, srcs, n.arg, n.dtype, n.shape)  # type: ignore[arg-type]


def _per_device(n: Node, devs: tuple[str, ...], done: dict[int, Node | _Split]) -> _Split:
    """The per-device form of a node placed on the device set ``devs``."""
    if n.buffer is not None:
        return _from_buffer(n, devs)
    op = n.op
    if not n.src:  # CONST, IOTA: the same node everywhere
        return _Split(devs, None, (n,) * len(devs))
    if op in (Op.VAR, Op.DETACH):  # marks matter to transforms only, which ran already
        return done[id(n.src[0])]  # type: ignore[return-value]
    if op is Op.COPY:
        return _copy_in(n, done[id(n.src[0])], devs)
    srcs: list[_Split] = [done[id(s)] for s in n.src]  # type: ignore[misc]
    if op in ELEMENTWISE or op is Op.CONTIGUOUS:
        return _elementwise(n, srcs)
    if op is Op.REDUCE:
        return _reduce(n, srcs[0])
    rule = _MOVEMENT.get(op)
    if rule is not None:
        v = rule(n, srcs[0])
        if v is not None:
            return v
        src = _replicated(srcs[0], n.src[0].shape)
        return _Split(devs, None, tuple(node(op, (p,), n.arg, n.dtype, n.shape) for p in src.parts))
    # GATHER, SCATTER, CUSTOM: every device computes the whole result
    reps = [_replicated(v, s.shape) for v, s in zip(srcs, n.src)]
    return _Split(devs, None, tuple(node(op, tuple(v.parts[i] for v in reps), n.arg, n.dtype, n.shape)
                                    for i in range(len(devs))))


def _from_buffer(n: Node, devs: tuple[str, ...]) -> _Split:
    b = n.buffer
    if isinstance(b, MultiBuffer):
        v = _Split(b.device, b.axis, tuple(node(Op.BUFFER, (), p, p.dtype, b.part_shape(i))
                                            for i, p in enumerate(b.parts)))
        return v if b.device == devs else _moved(v, n.shape, Layout(devs, b.axis))
    # one buffer: a graph of constants realized on one device earlier (see Tensor.realize)
    return _Split(devs, None, tuple(_copy(n, b.device, d) for d in devs))


def _copy_in(n: Node, src: Node | _Split, devs: tuple[str, ...]) -> _Split:
    """A COPY onto a device set: from one device (split there, then copied) or from another layout."""
    target: Layout = n.arg[1]
    if isinstance(src, _Split):
        return _moved(src, n.shape, target)
    source = n.arg[0]
    if target.axis is None:
        return _Split(devs, None, tuple(_copy(src, source, d) for d in devs))
    parts, start = [], 0
    for d, size in zip(devs, split_sizes(n.shape[target.axis], len(devs))):
        parts.append(_copy(_shrink(src, target.axis, start, start + size), source, d))
        start += size
    return _Split(devs, target.axis, tuple(parts))


def _moved(v: _Split, shape: tuple[int, ...], target: Layout) -> _Split:
    """``v`` in the layout ``target`` (its devices may differ from ``v``'s)."""
    if target.devices == v.devices:
        sizes = () if target.axis is None else split_sizes(shape[target.axis], len(v.devices))
        return _relayout(v, shape, target.axis, sizes)
    wholes = tuple(_whole_on(v, shape, d) for d in target.devices)
    rep = _Split(target.devices, None, wholes)
    if target.axis is None:
        return rep
    return _relayout(rep, shape, target.axis, split_sizes(shape[target.axis], len(target.devices)))


def _elementwise(n: Node, srcs: list[_Split]) -> _Split:
    lead = next((v for v in srcs if v.axis is not None), None)
    devs = srcs[0].devices
    if lead is None:
        return _Split(devs, None, tuple(node(n.op, tuple(v.parts[i] for v in srcs), n.arg, n.dtype, n.shape)
                                        for i in range(len(devs))))
    axis, sizes = lead.axis, lead.sizes
    srcs = [_relayout(v, s.shape, axis, sizes) for v, s in zip(srcs, n.src)]
    return _Split(devs, axis, tuple(node(n.op, tuple(v.parts[i] for v in srcs), n.arg, n.dtype,
                                         _with(n.shape, axis, sizes[i])) for i in range(len(devs))))


_COMBINE = {"sum": Op.ADD, "prod": Op.MUL, "max": Op.MAX, "min": Op.MIN}


def _reduce(n: Node, v: _Split) -> _Split:
    name, axes = n.arg
    if v.axis is None or v.axis not in axes:
        return _Split(v.devices, v.axis, tuple(
            node(Op.REDUCE, (p,), n.arg, n.dtype, tuple(1 if i in axes else s for i, s in enumerate(p.shape)))
            for p in v.parts))
    partials = [node(Op.REDUCE, (p,), n.arg, n.dtype, n.shape) for p in v.parts]
    combine = _COMBINE[name]
    parts = []
    for d in v.devices:  # all-reduce: the same order of operands on every device
        acc = None
        for p, e in zip(partials, v.devices):
            piece = _copy(p, e, d)
            acc = piece if acc is None else node(combine, (acc, piece), None, n.dtype, n.shape)
        parts.append(acc)
    return _Split(v.devices, None, tuple(parts))


# --- movement rules: the split kept, or None (then the source is gathered first) ----------------------

def _reshape(n: Node, v: _Split) -> _Split | None:
    if v.axis is None:
        return _Split(v.devices, None, tuple(node(Op.RESHAPE, (p,), n.shape, n.dtype, n.shape) for p in v.parts))
    old, new, a = n.src[0].shape, n.shape, v.axis
    before = math.prod(old[:a])
    for b in range(len(new)):
        if math.prod(new[:b]) != before:
            continue
        for k in range(a + 1, len(old) + 1):  # the split axis merged with the axes after it
            if new[b] == math.prod(old[a:k]):
                scale = math.prod(old[a + 1:k])
                return _reshaped(n, v, b, [s * scale for s in v.sizes])
        for j in range(b + 1, len(new) + 1):  # the split axis split into new[b:j], evenly per part
            inner = math.prod(new[b + 1:j])
            if math.prod(new[b:j]) == old[a] and all(s % inner == 0 for s in v.sizes):
                return _reshaped(n, v, b, [s // inner for s in v.sizes])
    return None


def _reshaped(n: Node, v: _Split, axis: int, sizes: list[int]) -> _Split:
    parts = []
    for p, s in zip(v.parts, sizes):
        shape = _with(n.shape, axis, s)
        parts.append(node(Op.RESHAPE, (p,), shape, n.dtype, shape))
    return _Split(v.devices, axis, tuple(parts))


def _permute(n: Node, v: _Split) -> _Split:
    axis = None if v.axis is None else n.arg.index(v.axis)
    return _Split(v.devices, axis, tuple(node(Op.PERMUTE, (p,), n.arg, n.dtype, tuple(p.shape[d] for d in n.arg))
                                         for p in v.parts))


def _expand(n: Node, v: _Split) -> _Split:
    parts = []
    for p in v.parts:  # (a split axis has at least two elements, so it is never the one expanded)
        shape = n.shape if v.axis is None else _with(n.shape, v.axis, p.shape[v.axis])
        parts.append(node(Op.EXPAND, (p,), shape, n.dtype, shape))
    return _Split(v.devices, v.axis, tuple(parts))


def _pad(n: Node, v: _Split) -> _Split | None:
    pads, _ = n.arg
    if v.axis is not None and pads[v.axis] != (0, 0):
        return None
    return _Split(v.devices, v.axis, tuple(
        node(Op.PAD, (p,), n.arg, n.dtype, tuple(s + lo + hi for s, (lo, hi) in zip(p.shape, pads)))
        for p in v.parts))


def _shrink_rule(n: Node, v: _Split) -> _Split | None:
    bounds = n.arg
    if v.axis is None:
        return _Split(v.devices, None, tuple(node(Op.SHRINK, (p,), bounds, n.dtype, n.shape) for p in v.parts))
    lo, hi = bounds[v.axis]
    parts, start = [], 0
    for p in v.parts:  # each part keeps its overlap with [lo, hi)
        size = p.shape[v.axis]
        a, b = max(lo, start) - start, min(hi, start + size) - start
        if a >= b:
            return None  # a part would be empty
        local = tuple((a, b) if i == v.axis else r for i, r in enumerate(bounds))
        parts.append(node(Op.SHRINK, (p,), local, n.dtype, tuple(e - s for s, e in local)))
        start += size
    return _Split(v.devices, v.axis, tuple(parts))


def _flip(n: Node, v: _Split) -> _Split | None:
    if v.axis in n.arg:
        return None
    return _Split(v.devices, v.axis, tuple(node(Op.FLIP, (p,), n.arg, n.dtype, p.shape) for p in v.parts))


_MOVEMENT = {Op.RESHAPE: _reshape, Op.PERMUTE: _permute, Op.EXPAND: _expand, Op.PAD: _pad,
             Op.SHRINK: _shrink_rule, Op.FLIP: _flip}


# --- communication -----------------------------------------------------------------------------------

def _copy(x: Node, source: str, destination: str) -> Node:
    """``x`` (computed on ``source``) on ``destination``: itself, or a COPY step."""
    if source == destination:
        return x
    return node(Op.COPY, (holder(x),), (source, destination), x.dtype, x.shape)


def _whole_on(v: _Split, shape: tuple[int, ...], device: str) -> Node:
    """The whole value of ``v`` on ``device``: a replica, or every part copied there and joined."""
    if v.axis is None:
        i = v.devices.index(device) if device in v.devices else 0
        return _copy(v.parts[i], v.devices[i], device)
    from .ops.movement import cat
    from .tensor import Tensor

    pieces = [Tensor._from_node(_copy(p, e, device), device) for p, e in zip(v.parts, v.devices)]
    return cat(pieces, v.axis).node


def _replicated(v: _Split, shape: tuple[int, ...]) -> _Split:
    """``v`` replicated (an all-gather when it is split)."""
    if v.axis is None:
        return v
    return _Split(v.devices, None, tuple(_whole_on(v, shape, d) for d in v.devices))


def _relayout(v: _Split, shape: tuple[int, ...], axis: int | None, sizes: tuple[int, ...]) -> _Split:
    """``v`` split along ``axis`` into ``sizes`` (replicated for None): local slices of a replica."""
    if v.axis == axis and v.sizes == tuple(sizes):
        return v
    rep = _replicated(v, shape)
    if axis is None:
        return rep
    parts, start = [], 0
    for p, size in zip(rep.parts, sizes):
        parts.append(_shrink(p, axis, start, start + size))
        start += size
    return _Split(v.devices, axis, tuple(parts))


def _shrink(x: Node, axis: int, start: int, end: int) -> Node:
    if (start, end) == (0, x.shape[axis]):
        return x
    bounds = tuple((start, end) if i == axis else (0, s) for i, s in enumerate(x.shape))
    return node(Op.SHRINK, (x,), bounds, x.dtype, _with(x.shape, axis, end - start))


def _with(shape: tuple[int, ...], axis: int, size: int) -> tuple[int, ...]:
    return shape[:axis] + (size,) + shape[axis + 1:]

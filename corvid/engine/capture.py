"""What a ``jit`` trace records besides its graph: in-place updates of tensors and random draws.

Kept apart from :mod:`corvid.transforms.jit` so that the tensor and autograd modules can report
updates without importing the transforms package. ``note_mutation`` is called *before* a tensor's
``node`` or ``grad`` is replaced; outside a trace it costs one list check.

Traces are per thread: a trace running in one thread neither records the updates another thread
makes nor stops it from computing eagerly.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

from ..graph.node import Node


class Recorder:
    def __init__(self) -> None:
        # (id(tensor), attr) -> (tensor, attr, the node the attribute held before the first update)
        self.mutated: dict[tuple[int, str], tuple[Any, str, Node | None]] = {}
        self.saved: dict[tuple[int, str], Any] = {}  # the attribute's old value itself (node or grad)
        self.draws: list[tuple[Node, int]] = []  # (params placeholder, numbers drawn)

    def restore(self) -> None:
        """Undo the trace's updates (they hold placeholders); replays write the real values."""
        for (_, attr), (tensor, _, _) in self.mutated.items():
            value = self.saved[(id(tensor), attr)]
            if attr == "node":
                tensor.node = value
            else:
                tensor._grad = value


class _Traces(threading.local):
    def __init__(self) -> None:
        self.recorders: list[Recorder] = []  # this thread's running traces, innermost last
        self.sizes: list[Node] = []  # the symbolic sizes' input of the captures running, innermost last


_traces = _Traces()


@contextmanager
def recording(rec: Recorder) -> Iterator[Recorder]:
    """Record into ``rec`` the updates this thread makes inside the block (a ``jit`` trace)."""
    _traces.recorders.append(rec)
    try:
        yield rec
    finally:
        _traces.recorders.pop()


def sizes_node() -> Node | None:
    """The placeholder (int64, one element per symbolic size) from which the kernels of the
    capture running in this thread read their symbolic sizes; None outside one."""
    sizes = _traces.sizes
    return sizes[-1] if sizes else None


@contextmanager
def symbolic_sizes(n: Node) -> Iterator[Node]:
    """Kernels scheduled in the block read symbolic sizes from ``n`` (a ``jit`` capture)."""
    _traces.sizes.append(n)
    try:
        yield n
    finally:
        _traces.sizes.pop()


def tracing() -> bool:
    """Whether a ``jit`` trace is running in this thread (values are placeholders: do not
    realize eagerly)."""
    return bool(_traces.recorders)


def _local(n: Node) -> bool:
    """Whether ``n`` was computed inside the trace from its placeholders (not an argument itself)."""
    from ..graph.node import Op, toposort

    while n.op is Op.VAR and n.src and n.arg.kind == "leaf":
        n = n.src[0]
    if n.op is Op.VAR and not n.src:
        return False  # an argument's placeholder: its update is written back to the argument
    return n.traced and any(m.op is Op.VAR and not m.src for m in toposort([n], stop=lambda m: m.buffer is not None))


def note_mutation(tensor: Any, attr: str) -> None:
    """Record that ``tensor.<attr>`` (``"node"`` or ``"grad"``) is about to be replaced."""
    recorders = _traces.recorders
    if not recorders:
        return
    rec = recorders[-1]
    key = (id(tensor), attr)
    if key not in rec.mutated:
        if attr == "node" and _local(tensor.node):
            return  # a value computed inside the traced function: an ordinary rebinding
        if attr == "node":
            old = rec.saved[key] = tensor.node
        else:
            g = rec.saved[key] = tensor._grad
            old = g.node if g is not None else None
        rec.mutated[key] = (tensor, attr, old)

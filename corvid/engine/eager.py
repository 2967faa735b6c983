"""Small data movement on the host: numpy instead of a new kernel.

A kernel's structure includes every offset and size it reads at, so data movement at a new
position (``x[i]``, ``out[i, j] = v``, ``stack`` of a list of pieces) is a new kernel for the C
compiler: a compile of some 30 ms each, paid again for each ``i``. PyTorch does these as memory
copies. For values of at most ``HOST_VIEW_MAX`` elements on a CPU device, outside any trace
(gradients, ``jit``, ``vmap``), corvid does the same with numpy, and the results are stored
values: whatever computes with them next is a kernel of the same structure for every offset.
Larger values, and every traced one, keep the graph form (fused, and differentiable).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..graph.node import Op, node
from ..runtime.device import Buffer
from . import capture
from .realize import holder
from .realize import realize as _realize
from .schedule import HOST_VIEW_MAX, _host_viewable

if TYPE_CHECKING:
    from ..tensor import Tensor


def host_ok(ts: list[Tensor], numel: int) -> bool:
    """Whether a result of ``numel`` elements from ``ts`` is made on the host: all on one CPU
    device, small, and nothing traced (no trace running, no value a gradient flows through)."""
    if numel > HOST_VIEW_MAX or capture.tracing():
        return False
    dev = ts[0].device
    if type(dev) is not str or not dev.startswith("CPU"):
        return False
    return all(t.device == dev and not t.node.traced for t in ts)


def readable(t: Tensor) -> bool:
    """Whether ``t``'s value is on the host without running a kernel (stored, a literal, or a
    small view of a stored value)."""
    n = t.node
    return n.buffer is not None or n.op is Op.CONST or _host_viewable(n, t.device)


def host_arrays(ts: list[Tensor]) -> list[np.ndarray] | None:
    """The values of ``ts`` as numpy arrays, computing the ones not yet computed in one schedule;
    None when one of them is not a buffer of this CPU."""
    todo = [holder(t.node) for t in ts if t.node.buffer is None and t.node.op is not Op.CONST]
    if todo:
        _realize(todo, ts[0].device)
    out = []
    for t in ts:
        n = t.node
        if n.op is Op.CONST:
            out.append(np.full(n.shape, n.arg, n.dtype.np))
            continue
        b = n.buffer if n.buffer is not None else holder(n).buffer
        if type(b) is not Buffer or b.device != t.device:
            return None
        out.append(b.numpy().reshape(n.shape))
    return out


def stored(a: np.ndarray, like: Tensor, shape: tuple[int, ...] | None = None, dtype: Any = None) -> Tensor:
    """A tensor holding ``a`` (already in the dtype wanted) on ``like``'s device."""
    dtype = like.dtype if dtype is None else dtype
    shape = like.shape if shape is None else shape
    buf = Buffer(like.device, dtype, a.size).copyin(np.ascontiguousarray(a, dtype.np))
    return type(like)._from_node(node(Op.BUFFER, (), buf, dtype, shape), like.device)

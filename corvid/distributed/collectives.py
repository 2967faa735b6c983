"""The process group (the MPI job this process belongs to) and collective operations on tensors.

MPI is the transport, through mpi4py; nothing here moves bytes itself. Tensors cross process
boundaries as numpy buffers with mpi4py's buffer methods (``Allreduce``, ``Bcast``), never
pickled. Many tensors travel as one buffer per dtype (a *bucket*): corvid concatenates them in one
kernel, MPI reduces the bucket in one call, and the result is cut back into tensors. A step of a
model with 50 parameters is then one MPI call, not 50, which matters because each call pays the
network's latency.

Every function here is a *collective*: every process of the group must call it, in the same order,
with tensors of the same shapes and dtypes (as MPI requires). A process that calls a different
collective, or none, leaves the others waiting forever; launch with ``python -m mpi4py`` so that
an exception in one process ends the whole job instead (see ``docs/distributed.md``).

With one process (a script started without ``mpirun``) the group has size 1 and every collective
returns its input unchanged, so the same script runs on a laptop and on a cluster.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import ShapeError
from .. import dtype as dt
from ..autograd import no_grad
from ..engine import capture
from ..ops.movement import cat
from ..tensor import Tensor, realize
from ..tree import tree_flatten, tree_unflatten

__all__ = ["all_reduce", "all_reduce_gradients", "barrier", "broadcast", "broadcast_parameters", "init",
           "is_initialized", "rank", "world_size"]

INSTALL_HINT = ('corvid.distributed needs mpi4py and an MPI library: pip install "corvid[distributed]", '
                "plus an MPI such as Open MPI (Debian/Ubuntu: apt-get install openmpi-bin libopenmpi-dev)")
REDUCE_OPS = ("sum", "mean", "max", "min")
# MPI-3 counts are C ints: a bucket larger than this goes in several calls
_MAX_COUNT = 1 << 30

_comm: Any = None  # the mpi4py communicator of the group, once init() ran


def _mpi() -> Any:
    """The ``mpi4py.MPI`` module, or an ImportError that says what to install."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from e
    except RuntimeError as e:  # mpi4py's wheel is installed but finds no MPI library to load
        raise ImportError(f"{INSTALL_HINT} (mpi4py: {e})") from e
    return MPI


def init(comm: Any = None) -> None:
    """Join the process group: every process started by ``mpirun``/``srun``, or this process alone.

    ``comm`` is an mpi4py communicator to use instead of ``MPI.COMM_WORLD`` (for example one made
    by ``Split``). Calling ``init()`` again is a no-op; calling it with a different communicator
    once initialized is a RuntimeError. Raises ImportError, saying what to install, when mpi4py
    or an MPI library is missing.

    Under ``mpirun -n 2 python -m mpi4py script.py``::

        import corvid.distributed as dist
        dist.init()
        print(dist.rank(), "of", dist.world_size())   # "0 of 2" and "1 of 2"

    The same script started with plain ``python`` is a group of one process, in which every
    collective returns its input. Here it runs as such a script, in a new process (MPI starts
    once per process, and a process that started it should not launch ``mpirun`` itself):

    >>> import subprocess, sys
    >>> script = '''
    ... import corvid as cv, corvid.distributed as dist
    ... dist.init()
    ... print(dist.rank(), "of", dist.world_size(), dist.is_initialized())
    ... print(dist.all_reduce(cv.Tensor([1.0, 2.0]), op="mean").tolist())
    ... '''
    >>> print(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True).stdout, end="")
    0 of 1 True
    [1.0, 2.0]
    """
    global _comm
    MPI = _mpi()
    chosen = MPI.COMM_WORLD if comm is None else comm
    if _comm is not None:
        if comm is not None and chosen != _comm:
            raise RuntimeError("corvid.distributed is already initialized with another communicator")
        return
    _comm = chosen


def is_initialized() -> bool:
    """Whether :func:`init` has run in this process (the other functions of the group need it).

    >>> import corvid.distributed as dist
    >>> dist.is_initialized()   # a process that has not called dist.init()
    False
    """
    return _comm is not None


def _group() -> Any:
    if _comm is None:
        raise RuntimeError("corvid.distributed is not initialized: call corvid.distributed.init() first")
    return _comm


def rank() -> int:
    """This process's index in the group, ``0 <= rank() < world_size()``: 0 in a script started
    without ``mpirun`` (see :func:`init`). RuntimeError before :func:`init`.

    >>> import corvid.distributed as dist
    >>> dist.rank()   # before dist.init()
    Traceback (most recent call last):
        ...
    RuntimeError: corvid.distributed is not initialized: call corvid.distributed.init() first
    """
    return _group().Get_rank()


def world_size() -> int:
    """The number of processes in the group (1 without ``mpirun``; see :func:`init`). RuntimeError
    before :func:`init`.

    >>> import corvid.distributed as dist
    >>> dist.world_size()   # before dist.init()
    Traceback (most recent call last):
        ...
    RuntimeError: corvid.distributed is not initialized: call corvid.distributed.init() first
    """
    return _group().Get_size()


def barrier() -> None:
    """Wait until every process of the group has reached this call (returns at once in a group of
    one). RuntimeError before :func:`init`.

    >>> import corvid.distributed as dist
    >>> dist.barrier()   # before dist.init()
    Traceback (most recent call last):
        ...
    RuntimeError: corvid.distributed is not initialized: call corvid.distributed.init() first
    """
    _group().Barrier()


def _not_traced(what: str) -> None:
    # a collective inside cv.jit would be recorded as the values of the tracing call and replayed
    # as constants, silently; the MPI call itself cannot be part of a kernel program
    if capture.tracing():
        raise RuntimeError(f"corvid.distributed.{what} cannot run inside cv.jit: jit the gradient computation and "
                           "the update as two functions and call it between them (see docs/distributed.md)")


def _tensor_leaves(tree: Any, what: str) -> tuple[list[Tensor], Any]:
    leaves, treedef = tree_flatten(tree)
    for leaf in leaves:
        if not isinstance(leaf, Tensor):
            raise TypeError(f"{what} takes a tensor or a pytree of tensors, found a {type(leaf).__name__}")
    return leaves, treedef


def _wire_dtype(d: dt.DType) -> dt.DType:
    """The dtype a tensor travels as: MPI has no 8- or 16-bit floats (they are reduced in float32)
    and no arithmetic on C booleans (bools travel as int32: sum and max are "any", min is "all")."""
    if d in (dt.float16, dt.bfloat16, *dt.FLOAT8_DTYPES):
        return dt.float32
    if d is dt.bool_:
        return dt.int32
    return d


Bucket = tuple[dt.DType, str]  # (wire dtype, device): the tensors one concatenating kernel can pack


def _buckets(tensors: list[Tensor]) -> dict[Bucket, list[int]]:
    """Indices of ``tensors`` grouped by wire dtype and device, in first-seen order (the same on
    every process, as their tensors are)."""
    groups: dict[Bucket, list[int]] = defaultdict(list)
    for i, t in enumerate(tensors):
        groups[(_wire_dtype(t.dtype), t.device)].append(i)
    return groups


def _pack(tensors: list[Tensor], buckets: dict[Bucket, list[int]]) -> list[np.ndarray]:
    """One flat numpy array per bucket, built by one concatenating kernel each (a fresh copy
    that MPI may overwrite)."""
    with no_grad():
        flats = [cat([tensors[i].detach().reshape(-1).astype(wire) for i in idx]) for (wire, _), idx in buckets.items()]
        realize(*flats)
    return [f.numpy() for f in flats]


def _unpack(buffer: np.ndarray, like: list[Tensor]) -> list[Tensor]:
    """Cut a flat buffer back into tensors with the shapes, dtypes and devices of ``like``."""
    out, offset = [], 0
    for t in like:
        piece = buffer[offset:offset + t.size].reshape(t.shape)
        out.append(Tensor(piece, dtype=t.dtype, device=t.device))
        offset += t.size
    return out


def _chunks(buffer: np.ndarray) -> Iterable[np.ndarray]:
    return (buffer[start:start + _MAX_COUNT] for start in range(0, buffer.size, _MAX_COUNT))


def all_reduce(tensors: Any, op: str = "sum") -> Any:
    """Combine ``tensors`` elementwise across all processes; every process gets the result.

    ``tensors`` is a Tensor or a pytree of them (a list, a dict, a module of gradients from
    ``cv.grad``); the result has the same structure, shapes and dtypes, as new tensors (the inputs
    are unchanged). ``op`` is ``"sum"``, ``"mean"`` (the sum divided by :func:`world_size`;
    floating-point tensors only, else TypeError), ``"max"`` or ``"min"``; another name is a
    ValueError. All tensors of one dtype (and device) travel in one MPI call; 8- and 16-bit floats
    are reduced in float32. Every process must pass the same shapes and dtypes in the same order.
    With one process the input is returned as it is.

    With 2 processes, rank ``r`` passing ``cv.Tensor([r + 1.0])``::

        dist.all_reduce(cv.Tensor([dist.rank() + 1.0]))               # Tensor([3.]) on both
        dist.all_reduce({"a": a, "b": b}, op="max")                   # a dict of maxima

    The arguments are checked before the group is needed; a process that has not called
    :func:`init` gets a RuntimeError (see :func:`init` for a run as one process):

    >>> import corvid.distributed as dist
    >>> dist.all_reduce(cv.ones(2), op="prod")
    Traceback (most recent call last):
        ...
    ValueError: all_reduce: op must be one of ('sum', 'mean', 'max', 'min'), got 'prod'
    >>> dist.all_reduce(cv.ones(2))   # before dist.init()
    Traceback (most recent call last):
        ...
    RuntimeError: corvid.distributed is not initialized: call corvid.distributed.init() first
    """
    if op not in REDUCE_OPS:
        raise ValueError(f"all_reduce: op must be one of {REDUCE_OPS}, got {op!r}")
    comm = _group()
    leaves, treedef = _tensor_leaves(tensors, "all_reduce")
    if op == "mean" and any(not t.dtype.is_float for t in leaves):
        raise TypeError("all_reduce(op='mean') needs floating-point tensors; use op='sum' for integers")
    _not_traced("all_reduce")
    if comm.Get_size() == 1 or not leaves:
        return tensors
    MPI = _mpi()
    mpi_op = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
    buckets = _buckets(leaves)
    out: list[Tensor | None] = [None] * len(leaves)
    for idx, buffer in zip(buckets.values(), _pack(leaves, buckets)):
        for chunk in _chunks(buffer):
            comm.Allreduce(MPI.IN_PLACE, chunk, op=mpi_op)
        if op == "mean":
            buffer /= comm.Get_size()
        for i, t in zip(idx, _unpack(buffer, [leaves[i] for i in idx])):
            out[i] = t
    return tree_unflatten(treedef, out)


def broadcast(tensors: Any, root: int = 0) -> Any:
    """Every process gets the values that process ``root`` passes.

    ``tensors`` is a Tensor or a pytree of them; every process passes the same structure, shapes
    and dtypes (only the root's values matter). Returns new tensors of that structure holding the
    root's values. Checked first: a process whose shapes or dtypes differ from the root's makes
    every process raise ValueError (instead of a hang or garbage). With one process the input is
    returned as it is.

    Under ``mpirun``::

        w = dist.broadcast(cv.randn(3))    # rank 0's random draw, on every process

    A process that has not called :func:`init` gets a RuntimeError:

    >>> import corvid.distributed as dist
    >>> dist.broadcast(cv.ones(2))
    Traceback (most recent call last):
        ...
    RuntimeError: corvid.distributed is not initialized: call corvid.distributed.init() first
    """
    comm = _group()
    leaves, treedef = _tensor_leaves(tensors, "broadcast")
    _not_traced("broadcast")
    if not 0 <= root < comm.Get_size():
        raise ShapeError(f"broadcast: root {root} is not a rank of a group of {comm.Get_size()}")
    if comm.Get_size() == 1:
        return tensors
    # every process learns every layout (small lists of shapes, the one pickled message), so all
    # of them raise together rather than some waiting in Bcast for the others
    layouts = comm.allgather([(t.shape, t.dtype.name) for t in leaves])
    differing = [r for r, layout in enumerate(layouts) if layout != layouts[root]]
    if differing:
        raise ShapeError(f"broadcast: rank {differing[0]} passed {layouts[differing[0]]} but the root (rank {root}) "
                         f"passed {layouts[root]}; every process must pass the same shapes and dtypes")
    buckets = _buckets(leaves)
    if comm.Get_rank() == root:
        buffers = _pack(leaves, buckets)
    else:
        buffers = [np.empty(sum(leaves[i].size for i in idx), wire.np) for (wire, _), idx in buckets.items()]
    out: list[Tensor | None] = [None] * len(leaves)
    for idx, buffer in zip(buckets.values(), buffers):
        for chunk in _chunks(buffer):
            comm.Bcast(chunk, root=root)
        for i, t in zip(idx, _unpack(buffer, [leaves[i] for i in idx])):
            out[i] = t
    return tree_unflatten(treedef, out)


def _parameters_of(module_or_params: Any) -> list[Tensor]:
    from ..nn import Module

    if isinstance(module_or_params, Module):
        return list(module_or_params.parameters())
    params = [module_or_params] if isinstance(module_or_params, Tensor) else list(module_or_params)
    if not all(isinstance(p, Tensor) for p in params):
        raise TypeError("expected a Module or an iterable of tensors")
    return params


def all_reduce_gradients(module_or_params: Any, average: bool = True) -> None:
    """Replace each parameter's ``.grad`` by its mean (``average=True``) or sum across processes.

    Call it after ``loss.backward()`` and before ``opt.step()``: when every process computed the
    mean loss over an equal share of the global batch, the mean of their gradients is the
    gradient of the global batch's mean loss, so every process takes the same step and the
    parameters stay equal. ``module_or_params`` is a :class:`~corvid.nn.Module` or an iterable
    of tensors; parameters without a gradient are skipped (the same ones on every process, as
    every process runs the same model). All gradients of one dtype travel in one MPI call.
    RuntimeError inside ``cv.jit`` (see the module's docstring); a no-op with one process.

    In a training step::

        opt.zero_grad(); loss.backward()
        dist.all_reduce_gradients(model)
        opt.step()

    A process that has not called :func:`init` gets a RuntimeError:

    >>> import corvid.distributed as dist
    >>> dist.all_reduce_gradients(cv.nn.Linear(2, 1))
    Traceback (most recent call last):
        ...
    RuntimeError: corvid.distributed is not initialized: call corvid.distributed.init() first
    """
    params = [p for p in _parameters_of(module_or_params) if p.grad is not None]
    _not_traced("all_reduce_gradients")
    if world_size() == 1 or not params:
        return
    reduced = all_reduce([p.grad for p in params], op="mean" if average else "sum")
    for p, g in zip(params, reduced):
        p.grad = g


def broadcast_parameters(module_or_params: Any, root: int = 0) -> None:
    """Give every process the values process ``root`` holds, in place, so training starts equal.

    A :class:`~corvid.nn.Module` receives its whole ``state_dict`` (parameters and persistent
    buffers, such as batch-norm statistics) through ``load_state_dict``; an iterable of tensors
    is updated with ``assign``. Parameters stay the same objects, so an optimizer made before
    keeps working. Call it once after building the model (and after loading a checkpoint on the
    root alone). A no-op with one process; RuntimeError before :func:`init`.

    >>> import corvid.distributed as dist
    >>> dist.broadcast_parameters(cv.nn.Linear(2, 1))   # before dist.init()
    Traceback (most recent call last):
        ...
    RuntimeError: corvid.distributed is not initialized: call corvid.distributed.init() first
    """
    from ..nn import Module

    if world_size() == 1:
        return
    if isinstance(module_or_params, Module):
        state = module_or_params.state_dict()
        module_or_params.load_state_dict(broadcast(state, root=root))
        return
    params = _parameters_of(module_or_params)
    with no_grad():
        for p, value in zip(params, broadcast(params, root=root)):
            p.assign(value)

"""Checkpoints in data-parallel training: one process writes, one process reads, all stay in step.

Every process holds the same parameters, so one copy on disk is enough, and several processes
writing the same file would race. :func:`save_checkpoint` writes from the root process only
(through :func:`corvid.save`, atomically), and no process returns before the file is complete, so
code after it (reading the file, ending the job) never sees a partial checkpoint.
:func:`load_checkpoint` reads on the root only and broadcasts the values, so the file need not be
on a filesystem every node shares. If the root fails (a full disk, a missing file), every process
raises, instead of the others waiting forever for a root that is gone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from ..io import load, save
from ..tensor import Tensor
from .collectives import _group, broadcast_parameters

__all__ = ["load_checkpoint", "save_checkpoint"]


def _on_root(action: Callable[[], None], root: int, what: str) -> None:
    """Run ``action`` on ``root``; every process returns once it finished, or raises if it failed."""
    comm = _group()
    failure = None
    if comm.Get_rank() == root:
        try:
            action()
        except Exception as e:  # whatever it is, the other processes must hear of it or wait forever
            failure = e
    message = comm.bcast(None if failure is None else f"{type(failure).__name__}: {failure}", root=root)
    if failure is not None:
        raise failure
    if message is not None:
        raise RuntimeError(f"{what} failed on rank {root}: {message}")


def save_checkpoint(path: str | os.PathLike, state: Any, root: int = 0) -> None:
    """Write ``state`` to ``path`` from process ``root``; every process returns when it is written.

    ``state`` is a :class:`~corvid.nn.Module` (its ``state_dict()`` is saved) or a dict of
    tensors (for example the model's state merged with
    ``cv.optim.flatten_state_dict(opt.state_dict())``). The format follows the extension, as
    :func:`corvid.save` (``.safetensors`` recommended). The other processes write nothing. An
    error on the root is raised there and, as a RuntimeError naming it, on every other process.

    Every process calls it::

        dist.save_checkpoint("model.safetensors", model)

    A training script started with plain ``python`` (a group of one) writes the file itself; it
    runs here in a new process, as :func:`~corvid.distributed.init` explains:

    >>> import subprocess, sys
    >>> script = '''
    ... import corvid as cv, corvid.distributed as dist
    ... dist.init()
    ... dist.save_checkpoint("model.safetensors", cv.nn.Linear(2, 1))
    ... '''
    >>> subprocess.run([sys.executable, "-c", script]).returncode
    0
    >>> sorted(cv.load("model.safetensors"))
    ['bias', 'weight']
    """
    from ..nn import Module

    tensors = state.state_dict() if isinstance(state, Module) else state
    if not isinstance(tensors, Mapping) or not all(isinstance(v, Tensor) for v in tensors.values()):
        raise TypeError("save_checkpoint needs a Module or a dict of tensors")
    _on_root(lambda: save(path, dict(tensors)), root, f"saving the checkpoint {os.fspath(path)}")


def load_checkpoint(path: str | os.PathLike, module: Any, root: int = 0) -> None:
    """Load ``path`` into ``module`` on every process, reading the file on process ``root`` only.

    The root loads the file with :func:`corvid.load` into ``module.load_state_dict`` (strict: a
    missing or extra name is an error); then every process receives the root's values
    (:func:`~corvid.distributed.broadcast_parameters`). Every process passes the same model. An
    error on the root is raised there and, as a RuntimeError naming it, on every other process.

    Every process calls it::

        dist.load_checkpoint("model.safetensors", model)

    Here a checkpoint is loaded by a script started with plain ``python`` (a group of one), in a
    new process as :func:`~corvid.distributed.init` explains:

    >>> import subprocess, sys
    >>> cv.save("model.safetensors", {"weight": cv.Tensor([[1.0, 2.0]]), "bias": cv.Tensor([0.5])})
    >>> script = '''
    ... import corvid as cv, corvid.distributed as dist
    ... dist.init()
    ... model = cv.nn.Linear(2, 1)
    ... dist.load_checkpoint("model.safetensors", model)
    ... print(model.weight.tolist(), model(cv.ones(1, 2)).tolist())
    ... '''
    >>> print(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True).stdout, end="")
    [[1.0, 2.0]] [[3.5]]
    """
    _on_root(lambda: module.load_state_dict(load(path)), root, f"loading the checkpoint {os.fspath(path)}")
    broadcast_parameters(module, root=root)

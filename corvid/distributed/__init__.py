"""corvid.distributed: data-parallel training over several processes, through MPI (mpi4py).

Every process holds a full copy of the model and reads its own share of each batch; after the
backward pass the gradients are averaged across processes (one all-reduce per dtype), so every
process takes the same optimizer step and the copies stay equal. It needs the optional extra and
an MPI library: ``pip install "corvid[distributed]"`` and, on Debian/Ubuntu,
``apt-get install openmpi-bin libopenmpi-dev``. :func:`init` raises an ImportError saying so when
either is missing. A training loop::

    import corvid as cv
    import corvid.distributed as dist

    dist.init()                                   # the processes mpirun started, or just this one
    model = Net()
    dist.broadcast_parameters(model)              # every process starts from rank 0's weights
    opt = cv.optim.SGD(model.parameters(), lr=0.1)
    sampler = dist.DistributedSampler(train_set, seed=0)
    loader = cv.data.DataLoader(train_set, batch_size=64, sampler=sampler)   # 64 per process
    for epoch in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            cv.nn.functional.cross_entropy(model(x), y).backward()
            dist.all_reduce_gradients(model)      # the mean gradient of the global batch
            opt.step()
        dist.save_checkpoint("model.safetensors", model)   # written by rank 0 only

Run it with ``mpirun -n 4 python -m mpi4py train.py`` (``python train.py`` runs it as one
process). ``docs/distributed.md`` covers clusters (hostfiles, Slurm) and the pitfalls.

* :mod:`~corvid.distributed.collectives`: :func:`init`, :func:`rank`, :func:`world_size`,
  :func:`barrier`, :func:`all_reduce`, :func:`broadcast`, :func:`all_reduce_gradients`,
  :func:`broadcast_parameters`.
* :mod:`~corvid.distributed.sampler`: :class:`DistributedSampler` (needs no MPI when given
  ``num_replicas`` and ``rank``).
* :mod:`~corvid.distributed.checkpoint`: :func:`save_checkpoint`, :func:`load_checkpoint`.
"""

from .checkpoint import load_checkpoint, save_checkpoint
from .collectives import (all_reduce, all_reduce_gradients, barrier, broadcast, broadcast_parameters, init,
                          is_initialized, rank, world_size)
from .sampler import DistributedSampler

__all__ = ["DistributedSampler", "all_reduce", "all_reduce_gradients", "barrier", "broadcast",
           "broadcast_parameters", "init", "is_initialized", "load_checkpoint", "rank", "save_checkpoint",
           "world_size"]

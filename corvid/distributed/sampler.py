"""Rank-aware sharding of a dataset: each process reads its own share of every epoch.

>>> from corvid.distributed import DistributedSampler
>>> [list(DistributedSampler(range(10), num_replicas=2, rank=r, shuffle=False)) for r in (0, 1)]
[[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized

import numpy as np

__all__ = ["DistributedSampler"]


class DistributedSampler:
    """The indices of ``dataset`` that process ``rank`` of ``num_replicas`` reads in one epoch.

    ``DistributedSampler(dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
    drop_last=False)``; ``num_replicas`` and ``rank`` default to the group's
    (:func:`~corvid.distributed.world_size`, :func:`~corvid.distributed.rank`, which need
    :func:`~corvid.distributed.init`). Only ``len(dataset)`` is used. Give it to a loader:
    ``cv.data.DataLoader(dataset, batch_size=b, sampler=sampler)``; the loader calls
    :meth:`set_epoch` with its epoch count before each pass, so every epoch has a new order.

    Each epoch's order is the permutation ``DataLoader(dataset, shuffle=True, seed=seed)`` uses for
    that epoch (or ``0..n-1`` without ``shuffle``), the same on every process because it depends
    only on ``(seed, epoch)``: give every process the same ``seed``. Process ``r`` takes every
    ``num_replicas``-th index of it starting at ``r``, so the shards are disjoint and, together,
    the whole epoch. With a batch of ``b`` per process, the processes' k-th batches together are
    the k-th batch of ``b * num_replicas`` of one process walking the same order: data-parallel
    training with averaged gradients takes the steps a single process would take with the larger
    batch.

    Every shard has the same length (a process with fewer batches would leave the others waiting
    in a collective): when ``num_replicas`` does not divide ``len(dataset)``, the order is padded
    by repeating its first indices (those samples count twice that epoch) or, with ``drop_last``,
    its last ``len(dataset) % num_replicas`` indices are dropped (other samples each epoch when
    shuffled). ValueError for ``rank`` outside ``[0, num_replicas)`` or ``num_replicas < 1``.

    Given ``num_replicas`` and ``rank``, it needs no MPI, so each process's share can be seen here:

    >>> [list(DistributedSampler(range(5), num_replicas=2, rank=r, shuffle=False)) for r in (0, 1)]
    [[0, 2, 4], [1, 3, 0]]
    >>> [list(DistributedSampler(range(5), num_replicas=2, rank=r, shuffle=False, drop_last=True)) for r in (0, 1)]
    [[0, 2], [1, 3]]
    >>> shards = [DistributedSampler(range(10), num_replicas=2, rank=r, seed=0) for r in (0, 1)]
    >>> sorted(list(shards[0]) + list(shards[1]))   # shuffled, disjoint, the whole epoch together
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    >>> ds = cv.data.TensorDataset(np.arange(8.0))
    >>> sampler = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=False)
    >>> [x.tolist() for (x,) in cv.data.DataLoader(ds, batch_size=2, sampler=sampler)]
    [[1.0, 3.0], [5.0, 7.0]]
    """

    def __init__(self, dataset: Sized, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        from . import collectives

        self.num_replicas = collectives.world_size() if num_replicas is None else num_replicas
        self.rank = collectives.rank() if rank is None else rank
        if self.num_replicas < 1:
            raise ValueError(f"num_replicas must be at least 1, got {self.num_replicas}")
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"rank {self.rank} is outside [0, {self.num_replicas})")
        self.dataset_size = len(dataset)
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.epoch = 0
        per_replica = self.dataset_size / self.num_replicas
        self.num_samples = math.floor(per_replica) if drop_last else math.ceil(per_replica)

    def __len__(self) -> int:
        """The number of indices each process reads per epoch (the same on every process)."""
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch`` (its order). The DataLoader calls it before each pass."""
        self.epoch = epoch

    def indices(self) -> np.ndarray:
        """This process's indices for the current epoch, as an int64 array of ``len(self)``."""
        n = self.dataset_size
        order = np.random.default_rng([self.seed, self.epoch]).permutation(n) if self.shuffle else np.arange(n)
        total = self.num_samples * self.num_replicas
        if total > n:
            order = np.resize(order, total)  # repeats the order from its start
        return order[self.rank:total:self.num_replicas].astype(np.int64)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

"""The DataLoader: batches of a dataset as corvid tensors, shuffled reproducibly, prepared in a
background thread while the model computes.

Batches are built as numpy arrays in the background thread (array-backed datasets are sliced,
others collated sample by sample). On a CPU device they become tensors on the consumer's thread,
without a copy (:func:`corvid.dlpack.from_numpy`). For another device (``device=``, or the
default device when the iteration starts) the background thread also copies each batch there
(CUDA copies go through pinned staging buffers and return once staged), so the copy of the next
batch overlaps the step that runs on the current one and the device does not wait for its input. A dataset may compute its samples with corvid: corvid is safe
to use from several threads, so the background thread computes them while the model runs (grad
mode and the default device there are that thread's own: see ``docs/architecture.md``, Threads).

>>> ds = cv.data.TensorDataset(np.arange(10.0), np.arange(10) % 2)
>>> loader = DataLoader(ds, batch_size=4, shuffle=True, seed=0)
>>> [len(x) for x, y in loader]
[4, 4, 2]
>>> sorted(float(v) for x, _ in loader for v in x.tolist()) == list(range(10))
True
"""

from __future__ import annotations

import atexit
import math
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..dlpack import from_numpy, is_cpu
from ..runtime.device import canonical_device
from ..tensor import Tensor
from .dataset import Dataset, array_backed

__all__ = ["DataLoader", "default_collate"]


def default_collate(samples: list[Any]) -> Any:
    """Stack a list of samples into one batch of numpy arrays, field by field.

    Tensors and arrays are stacked along a new first axis (tensors must be computed already, as
    datasets return them); Python numbers become an array (ints int64, floats float64, as
    PyTorch); tuples, lists and dicts are collated per field; strings stay a list. TypeError
    for anything else.

    >>> batch = default_collate([(np.zeros(2), 1), (np.ones(2), 0)])
    >>> batch[0].shape, batch[1].tolist()
    ((2, 2), [1, 0])
    """
    first = samples[0]
    if isinstance(first, Tensor):
        return np.stack([s.numpy() for s in samples])
    if isinstance(first, np.ndarray):
        return np.stack(samples)
    if isinstance(first, (bool, int, float, np.number, np.bool_)):
        return np.asarray(samples)
    if isinstance(first, str):
        return list(samples)
    if isinstance(first, dict):
        return {k: default_collate([s[k] for s in samples]) for k in first}
    if isinstance(first, (tuple, list)):
        fields = [default_collate(list(column)) for column in zip(*samples)]
        return type(first)(*fields) if hasattr(first, "_fields") else type(first)(fields)
    raise TypeError(f"default_collate: cannot batch samples of type {type(first).__name__}; pass collate_fn=")


def _to_tensors(batch: Any, device: str = "CPU") -> Any:
    """numpy arrays in a collated batch become tensors on ``device`` (sharing their memory on a
    CPU device; copied, and the copy issued, on another); tensors move there; the rest is kept."""
    if isinstance(batch, np.ndarray):
        return from_numpy(batch, device=device) if is_cpu(device) else Tensor(batch, device=device).realize()
    if isinstance(batch, Tensor):
        return batch if batch.device == device else batch.to(device).realize()
    if isinstance(batch, dict):
        return {k: _to_tensors(v, device) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)) and not (batch and isinstance(batch[0], str)):
        items = [_to_tensors(v, device) for v in batch]
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    return batch


# the background threads of iterations not yet finished, each with its stop event: at exit they are
# stopped and joined before the interpreter tears down, since one left copying a batch to a device
# while the device's runtime unloads aborted the process (PoCL: "terminate called")
_workers: dict[threading.Thread, threading.Event] = {}
_workers_lock = threading.Lock()


@atexit.register
def _stop_workers() -> None:
    with _workers_lock:
        live = list(_workers.items())
    for _, stop in live:
        stop.set()
    for worker, _ in live:
        worker.join(timeout=10)


class DataLoader:
    """Iterate over ``dataset`` in batches of ``batch_size`` samples.

    ``DataLoader(dataset, batch_size=1, shuffle=False, seed=None, drop_last=False, collate_fn=None,
    prefetch=2, sampler=None, device=None)``. Each pass (each ``iter``) visits every sample once: in order, or
    with ``shuffle`` in a new permutation per epoch drawn from ``(seed, epoch)`` (so the same seed
    gives the same epochs; ``seed=None`` picks a random one). The last batch is smaller unless
    ``drop_last``. ``set_epoch(n)`` sets the epoch the next pass uses (to resume).

    ``sampler`` replaces that order: a sized iterable of sample indices, such as
    :class:`corvid.distributed.DistributedSampler` (this process's share of the dataset). Before
    each pass the loader calls its ``set_epoch(epoch)`` if it has one, so the sampler's epochs
    follow the loader's. ``shuffle`` with a sampler is a ValueError (the sampler decides the order).

    Batches of array-backed datasets (:class:`TensorDataset`, :class:`MNIST`, their
    :class:`Subset`) are sliced from the arrays at once; other datasets are read sample by sample
    and stacked by ``collate_fn`` (default :func:`default_collate`), which may return numpy
    arrays (made tensors here) or anything else. ``prefetch`` batches are prepared ahead in one
    background thread (0: none, everything on the caller's thread); an exception there is raised
    by the iteration, and the thread stops when the iteration ends or is abandoned.

    ``num_workers`` (PyTorch's name): with ``n > 0``, ``n`` threads build batches at once (in
    order; each batch from one thread), for datasets whose ``__getitem__`` is slow and releases
    the GIL (file reads, decoding, numpy, corvid itself); threads, not processes, so nothing is
    pickled and the dataset needs no ``if __name__ == "__main__":`` guard. ``pin_memory`` and
    ``persistent_workers`` are accepted for code written for PyTorch and change nothing: copies
    to a GPU always go through pinned staging buffers, and the threads live for one pass.

    ``device``: where the batches' tensors live (``'CUDA'``, ``'CL'``, ``'CPU'``, ...); None: the
    default device at the start of each pass (:func:`corvid.default_device`), so batches follow a
    model trained under ``cv.set_default_device("CUDA")``. Off the CPU the background thread
    copies each batch to the device ahead of its use. ValueError for an unknown device.

    >>> ds = cv.data.TensorDataset(np.arange(5.0), np.arange(5) % 2)
    >>> loader = DataLoader(ds, batch_size=2)
    >>> len(loader), [x.tolist() for x, y in loader]
    (3, [[0.0, 1.0], [2.0, 3.0], [4.0]])
    >>> [x.tolist() for x, y in DataLoader(ds, batch_size=2, drop_last=True)]
    [[0.0, 1.0], [2.0, 3.0]]
    >>> [x.tolist() for x, y in DataLoader(ds, batch_size=2, sampler=[4, 0, 2])]
    [[4.0, 0.0], [2.0]]

    With ``shuffle``, each epoch has its own order, the same for the same seed:

    >>> loader = DataLoader(ds, batch_size=5, shuffle=True, seed=0)
    >>> first, second = [x.tolist() for x, _ in loader], [x.tolist() for x, _ in loader]
    >>> first != second, sorted(first[0])
    (True, [0.0, 1.0, 2.0, 3.0, 4.0])
    >>> loader.set_epoch(0)
    >>> [x.tolist() for x, _ in loader] == first
    True
    """

    def __init__(self, dataset: Dataset, batch_size: int = 1, shuffle: bool = False, seed: int | None = None,
                 drop_last: bool = False, collate_fn: Callable[[list[Any]], Any] | None = None, prefetch: int = 2,
                 sampler: Any = None, device: str | None = None, num_workers: int = 0, pin_memory: bool = False,
                 persistent_workers: bool = False):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers must be a non-negative int, got {num_workers!r}")
        if prefetch < 0:
            raise ValueError(f"prefetch must be non-negative, got {prefetch}")
        if shuffle and sampler is not None:
            raise ValueError("DataLoader: shuffle=True and a sampler exclude each other (the sampler sets the order)")
        self.sampler = sampler
        self.device = None if device is None else canonical_device(device)
        if isinstance(self.device, tuple):
            raise ValueError(f"DataLoader: device is one device, not the set {list(self.device)}")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, batch_size, shuffle, drop_last
        self.collate_fn, self.prefetch, self.num_workers = collate_fn, prefetch, num_workers
        self.pin_memory, self.persistent_workers = pin_memory, persistent_workers
        self.seed = int(np.random.SeedSequence().entropy % (1 << 63)) if seed is None else seed
        self.epoch = 0

    def __len__(self) -> int:
        n = len(self.dataset) if self.sampler is None else len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch`` (its shuffle order); passes count up from there."""
        self.epoch = epoch

    def _order(self) -> np.ndarray:
        """The sample indices of the next pass, in the order it visits them."""
        if self.sampler is not None:
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(self.epoch)
            return np.fromiter(self.sampler, dtype=np.int64)
        n = len(self.dataset)
        return np.random.default_rng([self.seed, self.epoch]).permutation(n) if self.shuffle else np.arange(n)

    def _index_batches(self) -> list[np.ndarray]:
        order = self._order()
        n = len(order)
        stop = n - n % self.batch_size if self.drop_last else n
        return [order[i:i + self.batch_size] for i in range(0, stop, self.batch_size)]

    def _make(self, indices: np.ndarray) -> Any:
        if self.collate_fn is None and array_backed(self.dataset):
            return tuple(np.ascontiguousarray(a) for a in self.dataset.batch(indices))  # type: ignore[attr-defined]
        collate = self.collate_fn or default_collate
        return collate([self.dataset[int(i)] for i in indices])

    def __iter__(self) -> Iterator[Any]:
        device = canonical_device(self.device)  # (the default device is this thread's: read it here)
        batches = self._index_batches()
        self.epoch += 1
        if self.prefetch == 0 and self.num_workers == 0:
            return (_to_tensors(self._make(b), device) for b in batches)
        return self._prefetched(batches, device)

    def _prefetched(self, batches: list[np.ndarray], device: str) -> Iterator[Any]:
        ready: queue.Queue = queue.Queue(maxsize=max(self.prefetch, 1))
        stop = threading.Event()

        def put(item: tuple[str, Any]) -> bool:
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        def made() -> Iterator[Any]:
            if self.num_workers <= 1:
                yield from (self._make(b) for b in batches)
                return
            # a window of batches in flight, taken in order: the loader's order does not depend
            # on which thread finishes first
            import concurrent.futures

            with concurrent.futures.ThreadPoolExecutor(self.num_workers, thread_name_prefix="corvid-DataLoader") as pool:
                window: list[Any] = []
                todo = iter(batches)
                try:
                    for b in todo:
                        window.append(pool.submit(self._make, b))
                        if len(window) >= self.num_workers + max(self.prefetch, 1):
                            yield window.pop(0).result()
                    while window:
                        yield window.pop(0).result()
                finally:
                    for f in window:
                        f.cancel()

        def work() -> None:
            try:
                for batch in made():
                    if stop.is_set():
                        return
                    if not is_cpu(device):  # (the copy to the device, issued ahead of the batch's step)
                        batch = _to_tensors(batch, device)
                    if not put(("batch", batch)):
                        return
            except BaseException as e:  # handed to the consumer, which raises it
                put(("error", e))
                return
            put(("done", None))

        worker = threading.Thread(target=work, name="corvid-DataLoader", daemon=True)
        with _workers_lock:
            _workers[worker] = stop
        worker.start()
        try:
            while True:
                kind, payload = ready.get()
                if kind == "done":
                    return
                if kind == "error":
                    raise payload
                yield _to_tensors(payload, device)
        finally:
            stop.set()
            worker.join()
            with _workers_lock:
                _workers.pop(worker, None)

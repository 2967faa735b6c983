"""Datasets: anything with ``__len__`` and ``__getitem__``, and array-backed ones that hand out
whole batches by slicing their arrays (the :class:`corvid.data.DataLoader` fast path).

>>> ds = TensorDataset(np.arange(6.0).reshape(3, 2), np.array([0, 1, 0]))
>>> len(ds), [t.tolist() for t in ds[1]]
(3, [[2.0, 3.0], 1])
>>> [a.tolist() for a in ds.batch(np.array([2, 0]))]
[[[4.0, 5.0], [0.0, 1.0]], [0, 0]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ShapeError
from ..tensor import Tensor

__all__ = ["ArrayDataset", "Dataset", "Subset", "TensorDataset", "array_backed"]


class Dataset:
    """A map-style dataset (PyTorch's protocol): ``len(ds)`` samples, ``ds[i]`` the i-th one.

    Subclasses define ``__len__`` and ``__getitem__``. A sample is a tensor, a numpy array, a
    number, or a tuple/list/dict of those; the loader's default collation stacks them.

    >>> class Squares(cv.data.Dataset):
    ...     def __len__(self):
    ...         return 4
    ...     def __getitem__(self, i):
    ...         return {"x": float(i), "y": i * i}
    >>> ds = Squares()
    >>> len(ds), ds[3]
    (4, {'x': 3.0, 'y': 9})
    >>> [batch["y"].tolist() for batch in cv.data.DataLoader(ds, batch_size=3)]
    [[0, 1, 4], [9]]
    """

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError


class ArrayDataset(Dataset):
    """A dataset held as numpy arrays of equal length (``arrays``): a sample is one row of each.

    :meth:`batch` returns the rows for many indices at once as numpy arrays, which is how the
    loader builds a batch without touching samples one by one. Subclasses may override
    :meth:`batch` to convert on the way out (e.g. uint8 images to float).

    >>> class Images(cv.data.ArrayDataset):
    ...     def __init__(self, images, labels):
    ...         self.arrays = (images, labels)
    ...     def batch(self, indices):
    ...         images, labels = super().batch(indices)
    ...         return images.astype(np.float32) / 255, labels
    >>> ds = Images(np.array([[0, 255], [255, 0]], np.uint8), np.array([1, 0]))
    >>> len(ds), ds[1][0].tolist()
    (2, [1.0, 0.0])
    >>> x, y = next(iter(cv.data.DataLoader(ds, batch_size=2)))
    >>> x.dtype, x.tolist(), y.tolist()
    (corvid.float32, [[0.0, 1.0], [1.0, 0.0]], [1, 0])
    """

    arrays: tuple[np.ndarray, ...]

    def __len__(self) -> int:
        return len(self.arrays[0]) if self.arrays else 0

    def batch(self, indices: np.ndarray) -> tuple[np.ndarray, ...]:
        """The samples at ``indices`` (int array), one numpy array per field."""
        return tuple(a[indices] for a in self.arrays)

    def __getitem__(self, index: int) -> tuple[Tensor, ...]:
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of range for a dataset of {n} samples")
        return tuple(Tensor(x[0]) for x in self.batch(np.array([index % n])))


class TensorDataset(ArrayDataset):
    """Samples are the rows of the given tensors or arrays (all with the same first dimension).

    Tensors are copied to numpy once, here; ``ds[i]`` is a tuple of tensors (one per input).
    ValueError when the lengths differ or no array is given; IndexError for an index out of range
    (negative indices count from the end).

    >>> ds = cv.data.TensorDataset(cv.arange(6.0).reshape(3, 2), np.array([0, 1, 0]))
    >>> len(ds), ds[-1]
    (3, (Tensor([4., 5.]), Tensor(0)))
    >>> x, y = ds[1]
    >>> x.tolist(), y.item()
    ([2.0, 3.0], 1)
    """

    def __init__(self, *tensors: Any):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        arrays = tuple(t.numpy() if isinstance(t, Tensor) else np.asarray(t) for t in tensors)
        if any(a.ndim == 0 for a in arrays) or len({len(a) for a in arrays}) != 1:
            raise ShapeError(f"TensorDataset: every tensor needs the same first dimension, got shapes "
                             f"{[a.shape for a in arrays]}")
        self.arrays = arrays


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices`` (a sequence, range or int array), in that order.
    Array-backed datasets stay array-backed (batches are sliced, not collated).

    >>> ds = TensorDataset(np.arange(10))
    >>> head = Subset(ds, range(8))
    >>> len(head), head[7][0].item()
    (8, 7)
    """

    def __init__(self, dataset: Dataset, indices: Sequence[int] | np.ndarray):
        self.dataset = dataset
        self.indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(dataset)
        if self.indices.size and (self.indices.min() < -n or self.indices.max() >= n):
            raise IndexError(f"Subset: indices must be in [-{n}, {n}) for a dataset of {n} samples")

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[int(self.indices[index])]

    def batch(self, indices: np.ndarray) -> tuple[np.ndarray, ...]:
        """The samples at ``indices`` of this subset (array-backed datasets only)."""
        return self.dataset.batch(self.indices[indices])  # type: ignore[attr-defined]


def array_backed(dataset: Dataset) -> bool:
    """Whether ``dataset`` hands out whole batches through ``batch(indices)``: an
    :class:`ArrayDataset`, or a :class:`Subset` of one."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return isinstance(dataset, ArrayDataset)

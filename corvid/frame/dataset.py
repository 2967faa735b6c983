"""A frame as a :mod:`corvid.data` dataset: its rows feed a ``DataLoader`` directly.

The features are converted once, when the dataset is made, into one (rows, features) array (the
frame's :meth:`~corvid.frame.DataFrame.to_tensor`, computed), and the target into another; the
dataset is then array-backed, so the loader slices whole batches out of them without touching
rows one by one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..data.dataset import ArrayDataset

__all__ = ["FrameDataset"]


class FrameDataset(ArrayDataset):
    """Samples ``(features, target)`` from a frame's rows: ``features`` the given columns (every
    column but the target when None) as one ``dtype`` vector per row, ``target`` one column (a
    value per row; its own type unless ``target_dtype``) or several (a vector per row). Without
    a target a sample is ``(features,)``.

    Errors as :meth:`DataFrame.to_tensor`: nulls (ValueError), str/datetime columns (TypeError).

    >>> import corvid.frame as cf
    >>> df = cf.DataFrame({"a": [0.0, 1.0, 2.0], "b": [1, 0, 1], "y": [0, 1, 1]})
    >>> ds = df.to_dataset(target="y")
    >>> len(ds), ds.feature_names
    (3, ['a', 'b'])
    >>> x, y = next(iter(cv.data.DataLoader(ds, batch_size=2)))
    >>> x.tolist(), y.tolist()
    ([[0.0, 1.0], [1.0, 0.0]], [0, 1])
    """

    def __init__(self, frame: Any, features: Any = None, target: Any = None, dtype: Any = None,
                 target_dtype: Any = None):
        from .. import dtype as dt
        from .frame import _names

        targets = _names(target)
        names = _names(features) or [c for c in frame.columns if c not in targets]
        self.feature_names, self.target_names = names, targets
        x = frame.to_tensor(names, dtype or dt.float32).numpy()
        arrays = [x]
        if targets:
            if len(targets) == 1:
                col = frame[targets[0]]
                y = col.to_tensor(target_dtype).numpy()
            else:
                y = frame.to_tensor(targets, target_dtype or dtype or dt.float32).numpy()
            arrays.append(np.asarray(y))
        self.arrays = tuple(arrays)

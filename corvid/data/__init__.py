"""corvid.data: datasets, the DataLoader, and dataset loaders (MNIST, Fashion-MNIST).

>>> ds = cv.data.TensorDataset(np.arange(8.0).reshape(4, 2), np.array([0, 1, 1, 0]))
>>> x, y = next(iter(cv.data.DataLoader(ds, batch_size=3)))
>>> x.shape, y.tolist()
((3, 2), [0, 1, 1])
"""

from .dataset import ArrayDataset, Dataset, Subset, TensorDataset
from .download import ChecksumError, data_dir, download_file
from .idx import parse_idx, read_idx
from .loader import DataLoader, default_collate
from .mnist import MNIST, FashionMNIST

__all__ = ["MNIST", "ArrayDataset", "ChecksumError", "DataLoader", "Dataset", "FashionMNIST", "Subset",
           "TensorDataset", "data_dir", "default_collate", "download_file", "parse_idx", "read_idx"]

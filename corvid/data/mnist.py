"""MNIST and Fashion-MNIST: 28x28 grayscale images in 10 classes, read from IDX files.

Files are looked up in the dataset's subfolder of the data folder (see
:mod:`corvid.data.download`), gzipped (``train-images-idx3-ubyte.gz``) or not; an explicit
``root`` may also be the folder holding the files. ``download=True`` fetches missing files from
the mirrors into ``<data folder>/<name>/``, verified against the known md5 of each ``.gz``.

A split whose files are present loads without the other: a folder holding only the
``t10k-*`` files serves ``train=False``. To train on part of it, take subsets::

    test = cv.data.MNIST("../shared/data", train=False)      # finds ../shared/data/mnist/t10k-*
    train, held_out = cv.data.Subset(test, range(9000)), cv.data.Subset(test, range(9000, 10000))
    loader = cv.data.DataLoader(train, batch_size=64, shuffle=True, seed=0)
"""

from __future__ import annotations

import os
import pathlib
from typing import ClassVar

import numpy as np

from ..io import CorruptFileError
from .dataset import ArrayDataset
from .download import data_dir, download_file
from .idx import read_idx

__all__ = ["MNIST", "FashionMNIST"]

_SPLITS = {True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
           False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


class MNIST(ArrayDataset):
    """The MNIST digits: 60,000 training and 10,000 test images.

    ``MNIST(root=None, train=True, download=False)``. A sample is ``(image, label)``: the image a
    float32 tensor (1, 28, 28) with values in [0, 1] (as torchvision's ``ToTensor``), the label
    an int64 class index. The raw data stay available as ``images`` (uint8, (N, 28, 28)) and
    ``labels`` (int64, (N,)).

    Errors: FileNotFoundError (naming the folders searched) when a file is missing and
    ``download`` is False; :class:`corvid.CorruptFileError` for a file that is not valid IDX or
    not this dataset's layout; :class:`corvid.data.ChecksumError` when every mirror serves a
    file with the wrong checksum.

    Here a test split of two white images is written in the layout the class reads (the real
    files are the same, with 10,000 images):

    >>> import pathlib
    >>> def idx(a):   # the IDX bytes of a uint8 array
    ...     return bytes([0, 0, 0x08, a.ndim]) + np.array(a.shape, ">u4").tobytes() + a.tobytes()
    >>> folder = pathlib.Path("data/mnist")
    >>> folder.mkdir(parents=True, exist_ok=True)
    >>> _ = (folder / "t10k-images-idx3-ubyte").write_bytes(idx(np.full((2, 28, 28), 255, np.uint8)))
    >>> _ = (folder / "t10k-labels-idx1-ubyte").write_bytes(idx(np.array([7, 2], np.uint8)))
    >>> test = cv.data.MNIST(root="data", train=False)
    >>> test, test.images.shape
    (MNIST(test, 2 images), (2, 28, 28))
    >>> image, label = test[0]
    >>> image.shape, image.dtype, image.max().item(), label.item()
    ((1, 28, 28), corvid.float32, 1.0, 7)
    >>> cv.data.MNIST(root="data")   # no training files there
    Traceback (most recent call last):
        ...
    FileNotFoundError: MNIST: train-images-idx3-ubyte[.gz] is not in data/mnist or data; pass download=True, ...
    """

    folder: ClassVar[str] = "mnist"
    mirrors: ClassVar[tuple[str, ...]] = ("https://ossci-datasets.s3.amazonaws.com/mnist/",
                                          "http://yann.lecun.com/exdb/mnist/")
    md5: ClassVar[dict[str, str]] = {  # of the .gz files the mirrors serve (torchvision's table)
        "train-images-idx3-ubyte": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "train-labels-idx1-ubyte": "d53e105ee54ea40749a09fcbcd1e9432",
        "t10k-images-idx3-ubyte": "9fb629c4189551a2d022fa330f9573f3",
        "t10k-labels-idx1-ubyte": "ec29112dd5afa0611ce80d1b7f02629c",
    }
    classes: ClassVar[tuple[str, ...]] = tuple(str(i) for i in range(10))

    def __init__(self, root: str | os.PathLike | None = None, train: bool = True, download: bool = False):
        self.train = train
        base = data_dir(root)
        folders = [base / self.folder] + ([base] if root is not None else [])
        paths = [self._locate(name, folders, download) for name in _SPLITS[train]]
        images, labels = (read_idx(p) for p in paths)
        self._validate(images, labels, paths)
        self.images, self.labels = images, labels.astype(np.int64)
        self.arrays = (self.images, self.labels)

    def _locate(self, name: str, folders: list[pathlib.Path], download: bool) -> pathlib.Path:
        for folder in folders:
            for candidate in (folder / (name + ".gz"), folder / name):
                if candidate.is_file():
                    return candidate
        if not download:
            raise FileNotFoundError(
                f"{type(self).__name__}: {name}[.gz] is not in {' or '.join(str(f) for f in folders)}; pass "
                "download=True, or point root= or $CORVID_DATA_DIR at a folder that holds the files")
        return download_file([m + name + ".gz" for m in self.mirrors], folders[0] / (name + ".gz"), self.md5[name])

    def _validate(self, images: np.ndarray, labels: np.ndarray, paths: list[pathlib.Path]) -> None:
        if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
            raise CorruptFileError(f"{paths[0]}: expected uint8 images of 28x28, got {images.dtype} {images.shape}")
        if labels.dtype != np.uint8 or labels.ndim != 1:
            raise CorruptFileError(f"{paths[1]}: expected a uint8 vector of labels, got {labels.dtype} {labels.shape}")
        if len(images) != len(labels):
            raise CorruptFileError(f"{len(images)} images ({paths[0]}) but {len(labels)} labels ({paths[1]})")
        if labels.size and labels.max() >= len(self.classes):
            raise CorruptFileError(f"{paths[1]}: label {labels.max()} is not one of the {len(self.classes)} classes")

    def batch(self, indices: np.ndarray) -> tuple[np.ndarray, ...]:
        """Images as float32 (n, 1, 28, 28) in [0, 1] and labels as int64 (n,), for ``indices``."""
        images = self.images[indices].astype(np.float32)[:, None]
        return np.divide(images, np.float32(255), out=images), self.labels[indices]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({'train' if self.train else 'test'}, {len(self)} images)"


class FashionMNIST(MNIST):
    """Fashion-MNIST (Zalando): clothing images in MNIST's layout, same interface as :class:`MNIST`;
    its files live in the ``fashion-mnist`` subfolder and ``classes`` names the 10 labels.

    >>> import pathlib
    >>> def idx(a):   # the IDX bytes of a uint8 array
    ...     return bytes([0, 0, 0x08, a.ndim]) + np.array(a.shape, ">u4").tobytes() + a.tobytes()
    >>> folder = pathlib.Path("data/fashion-mnist")
    >>> folder.mkdir(parents=True, exist_ok=True)
    >>> _ = (folder / "t10k-images-idx3-ubyte").write_bytes(idx(np.zeros((3, 28, 28), np.uint8)))
    >>> _ = (folder / "t10k-labels-idx1-ubyte").write_bytes(idx(np.array([9, 0, 3], np.uint8)))
    >>> test = cv.data.FashionMNIST(root="data", train=False)
    >>> test, [test.classes[i] for i in test.labels]
    (FashionMNIST(test, 3 images), ['Ankle boot', 'T-shirt/top', 'Dress'])
    >>> x, y = next(iter(cv.data.DataLoader(test, batch_size=3)))
    >>> x.shape, y.tolist()
    ((3, 1, 28, 28), [9, 0, 3])
    """

    folder: ClassVar[str] = "fashion-mnist"
    mirrors: ClassVar[tuple[str, ...]] = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)
    md5: ClassVar[dict[str, str]] = {
        "train-images-idx3-ubyte": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte": "bb300cfdad3c16e7a12a480ee83cd310",
    }
    classes: ClassVar[tuple[str, ...]] = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                                          "Sneaker", "Bag", "Ankle boot")

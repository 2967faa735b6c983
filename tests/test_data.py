"""Datasets, the DataLoader (order, seeds, partial batches, the prefetch thread, errors), IDX
parsing, the MNIST loaders on the offline test split, and downloads from local mirrors (file://
and an http.server on 127.0.0.1) with checksum verification."""

import functools
import gzip
import hashlib
import http.server
import os
import pathlib
import sys
import threading
import time

import numpy as np
import pytest

import corvid as cv
from corvid.data import (MNIST, ChecksumError, DataLoader, Dataset, FashionMNIST, Subset, TensorDataset,
                         download_file, parse_idx, read_idx)
from corvid.data.dataset import array_backed

SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
MNIST_DIR = SHARED / "mnist"
needs_mnist = pytest.mark.skipif(not (MNIST_DIR / "t10k-images-idx3-ubyte.gz").is_file(),
                                 reason="the offline MNIST test split is not available")


def loader_threads():
    return [t for t in threading.enumerate() if t.name == "corvid-DataLoader"]


@pytest.fixture(autouse=True)
def no_thread_left_behind():
    yield
    deadline = time.monotonic() + 2
    while loader_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not loader_threads(), "a DataLoader thread outlived its iteration"


class Squares(Dataset):
    """A generic (not array-backed) dataset: sample i is (i as float array, i*i); can fail at one index."""

    def __init__(self, n, fail_at=None):
        self.n, self.fail_at, self.reads = n, fail_at, 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.reads += 1
        if i == self.fail_at:
            raise KeyError(f"sample {i} is broken")
        return np.array([float(i)]), i * i


def values(loader, field=0):
    return [[int(v) for v in np.asarray(batch[field].numpy()).reshape(-1)] for batch in loader]


# --- datasets ------------------------------------------------------------------------------------------------
def test_tensor_dataset_and_subset():
    ds = TensorDataset(cv.Tensor(np.arange(12.0).reshape(6, 2)), np.arange(6))
    assert len(ds) == 6
    x, y = ds[-1]
    assert x.tolist() == [10.0, 11.0] and y.item() == 5
    with pytest.raises(IndexError):
        ds[6]
    with pytest.raises(ValueError, match="first dimension"):
        TensorDataset(np.zeros(3), np.zeros(4))
    sub = Subset(Subset(ds, [5, 3, 1]), [2, 0])
    assert len(sub) == 2 and sub[0][1].item() == 1 and array_backed(sub) and not array_backed(Squares(3))
    assert [a.tolist() for a in sub.batch(np.array([1]))] == [[[10.0, 11.0]], [5]]
    with pytest.raises(IndexError):
        Subset(ds, [6])


# --- the loader ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dataset", [TensorDataset(np.arange(10)), Squares(10)], ids=["arrays", "samples"])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_every_sample_once_per_epoch_reproducible_and_reshuffled(dataset, prefetch):
    loader = DataLoader(dataset, batch_size=3, shuffle=True, seed=7, prefetch=prefetch)
    assert len(loader) == 4
    epoch0, epoch1 = values(loader), values(loader)
    for epoch in (epoch0, epoch1):
        assert [len(b) for b in epoch] == [3, 3, 3, 1]
        assert sorted(sum(epoch, [])) == list(range(10))
    assert epoch0 != epoch1  # a new permutation each epoch
    again = DataLoader(dataset, batch_size=3, shuffle=True, seed=7, prefetch=prefetch)
    assert values(again) == epoch0 and values(again) == epoch1
    again.set_epoch(1)
    assert values(again) == epoch1
    assert values(DataLoader(dataset, batch_size=3, shuffle=True, seed=8)) != epoch0
    assert sum(values(DataLoader(dataset, batch_size=4)), []) == list(range(10))


def test_drop_last_partial_and_oversized_batches():
    ds = TensorDataset(np.arange(10))
    assert [len(b) for b in values(DataLoader(ds, batch_size=4, drop_last=True))] == [4, 4]
    assert len(DataLoader(ds, batch_size=4, drop_last=True)) == 2
    assert values(DataLoader(ds, batch_size=32)) == [list(range(10))]
    assert values(DataLoader(ds, batch_size=32, drop_last=True)) == []
    empty = TensorDataset(np.zeros((0, 3)))
    assert len(DataLoader(empty, batch_size=2)) == 0 and list(DataLoader(empty, batch_size=2)) == []
    assert list(DataLoader(Squares(0))) == []
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(ds, batch_size=0)


def test_batches_are_tensors_with_collated_fields():
    x, y = next(iter(DataLoader(Squares(5), batch_size=5)))
    assert isinstance(x, cv.Tensor) and x.shape == (5, 1) and x.dtype == cv.float64
    assert y.dtype == cv.int64 and y.tolist() == [0, 1, 4, 9, 16]

    class Dicts(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return {"x": cv.Tensor([float(i), 0.0]), "name": f"s{i}"}

    batch = next(iter(DataLoader(Dicts(), batch_size=3)))
    assert batch["x"].shape == (3, 2) and batch["name"] == ["s0", "s1", "s2"]
    custom = next(iter(DataLoader(Squares(4), batch_size=2, collate_fn=lambda s: sum(v for _, v in s))))
    assert custom == 1
    img, label = next(iter(DataLoader(TensorDataset(np.ones((4, 2, 2), np.float32), np.arange(4)), batch_size=4)))
    assert img.shape == (4, 2, 2) and img.dtype == cv.float32 and (img.sum().item(), label.sum().item()) == (16, 6)


def test_errors_in_the_worker_reach_the_caller_and_threads_end():
    loader = DataLoader(Squares(10, fail_at=5), batch_size=2)
    seen = []
    with pytest.raises(KeyError, match="sample 5 is broken"):
        for x, _ in loader:
            seen.append(x.shape[0])
    assert seen == [2, 2]
    with pytest.raises(KeyError):
        list(DataLoader(Squares(10, fail_at=5), batch_size=2, prefetch=0))


def test_abandoned_iteration_stops_the_worker():
    loader = DataLoader(Squares(1000), batch_size=1, prefetch=4)
    for _ in loader:
        break
    it = iter(loader)
    next(it)
    it.close()


def test_prefetch_prepares_the_next_batches_while_the_caller_works():
    ds = Squares(20)
    it = iter(DataLoader(ds, batch_size=2, prefetch=2))
    next(it)
    # one batch handed out, two queued, and one made that waits for a free slot: 4 batches read
    deadline = time.monotonic() + 2
    while ds.reads < 2 * 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    assert ds.reads == 8  # and no further while the caller holds on to the queue
    it.close()


# --- IDX ------------------------------------------------------------------------------------------------------
def idx_bytes(arr, code):
    header = bytes([0, 0, code, arr.ndim]) + np.array(arr.shape, ">u4").tobytes()
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


@pytest.mark.parametrize("dtype,code", [(np.uint8, 0x08), (np.int8, 0x09), (np.int16, 0x0B), (np.int32, 0x0C),
                                        (np.float32, 0x0D), (np.float64, 0x0E)])
def test_parse_idx_types_and_gzip(dtype, code):
    arr = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype) if np.dtype(dtype).kind != "u" else \
        np.arange(24, dtype=dtype).reshape(2, 3, 4)
    raw = idx_bytes(arr, code)
    for data in (raw, gzip.compress(raw)):
        out = parse_idx(data)
        assert out.dtype == np.dtype(dtype) and out.dtype.isnative
        np.testing.assert_array_equal(out, arr)


def test_corrupt_idx_files_raise_clear_errors(tmp_path):
    good = idx_bytes(np.arange(6, dtype=np.uint8).reshape(2, 3), 0x08)
    cases = {
        "magic": (b"\x01" + good[1:], "magic"),
        "type": (good[:2] + b"\x07" + good[3:], "magic"),
        "short": (good[:3], "too short"),
        "header": (good[:9], "truncated header"),
        "truncated": (good[:-1], "need 6 bytes"),
        "extra": (good + b"\x00", "need 6 bytes"),
        "gzip": (gzip.compress(good)[:-6], "gzip"),
    }
    for name, (data, message) in cases.items():
        with pytest.raises(cv.CorruptFileError, match=message):
            parse_idx(data, name)
    path = tmp_path / "bad-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(good)[:20])
    with pytest.raises(cv.CorruptFileError, match=str(path.name)):
        read_idx(path)


# --- MNIST ----------------------------------------------------------------------------------------------------
@needs_mnist
def test_mnist_offline_test_split(monkeypatch):
    test = MNIST(SHARED, train=False)
    assert len(test) == 10000 and test.images.shape == (10000, 28, 28) and test.images.dtype == np.uint8
    assert test.labels[:8].tolist() == [7, 2, 1, 0, 4, 1, 4, 9] and np.bincount(test.labels).sum() == 10000
    image, label = test[0]
    assert image.shape == (1, 28, 28) and image.dtype == cv.float32 and label.item() == 7
    np.testing.assert_array_equal(image.numpy()[0], test.images[0] / np.float32(255))
    assert len(MNIST(MNIST_DIR, train=False)) == 10000  # root may be the folder holding the files
    monkeypatch.setenv("CORVID_DATA_DIR", str(SHARED))
    assert len(MNIST(train=False)) == 10000
    with pytest.raises(FileNotFoundError, match="train-images"):
        MNIST(train=True)
    with pytest.raises(FileNotFoundError):  # the env folder's mnist/ files are not Fashion-MNIST's
        FashionMNIST(train=False)
    train, held_out = Subset(test, range(9000)), Subset(test, range(9000, 10000))
    batches = list(DataLoader(train, batch_size=1000, shuffle=True, seed=0))
    assert len(batches) == 9 and batches[0][0].shape == (1000, 1, 28, 28)
    assert sorted(np.concatenate([y.numpy() for _, y in batches]).tolist()) == sorted(test.labels[:9000].tolist())
    _, y = next(iter(DataLoader(held_out, batch_size=1000)))
    np.testing.assert_array_equal(y.numpy(), test.labels[9000:])


def write_split(folder, images, labels, prefix="t10k", gz=True):
    folder.mkdir(parents=True, exist_ok=True)
    for name, arr in ((f"{prefix}-images-idx3-ubyte", images), (f"{prefix}-labels-idx1-ubyte", labels)):
        data = idx_bytes(arr, 0x08)
        (folder / (name + (".gz" if gz else ""))).write_bytes(gzip.compress(data) if gz else data)


def test_fashion_mnist_from_a_data_folder_and_layout_checks(tmp_path, monkeypatch):
    images = np.arange(5 * 28 * 28, dtype=np.uint8).reshape(5, 28, 28)
    write_split(tmp_path / "fashion-mnist", images, np.array([0, 9, 3, 3, 1], np.uint8), prefix="train", gz=False)
    monkeypatch.setenv("CORVID_DATA_DIR", str(tmp_path))
    ds = FashionMNIST()
    assert len(ds) == 5 and ds.labels.tolist() == [0, 9, 3, 3, 1] and ds.classes[9] == "Ankle boot"
    np.testing.assert_array_equal(ds.images, images)
    write_split(tmp_path / "a", images[:, :27, :27].copy(), np.zeros(5, np.uint8))
    with pytest.raises(cv.CorruptFileError, match="28x28"):
        MNIST(tmp_path / "a", train=False)
    write_split(tmp_path / "b", images, np.zeros(4, np.uint8))
    with pytest.raises(cv.CorruptFileError, match="5 images"):
        MNIST(tmp_path / "b", train=False)
    write_split(tmp_path / "c", images, np.full(5, 10, np.uint8))
    with pytest.raises(cv.CorruptFileError, match="label 10"):
        MNIST(tmp_path / "c", train=False)


# --- downloads ------------------------------------------------------------------------------------------------
def md5(path):
    return hashlib.md5(pathlib.Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def http_mirror():
    """An http.server on 127.0.0.1 serving the offline MNIST folder; yields its base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(MNIST_DIR))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join()


@needs_mnist
def test_download_from_mirrors_with_checksum(tmp_path, http_mirror):
    name = "t10k-labels-idx1-ubyte.gz"
    good = md5(MNIST_DIR / name)
    dest = tmp_path / "cache" / name
    old_umask = os.umask(0o022)
    try:
        got = download_file([http_mirror + "missing/" + name, http_mirror + name], dest, good)
    finally:
        os.umask(old_umask)
    assert got == dest and md5(dest) == good
    assert dest.stat().st_mode & 0o777 == 0o644  # the umask's mode, as open() gives (it was 0600)
    dest.unlink()
    with pytest.raises(ChecksumError, match="expected 0123"):
        download_file([http_mirror + name, (MNIST_DIR / name).as_uri()], dest, "0123" + good[4:])
    assert list(dest.parent.iterdir()) == []  # nothing kept: no file, no partial download
    with pytest.raises(OSError, match="could not download"):
        download_file([(tmp_path / "nowhere.gz").as_uri()], dest, good)
    assert list(dest.parent.iterdir()) == []


@needs_mnist
def test_mnist_download_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CORVID_DATA_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "tqdm", None)  # tqdm is optional: without it the download is silent
    # the offline copies are re-compressed (same data, another gzip header), so the md5s of the files
    # the real mirrors serve do not match them: the download is refused and nothing is kept
    monkeypatch.setattr(MNIST, "mirrors", (MNIST_DIR.as_uri() + "/",))
    with pytest.raises(ChecksumError, match="t10k-images"):
        MNIST(train=False, download=True)
    assert not any((tmp_path / "mnist").iterdir())
    local = {n: md5(MNIST_DIR / (n + ".gz")) for n in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
    monkeypatch.setattr(MNIST, "md5", local)
    monkeypatch.setattr(MNIST, "mirrors", ((tmp_path / "absent").as_uri() + "/", MNIST_DIR.as_uri() + "/"))
    ds = MNIST(train=False, download=True)
    assert len(ds) == 10000 and sorted(os.listdir(tmp_path / "mnist")) == sorted(n + ".gz" for n in local)
    monkeypatch.setattr(MNIST, "mirrors", ())  # now cached: no download needed
    assert len(MNIST(train=False, download=True)) == 10000


def test_a_gzipped_idx_file_inflates_no_further_than_its_header_announces():
    """A gzip bomb (10 announced bytes, 1 GiB of zeros after them: 1 MB on disk) is refused once
    it passes the announced size, without holding the gigabyte; a truncated stream is refused."""
    import gzip
    import tracemalloc

    from corvid.data.idx import parse_idx

    header = bytes([0, 0, 0x08, 1]) + (10).to_bytes(4, "big")
    good = gzip.compress(header + bytes(range(10)))
    assert parse_idx(good).tolist() == list(range(10))
    bomb = gzip.compress(header + bytes(10) + bytes(1 << 30))
    tracemalloc.start()
    try:
        with pytest.raises(cv.CorruptFileError, match="more than the 18 bytes"):
            parse_idx(bomb, "bomb.gz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20
    with pytest.raises(cv.CorruptFileError, match="truncated gzip"):
        parse_idx(good[:-10], "cut.gz")


def test_num_workers_builds_batches_in_threads_in_the_same_order():
    """PyTorch's ``num_workers``: threads build the batches, the order is the loader's; ``pin_memory``
    and ``persistent_workers`` are accepted; a negative count is a ValueError."""
    import threading
    import time as _time

    seen = set()

    class Slow(cv.data.Dataset):
        def __len__(self):
            return 40

        def __getitem__(self, i):
            seen.add(threading.current_thread().name)
            _time.sleep(0.002 * (i % 3))  # finishing out of order
            return np.array([i, i * i], np.float32), i % 2

    plain = [(x.tolist(), y.tolist()) for x, y in cv.data.DataLoader(Slow(), batch_size=3, shuffle=True, seed=4)]
    seen.clear()
    threaded = cv.data.DataLoader(Slow(), batch_size=3, shuffle=True, seed=4, num_workers=4, pin_memory=True,
                                  persistent_workers=True)
    assert [(x.tolist(), y.tolist()) for x, y in threaded] == plain
    assert len({n for n in seen if n.startswith("corvid-DataLoader")}) > 1
    assert [len(x) for x, _ in cv.data.DataLoader(Slow(), batch_size=7, num_workers=2, prefetch=0)] == [7] * 5 + [5]
    with pytest.raises(ValueError, match="num_workers"):
        cv.data.DataLoader(Slow(), num_workers=-1)

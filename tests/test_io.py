"""save/load for .npy, .npz and safetensors: round trips, laziness, interop, corrupt files."""

import json
import os
import struct

import ml_dtypes
import numpy as np
import pytest

import corvid as cv
from corvid.io import CorruptFileError

DTYPES = ["float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint64", "uint32",
          "uint16", "uint8", "bool"]


def sample(name, shape=(3, 4)):
    rng = np.random.default_rng(0)
    if name == "bool":
        return rng.random(shape) < 0.5
    if name == "bfloat16":
        return rng.normal(size=shape).astype(ml_dtypes.bfloat16)
    if name.startswith(("int", "uint")):
        info = np.iinfo(name)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape).astype(name)
    return rng.normal(size=shape).astype(name)


@pytest.mark.parametrize("name", DTYPES)
def test_safetensors_round_trip_every_dtype(tmp_path, name):
    a = sample(name)
    path = tmp_path / "t.safetensors"
    cv.save(path, {"x": cv.Tensor(a), "empty": cv.zeros(0, 3), "scalar": cv.Tensor(2.5)}, metadata={"k": "v"})
    out = cv.load(path)
    assert out["x"].dtype == cv.Tensor(a).dtype
    np.testing.assert_array_equal(out["x"].numpy(), a)
    assert out["empty"].shape == (0, 3) and out["scalar"].shape == () and out["scalar"].item() == 2.5
    with cv.safe_open(path) as f:
        assert f.metadata() == {"k": "v"} and sorted(f.keys()) == ["empty", "scalar", "x"]


@pytest.mark.parametrize("name", [d for d in DTYPES if d != "bfloat16"])
def test_npy_and_npz_round_trip(tmp_path, name):
    a = sample(name)
    cv.save(tmp_path / "a.npy", cv.Tensor(a))
    np.testing.assert_array_equal(cv.load(tmp_path / "a.npy").numpy(), a)
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), a)  # a plain numpy file
    cv.save(tmp_path / "b.npz", {"a": cv.Tensor(a), "b": cv.arange(3)})
    d = cv.load(tmp_path / "b.npz")
    np.testing.assert_array_equal(d["a"].numpy(), a)
    assert d["b"].tolist() == [0, 1, 2]


def test_fortran_and_big_endian_npy_files_load_like_numpy(tmp_path):
    a = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    np.save(tmp_path / "f.npy", a)
    np.save(tmp_path / "b.npy", np.arange(4, dtype=">i8"))
    np.testing.assert_array_equal(cv.load(tmp_path / "f.npy").numpy(), a)
    assert cv.load(tmp_path / "b.npy").tolist() == [0, 1, 2, 3]


def test_bfloat16_in_numpy_formats_is_refused(tmp_path):
    with pytest.raises(TypeError, match="safetensors"):
        cv.save(tmp_path / "a.npy", cv.ones(2, dtype=cv.bfloat16))


def test_interop_with_the_safetensors_package(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    a, b = sample("float32"), sample("int64", (5,))
    st.save_file({"a": a, "b": b}, str(tmp_path / "theirs.safetensors"), metadata={"m": "1"})
    ours = cv.load(tmp_path / "theirs.safetensors")
    np.testing.assert_array_equal(ours["a"].numpy(), a)
    np.testing.assert_array_equal(ours["b"].numpy(), b)
    cv.save(tmp_path / "ours.safetensors", {"a": cv.Tensor(a), "h": cv.Tensor(sample("float16"))})
    back = st.load_file(str(tmp_path / "ours.safetensors"))
    np.testing.assert_array_equal(back["a"], a)
    np.testing.assert_array_equal(back["h"], sample("float16"))


def test_safe_open_reads_only_the_tensors_asked_for(tmp_path, monkeypatch):
    path = tmp_path / "big.safetensors"
    cv.save(path, {"small": cv.ones(2), "big": cv.zeros(1000, 1000)})
    read = []
    real = os.preadv

    def spy(fd, buffers, offset):
        n = real(fd, buffers, offset)
        read.append(n)
        return n

    monkeypatch.setattr(os, "preadv", spy)
    with cv.safe_open(path) as f:
        assert f.get_tensor("small").tolist() == [1.0, 1.0]
    assert read == [8]  # the million-element tensor was never read
    assert sorted(cv.io.load_safetensors(path, names=["small"])) == ["small"]


def _write_raw(path, header, data=b"", header_len=None):
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text) if header_len is None else header_len))
        f.write(text)
        f.write(data)


@pytest.mark.parametrize("case", ["truncated", "huge_header", "bad_json", "bad_dtype", "out_of_range", "size_mismatch",
                                  "overlap", "trailing", "bad_shape", "empty_file", "not_object"])
def test_corrupt_safetensors_raise_a_clear_error(tmp_path, case):
    path = tmp_path / "bad.safetensors"
    good = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    if case == "truncated":
        _write_raw(path, good, b"\0" * 4)
    elif case == "huge_header":
        _write_raw(path, good, b"\0" * 8, header_len=1 << 40)
    elif case == "bad_json":
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", 5) + b"{nope" + b"\0" * 8)
    elif case == "bad_dtype":
        _write_raw(path, {"a": {"dtype": "F99", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8)
    elif case == "out_of_range":
        _write_raw(path, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 800]}}, b"\0" * 8)
    elif case == "size_mismatch":
        _write_raw(path, {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8)
    elif case == "overlap":
        _write_raw(path, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                          "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12)
    elif case == "trailing":
        _write_raw(path, good, b"\0" * 16)
    elif case == "bad_shape":
        _write_raw(path, {"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8)
    elif case == "empty_file":
        path.write_bytes(b"")
    elif case == "not_object":
        _write_raw(path, [1, 2], b"")
    with pytest.raises(CorruptFileError, match="not a valid safetensors file"):
        cv.load(path)


def test_corrupt_numpy_files_and_pickles_are_refused(tmp_path):
    (tmp_path / "t.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(CorruptFileError):
        cv.load(tmp_path / "t.npy")
    (tmp_path / "t.npz").write_bytes(b"PK\x03\x04 truncated zip")
    with pytest.raises(CorruptFileError):
        cv.load(tmp_path / "t.npz")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(CorruptFileError, match="pickle"):
        cv.load(tmp_path / "obj.npy")


def test_a_failed_save_leaves_the_old_file(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    cv.save(path, {"w": cv.ones(3)})
    with pytest.raises(TypeError):
        cv.save(path, {"w": cv.ones(3), "bad": "not a tensor"})
    assert cv.load(path)["w"].tolist() == [1.0, 1.0, 1.0]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.safetensors"]  # no temporary left behind


def test_unknown_extension_and_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="extension"):
        cv.save(tmp_path / "x.bin", cv.ones(2))
    with pytest.raises(ValueError, match="extension"):
        cv.load(tmp_path / "x.bin")
    with pytest.raises(TypeError, match="dict"):
        cv.save(tmp_path / "x.npz", cv.ones(2))
    with pytest.raises(KeyError, match="no tensor"):
        cv.save(tmp_path / "k.safetensors", {"a": cv.ones(1)})
        with cv.safe_open(tmp_path / "k.safetensors") as f:
            f.get_tensor("b")
    assert os.path.exists(tmp_path / "k.safetensors")

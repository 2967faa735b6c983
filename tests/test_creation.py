"""Creation (constants, ranges, eye, *_like), random numbers, Tensor construction and getting
values back out (numpy/item/tolist/repr/bool/astype/bitcast).

corvid differences, by design: ``arange``/``linspace`` with float arguments give float32 (the
default float) unless a dtype is given; ``empty`` gives zeros; ``rand`` uses 24 random bits per
sample for every float dtype.
"""

import ml_dtypes
import numpy as np
import pytest

import corvid as cv
from corvid import dtype as cd

ALL = list(cd.ALL_DTYPES)
ids = lambda d: d.name  # noqa: E731


def same(t, ref, d=None):
    got = t.numpy()
    ref = np.asarray(ref)
    if d is not None:
        assert t.dtype is d, (t.dtype, d)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_array_equal(got, ref)


# --- constants ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", ALL, ids=ids)
def test_zeros_ones_full(d):
    same(cv.zeros(2, 3, dtype=d), np.zeros((2, 3), dtype=d.np), d)
    same(cv.ones((3,), dtype=d), np.ones(3, dtype=d.np), d)
    same(cv.full((2, 2), 1, dtype=d), np.full((2, 2), 1, dtype=d.np), d)
    same(cv.empty(4, dtype=d), np.zeros(4, dtype=d.np), d)
    x = cv.Tensor(np.zeros((2, 1), dtype=d.np))
    same(cv.zeros_like(x), np.zeros((2, 1), dtype=d.np), d)
    same(cv.ones_like(x), np.ones((2, 1), dtype=d.np), d)
    same(cv.full_like(x, 1), np.ones((2, 1), dtype=d.np), d)
    same(cv.empty_like(x, dtype=cv.float32), np.zeros((2, 1), dtype=np.float32), cd.float32)


def test_constant_defaults_and_edges():
    same(cv.zeros(3), np.zeros(3, dtype=np.float32), cd.float32)
    same(cv.ones(()), np.float32(1), cd.float32)
    same(cv.full((2,), 7), np.array([7, 7]), cd.int64)
    same(cv.full((2,), 2.5), np.array([2.5, 2.5], dtype=np.float32), cd.float32)
    same(cv.full((2,), True), np.array([True, True]), cd.bool_)
    same(cv.full((0, 3), 1.0), np.zeros((0, 3), dtype=np.float32), cd.float32)
    same(cv.full(3, -1, dtype=cv.uint8), np.array([255] * 3, dtype=np.uint8), cd.uint8)
    same(cv.full(2, float("nan"), dtype=cv.float16), np.full(2, np.nan, dtype=np.float16), cd.float16)
    same(cv.full(2, -0.0), np.full(2, -0.0, dtype=np.float32), cd.float32)
    assert np.signbit(cv.full(2, -0.0).numpy()).all()
    same(cv.full(2, 2**63 - 1), np.full(2, 2**63 - 1), cd.int64)
    same(cv.full(2, 2**64 - 1, dtype=cv.uint64), np.full(2, 2**64 - 1, dtype=np.uint64), cd.uint64)
    same(cv.full(2, -2**63), np.full(2, -2**63), cd.int64)
    with pytest.raises(ValueError):
        cv.zeros(-1)
    with pytest.raises(TypeError):
        cv.zeros(2.5)


# --- arange / linspace / eye ------------------------------------------------------------------------------
@pytest.mark.parametrize("args,kw", [((5,), {}), ((2, 9), {}), ((9, 2, -2), {}), ((0, 1, 0.25), {}),
                                     ((-3, 3), {"dtype": "float64"}), ((1.5, 4.0, 0.5), {"dtype": "float64"}),
                                     ((0,), {}), ((5, 1), {}), ((0, 10, 3), {"dtype": "int8"}),
                                     ((0, 10, 3), {"dtype": "uint16"}), ((0, 2, 0.5), {"dtype": "float16"}),
                                     ((0, 2, 0.5), {"dtype": "bfloat16"})], ids=str)
def test_arange(args, kw):
    t = cv.arange(*args, **kw)
    ref = np.arange(*args).astype(cd.to_dtype(kw["dtype"]).np if "dtype" in kw else None)
    if "dtype" not in kw:
        assert t.dtype is (cd.float32 if any(isinstance(a, float) for a in args) else cd.int64)
    np.testing.assert_allclose(t.numpy().astype(np.float64), ref.astype(np.float64), rtol=1e-6)
    assert t.shape == ref.shape
    with pytest.raises(ValueError):
        cv.arange(0, 5, 0)


def test_arange_big_int64():
    t = cv.arange(2**40, 2**40 + 5)
    same(t, np.arange(2**40, 2**40 + 5), cd.int64)


@pytest.mark.parametrize("args", [(0, 1, 5), (-2.5, 7.5, 11), (1, 0, 4), (3, 3, 3), (0, 1, 1), (0, 1, 0),
                                  (0, 10, 7, False)], ids=str)
def test_linspace(args):
    endpoint = args[3] if len(args) > 3 else True
    ref = np.linspace(*args[:3], endpoint=endpoint)
    np.testing.assert_allclose(cv.linspace(*args[:3], endpoint=endpoint).numpy(), ref.astype(np.float32), rtol=1e-6)
    t = cv.linspace(*args[:3], endpoint=endpoint, dtype=cv.float64)
    np.testing.assert_allclose(t.numpy(), ref, rtol=1e-14)
    if endpoint and args[2] > 1:
        assert t.numpy()[-1] == args[1]


@pytest.mark.parametrize("n,m,k", [(3, None, 0), (3, 4, 1), (4, 2, -1), (2, 3, 5), (0, 2, 0), (1, 1, 0)])
def test_eye(n, m, k):
    same(cv.eye(n, m, k), np.eye(n, m, k, dtype=np.float32), cd.float32)
    same(cv.eye(n, m, k, dtype=cv.int8), np.eye(n, m, k, dtype=np.int8), cd.int8)
    same(cv.eye(n, m, k, dtype=cv.bool), np.eye(n, m, k, dtype=bool), cd.bool_)


def test_arange_values_beyond_the_dtype_raise():
    # numpy gives float64 for the first (all four values round to 2**63), PyTorch raises; the
    # int64 arithmetic wrapped them silently to negative numbers
    with pytest.raises(OverflowError, match=r"9223372036854775806 to 9223372036854775809.*int64"):
        cv.arange(2**63 - 2, 2**63 + 2)
    with pytest.raises(OverflowError, match="int64"):
        cv.arange(-2**63 - 2, -2**63 + 2)
    with pytest.raises(OverflowError, match="uint8"):
        cv.arange(250, 260, dtype=cv.uint8)
    same(cv.arange(2**63 - 3, 2**63 - 1), np.arange(2**63 - 3, 2**63 - 1), cd.int64)  # up to the largest int64
    assert cv.arange(2**63, 2**63).numpy().shape == (0,)  # no values, nothing beyond the range


@pytest.mark.parametrize("num", [float("nan"), 2.0])
def test_linspace_num_must_be_an_integer(num):
    with pytest.raises(TypeError):  # numpy: 'float' object cannot be interpreted as an integer
        np.linspace(0, 1, num)
    with pytest.raises(TypeError, match="num must be an integer"):
        cv.linspace(0, 1, num)


def test_linspace_edges():
    with pytest.raises(TypeError, match="bool"):  # the Array API: a floating-point dtype
        cv.linspace(0, 1, 5, dtype=cv.bool)
    with pytest.raises(ValueError, match="non-negative"):
        cv.linspace(0, 1, -1)
    same(cv.linspace(0, 1, np.int64(3)), np.linspace(0, 1, 3).astype(np.float32), cd.float32)


@pytest.mark.parametrize("args", [(-1,), (2, -1), (-3, 2)], ids=str)
def test_eye_of_a_negative_size(args):
    with pytest.raises(ValueError, match="negative dimensions are not allowed"):
        np.eye(*args)
    with pytest.raises(ValueError, match="negative dimensions are not allowed"):
        cv.eye(*args)


def test_eye_needs_integers():
    with pytest.raises(TypeError, match="integers"):
        cv.eye(2.5)


# shapes numpy refuses ("array is too big", "Maximum allowed dimension exceeded"): more than 2**63 - 1
# bytes, or more elements than an int64 counts; a lazy constant of such a shape failed only in the C compiler
TOO_BIG = [((2**63,), "float32"), ((2**40, 2**40), "float32"), ((2**32, 2**32), "int8"), ((2**61,), "float32")]


@pytest.mark.parametrize("shape,d", TOO_BIG, ids=str)
def test_a_tensor_too_big_to_address_is_refused_at_the_call(shape, d):
    with pytest.raises(ValueError):
        np.zeros(shape, d)
    for make in (cv.zeros, cv.ones, cv.empty):
        with pytest.raises(ValueError, match="too big"):
            make(shape, dtype=d)
    with pytest.raises(ValueError, match="too big"):
        cv.full(shape, 7, dtype=d)


def test_other_creations_too_big_to_address():
    with pytest.raises(ValueError, match="too big"):
        cv.rand(2**63)
    with pytest.raises(ValueError, match="too big"):
        cv.eye(2**40)
    with pytest.raises(ValueError, match="too big"):
        cv.arange(2**62)
    with pytest.raises(ValueError, match="too big"):
        cv.linspace(0, 1, 2**62)
    with pytest.raises(ValueError, match="negative dimensions"):
        cv.zeros((2, -1))
    assert cv.zeros((2**60,)).shape == (2**60,)  # 4 EiB fits the limit: refused only if it is ever stored


# --- random -------------------------------------------------------------------------------------------------
def test_seed_determinism():
    cv.manual_seed(123)
    a = cv.rand(50).numpy()
    b = cv.rand(50).numpy()
    cv.manual_seed(123)
    np.testing.assert_array_equal(cv.rand(50).numpy(), a)
    np.testing.assert_array_equal(cv.rand(50).numpy(), b)
    assert not np.array_equal(a, b)
    cv.manual_seed(124)
    assert not np.array_equal(cv.rand(50).numpy(), a)
    cv.manual_seed(2**64 + 123)  # the seed is taken modulo 2**64
    np.testing.assert_array_equal(cv.rand(50).numpy(), a)
    with pytest.raises(TypeError):
        cv.manual_seed(1.5)


def test_random_independent_of_slicing_and_fusion():
    cv.manual_seed(7)
    full = cv.rand(1000).numpy()
    cv.manual_seed(7)
    np.testing.assert_array_equal(cv.rand(1000)[::3].numpy(), full[::3])
    cv.manual_seed(7)
    np.testing.assert_array_equal(cv.rand(1000)[::-7].numpy(), full[::-7])
    cv.manual_seed(7)
    np.testing.assert_allclose((cv.rand(1000) * 2 + 1).numpy(), full * 2 + 1, rtol=1e-6)
    cv.manual_seed(7)
    np.testing.assert_allclose(cv.rand(1000).sum().numpy(), full.astype(np.float64).sum(), rtol=1e-5)
    cv.manual_seed(7)
    np.testing.assert_array_equal(cv.rand(10, 100).numpy().reshape(-1), full)
    cv.manual_seed(7)
    np.testing.assert_array_equal(cv.rand(1000).reshape(10, 100).T.numpy(), full.reshape(10, 100).T)
    # the counter continues across draws: two draws of 500 are the first 1000
    cv.manual_seed(7)
    x, y = cv.rand(500), cv.rand(500)
    np.testing.assert_array_equal(cv.cat([x, y]).numpy(), full)
    cv.manual_seed(7)
    n_full = cv.randn(300).numpy()
    cv.manual_seed(7)
    np.testing.assert_array_equal(cv.randn(300)[1::2].numpy(), n_full[1::2])
    cv.manual_seed(7)
    i_full = cv.randint(0, 100, size=(300,)).numpy()
    cv.manual_seed(7)
    np.testing.assert_array_equal(cv.randint(0, 100, size=300)[::-2].numpy(), i_full[::-2])


def test_rand_distribution():
    cv.manual_seed(0)
    u = cv.rand(100_000).numpy().astype(np.float64)
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > 9500
    n = cv.randn(100_000).numpy().astype(np.float64)
    assert np.isfinite(n).all()
    assert abs(n.mean()) < 0.02 and abs(n.std() - 1) < 0.02
    assert abs((n ** 3).mean()) < 0.05 and abs((n ** 4).mean() - 3) < 0.1
    assert abs((np.abs(n) < 1).mean() - 0.6827) < 0.01


@pytest.mark.parametrize("d", [cd.float16, cd.bfloat16, cd.float32, cd.float64], ids=ids)
def test_rand_dtypes(d):
    cv.manual_seed(1)
    u = cv.rand(2, 500, dtype=d)
    assert u.dtype is d and u.shape == (2, 500)
    x = u.numpy().astype(np.float64)
    assert x.min() >= 0 and x.max() <= 1  # float16/bfloat16 may round up to 1
    n = cv.randn(1000, dtype=d)
    assert n.dtype is d and np.isfinite(n.numpy().astype(np.float64)).all()
    with pytest.raises(TypeError):
        cv.rand(2, dtype=cv.int32)
    with pytest.raises(TypeError):
        cv.randn(2, dtype=cv.int32)


def test_rand_float32_strictly_below_one():
    cv.manual_seed(3)
    assert cv.rand(100_000).numpy().max() < 1.0


@pytest.mark.parametrize("low,high,d", [(0, 10, None), (-5, 5, "int8"), (0, 256, "uint8"), (10, 11, None),
                                        (-2**40, 2**40, None), (0, 3, "float32")], ids=str)
def test_randint(low, high, d):
    cv.manual_seed(5)
    t = cv.randint(low, high, size=(20_000,), dtype=d)
    assert t.dtype is (cd.to_dtype(d) if d else cd.int64)
    x = t.numpy().astype(np.float64)
    assert x.min() >= low and x.max() < high
    if high - low <= 256:
        assert len(np.unique(x)) == high - low  # every value shows up
    assert abs(x.mean() - (low + high - 1) / 2) < (high - low) * 0.01 + 0.01
    with pytest.raises(ValueError):
        cv.randint(5, 5)


def test_randint_single_arg_and_scalar_shape():
    cv.manual_seed(0)
    t = cv.randint(4, size=(3, 2))
    assert t.shape == (3, 2) and t.numpy().min() >= 0 and t.numpy().max() < 4
    assert cv.randint(3).shape == ()


# --- construction and conversion -------------------------------------------------------------------------
@pytest.mark.parametrize("d", ALL, ids=ids)
def test_tensor_from_numpy_roundtrip(d):
    if d.is_bool:
        a = np.array([[True, False], [False, True]])
    elif d.is_int:
        info = np.iinfo(d.np)
        a = np.array([[info.min, info.max], [0, 1]], dtype=d.np)
    else:
        a = np.array([[0.0, -0.0], [np.inf, np.nan], [1.5, -2.25]]).astype(d.np)
    t = cv.Tensor(a)
    assert t.dtype is d and t.shape == a.shape
    out = t.numpy()
    assert out.dtype == d.np
    np.testing.assert_array_equal(out.astype(np.float64) if d.is_float else out, a.astype(np.float64) if d.is_float else a)
    if d.is_float:
        np.testing.assert_array_equal(np.signbit(out.astype(np.float32)), np.signbit(a.astype(np.float32)))
    # non-contiguous and byte-swapped inputs are copied in order
    f = (lambda x: x.astype(np.float64)) if d.is_float else (lambda x: x)
    np.testing.assert_array_equal(f(cv.Tensor(a.T).numpy()), f(a.T))
    np.testing.assert_array_equal(f(cv.Tensor(a[::-1]).numpy()), f(a[::-1]))
    assert t.tolist() == a.tolist() or d.is_float
    # 0-d arrays stay 0-d
    s = cv.Tensor(a[0, 0])
    assert s.shape == () and s.dtype is d
    assert cv.Tensor(a.reshape(-1)[0:1].reshape(())).shape == ()


def test_byteswapped_input():
    a = np.arange(4, dtype=">i4")
    t = cv.Tensor(a)
    assert t.dtype is cd.int32
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2, 3])


def test_tensor_from_scalars_and_lists():
    assert cv.Tensor(1).dtype is cd.int64 and cv.Tensor(1).shape == ()
    assert cv.Tensor(1.5).dtype is cd.float32
    assert cv.Tensor(True).dtype is cd.bool_
    assert cv.Tensor(3, dtype=cv.uint8).dtype is cd.uint8
    assert cv.Tensor([1, 2]).dtype is cd.int64
    assert cv.Tensor([1, 2.5]).dtype is cd.float32
    assert cv.Tensor([True, False]).dtype is cd.bool_
    assert cv.Tensor([True, 2]).dtype is cd.int64
    assert cv.Tensor([[1, 2], [3, 4]], dtype="int16").dtype is cd.int16
    assert cv.Tensor([]).shape == (0,) and cv.Tensor([]).dtype is cd.float32
    assert cv.Tensor([[]]).shape == (1, 0)
    assert cv.Tensor((1, 2, 3)).tolist() == [1, 2, 3]
    same(cv.Tensor([[1.5, 2], [3, 4]]), np.array([[1.5, 2], [3, 4]], dtype=np.float32))
    same(cv.Tensor(np.float64(2.5)), np.float64(2.5), cd.float64)
    same(cv.Tensor(np.int8(-3)), np.int8(-3), cd.int8)
    same(cv.Tensor(ml_dtypes.bfloat16(1.5)), np.array(1.5, dtype=ml_dtypes.bfloat16), cd.bfloat16)
    same(cv.Tensor([1.0, 2.0], dtype=cv.bfloat16), np.array([1, 2], dtype=ml_dtypes.bfloat16), cd.bfloat16)
    with pytest.raises((TypeError, ValueError)):
        cv.Tensor([[1, 2], [3]])
    with pytest.raises(TypeError):
        cv.Tensor(np.array([1 + 2j], dtype=np.clongdouble))
    with pytest.raises(TypeError):
        cv.Tensor(np.array(["a"]))
    t = cv.Tensor([1.0, 2.0])
    assert cv.Tensor(t).node is t.node
    assert cv.Tensor(t, dtype=cv.int32).dtype is cd.int32


def test_item_tolist_bool_float_int():
    assert cv.Tensor(2.5).item() == 2.5 and isinstance(cv.Tensor(2.5).item(), float)
    assert cv.Tensor([7]).item() == 7 and isinstance(cv.Tensor([7]).item(), int)
    assert cv.Tensor([[True]]).item() is True
    assert cv.Tensor(np.uint64(2**64 - 1)).item() == 2**64 - 1
    with pytest.raises(ValueError):
        cv.Tensor([1, 2]).item()
    assert cv.Tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert cv.Tensor(5).tolist() == 5
    assert bool(cv.Tensor(0.0)) is False and bool(cv.Tensor([3])) is True
    with pytest.raises(ValueError):
        bool(cv.Tensor([1, 2]))
    assert float(cv.Tensor(2)) == 2.0 and int(cv.Tensor(2.9)) == 2
    assert [10, 20, 30][cv.Tensor(1)] == 20
    with pytest.raises(TypeError):
        [1][cv.Tensor(0.0)]
    assert np.asarray(cv.Tensor([1, 2]), dtype=np.float64).dtype == np.float64


def test_repr():
    assert repr(cv.Tensor([1.0, 2.0])) == "Tensor([1., 2.])"
    assert repr(cv.Tensor([1, 2])) == "Tensor([1, 2])"
    assert repr(cv.Tensor([1, 2], dtype=cv.int8)) == "Tensor([1, 2], dtype=int8)"
    assert repr(cv.Tensor(True)) == "Tensor(True)"
    assert "dtype=bfloat16" in repr(cv.Tensor([1.5], dtype=cv.bfloat16))
    assert repr(cv.zeros(0)) == "Tensor([])"
    r = repr(cv.Tensor([[1, 2], [3, 4]]))
    assert r == "Tensor([[1, 2],\n        [3, 4]])", r


# --- astype / bitcast ------------------------------------------------------------------------------------
def _cast_source(d):
    if d.is_bool:
        return np.array([True, False, True])
    if d.is_int:
        info = np.iinfo(d.np)
        return np.array([info.min, info.max, 0, 1, 100 % info.max], dtype=d.np)
    # values representable in every integer type, and special floats (cast only to floats/bool)
    return np.array([0.0, 1.0, 2.75, 100.5, 127.9, 0.0, -0.0]).astype(d.np)


@pytest.mark.parametrize("src", ALL, ids=ids)
@pytest.mark.parametrize("dst", ALL, ids=ids)
def test_astype(src, dst):
    a = _cast_source(src)
    t = cv.Tensor(a).astype(dst)
    assert t.dtype is dst
    if src.is_float and dst.is_int:
        ref = np.trunc(a.astype(np.float64)).astype(dst.np)  # in range for every int dtype
    elif src.is_bool or src.is_int:
        ref = a.astype(dst.np) if not (dst is cd.bfloat16) else a.astype(np.float64).astype(dst.np)
    else:
        ref = a.astype(np.float64).astype(dst.np) if not dst.is_bool else a != 0
    got = t.numpy()
    if dst.is_float:
        # int64 -> float32 etc. may round differently via float32 for float16/bfloat16: allow 1e-2 there
        rt = 1e-2 if dst in (cd.float16, cd.bfloat16) else 0
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rt)
    else:
        np.testing.assert_array_equal(got, ref)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("src", [cd.float16, cd.bfloat16, cd.float32, cd.float64], ids=ids)
@pytest.mark.parametrize("dst", [cd.uint32, cd.uint64], ids=ids)
def test_floats_out_of_an_unsigned_range_convert_as_numpy_does_on_x86(src, dst):
    """C leaves these undefined (gcc's vector code saturated: 1e20 -> 4294967295, -3.0 -> 2**64 - 1);
    numpy's scalar conversion goes through int64 (nan and values out of range: INT64_MIN), and to
    uint64 takes values from 2**63 up through x - 2**63."""
    vals = [-1.5, -3.0, -1e9, 4e9, 1e10, -1e10, 1e20, -1e20, -0.0, 2.5, np.nan, np.inf, -np.inf,
            1.8446744e19, 9.3e18, 2.0 ** 63, 2.0 ** 64, 4294967295.0, 4294967296.0]
    a = np.array(vals * 20, np.float64).astype(src.np)  # (long enough for the vector loops)
    want = np.array([x.astype(dst.np) for x in a])  # numpy's scalar conversions (its SIMD loop differs for uint32)
    np.testing.assert_array_equal(cv.Tensor(a).astype(dst).numpy(), want)


def test_astype_specials():
    a = np.array([np.nan, np.inf, -np.inf, -0.0, 65520.0, 1e-8], dtype=np.float32)
    np.testing.assert_array_equal(cv.Tensor(a).astype(cv.float16).numpy(), a.astype(np.float16))
    np.testing.assert_array_equal(cv.Tensor(a).astype(cv.bfloat16).numpy().astype(np.float32),
                                  a.astype(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_array_equal(cv.Tensor(a).astype(cv.bool).numpy(), a != 0)
    np.testing.assert_array_equal(cv.Tensor(a).astype(cv.float64).numpy(), a.astype(np.float64))
    assert np.signbit(cv.Tensor(a).astype(cv.float16).numpy()[3])
    # bfloat16 round-to-nearest-even at the store
    b = np.array([1.00390625, 1.01171875, 3.0e38, -1e-40], dtype=np.float32)
    np.testing.assert_array_equal(cv.Tensor(b).astype(cv.bfloat16).numpy(), b.astype(ml_dtypes.bfloat16))
    # int -> narrower int wraps
    i = np.array([300, -200, 70000], dtype=np.int64)
    np.testing.assert_array_equal(cv.Tensor(i).astype(cv.int8).numpy(), i.astype(np.int8))
    np.testing.assert_array_equal(cv.Tensor(i).astype(cv.uint16).numpy(), i.astype(np.uint16))
    # float -> int truncates toward zero
    f = np.array([-2.7, -0.5, 0.5, 2.7], dtype=np.float64)
    np.testing.assert_array_equal(cv.Tensor(f).astype(cv.int32).numpy(), [-2, 0, 0, 2])
    np.testing.assert_array_equal(cv.Tensor(f).astype(cv.uint8).numpy()[2:], [0, 2])


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("int32", "float32"), ("float32", "uint32"),
                                     ("float16", "int16"), ("uint16", "float16"), ("bfloat16", "uint16"),
                                     ("uint16", "bfloat16"), ("float64", "int64"), ("int64", "uint64"),
                                     ("int8", "uint8"), ("bool", "int8"), ("float16", "bfloat16")])
def test_bitcast(src, dst):
    s, d = cd.to_dtype(src), cd.to_dtype(dst)
    if s.is_float:
        a = np.array([1.0, -2.5, np.inf, -0.0, 0.0, 3.0e-5]).astype(s.np)
    elif s.is_bool:
        a = np.array([True, False])
    else:
        a = np.array([0, 1, 0x3C00, 0x3F80, 0x7F, 100], dtype=np.int64).astype(s.np)
    t = cv.Tensor(a).bitcast(d)
    assert t.dtype is d
    ref = a.view(d.np)
    got = t.numpy()
    np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8))
    np.testing.assert_array_equal(cv.Tensor(a).bitcast(d).bitcast(s).numpy().view(np.uint8), a.view(np.uint8))
    with pytest.raises(ValueError):
        cv.Tensor(a).bitcast(cv.float64 if s.itemsize != 8 else cv.int8)


def test_bitcast_nan_payload_through_fused_kernel():
    u = np.array([0x7FC00001, 0xFF800000, 0x00000001], dtype=np.uint32)
    out = (cv.Tensor(u).bitcast(cv.float32).bitcast(cv.uint32) + 0).numpy()
    np.testing.assert_array_equal(out, u)

"""Bad input raises at the call with a message naming the shapes/dtypes; nothing crashes the interpreter."""

import numpy as np
import pytest

import corvid as cv


@pytest.fixture
def x():
    return cv.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))


def test_broadcast_mismatch(x):
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4,\)"):
        x + cv.Tensor(np.ones(4, np.float32))
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        x.expand(4, 3)


def test_matmul_errors(x):
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(2, 3\)"):
        x @ x
    with pytest.raises(ValueError, match=r"at least 1 dimension.*\(\)"):
        cv.Tensor(1.0) @ x
    with pytest.raises(ValueError, match=r"at least 1 dimension"):
        x.matmul(cv.Tensor(2.0))


def test_reshape_wrong_size(x):
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 2\)"):
        x.reshape(4, 2)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, -1\)"):
        x.reshape(4, -1)
    with pytest.raises(ValueError, match="only one dimension can be -1"):
        x.reshape(-1, -1)


def test_bad_axis(x):
    with pytest.raises(IndexError, match="axis 2 is out of range.*2 dimensions"):
        x.sum(axis=2)
    with pytest.raises(IndexError, match="axis -3"):
        x.max(axis=-3)
    with pytest.raises(ValueError, match=r"repeated axis.*\(2, 3\)"):
        x.sum(axis=(0, -2))


def test_non_int_axis_message(x):
    """Open: sum(axis=1.0) raises TypeError("'float' object is not iterable") from _axes in ops/reduce.py."""
    with pytest.raises(TypeError, match="axis must be an int"):
        x.sum(axis=1.0)


def test_bad_permutation(x):
    with pytest.raises(ValueError, match=r"not a permutation.*\(2, 3\)"):
        x.permute(0, 0)
    with pytest.raises(ValueError, match="not a permutation"):
        x.permute(0)
    with pytest.raises(IndexError, match="out of range"):
        x.permute(0, 2)


def test_bad_dtype_names(x):
    with pytest.raises((TypeError, ValueError), match="float33"):
        x.astype("float33")
    with pytest.raises((TypeError, ValueError), match="nope"):
        cv.Tensor([1, 2], dtype="nope")
    with pytest.raises((TypeError, ValueError), match="float32.*int8|int8.*float32"):
        x.bitcast("int8")


def test_complex_and_ragged_data():
    with pytest.raises(TypeError, match="complex"):
        cv.Tensor(np.array([1 + 2j]), dtype=cv.float32)  # complex data is supported, a real target is not
    with pytest.raises(TypeError, match="complex"):
        cv.Tensor(1j, dtype=cv.float64)
    with pytest.raises((TypeError, ValueError)):
        cv.Tensor(["a", "b"])


def test_ragged_list_message():
    """Open: np.iscomplexobj in tensor._to_numpy raises numpy's inhomogeneous-shape error first."""
    with pytest.raises((TypeError, ValueError), match="ragged|cannot make a tensor"):
        cv.Tensor([[1, 2], [3]])


def test_indexing_errors(x):
    with pytest.raises(IndexError, match="index 2 is out of bounds for axis 0 with size 2"):
        x[2]
    with pytest.raises(IndexError, match="index -4 is out of bounds for axis 1 with size 3"):
        x[0, -4]
    with pytest.raises(IndexError, match=r"too many indices.*\(2, 3\)"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    for bad in (1.5, "a", {0: 1}):
        with pytest.raises(TypeError, match="unsupported index"):
            x[bad]
    with pytest.raises(TypeError, match="integer or boolean"):  # array indices: tests/test_indexing.py
        x[cv.Tensor([0.0, 1.0])]


def test_bitwise_on_floats(x):
    for f in (lambda: x & x, lambda: x | 1, lambda: x ^ x, lambda: ~x, lambda: x << 1, lambda: x >> 1):
        with pytest.raises(TypeError, match="float32"):
            f()
    b = cv.Tensor([True, False])
    with pytest.raises(TypeError, match="bool"):
        b << b


def test_negating_bool():
    with pytest.raises(TypeError, match="bool"):
        -cv.Tensor([True, False])
    with pytest.raises(TypeError, match="bool"):
        cv.Tensor([True]) - cv.Tensor([False])


def test_truth_value_and_item_of_many_elements(x):
    with pytest.raises(ValueError, match=r"\(2, 3\).*ambiguous"):
        bool(x)
    with pytest.raises(ValueError, match=r"one element.*\(2, 3\)"):
        x.item()
    with pytest.raises(ValueError, match=r"\(0,\)"):
        bool(cv.Tensor(np.zeros(0, np.float32)))
    assert bool(cv.Tensor([3.0])) is True and cv.Tensor([[7]]).item() == 7


def test_extreme_of_empty_axis():
    e = cv.Tensor(np.zeros((0, 3), np.float32))
    with pytest.raises(ValueError, match=r"max of an empty axis.*\(0, 3\)"):
        e.max(axis=0)
    with pytest.raises(ValueError, match="min of an empty axis"):
        e.min()
    with pytest.raises(ValueError, match="empty axis"):
        e.argmax(axis=0)
    # fine along the non-empty axis, and sum has an identity
    assert e.max(axis=1).shape == (0,)
    np.testing.assert_array_equal(e.sum(axis=0).numpy(), np.zeros(3, np.float32))


def test_bad_device():
    with pytest.raises(ValueError, match="unknown device 'TPU9'.*CPU"):
        cv.Tensor([1.0], device="TPU9")
    with pytest.raises(TypeError, match="device must be a string"):
        cv.zeros(3, device=3)


def test_other_shape_errors(x):
    with pytest.raises(ValueError, match=r"pad.*\(2, 3\)"):
        x.pad(((1, 1),))
    with pytest.raises(ValueError, match=r"shrink.*\(2, 3\)"):
        x.shrink(((0, 3), (0, 3)))
    with pytest.raises(ValueError, match=r"cannot squeeze axis 0 of size 2"):
        cv.squeeze(x, 0)
    with pytest.raises(ValueError, match="negative dimensions"):
        cv.zeros((2, -1))
    with pytest.raises(ValueError, match=r"cat.*\(2, 3\).*\(3, 2\)"):
        cv.cat([x, x.T], axis=0)
    with pytest.raises(TypeError, match="unsupported operand type.*str"):
        x + "a"


@pytest.mark.parametrize("e", [-1, np.int64(-2), [1, -1, 2], np.array([-1])], ids=repr)
def test_integers_to_a_known_negative_integer_power(e):
    with pytest.raises(ValueError, match="negative integer powers"):
        np.array([2, 1, -1]) ** e
    with pytest.raises(ValueError, match="negative integer powers"):
        cv.Tensor([2, 1, -1]) ** e


def test_negative_powers_known_only_in_the_kernel():
    with pytest.raises(OverflowError, match="uint8"):  # as numpy: -1 is no uint8 at all
        cv.Tensor(np.array([2], np.uint8)) ** -1
    assert (cv.Tensor([2.0]) ** -1).tolist() == [0.5]
    # a tensor exponent's values are known when the kernel runs: what PyTorch's integer pow gives
    base, e = cv.Tensor([2, 1, -1, -1, -1, 0]), cv.Tensor([-1, -1, -1, -2, -3, -1])
    assert (base ** e).tolist() == [0, 1, -1, 1, -1, 0]


def test_concatenating_zero_dimensional_tensors():
    with pytest.raises(ValueError, match="zero-dimensional arrays cannot be concatenated"):
        np.concatenate([np.array(1.0), np.array(2.0)])
    with pytest.raises(ValueError, match="zero-dimensional tensors cannot be concatenated.*position 1"):
        cv.cat([cv.Tensor([1.0]), cv.Tensor(2.0)])
    with pytest.raises(ValueError, match="zero-dimensional"):
        cv.concat([cv.Tensor(1.0), cv.Tensor(2.0)])
    assert cv.stack([cv.Tensor(1.0), cv.Tensor(2.0)]).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("axes", [(0, 0), (0, -2), (1, 1, 0)], ids=str)
def test_flip_with_an_axis_named_twice(x, axes):
    with pytest.raises(ValueError, match="repeated axis"):
        np.flip(np.zeros((2, 3)), axes)
    with pytest.raises(ValueError, match="more than once"):
        x.flip(axes)
    with pytest.raises(ValueError, match="more than once"):
        cv.flip(x, axis=axes)
    assert x.flip((0, 1)).tolist() == [[5.0, 4.0, 3.0], [2.0, 1.0, 0.0]]


def test_clip_without_bounds_is_the_identity_in_the_namespace_and_an_error_on_the_tensor(x):
    # the Array API: with min and max both None the result equals x (numpy 2 agrees); the Tensor
    # method is PyTorch's clip (its clamp), which raises: ValueError and RuntimeError both catch it
    np.testing.assert_array_equal(np.clip(np.arange(3), None, None), np.arange(3))
    assert cv.clip(x).tolist() == x.tolist() and cv.clip(x).dtype is x.dtype
    for method in (x.clip, x.clamp):
        with pytest.raises(RuntimeError, match="At least one of 'min' or 'max'"):
            method(None, None)
        with pytest.raises(ValueError):
            method()


def test_views_too_big_to_address(x):
    with pytest.raises(ValueError, match="expand: .*too big"):
        x.reshape(6, 1).expand(6, 2**62)
    with pytest.raises(ValueError, match="too big"):
        cv.ones((1, 2**31)).expand(2**62, 2**31)
    with pytest.raises(ValueError, match="too big"):  # a broadcast is an expand
        cv.ones((2**40, 1)) + cv.ones((1, 2**40))
    with pytest.raises(ValueError, match="pad: .*too big"):
        x.pad(((0, 0), (0, 2**62)))


# --- nothing reachable crashes the interpreter ---------------------------------------------------------

def test_integer_division_by_zero_does_not_crash():
    a = cv.Tensor(np.array([7, -7, 0, 5], np.int32))
    z = cv.Tensor(np.zeros(4, np.int32))
    np.testing.assert_array_equal((a // z).numpy(), np.zeros(4, np.int32))
    np.testing.assert_array_equal((a % z).numpy(), np.zeros(4, np.int32))
    assert (cv.Tensor(np.array([5], np.int64)) // 0).numpy().tolist() == [0]


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_int_min_floordiv_minus_one_does_not_crash(dtype):
    lo = np.iinfo(dtype).min
    a = cv.Tensor(np.array([lo, lo, 3], dtype))
    m = cv.Tensor(np.array([-1, -1, -1], dtype))
    q = (a // m).numpy()
    r = (a % m).numpy()
    assert q.tolist() == [lo, lo, -3]  # wraps like numpy's two's complement result
    assert r.tolist() == [0, 0, 0]


def test_huge_shifts_do_not_crash():
    a = cv.Tensor(np.array([1, -8, 123456], np.int32))
    for s in (31, 32, 33, 1000, 2**31 - 1):
        left = (a << s).numpy()
        right = (a >> s).numpy()
        assert left.dtype == np.int32 and right.dtype == np.int32
        if s >= 32:
            assert left.tolist() == [0, 0, 0]
            assert right.tolist() == [0, -1, 0]
    neg = (a << -1).numpy()
    assert neg.dtype == np.int32
    assert (cv.Tensor(np.array([1], np.uint8)) << 200).numpy().tolist() == [0]


def test_huge_pad_and_empty_slices_do_not_crash():
    x = cv.Tensor(np.ones((2, 2), np.float32))
    big = x.pad(((0, 0), (0, 10**6)))
    assert big.shape == (2, 10**6 + 2)
    assert float(big.sum().item()) == 4.0
    # a pad so large its tensor is never built as a whole: only its shape and a reduce run
    huge = x.pad(((10**9, 10**9), (0, 0)))
    assert huge.shape == (2 * 10**9 + 2, 2)
    assert len(huge.sum().schedule()) == 1
    assert x[5:1].shape == (0, 2) and x[5:1].numpy().shape == (0, 2)
    assert x[::-100].numpy().tolist() == [[1.0, 1.0]]


def test_int_overflow_wraps():
    a = cv.Tensor(np.array([np.iinfo(np.int32).max], np.int32))
    assert (a + 1).numpy().tolist() == [np.iinfo(np.int32).min]
    assert (-cv.Tensor(np.array([np.iinfo(np.int32).min], np.int32))).numpy().tolist() == [np.iinfo(np.int32).min]
    assert abs(cv.Tensor(np.array([-128], np.int8))).numpy().tolist() == [-128]

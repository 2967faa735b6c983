"""Movement ops (views) against numpy: reshape, permute, transpose, expand, pad, shrink, slicing,
flip, squeeze/unsqueeze, flatten, __getitem__; chains of them; views fed into elementwise ops and
reductions."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import corvid as cv
from corvid import dtype as cd

A = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)


def same(t, ref):
    got = t.numpy()
    ref = np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_array_equal(got, ref)


def test_reshape():
    t = cv.Tensor(A)
    same(t.reshape(6, 4), A.reshape(6, 4))
    same(t.reshape((4, -1)), A.reshape(4, -1))
    same(t.reshape(-1), A.reshape(-1))
    same(t.reshape(1, 24, 1), A.reshape(1, 24, 1))
    same(cv.Tensor(np.int32(5)).reshape(1, 1), np.full((1, 1), 5))
    same(cv.Tensor(A[:1, :1, :1].copy()).reshape(()), A[0, 0, 0])
    same(cv.Tensor(np.zeros((0, 3))).reshape(3, 0, 5), np.zeros((3, 0, 5)))
    with pytest.raises(ValueError):
        t.reshape(5, -1)
    with pytest.raises(ValueError):
        t.reshape(-1, -1)
    with pytest.raises(ValueError):
        t.reshape(7, 3)


def test_permute_transpose():
    t = cv.Tensor(A)
    same(t.permute(2, 0, 1), A.transpose(2, 0, 1))
    same(t.permute((1, 2, 0)), A.transpose(1, 2, 0))
    same(t.permute(-1, 0, 1), A.transpose(2, 0, 1))
    same(t.transpose(0, 2), np.swapaxes(A, 0, 2))
    same(t.transpose(), np.swapaxes(A, -2, -1))
    same(t.T, A.T)
    same(t.mT, np.swapaxes(A, -1, -2))
    same(cv.Tensor(np.float32(1)).T, np.float32(1))
    with pytest.raises(ValueError):
        t.permute(0, 0, 1)
    with pytest.raises(ValueError):
        cv.Tensor([1, 2]).mT


def test_expand_broadcast_to():
    b = np.arange(3, dtype=np.float32).reshape(3, 1)
    t = cv.Tensor(b)
    same(t.expand(2, 3, 4), np.broadcast_to(b, (2, 3, 4)))
    same(t.expand(-1, 5), np.broadcast_to(b, (3, 5)))
    same(t.broadcast_to((3, 0)), np.zeros((3, 0)))
    same(cv.Tensor(np.float32(2)).broadcast_to((2, 2)), np.full((2, 2), 2.0))
    with pytest.raises(ValueError):
        t.expand(4, 4)
    with pytest.raises(ValueError):
        t.expand(3)


@pytest.mark.parametrize("d", [cd.bool_, cd.int8, cd.uint32, cd.float16, cd.bfloat16, cd.float64], ids=lambda d: d.name)
def test_pad(d):
    a = (np.arange(6).reshape(2, 3) % 2).astype(d.np)
    t = cv.Tensor(a)
    same(t.pad(((1, 2), (0, 1))), np.pad(a, ((1, 2), (0, 1))))
    same(t.pad([0, 1, 2, 0], value=1), np.pad(a, ((0, 1), (2, 0)), constant_values=1))
    same(t.pad(((-1, 1), (1, -2))), np.pad(a, ((0, 1), (1, 0)))[1:, :-2] if False else
         np.pad(a[1:, :1], ((0, 1), (1, 0))))
    with pytest.raises(ValueError):
        t.pad(((0, 0),))


def test_pad_values_and_specials():
    a = np.array([1.0, -2.0], dtype=np.float32)
    same(cv.Tensor(a).pad([(2, 1)], value=float("nan")), np.pad(a, (2, 1), constant_values=np.nan))
    same(cv.Tensor(a).pad([(1, 1)], value=-np.inf), np.pad(a, (1, 1), constant_values=-np.inf))
    out = cv.Tensor(a).pad([(1, 0)], value=-0.0).numpy()
    assert np.signbit(out[0])
    same(cv.Tensor(np.array([1, 2], dtype=np.int8)).pad([(1, 1)], value=-5), [-5, 1, 2, -5])
    same(cv.Tensor(a).pad([(-2, 0)]), np.zeros(0))
    with pytest.raises(ValueError):
        cv.Tensor(a).pad([(-2, -1)])


def test_shrink():
    t = cv.Tensor(A)
    same(t.shrink(((1, 2), (0, 3), (1, 3))), A[1:2, 0:3, 1:3])
    same(t.shrink(((0, 0), (0, 3), (0, 4))), A[0:0])
    with pytest.raises(ValueError):
        t.shrink(((0, 3), (0, 3), (0, 4)))


SLICES = [slice(None), slice(1, None), slice(None, -1), slice(None, None, 2), slice(None, None, -1),
          slice(None, None, -2), slice(3, 0, -1), slice(-1, -5, -3), slice(5, 2), slice(2, 2), slice(None, None, 3),
          slice(1, 100, 4), slice(-100, 100), slice(0, 7, 7), slice(6, None, -7)]


@pytest.mark.parametrize("s", SLICES, ids=str)
def test_slice_1d(s):
    a = np.arange(7, dtype=np.float32) * 1.5
    same(cv.Tensor(a)[s], a[s])


def test_getitem_mixed():
    t = cv.Tensor(A)
    cases = [(1,), (-1,), (0, 2), (1, -1, -1), (slice(None), 1), (Ellipsis, 2), (Ellipsis, slice(None, None, -1)),
             (None,), (None, 1, None), (1, Ellipsis, None), (slice(None), None, slice(1, 3)), (Ellipsis,),
             (0, slice(None, None, -2), slice(1, None, 2)), (slice(0, 0), Ellipsis), (None, Ellipsis, None)]
    for c in cases:
        same(t[c], A[c])
    same(t[cv.Tensor(1)], A[1])
    same(t[np.int64(1), 2], A[1, 2])
    with pytest.raises(IndexError):
        t[2]
    with pytest.raises(IndexError):
        t[0, 0, 0, 0]
    with pytest.raises(IndexError):
        t[..., ...]
    with pytest.raises(TypeError):
        t[1.0]
    with pytest.raises(TypeError):
        t[[0.5, 1.0]]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(-6, 6) | st.none(), st.integers(-6, 6) | st.none(),
                          st.sampled_from([None, 1, 2, 3, -1, -2, -3])), min_size=2, max_size=2))
def test_slicing_hypothesis(spec):
    a = np.arange(30, dtype=np.int16).reshape(5, 6)
    idx = tuple(slice(*x) for x in spec)
    same(cv.Tensor(a)[idx], a[idx])


def test_flip():
    t = cv.Tensor(A)
    same(t.flip(0), np.flip(A, 0))
    same(t.flip((0, 2)), np.flip(A, (0, 2)))
    same(t.flip(-1), np.flip(A, -1))
    same(t.flip(), np.flip(A))
    same(cv.Tensor(np.float32(3)).flip(), np.float32(3))


def test_squeeze_unsqueeze_flatten():
    a = np.zeros((1, 3, 1, 2), dtype=np.int8) + np.arange(6, dtype=np.int8).reshape(1, 3, 1, 2)
    t = cv.Tensor(a)
    same(t.squeeze(), a.squeeze())
    same(t.squeeze(0), a.squeeze(0))
    same(t.squeeze((0, -2)), a.squeeze((0, 2)))
    with pytest.raises(ValueError):
        cv.squeeze(t, 1)  # (numpy's and the Array API's; the method leaves a size that is not 1 alone, as PyTorch)
    assert t.squeeze(1).shape == t.shape
    same(t.unsqueeze(0), a[None])
    same(t.unsqueeze(-1), a[..., None])
    same(t.unsqueeze(2), np.expand_dims(a, 2))
    same(t.flatten(), a.reshape(-1))
    same(t.flatten(1), a.reshape(1, -1))
    same(t.flatten(1, 2), a.reshape(1, 3, 2))
    same(cv.Tensor(np.int8(4)).flatten(), np.array([4]))
    same(cv.Tensor(np.int8(4)).unsqueeze(0), np.array([4]))


def test_chained_movement():
    a = np.arange(120, dtype=np.float64).reshape(2, 3, 4, 5)
    t = cv.Tensor(a)
    out = t.permute(3, 1, 0, 2)[::-2, 1:, :, ::3].reshape(3, 2, -1).flip(1).transpose(0, 2)
    ref = np.swapaxes(np.flip(a.transpose(3, 1, 0, 2)[::-2, 1:, :, ::3].reshape(3, 2, -1), 1), 0, 2)
    same(out, ref)
    out = t.reshape(6, 20)[1::2].pad(((1, 0), (0, 2)), value=-1).T[::-1][3:9].expand(2, 6, 4)
    ref = np.broadcast_to(np.pad(a.reshape(6, 20)[1::2], ((1, 0), (0, 2)), constant_values=-1).T[::-1][3:9],
                          (2, 6, 4))
    same(out, ref)


def test_views_into_elementwise_and_reduce():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    b = np.arange(6, dtype=np.float32)
    ta, tb = cv.Tensor(a), cv.Tensor(b)
    np.testing.assert_allclose((ta.T[::2] * tb[::-1, None][::2]).numpy(), a.T[::2] * b[::-1, None][::2])
    np.testing.assert_allclose((ta[:, 1::2] + ta[:, ::2]).sum(0).numpy(), (a[:, 1::2] + a[:, ::2]).sum(0))
    np.testing.assert_allclose(ta.flip(1).max(axis=1).numpy(), a[:, ::-1].max(1))
    np.testing.assert_array_equal(ta.T.argmax(0).numpy(), a.T.argmax(0))
    np.testing.assert_allclose(ta.pad(((0, 0), (1, 1)), value=2.0).prod(1).numpy(),
                               np.pad(a, ((0, 0), (1, 1)), constant_values=2).prod(1))
    # a realized tensor reused after a view
    c = (ta * 2).realize()
    np.testing.assert_allclose((c.T.reshape(-1)[::5] - 1).numpy(), (a * 2).T.reshape(-1)[::5] - 1)


def test_contiguous_and_iteration():
    t = cv.Tensor(A)
    same(t.T.contiguous(), A.T)
    rows = list(t)
    assert len(rows) == 2 and len(t) == 2
    same(rows[1], A[1])
    with pytest.raises(TypeError):
        len(cv.Tensor(1.0))


def test_pad_of_a_complex_tensor_with_a_complex_value():
    a = np.array([1 + 2j, 3j], np.complex64)
    np.testing.assert_array_equal(cv.Tensor(a).pad(((1, 2),), 2 - 1j).numpy(), np.pad(a, (1, 2), constant_values=2 - 1j))
    np.testing.assert_array_equal(cv.cumulative_prod(cv.Tensor([True, False]), include_initial=True, dtype=cv.complex64)
                                  .numpy(), np.array([1, 1, 0], np.complex64))

"""Max pooling with indices and max unpooling (corvid.nn.pooling) against loop references written
here in numpy, and against PyTorch when it is installed."""

import itertools
import math

import numpy as np
import pytest

import corvid as cv
import corvid.nn.functional as F
from corvid import nn

rng = np.random.default_rng(0)


def _tuple(v, nd):
    return (v,) * nd if isinstance(v, int) else tuple(v)


def max_pool_indices_ref(x, k, s=None, p=0, d=1, ceil_mode=False):
    """Loop reference of torch's scan: per window, in row-major order from the first element
    inside the input, an element replaces the best so far when it is larger or NaN (so: the first
    maximum, or the last NaN); values and flat indices into the (N, C) plane."""
    nd = len(k)
    s, p, d = _tuple(k if s is None else s, nd), _tuple(p, nd), _tuple(d, nd)
    spatial = x.shape[-nd:]
    outs = []
    for i, kk, ss, pp, dd in zip(spatial, k, s, p, d):
        room = i + 2 * pp - dd * (kk - 1) - 1
        o = (-(-room // ss) if ceil_mode else room // ss) + 1
        if ceil_mode and (o - 1) * ss >= i + pp:
            o -= 1
        outs.append(o)
    lead = x.shape[:-nd]
    vals = np.zeros(lead + tuple(outs), x.dtype)
    idx = np.zeros(lead + tuple(outs), np.int64)
    for pre in np.ndindex(*lead):
        for o in np.ndindex(*outs):
            best, where = None, None
            for b in np.ndindex(*k):
                pos = [oo * ss - pp + bb * dd for oo, ss, pp, bb, dd in zip(o, s, p, b, d)]
                if any(q < 0 or q >= n for q, n in zip(pos, spatial)):
                    continue
                v = x[pre + tuple(pos)]
                if best is None or v > best or np.isnan(v):
                    best, where = v, int(np.ravel_multi_index(pos, spatial))
            vals[pre + o], idx[pre + o] = best, where
    return vals, idx


CASES = [  # (input shape, kernel, stride, padding, dilation, ceil_mode)
    ((2, 3, 9), (3,), 2, 1, 1, False),
    ((3, 8), (2,), None, 0, 2, True),  # unbatched
    ((2, 2, 6, 7), (2, 2), None, 0, 1, False),  # tiling windows
    ((1, 2, 7, 6), (3, 2), (2, 1), (1, 1), (1, 2), True),
    ((1, 1, 5, 4, 6), (2, 3, 2), (2, 1, 2), (1, 1, 0), 1, False),
]


@pytest.mark.parametrize("shape,k,s,p,d,ceil_mode", CASES)
def test_max_pool_indices_match_loop_reference(shape, k, s, p, d, ceil_mode):
    x = rng.integers(-3, 3, shape).astype(np.float32)  # small integers: many tied maxima
    nd = len(k)
    want_v, want_i = max_pool_indices_ref(x, k, s, p, d, ceil_mode)
    fn = getattr(F, f"max_pool{nd}d")
    v, i = fn(cv.Tensor(x), k, s, p, d, ceil_mode, return_indices=True)
    assert i.dtype == cv.int64 and v.dtype == cv.float32
    np.testing.assert_array_equal(v.numpy(), want_v)
    np.testing.assert_array_equal(i.numpy(), want_i)
    np.testing.assert_array_equal(v.numpy(), fn(cv.Tensor(x), k, s, p, d, ceil_mode).numpy())  # same values
    layer = getattr(nn, f"MaxPool{nd}d")(k, s, p, d, return_indices=True, ceil_mode=ceil_mode)
    lv, li = layer(cv.Tensor(x))
    np.testing.assert_array_equal(lv.numpy(), want_v)
    np.testing.assert_array_equal(li.numpy(), want_i)
    torch = pytest.importorskip("torch")
    tv, ti = getattr(torch.nn.functional, f"max_pool{nd}d")(torch.tensor(x), k, s, p, d, ceil_mode, True)
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    np.testing.assert_array_equal(v.numpy(), tv.numpy())


def test_max_pool_indices_for_integers_nan_and_all_minus_inf():
    ints = np.array([[[5, 5, -2, 7, 7, 1]]], np.int32)
    v, i = F.max_pool1d(cv.Tensor(ints), 2, return_indices=True)
    assert v.dtype == cv.int32 and v.tolist() == [[[5, 7, 7]]] and i.tolist() == [[[0, 3, 4]]]
    nan, inf = float("nan"), float("inf")
    x = np.array([[[1.0, nan, nan, 2.0, -inf, -inf]]], np.float32)
    v, i = F.max_pool1d(cv.Tensor(x), 2, padding=1, return_indices=True)
    want_v, want_i = max_pool_indices_ref(x, (2,), None, 1)
    np.testing.assert_array_equal(v.numpy(), want_v)
    np.testing.assert_array_equal(i.numpy(), want_i)
    assert i.tolist() == [[[0, 2, 3, 5]]]  # the last NaN; a window of padding and -inf: the real element
    v, i = F.max_pool1d(cv.Tensor(x), 3, stride=1, return_indices=True)
    assert i.tolist() == [[[2, 2, 2, 3]]]
    torch = pytest.importorskip("torch")
    assert torch.nn.functional.max_pool1d(torch.tensor(x), 3, 1, return_indices=True)[1].tolist() == i.tolist()


def test_max_pool_with_indices_gives_the_whole_gradient_to_the_index():
    x = np.array([[[[1.0, 1.0, 0.0, 2.0], [1.0, 0.0, 2.0, 2.0]]]])  # every window has a tie
    t = cv.Tensor(x, requires_grad=True)
    w = np.array([[[[3.0, 5.0]]]])
    v, i = F.max_pool2d(t, 2, return_indices=True)
    (v * cv.Tensor(w)).sum().backward()
    want = np.zeros(8)
    np.add.at(want, i.numpy().ravel(), w.ravel())
    np.testing.assert_array_equal(t.grad.numpy().ravel(), want)
    assert t.grad.numpy().ravel().tolist() == [3.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0]
    g = cv.grad(lambda a: F.max_pool2d(a, 2, return_indices=True)[0].sum())(cv.Tensor(x))
    assert g.numpy().ravel().tolist() == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def max_unpool_ref(v, i, out_spatial):
    nd = len(out_spatial)
    lead = v.shape[:-nd]
    out = np.zeros(lead + (math.prod(out_spatial),), v.dtype)
    for pre in np.ndindex(*lead):
        out[pre][i[pre].ravel()] = v[pre].ravel()
    return out.reshape(lead + tuple(out_spatial))


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_unpool_inverts_pooling_at_the_maxima(nd):
    shape = (2, 3) + (6, 5, 4)[:nd]
    x = rng.standard_normal(shape)
    k, s = (3, 2, 2)[:nd], (2, 2, 1)[:nd]
    v, i = getattr(F, f"max_pool{nd}d")(cv.Tensor(x), k, s, 1, return_indices=True)
    u = getattr(nn, f"MaxUnpool{nd}d")(k, s, 1)(v, i, output_size=shape)  # output_size: the full shape
    assert u.shape == shape
    np.testing.assert_array_equal(u.numpy(), max_unpool_ref(v.numpy(), i.numpy(), shape[2:]))
    kept = u.numpy() != 0  # every maximum comes back at its own place
    np.testing.assert_array_equal(u.numpy()[kept], x[kept])
    tiled = (2, 3) + (6, 4, 4)[:nd]  # windows that tile the input: the default output size is the input's
    xt = rng.standard_normal(tiled)
    vt, it = getattr(F, f"max_pool{nd}d")(cv.Tensor(xt), 2, return_indices=True)
    ut = getattr(F, f"max_unpool{nd}d")(vt, it, 2)
    assert ut.shape == tiled
    np.testing.assert_array_equal(ut.numpy(), max_unpool_ref(vt.numpy(), it.numpy(), tiled[2:]))
    assert (ut.numpy() != 0).sum() == vt.size
    torch = pytest.importorskip("torch")
    tu = getattr(torch.nn.functional, f"max_unpool{nd}d")(torch.tensor(v.numpy()), torch.tensor(i.numpy()), k, s, 1,
                                                          output_size=shape)
    np.testing.assert_array_equal(u.numpy(), tu.numpy())


def test_max_unpool_gradient_gathers_and_checks_its_input():
    v = cv.Tensor([[[2.0, 3.0]]], requires_grad=True)
    i = cv.Tensor([[[1, 2]]])
    w = cv.Tensor([[[10.0, 20.0, 30.0, 40.0]]])
    (F.max_unpool1d(v, i, 2) * w).sum().backward()
    assert v.grad.tolist() == [[[20.0, 30.0]]]
    unbatched = nn.MaxUnpool1d(2)(cv.Tensor([[2.0, 3.0]]), cv.Tensor([[1, 2]]))
    assert unbatched.tolist() == [[0.0, 2.0, 3.0, 0.0]]
    with pytest.raises(IndexError, match=r"max_unpool1d: indices must be in \[0, 4\)"):
        F.max_unpool1d(cv.Tensor([[[2.0, 3.0]]]), cv.Tensor([[[1, 4]]]), 2)
    with pytest.raises(IndexError, match="max_unpool1d"):
        F.max_unpool1d(cv.Tensor([[[2.0, 3.0]]]), cv.Tensor([[[-1, 2]]]), 2)
    with pytest.raises(ValueError, match="indices of shape"):
        F.max_unpool1d(cv.Tensor([[[2.0, 3.0]]]), cv.Tensor([[[1]]]), 2)
    with pytest.raises(TypeError, match="integer"):
        F.max_unpool1d(cv.Tensor([[[2.0, 3.0]]]), cv.Tensor([[[1.0, 2.0]]]), 2)
    with pytest.raises(ValueError, match="output_size"):
        F.max_unpool1d(cv.Tensor([[[2.0, 3.0]]]), cv.Tensor([[[1, 2]]]), 2, output_size=(7,))
    assert F.max_unpool1d(cv.Tensor([[[2.0, 3.0]]]), cv.Tensor([[[1, 4]]]), 2, output_size=(5,)).tolist() == \
        [[[0.0, 2.0, 0.0, 0.0, 3.0]]]


def test_return_indices_layers_repr_and_errors():
    assert repr(nn.MaxPool2d(2, return_indices=True)).endswith("return_indices=True)")
    assert "return_indices" not in repr(nn.MaxPool2d(2))
    with pytest.raises(ValueError, match="expected an input of 3 or 4 dimensions"):
        F.max_pool2d(cv.ones(4, 4), 2, return_indices=True)
    with pytest.raises(ValueError, match="kernel_size"):
        F.max_pool2d(cv.ones(1, 4, 4), (2, 2, 2), return_indices=True)
    with pytest.raises(ValueError, match="does not fit"):
        F.max_pool1d(cv.ones(1, 1, 2), 3, return_indices=True)
    pooled = list(itertools.chain.from_iterable(F.max_pool1d(cv.Tensor([[[4.0, 1.0]]]), 2, return_indices=True)))
    assert [t.tolist() for t in pooled] == [[[4.0]], [[0]]]

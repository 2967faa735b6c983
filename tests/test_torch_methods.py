"""corvid.ops.torch_methods: Tensor methods with PyTorch's semantics, checked against PyTorch.

Most cases run the same code on a corvid and a torch tensor (the point of the module: code ports
by changing the import) and compare values, dtypes and, for float inputs, gradients of a
weighted sum of the outputs."""

import re
from pathlib import Path

import numpy as np
import pytest

import corvid as cv

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
NAN, INF = float("nan"), float("inf")


def arr(shape, dtype=np.float32, lo=-3.0, hi=3.0):
    """Random values of ``shape``: floats in [lo, hi), ints in [lo, hi], bools."""
    if np.dtype(dtype) == np.bool_:
        return RNG.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def _leaves(arrays, grad):
    cs, ts = [], []
    for a in arrays:
        a = np.asarray(a)
        g = grad and a.dtype.kind == "f"
        cs.append(cv.Tensor(a, requires_grad=g))
        ts.append(torch.tensor(a, requires_grad=g))
    return cs, ts


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [y for x in out for y in _flat(x)]
    return [out]


def _np(x):
    if isinstance(x, torch.Tensor):
        x = x.detach().resolve_conj().resolve_neg()
        return (x.float() if x.dtype == torch.bfloat16 else x).numpy(force=True)
    a = x.numpy()
    return a.astype(np.float32) if x.dtype == cv.bfloat16 else a


def same(got, want, rtol=1e-5, atol=1e-6):
    """Structure, shapes, dtypes and values of a corvid result equal torch's."""
    g, w = _flat(got), _flat(want)
    assert len(g) == len(w), f"{len(g)} results, torch gives {len(w)}"
    for a, b in zip(g, w):
        if isinstance(b, torch.Tensor):
            assert isinstance(a, cv.Tensor), f"got {type(a).__name__}, torch gives a tensor"
            assert a.dtype.name == str(b.dtype).removeprefix("torch."), f"dtype {a.dtype.name}, torch {b.dtype}"
            assert a.shape == tuple(b.shape), f"shape {a.shape}, torch {tuple(b.shape)}"
            np.testing.assert_allclose(_np(a), _np(b), rtol=rtol, atol=atol, equal_nan=True)
        else:
            assert type(a) is type(b) and a == b, f"{a!r}, torch gives {b!r}"


def compare(fn, *arrays, grad=True, torch_fn=None, rtol=1e-5, atol=1e-6):
    """``fn`` on corvid and torch tensors of ``arrays`` (``torch_fn`` on torch's, if given): the
    same results, and for float inputs the same gradients of a weighted sum of the float outputs."""
    cs, ts = _leaves(arrays, grad)
    got, want = fn(*cs), (torch_fn or fn)(*ts)
    same(got, want, rtol, atol)
    outs = [(a, b) for a, b in zip(_flat(got), _flat(want)) if isinstance(b, torch.Tensor) and b.requires_grad]
    if not outs or any(b.numel() == 0 for _, b in outs):
        return
    weights = [RNG.uniform(0.5, 1.5, tuple(b.shape)) for _, b in outs]
    sum(((a * cv.Tensor(w).astype(a.dtype)).sum() for (a, _), w in zip(outs, weights))).backward()
    sum(((b * torch.tensor(w, dtype=b.dtype)).sum() for (_, b), w in zip(outs, weights))).backward()
    for c, t in zip(cs, ts):
        if t.requires_grad:
            want_g = np.zeros(t.shape, _np(t).dtype) if t.grad is None else _np(t.grad)
            got_g = np.zeros(c.shape, want_g.dtype) if c.grad is None else _np(c.grad)
            np.testing.assert_allclose(got_g, want_g, rtol=rtol, atol=atol, err_msg="gradient")


# --- dtypes and metadata ------------------------------------------------------------------------------
@pytest.mark.parametrize("cast", ["float", "double", "half", "bfloat16", "int", "long", "short", "char", "bool"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_casts(cast, dtype):
    a = arr((2, 3), dtype)
    compare(lambda x: getattr(x, cast)(), a, grad=False)
    compare(lambda x: getattr(x, cast)(), a[0, 0], grad=False)  # 0-d


def test_byte_and_type_as():
    compare(lambda x: x.byte(), arr((4,), np.float32, 0, 200), grad=False)
    compare(lambda x, y: x.type_as(y), arr((3,), np.int32), arr((2,), np.float64))
    compare(lambda x: x.double().float() * 2, arr((3,)))  # casts are differentiable


@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 1, 4), (2, 0, 3)])
def test_metadata(shape):
    for dtype in (np.float32, np.int16, np.bool_, np.complex64):
        a = np.zeros(shape, dtype)
        c, t = cv.Tensor(a), torch.tensor(a)
        assert c.dim() == t.dim() and c.ndimension() == t.ndimension() and c.nelement() == t.nelement()
        assert c.is_floating_point() == t.is_floating_point() and c.is_complex() == t.is_complex()
        assert c.element_size() == t.element_size() and c.itemsize == t.itemsize and c.nbytes == t.nbytes
        fresh = torch.empty(shape)  # (a tensor made from an empty numpy array keeps numpy's strides)
        assert c.stride() == fresh.stride() and c.is_contiguous() and fresh.is_contiguous()
        for d in range(len(shape)):
            assert c.stride(d) == fresh.stride(d)


def test_transposes():
    compare(lambda x: x.t(), arr((2, 3)))
    compare(lambda x: x.t(), arr((3,)))
    compare(lambda x: x.t(), arr(()))
    z = (arr((2, 3, 4)) + 1j * arr((2, 3, 4))).astype(np.complex64)
    compare(lambda x: x.mH, z, grad=False)
    compare(lambda x: x.adjoint(), z, grad=False)
    compare(lambda x: x.H, z[0], grad=False)
    compare(lambda x: x.mH, arr((3, 2)))


def test_view_reshape_expand():
    compare(lambda x: x.view(-1, 2), arr((2, 3)))
    compare(lambda x: x.view(6), arr((2, 3)))
    compare(lambda x, y: x.view_as(y), arr((2, 3)), arr((3, 2)))
    compare(lambda x, y: x.reshape_as(y), arr((6,)), arr((1, 6)))
    compare(lambda x, y: x.expand_as(y), arr((3, 1)), arr((2, 3, 4)))
    compare(lambda x: x.T.view(-1), arr((2, 3)), torch_fn=lambda x: x.T.reshape(-1))  # (torch needs a copy)
    compare(lambda x: x.view(cv.int32), arr((2, 3)), grad=False, torch_fn=lambda x: x.view(torch.int32))
    compare(lambda x: x.view(cv.uint8), arr((4,), np.int8), grad=False, torch_fn=lambda x: x.view(torch.uint8))


def test_clone_is_independent_and_differentiable():
    for x in (cv.Tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)):
        y = x.clone()
        y.mul_(3.0)
        (y * x).sum().backward()
        assert x.grad.tolist() == [6.0, 12.0] and y.tolist() == [3.0, 6.0]
    a = np.arange(3.0)
    shared = cv.asarray(a, copy=False)
    copy = shared.clone()
    a[0] = 5.0
    assert copy.tolist() == [0.0, 1.0, 2.0] and shared.tolist() == [5.0, 1.0, 2.0]


def test_new_tensors():
    for dtype in (np.float64, np.int32):
        a = arr((2,), dtype)
        compare(lambda x: x.new_zeros(2, 3), a, grad=False)
        compare(lambda x: x.new_zeros((0, 2)), a, grad=False)
        compare(lambda x: x.new_ones((3,)), a, grad=False)
        compare(lambda x: x.new_full((2, 2), 7), a, grad=False)
        compare(lambda x: x.new_tensor([1.5, 2.5]), a, grad=False)
        compare(lambda x: x.new_empty(3).shape, a, grad=False, torch_fn=lambda x: tuple(x.new_empty(3).shape))
    t = cv.Tensor([1.0]).new_zeros(2, dtype=cv.int8)
    assert t.dtype == cv.int8 and t.tolist() == [0, 0]
    assert cv.Tensor([1.0]).new_ones(2, requires_grad=True).requires_grad


def test_to():
    x = cv.Tensor([1.5, -2.5])
    assert x.to(cv.float64).dtype == cv.float64 and x.to("cpu", cv.float16).dtype == cv.float16
    assert x.to(dtype=cv.int32).tolist() == [1, -2]
    assert x.to(cv.Tensor([1], dtype=cv.int8)).dtype == cv.int8
    assert x.to("CPU:1").device == "CPU:1" and x.to("CPU:1", cv.int64).device == "CPU:1"
    assert x.to(x.dtype) is x and x.to(x.dtype, copy=True) is not x and x.cpu() is x


# --- shapes and views ---------------------------------------------------------------------------------
def test_unflatten_narrow_select_movedim_unbind():
    compare(lambda x: x.unflatten(1, (2, 3)), arr((4, 6)))
    compare(lambda x: x.unflatten(-1, (-1, 2)), arr((4, 6)))
    compare(lambda x: x.unflatten(0, (1, 0)), arr((0, 2)))
    for start, length in ((0, 2), (1, 3), (-2, 2), (4, 0)):
        compare(lambda x: x.narrow(1, start, length), arr((3, 4)))
    compare(lambda x: x.T.narrow(0, 1, 2), arr((3, 4)))
    compare(lambda x: x.narrow(0, cv.Tensor(1) if isinstance(x, cv.Tensor) else torch.tensor(1), 1), arr((3,)))
    compare(lambda x: x.select(1, -1), arr((3, 4)))
    compare(lambda x: x.select(0, 2), arr((3,)))
    compare(lambda x: x.movedim(0, -1), arr((2, 3, 4)))
    compare(lambda x: x.movedim((0, 1), (2, 0)), arr((2, 3, 4)))
    compare(lambda x: x.unbind(1), arr((2, 3)))
    compare(lambda x: x.unbind(), arr((0, 3)))
    compare(lambda x: x.swapdims(0, 2), arr((2, 3, 4)))


@pytest.mark.parametrize("shape,dim,size,step", [
    ((7,), 0, 3, 1), ((7,), 0, 3, 2), ((7,), 0, 2, 5), ((7,), 0, 7, 1), ((7,), 0, 1, 1), ((7,), 0, 0, 2),
    ((3, 8), 1, 4, 3), ((3, 8), 0, 2, 1), ((2, 5, 3), -2, 2, 2), ((2, 0, 3), 2, 2, 1), ((), 0, 1, 1),
])
def test_unfold(shape, dim, size, step):
    compare(lambda x: x.unfold(dim, size, step), arr(shape))


def test_unfold_of_views_and_dtypes():
    compare(lambda x: x.T.unfold(0, 2, 1), arr((3, 5)))
    compare(lambda x: x[:, ::2].unfold(1, 2, 1), arr((2, 9)))
    compare(lambda x: x.unfold(0, 3, 2), arr((9,), np.int32), grad=False)
    compare(lambda x: x.unfold(1, 2, 2).unfold(1, 2, 1), arr((2, 8)))  # windows of windows


def test_tensor_split():
    a = arr((7, 2))
    for sections in (1, 3, 7, 9):
        compare(lambda x: x.tensor_split(sections), a)
    for cuts in ([2, 5], [0, 0, 3], [-2], [5, 2], [10], []):
        compare(lambda x: x.tensor_split(cuts), a)
    compare(lambda x: x.tensor_split(2, dim=1), a)
    compare(lambda x: x.tensor_split(cv.Tensor(3) if isinstance(x, cv.Tensor) else torch.tensor(3)), a)
    compare(lambda x: x.tensor_split(cv.Tensor([1, 4]) if isinstance(x, cv.Tensor) else torch.tensor([1, 4])), a)
    compare(lambda x: x.tensor_split(3), arr((0,)))


def test_split_chunk_flip_tile_permute():
    a = arr((5, 4))
    compare(lambda x: x.split(2), a)
    compare(lambda x: x.split([1, 3], dim=1), a)
    compare(lambda x: x.split(2, 1), a)
    for n in (1, 2, 3, 4, 6):
        compare(lambda x: x.chunk(n, dim=1), a)
    compare(lambda x: x.chunk(3), arr((0, 2)))
    assert isinstance(cv.Tensor(a).split(2), tuple) and isinstance(cv.Tensor(a).chunk(2), tuple)
    compare(lambda x: x.flip(0), a)
    compare(lambda x: x.flip(0, 1), a)
    compare(lambda x: x.flip((1,)), a)
    compare(lambda x: x.flip(dims=(0, 1)), a)
    compare(lambda x: x.flipud(), a)
    compare(lambda x: x.fliplr(), a)
    compare(lambda x: x.flipud(), arr((3,)))
    compare(lambda x: x.tile(2, 1), a)
    compare(lambda x: x.tile((3,)), a)
    compare(lambda x: x.tile(2, 1, 2), a)
    compare(lambda x: x.permute(1, 0), a)
    compare(lambda x: x.permute((1, 0)), a)
    compare(lambda x: x.permute(dims=(1, 0)), a)
    compare(lambda x: x.unsqueeze(dim=1), a)


def test_squeeze_with_dim_keyword():
    a = arr((1, 3, 1))
    compare(lambda x: x.squeeze(dim=1), a)  # size 3: a no-op, as PyTorch
    compare(lambda x: x.squeeze(dim=0), a)
    compare(lambda x: x.squeeze(dim=(0, 1, 2)), a)
    compare(lambda x: x.squeeze(dim=-1), a)
    compare(lambda x: x.squeeze(dim=0), arr(()))
    compare(lambda x: x.squeeze(), a)


# --- elementwise ----------------------------------------------------------------------------------------
def test_isclose_allclose_equal():
    a = np.array([1.0, 1.0 + 1e-6, NAN, INF, -INF, INF, 0.0, 1e-9, 2.0], np.float32)
    b = np.array([1.0, 1.0, NAN, INF, INF, 3.0, -0.0, 0.0, 2.1], np.float32)
    for kwargs in ({}, {"equal_nan": True}, {"rtol": 0.0, "atol": 0.0}, {"rtol": 0.1}, {"atol": 0.2}):
        compare(lambda x, y: x.isclose(y, **kwargs), a, b, grad=False)
        compare(lambda x, y: x.allclose(y, **kwargs), a, b, grad=False)
    ints = arr((6,), np.int64)
    compare(lambda x, y: x.isclose(y), ints, ints + RNG.integers(0, 2, 6), grad=False)
    compare(lambda x, y: x.isclose(y, atol=1.5), ints, ints + 1, grad=False)
    compare(lambda x: x.isclose(x.T), arr((3, 3)), grad=False)  # broadcasting against a view
    z = np.array([1 + 1j, NAN + 0j], np.complex64)
    compare(lambda x, y: x.isclose(y, equal_nan=True), z, z + np.complex64(1e-7), grad=False)
    for x, y in ((a, a), (a, b), (a[:2], a[:3]), (a[:0], a[:0]), (ints, ints)):
        compare(lambda u, v: u.equal(v), x, y, grad=False)
    assert cv.Tensor([1.0]).allclose(cv.Tensor([1.0 + 1e-7])) is True


def test_masked_fill_and_select():
    a = arr((3, 4))
    mask = arr((3, 4), np.bool_)
    compare(lambda x, m: x.masked_fill(m, -1.5), a, mask)
    compare(lambda x, m: x.masked_fill(m, 2), a, mask[0])  # a broadcast mask
    compare(lambda x, m: x.masked_fill(m, 2), a[0], mask)  # the mask broadcasts self too
    compare(lambda x, m, v: x.masked_fill(m, v), a, mask, np.float32(5.0))  # a 0-d value gets a gradient
    compare(lambda x, m: x.masked_fill(m, 2.7), arr((3, 4), np.int32), mask, grad=False)
    compare(lambda x, m: x.T.masked_fill(m, 0.0), a, mask.T)
    compare(lambda x, m: x.masked_select(m), a, mask)
    compare(lambda x, m: x.masked_select(m), a, mask[1])
    compare(lambda x, m: x.masked_select(m), a[:, :1], mask)
    compare(lambda x, m: x.masked_select(m), a[0, 0], np.bool_(True))
    compare(lambda x, m: x.masked_select(m), arr((2, 2), np.int64), np.zeros((2, 2), bool), grad=False)


def test_lerp_fmod_addc():
    a, b, w = arr((3, 4)), arr((3, 4)), arr((3, 4), lo=-0.5, hi=1.5)
    compare(lambda x, y: x.lerp(y, 0.3), a, b)
    compare(lambda x, y: x.lerp(y, 0.8), a, b)
    compare(lambda x, y, t: x.lerp(y, t), a, b, w)
    compare(lambda x, y, t: x.lerp(y, t), a, b[0], w[:, :1])
    for divisor in (3.0, -2.5, 0.75):
        compare(lambda x: x.fmod(divisor), arr((20,), lo=-10, hi=10))
    compare(lambda x, y: x.fmod(y), arr((4, 5), lo=-10, hi=10), arr((5,), lo=0.5, hi=3))
    compare(lambda x, y: x.fmod(y), arr((4, 5), lo=-10, hi=10), -arr((5,), lo=0.5, hi=3))
    compare(lambda x: x.fmod(2.0), np.array([-0.0, 0.0, -4.0, 4.0, INF, NAN, 1e-30, -1e-30], np.float32))
    compare(lambda x: x.fmod(0.0), np.array([1.0, -1.0, 0.0], np.float32), grad=False)
    compare(lambda x: x.fmod(INF), np.array([1.0, -1.0, 5.0], np.float32), grad=False)
    for dtype in (np.int64, np.int32, np.int8):
        compare(lambda x: x.fmod(3), arr((12,), dtype, -9, 9))
        signs = np.where(RNG.random(12) < 0.5, 1, -1).astype(dtype)
        compare(lambda x, y: x.fmod(y), arr((12,), dtype, -9, 9), arr((12,), dtype, 1, 4) * signs)
    compare(lambda x, y, z: x.addcmul(y, z, value=0.5), a, b, w)
    compare(lambda x, y, z: x.addcdiv(y, z, value=-2), a, b, w + 2)
    compare(lambda x, y: x.add(y, alpha=2), a, b)
    compare(lambda x, y: x.sub(y, alpha=0.5), a, b[0])
    compare(lambda x, y: x.subtract(y), a, b)
    compare(lambda x, y: x.multiply(y), a, b)
    compare(lambda x, y: x.divide(y), a, b + 4)
    compare(lambda x, y: x.true_divide(y), arr((3,), np.int64), arr((3,), np.int64, 1, 5), grad=False)
    compare(lambda x: x.add(3, alpha=2), arr((3,), np.int64), grad=False)


def test_binary_math_functions():
    a, b = arr((3, 4)), arr((4,))
    special = np.array([0.0, -0.0, 1.0, -2.0, INF, -INF, NAN, 3.0], np.float32)
    other = np.array([1.0, 2.0, -0.0, NAN, INF, 2.0, 1.0, 3.0], np.float32)
    for name in ("logaddexp", "copysign", "hypot", "fmax", "fmin"):
        compare(lambda x, y: getattr(x, name)(y), a, b)
        compare(lambda x, y: getattr(x, name)(y), special, other, grad=name in ("fmax", "fmin"))
    compare(lambda x, y: x.fmax(y), a, a.copy())  # ties: the gradient goes to self
    compare(lambda x, y: x.fmin(y), a[:, :1].repeat(4, 1), b)
    compare(lambda x, y: x.fmax(y), arr((5,), np.int32), arr((5,), np.int32), grad=False)
    compare(lambda x, y: x.copysign(y), arr((4,), np.int64), special[:4], grad=False)
    x0 = np.array([0.0, 0.0, 0.0, 1.0, 2.0, -1.0, 0.5], np.float32)
    y0 = np.array([0.0, NAN, 2.0, 0.0, 3.0, 2.0, INF], np.float32)
    compare(lambda x, y: x.xlogy(y), x0, y0, grad=False)
    compare(lambda x, y: x.xlogy(y), np.abs(a) + 0.1, np.abs(b) + 0.1)
    compare(lambda x, y: x.xlogy(y), np.array([0.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32))
    compare(lambda x: x.xlogy(2), arr((3,), np.int64, 0, 3), grad=False)


def test_unary_and_comparison_methods():
    special = np.array([0.0, -0.0, 1.5, -2.0, INF, -INF, NAN], np.float32)
    for name in ("signbit", "isneginf", "isposinf"):
        compare(lambda x: getattr(x, name)(), special, grad=False)
        compare(lambda x: getattr(x, name)(), arr((4,), np.int32), grad=False)
    for name in ("sgn", "absolute", "negative", "positive", "deg2rad", "rad2deg"):
        compare(lambda x: getattr(x, name)(), arr((2, 3)))
    compare(lambda x: x.deg2rad(), arr((3,), np.int64, -180, 180), grad=False)
    compare(lambda x: x.sgn(), (arr((4,)) + 1j * arr((4,))).astype(np.complex64), grad=False)
    compare(lambda x: x.absolute(), arr((4,), np.int16), grad=False)
    for name in ("lt", "le", "gt", "ge", "eq", "ne"):
        compare(lambda x, y: getattr(x, name)(y), arr((3, 4), np.int32, -2, 2), arr((4,), np.int32, -2, 2), grad=False)
        compare(lambda x: getattr(x, name)(0.5), special, grad=False)
    compare(lambda x: x.clamp_min(-1.0), arr((5,)))
    compare(lambda x: x.clamp_max(1.0), arr((5,)))
    compare(lambda x, lo: x.clamp_min(lo), arr((3, 4)), arr((4,)))


# --- reductions -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["sum", "prod", "mean", "amax", "amin", "logsumexp", "nansum", "nanmean"])
def test_reductions_with_dim_keywords(name):
    a = arr((3, 4, 2))
    compare(lambda x: getattr(x, name)(dim=1), a)
    if name != "prod":  # (PyTorch's prod takes one dim)
        compare(lambda x: getattr(x, name)(dim=(0, 2), keepdim=True), a)
    compare(lambda x: getattr(x, name)(-1, True), a)
    compare(lambda x: getattr(x, name)(dim=0), a.T)
    compare(lambda x: getattr(x, name)(dim=0), arr((1, 3)))
    if name != "logsumexp":
        compare(lambda x: getattr(x, name)(), a)


def test_reduction_dtypes_and_flags():
    compare(lambda x: x.sum(dim=0, dtype=cv.float64 if isinstance(x, cv.Tensor) else torch.float64), arr((3, 2)))
    compare(lambda x: x.mean(dim=1, dtype=cv.float64 if isinstance(x, cv.Tensor) else torch.float64), arr((3, 2)))
    compare(lambda x: x.sum(dim=1), arr((3, 2), np.int32), grad=False)
    compare(lambda x: x.prod(dim=0), arr((3, 2), np.int16), grad=False)
    compare(lambda x: x.sum(dim=1), arr((3, 2), np.bool_), grad=False)
    compare(lambda x: x.nansum(dim=0), arr((3, 2), np.int64), grad=False)
    for name in ("any", "all"):
        compare(lambda x: getattr(x, name)(dim=1), arr((3, 4), np.bool_), grad=False)
        compare(lambda x: getattr(x, name)(dim=0, keepdim=True), arr((3, 4), np.int32, 0, 1), grad=False)
        compare(lambda x: getattr(x, name)(), arr((0, 2)), grad=False)
    for name in ("argmax", "argmin"):
        compare(lambda x: getattr(x, name)(dim=1), arr((3, 4)), grad=False)
        compare(lambda x: getattr(x, name)(dim=0, keepdim=True), arr((3, 4)), grad=False)
        compare(lambda x: getattr(x, name)(), arr((3, 4)), grad=False)
    compare(lambda x: x.count_nonzero(), arr((3, 4), np.int32, -1, 1), grad=False)
    compare(lambda x: x.count_nonzero(dim=1), np.array([[0.0, NAN, -0.0], [1.0, 0.0, 2.0]], np.float32), grad=False)
    compare(lambda x: x.count_nonzero(dim=(0, 1)), arr((2, 3, 2), np.bool_), grad=False)


def test_nan_reductions():
    a = np.array([[1.0, NAN, 3.0], [NAN, 2.0, NAN], [2.0, 0.5, -1.0]], np.float32)
    for name in ("nansum", "nanmean"):
        compare(lambda x: getattr(x, name)(), a)
        compare(lambda x: getattr(x, name)(dim=1), a)
        compare(lambda x: getattr(x, name)(dim=0, keepdim=True), a)
    # a row of nan only: nanmean is nan; its gradient is 0 here, nan in PyTorch (0 / 0 in its rule)
    compare(lambda x: x.nanmean(dim=1), np.full((2, 2), NAN, np.float32), grad=False)


def test_softmax_cumulative_and_sorting_with_dim():
    a = arr((3, 5))
    compare(lambda x: x.softmax(dim=0), a)
    compare(lambda x: x.log_softmax(dim=-1), a)
    compare(lambda x: x.cumsum(dim=1), a)
    compare(lambda x: x.cumprod(dim=0), a)
    compare(lambda x: x.cumsum(0, dtype=cv.float64 if isinstance(x, cv.Tensor) else torch.float64), a)
    compare(lambda x: x.cumsum(dim=0), arr((4,), np.int32), grad=False)
    compare(lambda x: x.cummax(dim=1), a)
    compare(lambda x: x.cummin(dim=0), a)
    compare(lambda x: x.logcumsumexp(dim=1), a)
    distinct = RNG.permutation(15).reshape(3, 5).astype(np.float32)
    compare(lambda x: x.argsort(dim=0, descending=True), distinct, grad=False)
    compare(lambda x: x.topk(2, dim=0), distinct)
    compare(lambda x: x.topk(3, dim=1, largest=False), distinct)
    compare(lambda x: x.diff(dim=0), a)
    compare(lambda x: x.roll(shifts=2, dims=1), a)
    compare(lambda x: x.roll(1), a)
    compare(lambda x: x.rot90(1, dims=(0, 1)), a)
    compare(lambda x: x.diagonal(offset=1, dim1=1, dim2=0), a)
    compare(lambda x: x.tril(diagonal=-1), a)
    compare(lambda x: x.triu(diagonal=1), a)
    compare(lambda x: x.trace(), arr((3, 3)))


def test_sort_with_dim():
    ties = np.array([[3.0, 1.0, 3.0, NAN, 1.0, -0.0, 0.0], [2.0, 2.0, 2.0, 5.0, -INF, INF, 0.0]], np.float32)
    # (gradients at nan and inf too: cv.sort's own gives nan there; sort(dim=) reads the values by index)
    for descending in (False, True):
        fn = lambda x: x.sort(dim=-1, descending=descending, stable=True)  # noqa: E731
        compare(fn, ties)
        compare(lambda x: x.sort(dim=0, descending=descending, stable=True), ties)
        compare(lambda x: x.T.sort(dim=1, descending=descending, stable=True), ties)
    compare(lambda x: x.sort(dim=0), arr((6,), np.int32), grad=False, torch_fn=lambda x: x.sort(dim=0, stable=True))
    compare(lambda x: x.sort(dim=0), arr(()), torch_fn=lambda x: x.sort(dim=0))


def test_max_min_forms():
    a = np.array([[1.0, 5.0, 5.0, -2.0], [NAN, 0.0, 7.0, 7.0], [4.0, 4.0, 4.0, 4.0]], np.float32)
    finite = np.nan_to_num(a, nan=-1.0)
    for name in ("max", "min"):
        compare(lambda x: getattr(x, name)(dim=1), a)  # ties: the first, and the gradient goes there
        compare(lambda x: getattr(x, name)(0, keepdim=True), a)
        compare(lambda x: getattr(x, name)(dim=-1, keepdim=False), a.T)
        compare(lambda x: getattr(x, name)(dim=0), arr(()))
        # the whole-tensor reduction is corvid's: its gradient vanishes where the result is nan
        # (PyTorch sends it to the nans), so the nan case compares values only
        compare(lambda x: getattr(x, name)(), a, grad=False)
        compare(lambda x: getattr(x, name)(), finite)
        compare(lambda x, y: getattr(x, name)(y), a, arr((4,)), grad=False)  # (maximum's gradient: nan, as above)
        compare(lambda x, y: getattr(x, name)(y), finite, arr((4,)))
        compare(lambda x: getattr(x, name)(dim=1), arr((3, 4), np.int32), grad=False)
        compare(lambda x: getattr(x, name)(dim=0), arr((3, 4), np.bool_), grad=False)
    compare(lambda x: x.aminmax(), a, grad=False)
    compare(lambda x: x.aminmax(dim=1, keepdim=True), finite)
    compare(lambda x: x.amax(dim=1), finite)  # ties: the gradient is shared


def test_var_std_with_pytorch_keywords():
    a = arr((4, 5))
    for name in ("var", "std"):
        compare(lambda x: getattr(x, name)(dim=1), a)
        compare(lambda x: getattr(x, name)(dim=(0, 1), keepdim=True), a)
        compare(lambda x: getattr(x, name)(0, unbiased=False), a)
        compare(lambda x: getattr(x, name)(dim=0, correction=2), a)
        compare(lambda x: getattr(x, name)(dim=1, keepdim=True, unbiased=True), a.T)
        compare(lambda x: getattr(x, name)(dim=0), arr((2,), np.float64))
    for name in ("var_mean", "std_mean"):
        fn = getattr(torch, name)
        compare(lambda x: getattr(x, name)(dim=1), a, torch_fn=lambda x: fn(x, dim=1))
        compare(lambda x: getattr(x, name)(), a, torch_fn=lambda x: fn(x))
        compare(lambda x: getattr(x, name)(0, keepdim=True, correction=0), a,
                torch_fn=lambda x: fn(x, 0, keepdim=True, correction=0))


def test_positional_forms_are_pytorchs_and_numpy_keywords_numpys():
    torch = pytest.importorskip("torch")
    a = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]], np.float32)
    t, r = cv.Tensor(a), torch.tensor(a)
    for name in ("max", "min", "sort"):
        got, want = getattr(t, name)(1), getattr(r, name)(1)
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    np.testing.assert_array_equal(t.max(axis=1).numpy(), a.max(1))  # (numpy's keyword: the values)
    np.testing.assert_array_equal(t.min(axis=0, keepdims=True).numpy(), a.min(0, keepdims=True))
    np.testing.assert_allclose(t.var().item(), r.var().item(), rtol=1e-6)  # (unbiased)
    np.testing.assert_allclose(t.var(1, False).numpy(), r.var(1, False).numpy(), rtol=1e-6)
    np.testing.assert_allclose(t.var(axis=1).numpy(), a.var(1), rtol=1e-6)
    np.testing.assert_allclose(t.std(1, correction=1).numpy(), a.std(1, ddof=1), rtol=1e-6)
    np.testing.assert_array_equal(t.nonzero().numpy(), r.nonzero().numpy())
    np.testing.assert_array_equal(t.repeat(2, 3).numpy(), r.repeat(2, 3).numpy())
    assert t.squeeze(1).shape == tuple(r.squeeze(1).shape) == (2, 3)
    with pytest.raises(RuntimeError, match="at least"):
        t.repeat(2)  # (fewer sizes than dimensions: PyTorch raises too)
    with pytest.raises(RuntimeError):
        r.repeat(2)


EXISTING = [  # methods corvid had, checked for PyTorch's meaning: nothing here needed changing
    (lambda x: x.transpose(0, 2), (2, 3, 4)), (lambda x: x.transpose(-1, -2), (2, 3, 4)),
    (lambda x: x[:, :1].expand(-1, 5), (3, 2)), (lambda x: x.expand(2, 3, 4), (3, 1)),
    (lambda x: x.reshape(4, -1), (2, 3, 4)), (lambda x: x.reshape((6, 4)), (2, 3, 4)),
    (lambda x: x.flatten(1), (2, 3, 4)), (lambda x: x.flatten(0, 1), (2, 3, 4)), (lambda x: x.flatten(), ()),
    (lambda x: x.clamp(-1.0, 1.0), (2, 3)), (lambda x: x.clamp(max=0.5), (2, 3)),
    (lambda x: x.argmax(1, True), (2, 3)), (lambda x: x.unsqueeze(-1), (2, 3)), (lambda x: x.cumsum(1), (2, 3)),
    (lambda x: x.roll(2, 1), (2, 3)), (lambda x: x.roll((1, 2), (0, 1)), (2, 3)), (lambda x: x.flip(-1), (2, 3)),
    (lambda x: x.softmax(-1), (2, 3)), (lambda x: x.log_softmax(0), (2, 3)), (lambda x: x.logsumexp(0), (2, 3)),
    (lambda x: x.any(), (2, 3)), (lambda x: x.prod(1), (2, 3)), (lambda x: x.topk(2), (2, 3)),
    (lambda x: x.chunk(2, 1), (2, 3)), (lambda x: x.split([1, 2], 1), (2, 3)), (lambda x: x.permute(1, 0), (2, 3)),
    (lambda x: x.squeeze(), (1, 3, 1)), (lambda x: x.diagonal(), (3, 3)), (lambda x: x.tril(), (3, 3)),
    (lambda x: x.remainder(2.0), (2, 3)), (lambda x: x.pow(2), (2, 3)), (lambda x: x.sign(), (2, 3)),
    (lambda x: x.round(decimals=1), (2, 3)), (lambda x: x.mT, (2, 3)), (lambda x: x.T, (2, 3)),
    (lambda x: x.matmul(x.mT), (2, 3)), (lambda x: x.cummax(0), (2, 3)),
    (lambda x: x.gather(0, _idx(x, [[1, 0]])), (2, 2)), (lambda x: x.scatter(0, _idx(x, [[1, 0]]), 5.0), (2, 2)),
]


@pytest.mark.parametrize("fn,shape", EXISTING)
def test_existing_methods_match_pytorch(fn, shape):
    compare(fn, arr(shape))


def test_existing_methods_on_integers_match_pytorch():
    compare(lambda x, lo: x.clamp(min=lo), arr((3, 4)), arr((4,)))
    compare(lambda x: x.clamp(min=1), arr((5,), np.int64), grad=False)
    compare(lambda x: x.clamp(min=0.5), arr((5,), np.int64), grad=False)
    compare(lambda x: x.cumsum(0), arr((4,), np.bool_), grad=False)
    compare(lambda x: x.cumsum(0), arr((4,), np.int8), grad=False)
    compare(lambda x: x.sum(), arr((4,), np.int8), grad=False)
    compare(lambda x: x.floor_divide(2), arr((5,), np.int64, -9, 9), grad=False)
    compare(lambda x: x.abs(), arr((3,), np.int8), grad=False)
    compare(lambda x: x.argsort(), arr((5,), np.int32), grad=False, torch_fn=lambda x: x.argsort(stable=True))
    compare(lambda x: x.mean(), arr((4,), np.float16), rtol=1e-3)
    compare(lambda x: x.nan_to_num(), np.array([NAN, INF, -INF, 1.0], np.float32))


# --- linear algebra -------------------------------------------------------------------------------------
def test_products():
    compare(lambda x, y: x.mm(y), arr((3, 4)), arr((4, 2)))
    compare(lambda x, y: x.T.mm(y), arr((4, 3)), arr((4, 2)))
    compare(lambda x, y: x.mm(y), arr((3, 4), np.int64), arr((4, 2), np.int64), grad=False)
    compare(lambda x, y: x.mv(y), arr((3, 4)), arr((4,)))
    compare(lambda x, y: x.bmm(y), arr((2, 3, 4)), arr((2, 4, 5)))
    compare(lambda x, y: x.outer(y), arr((3,)), arr((2,)))
    compare(lambda x, y: x.dot(y), arr((5,)), arr((5,)))
    compare(lambda x, y: x.dot(y), arr((0,)), arr((0,)), grad=False)
    compare(lambda x, y: x.cross(y), arr((3, 4)), arr((3, 4)))
    compare(lambda x, y: x.cross(y, dim=-1), arr((2, 3)), arr((2, 3)))
    compare(lambda x, y: x.cross(y, dim=1), arr((2, 3, 3)), arr((2, 3, 3)))
    for sa, sb in (((2,), (3,)), ((2, 3), (2, 2)), ((2,), (2, 2)), ((2, 1, 2), (3, 2)), ((), (2,))):
        compare(lambda x, y: x.kron(y), arr(sa), arr(sb))
    compare(lambda x, y: x.kron(y), arr((2, 2), np.int32), arr((2,), np.int32), grad=False)
    m = arr((3, 2))
    compare(lambda s, x, y: s.addmm(x, y), m, arr((3, 4)), arr((4, 2)))
    compare(lambda s, x, y: s.addmm(x, y, beta=0.5, alpha=2), arr((2,)), arr((3, 4)), arr((4, 2)))
    compare(lambda s, x, y: s.addmm(x, y, beta=0), np.full((3, 2), NAN, np.float32), arr((3, 4)), arr((4, 2)))
    compare(lambda x: x.diag(), arr((3,)))
    compare(lambda x: x.diag(-1), arr((3, 4)))
    compare(lambda x: x.diag(2), arr((2,), np.int32), grad=False)


# --- indexing -------------------------------------------------------------------------------------------
def _idx(x, values):
    """``values`` as an int64 index tensor of ``x``'s library."""
    if isinstance(x, cv.Tensor):
        return cv.Tensor(np.array(values, np.int64))
    return torch.tensor(values, dtype=torch.int64)


def test_index_add_copy_fill():
    a = arr((4, 3))
    compare(lambda x, s: x.index_add(0, _idx(x, [0, 2, 0]), s), a, arr((3, 3)))
    compare(lambda x, s: x.index_add(1, _idx(x, [2, 2]), s, alpha=-2), a, arr((4, 2)))
    compare(lambda x, s: x.index_add(-1, _idx(x, [1]), s), arr((2, 3, 2)), arr((2, 3, 1)))
    compare(lambda x, s: x.T.index_add(0, _idx(x, [1, 0]), s), a, arr((2, 4)))
    compare(lambda x, s: x.index_add(0, _idx(x, []), s), a, arr((0, 3)))
    compare(lambda x, s: x.index_add(0, _idx(x, [1, 1]), s), arr((3,), np.int32), arr((2,), np.int32), grad=False)
    compare(lambda x, s: x.index_copy(0, _idx(x, [3, 1]), s), a, arr((2, 3)))
    compare(lambda x, s: x.index_copy(1, _idx(x, [0]), s), a, arr((4, 1)))
    compare(lambda x: x.index_fill(1, _idx(x, [0, 2]), -1.0), a)
    compare(lambda x, v: x.index_fill(0, _idx(x, [1, 1, 3]), v), a, np.float32(2.5))
    compare(lambda x: x.index_fill(0, _idx(x, [0]), 7), arr((2, 2), np.int64), grad=False)


def test_scatter_gather_take():
    a = arr((3, 4))
    idx = RNG.integers(0, 3, (2, 4))
    compare(lambda x, s: x.scatter_add(0, _idx(x, idx.tolist()), s), a, arr((2, 4)))
    compare(lambda x, s: x.scatter_add(1, _idx(x, [[0, 0], [3, 0], [1, 1]]), s), a, arr((3, 2)))
    compare(lambda x: x.gather(dim=1, index=_idx(x, [[0, 3], [1, 1], [2, 0]])), a)
    compare(lambda x: x.index_select(dim=1, index=_idx(x, [3, 0, 3])), a)
    compare(lambda x, s: x.scatter(dim=1, index=_idx(x, [[0], [2], [1]]), src=s), a, arr((3, 1)))
    compare(lambda x, s: x.scatter_reduce(0, _idx(x, idx.tolist()), s, "amax", include_self=False), a, arr((2, 4)))
    compare(lambda x: x.take_along_dim(_idx(x, [[0], [3], [1]]), dim=1), a)
    compare(lambda x: x.take_along_dim(_idx(x, [[0], [2]]), dim=0), a)  # the other dimension broadcasts
    compare(lambda x: x.take_along_dim(_idx(x, [11, 0, 5])), a)


def test_nonzero_argwhere():
    for a in (arr((3, 4), np.int32, -1, 1), arr((5,), np.bool_), np.zeros((2, 2), np.float32), np.float32(2.0),
              np.float32(0.0), np.zeros((0, 3), np.int64)):
        compare(lambda x: x.nonzero(as_tuple=False), a, grad=False)
        compare(lambda x: x.nonzero(as_tuple=True), a, grad=False)
        compare(lambda x: x.argwhere(), a, grad=False)


def test_repeat_interleave():
    a = arr((2, 3))
    compare(lambda x: x.repeat_interleave(2), a)
    compare(lambda x: x.repeat_interleave(3, dim=1), a)
    compare(lambda x: x.repeat_interleave(_idx(x, [0, 2]), dim=0), a)
    compare(lambda x: x.repeat_interleave(_idx(x, [1, 0, 3]), dim=-1, output_size=4), a)
    compare(lambda x: x.repeat_interleave(2), arr(()))
    compare(lambda x: x.repeat_interleave(_idx(x, [2])), arr((3,), np.int64), grad=False)
    compare(lambda x: x.T.repeat_interleave(2, dim=0), a)


def test_unique():
    a = np.array([[3, 1, 2], [1, 3, 3]], np.int64)
    both = {"return_inverse": True, "return_counts": True}
    for flags in ({}, {"return_inverse": True}, {"return_counts": True}, both):
        compare(lambda x: x.unique(**flags), a, grad=False)
        compare(lambda x: x.unique(sorted=True, **flags), a.astype(np.float32), grad=False)
    compare(lambda x: x.unique(return_counts=True), np.array([NAN, 1.0, NAN, -0.0, 0.0], np.float32), grad=False)
    compare(lambda x: x.unique(return_inverse=True), np.array([True, False, True]), grad=False)
    compare(lambda x: x.unique(return_inverse=True, return_counts=True), np.zeros((0, 2), np.int32), grad=False)
    compare(lambda x: x.unique(), np.float32(4.0), grad=False)


# --- in place -------------------------------------------------------------------------------------------
def _both(fn, *arrays):
    """``fn(lib, *tensors)`` (it updates them in place) on copies of ``arrays``: the tensors after."""
    cs = [cv.Tensor(a.copy()) for a in arrays]
    ts = [torch.tensor(a.copy()) for a in arrays]
    fn(cv, *cs)
    fn(torch, *ts)
    same(cs, ts)


def test_in_place_methods():
    a, b = arr((3, 4)), arr((4,))
    _both(lambda lib, x, y: x.add_(y, alpha=2), a, b)
    _both(lambda lib, x, y: x.mul_(y).sub_(1.5), a, b)
    _both(lambda lib, x, y: x.div_(y + 10.0), a, b)
    _both(lambda lib, x: x.fill_(3), a)
    _both(lambda lib, x: x.zero_(), arr((2,), np.int32))
    _both(lambda lib, x, y: x.copy_(y), a, b)
    _both(lambda lib, x, y: x.copy_(y), arr((3,), np.int32), arr((3,), np.float32))
    _both(lambda lib, x: x.clamp_(-1.0, 1.0).exp_(), a)
    _both(lambda lib, x, m: x.masked_fill_(m, 0.0), a, arr((3, 4), np.bool_))
    _both(lambda lib, x, s: x.index_add_(0, _idx(x, [2, 2]), s), a, arr((2, 4)))
    _both(lambda lib, x: x.scatter_(1, _idx(x, [[1], [0], [3]]), 9.0), a)
    _both(lambda lib, x, y: x.add_(y), arr((3,), np.float32), arr((3,), np.float64))  # float64 into float32
    _both(lambda lib, x: x.add_(2).mul_(3), arr((3,), np.int64))
    _both(lambda lib, x: x.fill_(-1), arr((2,), np.uint8, 0, 9))
    _both(lambda lib, x, y: x.lerp_(y, 0.25).neg_().abs_().sqrt_(), a, b)
    x = cv.Tensor([1.0, 2.0])
    assert x.add_(1) is x and x.tolist() == [2.0, 3.0]


def test_in_place_and_gradients():
    for lib in (cv, torch):
        w = lib.tensor([1.0, 2.0], requires_grad=True) if lib is torch else cv.Tensor([1.0, 2.0], requires_grad=True)
        with pytest.raises(RuntimeError):
            w.add_(1.0)  # a leaf that requires grad, while gradients are recorded
        y = w * 2
        y.add_(w)  # a result: the update is part of the graph
        y.sum().backward()
        assert w.grad.tolist() == [3.0, 3.0]
        with (lib.no_grad() if lib is torch else cv.no_grad()):
            w.sub_(w.grad, alpha=0.5)  # an optimizer step
        assert w.tolist() == [-0.5, 0.5] and w.requires_grad


def test_in_place_errors():
    with pytest.raises(TypeError, match="cannot be stored in this int64"):
        cv.Tensor([1, 2]).div_(2)
    with pytest.raises(TypeError, match="int64"):
        cv.Tensor([1, 2]).add_(0.5)
    with pytest.raises(ValueError, match=r"cannot change the shape"):
        cv.zeros(3).add_(cv.zeros(2, 3))
    y = cv.zeros(2, 3)
    y[0].add_(1.0)  # a view shares no memory in corvid: y is unchanged (PyTorch would change it)
    assert y.sum().item() == 0.0


# --- bad input ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call,error,match", [
    (lambda x: x.mm(cv.zeros(2, 2, 2)), ValueError, r"mm: expected 2-D and 2-D tensors, got shapes \(2, 3\)"),
    (lambda x: x.bmm(x), ValueError, "bmm: expected 3-D"),
    (lambda x: x.dot(x), ValueError, "dot: expected 1-D"),
    (lambda x: x.unfold(1, 4, 1), ValueError, r"unfold: needs 0 <= size <= 3"),
    (lambda x: x.unfold(1, 2, 0), ValueError, "step > 0"),
    (lambda x: x.masked_fill(cv.ones(2, 3), 1.0), TypeError, "mask must be a bool tensor"),
    (lambda x: x.masked_fill(x > 0, cv.zeros(3)), ValueError, "0-d tensor"),
    (lambda x: x.masked_select(cv.ones(3)), TypeError, "bool"),
    (lambda x: x.narrow(1, 4, 1), IndexError, "narrow: start 4"),
    (lambda x: x.narrow(1, 1, 3), ValueError, "exceeds dimension 1"),
    (lambda x: x.reshape(1, 2, 3).t(), ValueError, r"t\(\) needs at most 2"),
    (lambda x: x[0].H, ValueError, "matrices"),
    (lambda x: x[0].fliplr(), ValueError, "fliplr"),
    (lambda x: x.index_add(0, [0], cv.zeros(2, 3)), ValueError, r"source must have shape \(1, 3\)"),
    (lambda x: x.index_add(0, [5], cv.zeros(1, 3)), IndexError, "index 5 is out of bounds"),
    (lambda x: x.index_copy(0, [[0]], cv.zeros(1, 3)), ValueError, "index must be 1-D"),
    (lambda x: x.index_add(0, [0.5], cv.zeros(1, 3)), TypeError, "integer"),
    (lambda x: x.unique(dim=0), NotImplementedError, "unique"),
    (lambda x: x.max(dim=None), TypeError, "x.max()"),
    (lambda x: x.max(dim=1.5), TypeError, "dim must be an int"),
    (lambda x: x.sum(dim=0, axis=0), TypeError, "both dim= and axis="),
    (lambda x: x.var(dim=0, unbiased=True, correction=1), TypeError, "both unbiased= and correction="),
    (lambda x: x.sort(0, dim=0), TypeError, "multiple values for argument 'dim'"),
    (lambda x: x.flip(0, dims=1), TypeError, "axes once"),
    (lambda x: x.isclose(x, rtol=-1.0), ValueError, "non-negative"),
    (lambda x: x.tensor_split(0), ValueError, "sections must be positive"),
    (lambda x: x.unflatten(1, (2, 2)), ValueError, r"sizes \(2, 2\) do not fill dimension 1 of size 3"),
    (lambda x: x.repeat_interleave(2, dim=0, output_size=3), ValueError, "output_size=3"),
    (lambda x: x[:, :2].cross(x[:, :2]), ValueError, "no dimension of size 3"),
    (lambda x: x.view(cv.float64), ValueError, "item sizes"),
    (lambda x: x.positive().bool().positive(), TypeError, "bool"),
])
def test_bad_input_raises_clearly(call, error, match):
    with pytest.raises(error, match=match):
        call(cv.Tensor(arr((2, 3))))


def test_docstrings_and_names():
    for name in ("unfold", "masked_fill", "index_add", "kron", "isclose"):
        method = getattr(cv.Tensor, name)
        assert method.__doc__ and "\n" in method.__doc__
    assert "dim=" in cv.Tensor.sum.__doc__ and cv.Tensor.sum.__name__ == "sum"
    assert cv.Tensor.add_.__name__ == "add_" and cv.Tensor.int.__doc__.endswith("one already).")


def test_docs_pytorch_md_examples_run():
    text = (Path(__file__).resolve().parent.parent / "docs" / "pytorch.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/pytorch.md", "exec"), {})

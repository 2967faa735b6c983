"""interpolate against a float64 numpy loop reference of torch's formulas (and torch itself when it
is installed), for up- and down-sampling, every mode and align_corners; gradients, vmap, errors."""

import itertools
import math

import numpy as np
import pytest

import corvid as cv

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # torch is only an extra oracle
    torch = None

rng = np.random.default_rng(0)
A = -0.75


def _cubic_weight(d):
    d = abs(d)
    if d <= 1:
        return ((A + 2) * d - (A + 3)) * d * d + 1
    if d < 2:
        return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A
    return 0.0


def _taps(i, o, dst, mode, align_corners, factor):
    """(source index, weight) pairs that output element ``dst`` of an axis reads."""
    if mode in ("nearest", "nearest-exact"):
        scale = np.float32(1 / factor) if factor else np.float32(i) / np.float32(o)
        shift = np.float32(0.5) if mode == "nearest-exact" else np.float32(0)
        return [(min(int(math.floor((np.float32(dst) + shift) * scale)), i - 1), 1.0)]
    if align_corners:
        src = dst * ((i - 1) / (o - 1) if o > 1 else 0.0)
    else:
        src = (dst + 0.5) * (1 / factor if factor else i / o) - 0.5
    if mode == "bicubic":
        base = math.floor(src)
        return [(min(max(base + t, 0), i - 1), _cubic_weight(src - (base + t))) for t in (-1, 0, 1, 2)]
    src = max(src, 0.0)
    lo = min(int(math.floor(src)), i - 1)
    frac = src - lo
    return [(lo, 1 - frac), (min(lo + 1, i - 1), frac)]


def interp_ref(x, size, mode, align_corners=False, factors=None):
    spatial = x.shape[2:]
    factors = factors or (None,) * len(size)
    out = np.zeros(x.shape[:2] + tuple(size))
    for o in itertools.product(*map(range, size)):
        per_axis = [_taps(i, n, d, mode, align_corners, f) for i, n, d, f in zip(spatial, size, o, factors)]
        for combo in itertools.product(*per_axis):
            w = np.prod([c[1] for c in combo])
            out[(slice(None), slice(None)) + o] += w * x[(slice(None), slice(None)) + tuple(c[0] for c in combo)]
    return out


MODES = [("nearest", 1), ("nearest", 2), ("nearest", 3), ("nearest-exact", 2), ("linear", 1), ("bilinear", 2),
         ("bicubic", 2), ("trilinear", 3)]
SIZES = [((7, 3, 6), None), ((2, 8, 1), None), (None, 2), (None, 0.5), (None, 1.7), (None, (3, 0.6, 2.5))]


_CASES = [(m, n, a) for m, n in MODES for a in (False, True) if not (a and m.startswith("nearest"))]  # align_corners: linear/cubic only


@pytest.mark.parametrize("mode,nd,align_corners", _CASES, ids=[f"{m}-{n}d-{a}" for m, n, a in _CASES])
def test_interpolate_matches_reference(mode, nd, align_corners):
    x = rng.standard_normal((2, 3) + (5, 4, 3)[:nd])
    for size, factor in SIZES:
        size = size[:nd] if size is not None else None
        factor = factor[:nd] if isinstance(factor, tuple) else factor
        got = cv.interpolate(cv.Tensor(x), size, factor, mode, align_corners if mode[0] != "n" else None)
        if size is None:
            fs = factor if isinstance(factor, tuple) else (factor,) * nd
            out = tuple(math.floor(i * f) for i, f in zip(x.shape[2:], fs))
        else:
            out, fs = size, None
        want = interp_ref(x, out, mode, align_corners, fs)
        assert got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12, err_msg=f"{size} {factor}")
        if torch is not None:
            ac = align_corners if mode[0] != "n" else None
            want_t = F.interpolate(torch.from_numpy(x), size, factor, mode, ac).numpy()
            np.testing.assert_allclose(want_t, want, rtol=1e-10, atol=1e-10, err_msg=f"torch {size} {factor}")


def test_nearest_copies_bit_exactly_and_keeps_ints():
    x = np.array([[[-0.0, np.nan, 1.5]]], np.float32)
    up = cv.interpolate(cv.Tensor(x), scale_factor=2).numpy()
    assert np.signbit(up[0, 0, :2]).all() and np.isnan(up[0, 0, 2:4]).all()
    odd = cv.interpolate(cv.Tensor(x), size=5).numpy()
    np.testing.assert_array_equal(np.isnan(odd), np.isnan(interp_ref(x.astype(np.float64), (5,), "nearest")))
    xi = rng.integers(0, 9, (1, 1, 3, 3)).astype(np.int32)
    got = cv.interpolate(cv.Tensor(xi), size=(4, 5))
    assert got.dtype == cv.int32
    np.testing.assert_array_equal(got.numpy(), interp_ref(xi, (4, 5), "nearest").astype(np.int32))


def test_area_mode_is_adaptive_avg_pool():
    x = rng.standard_normal((1, 2, 7, 5))
    np.testing.assert_allclose(cv.interpolate(cv.Tensor(x), size=(3, 2), mode="area").numpy(),
                               cv.adaptive_avg_pool2d(cv.Tensor(x), (3, 2)).numpy(), rtol=1e-12)


@pytest.mark.parametrize("mode,shape,size", [
    ("bilinear", (1, 2, 3, 4), (5, 3)), ("bicubic", (1, 1, 4, 3), (3, 5)),
    ("trilinear", (1, 1, 2, 3, 2), (3, 2, 4)), ("nearest", (1, 2, 3, 4), (5, 2))])
def test_interpolate_grad_matches_finite_differences(mode, shape, size):
    x = rng.standard_normal(shape)
    g = rng.standard_normal(shape[:2] + size)
    ac = None if mode == "nearest" else True
    got = cv.grad(lambda t: (cv.interpolate(t, size, mode=mode, align_corners=ac) * cv.Tensor(g)).sum())(cv.Tensor(x))
    num = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[idx] += 1e-6
        lo[idx] -= 1e-6
        num[idx] = ((interp_ref(hi, size, mode, bool(ac)) - interp_ref(lo, size, mode, bool(ac))) * g).sum() / 2e-6
    np.testing.assert_allclose(got.numpy(), num, rtol=1e-6, atol=1e-6)


def test_interpolate_vmap_matches_loop():
    xs = rng.standard_normal((3, 1, 2, 4, 3))
    got = cv.vmap(lambda x: cv.interpolate(x, scale_factor=1.5, mode="bicubic"))(cv.Tensor(xs)).numpy()
    for i in range(3):
        want = interp_ref(xs[i], (6, 4), "bicubic", False, (1.5, 1.5))
        np.testing.assert_allclose(got[i], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(size=3, mode="cubic"), ValueError, r"unknown mode 'cubic'"),
    (dict(size=3, mode="bilinear"), ValueError, r"'bilinear' needs 2 spatial dimensions.*\(1, 2, 5\)"),
    (dict(size=3, scale_factor=2), ValueError, r"exactly one of size and scale_factor"),
    (dict(), ValueError, r"exactly one of size and scale_factor"),
    (dict(scale_factor=0.1), ValueError, r"empty output size \(0,\)"),
    (dict(size=0), ValueError, r"positive ints"),
    (dict(size=(3, 3)), ValueError, r"size must be 1 positive ints"),
    (dict(size=3, align_corners=True), ValueError, r"align_corners only applies"),
])
def test_interpolate_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        cv.interpolate(cv.zeros(1, 2, 5), **kwargs)


def test_interpolate_rejects_bad_ranks_and_int_linear():
    with pytest.raises(ValueError, match=r"3 to 5 dimensions.*\(2, 5\)"):
        cv.interpolate(cv.zeros(2, 5), size=3)
    with pytest.raises(TypeError, match="float"):
        cv.interpolate(cv.zeros(1, 1, 4, dtype=cv.int32), size=3, mode="linear")

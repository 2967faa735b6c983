"""cv.fft against numpy.fft (float64/complex128 reference), gradients against finite differences
and against the linear-algebra identities of the DFT, transforms composing (vmap, jit)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corvid as cv

RNG = np.random.default_rng(0)
# every code path: dense (<= 16), mixed radix (16-smooth), dense primes (17..64), a split-off
# prime factor, Bluestein (a prime above 64, alone or behind small factors, or two large primes)
LENGTHS = [1, 2, 3, 5, 8, 12, 16, 17, 31, 48, 64, 67, 100, 210, 256, 289, 1000, 1009, 2 * 1009, 71 * 73, 4096]


def crand(*shape, dtype=np.complex128):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def rel_err(got, ref):
    return np.abs(got - ref).max() / max(1.0, np.abs(ref).max())


@pytest.mark.parametrize("n", LENGTHS)
def test_fft_and_ifft_match_numpy_any_length(n):
    x = crand(2, n)
    for dtype, tol in ((np.complex64, 3e-6), (np.complex128, 1e-13)):
        xd = x.astype(dtype)
        got = cv.fft.fft(cv.Tensor(xd)).numpy()
        assert got.dtype == dtype
        assert rel_err(got, np.fft.fft(xd.astype(np.complex128))) < tol * max(1.0, np.log2(n))
        got = cv.fft.ifft(cv.Tensor(xd)).numpy()
        assert got.dtype == dtype
        assert rel_err(got, np.fft.ifft(xd.astype(np.complex128))) < tol * max(1.0, np.log2(n))


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
@pytest.mark.parametrize("fn", ["fft", "ifft"])
def test_norm_and_n_and_axis(fn, norm):
    x = crand(3, 10, 4)
    for n in (None, 7, 10, 16):
        for axis in (0, 1, -1):
            got = getattr(cv.fft, fn)(cv.Tensor(x), n=n, axis=axis, norm=norm).numpy()
            ref = getattr(np.fft, fn)(x, n=n, axis=axis, norm=norm)
            assert got.shape == ref.shape
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_real_and_integer_inputs_promote():
    xf = RNG.standard_normal(12)
    assert cv.fft.fft(cv.Tensor(xf)).dtype == cv.complex128
    assert cv.fft.fft(cv.Tensor(xf.astype(np.float32))).dtype == cv.complex64
    xi = np.arange(12, dtype=np.int32)
    got = cv.fft.fft(cv.Tensor(xi))
    assert got.dtype == cv.complex64
    np.testing.assert_allclose(got.numpy(), np.fft.fft(xi), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_fftn_ifftn_fft2_ifft2(norm):
    x = crand(4, 6, 5)
    for s, axes in ((None, None), (None, (0, 2)), ((3, 8), None), ((5, -1), (2, 0)), (None, (1,)), (None, ())):
        got = cv.fft.fftn(cv.Tensor(x), s=s, axes=axes, norm=norm).numpy()
        ref = np.fft.fftn(x, s=None if s is None else [x.shape[a] if v == -1 else v for a, v in
                                                       zip(axes if axes is not None else range(3 - len(s), 3), s)],
                          axes=axes, norm=norm)
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-11)
        back = cv.fft.ifftn(cv.fft.fftn(cv.Tensor(x), axes=axes, norm=norm), axes=axes, norm=norm).numpy()
        np.testing.assert_allclose(back, x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cv.fft.fft2(cv.Tensor(x), norm=norm).numpy(), np.fft.fft2(x, norm=norm), atol=1e-11)
    np.testing.assert_allclose(cv.fft.ifft2(cv.Tensor(x), s=(3, 7), norm=norm).numpy(),
                               np.fft.ifft2(x, s=(3, 7), norm=norm), atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 7, 8, 16, 67, 100])
@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_rfft_irfft_round_trip_and_match_numpy(n, norm):
    x = RNG.standard_normal((3, n))
    got = cv.fft.rfft(cv.Tensor(x), norm=norm).numpy()
    np.testing.assert_allclose(got, np.fft.rfft(x, norm=norm), rtol=1e-12, atol=1e-12)
    for m in ((None,) if n > 1 else ()) + (n, n + 1, max(1, n - 1)):  # n=1: the default length 0 is an error
        back = cv.fft.irfft(cv.Tensor(got), n=m, norm=norm).numpy()
        ref = np.fft.irfft(got, n=m, norm=norm)
        assert back.dtype == np.float64 and back.shape == ref.shape
        np.testing.assert_allclose(back, ref, rtol=1e-12, atol=1e-12)
    # float32 in, complex64 out
    assert cv.fft.rfft(cv.Tensor(x.astype(np.float32))).dtype == cv.complex64


def test_irfft_ignores_imaginary_dc_and_nyquist_like_numpy():
    spec = crand(5)
    for n in (8, 9):
        np.testing.assert_allclose(cv.fft.irfft(cv.Tensor(spec), n=n).numpy(), np.fft.irfft(spec, n=n), atol=1e-12)


def test_rfftn_irfftn():
    x = RNG.standard_normal((4, 6, 5))
    for s, axes in ((None, None), (None, (0, 1)), ((4, 8), (2, 1)), ((3, 6, 4), None)):
        got = cv.fft.rfftn(cv.Tensor(x), s=s, axes=axes).numpy()
        ref = np.fft.rfftn(x, s=s, axes=axes)
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-11)
        back = cv.fft.irfftn(cv.Tensor(ref), s=s, axes=axes).numpy()
        np.testing.assert_allclose(back, np.fft.irfftn(ref, s=s, axes=axes), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cv.fft.irfftn(cv.fft.rfftn(cv.Tensor(x))).numpy(),
                               np.fft.irfftn(np.fft.rfftn(x)), atol=1e-12)


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_hfft_ihfft(norm):
    spec = crand(2, 6)
    for n in (None, 10, 11):
        np.testing.assert_allclose(cv.fft.hfft(cv.Tensor(spec), n=n, norm=norm).numpy(),
                                   np.fft.hfft(spec, n=n, norm=norm), rtol=1e-12, atol=1e-11)
    x = RNG.standard_normal((2, 9))
    np.testing.assert_allclose(cv.fft.ihfft(cv.Tensor(x), norm=norm).numpy(), np.fft.ihfft(x, norm=norm),
                               rtol=1e-12, atol=1e-12)


# rfft/irfft of even n run a length-n/2 complex transform: every code path of that half (dense: 4,
# 6; radix: 64; a dense prime: 62; Bluestein: 2 * 1009) and odd n (the full transform). Small
# lengths also with n trimming or zero-padding the input (not the large one: each length compiles)
REAL_LENGTHS = [1, 2, 3, 4, 5, 6, 9, 62, 64, 2 * 1009]


@pytest.mark.parametrize("n", REAL_LENGTHS)
def test_rfft_and_irfft_half_length_paths_match_numpy(n):
    x = RNG.standard_normal((3, n))
    # not the rfft of a real signal: complex DC and Nyquist bins, whose imaginary parts irfft ignores
    spec = crand(3, n // 2 + 1)
    small = n <= 64
    for real, cplx, tol in ((np.float32, np.complex64, 3e-6), (np.float64, np.complex128, 1e-13)):
        tol *= max(1.0, np.log2(n))
        xs = x.astype(real)
        for m in (n, n - 1, n + 2) if small else (n,):  # as is, trimmed (the other parity), zero-padded
            if m >= 1:
                got = cv.fft.rfft(cv.Tensor(xs), n=m).numpy()
                assert got.dtype == cplx and got.shape == (3, m // 2 + 1)
                assert rel_err(got, np.fft.rfft(xs.astype(np.float64), n=m)) < tol
        s = spec.astype(cplx)
        for m in ((None,) if n > 1 else ()) + ((n, n + 1, 2 * n) if small else ()):  # default, odd/even, padded
            got = cv.fft.irfft(cv.Tensor(s), n=m).numpy()
            ref = np.fft.irfft(s.astype(np.complex128), n=m)
            assert got.dtype == real and got.shape == ref.shape
            assert rel_err(got, ref) < tol


def test_rfft_irfft_batched_along_any_axis():
    x = RNG.standard_normal((4, 10, 3))
    cases = [(axis, n) for axis in (0, 1, -1) for n in (None, 7, 12)]  # each norm once per axis
    for (axis, n), norm in zip(cases, ["backward", "ortho", "forward"] * 3):
        got = cv.fft.rfft(cv.Tensor(x), n=n, axis=axis, norm=norm).numpy()
        ref = np.fft.rfft(x, n=n, axis=axis, norm=norm)
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
        back = cv.fft.irfft(cv.Tensor(ref), n=n, axis=axis, norm=norm).numpy()
        np.testing.assert_allclose(back, np.fft.irfft(ref, n=n, axis=axis, norm=norm), rtol=1e-12, atol=1e-12)


def test_rfft_irfft_empty_batches():
    for shape, axis in (((0, 8), -1), ((3, 0, 8), -1), ((8, 0), 0), ((2, 7, 0), 1)):
        x = np.zeros(shape, np.float32)
        got = cv.fft.rfft(cv.Tensor(x), axis=axis)
        ref = np.fft.rfft(x, axis=axis)
        assert got.shape == ref.shape and got.dtype == cv.complex64 and got.numpy().shape == ref.shape
        for n in (6, 7):
            back = cv.fft.irfft(got, n=n, axis=axis)
            assert back.shape == np.fft.irfft(ref, n=n, axis=axis).shape and back.dtype == cv.float32
            assert back.numpy().size == 0


def test_irfft_ignores_imaginary_dc_and_nyquist_after_trimming_or_padding():
    spec = crand(2, 6)
    for n in (4, 5, 6, 10, 11, 12, 13):  # Nyquist inside (4, 6), the last bin (10), padded away (12)
        ref = np.fft.irfft(spec, n=n)
        np.testing.assert_allclose(cv.fft.irfft(cv.Tensor(spec), n=n).numpy(), ref, atol=1e-12)
        dropped = spec.copy()
        dropped[:, 0] = dropped[:, 0].real
        if n % 2 == 0 and n // 2 < spec.shape[1]:
            dropped[:, n // 2] = dropped[:, n // 2].real
        np.testing.assert_allclose(cv.fft.irfft(cv.Tensor(dropped), n=n).numpy(), ref, atol=1e-12)


def test_real_transforms_in_float32_through_the_n_dimensional_and_hermitian_forms():
    x = RNG.standard_normal((6, 8)).astype(np.float32)
    got = cv.fft.rfftn(cv.Tensor(x))
    assert got.dtype == cv.complex64
    assert rel_err(got.numpy(), np.fft.rfftn(x.astype(np.float64))) < 1e-5
    back = cv.fft.irfftn(got)
    assert back.dtype == cv.float32 and rel_err(back.numpy(), x) < 1e-5
    spec = crand(6, 5, dtype=np.complex64)
    for n in (8, 9):
        assert rel_err(cv.fft.hfft(cv.Tensor(spec), n=n).numpy(), np.fft.hfft(spec.astype(np.complex128), n=n)) < 1e-5
    assert rel_err(cv.fft.ihfft(cv.Tensor(x)).numpy(), np.fft.ihfft(x.astype(np.float64))) < 1e-6


@pytest.mark.parametrize("n", [1, 2, 5, 8, 11])
def test_fftfreq_rfftfreq(n):
    for d in (1.0, 0.25):
        np.testing.assert_allclose(cv.fft.fftfreq(n, d=d).numpy(), np.fft.fftfreq(n, d=d), rtol=1e-6)
        np.testing.assert_allclose(cv.fft.rfftfreq(n, d=d, dtype=cv.float64).numpy(), np.fft.rfftfreq(n, d=d))
    assert cv.fft.fftfreq(n).dtype == cv.float32 and cv.fft.fftfreq(n, dtype=cv.float64).dtype == cv.float64


def test_fftshift_ifftshift():
    for shape in ((7,), (4, 5), (3, 4, 6)):
        x = np.arange(np.prod(shape)).reshape(shape)
        for axes in (None, 0, -1, (0, -1)):
            np.testing.assert_array_equal(cv.fft.fftshift(cv.Tensor(x), axes=axes).numpy(), np.fft.fftshift(x, axes))
            np.testing.assert_array_equal(cv.fft.ifftshift(cv.Tensor(x), axes=axes).numpy(), np.fft.ifftshift(x, axes))
    np.testing.assert_array_equal(cv.fft.fftshift(cv.fft.fftfreq(6)).numpy(),
                                  np.fft.fftshift(np.fft.fftfreq(6)).astype(np.float32))


def test_empty_batches_and_length_one():
    for fn in ("fft", "ifft"):
        got = getattr(cv.fft, fn)(cv.Tensor(np.zeros((0, 8), np.complex64)))
        assert got.shape == (0, 8) and got.dtype == cv.complex64 and got.numpy().shape == (0, 8)
    assert cv.fft.rfft(cv.Tensor(np.zeros((3, 0, 4)))).shape == (3, 0, 3)
    x = crand(3, 1)
    np.testing.assert_allclose(cv.fft.fft(cv.Tensor(x)).numpy(), x)


def test_quarter_turn_twiddles_are_exact():
    # 1, -i, -1, i exactly (no 1e-16 imaginary parts from exp(-i pi)), in the complex and real paths
    x = cv.Tensor([1.0, 2.0, 3.0, 4.0])
    assert cv.fft.fft(x).numpy().tolist() == [10, -2 + 2j, -2, -2 - 2j]
    assert cv.fft.rfft(x).numpy().tolist() == [10, -2 + 2j, -2]


def test_special_values_propagate():
    x = np.array([1.0, np.inf, 0.0, 2.0])
    got = cv.fft.fft(cv.Tensor(x)).numpy()
    assert not np.isfinite(got).all()  # like numpy: an inf spreads to every frequency
    x = np.array([1.0, np.nan, 0.0, 2.0])
    assert np.isnan(cv.fft.fft(cv.Tensor(x)).numpy()).all()


def test_bad_input_raises_at_the_call():
    x = cv.Tensor(crand(4))
    with pytest.raises(ValueError, match="norm"):
        cv.fft.fft(x, norm="unitary")
    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match="data points"):
            cv.fft.fft(x, n=bad)
    with pytest.raises(ValueError, match="0-d"):
        cv.fft.fft(cv.Tensor(1.0 + 0j))
    with pytest.raises(TypeError, match="real input"):
        cv.fft.rfft(x)
    with pytest.raises(TypeError, match="real input"):
        cv.fft.ihfft(x)
    with pytest.raises(ValueError, match="repeated axes"):
        cv.fft.fftn(cv.Tensor(crand(2, 3)), axes=(0, 0))
    with pytest.raises(ValueError, match="different lengths"):
        cv.fft.fftn(cv.Tensor(crand(2, 3)), s=(2,), axes=(0, 1))
    with pytest.raises(ValueError, match="data points"):
        cv.fft.irfft(cv.Tensor(crand(1)))  # default n = 2 (1 - 1) = 0
    with pytest.raises((IndexError, ValueError)):
        cv.fft.fft(x, axis=3)
    with pytest.raises(ValueError, match="data points"):
        cv.fft.fftfreq(0)


# ---------------------------------------------------------------- derivatives and transforms

def test_grad_parseval_and_finite_differences():
    # sum |fft(x)|^2 = n sum x^2  =>  d/dx = 2 n x, through every path (dense, radix, Bluestein)
    for n in (5, 48, 67):
        x = RNG.standard_normal(n)
        g = cv.grad(lambda t: (cv.abs(cv.fft.fft(t)) ** 2).sum())(cv.Tensor(x)).numpy()
        np.testing.assert_allclose(g, 2 * n * x, rtol=1e-10, atol=1e-10)
    # a loss that weights frequencies unevenly, against central differences
    x = RNG.standard_normal(20)
    w = RNG.standard_normal(11)

    def loss_np(v):
        return float((w * np.abs(np.fft.rfft(v)) ** 1.5).sum() + np.fft.irfft(np.fft.rfft(v) * 1j, n=20).sum() ** 2)

    def loss_cv(t):
        r = cv.fft.rfft(t)
        return (cv.Tensor(w) * cv.abs(r) ** 1.5).sum() + cv.fft.irfft(r * 1j, n=20).sum() ** 2

    g = cv.grad(loss_cv)(cv.Tensor(x)).numpy()
    eps = 1e-6
    fd = np.array([(loss_np(x + eps * e) - loss_np(x - eps * e)) / (2 * eps) for e in np.eye(20)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [6, 7])
def test_grad_through_rfft_and_irfft_against_finite_differences(n):
    # rfft (real input) and irfft (complex input: the gradient is dL/dRe - 1j dL/dIm, the jax
    # convention) against central differences, for the half-length path (even n) and the full one
    # (odd n); trimmed and padded lengths, ortho scaling
    x = RNG.standard_normal(n)
    w = RNG.standard_normal(n // 2 + 1)
    g = cv.grad(lambda t: (cv.Tensor(w) * cv.abs(cv.fft.rfft(t, norm="ortho")) ** 1.5).sum())(cv.Tensor(x)).numpy()
    eps = 1e-6
    fd = [((w * np.abs(np.fft.rfft(x + eps * e, norm="ortho")) ** 1.5).sum()
           - (w * np.abs(np.fft.rfft(x - eps * e, norm="ortho")) ** 1.5).sum()) / (2 * eps) for e in np.eye(n)]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)
    spec = crand(5)

    def check_irfft(m):
        v = RNG.standard_normal(m)

        def loss_np(s):
            return (v * np.fft.irfft(s, n=m)).sum() + (np.fft.irfft(s, n=m) ** 2).sum()

        def loss_cv(t):
            return (cv.Tensor(v) * cv.fft.irfft(t, n=m)).sum() + (cv.fft.irfft(t, n=m) ** 2).sum()

        g = cv.grad(loss_cv)(cv.Tensor(spec)).numpy()
        fd = [(loss_np(spec + d) - loss_np(spec - d)) / (2 * eps) for e in np.eye(5) for d in (eps * e, 1j * eps * e)]
        np.testing.assert_allclose(g, np.array(fd[0::2]) - 1j * np.array(fd[1::2]), rtol=1e-6, atol=1e-6)

    for m in (n, n + 1, 2 * n):  # spec has 5 bins: 6 or 7 trims it, 8 uses it whole, 12 or 14 pads it
        check_irfft(m)


def test_backward_through_complex_input_follows_the_jax_convention():
    # L = Re(sum(c * fft(z))) = Re(sum(a * z)) with a = fft(c) (the DFT matrix is symmetric);
    # dL/dx - 1j dL/dy = Re(a) + 1j Im(a) = a
    z = crand(12)
    c = crand(12)
    g = cv.grad(lambda t: (cv.Tensor(c) * cv.fft.fft(t)).sum().real)(cv.Tensor(z)).numpy()
    np.testing.assert_allclose(g, np.fft.fft(c), rtol=1e-10, atol=1e-10)
    # Tensor.backward from a real leaf through complex values: the ordinary real gradient Re(a)
    t = cv.Tensor(z.real, requires_grad=True)
    (cv.Tensor(c) * cv.fft.ifft(t)).sum().real.backward()
    np.testing.assert_allclose(t.grad.numpy(), np.fft.ifft(c).real, rtol=1e-10, atol=1e-10)
    # through the real transforms' half-length paths: L = c . A x with A = irfft(s * rfft(.)), a real filter s
    x, c, s = RNG.standard_normal(12), RNG.standard_normal(12), RNG.standard_normal(7)
    t = cv.Tensor(x, requires_grad=True)
    (cv.Tensor(c) * cv.fft.irfft(cv.fft.rfft(t) * cv.Tensor(s), n=12)).sum().backward()
    a = np.stack([np.fft.irfft(np.fft.rfft(e) * s, n=12) for e in np.eye(12)], axis=1)
    np.testing.assert_allclose(t.grad.numpy(), a.T @ c, rtol=1e-10, atol=1e-10)


def test_jvp_is_the_transform_of_the_tangent():
    x, v = crand(3, 17), crand(3, 17)
    y, ty = cv.jvp(lambda t: cv.fft.fft(t, norm="ortho"), (cv.Tensor(x),), (cv.Tensor(v),))
    np.testing.assert_allclose(y.numpy(), np.fft.fft(x, norm="ortho"), atol=1e-12)
    np.testing.assert_allclose(ty.numpy(), np.fft.fft(v, norm="ortho"), atol=1e-12)
    x, v = RNG.standard_normal((3, 16)), RNG.standard_normal((3, 16))
    y, ty = cv.jvp(lambda t: cv.fft.irfft(cv.fft.rfft(t) * 1j, n=16), (cv.Tensor(x),), (cv.Tensor(v),))
    np.testing.assert_allclose(y.numpy(), np.fft.irfft(np.fft.rfft(x) * 1j, n=16), atol=1e-12)
    np.testing.assert_allclose(ty.numpy(), np.fft.irfft(np.fft.rfft(v) * 1j, n=16), atol=1e-12)


def test_vmap_and_jit_match_a_python_loop():
    xs = crand(4, 3, 10)
    got = cv.vmap(lambda t: cv.fft.fft2(t))(cv.Tensor(xs)).numpy()
    ref = np.stack([np.fft.fft2(x) for x in xs])
    np.testing.assert_allclose(got, ref, atol=1e-11)
    xr = RNG.standard_normal((4, 3, 10))
    got = cv.vmap(lambda t: cv.fft.irfft(cv.fft.rfft(t, axis=0) * 1j, n=4, axis=0))(cv.Tensor(xr)).numpy()
    ref = np.stack([np.fft.irfft(np.fft.rfft(x, axis=0) * 1j, n=4, axis=0) for x in xr])
    np.testing.assert_allclose(got, ref, atol=1e-12)
    f = cv.jit(lambda t: cv.fft.irfft(cv.fft.rfft(t) * 2, n=10))
    for _ in range(2):
        x = RNG.standard_normal((3, 10))
        np.testing.assert_allclose(f(cv.Tensor(x)).numpy(), 2 * x, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), data=st.data())
def test_hypothesis_fft_any_axis_and_n(shape, data):
    x = crand(*shape)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = data.draw(st.one_of(st.none(), st.integers(1, 20)))
    norm = data.draw(st.sampled_from(["backward", "ortho", "forward"]))
    np.testing.assert_allclose(cv.fft.fft(cv.Tensor(x), n=n, axis=axis, norm=norm).numpy(),
                               np.fft.fft(x, n=n, axis=axis, norm=norm), rtol=1e-11, atol=1e-11)
    xr = x.real
    np.testing.assert_allclose(cv.fft.rfft(cv.Tensor(xr), n=n, axis=axis, norm=norm).numpy(),
                               np.fft.rfft(xr, n=n, axis=axis, norm=norm), rtol=1e-11, atol=1e-11)
    if n is not None or x.shape[axis] > 1:
        np.testing.assert_allclose(cv.fft.irfft(cv.Tensor(x), n=n, axis=axis, norm=norm).numpy(),
                                   np.fft.irfft(x, n=n, axis=axis, norm=norm), rtol=1e-11, atol=1e-11)


def test_large_power_of_two_and_large_prime_in_float32():
    for n in (1 << 16, 65537):
        x = crand(n, dtype=np.complex64)
        got = cv.fft.fft(cv.Tensor(x)).numpy()
        assert rel_err(got, np.fft.fft(x.astype(np.complex128))) < 5e-6


def test_array_namespace_has_fft():
    x = cv.Tensor(crand(4))
    xp = x.__array_namespace__()
    assert xp.fft is cv.fft
    for name in cv.fft.__all__:
        assert callable(getattr(xp.fft, name))


def test_large_rfft_index_arithmetic_does_not_overflow_int32():
    """At n = 2^19 the split pass reads the transposed last stage through a flip, and the index
    simplifier writes (-i) % 16384 as (i*16383) % 16384, whose product leaves int range: the C
    renderer must compute such indices in 64 bits (it once gave wrong values for half the bins)."""
    n = 1 << 19
    x = np.random.default_rng(19).standard_normal(n).astype(np.float32)
    got = cv.fft.rfft(cv.Tensor(x)).numpy()
    want = np.fft.rfft(x.astype(np.float64))
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()

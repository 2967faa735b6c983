"""complex64 / complex128 end to end on the CPU, against numpy."""

import math
import warnings

import numpy as np
import pytest

import corvid as cv
from corvid import dtype as dt

CDTYPES = [(cv.complex64, np.complex64, 2e-5), (cv.complex128, np.complex128, 1e-12)]
IDS = ["c64", "c128"]
rng = np.random.default_rng(0)


def _rand(shape, npd, scale=1.0):
    return ((rng.normal(size=shape) + 1j * rng.normal(size=shape)) * scale).astype(npd)


def _same(got, want, rtol, atol=0.0):
    """Values (nan, inf and signed zeros included, part by part) and dtype equal to numpy's."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


# --- dtypes and promotion -----------------------------------------------------------------------------
def test_dtype_singletons_and_numpy_interop():
    assert cv.complex64.itemsize == 8 and cv.complex128.itemsize == 16
    assert cv.complex64.is_complex and not cv.complex64.is_float and not cv.float32.is_complex
    assert dt.from_numpy(np.dtype(np.complex64)) is cv.complex64 and cv.complex128.np == np.complex128
    assert dt.to_dtype("complex128") is cv.complex128 and dt.to_dtype(complex) is cv.complex64
    assert cv.complex64.real_dtype is cv.float32 and cv.complex128.real_dtype is cv.float64
    with pytest.raises(TypeError):
        dt.from_numpy(np.dtype(np.clongdouble))


@pytest.mark.parametrize("a, b, want", [
    (cv.float32, cv.complex64, cv.complex64), (cv.float64, cv.complex64, cv.complex128),
    (cv.float16, cv.complex64, cv.complex64), (cv.complex64, cv.complex128, cv.complex128),
    (cv.int32, cv.complex128, cv.complex128), (cv.bool, cv.complex64, cv.complex64),
    (cv.float32, 1j, cv.complex64), (cv.float64, 1j, cv.complex128), (cv.float16, 1j, cv.complex64),
    (cv.int64, 1j, cv.complex64), (cv.complex128, 2.0, cv.complex128), (cv.complex64, 1, cv.complex64),
])
def test_promotion(a, b, want):
    assert cv.result_type(a, b) is want and cv.result_type(b, a) is want


def test_promotion_through_operators():
    x = cv.Tensor([1.0, 2.0])
    assert (x * 1j).dtype is cv.complex64
    assert (x.astype(cv.float64) + cv.Tensor([1j])).dtype is cv.complex128
    assert (cv.Tensor([1, 2]) / cv.Tensor([1j])).dtype is cv.complex64
    assert cv.result_type(1j, 2.0) is cv.complex64


def test_can_cast_finfo_isdtype_and_info():
    assert cv.can_cast(cv.float32, cv.complex64) and cv.can_cast(cv.float64, cv.complex128)
    assert not cv.can_cast(cv.float64, cv.complex64) and not cv.can_cast(cv.complex64, cv.float32)
    assert cv.can_cast(cv.complex128, cv.complex64, casting="same_kind")
    assert not cv.can_cast(cv.complex64, cv.float64, casting="same_kind")
    for cd, npd in ((cv.complex64, np.complex64), (cv.complex128, np.complex128)):
        info, ref = cv.finfo(cd), np.finfo(npd)
        assert (info.eps, info.max, info.bits) == (float(ref.eps), float(ref.max), ref.bits)
        assert info.dtype is cd.real_dtype
    assert cv.isdtype(cv.complex64, "complex floating") and cv.isdtype(cv.complex128, "numeric")
    assert not cv.isdtype(cv.float32, "complex floating") and not cv.isdtype(cv.complex64, "real floating")
    info = cv.__array_namespace_info__()
    assert info.default_dtypes()["complex floating"] is cv.complex64
    assert set(info.dtypes(kind="complex floating").values()) == {cv.complex64, cv.complex128}


# --- creation and interop -----------------------------------------------------------------------------
@pytest.mark.parametrize("cd, npd, tol", CDTYPES, ids=IDS)
def test_numpy_round_trip(cd, npd, tol):
    a = _rand((3, 4), npd)
    a[0, 0] = complex(-0.0, math.inf)
    a[0, 1] = complex(math.nan, -0.0)
    t = cv.Tensor(a)
    assert t.dtype is cd
    got = t.numpy()
    assert got.dtype == npd and got.tobytes() == a.tobytes()
    assert (t + 0).numpy().tobytes() == (a + 0).tobytes()  # through a kernel, bit for bit


def test_python_scalars_lists_and_item():
    assert cv.Tensor([1 + 2j, 3.0]).dtype is cv.complex64
    t = cv.Tensor(1 - 2j)
    assert t.dtype is cv.complex64 and t.item() == 1 - 2j and isinstance(t.item(), complex)
    assert complex(cv.Tensor([2j])) == 2j
    with pytest.raises(TypeError):
        float(cv.Tensor(1j))
    assert cv.Tensor([1 + 2j], dtype=cv.complex128).numpy().dtype == np.complex128
    with pytest.raises(TypeError, match="complex"):
        cv.Tensor(np.array([1j]), dtype=cv.float32)
    with pytest.raises(TypeError, match="complex"):
        cv.Tensor(1j, dtype=cv.float32)


def test_creation_functions():
    np.testing.assert_array_equal(cv.zeros((2, 3), dtype=cv.complex64).numpy(), np.zeros((2, 3), np.complex64))
    assert cv.ones(2, dtype=cv.complex128).numpy().dtype == np.complex128
    f = cv.full((2,), 1 - 1j, dtype=cv.complex64).numpy()
    assert f.dtype == np.complex64 and f.tolist() == [1 - 1j, 1 - 1j]
    z = cv.complex(cv.Tensor([1.0, -0.0, math.inf]), cv.Tensor([math.nan, -0.0, 2.0]))
    want = np.array([complex(1, math.nan), complex(-0.0, -0.0), complex(math.inf, 2)], np.complex64)
    assert z.dtype is cv.complex64 and z.numpy().tobytes() == want.tobytes()
    assert cv.complex(cv.Tensor([1.0], dtype=cv.float64), 2).dtype is cv.complex128
    with pytest.raises(TypeError):
        cv.complex(cv.Tensor([1j]), 1.0)


@pytest.mark.parametrize("cd, npd, tol", CDTYPES, ids=IDS)
def test_astype(cd, npd, tol):
    a = _rand(6, npd)
    a[0] = complex(0.0, 3.0)
    t = cv.Tensor(a)
    for target in (np.float32, np.float64, np.int32, np.bool_, np.complex64, np.complex128):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
            want = a.astype(target)
        assert t.astype(target).numpy().tobytes() == want.tobytes(), target
    r = np.array([1.5, -2.0, math.inf], np.float32)
    assert cv.Tensor(r).astype(cd).numpy().tobytes() == r.astype(npd).tobytes()


# --- elementwise --------------------------------------------------------------------------------------
SPECIAL = [complex(math.inf, 0), complex(-math.inf, 1), complex(0, math.inf), complex(math.nan, 1),
           complex(1, math.nan), complex(-0.0, 0.0), complex(0.0, -0.0), complex(-0.0, -0.0), 0j,
           complex(3, -4), complex(-1e-3, 2e3)]


def _special_pairs(npd):
    a, b = np.meshgrid(np.array(SPECIAL, npd), np.array(SPECIAL, npd))
    return a.ravel(), b.ravel()


@pytest.mark.parametrize("cd, npd, tol", CDTYPES, ids=IDS)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_arithmetic_special_values(cd, npd, tol, op):
    a, b = _special_pairs(npd)
    fn = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
          "div": lambda x, y: x / y}[op]
    with np.errstate(all="ignore"):
        want = fn(a, b)
    _same(fn(cv.Tensor(a), cv.Tensor(b)).numpy(), want, rtol=tol)


@pytest.mark.parametrize("cd, npd, tol", CDTYPES, ids=IDS)
def test_division_by_zero_like_numpy(cd, npd, tol):
    a = np.array([1 + 1j, -1 + 0j, 0j, complex(0, -2)], npd)
    for zero in (0j, complex(-0.0, 0.0), complex(0.0, -0.0)):
        b = np.full(4, zero, npd)
        with np.errstate(all="ignore"):
            want = a / b
        got = (cv.Tensor(a) / cv.Tensor(b)).numpy()
        assert got.tobytes() == want.tobytes(), (zero, got, want)


@pytest.mark.parametrize("cd, npd, tol", CDTYPES, ids=IDS)
def test_mixed_real_complex_and_scalars(cd, npd, tol):
    a = _rand(5, npd)
    r = rng.normal(size=5).astype(cd.real_dtype.np)
    _same((cv.Tensor(a) * cv.Tensor(r)).numpy(), a * r, rtol=tol)
    _same((cv.Tensor(r) - cv.Tensor(a)).numpy(), r - a, rtol=tol)
    _same((cv.Tensor(a) * (2 - 1j)).numpy(), a * npd(2 - 1j), rtol=tol)
    _same(((1 + 1j) / cv.Tensor(a)).numpy(), npd(1 + 1j) / a, rtol=tol)
    _same((-cv.Tensor(a)).numpy(), -a, rtol=0)
    _same((cv.Tensor(a) ** 2).numpy(), a ** 2, rtol=10 * tol)
    _same((cv.Tensor(a) ** cv.Tensor(a)).numpy(), a ** a, rtol=10 * tol)


UNARY = ["exp", "log", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh",
         "acosh", "atanh", "exp2", "log2", "log10", "log1p", "expm1", "reciprocal"]
NP_NAME = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh", "acosh": "arccosh",
           "atanh": "arctanh"}


@pytest.mark.parametrize("cd, npd, tol", CDTYPES, ids=IDS)
def test_unary_math(cd, npd, tol):
    a = _rand(16, npd)
    t = cv.Tensor(a)
    for name in UNARY:
        want = getattr(np, NP_NAME.get(name, name))(a)
        _same(getattr(t, name)().numpy(), want, rtol=20 * tol, atol=20 * tol)


@pytest.mark.parametrize("cd, npd, tol", CDTYPES, ids=IDS)
def test_unary_math_special_values(cd, npd, tol):
    a = np.array(SPECIAL, npd)
    t = cv.Tensor(a)
    with np.errstate(all="ignore"):
        for name in ("exp", "log", "sqrt"):  # numpy and glibc both follow C99 Annex G here
            _same(getattr(t, name)().numpy(), getattr(np, name)(a), rtol=tol)


@pytest.mark.parametrize("cd, npd, tol", CDTYPES, ids=IDS)
def test_abs_angle_sign_parts(cd, npd, tol):
    a = np.concatenate([_rand(6, npd), np.array(SPECIAL, npd)])
    big = np.finfo(cd.real_dtype.np).max / 2
    a = np.concatenate([a, np.array([complex(big, big), complex(-big, 1)], npd)])  # |z| overflow safety
    t = cv.Tensor(a)
    with np.errstate(all="ignore"):
        _same(t.abs().numpy(), np.abs(a), rtol=tol)
        assert np.isfinite(t.abs().numpy()[-2])  # |max/2 * (1+1j)| fits: no overflow in between
        _same(t.angle().numpy(), np.angle(a), rtol=tol)
        finite = np.isfinite(a)
        _same(t.sign().numpy()[finite], np.sign(a)[finite], rtol=tol)
    _same(t.real.numpy(), a.real, rtol=0)
    _same(t.imag.numpy(), a.imag, rtol=0)
    _same(t.conj().numpy(), np.conj(a), rtol=0)
    _same(cv.real(t).numpy(), np.real(a), rtol=0)
    _same(cv.imag(t).numpy(), np.imag(a), rtol=0)
    _same(cv.conj(t).numpy(), np.conj(a), rtol=0)
    for fn in ("isnan", "isinf", "isfinite"):
        np.testing.assert_array_equal(getattr(t, fn)().numpy(), getattr(np, fn)(a))
    np.testing.assert_array_equal(t.eq(t).numpy(), a == a)
    np.testing.assert_array_equal(t.ne(t.conj()).numpy(), a != np.conj(a))


def test_real_input_keeps_old_behaviour():
    x = cv.Tensor([1.0, -2.0])
    assert cv.real(x) is x and cv.conj(x) is x
    np.testing.assert_array_equal(cv.imag(x).numpy(), [0.0, 0.0])
    assert cv.imag(x).dtype is cv.float32


@pytest.mark.parametrize("cd, npd, tol", CDTYPES, ids=IDS)
def test_where(cd, npd, tol):
    a, b = np.array(SPECIAL, npd), np.array(SPECIAL[::-1], npd)
    c = np.arange(len(SPECIAL)) % 3 == 0
    got = cv.where(cv.Tensor(c), cv.Tensor(a), cv.Tensor(b)).numpy()
    assert got.tobytes() == np.where(c, a, b).tobytes()
    got = cv.where(cv.Tensor(c), cv.Tensor(a), 0).numpy()
    assert got.tobytes() == np.where(c, a, npd(0)).tobytes()


def test_unordered_ops_raise():
    z = cv.Tensor([1 + 1j, 2j])
    for fn in (lambda: z < 1, lambda: z >= z, lambda: z > 0, lambda: z.maximum(z), lambda: z.clip(0, 1),
               lambda: z.max(), lambda: z.min(axis=0), lambda: z.argmax(), lambda: z // z, lambda: z % 2,
               lambda: z.floor(), lambda: z.erf(), lambda: z & z, lambda: z.atan2(z)):
        with pytest.raises(TypeError):
            fn()


# --- reductions and matmul ----------------------------------------------------------------------------
@pytest.mark.parametrize("cd, npd, tol", CDTYPES, ids=IDS)
def test_reductions(cd, npd, tol):
    a = _rand((4, 5, 6), npd, 0.7)
    t = cv.Tensor(a)
    for axis in (None, 0, (1, 2)):
        _same(t.sum(axis).numpy(), a.sum(axis), rtol=tol * 10)
        _same(t.mean(axis).numpy(), a.mean(axis), rtol=tol * 10)
        _same(t.prod(axis).numpy(), a.prod(axis), rtol=tol * 10)
    big = _rand(1 << 17, npd, 0.01)  # large enough for the parallel + simd reduction path
    _same(cv.Tensor(big).sum().numpy(), big.sum(), rtol=1e-3 if cd is cv.complex64 else 1e-9)
    assert cv.Tensor(np.zeros((0, 2), npd)).sum(0).numpy().tolist() == [0j, 0j]
    assert cv.Tensor(np.zeros((0,), npd)).prod().item() == 1


@pytest.mark.parametrize("cd, npd, tol", CDTYPES, ids=IDS)
def test_matmul(cd, npd, tol):
    a, b = _rand((2, 3, 7, 5), npd), _rand((3, 5, 4), npd)
    _same((cv.Tensor(a) @ cv.Tensor(b)).numpy(), a @ b, rtol=tol * 10, atol=tol * 10)
    r = rng.normal(size=(5, 6)).astype(cd.real_dtype.np)
    _same((cv.Tensor(a) @ cv.Tensor(r)).numpy(), a @ r, rtol=tol * 10, atol=tol * 10)
    _same((cv.Tensor(r.T) @ cv.Tensor(a[0, 0].T)).numpy(), r.T @ a[0, 0].T, rtol=tol * 10, atol=tol * 10)
    sq = _rand((32, 32), npd)
    out = cv.Tensor(sq) @ cv.Tensor(sq)
    assert all(k.kernel.vector_width == 1 for k in out.schedule())
    _same(out.numpy(), sq @ sq, rtol=tol * 100, atol=tol * 100)
    _same(cv.vecdot(cv.Tensor(a), cv.Tensor(a)).numpy(), np.vecdot(a, a), rtol=tol * 10, atol=tol * 10)


# --- transforms ---------------------------------------------------------------------------------------
def _loss(x, y):
    z = cv.complex(x, y)
    w = (z * z).exp() / (z + 2) + z.conj() * z.sin() - z ** 1.5 + z.sqrt().log()
    return (w.abs() + w.real * w.imag.tanh() + w.angle() + (w * 1j).astype(cv.float64)).sum()


def _numeric_grad(f, args, i, eps=1e-6):
    out = np.zeros_like(args[i])
    for k in range(args[i].size):
        hi, lo = [a.copy() for a in args], [a.copy() for a in args]
        hi[i].flat[k] += eps
        lo[i].flat[k] -= eps
        out.flat[k] = (f(*map(cv.Tensor, hi)).item() - f(*map(cv.Tensor, lo)).item()) / (2 * eps)
    return out


def test_grad_of_real_loss_through_complex_matches_finite_differences():
    x, y = rng.uniform(0.5, 1.0, 5), rng.uniform(0.1, 0.5, 5)
    gx, gy = cv.grad(_loss, argnums=(0, 1))(cv.Tensor(x), cv.Tensor(y))
    np.testing.assert_allclose(gx.numpy(), _numeric_grad(_loss, [x, y], 0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gy.numpy(), _numeric_grad(_loss, [x, y], 1), rtol=1e-6, atol=1e-7)


def test_grad_through_complex_matmul_and_sum():
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))

    def f(a, b):
        za = cv.complex(a, a * 0.5)
        zb = cv.complex(b.cos(), b)
        return ((za @ zb).abs() ** 2).sum() + (za.prod(axis=1) * 1j).imag.sum()
    ga, gb = cv.grad(f, argnums=(0, 1))(cv.Tensor(a), cv.Tensor(b))
    np.testing.assert_allclose(ga.numpy(), _numeric_grad(f, [a, b], 0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gb.numpy(), _numeric_grad(f, [a, b], 1), rtol=1e-6, atol=1e-6)


def test_grad_wrt_complex_input_follows_jax():
    z = np.array([1 + 2j, -0.5 + 0.25j])
    g = cv.grad(lambda z: (z * z.conj()).real.sum())(cv.Tensor(z))
    np.testing.assert_allclose(g.numpy(), 2 * np.conj(z))  # dL/dx - i dL/dy


def test_jvp_matches_finite_differences():
    x, y = rng.uniform(0.5, 1.0, 5), rng.uniform(0.1, 0.5, 5)
    tx, ty = rng.normal(size=5), rng.normal(size=5)
    _, t = cv.jvp(_loss, (cv.Tensor(x), cv.Tensor(y)), (cv.Tensor(tx), cv.Tensor(ty)))
    want = _numeric_grad(_loss, [x, y], 0) @ tx + _numeric_grad(_loss, [x, y], 1) @ ty
    np.testing.assert_allclose(t.item(), want, rtol=1e-6)


def test_vmap_and_jit():
    def f(z):
        return (z * z.conj() + z.exp() / (z + 3)).sum() + z.abs().astype(cv.complex64).mean()
    zs = _rand((4, 3), np.complex64)
    got = cv.vmap(f)(cv.Tensor(zs)).numpy()
    want = np.array([f(cv.Tensor(r)).item() for r in zs], np.complex64)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    parts = cv.vmap(lambda z: cv.complex(z.imag, z.real))(cv.Tensor(zs)).numpy()
    np.testing.assert_array_equal(parts, zs.imag + 1j * zs.real)
    jf = cv.jit(f)
    for r in zs:
        np.testing.assert_allclose(jf(cv.Tensor(r)).item(), f(cv.Tensor(r)).item(), rtol=1e-6)


def test_float_kernels_unchanged():
    x = cv.Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    src = (x * 2 + 1).exp().sum(axis=1).schedule()[0].source
    assert "_Complex" not in src and "cv_cmul" not in src


@pytest.mark.parametrize("cdt,npdt,tol", CDTYPES)
def test_var_std_of_complex_are_real_like_numpy(cdt, npdt, tol):
    x = (np.random.default_rng(3).standard_normal((3, 5)) + 1j * np.random.default_rng(4).standard_normal((3, 5)))
    x = x.astype(npdt)
    for axis in (None, 0, 1):
        for c in (0, 1):
            v = cv.var(cv.Tensor(x), axis=axis, correction=c)
            assert v.dtype is cdt.real_dtype
            np.testing.assert_allclose(v.numpy(), np.var(x, axis=axis, ddof=c), rtol=tol, atol=tol)
            np.testing.assert_allclose(cv.std(cv.Tensor(x), axis=axis, correction=c).numpy(),
                                       np.std(x, axis=axis, ddof=c), rtol=tol, atol=tol)
    # JAX convention: grad of a real loss of z is dL/dx - 1j dL/dy = 2 conj(z - mean) / n here
    g = cv.grad(lambda t: cv.var(t))(cv.Tensor(x.astype(np.complex128))).numpy()
    np.testing.assert_allclose(g, 2 * np.conj(x - x.mean()) / x.size, rtol=1e-5, atol=1e-6)

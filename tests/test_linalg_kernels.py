"""corvid.linalg_kernels, the "kernels" backend of cv.linalg (no LAPACK): values against numpy.linalg in
float32, float64, complex64 and complex128 on well-conditioned inputs, batches, 0x0 and 1x1, singular inputs,
general eigenvalues (eig: residuals and eigenvalue multisets, since the order differs from LAPACK's), the
accuracy of the iterative methods at a larger size, the kernel structure of the sequential steps, derivatives
and transforms through the backend."""

import math

import numpy as np
import pytest

import corvid as cv
from _data import numeric_grad
from corvid import linalg_kernels as K
from corvid import linalg_kernels_eig as E

la = cv.linalg
RNG = np.random.default_rng(11)
TOL = {np.float32: 1e-5, np.float64: 1e-10}  # relative to the largest entry of the reference
DTYPES = [np.float32, np.float64]
ALL_DTYPES = DTYPES + [np.complex64, np.complex128]


def cplx(dtype):
    return np.issubdtype(dtype, np.complexfloating)


def rand(shape, dtype=np.float64):
    """Standard normal entries, complex ones for a complex ``dtype``."""
    x = RNG.normal(size=shape)
    return x + 1j * RNG.normal(size=shape) if cplx(dtype) else x


def orth(n, batch=(), dtype=np.float64):
    """Random orthogonal (unitary for a complex ``dtype``) matrices."""
    q, r = np.linalg.qr(rand(batch + (n, n), dtype))
    d = np.diagonal(r, 0, -2, -1)
    return q * (d / np.abs(d))[..., None, :]


def herm(x):
    return np.swapaxes(x, -1, -2).conj()


def spd(n, batch=()):
    """Symmetric positive definite with eigenvalues in [1, 2]."""
    q = orth(n, batch)
    return (q * RNG.uniform(1, 2, size=batch + (1, n))) @ np.swapaxes(q, -1, -2)


def general(n, batch=()):
    """Non-symmetric, singular values in [1, 2]."""
    return (orth(n, batch) * RNG.uniform(1, 2, size=batch + (1, n)) * RNG.choice([-1, 1], size=batch + (1, n))) \
        @ orth(n, batch)


def rect(m, n, batch=(), dtype=np.float64):
    k = min(m, n)
    u, v = orth(m, batch, dtype)[..., :k], orth(n, batch, dtype)[..., :k, :]
    return (u * RNG.uniform(1, 2, size=batch + (1, k))) @ v


def close(got, want, dtype, factor=1.0):
    """The largest error relative to the largest entry of ``want`` is at most TOL of ``dtype``'s
    precision times ``factor``."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.size == 0:
        return
    scale = max(float(np.abs(want).max()), 1e-30)
    err = float(np.abs(got.astype(np.complex128) - want).max()) / scale
    tol = TOL[np.finfo(dtype).dtype.type] * factor
    assert err <= tol, f"relative error {err:.2e} > {tol:.0e}"


def close_orthonormal(q, dtype, factor=3.0):
    """The columns of each matrix of ``q`` are orthonormal."""
    k = q.shape[-1]
    close(herm(q) @ q, np.broadcast_to(np.eye(k), q.shape[:-2] + (k, k)), dtype, factor)


def T(x, dtype):
    return cv.Tensor(np.asarray(x).astype(dtype))


# --- values ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,batch", [(1, (2,)), (6, (2, 3)), (24, (2,))])
def test_cholesky(dtype, n, batch):
    a = spd(n, batch)
    low = K.cholesky(T(a, dtype))
    assert low.dtype == cv.Tensor(np.zeros(1, dtype)).dtype and low.shape == a.shape
    close(low.numpy(), np.linalg.cholesky(a), dtype)
    upper_garbage = a + np.triu(RNG.normal(size=a.shape), 1)  # only the lower triangle is read
    close(K.cholesky(T(upper_garbage, dtype)).numpy(), np.linalg.cholesky(a), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,batch", [(1, (2,)), (6, (2, 3)), (24, (2,))])
def test_lu_solve_inv_det_slogdet(dtype, n, batch):
    a, b = general(n, batch), RNG.normal(size=batch + (n, 3))
    lu, piv = K.lu(T(a, dtype))
    assert piv.dtype == cv.int64 and piv.shape == batch + (n,)
    lo, up = np.tril(lu.numpy(), -1) + np.eye(n), np.triu(lu.numpy())
    assert np.abs(lo).max() <= 1 + 1e-6  # partial pivoting: multipliers at most 1
    close(lo @ up, np.take_along_axis(a, piv.numpy()[..., None], -2), dtype)
    close(K.solve(T(a, dtype), T(b, dtype)).numpy(), np.linalg.solve(a, b), dtype)
    close(K.inv(T(a, dtype)).numpy(), np.linalg.inv(a), dtype)
    d = K.det(T(a, dtype)).numpy()
    close(d / np.linalg.det(a), np.ones(batch), dtype, factor=n)  # relative per matrix
    sign, logabs = K.slogdet(T(a, dtype))
    want_sign, want_log = np.linalg.slogdet(a)
    assert np.array_equal(sign.numpy(), want_sign)
    np.testing.assert_allclose(logabs.numpy(), want_log, rtol=0, atol=TOL[dtype] * n)


def test_blocked_paths_with_small_blocks(monkeypatch):
    """Several LU panels, several Householder panels and a deep Cholesky recursion at a small size
    (the block sizes are read when a shape is first traced: these shapes are used only here); the
    steps of all panels are one traced program."""
    monkeypatch.setattr(K, "LU_BLOCK", 8)
    monkeypatch.setattr(K, "QR_BLOCK", 4)
    a, s = general(21, (3,)), spd(37, (1,))
    traces = K._lu_panel.jitted.traces
    close(K.inv(T(a, np.float64)).numpy(), np.linalg.inv(a), np.float64)
    assert K._lu_panel.jitted.traces == traces + 1  # 3 panels
    close(K.det(T(a, np.float64)).numpy() / np.linalg.det(a), np.ones(3), np.float64, factor=10)
    for shape, mode in (((3, 21, 10), "reduced"), ((3, 10, 21), "complete"), ((3, 13, 21), "reduced")):
        x = RNG.normal(size=shape)
        traces = K._qr_panel.jitted.traces
        q, r = K.qr(T(x, np.float64), mode)
        assert K._qr_panel.jitted.traces == traces + 1  # 3 or 4 panels
        wq, wr = np.linalg.qr(x, mode=mode)
        close(q.numpy(), wq, np.float64)
        close(r.numpy(), wr, np.float64)
    close(K.cholesky(T(s, np.float64)).numpy(), np.linalg.cholesky(s), np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_triangular_inverse_and_solve(dtype):
    low = np.tril(general(9, (2,))) + 3 * np.eye(9)
    b = RNG.normal(size=(2, 9, 2))
    close(K.tri_inv(T(low, dtype)).numpy(), np.linalg.inv(low), dtype)
    close(K.tri_inv(T(low.swapaxes(-1, -2), dtype), lower=False).numpy(), np.linalg.inv(low.swapaxes(-1, -2)), dtype)
    unit = np.tril(low, -1) + np.eye(9)
    close(K.tri_inv(T(low, dtype), unit_diagonal=True).numpy(), np.linalg.inv(unit), dtype)
    close(K.solve_triangular(T(low + np.triu(np.ones((9, 9)), 1), dtype), T(b, dtype)).numpy(),
          np.linalg.solve(low, b), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(2, 7, 4), (2, 4, 7), (2, 7, 7)])
def test_qr_matches_numpy(dtype, shape):
    x = rand(shape, dtype)
    for mode in ("reduced", "complete"):
        q, r = K.qr(T(x, dtype), mode)
        assert q.dtype == r.dtype == T(x, dtype).dtype
        wq, wr = np.linalg.qr(x, mode=mode)  # the same conventions (LAPACK's, R's diagonal real): no fix-up
        close(q.numpy(), wq, dtype, factor=3)
        close(r.numpy(), wr, dtype, factor=3)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("n,batch", [(1, (2,)), (6, (2, 3)), (24, (2,))])
def test_eigh(dtype, n, batch):
    q = orth(n, batch, dtype)
    vals = np.sort(RNG.uniform(-2, 2, size=batch + (n,)), -1)
    a = (q * vals[..., None, :]) @ herm(q)
    garbage = a + np.triu(rand(a.shape, dtype), 1)  # only the lower triangle is read ...
    if cplx(dtype):
        garbage = garbage + 1j * np.eye(n) * RNG.normal(size=batch + (n, 1))  # ... and the diagonal's real part
    w, v = K.eigh(T(garbage, dtype))
    assert w.dtype == T(vals, np.finfo(dtype).dtype).dtype and v.dtype == T(a, dtype).dtype
    close(w.numpy(), np.linalg.eigvalsh(a), dtype)
    vn = v.numpy().astype(np.complex128)
    close(vn @ (w.numpy()[..., None] * herm(vn)), a, dtype, factor=3)
    close_orthonormal(vn, dtype)
    close(K.eigvalsh(T(a, dtype)).numpy(), np.linalg.eigvalsh(a), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(2, 9, 5), (2, 5, 9), (2, 6, 6), (2, 1, 1)])
def test_svd_svdvals_pinv(dtype, shape):
    x = rect(*shape[1:], batch=shape[:1], dtype=dtype)
    m, n = shape[1:]
    k = min(m, n)
    want = np.linalg.svd(x, compute_uv=False)
    sv = K.svdvals(T(x, dtype))
    assert sv.dtype == T(want, np.finfo(dtype).dtype).dtype
    close(sv.numpy(), want, dtype)
    for full in (False, True):
        u, s, vh = (t.numpy().astype(np.complex128) for t in K.svd(T(x, dtype), full))
        wu, _, wvh = np.linalg.svd(x, full_matrices=full)
        assert u.shape == wu.shape and vh.shape == wvh.shape
        close(s, want, dtype)
        close((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], x, dtype, factor=3)
        close_orthonormal(u, dtype)
        close_orthonormal(herm(vh), dtype)
    p = K.pinv(T(x, dtype), 1e-6)
    assert p.dtype == T(x, dtype).dtype
    close(p.numpy(), np.linalg.pinv(x), dtype, factor=3)


def test_svd_of_rank_deficient_matrices_completes_u():
    x = rect(6, 3, (2,))
    x[..., 1] = 0.0  # a zero column: rank 2, one singular value exactly 0
    u, s, vh = K.svd(T(x, np.float64), True)
    close(s.numpy(), np.linalg.svd(x, compute_uv=False), np.float64)
    assert np.all(s.numpy()[..., -1] == 0)
    un = u.numpy()
    close(np.swapaxes(un, -1, -2) @ un, np.broadcast_to(np.eye(6), (2, 6, 6)), np.float64)
    close((un[..., :3] * s.numpy()[..., None, :]) @ vh.numpy(), x, np.float64)
    close(K.pinv(T(x, np.float64), 1e-10).numpy(), np.linalg.pinv(x), np.float64)


def test_complex_lu_and_cholesky_families():
    a = RNG.normal(size=(2, 5, 5)) + 1j * RNG.normal(size=(2, 5, 5)) + 3 * np.eye(5)
    h = a @ np.swapaxes(a, -1, -2).conj() + np.eye(5)
    b = RNG.normal(size=(2, 5, 2)) + 1j * RNG.normal(size=(2, 5, 2))
    for dtype, real in ((np.complex128, np.float64), (np.complex64, np.float32)):
        close(K.inv(T(a, dtype)).numpy(), np.linalg.inv(a), real, factor=10)
        close(K.solve(T(a, dtype), T(b, dtype)).numpy(), np.linalg.solve(a, b), real, factor=10)
        close(K.det(T(a, dtype)).numpy() / np.linalg.det(a), np.ones(2), real, factor=10)
        sign, logabs = K.slogdet(T(a, dtype))
        close(sign.numpy(), np.linalg.slogdet(a)[0], real, factor=10)
        close(logabs.numpy(), np.linalg.slogdet(a)[1], real, factor=10)
        close(K.cholesky(T(h, dtype)).numpy(), np.linalg.cholesky(h), real, factor=10)


def test_iterative_methods_reach_lapack_accuracy_at_n48():
    """eigh and svd at n = 48: float32 within 2e-6 of the float64 reference (Jacobi rotations rounded in
    float32 left ~1e-5; they now run in float64) and float64 within 1e-13 (numpy's level)."""
    n = 48
    q = orth(n, (1,))
    a = (q * np.sort(RNG.uniform(-2, 2, size=(1, 1, n)), -1)) @ herm(q)
    x = rect(n, n, (1,))
    for dtype, factor in ((np.float32, 0.2), (np.float64, 1e-3)):
        w, v = (t.numpy().astype(np.float64) for t in K.eigh(T(a, dtype)))
        close(w, np.linalg.eigvalsh(a), dtype, factor)
        close(v @ (w[..., None] * herm(v)), a, dtype, factor)
        close_orthonormal(v, dtype, factor)
        u, sv, vh = (t.numpy().astype(np.float64) for t in K.svd(T(x, dtype)))
        close(sv, np.linalg.svd(x, compute_uv=False), dtype, factor)
        close((u * sv[..., None, :]) @ vh, x, dtype, factor)
        close_orthonormal(u, dtype, factor)
        close_orthonormal(herm(vh), dtype, factor)


# --- eig: general eigenvalues --------------------------------------------------------------------------------
def matched(got, want):
    """``got`` (n,) reordered to pair each value of ``want`` with its nearest unused one: the kernels give the
    eigenvalues in Schur order, LAPACK in its own, so multisets are compared."""
    rest, out = list(got), []
    for w in want:
        out.append(rest.pop(int(np.argmin(np.abs(np.array(rest) - w)))))
    return np.array(out)


def check_eig(a, w, v, dtype, factor=1.0):
    """``a @ v = v * w`` relative to ``|a|``, unit columns whose largest entry is real and positive, and the
    eigenvalues of numpy.linalg.eig in float64 on the same (rounded) input."""
    a = np.asarray(a).astype(dtype).astype(np.complex128)
    want_dtype = np.complex64 if np.finfo(dtype).dtype == np.float32 else np.complex128
    assert w.numpy().dtype == v.numpy().dtype == want_dtype and w.shape == a.shape[:-1] and v.shape == a.shape
    w, v = w.numpy().astype(np.complex128), v.numpy().astype(np.complex128)
    tol = TOL[np.finfo(dtype).dtype.type] * factor
    assert np.abs(a @ v - v * w[..., None, :]).max() <= tol * np.abs(a).max()
    close(np.linalg.norm(v, axis=-2), np.ones(w.shape), dtype, factor)
    # the largest entry of each column is real and positive; where entries tie in magnitude (a
    # cyclic permutation's eigenvectors: all 1/sqrt(n)), the one made real may be any of the tied
    # ones, which the last bit of rounding orders: one of those within rounding of the largest
    mag = np.abs(v)
    tied = mag >= mag.max(-2, keepdims=True) * (1 - 64 * np.finfo(dtype).eps)
    assert np.all(np.any(tied & (v.imag == 0) & (v.real > 0), axis=-2))
    want = np.linalg.eigvals(a).reshape(-1, a.shape[-1])
    for got_i, want_i in zip(w.reshape(want.shape), want):
        close(matched(got_i, want_i), want_i, dtype, factor)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("n,batch", [(1, (2,)), (2, (3,)), (6, (2, 3)), (24, (2,))])
def test_eig(dtype, n, batch):
    a = rand(batch + (n, n), dtype)
    w, v = K.eig(T(a, dtype))
    check_eig(a, w, v, dtype, factor=3)


@pytest.mark.parametrize("name,a", [
    ("repeated", np.diag([1.0, 1, 2, 2, 3])),
    ("defective (Jordan block)", 2 * np.eye(5) + np.eye(5, k=1)),
    ("cyclic permutation (exceptional shifts)", np.roll(np.eye(6), 1, 0)),
    ("triangular", np.triu(RNG.normal(size=(5, 5)))),
    ("rotation", np.array([[0.0, -1.0], [1.0, 0.0]])),
    ("rank one", np.outer(RNG.normal(size=5), RNG.normal(size=5))),
    ("graded", np.diag(10.0 ** np.arange(5)) @ RNG.normal(size=(5, 5)) @ np.diag(10.0 ** -np.arange(5))),
])
def test_eig_of_special_matrices(name, a):
    w, v = K.eig(T(a, np.float64))
    check_eig(a, w, v, np.float64, factor=1e-3 if name != "graded" else 1.0)


def test_eig_of_empty_nan_and_through_linalg(monkeypatch):
    assert [(t.shape, t.dtype) for t in K.eig(cv.Tensor(np.zeros((0, 3, 3))))] == [((0, 3), cv.complex128),
                                                                                  ((0, 3, 3), cv.complex128)]
    assert [(t.shape, t.dtype) for t in K.eig(cv.Tensor(np.zeros((2, 0, 0), np.float32)))] == [
        ((2, 0), cv.complex64), ((2, 0, 0), cv.complex64)]
    ok = general(3)
    w, v = K.eig(cv.Tensor(np.stack([ok, np.where(np.eye(3, k=1) > 0, np.nan, ok)])))  # nan in, nan out
    check_eig(ok, w[0], v[0], np.float64, factor=1e-2)
    assert np.isnan(w.numpy()[1]).all() and np.isnan(v.numpy()[1]).all()

    def no_host(*args, **kwargs):
        raise AssertionError("a LAPACK host kernel was built")
    monkeypatch.setattr(la, "_host", no_host)
    a = rand((2, 4, 4), np.complex128)
    with la.use_backend("kernels"):  # every factorization of a complex input runs in kernels, eig too
        w, v = la.eig(cv.Tensor(a))
        check_eig(a, w, v, np.complex128)
        close(matched(la.eigvals(cv.Tensor(a)).numpy()[0], w.numpy()[0]), w.numpy()[0], np.float64)
        h = a + herm(a)
        close(la.eigvalsh(cv.Tensor(h)).numpy(), np.linalg.eigvalsh(h), np.complex128)
        close(la.svdvals(cv.Tensor(a)).numpy(), np.linalg.svd(a, compute_uv=False), np.complex128)
        close(la.pinv(cv.Tensor(a)).numpy(), np.linalg.pinv(a), np.complex128, factor=10)
        close(np.abs(la.qr(cv.Tensor(a)).R.numpy()), np.abs(np.linalg.qr(a)[1]), np.complex128, factor=10)


# --- edge shapes and singular inputs -----------------------------------------------------------------------
def test_empty_and_one_by_one():
    e = cv.Tensor(np.zeros((0, 4, 4)))
    for f in (K.cholesky, K.inv, lambda x: K.qr(x)[0], lambda x: K.eigh(x)[1], lambda x: K.svd(x)[0]):
        assert f(e).numpy().shape == (0, 4, 4)
    assert K.det(e).shape == (0,) and K.svdvals(e).shape == (0, 4)
    z = cv.Tensor(np.zeros((2, 0, 0)))
    assert K.det(z).tolist() == [1.0, 1.0]  # numpy: the determinant of a 0x0 matrix is 1
    assert [t.tolist() for t in K.slogdet(z)] == [[1.0, 1.0], [0.0, 0.0]]
    assert K.inv(z).shape == (2, 0, 0) and K.cholesky(z).shape == (2, 0, 0)
    assert [t.shape for t in K.eigh(z)] == [(2, 0), (2, 0, 0)]
    assert [t.shape for t in K.svd(cv.Tensor(np.zeros((2, 3, 0))))] == [(2, 3, 3), (2, 0), (2, 0, 0)]
    assert [t.shape for t in K.qr(cv.Tensor(np.zeros((3, 0))), "complete")] == [(3, 3), (3, 0)]
    one = cv.Tensor([[4.0]])
    assert K.cholesky(one).tolist() == [[2.0]] and K.inv(one).tolist() == [[0.25]]
    assert K.det(one).item() == 4.0 and K.eigh(cv.Tensor([[-3.0]]))[0].tolist() == [-3.0]
    assert K.svd(cv.Tensor([[-3.0]]))[1].tolist() == [3.0]
    q, r = K.qr(cv.Tensor([[-3.0]]))
    assert (q.item(), r.item()) == (1.0, -3.0)  # LAPACK: no reflection of a 1x1 matrix


def test_singular_matrices_give_values_not_errors():
    singular = np.array([[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]], np.zeros((3, 3))])
    a = cv.Tensor(singular)
    assert K.det(a).tolist() == [0.0, 0.0]
    sign, logabs = K.slogdet(a)
    assert sign.tolist() == [0.0, 0.0] and logabs.tolist() == [-math.inf, -math.inf]
    assert not np.isfinite(K.inv(a).numpy()).all(axis=(-2, -1)).any()
    assert not np.isfinite(K.solve(a, cv.Tensor(np.ones((2, 3, 1)))).numpy()).all(axis=(-2, -1)).any()
    with la.use_backend("kernels"):  # the public functions: no LinAlgError either, and cond is inf
        assert la.det(a).tolist() == [0.0, 0.0]
        assert la.cond(a, 1).tolist() == [math.inf, math.inf]
        assert la.matrix_rank(a).tolist() == [2, 0]
    not_pd = np.array([[1.0, 2.0], [2.0, 1.0]])
    assert np.isnan(K.cholesky(cv.Tensor(not_pd)).numpy()).any()
    w, _ = K.eigh(cv.Tensor(np.array([[1.0, np.nan], [np.nan, 1.0]])))  # never converges: stops at the limit
    assert np.isnan(w.numpy()).all()


# --- structure: one or two kernels per sequential step, replayed --------------------------------------------
def test_each_sequential_step_is_one_or_two_kernels():
    p = cv.Tensor(RNG.random((2, 41, 17))).realize()  # an LU panel: n=40 rows (+ the state row), 16 columns (+ flag)
    assert len(K._lu_step(p, 16).schedule()) == 2
    p = cv.Tensor(RNG.random((2, 18, 41))).realize()  # a transposed Householder panel: 16 columns, m=40 rows
    assert len(K._qr_step(p, 16).schedule()) == 1
    s = cv.Tensor(RNG.random((2, 16, 32))).realize()
    assert len(K._eigh_round(s, K._rounds(16, 32, "CPU")[3]).schedule()) == 1
    st = cv.Tensor(RNG.random((2, 16, 56))).realize()
    assert len(K._svd_round(st, K._rounds(16, 16, "CPU")[3], 40).schedule()) == 1
    n = K.CHOL_BASE
    base = K._chol_base(cv.Tensor(spd(n, (2,))))[0].schedule()
    # the whole base elimination ([A | I] of (2, n, 2n)): one kernel
    assert sum(k.name.startswith("E_") and k.output.numel == 2 * n * 2 * n for k in base) == 1
    s = cv.Tensor(rand((2, 17, 32), np.complex128)).realize()  # eig: [H | Zᴴ] of n = 16 and its state row
    assert len(E._chase_step(s).contiguous().schedule()) == 1  # a QR step, starting an iteration or not
    assert len(E._backsub_step(s).contiguous().schedule()) == 2  # a row of the triangular eigenvectors


def test_rounds_pair_every_index_once_per_round_and_every_pair_once_per_sweep():
    n = 8
    seen = set()
    for partner in K._rounds(n, n + 3, "CPU"):
        p = partner.numpy()
        assert sorted(p[:n]) == list(range(n)) and all(p[p[:n]] == np.arange(n)) and all(p[:n] != np.arange(n))
        assert list(p[n:]) == [n, n + 1, n + 2]
        seen |= {(min(i, j), max(i, j)) for i, j in enumerate(p[:n])}
    assert len(seen) == n * (n - 1) // 2


def test_a_second_call_replays_without_tracing():
    """Every piece of a factorization is captured per shape and replayed; the steps of every panel
    are one program (traced once however many panels there are)."""
    a = T(general(6, (2,)), np.float64)
    K.det(a).numpy()
    pieces = (K._lu_start, K._lu_panel, K._lu_finish, K._det_lu)
    traces = [f.jitted.traces for f in pieces]
    b = T(general(6, (2,)), np.float64)
    close(K.det(b).numpy(), np.linalg.det(b.numpy()), np.float64, factor=10)
    assert [f.jitted.traces for f in pieces] == traces


# --- derivatives and transforms through the backend ----------------------------------------------------------
def sym(x):
    return (x + x.mT) * 0.5


W = RNG.normal(size=(4, 4))
GRAD_CASES = {
    "inv": (lambda a: (la.inv(a) ** 2 * cv.Tensor(W)).sum(), general(4)),
    "solve": (lambda a: (la.solve(a, cv.Tensor(W[:, :2])) ** 2).sum(), general(4)),
    "det_slogdet": (lambda a: la.det(a) + la.slogdet(a).logabsdet, general(4)),
    "cholesky": (lambda a: (la.cholesky(sym(a)) * cv.Tensor(W)).sum(), spd(4)),
    "eigh": (lambda a: (la.eigh(sym(a)).eigenvalues * cv.Tensor(W[0])).sum() + (la.eigh(sym(a)).eigenvectors ** 4).sum(),
             spd(4)),
    "qr": (lambda a: (la.qr(a).Q * cv.Tensor(W[:, :3])).sum() + (la.qr(a).R ** 2 * cv.Tensor(W[:3, :3])).sum(),
           RNG.normal(size=(4, 3))),
    "svd": (lambda a: (la.svd(a, full_matrices=False).S * cv.Tensor(W[0, :3])).sum()
            + (la.svd(a, full_matrices=False).U ** 4).sum(), rect(4, 3)),
    "pinv": (lambda a: (la.pinv(a) * cv.Tensor(W[:3])).sum(), rect(4, 3)),
    "eig": (lambda a: (la.eig(a).eigenvalues.abs() ** 2).sum() + (la.eig(a).eigenvectors.abs() ** 4).sum(),
            general(4)),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradient_through_the_kernels_backend(name):
    loss, a = GRAD_CASES[name]
    with la.use_backend("kernels"):
        got = cv.grad(loss)(cv.Tensor(a)).numpy()
        want = numeric_grad(lambda x: loss(cv.Tensor(x)).item(), a)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_jvp_and_second_order_through_the_kernels_backend():
    a = general(4)
    t = RNG.normal(size=a.shape)
    loss = lambda x: (la.inv(x) * cv.Tensor(W)).sum() + la.cholesky(x @ x.mT).sum()  # noqa: E731
    with la.use_backend("kernels"):
        _, jt = cv.jvp(loss, (cv.Tensor(a),), (cv.Tensor(t),))
        fd = (loss(cv.Tensor(a + 1e-6 * t)).item() - loss(cv.Tensor(a - 1e-6 * t)).item()) / 2e-6
        g2 = cv.grad(lambda x: (cv.grad(lambda y: la.det(y))(x) ** 2).sum())(cv.Tensor(a))
    np.testing.assert_allclose(jt.item(), fd, rtol=1e-5)

    def first(x):  # d det = det · x⁻ᵀ
        return ((np.linalg.det(x) * np.linalg.inv(x).T) ** 2).sum()
    np.testing.assert_allclose(g2.numpy(), numeric_grad(first, a), rtol=1e-5, atol=1e-7)


def test_vmap_and_jit_through_the_kernels_backend():
    a, s = general(6, (2,)), spd(6, (2,))
    b = RNG.normal(size=(2, 6))
    with la.use_backend("kernels"):  # vmap traces on placeholders: the Jacobi methods run a fixed sweep count
        x, w, sv = cv.vmap(lambda m, v, h: (la.solve(m, v), la.eigvalsh(h), la.svdvals(m)))(
            cv.Tensor(a), cv.Tensor(b), cv.Tensor(s))
        close(x.numpy(), np.linalg.solve(a, b[..., None])[..., 0], np.float64)
        close(w.numpy(), np.linalg.eigvalsh(s), np.float64)
        close(sv.numpy(), np.linalg.svd(a, compute_uv=False), np.float64)
        f = cv.jit(lambda m, h: (la.inv(m), la.eigh(h).eigenvalues, la.qr(m).R))
        for _ in range(2):
            a, s = general(6, (2,)), spd(6, (2,))
            inv_, w, r = f(cv.Tensor(a), cv.Tensor(s))
            close(inv_.numpy(), np.linalg.inv(a), np.float64)
            close(w.numpy(), np.linalg.eigvalsh(s), np.float64)
            close(np.abs(r.numpy()), np.abs(np.linalg.qr(a)[1]), np.float64)
        assert f.traces == 1


def test_eig_under_jit_and_vmap_runs_a_fixed_number_of_sweeps():
    f = cv.jit(cv.vmap(lambda m: la.eig(m)))
    with la.use_backend("kernels"):
        for _ in range(2):
            a = RNG.normal(size=(2, 3, 3))
            w, v = f(cv.Tensor(a))
            check_eig(a, w, v, np.float64)
    assert f.traces == 1

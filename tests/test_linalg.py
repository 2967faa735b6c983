"""cv.linalg: values against numpy.linalg, derivatives against finite differences, transforms, errors;
complex inputs; eig, norm, cond; the backend switch. (The kernels backend itself: test_linalg_kernels.py.)"""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

import corvid as cv
from _data import numeric_grad

la = cv.linalg
RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.normal(size=shape)


def spd(n, batch=()):
    a = rand(*batch, n, n)
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def well(n, batch=()):
    return rand(*batch, n, n) + 3 * np.eye(n)


def close(got, want, dtype=np.float64):
    tol = 1e-9 if dtype in (np.float64, np.complex128) else 2e-4
    got = np.asarray(got)
    np.testing.assert_allclose(got.astype(np.complex128 if np.iscomplexobj(got) else np.float64), want, rtol=tol,
                               atol=tol)


# --- values -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_factorizations_match_numpy(dtype):
    a, s, b = well(3, (2,)), spd(3, (2,)), rand(2, 3, 2)
    A, S = cv.Tensor(a.astype(dtype)), cv.Tensor(s.astype(dtype))
    assert la.inv(A).dtype == cv.Tensor(a.astype(dtype)).dtype
    close(la.inv(A).numpy(), np.linalg.inv(a), dtype)
    close(la.det(A).numpy(), np.linalg.det(a), dtype)
    sign, logabs = la.slogdet(A)
    close(sign.numpy(), np.linalg.slogdet(a)[0], dtype)
    close(logabs.numpy(), np.linalg.slogdet(a)[1], dtype)
    close(la.solve(A, cv.Tensor(b.astype(dtype))).numpy(), np.linalg.solve(a, b), dtype)
    close(la.cholesky(S).numpy(), np.linalg.cholesky(s), dtype)
    close(la.cholesky(S, upper=True).numpy(), np.swapaxes(np.linalg.cholesky(s), -1, -2), dtype)
    w, v = la.eigh(S)
    close(w.numpy(), np.linalg.eigvalsh(s), dtype)
    close((v @ (w[..., None] * v.mT)).numpy(), s, dtype)
    close(la.eigvalsh(S).numpy(), np.linalg.eigvalsh(s), dtype)
    close(la.svdvals(A).numpy(), np.linalg.svd(a, compute_uv=False), dtype)


@pytest.mark.parametrize("shape", [(4, 2), (2, 4), (3, 3), (2, 1, 1)])
def test_qr_svd_pinv_lstsq_shapes(shape):
    a = rand(*shape)
    m, n = shape[-2:]
    k = min(m, n)
    for mode in ("reduced", "complete"):
        q, r = la.qr(cv.Tensor(a), mode=mode)
        wq, wr = np.linalg.qr(a, mode=mode)
        assert q.shape == wq.shape and r.shape == wr.shape
        close((q @ r).numpy(), a)
        close(np.abs(r.numpy()), np.abs(wr))  # LAPACK's sign convention is numpy's: same up to sign at most
        np.testing.assert_allclose(r.numpy(), np.triu(r.numpy()))
    for full in (True, False):
        u, s, vh = la.svd(cv.Tensor(a), full_matrices=full)
        wu, ws, wvh = np.linalg.svd(a, full_matrices=full)
        assert (u.shape, s.shape, vh.shape) == (wu.shape, ws.shape, wvh.shape)
        close(s.numpy(), ws)
        close(((u[..., :k] * s[..., None, :]) @ vh[..., :k, :]).numpy(), a)
    close(la.pinv(cv.Tensor(a)).numpy(), np.linalg.pinv(a))
    b = rand(*shape[:-2], m, 2)
    close(la.lstsq(cv.Tensor(a), cv.Tensor(b)).numpy(), np.linalg.pinv(a) @ b)


def test_solve_vectors_and_broadcasting():
    a, v = well(3, (2,)), rand(3)
    got = la.solve(cv.Tensor(a), cv.Tensor(v))
    assert got.shape == (2, 3)
    close(got.numpy(), np.linalg.solve(a, v[:, None])[..., 0])
    b = rand(4, 1, 3, 2)  # batch (4, 1) against (2,)
    close(la.solve(cv.Tensor(a), cv.Tensor(b)).numpy(), np.linalg.solve(a, b))
    close(la.lstsq(cv.Tensor(a[0]), cv.Tensor(v)).numpy(), np.linalg.lstsq(a[0], v, rcond=None)[0])


def test_edge_shapes_and_dtypes():
    one = cv.Tensor([[4.0]])
    assert la.inv(one).tolist() == [[0.25]] and la.cholesky(one).tolist() == [[2.0]]
    assert la.det(one).item() == 4.0 and la.eigvalsh(one).tolist() == [4.0]
    empty = cv.Tensor(np.zeros((0, 3, 3)))
    for f in (la.inv, la.cholesky, la.pinv):
        assert f(empty).numpy().shape == (0, 3, 3)
    assert la.det(empty).numpy().shape == (0,)
    assert [t.shape for t in la.eigh(empty)] == [(0, 3), (0, 3, 3)]
    assert [t.shape for t in la.svd(empty)] == [(0, 3, 3), (0, 3), (0, 3, 3)]
    assert la.matrix_rank(cv.Tensor(np.zeros((2, 0, 3)))).tolist() == [0, 0]
    ints = cv.Tensor([[2, 0], [0, 4]])
    assert la.inv(ints).dtype == cv.float32 and la.inv(ints).tolist() == [[0.5, 0.0], [0.0, 0.25]]
    half = la.inv(cv.Tensor(np.array([[2.0, 0.0], [0.0, 4.0]], np.float16)))
    assert half.dtype == cv.float16 and half.tolist() == [[0.5, 0.0], [0.0, 0.25]]
    assert la.svd(cv.Tensor([[3.0]], dtype=cv.bfloat16))[1].dtype == cv.bfloat16


def test_matrix_rank_and_power():
    a = rand(2, 4, 2) @ rand(2, 2, 5)  # rank 2
    assert la.matrix_rank(cv.Tensor(a)).tolist() == [2, 2]
    assert la.matrix_rank(cv.Tensor(a), rtol=0.0).dtype == cv.int64
    s = np.linalg.svd(a, compute_uv=False)
    cut = cv.Tensor([1e-10, s[1, 1] / s[1, 0] + 1e-3])  # a tensor rtol per matrix: drop the 2nd value of the 2nd
    assert la.matrix_rank(cv.Tensor(a), rtol=cut).tolist() == [2, 1]
    m = well(3, (2,)) / 3
    for n in (0, 1, 2, 5, -3):
        close(la.matrix_power(cv.Tensor(m), n).numpy(), np.linalg.matrix_power(m, n))
    assert la.matrix_power(cv.Tensor([[1, 1], [0, 1]]), 3).tolist() == [[1, 3], [0, 1]]


def test_compositions():
    x, y = rand(2, 3, 4), rand(4, 3)
    close(la.cross(cv.Tensor(x[:, :, 0]), cv.Tensor(y[0])).numpy(), np.cross(x[:, :, 0], y[0]))
    close(la.cross(cv.Tensor(x), cv.Tensor(x[::-1]), axis=-2).numpy(), np.cross(x, x[::-1], axis=-2))
    close(la.outer(cv.Tensor(y[0]), cv.Tensor(y[:, 0])).numpy(), np.outer(y[0], y[:, 0]))
    close(la.trace(cv.Tensor(x), offset=1).numpy(), np.trace(x, 1, -2, -1))
    close(la.diagonal(cv.Tensor(x), offset=-1).numpy(), np.diagonal(x, -1, -2, -1))
    close(la.matmul(cv.Tensor(x), cv.Tensor(y)).numpy(), x @ y)
    close(la.matrix_transpose(cv.Tensor(x)).numpy(), np.swapaxes(x, -1, -2))
    close(la.tensordot(cv.Tensor(x), cv.Tensor(y), axes=([2], [0])).numpy(), np.tensordot(x, y, ([2], [0])))
    close(la.vecdot(cv.Tensor(x), cv.Tensor(x)).numpy(), (x * x).sum(-1))
    assert cv.Tensor([1.0]).__array_namespace__().linalg is la


@pytest.mark.parametrize("ord", ["fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf])
def test_matrix_norm(ord):
    x = rand(2, 3, 4)
    close(la.matrix_norm(cv.Tensor(x), ord=ord).numpy(), np.linalg.norm(x, ord, axis=(-2, -1)))
    assert la.matrix_norm(cv.Tensor(x), ord=ord, keepdims=True).shape == (2, 1, 1)


def test_vector_norm():
    x = rand(2, 3, 4)
    for ord in (2, 1, 0, 3, 0.5, math.inf, -math.inf):
        close(la.vector_norm(cv.Tensor(x), ord=ord, axis=1).numpy(), np.linalg.norm(x, ord, axis=1))
    close(la.vector_norm(cv.Tensor(x)).numpy(), np.linalg.norm(x.ravel()))
    got = la.vector_norm(cv.Tensor(x), axis=(0, 2), keepdims=True, ord=3)
    assert got.shape == (1, 3, 1)
    close(got.numpy(), (np.abs(x) ** 3).sum((0, 2), keepdims=True) ** (1 / 3))
    assert la.vector_norm(cv.Tensor([3, 4])).dtype == cv.float32


# --- derivatives --------------------------------------------------------------------------------------
def check_grad(loss, *arrays, rtol=1e-5, atol=1e-7):
    """Compare cv.grad of ``loss`` (a scalar of corvid tensors) with central differences of its
    value, in float64."""
    got = cv.grad(loss, argnums=tuple(range(len(arrays))))(*[cv.Tensor(a) for a in arrays])
    for i, (a, g) in enumerate(zip(arrays, got)):
        def f(x, i=i):
            args = [cv.Tensor(x if j == i else b) for j, b in enumerate(arrays)]
            return loss(*args).item()
        np.testing.assert_allclose(g.numpy(), numeric_grad(f, a), rtol=rtol, atol=atol)


def sym(x):
    return (x + x.mT) * 0.5


W = rand(3, 3)
GRAD_CASES = {
    "inv": (lambda a: (la.inv(a) ** 2 * cv.Tensor(W)).sum(), [well(3)]),
    "solve": (lambda a, b: (la.solve(a, b) ** 2).sum(), [well(3), rand(3, 2)]),
    "det": (lambda a: la.det(a), [well(3)]),
    "slogdet": (lambda a: la.slogdet(a).logabsdet.sum(), [rand(2, 3, 3)]),
    "cholesky": (lambda a: (la.cholesky(sym(a)) * cv.Tensor(W)).sum(), [spd(3)]),
    "eigh_values": (lambda a: (la.eigh(sym(a)).eigenvalues * cv.Tensor(W[0])).sum(), [spd(3)]),
    "eigh_vectors": (lambda a: (la.eigh(sym(a)).eigenvectors ** 4).sum(), [spd(3)]),
    "eigvalsh": (lambda a: (la.eigvalsh(sym(a)) ** 3).sum(), [rand(3, 3)]),
    "qr_tall": (lambda a: (la.qr(a).Q * cv.Tensor(W[:, :2])).sum() + (la.qr(a).R ** 2 * cv.Tensor(W[:2, :2])).sum(),
                [rand(3, 2)]),
    "qr_wide": (lambda a: (la.qr(a).Q ** 3).sum() + (la.qr(a).R * cv.Tensor(W[:2])).sum(), [rand(2, 3)]),
    "svd_values": (lambda a: (la.svd(a)[1] * cv.Tensor(W[0, :2])).sum(), [rand(2, 3)]),
    "svd_vectors": (lambda a: (la.svd(a, full_matrices=False).U ** 4).sum()
                    + (la.svd(a, full_matrices=False).Vh ** 4 * cv.Tensor(W[:2])).sum(), [rand(2, 3)]),
    "svdvals": (lambda a: (la.svdvals(a) ** 2 * cv.Tensor(W[0, :2])).sum(), [rand(3, 2)]),
    "pinv": (lambda a: (la.pinv(a) * cv.Tensor(W[:2])).sum(), [rand(3, 2)]),
    "matrix_norm": (lambda a: la.matrix_norm(a) + la.matrix_norm(a, ord="nuc") + la.matrix_norm(a, ord=2),
                    [rand(3, 3)]),
    "vector_norm": (lambda a: la.vector_norm(a, ord=3, axis=0).sum() + la.vector_norm(a), [rand(3, 2)]),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradient_matches_finite_differences(name):
    loss, arrays = GRAD_CASES[name]
    check_grad(loss, *arrays)


@pytest.mark.parametrize("name", ["inv", "solve", "det", "slogdet", "cholesky", "eigh_vectors", "eigvalsh", "qr_tall",
                                  "qr_wide", "svd_vectors", "svdvals", "pinv"])
def test_jvp_matches_finite_differences(name):
    loss, arrays = GRAD_CASES[name]
    ts = [rand(*a.shape) for a in arrays]
    _, t = cv.jvp(loss, tuple(cv.Tensor(a) for a in arrays), tuple(cv.Tensor(t) for t in ts))
    eps = 1e-6
    shifted = lambda s: loss(*[cv.Tensor(a + s * t) for a, t in zip(arrays, ts)]).item()  # noqa: E731
    np.testing.assert_allclose(t.item(), (shifted(eps) - shifted(-eps)) / (2 * eps), rtol=1e-5, atol=1e-7)


def test_second_order_gradient():
    a = well(3)
    g2 = cv.grad(lambda x: (cv.grad(lambda y: la.inv(y).sum())(x) ** 2).sum())(cv.Tensor(a))

    def first(x):  # d sum(inv(x)) = -inv(x)ᵀ 1 1ᵀ inv(x)ᵀ
        xi = np.linalg.inv(x)
        return ((-xi.T @ np.ones((3, 3)) @ xi.T) ** 2).sum()
    np.testing.assert_allclose(g2.numpy(), numeric_grad(first, a), rtol=1e-5, atol=1e-7)


def test_repeated_values_drop_the_coupling_term():
    i3 = cv.eye(3, dtype=cv.float64)  # every eigenvalue (singular value) repeated: losses of the values are fine
    assert cv.grad(lambda a: la.eigh(a).eigenvalues.sum())(i3).tolist() == np.eye(3).tolist()
    close(cv.grad(lambda a: la.svd(a).S.sum())(i3 * 2).numpy(), np.eye(3))


def test_gradient_of_a_norm_at_zero_is_zero():
    assert cv.grad(lambda x: la.vector_norm(x))(cv.zeros(3, dtype=cv.float64)).tolist() == [0.0, 0.0, 0.0]


# --- transforms -----------------------------------------------------------------------------------------
def test_vmap_matches_a_loop():
    a, b = rand(4, 3, 3), rand(4, 3)

    def f(m, v):
        q, r = la.qr(m)
        return la.solve(m + 3 * cv.eye(3, dtype=cv.float64), v), la.svdvals(m), (q @ r), la.eigh(sym(m)).eigenvalues

    got = cv.vmap(f)(cv.Tensor(a), cv.Tensor(b))
    for i in range(4):
        want = f(cv.Tensor(a[i]), cv.Tensor(b[i]))
        for g, w in zip(got, want):
            close(g[i].numpy(), w.numpy())


def test_gradient_through_vmap():
    a = well(3, (2,))
    got = cv.grad(lambda m: cv.vmap(la.inv)(m).sum())(cv.Tensor(a))
    close(got.numpy(), cv.grad(lambda m: la.inv(m).sum())(cv.Tensor(a)).numpy())


def test_jit_replays_on_new_inputs():
    jf = cv.jit(lambda m: la.inv(m) @ la.cholesky(m @ m.mT + cv.eye(3, dtype=cv.float64)))
    for _ in range(3):
        a = rand(3, 3) + 3 * np.eye(3)
        close(jf(cv.Tensor(a)).numpy(), np.linalg.inv(a) @ np.linalg.cholesky(a @ a.T + np.eye(3)))
    assert jf.traces == 1


# --- errors --------------------------------------------------------------------------------------------
def test_errors_are_clear():
    for f in (la.inv, la.det, la.cholesky, la.eigh, la.slogdet, la.eigvalsh):
        with pytest.raises(ValueError, match=r"square.*\(2, 3\)"):
            f(cv.ones(2, 3))
    with pytest.raises(ValueError, match=r"\(3,\)"):
        la.svd(cv.ones(3))
    with pytest.raises(ValueError, match="does not match"):
        la.solve(cv.ones(3, 3), cv.ones(2))
    singular = cv.Tensor(np.ones((2, 2)))
    with pytest.raises(la.LinAlgError, match="Singular"):
        la.inv(singular).numpy()
    with pytest.raises(ValueError, match="Singular"):
        la.solve(singular, cv.ones(2)).numpy()
    with pytest.raises(la.LinAlgError, match="positive definite"):
        la.cholesky(cv.Tensor([[1.0, 2.0], [2.0, 1.0]])).numpy()
    assert la.det(singular).item() == 0.0
    with pytest.raises(ValueError, match="mode"):
        la.qr(cv.ones(2, 2), mode="r")
    with pytest.raises(ValueError, match="ord"):
        la.matrix_norm(cv.ones(2, 2), ord=3)
    with pytest.raises(ValueError, match="size 3"):
        la.cross(cv.ones(2), cv.ones(2))
    with pytest.raises(ValueError, match="vectors"):
        la.outer(cv.ones(2, 2), cv.ones(2))
    with pytest.raises(TypeError, match="int"):
        la.matrix_power(cv.ones(2, 2), 1.5)
    with pytest.raises(NotImplementedError, match="complete"):
        cv.grad(lambda m: la.qr(m, mode="complete").Q.sum())(cv.Tensor(rand(3, 2)))
    with pytest.raises(NotImplementedError, match="full_matrices"):
        cv.jvp(lambda m: la.svd(m).U, (cv.Tensor(rand(3, 2)),), (cv.Tensor(rand(3, 2)),))


# --- backends -------------------------------------------------------------------------------------------
def test_backend_switch_and_context_manager():
    start = la.get_backend()
    assert start in la.BACKENDS
    previous = la.set_backend("kernels")
    try:
        assert previous == start and la.get_backend() == "kernels"
        with la.use_backend("lapack"):
            assert la.get_backend() == "lapack"
        assert la.get_backend() == "kernels"
        with pytest.raises(RuntimeError), la.use_backend("lapack"):
            raise RuntimeError("restored even on an error")
        assert la.get_backend() == "kernels"
    finally:
        la.set_backend(start)
    with pytest.raises(ValueError, match="backend must be one of"):
        la.set_backend("cuda")
    assert la.get_backend() == start


def test_kernels_backend_uses_no_host_kernel(monkeypatch):
    def no_host(*args, **kwargs):
        raise AssertionError("a LAPACK host kernel was built")
    monkeypatch.setattr(la, "_host", no_host)
    a, s = well(3, (2,)), spd(3)
    with la.use_backend("kernels"):
        close(la.inv(cv.Tensor(a)).numpy(), np.linalg.inv(a))
        close(la.solve(cv.Tensor(a), cv.Tensor(a[0])).numpy(), np.linalg.solve(a, a[0]))
        close(la.cholesky(cv.Tensor(s)).numpy(), np.linalg.cholesky(s))
        close(la.eigvalsh(cv.Tensor(s)).numpy(), np.linalg.eigvalsh(s))
        close(la.svdvals(cv.Tensor(a)).numpy(), np.linalg.svd(a, compute_uv=False))
        close(la.cond(cv.Tensor(a)).numpy(), np.linalg.cond(a))
        w, v = la.eig(cv.Tensor(a))  # eig is written in kernels too
        close((cv.Tensor(a).astype(v.dtype) @ v).numpy(), (v * w[..., None, :]).numpy())
    with pytest.raises(AssertionError, match="host kernel"):
        la.inv(cv.Tensor(a))


def test_backend_from_the_environment():
    code = "import corvid; print(corvid.linalg.get_backend())"
    for value, want in (("kernels", "kernels"), ("bogus", "lapack")):
        env = dict(os.environ, CORVID_LINALG=value)
        out = subprocess.run([sys.executable, "-W", "always", "-c", code], env=env, capture_output=True, text=True,
                             check=True)
        assert out.stdout.strip() == want
        assert ("CORVID_LINALG" in out.stderr) == (value == "bogus")


# --- eig, eigvals ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_eig_matches_numpy(dtype):
    a = rand(2, 4, 4) + (1j * rand(2, 4, 4) if dtype == np.complex128 else 0)
    w, v = la.eig(cv.Tensor(a.astype(dtype)))
    want = cv.complex64 if dtype == np.float32 else cv.complex128
    assert (w.dtype, v.dtype, w.shape, v.shape) == (want, want, (2, 4), (2, 4, 4))
    ww, wv = np.linalg.eig(a.astype(dtype))
    close(w.numpy(), ww, dtype)  # the same LAPACK call: the same order
    close(np.abs(v.numpy()), np.abs(wv), dtype)  # unit vectors, equal up to a phase
    close((cv.Tensor(a.astype(dtype)).astype(want) @ v).numpy(), (v * w[..., None, :]).numpy(), dtype)
    close(la.eigvals(cv.Tensor(a.astype(dtype))).numpy(), ww, dtype)


def test_eig_of_a_symmetric_matrix_is_complex_with_real_values():
    s = spd(3)
    w = la.eigvals(cv.Tensor(s)).numpy()
    assert w.dtype == np.complex128 and np.all(w.imag == 0)
    close(np.sort(w.real), np.linalg.eigvalsh(s))


def test_eig_of_nan_raises_at_realize():
    bad = cv.Tensor(np.array([[1.0, np.nan], [0.0, 1.0]]))
    w = la.eigvals(bad)  # building the graph is fine; LAPACK refuses the value
    with pytest.raises(la.LinAlgError, match="infs or NaNs"):
        w.numpy()


# --- norm, cond -----------------------------------------------------------------------------------------
NORM_CASES = [
    ((5,), None, None), ((5,), 1, None), ((5,), -math.inf, None), ((5,), 0, None), ((5,), 3.5, None),
    ((3, 4), None, None), ((3, 4), "fro", None), ((3, 4), "nuc", None), ((3, 4), 2, None), ((3, 4), -1, None),
    ((3, 4), math.inf, None), ((2, 3, 4), None, None), ((2, 3, 4), None, 1), ((2, 3, 4), 3, -1),
    ((2, 3, 4), 2, (0,)), ((2, 3, 4), "fro", (2, 0)), ((2, 3, 4), -2, (0, 2)), ((2, 3, 4), 1, (-1, 1)),
]


@pytest.mark.parametrize("shape,ord,axis", NORM_CASES)
def test_norm_matches_numpy(shape, ord, axis):
    x = rand(*shape)
    for keepdims in (False, True):
        got = la.norm(cv.Tensor(x), ord, axis, keepdims)
        want = np.linalg.norm(x, ord, axis, keepdims)
        assert got.shape == np.shape(want)
        close(got.numpy(), want)


def test_norm_of_complex_and_int_inputs():
    z = rand(3, 4) + 1j * rand(3, 4)
    for ord, axis in ((None, None), (1, 0), ("nuc", None), (2, None), (math.inf, None)):
        got = la.norm(cv.Tensor(z), ord, axis)
        assert got.dtype == cv.float64
        close(got.numpy(), np.linalg.norm(z, ord, axis))
    assert la.norm(cv.Tensor(z.astype(np.complex64))).dtype == cv.float32
    assert la.norm(cv.Tensor([3, 4])).dtype == cv.float32 and la.norm(cv.Tensor([3, 4])).item() == 5.0


def test_norm_errors():
    x = cv.ones(2, 3, 4)
    with pytest.raises(ValueError, match="invalid norm order 'fro' for vectors"):
        la.norm(x, "fro", axis=1)
    with pytest.raises(ValueError, match="invalid norm order 3 for matrices"):
        la.norm(x, 3, axis=(1, 2))
    with pytest.raises(ValueError, match="1-D or 2-D"):
        la.norm(x, 2)
    with pytest.raises(ValueError, match="1 or 2 axes"):
        la.norm(x, axis=(0, 1, 2))
    with pytest.raises(ValueError, match="duplicate"):
        la.norm(x, axis=(1, -2))
    with pytest.raises(TypeError, match="axis"):
        la.norm(x, axis=1.0)
    with pytest.raises(ValueError, match="ord must be a number"):
        la.vector_norm(x, ord="fro")


@pytest.mark.parametrize("p", [None, 2, -2, "fro", "nuc", 1, -1, math.inf, -math.inf])
def test_cond_matches_numpy(p):
    a = rand(2, 3, 3)
    close(la.cond(cv.Tensor(a), p).numpy(), np.linalg.cond(a, p))
    z = rand(3, 3) + 1j * rand(3, 3)
    got = la.cond(cv.Tensor(z), p)
    assert got.dtype == cv.float64
    close(got.numpy(), np.linalg.cond(z, p))


def test_cond_of_singular_and_non_square_matrices():
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    for p in ("fro", 1, math.inf):  # inv of a singular matrix: inf, not LinAlgError (numpy's behaviour)
        assert la.cond(cv.Tensor(singular), p).item() == math.inf
    assert la.cond(cv.Tensor(np.zeros((2, 2)))).item() == math.inf
    assert math.isnan(la.cond(cv.Tensor(np.array([[np.nan, 0.0], [0.0, 1.0]])), 1).item())
    tall = rand(4, 2)
    close(la.cond(cv.Tensor(tall)).numpy(), np.linalg.cond(tall))
    with pytest.raises(ValueError, match="square"):
        la.cond(cv.Tensor(tall), "fro")
    with pytest.raises(ValueError, match="p must be"):
        la.cond(cv.Tensor(rand(2, 2)), 3)


def test_cond_and_norm_gradients():
    check_grad(lambda a: la.cond(a) + la.cond(a, "fro") + la.cond(a, 1), well(3))
    check_grad(lambda a: la.norm(a) + la.norm(a, "nuc") + la.norm(a, 3, axis=0).sum(), rand(3, 3))


# --- complex inputs -------------------------------------------------------------------------------------
def crand(*shape):
    return rand(*shape) + 1j * rand(*shape)


def hpd(n, batch=()):
    a = crand(*batch, n, n)
    return a @ np.swapaxes(a, -1, -2).conj() + n * np.eye(n)


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_complex_values_match_numpy(dtype):
    a, h, b = crand(2, 3, 3) + 3 * np.eye(3), hpd(3, (2,)), crand(2, 3, 2)
    A, H, B = (cv.Tensor(x.astype(dtype)) for x in (a, h, b))
    real = np.float64 if dtype == np.complex128 else np.float32
    cd = cv.complex128 if dtype == np.complex128 else cv.complex64
    rd = cv.float64 if dtype == np.complex128 else cv.float32
    close(la.inv(A).numpy(), np.linalg.inv(a), dtype)
    assert la.inv(A).dtype == cd
    close(la.solve(A, B).numpy(), np.linalg.solve(a, b), dtype)
    close(la.det(A).numpy(), np.linalg.det(a), dtype)
    sign, logabs = la.slogdet(A)
    assert (sign.dtype, logabs.dtype) == (cd, rd)
    close(sign.numpy(), np.linalg.slogdet(a)[0], dtype)
    close(logabs.numpy(), np.linalg.slogdet(a)[1], real)
    close(la.cholesky(H).numpy(), np.linalg.cholesky(h), dtype)
    close(la.cholesky(H, upper=True).numpy(), np.linalg.cholesky(h, upper=True), dtype)
    w, v = la.eigh(H)
    assert (w.dtype, v.dtype) == (rd, cd)
    close(w.numpy(), np.linalg.eigvalsh(h), real)
    close((v @ (w.astype(cd)[..., None] * v.mT.conj())).numpy(), h, dtype)
    close(la.eigvalsh(H).numpy(), np.linalg.eigvalsh(h), real)
    for shape in ((2, 4, 3), (2, 3, 4)):
        x = crand(*shape)
        X = cv.Tensor(x.astype(dtype))
        q, r = la.qr(X)
        close((q @ r).numpy(), x, dtype)
        close(np.abs(r.numpy()), np.abs(np.linalg.qr(x)[1]), real)
        u, s, vh = la.svd(X, full_matrices=False)
        assert (u.dtype, s.dtype, vh.dtype) == (cd, rd, cd)
        close(s.numpy(), np.linalg.svd(x, compute_uv=False), real)
        close(((u * s.astype(cd)[..., None, :]) @ vh).numpy(), x, dtype)
        close(la.svdvals(X).numpy(), np.linalg.svd(x, compute_uv=False), real)
        close(la.pinv(X).numpy(), np.linalg.pinv(x), dtype)
        assert la.matrix_rank(X).tolist() == [3, 3]
    for ord in ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf):
        got = la.matrix_norm(A, ord=ord)
        assert got.dtype == rd
        close(got.numpy(), np.linalg.norm(a, ord, axis=(-2, -1)), real)
    close(la.vector_norm(A, ord=3, axis=-1).numpy(), np.linalg.norm(a, 3, axis=-1), real)


def numeric_complex_grad(f, a, eps=1e-6):
    """JAX's convention for a real loss of a complex input: dL/dRe - 1j dL/dIm."""
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        d = np.zeros_like(a)
        d[i] = eps
        g[i] = (f(a + d) - f(a - d)) / (2 * eps) - 1j * (f(a + 1j * d) - f(a - 1j * d)) / (2 * eps)
    return g


def herm(x):
    return (x + x.mT.conj()) * 0.5


CW = crand(3, 3)
COMPLEX_GRAD_CASES = {
    "inv": (lambda a: (la.inv(a) * cv.Tensor(CW)).real.sum() + (la.inv(a).abs() ** 2).sum(), well(3) + 1j * rand(3, 3)),
    "solve": (lambda a: (la.solve(a, cv.Tensor(CW[:, :2])).abs() ** 2).sum(), well(3) + 1j * rand(3, 3)),
    "det": (lambda a: (la.det(a) * (1 + 2j)).real, well(3) + 1j * rand(3, 3)),
    "slogdet": (lambda a: la.slogdet(a).logabsdet + (la.slogdet(a).sign * (0.3 - 1j)).real, crand(3, 3)),
    "cholesky": (lambda a: (la.cholesky(herm(a)) * cv.Tensor(CW)).real.sum(), hpd(3)),
    "eigh": (lambda a: (la.eigh(herm(a)).eigenvalues * cv.Tensor([1.0, 2.0, 3.0])).sum()
             + (la.eigh(herm(a)).eigenvectors.abs() ** 4).sum(), hpd(3)),
    "eigvalsh": (lambda a: (la.eigvalsh(herm(a)) ** 3).sum(), crand(3, 3)),
    "svd": (lambda a: (la.svd(a, full_matrices=False).S ** 3).sum() + (la.svd(a, full_matrices=False).U.abs() ** 4).sum()
            + ((la.svd(a, full_matrices=False).Vh.abs() ** 4) * cv.Tensor(CW[:2].real)).sum(), crand(2, 3)),
    "svdvals": (lambda a: (la.svdvals(a) ** 3).sum(), crand(3, 2)),
    "qr_tall": (lambda a: (la.qr(a).Q * cv.Tensor(CW[:, :2])).real.sum() + (la.qr(a).R.abs() ** 2).sum(), crand(3, 2)),
    "qr_wide": (lambda a: (la.qr(a).Q.abs() ** 3).sum() + (la.qr(a).R * cv.Tensor(CW[:2])).real.sum(), crand(2, 3)),
    "pinv": (lambda a: (la.pinv(a) * cv.Tensor(CW[:2])).real.sum(), crand(3, 2)),
    "eig": (lambda a: (la.eigvals(a) * cv.Tensor(CW[0])).real.sum()
            + (la.eig(a).eigenvectors.abs() ** 4 * cv.Tensor(CW.real)).sum(), crand(3, 3)),
    "norms": (lambda a: la.matrix_norm(a) + la.matrix_norm(a, ord="nuc") + la.norm(a, 2), crand(3, 3)),
}


@pytest.mark.parametrize("name", sorted(COMPLEX_GRAD_CASES))
def test_complex_gradient_and_jvp_match_finite_differences(name):
    loss, a = COMPLEX_GRAD_CASES[name]
    value = lambda x: loss(cv.Tensor(x)).item()  # noqa: E731
    got = cv.grad(loss)(cv.Tensor(a))
    assert got.dtype == cv.complex128
    np.testing.assert_allclose(got.numpy(), numeric_complex_grad(value, a), rtol=1e-5, atol=1e-7)
    t = crand(*a.shape)
    _, jt = cv.jvp(loss, (cv.Tensor(a),), (cv.Tensor(t),))
    eps = 1e-6
    np.testing.assert_allclose(jt.item(), (value(a + eps * t) - value(a - eps * t)) / (2 * eps), rtol=1e-5, atol=1e-7)


def test_eig_gradient_of_a_real_matrix_is_real():
    a = rand(3, 3)
    loss = lambda x: (la.eigvals(x) * cv.Tensor(CW[0])).real.sum() + (la.eig(x).eigenvectors.abs() ** 4).sum()  # noqa: E731
    got = cv.grad(loss)(cv.Tensor(a))
    assert got.dtype == cv.float64
    np.testing.assert_allclose(got.numpy(), numeric_grad(lambda x: loss(cv.Tensor(x)).item(), a), rtol=1e-5, atol=1e-7)


def test_complex_second_order_and_vmap():
    a = well(3) + 1j * rand(3, 3)
    g2 = cv.grad(lambda x: (cv.grad(lambda y: (la.inv(y) * cv.Tensor(CW)).real.sum())(x).abs() ** 2).sum())(cv.Tensor(a))

    def first(x):
        xi = np.linalg.inv(x)
        return (np.abs(-(xi.T @ CW @ xi.T)) ** 2).sum()  # JAX convention: the real formula for a holomorphic map
    np.testing.assert_allclose(g2.numpy(), numeric_complex_grad(first, a), rtol=1e-5, atol=1e-7)
    batch = crand(4, 3, 3) + 3 * np.eye(3)
    got = cv.vmap(lambda m: la.det(m) * la.slogdet(m).logabsdet)(cv.Tensor(batch))
    close(got.numpy(), np.linalg.det(batch) * np.linalg.slogdet(batch)[1])

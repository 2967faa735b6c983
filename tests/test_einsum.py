"""einsum against np.einsum: fixed expressions, the interleaved form, a fuzz of random valid
subscripts, gradients, vmap, errors and the fused kernel of a contraction."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import corvid as cv

rng = np.random.default_rng(0)

CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),                       # implicit output
    ("Ba,aC", [(2, 3), (3, 4)]),                       # implicit output sorts upper case first
    ("ji", [(2, 3)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("iij->ji", [(3, 3, 2)]),
    ("iii->i", [(3, 3, 3)]),
    ("a...a->...", [(3, 2, 3)]),
    ("...ij,...jk", [(5, 1, 2, 3), (4, 3, 2)]),        # broadcast ellipsis axes
    ("...ij,...jk->...ik", [(2, 3), (2, 3, 4)]),
    ("ij->...ij", [(2, 3)]),
    ("i...->...", [(2, 3, 4)]),
    ("i,i", [(1,), (3,)]),                             # a size-1 axis broadcasts
    ("ij,ij", [(1, 3), (2, 3)]),
    ("bij,bjk,bkl->bil", [(2, 3, 4), (2, 4, 5), (2, 5, 2)]),
    ("ij,jk,kl,lm->im", [(2, 3), (3, 4), (4, 5), (5, 2)]),
    ("i,j,k", [(2,), (3,), (4,)]),                     # outer product of three
    ("ijk->", [(2, 3, 4)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("", [()]),
    (",->", [(), ()]),
    ("i,->i", [(3,), ()]),
    ("abc,cba", [(2, 3, 4), (4, 3, 2)]),
    ("ij,i->j", [(3, 4), (3,)]),
    ("ijk,ikl->ijl", [(2, 3, 4), (2, 4, 5)]),
    ("iij,jk->ik", [(3, 3, 2), (2, 4)]),
    ("ab,bc,ca->", [(2, 3), (3, 4), (4, 2)]),
    (" i j , j k -> i k ", [(2, 3), (3, 4)]),          # spaces are ignored
    ("ij,jk->ik", [(2, 0), (0, 4)]),                   # an empty contraction gives zeros
]


@pytest.mark.parametrize("subscripts,shapes", CASES, ids=[c[0].replace(" ", "_") or "empty" for c in CASES])
def test_einsum_matches_numpy(subscripts, shapes):
    arrays = [rng.standard_normal(s) for s in shapes]
    want = np.einsum(subscripts, *arrays)
    got = cv.einsum(subscripts, *[cv.Tensor(a) for a in arrays])
    assert got.shape == want.shape and got.dtype == cv.float64
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


def test_interleaved_form_and_dtypes():
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    np.testing.assert_allclose(cv.einsum(cv.Tensor(a), [0, 1], cv.Tensor(b), [1, 2], [0, 2]).numpy(), a @ b, rtol=1e-12)
    np.testing.assert_allclose(cv.einsum(cv.Tensor(a), [Ellipsis, 1], cv.Tensor(b), [1, 30]).numpy(),
                               np.einsum(a, [Ellipsis, 1], b, [1, 30]), rtol=1e-12)
    ai, bi = rng.integers(-3, 4, (2, 3)).astype(np.int8), rng.integers(-3, 4, (3, 4)).astype(np.int8)
    got = cv.einsum("ij,jk->ik", cv.Tensor(ai), cv.Tensor(bi))
    assert got.dtype == cv.int8
    np.testing.assert_array_equal(got.numpy(), np.einsum("ij,jk->ik", ai, bi))
    mixed = cv.einsum("i,i->i", cv.Tensor(ai[0]), cv.Tensor(a[0].astype(np.float32)))
    assert mixed.dtype == cv.float32
    np.testing.assert_allclose(cv.einsum("ij,jk", a.tolist(), b).numpy(), a @ b, rtol=1e-6)  # non-Tensor operands


def test_contraction_is_one_fused_kernel():
    a, b = cv.Tensor(np.ones((64, 32), np.float32)), cv.Tensor(np.ones((32, 48), np.float32))
    kernels = cv.einsum("ij,jk->ik", a, b).schedule()
    assert len(kernels) == 1 and kernels[0].name.startswith("r_")
    assert "cv_float32x" in kernels[0].source  # the matmul tile of codegen/opt.py


@st.composite
def _expressions(draw):
    """A random valid einsum: 1-3 operands over a pool of labels, optional ellipsis and output."""
    letters = "abcdeF"
    size = {c: draw(st.integers(1, 3)) for c in letters}
    n_ops = draw(st.integers(1, 3))
    ell = draw(st.booleans())
    ell_shape = tuple(draw(st.lists(st.integers(1, 2), min_size=0, max_size=2))) if ell else ()
    terms, shapes = [], []
    for _ in range(n_ops):
        labels = draw(st.lists(st.sampled_from(letters), min_size=0, max_size=3))
        if ell and draw(st.booleans()):
            k = draw(st.integers(0, len(ell_shape)))
            pos = draw(st.integers(0, len(labels)))
            sub = ell_shape[len(ell_shape) - k:]
            if draw(st.booleans()):  # a broadcast size-1 ellipsis axis
                sub = tuple(1 for _ in sub)
            shapes.append(tuple(size[c] for c in labels[:pos]) + sub + tuple(size[c] for c in labels[pos:]))
            terms.append("".join(labels[:pos]) + "..." + "".join(labels[pos:]))
        else:
            shapes.append(tuple(size[c] for c in labels))
            terms.append("".join(labels))
    used = sorted(set("".join(terms).replace(".", "")))
    if draw(st.booleans()):
        out = draw(st.permutations(used))
        out = "".join(out[:draw(st.integers(0, len(out)))])
        if any("..." in t for t in terms):
            out = "..." + out if draw(st.booleans()) else out + "..."
        return ",".join(terms) + "->" + out, shapes
    return ",".join(terms), shapes


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_expressions())
def test_einsum_fuzz_matches_numpy(expr):
    subscripts, shapes = expr
    arrays = [rng.standard_normal(s) for s in shapes]
    want = np.einsum(subscripts, *arrays)
    got = cv.einsum(subscripts, *[cv.Tensor(a) for a in arrays])
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)


def test_einsum_grad_matches_finite_differences():
    a, b, c = rng.standard_normal((3, 3, 2)), rng.standard_normal((2, 4)), rng.standard_normal((4,))
    expr = "iij,jk,k->i"
    w = rng.standard_normal(3)

    def ref(a, b, c):
        return float(np.einsum(expr, a, b, c) @ w)

    grads = cv.grad(lambda a, b, c: (cv.einsum(expr, a, b, c) * cv.Tensor(w)).sum(), argnums=(0, 1, 2))(
        cv.Tensor(a), cv.Tensor(b), cv.Tensor(c))
    args = [a, b, c]
    for i, got in enumerate(grads):
        num = np.zeros_like(args[i])
        for idx in np.ndindex(num.shape):
            hi, lo = [x.copy() for x in args], [x.copy() for x in args]
            hi[i][idx] += 1e-6
            lo[i][idx] -= 1e-6
            num[idx] = (ref(*hi) - ref(*lo)) / 2e-6
        np.testing.assert_allclose(got.numpy(), num, rtol=1e-6, atol=1e-6)


def test_einsum_vmap_matches_loop():
    xs, y = rng.standard_normal((4, 2, 3)), rng.standard_normal((3, 3))
    got = cv.vmap(lambda x: cv.einsum("ij,jj->ji", x, cv.Tensor(y)))(cv.Tensor(xs)).numpy()
    for i in range(4):
        np.testing.assert_allclose(got[i], np.einsum("ij,jj->ji", xs[i], y), rtol=1e-12)


@pytest.mark.parametrize("subscripts,shapes,match", [
    ("ij,jk->il", [(2, 3), (3, 4)], r"output label 'l'"),
    ("ij,jk", [(2, 3), (4, 4)], r"label 'j' has sizes 3 and 4.*\(2, 3\), \(4, 4\)"),
    ("ij", [(2, 3, 4)], r"2 subscripts for an operand with 3 dimensions"),
    ("i1", [(2, 3)], r"invalid subscript '1'"),
    ("ij->ii", [(2, 2)], r"repeats a label"),
    ("i,j", [(2,)], r"name 2 operands, got 1"),
    ("...i->i", [(2, 3)], r"needs '...'"),
    ("i....", [(2, 3)], r"invalid ellipsis"),
    ("i->j->k", [(2,)], r"invalid subscripts"),
    ("...i,...i", [(2, 3), (4, 3)], r"an ellipsis axis has sizes 2 and 4"),
])
def test_einsum_errors(subscripts, shapes, match):
    with pytest.raises(ValueError, match=match):
        cv.einsum(subscripts, *[cv.ones(*s) for s in shapes])

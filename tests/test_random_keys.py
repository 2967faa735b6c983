"""cv.random with explicit keys (JAX style): pure functions of the key, same numbers everywhere."""

import math

import numpy as np
import pytest

import corvid as cv

R = cv.random


def test_same_key_same_numbers_and_split_keys_differ():
    k = R.key(42)
    a, b = R.normal(k, (1000,)).numpy(), R.normal(k, (1000,)).numpy()
    np.testing.assert_array_equal(a, b)
    k1, k2 = R.split(k)
    assert k1.tolist() != k2.tolist() and k1.tolist() != k.tolist()
    assert not np.array_equal(R.normal(k1, (8,)).numpy(), R.normal(k2, (8,)).numpy())
    assert R.split(k, 5).shape == (5, 2) and R.split(k, 5).dtype == cv.uint32
    assert R.fold_in(k, 1).tolist() != R.fold_in(k, 2).tolist()
    assert R.key(2**64 + 42).tolist() == k.tolist()


def test_numbers_do_not_depend_on_the_kernel_split():
    k = R.key(3)
    alone = R.uniform(k, (64,)).numpy()
    fused = (R.uniform(k, (64,)) * 2 + 1).numpy()
    np.testing.assert_allclose(fused, alone * 2 + 1, rtol=1e-6)
    assert np.array_equal(R.uniform(k, (64,)).numpy(), alone)


def test_distributions_have_the_right_moments():
    k1, k2, k3, k4 = R.split(R.key(0), 4)
    n = 200_000
    x = R.normal(k1, (n,), dtype=cv.float64).numpy()
    assert abs(x.mean()) < 0.01 and abs(x.std() - 1) < 0.01
    u = R.uniform(k2, (n,), minval=-2.0, maxval=3.0).numpy()
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.02
    b = R.bernoulli(k3, 0.3, (n,)).numpy()
    assert b.dtype == np.bool_ and abs(b.mean() - 0.3) < 0.005
    t = R.truncated_normal(k4, -1.0, 2.0, (n,), dtype=cv.float64).numpy()
    phi = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))  # noqa: E731
    want = (phi(-1.0) - phi(2.0)) / (cdf(2.0) - cdf(-1.0))
    assert t.min() >= -1.0 and t.max() <= 2.0 and abs(t.mean() - want) < 0.01


def test_randint_categorical_permutation():
    k1, k2, k3 = R.split(R.key(7), 3)
    r = R.randint(k1, (50_000,), -3, 4, dtype=cv.int32)
    assert r.dtype == cv.int32
    counts = np.bincount(r.numpy() + 3, minlength=7) / 50_000
    assert r.numpy().min() == -3 and r.numpy().max() == 3 and np.all(np.abs(counts - 1 / 7) < 0.01)
    logits = cv.Tensor([0.0, 1.0, 2.0])
    c = R.categorical(k2, logits, shape=(50_000,)).numpy()
    p = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    np.testing.assert_allclose(np.bincount(c, minlength=3) / 50_000, p, atol=0.01)
    rows = R.categorical(k2, cv.Tensor([[0.0, 50.0, 0.0], [50.0, 0.0, 0.0]]))  # per-row draws
    assert rows.tolist() == [1, 0]
    perm = R.permutation(k3, 100).numpy()
    assert sorted(perm.tolist()) == list(range(100)) and perm.tolist() != list(range(100))
    xs = cv.arange(10.0)
    assert sorted(R.permutation(k3, xs).tolist()) == list(map(float, range(10)))


def test_vmap_over_keys_equals_a_loop_and_jit_matches_eager():
    keys = R.split(R.key(5), 4)
    got = cv.vmap(lambda k: R.normal(k, (3,)))(keys).numpy()
    want = np.stack([R.normal(keys[i], (3,)).numpy() for i in range(4)])
    np.testing.assert_array_equal(got, want)
    jf = cv.jit(lambda k, x: x + R.uniform(k, (3,)))
    k = R.key(9)
    np.testing.assert_array_equal(jf(k, cv.zeros(3)).numpy(), R.uniform(k, (3,)).numpy())
    k2 = R.key(10)
    np.testing.assert_array_equal(jf(k2, cv.zeros(3)).numpy(), R.uniform(k2, (3,)).numpy())
    assert jf.traces == 1


def test_global_randint_still_works_and_bad_keys_are_type_errors():
    cv.manual_seed(0)
    assert cv.random.randint(0, 5, size=(3,)).shape == (3,)
    with pytest.raises(TypeError, match="key"):
        R.normal(cv.zeros(2), (3,))
    with pytest.raises(ValueError, match="single key"):
        R.normal(R.split(R.key(0), 2), (3,))
    with pytest.raises(TypeError, match="seed"):
        R.key(1.5)
    with pytest.raises(ValueError, match="lower"):
        R.truncated_normal(R.key(0), 1.0, -1.0)

"""Shared test inputs: small random arrays of any corvid dtype."""

import numpy as np


def sample(d, shape, seed=0, lo=-3, hi=4, normal=False):
    """Random values of corvid dtype ``d``: bools, ints in [lo, hi) (0 and up for unsigned; small
    ranges give many duplicates), floats uniform in [-2, 2) or standard normal."""
    rng = np.random.default_rng(seed)
    if d.is_bool:
        return rng.random(shape) < 0.5
    if d.is_int:
        return rng.integers(0 if d.kind == "u" else lo, hi, size=shape).astype(d.np)
    if normal:
        return rng.standard_normal(shape).astype(d.np)
    return rng.uniform(-2, 2, size=shape).astype(d.np)


def numeric_grad(f, a, eps=1e-6):
    """Central differences of the scalar function ``f`` at the float64 array ``a``."""
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        d = np.zeros_like(a)
        d[i] = eps
        g[i] = (f(a + d) - f(a - d)) / (2 * eps)
    return g

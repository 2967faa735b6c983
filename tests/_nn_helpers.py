"""Shared helpers of the corvid.nn tests (no tests here): a finite-difference gradient check and torch bridges."""

import numpy as np
import pytest

import corvid as cv


def fd_check(f, tensors, eps=1e-6, rtol=1e-5, seed=0):
    """Check the gradient of the scalar ``f()`` with respect to float64 leaf ``tensors`` along a
    random direction: ``<grad, v>`` against the central difference ``(f(t + eps v) - f(t - eps v)) / 2 eps``."""
    for t in tensors:
        t.grad = None
    f().backward()
    r = np.random.default_rng(seed)
    dirs = [r.standard_normal(t.shape) for t in tensors]
    analytic = sum(float((t.grad.numpy() * d).sum()) for t, d in zip(tensors, dirs))
    saved = [t.numpy() for t in tensors]

    def at(step):
        with cv.no_grad():
            for t, v, d in zip(tensors, saved, dirs):
                t.assign(cv.Tensor(v + step * d))
        return f().item()

    numeric = (at(eps) - at(-eps)) / (2 * eps)
    at(0.0)
    assert numeric == pytest.approx(analytic, rel=rtol, abs=1e-7)


def to_torch(module, torch_module):
    """Copy ``module``'s state into ``torch_module`` (also proves the state-dict names agree)."""
    import torch

    torch_module.load_state_dict({k: torch.tensor(v.numpy()) for k, v in module.state_dict().items()})
    return torch_module


def leaf(a):
    """A float64 leaf tensor that requires grad."""
    return cv.Tensor(np.asarray(a, np.float64), requires_grad=True)

"""Gradient clipping: the global norm returned and applied, by value, and with non-finite norms."""

import math

import numpy as np
import pytest

import corvid as cv
from corvid.optim import clip_grad_norm_, clip_grad_value_

G = [np.array([[3.0, -4.0], [1.0, 2.0]]), np.array([-12.0, 0.5])]


def params_with_grads():
    params = [cv.Tensor(np.zeros(g.shape), requires_grad=True) for g in G]
    for p, g in zip(params, G):
        p.grad = cv.Tensor(g)
    return params


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
def test_clip_grad_norm(norm_type):
    params = params_with_grads()
    flat = np.concatenate([g.ravel() for g in G])
    norm = np.abs(flat).max() if math.isinf(norm_type) else (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    total = clip_grad_norm_(params, 2.0, norm_type=norm_type)
    assert total.shape == () and total.dtype == cv.float32
    np.testing.assert_allclose(total.item(), norm, rtol=1e-6)
    for p, g in zip(params, G):
        np.testing.assert_allclose(p.grad.numpy(), g * 2.0 / (norm + 1e-6), rtol=1e-6)


def test_clip_grad_norm_leaves_small_gradients_and_skips_missing_ones():
    params = params_with_grads() + [cv.Tensor([1.0], requires_grad=True)]
    total = clip_grad_norm_(params, 100.0)
    assert params[2].grad is None
    for p, g in zip(params, G):
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-7)
    assert total.item() == pytest.approx(math.sqrt(sum((g * g).sum() for g in G)), rel=1e-6)
    assert clip_grad_norm_([cv.Tensor([1.0], requires_grad=True)], 1.0).item() == 0.0
    single = params_with_grads()[1]
    assert clip_grad_norm_(single, 1.0).item() == pytest.approx(math.hypot(12.0, 0.5), rel=1e-6)


def test_clip_grad_norm_nonfinite():
    params = params_with_grads()
    params[1].grad = cv.Tensor([math.inf, 0.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    assert math.isinf(clip_grad_norm_(params, 1.0).item())


def test_clip_grad_value():
    params = params_with_grads()
    clip_grad_value_(params, 2.5)
    for p, g in zip(params, G):
        np.testing.assert_array_equal(p.grad.numpy(), np.clip(g, -2.5, 2.5))
    with pytest.raises(ValueError, match="non-negative"):
        clip_grad_value_(params, -1.0)


def test_clipped_gradients_fuse_into_the_step():
    params = params_with_grads()
    opt = cv.optim.SGD(params, lr=1.0)
    total = clip_grad_norm_(params, 1.0)
    opt.step()
    norm = math.sqrt(sum((g * g).sum() for g in G))
    for p, g in zip(params, G):
        np.testing.assert_allclose(p.numpy(), -g / (norm + 1e-6), rtol=1e-6)
    assert total.item() == pytest.approx(norm, rel=1e-6)

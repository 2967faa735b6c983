"""corvid.nn layers against float64 numpy references written here, gradients against finite
differences (float64), default initializations, input checks; PyTorch (when installed) is an extra
oracle, fed the same weights through state dicts."""

import itertools
import math

import numpy as np
import pytest
from _nn_helpers import fd_check, leaf, to_torch

import corvid as cv
import corvid.nn.functional as F
from corvid import nn

rng = np.random.default_rng(0)
_erf = np.vectorize(math.erf)


def _tuple(v, nd):
    return (v,) * nd if isinstance(v, int) else tuple(v)


# --- numpy references --------------------------------------------------------------------------------


def sigmoid_ref(x):
    return 1 / (1 + np.exp(-x))


ACTIVATIONS = {  # name -> (corvid function, numpy reference)
    "relu": (F.relu, lambda x: np.maximum(x, 0)),
    "relu6": (F.relu6, lambda x: np.clip(x, 0, 6)),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "elu": (lambda x: F.elu(x, 0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x))),
    "selu": (F.selu, lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x))),
    "celu": (lambda x: F.celu(x, 2.0), lambda x: np.where(x > 0, x, 2.0 * np.expm1(x / 2.0))),
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2)))),
    "gelu_tanh": (lambda x: F.gelu(x, "tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    "silu": (F.silu, lambda x: x * sigmoid_ref(x)),
    "mish": (F.mish, lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    "sigmoid": (F.sigmoid, sigmoid_ref),
    "tanh": (F.tanh, np.tanh),
    "softplus": (lambda x: F.softplus(x, 2.0), lambda x: np.log1p(np.exp(2 * x)) / 2),
    "softsign": (F.softsign, lambda x: x / (1 + np.abs(x))),
    "logsigmoid": (F.logsigmoid, lambda x: -np.log1p(np.exp(-x))),
    "hardtanh": (lambda x: F.hardtanh(x, -0.5, 2.0), lambda x: np.clip(x, -0.5, 2.0)),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "hardsigmoid": (F.hardsigmoid, lambda x: np.clip(x + 3, 0, 6) / 6),
    "softmax": (lambda x: F.softmax(x, dim=1), lambda x: np.exp(x) / np.exp(x).sum(1, keepdims=True)),
    "log_softmax": (lambda x: F.log_softmax(x, dim=0), lambda x: x - np.log(np.exp(x).sum(0, keepdims=True))),
    "softmin": (lambda x: F.softmin(x, dim=1), lambda x: np.exp(-x) / np.exp(-x).sum(1, keepdims=True)),
    "prelu": (lambda x: F.prelu(x, cv.Tensor([0.1, 0.2, 0.3, 0.4, 0.5], dtype=x.dtype)),
              lambda x: np.where(x > 0, x, x * np.array([0.1, 0.2, 0.3, 0.4, 0.5]))),
}


def conv_ref(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    nd = x.ndim - 2
    st, pd, dl, ks = _tuple(stride, nd), _tuple(padding, nd), _tuple(dilation, nd), w.shape[2:]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pd])
    out_sz = [(xp.shape[2 + j] - dl[j] * (ks[j] - 1) - 1) // st[j] + 1 for j in range(nd)]
    n, c_in, c_out = x.shape[0], x.shape[1], w.shape[0]
    cg, og = c_in // groups, c_out // groups
    out = np.zeros((n, c_out, *out_sz))
    for off in itertools.product(*map(range, ks)):
        window = tuple(slice(off[j] * dl[j], off[j] * dl[j] + st[j] * (out_sz[j] - 1) + 1, st[j]) for j in range(nd))
        patch = xp[(slice(None), slice(None)) + window]
        for g in range(groups):
            wg = w[(slice(g * og, (g + 1) * og), slice(None)) + off]
            out[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", patch[:, g * cg:(g + 1) * cg], wg)
    return out if b is None else out + b.reshape((-1,) + (1,) * nd)


def conv_transpose_ref(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1):
    nd = x.ndim - 2
    st, pd, op, ks = _tuple(stride, nd), _tuple(padding, nd), _tuple(output_padding, nd), w.shape[2:]
    n, c_in, og = x.shape[0], x.shape[1], w.shape[1]
    cg = c_in // groups
    full = [(x.shape[2 + j] - 1) * st[j] + ks[j] + op[j] for j in range(nd)]
    buf = np.zeros((n, og * groups, *full))
    for off in itertools.product(*map(range, ks)):
        target = tuple(slice(off[j], off[j] + st[j] * (x.shape[2 + j] - 1) + 1, st[j]) for j in range(nd))
        for g in range(groups):
            wg = w[(slice(g * cg, (g + 1) * cg), slice(None)) + off]
            buf[(slice(None), slice(g * og, (g + 1) * og)) + target] += np.einsum(
                "nc...,co->no...", x[:, g * cg:(g + 1) * cg], wg)
    out = buf[(slice(None), slice(None)) + tuple(slice(p, f - p) for p, f in zip(pd, full))]
    return out if b is None else out + b.reshape((-1,) + (1,) * nd)


def pool_ref(x, k, s, p, kind):
    nd = len(k)
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, [(0, 0)] * (x.ndim - nd) + [(q, q) for q in p], constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(xp, k, axis=tuple(range(-nd, 0)))
    win = win[(Ellipsis,) + tuple(slice(None, None, q) for q in s) + (slice(None),) * nd]
    return win.max(tuple(range(-nd, 0))) if kind == "max" else win.mean(tuple(range(-nd, 0)))


def adaptive_avg_ref(x, out):
    for axis, o in zip(range(x.ndim - len(out), x.ndim), out):
        n = x.shape[axis]
        parts = [np.take(x, range(i * n // o, -(-(i + 1) * n // o)), axis=axis).mean(axis, keepdims=True)
                 for i in range(o)]
        x = np.concatenate(parts, axis)
    return x


def bilinear_matrix(n, o):
    """(n, o) interpolation weights of align_corners=False linear resampling."""
    m = np.zeros((n, o))
    for j in range(o):
        src = max((j + 0.5) * n / o - 0.5, 0.0)
        i0 = int(np.floor(src))
        i1, lam = min(i0 + 1, n - 1), src - i0
        m[i0, j] += 1 - lam
        m[i1, j] += lam
    return m


def norm_ref(x, axes, eps=1e-5):
    mean = x.mean(axes, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axes, keepdims=True) + eps)


# --- activations -------------------------------------------------------------------------------------


def test_activation_values_and_gradients():
    # every activation in one schedule per step (their kernels compile in parallel), each checked alone
    names = list(ACTIVATIONS)
    x = rng.standard_normal((3, 5)) * 3
    outs = [ACTIVATIONS[n][0](cv.Tensor(x)) for n in names]
    cv.realize(*outs)
    for name, out in zip(names, outs):
        np.testing.assert_allclose(out.numpy(), ACTIVATIONS[name][1](x), rtol=1e-10, atol=1e-12, err_msg=name)
    leaves = [leaf(x) for _ in names]
    w = cv.Tensor(rng.standard_normal((3, 5)))

    def losses():
        return [(ACTIVATIONS[n][0](t) * w).sum() for n, t in zip(names, leaves)]

    sum(losses()).backward()
    d = rng.standard_normal((3, 5))
    eps = 1e-6

    def at(step):
        with cv.no_grad():
            for t in leaves:
                t.assign(cv.Tensor(x + step * d))
        values = losses()
        cv.realize(*values)
        return np.array([v.item() for v in values])

    numeric = (at(eps) - at(-eps)) / (2 * eps)
    for name, t, num in zip(names, leaves, numeric):
        assert num == pytest.approx(float((t.grad.numpy() * d).sum()), rel=1e-5, abs=1e-7), name


def test_activations_are_stable_at_extremes_and_kinks():
    x = cv.Tensor([-200.0, -30.0, 0.0, 30.0, 200.0], requires_grad=True)
    for fn in (F.sigmoid, F.logsigmoid, F.softplus, F.silu, F.mish, F.elu, F.selu, F.celu, F.gelu):
        x.grad = None
        y = fn(x)
        y.sum().backward()
        assert np.isfinite(y.numpy()).all() and np.isfinite(x.grad.numpy()).all(), fn.__name__
    x.grad = None
    F.relu(x).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]  # relu'(0) = 0, as torch
    assert F.relu(cv.Tensor([float("nan")])).isnan().item()


def test_activations_match_torch_at_kinks():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x = np.array([-4.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0, 7.0, 25.0], np.float32)
    pairs = [(F.relu, tf.relu), (F.relu6, tf.relu6), (F.leaky_relu, tf.leaky_relu), (F.elu, tf.elu),
             (F.selu, tf.selu), (F.celu, tf.celu), (F.gelu, tf.gelu), (F.silu, tf.silu), (F.mish, tf.mish),
             (F.sigmoid, torch.sigmoid), (F.softplus, tf.softplus), (F.softsign, tf.softsign),
             (F.logsigmoid, tf.logsigmoid), (F.hardtanh, tf.hardtanh), (F.hardswish, tf.hardswish),
             (F.hardsigmoid, tf.hardsigmoid)]
    for ours, theirs in pairs:
        xc, xt = cv.Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        yc, yt = ours(xc), theirs(xt)
        yc.sum().backward()
        yt.sum().backward()
        np.testing.assert_allclose(yc.numpy(), yt.detach().numpy(), rtol=1e-6, atol=1e-6, err_msg=ours.__name__)
        np.testing.assert_allclose(xc.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=ours.__name__)


def test_activation_modules():
    x = cv.Tensor(rng.standard_normal((2, 5)))
    cases = [(nn.ReLU(), F.relu), (nn.ReLU6(), F.relu6), (nn.LeakyReLU(0.3), lambda t: F.leaky_relu(t, 0.3)),
             (nn.ELU(0.5), lambda t: F.elu(t, 0.5)), (nn.SELU(), F.selu), (nn.CELU(2.0), lambda t: F.celu(t, 2.0)),
             (nn.GELU("tanh"), lambda t: F.gelu(t, "tanh")), (nn.SiLU(), F.silu), (nn.Mish(), F.mish),
             (nn.Sigmoid(), F.sigmoid), (nn.Tanh(), F.tanh), (nn.Softplus(2.0), lambda t: F.softplus(t, 2.0)),
             (nn.Softsign(), F.softsign), (nn.LogSigmoid(), F.logsigmoid), (nn.Hardtanh(-2, 2),
                                                                             lambda t: F.hardtanh(t, -2, 2)),
             (nn.Hardswish(), F.hardswish), (nn.Hardsigmoid(), F.hardsigmoid),
             (nn.Softmax(dim=1), lambda t: F.softmax(t, 1)), (nn.LogSoftmax(dim=1), lambda t: F.log_softmax(t, 1)),
             (nn.Softmin(dim=0), lambda t: F.softmin(t, 0)), (nn.PReLU(), lambda t: F.prelu(t, cv.Tensor([0.25])))]
    for module, fn in cases:
        np.testing.assert_array_equal(module(x).numpy(), fn(x).numpy())
    assert repr(nn.LeakyReLU(0.3)) == "LeakyReLU(negative_slope=0.3)" and repr(nn.Softmax(dim=1)) == "Softmax(dim=1)"
    with pytest.raises(ValueError, match="dim"):
        F.softmax(x)
    with pytest.raises(TypeError, match="floating"):
        F.relu(cv.Tensor([1, 2]))
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU("fast")


# --- linear, reshapes --------------------------------------------------------------------------------


def test_linear_reference_gradient_and_edge_cases():
    lin = nn.Linear(3, 4, dtype=cv.float64)
    w, b = lin.weight.numpy(), lin.bias.numpy()
    x = rng.standard_normal((5, 3))
    np.testing.assert_allclose(lin(cv.Tensor(x)).numpy(), x @ w.T + b, rtol=1e-12)
    np.testing.assert_allclose(lin(cv.Tensor(x[0])).numpy(), x[0] @ w.T + b, rtol=1e-12)  # 1-d input
    assert lin(cv.Tensor(x[:1])).shape == (1, 4) and lin(cv.zeros(0, 3, dtype=cv.float64)).shape == (0, 4)
    xt = leaf(x)
    fd_check(lambda: (lin(xt) ** 2).sum(), [xt, lin.weight, lin.bias])
    with pytest.raises(ValueError, match=r"Linear\(in_features=3, out_features=4, bias=True\): expected an input "
                                         r"of shape \(\*, 3\), got \(5, 4\)"):
        lin(cv.ones(5, 4, dtype=cv.float64))
    assert nn.Linear(3, 4, bias=False).bias is None and list(nn.Linear(3, 4, bias=False).state_dict()) == ["weight"]


def test_empty_batches_keep_their_shapes():
    cases = [(nn.Conv2d(3, 4, 3), (0, 3, 5, 5), (0, 4, 3, 3)), (nn.MaxPool2d(2), (0, 3, 4, 4), (0, 3, 2, 2)),
             (nn.LayerNorm(3), (0, 3), (0, 3)), (nn.BatchNorm1d(3).eval(), (0, 3), (0, 3))]
    for layer, shape, expected in cases:
        assert layer(cv.zeros(*shape)).numpy().shape == expected, type(layer).__name__
    assert nn.Embedding(3, 2)(cv.zeros(0, dtype=cv.int64)).numpy().shape == (0, 2)


def test_flatten_unflatten_identity():
    x = cv.arange(24.0).reshape(2, 3, 4)
    assert nn.Flatten()(x).shape == (2, 12) and nn.Flatten(0, 1)(x).shape == (6, 4)
    assert nn.Unflatten(1, (3, 4))(nn.Flatten()(x)).tolist() == x.tolist()
    assert nn.Unflatten(-1, (2, -1))(x).shape == (2, 3, 2, 2)
    with pytest.raises(ValueError, match="Unflatten"):
        nn.Unflatten(1, (5, 2))(x)
    assert nn.Identity(3, key=1)(x) is x


# --- convolutions ------------------------------------------------------------------------------------


CONVS = [  # (layer, input shape, numpy reference kwargs)
    (lambda: nn.Conv1d(2, 4, 3, stride=2, padding=1), (2, 2, 7), {"stride": 2, "padding": 1}),
    (lambda: nn.Conv2d(2, 4, 3, padding=1, groups=2), (2, 2, 5, 5), {"padding": 1, "groups": 2}),
    (lambda: nn.Conv2d(2, 3, (2, 3), dilation=2, bias=False), (1, 2, 5, 5), {"dilation": 2}),
    (lambda: nn.Conv3d(2, 2, 2), (1, 2, 3, 3, 3), {}),
]


@pytest.mark.parametrize("make, shape, kw", CONVS)
def test_conv_layers_match_numpy(make, shape, kw):
    layer = make()
    x = rng.standard_normal(shape).astype(np.float32)
    b = None if layer.bias is None else layer.bias.numpy().astype(np.float64)
    ref = conv_ref(x.astype(np.float64), layer.weight.numpy().astype(np.float64), b, **kw)
    np.testing.assert_allclose(layer(cv.Tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer(cv.Tensor(x[0])).numpy(), ref[0], rtol=1e-5, atol=1e-5)  # unbatched


def test_conv_padding_modes_and_same():
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    for mode, np_mode in (("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")):
        layer = nn.Conv2d(2, 3, 3, padding=1, padding_mode=mode)
        ref = conv_ref(np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], mode=np_mode).astype(np.float64),
                       layer.weight.numpy().astype(np.float64), layer.bias.numpy().astype(np.float64))
        np.testing.assert_allclose(layer(cv.Tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-5)
    assert nn.Conv2d(2, 3, 4, padding="same")(cv.Tensor(x)).shape == (1, 3, 5, 5)
    assert "padding_mode='reflect'" in repr(nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"))


@pytest.mark.parametrize("make, shape, kw", [
    (lambda: nn.ConvTranspose1d(2, 3, 3, stride=2, padding=1, output_padding=1), (2, 2, 4),
     {"stride": 2, "padding": 1, "output_padding": 1}),
    (lambda: nn.ConvTranspose2d(2, 4, 3, stride=2, groups=2), (1, 2, 3, 3), {"stride": 2, "groups": 2}),
])
def test_conv_transpose_layers_match_numpy(make, shape, kw):
    layer = make()
    x = rng.standard_normal(shape).astype(np.float32)
    ref = conv_transpose_ref(x.astype(np.float64), layer.weight.numpy().astype(np.float64),
                             layer.bias.numpy().astype(np.float64), **kw)
    np.testing.assert_allclose(layer(cv.Tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-5)


def test_conv_transpose_output_size_and_weight_shape():
    layer = nn.ConvTranspose2d(2, 4, 3, stride=2, padding=1)
    assert layer.weight.shape == (2, 4, 3, 3)
    x = cv.ones(1, 2, 3, 3)
    assert layer(x).shape == (1, 4, 5, 5) and layer(x, output_size=(6, 6)).shape == (1, 4, 6, 6)
    with pytest.raises(ValueError, match="not reachable"):
        layer(x, output_size=(8, 8))


def test_conv_gradients_float64():
    conv = nn.Conv2d(2, 3, 3, stride=2, padding=1, dtype=cv.float64)
    convt = nn.ConvTranspose2d(3, 2, 2, stride=2, dtype=cv.float64)
    x = leaf(rng.standard_normal((2, 2, 5, 5)))
    w = cv.Tensor(rng.standard_normal((2, 2, 6, 6)))
    fd_check(lambda: (convt(conv(x)) * w).sum(), [x, conv.weight, conv.bias, convt.weight, convt.bias])


def test_conv_errors_name_the_layer():
    conv = nn.Conv2d(3, 4, 3)
    with pytest.raises(ValueError, match=r"Conv2d\(3, 4, kernel_size=\(3, 3\).*expected an input of shape "
                                         r"\(N, 3, H, W\) or \(3, H, W\), got \(2, 3, 5\)"):
        conv(cv.ones(2, 3, 5))
    with pytest.raises(ValueError, match=r"\(N, 3, H, W\) or \(3, H, W\), got \(1, 2, 5, 5\)"):
        conv(cv.ones(1, 2, 5, 5))
    with pytest.raises(ValueError, match="groups"):
        nn.Conv2d(3, 4, 3, groups=2)


def test_conv_matches_torch():
    torch = pytest.importorskip("torch")
    ours = nn.Conv2d(2, 4, 3, stride=2, padding=1, groups=2, padding_mode="circular")
    theirs = to_torch(ours, torch.nn.Conv2d(2, 4, 3, stride=2, padding=1, groups=2, padding_mode="circular"))
    x = rng.standard_normal((2, 2, 5, 5)).astype(np.float32)
    xc, xt = cv.Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ours(xc).square().sum().backward()
    theirs(xt).square().sum().backward()
    np.testing.assert_allclose(xc.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-4, atol=1e-5)


# --- pooling and resampling --------------------------------------------------------------------------


def test_pooling_layers_match_numpy():
    x = rng.standard_normal((2, 3, 6, 6))
    x1 = x[:, :, 0]
    t, t1 = cv.Tensor(x), cv.Tensor(x1)
    np.testing.assert_allclose(nn.MaxPool2d(3, 2, 1)(t).numpy(), pool_ref(x, (3, 3), (2, 2), (1, 1), "max"))
    np.testing.assert_allclose(nn.MaxPool1d(2)(t1).numpy(), pool_ref(x1, (2,), (2,), (0,), "max"))
    np.testing.assert_allclose(nn.AvgPool2d(2)(t).numpy(), pool_ref(x, (2, 2), (2, 2), (0, 0), "avg"), rtol=1e-12)
    np.testing.assert_allclose(nn.AvgPool1d(3, 1)(t1).numpy(), pool_ref(x1, (3,), (1,), (0,), "avg"), rtol=1e-12)
    np.testing.assert_allclose(nn.AdaptiveAvgPool2d((4, 1))(t).numpy(), adaptive_avg_ref(x, (4, 1)), rtol=1e-12)
    np.testing.assert_allclose(nn.AdaptiveAvgPool1d(4)(t1).numpy(), adaptive_avg_ref(x1, (4,)), rtol=1e-12)
    assert nn.AdaptiveMaxPool2d(1)(t).numpy().ravel().tolist() == x.max((2, 3)).ravel().tolist()
    values, where_ = nn.AdaptiveMaxPool2d((4, 3), return_indices=True)(t)  # (the flat index in each plane)
    np.testing.assert_array_equal(np.take_along_axis(x.reshape(2, 3, 36), where_.numpy().reshape(2, 3, 12), 2),
                                  values.numpy().reshape(2, 3, 12))
    assert nn.MaxPool2d(2)(t[0]).shape == (3, 3, 3)  # unbatched
    with pytest.raises(ValueError, match=r"MaxPool2d\(kernel_size=2.*expected an input of shape \(N, C, H, W\)"):
        nn.MaxPool2d(2)(t1[0])


def test_pooling_gradients_float64():
    x = leaf(rng.standard_normal((1, 2, 6, 6)))
    w = cv.Tensor(rng.standard_normal((1, 2, 3, 3)))
    fd_check(lambda: (nn.MaxPool2d(3, 2, 1)(x) * w).sum() + nn.AdaptiveAvgPool2d(4)(x).square().sum(), [x])


def test_upsample_nearest_and_bilinear():
    x = rng.standard_normal((1, 2, 3, 4))
    t = cv.Tensor(x)
    np.testing.assert_array_equal(nn.Upsample(scale_factor=2)(t).numpy(), x.repeat(2, 2).repeat(2, 3))
    mh, mw = bilinear_matrix(3, 5), bilinear_matrix(4, 7)
    ref = np.einsum("nchw,hH,wW->ncHW", x, mh, mw)
    np.testing.assert_allclose(nn.Upsample(size=(5, 7), mode="bilinear")(t).numpy(), ref, rtol=1e-12)
    assert F.interpolate(t, scale_factor=1.5, recompute_scale_factor=True).shape == (1, 2, 4, 6)
    xg = leaf(x)
    fd_check(lambda: nn.Upsample(scale_factor=2, mode="bilinear")(xg).square().sum(), [xg])


def test_pooling_matches_torch():
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    pairs = [(nn.MaxPool2d(3, 2, 1, ceil_mode=True), torch.nn.MaxPool2d(3, 2, 1, ceil_mode=True)),
             (nn.AvgPool2d(3, 2, 1, count_include_pad=False), torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False)),
             (nn.AdaptiveAvgPool2d(3), torch.nn.AdaptiveAvgPool2d(3)),
             (nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
              torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True))]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours(cv.Tensor(x)).numpy(), theirs(torch.tensor(x)).numpy(), rtol=1e-5,
                                   atol=1e-6)


# --- normalization -----------------------------------------------------------------------------------


def test_batchnorm_training_eval_and_running_stats():
    x = rng.standard_normal((4, 3, 2, 2)) * 2 + 1
    bn = nn.BatchNorm2d(3, momentum=0.25, dtype=cv.float64)
    with cv.no_grad():
        bn.weight.assign(cv.Tensor([1.0, 2.0, 3.0]))
        bn.bias.assign(cv.Tensor([0.5, 0.0, -0.5]))
    g, b = np.array([1.0, 2.0, 3.0]).reshape(1, 3, 1, 1), np.array([0.5, 0.0, -0.5]).reshape(1, 3, 1, 1)
    np.testing.assert_allclose(bn(cv.Tensor(x)).numpy(), norm_ref(x, (0, 2, 3)) * g + b, rtol=1e-10)
    mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3), ddof=1)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.25 * mean, rtol=1e-12)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.75 + 0.25 * var, rtol=1e-12)
    assert bn.num_batches_tracked.item() == 1 and bn.num_batches_tracked.dtype == cv.int64
    bn.eval()
    ref = (x - bn.running_mean.numpy().reshape(1, 3, 1, 1)) / np.sqrt(bn.running_var.numpy().reshape(1, 3, 1, 1)
                                                                      + 1e-5) * g + b
    np.testing.assert_allclose(bn(cv.Tensor(x)).numpy(), ref, rtol=1e-10)
    assert bn.num_batches_tracked.item() == 1  # eval mode leaves the statistics alone


def test_batchnorm_options_and_errors():
    x = rng.standard_normal((5, 3))
    cumulative = nn.BatchNorm1d(3, momentum=None, affine=False, dtype=cv.float64)
    cumulative(cv.Tensor(x))
    cumulative(cv.Tensor(2 * x))
    np.testing.assert_allclose(cumulative.running_mean.numpy(), 1.5 * x.mean(0), rtol=1e-12)  # equal weights
    assert list(cumulative.state_dict()) == ["running_mean", "running_var", "num_batches_tracked"]
    stateless = nn.BatchNorm1d(3, track_running_stats=False).eval()
    np.testing.assert_allclose(stateless(cv.Tensor(x)).numpy(), norm_ref(x, 0), rtol=1e-5, atol=1e-6)
    assert list(stateless.state_dict()) == ["weight", "bias"]
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(cv.ones(1, 3))
    assert nn.BatchNorm1d(3).eval()(cv.ones(1, 3)).shape == (1, 3)  # batch size 1 is fine in eval mode
    with pytest.raises(ValueError, match=r"BatchNorm1d\(3, .*expected an input of shape \(N, 3\) or \(N, 3, L\), "
                                         r"got \(2, 4\)"):
        nn.BatchNorm1d(3)(cv.ones(2, 4))
    with pytest.raises(ValueError, match=r"\(N, 3, H, W\)"):
        nn.BatchNorm2d(3)(cv.ones(2, 3))


def test_batchnorm_gradient_and_detached_statistics():
    bn = nn.BatchNorm1d(3, dtype=cv.float64)
    x = leaf(rng.standard_normal((4, 3, 2)))
    w = cv.Tensor(rng.standard_normal((4, 3, 2)))
    fd_check(lambda: (bn(x) * w).sum(), [x, bn.weight, bn.bias])
    assert not bn.running_mean.requires_grad and bn.running_mean.node.op.name == "BUFFER"


def test_layer_group_instance_rms_norms_match_numpy():
    x = rng.standard_normal((2, 4, 3, 3))
    t = cv.Tensor(x)
    ln = nn.LayerNorm((3, 3), dtype=cv.float64)
    np.testing.assert_allclose(ln(t).numpy(), norm_ref(x, (2, 3)), rtol=1e-10)
    gn = nn.GroupNorm(2, 4, dtype=cv.float64)
    ref = norm_ref(x.reshape(2, 2, -1), 2).reshape(x.shape)
    np.testing.assert_allclose(gn(t).numpy(), ref, rtol=1e-10)
    inorm = nn.InstanceNorm2d(4)
    np.testing.assert_allclose(inorm(t).numpy(), norm_ref(x, (2, 3)), rtol=1e-10)
    np.testing.assert_allclose(inorm(t[0]).numpy(), norm_ref(x, (2, 3))[0], rtol=1e-10)  # unbatched
    rms = nn.RMSNorm(3, dtype=cv.float64)
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(rms(t).numpy(), x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps), rtol=1e-10)
    tracked = nn.InstanceNorm1d(4, track_running_stats=True, dtype=cv.float64)
    tracked(cv.Tensor(x[:, :, 0]))
    np.testing.assert_allclose(tracked.running_mean.numpy(), 0.1 * x[:, :, 0].mean(2).mean(0), rtol=1e-12)
    assert list(nn.LayerNorm(3, bias=False).state_dict()) == ["weight"]
    assert list(nn.InstanceNorm2d(4).state_dict()) == []
    with pytest.raises(ValueError, match=r"LayerNorm\(\(3, 3\).*\(\*, 3, 3\), got \(2, 4\)"):
        ln(cv.ones(2, 4))
    with pytest.raises(ValueError, match="num_groups=3 must divide num_channels=4"):
        nn.GroupNorm(3, 4)


def test_norm_gradients_float64():
    x = leaf(rng.standard_normal((2, 4, 3)))
    w = cv.Tensor(rng.standard_normal((2, 4, 3)))
    ln, gn, rms = nn.LayerNorm(3, dtype=cv.float64), nn.GroupNorm(2, 4, dtype=cv.float64), nn.RMSNorm(3,
                                                                                                     dtype=cv.float64)
    fd_check(lambda: ((ln(x) + gn(x) + rms(x)) * w).sum(), [x, ln.weight, ln.bias, gn.weight, rms.weight])


def test_norms_match_torch():
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    pairs = [(nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4)), (nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4)),
             (nn.LayerNorm(5), torch.nn.LayerNorm(5)), (nn.RMSNorm(5), torch.nn.RMSNorm(5)),
             (nn.InstanceNorm1d(4, affine=True, track_running_stats=True),
              torch.nn.InstanceNorm1d(4, affine=True, track_running_stats=True))]
    for ours, theirs in pairs:
        to_torch(ours, theirs)
        xc, xt = cv.Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        yc, yt = ours(xc), theirs(xt)
        np.testing.assert_allclose(yc.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
        (yc ** 3).sum().backward()
        (yt ** 3).sum().backward()
        np.testing.assert_allclose(xc.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
        for (name, b), (_, tb) in zip(ours.named_buffers(), theirs.named_buffers()):
            np.testing.assert_allclose(b.numpy(), tb.numpy(), rtol=1e-5, atol=1e-7, err_msg=name)


# --- embedding, dropout, functional extras -----------------------------------------------------------


def test_embedding():
    emb = nn.Embedding(6, 3, padding_idx=-1)
    assert emb.padding_idx == 5 and emb.weight.numpy()[5].tolist() == [0.0] * 3
    idx = np.array([[0, 5, 2], [2, 2, 1]])
    np.testing.assert_array_equal(emb(cv.Tensor(idx)).numpy(), emb.weight.numpy()[idx])
    (emb(cv.Tensor(idx)) * 2).sum().backward()
    grad = emb.weight.grad.numpy()
    assert grad[5].tolist() == [0.0] * 3 and grad[2].tolist() == [6.0] * 3 and grad[3].tolist() == [0.0] * 3
    with pytest.raises(IndexError):
        emb(cv.Tensor([6]))
    with pytest.raises(TypeError, match="integer"):
        emb(cv.Tensor([1.0]))
    frozen = nn.Embedding.from_pretrained(cv.Tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert not frozen.weight.requires_grad and frozen(cv.Tensor([1, 0])).tolist() == [[3.0, 4.0], [1.0, 2.0]]
    big = nn.Embedding(100, 40)
    assert abs(big.weight.numpy().std() - 1.0) < 0.05  # torch's N(0, 1) initialization


def renorm_ref(w, idx, max_norm, p):
    """torch.embedding_renorm_: each looked-up row whose p-norm exceeds max_norm, scaled to it."""
    w = w.copy()
    for i in np.unique(idx):
        norm = np.abs(w[i]).max() if math.isinf(p) else (np.abs(w[i]) ** p).sum() ** (1 / p)
        if norm > max_norm:
            w[i] *= max_norm / (norm + 1e-7)
    return w


@pytest.mark.parametrize("p", [2.0, 1.0, math.inf])
def test_embedding_max_norm_renormalizes_looked_up_rows_in_place(p):
    w0 = rng.standard_normal((6, 3)) * 2
    idx = np.array([[0, 2, 2], [5, 1, 0]])  # row 3 and 4 are not looked up: they keep their norm
    emb = nn.Embedding.from_pretrained(cv.Tensor(w0), freeze=False, padding_idx=1, max_norm=1.5, norm_type=p)
    weights = cv.Tensor(rng.standard_normal((2, 3, 3)))
    out = emb(cv.Tensor(idx))
    want_w = renorm_ref(w0, idx, 1.5, p)
    np.testing.assert_allclose(emb.weight.numpy(), want_w, rtol=1e-12)
    np.testing.assert_array_equal(emb.weight.numpy()[[3, 4]], w0[[3, 4]])
    np.testing.assert_allclose(out.numpy(), want_w[idx], rtol=1e-12)
    (out * weights).sum().backward()
    want_g = np.zeros_like(w0)
    np.add.at(want_g, idx, weights.numpy())  # the lookup's gradient: the renorm is outside it
    want_g[1] = 0.0  # padding_idx
    np.testing.assert_allclose(emb.weight.grad.numpy(), want_g, rtol=1e-12)
    assert emb.weight.is_leaf and emb.weight.requires_grad
    again = emb(cv.Tensor(idx))  # already within max_norm: unchanged
    np.testing.assert_allclose(again.numpy(), out.numpy(), rtol=1e-12)
    torch = pytest.importorskip("torch")
    temb = torch.nn.Embedding.from_pretrained(torch.tensor(w0), freeze=False, padding_idx=1, max_norm=1.5,
                                              norm_type=p)
    (temb(torch.tensor(idx)) * torch.tensor(weights.numpy())).sum().backward()
    np.testing.assert_allclose(emb.weight.numpy(), temb.weight.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(emb.weight.grad.numpy(), temb.weight.grad.numpy(), rtol=1e-12)


def test_embedding_max_norm_functional_jit_and_validation():
    w = cv.Tensor([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]])
    out = F.embedding(cv.Tensor([0, 0]), w, max_norm=1.0)  # a plain tensor is rebound to the new table
    np.testing.assert_allclose(out.numpy(), [[0.6, 0.8]] * 2, rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), [[0.6, 0.8], [0.3, 0.4], [6.0, 8.0]], rtol=1e-6)
    emb = nn.Embedding.from_pretrained(cv.Tensor([[3.0, 4.0], [6.0, 8.0]]), freeze=False, max_norm=2.0)
    step = cv.jit(lambda i: emb(i).sum())
    assert step(cv.Tensor([0])).item() == pytest.approx(2.8, rel=1e-5)  # (3, 4) -> (1.2, 1.6)
    np.testing.assert_allclose(emb.weight.numpy(), [[1.2, 1.6], [6.0, 8.0]], rtol=1e-5)  # written back
    assert step(cv.Tensor([1])).item() == pytest.approx(2.8, rel=1e-5) and step.traces == 1
    np.testing.assert_allclose(emb.weight.numpy(), [[1.2, 1.6], [1.2, 1.6]], rtol=1e-5)
    assert repr(nn.Embedding(4, 2, max_norm=1.0, norm_type=1.0)) == "Embedding(4, 2, max_norm=1.0, norm_type=1.0)"
    with pytest.raises(ValueError, match="max_norm"):
        nn.Embedding(4, 2, max_norm=-1.0)
    with pytest.raises(ValueError, match="norm_type"):
        F.embedding(cv.Tensor([0]), w, max_norm=1.0, norm_type=0.0)
    with pytest.raises(ValueError, match="scale_grad_by_freq"):
        nn.Embedding(4, 2, scale_grad_by_freq=True)
    with pytest.raises(IndexError):
        F.embedding(cv.Tensor([3]), w, max_norm=1.0)


def test_dropout():
    x = cv.ones(2000)
    cv.manual_seed(7)
    y = nn.Dropout(0.25)(x).numpy()
    assert set(np.unique(y).tolist()) == {0.0, float(np.float32(4 / 3))}
    assert abs((y == 0).mean() - 0.25) < 0.03
    cv.manual_seed(7)
    np.testing.assert_array_equal(F.dropout(x, 0.25).numpy(), y)  # reproducible from the seed
    assert nn.Dropout(0.25).eval()(x) is x and F.dropout(x, 0.0) is x
    assert not F.dropout(x, 1.0).numpy().any()
    xg = cv.ones(8, requires_grad=True)
    cv.manual_seed(2)
    out = F.dropout(xg, 0.5)
    out.sum().backward()
    np.testing.assert_array_equal(xg.grad.numpy(), out.detach().numpy())  # the same mask scales the gradient
    with pytest.raises(ValueError, match="p must be"):
        nn.Dropout(1.5)


def test_pad_one_hot_normalize():
    x = rng.standard_normal((2, 3, 4))
    t = cv.Tensor(x)
    for mode, np_mode in (("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")):
        np.testing.assert_array_equal(F.pad(t, (2, 1, 1, 0), mode=mode).numpy(),
                                      np.pad(x, [(0, 0), (1, 0), (2, 1)], mode=np_mode))
    np.testing.assert_array_equal(F.pad(t, (1, 1), value=7.0).numpy(),
                                  np.pad(x, [(0, 0), (0, 0), (1, 1)], constant_values=7.0))
    assert F.pad(t, (-1, -1)).shape == (2, 3, 2)
    with pytest.raises(ValueError, match="reflect"):
        F.pad(t, (4, 0), mode="reflect")
    assert F.one_hot(cv.Tensor([[0, 2], [1, 1]])).tolist() == [[[1, 0, 0], [0, 0, 1]], [[0, 1, 0], [0, 1, 0]]]
    assert F.one_hot(cv.Tensor([1]), 4).dtype == cv.int64
    with pytest.raises(ValueError, match="class values"):
        F.one_hot(cv.Tensor([4]), 3)
    np.testing.assert_allclose(F.normalize(t, dim=2).numpy(), x / np.linalg.norm(x, axis=2, keepdims=True))


# --- initialization ----------------------------------------------------------------------------------


def test_init_functions():
    assert nn.init.calculate_gain("tanh") == 5 / 3 and nn.init.calculate_gain("selu") == 0.75
    assert nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    with pytest.raises(ValueError, match="unsupported"):
        nn.init.calculate_gain("swish")
    w = nn.Parameter(cv.empty(200, 50))
    assert nn.init.kaiming_uniform_(w, nonlinearity="relu") is w and w.requires_grad
    bound = math.sqrt(2) * math.sqrt(3 / 50)
    assert np.abs(w.numpy()).max() <= bound and w.numpy().std() == pytest.approx(bound / math.sqrt(3), rel=0.05)
    nn.init.kaiming_normal_(w, mode="fan_out")
    assert w.numpy().std() == pytest.approx(math.sqrt(2 / 200), rel=0.05)
    nn.init.xavier_uniform_(w, gain=2.0)
    assert np.abs(w.numpy()).max() <= 2 * math.sqrt(6 / 250)
    nn.init.xavier_normal_(w)
    assert w.numpy().std() == pytest.approx(math.sqrt(2 / 250), rel=0.05)
    nn.init.trunc_normal_(w, mean=1.0, std=2.0, a=0.0, b=3.0)
    assert w.numpy().min() >= 0.0 and w.numpy().max() <= 3.0
    nn.init.normal_(w, 3.0, 0.5)
    assert w.numpy().mean() == pytest.approx(3.0, abs=0.02)
    assert nn.init.constant_(cv.empty(2), 1.5).tolist() == [1.5, 1.5] and nn.init.ones_(cv.empty(1)).tolist() == [1.0]
    for shape in ((3, 5), (5, 3), (4, 2, 2)):
        q = nn.init.orthogonal_(cv.empty(*shape), gain=2.0).numpy().reshape(shape[0], -1)
        small = q @ q.T if shape[0] <= q.shape[1] else q.T @ q
        np.testing.assert_allclose(small, 4 * np.eye(len(small)), atol=1e-5)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        nn.init.xavier_uniform_(cv.empty(3))
    with pytest.raises(ValueError, match="fan_in"):
        nn.init.kaiming_uniform_(w, mode="fan")
    with pytest.raises(TypeError, match="floating"):
        nn.init.uniform_(cv.zeros(2, dtype=cv.int32))


def test_default_initializations_follow_torch():
    lin = nn.Linear(50, 40)
    assert np.abs(lin.weight.numpy()).max() <= 1 / math.sqrt(50) and np.abs(lin.bias.numpy()).max() <= 1 / math.sqrt(50)
    assert lin.weight.numpy().std() == pytest.approx(1 / math.sqrt(3 * 50), rel=0.1)
    conv = nn.Conv2d(4, 8, 3)
    assert np.abs(conv.bias.numpy()).max() <= 1 / math.sqrt(36)
    bn = nn.BatchNorm2d(3)
    assert bn.weight.tolist() == [1.0] * 3 and bn.running_var.tolist() == [1.0] * 3
    lstm = nn.LSTM(3, 4)
    assert all(np.abs(p.numpy()).max() <= 0.5 for p in lstm.parameters())


# --- loss modules ------------------------------------------------------------------------------------


def test_loss_modules_pass_their_options_to_the_functions():
    from corvid.nn import losses

    x, y = cv.Tensor(rng.standard_normal((4, 3))), cv.Tensor(rng.standard_normal((4, 3)))
    logits, labels = cv.Tensor(rng.standard_normal((4, 3))), cv.Tensor([0, 2, 1, 2])
    probs, bits = F.sigmoid(x), cv.Tensor((rng.random((4, 3)) > 0.5).astype(np.float32))
    a, b, sign = cv.Tensor(rng.standard_normal(4)), cv.Tensor(rng.standard_normal(4)), cv.Tensor([1, -1, 1, -1])
    weight = cv.Tensor([0.2, 1.0, 3.0])
    log_probs = F.log_softmax(cv.Tensor(rng.standard_normal((5, 2, 4))), dim=-1)
    ctc_args = (log_probs, cv.Tensor([[1, 2], [3, 3]]), cv.Tensor([5, 4]), cv.Tensor([2, 2]))
    cases = [
        (nn.MSELoss(reduction="sum"), (x, y), losses.mse_loss, {"reduction": "sum"}),
        (nn.L1Loss(reduction="none"), (x, y), losses.l1_loss, {"reduction": "none"}),
        (nn.CrossEntropyLoss(weight, ignore_index=1, label_smoothing=0.1), (logits, labels), losses.cross_entropy,
         {"weight": weight, "ignore_index": 1, "label_smoothing": 0.1}),
        (nn.NLLLoss(weight, reduction="sum"), (F.log_softmax(logits, 1), labels), losses.nll_loss,
         {"weight": weight, "reduction": "sum"}),
        (nn.BCELoss(weight), (probs, bits), losses.binary_cross_entropy, {"weight": weight}),
        (nn.BCEWithLogitsLoss(pos_weight=weight), (x, bits), losses.binary_cross_entropy_with_logits,
         {"pos_weight": weight}),
        (nn.HuberLoss(delta=0.5), (x, y), losses.huber_loss, {"delta": 0.5}),
        (nn.SmoothL1Loss(beta=0.5), (x, y), losses.smooth_l1_loss, {"beta": 0.5}),
        (nn.KLDivLoss(reduction="batchmean", log_target=True), (F.log_softmax(x, 1), F.log_softmax(y, 1)),
         losses.kl_div, {"reduction": "batchmean", "log_target": True}),
        (nn.CTCLoss(blank=0, reduction="sum"), ctc_args, losses.ctc_loss, {"blank": 0, "reduction": "sum"}),
        (nn.TripletMarginLoss(margin=0.5, p=1.0), (x, y, x * 2), losses.triplet_margin_loss, {"margin": 0.5, "p": 1.0}),
        (nn.CosineEmbeddingLoss(0.2), (x, y, sign), losses.cosine_embedding_loss, {"margin": 0.2}),
        (nn.MarginRankingLoss(0.3), (a, b, sign), losses.margin_ranking_loss, {"margin": 0.3}),
    ]
    for module, inputs, fn, kwargs in cases:
        np.testing.assert_allclose(module(*inputs).numpy(), fn(*inputs, **kwargs).numpy(), rtol=1e-6,
                                   err_msg=type(module).__name__)
    ce = nn.CrossEntropyLoss(weight)
    assert list(ce.state_dict()) == ["weight"] and repr(ce).startswith("CrossEntropyLoss(ignore_index=-100")
    assert list(nn.BCEWithLogitsLoss().state_dict()) == []

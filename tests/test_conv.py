"""conv, conv_transpose and pooling against float64 numpy loop references (and torch, when it is
installed, as an extra oracle), plus gradients (the conv's hand-written backward against finite
differences and against the automatic gradient of its implementation; jvp, grad of grad, vmap),
errors and the shape of the conv kernels."""

import itertools
import warnings

import numpy as np
import pytest

import corvid as cv
from corvid.ops import conv as conv_module
from corvid.ops.conv import sliding_windows

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # torch is only an extra oracle
    torch = None

rng = np.random.default_rng(0)


def _t(v, nd):
    return (v,) * nd if isinstance(v, int) else tuple(v)


# --- numpy references: plain loops over output positions --------------------------------------------


def conv_ref(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    nd = x.ndim - 2
    st, dl, ks = _t(stride, nd), _t(dilation, nd), w.shape[2:]
    if padding == "valid":
        pads = ((0, 0),) * nd
    elif padding == "same":
        pads = tuple((d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(ks, dl))
    else:
        pads = tuple((p, p) for p in _t(padding, nd))
    xp = np.pad(x, ((0, 0), (0, 0)) + pads)
    n, c_in, c_out = x.shape[0], x.shape[1], w.shape[0]
    cg, og = c_in // groups, c_out // groups
    out_sz = [(xp.shape[2 + j] - dl[j] * (ks[j] - 1) - 1) // st[j] + 1 for j in range(nd)]
    out = np.zeros((n, c_out, *out_sz))
    for o in itertools.product(*map(range, out_sz)):
        for co in range(c_out):
            g = co // og
            for kk in itertools.product(*map(range, ks)):
                pos = tuple(o[j] * st[j] + kk[j] * dl[j] for j in range(nd))
                patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + pos]
                out[(slice(None), co) + o] += patch @ w[(co, slice(None)) + kk]
    return out if b is None else out + b.reshape((c_out,) + (1,) * nd)


def conv_transpose_ref(x, w, b=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    nd = x.ndim - 2
    st, pd, op, dl = _t(stride, nd), _t(padding, nd), _t(output_padding, nd), _t(dilation, nd)
    n, c_in, og, ks = x.shape[0], x.shape[1], w.shape[1], w.shape[2:]
    cg = c_in // groups
    full = [(x.shape[2 + j] - 1) * st[j] + dl[j] * (ks[j] - 1) + 1 + op[j] for j in range(nd)]
    out = np.zeros((n, og * groups, *full))
    for i in itertools.product(*map(range, x.shape[2:])):      # scatter every input element
        for kk in itertools.product(*map(range, ks)):
            o = tuple(i[j] * st[j] + kk[j] * dl[j] for j in range(nd))
            for g in range(groups):
                xg = x[(slice(None), slice(g * cg, (g + 1) * cg)) + i]
                val = xg @ w[(slice(g * cg, (g + 1) * cg), slice(None)) + kk]
                out[(slice(None), slice(g * og, (g + 1) * og)) + o] += val
    out = out[(slice(None), slice(None)) + tuple(slice(pd[j], full[j] - pd[j]) for j in range(nd))]
    return out if b is None else out + b.reshape((-1,) + (1,) * nd)


def _pool_sizes(i, k, s, p, d, ceil_mode):
    span = d * (k - 1) + 1
    o = (-(-(i + 2 * p - span) // s) if ceil_mode else (i + 2 * p - span) // s) + 1
    if ceil_mode and (o - 1) * s >= i + p:
        o -= 1
    return o


def pool_ref(x, kind, k, s=None, p=0, d=1, ceil_mode=False, count_include_pad=True):
    nd = len(k)
    s = k if s is None else _t(s, nd)
    p, d = _t(p, nd), _t(d, nd)
    spatial = x.shape[-nd:]
    outs = [_pool_sizes(spatial[j], k[j], s[j], p[j], d[j], ceil_mode) for j in range(nd)]
    out = np.zeros(x.shape[:-nd] + tuple(outs))
    for o in itertools.product(*map(range, outs)):
        vals, count = [], 1
        for j in range(nd):
            start = o[j] * s[j] - p[j]
            count *= min(start + d[j] * (k[j] - 1) + 1, spatial[j] + p[j]) - start
        for kk in itertools.product(*map(range, k)):
            pos = tuple(o[j] * s[j] - p[j] + kk[j] * d[j] for j in range(nd))
            if all(0 <= q < t for q, t in zip(pos, spatial)):
                vals.append(x[(...,) + pos])
        vals = np.stack(vals, -1)
        if kind == "max":
            out[(...,) + o] = vals.max(-1)
        else:
            out[(...,) + o] = vals.sum(-1) / (count if count_include_pad else vals.shape[-1])
    return out


def adaptive_ref(x, out_size, kind):
    nd = len(out_size)
    spatial = x.shape[-nd:]
    out = np.zeros(x.shape[:-nd] + tuple(out_size))
    for o in itertools.product(*map(range, out_size)):
        box = tuple(slice((o[j] * spatial[j]) // out_size[j], -(-((o[j] + 1) * spatial[j]) // out_size[j]))
                    for j in range(nd))
        region = x[(...,) + box].reshape(x.shape[:-nd] + (-1,))
        out[(...,) + o] = region.max(-1) if kind == "max" else region.mean(-1)
    return out


def numeric_grad(f, args, i, eps=1e-6):
    """Central differences of the scalar ``f(*args)`` with respect to ``args[i]`` (float64 numpy)."""
    g = np.zeros_like(args[i])
    for idx in np.ndindex(args[i].shape):
        hi = [a.copy() for a in args]
        lo = [a.copy() for a in args]
        hi[i][idx] += eps
        lo[i][idx] -= eps
        g[idx] = (f(*hi) - f(*lo)) / (2 * eps)
    return g


# --- conv ----------------------------------------------------------------------------------------------

CONV_CASES = [  # x shape, w shape, kwargs
    ((2, 3, 9), (4, 3, 3), {}),
    ((2, 4, 11), (6, 2, 3), dict(stride=2, padding=1, dilation=2, groups=2)),
    ((1, 2, 8), (2, 2, 4), dict(padding="same")),
    ((2, 3, 7, 8), (4, 3, 3, 2), dict(stride=(2, 1), padding=(1, 0))),
    ((1, 2, 6, 5), (3, 2, 2, 3), dict(padding="same", dilation=(2, 1))),
    ((2, 4, 7, 7), (4, 1, 3, 3), dict(groups=4, padding=1)),                 # depthwise
    ((1, 3, 8, 9), (2, 3, 3, 3), dict(stride=3, padding=2, dilation=2)),     # stride > window spacing
    ((1, 2, 5, 6), (2, 2, 5, 6), {}),                                        # kernel = whole input
    ((1, 2, 5, 6, 7), (2, 1, 2, 3, 2), dict(groups=2, padding="same", dilation=(1, 2, 1))),
    ((1, 1, 4, 5, 6), (2, 1, 3, 2, 3), dict(stride=(1, 2, 2), padding=(1, 0, 1))),
]


@pytest.mark.parametrize("xs,ws,kw", CONV_CASES, ids=[f"{len(c[0]) - 2}d-{i}" for i, c in enumerate(CONV_CASES)])
def test_conv_matches_reference(xs, ws, kw):
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    b = rng.standard_normal(ws[0])
    want = conv_ref(x, w, b, **kw)
    got = cv.conv(cv.Tensor(x), cv.Tensor(w), cv.Tensor(b), **kw)
    assert got.dtype == cv.float64 and got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)
    alias = [cv.conv1d, cv.conv2d, cv.conv3d][len(xs) - 3]
    got32 = alias(cv.Tensor(x.astype(np.float32)), cv.Tensor(w.astype(np.float32)), None, **kw)
    assert got32.dtype == cv.float32
    np.testing.assert_allclose(got32.numpy(), conv_ref(x, w, None, **kw), rtol=1e-4, atol=1e-4)
    if torch is not None:
        tf = [F.conv1d, F.conv2d, F.conv3d][len(xs) - 3]
        with warnings.catch_warnings():  # torch warns that its own 'same' padding copies
            warnings.simplefilter("ignore")
            want_t = tf(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), **kw).numpy()
        np.testing.assert_allclose(want_t, want, rtol=1e-10, atol=1e-10)


def test_conv_valid_padding_and_int_operands():
    x, w = rng.integers(-3, 4, (1, 2, 5, 5)), rng.integers(-3, 4, (3, 2, 2, 2))
    got = cv.conv2d(cv.Tensor(x), cv.Tensor(w), padding="valid")
    assert got.dtype == cv.int64
    np.testing.assert_array_equal(got.numpy(), conv_ref(x, w).astype(np.int64))


def test_sliding_windows_is_a_view_of_the_input():
    x = np.arange(7.0)
    win = sliding_windows(cv.Tensor(x), (3,), (2,), (2,))
    np.testing.assert_array_equal(win.numpy(), [[0, 2, 4], [2, 4, 6]])


@pytest.mark.parametrize("kernel,stride,dilation", [((3, 3), (1, 1), (1, 1)), ((2, 3), (2, 1), (1, 2)), ((3,), (3,), (2,))])
def test_sliding_windows_replays_its_recorded_view(kernel, stride, dilation):
    """The second view of an input of one shape is rebuilt from the first's recipe: the same nodes
    (hash-consed: the same object), the same values as numpy's windows, for strides and dilations;
    a traced input (under grad) builds the view itself, and its gradient is the overlap count."""
    nd = len(kernel)
    x = rng.standard_normal((2, 3) + (9,) * nd).astype(np.float32)
    from corvid.ops import conv as C

    C._WINDOWS.clear()
    t = cv.Tensor(x)
    first = sliding_windows(t, kernel, stride, dilation)  # (built op by op, and recorded)
    again = sliding_windows(t, kernel, stride, dilation)  # (replayed)
    assert C._WINDOWS and again.node is first.node
    want = np.lib.stride_tricks.sliding_window_view(x, tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation)),
                                                     axis=tuple(range(2, 2 + nd)))
    want = want[(Ellipsis,) + tuple(slice(None, None, d) for d in dilation)]
    want = want[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride)]
    np.testing.assert_array_equal(again.numpy(), want)
    np.testing.assert_array_equal(first.numpy(), want)
    g = cv.grad(lambda v: sliding_windows(v, kernel, stride, dilation).sum())(cv.Tensor(x))
    ones = np.zeros(x.shape, np.float64)
    idx = np.arange(x.size).reshape(x.shape)
    windows = np.lib.stride_tricks.sliding_window_view(idx, tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation)),
                                                       axis=tuple(range(2, 2 + nd)))
    windows = windows[(Ellipsis,) + tuple(slice(None, None, d) for d in dilation)]
    windows = windows[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride)]
    np.add.at(ones.reshape(-1), windows.reshape(-1), 1.0)
    np.testing.assert_array_equal(g.numpy(), ones)


def _kernel_body(src):
    return src[src.index("void "):]


def test_mnist_conv_kernel_is_one_vectorized_reduce_without_divmod():
    buf = lambda *shape: cv.Tensor(np.zeros(shape, np.float32))  # noqa: E731  (buffers, not constants)
    kernels = cv.conv2d(buf(128, 32, 26, 26), buf(64, 32, 3, 3)).schedule()
    reduces = [k for k in kernels if k.name.startswith("r_")]
    assert len(reduces) == 1, [k.name for k in kernels]
    body = _kernel_body(reduces[0].source)
    assert "/" not in body and "%" not in body
    assert "cv_float32x" in body  # output channels are vectorized (the matmul heuristic's tile)
    first = _kernel_body([k for k in cv.conv2d(buf(128, 1, 28, 28), buf(32, 1, 3, 3)).schedule()
                          if k.name.startswith("r_")][0].source)
    assert "/" not in first and "%" not in first


def _directional_check(f_cv, f_ref, args, argnums, directions=2, eps=1e-3, tol=1e-7):
    """``<grad f, v>`` from corvid against the central difference of the float64 reference ``f_ref``
    along random ``v``, for each argument in ``argnums``. The functions tested here are linear in
    each argument, so the difference is exact up to rounding whatever ``eps``."""
    grads = cv.grad(f_cv, argnums=argnums)(*[cv.Tensor(a) for a in args])
    for i, got in zip(argnums, grads):
        assert got.shape == args[i].shape
        for _ in range(directions):
            v = rng.standard_normal(args[i].shape)
            hi = [a + eps * v if j == i else a for j, a in enumerate(args)]
            lo = [a - eps * v if j == i else a for j, a in enumerate(args)]
            want = (f_ref(*hi) - f_ref(*lo)) / (2 * eps)
            assert abs(float((got.numpy() * v).sum()) - want) <= tol * max(1.0, abs(want)), (i, want)


@pytest.mark.parametrize("xs,ws,kw", CONV_CASES, ids=[f"{len(c[0]) - 2}d-{i}" for i, c in enumerate(CONV_CASES)])
def test_conv_grads_match_finite_differences(xs, ws, kw):
    x, w, b = rng.standard_normal(xs), rng.standard_normal(ws), rng.standard_normal(ws[0])
    g = rng.standard_normal(conv_ref(x, w, b, **kw).shape)
    _directional_check(lambda x, w, b: (cv.conv(x, w, b, **kw) * cv.Tensor(g)).sum(),
                       lambda x, w, b: float((conv_ref(x, w, b, **kw) * g).sum()), [x, w, b], (0, 1, 2))


def _automatic_gradients(monkeypatch):
    """Make conv run its undecorated implementation, so grad differentiates the window view."""
    monkeypatch.setattr(conv_module, "_conv", conv_module._conv.fun)


@pytest.mark.parametrize("xs,ws,kw", CONV_CASES, ids=[f"{len(c[0]) - 2}d-{i}" for i, c in enumerate(CONV_CASES)])
def test_conv_fast_grads_equal_the_automatic_ones(xs, ws, kw, monkeypatch):
    x, w, b = (cv.Tensor(rng.standard_normal(s)) for s in (xs, ws, (ws[0],)))
    g = cv.Tensor(rng.standard_normal(conv_ref(x.numpy(), w.numpy(), **kw).shape))
    f = lambda x, w, b: (cv.conv(x, w, b, **kw) * g).sum()  # noqa: E731
    fast = [t.numpy() for t in cv.grad(f, argnums=(0, 1, 2))(x, w, b)]
    _automatic_gradients(monkeypatch)
    auto = [t.numpy() for t in cv.grad(f, argnums=(0, 1, 2))(x, w, b)]
    for a, b_ in zip(fast, auto):
        np.testing.assert_allclose(a, b_, rtol=1e-10, atol=1e-10)


def test_conv_jvp_is_the_sum_of_the_partial_convs():
    kw = dict(stride=(2, 1), padding="valid", dilation=(1, 2), groups=2)
    x, w, tx, tw = (cv.Tensor(rng.standard_normal(s)) for s in [(2, 4, 7, 8), (6, 2, 3, 2)] * 2)
    y, t = cv.jvp(lambda x, w: cv.conv2d(x, w, **kw), (x, w), (tx, tw))
    np.testing.assert_allclose(y.numpy(), cv.conv2d(x, w, **kw).numpy(), rtol=1e-12)
    np.testing.assert_allclose(t.numpy(), (cv.conv2d(tx, w, **kw) + cv.conv2d(x, tw, **kw)).numpy(),
                               rtol=1e-10, atol=1e-10)
    # forward over reverse (a Hessian-vector product): the backward convs take jvp too
    loss = lambda w: (cv.conv2d(x, w, **kw) ** 2).sum()  # noqa: E731
    _, hvp = cv.jvp(cv.grad(loss), (w,), (tw,))
    eps = 1e-4
    fd = (cv.grad(loss)(w + eps * tw).numpy() - cv.grad(loss)(w - eps * tw).numpy()) / (2 * eps)
    np.testing.assert_allclose(hvp.numpy(), fd, rtol=1e-7, atol=1e-7)


def test_conv_grad_of_grad_matches_finite_differences():
    kw = dict(stride=2, padding=1, groups=2)
    x, w, c = rng.standard_normal((2, 4, 7, 6)), rng.standard_normal((4, 2, 3, 3)), rng.standard_normal((2, 4, 7, 6))

    def h(x, w):  # a directional derivative of a loss that is quartic in (x, w): its gradient is not linear
        dx = cv.grad(lambda x, w: (cv.conv2d(x, w, **kw) ** 2).sum())(x, w)
        return (dx * cv.Tensor(c)).sum()

    gx, gw = cv.grad(h, argnums=(0, 1))(cv.Tensor(x), cv.Tensor(w))
    eps = 1e-5
    for i, got in enumerate([gx, gw]):
        v = rng.standard_normal(got.shape)
        hi = [a + eps * v if j == i else a for j, a in enumerate([x, w])]
        lo = [a - eps * v if j == i else a for j, a in enumerate([x, w])]
        want = (h(*map(cv.Tensor, hi)).item() - h(*map(cv.Tensor, lo)).item()) / (2 * eps)
        assert abs(float((got.numpy() * v).sum()) - want) <= 1e-6 * max(1.0, abs(want))


def test_conv_vmap_of_grad_and_grad_of_vmap_match_loops():
    kw = dict(padding=1, stride=(1, 2))
    xs, w = rng.standard_normal((3, 2, 4, 5, 6)), rng.standard_normal((3, 4, 3, 3))
    gs = rng.standard_normal((3,) + conv_ref(xs[0], w, **kw).shape)
    loss = lambda x, w, g: (cv.conv2d(x, w, **kw) * g).sum()  # noqa: E731
    per = cv.vmap(cv.grad(loss, argnums=(0, 1)), in_axes=(0, None, 0))(cv.Tensor(xs), cv.Tensor(w), cv.Tensor(gs))
    total = cv.grad(lambda w: cv.vmap(loss, in_axes=(0, None, 0))(cv.Tensor(xs), w, cv.Tensor(gs)).sum())(
        cv.Tensor(w))
    loop = [cv.grad(loss, argnums=(0, 1))(cv.Tensor(xs[i]), cv.Tensor(w), cv.Tensor(gs[i])) for i in range(3)]
    for i in range(3):
        np.testing.assert_allclose(per[0].numpy()[i], loop[i][0].numpy(), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(per[1].numpy()[i], loop[i][1].numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(total.numpy(), sum(g[1].numpy() for g in loop), rtol=1e-10, atol=1e-10)


def test_mnist_conv_grad_kernels_are_few_vectorized_and_without_divmod():
    buf = lambda *shape: cv.Tensor(np.zeros(shape, np.float32))  # noqa: E731
    x, w, g = buf(128, 32, 26, 26), buf(64, 32, 3, 3), buf(128, 64, 24, 24)
    dx, dw = cv.grad(lambda x, w: (cv.conv2d(x, w) * g).sum(), argnums=(0, 1))(x, w)
    kernels = dx.schedule() + dw.schedule()
    # dx: the cotangent stored, its padded copy (an ungated inner loop), a weight copy, the
    # transposed conv, its permute; dw: g channels-last, partial sums, their sum, a permute
    assert len(kernels) <= 9, [k.name for k in kernels]
    reduces = [k for k in kernels if k.name.startswith("r_")]
    for k in reduces:
        body = _kernel_body(k.source)
        assert "/" not in body and "%" not in body, k.name
    assert all("cv_float32x" in _kernel_body(k.source) for k in reduces if len(k.kernel.loops) > 1)


def test_conv_vmap_matches_loop():
    xs, ws = rng.standard_normal((3, 2, 2, 6)), rng.standard_normal((3, 4, 2, 3))
    got = cv.vmap(lambda x, w: cv.conv1d(x, w, padding=1, stride=2))(cv.Tensor(xs), cv.Tensor(ws)).numpy()
    for i in range(3):
        np.testing.assert_allclose(got[i], conv_ref(xs[i], ws[i], padding=1, stride=2), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("call,match", [
    (lambda: cv.conv2d(cv.zeros(1, 3, 5, 5), cv.zeros(2, 2, 3, 3)), r"expects 2 input channels.*\(1, 3, 5, 5\)"),
    (lambda: cv.conv2d(cv.zeros(1, 4, 5, 5), cv.zeros(3, 2, 3, 3), groups=2), r"groups=2 does not divide the 3 output"),
    (lambda: cv.conv2d(cv.zeros(1, 3, 5, 5), cv.zeros(2, 1, 3, 3), groups=2), r"groups=2 does not divide the 3 input"),
    (lambda: cv.conv2d(cv.zeros(1, 1, 2, 5), cv.zeros(2, 1, 3, 3)), r"\(2, 1, 3, 3\).*larger.*\(1, 1, 2, 5\)"),
    (lambda: cv.conv2d(cv.zeros(1, 1, 5, 5), cv.zeros(2, 1, 3)), r"needs 4 dimensions"),
    (lambda: cv.conv1d(cv.zeros(1, 1, 5, 5), cv.zeros(2, 1, 3, 3)), r"expected an input of 3 dimensions"),
    (lambda: cv.conv2d(cv.zeros(1, 1, 5, 5), cv.zeros(2, 1, 3, 3), stride=0), r"stride must be >= 1"),
    (lambda: cv.conv2d(cv.zeros(1, 1, 5, 5), cv.zeros(2, 1, 3, 3), stride=2, padding="same"), r"'same' needs stride 1"),
    (lambda: cv.conv2d(cv.zeros(1, 1, 5, 5), cv.zeros(2, 1, 3, 3), padding="full"), r"padding must be"),
    (lambda: cv.conv2d(cv.zeros(1, 1, 5, 5), cv.zeros(2, 1, 3, 3), padding=(1, 2, 3)), r"padding must be"),
    (lambda: cv.conv2d(cv.zeros(1, 1, 5, 5), cv.zeros(2, 1, 3, 3), cv.zeros(3)), r"bias of shape \(3,\)"),
    (lambda: cv.conv_transpose2d(cv.zeros(1, 3, 5, 5), cv.zeros(2, 1, 3, 3)), r"expects 2 input channels"),
    (lambda: cv.conv_transpose2d(cv.zeros(1, 2, 5, 5), cv.zeros(2, 1, 3, 3), stride=2, output_padding=2),
     r"output_padding"),
    (lambda: cv.conv_transpose1d(cv.zeros(1, 1, 1), cv.zeros(1, 1, 2), padding=1), r"invalid output size \(0,\)"),
])
def test_conv_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- conv_transpose -------------------------------------------------------------------------------------

TRANSPOSE_CASES = [
    ((2, 3, 5), (3, 2, 3), {}),
    ((2, 4, 5), (4, 3, 3), dict(stride=2, padding=1, dilation=2, groups=2, output_padding=1)),
    ((2, 3, 4, 5), (3, 2, 3, 2), dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2))),
    ((1, 2, 4, 4), (2, 3, 3, 3), dict(stride=3, padding=4, dilation=2)),
    ((1, 2, 3, 4, 3), (2, 1, 2, 3, 2), dict(groups=2, padding=(0, 1, 1), dilation=(1, 2, 1))),
]


@pytest.mark.parametrize("xs,ws,kw", TRANSPOSE_CASES,
                         ids=[f"{len(c[0]) - 2}d-{i}" for i, c in enumerate(TRANSPOSE_CASES)])
def test_conv_transpose_matches_reference(xs, ws, kw):
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    b = rng.standard_normal(ws[1] * kw.get("groups", 1))
    want = conv_transpose_ref(x, w, b, **kw)
    got = cv.conv_transpose(cv.Tensor(x), cv.Tensor(w), cv.Tensor(b), **kw)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)
    if torch is not None:
        tf = [F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d][len(xs) - 3]
        np.testing.assert_allclose(tf(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), **kw).numpy(),
                                   want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("stride,padding,dilation,groups", [(1, 0, 1, 1), (2, 1, 1, 2), (3, 2, 2, 1)])
def test_conv_transpose_is_the_vjp_of_conv(stride, padding, dilation, groups):
    x, w = rng.standard_normal((2, 4, 9, 8)), rng.standard_normal((6, 4 // groups, 3, 2))
    y = cv.conv2d(cv.Tensor(x), cv.Tensor(w), stride=stride, padding=padding, dilation=dilation, groups=groups)
    g = rng.standard_normal(y.shape)
    _, pullback = cv.vjp(lambda x: cv.conv2d(x, cv.Tensor(w), stride=stride, padding=padding, dilation=dilation,
                                             groups=groups), cv.Tensor(x))
    (dx,) = pullback(cv.Tensor(g))
    # the sizes the forward floored away come back as output_padding
    extra = tuple(i + 2 * padding - dilation * (k - 1) - 1 - (o - 1) * stride
                  for i, k, o in zip(x.shape[2:], w.shape[2:], y.shape[2:]))
    ct = cv.conv_transpose2d(cv.Tensor(g), cv.Tensor(w), None, stride, padding, extra, groups, dilation)
    np.testing.assert_allclose(ct.numpy(), dx.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("xs,ws,kw", TRANSPOSE_CASES,
                         ids=[f"{len(c[0]) - 2}d-{i}" for i, c in enumerate(TRANSPOSE_CASES)])
def test_conv_transpose_grads_match_finite_differences_and_automatic(xs, ws, kw, monkeypatch):
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    b = rng.standard_normal(ws[1] * kw.get("groups", 1))
    g = rng.standard_normal(conv_transpose_ref(x, w, b, **kw).shape)
    f = lambda x, w, b: (cv.conv_transpose(x, w, b, **kw) * cv.Tensor(g)).sum()  # noqa: E731
    _directional_check(f, lambda x, w, b: float((conv_transpose_ref(x, w, b, **kw) * g).sum()), [x, w, b],
                       (0, 1, 2))
    fast = [t.numpy() for t in cv.grad(f, argnums=(0, 1, 2))(cv.Tensor(x), cv.Tensor(w), cv.Tensor(b))]
    _automatic_gradients(monkeypatch)
    auto = [t.numpy() for t in cv.grad(f, argnums=(0, 1, 2))(cv.Tensor(x), cv.Tensor(w), cv.Tensor(b))]
    for a, b_ in zip(fast, auto):
        np.testing.assert_allclose(a, b_, rtol=1e-10, atol=1e-10)


def test_conv_transpose_grad_and_vmap():
    x, w = rng.standard_normal((1, 2, 3, 2)), rng.standard_normal((2, 2, 2, 2))
    kw = dict(stride=2, padding=1, output_padding=1)
    g = rng.standard_normal(conv_transpose_ref(x, w, **kw).shape)
    grads = cv.grad(lambda x, w: (cv.conv_transpose(x, w, **kw) * cv.Tensor(g)).sum(), argnums=(0, 1))(
        cv.Tensor(x), cv.Tensor(w))
    ref = lambda x, w: float((conv_transpose_ref(x, w, **kw) * g).sum())  # noqa: E731
    for i, got in enumerate(grads):
        np.testing.assert_allclose(got.numpy(), numeric_grad(ref, [x, w], i), rtol=1e-6, atol=1e-6)
    xs = rng.standard_normal((3, 1, 2, 4))
    got = cv.vmap(lambda x: cv.conv_transpose1d(x, cv.Tensor(w[:, :, 0]), stride=2))(cv.Tensor(xs)).numpy()
    for i in range(3):
        np.testing.assert_allclose(got[i], conv_transpose_ref(xs[i], w[:, :, 0], stride=2), rtol=1e-10, atol=1e-10)


# --- pooling ----------------------------------------------------------------------------------------------

POOL_CASES = [  # spatial shape, kernel, stride, padding, dilation, ceil_mode
    ((9,), (3,), None, 0, 1, False),
    ((10,), (3,), 2, 1, 2, True),
    ((7, 8), (2, 3), (2, 1), (1, 1), 1, False),
    ((7, 6), (3, 3), 2, 1, (2, 1), True),
    ((6, 7), (2, 2), None, 0, 1, True),
    ((5, 6, 7), (2, 3, 2), (2, 2, 3), (1, 0, 1), 1, True),
    ((5, 4, 6), (3, 2, 2), 1, 0, (1, 2, 2), False),
]


@pytest.mark.parametrize("spatial,k,s,p,d,ceil_mode", POOL_CASES,
                         ids=[f"{len(c[0])}d-{i}" for i, c in enumerate(POOL_CASES)])
def test_max_pool_matches_reference(spatial, k, s, p, d, ceil_mode):
    x = rng.standard_normal((2, 3) + spatial)
    want = pool_ref(x, "max", k, s, p, d, ceil_mode)
    got = cv.max_pool(cv.Tensor(x), k, s, p, d, ceil_mode)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)
    alias = [cv.max_pool1d, cv.max_pool2d, cv.max_pool3d][len(k) - 1]
    np.testing.assert_array_equal(alias(cv.Tensor(x[0]), k, s, p, d, ceil_mode).numpy(), want[0])  # unbatched
    if torch is not None:
        tf = [F.max_pool1d, F.max_pool2d, F.max_pool3d][len(k) - 1]
        want_t = tf(torch.from_numpy(x), k, s if s is not None else k, p, d, ceil_mode).numpy()
        np.testing.assert_array_equal(want_t, want)


@pytest.mark.parametrize("spatial,k,s,p,ceil_mode", [c[:4] + c[5:] for c in POOL_CASES if c[4] == 1],
                         ids=[f"{len(c[0])}d-{i}" for i, c in enumerate(POOL_CASES) if c[4] == 1])
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool_matches_reference(spatial, k, s, p, ceil_mode, count_include_pad):
    x = rng.standard_normal((2, 3) + spatial)
    want = pool_ref(x, "avg", k, s, p, 1, ceil_mode, count_include_pad)
    got = cv.avg_pool(cv.Tensor(x), k, s, p, ceil_mode, count_include_pad)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    if torch is not None:
        tf = [F.avg_pool1d, F.avg_pool2d, F.avg_pool3d][len(k) - 1]
        np.testing.assert_allclose(tf(torch.from_numpy(x), k, s if s is not None else k, p, ceil_mode,
                                      count_include_pad).numpy(), want, rtol=1e-12, atol=1e-12)


def test_avg_pool_divisor_override_and_int_pool():
    x = rng.standard_normal((1, 2, 4, 4))
    got = cv.avg_pool2d(cv.Tensor(x), 2, divisor_override=3).numpy()
    np.testing.assert_allclose(got, pool_ref(x, "avg", (2, 2)) * 4 / 3, rtol=1e-12)
    xi = rng.integers(-50, 50, (1, 2, 5, 5)).astype(np.int32)
    got = cv.max_pool2d(cv.Tensor(xi), 3, padding=1)  # int padding uses the dtype's lowest value
    assert got.dtype == cv.int32
    np.testing.assert_array_equal(got.numpy(), pool_ref(xi, "max", (3, 3), None, 1).astype(np.int32))


@pytest.mark.parametrize("spatial,out", [((7,), (3,)), ((6,), (3,)), ((7, 5), (3, 2)), ((5, 6), (5, 4)),
                                         ((6, 5), (4, None)), ((5, 6, 7), (2, 3, 4))])
def test_adaptive_pools_match_reference(spatial, out):
    x = rng.standard_normal((2, 3) + spatial)
    size = tuple(s if o is None else o for s, o in zip(spatial, out))
    np.testing.assert_allclose(cv.adaptive_avg_pool(cv.Tensor(x), out).numpy(), adaptive_ref(x, size, "avg"),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(cv.adaptive_max_pool(cv.Tensor(x), out).numpy(), adaptive_ref(x, size, "max"))
    if torch is not None:
        nd = len(out)
        ta = [F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d][nd - 1]
        np.testing.assert_allclose(ta(torch.from_numpy(x), out).numpy(), adaptive_ref(x, size, "avg"), rtol=1e-12)
    alias = [cv.adaptive_avg_pool1d, cv.adaptive_avg_pool2d, cv.adaptive_avg_pool3d][len(out) - 1]
    assert alias(cv.Tensor(x), out).shape == (2, 3) + size


def test_max_pool_gradient_goes_to_the_max_and_splits_ties():
    x = np.array([[[1.0, 5.0, 2.0, 2.0, 0.0, 3.0]]])
    g = cv.grad(lambda x: cv.max_pool1d(x, 2).sum())(cv.Tensor(x)).numpy()
    np.testing.assert_array_equal(g, [[[0, 1, 0.5, 0.5, 0, 1]]])
    # overlapping windows add up: 5 is the max of both windows that contain it
    g = cv.grad(lambda x: cv.max_pool1d(x, 2, stride=1).sum())(cv.Tensor(x)).numpy()
    np.testing.assert_array_equal(g, [[[0, 2, 0.5, 1.5, 0, 1]]])


def test_pool_grads_match_finite_differences():
    x = rng.standard_normal((1, 2, 5, 4))
    for f_cv, f_ref in [
        (lambda t: cv.avg_pool2d(t, 3, 2, 1, True, False), lambda a: pool_ref(a, "avg", (3, 3), 2, 1, 1, True, False)),
        (lambda t: cv.max_pool2d(t, 2, 1, 1, 2), lambda a: pool_ref(a, "max", (2, 2), 1, 1, 2)),
        # windows that tile the input take the reshape path
        (lambda t: cv.max_pool2d(t, 2, None, 1, 1, True), lambda a: pool_ref(a, "max", (2, 2), None, 1, 1, True)),
        (lambda t: cv.avg_pool2d(t, (2, 3), None, (1, 0), True, False),
         lambda a: pool_ref(a, "avg", (2, 3), None, (1, 0), 1, True, False)),
        (lambda t: cv.adaptive_avg_pool2d(t, (3, 3)), lambda a: adaptive_ref(a, (3, 3), "avg")),
        (lambda t: cv.adaptive_max_pool2d(t, (2, 3)), lambda a: adaptive_ref(a, (2, 3), "max")),
    ]:
        g = rng.standard_normal(f_ref(x).shape)
        got = cv.grad(lambda t: (f_cv(t) * cv.Tensor(g)).sum())(cv.Tensor(x)).numpy()
        num = numeric_grad(lambda a: float((f_ref(a) * g).sum()), [x], 0)
        np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-6)


def test_tiling_max_pool_grad_has_no_divmod():
    x = cv.Tensor(np.zeros((128, 32, 24, 24), np.float32))
    kernels = cv.grad(lambda t: cv.max_pool2d(t, 2).sum())(x).schedule()
    assert len(kernels) <= 3, [k.name for k in kernels]  # the max, the tie count, the gradient
    for k in kernels:
        assert "%" not in _kernel_body(k.source), k.name  # the index splits of an overlap-add


def test_pool_vmap_matches_loop():
    xs = rng.standard_normal((3, 2, 5, 6))
    mx, av = cv.vmap(lambda x: (cv.max_pool2d(x, 2, ceil_mode=True), cv.avg_pool2d(x, 3, 1, 1)))(cv.Tensor(xs))
    for i in range(3):
        np.testing.assert_array_equal(mx.numpy()[i], pool_ref(xs[i], "max", (2, 2), None, 0, 1, True))
        np.testing.assert_allclose(av.numpy()[i], pool_ref(xs[i], "avg", (3, 3), 1, 1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call,exc,match", [
    (lambda: cv.max_pool2d(cv.zeros(1, 1, 2, 2), 3), ValueError, r"does not fit.*\(1, 1, 2, 2\)"),
    (lambda: cv.max_pool2d(cv.zeros(1, 1, 5, 5), 2, padding=2), ValueError, r"at most half"),
    (lambda: cv.max_pool2d(cv.zeros(5, 5), 2), ValueError, r"expected an input of 3 or 4 dimensions"),
    (lambda: cv.max_pool(cv.zeros(1, 1, 5, 5), (2, 2), stride=(1, 1, 1)), ValueError, r"stride"),
    (lambda: cv.avg_pool1d(cv.zeros(1, 1, 5, dtype=cv.int32), 2), TypeError, r"float"),
    (lambda: cv.adaptive_avg_pool2d(cv.zeros(1, 1, 5, 5), (0, 2)), ValueError, r"positive"),
    (lambda: cv.adaptive_max_pool1d(cv.zeros(1, 1, 0), 2), ValueError, r"empty spatial axis"),
])
def test_pool_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()

"""Recorded eager graphs (corvid/engine/replay.py): a replay builds the very nodes the function
builds, realizing it reuses the recorded walk only while it is still right, and every call that
is not safe to replay calls the function."""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import corvid as cv
from corvid.engine import replay
from corvid.engine import schedule as sched

F = cv.nn.functional
rng = np.random.default_rng(0)


def t(*shape, dtype=np.float32):
    return cv.Tensor(rng.standard_normal(shape).astype(dtype)).realize()


def direct(call):
    with replay.off():
        return call()


CALLS = {
    "layer_norm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5),
    "layer_norm_no_affine": lambda x, w, b: F.layer_norm(x, x.shape[-1]),
    "softmax": lambda x, w, b: x.softmax(-1),
    "log_softmax": lambda x, w, b: x.log_softmax(0),
    "gelu": lambda x, w, b: F.gelu(x),
    "sum": lambda x, w, b: x.sum(),
    "sum_axis": lambda x, w, b: x.sum(0, keepdims=True, dtype=cv.float64),
    "gelu_tanh": lambda x, w, b: F.gelu(x, approximate="tanh"),
    "silu": lambda x, w, b: F.silu(x),
    "sigmoid": lambda x, w, b: x.sigmoid(),
    "rms_norm": lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w),
    "matmul": lambda x, w, b: x @ x.mT,
    "linear": lambda x, w, b: F.linear(x, LINEAR[0], LINEAR[1]),
    "conv2d": lambda x, w, b: cv.conv2d(CONV[0], CONV[1], padding=1),
}
LINEAR = (t(3, 6), t(3))
CONV = (t(2, 3, 5, 5), t(4, 3, 3, 3))


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_replay_builds_the_nodes_the_function_builds(name):
    x, w, b = t(4, 6), t(6), t(6)
    call = CALLS[name]
    first = call(x, w, b)   # recorded
    again = call(x, w, b)   # replayed
    ref = direct(lambda: call(x, w, b))
    assert again.node is ref.node and first.node is ref.node  # (hash-consed: one node, built three ways)
    assert again.device == ref.device and again.dtype == ref.dtype
    np.testing.assert_allclose(again.numpy(), direct(lambda: call(t(4, 6) * 0 + x, w, b)).numpy(), rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, 5), cols=st.integers(1, 7), eps=st.sampled_from([1e-5, 1e-3, 0.0, -0.0, 0.5]),
       affine=st.booleans())
def test_layer_norm_replays_match_numpy_for_any_shape_and_eps(rows, cols, eps, affine):
    x = cv.Tensor(rng.standard_normal((rows, cols)).astype(np.float32)).realize()
    w, b = (t(cols), t(cols)) if affine else (None, None)
    for _ in range(3):  # (the first records, the others replay)
        out = F.layer_norm(x, cols, w, b, eps=eps)
        ref = direct(lambda: F.layer_norm(x, cols, w, b, eps=eps))
        assert out.node is ref.node
    xn = x.numpy().astype(np.float64)
    want = (xn - xn.mean(-1, keepdims=True)) / np.sqrt(xn.var(-1, keepdims=True) + eps)
    if affine:
        want = want * w.numpy() + b.numpy()
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(out.numpy(), want, rtol=2e-4, atol=2e-4)


def test_static_arguments_are_keyed_by_type_and_sign():
    x = t(3, 5)
    for eps in (0.5, 1, True, 0.0, -0.0, float("nan")):  # (1 and True and 1.0 are one dict key in Python)
        for _ in range(2):
            out = F.layer_norm(x, 5, eps=eps)
            assert out.node is direct(lambda: F.layer_norm(x, 5, eps=eps)).node


def test_a_repeated_argument_is_another_signature():
    x, w, b = t(3, 5), t(5), t(5)
    F.layer_norm(x, 5, w, b)
    F.layer_norm(x, 5, w, b)
    same = F.layer_norm(x, 5, w, w)  # (weight and bias one tensor: a graph with fewer nodes)
    assert same.node is direct(lambda: F.layer_norm(x, 5, w, w)).node
    xn = x.numpy().astype(np.float64)
    want = (xn - xn.mean(-1, keepdims=True)) / np.sqrt(xn.var(-1, keepdims=True) + 1e-5) * w.numpy() + w.numpy()
    np.testing.assert_allclose(same.numpy(), want, rtol=1e-4, atol=1e-5)


def test_calls_that_are_not_safe_to_replay_call_the_function():
    x = t(3, 5)
    lazy = x + 1                       # not stored
    deep = x.T.reshape(15).reshape(3, 5).T  # more views than a replay takes
    leaf = cv.Tensor(x.numpy(), requires_grad=True)  # a variable below
    for arg in (lazy, deep, leaf, leaf.T, x.numpy()):
        sig = replay._signature((arg,), {}, cv.Tensor)
        assert sig is None
    assert replay._signature((x.T,), {}, cv.Tensor)[1] == [x.node]  # (a view: replayed over the stored value)
    frozen = cv.nn.Parameter(x.numpy(), requires_grad=False)
    assert replay._signature((frozen,), {}, cv.Tensor) is not None  # (a frozen parameter: a stored value)
    assert replay._signature((cv.nn.Parameter(x.numpy()),), {}, cv.Tensor) is None  # (a trainable one: a variable)
    # the gradient of a requires_grad input still flows (the function built its graph)
    F.layer_norm(leaf, 5).sum().backward()
    assert leaf.grad is not None and leaf.grad.shape == (3, 5)
    assert replay._signature((x, [5], None, 1e-5), {"eps": 2.0}, cv.Tensor) is not None
    assert replay._signature((x, object()), {}, cv.Tensor) is None


def test_a_value_the_function_stores_is_not_replayed():
    state = {"k": 1.0}

    @replay.replayed
    def f(x):  # reads a value from outside its arguments: its graph holds a stored value of its own
        return x + cv.Tensor(np.full(x.shape, state["k"], np.float32)).realize()

    x = t(4)
    assert np.allclose(f(x).numpy(), x.numpy() + 1)
    state["k"] = 5.0
    assert np.allclose(f(x).numpy(), x.numpy() + 5)  # (a replay would have read the first buffer again)
    assert list(f.recordings.values()) == [replay._UNREPLAYABLE]


def test_a_non_tensor_result_is_not_recorded():
    @replay.replayed
    def f(x):
        return x.shape

    x = t(2, 3)
    assert f(x) == (2, 3) and f(x) == (2, 3)
    assert list(f.recordings.values()) == [replay._UNREPLAYABLE]


def test_recordings_are_bounded():
    @replay.replayed
    def f(x, k):
        return x * k

    x = t(3)
    for k in range(replay.LIMIT + 20):
        f(x, k)
    assert len(f.recordings) == replay.LIMIT
    assert np.allclose(f(x, 7).numpy(), x.numpy() * 7)


def test_realizing_a_replay_reuses_its_walk(monkeypatch):
    x, w, b = t(8, 16), t(16), t(16)
    F.layer_norm(x, 16, w, b).realize()  # (recorded, and its plan made)
    y = F.layer_norm(x, 16, w, b)
    assert y.node.walked is not None
    walks = []
    real = sched._walk
    monkeypatch.setattr(sched, "_walk", lambda roots: walks.append(1) or real(roots))
    got = y.numpy()
    assert walks == [] and y.node.walked is None
    np.testing.assert_allclose(got, direct(lambda: F.layer_norm(x + 0, 16, w, b)).numpy(), rtol=1e-5, atol=1e-6)


def test_a_node_computed_since_the_replay_is_walked_again(monkeypatch):
    x, w, b = t(8, 16), t(16), t(16)
    F.layer_norm(x, 16, w, b).realize()
    y = F.layer_norm(x, 16, w, b)
    below, interior, _ = y.node.walked
    inner = next(n for n in interior if n.op is cv.graph.node.Op.REDUCE)  # the mean's sum, stored now
    cv.Tensor._from_node(inner, y.device).realize()
    walks = []
    real = sched._walk
    monkeypatch.setattr(sched, "_walk", lambda roots: walks.append(1) or real(roots))
    got = y.numpy()
    assert walks  # (the recorded walk would have computed the sum again, and read a graph of the wrong key)
    np.testing.assert_allclose(got, direct(lambda: F.layer_norm(x + 0, 16, w, b)).numpy(), rtol=1e-5, atol=1e-6)


def test_settings_that_change_products_are_part_of_the_key():
    a, b = t(16, 8), t(8, 4)
    plain = a @ b
    with cv.autocast(cv.bfloat16):
        low = a @ b
        assert low.dtype == cv.bfloat16 and low.node is direct(lambda: a @ b).node
    assert (a @ b).node is plain.node and (a @ b).dtype == cv.float32


def test_replays_from_several_threads():
    x, w, b = t(6, 12), t(12), t(12)
    want = direct(lambda: F.layer_norm(x, 12, w, b)).numpy()
    errors = []

    def work():
        try:
            for _ in range(30):
                np.testing.assert_allclose(F.layer_norm(x, 12, w, b).numpy(), want, rtol=1e-6)
                F.gelu(x).realize()
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors


def test_jit_and_grad_trace_through_decorated_functions():
    x, w, b = t(4, 8), t(8), t(8)
    f = cv.jit(lambda x, w, b: F.layer_norm(x, 8, w, b).sum())
    g = cv.grad(lambda x: F.layer_norm(x, 8, w, b).square().sum())
    for _ in range(3):
        assert np.isclose(f(x, w, b).item(), F.layer_norm(x, 8, w, b).sum().item(), rtol=1e-5, atol=1e-5)
    eps = 1e-3
    xn = x.numpy().astype(np.float64)
    num = np.zeros_like(xn)
    for i in np.ndindex(xn.shape):
        for s in (1, -1):
            d = xn.copy()
            d[i] += s * eps
            y = direct(lambda: F.layer_norm(cv.Tensor(d), 8, w.astype(cv.float64), b.astype(cv.float64)))
            num[i] += s * (y.numpy() ** 2).sum() / (2 * eps)
    np.testing.assert_allclose(g(x).numpy(), num, rtol=1e-2, atol=1e-2)


def test_a_new_device_object_is_a_new_key():
    from corvid.runtime import device as registry

    x = t(3, 4)
    F.gelu(x)
    before = registry.epoch
    registry.register_backend("REPLAYTEST", "corvid.runtime.cpu:CPUDevice")
    try:
        assert registry.epoch > before
    finally:
        registry.unregister_backend("REPLAYTEST")


def test_views_and_casts_of_stored_arguments_replay():
    """``x @ w.T``, ``x.astype(bf16) @ w.astype(bf16).T``, a layer norm of a cast: the views
    are replayed over the stored values, as part of the key (another view is another graph)."""
    x, w = t(6, 8), t(4, 8)
    calls = [lambda: x @ w.T, lambda: x.T.T @ w.T, lambda: x.astype(cv.bfloat16) @ w.astype(cv.bfloat16).T,
             lambda: F.layer_norm(x.astype(cv.float64), 8), lambda: x[1:5] @ w.T, lambda: x @ x.T,
             lambda: w.T.softmax(0)]
    for call in calls:
        for _ in range(3):
            got = call()
            assert got.node is direct(call).node
        np.testing.assert_allclose(got.numpy().astype(np.float64), direct(call).numpy().astype(np.float64),
                                   rtol=1e-6)
    xn, wn = x.numpy().astype(np.float64), w.numpy().astype(np.float64)
    np.testing.assert_allclose((x[1:5] @ w.T).numpy(), xn[1:5] @ wn.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((x @ x.T).numpy(), xn @ xn.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((x @ w.T).numpy(), xn @ wn.T, rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_replays_build_the_functions_nodes_for_any_arguments(data):
    """Random shapes and static arguments for each decorated function: every call after the first
    of a signature is a replay, and each gives the node the function itself builds."""
    kind = data.draw(st.sampled_from(["matmul", "conv", "softmax", "sum", "layer_norm", "linear"]))
    dims = st.integers(1, 5)
    if kind == "matmul":
        batch = data.draw(st.lists(st.integers(1, 3), max_size=2))
        n, k, m = data.draw(dims), data.draw(dims), data.draw(dims)
        a, b = t(*batch, n, k), t(k, m) if data.draw(st.booleans()) else t(*batch, k, m)
        transpose = data.draw(st.booleans())
        call = (lambda: a @ b.mT.mT) if transpose else (lambda: a @ b)
    elif kind == "conv":
        groups = data.draw(st.sampled_from([1, 2]))
        c_in, c_out = 2 * data.draw(st.integers(1, 2)), 2 * data.draw(st.integers(1, 2))
        size, kernel = data.draw(st.integers(3, 7)), data.draw(st.integers(1, 3))
        stride, dilation = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
        padding = data.draw(st.sampled_from([0, 1, "same"] if stride == 1 else [0, 1]))
        x, w = t(2, c_in, size, size), t(c_out, c_in // groups, kernel, kernel)
        if (size + 2 * (padding if padding != "same" else 0) - dilation * (kernel - 1) - 1) < 0:
            return
        call = lambda: cv.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)  # noqa: E731
    elif kind in ("softmax", "sum"):
        shape = data.draw(st.lists(dims, min_size=1, max_size=3))
        axis = data.draw(st.integers(-len(shape), len(shape) - 1))
        x = t(*shape)
        call = (lambda: x.softmax(axis)) if kind == "softmax" else (lambda: x.sum(axis, keepdims=True))
    elif kind == "layer_norm":
        shape = data.draw(st.lists(dims, min_size=1, max_size=3))
        x, w, b = t(*shape), t(shape[-1]), t(shape[-1])
        eps = data.draw(st.sampled_from([1e-5, 0.1]))
        call = lambda: F.layer_norm(x, shape[-1], w, b, eps)  # noqa: E731
    else:
        n, k, m = data.draw(dims), data.draw(dims), data.draw(dims)
        x, w, b = t(n, k), t(m, k), t(m) if data.draw(st.booleans()) else None
        call = lambda: F.linear(x, w, b)  # noqa: E731
    for _ in range(3):
        got = call()
        assert got.node is direct(call).node
    np.testing.assert_allclose(got.numpy(), direct(call).numpy(), rtol=1e-6)


def test_a_frozen_layer_replays_its_forward():
    """A Linear layer whose parameters take no gradient, called eagerly: its product replays."""
    lin = cv.nn.Linear(8, 4)
    for p in lin.parameters():
        p.requires_grad_(False)
    x = t(3, 8)
    for _ in range(3):
        got = lin(x)
        assert got.node is direct(lambda: lin(x)).node
    want = x.numpy() @ lin.weight.numpy().T + lin.bias.numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    assert any(r is not replay._UNREPLAYABLE for r in F.linear.recordings.values())

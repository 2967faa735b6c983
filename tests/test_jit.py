"""cv.jit: trace once per signature, replay the captured kernels; compared with the plain function."""

import numpy as np
import pytest

import corvid as cv
from corvid.transforms.jit import JitError


def _counted(fn):
    calls = {"n": 0}

    def wrapper(*a, **k):
        calls["n"] += 1
        return fn(*a, **k)

    return wrapper, calls


def test_replay_matches_eager_and_does_not_rerun_python():
    def f(x, y, scale=2.0):
        return {"a": (x * scale + y).exp().sum(axis=1), "b": x @ y.T}

    body, calls = _counted(f)
    jf = cv.jit(body)
    for _ in range(3):
        x, y = cv.randn(4, 3), cv.randn(4, 3)
        got, want = jf(x, y), f(x, y)
        np.testing.assert_allclose(got["a"].numpy(), want["a"].numpy(), rtol=1e-6)
        np.testing.assert_allclose(got["b"].numpy(), want["b"].numpy(), rtol=1e-6, atol=1e-6)
    assert calls["n"] == 1 and jf.traces == 1


def test_retraces_on_new_shape_dtype_and_static_value():
    jf = cv.jit(lambda x, k=1: x * k)
    jf(cv.ones(3))
    jf(cv.ones(3))
    assert jf.traces == 1
    jf(cv.ones(4))
    assert jf.traces == 2
    out = jf(cv.ones(3, dtype=cv.float64))
    assert jf.traces == 3 and out.dtype == cv.float64
    assert jf(cv.ones(3), k=5).tolist() == [5.0, 5.0, 5.0] and jf.traces == 4
    assert jf(cv.ones(3), k=5).tolist() == [5.0, 5.0, 5.0] and jf.traces == 4


def test_static_argnums_and_pytree_output_structure():
    @cv.jit(static_argnums=1)
    def f(xs, n):
        return [xs["a"] * n, (xs["b"].sum(), "label")]

    xs = {"a": cv.arange(3.0), "b": cv.ones(2, 2)}
    out = f(xs, 2)
    assert out[0].tolist() == [0.0, 2.0, 4.0]
    assert out[1][0].item() == 4.0 and out[1][1] == "label"
    assert f(xs, 3)[0].tolist() == [0.0, 3.0, 6.0] and f.traces == 2


def test_output_aliasing_an_input_and_an_unused_input():
    jf = cv.jit(lambda x, y: (x, x + 1))
    x = cv.Tensor([1.0, 2.0])
    a, b = jf(x, cv.zeros(5))
    a2, b2 = jf(cv.Tensor([3.0, 4.0]), cv.zeros(5))
    assert a.tolist() == [1.0, 2.0] and b.tolist() == [2.0, 3.0]
    assert a2.tolist() == [3.0, 4.0] and b2.tolist() == [4.0, 5.0]


def test_captured_constant_is_frozen_like_jax():
    w = cv.Tensor([1.0, 2.0, 3.0])
    jf = cv.jit(lambda x: x * w)
    assert jf(cv.ones(3)).tolist() == [1.0, 2.0, 3.0]
    assert jf(cv.full(3, 2.0)).tolist() == [2.0, 4.0, 6.0]


def test_random_draws_are_new_each_call_and_follow_the_seed():
    jf = cv.jit(lambda x: x + cv.rand(4))
    cv.manual_seed(7)
    a, b = jf(cv.zeros(4)).numpy(), jf(cv.zeros(4)).numpy()
    cv.manual_seed(7)
    ea, eb = cv.rand(4).numpy(), cv.rand(4).numpy()
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, ea)
    np.testing.assert_array_equal(b, eb)
    cv.manual_seed(7)
    np.testing.assert_array_equal(jf(cv.zeros(4)).numpy(), ea)


def test_concrete_value_while_tracing_raises_clear_error():
    @cv.jit
    def f(x):
        return x if x.sum() > 0 else -x

    with pytest.raises(JitError, match="concrete tensor value"):
        f(cv.ones(3))

    @cv.jit
    def g(x):
        return x * x.sum().item()

    with pytest.raises(JitError, match="static_argnums"):
        g(cv.ones(3))


def test_unhashable_static_argument_is_a_type_error():
    jf = cv.jit(lambda x, opts: x * opts[0])
    with pytest.raises(TypeError, match="hashable"):
        jf(cv.ones(2), bytearray(b"\x02"))


def test_numpy_arguments_are_traced_not_static():
    jf = cv.jit(lambda x: x * 2)
    assert jf(np.arange(3.0)).tolist() == [0.0, 2.0, 4.0]
    assert jf(np.arange(1.0, 4.0)).tolist() == [2.0, 4.0, 6.0] and jf.traces == 1


def test_intermediates_are_freed_and_outputs_survive():
    def f(x):
        y = (x * 2).sum(axis=0)  # a reduce feeding two kernels: stored once
        return (x - y).sum(axis=1) + y.sum()

    jf = cv.jit(f)
    x = cv.randn(64, 64)
    np.testing.assert_allclose(jf(x).numpy(), f(x).numpy(), rtol=1e-5, atol=1e-4)
    cap = next(iter(jf._cache.values()))[0]
    assert cap.kernels >= 2
    assert any(ln.free_after for ln in cap.launches)
    np.testing.assert_allclose(jf(x).numpy(), f(x).numpy(), rtol=1e-5, atol=1e-4)


def test_empty_and_zero_dim_tensors():
    jf = cv.jit(lambda x, s: (x * 2, s + 1))
    e, s = jf(cv.zeros(0, 3), cv.Tensor(1.5))
    assert e.shape == (0, 3) and s.item() == 2.5
    e, s = jf(cv.zeros(0, 3), cv.Tensor(2.5))
    assert s.item() == 3.5


def test_methods_can_be_jitted():
    class Scale:
        def __init__(self, k):
            self.k = k

        @cv.jit
        def __call__(self, x):
            return x * 3

    assert Scale(2)(cv.ones(2)).tolist() == [3.0, 3.0]


def test_jit_of_a_non_callable_is_a_type_error():
    with pytest.raises(TypeError, match="callable"):
        cv.jit(3)


def _sgd_reference(w, b, xs, ys, lr):
    losses = []
    for x, y in zip(xs, ys):
        d = x @ w + b - y
        losses.append((d ** 2).mean())
        g = 2 * d / d.size
        w, b = w - lr * (x.T @ g), b - lr * g.sum(0)
    return losses, w, b


def test_pytorch_style_training_step_updates_captured_parameters():
    cv.manual_seed(0)
    w, b = cv.randn(3, 2, requires_grad=True), cv.zeros(2, requires_grad=True)
    w0, b0 = w.numpy().astype(np.float64), b.numpy().astype(np.float64)
    xs, ys = [cv.randn(8, 3) for _ in range(4)], [cv.randn(8, 2) for _ in range(4)]

    @cv.jit
    def step(x, y):
        loss = (((x @ w + b) - y) ** 2).mean()
        loss.backward()
        with cv.no_grad():
            for p in (w, b):
                p -= 0.1 * p.grad
                p.grad = None
        return loss

    losses = [step(x, y).item() for x, y in zip(xs, ys)]
    ref, rw, rb = _sgd_reference(w0, b0, [x.numpy() for x in xs], [y.numpy() for y in ys], 0.1)
    assert step.traces == 1
    np.testing.assert_allclose(losses, ref, rtol=1e-5)
    np.testing.assert_allclose(w.numpy(), rw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), rb, rtol=1e-5, atol=1e-6)
    assert w.is_leaf and w.requires_grad and w.grad is None


def test_grad_accumulation_state_is_guarded():
    w = cv.Tensor([1.0, 2.0], requires_grad=True)

    @cv.jit
    def acc(x):
        (w * x).sum().backward()  # adds x into w.grad

    acc(cv.Tensor([1.0, 1.0]))
    assert w.grad.tolist() == [1.0, 1.0]
    acc(cv.Tensor([2.0, 3.0]))  # now w.grad exists: a different program (it reads the old grad)
    assert w.grad.tolist() == [3.0, 4.0] and acc.traces == 2
    acc(cv.Tensor([1.0, 1.0]))
    assert w.grad.tolist() == [4.0, 5.0] and acc.traces == 2
    w.grad = None
    acc(cv.Tensor([5.0, 5.0]))
    assert w.grad.tolist() == [5.0, 5.0] and acc.traces == 2


def test_functional_training_step_with_params_as_arguments():
    def loss(params, x, y):
        return (((x @ params["w"] + params["b"]) - y) ** 2).mean()

    @cv.jit
    def step(params, x, y):
        l, g = cv.value_and_grad(loss)(params, x, y)
        return {k: params[k] - 0.1 * g[k] for k in params}, l

    cv.manual_seed(1)
    params = {"w": cv.randn(3, 2), "b": cv.zeros(2)}
    w0, b0 = params["w"].numpy().astype(np.float64), params["b"].numpy().astype(np.float64)
    xs, ys = [cv.randn(8, 3) for _ in range(3)], [cv.randn(8, 2) for _ in range(3)]
    losses = []
    for x, y in zip(xs, ys):
        params, l = step(params, x, y)
        losses.append(l.item())
    ref, rw, rb = _sgd_reference(w0, b0, [x.numpy() for x in xs], [y.numpy() for y in ys], 0.1)
    assert step.traces == 1
    np.testing.assert_allclose(losses, ref, rtol=1e-5)
    np.testing.assert_allclose(params["w"].numpy(), rw, rtol=1e-5, atol=1e-6)


def test_in_place_update_of_an_argument_is_written_back():
    @cv.jit
    def bump(state, x):
        state += x
        return state * 2

    s = cv.zeros(3)
    out = bump(s, cv.ones(3))
    assert s.tolist() == [1.0, 1.0, 1.0] and out.tolist() == [2.0, 2.0, 2.0]
    bump(s, cv.ones(3))
    assert s.tolist() == [2.0, 2.0, 2.0] and bump.traces == 1


def test_failed_trace_leaves_state_untouched():
    w = cv.Tensor([1.0, 2.0], requires_grad=True)

    @cv.jit
    def bad(x):
        with cv.no_grad():
            w.assign(w * x)
        return x.sum().item()  # needs a concrete value: the trace fails

    with pytest.raises(JitError):
        bad(cv.ones(2))
    assert w.tolist() == [1.0, 2.0] and w.is_leaf


@pytest.mark.parametrize("order", ["jit_grad_vmap", "vmap_grad_in_jit"])
def test_jit_composes_with_grad_and_vmap(order):
    def f(w, x):
        return ((x @ w).tanh() ** 2).sum()

    cv.manual_seed(2)
    w, xs = cv.randn(3), cv.randn(5, 4, 3)
    if order == "jit_grad_vmap":
        fn = cv.jit(cv.grad(lambda w, xs: cv.vmap(f, in_axes=(None, 0))(w, xs).sum()))
        want = sum(cv.grad(f)(w, xs[i]).numpy() for i in range(5))
    else:
        fn = cv.jit(cv.vmap(cv.grad(f), in_axes=(None, 0)))
        want = np.stack([cv.grad(f)(w, xs[i]).numpy() for i in range(5)])
    np.testing.assert_allclose(fn(w, xs).numpy(), want, rtol=1e-5, atol=1e-6)
    xs2 = cv.randn(5, 4, 3)
    got2 = fn(w, xs2).numpy()
    want2 = (sum(cv.grad(f)(w, xs2[i]).numpy() for i in range(5)) if order == "jit_grad_vmap"
             else np.stack([cv.grad(f)(w, xs2[i]).numpy() for i in range(5)]))
    np.testing.assert_allclose(got2, want2, rtol=1e-5, atol=1e-6)
    assert fn.traces == 1


def test_jit_inside_grad_is_inlined():
    g = cv.grad(lambda x: cv.jit(lambda y: (y * y).sum())(x))
    np.testing.assert_allclose(g(cv.Tensor([1.0, 2.0])).numpy(), [2.0, 4.0])


def test_in_place_updates_of_tensors_made_inside_the_function():
    @cv.jit
    def f(x):
        y = x * 2
        y += 1  # a local computed from the argument
        acc = cv.zeros(3)
        acc += x  # a local made from constants
        acc += y
        return acc

    for v in (1.0, 2.0):
        assert f(cv.full(3, v)).tolist() == [v + 2 * v + 1] * 3
    assert f.traces == 1


def test_scalar_input_is_read_at_each_call_and_guards_trace_again():
    from corvid.transforms.jit import MAX_PROGRAMS, add_guard, scalar_input

    lr, scale = [0.5], [2.0]

    @cv.jit
    def f(x):
        add_guard(lambda s=scale[0]: scale[0] == s)
        return x * scalar_input(lambda: lr[0], cv.float32) + scale[0]

    assert f(cv.ones(2)).tolist() == [2.5, 2.5]
    lr[0] = 3.0  # read at the call: no new trace
    assert f(cv.ones(2)).tolist() == [5.0, 5.0] and f.traces == 1
    scale[0] = 10.0  # frozen in the program: the guard fails and the function is traced again
    assert f(cv.ones(2)).tolist() == [13.0, 13.0] and f.traces == 2
    for k in range(2 * MAX_PROGRAMS):  # a value that changes at every call: programs do not pile up
        scale[0] = 100.0 + k
        assert f(cv.ones(2)).tolist() == [103.0 + k] * 2
    assert f.traces == 2 + 2 * MAX_PROGRAMS
    assert max(len(caps) for caps in f._cache.values()) == MAX_PROGRAMS
    assert scalar_input(lambda: 1.5, cv.float64).item() == 1.5  # outside a trace: a tensor now
    add_guard(lambda: False)  # outside a trace: nothing happens


def test_a_module_s_integer_buffer_reloaded_is_not_replayed_stale():
    """A non-float buffer is static in a module's tree (keyed by the tensor); load_state_dict rebinds
    the same tensor to a new value, which the jitted function replayed silently (an int8 weight
    of a quantized layer kept its old values). The key follows the value: one retrace."""
    class Scaled(cv.nn.Module):
        def __init__(self, v):
            super().__init__()
            self.register_buffer("factor", cv.Tensor([v], dtype=cv.int64))

        def forward(self, x):
            return x * self.factor

    a, b = Scaled(1), Scaled(5)
    f = cv.jit(lambda m, x: m(x))
    x = cv.ones(2)
    assert f(a, x).tolist() == [1.0, 1.0] and f(a, x).tolist() == [1.0, 1.0]
    assert f.traces == 1
    a.load_state_dict(b.state_dict())
    assert f(a, x).tolist() == [5.0, 5.0] and f(a, x).tolist() == [5.0, 5.0]
    assert f.traces == 2


def test_a_detached_max_under_value_and_grad_does_not_compute_the_forward_twice():
    """``jit(value_and_grad(f))`` with ``z.max().detach()`` in f (what logsumexp and softmax do):
    as many kernels as with the max not detached less the max's one-hot, not a second copy of
    everything below the DETACH (the VARs of value_and_grad were left under it: a language
    model's forward pass ran twice per training step)."""
    rng = np.random.default_rng(0)
    x, w = (cv.Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((64, 128), (128, 256)))

    def counted(detach: bool) -> int:
        def f(p):
            z = p[0] @ p[1]
            m = z.max(1, keepdims=True)
            m = m.detach() if detach else m
            return ((z - m).exp().sum(1, keepdims=True).log() + m).sum()

        jf = cv.jit(cv.value_and_grad(f))
        loss, (gx, gw) = jf((x, w))
        want = cv.value_and_grad(f)((x, w))
        np.testing.assert_allclose(loss.numpy(), want[0].numpy(), rtol=1e-5)
        np.testing.assert_allclose(gw.numpy(), want[1][1].numpy(), rtol=1e-4, atol=1e-5)
        return next(iter(jf._cache.values()))[0].kernels

    assert counted(True) <= counted(False)

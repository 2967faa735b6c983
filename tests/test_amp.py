"""Mixed precision (corvid/amp.py): autocast's dtype policy, gradients to float32 weights,
training in bfloat16 and in float16 with loss scaling, jit and threads."""

import threading

import numpy as np
import pytest

import corvid as cv
from corvid.amp import GradScaler

rng = np.random.default_rng(0)


def t(*shape, seed=0):
    return cv.Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def test_products_narrow_and_float32_ops_widen():
    a, b = t(8, 16), t(16, 4, seed=1)
    with cv.autocast(cv.bfloat16):
        y = a @ b
        p = y.softmax(-1)
        lp = y.log_softmax(-1)
        lse = y.logsumexp(-1)
        lin = cv.nn.functional.linear(a, b.T, t(4, seed=2))
        conv = cv.nn.functional.conv2d(t(1, 2, 6, 6), t(3, 2, 3, 3, seed=3), t(3, seed=4))
        ln = cv.nn.functional.layer_norm(y, (4,))
        ce = cv.nn.functional.cross_entropy(y, cv.Tensor(np.arange(8) % 4))
        mse = cv.nn.functional.mse_loss(y, cv.zeros(8, 4, dtype=cv.bfloat16))
        e = y.exp()  # (elementwise: the usual promotion, bfloat16 in, bfloat16 out)
    assert (y.dtype, lin.dtype, conv.dtype, e.dtype) == (cv.bfloat16,) * 4
    assert {x.dtype for x in (p, lp, lse, ln, ce, mse)} == {cv.float32}
    want = (a.astype(cv.bfloat16) @ b.astype(cv.bfloat16)).numpy()  # the same casts written out
    np.testing.assert_array_equal(y.numpy(), want)
    np.testing.assert_array_equal(p.numpy(), y.astype(cv.float32).softmax(-1).numpy())
    assert (a @ b).dtype == cv.float32  # outside: nothing changes


def test_the_block_forms_and_what_is_refused():
    a = t(4, 4)
    with cv.autocast("cuda", dtype=cv.float16):  # (PyTorch's spelling: the device type is ignored)
        assert (a @ a).dtype == cv.float16
        with cv.autocast(enabled=False):
            assert (a @ a).dtype == cv.float32
        assert cv.amp.autocast_dtype() is cv.float16

    @cv.autocast()
    def f(x):
        return x @ x

    assert f(a).dtype == cv.bfloat16 and cv.amp.autocast_dtype() is None
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        cv.autocast(dtype=cv.float32)
    with pytest.raises(TypeError, match="unsupported dtype 3"):
        cv.autocast(3)
    with pytest.raises(TypeError, match="device_type"):
        cv.autocast(3, dtype=cv.bfloat16)


def test_gradients_reach_the_float32_weights():
    """The casts are ops of the graph: gradients flow through them to float32 parameters, equal
    to those of the same casts written out by hand."""
    cv.manual_seed(0)
    model = cv.nn.Sequential(cv.nn.Linear(16, 32), cv.nn.GELU(), cv.nn.Linear(32, 4))
    x, y = t(8, 16, seed=5), cv.Tensor(np.arange(8) % 4)
    with cv.autocast(cv.bfloat16):
        loss = cv.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    grads = [p.grad.numpy() for p in model.parameters()]
    assert loss.dtype == cv.float32 and all(p.dtype == cv.float32 == p.grad.dtype for p in model.parameters())

    def by_hand(params):
        w1, b1, w2, b2 = (q.astype(cv.bfloat16) for q in params)
        h = cv.nn.functional.gelu(x.astype(cv.bfloat16) @ w1.T + b1)
        return cv.nn.functional.cross_entropy((h @ w2.T + b2).astype(cv.float32), y)

    want = cv.grad(by_hand)([p.detach() for p in model.parameters()])
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-6, atol=1e-7)


def _blobs(n=256, seed=0):
    r = np.random.default_rng(seed)
    centers = r.standard_normal((4, 10)) * 3
    labels = r.integers(0, 4, n)
    return (centers[labels] + r.standard_normal((n, 10))).astype(np.float32), labels


def _train(dtype=None, scaler=None, steps=40):
    cv.manual_seed(1)
    model = cv.nn.Sequential(cv.nn.Linear(10, 64), cv.nn.ReLU(), cv.nn.Linear(64, 4))
    opt = cv.optim.Adam(model.parameters(), lr=3e-3)
    x, y = (cv.Tensor(a) for a in _blobs())
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with cv.autocast(dtype=dtype or cv.bfloat16, enabled=dtype is not None):
            loss = cv.nn.functional.cross_entropy(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        losses.append(loss.item())
    assert all(p.dtype == cv.float32 for p in model.parameters())
    assert all(v.dtype == cv.float32 for st in opt.state.values() for v in st.values() if isinstance(v, cv.Tensor))
    return losses


def test_training_in_bfloat16_and_float16_follows_float32_training():
    full = _train()
    bf16 = _train(cv.bfloat16)
    fp16 = _train(cv.float16, GradScaler(init_scale=2.0 ** 12, growth_interval=10))
    assert full[-1] < 0.2 * full[0]
    for low in (bf16, fp16):
        assert low[-1] < 0.2 * low[0]
        assert abs(low[-1] - full[-1]) < 0.15 * full[0]


def test_the_scaler_skips_steps_that_overflow_and_adapts_its_scale():
    cv.manual_seed(2)
    model = cv.nn.Linear(10, 4)
    opt = cv.optim.SGD(model.parameters(), lr=0.1)
    x, y = (cv.Tensor(a) for a in _blobs(32))
    before = [p.numpy().copy() for p in model.parameters()]
    scaler = GradScaler(init_scale=2.0 ** 30, growth_interval=2)

    def step():
        opt.zero_grad()
        with cv.autocast(dtype=cv.float16):
            loss = cv.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        return scaler.step(opt)

    step()  # 2**30 times the loss overflows float16 on the way back: the step is skipped
    assert all(np.array_equal(p.numpy(), b) for p, b in zip(model.parameters(), before))
    scaler.update()
    assert scaler.get_scale() == 2.0 ** 29
    scaler.update(new_scale=256.0)
    for _ in range(2):  # two good steps in a row: the scale grows
        step()
        scaler.update()
    assert scaler.get_scale() == 512.0
    assert not all(np.array_equal(p.numpy(), b) for p, b in zip(model.parameters(), before))
    opt.zero_grad()
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already"):
        scaler.unscale_(opt)
    state = scaler.state_dict()
    other = GradScaler()
    other.load_state_dict(state)
    assert other.get_scale() == 512.0 and other.state_dict() == state
    off = GradScaler(enabled=False)
    loss = model(x).sum()
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}
    with pytest.raises(ValueError, match="backoff_factor"):
        GradScaler(backoff_factor=2.0)


def test_a_jitted_function_is_traced_again_under_another_autocast_dtype():
    f = cv.jit(lambda x, w: (x @ w).relu())
    a, b = t(4, 8), t(8, 3, seed=1)
    assert f(a, b).dtype == cv.float32
    with cv.autocast(cv.bfloat16):
        got = f(a, b)
        assert got.dtype == cv.bfloat16 and f(a, b).dtype == cv.bfloat16
    assert f(a, b).dtype == cv.float32 and f.traces == 2
    np.testing.assert_array_equal(got.numpy(), (a.astype(cv.bfloat16) @ b.astype(cv.bfloat16)).relu().numpy())


def test_autocast_belongs_to_the_thread_that_entered_it():
    a, seen = t(4, 4), []
    with cv.autocast(cv.bfloat16):
        worker = threading.Thread(target=lambda: seen.append((a @ a).dtype))
        worker.start()
        worker.join()
        assert (a @ a).dtype == cv.bfloat16
    assert seen == [cv.float32]


def test_autocast_matches_pytorch_on_the_cpu():
    """The product's dtype and values as torch.autocast gives them (corvid's float32 list is
    PyTorch's CUDA one on every device: torch's CPU autocast keeps softmax in bfloat16)."""
    torch = pytest.importorskip("torch")
    a, b = np.random.default_rng(3).standard_normal((2, 64, 32)).astype(np.float32)[0], \
        np.random.default_rng(4).standard_normal((32, 16)).astype(np.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = torch.from_numpy(a) @ torch.from_numpy(b)
    with cv.autocast(cv.bfloat16):
        got = cv.Tensor(a) @ cv.Tensor(b)
    assert str(ref.dtype) == "torch.bfloat16" and got.dtype == cv.bfloat16
    np.testing.assert_allclose(got.astype(cv.float32).numpy(), ref.float().numpy(), rtol=1e-2, atol=1e-2)


def test_a_jitted_float16_step_scales_its_loss_without_a_host_sync():
    """DynamicLossScale in a functional jitted step: overflowed steps leave parameters and
    optimizer state as they were and halve the scale; good ones train; one trace."""
    cv.manual_seed(3)
    model = cv.nn.Sequential(cv.nn.Linear(10, 32), cv.nn.ReLU(), cv.nn.Linear(32, 4))
    tx = cv.optim.Adam.functional(lr=3e-3)
    ls = cv.amp.DynamicLossScale(init_scale=2.0 ** 40, growth_interval=3)
    x, y = (cv.Tensor(a) for a in _blobs(128))

    @cv.jit
    def step(model, opt_state, scale_state):
        def loss_fn(m):
            with cv.autocast(dtype=cv.float16):
                return ls.scale(cv.nn.functional.cross_entropy(m(x), y), scale_state)
        scaled, grads = cv.value_and_grad(loss_fn)(model)
        grads, finite = ls.unscale(grads, scale_state)
        new = tx.update(grads, opt_state, model)
        model, opt_state = ls.select(finite, new, (model, opt_state))
        return model, opt_state, ls.update(scale_state, finite), scaled / scale_state["scale"], finite

    opt_state, scale_state = tx.init(model), ls.init()
    w0 = model[0].weight.numpy().copy()
    model, opt_state, scale_state, loss, finite = step(model, opt_state, scale_state)
    assert not finite.item() and scale_state["scale"].item() == 2.0 ** 39  # (overflowed: skipped)
    np.testing.assert_array_equal(model[0].weight.numpy(), w0)
    scales, losses = [], []
    for _ in range(40):
        model, opt_state, scale_state, loss, finite = step(model, opt_state, scale_state)
        scales.append(scale_state["scale"].item())
        losses.append(loss.item()) if finite.item() else None
    assert step.traces == 1
    assert min(scales) < 2.0 ** 20 and losses and losses[-1] < 0.5 * losses[0]
    grew = [b / a for a, b in zip(scales, scales[1:]) if b > a]
    assert grew and all(g == 2.0 for g in grew)  # (after 3 good steps in a row)

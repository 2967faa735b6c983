"""Optimizers against reference formulas written here in numpy (several steps, weight decay and
momentum variants), against PyTorch when it is installed, the functional form (jit, grad), state
dicts through cv.save, parameter groups, and the compile/kernel budget of a step."""

import math

import numpy as np
import pytest

import corvid as cv
from corvid.engine import realize as engine_realize
from corvid.engine import schedule as engine_schedule
from corvid.optim import LAMB, SGD, Adagrad, Adam, AdamW, Lion, RMSprop
from corvid.runtime import compiler

try:
    import torch
except ImportError:  # the oracle is optional
    torch = None

SHAPES = [(3, 4), (4,)]
A = [np.random.default_rng(10 + i).uniform(0.5, 2.0, s) for i, s in enumerate(SHAPES)]
B = [np.random.default_rng(20 + i).standard_normal(s) for i, s in enumerate(SHAPES)]
START = [np.random.default_rng(30 + i).standard_normal(s) for i, s in enumerate(SHAPES)]
STEPS = 4


def loss_fn(params):
    """sum(a p**2 + b p): gradient 2 a p + b, different per element."""
    return sum(((cv.Tensor(a) * p * p) + cv.Tensor(b) * p).sum() for p, a, b in zip(params, A, B))


def np_grad(i, p):
    return 2 * A[i] * p + B[i]


# --- reference formulas (numpy, float64) ------------------------------------------------------------------
def ref_sgd(p, g, st, t, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    g = g + weight_decay * p
    if momentum:
        st["buf"] = g.copy() if t == 1 else momentum * st["buf"] + (1 - dampening) * g
        g = g + momentum * st["buf"] if nesterov else st["buf"]
    return p - lr * g


def ref_adam(p, g, st, t, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, decoupled=False):
    b1, b2 = betas
    if decoupled:
        p = p * (1 - lr * weight_decay)
    else:
        g = g + weight_decay * p
    st["m"] = b1 * st.get("m", 0) + (1 - b1) * g
    st["v"] = b2 * st.get("v", 0) + (1 - b2) * g * g
    v = st["v"]
    if amsgrad:
        st["vmax"] = v = np.maximum(st.get("vmax", 0), v)
    return p - lr / (1 - b1 ** t) * st["m"] / (np.sqrt(v / (1 - b2 ** t)) + eps)


def ref_lamb(p, g, st, t, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, norm_bounds=(0.0, math.inf)):
    """The paper's update: trust ratio phi(||w||) / ||r|| with phi(z) = min(max(z, lower), upper),
    1 when either norm is 0."""
    b1, b2 = betas
    st["m"] = b1 * st.get("m", 0) + (1 - b1) * g
    st["v"] = b2 * st.get("v", 0) + (1 - b2) * g * g
    r = st["m"] / (1 - b1 ** t) / (np.sqrt(st["v"] / (1 - b2 ** t)) + eps) + weight_decay * p
    pn, rn = min(max(np.linalg.norm(p), norm_bounds[0]), norm_bounds[1]), np.linalg.norm(r)
    return p - lr * (pn / rn if pn > 0 and rn > 0 else 1.0) * r


def ref_rmsprop(p, g, st, t, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
    g = g + weight_decay * p
    st["sq"] = alpha * st.get("sq", 0) + (1 - alpha) * g * g
    avg = st["sq"]
    if centered:
        st["ga"] = alpha * st.get("ga", 0) + (1 - alpha) * g
        avg = avg - st["ga"] ** 2
    step = g / (np.sqrt(avg) + eps)
    if momentum:
        st["buf"] = step = momentum * st.get("buf", 0) + step
    return p - lr * step


def ref_adagrad(p, g, st, t, lr, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10):
    g = g + weight_decay * p
    st["sum"] = st.get("sum", initial_accumulator_value) + g * g
    return p - lr / (1 + (t - 1) * lr_decay) * g / (np.sqrt(st["sum"]) + eps)


def ref_lion(p, g, st, t, lr, betas=(0.9, 0.99), weight_decay=0.0):
    b1, b2 = betas
    m = st.get("m", 0)
    p = p * (1 - lr * weight_decay) - lr * np.sign(b1 * m + (1 - b1) * g)
    st["m"] = b2 * m + (1 - b2) * g
    return p


CASES = [
    (SGD, ref_sgd, dict(lr=0.1)),
    (SGD, ref_sgd, dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.1)),
    (SGD, ref_sgd, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01)),
    (Adam, ref_adam, dict(lr=0.1, weight_decay=0.1)),
    (Adam, ref_adam, dict(lr=0.1, betas=(0.8, 0.9), amsgrad=True)),
    (AdamW, lambda *a, **k: ref_adam(*a, decoupled=True, **k), dict(lr=0.1, weight_decay=0.3)),
    (LAMB, ref_lamb, dict(lr=0.1, weight_decay=0.05)),
    (LAMB, ref_lamb, dict(lr=0.1, betas=(0.8, 0.95), norm_bounds=(0.5, 2.0))),
    (RMSprop, ref_rmsprop, dict(lr=0.01)),
    (RMSprop, ref_rmsprop, dict(lr=0.01, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.1)),
    (Adagrad, ref_adagrad, dict(lr=0.1, lr_decay=0.1, weight_decay=0.05, initial_accumulator_value=0.2)),
    (Lion, ref_lion, dict(lr=0.01, weight_decay=0.5)),
]
IDS = [f"{cls.__name__}-{i}" for i, (cls, _, _) in enumerate(CASES)]


def reference_trajectory(ref, hp, steps=STEPS):
    params = [p.copy() for p in START]
    states = [{} for _ in params]
    out = []
    for t in range(1, steps + 1):
        params = [ref(p, np_grad(i, p), states[i], t, **hp) for i, p in enumerate(params)]
        out.append([p.copy() for p in params])
    return out


def run_stateful(opt, params, steps=STEPS):
    out = []
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(params).backward()
        opt.step()
        out.append([p.numpy() for p in params])
    return out


def fresh_params():
    return [cv.Tensor(p, requires_grad=True) for p in START]


@pytest.mark.parametrize("cls,ref,hp", CASES, ids=IDS)
def test_steps_match_reference_formulas(cls, ref, hp):
    params = fresh_params()
    got = run_stateful(cls(params, **hp), params)
    for step_got, step_ref in zip(got, reference_trajectory(ref, hp)):
        for g, r in zip(step_got, step_ref):
            np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
@pytest.mark.parametrize("cls,ref,hp", [c for c in CASES if c[0] not in (LAMB, Lion)],
                         ids=[i for i, c in zip(IDS, CASES) if c[0] not in (LAMB, Lion)])
def test_steps_match_torch(cls, ref, hp):
    params = fresh_params()
    got = run_stateful(cls(params, **hp), params)
    tparams = [torch.tensor(p, requires_grad=True) for p in START]
    topt = getattr(torch.optim, cls.__name__)(tparams, **hp)
    for step in range(STEPS):
        topt.zero_grad()
        sum((torch.tensor(a) * p * p + torch.tensor(b) * p).sum() for p, a, b in zip(tparams, A, B)).backward()
        topt.step()
        for g, tp in zip(got[step], tparams):
            np.testing.assert_allclose(g, tp.detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cls,ref,hp", CASES, ids=IDS)
def test_functional_form_follows_the_same_trajectory(cls, ref, hp):
    tx = cls.functional(**hp)
    params = {"a": cv.Tensor(START[0]), "b": cv.Tensor(START[1])}
    state = tx.init(params)
    expected = reference_trajectory(ref, hp, steps=2)
    for step in range(2):
        grads = cv.grad(lambda p: loss_fn([p["a"], p["b"]]))(params)
        params, state = tx.update(grads, state, params)
        np.testing.assert_allclose(params["a"].numpy(), expected[step][0], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(params["b"].numpy(), expected[step][1], rtol=1e-10, atol=1e-12)
    assert int(state["step"].item()) == 2


def test_functional_update_under_jit_and_grad():
    tx = Adam.functional(lr=0.1, weight_decay=0.1)

    def train_step(params, state):
        grads = cv.grad(lambda p: loss_fn([p["a"], p["b"]]))(params)
        return tx.update(grads, state, params)

    step = cv.jit(train_step)
    params = {"a": cv.Tensor(START[0]), "b": cv.Tensor(START[1])}
    state = tx.init(params)
    expected = reference_trajectory(ref_adam, dict(lr=0.1, weight_decay=0.1), steps=3)
    for t in range(3):
        params, state = step(params, state)
        np.testing.assert_allclose(params["a"].numpy(), expected[t][0], rtol=1e-10)
    state["lr"] = cv.Tensor(0.0, dtype=cv.float64)  # a schedule changes the rate without retracing
    before = params["b"].numpy()
    params, state = step(params, state)
    np.testing.assert_array_equal(params["b"].numpy(), before)
    # the update is differentiable: d(sum of new params)/d(params) through one SGD step is 1 - lr * 2a
    sgd = SGD.functional(lr=0.1)
    g = cv.grad(lambda p: sgd.update(cv.grad(lambda q: loss_fn([q, cv.Tensor(START[1])]))(p), sgd.init(p), p)[0]
                .sum())(cv.Tensor(START[0]))
    np.testing.assert_allclose(g.numpy(), 1 - 0.1 * 2 * A[0], rtol=1e-12)


def test_lamb_trust_ratio_is_per_tensor_and_falls_back_to_one():
    # one step from fixed gradients: m_hat = g, v_hat = g**2, so r = g / (|g| + eps), sign(g) to 1e-12
    w = cv.Tensor([[3.0, 4.0]], dtype=cv.float64, requires_grad=True)  # ||w|| = 5
    zero = cv.Tensor([0.0, 0.0], dtype=cv.float64, requires_grad=True)  # ||w|| = 0: ratio 1
    still = cv.Tensor([1.0, 2.0], dtype=cv.float64, requires_grad=True)  # zero gradient: r = 0, ratio 1
    opt = LAMB([w, zero, still], lr=0.1, eps=1e-12)
    w.grad, zero.grad, still.grad = cv.Tensor([[1.0, -2.0]]), cv.Tensor([2.0, -0.5]), cv.Tensor([0.0, 0.0])
    opt.step()
    r = np.array([1.0, -1.0])
    np.testing.assert_allclose(w.numpy(), [[3.0, 4.0]] - 0.1 * 5 / np.sqrt(2) * r, rtol=1e-10)
    np.testing.assert_allclose(zero.numpy(), -0.1 * r, rtol=1e-10)
    assert still.tolist() == [1.0, 2.0]
    bounded = cv.Tensor([[3.0, 4.0]], dtype=cv.float64, requires_grad=True)
    floor = cv.Tensor([0.0, 0.0], dtype=cv.float64, requires_grad=True)
    opt = LAMB([bounded, floor], lr=0.1, eps=1e-12, norm_bounds=(0.5, 2.0))  # phi(5) = 2, phi(0) = 0.5
    bounded.grad, floor.grad = cv.Tensor([[1.0, -2.0]]), cv.Tensor([2.0, -0.5])
    opt.step()
    np.testing.assert_allclose(bounded.numpy(), [[3.0, 4.0]] - 0.1 * 2 / np.sqrt(2) * r, rtol=1e-10)
    np.testing.assert_allclose(floor.numpy(), -0.1 * 0.5 / np.sqrt(2) * r, rtol=1e-10)
    for bad in [(2.0, 1.0), (-1.0, 1.0), (1.0,)]:
        with pytest.raises(ValueError, match="norm_bounds"):
            LAMB([w], norm_bounds=bad)


# --- the PyTorch-style step inside cv.jit ----------------------------------------------------------------
JIT_CASES = [(Adam, dict(lr=0.05, weight_decay=0.01, amsgrad=True)), (AdamW, dict(lr=0.05)),
             (SGD, dict(lr=0.1, momentum=0.9, nesterov=True)), (SGD, dict(lr=0.1, momentum=0.5, dampening=0.2)),
             (LAMB, dict(lr=0.05, weight_decay=0.1)), (RMSprop, dict(lr=0.01, momentum=0.5, centered=True)),
             (Adagrad, dict(lr=0.1, lr_decay=0.05)), (Lion, dict(lr=0.01, weight_decay=0.1))]


def _mlp():
    cv.manual_seed(0)
    return cv.nn.Sequential(cv.nn.Linear(4, 8), cv.nn.ReLU(), cv.nn.Linear(8, 3))


def _batches(n=6):
    cv.manual_seed(1)
    return [(cv.randn(16, 4).realize(), cv.randint(0, 3, (16,)).realize()) for _ in range(n)]


def _train(cls, hp, jitted, batches, schedule=True):
    model = _mlp()
    opt = cls(model.parameters(), **hp)
    sched = cv.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5) if schedule else None
    loss_fn = cv.nn.CrossEntropyLoss()

    def train_step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    step = cv.jit(train_step) if jitted else train_step
    losses = []
    for x, y in batches:
        losses.append(step(x, y).item())
        if sched is not None:
            sched.step()
    return model, opt, losses, step


@pytest.mark.parametrize("cls,hp", JIT_CASES, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(JIT_CASES)])
def test_pytorch_style_training_step_under_jit_matches_eager(cls, hp):
    batches = _batches()
    model, opt, losses, _ = _train(cls, hp, False, batches)
    jmodel, jopt, jlosses, step = _train(cls, hp, True, batches)
    np.testing.assert_allclose(jlosses, losses, rtol=1e-5)
    for p, q in zip(jmodel.parameters(), model.parameters()):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-5, atol=1e-6)
    assert step.traces == 2  # the first call has no .grad yet; the learning rate changes retrace nothing
    assert jopt.param_groups[0]["lr"] == opt.param_groups[0]["lr"] == hp["lr"] / 8
    for p in jmodel.parameters():
        assert int(jopt.state[p]["step"].item()) == 6 and p.grad is not None and p.is_leaf
    sd = jopt.state_dict()  # a jitted optimizer saves and restores like an eager one
    again = cls(_mlp().parameters(), **hp)
    again.load_state_dict(cv.optim.flatten_state_dict(sd))
    assert again.state[next(iter(again.state))]["step"] == 6


def test_pytorch_style_jitted_training_matches_torch():
    torch = pytest.importorskip("torch")
    batches = _batches(4)
    model, _, losses, _ = _train(Adam, dict(lr=0.05, weight_decay=0.01), True, batches, schedule=False)
    ref = _mlp()
    tmodel = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    tmodel.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    topt = torch.optim.Adam(tmodel.parameters(), lr=0.05, weight_decay=0.01)
    tlosses = []
    for x, y in batches:
        topt.zero_grad()
        loss = torch.nn.functional.cross_entropy(tmodel(torch.tensor(x.numpy())), torch.tensor(y.numpy()))
        loss.backward()
        topt.step()
        tlosses.append(loss.item())
    np.testing.assert_allclose(losses, tlosses, rtol=1e-5)
    for (name, p), tp in zip(model.named_parameters(), tmodel.parameters()):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_jitted_step_reads_gradients_computed_outside_and_mixes_with_eager_steps():
    def run(jit_steps):
        params = fresh_params()
        opt = Adam(params, lr=0.1, betas=(0.8, 0.9))
        step = cv.jit(opt.step)
        out = []
        for t in range(5):
            opt.zero_grad()
            loss_fn(params).backward()  # outside the jitted function: a new gradient each time
            (step if t in jit_steps else opt.step)()
            out.append([p.numpy() for p in params])
        return out, step.traces

    eager, _ = run(())
    mixed, traces = run((0, 1, 3, 4))  # jitted, jitted, eager, jitted, jitted
    assert traces == 1
    for a, b in zip(mixed, eager):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-12)
    np.testing.assert_allclose(eager[-1][0], reference_trajectory(ref_adam, dict(lr=0.1, betas=(0.8, 0.9)),
                                                                  steps=5)[-1][0], rtol=1e-10)


def test_jitted_step_traces_again_when_frozen_state_changes():
    params = fresh_params()
    opt = SGD(params, lr=0.1, momentum=0.9)
    ref_params = fresh_params()
    ref = SGD(ref_params, lr=0.1, momentum=0.9)

    @cv.jit
    def step():
        opt.zero_grad()
        loss_fn(params).backward()
        opt.step()

    def both():
        step()
        ref.zero_grad()
        loss_fn(ref_params).backward()
        ref.step()
        for p, q in zip(params, ref_params):
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-12)

    both(), both()
    assert step.traces == 2
    for o in (opt, ref):
        o.param_groups[0]["momentum"] = 0.5  # a hyperparameter frozen into the program: trace again
    both()
    assert step.traces == 3
    saved = opt.state_dict()
    for o in (opt, ref):  # new state tensors: the old program would read the ones it captured
        o.load_state_dict(saved)
    both(), both()
    assert step.traces == 4


def test_functional_rejects_unknown_hyperparameters():
    with pytest.raises(TypeError, match="momentun"):
        SGD.functional(lr=0.1, momentun=0.9)
    with pytest.raises(ValueError, match="betas"):
        Adam.functional(betas=(1.5, 0.9))


@pytest.mark.parametrize("fmt", ["safetensors", "npz"])
def test_state_dict_round_trip_through_cv_save(tmp_path, fmt):
    hp = dict(lr=0.1, betas=(0.8, 0.9), weight_decay=0.1, amsgrad=True)
    params = fresh_params()
    opt = Adam([{"params": [params[0]]}, {"params": [params[1]], "lr": 0.05}], **hp)
    sched = cv.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
    run_stateful(opt, params, steps=2)
    sched.step()
    path = tmp_path / f"opt.{fmt}"
    cv.save(path, cv.optim.flatten_state_dict(opt.state_dict()))
    cv.save(tmp_path / f"sched.{fmt}", cv.optim.flatten_state_dict(sched.state_dict()))
    resumed = [cv.Tensor(p.numpy(), requires_grad=True) for p in params]
    continued = run_stateful(opt, params, steps=2)

    opt2 = Adam([{"params": [resumed[0]]}, {"params": [resumed[1]], "lr": 0.05}], **hp)
    sched2 = cv.optim.lr_scheduler.ExponentialLR(opt2, gamma=0.5)
    opt2.load_state_dict(cv.load(path))
    sched2.load_state_dict(cv.load(tmp_path / f"sched.{fmt}"))
    assert opt2.param_groups[1]["lr"] == opt.param_groups[1]["lr"] == 0.025
    assert opt2.param_groups[0]["betas"] == (0.8, 0.9) and opt2.param_groups[0]["amsgrad"] is True
    assert sched2.last_epoch == 1 and sched2.get_last_lr() == [0.05, 0.025]
    assert opt2.state[resumed[0]]["step"] == 2
    for a, b in zip(run_stateful(opt2, resumed, steps=2), continued):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_state_dict_layout_and_validation():
    params = fresh_params()
    opt = SGD(params, lr=0.1, momentum=0.9)
    run_stateful(opt, params, steps=1)
    sd = opt.state_dict()
    assert sd["param_groups"][0]["params"] == [0, 1] and sd["param_groups"][0]["lr"] == 0.1
    assert set(sd["state"][0]) == {"step", "momentum_buffer"} and sd["state"][0]["step"] == 1
    flat = cv.optim.flatten_state_dict(sd)
    assert flat["state.1.momentum_buffer"].shape == (4,) and flat["param_groups.0.params"].tolist() == [0, 1]
    with pytest.raises(ValueError, match="parameter groups"):
        SGD([{"params": [params[0]]}, {"params": [params[1]]}], lr=0.1).load_state_dict(sd)
    with pytest.raises(TypeError, match="only tensors"):
        cv.optim.flatten_state_dict({"name": "adam"})


def test_param_groups_zero_grad_and_validation():
    params = fresh_params()
    opt = SGD([{"params": [params[0]], "lr": 0.0}, {"params": [params[1]]}], lr=0.1)
    loss_fn(params).backward()
    opt.step()
    np.testing.assert_array_equal(params[0].numpy(), START[0].astype(np.float64))
    np.testing.assert_allclose(params[1].numpy(), START[1] - 0.1 * np_grad(1, START[1]), rtol=1e-12)
    opt.zero_grad(set_to_none=False)
    assert params[0].grad.tolist() == np.zeros((3, 4)).tolist()
    opt.zero_grad()
    assert params[0].grad is None and params[1].grad is None
    opt.step()  # no gradients: nothing moves, nothing fails
    with pytest.raises(ValueError, match="more than once"):
        SGD([params[0], params[0]], lr=0.1)
    with pytest.raises(ValueError, match="learning rate"):
        Adam(params, lr=-1.0)
    with pytest.raises(TypeError, match="unknown hyperparameters"):
        SGD([{"params": params, "momentun": 0.9}])
    with pytest.raises(ValueError, match="empty"):
        Adam([])
    with pytest.raises(ValueError, match="Nesterov"):
        SGD(params, nesterov=True)


def test_step_with_closure_returns_the_loss():
    params = fresh_params()
    opt = SGD(params, lr=0.1)

    def closure():
        opt.zero_grad()
        loss = loss_fn(params)
        loss.backward()
        return loss

    with cv.no_grad():
        loss = opt.step(closure)
    assert math.isclose(loss.item(), float(sum((a * p * p + b * p).sum() for p, a, b in zip(START, A, B))))


def test_a_step_is_one_realize_and_later_steps_compile_nothing(monkeypatch):
    shapes = [(5, 7), (7,), (7, 3), (3,)] * 3  # 12 float32 parameters (four distinct shapes)
    params = [cv.Tensor(np.random.default_rng(i).standard_normal(s).astype(np.float32), requires_grad=True)
              for i, s in enumerate(shapes)]
    opt = Adam(params, lr=0.1)
    sched = cv.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.0, total_iters=2)  # lr reaches 0
    runs = []
    original = engine_realize.plan_for  # (each realize plans once: the kernels it runs)

    def plan_for(*a, **kw):
        found = original(*a, **kw)
        runs.append(0 if found is None else len(found[3]))
        return found

    monkeypatch.setattr(engine_realize, "plan_for", plan_for)
    compiled = []
    for _ in range(3):
        for p in params:
            p.grad = cv.Tensor(np.ones(p.shape, np.float32))
        runs.clear()
        before = (len(compiler._loaded), len(engine_schedule._cache))
        opt.step()
        compiled.append((len(compiler._loaded) - before[0], len(engine_schedule._cache) - before[1]))
        assert runs == [len(params)]  # one schedule, one kernel per parameter storing it, exp_avg and exp_avg_sq
        sched.step()
    assert compiled[1] == compiled[2] == (0, 0)
    assert opt.param_groups[0]["lr"] == 0.0

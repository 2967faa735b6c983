"""corvid.nn.Module: parameter discovery, state dicts, modes, copies, and modules as pytrees under
grad / jit / vmap / functional_call. PyTorch, when installed, is an extra oracle for state-dict
names (its absence skips only those checks)."""

import copy

import numpy as np
import pytest

import corvid as cv
from corvid import nn
from corvid.tree import tree_flatten, tree_map, tree_unflatten


class Block(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.scale = nn.Parameter(cv.ones(n))
        self.register_buffer("steps", cv.zeros((), dtype=cv.int64))
        self.register_buffer("cache", cv.zeros(n), persistent=False)

    def forward(self, x):
        return self.lin(x) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Block()
        self.listed = [Block(), nn.ReLU()]
        self.named = {"a": Block()}
        self.mlist = nn.ModuleList([nn.Linear(3, 3)])
        self.head = nn.Linear(3, 2)

    def forward(self, x):
        x = self.first(x)
        for m in self.listed:
            x = m(x)
        x = self.named["a"](x)
        x = self.mlist[0](x)
        return self.head(x)


def _names(pairs):
    return [n for n, _ in pairs]


# --- Parameter ---------------------------------------------------------------------------------------


def test_parameter_is_a_leaf_that_requires_grad_and_is_computed_once():
    p = nn.Parameter(cv.randn(2, 3))
    assert isinstance(p, cv.Tensor) and p.requires_grad and p.is_leaf
    assert p.node.buffer is not None  # drawn once, not recomputed by every kernel that reads it
    q = nn.Parameter(p)  # shares the value, not the gradient history
    (q * 2).sum().backward()
    assert p.grad is None and q.grad.tolist() == [[2.0] * 3] * 2
    frozen = nn.Parameter(np.ones(2, np.float32), requires_grad=False)
    assert not frozen.requires_grad and frozen.tolist() == [1.0, 1.0]
    assert repr(nn.Parameter(cv.zeros(1))).startswith("Parameter containing:\nTensor(")
    assert type(p * 1) is cv.Tensor and type(p.detach()) is cv.Tensor


# --- discovery ---------------------------------------------------------------------------------------


def test_parameters_found_in_attributes_lists_dicts_and_containers():
    net = Net()
    assert _names(net.named_parameters()) == [  # torch's order: a module's own, then its children's
        "first.scale", "first.lin.weight", "first.lin.bias", "listed.0.scale", "listed.0.lin.weight",
        "listed.0.lin.bias", "named.a.scale", "named.a.lin.weight", "named.a.lin.bias", "mlist.0.weight",
        "mlist.0.bias", "head.weight", "head.bias"]
    assert _names(net.named_children()) == ["first", "listed.0", "listed.1", "named.a", "mlist", "head"]
    assert _names(net.named_modules())[:4] == ["", "first", "first.lin", "listed.0"]
    assert len(list(net.parameters())) == 13
    assert _names(net.named_buffers()) == ["first.steps", "first.cache", "listed.0.steps", "listed.0.cache",
                                           "named.a.steps", "named.a.cache"]
    assert net(cv.ones(2, 3)).shape == (2, 2)


def test_shared_parameters_and_modules_are_listed_once():
    lin = nn.Linear(2, 2)
    seq = nn.Sequential(lin, nn.ReLU(), lin)
    assert _names(seq.named_parameters()) == ["0.weight", "0.bias"]
    assert len(list(seq.modules())) == 3
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]  # as torch: every name


def test_registration_rules_and_errors():
    m = nn.Module()
    m.w = nn.Parameter(cv.ones(2))
    m.w = cv.zeros(2)  # a tensor assigned to a parameter keeps it registered (functional updates)
    assert _names(m.named_parameters()) == ["w"]
    with pytest.raises(TypeError, match="parameter 'w'"):
        m.w = 3.0
    m.plain = cv.ones(2)  # a plain tensor attribute is not registered
    assert "plain" not in dict(m.named_parameters()) and "plain" not in dict(m.named_buffers())
    with pytest.raises(KeyError, match="already exists"):
        m.register_buffer("plain", cv.ones(1))
    with pytest.raises(TypeError, match="nn.Parameter"):
        m.register_parameter("b", cv.ones(1))
    with pytest.raises(KeyError, match="without '.'"):
        m.register_buffer("a.b", cv.ones(1))
    del m.w
    assert list(m.named_parameters()) == []

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(cv.ones(1))

    with pytest.raises(AttributeError, match="super\\(\\).__init__"):
        Early()
    with pytest.raises(NotImplementedError, match="forward"):
        nn.Module()(1)


def test_containers():
    ml = nn.ModuleList([nn.ReLU()])
    ml.append(nn.Tanh()).extend([nn.Sigmoid()])
    ml.insert(0, nn.Identity())
    assert [type(m).__name__ for m in ml] == ["Identity", "ReLU", "Tanh", "Sigmoid"]
    assert type(ml[-1]).__name__ == "Sigmoid" and len(ml[1:3]) == 2
    del ml[0]
    with pytest.raises(TypeError, match="Module"):
        ml.append(3)
    with pytest.raises(IndexError):
        ml[5]
    md = nn.ModuleDict({"x": nn.Linear(1, 1)})
    md["y"] = nn.Linear(1, 2)
    assert list(md) == ["x", "y"] and "y" in md and list(md.state_dict())[2] == "y.weight"
    assert type(md.pop("x")).__name__ == "Linear" and len(md) == 1
    from collections import OrderedDict

    seq = nn.Sequential(OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.ReLU())]))
    assert list(seq.state_dict()) == ["fc.weight", "fc.bias"] and isinstance(seq[1], nn.ReLU)
    assert list(seq[:1].state_dict()) == ["fc.weight", "fc.bias"]


def test_repr_is_nested_like_torch():
    net = Net()
    text = repr(net)
    assert text.startswith("Net(\n  (first): Block(\n    (lin): Linear(in_features=3, out_features=3, bias=True)")
    assert "(listed.1): ReLU()" in text and "(mlist): ModuleList(\n    (0): Linear(" in text


# --- state dicts -------------------------------------------------------------------------------------


def test_state_dict_round_trip_shares_memory_and_saves(tmp_path):
    net = Net()
    sd = net.state_dict()
    assert "first.cache" not in sd and "first.steps" in sd  # non-persistent buffers are left out
    assert sd["head.weight"].node.buffer is net.head.weight.node.buffer  # no copy
    assert not sd["head.weight"].requires_grad
    assert net.state_dict(keep_vars=True)["head.weight"] is net.head.weight
    other = Net()
    weight = other.head.weight
    assert other.load_state_dict(sd) == nn.IncompatibleKeys([], [])
    assert other.head.weight is weight  # parameters keep their identity (optimizers keep working)
    x = cv.randn(4, 3)
    np.testing.assert_array_equal(net(x).numpy(), other(x).numpy())
    cv.save(tmp_path / "m.safetensors", net.state_dict())
    third = Net()
    third.load_state_dict(cv.load(tmp_path / "m.safetensors"))
    np.testing.assert_array_equal(net(x).numpy(), third(x).numpy())


def test_load_state_dict_errors_name_every_problem():
    lin = nn.Linear(2, 3)
    good = {"weight": np.ones((3, 2)), "bias": np.zeros(3)}
    with pytest.raises(RuntimeError) as e:
        lin.load_state_dict({"weight": np.ones((2, 3)), "extra": np.ones(1)})
    msg = str(e.value)
    assert "Error(s) in loading state_dict for Linear" in msg
    assert 'Missing key(s) in state_dict: "bias".' in msg
    assert 'Unexpected key(s) in state_dict: "extra".' in msg
    assert "size mismatch for weight: copying a value with shape (2, 3) from the state dict, the shape in the " \
           "current model is (3, 2)." in msg
    before = lin.weight.numpy().copy()
    np.testing.assert_array_equal(lin.weight.numpy(), before)  # nothing was loaded
    res = lin.load_state_dict({"weight": good["weight"], "extra": 1}, strict=False)
    assert res.missing_keys == ["bias"] and res.unexpected_keys == ["extra"]
    np.testing.assert_array_equal(lin.weight.numpy(), np.ones((3, 2)))
    with pytest.raises(RuntimeError, match="size mismatch"):  # shapes are checked even when not strict
        lin.load_state_dict({"weight": np.ones(2)}, strict=False)
    lin.load_state_dict({k: v.astype(np.float64) for k, v in good.items()})  # cast to the parameter's dtype
    assert lin.weight.dtype == cv.float32


def test_load_state_dict_assign_holds_the_given_tensors():
    lin = nn.Linear(2, 1)
    w = cv.Tensor([[1.0, 2.0]])
    lin.load_state_dict({"weight": w, "bias": cv.zeros(1)}, assign=True)
    assert isinstance(lin.weight, nn.Parameter) and lin.weight.requires_grad
    assert lin.weight.tolist() == [[1.0, 2.0]]


def test_state_dict_names_match_torch():
    torch = pytest.importorskip("torch")
    ours = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2, 1))
    theirs = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2), torch.nn.Flatten(),
                                 torch.nn.Linear(2, 1))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict())  # torch tensors load directly
    x = np.random.default_rng(0).standard_normal((2, 1, 3, 3)).astype(np.float32)
    ours.eval(), theirs.eval()
    np.testing.assert_allclose(ours(cv.Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), atol=1e-6)


# --- modes, utilities, copies -----------------------------------------------------------------------


def test_train_eval_switch_dropout_and_batchnorm():
    net = nn.Sequential(nn.Dropout(0.5), nn.BatchNorm1d(3))
    assert net.training and all(m.training for m in net.modules())
    assert net.eval() is net and not any(m.training for m in net.modules())
    x = cv.randn(4, 3)
    np.testing.assert_allclose(net(x).numpy(), x.numpy() / np.sqrt(1 + 1e-5), rtol=1e-6)  # running stats 0, 1
    net.train()
    cv.manual_seed(1)
    y = net(x).numpy()
    np.testing.assert_allclose(y.mean(0), 0, atol=1e-5)  # batch statistics
    assert net[1].num_batches_tracked.item() == 1
    with pytest.raises(TypeError):
        net.train("yes")


def test_zero_grad_requires_grad_apply():
    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    net(cv.ones(1, 2)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(not p.grad.numpy().any() for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "Linear", "Sequential"]


def test_to_float64_keeps_parameter_identity():
    lin = nn.Linear(2, 2)
    w = lin.weight
    before = w.numpy()
    assert lin.to(cv.float64) is lin and lin.weight is w and w.dtype == cv.float64 and w.requires_grad
    np.testing.assert_array_equal(w.numpy(), before.astype(np.float64))
    with pytest.raises(TypeError):
        lin.to(cv.int32)


def test_deepcopy_is_independent():
    net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    twin = copy.deepcopy(net)
    assert twin[0].weight is not net[0].weight and twin[0].weight.requires_grad
    np.testing.assert_array_equal(twin[0].weight.numpy(), net[0].weight.numpy())
    twin(cv.randn(3, 2)).sum().backward()
    assert net[0].weight.grad is None and twin[0].weight.grad is not None
    assert net[1].num_batches_tracked.item() == 0


# --- pytrees and transforms --------------------------------------------------------------------------


def test_module_pytree_flatten_unflatten():
    bn = nn.BatchNorm1d(2)
    leaves, td = tree_flatten(bn)
    assert [leaf is t for leaf, t in zip(leaves, [bn.weight, bn.bias, bn.running_mean, bn.running_var])] == [True] * 4
    assert len(leaves) == 4  # the int64 counter is static: it cannot be differentiated
    new = tree_unflatten(td, [cv.full((2,), float(i)) for i in range(4)])
    assert type(new) is nn.BatchNorm1d and new is not bn
    assert new.running_var.tolist() == [3.0, 3.0] and bn.running_var.tolist() == [1.0, 1.0]
    assert new.num_batches_tracked is bn.num_batches_tracked
    assert tree_flatten(new)[1] == td  # copies flatten to an equal structure (jit reuses its trace)
    assert tree_flatten(bn.eval())[1] != td  # the training flag is part of the structure
    tied = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False))
    tied[1].weight = tied[0].weight
    leaves, td = tree_flatten(tied)
    assert len(leaves) == 1
    copy_ = tree_unflatten(td, [cv.zeros(2, 2)])
    assert copy_[0].weight is copy_[1].weight


def _mlp():
    cv.manual_seed(3)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))


def _loss(m, x, y):
    return ((m(x) - y) ** 2).mean()


def test_grad_over_a_module_matches_backward():
    model = _mlp()
    x, y = cv.randn(6, 3), cv.randn(6, 2)
    g = cv.grad(_loss)(model, x, y)
    assert type(g) is nn.Sequential
    _loss(model, x, y).backward()
    for (name, p), (gname, gp) in zip(model.named_parameters(), g.named_parameters()):
        assert name == gname
        np.testing.assert_allclose(gp.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-7)
    assert g[1].running_mean.tolist() == [0.0] * 4  # buffers get a (zero) gradient too


def test_jit_functional_training_step_matches_eager_torch_style():
    model, ref = _mlp(), _mlp()
    x, y = cv.randn(8, 3), cv.randn(8, 2)
    lr = 0.1

    @cv.jit
    def step(m, x, y):
        # has_aux returns the module the forward ran on: it holds BatchNorm's updated statistics
        (loss, m_after), grads = cv.value_and_grad(lambda m: (_loss(m, x, y), m), has_aux=True)(m)
        return loss, tree_map(lambda p, g: p - lr * g, m_after, grads)

    m = model
    params = list(ref.parameters())
    for _ in range(3):
        loss, m = step(m, x, y)
        ref_loss = _loss(ref, x, y)
        ref.zero_grad()
        ref_loss.backward()
        with cv.no_grad():
            for p in params:
                p -= lr * p.grad
        np.testing.assert_allclose(loss.item(), ref_loss.item(), rtol=1e-5)
    assert step.traces == 1
    np.testing.assert_allclose(m[1].running_mean.numpy(), ref[1].running_mean.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(m[3].weight.numpy(), ref[3].weight.numpy(), rtol=1e-5, atol=1e-6)


def test_jit_torch_style_step_with_the_module_as_argument():
    model, ref = _mlp(), _mlp()
    x, y = cv.randn(8, 3), cv.randn(8, 2)

    def make_step(params):  # an optimizer holds the parameters, as in torch
        def step(m, x, y):
            for p in params:
                p.grad = None
            loss = _loss(m, x, y)
            loss.backward()
            with cv.no_grad():
                for p in params:
                    p -= 0.1 * p.grad
            return loss
        return step

    jstep, step = cv.jit(make_step(list(model.parameters()))), make_step(list(ref.parameters()))
    for _ in range(3):
        np.testing.assert_allclose(jstep(model, x, y).item(), step(ref, x, y).item(), rtol=1e-5)
    np.testing.assert_allclose(model[0].weight.numpy(), ref[0].weight.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model[1].running_var.numpy(), ref[1].running_var.numpy(), rtol=1e-5)
    assert model[1].num_batches_tracked.item() == 3


def test_vmap_over_examples_with_a_shared_module():
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    x = cv.randn(5, 3)
    per_example = cv.vmap(lambda m, xi: m(xi), in_axes=(None, 0))(model, x)
    np.testing.assert_allclose(per_example.numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
    grads = cv.vmap(cv.grad(lambda m, xi: m(xi).sum()), in_axes=(None, 0))(model, x)
    assert grads[0].weight.shape == (5, 4, 3)
    single = cv.grad(lambda m, xi: m(xi).sum())(model, x[2])
    np.testing.assert_allclose(grads[0].weight.numpy()[2], single[0].weight.numpy(), rtol=1e-5, atol=1e-6)
    bn = nn.BatchNorm1d(3)
    with pytest.raises(RuntimeError, match="vmap"):
        cv.vmap(lambda m, xb: m(xb), in_axes=(None, 0))(bn, cv.randn(2, 4, 3))


def test_functional_call():
    lin = nn.Linear(2, 1)
    original = lin.weight.numpy()
    params = {"weight": cv.Tensor([[1.0, 2.0]]), "bias": cv.Tensor([0.5])}
    x = cv.Tensor([[1.0, 1.0]])
    assert nn.functional_call(lin, params, x).tolist() == [[3.5]]
    np.testing.assert_array_equal(lin.weight.numpy(), original)
    assert nn.functional_call(lin, {"bias": cv.Tensor([0.0])}, x=x).shape == (1, 1)  # the rest: the module's own
    g = cv.grad(lambda p: nn.functional_call(lin, p, x).sum())(params)
    assert g["weight"].tolist() == [[1.0, 1.0]] and g["bias"].tolist() == [1.0]
    with pytest.raises(KeyError, match="'wieght'"):
        nn.functional_call(lin, {"wieght": cv.ones(1, 2)}, x)
    tied = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False))
    tied[1].weight = tied[0].weight
    out = nn.functional_call(tied, {"0.weight": cv.eye(2)}, cv.Tensor([[1.0, 2.0]]))
    assert out.tolist() == [[1.0, 2.0]]  # the tied second layer got the identity too
    bn = nn.BatchNorm1d(2)
    nn.functional_call(bn, {"weight": cv.ones(2)}, cv.Tensor([[0.0, 0.0], [2.0, 4.0]]))
    assert bn.running_mean.tolist() == pytest.approx([0.1, 0.2])  # buffers update in place, as torch.func


# --- forward hooks ------------------------------------------------------------------------------------
def _traced_model():
    """Linear -> ReLU -> Linear with every hook kind recording (name, kind) in ``calls``."""
    cv.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    calls = []
    for name, m in model.named_modules():
        m.register_forward_pre_hook(lambda mod, args, name=name: calls.append((name or "top", "pre")))
        m.register_forward_hook(lambda mod, args, out, name=name: calls.append((name or "top", "post")))
    return model, calls


def test_forward_hooks_run_in_torch_order_and_can_replace_inputs_and_outputs():
    model, calls = _traced_model()
    x = cv.Tensor(np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32))
    plain = model.forward(x).numpy()  # the children's hooks still run
    assert len(calls) == 6
    calls.clear()
    model(x)
    assert calls == [("top", "pre"), ("0", "pre"), ("0", "post"), ("1", "pre"), ("1", "post"), ("2", "pre"),
                     ("2", "post"), ("top", "post")]
    torch = pytest.importorskip("torch")
    tmodel = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    tmodel.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    tcalls = []
    for name, m in tmodel.named_modules():
        m.register_forward_pre_hook(lambda mod, args, name=name: tcalls.append((name or "top", "pre")))
        m.register_forward_hook(lambda mod, args, out, name=name: tcalls.append((name or "top", "post")))
    tout = tmodel(torch.tensor(x.numpy()))
    assert tcalls == calls
    np.testing.assert_allclose(plain, tout.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_hook_results_order_prepend_kwargs_and_removal():
    lin = nn.Linear(2, 2)
    x = cv.Tensor([[1.0, 2.0]])
    base = lin(x).numpy()
    order = []
    h1 = lin.register_forward_hook(lambda m, a, out: (order.append(1), out + 1)[1])
    h2 = lin.register_forward_hook(lambda m, a, out: (order.append(2), out * 10)[1], prepend=True)
    np.testing.assert_allclose(lin(x).numpy(), base * 10 + 1, rtol=1e-6)  # the prepended one first
    assert order == [2, 1]
    h2.remove()
    h2.remove()  # a second remove does nothing
    np.testing.assert_allclose(lin(x).numpy(), base + 1, rtol=1e-6)
    with lin.register_forward_pre_hook(lambda m, args: args[0] * 0):  # one value: the new single argument
        np.testing.assert_allclose(lin(x).numpy(), lin.bias.numpy()[None] + 1, rtol=1e-6)
    np.testing.assert_allclose(lin(x).numpy(), base + 1, rtol=1e-6)  # removed on leaving the block
    h1.remove()
    assert not lin._forward_hooks and not lin._forward_pre_hooks

    class Scaled(nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    m = Scaled()
    m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {**kwargs, "scale": 3.0}), with_kwargs=True)
    seen = []
    m.register_forward_hook(lambda mod, args, kwargs, out: seen.append(kwargs), with_kwargs=True)
    assert m(cv.Tensor([2.0])).tolist() == [6.0] and seen == [{"scale": 3.0}]
    bad = Scaled()
    bad.register_forward_pre_hook(lambda mod, args, kwargs: args, with_kwargs=True)
    with pytest.raises(RuntimeError, match=r"pair \(args, kwargs\)"):
        bad(cv.Tensor([2.0]))
    with pytest.raises(TypeError, match="callable"):
        lin.register_forward_hook(None)


def test_always_call_hooks_run_when_forward_raises():
    lin = nn.Linear(2, 2)
    got = []
    lin.register_forward_hook(lambda m, a, out: got.append(("always", out)), always_call=True)
    lin.register_forward_hook(lambda m, a, out: got.append(("plain", out)))
    with pytest.raises(ValueError, match="Linear"):
        lin(cv.ones(1, 5))
    assert got == [("always", None)]
    broken = nn.ReLU()
    broken.register_forward_hook(lambda m, a, out: 1 / 0, always_call=True)
    with pytest.warns(UserWarning, match="always_call"), pytest.raises(TypeError):
        broken()  # forward misses its argument: the TypeError propagates, the hook's error only warns


def test_hooks_follow_copies_pytree_transforms_and_jit():
    model, calls = _traced_model()
    x = cv.ones(2, 3)
    clone = copy.deepcopy(model)  # a deep copy has its own hook tables, as torch's
    calls.clear()
    clone(x)
    assert len(calls) == 8
    assert len(model._forward_hooks) == 1 and model._forward_hooks is not clone._forward_hooks
    leaves, treedef = tree_flatten(model)
    shallow = tree_unflatten(treedef, leaves)  # what grad/jit/functional_call build: the same hooks
    calls.clear()
    nn.functional_call(model, {}, x)
    shallow(x)
    assert len(calls) == 16
    grads = cv.grad(lambda m: m(x).sum())(model)
    assert grads[0].weight.shape == (4, 3)

    step = cv.jit(lambda m, v: m(v).sum())
    lin = nn.Linear(3, 2)
    step(lin, x)
    handle = lin.register_forward_hook(lambda m, a, out: out * 0)  # the module's structure changed: trace again
    assert step(lin, x).item() == 0.0 and step.traces == 2
    handle.remove()
    assert step(lin, x).item() != 0.0 and step.traces == 2  # the first program again


# --- backward hooks -----------------------------------------------------------------------------------
def _recorder(log):
    def arrays(gs):
        return [None if g is None else g.numpy().copy() for g in gs]

    return (lambda m, go: log.append(("pre", arrays(go))),
            lambda m, gi, go: log.append(("full", arrays(gi), arrays(go))))


def test_backward_hooks_see_the_cotangents_of_outputs_and_inputs():
    lin = nn.Linear(3, 2, dtype=cv.float64)
    w, b = lin.weight.numpy(), lin.bias.numpy()
    x = np.random.default_rng(1).standard_normal((4, 3))
    log = []
    pre, full = _recorder(log)
    hp, hf = lin.register_full_backward_pre_hook(pre), lin.register_full_backward_hook(full)
    xt = cv.Tensor(x, requires_grad=True)
    (lin(xt) ** 2).sum().backward()
    y = x @ w.T + b
    assert [entry[0] for entry in log] == ["pre", "full"]
    np.testing.assert_allclose(log[0][1][0], 2 * y, rtol=1e-12)        # grad_output
    np.testing.assert_allclose(log[1][1][0], 2 * y @ w, rtol=1e-12)    # grad_input
    np.testing.assert_allclose(log[1][2][0], 2 * y, rtol=1e-12)
    log.clear()
    cv.grad(lambda v: (lin(v) ** 2).sum())(cv.Tensor(x))  # the JAX-style pass runs them too
    np.testing.assert_allclose(log[1][1][0], 2 * y @ w, rtol=1e-12)
    log.clear()
    lin(cv.Tensor(x)).sum().backward()  # the input needs no gradient: the full hook gets None for it
    assert [entry[0] for entry in log] == ["pre", "full"] and log[1][1] == [None]
    log.clear()
    with cv.no_grad():
        lin(xt)
    hp.remove(), hf.remove()
    lin(xt).sum().backward()
    assert log == []


def test_backward_hooks_replace_cotangents():
    lin = nn.Linear(3, 2, dtype=cv.float64)
    x = cv.Tensor(np.random.default_rng(2).standard_normal((4, 3)), requires_grad=True)
    lin(x).sum().backward()
    gx, gw = x.grad.numpy(), lin.weight.grad.numpy()
    x.grad = lin.weight.grad = lin.bias.grad = None
    with lin.register_full_backward_hook(lambda m, gi, go: (gi[0] * 3,)):  # only what flows to the input
        lin(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * gx, rtol=1e-12)
    np.testing.assert_allclose(lin.weight.grad.numpy(), gw, rtol=1e-12)
    x.grad = lin.weight.grad = lin.bias.grad = None
    with lin.register_full_backward_pre_hook(lambda m, go: (go[0] * -1,)):  # everything below the outputs
        lin(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), -gx, rtol=1e-12)
    np.testing.assert_allclose(lin.weight.grad.numpy(), -gw, rtol=1e-12)
    lstm = nn.LSTM(3, 2, dtype=cv.float64)
    shapes = []
    lstm.register_full_backward_pre_hook(lambda m, go: shapes.append([g.shape for g in go]))
    out, (_, c) = lstm(cv.Tensor(np.ones((2, 1, 3)), requires_grad=True))
    (out.sum() + c.sum()).backward()
    assert shapes == [[(2, 1, 2), (1, 1, 2), (1, 1, 2)]]  # one cotangent per output tensor (zeros for h)
    with lin.register_full_backward_hook(lambda m, gi, go: (gi[0], gi[0])), \
            pytest.raises(RuntimeError, match="tuple of 1"):
        lin(x).sum().backward()


def test_backward_hooks_match_torch():
    torch = pytest.importorskip("torch")
    cv.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    tmodel = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    tmodel.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    log, tlog = [], []
    for m, tm in zip(model, tmodel):
        for target, rec in ((m, log), (tm, tlog)):
            pre, full = _recorder(rec) if target is m else _torch_recorder(rec)
            target.register_full_backward_pre_hook(pre)
            target.register_full_backward_hook(full)
    model[1].register_full_backward_hook(lambda m, gi, go: (gi[0] * 3,))
    tmodel[1].register_full_backward_hook(lambda m, gi, go: (gi[0] * 3,))
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    (model(cv.Tensor(x)) ** 2).sum().backward()
    with pytest.warns(UserWarning):  # torch warns that the first layer's inputs need no gradient
        (tmodel(torch.tensor(x)) ** 2).sum().backward()
    assert [e[0] for e in log] == [e[0] for e in tlog] == ["pre", "full"] * 3
    for ours, theirs in zip(log, tlog):
        for a, b in zip(ours[1:], theirs[1:]):
            assert len(a) == len(b)
            for u, v in zip(a, b):
                assert (u is None) == (v is None)
                if u is not None:
                    np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model[0].weight.grad.numpy(), tmodel[0].weight.grad.numpy(), rtol=1e-5, atol=1e-6)


def _torch_recorder(log):
    def arrays(gs):
        return [None if g is None else g.detach().numpy().copy() for g in gs]

    return (lambda m, go: log.append(("pre", arrays(go))),
            lambda m, gi, go: log.append(("full", arrays(gi), arrays(go))))

"""Reverse-mode autodiff: every primitive's rule against central finite differences (float64),
composite ops, PyTorch-style backward/no_grad/in-place updates, JAX-style grad/vjp/jacrev,
custom_vjp, checkpoint, kernel counts, and a fuzz of random elementwise chains."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import corvid as cv
from corvid.engine.schedule import create_schedule
from corvid.graph.node import Op, toposort
from corvid.transforms import reverse

RNG = np.random.default_rng(0)


def fd_grads(f, arrays, eps=1e-6):
    """Central differences of scalar ``f`` (called on float64 tensors) for each input array."""
    out = []
    for k, a in enumerate(arrays):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            for sign in (1.0, -1.0):
                xs = [b.copy() for b in arrays]
                xs[k][idx] += sign * eps
                g[idx] += sign * f(*[cv.Tensor(x) for x in xs]).item() / (2 * eps)
        out.append(g)
    return out


def weighted(f, arrays):
    """A scalar from ``f``'s output: the sum against fixed random weights (checks the whole Jacobian)."""
    shape = f(*[cv.Tensor(a) for a in arrays]).shape
    w = cv.Tensor(np.random.default_rng(1).uniform(0.5, 1.5, size=shape))
    return lambda *xs: (f(*xs) * w).sum()


def check(f, *arrays, rtol=1e-5, atol=1e-7):
    """cv.grad of the weighted output of ``f`` matches finite differences, for every input."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    loss = weighted(f, arrays)
    got = cv.grad(loss, argnums=tuple(range(len(arrays))))(*[cv.Tensor(a) for a in arrays])
    for g, want in zip(got, fd_grads(loss, arrays)):
        assert g.dtype == cv.float64
        np.testing.assert_allclose(g.numpy(), want, rtol=rtol, atol=atol)


def u(lo, hi, shape=(2, 3)):
    return RNG.uniform(lo, hi, size=shape)


def away_from_zero(shape=(2, 3), lo=0.3, hi=2.0):
    return u(lo, hi, shape) * RNG.choice([-1.0, 1.0], size=shape)


# --- one rule per primitive --------------------------------------------------------------------------

def test_every_primitive_has_a_rule():
    handled = (set(reverse.UNARY_RULES) | set(reverse.BINARY_RULES) | set(reverse.ZERO_RULES)
               | set(reverse.MOVEMENT_OPS) | {Op.WHERE, Op.REDUCE, Op.VAR})
    # CUSTOM (a host kernel) is differentiated through the custom_vjp its module wraps it in
    assert set(Op) == handled | {Op.CUSTOM, Op.GATHER, Op.SCATTER, Op.COPY}  # GATHER: _gather_rule; SCATTER, COPY: vjp_rule


UNARY = {
    "neg": (lambda x: -x, u(-2, 2)),
    "reciprocal": (lambda x: x.reciprocal(), away_from_zero()),
    "sqrt": (lambda x: x.sqrt(), u(0.2, 3)),
    "exp": (lambda x: x.exp(), u(-2, 2)),
    "exp2": (lambda x: x.exp2(), u(-2, 2)),
    "log": (lambda x: x.log(), u(0.2, 3)),
    "log2": (lambda x: x.log2(), u(0.2, 3)),
    "log1p": (lambda x: x.log1p(), u(-0.7, 3)),
    "expm1": (lambda x: x.expm1(), u(-2, 2)),
    "sin": (lambda x: x.sin(), u(-3, 3)),
    "cos": (lambda x: x.cos(), u(-3, 3)),
    "tan": (lambda x: x.tan(), u(-1.2, 1.2)),
    "asin": (lambda x: x.asin(), u(-0.9, 0.9)),
    "acos": (lambda x: x.acos(), u(-0.9, 0.9)),
    "atan": (lambda x: x.atan(), u(-3, 3)),
    "sinh": (lambda x: x.sinh(), u(-2, 2)),
    "cosh": (lambda x: x.cosh(), u(-2, 2)),
    "tanh": (lambda x: x.tanh(), u(-2, 2)),
    "asinh": (lambda x: x.asinh(), u(-3, 3)),
    "acosh": (lambda x: x.acosh(), u(1.2, 4)),
    "atanh": (lambda x: x.atanh(), u(-0.9, 0.9)),
    "erf": (lambda x: x.erf(), u(-2, 2)),
    "abs": (lambda x: x.abs(), away_from_zero()),
    "contiguous": (lambda x: (x * 2).contiguous(), u(-2, 2)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_rule_matches_finite_differences(name):
    f, x = UNARY[name]
    check(f, x)


@pytest.mark.parametrize("name", ["sin", "exp", "log", "tanh", "sqrt", "reciprocal", "atan", "erf", "asin", "cosh"])
def test_unary_rule_is_differentiable_again(name):
    # the rules are Tensor ops, so grad(grad(f)) works; check it against differences of grad(f)
    f, x = UNARY[name]
    x = x[0]
    dfdx = cv.grad(lambda t: f(t).sum())
    second = cv.grad(lambda t: dfdx(t).sum())(cv.Tensor(x)).numpy()
    (want,) = fd_grads(lambda t: dfdx(t).sum(), [x])
    np.testing.assert_allclose(second, want, rtol=1e-5, atol=1e-7)


def test_second_derivatives_match_closed_forms():
    x = cv.Tensor([0.3, -1.1, 2.0], dtype=cv.float64)
    d2 = lambda f: cv.grad(lambda t: cv.grad(lambda s: f(s).sum())(t).sum())(x).numpy()  # noqa: E731
    a = x.numpy()
    np.testing.assert_allclose(d2(lambda t: t.sin()), -np.sin(a), rtol=1e-12)
    np.testing.assert_allclose(d2(lambda t: t ** 3), 6 * a, rtol=1e-12)
    np.testing.assert_allclose(d2(lambda t: t.tanh()), -2 * np.tanh(a) * (1 - np.tanh(a) ** 2), rtol=1e-12)
    np.testing.assert_allclose(d2(lambda t: t.exp() * t), np.exp(a) * (a + 2), rtol=1e-12)


def test_rounding_and_bitcast_have_zero_gradient():
    x = cv.Tensor(u(-3, 3))
    for f in (lambda t: t.floor(), lambda t: t.ceil(), lambda t: t.round(), lambda t: t.trunc(),
              lambda t: t // 0.7, lambda t: t.bitcast(cv.int64).bitcast(cv.float64)):
        np.testing.assert_array_equal(cv.grad(lambda t: f(t).sum())(x).numpy(), np.zeros((2, 3)))


def test_cast_passes_float_gradients_and_blocks_int():
    x = cv.Tensor([1.5, -2.25], dtype=cv.float64)
    g = cv.grad(lambda t: (t.astype(cv.float32) * 3).astype(cv.float64).sum())(x)
    assert g.dtype == cv.float64 and g.tolist() == [3.0, 3.0]
    g = cv.grad(lambda t: (t.astype(cv.int32).astype(cv.float64) * t).sum())(x)
    assert g.tolist() == [1.0, -2.0]  # d/dt (int(t) * t) = int(t); no gradient through the int cast
    g = cv.grad(lambda t: (t.astype(cv.bfloat16) * 2).astype(cv.float32).sum())(cv.Tensor([1.0, 2.0]))
    assert g.dtype == cv.float32 and g.tolist() == [2.0, 2.0]


BINARY = {
    "add": (lambda a, b: a + b, u(-2, 2), u(-2, 2, (3,))),
    "sub": (lambda a, b: a - b, u(-2, 2), u(-2, 2, (2, 1))),
    "mul": (lambda a, b: a * b, u(-2, 2), u(-2, 2)),
    "div": (lambda a, b: a / b, u(-2, 2), away_from_zero((3,))),
    "pow": (lambda a, b: a ** b, u(0.3, 2), u(-2, 2)),
    "maximum": (lambda a, b: a.maximum(b), u(-2, 2), u(-2, 2)),
    "minimum": (lambda a, b: a.minimum(b), u(-2, 2), u(-2, 2, (1, 3))),
    "atan2": (lambda a, b: a.atan2(b), u(-2, 2), away_from_zero()),
    "remainder": (lambda a, b: a % b, u(0.1, 0.9), u(1.2, 2)),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_rule_matches_finite_differences(name):
    f, a, b = BINARY[name]
    check(f, a, b)


def test_pow_special_points_are_finite():
    x = cv.Tensor([0.0, 2.0], dtype=cv.float64)
    assert cv.grad(lambda t: (t ** 0.0).sum())(x).tolist() == [0.0, 0.0]
    assert cv.grad(lambda e: (x ** e).sum())(cv.Tensor([2.0, 2.0], dtype=cv.float64)).tolist() == \
        [0.0, pytest.approx(4 * math.log(2))]
    assert cv.grad(lambda t: (t ** 2).sum())(cv.Tensor([-3.0])).tolist() == [-6.0]


def test_maximum_minimum_split_ties_evenly():
    a = cv.Tensor([1.0, 2.0, 3.0])
    b = cv.Tensor([1.0, 5.0, 0.0])
    ga, gb = cv.grad(lambda x, y: x.maximum(y).sum(), argnums=(0, 1))(a, b)
    assert ga.tolist() == [0.5, 0.0, 1.0] and gb.tolist() == [0.5, 1.0, 0.0]
    ga, gb = cv.grad(lambda x, y: x.minimum(y).sum(), argnums=(0, 1))(a, b)
    assert ga.tolist() == [0.5, 1.0, 0.0] and gb.tolist() == [0.5, 0.0, 1.0]


def test_where_routes_the_gradient():
    c = cv.Tensor([[True, False, True]])
    check(lambda a, b: cv.where(c, a, b), u(-1, 1), u(-1, 1, (3,)))
    assert cv.grad(lambda a: cv.where(a > 0, a, 0.0).sum())(cv.Tensor([-1.0, 2.0])).tolist() == [0.0, 1.0]


# derivatives at the kinks, as torch defines them: (f, input, expected d sum(f(x)) / dx)
KINK_POINTS = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
KINKS = {
    "relu": (lambda x: x.relu(), lambda x: np.maximum(x, 0), [0.0, 0.0, 0.0, 1.0, 1.0]),
    "clip": (lambda x: x.clip(-1.0, 1.0), lambda x: np.clip(x, -1, 1), [0.0, 1.0, 1.0, 1.0, 0.0]),  # bounds included
    "clamp_min": (lambda x: x.clamp(min=0.0), lambda x: np.maximum(x, 0), [0.0, 0.0, 1.0, 1.0, 1.0]),
    "clamp_max": (lambda x: x.clamp(max=0.0), lambda x: np.minimum(x, 0), [1.0, 1.0, 1.0, 0.0, 0.0]),
    "clip_tensor_bounds": (lambda x: x.clip(cv.Tensor([-1.0] * 5, dtype=x.dtype), cv.Tensor([1.0] * 5, dtype=x.dtype)),
                           lambda x: np.clip(x, -1, 1), [0.0, 1.0, 1.0, 1.0, 0.0]),
    "abs": (lambda x: x.abs(), np.abs, [-1.0, -1.0, 0.0, 1.0, 1.0]),
    "maximum_tie": (lambda x: x.maximum(0.0), lambda x: np.maximum(x, 0), [0.0, 0.0, 0.5, 1.0, 1.0]),  # as torch
    "minimum_tie": (lambda x: x.minimum(0.0), lambda x: np.minimum(x, 0), [1.0, 1.0, 0.5, 0.0, 0.0]),
}


def _torch_kink(name, x):
    torch = pytest.importorskip("torch")
    fns = {"relu": torch.relu, "clip": lambda t: t.clamp(-1.0, 1.0), "clamp_min": lambda t: t.clamp(min=0.0),
           "clamp_max": lambda t: t.clamp(max=0.0),
           "clip_tensor_bounds": lambda t: t.clamp(torch.full((5,), -1.0, dtype=t.dtype),
                                                   torch.full((5,), 1.0, dtype=t.dtype)),
           "abs": torch.abs, "maximum_tie": lambda t: torch.maximum(t, torch.zeros((), dtype=t.dtype)),
           "minimum_tie": lambda t: torch.minimum(t, torch.zeros((), dtype=t.dtype))}
    xt = torch.tensor(x, requires_grad=True)
    fns[name](xt).sum().backward()
    return xt.grad.numpy()


@pytest.mark.parametrize("name", list(KINKS))
def test_kink_derivatives_agree_across_backward_grad_and_jvp(name):
    f, ref, want = KINKS[name]
    x = cv.Tensor(KINK_POINTS, requires_grad=True)
    y = f(x)
    np.testing.assert_array_equal(y.numpy(), ref(KINK_POINTS))
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), want)
    np.testing.assert_array_equal(cv.grad(lambda t: f(t).sum())(cv.Tensor(KINK_POINTS)).numpy(), want)
    _, tangent = cv.jvp(f, (cv.Tensor(KINK_POINTS),), (cv.ones(5, dtype=cv.float64),))
    np.testing.assert_array_equal(tangent.numpy(), want)  # a diagonal Jacobian: the jvp with ones is its diagonal


@pytest.mark.parametrize("name", list(KINKS))
def test_kink_derivatives_match_torch(name):
    f = KINKS[name][0]
    x = cv.Tensor(KINK_POINTS, requires_grad=True)
    f(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), _torch_kink(name, KINK_POINTS))


def test_relu_and_clip_values_keep_numpy_semantics():
    nan = float("nan")
    x = cv.Tensor([nan, -0.0, -3.0, 4.0])
    np.testing.assert_array_equal(x.relu().numpy(), [nan, 0.0, 0.0, 4.0])
    np.testing.assert_array_equal(x.clip(-1.0, 1.0).numpy(), np.clip(x.numpy(), -1.0, 1.0))
    np.testing.assert_array_equal(x.clip(nan, 1.0).numpy(), np.clip(x.numpy(), nan, 1.0))  # a nan bound: nan
    np.testing.assert_array_equal(x.clip(2.0, 1.0).numpy(), np.clip(x.numpy(), 2.0, 1.0))  # min > max: max
    ints = cv.Tensor([-2, 0, 5])
    assert ints.relu().dtype == cv.int64 and ints.relu().tolist() == [0, 0, 5]
    assert ints.clip(0, 3).dtype == cv.int64 and ints.clip(0, 3).tolist() == [0, 0, 3]
    assert ints.clip(0.5).dtype == ints.maximum(0.5).dtype and ints.clip(0.5).tolist() == [0.5, 0.5, 5.0]
    grown = cv.Tensor([0.0, 5.0]).clip(cv.Tensor([[1.0], [-1.0]]), 3.0)
    assert grown.shape == (2, 2) and grown.tolist() == [[1.0, 3.0], [0.0, 3.0]]
    lo = cv.Tensor([0.5, 0.5], requires_grad=True)  # a tensor bound gets the gradient where it is returned
    cv.Tensor([0.0, 0.5]).clip(lo, 2.0).sum().backward()
    assert lo.grad.tolist() == [1.0, 0.0]
    with pytest.raises(TypeError, match="complex"):
        cv.Tensor([1 + 1j]).relu()


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
def test_reductions_match_finite_differences(axis):
    check(lambda x: x.sum(axis), u(-2, 2))
    check(lambda x: x.prod(axis), u(0.5, 1.5) * RNG.choice([-1.0, 1.0], (2, 3)))
    check(lambda x: x.max(axis=axis), u(-2, 2))
    check(lambda x: x.min(axis, keepdims=True), u(-2, 2))


def test_prod_with_zeros_is_exact():
    g = cv.grad(lambda x: x.prod())(cv.Tensor([2.0, 0.0, 3.0])).tolist()
    assert g == [0.0, 6.0, 0.0]
    assert cv.grad(lambda x: x.prod())(cv.Tensor([0.0, 0.0, 3.0])).tolist() == [0.0, 0.0, 0.0]
    g = cv.grad(lambda x: x.prod(axis=1).sum())(cv.Tensor([[2.0, 0.0], [3.0, 4.0]])).tolist()
    assert g == [[0.0, 2.0], [4.0, 3.0]]


def test_reduce_max_splits_ties_evenly():
    x = cv.Tensor([[3.0, 1.0, 3.0], [0.0, 2.0, 2.0]])
    assert cv.grad(lambda t: t.max(axis=1).sum())(x).tolist() == [[0.5, 0.0, 0.5], [0.0, 0.5, 0.5]]
    assert cv.grad(lambda t: t.max())(x).tolist() == [[0.5, 0.0, 0.5], [0.0, 0.0, 0.0]]
    assert cv.grad(lambda t: t.min())(x).tolist() == [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]


MOVEMENT = {
    "reshape": (lambda x: x.reshape(3, 2) * cv.Tensor([1.0, 2.0]), (2, 3)),
    "permute": (lambda x: x.permute(2, 0, 1), (2, 3, 2)),
    "expand": (lambda x: x.reshape(2, 1, 3).expand(2, 4, 3), (2, 3)),
    "pad": (lambda x: x.pad(((1, 0), (2, 1)), value=5.0), (2, 3)),
    "pad_negative": (lambda x: x.pad(((0, -1), (-1, 1))), (2, 3)),
    "shrink": (lambda x: x.shrink(((1, 2), (0, 2))), (2, 3)),
    "flip": (lambda x: x.flip(1), (2, 3)),
    "step_slice": (lambda x: x[:, ::2], (2, 5)),
    "negative_step": (lambda x: x[::-1, 3:0:-2], (2, 5)),
    "index": (lambda x: x[1, None, 1:], (2, 3)),
    "transpose": (lambda x: x.T @ cv.Tensor(np.ones((2, 2))), (2, 3)),
}


@pytest.mark.parametrize("name", sorted(MOVEMENT))
def test_movement_rule_matches_finite_differences(name):
    f, shape = MOVEMENT[name]
    check(f, u(-2, 2, shape))


# --- composites --------------------------------------------------------------------------------------

COMPOSITE = {
    "softmax": (lambda x: x.softmax(axis=1), [(2, 3)]),
    "log_softmax": (lambda x: x.log_softmax(axis=0), [(2, 3)]),
    "logsumexp": (lambda x: x.logsumexp(axis=1), [(2, 3)]),
    "matmul_broadcast": (lambda a, b: a @ b, [(2, 2, 3), (3, 2)]),
    "matmul_vector": (lambda a, b: a @ b, [(3,), (2, 3, 2)]),
    "var": (lambda x: x.var(axis=1, correction=1), [(2, 3)]),
    "std": (lambda x: x.std(), [(2, 3)]),
    "mean": (lambda x: x.mean(axis=0), [(2, 3)]),
    "clip": (lambda x: x.clip(-0.5, 0.5), [(2, 3)]),
    "cat": (lambda a, b: cv.cat([a, b, a], axis=1), [(2, 3), (2, 1)]),
    "stack": (lambda a, b: cv.stack([a, b * 2], axis=-1), [(2, 3), (2, 3)]),
    "sigmoid_silu_gelu": (lambda x: x.sigmoid() + x.silu() + x.gelu() + x.gelu("tanh"), [(2, 3)]),
    "softplus": (lambda x: x.softplus(beta=2.0), [(2, 3)]),
    "split": (lambda x: x.split([1, 2], axis=1)[1] * x.split([2, 1], axis=1)[0], [(2, 3)]),
}


@pytest.mark.parametrize("name", sorted(COMPOSITE))
def test_composite_matches_finite_differences(name):
    f, shapes = COMPOSITE[name]
    arrays = [u(-1.5, 1.5, s) for s in shapes]
    if name == "clip":  # keep away from the kinks at ±0.5
        arrays = [np.where(np.abs(np.abs(a) - 0.5) < 0.1, a * 1.5, a) for a in arrays]
    check(f, *arrays)


def test_gradient_of_broadcast_operand_is_summed_to_its_shape():
    a = cv.Tensor(np.ones((2, 3)))
    b = cv.Tensor(np.ones((3,)))
    c = cv.Tensor(2.0, dtype=cv.float64)
    gb, gc = cv.grad(lambda b, c: (a * b * c).sum(), argnums=(0, 1))(b, c)
    assert gb.shape == (3,) and gb.tolist() == [4.0, 4.0, 4.0]
    assert gc.shape == () and gc.item() == 6.0


# --- PyTorch style ------------------------------------------------------------------------------------

def test_backward_example_from_the_issue():
    w = cv.randn(3, requires_grad=True)
    loss = (w * w).sum()
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * w.numpy(), rtol=1e-6)
    assert w.is_leaf and w.requires_grad and loss.requires_grad and not loss.is_leaf


def test_grad_example_from_the_issue():
    w, x = RNG.normal(size=3), RNG.normal(size=(4, 3))
    f = lambda w, x: ((x @ w).tanh() ** 2).mean()  # noqa: E731
    g = cv.grad(f)(cv.Tensor(w), cv.Tensor(x))
    t = np.tanh(x @ w)
    np.testing.assert_allclose(g.numpy(), x.T @ (2 * t * (1 - t * t)) / 4, rtol=1e-10)


def test_backward_accumulates_and_resets():
    w = cv.Tensor([1.0, 2.0], requires_grad=True)
    assert w.grad is None
    (w * 3).sum().backward()
    (w * w).sum().backward()
    assert w.grad.tolist() == [5.0, 7.0]
    assert not w.grad.requires_grad
    w.grad = None
    (w * 2).sum().backward()
    assert w.grad.tolist() == [2.0, 2.0]


def test_backward_needs_a_seed_for_non_scalars():
    w = cv.ones(2, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"one-element.*\(2, 2\)"):
        (w * 2).backward()
    (w * 2).backward(cv.Tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert w.grad.tolist() == [[2.0, 4.0], [6.0, 8.0]]
    with pytest.raises(ValueError, match="shape"):
        (w * 2).backward(cv.ones(3))
    (w.sum(keepdims=True) * 1).backward()  # one element, shape (1, 1): implicit seed is fine
    assert w.grad.tolist() == [[3.0, 5.0], [7.0, 9.0]]


def test_backward_errors_without_a_leaf():
    with pytest.raises(RuntimeError, match="requires_grad"):
        cv.ones(2).sum().backward()
    with pytest.raises(TypeError, match="floating point"):
        cv.Tensor([1, 2], requires_grad=True)
    with pytest.raises(TypeError, match="floating point"):
        cv.arange(3, requires_grad=True)


def test_creation_functions_make_leaves():
    for t in (cv.zeros(2, requires_grad=True), cv.ones((2,), requires_grad=True), cv.full(2, 3.0, requires_grad=True),
              cv.rand(2, requires_grad=True), cv.randn(2, requires_grad=True), cv.empty(2, requires_grad=True),
              cv.arange(2.0, requires_grad=True), cv.linspace(0, 1, 2, requires_grad=True),
              cv.zeros_like(cv.ones(2), requires_grad=True), cv.eye(2, requires_grad=True)):
        assert t.requires_grad and t.is_leaf and t.dtype == cv.float32
    assert not cv.zeros(2).requires_grad
    z = cv.zeros(2, requires_grad=True)
    ((z + 1) ** 2).sum().backward()
    assert z.grad.tolist() == [2.0, 2.0]


def test_leaf_survives_realize_and_backward_flows_through_realized_intermediates():
    w = cv.Tensor([1.0, 2.0], requires_grad=True) * 1  # a non-leaf that requires grad
    assert w.requires_grad and not w.is_leaf
    leaf = cv.Tensor([0.5, -1.0]).requires_grad_()
    leaf.realize()
    assert leaf.is_leaf and leaf.node.op is Op.VAR
    h = (leaf * 3).exp()
    h.realize()  # computed now; the graph behind it stays
    assert h.node.buffer is not None and h.requires_grad
    (h * leaf).sum().backward()
    x = np.array([0.5, -1.0])
    np.testing.assert_allclose(leaf.grad.numpy(), np.exp(3 * x) * (3 * x + 1), rtol=1e-6)


def test_no_grad_detach_stop_gradient():
    w = cv.Tensor([1.0, 2.0], requires_grad=True)
    assert cv.is_grad_enabled()
    with cv.no_grad():
        assert not cv.is_grad_enabled()
        y = w * 2
        with cv.enable_grad():
            z = w * 2
        assert not cv.is_grad_enabled()
    assert cv.is_grad_enabled()
    assert not y.requires_grad and z.requires_grad and w.requires_grad
    loss = (y * w).sum() + (w.detach() * w).sum() + (cv.stop_gradient({"a": w})["a"] * w).sum()
    loss.backward()
    assert w.grad.tolist() == [4.0, 8.0]  # each term contributes d/dw (c * w) with c = 2w, w, w

    @cv.no_grad()
    def frozen(t):
        return t * t

    assert not frozen(w).requires_grad and cv.is_grad_enabled()


def test_no_grad_inside_a_transform_stops_the_gradient_but_an_outer_one_does_not():
    def f(x):
        with cv.no_grad():
            scale = x.abs().max()
        return (x * scale).sum()

    x = cv.Tensor([1.0, -3.0])
    assert cv.grad(f)(x).tolist() == [3.0, 3.0]
    with cv.no_grad():
        assert cv.grad(lambda t: (t * t).sum())(x).tolist() == [2.0, -6.0]


def test_backward_after_an_in_place_update_of_its_leaf_raises():
    w = cv.Tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    with cv.no_grad():
        w -= 1
    with pytest.raises(RuntimeError, match="updated in place"):
        loss.backward()
    assert w.grad is None
    (w * w).sum().backward()  # a result of the new value is fine
    assert w.grad.tolist() == [0.0, 2.0]


def test_sgd_in_place_updates_keep_the_leaf():
    cv.manual_seed(0)
    x = cv.randn(32, 3).realize()
    y = (x @ cv.Tensor([[1.0], [-2.0], [0.5]])).realize()
    w = cv.zeros(3, 1, requires_grad=True)
    mark = w.node.arg
    losses = []
    for _ in range(30):
        loss = ((x @ w - y) ** 2).mean()
        losses.append(loss.item())
        w.grad = None
        loss.backward()
        with cv.no_grad():
            w -= 0.2 * w.grad
    assert losses[-1] < 1e-4 * losses[0]
    # the same leaf tensor, its value computed; each update gets a new mark (old graphs can't reach it)
    assert w.is_leaf and w.node.arg is not mark and w.node.arg.data() is w and w.node.buffer is not None
    np.testing.assert_allclose(w.numpy().ravel(), [1.0, -2.0, 0.5], atol=1e-2)
    with pytest.raises(RuntimeError, match="no_grad"):
        w += 1
    with cv.no_grad():
        w.assign(cv.zeros(3, 1))
        w *= 2
        w /= 4
        w += 1
    assert w.tolist() == [[1.0], [1.0], [1.0]] and w.is_leaf


def test_in_place_on_other_tensors_rebinds_the_handle():
    a = cv.Tensor([1.0, 2.0])
    alias = a
    before = cv.Tensor(a)
    a += 1
    assert alias is a and a.tolist() == [2.0, 3.0] and before.tolist() == [1.0, 2.0]
    w = cv.Tensor([1.0, 2.0], requires_grad=True)
    h = w * 1
    h *= w  # a non-leaf: rebound to h * w, which stays differentiable
    h.sum().backward()
    assert w.grad.tolist() == [2.0, 4.0]
    i = cv.Tensor([1, 2])
    with pytest.raises(TypeError, match="dtype"):
        i /= 2
    with pytest.raises(ValueError, match="shape"):
        a += cv.ones(3, 2)


def test_requires_grad_can_be_turned_off_on_leaves_only():
    w = cv.Tensor([1.0], requires_grad=True)
    y = w * 2
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad_(False)
    w.requires_grad = False
    assert not w.requires_grad and w.is_leaf
    with pytest.raises(RuntimeError, match="requires_grad"):
        (w * 2).sum().backward()
    (y * 1).sum().backward()  # the old graph still reaches the old mark, whose owner gave it up
    assert w.grad is None


def test_create_graph_gives_differentiable_grads():
    w = cv.Tensor([1.0, 2.0], requires_grad=True)
    (w ** 3).sum().backward(create_graph=True)
    g = w.grad
    assert g.requires_grad and g.tolist() == [3.0, 12.0]
    w.grad = None
    g.sum().backward()
    assert w.grad.tolist() == [6.0, 12.0]


# --- JAX style ----------------------------------------------------------------------------------------

def test_pytrees_in_and_out_argnums_and_has_aux():
    params = {"w": cv.Tensor([[1.0, 2.0], [3.0, 4.0]]), "b": [cv.Tensor([0.5, -0.5])]}
    x = cv.Tensor([1.0, -1.0])

    def f(p, x):
        out = p["w"] @ x + p["b"][0]
        return (out * out).sum(), {"out": out}

    g, aux = cv.grad(f, has_aux=True)(params, x)
    out = np.array([[1.0, 2.0], [3.0, 4.0]]) @ [1.0, -1.0] + [0.5, -0.5]
    assert set(g) == {"w", "b"} and isinstance(g["b"], list)
    np.testing.assert_allclose(g["w"].numpy(), 2 * np.outer(out, [1.0, -1.0]))
    np.testing.assert_allclose(g["b"][0].numpy(), 2 * out)
    np.testing.assert_allclose(aux["out"].numpy(), out)
    assert not aux["out"].node.traced  # values leave the transform without its marks
    (v, aux2), (gp, gx) = cv.value_and_grad(f, argnums=(0, 1), has_aux=True)(params, x)
    assert v.item() == pytest.approx((out * out).sum())
    np.testing.assert_allclose(gx.numpy(), 2 * np.array([[1.0, 2.0], [3.0, 4.0]]).T @ out)
    np.testing.assert_allclose(gp["w"].numpy(), g["w"].numpy())
    assert cv.grad(lambda a, b: (a * b).sum(), argnums=-1)(x, x * 2).tolist() == [1.0, -1.0]


def test_vjp_with_pytree_output():
    x = cv.Tensor([1.0, 2.0])
    out, pull = cv.vjp(lambda a, b: {"p": a * b, "s": (a + b).sum()}, x, cv.Tensor(3.0))
    assert out["p"].tolist() == [3.0, 6.0] and out["s"].item() == 9.0
    ga, gb = pull({"p": cv.Tensor([1.0, 10.0]), "s": cv.Tensor(1.0)})
    assert ga.tolist() == [4.0, 31.0] and gb.shape == () and gb.item() == 23.0
    with pytest.raises(ValueError, match="structure"):
        pull(cv.Tensor([1.0, 1.0]))
    with pytest.raises(ValueError, match="shape"):
        pull({"p": cv.Tensor([1.0]), "s": cv.Tensor(1.0)})
    out, pull, aux = cv.vjp(lambda a: (a * 2, "aux"), x, has_aux=True)
    assert aux == "aux" and pull(cv.ones(2))[0].tolist() == [2.0, 2.0]


def test_jacrev_and_hessian_of_small_functions():
    x = np.array([0.5, -1.0, 2.0])
    j = cv.jacrev(lambda t: t.sin() * t.sum())(cv.Tensor(x)).numpy()
    want = np.diag(np.cos(x) * x.sum()) + np.sin(x)[:, None]
    np.testing.assert_allclose(j, want, rtol=1e-12)
    a = cv.Tensor(np.ones((2, 3)))
    jac = cv.jacrev(lambda a, b: {"m": a @ b}, argnums=(0, 1))(a, cv.Tensor(np.ones(3)))
    assert jac["m"][0].shape == (2, 2, 3) and jac["m"][1].shape == (2, 3)
    np.testing.assert_array_equal(jac["m"][1].numpy(), np.ones((2, 3)))
    h = cv.jacrev(cv.grad(lambda t: (t ** 3).sum() * t[0]))(cv.Tensor(x)).numpy()
    want = np.diag(6 * x * x[0])
    want[0, :] += 3 * x ** 2
    want[:, 0] += 3 * x ** 2
    np.testing.assert_allclose(h, want, rtol=1e-12)


def test_grad_errors_are_clear():
    with pytest.raises(TypeError, match="int64"):
        cv.grad(lambda t: t.sum())(cv.Tensor([1, 2]))
    with pytest.raises(TypeError, match="int"):
        cv.grad(lambda t: t * 2)(3)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        cv.grad(lambda t: t * 2)(cv.Tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="float"):
        cv.grad(lambda t: t.argmax())(cv.Tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="argnums"):
        cv.grad(lambda t: t.sum(), argnums=2)(cv.Tensor([1.0]))
    with pytest.raises(ValueError, match="pair"):
        cv.grad(lambda t: t.sum(), has_aux=True)(cv.Tensor([1.0]))
    assert cv.grad(lambda t: (t * t).sum())(1.5).item() == 3.0  # Python floats are accepted


def test_zero_d_and_empty_inputs():
    assert cv.grad(lambda t: t * t)(cv.Tensor(3.0)).item() == 6.0
    g = cv.grad(lambda t: (t * 2).sum())(cv.zeros(0, 3))
    assert g.shape == (0, 3) and g.numpy().size == 0
    g = cv.grad(lambda t: 5.0 + t.sum() * 0)(cv.zeros(2))
    assert g.tolist() == [0.0, 0.0]
    assert cv.grad(lambda t: cv.Tensor(1.0))(cv.ones(2)).tolist() == [0.0, 0.0]  # output ignores the input
    w = cv.zeros(0, 2, requires_grad=True)
    (w * 2).backward(cv.zeros(0, 2))
    assert w.grad.shape == (0, 2)


def test_nested_grad_of_a_two_argument_function():
    f = lambda x, y: (x * x * y).sum()  # noqa: E731
    dfdx = cv.grad(f)
    d2 = cv.grad(lambda x, y: dfdx(x, y).sum(), argnums=1)(cv.Tensor([1.0, 2.0]), cv.Tensor([3.0, 4.0]))
    assert d2.tolist() == [2.0, 4.0]  # d/dy of 2xy


# --- custom_vjp and checkpoint -----------------------------------------------------------------------

def test_custom_vjp_replaces_the_rule_and_stays_differentiable():
    @cv.custom_vjp
    def f(x, y):
        return x.sin() * y

    def fwd(x, y):
        return f(x, y), (x, y)

    def bwd(res, g):
        x, y = res
        return g * x.cos() * y, None  # no gradient to y on purpose

    f.defvjp(fwd, bwd)
    x, y = cv.Tensor([0.3, 0.7]), cv.Tensor([2.0, 3.0])
    gx, gy = cv.grad(lambda a, b: f(a, b).sum(), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx.numpy(), np.cos([0.3, 0.7]) * [2.0, 3.0], rtol=1e-6)
    assert gy.tolist() == [0.0, 0.0]
    second = cv.grad(lambda a: cv.grad(lambda s: f(s, y).sum())(a).sum())(x)
    np.testing.assert_allclose(second.numpy(), -np.sin([0.3, 0.7]) * [2.0, 3.0], rtol=1e-6)
    assert f(x, y).tolist() == pytest.approx((np.sin([0.3, 0.7]) * [2, 3]).tolist())  # plain call runs f
    w = cv.Tensor([0.3, 0.7], requires_grad=True)
    f(w, y).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), gx.numpy())


def test_custom_vjp_with_pytrees_and_errors():
    @cv.custom_vjp
    def g(d):
        return {"a": d["x"] * 2, "n": d["x"].argmax()}

    g.defvjp(lambda d: (g(d), None), lambda res, ct: ({"x": ct["a"] * 100},))
    out = cv.grad(lambda x: g({"x": x})["a"].sum())(cv.Tensor([1.0, 2.0]))
    assert out.tolist() == [100.0, 100.0]

    @cv.custom_vjp
    def bad(x):
        return x * 2

    bad.defvjp(lambda x: (x * 2, None), lambda res, ct: ct)
    with pytest.raises(TypeError, match="one cotangent per argument"):
        cv.grad(lambda x: bad(x).sum())(cv.Tensor([1.0]))
    bad.defvjp(lambda x: (x * 2, None), lambda res, ct: (cv.ones(3),))
    with pytest.raises(ValueError, match="shape"):
        cv.grad(lambda x: bad(x).sum())(cv.Tensor([1.0]))

    @cv.custom_vjp
    def undefined(x):
        return x

    with pytest.raises(TypeError, match="defvjp"):
        undefined(cv.Tensor([1.0]))
    w = cv.Tensor([1.0], requires_grad=True)

    @cv.custom_vjp
    def closes(x):
        return x * w

    closes.defvjp(lambda x: (closes(x), None), lambda res, ct: (ct,))
    with pytest.raises(ValueError, match="closes over"):
        cv.grad(lambda x: closes(x).sum())(cv.Tensor([1.0]))


def test_checkpoint_gives_the_same_gradients_and_recomputes():
    rng = np.random.default_rng(3)
    w = cv.Tensor(rng.normal(size=(3, 3)), requires_grad=True)
    x = cv.Tensor(rng.normal(size=(4, 3)))
    layer = lambda h: (h @ w).tanh()  # noqa: E731  (closes over the parameter w)
    ck = cv.checkpoint(layer)
    (v1, g1) = cv.value_and_grad(lambda x: layer(layer(x)).sum())(x)
    (v2, g2) = cv.value_and_grad(lambda x: ck(ck(x)).sum())(x)
    np.testing.assert_allclose(g2.numpy(), g1.numpy(), rtol=1e-12)
    assert v1.item() == pytest.approx(v2.item())
    layer(layer(x)).sum().backward()
    plain = w.grad.numpy()
    w.grad = None
    ck(ck(x)).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), plain, rtol=1e-12)
    # the backward of a checkpointed region reads none of the forward's intermediates (here tanh),
    # while without checkpoint it shares them; the region's inputs are read in both cases
    inner = lambda h: (h @ w).tanh().sin()  # noqa: E731
    tanh_of = lambda t: {id(n) for n in toposort([t.node]) if n.op is Op.TANH}  # noqa: E731
    v, g = cv.value_and_grad(lambda x: inner(x).sum())(x)
    assert tanh_of(g) & tanh_of(v)
    v, g = cv.value_and_grad(lambda x: cv.checkpoint(inner)(x).sum())(x)
    assert tanh_of(g) and tanh_of(v) and not tanh_of(g) & tanh_of(v)
    np.testing.assert_allclose(g.numpy(), cv.grad(lambda x: inner(x).sum())(x).numpy(), rtol=1e-12)
    second = cv.grad(lambda t: cv.grad(lambda s: ck(s).sum())(t).sum())(x)
    first_plain = cv.grad(lambda t: cv.grad(lambda s: layer(s).sum())(t).sum())(x)
    np.testing.assert_allclose(second.numpy(), first_plain.numpy(), rtol=1e-12)


# --- kernels ------------------------------------------------------------------------------------------

def test_mlp_forward_and_backward_schedule_into_few_kernels():
    rng = np.random.default_rng(4)
    x, y = cv.Tensor(rng.normal(size=(16, 8))), cv.Tensor(rng.normal(size=(16, 1)))
    params = {"w1": cv.Tensor(rng.normal(size=(8, 32))), "b1": cv.zeros(32, dtype=cv.float64),
              "w2": cv.Tensor(rng.normal(size=(32, 1))), "b2": cv.zeros(1, dtype=cv.float64)}
    params = {k: v.realize() for k, v in params.items()}

    def loss(p):
        h = (x @ p["w1"] + p["b1"]).tanh()
        return ((h @ p["w2"] + p["b2"] - y) ** 2).mean()

    value, grads = cv.value_and_grad(loss)(params)
    kernels = create_schedule([value.node] + [grads[k].node for k in sorted(grads)], "CPU")
    # 5 outputs (loss and 4 gradients) are 5 kernels at least; the two matmul results that several
    # of them read are stored once each. Everything else fuses.
    assert len(kernels) <= 7, kernels
    h = np.tanh(x.numpy() @ params["w1"].numpy())
    err = 2 * (h @ params["w2"].numpy() - y.numpy()) / 16
    np.testing.assert_allclose(grads["w2"].numpy(), h.T @ err, rtol=1e-10)
    np.testing.assert_allclose(grads["b2"].numpy(), err.sum(0), rtol=1e-10)


def test_elementwise_gradient_is_one_kernel():
    x = cv.Tensor(np.linspace(0.1, 1, 8))
    g = cv.grad(lambda t: (t.sin() * t.exp()).sum())(x)
    assert len(g.schedule()) == 1


# --- fuzz ---------------------------------------------------------------------------------------------

STEPS = {
    "sin": lambda a, b: a.sin(), "tanh": lambda a, b: a.tanh(), "exp": lambda a, b: (a * 0.5).exp(),
    "square": lambda a, b: a * a, "softplus": lambda a, b: a.softplus(), "atan": lambda a, b: a.atan(),
    "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "sub": lambda a, b: b - a,
    "div": lambda a, b: a / (b * b + 1), "sigmoid": lambda a, b: a.sigmoid() * b,
    "sqrt": lambda a, b: (a * a + 1).sqrt(), "where": lambda a, b: cv.where(b > 0, a, b * 2),
}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=5), st.integers(0, 2**31 - 1))
def test_fuzz_elementwise_chains_match_finite_differences(ops, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(-1.5, 1.5, size=3), rng.uniform(-1.5, 1.5, size=(2, 1))
    b = np.where(np.abs(b) < 0.1, 0.5, b)  # keep where() away from its switch point

    def f(x, y):
        for name in ops:
            x = STEPS[name](x, y)
        return x

    check(f, a, b, rtol=1e-4, atol=1e-6)


def test_grad_of_vmap_of_a_custom_vjp_function():
    @cv.custom_vjp
    def sq(x):
        return x * x

    sq.defvjp(lambda x: (x * x, x), lambda x, g: (2 * x * g * 10,))  # a rule that differs from autodiff
    v = cv.Tensor([1.0, 2.0, 3.0])
    assert cv.grad(lambda v: cv.vmap(sq)(v).sum())(v).tolist() == [20.0, 40.0, 60.0]
    w = cv.Tensor([[1.0, 2.0], [3.0, 4.0]])
    # an unbatched argument (w[0] inside): its cotangent is summed over the batch
    got = cv.grad(lambda w: cv.vmap(lambda x: sq(x * w[0]).sum())(w).sum())(w).numpy()
    want = cv.grad(lambda w: sum((sq(w[i] * w[0])).sum() for i in range(2)))(w).numpy()
    np.testing.assert_allclose(got, want)


def test_sigmoid_is_stable_at_the_extremes_and_its_gradient_finite():
    """The naive 1/(1+exp(-x)) gives gradient 0*inf = nan at x = -100 in float32 and rounds tiny
    values to 0; the stable form keeps both (float64 reference)."""
    a = np.array([-100.0, -20.0, -1.0, 0.0, 1.0, 20.0, 100.0], np.float32)
    x = cv.Tensor(a, requires_grad=True)
    y = x.sigmoid()
    y.sum().backward()
    ref = 1 / (1 + np.exp(-a.astype(np.float64)))
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-6, atol=1e-44)  # (sigmoid(-100) is subnormal in float32)
    e = np.exp(-np.abs(a.astype(np.float64)))
    np.testing.assert_allclose(x.grad.numpy(), e / (1 + e) ** 2, rtol=1e-5, atol=1e-44)


def test_a_transforms_results_keep_no_variable_of_its_own_under_a_detach():
    """value_and_grad's results are the plain graph of f on the plain inputs, below a DETACH too:
    a VAR left under ``x.max().detach()`` made jit compute everything below it twice (a language
    model's whole forward pass). And logsumexp/softmax/log_softmax shift by a detached max, so
    their backward has no max one-hot (no comparison with the max) and is the softmax."""
    from corvid.graph.node import Op, toposort

    rng = np.random.default_rng(0)
    x, w = (cv.Tensor(rng.standard_normal(s).astype(np.float32)) for s in ((6, 4), (4, 9)))

    def f(p):
        z = p[0] @ p[1]
        return (z.logsumexp(1) + z.softmax(1)[:, 0] + z.log_softmax(1)[:, 1] + (z - z.max().detach()).sum(1)).sum()

    loss, grads = cv.value_and_grad(f)((x, w))
    for t in (loss, *grads):
        assert not [n for n in toposort([t.node]) if n.op is Op.VAR], "a VAR of the transform is left"
    g = cv.grad(lambda z: z.logsumexp(1).sum())(x)
    # (no comparison of every element with the max, the ties' one-hot: only the max's isinf, per row)
    assert not [n for n in toposort([g.node]) if n.op is Op.CMPEQ and n.shape == x.shape]
    np.testing.assert_allclose(g.numpy(), x.softmax(1).numpy(), rtol=1e-6)
    # finite differences, in float64, of the shift-invariant part (a detached global max does
    # change the gradient: it is held constant)
    def f(p):
        z = p[0] @ p[1]
        return (z.logsumexp(1) + z.softmax(1)[:, 0] + z.log_softmax(1)[:, 1]).sum()

    x64, w64 = x.astype(cv.float64), w.astype(cv.float64)
    gx = cv.grad(f)((x64, w64))[0].numpy()
    eps, num = 1e-6, np.zeros(x.shape)
    for i in np.ndindex(*x.shape):
        d = np.zeros(x.shape)
        d[i] = eps
        num[i] = (f((x64 + cv.Tensor(d), w64)).item() - f((x64 - cv.Tensor(d), w64)).item()) / (2 * eps)
    np.testing.assert_allclose(gx, num, rtol=1e-5, atol=1e-6)

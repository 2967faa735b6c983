"""Forward mode: jvp per primitive against central finite differences (float64), composites,
pytrees, has_aux, custom_jvp, jacfwd, jvp of jvp, Hessian-vector products, and errors.

Per-primitive tangents are checked against finite differences of the numpy reference, and all
unary ops are realized in one stacked graph (one compile) to keep the file fast.
"""

import math

import numpy as np
import pytest

import corvid as cv
from corvid.graph.node import Op, node, toposort

EPS = 1e-6
RNG = np.random.default_rng(0)


def T(a):
    return cv.Tensor(np.asarray(a, dtype=np.float64))


def fd(f_np, xs, ts):
    """Central finite difference of numpy ``f_np`` at ``xs`` along ``ts``."""
    plus = f_np(*[x + EPS * t for x, t in zip(xs, ts)])
    minus = f_np(*[x - EPS * t for x, t in zip(xs, ts)])
    return (plus - minus) / (2 * EPS)


def fd_cv(f, xs, ts):
    """Central finite difference of a corvid function (evaluated through corvid)."""
    plus = f(*[T(x + EPS * t) for x, t in zip(xs, ts)]).numpy()
    minus = f(*[T(x - EPS * t) for x, t in zip(xs, ts)]).numpy()
    return (plus - minus) / (2 * EPS)


UNARY = {  # name: (corvid, numpy, low, high)
    "neg": (lambda x: -x, np.negative, -3, 3),
    "reciprocal": (lambda x: x.reciprocal(), np.reciprocal, 0.5, 3),
    "sqrt": (lambda x: x.sqrt(), np.sqrt, 0.5, 3),
    "exp": (lambda x: x.exp(), np.exp, -2, 2),
    "exp2": (lambda x: x.exp2(), np.exp2, -2, 2),
    "log": (lambda x: x.log(), np.log, 0.5, 3),
    "log2": (lambda x: x.log2(), np.log2, 0.5, 3),
    "log1p": (lambda x: x.log1p(), np.log1p, -0.5, 2),
    "expm1": (lambda x: x.expm1(), np.expm1, -2, 2),
    "sin": (lambda x: x.sin(), np.sin, -3, 3),
    "cos": (lambda x: x.cos(), np.cos, -3, 3),
    "tan": (lambda x: x.tan(), np.tan, -1, 1),
    "asin": (lambda x: x.asin(), np.arcsin, -0.9, 0.9),
    "acos": (lambda x: x.acos(), np.arccos, -0.9, 0.9),
    "atan": (lambda x: x.atan(), np.arctan, -3, 3),
    "sinh": (lambda x: x.sinh(), np.sinh, -2, 2),
    "cosh": (lambda x: x.cosh(), np.cosh, -2, 2),
    "tanh": (lambda x: x.tanh(), np.tanh, -2, 2),
    "asinh": (lambda x: x.asinh(), np.arcsinh, -3, 3),
    "acosh": (lambda x: x.acosh(), np.arccosh, 1.5, 4),
    "atanh": (lambda x: x.atanh(), np.arctanh, -0.9, 0.9),
    "erf": (lambda x: x.erf(), np.vectorize(math.erf), -2, 2),
    "abs": (lambda x: x.abs(), np.abs, -3, 3),
    "sigmoid": (lambda x: x.sigmoid(), lambda x: 1 / (1 + np.exp(-x)), -3, 3),
    "gelu_tanh": (lambda x: x.gelu("tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))), -3, 3),
}


def test_unary_primitives_match_finite_differences():
    names = list(UNARY)
    xs = {k: RNG.uniform(UNARY[k][2], UNARY[k][3], size=7) for k in names}
    ts = {k: RNG.standard_normal(7) for k in names}
    tangents = [cv.jvp(UNARY[k][0], (T(xs[k]),), (T(ts[k]),))[1] for k in names]
    got = cv.stack(tangents).numpy()  # one graph, one compile
    for row, k in zip(got, names):
        want = fd(UNARY[k][1], [xs[k]], [ts[k]])
        np.testing.assert_allclose(row, want, rtol=1e-6, atol=1e-7, err_msg=k)


BINARY = {  # name: (corvid, numpy, domain of x, domain of y)
    "add": (lambda x, y: x + y, np.add, (-3, 3), (-3, 3)),
    "sub": (lambda x, y: x - y, np.subtract, (-3, 3), (-3, 3)),
    "mul": (lambda x, y: x * y, np.multiply, (-3, 3), (-3, 3)),
    "div": (lambda x, y: x / y, np.divide, (-3, 3), (0.5, 3)),
    "pow": (lambda x, y: x ** y, np.power, (0.5, 3), (-2, 2)),
    "maximum": (lambda x, y: x.maximum(y), np.maximum, (-3, 3), (-3, 3)),
    "minimum": (lambda x, y: x.minimum(y), np.minimum, (-3, 3), (-3, 3)),
    "atan2": (lambda x, y: x.atan2(y), np.arctan2, (-3, 3), (-3, 3)),
    "remainder": (lambda x, y: x % y, np.mod, (-5, 5), (0.7, 2)),
}


def test_binary_primitives_match_finite_differences():
    names = list(BINARY)
    data = {}
    for k in names:
        (lx, hx), (ly, hy) = BINARY[k][2], BINARY[k][3]
        data[k] = [RNG.uniform(lx, hx, 9), RNG.uniform(ly, hy, 9), RNG.standard_normal(9), RNG.standard_normal(9)]
    rows = []
    for k in names:
        x, y, tx, ty = data[k]
        rows.append(cv.jvp(BINARY[k][0], (T(x), T(y)), (T(tx), T(ty)))[1])
        rows.append(cv.jvp(lambda a: BINARY[k][0](a, T(y)), (T(x),), (T(tx),))[1])  # one side only
        rows.append(cv.jvp(lambda b: BINARY[k][0](T(x), b), (T(y),), (T(ty),))[1])
    got = cv.stack(rows).numpy().reshape(len(names), 3, -1)
    for (both, left, right), k in zip(got, names):
        x, y, tx, ty = data[k]
        f = BINARY[k][1]
        np.testing.assert_allclose(both, fd(f, [x, y], [tx, ty]), rtol=1e-6, atol=1e-7, err_msg=k)
        np.testing.assert_allclose(left, fd(lambda a: f(a, y), [x], [tx]), rtol=1e-6, atol=1e-7, err_msg=k)
        np.testing.assert_allclose(right, fd(lambda b: f(x, b), [y], [ty]), rtol=1e-6, atol=1e-7, err_msg=k)


def test_ties_split_the_tangent_and_abs_at_zero():
    x, y = T([1.0, 2.0, 0.0]), T([1.0, 3.0, 0.0])
    tx, ty = T([1.0, 1.0, 1.0]), T([3.0, 3.0, 3.0])
    _, t = cv.jvp(lambda a, b: a.maximum(b), (x, y), (tx, ty))
    assert t.tolist() == [2.0, 3.0, 2.0]
    _, t = cv.jvp(lambda a: a.abs(), (T([0.0, -2.0]),), (T([5.0, 5.0]),))
    assert t.tolist() == [0.0, -5.0]
    # 0 ** b with b > 0: the exponent's tangent term is 0, not nan
    _, t = cv.jvp(lambda b: T([0.0, 2.0]) ** b, (T([2.0, 2.0]),), (T([1.0, 1.0]),))
    assert t.numpy() == pytest.approx([0.0, 4 * math.log(2)])


def test_zero_tangents_for_rounding_comparisons_and_int_outputs():
    x = T([0.3, -1.7, 2.5])
    one = T([1.0, 1.0, 1.0])
    for f in (lambda a: a.floor(), lambda a: a.ceil(), lambda a: a.round(), lambda a: a.trunc(),
              lambda a: a // 0.7, lambda a: a.bitcast(cv.int64).bitcast(cv.float64)):
        y, t = cv.jvp(f, (x,), (one,))
        assert t.dtype == cv.float64 and t.tolist() == [0.0, 0.0, 0.0]
    for f, d in ((lambda a: a > 0, cv.bool), (lambda a: a.astype(cv.int32), cv.int32),
                 (lambda a: a.argmax(), cv.int64)):
        y, t = cv.jvp(f, (x,), (one,))
        assert t.dtype == d and t.shape == y.shape and not t.numpy().any()
    # tangents of int primals are ignored; float outputs of them have zero tangents
    y, t = cv.jvp(lambda k: k * 2.5, (cv.Tensor([1, 2]),), (cv.Tensor([7, 7]),))
    assert y.tolist() == [2.5, 5.0] and t.tolist() == [0.0, 0.0]


def test_cast_where_detach_and_contiguous():
    x, t = T([1.0, -2.0, 3.0]), T([0.5, 0.25, 2.0])
    _, tt = cv.jvp(lambda a: a.astype(cv.float32) * 2, (x,), (t,))
    assert tt.dtype == cv.float32 and tt.tolist() == [1.0, 0.5, 4.0]
    _, tt = cv.jvp(lambda a: cv.where(a > 0, a * a, -a), (x,), (t,))
    assert tt.tolist() == [1.0, -0.25, 12.0]
    detach = lambda a: a._new(node(Op.DETACH, (a.node,), None, a.dtype, a.shape))  # noqa: E731
    _, tt = cv.jvp(lambda a: a * detach(a), (x,), (t,))
    assert tt.tolist() == (x.numpy() * t.numpy()).tolist()
    _, tt = cv.jvp(lambda a: (a * 3).contiguous() + 1, (x,), (t,))
    assert tt.tolist() == [1.5, 0.75, 6.0]


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
@pytest.mark.parametrize("axis", [None, 1, (0, 2)])
def test_reductions(op, axis):
    x = RNG.uniform(0.5, 2.0, size=(2, 3, 4))
    t = RNG.standard_normal(x.shape)
    f = lambda a: getattr(a, op)(axis=axis, keepdims=True)  # noqa: E731
    _, got = cv.jvp(f, (T(x),), (T(t),))
    np.testing.assert_allclose(got.numpy(), fd(lambda a: getattr(np, op)(a, axis=axis, keepdims=True), [x], [t]),
                               rtol=1e-6, atol=1e-7)


def test_prod_with_zeros_and_max_with_ties_are_exact():
    t = T([1.0, 2.0, 3.0, 4.0])
    _, got = cv.jvp(lambda a: a.prod(), (T([0.0, 2.0, 3.0, 5.0]),), (t,))
    assert got.item() == 30.0  # only the zero's term: 1 * 2*3*5
    _, got = cv.jvp(lambda a: a.prod(), (T([0.0, 2.0, 0.0, 5.0]),), (t,))
    assert got.item() == 0.0
    _, got = cv.jvp(lambda a: a.max(), (T([5.0, 2.0, 5.0, 1.0]),), (t,))
    assert got.item() == 2.0  # (1 + 3) / 2


MOVES = {
    "reshape": lambda a: a.reshape(4, 6) * T(np.arange(24.0).reshape(4, 6)),
    "permute": lambda a: a.permute(2, 0, 1).sin(),
    "expand": lambda a: a[:, :1, :].expand(2, 5, 4).exp(),
    "pad": lambda a: a.pad(((1, 0), (0, 2), (1, 1)), value=7.0) ** 2,
    "shrink_step": lambda a: a[:, ::2, 1:3].tanh(),
    "flip": lambda a: a.flip((0, 2)) * a,
    "cat": lambda a: cv.cat([a, a.sin(), a[:, :1]], axis=1),
    "stack_split": lambda a: cv.stack(a.split(2, axis=2), axis=0).cos(),
}


def test_movement_ops_match_finite_differences():
    x = RNG.standard_normal((2, 3, 4))
    t = RNG.standard_normal(x.shape)
    for k, f in MOVES.items():
        y, got = cv.jvp(f, (T(x),), (T(t),))
        assert got.shape == y.shape, k
        np.testing.assert_allclose(got.numpy(), fd_cv(f, [x], [t]), rtol=1e-5, atol=1e-6, err_msg=k)


COMPOSITES = {
    "softmax": lambda a, b: a.softmax(axis=-1) * b,
    "log_softmax": lambda a, b: a.log_softmax(axis=0) + b,
    "logsumexp": lambda a, b: (a * b).logsumexp(axis=1),
    "matmul": lambda a, b: a @ b.T,
    "var_std": lambda a, b: a.var(axis=1) + b.std(axis=0).sum(),
    "mean_sq": lambda a, b: ((a - b) ** 2).mean(),
    "silu_softplus": lambda a, b: a.silu() + b.softplus(),
}


def test_composites_match_finite_differences():
    x, y = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    tx, ty = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    for k, f in COMPOSITES.items():
        _, got = cv.jvp(f, (T(x), T(y)), (T(tx), T(ty)))
        np.testing.assert_allclose(got.numpy(), fd_cv(f, [x, y], [tx, ty]), rtol=1e-5, atol=1e-6, err_msg=k)


def test_tangent_fuses_with_the_primal_into_one_kernel():
    y, t = cv.jvp(lambda a: (a * 2 + 1).exp().sin(), (T(np.ones(8)),), (T(np.ones(8)),))
    assert len(t.schedule()) == 1
    assert len(cv.stack([y, t]).schedule()) == 1


def test_results_carry_no_marks_of_this_jvp():
    y, t = cv.jvp(lambda a: (a * a).sin(), (T([1.0, 2.0]),), (T([1.0, 1.0]),))
    assert not y.node.traced and not t.node.traced
    assert not any(n.op is Op.VAR for n in toposort([y.node, t.node]))


def test_jacfwd_has_aux_and_random_draws():
    jac, aux = cv.jacfwd(lambda a: (a * 3, {"sum": a.sum()}), has_aux=True)(T([1.0, 2.0]))
    assert jac.tolist() == [[3.0, 0.0], [0.0, 3.0]] and aux["sum"].item() == 3.0
    cv.manual_seed(0)  # every basis vector sees the same draw: the Jacobian of one sample of f
    noise = cv.rand(3, dtype=cv.float64)
    cv.manual_seed(0)
    jac = cv.jacfwd(lambda a: a * cv.rand(3, dtype=cv.float64))(T([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(jac.numpy(), np.diag(noise.numpy()))


def test_pytrees_and_has_aux():
    params = {"w": T([[1.0, 2.0], [3.0, 4.0]]), "b": T([0.5, -0.5])}
    tans = {"w": T([[1.0, 0.0], [0.0, 0.0]]), "b": T([0.0, 1.0])}
    x = T([1.0, 1.0])

    def f(p, x):
        h = p["w"] @ x + p["b"]
        return (h, [h.sum()]), {"note": "aux", "h2": h * 2}

    (out, tan, aux) = cv.jvp(f, (params, x), (tans, T([0.0, 0.0])), has_aux=True)
    assert out[0].tolist() == [3.5, 6.5] and tan[0].tolist() == [1.0, 1.0]
    assert isinstance(tan[1], list) and tan[1][0].item() == 2.0
    assert aux["note"] == "aux" and aux["h2"].tolist() == [7.0, 13.0]


def test_jvp_of_jvp_is_the_second_directional_derivative():
    x, v = RNG.standard_normal(5), RNG.standard_normal(5)
    f = lambda a: (a.sin() * a * a).sum()  # noqa: E731
    d1 = lambda a: cv.jvp(f, (a,), (T(v),))[1]  # noqa: E731
    _, d2 = cv.jvp(d1, (T(x),), (T(v),))
    # f = sum(x^2 sin x): the Hessian is diagonal with 2 sin x + 4 x cos x - x^2 sin x
    h = 2 * np.sin(x) + 4 * x * np.cos(x) - x * x * np.sin(x)
    assert d2.item() == pytest.approx(float(np.sum(v * h * v)), rel=1e-10)


def _hand_grad(a):  # gradient of sum(x^2 sin x), written by hand
    return 2 * a * a.sin() + a * a * a.cos()


def test_hessian_vector_product_of_a_gradient():
    x, v = RNG.standard_normal(6), RNG.standard_normal(6)
    _, hv = cv.jvp(_hand_grad, (T(x),), (T(v),))
    h = 2 * np.sin(x) + 4 * x * np.cos(x) - x * x * np.sin(x)
    np.testing.assert_allclose(hv.numpy(), h * v, rtol=1e-10)


def test_hvp_through_reverse_mode_grad():
    x, v = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3))
    loss = lambda a: (a.tanh() * a).sum() + (a @ a.T).logsumexp()  # noqa: E731
    _, hv = cv.jvp(cv.grad(loss), (T(x),), (T(v),))
    want = (cv.grad(loss)(T(x + EPS * v)).numpy() - cv.grad(loss)(T(x - EPS * v)).numpy()) / (2 * EPS)
    np.testing.assert_allclose(hv.numpy(), want, rtol=1e-5, atol=1e-7)


def test_reverse_over_forward():
    x, v = RNG.standard_normal(5), RNG.standard_normal(5)
    f = lambda a: (a.sin() * a * a).sum()  # noqa: E731
    hv = cv.grad(lambda a: cv.jvp(f, (a,), (T(v),))[1])(T(x))
    h = 2 * np.sin(x) + 4 * x * np.cos(x) - x * x * np.sin(x)
    np.testing.assert_allclose(hv.numpy(), h * v, rtol=1e-10)


def test_tangent_graph_grows_linearly_on_shared_subexpressions():
    def f(a):
        for _ in range(200):  # a diamond per step: 2**200 paths, 200 * k nodes
            a = (a * a).sin() + a
        return a

    x = T([0.1, 0.2])
    y, t = cv.jvp(f, (x,), (T([1.0, 1.0]),))
    assert len(toposort([t.node])) < 15 * 200


def test_jacfwd():
    a = RNG.standard_normal((3, 4))
    x = RNG.standard_normal(4)
    jac = cv.jacfwd(lambda m, v: (m @ v).tanh(), argnums=1)(T(a), T(x))
    want = (1 - np.tanh(a @ x) ** 2)[:, None] * a
    np.testing.assert_allclose(jac.numpy(), want, rtol=1e-12)
    ja, jx = cv.jacfwd(lambda m, v: m @ v, argnums=(0, 1))(T(a), T(x))
    assert ja.shape == (3, 3, 4) and jx.shape == (3, 4)
    np.testing.assert_allclose(ja.numpy(), np.einsum("ij,k->ijk", np.eye(3), x))
    np.testing.assert_allclose(jx.numpy(), a)
    # pytree input and output: outer structure is the output's, inner the input's
    jt = cv.jacfwd(lambda p: {"s": (p["u"] * p["v"]).sum(), "u2": p["u"] * 2})({"u": T([1.0, 2.0]), "v": T([3.0, 4.0])})
    assert jt["s"]["u"].tolist() == [3.0, 4.0] and jt["s"]["v"].tolist() == [1.0, 2.0]
    assert jt["u2"]["u"].tolist() == [[2.0, 0.0], [0.0, 2.0]] and jt["u2"]["v"].tolist() == [[0.0, 0.0], [0.0, 0.0]]
    with pytest.raises(TypeError, match="float inputs"):
        cv.jacfwd(lambda k: k * 2)(cv.Tensor([1, 2]))


def test_hessian():
    x = RNG.standard_normal(4)
    h = cv.hessian(lambda a: (a.sin() * a * a).sum())(T(x))
    np.testing.assert_allclose(h.numpy(), np.diag(2 * np.sin(x) + 4 * x * np.cos(x) - x * x * np.sin(x)),
                               rtol=1e-10, atol=1e-12)


@cv.custom_jvp
def log1pexp(x):
    return (1 + x.exp()).log()


@log1pexp.defjvp
def _log1pexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return log1pexp(x), t * x.sigmoid()


@cv.custom_jvp
def scaled(x, y):  # a rule that disagrees with the implementation, so we can see which one runs
    return x * y


@scaled.defjvp
def _scaled_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    return scaled(x, y), tx * 100 + ty * 1000


def test_custom_jvp_rule_is_used():
    x = cv.Tensor([100.0, 0.0])  # float32: differentiating the implementation gives inf/inf = nan at 100
    y, t = cv.jvp(log1pexp, (x,), (cv.Tensor([1.0, 2.0]),))
    assert t.tolist() == [1.0, 1.0]
    assert y.numpy()[1] == pytest.approx(math.log(2))
    assert np.isnan(cv.jvp(log1pexp.fun, (x,), (cv.Tensor([1.0, 2.0]),))[1].numpy()[0])
    _, t = cv.jvp(lambda a, b: scaled(a, b) * 2, (T([1.0]), T([2.0])), (T([1.0]), T([0.0])))
    assert t.tolist() == [200.0]
    _, t = cv.jvp(lambda b: scaled(T([3.0]), b), (T([2.0]),), (T([1.0]),))
    assert t.tolist() == [1000.0]  # the non-differentiated argument gets a zero tangent
    assert scaled(T([3.0]), T([2.0])).tolist() == [6.0]  # calling it runs the implementation
    jac = cv.jacfwd(lambda a: scaled(a, a))(T([1.0, 2.0]))  # the rule under jacfwd's vmap
    assert jac.tolist() == [[1100.0, 0.0], [0.0, 1100.0]]


def test_custom_jvp_inside_vmap_and_nested_jvp():
    xs = T([[1.0, 2.0], [3.0, 4.0]])
    _, t = cv.jvp(cv.vmap(lambda a: scaled(a, a).sum()), (xs,), (cv.ones_like(xs),))
    assert t.tolist() == [2200.0, 2200.0]
    # the rule's own output is differentiable: second derivative of log1pexp is sigmoid'
    d1 = lambda a: cv.jvp(log1pexp, (a,), (T([1.0]),))[1]  # noqa: E731
    _, d2 = cv.jvp(d1, (T([0.3]),), (T([1.0]),))
    s = 1 / (1 + math.exp(-0.3))
    assert d2.item() == pytest.approx(s * (1 - s), rel=1e-12)
    no_rule = cv.custom_jvp(lambda a: a)
    with pytest.raises(TypeError, match="defjvp"):
        no_rule(T([1.0]))


def test_errors():
    x = T([1.0, 2.0])
    with pytest.raises(TypeError, match="tuples"):
        cv.jvp(lambda a: a, x, x)
    with pytest.raises(ValueError, match="structures"):
        cv.jvp(lambda a, b: a, (x, x), (x,))
    with pytest.raises(ValueError, match=r"shape \(3,\).*shape \(2,\)"):
        cv.jvp(lambda a: a, (x,), (T([1.0, 2.0, 3.0]),))
    with pytest.raises(ValueError, match="pair"):
        cv.jvp(lambda a: a, (x,), (x,), has_aux=True)

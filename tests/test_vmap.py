"""vmap against a Python loop ``stack([f(x[i]) for i in ...])``: in_axes/out_axes variants, nested
vmap, matmul, reductions, movement, cat/stack, where, random numbers, composition with jvp and
grad, fusion, and errors. A hypothesis fuzz runs random op chains with random axes."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import corvid as cv
from corvid.graph.node import toposort
from corvid.tree import tree_flatten, tree_unflatten

RNG = np.random.default_rng(1)


def T(a, dtype=np.float32):
    return cv.Tensor(np.asarray(a, dtype=dtype))


def take(x, axis, i):
    """Example ``i`` of ``x`` along ``axis`` (what vmap hands to f), as a fresh tensor: every
    example then has the same graph, so the loop compiles its kernels once."""
    return cv.Tensor(np.take(x.numpy(), i, axis=axis))


def loop(f, args, in_axes=0, out_axes=0):
    """The reference: call f per example and stack the outputs along out_axes."""
    axes = [in_axes] * len(args) if not isinstance(in_axes, (tuple, list)) else list(in_axes)
    size = next(a.shape[ax % a.ndim] for a, ax in zip(args, axes) if ax is not None)
    outs = [f(*[a if ax is None else take(a, ax, i) for a, ax in zip(args, axes)]) for i in range(size)]
    leaves = [[y.realize() for y in tree_flatten(o)[0]] for o in outs]
    tree = tree_flatten(outs[0])[1]
    oaxes = [out_axes] * len(leaves[0]) if not isinstance(out_axes, (tuple, list)) else list(out_axes)
    return tree_unflatten(tree, [cv.stack([ls[k] for ls in leaves], axis=oaxes[k]) for k in range(len(leaves[0]))])


def check(f, args, in_axes=0, out_axes=0, **kw):
    got = cv.vmap(f, in_axes=in_axes, out_axes=out_axes, **kw)(*args)
    want = loop(f, args, in_axes, out_axes)
    g, gt = tree_flatten(got)
    w, wt = tree_flatten(want)
    assert gt == wt
    for a, b in zip(g, w):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    return got


def test_elementwise_and_in_axes_variants():
    x, y = T(RNG.standard_normal((3, 4))), T(RNG.standard_normal((4, 3)))
    f = lambda a, b: (a * 2 + b).exp() - a.sin()  # noqa: E731
    check(f, (x, y), in_axes=(0, 1))
    check(f, (x, y), in_axes=(-2, -1))
    check(f, (x, y[:, 0]), in_axes=(0, None))
    check(f, (x, y), in_axes=(1, 0), out_axes=1)
    check(f, (x, y), in_axes=(1, 0), out_axes=-1)


def test_out_axes_and_pytrees():
    x, w = T(RNG.standard_normal((2, 3))), T(RNG.standard_normal((3,)))
    params = {"w": w, "b": T([0.5])}
    f = lambda p, a: {"y": a * p["w"] + p["b"], "s": (a * p["w"]).sum()}  # noqa: E731
    got = cv.vmap(f, in_axes=({"w": None, "b": None}, 0), out_axes={"y": 1, "s": 0})(params, x)
    assert got["y"].shape == (3, 2) and got["s"].shape == (2,)
    np.testing.assert_allclose(got["y"].numpy(), (x.numpy() * w.numpy() + 0.5).T, rtol=1e-6)
    np.testing.assert_allclose(got["s"].numpy(), x.numpy() @ w.numpy(), rtol=1e-6)
    # tuple outputs with a tuple of out_axes, and an unbatched output kept with out_axes None
    a, b, c = cv.vmap(lambda a: (a * 2, a.sum(), w + 1), out_axes=(1, 0, None))(x)
    assert a.shape == (3, 2) and b.shape == (2,) and c.tolist() == (w.numpy() + 1).tolist()
    # keyword arguments are mapped over axis 0
    np.testing.assert_allclose(cv.vmap(lambda a, scale: a * scale)(x, scale=T([1.0, 2.0]).reshape(2, 1)).numpy(),
                               x.numpy() * [[1.0], [2.0]], rtol=1e-6)


def test_unbatched_outputs_are_broadcast_and_axis_size():
    c = T([1.0, 2.0])
    out = cv.vmap(lambda a: c * 3)(T(np.zeros((4, 5))))
    assert out.shape == (4, 2) and out.tolist() == [[3.0, 6.0]] * 4
    out = cv.vmap(lambda: c, in_axes=(), axis_size=3, out_axes=1)()
    assert out.shape == (2, 3) and out.tolist() == [[1.0] * 3, [2.0] * 3]
    out = cv.vmap(lambda a, k: a + k, in_axes=(0, None))(T([1.0, 2.0]), 5)  # a Python scalar, unmapped
    assert out.tolist() == [6.0, 7.0]


@pytest.mark.parametrize("side", ["left", "right", "both"])
def test_matmul_batched_on_either_side(side):
    a, b = RNG.standard_normal((3, 4, 5)), RNG.standard_normal((3, 5, 2))
    if side == "left":
        check(lambda p, q: p @ q, (T(a), T(b[0])), in_axes=(0, None))
    elif side == "right":
        check(lambda p, q: p @ q, (T(a[0]), T(b)), in_axes=(None, 0))
    else:
        check(lambda p, q: (p @ q).relu() @ q.T, (T(a), T(b)), in_axes=(0, 0))
    check(lambda v, q: v @ q, (T(a[:, 0]), T(b[0])), in_axes=(0, None))  # vector-matrix


def test_reductions_and_composites():
    x = T(RNG.standard_normal((3, 4, 5)))
    for f in (lambda a: a.sum(axis=0, keepdims=True), lambda a: a.max(axis=-1), lambda a: a.prod(),
              lambda a: a.min(axis=(0, 1), keepdims=True), lambda a: a.mean(axis=1), lambda a: a.var(axis=0),
              lambda a: a.argmax(axis=1), lambda a: a.softmax(axis=0), lambda a: a.logsumexp(axis=-1),
              lambda a: a.log_softmax() - a.std()):
        check(f, (x,), in_axes=1)
    check(lambda a: (a > 0).any(axis=1), (x,), in_axes=2)


def test_movement_cat_stack_where():
    x = T(RNG.standard_normal((2, 3, 4)))
    for f in (lambda a: a.reshape(4, 3), lambda a: a.reshape(-1), lambda a: a.T, lambda a: a.permute(1, 0),
              lambda a: a.pad(((1, 0), (2, 1)), value=3.0), lambda a: a[1:, ::2], lambda a: a[::-1, 2],
              lambda a: a.flip(1), lambda a: a[None, :, None].expand(2, 3, 5, 4),
              lambda a: cv.cat([a, a * 2], axis=1), lambda a: cv.stack([a, a.exp()], axis=-1),
              lambda a: cv.where(a > 0, a, a * 0.1), lambda a: a.split(2, axis=1)[1],
              lambda a: a.contiguous() + 1, lambda a: a.flatten() @ a.flatten()):
        check(f, (x,), in_axes=0)
    check(lambda a, c: cv.where(c, a, -a), (x, T(RNG.standard_normal(4)) > 0), in_axes=(1, None))


def test_dtypes_casts_and_bitcast():
    x = cv.Tensor(RNG.integers(-5, 5, size=(3, 4)).astype(np.int32))
    check(lambda a: (a * 3 // 2).astype(cv.float32) + (a % 3).astype(cv.float32), (x,))
    check(lambda a: a.bitcast(cv.float32), (x,), in_axes=1)
    check(lambda a: (a > 0) & (a < 3), (x,))


def test_nested_vmap_and_closures():
    x, y = T(RNG.standard_normal((2, 3, 4))), T(RNG.standard_normal((3, 4)))
    inner = cv.vmap(lambda r, s: (r * s).sum(), in_axes=(0, 0))
    got = cv.vmap(inner, in_axes=(0, None))(x, y)
    np.testing.assert_allclose(got.numpy(), (x.numpy() * y.numpy()).sum(-1), rtol=1e-5)
    # the inner function closes over the outer example; all pairs (outer product)
    a, b = T([1.0, 2.0, 3.0]), T([10.0, 20.0])
    pairs = cv.vmap(lambda u: cv.vmap(lambda v: u * v + u)(b))(a)
    assert pairs.tolist() == [[11.0, 21.0], [22.0, 42.0], [33.0, 63.0]]
    got = cv.vmap(cv.vmap(lambda r: r.softmax(), in_axes=1, out_axes=1), in_axes=2, out_axes=0)(x)
    np.testing.assert_allclose(got.numpy(), np.moveaxis(_softmax(x.numpy(), axis=0), 2, 0), rtol=1e-5)


def _softmax(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_elementwise_chain_is_one_kernel():
    y = cv.vmap(lambda a, b: ((a * 2 + b).exp() * a).tanh(), in_axes=(1, None))(cv.ones((8, 16)), cv.ones(8))
    assert len(y.schedule()) == 1
    y = cv.vmap(lambda a: a.softmax())(cv.ones((8, 16)))
    assert len(y.schedule()) == 1


def test_rewrite_is_linear_in_graph_size():
    def f(a):
        for _ in range(300):  # a diamond per step: 2**300 paths through the graph
            a = (a * a).tanh() + a * 0.5
        return a

    x = cv.ones((4, 3))
    y = cv.vmap(f, in_axes=1)(x)
    plain = f(cv.ones(4))
    assert y.shape == (3, 4)
    assert len(toposort([y.node])) <= len(toposort([plain.node])) + 10


def test_randomness_modes():
    x = cv.zeros((4, 3))
    with pytest.raises(RuntimeError, match="randomness"):
        cv.vmap(lambda a: a + cv.rand(3))(x)
    cv.manual_seed(7)
    diff = cv.vmap(lambda a: a + cv.rand(3), randomness="different")(x).numpy()
    cv.manual_seed(7)
    want = loop(lambda a: a + cv.rand(3), (x,)).numpy()  # the loop draws the same counters in order
    np.testing.assert_array_equal(diff, want)
    assert len({tuple(r) for r in diff}) == 4
    cv.manual_seed(7)
    same = cv.vmap(lambda a: a + cv.randn(3), randomness="same")(x).numpy()
    cv.manual_seed(7)
    one = cv.randn(3).numpy()
    np.testing.assert_array_equal(same, np.broadcast_to(one, (4, 3)))
    cv.manual_seed(7)  # deterministic: same seed, same numbers
    assert np.array_equal(cv.vmap(lambda a: a + cv.rand(3), randomness="different")(x).numpy(), diff)
    # nested "different": every (outer, inner) pair gets its own numbers
    cv.manual_seed(3)
    nested = cv.vmap(cv.vmap(lambda a: cv.randint(0, 1 << 30, size=(2,)) + a.astype(cv.int64),
                             randomness="different"), randomness="different")(cv.zeros((3, 4), dtype=cv.int32))
    assert nested.shape == (3, 4, 2) and len(np.unique(nested.numpy())) == 24
    with pytest.raises(ValueError, match="randomness"):
        cv.vmap(lambda a: a, randomness="sometimes")


def test_values_are_not_available_while_tracing():
    x = T([[1.0, 2.0], [3.0, 4.0]])
    for f in (lambda a: a.sum().item(), lambda a: a.numpy(), lambda a: a if bool(a[0] > 0) else -a,
              lambda a: repr(a)):
        with pytest.raises(ValueError, match="placeholder"):
            cv.vmap(f)(x)


def test_errors():
    x, y = cv.ones((3, 2)), cv.ones((5, 2))
    with pytest.raises(ValueError, match=r"size 3 along axis 0.*size 5 along axis 0"):
        cv.vmap(lambda a, b: a + b)(x, y)
    with pytest.raises(ValueError, match=r"in_axes 2 is out of range.*\(3, 2\)"):
        cv.vmap(lambda a: a, in_axes=2)(x)
    with pytest.raises(ValueError, match="out_axes 3 is out of range"):
        cv.vmap(lambda a: a, out_axes=3)(x)
    with pytest.raises(ValueError, match="2 entries"):
        cv.vmap(lambda a: a, in_axes=(0, 0))(x)
    with pytest.raises(ValueError, match="does not match the structure"):
        cv.vmap(lambda p: p["a"], in_axes=({"b": 0},))({"a": x})
    with pytest.raises(ValueError, match="axis_size"):
        cv.vmap(lambda a: a, in_axes=None)(x)
    with pytest.raises(ValueError, match="out_axes is None"):
        cv.vmap(lambda a: a, out_axes=None)(x)
    with pytest.raises(ValueError, match="Python scalar"):
        cv.vmap(lambda a: a)(3.0)
    with pytest.raises(TypeError, match="ints or None"):
        cv.vmap(lambda a: a, in_axes="0")


def test_vmap_and_jvp_compose():
    x, t = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    f = lambda a: (a.sin() * a).sum()  # noqa: E731
    # per-example directional derivatives, both ways round
    per = cv.vmap(lambda a, v: cv.jvp(f, (a,), (v,))[1])(T(x, np.float64), T(t, np.float64))
    want = ((np.cos(x) * x + np.sin(x)) * t).sum(axis=1)
    np.testing.assert_allclose(per.numpy(), want, rtol=1e-10)
    _, tv = cv.jvp(cv.vmap(f), (T(x, np.float64),), (T(t, np.float64),))
    np.testing.assert_allclose(tv.numpy(), want, rtol=1e-10)
    # jacfwd batches its basis with vmap
    jac = cv.vmap(cv.jacfwd(lambda a: a * a.sum()))(T(x, np.float64))
    assert jac.shape == (3, 4, 4)
    np.testing.assert_allclose(jac.numpy()[1], np.diag(np.full(4, x[1].sum())) + x[1][:, None], rtol=1e-10)


def test_per_example_gradients():
    params = {"w": T(RNG.standard_normal((4, 2))), "b": T(RNG.standard_normal(2))}
    xs, ys = T(RNG.standard_normal((5, 4))), T(RNG.standard_normal((5, 2)))

    def loss(p, batch):
        x, y = batch
        return ((x @ p["w"] + p["b"]).tanh() - y).square().sum()

    got = cv.vmap(cv.grad(loss), in_axes=(None, 0))(params, (xs, ys))
    for k in ("w", "b"):
        want = cv.stack([cv.grad(loss)(params, (xs[i], ys[i]))[k] for i in range(5)])
        np.testing.assert_allclose(got[k].numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    g = cv.grad(lambda p: cv.vmap(loss, in_axes=(None, 0))(p, (xs, ys)).sum())(params)
    full = cv.grad(lambda p: sum(loss(p, (xs[i], ys[i])) for i in range(5)))(params)
    for k in ("w", "b"):
        np.testing.assert_allclose(g[k].numpy(), full[k].numpy(), rtol=1e-5, atol=1e-6)


# --- fuzz: random chains of elementwise, movement and reduce ops -------------------------------------

@st.composite
def programs(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    size = draw(st.integers(1, 3))
    steps, cur = [], shape
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["unary", "binary", "reshape", "permute", "pad", "slice", "flip", "reduce",
                                     "expand"]))
        nd = len(cur)
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(["neg", "exp", "tanh", "abs", "square"]))))
        elif kind == "binary":
            k = draw(st.integers(0, nd))  # the other operand broadcasts: drop leading dims, some 1s
            oshape = tuple(1 if draw(st.booleans()) else s for s in cur[k:])
            steps.append(("binary", draw(st.sampled_from(["add", "mul", "maximum"])), oshape, draw(st.booleans())))
        elif kind == "reshape" and nd:
            steps.append(("reshape", (int(np.prod(cur)),) if draw(st.booleans()) else cur[::-1]))
        elif kind == "permute" and nd:
            steps.append(("permute", tuple(draw(st.permutations(range(nd))))))
        elif kind == "pad" and nd:
            steps.append(("pad", tuple((draw(st.integers(0, 1)), draw(st.integers(0, 2))) for _ in range(nd))))
        elif kind == "slice" and nd:
            a = draw(st.integers(0, nd - 1))
            slices = [slice(None, None, 2), slice(1, None), slice(None, None, -1)]
            steps.append(("slice", a, draw(st.sampled_from(slices))))
        elif kind == "flip" and nd:
            steps.append(("flip", draw(st.integers(0, nd - 1))))
        elif kind == "reduce" and nd:
            steps.append(("reduce", draw(st.sampled_from(["sum", "max"])), draw(st.integers(-nd, nd - 1)),
                          draw(st.booleans())))
        elif kind == "expand":
            steps.append(("expand", draw(st.integers(1, 3))))
        else:
            continue
        cur = _apply_shape(steps[-1], cur)
    x_axis = draw(st.integers(-ndim - 1, ndim))
    out_axis = draw(st.integers(-len(cur) - 1, len(cur)))
    return shape, size, x_axis, steps, out_axis, draw(st.integers(0, 2**31 - 1))


def _apply_shape(step, shape):
    return _run([step], np.zeros(shape), {}).shape


def _run(steps, x, others):
    """Apply ``steps`` to ``x`` (a corvid Tensor or a numpy array, whose API matches here)."""
    for i, s in enumerate(steps):
        if s[0] == "unary":
            x = x * x if s[1] == "square" else -x if s[1] == "neg" else abs(x) if s[1] == "abs" else \
                getattr(x, s[1])() if not isinstance(x, np.ndarray) else getattr(np, s[1])(x)
        elif s[0] == "binary":
            o = others.get(i, np.zeros(s[2]))
            if s[1] == "maximum":
                x = x.maximum(o) if not isinstance(x, np.ndarray) else np.maximum(x, o)
            else:
                a, b = (x, o) if s[3] else (o, x)
                x = a + b if s[1] == "add" else a * b
        elif s[0] == "reshape":
            x = x.reshape(s[1])
        elif s[0] == "permute":
            x = x.transpose(s[1]) if isinstance(x, np.ndarray) else x.permute(s[1])
        elif s[0] == "pad":
            x = np.pad(x, s[1], constant_values=0.5) if isinstance(x, np.ndarray) else x.pad(s[1], value=0.5)
        elif s[0] == "slice":
            x = x[(slice(None),) * s[1] + (s[2],)]
        elif s[0] == "flip":
            x = np.flip(x, s[1]) if isinstance(x, np.ndarray) else x.flip(s[1])
        elif s[0] == "reduce":
            x = getattr(x, s[1])(axis=s[2], keepdims=s[3])
        elif s[0] == "expand":
            x = x.reshape((1,) + x.shape)
            x = np.broadcast_to(x, (s[1],) + x.shape[1:]) if isinstance(x, np.ndarray) else x.expand(
                (s[1],) + x.shape[1:])
    return x


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(programs())
def test_fuzz_vmap_equals_loop(prog):
    shape, size, x_axis, steps, out_axis, seed = prog
    rng = np.random.default_rng(seed)
    full_shape = list(shape)
    full_shape.insert(x_axis % (len(shape) + 1), size)
    x = T(rng.uniform(-2, 2, size=full_shape))
    binaries = [i for i, s in enumerate(steps) if s[0] == "binary"]
    # each binary operand is mapped (with a batch axis of its own) or shared, decided by the seed
    mapped = {i: int(rng.integers(0, len(steps[i][2]) + 1)) for i in binaries if rng.random() < 0.5}
    others = {}
    for i in binaries:
        oshape = list(steps[i][2])
        if i in mapped:
            oshape.insert(mapped[i], size)
        others[i] = T(rng.uniform(-2, 2, size=oshape))
    keys = sorted(others)

    def f(a, *os):
        return _run(steps, a, dict(zip(keys, os)))

    in_axes = (x_axis,) + tuple(mapped.get(i) for i in keys)
    check(f, (x,) + tuple(others[i] for i in keys), in_axes=in_axes, out_axes=out_axis)



def test_values_under_a_detach_are_batched():
    """A DETACH stops gradients, not batching: ``x.max().detach()`` inside vmap is each row's own
    max (vmap walked only the nodes with a VAR below outside a DETACH, so the detached max was
    left over the unbatched placeholder, and realizing it raised)."""
    x = cv.Tensor(np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32))
    f = lambda r: (r - r.max().detach()).exp().sum()  # noqa: E731
    np.testing.assert_allclose(cv.vmap(f)(x).numpy(), [f(x[i]).numpy() for i in range(3)], rtol=1e-6)
    np.testing.assert_allclose(cv.vmap(lambda r: r.softmax(-1))(x).numpy(), x.softmax(-1).numpy(), rtol=1e-6)
    grads = cv.vmap(cv.grad(lambda r: r.logsumexp()))(x).numpy()
    np.testing.assert_allclose(grads, x.softmax(-1).numpy(), rtol=1e-6)

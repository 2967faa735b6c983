"""Deep graphs: every walk over a graph (building, scheduling, lowering, differentiating, batching,
tracing, freeing) keeps its own stack, so a chain far deeper than Python's recursion limit (1000
frames) works and gives numpy's value. The chains here are sized to stay within a few seconds."""

import numpy as np
import pytest

import corvid as cv
from corvid.codegen.lower import lower_unmerged
from corvid.engine.schedule import MAX_DEPTH
from corvid.tree import tree_flatten, tree_structure, tree_unflatten

C = 1.0001


def chain(x, n):
    """``n`` rounds of ``x * C + 0``: two elementwise ops per round."""
    for _ in range(n):
        x = x * C + 0
    return x


def chain_np(x, n):
    c, zero = np.float32(C), np.float32(0)
    for _ in range(n):
        x = x * c + zero
    return x


def test_a_chain_of_100k_ops_builds_schedules_and_realizes():
    # (the chain is freed when the test returns: a recursive free of 100k nodes would crash here)
    x = chain(cv.ones(4), 50_000)
    sched = x.schedule()
    # the scheduler cuts the chain every MAX_DEPTH ops, and the pieces share their compiled kernels
    assert len(sched) >= 100_000 // MAX_DEPTH
    assert len({id(k.compiled) for k in sched}) <= 4
    np.testing.assert_allclose(x.numpy(), chain_np(np.ones(4, np.float32), 50_000), rtol=1e-6)


def test_lowering_has_no_depth_limit():
    x = chain(cv.ones(4), 2_500)  # 5000 ops in one region: deeper than any recursion would go
    kernel, _ = lower_unmerged("deep", x.node, [])
    assert sum(1 for u in kernel.values() if u.op == "alu") == 5_000


def test_grad_of_a_20000_op_chain():
    g = cv.grad(lambda x: chain(x, 10_000).sum())(cv.ones(4))
    # d/dx of x * C**n is C**n: the same products of C, rounded the same way, as the forward value
    np.testing.assert_allclose(g.numpy(), chain_np(np.ones(4, np.float32), 10_000), rtol=1e-5)


def test_backward_through_a_20000_op_chain():
    x = cv.ones(4, requires_grad=True)
    chain(x, 10_000).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), chain_np(np.ones(4, np.float32), 10_000), rtol=1e-5)


def test_jvp_of_a_long_chain():
    y, t = cv.jvp(lambda x: chain(x, 5_000), (cv.ones(4),), (cv.full((4,), 2.0),))
    expected = chain_np(np.ones(4, np.float32), 5_000)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(t.numpy(), 2 * expected, rtol=1e-5)


def test_vmap_of_a_long_chain():
    xs = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = cv.vmap(lambda x: chain(x, 5_000))(cv.Tensor(xs))
    np.testing.assert_allclose(out.numpy(), chain_np(xs, 5_000), rtol=1e-6)


def test_jit_of_a_long_chain():
    f = cv.jit(lambda x: chain(x, 5_000))
    xs = np.arange(4, dtype=np.float32)
    for _ in range(2):  # the trace, then the captured program
        np.testing.assert_allclose(f(cv.Tensor(xs)).numpy(), chain_np(xs, 5_000), rtol=1e-6)


def test_a_deep_chain_of_movement_ops():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = cv.Tensor(a)
    for _ in range(2_000):  # 10 views a round: reshapes, permutes, an expand, a shrink and flips
        x = x.reshape(4, 3).reshape(3, 4).permute(1, 0).permute(1, 0)[None].expand(2, 3, 4)[1].flip(0).flip(0)
    np.testing.assert_array_equal((x * 2).numpy(), a * 2)


def nested(leaf, depth):
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def test_a_list_nested_deeper_than_64_dims_is_a_clear_error():
    assert cv.Tensor(nested(1.5, 64)).shape == (1,) * 64
    with pytest.raises(ValueError, match="maximum number of dimension of 64"):
        cv.Tensor(nested(1.5, 2_000))


def test_pytrees_of_any_depth():
    tree = nested({"a": 1, "b": (2, None)}, 5_000)
    leaves, td = tree_flatten(tree)
    assert leaves == [1, 2]
    assert td == tree_structure(tree) and hash(td) == hash(tree_structure(tree))
    assert td != tree_structure(nested({"a": 1, "b": (2, None)}, 4_999))
    assert repr(td) == "list(" * 5_000 + "dict(*, tuple(*, NoneType()))" + ")" * 5_000
    rebuilt = tree_unflatten(td, [10, 20])
    for _ in range(5_000):  # (Python's own == on nested lists recurses)
        assert type(rebuilt) is list and len(rebuilt) == 1
        rebuilt = rebuilt[0]
    assert rebuilt == {"a": 10, "b": (20, None)}


def test_vmap_with_in_axes_as_deep_as_the_argument():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    f = lambda t: tree_flatten(t)[0][0] * 2  # noqa: E731
    out = cv.vmap(f, in_axes=(nested(1, 2_000),))(nested(cv.Tensor(x), 2_000))
    np.testing.assert_array_equal(out.numpy(), (x * 2).T)

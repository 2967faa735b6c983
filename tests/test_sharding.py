"""Sharded tensors: every op family against numpy, the layouts results get (split or replicated,
with all-reduce and all-gather where needed), uneven splits, gradients, and a data-parallel
training step that matches the same step on one device."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corvid as cv
from corvid import nn, optim
from corvid.sharding import Layout, MultiBuffer, layout

D2 = ["CPU", "CPU:1"]
D3 = ["CPU", "CPU:1", "CPU:2"]
RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def close(t, want, rtol=1e-5, atol=1e-6):
    got = t.numpy()
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def parts(t):
    t.realize()
    b = t.node.buffer
    assert isinstance(b, MultiBuffer)
    return [p.numpy().reshape(b.part_shape(i)) for i, p in enumerate(b.parts)], b


# --- shard and gather -------------------------------------------------------------------------------

@pytest.mark.parametrize("devices, n, sizes", [(D2, 4, [2, 2]), (D2, 5, [3, 2]), (D3, 7, [3, 2, 2]), (D3, 3, [1, 1, 1])])
def test_shard_splits_like_array_split(devices, n, sizes):
    a = rand(n, 3)
    x = cv.Tensor(a).shard(devices, axis=0)
    assert x.device == tuple(devices) and x.shape == (n, 3)
    got, b = parts(x)
    assert b.device == tuple(devices) and [p.shape[0] for p in got] == sizes
    for g, w in zip(got, np.array_split(a, len(devices))):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(x.numpy(), a)
    gathered = x.to("CPU:1")
    assert gathered.device == "CPU:1" and gathered.node.op.name == "COPY"
    np.testing.assert_array_equal(gathered.numpy(), a)
    assert gathered.node.buffer.device == "CPU:1"


def test_replicate_puts_the_whole_value_on_every_device():
    a = rand(2, 3)
    x = cv.Tensor(a).to(D3)
    got, b = parts(x)
    assert b.axis is None and layout(x) == Layout(tuple(D3), None)
    for g in got:
        np.testing.assert_array_equal(g, a)
    assert cv.Tensor(a, device=D2).device == tuple(D2)
    assert cv.zeros(2, 3, device=D2).sum().item() == 0.0


def test_shard_along_a_later_axis_and_negative_axis():
    a = rand(2, 5, 3)
    x = cv.Tensor(a).shard(D2, axis=-2)
    got, b = parts(x)
    assert b.axis == 1 and [p.shape for p in got] == [(2, 3, 3), (2, 2, 3)]
    np.testing.assert_array_equal(x.numpy(), a)


@pytest.mark.parametrize("call, error, message", [
    (lambda x: x.shard(D2, axis=2), ValueError, "out of range"),
    (lambda x: x.shard(D3, axis=1), ValueError, "fewer than the 3 devices"),
    (lambda x: x.shard(["CPU"], axis=0), ValueError, "at least two devices"),
    (lambda x: x.shard(["CPU", "cpu:0"], axis=0), ValueError, "each device once"),
    (lambda x: x.shard("CPU", axis=0), TypeError, "list of device names"),
    (lambda x: x.shard(["CPU", "XPU"], axis=0), ValueError, "unknown device"),
])
def test_bad_shard_calls_raise(call, error, message):
    with pytest.raises(error, match=message):
        call(cv.zeros(4, 2))


def test_mixing_device_sets_or_single_devices_raises():
    x = cv.zeros(4, 2).shard(D2, axis=0)
    with pytest.raises(ValueError, match="different devices"):
        x + cv.zeros(4, 2)
    with pytest.raises(ValueError, match="different devices"):
        x + cv.zeros(4, 2).shard(D3, axis=0)


def test_jit_refuses_sharded_tensors_clearly():
    f = cv.jit(lambda x: x * 2)
    with pytest.raises(ValueError, match="jit does not capture sharded tensors"):
        f(cv.zeros(4).shard(D2, axis=0))


# --- elementwise -------------------------------------------------------------------------------------

@settings(max_examples=12, deadline=None)
@given(st.sampled_from([(4, 3), (5, 2), (3, 4, 2)]), st.integers(0, 2), st.sampled_from([D2, D3]))
def test_elementwise_between_sharded_replicated_and_scalars(shape, axis, devices):
    axis = axis % len(shape)
    if shape[axis] < len(devices):
        return
    a, b = rand(*shape), rand(*shape)
    x = cv.Tensor(a).shard(devices, axis=axis)
    y = cv.Tensor(b).shard(devices, axis=axis)
    r = cv.Tensor(b).to(devices)
    out = (x * y + r.exp()) / (x.abs() + 1) - 2.5
    close(out, (a * b + np.exp(b)) / (np.abs(a) + 1) - np.float32(2.5))
    assert layout(out) == Layout(tuple(devices), axis)  # the replicated operand was sliced locally
    close(cv.where(x > y, x, r.tanh()), np.where(a > b, a, np.tanh(b)))
    np.testing.assert_array_equal((x > 0).astype(cv.int32).numpy(), (a > 0).astype(np.int32))


def test_broadcasting_and_numpy_operands():
    a, bias = rand(5, 3), rand(3)
    x = cv.Tensor(a).shard(D2, axis=0)
    close(x + bias, a + bias)  # a numpy operand is replicated on the device set
    close(x * cv.Tensor(bias).to(D2), a * bias)
    col = rand(5, 1)
    close(x - cv.Tensor(col).shard(D2, axis=0), a - col)


def test_operands_split_along_different_axes_are_gathered_first():
    a, b = rand(4, 6), rand(4, 6)
    x = cv.Tensor(a).shard(D2, axis=0)
    y = cv.Tensor(b).shard(D2, axis=1)
    out = x + y
    close(out, a + b)
    assert layout(out).axis == 0


# --- reductions --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sum", "max", "min", "mean", "prod"])
@pytest.mark.parametrize("reduce_axis", [0, 1, None])
def test_reductions_along_and_across_the_split_axis(name, reduce_axis):
    a = RNG.uniform(0.5, 1.5, (5, 3)).astype(np.float32)
    x = cv.Tensor(a).shard(D3, axis=0)
    out = getattr(x, name)(axis=reduce_axis)
    close(out, getattr(a, name)(axis=reduce_axis))
    expected = Layout(tuple(D3), 0 if reduce_axis == 1 else None)  # over the split axis: all-reduced
    assert layout(out) == expected
    if expected.axis is None:
        replicas, _ = parts(out)
        assert all(np.array_equal(replicas[0], r) for r in replicas)  # bitwise equal on every device


def test_keepdims_integer_and_composite_reductions():
    a = RNG.integers(-5, 5, (6, 4))
    x = cv.Tensor(a).shard(D2, axis=0)
    np.testing.assert_array_equal(x.sum(axis=0, keepdims=True).numpy(), a.sum(axis=0, keepdims=True))
    np.testing.assert_array_equal(x.argmax(axis=0).numpy(), a.argmax(axis=0))
    f = rand(6, 4)
    y = cv.Tensor(f).shard(D2, axis=0)
    close(y.softmax(axis=1), np.exp(f) / np.exp(f).sum(1, keepdims=True))
    close(y.var(axis=0), f.var(axis=0), rtol=1e-4)
    close(y.logsumexp(axis=0), np.log(np.exp(f).sum(0)), rtol=1e-5)


# --- movement ----------------------------------------------------------------------------------------

def test_movement_keeps_the_split_where_it_can():
    a = rand(6, 4)
    x = cv.Tensor(a).shard(D2, axis=0)
    cases = [
        (x.reshape(6, 2, 2), a.reshape(6, 2, 2), 0),  # trailing axes split: kept
        (x.reshape(24), a.reshape(24), 0),  # merged with the axes after it: kept
        (x.reshape(2, 3, 4), a.reshape(2, 3, 4), 0),  # split into (2, 3): each part's 3 rows are one block
        (x.T, a.T, 1),
        (x[:, 1:3], a[:, 1:3], 0),
        (x[1:5], a[1:5], 0),  # every part keeps rows: still split
        (x.flip(1), a[:, ::-1], 0),
        (x.pad(((0, 0), (1, 2))), np.pad(a, ((0, 0), (1, 2))), 0),
        (x.reshape(6, 1, 4).expand(6, 3, 4), np.broadcast_to(a.reshape(6, 1, 4), (6, 3, 4)), 0),
    ]
    for got, want, axis in cases:
        close(got, np.ascontiguousarray(want))
        assert layout(got).axis == axis
    gathered = [(x[4:], a[4:]), (x.flip(0), a[::-1]), (x.pad(((1, 0), (0, 0))), np.pad(a, ((1, 0), (0, 0)))),
                (x.reshape(4, 6), a.reshape(4, 6))]
    for got, want in gathered:
        close(got, np.ascontiguousarray(want))


def test_cat_stack_and_indexing():
    a, b = rand(4, 3), rand(4, 3)
    x, y = cv.Tensor(a).shard(D2, axis=0), cv.Tensor(b).shard(D2, axis=0)
    close(cv.cat([x, y], axis=1), np.concatenate([a, b], 1))
    close(cv.cat([x, y], axis=0), np.concatenate([a, b], 0))
    close(cv.stack([x, y]), np.stack([a, b]))
    idx = np.array([3, 0, 2])
    close(x[cv.Tensor(idx).to(D2)], a[idx])
    close(x[1], a[1])


# --- matmul ------------------------------------------------------------------------------------------

def test_matmul_rows_split_times_replicated_stays_split():
    a, w = rand(7, 5), rand(5, 4)
    out = cv.Tensor(a).shard(D3, axis=0) @ cv.Tensor(w).to(D3)
    close(out, a @ w)
    assert layout(out) == Layout(tuple(D3), 0)


def test_matmul_contraction_split_is_an_all_reduce():
    a, w = rand(3, 8), rand(8, 2)
    out = cv.Tensor(a).shard(D2, axis=1) @ cv.Tensor(w).shard(D2, axis=0)
    close(out, a @ w)
    assert layout(out) == Layout(tuple(D2), None)


def test_batched_matmul_and_linear_layer():
    a, b = rand(4, 3, 5), rand(4, 5, 2)
    close(cv.Tensor(a).shard(D2, axis=0) @ cv.Tensor(b).shard(D2, axis=0), a @ b)
    lin = nn.Linear(5, 2)
    want = lin(cv.Tensor(a)).numpy()
    close(lin.to(D2)(cv.Tensor(a).shard(D2, axis=1)), want)


def test_moving_between_device_sets_and_layouts():
    a = rand(6, 4)
    x = cv.Tensor(a).shard(D2, axis=0)
    y = x.shard(D3, axis=1)
    assert layout(y) == Layout(tuple(D3), 1)
    close(y, a)
    z = x.shard(D2, axis=1)
    assert layout(z) == Layout(tuple(D2), 1)
    close(z * 2, a * 2)


# --- gradients ---------------------------------------------------------------------------------------

def test_gradients_flow_through_sharded_ops():
    a, w = rand(5, 3), rand(3)
    src = cv.Tensor(a, requires_grad=True)
    weight = cv.Tensor(w).to(D2).requires_grad_()
    loss = ((src.shard(D2, axis=0) * weight).sum(axis=1) ** 2).mean()
    loss.backward()
    y = (a * w).sum(1)
    assert src.grad.device == "CPU" and weight.grad.device == tuple(D2)
    close(src.grad, (2 * y[:, None] * w / 5).astype(np.float32))
    close(weight.grad, (2 * y[:, None] * a / 5).sum(0).astype(np.float32))
    g = cv.grad(lambda v: (v * cv.Tensor(a).shard(D2, axis=0)).sum())(cv.Tensor(w).to(D2))
    close(g, a.sum(0))


def test_data_parallel_training_matches_one_device():
    """Parameters replicated on two devices, the batch split on axis 0: three Adam steps give the
    same parameters as on one device up to float32 rounding (the sums are split differently), and
    the replicas stay bitwise equal."""
    x, labels = rand(9, 6), RNG.integers(0, 3, 9)

    def train(model, inputs, targets):
        opt = optim.Adam(model.parameters(), lr=0.05)
        for _ in range(3):
            loss = nn.functional.cross_entropy(model(inputs), targets)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return loss

    def mlp():
        cv.manual_seed(1)
        return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))

    single = mlp()
    loss1 = train(single, cv.Tensor(x), cv.Tensor(labels))
    parallel = mlp().to(D2)
    loss2 = train(parallel, cv.Tensor(x).shard(D2, axis=0), cv.Tensor(labels).shard(D2, axis=0))
    assert loss2.device == tuple(D2)
    np.testing.assert_allclose(loss2.item(), loss1.item(), rtol=1e-5)
    for p1, p2 in zip(single.parameters(), parallel.parameters()):
        assert p2.device == tuple(D2) and p2.node.buffer.axis is None
        np.testing.assert_allclose(p2.numpy(), p1.numpy(), rtol=1e-5, atol=1e-6)
        replicas, _ = parts(p2)
        assert np.array_equal(replicas[0], replicas[1])

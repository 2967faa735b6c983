"""Devices: names, the default device, copies between devices (lazy, differentiable, under jit),
mixed-device errors, and logical CPU devices whose buffers really are distinct."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corvid as cv
from corvid import nn
from corvid.engine import schedule as sched
from corvid.graph.node import Op
from corvid.runtime.device import canonical_device, get_device

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- names ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spelling, canonical", [
    ("CPU", "CPU"), ("cpu", "CPU"), ("CPU:0", "CPU"), ("cpu:0", "CPU"), (" cpu:1 ", "CPU:1"), ("CPU:12", "CPU:12"),
    ("NULL:2", "NULL:2"), ("cl", "CL"), ("CL:0", "CL"), (["cpu", "CPU:1"], ("CPU", "CPU:1")),
])
def test_device_names_are_canonical(spelling, canonical):
    assert canonical_device(spelling) == canonical


@pytest.mark.parametrize("bad, message", [
    ("XPU", "unknown device 'XPU'; available: CL, CPU, CPU:N"), ("CPU:x", "bad device index"),
    ("CPU:-1", "bad device index"), ("CL:1", "CL has one device"), (["CPU", "cpu:0"], "each device once"),
    (["CPU"], "at least two devices"),
])
def test_bad_device_names_raise_value_error(bad, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        canonical_device(bad)
    with pytest.raises(ValueError):
        cv.zeros(2, device=bad) if isinstance(bad, str) else cv.zeros(2).to("XPU")


def test_non_string_device_is_a_type_error():
    with pytest.raises(TypeError, match="device must be a string"):
        cv.zeros(2, device=3)


def test_reported_device_is_the_canonical_name():
    assert cv.zeros(2, device="cpu:0").device == "CPU"
    assert cv.Tensor([1.0], device="cpu:1").device == "CPU:1"
    assert repr(cv.Tensor([1.0], device="CPU:1")) == "Tensor([1.], device='CPU:1')"
    assert repr(cv.Tensor([1.0], device="CPU:0")) == "Tensor([1.])"


# --- the default device ----------------------------------------------------------------------------

@pytest.fixture
def restore_default():
    saved = cv.get_default_device()
    yield
    cv.set_default_device(saved)


def test_every_creation_function_uses_the_default_device(restore_default):
    cv.set_default_device("cpu:1")
    assert cv.get_default_device() == "CPU:1"
    made = [cv.zeros(2), cv.ones(2), cv.full((2,), 3.0), cv.empty(2), cv.arange(3), cv.linspace(0, 1, 3), cv.eye(2),
            cv.rand(2), cv.randn(2), cv.randint(0, 5, (2,)), cv.Tensor([1.0, 2.0]), cv.Tensor(2.0),
            cv.asarray([1, 2]), cv.from_dlpack(np.ones(2)), cv.random.key(0), nn.Linear(2, 3).weight]
    assert [t.device for t in made] == ["CPU:1"] * len(made)
    assert cv.__array_namespace_info__().default_device() == "CPU:1"
    np.testing.assert_array_equal((cv.arange(3) * 2).numpy(), [0, 2, 4])


def test_set_default_device_rejects_bad_names(restore_default):
    with pytest.raises(ValueError, match="available: CL, CPU, CPU:N"):
        cv.set_default_device("GPU")
    with pytest.raises(ValueError, match="one device"):
        cv.set_default_device(["CPU", "CPU:1"])
    assert cv.get_default_device() == "CPU"


def test_default_device_block_nests_restores_and_is_per_thread():
    seen = []
    with cv.default_device("CPU:1"):
        assert cv.zeros(1).device == "CPU:1"
        with cv.default_device("CPU:2"):
            assert cv.arange(2).device == "CPU:2"
            thread = threading.Thread(target=lambda: seen.append(cv.zeros(1).device))
            thread.start()
            thread.join()
        assert cv.Tensor([1]).device == "CPU:1"
    assert cv.zeros(1).device == "CPU"
    assert seen == ["CPU"]  # another thread sees the global default
    with pytest.raises(ValueError, match="unknown device"):
        with cv.default_device("TPU"):
            pass


def test_an_exception_in_the_block_restores_the_default():
    with pytest.raises(RuntimeError):
        with cv.default_device("CPU:3"):
            raise RuntimeError
    assert cv.get_default_device() == "CPU"


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT, **env})


def test_corvid_device_environment_variable():
    ok = _python("import corvid as cv; print(cv.zeros(1).device, cv.get_default_device())", CORVID_DEVICE="cpu:1")
    assert ok.stdout.split() == ["CPU:1", "CPU:1"], ok.stderr
    bad = _python("import corvid", CORVID_DEVICE="XPU")
    assert bad.returncode != 0 and "CORVID_DEVICE='XPU': unknown device" in bad.stderr


# --- copies ----------------------------------------------------------------------------------------

def test_to_is_a_lazy_copy_step():
    x = cv.Tensor([1.0, 2.0, 3.0])
    assert x.to("cpu") is x and x.to("CPU:0") is x
    y = x.to("CPU:1") * 2
    assert y.device == "CPU:1" and y.node.src[0].op is Op.COPY
    steps = y.schedule()
    assert [s.device for s in steps] == ["CPU:1", "CPU:1"] and steps[0].name.startswith("copy_CPU_to_CPU1")
    np.testing.assert_array_equal(y.numpy(), [2.0, 4.0, 6.0])
    assert y.node.buffer.device == "CPU:1"


def test_copy_steps_are_ordered_after_their_source_kernels():
    a = cv.Tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    b = (a.exp().sum(axis=1).to("CPU:1") + 1).to("CPU:2") * 3
    devices = [s.device for s in b.schedule()]
    assert devices == ["CPU", "CPU:1", "CPU:1", "CPU:2", "CPU:2"]
    np.testing.assert_allclose(b.numpy(), (np.exp(np.arange(6.0).reshape(2, 3)).sum(1) + 1) * 3, rtol=1e-6)


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(["float32", "float64", "int32", "int64", "uint8", "bool", "complex64", "bfloat16"]),
       st.lists(st.integers(0, 4), max_size=3))
def test_copies_keep_every_dtype_and_shape(dtype, shape):
    a = (np.arange(int(np.prod(shape))) % 3).reshape(shape)
    x = cv.Tensor(a).astype(dtype)
    y = x.to("CPU:1")
    assert (y.dtype, y.shape, y.device) == (x.dtype, x.shape, "CPU:1")
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    np.testing.assert_array_equal(y.to("CPU").numpy(), x.numpy())


def test_literals_and_constants_copy():
    assert cv.Tensor(3.5).to("CPU:1").item() == 3.5
    np.testing.assert_array_equal(cv.full((2, 2), 7).to("CPU:1").numpy(), np.full((2, 2), 7))
    assert cv.zeros(0, 3).to("CPU:1").numpy().shape == (0, 3)


def test_gradient_of_a_copy_goes_back_to_the_source_device():
    w = cv.Tensor([1.0, -2.0, 3.0], requires_grad=True)
    loss = (w.to("CPU:1") ** 2).sum()
    assert loss.device == "CPU:1"
    loss.backward()
    assert w.grad.device == "CPU" and w.grad.node.buffer.device == "CPU"
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, -4.0, 6.0])
    g = cv.grad(lambda v: (v.to("CPU:1").exp() * v.to("CPU:2").to("CPU:1")).sum())(cv.Tensor([0.0, 1.0]))
    assert g.device == "CPU"
    np.testing.assert_allclose(g.numpy(), [1.0, 2 * np.e], rtol=1e-6)  # d/dv sum(exp(v) * v) = exp(v) * (1 + v)


def test_copies_under_jit_jvp_and_vmap():
    f = cv.jit(lambda x, y: ((x.to("CPU:1") * y).sum(), x.to("CPU:1").to("CPU:2")))
    y = cv.Tensor([1.0, 1.0, 1.0], device="CPU:1")
    for k in range(3):
        s, z = f(cv.Tensor([1.0, 2.0, 3.0]) * k, y)
        assert (s.device, z.device) == ("CPU:1", "CPU:2")
        assert s.item() == 6.0 * k
        np.testing.assert_array_equal(z.numpy(), np.array([1.0, 2.0, 3.0]) * k)
    assert f.traces == 1
    out, tangent = cv.jvp(lambda x: x.to("CPU:1") * 3, (cv.ones(2),), (cv.full((2,), 2.0),))
    assert tangent.device == "CPU:1" and tangent.tolist() == [6.0, 6.0]
    batched = cv.vmap(lambda x: x.to("CPU:1").sum())(cv.ones(4, 3))
    assert batched.device == "CPU:1" and batched.tolist() == [3.0] * 4


def test_jit_of_a_training_step_on_another_device():
    model = nn.Linear(3, 1).to("CPU:1")
    opt = cv.optim.SGD(model.parameters(), lr=0.1)

    @cv.jit
    def step(x, y):
        loss = ((model(x.to("CPU:1")) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    x, y = cv.Tensor(np.ones((4, 3), np.float32)), cv.zeros(4, 1, device="CPU:1")
    losses = [step(x, y).item() for _ in range(4)]
    assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0]
    assert model.weight.device == "CPU:1" and model.weight.grad.device == "CPU:1"


# --- mixed devices -----------------------------------------------------------------------------------

@pytest.mark.parametrize("op", [lambda a, b: a + b, lambda a, b: a @ b, lambda a, b: cv.where(a > 0, a, b),
                                lambda a, b: cv.cat([a, b]), lambda a, b: cv.maximum(a, b)])
def test_ops_across_devices_raise_a_clear_error(op):
    a, b = cv.ones(2, 2), cv.ones(2, 2, device="CPU:1")
    with pytest.raises(ValueError, match=r"different devices: (CPU and CPU:1|CPU:1 and CPU); move one explicitly with "
                                         r"\.to\('CPU(:1)?'\) or \.to\('CPU(:1)?'\)"):
        op(a, b)


def test_take_with_indices_on_another_device_raises():
    with pytest.raises(ValueError, match="different devices"):
        cv.take(cv.arange(4.0), cv.Tensor([1, 2], device="CPU:1"))


# --- logical CPU devices ----------------------------------------------------------------------------

def test_logical_cpu_devices_have_distinct_allocators_and_buffers():
    cpu0, cpu1 = get_device("CPU"), get_device("CPU:1")
    assert cpu0 is get_device("cpu:0") and cpu0.allocator is not cpu1.allocator
    assert cpu1.name == "CPU:1" and cpu1.family == "CPU" and cpu1.renderer is cpu0.renderer
    a = cv.Tensor(np.arange(4.0)).realize()
    b = a.to("CPU:1").realize()
    assert (a.node.buffer.device, b.node.buffer.device) == ("CPU", "CPU:1")
    assert not np.shares_memory(a.node.buffer.handle, b.node.buffer.handle)
    assert any(h is b.node.buffer.handle for h, _ in cpu1.allocator._addresses.values())
    assert not any(h is b.node.buffer.handle for h, _ in cpu0.allocator._addresses.values())


def test_the_same_constant_graph_realized_on_two_devices_gets_a_buffer_on_each():
    a, b = cv.arange(5) * 3, cv.arange(5, device="CPU:1") * 3  # the same (hash-consed) graph
    a.realize()
    b.realize()
    assert (a.node.buffer.device, b.node.buffer.device) == ("CPU", "CPU:1")
    np.testing.assert_array_equal(b.numpy(), np.arange(5) * 3)


def test_logical_devices_share_compiled_kernels():
    x = cv.Tensor(np.arange(7.0, dtype=np.float32))
    (x.sin() * 5 + 11).realize()
    before = set(sched._cache)
    y = (x.to("CPU:3").sin() * 5 + 11)
    np.testing.assert_allclose(y.numpy(), np.sin(np.arange(7.0)) * 5 + 11, rtol=1e-6)
    # only the copy step is new: the kernel is shared (new keys counted, not the cache's size, which
    # stays at its bound once a long test run has filled it)
    assert len(set(sched._cache) - before) == 1


def test_dlpack_accepts_logical_cpu_devices():
    t = cv.Tensor(np.arange(3.0), device="CPU:1")
    assert t.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(np.from_dlpack(t), [0.0, 1.0, 2.0])
    a = np.arange(4.0)
    u = cv.from_dlpack(a, device="cpu:2")
    assert u.device == "CPU:2" and np.shares_memory(np.from_dlpack(u), a)
    with pytest.raises(ValueError, match="only CPU devices"):
        cv.from_dlpack(a, device="NULL")
    with pytest.raises(BufferError, match="only implemented for CPU tensors"):
        cv.zeros(2, device="NULL").__dlpack_device__()


def test_module_to_another_device_keeps_parameter_identity():
    model = nn.Linear(2, 2)
    w = model.weight
    model.to("CPU:1")
    assert model.weight is w and w.device == "CPU:1" and w.requires_grad
    assert model(cv.ones(1, 2, device="CPU:1")).device == "CPU:1"


# --- CL ----------------------------------------------------------------------------------------------

@pytest.fixture
def cl():
    try:
        get_device("CL")
    except (ImportError, RuntimeError, OSError) as e:
        pytest.skip(f"CL not available: {e}")
    return "CL"


def test_copies_to_and_from_cl(cl):
    w = cv.Tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (w.to(cl) * 2).sum()
    assert y.device == "CL" and y.item() == 12.0
    y.backward()
    assert w.grad.device == "CPU" and w.grad.tolist() == [2.0, 2.0, 2.0]
    with cv.default_device(cl):
        z = cv.arange(3.0)
    assert z.device == "CL" and z.to("CPU:1").tolist() == [0.0, 1.0, 2.0]


def _other_families(skip: bool = True) -> list[str]:
    """The devices of another backend than the CPU that start here (skip the test if none and ``skip``)."""
    out = []
    for name in ("CL", "WEBGPU"):
        try:
            get_device(name)
            out.append(name)
        except (ImportError, RuntimeError, OSError):
            pass
    if not out and skip:
        pytest.skip("neither CL nor WEBGPU is available here")
    return out


def test_a_constant_graph_realized_on_one_device_feeds_kernels_on_another():
    """A graph of constants (``arange``) mentions no buffer, so one node serves every device; a
    kernel on another device that reads it once it is stored must get the value on its own
    device (it once got a WEBGPU buffer on the CPU, or the CPU's numpy memory on WEBGPU)."""
    for dev in ["CPU:1", *_other_families(skip=False)]:
        for first, then in ((dev, "CPU"), ("CPU", dev)):
            idx = cv.arange(7, device=first) * 3 % 5
            idx.realize()
            x = cv.Tensor(np.arange(7, dtype=np.float32) * 10, device=then)
            got = (x[cv.arange(7, device=then) * 3 % 5] + 1).numpy()
            np.testing.assert_array_equal(got, np.arange(7, dtype=np.float32)[np.arange(7) * 3 % 5] * 10 + 1)




def test_jit_gets_its_own_copy_of_a_constant_realized_on_another_device():
    """The same, captured by cv.jit: a constant stored on one device is a kernel input of a
    jitted function on another (a CPU kernel was handed a WEBGPU buffer)."""
    for other in _other_families():
        shared = cv.arange(12, device=other).reshape(3, 4).astype(cv.float32) * 0.25
        shared.realize()  # now the constant-only node holds a buffer of the other device

        @cv.jit
        def f(x):
            return x + cv.arange(12).reshape(3, 4).astype(cv.float32) * 0.25

        x = cv.ones((3, 4))
        want = 1 + np.arange(12, dtype=np.float32).reshape(3, 4) * 0.25
        for _ in range(3):  # trace, then replays
            np.testing.assert_array_equal(f(x).numpy(), want)

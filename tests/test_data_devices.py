"""Data follows the model (issue 25): DataLoader batches on the device asked for (or the default
device), prefetched and copied there by the background thread; devices listed by what starts here.

Every test runs on each executing device (the ``device`` fixture: CPU, CL on PoCL, WEBGPU on
lavapipe, CUDA; one that does not start here is skipped with the reason)."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import corvid as cv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def dataset() -> cv.data.TensorDataset:
    return cv.data.TensorDataset(np.arange(20.0, dtype=np.float32).reshape(10, 2), np.arange(10) % 3)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_batches_arrive_on_the_device_asked_for(device, prefetch):
    loader = cv.data.DataLoader(dataset(), batch_size=4, shuffle=True, seed=3, prefetch=prefetch, device=device)
    on_cpu = cv.data.DataLoader(dataset(), batch_size=4, shuffle=True, seed=3, prefetch=prefetch, device="CPU")
    got, want = list(loader), list(on_cpu)
    assert [len(x) for x, _ in got] == [4, 4, 2]
    for (x, y), (xc, yc) in zip(got, want):
        assert x.device == y.device == device
        np.testing.assert_array_equal(x.numpy(), xc.numpy())
        np.testing.assert_array_equal(y.numpy(), yc.numpy())
    assert not [t for t in threading.enumerate() if t.name == "corvid-DataLoader"]


def test_batches_follow_the_default_device_of_the_pass(device):
    loader = cv.data.DataLoader(dataset(), batch_size=5)
    with cv.default_device(device):
        batches = iter(loader)  # (the device is read when the pass starts, in this thread)
    assert [x.device for x, _ in batches] == [device, device]
    assert {x.device for x, _ in loader} == {"CPU"}  # (outside the block: the CPU again)


def test_a_step_on_the_device_consumes_the_batches(device):
    """Model, optimizer state and batches on one device: a jitted SGD step runs there."""
    cv.manual_seed(0)
    with cv.default_device(device):
        model = cv.nn.Linear(2, 3)
    assert {p.device for p in model.parameters()} == {device}
    tx = cv.optim.SGD.functional(lr=0.1)
    state = tx.init(model)

    @cv.jit
    def step(m, s, x, y):
        loss, g = cv.value_and_grad(lambda m: cv.nn.functional.cross_entropy(m(x), y))(m)
        m, s = tx.update(g, s, m)
        return m, s, loss

    losses = []
    for _ in range(3):
        for x, y in cv.data.DataLoader(dataset(), batch_size=10, device=device):
            model, state, loss = step(model, state, x / 20, y)
            losses.append(loss.item())
    assert loss.device == device and losses[-1] < losses[0]


def test_a_device_name_that_is_not_one_is_refused_at_the_call():
    with pytest.raises(ValueError, match="unknown device"):
        cv.data.DataLoader(dataset(), device="TPU")


def test_an_abandoned_pass_copying_to_a_device_ends_cleanly_at_exit():
    """A pass left unfinished when the program ends: its thread is stopped before the device's
    runtime unloads (a copy under way then aborted the process on PoCL)."""
    code = ("import numpy as np, corvid as cv\n"
            "dev = cv.devices()[-1]\n"
            "ds = cv.data.TensorDataset(np.zeros((64, 1000), np.float32))\n"
            "it = iter(cv.data.DataLoader(ds, batch_size=1, device=dev, prefetch=4))\n"
            "next(it)\nprint('done', dev)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "done" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "terminate" not in done.stderr


def test_devices_lists_what_starts_here_fastest_first():
    found = cv.devices()
    assert "CPU" in found and "NULL" not in found
    assert len(set(found)) == len(found)
    for name in found:
        cv.zeros(2, device=name).realize()  # (each one starts)
    gpu = [n for n in found if cv.runtime.device.get_device(n).kind == "gpu"]
    assert found[:len(gpu)] == gpu  # (GPUs before the CPU, and the CPU before CPU-emulated devices)
    assert found[len(gpu)] == "CPU"
    assert cv.__array_namespace_info__().devices() == tuple(found)  # (the Array API's is a tuple)


def test_creation_inside_a_jitted_function_follows_its_arguments(device):
    """``cv.arange`` in a model's forward, jitted and called outside any default_device block:
    the constants are made on the arguments' device (GPT's position ids)."""

    @cv.jit
    def f(x):
        return x + cv.arange(x.shape[-1]).astype(x.dtype) + cv.ones(x.shape[-1])

    x = cv.Tensor(np.zeros((2, 3), np.float32), device=device)
    y = f(x)
    assert y.device == device
    np.testing.assert_array_equal(y.numpy(), [[1, 2, 3], [1, 2, 3]])
    np.testing.assert_array_equal(f(cv.Tensor(np.ones((2, 3), np.float32))).numpy(), [[2, 3, 4], [2, 3, 4]])


def test_the_gpu_page_runs_as_written(tmp_path):
    """docs/gpu.md's python blocks, in order, in one namespace (on the fastest device here)."""
    import re

    text = open(os.path.join(ROOT, "docs", "gpu.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 6
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/gpu.md", "exec"), namespace)
    assert namespace["loss"].device == namespace["device"]
    assert {k.device for k in namespace["prof"].kernels} == {cv.runtime.device.canonical_device(namespace["device"])}


def test_random_samplers_draw_on_the_default_device(device):
    """A key made outside a default_device block draws there inside it (the same numbers as on the
    CPU); split keys stay on their key's device; device= names one."""
    k = cv.random.key(7)
    want = cv.random.normal(k, (5,)).numpy()
    with cv.default_device(device):
        samples = {"normal": cv.random.normal(k, (5,)), "uniform": cv.random.uniform(k, (5,)),
                   "randint": cv.random.randint(k, (5,), 0, 9), "bernoulli": cv.random.bernoulli(k, 0.5, (5,)),
                   "permutation": cv.random.permutation(k, 5), "rand": cv.rand(5), "randn": cv.randn(5)}
        split = cv.random.split(k)
    assert {name: t.device for name, t in samples.items()} == {name: device for name in samples}
    np.testing.assert_allclose(samples["normal"].numpy(), want, rtol=1e-6, atol=1e-7)
    assert split.device == "CPU"
    assert cv.random.normal(k, (2,), device=device).device == device
    logits = cv.zeros((3, 4), device=device)
    assert cv.random.categorical(k, logits).device == device  # (where the logits are)


def test_checkpoints_move_between_devices(device, tmp_path):
    """A model and its Adam state trained on ``device``, saved (PyTorch's argument order too),
    loaded on the CPU and back on ``device`` (``cv.load(device=)``: map_location): the copies
    continue training exactly as the original does."""
    cv.manual_seed(1)
    nn, optim = cv.nn, cv.optim

    def net():
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))

    model = net().to(device)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    x = cv.Tensor(np.random.default_rng(0).random((16, 4), dtype=np.float32), device=device)

    def step(m, o, x):
        o.zero_grad()
        (m(x) ** 2).mean().backward()
        o.step()

    for _ in range(2):
        step(model, opt, x)
    cv.save(model.state_dict(), tmp_path / "model.safetensors")  # (torch.save's order)
    cv.save(tmp_path / "adam.safetensors", cv.optim.flatten_state_dict(opt.state_dict()))
    assert {v.device for v in cv.load(tmp_path / "model.safetensors").values()} == {"CPU"}
    copies = []
    for where in ("CPU", device):
        m = net().to(where)
        m.load_state_dict(cv.load(tmp_path / "model.safetensors", device=where))
        o = optim.Adam(m.parameters(), lr=1e-2)
        o.load_state_dict(cv.load(tmp_path / "adam.safetensors"))  # (state goes to the parameters' device)
        assert {p.device for p in m.parameters()} == {where}
        assert {v.device for st in o.state.values() for v in st.values() if isinstance(v, cv.Tensor)} == {where}
        copies.append((m, o, cv.Tensor(x.numpy(), device=where)))
    step(model, opt, x)
    for m, o, xm in copies:
        step(m, o, xm)
        for p, q in zip(m.parameters(), model.parameters()):
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-6, atol=1e-7)

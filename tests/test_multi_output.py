"""Kernels of several outputs (corvid/engine/schedule.py: ``_groups``).

Values of one shape that must all be stored, and that one loop nest computes, share a kernel that
stores each of them: an optimizer's parameter and moments, a norm's mean and variance, a loss's
row maximum and sum of exponentials. Checked here: which values share a kernel and which must
not (one reading another at another element, a cycle through another kernel, sums over other
axes), their values against numpy in float64, under ``jit`` and threads, and as the GPU-style
renderers write them (PoCL, the CUDA emulation)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import corvid as cv
from corvid.engine.realize import realize
from corvid.engine.schedule import create_schedule


def _t(*shape, seed=0, dtype=np.float32):
    return cv.Tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype)).realize()


def _sched(*ts):
    return create_schedule([t.node for t in ts], "CPU")


def _adam(p, m, v, g, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=0.01):
    m2 = m * b1 + g * (1 - b1)
    v2 = v * b2 + g * g * (1 - b2)
    root = np.sqrt if isinstance(v2, np.ndarray) else (lambda a: a.sqrt())
    p2 = p - lr * (m2 / (root(v2 / (1 - b2)) + eps) / (1 - b1) + wd * p)
    return p2, m2, v2


def test_an_adam_update_is_one_kernel_reading_each_operand_once():
    p, m, v, g = (_t(64, 48, seed=i) for i in range(4))
    v = v.abs()
    outs = _adam(p, m, v, g)
    sched = _sched(*outs)
    assert len(sched) == 1, sched
    assert len(sched[0].outputs) == 3 and sched[0].kernel.params[3].output is False
    # each of p, m, v, g read once: 4 loads, 3 stores, where 3 kernels made 7 loads
    src = sched[0].source
    assert src.count("p3[") + src.count("p4[") + src.count("p5[") + src.count("p6[") == 4, src
    realize([o.node for o in outs], "CPU")
    want = _adam(*(x.numpy().astype(np.float64) for x in (p, m, v, g)))
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got.numpy(), w, rtol=2e-6, atol=1e-7)


def test_a_norms_mean_and_variance_share_a_kernel():
    x = _t(128, 256)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / (var + 1e-5).sqrt()
    sched = _sched(mu, var, y)
    assert len(sched) == 2
    assert {n.shape for n in sched[0].outputs} == {(128, 1)} and len(sched[0].outputs) == 2
    realize([mu.node, var.node, y.node], "CPU")
    a = x.numpy().astype(np.float64)
    np.testing.assert_allclose(mu.numpy(), a.mean(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var.numpy(), a.var(-1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(y.numpy(), (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5),
                               rtol=1e-4, atol=1e-5)


def test_a_loss_reads_its_logits_in_one_kernel_for_the_max_and_the_sum():
    z = _t(64, 1000)
    mx = z.max(-1, keepdims=True)
    se = (z - mx).exp().sum(-1, keepdims=True)
    sched = _sched(mx, se)
    assert len(sched) == 1 and len(sched[0].outputs) == 2
    realize([mx.node, se.node], "CPU")
    a = z.numpy().astype(np.float64)
    np.testing.assert_array_equal(mx.numpy(), a.max(-1, keepdims=True).astype(np.float32))
    np.testing.assert_allclose(se.numpy(), np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True), rtol=1e-5)


def test_an_output_read_at_another_element_gets_its_own_kernel():
    a = _t(32, 16)
    m1 = a * 2 + 1
    m2 = m1.flip(0) + a  # (m1 at another row: inside one kernel m1 would be computed twice per element)
    sched = _sched(m1, m2)
    assert len(sched) == 2 and all(not sk.extra for sk in sched)
    realize([m1.node, m2.node], "CPU")
    x = a.numpy()
    np.testing.assert_array_equal(m2.numpy(), (x * 2 + 1)[::-1] + x)


def test_no_group_runs_before_a_kernel_it_reads():
    """m2 shares ``a`` with m1 but reads a sum of m1: in m1's kernel it would run before that sum."""
    a = _t(64, 64)
    m1 = a * 2
    s = m1.sum(0)
    m2 = a * 3 + s
    sched = _sched(m1, s, m2)
    assert len(sched) == 3 and all(not sk.extra for sk in sched), sched
    realize([m1.node, s.node, m2.node], "CPU")
    x = a.numpy().astype(np.float64)
    np.testing.assert_allclose(m2.numpy(), x * 3 + (x * 2).sum(0), rtol=1e-5, atol=1e-4)


def test_a_sum_of_an_output_inside_another_is_not_computed_twice():
    a = _t(64, 64)
    m1 = a * 2
    m2 = a * 3 + m1.sum()  # (a group would evaluate m1 at every element inside the sum, and again)
    sched = _sched(m1, m2)
    assert all(not sk.extra for sk in sched), sched
    realize([m1.node, m2.node], "CPU")
    x = a.numpy().astype(np.float64)
    np.testing.assert_allclose(m2.numpy(), x * 3 + (x * 2).sum(), rtol=1e-5, atol=1e-4)


def test_sums_over_different_axes_keep_their_own_kernels():
    a = _t(96, 96)
    rows, cols = a.sum(1), a.sum(0)
    sched = _sched(rows, cols)
    assert len(sched) == 2
    realize([rows.node, cols.node], "CPU")
    x = a.numpy().astype(np.float64)
    np.testing.assert_allclose(rows.numpy(), x.sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(cols.numpy(), x.sum(0), rtol=1e-5, atol=1e-4)


def test_values_of_unrelated_kernels_are_not_grouped():
    a, b = _t(32, 32), _t(32, 32, seed=1)
    sched = _sched(a * 2, b + 1)  # (nothing read twice: nothing to save)
    assert len(sched) == 2


def test_outputs_of_different_dtypes_and_an_integer_one():
    a = _t(40, 24)
    h = (a * 3).astype(cv.bfloat16)
    s = a.sin()
    i = (a * 10).astype(cv.int32)
    sched = _sched(h, s, i)
    assert len(sched) == 1 and [n.dtype for n in sched[0].outputs] == [cv.bfloat16, cv.float32, cv.int32]
    realize([h.node, s.node, i.node], "CPU")
    x = a.numpy()
    np.testing.assert_array_equal(h.numpy().astype(np.float32), (x * 3).astype(cv.bfloat16.np).astype(np.float32))
    np.testing.assert_allclose(s.numpy(), np.sin(x), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(i.numpy(), (x * 10).astype(np.int32))


def test_jit_replays_a_kernel_of_several_outputs():
    p, m, v, g = (_t(256, 33, seed=i) for i in range(4))
    v = v.abs()

    @cv.jit
    def step(p, m, v, g):
        return _adam(p, m, v, g)

    for _ in range(3):
        got = step(p, m, v, g)
    want = _adam(*(x.numpy().astype(np.float64) for x in (p, m, v, g)))
    for o, w in zip(got, want):
        np.testing.assert_allclose(o.numpy(), w, rtol=2e-6, atol=1e-7)
    launches = next(iter(step._cache.values()))[0].launches
    assert len(launches) == 1 and len(launches[0].outs) == 3


def test_an_optimizer_step_makes_one_kernel_per_parameter():
    model = cv.nn.Linear(32, 16)
    opt = cv.optim.AdamW(model.parameters(), lr=1e-2)
    x = _t(8, 32)

    @cv.jit
    def step(x):
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    before = [p.numpy().copy() for p in model.parameters()]
    for _ in range(2):
        step(x)
    cap = next(iter(step._cache.values()))[0]
    grouped = [ln for ln in cap.launches if len(ln.outs) >= 3]
    assert len(grouped) >= 2, [ln.sk for ln in cap.launches]  # (weight and bias: p, m, v each)
    assert all(not np.array_equal(b, p.numpy()) for b, p in zip(before, model.parameters()))


def test_threads_realize_grouped_kernels_at_once():
    p, m, v, g = (_t(128, 64, seed=i) for i in range(4))
    v = v.abs()
    want = _adam(*(x.numpy().astype(np.float64) for x in (p, m, v, g)))
    errors = []

    def work():
        try:
            for _ in range(20):
                outs = _adam(p, m, v, g)
                realize([o.node for o in outs], "CPU")
                for o, w in zip(outs, want):
                    np.testing.assert_allclose(o.numpy(), w, rtol=2e-6, atol=1e-7)
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


_UNARY = [lambda x: x * 2, lambda x: x.exp(), lambda x: x.abs().sqrt(), lambda x: -x, lambda x: x.tanh()]
_UNARY_NP = [lambda x: x * 2, np.exp, lambda x: np.sqrt(np.abs(x)), lambda x: -x, np.tanh]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, len(_UNARY) - 1)), min_size=2, max_size=6),
       st.sampled_from([(7,), (16, 9), (3, 4, 5)]))
def test_random_outputs_over_shared_inputs_match_numpy(spec, shape):
    """Outputs built from shared inputs and from one another: whatever groups form, each value is
    numpy's."""
    base = [_t(*shape, seed=i) for i in range(3)]
    vals, refs = list(base), [b.numpy().astype(np.float64) for b in base]
    outs, out_refs = [], []
    for i, j, f in spec:
        i, j = i % len(vals), (j + len(vals) - 1) % len(vals)
        vals.append(_UNARY[f](vals[i]) + vals[j] * 0.5)
        refs.append(_UNARY_NP[f](refs[i]) + refs[j] * 0.5)
        outs.append(vals[-1])
        out_refs.append(refs[-1])
    realize([o.node for o in outs], "CPU")
    for o, r in zip(outs, out_refs):
        got = o.numpy().astype(np.float64)
        ok = np.isclose(got, r, rtol=1e-4, atol=1e-4) | (np.isinf(r) & (got == r)) | (np.abs(r) > 1e30)
        assert ok.all()


# --- GPU-style renderers -------------------------------------------------------------------------


def _cases_on(device):
    def t(*shape, seed=0):
        return cv.Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), device=device).realize()

    x = t(64, 512)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    z = t(32, 1024, seed=5)
    mx = z.max(-1, keepdims=True)
    p, m, v, g = (t(1 << 14, seed=i) for i in range(4))
    return {"norm": [mu, var], "loss": [mx, (z - mx).exp().sum(-1, keepdims=True)],
            "adam": list(_adam(p, m, v.abs(), g))}


def _group_kernel(ts):
    from corvid.codegen.lower import lower_unmerged, merge_loops

    sk = _sched(*ts)[0]
    assert sk.extra
    return sk, merge_loops(lower_unmerged("g", list(sk.outputs), sk.inputs)[0])


@pytest.mark.parametrize("case", ["norm", "loss", "adam"])
def test_group_kernels_on_pocl_match_the_cpu(case):
    """The GPU-style heuristics and renderer (work-group reduces, rows shared by a work-group)
    on a kernel of several outputs, run by an OpenCL driver."""
    from corvid.runtime.device import get_device

    try:
        get_device("CL")
    except (ImportError, RuntimeError, OSError) as e:
        pytest.skip(f"CL not available: {e}")
    want = [t.numpy() for t in _cases_on("CPU")[case]]
    ts = _cases_on("CL")[case]
    assert any(sk.extra for sk in create_schedule([t.node for t in ts], "CL"))
    for t, w in zip(ts, want):
        np.testing.assert_allclose(t.numpy(), w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["norm", "loss", "adam"])
def test_group_kernels_as_cuda_renders_them_match_the_cpu(case):
    """The CUDA device's heuristics and renderer (warp shuffles, wide items) on a kernel of
    several outputs, run in the emulation of tests/cuda_emulator.py."""
    from corvid.codegen.opt import gpu_heuristics
    from corvid.codegen.passes import finalize
    from corvid.codegen import search
    from corvid.render.cuda import VECTOR_BYTES, CUDARenderer, cuda_launch
    from corvid.runtime.cuda import CUDADevice
    from tests import cuda_emulator as E

    if E.compiler() is None:
        pytest.skip("no C++ compiler")
    sk, k0 = _group_kernel(_cases_on("CPU")[case])
    k = finalize(gpu_heuristics(k0, 1024, vector_bytes=VECTOR_BYTES), block=CUDADevice.sum_block)
    src = CUDARenderer().render(k)
    dims = cuda_launch(k)
    assert dims.threads[1:] == (1, 1)
    text, name = E.kernel_source(src)
    types = E.param_types(k)
    try:
        lib = E.build(text, name, types)
    except Exception as e:  # noqa: BLE001 -- a compiler without C++20's <barrier>
        pytest.skip(f"the CUDA emulation does not build here: {str(e)[:300]}")
    arrays = search.random_inputs(k0, seed=2)
    n_out = len(sk.outputs)
    outs = [np.zeros(p.size, p.dtype.np) for p in k.params[:n_out]]
    E.launch(lib, outs + [np.ascontiguousarray(a) for a in arrays], int(dims.blocks), dims.threads[0])
    want = search._Runner.make(k0, "CPU")
    for buf, a in zip(want.inputs, arrays):
        buf.copyin(a)
    from corvid.runtime.device import get_device

    dev = get_device("CPU")
    ref = want.run(dev.compile(k0, dev.renderer.render(k0)), None)[0]
    got = np.concatenate([o.astype(np.float64) for o in outs])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", ["WEBGPU", "CL"])
def test_outputs_of_different_widths_on_gpu_style_devices(device):
    """A float32, a bool and an int8 output in one kernel: WGSL packs the narrow ones four to a
    32-bit word, so each invocation then computes four elements of every output."""
    from corvid.runtime.device import get_device

    try:
        get_device(device)
    except (ImportError, RuntimeError, OSError) as e:
        pytest.skip(f"{device} not available: {e}")
    host = np.random.default_rng(3).standard_normal((96, 40)).astype(np.float32)
    a = cv.Tensor(host, device=device).realize()
    outs = [a * 2 + 1, a > 0.25, (a * 20).astype(cv.int8)]
    sched = create_schedule([o.node for o in outs], device)
    assert len(sched) == 1 and len(sched[0].outputs) == 3, sched
    if device == "WEBGPU":  # (one invocation per word of the narrowest output: no two write one word)
        from corvid.render.wgsl import elements_per_invocation

        assert elements_per_invocation(sched[0].kernel) == 4
    np.testing.assert_array_equal(outs[0].numpy(), host * 2 + 1)
    np.testing.assert_array_equal(outs[1].numpy(), host > 0.25)
    np.testing.assert_array_equal(outs[2].numpy(), (host * 20).astype(np.int8))


def test_a_device_graph_replays_kernels_of_several_outputs():
    """On the CUDA device (its driver a stand-in that runs the kernels' CPU builds:
    tests/test_cuda_runtime.py), from the second call on a jitted step runs as one device graph.
    A kernel of several outputs then writes some into results (new memory each call) and some
    into intermediates the graph owns (a norm's variance, read by the next kernel only)."""
    from tests.test_cuda_runtime import FAKE, _program, registered

    def step(p, m, v, g, x):
        p2, m2, v2 = _adam(p, m, v, g)
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return p2, m2, v2, mu, (x - mu) / (var + 1e-5).sqrt(), var.sum()  # (var: read by two kernels)

    rng = np.random.default_rng(7)
    host = [rng.standard_normal((64, 48)).astype(np.float32) for _ in range(4)]
    host[2] = np.abs(host[2])
    xs = rng.standard_normal((32, 256)).astype(np.float32)
    with registered(FAKE, "tests.test_cuda_runtime:FakeCUDA") as dev:
        jf = cv.jit(step)
        p, m, v, g = (cv.Tensor(a, device=FAKE) for a in host)
        x = cv.Tensor(xs, device=FAKE)
        want = [a.astype(np.float64) for a in host]
        for call in range(4):
            dev.cu.calls.clear()
            p, m, v, mu, y, vs = jf(p, m, v, g, x)
            want[:3] = _adam(*want)
            for got, w in zip((p, m, v), want[:3]):
                np.testing.assert_allclose(got.numpy(), w, rtol=1e-5, atol=1e-6)
            a = xs.astype(np.float64)
            np.testing.assert_allclose(mu.numpy(), a.mean(-1, keepdims=True), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(y.numpy(), (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5),
                                       rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(vs.numpy(), a.var(-1).sum(), rtol=1e-5)
            if call >= 2:
                assert len(dev.cu.named("cuGraphLaunch")) == 1 and not dev.cu.named("cuLaunchKernel")
        cap = _program(jf)
        assert sorted(len(ln.outs) for ln in cap.launches)[-2:] == [2, 3], [ln.sk for ln in cap.launches]
        norm = next(ln for ln in cap.launches if len(ln.outs) == 2)
        # the mean is a result (new memory at each call), the variance an intermediate the graph owns
        assert [o in cap._fixed for o in norm.outs] == [False, True]

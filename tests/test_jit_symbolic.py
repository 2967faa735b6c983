"""jit with symbolic sizes (``dynamic=``): one trace, one set of kernels, every size.

Each program is checked against numpy (float64 where sums are long) or the same function run
without jit, at sizes on both sides of every boundary the kernels have (the cascaded sums' runs of
1024, sizes 0 and 1, which stay constant), and the trace count says that nothing was traced again.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import corvid as cv
import corvid.nn as nn
from corvid.graph.symbolic import BVar, Dim, SymbolicSizeError, evaluate, is_symbolic
from corvid.transforms.jit import JitError

rng = np.random.default_rng(7)


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_elementwise_and_row_sums_trace_once_for_every_batch_size():
    f = cv.jit(lambda x: (x * 2 + 1).exp().sum(axis=1), dynamic={0: {0: "batch"}})
    for n in (3, 5, 2, 17, 3000, 4):
        x = _f32(n, 4)
        np.testing.assert_allclose(f(cv.Tensor(x)).numpy(), np.exp(x * 2.0 + 1).sum(1), rtol=1e-5)
    assert f.traces == 1


@pytest.mark.parametrize("n", [2, 1023, 1024, 1025, 5000, 70_000])
def test_a_sum_over_a_symbolic_axis_is_cascaded_at_every_length(n):
    # the cascade's blocks, levels and tails all have symbolic trip counts (some of them 0)
    f = cv.jit(lambda x: x.sum(axis=0), dynamic={0: {0: "n"}})
    f(cv.ones((3, 2)))  # traced at another size
    x = (rng.random((n, 2)) + 0.1).astype(np.float32)
    got = f(cv.Tensor(x)).numpy()
    want = x.astype(np.float64).sum(0)
    assert np.all(np.abs(got - want) <= 4e-6 * np.abs(want)), (got, want)
    assert f.traces == 1


def test_a_long_float32_sum_keeps_pairwise_accuracy():
    f = cv.jit(lambda x: x.sum(), dynamic={0: {0: "n"}})
    f(cv.ones(5))
    got = f(cv.full((10_000_000,), 0.1)).item()
    assert abs(got - 1e6) < 1.0, got  # a running float32 sum gives 1087937
    assert f.traces == 1


def test_matmul_mean_and_reshapes_that_merge_and_split_a_symbolic_axis():
    w = _f32(8, 3)

    def f(x, w):
        b, s, d = x.shape
        flat = x.reshape(b * s, d)  # a symbolic size times a constant, then split again
        y = (flat @ w).relu().reshape(b, s, 3)
        return y.mean(axis=1), y.permute(0, 2, 1).reshape(b, -1), x.mean()

    jf = cv.jit(f, dynamic={0: {0: "batch", 1: "seq"}})
    for b, s in ((2, 3), (4, 7), (3, 2), (5, 300)):
        x = _f32(b, s, 8)
        mean, flat, total = jf(cv.Tensor(x), cv.Tensor(w))
        y = np.maximum(x.reshape(b * s, 8).astype(np.float64) @ w, 0).reshape(b, s, 3)
        np.testing.assert_allclose(mean.numpy(), y.mean(1), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(flat.numpy(), y.transpose(0, 2, 1).reshape(b, -1), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(total.item(), x.astype(np.float64).mean(), rtol=1e-4, atol=1e-6)
        assert mean.shape == (b, 3) and flat.shape == (b, 3 * s)
    assert jf.traces == 1


def test_a_symbolic_size_as_a_value_and_in_python_arithmetic():
    def f(x):
        n = x.shape[0]
        return x / n + (n * 2 - 1), cv.arange(n * 2).reshape(n, 2)

    jf = cv.jit(f, dynamic={0: {0: "n"}})
    for n in (4, 9):
        x = _f32(n)
        a, b = jf(cv.Tensor(x))
        np.testing.assert_allclose(a.numpy(), x / n + (2 * n - 1), rtol=1e-6)
        assert b.tolist() == np.arange(2 * n).reshape(n, 2).tolist()
    assert jf.traces == 1


def test_value_and_grad_of_a_least_squares_loss_against_numpy():
    step = cv.jit(cv.value_and_grad(lambda w, x, y: ((x @ w - y) ** 2).mean()),
                  dynamic={1: {0: "batch"}, 2: {0: "batch"}})
    w = _f32(4, 3)
    for n in (9, 12, 1300, 30):
        x, y = _f32(n, 4), _f32(n, 3)
        loss, g = step(cv.Tensor(w), cv.Tensor(x), cv.Tensor(y))
        r = x.astype(np.float64) @ w - y
        np.testing.assert_allclose(loss.item(), (r ** 2).mean(), rtol=1e-5)
        np.testing.assert_allclose(g.numpy(), 2 * x.T.astype(np.float64) @ r / r.size, rtol=1e-4, atol=1e-6)
    assert step.traces == 1


def test_a_training_step_with_a_smaller_last_batch_matches_the_eager_step():
    def make():
        cv.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        return model, cv.optim.Adam(model.parameters(), lr=0.01)

    def step_of(model, opt):
        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return step

    eager_model, eager_opt = make()
    model, opt = make()
    eager, jitted = step_of(eager_model, eager_opt), cv.jit(step_of(model, opt), dynamic={0: {0: "b"}, 1: {0: "b"}})
    for n in (32, 32, 32, 20, 32, 20):
        x, y = _f32(n, 8), rng.integers(0, 4, n)
        want = eager(cv.Tensor(x), cv.Tensor(y)).item()
        got = jitted(cv.Tensor(x), cv.Tensor(y)).item()
        assert abs(got - want) <= 1e-5 * abs(want), (n, got, want)
    for p, q in zip(model.parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)
    # the first step (no .grad yet) and the next ones are two programs; the batch of 20 replays
    assert jitted.traces == 2


def test_sizes_0_and_1_stay_constant():
    f = cv.jit(lambda x: x.sum(axis=0) * 2, dynamic={0: {0: "n"}})
    assert f(cv.ones((5, 2))).tolist() == [10.0, 10.0] and f.traces == 1
    assert f(cv.ones((1, 2))).tolist() == [2.0, 2.0] and f.traces == 2
    assert f(cv.ones((0, 2))).tolist() == [0.0, 0.0] and f.traces == 3
    assert f(cv.ones((7, 2))).tolist() == [14.0, 14.0] and f.traces == 3


def test_dynamic_true_makes_the_sizes_that_changed_symbolic():
    f = cv.jit(lambda x, y: (x * y).sum(axis=-1), dynamic=True)
    out = f(cv.ones((3, 4)), cv.ones((3, 4)))
    assert out.tolist() == [4.0] * 3 and f.traces == 1
    assert f(cv.ones((5, 4)), cv.ones((5, 4))).tolist() == [4.0] * 5 and f.traces == 2
    for n in (6, 30, 2):
        assert f(cv.ones((n, 4)), cv.ones((n, 4))).tolist() == [4.0] * n
    assert f.traces == 2
    assert f(cv.ones((3, 4)), cv.ones((3, 4))).tolist() == [4.0] * 3 and f.traces == 2  # (the first program)
    # a size that never changed stays a constant: a new one traces again, with both symbolic
    assert f(cv.ones((5, 6)), cv.ones((5, 6))).tolist() == [6.0] * 5 and f.traces == 3
    assert f(cv.ones((7, 9)), cv.ones((7, 9))).tolist() == [9.0] * 7 and f.traces == 3


def test_a_size_the_function_needs_as_an_int():
    def f(x):
        return sum(x[i] for i in range(x.shape[0]))  # a Python loop over the size

    with pytest.raises(JitError, match="symbolic") as info:
        cv.jit(f, dynamic={0: {0: "n"}})(cv.ones((3, 2)))
    assert isinstance(info.value.__cause__, SymbolicSizeError)
    auto = cv.jit(f, dynamic=True)  # automatic: falls back to a trace per size
    for n in (2, 3, 4):
        assert auto(cv.ones((n, 2))).tolist() == [float(n)] * 2
    assert auto.traces == 4  # (2, the failed symbolic trace, 3... then 4: every size traced)


def test_comparisons_of_sizes_become_guards():
    def f(x):
        return x * 2 if x.shape[0] > 10 else x * 3  # a branch on the size

    jf = cv.jit(f, dynamic={0: {0: "n"}})
    assert jf(cv.ones(4)).tolist() == [3.0] * 4 and jf.traces == 1
    assert jf(cv.ones(7)).tolist() == [3.0] * 7 and jf.traces == 1
    assert jf(cv.ones(12)).tolist() == [2.0] * 12 and jf.traces == 2
    assert jf(cv.ones(20)).tolist() == [2.0] * 20 and jf(cv.ones(5)).tolist() == [3.0] * 5 and jf.traces == 2


def test_one_name_is_one_size():
    f = cv.jit(lambda x, y: x + y, dynamic={0: {0: "n"}, 1: {0: "n"}})
    assert f(cv.ones(3), cv.ones(3)).tolist() == [2.0] * 3
    with pytest.raises(JitError, match="one name is one size"):
        f(cv.ones((4, 1)), cv.ones(5))
    g = cv.jit(lambda x, y: x + y, dynamic={0: {0: "n"}, 1: {0: "m"}})
    from corvid.errors import ShapeError

    with pytest.raises(ShapeError, match=r"\(n,\) and \(m,\)"):  # two independent sizes do not broadcast
        g(cv.ones(3), cv.ones(3))


def test_bad_dynamic_arguments():
    with pytest.raises(TypeError, match="dynamic"):
        cv.jit(lambda x: x, dynamic="batch")
    with pytest.raises(TypeError, match="axes"):
        cv.jit(lambda x: x, dynamic={0: {"a": 0}})
    with pytest.raises(JitError, match="axis 3"):
        cv.jit(lambda x: x, dynamic={0: {3: "n"}})(cv.ones((2, 2)))
    # in a pytree, the tensors that have the axis take it (a cache: 4-d keys, 1-d lengths)
    f = cv.jit(lambda c: (c["k"] * 2).sum(2) + c["len"], dynamic={0: {2: "slots"}})
    for slots in (4, 9):
        assert f({"k": cv.ones((1, 2, slots)), "len": cv.ones(1)}).tolist() == [[2.0 * slots + 1] * 2]
    assert f.traces == 1


def test_keyword_and_pytree_arguments():
    f = cv.jit(lambda batch, scale=1.0: (batch["x"] * scale).sum(1) + batch["y"],
               dynamic={"batch": {0: "n"}})
    for n in (3, 6):
        out = f({"x": cv.ones((n, 2)), "y": cv.ones(n)}, scale=2.0)
        assert out.tolist() == [5.0] * n
    assert f.traces == 1


def test_debug_shows_the_symbolic_sizes(monkeypatch, capsys):
    monkeypatch.setenv("CORVID_DEBUG", "1")
    f = cv.jit(lambda x: x + 1, dynamic={0: {1: "seq"}})
    f(cv.ones((2, 3)))
    assert "symbolic sizes arg0[1]=seq" in capsys.readouterr().err


def test_symbolic_shapes_print_their_names_and_the_source_reads_them_at_run_time():
    seen = {}

    def f(x):
        seen["shape"] = x.shape
        return (x * 2).contiguous()

    jf = cv.jit(f, dynamic={0: {0: "batch"}})
    jf(cv.ones((3, 5)))
    assert repr(seen["shape"]) == "(batch, 5)" and isinstance(seen["shape"][0], Dim)
    sk = jf._symbolic[next(iter(jf._symbolic))][0].launches[0].sk
    assert "cv_d0" in sk.source and "< 5" in sk.source  # the size read from the kernel's input, the 5 kept


def test_slices_and_indices_along_a_symbolic_axis():
    def f(x):
        return x[:, 1:], x[:, :-1] * 2, x[:, -1], x[:, ::2], x[:, ::-1], x[:, 2:100]

    jf = cv.jit(f, dynamic={0: {1: "t"}})
    for t in (5, 9, 4, 120):
        x = _f32(2, t)
        for got, want in zip(jf(cv.Tensor(x)), (x[:, 1:], x[:, :-1] * 2, x[:, -1], x[:, ::2], x[:, ::-1], x[:, 2:100])):
            np.testing.assert_array_equal(got.numpy(), want)
    assert jf.traces <= 2  # (the stop 100 is a guard: below it, or clipped to the size)


def test_matmul_with_symbolic_rows_uses_register_tiles():
    f = cv.jit(lambda x, w: x @ w, dynamic={0: {0: "rows"}})
    w = _f32(64, 48)
    for n in (16, 37, 3, 101):
        x = _f32(n, 64)
        np.testing.assert_allclose(f(cv.Tensor(x), cv.Tensor(w)).numpy(), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
    cap = next(iter(f._symbolic.values()))[0]
    opts = [o.op for ln in cap.launches for o in ln.sk.kernel.opts]
    assert "pad" in opts and "upcast" in opts and "vectorize" in opts, opts  # the rows padded to the tile, gated




@pytest.mark.parametrize("family", ["llama", "gemma2", "phi3-longrope"])
def test_a_language_model_traced_once_for_every_prompt_length_matches_transformers(family, tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    import test_llm_models as llm  # (tests/ is on the path: the models' tiny configurations)
    from corvid import models

    hf = llm._hf_model(family)
    model = models.from_pretrained(llm._save(hf, tmp_path))
    f = cv.jit(lambda ids: model(ids), dynamic={0: {1: "seq"}})
    for t in (12, 9, 20, 11):
        ids = np.concatenate([llm.PROMPT, llm.PROMPT], axis=1)[:, :t]
        ref = llm._hf_logits(hf, ids)
        out = f(cv.Tensor(ids)).numpy()
        assert out.shape == ref.shape and np.abs(out - ref).max() <= 1e-4, (t, np.abs(out - ref).max())
    assert f.traces == 1, f.traces  # lengths 9 to 20 share one program (guards at 8 and 32)


_F = nn.functional
_OPS = {
    "softmax": lambda x: x.softmax(-1),
    "log_softmax over the symbolic axis": lambda x: x.log_softmax(0),
    "layer_norm": lambda x: _F.layer_norm(x, (x.shape[-1],)),
    "cat along it": lambda x: cv.cat([x, x * 2], axis=0),
    "cat across it": lambda x: cv.cat([x, x * 2], axis=1),
    "stack": lambda x: cv.stack([x, x + 1], axis=0),
    "cumsum along it": lambda x: x.cumsum(0),
    "argmax along it": lambda x: x.argmax(0),
    "max along it": lambda x: x.amax(0),
    "var along it": lambda x: x.var(0, correction=1),
    "std": lambda x: x.std(),
    "sort": lambda x: x.sort(1)[0] if isinstance(x.sort(1), tuple) else x.sort(1),
    "topk": lambda x: x.topk(2, 1)[0],
    "flip": lambda x: x.flip(0),
    "pad": lambda x: x.pad(((1, 2), (0, 1))),
    "triu of x @ x.T": lambda x: cv.triu(x @ x.T),
    "transpose": lambda x: x.T.contiguous(),
    "where": lambda x: cv.where(x > 0, x, -x * 2),
    "broadcast product": lambda x: x[:, None, :] * x[None, :, :],
    "take_along_axis": lambda x: cv.take_along_axis(x, x.argsort(1), 1),
    "one_hot": lambda x: _F.one_hot(x.argmax(1), 5).float(),
    "cross_entropy": lambda x: _F.cross_entropy(x, x.argmax(1)),
    "tile": lambda x: cv.tile(x, (2, 1)),
    "roll": lambda x: cv.roll(x, 1, 0),
    "diff": lambda x: cv.diff(x, axis=0),
}


@pytest.mark.parametrize("name", list(_OPS))
def test_ops_with_a_symbolic_axis_match_the_eager_result(name):
    fn = _OPS[name]
    jf = cv.jit(fn, dynamic={0: {0: "n"}})
    for n in (6, 9, 3):
        x = _f32(n, 5)
        want, got = fn(cv.Tensor(x)), jf(cv.Tensor(x))
        assert got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    assert jf.traces <= 2  # (some ops compare the size with a threshold: one program per side)


def test_conv_batch_norm_embedding_and_attention_with_a_symbolic_batch():
    cv.manual_seed(0)
    conv, bn, emb = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Embedding(10, 6)
    cases = [
        (lambda x: _F.max_pool2d(conv(x).relu(), 2), (3, 8, 8)),
        (lambda x: bn.eval()(conv(x)), (3, 8, 8)),
        (lambda x: emb((x.abs() * 3).astype(cv.int64).clip(0, 9)).sum(-1), (4,)),
        (lambda x: _F.scaled_dot_product_attention(x, x * 0.5, x, is_causal=True), (7, 8)),
    ]
    for fn, tail in cases:
        jf = cv.jit(fn, dynamic={0: {0: "n"}})
        for n in (6, 9, 3):
            x = _f32(n, *tail)
            np.testing.assert_allclose(jf(cv.Tensor(x)).numpy(), fn(cv.Tensor(x)).numpy(), rtol=1e-4, atol=1e-5)
        assert jf.traces == 1
    # training-mode batch norm: the running variance's unbiased factor n/(n-1) of a symbolic n
    ref, sym = nn.BatchNorm2d(4), nn.BatchNorm2d(4)
    f = cv.jit(lambda x: sym(x), dynamic={0: {0: "n"}})
    for n in (4, 7):
        x = _f32(n, 4, 3, 3)
        np.testing.assert_allclose(f(cv.Tensor(x)).numpy(), ref(cv.Tensor(x)).numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(sym.running_var.numpy(), ref.running_var.numpy(), rtol=1e-5)


def test_random_draws_of_a_symbolic_count_follow_the_eager_sequence():
    drop = lambda x: _F.dropout(x, 0.5, training=True)  # noqa: E731
    jd = cv.jit(drop, dynamic={0: {0: "n"}})
    sizes = (4, 7, 100, 5)
    cv.manual_seed(3)
    want = [drop(cv.ones((n, 3))).numpy() for n in sizes]
    cv.manual_seed(3)
    got = [jd(cv.ones((n, 3))).numpy() for n in sizes]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert jd.traces == 1


_UNARY = [
    lambda x: x * 2 - 1, lambda x: x.exp(), lambda x: x.softmax(-1), lambda x: x.cumsum(0), lambda x: x.flip(0),
    lambda x: cv.roll(x, 1, 0), lambda x: x - x.mean(0, keepdims=True), lambda x: x / (cv.max(x.abs(), axis=1, keepdims=True) + 1),
    lambda x: cv.cat([x[1:], x[:1]], axis=0), lambda x: x.reshape(-1, 5) * 0.5,
    lambda x: (x @ x.T) @ x * 0.01, lambda x: cv.where(x > 0.1, x, 0.0),
]
_FINAL = [lambda x: x, lambda x: x.sum(0), lambda x: x.mean(1), lambda x: x.max(), lambda x: x.reshape(-1)]


@settings(max_examples=25, deadline=None)
@given(chain=st.lists(st.integers(0, len(_UNARY) - 1), min_size=1, max_size=4),
       final=st.integers(0, len(_FINAL) - 1), sizes=st.lists(st.integers(2, 40), min_size=2, max_size=4))
def test_fuzz_chains_of_ops_with_a_symbolic_axis_match_eager(chain, final, sizes):
    def fn(x):
        for i in chain:
            x = _UNARY[i](x)
        return _FINAL[final](x)

    jf = cv.jit(fn, dynamic={0: {0: "n"}})
    for n in sizes:
        x = np.random.default_rng(n).standard_normal((n, 5)).astype(np.float32)
        want, got = fn(cv.Tensor(x)), jf(cv.Tensor(x))
        assert got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-4, atol=2e-4)


def test_truth_and_division_of_sizes_whose_bounds_are_loose():
    n = Dim(0, "n", 2, 2**31 - 1, hint=40)
    ceil16 = -(-n // 16)  # n - (15n)//16: positive, though its bounds say it may not be
    assert ceil16.vmin < 1 and evaluate(ceil16, {n: 40}) == 3
    assert evaluate((n * ceil16) // ceil16, {n: 40}) == 40 and evaluate((n * 5) % ceil16, {n: 40}) == 200 % 3
    assert bool(n) and bool(n - 1) and not bool(n - n)
    with pytest.raises(SymbolicSizeError):
        bool(n % 16)  # (outside a trace nothing decides it)
    f = cv.jit(lambda x: x * 2 if x.shape[0] % 4 else x * 3, dynamic={0: {0: "n"}})
    assert f(cv.ones(6)).tolist() == [2.0] * 6 and f(cv.ones(10)).tolist() == [2.0] * 10 and f.traces == 1
    assert f(cv.ones(8)).tolist() == [3.0] * 8 and f.traces == 2  # (the guard n % 4 != 0 failed)


def test_attention_scores_with_symbolic_columns_are_tiled_and_correct():
    f = cv.jit(lambda q, k: (q @ k.mT).softmax(-1), dynamic={0: {2: "t"}, 1: {2: "t"}})
    for t in (17, 5, 40, 16):
        q, k = _f32(2, 3, t, 32), _f32(2, 3, t, 32)
        s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k)
        want = np.exp(s - s.max(-1, keepdims=True))
        want /= want.sum(-1, keepdims=True)
        np.testing.assert_allclose(f(cv.Tensor(q), cv.Tensor(k)).numpy(), want, rtol=1e-4, atol=1e-6)
    assert f.traces == 1
    cap = next(iter(f._symbolic.values()))[0]
    tiled = [ln.sk.kernel.opts for ln in cap.launches if {"vectorize", "upcast"} <= {o.op for o in ln.sk.kernel.opts}]
    assert tiled, [ln.sk.kernel.opts for ln in cap.launches]  # (k's columns padded to whole vectors first)


def test_vmap_jvp_and_grad_inside_a_symbolic_trace():
    f = cv.jit(cv.vmap(lambda r: (r * r).sum()), dynamic={0: {0: "n"}})
    g = cv.jit(lambda x: cv.vmap(lambda r: r.softmax(-1))(x), dynamic={0: {1: "n"}})
    h = cv.jit(lambda x: cv.jvp(lambda y: (y ** 2).sum(), (x,), (cv.ones_like(x),))[1], dynamic={0: {0: "n"}})
    for n in (3, 7):
        x = _f32(n, 4)
        np.testing.assert_allclose(f(cv.Tensor(x)).numpy(), (x.astype(np.float64) ** 2).sum(1), rtol=1e-5)
        e = np.exp(x.T - x.T.max(-1, keepdims=True))
        np.testing.assert_allclose(g(cv.Tensor(x.T)).numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5)
        # (a sum of a few signed values may cancel: compared with float32 rounding of its terms' size)
        np.testing.assert_allclose(h(cv.Tensor(x[:, 0])).item(), 2 * x[:, 0].astype(np.float64).sum(), rtol=1e-5,
                                   atol=1e-6 * np.abs(x[:, 0]).sum())
    assert (f.traces, g.traces, h.traces) == (1, 1, 1)


def test_threads_replay_one_symbolic_program_at_different_sizes():
    import threading

    f = cv.jit(lambda x: (x * 3).cumsum(0)[-1], dynamic={0: {0: "n"}})
    f(cv.ones((2, 3)))
    errors = []

    def work(n):
        try:
            for _ in range(20):
                out = f(cv.ones((n, 3))).tolist()
                assert out == [3.0 * n] * 3, (n, out)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in (3, 17, 64, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert f.traces <= 2  # (the index -1 of a symbolic axis: one guard at most)


@pytest.mark.parametrize("name", ["rows", "mean", "softmax", "matmul", "cumsum", "cat"])
def test_symbolic_sizes_on_the_cl_device(name):
    from corvid.runtime.device import get_device

    try:
        get_device("CL")
    except (ImportError, RuntimeError, OSError) as e:
        pytest.skip(f"CL not available: {e}")
    fn = {"rows": lambda x: (x * 2 + 1).exp().sum(axis=1), "mean": lambda x: x.mean(),
          "softmax": lambda x: x.softmax(-1), "matmul": lambda x: x @ x.T, "cumsum": lambda x: x.cumsum(0),
          "cat": lambda x: cv.cat([x, x[1:] * 2], axis=0)}[name]
    jf = cv.jit(fn, dynamic={0: {0: "n"}})
    for n in (5, 9, 3000, 6):
        x = _f32(n, 8)
        np.testing.assert_allclose(jf(cv.Tensor(x, device="CL")).numpy(), fn(cv.Tensor(x)).numpy(), rtol=1e-4, atol=1e-4)
    assert jf.traces <= 3  # (a guard or two on the size, where the heuristics compare it)
    assert any(ln.sk.kernel.dims_param is not None for caps in jf._symbolic.values() for c in caps for ln in c.launches)


def test_devices_without_symbolic_sizes_say_so():
    from corvid.runtime.device import get_device

    try:
        get_device("WEBGPU")
    except (ImportError, RuntimeError, OSError) as e:
        pytest.skip(f"WEBGPU not available: {e}")
    f = cv.jit(lambda x: x * 2, dynamic={0: {0: "n"}})
    with pytest.raises(JitError, match="CPU, CL and CUDA"):
        f(cv.ones(4, device="WEBGPU"))
    auto = cv.jit(lambda x: x * 2, dynamic=True)  # (automatic: a trace per size there)
    assert auto(cv.ones(4, device="WEBGPU")).tolist() == [2.0] * 4
    assert auto(cv.ones(5, device="WEBGPU")).tolist() == [2.0] * 5


def test_cuda_launches_compute_their_blocks_from_each_calls_sizes():
    """On the stand-in CUDA driver (tests/test_cuda_runtime.py: the real CUDADevice, kernels built
    for the CPU): a kernel over a symbolic size launches ceil(points / 256) blocks of the call."""
    import test_cuda_runtime as tcr

    saved = dict(tcr.sched._cache), dict(tcr.sched._plans)
    tcr.registry.register_backend(tcr.FAKE, f"{tcr.__name__}:FakeCUDA")
    try:
        dev = tcr.registry.get_device(tcr.FAKE)
        f = cv.jit(lambda x: (x * 2).sum(1), dynamic={0: {0: "n"}})
        for n in (3, 300, 1000, 5):
            dev.cu.calls.clear()
            x = _f32(n, 4)
            np.testing.assert_allclose(f(cv.Tensor(x, device=tcr.FAKE)).numpy(), (x * 2).sum(1), rtol=1e-5)
            blocks = [args[1] for args in dev.cu.named("cuLaunchKernel")]
            assert -(-n // 256) in blocks, (n, blocks)
        assert f.traces == 1
    finally:
        tcr.registry._BACKENDS.pop(tcr.FAKE, None)
        tcr.registry._devices.pop(tcr.FAKE, None)
        for spelling in [s for s, c in tcr.registry._canonical.items() if c == tcr.FAKE]:
            tcr.registry._canonical.pop(spelling)
        tcr.sched._cache.clear()
        tcr.sched._plans.clear()
        tcr.sched._cache.update(saved[0])
        tcr.sched._plans.update(saved[1])


def test_symbolic_cuda_sources_compile_for_sm_90():
    """The CUDA renderer's kernels over a symbolic size (the size read from the sizes param, the
    spare threads of the last block returning) compile with nvcc for sm_90."""
    import shutil
    import subprocess
    import tempfile

    from corvid.codegen.lower import lower_unmerged, merge_loops
    from corvid.codegen.passes import finalize
    from corvid.graph.node import Mark, Op, node
    from corvid.graph.symbolic import assuming_hints
    from corvid.render.cuda import CUDARenderer, cuda_launch
    from corvid.tensor import Tensor

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    n = Dim(0, "n", 2, 2**31 - 1, hint=8)
    sizes = node(Op.VAR, (), Mark("jit-dims"), cv.int64, (1,))
    x = Tensor._from_node(node(Op.VAR, (), Mark("jit", 0), cv.float32, (n, 64)), "CPU")
    w = Tensor(np.ones((64, 32), np.float32))
    with assuming_hints({0: 8}):
        cases = {"ew": ((x * 2).exp(), [x]), "rows": (x.sum(1), [x]), "cols": (x.sum(0), [x]), "mm": (x @ w, [x, w])}
    for name, (y, inputs) in cases.items():
        k, _ = lower_unmerged(f"k_{name}", y.node, [i.node for i in inputs] + [sizes])
        k = finalize(merge_loops(k), block=64)
        src = CUDARenderer().render(k)
        assert "cv_d0 = p" in src and k.dims_param is not None
        with tempfile.TemporaryDirectory() as d:
            with open(f"{d}/k.cu", "w") as fh:
                fh.write("namespace cvk {\n" + src + "}\n")  # (its own int64_t typedef, as NVRTC needs)
            done = subprocess.run([nvcc, "-cubin", "-arch=sm_90", "-w", f"{d}/k.cu", "-o", f"{d}/k.cubin"],
                                  capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (name, done.stderr[-2000:])
        assert name == "cols" or is_symbolic(cuda_launch(k).blocks)  # (blocks: a size expression, per launch)


def test_symbolic_sizes_on_every_device(device):
    """Each executing device (the GPU report runs this on CUDA): a training-like program over a
    symbolic batch where the device's renderer takes symbolic sizes, else a clear JitError."""
    from corvid.runtime.device import get_device

    w = _f32(16, 8)

    def f(x, w):
        h = (x @ w).relu()
        return h.mean(0), (h - h.mean(1, keepdims=True)).exp().sum(1), cv.cat([h, h[:1]], axis=0).sum(0)

    jf = cv.jit(f, dynamic={0: {0: "n"}})
    if not getattr(get_device(device).renderer, "symbolic_sizes", False):
        with pytest.raises(JitError, match="symbolic sizes"):
            jf(cv.Tensor(_f32(3, 16), device=device), cv.Tensor(w, device=device))
        return
    for n in (3, 40, 1100, 7):
        x = _f32(n, 16)
        h = np.maximum(x.astype(np.float64) @ w, 0)
        want = (h.mean(0), np.exp(h - h.mean(1, keepdims=True)).sum(1), np.concatenate([h, h[:1]]).sum(0))
        for got, exp in zip(jf(cv.Tensor(x, device=device), cv.Tensor(w, device=device)), want):
            np.testing.assert_allclose(got.numpy(), exp, rtol=1e-4, atol=1e-4)
    assert jf.traces <= 3


def test_an_error_of_the_function_itself_is_raised_as_it_is():
    from corvid.errors import ShapeError

    f = cv.jit(lambda x: x.reshape(7, -1), dynamic={0: {0: "n"}})  # (no n*3 is a multiple of 7 for every n)
    with pytest.raises((ShapeError, JitError)):
        f(cv.ones((4, 3)))
    g = cv.jit(lambda x: x + cv.ones(5), dynamic={0: {0: "n"}})
    with pytest.raises(ValueError, match="broadcast") as info:
        g(cv.ones(4))
    assert not isinstance(info.value, JitError)


def test_a_padded_symbolic_row_loop_splits_into_an_ungated_main_part_and_a_tail():
    f = cv.jit(lambda x, w: x @ w, dynamic={0: {0: "rows"}})
    w = _f32(64, 32)
    for n in (9, 16, 3, 61):  # (multiples of the tile and not: the tail runs 0 to 7 rows)
        x = _f32(n, 64)
        np.testing.assert_allclose(f(cv.Tensor(x), cv.Tensor(w)).numpy(), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
    src = next(iter(f._symbolic.values()))[0].launches[-1].sk.source
    body = src[src.index("void "):]
    # the main part's loads are plain (no gated load: cv_sel/clamp), the tail keeps its gates
    main, tail = body.split("for (long long i0pu = (", 1) if "for (long long i0pu = (" in body else (body, "")
    assert tail and "cv_clampi" not in main and "cv_clampi" in tail, body[:3000]


def test_bounds_of_a_tile_remainder():
    n = Dim(0, "n", 2, 2**31 - 1, hint=9)
    r = 8 * (n // 8) - n  # minus the rows past the last whole tile of 8
    assert (r.vmin, r.vmax) == (-7, 0)
    w = BVar("w", n // 8)  # a loop over the whole tiles: every row of it is below n
    assert all((w * 8 + k - n).lt(0) == 1 for k in range(8))
    assert (w * 8 + 8 - n).lt(0) != 1  # (the row past the tile: not provable)


def test_a_size_divided_by_or_compared_with_a_tensor_is_elementwise():
    f = cv.jit(lambda x: (x.shape[0] / x, x < x.shape[0], x.shape[0] - x), dynamic={0: {0: "n"}})
    for n in (3, 6):
        x = np.arange(1.0, n + 1, dtype=np.float32)
        a, b, c = f(cv.Tensor(x))
        np.testing.assert_allclose(a.numpy(), n / x, rtol=1e-6)
        assert b.tolist() == (x < n).tolist() and c.tolist() == (n - x).tolist()
    assert f.traces == 1
    with pytest.raises(SymbolicSizeError, match="n has no value"):
        int(Dim(0, "n", 2, 10))


def test_an_argument_of_symbolic_shape_updated_in_place_is_written_back_at_its_size():
    def f(x, acc):
        acc += x.sum(0)  # state of constant shape
        x += 1  # an argument of symbolic shape, updated in place
        return x * 2

    jf = cv.jit(f, dynamic={0: {0: "n"}})
    acc, total = cv.zeros(3), 0
    for n in (2, 5, 3):
        x = cv.ones((n, 3))
        y = jf(x, acc)
        total += n
        assert y.shape == x.shape == (n, 3) and x.tolist() == [[2.0] * 3] * n and y.tolist() == [[4.0] * 3] * n
        assert acc.tolist() == [float(total)] * 3
    assert jf.traces == 1


def test_sizes_returned_by_the_function_are_the_calls_values():
    f = cv.jit(lambda x: (x.sum(), x.shape, x.shape[0] * 2 + 1), dynamic={0: {0: "n"}})
    for n in (3, 8):
        total, shape, m = f(cv.ones((n, 2)))
        assert total.item() == 2.0 * n and shape == (n, 2) and m == 2 * n + 1 and type(shape[0]) is int
    assert f.traces == 1

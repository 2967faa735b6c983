"""The CPU's fused attention (corvid/nn/cpu_attention.py): values and gradients against float64
references, masks and grouped heads, symbolic sizes in jit, vmap, jvp, and no stored scores."""

import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corvid as cv
import corvid.nn.functional as F
from corvid.nn import cpu_attention


def reference(q, k, v, mask=None, causal=False, scale=None, softcap=None):
    """softmax(q k^T * scale (soft-capped) + mask) v in float64, grouped heads repeated, rows that
    see nothing 0."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        g = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, g, -3), np.repeat(v, g, -3)
    s = q @ np.swapaxes(k, -1, -2) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if softcap:
        s = softcap * np.tanh(s / softcap)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    top = s.max(-1, keepdims=True)
    top = np.where(np.isneginf(top), 0, top)
    e = np.exp(s - top)
    total = e.sum(-1, keepdims=True)
    return (e / np.where(total == 0, 1, total)) @ v


def arrays(b, h, hk, tq, tk, d, dv, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((b, h, tq, d)).astype(dtype), rng.standard_normal((b, hk, tk, d)).astype(dtype),
            rng.standard_normal((b, hk, tk, dv)).astype(dtype))


def kernel_names(*tensors):
    return [sk.name for t in tensors for sk in t.schedule()]


SHAPES = [  # (batch, heads, kv heads, Tq, Tk, head size, value size)
    (1, 1, 1, 1, 1, 1, 1), (2, 3, 3, 5, 7, 8, 8), (1, 4, 2, 63, 64, 16, 24), (2, 4, 1, 65, 129, 24, 8),
    (1, 8, 2, 1, 200, 64, 64), (1, 2, 2, 100, 100, 80, 72), (3, 6, 3, 130, 70, 32, 32),
    (2, 8, 2, 3, 150, 24, 40), (1, 4, 1, 4, 4, 8, 8),  # (few query rows per key/value head: a decode step)
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_values_match_float64(shape, causal):
    b, h, hk, tq, tk, d, dv = shape
    if causal and tq != tk:
        tk = tq
    q, k, v = arrays(b, h, hk, tq, tk, d, dv)
    out = F.scaled_dot_product_attention(cv.Tensor(q), cv.Tensor(k), cv.Tensor(v), is_causal=causal, enable_gqa=True)
    assert any("attention_cpu_fwd" in n for n in kernel_names(out))
    np.testing.assert_allclose(out.numpy(), reference(q, k, v, causal=causal), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("mask_shape", [(70, 90), (2, 1, 70, 90), (1, 4, 1, 90), (2, 4, 70, 90), (90,), (2, 1, 1, 1)])
def test_boolean_masks_broadcast(mask_shape):
    q, k, v = arrays(2, 4, 2, 70, 90, 16, 16, seed=1)
    rng = np.random.default_rng(2)
    mask = rng.random(mask_shape) < 0.6
    out = F.scaled_dot_product_attention(cv.Tensor(q), cv.Tensor(k), cv.Tensor(v), attn_mask=cv.Tensor(mask),
                                         enable_gqa=True)
    full = np.broadcast_to(mask, (2, 4, 70, 90))
    np.testing.assert_allclose(out.numpy(), reference(q, k, v, full), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_a_decode_step_with_a_cache_mask(kind):
    """One query per head against a cache: the few-rows path, its mask broadcast over the heads."""
    q, k, v = arrays(3, 8, 2, 1, 130, 64, 64, seed=16)
    keep = np.random.default_rng(17).random((3, 1, 1, 130)) < 0.5
    keep[1] = False  # (a sequence whose every slot is masked: zeros)
    mask = keep if kind == "bool" else np.where(keep, 0.0, -np.inf).astype(np.float32)
    tq, tk, tv = (cv.Tensor(x).astype(cv.bfloat16) for x in (q, k, v))
    out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=cv.Tensor(mask), enable_gqa=True)
    want = reference(*(t.astype(cv.float32).numpy() for t in (tq, tk, tv)), mask)
    np.testing.assert_allclose(out.astype(cv.float32).numpy(), want, rtol=1e-2, atol=1e-2)
    assert np.all(out.astype(cv.float32).numpy()[1] == 0)


def test_float_masks_and_rows_that_see_nothing():
    q, k, v = arrays(1, 2, 2, 40, 70, 8, 8, seed=3)
    add = np.random.default_rng(4).standard_normal((40, 70)).astype(np.float32)
    add[5] = -np.inf  # (row 5 sees no key)
    add[7, ::2] = -np.inf
    out = F.scaled_dot_product_attention(cv.Tensor(q), cv.Tensor(k), cv.Tensor(v), attn_mask=cv.Tensor(add))
    got = out.numpy()
    np.testing.assert_allclose(got, reference(q, k, v, add), rtol=2e-5, atol=2e-6)
    assert np.all(got[:, :, 5] == 0)
    keep = np.ones((40, 70), bool)
    keep[3] = False
    got = F.scaled_dot_product_attention(cv.Tensor(q), cv.Tensor(k), cv.Tensor(v), attn_mask=cv.Tensor(keep)).numpy()
    assert np.all(got[:, :, 3] == 0) and np.all(np.isfinite(got))


@pytest.mark.parametrize("shape", [(2, 4, 2, 70, 70, 16, 16), (1, 8, 2, 2, 90, 32, 32)])
def test_soft_capping_forward_and_gradients(shape):
    """Gemma 2's soft-capped scores, cap * tanh(s / cap), inside the kernels: values and
    gradients against float64 (the composite of ordinary ops on float64 operands)."""
    from corvid.nn.decoder import softcap

    b, h, hk, tq, tk, d, dv = shape
    q, k, v = arrays(*shape, seed=18)
    q = q * 4  # (scores large enough for the cap to matter)
    keep = np.random.default_rng(19).random((b, 1, tq, tk)) < 0.8
    cap = 5.0
    out = cpu_attention.attention(*(cv.Tensor(x) for x in (q, k, v)), cv.Tensor(keep), False, 0.25, cap)
    np.testing.assert_allclose(out.numpy(), reference(q, k, v, keep, scale=0.25, softcap=cap), rtol=2e-5, atol=2e-6)
    w = np.random.default_rng(20).standard_normal((b, h, tq, dv))

    def fused(q, k, v):
        out = cpu_attention.attention(q, k, v, cv.Tensor(keep), False, 0.25, cap)
        return (out * cv.Tensor(w.astype(np.float32))).sum()

    def composite(q, k, v):
        g = h // hk
        k, v = cv.repeat(k, g, axis=-3), cv.repeat(v, g, axis=-3)
        scores = softcap((q @ k.mT) * 0.25, cap)
        return (cv.nn.attention.masked_softmax(scores, cv.Tensor(keep)) @ v * cv.Tensor(w)).sum()

    got = cv.grad(fused, argnums=(0, 1, 2))(*(cv.Tensor(x) for x in (q, k, v)))
    want = cv.grad(composite, argnums=(0, 1, 2))(*(cv.Tensor(x.astype(np.float64)) for x in (q, k, v)))
    for g, r in zip(got, want):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-4, atol=2e-5)


def test_extreme_scores_nan_and_infinity():
    q, k, v = arrays(1, 1, 1, 6, 130, 4, 4, seed=5)
    q = q * 1000  # scores of order 1e4: the running maximum keeps them finite
    out = F.scaled_dot_product_attention(cv.Tensor(q), cv.Tensor(k), cv.Tensor(v)).numpy()
    np.testing.assert_allclose(out, reference(q, k, v), rtol=1e-4, atol=1e-5)
    qn = q.copy()
    qn[0, 0, 2, 1] = np.nan
    out = F.scaled_dot_product_attention(cv.Tensor(qn), cv.Tensor(k), cv.Tensor(v)).numpy()
    assert np.all(np.isnan(out[0, 0, 2])) and np.all(np.isfinite(np.delete(out[0, 0], 2, axis=0)))


def test_ranks_two_three_and_five():
    rng = np.random.default_rng(6)
    q2, k2, v2 = (rng.standard_normal((9, 8)).astype(np.float32) for _ in range(3))
    out = F.scaled_dot_product_attention(cv.Tensor(q2), cv.Tensor(k2), cv.Tensor(v2), is_causal=True)
    assert out.shape == (9, 8)
    np.testing.assert_allclose(out.numpy(), reference(q2, k2, v2, causal=True), rtol=2e-5, atol=2e-6)
    q5, k5, v5 = (rng.standard_normal((2, 3, 2, 11, 8)).astype(np.float32) for _ in range(3))
    out = F.scaled_dot_product_attention(cv.Tensor(q5), cv.Tensor(k5), cv.Tensor(v5))
    np.testing.assert_allclose(out.numpy(), reference(q5, k5, v5), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("dtype", [cv.bfloat16, cv.float16])
def test_narrow_inputs(dtype):
    q, k, v = arrays(1, 4, 2, 33, 77, 16, 16, seed=7)
    tq, tk, tv = (cv.Tensor(x).astype(dtype) for x in (q, k, v))
    out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=False, enable_gqa=True)
    assert out.dtype == dtype
    want = reference(*(t.astype(cv.float32).numpy() for t in (tq, tk, tv)))
    np.testing.assert_allclose(out.astype(cv.float32).numpy(), want, rtol=1e-2, atol=1e-2)


def loss_and_grads(q, k, v, w, **kw):
    def loss(q, k, v):
        return (F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw) * w).sum()
    return cv.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v)


@pytest.mark.parametrize("shape,causal,mask", [
    ((2, 4, 2, 70, 70, 16, 24), True, None), ((1, 3, 3, 65, 130, 8, 8), False, "bool"),
    ((2, 4, 1, 40, 90, 32, 16), False, "float"), ((1, 2, 2, 1, 64, 8, 8), False, None),
])
def test_gradients_match_float64(shape, causal, mask):
    """float64 operands take the composite path: the reference for the fused kernels' gradients."""
    b, h, hk, tq, tk, d, dv = shape
    q, k, v = arrays(*shape, seed=8)
    rng = np.random.default_rng(9)
    w = rng.standard_normal((b, h, tq, dv))
    kw32 = kw64 = {"is_causal": causal}
    if mask == "bool":
        m = rng.random((b, 1, tq, tk)) < 0.7
        m[0, 0, 4] = False  # (a row with no key: zero gradients)
        kw32 = kw64 = {"attn_mask": cv.Tensor(m)}
    elif mask == "float":
        m = rng.standard_normal((tq, tk))
        kw32, kw64 = {"attn_mask": cv.Tensor(m.astype(np.float32))}, {"attn_mask": cv.Tensor(m)}
    val, grads = loss_and_grads(*(cv.Tensor(x) for x in (q, k, v)), cv.Tensor(w.astype(np.float32)), **kw32)
    assert any("attention_cpu_dkdv" in n for n in kernel_names(*grads))
    ref_val, ref = loss_and_grads(*(cv.Tensor(x.astype(np.float64)) for x in (q, k, v)), cv.Tensor(w), **kw64)
    np.testing.assert_allclose(val.item(), ref_val.item(), rtol=1e-5, atol=1e-4)
    for g, r in zip(grads, ref):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-4, atol=2e-5)


def test_gradients_against_finite_differences():
    q, k, v = (x.astype(np.float64) for x in arrays(1, 2, 1, 5, 6, 3, 2, seed=10))

    def loss(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=True)
        return (out * out).sum()

    grads = cv.grad(lambda *a: loss(*(x.astype(cv.float32) for x in a)), argnums=(0, 1, 2))(
        *(cv.Tensor(x) for x in (q, k, v)))
    for i, (x, g) in enumerate(zip((q, k, v), grads)):
        num = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            args = [q, k, v]
            hi, lo = x.copy(), x.copy()
            hi[idx] += 1e-5
            lo[idx] -= 1e-5
            args[i] = hi
            f_hi = loss(*(cv.Tensor(a) for a in args)).item()
            args[i] = lo
            f_lo = loss(*(cv.Tensor(a) for a in args)).item()
            num[idx] = (f_hi - f_lo) / 2e-5
        np.testing.assert_allclose(g.numpy(), num, rtol=1e-3, atol=1e-4)


def test_no_score_sized_buffer_forward_or_backward():
    b, h, t, d = 1, 4, 512, 16
    q, k, v = (cv.Tensor(x) for x in arrays(b, h, h, t, t, d, d, seed=11))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    grads = cv.grad(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(),
                    argnums=(0, 1, 2))(q, k, v)
    scores = b * h * t * t
    for sk in [*out.schedule(), *(s for g in grads for s in g.schedule())]:
        assert sk.output.numel < scores // 4, (sk.name, sk.output.shape)


def test_symbolic_key_length_in_jit_replays():
    rng = np.random.default_rng(12)
    traces = []

    @cv.jit(dynamic={1: {2: "n"}, 2: {2: "n"}})
    def attend(q, k, v):
        traces.append(1)
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    q = rng.standard_normal((1, 4, 3, 8)).astype(np.float32)
    for n in (50, 70, 130):
        k, v = (rng.standard_normal((1, 2, n, 8)).astype(np.float32) for _ in range(2))
        got = attend(cv.Tensor(q), cv.Tensor(k), cv.Tensor(v)).numpy()
        np.testing.assert_allclose(got, reference(q, k, v), rtol=2e-5, atol=2e-6)
    assert len(traces) == 1


def test_vmap_matches_a_loop():
    rng = np.random.default_rng(13)
    q, k, v = (rng.standard_normal((3, 2, 9, 4)).astype(np.float32) for _ in range(3))
    out = cv.vmap(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))(
        cv.Tensor(q), cv.Tensor(k), cv.Tensor(v)).numpy()
    for i in range(3):
        np.testing.assert_allclose(out[i], reference(q[i], k[i], v[i], causal=True), rtol=2e-5, atol=2e-6)


def test_jvp_matches_the_composite():
    rng = np.random.default_rng(14)
    prim = [rng.standard_normal(s) for s in ((1, 2, 7, 4), (1, 1, 9, 4), (1, 1, 9, 4))]
    tang = [rng.standard_normal(p.shape) for p in prim]

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    _, t32 = cv.jvp(f, tuple(cv.Tensor(p.astype(np.float32)) for p in prim),
                    tuple(cv.Tensor(t.astype(np.float32)) for t in tang))
    _, t64 = cv.jvp(f, tuple(cv.Tensor(p) for p in prim), tuple(cv.Tensor(t) for t in tang))
    np.testing.assert_allclose(t32.numpy(), t64.numpy(), rtol=1e-4, atol=1e-5)


def test_threads_share_the_kernel():
    q, k, v = arrays(2, 4, 2, 100, 100, 16, 16, seed=15)
    want = reference(q, k, v, causal=True)
    errors = []

    def run():
        for _ in range(3):
            got = F.scaled_dot_product_attention(cv.Tensor(q), cv.Tensor(k), cv.Tensor(v), is_causal=True,
                                                 enable_gqa=True).numpy()
            errors.append(float(np.abs(got - want).max()))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 12 and max(errors) < 1e-5


def test_what_stays_composite():
    q, k, v = (cv.Tensor(x) for x in arrays(1, 2, 2, 8, 8, 4, 4))
    assert not cpu_attention.can_fuse(q, k, v, None, 0.5)  # dropout
    assert not cpu_attention.can_fuse(*(t.astype(cv.float64) for t in (q, k, v)), None, 0.0)
    assert not cpu_attention.can_fuse(q, k[:, :, :0], v[:, :, :0], None, 0.0)  # nothing to attend to
    assert not cpu_attention.can_fuse(q, k, v, cv.ones(3, 8, dtype=cv.bool), 0.0)  # does not broadcast
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0)
    assert any("attention_cpu" in n for n in kernel_names(out))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 2), st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3)]), st.integers(1, 80), st.integers(1, 80),
       st.integers(1, 20), st.booleans(), st.integers(0, 2 ** 31 - 1))
def test_fuzz_against_float64(b, heads, tq, tk, d, masked, seed):
    h, hk = heads
    q, k, v = arrays(b, h, hk, tq, tk, d, d, seed=seed)
    mask = np.random.default_rng(seed).random((b, 1, tq, tk)) < 0.8 if masked else None
    out = F.scaled_dot_product_attention(cv.Tensor(q), cv.Tensor(k), cv.Tensor(v),
                                         attn_mask=None if mask is None else cv.Tensor(mask), enable_gqa=True)
    np.testing.assert_allclose(out.numpy(), reference(q, k, v, mask), rtol=5e-5, atol=5e-6)


def test_the_composite_route_can_be_chosen_and_gives_the_same_values(monkeypatch):
    from corvid.nn import cpu_attention, flash

    rng = np.random.default_rng(0)
    q, k, v = (cv.Tensor(rng.standard_normal((2, 3, 40, 16)).astype(np.float32)) for _ in range(3))
    fused = F.scaled_dot_product_attention(q, k, v, is_causal=True).numpy()
    assert cpu_attention.can_fuse(q, k, v, None, 0.0)
    monkeypatch.setenv("CORVID_ATTENTION", "composite")
    assert not cpu_attention.can_fuse(q, k, v, None, 0.0) and flash.route() == "composite"
    np.testing.assert_allclose(F.scaled_dot_product_attention(q, k, v, is_causal=True).numpy(), fused,
                               rtol=1e-5, atol=1e-6)
    monkeypatch.setenv("CORVID_ATTENTION", "flash")
    with pytest.raises(ValueError, match="CORVID_ATTENTION"):
        F.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("kind", ["fwd", "dq", "dkdv"])
@pytest.mark.parametrize("d, dv, causal", [(64, 64, True), (64, 80, False), (32, 96, True)])
def test_wide_block_products_give_the_same_bits(kind, d, dv, causal):
    """The kernels built with 16-float block products (AVX-512 machines: ``_wide``) and with the
    8-float ones compute every product in the same order: the same bits, on every machine (both
    are built and run here, whatever this CPU's vectors), widths a multiple of 32 or not."""
    from corvid.runtime.device import get_device

    b, h, t = 2, 3, 100
    rng = np.random.default_rng(7)
    ins = [rng.standard_normal(s).astype(np.float32) for s in ((b, h, t, d), (b, h, t, d), (b, h, t, dv))]
    if kind != "fwd":  # the output's gradient, the log-sum-exp and delta
        ins += [rng.standard_normal((b, h, t, dv)).astype(np.float32),
                rng.standard_normal((b, h, t)).astype(np.float32) + 5, rng.standard_normal((b, h, t)).astype(np.float32)]
    alloc = get_device("CPU").allocator
    params = {"kind": kind, "causal": causal, "scale": 0.125, "softcap": 0.0, "mask": "none", "dtype": "float32"}
    outs = []
    for wide in (False, True):
        prog = cpu_attention._Program("CPU", params, [a.shape for a in ins])
        prog.fn = cpu_attention._function(kind, "float32", "none", wide)
        handles = [alloc.alloc(4 * b * h * t * (2 * max(d, dv) + 1))]
        alloc.copyin(handles[0], np.zeros(b * h * t * (2 * max(d, dv) + 1), np.float32).view(np.uint8))
        for a in ins:
            handles.append(alloc.alloc(a.nbytes))
            alloc.copyin(handles[-1], a.view(np.uint8).reshape(-1))
        prog(handles)
        outs.append(alloc.copyout(handles[0], 4 * b * h * t * (2 * max(d, dv) + 1)).view(np.float32))
    assert np.isfinite(outs[0]).all() and np.abs(outs[0]).max() > 0
    np.testing.assert_array_equal(outs[1].view(np.uint32), outs[0].view(np.uint32))

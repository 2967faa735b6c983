"""Fused attention (corvid/nn/flash.py, the template in corvid/render/gpu.py: _render_attention).

On the GPU-style devices that start here (CL on PoCL in CI; CUDA on a GPU), scaled dot-product
attention runs as one kernel forward and two backward; its values and gradients must be the
composite's on the CPU (within float32 rounding) for causal and boolean masks (broadcast, fully
masked rows), unequal lengths and head sizes, grouped heads, narrow dtypes, jit and vmap. The
CUDA sources are compiled for sm_90 in tests/test_cuda.py."""

import numpy as np
import pytest

import corvid as cv
from corvid.nn import flash

F = cv.nn.functional


@pytest.fixture(params=["CL", "CUDA"])
def gpu(request):
    try:
        cv.Tensor([1.0], device=request.param).numpy()
    except Exception as e:  # (no driver, no package: the reason)
        pytest.skip(f"{request.param} not available: {str(e).splitlines()[0][:160]}")
    return request.param


def arrays(b=2, h=3, tq=70, tk=90, d=16, dv=8, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((b, h, tq, d)).astype(np.float32), rng.standard_normal((b, h, tk, d)).astype(np.float32),
            rng.standard_normal((b, h, tk, dv)).astype(np.float32))


def kernels(t):
    return [sk.name for sk in t.schedule()]


def compare(gpu, q, k, v, mask=None, rtol=2e-5, **kw):
    """Forward and gradients of a weighted sum of the output, on ``gpu`` (fused) and on the CPU."""
    w = np.random.default_rng(9).standard_normal(q.shape[:-1] + (v.shape[-1],)).astype(np.float32)

    def loss(device):
        def f(q, k, v):
            m = None if mask is None else cv.Tensor(mask, device=device)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw)
            return (out.astype(cv.float32) * cv.Tensor(w, device=device)).sum(), out
        return f

    ins = [cv.Tensor(a, device=gpu) for a in (q, k, v)]
    (got, out), g_got = cv.value_and_grad(loss(gpu), argnums=(0, 1, 2), has_aux=True)(*ins)
    (want, ref), g_want = cv.value_and_grad(loss("CPU"), argnums=(0, 1, 2), has_aux=True)(*(cv.Tensor(a) for a in (q, k, v)))
    assert any("attention_fwd" in n for n in kernels(F.scaled_dot_product_attention(*ins, **kw) if mask is None
                                                     else out))
    scale = max(1.0, float(np.abs(ref.numpy()).max()))
    np.testing.assert_allclose(out.astype(cv.float32).numpy(), ref.astype(cv.float32).numpy(), rtol=rtol, atol=rtol * scale)
    for a, b in zip(g_got, g_want):
        s = max(1.0, float(np.abs(b.numpy()).max()))
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=rtol * 5, atol=rtol * 5 * s)
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_values_and_gradients_match_the_composite(gpu, causal):
    compare(gpu, *arrays(), is_causal=causal)
    compare(gpu, *arrays(tq=90, tk=90, d=32, dv=32, seed=1), is_causal=causal, scale=0.3)


def test_boolean_masks_broadcast_and_rows_that_see_nothing_give_zeros(gpu):
    q, k, v = arrays(seed=2)
    pad = np.random.default_rng(3).random((2, 1, 1, 90)) > 0.3  # (a padding mask: per batch, every query)
    pad[1] = False  # batch 1 sees no key at all: zeros, zero gradients
    out = compare(gpu, q, k, v, mask=pad)
    assert np.all(out.numpy()[1] == 0)
    compare(gpu, q, k, v, mask=np.random.default_rng(4).random((70, 90)) > 0.5)  # one (Tq, Tk) mask for all


def test_grouped_heads_narrow_dtypes_and_three_dimensional_inputs(gpu):
    q, k, v = arrays(h=4, seed=5)
    compare(gpu, q, k[:, :2], v[:, :2], enable_gqa=True)
    bq, bk, bv = (cv.Tensor(a, device=gpu).astype(cv.bfloat16) for a in (q, k, v))
    out = F.scaled_dot_product_attention(bq, bk, bv, is_causal=True)
    want = F.scaled_dot_product_attention(*(cv.Tensor(a).astype(cv.bfloat16).astype(cv.float32) for a in (q, k, v)),
                                          is_causal=True)
    assert out.dtype == cv.bfloat16
    np.testing.assert_allclose(out.astype(cv.float32).numpy(), want.numpy(), rtol=1e-2, atol=1e-2)
    compare(gpu, q[0], k[0], v[0])  # (heads as the only leading axis)


def test_what_the_fused_kernel_does_not_take_goes_the_composite_way(gpu):
    q, k, v = (cv.Tensor(a, device=gpu) for a in arrays(seed=6))
    float_mask = cv.Tensor(np.zeros((70, 90), np.float32), device=gpu)
    assert not any("attention" in n for n in kernels(F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask)))
    assert not any("attention" in n for n in kernels(F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)))
    qc, kc, vc = (cv.Tensor(a) for a in arrays(seed=6))
    cpu = kernels(F.scaled_dot_product_attention(qc, kc, vc))  # (the CPU: its own kernels, not the GPU template)
    assert any("attention_cpu" in n for n in cpu) and not any("attention_fwd" in n for n in cpu)


def test_the_scores_are_never_stored(gpu):
    """One kernel forward; no buffer of the (Tq, Tk) scores in the forward or the backward."""
    q, k, v = (cv.Tensor(a, device=gpu) for a in arrays(tq=128, tk=128, seed=7))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    scores = 2 * 3 * 128 * 128
    assert len([n for n in kernels(out) if "attention" in n]) == 1
    assert all(sk.output.numel < scores for sk in out.schedule())  # (the output, lse and their unpacking)
    grads = cv.grad(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(), argnums=(0, 1, 2))(q, k, v)
    for g in grads:
        assert all(sk.output.numel < scores for sk in g.schedule())


def test_multihead_attention_without_weights_uses_it(gpu):
    cv.manual_seed(0)
    with cv.default_device(gpu):
        mha = cv.nn.MultiheadAttention(32, 4, batch_first=True)
    x = cv.Tensor(np.random.default_rng(8).standard_normal((2, 20, 32)).astype(np.float32), device=gpu)
    pad = cv.Tensor(np.arange(20)[None, :] >= np.array([[15], [20]]), device=gpu)  # (True: masked out, as torch)
    fused, none = mha(x, x, x, key_padding_mask=pad, need_weights=False)
    plain, weights = mha(x, x, x, key_padding_mask=pad, need_weights=True)
    assert none is None and weights is not None and any("attention_fwd" in n for n in kernels(fused))
    np.testing.assert_allclose(fused.numpy(), plain.numpy(), rtol=1e-5, atol=1e-5)


def test_jit_traces_once_and_vmap_batches_it(gpu):
    q, k, v = (cv.Tensor(a, device=gpu) for a in arrays(b=3, h=2, tq=20, tk=20, seed=10))
    step = cv.jit(lambda q, k, v: cv.grad(lambda q: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum())(q))
    first = step(q, k, v).numpy()
    np.testing.assert_array_equal(step(q, k, v).numpy(), first)
    assert step.traces == 1
    batched = cv.vmap(lambda q: F.scaled_dot_product_attention(q, k[0], v[0]))(q)
    want = np.stack([F.scaled_dot_product_attention(q[i], k[0], v[0]).numpy() for i in range(3)])
    np.testing.assert_allclose(batched.numpy(), want, rtol=1e-5, atol=1e-6)


def test_the_host_version_computes_the_same():
    """The numpy function a device without the template runs (flash._host) against the composite."""
    q, k, v = arrays(seed=11)
    keep = np.random.default_rng(12).random((2, 1, 70, 90)) > 0.4
    keep[0, 0, 3] = False
    mask = np.where(keep, 0.0, -np.inf).astype(np.float32)
    out, lse = flash._host(q, k, v, mask, kind="fwd", causal=False, scale=0.25, has_mask=True)
    want = F.scaled_dot_product_attention(*(cv.Tensor(a) for a in (q, k, v)), attn_mask=cv.Tensor(keep), scale=0.25)
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-5, atol=1e-6)
    assert np.isneginf(lse[0, :, 3]).all() and np.all(out[0, :, 3] == 0)
    g = np.ones_like(out)
    delta = (g * out).sum(-1)
    dq = flash._host(q, k, v, mask, g, lse, delta, kind="dq", causal=False, scale=0.25, has_mask=True)
    ref = cv.grad(lambda q: F.scaled_dot_product_attention(q, cv.Tensor(k), cv.Tensor(v), attn_mask=cv.Tensor(keep),
                                                           scale=0.25).sum())(cv.Tensor(q))
    np.testing.assert_allclose(dq, ref.numpy(), rtol=1e-4, atol=1e-5)


def _reference(q, k, v, m, causal, scale, do):
    """float64 attention (tests/test_attention_tc.py's) and its gradients for the output
    cotangent ``do``, at the float32 scale the kernels multiply by."""
    from tests.test_attention_tc import _reference as attention

    out, lse, p = attention(q, k, v, m, causal, np.float64(np.float32(scale)), probabilities=True)
    delta = (do.astype(np.float64) * out).sum(-1)
    dv = np.matmul(np.swapaxes(p, -1, -2), do.astype(np.float64))
    ds = p * (np.matmul(do.astype(np.float64), np.swapaxes(v, -1, -2).astype(np.float64)) - delta[..., None])
    dq = np.matmul(ds, k.astype(np.float64)) * np.float32(scale)
    dk = np.matmul(np.swapaxes(ds, -1, -2), q.astype(np.float64)) * np.float32(scale)
    return out, lse, delta, dq, dk, dv


@pytest.mark.parametrize("case", [
    dict(b=2, h=3, tq=70, tk=90, d=16, dv=8),                 # rows and keys that no group or tile divides
    dict(b=1, h=2, tq=64, tk=64, d=64, dv=64, causal=True),   # (the first rows of a group see fewer keys than 4)
    dict(b=1, h=1, tq=33, tk=129, d=32, dv=96, mask=True),   # rows that see no key, a mask per row
    dict(b=1, h=2, tq=16, tk=16, d=8, dv=256),                # (rows too wide to merge in local memory: a work item a row)
])
def test_the_cuda_kernels_in_the_cuda_emulation(case, tmp_path):
    """The float32 forward, dq and dk/dv as the CUDA renderer writes them (four work items per
    row, each over every fourth key or query, merged through shared memory), run in
    tests/cuda_emulator.py against float64 attention and its gradients."""
    from corvid.render.cuda import CUDARenderer
    from tests import cuda_emulator as E

    if E.compiler() is None:
        pytest.skip("no C++ compiler")
    causal, has_mask = case.pop("causal", False), case.pop("mask", False)
    q, k, v = arrays(seed=11, **case)
    rng = np.random.default_rng(12)
    m = None
    if has_mask:
        m = np.where(rng.random((q.shape[0], q.shape[1], q.shape[2], k.shape[2])) < 0.3, -np.inf, 0.0).astype(np.float32)
        m[..., 1, :] = -np.inf
    do = rng.standard_normal(q.shape[:-1] + (v.shape[-1],)).astype(np.float32)
    scale = q.shape[-1] ** -0.5
    out, lse, delta, dq, dk, dv = _reference(q, k, v, m, causal, scale, do)
    ins = [q, k, v] + ([m] if has_mask else [])
    back = [do, lse.astype(np.float32), delta.astype(np.float32)]
    r = CUDARenderer()
    kernels, runs = [], []
    for kind, inputs, size in (("fwd", ins, out.size + lse.size), ("dq", ins + back, dq.size),
                               ("dkdv", ins + back, dk.size + dv.size)):
        params = {"kind": kind, "causal": causal, "has_mask": has_mask, "scale": scale}
        src, groups, threads, _ = r.render_attention(f"attn_{kind}", params, [a.shape for a in inputs])
        kernels.append((src, ["float*"] + ["const float*"] * len(inputs)))
        runs.append((inputs, size, groups, threads))
    try:
        lib = E.build_many(kernels, str(tmp_path))
    except RuntimeError as e:
        if "barrier" not in str(e):  # (a compiler without C++20's <barrier>: skipped; any other error fails)
            raise
        pytest.skip(f"the CUDA emulation does not build here: {str(e)[:300]}")
    got = []
    for i, (inputs, size, groups, threads) in enumerate(runs):
        buf = np.full(size, np.nan, np.float32)
        E.launch_many(lib, i, [buf] + inputs, groups, (threads, 1, 1))
        got.append(buf)
    np.testing.assert_allclose(got[0][:out.size].reshape(out.shape), out, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[0][out.size:].reshape(lse.shape), lse, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1].reshape(dq.shape), dq, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[2][:dk.size].reshape(dk.shape), dk, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[2][dk.size:].reshape(dv.shape), dv, rtol=1e-4, atol=1e-4)

"""The tensor-core attention kernels (corvid/render/cuda_attention.py) without a GPU.

* **Their values**: the CUDA source corvid renders, compiled by the host's C++ compiler with an
  emulation of the built-ins it uses (tests/cuda_emulator.py: threads, barriers, warp shuffles,
  and ``mma.sync.m16n8k16`` with the PTX ISA's fragment layouts), against numpy's float64
  attention and its gradients for the same bfloat16 values: causal, padding and full masks, rows
  that see no key, lengths and head sizes that no tile divides. A kernel with one fragment
  register misplaced gives wrong values here (checked), as it would on a GPU.
* **Their CUDA spelling** is compiled for sm_90 in tests/test_cuda.py.
* **Their place in scaled_dot_product_attention** (corvid/nn/flash.py): on a GPU-style device that
  says it has tensor cores, bfloat16 attention runs the ``attention_*_tc`` ops (here PoCL, which
  has no such kernels, computes them with the ops' numpy function); values and gradients are the
  CPU's.
"""

import numpy as np
import pytest

import corvid as cv
from corvid.nn import flash
from corvid.render import cuda_attention as CA
from corvid.render.gpu import attention_shapes

from tests import cuda_emulator as E

ml_dtypes = pytest.importorskip("ml_dtypes")


def _emulated(src, has_mask):
    if E.compiler() is None:
        pytest.skip("no C++ compiler")
    try:
        return E.build(src, "attn", ["float*"] + ["const unsigned short*"] * 3 + (["const float*"] if has_mask else []))
    except Exception as e:  # (a compiler without C++20's <barrier>)
        pytest.skip(f"the CUDA emulation does not build here: {str(e)[:300]}")


def _reference(q, k, v, mask, causal, scale, probabilities=False):
    """float64 attention of the bfloat16 (or float32) values (-inf scores skipped; a row with
    none: zeros): the output and log-sum-exp, and the probabilities if asked."""
    s = np.matmul(q.astype(np.float64), np.swapaxes(k.astype(np.float64), -1, -2)) * scale
    if mask is not None:
        s = s + mask
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    total = e.sum(-1, keepdims=True)
    p = e / np.where(total == 0, 1, total)
    out = np.matmul(p, v.astype(np.float64))
    with np.errstate(divide="ignore"):
        lse = np.where(total[..., 0] == 0, -np.inf, m[..., 0] + np.log(total[..., 0]))
    return (out, lse, p) if probabilities else (out, lse)


def _run(lead=(2, 3), tq=80, tk=80, d=64, dv=64, causal=False, mask=None, seed=0, edit=None):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(lead + (t, n)).astype(ml_dtypes.bfloat16) for t, n in ((tq, d), (tk, d), (tk, dv)))
    arrays, shapes = [q, k, v], [q.shape, k.shape, v.shape]
    m = None
    if mask is not None:
        m = np.where(rng.random(mask) < 0.3, -np.inf, 0.0).astype(np.float32)
        if mask[-2] > 1:  # (a row that sees no key)
            m[..., 1, :] = -np.inf
        arrays.append(m)
        shapes.append(m.shape)
    scale = d ** -0.5
    params = {"kind": "fwd_tc", "causal": causal, "scale": scale, "has_mask": m is not None}
    src, blocks, threads, flops = CA.render("attn", params, shapes, attention_shapes("fwd", shapes, m is not None))
    if edit is not None:
        src = edit(src)
    lib = _emulated(src, m is not None)
    bh = int(np.prod(lead))
    out = np.full(bh * tq * dv + bh * tq, np.nan, np.float32)
    E.launch(lib, [out] + arrays, blocks, threads)
    want, want_lse = _reference(q, k, v, m, causal, scale)
    return out[:bh * tq * dv].reshape(lead + (tq, dv)), out[bh * tq * dv:].reshape(lead + (tq,)), want, want_lse


@pytest.mark.parametrize("case", [
    dict(),
    dict(causal=True),
    dict(tq=70, tk=130, d=32, dv=48, mask=(2, 1, 1, 130)),  # a padding mask, tiles that divide nothing
    dict(tq=64, tk=100, d=16, dv=16, mask=(2, 3, 64, 100)),  # a mask of its own per row and head
    dict(lead=(1, 2), tq=64, tk=64, d=128, dv=128, causal=True),
    dict(lead=(3,), tq=17, tk=200, d=80, dv=32, mask=(3, 17, 200)),
    # tiles wholly inside (no per-score tests: the kernel's ``edge`` is false), causal and not
    dict(lead=(1, 2), tq=192, tk=192, causal=True),
    dict(lead=(2,), tq=128, tk=192),
])
def test_the_emulated_kernel_matches_float64_attention(case):
    got, lse, want, want_lse = _run(**case)
    # (the probabilities are rounded to bfloat16 before they meet the values: 2^-8 relative)
    np.testing.assert_allclose(got, want, rtol=0, atol=8e-3 * max(1.0, np.abs(want).max()))
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[finite], want_lse[finite], rtol=1e-5, atol=1e-5)
    assert np.all(np.isneginf(lse[~finite])) and np.all(got[~finite] == 0)


def _reference_grads(q, k, v, mask, causal, scale, do):
    """float64 gradients of ``sum(attention(q, k, v) * do)``."""
    q, k, v, do = (a.astype(np.float64) for a in (q, k, v, do))
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if mask is not None:
        s = s + mask
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    total = e.sum(-1, keepdims=True)
    p = e / np.where(total == 0, 1, total)
    dv = np.matmul(np.swapaxes(p, -1, -2), do)
    dp = np.matmul(do, np.swapaxes(v, -1, -2))
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    return np.matmul(ds, k) * scale, np.matmul(np.swapaxes(ds, -1, -2), q) * scale, dv


def _kernel(kind, shapes, causal, scale, has_mask):
    params = {"kind": kind, "causal": causal, "scale": scale, "has_mask": has_mask}
    src, blocks, threads, _ = CA.render(kind, params, shapes, attention_shapes("fwd", shapes[:4], has_mask))
    types = ["float*" if kind == "fwd_tc" else "unsigned short*"] + ["const unsigned short*"] * 3 + \
        (["const float*"] if has_mask else [])
    if kind != "fwd_tc":
        types += ["const unsigned short*", "const float*", "const float*"]
    if E.compiler() is None:
        pytest.skip("no C++ compiler")
    try:
        return E.build(src, kind, types), blocks, threads
    except Exception as e:
        pytest.skip(f"the CUDA emulation does not build here: {str(e)[:300]}")


@pytest.mark.parametrize("case", [
    dict(),
    dict(causal=True, tq=96, tk=96),
    dict(tq=70, tk=130, d=32, dv=48, mask=(2, 1, 1, 130)),
    dict(lead=(1, 2), tq=48, tk=72, d=128, dv=128, causal=True),
    dict(lead=(3,), tq=17, tk=100, d=80, dv=32, mask=(3, 17, 100)),
    dict(lead=(1, 2), tq=192, tk=192, causal=True),  # (tiles wholly inside: see the forward's cases)
    dict(lead=(2,), tq=128, tk=192),
])
def test_the_emulated_backward_matches_float64_gradients(case):
    lead, tq, tk = case.get("lead", (2, 3)), case.get("tq", 80), case.get("tk", 80)
    d, dv, causal, mask = case.get("d", 64), case.get("dv", 64), case.get("causal", False), case.get("mask")
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(lead + (t, n)).astype(ml_dtypes.bfloat16) for t, n in ((tq, d), (tk, d), (tk, dv)))
    do = rng.standard_normal(lead + (tq, dv)).astype(ml_dtypes.bfloat16)
    m = None if mask is None else np.where(rng.random(mask) < 0.3, -np.inf, 0.0).astype(np.float32)
    if m is not None and mask[-2] > 1:
        m[..., 1, :] = -np.inf  # (a row that sees no key: zero gradients)
    scale = d ** -0.5
    shapes = [q.shape, k.shape, v.shape] + ([m.shape] if m is not None else [])
    ins = [q, k, v] + ([m] if m is not None else [])
    bh = int(np.prod(lead))
    lib, blocks, threads = _kernel("fwd_tc", shapes, causal, scale, m is not None)
    fwd = np.zeros(bh * tq * dv + bh * tq, np.float32)
    E.launch(lib, [fwd] + ins, blocks, threads)
    out, lse = fwd[:bh * tq * dv].reshape(lead + (tq, dv)), fwd[bh * tq * dv:].reshape(lead + (tq,))
    delta = (do.astype(np.float32) * out).sum(-1).astype(np.float32)
    bshapes = shapes + [do.shape, lse.shape, delta.shape]
    lib, blocks, threads = _kernel("dq_tc", bshapes, causal, scale, m is not None)
    dq = np.full(q.shape, np.nan, ml_dtypes.bfloat16)  # (the gradients are written in bfloat16)
    E.launch(lib, [dq] + ins + [do, lse, delta], blocks, threads)
    lib, blocks, threads = _kernel("dkdv_tc", bshapes, causal, scale, m is not None)
    dkdv = np.full(k.size + v.size, np.nan, ml_dtypes.bfloat16)
    E.launch(lib, [dkdv] + ins + [do, lse, delta], blocks, threads)
    dk, dvv = dkdv[:k.size].reshape(k.shape), dkdv[k.size:].reshape(v.shape)
    for got, want in zip((dq, dk, dvv), _reference_grads(q, k, v, m, causal, scale, do)):
        # (probabilities and their gradients are rounded to bfloat16 before their products, and
        # the result as it is written)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=1.5e-2 * max(1.0, np.abs(want).max()))


def test_a_nan_gradient_is_written_as_a_nan():
    """The bfloat16 store keeps a nan a nan (the rounding's carry would turn some into inf): a
    query row holding a nan gets a nan gradient, the other rows finite ones."""
    rng = np.random.default_rng(3)
    lead, t, d = (1, 1), 32, 16
    q, k, v, do = (rng.standard_normal(lead + (t, d)).astype(ml_dtypes.bfloat16) for _ in range(4))
    q[0, 0, 5, 3] = np.nan
    shapes = [q.shape, k.shape, v.shape]
    lib, blocks, threads = _kernel("fwd_tc", shapes, False, d ** -0.5, False)
    fwd = np.zeros(t * d + t, np.float32)
    E.launch(lib, [fwd, q, k, v], blocks, threads)
    out, lse = fwd[:t * d].reshape(lead + (t, d)), fwd[t * d:].reshape(lead + (t,))
    delta = (do.astype(np.float32) * out).sum(-1).astype(np.float32)
    lib, blocks, threads = _kernel("dq_tc", shapes + [do.shape, lse.shape, delta.shape], False, d ** -0.5, False)
    dq = np.zeros(q.shape, ml_dtypes.bfloat16)
    E.launch(lib, [dq, q, k, v, do, lse, delta], blocks, threads)
    dq = dq.astype(np.float32)[0, 0]
    assert np.isnan(dq[5]).all() and not np.isinf(dq).any() and np.isfinite(np.delete(dq, 5, axis=0)).all()


def test_a_misplaced_fragment_is_caught():
    # the A fragment's second and third registers swapped (rows g+8 and columns 2c+8 mixed up)
    def swap(src):
        return src.replace("qa[kk][1] = r1", "qa[kk][9] = r1").replace("qa[kk][2] = r0", "qa[kk][1] = r0") \
                  .replace("qa[kk][9] = r1", "qa[kk][2] = r1")
    got, _, want, _ = _run(edit=swap)
    assert np.abs(got - want).max() > 0.1


def test_head_sizes_it_does_not_take_are_refused():
    assert CA.applies(64, 64) and CA.applies(16, 128) and not CA.applies(72, 64) and not CA.applies(256, 256)
    with pytest.raises(NotImplementedError, match="multiples of 16"):
        CA.render("a", {"kind": "fwd_tc", "causal": False, "has_mask": False, "scale": 1.0}, [(2, 8, 72)] * 3, {})



# --- variants: the same kernels with the work split otherwise ------------------------------------------

def _types(kind, has_mask=False):
    types = ["float*" if kind == "fwd_tc" else "unsigned short*"] + ["const unsigned short*"] * 3 + \
        (["const float*"] if has_mask else [])
    return types + ([] if kind == "fwd_tc" else ["const unsigned short*", "const float*", "const float*"])


def _covering(kind, d, dv):
    """Of the variants worth timing (CA.variants), the default and each dimension changed alone
    (8 warps, two row tiles, the tile halved, three stages, heaviest first), then all of them
    together: the generated code is one piece per dimension, so these cover every variant's
    pieces and their meeting (the emulation runs a block's threads as OS threads: all 18 cost
    the suite a minute on 2 cores)."""
    every = CA.variants(kind, d, dv)
    half = next(v.tile for v in every if v.tile)
    alone = [CA.DEFAULT, CA.Variant(warps=8), CA.Variant(m=2), CA.Variant(tile=half), CA.Variant(tile=half, stages=3),
             CA.Variant(lpt=True), CA.Variant(warps=8, tile=half, stages=3, lpt=True),
             CA.Variant(m=2, tile=half, stages=3, lpt=True)]
    return [v for v in alone if v in every]


def test_the_variants_worth_timing_are_distinct_and_taken():
    for kind in ("fwd_tc", "dq_tc", "dkdv_tc"):
        for d in (16, 64, 128):
            every = CA.variants(kind, d, d)
            assert every[0] == CA.DEFAULT and len(set(every)) == len(every) >= 12
            assert {v.warps for v in every} == {4, 8} and {v.stages for v in every} == {2, 3}
            assert {v.m for v in every} == ({1, 2} if kind == "fwd_tc" else {1}) and any(v.lpt for v in every)
            for v in every:
                CA._checked(v, kind, d, d)
            assert len(_covering(kind, d, d)) == (8 if kind == "fwd_tc" else 6)


def _every_variant(kind, shapes, arrays, out, causal, tmp_path):
    """Kernel ``kind`` of each variant of :func:`_covering`, built as one library and run on
    ``arrays``: {variant: its output}."""
    if E.compiler() is None:
        pytest.skip("no C++ compiler")
    params = {"kind": kind, "causal": causal, "scale": shapes[0][-1] ** -0.5, "has_mask": False}
    vs = _covering(kind, shapes[0][-1], shapes[2][-1])
    made = [CA.render(kind, params, shapes, {}, variant=v) for v in vs]
    try:
        lib = E.build_many([(src, _types(kind)) for src, *_ in made], str(tmp_path))
    except Exception as e:
        pytest.skip(f"the CUDA emulation does not build here: {str(e)[:300]}")
    got = {}
    for i, (v, (_, blocks, threads, _)) in enumerate(zip(vs, made)):
        res = np.full_like(out, np.nan)
        E.launch_many(lib, i, [res] + arrays, blocks, (threads, 1, 1))
        got[v] = res
    return got


@pytest.mark.parametrize("causal,d,t", [(True, 64, 200), (False, 64, 200), (True, 128, 96)])
def test_every_forward_variant_computes_the_attention(causal, d, t, tmp_path):
    """Every variant of the forward (4 or 8 warps, one or two row tiles a warp, the tile halved,
    heaviest blocks first) on 200 queries and keys (96 at head 128) (row blocks at the edges and inside): the
    same bits as the default where the key tile is the default's (each row is the same warp
    sums in the same order), float64's values within the bfloat16 roundings otherwise (the tile
    sets where the running maximum rescales)."""
    rng = np.random.default_rng(5)
    lead = (1, 2)
    q, k, v = (rng.standard_normal(lead + (t, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = np.zeros(2 * t * d + 2 * t, np.float32)
    got = _every_variant("fwd_tc", [q.shape] * 3, [q, k, v], out, causal, tmp_path)
    assert len(got) >= 8 and any(x.m == 2 for x in got) and any(x.warps == 8 for x in got)
    assert any(x.lpt for x in got) and any(x.tile for x in got)
    want, want_lse = _reference(q, k, v, None, causal, d ** -0.5)
    base = got[CA.DEFAULT]
    for variant, res in got.items():
        if not variant.tile:
            np.testing.assert_array_equal(res, base, err_msg=str(variant))
        o, lse = res[:2 * t * d].reshape(want.shape), res[2 * t * d:].reshape(want_lse.shape)
        np.testing.assert_allclose(o, want, rtol=0, atol=8e-3 * max(1.0, np.abs(want).max()), err_msg=str(variant))
        np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5, err_msg=str(variant))


@pytest.mark.parametrize("kind,d,t", [("dq_tc", 64, 200), ("dkdv_tc", 64, 200), ("dq_tc", 128, 96), ("dkdv_tc", 128, 96)])
def test_every_backward_variant_gives_the_same_gradients(kind, d, t, tmp_path):
    """Every variant of ``dq`` and of ``dk``/``dv`` (4 or 8 warps, the tile halved, heaviest
    blocks first), causal on 200 queries and keys (96 at head 128): the same bits as the default variant (each
    gradient row sums the same 16-key steps in the same order, whatever the tile), which the
    backward's test checks against float64."""
    rng = np.random.default_rng(6)
    lead = (1, 2)
    q, k, v, do = (rng.standard_normal(lead + (t, d)).astype(ml_dtypes.bfloat16) for _ in range(4))
    lse = rng.standard_normal(lead + (t,)).astype(np.float32) + 3
    delta = rng.standard_normal(lead + (t,)).astype(np.float32)
    size = q.size * (1 if kind == "dq_tc" else 2)
    got = _every_variant(kind, [q.shape] * 4 + [lse.shape, delta.shape], [q, k, v, do, lse, delta],
                         np.zeros(size, ml_dtypes.bfloat16), True, tmp_path)
    assert len(got) >= 6 and any(x.warps == 8 for x in got) and any(x.lpt for x in got)
    base = got[CA.DEFAULT]
    assert np.isfinite(base.astype(np.float32)).all() and np.abs(base.astype(np.float32)).max() > 0
    for variant, res in got.items():
        np.testing.assert_array_equal(res.view(np.uint16), base.view(np.uint16), err_msg=str(variant))


def test_variants_it_cannot_run_are_refused():
    params = {"kind": "dq_tc", "causal": False, "has_mask": False, "scale": 1.0}
    shapes = [(2, 64, 64)] * 4 + [(2, 64)] * 2
    for variant, why in ((CA.Variant(m=2), "only in the forward"), (CA.Variant(warps=16), "8 warps"),
                         (CA.Variant(tile=128), "shared memory"), (CA.Variant(tile=24), "16, 32 or 64"),
                         (CA.Variant(tile=32, stages=5), "2 to 4 stages")):
        with pytest.raises(ValueError, match=why):
            CA.render("a", params, shapes, {}, variant=variant)
    with pytest.raises(ValueError, match="shared memory"):  # (two stages of 64-row tiles of 128-wide heads)
        CA.render("a", {**params, "kind": "fwd_tc"}, [(2, 64, 128)] * 3, {}, variant=CA.Variant(tile=64))


# --- in scaled_dot_product_attention --------------------------------------------------------------------

@pytest.fixture
def cores(monkeypatch):
    """The CL device (PoCL here), saying it has tensor cores: bfloat16 attention takes the
    tensor-core op, which PoCL's renderer does not have, so the op's numpy function computes it."""
    try:
        cv.Tensor([1.0], device="CL").numpy()
    except Exception as e:
        pytest.skip(f"CL not available: {str(e).splitlines()[0][:160]}")
    from corvid.runtime.device import get_device

    monkeypatch.setattr(type(get_device("CL")), "attention_tensor_cores", True, raising=False)
    return "CL"


def _bf16(*shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16)


def test_bfloat16_attention_takes_the_tensor_core_ops_forward_and_backward(cores):
    q, k, v = _bf16(2, 3, 40, 32, seed=0), _bf16(2, 3, 56, 32, seed=1), _bf16(2, 3, 56, 16, seed=2)
    w = np.random.default_rng(3).standard_normal((2, 3, 40, 16)).astype(np.float32)

    def loss(device):
        def f(q, k, v):
            out = cv.nn.functional.scaled_dot_product_attention(q, k, v)
            return (out.astype(cv.float32) * cv.Tensor(w, device=device)).sum(), out
        return f

    ins = [cv.Tensor(a, device=cores) for a in (q, k, v)]
    (got, out), grads = cv.value_and_grad(loss(cores), argnums=(0, 1, 2), has_aux=True)(*ins)
    names = [sk.name for sk in out.schedule()] + [n for g in grads for n in (sk.name for sk in g.schedule())]
    assert any("attention_fwd_tc" in n for n in names) and any("attention_dq_tc" in n for n in names)
    assert any("attention_dkdv_tc" in n for n in names)
    (want, ref), wants = cv.value_and_grad(loss("CPU"), argnums=(0, 1, 2), has_aux=True)(*(cv.Tensor(a) for a in (q, k, v)))
    assert out.dtype is cv.bfloat16 and all(g.dtype is cv.bfloat16 for g in grads)
    np.testing.assert_allclose(out.astype(cv.float32).numpy(), ref.astype(cv.float32).numpy(), atol=2e-2)
    for g, wg in zip(grads, wants):
        a, b = g.astype(cv.float32).numpy(), wg.astype(cv.float32).numpy()
        np.testing.assert_allclose(a, b, atol=3e-2 * max(1.0, np.abs(b).max()))


def test_the_route_can_be_set_back_to_float32(cores, monkeypatch):
    q = cv.Tensor(_bf16(1, 2, 16, 32, seed=0), device=cores)
    assert flash.tensor_cores(q, q, q)
    assert not flash.tensor_cores(q.astype(cv.float32), q, q)  # (float32 stays float32)
    assert not flash.tensor_cores(q[..., :24], q[..., :24], q[..., :24])  # (a head size it does not take)
    monkeypatch.setenv("CORVID_ATTENTION", "float32")
    assert not flash.tensor_cores(q, q, q)
    out = cv.nn.functional.scaled_dot_product_attention(q, q, q)
    assert any("attention_fwd_" in sk.name and "tc" not in sk.name for sk in out.schedule())
    monkeypatch.setenv("CORVID_ATTENTION", "nonsense")
    with pytest.raises(ValueError, match="CORVID_ATTENTION"):
        flash.route()


def test_a_cuda_device_says_which_gpus_have_them():
    from corvid.runtime.cuda import tensor_core_arch

    for arch, has in (("sm_75", False), ("sm_80", True), ("sm_90", True), ("sm_100", True), ("", False)):
        assert tensor_core_arch(arch) is has, arch


def _probed(fails=False, edit=None):
    """The stand-in CUDA device (tests/test_cuda_runtime.py) with a compiler that hands over the
    source it is given (or fails), a driver that "loads" it by building it in the CUDA emulation,
    and launches that run the emulation with the launch's blocks and threads, on the stand-in's
    memory (host memory): the device's own probe and check run as on a GPU. ``edit`` changes the
    sources of the checked kernels (a kernel that computes something else)."""
    import ctypes

    from tests.test_cuda_runtime import FakeCUDA, FakeDriver, FakeFunction

    if E.compiler() is None:
        pytest.skip("no C++ compiler")

    class Probed(FakeCUDA):
        def __init__(self):
            super().__init__()
            self.sources = []

            def cubin(src, arch, name):
                self.sources.append(src)
                if fails:
                    raise RuntimeError("nvrtc: error in the probe")
                return (edit(src) if edit is not None and "check" in name else src).encode()

            self.compiler.cubin = cubin

        def call(self, name, *args):
            if name == "cuModuleLoadData":
                return args[0].decode()
            if name == "cuModuleUnload":
                return None
            if name == "cuModuleGetFunction":
                src, kernel = args[0], args[1].decode()
                fwd = "fwd_tc" in kernel
                types = ["float*" if fwd else "unsigned short*"] + ["const unsigned short*"] * 3
                types += [] if fwd else ["const unsigned short*", "const float*", "const float*"]
                return FakeFunction(E.build(src, kernel, types), len(types))
            if name == "cuLaunchKernel":
                f, blocks, threads, params = args[0], args[1], args[4], args[9]
                addresses = FakeDriver._args(f, params)
                f.fn.cv_launch((ctypes.c_void_p * len(addresses))(*addresses), blocks, threads)
                return None
            return super().call(name, *args)

    try:
        return Probed()
    except Exception as e:  # (a compiler without C++20's <barrier>)
        pytest.skip(f"the CUDA emulation does not build here: {str(e)[:300]}")


def test_the_tensor_core_kernels_are_built_and_checked_once_before_use():
    """The device builds a small kernel of the kind, then runs the forward, dq and dk/dv once on
    a causal problem of three row blocks and compares them with the host function (here in the
    CUDA emulation; on a GPU, on the GPU): they pass, and are tried once."""
    dev = _probed()
    assert dev.attention_tensor_cores and dev.attention_tc_error is None
    assert "mma.sync.aligned.m16n8k16" in dev.sources[0] and len(dev.sources) == 4  # (the probe, then 3 checked)
    assert dev.attention_tensor_cores and len(dev.sources) == 4  # (tried once)


def test_a_tensor_core_kernel_that_does_not_build_or_computes_wrong_values_turns_them_off_with_a_warning():
    broken = _probed(fails=True)
    with pytest.warns(UserWarning, match="float32 kernels: its tensor-core kernel did not build"):
        assert not broken.attention_tensor_cores
    # the A fragment's second and third registers swapped: the kernels build, and compute garbage
    swapped = _probed(edit=lambda src: src.replace("qa[kk][1] = r1", "qa[kk][9] = r1")
                      .replace("qa[kk][2] = r0", "qa[kk][1] = r0").replace("qa[kk][9] = r1", "qa[kk][2] = r1"))
    with pytest.warns(UserWarning, match="did not compute what they should on this GPU"):
        assert not swapped.attention_tensor_cores
    assert swapped.attention_tc_error.startswith("output off by")
    assert "error in the probe" in broken.attention_tc_error
    assert not broken.attention_tensor_cores and len(broken.sources) == 1
    old = _probed()
    old.arch = "sm_75"
    assert not old.attention_tensor_cores and "sm_75" in old.attention_tc_error and not old.sources


def test_real_cuda_tensor_core_attention_matches_the_cpu():
    """On a GPU (skipped without one): bfloat16 attention on tensor cores, forward and gradients,
    against the CPU's, causal and with a padding mask."""
    try:
        from corvid.runtime.device import get_device

        d = get_device("CUDA")
    except Exception as e:
        pytest.skip(f"CUDA not available: {str(e).splitlines()[0][:160]}")
    if not d.attention_tensor_cores:
        pytest.skip(f"{d.arch} has no bfloat16 tensor cores")
    q, k, v = _bf16(2, 4, 200, 64, seed=0), _bf16(2, 4, 200, 64, seed=1), _bf16(2, 4, 200, 64, seed=2)
    keep = np.random.default_rng(4).random((2, 1, 1, 200)) > 0.2
    w = np.random.default_rng(3).standard_normal((2, 4, 200, 64)).astype(np.float32)
    for causal, mask in ((True, None), (False, keep)):
        def loss(device, causal=causal, mask=mask):
            def f(q, k, v):
                m = None if mask is None else cv.Tensor(mask, device=device)
                out = cv.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal)
                return (out.astype(cv.float32) * cv.Tensor(w, device=device)).sum(), out
            return f

        ins = [cv.Tensor(a, device="CUDA") for a in (q, k, v)]
        (_, out), grads = cv.value_and_grad(loss("CUDA"), argnums=(0, 1, 2), has_aux=True)(*ins)
        assert any("attention_fwd_tc" in sk.name for sk in out.schedule())
        (_, ref), wants = cv.value_and_grad(loss("CPU"), argnums=(0, 1, 2), has_aux=True)(*(cv.Tensor(a) for a in (q, k, v)))
        np.testing.assert_allclose(out.astype(cv.float32).numpy(), ref.astype(cv.float32).numpy(), atol=2e-2)
        for g, wg in zip(grads, wants):
            a, b = g.astype(cv.float32).numpy(), wg.astype(cv.float32).numpy()
            np.testing.assert_allclose(a, b, atol=3e-2 * max(1.0, np.abs(b).max()))


def test_a_beam_width_times_the_variants_on_the_gpu_and_stores_the_fastest(monkeypatch, tmp_path):
    """On the device (here the emulated stand-in of _probed): without a beam width the kernels
    take the default variant; with one, the device times the variants on its own clock, drops
    one that computes other values, and keeps the fastest in the search cache, where the next
    process (a fresh device) reads it instead of timing again."""
    monkeypatch.setenv("CORVID_CACHE_DIR", str(tmp_path))
    dev = _probed()
    params = {"kind": "fwd_tc", "causal": True, "scale": 0.25, "has_mask": False}
    shapes = [(1, 2, 48, 16)] * 3
    assert dev.attention_variant("fwd_tc", params, shapes, {}) == CA.DEFAULT  # (no beam width)
    swap = ("qa[kk][1] = r1", "qa[kk][9] = r1"), ("qa[kk][2] = r0", "qa[kk][1] = r0"), ("qa[kk][9] = r1", "qa[kk][2] = r1")
    render = CA.render

    def broken_second(name, *args, **kw):  # (variant 1 computes something else: its fragments misplaced;
        src, *rest = render(name, *args, **kw)  # variant 3 writes nothing: the last one's values stay no answer)
        if name.endswith("_1"):
            for a, b in swap:
                src = src.replace(a, b)
        if name.endswith("_3"):
            src = src.replace("  const float ninf", "  if (lane >= 0) return;\n  const float ninf", 1)
        return (src, *rest)

    picks = [CA.DEFAULT, CA.Variant(lpt=True), CA.Variant(tile=32), CA.Variant(warps=8, tile=16)]
    monkeypatch.setattr(CA, "variants", lambda kind, d, dv: picks)
    monkeypatch.setattr(CA, "render", broken_second)
    timed = dev.time_attention_variants("fwd_tc", params, shapes, {})
    assert [v for v, _ in timed] == picks
    assert timed[1][1] == "other values than the first variant's" == timed[3][1]
    assert all(isinstance(t, float) and t > 0 for i, (_, t) in enumerate(timed) if i not in (1, 3))
    clock = {v: t for v, t in timed if isinstance(t, float)}
    from corvid.runtime.cuda import CUDADevice

    monkeypatch.setattr(CUDADevice, "time_attention_variants", lambda self, *a, **k: timed)
    with cv.beam(1):
        best = dev.attention_variant("fwd_tc", params, shapes, {})
    assert best == min(clock, key=clock.get) and best not in (picks[1], picks[3])

    asked = []

    def counted(self, kind, params, shapes, *a, **k):
        asked.append(shapes)
        return timed

    monkeypatch.setattr(CUDADevice, "time_attention_variants", counted)
    with cv.beam(1):
        assert _probed().attention_variant("fwd_tc", params, shapes, {}) == best  # (from search.sqlite)
        assert not asked
        other = [(1, 2, 64, 16)] * 3
        _probed().attention_variant("fwd_tc", params, other, {})  # (other shapes: a row of their own)
        assert asked == [other]

    def no_memory(self, *a, **k):
        raise MemoryError("out of memory")

    monkeypatch.setattr(CUDADevice, "time_attention_variants", no_memory)
    with cv.beam(1), pytest.warns(UserWarning, match="not timed .MemoryError: out of memory.; it runs in its default"):
        assert _probed().attention_variant("fwd_tc", params, [(1, 2, 80, 16)] * 3, {}) == CA.DEFAULT


def test_a_stored_variant_is_read_only_when_the_kernel_takes_it():
    row = '{"warps": 8, "m": %d, "tile": %d, "lpt": %s, "stages": %d}'
    assert CA.parse_variant(row % (2, 0, "false", 2), "dq_tc", 64, 64) is None  # (m: forward only)
    assert CA.parse_variant(row % (1, 32, "true", 3), "dq_tc", 64, 64) == CA.Variant(8, 1, 32, True, 3)
    assert CA.parse_variant(CA.Variant(4, 2, 32, True, 3).as_dict().__repr__().replace("'", '"').replace("True", "true"),
                            "fwd_tc", 64, 64) == CA.Variant(4, 2, 32, True, 3)
    for junk in (None, "", "[]", "{", '{"warps": 4}', '{"warps": 4, "m": 1, "tile": 0, "lpt": false}',
                 '{"warps": "4", "m": 1, "tile": 0, "lpt": false, "stages": 2}',
                 '{"warps": 4, "m": 1, "tile": 0, "lpt": 1, "stages": 2}', row % (1, 64, "false", 3),
                 '{"warps": 3, "m": 1, "tile": 0, "lpt": false, "stages": 2}'):
        assert CA.parse_variant(junk, "fwd_tc", 64, 64) is None, junk


def test_the_cuda_renderer_renders_the_variant_its_device_picks():
    from corvid.render.cuda import CUDARenderer

    r = CUDARenderer()
    params = {"kind": "dkdv_tc", "causal": True, "scale": 0.125, "has_mask": False}
    shapes = [(2, 256, 64)] * 4 + [(2, 256)] * 2
    _, blocks, threads, _ = r.render_attention("a", params, shapes)
    assert (blocks, threads) == (2 * 4, 128)  # (the default: 4 warps of 16 keys)
    asked = []
    r.attention_variant = lambda *args: asked.append(args) or CA.Variant(warps=8, lpt=True)
    src, blocks, threads, _ = r.render_attention("a", params, shapes)
    assert (blocks, threads) == (2 * 2, 256) and asked[0][:3] == ("dkdv_tc", params, shapes)
    assert "blockIdx.x % 2;" in src  # (heaviest first: row blocks major)


def test_the_gpu_report_times_each_kernels_variants(monkeypatch):
    """The GPU report's table of variants (benchmarks/gpu.py: _variant_table), on the emulated
    stand-in device: a line per kernel and variant with its time and its speed against the
    default's."""
    import corvid.runtime.device as registry
    from benchmarks import gpu

    dev = _probed()
    monkeypatch.setattr(registry, "get_device", lambda name: dev)
    monkeypatch.setattr(CA, "variants", lambda kind, d, dv: [CA.DEFAULT, CA.Variant(lpt=True)])
    table = gpu._variant_table(gpu.Ctx(device="STANDIN", quick=True, torch=None, tdev=None)).splitlines()
    assert len(table) == 9, table
    for i, (line, kind) in enumerate(zip(table, ["fwd_tc"] * 3 + ["dq_tc"] * 3 + ["dkdv_tc"] * 3)):
        assert line.startswith(kind) and "x the default" in line, line
        assert ("TFLOP/s" in line) == (i % 3 != 2) and ("fastest: warps=4" in line) == (i % 3 == 2), line
    assert "1.00x the default" in table[0] and "lpt" in table[1]

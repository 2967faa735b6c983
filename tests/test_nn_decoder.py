"""The decoder building blocks of corvid.nn (RotaryEmbedding, CausalSelfAttention, GatedMLP,
GemmaRMSNorm) on properties of their own; tests/test_llm_models.py compares whole models with
transformers."""

from __future__ import annotations

import numpy as np
import pytest

import corvid as cv
from corvid import nn
from corvid.nn import functional as F


def _np(t):
    return t.astype(cv.float32).numpy()


def test_rotary_scores_depend_only_on_the_distance():
    rope = nn.RotaryEmbedding(8, rotary_dim=6)
    q, k = cv.randn(1, 1, 1, 8), cv.randn(1, 1, 1, 8)

    def score(pq, pk):
        return float((rope(q, positions=pq) * rope(k, positions=pk)).sum().item())

    assert score(7, 3) == pytest.approx(score(4, 0), abs=1e-5)
    assert score(7, 3) != pytest.approx(score(7, 4), abs=1e-3)
    x = cv.randn(2, 3, 4, 8)  # positions: an int offset, a (T,) tensor or a (batch, T) tensor alike
    a = rope(x, positions=5)
    b = rope(x, positions=cv.arange(5, 9))
    c = rope(x, positions=cv.Tensor([[5, 6, 7, 8], [5, 6, 7, 8]]))
    np.testing.assert_allclose(_np(a), _np(b), atol=1e-6)
    np.testing.assert_allclose(_np(a), _np(c), atol=1e-6)
    np.testing.assert_array_equal(_np(a)[..., 6:], _np(x)[..., 6:])  # partial rotary: the rest passes through


def test_rotary_errors_name_the_problem():
    with pytest.raises(ValueError, match="rope_type 'dynamic'"):
        nn.RotaryEmbedding(8, scaling={"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(ValueError, match="needs 'low_freq_factor'"):
        nn.RotaryEmbedding(8, scaling={"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 16})
    with pytest.raises(ValueError, match="rotary_dim=3"):
        nn.RotaryEmbedding(8, rotary_dim=3)
    with pytest.raises(cv.ShapeError, match="even"):
        F.apply_rotary_emb(cv.ones(2, 4), cv.ones(2, 3), cv.ones(2, 3))


@pytest.mark.parametrize("options", [{}, {"sliding_window": 3}, {"softcap": 2.0},
                                     {"sliding_window": 2, "softcap": 1.0}])
def test_attention_of_the_last_queries_matches_the_full_attention(options):
    """attend() with fewer queries than keys (the queries are the latest positions, as with a
    cache of earlier keys) gives the last rows of the full causal attention."""
    attn = nn.CausalSelfAttention(16, num_heads=4, num_kv_heads=2, **options)
    q, k, v = cv.randn(2, 4, 7, 4), cv.randn(2, 2, 7, 4), cv.randn(2, 2, 7, 4)
    full = attn.attend(q, k, v)
    last = attn.attend(q[:, :, 5:], k, v)
    np.testing.assert_allclose(last.numpy(), full[:, :, 5:].numpy(), atol=1e-5)
    # the reference: grouped heads shared by consecutive query heads, the window and the cap by hand
    kk, vv = np.repeat(k.numpy(), 2, axis=1), np.repeat(v.numpy(), 2, axis=1)
    s = q.numpy() @ kk.swapaxes(-1, -2) * 0.5
    if "softcap" in options:
        s = options["softcap"] * np.tanh(s / options["softcap"])
    i, j = np.arange(7)[:, None], np.arange(7)[None]
    keep = (j <= i) & (i - j < options.get("sliding_window", 7))
    s = np.where(keep, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(full.numpy(), (w / w.sum(-1, keepdims=True)) @ vv, atol=1e-5)


def test_fused_projections_compute_the_same():
    attn = nn.CausalSelfAttention(16, num_heads=4, num_kv_heads=2, qkv_bias=True)
    fused = nn.CausalSelfAttention(16, num_heads=4, num_kv_heads=2, qkv_bias=True, fused_qkv=True)
    fused.qkv_proj.weight = nn.Parameter(cv.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
    fused.qkv_proj.bias = nn.Parameter(cv.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]))
    fused.o_proj = attn.o_proj
    x = cv.randn(2, 5, 16)
    rotary = nn.RotaryEmbedding(4).cos_sin(5)
    np.testing.assert_allclose(fused(x, rotary).numpy(), attn(x, rotary).numpy(), atol=1e-5)
    mlp = nn.GatedMLP(16, 24, "gelu_pytorch_tanh")
    fused_mlp = nn.GatedMLP(16, 24, "gelu_pytorch_tanh", fused=True)
    fused_mlp.gate_up_proj.weight = nn.Parameter(cv.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
    fused_mlp.down_proj = mlp.down_proj
    np.testing.assert_allclose(fused_mlp(x).numpy(), mlp(x).numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="activation 'tanh'"):
        nn.GatedMLP(4, 8, "tanh")
    with pytest.raises(ValueError, match="num_kv_heads=3 must divide num_heads=4"):
        nn.CausalSelfAttention(16, num_heads=4, num_kv_heads=3)


def test_gemma_rms_norm_rounds_once():
    norm = nn.GemmaRMSNorm(4, dtype=cv.bfloat16)
    norm.weight = nn.Parameter(cv.Tensor([0.5, -0.25, 1.0, 0.0]).astype(cv.bfloat16))
    x = cv.Tensor([[1.1, -2.3, 0.7, 3.9]]).astype(cv.bfloat16)
    y = norm(x)
    assert y.dtype == cv.bfloat16
    xf = _np(x).astype(np.float64)
    exact = xf / np.sqrt((xf ** 2).mean(-1, keepdims=True) + 1e-6) * (1 + _np(norm.weight))
    np.testing.assert_array_equal(_np(y), _np(cv.Tensor(exact.astype(np.float32)).astype(cv.bfloat16)))


class _Cache:
    """A key/value cache as CausalSelfAttention takes one: the earlier keys and values, to which
    ``update`` adds the new ones; every query sees every key."""

    def __init__(self, k, v):
        self.k, self.v = k, v

    def update(self, k, v, window=None):
        k, v = cv.cat([self.k, k], axis=2), cv.cat([self.v, v], axis=2)
        return k, v, cv.ones(k.shape[2], dtype=cv.bool)


def test_one_token_with_a_cache_feeds_o_proj_a_plain_row():
    """One token through grouped-query attention with a cache (a decode step): the output
    projection reads the heads' outputs as one stored row. Read through the view, their index
    stayed a split in three in the projection's inner loop, which did not vectorize. The values
    are the full causal attention's last row."""
    attn = nn.CausalSelfAttention(64, num_heads=8, num_kv_heads=2)
    x = cv.randn(1, 6, 64).realize()
    rope = nn.RotaryEmbedding(attn.head_dim)
    full = attn(x, rope.cos_sin(6))
    _, k, v = attn._project(x[:, :5])
    cos, sin = rope.cos_sin(5)
    cache = _Cache(F.apply_rotary_emb(k, cos, sin), v)
    cos6, sin6 = rope.cos_sin(6)
    out = attn(x[:, 5:], (cos6[5:], sin6[5:]), cache)
    proj = out.schedule()[-1]
    body = proj.source[proj.source.index("void "):]
    assert sorted(p.size for p in proj.kernel.params) == [64, 64, 64 * 64] and "/" not in body and "%" not in body
    np.testing.assert_allclose(out.numpy(), full[:, 5:].numpy(), atol=1e-5)

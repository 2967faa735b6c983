"""Attention (scaled_dot_product_attention, MultiheadAttention) and recurrent layers (RNN, LSTM,
GRU and their cells) against float64 numpy references written here, gradients against finite
differences; PyTorch (when installed) is an extra oracle, fed the same weights through state dicts."""

import numpy as np
import pytest
from _nn_helpers import fd_check, leaf, to_torch

import corvid as cv
import corvid.nn.functional as F
from corvid import nn

rng = np.random.default_rng(1)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def softmax_ref(s, keep=None):
    """Softmax over the last axis where ``keep``; rows with nothing kept give zeros."""
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isinf(m), 0, m))
    total = e.sum(-1, keepdims=True)
    return e / np.where(total == 0, 1, total)


def sdpa_ref(q, k, v, keep=None, add=None, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if add is not None:
        s = s + add
    return softmax_ref(s, keep) @ v


def mha_ref(m, q, k, v, key_padding_mask=None, attn_mask=None):
    """MultiheadAttention on batch-first float64 arrays: (output, head-averaged weights)."""
    sd = {name: t.numpy().astype(np.float64) for name, t in m.state_dict().items()}
    e, h = m.embed_dim, m.num_heads
    d = e // h
    if "in_proj_weight" in sd:
        wq, wk, wv = np.split(sd["in_proj_weight"], 3)
    else:
        wq, wk, wv = sd["q_proj_weight"], sd["k_proj_weight"], sd["v_proj_weight"]
    bq, bk, bv = np.split(sd["in_proj_bias"], 3)

    def heads(x):
        return x.reshape(x.shape[0], x.shape[1], h, d).transpose(0, 2, 1, 3)

    qh, kh, vh = heads(q @ wq.T + bq), heads(k @ wk.T + bk), heads(v @ wv.T + bv)
    scores = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(d)
    keep = np.ones(scores.shape, bool)
    if attn_mask is not None:
        if attn_mask.dtype == bool:
            keep &= ~attn_mask.reshape((-1, h) + attn_mask.shape[-2:]) if attn_mask.ndim == 3 else ~attn_mask
        else:
            scores = scores + (attn_mask.reshape((-1, h) + attn_mask.shape[-2:]) if attn_mask.ndim == 3 else attn_mask)
    if key_padding_mask is not None:
        keep &= ~key_padding_mask[:, None, None, :]
    w = softmax_ref(scores, keep)
    out = (w @ vh).transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], e)
    return out @ sd["out_proj.weight"].T + sd["out_proj.bias"], w.mean(1)


def rnn_ref(m, x, h0=None, c0=None):
    """A recurrent module on time-major float64 input ``(L, N, in)``: (output, h_n, c_n)."""
    sd = {name: t.numpy().astype(np.float64) for name, t in m.state_dict().items()}
    dirs = 2 if m.bidirectional else 1
    length, n, hidden = x.shape[0], x.shape[1], m.hidden_size
    h0 = np.zeros((m.num_layers * dirs, n, m.proj_size or hidden)) if h0 is None else h0
    c0 = np.zeros((m.num_layers * dirs, n, hidden)) if c0 is None else c0
    layer_in, hs, cs = x, [], []
    for layer in range(m.num_layers):
        outs = []
        for d in range(dirs):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            w_ih, w_hh = sd["weight_ih" + sfx], sd["weight_hh" + sfx]
            b_ih, b_hh = sd.get("bias_ih" + sfx, 0.0), sd.get("bias_hh" + sfx, 0.0)
            h, c = h0[layer * dirs + d], c0[layer * dirs + d]
            ys = [None] * length
            for t in (range(length) if d == 0 else reversed(range(length))):
                gx, gh = layer_in[t] @ w_ih.T + b_ih, h @ w_hh.T + b_hh
                if m.mode == "LSTM":
                    i, f, g, o = np.split(gx + gh, 4, axis=-1)
                    c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
                    h = sigmoid(o) * np.tanh(c)
                    if "weight_hr" + sfx in sd:  # proj_size: h = W_hr (o * tanh(c))
                        h = h @ sd["weight_hr" + sfx].T
                elif m.mode == "GRU":
                    (xr, xz, xn), (hr, hz, hn) = np.split(gx, 3, -1), np.split(gh, 3, -1)
                    r, z = sigmoid(xr + hr), sigmoid(xz + hz)
                    nn_ = np.tanh(xn + r * hn)
                    h = (1 - z) * nn_ + z * h
                else:
                    h = np.tanh(gx + gh) if m.mode == "RNN_TANH" else np.maximum(gx + gh, 0)
                ys[t] = h
            outs.append(np.stack(ys))
            hs.append(h)
            cs.append(c)
        layer_in = np.concatenate(outs, -1)
    return layer_in, np.stack(hs), np.stack(cs)


# --- scaled_dot_product_attention --------------------------------------------------------------------


def test_sdpa_matches_numpy_with_masks():
    q, k, v = rng.standard_normal((2, 2, 3, 4)), rng.standard_normal((2, 2, 5, 4)), rng.standard_normal((2, 2, 5, 3))
    tq, tk, tv = cv.Tensor(q), cv.Tensor(k), cv.Tensor(v)
    np.testing.assert_allclose(F.scaled_dot_product_attention(tq, tk, tv).numpy(), sdpa_ref(q, k, v), rtol=1e-10)
    causal = np.tril(np.ones((3, 5), bool))
    np.testing.assert_allclose(F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).numpy(),
                               sdpa_ref(q, k, v, keep=causal), rtol=1e-10)
    keep = rng.random((2, 1, 3, 5)) > 0.4
    keep[0, 0, 1] = False  # a query that sees no key: zeros, not NaN
    out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=cv.Tensor(keep)).numpy()
    np.testing.assert_allclose(out, sdpa_ref(q, k, v, keep=keep), rtol=1e-10)
    assert not out[0, :, 1].any()
    add = rng.standard_normal((3, 5))
    np.testing.assert_allclose(F.scaled_dot_product_attention(tq, tk, tv, attn_mask=cv.Tensor(add), scale=0.3).numpy(),
                               sdpa_ref(q, k, v, add=add, scale=0.3), rtol=1e-10)
    kv1 = rng.standard_normal((2, 1, 5, 4))
    np.testing.assert_allclose(
        F.scaled_dot_product_attention(tq, cv.Tensor(kv1), cv.Tensor(kv1), enable_gqa=True).numpy(),
        sdpa_ref(q, kv1, kv1), rtol=1e-10)


def test_sdpa_gradient_errors_and_dropout():
    q, k, v = leaf(rng.standard_normal((2, 3, 4))), leaf(rng.standard_normal((2, 5, 4))), leaf(
        rng.standard_normal((2, 5, 4)))
    keep = cv.Tensor(rng.random((3, 5)) > 0.3)
    w = cv.Tensor(rng.standard_normal((2, 3, 4)))
    fd_check(lambda: (F.scaled_dot_product_attention(q, k, v, attn_mask=keep) * w).sum(), [q, k, v])
    with pytest.raises(ValueError, match="not both"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=True)
    with pytest.raises(ValueError, match=r"query \(\.\.\., L, E\)"):
        F.scaled_dot_product_attention(q, k[..., :3], v)
    x = cv.ones(1, 4, 8)
    cv.manual_seed(5)
    a = F.scaled_dot_product_attention(x, x, x, dropout_p=0.5).numpy()
    cv.manual_seed(5)
    np.testing.assert_array_equal(F.scaled_dot_product_attention(x, x, x, dropout_p=0.5).numpy(), a)
    assert set(np.unique(a).round(6)) <= {0.0, 0.5, 1.0, 1.5, 2.0} and not np.allclose(a, 1.0)


# --- MultiheadAttention ------------------------------------------------------------------------------


def test_mha_self_attention_matches_numpy():
    mha = nn.MultiheadAttention(8, 2, batch_first=True, dtype=cv.float64)
    x = rng.standard_normal((2, 4, 8))
    kpm = np.zeros((2, 4), bool)
    kpm[1, 2:] = True
    am = np.triu(np.ones((4, 4), bool), 1)
    out, w = mha(cv.Tensor(x), cv.Tensor(x), cv.Tensor(x), key_padding_mask=cv.Tensor(kpm), attn_mask=cv.Tensor(am))
    ref_out, ref_w = mha_ref(mha, x, x, x, kpm, am)
    np.testing.assert_allclose(out.numpy(), ref_out, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.numpy(), ref_w, rtol=1e-10, atol=1e-12)
    t = cv.Tensor(x)
    causal, _ = mha(t, t, t, is_causal=True, need_weights=False)
    np.testing.assert_allclose(causal.numpy(), mha_ref(mha, x, x, x, attn_mask=am)[0], rtol=1e-10, atol=1e-12)
    per_head = mha(t, t, t, average_attn_weights=False)[1]
    assert per_head.shape == (2, 2, 4, 4) and mha(t, t, t, need_weights=False)[1] is None
    unbatched, uw = mha(t[0], t[0], t[0])
    np.testing.assert_allclose(unbatched.numpy(), mha_ref(mha, x[:1], x[:1], x[:1])[0][0], rtol=1e-10, atol=1e-12)
    assert uw.shape == (4, 4)


def test_mha_cross_attention_seq_first_kdim_vdim_float_mask():
    mha = nn.MultiheadAttention(6, 3, kdim=4, vdim=5, dtype=cv.float64)
    assert list(mha.state_dict()) == ["q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                                      "out_proj.weight", "out_proj.bias"]
    q, k, v = rng.standard_normal((3, 2, 6)), rng.standard_normal((5, 2, 4)), rng.standard_normal((5, 2, 5))
    am = rng.standard_normal((2 * 3, 3, 5))  # (N * heads, L, S), added to the scores
    out, w = mha(cv.Tensor(q), cv.Tensor(k), cv.Tensor(v), attn_mask=cv.Tensor(am))
    ref_out, ref_w = mha_ref(mha, q.transpose(1, 0, 2), k.transpose(1, 0, 2), v.transpose(1, 0, 2), attn_mask=am)
    np.testing.assert_allclose(out.numpy(), ref_out.transpose(1, 0, 2), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.numpy(), ref_w, rtol=1e-10, atol=1e-12)


def test_mha_gradient_dropout_and_errors():
    mha = nn.MultiheadAttention(4, 2, batch_first=True, dtype=cv.float64)
    x = leaf(rng.standard_normal((2, 3, 4)))
    w = cv.Tensor(rng.standard_normal((2, 3, 4)))
    fd_check(lambda: (mha(x, x, x)[0] * w).sum(), [x, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight])
    noisy = nn.MultiheadAttention(4, 2, dropout=0.5, batch_first=True)
    noisy.load_state_dict(mha.state_dict())
    xs = cv.Tensor(rng.standard_normal((2, 3, 4)).astype(np.float32))
    reference = nn.MultiheadAttention(4, 2, batch_first=True)
    reference.load_state_dict(mha.state_dict())
    np.testing.assert_array_equal(noisy.eval()(xs, xs, xs)[0].numpy(), reference(xs, xs, xs)[0].numpy())
    assert not np.allclose(noisy.train()(xs, xs, xs)[0].numpy(), reference(xs, xs, xs)[0].numpy())
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(5, 2)
    with pytest.raises(ValueError, match=r"MultiheadAttention\(embed_dim=4, num_heads=2, batch_first=True\): "
                                         r"expected an input of shape \(N, L, E\)"):
        mha(cv.ones(2, 3, 5, dtype=cv.float64), x, x)


def test_mha_matches_torch():
    torch = pytest.importorskip("torch")
    for kw in ({"batch_first": True, "add_bias_kv": True, "add_zero_attn": True}, {"kdim": 3, "vdim": 5}):
        ours = nn.MultiheadAttention(8, 2, **kw)
        theirs = to_torch(ours, torch.nn.MultiheadAttention(8, 2, **kw))
        bf = kw.get("batch_first", False)

        def shape(n, length, e, bf=bf):
            return (n, length, e) if bf else (length, n, e)

        q = rng.standard_normal(shape(2, 4, 8)).astype(np.float32)
        k = rng.standard_normal(shape(2, 5, kw.get("kdim", 8))).astype(np.float32)
        v = rng.standard_normal(shape(2, 5, kw.get("vdim", 8))).astype(np.float32)
        kpm, am = np.zeros((2, 5), bool), rng.random((4, 5)) > 0.8
        kpm[0, 3:] = True
        qc, qt = cv.Tensor(q, requires_grad=True), torch.tensor(q, requires_grad=True)
        oc, wc = ours(qc, cv.Tensor(k), cv.Tensor(v), key_padding_mask=cv.Tensor(kpm), attn_mask=cv.Tensor(am))
        ot, wt = theirs(qt, torch.tensor(k), torch.tensor(v), key_padding_mask=torch.tensor(kpm),
                        attn_mask=torch.tensor(am))
        np.testing.assert_allclose(oc.numpy(), ot.detach().numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(wc.numpy(), wt.detach().numpy(), rtol=1e-5, atol=1e-6)
        (oc.square().sum() + wc.sum()).backward()
        (ot.square().sum() + wt.sum()).backward()
        np.testing.assert_allclose(qc.grad.numpy(), qt.grad.numpy(), rtol=1e-4, atol=1e-5)


# --- recurrent layers --------------------------------------------------------------------------------


RNNS = [
    (lambda: nn.RNN(3, 4, num_layers=2, dtype=cv.float64), False),
    (lambda: nn.RNN(3, 4, nonlinearity="relu", bias=False, batch_first=True, dtype=cv.float64), True),
    (lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True, dtype=cv.float64), False),
    (lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True, proj_size=2, bias=False, batch_first=True,
                     dtype=cv.float64), True),
    (lambda: nn.GRU(3, 4, bidirectional=True, batch_first=True, dtype=cv.float64), True),
]


@pytest.mark.parametrize("make, batch_first", RNNS)
def test_recurrent_layers_match_numpy(make, batch_first):
    m = make()
    x = rng.standard_normal((3, 2, 3))  # (L, N, in)
    dirs = 2 if m.bidirectional else 1
    h0 = rng.standard_normal((m.num_layers * dirs, 2, getattr(m, "proj_size", 0) or 4))
    lstm = m.mode == "LSTM"
    c0 = rng.standard_normal((m.num_layers * dirs, 2, 4)) if lstm else None
    ref_out, ref_h, ref_c = rnn_ref(m, x, h0, c0)
    xin = x.transpose(1, 0, 2) if batch_first else x
    out, state = m(cv.Tensor(xin), (cv.Tensor(h0), cv.Tensor(c0)) if lstm else cv.Tensor(h0))
    h, c = state if lstm else (state, None)
    np.testing.assert_allclose(out.numpy(), ref_out.transpose(1, 0, 2) if batch_first else ref_out, rtol=1e-10)
    np.testing.assert_allclose(h.numpy(), ref_h, rtol=1e-10)
    if lstm:
        np.testing.assert_allclose(c.numpy(), ref_c, rtol=1e-10)
    out0, _ = m(cv.Tensor(x[:, 0]))  # unbatched (L, in), zero initial state
    np.testing.assert_allclose(out0.numpy(), rnn_ref(m, x[:, :1])[0][:, 0], rtol=1e-10)


def test_recurrent_gradients_float64():
    lstm = nn.LSTM(2, 3, bidirectional=True, dtype=cv.float64)
    gru = nn.GRU(6, 2, dtype=cv.float64)
    x = leaf(rng.standard_normal((3, 2, 2)))
    w = cv.Tensor(rng.standard_normal((3, 2, 2)))

    def loss():
        y, (h, c) = lstm(x)
        z, hz = gru(y)
        return (z * w).sum() + h.square().sum() + c.sum() + hz.sum()

    fd_check(loss, [x, lstm.weight_ih_l0, lstm.weight_hh_l0_reverse, lstm.bias_hh_l0, gru.weight_hh_l0, gru.bias_ih_l0])


def test_cells_match_numpy():
    x, h = rng.standard_normal((2, 3)), rng.standard_normal((2, 4))
    for cell, mode in ((nn.RNNCell(3, 4, dtype=cv.float64), "RNN_TANH"), (nn.GRUCell(3, 4, dtype=cv.float64), "GRU"),
                       (nn.LSTMCell(3, 4, dtype=cv.float64), "LSTM")):
        stack = nn.LSTM(3, 4, dtype=cv.float64) if mode == "LSTM" else nn.GRU(3, 4, dtype=cv.float64) \
            if mode == "GRU" else nn.RNN(3, 4, dtype=cv.float64)
        stack.load_state_dict({k + "_l0": v for k, v in cell.state_dict().items()})
        if mode == "LSTM":
            c = rng.standard_normal((2, 4))
            h1, c1 = cell(cv.Tensor(x), (cv.Tensor(h), cv.Tensor(c)))
            _, ref_h, ref_c = rnn_ref(stack, x[None], h[None], c[None])
            np.testing.assert_allclose(c1.numpy(), ref_c[0], rtol=1e-10)
        else:
            h1 = cell(cv.Tensor(x), cv.Tensor(h))
            _, ref_h, _ = rnn_ref(stack, x[None], h[None])
        np.testing.assert_allclose(h1.numpy(), ref_h[0], rtol=1e-10)
    assert nn.GRUCell(3, 4)(cv.ones(3)).shape == (4,)


def test_recurrent_dropout_state_dict_and_errors():
    m = nn.GRU(3, 4, num_layers=2, dropout=0.5)
    plain = nn.GRU(3, 4, num_layers=2)
    plain.load_state_dict(m.state_dict())
    x = cv.Tensor(rng.standard_normal((3, 2, 3)).astype(np.float32))
    np.testing.assert_array_equal(m.eval()(x)[0].numpy(), plain(x)[0].numpy())
    assert not np.allclose(m.train()(x)[0].numpy(), plain(x)[0].numpy())  # dropout between the layers
    assert list(nn.LSTM(3, 4, bidirectional=True).state_dict())[4:] == [
        "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse"]
    with pytest.raises(ValueError, match=r"LSTM\(3, 4\): expected an input of shape \(L, N, 3\) or \(L, 3\)"):
        nn.LSTM(3, 4)(cv.ones(2, 2, 5))
    with pytest.raises(ValueError, match=r"expected h_0 of shape \(1, 2, 4\)"):
        nn.GRU(3, 4)(x, cv.zeros(2, 2, 4))
    with pytest.raises(ValueError, match="pair"):
        nn.LSTM(3, 4)(x, cv.zeros(1, 2, 4))
    with pytest.raises(ValueError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=4)  # must be below hidden_size
    with pytest.raises(ValueError, match="proj_size is only supported by LSTM"):
        nn.RNN(3, 4, proj_size=2)
    with pytest.raises(ValueError, match=r"expected h_0 of shape \(1, 2, 2\)"):
        nn.LSTM(3, 4, proj_size=2)(x, (cv.zeros(1, 2, 4), cv.zeros(1, 2, 4)))
    with pytest.raises(ValueError, match=r"expected c_0 of shape \(1, 2, 4\)"):
        nn.LSTM(3, 4, proj_size=2)(x, (cv.zeros(1, 2, 2), cv.zeros(1, 2, 2)))
    assert list(nn.LSTM(3, 4, proj_size=2).state_dict()) == [
        "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_hr_l0"]
    assert repr(nn.LSTM(3, 4, proj_size=2)) == "LSTM(3, 4, proj_size=2)"
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="gelu")


def test_recurrent_layers_match_torch():
    torch = pytest.importorskip("torch")
    for ours, theirs in ((nn.LSTM(3, 4, num_layers=2, batch_first=True), torch.nn.LSTM(3, 4, 2, batch_first=True)),
                         (nn.GRU(3, 4, bidirectional=True), torch.nn.GRU(3, 4, bidirectional=True)),
                         (nn.LSTM(3, 5, num_layers=2, bidirectional=True, batch_first=True, proj_size=3),
                          torch.nn.LSTM(3, 5, 2, batch_first=True, bidirectional=True, proj_size=3))):
        to_torch(ours, theirs)
        x = rng.standard_normal((2, 4, 3)).astype(np.float32)
        xc, xt = cv.Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        (oc, _), (ot, _) = ours(xc), theirs(xt)
        np.testing.assert_allclose(oc.numpy(), ot.detach().numpy(), rtol=1e-5, atol=1e-6)
        oc.square().sum().backward()
        ot.square().sum().backward()
        np.testing.assert_allclose(xc.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
        for (name, p), (_, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)

"""Losses against float64 numpy references written here, against PyTorch when it is installed, and
their gradients against finite differences of the references (one random direction each)."""

import itertools
import math

import numpy as np
import pytest

import corvid as cv
from corvid.nn import losses as L

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the oracle is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
rng = np.random.default_rng(0)
X = rng.standard_normal((4, 5))
Y = rng.standard_normal((4, 5))
W = rng.uniform(0.5, 2.0, (4, 5))


def reduce(loss, reduction):
    return {"none": loss, "sum": loss.sum(), "mean": loss.mean()}[reduction]


def check_grad(fn, ref, *args, argnum=0, rtol=1e-5):
    """cv.grad of ``fn`` (float64 inputs) along a random direction against central differences of ``ref``."""
    g = cv.grad(lambda *a: fn(*a), argnums=argnum)(*[cv.Tensor(a) if isinstance(a, np.ndarray) else a
                                                      for a in args]).numpy()
    x = args[argnum]
    v = np.random.default_rng(1).standard_normal(x.shape)
    h = 1e-6

    def at(y):
        a = list(args)
        a[argnum] = y
        return float(ref(*a))

    fd = (at(x + h * v) - at(x - h * v)) / (2 * h)
    np.testing.assert_allclose((g * v).sum(), fd, rtol=rtol, atol=1e-8)


# --- regression ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_regression_losses_match_references(reduction):
    d = X - Y
    a = np.abs(d)
    refs = {
        "mse": (lambda: L.mse_loss(cv.Tensor(X), cv.Tensor(Y), reduction=reduction), d * d),
        "l1": (lambda: L.l1_loss(cv.Tensor(X), cv.Tensor(Y), reduction=reduction), a),
        "huber": (lambda: L.huber_loss(cv.Tensor(X), cv.Tensor(Y), reduction, delta=0.7),
                  np.where(a < 0.7, 0.5 * d * d, 0.7 * (a - 0.35))),
        "smooth_l1": (lambda: L.smooth_l1_loss(cv.Tensor(X), cv.Tensor(Y), reduction=reduction, beta=0.7),
                      np.where(a < 0.7, 0.5 * d * d / 0.7, a - 0.35)),
        "smooth_l1_beta0": (lambda: L.smooth_l1_loss(cv.Tensor(X), cv.Tensor(Y), reduction=reduction, beta=0.0), a),
    }
    for name, (fn, ref) in refs.items():
        out = fn()
        assert out.dtype == cv.float64, name
        np.testing.assert_allclose(out.numpy(), reduce(ref, reduction), rtol=1e-12, err_msg=name)


def test_regression_weights_follow_torch_mean_rules():
    d = X - Y
    np.testing.assert_allclose(L.mse_loss(cv.Tensor(X), cv.Tensor(Y), weight=cv.Tensor(W)).item(),
                               (d * d * W).sum() / W.sum(), rtol=1e-12)
    np.testing.assert_allclose(L.l1_loss(cv.Tensor(X), cv.Tensor(Y), weight=cv.Tensor(W)).item(),
                               (np.abs(d) * W).sum() / W.sum(), rtol=1e-12)
    a = np.abs(d)
    np.testing.assert_allclose(L.huber_loss(cv.Tensor(X), cv.Tensor(Y), weight=cv.Tensor(W)).item(),
                               (np.where(a < 1, 0.5 * d * d, a - 0.5) * W).mean(), rtol=1e-12)
    with pytest.raises(ValueError, match="weight"):
        L.mse_loss(cv.Tensor(X), cv.Tensor(Y), weight=cv.Tensor(W[0]))


def test_regression_broadcasts_and_validates():
    out = L.mse_loss(cv.Tensor(X), cv.Tensor(Y[0]), reduction="none")
    np.testing.assert_allclose(out.numpy(), (X - Y[0]) ** 2, rtol=1e-12)
    with pytest.raises(ValueError, match="reduction"):
        L.mse_loss(cv.Tensor(X), cv.Tensor(Y), reduction="avg")
    with pytest.raises(TypeError):
        L.mse_loss(cv.Tensor(X), cv.Tensor(Y), None)  # no positional size_average
    with pytest.raises(ValueError, match="delta"):
        L.huber_loss(cv.Tensor(X), cv.Tensor(Y), delta=0.0)


def test_regression_gradients():
    check_grad(lambda x, y: L.huber_loss(x, y, delta=0.7), lambda x, y: np.where(
        np.abs(x - y) < 0.7, 0.5 * (x - y) ** 2, 0.7 * (np.abs(x - y) - 0.35)).mean(), X, Y)
    check_grad(lambda x, y: L.mse_loss(x, y, reduction="sum"), lambda x, y: ((x - y) ** 2).sum(), X, Y, argnum=1)


# --- classification ---------------------------------------------------------------------------------------
def log_softmax(x, axis):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def ce_ref(x, t, weight=None, ignore_index=-100, reduction="mean", smoothing=0.0, logits=True):
    """Cross entropy / nll with class indices, in float64, class axis 1 (or 0 for 1-d input)."""
    axis = 0 if x.ndim == 1 else 1
    lp = log_softmax(x, axis) if logits else x
    c = x.shape[axis]
    w = np.ones(c) if weight is None else weight
    lp_last = np.moveaxis(lp, axis, -1)
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    picked = np.take_along_axis(lp_last, safe[..., None], -1)[..., 0]
    wt = w[safe] * valid
    loss = -picked * wt
    if smoothing:
        smooth = -(lp_last * w).sum(-1) * valid
        loss = (1 - smoothing) * loss + smoothing / c * smooth
    if reduction == "mean":
        return loss.sum() / wt.sum()
    return reduce(loss, reduction)


LOGITS = rng.standard_normal((6, 4)) * 2
TARGET = np.array([0, 3, 1, 1, -100, 2])
CW = np.array([1.0, 2.0, 0.5, 1.5])


@pytest.mark.parametrize("reduction,weighted,smoothing", list(itertools.product(["none", "mean", "sum"],
                                                                                [False, True], [0.0, 0.2])))
def test_cross_entropy_class_indices(reduction, weighted, smoothing):
    w = CW if weighted else None
    out = L.cross_entropy(cv.Tensor(LOGITS), cv.Tensor(TARGET), None if w is None else cv.Tensor(w),
                          reduction=reduction, label_smoothing=smoothing)
    ref = ce_ref(LOGITS, TARGET, w, reduction=reduction, smoothing=smoothing)
    assert out.shape == np.shape(ref)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)
    if torch is not None:
        expected = F.cross_entropy(torch.tensor(LOGITS), torch.tensor(TARGET), None if w is None else torch.tensor(w),
                                   reduction=reduction, label_smoothing=smoothing)
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-12)


def test_cross_entropy_spatial_and_unbatched():
    x = rng.standard_normal((2, 3, 4, 5))
    t = rng.integers(0, 3, (2, 4, 5))
    t[0, 1, 2] = -100
    out = L.cross_entropy(cv.Tensor(x), cv.Tensor(t), reduction="none")
    assert out.shape == (2, 4, 5)
    np.testing.assert_allclose(out.numpy(), ce_ref(x, t, reduction="none"), rtol=1e-12)
    np.testing.assert_allclose(L.cross_entropy(cv.Tensor(x), cv.Tensor(t), cv.Tensor(CW[:3])).item(),
                               ce_ref(x, t, CW[:3]), rtol=1e-12)
    one = L.cross_entropy(cv.Tensor(LOGITS[1]), cv.Tensor(np.array(3)))
    assert one.shape == ()
    np.testing.assert_allclose(one.item(), -log_softmax(LOGITS[1], 0)[3], rtol=1e-12)


def test_cross_entropy_probability_targets():
    p = np.exp(log_softmax(rng.standard_normal((6, 4)), 1))
    for smoothing, weighted in [(0.0, False), (0.3, True)]:
        w = CW if weighted else np.ones(4)
        q = p * (1 - smoothing) + smoothing / 4
        ref = -(log_softmax(LOGITS, 1) * q * w).sum(1)
        out = L.cross_entropy(cv.Tensor(LOGITS), cv.Tensor(p), cv.Tensor(w) if weighted else None,
                              label_smoothing=smoothing)
        np.testing.assert_allclose(out.item(), ref.mean(), rtol=1e-12)
        if torch is not None:
            expected = F.cross_entropy(torch.tensor(LOGITS), torch.tensor(p), torch.tensor(w) if weighted else None,
                                       label_smoothing=smoothing)
            np.testing.assert_allclose(out.item(), expected.item(), rtol=1e-12)


def test_cross_entropy_all_ignored_mean_is_nan_like_torch():
    t = cv.Tensor(np.full(6, -100))
    assert math.isnan(L.cross_entropy(cv.Tensor(LOGITS), t).item())
    assert L.cross_entropy(cv.Tensor(LOGITS), t, reduction="sum").item() == 0.0
    assert L.cross_entropy(cv.Tensor(LOGITS), t, reduction="none").numpy().tolist() == [0.0] * 6
    if torch is not None:
        assert math.isnan(F.cross_entropy(torch.tensor(LOGITS), torch.full((6,), -100)).item())


def test_cross_entropy_is_stable_and_validates():
    big = cv.Tensor([[1000.0, -1000.0, 0.0]])
    assert L.cross_entropy(big, cv.Tensor([0])).item() == 0.0
    assert L.cross_entropy(big, cv.Tensor([1])).item() == 2000.0
    with pytest.raises(IndexError, match="out of bounds"):
        L.cross_entropy(cv.Tensor(LOGITS), cv.Tensor([0, 1, 2, 3, 4, 0]))
    with pytest.raises(ValueError, match="shape"):
        L.cross_entropy(cv.Tensor(LOGITS), cv.Tensor([0, 1]))
    with pytest.raises(ValueError, match="label_smoothing"):
        L.cross_entropy(cv.Tensor(LOGITS), cv.Tensor(TARGET), label_smoothing=1.5)


def test_cross_entropy_gradient_and_ignore_index():
    w = cv.Tensor(CW)
    check_grad(lambda x: L.cross_entropy(x, cv.Tensor(TARGET), w, label_smoothing=0.1),
               lambda x: ce_ref(x, TARGET, CW, smoothing=0.1), LOGITS)
    g = cv.grad(lambda x: L.cross_entropy(x, cv.Tensor(TARGET)))(cv.Tensor(LOGITS)).numpy()
    assert np.all(g[4] == 0)  # the ignored row gets no gradient
    np.testing.assert_allclose(g.sum(1), 0, atol=1e-12)


def test_nll_loss():
    lp = log_softmax(LOGITS, 1)
    for reduction in ("none", "mean", "sum"):
        out = L.nll_loss(cv.Tensor(lp), cv.Tensor(TARGET), cv.Tensor(CW), reduction=reduction)
        np.testing.assert_allclose(out.numpy(), ce_ref(lp, TARGET, CW, reduction=reduction, logits=False), rtol=1e-12)
    t = np.where(TARGET == -100, 0, TARGET)
    out = L.nll_loss(cv.Tensor(lp), cv.Tensor(t), ignore_index=3)
    np.testing.assert_allclose(out.item(), ce_ref(lp, t, ignore_index=3, logits=False), rtol=1e-12)


def bce_ref(p, t, w=1.0):
    return -w * (t * np.maximum(np.log(p), -100) + (1 - t) * np.maximum(np.log1p(-p), -100))


def bcel_ref(x, t, pw=1.0):
    return -(pw * t * -np.logaddexp(0, -x) + (1 - t) * -np.logaddexp(0, x))


def test_binary_cross_entropy():
    p = 1 / (1 + np.exp(-X))
    t = rng.uniform(0, 1, X.shape)
    for reduction in ("none", "mean", "sum"):
        out = L.binary_cross_entropy(cv.Tensor(p), cv.Tensor(t), cv.Tensor(W), reduction=reduction)
        np.testing.assert_allclose(out.numpy(), reduce(bce_ref(p, t, W), reduction), rtol=1e-10)
    edge = L.binary_cross_entropy(cv.Tensor([0.0, 1.0, 0.0]), cv.Tensor([1.0, 0.0, 0.0]), reduction="none")
    assert edge.tolist() == [100.0, 100.0, 0.0]  # logs clamped at -100 like torch
    check_grad(lambda q: L.binary_cross_entropy(q, cv.Tensor(t)), lambda q: bce_ref(q, t).mean(), p)


def test_binary_cross_entropy_with_logits_is_stable():
    t = (rng.uniform(0, 1, X.shape) > 0.5).astype(np.float64)
    pw = np.array([0.5, 1.0, 2.0, 3.0, 1.5])
    for reduction in ("none", "mean", "sum"):
        out = L.binary_cross_entropy_with_logits(cv.Tensor(X), cv.Tensor(t), cv.Tensor(W), reduction=reduction,
                                                 pos_weight=cv.Tensor(pw))
        np.testing.assert_allclose(out.numpy(), reduce(W * bcel_ref(X, t, pw), reduction), rtol=1e-10)
        if torch is not None:
            expected = F.binary_cross_entropy_with_logits(torch.tensor(X), torch.tensor(t), torch.tensor(W),
                                                          reduction=reduction, pos_weight=torch.tensor(pw))
            np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-10)
    extreme = L.binary_cross_entropy_with_logits(cv.Tensor([200.0, -200.0, 200.0]), cv.Tensor([1.0, 0.0, 0.0]),
                                                 reduction="none")
    np.testing.assert_allclose(extreme.numpy(), [0.0, 0.0, 200.0])
    check_grad(lambda x: L.binary_cross_entropy_with_logits(x, cv.Tensor(t), pos_weight=cv.Tensor(pw)),
               lambda x: bcel_ref(x, t, pw).mean(), X)


def test_kl_div():
    lp = log_softmax(X, 1)
    q = np.exp(log_softmax(Y, 1))
    q[0, 0] = 0.0
    pointwise = np.where(q > 0, q * np.log(np.where(q > 0, q, 1)), 0) - q * lp
    for reduction, ref in [("none", pointwise), ("sum", pointwise.sum()), ("mean", pointwise.mean()),
                           ("batchmean", pointwise.sum() / 4)]:
        out = L.kl_div(cv.Tensor(lp), cv.Tensor(q), reduction=reduction)
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)
    lq = log_softmax(Y, 1)
    out = L.kl_div(cv.Tensor(lp), cv.Tensor(lq), reduction="batchmean", log_target=True)
    np.testing.assert_allclose(out.item(), (np.exp(lq) * (lq - lp)).sum() / 4, rtol=1e-12)
    g = cv.grad(lambda t: L.kl_div(cv.Tensor(lp), t, reduction="sum"))(cv.Tensor(q)).numpy()
    assert np.isfinite(g).all()  # a zero target does not poison the gradient


# --- embeddings and ranking -------------------------------------------------------------------------------
def dist(a, b, p, eps=1e-6):
    d = np.abs(a - b + eps)
    return d.max(-1) if math.isinf(p) else (d ** p).sum(-1) ** (1 / p)


@pytest.mark.parametrize("p,swap", [(2, False), (1, True), (3, False), (math.inf, False)])
def test_triplet_margin_loss(p, swap):
    a, pos, neg = X, Y, rng.standard_normal((4, 5))
    d_neg = dist(a, neg, p)
    if swap:
        d_neg = np.minimum(d_neg, dist(pos, neg, p))
    ref = np.maximum(dist(a, pos, p) - d_neg + 1.0, 0)
    out = L.triplet_margin_loss(cv.Tensor(a), cv.Tensor(pos), cv.Tensor(neg), p=p, swap=swap, reduction="none")
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-10)
    if torch is not None and not math.isinf(p):
        expected = F.triplet_margin_loss(torch.tensor(a), torch.tensor(pos), torch.tensor(neg), p=p, swap=swap)
        np.testing.assert_allclose(L.triplet_margin_loss(cv.Tensor(a), cv.Tensor(pos), cv.Tensor(neg), p=p,
                                                         swap=swap).item(), expected.item(), rtol=1e-10)


def test_cosine_embedding_and_margin_ranking():
    y = np.array([1, -1, 1, -1])
    n1 = (X * X).sum(1) + 1e-12
    n2 = (Y * Y).sum(1) + 1e-12
    cos = (X * Y).sum(1) / np.sqrt(n1 * n2)
    ref = np.where(y == 1, 1 - cos, np.maximum(cos - 0.1, 0))
    for reduction in ("none", "mean", "sum"):
        out = L.cosine_embedding_loss(cv.Tensor(X), cv.Tensor(Y), cv.Tensor(y), 0.1, reduction=reduction)
        np.testing.assert_allclose(out.numpy(), reduce(ref, reduction), rtol=1e-12)
    x1, x2 = X[:, 0], Y[:, 0]
    yf = y.astype(np.float64)
    for reduction in ("none", "mean", "sum"):
        out = L.margin_ranking_loss(cv.Tensor(x1), cv.Tensor(x2), cv.Tensor(yf), 0.3, reduction=reduction)
        np.testing.assert_allclose(out.numpy(), reduce(np.maximum(0, -yf * (x1 - x2) + 0.3), reduction), rtol=1e-12)
    if torch is not None:
        expected = F.cosine_embedding_loss(torch.tensor(X), torch.tensor(Y), torch.tensor(y), 0.1)
        np.testing.assert_allclose(L.cosine_embedding_loss(cv.Tensor(X), cv.Tensor(Y), cv.Tensor(y), 0.1).item(),
                                   expected.item(), rtol=1e-12)


def test_hinge_losses_take_torch_clamp_derivative_at_the_kink():
    # each input sits exactly on the hinge (the loss is 0 with slope 1 on one side): torch's
    # clamp_min(0) passes the full gradient there, so the hinge counts as active
    kink1, kink2 = np.array([1.0]), np.array([2.0])        # -(1 - 2) - 1 = 0 with margin -1
    g1, g2 = cv.grad(lambda a, b: L.margin_ranking_loss(a, b, cv.Tensor([1.0]), -1.0, reduction="sum"),
                     argnums=(0, 1))(cv.Tensor(kink1), cv.Tensor(kink2))
    assert g1.tolist() == [-1.0] and g2.tolist() == [1.0]
    a, pos, neg = np.array([[0.0, 0.0]]), np.array([[1.0, 0.0]]), np.array([[2.0, 0.0]])  # 1 - 2 + 1 = 0
    gp = cv.grad(lambda t: L.triplet_margin_loss(cv.Tensor(a), t, cv.Tensor(neg), eps=0.0))(cv.Tensor(pos))
    assert gp.tolist() == [[1.0, 0.0]]  # d/dp |a - p| = (p - a) / |p - a|
    u, v = np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])  # cos = 0 = margin, target -1
    gu = cv.grad(lambda t: L.cosine_embedding_loss(t, cv.Tensor(v), cv.Tensor([-1])))(cv.Tensor(u))
    np.testing.assert_allclose(gu.numpy(), [[0.0, 1.0]], rtol=1e-9)
    if torch is not None:
        tens = [torch.tensor(t, requires_grad=True) for t in (kink1, kink2, pos, u)]
        (F.margin_ranking_loss(tens[0], tens[1], torch.tensor([1.0], dtype=torch.float64), -1.0, reduction="sum")
         + F.triplet_margin_loss(torch.tensor(a), tens[2], torch.tensor(neg), eps=0.0)
         + F.cosine_embedding_loss(tens[3], torch.tensor(v), torch.tensor([-1]))).backward()
        for t, ours in zip(tens, (g1, g2, gp, gu)):
            np.testing.assert_allclose(ours.numpy(), t.grad.numpy(), rtol=1e-9)
    flat = cv.Tensor([3.0], requires_grad=True)  # strictly inside the flat side: no gradient
    L.margin_ranking_loss(flat, cv.Tensor([0.0]), cv.Tensor([1.0]), 1.0).backward()
    assert flat.grad.tolist() == [0.0]


# --- CTC ---------------------------------------------------------------------------------------------------
def ctc_brute_force(lp, target, blank=0):
    """-log sum over every path of length T whose collapse (merge repeats, drop blanks) is ``target``."""
    total = 0.0
    n_steps, n_classes = lp.shape
    for path in itertools.product(range(n_classes), repeat=n_steps):
        collapsed = [c for i, c in enumerate(path) if c != blank and (i == 0 or path[i - 1] != c)]
        if collapsed == list(target):
            total += math.exp(sum(lp[t, c] for t, c in enumerate(path)))
    return -math.log(total) if total > 0 else math.inf


CTC_LP = log_softmax(rng.standard_normal((5, 3, 3)), 2)  # T=5, N=3, C=3
CTC_TARGETS = np.array([[1, 2, 0], [1, 1, 0], [2, 0, 0]])  # padded; lengths below
CTC_IN = np.array([5, 4, 5])
CTC_TL = np.array([2, 2, 1])


def ctc_refs(lp=CTC_LP):
    return np.array([ctc_brute_force(lp[:CTC_IN[n], n], CTC_TARGETS[n, :CTC_TL[n]]) for n in range(3)])


def test_ctc_matches_brute_force_enumeration():
    ref = ctc_refs()
    out = L.ctc_loss(cv.Tensor(CTC_LP), cv.Tensor(CTC_TARGETS), cv.Tensor(CTC_IN), cv.Tensor(CTC_TL),
                     reduction="none")
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-10)
    concatenated = np.concatenate([CTC_TARGETS[n, :CTC_TL[n]] for n in range(3)])
    for reduction, expected in [("sum", ref.sum()), ("mean", (ref / CTC_TL).mean())]:
        out = L.ctc_loss(cv.Tensor(CTC_LP), concatenated, CTC_IN, CTC_TL, reduction=reduction)
        np.testing.assert_allclose(out.item(), expected, rtol=1e-10)
    one = L.ctc_loss(cv.Tensor(CTC_LP[:, 0]), cv.Tensor(CTC_TARGETS[0, :2]), 5, 2, reduction="none")
    assert one.shape == ()
    np.testing.assert_allclose(one.item(), ref[0], rtol=1e-10)


def test_ctc_gradient():
    lengths = (cv.Tensor(CTC_IN), cv.Tensor(CTC_TL))

    def ref(lp):
        return sum(ctc_brute_force(lp[:CTC_IN[n], n], CTC_TARGETS[n, :CTC_TL[n]]) for n in range(3))

    check_grad(lambda lp: L.ctc_loss(lp, cv.Tensor(CTC_TARGETS), *lengths, reduction="sum"), ref, CTC_LP, rtol=1e-4)


def test_ctc_impossible_alignments_and_empty_targets():
    lp = CTC_LP[:2, :2]  # T=2: target [1, 1] needs 3 frames
    tg, in_len, tl = np.array([[1, 1], [0, 0]]), np.array([2, 2]), np.array([2, 0])
    out = L.ctc_loss(cv.Tensor(lp), tg, in_len, tl, reduction="none").numpy()
    assert out[0] == math.inf
    np.testing.assert_allclose(out[1], -(lp[0, 1, 0] + lp[1, 1, 0]), rtol=1e-12)  # all blanks
    lp_t = cv.Tensor(lp)
    g = cv.grad(lambda x: L.ctc_loss(x, tg, in_len, tl, reduction="sum", zero_infinity=True))(lp_t).numpy()
    assert L.ctc_loss(lp_t, tg, in_len, tl, reduction="none", zero_infinity=True).numpy()[0] == 0.0
    assert np.all(g[:, 0] == 0) and np.isfinite(g).all()
    zero_len = L.ctc_loss(lp_t, tg, np.array([0, 0]), tl, reduction="none", zero_infinity=False).numpy()
    assert zero_len[0] == math.inf and zero_len[1] == 0.0


def test_ctc_validates():
    with pytest.raises(ValueError, match="blank"):
        L.ctc_loss(cv.Tensor(CTC_LP), np.array([[0, 1]] * 3), CTC_IN, np.array([2, 2, 2]))
    with pytest.raises(ValueError, match="input_lengths"):
        L.ctc_loss(cv.Tensor(CTC_LP), CTC_TARGETS, np.array([6, 5, 5]), CTC_TL)
    with pytest.raises(ValueError, match="concatenated"):
        L.ctc_loss(cv.Tensor(CTC_LP), np.array([1, 2]), CTC_IN, CTC_TL)


@needs_torch
def test_ctc_against_torch_with_gradient():
    t_len, batch, n_classes = 12, 3, 6
    x = np.random.default_rng(3).standard_normal((t_len, batch, n_classes)).astype(np.float32)
    targets = np.array([[1, 2, 2, 3], [5, 4, 0, 0], [1, 1, 1, 0]])
    in_len, tl = np.array([12, 9, 11]), np.array([4, 2, 3])
    xt = torch.tensor(x, requires_grad=True)
    expected = F.ctc_loss(xt.log_softmax(2), torch.tensor(targets), torch.tensor(in_len), torch.tensor(tl))
    expected.backward()
    xc = cv.Tensor(x, requires_grad=True)
    out = L.ctc_loss(xc.log_softmax(2), cv.Tensor(targets), cv.Tensor(in_len), cv.Tensor(tl))
    out.backward()
    np.testing.assert_allclose(out.item(), expected.item(), rtol=1e-5)
    np.testing.assert_allclose(xc.grad.numpy(), xt.grad.numpy(), atol=1e-6)


def test_cross_entropy_reads_the_logits_twice_and_gathers_the_target():
    """A language-model loss (bfloat16 logits, autocast's float32 loss), its value and gradient in
    one jit program, scheduled on the NULL device: the logits are read by the row max, the row
    sum of exponentials and the gradient, and by no other kernel (the target's logit is gathered:
    where(one_hot, logp, 0).sum read every row a fourth time), nor is their float32 widening
    stored; forward mode and vmap go through the gather too. Values and gradients are torch's."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    n, c = 64, 1000
    x = rng.standard_normal((n, c)).astype(np.float32)
    t = rng.integers(0, c, n)
    t[3] = -100

    def loss(z, tt):
        with cv.autocast(cv.bfloat16):
            return L.cross_entropy(z, tt)

    z, tt = cv.Tensor(x, device="NULL").astype(cv.bfloat16).realize(), cv.Tensor(t, device="NULL")
    step = cv.jit(cv.value_and_grad(loss))
    step(z, tt)
    launches = next(iter(step._cache.values()))[0].launches
    touching = [ln.sk for ln in launches if any(i.numel == n * c for i in ln.sk.inputs)]
    # (reduces over the rows and the gradient read every logit; the gather reads one per row)
    whole = [sk.name for sk in touching if sk.name.startswith("r_") or sk.output.numel == n * c]
    gathers = [sk.name for sk in touching if sk.name.startswith("E_") and sk.output.numel == n]
    assert len(whole) <= 3 and len(gathers) == 1, [sk.name for sk in touching]
    assert not [ln.sk.name for ln in launches if ln.sk.output.numel == n * c and ln.sk.output.dtype == cv.float32]
    zb = cv.Tensor(x).astype(cv.bfloat16)
    value, grad = cv.value_and_grad(loss)(zb, cv.Tensor(t))
    xt = torch.tensor(x).to(torch.bfloat16).float().requires_grad_()
    want = torch.nn.functional.cross_entropy(xt, torch.tensor(t))
    want.backward()
    np.testing.assert_allclose(value.item(), want.item(), rtol=1e-5)
    np.testing.assert_allclose(grad.astype(cv.float32).numpy(), xt.grad.numpy(), rtol=2e-2, atol=1e-4)
    x64 = cv.Tensor(x[:4, :7].astype(np.float64))
    tangent = cv.Tensor(rng.standard_normal((4, 7)))
    _, jv = cv.jvp(lambda a: L.cross_entropy(a, cv.Tensor(t[:4] % 7)), (x64,), (tangent,))
    g64 = cv.grad(lambda a: L.cross_entropy(a, cv.Tensor(t[:4] % 7)))(x64)
    np.testing.assert_allclose(jv.item(), (g64.numpy() * tangent.numpy()).sum(), rtol=1e-10)
    batched = cv.vmap(lambda a: L.cross_entropy(a, cv.Tensor(t[:4] % 7)))(cv.Tensor(np.stack([x[:4, :7], 2 * x[:4, :7]])))
    np.testing.assert_allclose(batched.numpy(), [L.cross_entropy(cv.Tensor(s * x[:4, :7]), cv.Tensor(t[:4] % 7)).item()
                                                 for s in (1, 2)], rtol=1e-6)

"""Learning-rate schedules against their closed forms and against PyTorch when it is installed,
momentum cycling, sequencing, and state dicts through cv.save."""

import math

import numpy as np
import pytest

import corvid as cv
from corvid.optim import SGD, Adam
from corvid.optim import lr_scheduler as S

try:
    import torch
except ImportError:  # the oracle is optional
    torch = None

EPOCHS = 12


def make_opt(cls=SGD, **hp):
    params = [cv.Tensor([1.0], requires_grad=True), cv.Tensor([2.0], requires_grad=True)]
    return cls([{"params": [params[0]]}, {"params": [params[1]], "lr": 0.5}], lr=1.0, **hp)


def trajectory(sched, epochs=EPOCHS):
    out = []
    for _ in range(epochs):
        out.append(sched.get_last_lr())
        sched.step()
    return out


def torch_trajectory(make, cls=torch.optim.SGD if torch else None, epochs=EPOCHS, **hp):
    params = [torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)]
    opt = cls([{"params": [params[0]]}, {"params": [params[1]], "lr": 0.5}], lr=1.0, **hp)
    sched = make(torch.optim.lr_scheduler, opt)
    out = []
    for _ in range(epochs):
        out.append(sched.get_last_lr())
        opt.step()
        sched.step()
    return out


CLOSED_FORMS = {
    "step": (lambda m, o: m.StepLR(o, step_size=3, gamma=0.5), lambda b, e: b * 0.5 ** (e // 3)),
    "multistep": (lambda m, o: m.MultiStepLR(o, milestones=[2, 5, 5], gamma=0.1),
                  lambda b, e: b * 0.1 ** sum(e >= k for k in (2, 5, 5))),
    "exponential": (lambda m, o: m.ExponentialLR(o, gamma=0.8), lambda b, e: b * 0.8 ** e),
    "cosine": (lambda m, o: m.CosineAnnealingLR(o, T_max=8, eta_min=0.01),
               lambda b, e: 0.01 + (b - 0.01) * (1 + math.cos(math.pi * e / 8)) / 2),
    "linear": (lambda m, o: m.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=4),
               lambda b, e: b * (0.25 + 0.75 * min(e, 4) / 4)),
    "lambda": (lambda m, o: m.LambdaLR(o, lambda e: 1 / (1 + e)), lambda b, e: b / (1 + e)),
}


@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
def test_schedules_follow_closed_forms(name):
    make, form = CLOSED_FORMS[name]
    opt = make_opt()
    got = trajectory(make(S, opt))
    expected = [[form(1.0, e), form(0.5, e)] for e in range(EPOCHS)]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert opt.param_groups[1]["lr"] == pytest.approx(form(0.5, EPOCHS))
    if torch is not None and name != "cosine":  # torch's cosine is recursive; compared separately below
        np.testing.assert_allclose(got, torch_trajectory(make), rtol=1e-12)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_cosine_matches_torch_within_one_period():
    make = CLOSED_FORMS["cosine"][0]
    np.testing.assert_allclose(trajectory(make(S, make_opt()), 9), torch_trajectory(make, epochs=9), rtol=1e-9)


@pytest.mark.parametrize("three_phase,strategy", [(False, "cos"), (True, "linear")])
def test_one_cycle_with_momentum(three_phase, strategy):
    opt = make_opt(Adam, betas=(0.9, 0.999))
    sched = S.OneCycleLR(opt, max_lr=[1.0, 2.0], total_steps=10, pct_start=0.3, anneal_strategy=strategy,
                         three_phase=three_phase)
    lrs, betas = [], []
    for _ in range(10):
        lrs.append(sched.get_last_lr())
        betas.append(opt.param_groups[0]["betas"][0])
        sched.step()
    assert lrs[0] == pytest.approx([1.0 / 25, 2.0 / 25]) and lrs[2] == pytest.approx([1.0, 2.0])
    assert betas[0] == pytest.approx(0.95) and betas[2] == pytest.approx(0.85)
    assert lrs[-1][0] == pytest.approx(1.0 / 25 / 1e4)
    assert opt.param_groups[0]["betas"][1] == 0.999
    assert sched.last_epoch == 10  # the 10th step was allowed (it repeats the last value), the 11th is not, as torch
    with pytest.raises(ValueError, match="total_steps"):
        sched.step()
    if torch is not None:
        params = [torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)]
        topt = torch.optim.Adam([{"params": [params[0]]}, {"params": [params[1]], "lr": 0.5}], lr=1.0)
        tsched = torch.optim.lr_scheduler.OneCycleLR(topt, max_lr=[1.0, 2.0], total_steps=10, pct_start=0.3,
                                                     anneal_strategy=strategy, three_phase=three_phase)
        for step in range(10):
            np.testing.assert_allclose(lrs[step], tsched.get_last_lr(), rtol=1e-12)
            assert betas[step] == pytest.approx(topt.param_groups[0]["betas"][0], rel=1e-12)
            topt.step()
            tsched.step()


def test_sequential_warmup_then_cosine():
    opt = make_opt()
    warm = S.LinearLR(opt, start_factor=0.1, total_iters=3)
    cos = S.CosineAnnealingLR(opt, T_max=6)
    sched = S.SequentialLR(opt, [warm, cos], milestones=[3])
    got = [g[0] for g in trajectory(sched, 9)]
    expected = [0.1 + 0.9 * e / 3 for e in range(3)] + [(1 + math.cos(math.pi * e / 6)) / 2 for e in range(6)]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    if torch is not None:
        make = lambda m, o: m.SequentialLR(o, [m.LinearLR(o, start_factor=0.1, total_iters=3),
                                               m.CosineAnnealingLR(o, T_max=6)], milestones=[3])
        np.testing.assert_allclose(got, [g[0] for g in torch_trajectory(make, epochs=9)], rtol=1e-9)
    with pytest.raises(ValueError, match="milestone"):
        S.SequentialLR(opt, [warm, cos], milestones=[])


def test_scheduler_state_dict_through_cv_save(tmp_path):
    opt = make_opt()
    sched = S.SequentialLR(opt, [S.LinearLR(opt, start_factor=0.5, total_iters=2),
                                 S.MultiStepLR(opt, milestones=[2, 4])], milestones=[2])
    for _ in range(4):
        sched.step()
    cv.save(tmp_path / "s.safetensors", cv.optim.flatten_state_dict(sched.state_dict()))
    cv.save(tmp_path / "o.safetensors", cv.optim.flatten_state_dict(opt.state_dict()))
    later = trajectory(sched, 5)

    opt2 = make_opt()
    sched2 = S.SequentialLR(opt2, [S.LinearLR(opt2, start_factor=0.5, total_iters=2),
                                   S.MultiStepLR(opt2, milestones=[2, 4])], milestones=[2])
    opt2.load_state_dict(cv.load(tmp_path / "o.safetensors"))
    sched2.load_state_dict(cv.load(tmp_path / "s.safetensors"))
    assert sched2.last_epoch == 4 and sched2.schedulers[1].milestones == [2, 4]
    assert trajectory(sched2, 5) == later


def test_resuming_needs_initial_lr_and_validates():
    opt = make_opt()
    with pytest.raises(KeyError, match="initial_lr"):
        S.StepLR(opt, step_size=2, last_epoch=5)
    with pytest.raises(ValueError, match="step_size"):
        S.StepLR(opt, step_size=0)
    with pytest.raises(ValueError, match="momentum"):
        S.OneCycleLR(cv.optim.Adagrad([cv.Tensor([0.0], requires_grad=True)]), max_lr=1.0, total_steps=5)
    with pytest.raises(TypeError, match="Optimizer"):
        S.ExponentialLR(object(), gamma=0.5)


# --- ReduceLROnPlateau -----------------------------------------------------------------------------------
def plateau_reference(metrics, lrs, mode, factor, patience, threshold, threshold_mode, cooldown, min_lrs, eps):
    """The rule written out: the rates after each epoch's metric."""
    improves = {("min", "rel"): lambda m, b: m < b * (1 - threshold), ("min", "abs"): lambda m, b: m < b - threshold,
                ("max", "rel"): lambda m, b: m > b * (1 + threshold), ("max", "abs"): lambda m, b: m > b + threshold}
    better = improves[(mode, threshold_mode)]
    best, bad, cool, out = (math.inf if mode == "min" else -math.inf), 0, 0, []
    for m in metrics:
        if better(m, best):
            best, bad = m, 0
        else:
            bad += 1
        if cool > 0:
            cool, bad = cool - 1, 0
        if bad > patience:
            lrs = [max(lr * factor, lo) if lr - max(lr * factor, lo) > eps else lr for lr, lo in zip(lrs, min_lrs)]
            cool, bad = cooldown, 0
        out.append(list(lrs))
    return out


PLATEAU_METRICS = [5.0, 4.0, 4.0, 3.9999, 4.1, 3.0, 3.0, 3.0, 3.0, 2.95, 2.95, 3.5, 3.5, 3.5, 3.5, 3.5, 3.5, 1.0]
PLATEAU_CASES = [dict(mode="min", factor=0.5, patience=1, threshold=1e-3, threshold_mode="rel", cooldown=0),
                 dict(mode="min", factor=0.1, patience=2, threshold=0.01, threshold_mode="abs", cooldown=2),
                 dict(mode="max", factor=0.5, patience=0, threshold=1e-4, threshold_mode="rel", cooldown=1),
                 dict(mode="max", factor=0.3, patience=1, threshold=0.5, threshold_mode="abs", cooldown=0)]


@pytest.mark.parametrize("hp", PLATEAU_CASES, ids=[f"{c['mode']}-{c['threshold_mode']}" for c in PLATEAU_CASES])
def test_reduce_lr_on_plateau_follows_the_rule_and_torch(hp):
    metrics = PLATEAU_METRICS if hp["mode"] == "min" else [-m for m in PLATEAU_METRICS]
    opt = make_opt()
    sched = S.ReduceLROnPlateau(opt, min_lr=[0.02, 0.01], eps=1e-3, **hp)
    got = []
    for m in metrics:
        sched.step(cv.Tensor(m) if len(got) % 2 else m)  # a number or a one-element tensor
        got.append(sched.get_last_lr())
        assert [g["lr"] for g in opt.param_groups] == got[-1]
    want = plateau_reference(metrics, [1.0, 0.5], min_lrs=[0.02, 0.01], eps=1e-3, **hp)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got[-1] != got[0]  # the case reduces at least once
    if torch is not None:
        params = [torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)]
        topt = torch.optim.SGD([{"params": [params[0]]}, {"params": [params[1]], "lr": 0.5}], lr=1.0)
        tsched = torch.optim.lr_scheduler.ReduceLROnPlateau(topt, min_lr=[0.02, 0.01], eps=1e-3, **hp)
        theirs = []
        for m in metrics:
            topt.step()
            tsched.step(m)
            theirs.append([g["lr"] for g in topt.param_groups])
        np.testing.assert_allclose(got, theirs, rtol=1e-12)


def test_reduce_lr_on_plateau_min_lr_eps_state_and_validation(tmp_path):
    opt = make_opt()
    sched = S.ReduceLROnPlateau(opt, factor=0.5, patience=0, min_lr=0.3, eps=0.1)
    for _ in range(4):
        sched.step(1.0)  # the first sets best; every later one is bad and reduces (patience 0)
    # group 0: 1 -> 0.5 -> 0.3 (floor); group 1: 0.5 -> 0.3, then 0.3 -> 0.3 moves by no more than eps
    assert sched.get_last_lr() == [0.3, 0.3]
    sched2 = S.ReduceLROnPlateau(make_opt(), factor=0.5, patience=0, min_lr=0.3, eps=0.1)
    sched2.step(1.0)
    path = tmp_path / "plateau.safetensors"
    cv.save(path, cv.optim.flatten_state_dict(sched.state_dict()))
    sched2.load_state_dict(cv.load(path))
    assert sched2.best == 1.0 and sched2.last_epoch == 4 and sched2.get_last_lr() == [0.3, 0.3]
    with pytest.raises(ValueError, match="factor"):
        S.ReduceLROnPlateau(make_opt(), factor=1.0)
    with pytest.raises(ValueError, match="mode"):
        S.ReduceLROnPlateau(make_opt(), mode="lowest")
    with pytest.raises(ValueError, match="threshold_mode"):
        S.ReduceLROnPlateau(make_opt(), threshold_mode="relative")
    with pytest.raises(ValueError, match="min_lr"):
        S.ReduceLROnPlateau(make_opt(), min_lr=[0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="patience"):
        S.ReduceLROnPlateau(make_opt(), patience=-1)
    with pytest.raises(TypeError, match="metric"):
        sched.step()
    with pytest.raises(TypeError, match="closed form"):
        sched.lr_at(3)

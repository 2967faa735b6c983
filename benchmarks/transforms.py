"""Transform and overhead workloads: what a Python-side framework costs per op, per call, per step.

Unlike the array workloads (one computation, timed per call, compared with numpy by ratio), these
measure a *unit cost* and compare it with an absolute target (the issue's figures for PyTorch eager
and JAX on the reference machine) and, where ``peer_target`` names one, with a peer measured in the
same run (its time / corvid's at least the given ratio):

* ``graph_build``: building, not running, a long chain of small elementwise ops (µs per op);
* ``jit_call``: calling ``cv.jit(lambda x: x + 1)`` on a small tensor (µs per call, the result
  tensor computed but not copied out);
* ``mlp_train``: one jitted training step of a 784-256-10 MLP, batch 128, cross-entropy, Adam
  written with tensor ops (ms per step); the loss must go down over the steps.

Each framework's runner builds its inputs once (untimed) and returns a ``call`` that does ``units``
units of work; the harness times ``call`` with the same min/median machinery as everywhere else and
reports the *minimum* per-unit time (these figures are microseconds: the minimum is the least
noisy estimate on a busy machine) next to the median.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass
class Prepared:
    call: Callable[[], Any]  # does ``units`` units of work, fully computed when it returns
    units: int
    check: Callable[[], str | None] = lambda: None  # after timing: None when fine, else what is wrong


@dataclass(frozen=True)
class Overhead:
    name: str
    description: str
    unit: str  # "us/op", "us/call", "ms/step"
    scale: float  # seconds per unit -> the unit (1e6 for µs, 1e3 for ms)
    target: float | None  # corvid's goal, in ``unit`` (None: none absolute, see peer_target)
    reference: str  # where the target comes from
    runners: dict[str, Callable[[bool], Prepared]]  # framework name -> (quick) -> Prepared
    # (peer, its time / corvid's time at least): a goal against a peer measured in the same run,
    # judged on the figures the table shows (the minimum per unit), only where that peer ran
    peer_target: tuple[str, float] | None = None


# --- graph building ---------------------------------------------------------------------------------

_CHAIN_SIZE = 16  # elements: small enough that building, not computing, is what costs


def _chain_len(quick: bool) -> int:
    return 50 if quick else 1000


def _chain(x: Any, n: int) -> Any:
    """``4 * (n // 4)`` small elementwise ops: tensor-scalar and tensor-tensor, binary and unary."""
    y = x
    for _ in range(n // 4):
        y = y * 0.5
        y = y + x
        y = np.tanh(y) if isinstance(y, np.ndarray) else y.tanh()
        y = y - x
    return y


def _graph_build_corvid(quick: bool) -> Prepared:
    import corvid as cv

    n = _chain_len(quick)
    x = cv.Tensor(np.ones(_CHAIN_SIZE, np.float32)).realize()

    def call() -> None:
        y = _chain(x, n)
        assert y.node.buffer is None  # built, not run
        del y  # the graph is freed inside the timed region, as a user's would be

    def check() -> str | None:
        y = _chain(x, 8)
        return None if np.all(np.isfinite(y.numpy())) else "the chain gave non-finite values"

    return Prepared(call, 4 * (n // 4), check)


def _graph_build_torch(quick: bool) -> Prepared:
    import torch

    n = _chain_len(quick)
    x = torch.ones(_CHAIN_SIZE)

    def call() -> None:
        with torch.no_grad():
            _chain(x, n)

    return Prepared(call, 4 * (n // 4))


def _graph_build_numpy(quick: bool) -> Prepared:
    n = _chain_len(quick)
    x = np.ones(_CHAIN_SIZE, np.float32)
    return Prepared(lambda: _chain(x, n), 4 * (n // 4))


GRAPH_BUILD = Overhead(
    "graph_build", f"build a chain of small elementwise ops on float32[{_CHAIN_SIZE}] (not run)",
    "us/op", 1e6, 5.0, "PyTorch eager: 3.8 us/op",
    {"corvid": _graph_build_corvid, "numpy": _graph_build_numpy, "torch": _graph_build_torch})


# --- a jitted one-op function -----------------------------------------------------------------------

def _calls(quick: bool) -> int:
    return 50 if quick else 1000


def _jit_call_corvid(quick: bool) -> Prepared:
    import corvid as cv

    n = _calls(quick)
    f = cv.jit(lambda x: x + 1)
    x = cv.Tensor(np.arange(_CHAIN_SIZE, dtype=np.float32)).realize()
    f(x)  # trace and compile outside the timed region
    last: list[Any] = [None]

    def call() -> None:
        for _ in range(n):
            y = f(x)
        last[0] = y

    def check() -> str | None:
        got = last[0].numpy()
        want = np.arange(_CHAIN_SIZE, dtype=np.float32) + 1
        if not np.array_equal(got, want):
            return f"jit(x + 1) gave {got}"
        if f.traces != 1:
            return f"traced {f.traces} times, expected once"
        return None

    return Prepared(call, n, check)


def _jit_call_torch(quick: bool) -> Prepared:  # eager: torch has no cheap jit to compare with
    import torch

    n = _calls(quick)
    f = lambda x: x + 1  # noqa: E731
    x = torch.arange(_CHAIN_SIZE, dtype=torch.float32)

    def call() -> None:
        for _ in range(n):
            f(x)

    return Prepared(call, n)


def _jit_call_jax(quick: bool) -> Prepared:
    import jax

    n = _calls(quick)
    f = jax.jit(lambda x: x + 1)
    x = jax.device_put(np.arange(_CHAIN_SIZE, dtype=np.float32))
    f(x).block_until_ready()

    def call() -> None:
        for _ in range(n):
            y = f(x)
        y.block_until_ready()

    return Prepared(call, n)


def _jit_call_numpy(quick: bool) -> Prepared:
    n = _calls(quick)
    x = np.arange(_CHAIN_SIZE, dtype=np.float32)

    def call() -> None:
        for _ in range(n):
            x + 1  # noqa: B018

    return Prepared(call, n)


JIT_CALL = Overhead(
    "jit_call", f"cv.jit(lambda x: x + 1) on float32[{_CHAIN_SIZE}] (torch/numpy: eager x + 1)",
    "us/call", 1e6, 5.0, "JAX jit: 7.6 us/call",
    {"corvid": _jit_call_corvid, "numpy": _jit_call_numpy, "torch": _jit_call_torch, "jax": _jit_call_jax})


# --- MLP training step ------------------------------------------------------------------------------

_LR, _B1, _B2, _EPS = 1e-3, 0.9, 0.999, 1e-8


def _mlp_sizes(quick: bool) -> tuple[int, int, int, int]:
    return (32, 16, 10, 8) if quick else (784, 256, 10, 128)  # in, hidden, classes, batch


def _mlp_data(quick: bool) -> dict[str, np.ndarray]:
    d_in, hid, cls, batch = _mlp_sizes(quick)
    rng = np.random.default_rng(0)
    return {
        "w1": (rng.standard_normal((d_in, hid)) / math.sqrt(d_in)).astype(np.float32),
        "b1": np.zeros(hid, np.float32),
        "w2": (rng.standard_normal((hid, cls)) / math.sqrt(hid)).astype(np.float32),
        "b2": np.zeros(cls, np.float32),
        "x": rng.standard_normal((batch, d_in), dtype=np.float32),
        "y": np.eye(cls, dtype=np.float32)[rng.integers(0, cls, batch)],  # one-hot labels
    }


_PARAMS = ("w1", "b1", "w2", "b2")


def _steps(quick: bool) -> int:
    return 3 if quick else 20


def _loss_check(losses: list[float]) -> str | None:
    if len(losses) < 2 or not all(math.isfinite(v) for v in losses):
        return f"losses {losses[:3]}... are not finite"
    return None if losses[-1] < losses[0] else f"the loss did not decrease: {losses[0]:.4f} -> {losses[-1]:.4f}"


def _mlp_corvid(quick: bool) -> Prepared:
    import corvid as cv

    data = _mlp_data(quick)
    params = [cv.Tensor(data[k]).realize() for k in _PARAMS]
    ms = [cv.zeros(p.shape).realize() for p in params]
    vs = [cv.zeros(p.shape).realize() for p in params]
    x, y = cv.Tensor(data["x"]).realize(), cv.Tensor(data["y"]).realize()

    def loss_fn(ps: list[Any], x: Any, y: Any) -> Any:
        w1, b1, w2, b2 = ps
        logits = (x @ w1 + b1).relu() @ w2 + b2
        return -(logits.log_softmax(-1) * y).sum(-1).mean()

    @cv.jit
    def step(ps: list[Any], ms: list[Any], vs: list[Any], corr: Any, x: Any, y: Any) -> Any:
        # corr = [lr * sqrt(1 - b2^t) / (1 - b1^t)]: Adam's bias correction folded into the step size
        loss, gs = cv.value_and_grad(loss_fn)(ps, x, y)
        new_p, new_m, new_v = [], [], []
        for p, g, m, v in zip(ps, gs, ms, vs):
            m = _B1 * m + (1 - _B1) * g
            v = _B2 * v + (1 - _B2) * (g * g)
            new_p.append(p - corr * m / (v.sqrt() + _EPS))
            new_m.append(m)
            new_v.append(v)
        return loss, new_p, new_m, new_v

    state = {"ps": params, "ms": ms, "vs": vs, "t": 0}
    losses: list[float] = []

    def one() -> Any:
        state["t"] += 1
        t = state["t"]
        corr = cv.Tensor(np.array(_LR * math.sqrt(1 - _B2 ** t) / (1 - _B1 ** t), np.float32))
        loss, state["ps"], state["ms"], state["vs"] = step(state["ps"], state["ms"], state["vs"], corr, x, y)
        return loss

    for _ in range(_steps(quick)):  # training run for the check (also traces and compiles once)
        losses.append(one().item())

    def call() -> None:
        one().realize()

    def check() -> str | None:
        if step.traces != 1:
            return f"the step was traced {step.traces} times, expected once"
        return _loss_check(losses)

    return Prepared(call, 1, check)


def _mlp_torch(quick: bool) -> Prepared:
    import torch

    data = _mlp_data(quick)
    params = [torch.tensor(data[k], requires_grad=True) for k in _PARAMS]
    ms = [torch.zeros_like(p) for p in params]
    vs = [torch.zeros_like(p) for p in params]
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    t = [0]
    losses: list[float] = []

    def one() -> Any:
        w1, b1, w2, b2 = params
        logits = torch.relu(x @ w1 + b1) @ w2 + b2
        loss = -(torch.log_softmax(logits, -1) * y).sum(-1).mean()
        gs = torch.autograd.grad(loss, params)
        t[0] += 1
        corr = _LR * math.sqrt(1 - _B2 ** t[0]) / (1 - _B1 ** t[0])
        with torch.no_grad():
            for p, g, m, v in zip(params, gs, ms, vs):
                m.mul_(_B1).add_(g, alpha=1 - _B1)
                v.mul_(_B2).addcmul_(g, g, value=1 - _B2)
                p.sub_(corr * m / (v.sqrt() + _EPS))
        return loss

    for _ in range(_steps(quick)):
        losses.append(one().item())
    return Prepared(one, 1, lambda: _loss_check(losses))


def _mlp_numpy(quick: bool) -> Prepared:
    data = _mlp_data(quick)
    params = [data[k].copy() for k in _PARAMS]
    ms = [np.zeros_like(p) for p in params]
    vs = [np.zeros_like(p) for p in params]
    x, y = data["x"], data["y"]
    t = [0]
    losses: list[float] = []

    def one() -> float:
        w1, b1, w2, b2 = params
        h_pre = x @ w1 + b1
        h = np.maximum(h_pre, 0)
        logits = h @ w2 + b2
        shifted = logits - logits.max(-1, keepdims=True)
        e = np.exp(shifted)
        s = e.sum(-1, keepdims=True)
        loss = float(-((shifted - np.log(s)) * y).sum(-1).mean())
        dlogits = (e / s * y.sum(-1, keepdims=True) - y) / x.shape[0]
        dh = (dlogits @ w2.T) * (h_pre > 0)
        gs = [x.T @ dh, dh.sum(0), h.T @ dlogits, dlogits.sum(0)]
        t[0] += 1
        corr = np.float32(_LR * math.sqrt(1 - _B2 ** t[0]) / (1 - _B1 ** t[0]))
        for p, g, m, v in zip(params, gs, ms, vs):
            m *= np.float32(_B1)
            m += np.float32(1 - _B1) * g
            v *= np.float32(_B2)
            v += np.float32(1 - _B2) * g * g
            p -= corr * m / (np.sqrt(v) + np.float32(_EPS))
        return loss

    for _ in range(_steps(quick)):
        losses.append(one())
    return Prepared(one, 1, lambda: _loss_check(losses))


MLP_TRAIN = Overhead(
    "mlp_train", "jitted MLP 784-256-10 training step, batch 128, cross-entropy, Adam (torch: eager)",
    "ms/step", 1e3, 1.2, "JAX jit: 1.2 ms/step",
    {"corvid": _mlp_corvid, "numpy": _mlp_numpy, "torch": _mlp_torch})


OVERHEADS: list[Overhead] = [GRAPH_BUILD, JIT_CALL, MLP_TRAIN]

"""Training-step workloads of issue 6: the MNIST CNN of the performance guide, batch 128, Adam.

* ``cnn_train``: corvid as ``examples/mnist.py`` runs it (``nn`` modules, a ``cv.jit`` step over
  the model pytree and the functional Adam); torch eager (``torch.nn`` + ``torch.optim.Adam``).
  Targets: PyTorch's 104 ms/step on the reference machine, and (issue 24) at least as fast as
  PyTorch eager measured in the same run (>= 1.0x torch). The loss must fall over the warm-up
  steps, and the jitted step must be traced once.
* After timing, corvid's runner trains on to 200 steps and fails the check if the process's
  resident memory grew by more than ``MEMORY_SLACK_MB`` after the first 20 (issue 6: "peak memory
  of a 200-step training run stays flat").
"""

from __future__ import annotations

import resource
from typing import Any

import numpy as np

from .transforms import Overhead, Prepared, _loss_check

_LR = 1e-3
MEMORY_SLACK_MB = 64  # allocator pools and caches may settle a little after the first steps


def _steps(quick: bool) -> int:
    return 3 if quick else 10


def _batch(quick: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    n = 8 if quick else 128
    x = rng.random((n, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, n)
    x[np.arange(n), 0, y * 2 + 4, 4:24] += 2.0  # a learnable pattern: the label draws a line
    return x, y


def rss_mb() -> float:
    """The current resident set size in MB (Linux), else the peak."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2 ** 20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cnn_corvid(quick: bool) -> Prepared:
    import corvid as cv
    from examples.mnist import CNN, make_step  # the example's own step, not a copy of it

    cv.manual_seed(0)
    model = CNN()
    tx = cv.optim.Adam.functional(lr=_LR)
    state = {"model": model, "opt": tx.init(model)}
    xn, yn = _batch(quick)
    x, y = cv.Tensor(xn).realize(), cv.Tensor(yn).realize()
    step = make_step(tx)

    def one() -> Any:
        state["model"], state["opt"], loss = step(state["model"], state["opt"], x, y)
        return loss

    losses = [one().item() for _ in range(_steps(quick))]

    def call() -> None:
        one().realize()

    def check() -> str | None:
        if step.traces != 1:
            return f"the step was traced {step.traces} times, expected once"
        # issue 6: memory stays flat over a 200-step run (no growth after the first steps)
        steps = 20 if quick else 200
        for _ in range(steps // 10):
            one().realize()
        start = rss_mb()
        for _ in range(steps - steps // 10):
            one().realize()
        growth = rss_mb() - start
        if growth > MEMORY_SLACK_MB:
            return f"resident memory grew by {growth:.0f} MB over {steps} steps"
        return _loss_check(losses)

    return Prepared(call, 1, check)


def torch_cnn() -> Any:
    """The same CNN in ``torch.nn`` (examples/mnist.py's layers), on the CPU."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 32, 5), nn.ReLU(), nn.Conv2d(32, 32, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 3 * 3, 10))


def _cnn_torch(quick: bool) -> Prepared:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = torch_cnn()
    opt = torch.optim.Adam(model.parameters(), lr=_LR)
    xn, yn = _batch(quick)
    x, y = torch.from_numpy(xn), torch.from_numpy(yn)

    def one() -> Any:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    losses = [one().item() for _ in range(_steps(quick))]
    return Prepared(one, 1, lambda: _loss_check(losses))


CNN_TRAIN = Overhead(
    "cnn_train", "MNIST CNN training step (examples/mnist.py), batch 128, Adam (torch: eager nn + optim)",
    "ms/step", 1e3, 104.0, "PyTorch eager: 104 ms/step",
    {"corvid": _cnn_corvid, "torch": _cnn_torch}, peer_target=("torch", 1.0))

"""The default heuristics against no optimization, kernel by kernel (issue 5: the heuristics never
produce a slower kernel than no optimization on the benchmark set).

Every kernel of the benchmark workloads (at sizes where the unoptimized kernel still runs in
milliseconds) and of one training step of the MNIST CNN is built twice: with no actions, and with
the actions :func:`~corvid.codegen.opt.apply_heuristics` chooses; both get the IR passes that
every kernel gets. Where the two sources differ, both are compiled, run on the same random
inputs (their results must agree) and timed alternately, kernel calls only; the minimum of each
counts, and a kernel that comes out slower is timed again, longer.
``python -m benchmarks --heuristics`` prints the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

SLACK = 1.10        # the heuristics' kernel may take this much longer than the plain one (timing noise)
SLACK_S = 20e-6     # plus this much (launch noise on tiny kernels)


def _builds(cv: Any, quick: bool) -> list[tuple[str, Any]]:
    """(name, lazy corvid tensor) for each workload of the check."""
    from .latency import cnn_params, cnn_step

    rng = np.random.default_rng(0)

    def t(*shape: int) -> Any:
        return cv.Tensor(rng.standard_normal(shape, dtype=np.float32)).realize()

    s = 1 if quick else 4
    x, a, b = t(1 << (12 + 2 * s)), t(64 * s, 64 * s), t(64 * s, 64 * s)
    img, w = t(2, 8, 8 * s, 8 * s), t(8, 8, 3, 3)
    out = [("elementwise_chain", ((x * 1.5 + 0.5).relu() * x).exp()), ("sum", x.sum()),
           ("softmax", a.softmax(-1)), ("matmul", a @ b), ("matmul_awkward", t(29, 64) @ t(64, 40)),
           ("conv2d", cv.conv2d(img, w, padding=1))]
    ps = [cv.Tensor(p) for p in cnn_params(rng, quick=True)]
    m, v = [cv.zeros(p.shape) for p in ps], [cv.zeros(p.shape) for p in ps]
    imgs, labels = t(8, 1, 28, 28), cv.Tensor(rng.integers(0, 10, 8))
    loss, new_ps, _, _ = cnn_step(cv)(ps, m, v, imgs, labels, 1)
    out += [("cnn_step", loss)] + [(f"cnn_step_param{i}", p) for i, p in enumerate(new_ps)]
    return out


@dataclass
class KernelCheck:
    workload: str
    kernel: str
    opts: str
    plain_s: float
    heuristic_s: float

    @property
    def ok(self) -> bool:
        return self.heuristic_s <= self.plain_s * SLACK + SLACK_S


def _time_pair(runner: Any, progs: list[Any], rounds: int) -> tuple[float, float]:
    """Best kernel time of each program over ``rounds`` alternating rounds (each round takes the
    best of the runner's own few runs: the kernel and its launch, not the Python around it)."""
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for i, prog in enumerate(progs):
            best[i] = min(best[i], runner.run(prog, None)[1])
    return best[0], best[1]


def check_heuristics(quick: bool = False, runs: int = 7, retry_runs: int = 40) -> list[KernelCheck]:
    """Compare every kernel the heuristics change with its unoptimized form (see module docstring).

    A kernel that comes out slower is timed again over ``retry_runs`` rounds (timing noise on a
    loaded machine: a test worker beside it); the second measurement is the one reported."""
    import corvid as cv
    from corvid.codegen.ir import Kernel
    from corvid.codegen.lower import lower_unmerged, merge_loops
    from corvid.codegen.opt import apply_heuristics
    from corvid.codegen.passes import finalize
    from corvid.codegen.search import _Runner, _same
    from corvid.runtime.device import get_device

    dev = get_device("CPU")
    results: list[KernelCheck] = []
    timed: list[tuple[Any, list[Any]]] = []
    seen: set[str] = set()
    for name, tensor in _builds(cv, quick):
        for sk in tensor.schedule():
            if type(sk.kernel) is not Kernel:  # (a scatter or a host step, not a generated kernel)
                continue
            base = merge_loops(lower_unmerged(sk.name, list(sk.outputs), sk.inputs)[0])
            plain, tuned = finalize(base), finalize(apply_heuristics(base))
            src_plain, src_tuned = dev.renderer.render(plain), dev.renderer.render(tuned)
            if src_plain == src_tuned or src_tuned in seen:
                continue
            seen.add(src_tuned)
            runner = _Runner.make(base, "CPU")
            progs = [dev.compile(k, src) for k, src in ((plain, src_plain), (tuned, src_tuned))]
            outs = [runner.run(p, None)[0] for p in progs]
            if not _same(outs[1], outs[0]):
                raise AssertionError(f"{name}/{sk.name}: the heuristics' kernel computes a different result")
            plain_s, tuned_s = _time_pair(runner, progs, runs)
            results.append(KernelCheck(name, sk.name, " ".join(map(str, tuned.opts)), plain_s, tuned_s))
            timed.append((runner, progs))
    for i, (r, (runner, progs)) in enumerate(zip(results, timed)):
        if not r.ok:
            results[i] = KernelCheck(r.workload, r.kernel, r.opts, *_time_pair(runner, progs, retry_runs))
    return results


def report(results: list[KernelCheck], out: TextIO) -> None:
    rows = [("workload", "kernel", "no actions", "heuristics", "speedup", "actions")]
    for r in results:
        rows.append((r.workload, r.kernel, f"{r.plain_s * 1e3:.3f} ms", f"{r.heuristic_s * 1e3:.3f} ms",
                     f"{r.plain_s / r.heuristic_s:.2f}x" + ("" if r.ok else " SLOWER"), r.opts))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip(), file=out)
    bad = [r for r in results if not r.ok]
    print(f"{len(results)} kernels changed by the heuristics; "
          + (f"{len(bad)} slower than without actions" if bad else "none slower than without actions")
          + f" (allowing {SLACK - 1:.0%} + {SLACK_S * 1e6:g} us of timing noise).", file=out)

"""``cv.profile()``: how long each kernel that a block of code runs takes, on its device.

>>> x = cv.randn(256, 256).realize()
>>> with cv.profile() as prof:
...     y = ((x @ x).relu() + 1).sum(axis=0).realize()
>>> [(k.name, k.device, k.flops) for k in prof.kernels]  # (the product; relu, +1 and the sum fused)
[('r_256_256', 'CPU', 33554432), ('r_256', 'CPU', 196608)]
>>> prof.total > 0
True

Inside the block, every kernel launched by a realize or a ``jit`` call is timed where it runs:
on the CPU by the wall clock around it (kernels run synchronously there), on a CUDA GPU by a
pair of CUDA events around its launch on the stream (the GPU's own time, with no synchronize
between kernels; the events are read when the block ends). Work is lazy: realize what you want
measured inside the block (``.realize()``, ``.numpy()``, ``.item()``). ``jit`` programs that
would replay as one device graph launch kernel by kernel while a profile runs, so that each is
seen. One profile runs at a time in a process.

``prof.kernels`` lists each launch (:class:`KernelTime`: name, device, seconds, the kernel's
estimated float operations and bytes); ``prof.summary()`` adds them up per kernel name, and
``prof.table()`` prints that, costliest first, with GFLOP/s, GB/s and each one's share of the
total, which is where a step's time goes (``python -m benchmarks --gpu`` prints it for its
training steps).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["KernelTime", "Profile", "profile"]

_lock = threading.Lock()
_ACTIVE: Profile | None = None  # (read on every launch: None is the fast path)


@dataclass(frozen=True)
class KernelTime:
    """One launch: the kernel's ``name``, its ``device``, the ``seconds`` it took there, and its
    estimated float operations (``flops``) and bytes read and written (``nbytes``: each buffer
    once; 0 where the kernel has no estimate, a library call or a host step)."""

    name: str
    device: str
    seconds: float
    flops: int
    nbytes: int


@dataclass(frozen=True)
class KernelSummary:
    """The launches of one kernel name on one device, added up."""

    name: str
    device: str
    calls: int
    seconds: float
    flops: int
    nbytes: int


class Profile:
    """What :func:`profile` measured (complete once its block has ended)."""

    def __init__(self) -> None:
        self._pending: list[tuple[str, str, int, int, Callable[[], float]]] = []
        self.kernels: list[KernelTime] = []
        self.wall: float = 0.0  # seconds the block took on the host clock

    def record(self, name: str, device: str, kernel: Any, run: Callable[[], None]) -> None:
        """Run ``run()`` (which launches the kernel ``name`` on ``device``) and time it there."""
        from .runtime.device import get_device

        estimates = getattr(kernel, "estimates", None)
        try:
            flops, nbytes = estimates() if estimates is not None else (0, 0)
        except Exception:  # noqa: BLE001  (an estimate is a nicety: never fail the launch over it)
            flops, nbytes = 0, 0
        dev = get_device(device)
        timer = getattr(dev, "time_launch", None)
        resolve = timer(run) if timer is not None else _wall(dev, run)
        self._pending.append((name, device, int(flops), int(nbytes), resolve))

    def _finish(self) -> None:
        for name, device, flops, nbytes, resolve in self._pending:
            self.kernels.append(KernelTime(name, device, resolve(), flops, nbytes))
        self._pending.clear()

    @property
    def total(self) -> float:
        """Seconds of all the kernels together (device time)."""
        return sum(k.seconds for k in self.kernels)

    def summary(self) -> list[KernelSummary]:
        """Per kernel name and device: calls, seconds, flops and bytes added up; costliest first."""
        out: dict[tuple[str, str], list] = {}
        for k in self.kernels:
            s = out.setdefault((k.name, k.device), [0, 0.0, 0, 0])
            s[0] += 1
            s[1] += k.seconds
            s[2] += k.flops
            s[3] += k.nbytes
        rows = [KernelSummary(n, d, c, t, f, b) for (n, d), (c, t, f, b) in out.items()]
        return sorted(rows, key=lambda r: -r.seconds)

    def table(self, top: int | None = 20) -> str:
        """The summary as text: the ``top`` costliest kernel names (None: all), then the total."""
        rows = self.summary()
        total = self.total or 1e-30
        lines = [f"{'kernel':<36} {'device':<7} {'calls':>5} {'total ms':>10} {'share':>6} {'GFLOP/s':>9} {'GB/s':>8}"]
        for r in rows[:top] if top is not None else rows:
            s = max(r.seconds, 1e-12)
            lines.append(f"{r.name[:36]:<36} {r.device[:7]:<7} {r.calls:>5} {r.seconds * 1e3:>10.3f} "
                         f"{r.seconds / total * 100:>5.1f}% {r.flops / s / 1e9:>9.1f} {r.nbytes / s / 1e9:>8.1f}")
        rest = rows[top:] if top is not None else []
        if rest:
            lines.append(f"{f'({len(rest)} more kernel names)':<36} {'':<7} {sum(r.calls for r in rest):>5} "
                         f"{sum(r.seconds for r in rest) * 1e3:>10.3f} {sum(r.seconds for r in rest) / total * 100:>5.1f}%")
        lines.append(f"{'total':<36} {'':<7} {len(self.kernels):>5} {self.total * 1e3:>10.3f} 100.0%"
                     f"   (block: {self.wall * 1e3:.3f} ms on the host clock)")
        return "\n".join(lines)


def _wall(dev: Any, run: Callable[[], None]) -> Callable[[], float]:
    """A device without its own timer: the wall clock around ``run()``, the device synchronized
    before and after (exact for the CPU, which runs kernels as they are called)."""
    dev.synchronize()
    t0 = time.perf_counter()
    run()
    dev.synchronize()
    seconds = time.perf_counter() - t0
    return lambda: seconds


def active() -> Profile | None:
    """The running profile, if any (what the launch sites check)."""
    return _ACTIVE


@contextmanager
def profile() -> Iterator[Profile]:
    """Time every kernel launched inside the block (see the module docstring); the
    :class:`Profile` it yields is complete when the block ends. RuntimeError if a profile is
    running already.

    >>> step = cv.jit(lambda w, x: ((x @ w).tanh() ** 2).mean())
    >>> w, x = cv.randn(64, 64).realize(), cv.randn(32, 64).realize()
    >>> _ = step(w, x)  # (traced and compiled outside the block)
    >>> with cv.profile() as prof:
    ...     for _ in range(3):
    ...         loss = step(w, x).item()
    >>> [(s.calls, s.flops > 0) for s in prof.summary()][:1]
    [(3, True)]
    >>> print(prof.table(top=1).splitlines()[0])
    kernel                               device  calls   total ms  share   GFLOP/s     GB/s
    """
    global _ACTIVE
    with _lock:
        if _ACTIVE is not None:
            raise RuntimeError("cv.profile: a profile is running already (one at a time per process)")
        prof = _ACTIVE = Profile()
    t0 = time.perf_counter()
    try:
        yield prof
    finally:
        with _lock:
            _ACTIVE = None
        prof._finish()  # (waits for the last kernel: the block's wall time includes it)
        prof.wall = time.perf_counter() - t0

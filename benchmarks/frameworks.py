"""The frameworks a benchmark can run on, behind one small adapter each.

An adapter turns numpy inputs into the framework's own arrays once, before timing (so input copies
are never timed), makes sure a result is fully computed inside the timed region (``finish``), and
turns a result back into numpy for the correctness check. Peers that are not installed are skipped.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class Framework:
    name: str
    version: str
    to_native: Callable[[np.ndarray], Any]
    finish: Callable[[Any], Any]  # block until the result's value exists; called inside the timed region
    to_numpy: Callable[[Any], np.ndarray]
    wrap: Callable[[Callable], Callable] = lambda fn: fn  # e.g. jax.jit
    ops: str = ""  # which of a workload's implementations it runs (default: ``name``'s)

    @property
    def impl(self) -> str:
        return self.ops or self.name


def _corvid() -> Framework:
    import corvid as cv

    return Framework("corvid", cv.__version__, to_native=lambda a: cv.Tensor(a).realize(),
                     finish=lambda t: t.realize(), to_numpy=lambda t: t.numpy())


def _corvid_on(device: str) -> Framework:
    """corvid's implementation with its inputs on ``device`` (``corvid@CL``): the ops follow
    their inputs there. A sanity check of a backend against the CPU one, not a peer."""
    import corvid as cv

    def on_device(fn: Callable) -> Callable:  # what the workload creates itself goes there too
        scope = getattr(cv, "default_device", None)
        if scope is None:
            return fn
        return lambda *args: _scoped(scope, device, fn, args)

    from corvid.runtime.device import get_device

    def finish(t: Any) -> Any:  # (launches are asynchronous on such a device: wait for them)
        t.realize()
        get_device(device).synchronize()
        return t

    return Framework(f"corvid@{device}", cv.__version__, to_native=lambda a: cv.Tensor(a, device=device).realize(),
                     finish=finish, to_numpy=lambda t: t.numpy(), wrap=on_device, ops="corvid")


def _scoped(scope: Callable, device: str, fn: Callable, args: tuple) -> Any:
    with scope(device):
        return fn(*args)


def device_frameworks(devices: str) -> tuple[list[Framework], list[str]]:
    """corvid on each executing device other than the CPU that ``devices`` names ("all": every
    registered one that starts here; "CPU": none), and the ones that could not start."""
    from corvid.runtime.device import _BACKENDS, canonical_device, get_device

    names = [d for d in _BACKENDS if d not in ("CPU", "NULL")] if devices == "all" else \
        [canonical_device(d.strip()) for d in devices.split(",") if d.strip()]
    found, skipped = [], []
    for name in names:
        if name.startswith("CPU"):
            continue
        try:
            get_device(name)
        except (ImportError, RuntimeError, OSError) as e:
            skipped.append(f"corvid@{name} ({e})")
            continue
        found.append(_corvid_on(name))
    return found, skipped


def _numpy() -> Framework:
    return Framework("numpy", np.__version__, to_native=lambda a: a, finish=lambda a: a,
                     to_numpy=np.asarray)


def _torch() -> Framework:
    import torch

    return Framework("torch", torch.__version__, to_native=lambda a: torch.from_numpy(a.copy()),
                     finish=lambda t: t, to_numpy=lambda t: t.numpy())


def _jax() -> Framework:
    import jax

    return Framework("jax", jax.__version__, to_native=lambda a: jax.device_put(a).block_until_ready(),
                     finish=lambda a: a.block_until_ready(), to_numpy=np.asarray, wrap=jax.jit)


_OPTIONAL = {"torch": _torch, "jax": _jax}


def available_frameworks() -> tuple[list[Framework], list[str]]:
    """(corvid, numpy and the installed peers; the names of the peers that were skipped)."""
    found, skipped = [_corvid(), _numpy()], []
    for name, make in _OPTIONAL.items():
        if importlib.util.find_spec(name) is None:
            skipped.append(f"{name} (not installed)")
            continue
        try:
            found.append(make())
        except Exception as e:  # a broken install must not stop the other measurements
            skipped.append(f"{name} (import failed: {type(e).__name__}: {e})")
    return found, skipped

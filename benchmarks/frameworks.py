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


def _corvid() -> Framework:
    import corvid as cv

    return Framework("corvid", cv.__version__, to_native=lambda a: cv.Tensor(a).realize(),
                     finish=lambda t: t.realize(), to_numpy=lambda t: t.numpy())


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

"""Helpers the PyTorch-style methods share."""

from __future__ import annotations

from typing import Any, NamedTuple

from ...tensor import Tensor


class MinMax(NamedTuple):
    """What ``aminmax`` returns (PyTorch's field names)."""

    min: Tensor
    max: Tensor


def _tensor(like: Tensor, x: Any) -> Tensor:
    """``x`` as a tensor on ``like``'s device (a Tensor is returned as is)."""
    return x if isinstance(x, Tensor) else Tensor(x, device=like.device)


def _int_arg(value: Any, what: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    return int(value.__index__())


_DEVICE_TO = Tensor.to  # the device-only ``to`` that corvid's own code calls (before _attach replaces it)

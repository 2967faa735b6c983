"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..tensor import Tensor
from .optimizer import Optimizer, Scalar, zeros_slot


class SGD(Optimizer):
    """Gradient descent, as PyTorch's ``SGD``: with ``g = grad + weight_decay * p``,

    ``buf = momentum * buf + (1 - dampening) * g`` (``buf = g`` on the first step), then
    ``p -= lr * (g + momentum * buf if nesterov else buf)``; without momentum ``p -= lr * g``.

    ``nesterov`` needs ``momentum > 0`` and ``dampening == 0`` (ValueError). State per parameter:
    ``momentum_buffer`` when ``momentum != 0``.

    >>> w = cv.Tensor([1.0], requires_grad=True)
    >>> opt = SGD([w], lr=0.1, momentum=0.9)
    >>> for _ in range(2):
    ...     opt.zero_grad(); (w * w).sum().backward(); opt.step()
    >>> round(w.item(), 4)   # 1 - 0.2 = 0.8, then 0.8 - 0.1 * (0.9 * 2 + 1.6)
    0.46
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov})

    @classmethod
    def _check(cls, hp: dict[str, Any]) -> None:
        super()._check(hp)
        if hp["momentum"] < 0 or hp["weight_decay"] < 0:
            raise ValueError(f"momentum and weight_decay must be non-negative, got {hp['momentum']}, "
                             f"{hp['weight_decay']}")
        if hp["nesterov"] and (hp["momentum"] <= 0 or hp["dampening"] != 0):
            raise ValueError("Nesterov momentum needs momentum > 0 and dampening = 0")

    @classmethod
    def _slots(cls, p: Tensor, hp: dict[str, Any]) -> dict[str, Tensor]:
        return {"momentum_buffer": zeros_slot(p)} if hp["momentum"] else {}

    @classmethod
    def _scalars(cls, t: int | Tensor, hp: dict[str, Any]) -> dict[str, Scalar]:
        # the buffer starts at zero, so scaling g by 1 on the first step makes it equal g there
        later = t > 1 if isinstance(t, int) else (t > 1).astype(t.dtype)
        return {"lr": hp["lr"], "g_scale": 1 - hp["dampening"] * later}

    @classmethod
    def _update(cls, p: Tensor, g: Tensor, slots: dict[str, Tensor], hp: dict[str, Any],
                s: dict[str, Scalar]) -> tuple[Tensor, dict[str, Tensor]]:
        if hp["weight_decay"]:
            g = g + hp["weight_decay"] * p
        if not hp["momentum"]:
            return p - s["lr"] * g, {}
        buf = hp["momentum"] * slots["momentum_buffer"] + s["g_scale"] * g
        direction = g + hp["momentum"] * buf if hp["nesterov"] else buf
        return p - s["lr"] * direction, {"momentum_buffer": buf}

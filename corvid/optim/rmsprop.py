"""Optimizers that divide by an accumulated square of the gradient: RMSprop and Adagrad."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..tensor import Tensor
from .optimizer import Optimizer, Scalar, zeros_slot


class RMSprop(Optimizer):
    """RMSprop, as PyTorch's: with ``g = grad + weight_decay * p``, ``sq = alpha sq + (1 - alpha) g**2``
    and ``avg = sqrt(sq) + eps`` (``centered=True``: ``sqrt(sq - mean_g**2) + eps`` with
    ``mean_g = alpha mean_g + (1 - alpha) g``); then ``p -= lr * g / avg``, or with momentum
    ``buf = momentum buf + g / avg`` and ``p -= lr * buf``.

    State per parameter: ``square_avg``, plus ``grad_avg`` (centered) and ``momentum_buffer``.

    >>> w = cv.Tensor([1.0], requires_grad=True)
    >>> opt = RMSprop([w], lr=0.01, alpha=0.0)
    >>> (w * w).sum().backward(); opt.step()   # alpha 0: g / |g| = 1
    >>> round(w.item(), 4)
    0.99
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False):
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay,
                                  "momentum": momentum, "centered": centered})

    @classmethod
    def _check(cls, hp: dict[str, Any]) -> None:
        super()._check(hp)
        if not 0 <= hp["alpha"] <= 1:
            raise ValueError(f"alpha must be in [0, 1], got {hp['alpha']}")
        if hp["eps"] < 0 or hp["weight_decay"] < 0 or hp["momentum"] < 0:
            raise ValueError("eps, weight_decay and momentum must be non-negative")

    @classmethod
    def _slots(cls, p: Tensor, hp: dict[str, Any]) -> dict[str, Tensor]:
        slots = {"square_avg": zeros_slot(p)}
        if hp["centered"]:
            slots["grad_avg"] = zeros_slot(p)
        if hp["momentum"]:
            slots["momentum_buffer"] = zeros_slot(p)
        return slots

    @classmethod
    def _update(cls, p: Tensor, g: Tensor, slots: dict[str, Tensor], hp: dict[str, Any],
                s: dict[str, Scalar]) -> tuple[Tensor, dict[str, Tensor]]:
        a = hp["alpha"]
        if hp["weight_decay"]:
            g = g + hp["weight_decay"] * p
        new = {"square_avg": a * slots["square_avg"] + (1 - a) * g * g}
        second = new["square_avg"]
        if hp["centered"]:
            new["grad_avg"] = a * slots["grad_avg"] + (1 - a) * g
            second = second - new["grad_avg"] * new["grad_avg"]
        step = g / (second.sqrt() + hp["eps"])
        if hp["momentum"]:
            new["momentum_buffer"] = step = hp["momentum"] * slots["momentum_buffer"] + step
        return p - s["lr"] * step, new


class Adagrad(Optimizer):
    """Adagrad, as PyTorch's: with ``g = grad + weight_decay * p``, ``sum += g**2`` and
    ``p -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(sum) + eps)``.

    State per parameter: ``sum`` (starting at ``initial_accumulator_value``).

    >>> w = cv.Tensor([1.0], requires_grad=True)
    >>> opt = Adagrad([w], lr=0.5)
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.item(), 4)
    0.5
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10):
        super().__init__(params, {"lr": lr, "lr_decay": lr_decay, "weight_decay": weight_decay,
                                  "initial_accumulator_value": initial_accumulator_value, "eps": eps})

    @classmethod
    def _check(cls, hp: dict[str, Any]) -> None:
        super()._check(hp)
        if min(hp["lr_decay"], hp["weight_decay"], hp["initial_accumulator_value"], hp["eps"]) < 0:
            raise ValueError("lr_decay, weight_decay, initial_accumulator_value and eps must be non-negative")

    @classmethod
    def _slots(cls, p: Tensor, hp: dict[str, Any]) -> dict[str, Tensor]:
        return {"sum": zeros_slot(p, hp["initial_accumulator_value"])}

    @classmethod
    def _scalars(cls, t: int | Tensor, hp: dict[str, Any]) -> dict[str, Scalar]:
        return {"lr": hp["lr"] / (1 + (t - 1) * hp["lr_decay"])}

    @classmethod
    def _update(cls, p: Tensor, g: Tensor, slots: dict[str, Tensor], hp: dict[str, Any],
                s: dict[str, Scalar]) -> tuple[Tensor, dict[str, Tensor]]:
        if hp["weight_decay"]:
            g = g + hp["weight_decay"] * p
        total = slots["sum"] + g * g
        return p - s["lr"] * g / (total.sqrt() + hp["eps"]), {"sum": total}

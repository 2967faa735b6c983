"""Lion (Chen et al., 2023): the sign of an interpolated momentum."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..tensor import Tensor
from .optimizer import Optimizer, Scalar, zeros_slot


class Lion(Optimizer):
    """Lion: ``c = b1 m + (1 - b1) g``; ``p = p (1 - lr weight_decay) - lr sign(c)``;
    ``m = b2 m + (1 - b2) g``. Every coordinate moves by exactly ``lr`` (plus decay), so it
    wants a learning rate 3-10x smaller than AdamW's. State per parameter: ``exp_avg``.

    >>> w = cv.Tensor([1.0, -2.0], requires_grad=True)
    >>> opt = Lion([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> [round(v, 4) for v in w.tolist()]
    [0.9, -1.9]
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99),
                 weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay})

    @classmethod
    def _check(cls, hp: dict[str, Any]) -> None:
        super()._check(hp)
        b1, b2 = hp["betas"]
        if not (0 <= b1 <= 1 and 0 <= b2 <= 1):
            raise ValueError(f"betas must be in [0, 1], got {hp['betas']}")
        if hp["weight_decay"] < 0:
            raise ValueError(f"weight_decay must be non-negative, got {hp['weight_decay']}")

    @classmethod
    def _slots(cls, p: Tensor, hp: dict[str, Any]) -> dict[str, Tensor]:
        return {"exp_avg": zeros_slot(p)}

    @classmethod
    def _scalars(cls, t: int | Tensor, hp: dict[str, Any]) -> dict[str, Scalar]:
        return {"lr": hp["lr"], "decay": 1 - hp["lr"] * hp["weight_decay"]}

    @classmethod
    def _update(cls, p: Tensor, g: Tensor, slots: dict[str, Tensor], hp: dict[str, Any],
                s: dict[str, Scalar]) -> tuple[Tensor, dict[str, Tensor]]:
        b1, b2 = hp["betas"]
        m = slots["exp_avg"]
        direction = (b1 * m + (1 - b1) * g).sign()
        if hp["weight_decay"]:
            p = p * s["decay"]
        return p - s["lr"] * direction, {"exp_avg": b2 * m + (1 - b2) * g}

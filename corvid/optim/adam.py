"""Adam and the optimizers built on its moment estimates: Adam, AdamW (decoupled weight decay)
and LAMB (layer-wise trust ratio)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ..ops.elementwise import where
from ..tensor import Tensor
from .optimizer import Optimizer, Scalar, zeros_slot


def _sqrt(x: Scalar) -> Scalar:
    return x.sqrt() if isinstance(x, Tensor) else math.sqrt(x)


class Adam(Optimizer):
    """Adam, as PyTorch's: with ``g = grad + weight_decay * p`` (L2 penalty),

    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g**2``, and
    ``p -= lr / (1 - b1**t) * m / (sqrt(v / (1 - b2**t)) + eps)``. ``amsgrad=True`` uses the
    running maximum of ``v`` in the denominator. State per parameter: ``exp_avg``,
    ``exp_avg_sq`` (and ``max_exp_avg_sq``).

    >>> w = cv.Tensor([1.0, -1.0], requires_grad=True)
    >>> opt = Adam([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> [round(v, 4) for v in w.tolist()]   # the first step moves each weight by lr
    [0.9, -0.9]
    """

    decoupled = False

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad})

    @classmethod
    def _check(cls, hp: dict[str, Any]) -> None:
        super()._check(hp)
        b1, b2 = hp["betas"]
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"betas must be in [0, 1), got {hp['betas']}")
        if hp["eps"] < 0 or hp["weight_decay"] < 0:
            raise ValueError(f"eps and weight_decay must be non-negative, got {hp['eps']}, {hp['weight_decay']}")

    @classmethod
    def _slots(cls, p: Tensor, hp: dict[str, Any]) -> dict[str, Tensor]:
        slots = {"exp_avg": zeros_slot(p), "exp_avg_sq": zeros_slot(p)}
        if hp.get("amsgrad"):
            slots["max_exp_avg_sq"] = zeros_slot(p)
        return slots

    @classmethod
    def _scalars(cls, t: int | Tensor, hp: dict[str, Any]) -> dict[str, Scalar]:
        b1, b2 = hp["betas"]
        s = {"step_size": hp["lr"] / (1 - b1 ** t), "inv_sqrt_bc2": 1 / _sqrt(1 - b2 ** t)}
        if cls.decoupled:
            s["decay"] = 1 - hp["lr"] * hp["weight_decay"]
        return s

    @classmethod
    def _moments(cls, g: Tensor, slots: dict[str, Tensor], hp: dict[str, Any]) -> dict[str, Tensor]:
        b1, b2 = hp["betas"]
        new = {"exp_avg": b1 * slots["exp_avg"] + (1 - b1) * g,
               "exp_avg_sq": b2 * slots["exp_avg_sq"] + (1 - b2) * g * g}
        if "max_exp_avg_sq" in slots:
            new["max_exp_avg_sq"] = slots["max_exp_avg_sq"].maximum(new["exp_avg_sq"])
        return new

    @classmethod
    def _update(cls, p: Tensor, g: Tensor, slots: dict[str, Tensor], hp: dict[str, Any],
                s: dict[str, Scalar]) -> tuple[Tensor, dict[str, Tensor]]:
        if cls.decoupled:
            if hp["weight_decay"]:
                p = p * s["decay"]
        elif hp["weight_decay"]:
            g = g + hp["weight_decay"] * p
        new = cls._moments(g, slots, hp)
        second = new.get("max_exp_avg_sq", new["exp_avg_sq"])
        return p - s["step_size"] * new["exp_avg"] / (second.sqrt() * s["inv_sqrt_bc2"] + hp["eps"]), new


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), as PyTorch's ``AdamW``: each step
    first scales ``p`` by ``1 - lr * weight_decay``, then takes the Adam step on the plain gradient.

    >>> w = cv.Tensor([1.0], requires_grad=True)
    >>> opt = AdamW([w], lr=0.1, weight_decay=0.5)
    >>> (w * 0).sum().backward(); opt.step()     # zero gradient: only the decay acts
    >>> round(w.item(), 4)
    0.95
    """

    decoupled = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)


class LAMB(Adam):
    """LAMB (You et al., 2019): the bias-corrected Adam direction plus decoupled weight decay,
    ``r = m_hat / (sqrt(v_hat) + eps) + weight_decay * p``, scaled per tensor by the trust ratio
    ``phi(||p||) / ||r||``: ``p -= lr * phi(||p||) / ||r|| * r``. The ratio is 1 when either norm
    is 0 (a zero-initialized bias moves by ``lr * r``; a zero update leaves ``p`` alone).

    ``phi`` is the paper's scaling function ``min(max(z, lower), upper)`` with
    ``norm_bounds=(lower, upper)``; the default ``(0, inf)`` makes it the identity. Each parameter
    tensor is one "layer". State as :class:`Adam` (without amsgrad). ValueError for bounds that
    are not ``0 <= lower <= upper``.

    >>> w = cv.Tensor([3.0, 4.0], requires_grad=True)
    >>> opt = LAMB([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> [round(v, 4) for v in w.tolist()]   # r = [1, 1]: a step of lr * ||w|| = 0.5 along it
    [2.6464, 3.6464]
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0, norm_bounds: tuple[float, float] = (0.0, math.inf)):
        Optimizer.__init__(self, params, {"lr": lr, "betas": tuple(betas), "eps": eps,
                                          "weight_decay": weight_decay, "norm_bounds": tuple(norm_bounds)})

    @classmethod
    def _check(cls, hp: dict[str, Any]) -> None:
        super()._check(hp)
        bounds = tuple(hp["norm_bounds"])
        if len(bounds) != 2 or not 0 <= bounds[0] <= bounds[1]:
            raise ValueError(f"LAMB: norm_bounds must be (lower, upper) with 0 <= lower <= upper, got {bounds}")

    @classmethod
    def _scalars(cls, t: int | Tensor, hp: dict[str, Any]) -> dict[str, Scalar]:
        b1, b2 = hp["betas"]
        return {"lr": hp["lr"], "inv_bc1": 1 / (1 - b1 ** t), "inv_sqrt_bc2": 1 / _sqrt(1 - b2 ** t)}

    @classmethod
    def _update(cls, p: Tensor, g: Tensor, slots: dict[str, Tensor], hp: dict[str, Any],
                s: dict[str, Scalar]) -> tuple[Tensor, dict[str, Tensor]]:
        new = cls._moments(g, slots, hp)
        r = new["exp_avg"] * s["inv_bc1"] / (new["exp_avg_sq"].sqrt() * s["inv_sqrt_bc2"] + hp["eps"])
        if hp["weight_decay"]:
            r = r + hp["weight_decay"] * p
        p_norm, r_norm = p.square().sum().sqrt(), r.square().sum().sqrt()
        lower, upper = hp["norm_bounds"]
        if lower > 0 or upper < math.inf:
            p_norm = p_norm.clip(lower, upper)
        trust = where((p_norm > 0) & (r_norm > 0), p_norm / where(r_norm > 0, r_norm, 1.0), 1.0)
        return p - s["lr"] * trust * r, new

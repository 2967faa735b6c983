"""Learning-rate schedules with PyTorch's interface: build one on an optimizer, call ``step()``
once per epoch (or per batch), read ``get_last_lr()``.

Every schedule is a closed form ``lr_at(epoch)`` of the base learning rates (each group's
``initial_lr``, set from its ``lr`` when the first scheduler is built), so a schedule can be
evaluated at any step without stepping through the ones before (``lr_at`` is also how to drive a
jitted functional optimizer). Building a scheduler sets the epoch-0 value at once, as PyTorch.

>>> w = cv.Tensor([1.0], requires_grad=True)
>>> opt = cv.optim.SGD([w], lr=1.0)
>>> sched = StepLR(opt, step_size=2, gamma=0.5)
>>> lrs = []
>>> for _ in range(5):
...     lrs.append(sched.get_last_lr()[0]); sched.step()
>>> lrs
[1.0, 1.0, 0.5, 0.5, 0.25]
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any

from .optimizer import Optimizer
from .state import restore_like, unflatten_state_dict

__all__ = ["CosineAnnealingLR", "ExponentialLR", "LRScheduler", "LambdaLR", "LinearLR", "MultiStepLR", "OneCycleLR",
           "ReduceLROnPlateau", "SequentialLR", "StepLR"]


class LRScheduler:
    """Base class. Subclasses define :meth:`lr_at`. ``last_epoch`` is the index of the current
    epoch (-1 before the first ``step``, which the constructor takes); pass it to resume a schedule
    on an optimizer whose groups already have ``initial_lr`` (KeyError otherwise).

    >>> class Halving(LRScheduler):
    ...     def lr_at(self, epoch):
    ...         return [base / 2 ** epoch for base in self.base_lrs]
    >>> opt = cv.optim.SGD([cv.Tensor([1.0], requires_grad=True)], lr=1.0)
    >>> sched = Halving(opt)
    >>> sched.get_last_lr()
    [1.0]
    >>> sched.step(); sched.step()
    >>> sched.get_last_lr(), opt.param_groups[0]["lr"], sched.last_epoch
    ([0.25], 0.25, 2)
    >>> sched.lr_at(10)   # any epoch, without stepping
    [0.0009765625]
    """

    _unsaved: tuple[str, ...] = ("optimizer",)

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__} needs a corvid.optim.Optimizer, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        for i, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise KeyError(f"param_groups[{i}] has no 'initial_lr' to resume the schedule from")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._last_lr: list[float] = []
        self.step()

    def lr_at(self, epoch: int) -> list[float]:
        """The learning rate of each parameter group at ``epoch``."""
        raise NotImplementedError

    def step(self) -> None:
        """Advance one epoch and set each group's ``lr``."""
        self._set(self.last_epoch + 1)

    def _set(self, epoch: int) -> None:
        self.last_epoch = epoch
        self._last_lr = [float(v) for v in self.lr_at(epoch)]
        for group, lr in zip(self.optimizer.param_groups, self._last_lr):
            group["lr"] = lr

    def get_last_lr(self) -> list[float]:
        """The learning rates the last ``step`` (or the constructor) set, one per group."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Everything but the optimizer (and functions): numbers and lists of numbers, so
        :func:`corvid.optim.flatten_state_dict` can turn it into tensors for ``cv.save``."""
        return {k: v for k, v in vars(self).items() if k not in self._unsaved}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (or its flattened form), converting values to the current types."""
        if any("." in k for k in state_dict):
            state_dict = unflatten_state_dict(state_dict)
        for k, v in state_dict.items():
            setattr(self, k, restore_like(v, getattr(self, k, None)))

    def _per_group(self, value: Any, name: str) -> list[Any]:
        n = len(self.optimizer.param_groups)
        if isinstance(value, (list, tuple)):
            if len(value) != n:
                raise ValueError(f"{type(self).__name__}: expected {n} values of {name}, got {len(value)}")
            return list(value)
        return [value] * n


class StepLR(LRScheduler):
    """``base_lr * gamma ** (epoch // step_size)``.

    >>> opt = cv.optim.SGD([cv.Tensor([0.0], requires_grad=True)], lr=1.0)
    >>> StepLR(opt, step_size=10).lr_at(25)
    [0.010000000000000002]
    """

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        if step_size <= 0:
            raise ValueError(f"step_size must be positive, got {step_size}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        return [base * self.gamma ** (epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """``base_lr * gamma ** (number of milestones <= epoch)`` (a repeated milestone counts twice).

    >>> opt = cv.optim.SGD([cv.Tensor([0.0], requires_grad=True)], lr=1.0)
    >>> MultiStepLR(opt, milestones=[2, 4], gamma=0.5).lr_at(4)
    [0.25]
    """

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = sorted(int(m) for m in milestones), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        return [base * self.gamma ** bisect.bisect_right(self.milestones, epoch) for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """``base_lr * gamma ** epoch``.

    >>> opt = cv.optim.SGD([cv.Tensor([0.0], requires_grad=True)], lr=1.0)
    >>> ExponentialLR(opt, gamma=0.5).lr_at(3)
    [0.125]
    """

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        return [base * self.gamma ** epoch for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """``eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2``: from the base rate to
    ``eta_min`` in ``T_max`` epochs (and back up after, as PyTorch's closed form).

    >>> opt = cv.optim.SGD([cv.Tensor([0.0], requires_grad=True)], lr=1.0)
    >>> CosineAnnealingLR(opt, T_max=4).lr_at(2)
    [0.5]
    """

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        if T_max <= 0:
            raise ValueError(f"T_max must be positive, got {T_max}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        c = (1 + math.cos(math.pi * epoch / self.T_max)) / 2
        return [self.eta_min + (base - self.eta_min) * c for base in self.base_lrs]


class LinearLR(LRScheduler):
    """Linear warmup (or decay) of a factor from ``start_factor`` to ``end_factor`` over
    ``total_iters`` epochs, then constant: ``base_lr * factor``.

    >>> opt = cv.optim.SGD([cv.Tensor([0.0], requires_grad=True)], lr=1.0)
    >>> LinearLR(opt, start_factor=0.25, total_iters=3).lr_at(1)
    [0.5]
    """

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError(f"start_factor must be in (0, 1] and end_factor in [0, 1], got {start_factor}, "
                             f"{end_factor}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        done = min(epoch, self.total_iters) / self.total_iters if self.total_iters else 1.0
        factor = self.start_factor + (self.end_factor - self.start_factor) * done
        return [base * factor for base in self.base_lrs]


class LambdaLR(LRScheduler):
    """``base_lr * lr_lambda(epoch)``; ``lr_lambda`` is a function or a list of one per group.
    The functions are not part of ``state_dict``.

    >>> opt = cv.optim.SGD([cv.Tensor([0.0], requires_grad=True)], lr=2.0)
    >>> LambdaLR(opt, lambda e: 1 / (e + 1)).lr_at(3)
    [0.5]
    """

    _unsaved = ("optimizer", "lr_lambdas")

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
                 last_epoch: int = -1):
        self.optimizer = optimizer
        self.lr_lambdas = self._per_group(lr_lambda, "lr_lambda")
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        return [base * f(epoch) for base, f in zip(self.base_lrs, self.lr_lambdas)]


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin), stepped once per batch for ``total_steps`` steps (or
    ``epochs * steps_per_epoch``): the rate rises from ``max_lr / div_factor`` to ``max_lr``
    over the first ``pct_start`` of the steps, then anneals to ``initial / final_div_factor``
    (``three_phase=True``: back to the initial rate first, then down). ``anneal_strategy`` is
    ``"cos"`` or ``"linear"``. With ``cycle_momentum`` the momentum (SGD, RMSprop) or beta1
    (Adam family) moves inversely between ``max_momentum`` and ``base_momentum``. Stepping past
    ``total_steps`` raises ValueError, as PyTorch.

    >>> opt = cv.optim.SGD([cv.Tensor([0.0], requires_grad=True)], lr=0.1, momentum=0.9)
    >>> sched = OneCycleLR(opt, max_lr=1.0, total_steps=10)
    >>> round(sched.get_last_lr()[0], 6), opt.param_groups[0]["momentum"]
    (0.04, 0.95)
    """

    _unsaved = ("optimizer", "phases", "anneal_strategy")  # both follow from the constructor's arguments

    def __init__(self, optimizer: Optimizer, max_lr: float | Sequence[float], total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", cycle_momentum: bool = True, base_momentum: float = 0.85,
                 max_momentum: float = 0.95, div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1):
        self.optimizer = optimizer
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR needs total_steps, or epochs and steps_per_epoch")
            total_steps = epochs * steps_per_epoch
        if total_steps <= 0 or not 0 <= pct_start <= 1 or anneal_strategy not in ("cos", "linear"):
            raise ValueError("OneCycleLR needs total_steps > 0, pct_start in [0, 1] and anneal_strategy "
                             f"'cos' or 'linear', got {total_steps}, {pct_start}, {anneal_strategy!r}")
        self.total_steps, self.anneal_strategy, self.cycle_momentum = total_steps, anneal_strategy, cycle_momentum
        self.max_lrs = [float(v) for v in self._per_group(max_lr, "max_lr")]
        initial = [m / div_factor for m in self.max_lrs]
        self.min_lrs = [i / final_div_factor for i in initial]
        self.max_momenta = [float(max_momentum)] * len(self.max_lrs)
        self.base_momenta = [float(base_momentum)] * len(self.max_lrs)
        up = float(pct_start * total_steps) - 1
        # phases: (last step, start, end) with values "initial", "max", "min"; momentum goes the other way
        if three_phase:
            self.phases = [(up, 0, 1), (2 * up, 1, 0), (total_steps - 1.0, 0, 2)]
        else:
            self.phases = [(up, 0, 1), (total_steps - 1.0, 1, 2)]
        if cycle_momentum and not any(k in optimizer.defaults for k in ("momentum", "betas")):
            raise ValueError("cycle_momentum needs an optimizer with 'momentum' or 'betas'")
        if last_epoch == -1:
            for group, lr in zip(optimizer.param_groups, initial):
                group["initial_lr"] = lr
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def _phase(self, epoch: int) -> tuple[int, float]:
        if epoch > self.total_steps:
            raise ValueError(f"OneCycleLR stepped {epoch} times, more than total_steps = {self.total_steps}")
        start = 0.0
        for i, (end, _, _) in enumerate(self.phases):
            if epoch <= end or i == len(self.phases) - 1:
                return i, (epoch - start) / (end - start) if end > start else 1.0
            start = end
        raise AssertionError("unreachable: the last phase always matches")

    def lr_at(self, epoch: int) -> list[float]:
        i, pct = self._phase(epoch)
        _, a, b = self.phases[i]
        out = []
        for base, top, low in zip(self.base_lrs, self.max_lrs, self.min_lrs):
            levels = (base, top, low)
            out.append(self._anneal(levels[a], levels[b], pct))
        return out

    def momentum_at(self, epoch: int) -> list[float]:
        """The momentum (or beta1) of each group at ``epoch``: high where the rate is low."""
        i, pct = self._phase(epoch)
        _, a, b = self.phases[i]
        out = []
        for top, low in zip(self.max_momenta, self.base_momenta):
            levels = (top, low, top)
            out.append(self._anneal(levels[a], levels[b], pct))
        return out

    def _set(self, epoch: int) -> None:
        super()._set(epoch)
        if self.cycle_momentum:
            for group, m in zip(self.optimizer.param_groups, self.momentum_at(epoch)):
                if "betas" in group:
                    group["betas"] = (m, group["betas"][1])
                else:
                    group["momentum"] = m


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after another, switching at the epochs in ``milestones`` (one fewer
    than the schedulers); each starts from its own epoch 0 when it takes over. The schedulers must
    be built on ``optimizer``.

    >>> opt = cv.optim.SGD([cv.Tensor([0.0], requires_grad=True)], lr=1.0)
    >>> warm = LinearLR(opt, start_factor=0.5, total_iters=2)
    >>> decay = ExponentialLR(opt, gamma=0.5)
    >>> sched = SequentialLR(opt, [warm, decay], milestones=[2])
    >>> [sched.lr_at(e)[0] for e in range(5)]
    [0.5, 0.75, 1.0, 0.5, 0.25]
    """

    _unsaved = ("optimizer", "schedulers")

    def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int],
                 last_epoch: int = -1):
        if len(schedulers) < 1 or len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR needs one milestone fewer than schedulers, got {len(schedulers)} "
                             f"schedulers and {len(milestones)} milestones")
        if any(s.optimizer is not optimizer for s in schedulers):
            raise ValueError("SequentialLR: every scheduler must be built on the same optimizer")
        self.schedulers = list(schedulers)
        self.milestones = [int(m) for m in milestones]
        super().__init__(optimizer, last_epoch)

    def _locate(self, epoch: int) -> tuple[LRScheduler, int]:
        i = bisect.bisect_right(self.milestones, epoch)
        return self.schedulers[i], epoch - (self.milestones[i - 1] if i else 0)

    def lr_at(self, epoch: int) -> list[float]:
        sched, local = self._locate(epoch)
        return sched.lr_at(local)

    def _set(self, epoch: int) -> None:
        self.last_epoch = epoch
        sched, local = self._locate(epoch)
        sched._set(local)
        self._last_lr = sched.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "schedulers": [s.state_dict() for s in self.schedulers]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if any("." in k for k in state_dict):
            state_dict = unflatten_state_dict(state_dict)
        state_dict = dict(state_dict)
        subs = state_dict.pop("schedulers", [])
        subs = [subs[k] for k in sorted(subs)] if isinstance(subs, dict) else subs
        for sched, sub in zip(self.schedulers, subs):
            sched.load_state_dict(sub)
        super().load_state_dict(state_dict)


class ReduceLROnPlateau(LRScheduler):
    """Divide the learning rates when a metric stops improving, as PyTorch's: call
    ``step(metric)`` once per epoch with the validation loss (``mode="min"``) or accuracy
    (``"max"``).

    A metric *improves* on the best so far when it beats it by more than ``threshold``: relatively
    (``threshold_mode="rel"``: below ``best * (1 - threshold)`` in min mode, above
    ``best * (1 + threshold)`` in max mode) or absolutely (``"abs"``: below ``best - threshold``,
    above ``best + threshold``). After more than ``patience`` epochs in a row without improvement
    each group's rate becomes ``max(lr * factor, min_lr)`` (unchanged if that moves it by no more
    than ``eps``), and the next ``cooldown`` epochs count no bad epochs. ``min_lr`` is one number
    or one per group. ValueError for ``factor >= 1``, an unknown mode, a negative ``patience`` or
    ``cooldown``, or a ``min_lr`` list of the wrong length. There is no closed form: ``lr_at``
    raises TypeError.

    >>> opt = cv.optim.SGD([cv.Tensor([0.0], requires_grad=True)], lr=1.0)
    >>> sched = ReduceLROnPlateau(opt, factor=0.5, patience=1)
    >>> for loss in [3.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0]:
    ...     sched.step(loss)
    >>> sched.get_last_lr()
    [0.25]
    """

    _unsaved = ("optimizer", "mode", "threshold_mode")  # both are constructor arguments (strings)

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr: float | Sequence[float] = 0.0, eps: float = 1e-8):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"ReduceLROnPlateau needs a corvid.optim.Optimizer, got {type(optimizer).__name__}")
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor must be below 1, got {factor}")
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError(f"ReduceLROnPlateau: mode must be 'min' or 'max' and threshold_mode 'rel' or 'abs', "
                             f"got {mode!r} and {threshold_mode!r}")
        if patience < 0 or cooldown < 0:
            raise ValueError(f"ReduceLROnPlateau: patience and cooldown must be >= 0, got {patience} and {cooldown}")
        self.optimizer = optimizer
        self.min_lrs = [float(v) for v in self._per_group(min_lr, "min_lr")]
        self.mode, self.factor, self.patience, self.threshold = mode, float(factor), int(patience), float(threshold)
        self.threshold_mode, self.cooldown, self.eps = threshold_mode, int(cooldown), float(eps)
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = [float(group["lr"]) for group in optimizer.param_groups]

    def lr_at(self, epoch: int) -> list[float]:
        raise TypeError("ReduceLROnPlateau has no closed form: its rates depend on the metrics given to step()")

    def is_better(self, value: float, best: float) -> bool:
        """Whether ``value`` improves on ``best`` by more than the threshold (see the class)."""
        if self.mode == "min":
            return value < (best * (1 - self.threshold) if self.threshold_mode == "rel" else best - self.threshold)
        return value > (best * (1 + self.threshold) if self.threshold_mode == "rel" else best + self.threshold)

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def step(self, metrics: float | Any = None) -> None:  # type: ignore[override]
        """Record one epoch's ``metrics`` (a number or a one-element tensor, read now) and reduce
        the rates if it is the ``patience + 1``-th epoch in a row without improvement."""
        if metrics is None:
            raise TypeError("ReduceLROnPlateau.step needs the metric to watch: step(val_loss)")
        current = float(metrics)
        self.last_epoch += 1
        if self.is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad epochs during the cooldown do not count
        if self.num_bad_epochs > self.patience:
            for group, floor in zip(self.optimizer.param_groups, self.min_lrs):
                old = float(group["lr"])
                new = max(old * self.factor, floor)
                if old - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [float(group["lr"]) for group in self.optimizer.param_groups]

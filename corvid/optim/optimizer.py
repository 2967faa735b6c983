"""The optimizer base: parameter groups, ``step``, ``zero_grad``, state dicts, and the pure
functional form every optimizer derives from the same update rule.

An optimizer is written once, as three class methods on plain tensors:

* ``_slots(p, hp)``: the initial per-parameter state (``{"exp_avg": zeros, ...}``);
* ``_scalars(t, hp)``: the values that change from step to step (the learning rate, bias
  corrections), from the step count ``t`` (an int, or a Tensor in the functional form);
* ``_update(p, g, slots, hp, s)``: the new parameter and the new slots, lazily.

``hp`` is a parameter group (the hyperparameters); ``s`` holds the ``_scalars``. Two front ends
share those rules:

* the PyTorch-style :class:`Optimizer` (``opt = Adam(model.parameters(), lr=1e-3)``, then
  ``opt.step()``) builds every parameter's and every slot's new value lazily, computes them all
  in one schedule (``cv.realize``: each value is one fused kernel, and the kernels compile in
  parallel), then points the parameters at the results. The per-step scalars travel in one small
  buffer per group and dtype, so no value of the learning rate or of a bias correction ever
  changes a kernel: only the first step compiles. ``opt.step()`` also works inside ``cv.jit``:
  a jitted ``zero_grad(); loss.backward(); opt.step()`` replays as one captured program that
  reads the gradients, the state, the step counts and the learning rate at every call (see
  :meth:`Optimizer._traced_step`).
* the functional form (``tx = Adam.functional(lr=1e-3)``; ``state = tx.init(params)``;
  ``params, state = tx.update(grads, state, params)``) is pure on pytrees, so it runs under
  ``cv.jit``, ``cv.grad`` and ``cv.vmap``.

>>> w = cv.Tensor([1.0, 2.0], requires_grad=True)
>>> opt = cv.optim.SGD([w], lr=0.5)
>>> (w * w).sum().backward()
>>> opt.step()
>>> w.tolist()
[0.0, 0.0]
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ..autograd import enable_grad, no_grad
from ..dtype import DType
from ..engine import capture
from ..runtime.device import get_default_device
from ..tensor import Tensor, realize
from ..tree import tree_flatten, tree_unflatten
from .state import restore_like, unflatten_state_dict

Scalar = float | Tensor


class Optimizer:
    """Base class: holds ``param_groups`` (a list of dicts, each with ``"params"`` and the
    hyperparameters) and ``state`` (per parameter: ``{"step": int, slot: Tensor, ...}``).

    ``params`` is an iterable of tensors, or of dicts ``{"params": [...], "lr": ..., ...}``
    whose missing hyperparameters come from the constructor's arguments (as PyTorch). A tensor
    may appear in only one group (ValueError). Subclasses define ``__init__`` with their
    hyperparameters as keyword arguments and the three rule methods described in the module.

    Parameter groups, each with its own learning rate:

    >>> a, b = cv.Tensor([1.0], requires_grad=True), cv.Tensor([1.0], requires_grad=True)
    >>> opt = cv.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.1}], lr=1.0)
    >>> [group["lr"] for group in opt.param_groups]
    [1.0, 0.1]

    A new optimizer needs only its update rule (here sign descent, without state); it gets
    ``step``, state dicts and the functional form from this class:

    >>> class SignSGD(cv.optim.Optimizer):
    ...     def __init__(self, params, lr=0.01):
    ...         super().__init__(params, {"lr": lr})
    ...     @classmethod
    ...     def _update(cls, p, g, slots, hp, s):
    ...         return p - s["lr"] * g.sign(), {}
    >>> w = cv.Tensor([1.0, -2.0], requires_grad=True)
    >>> opt = SignSGD([w], lr=0.5)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> w.tolist(), opt.state[w]
    ([0.5, -1.5], {'step': 1})
    >>> SignSGD.functional(lr=0.5)
    SignSGD.functional(lr=0.5)
    """

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]):
        self._check(defaults)
        self.defaults = dict(defaults)
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[Tensor, dict[str, Any]] = {}
        groups = [params] if isinstance(params, Tensor) else list(params)
        if not groups:
            raise ValueError(f"{type(self).__name__} got an empty parameter list")
        for group in groups if isinstance(groups[0], dict) else [{"params": groups}]:
            self.add_param_group(group)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group: ``{"params": tensors, **hyperparameters}``; unset ones take the defaults."""
        if not isinstance(param_group, dict) or "params" not in param_group:
            raise TypeError("a parameter group is a dict with a 'params' entry")
        params = param_group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer parameters must be Tensors, got {type(p).__name__}")
            if not p.dtype.is_float:
                raise TypeError(f"optimizer parameters must be floating point, got {p.dtype.name}")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if len({id(p) for p in params}) != len(params) or any(id(p) in seen for p in params):
            raise ValueError("a parameter appears more than once among the optimizer's parameter groups")
        unknown = set(param_group) - set(self.defaults) - {"params", "initial_lr"}
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown hyperparameters {sorted(unknown)}")
        group = {**self.defaults, **param_group, "params": params}
        self._check(group)
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient (``grad = None``), or set it to zeros."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad = None if set_to_none else Tensor(np.zeros(p.shape, p.dtype.np), device=p.device)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns ``closure()``'s value (or None).

        ``closure`` (optional) re-evaluates the model and returns the loss; it runs with
        gradients enabled. All new values are computed in one schedule. Inside ``cv.jit`` the
        step becomes part of the captured program (see :meth:`_traced_step`)."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            if capture.tracing():
                self._traced_step()
                return loss
            params, values, pending = [], [], []
            for group in self.param_groups:
                scalars: dict[tuple[int, DType], dict[str, Scalar]] = {}
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self._state_of(p, group)
                    t = state["step"] + 1
                    if isinstance(t, Tensor):  # a count a jitted step keeps as a tensor
                        s = _cast_scalars(self._scalars(t, group), p.dtype)
                    else:
                        key = (t, p.dtype)
                        if key not in scalars:
                            scalars[key] = _scalar_buffer(self._scalars(t, group), p.dtype, p.device)
                        s = scalars[key]
                    slots = {k: v for k, v in state.items() if k != "step"}
                    g = p.grad.detach().astype(p.dtype)
                    new_p, new_slots = self._update(p.detach(), g, slots, group, s)
                    params.append(p)
                    values.append(new_p)
                    pending.append((state, t, new_slots))
            realize(*values, *(v for _, t, slots in pending for v in [*slots.values(), t] if isinstance(v, Tensor)))
            for p, v in zip(params, values):
                p.assign(v)
            for state, t, slots in pending:
                _store(state, {**slots, "step": t})
        return loss

    def _state_of(self, p: Tensor, group: dict[str, Any]) -> dict[str, Any]:
        state = self.state.get(p)
        if state is None:
            state = self.state[p] = {"step": 0, **self._slots(p.detach(), group)}
        return state

    def _traced_step(self) -> None:
        """``step()`` while ``cv.jit`` traces: the same rule, recorded into the captured program
        instead of computed, so a jitted PyTorch-style loop body (``zero_grad``, ``backward``,
        ``step``) replays without Python. The program reads at each call every gradient, every
        state tensor and the step counts (which become 0-d float64 tensors, updated in place)
        and each group's ``lr`` (so a scheduler changes it without a retrace). Every other
        hyperparameter is frozen into the program: a guard traces again when one changes, or
        when parameters, groups or state tensors are replaced (``load_state_dict``)."""
        from ..dtype import float64
        from ..transforms.jit import add_guard, scalar_input

        watched = []
        for group in self.param_groups:
            hp = {**group, "lr": scalar_input(lambda g=group: float(g["lr"]), float64, _device_of(group))}
            states = []
            for p in group["params"]:
                p.grad = p.grad  # read and written back at each call, also when computed outside
                if p.grad is None:
                    continue
                state = self._state_of(p, group)
                if not isinstance(state["step"], Tensor):
                    state["step"] = Tensor(np.float64(state["step"]), device=p.device)
                t = state["step"] + 1
                slots = {k: v for k, v in state.items() if k != "step"}
                new_p, new_slots = self._update(p.detach(), p.grad.detach().astype(p.dtype), slots, group,
                                                _cast_scalars(self._scalars(t, hp), p.dtype))
                p.assign(new_p)
                _store(state, {**new_slots, "step": t})
                states.append((p, state, dict(state)))
            frozen = {k: (v, v.node if isinstance(v, Tensor) else None) for k, v in group.items()
                      if k not in ("params", "lr")}
            watched.append((group, list(group["params"]), frozen, states))
        add_guard(functools.partial(self._unchanged, list(self.param_groups), watched))

    def _unchanged(self, groups: list[dict[str, Any]], watched: list[tuple]) -> bool:
        """Whether what a traced step froze still holds (see :meth:`_traced_step`)."""
        if len(groups) != len(self.param_groups) or any(a is not b for a, b in zip(groups, self.param_groups)):
            return False
        for group, params, frozen, states in watched:
            if len(group["params"]) != len(params) or any(a is not b for a, b in zip(group["params"], params)):
                return False
            if set(group) - {"params", "lr"} != set(frozen) or any(not _same(group[k], *v) for k, v in frozen.items()):
                return False
            for p, state, values in states:
                if self.state.get(p) is not state or any(state.get(k) is not v for k, v in values.items()):
                    return False
        return True

    # --- saving and loading --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {"step": int, slot: Tensor}}, "param_groups": [{..., "params": [index]}]}``
        with parameters numbered in group order (PyTorch's layout); ``step`` is a 0-d float64
        tensor once a jitted step has run (as PyTorch keeps it). Every value is a tensor, a
        number or a tuple of numbers: :func:`corvid.optim.flatten_state_dict` turns it into a dict
        of tensors for ``cv.save``."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            ids = [index.setdefault(id(p), len(index)) for p in group["params"]]
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        # tensors as new handles on their current values: later steps update the state's own
        # tensors in place (a jitted step reads those objects), a state dict stays a snapshot
        state = {index[id(p)]: {k: Tensor._from_node(v.node, v.device) if isinstance(v, Tensor) else v
                                for k, v in st.items()} for p, st in self.state.items() if id(p) in index}
        return {"state": dict(sorted(state.items())), "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore hyperparameters and per-parameter state from :meth:`state_dict`, or from its
        flattened form (as ``cv.load`` returns it). Values are converted to the types of the current
        ones (tensors to the parameter's dtype).

        ValueError naming what is missing or different, with the optimizer left unchanged, when
        the dict is not an optimizer's state dict (no ``param_groups``, a group without
        ``params``), its groups differ in number or size from this optimizer's, or its ``state``
        names a parameter its groups do not list."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"load_state_dict needs a dict, got {type(state_dict).__name__}")
        if any(isinstance(k, str) and "." in k for k in state_dict):
            state_dict = unflatten_state_dict(state_dict)
        if "param_groups" not in state_dict:
            raise ValueError(f"load_state_dict: the state dict has no 'param_groups' (its keys: "
                             f"{sorted(map(str, state_dict))[:8]}); expected what Optimizer.state_dict() returns, "
                             "{'state': {...}, 'param_groups': [...]}, or its flattened form as cv.load returns it "
                             "('param_groups.0.lr', ...)")
        groups = state_dict["param_groups"]
        if isinstance(groups, Mapping) and all(isinstance(k, int) for k in groups):
            groups = [groups[k] for k in sorted(groups)]
        if not isinstance(groups, (list, tuple)) or not all(isinstance(g, Mapping) for g in groups):
            raise ValueError(f"load_state_dict: 'param_groups' must be a list of dicts, got {groups!r:.100}")
        if len(groups) != len(self.param_groups):
            raise ValueError(f"the state dict has {len(groups)} parameter groups, the optimizer "
                             f"{len(self.param_groups)}")
        params: dict[int, Tensor] = {}
        hyperparameters = []
        for number, (mine, saved) in enumerate(zip(self.param_groups, groups)):
            if "params" not in saved:
                raise ValueError(f"load_state_dict: parameter group {number} has no 'params' (its keys: "
                                 f"{sorted(map(str, saved))}); each group lists its parameters' numbers, as "
                                 "Optimizer.state_dict() writes them")
            ids = [int(i) for i in restore_like(saved["params"], [])]
            if len(ids) != len(mine["params"]):
                raise ValueError(f"a saved parameter group has {len(ids)} parameters, this one {len(mine['params'])}")
            params.update(zip(ids, mine["params"]))
            hyperparameters.append({k: restore_like(v, mine.get(k, self.defaults.get(k)))
                                    for k, v in saved.items() if k != "params"})
        saved_state = state_dict.get("state", {})
        items = saved_state.items() if isinstance(saved_state, Mapping) else enumerate(saved_state)
        state = {}
        for i, st in items:
            p = params.get(int(i)) if isinstance(i, int) or str(i).isdigit() else None
            if p is None or not isinstance(st, Mapping):
                raise ValueError(f"load_state_dict: the state dict has state for parameter {i!r}, but its groups "
                                 f"list the parameters {sorted(params)}")
            state[p] = {k: int(restore_like(v, 0)) if k == "step" else
                        Tensor(v, device=p.device).astype(p.dtype).realize() for k, v in st.items()}
        for mine, values in zip(self.param_groups, hyperparameters):
            mine.update(values)
        self.state = state

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            hp = ", ".join(f"{k}={v}" for k, v in g.items() if k != "params")
            lines.append(f"  group {i}: {len(g['params'])} tensors, {hp}")
        return "\n".join(lines + [")"])

    # --- the functional form ---------------------------------------------------------------------------
    @classmethod
    def functional(cls, **hyperparameters: Any) -> Functional:
        """The pure form of this optimizer, for pytrees of parameters (see :class:`Functional`).

        Takes the constructor's hyperparameters (TypeError for unknown names).

        >>> tx = cv.optim.SGD.functional(lr=0.5)
        >>> params = {"w": cv.Tensor([1.0, 2.0])}
        >>> state = tx.init(params)
        >>> params, state = tx.update({"w": cv.Tensor([2.0, 4.0])}, state, params)
        >>> params["w"].tolist()
        [0.0, 0.0]
        """
        sig = inspect.signature(cls.__init__)
        defaults = {k: p.default for k, p in list(sig.parameters.items())[2:]}
        unknown = set(hyperparameters) - set(defaults)
        if unknown:
            raise TypeError(f"{cls.__name__}.functional: unknown hyperparameters {sorted(unknown)}")
        hp = {**defaults, **hyperparameters}
        cls._check(hp)
        return Functional(cls, hp)

    # --- the rule (subclasses) ----------------------------------------------------------------------------
    @classmethod
    def _check(cls, hp: dict[str, Any]) -> None:
        """Raise ValueError for invalid hyperparameters (subclasses extend it)."""
        lr = hp["lr"]
        if not isinstance(lr, Tensor) and not lr >= 0:
            raise ValueError(f"invalid learning rate: {lr}")

    @classmethod
    def _slots(cls, p: Tensor, hp: dict[str, Any]) -> dict[str, Tensor]:
        return {}

    @classmethod
    def _scalars(cls, t: int | Tensor, hp: dict[str, Any]) -> dict[str, Scalar]:
        return {"lr": hp["lr"]}

    @classmethod
    def _update(cls, p: Tensor, g: Tensor, slots: dict[str, Tensor], hp: dict[str, Any],
                s: dict[str, Scalar]) -> tuple[Tensor, dict[str, Tensor]]:
        raise NotImplementedError


class Functional:
    """An optimizer as two pure functions on pytrees (the optax style), built by
    ``Optimizer.functional(**hyperparameters)``.

    ``init(params)`` returns the state: ``{"step": int32 0-d tensor, "lr": float64 0-d tensor,
    slot: tree like params, ...}``. ``update(grads, state, params)`` returns
    ``(new_params, new_state)``; ``grads`` has the structure of ``params``. The learning rate
    lives in the state, so a schedule can change it between calls of a jitted step
    (``state["lr"] = cv.Tensor(new_lr, dtype=cv.float64)``) without retracing.

    >>> tx = cv.optim.SGD.functional(lr=0.1, momentum=0.9)
    >>> params = {"w": cv.Tensor([1.0, 2.0])}
    >>> state = tx.init(params)
    >>> sorted(state), state["momentum_buffer"]
    (['lr', 'momentum_buffer', 'step'], {'w': Tensor([0., 0.])})
    >>> grads = {"w": cv.Tensor([1.0, 1.0])}
    >>> params, state = tx.update(grads, state, params)
    >>> [round(v, 4) for v in params["w"].tolist()], state["step"].item()
    ([0.9, 1.9], 1)
    >>> state["lr"] = cv.Tensor(0.0, dtype=cv.float64)   # a schedule's new value
    >>> params, state = tx.update(grads, state, params)
    >>> [round(v, 4) for v in params["w"].tolist()]
    [0.9, 1.9]
    """

    def __init__(self, rule: type[Optimizer], hyperparameters: dict[str, Any]):
        self.rule, self.hyperparameters = rule, hyperparameters

    def init(self, params: Any) -> dict[str, Any]:
        leaves, treedef = tree_flatten(params)
        per_leaf = [self.rule._slots(_as_tensor(p), self.hyperparameters) for p in leaves]
        names = list(per_leaf[0]) if per_leaf else []
        # (the step count and learning rate live with the parameters: a model on the GPU gets
        # its whole state there, wherever the default device points)
        device = _as_tensor(leaves[0]).device if leaves else None
        state: dict[str, Any] = {"step": Tensor(np.int32(0), device=device),
                                 "lr": Tensor(np.float64(self.hyperparameters["lr"]), device=device)}
        for name in names:
            state[name] = tree_unflatten(treedef, [slots[name] for slots in per_leaf])
        return state

    def update(self, grads: Any, state: dict[str, Any], params: Any) -> tuple[Any, dict[str, Any]]:
        leaves, treedef = tree_flatten(params)
        grad_leaves, grad_def = tree_flatten(grads)
        if grad_def != treedef:
            raise ValueError(f"update: grads have structure {grad_def}, params {treedef}")
        names = [k for k in state if k not in ("step", "lr")]
        slot_leaves = {name: tree_flatten(state[name])[0] for name in names}
        count = state["step"] + 1
        scalars: dict[tuple[DType, str], dict[str, Scalar]] = {}
        new_params, new_slots = [], {name: [] for name in names}
        for i, (p, g) in enumerate(zip(leaves, grad_leaves)):
            p, g = _as_tensor(p), _as_tensor(g)
            if (p.dtype, p.device) not in scalars:  # (a learning rate set from the CPU moves to the parameters)
                hp = {**self.hyperparameters, "lr": state["lr"].to(p.device).astype(p.dtype)}
                values = self.rule._scalars(count.to(p.device).astype(p.dtype), hp)
                scalars[p.dtype, p.device] = {k: v.astype(p.dtype) if isinstance(v, Tensor) else v
                                              for k, v in values.items()}
            new_p, slots = self.rule._update(p, g.astype(p.dtype), {n: slot_leaves[n][i] for n in names},
                                             self.hyperparameters, scalars[p.dtype, p.device])
            new_params.append(new_p)
            for name in names:
                new_slots[name].append(slots[name])
        new_state = {"step": count, "lr": state["lr"],
                     **{name: tree_unflatten(treedef, new_slots[name]) for name in names}}
        return tree_unflatten(treedef, new_params), new_state

    def __repr__(self) -> str:
        hp = ", ".join(f"{k}={v}" for k, v in self.hyperparameters.items())
        return f"{self.rule.__name__}.functional({hp})"


# --- helpers shared by the rules ----------------------------------------------------------------------
def _store(state: dict[str, Any], values: dict[str, Any]) -> None:
    """Put new values in ``state``, keeping its tensors the same objects (a jitted step reads them)."""
    for k, v in values.items():
        if isinstance(state.get(k), Tensor):
            state[k].assign(v)
        else:
            state[k] = v


def _cast_scalars(values: dict[str, Scalar], dtype: DType) -> dict[str, Scalar]:
    return {k: v.astype(dtype) if isinstance(v, Tensor) else v for k, v in values.items()}


def _same(value: Any, frozen: Any, frozen_node: Any) -> bool:
    """Whether a hyperparameter still has the value a trace froze (a tensor: the same one, unchanged)."""
    if isinstance(value, Tensor) or isinstance(frozen, Tensor):
        return value is frozen and value.node is frozen_node
    return type(value) is type(frozen) and bool(value == frozen)


def _device_of(group: dict[str, Any]) -> str:
    return group["params"][0].device if group["params"] else get_default_device()


def zeros_slot(p: Tensor, fill: float = 0.0) -> Tensor:
    """A state tensor like ``p`` filled with ``fill``, as a real buffer: the first step's kernels
    then read state exactly as every later step does, so they compile once."""
    return Tensor(np.full(p.shape, fill, p.dtype.np), device=p.device)


def _as_tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def _scalar_buffer(values: dict[str, Scalar], dtype: DType, device: str) -> dict[str, Scalar]:
    """The per-step scalars as views of one small buffer of ``dtype``: values enter kernels as data,
    so a learning rate that reaches 0 or 0.5 (constants kernels bake in) changes nothing."""
    names = [k for k, v in values.items() if not isinstance(v, Tensor)]
    buf = Tensor(np.array([float(values[k]) for k in names], dtype=dtype.np), device=device)
    out: dict[str, Scalar] = dict(values)
    out.update({k: buf[i] for i, k in enumerate(names)})
    return out

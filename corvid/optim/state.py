"""State dicts as flat dicts of tensors, so ``cv.save`` can write them (safetensors or npz, no pickles).

:func:`flatten_state_dict` joins nested keys with dots and turns numbers into 0-d tensors and
tuples of numbers into 1-d tensors; :func:`unflatten_state_dict` rebuilds the nesting (a level
whose keys are 0, 1, ..., n-1 becomes a list). Types are restored by the object that loads the
state (``load_state_dict`` converts each value to the type of the value it replaces, with
:func:`restore_like`), so the files need no type tags.

>>> flat = flatten_state_dict({"state": {0: {"step": 3}}, "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99)}]})
>>> sorted(flat)
['param_groups.0.betas', 'param_groups.0.lr', 'state.0.step']
>>> restore_like(unflatten_state_dict(flat)["param_groups"][0]["betas"], (0.0, 0.0))
(0.9, 0.99)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..tensor import Tensor

__all__ = ["flatten_state_dict", "restore_like", "unflatten_state_dict"]


def flatten_state_dict(state_dict: Mapping[Any, Any], prefix: str = "") -> dict[str, Tensor]:
    """``{"state.0.exp_avg": tensor, "param_groups.0.lr": 0-d tensor, ...}`` from a nested state dict.

    Leaves may be tensors, bools, ints, floats (float64 0-d tensors, so no precision is lost) and
    lists or tuples of numbers; dicts and lists of dicts nest. TypeError for anything else (a
    string, None, a function); ValueError when a key contains a dot. ``Optimizer.load_state_dict``
    accepts the flat form directly.

    >>> w = cv.Tensor([1.0, 2.0], requires_grad=True)
    >>> opt = cv.optim.Adam([w], lr=0.1)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> flat = flatten_state_dict(opt.state_dict())
    >>> [k for k in sorted(flat) if k.startswith("state.")]
    ['state.0.exp_avg', 'state.0.exp_avg_sq', 'state.0.step']
    >>> flat["param_groups.0.lr"], flat["param_groups.0.betas"]
    (Tensor(0.1, dtype=float64), Tensor([0.9  , 0.999], dtype=float64))
    >>> other = cv.optim.Adam([cv.Tensor([0.0, 0.0], requires_grad=True)], lr=0.5)
    >>> other.load_state_dict(flat)
    >>> other.param_groups[0]["lr"], other.param_groups[0]["betas"]
    (0.1, (0.9, 0.999))
    """
    out: dict[str, Tensor] = {}
    for key, value in state_dict.items():
        name = str(key)
        if "." in name:
            raise ValueError(f"flatten_state_dict: key {name!r} contains a dot, which separates levels")
        _flatten_value(prefix + name, value, out)
    return out


def _flatten_value(name: str, value: Any, out: dict[str, Tensor]) -> None:
    if isinstance(value, Mapping):
        out.update(flatten_state_dict(value, name + "."))
    elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Mapping) for v in value):
        out.update(flatten_state_dict(dict(enumerate(value)), name + "."))
    elif isinstance(value, Tensor):
        out[name] = value
    elif isinstance(value, (bool, int, float, np.number, np.bool_)):
        out[name] = Tensor(np.asarray(value, dtype=_numpy_dtype(value)))
    elif isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, np.number)) for v in value):
        kind = np.int64 if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value) \
            else np.float64
        out[name] = Tensor(np.asarray(value, dtype=kind))
    else:
        raise TypeError(f"flatten_state_dict: {name} is a {type(value).__name__}; only tensors, numbers and "
                        "sequences of numbers can be saved")


def _numpy_dtype(value: Any) -> type:
    if isinstance(value, (bool, np.bool_)):
        return np.bool_
    if isinstance(value, (int, np.integer)):
        return np.int64
    return np.float64


def unflatten_state_dict(flat: Mapping[str, Any]) -> dict[Any, Any]:
    """The nesting of ``flat`` (dotted keys) rebuilt; digit keys become ints, and a level whose
    keys are exactly 0..n-1 becomes a list. Leaves are returned as they are (tensors); use
    :func:`restore_like` to turn them back into numbers.

    >>> unflatten_state_dict({"a.0": cv.Tensor(1.0), "a.1": cv.Tensor(2.0), "b.x": cv.Tensor(3.0)})
    {'a': [Tensor(1.), Tensor(2.)], 'b': {'x': Tensor(3.)}}
    >>> unflatten_state_dict({"state.3.step": cv.Tensor(5)})   # a key 3 alone: a dict, not a list
    {'state': {3: {'step': Tensor(5)}}}
    """
    root: dict[Any, Any] = {}
    for name, value in flat.items():
        parts = [int(p) if p.isdigit() else p for p in str(name).split(".")]
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"unflatten_state_dict: key {name!r} nests under a value")
        node[parts[-1]] = value
    return _lists(root)


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    node = {k: _lists(v) for k, v in node.items()}
    if node and all(isinstance(k, int) for k in node) and set(node) == set(range(len(node))):
        return [node[i] for i in range(len(node))]
    return node


def restore_like(value: Any, like: Any) -> Any:
    """``value`` (often a tensor read from a file) converted to the type of ``like``: a Python
    bool/int/float, a tuple or list of them, or a tensor (kept). With ``like`` None (a value the
    current object does not have yet) a tensor becomes a Python number (0-d) or a list."""
    if isinstance(like, Tensor):
        return value
    if isinstance(value, Tensor):
        value = value.numpy()
    if like is None:
        return value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else \
            value.tolist() if isinstance(value, np.ndarray) else value
    if isinstance(like, (list, tuple)):
        items = np.asarray(value).reshape(-1).tolist() if not isinstance(value, (list, tuple)) else list(value)
        kind = type(like[0]) if like else None
        items = [kind(v) if kind in (bool, int, float) else v for v in items]
        return type(like)(items)
    if isinstance(like, (bool, int, float)):
        return type(like)(np.asarray(value).reshape(()).item())
    return value

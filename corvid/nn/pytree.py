"""Modules as pytrees, and :func:`functional_call`.

Every :class:`~corvid.nn.Module` class is registered as a pytree node (by ``Module.__init_subclass__``;
the registry matches exact classes). Its leaves are the parameters, then the floating-point
buffers, in ``named_parameters`` / ``named_buffers`` order, each tensor once. Unflattening builds
a shallow copy of the module tree holding the new leaves; everything else (hyperparameters,
integer buffers, plain attributes) is static and shared with the original. Two module trees
flatten to equal structures when their classes, layout, ``training`` flags and static attributes
agree, so ``cv.jit`` traces a step once and reuses the trace for every updated copy.

>>> from corvid import nn
>>> from corvid.tree import tree_flatten, tree_unflatten
>>> lin = nn.Linear(2, 1)
>>> leaves, treedef = tree_flatten(lin)
>>> [t.shape for t in leaves]
[(1, 2), (1,)]
>>> tree_unflatten(treedef, [cv.zeros(1, 2), cv.ones(1)])(cv.ones(1, 2)).tolist()
[[1.0]]
"""

from __future__ import annotations


from typing import Any

import numpy as np

from ..tensor import Tensor
from .module import _HOOKS, _INTERNAL, Module, join_name

__all__ = ["functional_call"]


class _ModuleDef:
    """The static part of a flattened module tree: the module it came from (the template for
    copies), where each leaf goes, and a structural key that decides equality."""

    __slots__ = ("key", "modules", "places", "template")

    def __init__(self, template: Module, modules: list[Module], places: list[list[tuple[int, str]]], key: tuple):
        self.template, self.modules, self.places, self.key = template, modules, places, key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ModuleDef) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"<{type(self.template).__name__} with {len(self.places)} leaves>"


def _is_leaf_value(kind: str, v: Any) -> bool:
    """Parameters are leaves; a buffer is one unless it is a non-float tensor (a counter, an
    index table): those cannot be differentiated, so they stay static, shared with copies."""
    if v is None:
        return False
    return kind == "_params" or not isinstance(v, Tensor) or v.dtype.is_float or v.dtype.is_complex


def flatten_module(m: Module) -> tuple[list[Any], _ModuleDef]:
    modules = [mod for _, mod in m.named_modules()]
    index = {id(mod): i for i, mod in enumerate(modules)}
    leaves: list[Any] = []
    places: list[list[tuple[int, str]]] = []
    slot_of: dict[int, int] = {}
    for kind in ("_params", "_buffers"):
        for i, mod in enumerate(modules):
            for name in mod.__dict__[kind]:
                v = mod.__dict__.get(name)
                if not _is_leaf_value(kind, v):
                    continue
                j = slot_of.get(id(v))
                if j is None:
                    j = slot_of[id(v)] = len(leaves)
                    leaves.append(v)
                    places.append([])
                places[j].append((i, name))
    key = (tuple(_module_key(mod, index) for mod in modules), tuple(tuple(p) for p in places))
    return leaves, _ModuleDef(m, modules, places, key)


def static_tensors(modules: list[Module]) -> list[Tensor]:
    """The tensors of ``modules`` that are static in their tree (non-float buffers: counters,
    index tables, a quantized layer's integer weights), each once."""
    out: dict[int, Tensor] = {}
    for mod in modules:
        for name in mod.__dict__["_buffers"]:
            v = mod.__dict__.get(name)
            if isinstance(v, Tensor) and not _is_leaf_value("_buffers", v):
                out.setdefault(id(v), v)
    return list(out.values())


def _module_key(m: Module, index: dict[int, int]) -> tuple:
    d = m.__dict__
    static = []
    for name, v in d.items():
        if name in _INTERNAL:
            continue
        if name in d["_params"] or name in d["_buffers"]:
            kind = "_params" if name in d["_params"] else "_buffers"
            static.append((name, kind, "leaf" if _is_leaf_value(kind, v) else _static_key(v, index)))
        else:
            static.append((name, _static_key(v, index)))
    hooks = tuple(_static_key(d.get(name, {}), index) for name in _HOOKS)
    return (type(m), d["training"], tuple(d["_buffers"].items()), hooks, tuple(static))


def _static_key(v: Any, index: dict[int, int]) -> Any:
    """A hashable stand-in for an attribute value: equal for values a traced function would treat alike."""
    if isinstance(v, Module):
        return ("module", index.get(id(v), id(v)))
    if isinstance(v, (Tensor, np.ndarray)):
        # tensors compare elementwise; identity is what a copy preserves. (A static tensor's
        # value can change under the same identity, load_state_dict rebinds it: cv.jit guards
        # on the value it traced with, see static_tensors.)
        return ("id", id(v))
    if isinstance(v, (list, tuple)):
        return (type(v), tuple(_static_key(x, index) for x in v))
    if isinstance(v, dict):
        return (type(v), tuple((k, _static_key(x, index)) for k, x in v.items()))
    try:
        hash(v)
    except TypeError:
        return ("id", id(v))
    return v


def unflatten_module(spec: _ModuleDef, leaves: list[Any]) -> Module:
    memo: dict[int, Module] = {}
    new = copy_module_tree(spec.template, memo)
    for value, place in zip(leaves, spec.places):
        for i, name in place:
            memo[id(spec.modules[i])].__dict__[name] = value
    return new


def copy_module_tree(m: Module, memo: dict[int, Module]) -> Module:
    """A shallow copy of ``m`` and of every module below it (``memo`` maps id(original) -> copy,
    which keeps shared submodules shared); tensors and other attributes are the same objects."""
    done = memo.get(id(m))
    if done is not None:
        return done
    new = object.__new__(type(m))
    memo[id(m)] = new
    d = new.__dict__
    for k, v in m.__dict__.items():
        # the hook tables are shared: a copy runs the same hooks, and removing one removes it from both
        d[k] = dict(v) if k in ("_params", "_buffers") else v if k in _INTERNAL else _copy_modules_in(v, memo)
    return new


def _copy_modules_in(v: Any, memo: dict[int, Module]) -> Any:
    """``v`` with every module inside it copied; a container with no module inside is shared."""
    if isinstance(v, Module):
        return copy_module_tree(v, memo)
    if isinstance(v, dict):
        new = {k: _copy_modules_in(x, memo) for k, x in v.items()}
        return v if all(new[k] is x for k, x in v.items()) else type(v)(new)
    if isinstance(v, (list, tuple)):
        items = [_copy_modules_in(x, memo) for x in v]
        if all(a is b for a, b in zip(items, v)):
            return v
        return type(v)(*items) if hasattr(type(v), "_fields") else type(v)(items)  # namedtuples take fields
    return v




def functional_call(module: Module, params_and_buffers: dict[str, Any] | tuple[dict[str, Any], ...],
                    *args: Any, **kwargs: Any) -> Any:
    """Call ``module(*args, **kwargs)`` with some parameters and buffers replaced by the values in
    ``params_and_buffers`` (a dict from state-dict names to tensors, or a tuple of such dicts),
    without changing ``module`` — the ``torch.func.functional_call`` idea, with the call's
    arguments given directly rather than as a tuple.

    Names the dict leaves out keep the module's own tensors (as torch's ``strict=False``); a
    tensor shared by several names (tied weights) is replaced under all of them. KeyError for a
    name that is not a parameter or buffer of ``module``, ValueError for a name given twice.
    Buffers updated during the call (BatchNorm's running statistics, in training mode) update
    the tensors passed in, or the module's own ones, as in torch.

    >>> from corvid import nn
    >>> lin = nn.Linear(2, 1)
    >>> params = {"weight": cv.ones(1, 2), "bias": cv.zeros(1)}
    >>> nn.functional_call(lin, params, cv.Tensor([[1.0, 2.0]])).tolist()
    [[3.0]]
    >>> grads = cv.grad(lambda p, x: nn.functional_call(lin, p, x).sum())(params, cv.ones(1, 2))
    >>> grads["weight"].tolist()
    [[1.0, 1.0]]
    """
    dicts = params_and_buffers if isinstance(params_and_buffers, (tuple, list)) else (params_and_buffers,)
    merged: dict[str, Any] = {}
    for d in dicts:
        for k, v in d.items():
            if k in merged:
                raise ValueError(f"functional_call: {k!r} is given more than once")
            merged[k] = v
    places: dict[str, tuple[Module, str]] = {}
    tied: dict[int, list[str]] = {}  # id(tensor) -> every name it is reachable under
    for prefix, m in module.named_modules(remove_duplicate=False):
        for kind in ("_params", "_buffers"):
            for name in m.__dict__[kind]:
                full = join_name(prefix, name)
                places[full] = (m, name)
                t = m.__dict__.get(name)
                if t is not None:
                    tied.setdefault(id(t), []).append(full)
    unknown = [k for k in merged if k not in places]
    if unknown:
        raise KeyError(f"functional_call: {', '.join(map(repr, unknown))} not among the parameters and buffers of "
                       f"{type(module).__name__} ({', '.join(places) or 'none'})")
    memo: dict[int, Module] = {}
    replaced = copy_module_tree(module, memo)
    for key, value in merged.items():
        if isinstance(value, np.ndarray):
            value = Tensor(value)
        m, name = places[key]
        group = tied.get(id(m.__dict__.get(name)), [key])
        for other in group:
            if other != key and other in merged and merged[other] is not value:
                raise ValueError(f"functional_call: {key!r} and {other!r} are the same (tied) tensor in "
                                 f"{type(module).__name__} but were given different values")
            om, oname = places[other]
            memo[id(om)].__dict__[oname] = value
    return replaced(*args, **kwargs)

"""Containers: modules that hold other modules — :class:`Sequential` (called in order),
:class:`ModuleList` (a list) and :class:`ModuleDict` (a dict).

Their children are named by position (``"0"``, ``"1"``…) or by key, as in PyTorch, so
``model.layers[0].weight`` is ``layers.0.weight`` in a state dict. A plain Python list or dict of
modules assigned to an attribute is found as well (see :mod:`corvid.nn.module`); the containers
add list/dict methods, ``Sequential``'s ``forward``, and a ``repr`` per child.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .module import Module

__all__ = ["ModuleDict", "ModuleList", "Sequential"]


def _check_module(value: Any, where: str) -> Module:
    if not isinstance(value, Module):
        raise TypeError(f"{where}: expected a Module, got {type(value).__name__}")
    return value


def _index(i: int, n: int, where: str) -> int:
    if not -n <= i < n:
        raise IndexError(f"{where}: index {i} is out of range for {n} modules")
    return i % n


class ModuleList(Module):
    """A list of modules whose parameters belong to the enclosing module (children ``"0"``, ``"1"``…).

    Supports indexing (a slice gives a new ModuleList of the same modules), ``len``, iteration,
    ``append``, ``extend``, ``insert`` and ``del``. It has no ``forward``: iterate over it.
    TypeError for an element that is not a Module.

    >>> from corvid import nn
    >>> layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    >>> len(layers), [n for n, _ in layers.named_parameters()][:2]
    (3, ['0.weight', '0.bias'])
    """

    def __init__(self, modules: Iterable[Module] | None = None):
        super().__init__()
        self._items: list[Module] = []
        if modules is not None:
            self.extend(modules)

    def _child_items(self) -> Iterator[tuple[str, Module]]:
        yield from ((str(i), m) for i, m in enumerate(self._items))
        yield from self._attribute_children(skip="_items")  # modules a subclass keeps in attributes

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return ModuleList(self._items[idx])
        return self._items[_index(idx, len(self._items), "ModuleList")]

    def __setitem__(self, idx: int, module: Module) -> None:
        self._items[_index(idx, len(self._items), "ModuleList")] = _check_module(module, "ModuleList")

    def __delitem__(self, idx: int | slice) -> None:
        if isinstance(idx, slice):
            del self._items[idx]
        else:
            del self._items[_index(idx, len(self._items), "ModuleList")]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._items)

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        return ModuleList([*self._items, *other])

    def append(self, module: Module) -> ModuleList:
        self._items.append(_check_module(module, "ModuleList.append"))
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        self._items.extend(_check_module(m, "ModuleList.extend") for m in modules)
        return self

    def insert(self, index: int, module: Module) -> None:
        self._items.insert(index, _check_module(module, "ModuleList.insert"))

    def add_module(self, name: str, module: Module | None) -> None:
        if name != str(len(self._items)):
            raise KeyError(f"ModuleList.add_module: children are named by position; the next is "
                           f"{len(self._items)}, got {name!r}")
        self.append(module)


class ModuleDict(Module):
    """An ordered dict of modules (string keys) whose parameters belong to the enclosing module.

    Supports ``d[key]``, ``d[key] = module``, ``del``, ``in``, ``len``, iteration over keys,
    ``keys``, ``values``, ``items``, ``update`` and ``pop``. KeyError for a key that is not a
    non-empty string without ``"."``, TypeError for a value that is not a Module.

    >>> from corvid import nn
    >>> heads = nn.ModuleDict({"cls": nn.Linear(4, 3), "box": nn.Linear(4, 4)})
    >>> list(heads.state_dict())
    ['cls.weight', 'cls.bias', 'box.weight', 'box.bias']
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None):
        super().__init__()
        self._items: dict[str, Module] = {}
        if modules is not None:
            self.update(modules)

    def _child_items(self) -> Iterator[tuple[str, Module]]:
        yield from list(self._items.items())
        yield from self._attribute_children(skip="_items")

    def __getitem__(self, key: str) -> Module:
        return self._items[key]

    def __setitem__(self, key: str, module: Module) -> None:
        if not isinstance(key, str) or not key or "." in key:
            raise KeyError(f"ModuleDict: keys must be non-empty strings without '.', got {key!r}")
        self._items[key] = _check_module(module, f"ModuleDict[{key!r}]")

    def __delitem__(self, key: str) -> None:
        del self._items[key]

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def keys(self) -> Any:
        return self._items.keys()

    def values(self) -> Any:
        return self._items.values()

    def items(self) -> Any:
        return self._items.items()

    def pop(self, key: str) -> Module:
        return self._items.pop(key)

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for k, m in pairs:
            self[k] = m

    def add_module(self, name: str, module: Module | None) -> None:
        self[name] = module


class Sequential(Module):
    """Modules called one after the other: ``Sequential(a, b, c)(x) == c(b(a(x)))``.

    Children are named ``"0"``, ``"1"``… or by the keys of an ``OrderedDict`` given as the only
    argument. Indexing by int gives a module, by slice a new Sequential of the same modules;
    ``len``, iteration and ``append`` work as on a list.

    >>> from corvid import nn
    >>> net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    >>> net(cv.ones(2, 3)).shape
    (2, 1)
    >>> net
    Sequential(
      (0): Linear(in_features=3, out_features=4, bias=True)
      (1): ReLU()
      (2): Linear(in_features=4, out_features=1, bias=True)
    )
    """

    def __init__(self, *modules: Module | Mapping[str, Module]):
        super().__init__()
        self._items: dict[str, Module] = {}
        if len(modules) == 1 and isinstance(modules[0], (OrderedDict, dict)):
            for k, m in modules[0].items():
                self.add_module(k, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def _child_items(self) -> Iterator[tuple[str, Module]]:
        yield from list(self._items.items())
        yield from self._attribute_children(skip="_items")

    def add_module(self, name: str, module: Module | None) -> None:
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"Sequential: names must be non-empty strings without '.', got {name!r}")
        self._items[name] = _check_module(module, f"Sequential ({name!r})")

    def append(self, module: Module) -> Sequential:
        self.add_module(str(len(self._items)), module)
        return self

    def __getitem__(self, idx: int | slice) -> Any:
        pairs = list(self._items.items())
        if isinstance(idx, slice):
            return Sequential(OrderedDict(pairs[idx]))
        return pairs[_index(idx, len(pairs), "Sequential")][1]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._items.values()))

    def forward(self, x: Any) -> Any:
        for m in self._items.values():
            x = m(x)
        return x

"""Pytrees: nested tuples, lists, dicts (and registered classes) of tensors and other leaves.

The functional transforms (``grad``, ``jvp``, ``vmap``, ``jit``) take and return pytrees. A pytree
is flattened into its leaves in a fixed order plus a :class:`TreeDef` that rebuilds the same
structure around new leaves.

>>> leaves, tdef = tree_flatten({"b": (1, 2), "a": [3]})
>>> leaves
[3, 1, 2]
>>> tree_unflatten(tdef, [x * 10 for x in leaves])
{'a': [30], 'b': (10, 20)}

Dicts are flattened in sorted key order (as JAX does), so two dicts with the same keys always
line up. ``None`` is an empty subtree (it has no leaves). User classes join with
:func:`register_pytree_node`; dataclasses with :func:`register_dataclass`.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any, Callable, Iterable, Iterator

_registry: dict[type, tuple[Callable[[Any], tuple[Iterable[Any], Any]], Callable[[Any, list[Any]], Any]]] = {}


def register_pytree_node(cls: type, flatten: Callable[[Any], tuple[Iterable[Any], Any]],
                         unflatten: Callable[[Any, list[Any]], Any]) -> type:
    """Make instances of ``cls`` pytree nodes.

    ``flatten(obj) -> (children, aux)`` where aux is hashable static data, and
    ``unflatten(aux, children) -> obj``. Returns ``cls`` so it can decorate."""
    if not isinstance(cls, type):
        raise TypeError(f"register_pytree_node needs a class, got {cls!r}")
    _registry[cls] = (flatten, lambda aux, ch: unflatten(aux, list(ch)))
    return cls


def register_dataclass(cls: type) -> type:
    """Register a dataclass as a pytree node whose children are all its fields (a decorator)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    names = tuple(f.name for f in dataclasses.fields(cls))
    return register_pytree_node(cls, lambda o: ([getattr(o, n) for n in names], None),
                                lambda _, ch: cls(**dict(zip(names, ch))))


register_pytree_node(tuple, lambda t: (t, None), lambda _, ch: tuple(ch))
register_pytree_node(list, lambda t: (t, None), lambda _, ch: list(ch))
register_pytree_node(dict, lambda d: ([d[k] for k in sorted(d)], tuple(sorted(d))),
                     lambda keys, ch: dict(zip(keys, ch)))
register_pytree_node(OrderedDict, lambda d: (list(d.values()), tuple(d)),
                     lambda keys, ch: OrderedDict(zip(keys, ch)))
register_pytree_node(type(None), lambda _: ((), None), lambda _, ch: None)


class TreeDef:
    """The structure of a pytree with its leaves taken out.

    Its walks (equality, hashing, printing, and flattening and rebuilding below) keep their own
    stacks, so a structure of any depth works (a list nested 5000 deep used to overflow)."""

    __slots__ = ("kind", "aux", "children", "num_leaves")

    def __init__(self, kind: type | None, aux: Any, children: tuple[TreeDef, ...]):
        self.kind, self.aux, self.children = kind, aux, children
        self.num_leaves = 1 if kind is None else sum(c.num_leaves for c in children)

    def _key(self) -> tuple:
        """(kind, aux, number of children) of every node in pre-order: a flat tuple that
        determines the structure, so comparing and hashing it does not recurse."""
        out = []
        stack = [self]
        while stack:
            td = stack.pop()
            out.append((td.kind, td.aux, len(td.children)))
            stack.extend(reversed(td.children))
        return tuple(out)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TreeDef) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        parts: list[str] = []
        stack: list[TreeDef | str] = [self]
        while stack:
            td = stack.pop()
            if isinstance(td, str):
                parts.append(td)
            elif td.kind is None:
                parts.append("*")
            else:
                parts.append(f"{td.kind.__name__}(")
                stack.append(")")
                for i, c in enumerate(reversed(td.children)):
                    stack.append(c)
                    if i < len(td.children) - 1:
                        stack.append(", ")
        return "".join(parts)


_LEAF = TreeDef(None, None, ())


def _node_type(x: Any) -> type | None:
    t = type(x)
    if t in _registry:
        return t
    if isinstance(x, tuple) and hasattr(t, "_fields"):  # namedtuples
        return t
    return None


_END = object()


def tree_flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list[Any], TreeDef]:
    """``(leaves, treedef)``: the leaves in order and the structure around them."""
    leaves: list[Any] = []
    stack: list[tuple[type, Any, Iterator[Any], list[TreeDef]]] = []  # (kind, aux, children left, their defs)
    x = tree
    while True:
        t = None if is_leaf is not None and is_leaf(x) else _node_type(x)
        done: TreeDef | None = None
        if t is None:
            leaves.append(x)
            done = _LEAF
        else:
            children, aux = _registry[t][0](x) if t in _registry else (tuple(x), None)  # (a namedtuple)
            stack.append((t, aux, iter(children), []))
        while True:  # hand finished structures to their parents until a child is left to visit
            if done is not None:
                if not stack:
                    return leaves, done
                stack[-1][3].append(done)
            t, aux, rest, defs = stack[-1]
            x = next(rest, _END)
            if x is not _END:
                break
            stack.pop()
            done = TreeDef(t, aux, tuple(defs))


def tree_unflatten(treedef: TreeDef, leaves: Iterable[Any]) -> Any:
    """Rebuild ``treedef`` around ``leaves`` (ValueError if the count differs)."""
    items = list(leaves)
    if len(items) != treedef.num_leaves:
        raise ValueError(f"tree structure {treedef} has {treedef.num_leaves} leaves, got {len(items)}")
    if treedef.kind is None:
        return items[0]
    it = iter(items)
    stack: list[tuple[TreeDef, list[Any]]] = [(treedef, [])]  # (structure, its children built so far)
    while True:
        td, built = stack[-1]
        if len(built) < len(td.children):
            c = td.children[len(built)]
            if c.kind is None:
                built.append(next(it))
            else:
                stack.append((c, []))
            continue
        stack.pop()
        # (a kind not in the registry is a namedtuple)
        value = _registry[td.kind][1](td.aux, built) if td.kind in _registry else td.kind(*built)
        if not stack:
            return value
        stack[-1][1].append(value)


def tree_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Any]:
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> TreeDef:
    return tree_flatten(tree, is_leaf)[1]


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """Apply ``f`` leaf by leaf over ``tree`` and trees of the same structure in ``rest``."""
    leaves, td = tree_flatten(tree, is_leaf)
    others = []
    for r in rest:
        rl, rtd = tree_flatten(r, is_leaf)
        if rtd != td:
            raise ValueError(f"tree_map: structures differ: {td} and {rtd}")
        others.append(rl)
    return tree_unflatten(td, [f(*xs) for xs in zip(leaves, *others)])


__all__ = ["TreeDef", "register_dataclass", "register_pytree_node", "tree_flatten", "tree_leaves", "tree_map",
           "tree_structure", "tree_unflatten"]


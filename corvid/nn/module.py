"""Modules: objects that own parameters, buffers and submodules, as in PyTorch, that are also
pytrees, so the functional transforms take and return them.

A :class:`Module` finds what it owns from its attributes. A :class:`Parameter` assigned to an
attribute is registered as a parameter, :meth:`Module.register_buffer` registers a buffer, and
any attribute holding a module, or a list, tuple or dict of modules (nested freely), makes those
modules children. Names follow PyTorch (``layers.0.weight``), so state dicts are interchangeable.

Every module class is also a pytree node whose leaves are its parameters and floating-point
buffers (see :mod:`corvid.nn.pytree`), so the functional transforms take modules directly::

    grads = cv.grad(lambda m, x, y: loss(m(x), y))(model, x, y)   # a Module-shaped gradient
    grads.fc.weight                                                # d loss / d model.fc.weight

>>> class Net(Module):
...     def __init__(self):
...         super().__init__()
...         self.w = Parameter(cv.ones(2, 3))
...         self.blocks = [Net2(), Net2()]
...     def forward(self, x):
...         return x @ self.w
>>> class Net2(Module):
...     def __init__(self):
...         super().__init__()
...         self.b = Parameter(cv.zeros(3))
>>> [name for name, _ in Net().named_parameters()]
['w', 'blocks.0.b', 'blocks.1.b']
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from ..errors import ShapeError
from ..autograd import no_grad
from ..creation import zeros
from ..dtype import DType
from ..tensor import Tensor
from ..tree import register_pytree_node
from . import hooks
from .parameter import Parameter, tracing, value_of

__all__ = ["IncompatibleKeys", "Module", "check_input", "shape_error"]

_HOOKS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
_INTERNAL = frozenset({"_params", "_buffers", "training", *_HOOKS})


class IncompatibleKeys(NamedTuple):
    """What :meth:`~corvid.nn.Module.load_state_dict` did not match: a named tuple of the keys the
    module has that the state dict lacks (``missing_keys``), and the keys of the state dict the
    module does not have (``unexpected_keys``); both empty after a full match.

    >>> lin = cv.nn.Linear(2, 1)
    >>> res = lin.load_state_dict({"weight": np.ones((1, 2)), "scale": np.ones(1)}, strict=False)
    >>> res
    IncompatibleKeys(missing_keys=['bias'], unexpected_keys=['scale'])
    >>> lin.load_state_dict(lin.state_dict()).missing_keys
    []
    """

    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    """Base class of layers and models: subclass it, create parameters and submodules in
    ``__init__`` (after ``super().__init__()``) and compute in ``forward``; call the module to run it.

    Parameters are :class:`Parameter` attributes; buffers (state that is not trained, like
    BatchNorm's running statistics) come from :meth:`register_buffer`; children are attributes
    holding modules or lists/tuples/dicts of modules, as well as :class:`ModuleList`,
    :class:`ModuleDict` and :class:`Sequential`. ``training`` is True until :meth:`eval`.

    >>> class MLP(Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.w = Parameter(cv.ones(3, 2))
    ...     def forward(self, x):
    ...         return (x @ self.w).relu()
    >>> m = MLP()
    >>> m(cv.ones(4, 3)).shape
    (4, 2)
    >>> list(m.state_dict())
    ['w']
    """

    training: bool

    def __init__(self) -> None:
        d = self.__dict__
        d["_params"] = {}  # names, in registration order (a dict used as an ordered set)
        d["_buffers"] = {}  # name -> persistent (part of the state dict)
        d["training"] = True
        d["_forward_pre_hooks"] = OrderedDict()  # handle id -> (hook, with_kwargs)
        d["_forward_hooks"] = OrderedDict()  # handle id -> (hook, with_kwargs, always_call)
        d["_backward_pre_hooks"] = OrderedDict()  # handle id -> hook
        d["_backward_hooks"] = OrderedDict()  # handle id -> hook

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        register_pytree_node(cls, pytree.flatten_module, pytree.unflatten_module)  # it matches exact classes

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no forward method; define forward(self, ...)")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        d = self.__dict__
        if any(d.get(name) for name in _HOOKS):
            return hooks.call_with_hooks(self, args, kwargs)
        return self.forward(*args, **kwargs)

    # --- hooks (corvid.nn.hooks) ------------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable[..., Any], *, prepend: bool = False,
                                  with_kwargs: bool = False) -> hooks.RemovableHandle:
        """Call ``hook(module, args)`` before each ``forward`` (``hook(module, args, kwargs)`` with
        ``with_kwargs``); a non-None result replaces the arguments (see :mod:`corvid.nn.hooks`).
        Returns a handle whose ``remove()`` unregisters it.

        >>> from corvid import nn
        >>> lin = nn.Linear(2, 1)
        >>> h = lin.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
        >>> lin(cv.ones(1, 2)).tolist() == [lin.bias.tolist()]
        True
        """
        return hooks.add_hook(self.__dict__["_forward_pre_hooks"], hook, prepend, with_kwargs)

    def register_forward_hook(self, hook: Callable[..., Any], *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> hooks.RemovableHandle:
        """Call ``hook(module, args, output)`` after each ``forward`` (``hook(module, args,
        kwargs, output)`` with ``with_kwargs``); a non-None result replaces the output.
        ``always_call=True`` also calls it (output None) when ``forward`` raises. Returns a handle
        whose ``remove()`` unregisters it.

        >>> from corvid import nn
        >>> relu = nn.ReLU()
        >>> h = relu.register_forward_hook(lambda m, args, out: out * 2)
        >>> relu(cv.Tensor([-1.0, 3.0])).tolist()
        [0.0, 6.0]
        """
        return hooks.add_hook(self.__dict__["_forward_hooks"], hook, prepend, with_kwargs, always_call)

    def register_full_backward_pre_hook(self, hook: Callable[..., Any], prepend: bool = False) -> hooks.RemovableHandle:
        """Call ``hook(module, grad_output)`` when a reverse-mode pass reaches this module's
        outputs; a non-None result (one entry per output tensor) replaces the cotangents that flow
        into the module (see :mod:`corvid.nn.hooks`). Returns a handle whose ``remove()``
        unregisters it."""
        return hooks.add_hook(self.__dict__["_backward_pre_hooks"], hook, prepend)

    def register_full_backward_hook(self, hook: Callable[..., Any], prepend: bool = False) -> hooks.RemovableHandle:
        """Call ``hook(module, grad_input, grad_output)`` when a reverse-mode pass has the
        cotangents of this module's positional inputs; a non-None result (one entry per positional
        argument) replaces what flows on to them (see :mod:`corvid.nn.hooks`). Returns a handle
        whose ``remove()`` unregisters it.

        >>> from corvid import nn
        >>> lin, seen = nn.Linear(2, 1), []
        >>> h = lin.register_full_backward_hook(lambda m, gi, go: seen.append((gi[0].shape, go[0].shape)))
        >>> lin(cv.ones(3, 2, requires_grad=True)).sum().backward()
        >>> seen
        [((3, 2), (3, 1))]
        """
        return hooks.add_hook(self.__dict__["_backward_hooks"], hook, prepend)

    # --- registration ------------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        params = d.get("_params")
        if params is None:
            if isinstance(value, (Parameter, Module)):
                raise AttributeError(f"cannot assign {type(value).__name__} {name!r} before Module.__init__(); "
                                     "call super().__init__() first in the constructor")
        elif isinstance(value, Parameter):
            d["_buffers"].pop(name, None)
            params[name] = None
        elif (name in params or name in d["_buffers"]) and value is not None and not isinstance(value, Tensor):
            kind = "parameter" if name in params else "buffer"
            raise TypeError(f"cannot assign a {type(value).__name__} to {kind} {name!r} of "
                            f"{type(self).__name__} (a tensor or None expected)")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self.__dict__["_params"].pop(name, None)
        self.__dict__["_buffers"].pop(name, None)
        object.__delattr__(self, name)

    def _check_new_name(self, name: str, kind: str) -> None:
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"{kind} name must be a non-empty string without '.', got {name!r}")
        if name in self.__dict__ and name not in self._params and name not in self._buffers:
            raise KeyError(f"attribute {name!r} already exists on {type(self).__name__}")

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (a :class:`Parameter`, or None for an absent optional one such as a
        disabled bias) under ``name``; same as assigning the attribute. KeyError for a bad or taken
        name, TypeError for a plain tensor (wrap it: ``Parameter(t)``).

        >>> m = Module(); m.register_parameter("bias", None); list(m.named_parameters())
        []
        """
        self._check_new_name(name, "parameter")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: {name!r} must be a Parameter or None, got {type(param).__name__}; "
                            "wrap a tensor as nn.Parameter(t)")
        self._buffers.pop(name, None)
        self._params[name] = None
        object.__setattr__(self, name, param)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register ``tensor`` as a buffer: state that is saved (unless ``persistent=False``) and
        moved with the module, but not trained. Later assignments to the attribute keep it a buffer.
        KeyError for a bad or taken name, TypeError for a non-tensor.

        >>> m = Module(); m.register_buffer("count", cv.zeros((), dtype=cv.int64)); list(m.state_dict())
        ['count']
        """
        self._check_new_name(name, "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: {name!r} must be a Tensor or None, got {type(tensor).__name__}")
        self._params.pop(name, None)
        self._buffers[name] = bool(persistent)
        object.__setattr__(self, name, tensor)

    def add_module(self, name: str, module: Module | None) -> None:
        """Make ``module`` a child called ``name`` (same as assigning the attribute)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {name!r} must be a Module or None, got {type(module).__name__}")
        self._check_new_name(name, "module")
        setattr(self, name, module)

    register_module = add_module

    # --- traversal ---------------------------------------------------------------------------------
    def _child_items(self) -> Iterator[tuple[str, Module]]:
        """The direct children with their names (containers override this to name their items)."""
        return self._attribute_children()

    def _attribute_children(self, skip: str = "") -> Iterator[tuple[str, Module]]:
        """Modules held by attributes (other than ``skip``): directly or inside (nested) lists,
        tuples and dicts, named ``attr``, ``attr.0``, ``attr.key``."""
        for name, value in self.__dict__.items():
            if name not in _INTERNAL and name != skip:
                yield from _modules_in(name, value)

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """``(name, module)`` for each direct child, each module once."""
        seen: set[int] = set()
        for name, m in self._child_items():
            if id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator[Module]:
        return (m for _, m in self.named_children())

    def named_modules(self, memo: set[int] | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """``(name, module)`` for this module (name ``prefix``) and every descendant, depth first;
        a module reachable twice is listed once unless ``remove_duplicate=False``."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._child_items():
            yield from m.named_modules(memo, join_name(prefix, name), remove_duplicate)

    def modules(self) -> Iterator[Module]:
        return (m for _, m in self.named_modules())

    def _named_tensors(self, kind: str, prefix: str, recurse: bool,
                       remove_duplicate: bool) -> Iterator[tuple[str, Tensor]]:
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        seen: set[int] = set()
        for mp, m in mods:
            for name in m.__dict__[kind]:
                t = m.__dict__.get(name)
                if t is None or (remove_duplicate and id(t) in seen):
                    continue
                seen.add(id(t))
                yield join_name(mp, name), t

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        """``(name, parameter)`` pairs: this module's own parameters in registration order, then
        each child's (depth first). A parameter shared by two modules is listed once.

        >>> from corvid import nn
        >>> [n for n, _ in nn.Sequential(nn.Linear(2, 3), nn.ReLU()).named_parameters()]
        ['0.weight', '0.bias']
        """
        return self._named_tensors("_params", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        """``(name, buffer)`` pairs, ordered as :meth:`named_parameters`."""
        return self._named_tensors("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        return (b for _, b in self.named_buffers(recurse=recurse))

    # --- modes -------------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set ``training`` on this module and every descendant (Dropout and BatchNorm read it); returns self."""
        if not isinstance(mode, bool):
            raise TypeError(f"train: mode must be a bool, got {type(mode).__name__}")
        for m in self.modules():
            m.__dict__["training"] = mode
        return self

    def eval(self) -> Module:
        """``train(False)``: Dropout becomes the identity and BatchNorm uses its running statistics."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Turn gradient recording of every parameter on or off (freezing); returns self."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's ``.grad``: to None (default), or to zeros with ``set_to_none=False``."""
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad = zeros(p.shape, dtype=p.dtype, device=p.device)

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call ``fn`` on every child (recursively), then on self; returns self.

        >>> from corvid import nn
        >>> seen = []
        >>> _ = nn.Sequential(nn.ReLU(), nn.Tanh()).apply(lambda m: seen.append(type(m).__name__))
        >>> seen
        ['ReLU', 'Tanh', 'Sequential']
        """
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def to(self, *args: Any, device: str | None = None, dtype: Any = None) -> Module:
        """Move every parameter and buffer to ``device`` and/or cast the floating-point ones to
        ``dtype`` (positional arguments: a device string or a dtype); returns self. A list of
        devices replicates them on each (data parallelism, see ``docs/devices.md``). Parameters
        keep their identity (an optimizer built before still holds them); their ``.grad`` is
        reset when the value changes.

        >>> from corvid import nn
        >>> nn.Linear(2, 2).to(cv.float64).weight.dtype.name
        'float64'
        """
        for a in args:
            if isinstance(a, DType):
                dtype = a
            elif isinstance(a, (str, list, tuple)):  # (a list of devices replicates, for data parallelism)
                device = a
            else:
                raise TypeError(f"to: expected a device string, a list of devices or a dtype, got {a!r}")
        target = None
        if dtype is not None:
            from .. import dtype as dt

            target = dt.to_dtype(dtype)
            if not target.is_float:
                raise TypeError(f"to: modules can only be cast to a floating-point dtype, got {target.name}")
        for m in self.modules():
            for kind in ("_params", "_buffers"):
                for name in m.__dict__[kind]:
                    t = m.__dict__.get(name)
                    if t is not None:
                        _convert(t, target, device)
        return self

    # --- state dicts -------------------------------------------------------------------------------
    def _state_items(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        """PyTorch's state-dict order: own parameters, own persistent buffers, then each child."""
        d = self.__dict__
        for name in d["_params"]:
            if d.get(name) is not None:
                yield prefix + name, d[name]
        for name, persistent in d["_buffers"].items():
            if persistent and d.get(name) is not None:
                yield prefix + name, d[name]
        for name, m in self._child_items():  # every name of a shared module, as torch
            yield from m._state_items(prefix + name + ".")

    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> dict[str, Tensor]:
        """The parameters and persistent buffers by name (PyTorch's names and order), as plain
        tensors without gradient history that share memory with the module (nothing is copied:
        corvid never writes a buffer in place). ``keep_vars=True`` gives the tensors themselves.
        Save it with ``cv.save(path, model.state_dict())``.

        >>> from corvid import nn
        >>> {k: v.shape for k, v in nn.Linear(3, 2).state_dict().items()}
        {'weight': (2, 3), 'bias': (2,)}
        """
        return {k: (t if keep_vars else value_of(t)) for k, t in self._state_items(prefix)}

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True, assign: bool = False) -> IncompatibleKeys:
        """Copy values from ``state_dict`` (corvid tensors, numpy arrays, or anything numpy can
        convert, torch tensors included) into the parameters and buffers of the same names.

        Values are cast to each tensor's dtype; parameters stay the same objects (an optimizer
        keeps working). Raises RuntimeError listing every problem: a value whose shape differs
        (always), and with ``strict=True`` (default) keys the module has that the dict lacks
        ("missing") and keys it does not have ("unexpected"); when quantized layers
        (:mod:`corvid.quant`) on one side meet float ones, or another mode or group size, on the
        other, it also says which ``cv.quantize`` call makes them fit. Returns
        ``IncompatibleKeys(missing_keys, unexpected_keys)``. ``assign=True`` makes the module
        hold the given corvid tensors themselves (made Parameters where needed) instead of copying.

        >>> from corvid import nn
        >>> lin = nn.Linear(2, 1)
        >>> lin.load_state_dict({"weight": np.ones((1, 2))}, strict=False)
        IncompatibleKeys(missing_keys=['bias'], unexpected_keys=[])
        """
        own = dict(self._state_places())
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors, values = [], {}
        for key, (m, name) in own.items():
            if key not in state_dict:
                continue
            t = m.__dict__[name]
            v = m._load_value(name, _as_tensor(state_dict[key], t.device))
            if v.shape != t.shape:
                errors.append(f"size mismatch for {key}: copying a value with shape {v.shape} from the state "
                              f"dict, the shape in the current model is {t.shape}.")
            values[key] = v
        if strict and missing:
            errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
        if strict and unexpected:
            errors.insert(0, "Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
        if errors and any(str(k).rpartition(".")[2] == "qweight" for k in (*own, *state_dict)):
            from ..quant import load_hints  # (quantized layers on one side: say how to make the two fit)

            errors += load_hints({k: m.__dict__[n] for k, (m, n) in own.items()}, state_dict)
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors))
        with no_grad():
            for key, v in values.items():
                m, name = own[key]
                t = m.__dict__[name]
                if assign:
                    fresh = v.astype(t.dtype)
                    if isinstance(t, Parameter):
                        fresh = fresh if isinstance(fresh, Parameter) else Parameter(fresh, t.requires_grad)
                    m.__dict__[name] = fresh
                else:
                    t.assign(v)
                    if not tracing():
                        t.realize()
        return IncompatibleKeys(missing, unexpected)

    def _load_value(self, name: str, value: Tensor) -> Tensor:
        """The value ``load_state_dict`` gives the parameter or buffer ``name`` for ``value`` (a
        state dict's entry, as a tensor on its device): ``value`` itself here; a module whose
        stored layout changed converts an older one (``corvid.quant.QuantizedLinear``)."""
        return value

    def _state_places(self, prefix: str = "") -> Iterator[tuple[str, tuple[Module, str]]]:
        d = self.__dict__
        for name in d["_params"]:
            if d.get(name) is not None:
                yield prefix + name, (self, name)
        for name, persistent in d["_buffers"].items():
            if persistent and d.get(name) is not None:
                yield prefix + name, (self, name)
        for name, m in self._child_items():
            yield from m._state_places(prefix + name + ".")

    # --- copies and printing -----------------------------------------------------------------------
    def __deepcopy__(self, memo: dict[int, Any]) -> Module:
        # Tensors need care: a default deep copy of a requires_grad leaf keeps its mark pointing
        # at the original tensor. Seed the memo with fresh values for every parameter and buffer.
        for m in self.modules():
            for kind in ("_params", "_buffers"):
                for name in m.__dict__[kind]:
                    t = m.__dict__.get(name)
                    if t is not None and id(t) not in memo:
                        memo[id(t)] = copy.deepcopy(t, memo) if isinstance(t, Parameter) else value_of(t)
        new = object.__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            new.__dict__[k] = copy.deepcopy(v, memo)
        return new

    def extra_repr(self) -> str:
        """The text inside this module's parentheses in ``repr`` (its hyperparameters); override it."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        children = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self.named_children()]
        if not children and "\n" not in extra:
            return f"{type(self).__name__}({extra})"
        lines = [ln for ln in extra.split("\n") if ln] + children
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"

    def _repr_html_(self) -> str:
        """Jupyter's rich display: a table of the layers with their parameter counts."""
        from ..display import module_html

        return module_html(self)


def check_input(layer: Module, x: Any, ranks: tuple[int, ...], expected: str) -> Tensor:
    """``x`` as a Tensor; ValueError naming ``layer`` and the ``expected`` shape when its rank is
    not in ``ranks`` (layers call this first, so a wrong input fails with a readable message)."""
    t = x if isinstance(x, Tensor) else Tensor(x)
    if t.ndim not in ranks:
        raise shape_error(layer, expected, t)
    return t


def shape_error(layer: Module, expected: str, x: Tensor) -> ShapeError:
    """The error for an input of the wrong shape, naming the layer (with its settings) and the shape it expects."""
    return ShapeError(f"{layer.__class__.__name__}({layer.extra_repr()}): expected an input of shape {expected}, "
                      f"got {x.shape}")


def join_name(prefix: str, name: str) -> str:
    """``prefix.name`` (``name`` alone at the top level)."""
    return f"{prefix}.{name}" if prefix else name


def _modules_in(name: str, value: Any) -> Iterator[tuple[str, Module]]:
    """The modules held by an attribute value: itself, or inside (nested) lists, tuples and dicts."""
    if isinstance(value, Module):
        yield name, value
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _modules_in(f"{name}.{i}", v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _modules_in(f"{name}.{k}", v)


def _as_tensor(value: Any, device: str) -> Tensor:
    if isinstance(value, Tensor):
        return value if value.device == device else value.to(device)
    if hasattr(value, "detach") and hasattr(value, "cpu") and hasattr(value, "numpy"):  # a torch tensor
        value = value.detach().cpu().numpy()
    return Tensor(np.array(value), device=device)


def _convert(t: Tensor, dtype: DType | None, device: str | None) -> None:
    """Give ``t`` (the same object) its value cast to ``dtype`` (floats only) and moved to ``device``."""
    v = t
    if dtype is not None and t.dtype.is_float:
        v = v.astype(dtype)
    if device is not None:
        v = v.to(device)
    if v is t:
        return
    v = value_of(v).realize()
    leaf = t.requires_grad and t.is_leaf
    if leaf:
        t.requires_grad_(False)
    t.node, t.device = v.node, v.device  # a Tensor is a handle: rebinding keeps its identity
    t.grad = None
    if leaf:
        t.requires_grad_(True)


def replace_modules(model: Module, swap: dict[int, Module]) -> None:
    """Put ``swap[id(m)]`` wherever a module of ``model`` holds ``m``: in an attribute, in (nested)
    lists, tuples and dicts of attributes, and so in containers' items."""
    for m in list(model.modules()):
        d = m.__dict__
        for name, value in list(d.items()):
            if name in _INTERNAL or name in d["_params"] or name in d["_buffers"]:
                continue
            new = _swapped(value, swap)
            if new is not value:
                d[name] = new


def _swapped(value: Any, swap: dict[int, Module]) -> Any:
    if isinstance(value, Module):
        return swap.get(id(value), value)
    if isinstance(value, list):
        value[:] = [_swapped(v, swap) for v in value]
        return value
    if isinstance(value, dict):
        for k, v in list(value.items()):
            value[k] = _swapped(v, swap)
        return value
    if isinstance(value, tuple):
        items = [_swapped(v, swap) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        return type(value)(*items) if hasattr(type(value), "_fields") else type(value)(items)
    return value


from . import pytree

register_pytree_node(Module, pytree.flatten_module, pytree.unflatten_module)

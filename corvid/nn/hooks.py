"""Module hooks, as PyTorch's: functions a :class:`~corvid.nn.Module` calls before and after its
``forward`` (``register_forward_pre_hook`` / ``register_forward_hook``) and when the backward pass
goes through it (``register_full_backward_pre_hook`` / ``register_full_backward_hook``), removed
through the :class:`RemovableHandle` each registration returns.

A pre-hook ``hook(module, args)`` runs before ``forward`` and may return new positional
arguments (a tuple, or one value that becomes a 1-tuple); with ``with_kwargs=True`` it is
``hook(module, args, kwargs)`` and may return ``(args, kwargs)``. A hook ``hook(module, args,
output)`` (``hook(module, args, kwargs, output)`` with ``with_kwargs``) runs after ``forward`` and
may return a new output. ``None`` keeps things as they are. Hooks run in registration order
(``prepend=True`` puts one first); ``always_call=True`` also runs a forward hook, with output
None, when ``forward`` raised (the error propagates; an error in that hook only warns).

A backward pre-hook ``hook(module, grad_output)`` may return new output cotangents (what flows
into the module); a full backward hook ``hook(module, grad_input, grad_output)`` may return new
input cotangents (what flows out to its inputs). ``grad_input`` has one entry per positional
argument (None for non-tensors and tensors that need no gradient; keywords are ignored),
``grad_output`` one per tensor in the output, nested structures flattened (zeros for an output
the pass does not use; PyTorch looks at the top level only and gives None there). They are
wrapped around the module's inputs and outputs as :func:`corvid.custom_vjp` identities, so they
run whenever a reverse-mode pass (``backward``, ``cv.grad``) goes through the module, once per
pass, with lazy tensors. When no input needs a gradient, the full hook runs right after the
pre-hooks, with ``grad_input`` all None.

Hooks are Python: inside ``cv.jit`` they run while the function is traced, not at each replay
(what they return becomes part of the program; reading a value there is a trace error).

>>> from corvid import nn
>>> lin = nn.Linear(2, 2)
>>> seen = []
>>> handle = lin.register_forward_hook(lambda m, args, out: seen.append(out.shape))
>>> _ = lin(cv.ones(3, 2)); handle.remove(); _ = lin(cv.ones(1, 2))
>>> seen
[(3, 2)]
"""

from __future__ import annotations

import itertools
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ..autograd import REVERSE_KINDS, depends_on
from ..tensor import Tensor
from ..transforms.custom import custom_vjp
from ..tree import tree_flatten, tree_unflatten

__all__ = ["RemovableHandle"]

_ids = itertools.count()


class RemovableHandle:
    """What registering a hook returns: ``remove()`` unregisters it (again: nothing happens);
    used as a context manager, the hook is removed on exit.

    >>> hooks = OrderedDict()
    >>> h = RemovableHandle(hooks); hooks[h.id] = print
    >>> with h:
    ...     len(hooks)
    1
    >>> len(hooks)
    0
    """

    def __init__(self, hooks: OrderedDict[int, Any]):
        self.id = next(_ids)
        self._hooks = weakref.ref(hooks)  # the module owns the table; a handle must not keep it alive

    def remove(self) -> None:
        hooks = self._hooks()
        if hooks is not None:
            hooks.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def add_hook(table: OrderedDict[int, Any], hook: Callable[..., Any], prepend: bool, *flags: bool) -> RemovableHandle:
    """Put ``(hook, *flags)`` in ``table`` under a new handle's id; TypeError if it is not callable."""
    if not callable(hook):
        raise TypeError(f"a hook must be callable, got {type(hook).__name__}")
    handle = RemovableHandle(table)
    table[handle.id] = (hook, *flags)
    if prepend:
        table.move_to_end(handle.id, last=False)
    return handle


def call_with_hooks(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``module.forward(*args, **kwargs)`` with its forward pre-hooks before, its forward hooks
    after, and its backward hooks around its inputs and outputs (in PyTorch's order)."""
    tables = module.__dict__
    for hook, with_kwargs in list(tables.get("_forward_pre_hooks", {}).values()):
        if with_kwargs:
            result = hook(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
                    raise RuntimeError(f"a forward pre-hook registered with with_kwargs=True must return None or a "
                                       f"pair (args, kwargs), got {type(result).__name__}")
                args, kwargs = tuple(result[0]), result[1]
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    backward = _BackwardHooks(module) if tables.get("_backward_hooks") or tables.get("_backward_pre_hooks") else None
    if backward is not None:
        args = backward.wrap_inputs(args)
    hooks = list(tables.get("_forward_hooks", {}).items())
    called: set[int] = set()
    try:
        out = module.forward(*args, **kwargs)
        for key, (hook, with_kwargs, _) in hooks:
            called.add(key)
            result = hook(module, args, kwargs, out) if with_kwargs else hook(module, args, out)
            if result is not None:
                out = result
        return out if backward is None else backward.wrap_outputs(out)
    except Exception:
        for key, (hook, with_kwargs, always_call) in hooks:
            if always_call and key not in called:
                try:
                    hook(module, args, kwargs, None) if with_kwargs else hook(module, args, None)
                except Exception as e:  # noqa: BLE001 -- the original error is the one to report
                    warnings.warn(f"a forward hook with always_call=True raised {e!r}, ignored", stacklevel=2)
        raise


def _needs_grad(x: Any) -> bool:
    return isinstance(x, Tensor) and x.dtype.is_float and depends_on(x.node, REVERSE_KINDS)


def _identity(*xs: Tensor) -> tuple[Tensor, ...]:
    return xs


class _BackwardHooks:
    """One call's backward hooks: identities with a custom VJP around the inputs that need a
    gradient and around the outputs. Reverse mode reaches the outputs' rule first (it records
    ``grad_output``), then the inputs' rule (it calls the full hooks)."""

    def __init__(self, module: Any):
        self.module = module
        self.n_args, self.positions = 0, []
        self.grad_output: tuple[Tensor | None, ...] = ()

    def _through(self, xs: list[Tensor], rule: Callable[[tuple[Tensor, ...]], tuple[Any, ...]]) -> tuple[Tensor, ...]:
        ident = custom_vjp(_identity)
        ident.defvjp(lambda *v: (v, None), lambda _, cts: rule(cts))
        return ident(*xs)

    def wrap_inputs(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        self.n_args = len(args)
        self.positions = [i for i, a in enumerate(args) if _needs_grad(a)]
        if not self.positions:
            return args
        out = list(args)
        for i, v in zip(self.positions, self._through([args[i] for i in self.positions], self._on_inputs)):
            out[i] = v
        return tuple(out)

    def wrap_outputs(self, out: Any) -> Any:
        leaves, tree = tree_flatten(out)
        self.tensors = [i for i, o in enumerate(leaves) if isinstance(o, Tensor)]
        picked = [i for i in self.tensors if _needs_grad(leaves[i])]
        if not picked:
            return out
        self.picked = picked
        for i, v in zip(picked, self._through([leaves[i] for i in picked], self._on_outputs)):
            leaves[i] = v
        return tree_unflatten(tree, leaves)

    def _on_outputs(self, cts: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        given = dict(zip(self.picked, cts))
        grad_output = tuple(given.get(i) for i in self.tensors)
        for (hook,) in list(self.module.__dict__["_backward_pre_hooks"].values()):
            result = hook(self.module, grad_output)
            if result is not None:
                grad_output = _check_grads(result, len(grad_output), "backward pre-hook", "grad_output")
        self.grad_output = grad_output
        if not self.positions:  # no input takes a gradient: nothing will call the input rule
            self._full_hooks((None,) * self.n_args)
        new = dict(zip(self.tensors, grad_output))
        return tuple(new[i] for i in self.picked)

    def _on_inputs(self, cts: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
        grad_input: tuple[Tensor | None, ...] = tuple(dict(zip(self.positions, cts)).get(i) for i in range(self.n_args))
        grad_input = self._full_hooks(grad_input)
        return tuple(grad_input[i] for i in self.positions)

    def _full_hooks(self, grad_input: tuple[Tensor | None, ...]) -> tuple[Tensor | None, ...]:
        for (hook,) in list(self.module.__dict__["_backward_hooks"].values()):
            result = hook(self.module, grad_input, self.grad_output)
            if result is not None:
                grad_input = _check_grads(result, len(grad_input), "full backward hook", "grad_input")
        return grad_input


def _check_grads(result: Any, n: int, what: str, name: str) -> tuple[Tensor | None, ...]:
    if not isinstance(result, (tuple, list)) or len(result) != n:
        got = f"{type(result).__name__}" + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else "")
        raise RuntimeError(f"a {what} must return None or a tuple of {n} tensors (one per entry of {name}), got {got}")
    return tuple(result)

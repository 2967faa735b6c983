"""LoRA: low-rank adapters, to fine-tune a model's linear layers while its weights stay frozen.

A :class:`LoRALinear` wraps an :class:`~corvid.nn.Linear` (its ``base_layer``, frozen) and adds
a trainable update of rank ``r`` to its weight: ``y = base_layer(x) + scaling * dropout(x) @ A.T
@ B.T`` with ``A`` of shape ``(r, in_features)``, ``B`` ``(out_features, r)`` and ``scaling =
alpha / r``, as in Hu et al. (2021) and Hugging Face ``peft``. ``B`` starts at zero, so an adapted
model computes what the original did until it is trained.

:func:`apply_lora` puts adapters on the linear layers of any model whose names match (``q_proj``
and ``v_proj`` by default: the query and value projections of a
:class:`corvid.models.CausalLM`), or that a predicate picks, and freezes every other parameter.
:func:`lora_state_dict` and :func:`load_lora` save and load the adapters alone (kilobytes where
the model has megabytes); :func:`save_lora` writes them to a safetensors file with the ``alpha``
they were trained with. :func:`merge_lora` folds them into the weights and gives back plain
``Linear`` layers, which compute the same outputs as fast as the original model.

>>> from corvid import nn
>>> model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
>>> x = cv.randn(5, 8)
>>> before = model(x)
>>> model = apply_lora(model, r=2, alpha=4, target=("0", "2"))
>>> [name for name, p in model.named_parameters() if p.requires_grad]
['0.lora_A', '0.lora_B', '2.lora_A', '2.lora_B']
>>> bool((model(x) == before).all())                  # B is zero: the same outputs
True
>>> opt = cv.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.05)
>>> for _ in range(5):
...     opt.zero_grad()
...     ((model(x) - 1) ** 2).mean().backward()
...     opt.step()
>>> adapted = model(x)
>>> sorted(lora_state_dict(model))
['0.lora_A', '0.lora_B', '2.lora_A', '2.lora_B']
>>> model = merge_lora(model)
>>> type(model[0]).__name__, bool(((model(x) - adapted).abs() < 1e-5).all())
('Linear', True)
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..amp import autocast
from ..autograd import no_grad
from ..creation import empty, zeros
from ..dtype import float32, to_dtype
from ..tensor import Tensor
from . import init
from .dropout import dropout as _dropout
from .linear import Linear, linear
from .module import Module, _as_tensor, join_name, replace_modules
from .parameter import Parameter, tracing, value_of
from .pytree import copy_module_tree

__all__ = ["LoRALinear", "apply_lora", "load_lora", "lora_state_dict", "merge_lora", "save_lora"]

_Target = str | Iterable[str] | Callable[[str, Module], bool]

_PEFT_PREFIX = "base_model.model."  # how peft's adapter files name the wrapped model


class LoRALinear(Module):
    """A frozen :class:`~corvid.nn.Linear` plus a trainable low-rank update of its weight:
    ``y = base_layer(x) + scaling * dropout(x) @ lora_A.T @ lora_B.T``.

    ``LoRALinear(base, r=8, alpha=16, dropout=0.0, dtype=None)`` keeps ``base`` as its child
    ``base_layer`` (the same object: hooks on it still run) and freezes its parameters
    (``requires_grad`` False). The adapter's parameters are ``lora_A`` ``(r, in_features)``,
    initialized as a Linear's weight (``kaiming_uniform_`` with ``a=sqrt(5)``), and ``lora_B``
    ``(out_features, r)``, initialized to zero, so the layer computes ``base``'s outputs exactly
    until trained; ``scaling`` is ``alpha / r``. In training mode the adapter's input goes
    through :func:`~corvid.nn.functional.dropout` with probability ``dropout`` (the base layer
    sees ``x`` itself). The adapter has ``base``'s dtype unless ``dtype`` says another (float32
    adapters on a bfloat16 model train better); its output is cast to the base's.

    :meth:`merge` gives the equivalent plain ``Linear``. TypeError unless ``base`` is a
    ``Linear``; ValueError for ``r`` not a positive int, ``alpha`` not a positive number or
    ``dropout`` outside ``[0, 1)``.

    >>> from corvid import nn
    >>> base = nn.Linear(4, 3)
    >>> layer = LoRALinear(base, r=2, alpha=4)
    >>> layer.lora_A.shape, layer.lora_B.shape, layer.scaling, base.weight.requires_grad
    ((2, 4), (3, 2), 2.0, False)
    >>> x = cv.randn(5, 4)
    >>> bool((layer(x) == base(x)).all())
    True
    >>> _ = cv.nn.init.ones_(layer.lora_B)               # as if trained
    >>> w = base.weight + layer.scaling * layer.lora_B @ layer.lora_A
    >>> bool(((layer(x) - (x @ w.T + base.bias)).abs() < 1e-5).all())
    True
    """

    def __init__(self, base: Linear, r: int = 8, alpha: float = 16, dropout: float = 0.0, dtype: Any = None):
        super().__init__()
        if not isinstance(base, Linear):
            raise TypeError(f"LoRALinear wraps an nn.Linear, got {type(base).__name__}")
        _check_settings("LoRALinear", r, alpha, dropout)
        w = base.weight
        dt = _adapter_dtype("LoRALinear", w.dtype if dtype is None else dtype)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.r, self.alpha, self.scaling, self.dropout = r, alpha, alpha / r, float(dropout)
        self.lora_A = Parameter(empty(r, self.in_features, dtype=dt, device=w.device))
        self.lora_B = Parameter(zeros(self.out_features, r, dtype=dt, device=w.device))
        self.reset_parameters()
        for p in base.parameters():
            p.requires_grad_(False)
        self.base_layer = base

    def reset_parameters(self) -> None:
        """``lora_A`` drawn as a Linear's weight (``kaiming_uniform_(a=sqrt(5))``), ``lora_B`` zero:
        the layer is its base layer again."""
        init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        init.zeros_(self.lora_B)

    def forward(self, x: Tensor) -> Tensor:
        x = x if isinstance(x, Tensor) else Tensor(x)
        y = self.base_layer(x)
        h = _dropout(x, self.dropout) if self.training and self.dropout else x
        if h.dtype != self.lora_A.dtype:
            h = h.astype(self.lora_A.dtype)
        delta = linear(linear(h, self.lora_A) * self.scaling, self.lora_B)
        return y + (delta if delta.dtype == y.dtype else delta.astype(y.dtype))

    @property
    def weight(self) -> Tensor:
        """The weight this layer applies, ``base_layer.weight + scaling * lora_B @ lora_A`` in the
        base's dtype (differentiable in the adapters), for code that reads a linear layer's
        ``weight`` instead of calling it, as :class:`corvid.models.CausalLM` does with its
        ``lm_head``; dropout does not apply to it.

        >>> from corvid import nn
        >>> layer = LoRALinear(nn.Linear(3, 2), r=1, alpha=2)
        >>> _ = cv.nn.init.ones_(layer.lora_B)
        >>> delta = layer.weight - layer.base_layer.weight
        >>> bool(((delta - 2 * layer.lora_B @ layer.lora_A).abs() < 1e-6).all())
        True
        """
        w = self.base_layer.weight
        delta = (self.lora_B @ self.lora_A) * self.scaling
        return w + (delta if delta.dtype == w.dtype else delta.astype(w.dtype))

    @property
    def bias(self) -> Tensor | None:
        """The base layer's bias (None without one): the adapter adds none."""
        return self.base_layer.bias

    def merge(self) -> Linear:
        """A copy of ``base_layer`` whose weight is ``weight + scaling * lora_B @ lora_A`` (summed
        in float32, or float64 for a float64 weight, and rounded once to the weight's dtype): a
        plain ``Linear`` computing what this layer computes (in evaluation mode). The bias is
        shared; the new weight has the old one's ``requires_grad``. This layer and its base
        layer are left unchanged. TypeError when the base layer is no longer a ``Linear`` (a
        ``QuantizedLinear`` after ``corvid.quant.quantize``: merge before quantizing).

        >>> from corvid import nn
        >>> layer = LoRALinear(nn.Linear(4, 3), r=2)
        >>> _ = cv.nn.init.ones_(layer.lora_B)
        >>> merged = layer.merge()
        >>> x = cv.randn(2, 4)
        >>> type(merged).__name__, bool(((merged(x) - layer(x)).abs() < 1e-5).all())
        ('Linear', True)
        """
        if not isinstance(self.base_layer, Linear):  # (corvid.quant.quantize replaces Linear layers)
            raise TypeError(f"LoRALinear.merge: its base layer is now {type(self.base_layer).__name__}, not a Linear "
                            "whose weight could take the update; merge before replacing it")
        w = self.base_layer.weight
        acc = w.dtype if w.dtype.is_float and w.dtype.itemsize >= 8 else float32
        with no_grad(), autocast(enabled=False):
            delta = self.lora_B.astype(acc) @ self.lora_A.astype(acc)
            merged = (w.astype(acc) + delta * self.scaling).astype(w.dtype)
        new = copy_module_tree(self.base_layer, {})
        new.weight = Parameter(merged, requires_grad=w.requires_grad)
        return new

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, r={self.r}, "
                f"alpha={self.alpha}, dropout={self.dropout}")


def apply_lora(model: Module, r: int = 8, alpha: float = 16, target: _Target = ("q_proj", "v_proj"),
               dropout: float = 0.0, dtype: Any = None) -> Module:
    """Replace the chosen ``Linear`` layers of ``model`` by :class:`LoRALinear` layers wrapping
    them, in place, and freeze every other parameter; returns ``model``.

    ``target`` picks the layers: a name or a sequence of names, each matching the ``Linear``
    layers whose qualified name (as in ``named_modules``) is that name or ends with ``"."`` and
    it (``"q_proj"`` matches every layer's ``q_proj``, ``"attn.c_proj"`` the attention's
    ``c_proj`` and not the MLP's, ``"model.layers.0.mlp.up_proj"`` one layer); or a predicate
    ``target(name, module) -> bool`` called with each ``Linear`` layer. The default,
    ``("q_proj", "v_proj")``, is ``peft``'s for Llama-family models: the query and value
    projections of every attention layer of a :class:`corvid.models.CausalLM`
    (``("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")`` adapts
    every projection; ``"lm_head"``, which the model reads as a weight rather than calls, works
    too: see :attr:`LoRALinear.weight`). A layer held in several places (a shared module) is
    adapted once, everywhere. ``r``, ``alpha``, ``dropout`` and ``dtype`` are :class:`LoRALinear`'s.

    Afterwards only the adapters train: every parameter of ``model`` has ``requires_grad``
    False except the ``lora_A`` and ``lora_B`` of its LoRA layers (those of an earlier call
    included), so ``[p for p in model.parameters() if p.requires_grad]`` is what an optimizer
    needs. Buffers and the rest of the model are untouched.

    ValueError when no ``Linear`` layer matches, naming the model's linear layers; for a name of
    ``target`` that matches none (a misspelt name would otherwise be ignored), or that matches
    layers already adapted; and for ``r``, ``alpha`` or ``dropout`` out of range (see
    :class:`LoRALinear`). TypeError when ``model`` is itself a ``Linear`` (wrap it:
    ``LoRALinear(model)``) or ``target`` is neither names nor a callable.

    >>> from corvid import nn
    >>> class Block(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.q_proj, self.k_proj, self.v_proj = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
    ...         self.norm = nn.LayerNorm(8)
    >>> model = nn.Sequential(Block(), Block())
    >>> model = apply_lora(model, r=4)
    >>> type(model[0].q_proj).__name__, type(model[0].k_proj).__name__
    ('LoRALinear', 'Linear')
    >>> [name for name, p in model.named_parameters() if p.requires_grad][:2]
    ['0.q_proj.lora_A', '0.q_proj.lora_B']
    >>> model = apply_lora(model, r=2, target=lambda name, layer: name == "1.k_proj")
    >>> model[1].k_proj.r, model[0].k_proj.__class__.__name__
    (2, 'Linear')
    >>> apply_lora(nn.Sequential(Block()), target=("q_proj", "v_prj"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    ValueError: apply_lora: no layer of Sequential is named 'v_prj' (or ends with '.v_prj'); its Linear layers: 0.k...
    """
    if isinstance(model, Linear):
        raise TypeError("apply_lora: the model is itself a Linear, which cannot be replaced in place; "
                        "wrap it: LoRALinear(model, r, alpha)")
    _check_settings("apply_lora", r, alpha, dropout)
    if dtype is not None:
        dtype = _adapter_dtype("apply_lora", dtype)
    wrapped = {id(m.base_layer) for m in model.modules() if isinstance(m, LoRALinear)}
    places = [(name, m) for name, m in model.named_modules(remove_duplicate=False)
              if name and id(m) not in wrapped]
    linears = [(name, m) for name, m in places if isinstance(m, Linear)]
    chosen: dict[int, Linear] = {}
    if callable(target) and not isinstance(target, str):
        for name, m in linears:
            if target(name, m):
                chosen[id(m)] = m
        if not chosen:
            raise ValueError(f"apply_lora: the target predicate picks no Linear layer of {type(model).__name__}; "
                             f"{_linear_names(linears)}")
    else:
        names = _target_names(target)
        for t in names:
            hits = [(name, m) for name, m in places if name == t or name.endswith("." + t)]
            found = [m for _, m in hits if isinstance(m, Linear)]
            if not found:
                raise ValueError(_no_match(model, t, hits, linears))
            for m in found:
                chosen[id(m)] = m
    swap = {key: LoRALinear(m, r, alpha, dropout, dtype) for key, m in chosen.items()}
    replace_modules(model, swap)
    for p in model.parameters():
        p.requires_grad_(False)
    for m in model.modules():
        if isinstance(m, LoRALinear):
            m.lora_A.requires_grad_(True)
            m.lora_B.requires_grad_(True)
    return model


def merge_lora(model: Module) -> Module:
    """Fold every :class:`LoRALinear` of ``model`` into its weights: each is replaced, in place,
    by the plain ``Linear`` of :meth:`LoRALinear.merge` (weight ``W + scaling * B @ A``), and
    ``model`` is returned, with the module layout (and state-dict names) it had before
    :func:`apply_lora`; when ``model`` is itself a ``LoRALinear``, its merged ``Linear``.

    The merged model computes what the adapted one computed in evaluation mode (up to rounding),
    with no extra work per call. Its parameters keep their ``requires_grad`` (frozen after
    :func:`apply_lora`: ``for p in model.parameters(): p.requires_grad_()`` trains them all
    again). ValueError when ``model`` has no LoRA layer.

    >>> from corvid import nn
    >>> model = apply_lora(nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2)), target="2")
    >>> _ = cv.nn.init.ones_(model[2].lora_B)
    >>> x = cv.randn(3, 4)
    >>> adapted = model(x)
    >>> model = merge_lora(model)
    >>> [type(m).__name__ for m in model], list(model.state_dict())
    (['Linear', 'Tanh', 'Linear'], ['0.weight', '0.bias', '2.weight', '2.bias'])
    >>> bool(((model(x) - adapted).abs() < 1e-5).all())
    True
    """
    layers = [m for m in model.modules() if isinstance(m, LoRALinear)]
    if not layers:
        raise ValueError(f"merge_lora: {type(model).__name__} has no LoRA layers (apply_lora adds them)")
    if isinstance(model, LoRALinear):
        return model.merge()
    replace_modules(model, {id(m): m.merge() for m in layers})
    return model


def lora_state_dict(model: Module) -> dict[str, Tensor]:
    """The adapters of ``model`` alone: ``{"<layer>.lora_A": A, "<layer>.lora_B": B}`` for each
    :class:`LoRALinear`, under the names they have in ``model.state_dict()`` (for a
    ``CausalLM``: ``model.layers.0.self_attn.q_proj.lora_A``...), as plain tensors sharing
    memory with the model. ``cv.save(path, lora_state_dict(model))`` writes them
    (:func:`save_lora` adds their ``alpha``); :func:`load_lora` reads them back. ValueError when
    ``model`` has no LoRA layer.

    >>> from corvid import nn
    >>> model = apply_lora(nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 4)), r=2, target="0")
    >>> {k: v.shape for k, v in lora_state_dict(model).items()}
    {'0.lora_A': (2, 16), '0.lora_B': (16, 2)}
    """
    out = {}
    for name, m in _lora_layers(model, "lora_state_dict").items():
        out[join_name(name, "lora_A")] = value_of(m.lora_A)
        out[join_name(name, "lora_B")] = value_of(m.lora_B)
    return out


def save_lora(path: str | os.PathLike, model: Module) -> None:
    """Write ``model``'s adapters (:func:`lora_state_dict`) to the safetensors file ``path``,
    with each layer's ``alpha`` in the file's metadata (``"lora_alpha"``, a JSON object of layer
    names to numbers), so :func:`load_lora` can check that the model it loads them into scales
    them the same way. The file holds the adapters only: ``r * (in + out)`` numbers a layer.
    ValueError unless ``path`` ends with ``.safetensors``, or when ``model`` has no LoRA layer.

    >>> import os, tempfile
    >>> from corvid import nn
    >>> model = apply_lora(nn.Sequential(nn.Linear(16, 16)), r=2, alpha=8, target="0")
    >>> path = os.path.join(tempfile.mkdtemp(), "adapters.safetensors")
    >>> save_lora(path, model)
    >>> with cv.safe_open(path) as f:
    ...     sorted(f.keys()), f.metadata()["lora_alpha"]
    (['0.lora_A', '0.lora_B'], '{"0": 8}')
    """
    p = os.fspath(path)
    if not p.lower().endswith(".safetensors"):
        raise ValueError(f"save_lora: writes safetensors files; name it *.safetensors, got {p!r}")
    layers = _lora_layers(model, "save_lora")
    from ..io import save

    save(p, lora_state_dict(model), metadata={
        "format": "corvid.lora", "lora_alpha": json.dumps({name: m.alpha for name, m in layers.items()})})


def load_lora(model: Module, state: Mapping[str, Any] | str | os.PathLike) -> Module:
    """Load adapters into the :class:`LoRALinear` layers of ``model`` (made by :func:`apply_lora`
    with the settings they were trained with); returns ``model``.

    ``state`` is a dict of :func:`lora_state_dict`'s names (values: corvid tensors, numpy arrays
    or torch tensors, cast to the adapters' dtype), or a file (``.safetensors`` or ``.npz``)
    holding one. Hugging Face ``peft`` names are accepted too
    (``base_model.model.<layer>.lora_A.weight``: the same matrices), so an adapter trained with
    ``peft`` on the same architecture loads, given ``apply_lora`` with its ``r``, ``lora_alpha``
    and ``target_modules``. The adapters' parameters keep their identity (an optimizer holding
    them goes on working).

    ValueError, before anything is loaded, when ``model`` has no LoRA layer (the message gives
    the ``apply_lora`` call the adapters fit), when the state has adapters for layers the model
    has none on, or none for one of the model's LoRA layers, or non-adapter entries, when a
    matrix's shape differs (another rank, or another model), and when a file written by
    :func:`save_lora` says a layer was trained with another ``alpha``.

    >>> from corvid import nn
    >>> trained = apply_lora(nn.Sequential(nn.Linear(8, 8)), r=2, target="0")
    >>> _ = cv.nn.init.ones_(trained[0].lora_B)
    >>> fresh = apply_lora(nn.Sequential(nn.Linear(8, 8)), r=2, target="0")
    >>> fresh.load_state_dict(trained.state_dict())    # the same base weights
    IncompatibleKeys(missing_keys=[], unexpected_keys=[])
    >>> fresh = load_lora(fresh, lora_state_dict(trained))
    >>> x = cv.randn(3, 8)
    >>> bool((fresh(x) == trained(x)).all())
    True
    >>> rank4 = apply_lora(nn.Sequential(nn.Linear(8, 8)), r=4, target="0")
    >>> load_lora(rank4, lora_state_dict(trained))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    ValueError: load_lora: the adapters do not fit Sequential: 0.lora_A has shape (2, 8) in the adapters, (4, 8) in...
    """
    source, alphas = "the adapters", {}
    if isinstance(state, (str, os.PathLike)):
        state, alphas, source = _read_adapters(os.fspath(state))
    if not isinstance(state, Mapping):
        raise TypeError(f"load_lora: expected a dict of adapters or a file name, got {type(state).__name__}")
    adapters: dict[str, Any] = {}
    for key, value in state.items():
        name = _adapter_name(key)
        if name in adapters:
            raise ValueError(f"load_lora: {source} hold {name!r} twice (as {key!r} too)")
        adapters[name] = value
    layers = {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}
    if not layers:
        raise ValueError(f"load_lora: {type(model).__name__} has no LoRA layers; call {_apply_hint(adapters, alphas)} "
                         "first, with the settings the adapters were trained with")
    own = {}
    for name, m in layers.items():
        own[join_name(name, "lora_A")] = m.lora_A
        own[join_name(name, "lora_B")] = m.lora_B
    problems = []
    other = [k for k in adapters if not k.endswith((".lora_A", ".lora_B")) and k not in ("lora_A", "lora_B")]
    if other:
        problems.append(f"entries that are not LoRA adapters: {', '.join(other)}")
    unexpected = [k for k in adapters if k not in own and k not in other]
    if unexpected:
        problems.append(f"adapters for layers without LoRA in the model: {', '.join(unexpected)}")
    missing = [k for k in own if k not in adapters]
    if missing:
        problems.append(f"no adapters for the model's {', '.join(missing)}")
    values, reshaped = {}, False
    for key, t in own.items():
        if key not in adapters:
            continue
        v = _as_tensor(adapters[key], t.device)
        if v.shape != t.shape:
            problems.append(f"{key} has shape {v.shape} in the adapters, {t.shape} in the model")
            reshaped = True
        values[key] = v
    for name, alpha in alphas.items():
        if name in layers and alpha != layers[name].alpha:
            problems.append(f"{name} was trained with alpha={_num(alpha)}, the model's layer has "
                            f"alpha={_num(layers[name].alpha)}")
    if problems:
        r = _rank(adapters)
        hint = f" (the adapters have rank {r}: apply_lora(model, r={r}, ...))" \
            if reshaped and r is not None and all(m.r != r for m in layers.values()) else ""
        raise ValueError(f"load_lora: {source} do not fit {type(model).__name__}: " + "; ".join(problems) + hint)
    with no_grad():
        for key, v in values.items():
            t = own[key]
            t.assign(v.astype(t.dtype))
            if not tracing():
                t.realize()
    return model


# --- helpers ----------------------------------------------------------------------------------------------


def _check_settings(where: str, r: Any, alpha: Any, dropout: Any) -> None:
    if isinstance(r, bool) or not isinstance(r, int) or r <= 0:
        raise ValueError(f"{where}: the rank r must be a positive int, got {r!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"{where}: alpha must be a positive number, got {alpha!r}")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"{where}: dropout must be in [0, 1), got {dropout!r}")


def _adapter_dtype(where: str, dtype: Any) -> Any:
    dt = to_dtype(dtype)
    if not dt.is_float:
        raise TypeError(f"{where}: adapters need a floating-point dtype, got {dt.name}")
    return dt


def _target_names(target: Any) -> list[str]:
    if isinstance(target, str):
        return [target]
    try:
        names = list(target)
    except TypeError:
        names = None
    if names is None or not names or not all(isinstance(t, str) and t for t in names):
        raise TypeError("apply_lora: target must be a layer name, a non-empty sequence of names or a function "
                        f"(name, module) -> bool, got {target!r}")
    return names


def _linear_names(linears: list[tuple[str, Module]]) -> str:
    names = sorted({name for name, _ in linears})
    if not names:
        return "it has no Linear layers"
    shown = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
    return f"its Linear layers: {shown}"


def _no_match(model: Module, t: str, hits: list[tuple[str, Module]], linears: list[tuple[str, Module]]) -> str:
    where = f"apply_lora: no layer of {type(model).__name__}"
    if any(isinstance(m, LoRALinear) for _, m in hits):
        return (f"apply_lora: {', '.join(n for n, m in hits if isinstance(m, LoRALinear))} already has LoRA "
                "adapters (merge_lora folds them in)")
    if hits:
        name, m = hits[0]
        return f"{where} named {t!r} is a Linear: {name} is a {type(m).__name__}; {_linear_names(linears)}"
    return f"{where} is named {t!r} (or ends with {'.' + t!r}); {_linear_names(linears)}"


def _lora_layers(model: Module, where: str) -> dict[str, LoRALinear]:
    layers = {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}
    if not layers:
        raise ValueError(f"{where}: {type(model).__name__} has no LoRA layers (apply_lora adds them)")
    return layers


def _adapter_name(key: str) -> str:
    """A state key under :func:`lora_state_dict`'s name: peft's ``base_model.model.`` prefix and
    the ``.weight`` of its ``lora_A``/``lora_B`` modules dropped."""
    name = key.removeprefix(_PEFT_PREFIX)
    for part in (".lora_A.weight", ".lora_B.weight"):
        if name.endswith(part):
            name = name[:-len(".weight")]
    return name


def _read_adapters(path: str) -> tuple[dict[str, Any], dict[str, float], str]:
    from ..io import load, safe_open

    state = load(path)
    alphas: dict[str, float] = {}
    if path.lower().endswith(".safetensors"):
        with safe_open(path) as f:
            meta = f.metadata() or {}
        if "lora_alpha" in meta:
            try:
                alphas = dict(json.loads(meta["lora_alpha"]))
            except (ValueError, TypeError) as e:
                raise ValueError(f"load_lora: {path} has malformed lora_alpha metadata: {e}") from None
    return state, alphas, path


def _rank(adapters: Mapping[str, Any]) -> int | None:
    for key, v in adapters.items():
        shape = getattr(v, "shape", None)
        if key.endswith("lora_A") and shape is not None and len(shape) == 2:
            return int(shape[0])
    return None


def _num(x: Any) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


def _apply_hint(adapters: Mapping[str, Any], alphas: Mapping[str, float]) -> str:
    """The ``apply_lora`` call that makes the LoRA layers ``adapters`` fit, as far as they say."""
    layers = sorted({k.rsplit(".", 1)[0] for k in adapters if k.endswith((".lora_A", ".lora_B"))})
    targets = sorted({name.rsplit(".", 1)[-1] for name in layers})
    args = ["model"]
    r = _rank(adapters)
    if r is not None:
        args.append(f"r={r}")
    if len(set(alphas.values())) == 1:
        args.append(f"alpha={_num(next(iter(alphas.values())))}")
    if targets:
        args.append(f"target={tuple(targets)!r}")
    return f"apply_lora({', '.join(args)})"

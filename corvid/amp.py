"""Mixed precision: products in bfloat16 or float16, the rest in float32, with float32 weights.

``cv.autocast`` works as PyTorch's ``torch.autocast``: inside it, matrix products and
convolutions (``@``, ``matmul``, ``linear``, ``conv*``, attention's products) cast their float32
and float64 operands to the autocast dtype (bfloat16 unless told) and give results of that
dtype; softmax, log-softmax, logsumexp, the norms and the losses cast bfloat16 and float16
inputs to float32 and compute and return float32. Everything else follows the usual promotion.
The parameters stay float32 (the master weights): the casts are ops of the graph, so gradients
flow back through them to float32 gradients, and the optimizers' state stays float32 too.

>>> import corvid as cv
>>> w = cv.ones(3, 2)
>>> with cv.autocast(cv.bfloat16):
...     y = cv.ones(4, 3) @ w
...     p = y.softmax(-1)
>>> y.dtype, p.dtype, w.dtype
(corvid.bfloat16, corvid.float32, corvid.float32)

float16 has a narrow exponent: small gradients underflow to 0. :class:`GradScaler` multiplies
the loss by a large scale before ``backward`` and divides the gradients by it before the step,
skipping steps whose gradients overflowed and lowering the scale then, as PyTorch's
``torch.amp.GradScaler``. bfloat16 has float32's exponent and needs no scaler.

The autocast state is per thread (a context variable), read when an op builds its graph; a
``cv.jit`` function is traced again when it is called under a different autocast dtype.
"""

from __future__ import annotations

import contextvars
import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

from . import dtype as dt

_AUTOCAST: contextvars.ContextVar[dt.DType | None] = contextvars.ContextVar("corvid_autocast", default=None)
_LOW = (dt.bfloat16, dt.float16)  # what autocast computes products in
_WIDE = (dt.float32, dt.float64)  # what it narrows


def autocast_dtype() -> dt.DType | None:
    """The dtype that products are computed in here (inside an enabled :class:`autocast`), or None.

    >>> cv.amp.autocast_dtype() is None
    True
    >>> with cv.autocast(dtype=cv.float16):
    ...     cv.amp.autocast_dtype()
    corvid.float16
    """
    return _AUTOCAST.get()


class autocast:
    """Mixed precision in a ``with`` block or on a function (see the module docstring).

    ``autocast(dtype=cv.bfloat16, enabled=True)``; PyTorch's spelling
    ``autocast("cuda", dtype=...)`` is accepted too (the device type is ignored: the dtype
    policy is the same on every device). ``enabled=False`` turns an enclosing one off.
    TypeError for a dtype other than bfloat16 or float16.

    >>> w = cv.ones(3, 2)  # float32 weights
    >>> with cv.autocast(cv.bfloat16):
    ...     y = cv.ones(4, 3) @ w
    ...     with cv.autocast(enabled=False):
    ...         z = cv.ones(4, 3) @ w
    >>> y.dtype, z.dtype
    (corvid.bfloat16, corvid.float32)
    >>> @cv.autocast(dtype=cv.float16)
    ... def forward(x):
    ...     return x @ w
    >>> forward(cv.ones(4, 3)).dtype
    corvid.float16
    """

    def __init__(self, device_type: Any = None, dtype: Any = None, enabled: bool = True, cache_enabled: Any = None):
        if dtype is None and device_type is not None and not isinstance(device_type, str):
            device_type, dtype = None, device_type  # autocast(cv.bfloat16)
        if device_type is not None and not isinstance(device_type, str):
            raise TypeError(f"autocast: device_type must be a string such as 'cuda' or 'cpu', got {device_type!r}")
        want = dt.bfloat16 if dtype is None else dt.to_dtype(dtype)
        if want not in _LOW:
            raise TypeError(f"autocast computes products in bfloat16 or float16, not {want.name}")
        self.dtype, self.enabled = want, bool(enabled)
        self._tokens: list[contextvars.Token] = []

    def __enter__(self) -> autocast:
        self._tokens.append(_AUTOCAST.set(self.dtype if self.enabled else None))
        return self

    def __exit__(self, *exc: Any) -> None:
        _AUTOCAST.reset(self._tokens.pop())

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with autocast(dtype=self.dtype, enabled=self.enabled):
                return fn(*args, **kwargs)

        return wrapper

    def __repr__(self) -> str:
        return f"autocast(dtype={self.dtype}, enabled={self.enabled})"


def narrow(*tensors: Any) -> tuple[Any, ...]:
    """The tensors as a product under autocast reads them: float32/float64 ones cast to the
    autocast dtype (others, and everything outside autocast, unchanged)."""
    low = _AUTOCAST.get()
    if low is None:
        return tensors
    return tuple(t.astype(low) if getattr(t, "dtype", None) in _WIDE else t for t in tensors)


def widen(*tensors: Any) -> tuple[Any, ...]:
    """The tensors as a float32 op under autocast reads them: bfloat16/float16 ones cast to float32."""
    if _AUTOCAST.get() is None:
        return tensors
    return tuple(t.astype(dt.float32) if getattr(t, "dtype", None) in _LOW else t for t in tensors)


def float32_op(fn: Callable) -> Callable:
    """Decorate an op that autocast runs in float32: its bfloat16/float16 tensor arguments
    (positional and keyword) are cast to float32 first, inside autocast only."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _AUTOCAST.get() is not None:
            args = widen(*args)
            kwargs = dict(zip(kwargs, widen(*kwargs.values())))
        return fn(*args, **kwargs)

    return wrapper


# --- loss scaling ----------------------------------------------------------------------------------


def _check_scaling(what: str, init_scale: float, growth_factor: float, backoff_factor: float,
                   growth_interval: int) -> None:
    """ValueError naming ``what`` for a non-positive scale or factors on the wrong side of 1."""
    if not (init_scale > 0 and math.isfinite(init_scale)):
        raise ValueError(f"{what}: init_scale must be positive and finite, got {init_scale}")
    if not growth_factor > 1.0:
        raise ValueError(f"{what}: growth_factor must be > 1, got {growth_factor}")
    if not 0.0 < backoff_factor < 1.0:
        raise ValueError(f"{what}: backoff_factor must be in (0, 1), got {backoff_factor}")
    if int(growth_interval) < 1:
        raise ValueError(f"{what}: growth_interval must be >= 1, got {growth_interval}")


class GradScaler:
    """Dynamic loss scaling for float16 training, as ``torch.amp.GradScaler``::

        scaler = cv.amp.GradScaler()
        for x, y in loader:
            opt.zero_grad()
            with cv.autocast(dtype=cv.float16):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)      # unscales the gradients; skips the step if any is inf or nan
            scaler.update()       # lowers the scale after a skipped step, raises it after
                                  # growth_interval good ones

    ``enabled=False`` makes every method a pass-through (one code path for both precisions).
    ValueError for a non-positive scale or factors on the wrong side of 1.

    One good step and one that overflows:

    >>> w = cv.Tensor([1.0], requires_grad=True)
    >>> opt = cv.optim.SGD([w], lr=0.1)
    >>> scaler = cv.amp.GradScaler(init_scale=1024.0)
    >>> scaler.scale((w * w).sum()).backward()
    >>> w.grad  # 2 * w, scaled
    Tensor([2048.])
    >>> scaler.step(opt); scaler.update()
    >>> round(w.item(), 4), scaler.get_scale()
    (0.8, 1024.0)
    >>> opt.zero_grad()
    >>> scaler.scale((w * cv.inf).sum()).backward()
    >>> scaler.step(opt) is None  # skipped: w is unchanged
    True
    >>> scaler.update()
    >>> round(w.item(), 4), scaler.get_scale()
    (0.8, 512.0)
    """

    def __init__(self, device: Any = None, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        _check_scaling("GradScaler", init_scale, growth_factor, backoff_factor, growth_interval)
        self._scale, self._growth_tracker = float(init_scale), 0
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval, self._enabled = int(growth_interval), bool(enabled)
        self._unscaled: dict[int, bool] = {}  # id(optimizer) -> whether its grads held an inf or nan

    def is_enabled(self) -> bool:
        """Whether the scaler scales (False when built with ``enabled=False``)."""
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def scale(self, outputs: Any) -> Any:
        """``outputs`` (a tensor, or a list/tuple of them) multiplied by the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        return outputs * self._scale

    def _grads(self, optimizer: Any) -> Iterator[Any]:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    yield p

    def unscale_(self, optimizer: Any) -> None:
        """Divide ``optimizer``'s gradients by the scale, in place (before clipping them, say).
        RuntimeError if called twice for one optimizer before :meth:`update`."""
        if not self._enabled:
            return
        if id(optimizer) in self._unscaled:
            raise RuntimeError("unscale_() was already called on this optimizer since the last update()")
        inv = 1.0 / self._scale
        bad = None
        for p in self._grads(optimizer):
            g = p.grad * inv
            flag = (~g.isfinite()).any() if g.dtype.is_float or g.dtype.is_complex else None
            bad = flag if bad is None or flag is None else (bad | flag)
            p.grad = g
        self._unscaled[id(optimizer)] = bool(bad.item()) if bad is not None else False

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """Unscale ``optimizer``'s gradients (unless :meth:`unscale_` did) and take its step,
        unless a gradient is inf or nan: then the step is skipped (returns None)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        if self._unscaled[id(optimizer)]:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale: float | None = None) -> None:
        """Adjust the scale after the steps of an iteration: times ``backoff_factor`` if any
        optimizer's gradients overflowed, times ``growth_factor`` after ``growth_interval``
        iterations in a row without; or set it to ``new_scale``."""
        if not self._enabled:
            return
        if new_scale is not None:
            if not (float(new_scale) > 0 and math.isfinite(float(new_scale))):
                raise ValueError(f"GradScaler.update: new_scale must be positive and finite, got {new_scale}")
            self._scale = float(new_scale)
        elif any(self._unscaled.values()):
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        elif self._unscaled:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                self._scale *= self._growth_factor
                self._growth_tracker = 0
        self._unscaled.clear()

    def state_dict(self) -> dict[str, Any]:
        """The scale and the growth state (empty when disabled), for a checkpoint."""
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned. ValueError for a dict without a scale."""
        if not self._enabled:
            return
        if "scale" not in state:
            raise ValueError(f"GradScaler.load_state_dict: no 'scale' in {sorted(state)}")
        self._scale = float(state["scale"])
        self._growth_factor = float(state.get("growth_factor", self._growth_factor))
        self._backoff_factor = float(state.get("backoff_factor", self._backoff_factor))
        self._growth_interval = int(state.get("growth_interval", self._growth_interval))
        self._growth_tracker = int(state.get("_growth_tracker", 0))


class DynamicLossScale:
    """Loss scaling for float16 in a functional (jitted) step, with no host synchronization: the
    state is a pytree of two 0-d tensors, the overflow check a 0-d bool tensor, and a skipped step
    keeps the old parameters and optimizer state by a select, not a Python branch, so a
    ``cv.jit`` step is traced once::

        ls = cv.amp.DynamicLossScale()
        scale_state = ls.init()

        @cv.jit
        def step(params, opt_state, scale_state, x, y):
            def loss_fn(p):
                with cv.autocast(dtype=cv.float16):
                    return ls.scale(loss(p, x, y), scale_state)
            grads = cv.grad(loss_fn)(params)
            grads, finite = ls.unscale(grads, scale_state)
            new_params, new_state = tx.update(grads, opt_state, params)
            params, opt_state = ls.select(finite, (new_params, new_state), (params, opt_state))
            return params, opt_state, ls.update(scale_state, finite)

    The scale halves after a step whose gradients hold an inf or nan and doubles after
    ``growth_interval`` good steps in a row, as :class:`GradScaler`'s does.

    >>> ls = cv.amp.DynamicLossScale(init_scale=8.0, growth_interval=2)
    >>> state = ls.init()
    >>> grads, finite = ls.unscale({"w": cv.asarray([16.0, cv.inf])}, state)
    >>> finite.item(), ls.select(finite, cv.asarray(1.0), cv.asarray(2.0)).item()  # keep the old value
    (False, 2.0)
    >>> state = ls.update(state, finite)
    >>> state["scale"].item()
    4.0
    >>> for _ in range(2):  # two good steps in a row
    ...     state = ls.update(state, cv.asarray(True))
    >>> state["scale"].item()
    8.0
    """

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000):
        _check_scaling("DynamicLossScale", init_scale, growth_factor, backoff_factor, growth_interval)
        self.init_scale, self.growth_factor, self.backoff_factor = float(init_scale), float(growth_factor), float(backoff_factor)
        self.growth_interval = int(growth_interval)

    def init(self, device: str | None = None) -> dict[str, Any]:
        """``{"scale": float32 0-d, "good_steps": int32 0-d}`` on ``device`` (default: the default device)."""
        from .tensor import Tensor

        return {"scale": Tensor(self.init_scale, dtype=dt.float32, device=device),
                "good_steps": Tensor(0, dtype=dt.int32, device=device)}

    @staticmethod
    def scale(loss: Any, state: dict[str, Any]) -> Any:
        """``loss`` times the scale."""
        return loss * state["scale"].astype(loss.dtype)

    @staticmethod
    def unscale(grads: Any, state: dict[str, Any]) -> tuple[Any, Any]:
        """(``grads`` divided by the scale, a 0-d bool tensor: whether every gradient is finite)."""
        from .tree import tree_leaves, tree_map

        inv = 1.0 / state["scale"]
        out = tree_map(lambda g: g * inv.astype(g.dtype), grads)
        finite = None
        for g in tree_leaves(out):
            ok = g.isfinite().all()
            finite = ok if finite is None else finite & ok
        from .tensor import Tensor

        return out, (Tensor(True, device=state["scale"].device) if finite is None else finite)

    @staticmethod
    def select(finite: Any, new: Any, old: Any) -> Any:
        """``new`` where ``finite``, else ``old`` (pytrees of one structure): a skipped step."""
        from .ops.elementwise import where
        from .tree import tree_map

        return tree_map(lambda a, b: where(finite, a, b), new, old)

    def update(self, state: dict[str, Any], finite: Any) -> dict[str, Any]:
        """The scale state after a step whose gradients were ``finite`` (or not)."""
        from .ops.elementwise import where

        good = where(finite, state["good_steps"] + 1, 0).astype(dt.int32)
        grow = good >= self.growth_interval
        scale = where(finite, where(grow, state["scale"] * self.growth_factor, state["scale"]),
                      state["scale"] * self.backoff_factor).astype(dt.float32)
        return {"scale": scale, "good_steps": where(grow, 0, good).astype(dt.int32)}


# --- float32 matrix products: exact, or on lower-precision tensor cores ------------------------------

PRECISIONS = ("highest", "high", "medium")
_PRECISION_DEFAULT = ["highest"]  # the process's setting (set_float32_matmul_precision)
_PRECISION: contextvars.ContextVar[str | None] = contextvars.ContextVar("corvid_matmul_precision", default=None)


def _check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"matmul precision must be one of {', '.join(map(repr, PRECISIONS))}, got {precision!r}")
    return precision


def set_float32_matmul_precision(precision: str) -> None:
    """How float32 matrix products may compute, for the whole process (PyTorch's
    ``torch.set_float32_matmul_precision``, JAX's ``jax_default_matmul_precision``):

    * ``"highest"`` (the default): exact float32 products and sums, on every device.
    * ``"high"``: on a CUDA GPU, TF32 tensor cores (operands rounded to 10 mantissa bits, sums in
      float32): several times faster, about 1e-3 relative error.
    * ``"medium"``: on a CUDA GPU, bfloat16 tensor cores (operands rounded to 7 bits); on a CPU
      with bfloat16 dot products (AVX512-BF16), ``x @ w.T`` of 8 or more rows (a Linear layer;
      other products from 2048 rows) as bfloat16 products with float32 sums, where no transform
      differentiates it (:func:`corvid.nn.cpu_matmul.float32_product`).

    Everywhere else products are exact float32 at every setting. float16,
    bfloat16 and float64 products are not affected. The setting is read when a product builds its
    graph; a ``cv.jit`` function is traced again under another setting.

    >>> cv.set_float32_matmul_precision("high"); cv.get_float32_matmul_precision()
    'high'
    >>> cv.set_float32_matmul_precision("highest")
    """
    _PRECISION_DEFAULT[0] = _check_precision(precision)


def get_float32_matmul_precision() -> str:
    """The precision float32 products use here: an enclosing :class:`matmul_precision`'s, else the
    process's (:func:`set_float32_matmul_precision`).

    >>> cv.get_float32_matmul_precision()
    'highest'
    """
    return _PRECISION.get() or _PRECISION_DEFAULT[0]


class matmul_precision:
    """:func:`set_float32_matmul_precision` for a ``with`` block only, in this thread (JAX's
    ``jax.default_matmul_precision``).

    >>> with cv.matmul_precision("high"):
    ...     cv.get_float32_matmul_precision()
    'high'
    """

    def __init__(self, precision: str):
        self.precision = _check_precision(precision)
        self._tokens: list[contextvars.Token] = []

    def __enter__(self) -> "matmul_precision":
        self._tokens.append(_PRECISION.set(self.precision))
        return self

    def __exit__(self, *exc: Any) -> None:
        _PRECISION.reset(self._tokens.pop())


def policy() -> tuple[dt.DType | None, str]:
    """What a traced program's products depend on besides its inputs: the autocast dtype and the
    float32 matmul precision (``jit`` keys its traces on it)."""
    return _AUTOCAST.get(), _PRECISION.get() or _PRECISION_DEFAULT[0]


__all__ = ["DynamicLossScale", "GradScaler", "autocast", "autocast_dtype", "get_float32_matmul_precision",
           "matmul_precision", "set_float32_matmul_precision"]

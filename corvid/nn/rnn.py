"""Recurrent layers: :class:`RNN`, :class:`LSTM`, :class:`GRU` and their single-step cells.

PyTorch's equations, gate order, parameter names and shapes, so state dicts are interchangeable:
layer ``k`` holds ``weight_ih_l{k}`` ``(gates*H, in)``, ``weight_hh_l{k}`` ``(gates*H, H)``,
``bias_ih_l{k}`` and ``bias_hh_l{k}`` (suffix ``_reverse`` for the backward direction), every one
initialized uniformly in ``±1/sqrt(hidden_size)``. Gates: LSTM ``(i, f, g, o)``, GRU
``(r, z, n)`` with ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``.

The input projection of a whole sequence is one matmul; the recurrence is a Python loop over
time steps building one lazy graph (wrap a training step in ``cv.jit`` to replay it without
re-tracing).

>>> from corvid import nn
>>> lstm = nn.LSTM(3, 4, num_layers=2, batch_first=True)
>>> out, (h, c) = lstm(cv.randn(2, 5, 3))
>>> out.shape, h.shape, c.shape
((2, 5, 4), (2, 2, 4), (2, 2, 4))
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..errors import ShapeError
from ..creation import empty, zeros
from ..ops.movement import cat, stack
from ..tensor import Tensor
from . import init
from .activation import relu, sigmoid
from .dropout import dropout
from .linear import linear
from .module import Module, check_input, shape_error
from .parameter import Parameter

__all__ = ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNCell"]

State = tuple[Tensor, Tensor | None]  # (h, c); c only for LSTM


# Each step stores its new state, and the gated ones their gate pre-activations (``contiguous``).
# Left to fusion, the scheduler inlines the shared matmul into each gate slice and every earlier
# step into later ones: scheduling a length-L sequence then costs ~5**L (and overflows the
# lowering's recursion in the backward pass).


def _tanh_step(xw: Tensor, state: State, w_hh: Tensor, b_hh: Tensor | None) -> State:
    return (linear(state[0], w_hh, b_hh) + xw).tanh().contiguous(), None


def _relu_step(xw: Tensor, state: State, w_hh: Tensor, b_hh: Tensor | None) -> State:
    return relu(linear(state[0], w_hh, b_hh) + xw).contiguous(), None


def _lstm_step(xw: Tensor, state: State, w_hh: Tensor, b_hh: Tensor | None, w_hr: Tensor | None = None) -> State:
    h, c = state
    i, f, g, o = (xw + linear(h, w_hh, b_hh)).contiguous().split(c.shape[-1], axis=-1)
    c = (sigmoid(f) * c + sigmoid(i) * g.tanh()).contiguous()
    h = sigmoid(o) * c.tanh()
    return (h if w_hr is None else linear(h, w_hr)).contiguous(), c  # with proj_size: h = W_hr (o * tanh(c))


def _gru_step(xw: Tensor, state: State, w_hh: Tensor, b_hh: Tensor | None) -> State:
    h = state[0]
    xr, xz, xn = xw.split(h.shape[-1], axis=-1)
    hr, hz, hn = linear(h, w_hh, b_hh).contiguous().split(h.shape[-1], axis=-1)
    r, z = sigmoid(xr + hr), sigmoid(xz + hz)
    n = (xn + r * hn).tanh()
    return (n + z * (h - n)).contiguous(), None


_MODES: dict[str, tuple[int, Callable[..., State]]] = {
    "RNN_TANH": (1, _tanh_step), "RNN_RELU": (1, _relu_step), "LSTM": (4, _lstm_step), "GRU": (3, _gru_step)}


def _mode(name: str, nonlinearity: str) -> str:
    if name != "RNN":
        return name
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
    return f"RNN_{nonlinearity.upper()}"


class _RNNBase(Module):
    _kind = ""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 nonlinearity: str = "tanh", proj_size: int = 0, device: str | None = None, dtype: Any = None):
        super().__init__()
        name = type(self).__name__
        if proj_size and self._kind != "LSTM":
            raise ValueError(f"{name}: proj_size is only supported by LSTM")
        if not 0 <= proj_size < hidden_size:
            raise ValueError(f"{name}: proj_size must be in [0, hidden_size = {hidden_size}), got {proj_size}")
        if num_layers < 1 or hidden_size < 1:
            raise ValueError(f"{name}: num_layers and hidden_size must be positive, got {num_layers} and {hidden_size}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{name}: dropout must be in [0, 1], got {dropout}")
        self.mode = _mode(self._kind, nonlinearity)
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout, self.bidirectional = bias, batch_first, dropout, bidirectional
        self.nonlinearity, self.proj_size = nonlinearity, proj_size
        gates = _MODES[self.mode][0] * hidden_size
        dirs = 2 if bidirectional else 1
        out = proj_size or hidden_size  # the size of h
        for layer in range(num_layers):
            width = input_size if layer == 0 else out * dirs
            for d in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                setattr(self, "weight_ih" + sfx, Parameter(empty(gates, width, dtype=dtype, device=device)))
                setattr(self, "weight_hh" + sfx, Parameter(empty(gates, out, dtype=dtype, device=device)))
                if bias:
                    setattr(self, "bias_ih" + sfx, Parameter(empty(gates, dtype=dtype, device=device)))
                    setattr(self, "bias_hh" + sfx, Parameter(empty(gates, dtype=dtype, device=device)))
                if proj_size:
                    setattr(self, "weight_hr" + sfx, Parameter(empty(proj_size, hidden_size, dtype=dtype,
                                                                     device=device)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's default: every weight and bias uniform in ``±1/sqrt(hidden_size)``."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _weights(self, layer: int, direction: int) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None,
                                                            Tensor | None]:
        sfx = f"_l{layer}" + ("_reverse" if direction else "")
        d = self.__dict__
        return (d["weight_ih" + sfx], d["weight_hh" + sfx], d.get("bias_ih" + sfx), d.get("bias_hh" + sfx),
                d.get("weight_hr" + sfx))

    def forward(self, input: Tensor, hx: Any = None) -> tuple[Tensor, Any]:
        """``input`` ``(L, N, input_size)`` (``(N, L, input_size)`` with ``batch_first``, or
        unbatched ``(L, input_size)``) and the initial state (zeros if None): ``h_0`` of shape
        ``(num_layers * directions, N, hidden_size)``, for LSTM the pair ``(h_0, c_0)`` (with
        ``proj_size``, ``h`` has ``proj_size`` features and ``c`` ``hidden_size``). Returns
        ``(output, h_n)`` (LSTM: ``(output, (h_n, c_n))``), ``output`` holding the last layer's
        hidden state at every step, directions concatenated on the last axis."""
        seq = "(N, L, {0})" if self.batch_first else "(L, N, {0})"
        x = check_input(self, input, (2, 3), (seq + " or (L, {0})").format(self.input_size))
        if x.shape[-1] != self.input_size or x.shape[0 if x.ndim == 2 or not self.batch_first else 1] == 0:
            raise shape_error(self, (seq + " or (L, {0}) with L > 0").format(self.input_size), x)
        unbatched = x.ndim == 2
        x = x.unsqueeze(1) if unbatched else x.transpose(0, 1) if self.batch_first else x
        dirs = 2 if self.bidirectional else 1
        h0, c0 = self._initial_state(hx, x, dirs, unbatched)
        step = _MODES[self.mode][1]
        finals_h, finals_c = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                w_ih, w_hh, b_ih, b_hh, w_hr = self._weights(layer, d)
                xw = linear(x, w_ih, b_ih)  # every time step's input projection in one matmul
                k = layer * dirs + d
                state: State = (h0[k], None if c0 is None else c0[k])
                ys: list[Tensor] = [x] * x.shape[0]
                extra = () if w_hr is None else (w_hr,)
                for t in (range(x.shape[0]) if d == 0 else reversed(range(x.shape[0]))):
                    state = step(xw[t], state, w_hh, b_hh, *extra)
                    ys[t] = state[0]
                outs.append(stack(ys))
                finals_h.append(state[0])
                finals_c.append(state[1])
            x = outs[0] if dirs == 1 else cat(outs, axis=-1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = dropout(x, self.dropout)
        out = x.squeeze(1) if unbatched else x.transpose(0, 1) if self.batch_first else x
        h_n = stack(finals_h)
        h_n = h_n.squeeze(1) if unbatched else h_n
        if c0 is None:
            return out, h_n
        c_n = stack(finals_c)  # type: ignore[arg-type]
        return out, (h_n, c_n.squeeze(1) if unbatched else c_n)

    def _initial_state(self, hx: Any, x: Tensor, dirs: int, unbatched: bool) -> tuple[Tensor, Tensor | None]:
        shape_c = (self.num_layers * dirs, x.shape[1], self.hidden_size)
        shape_h = shape_c[:2] + (self.proj_size or self.hidden_size,)
        lstm = self.mode == "LSTM"
        if hx is None:
            h = zeros(shape_h, dtype=x.dtype, device=x.device)
            return h, (zeros(shape_c, dtype=x.dtype, device=x.device) if lstm else None)
        if lstm and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise ValueError("LSTM: hx must be a pair (h_0, c_0)")
        states = list(hx) if lstm else [hx]
        for i, s in enumerate(states):
            s = s if isinstance(s, Tensor) else Tensor(s)
            s = s.unsqueeze(1) if unbatched else s
            shape = (shape_h, shape_c)[i]
            if s.shape != shape:
                what = ("h_0", "c_0")[i]
                raise ShapeError(f"{type(self).__name__}: expected {what} of shape {shape if not unbatched else (shape[0], shape[2])}, "
                                 f"got {tuple(states[i].shape)}")
            states[i] = s
        return states[0], (states[1] if lstm else None)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.mode == "RNN_RELU":
            s += ", nonlinearity='relu'"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        return s


class RNN(_RNNBase):
    """Elman RNN: ``h_t = tanh(x_t W_ih.T + b_ih + h_{t-1} W_hh.T + b_hh)`` (``nonlinearity="relu"``
    for ReLU), stacked ``num_layers`` deep, optionally bidirectional, with ``dropout`` between
    layers in training mode. See the module docstring and :meth:`forward` for shapes.

    >>> out, h = RNN(2, 3)(cv.randn(4, 1, 2))
    >>> out.shape, h.shape
    ((4, 1, 3), (1, 1, 3))
    """

    _kind = "RNN"


class LSTM(_RNNBase):
    """Long short-term memory: gates ``i, f, g, o`` from ``x_t W_ih.T + b_ih + h W_hh.T + b_hh``,
    ``c_t = σ(f) c_{t-1} + σ(i) tanh(g)``, ``h_t = σ(o) tanh(c_t)``. State is ``(h, c)``; other
    arguments as :class:`RNN`. ``proj_size > 0`` (below ``hidden_size``) projects the hidden
    state, ``h_t = W_hr (σ(o) tanh(c_t))``, with one more weight per layer and direction,
    ``weight_hr_l{k}`` ``(proj_size, hidden_size)``; ``h`` and the output then have
    ``proj_size`` features and ``weight_hh_l{k}`` is ``(4*hidden_size, proj_size)``, as PyTorch.

    >>> out, (h, c) = LSTM(3, 5, proj_size=2)(cv.randn(4, 1, 3))
    >>> out.shape, h.shape, c.shape
    ((4, 1, 2), (1, 1, 2), (1, 1, 5))
    """

    _kind = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device: str | None = None, dtype: Any = None):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, "tanh",
                         proj_size, device, dtype)


class GRU(_RNNBase):
    """Gated recurrent unit: ``r = σ(W_ir x + b_ir + W_hr h + b_hr)``, ``z`` likewise,
    ``n = tanh(W_in x + b_in + r (W_hn h + b_hn))``, ``h_t = (1 - z) n + z h_{t-1}``. Arguments as
    :class:`RNN`.

    >>> out, h = GRU(2, 3, bidirectional=True)(cv.randn(4, 2))   # unbatched
    >>> out.shape, h.shape
    ((4, 6), (2, 3))
    """

    _kind = "GRU"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device: str | None = None, dtype: Any = None):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, "tanh", 0,
                         device, dtype)


class _CellBase(Module):
    _kind = ""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device: str | None = None, dtype: Any = None):
        super().__init__()
        self.mode = _mode(self._kind, nonlinearity)
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        gates = _MODES[self.mode][0] * hidden_size
        self.weight_ih = Parameter(empty(gates, input_size, dtype=dtype, device=device))
        self.weight_hh = Parameter(empty(gates, hidden_size, dtype=dtype, device=device))
        if bias:
            self.bias_ih = Parameter(empty(gates, dtype=dtype, device=device))
            self.bias_hh = Parameter(empty(gates, dtype=dtype, device=device))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    reset_parameters = _RNNBase.reset_parameters

    def forward(self, input: Tensor, hx: Any = None) -> Any:
        """One step: ``input`` ``(N, input_size)`` or ``(input_size,)`` and the state (zeros if
        None) give the new ``h`` (LSTMCell: ``(h, c)``)."""
        x = check_input(self, input, (1, 2), f"(N, {self.input_size}) or ({self.input_size},)")
        if x.shape[-1] != self.input_size:
            raise shape_error(self, f"(N, {self.input_size}) or ({self.input_size},)", x)
        unbatched = x.ndim == 1
        x = x.unsqueeze(0) if unbatched else x
        lstm = self.mode == "LSTM"
        if hx is None:
            h = zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device)
            state: State = (h, h if lstm else None)
        else:
            parts = [t if isinstance(t, Tensor) else Tensor(t) for t in (hx if lstm else (hx,))]
            parts = [p.unsqueeze(0) if unbatched else p for p in parts]
            state = (parts[0], parts[1] if lstm else None)
        h, c = _MODES[self.mode][1](linear(x, self.weight_ih, self.bias_ih), state, self.weight_hh, self.bias_hh)
        if unbatched:
            h, c = h.squeeze(0), (None if c is None else c.squeeze(0))
        return (h, c) if lstm else h

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class RNNCell(_CellBase):
    """One step of :class:`RNN` (parameters ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``).

    >>> RNNCell(2, 3)(cv.ones(4, 2)).shape
    (4, 3)
    """

    _kind = "RNN"


class LSTMCell(_CellBase):
    """One step of :class:`LSTM`: ``cell(input, (h, c))`` returns the new ``(h, c)`` (zeros when the
    state is omitted). Parameters ``weight_ih`` ``(4 * hidden_size, input_size)``, ``weight_hh``,
    ``bias_ih`` and ``bias_hh``, with the gates in PyTorch's order (input, forget, cell, output).

    >>> cell = cv.nn.LSTMCell(2, 3)
    >>> h, c = cell(cv.ones(4, 2))                  # a batch of 4, zero initial state
    >>> for x in cv.ones(5, 4, 2):                  # then 5 more steps
    ...     h, c = cell(x, (h, c))
    >>> h.shape, c.shape, cell.weight_ih.shape
    ((4, 3), (4, 3), (12, 2))
    >>> for p in cell.parameters():
    ...     _ = cv.nn.init.zeros_(p)                # every gate at sigmoid(0) = 0.5, candidate tanh(0) = 0
    >>> h, c = cell(cv.ones(1, 2), (cv.zeros(1, 3), cv.ones(1, 3)))
    >>> c.tolist(), [round(v, 4) for v in h[0].tolist()]   # c = 0.5 * c, h = 0.5 * tanh(c)
    ([[0.5, 0.5, 0.5]], [0.2311, 0.2311, 0.2311])
    """

    _kind = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: str | None = None,
                 dtype: Any = None):
        super().__init__(input_size, hidden_size, bias, "tanh", device, dtype)


class GRUCell(_CellBase):
    """One step of :class:`GRU`: ``cell(input, h)`` returns the new ``h`` (the state starts at zeros when
    ``h`` is omitted or None). Parameters ``weight_ih`` ``(3 * hidden_size, input_size)``,
    ``weight_hh``, ``bias_ih`` and ``bias_hh``, with the gates in PyTorch's order (reset, update, new).

    >>> cell = cv.nn.GRUCell(2, 3)
    >>> h = None
    >>> for x in cv.ones(5, 4, 2):                  # 5 steps of a batch of 4
    ...     h = cell(x, h)
    >>> h.shape, cell.weight_hh.shape
    ((4, 3), (9, 3))
    >>> for p in cell.parameters():
    ...     _ = cv.nn.init.zeros_(p)                # update gate 0.5, candidate tanh(0) = 0
    >>> [round(v, 4) for v in cell(cv.ones(1, 2), cv.full((1, 3), 0.8))[0].tolist()]
    [0.4, 0.4, 0.4]
    """

    _kind = "GRU"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: str | None = None,
                 dtype: Any = None):
        super().__init__(input_size, hidden_size, bias, "tanh", device, dtype)

"""Model workloads: whole networks, timed per call like the overhead workloads of
:mod:`benchmarks.transforms`, against an absolute target.

* ``gpt_forward``: the forward pass of the GPT-like model of the performance guide (4 layers,
  d=256, 4 heads, sequence 128, batch 8, vocabulary 4096; ms per call), target PyTorch eager's
  66.3 ms on the reference machine. corvid runs the model of ``examples/gpt.py`` through
  ``cv.jit`` (traced once, kernels replayed), torch runs the same architecture eagerly under
  ``torch.inference_mode``, numpy a float32 forward. All get the same weights; corvid's and
  torch's logits are checked against a float64 numpy forward.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from .transforms import Overhead, Prepared


@dataclass(frozen=True)
class _Sizes:
    vocab: int
    ctx: int
    d: int
    heads: int
    layers: int
    batch: int


def _sizes(quick: bool) -> _Sizes:
    return _Sizes(64, 16, 32, 2, 2, 2) if quick else _Sizes(4096, 128, 256, 4, 4, 8)


def _weights(s: _Sizes) -> dict[str, np.ndarray]:
    """Seeded float32 weights under GPT-2's names, projections in ``nn.Linear`` layout ``(out, in)``.
    Not GPT-2's initialization: larger values, so every term of the forward shows in the check."""
    rng = np.random.default_rng(0)
    w: dict[str, np.ndarray] = {"wte.weight": rng.normal(0, 0.1, (s.vocab, s.d)),
                                "wpe.weight": rng.normal(0, 0.1, (s.ctx, s.d))}
    shapes = {"attn.c_attn": (3 * s.d, s.d), "attn.c_proj": (s.d, s.d), "mlp.c_fc": (4 * s.d, s.d),
              "mlp.c_proj": (s.d, 4 * s.d)}
    for i in range(s.layers):
        for norm in ("ln_1", "ln_2"):
            w[f"h.{i}.{norm}.weight"] = 1 + rng.normal(0, 0.1, s.d)
            w[f"h.{i}.{norm}.bias"] = rng.normal(0, 0.1, s.d)
        for name, shape in shapes.items():
            w[f"h.{i}.{name}.weight"] = rng.normal(0, 1 / math.sqrt(shape[1]), shape)
            w[f"h.{i}.{name}.bias"] = rng.normal(0, 0.1, shape[0])
    w["ln_f.weight"], w["ln_f.bias"] = 1 + rng.normal(0, 0.1, s.d), rng.normal(0, 0.1, s.d)
    return {k: v.astype(np.float32) for k, v in w.items()}


def _tokens(s: _Sizes) -> np.ndarray:
    return np.random.default_rng(1).integers(0, s.vocab, (s.batch, s.ctx))


def numpy_block(w: dict[str, np.ndarray], prefix: str, heads: int, x: np.ndarray,
                dtype: Any = np.float64) -> np.ndarray:
    """One pre-norm GPT-2 block in numpy, computed in ``dtype`` (``w`` already in it): ``x + attn(ln_1(x))``,
    then ``+ mlp(ln_2(...))``, with the block's weights under ``prefix`` (``"h.0."``, or ``""``).
    Projections are 2-d products (BLAS), attention goes through ``einsum`` (numpy's batched ``@``
    calls BLAS once per head and batch row, which cost up to 0.5 s a layer on a busy machine)."""
    b, t, d = x.shape
    hd = d // heads

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + dtype(1e-5)) * w[prefix + name + ".weight"] + w[prefix + name + ".bias"]

    def dense(x: np.ndarray, name: str) -> np.ndarray:  # as 2-d products: numpy sends those to BLAS
        return ((x.reshape(-1, x.shape[-1]) @ w[prefix + name + ".weight"].T).reshape(x.shape[:-1] + (-1,))
                + w[prefix + name + ".bias"])

    future = ~np.tril(np.ones((t, t), bool))
    q, k, v = np.split(dense(norm(x, "ln_1"), "attn.c_attn"), 3, axis=-1)
    q, k, v = (a.reshape(b, t, heads, hd) for a in (q, k, v))
    scores = np.where(future, -np.inf, np.einsum("bqhd,bkhd->bhqk", q, k) / dtype(math.sqrt(hd)))
    p = np.exp(scores - scores.max(-1, keepdims=True))
    y = np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), v)
    x = x + dense(y.reshape(b, t, d), "attn.c_proj")
    h = dense(norm(x, "ln_2"), "mlp.c_fc")
    h = dtype(0.5) * h * (1 + np.tanh(dtype(math.sqrt(2 / math.pi)) * (h + dtype(0.044715) * h ** 3)))
    return x + dense(h, "mlp.c_proj")


def numpy_forward(w: dict[str, np.ndarray], heads: int, idx: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
    """The GPT-2 forward in numpy, computed in ``dtype``: token ids ``(B, T)`` and weights as
    :func:`_weights` names them -> logits ``(B, T, vocab)``; each layer is :func:`numpy_block`."""
    w = {k: v.astype(dtype) for k, v in w.items()}
    b, t = idx.shape
    d = w["wte.weight"].shape[1]
    x = w["wte.weight"][idx] + w["wpe.weight"][:t]
    layers = 1 + max(int(k.split(".")[1]) for k in w if k.startswith("h."))
    for i in range(layers):
        x = numpy_block(w, f"h.{i}.", heads, x, dtype)
    mu = x.mean(-1, keepdims=True)
    x = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + dtype(1e-5)) * w["ln_f.weight"] + w["ln_f.bias"]
    return (x.reshape(b * t, d) @ w["wte.weight"].T).reshape(b, t, -1)


def _check_logits(got: np.ndarray, w: dict[str, np.ndarray], s: _Sizes, idx: np.ndarray) -> str | None:
    want = numpy_forward(w, s.heads, idx)
    err = float(np.abs(got.astype(np.float64) - want).max())
    scale = float(np.abs(want).max())
    if err <= 1e-3 * max(scale, 1.0):
        return None
    return f"logits differ from numpy float64 by {err:.3g} (max |logit| {scale:.3g})"


def _example() -> Any:
    """``examples/gpt.py`` as a module (the examples folder is not a package)."""
    name = "corvid_examples_gpt"
    if name not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "gpt.py")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _gpt_corvid(quick: bool) -> Prepared:
    import corvid as cv

    gpt = _example()
    s = _sizes(quick)
    w = _weights(s)
    model = gpt.GPT(gpt.GPTConfig(vocab_size=s.vocab, block_size=s.ctx, n_embd=s.d, n_head=s.heads, n_layer=s.layers))
    model.load_state_dict({k: cv.Tensor(v) for k, v in w.items()})
    model.eval()
    idx_np = _tokens(s)
    idx = cv.Tensor(idx_np).realize()
    forward = cv.jit(lambda m, i: m(i))
    last: list[Any] = [forward(model, idx).realize()]  # trace and compile outside the timed region

    def call() -> None:
        last[0] = forward(model, idx).realize()

    return Prepared(call, 1, lambda: _check_logits(last[0].numpy(), w, s, idx_np))


def _gpt_torch(quick: bool) -> Prepared:
    import torch

    s = _sizes(quick)
    w = _weights(s)
    model = _torch_gpt(s)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in w.items()})
    model.eval()
    idx_np = _tokens(s)
    idx = torch.from_numpy(idx_np)
    last: list[Any] = [None]

    def call() -> None:
        with torch.inference_mode():
            last[0] = model(idx)

    return Prepared(call, 1, lambda: _check_logits(last[0].numpy(), w, s, idx_np))


def _gpt_numpy(quick: bool) -> Prepared:
    s = _sizes(quick)
    w = _weights(s)
    idx = _tokens(s)
    return Prepared(lambda: numpy_forward(w, s.heads, idx, np.float32), 1)


def _torch_gpt(s: _Sizes) -> Any:
    """The same architecture in torch (GPT-2 names, ``nn.Linear`` layout, tied LM head)."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(s.d, 3 * s.d), nn.Linear(s.d, s.d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.c_attn(x).view(b, t, 3, s.heads, d // s.heads).permute(2, 0, 3, 1, 4)
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(b, t, d))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_fc, self.c_proj = nn.Linear(s.d, 4 * s.d), nn.Linear(4 * s.d, s.d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c_proj(nn.functional.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.attn, self.ln_2, self.mlp = nn.LayerNorm(s.d), Attention(), nn.LayerNorm(s.d), MLP()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(s.vocab, s.d), nn.Embedding(s.ctx, s.d)
            self.h = nn.ModuleList([Block() for _ in range(s.layers)])
            self.ln_f = nn.LayerNorm(s.d)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.h:
                x = block(x)
            return self.ln_f(x) @ self.wte.weight.T

    return GPT()


GPT_FORWARD = Overhead(
    "gpt_forward", "GPT forward: 4 layers, d=256, 4 heads, seq 128, batch 8, vocab 4096 (examples/gpt.py; corvid "
    "jitted, torch eager)", "ms/call", 1e3, 66.3, "PyTorch eager: 66.3 ms",
    {"corvid": _gpt_corvid, "numpy": _gpt_numpy, "torch": _gpt_torch})

MODELS: list[Overhead] = [GPT_FORWARD]

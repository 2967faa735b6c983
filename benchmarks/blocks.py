"""Layer-sized workloads: one transformer block, timed per call like the model workloads of
:mod:`benchmarks.models`, and judged against PyTorch measured in the same run.

* ``transformer_block``: the forward of one GPT-2-style pre-norm block (issue 24: batch 8,
  sequence 256, width 768, 12 heads, causal; target >= 1.0x PyTorch eager): ``x + attn(ln_1(x))``
  with a qkv ``Linear(768, 2304)``, causal scaled-dot-product attention and a ``Linear(768, 768)``
  projection, then ``+ mlp(ln_2(...))`` with ``Linear(768, 3072)``, GELU's tanh approximation and
  ``Linear(3072, 768)``. corvid's block is written as a user would write it (``nn.Linear``,
  ``nn.LayerNorm``, ``F.scaled_dot_product_attention(..., is_causal=True)``, ``F.gelu``; no
  ``.contiguous()`` hints, no custom layers) and runs through ``cv.jit`` in eval mode (traced
  once, outside the timed region, then replayed); torch runs the same block eagerly under
  ``torch.inference_mode()``; numpy a float32 forward (:func:`benchmarks.models.numpy_block`).
  All get the same seeded weights; corvid's and torch's outputs are checked against a float64
  numpy forward, relative to the size of what the block adds to its input (so an error in either
  branch shows, not only next to the residual).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .models import numpy_block
from .transforms import Overhead, Prepared


@dataclass(frozen=True)
class BlockSizes:
    batch: int
    seq: int
    d: int
    heads: int


def block_sizes(quick: bool) -> BlockSizes:
    return BlockSizes(2, 16, 32, 2) if quick else BlockSizes(8, 256, 768, 12)


# parameter names (GPT-2's, ``nn.Linear`` layout ``(out, in)``) -> shape, for a width ``d``
def _shapes(d: int) -> dict[str, tuple[int, ...]]:
    return {"ln_1.weight": (d,), "ln_1.bias": (d,),
            "attn.c_attn.weight": (3 * d, d), "attn.c_attn.bias": (3 * d,),
            "attn.c_proj.weight": (d, d), "attn.c_proj.bias": (d,),
            "ln_2.weight": (d,), "ln_2.bias": (d,),
            "mlp.c_fc.weight": (4 * d, d), "mlp.c_fc.bias": (4 * d,),
            "mlp.c_proj.weight": (d, 4 * d), "mlp.c_proj.bias": (d,)}


@functools.lru_cache(maxsize=2)
def block_weights(quick: bool) -> dict[str, np.ndarray]:
    """Seeded float32 weights of one block. Not GPT-2's initialization: unit-scale projections
    (``N(0, 1/in)``), LayerNorm scales around 1 and biases around 0, so that both branches add
    values of the input's size and every term shows in the check."""
    s = block_sizes(quick)
    rng = np.random.default_rng(2)
    w = {}
    for name, shape in _shapes(s.d).items():
        if name.startswith("ln_"):
            w[name] = (1.0 if name.endswith("weight") else 0.0) + rng.normal(0, 0.1, shape)
        elif name.endswith("bias"):
            w[name] = rng.normal(0, 0.1, shape)
        else:
            w[name] = rng.normal(0, 1 / math.sqrt(shape[1]), shape)
    return {k: v.astype(np.float32) for k, v in w.items()}


@functools.lru_cache(maxsize=2)
def block_input(quick: bool) -> np.ndarray:
    s = block_sizes(quick)
    return np.random.default_rng(3).standard_normal((s.batch, s.seq, s.d), dtype=np.float32)


@functools.lru_cache(maxsize=2)
def _reference(quick: bool) -> np.ndarray:
    """The float64 numpy forward (computed once per process: both checks read it)."""
    w = {k: v.astype(np.float64) for k, v in block_weights(quick).items()}
    return numpy_block(w, "", block_sizes(quick).heads, block_input(quick).astype(np.float64), np.float64)


def check_block(got: np.ndarray, quick: bool) -> str | None:
    """None when ``got`` matches the float64 forward to 1e-3 of the largest change the block
    makes to its input, else what differs."""
    want = _reference(quick)
    if got.shape != want.shape:
        return f"output shape {got.shape}, expected {want.shape}"
    err = float(np.abs(got.astype(np.float64) - want).max())  # (nan: fails below)
    scale = float(np.abs(want - block_input(quick)).max())
    if err <= 1e-3 * max(scale, 1.0):
        return None
    return f"output differs from numpy float64 by {err:.3g} (the block changes its input by up to {scale:.3g})"


def corvid_block(d: int, heads: int) -> Any:
    """The block in ``corvid.nn``, as a user would write it."""
    from corvid import nn
    from corvid.nn import functional as F

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            q, k, v = self.c_attn(x).reshape(b, t, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_fc, self.c_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.attn, self.ln_2, self.mlp = nn.LayerNorm(d), Attention(), nn.LayerNorm(d), MLP()

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    return Block()


def torch_block(d: int, heads: int) -> Any:
    """The same block in ``torch.nn`` (same parameter names)."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, c = x.shape
            q, k, v = self.c_attn(x).view(b, t, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_fc, self.c_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c_proj(nn.functional.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.attn, self.ln_2, self.mlp = nn.LayerNorm(d), Attention(), nn.LayerNorm(d), MLP()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    return Block()


def _block_corvid(quick: bool) -> Prepared:
    import corvid as cv

    s = block_sizes(quick)
    model = corvid_block(s.d, s.heads)
    model.load_state_dict({k: cv.Tensor(v) for k, v in block_weights(quick).items()})
    model.eval()
    x = cv.Tensor(block_input(quick)).realize()
    forward = cv.jit(lambda m, x: m(x))
    last: list[Any] = [forward(model, x).realize()]  # trace and compile outside the timed region

    def call() -> None:
        last[0] = forward(model, x).realize()

    def check() -> str | None:
        if forward.traces != 1:
            return f"the forward was traced {forward.traces} times, expected once"
        return check_block(last[0].numpy(), quick)

    return Prepared(call, 1, check)


def _block_torch(quick: bool) -> Prepared:
    import torch

    s = block_sizes(quick)
    model = torch_block(s.d, s.heads)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in block_weights(quick).items()})
    model.eval()
    x = torch.from_numpy(block_input(quick).copy())
    last: list[Any] = [None]

    def call() -> None:
        with torch.inference_mode():
            last[0] = model(x)

    call()
    return Prepared(call, 1, lambda: check_block(last[0].numpy(), quick))


def _block_numpy(quick: bool) -> Prepared:
    s = block_sizes(quick)
    w, x = block_weights(quick), block_input(quick)
    return Prepared(lambda: numpy_block(w, "", s.heads, x, np.float32), 1)


TRANSFORMER_BLOCK = Overhead(
    "transformer_block", "GPT-2 block forward: batch 8, seq 256, width 768, 12 heads, causal (corvid: nn modules, "
    "jitted; torch eager, inference_mode)", "ms/call", 1e3, None, "issue 24",
    {"corvid": _block_corvid, "numpy": _block_numpy, "torch": _block_torch}, peer_target=("torch", 1.0))

BLOCKS: list[Overhead] = [TRANSFORMER_BLOCK]

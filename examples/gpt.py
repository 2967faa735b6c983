"""A GPT-2-style decoder-only transformer: train a character-level model on tinyshakespeare, sample
text from it, or load GPT-2 weights from a Hugging Face safetensors file.

The model is GPT-2's architecture written with ``corvid.nn``: token and position embeddings,
``n_layer`` pre-norm blocks (``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``), causal multi-head
self-attention (``F.scaled_dot_product_attention(..., is_causal=True)``), an MLP of width
``4 * n_embd`` with GELU's tanh approximation, a final LayerNorm, and an LM head that shares its
weights with the token embedding (``logits = ln_f(x) @ wte.weight.T``, as GPT-2).

Module and parameter names are GPT-2's own, so a Hugging Face GPT-2 state dict maps onto
:meth:`GPT.state_dict` one to one (see :func:`load_gpt2_safetensors`)::

    wte.weight, wpe.weight                                 token / position embeddings
    h.{i}.ln_1.{weight,bias}, h.{i}.ln_2.{weight,bias}     LayerNorms
    h.{i}.attn.c_attn.{weight,bias}                        q, k, v projection   (3*n_embd, n_embd)
    h.{i}.attn.c_proj.{weight,bias}                        attention output     (n_embd, n_embd)
    h.{i}.mlp.c_fc.{weight,bias}                                                (4*n_embd, n_embd)
    h.{i}.mlp.c_proj.{weight,bias}                                              (n_embd, 4*n_embd)
    ln_f.{weight,bias}

The one difference is the layout of the four projections: GPT-2 stores them as ``Conv1D`` weights
``(in, out)``, ``nn.Linear`` as ``(out, in)``, so the loader transposes them. The LM head has no
weight of its own (a file's ``lm_head.weight`` must equal ``wte.weight``).

Training runs one ``cv.jit`` function per step (forward, backward and AdamW): it is traced once,
then every step replays the same compiled kernels. The model is written as a user would write it,
with plain ``nn.Linear`` layers and no layout hints: corvid's scheduler decides which values to
store (the residual stream, GELU's output) and its matmul lowering how to lay out the operands of
each product, the backward's included.

    python examples/gpt.py                                     # train ~1 minute on 2 cores, sample
    python examples/gpt.py --steps 3000 --checkpoint shakespeare.safetensors
    python examples/gpt.py --sample-only --weights shakespeare.safetensors --top-k 10
    python examples/gpt.py --device CUDA                       # on the GPU (pip install "corvid[cuda]")

``--device`` (default ``$CORVID_DEVICE``, else ``cv.devices()[0]``, the fastest device that starts
here) is printed; the model, its optimizer state, the batches and the sampling all run there.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import corvid as cv  # noqa: E402
from corvid import nn  # noqa: E402
from corvid.dtype import to_dtype  # noqa: E402
from corvid.nn import functional as F  # noqa: E402

DEFAULT_DATA = os.path.join(os.path.dirname(REPO), "shared", "data", "tinyshakespeare", "input.txt")


@dataclass(frozen=True)
class GPTConfig:
    """The model's sizes. ``block_size`` is GPT-2's ``n_positions`` (``n_ctx``): the longest
    context, the length of the position table. ``n_embd`` must be a multiple of ``n_head``
    (ValueError). ``dropout`` applies, in training mode, to the embeddings, the attention weights
    and each residual branch."""

    vocab_size: int = 65
    block_size: int = 64
    n_embd: int = 128
    n_head: int = 4
    n_layer: int = 4
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig: n_embd={self.n_embd} must be a multiple of n_head={self.n_head}")


# --- the model -------------------------------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position ``t`` sees positions ``0..t``:
    ``(B, T, n_embd) -> (B, T, n_embd)``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.dropout = config.n_head, config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: cv.Tensor) -> cv.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).reshape(b, t, 3, self.n_head, c // self.n_head).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, c)))


class MLP(nn.Module):
    """``c_proj(gelu_tanh(c_fc(x)))`` with a hidden width of ``4 * n_embd``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: cv.Tensor) -> cv.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    """One pre-norm transformer block: ``x + attn(ln_1(x))``, then ``+ mlp(ln_2(...))``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: cv.Tensor) -> cv.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2: integer token ids ``(B, T)`` with ``T <= block_size`` -> float32 logits
    ``(B, T, vocab_size)``. The logits at position ``t`` depend on tokens ``0..t`` only.
    ValueError for another rank or a longer sequence.

    Initialization follows GPT-2: weights from N(0, 0.02), the residual output projections
    (``c_proj``) from N(0, 0.02 / sqrt(2 * n_layer)), biases 0, LayerNorms 1 and 0.

    >>> model = GPT(GPTConfig(vocab_size=10, block_size=8, n_embd=16, n_head=2, n_layer=1))
    >>> model(cv.Tensor([[1, 2, 3]])).shape
    (1, 3, 10)
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        residual_std = 0.02 / math.sqrt(2 * config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif p.ndim == 2:
                nn.init.normal_(p, 0.0, residual_std if name.endswith("c_proj.weight") else 0.02)

    def forward(self, idx: cv.Tensor) -> cv.Tensor:
        if idx.ndim != 2 or idx.shape[1] > self.config.block_size:
            raise ValueError(f"GPT: expected token ids (B, T) with T <= {self.config.block_size}, got {idx.shape}")
        x = self.drop(self.wte(idx) + self.wpe(cv.arange(idx.shape[1])))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T


# --- GPT-2 weights from Hugging Face ----------------------------------------------------------------------

_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def load_gpt2_safetensors(path: str, config: GPTConfig) -> GPT:
    """A :class:`GPT` of ``config`` holding the weights of a Hugging Face GPT-2 safetensors file.

    Accepts the hub's ``model.safetensors`` names (``wte.weight``, ``h.0.attn.c_attn.weight``…)
    and those of a saved ``GPT2LMHeadModel`` state dict (the same under ``transformer.``, plus
    ``lm_head.weight``, which must equal ``wte.weight``: GPT-2 ties them). The ``Conv1D`` weights
    of ``c_attn``, ``c_proj`` and ``c_fc``, stored ``(in, out)``, are transposed into
    ``nn.Linear``'s ``(out, in)``; causal-mask buffers (``attn.bias``, ``attn.masked_bias``) are
    skipped; values are cast to float32. The file is read with ``cv.safe_open`` (no pickle).
    ValueError naming the keys when the file does not fit ``config`` (missing or unexpected
    weights, other shapes) or the head is not tied.

    >>> import tempfile
    >>> cfg = GPTConfig(vocab_size=10, block_size=8, n_embd=16, n_head=2, n_layer=1)
    >>> path = os.path.join(tempfile.mkdtemp(), "gpt2.safetensors")
    >>> cv.save(path, to_gpt2_state_dict(GPT(cfg)))
    >>> load_gpt2_safetensors(path, cfg).wte.weight.shape
    (10, 16)
    """
    model = GPT(config)
    expected = model.state_dict()
    state: dict[str, cv.Tensor] = {}
    head = None
    with cv.safe_open(path) as f:
        for key in sorted(f.keys()):
            name = key.removeprefix("transformer.")
            if name == "lm_head.weight":
                head = f.get_tensor(key)
            elif name not in expected and name.endswith((".attn.bias", ".attn.masked_bias")):
                continue
            else:
                t = f.get_tensor(key).astype(cv.float32)
                state[name] = t.T if name.endswith(_CONV1D) else t
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    shapes = [f"{k} {state[k].shape} (the model's: {v.shape})" for k, v in expected.items()
              if k in state and state[k].shape != v.shape]
    if missing or unexpected or shapes:
        raise ValueError(f"load_gpt2_safetensors: {path} does not fit {config}: missing {missing}, "
                         f"unexpected {unexpected}, other shapes {shapes}")
    if head is not None and not np.array_equal(head.numpy(), state["wte.weight"].numpy()):
        raise ValueError(f"load_gpt2_safetensors: lm_head.weight differs from wte.weight in {path}; "
                         "this model ties them, as GPT-2 does")
    model.load_state_dict(state)
    return model


def to_gpt2_state_dict(model: GPT) -> dict[str, cv.Tensor]:
    """``model``'s weights under Hugging Face GPT-2 names and layouts (``Conv1D`` weights
    ``(in, out)``), the inverse of :func:`load_gpt2_safetensors`."""
    return {k: (v.T if k.endswith(_CONV1D) else v) for k, v in model.state_dict().items()}


# --- characters -------------------------------------------------------------------------------------------


class CharTokenizer:
    """Each distinct character of a text gets an id (in code point order).

    >>> tok = CharTokenizer("hello")
    >>> tok.vocab_size, tok.encode("hell"), tok.decode([3, 1])
    (4, [1, 0, 2, 2], 'oh')
    """

    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))
        self.vocab_size = len(self.chars)
        self._ids = {c: i for i, c in enumerate(self.chars)}

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``'s characters; KeyError for a character the tokenizer has not seen."""
        return [self._ids[c] for c in text]

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.chars[i] for i in ids)


def get_batch(data: np.ndarray, batch_size: int, block_size: int, rng: np.random.Generator
              ) -> tuple[cv.Tensor, cv.Tensor]:
    """``batch_size`` random contiguous blocks of ``data`` (1-D integer ids): the inputs
    ``(B, block_size)`` and the next-token targets (the same blocks one position later), int64."""
    starts = rng.integers(0, len(data) - block_size, size=batch_size)
    rows = data[starts[:, None] + np.arange(block_size + 1)].astype(np.int64)
    return cv.Tensor(rows[:, :-1]), cv.Tensor(rows[:, 1:])


# --- training ---------------------------------------------------------------------------------------------


def lm_loss(model: GPT, x: cv.Tensor, y: cv.Tensor) -> cv.Tensor:
    """Mean next-token cross-entropy of ``model`` on inputs ``x`` and targets ``y``, both ``(B, T)``."""
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


class Trainer:
    """AdamW on a :class:`GPT`, one jitted step per :meth:`step`, with GPT-2's weight-decay rule:
    the matrices (embeddings, projections) decay, biases and LayerNorm parameters do not.

    The parameters travel as two dicts of state-dict names (decayed, not decayed), each with its
    own functional AdamW state, and the model is run on them with ``nn.functional_call``.
    :meth:`sync` copies them back into the model.

    >>> model = GPT(GPTConfig(vocab_size=10, block_size=8, n_embd=16, n_head=2, n_layer=1))
    >>> trainer = Trainer(model, lr=1e-2)
    >>> x = cv.Tensor([[1, 2, 3, 4]])
    >>> first = trainer.step(x, x).item()
    >>> trainer.step(x, x).item() < first
    True
    """

    def __init__(self, model: GPT, lr: float = 1e-3, weight_decay: float = 0.1,
                 betas: tuple[float, float] = (0.9, 0.95), amp: Any = None) -> None:
        self.model = model
        # amp=cv.bfloat16: mixed precision (cv.autocast: products in bfloat16, float32 weights and
        # state); float16 would need loss scaling, which this functional step does not do
        self.amp = None if amp is None else to_dtype(amp)
        if self.amp not in (None, cv.bfloat16):
            raise ValueError(f"Trainer(amp=...) trains in bfloat16 mixed precision, not {self.amp.name} "
                             "(float16 needs loss scaling: cv.amp.GradScaler with an Optimizer)")
        named = dict(model.named_parameters())
        self.params = ({k: v.detach() for k, v in named.items() if v.ndim >= 2},
                       {k: v.detach() for k, v in named.items() if v.ndim < 2})
        self.tx = (cv.optim.AdamW.functional(lr=lr, betas=betas, weight_decay=weight_decay),
                   cv.optim.AdamW.functional(lr=lr, betas=betas, weight_decay=0.0))
        self.state = (self.tx[0].init(self.params[0]), self.tx[1].init(self.params[1]))
        self._step = cv.jit(self._update)

    def _update(self, params: tuple[dict, dict], state: tuple[dict, dict], x: cv.Tensor, y: cv.Tensor
                ) -> tuple[tuple[dict, dict], tuple[dict, dict], cv.Tensor]:
        def loss_of(p: tuple[dict, dict]) -> cv.Tensor:
            with cv.autocast(dtype=self.amp or cv.bfloat16, enabled=self.amp is not None):
                logits = nn.functional_call(self.model, p, x)
                return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

        loss, grads = cv.value_and_grad(loss_of)(params)
        (p0, s0), (p1, s1) = (tx.update(g, s, p) for tx, g, s, p in zip(self.tx, grads, state, params))
        return (p0, p1), (s0, s1), loss

    def step(self, x: cv.Tensor, y: cv.Tensor) -> cv.Tensor:
        """One AdamW step on the batch ``x, y`` (token ids ``(B, T)``); returns the loss before the
        step (a 0-d tensor)."""
        self.params, self.state, loss = self._step(self.params, self.state, x, y)
        return loss

    def sync(self) -> GPT:
        """Copy the trained parameters into the model, and return it."""
        self.model.load_state_dict({**self.params[0], **self.params[1]})
        return self.model


# Inference runs through jit with the model as an argument: every call of the same shapes replays
# the same kernels, and the parameters are plain traced values (eager under cv.no_grad, products
# with requires_grad parameters currently lose the matmul heuristics: 3x slower).
_eval_loss = cv.jit(lm_loss)


def estimate_loss(model: GPT, data: np.ndarray, batch_size: int, batches: int, seed: int = 1234) -> float:
    """Mean loss of ``model`` (in evaluation mode) over ``batches`` random batches of ``data``."""
    rng = np.random.default_rng(seed)
    was_training = model.training
    model.eval()
    losses = [_eval_loss(model, *get_batch(data, batch_size, model.config.block_size, rng)).item()
              for _ in range(batches)]
    model.train(was_training)
    return float(np.mean(losses))


# --- sampling ---------------------------------------------------------------------------------------------


@cv.jit
def _sample_next(model: GPT, window: cv.Tensor, last: cv.Tensor, key: cv.Tensor, temperature: float,
                 top_k: int | None) -> tuple[cv.Tensor, cv.Tensor]:
    """One token per row of ``window``, drawn from the logits at position ``last``, and the next key."""
    logits = cv.take(model(window), last, axis=1).reshape(window.shape[0], -1) / temperature
    if top_k is not None:
        kth = cv.topk(logits, top_k).values[:, -1:]
        logits = cv.where(logits < kth, -math.inf, logits)
    keys = cv.random.split(key)
    return cv.random.categorical(keys[1], logits), keys[0]


def generate(model: GPT, idx: cv.Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             seed: int = 0) -> cv.Tensor:
    """``idx`` (integer token ids ``(B, T)``, ``T >= 1``) followed by ``max_new_tokens`` sampled ids
    per row: int64 ``(B, T + max_new_tokens)``.

    Each token is drawn from ``softmax(logits / temperature)`` at the last position, restricted to
    the ``top_k`` most likely tokens when given, with ``cv.random`` keys derived from ``seed`` (the
    same seed gives the same tokens). The model sees the last ``block_size`` tokens, always as a
    full window (a shorter context is padded on the right, which causal attention hides from the
    positions before), so every step replays the same compiled kernels. The model is used in
    evaluation mode. ValueError for an empty prompt, ``temperature <= 0`` or ``top_k < 1``.

    >>> model = GPT(GPTConfig(vocab_size=10, block_size=8, n_embd=16, n_head=2, n_layer=1))
    >>> out = generate(model, cv.Tensor([[1, 2]]), 3, top_k=2, seed=0)
    >>> out.shape, out[0, :2].tolist(), out.tolist() == generate(model, cv.Tensor([[1, 2]]), 3, top_k=2).tolist()
    ((1, 5), [1, 2], True)
    """
    tokens = np.array(idx.numpy() if isinstance(idx, cv.Tensor) else idx, dtype=np.int64)
    if tokens.ndim != 2 or tokens.shape[1] == 0:
        raise ValueError(f"generate: expected a prompt of token ids (B, T) with T >= 1, got shape {tokens.shape}")
    if temperature <= 0:
        raise ValueError(f"generate: temperature must be positive, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"generate: top_k must be at least 1, got {top_k}")
    block = model.config.block_size
    k = None if top_k is None or top_k >= model.config.vocab_size else top_k
    key = cv.random.key(seed)
    was_training = model.training
    model.eval()
    for _ in range(max_new_tokens):
        context = tokens[:, -block:]
        window = np.zeros((tokens.shape[0], block), np.int64)
        window[:, :context.shape[1]] = context
        last = cv.Tensor(np.array([context.shape[1] - 1]))
        token, key = _sample_next(model, cv.Tensor(window), last, key, float(temperature), k)
        tokens = np.concatenate([tokens, token.numpy()[:, None]], axis=1)
    model.train(was_training)
    return cv.Tensor(tokens)


# --- checkpoints ------------------------------------------------------------------------------------------


def save_checkpoint(path: str, model: GPT, tok: CharTokenizer) -> None:
    """``model``'s weights as safetensors, with its config and the tokenizer's characters in the
    file's metadata (written to a temporary file and renamed: never a half-written checkpoint)."""
    meta = {k: str(v) for k, v in asdict(model.config).items()}
    meta["chars"] = "".join(tok.chars)
    cv.save(path, model.state_dict(), metadata=meta)


def load_checkpoint(path: str) -> tuple[GPT, CharTokenizer]:
    """The model and tokenizer of a checkpoint written by :func:`save_checkpoint`."""
    with cv.safe_open(path) as f:
        meta = f.metadata()
    fields = {k: type(v)(meta[k]) for k, v in asdict(GPTConfig()).items()}
    model = GPT(GPTConfig(**fields))
    model.load_state_dict(cv.load(path))
    return model, CharTokenizer(meta["chars"])


# --- command line -----------------------------------------------------------------------------------------


def progress(items: Iterable[Any], total: int, desc: str) -> Any:
    """A tqdm bar over ``items`` when tqdm is installed (``pip install tqdm``), else ``items``."""
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, total=total, desc=desc, leave=False, mininterval=0.5)


def train(args: argparse.Namespace, text: str) -> tuple[GPT, CharTokenizer]:
    """Train a character-level model on ``text`` as ``args`` say; print the loss as it goes."""
    tok = CharTokenizer(text)
    data = np.array(tok.encode(text), dtype=np.int64)
    split = int(0.9 * len(data))
    train_data, val_data = data[:split], data[split:]
    cv.manual_seed(args.seed)
    config = GPTConfig(vocab_size=tok.vocab_size, block_size=args.block_size, n_embd=args.n_embd,
                       n_head=args.n_head, n_layer=args.n_layer, dropout=args.dropout)
    model = GPT(config)
    n_params = sum(p.size for p in model.parameters())
    print(f"data: {len(text):,} characters, {tok.vocab_size} distinct; {config}, {n_params:,} parameters",
          flush=True)
    trainer = Trainer(model, lr=args.lr, weight_decay=args.weight_decay, amp=cv.bfloat16 if args.amp else None)
    rng = np.random.default_rng(args.seed)
    steps = progress(range(1, args.steps + 1), args.steps, "training")
    write = getattr(steps, "write", print)  # tqdm.write keeps the bar intact
    t0 = time.perf_counter()
    for i in steps:
        loss = trainer.step(*get_batch(train_data, args.batch_size, config.block_size, rng))
        if i == 1 or i % args.log_every == 0 or i == args.steps:
            write(f"step {i:5d}: loss {loss.item():.4f}  ({time.perf_counter() - t0:5.1f} s)")
    trainer.sync()
    print(f"validation loss {estimate_loss(model, val_data, args.batch_size, 20):.4f}", flush=True)
    return model, tok


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=DEFAULT_DATA, help="a text file to train on (default: tinyshakespeare)")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default="gpt_char.safetensors", help="where to save the trained weights")
    p.add_argument("--sample-only", action="store_true", help="no training: sample from --weights")
    p.add_argument("--weights", help="a checkpoint written by this script (for --sample-only)")
    p.add_argument("--tokens", type=int, default=300, help="how many characters to sample")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--prompt", default="\n")
    p.add_argument("--device", default=None,
                   help="CPU, CUDA, CL, WEBGPU (default: $CORVID_DEVICE, else the fastest that starts here)")
    p.add_argument("--amp", action="store_true",
                   help="bfloat16 mixed precision (cv.autocast): products in bfloat16, weights in float32")
    args = p.parse_args(argv)
    device = pick_device(args.device)
    print(f"device: {device}", flush=True)
    with cv.default_device(device):  # (model, optimizer state, batches and samples all live there)
        return _run(p, args)


def pick_device(name: str | None) -> str:
    """``name``, else ``$CORVID_DEVICE``, else the fastest device that starts here."""
    if name:
        return cv.runtime.device.canonical_device(name)
    return cv.get_default_device() if os.environ.get("CORVID_DEVICE") else cv.devices()[0]


def _run(p: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    if args.sample_only:
        if not args.weights:
            p.error("--sample-only needs --weights")
        model, tok = load_checkpoint(args.weights)
    else:
        with open(args.data, encoding="utf-8") as f:
            model, tok = train(args, f.read())
        save_checkpoint(args.checkpoint, model, tok)
        print(f"weights saved to {args.checkpoint}", flush=True)
    prompt = cv.Tensor([tok.encode(args.prompt)])
    sample = tok.decode(generate(model, prompt, args.tokens, args.temperature, args.top_k, args.seed)[0].tolist())
    print("--- sample ---")
    print(sample)
    return sample


if __name__ == "__main__":
    main()

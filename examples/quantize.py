"""Weight-only quantization (``cv.quantize``) measured: the perplexity of a small language model in
float32, bfloat16, int8 and int4, and the speed of a quantized matrix-vector product.

The model is a character-level Llama-architecture :class:`corvid.models.CausalLM` (4 layers of
width 128, SwiGLU MLPs of width 384, an untied head: 0.8M parameters), trained here on the first
90% of tinyshakespeare with AdamW (``examples/gpt.py``'s jitted ``Trainer``). Perplexity is
``exp`` of the mean next-character cross-entropy over the last 10%, cut into windows of
``--block-size`` characters, each predicted from the characters before it in its window. Every
``Linear`` layer is quantized (the attention and MLP projections and the head; the embedding and
the norms stay float32), for each mode and group size, from the same float32 weights.

The speed part times one ``1 x 2048 @ 2048 x 8192`` product (one token through a 2048-to-8192
projection, as in generation) and a 64-row one (a prompt): a float32 ``nn.Linear``, the same
float product written as a broadcast product that reads the weight in place, and
``QuantizedLinear`` in int8 and int4, each jitted (a call replays its kernels). Each is run in
alternating rounds and the best round's mean is reported, with the number of kernels it schedules.

    python examples/quantize.py                        # train ~5 minutes on 2 cores, then both parts
    python examples/quantize.py --steps 300            # a shorter run (a weaker model)
    python examples/quantize.py --speed-only
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import time
from typing import Any

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "examples"))

import corvid as cv  # noqa: E402
from corvid import models, nn  # noqa: E402
from corvid.nn import functional as F  # noqa: E402
from gpt import DEFAULT_DATA, CharTokenizer, Trainer, get_batch  # noqa: E402


def char_config(vocab_size: int, block_size: int) -> dict[str, Any]:
    """The model's ``config.json``-style dict (``CausalLM`` takes it as is)."""
    return {"model_type": "llama", "vocab_size": vocab_size, "hidden_size": 128, "intermediate_size": 384,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
            "max_position_embeddings": block_size, "tie_word_embeddings": False}


def train(text: str, steps: int, block_size: int, batch_size: int, lr: float, seed: int
          ) -> tuple[models.CausalLM, CharTokenizer, np.ndarray]:
    """A model trained on the first 90% of ``text``; returns it, the tokenizer and the held-out ids."""
    tok = CharTokenizer(text)
    data = np.array(tok.encode(text), dtype=np.int64)
    split = int(0.9 * len(data))
    cv.manual_seed(seed)
    model = models.CausalLM(char_config(tok.vocab_size, block_size))
    trainer = Trainer(model, lr=lr)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    for i in range(1, steps + 1):
        loss = trainer.step(*get_batch(data[:split], batch_size, block_size, rng))
        if i == 1 or i % 100 == 0 or i == steps:
            print(f"step {i:5d}: loss {loss.item():.4f}  ({time.perf_counter() - t0:5.1f} s)", flush=True)
    return trainer.sync().eval(), tok, data[split:]


def _loss_sum(model: nn.Module, x: cv.Tensor, y: cv.Tensor) -> cv.Tensor:
    logits = model(x).astype(cv.float32)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum")


_jit_loss_sum = cv.jit(_loss_sum)


def perplexity(model: nn.Module, ids: np.ndarray, block_size: int, batch_size: int = 64) -> float:
    """``exp`` of the mean next-token cross-entropy of ``model`` over ``ids`` cut into windows of
    ``block_size + 1`` tokens (inputs, and the targets one position later); the last partial
    window is dropped."""
    n = (len(ids) - 1) // block_size
    rows = np.stack([ids[i * block_size: i * block_size + block_size + 1] for i in range(n)])
    total, count = 0.0, 0
    with cv.no_grad():
        for i in range(0, n - batch_size + 1, batch_size):  # (whole batches: one trace)
            chunk = rows[i:i + batch_size]
            total += _jit_loss_sum(model, cv.Tensor(chunk[:, :-1]), cv.Tensor(chunk[:, 1:])).item()
            count += chunk[:, 1:].size
    return math.exp(total / count)


def accuracy_table(model: models.CausalLM, held_out: np.ndarray, block_size: int,
                   groups: tuple[int, ...]) -> list[tuple[str, float, int]]:
    """(variant, perplexity, bytes of the Linear layers' weights) for float32, bfloat16 and every
    quantized variant, each made from a copy of ``model``."""
    def linear_bytes(m: nn.Module) -> int:
        total = 0
        for layer in m.modules():
            if isinstance(layer, nn.Linear):
                total += layer.weight.size * layer.weight.dtype.itemsize
            elif isinstance(layer, cv.quant.QuantizedLinear):
                total += layer.qweight.size * layer.qweight.dtype.itemsize + layer.scales.size * 4
        return total

    rows = [("float32", perplexity(model, held_out, block_size), linear_bytes(model))]
    print(f"{rows[-1][0]:>16}: perplexity {rows[-1][1]:.4f}", flush=True)
    half = copy.deepcopy(model).to(cv.bfloat16)
    rows.append(("bfloat16", perplexity(half, held_out, block_size), linear_bytes(half)))
    print(f"{rows[-1][0]:>16}: perplexity {rows[-1][1]:.4f}", flush=True)
    for mode in ("int8", "int4"):
        for g in groups:
            q = cv.quantize(copy.deepcopy(model), mode, group_size=g)
            rows.append((f"{mode} g{g}", perplexity(q, held_out, block_size), linear_bytes(q)))
            print(f"{rows[-1][0]:>16}: perplexity {rows[-1][1]:.4f}", flush=True)
    q = cv.quantize(copy.deepcopy(model), "int4", group_size=groups[0], skip="lm_head")
    rows.append((f"int4 g{groups[0]} (head float)", perplexity(q, held_out, block_size), linear_bytes(q)))
    print(f"{rows[-1][0]:>16}: perplexity {rows[-1][1]:.4f}", flush=True)
    return rows


def _time(fns: dict[str, Any], rounds: int, reps: int) -> dict[str, float]:
    """The best round's mean time (seconds) of each function, in alternating rounds."""
    for f in fns.values():
        f().realize()
    best = {k: math.inf for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t = time.perf_counter()
            for _ in range(reps):
                f().realize()
            best[k] = min(best[k], (time.perf_counter() - t) / reps)
    return best


def _replayed(f, x):
    """``f(x)`` as a jitted call, and the kernels an eager call would schedule (``.schedule()``)."""
    jitted = cv.jit(f)

    def call():
        return jitted(x)

    call.schedule = lambda: f(x).schedule()
    return call


def speed_table(k: int, m: int, row_counts: tuple[int, ...], rounds: int) -> list[tuple[int, str, int, float]]:
    """(rows, variant, kernels, seconds) of ``x @ W.T`` with ``W`` of shape (m, k)."""
    cv.manual_seed(0)
    lin = nn.Linear(k, m, bias=False)
    layers = {f"{mode} g{g}": cv.quant.QuantizedLinear.from_linear(lin, mode, g)
              for mode in ("int8", "int4") for g in (64, 128)}
    out = []
    for rows in row_counts:
        x = cv.randn(rows, k).realize()
        # (jitted: each call replays the compiled kernels, so the times are the products', not
        # the graph building and scheduling of an eager call, some 0.3 ms)
        fns = {"float32 nn.Linear": _replayed(lambda x: lin(x), x),
               "float32, read in place": _replayed(lambda x: (x[:, None] * lin.weight[None]).sum(axis=-1), x)}
        fns.update({name: _replayed(q, x) for name, q in layers.items()})
        times = _time(fns, rounds, max(1, 20 // rows))
        for name, f in fns.items():
            out.append((rows, name, len(f.schedule()), times[name]))
            print(f"{rows:4d} x {k} @ {k} x {m}  {name:>24}: {times[name] * 1e3:8.2f} ms  "
                  f"({out[-1][2]} kernel{'s' if out[-1][2] > 1 else ''})", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=DEFAULT_DATA, help="a text file (default: tinyshakespeare)")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--groups", default="32,64,128", help="group sizes to measure, comma-separated")
    p.add_argument("--speed-only", action="store_true", help="only time the products")
    p.add_argument("--accuracy-only", action="store_true", help="only train and measure perplexity")
    p.add_argument("--rounds", type=int, default=7, help="timing rounds")
    args = p.parse_args(argv)
    print(f"corvid {cv.__version__}, device {cv.get_default_device()}", flush=True)
    if not args.speed_only:
        with open(args.data, encoding="utf-8") as f:
            model, _, held_out = train(f.read(), args.steps, args.block_size, args.batch_size, args.lr, args.seed)
        groups = tuple(int(g) for g in args.groups.split(","))
        rows = accuracy_table(model, held_out, args.block_size, groups)
        base = rows[0][1]
        print("\n| weights | perplexity | vs float32 | Linear weight bytes |\n| --- | --- | --- | --- |")
        for name, ppl, nbytes in rows:
            print(f"| {name} | {ppl:.4f} | {100 * (ppl / base - 1):+.2f}% | {nbytes:,} |")
    if not args.accuracy_only:
        print()
        speed_table(2048, 8192, (1, 64), args.rounds)


if __name__ == "__main__":
    main()

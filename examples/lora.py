"""Fine-tune a small language model with LoRA adapters on tinyshakespeare: only the adapters
train, they are saved alone (a small file), reloaded into a fresh copy of the base model, then
merged into its weights.

The model is a character-level :class:`corvid.models.CausalLM` (Llama's architecture) built from
a ``config.json``-style dict. The run:

1. pretrains it briefly on the first half of the text (or loads a base checkpoint, ``--base``);
2. puts LoRA adapters on its attention's query and value projections
   (:func:`corvid.nn.lora.apply_lora`), which freezes everything else, and trains the adapters
   alone with AdamW on the second half of the text, printing the loss as it goes and the number
   of trainable parameters against the total;
3. saves the adapters alone (:func:`corvid.nn.lora.save_lora`), loads them into a fresh copy of
   the base model (:func:`corvid.nn.lora.load_lora`) and checks that it computes the same logits;
4. merges them into the weights (:func:`corvid.nn.lora.merge_lora`), which gives back a model of
   plain ``Linear`` layers, and checks that its logits are those of the adapted model.

Both trainings are one ``cv.jit`` step each (gradients of the trained parameters, then AdamW's
update): traced once, then replayed.

    python examples/lora.py                                   # 20-40 s on 2 cores
    python examples/lora.py --steps 300 --rank 4 --out adapters.safetensors
    python examples/lora.py --pretrain-steps 1000 --save-base base.safetensors
    python examples/lora.py --base base.safetensors           # adapters on a saved base model

``--data`` defaults to ``$CORVID_DATA_DIR/tinyshakespeare/input.txt``, else the copy in
``../shared/data`` next to the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import corvid as cv  # noqa: E402
from corvid import nn  # noqa: E402
from corvid.models import CausalLM  # noqa: E402
from corvid.nn import functional as F  # noqa: E402
from corvid.nn.lora import apply_lora, load_lora, merge_lora, save_lora  # noqa: E402


def default_data() -> str | None:
    """``$CORVID_DATA_DIR/tinyshakespeare/input.txt``, else the offline copy next to the
    repository, if either exists."""
    folders = [os.environ.get("CORVID_DATA_DIR"), os.path.join(os.path.dirname(REPO), "shared", "data")]
    for folder in folders:
        if folder and os.path.exists(os.path.join(folder, "tinyshakespeare", "input.txt")):
            return os.path.join(folder, "tinyshakespeare", "input.txt")
    return None


def model_config(vocab_size: int, args: argparse.Namespace) -> dict[str, Any]:
    """A small Llama as a ``config.json`` dict."""
    return {"model_type": "llama", "vocab_size": vocab_size, "hidden_size": args.hidden_size,
            "intermediate_size": 2 * args.hidden_size, "num_hidden_layers": args.layers, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": args.block_size}


def get_batch(data: np.ndarray, batch_size: int, block_size: int, rng: np.random.Generator
              ) -> tuple[cv.Tensor, cv.Tensor]:
    """``batch_size`` random blocks of ``data`` (token ids) and the same blocks one position later."""
    starts = rng.integers(0, len(data) - block_size, size=batch_size)
    rows = data[starts[:, None] + np.arange(block_size + 1)]
    return cv.Tensor(rows[:, :-1]), cv.Tensor(rows[:, 1:])


def lm_loss(model: CausalLM, x: cv.Tensor, y: cv.Tensor, params: dict[str, cv.Tensor] | None = None) -> cv.Tensor:
    """Mean next-token cross-entropy of ``model``, with ``params`` in place of its own tensors of those names."""
    logits = model(x) if params is None else nn.functional_call(model, params, x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


_eval_loss = cv.jit(lm_loss)  # the model is an argument: one trace per model layout


def evaluate(model: CausalLM, data: np.ndarray, args: argparse.Namespace, batches: int = 4) -> float:
    """Mean loss on ``batches`` fixed random batches of ``data``."""
    rng = np.random.default_rng(1234)
    model.eval()
    losses = [_eval_loss(model, *get_batch(data, args.batch_size, args.block_size, rng)).item()
              for _ in range(batches)]
    model.train()
    return float(np.mean(losses))


def train(model: CausalLM, data: np.ndarray, steps: int, lr: float, args: argparse.Namespace, what: str) -> None:
    """``steps`` AdamW steps on the parameters of ``model`` that require gradients (all of them
    before ``apply_lora``, the adapters after), then copied into ``model``. Prints the mean loss
    of the steps since the last line.

    The trained parameters travel through one ``cv.jit`` function as a dict of state-dict names
    (traced once, then replayed every step); the model is called on them with
    ``nn.functional_call``, and its frozen parameters are constants of the step."""
    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    tx = cv.optim.AdamW.functional(lr=lr, weight_decay=0.0)

    @cv.jit
    def step(params: dict, state: Any, x: cv.Tensor, y: cv.Tensor) -> tuple[dict, Any, cv.Tensor]:
        loss, grads = cv.value_and_grad(lambda p: lm_loss(model, x, y, p))(params)
        params, state = tx.update(grads, state, params)
        return params, state, loss

    state, rng, t0, losses = tx.init(params), np.random.default_rng(args.seed), time.perf_counter(), []
    for i in range(1, steps + 1):
        params, state, loss = step(params, state, *get_batch(data, args.batch_size, args.block_size, rng))
        losses.append(loss.item())
        if i == 1 or i % args.log_every == 0 or i == steps:
            print(f"{what} step {i:4d}: loss {np.mean(losses):.4f}  ({time.perf_counter() - t0:4.1f} s)", flush=True)
            losses = []
    model.load_state_dict(params, strict=False)


def save_base(path: str, model: CausalLM, config: dict[str, Any], chars: str) -> None:
    """The base model's weights, with its config and the characters of its vocabulary in the metadata."""
    cv.save(path, model.state_dict(), metadata={"config": json.dumps(config), "chars": chars})


def load_base(path: str) -> tuple[CausalLM, str]:
    """A base model written by :func:`save_base`, and its characters."""
    with cv.safe_open(path) as f:
        meta = f.metadata() or {}
    if "config" not in meta or "chars" not in meta:
        raise SystemExit(f"{path} is not a base model written by examples/lora.py --save-base")
    model = CausalLM(json.loads(meta["config"]))
    model.load_state_dict(cv.load(path))
    return model, meta["chars"]


def count(model: CausalLM, trainable: bool = False) -> int:
    return sum(p.size for p in model.parameters() if p.requires_grad or not trainable)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=default_data(),
                   help="a text file (default: $CORVID_DATA_DIR/tinyshakespeare/input.txt, else ../shared/data's)")
    p.add_argument("--steps", type=int, default=100, help="LoRA training steps")
    p.add_argument("--rank", type=int, default=8, help="the adapters' rank r")
    p.add_argument("--alpha", type=float, default=16.0, help="LoRA's alpha: the update is scaled by alpha / rank")
    p.add_argument("--target", default="q_proj,v_proj", help="the projections to adapt, comma-separated")
    p.add_argument("--out", default="lora_adapters.safetensors", help="where to save the adapters")
    p.add_argument("--pretrain-steps", type=int, default=150)
    p.add_argument("--base", help="a base model written by --save-base (no pretraining)")
    p.add_argument("--save-base", help="where to save the pretrained base model")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3, help="pretraining learning rate")
    p.add_argument("--lora-lr", type=float, default=1e-2)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if not args.data:
        p.error("no --data given and no tinyshakespeare found ($CORVID_DATA_DIR or ../shared/data)")
    t_start = time.perf_counter()
    with open(args.data, encoding="utf-8") as f:
        text = f.read()
    cv.manual_seed(args.seed)

    if args.base:
        model, chars = load_base(args.base)
        args.block_size = min(args.block_size, model.config.max_position_embeddings)
        print(f"base model: {args.base}", flush=True)
    else:
        chars = "".join(sorted(set(text)))
        config = model_config(len(chars), args)
        model = CausalLM(config)
    ids = {c: i for i, c in enumerate(chars)}
    unknown = sorted(set(text) - set(ids))
    if unknown:
        raise SystemExit(f"{args.data} has characters the base model does not know: {''.join(unknown)!r}")
    data = np.array([ids[c] for c in text], dtype=np.int64)
    half = len(data) // 2
    base_data, tune = data[:half], data[half:]
    split = int(0.9 * len(tune))
    tune_train, tune_val = tune[:split], tune[split:]
    if min(len(base_data), len(tune_val)) <= args.block_size:
        raise SystemExit(f"{args.data} is too short for --block-size {args.block_size} "
                         f"({len(text)} characters; a tenth of the second half must exceed it)")
    print(f"data: {len(text):,} characters, {len(chars)} distinct; pretraining on the first half, "
          f"fine-tuning on the second", flush=True)

    if not args.base:
        print(f"model: {count(model):,} parameters", flush=True)
        train(model, base_data, args.pretrain_steps, args.lr, args, "pretrain")
        if args.save_base:
            save_base(args.save_base, model, config, chars)
            print(f"base model saved to {args.save_base}", flush=True)
    base_state = {k: v.numpy() for k, v in model.state_dict().items()}
    before = evaluate(model, tune_val, args)
    print(f"validation loss on the fine-tuning text before LoRA: {before:.4f}", flush=True)

    targets = tuple(t.strip() for t in args.target.split(",") if t.strip())
    apply_lora(model, r=args.rank, alpha=args.alpha, target=targets)
    trainable, total = count(model, trainable=True), count(model)
    print(f"LoRA r={args.rank}, alpha={args.alpha:g} on {', '.join(targets)}: {trainable:,} trainable parameters "
          f"of {total:,} ({100 * trainable / total:.2f}%)", flush=True)
    train(model, tune_train, args.steps, args.lora_lr, args, "LoRA")
    after = evaluate(model, tune_val, args)
    print(f"validation loss on the fine-tuning text after LoRA: {after:.4f} (before: {before:.4f})", flush=True)
    now = {k.replace(".base_layer.", "."): v for k, v in model.state_dict().items() if ".lora_" not in k}
    unchanged = now.keys() == base_state.keys() and all(np.array_equal(base_state[k], v.numpy())
                                                        for k, v in now.items())
    print(f"base weights unchanged: {unchanged}", flush=True)

    save_lora(args.out, model)
    size = os.path.getsize(args.out)
    print(f"adapters saved to {args.out}: {size:,} bytes "
          f"(the whole model: {sum(v.nbytes for v in base_state.values()):,} bytes)", flush=True)

    model.eval()
    x, _ = get_batch(tune_val, 2, args.block_size, np.random.default_rng(0))
    adapted = model(x).numpy()
    fresh = CausalLM(model.config)
    fresh.load_state_dict(base_state)
    load_lora(apply_lora(fresh, r=args.rank, alpha=args.alpha, target=targets), args.out)
    fresh.eval()
    reloaded = float(np.abs(fresh(x).numpy() - adapted).max())
    print(f"reloaded adapters on a fresh base model: max |logits difference| {reloaded:.2e}", flush=True)
    merge_lora(model)
    merged = float(np.abs(model(x).numpy() - adapted).max())
    kinds = sorted({type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__})
    print(f"merged: layers {kinds}, max |logits difference| {merged:.2e}", flush=True)
    if reloaded > 1e-4 or merged > 1e-4:
        raise SystemExit("the reloaded or merged model does not compute the adapted model's logits")
    print(f"done in {time.perf_counter() - t_start:.1f} s", flush=True)
    return {"before": before, "after": after, "trainable": trainable, "total": total, "adapter_bytes": size,
            "reloaded_diff": reloaded, "merged_diff": merged, "base_unchanged": unchanged}


if __name__ == "__main__":
    main()

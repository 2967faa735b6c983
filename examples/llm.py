"""Generate text with a language model from a Hugging Face checkpoint folder (Llama, Mistral, Qwen2,
Phi-3, Gemma, Gemma 2), printing the tokens as they come, then the speed of the prefill and of
the decoding.

    python examples/llm.py --model ~/models/Qwen2-0.5B --prompt "The capital of France is"
    python examples/llm.py --model DIR --prompt "Once upon a time" --temperature 0.7 --top-p 0.9 --seed 1
    python examples/llm.py --model DIR --prompt-ids 1,415,5565 --temperature 0   # no tokenizer needed

The folder holds ``config.json`` and ``model.safetensors`` (or shards), loaded by
``corvid.models.from_pretrained``, and, for ``--prompt``, the tokenizer as ``tokenizer.json``,
read with the ``tokenizers`` package (``pip install tokenizers``, or corvid's ``[llm]`` extra).
``--prompt-ids`` gives the prompt as token ids instead (the output is then ids too, unless the
folder has a tokenizer to show them with).

Generation is ``CausalLM.stream``: the prompt is run once (the *prefill*, which fills the key/value
cache), then one compiled step per token replays the same kernels. ``--temperature 0`` is greedy;
otherwise tokens are sampled with ``--top-k`` / ``--top-p`` from ``cv.random.key(--seed)``, so a
seed gives the same text every time. Generation stops at the model's end-of-sequence token or
after ``--max-new-tokens``.

The first run of a model traces and compiles the prefill and the step (compiled kernels are cached
on disk, so a later process compiles less); ``--warmup`` generates once before the timed run, so
that the reported speeds are those of the compiled programs. On a CPU, ``--dtype float32`` decodes
a bfloat16 checkpoint much faster than bfloat16 itself (corvid's CPU matrix products convert
bfloat16 weights to float32 at every step).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import corvid as cv  # noqa: E402
from corvid import models  # noqa: E402

TOKENIZER = "tokenizer.json"
INSTALL = "pip install tokenizers (or corvid's [llm] extra: pip install \"corvid[llm]\")"


def load_tokenizer(folder: str, required: bool):
    """The folder's ``tokenizer.json`` as a ``tokenizers.Tokenizer``; None when it is optional
    and unavailable; SystemExit saying what is missing when it is required."""
    path = os.path.join(folder, TOKENIZER)
    if not os.path.isfile(path):
        if required:
            raise SystemExit(f"llm.py: {folder} has no {TOKENIZER}; give the prompt as token ids with --prompt-ids")
        return None
    try:
        import tokenizers
    except ImportError:
        if required:
            raise SystemExit(f"llm.py: --prompt needs the tokenizers package to read {TOKENIZER}: {INSTALL}; "
                             "or give the prompt as token ids with --prompt-ids") from None
        return None
    try:
        return tokenizers.Tokenizer.from_file(path)
    except Exception as e:  # noqa: BLE001 (the package raises a plain Exception for a file it cannot read)
        if required:
            raise SystemExit(f"llm.py: cannot read {path}: {e}") from None
        print(f"llm.py: cannot read {path} ({e}); showing token ids", file=sys.stderr)
        return None


def parse_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise SystemExit(f"llm.py: --prompt-ids must be comma-separated integers, got {text!r}") from None
    if not ids:
        raise SystemExit("llm.py: --prompt-ids is empty")
    return ids


class Printer:
    """Prints generated tokens as they come: as text (the decoded text grows; the new part is
    printed, held back while it ends inside a multi-byte character) or as ids."""

    def __init__(self, tokenizer):
        self.tokenizer, self.ids, self.shown = tokenizer, [], ""

    def __call__(self, token: int) -> None:
        self.ids.append(token)
        if self.tokenizer is None:
            print(token, end=" ", flush=True)
            return
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):
            return
        print(text.removeprefix(self.shown), end="", flush=True)
        self.shown = text


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a Hugging Face checkpoint folder (config.json, model.safetensors)")
    prompt = p.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="the text to continue (needs tokenizer.json in the folder)")
    prompt.add_argument("--prompt-ids", help="the prompt as comma-separated token ids")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0, help="0: greedy decoding")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=0, help="the sampling key: cv.random.key(seed)")
    p.add_argument("--device", default=None, help="where the model runs (default: corvid's default device)")
    p.add_argument("--dtype", default=None, help="compute in this dtype (default: the checkpoint's), e.g. float32")
    p.add_argument("--warmup", action="store_true", help="generate once before the timed run (compiles)")
    args = p.parse_args(argv)

    tokenizer = load_tokenizer(args.model, required=args.prompt is not None)
    ids = tokenizer.encode(args.prompt).ids if args.prompt is not None else parse_ids(args.prompt_ids)
    device = cv.runtime.device.canonical_device(args.device)
    t0 = time.perf_counter()
    model = models.from_pretrained(args.model, dtype=args.dtype, device=device)
    c = model.config
    print(f"{c.model_type}: {c.num_hidden_layers} layers, hidden {c.hidden_size}, vocab {c.vocab_size}, "
          f"{model.dtype.name} on {device}, loaded in {time.perf_counter() - t0:.2f} s; prompt: {len(ids)} tokens",
          file=sys.stderr, flush=True)
    options = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                   top_p=args.top_p, key=cv.random.key(args.seed, device))
    try:
        if args.warmup:
            for _ in model.stream(ids, **options):
                pass
        show = Printer(tokenizer)
        if tokenizer is not None:
            print(tokenizer.decode(ids), end="", flush=True)
        start = time.perf_counter()
        times = []
        for (token,) in model.stream(ids, **options):
            times.append(time.perf_counter())
            show(token)
    except ValueError as e:  # a bad option or token id: the message says which
        raise SystemExit(f"llm.py: {e}") from None
    print(flush=True)
    stats = {"tokens": show.ids, "prompt_tokens": len(ids)}
    if times:
        stats["prefill_s"] = times[0] - start
        note = "" if args.warmup else " (includes tracing and compiling: --warmup times the compiled programs)"
        print(f"prefill: {len(ids)} tokens in {stats['prefill_s']:.3f} s, {len(ids) / stats['prefill_s']:.1f} "
              f"tokens/s{note}")
        # (the first step traces and compiles, unless warmed up: timed apart)
        first = 0 if args.warmup else 1
        if len(times) > first + 1:
            n, seconds = len(times) - 1 - first, times[-1] - times[first]
            stats["decode_tokens"], stats["decode_s"] = n, seconds
            extra = "" if args.warmup else f"; the first step, which compiled, took {times[1] - times[0]:.3f} s"
            print(f"decode: {n} tokens in {seconds:.3f} s, {n / seconds:.1f} tokens/s{extra}")
    return stats


if __name__ == "__main__":
    main()

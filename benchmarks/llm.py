"""Language-model generation speed: a Llama-3.2-1B-shaped model with random weights, decoded and
prefilled by corvid (bfloat16, int8, int4) and by ``transformers`` + PyTorch (bfloat16, eager) on
the same CPU (issue 29 part 6).

The model has Llama 3.2 1B's shape (hidden 2048, 16 layers, 32 heads, 8 key/value heads of 64,
MLP 8192, vocabulary 128256, tied embeddings, rope_theta 500000 with "llama3" scaling): 1.24
billion parameters, 2.47 GB in bfloat16. Its weights are drawn here (normal, std 0.02; norms 1)
and written as a bfloat16 checkpoint folder, one safetensors shard per layer (so that no more
than a layer is in memory while it is written), which both frameworks load with their own
``from_pretrained``; corvid's int8 and int4 runs quantize each linear layer and the token
embedding (which the tied head reads) as they are read (``models.from_pretrained(folder,
quantize=mode, embeddings=True)``, the model ``cv.quantize(..., embeddings=True)`` would make of
the bfloat16 one), so the bfloat16 model is never held whole.

Two kinds of child process (``python -m benchmarks.llm --child ...``):

* one per framework and mode, alone, for its memory and its first calls: it loads the model,
  runs the 512-token prefill once and two decode steps, and reports its peak resident memory
  (``VmHWM``, against the model's weight bytes), the load time and the first calls (tracing and
  compiling included, for corvid: these children run first, in the harness's kernel cache).
  corvid's peak is its prefill's: generation gives the blocks of the prefill's sizes back to the
  system before decoding (``corvid/models/generation.py``), so the decode steps' memory does not
  come on top of them;
* one that loads every model and times them in turns, so that each ratio compares figures taken
  under the same load (the machine is shared: its bandwidth and free cores drift within
  seconds). Prefill: a 512-token prompt up to the first new token, each model in turn, 3 turns
  (median). Decode: each model generates greedily from a 16-token prompt, 4 rounds of 1 + 8
  tokens each in turn (the first token of a round is not timed: it absorbs the switch from the
  other framework, whose threads may still hold the cores); the median round.

corvid generates with :meth:`CausalLM.stream` (its jitted prefill and decode step); PyTorch with
``model(ids, cache=...)`` one token at a time under ``inference_mode`` (no ``generate``
overhead), logits of the last position only, as ``generate`` computes them.

The targets: decode at least 1.5x PyTorch's and at least 60% of the memory-bandwidth bound (the
weight bytes each token reads, over this machine's measured read bandwidth,
:mod:`corvid.runtime.peak`); int4 decode at least 2.5x bfloat16 decode; prefill at least
PyTorch's; corvid's peak memory at most 1.2x the model's weight bytes. The load average before
and after is printed: figures taken on a busy machine are low for every framework.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

LLAMA_1B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
    "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
    "vocab_size": 128256, "tie_word_embeddings": True, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "max_position_embeddings": 131072, "rope_theta": 500000.0, "attention_bias": False, "mlp_bias": False,
    "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192},
    "bos_token_id": 128000, "eos_token_id": 128001, "initializer_range": 0.02, "torch_dtype": "bfloat16",
}
QUICK = dict(LLAMA_1B, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, vocab_size=512, bos_token_id=1, eos_token_id=2)

PROMPT, DECODE_PROMPT, PREFILL_TURNS, DECODE_ROUNDS, DECODE_CHUNK = 512, 16, 3, 4, 8
QUICK_SIZES = (32, 8, 1, 2, 2)
MODES = ("bf16", "int8", "int4")

# targets (issue 29 part 6)
DECODE_VS_TORCH, DECODE_VS_BOUND, INT4_VS_BF16, PREFILL_VS_TORCH, PEAK_VS_WEIGHTS = 1.5, 0.6, 2.5, 1.0, 1.2


def write_checkpoint(folder: str, config: dict[str, Any], seed: int = 0) -> int:
    """A random bfloat16 checkpoint of ``config`` (a Llama ``config.json`` dict) in ``folder``:
    ``config.json``, one safetensors shard per layer plus one for the embeddings and the final
    norm, and the shards' index. Returns the weight bytes."""
    import ml_dtypes

    import corvid as cv

    rng = np.random.default_rng(seed)
    h, f, d = config["hidden_size"], config["intermediate_size"], config["head_dim"]
    q, kv = config["num_attention_heads"] * d, config["num_key_value_heads"] * d
    layer = {"input_layernorm": (h,), "post_attention_layernorm": (h,), "self_attn.q_proj": (q, h),
             "self_attn.k_proj": (kv, h), "self_attn.v_proj": (kv, h), "self_attn.o_proj": (h, q),
             "mlp.gate_proj": (f, h), "mlp.up_proj": (f, h), "mlp.down_proj": (h, f)}
    shards = {"model-embed.safetensors": {"model.embed_tokens": (config["vocab_size"], h), "model.norm": (h,)}}
    for i in range(config["num_hidden_layers"]):
        shards[f"model-layer{i:03d}.safetensors"] = {f"model.layers.{i}.{name}": s for name, s in layer.items()}
    weight_map, total = {}, 0
    for file, shapes in shards.items():
        arrays = {name + ".weight": np.ones(s, ml_dtypes.bfloat16) if len(s) == 1 else
                  (rng.standard_normal(s, dtype=np.float32) * config["initializer_range"]).astype(ml_dtypes.bfloat16)
                  for name, s in shapes.items()}  # (norms 1, matrices normal)
        total += sum(a.nbytes for a in arrays.values())
        cv.save(os.path.join(folder, file), arrays)
        weight_map.update(dict.fromkeys(arrays, file))
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fh)
    with open(os.path.join(folder, "config.json"), "w") as fh:
        json.dump(config, fh)
    return total


def _peak_rss() -> int:
    """This process's peak resident memory in bytes (``VmHWM``)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _prompt(n: int, vocab: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(3, vocab, n).tolist()


def _sizes(quick: bool) -> tuple[int, int, int, int, int]:
    return QUICK_SIZES if quick else (PROMPT, DECODE_PROMPT, PREFILL_TURNS, DECODE_ROUNDS, DECODE_CHUNK)


GREEDY = {"temperature": 0, "stop_tokens": ()}


def _corvid_model(folder: str, mode: str) -> Any:
    import corvid as cv
    from corvid import models

    # (quantized while loading: one layer's bfloat16 weight held at a time; the token embedding
    # too, so the tied head reads it quantized, as llama.cpp's Q8_0 and Q4_0 files hold it)
    quantized = mode != "bf16"
    model = models.from_pretrained(folder, quantize=mode if quantized else None, embeddings=quantized)
    cv.realize(*model.parameters(), *model.buffers())
    return model


def _corvid_bytes(model: Any) -> int:
    seen = {id(t.node): t for t in [*model.parameters(), *model.buffers()]}  # (the tied head once)
    return sum(t.size * t.dtype.itemsize for t in seen.values())


class _Torch:
    """A transformers model generating greedily one token at a time: ``prefill(ids)`` then ``step()``."""

    def __init__(self, folder: str):
        import torch
        import transformers

        self.torch = torch
        self.model = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.bfloat16,
                                                                   attn_implementation="eager").eval()
        self.token = self.cache = None

    def prefill(self, ids: list[int]) -> int:
        with self.torch.inference_mode():
            out = self.model(self.torch.tensor([ids]), use_cache=True, logits_to_keep=1)
            self.token, self.cache = out.logits[:, -1:].argmax(-1), out.cache  # (a DynamicCache, updated in place)
        return int(self.token.item())

    def step(self) -> int:
        with self.torch.inference_mode():
            self.token = self.model(self.token, cache=self.cache, use_cache=True).logits[:, -1:].argmax(-1)
        return int(self.token.item())


def _memory_child(framework: str, folder: str, mode: str, quick: bool) -> dict[str, Any]:
    """One framework and mode alone: load time, weight bytes, the first prefill and decode step, peak memory."""
    prompt, short = _sizes(quick)[:2]
    t0 = time.perf_counter()
    if framework == "corvid":
        model = _corvid_model(folder, mode)
        load_s, weight_bytes, vocab = time.perf_counter() - t0, _corvid_bytes(model), model.config.vocab_size
        t0 = time.perf_counter()
        next(iter(model.stream(_prompt(prompt, vocab, 1), max_new_tokens=1, **GREEDY)))
        prefill_first = time.perf_counter() - t0
        stamps = [time.perf_counter()]
        for _ in model.stream(_prompt(short, vocab, 2), max_new_tokens=2, **GREEDY):
            stamps.append(time.perf_counter())
    else:
        run = _Torch(folder)
        load_s, vocab = time.perf_counter() - t0, run.model.config.vocab_size
        weight_bytes = sum(p.numel() * p.element_size() for p in run.model.parameters())
        t0 = time.perf_counter()
        run.prefill(_prompt(prompt, vocab, 1))
        prefill_first = time.perf_counter() - t0
        stamps = [time.perf_counter()]
        run.prefill(_prompt(short, vocab, 2))
        stamps.append(time.perf_counter())
        run.step()
        stamps.append(time.perf_counter())
    return {"load_s": load_s, "weight_bytes": weight_bytes, "prefill_first_s": prefill_first,
            "decode_first_s": stamps[2] - stamps[1], "peak_bytes": _peak_rss()}


def _speed_child(folder: str, quick: bool, peers: list[str]) -> dict[str, Any]:
    """Every model loaded in one process and timed in turns: {name: {"prefill_s", "decode_s"}}."""
    import corvid as cv

    prompt, short, turns, rounds, chunk = _sizes(quick)
    runs: dict[str, Any] = {}
    for mode in MODES:
        runs[f"corvid {mode}"] = _corvid_model(folder, mode)
        cv.empty_cache()  # (the bfloat16 weights a quantization read, layer by layer)
    if "torch" in peers:
        runs["torch bf16"] = _Torch(folder)
    vocab = QUICK["vocab_size"] if quick else LLAMA_1B["vocab_size"]
    long_ids, short_ids = _prompt(prompt, vocab, 1), _prompt(short, vocab, 2)

    def prefill(name: str) -> None:
        r = runs[name]
        if isinstance(r, _Torch):
            r.prefill(long_ids)
        else:
            next(iter(r.stream(long_ids, max_new_tokens=1, **GREEDY)))

    for name in runs:  # (warm-up: the compiled programs, the pooled buffers)
        prefill(name)
    prefill_s: dict[str, list[float]] = {name: [] for name in runs}
    for turn in range(turns):
        names = list(runs)
        for name in names[turn % len(names):] + names[:turn % len(names)]:
            t0 = time.perf_counter()
            prefill(name)
            prefill_s[name].append(time.perf_counter() - t0)

    steps: dict[str, Any] = {}
    for name, r in runs.items():
        if isinstance(r, _Torch):
            r.prefill(short_ids)
            steps[name] = r.step
        else:
            it = r.stream(short_ids, max_new_tokens=2 + rounds * (1 + chunk), **GREEDY)
            steps[name] = lambda it=it: next(it)
        steps[name]()  # (the prefill's token)
        steps[name]()  # (the first step: warm-up)
    decode_s: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, step in steps.items():
            step()  # (untimed: the switch from the other models)
            t0 = time.perf_counter()
            for _ in range(chunk):
                step()
            decode_s[name].append((time.perf_counter() - t0) / chunk)
    return {name: {"prefill_s": statistics.median(prefill_s[name]), "decode_s": statistics.median(decode_s[name]),
                   "prefill_runs_s": prefill_s[name], "decode_rounds_s": decode_s[name]} for name in runs}


def _run_child(args: list[str], timeout: float) -> dict[str, Any]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.llm", "--child", *args], check=False, capture_output=True,
                          text=True, timeout=timeout, cwd=root, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"the llm child {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@dataclass
class LLMResult:
    quick: bool
    checkpoint_bytes: int
    gbps: float  # measured memory read bandwidth (corvid/runtime/peak.py)
    load: tuple[float, float] = (0.0, 0.0)  # the load average (1 minute) before and after
    alone: dict[str, dict[str, Any]] = field(default_factory=dict)  # "corvid bf16", ...: memory, first calls
    speed: dict[str, dict[str, Any]] = field(default_factory=dict)  # the same names: timed in turns
    failures: dict[str, str] = field(default_factory=dict)


def measure(quick: bool = False) -> LLMResult:
    """Write the checkpoint into a temporary folder, run each framework and mode alone (memory,
    first calls), then all of them in one process, in turns (speed)."""
    from corvid.runtime.peak import cpu_peak

    gbps = cpu_peak().gbps
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        peers = ["torch"]
    except ImportError:
        peers = []
    timeout = 300 if quick else 1800
    flag = ["--quick"] if quick else []
    with tempfile.TemporaryDirectory(prefix="corvid-llm-") as folder:
        result = LLMResult(quick, write_checkpoint(folder, QUICK if quick else LLAMA_1B), gbps)
        before = os.getloadavg()[0]
        for name, args in [*((f"corvid {m}", ["memory", "corvid", folder, m]) for m in MODES),
                           *((f"{p} bf16", ["memory", p, folder, "bf16"]) for p in peers)]:
            try:
                result.alone[name] = _run_child(args + flag, timeout)
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                result.failures[name] = str(e)
        try:
            result.speed = _run_child(["speed", folder, ",".join(peers) or "-"] + flag, timeout)
        except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
            result.failures["speed (in turns)"] = str(e)
        result.load = (before, os.getloadavg()[0])
    return result


def _verdict(got: float | None, want: float, judged: bool) -> str:
    if got is None:
        return "-"
    return ("met" if got >= want else "MISSED") if judged else "(quick sizes: not judged)"


def report(result: LLMResult, out: TextIO) -> None:
    size = "quick sizes (tiny model)" if result.quick else "Llama-3.2-1B shape, random weights"
    prompt, short, turns, rounds, chunk = _sizes(result.quick)
    print(f"llm_decode ({size}, {result.checkpoint_bytes / 1e9:.2f} GB bfloat16 checkpoint; prefill: a {prompt}-token "
          f"prompt, median of {turns} turns; decode: greedy from a {short}-token prompt, median of {rounds} rounds of "
          f"{chunk} tokens, every model in turns; memory bandwidth {result.gbps:g} GB/s read, corvid/runtime/peak.py; "
          f"load average {result.load[0]:.1f} before, {result.load[1]:.1f} after)", file=out)
    torch = result.speed.get("torch bf16")
    header = ["run", "weights GB", "decode tok/s", "bound tok/s", "% of bound", "vs torch", "prefill tok/s",
              "vs torch", "peak mem GB", "/ weights", "load s", "first prefill s", "first step s"]
    lines, verdicts = [], []
    for name in dict.fromkeys([*result.alone, *result.speed]):
        a, r = result.alone.get(name), result.speed.get(name)
        weight_bytes = a["weight_bytes"] if a else None
        decode = 1 / r["decode_s"] if r else None
        prefill = prompt / r["prefill_s"] if r else None
        bound = result.gbps * 1e9 / weight_bytes if weight_bytes else None
        vs = (torch["decode_s"] * decode, torch["prefill_s"] * prefill / prompt) if torch and r and r is not torch \
            else (None, None)
        mem = a["peak_bytes"] / weight_bytes if a else None

        def f(v: float | None, spec: str) -> str:
            return "-" if v is None else format(v, spec)

        lines.append([name, f(weight_bytes and weight_bytes / 1e9, ".2f"), f(decode, ".2f"), f(bound, ".1f"),
                      f(decode and bound and decode / bound, ".0%"), f(vs[0], ".2f") + ("x" if vs[0] else ""),
                      f(prefill, ".1f"), f(vs[1], ".2f") + ("x" if vs[1] else ""),
                      f(a and a["peak_bytes"] / 1e9, ".2f"), f(mem, ".2f") + ("x" if mem else ""),
                      f(a and a["load_s"], ".1f"), f(a and a["prefill_first_s"], ".1f"),
                      f(a and a["decode_first_s"], ".2f")])
        if name.startswith("corvid"):
            verdicts += [(f"{name} decode >= {DECODE_VS_TORCH}x torch", vs[0], DECODE_VS_TORCH, "x"),
                         (f"{name} decode >= {DECODE_VS_BOUND:.0%} of the bandwidth bound",
                          decode and bound and decode / bound, DECODE_VS_BOUND, "%"),
                         (f"{name} prefill >= {PREFILL_VS_TORCH}x torch", vs[1], PREFILL_VS_TORCH, "x"),
                         (f"{name} peak memory <= {PEAK_VS_WEIGHTS}x its weights", mem and -mem, -PEAK_VS_WEIGHTS, "-x")]
    bf16, int4 = result.speed.get("corvid bf16"), result.speed.get("corvid int4")
    if bf16 and int4:
        verdicts.append((f"corvid int4 decode >= {INT4_VS_BF16}x corvid bf16", bf16["decode_s"] / int4["decode_s"],
                         INT4_VS_BF16, "x"))
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)]
    fmt = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    print("\n".join([fmt(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(fmt, lines)]), file=out)
    print("weights: the model's tensors (the tied embedding once). bound: measured bandwidth / weight bytes (each "
          "token reads every weight once; the embedding as the head). vs torch: torch's time / corvid's, timed in "
          "turns. peak mem: VmHWM of a process running that model alone. first prefill / first step: its first calls "
          "(corvid: tracing and compiling, in the harness's kernel cache).", file=out)
    for what, got, want, unit in verdicts:
        figure = "" if got is None else f" (measured {-got:.2f}x)" if unit == "-x" else \
            f" (measured {got:.0%})" if unit == "%" else f" (measured {got:.2f}x)"
        print(f"  {what}: {_verdict(got, want, not result.quick)}{figure}", file=out)
    for name, why in result.failures.items():
        print(f"FAIL llm_decode {name}: {why}", file=out)


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    args = [a for a in argv if a != "--quick"]
    if args[:2] == ["--child", "memory"]:
        framework, folder, mode = args[2:5]
        print(json.dumps(_memory_child(framework, folder, mode, quick)))
        return 0
    if args[:2] == ["--child", "speed"]:
        folder, peers = args[2:4]
        print(json.dumps(_speed_child(folder, quick, [p for p in peers.split(",") if p != "-"])))
        return 0
    result = measure(quick)
    report(result, sys.stdout)
    return 1 if result.failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

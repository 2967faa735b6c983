"""Generation with corvid.models: the key/value cache, ``CausalLM.generate`` / ``stream``, sampling
and examples/llm.py.

Greedy generation is checked token for token against ``transformers``' ``generate(do_sample=False)``
on tiny random checkpoints (Llama, Mistral with a sliding window shorter than the generation,
Gemma 2 with soft-capping and local layers, Phi-3 with longrope crossing its original context),
with prompts of different lengths in one batch; cached decoding against recomputing the whole
sequence; sampling against ``transformers``' logits warpers. The decode step must be traced once
and replayed for every token. Every model here is tiny (hidden 32, 2 layers) so that the suite
runs in well under a minute on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import corvid as cv
from corvid import models
from corvid.models import generation

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "llm.py")

SIZES = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
             eos_token_id=2)
# family -> (transformers config class, model class, options beyond SIZES)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(rope_theta=500000.0)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=4)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(sliding_window=4, attn_logit_softcapping=4.0, final_logit_softcapping=3.0,
                    query_pre_attn_scalar=16)),
    "phi3-longrope": ("Phi3Config", "Phi3ForCausalLM",
                      dict(original_max_position_embeddings=8, max_position_embeddings=32,
                           rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.5, 2.0, 3.0],
                                         "long_factor": [1.0, 4.0, 9.0, 20.0]})),
}
PROMPTS = [[5, 17, 33, 9, 71, 40], [12, 88, 3]]  # different lengths: left-padded in one batch
NEW = 12


def _hf_model(family: str):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    transformers.logging.set_verbosity_error()
    config_cls, model_cls, extra = FAMILIES[family]
    config = getattr(transformers, config_cls)(**{**SIZES, **extra})
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():  # weights larger than transformers' initialization: logits far apart, attention peaked
        for name, p in model.named_parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.25)
            elif "norm" in name:
                p.normal_(0.0 if family.startswith("gemma") else 1.0, 0.3)
            else:
                p.normal_(0.0, 0.1)
    return model


def _hf_generate(hf, prompts: list[list[int]], n: int) -> np.ndarray:
    """transformers' greedy generation of left-padded prompts: the new tokens (batch, <= n)."""
    import torch

    width = max(map(len, prompts))
    ids = np.zeros((len(prompts), width), np.int64)
    mask = np.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = p, 1
    with torch.no_grad():
        out = hf.generate(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), max_new_tokens=n,
                          do_sample=False)
    return out[:, width:].numpy()


def _model(model_type: str = "gemma2", seed: int = 0, **options) -> models.CausalLM:
    """A tiny random CausalLM of corvid's own, with weights large enough for peaked logits."""
    config = {"model_type": model_type, **SIZES, "initializer_range": 0.25, **options}
    if model_type == "gemma2":
        config.update(sliding_window=4, attn_logit_softcapping=4.0, final_logit_softcapping=3.0,
                      query_pre_attn_scalar=16)
    cv.manual_seed(seed)
    return models.CausalLM(config).eval()


# --- against transformers -------------------------------------------------------------------------------


@pytest.mark.parametrize("family", list(FAMILIES))
def test_greedy_generation_matches_transformers(family, tmp_path):
    hf = _hf_model(family)
    hf.save_pretrained(str(tmp_path))
    model = models.from_pretrained(tmp_path)
    expected = _hf_generate(hf, PROMPTS, NEW)
    out = model.generate(PROMPTS, max_new_tokens=NEW, temperature=0)
    assert out.dtype == cv.int64
    np.testing.assert_array_equal(out.numpy(), expected)
    # each prompt alone gives its row (the padding of the batch changes nothing)
    for i, p in enumerate(PROMPTS):
        alone = model.generate(p, max_new_tokens=NEW, temperature=0).numpy()[0]
        np.testing.assert_array_equal(alone, expected[i, :alone.size])
        assert set(expected[i, alone.size:]) <= {0}  # (what is left of the batch's row is padding)
    programs = generation._programs(model)
    assert programs.step.traces == 2  # one decode step per batch size (2, then 1)
    if family == "phi3-longrope":  # the sequences crossed the original context: the cache was recomputed
        assert max(map(len, PROMPTS)) + NEW > 8 and programs.prefill.traces > 2
    else:
        assert programs.prefill.traces == 2


def test_long_prompts_match_transformers(tmp_path):
    # 2 x 64 prompt slots: the prefill reads the weights in their plain form (see generation._weights)
    hf = _hf_model("mistral")
    hf.save_pretrained(str(tmp_path))
    model = models.from_pretrained(tmp_path)
    prompts = [list(np.random.default_rng(1).integers(3, 96, size=40)), [7, 11, 13]]
    assert 2 * generation._bucket(40) >= generation._PLAIN_ROWS
    np.testing.assert_array_equal(model.generate(prompts, max_new_tokens=6, temperature=0).numpy(),
                                  _hf_generate(hf, prompts, 6))


def test_sampling_warpers_match_transformers():
    torch = pytest.importorskip("torch")
    lp = pytest.importorskip("transformers.generation.logits_process")
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 2.0, size=(6, 50)).astype(np.float32)
    ties = np.round(logits * 2) / 2  # (top-k keeps every token tied with the k-th)
    for temperature, top_k, top_p, x in [(0.7, None, None, logits), (1.0, 5, None, logits), (1.0, 10, None, ties),
                                         (1.3, None, 0.8, logits), (0.5, 20, 0.6, logits), (1.0, None, 0.3, logits),
                                         (2.0, 40, 0.95, logits * 10), (1.0, 3, None, -np.abs(logits))]:
        ref = torch.from_numpy(x)
        ref = lp.TemperatureLogitsWarper(temperature)(None, ref)
        if top_k is not None:
            ref = lp.TopKLogitsWarper(top_k)(None, ref)
        if top_p is not None:
            ref = lp.TopPLogitsWarper(top_p)(None, ref)
        out = generation._filter(cv.Tensor(x), temperature, top_k, top_p).numpy()
        ref = ref.numpy()
        np.testing.assert_array_equal(np.isinf(out), np.isinf(ref.astype(np.float32)))
        np.testing.assert_allclose(out[~np.isinf(out)], ref[~np.isinf(ref)], rtol=1e-6)


# --- the cache ---------------------------------------------------------------------------------------------


def test_cached_decoding_equals_recomputing_the_sequence():
    model = _model("gemma2")  # soft-capping, a sliding window of 4 and full layers
    prompt, n = [5, 17, 33, 9, 71], 7
    cache = models.KVCache(model.config, batch_size=1, max_length=16)
    steps = [model(cv.Tensor([prompt]), cache=cache).numpy()[0]]
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(steps[-1][-1].argmax()))
        steps.append(model(cv.Tensor([ids[-1:]]), cache=cache).numpy()[0])
    assert cache.length.item() == len(ids)
    # the whole sequence at once: position t's logits see tokens 0..t only, as the cached step did
    full = model(cv.Tensor([ids])).numpy()[0]
    np.testing.assert_allclose(np.concatenate(steps), full, atol=1e-5)
    assert model.generate(prompt, max_new_tokens=n, temperature=0, stop_tokens=()).tolist()[0] == ids[len(prompt):]


def test_left_padded_cache_and_errors():
    model = _model("mistral", sliding_window=3)
    prompts = [[7, 8, 9, 10], [20, 21]]
    cache = models.KVCache(model.config, batch_size=2, max_length=8, padding=[0, 2])
    ids = np.array([[7, 8, 9, 10], [0, 0, 20, 21]])  # the second sequence starts at slot 2
    logits = model(cv.Tensor(ids), cache=cache).numpy()
    for i, p in enumerate(prompts):
        np.testing.assert_allclose(logits[i, -1], model(cv.Tensor([p])).numpy()[0, -1], atol=1e-5)
    with pytest.raises(TypeError, match="bfloat16"):
        model(cv.Tensor(ids), cache=models.KVCache(model.config, 2, 8, dtype=cv.bfloat16))
    with pytest.raises(cv.errors.ShapeError, match="do not fit"):
        model(cv.Tensor(ids), cache=models.KVCache(model.config, 3, 8))
    with pytest.raises(ValueError, match="padding"):
        models.KVCache(model.config, 2, 8, padding=[0, 8])
    with pytest.raises(ValueError, match="max_length"):
        models.KVCache(model.config, 2, 0)


def test_attend_with_an_explicit_mask_equals_the_causal_one():
    from corvid.nn.decoder import causal_mask

    cv.manual_seed(0)
    q, k, v = cv.randn(2, 4, 3, 8), cv.randn(2, 2, 5, 8), cv.randn(2, 2, 5, 8)
    # a mask per sequence (the second one's first key is padding), for grouped query heads
    keep = causal_mask(3, 5, 3).reshape(1, 1, 3, 5) & cv.Tensor([[True] * 5, [False] + [True] * 4]).reshape(2, 1, 1, 5)
    qn, kn, vn, mn = (np.asarray(t.numpy(), np.float64) for t in (q, k, v, keep))
    kn, vn = np.repeat(kn, 2, axis=1), np.repeat(vn, 2, axis=1)  # query heads 0, 1 read key head 0
    for softcap in (None, 2.0):
        attn = cv.nn.CausalSelfAttention(32, 4, 2, sliding_window=3, softcap=softcap)
        np.testing.assert_allclose(attn.attend(q, k, v, mask=causal_mask(3, 5, 3)).numpy(),
                                   attn.attend(q, k, v).numpy(), atol=1e-6)
        scores = qn @ kn.swapaxes(-1, -2) * attn.scale
        scores = scores if softcap is None else softcap * np.tanh(scores / softcap)
        w = np.exp(np.where(mn, scores, -np.inf) - scores.max(-1, keepdims=True))
        ref = (w / w.sum(-1, keepdims=True)) @ vn
        np.testing.assert_allclose(attn.attend(q, k, v, mask=keep).numpy(), ref, atol=1e-5)


# --- generate ----------------------------------------------------------------------------------------------


def test_decode_step_is_traced_once_and_replayed():
    model = _model("llama")
    programs = generation._programs(model)
    out = model.generate([3, 4, 5], max_new_tokens=20, temperature=0, stop_tokens=())
    assert out.shape == (1, 20) and programs.step.traces == 1 and programs.prefill.traces == 1
    # another prompt length of the same bucket, another generation: nothing is traced again
    model.generate([9, 8, 7, 6, 5], max_new_tokens=20, temperature=0, stop_tokens=())
    assert programs.step.traces == 1 and programs.prefill.traces == 1
    # sampling is another program, whatever the temperature, top-p and key
    for temperature, top_p, seed in [(0.8, 0.9, 0), (1.5, 0.5, 1)]:
        model.generate([3, 4, 5], max_new_tokens=20, temperature=temperature, top_p=top_p,
                       key=cv.random.key(seed), stop_tokens=())
    assert programs.step.traces == 2 and programs.prefill.traces == 2
    # the weights are arguments of the programs, not frozen in them: new weights, no new trace
    other = _model("llama", seed=1)
    model.load_state_dict(other.state_dict())
    assert model.generate([3, 4, 5], max_new_tokens=20, temperature=0, stop_tokens=()).tolist() == \
        other.generate([3, 4, 5], max_new_tokens=20, temperature=0, stop_tokens=()).tolist() != out.tolist()
    assert programs.step.traces == 2


def test_new_cache_sizes_and_batches_replay_the_same_programs():
    """The cache's slots and the batch are symbolic sizes of the programs: another
    max_new_tokens (another cache size) or another number of prompts traces nothing, and the
    tokens are those of a model run without a cache."""
    model = _model("llama")
    programs = generation._programs(model)
    prompts = [[3, 4, 5], [9, 8, 7, 6, 5], [1, 2]]
    first = model.generate(prompts[:2], max_new_tokens=10, temperature=0, stop_tokens=())
    traces = programs.step.traces, programs.prefill.traces
    for batch, new in [(2, 70), (3, 10), (3, 130), (2, 10)]:  # caches of 64, 128 and 192 slots
        out = model.generate(prompts[:batch], max_new_tokens=new, temperature=0, stop_tokens=())
        assert out.shape == (batch, new)
        if (batch, new) == (2, 10):
            assert out.tolist() == first.tolist()
    assert (programs.step.traces, programs.prefill.traces) == traces
    for i, p in enumerate(prompts[:2]):  # each sequence of the last batch as greedy decoding without a cache
        ids = cv.Tensor([p])
        for _ in range(10):
            ids = cv.cat([ids, model(ids)[:, -1:].argmax(-1)], axis=1)
        assert out.tolist()[i] == ids[0, len(p):].tolist()


def test_quantized_model_generates_with_its_buffers_as_arguments():
    model, other = _model("llama"), _model("llama", seed=1)
    for m in (model, other):
        cv.quantize(m, "int8", group_size=32)  # (the weights become int8 buffers and float scales)
    ids = cv.Tensor([[3, 4, 5]])
    for _ in range(6):  # without a cache
        ids = cv.cat([ids, model(ids)[:, -1:].argmax(-1)], axis=1)
    assert model.generate([3, 4, 5], max_new_tokens=6, temperature=0, stop_tokens=()).tolist() == ids[:, 3:].tolist()
    model.load_state_dict(other.state_dict())  # new buffers: read by the same program
    assert model.generate([3, 4, 5], max_new_tokens=6, temperature=0, stop_tokens=()).tolist() == \
        other.generate([3, 4, 5], max_new_tokens=6, temperature=0, stop_tokens=()).tolist()
    assert generation._programs(model).step.traces == 1


def test_sampling_is_reproducible_with_a_key():
    model = _model("llama")
    kw = dict(max_new_tokens=10, stop_tokens=(), temperature=1.0)
    a = model.generate(PROMPTS, key=cv.random.key(1), **kw).tolist()
    assert a == model.generate(PROMPTS, key=cv.random.key(1), **kw).tolist()
    assert a != model.generate(PROMPTS, key=cv.random.key(2), **kw).tolist()
    cv.manual_seed(3)  # without a key: drawn from the global generator
    b = model.generate(PROMPTS, **kw).tolist()
    cv.manual_seed(3)
    assert b == model.generate(PROMPTS, **kw).tolist()
    greedy = model.generate(PROMPTS, max_new_tokens=10, temperature=0, stop_tokens=()).tolist()
    assert model.generate(PROMPTS, key=cv.random.key(4), top_k=1, **kw).tolist() == greedy
    assert model.generate(PROMPTS, max_new_tokens=10, temperature=1e-3, key=cv.random.key(5),
                          stop_tokens=()).tolist() == greedy


def test_top_p_draws_from_the_nucleus_only():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    logits = cv.Tensor(np.tile(np.log(probs), (4000, 1)).astype(np.float32))  # 4000 draws, one per row
    key = cv.random.key(0)
    for top_p, nucleus in [(0.7, [0, 1]), (0.85, [0, 1, 2]), (0.4, [0]), (1.0, [0, 1, 2, 3])]:
        drawn = models.sample(logits, key, top_p=top_p).numpy()
        assert sorted(set(drawn.tolist())) == nucleus
        freq = np.bincount(drawn, minlength=4)[nucleus] / drawn.size
        np.testing.assert_allclose(freq, probs[nucleus] / probs[nucleus].sum(), atol=0.03)
    top2 = models.sample(logits, key, top_k=2).numpy()
    assert sorted(set(top2.tolist())) == [0, 1]
    assert models.sample(logits[:3], temperature=0).tolist() == [0, 0, 0]


def test_stop_tokens_end_each_sequence():
    model = _model("llama")
    free = model.generate(PROMPTS, max_new_tokens=10, temperature=0, stop_tokens=()).numpy()
    # stop the first sequence at its 3rd token, the second at its 6th (tokens that did not come earlier)
    i0 = next(i for i in range(2, 10) if free[0, i] not in free[0, :i])
    i1 = next(i for i in range(5, 10) if free[1, i] not in free[1, :i] and free[1, i] not in free[0, :i0 + 1])
    stops = [int(free[0, i0]), int(free[1, i1])]
    if stops[0] in free[1, :i1 + 1]:
        pytest.skip("the random continuations share the stop token")
    out = model.generate(PROMPTS, max_new_tokens=10, temperature=0, stop_tokens=stops, pad_token_id=95).numpy()
    assert out.shape == (2, i1 + 1)  # ends when both have stopped
    np.testing.assert_array_equal(out[0, :i0 + 1], free[0, :i0 + 1])
    assert (out[0, i0 + 1:] == 95).all()
    np.testing.assert_array_equal(out[1], free[1, :i1 + 1])
    # the config's eos_token_id is the default stop token, its pad_token_id the padding
    eos = int(free[0, i0])
    m2 = _model("llama", eos_token_id=eos, pad_token_id=7)
    out2 = m2.generate(PROMPTS, max_new_tokens=10, temperature=0).numpy()
    assert out2[0, i0] == eos and (out2[0, i0 + 1:] == 7).all()


def test_stream_yields_the_tokens_of_generate():
    model = _model("gemma2")
    kw = dict(max_new_tokens=8, temperature=0.9, top_k=20, key=cv.random.key(7), stop_tokens=())
    out = model.generate(PROMPTS, **kw).numpy()
    steps = list(model.stream(PROMPTS, **kw))
    assert np.array_equal(np.array(steps).T, out)
    seen = []
    again = model.generate(PROMPTS, stream=seen.append, **kw).numpy()
    assert seen == steps and np.array_equal(again, out)
    it = model.stream(PROMPTS, **kw)
    assert next(it) == steps[0]  # computed as asked for


def test_inputs_as_padded_batch_with_attention_mask():
    model = _model("llama")
    expected = model.generate(PROMPTS, max_new_tokens=5, temperature=0, stop_tokens=()).numpy()
    left = np.array([[5, 17, 33, 9, 71, 40], [0, 0, 0, 12, 88, 3]])
    right = np.array([[5, 17, 33, 9, 71, 40], [12, 88, 3, 0, 0, 0]])
    for ids in (left, right):
        mask = (ids != 0).astype(np.int64)
        out = model.generate(cv.Tensor(ids), attention_mask=cv.Tensor(mask), max_new_tokens=5, temperature=0,
                             stop_tokens=())
        np.testing.assert_array_equal(out.numpy(), expected)
    assert model.generate(cv.Tensor(left[:1]), max_new_tokens=5, temperature=0, stop_tokens=()).tolist() == \
        expected[:1].tolist()
    assert model.generate(PROMPTS, max_new_tokens=0).shape == (2, 0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(max_new_tokens=2.5), "max_new_tokens"),
    (dict(temperature=-0.5), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(top_k=0), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(stop_tokens=[96]), "stop_tokens"),
    (dict(pad_token_id=-1), "pad_token_id"),
    (dict(input_ids=[[1, 2], []]), "non-empty"),
    (dict(input_ids=[[1, 200]]), r"\[0, 96\)"),
    (dict(input_ids=[[1, 2, 3]], attention_mask=[[1, 1]]), "attention_mask"),
    (dict(input_ids=[[1, 2, 3]], attention_mask=[[1, 0, 1]]), "one run"),
    (dict(input_ids=[[0.5, 2.0]]), "integers"),
])
def test_bad_arguments_raise_naming_them(kwargs, message):
    model = _model("llama")
    kwargs = {"input_ids": [1, 2, 3], **kwargs}
    with pytest.raises(ValueError, match=message):
        model.stream(**kwargs)  # (checked at the call, before any token is asked for)
    with pytest.raises(ValueError, match="key"):
        models.sample(cv.zeros(1, 4), temperature=1.0)


# --- examples/llm.py ------------------------------------------------------------------------------------------

TEXT = ("The quick brown fox jumps over the lazy dog. A small model reads the text, splits it into pieces and "
        "learns which pieces often follow each other. The dog sleeps in the sun while the fox runs over the hill, "
        "and the small model writes the next piece of text one token at a time.")


def _example(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, EXAMPLE, *args], check=False, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": REPO, **(env or {})})


def _folder(tmp_path) -> str:
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **SIZES, "initializer_range": 0.25}
    folder = str(tmp_path / "model")
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    cv.manual_seed(0)
    cv.save(os.path.join(folder, "model.safetensors"), models.CausalLM(config).state_dict())
    return folder


def test_example_generates_from_a_folder_with_a_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=SIZES["vocab_size"], special_tokens=["[UNK]", "<s>", "</s>"])
    tok.train_from_iterator([TEXT], trainer)
    assert tok.get_vocab_size() <= SIZES["vocab_size"]
    folder = _folder(tmp_path)  # (the model of the other tests: the same kernels)
    tok.save(os.path.join(folder, "tokenizer.json"))
    r = _example(["--model", folder, "--prompt", "The quick brown fox", "--max-new-tokens", "12",
                  "--temperature", "0.8", "--top-k", "40", "--top-p", "0.95", "--seed", "3"])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("The quick brown fox") and len(lines[0]) > len("The quick brown fox")
    assert any(line.startswith("prefill: ") and "tokens/s" in line for line in lines), r.stdout
    assert any(line.startswith("decode: ") and "tokens/s" in line for line in lines), r.stdout
    again = _example(["--model", folder, "--prompt", "The quick brown fox", "--max-new-tokens", "12",
                      "--temperature", "0.8", "--top-k", "40", "--top-p", "0.95", "--seed", "3"])
    assert again.stdout.splitlines()[0] == lines[0]  # a seed gives the same text


def test_example_with_token_ids_and_its_messages(tmp_path):
    folder = _folder(tmp_path)
    r = _example(["--model", folder, "--prompt-ids", "5,6,7", "--max-new-tokens", "6", "--temperature", "0"])
    assert r.returncode == 0, r.stderr
    model = models.from_pretrained(folder)
    expected = model.generate([5, 6, 7], max_new_tokens=6, temperature=0).tolist()[0]
    assert r.stdout.splitlines()[0].split() == [str(t) for t in expected]
    assert "tokens/s" in r.stdout
    # --prompt without tokenizer.json, or without the tokenizers package: messages naming the way out
    r = _example(["--model", folder, "--prompt", "hello"])
    assert r.returncode != 0 and "tokenizer.json" in r.stderr and "--prompt-ids" in r.stderr
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        f.write("{}")
    blocker = tmp_path / "blocker" / "tokenizers"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('no tokenizers here')\n")
    r = _example(["--model", folder, "--prompt", "hello"],
                 env={"PYTHONPATH": f"{blocker.parent}{os.pathsep}{REPO}"})
    assert r.returncode != 0 and "pip install tokenizers" in r.stderr
    r = _example(["--model", folder, "--prompt", "hello"])  # (a tokenizer.json the package cannot read)
    assert r.returncode != 0 and "cannot read" in r.stderr
    r = _example(["--model", folder, "--prompt-ids", "5,x"])
    assert r.returncode != 0 and "--prompt-ids" in r.stderr
    r = _example(["--model", folder, "--prompt-ids", "5", "--top-p", "2"])
    assert r.returncode != 0 and "top_p" in r.stderr


def test_generation_config_json_sets_the_stop_tokens(tmp_path):
    """A checkpoint's generation_config.json overrides config.json's token ids, as transformers
    does (Llama 3 Instruct stops at any of three ids only through it); the rest is kept as
    ``model.generation_config``; a malformed one is a clear error."""
    import json

    config = {"model_type": "llama", "vocab_size": 32, "hidden_size": 16, "intermediate_size": 32,
              "num_hidden_layers": 1, "num_attention_heads": 2, "tie_word_embeddings": True, "eos_token_id": 2}
    (tmp_path / "config.json").write_text(json.dumps(config))
    cv.save(str(tmp_path / "model.safetensors"), cv.models.CausalLM(config).state_dict())
    assert cv.models.from_pretrained(tmp_path).config.eos_token_id == 2
    model = cv.models.from_pretrained(tmp_path)
    greedy = model.generate([[5, 7]], max_new_tokens=6, temperature=0, stop_tokens=()).tolist()[0]
    stops = [greedy[1], 31]
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": stops, "temperature": 0.6}))
    model = cv.models.from_pretrained(tmp_path)
    assert model.config.eos_token_id == stops and model.generation_config["temperature"] == 0.6
    out = model.generate([[5, 7]], max_new_tokens=6, temperature=0).tolist()[0]
    first = next(i for i, t in enumerate(greedy) if t in stops)
    assert out == greedy[:first + 1]  # stopped at a stop id of generation_config.json (included)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": "two"}))
    with pytest.raises(ValueError, match="eos_token_id must be a token id or a list"):
        cv.models.from_pretrained(tmp_path)

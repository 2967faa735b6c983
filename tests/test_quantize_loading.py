"""Quantizing while loading: ``models.from_pretrained(folder, quantize="int8" | "int4")`` gives the
model ``cv.quantize(models.from_pretrained(folder), mode)`` gives (the same layers replaced, the
same buffers and parameters bit for bit, the same logits), while holding no more than one
floating-point weight at a time: its peak memory stays near the quantized model's size, where
quantizing after loading holds the whole float model (and its freed buffers in the allocator's
pool) on top of the quantized one. Tiny random Llama models written by transformers."""

import tracemalloc

import numpy as np
import pytest

import corvid as cv
from corvid import models
from corvid.quant import QuantizedEmbedding, QuantizedLinear
from corvid.runtime.device import get_device

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

TINY = {"vocab_size": 96, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 64,
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "rope_theta": 500000.0}
PROMPT = np.random.default_rng(0).integers(3, 96, size=(2, 9))


def _write(folder, seed: int = 0, dtype=None, **options) -> str:
    """A random Llama checkpoint (weights normal with std 0.25: far from round numbers) in ``folder``."""
    config = transformers.LlamaConfig(**{**TINY, **options})
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if "norm" in name else 0.0, 0.25 if p.ndim == 2 else 0.1)
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(str(folder))
    return str(folder)


def _same_models(got, want) -> None:
    """The same layer types everywhere and the same state, bit for bit (dtype, shape, values)."""
    assert [(n, type(m).__name__) for n, m in got.named_modules()] == \
        [(n, type(m).__name__) for n, m in want.named_modules()]
    mine, theirs = got.state_dict(), want.state_dict()
    assert list(mine) == list(theirs)
    for key, t in theirs.items():
        a, b = mine[key].numpy(), t.numpy()
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), key


@pytest.mark.parametrize("mode", ["int8", "int4"])
@pytest.mark.parametrize("case", ["bf16 tied", "float32 untied with biases"])
def test_quantized_while_loading_equals_quantize_after_loading(mode, case, tmp_path):
    if case == "bf16 tied":
        folder = _write(tmp_path, dtype=torch.bfloat16, tie_word_embeddings=True)
    else:  # (the head is a Linear, quantized too; the biases are loaded into the quantized layers)
        folder = _write(tmp_path, seed=1, tie_word_embeddings=False, attention_bias=True, mlp_bias=True)
    want = cv.quantize(models.from_pretrained(folder), mode)
    got = models.from_pretrained(folder, quantize=mode)
    _same_models(got, want)
    layers = [m for m in got.modules() if isinstance(m, QuantizedLinear)]
    assert len(layers) == 2 * 7 + (case != "bf16 tied")  # (q, k, v, o, gate, up, down; the untied head)
    assert all(m.mode == mode and m.group_size == 128 for m in layers)  # (the default)
    assert got.dtype == want.dtype == (cv.bfloat16 if case == "bf16 tied" else cv.float32)
    if case != "bf16 tied":
        q_proj = got.model.layers[0].self_attn.q_proj
        assert q_proj.bias is not None and np.abs(q_proj.bias.numpy()).max() > 0
    ids = cv.Tensor(PROMPT)
    assert np.array_equal(got(ids).numpy(), want(ids).numpy())


def test_group_size_and_dtype_are_passed_on(tmp_path):
    folder = _write(tmp_path, dtype=torch.bfloat16)
    for kwargs in ({"group_size": 32}, {"group_size": None}, {"group_size": 16, "dtype": "float32"}):
        dtype = kwargs.get("dtype")
        g = kwargs["group_size"]
        want = cv.quantize(models.from_pretrained(folder, dtype=dtype), "int4", group_size=g)
        got = models.from_pretrained(folder, quantize="int4", **kwargs)
        _same_models(got, want)
        down = got.model.layers[1].mlp.down_proj  # (in_features 256)
        assert down.group_size == (256 if g is None else g)
        assert down.dtype == got.dtype == (cv.float32 if dtype else cv.bfloat16)


def test_bad_mode_or_group_size_is_a_clear_value_error(tmp_path):
    folder = _write(tmp_path)
    for bad in ("int3", "INT8", "bf16", 8, True):
        with pytest.raises(ValueError, match=r"from_pretrained: quantize must be one of 'int8', 'int4' or None"):
            models.from_pretrained(folder, quantize=bad)
    with pytest.raises(ValueError, match=r"from_pretrained: group_size must be a positive int"):
        models.from_pretrained(folder, quantize="int8", group_size=0)
    with pytest.raises(ValueError, match=r"from_pretrained: group_size=48 does not divide the in_features of "
                                         r"model\.layers\.0\.self_attn\.q_proj \(128\)"):
        models.from_pretrained(folder, quantize="int8", group_size=48)
    assert type(models.from_pretrained(folder, quantize=None).lm_head).__name__ == "Linear"


def _peak_while(load) -> tuple[int, int]:
    """(the model's weight bytes, the peak of the memory numpy and Python allocated while ``load()``
    ran, from what was allocated when it began): tracemalloc sees the CPU device's buffers (numpy
    arrays). The allocator's pool is emptied first, so that loading cannot reuse blocks allocated
    before the count began."""
    get_device("CPU").allocator.clear_pool()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        model = load()
        cv.realize(*model.parameters(), *model.buffers())
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
        get_device("CPU").allocator.clear_pool()
    seen = {id(t.node): t for t in [*model.parameters(), *model.buffers()]}
    return sum(t.size * t.dtype.itemsize for t in seen.values()), peak


def test_peak_memory_while_loading_stays_near_the_quantized_size(tmp_path):
    """A 4-layer model of 130 MB in bfloat16 (hidden 1024, MLP 4096, an untied head): loading it
    with int8 weights (69 MB) peaks near the int8 size (measured 1.2x: the quantized model, one
    layer's float weights and the pool's blocks of those sizes), with int4 (38 MB) near that
    (1.4x), far below the bfloat16 size; quantizing after loading peaks above the bfloat16 size
    (measured 2.8x the int8 size: the float model, the quantized one, the pool)."""
    config = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 4, "num_attention_heads": 16,
              "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 2048, "max_position_embeddings": 128}
    folder = _write(tmp_path, dtype=torch.bfloat16, **config)
    bf16 = sum(f.stat().st_size for f in tmp_path.glob("*.safetensors"))
    assert bf16 > 120e6
    int8, peak8 = _peak_while(lambda: models.from_pretrained(folder, quantize="int8"))
    int4, peak4 = _peak_while(lambda: models.from_pretrained(folder, quantize="int4"))
    _, after8 = _peak_while(lambda: cv.quantize(models.from_pretrained(folder), "int8"))
    assert 0.5 * bf16 < int8 < 0.55 * bf16 and int4 < 0.3 * bf16
    figures = f"bf16 {bf16 / 1e6:.0f} MB; int8 {int8 / 1e6:.0f} MB, peak {peak8 / 1e6:.0f} MB; " \
        f"int4 {int4 / 1e6:.0f} MB, peak {peak4 / 1e6:.0f} MB; quantized after loading: peak {after8 / 1e6:.0f} MB"
    assert peak8 <= 1.35 * int8, figures
    assert peak4 <= 1.6 * int4, figures
    assert peak4 < 0.5 * bf16 and peak8 < 0.75 * bf16, figures
    assert after8 > bf16, figures  # (what the loading avoids: the float model and the quantized one)


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_quantized_embeddings_while_loading(mode, tmp_path):
    """embeddings=True: the token embedding is quantized as it is read, the same table
    cv.quantize(..., embeddings=True) makes; the tied head reads it (QuantizedEmbedding.attend);
    greedy generation (the jitted decode step, which lets the model look tokens up itself) gives
    the tokens of the full forward pass, and the logits stay near the float model's."""
    folder = _write(tmp_path, dtype=torch.bfloat16, tie_word_embeddings=True)
    want = cv.quantize(models.from_pretrained(folder), mode, group_size=32, embeddings=True)
    got = models.from_pretrained(folder, quantize=mode, group_size=32, embeddings=True)
    _same_models(got, want)
    assert isinstance(got.model.embed_tokens, QuantizedEmbedding) and got.lm_head is None
    assert got.dtype == cv.bfloat16 and "model.embed_tokens.qweight" in got.state_dict()
    ids = cv.Tensor(PROMPT)
    logits = got(ids).astype(cv.float32).numpy()
    np.testing.assert_array_equal(logits, want(ids).astype(cv.float32).numpy())
    # the same as the model whose float table is the quantized one's dequantized (bfloat16 rounding apart)
    ref_model = models.from_pretrained(folder, quantize=mode, group_size=32)
    with cv.no_grad():
        ref_model.model.embed_tokens.weight.assign(got.model.embed_tokens.dequantize())
    ref = ref_model(ids).astype(cv.float32).numpy()
    np.testing.assert_allclose(logits, ref, rtol=0, atol=0.03 * np.abs(ref).max())
    prompt = [int(t) for t in PROMPT[0]]
    new = got.generate(prompt, max_new_tokens=6, temperature=0).tolist()[0]
    seq = list(prompt)
    for _ in range(6):
        seq.append(int(got(cv.Tensor([seq])).astype(cv.float32).numpy()[0, -1].argmax()))
    assert new == seq[len(prompt):]
    with pytest.raises(ValueError, match="embeddings must be a bool, and True only with quantize="):
        models.from_pretrained(folder, embeddings=True)

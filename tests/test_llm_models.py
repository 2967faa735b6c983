"""corvid.models against transformers: tiny random checkpoints of each supported family, saved with
``save_pretrained`` and loaded with ``corvid.models.from_pretrained``, must give the same logits
(float32, max abs diff <= 1e-4) and the same greedy continuation token for token.

The weights are drawn larger than transformers' initialization (which makes every logit tiny and
attention nearly uniform), so that the sliding windows, soft-capping and rope scaling the configs
turn on change the logits far beyond the tolerance; each family's test checks that they do.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import corvid as cv
from corvid import models

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

SIZES = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
             eos_token_id=2)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8}
# family -> (config class, model class, options beyond SIZES, options that turn off what the family adds)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(rope_scaling=LLAMA3, rope_theta=500000.0),
              dict(rope_scaling=None)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=4), dict(sliding_window=None)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(use_sliding_window=True, sliding_window=4, max_window_layers=1, tie_word_embeddings=True),
              dict(use_sliding_window=False)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(partial_rotary_factor=0.5, sliding_window=5),
             dict(partial_rotary_factor=1.0, sliding_window=None)),
    "phi3-longrope": ("Phi3Config", "Phi3ForCausalLM",
                      dict(original_max_position_embeddings=8, max_position_embeddings=32,
                           rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.5, 2.0, 3.0],
                                         "long_factor": [1.0, 4.0, 9.0, 20.0]}),
                      dict(rope_scaling=None)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(), None),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(sliding_window=4, attn_logit_softcapping=4.0, final_logit_softcapping=3.0,
                    query_pre_attn_scalar=16),
               dict(sliding_window=64, attn_logit_softcapping=None, final_logit_softcapping=None)),
}
PROMPT = np.random.default_rng(0).integers(3, 96, size=(2, 12))
NEW_TOKENS = 8


def _hf_model(family: str, options: dict | None = None, seed: int = 0):
    config_cls, model_cls, extra, _ = FAMILIES[family]
    config = getattr(transformers, config_cls)(**{**SIZES, **extra, **(options or {})})
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.25)
            elif "norm" in name:  # (Gemma's norms scale by 1 + weight)
                p.normal_(0.0 if family.startswith("gemma") else 1.0, 0.3)
            else:
                p.normal_(0.0, 0.1)
    return model


def _hf_logits(model, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(ids)).logits.float().numpy()


def _hf_greedy(model, ids: np.ndarray, n: int) -> np.ndarray:
    for _ in range(n):
        ids = np.concatenate([ids, _hf_logits(model, ids)[:, -1].argmax(-1)[:, None]], axis=1)
    return ids


def _greedy(model: models.CausalLM, ids: np.ndarray, n: int) -> np.ndarray:
    """Greedy decoding recomputing the whole sequence at each step, on a fixed length: the prompt
    padded to its final length, the token at position ``t`` read from the logits of ``t - 1`` (a
    causal model's logits there ignore the padding after), so every step is the same graph and
    runs the same kernels."""
    t = ids.shape[1]
    seq = np.concatenate([ids, np.zeros((ids.shape[0], n), ids.dtype)], axis=1)
    for i in range(n):
        seq[:, t + i] = model(cv.Tensor(seq)).argmax(-1).numpy()[:, t + i - 1]
    return seq


def _save(model, folder, **kwargs) -> str:
    model.save_pretrained(str(folder), **kwargs)
    return str(folder)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_logits_and_greedy_tokens_match_transformers(family, tmp_path):
    hf = _hf_model(family)
    model = models.from_pretrained(_save(hf, tmp_path))
    assert model.dtype == cv.float32 and model.config.model_type == family.split("-")[0]
    ref = _hf_logits(hf, PROMPT)
    out = model(cv.Tensor(PROMPT)).numpy()
    assert out.shape == ref.shape and np.abs(out - ref).max() <= 1e-4, np.abs(out - ref).max()
    off = FAMILIES[family][3]
    if off is not None:  # the family's options change the logits far beyond the tolerance
        plain = _hf_model(family, off)
        plain.load_state_dict(hf.state_dict())
        assert np.abs(_hf_logits(plain, PROMPT) - ref).max() > 1e-2
    expected = _hf_greedy(hf, PROMPT, NEW_TOKENS)
    np.testing.assert_array_equal(_greedy(model, PROMPT, NEW_TOKENS), expected)


def test_sharded_checkpoint_and_transformers4_config_layout(tmp_path):
    hf = _hf_model("llama")
    folder = _save(hf, tmp_path, max_shard_size="20KB")
    assert os.path.exists(os.path.join(folder, "model.safetensors.index.json"))
    assert not os.path.exists(os.path.join(folder, "model.safetensors"))
    # transformers 4 wrote rope_theta at the top level and the scaling as rope_scaling
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    rope = config.pop("rope_parameters")
    config["rope_theta"] = rope.pop("rope_theta")
    config["rope_scaling"] = rope
    with open(path, "w") as f:
        json.dump(config, f)
    model = cv.models.from_pretrained(folder)  # (cv.models: imported on first use)
    assert model.config.rope_theta == 500000.0 and model.config.rope_scaling["rope_type"] == "llama3"
    assert np.abs(model(cv.Tensor(PROMPT)).numpy() - _hf_logits(hf, PROMPT)).max() <= 1e-4


def test_bfloat16_checkpoint_loads_as_bfloat16(tmp_path):
    hf = _hf_model("qwen2").to(torch.bfloat16)
    folder = _save(hf, tmp_path)
    model = models.from_pretrained(folder)
    assert model.dtype == cv.bfloat16
    assert {p.dtype for p in model.parameters()} == {cv.bfloat16}
    logits = model(cv.Tensor(PROMPT))
    assert logits.dtype == cv.bfloat16
    # bfloat16 rounds to 3 significant digits: close to transformers' bfloat16 computation
    ref = _hf_logits(hf, PROMPT)
    assert np.abs(logits.astype(cv.float32).numpy() - ref).max() <= 0.1 * np.abs(ref).max()
    # dtype= converts: float32 computation on the bfloat16 weights, as transformers' own loading in float32
    wide = models.from_pretrained(folder, dtype="float32")
    assert wide.dtype == cv.float32
    ref = transformers.Qwen2ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    assert np.abs(wide(cv.Tensor(PROMPT)).numpy() - _hf_logits(ref, PROMPT)).max() <= 1e-4


def test_loading_shares_the_read_tensors_and_runs_no_kernel(tmp_path, monkeypatch):
    """Each parameter holds the buffer the safetensors reader filled, not a copy, and loading runs
    no kernel (no initialization, no cast)."""
    folder = _save(_hf_model("gemma"), tmp_path)
    read, kernels = [], []
    get_tensor = cv.io.SafeTensorsFile.get_tensor

    def recording_get_tensor(self, name):
        t = get_tensor(self, name)
        read.append(t.node.buffer)
        return t

    import corvid.engine.realize as realize

    run = realize.run_schedule
    monkeypatch.setattr(cv.io.SafeTensorsFile, "get_tensor", recording_get_tensor)
    monkeypatch.setattr(realize, "run_schedule", lambda schedule, *a, **k: (kernels.extend(schedule),
                                                                            run(schedule, *a, **k))[1])
    model = models.from_pretrained(folder)
    params = list(model.parameters())
    assert kernels == []
    assert len(params) == len(read) and all(p.node.buffer is not None for p in params)
    assert {id(p.node.buffer) for p in params} == {id(b) for b in read}


def _write_config(folder, **changes) -> str:
    base = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 16, "hidden_size": 8,
            "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({**base, **changes}, f)
    return str(folder)


@pytest.mark.parametrize("changes,message", [
    ({"model_type": "bert", "architectures": ["BertForMaskedLM"]}, "BertForMaskedLM"),
    ({"architectures": ["LlamaForSequenceClassification"]}, "LlamaForSequenceClassification"),
    ({"model_type": "mixtral", "architectures": None}, "model_type 'mixtral'"),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope_type 'dynamic'"),
    ({"hidden_act": "gelu_fast"}, "hidden_act 'gelu_fast'"),
    ({"quantization_config": {"quant_method": "gptq"}}, "quantized.*gptq"),
    ({"layer_types": ["chunked_attention"]}, "layer type 'chunked_attention'"),
])
def test_unsupported_configurations_raise_naming_the_option(tmp_path, changes, message):
    folder = _write_config(tmp_path, **changes)
    cv.save(os.path.join(folder, "model.safetensors"), {"x": cv.zeros(1)})
    with pytest.raises(ValueError, match=message):
        models.from_pretrained(folder)


def test_weights_that_do_not_fit_raise_naming_them(tmp_path):
    folder = _write_config(tmp_path)
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    state = models.CausalLM(config).state_dict()
    state["lm_head.weight"] = cv.zeros(16, 8)
    del state["model.norm.weight"]
    state["model.layers.0.self_attn.q_norm.weight"] = cv.ones(4)
    cv.save(os.path.join(folder, "model.safetensors"), state)
    with pytest.raises(ValueError, match=r"missing 1: model\.norm\.weight; unexpected 1: .*q_norm\.weight"):
        models.from_pretrained(folder)
    os.remove(os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "pytorch_model.bin"), "wb") as f:
        f.write(b"\x80\x04")
    with pytest.raises(ValueError, match="pickled"):
        models.from_pretrained(folder)
    with pytest.raises(FileNotFoundError, match="config.json"):
        models.from_pretrained(tmp_path / "nothing")


def test_rope_scaling_matches_transformers_frequencies():
    """linear and yarn (no family test turns them on), llama3 and longrope: the frequencies and
    the cos/sin scale transformers computes."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cases = [({"rope_type": "linear", "factor": 4.0}, {}),
             ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}, {}),
             ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 16,
               "mscale": 0.707, "mscale_all_dim": 0.5, "truncate": False}, {}),
             (LLAMA3, {}),
             ({"rope_type": "longrope", "short_factor": list(np.linspace(1, 2, 32)),
               "long_factor": list(np.linspace(1, 8, 32)), "original_max_position_embeddings": 32},
              {"seq_len": 100})]
    for scaling, kwargs in cases:
        config = transformers.LlamaConfig(hidden_size=256, num_attention_heads=4, max_position_embeddings=128,
                                          rope_scaling=dict(scaling), rope_theta=500000.0)
        inv_freq, scale = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](config, "cpu", **kwargs)
        rope = cv.nn.RotaryEmbedding(64, 500000.0, scaling=config.rope_parameters, max_position_embeddings=128)
        mine = rope._frequencies(kwargs.get("seq_len", 1))
        np.testing.assert_allclose(mine, inv_freq.numpy(), rtol=1e-6, err_msg=scaling["rope_type"])
        assert rope.attention_scaling == pytest.approx(scale)

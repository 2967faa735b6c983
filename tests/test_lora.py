"""corvid.nn.lora: LoRALinear against its formula (values and gradients, against numpy and torch),
apply_lora on a CausalLM, examples/gpt.py's GPT and nested containers, training that moves only
the adapters, merging, saving and loading the adapters alone, the errors, and examples/lora.py
end to end.

The CausalLM tests share one tiny config and batch shape, so they share compiled kernels."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import corvid as cv
from corvid import nn
from corvid.models import CausalLM
from corvid.nn import functional as F
from corvid.nn.lora import LoRALinear, apply_lora, load_lora, lora_state_dict, merge_lora, save_lora

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = {"model_type": "llama", "vocab_size": 32, "hidden_size": 16, "intermediate_size": 32,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
IDS = np.random.default_rng(0).integers(0, 32, (2, 9))
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def tiny_model(seed: int = 0) -> CausalLM:
    cv.manual_seed(seed)
    return CausalLM(CONFIG)


def lora_names(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if isinstance(m, LoRALinear)]


def set_adapters(model: nn.Module, seed: int = 1) -> None:
    """Give every adapter random values (B is zero after apply_lora, so the adapters do nothing)."""
    rng = np.random.default_rng(seed)
    with cv.no_grad():
        for m in model.modules():
            if isinstance(m, LoRALinear):
                m.lora_A.assign(cv.Tensor(rng.normal(0, 0.3, m.lora_A.shape).astype(np.float32)))
                m.lora_B.assign(cv.Tensor(rng.normal(0, 0.3, m.lora_B.shape).astype(np.float32)))


# --- LoRALinear ---------------------------------------------------------------------------------------------


def test_lora_linear_is_its_base_at_init_and_the_formula_after():
    cv.manual_seed(0)
    base = nn.Linear(6, 5)
    layer = LoRALinear(base, r=3, alpha=6)
    assert layer.base_layer is base and layer.scaling == 2.0
    assert layer.lora_A.shape == (3, 6) and layer.lora_B.shape == (5, 3)
    assert not np.any(layer.lora_B.numpy()) and np.any(layer.lora_A.numpy())
    assert np.abs(layer.lora_A.numpy()).max() <= 1 / np.sqrt(6)  # a Linear's initialization
    x = cv.randn(4, 2, 6)
    np.testing.assert_array_equal(layer(x).numpy(), base(x).numpy())
    set_adapters(layer)
    w, b = base.weight.numpy(), base.bias.numpy()
    a, bb = layer.lora_A.numpy(), layer.lora_B.numpy()
    expected = x.numpy() @ (w + 2.0 * bb @ a).T + b
    np.testing.assert_allclose(layer(x).numpy(), expected, rtol=1e-5, atol=1e-5)
    assert [n for n, p in layer.named_parameters() if p.requires_grad] == ["lora_A", "lora_B"]
    assert list(layer.state_dict()) == ["lora_A", "lora_B", "base_layer.weight", "base_layer.bias"]


def test_lora_linear_gradients_reach_only_the_adapters():
    cv.manual_seed(0)
    layer = LoRALinear(nn.Linear(5, 4), r=2, alpha=3)
    set_adapters(layer)
    x, g = np.random.default_rng(2).normal(size=(2, 3, 5)), np.random.default_rng(3).normal(size=(2, 3, 4))
    x, g = x.astype(np.float32), g.astype(np.float32)
    (layer(cv.Tensor(x)) * cv.Tensor(g)).sum().backward()
    assert layer.base_layer.weight.grad is None and layer.base_layer.bias.grad is None
    a, b, s = layer.lora_A.numpy(), layer.lora_B.numpy(), layer.scaling
    xf, gf = x.reshape(-1, 5), g.reshape(-1, 4)
    # y = x W^T + b + s (x A^T) B^T: dB = s g^T (x A^T), dA = s (g B)^T x
    np.testing.assert_allclose(layer.lora_B.grad.numpy(), s * gf.T @ (xf @ a.T), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.lora_A.grad.numpy(), s * (gf @ b).T @ xf, rtol=1e-5, atol=1e-5)


def test_lora_linear_matches_a_torch_computation():
    torch = pytest.importorskip("torch")
    cv.manual_seed(0)
    layer = LoRALinear(nn.Linear(7, 3), r=4, alpha=2)
    set_adapters(layer)
    x = np.random.default_rng(4).normal(size=(5, 7)).astype(np.float32)
    loss = (layer(cv.Tensor(x)).tanh() ** 2).sum()
    loss.backward()
    w, b = (torch.tensor(t.numpy()) for t in (layer.base_layer.weight, layer.base_layer.bias))
    a, bb = (torch.tensor(t.numpy(), requires_grad=True) for t in (layer.lora_A, layer.lora_B))
    tx = torch.tensor(x)
    ref = ((torch.nn.functional.linear(tx, w, b) + (tx @ a.T @ bb.T) * 0.5).tanh() ** 2).sum()
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)
    np.testing.assert_allclose(layer.lora_A.grad.numpy(), a.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(layer.lora_B.grad.numpy(), bb.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_lora_linear_dropout_and_dtype():
    cv.manual_seed(0)
    layer = LoRALinear(nn.Linear(8, 8, bias=False), r=2, dropout=0.5)
    set_adapters(layer)
    x = cv.randn(3, 8)
    plain = layer.base_layer(x).numpy() + layer.scaling * (x.numpy() @ layer.lora_A.numpy().T) @ layer.lora_B.numpy().T
    layer.eval()
    np.testing.assert_allclose(layer(x).numpy(), plain, rtol=1e-5, atol=1e-5)  # no dropout in eval mode
    layer.train()
    assert not np.allclose(layer(x).numpy(), plain, atol=1e-3)  # the adapter's input is dropped
    half = LoRALinear(nn.Linear(8, 4).to(cv.bfloat16), r=2, dtype=cv.float32)
    assert half.lora_A.dtype == cv.float32 and half(cv.ones(2, 8, dtype=cv.bfloat16)).dtype == cv.bfloat16
    assert LoRALinear(nn.Linear(8, 4).to(cv.bfloat16), r=2).lora_B.dtype == cv.bfloat16


# --- apply_lora -------------------------------------------------------------------------------------------


def test_apply_lora_on_a_causal_lm_targets_exactly_the_named_projections():
    model = tiny_model()
    ref = model(cv.Tensor(IDS)).numpy()
    assert apply_lora(model, r=4, alpha=8) is model
    assert lora_names(model) == [f"model.layers.{i}.self_attn.{p}" for i in range(2) for p in ("q_proj", "v_proj")]
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable == [f"{layer}.{ab}" for layer in lora_names(model) for ab in ("lora_A", "lora_B")]
    np.testing.assert_array_equal(model(cv.Tensor(IDS)).numpy(), ref)  # B = 0: exactly the same logits
    every = apply_lora(tiny_model(), r=2, target=PROJECTIONS)
    assert len(lora_names(every)) == 14 and not any(n.startswith("lm_head") for n in lora_names(every))
    one = apply_lora(tiny_model(), r=2, target="model.layers.1.mlp.up_proj")
    assert lora_names(one) == ["model.layers.1.mlp.up_proj"]
    picked = apply_lora(tiny_model(), r=2, target=lambda name, layer: layer.out_features == 8)  # the k/v projections
    assert lora_names(picked) == [f"model.layers.{i}.self_attn.{p}" for i in range(2) for p in ("k_proj", "v_proj")]


def test_apply_lora_on_the_gpt_example_and_nested_containers():
    spec = importlib.util.spec_from_file_location("corvid_examples_gpt_lora", os.path.join(ROOT, "examples", "gpt.py"))
    gpt = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # (its dataclass looks itself up there)
    spec.loader.exec_module(gpt)
    model = gpt.GPT(gpt.GPTConfig(vocab_size=20, block_size=8, n_embd=16, n_head=2, n_layer=2))
    x = cv.Tensor(IDS[:, :8] % 20)
    ref = model(x).numpy()
    apply_lora(model, r=2, target=("c_attn", "attn.c_proj"))
    assert lora_names(model) == [f"h.{i}.attn.{p}" for i in range(2) for p in ("c_attn", "c_proj")]
    set_adapters(model)
    assert not np.allclose(model(x).numpy(), ref, atol=1e-4)
    adapted = model(x).numpy()
    merge_lora(model)
    np.testing.assert_allclose(model(x).numpy(), adapted, rtol=1e-4, atol=1e-5)

    class Holder(nn.Module):  # modules in a plain list, a tuple and a dict, one of them shared
        def __init__(self):
            super().__init__()
            shared = nn.Linear(4, 4)
            self.items = [shared, nn.Linear(4, 4)]
            self.pair = (nn.ReLU(), shared)
            self.table = {"proj": nn.Linear(4, 4)}
            self.seq = nn.Sequential(nn.Linear(4, 4), nn.ModuleDict({"proj": nn.Linear(4, 4)}))

    h = Holder()
    apply_lora(h, r=1, target=lambda name, layer: True)
    assert isinstance(h.items[0], LoRALinear) and h.pair[1] is h.items[0] and isinstance(h.pair, tuple)
    assert isinstance(h.items[1], LoRALinear) and isinstance(h.table["proj"], LoRALinear)
    assert isinstance(h.seq[0], LoRALinear) and isinstance(h.seq[1]["proj"], LoRALinear)
    assert len(lora_names(h)) == 5  # the shared layer adapted once
    merge_lora(h)
    assert type(h.items[0]) is nn.Linear and h.pair[1] is h.items[0] and type(h.seq[1]["proj"]) is nn.Linear


def test_a_layer_read_as_a_weight_gets_the_update():
    model = tiny_model()  # CausalLM computes its logits from lm_head.weight, without calling lm_head
    apply_lora(model, r=2, target="lm_head")
    ids = cv.Tensor(IDS)
    set_adapters(model)
    head = model.lm_head
    h = model.model(ids).numpy()
    w = head.base_layer.weight.numpy() + head.scaling * head.lora_B.numpy() @ head.lora_A.numpy()
    adapted = model(ids)
    np.testing.assert_allclose(adapted.numpy(), h @ w.T, rtol=1e-4, atol=1e-5)
    assert head.bias is None
    adapted.sum().backward()
    assert head.lora_A.grad is not None and head.base_layer.weight.grad is None
    merge_lora(model)
    np.testing.assert_allclose(model(ids).numpy(), adapted.numpy(), rtol=1e-4, atol=1e-5)


# --- training, merging, saving ----------------------------------------------------------------------------


def test_training_moves_only_the_adapters_and_lowers_the_loss():
    model = apply_lora(tiny_model(), r=4, alpha=8, target=PROJECTIONS)
    frozen = {k: v.numpy().copy() for k, v in model.state_dict().items() if ".lora_" not in k}
    opt = cv.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.02)
    x, y = cv.Tensor(IDS[:, :-1]), cv.Tensor(IDS[:, 1:])

    @cv.jit
    def step(x, y):
        opt.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    losses = [step(x, y).item() for _ in range(8)]
    assert losses[-1] < losses[0] - 0.05, losses
    after = {k: v.numpy() for k, v in model.state_dict().items() if ".lora_" not in k}
    assert after.keys() == frozen.keys()
    for k, v in frozen.items():
        np.testing.assert_array_equal(after[k], v, err_msg=k)  # bit-identical
    assert any(np.any(m.lora_B.numpy()) for m in model.modules() if isinstance(m, LoRALinear))


def test_merge_gives_the_same_outputs_and_plain_linear_layers():
    model = tiny_model()
    keys = list(model.state_dict())
    apply_lora(model, r=4, target=PROJECTIONS)
    set_adapters(model)
    ids = cv.Tensor(IDS)
    adapted = model(ids).numpy()
    assert not np.allclose(adapted, tiny_model()(ids).numpy(), atol=1e-3)
    layer = model.model.layers[0].self_attn.q_proj
    assert merge_lora(model) is model
    np.testing.assert_allclose(model(ids).numpy(), adapted, rtol=1e-4, atol=1e-5)
    assert lora_names(model) == [] and list(model.state_dict()) == keys
    assert all(type(getattr(model.model.layers[1].mlp, p)) is nn.Linear for p in ("gate_proj", "up_proj", "down_proj"))
    merged = model.model.layers[0].self_attn.q_proj
    x = cv.ones(1, 16)
    np.testing.assert_allclose(layer(x).numpy(), merged(x).numpy(), rtol=1e-5, atol=1e-6)  # the LoRALinear unchanged
    single = LoRALinear(nn.Linear(3, 2), r=1)
    assert type(merge_lora(single)) is nn.Linear


def test_adapters_save_and_load_alone(tmp_path):
    model = apply_lora(tiny_model(), r=4, alpha=8)
    set_adapters(model)
    ids = cv.Tensor(IDS)
    adapted = model(ids).numpy()
    state = lora_state_dict(model)
    assert list(state) == [f"model.layers.{i}.self_attn.{p}.{ab}" for i in range(2) for p in ("q_proj", "v_proj")
                           for ab in ("lora_A", "lora_B")]
    path = str(tmp_path / "adapters.safetensors")
    save_lora(path, model)
    assert sorted(cv.load(path)) == sorted(state)
    with cv.safe_open(path) as f:
        assert json.loads(f.metadata()["lora_alpha"]) == {name: 8 for name in lora_names(model)}
    full = str(tmp_path / "full.safetensors")
    cv.save(full, model.state_dict())
    assert os.path.getsize(path) < os.path.getsize(full) / 4

    fresh = apply_lora(tiny_model(), r=4, alpha=8)  # the same base weights (same seed), zero adapters
    A = fresh.model.layers[0].self_attn.q_proj.lora_A
    assert load_lora(fresh, path) is fresh
    assert fresh.model.layers[0].self_attn.q_proj.lora_A is A  # loaded in place
    np.testing.assert_array_equal(fresh(ids).numpy(), adapted)
    again = apply_lora(tiny_model(), r=4, alpha=8)
    cv.save(str(tmp_path / "plain.safetensors"), lora_state_dict(model))
    load_lora(again, cv.load(str(tmp_path / "plain.safetensors")))
    np.testing.assert_array_equal(again(ids).numpy(), adapted)
    peft = {f"base_model.model.{k}.weight": v.numpy() for k, v in state.items()}  # peft's names, numpy values
    np.testing.assert_array_equal(load_lora(apply_lora(tiny_model(), r=4, alpha=8), peft)(ids).numpy(), adapted)


# --- errors -----------------------------------------------------------------------------------------------


def test_errors_name_the_problem(tmp_path):
    model = tiny_model()
    with pytest.raises(ValueError, match=r"no layer of CausalLM is named 'qproj'.*model\.layers\.0\.mlp\.down_proj"):
        apply_lora(model, target="qproj")
    with pytest.raises(ValueError, match="named 'v_prj'"):
        apply_lora(model, target=("q_proj", "v_prj"))
    with pytest.raises(ValueError, match="'self_attn' is a Linear: model.layers.0.self_attn is a CausalSelfAttention"):
        apply_lora(model, target="self_attn")
    with pytest.raises(ValueError, match="predicate picks no Linear layer"):
        apply_lora(model, target=lambda name, layer: False)
    with pytest.raises(TypeError, match="target must be"):
        apply_lora(model, target=3)
    for r in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="rank r must be a positive int"):
            apply_lora(model, r=r)
    with pytest.raises(ValueError, match="alpha must be a positive number"):
        apply_lora(model, alpha=0)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        apply_lora(model, dropout=1.0)
    with pytest.raises(TypeError, match="LoRALinear wraps an nn.Linear, got Embedding"):
        LoRALinear(nn.Embedding(4, 2))
    with pytest.raises(TypeError, match="adapters need a floating-point dtype, got int32"):
        apply_lora(model, dtype=cv.int32)
    with pytest.raises(TypeError, match="itself a Linear"):
        apply_lora(nn.Linear(2, 2), target=lambda name, layer: True)
    assert lora_names(model) == []  # nothing was changed by the failed calls
    assert all(p.requires_grad for p in model.parameters())
    replaced = LoRALinear(nn.Linear(2, 2), r=1)
    replaced.base_layer = nn.Identity()  # as corvid.quant.quantize replaces Linear layers
    with pytest.raises(TypeError, match="its base layer is now Identity, not a Linear"):
        merge_lora(replaced)
    for f in (merge_lora, lora_state_dict):
        with pytest.raises(ValueError, match="has no LoRA layers"):
            f(model)

    trained = apply_lora(tiny_model(), r=4, alpha=8)
    with pytest.raises(ValueError, match=r"model\.layers\.0\.self_attn\.q_proj, model\.layers\.1\.self_attn\.q_proj "
                                         "already has LoRA adapters"):
        apply_lora(trained, target="q_proj")
    path = str(tmp_path / "a.safetensors")
    save_lora(path, trained)
    with pytest.raises(ValueError, match=r"has no LoRA layers; call apply_lora\(model, r=4, alpha=8, "
                                         r"target=\('q_proj', 'v_proj'\)\) first"):
        load_lora(tiny_model(), path)
    with pytest.raises(ValueError, match=r"shape \(2, 16\) in the adapters, \(4, 16\) in the model.*rank 2: "
                                         r"apply_lora\(model, r=2"):
        load_lora(apply_lora(tiny_model(), r=4), lora_state_dict(apply_lora(tiny_model(), r=2)))
    with pytest.raises(ValueError, match="trained with alpha=8, the model's layer has alpha=16"):
        load_lora(apply_lora(tiny_model(), r=4, alpha=16), path)
    with pytest.raises(ValueError, match=r"adapters for layers without LoRA in the model: model\.layers\.0\.self_attn"
                                         r"\.v_proj\.lora_A"):
        load_lora(apply_lora(tiny_model(), r=4, alpha=8, target="q_proj"), path)
    with pytest.raises(ValueError, match=r"no adapters for the model's model\.layers\.0\.self_attn\.k_proj\.lora_A"):
        load_lora(apply_lora(tiny_model(), r=4, alpha=8, target=("q_proj", "k_proj", "v_proj")), path)
    with pytest.raises(ValueError, match="entries that are not LoRA adapters: model.norm.weight"):
        load_lora(trained, {**lora_state_dict(trained), "model.norm.weight": cv.ones(16)})
    with pytest.raises(ValueError, match="writes safetensors"):
        save_lora(str(tmp_path / "a.npz"), trained)


# --- the example ------------------------------------------------------------------------------------------


def test_example_runs_end_to_end(tmp_path):
    data = tmp_path / "text.txt"
    data.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 40)
    out = tmp_path / "adapters.safetensors"
    base = tmp_path / "base.safetensors"
    cmd = [sys.executable, os.path.join(ROOT, "examples", "lora.py"), "--data", str(data), "--steps", "6",
           "--pretrain-steps", "3", "--rank", "2", "--out", str(out), "--save-base", str(base), "--log-every", "3",
           "--batch-size", "4", "--block-size", "16"]
    env = {**os.environ, "PYTHONPATH": ROOT}
    run = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    text = run.stdout
    for expected in ("pretrain step    3: loss", "LoRA step    6: loss", "trainable parameters of", "adapters saved to",
                     "base weights unchanged: True", "reloaded adapters", "merged: layers ['Linear']"):
        assert expected in text, text
    assert out.exists() and base.exists() and os.path.getsize(out) < os.path.getsize(base) / 4
    assert all(".lora_" in k for k in cv.load(str(out)))
    again = subprocess.run(cmd[:2] + ["--data", str(data), "--steps", "2", "--base", str(base), "--out", str(out),
                                      "--batch-size", "4", "--block-size", "16", "--rank", "2"],
                           check=False, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0 and "base model: " in again.stdout and "pretrain step" not in again.stdout, \
        again.stdout + again.stderr

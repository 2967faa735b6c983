"""Loading a Hugging Face checkpoint folder: :func:`from_pretrained`.

A folder written by ``transformers``' ``save_pretrained`` (or downloaded from the hub) holds
``config.json`` and the weights as ``model.safetensors``, or as shards listed by
``model.safetensors.index.json`` (``{"weight_map": {tensor name: shard file}}``). Pickled
checkpoints (``pytorch_model.bin``) are refused: loading them would run code from the file.

The model is first built on corvid's ``NULL`` device, where parameters allocate nothing and
their initialization computes nothing; each parameter is then replaced by the tensor read from
the file (:func:`corvid.safe_open`: positioned reads of that tensor's bytes, no pickle). A
tensor already in the model's dtype becomes the parameter as it is, sharing its memory: no
copy and no kernel. Only tensors of another dtype (when ``dtype`` asks for one, or a file
mixing dtypes) are converted, one at a time. The shards' headers are read first: names, shapes
and dtypes are checked against the configuration before any weight is read.

With ``quantize="int8"`` or ``"int4"`` each linear layer's weight is quantized as it is read
(:func:`corvid.quant.quantize_weight`, realized at once) and dropped before the next tensor is
read, so no more than one floating-point weight matrix is held at a time: the peak memory of
loading is the quantized model plus one layer's float weight, not the float model plus the
quantized one (which loading and then calling ``cv.quantize`` holds at its end).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
from typing import Any

from .. import nn
from ..dtype import DType, to_dtype
from ..io import safe_open
from ..nn.module import replace_modules
from ..quant import (DEFAULT_GROUP_SIZE, MODES, _check_group_value, _embeddings_to_quantize, _quantized_embedding,
                     _quantized_layer, _to_quantize)
from ..runtime.device import canonical_device, get_device
from .config import CausalLMConfig
from .llama import CausalLM

__all__ = ["from_pretrained"]

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
GENERATION = "generation_config.json"  # (its token ids override config.json's, as transformers does)
_GENERATION_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")

# tensors some checkpoints carry that the model computes itself
_IGNORED = (".rotary_emb.inv_freq",)


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"from_pretrained: {path} is not valid JSON ({e})") from None


def _shards(folder: str) -> dict[str, list[str] | None]:
    """``{shard path: the tensor names to read from it (None: all)}``."""
    index = os.path.join(folder, INDEX)
    if os.path.exists(index):
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"from_pretrained: {index} has no weight_map")
        files: dict[str, list[str] | None] = {}
        for name, file in weight_map.items():
            if not isinstance(file, str) or os.path.basename(file) != file or file in ("", ".", ".."):
                raise ValueError(f"from_pretrained: {index} maps {name!r} to {file!r}, not a file of the folder")
            names = files.setdefault(os.path.join(folder, file), [])
            names.append(name)  # type: ignore[union-attr]
        return files
    single = os.path.join(folder, WEIGHTS)
    if os.path.exists(single):
        return {single: None}
    pickled = [f for f in ("pytorch_model.bin", "pytorch_model.bin.index.json")
               if os.path.exists(os.path.join(folder, f))]
    if pickled:
        raise ValueError(f"from_pretrained: {folder} holds {pickled[0]}, a pickled PyTorch checkpoint, which corvid "
                         "does not load (unpickling runs code from the file); convert it to safetensors "
                         "(save_pretrained(..., safe_serialization=True))")
    raise FileNotFoundError(f"from_pretrained: {folder} has neither {WEIGHTS} nor {INDEX}")


def _headers(folder: str, files: dict[str, list[str] | None]) -> dict[str, tuple[str, DType, tuple[int, ...]]]:
    """``{tensor name: (shard path, dtype, shape)}`` from the shards' headers, reading no weights."""
    found: dict[str, tuple[str, DType, tuple[int, ...]]] = {}
    for path, names in files.items():
        with safe_open(path) as f:
            entries = f._entries  # (name -> (dtype, shape, begin, end): the header, validated on opening)
            for name in f.keys() if names is None else names:
                if name not in entries:
                    raise KeyError(f"{path} has no tensor {name!r}; it has {sorted(entries)[:10]}")
                if name in found:
                    raise ValueError(f"from_pretrained: tensor {name!r} is in two shards of {folder}")
                d, shape = entries[name][:2]
                found[name] = (path, d, shape)
    return found


def _model_dtype(dtypes: dict[str, DType], folder: str) -> DType:
    """The dtype most of the floating-point tensors have; ValueError for other tensors."""
    odd = sorted(k for k, d in dtypes.items() if not d.is_float)
    if odd:
        raise ValueError(f"from_pretrained: {folder} holds non-floating-point weights ({odd[:3]}: "
                         f"{dtypes[odd[0]].name}); quantized checkpoints are not supported")
    return collections.Counter(dtypes.values()).most_common(1)[0][0]


def from_pretrained(folder: str | os.PathLike, dtype: Any = None, device: str | None = None,
                    quantize: str | None = None, group_size: int | None = DEFAULT_GROUP_SIZE,
                    embeddings: bool = False) -> CausalLM:
    """Load the language model stored in a Hugging Face checkpoint folder.

    The folder holds ``config.json`` and ``model.safetensors``, or shards listed by
    ``model.safetensors.index.json``; the result is a :class:`~corvid.models.CausalLM`. A
    ``generation_config.json`` there sets the token ids ``generate`` stops at (overriding
    ``config.json``'s, as transformers does) and is kept as ``model.generation_config``.

    ``dtype`` (a corvid dtype or its name) is the dtype to compute in; None keeps the
    checkpoint's own (a bfloat16 checkpoint gives a bfloat16 model). ``device`` places the
    weights (the default device if None). A tensor already in the chosen dtype becomes its
    parameter without a copy (see the module's description); the model is returned in
    evaluation mode.

    ``quantize`` ("int8" or "int4"; None, the default, keeps floating point) quantizes the
    linear layers while loading, with ``group_size`` inputs a scale (128 unless told; None: one
    scale per row): each weight is quantized as soon as it is read, its quantized buffers
    computed before the next weight is read, so the floating-point model is never held whole
    (peak memory stays near the quantized model's size, not the float one's). The model is the
    one ``cv.quantize(from_pretrained(folder, dtype, device), quantize, group_size)`` gives (the
    same layers quantized, every ``Linear``; a head tied to the embedding stays in float; the
    same ``qweight`` and ``scales``, so the same logits). ``embeddings=True`` quantizes the token
    embedding too, as it is read (``cv.quantize(..., embeddings=True)``: a tied head then reads
    the quantized table; for Llama 3.2 1B that is a fifth of the weights). ValueError for another
    mode, or a group size that does not divide some layer's ``in_features``, before any weight is
    read.

    Errors: FileNotFoundError for a folder without ``config.json`` or weights; ValueError
    naming what is not supported (the architecture or an option of ``config.json``: see
    :meth:`CausalLMConfig.from_dict`; a pickled ``pytorch_model.bin``; quantized weights), and
    for weights that do not fit the configuration (missing, unexpected or of another shape:
    the message lists them); ``CorruptFileError`` for a damaged safetensors file.

    >>> import json, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> config = {"model_type": "llama", "vocab_size": 32, "hidden_size": 16, "intermediate_size": 32,
    ...           "num_hidden_layers": 1, "num_attention_heads": 2, "tie_word_embeddings": True}
    >>> with open(os.path.join(folder, "config.json"), "w") as f:
    ...     json.dump(config, f)
    >>> weights = {k: v.astype(cv.bfloat16) for k, v in CausalLM(config).state_dict().items()}
    >>> cv.save(os.path.join(folder, "model.safetensors"), weights)
    >>> model = from_pretrained(folder)
    >>> model.dtype.name, model(cv.Tensor([[1, 2, 3]])).shape
    ('bfloat16', (1, 3, 32))
    >>> small = from_pretrained(folder, quantize="int4", group_size=16)
    >>> small.model.layers[0].mlp.down_proj
    QuantizedLinear(in_features=32, out_features=16, bias=False, mode='int4', group_size=16)
    """
    if quantize is not None and (not isinstance(quantize, str) or quantize not in MODES):
        raise ValueError(f"from_pretrained: quantize must be one of {', '.join(repr(m) for m in MODES)} or None "
                         f"(floating point), got {quantize!r}")
    _check_group_value(group_size, "from_pretrained")
    if not isinstance(embeddings, bool) or (embeddings and quantize is None):
        raise ValueError(f"from_pretrained: embeddings must be a bool, and True only with quantize= (the mode to "
                         f"quantize the embedding in), got {embeddings!r} with quantize={quantize!r}")
    mode = quantize
    folder = os.fspath(folder)
    path = os.path.join(folder, CONFIG)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"from_pretrained: {folder} has no {CONFIG} (a Hugging Face checkpoint folder "
                                "holds config.json and model.safetensors)")
    config = CausalLMConfig.from_dict(_read_json(path))
    generation = _generation_config(folder)
    ids = {k: generation[k] for k in _GENERATION_IDS if generation.get(k) is not None}
    if ids:
        config = dataclasses.replace(config, **ids)
    files = _shards(folder)
    headers = _headers(folder, files)
    model = CausalLM._skeleton(config)
    places = dict(model.named_parameters())
    for name in [k for k in headers if k.endswith(_IGNORED) or (k == "lm_head.weight" and config.tie_word_embeddings)]:
        del headers[name]  # (a tied head some checkpoints store anyway; inv_freq tables the model computes)
    missing, unexpected = sorted(set(places) - set(headers)), sorted(set(headers) - set(places))
    shapes = [f"{k} {headers[k][2]} (expected {places[k].shape})" for k in sorted(set(places) & set(headers))
              if headers[k][2] != places[k].shape]
    if missing or unexpected or shapes:
        arch = f"{config.model_type} ({config.num_hidden_layers} layers)"
        problems = [f"{what} {len(names)}: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}"
                    for what, names in (("missing", missing), ("unexpected", unexpected), ("other shapes", shapes))
                    if names]
        raise ValueError(f"from_pretrained: the weights in {folder} do not fit its {arch} configuration: "
                         + "; ".join(problems))
    target = to_dtype(dtype) if dtype is not None else _model_dtype({k: h[1] for k, h in headers.items()}, folder)
    if not target.is_float:
        raise ValueError(f"from_pretrained: dtype must be a floating-point dtype, got {target.name}")
    # the Linear layers cv.quantize(model, mode, group_size) would replace, by their weight's name
    linears = {} if mode is None else _to_quantize(model, mode, group_size, where="from_pretrained")
    chosen = {f"{name}.weight": key for key, (name, _) in linears.items()}
    tables = {} if mode is None or not embeddings else _embeddings_to_quantize(model, mode, group_size,
                                                                                 where="from_pretrained")
    chosen_tables = {f"{name}.weight": key for key, (name, _) in tables.items()}
    modules = dict(model.named_modules())
    swap: dict[int, nn.Module] = {}
    # (the float weights read and dropped while quantizing leave blocks of their sizes pooled: given
    # back at the end, where nothing will ask for those sizes again)
    allocator = get_device(canonical_device(device)).allocator if mode is not None else None
    mark = allocator.mark() if allocator is not None else 0
    for path in files:  # (one shard open at a time, its tensors read one at a time)
        with safe_open(path, device=device) as f:
            for name in sorted(k for k, h in headers.items() if h[0] == path):
                t = f.get_tensor(name)
                if not t.dtype.is_float:
                    raise ValueError(f"from_pretrained: {name} is {t.dtype.name}; quantized checkpoints are not "
                                     "supported")
                # (a Parameter is realized at once: a converted tensor's original is freed before the next is read)
                p = nn.Parameter(t if t.dtype == target else t.astype(target))
                del t
                if name in chosen:
                    # quantized now, its buffers realized before the next weight is read: the float
                    # weight is freed here, so no more than one is ever held (cv.quantize on the
                    # loaded model would hold all of them and the quantized ones together)
                    swap[chosen[name]] = _quantized_layer(p, None, mode, group_size)
                elif name in chosen_tables:
                    key = chosen_tables[name]
                    swap[key] = _quantized_embedding(p, mode, group_size, tables[key][1].padding_idx)
                else:
                    owner, _, leaf = name.rpartition(".")
                    setattr(modules[owner], leaf, p)
                quantized = name in chosen or name in chosen_tables
                big = quantized and p.size * p.dtype.itemsize >= _TRIM_BYTES
                del p
                if big and allocator is not None:
                    # a large float weight read and quantized (a token embedding: 525 MB) left blocks
                    # of sizes no other weight asks for: given back now, not at the end (the process
                    # held them through the whole load: 1.9x the int4 model's size at its peak)
                    allocator.trim(since=mark)
    for key, (_, linear) in linears.items():
        swap[key].bias = linear.bias  # (the Parameter just loaded, as from_linear keeps the Linear's)
    replace_modules(model, swap)
    if allocator is not None:
        allocator.trim(since=mark)
    model.generation_config = generation
    return model.eval()


_TRIM_BYTES = 64 << 20  # a quantized weight at least this large gives its read's pooled blocks back at once


def _generation_config(folder: str) -> dict[str, Any]:
    """The folder's ``generation_config.json`` ({} without one). Its ``eos_token_id`` (one id or
    a list: Llama 3 Instruct stops at any of three) is what ``generate`` stops at by default;
    the rest (``temperature``, ``top_p``, ...) is kept as ``model.generation_config`` for the
    caller to pass on."""
    path = os.path.join(folder, GENERATION)
    if not os.path.isfile(path):
        return {}
    found = _read_json(path)
    if not isinstance(found, dict):
        raise ValueError(f"from_pretrained: {path} holds {type(found).__name__}, not a JSON object")  # noqa: TRY004
    for key in _GENERATION_IDS:
        v = found.get(key)
        ok = v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0) or (
            key == "eos_token_id" and isinstance(v, list) and all(isinstance(i, int) and i >= 0 for i in v))
        if not ok:
            raise ValueError(f"from_pretrained: {path}: {key} must be a token id"
                             f"{' or a list of them' if key == 'eos_token_id' else ''}, got {v!r}")
    return found

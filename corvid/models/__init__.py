"""corvid.models: pretrained language models from Hugging Face checkpoint folders.

:func:`from_pretrained` reads a folder's ``config.json`` and safetensors weights (one file or
shards) into a :class:`CausalLM`, the one implementation of the decoder-only transformers of the
Llama family: Llama 2, 3 and 3.1 (with ``"llama3"`` rope scaling), Mistral, Qwen2, Phi-3,
Gemma and Gemma 2 (``architectures`` ``LlamaForCausalLM``, ``MistralForCausalLM``,
``Qwen2ForCausalLM``, ``Phi3ForCausalLM``, ``GemmaForCausalLM``, ``Gemma2ForCausalLM``).
Anything else raises ValueError naming what is not supported. The model's ``forward`` maps token
ids ``(batch, T)`` to next-token logits ``(batch, T, vocab_size)``; its parameters keep
``transformers``' names, so ``state_dict()`` round-trips a checkpoint.

The building blocks are in :mod:`corvid.nn`: :class:`~corvid.nn.RotaryEmbedding`,
:class:`~corvid.nn.CausalSelfAttention`, :class:`~corvid.nn.GatedMLP` and
:class:`~corvid.nn.GemmaRMSNorm`.

:meth:`CausalLM.generate` (and its iterator form :meth:`CausalLM.stream`) continues prompts,
greedily or sampling (:func:`sample`: temperature, top-k, top-p, with a :mod:`corvid.random`
key), with a static :class:`KVCache` and one compiled decode step replayed for every token
(:mod:`corvid.models.generation`); ``examples/llm.py`` runs a checkpoint folder from the
command line.

>>> from corvid import models
>>> config = {"model_type": "gemma2", "vocab_size": 40, "hidden_size": 16, "intermediate_size": 32,
...           "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
...           "sliding_window": 4}
>>> model = models.CausalLM(config)
>>> ids = cv.Tensor([[5, 7, 11]])
>>> for _ in range(3):                               # greedy decoding, the whole sequence each step
...     ids = cv.cat([ids, model(ids)[:, -1:].argmax(-1)], axis=1)
>>> ids.shape
(1, 6)
>>> model.generate([5, 7, 11], max_new_tokens=3, temperature=0).tolist() == ids[:, 3:].tolist()   # with a cache
True
"""

from .cache import KVCache
from .config import CausalLMConfig
from .generation import sample
from .llama import CausalLM, Decoder, DecoderLayer
from .loading import from_pretrained

__all__ = ["CausalLM", "CausalLMConfig", "Decoder", "DecoderLayer", "KVCache", "from_pretrained", "sample"]
